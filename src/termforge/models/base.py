"""The chat-model interface every backend implements, and the value types it speaks.

Stages depend on `ChatModel` only; which backend answers (OpenAI or any OpenAI-compatible endpoint,
Anthropic's Messages API, an in-process transformers model, an in-process vLLM engine) is a config
choice made in `make_model`.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from termforge.errors import ConfigError, TermforgeError

Messages = list[dict[str, Any]]

_ROLES = ("system", "user", "assistant", "tool", "developer")


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. top_k=0 means "no top-k filter"; seed=None means "not reproducible"."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Lists arrive from YAML/JSON; a tuple keeps the dataclass hashable and its hash stable.
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))
        checks = [
            (
                "temperature",
                isinstance(self.temperature, (int, float)) and self.temperature >= 0,
                "a number >= 0",
            ),
            ("top_p", isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1, "a number in (0, 1]"),
            ("top_k", _is_int(self.top_k) and self.top_k >= 0, "an integer >= 0 (0 disables it)"),
            ("max_new_tokens", _is_int(self.max_new_tokens) and self.max_new_tokens >= 1, "an integer >= 1"),
            ("seed", self.seed is None or (_is_int(self.seed) and self.seed >= 0), "null or an integer >= 0"),
            ("stop", all(isinstance(s, str) and s for s in self.stop), "a list of non-empty strings"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ConfigError(f"sampling.{name}: expected {expected}, got {getattr(self, name)!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, where: str = "sampling") -> "SamplingParams":
        data = dict(data or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"{where}.{unknown[0]}: unknown sampling key (known: {', '.join(sorted(known))})"
            )
        try:
            return cls(**data)
        except ConfigError as exc:
            # Re-prefix with the caller's config path so the message points at the right place.
            raise ConfigError(str(exc).replace("sampling.", f"{where}.", 1)) from None

    def replace(self, **changes: Any) -> "SamplingParams":
        return dataclasses.replace(self, **changes)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass
class Completion:
    """One sampled reply. `raw` keeps what the backend returned (provenance), `cached` says whether
    it came from the response cache instead of a model call."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    cached: bool = False
    raw: dict[str, Any] | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], cached: bool = False) -> "Completion":
        return cls(
            text=data["text"],
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
            finish_reason=data["finish_reason"],
            cached=cached,
            raw=data.get("raw"),
        )


def check_messages(messages: Any) -> Messages:
    """Reject malformed conversations before they cost a request or a forward pass."""
    if not isinstance(messages, list) or not messages:
        raise TermforgeError(
            f"messages: expected a non-empty list of {{role, content}} dicts, got {messages!r:.200}"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise TermforgeError(f"messages[{i}]: expected a dict with 'role' and 'content', got {m!r:.200}")
        if m["role"] not in _ROLES:
            raise TermforgeError(
                f"messages[{i}].role: expected one of {', '.join(_ROLES)}, got {m['role']!r}"
            )
        if not isinstance(m["content"], str):
            raise TermforgeError(
                f"messages[{i}].content: expected a string, got {type(m['content']).__name__}"
            )
    return messages


def check_n(n: Any) -> int:
    if not _is_int(n) or n < 1:
        raise TermforgeError(f"n: expected an integer >= 1, got {n!r}")
    return n


class ChatModel(abc.ABC):
    """A chat model: messages in, `n` sampled completions out.

    Subclasses implement `chat_many` (the batched form; one list of completions per conversation).
    `chat` and the async forms are derived from it unless a backend has something better.
    """

    backend: str = "?"
    # True when one chat_many call is cheaper than separate calls (in-process batching); False for
    # backends whose conversations are independent requests anyway.
    batched: bool = True

    def __init__(self, model_name: str, sampling: SamplingParams | None = None) -> None:
        # `model_name` rather than `model`: in-process backends expose the loaded module as `.model`.
        self.model_name = model_name
        self.default_sampling = sampling or SamplingParams()

    def identity(self) -> dict[str, Any]:
        """What determines this model's outputs besides the request itself: the response cache keys
        on it. Never includes credentials or transport details like a URL or port."""
        return {"backend": self.backend, "model": self.model_name}

    @property
    def model_id(self) -> str:
        return f"{self.backend}:{self.model_name}"

    def _sampling(self, sampling: SamplingParams | None) -> SamplingParams:
        return self.default_sampling if sampling is None else sampling

    def chat(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        return self.chat_many([messages], n=n, sampling=sampling)[0]

    @abc.abstractmethod
    def chat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """One list of `n` completions per conversation, in input order."""

    async def achat(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        # In-process backends block on compute; a worker thread keeps the event loop responsive.
        return await asyncio.to_thread(self.chat, messages, n, sampling)

    async def achat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        return await asyncio.to_thread(self.chat_many, list(conversations), n, sampling)

    def stats(self) -> dict[str, Any]:
        """Counters since construction (requests, tokens, failures ...); a fresh dict each call."""
        return {}

    def close(self) -> None:
        """Release resources (engines, GPU memory). Safe to call twice."""

    def __enter__(self) -> "ChatModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model_name!r})"


# The backends a model spec can name. Each backend module registers itself when imported
# (termforge.models.registry imports them all); this module imports none of them.
@dataclass(frozen=True)
class Backend:
    name: str
    options: tuple[str, ...]  # what a model spec may set besides backend/model/sampling/cache_dir
    construct: Callable[..., "ChatModel"]  # (model name, sampling, where, options) -> the model


BACKENDS: dict[str, Backend] = {}

# Options every API backend accepts (openai, anthropic: termforge.models.api).
API_OPTIONS = (
    "base_url",
    "api_key_env",
    "concurrency",
    "max_retries",
    "timeout_s",
    "backoff_base_s",
    "backoff_max_s",
    "request_budget",
    "extra_body",
    "jitter_seed",
)


def register_backend(name: str, options: tuple[str, ...], construct: Callable[..., "ChatModel"]) -> None:
    """Make `name` a backend a model spec can name; `construct` builds its model."""
    if name in BACKENDS and BACKENDS[name].construct is not construct:
        raise TermforgeError(f"model backend {name!r} is registered twice")
    BACKENDS[name] = Backend(name, tuple(options), construct)
