"""Claude models through the official `anthropic` SDK and the Messages API (POST /v1/messages).

Retries, limits, budget and counters: termforge.models.api. What differs from the chat-completions
protocol, and how termforge maps it:

- system messages go to the request's `system` field; user and assistant turns stay in order
  (consecutive turns of one role are sent as one turn with several text blocks);
- there is no `n`: n completions are n requests;
- the Messages API of the pinned SDK (anthropic 2.x) takes no sampling parameters (no temperature,
  top_p, top_k or seed: the model decodes as its vendor set it), so of termforge's sampling only
  `max_new_tokens` (`max_tokens`) and `stop` (`stop_sequences`) are sent. An endpoint that still
  takes the old fields gets them through `extra_body` (e.g. `{temperature: 0.7}`). The sampling
  settings stay part of the response cache key all the same;
- prompt caching (`prompt_cache: true`, the default): a cache breakpoint on the system prompt and
  one on the last message, so the long, repeated part of a task's context (the system prompt, the
  chain of earlier steps in generation, the earlier turns of an episode) is read from the cache
  at a tenth of the input price on the next request instead of being processed again. Anthropic
  caches only prefixes of at least 1,024 tokens (2,048 for Haiku); shorter ones cost nothing extra.
  Cached tokens count as prompt tokens in the counters (`cache_read_tokens` and
  `cache_write_tokens` say how many were which).
- the reply's text blocks are joined (thinking blocks are not part of the answer); stop reasons map
  to termforge's finish reasons (`max_tokens` -> `length`, `end_turn`/`stop_sequence` -> `stop`).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pydantic

from termforge.errors import ConfigError
from termforge.models.api import APIChatModel, _Malformed, with_backoff
from termforge.models.base import Completion, Messages, SamplingParams, register_backend

FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "pause_turn": "length"}
CACHE_CONTROL = {"type": "ephemeral"}


def to_messages_api(messages: Messages, prompt_cache: bool) -> tuple[list[dict], list[dict]]:
    """(system blocks, messages) for the Messages API from a chat-completions conversation."""
    system: list[dict] = []
    turns: list[dict] = []
    for m in messages:
        block = {"type": "text", "text": m["content"]}
        if m["role"] in ("system", "developer"):
            system.append(block)
            continue
        role = "assistant" if m["role"] == "assistant" else "user"  # a tool result is the user's turn
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": role, "content": [block]})
    if prompt_cache:
        # Blocks with empty text cannot carry a breakpoint (the API rejects empty text blocks anyway).
        if system:
            system[-1]["cache_control"] = CACHE_CONTROL
        if turns:
            turns[-1]["content"][-1]["cache_control"] = CACHE_CONTROL
    return system, turns


class AnthropicChatModel(APIChatModel):
    backend = "anthropic"
    default_base_url = "https://api.anthropic.com"
    default_key_env = "ANTHROPIC_API_KEY"
    endpoint_path = "/v1/messages"
    sdk = anthropic
    client_class = with_backoff(anthropic.AsyncAnthropic)

    def __init__(self, model: str, prompt_cache: bool = True, **options: Any) -> None:
        super().__init__(model, **options)
        if not isinstance(prompt_cache, bool):
            raise ConfigError(f"{self.where}.prompt_cache: expected true or false, got {prompt_cache!r}")
        self.prompt_cache = prompt_cache
        self.counters["cache_read_tokens"] = 0
        self.counters["cache_write_tokens"] = 0

    async def _ask(self, client: Any, messages: Messages, want: int, sampling: SamplingParams,
                   seed: int | None) -> list[Completion]:
        system, turns = to_messages_api(messages, self.prompt_cache)
        kwargs: dict[str, Any] = {"model": self.model_name, "messages": turns, "max_tokens": sampling.max_new_tokens}
        if system:
            kwargs["system"] = system
        if sampling.stop:
            kwargs["stop_sequences"] = list(sampling.stop)
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        try:
            reply = await client.messages.create(**kwargs)
        except (json.JSONDecodeError, pydantic.ValidationError, anthropic.APIResponseValidationError) as exc:
            raise _Malformed(f"{type(exc).__name__}: {exc}") from None
        try:
            blocks = list(reply.content)
            text = "".join(b.text for b in blocks if getattr(b, "type", None) == "text")
            usage = reply.usage
            raw = reply.model_dump(exclude_unset=True, mode="json")
            stop_reason = reply.stop_reason
        except (AttributeError, TypeError) as exc:
            raise _Malformed(f"{type(exc).__name__}: {exc}") from None
        read = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        written = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        prompt_tokens = int(getattr(usage, "input_tokens", 0) or 0) + read + written
        completion_tokens = int(getattr(usage, "output_tokens", 0) or 0)
        self.counters["prompt_tokens"] += prompt_tokens
        self.counters["completion_tokens"] += completion_tokens
        self.counters["cache_read_tokens"] += read
        self.counters["cache_write_tokens"] += written
        return [Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                           finish_reason=FINISH_REASONS.get(stop_reason or "", stop_reason or "stop"), raw=raw)]


register_backend("anthropic", lambda name, sampling, where, options: AnthropicChatModel(name, sampling=sampling,
                                                                                        where=where, **options))
