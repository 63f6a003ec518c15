"""Chat models: one interface (`ChatModel`), four backends (openai, anthropic, transformers, vllm), a response cache, a `vllm serve` runner.

Each backend registers itself in `base.BACKENDS`; `registry` imports them all and builds models from
specs (`registry.make_model`). This package imports neither the backends nor their SDKs, nor torch
or vllm: a spec is checked by `base.check_model_spec` alone.
"""

from termforge.models.base import ChatModel, Completion, SamplingParams
from termforge.models.cache import CachedChatModel, ResponseCache, cache_key

__all__ = [
    "CachedChatModel",
    "ChatModel",
    "Completion",
    "ResponseCache",
    "SamplingParams",
    "cache_key",
]
