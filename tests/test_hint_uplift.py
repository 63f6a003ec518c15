"""Hint uplift (termforge.opsd.uplift): the policy's pass rate on a task with its hint in context
vs without, on the same seeds; the report per task and family; the switch that leaves hints
without uplift out of OPSD."""

from __future__ import annotations

import json

import pytest

from termforge.errors import ConfigError
from termforge.opsd.config import OPSDConfig
from termforge.opsd.uplift import (hints_without_uplift, tasks_spread_over_families, uplift_report,
                                   uplift_summary_lines)


def test_report_per_task_family_and_flags():
    report = uplift_report(
        {"t1": [1, 1, 0, 0, 1, 0, 0, 0], "t2": [0] * 8, "t3": [1] * 8, "t4": [1] * 3},
        {"t1": [0] * 8, "t2": [0] * 8, "t3": [1] * 7 + [0], "t5": [0] * 8},
        {"t1": "calib", "t2": "calib", "t3": "logs", "t4": "logs"}, k=8, infra_failed={"t4": 5})
    tasks = {t["task_id"]: t for t in report["tasks"]}
    assert tasks["t1"]["pass_with"] == 3 / 8 and tasks["t1"]["pass_without"] == 0 and tasks["t1"]["uplift"] == 3 / 8
    assert not tasks["t1"]["no_uplift"]
    assert tasks["t2"]["uplift"] == 0 and tasks["t2"]["no_uplift"]  # no uplift: flagged
    assert tasks["t3"]["uplift"] == pytest.approx(1 / 8) and not tasks["t3"]["no_uplift"]
    # An arm without graded episodes measures nothing: flagged, never counted as an uplift.
    assert tasks["t4"]["uplift"] is None and tasks["t4"]["no_uplift"] and tasks["t4"]["infra_failed"] == 5
    assert tasks["t5"]["family"] == "unknown" and tasks["t5"]["no_uplift"]
    assert report["no_uplift"] == ["t2", "t4", "t5"]
    assert report["families"]["calib"] == {"tasks": 2, "measured": 2, "pass_with": 3 / 16, "pass_without": 0.0,
                                           "uplift": 3 / 16, "no_uplift": 1}
    assert report["families"]["logs"]["measured"] == 1 and report["overall"]["tasks"] == 5
    # A threshold above zero flags small uplifts too.
    strict = uplift_report({"t1": [1] + [0] * 7}, {"t1": [0] * 8}, {}, k=8, min_uplift=0.2)
    assert strict["no_uplift"] == ["t1"]


def test_the_drop_switch_needs_a_report_and_reads_its_flags(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.drop_hints_without_uplift: needs train\.hint_uplift"):
        OPSDConfig.from_dict({"data_kind": "terminal", "drop_hints_without_uplift": True})
    with pytest.raises(ConfigError, match=r"train\.hint_uplift: .*missing\.json does not exist"):
        hints_without_uplift(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text(json.dumps({"tasks": []}))
    with pytest.raises(ConfigError, match=r"has no `no_uplift` list"):
        hints_without_uplift(tmp_path / "bad.json")
    (tmp_path / "up.json").write_text(json.dumps(uplift_report({"a": [1] * 8, "b": [0] * 8},
                                                               {"a": [0] * 8, "b": [0] * 8}, {}, k=8)))
    assert hints_without_uplift(tmp_path / "up.json") == {"b"}


def test_tasks_whose_hint_has_no_uplift_leave_the_opsd_part_only(tmp_path):
    from termforge.opsd.data import PromptRow
    from termforge.opsd.terminal_train import TerminalRun

    rows = [PromptRow(t, ({"role": "user", "content": t},), hint, "terminal", t)
            for t, hint in (("a", "hint a"), ("b", "hint b"), ("c", ""))]
    (tmp_path / "up.json").write_text(json.dumps(uplift_report({"a": [1] * 8, "b": [0] * 8},
                                                               {"a": [0] * 8, "b": [0] * 8}, {}, k=8)))
    base = {"data_kind": "terminal", "objective": "mixed", "images_dir": str(tmp_path), "hint_uplift":
            str(tmp_path / "up.json")}
    keep = TerminalRun(OPSDConfig.from_dict(base), rows, tmp_path)
    assert [r.id for r in keep.hinted] == ["a", "b"]  # flagged, not dropped, unless asked
    drop = TerminalRun(OPSDConfig.from_dict({**base, "drop_hints_without_uplift": True}), rows, tmp_path)
    assert [r.id for r in drop.hinted] == ["a"]
    assert drop.pool == keep.pool == ["a", "b", "c"]  # GRPO still trains every task


def test_the_summary_names_each_family_its_rates_and_flags():
    report = uplift_report({"t1": [1, 1, 0, 0, 0, 0, 0, 0], "t2": [0] * 8, "t3": [1] * 3},
                           {"t1": [0] * 8, "t2": [1] + [0] * 7},
                           {"t1": "calib", "t2": "calib", "t3": "logs"}, k=8)
    lines = uplift_summary_lines(report)
    assert lines == [
        "  calib: 2 hinted task(s), pass rate 0.062 without -> 0.125 with, uplift +0.062; 1 without uplift",
        "  logs: 1 hinted task(s), none measured (no graded episode in an arm)",
        "  overall: 3 hinted task(s), pass rate 0.062 without -> 0.125 with, uplift +0.062; 2 without uplift",
    ]


def test_a_sample_of_hinted_tasks_takes_the_families_in_turn():
    families = {"a1": "alpha", "a2": "alpha", "a3": "alpha", "b1": "beta", "c1": "gamma", "c2": "gamma"}
    assert tasks_spread_over_families(families, 0) == sorted(families)  # 0: every task
    assert tasks_spread_over_families(families, 3) == ["a1", "b1", "c1"]  # one per family first
    assert tasks_spread_over_families(families, 5) == ["a1", "a2", "b1", "c1", "c2"]
    assert tasks_spread_over_families(families, 99) == sorted(families)
    assert tasks_spread_over_families(families, 2) == ["a1", "b1"]
    with pytest.raises(ConfigError, match=r"hints\.uplift_tasks: expected 0 .* got -1"):
        tasks_spread_over_families(families, -1)


def test_a_negative_task_count_is_refused_before_any_work(tmp_path, capsys):
    from termforge.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["hint-uplift", "--demos", str(tmp_path / "demos.parquet"), "--tasks-dir", str(tmp_path),
              "--images-dir", str(tmp_path), "--out", str(tmp_path / "uplift.json"), "--task-count", "-2"])
    assert exit_.value.code == 2
    assert "--task-count: expected 0 (every hinted task) or a positive count, got '-2'" in capsys.readouterr().err
