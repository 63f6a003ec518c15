"""In-process vLLM engine for batch generation on GPU nodes (solve and eval at scale).

vllm is imported only when this backend is constructed: the rest of termforge, and every machine
without a GPU, runs without it.
"""

from __future__ import annotations

from typing import Any, Sequence

from termforge.errors import ConfigError, TermforgeError
from termforge.models.base import (
    ChatModel,
    register_backend,
    Completion,
    Messages,
    SamplingParams,
    check_messages,
    check_n,
)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise TermforgeError(
            "backend 'vllm' needs the vllm package, which is not installed here "
            f"({exc}); install it on a GPU node (pip install 'termforge[vllm]'), or use backend "
            "'openai' against a `vllm serve` endpoint, or backend 'transformers'"
        ) from None
    return vllm


class VLLMChatModel(ChatModel):
    backend = "vllm"
    batched = True

    def __init__(
        self,
        model_name: str,
        sampling: SamplingParams | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        engine_seed: int = 0,
        engine_kwargs: dict[str, Any] | None = None,
        lora: dict[str, Any] | None = None,
    ) -> None:
        """`lora`: a trained adapter to generate with, {path, rank, name} (termforge.evals.run sets it
        when evaluating an ablation): vLLM applies it on the base weights, unmerged."""
        super().__init__(model_name if not lora else f"{model_name}+{lora['name']}", sampling)
        if engine_kwargs is not None and not isinstance(engine_kwargs, dict):
            raise ConfigError(f"engine_kwargs: expected a mapping, got {engine_kwargs!r}")
        if lora is not None and not (isinstance(lora, dict) and {"path", "rank", "name"} <= set(lora)):
            raise ConfigError(f"lora: expected a mapping with path, rank and name, got {lora!r}")
        self._vllm = _import_vllm()
        self.dtype = dtype
        kwargs: dict[str, Any] = {
            "model": model_name,
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "seed": engine_seed,
            **(engine_kwargs or {}),
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self._lora_request = None
        if lora:
            from vllm.lora.request import LoRARequest

            kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=int(lora["rank"]))
            self._lora_request = LoRARequest(str(lora["name"]), 1, str(lora["path"]))
        self.lora = dict(lora) if lora else None
        self.llm = self._vllm.LLM(**kwargs)
        self.counters = {"calls": 0, "sequences": 0, "prompt_tokens": 0, "completion_tokens": 0}

    def identity(self) -> dict[str, Any]:
        ident = {**super().identity(), "dtype": self.dtype}
        if self.lora:
            ident["adapter"] = self.lora["path"]
        return ident

    def stats(self) -> dict[str, Any]:
        return dict(self.counters)

    def _vllm_sampling(self, sampling: SamplingParams, n: int) -> Any:
        return self._vllm.SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,  # vLLM's "disabled" is -1
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
            stop=list(sampling.stop) or None,
        )

    def chat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        sampling = self._sampling(sampling)
        check_n(n)
        conversations = [check_messages(m) for m in conversations]
        outputs = self.llm.chat(
            conversations, sampling_params=self._vllm_sampling(sampling, n), use_tqdm=False,
            **({"lora_request": self._lora_request} if self._lora_request is not None else {}),
        )
        results = []
        for request in outputs:
            prompt_tokens = len(request.prompt_token_ids or [])
            completions = []
            for out in request.outputs:
                completion_tokens = len(out.token_ids)
                completions.append(
                    Completion(
                        text=out.text,
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens,
                        finish_reason=out.finish_reason or "stop",
                    )
                )
                self.counters["sequences"] += 1
                self.counters["completion_tokens"] += completion_tokens
            self.counters["prompt_tokens"] += prompt_tokens
            results.append(completions)
        self.counters["calls"] += 1
        return results

    def close(self) -> None:
        self.llm = None


register_backend("vllm", lambda name, sampling, where, options: VLLMChatModel(name, sampling=sampling, **options))
