"""A grade pool: graders forked from a zygote that has imported pytest once, each grade still in
a fresh sandbox of its own over a pristine copy of the session's layer (docs/grading.md, "The
grader zygote"; the in-sandbox side is termforge/grading/zygote.py).

Validation grades a task about 16 times; a fresh `python3` importing pytest is most of each
grade's CPU. A pool runs one zygote sandbox over one image root filesystem, with the pool's
staging folder (where the sessions it serves keep their work directories) bound at /mnt. A
session made by `GradePool.start` has `grade_pool` set; verifier._run_grader then asks the pool
for its grades (termforge's own grader only: Harbor's supervised test.sh, networked tasks and the
host-/usr layout keep bwrap per grade). The zygote builds each grade's sandbox as bwrap would: the
same mounts, namespaces (a user namespace of its own per grader), limits, environment, cwd,
channel and exit status; `tests/test_gradepool.py` compares them with bwrap's, and the attack
suite runs on both.

Anything the pool cannot do (the zygote will not start, a request cannot be sent, a sandbox
cannot be built) is `None` from `run`: the caller grades the plain way instead, so a pool can
only ever change what a grade costs.
"""

from __future__ import annotations

import array
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from termforge.grading import program
from termforge.runtime import accounting, trees
from termforge.runtime.base import Bind, ExecResult, Image, Limits
from termforge.runtime.bwrap import (HOST_ROOTFS, SANDBOX_PATH, BwrapRuntime, BwrapSession, _CappedReader,
                                     default_work_root, session_uid)
from termforge.runtime.process import DiskWatch, Launch, limit_reason, tree_bounds

# The argv of termforge's grader (verifier.GRADER_ARGV); only it is served by a pool.
GRADER_PREFIX = ["/usr/bin/python3", "-I", "/verifier/grade.py"]
CHANNEL_ENV = "TERMFORGE_GRADER_FD"
ZYGOTE_MOUNT = "/mnt"
# B's exit status when it could not build the sandbox (nothing of the grade ran: fall back).
SETUP_FAILED = 125
READY_TIMEOUT = 120.0
REPLY_GRACE = 30.0
CAPS = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETPCAP")
BASE_ENV = {"PATH": SANDBOX_PATH, "HOME": "/home/user", "USER": "user", "LANG": "C.UTF-8", "TERM": "dumb"}


def rlimits(limits: Limits) -> dict[str, list[int]]:
    """The limits runtime.bwrap gives every sandbox (_limit_preexec, nproc_prefix)."""
    mem = limits.memory_mb * 1024 * 1024
    fsize = limits.max_file_mb * 1024 * 1024
    return {"RLIMIT_CPU": [limits.cpu_sec, limits.cpu_sec + 5], "RLIMIT_AS": [mem, mem], "RLIMIT_CORE": [0, 0],
            "RLIMIT_NOFILE": [limits.max_open_files, limits.max_open_files], "RLIMIT_FSIZE": [fsize, fsize],
            "RLIMIT_NPROC": [limits.max_procs, limits.max_procs]}


# The one thread every zygote is started from (GradePool._ensure).
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tf-zygote-spawner")


class GradePool:
    """One zygote over one image root filesystem (module doc). Not shared between threads that
    grade at the same time: a validation worker keeps its own."""

    def __init__(self, rootfs: str, work_root: str | Path | None = None, log=None):
        self.rootfs = str(rootfs)
        self.work_root = work_root
        self.log = log
        self.staging = Path(tempfile.mkdtemp(prefix="tf-pool-", dir=work_root or default_work_root()))
        os.chmod(self.staging, 0o711)  # sessions' uids pass through; nobody lists it
        self.uid = session_uid()
        self.tool = self.staging / ".zygote"
        self.tool.mkdir(mode=0o755)
        for name in ("grade.py", "zygote.py"):
            (self.tool / name).write_text(program(name))
            os.chmod(self.tool / name, 0o644)
        self.broken: str | None = None
        self.grades = 0
        self.fallbacks = 0
        # Grades whose pytest configuration the zygote had made ahead (grading/grade.py prepare).
        self.made_ahead = 0
        self._proc: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._zygote_cpu = 0.0
        # Where somebody is measuring: the zygote and every grade it forks run in one cgroup, read
        # before and after each grade (grades never overlap: the lock), as runtime.bwrap measures a
        # sandbox; else the grade's CPU is its supervisor's rusage, children included.
        self._cgroup: accounting.SandboxCgroup | None = None
        self._cg_used = 0.0
        self._lock = threading.Lock()

    # -- sessions ---------------------------------------------------------------------------------
    def start(self, image: Image, limits: Limits) -> BwrapSession:
        """A session whose grades this pool serves: its work directory under the staging folder
        (the zygote sees it at /mnt), its sandboxes under the pool's uid."""
        session = BwrapSession(image, limits, self.staging, uid=self.uid)
        if self.serves(image):
            session.grade_pool = self
        return session

    def serves(self, image: Image) -> bool:
        return (self.broken is None and image.rootfs == self.rootfs and image.rootfs != HOST_ROOTFS
                and not image.allow_network)

    # -- the zygote -------------------------------------------------------------------------------
    def _argv(self, control_fd: int) -> list[str]:
        argv = ["bwrap", "--ro-bind", self.rootfs, "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                "--bind", str(self.staging), ZYGOTE_MOUNT, "--ro-bind", str(self.tool), "/verifier",
                "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--cap-drop", "ALL"]
        for cap in CAPS:
            argv += ["--cap-add", cap]
        argv += ["--die-with-parent", "--new-session", "--clearenv"]
        for key, value in sorted(BASE_ENV.items()):
            argv += ["--setenv", key, value]
        return argv + ["--chdir", "/", "--", "/usr/bin/python3", "-I", "/verifier/zygote.py", str(control_fd)]

    def _ensure(self) -> bool:
        if self._proc is not None and self._proc.poll() is None:
            return True
        if self.broken:
            return False
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        uid = self.uid
        self._zlog = open(self.staging / "zygote.log", "ab")
        cgroup = self._cgroup = accounting.sandbox_cgroup() if accounting.current() is not None else None

        def preexec() -> None:
            if cgroup is not None:
                cgroup.join()
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

        launch = Launch(self._argv(theirs.fileno()))
        try:
            # Started from a thread that lives as long as the process: bwrap's --die-with-parent
            # is the kernel's parent-death signal, sent when the *thread* that started it ends. A
            # pool started by a check's lane (a thread per task) would otherwise die with its task
            # and start again for the next one.
            self._proc = _SPAWNER.submit(
                subprocess.Popen, launch.argv, stdin=subprocess.DEVNULL, stdout=self._zlog, stderr=self._zlog,
                start_new_session=True, preexec_fn=preexec, pass_fds=(theirs.fileno(), *launch.fds),
                env=launch.env).result()
        except OSError as exc:
            theirs.close()
            mine.close()
            return self._break(f"bwrap did not start: {exc}")
        finally:
            launch.close()
        theirs.close()
        ready, _, _ = select.select([mine], [], [], READY_TIMEOUT)
        msg = mine.recv(4096) if ready else b""
        try:
            hello = json.loads(msg.decode()) if msg else {}
        except ValueError:
            hello = {}
        if not hello.get("ready"):
            mine.close()
            return self._break(f"the zygote did not start: {self._log_tail()}")
        self._control = mine
        # The zygote's start (a python3 that imported pytest) is what a grade pays without a pool.
        self._zygote_cpu = float(hello.get("cpu", 0.0))
        accounting.charge_sandbox(self._cpu_since() if self._cgroup is not None else self._zygote_cpu)
        return True

    def _cpu_since(self) -> float | None:
        """CPU used in the pool's cgroup since the last reading."""
        used = self._cgroup.usage()
        if used is None:
            return None
        delta, self._cg_used = used - self._cg_used, used
        return delta

    def _log_tail(self) -> str:
        try:
            return (self.staging / "zygote.log").read_bytes()[-600:].decode(errors="replace").strip()
        except OSError:
            return ""

    def _break(self, why: str) -> bool:
        self.broken = why
        if self.log:
            self.log(f"grade pool off ({why}); grading with a fresh grader per grade")
        self._kill()
        return False

    def _kill(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
        if self._cgroup is not None:
            self._cgroup.finish(wait=0.5)
            self._cgroup = None

    def close(self) -> None:
        with self._lock:
            self._kill()
            self._proc = None
            if getattr(self, "_zlog", None):
                self._zlog.close()
        trees.remove_tree(self.staging)

    def __enter__(self) -> "GradePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- one grade --------------------------------------------------------------------------------
    def _inside(self, host: Path) -> str | None:
        try:
            rel = Path(host).resolve().relative_to(self.staging.resolve())
        except ValueError:
            return None
        return f"{ZYGOTE_MOUNT}/{rel.as_posix()}"

    def run(self, session: BwrapSession, argv: list[str], timeout: float, env: dict, cwd: str,
            binds: list[Bind], boot_fd: int) -> ExecResult | None:
        """Grade in a sandbox forked from the zygote, as session.exec(argv=..., keep_home=False,
        binds=..., pass_fds=(boot_fd,)) would in a fresh bwrap; None where the pool cannot."""
        if argv[:3] != GRADER_PREFIX or "--supervise" in argv or not self.serves(session.image):
            return None
        scratch = session.scratch()  # /tmp and /dev/shm, in the session's tree as bwrap's are
        try:
            binds = [*session.binds, *binds, *scratch.binds()]
            mounts = [[self._inside(session.layer), "/app", True]]
            mounts += [[self._inside(b.host), b.sandbox, b.writable] for b in binds]
            if any(m[0] is None for m in mounts):
                return None
            limits = session.limits
            spec = {"argv": list(argv), "env": {**BASE_ENV, **{k: v for k, v in env.items() if k != CHANNEL_ENV}},
                    "channel_env": CHANNEL_ENV, "cwd": cwd, "binds": mounts, "timeout": timeout,
                    "rlimits": rlimits(limits)}
            watch = session.writable_roots() + [b.host for b in binds if b.writable]
            with self._lock:
                if not self._ensure():
                    return None
                return self._run(session, spec, boot_fd, timeout, watch)
        finally:
            scratch.remove()

    def _run(self, session: BwrapSession, spec: dict, boot_fd: int, timeout: float,
             watch: list[Path]) -> ExecResult | None:
        start = time.monotonic()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._control.sendmsg([json.dumps(spec).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array(
                "i", [boot_fd, out_w, err_w, theirs.fileno()]))])
        except OSError as exc:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            mine.close()
            theirs.close()
            self._break(f"the zygote cannot be reached: {exc}")
            return None
        finally:
            for fd in (out_w, err_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            theirs.close()
        readers = [_CappedReader(os.fdopen(out_r, "rb", buffering=0)),
                   _CappedReader(os.fdopen(err_r, "rb", buffering=0))]
        def kill() -> None:
            mine.send(b"kill")

        disk = DiskWatch(watch, session.limits.disk_mb, None, tree_bounds(session.limits), kill=kill)
        report = None
        try:
            ready, _, _ = select.select([mine], [], [], timeout + REPLY_GRACE)
            data = mine.recv(1 << 16) if ready else b""
            report = json.loads(data.decode()) if data else None
        except (OSError, ValueError):
            report = None
        finally:
            disk.stop()
            mine.close()
        if not isinstance(report, dict):
            # No word from the grade's supervisor in time: end the zygote (and with it the grade).
            self._break("a grade did not report within its timeout")
        out, err = (r.result() for r in readers)
        if not isinstance(report, dict):
            return ExecResult(124, out.decode(errors="replace"), err.decode(errors="replace"),
                              time.monotonic() - start, timed_out=True)
        if report.get("error") or report.get("status") == SETUP_FAILED:
            # Nothing of the grade ran (no grader started): the caller grades the plain way.
            why = report.get("error") or err.decode(errors="replace")[-400:]
            self._break(f"a grade sandbox could not be made: {why}")
            self.fallbacks += 1
            return None
        self.grades += 1
        self.made_ahead += bool(report.get("made_ahead"))
        cpu = float(report.get("cpu") or 0.0)
        zygote = report.get("zygote_cpu")
        if isinstance(zygote, (int, float)):
            cpu += max(0.0, zygote - self._zygote_cpu)  # the fork, charged to the grade it made
            self._zygote_cpu = float(zygote)
        if self._cgroup is not None:
            cpu = self._cpu_since()
        accounting.charge_sandbox(cpu)
        timed_out = bool(report.get("timed_out"))
        code = 124 if timed_out else int(report["status"])
        return ExecResult(exit_code=code, stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"),
                          duration_sec=time.monotonic() - start, timed_out=timed_out,
                          limit_hit=limit_reason(code, session.limits, disk.reason))


def pool_available() -> bool:
    return shutil.which("bwrap") is not None


class PooledRuntime:
    """A runtime whose sessions grade through `pool`; everything else is `runtime`'s."""

    def __init__(self, runtime, pool: GradePool):
        self.runtime, self.pool = runtime, pool

    def start(self, image: Image, limits: Limits | None = None) -> BwrapSession:
        return self.pool.start(image, limits or Limits())

    def __getattr__(self, name):
        return getattr(self.runtime, name)


class PoolShelf:
    """Grade pools kept from one task to the next (a validate shard): a zygote per image root
    filesystem and per task (or check) in flight, started once per shard rather than once per
    task. A pool serves one task at a time: `take` hands out an idle one, or starts one; `put`
    gives it back once the task's sessions are all stopped; `close` ends them all. The zygote
    never reads anything of a task, and each grade is still a fresh sandbox over its session's
    layer, so a pool that served one task serves the next as a new one would."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str], list[GradePool]] = {}
        self._all: list[GradePool] = []
        self._lock = threading.Lock()

    def take(self, rootfs: str, work_root, log=None) -> GradePool:
        key = (str(rootfs), str(work_root))
        with self._lock:
            idle = self._idle.get(key, [])
            while idle:
                pool = idle.pop()
                if pool.broken is None:
                    return pool
            pool = GradePool(rootfs, work_root, log=log)
            self._all.append(pool)
            return pool

    def put(self, pool: GradePool) -> None:
        with self._lock:
            self._idle.setdefault((pool.rootfs, str(pool.work_root)), []).append(pool)

    def close(self) -> None:
        with self._lock:
            pools, self._all, self._idle = self._all, [], {}
        for pool in pools:
            pool.close()

    def __enter__(self) -> "PoolShelf":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def pooled_runtime(runtime, image: Image, stack, shelf: PoolShelf | None = None) -> object:
    """`runtime` with a grade pool for `image`, or `runtime` itself where a pool cannot serve the
    image (another backend, the host's /usr, a networked task). The pool is `shelf`'s, given back
    to it by `stack`, or else a new one that `stack` closes."""
    if not isinstance(runtime, BwrapRuntime) or not image.rootfs or image.rootfs == HOST_ROOTFS \
            or image.allow_network:
        return runtime
    log = getattr(runtime, "log", None)
    if shelf is None:
        pool = stack.enter_context(GradePool(image.rootfs, runtime.work_root, log=log))
    else:
        pool = shelf.take(image.rootfs, runtime.work_root, log=log)
        stack.callback(shelf.put, pool)
    return PooledRuntime(runtime, pool)


__all__ = ["GradePool", "PoolShelf", "PooledRuntime", "pooled_runtime", "rlimits", "GRADER_PREFIX", "pool_available"]
