"""Space on a work root, reserved for each session before it starts.

Sessions of several processes (Snakemake jobs, validation lanes, a grade pool's sessions) keep
their writable trees on one work root (runtime.bwrap.default_work_root: /dev/shm by default). A
session may write up to its `disk_mb` there (every writable place of its sandboxes counts against
it: runtime.bwrap.Scratch), so one agent staying under its own cap could still fill the root and
make the *next* task's oracle fail with ENOSPC, an infrastructure error caused by an agent. So a
session reserves its whole allowance before its tree is made: it is admitted only where the root's
free space, less what every other live session has reserved, holds it; otherwise it waits (a
bounded time, for other sessions to end) and is then refused with one line naming the root and the
space it needs. Checked per session, never once per process.

The registry is a directory per file system (keyed by its device number, so that a pool's
staging folder and the root it lies in share one; under /dev/shm), holding one file per live
reservation: its size (sparse: it takes no space) is the reservation, and its owner holds an
exclusive flock on it for the session's life. A file whose lock can be taken belongs to a process that died: it is
removed and its space counts as free again. Admission decisions are serialised by a lock file in
the same directory. Counting a live session's whole reservation as still to come, though part of
it is written already (and so no longer free), errs on the side of refusing: never of
over-committing the root.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import tempfile
import time
from pathlib import Path

from termforge.errors import TermforgeError

# How long a session waits for others to end before it is refused (tests shorten it).
WAIT_SEC = 300.0
POLL_SEC = 0.2
LOCK_NAME = ".admission"
MIB = 1024 * 1024


def session_bytes(disk_mb: int) -> int:
    """What a session with `disk_mb` reserves: its cap and an eighth more, for what a writer adds
    in the disk watch's last interval before it is stopped and for the grader's /tests copy."""
    return disk_mb * MIB + disk_mb * MIB // 8


# Where the registries live: one place for every process of this user on the machine, whatever
# its TMPDIR or work root (a registry in either would split processes that share the root, and
# be left in directories that must end empty); the system temp directory where there is no such.
REGISTRY_DIR = "/dev/shm"


def registry(root: Path) -> Path:
    """The reservations directory of the file system holding `root` (this user's)."""
    dev = os.stat(root).st_dev
    base = REGISTRY_DIR if os.access(REGISTRY_DIR, os.W_OK | os.X_OK) else tempfile.gettempdir()
    d = Path(base) / f"termforge-reservations-{os.geteuid()}" / f"dev-{dev:x}"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def _reserved_by_others(d: Path) -> int:
    """Bytes reserved by live sessions; the files of dead owners are removed on the way."""
    total = 0
    for name in os.listdir(d):
        if name == LOCK_NAME:
            continue
        try:
            fd = os.open(d / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                total += os.fstat(fd).st_size  # its owner lives
                continue
            try:  # nobody holds it: its owner is gone
                os.unlink(d / name)
            except FileNotFoundError:
                pass
        finally:
            os.close(fd)
    return total


class Reservation:
    """`nbytes` of `root` held for one session until `release()` (or its process ends)."""

    def __init__(self, root: Path, path: Path, fd: int, nbytes: int):
        self.root, self.path, self.fd, self.nbytes = root, path, fd, nbytes

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None


def reserve(root: str | os.PathLike, nbytes: int, what: str = "a session", wait: float | None = None) -> Reservation:
    """Reserve `nbytes` of the work root `root` for `what`; waits up to `wait` seconds (WAIT_SEC)
    for others to end, then raises TermforgeError naming the root and the space needed."""
    root = Path(root)
    d = registry(root)
    wait = WAIT_SEC if wait is None else wait
    deadline = time.monotonic() + wait
    while True:
        lock = os.open(d / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            others = _reserved_by_others(d)
            vfs = os.statvfs(root)
            free = vfs.f_bavail * vfs.f_frsize
            if free - others >= nbytes:
                path = d / f"{os.getpid()}-{secrets.token_hex(8)}"
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.ftruncate(fd, nbytes)
                return Reservation(root, path, fd, nbytes)
        finally:
            os.close(lock)
        if time.monotonic() >= deadline:
            raise TermforgeError(
                f"work root {root}: {what} needs {nbytes / MIB:.0f} MiB (runtime.limits.disk_mb and an eighth) but "
                f"{free / MIB:.0f} MiB are free there and {others / MIB:.0f} MiB are reserved by running sessions "
                f"(waited {wait:.0f}s); free space there, lower runtime.limits.disk_mb or set TERMFORGE_WORK_DIR "
                "to a larger place")
        time.sleep(POLL_SEC)


def room_for(root: str | os.PathLike, nbytes: int) -> int:
    """How many reservations of `nbytes` the work root `root` could admit now (free space less
    what live sessions hold): what a caller that keeps many sessions open at once (a batch of
    episodes) may start together without waiting on its own sessions."""
    root = Path(root)
    d = registry(root)
    vfs = os.statvfs(root)
    return max(0, (vfs.f_bavail * vfs.f_frsize - _reserved_by_others(d)) // max(1, nbytes))


__all__ = ["Reservation", "reserve", "registry", "room_for", "session_bytes", "WAIT_SEC"]
