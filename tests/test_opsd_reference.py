"""The reference OPSD recipe as the workflow runs it (issue 13): the configured dataset, the
prompt preset, the reference's token weighting, the EMA teacher's timing, metric names and the
tuning trace's data filter and schedule.

The reference is siyan-zhao/OPSD and its fork zhaoruizhi/OPSD-main; file:line citations below
point into the fork unless they say otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from termforge.errors import ConfigError, TermforgeError
from termforge.opsd.config import OPSDConfig

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

# The tiny random Llama (SmolLM2's tokenizer) and the helpers of the trainer tests.
from test_opsd_trainer import _cut_completion, _tiny_trainer, math_rows, smol_tokenizer, tiny_model_dir  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_OVERLAY = ROOT / "configs" / "opsd-reference.yaml"


# -- the workflow passes the configured dataset -------------------------------------------------

def _dry_run(tmp_path: Path, *overlays: Path, targets: tuple[str, ...]) -> dict[str, list[str]]:
    """`snakemake -n -p` of the real Snakefile: {ablation: argv of its planned `termforge train`}."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    configfiles = [str(ROOT / "config.yaml"), *map(str, overlays)]
    # The targets go first: --configfile takes several values and would swallow them.
    res = subprocess.run([sys.executable, "-m", "snakemake", *targets, "-n", "-p", "-s", str(ROOT / "Snakefile"),
                          "--directory", str(work), "--configfile", *configfiles],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    commands = {}
    for line in (res.stdout + res.stderr).splitlines():
        line = line.strip().removeprefix("Shell command:").strip()
        if " -m termforge.cli train " in line:  # the launcher (python, torchrun) runs the train command
            argv = shlex.split(line.split(" 2>&1")[0])
            argv = argv[argv.index("train"):]
            out_dir = argv[argv.index("--out-dir") + 1]
            commands[out_dir.split("/")[2]] = argv
    return commands


def _params(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--params") + 1])["train"]


def test_workflow_trains_on_the_dataset_the_overlay_names(tmp_path):
    targets = ("results/runs/fkl/train/summary.json",)
    reference = _dry_run(tmp_path, REFERENCE_OVERLAY, targets=targets)["fkl"]
    # The Hub set named by the overlay reaches the trainer, and no offline file overrides it.
    assert _params(reference)["dataset"] == "siyanzhao/Openthoughts_math_30k_opsd"
    assert "--dataset" not in reference and "--probe-dataset" not in reference
    # Without a configured dataset (the embedded default) the offline math set is the data.
    default = _dry_run(tmp_path, targets=targets)["fkl"]
    assert _params(default)["dataset"] is None
    assert default[default.index("--dataset") + 1] == "results/data/math/train.jsonl"
    assert default[default.index("--probe-dataset") + 1] == "results/data/math/heldout.jsonl"


def test_unloadable_hub_dataset_stops_with_one_line_naming_the_key(tmp_path):
    """Offline, a Hub set that is not cached is an error naming train.dataset, not a switch to
    other data."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    params = json.dumps({"train": {"dataset": "siyanzhao/Openthoughts_math_30k_opsd"}})
    res = subprocess.run([sys.executable, "-m", "termforge.cli", "train", "--params", params,
                          "--out-dir", str(tmp_path / "run")], capture_output=True, text=True, env=env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert re.match(r"termforge: error: train\.dataset: dataset siyanzhao/Openthoughts_math_30k_opsd .*"
                    r"could not be loaded", lines[0])
    assert not (tmp_path / "run" / "summary.json").exists()


# -- prompts ------------------------------------------------------------------------------------

def _smol_tokenizer():
    from transformers import AutoTokenizer

    from termforge.models.transformers_backend import DEFAULT_MODEL, embedded_gguf_path

    gguf = embedded_gguf_path(DEFAULT_MODEL)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)


MATH_ROW = {"id": "r1", "problem": "What is 6 * 7?", "solution": "6 * 7 = 42, so the answer is \\boxed{42}.",
            "answer": "42"}


def test_reference_preset_has_the_reference_parts_in_the_reference_order():
    """zhaoruizhi/OPSD-main data_collator.py:91 (student: "Problem:" + problem, then the
    step-by-step / \\boxed{} instruction, one user message) and :232-239 (teacher: "Problem:" +
    problem, the solution between "Reference Solution Begin/End" markers, the transition_prompt of
    :59-65 asking to understand it and derive the answer independently without copying it, then
    the same step-by-step / \\boxed{} instruction, one user message)."""
    from termforge.opsd.data import math_prompt_rows, teacher_messages

    cfg = OPSDConfig.from_dict({"prompt_preset": "reference"})
    row = math_prompt_rows([MATH_ROW], cfg)[0]
    student = row.messages()
    teacher = teacher_messages(row, cfg)
    assert [m["role"] for m in student] == [m["role"] for m in teacher] == ["user"]
    s, t = student[0]["content"], teacher[0]["content"]
    boxed = "Reason through it one step at a time and write the final answer inside \\boxed{}."
    assert s == f"Problem: {MATH_ROW['problem']}\n\n{boxed}"
    parts = [f"Problem: {MATH_ROW['problem']}", "--- BEGIN REFERENCE SOLUTION ---", MATH_ROW["solution"],
             "--- END REFERENCE SOLUTION ---", "do not reuse or reword it", "in your own words", boxed]
    positions = [t.index(p) for p in parts]
    assert positions == sorted(positions) and positions[0] == 0 and t.endswith(boxed)
    assert MATH_ROW["solution"] not in s  # the student never sees the privileged context
    # The reference overlay uses the preset.
    import yaml

    overlay = OPSDConfig.from_dict(yaml.safe_load(REFERENCE_OVERLAY.read_text())["train"])
    assert overlay.effective_student_template == cfg.effective_student_template
    assert overlay.effective_teacher_template == cfg.effective_teacher_template


def test_templates_set_in_config_are_rendered_exactly_token_for_token():
    from termforge.opsd.data import math_prompt_rows, teacher_messages
    from termforge.opsd.rollout import prompt_token_ids

    tokenizer = _smol_tokenizer()
    cfg = OPSDConfig.from_dict({
        "student_template": "Q>> {problem}\n\nbox it: \\boxed{{}}",
        "teacher_template": "[[{solution}]]\n{problem} -- again, alone.",
    })
    row = math_prompt_rows([MATH_ROW], cfg)[0]
    student_text = f"Q>> {MATH_ROW['problem']}\n\nbox it: \\boxed{{}}"
    teacher_text = f"[[{MATH_ROW['solution']}]]\n{MATH_ROW['problem']} -- again, alone."
    for messages, text in ((row.messages(), student_text), (teacher_messages(row, cfg), teacher_text)):
        assert messages == [{"role": "user", "content": text}]
        expected = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        assert prompt_token_ids(tokenizer, messages, None) == tokenizer(expected, add_special_tokens=False)["input_ids"]
    # Without templates (the embedded default) the prompts are termforge's own, as before.
    default = math_prompt_rows([MATH_ROW], OPSDConfig())[0]
    assert default.messages() == math_prompt_rows([MATH_ROW])[0].messages()
    assert teacher_messages(default, OPSDConfig())[0]["content"].startswith("Below is a problem together with")


def test_terminal_template_keeps_the_harness_system_turn_and_renders_the_hint():
    from termforge.opsd.data import PromptRow, teacher_messages

    row = PromptRow("t1", ({"role": "system", "content": "SYS"}, {"role": "user", "content": "Do X."}),
                    "Look in /etc first.", "terminal", problem="Do X.")
    cfg = OPSDConfig.from_dict({"data_kind": "terminal", "teacher_template": "{problem}\n\nHint: {hint}"})
    assert teacher_messages(row, cfg) == [{"role": "system", "content": "SYS"},
                                          {"role": "user", "content": "Do X.\n\nHint: Look in /etc first."}]


@pytest.mark.parametrize("values, message", [
    ({"student_template": "no placeholder"}, r"train\.student_template: must contain the placeholder \{problem\}"),
    ({"teacher_template": "{problem} only"}, r"train\.teacher_template: must contain the placeholder \{solution\}"),
    ({"teacher_template": "{problem} {solution} \\boxed{}"}, r"train\.teacher_template: not a valid template"),
    ({"data_kind": "terminal", "teacher_template": "{problem} {solution}"},
     r"train\.teacher_template: must contain the placeholder \{hint\}"),
    ({"data_kind": "terminal", "prompt_preset": "reference"}, r"train\.prompt_preset: the reference preset"),
])
def test_bad_templates_are_named(values, message):
    with pytest.raises(ConfigError, match=message):
        OPSDConfig.from_dict(values)


# -- token weighting ----------------------------------------------------------------------------

def test_micro_batch_loss_scale_hand_computed_for_two_processes():
    """The reference: generalized_jsd_loss divides a micro-batch's summed terms by its scored
    tokens (opsd_trainer.py:481-482, `batchmean`), the transformers Trainer divides each
    micro-batch's loss by gradient_accumulation_steps (compute_loss takes no num_items_in_batch:
    opsd_trainer.py:635), and DDP averages over processes. Two processes, two micro-batches each,
    with 5 + 2 and 4 + 4 scored tokens: a token's weight is 1 / (N_m * 2 * 2)."""
    from termforge.opsd.trainer import micro_batch_loss_scale

    processes = [[5, 2], [4, 4]]
    reference_weights = [[1 / 20, 1 / 8], [1 / 16, 1 / 16]]
    for micro, weights in zip(processes, reference_weights):
        for tokens, weight in zip(micro, weights):
            # DDP divides each process's gradient by the process count.
            assert micro_batch_loss_scale("micro_batch_mean", tokens, 2, 15, 2) / 2 == pytest.approx(weight)
            assert micro_batch_loss_scale("token_mean", tokens, 2, 15, 2) / 2 == pytest.approx(1 / 15)
    assert micro_batch_loss_scale("micro_batch_mean", 0, 2, 15, 2) == 0.0


def test_micro_batch_mean_step_gives_the_reference_per_token_weights(tiny_model_dir, math_rows):
    """One step, micro_batch_size 2, replies cut to 6, 3 and 1 scored tokens: micro-batches of
    9 and 1 tokens. Reference weights: 1/(9*2) for each token of the first, 1/(1*2) for the
    last; token_mean: 1/10 each. The step's loss and gradient are checked against those weights
    applied to each reply's own summed loss and gradient."""
    from termforge.opsd.loss import generalized_jsd_token_loss
    from termforge.opsd.rollout import collate

    rows = math_rows[0][:3]
    for reduction, weights in (("micro_batch_mean", [1 / 18, 1 / 18, 1 / 2]), ("token_mean", [1 / 10] * 3)):
        trainer, _ = _tiny_trainer(tiny_model_dir, micro_batch_size=2, max_grad_norm=None, loss_reduction=reduction)
        cfg = trainer.cfg
        trajectories = [_cut_completion(t, keep) for t, keep in zip(trainer.rollouts(rows, 0), (6, 3, 1))]
        sums, grads = [], []
        for trajectory in trajectories:
            trainer.optimizer.zero_grad(set_to_none=True)
            student_side, teacher_side = collate([trajectory], trainer.pad_id)
            loss_sum, stats = generalized_jsd_token_loss(
                trainer.student_logits(student_side), trainer.teacher_logits(teacher_side), student_side.token_mask,
                beta=cfg.beta, temperature=trainer.temperature, token_clip=cfg.token_clip,
                chunk_size=cfg.loss_chunk_size, reduction="sum")
            loss_sum.backward()
            sums.append(float(loss_sum.detach()))
            grads.append({n: p.grad.clone() for n, p in trainer.trainable if p.grad is not None})
        trainer.optimizer.zero_grad(set_to_none=True)
        captured = {}
        trainer.optimizer.register_step_pre_hook(lambda *_: captured.update(
            {n: p.grad.clone() for n, p in trainer.trainable if p.grad is not None}))
        record = trainer.train_step(0, rows, rollout_fn=lambda *_: trajectories)
        assert record["loss"] == pytest.approx(sum(w * s for w, s in zip(weights, sums)), rel=1e-5)
        assert set(captured) == set(grads[0]) and captured
        for name, grad in captured.items():
            expected = sum(w * g[name] for w, g in zip(weights, grads))
            torch.testing.assert_close(grad, expected, atol=1e-7, rtol=1e-4)


def test_micro_batch_size_is_part_of_the_objective_under_micro_batch_mean():
    from termforge.opsd.config import incompatible_keys

    a = OPSDConfig.from_dict({"micro_batch_size": 4}).to_dict()
    b = OPSDConfig.from_dict({"micro_batch_size": 2}).to_dict()
    assert incompatible_keys(a, b) == []
    a["loss_reduction"] = b["loss_reduction"] = "micro_batch_mean"
    assert incompatible_keys(a, b) == ["micro_batch_size"]


# -- EMA teacher --------------------------------------------------------------------------------

def test_ema_teacher_timing_and_decay_follow_the_reference(tiny_model_dir, math_rows, tmp_path):
    """zhaoruizhi/OPSD-main: ema_decay defaults to 0.999 (opsd_train.py:94-95, opsd_trainer.py:145;
    siyan-zhao/OPSD scripts/run_opsd_ema.sh:35); the update runs after each optimizer step
    (EMAUpdateCallback.on_step_end, opsd_trainer.py:91-94); its first call only snapshots the
    weights (opsd_trainer.py:540-553) and before that the teacher is the current weights
    (_ema_teacher_context, opsd_trainer.py:580-582)."""
    from termforge.opsd.rollout import collate

    assert OPSDConfig().ema_decay == 0.999
    rows = math_rows[0][:2]
    trainer, _ = _tiny_trainer(tiny_model_dir, teacher_mode="ema", ema_decay=0.9, max_grad_norm=None)
    trajectories = trainer.rollouts(rows, 0)
    _, teacher_side = collate(trajectories[:1], trainer.pad_id)
    assert trainer.ema is None
    # Step 1's teacher is the current weights (the live student given the privileged context).
    assert torch.equal(trainer.teacher_logits(teacher_side), trainer.student_logits(teacher_side, grad=False))
    trainer.train_step(0, rows, rollout_fn=lambda *_: trajectories)
    after_first = {n: p.detach().clone() for n, p in trainer.trainable}
    assert all(torch.equal(e, after_first[n]) for e, (n, _) in zip(trainer.ema, trainer.trainable))
    trainer.train_step(1, rows, rollout_fn=lambda *_: trajectories)
    after_second = {n: p.detach().clone() for n, p in trainer.trainable}
    assert any(not torch.equal(after_first[n], after_second[n]) for n in after_first)
    for e, (n, _) in zip(trainer.ema, trainer.trainable):
        torch.testing.assert_close(e, 0.9 * after_first[n] + 0.1 * after_second[n], atol=1e-7, rtol=1e-6)
    # A checkpoint carries the started average into a fresh trainer.
    checkpoint = trainer.save_checkpoint(tmp_path / "checkpoints", 2, 4)
    resumed, _ = _tiny_trainer(tiny_model_dir, teacher_mode="ema", ema_decay=0.9, max_grad_norm=None)
    resumed.load_checkpoint(checkpoint)
    assert all(torch.equal(a, b) for a, b in zip(resumed.ema, trainer.ema))
    assert torch.equal(resumed.teacher_logits(teacher_side), trainer.teacher_logits(teacher_side))


# -- metric names -------------------------------------------------------------------------------

def test_divergence_names_follow_beta_and_loss_type():
    from termforge.opsd.loss import divergence_name

    assert [divergence_name("full_vocab", b) for b in (0.0, 0.25, 0.5, 1.0)] == [
        "forward_kl", "jsd", "jsd", "reverse_kl"]
    assert divergence_name("sampled_token", 0.0) == "sampled_reverse_kl"


def test_a_jsd_step_is_not_logged_as_a_kl(tiny_model_dir, math_rows):
    trainer, _ = _tiny_trainer(tiny_model_dir, beta=0.5)
    rows = math_rows[0][:2]
    record = trainer.train_step(0, rows)
    assert record["divergence"] == "jsd" and record["jsd_mean"] == record["divergence_mean"] > 0
    assert not any(key.endswith("kl_mean") for key in record)


# -- the tuning trace's recipe ------------------------------------------------------------------

TRACE_OVERLAY = ROOT / "configs" / "ablations" / "trace-best.yaml"


def _trace_config(**extra) -> OPSDConfig:
    import yaml

    from termforge.config import deep_merge

    train = deep_merge(yaml.safe_load(REFERENCE_OVERLAY.read_text())["train"],
                       yaml.safe_load(TRACE_OVERLAY.read_text())["ablations"]["trace_best"]["train"])
    return OPSDConfig.from_dict({**train, **extra})


def test_trace_filter_on_a_table_with_the_datasets_columns(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from termforge.opsd.data import load_math_rows

    # siyanzhao/Openthoughts_math_30k_opsd's columns: problem, solution, answer, generated_token_count.
    table = [
        ("123456", 2500),   # 6 digits, long generation: kept
        ("1234567", 2500),  # 7 digits: dropped
        ("-042", 2000),     # 2 digits after normalising, exactly 2,000 tokens: kept
        ("\\frac{1}{2}", 4000),  # not an integer: dropped
        ("17", 1999),       # one token short: dropped
        ("17", None),       # no count: dropped
        ("1,000", 3000),    # 4 digits: kept
    ]
    data = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"problem": f"problem {i}", "solution": f"... so \\boxed{{{a}}}", "answer": a, "generated_token_count": n}
        for i, (a, n) in enumerate(table)]), data)
    rows = load_math_rows(_trace_config(dataset=str(data)))
    assert [r.id for r in rows] == ["row-0", "row-2", "row-6"]
    out = capsys.readouterr().out
    assert "kept 3 of 7 rows" in out and "1 with a non-integer answer" in out
    assert "1 with an answer over 6 digits" in out and "2 with a reference generation under 2000 tokens" in out
    # Either filter alone keeps more: the recipe is their conjunction.
    assert len(load_math_rows(_trace_config(dataset=str(data), min_generated_tokens=0))) == 5
    assert len(load_math_rows(_trace_config(dataset=str(data), max_answer_digits=None))) == 4
    # A set without the length column is named, not silently unfiltered.
    pq.write_table(pa.Table.from_pylist([{"problem": "p", "solution": "s", "answer": "1"}]), tmp_path / "bare.parquet")
    with pytest.raises(TermforgeError, match=r"train\.generated_tokens_column: dataset .* has no column "
                                        r"'generated_token_count'"):
        load_math_rows(_trace_config(dataset=str(tmp_path / "bare.parquet")))
    with pytest.raises(ConfigError, match=r"train\.max_answer_digits: .*integer_answer_only"):
        OPSDConfig.from_dict({"max_answer_digits": 6})


def test_trace_schedule_is_linear_from_the_configured_peak():
    from termforge.opsd.trainer import lr_lambda_for

    cfg = _trace_config()
    lrs = [cfg.learning_rate * lr_lambda_for(cfg)(step) for step in range(cfg.max_steps)]
    assert lrs[0] == pytest.approx(1e-5) and lrs[50] == pytest.approx(5e-6) and lrs[99] == pytest.approx(1e-7)
    assert all(a > b for a, b in zip(lrs, lrs[1:]))
    assert sum(lrs) / len(lrs) == pytest.approx(5.05e-6)  # the anchor's constant 5e-6, to 1%


def test_trace_overlay_plans_the_anchor_and_the_trace_recipe(tmp_path):
    targets = ("results/runs/fkl/train/summary.json", "results/runs/trace_best/train/summary.json")
    planned = _dry_run(tmp_path, REFERENCE_OVERLAY, TRACE_OVERLAY, targets=targets)
    anchor, best = _params(planned["fkl"]), _params(planned["trace_best"])
    for params, argv in ((anchor, planned["fkl"]), (best, planned["trace_best"])):
        assert params["dataset"] == "siyanzhao/Openthoughts_math_30k_opsd" and "--dataset" not in argv
        assert params["model"] == "Qwen/Qwen3-1.7B" and params["prompt_preset"] == "reference"
    assert (anchor["integer_answer_only"], anchor["max_answer_digits"], anchor["min_generated_tokens"],
            anchor["lr_scheduler"], anchor["learning_rate"]) == (False, None, 0, "constant", 5e-6)
    assert (best["integer_answer_only"], best["max_answer_digits"], best["min_generated_tokens"],
            best["generated_tokens_column"], best["lr_scheduler"], best["learning_rate"]) == (
        True, 6, 2000, "generated_token_count", "linear", 1e-5)
    # Nothing else differs between the two.
    changed = {k for k in anchor if anchor[k] != best[k]}
    assert changed == {"integer_answer_only", "max_answer_digits", "min_generated_tokens", "lr_scheduler",
                       "learning_rate"}
