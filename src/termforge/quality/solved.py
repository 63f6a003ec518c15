"""One oracle run's /app, kept for the checks that start from a solved environment (the mutation
probe's mutants, input sensitivity): each copies it into a fresh session instead of running the
oracle again (validate.grade_pool's path; docs/grading.md, "What validation reuses").

Validation's first oracle run keeps a copy of /app as the oracle left it, before anything grades
it. The copies, out and back in, are made by `cp -a` inside the sessions' sandboxes, as their own
uid (deletions included), so nothing of the host follows a link the oracle made. Only a session
of the uid that made the copy (the sessions of one grade pool share one) can take it; where a
copy fails (a file the oracle made unreadable) the check runs the oracle itself, as without.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from termforge.runtime import trees
from termforge.runtime.base import Bind

INSIDE = "/tmp/tf-solved"
COPY_OUT = f"cp -a /app/. {INSIDE}/"
COPY_IN = f"find /app -mindepth 1 -delete && cp -a {INSIDE}/. /app/"


class SolvedApp:
    """`keep` is called once, where the oracle has just run; `seed` (from any thread) waits for it.
    `give_up` releases the waiters when there is nothing to keep (the oracle failed)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.uid: int | None = None
        self._done = threading.Event()

    def keep(self, session, limits) -> None:
        try:
            snap = Path(tempfile.mkdtemp(prefix="tf-solved-", dir=session.workdir.parent))
            if session.uid is not None:
                os.chown(snap, session.uid, session.uid)
            res = session.exec(COPY_OUT, timeout=limits.wall_sec, cwd="/", binds=[Bind(snap, INSIDE, True)])
            if res.ok:
                self.path, self.uid = snap, session.uid
            else:
                trees.remove_tree(snap)
        finally:
            self._done.set()

    def give_up(self) -> None:
        self._done.set()

    def seed(self, session, limits) -> bool:
        """Make `session`'s /app the kept one; False where there is none for its uid or the copy
        failed (then its /app may be half-cleared: start a fresh session)."""
        self._done.wait()
        if self.path is None or getattr(session, "uid", None) != self.uid:
            return False
        return session.exec(COPY_IN, timeout=limits.wall_sec, cwd="/", binds=[Bind(self.path, INSIDE, False)]).ok

    def close(self) -> None:
        self._done.set()
        if self.path is not None:
            trees.remove_tree(self.path)
            self.path = None


def solve_in(session, runtime, image, limits, task_dir: Path, solved: SolvedApp | None = None):
    """`session` with the oracle's /app: `solved`'s copy where it takes, else the oracle run in
    it. Returns (the session that holds it: a fresh one where a copy failed half-way, the
    oracle's ExecResult or None where the copy was taken)."""
    from termforge.verifier import run_oracle

    if solved is not None:
        if solved.seed(session, limits):
            return session, None
        if solved.path is not None and session.uid == solved.uid:  # the copy failed half-way
            session.stop()
            session = runtime.start(image, limits)
    return session, run_oracle(session, Path(task_dir), timeout=limits.wall_sec)


__all__ = ["SolvedApp", "solve_in"]
