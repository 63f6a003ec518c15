"""One sandboxed process under limits, the parts every launcher shares (bwrap sessions, the
persistent shell, the grade pool): its command line and environment, rlimits and cgroup set
before exec, the watch on its writable trees' disk use, and the reason a limit gives for its end.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import threading
from pathlib import Path

from termforge.runtime import accounting, trees
from termforge.runtime.base import Limits

# The environment bwrap itself is started with: nothing of the host's (runtime.bwrap's docstring).
SANDBOX_HOST_ENV: dict[str, str] = {}
FSIZE_EXIT = 128 + signal.SIGXFSZ


def tree_bounds(limits: Limits) -> trees.Bounds:
    """How far the host walks a sandbox's writable trees (runtime.limits tree_depth/tree_entries)."""
    return trees.Bounds(depth=limits.tree_depth, entries=limits.tree_entries, seconds=trees.DEFAULT_BOUNDS.seconds)


def popen_argv(argv: list[str]) -> list[str]:
    """The command line to start: `bwrap` resolved on the host's PATH here, because bwrap itself
    runs with an empty environment."""
    if argv and argv[0] == "bwrap":
        return [shutil.which("bwrap") or "/usr/bin/bwrap", *argv[1:]]
    return list(argv)


def popen_env(argv: list[str]) -> dict[str, str] | None:
    """The environment to start `argv` with: none of the host's for bwrap (whose own processes
    stay visible inside the sandbox); other runtimes' launchers (apptainer) clean it themselves."""
    return SANDBOX_HOST_ENV if argv and Path(argv[0]).name == "bwrap" else None


def _limit_preexec(limits: Limits, uid: int | None = None, cgroup: accounting.SandboxCgroup | None = None):
    def apply() -> None:
        if cgroup is not None:
            cgroup.join()  # before dropping root: the cgroup is the caller's
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
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()


def limit_reason(code: int, limits: Limits, disk_hit: bool | str | None) -> str | None:
    if isinstance(disk_hit, str):
        return f"disk: {disk_hit}"
    if disk_hit:
        return f"disk: the writable layer grew past {limits.disk_mb} MiB"
    if code == FSIZE_EXIT:
        return f"file size: a file grew past {limits.max_file_mb} MiB"
    return None
