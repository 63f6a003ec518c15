"""Model specs to models. Importing this module imports each backend module, which registers its
constructor in termforge.models.base.BACKENDS (the API backends import their vendors' SDKs;
transformers and vllm import torch and vllm only when a model is built). Only code that builds
models imports it: checking a spec needs termforge.models.base alone.
"""

from __future__ import annotations

from typing import Any

from termforge.errors import ConfigError
# Each backend module registers itself on import.
from termforge.models import anthropic_backend, openai_backend, transformers_backend, vllm_backend  # noqa: F401
from termforge.models.base import _BACKEND_OPTIONS, BACKENDS, ChatModel, check_model_spec
from termforge.models.cache import CachedChatModel


def make_model(spec: dict[str, Any], where: str = "model") -> ChatModel:
    """Build a chat model from a config mapping.

    Keys: backend ("openai" | "anthropic" | "transformers" | "vllm"), model, optional sampling
    (defaults for calls that pass none), optional cache_dir (wraps the model in the response cache),
    and backend options. `where` is the config path of `spec`, used to name the culprit key in errors.
    """
    sampling = check_model_spec(spec, where)
    backend = spec["backend"]
    options = {k: v for k, v in spec.items() if k in _BACKEND_OPTIONS[backend]}

    model: ChatModel
    try:
        model = BACKENDS[backend](spec["model"], sampling, where, options)
    except ConfigError as exc:
        # Backend constructors name their option alone; point at it inside this spec.
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(where) else f"{where}.{msg}") from None

    if spec.get("cache_dir"):
        model = CachedChatModel(model, spec["cache_dir"])
    return model


__all__ = ["make_model"]
