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


# Options each backend accepts in a model spec besides backend/model/sampling/cache_dir.
_API_OPTIONS = (
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
_BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "openai": _API_OPTIONS,
    "anthropic": (*_API_OPTIONS, "prompt_cache"),
    "transformers": ("device", "dtype", "batch_size", "num_threads", "converted_cache"),
    "vllm": (
        "tensor_parallel_size",
        "gpu_memory_utilization",
        "max_model_len",
        "dtype",
        "engine_seed",
        "engine_kwargs",
        "lora",
    ),
}
_COMMON_KEYS = ("backend", "model", "sampling", "cache_dir")

# Backend name -> what builds its model: (model name, sampling, where, options) -> ChatModel. Each
# backend module registers itself when imported (termforge.models.registry imports them all and
# builds models); this module imports no backend. What a spec may set per backend is the table
# above: checking a spec (plan time, termforge.plancheck) needs neither a backend nor its SDK.
BACKENDS: dict[str, Callable[..., "ChatModel"]] = {}


def register_backend(name: str, construct: Callable[..., "ChatModel"]) -> None:
    """Make `construct` build the models of backend `name` (one of _BACKEND_OPTIONS)."""
    if name not in _BACKEND_OPTIONS:
        raise TermforgeError(f"model backend {name!r}: no options declared for it in termforge.models.base")
    if BACKENDS.get(name, construct) is not construct:
        raise TermforgeError(f"model backend {name!r} is registered twice")
    BACKENDS[name] = construct


def check_model_spec(spec: Any, where: str = "model") -> SamplingParams:
    """Check a model spec without building the model (no import of its backend or its SDK, no
    weights, no request): the keys a backend takes and the sampling defaults. Returns the sampling defaults.
    Raises ConfigError naming the key (`where` is the spec's config path)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping with keys backend and model, got {spec!r:.200}")
    for key in ("backend", "model"):
        if key not in spec or spec[key] in (None, ""):
            raise ConfigError(f"{where}.{key}: required key is missing")
    backend = spec["backend"]
    if backend not in _BACKEND_OPTIONS:
        raise ConfigError(
            f"{where}.backend: unknown backend {backend!r} (expected one of {', '.join(_BACKEND_OPTIONS)})"
        )
    if not isinstance(spec["model"], str):
        raise ConfigError(f"{where}.model: expected a string, got {spec['model']!r}")
    allowed = set(_COMMON_KEYS) | set(_BACKEND_OPTIONS[backend])
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown option for backend {backend!r} "
            f"(accepted: {', '.join(sorted(_BACKEND_OPTIONS[backend]))})"
        )
    return SamplingParams.from_dict(spec.get("sampling"), where=f"{where}.sampling")


# The config keys that name a model in `models`, with the condition under which the run uses it.
MODEL_ROLES: tuple[tuple[str, str | None, object], ...] = (
    ("generate.model", "generate.backend", "llm"),
    ("hints.model", "hints.backend", "llm"),
    ("hints.judge", "hints.backend", "llm"),
    ("hints.probe", "hints.backend", "llm"),
    ("solve.model", "solve.agent", "model"),
    ("eval.model", None, None),
)
_KEY_DEFAULTS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def used_models(cfg: dict[str, Any]) -> dict[str, list[str]]:
    """The names in `models` this config's run uses, each with the config keys that use it."""
    used: dict[str, list[str]] = {}
    for role, cond_key, cond_value in MODEL_ROLES:
        section, key = role.split(".")
        name = (cfg.get(section) or {}).get(key)
        if cond_key:
            cond_section, cond_name = cond_key.split(".")
            if (cfg.get(cond_section) or {}).get(cond_name) != cond_value:
                continue
        if name:
            used.setdefault(name, []).append(role)
    return used


def model_spec_problem(cfg: dict[str, Any]) -> str | None:
    """The first model the run uses that is undefined or whose spec its backend would refuse
    (check_model_spec), as a one-line message; None when all are fine. Found when the config is
    read, not when the job that builds the model starts hours later."""
    for name, roles in used_models(cfg).items():
        spec = (cfg.get("models") or {}).get(name)
        if spec is None:
            return f"{roles[0]}: model {name!r} is not defined under models"
        try:
            check_model_spec(spec, where=f"models.{name}")
        except ConfigError as exc:
            return f"{exc} (used by {', '.join(roles)})"
    return None


def missing_api_keys(cfg: dict[str, Any], environ: dict[str, str] | None = None) -> list[str]:
    """One line per model the run uses whose API key variable is unset here: which model, which
    variable, and which config keys use it. (A warning, not an error: the key may be set only where
    the jobs run, e.g. in the cluster's environment.)"""
    import os

    environ = os.environ if environ is None else environ
    lines = []
    for name, roles in used_models(cfg).items():
        spec = (cfg.get("models") or {}).get(name) or {}
        backend = spec.get("backend")
        if backend not in _KEY_DEFAULTS:
            continue
        variable = spec.get("api_key_env") or (_KEY_DEFAULTS[backend] if not spec.get("base_url") else None)
        if variable and not environ.get(variable):
            lines.append(f"models.{name}: environment variable {variable} (its API key) is not set "
                         f"(used by {', '.join(roles)})")
    return lines
