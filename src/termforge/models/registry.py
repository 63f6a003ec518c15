"""Model specs to models: which backends there are, what a spec may set, and which models a run
uses. Importing this module imports each backend module, which registers itself in
termforge.models.base.BACKENDS (the API backends import their vendors' SDKs; transformers and
vllm import torch and vllm only when a model is built), so base imports no backend.
"""

from __future__ import annotations

import os
from typing import Any

from termforge.errors import ConfigError
# Each backend module registers itself on import; this order is the order errors list them in.
from termforge.models import openai_backend, anthropic_backend, transformers_backend, vllm_backend  # noqa: F401
from termforge.models.base import BACKENDS, ChatModel, SamplingParams
from termforge.models.cache import CachedChatModel

_COMMON_KEYS = ("backend", "model", "sampling", "cache_dir")


def check_model_spec(spec: Any, where: str = "model") -> SamplingParams:
    """Check a model spec without building the model (no weights, no request): the keys a backend takes and the sampling defaults. Returns the sampling defaults.
    Raises ConfigError naming the key (`where` is the spec's config path)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping with keys backend and model, got {spec!r:.200}")
    for key in ("backend", "model"):
        if key not in spec or spec[key] in (None, ""):
            raise ConfigError(f"{where}.{key}: required key is missing")
    backend = spec["backend"]
    if backend not in BACKENDS:
        raise ConfigError(
            f"{where}.backend: unknown backend {backend!r} (expected one of {', '.join(BACKENDS)})"
        )
    if not isinstance(spec["model"], str):
        raise ConfigError(f"{where}.model: expected a string, got {spec['model']!r}")
    allowed = set(_COMMON_KEYS) | set(BACKENDS[backend].options)
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown option for backend {backend!r} "
            f"(accepted: {', '.join(sorted(BACKENDS[backend].options))})"
        )
    return SamplingParams.from_dict(spec.get("sampling"), where=f"{where}.sampling")


def make_model(spec: dict[str, Any], where: str = "model") -> ChatModel:
    """Build a chat model from a config mapping.

    Keys: backend ("openai" | "anthropic" | "transformers" | "vllm"), model, optional sampling
    (defaults for calls that pass none), optional cache_dir (wraps the model in the response cache),
    and backend options. `where` is the config path of `spec`, used to name the culprit key in errors.
    """
    sampling = check_model_spec(spec, where)
    backend = spec["backend"]
    options = {k: v for k, v in spec.items() if k in BACKENDS[backend].options}

    model: ChatModel
    try:
        model = BACKENDS[backend].construct(spec["model"], sampling, where, options)
    except ConfigError as exc:
        # Backend constructors name their option alone; point at it inside this spec.
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(where) else f"{where}.{msg}") from None

    if spec.get("cache_dir"):
        model = CachedChatModel(model, spec["cache_dir"])
    return model


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
