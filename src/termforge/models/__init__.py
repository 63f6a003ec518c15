"""Chat models: one interface (`ChatModel`), four backends (openai, anthropic, transformers, vllm), a response cache, a `vllm serve` runner.

Backends are imported lazily by `make_model`, so importing this package needs neither torch nor vllm.
"""

from termforge.models.base import ChatModel, Completion, SamplingParams, make_model
from termforge.models.cache import CachedChatModel, ResponseCache, cache_key

__all__ = [
    "CachedChatModel",
    "ChatModel",
    "Completion",
    "ResponseCache",
    "SamplingParams",
    "cache_key",
    "make_model",
]
