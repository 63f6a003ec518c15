"""Escapes a Dockerfile's RUN step tries against the builder (docs/images.md, "Dockerfile builds"):
shared by tests/test_attacks.py (a representative slice in the gate) and bench/bench_attacks.py
(every one).

The host gets a canary: a fresh world-readable file whose path the Dockerfile names and whose
content it never holds. Each escape writes what it reached to /app/escape/<name>.out (its first
line says it ran) and tries to leave a marker in the host's /tmp, /var/tmp and /dev/shm. A build
has escaped when any trace of the canary's content is in the build's log or image, an .out
reports a host thing it SAW, or a marker is on the host.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HOST_DIRS = ("/tmp", "/var/tmp", "/dev/shm")

# Every escape gets {canary} (the host file's path), {mark} (the marker's name prefix) and {name};
# it writes its findings to stdout, which the RUN line sends to /app/escape/{name}.out.
# `try_host` reads the canary and leaves markers from whatever root the escape reached (as $1).
TRY_HOST = r"""try_host() {{
  cat "$1{canary}" 2>/dev/null
  for d in {host_dirs}; do echo x 2>/dev/null > "$1$d/{mark}-{name}"; done
  [ -d "$1/work" ] && echo "SAW: $1/work"
}}
"""
ESCAPES = {
    # mkdir x; chroot x; cd .. (x64); chroot .: a chroot leaves the cwd outside the new root.
    "chroot_escape": r"""python3 - <<'PY'
import os, subprocess
os.makedirs("/tf-x", exist_ok=True)
os.chroot("/tf-x")
for _ in range(64):
    os.chdir("..")
os.chroot(".")
subprocess.run(["sh", "-c", 'try_host() {{ cat "{canary}" 2>/dev/null; for d in {host_dirs}; do echo x 2>/dev/null > "$d/{mark}-{name}"; done; [ -d /work ] && echo "SAW: /work"; }}; try_host'])
PY""",
    "proc1_root": "try_host /proc/1/root",
    # /proc/self/root of another process: a second process of the step, its parent, every pid.
    "proc_pid_root": r"""sh -c 'cat "/proc/$PPID/root{canary}"; [ -d "/proc/$PPID/root/work" ] && echo "SAW: /work"' 2>/dev/null
for p in /proc/[0-9]*; do try_host "$p/root"; try_host "$p/cwd"; done""",
    # A descriptor the builder left open on a host directory.
    "inherited_fd": r"""for f in /proc/self/fd/* /proc/[0-9]*/fd/*; do try_host "$f"; done
for f in /proc/[0-9]*/fd/*; do t=$(readlink "$f"); case $t in pipe:*|anon_inode:*|/dev/null|/dev/pts/*|/app/*|/proc/*|"") ;; *) echo "SAW: $f -> $t";; esac; done""",
    # A new proc or bind mount, with the capabilities the step has or a user namespace of its own.
    "mount_proc": r"""mkdir -p /tf-p /tf-b
mount -t proc proc /tf-p 2>/dev/null && echo "SAW: mounted proc" && try_host /tf-p/1/root
mount --bind / /tf-b 2>/dev/null && echo "SAW: bind mount"
unshare -Urmpf --mount-proc sh -c 'echo "SAW: a user namespace of its own"' 2>/dev/null""",
    # The host's devices, cgroups and sysfs.
    "sys_and_dev": r"""for p in /sys/fs/cgroup /sys/class/net /sys/block /sys/kernel; do [ -e "$p" ] && echo "SAW: $p"; done
for p in /dev/*; do case ${{p#/dev/}} in null|zero|full|random|urandom|tty|pts|shm|ptmx|fd|stdin|stdout|stderr|console|core|mqueue) ;; *) echo "SAW: $p";; esac; done""",
    # Memory past any cap through the tmpfs /dev and /dev/shm are (the file removed after).
    "dev_fill": r"""for d in /dev/shm /dev; do
  n=$(dd if=/dev/zero of="$d/{mark}-{name}-fill" bs=1M count=100 2>/dev/null; stat -c %s "$d/{mark}-{name}-fill" 2>/dev/null || echo 0)
  rm -f "$d/{mark}-{name}-fill"; [ "$n" -ge 83886080 ] && echo "SAW: $n bytes written into $d"
done""",
    # The builder's processes (to ptrace, read the environment of, enter the root of).
    "builder_processes": r"""for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case $c in *buildah*|*skopeo*|*step_sandbox*|*termforge*) echo "SAW: $p $c";; esac; done
grep -q '^CapEff:' /proc/self/status && python3 -c "
import re; e = int(re.search(r'CapEff:\s*(\w+)', open('/proc/self/status').read()).group(1), 16)
[print('SAW: capability', n) for b, n in ((21, 'SYS_ADMIN'), (19, 'SYS_PTRACE'), (16, 'SYS_MODULE'), (25, 'SYS_TIME')) if e >> b & 1]"
""",
}


@dataclass
class Canary:
    """A host-only file (its content never in a Dockerfile) and the marker prefix escapes use."""

    dir: Path
    path: Path
    secret: str
    mark: str
    extra: list[Path] = field(default_factory=list)

    @classmethod
    def plant(cls) -> "Canary":
        d = Path(tempfile.mkdtemp(prefix="tf-build-canary-"))
        d.chmod(0o755)  # readable by the build's unprivileged ids: an escape would read it
        secret = f"tf-host-secret-{secrets.token_hex(12)}"
        path = d / "secret"
        path.write_text(secret + "\n")
        path.chmod(0o644)
        return cls(d, path, secret, f"tf-build-escape-{secrets.token_hex(6)}")

    def install(self, context: Path, names) -> str:
        """Write each escape into the build context (tf-escapes/) and return the Dockerfile lines
        that run them; they never fail the build."""
        scripts = context / "tf-escapes"
        scripts.mkdir(exist_ok=True)
        lines = ["COPY tf-escapes/ /app/tf-escapes/", "RUN mkdir -p /app/escape"]
        for name in names:
            fmt = {"canary": str(self.path), "mark": self.mark, "name": name, "host_dirs": " ".join(HOST_DIRS)}
            (scripts / f"{name}.sh").write_text(TRY_HOST.format(**fmt) + f"echo RAN {name}\n" + ESCAPES[name].format(**fmt) + "\n")
            lines.append(f"RUN sh /app/tf-escapes/{name}.sh > /app/escape/{name}.out 2>&1; true")
        return "\n".join(lines) + "\n"

    def host_markers(self) -> list[str]:
        found = []
        for d in HOST_DIRS:
            found += [str(p) for p in Path(d).glob(f"{self.mark}-*")]
        return found

    def findings(self, names, outputs: Path, build_log: str, rootfs: Path | None) -> list[str]:
        """Every trace of the host the build reached: [] when it reached none. Each escape must
        have run (its .out starts with RAN), so an escape that never ran is a finding too."""
        problems = []
        for name in names:
            out = outputs / f"{name}.out"
            text = out.read_text(errors="replace") if out.is_file() else ""
            if not text.startswith(f"RAN {name}"):
                problems.append(f"{name}: did not run ({text[:200]!r})")
            if self.secret in text:
                problems.append(f"{name}: read the host's canary")
            problems += [f"{name}: {line}" for line in text.splitlines() if line.startswith("SAW:")]
        problems += [f"marker on the host: {m}" for m in self.host_markers()]
        if self.secret in build_log:
            problems.append("the build log holds the canary")
        if rootfs is not None:
            hit = subprocess.run(["grep", "-rlsF", "--binary-files=text", self.secret, str(rootfs)],
                                 capture_output=True, text=True)
            problems += [f"the image holds the canary: {p}" for p in hit.stdout.split()]
        return problems

    def remove(self) -> None:
        for m in self.host_markers():
            try:
                os.unlink(m)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
