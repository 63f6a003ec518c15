"""A real HTTP server speaking the OpenAI chat-completions protocol, standing in for remote LLM APIs.

Use it in-process (`with FakeOpenAIServer(...) as server: server.base_url`) or as a script:
`python tests/fake_openai_server.py [MODEL] --port N` (the same argument shape `vllm serve` takes,
so it can stand in for vLLM in lifecycle tests). Endpoints: POST /v1/chat/completions,
GET /v1/models, GET /health.

Replies are scripted (a list served in order, or a callable messages -> text). Faults are injected
with a seeded RNG: a fraction of requests answer 500 or 429, hang past the client's timeout, or
return malformed JSON. Every request body and its headers are recorded, and the server tracks the
most requests it ever had in flight, so tests can check what a client really sent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

FAULT_KINDS = ("500", "429", "hang", "malformed")



class Scripted:
    """A reply with more than text: `finish_reason` ("length" for a reply cut at the token limit),
    or an HTTP `status` other than 200 (answered with `text` as the error message)."""

    def __init__(self, text: str, finish_reason: str = "stop", status: int = 200) -> None:
        self.text, self.finish_reason, self.status = text, finish_reason, status


Reply = list[str | Scripted] | Callable[[list[dict[str, Any]]], str | Scripted] | None


def count_words(text: str) -> int:
    """The token count this server reports: deterministic and easy to predict in tests."""
    return len(text.split())


def default_reply(messages: list[dict[str, Any]]) -> str:
    last_user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    return f"echo: {last_user[:60]}"


class _QuietHTTPServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and closed its socket is part of the script, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOpenAIServer:
    def __init__(
        self,
        replies: Reply = None,
        faults: dict[str, float] | None = None,
        seed: int = 0,
        hang_s: float = 5.0,
        latency_s: float = 0.0,
        max_n: int | None = None,
        require_api_key: str | None = None,
        health_delay_s: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        quiet: bool = True,
    ) -> None:
        faults = dict(faults or {})
        unknown = set(faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
        if sum(faults.values()) > 1:
            raise ValueError("fault fractions add up to more than 1")
        self.replies = replies
        self.faults = faults
        self.hang_s = hang_s
        self.latency_s = latency_s
        self.max_n = max_n
        self.require_api_key = require_api_key
        self.health_delay_s = health_delay_s
        self.quiet = quiet
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body", "fault"}
        self.injected = {k: 0 for k in FAULT_KINDS}
        self.in_flight = 0
        self.max_in_flight = 0
        self.served = 0  # replies drawn from a scripted list so far
        self._stopping = threading.Event()
        self._started_at = time.monotonic()
        self._httpd = _QuietHTTPServer((host, port), self._handler_class())
        # Hanging handlers must not keep stop() (or the interpreter) waiting.
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeOpenAIServer":
        self._started_at = time.monotonic()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._started_at = time.monotonic()
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- what tests read --------------------------------------------------------------------------

    def chat_bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def request_count(self) -> int:
        return len(self.chat_bodies())

    def prompts_text(self) -> str:
        """All message contents received, joined: for scanning what a client put in its prompts."""
        return "\n".join(
            m.get("content") or "" for b in self.chat_bodies() if b for m in b.get("messages", [])
        )

    # -- behaviour --------------------------------------------------------------------------------

    def _draw_fault(self) -> str | None:
        x = self.rng.random()
        acc = 0.0
        for kind in FAULT_KINDS:
            acc += self.faults.get(kind, 0.0)
            if x < acc:
                return kind
        return None

    def _reply_text(self, messages: list[dict[str, Any]]) -> str | Scripted:
        if self.replies is None:
            return default_reply(messages)
        if callable(self.replies):
            return self.replies(messages)
        with self.lock:
            text = self.replies[self.served % len(self.replies)]
            self.served += 1
        return text

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        n = int(body.get("n") or 1)
        if self.max_n is not None:
            n = min(n, self.max_n)
        replies = [self._reply_text(messages) for _ in range(n)]
        failed = next((r for r in replies if isinstance(r, Scripted) and r.status != 200), None)
        if failed is not None:
            return {"status": failed.status, "error": {"message": failed.text}}
        texts = [r.text if isinstance(r, Scripted) else r for r in replies]
        reasons = [r.finish_reason if isinstance(r, Scripted) else "stop" for r in replies]
        prompt_tokens = sum(count_words(m.get("content") or "") for m in messages)
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": reason}
                for i, (t, reason) in enumerate(zip(texts, reasons))
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": sum(count_words(t) for t in texts),
                "total_tokens": prompt_tokens + sum(count_words(t) for t in texts),
            },
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:
                if not server.quiet:
                    sys.stderr.write("fake-openai: " + fmt % args + "\n")

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except ConnectionError:
                    pass  # the client gave up (its timeout); nothing to answer

            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                self._send(status, json.dumps(obj).encode(), headers)

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                if self.path in ("/health", "/v1/health"):
                    ready = time.monotonic() - server._started_at >= server.health_delay_s
                    self._json(200 if ready else 503, {"status": "ok" if ready else "loading"})
                elif self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = None
                with server.lock:
                    fault = server._draw_fault() if self.path.endswith("/chat/completions") else None
                    if fault:
                        server.injected[fault] += 1
                    server.requests.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers.items()),
                            "body": body,
                            "fault": fault,
                        }
                    )
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(body, fault)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self, body: Any, fault: str | None) -> None:
                if not self.path.endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if server.require_api_key is not None:
                    if self.headers.get("Authorization") != f"Bearer {server.require_api_key}":
                        self._json(401, {"error": {"message": "invalid api key", "type": "auth"}})
                        return
                if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                    self._json(400, {"error": {"message": "body must be JSON with a messages list"}})
                    return
                if server.latency_s:
                    server._stopping.wait(server.latency_s)
                if fault == "500":
                    self._json(500, {"error": {"message": "injected server error"}})
                elif fault == "429":
                    self._json(429, {"error": {"message": "injected rate limit"}}, {"Retry-After": "0"})
                elif fault == "hang":
                    server._stopping.wait(server.hang_s)
                    self._json(200, server.completion(body))
                elif fault == "malformed":
                    self._send(200, b'{"id": "x", "choices": [{"index": 0, "message": {"content": "cut')
                else:
                    reply = server.completion(body)
                    status = reply.pop("status", 200)
                    self._json(status, reply)

        return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="fake", help="accepted for `vllm serve` compatibility")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--health-delay", type=float, default=0.0, help="answer /health 503 for this long")
    parser.add_argument(
        "--ignore-sigterm", action="store_true", help="force the caller to escalate to SIGKILL"
    )
    parser.add_argument("--exit-after", type=float, default=None, help="exit with status 3 after this long")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="fraction answering 500")
    parser.add_argument("--seed", type=int, default=0)
    args, _unknown = parser.parse_known_args(argv)  # tolerate vLLM-only flags
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.exit_after is not None:

        def die() -> None:
            time.sleep(args.exit_after)
            print("fake-openai: exiting on purpose (--exit-after)", file=sys.stderr, flush=True)
            os._exit(3)

        threading.Thread(target=die, daemon=True).start()
    server = FakeOpenAIServer(
        faults={"500": args.fault_rate} if args.fault_rate else None,
        seed=args.seed,
        health_delay_s=args.health_delay,
        host=args.host,
        port=args.port,
        quiet=False,
    )
    print(
        f"fake-openai serving {args.model} on http://{args.host}:{server.port}", file=sys.stderr, flush=True
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
