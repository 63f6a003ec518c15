"""What the hosted-API backends (`openai`, `anthropic`) share, on top of the vendors' official SDKs.

The SDK does the protocol: request bodies, authentication headers, its retry loop (429, 408, 409,
5xx, timeouts, dropped connections, with `Retry-After` honoured) and typed errors. termforge adds
what a long unattended run needs around it:

- a concurrency limit per model (requests in flight at once, not counting backoff sleeps);
- a request budget per run, so a misconfigured loop cannot spend without bound: every attempt,
  retries included, counts, and the attempt over the budget is never sent;
- counters a stage writes into its report: requests, retries, failures by kind, tokens;
- a malformed reply (a 200 whose body is not the protocol's JSON), which the SDKs do not retry,
  asked again up to `max_retries` times;
- errors that name the config key and the status, and say whether the configuration is at fault
  (401/403/404: every request would fail, so a stage stops) or only this prompt (a 400: the
  stage records that one item as failed and goes on).

Attempts are observed at the HTTP transport the SDK client is given (a wrapper around httpx's
own), which is where the limit, the budget and the per-attempt counters live. The backoff curve
(`backoff_base_s` doubling up to `backoff_max_s`, with jitter) replaces the SDK's fixed one so
tests and impatient users can shorten it; everything else about retrying is the SDK's.

The API key is read from the environment variable the config names when a request is made: it
is never kept on the object, logged, or part of any cache key.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import Any, Sequence

import httpx2

from termforge.errors import ConfigError, TermforgeError
from termforge.io import seed_from
from termforge.models.base import ChatModel, Completion, Messages, SamplingParams, check_messages, check_n

log = logging.getLogger(__name__)

FAILURE_KINDS = ("http_429", "http_5xx", "timeout", "connection", "malformed")
# The header both SDKs put on every attempt: 0 for the first, n for the n-th retry.
RETRY_HEADER = "x-stainless-retry-count"


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


class _Malformed(Exception):
    """A 200 whose body is not what the protocol promises."""


_SSL_CONTEXT = None


def _ssl_context():
    # One context for every client: building one reads the CA bundle (milliseconds each time).
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx2.create_ssl_context()
    return _SSL_CONTEXT


class _AttemptTransport(httpx2.AsyncBaseTransport):
    """Sees every attempt the SDK makes: enforces the model's concurrency limit and budget and
    counts the attempt and how it failed. The SDK decides whether to retry."""

    def __init__(self, owner: "APIChatModel", inner: httpx2.AsyncBaseTransport) -> None:
        self.owner, self.inner = owner, inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        owner = self.owner
        async with owner._semaphore():
            owner._charge(int(request.headers.get(RETRY_HEADER) or 0) > 0)
            try:
                response = await self.inner.handle_async_request(request)
                # Read the body while the slot is held: a slot is free once its reply is in.
                await response.aread()
            except httpx2.TimeoutException:
                owner._failed("timeout")
                raise
            except httpx2.TransportError:
                owner._failed("connection")
                raise
        kind = _status_kind(response.status_code)
        if kind:
            owner._failed(kind)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _status_kind(status: int) -> str | None:
    if status == 429:
        return "http_429"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "http_5xx"
    return None


class APIChatModel(ChatModel):
    """A chat model behind a vendor API, reached through that vendor's official SDK.

    Subclasses set `backend`, `default_base_url`, `default_key_env`, `sdk` (the SDK module) and
    `client_class`, and implement `_ask` (one SDK call for up to `want` completions)."""

    batched = False
    default_base_url: str = ""
    default_key_env: str | None = None
    endpoint_path: str = ""
    sdk: Any = None
    client_class: Any = None

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        sampling: SamplingParams | None = None,
        api_key_env: str | None = None,
        concurrency: int = 8,
        max_retries: int = 6,
        timeout_s: float = 120.0,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        request_budget: int | None = None,
        extra_body: dict[str, Any] | None = None,
        jitter_seed: int | None = None,
        where: str = "model",
    ) -> None:
        super().__init__(model, sampling)
        self.where = where
        if base_url is not None:
            _require(isinstance(base_url, str) and base_url.startswith(("http://", "https://")),
                     f"{where}.base_url", "an http(s) URL (or no base_url: the vendor's API)", base_url)
        _require(_pos_int(concurrency), f"{where}.concurrency", "an integer >= 1", concurrency)
        _require(_int(max_retries) and max_retries >= 0, f"{where}.max_retries", "an integer >= 0", max_retries)
        _require(_pos_num(timeout_s), f"{where}.timeout_s", "a number > 0", timeout_s)
        for key, value in (("backoff_base_s", backoff_base_s), ("backoff_max_s", backoff_max_s)):
            _require(_pos_num(value) or value == 0, f"{where}.{key}", "a number >= 0", value)
        _require(request_budget is None or _pos_int(request_budget), f"{where}.request_budget",
                 "null or an integer >= 1", request_budget)
        _require(extra_body is None or isinstance(extra_body, dict), f"{where}.extra_body", "a mapping", extra_body)
        if api_key_env is not None:
            _require(isinstance(api_key_env, str) and bool(api_key_env), f"{where}.api_key_env",
                     "the name of an environment variable", api_key_env)
        # The vendor's own endpoint needs the vendor's key; a base_url of your own (vLLM, a proxy)
        # gets no key unless the config names one, so a vendor key never travels to a third party.
        self.api_key_env = api_key_env if api_key_env is not None else (
            self.default_key_env if base_url is None else None)
        self._api_key()  # a missing variable is a configuration error now, not at the first request
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.url = f"{self.base_url}{self.endpoint_path}"
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
        return (f"{type(self).__name__}(model={self.model_name!r}, base_url={self.base_url!r}, "
                f"api_key_env={self.api_key_env!r})")

    # -- public calls -----------------------------------------------------------------------------

    def chat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        return asyncio.run(self.achat_many(conversations, n=n, sampling=sampling))

    async def achat(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        return (await self.achat_many([messages], n=n, sampling=sampling))[0]

    async def achat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        for m in conversations:
            check_messages(m)
        check_n(n)
        sampling = self._sampling(sampling)
        client = self._client()
        try:
            return list(await asyncio.gather(*(self._chat(client, m, n, sampling) for m in conversations)))
        finally:
            await client.close()

    # -- subclass hooks ---------------------------------------------------------------------------

    async def _ask(self, client: Any, messages: Messages, want: int, sampling: SamplingParams,
                   seed: int | None) -> list[Completion]:
        """One SDK call; up to `want` completions (fewer when the endpoint ignores n). Raises
        _Malformed for a reply that is not the protocol's."""
        raise NotImplementedError

    def _error_message(self, err: Any) -> str:
        """The server's own words from an SDK status error."""
        body = getattr(err, "body", None)
        if isinstance(body, dict):
            inner = body.get("error") if isinstance(body.get("error"), dict) else body
            if isinstance(inner.get("message"), str):
                return inner["message"]
        return str(getattr(err, "message", err))

    # -- internals --------------------------------------------------------------------------------

    def _api_key(self) -> str:
        if self.api_key_env is None:
            return "none"  # the SDKs insist on a key; an endpoint of your own ignores it
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(f"{self.where}.api_key_env: environment variable {self.api_key_env} is not set or empty")
        return key

    def _client(self) -> Any:
        """A fresh SDK client per call: an httpx client belongs to the event loop it first ran in,
        and every synchronous call runs its own loop."""
        transport = _AttemptTransport(self, httpx2.AsyncHTTPTransport(
            verify=_ssl_context(), limits=httpx2.Limits(max_connections=self.concurrency)))
        http_client = httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(self.timeout_s))
        client = self.client_class(api_key=self._api_key(), base_url=self.base_url, max_retries=self.max_retries,
                                   timeout=self.timeout_s, http_client=http_client)
        client._termforge_backoff = self._backoff
        return client

    def _backoff(self, retries_taken: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max_s, self.backoff_base_s * 2**retries_taken)
        # "Equal jitter": at least half the backoff, so a burst of 429s cannot re-synchronise.
        delay = delay / 2 + self._jitter.uniform(0, delay / 2)
        if retry_after is not None and retry_after > 0:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay

    def _semaphore(self) -> asyncio.Semaphore:
        # asyncio primitives belong to one event loop; every sync call runs its own loop.
        loop = asyncio.get_running_loop()
        entry = self._semaphores.get(id(loop))
        if entry is None or entry[0] is not loop:
            self._semaphores = {k: v for k, v in self._semaphores.items() if not v[0].is_closed()}
            entry = (loop, asyncio.Semaphore(self.concurrency))
            self._semaphores[id(loop)] = entry
        return entry[1]

    def _charge(self, retry: bool) -> None:
        # Check and count with no await in between: concurrent requests cannot overshoot the budget.
        if self.request_budget is not None and self.counters["requests"] >= self.request_budget:
            raise self._budget_stop(
                f"{self.where}.request_budget: the budget of {self.request_budget} requests to "
                f"{self.url} is spent ({self.counters['retries']} of them were retries); raise it "
                f"or rerun: replies already received are kept by the response cache")
        self.counters["requests"] += 1
        if retry:
            self.counters["retries"] += 1

    def _budget_stop(self, message: str) -> Exception:
        # An exception of the SDK's own base class: the SDK passes those through without retrying.
        return _budget_class(self.sdk)(message)

    def _failed(self, kind: str) -> None:
        self.counters["failures"][kind] += 1

    async def _chat(self, client: Any, messages: Messages, n: int, sampling: SamplingParams) -> list[Completion]:
        completions: list[Completion] = []
        # Some endpoints ignore `n` (and the Messages API has none); ask again for the rest, with a
        # seed that differs per top-up so a seeded request does not return the same sample twice.
        while len(completions) < n:
            seed = sampling.seed
            if seed is not None and completions:
                seed = seed_from(sampling.seed, len(completions)) % (2**31)
            got = await self._ask_with_retries(client, messages, n - len(completions), sampling, seed)
            completions.extend(got[: n - len(completions)])
        self.counters["completions"] += len(completions)
        return completions

    async def _ask_with_retries(self, client: Any, messages: Messages, want: int, sampling: SamplingParams,
                                seed: int | None) -> list[Completion]:
        malformed = 0
        while True:
            try:
                got = await self._ask(client, messages, want, sampling, seed)
                if not got:
                    raise _Malformed("no completions in the reply")
                return got
            except _Malformed as exc:
                # The SDKs do not retry a reply they cannot parse; one garbled body is no reason to
                # fail the prompt, max_retries of them are.
                self._failed("malformed")
                if malformed >= self.max_retries:
                    self.counters["gave_up"] += 1
                    raise ModelRequestError(
                        f"{self.where}: request to {self.url} for model {self.model_name!r} got a malformed "
                        f"reply {malformed + 1} times (max_retries={self.max_retries}); last failure: "
                        f"malformed: {exc}") from None
                self.counters["retries"] += 1
                await asyncio.sleep(self._backoff(malformed, None))
                malformed += 1
            except _budget_class(self.sdk) as err:
                raise BudgetExceededError(str(err)) from None
            except self.sdk.APIError as err:
                raise self._translate(err) from None

    def _translate(self, err: Any) -> Exception:
        sdk = self.sdk
        if isinstance(err, sdk.APIStatusError):
            status = err.status_code
            kind = _status_kind(status)
            if kind is None:
                return ModelRequestError(
                    f"{self.where}: {self.url} answered HTTP {status} for model {self.model_name!r} "
                    f"(not retried): {self._error_message(err)[:500]}", status)
            detail = f"HTTP {status}: {self._error_message(err)[:200]}"
        elif isinstance(err, sdk.APITimeoutError):
            kind, detail = "timeout", f"no complete reply within {self.timeout_s:g}s"
        elif isinstance(err, sdk.APIConnectionError):
            cause = err.__cause__
            kind, detail = "connection", f"{type(cause).__name__}: {cause}" if cause else str(err)
        else:
            return ModelRequestError(f"{self.where}: request to {self.url} for model {self.model_name!r} "
                                     f"failed: {type(err).__name__}: {err}")
        request = getattr(err, "request", None)
        attempts = int(request.headers.get(RETRY_HEADER) or 0) + 1 if request is not None else self.max_retries + 1
        self.counters["gave_up"] += 1
        return ModelRequestError(
            f"{self.where}: request to {self.url} for model {self.model_name!r} failed {attempts} times "
            f"(max_retries={self.max_retries}); last failure: {kind}: {detail}", getattr(err, "status_code", None))


_BUDGET_CLASSES: dict[int, type] = {}


def _budget_class(sdk: Any) -> type:
    base = getattr(sdk, "OpenAIError", None) or getattr(sdk, "AnthropicError")
    if id(base) not in _BUDGET_CLASSES:
        _BUDGET_CLASSES[id(base)] = type("_BudgetStop", (base,), {})
    return _BUDGET_CLASSES[id(base)]


def with_backoff(client_class: type) -> type:
    """The SDK's client with termforge's backoff curve (what `_calculate_retry_timeout` returns is
    the only thing changed; which failures are retried, and how often, stays the SDK's)."""

    class Client(client_class):  # type: ignore[misc, valid-type]
        _termforge_backoff = None

        def _calculate_retry_timeout(self, remaining_retries, options, response_headers=None):
            if self._termforge_backoff is None:
                return super()._calculate_retry_timeout(remaining_retries, options, response_headers)
            retries_taken = options.get_max_retries(self.max_retries) - remaining_retries
            return self._termforge_backoff(retries_taken, self._parse_retry_after_header(response_headers))

    Client.__name__ = Client.__qualname__ = f"Termforge{client_class.__name__}"
    return Client


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _pos_int(v: Any) -> bool:
    return _int(v) and v >= 1


def _pos_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _require(ok: bool, key: str, expected: str, got: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}, got {got!r}")
