"""The grader's private channel to the host (docs/grading.md).

Inside the verifier sandbox, the agent's programs still run whenever a test executes them, with
the grader's uid. So the verdict never travels through anything they can reach: not a file under
/logs, not a line on a shared stdout. The host hands the sandbox's first process one end of a
socketpair (the *boot* socket, fd number in TERMFORGE_GRADER_FD). That process,
`python3 -I /verifier/grade.py` (termforge/grading/grade.py), first makes itself non-dumpable (so
/proc/<pid>/fd, /proc/<pid>/mem, ptrace and pidfd_getfd are closed to same-uid processes) and marks
the boot socket close-on-exec, then says hello; the host answers with a *private* socket
(SCM_RIGHTS), created only now, that it also marks close-on-exec. Everything else the host sees on
the boot socket after the handshake came from somebody who is not the grader: a finding.

termforge's own tasks: the first process is the grader itself; the verdict (collected test ids,
each one's outcome, processes left alive) goes back on the private socket.

Harbor tasks, whose test.sh may run the agent's code before it runs the tests: the first process
is the grader's *supervisor* (`grade.py --supervise test.sh`). It holds the channel and starts
test.sh without it (nothing test.sh runs ever holds either socket); when test.sh calls
/verifier/run-tests, that client asks the supervisor over a request socket, and the supervisor
forks the grader (the same non-dumpable process, never an exec) on the pristine, read-only /tests.
Anyone test.sh started can ask too, but all they get is the real grader on the real tests, once:
a second request is refused and reported. At the end the supervisor reports (test.sh's status,
how many requests, how the grader ended) on the private socket; a verification without that
report (the supervisor was killed) is a 0 with a finding.
"""

from __future__ import annotations

import array
import json
import selectors
import socket
import threading

from termforge.grading import program
from termforge.runtime import accounting
from termforge.grading.grade import GRADER_FD_ENV, HELLO

MAX_MESSAGE = 1 << 20

GRADE_PY = program("grade.py")
RUN_TESTS = program("run-tests.sh")  # /verifier/run-tests in the sandbox


def _kind(data: bytes) -> str | None:
    try:
        message = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    return message.get("kind") if isinstance(message, dict) else None


class GraderChannel:
    """Host side: the boot socket's handshake and the private verdict socket, served by a thread
    while the sandbox runs."""

    def __init__(self):
        self.host, self.boot = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.private: socket.socket | None = None
        self.verdicts: list[bytes] = []
        self.reports: list[bytes] = []
        self.report: dict | None = None  # the supervisor's (Harbor tasks), once finish() ran
        self.findings: list[str] = []
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.host, selectors.EVENT_READ)
        # finish() wakes the serving thread at once (a poll interval per grade was idle wall time).
        self._wake, self._waker = socket.socketpair()
        self._sel.register(self._wake, selectors.EVENT_READ)
        self._thread = accounting.start_thread(self._serve)

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
        (self.reports if _kind(data) == "supervisor" else self.verdicts).append(data)

    def _poll(self, timeout: float) -> bool:
        events = self._sel.select(timeout)
        seen = False
        for key, _ in events:
            if key.fileobj is self._wake:
                self._sel.unregister(self._wake)  # the stop signal, seen once
            elif key.fileobj is self.host:
                self._on_host()
                seen = True
            else:
                self._on_private()
                seen = True
        return seen

    def _serving(self) -> bool:
        return any(key.fileobj is not self._wake for key in self._sel.get_map().values())

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._serving():
                return
            self._poll(1.0)
        while self._serving() and self._poll(0):  # what arrived before the sandbox ended
            pass

    def finish(self) -> dict | None:
        """Stop serving (call after the sandbox exited); the grader's verdict, or None."""
        self._stop.set()
        try:
            self._waker.send(b"x")
        except OSError:
            pass
        self._thread.join()
        for s in (self.host, self.boot, self.private, self._wake, self._waker):
            if s is not None:
                s.close()
        self._sel.close()
        self.report = self._report()
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

    def _report(self) -> dict | None:
        if len(self.reports) > 1:
            self.findings.append(f"reward channel touched: {len(self.reports)} supervisor reports")
            return None
        if not self.reports:
            return None
        try:
            report = json.loads(self.reports[0].decode())
        except (UnicodeDecodeError, ValueError):
            self.findings.append("reward channel touched: the supervisor's report is not JSON")
            return None
        return report if isinstance(report, dict) else None


__all__ = ["GraderChannel", "GRADE_PY", "RUN_TESTS", "GRADER_FD_ENV"]
