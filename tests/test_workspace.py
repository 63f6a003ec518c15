"""runtime/workspace.py: each session's disk allowance is reserved on its work root before it
starts, across processes, and a reservation whose process died is reclaimed (issue 39)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from termforge.errors import TermforgeError
from termforge.runtime import workspace

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def small_root():
    """A work root of 64 MiB of its own (a tmpfs mounted here: its own file system and registry)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as a work root needs root")
    root = Path(tempfile.mkdtemp(prefix="tf-small-root-"))
    root.chmod(0o711)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0711", "tmpfs", str(root)], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
        os.rmdir(root)


HOLDER = """
import sys, time
from termforge.runtime import workspace
r = workspace.reserve(sys.argv[1], int(sys.argv[2]), wait=0)
print("held", flush=True)
time.sleep(120)
"""


def test_reservations_are_shared_across_processes_and_a_dead_holders_is_reclaimed(small_root):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(small_root), str(40 * MIB)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TermforgeError) as refused:
            workspace.reserve(small_root, 30 * MIB, "a session of task t", wait=0.3)
        message = str(refused.value)
        assert str(small_root) in message and "30 MiB" in message and "\n" not in message, message
        mine = workspace.reserve(small_root, 20 * MIB, wait=0)  # what is left beside the other's 40 MiB
    finally:
        holder.kill()
        holder.wait()
    # Its holder died: its 40 MiB are free again (the other reservation, 20 MiB, still counts).
    again = workspace.reserve(small_root, 40 * MIB, wait=0)
    with pytest.raises(TermforgeError):
        workspace.reserve(small_root, 8 * MIB, wait=0)
    for r in (mine, again):
        r.release()
    workspace.reserve(small_root, 60 * MIB, wait=0).release()


def test_a_session_waits_for_space_another_session_gives_back(small_root):
    import threading

    first = workspace.reserve(small_root, 50 * MIB, wait=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(workspace.reserve(small_root, 50 * MIB, wait=30)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and not got  # queued, not refused, while the space is held
    first.release()
    waiter.join(30)
    assert len(got) == 1 and got[0].nbytes == 50 * MIB
    got[0].release()
