"""One sandboxed process under limits, the parts every launcher shares (bwrap sessions, the
persistent shell, the grade pool): its command line (bwrap's options from a memfd) and environment,
the network and IPC namespaces, rlimits and cgroup set before exec, the watch on its writable trees' disk use, and the reason a limit gives for its end.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import threading
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.runtime import accounting, trees
from termforge.runtime.base import Limits

# The environment bwrap itself is started with: nothing of the host's (runtime.bwrap's docstring).
SANDBOX_HOST_ENV: dict[str, str] = {}
FSIZE_EXIT = 128 + signal.SIGXFSZ


def tree_bounds(limits: Limits) -> trees.Bounds:
    """How far the host walks a sandbox's writable trees (runtime.limits tree_depth/tree_entries)."""
    return trees.Bounds(depth=limits.tree_depth, entries=limits.tree_entries, seconds=trees.DEFAULT_BOUNDS.seconds)


# How many values each bwrap option termforge uses takes (an option's value may itself be "--").
_BWRAP_ARITY = {
    **dict.fromkeys(("--unshare-all", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                     "--unshare-uts", "--unshare-cgroup", "--unshare-cgroup-try", "--share-net", "--die-with-parent",
                     "--new-session", "--clearenv", "--as-pid-1"), 0),
    **dict.fromkeys(("--uid", "--gid", "--chdir", "--cap-add", "--cap-drop", "--remount-ro", "--proc", "--dev",
                     "--tmpfs", "--dir", "--size", "--unsetenv", "--hostname", "--perms", "--mqueue"), 1),
    **dict.fromkeys(("--bind", "--ro-bind", "--dev-bind", "--bind-try", "--ro-bind-try", "--dev-bind-try",
                     "--symlink", "--setenv", "--chmod"), 2),
}


def _options_end(argv: list[str]) -> int:
    """Where bwrap's options end in `argv` (the index of the `--` before the command)."""
    i = 1
    while i < len(argv) and argv[i] != "--":
        if argv[i] not in _BWRAP_ARITY:
            raise TermforgeError(f"sandbox: bwrap option {argv[i]!r} is not one termforge passes")
        i += 1 + _BWRAP_ARITY[argv[i]]
    return i


class Launch:
    """A command line as it is started. bwrap stays in the sandbox as its pid 1 (the reaper), whose
    /proc/1/cmdline every process inside can read: so bwrap takes its options (the image cache's
    root filesystem, the session's directories on the work root) from a memfd (`--args FD`, which
    bwrap reads and closes before anything of the sandbox runs) and its visible command line is
    `bwrap --args N -- COMMAND...`, the command naming sandbox paths only. `bwrap` is resolved on
    the host's PATH here, because bwrap itself runs with an empty environment. `fds` must be
    passed to the child (pass_fds) and `close()`d once it started."""

    def __init__(self, argv: list[str]):
        argv = list(argv)
        self.fds: tuple[int, ...] = ()
        self.env = popen_env(argv)
        if not argv or argv[0] != "bwrap":
            self.argv = argv
            return
        split = _options_end(argv)
        fd = os.memfd_create("bwrap-args", os.MFD_CLOEXEC)
        try:
            data = memoryview(b"".join(os.fsencode(a) + b"\0" for a in argv[1:split]))
            while data:
                data = data[os.write(fd, data):]
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        self.fds = (fd,)
        self.argv = [shutil.which("bwrap") or "/usr/bin/bwrap", "--args", str(fd), *argv[split:]]

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = ()


def popen_env(argv: list[str]) -> dict[str, str] | None:
    """The environment to start `argv` with: none of the host's for bwrap (whose own processes
    stay visible inside the sandbox); other runtimes' launchers (apptainer) clean it themselves."""
    return SANDBOX_HOST_ENV if argv and Path(argv[0]).name == "bwrap" else None


CLONE_NEWNET = 0x40000000


class NetworkNamespace:
    """A named network namespace (/run/netns/NAME, `ip netns add`) that a sandbox with network
    joins instead of the host's: its fd is opened here, in the parent, and entered in the child
    before it drops root (setns needs CAP_SYS_ADMIN), so the sandbox's --share-net shares it."""

    def __init__(self, path: str):
        import ctypes

        self.path = path
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._setns = self._libc.setns  # resolved now: nothing is looked up after fork
        self._errno = ctypes.get_errno

    def open(self) -> int:
        try:
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise TermforgeError(f"network namespace {self.path}: {exc.strerror}") from None

    def enter(self, fd: int) -> None:
        if self._setns(fd, CLONE_NEWNET) != 0:
            raise OSError(self._errno(), f"cannot enter the network namespace {self.path}")


# System V shared memory and message queues, and POSIX message queues, are memory that no file
# and no rlimit counts (an agent held 1,280 MiB of SysV segments under disk_mb: 64, each detached
# after writing it). Their limits are per IPC namespace: a sandbox gets one of its own, made by
# its parent while still root, with these set (the grade pool's zygote sets the same).
CLONE_NEWIPC = 0x08000000
IPC_PAGE = 4096


def ipc_limits(limits: Limits) -> dict[str, int]:
    """/proc/sys settings (relative paths) of a sandbox's own IPC namespace: SysV shared memory
    up to `tmp_mb` in all, a few small message queues."""
    shm = limits.tmp_mb * 1024 * 1024
    return {"kernel/shmmax": shm, "kernel/shmall": shm // IPC_PAGE, "kernel/shmmni": 64, "kernel/msgmni": 16,
            "fs/mqueue/queues_max": 16}


def _enter_ipc_namespace(settings: dict[str, int]) -> None:
    import ctypes

    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWIPC) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWIPC)")
    for key, value in settings.items():
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(str(value))


@functools.lru_cache(maxsize=1)
def own_ipc_namespaces() -> bool:
    """Whether this process can give sandboxes IPC namespaces with limits (root with
    CAP_SYS_ADMIN and a writable /proc/sys): tried once, in a child."""
    if os.geteuid() != 0:
        return False
    pid = os.fork()
    if pid == 0:
        try:
            _enter_ipc_namespace(ipc_limits(Limits()))
            os._exit(0)
        except BaseException:  # noqa: BLE001 - any failure means: leave it to bwrap
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _limit_preexec(limits: Limits, uid: int | None = None, cgroup: accounting.SandboxCgroup | None = None,
                   ipc: dict[str, int] | None = None, netns: tuple[NetworkNamespace, int] | None = None):
    def apply() -> None:
        if netns is not None:
            netns[0].enter(netns[1])  # before dropping root: entering a namespace needs the capability
        if cgroup is not None:
            cgroup.join()  # before dropping root: the cgroup is the caller's
        if ipc is not None:
            _enter_ipc_namespace(ipc)  # before dropping root: bwrap keeps it (sandbox_argv own_ipc)
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_sec, limits.cpu_sec + 5))
        mem = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files))
        fsize = limits.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            # Set after dropping root; the session's uid is its own, so the count is the sandbox's.
            # (Without a uid of its own, `nproc_prefix` sets it inside the sandbox instead: there
            # it counts the sandbox's processes, not every process of the caller.)
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_procs, limits.max_procs))

    return apply


def nproc_prefix(limits: Limits, uid: int | None) -> list[str]:
    """The process-count limit set inside the sandbox (after bwrap made its user namespace), for
    sessions that share the caller's uid."""
    if uid is not None or not os.path.exists("/usr/bin/prlimit"):
        return []
    return ["/usr/bin/prlimit", f"--nproc={limits.max_procs}", "--"]


def allocated_bytes(roots: list[Path]) -> int:
    """Disk blocks held under `roots` (sparse files count what they really occupy)."""
    return trees.allocated([Path(r) for r in roots]).bytes


class DiskWatch:
    """Kills a sandbox once its writable layer outgrows the cap. Polls, so a fast writer may
    overshoot by what it writes in one interval; RLIMIT_FSIZE bounds each single file.

    The cap cannot be switched off by what the sandbox writes: a tree the watcher cannot measure
    within its bounds (too deep, too many entries, unreadable, too slow) kills the sandbox too,
    with that reason, and so does any error of the watcher itself."""

    INTERVAL = 0.2

    def __init__(self, roots: list[Path], cap_mb: int, pid: int | None, bounds: trees.Bounds | None = None,
                 kill=None):
        """Kills process group `pid`, or calls `kill()` (a sandbox that is no child of ours)."""
        self.roots, self.cap, self.pid = [Path(r) for r in roots], cap_mb * 1024 * 1024, pid
        self.kill = kill
        self.bounds = bounds or trees.DEFAULT_BOUNDS
        self.hit = False
        self.reason: str | None = None
        self.unmeasurable = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.roots:
            self._thread = accounting.start_thread(self._run)

    def _check(self) -> str | None:
        try:
            m = trees.allocated(self.roots, self.bounds)
        except Exception as exc:  # noqa: BLE001 - a watcher that cannot measure must still stop the writer
            self.unmeasurable = True
            return f"the writable layer could not be measured ({type(exc).__name__}: {exc})"
        if m.bytes > self.cap:
            return f"the writable layer grew past {self.cap // (1024 * 1024)} MiB"
        if m.incomplete:
            self.unmeasurable = True
            return f"the writable layer could not be measured: {m.incomplete}"
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            why = self._check()
            if why is None:
                continue
            self.hit, self.reason = True, why
            try:
                if self.kill is not None:
                    self.kill()
                else:
                    os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            return

    def stop(self) -> None:
        """Stop watching, after one last measurement: a sandbox that wrote past the cap and ended
        within one interval is over its limit all the same (its /tmp and /dev/shm, removed with
        it, would otherwise never be counted)."""
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
        if self._thread is not None and not self.hit:
            why = self._check()
            if why is not None:
                self.hit, self.reason = True, why


def limit_reason(code: int, limits: Limits, disk_hit: bool | str | None) -> str | None:
    if isinstance(disk_hit, str):
        return f"disk: {disk_hit}"
    if disk_hit:
        return f"disk: the writable layer grew past {limits.disk_mb} MiB"
    if code == FSIZE_EXIT:
        return f"file size: a file grew past {limits.max_file_mb} MiB"
    return None

