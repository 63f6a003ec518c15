"""The tidy eval table: one row per (model, benchmark, metric) with n and a binomial stderr,
base first, and the nested metrics file DVC reads."""

import csv
import json

from termforge.evals.run import write_eval_record, write_eval_table


def test_eval_table_rows_and_metrics(tmp_path):
    write_eval_record(tmp_path / "a.json", "base", "math-heldout", "aime",
                      {"num_problems": 4, "n": 2, "avg@2": 0.25, "pass@2": 0.5, "maj@2": 0.25, "pass@1": 0.25,
                       "formatted_rate": 0.75, "grading_paths": {"math_verify": 8}})
    write_eval_record(tmp_path / "b.json", "fkl", "math-heldout", "aime",
                      {"num_problems": 4, "n": 2, "avg@2": 0.5, "pass@2": 0.75, "maj@2": 0.5, "pass@1": 0.5,
                       "formatted_rate": 1.0})
    write_eval_record(tmp_path / "c.json", "base", "tb-mini", "tbench",
                      {"n_tasks": 6, "n_scored": 6, "mean_reward": 1 / 6, "pass_at_k": {"1": 1 / 6},
                       "n_tasks_pass_at_k": {"1": 6}, "n_errors": 0, "n_environment_errors": 0})
    rows = write_eval_table([tmp_path / p for p in ("b.json", "a.json", "c.json")], tmp_path / "results.csv")
    table = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert len(table) == len(rows)
    avg = [r for r in table if r["metric"] == "avg@2"]
    assert [r["model"] for r in avg] == ["base", "fkl"]  # base first, then the ablations
    base_avg = avg[0]
    assert float(base_avg["value"]) == 0.25 and base_avg["n"] == "4"
    assert abs(float(base_avg["stderr"]) - (0.25 * 0.75 / 4) ** 0.5) < 1e-12
    tb = {r["metric"]: r for r in table if r["benchmark"] == "tb-mini"}
    assert set(tb) == {"mean_reward", "pass@1", "n_errors", "n_environment_errors"}
    assert tb["n_errors"]["stderr"] == ""
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["fkl"]["math-heldout"]["pass@2"] == 0.75
    assert metrics["base"]["tb-mini"]["mean_reward"] == 1 / 6


def test_tbench_records_bring_their_control_rows_once_per_benchmark(tmp_path):
    oracle = {"n_tasks": 2, "n_scored": 2, "mean_reward": 1.0, "pass_at_k": {"1": 1.0}, "n_errors": 0}
    noop = {"n_tasks": 2, "n_scored": 2, "mean_reward": 0.0, "pass_at_k": {"1": 0.0}, "n_errors": 0}
    policy = {"n_tasks": 2, "n_scored": 2, "mean_reward": 0.0, "pass_at_k": {"1": 0.0}, "n_errors": 0,
              "mean_by_key": {"reward": 0.0, "style": 0.25},
              "unloadable_tasks": [{"task_name": "bad", "path": "/x/bad", "reason": "missing task.toml"}]}
    for name in ("base", "fkl"):
        write_eval_record(tmp_path / f"{name}.json", name, "tb-mini", "tbench", policy,
                          {"oracle": oracle, "noop": noop})
    write_eval_table([tmp_path / "base.json", tmp_path / "fkl.json"], tmp_path / "results.csv")
    table = list(csv.DictReader(open(tmp_path / "results.csv")))
    mean = [(r["model"], float(r["value"])) for r in table if r["metric"] == "mean_reward"]
    # Policies first (base leading), then the controls of the same runner, each once.
    assert mean == [("base", 0.0), ("fkl", 0.0), ("control:noop", 0.0), ("control:oracle", 1.0)]
    assert {r["model"]: r["value"] for r in table if r["metric"] == "n_unloadable_tasks"} == {"base": "1", "fkl": "1"}
    # Every named reward of a reward.json is reported beside the headline mean_reward.
    assert {r["model"]: r["value"] for r in table if r["metric"] == "mean:style"} == {"base": "0.25", "fkl": "0.25"}
