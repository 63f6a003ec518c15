"""Chat models: one interface (`ChatModel`), four backends (openai, anthropic, transformers, vllm), a response cache, a `vllm serve` runner.

Each backend registers itself in `base.BACKENDS`; `registry` imports them all and builds models from
specs (`make_model`). Backends import torch and vllm only when a model is built, so importing this
package needs neither.
"""

from termforge.models.base import ChatModel, Completion, SamplingParams
from termforge.models.registry import make_model
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
