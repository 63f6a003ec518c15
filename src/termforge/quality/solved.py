"""One oracle run's /app, kept for the checks that start from a solved environment (the mutation
probe's mutants, input sensitivity): each copies it into a fresh session instead of running the
oracle again (validate.grade_pool's path; docs/grading.md, "What validation reuses").

Validation's first oracle run keeps a copy of /app as the oracle left it (its sandbox is gone:
nothing is still writing), before anything grades it. The copies, out and back in, are made on
the host by runtime.trees: bounded walks that never follow a link, as copy_out reads an agent's
tree. A copy is kept only where it is exactly what `cp -a` run as the session's own uid inside its
sandbox would give (the copy this replaced): regular files, directories and symlinks with their
modes and times, the /app directory's own included. Anything else (a file or directory the oracle
made unreadable to its own uid, a FIFO, a hard link, a sparse file, a setuid bit, an extended
attribute, a tree past the bounds or the disk cap) keeps nothing, and each check that needs a
solved /app runs the oracle itself, as without.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from pathlib import Path

from termforge.runtime import trees

# Holes smaller than this are not told apart from a file system's own block rounding.
SPARSE_SLACK = 64 * 1024


def _inexact(root: Path, bounds: trees.Bounds, cap_bytes: int) -> str | None:
    """Why a host copy of `root` would not be what `cp -a` as its owner makes, or None."""
    def attrs(name: str, dir_fd: int | None) -> str | None:
        try:
            if os.listxattr(name if dir_fd is None else f"/proc/self/fd/{dir_fd}/{name}", follow_symlinks=False):
                return "has extended attributes"
        except OSError:
            pass
        return None

    st = os.lstat(root)
    if st.st_mode & 0o500 != 0o500:
        return "/app is not readable by its owner"
    if attrs(str(root), None):
        return "/app has extended attributes"
    total = 0
    walk = trees.TreeWalk(root, bounds)
    for e in walk:
        mode = e.st.st_mode
        if stat.S_ISDIR(mode):
            bad = "a directory its owner cannot read" if mode & 0o500 != 0o500 else None
        elif stat.S_ISREG(mode):
            total += e.st.st_size
            bad = ("a file its owner cannot read" if not mode & stat.S_IRUSR else
                   "a setuid or setgid file" if mode & (stat.S_ISUID | stat.S_ISGID) else
                   "a hard link" if e.st.st_nlink > 1 else
                   "a sparse file" if e.st.st_blocks * 512 + SPARSE_SLACK < e.st.st_size else None)
        elif stat.S_ISLNK(mode):
            bad = None
        else:
            bad = trees.describe_mode(mode)
        bad = bad or attrs(e.name, e.dir_fd)
        if bad:
            return f"{e.rel[:200]}: {bad}"
        if total > cap_bytes:
            return f"more than {cap_bytes // (1024 * 1024)} MiB"
    return walk.incomplete


class SolvedApp:
    """`keep` is called once, where the oracle has just run; `seed` (from any thread) waits for it.
    `give_up` releases the waiters when there is nothing to keep (the oracle failed)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.why_not: str | None = None
        self._root: os.stat_result | None = None
        self._done = threading.Event()

    def keep(self, session, limits) -> None:
        from termforge.runtime.process import tree_bounds

        snap = None
        try:
            bounds = tree_bounds(limits)
            self.why_not = _inexact(session.layer, bounds, limits.disk_mb * 1024 * 1024)
            if self.why_not is None:
                snap = Path(tempfile.mkdtemp(prefix="tf-solved-", dir=session.workdir.parent))
                problems = trees.copy_tree(session.layer, snap, bounds)
                if problems:
                    self.why_not = problems[0]
                else:
                    self.path, self._root, snap = snap, os.lstat(session.layer), None
        finally:
            if snap is not None:
                trees.remove_tree(snap)
            self._done.set()

    def give_up(self) -> None:
        self._done.set()

    def seed(self, session, limits) -> bool | None:
        """Make `session`'s /app the kept one: True; None where nothing was kept; False where the
        copy failed (then its /app is half-made: start a fresh session)."""
        from termforge.runtime.process import tree_bounds

        self._done.wait()
        if self.path is None:
            return None
        layer, bounds = session.layer, tree_bounds(limits)
        if trees.remove_tree(layer) or trees.copy_tree(self.path, layer, bounds):
            return False
        uid = getattr(session, "uid", None)
        if uid is not None and trees.chown(layer, uid, bounds=bounds):
            return False
        # `cp -a kept/. /app/` gives /app the kept directory's mode and times too.
        os.chmod(layer, stat.S_IMODE(self._root.st_mode))
        os.utime(layer, ns=(self._root.st_atime_ns, self._root.st_mtime_ns))
        return True

    def close(self) -> None:
        self._done.set()
        if self.path is not None:
            trees.remove_tree(self.path)
            self.path = None


def solve_in(session, runtime, image, limits, task_dir: Path, solved: SolvedApp | None = None):
    """`session` with the oracle's /app: `solved`'s copy where it takes, else the oracle run in
    it. Returns (the session that holds it: a fresh one where a copy failed half-way, the
    oracle's ExecResult or None where the copy was taken)."""
    from termforge.grading.verifier import run_oracle

    if solved is not None:
        seeded = solved.seed(session, limits)
        if seeded:
            return session, None
        if seeded is False:
            session.stop()
            session = runtime.start(image, limits)
    return session, run_oracle(session, Path(task_dir), timeout=limits.wall_sec)


__all__ = ["SolvedApp", "solve_in"]
