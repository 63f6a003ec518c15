"""A real HTTP server speaking the OpenAI chat-completions protocol and Anthropic's Messages API,
standing in for remote LLM APIs.

Use it in-process (`with FakeOpenAIServer(...) as server: server.base_url`) or as a script:
`python tests/fake_openai_server.py [MODEL] --port N` (the same argument shape `vllm serve` takes,
so it can stand in for vLLM in lifecycle tests). Endpoints: POST /v1/chat/completions (OpenAI:
`server.base_url`), POST /v1/messages (Anthropic: `server.anthropic_base_url`, which the anthropic
SDK extends with /v1/messages), GET /v1/models, GET /health.

Replies are scripted (a list served in order, or a callable messages -> text) the same way for
both protocols: a Messages API request reaches the script as chat messages (its `system` as a
system message first, each turn's text blocks joined), and the reply goes back in the protocol
the request used. Faults are injected with a seeded RNG: a fraction of requests answer 500 or 429,
hang past the client's timeout, or return malformed JSON. Every request body and its headers are
recorded (header names match case-insensitively), and the server tracks the most requests it ever
had in flight, so tests can check what a client really sent.

The Messages side checks what the real API insists on (an `anthropic-version` header, the key,
`max_tokens`, user/assistant turns) and answers errors in its shape
(`{"type": "error", "error": {"type": ..., "message": ...}}`); the key may come as `x-api-key`
or as a bearer token, which is how the anthropic SDK 2.x sends it. Prompt caching is simulated: the
prefix up to each `cache_control` breakpoint is "written" the first time it is seen and "read"
afterwards, reported in `usage.cache_creation_input_tokens` / `cache_read_input_tokens`.
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
CHAT_PATHS = ("/chat/completions", "/messages")
# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors).
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                    529: "overloaded_error"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


class Headers(dict):
    """Request headers, looked up without regard to case (HTTP header names are case-insensitive)."""

    def _find(self, key: str) -> str | None:
        return next((k for k in self if k.lower() == key.lower()), None)

    def __getitem__(self, key: str) -> str:
        found = self._find(key)
        if found is None:
            raise KeyError(key)
        return dict.__getitem__(self, found)

    def get(self, key: str, default: Any = None) -> Any:
        found = self._find(key)
        return default if found is None else dict.__getitem__(self, found)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._find(key) is not None


class Scripted:
    """A reply with more than text: `finish_reason` ("length" for a reply cut at the token limit),
    or an HTTP `status` other than 200 (answered with `text` as the error message)."""

    def __init__(self, text: str, finish_reason: str = "stop", status: int = 200) -> None:
        self.text, self.finish_reason, self.status = text, finish_reason, status


Reply = list[str | Scripted] | Callable[[list[dict[str, Any]]], str | Scripted] | None


def count_words(text: str) -> int:
    """The token count this server reports: deterministic and easy to predict in tests."""
    return len(text.split())


def _block_text(content: Any) -> str:
    """A Messages API content (a string or a list of blocks) as plain text, one line per block."""
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def messages_api_to_chat(body: dict[str, Any]) -> list[dict[str, Any]]:
    """What a script sees of a Messages API request: chat messages, the system prompt first."""
    out = []
    if body.get("system"):
        out.append({"role": "system", "content": _block_text(body["system"])})
    for m in body.get("messages") or []:
        out.append({"role": m.get("role"), "content": _block_text(m.get("content"))})
    return out


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
        cache_min_tokens: int = 0,
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
        self.cache_min_tokens = cache_min_tokens
        self.cached_prefixes: set[str] = set()
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
        """For OpenAI clients (they append /chat/completions)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """For Anthropic clients (they append /v1/messages)."""
        return f"http://127.0.0.1:{self.port}"

    def base_url_for(self, protocol: str) -> str:
        return self.anthropic_base_url if protocol == "anthropic" else self.base_url

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
        """The bodies of every chat request, of either protocol, as sent."""
        with self.lock:
            return [r["body"] for r in self.requests if r["path"].endswith(CHAT_PATHS)]

    def chat_messages(self) -> list[list[dict[str, Any]]]:
        """Each chat request's conversation as the script saw it (chat messages, either protocol)."""
        with self.lock:
            return [messages_api_to_chat(r["body"]) if r["path"].endswith("/messages") else r["body"]["messages"]
                    for r in self.requests if r["path"].endswith(CHAT_PATHS) and isinstance(r["body"], dict)]

    def request_count(self) -> int:
        return len(self.chat_bodies())

    def prompts_text(self) -> str:
        """All message contents received, joined: for scanning what a client put in its prompts."""
        return "\n".join(m.get("content") or "" for msgs in self.chat_messages() for m in msgs)

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

    def anthropic_message(self, body: dict[str, Any]) -> dict[str, Any]:
        """A Messages API reply (one completion: the API has no `n`)."""
        messages = messages_api_to_chat(body)
        reply = self._reply_text(messages)
        if isinstance(reply, Scripted) and reply.status != 200:
            return {"status": reply.status, "type": "error",
                    "error": {"type": ANTHROPIC_ERRORS.get(reply.status, "api_error"), "message": reply.text}}
        text = reply.text if isinstance(reply, Scripted) else reply
        reason = reply.finish_reason if isinstance(reply, Scripted) else "stop"
        written, read = self._cache_usage(body)
        total = sum(count_words(m["content"] or "") for m in messages)
        return {
            "id": f"msg_fake_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": [{"type": "text", "text": text}],
            "stop_reason": STOP_REASONS.get(reason, reason),
            "stop_sequence": None,
            "usage": {"input_tokens": total - written - read, "output_tokens": count_words(text),
                      "cache_creation_input_tokens": written, "cache_read_input_tokens": read},
        }

    def _cache_usage(self, body: dict[str, Any]) -> tuple[int, int]:
        """(tokens written to, tokens read from) the simulated prompt cache. As the real API does:
        prefixes are stored at cache_control breakpoints; a request reads the longest stored prefix
        that ends at any block boundary up to 20 blocks before a breakpoint, and writes the rest up
        to its last breakpoint; prefixes under cache_min_tokens are not cached."""
        blocks: list[Any] = []
        for part in [body.get("system")] + [m.get("content") for m in body.get("messages") or []]:
            blocks += [{"type": "text", "text": part}] if isinstance(part, str) else list(part or [])
        texts = [b.get("text", "") if isinstance(b, dict) else "" for b in blocks]
        marks = [i for i, b in enumerate(blocks) if isinstance(b, dict) and b.get("cache_control")]

        def tokens(i: int) -> int:
            return sum(count_words(t) for t in texts[: i + 1])

        cacheable = [i for i in marks if tokens(i) >= self.cache_min_tokens]
        if not cacheable:
            return 0, 0
        lookback = {j for i in cacheable for j in range(max(0, i - 20), i + 1)}
        with self.lock:
            read = max((tokens(j) for j in lookback if json.dumps(texts[: j + 1]) in self.cached_prefixes),
                       default=0)
            self.cached_prefixes.update(json.dumps(texts[: i + 1]) for i in cacheable)
        return tokens(cacheable[-1]) - read, read

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
                    fault = server._draw_fault() if self.path.endswith(CHAT_PATHS) else None
                    if fault:
                        server.injected[fault] += 1
                    server.requests.append(
                        {
                            "path": self.path,
                            "headers": Headers(self.headers.items()),
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

            def _error(self, status: int, message: str, kind: str | None = None,
                       headers: dict[str, str] | None = None) -> None:
                if self.path.endswith("/messages"):
                    self._json(status, {"type": "error", "error": {
                        "type": kind or ANTHROPIC_ERRORS.get(status, "api_error"), "message": message}}, headers)
                else:
                    self._json(status, {"error": {"message": message, **({"type": kind} if kind else {})}}, headers)

            def _answer(self, body: Any, fault: str | None) -> None:
                anthropic = self.path.endswith("/v1/messages")
                if not (anthropic or self.path.endswith("/chat/completions")):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if server.require_api_key is not None:
                    # The Messages API takes the key as `x-api-key` or, as the anthropic SDK 2.x
                    # sends it, as a bearer token.
                    sent = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                    if anthropic and self.headers.get("x-api-key"):
                        sent = self.headers.get("x-api-key")
                    if sent != server.require_api_key:
                        self._error(401, "invalid api key" if not anthropic else "invalid x-api-key",
                                    None if anthropic else "auth")
                        return
                if anthropic:
                    problem = self._messages_api_problem(body)
                    if problem:
                        self._error(400, problem)
                        return
                elif not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                    self._error(400, "body must be JSON with a messages list")
                    return
                if server.latency_s:
                    server._stopping.wait(server.latency_s)
                reply = server.anthropic_message if anthropic else server.completion
                if fault == "500":
                    self._error(500, "injected server error")
                elif fault == "429":
                    self._error(429, "injected rate limit", headers={"Retry-After": "0"})
                elif fault == "hang":
                    server._stopping.wait(server.hang_s)
                    self._json(200, reply(body))
                elif fault == "malformed":
                    self._send(200, b'{"id": "x", "choices": [{"index": 0, "message": {"content": "cut'
                               if not anthropic else b'{"id": "msg_x", "type": "message", "content": [{"type": "te')
                else:
                    answer = reply(body)
                    status = answer.pop("status", 200)
                    self._json(status, answer)

            def _messages_api_problem(self, body: Any) -> str | None:
                """What the real Messages API would refuse with a 400, if anything."""
                if not self.headers.get("anthropic-version"):
                    return "anthropic-version: header is required"
                if not isinstance(body, dict):
                    return "body must be a JSON object"
                if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
                    return "max_tokens: Field required"
                turns = body.get("messages")
                if not isinstance(turns, list) or not turns:
                    return "messages: at least one message is required"
                for i, m in enumerate(turns):
                    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                        return f"messages.{i}.role: Input should be 'user' or 'assistant'"
                    if any(isinstance(b, dict) and b.get("type") == "text" and not b.get("text")
                           for b in (m.get("content") if isinstance(m.get("content"), list) else [])):
                        return f"messages.{i}: text content blocks must be non-empty"
                if turns[0]["role"] != "user":
                    return "messages.0.role: the first message must use the user role"
                if "n" in body or "seed" in body:
                    return f"{'n' if 'n' in body else 'seed'}: Extra inputs are not permitted"
                return None

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
