"""Terminal training (opsd/terminal_train.py) on a tiny random model and real tasks in bwrap:
the hint reaches the teacher's view only, mixed-batch composition, the calibrated GRPO pool,
GRPO groups with signal change the weights, and a kill -9 mid-run resumes to the same weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from conftest import REORDERED_FLOAT32, built_family_tasks, needs_bwrap, save_tiny_llama, smollm2_tokenizer  # noqa: E402
from termforge.errors import ConfigError  # noqa: E402
from termforge.harness import SUBMIT_MARKER  # noqa: E402
from termforge.hints import procedural_hint  # noqa: E402
from termforge.io import atomic_write_json, read_json, read_jsonl  # noqa: E402
from termforge.opsd.config import OPSDConfig  # noqa: E402
from termforge.opsd.terminal import Sample  # noqa: E402
from termforge.opsd.terminal_train import TerminalRun, calibrated_pool, load_terminal_tasks  # noqa: E402

FAMILIES = ("log_level_filter", "account_audit", "shell_script_fix")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer Llama with random weights and SmolLM2's tokenizer; room for long episodes."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-terminal"), smollm2_tokenizer(), max_positions=4096)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three kept tasks, built; the first two have a hint, the third is reward-only; a passk.json
    where only the second task lies inside the default band."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("terminal-train")
    tasks = built_family_tasks(root, FAMILIES)
    hints = [procedural_hint(tasks[0]), procedural_hint(tasks[1]), ""]
    # As the hints stage writes it: hinted tasks only; the corpus manifest lists every kept task.
    pq.write_table(pa.table({"task_id": [t.name for t in tasks[:2]], "demo": hints[:2]}), root / "demos.parquet")
    atomic_write_json(root / "corpus.json", {"tasks_dir": str(root / "tasks"), "kept": [t.name for t in tasks]})
    atomic_write_json(root / "passk.json", {"tasks": 3, "overall": {}, "per_task": [
        {"task_id": tasks[0].name, "n": 2, "c": 0}, {"task_id": tasks[1].name, "n": 2, "c": 1},
        {"task_id": tasks[2].name, "n": 2, "c": 2}]})
    return root, tasks, hints


def terminal_config(model_dir, root, **overrides) -> OPSDConfig:
    values = dict(model=model_dir, device="cpu", num_threads=1, data_kind="terminal", objective="mixed",
                  demos=str(root / "demos.parquet"), corpus=str(root / "corpus.json"), tasks_dir=str(root / "tasks"),
                  images_dir=str(root / "images"),
                  passk=str(root / "passk.json"), max_steps=2, prompts_per_step=1, group_size=2, max_new_tokens=8,
                  max_episode_tokens=700, episode_turn_cap=2, micro_batch_size=2, lora_r=4, lora_alpha=8.0,
                  lora_target_modules=["q_proj", "v_proj"], learning_rate=1e-2, probe_size=0, checkpoint_every=1,
                  seed=5, sandbox_wall_sec=60, sandbox_cpu_sec=60)
    values.update(overrides)
    return OPSDConfig.from_dict(values)


def test_objective_needs_terminal_data_and_kl_needs_fixed_teacher():
    with pytest.raises(ConfigError, match=r"train\.objective: grpo .* needs data_kind terminal"):
        OPSDConfig.from_dict({"objective": "grpo"})
    with pytest.raises(ConfigError, match=r"train\.kl_coef: .* teacher_mode fixed"):
        OPSDConfig.from_dict({"data_kind": "terminal", "objective": "grpo", "kl_coef": 0.1, "teacher_mode": "live",
                              "finetune": "full"})
    # With LoRA the base is the adapter switched off, whatever the teacher (live by default).
    assert OPSDConfig.from_dict({"data_kind": "terminal", "objective": "grpo", "kl_coef": 0.1}).teacher_mode == "live"
    with pytest.raises(ConfigError, match=r"train\.rl_pass_rate_low"):
        OPSDConfig.from_dict({"rl_pass_rate_low": 0.5, "rl_pass_rate_high": 0.5})


def test_calibrated_pool_band_and_fallback(tmp_path):
    atomic_write_json(tmp_path / "passk.json", {"tasks": 4, "overall": {}, "per_task": [
        {"task_id": "a", "n": 4, "c": 0}, {"task_id": "b", "n": 4, "c": 1}, {"task_id": "c", "n": 4, "c": 3},
        {"task_id": "d", "n": 4, "c": 4}]})
    pool, report = calibrated_pool(["a", "b", "c", "d", "e"], str(tmp_path / "passk.json"), 0.0, 1.0, "all")
    assert pool == ["b", "c"] and report["fallback"] is None
    assert report["pool_by_band"] == {"easy": 1, "hard": 1}
    assert report["candidates_by_band"] == {"easy": 2, "hard": 1, "not_solved_yet": 1, "unsolved": 1}
    pool, report = calibrated_pool(["b", "c"], str(tmp_path / "passk.json"), 0.5, 1.0, "all")
    assert pool == ["c"]
    # The embedded weak model solves nothing: the band is empty, the fallback is said out loud.
    pool, report = calibrated_pool(["a", "d"], str(tmp_path / "passk.json"), 0.0, 1.0, "all")
    assert pool == ["a", "d"] and "no task in the band" in report["fallback"]
    pool, report = calibrated_pool(["a", "d"], str(tmp_path / "passk.json"), 0.0, 1.0, "none")
    assert pool == [] and "no GRPO part" in report["fallback"]


@needs_bwrap
def test_mixed_batch_composition_and_hint_only_in_the_teacher_view(tiny_model_dir, corpus, tmp_path):
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.trainer import OPSDTrainer

    root, tasks, hints = corpus
    cfg = terminal_config(tiny_model_dir, root, prompts_per_step=2)
    rows = load_terminal_tasks(cfg)
    run = TerminalRun(cfg, rows, tmp_path)
    assert [r.id for r in run.hinted] == [tasks[0].name, tasks[1].name]
    assert run.pool == [tasks[1].name]  # only the sometimes-solved task is in the band
    specs = run.step_specs(0)
    opsd = [s for s in specs if s.part == "opsd"]
    grpo = [s for s in specs if s.part == "grpo"]
    assert sorted(s.task_id for s in opsd) == sorted([tasks[0].name, tasks[1].name])
    assert len(grpo) == 2 * 2 and {s.task_id for s in grpo} == {tasks[1].name}
    assert tasks[2].name not in {s.task_id for s in opsd}  # reward-only tasks never enter OPSD

    model, tokenizer = load_causal_lm(tiny_model_dir, device="cpu", dtype="float32")
    trainer = OPSDTrainer(cfg, model, tokenizer)
    engine = run.engine(trainer)  # the real transformers engine on the tiny student
    generate, calls = engine.generate, []

    def spy(prompts, caps, seeds):
        samples = generate(prompts, caps, seeds)
        calls.append([(list(p), list(s.token_ids)) for p, s in zip(prompts, samples)])
        return samples

    engine.generate = spy
    episodes, _, _ = run.run_episodes(trainer, opsd, seed=1)
    for ep, hint in zip(episodes, hints[:2]):
        assert ep.status == "graded" and ep.num_scored > 0
        # scored ids = the ids the engine sampled for this episode, turn after turn
        mine = [ids for call in calls for prompt, ids in call if ep.ids[: len(prompt)] == prompt]
        assert [t for t, m in zip(ep.ids, ep.mask) if m] == [t for ids in mine for t in ids]
        traj = run.opsd_trajectory(trainer, ep)
        student = tokenizer.decode(traj.student_ids)
        teacher = tokenizer.decode(traj.teacher_ids)
        assert hint[:80] not in student and hint[:80] in teacher
        assert [t for t, m in zip(traj.student_ids, traj.student_mask) if m] == \
               [t for t, m in zip(traj.teacher_ids, traj.teacher_mask) if m]
        # what follows the prompt is the same stream on both sides
        assert traj.teacher_ids[-len(traj.student_ids) + ep.prompt_len:] == traj.student_ids[ep.prompt_len:]


class HalfSolvingEngine:
    """Scripted 'policy': even-numbered rows of each batch replay the oracle, odd ones only look,
    so each GRPO group of two has rewards 1 and 0."""

    def __init__(self, tokenizer, tasks):
        self.tokenizer = tokenizer
        self.stop_ids = [tokenizer.eos_token_id]
        self.solutions = {(t / "instruction.md").read_text(): (t / "solution" / "solve.sh").read_text() for t in tasks}

    def generate(self, prompts, max_new_tokens, seeds):
        out = []
        for row, prompt in enumerate(prompts):
            text = self.tokenizer.decode(prompt)
            if text.count("<|im_start|>assistant") > 1:
                reply = f"```bash\necho {SUBMIT_MARKER}\n```"
            elif row % 2 == 0:
                solution = next(s for i, s in self.solutions.items() if i in text)
                reply = f"```bash\nbash <<'TF_EOF'\n{solution}\nTF_EOF\n```"
            else:
                reply = "```bash\nls\n```"
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + self.stop_ids
            out.append(Sample(ids, [-1.0] * len(ids), "stop"))
        return out


@needs_bwrap
def test_grpo_groups_with_signal_train_and_zero_variance_is_reported(tiny_model_dir, corpus, tmp_path):
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.trainer import OPSDTrainer

    root, tasks, _ = corpus
    cfg = terminal_config(tiny_model_dir, root, objective="grpo", max_episode_tokens=4000, rl_loss="ppo_clip")
    model, tokenizer = load_causal_lm(tiny_model_dir, device="cpu", dtype="float32")
    trainer = OPSDTrainer(cfg, model, tokenizer)
    run = TerminalRun(cfg, load_terminal_tasks(cfg), tmp_path)
    run._engine = HalfSolvingEngine(tokenizer, tasks)
    before = {n: p.detach().clone() for n, p in trainer.trainable}
    record = run.train_step(trainer, 0)
    assert record["episodes_graded"] == 2 and record["reward_mean_grpo"] == 0.5
    assert record["groups_kept"] == 1 and record["grpo_sequences"] == 2 and record["grpo_tokens"] > 0
    assert record["opsd_tokens"] == 0 and "grpo_no_signal_reason" not in record
    assert any(not torch.equal(before[n], p) for n, p in trainer.trainable)
    saved = read_json(tmp_path / "episodes" / "step-000001.json")
    assert sorted(e["reward"] for e in saved) == [0.0, 1.0]

    class NeverSolves(HalfSolvingEngine):
        def generate(self, prompts, max_new_tokens, seeds):
            return super().generate(prompts[:0], max_new_tokens, seeds) or [
                Sample(self.tokenizer("no command", add_special_tokens=False)["input_ids"] + self.stop_ids,
                       [-1.0] * 3, "stop") for _ in prompts]

    run._engine = NeverSolves(tokenizer, tasks)
    record = run.train_step(trainer, 1)
    assert record["groups_kept"] == 0 and record["groups_all_failed"] == 1
    assert "no advantage" in record["grpo_no_signal_reason"] and record["grad_norm"] == 0.0


def _train_cmd(cfg: OPSDConfig, out_dir: Path) -> list[str]:
    return [sys.executable, "-m", "termforge.cli", "train", "--params", json.dumps({"train": cfg.to_dict()}),
            "--out-dir", str(out_dir)]


@needs_bwrap
def test_kill_minus_nine_then_resume_equals_uninterrupted(tiny_model_dir, corpus, tmp_path):
    from safetensors.torch import load_file

    root, _, _ = corpus
    cfg = terminal_config(tiny_model_dir, root, max_steps=3, probe_size=1, probe_max_new_tokens=6,
                          rl_pass_rate_low=0.0)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    straight = tmp_path / "straight"
    res = subprocess.run(_train_cmd(cfg, straight), capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(cfg, killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    deadline = time.time() + 300
    while time.time() < deadline and not (killed / "checkpoints" / "step-000001").exists():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoints" / "step-000001").exists() and not (killed / "summary.json").exists()
    res = subprocess.run(_train_cmd(cfg, killed), capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stdout
    a = load_file(str(straight / "checkpoints" / "step-000003" / "trainable.safetensors"))
    b = load_file(str(killed / "checkpoints" / "step-000003" / "trainable.safetensors"))
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    ma, mb = read_jsonl(straight / "metrics.jsonl"), read_jsonl(killed / "metrics.jsonl")
    assert [m["step"] for m in mb] == [1, 2, 3]
    assert [(m["loss"], m["reward_mean"]) for m in ma] == [(m["loss"], m["reward_mean"]) for m in mb]
    summary = read_json(straight / "summary.json")
    assert summary["objective"] == "mixed" and summary["rl_pool"]["pool"] >= 1
    assert read_json(straight / "kl_probe.json")["num_tokens"] > 0


@needs_bwrap
def test_active_sampling_refills_the_batch_with_groups_that_carry_signal(tiny_model_dir, corpus, tmp_path):
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.trainer import OPSDTrainer

    root, tasks, _ = corpus

    class SolvesOnlyWhenRefilling(HalfSolvingEngine):
        """The first round fails everywhere (a reply without a command ends the episode, with
        episode_max_format_errors 1, after one generate call); the refill round half-solves."""

        def __init__(self, *a):
            super().__init__(*a)
            self.calls = 0

        def generate(self, prompts, max_new_tokens, seeds):
            self.calls += 1
            if self.calls == 1:
                ids = self.tokenizer("no command", add_special_tokens=False)["input_ids"] + self.stop_ids
                return [Sample(ids, [-1.0] * len(ids), "stop") for _ in prompts]
            return super().generate(prompts, max_new_tokens, seeds)

    cfg = terminal_config(tiny_model_dir, root, objective="grpo", max_episode_tokens=4000, active_sampling_rounds=2,
                          episode_max_format_errors=1)
    model, tokenizer = load_causal_lm(tiny_model_dir, device="cpu", dtype="float32")
    trainer = OPSDTrainer(cfg, model, tokenizer)
    run = TerminalRun(cfg, load_terminal_tasks(cfg), tmp_path)
    run._engine = SolvesOnlyWhenRefilling(tokenizer, tasks)
    record = run.train_step(trainer, 0)
    # round 0: one group, all failed; one refill round found a group with rewards 1 and 0; no third round
    assert record["active_sampling_rounds"] == 1
    assert record["groups_all_failed"] == 1 and record["groups_kept"] == 1
    assert record["episodes"] == 4 and record["grpo_sequences"] == 2


# One training run as torchrun starts it (or plain python): the policy is scripted by each reply's
# seed, which names its episode, so whichever process an episode runs in it samples the same
# reply: even seeds replay the oracle, odd ones only look. GRPO groups then carry signal (some
# solved, some not), the OPSD part trains on the same tokens, and the run's update is fixed by
# the seed alone.
DISTRIBUTED_TERMINAL_SCRIPT = '''
import json, os, sys
from pathlib import Path
from termforge.harness import SUBMIT_MARKER
from termforge.opsd.config import OPSDConfig
from termforge.opsd.terminal import Sample
from termforge.opsd.terminal_train import TerminalRun, load_terminal_tasks
from termforge.opsd.trainer import train

cfg = OPSDConfig.from_dict(json.loads(sys.argv[1]))
solutions = {(t / "instruction.md").read_text(): (t / "solution" / "solve.sh").read_text()
             for t in Path(cfg.tasks_dir).iterdir() if (t / "instruction.md").exists()}
replies = []


class SeedParityEngine:
    def __init__(self, tokenizer):
        self.tokenizer, self.stop_ids = tokenizer, [tokenizer.eos_token_id]

    def generate(self, prompts, max_new_tokens, seeds):
        out = []
        for prompt, seed in zip(prompts, seeds):
            text = self.tokenizer.decode(prompt)
            if text.count("<|im_start|>assistant") > 1:
                reply = f"```bash\\necho {SUBMIT_MARKER}\\n```"
            elif seed % 2 == 0:
                solution = next(s for i, s in solutions.items() if i in text)
                reply = f"```bash\\nbash <<'TF_EOF'\\n{solution}\\nTF_EOF\\n```"
            else:
                reply = "```bash\\nls\\n```"
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + self.stop_ids
            out.append(Sample(ids, [-1.0] * len(ids), "stop"))
            replies.append(seed)
        return out


def scripted_engine(self, trainer):
    if self._engine is None:
        self._engine = SeedParityEngine(trainer.tokenizer)
    return self._engine


TerminalRun.engine = scripted_engine
train(cfg, load_terminal_tasks(cfg), sys.argv[2])
print(f"rank {os.environ.get('RANK', '0')} of {os.environ.get('WORLD_SIZE', '1')} sampled {len(replies)} replies",
      flush=True)
'''


def distributed_terminal_config(tiny_model_dir, root) -> OPSDConfig:
    return terminal_config(tiny_model_dir, root, max_steps=2, prompts_per_step=2, rollouts_per_prompt=2,
                           group_size=2, micro_batch_size=1, max_episode_tokens=4000, probe_size=1,
                           probe_max_new_tokens=6, rl_loss="ppo_clip", rl_pass_rate_low=0.0, checkpoint_every=0)


@needs_bwrap
@pytest.mark.extended  # the gate: the same comparison with the two processes in a Slurm job (test_slurm_train.py)
def test_two_processes_give_the_terminal_update_of_one(tiny_model_dir, corpus, tmp_path):
    """Terminal training over two CPU processes (gloo, as torchrun starts them): episodes sharded
    over the processes, groups and advantages formed over the whole group wherever its episodes
    ran, the loss normalised by the whole step, the gradients summed. Same adapter as one process
    (up to float32 summation order: each process sums its own micro-batches' gradients first),
    same metrics, same episode records."""
    from safetensors.torch import load_file

    root, _, _ = corpus
    cfg = distributed_terminal_config(tiny_model_dir, root)
    script = tmp_path / "terminal_run.py"
    script.write_text(DISTRIBUTED_TERMINAL_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    params = json.dumps(cfg.to_dict())
    one = subprocess.run([sys.executable, str(script), params, str(tmp_path / "one")], capture_output=True, text=True,
                         env=env, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          str(script), params, str(tmp_path / "two")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    # Both processes sampled: the episodes really were spread over them.
    counts = {line.split()[1]: int(line.split()[5]) for line in two.stdout.splitlines() if " sampled " in line}
    assert set(counts) == {"0", "1"} and all(counts.values()), two.stdout[-2000:]
    assert sum(counts.values()) == int(one.stdout.split(" sampled ")[1].split()[0])
    a = load_file(str(tmp_path / "one" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "two" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], **REORDERED_FLOAT32)
    ma, mb = read_jsonl(tmp_path / "one" / "metrics.jsonl"), read_jsonl(tmp_path / "two" / "metrics.jsonl")
    assert [m["processes"] for m in ma] == [1, 1] and [m["processes"] for m in mb] == [2, 2]
    for x, y in zip(ma, mb):
        for key in ("episodes", "episodes_graded", "reward_mean", "reward_mean_grpo", "groups_kept",
                    "groups_all_failed", "groups_all_solved", "opsd_tokens", "grpo_tokens", "sequences",
                    "completion_tokens", "completion_len_max"):
            assert x[key] == y[key], key
        for key in ("loss", "opsd_loss", "grpo_loss", "opsd_kl_mean", "grpo_ratio_mean"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-7), key
    # GRPO had groups with signal and OPSD had tokens, so both parts' cross-process paths ran.
    assert sum(m["groups_kept"] for m in ma) >= 1 and all(m["opsd_tokens"] > 0 for m in ma)
    for step in (1, 2):
        name = f"episodes/step-{step:06d}.json"
        assert read_json(tmp_path / "two" / name) == read_json(tmp_path / "one" / name)
    probe_a, probe_b = read_json(tmp_path / "one" / "kl_probe.json"), read_json(tmp_path / "two" / "kl_probe.json")
    assert probe_a["num_tokens"] == probe_b["num_tokens"] > 0
    assert probe_b["before"] == pytest.approx(probe_a["before"], rel=1e-5)


class HintReadingEngine(HalfSolvingEngine):
    """Scripted 'policy' that replays the oracle only when the task's hint is in its prompt, and
    otherwise only looks: a hint with uplift 1."""

    def __init__(self, tokenizer, tasks, hint):
        super().__init__(tokenizer, tasks)
        self.hint = hint

    def generate(self, prompts, max_new_tokens, seeds):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            if text.count("<|im_start|>assistant") > 1:
                reply = f"```bash\necho {SUBMIT_MARKER}\n```"
            elif self.hint[:60] in text:
                solution = next(s for i, s in self.solutions.items() if i in text)
                reply = f"```bash\nbash <<'TF_EOF'\n{solution}\nTF_EOF\n```"
            else:
                reply = "```bash\nls\n```"
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + self.stop_ids
            out.append(Sample(ids, [-1.0] * len(ids), "stop"))
        return out


@needs_bwrap
def test_hint_uplift_runs_both_arms_on_the_same_seeds(tiny_model_dir, corpus, tmp_path):
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.trainer import OPSDTrainer
    from termforge.opsd.uplift import measure_hint_uplift

    root, tasks, hints = corpus
    cfg = terminal_config(tiny_model_dir, root, objective="opsd", max_episode_tokens=4000)
    model, tokenizer = load_causal_lm(tiny_model_dir, device="cpu", dtype="float32")
    trainer = OPSDTrainer(cfg, model, tokenizer)
    run = TerminalRun(cfg, load_terminal_tasks(cfg), tmp_path)
    run._engine = HintReadingEngine(tokenizer, tasks, hints[0])
    seen = []
    generate = run._engine.generate
    run._engine.generate = lambda p, m, seeds: (seen.append(list(seeds)), generate(p, m, seeds))[1]
    with pytest.raises(ConfigError, match="at least 8"):
        measure_hint_uplift(run, trainer, [tasks[0].name], k=4)
    report = measure_hint_uplift(run, trainer, [tasks[0].name, tasks[2].name], k=8, seed=3)
    [only] = report["tasks"]  # the reward-only task has no hint to measure
    assert (only["task_id"], only["pass_without"], only["pass_with"], only["uplift"]) == (tasks[0].name, 0.0, 1.0, 1.0)
    assert only["graded_with"] == only["graded_without"] == 8 and report["no_uplift"] == []
    assert report["families"][only["family"]]["uplift"] == 1.0 and only["family"] == "log_level_filter"
    # The arms' first turns sampled with the same seeds: only the hint differs between them.
    assert seen[0] == seen[len(seen) // 2] and len(seen[0]) == 8


@needs_bwrap
def test_hint_uplift_command_writes_the_report(tiny_model_dir, corpus, tmp_path, capsys):
    """`termforge hint-uplift` as the rule runs it: the train config's policy (here the tiny random
    one), every hinted kept task, 8 episodes per arm; the report lands atomically at --out."""
    from termforge.cli import main

    root, tasks, _ = corpus
    options = terminal_config(tiny_model_dir, root, max_episode_tokens=700, episode_turn_cap=1).to_dict()
    out = tmp_path / "hints" / "uplift.json"
    rc = main(["hint-uplift", "--params", json.dumps({"train": options}), "--demos", str(root / "demos.parquet"),
               "--tasks-dir", str(root / "tasks"), "--images-dir", str(root / "images"),
               "--corpus", str(root / "corpus.json"), "--out", str(out)])
    assert rc == 0
    report = read_json(out)
    assert [t["task_id"] for t in report["tasks"]] == sorted(t.name for t in tasks[:2])  # the hinted ones
    assert all(t["graded_with"] + t["graded_without"] + t["infra_failed"] == 16 for t in report["tasks"])
    assert report["k"] == 8 and set(report["families"]) == {"log_level_filter", "account_audit"}
    printed = capsys.readouterr().out
    assert "hint-uplift: 2 hinted tasks, k=8" in printed
    assert "hint-uplift: 16 episodes without the hint (2 tasks x k=8) ..." in printed  # progress, arm by arm
    assert "hint-uplift: with the hint: " in printed
    assert "  log_level_filter: 1 hinted task(s)" in printed and "  overall: 2 hinted task(s)" in printed
