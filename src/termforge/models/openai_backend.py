"""Chat completions through the official `openai` SDK: OpenAI itself (the default, no base_url
needed), or any OpenAI-compatible endpoint (`base_url`: `vllm serve`, a litellm proxy, a hosted
API that speaks the protocol).

Retries, limits, budget and counters: termforge.models.api. Sampling maps onto the protocol's
fields; `top_k`, which is not one of them, is sent in the body only when set (vLLM and litellm
accept it, OpenAI's own API rejects it), as is anything in `extra_body`.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pydantic

from termforge.models.api import (FAILURE_KINDS, APIChatModel, BudgetExceededError, ModelRequestError, _Malformed,
                                  with_backoff)
from termforge.models.base import Completion, Messages, SamplingParams, register_backend

__all__ = ["OpenAIChatModel", "ModelRequestError", "BudgetExceededError", "FAILURE_KINDS"]


class OpenAIChatModel(APIChatModel):
    backend = "openai"
    # The SDK's own default; spelled out so that OPENAI_BASE_URL in the environment cannot redirect a
    # config that names no base_url.
    default_base_url = "https://api.openai.com/v1"
    default_key_env = "OPENAI_API_KEY"
    endpoint_path = "/chat/completions"
    sdk = openai
    client_class = with_backoff(openai.AsyncOpenAI)

    async def _ask(self, client: Any, messages: Messages, want: int, sampling: SamplingParams,
                   seed: int | None) -> list[Completion]:
        extra: dict[str, Any] = {}
        if sampling.top_k:
            extra["top_k"] = sampling.top_k
        extra.update(self.extra_body)
        kwargs: dict[str, Any] = {"model": self.model_name, "messages": messages, "temperature": sampling.temperature,
                                  "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens}
        if want > 1:
            kwargs["n"] = want  # n=1 is left implicit for proxies that reject the field
        if seed is not None:
            kwargs["seed"] = seed
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if extra:
            kwargs["extra_body"] = extra
        try:
            reply = await client.chat.completions.create(**kwargs)
        except (json.JSONDecodeError, pydantic.ValidationError, openai.APIResponseValidationError) as exc:
            raise _Malformed(f"{type(exc).__name__}: {exc}") from None
        try:
            choices = sorted(reply.choices, key=lambda c: c.index or 0)[:want]
            usage = reply.usage
            raws = [c.model_dump(exclude_unset=True) for c in choices]
            texts = [c.message.content for c in choices]
        except (AttributeError, TypeError) as exc:
            # The SDK builds its reply objects without validation: a body without choices or a
            # message shows up here.
            raise _Malformed(f"{type(exc).__name__}: {exc}") from None
        if any(t is not None and not isinstance(t, str) for t in texts):
            raise _Malformed("a choice's message.content is not text")
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        total = int(getattr(usage, "completion_tokens", 0) or 0)
        self.counters["prompt_tokens"] += prompt_tokens
        self.counters["completion_tokens"] += total
        if not choices:
            return []
        # The protocol reports completion tokens per request, not per choice: split them evenly.
        share, extra_tokens = divmod(total, len(choices))
        return [Completion(text=text or "", prompt_tokens=prompt_tokens,
                           completion_tokens=share + (1 if i < extra_tokens else 0),
                           finish_reason=choice.finish_reason or "stop", raw=raw)
                for i, (choice, text, raw) in enumerate(zip(choices, texts, raws))]


register_backend("openai", lambda name, sampling, where, options: OpenAIChatModel(name, sampling=sampling, where=where,
                                                                                  **options))
