"""The held-out reward probe of terminal training (opsd/reward_probe.py): which tasks are held out
(the pass-rate band first, the same for every seed, out of both parts of training), how the
reward is counted from real sandboxed episodes, and a training run that measures it before and
after, resumes without measuring the untrained policy again, and reports it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from conftest import make_signature, needs_bwrap, save_tiny_llama, smollm2_tokenizer  # noqa: E402
from termforge.errors import ConfigError  # noqa: E402
from termforge.harness import SUBMIT_MARKER, initial_messages  # noqa: E402
from termforge.io import atomic_write_json, read_json  # noqa: E402
from termforge.opsd.config import OPSDConfig  # noqa: E402
from termforge.opsd.data import PromptRow  # noqa: E402
from termforge.opsd.reward_probe import measure_reward, reward_probe_report, split_reward_probe  # noqa: E402
from termforge.opsd.terminal import Sample  # noqa: E402


def _rows(ids):
    return [PromptRow(id=i, prompt_messages=tuple(initial_messages(f"task {i}")), privileged_context="h",
                      kind="terminal") for i in ids]


def test_split_prefers_the_band_and_does_not_depend_on_the_seed(tmp_path):
    atomic_write_json(tmp_path / "passk.json", {"per_task": [
        {"task_id": "a", "n": 4, "c": 0}, {"task_id": "b", "n": 4, "c": 2}, {"task_id": "c", "n": 4, "c": 4},
        {"task_id": "d", "n": 4, "c": 1}, {"task_id": "e", "n": 4, "c": 0}]})
    chosen = []
    for seed in (0, 7):
        cfg = OPSDConfig.from_dict({"data_kind": "terminal", "reward_probe_size": 2, "seed": seed,
                                    "passk": str(tmp_path / "passk.json")})
        train, probe, report = split_reward_probe(_rows("abcde"), cfg)
        assert {r.id for r in probe} == {"b", "d"}  # the two tasks solved sometimes
        assert [r.id for r in train] == ["a", "c", "e"] and report["tasks"] == [r.id for r in probe]
        chosen.append(report["tasks"])
    assert chosen[0] == chosen[1]
    cfg = OPSDConfig.from_dict({"data_kind": "terminal", "reward_probe_size": 3, "passk": str(tmp_path / "passk.json")})
    train, probe, report = split_reward_probe(_rows("abcde"), cfg)
    assert {"b", "d"} < {r.id for r in probe} and "2 of them in that band" in report["rule"]
    # a small corpus shrinks the probe: one task always stays in training
    train, probe, _ = split_reward_probe(_rows("abcde"), OPSDConfig.from_dict({"data_kind": "terminal",
                                                                               "reward_probe_size": 9}))
    assert len(probe) == 4 and len(train) == 1
    assert split_reward_probe(_rows("a"), OPSDConfig.from_dict({"data_kind": "terminal", "reward_probe_size": 2}))[1] == []
    off = OPSDConfig.from_dict({"data_kind": "terminal"})
    assert split_reward_probe(_rows("ab"), off) == (_rows("ab"), [], {})


def test_a_listed_probe_may_name_tasks_outside_the_corpus(tmp_path):
    (tmp_path / "tasks" / "z").mkdir(parents=True)
    (tmp_path / "tasks" / "z" / "instruction.md").write_text("held-out task z\n")
    atomic_write_json(tmp_path / "held.json", {"kept": ["b", "z"]})
    cfg = OPSDConfig.from_dict({"data_kind": "terminal", "reward_probe_tasks": str(tmp_path / "held.json"),
                                "tasks_dir": str(tmp_path / "tasks")})
    train, probe, _ = split_reward_probe(_rows("abc"), cfg)
    assert [r.id for r in probe] == ["b", "z"] and [r.id for r in train] == ["a", "c"]
    assert "held-out task z" in probe[1].prompt_messages[1]["content"]
    atomic_write_json(tmp_path / "held.json", ["missing"])
    with pytest.raises(ConfigError, match=r"train\.reward_probe_tasks: task missing: .* is missing"):
        split_reward_probe(_rows("abc"), cfg)
    with pytest.raises(ConfigError, match=r"train\.reward_probe_size: .* needs data_kind terminal"):
        OPSDConfig.from_dict({"reward_probe_size": 2})


def test_report_pairs_tasks():
    before = {"reward_mean": 0.25, "episodes": 8, "infra_failed": 0,
              "rows": [{"id": "a", "n": 4, "solved": 1, "reward_mean": 0.25}, {"id": "b", "n": 4, "solved": 1,
                                                                             "reward_mean": 0.25}]}
    after = {"reward_mean": 0.5, "episodes": 8, "infra_failed": 0,
             "rows": [{"id": "a", "n": 4, "solved": 3, "reward_mean": 0.75}, {"id": "b", "n": 4, "solved": 1,
                                                                            "reward_mean": 0.25}]}
    rep = reward_probe_report(before, after, {"tasks": ["a", "b"]})
    assert rep["delta"] == 0.25 and [r["delta"] for r in rep["rows"]] == [0.5, 0.0]


# ------------------------------------------------------------------------------- with sandboxes

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Four built calibration tasks (write_line, short) with hints; the first two are in the band."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from termforge.generate.families.calibration.one_step_file_task import OneStepFileTask
    from termforge.generate.procedural import generate_task
    from termforge.images.runtimes import BwrapRuntime

    root = tmp_path_factory.mktemp("reward-probe")
    fam = OneStepFileTask(kinds=("write_line",))
    tasks = [generate_task(make_signature(i, "file_operations", "exact_text", "text_only", task_complexity="short",
                                          corpus_kind="calibration"), root / "tasks", families=[fam])
             for i in range(4)]
    rt = BwrapRuntime()
    assert all(rt.build(t, root / "images").ok for t in tasks)
    ids = [t.name for t in tasks]
    pq.write_table(pa.table({"task_id": ids, "demo": ["Write the line with echo and check it with cat."] * 4}),
                   root / "demos.parquet")
    atomic_write_json(root / "corpus.json", {"kept": ids, "tasks_dir": str(root / "tasks")})
    atomic_write_json(root / "passk.json", {"tasks": 4, "overall": {}, "per_task": [
        {"task_id": t, "n": 4, "c": c} for t, c in zip(ids, (1, 2, 0, 0))]})
    model_dir = save_tiny_llama(root / "tiny", smollm2_tokenizer(), max_positions=4096)
    return root, tasks, model_dir


def _cfg(root, model_dir, **over):
    values = dict(model=model_dir, device="cpu", num_threads=1, data_kind="terminal", objective="grpo",
                  demos=str(root / "demos.parquet"), corpus=str(root / "corpus.json"), tasks_dir=str(root / "tasks"),
                  images_dir=str(root / "images"), passk=str(root / "passk.json"), max_steps=2, prompts_per_step=1,
                  group_size=2, max_new_tokens=8, max_episode_tokens=700, episode_turn_cap=1, micro_batch_size=2,
                  lora_r=4, lora_alpha=8.0, lora_target_modules=["q_proj", "v_proj"], probe_size=0,
                  reward_probe_size=2, reward_probe_episodes=2, checkpoint_every=1, seed=3, sandbox_wall_sec=60,
                  sandbox_cpu_sec=60, plot=False)
    values.update(over)
    return OPSDConfig.from_dict(values)


class SolvesSome:
    """Scripted policy: replays the oracle on the tasks named, an idle command elsewhere."""

    def __init__(self, tokenizer, tasks, solve):
        self.tokenizer, self.stop_ids = tokenizer, [tokenizer.eos_token_id]
        self.solutions = {(t / "instruction.md").read_text(): (t.name, (t / "solution" / "solve.sh").read_text())
                          for t in tasks}
        self.solve = set(solve)

    def generate(self, prompts, max_new_tokens, seed):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            if text.count("<|im_start|>assistant") > 1:
                reply = f"```bash\necho {SUBMIT_MARKER}\n```"
            else:
                task_id, solution = next(v for i, v in self.solutions.items() if i in text)
                reply = (f"```bash\nbash <<'TF_EOF'\n{solution}\nTF_EOF\n```" if task_id in self.solve
                         else "```bash\nls\n```")
            ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + self.stop_ids
            out.append(Sample(ids, [-1.0] * len(ids), "stop"))
        return out


@needs_bwrap
def test_reward_is_counted_from_graded_episodes(corpus, tmp_path):
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.terminal_train import TerminalRun, load_terminal_tasks
    from termforge.opsd.trainer import OPSDTrainer

    root, tasks, model_dir = corpus
    cfg = _cfg(root, model_dir)
    train_rows, probe_rows, _ = split_reward_probe(load_terminal_tasks(cfg), cfg)
    assert {r.id for r in probe_rows} == {tasks[0].name, tasks[1].name}  # the band tasks
    model, tok = load_causal_lm(model_dir, device="cpu", dtype="float32")
    trainer = OPSDTrainer(cfg, model, tok)
    run = TerminalRun(cfg, train_rows, tmp_path)
    run._engine = SolvesSome(tok, tasks, solve=[tasks[0].name])
    got = measure_reward(run, trainer, probe_rows, cfg)
    per = {r["id"]: r for r in got["rows"]}
    assert per[tasks[0].name] == {"id": tasks[0].name, "n": 2, "solved": 2, "reward_mean": 1.0}
    assert per[tasks[1].name]["reward_mean"] == 0.0
    assert got["reward_mean"] == 0.5 and got["episodes"] == 4 and got["infra_failed"] == 0


@needs_bwrap
def test_training_measures_held_out_reward_and_resumes_without_remeasuring(corpus, tmp_path, capsys):
    from termforge.opsd.terminal_train import load_terminal_tasks
    from termforge.opsd.trainer import train

    root, tasks, model_dir = corpus
    cfg = _cfg(root, model_dir)
    out = tmp_path / "run"
    first = train(cfg, load_terminal_tasks(cfg), out, stop_after_steps=1)
    assert not first["completed"] and (out / "reward_probe" / "before.json").exists()
    assert "held-out reward before training" in capsys.readouterr().out
    summary = train(cfg, load_terminal_tasks(cfg), out)
    assert "held-out reward before training" not in capsys.readouterr().out  # read back, not measured again
    report = read_json(out / "reward_probe.json")
    held = set(report["tasks"])
    assert held == {tasks[0].name, tasks[1].name}
    assert report["episodes"] == {"before": 4, "after": 4} and len(report["rows"]) == 2
    assert summary["reward_probe"]["before"] == report["before"] and summary["reward_probe"]["tasks"] == 2
    assert read_json(out / "summary.json")["reward_probe"]["delta"] == report["after"] - report["before"]
    trained = {e["task_id"] for step in (1, 2) for e in read_json(out / "episodes" / f"step-{step:06d}.json")}
    assert trained and not trained & held  # held-out tasks never train
