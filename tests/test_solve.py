"""The vanillux harness and the solve stage: the oracle agent gets pass@k = 1 through the harness,
a faulty endpoint is survived with bounded retries and counted infra failures, no prompt ever
carries truth, tests or oracle, and a killed solve run re-does only unfinished rollouts."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import built_family_tasks, needs_bwrap
from fake_openai_server import FakeOpenAIServer
from termforge.hints import procedural_hint
from termforge.harness import SUBMIT_MARKER, HarnessConfig, extract_commands, truncate_observation
from termforge.io import atomic_write_json, read_json
from termforge.models.base import SamplingParams
from termforge.models.registry import make_model
from termforge.passk import run_passk
from termforge.quality.validate import hidden_truth_strings
from termforge.runtime.base import Limits
from termforge.solve import OracleReplayModel, SolveSettings, run_solve_shard

FAMILIES = ("log_level_filter", "account_audit", "shell_script_fix")


def test_extract_commands():
    assert extract_commands("do this\n```bash\nls -la\n```") == ["ls -la"]
    assert extract_commands("```\npwd\n```\n```sh\nid\n```") == ["pwd", "id"]
    assert extract_commands("no block here") == []
    assert extract_commands("```python\nprint(1)\n```") == []


def test_truncate_observation_keeps_head_and_tail():
    text = "H" * 6000 + "M" * 5000 + "T" * 6000
    out = truncate_observation(text, 10_000)
    assert out.startswith("H" * 5000) and out.endswith("T" * 5000)
    assert "7000 characters truncated" in out
    assert truncate_observation("short", 10_000) == "short"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("solve")
    tasks = built_family_tasks(root, FAMILIES)
    atomic_write_json(root / "shard.json", {"shard": "00000", "tasks_dir": str(root / "tasks"),
                                            "tasks": [{"id": t.name} for t in tasks]})
    atomic_write_json(root / "corpus.json", {"tasks_dir": str(root / "tasks"), "kept": [t.name for t in tasks]})
    return root, tasks


def _settings(k=2, concurrency=2, turn_cap=4, retries=2):
    return SolveSettings(k=k, concurrency=concurrency, max_infra_retries=retries, seed=7,
                         harness=HarnessConfig(turn_cap=turn_cap, max_format_errors=2, command_timeout_sec=30,
                                               task_timeout_sec=120, sampling=SamplingParams(max_new_tokens=64)),
                         limits=Limits(wall_sec=60, cpu_sec=60, memory_mb=4096))


@needs_bwrap
def test_oracle_agent_scores_pass_at_k_one(corpus, tmp_path):
    root, tasks = corpus
    out = tmp_path / "solve.json"
    result = run_solve_shard(root / "shard.json", root / "corpus.json", root / "images", out, tmp_path / "traj",
                             OracleReplayModel(root / "tasks"), _settings())
    assert [r["reward"] for r in result["rollouts"]] == [1.0] * 6
    assert all(r["end_reason"] == "submitted" for r in result["rollouts"])
    table = run_passk([out], tmp_path / "passk.json", tmp_path / "passk.csv", tmp_path / "sft.parquet")
    assert table["overall"] == {"pass@1": 1.0, "pass@2": 1.0}
    assert table["sft_rows"] == 6 and table["zero_pass"] == []
    # Replaying the oracle's literal lines is what the (informational) string heuristic flags;
    # `hacked` comes from the grader's evidence, and an honest oracle leaves none.
    assert all(r["suspicious"] and not r["hacked"] for r in result["rollouts"])
    traj = read_json(result["rollouts"][0]["trajectory"])
    assert traj["messages"][0]["role"] == "system" and traj["turns"][0]["exit_code"] == 0


def _agent_reply(messages):
    """A scripted 'model': look around, then submit."""
    turns = sum(1 for m in messages if m["role"] == "assistant")
    if turns == 0:
        return "Let me look.\n```bash\nls -la /app && cat /app/*.txt 2>/dev/null | head -5\n```"
    return f"Done.\n```bash\necho {SUBMIT_MARKER}\n```"


@needs_bwrap
def test_faulty_endpoint_is_survived_and_prompts_never_leak(corpus, tmp_path):
    root, tasks = corpus
    faults = {"500": 0.1, "429": 0.1, "hang": 0.05, "malformed": 0.05}
    with FakeOpenAIServer(replies=_agent_reply, faults=faults, seed=3, hang_s=3.0) as server:
        model = make_model({"backend": "openai", "model": "fake-policy", "base_url": server.base_url,
                            "max_retries": 4, "timeout_s": 1.5, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                            "concurrency": 4, "jitter_seed": 1})
        out = tmp_path / "solve.json"
        result = run_solve_shard(root / "shard.json", root / "corpus.json", root / "images", out,
                                 tmp_path / "traj", model, _settings(k=2, concurrency=4, retries=2))
        prompts = server.prompts_text()
        n_requests = server.request_count()
    stats = result["model_stats"]
    statuses = [r["status"] for r in result["rollouts"]]
    assert len(statuses) == 6 and set(statuses) <= {"graded", "infra_failed"}
    assert stats["retries"] > 0, stats  # faults really happened and were retried
    assert stats["retries"] <= stats["requests"] * 4
    assert n_requests >= stats["requests"]
    for r in result["rollouts"]:
        if r["status"] == "graded":
            assert r["reward"] == 0.0 and r["end_reason"] == "submitted"
        else:
            assert r["reward"] is None and r["infra_attempts"]
    # Nothing private ever reached the policy: truth values, test code, oracle lines.
    for t in tasks:
        for secret in hidden_truth_strings(read_json(t / "private" / "truth.json")):
            assert secret not in prompts, f"truth leaked: {secret[:60]}"
        for rel in ("tests/test_final_state.py", "tests/test_initial_state.py", "solution/solve.sh"):
            lines = [ln.strip() for ln in (t / rel).read_text().splitlines() if len(ln.strip()) >= 30]
            for ln in lines:
                assert ln not in prompts, f"{rel} leaked: {ln[:60]}"
        assert (t / "instruction.md").read_text().strip()[:200] in prompts
        # Hints are for the teacher side of OPSD only: never in a policy prompt.
        assert procedural_hint(t)[:120] not in prompts


@needs_bwrap
def test_killed_solve_run_redoes_only_unfinished_rollouts(corpus, tmp_path):
    root, tasks = corpus
    with FakeOpenAIServer(replies=_agent_reply, latency_s=0.4) as server:
        params = {"seed": 7, "runtime.backend": "bwrap", "runtime.exec_timeout_sec": 60, "runtime.cpu_sec": 60,
                  "runtime.memory_mb": 4096, "runtime.limits": {},
                  "solve": {"agent": "model", "model": "policy", "k": 2, "concurrency": 1, "turn_cap": 3,
                            "max_format_errors": 2, "command_timeout_sec": 30, "task_timeout_sec": 120,
                            "max_infra_retries": 1, "sampling": {"max_new_tokens": 32}, "cache_dir": None},
                  "models.policy": {"backend": "openai", "model": "fake", "base_url": server.base_url}}
        out = tmp_path / "solve.json"
        cmd = [sys.executable, "-m", "termforge.cli", "solve", "--params", json.dumps(params), "--manifest",
               str(root / "shard.json"), "--corpus", str(root / "corpus.json"), "--images-dir", str(root / "images"),
               "--trajectories", str(tmp_path / "traj"), "--out", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        checkpoint = Path(str(out) + ".partial.jsonl")
        deadline = time.time() + 120
        while time.time() < deadline and (not checkpoint.exists() or len(checkpoint.read_text().splitlines()) < 2):
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        finished = [json.loads(line) for line in checkpoint.read_text().splitlines()]
        assert 2 <= len(finished) < 6 and not out.exists()
        before = server.request_count()
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-2000:]
        assert f"{len(finished)} resumed from checkpoint" in res.stdout
        # Each unfinished rollout costs exactly two requests (look, submit); finished ones none.
        assert server.request_count() - before == 2 * (6 - len(finished))
    assert len(read_json(out)["rollouts"]) == 6
