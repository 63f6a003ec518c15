"""The OPSD trainer: config errors, data, token masks, teacher modes, exact resume, and (marked
`model`) a short SmolLM2 run that lowers the held-out KL.

Fast tests use a tiny randomly initialised Llama that shares SmolLM2's tokenizer and chat
template (saved to a temporary folder and loaded through the real loader), so every path runs
for real in seconds.
"""

from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from conftest import REORDERED_FLOAT32, REORDERED_LOGITS, save_tiny_llama, smollm2_tokenizer, ulps_of  # noqa: E402
from termforge.errors import ConfigError, TermforgeError  # noqa: E402
from termforge.io import read_json, read_jsonl  # noqa: E402
from termforge.opsd.config import OPSDConfig, config_schema  # noqa: E402
from termforge.opsd.data import (  # noqa: E402
    PromptRow,
    load_math_rows,
    load_terminal_rows,
    math_prompt_rows,
    step_row_indices,
    teacher_messages,
)
from termforge.opsd.rollout import (  # noqa: E402
    Trajectory,
    assistant_token_mask,
    chat_template_kwargs,
    check_thinking_switches,
    collate,
    prompt_token_ids,
    transcript_trajectory,
)

THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def smol_tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, smol_tokenizer):
    """A 2-layer Llama with random weights and SmolLM2's tokenizer, saved like any local model."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smol_tokenizer)


@pytest.fixture(scope="module")
def math_rows():
    from termforge.mathdata import make_math_set

    train, heldout = make_math_set(16, seed=3, heldout_fraction=0.25)
    return math_prompt_rows(train), math_prompt_rows(heldout)


def tiny_config(model_dir: str, **overrides) -> OPSDConfig:
    values = dict(model=model_dir, device="cpu", num_threads=1, max_steps=3, prompts_per_step=2, max_new_tokens=6,
                  micro_batch_size=1, lora_r=4, lora_alpha=8.0, lora_target_modules=["q_proj", "v_proj"],
                  learning_rate=1e-2, probe_size=2, probe_max_new_tokens=6, checkpoint_every=1, seed=5)
    values.update(overrides)
    return OPSDConfig.from_dict(values)


def trainable_snapshot(trainer) -> dict:
    return {name: p.detach().clone() for name, p in trainer.trainable}


# -- config -----------------------------------------------------------------------------------

def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"train\.lora_rank: unknown key \(did you mean 'lora_r'\?\)"):
        OPSDConfig.from_dict({"lora_rank": 8})
    with pytest.raises(ConfigError, match=r"train\.beta: must be <= 1"):
        OPSDConfig.from_dict({"beta": 2})
    with pytest.raises(ConfigError, match=r"train\.teacher_mode: expected one of auto, fixed, ema, live"):
        OPSDConfig.from_dict({"teacher_mode": "frozen"})
    with pytest.raises(ConfigError, match=r"train\.max_steps: expected an integer"):
        OPSDConfig.from_dict({"max_steps": "10"})
    with pytest.raises(ConfigError, match=r"ablation\.token_clip: must be > 0"):
        OPSDConfig.from_dict({"token_clip": 0}, where="ablation")
    with pytest.raises(ConfigError, match=r"train\.math_context_template: must contain"):
        OPSDConfig.from_dict({"math_context_template": "no placeholder here"})
    with pytest.raises(ConfigError, match=r"train\.lora_target_modules: expected a list of strings"):
        OPSDConfig.from_dict({"lora_target_modules": "q_proj"})


def test_schema_covers_every_field_and_defaults_round_trip():
    import dataclasses

    schema = config_schema()
    fields = [f.name for f in dataclasses.fields(OPSDConfig)]
    assert list(schema["properties"]) == fields
    assert all(p["description"] for p in schema["properties"].values())
    defaults = {k: p["default"] for k, p in schema["properties"].items()}
    assert OPSDConfig.from_dict(defaults) == OPSDConfig()
    assert schema["properties"]["teacher_mode"]["enum"] == ["auto", "fixed", "ema", "live"]
    assert OPSDConfig().effective_loss_temperature == OPSDConfig().temperature == 1.1
    assert OPSDConfig.from_dict({"prompts_per_step": 32, "micro_batch_size": 4}).gradient_accumulation_steps(2) == 4


def test_reference_overlay_is_a_valid_config():
    import yaml

    from termforge.config import REPO_ROOT

    overlay = yaml.safe_load((REPO_ROOT / "configs" / "opsd-reference.yaml").read_text())
    cfg = OPSDConfig.from_dict(overlay["train"])
    assert (cfg.model, cfg.lora_r, cfg.lora_alpha, cfg.learning_rate, cfg.max_grad_norm) == (
        "Qwen/Qwen3-1.7B", 64, 128.0, 5e-6, 0.1)
    assert (cfg.prompts_per_step, cfg.rollouts_per_prompt, cfg.temperature, cfg.top_p, cfg.top_k,
            cfg.max_new_tokens) == (32, 1, 1.1, 0.95, 20, 1024)
    assert (cfg.student_thinking, cfg.teacher_thinking, cfg.teacher_mode, cfg.beta, cfg.token_clip,
            cfg.max_steps) == (False, True, "fixed", 0.0, 0.05, 100)
    assert cfg.lora_target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# -- data -------------------------------------------------------------------------------------

def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_dataset_without_the_configured_column(tmp_path):
    data = tmp_path / "math.jsonl"
    _write_jsonl(data, [{"problem": "1+1?", "reference": "1+1=2, so \\boxed{2}", "answer": "2"}])
    with pytest.raises(TermforgeError, match=r"train\.solution_column: dataset .* has no column 'solution'"):
        load_math_rows(OPSDConfig.from_dict({"dataset": str(data)}))
    rows = load_math_rows(OPSDConfig.from_dict({"dataset": str(data), "solution_column": "reference"}))
    assert rows[0].privileged_context == "1+1=2, so \\boxed{2}" and rows[0].kind == "math"
    assert "1+1?" in rows[0].prompt_messages[-1]["content"]
    # No answer column: the answer filter reads the solution's last box ("2" passes, "x" does not).
    _write_jsonl(data, [{"problem": "1+1?", "reference": "1+1=2, so \\boxed{2}"},
                        {"problem": "x?", "reference": "so \\boxed{x}"}])
    rows = load_math_rows(OPSDConfig.from_dict({"dataset": str(data), "solution_column": "reference",
                                                "answer_column": None, "answer_filter": True}))
    assert [r.problem for r in rows] == ["1+1?"]


def test_filter_that_keeps_zero_rows(tmp_path, capsys):
    data = tmp_path / "math.jsonl"
    _write_jsonl(data, [{"problem": f"p{i}", "solution": "s", "answer": "x + 1"} for i in range(3)])
    with pytest.raises(ConfigError, match=r"no rows left .*train\.answer_filter"):
        load_math_rows(OPSDConfig.from_dict({"dataset": str(data), "answer_column": "answer", "answer_filter": True}))
    assert "kept 0 of 3 rows" in capsys.readouterr().out
    assert len(load_math_rows(OPSDConfig.from_dict({"dataset": str(data)}))) == 3
    assert "kept 3 of 3 rows" in capsys.readouterr().out


def test_terminal_rows_join_hints_with_instructions(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for task_id in ("tf-a", "tf-b", "tf-c"):
        (tmp_path / "tasks" / task_id).mkdir(parents=True)
        (tmp_path / "tasks" / task_id / "instruction.md").write_text(f"Do task {task_id}.")
    pq.write_table(pa.Table.from_pylist([
        {"task_id": "tf-a", "demo": "List the directory first."},
        {"task_id": "tf-b", "demo": None},
        {"task_id": "tf-c", "demo": "Read the config, then grep."}]), tmp_path / "demos.parquet")
    cfg = OPSDConfig.from_dict({"data_kind": "terminal", "demos": str(tmp_path / "demos.parquet"),
                                "tasks_dir": str(tmp_path / "tasks")})
    rows = load_terminal_rows(cfg)
    assert [r.id for r in rows] == ["tf-a", "tf-c"] and all(r.kind == "terminal" for r in rows)
    assert "kept 2 of 3 tasks with a hint" in capsys.readouterr().out
    student = rows[0].messages()
    teacher = teacher_messages(rows[0], cfg)
    assert student[0]["role"] == "system" and student[-1]["content"] == "Do task tf-a."
    assert "List the directory first." in teacher[-1]["content"] and teacher[-1]["content"].endswith("Do task tf-a.")
    assert all("List the directory" not in m["content"] for m in student)
    in_system = teacher_messages(rows[0], OPSDConfig.from_dict({"teacher_context_role": "system"}))
    assert "List the directory first." in in_system[0]["content"] and in_system[-1] == student[-1]


def test_data_order_covers_each_epoch_and_is_reproducible():
    seen = [i for step in range(5) for i in step_row_indices(10, step, 4, seed=7)]
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:20]) == list(range(10))
    assert step_row_indices(10, 3, 4, seed=7) == step_row_indices(10, 3, 4, seed=7)
    assert step_row_indices(10, 0, 4, seed=7) != step_row_indices(10, 0, 4, seed=8)


# -- templates and masks ----------------------------------------------------------------------

def test_thinking_switch_on_a_template_without_one(smol_tokenizer):
    with pytest.raises(ConfigError, match=r"train\.teacher_thinking: true, but the chat template .* no thinking switch"):
        check_thinking_switches(smol_tokenizer, OPSDConfig.from_dict({"teacher_thinking": True}))
    check_thinking_switches(smol_tokenizer, OPSDConfig.from_dict({"student_thinking": False}))
    assert chat_template_kwargs(smol_tokenizer, False) == {}

    thinking = copy.deepcopy(smol_tokenizer)
    thinking.chat_template = THINKING_TEMPLATE
    check_thinking_switches(thinking, OPSDConfig.from_dict({"student_thinking": False, "teacher_thinking": True}))
    messages = [{"role": "user", "content": "What is 2+2?"}]
    off = thinking.decode(prompt_token_ids(thinking, messages, False))
    on = thinking.decode(prompt_token_ids(thinking, messages, True))
    assert off.endswith("<think>\n\n</think>\n\n") and on.endswith("<|im_start|>assistant\n")


def test_assistant_token_mask_covers_exactly_the_assistant_tokens(smol_tokenizer):
    transcript = [
        {"role": "system", "content": "You are in a shell."},
        {"role": "user", "content": "Count the files."},
        {"role": "assistant", "content": "```bash\nls | wc -l\n```"},
        {"role": "user", "content": "3\n[exit code: 0]"},
        {"role": "assistant", "content": "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
    ]
    ids, mask = assistant_token_mask(smol_tokenizer, transcript)
    assert len(ids) == len(mask) and mask[0] == 0
    scored = [t for t, m in zip(ids, mask) if m]
    assert smol_tokenizer.decode(scored) == "```bash\nls | wc -l\n```<|im_end|>COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT<|im_end|>"
    full = smol_tokenizer(smol_tokenizer.apply_chat_template(transcript, tokenize=False),
                          add_special_tokens=False)["input_ids"]
    # The same tokens as rendering the whole chat, minus the template's newline after the last turn.
    assert ids == full[: len(ids)] and smol_tokenizer.decode(full[len(ids):]) == "\n"
    unscored = smol_tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    assert "Count the files." in unscored and "[exit code: 0]" in unscored and "wc -l" not in unscored

    row = PromptRow("tf-x", tuple(transcript[:2]), "Count with ls piped to wc.", "terminal")
    trajectory = transcript_trajectory(smol_tokenizer, row, transcript, OPSDConfig())
    teacher_text = smol_tokenizer.decode(trajectory.teacher_ids)
    assert "Count with ls piped to wc." in teacher_text
    assert "Count with ls piped to wc." not in smol_tokenizer.decode(trajectory.student_ids)
    assert trajectory.num_scored == len(scored)

    with pytest.raises(TermforgeError, match="no assistant turn"):
        assistant_token_mask(smol_tokenizer, transcript[:2])
    forgetful = copy.deepcopy(smol_tokenizer)  # drops earlier assistant turns, as Qwen3 drops old reasoning
    forgetful.chat_template = ("{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}<|im_start|>"
                               "{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
                               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(TermforgeError, match="re-renders earlier turns"):
        assistant_token_mask(forgetful, transcript)


def test_trajectory_rejects_different_scored_tokens():
    with pytest.raises(TermforgeError, match="score different tokens"):
        Trajectory("r", [5, 6, 7], [0, 1, 1], [9, 5, 6, 8], [0, 0, 1, 1])


# -- the model side ---------------------------------------------------------------------------

def test_collated_logits_equal_unpadded_forward(tiny_model_dir):
    from termforge.models.transformers_backend import load_causal_lm

    model, tokenizer = load_causal_lm(tiny_model_dir)
    long = Trajectory("a", [3, 10, 11, 12, 13, 14], [0, 0, 0, 1, 1, 1], [3, 9, 9, 10, 11, 12, 13, 14],
                      [0, 0, 0, 0, 0, 1, 1, 1])
    short = Trajectory("b", [3, 20, 21], [0, 0, 1], [3, 8, 20, 21], [0, 0, 0, 1])
    student, teacher = collate([long, short], tokenizer.pad_token_id)
    assert student.token_mask.tolist() == [[True, True, True], [True, False, False]]
    assert torch.equal(student.target_ids[student.token_mask], teacher.target_ids[teacher.token_mask])
    with torch.no_grad():
        batched = model(**student.model_inputs()).logits
        alone = model(input_ids=torch.tensor([short.student_ids])).logits
        alone_long = model(input_ids=torch.tensor([long.student_ids])).logits
    torch.testing.assert_close(batched[1, 0], alone[0, 1], **REORDERED_LOGITS)
    torch.testing.assert_close(batched[0], alone_long[0, 2:5], **REORDERED_LOGITS)


def _tiny_trainer(tiny_model_dir, **overrides):
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.trainer import OPSDTrainer

    model, tokenizer = load_causal_lm(tiny_model_dir)
    base = copy.deepcopy(model)
    trainer = OPSDTrainer(tiny_config(tiny_model_dir, **overrides), model, tokenizer)
    return trainer, base


def _perturb_lora(trainer, seed=1):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in trainer.trainable:
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)


def test_teacher_modes(tiny_model_dir):
    trajectory = Trajectory("r", [3, 10, 11, 12, 13], [0, 0, 1, 1, 1], [3, 7, 8, 10, 11, 12, 13],
                            [0, 0, 0, 0, 1, 1, 1])

    # fixed: LoRA really off, the teacher's logits are the base model's, bit for bit.
    trainer, base = _tiny_trainer(tiny_model_dir, teacher_mode="fixed")
    _perturb_lora(trainer)
    student_side, teacher_side = collate([trajectory], trainer.pad_id)
    with torch.no_grad():
        base_teacher = base(**teacher_side.model_inputs()).logits
        base_student = base(**student_side.model_inputs()).logits
    assert torch.equal(trainer.teacher_logits(teacher_side), base_teacher)
    assert not torch.allclose(trainer.student_logits(student_side, grad=False), base_student, atol=1e-3)
    assert trainer.unwrapped.training  # the teacher forward left the student in train mode

    # live: the current weights, the same function as the student's.
    trainer, _ = _tiny_trainer(tiny_model_dir, teacher_mode="live")
    _perturb_lora(trainer)
    assert torch.equal(trainer.teacher_logits(teacher_side), trainer.student_logits(teacher_side, grad=False))

    # ema: the average of the adapter weights, swapped in for the teacher forward only. The first
    # update (after the first optimizer step) snapshots the weights; later ones decay.
    trainer, _ = _tiny_trainer(tiny_model_dir, teacher_mode="ema", ema_decay=0.75)
    _perturb_lora(trainer)
    start = trainable_snapshot(trainer)
    trainer.update_teacher()
    _perturb_lora(trainer, seed=2)
    current = trainable_snapshot(trainer)
    trainer.update_teacher()
    ema_logits = trainer.teacher_logits(teacher_side)
    assert all(torch.equal(p, current[n]) for n, p in trainer.trainable)  # restored after the swap
    # The average itself: 0.75 * start + 0.25 * current up to float32 rounding. lerp and the
    # two-product sum round differently (each input is within one ulp), so the bound is a few ulps
    # of the largest weight, not of the logits the weights then feed.
    for (name, _), e in zip(trainer.trainable, trainer.ema):
        expected = 0.75 * start[name].float() + 0.25 * current[name].float()
        torch.testing.assert_close(e, expected, atol=ulps_of(expected), rtol=0)
    # The swap: the teacher forward runs exactly those weights. Putting the same tensors (the same
    # lerp, so the same bits) in place and running the same forward must give the same logits bit
    # for bit; a tolerance here would only hide a teacher that used other weights.
    with torch.no_grad():
        for name, p in trainer.trainable:
            p.copy_(start[name].float().lerp(current[name].float(), 0.25).to(p.dtype))
    assert torch.equal(ema_logits, trainer.student_logits(teacher_side, grad=False))

    # fixed with full fine-tuning: a frozen copy of the base.
    trainer, base = _tiny_trainer(tiny_model_dir, teacher_mode="fixed", finetune="full")
    with torch.no_grad():
        for _, p in trainer.trainable:
            p.add_(0.1)
    assert torch.equal(trainer.teacher_logits(teacher_side), base(**teacher_side.model_inputs()).logits)


def _cut_completion(trajectory: Trajectory, keep: int) -> Trajectory:
    drop = trajectory.num_scored - keep
    assert drop >= 0
    cut = lambda seq: seq[: len(seq) - drop] if drop else seq  # noqa: E731
    return Trajectory(trajectory.row_id, cut(trajectory.student_ids), cut(trajectory.student_mask),
                      cut(trajectory.teacher_ids), cut(trajectory.teacher_mask))


def test_micro_batch_split_does_not_change_the_update(tiny_model_dir, math_rows):
    """The loss is a token-mean over the whole step, so accumulation is exact, not a mean of means."""
    rows = math_rows[0][:3]
    results = []
    for micro in (1, 3):
        trainer, _ = _tiny_trainer(tiny_model_dir, micro_batch_size=micro, max_grad_norm=None)
        # Unequal completion lengths: a mean of per-micro-batch means would weigh tokens unequally.
        trajectories = [_cut_completion(t, keep) for t, keep in zip(trainer.rollouts(rows, 0), (6, 3, 1))]
        record = trainer.train_step(0, rows, rollout_fn=lambda *_: trajectories)
        results.append((record["loss"], record["grad_norm"], trainable_snapshot(trainer)))
    (loss_a, norm_a, weights_a), (loss_b, norm_b, weights_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5) and norm_a == pytest.approx(norm_b, rel=1e-4)
    for name in weights_a:
        torch.testing.assert_close(weights_a[name], weights_b[name], **REORDERED_FLOAT32)


# -- training ---------------------------------------------------------------------------------

def test_exact_resume_and_incompatible_checkpoint(tiny_model_dir, math_rows, tmp_path):
    from safetensors.torch import load_file

    from termforge.opsd.trainer import train

    train_rows, probe_rows = math_rows
    cfg = tiny_config(tiny_model_dir, lora_dropout=0.1)  # dropout: the torch RNG must be restored too
    whole = train(cfg, train_rows, tmp_path / "whole", probe_rows=probe_rows)
    assert whole["completed"] and whole["steps"] == 3

    first = train(cfg, train_rows, tmp_path / "resumed", probe_rows=probe_rows, stop_after_steps=2)
    assert not first["completed"] and first["steps"] == 2
    checkpoint = tmp_path / "resumed" / "checkpoints" / "step-000002"
    assert {p.name for p in checkpoint.iterdir()} == {"trainable.safetensors", "optimizer.pt", "scheduler.pt",
                                                      "rng.pt", "trainer_state.json"}
    assert read_json(checkpoint / "trainer_state.json")["data_position"] == 2 * cfg.prompts_per_step
    assert not (tmp_path / "resumed" / "adapter").exists()
    second = train(cfg, train_rows, tmp_path / "resumed", probe_rows=probe_rows)
    assert second["completed"] and second["resumed_from"].endswith("step-000002")

    a = load_file(str(tmp_path / "whole" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(bool(t.abs().sum() > 0) for k, t in a.items() if "lora_B" in k)  # it did train
    losses = lambda d: [r["loss"] for r in read_jsonl(tmp_path / d / "metrics.jsonl")]  # noqa: E731
    assert losses("whole") == losses("resumed") and len(losses("whole")) == 3
    assert read_json(tmp_path / "whole" / "kl_probe.json")["after"] == read_json(
        tmp_path / "resumed" / "kl_probe.json")["after"]
    for name in ("metrics.jsonl", "loss_curve.png", "kl_probe.json", "summary.json", "probe/completions.json"):
        assert (tmp_path / "whole" / name).is_file(), name
    assert (tmp_path / "whole" / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = read_jsonl(tmp_path / "whole" / "metrics.jsonl")[0]
    assert {"loss", "divergence", "divergence_mean", "forward_kl_mean", "clipped_fraction", "completion_len_mean",
            "tokens_per_s", "peak_memory_mb"} <= set(record)
    assert record["divergence"] == "forward_kl" and record["forward_kl_mean"] == record["divergence_mean"]

    changed = tiny_config(tiny_model_dir, lora_dropout=0.1, lora_r=8, beta=0.5)
    with pytest.raises(ConfigError, match=r"different config \(beta: checkpoint 0\.0 vs config 0\.5; "
                                          r"lora_r: checkpoint 4 vs config 8\)"):
        train(changed, train_rows, tmp_path / "resumed", probe_rows=probe_rows)
    # Operational keys may change between invocations.
    train(tiny_config(tiny_model_dir, lora_dropout=0.1, checkpoint_every=2, micro_batch_size=2), train_rows,
          tmp_path / "resumed", probe_rows=probe_rows)


def test_cli_entry_reads_the_workflow_files(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from termforge.mathdata import write_math_set
    from termforge.opsd.trainer import run_train_cli_args

    write_math_set(tmp_path / "math", n=12, seed=2, heldout_fraction=0.25)
    # No num_threads: torch gets the threads the workflow gave the job, not the machine's cores.
    options = tiny_config(tiny_model_dir, max_steps=2, checkpoint_every=0, num_threads=None).to_dict()
    monkeypatch.setenv("TERMFORGE_JOB_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        summary = run_train_cli_args(options, tmp_path / "run", dataset=str(tmp_path / "math" / "train.jsonl"),
                                     probe_dataset=str(tmp_path / "math" / "heldout.jsonl"))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert "train: 1 torch threads (the CPUs allotted" in capsys.readouterr().out
    assert summary["completed"] and summary["train_rows"] == 9 and summary["probe_rows"] == 2
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-000002"]
    assert read_json(tmp_path / "run" / "summary.json")["kl_probe"] == summary["kl_probe"]
    with pytest.raises(ConfigError, match=r"train\.dataset: data_kind math needs a dataset"):
        run_train_cli_args(options, tmp_path / "run2")


@pytest.mark.model
@pytest.mark.extended  # the gate: test_model_smollm2.py runs the real model, the tiny model trains here
def test_short_smollm2_training_lowers_heldout_kl(tmp_path):
    """The embedded default: SmolLM2-135M, LoRA, a few CPU steps on the offline math set."""
    from termforge.mathdata import make_math_set
    from termforge.opsd.trainer import train

    train_set, heldout = make_math_set(64, seed=0, heldout_fraction=0.25)
    cfg = OPSDConfig.from_dict({"num_threads": 1})
    summary = train(cfg, math_prompt_rows(train_set), tmp_path, probe_rows=math_prompt_rows(heldout))
    probe = read_json(tmp_path / "kl_probe.json")
    assert probe["before"] > 0 and probe["after"] < probe["before"], probe
    assert summary["kl_probe"] == {"before": probe["before"], "after": probe["after"]}
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == cfg.max_steps
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


DATA_PARALLEL_SCRIPT = '''
import sys, zlib
from termforge.mathdata import make_math_set
from termforge.opsd.config import OPSDConfig
from termforge.opsd.data import math_prompt_rows
from termforge.opsd.rollout import Trajectory
from termforge.opsd.trainer import train


def fixed_rollouts(trainer, rows, step):
    """Rollouts that depend only on the row, so one process and two see the same tokens."""
    out = []
    for row in rows:
        h = zlib.crc32(row.id.encode())
        n = 2 + h % 7
        prompt = [3] + [10 + (h >> k) % 500 for k in range(5)]
        reply = [600 + (h >> k) % 300 for k in range(n)]
        out.append(Trajectory(row.id, prompt + reply, [0] * len(prompt) + [1] * n,
                              [3, 7, 7] + prompt[1:] + reply, [0] * (len(prompt) + 2) + [1] * n))
    return out


cfg = OPSDConfig.from_dict({"model": sys.argv[1], "device": "cpu", "max_steps": 2, "prompts_per_step": 4,
                            "micro_batch_size": 1, "lora_r": 4, "lora_alpha": 8,
                            "lora_target_modules": ["q_proj", "v_proj"], "learning_rate": 1e-2, "probe_size": 0,
                            "num_threads": 1, "max_grad_norm": None})
train(cfg, math_prompt_rows(make_math_set(16, 1, 0.0)[0]), sys.argv[2], rollout_fn=fixed_rollouts)
'''


def test_two_process_data_parallel_matches_one_process(tiny_model_dir, tmp_path):
    """DDP over two CPU processes (gloo, as torchrun/accelerate launch start it) gives the update of
    one process: each process takes half the prompts, and the loss is normalised by the scored
    tokens of the whole step."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    script = tmp_path / "data_parallel_run.py"
    script.write_text(DATA_PARALLEL_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    single = subprocess.run([sys.executable, str(script), tiny_model_dir, str(tmp_path / "one")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert single.returncode == 0, single.stderr[-2000:]
    # --standalone: a local rendezvous on a free port, so parallel test runs cannot collide.
    double = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(script), tiny_model_dir, str(tmp_path / "two")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert double.returncode == 0, double.stderr[-2000:]
    one = load_file(str(tmp_path / "one" / "adapter" / "adapter_model.safetensors"))
    two = load_file(str(tmp_path / "two" / "adapter" / "adapter_model.safetensors"))
    assert one.keys() == two.keys()
    for key in one:
        torch.testing.assert_close(one[key], two[key], **REORDERED_FLOAT32)
    metrics_one = read_jsonl(tmp_path / "one" / "metrics.jsonl")
    metrics_two = read_jsonl(tmp_path / "two" / "metrics.jsonl")
    assert len(metrics_two) == 2  # written once, by the main process
    for a, b in zip(metrics_one, metrics_two):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert (a["sequences"], a["completion_tokens"], a["completion_len_max"]) == (
            b["sequences"], b["completion_tokens"], b["completion_len_max"])
