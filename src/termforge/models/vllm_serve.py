"""Run `vllm serve` for the length of a `with` block, for GPU rules that talk to it over HTTP.

The server is started in its own process group (vLLM forks engine workers), polled on /health until
ready, and on exit, normal or not, sent SIGTERM, then SIGKILL if it has not stopped in time. The
command is configurable so tests can run the lifecycle against a stand-in server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

from termforge.errors import TermforgeError

DEFAULT_COMMAND = ("vllm", "serve")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop_process_group(proc: subprocess.Popen, stop_timeout: float) -> None:
    """SIGTERM the group, wait, then SIGKILL whatever is left (the leader and orphaned workers)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Workers that outlived their leader still hold the GPU: sweep the group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def serve_vllm(
    model: str,
    port: int | None = None,
    args: Sequence[str] = (),
    health_timeout: float = 900.0,
    command: Sequence[str] = DEFAULT_COMMAND,
    host: str = "127.0.0.1",
    log_path: str | os.PathLike | None = None,
    stop_timeout: float = 30.0,
    poll_interval: float = 0.5,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Start `<command> <model> --host H --port P <args>`, yield its OpenAI base URL once /health
    answers 200, and stop it on exit. `port=None` picks a free port. The server's output goes to
    `log_path` (kept), or to a temporary file that is kept only when the server failed to start."""
    command = list(command)
    if not command or shutil.which(command[0]) is None:
        raise TermforgeError(
            f"serve_vllm: executable {command[0] if command else '(empty command)'!r} not found on PATH; "
            "install vllm on the GPU node (pip install 'termforge[vllm]') or point the model at an "
            "already running endpoint with backend 'openai'"
        )
    port = port or free_port(host if host != "0.0.0.0" else "127.0.0.1")
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    argv = [*command, model, "--host", host, "--port", str(port), *args]
    own_log = log_path is None
    if own_log:
        fd, tmp = tempfile.mkstemp(prefix="vllm-serve-", suffix=".log")
        os.close(fd)
        log_file = Path(tmp)
    else:
        log_file = Path(log_path)
        log_file.parent.mkdir(parents=True, exist_ok=True)

    with open(log_file, "ab") as log_fh:
        proc = subprocess.Popen(
            argv,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    ready = False
    try:
        health_url = f"http://{connect_host}:{port}/health"
        deadline = time.monotonic() + health_timeout
        while not _healthy(health_url):
            code = proc.poll()
            if code is not None:
                raise TermforgeError(
                    f"serve_vllm: {' '.join(argv)} exited with status {code} before becoming healthy; "
                    f"log {log_file}:\n{_tail(log_file)}"
                )
            if time.monotonic() >= deadline:
                raise TermforgeError(
                    f"serve_vllm: {health_url} not healthy within health_timeout={health_timeout:g}s; "
                    f"log {log_file}:\n{_tail(log_file)}"
                )
            time.sleep(poll_interval)
        ready = True
        yield f"http://{connect_host}:{port}/v1"
    finally:
        stop_process_group(proc, stop_timeout)
        # A failed start names its log in the error, so that log stays; otherwise ours is clutter.
        if own_log and ready:
            with contextlib.suppress(OSError):
                log_file.unlink()
