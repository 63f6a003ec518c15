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
import yaml

from termforge.errors import ConfigError, TermforgeError
from termforge.opsd.config import OPSDConfig

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

# The tiny random Llama (SmolLM2's tokenizer) and the helpers of the trainer tests.
from conftest import termforge_lines, ulps_of  # noqa: E402
from test_opsd_trainer import _cut_completion, _tiny_trainer, math_rows, smol_tokenizer, tiny_model_dir  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_OVERLAY = ROOT / "configs" / "opsd-reference.yaml"


# -- the workflow passes the configured dataset -------------------------------------------------

def _snakemake_dry_run(tmp_path: Path, *overlays: Path, targets: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`snakemake -n -p [targets] --configfile config.yaml [overlays]` of the real Snakefile, as
    documented, in a scratch folder."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    configfiles = [str(ROOT / "config.yaml"), *map(str, overlays)]
    # The targets go first: --configfile takes several values and would swallow them.
    return subprocess.run([sys.executable, "-m", "snakemake", *targets, "-n", "-p", "-s", str(ROOT / "Snakefile"),
                           "--directory", str(work), "--configfile", *configfiles],
                          capture_output=True, text=True)


def _dry_run(tmp_path: Path, *overlays: Path, targets: tuple[str, ...]) -> dict[str, list[str]]:
    """{ablation: argv of its planned `termforge train`}."""
    res = _snakemake_dry_run(tmp_path, *overlays, targets=targets)
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
    assert res.returncode == 2, res.stderr
    lines = termforge_lines(res.stderr)
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
            # The step ran two replies in one padded batch, the reference one at a time: the same
            # sums in another order (conftest.REORDERED_LOGITS), then backpropagated through the
            # 1/(9*2) weights; 1e-4 relative covers that, 1e-7 the gradients that are ~0.
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
        expected = 0.9 * after_first[n] + 0.1 * after_second[n]
        torch.testing.assert_close(e, expected, atol=ulps_of(expected), rtol=0)  # lerp vs a*x + b*y
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


def _trace_table(path: Path, answers: list[tuple[str, int | None]], answer_column: str = "Answer") -> Path:
    """A parquet table with siyanzhao/Openthoughts_math_30k_opsd's columns as the reference code reads
    them: problem, solution (zhaoruizhi/OPSD-main data_collator.py:87-88), Answer (grpo_train.py:130,
    on the same set) and generated_token_count (eval/quick_opsd_common.py:258-259)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([
        {"problem": f"problem {i}", "solution": f"worked solution {i}", answer_column: a, "generated_token_count": n}
        for i, (a, n) in enumerate(answers)]), path)
    return path


def test_trace_filter_on_a_table_with_the_datasets_columns(tmp_path, capsys):
    """Every answer form of tests/test_mathdata.py (labelled by hand: kept when the stored string,
    whitespace-stripped, is an optional minus sign and 1 to 6 digits) with a reference generation length each: 2,500
    tokens, except three kept answers at 1,999 tokens (dropped), exactly 2,000 (kept) and no count
    (dropped)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from test_mathdata import TRACE_ANSWER_FORMS

    from termforge.opsd.data import load_math_rows

    counts = {"7": 1999, "42": 2000, "-3": None}
    table = [(a, counts.get(a, 2500)) for a, _ in TRACE_ANSWER_FORMS]
    expected = [f"row-{i}" for i, (a, keep) in enumerate(TRACE_ANSWER_FORMS) if keep and a not in ("7", "-3")]
    assert len(table) == 36 and len(expected) == 13
    data = _trace_table(tmp_path / "train.parquet", table)
    rows = load_math_rows(_trace_config(dataset=str(data)))
    assert [r.id for r in rows] == expected
    out = capsys.readouterr().out
    assert (r"train: kept 13 of 36 rows (dropped 21 with an answer not matching -?\d{1,6}, "
            "2 with a reference generation under 2000 tokens)") in out
    # Either filter alone keeps more: the recipe is their conjunction.
    assert len(load_math_rows(_trace_config(dataset=str(data), min_generated_tokens=0))) == 15
    assert len(load_math_rows(_trace_config(dataset=str(data), answer_filter=False))) == 36 - 2
    # The anchor (the reference overlay) trains on every row, empty answer included, as the reference.
    reference = OPSDConfig.from_dict({**yaml.safe_load(REFERENCE_OVERLAY.read_text())["train"], "dataset": str(data)})
    assert len(load_math_rows(reference)) == 36
    assert "kept 36 of 36 rows (no filter on)" in capsys.readouterr().out
    # A set without the length column is named, not silently unfiltered.
    pq.write_table(pa.Table.from_pylist([{"problem": "p", "solution": "s", "Answer": "1"}]), tmp_path / "bare.parquet")
    with pytest.raises(TermforgeError, match=r"train\.generated_tokens_column: dataset .* has no column "
                                        r"'generated_token_count'"):
        load_math_rows(_trace_config(dataset=str(tmp_path / "bare.parquet")))
    with pytest.raises(ConfigError, match=r"train\.answer_pattern: not a valid regular expression"):
        OPSDConfig.from_dict({"answer_pattern": "-?(\\d{1,6}"})


def test_answer_column_missing_is_one_line_listing_the_columns(tmp_path):
    """A set whose answer column is not the configured one (here `answer` where the trace reads
    `Answer`) stops before any model is loaded, with one line naming the key and listing the set's
    columns."""
    defaults = OPSDConfig()
    assert (defaults.problem_column, defaults.solution_column, defaults.answer_column,
            defaults.generated_tokens_column) == ("problem", "solution", "Answer", "generated_token_count")
    data = _trace_table(tmp_path / "lower.parquet", [("42", 2500)], answer_column="answer")
    params = json.dumps({"train": {**_trace_config().to_dict(), "dataset": str(data)}})
    res = subprocess.run([sys.executable, "-m", "termforge.cli", "train", "--params", params,
                          "--out-dir", str(tmp_path / "run")], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert termforge_lines(res.stderr) == [
        f"termforge: error: train.answer_column: dataset {data} has no column 'Answer' "
        "(columns: problem, solution, answer, generated_token_count)"], res.stderr
    # With the column named, it trains on that set (the filter reads it).
    from termforge.opsd.data import load_math_rows

    assert len(load_math_rows(_trace_config(dataset=str(data), answer_column="answer"))) == 1


def test_trace_schedule_is_linear_from_the_configured_peak():
    from termforge.opsd.trainer import lr_lambda_for

    cfg = _trace_config()
    lrs = [cfg.learning_rate * lr_lambda_for(cfg)(step) for step in range(cfg.max_steps)]
    assert lrs[0] == pytest.approx(1e-5) and lrs[50] == pytest.approx(5e-6) and lrs[99] == pytest.approx(1e-7)
    assert all(a > b for a, b in zip(lrs, lrs[1:]))
    assert sum(lrs) / len(lrs) == pytest.approx(5.05e-6)  # the anchor's constant 5e-6, to 1%


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("warmup", [0, 1, 7])
def test_schedule_is_transformers_schedule(kind, warmup):
    """lr_lambda_for against transformers' own schedules (the reference trains with the transformers
    Trainer): warmup rises as step / warmup, so step 0 trains at lr 0."""
    from transformers import (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                              get_linear_schedule_with_warmup)

    from termforge.opsd.trainer import lr_lambda_for

    cfg = OPSDConfig.from_dict({"lr_scheduler": kind, "warmup_steps": warmup, "max_steps": 20})
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    schedule = {"constant": lambda: get_constant_schedule_with_warmup(optimizer, warmup),
                "linear": lambda: get_linear_schedule_with_warmup(optimizer, warmup, 20),
                "cosine": lambda: get_cosine_schedule_with_warmup(optimizer, warmup, 20)}[kind]()
    ours = lr_lambda_for(cfg)
    for step in range(20):
        assert ours(step) == pytest.approx(schedule.get_last_lr()[0], abs=1e-12), step
        optimizer.step()
        schedule.step()
    if warmup:
        assert ours(0) == 0.0


# -- prompts keep the data's whitespace ---------------------------------------------------------

def test_templates_render_problem_and_solution_with_their_whitespace():
    """The reference puts the dataset's strings into its f-strings as they are (data_collator.py:87-91
    and build_reference_teacher_user_message): a solution that starts or ends with whitespace reaches
    the teacher with it."""
    from termforge.opsd.data import math_prompt_rows, teacher_messages
    from termforge.opsd.rollout import prompt_token_ids

    tokenizer = _smol_tokenizer()
    row = {"id": "w", "problem": "  What is 6 * 7?\n", "solution": "\n\n  6 * 7 = 42, so \\boxed{42}.  \n\t\n",
           "answer": "42"}
    custom = {"student_template": "Problem: {problem}\n\nbox it: \\boxed{{}}",
              "teacher_template": "Problem: {problem}\n\n=== Begin ===\n{solution}\n=== End ===\n\nagain, alone."}
    for values in ({"prompt_preset": "reference"}, custom):
        cfg = OPSDConfig.from_dict(values)
        prompt = math_prompt_rows([row], cfg)[0]
        student_text = cfg.effective_student_template.format(problem=row["problem"])
        teacher_text = cfg.effective_teacher_template.format(problem=row["problem"], solution=row["solution"])
        assert row["solution"] in teacher_text and row["problem"] in student_text
        for messages, text in ((prompt.messages(), student_text), (teacher_messages(prompt, cfg), teacher_text)):
            assert messages == [{"role": "user", "content": text}]
            expected = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                     add_generation_prompt=True)
            assert prompt_token_ids(tokenizer, messages, None) == tokenizer(expected, add_special_tokens=False)["input_ids"]


def _planned_jobs(res: subprocess.CompletedProcess) -> dict[str, list[str]]:
    """{rule: [the wildcards.model of each planned job]} from a dry run's job listing."""
    jobs: dict[str, list[str]] = {}
    rule = None
    for line in res.stdout.splitlines():
        match = re.match(r"(?:local)?rule (\w+):", line.strip())
        if match:
            rule = match.group(1)
            jobs.setdefault(rule, [])
        match = re.match(r"wildcards: model=(\S+)", line.strip())
        if match and rule:
            jobs[rule].append(match.group(1))
    return jobs


def test_trace_overlay_plans_the_anchor_and_the_trace_recipe(tmp_path):
    """The documented command plans exactly the anchor and the trace recipe (not config.yaml's jsd
    and terminal ablations), and every planned job's params validate as the jobs will when they start."""
    from termforge.models.base import SamplingParams

    res = _snakemake_dry_run(tmp_path, REFERENCE_OVERLAY, TRACE_OVERLAY)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _planned_jobs(res)
    assert sorted(jobs["train_opsd"]) == ["fkl", "trace_best"]
    assert sorted(jobs["eval_aime"]) == sorted(jobs["eval_tbench"]) == ["base", "fkl", "trace_best"]
    planned = {}
    for line in (res.stdout + res.stderr).splitlines():
        line = line.strip()
        for command in (" -m termforge.cli train ", "termforge eval-aime ", "termforge eval-tbench "):
            if command in line:
                argv = shlex.split(line.split(" 2>&1")[0])
                argv = argv[next(i for i, a in enumerate(argv) if a in ("train", "eval-aime", "eval-tbench")):]
                name = argv[argv.index("--model-name") + 1] if "--model-name" in argv else \
                    argv[argv.index("--out-dir") + 1].split("/")[2]
                planned[(argv[0], name)] = json.loads(argv[argv.index("--params") + 1])
    assert len(planned) == 2 + 3 + 3
    for (command, name), params in planned.items():
        if command == "train":
            OPSDConfig.from_dict(params["train"])  # what `termforge train` does first
        else:
            section = params["eval.aime" if command == "eval-aime" else "eval.tbench"]
            SamplingParams.from_dict({**section["sampling"], "seed": params["seed"]})
    anchor, best = planned[("train", "fkl")]["train"], planned[("train", "trace_best")]["train"]
    for params in (anchor, best):
        assert params["dataset"] == "siyanzhao/Openthoughts_math_30k_opsd"
        assert params["model"] == "Qwen/Qwen3-1.7B" and params["prompt_preset"] == "reference"
        assert params["answer_column"] == "Answer" and params["answer_pattern"] == r"-?\d{1,6}"
    assert (anchor["answer_filter"], anchor["min_generated_tokens"], anchor["lr_scheduler"],
            anchor["learning_rate"], anchor["drop_empty_answers"]) == (False, 0, "constant", 5e-6, False)
    assert (best["answer_filter"], best["min_generated_tokens"], best["generated_tokens_column"],
            best["lr_scheduler"], best["learning_rate"]) == (True, 2000, "generated_token_count", "linear", 1e-5)
    # Nothing else differs between the two.
    assert {k for k in anchor if anchor[k] != best[k]} == {"answer_filter", "min_generated_tokens", "lr_scheduler",
                                                           "learning_rate"}
    # The reference overlay alone plans the anchor alone.
    assert _planned_jobs(_snakemake_dry_run(tmp_path, REFERENCE_OVERLAY))["train_opsd"] == ["fkl"]


def test_an_ablation_that_cannot_start_stops_the_dry_run_naming_it(tmp_path):
    """Without ablations_only, config.yaml's terminal ablation inherits the reference overlay's math
    prompt preset: the dry run stops with one line naming the ablation and the key, as its job would."""
    reopen = tmp_path / "all-ablations.yaml"
    reopen.write_text("ablations_only: null\n")
    res = _snakemake_dry_run(tmp_path, REFERENCE_OVERLAY, TRACE_OVERLAY, reopen)
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("termforge")]
    assert errors == ["termforge: config error: ablations.terminal: train.prompt_preset: the reference preset holds "
                      "math prompts (a reference solution); a terminal run sets train.teacher_template with {hint}"]
    assert "Traceback" not in res.stderr and "rule train_opsd" not in res.stdout
