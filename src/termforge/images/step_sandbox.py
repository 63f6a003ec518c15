"""The sandbox a Dockerfile's RUN step runs in: a minimal OCI runtime for `buildah bud --isolation
oci --runtime`, which runs each step's process under bubblewrap (docs/images.md, "Dockerfile builds").

buildah keeps everything it is good at (the Dockerfile's syntax, layers, commit); only the step's
process is ours. bwrap pivot_roots into a fresh mount namespace holding the working container's
root filesystem and nothing else of the host: a /dev of its own (a few harmless device nodes on
a capped tmpfs, a capped /dev/shm), no /sys, no cgroup tree, only bind mounts whose source lies in the build's own folders (buildah's per-step files,
RUN --mount sources), a new pid namespace (so /proc/1/root is the sandbox's root), no network (where
the build was given network: the build's own namespace, which slirp4netns connects to the outside,
never the host's (dockerfile.py), and the host's CA bundle read-only over the image's), no
inherited descriptor but stdio, and only the capabilities of ALLOWED_CAPS (what apt and dpkg
need: CAP_SYS_CHROOT is harmless once the host tree is gone; never SYS_ADMIN or SYS_PTRACE). A
chroot escape ends at the image's root.

A root step runs as root of a nested user namespace that maps the build's ids one to one and can
make no other; a USER step runs as that uid in bwrap's own user namespace (mapping it to itself,
no capabilities). Either way files keep the owners apt, dpkg and USER give them. bwrap's command
line names no host path: the sources are bound under VIEW_DIR in a mount namespace of the waiter's.

Whether a failed step is the Dockerfile's is recorded here, not guessed from the log: whether bwrap
set the sandbox up and handed the step's command to exec (it reads --block-fd at that point), and
how it ended.

This file runs as a program in the build's user namespace (python3 -I step_sandbox.py ...), on the
host's Python by path: standard library only. The commands are the OCI runtime's that buildah
1.28 uses: create, start, state, kill, delete. Global options: --root=DIR (state), --allow=DIR
(a folder bind sources may come from; repeated), --bwrap=PATH, --records=FILE (where each step's
outcome is appended: did its command start, how did it end), --net=none|host, --ca=FILE.
"""

from __future__ import annotations

import array
import ctypes
import fcntl
import json
import os
import resource
import signal
import sys
import termios
import time

ALLOWED_CAPS = frozenset({
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_NET_BIND_SERVICE",
    "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE",
})
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
# Where StepView puts the step's sources, in a mount namespace of its own (a folder every host has,
# searchable by any uid; what it holds on the host stays as it is).
VIEW_DIR = "/mnt"
# Files buildah binds into every step only to inform it (the image itself is not changed by them).
INFO_FILES = frozenset({"/run/.containerenv", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf"})
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_BYTES = 1 << 20
SHM_BYTES = 64 << 20
# The build's network (--net=host: the build was given network, its own namespace's, see dockerfile.py) and the host's
# CA bundle (--ca=FILE, in the build's folders), set once by main.
NETWORK = {"net": "none", "ca": ""}
# Where a Debian/Ubuntu/Alpine image keeps its CA bundle: the host's is bound over it, read-only.
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
RLIMITS = {"RLIMIT_NOFILE": resource.RLIMIT_NOFILE, "RLIMIT_NPROC": resource.RLIMIT_NPROC}


class StepError(Exception):
    """A step this runtime refuses or cannot start: said on stderr, exit 1 (buildah shows it)."""


def _within(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def bwrap_argv(spec: dict, allowed: list[str], place, bwrap: str = "bwrap") -> list[str]:
    """The bwrap command line that runs the OCI spec's process. Every bind source must lie in
    `allowed` (realpath'd): a spec naming anything else of the host is refused, never bound.
    bwrap binds each source from where `place(realpath)` put it (StepView: a folder any uid can
    reach, so a step run as a user who cannot reach the build's folders still gets its root).
    A root step runs as the root the caller is (in the step's own user namespace); any other
    uid gets a user namespace of bwrap's mapping that uid to itself (the caller has switched to
    it), with no capabilities, as under Docker."""
    allowed = [os.path.realpath(a) for a in allowed if a]
    root = spec.get("root") or {}
    root_path = root.get("path") or ""
    if not os.path.isabs(root_path):
        raise StepError(f"the step's root {root_path!r} is not an absolute path")
    if not _within(root_path, allowed):
        raise StepError(f"the step's root {root_path} is outside the build's folders")
    uid, gid = step_ids(spec)
    argv = [bwrap]
    if uid != 0:
        argv += ["--unshare-user", "--uid", str(uid), "--gid", str(gid), "--disable-userns"]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             *([] if NETWORK["net"] == "host" else ["--unshare-net"]), "--die-with-parent", "--new-session",
             "--bind", place(os.path.realpath(root_path)), "/", *_dev_args(spec), "--proc", "/proc"]
    ca = os.path.join(root_path, CA_BUNDLE)
    # Not for a step that rebuilds the bundle (it renames a new one over it: a mount point is busy).
    rebuilds = any("update-ca-certificates" in arg for arg in (spec.get("process") or {}).get("args") or [])
    if NETWORK["net"] == "host" and NETWORK["ca"] and not rebuilds and os.path.isfile(ca) and not os.path.islink(ca) \
            and not any(os.path.islink(os.path.join(root_path, *CA_BUNDLE.split("/")[:n])) for n in (1, 2, 3)):
        if not _within(NETWORK["ca"], allowed):
            raise StepError(f"the CA bundle {NETWORK['ca']} is outside the build's folders")
        argv += ["--ro-bind", place(os.path.realpath(NETWORK["ca"])), "/" + CA_BUNDLE]
    for mount in spec.get("mounts") or []:
        dest, kind, opts = mount.get("destination") or "", mount.get("type") or "", mount.get("options") or []
        if not os.path.isabs(dest) or dest in ("/", "/proc", "/dev") or dest.startswith(("/dev/", "/proc/", "/sys")):
            continue  # our own /dev and bwrap's /proc; never /sys (the host's devices and cgroups)
        if kind == "tmpfs":
            size = next((o.partition("=")[2] for o in opts if o.startswith("size=")), "")
            if size:
                argv += ["--size", str(_bytes(size))]
            argv += ["--tmpfs", dest]
        elif kind == "bind" or "bind" in opts or "rbind" in opts:
            if uid != 0 and dest in INFO_FILES:
                continue  # bwrap, as that user, could not make the mount point in the image
            source = mount.get("source") or ""
            if not os.path.isabs(source) or not _within(source, allowed):
                raise StepError(f"the step asks to bind {source} on {dest}, outside the build's folders")
            argv += ["--ro-bind" if "ro" in opts else "--bind", place(os.path.realpath(source)), dest]
        # any other kind (sysfs, cgroup, mqueue, devpts outside /dev) is not the build's to have
    proc = spec.get("process") or {}
    hostname = spec.get("hostname")
    if hostname:
        argv += ["--hostname", hostname]
    argv += ["--chdir", proc.get("cwd") or "/", "--clearenv"]
    for item in proc.get("env") or []:
        key, sep, value = item.partition("=")
        if sep and key:
            argv += ["--setenv", key, value]
    argv += ["--cap-drop", "ALL"]
    if uid == 0:
        caps = (proc.get("capabilities") or {}).get("bounding") or []
        for cap in sorted(set(caps) & ALLOWED_CAPS):
            argv += ["--cap-add", cap]
    args = proc.get("args") or []
    if not args:
        raise StepError("the step has no command")
    return argv + ["--", *args]


def _dev_args(spec: dict) -> list[str]:
    """A /dev of a few harmless device nodes on a tmpfs capped at DEV_BYTES, and /dev/shm capped at
    the size buildah's spec gives it (SHM_BYTES if none): bwrap's --dev would be an uncapped tmpfs
    a step could fill the host's memory through."""
    shm = next((m for m in spec.get("mounts") or [] if m.get("destination") == "/dev/shm"), {})
    size = next((o.partition("=")[2] for o in shm.get("options") or [] if o.startswith("size=")), "")
    args = ["--size", str(DEV_BYTES), "--tmpfs", "/dev"]
    for node in DEV_NODES:
        args += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        args += ["--symlink", target, f"/dev/{name}"]
    return args + ["--perms", "1777", "--size", str(min(_bytes(size), SHM_BYTES) if size else SHM_BYTES),
                   "--tmpfs", "/dev/shm"]


def step_ids(spec: dict) -> tuple[int, int]:
    user = (spec.get("process") or {}).get("user") or {}
    return int(user.get("uid", 0)), int(user.get("gid", 0))


def _bytes(size: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    size = size.strip().lower()
    if size and size[-1] in units:
        return int(size[:-1]) * units[size[-1]]
    return int(size)


def identity_userns() -> int:
    """An fd of a new user namespace, child of ours, mapping each of our ids to itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(done_w)
            if libc.unshare(CLONE_NEWUSER) != 0:
                os._exit(1)
            os.write(ready_w, b"1")
            os.read(done_r, 1)
            # No user namespace below this one (bwrap's --disable-userns needs --unshare-user).
            with open("/proc/sys/user/max_user_namespaces", "w") as f:
                f.write("0")
            os.write(ready_w, b"2")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise StepError("cannot make the step's user namespace")
        for kind in ("uid", "gid"):
            lines = []
            for line in open(f"/proc/self/{kind}_map").read().splitlines():
                inner, _outer, count = line.split()
                lines.append(f"{inner} {inner} {count}")
            with open(f"/proc/{pid}/{kind}_map", "w") as f:
                f.write("\n".join(lines) + "\n")
        os.write(done_w, b"1")
        if os.read(ready_r, 1) != b"2":
            raise StepError("cannot close the step's user namespace to nesting")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    finally:
        os.close(done_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


class State:
    def __init__(self, root: str, cid: str):
        if not cid or "/" in cid or cid.startswith("."):
            raise StepError(f"bad container id {cid!r}")
        self.dir = os.path.join(root, cid)
        self.cid = cid

    @property
    def fifo(self) -> str:
        return os.path.join(self.dir, "start")

    def read(self) -> dict:
        try:
            with open(os.path.join(self.dir, "state.json")) as f:
                return json.load(f)
        except FileNotFoundError:
            raise StepError(f"container {self.cid} does not exist") from None

    def write(self, record: dict) -> None:
        tmp = os.path.join(self.dir, ".state.json")
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, os.path.join(self.dir, "state.json"))


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


class StepView:
    """The step's root and bind sources bound under VIEW_DIR in a new, private mount namespace
    of this process: bwrap, run as the step's uid, reaches them there whatever the modes of the
    build's folders."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        if self.libc.unshare(CLONE_NEWNS) != 0:
            raise StepError(f"cannot make the step's mount namespace (errno {ctypes.get_errno()})")
        self._mount(None, "/", None, MS_REC | MS_PRIVATE)
        self._mount("tmpfs", VIEW_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        self.count = 0

    def _mount(self, source, target, fstype, flags, data=None) -> None:
        enc = (lambda v: v.encode() if isinstance(v, str) else v)
        if self.libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
            raise StepError(f"cannot mount {source} on {target} (errno {ctypes.get_errno()})")

    def place(self, path: str) -> str:
        self.count += 1
        target = os.path.join(VIEW_DIR, str(self.count))
        if os.path.isdir(path):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        self._mount(path, target, None, MS_BIND | MS_REC)
        return target


def _run_step(spec: dict, allowed: list[str], bwrap: str, records: str, cid: str) -> int:
    """Run the step under bwrap, wait for it, and append to `records` whether the step's own
    command was started and how it ended: the evidence that tells a Dockerfile's failure from the
    builder's. Returns the exit status buildah is to see."""
    uid, gid = step_ids(spec)
    view = StepView()
    argv = bwrap_argv(spec, allowed, view.place, bwrap)
    if uid == 0:
        # Root of a namespace of its own that can make no other: nothing a root step does with
        # its capabilities reaches past the sandbox bwrap builds below.
        userns = identity_userns()
        try:
            if ctypes.CDLL(None, use_errno=True).setns(userns, CLONE_NEWUSER) != 0:
                raise StepError(f"cannot enter the step's user namespace (errno {ctypes.get_errno()})")
        finally:
            os.close(userns)
    groups = sorted({int(g) for g in ((spec.get("process") or {}).get("user") or {}).get("additionalGids") or []})
    # bwrap reads --block-fd once the sandbox is set up, just before it executes the step's
    # command: a byte still in the pipe afterwards means the sandbox never was (the builder's
    # failure); a byte taken means the command was the step's to run, and bwrap's exit status is
    # the command's (or bwrap's own when the image lacks the program: still the Dockerfile's).
    block_r, block_w = os.pipe()
    os.write(block_w, b"x")
    os.close(block_w)
    child = os.fork()
    if child == 0:
        try:
            # Nothing but stdio and the block pipe reaches bwrap (it closes the pipe before the
            # step's command runs).
            os.closerange(3, block_r)
            os.closerange(block_r + 1, os.sysconf("SC_OPEN_MAX"))
            os.set_inheritable(block_r, True)
            os.chdir("/")
            if uid != 0:  # bwrap maps the step's uid to this one: files keep the owners USER gives them
                os.setgroups(groups)
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            os.execvpe(argv[0], [argv[0], "--block-fd", str(block_r), *argv[1:]],
                       {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        except BaseException as exc:  # noqa: BLE001
            print(f"termforge step sandbox: cannot run bwrap: {exc}", file=sys.stderr)
        os._exit(127)
    _, wait_status = os.waitpid(child, 0)
    left = array.array("i", [0])
    fcntl.ioctl(block_r, termios.FIONREAD, left)
    os.close(block_r)
    code = os.waitstatus_to_exitcode(wait_status)
    code = 128 - code if code < 0 else code
    if records:
        line = json.dumps({"id": cid, "args": (spec.get("process") or {}).get("args") or [],
                           "started": left[0] == 0, "exit": code}) + "\n"
        fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    return code


def create(root: str, allowed: list[str], bwrap: str, records: str, bundle: str, pid_file: str,
           cid: str) -> None:
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    state = State(root, cid)
    os.makedirs(state.dir, mode=0o700)
    os.mkfifo(state.fifo, 0o600)
    allowed = [*allowed, bundle]
    bwrap_argv(spec, allowed, lambda path: path, bwrap)  # refused here, before buildah starts the step
    rlimits = [(RLIMITS[r["type"]], int(r["soft"]), int(r["hard"]))
               for r in (spec.get("process") or {}).get("rlimits") or [] if r.get("type") in RLIMITS]
    pid = os.fork()
    if pid == 0:
        code = 127
        try:
            os.setsid()
            # Blocks until `start` opens the other end: buildah starts the step when it is ready.
            with open(state.fifo, "rb") as f:
                if f.read() != b"start":
                    os._exit(1)
            for which, soft, hard in rlimits:
                resource.setrlimit(which, (soft, hard))
            code = _run_step(spec, allowed, bwrap, records, cid)
        except BaseException as exc:  # noqa: BLE001 - whatever it is, the step did not start
            print(f"termforge step sandbox: cannot start the step: {exc}", file=sys.stderr)
        os._exit(code)
    state.write({"pid": pid, "start_time": _start_time(pid), "bundle": bundle, "started": False})
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(pid))
    os.replace(pid_file + ".tmp", pid_file)


def start(root: str, cid: str) -> None:
    state = State(root, cid)
    record = state.read()
    fd = os.open(state.fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, b"start")
    finally:
        os.close(fd)
    record["started"] = True
    state.write(record)


def status(root: str, cid: str) -> dict:
    state = State(root, cid)
    record = state.read()
    alive = record.get("start_time") is not None and _start_time(record["pid"]) == record["start_time"]
    phase = ("running" if record.get("started") else "created") if alive else "stopped"
    return {"ociVersion": "1.0.2", "id": cid, "status": phase, "pid": record["pid"] if alive else 0,
            "bundle": record["bundle"]}


def kill(root: str, cid: str, sig: str = "SIGTERM") -> None:
    current = status(root, cid)
    if current["status"] == "stopped":
        return
    number = int(sig) if sig.isdigit() else getattr(signal, sig if sig.startswith("SIG") else f"SIG{sig}")
    os.kill(current["pid"], number)


def delete(root: str, cid: str, force: bool) -> None:
    state = State(root, cid)
    if not os.path.isdir(state.dir):
        return
    current = status(root, cid)
    if current["status"] != "stopped":
        if not force:
            raise StepError(f"container {cid} is still running")
        os.kill(current["pid"], signal.SIGKILL)
        for _ in range(100):
            if status(root, cid)["status"] == "stopped":
                break
            time.sleep(0.01)
    for name in os.listdir(state.dir):
        os.unlink(os.path.join(state.dir, name))
    os.rmdir(state.dir)


def main(argv: list[str]) -> int:
    opts = {"root": "", "bwrap": "bwrap", "records": "", "net": "none", "ca": ""}
    allowed: list[str] = []
    args = list(argv)
    while args and args[0].startswith("--"):
        key, _, value = args.pop(0)[2:].partition("=")
        if key == "allow":
            allowed.append(value)
        elif key in opts:
            opts[key] = value
        # other global options (--log, --log-format, --systemd-cgroup ...) mean nothing here
    NETWORK.update(net=opts["net"], ca=opts["ca"])
    if not args:
        print("usage: step_sandbox.py --root=DIR --allow=DIR... COMMAND ...", file=sys.stderr)
        return 2
    if args[0] in ("--version", "version"):
        print("termforge step sandbox (bwrap)")
        return 0
    if not opts["root"]:
        print("termforge step sandbox: --root=DIR is required", file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    flags, positional, i = {}, [], 0
    while i < len(rest):
        item = rest[i]
        if item.startswith("--"):
            key, sep, value = item[2:].partition("=")
            if not sep and key in ("bundle", "pid-file", "console-socket", "preserve-fds", "log", "signal"):
                i += 1
                value = rest[i] if i < len(rest) else ""
            flags[key] = value
        elif item.startswith("-") and len(item) > 1:
            flags[item[1:]] = "1"
        else:
            positional.append(item)
        i += 1
    try:
        if command == "create":
            if flags.get("console-socket"):
                raise StepError("a terminal for a build step is not supported")
            create(opts["root"], [p for p in allowed if p], opts["bwrap"], opts["records"],
                   flags.get("bundle") or os.getcwd(), flags["pid-file"], positional[-1])
        elif command == "start":
            start(opts["root"], positional[-1])
        elif command == "state":
            print(json.dumps(status(opts["root"], positional[-1])))
        elif command == "kill":
            kill(opts["root"], positional[0], positional[1] if len(positional) > 1 else flags.get("signal") or "SIGTERM")
        elif command == "delete":
            delete(opts["root"], positional[-1], "force" in flags or "f" in flags)
        else:
            raise StepError(f"unknown command {command!r}")
    except (StepError, OSError, KeyError, IndexError, ValueError) as exc:
        print(f"termforge step sandbox: {command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
