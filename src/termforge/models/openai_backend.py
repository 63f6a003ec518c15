"""Client for any OpenAI-compatible /v1/chat/completions endpoint (hosted APIs, `vllm serve`, litellm).

Built for long unattended runs: a concurrency limit, bounded retries with exponential backoff and
jitter on transient failures (429, 5xx, timeouts, dropped connections, malformed JSON), a per-run
request budget so a misconfigured loop cannot spend without bound, and counters a stage can write
into its report. The API key is read from the environment variable the config names, at the moment
a request is built: it is never kept on the object, logged, or part of any cache key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from typing import Any, Sequence

import aiohttp

from termforge.errors import ConfigError, TermforgeError
from termforge.io import seed_from
from termforge.models.base import (
    ChatModel,
    Completion,
    Messages,
    SamplingParams,
    check_messages,
    check_n,
)

log = logging.getLogger(__name__)

FAILURE_KINDS = ("http_429", "http_5xx", "timeout", "connection", "malformed")


class ModelRequestError(TermforgeError):
    """A request failed for good: a non-retryable HTTP status, or retries exhausted."""

    # Statuses that say the configuration is wrong (key, model name, URL): every request would fail.
    CONFIGURATION_STATUSES = (401, 403, 404)

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def is_configuration(self) -> bool:
        return self.status in self.CONFIGURATION_STATUSES


class BudgetExceededError(TermforgeError):
    """The run's request budget is spent."""


class _Retryable(Exception):
    def __init__(self, kind: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.retry_after = retry_after


class OpenAIChatModel(ChatModel):
    backend = "openai"
    batched = False

    def __init__(
        self,
        model: str,
        base_url: str,
        sampling: SamplingParams | None = None,
        api_key_env: str | None = None,
        concurrency: int = 8,
        max_retries: int = 6,
        timeout_s: float = 120.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        request_budget: int | None = None,
        extra_body: dict[str, Any] | None = None,
        jitter_seed: int | None = None,
        where: str = "model",
    ) -> None:
        super().__init__(model, sampling)
        self.where = where
        _require(
            isinstance(base_url, str) and base_url.startswith(("http://", "https://")),
            f"{where}.base_url",
            "an http(s) URL",
            base_url,
        )
        _require(_pos_int(concurrency), f"{where}.concurrency", "an integer >= 1", concurrency)
        _require(
            _int(max_retries) and max_retries >= 0, f"{where}.max_retries", "an integer >= 0", max_retries
        )
        _require(_pos_num(timeout_s), f"{where}.timeout_s", "a number > 0", timeout_s)
        _require(
            _pos_num(backoff_base_s) or backoff_base_s == 0,
            f"{where}.backoff_base_s",
            "a number >= 0",
            backoff_base_s,
        )
        _require(
            _pos_num(backoff_max_s) or backoff_max_s == 0,
            f"{where}.backoff_max_s",
            "a number >= 0",
            backoff_max_s,
        )
        _require(
            request_budget is None or _pos_int(request_budget),
            f"{where}.request_budget",
            "null or an integer >= 1",
            request_budget,
        )
        _require(
            extra_body is None or isinstance(extra_body, dict), f"{where}.extra_body", "a mapping", extra_body
        )
        if api_key_env is not None:
            _require(
                isinstance(api_key_env, str) and api_key_env,
                f"{where}.api_key_env",
                "the name of an environment variable",
                api_key_env,
            )
            if not os.environ.get(api_key_env):
                raise ConfigError(
                    f"{where}.api_key_env: environment variable {api_key_env} is not set or empty"
                )
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.timeout_s = float(timeout_s)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.request_budget = request_budget
        self.extra_body = dict(extra_body or {})
        # Jitter only spreads retries out in time; it never affects what the model returns.
        self._jitter = random.Random(jitter_seed)
        self._semaphores: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}
        self.counters: dict[str, Any] = {
            "requests": 0,
            "retries": 0,
            "failures": {k: 0 for k in FAILURE_KINDS},
            "gave_up": 0,
            "completions": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
        }

    # -- identity and reporting -------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        if self.extra_body:
            ident["extra_body"] = self.extra_body
        return ident

    def stats(self) -> dict[str, Any]:
        out = dict(self.counters)
        out["failures"] = dict(self.counters["failures"])
        out["request_budget"] = self.request_budget
        return out

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model_name!r}, base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    # -- public calls -----------------------------------------------------------------------------

    def chat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        return asyncio.run(self.achat_many(conversations, n=n, sampling=sampling))

    async def achat(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        check_messages(messages)
        check_n(n)
        async with self._session() as session:
            return await self._chat(session, messages, n, self._sampling(sampling))

    async def achat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        for m in conversations:
            check_messages(m)
        check_n(n)
        sampling = self._sampling(sampling)
        async with self._session() as session:
            return list(await asyncio.gather(*(self._chat(session, m, n, sampling) for m in conversations)))

    # -- internals --------------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    def _semaphore(self) -> asyncio.Semaphore:
        # asyncio primitives belong to one event loop; every sync call runs its own loop.
        loop = asyncio.get_running_loop()
        entry = self._semaphores.get(id(loop))
        if entry is None or entry[0] is not loop:
            self._semaphores = {k: v for k, v in self._semaphores.items() if not v[0].is_closed()}
            entry = (loop, asyncio.Semaphore(self.concurrency))
            self._semaphores[id(loop)] = entry
        return entry[1]

    def _body(self, messages: Messages, n: int, sampling: SamplingParams, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if n > 1:
            body["n"] = n
        if seed is not None:
            body["seed"] = seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.top_k:
            # Not part of OpenAI's schema (hosted APIs reject it); vLLM and litellm accept it.
            body["top_k"] = sampling.top_k
        body.update(self.extra_body)
        return body

    async def _chat(
        self, session: aiohttp.ClientSession, messages: Messages, n: int, sampling: SamplingParams
    ) -> list[Completion]:
        completions: list[Completion] = []
        # Some endpoints ignore `n` and answer one choice; ask again for the rest, with a seed that
        # differs per top-up so a seeded request does not return the same sample twice.
        while len(completions) < n:
            want = n - len(completions)
            seed = sampling.seed
            if seed is not None and completions:
                seed = seed_from(sampling.seed, len(completions)) % (2**31)
            data = await self._post(session, self._body(messages, want, sampling, seed))
            got = _parse_completions(data, want)
            completions.extend(got)
        self.counters["completions"] += len(completions)
        return completions

    async def _post(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                return await self._attempt(session, body)
            except _Retryable as failure:
                self.counters["failures"][failure.kind] += 1
                if attempt >= self.max_retries:
                    self.counters["gave_up"] += 1
                    raise ModelRequestError(
                        f"{self.where}: request to {self.url} for model {self.model_name!r} failed "
                        f"{attempt + 1} times (max_retries={self.max_retries}); last failure: "
                        f"{failure.kind}: {failure}"
                    ) from None
                delay = min(self.backoff_max_s, self.backoff_base_s * 2**attempt)
                # "Equal jitter": at least half the backoff, so a burst of 429s cannot re-synchronise.
                delay = delay / 2 + self._jitter.uniform(0, delay / 2)
                if failure.retry_after is not None:
                    delay = max(delay, min(failure.retry_after, self.backoff_max_s))
                attempt += 1
                self.counters["retries"] += 1
                log.info(
                    "retrying %s in %.2fs after %s (attempt %d of %d)",
                    self.url,
                    delay,
                    failure.kind,
                    attempt + 1,
                    self.max_retries + 1,
                )
                await asyncio.sleep(delay)

    async def _attempt(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> dict[str, Any]:
        async with self._semaphore():
            # Check and count with no await in between: concurrent tasks cannot overshoot the budget.
            if self.request_budget is not None and self.counters["requests"] >= self.request_budget:
                raise BudgetExceededError(
                    f"{self.where}.request_budget: the budget of {self.request_budget} requests to "
                    f"{self.url} is spent ({self.counters['retries']} of them were retries); raise it "
                    f"or rerun: replies already received are kept by the response cache"
                )
            self.counters["requests"] += 1
            headers = {"Content-Type": "application/json"}
            if self.api_key_env:
                key = os.environ.get(self.api_key_env)
                if not key:
                    raise ConfigError(
                        f"{self.where}.api_key_env: environment variable {self.api_key_env} is not set or empty"
                    )
                headers["Authorization"] = f"Bearer {key}"
            try:
                async with session.post(self.url, data=json.dumps(body), headers=headers) as resp:
                    status = resp.status
                    retry_after = _retry_after(resp.headers.get("Retry-After"))
                    text = await resp.text(errors="replace")
            except TimeoutError:
                raise _Retryable("timeout", f"no complete reply within {self.timeout_s:g}s") from None
            except aiohttp.ClientError as exc:
                raise _Retryable("connection", f"{type(exc).__name__}: {exc}") from None
        if status == 429:
            raise _Retryable("http_429", f"HTTP 429: {text[:200]}", retry_after)
        if status >= 500:
            raise _Retryable("http_5xx", f"HTTP {status}: {text[:200]}", retry_after)
        if status == 408:
            raise _Retryable("timeout", "HTTP 408")
        if status != 200:
            raise ModelRequestError(
                f"{self.where}: {self.url} answered HTTP {status} for model {self.model_name!r} "
                f"(not retried): {text[:500]}",
                status,
            )
        try:
            data = json.loads(text)
            _check_reply(data)
        except (json.JSONDecodeError, ValueError) as exc:
            raise _Retryable("malformed", f"malformed reply ({exc}): {text[:200]!r}") from None
        usage = data.get("usage") or {}
        self.counters["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.counters["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        return data


def _check_reply(data: Any) -> None:
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        raise ValueError("no 'choices' list")
    for choice in data["choices"]:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), (str, type(None))):
            raise ValueError("a choice has no message.content")
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ValueError("'usage' is not an object")


def _parse_completions(data: dict[str, Any], want: int) -> list[Completion]:
    choices = sorted(data["choices"], key=lambda c: c.get("index", 0))[:want]
    usage = data.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    total = int(usage.get("completion_tokens") or 0)
    # The protocol reports completion tokens per request, not per choice: split them evenly.
    share, extra = divmod(total, len(choices))
    out = []
    for i, choice in enumerate(choices):
        out.append(
            Completion(
                text=choice["message"].get("content") or "",
                prompt_tokens=prompt_tokens,
                completion_tokens=share + (1 if i < extra else 0),
                finish_reason=choice.get("finish_reason") or "stop",
                raw=choice,
            )
        )
    return out


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date; our own backoff is a fine substitute


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _pos_int(v: Any) -> bool:
    return _int(v) and v >= 1


def _pos_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _require(ok: bool, key: str, expected: str, got: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}, got {got!r}")
