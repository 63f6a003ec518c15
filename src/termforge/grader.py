"""The grader's private channel to the host (docs/grading.md).

Inside the verifier sandbox, the agent's programs still run whenever a test executes them, with
the grader's uid. So the verdict never travels through anything they can reach: not a file under
/logs, not a line on a shared stdout. The host hands the sandbox one end of a socketpair (the
*boot* socket, fd number in TERMFORGE_GRADER_FD). The grader, `python3 -I /verifier/grade.py`,
first makes itself non-dumpable (so /proc/<pid>/fd, /proc/<pid>/mem and ptrace are closed to
same-uid processes) and marks the boot socket close-on-exec, then says hello; the host answers with
a *private* socket (SCM_RIGHTS), created only now, that the grader also marks close-on-exec. Only
then does pytest import the pristine tests and run them. The verdict (collected test ids and
each one's outcome) goes back on the private socket. Everything else the host sees on the boot
socket after the handshake came from somebody who is not the grader: an integrity finding.

When the grader is the sandbox's first process (termforge's own tasks) nobody else ever holds
the boot socket. On the Terminal-Bench path, test.sh's bash holds it too; a process the tests
start could reach it through /proc/<bash>/fd, but by then the grader already holds the private
socket and the host no longer listens for a hello.
"""

from __future__ import annotations

import array
import json
import selectors
import socket
import threading

GRADER_FD_ENV = "TERMFORGE_GRADER_FD"
HELLO = b"termforge-grader-hello"
MAX_MESSAGE = 1 << 20

GRADE_PY = r'''
import ctypes
import os
import sys

# Before anything else: no /proc/<pid>/mem, /proc/<pid>/fd or ptrace for same-uid processes.
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
import array
import json
import signal
import socket

os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
sys.dont_write_bytecode = True  # no __pycache__ copy of the tests


def channel():
    fd = os.environ.pop("TERMFORGE_GRADER_FD", None)
    if fd is None:
        return None
    boot = socket.socket(fileno=int(fd))
    boot.set_inheritable(False)
    boot.sendmsg([HELLO])
    fds = array.array("i")
    _, anc, _, _ = boot.recvmsg(64, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    for extra in fds[1:]:
        os.close(extra)
    if not fds:
        sys.exit(3)
    os.set_inheritable(fds[0], False)
    boot.detach()
    os.close(int(fd))
    return socket.socket(fileno=fds[0])


CHANNEL = channel()
import pytest  # noqa: E402


class Proof:
    def __init__(self):
        self.collected = []
        self.outcomes = {}

    def pytest_collection_modifyitems(self, session, config, items):
        self.collected = [item.nodeid for item in items]

    def pytest_collection_finish(self, session):
        # Programs the tests start must not read the expected values from the test files.
        for path in {str(item.path) for item in session.items}:
            if path.startswith("/tests/") and os.path.exists(path):
                os.unlink(path)

    def pytest_runtest_logreport(self, report):
        rank = {"passed": 0, "skipped": 1, "failed": 2}
        if report.failed:
            state = "failed"
        elif report.skipped:
            state = "skipped"
        elif report.when == "call":
            state = "passed"
        else:
            return
        old = self.outcomes.get(report.nodeid)
        if old is None or rank[state] > rank[old]:
            self.outcomes[report.nodeid] = state


def ancestors():
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids | {1}


def leftovers():
    """Processes the tests started that are still alive: reported, then killed."""
    mine, found = ancestors(), []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in mine:
            try:
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                        continue  # exited, not yet reaped by the sandbox's init
                with open(f"/proc/{name}/comm") as f:
                    found.append(f.read().strip()[:40])
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass
    return found


proof = Proof()
code = pytest.main(["-q", "-p", "no:cacheprovider", "--import-mode=importlib", "--rootdir=/tests",
                    *sys.argv[1:]], plugins=[proof])
left = leftovers()
ok = bool(proof.collected) and all(proof.outcomes.get(n) == "passed" for n in proof.collected)
if CHANNEL is not None:
    CHANNEL.sendall(json.dumps({"collected": proof.collected, "outcomes": proof.outcomes,
                                "exitstatus": int(code), "leftover": left}).encode())
    CHANNEL.close()
print(f"\ntermforge grader: {sum(v == 'passed' for v in proof.outcomes.values())}/{len(proof.collected)} passed")
sys.exit(0 if ok else 1)
'''.replace("HELLO", repr(HELLO))

RUN_TESTS = """#!/bin/bash
exec /usr/bin/python3 -I /verifier/grade.py "$@"
"""


class GraderChannel:
    """Host side: the boot socket's handshake and the private verdict socket, served by a thread
    while the sandbox runs."""

    def __init__(self):
        self.host, self.boot = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.private: socket.socket | None = None
        self.verdicts: list[bytes] = []
        self.findings: list[str] = []
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.host, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def env(self) -> dict[str, str]:
        return {GRADER_FD_ENV: str(self.boot.fileno())}

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.boot.fileno(),)

    def _on_host(self) -> None:
        try:
            data = self.host.recv(MAX_MESSAGE)
        except OSError:
            data = b""
        if not data:
            self._sel.unregister(self.host)
            return
        if data == HELLO and self.private is None:
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self.host.sendmsg([b"ok"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                             array.array("i", [theirs.fileno()]))])
            finally:
                theirs.close()
            self.private = mine
            self._sel.register(mine, selectors.EVENT_READ)
        elif data == HELLO:
            self.findings.append("reward channel touched: a second grader said hello")
        else:
            self.findings.append(f"reward channel touched: {len(data)} bytes on the boot socket from a non-grader")

    def _on_private(self) -> None:
        try:
            data = self.private.recv(MAX_MESSAGE)
        except OSError:
            data = b""
        if not data:
            self._sel.unregister(self.private)
            return
        self.verdicts.append(data)

    def _poll(self, timeout: float) -> bool:
        events = self._sel.select(timeout)
        for key, _ in events:
            if key.fileobj is self.host:
                self._on_host()
            else:
                self._on_private()
        return bool(events)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._sel.get_map():
                return
            self._poll(0.1)
        while self._sel.get_map() and self._poll(0):  # what arrived before the sandbox ended
            pass

    def finish(self) -> dict | None:
        """Stop serving (call after the sandbox exited); the grader's verdict, or None."""
        self._stop.set()
        self._thread.join()
        for s in (self.host, self.boot, self.private):
            if s is not None:
                s.close()
        self._sel.close()
        if len(self.verdicts) > 1:
            self.findings.append(f"reward channel touched: {len(self.verdicts)} verdict messages")
            return None
        if not self.verdicts:
            return None
        try:
            verdict = json.loads(self.verdicts[0].decode())
        except (UnicodeDecodeError, ValueError):
            self.findings.append("reward channel touched: the verdict message is not JSON")
            return None
        ok = (isinstance(verdict, dict) and isinstance(verdict.get("collected"), list)
              and isinstance(verdict.get("outcomes"), dict))
        if not ok:
            self.findings.append("reward channel touched: the verdict message has the wrong shape")
            return None
        return verdict


__all__ = ["GraderChannel", "GRADE_PY", "RUN_TESTS", "GRADER_FD_ENV"]
