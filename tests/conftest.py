import shutil

import pytest

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="session", autouse=True)
def base_images():
    """The default base image every sandbox runs on, from the user's image cache (scripts/setup.sh
    builds it; built here once if the cache lacks it, never per test)."""
    if shutil.which("bwrap") is None or shutil.which("mmdebstrap") is None:
        return None
    from termforge.images import DEFAULT_BASE, ensure_base

    return ensure_base(DEFAULT_BASE)


def make_signature(index: int, domain: str, verifier_kind: str, fixture_kind: str, **extra) -> dict:
    """A hand-made signature for tests that target one family."""
    from termforge.io import make_task_id

    sig = {
        "index": index, "corpus_kind": "legacy", "domain": domain, "skill_type": "test",
        "skills": ["reading files", "shell pipelines", "careful output formatting"],
        "persona": "a careful on-call engineer", "language": "bash", "anchor": None,
        "task_complexity": "moderate", "command_complexity": "bash_code",
        "verifier_kind": verifier_kind, "fixture_kind": fixture_kind,
    }
    sig.update(extra)
    sig["id"] = make_task_id(1234, index, sig)
    return sig


def smollm2_tokenizer():
    """SmolLM2's tokenizer from the embedded GGUF (offline), with a pad token."""
    from transformers import AutoTokenizer

    from termforge.models.transformers_backend import DEFAULT_MODEL, embedded_gguf_path

    gguf = embedded_gguf_path(DEFAULT_MODEL)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def save_tiny_llama(path, tok, max_positions: int = 2048) -> str:
    """A 2-layer Llama with random weights and `tok`, saved like any local model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    eos = tok.eos_token_id
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                         tie_word_embeddings=True, pad_token_id=eos, eos_token_id=eos, bos_token_id=1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    # Larger-than-default weights give peaked, context-sensitive logits, so KL values are not ~0.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def built_family_tasks(root, families) -> list:
    """One procedural task per named family under root/tasks, each built into root/images."""
    from termforge.generate.families import family_by_name
    from termforge.generate.procedural import generate_task
    from termforge.images.runtimes import BwrapRuntime

    tasks = []
    for i, name in enumerate(families):
        fam = family_by_name(name)
        sig = make_signature(i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
        tasks.append(generate_task(sig, root / "tasks", families=[fam]))
    rt = BwrapRuntime()
    for t in tasks:
        assert rt.build(t, root / "images").ok
    return tasks


def returns(fn, *args, wait: float = 120.0):
    """fn(*args)'s value, run in a thread that must finish within `wait` seconds: a check that a
    call does not block (a FIFO opened for reading, a read that never ends), with a wait no busy
    machine comes near, so the check never depends on how fast the machine is."""
    import threading

    out = []
    worker = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    worker.start()
    worker.join(wait)
    assert not worker.is_alive(), f"{getattr(fn, '__name__', fn)} blocked for {wait} s"
    return out[0]


# Two float32 computations of the same values that add in a different order: padding changes the
# matmul's blocking, data parallelism all-reduces the ranks' gradients in another order than one
# process accumulates them, micro-batches accumulate separately. Each reordered sum differs by a
# few ulps (float32 eps 1.2e-7) times the number of terms; after the handful of Adam steps these
# tests take, the weights and logits (|x| up to ~10) stay within 1e-5 relative and 1e-6 absolute.
# Comparisons of computations that run the same kernels in the same order stay exact (torch.equal).
REORDERED_FLOAT32 = {"atol": 1e-6, "rtol": 1e-5}
# Logits over a padded vs an unpadded batch: the attention and MLP reductions run over different
# lengths, a few more terms per sum than the weights above.
REORDERED_LOGITS = {"atol": 1e-5, "rtol": 1e-5}


def termforge_lines(stderr: str) -> list[str]:
    """The lines termforge itself wrote to stderr. A one-line error is one such line; a warning the
    interpreter or a library prints on its own (at shutdown on a loaded machine, say) is not
    termforge's output, but a traceback is a bug, so none may appear."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("termforge:")]


def ulps_of(t, n: int = 4) -> float:
    """n float32 ulps of t's largest magnitude: the bound for two roundings of the same formula
    written differently (lerp vs a*x + b*y), where each side is within one ulp of the exact value."""
    import torch

    return n * torch.finfo(torch.float32).eps * float(t.abs().max())


def gate_slice(values, keep, ids=None):
    """values as pytest parameters, the ones outside `keep` marked `extended`: the CI gate
    (`make test`) runs the representative slice `keep`, `make test-all` and the bench sweeps run
    every value. `ids` names a parameter (e.g. a family object by its name)."""
    keep = set(keep)
    names = [ids(v) if ids else v for v in values]
    params = []
    for v, name in zip(values, names):
        marks = () if name in keep else (pytest.mark.extended,)
        args = v if isinstance(v, tuple) else (v,)
        params.append(pytest.param(*args, marks=marks, id=name if ids else None))
    missing = keep - set(names)
    assert not missing, f"gate_slice keeps values that are not parameters: {sorted(missing)}"
    return params
