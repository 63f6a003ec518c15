"""A persistent bash session inside a sandbox: state (cwd, variables, functions) carries over
between commands, each command gets the real exit code and a wall-clock limit.

Each command is handed to `eval` through a quoted heredoc, so a syntax error in the agent's
command is an error message and exit code 2, not a broken session. stdin is /dev/null (a command
that reads stdin cannot swallow the next command). stdout and stderr are one stream, in order,
as a terminal would show them. On a timeout, or if the command exits the shell, the sandbox is
killed and a fresh shell starts on the same task layer at the next command.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from termforge.runtime.base import ExecResult, Limits
from termforge.runtime.process import DiskWatch, Launch, PublicNetwork, _limit_preexec, limit_reason, tree_bounds

MAX_BUFFER = 8 * 1024 * 1024


class PersistentShell:
    def __init__(self, argv_factory: Callable[[], list[str]], limits: Limits, uid: int | None = None,
                 watch: list[Path] = (), ipc: dict[str, int] | None = None, netns=None, public_net: bool = False):
        self.netns = netns  # runtime.bwrap.NetworkNamespace the shell (and every restart) starts in
        # Each (re)started shell's own namespace connected by slirp4netns (process.PublicNetwork),
        # ended and reaped with that shell.
        self.public_net = public_net
        self.net: PublicNetwork | None = None
        self.argv_factory = argv_factory
        self.limits = limits
        self.uid = uid
        self.ipc = ipc
        self.watch = list(watch)
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def _start(self) -> None:
        argv = self.argv_factory()
        if self.public_net:
            self.net = PublicNetwork(self.uid)
            argv = self.net.argv(argv)
        launch = Launch(argv)
        ns_fd = self.netns.open() if self.netns is not None else None
        try:
            self.proc = subprocess.Popen(
                launch.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_limit_preexec(self.limits, self.uid, ipc=self.ipc,
                                          netns=(self.netns, ns_fd) if ns_fd is not None else None),
                pass_fds=(*launch.fds, *(self.net.fds if self.net else ())),
                env=launch.env,
            )
        except BaseException:
            self._close_net()
            raise
        finally:
            if ns_fd is not None:
                os.close(ns_fd)
            launch.close()
        if self.net is not None:
            try:
                self.net.connect(self.proc)
            except BaseException:
                self._kill()
                raise

    def _close_net(self) -> None:
        if self.net is not None:
            self.net.close()
            self.net = None

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if self.proc:
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self.proc = None
        self._close_net()

    def run(self, command: str, timeout: float) -> ExecResult:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.restarts += 1
            self._kill()
            self._start()
        disk = DiskWatch(self.watch, self.limits.disk_mb, self.proc.pid, tree_bounds(self.limits))
        try:
            res = self._run(command, timeout)
        finally:
            disk.stop()
        if disk.hit and self.proc is not None:
            self._kill()
        res.limit_hit = limit_reason(res.exit_code, self.limits, disk.reason)
        if res.limit_hit:
            res.stdout += f"\n[termforge: sandbox killed, limit reached: {res.limit_hit}]"
        return res

    def _run(self, command: str, timeout: float) -> ExecResult:
        nonce = secrets.token_hex(8)
        delim = f"__TF_CMD_{nonce}"
        sentinel = f"__TF_DONE_{nonce}_"
        script = (f"__tf_cmd=$(cat <<'{delim}'\n{command}\n{delim}\n)\n"
                  f"eval \"$__tf_cmd\" < /dev/null\n"
                  f"printf '\\n{sentinel}%s__\\n' \"$?\"\n")
        start = time.monotonic()
        try:
            self.proc.stdin.write(script.encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._kill()
            return ExecResult(125, "", "the shell is gone (it exited before the command ran)", 0.0)
        pattern = re.compile(re.escape(sentinel).encode() + rb"(\d+)__\n")
        buf = b""
        fd = self.proc.stdout.fileno()
        while True:
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                self._kill()
                self.restarts += 1
                return ExecResult(124, _clean(buf), "", time.monotonic() - start, timed_out=True)
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # the shell died (exit, kill by a limit)
                code = self.proc.wait()
                self._kill()
                return ExecResult(128 - code if code < 0 else code, _clean(buf), "", time.monotonic() - start)
            buf += chunk
            if len(buf) > MAX_BUFFER:
                buf = buf[: MAX_BUFFER // 2] + b"\n[... output truncated ...]\n" + buf[-MAX_BUFFER // 2:]
            m = pattern.search(buf)
            if m:
                out = buf[: m.start()]
                if out.endswith(b"\n"):
                    out = out[:-1]
                return ExecResult(int(m.group(1)), _clean(out), "", time.monotonic() - start)

    def close(self) -> None:
        self._kill()


def _clean(data: bytes) -> str:
    return data.decode(errors="replace")
