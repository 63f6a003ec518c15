"""bench/bench_terminal_learning.py --quick end to end (the real SmolLM2, real sandboxes, the real
trainer), and its resume: a second call reads every finished stage and run back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "bench_terminal_learning.py"


def _run(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(BENCH), "--quick", "--threads", "1", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=3000)


@pytest.mark.slow
@pytest.mark.extended  # a bench: the reward probe and the trainer it drives are tested in the gate
@needs_bwrap
def test_quick_bench_runs_and_resumes(tmp_path):
    out = tmp_path / "bench"
    res = _run(out)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert set(result["objectives"]) == {"grpo", "opsd", "mixed"}
    uplift = result["uplift"]  # the untrained policy's hint uplift on the train split
    assert uplift["k"] == 8 and {t["task_id"] for t in uplift["tasks"]} <= set(result["train"])
    assert "hint uplift of the untrained policy" in res.stdout and "KL(teacher)" in res.stdout
    for objective, block in result["objectives"].items():
        seeds = block["stats"]["seeds"]
        assert len(seeds) == 1 and all(0.0 <= s[k] <= 1.0 for s in seeds for k in ("before", "after"))
        assert block["stats"]["tasks"] == len(result["heldout"]) == 2
        assert [r["step"] for r in block["curve"]] == [1]
        probe = json.loads((out / "runs" / f"{objective}-seed0" / "reward_probe.json").read_text())
        assert probe["episodes"] == {"before": 4, "after": 4}  # 2 held-out tasks x 2 episodes
        assert not set(probe["tasks"]) & set(result["train"])
    assert "groups with signal" in res.stdout and "paired sign-flip test" in res.stdout
    again = _run(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("finished earlier, read back") == 3
