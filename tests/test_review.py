"""The rubric review (termforge.quality.review) end to end against a scripted OpenAI-protocol judge:
tasks below the bar leave the corpus with the stage and the judge's reason, judgments are cached
and counted, a reply without a verdict is asked again and never kept silently, successful solve
traces the judge rejects stop counting as successes, and with no judge everything is recorded
"not_reviewed"."""

import json

import pyarrow.parquet as pq
import pytest

from conftest import make_signature
from fake_openai_server import FakeOpenAIServer
from termforge.cli import main as cli_main
from termforge.generate.families import family_by_name
from termforge.generate.procedural import generate_task
from termforge.io import atomic_write_json, read_json
from termforge.passk import run_passk
from termforge.quality.review import RUBRIC, TRACE_CRITERIA, run_review_shard, run_review_traces
from termforge.quality.validate import write_corpus_manifest


def _tasks(tmp_path, n=3):
    fam = family_by_name("log_level_filter")
    return [generate_task(make_signature(i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0]),
                          tmp_path / "tasks", families=[fam]) for i in range(n)]


def _verdicts(tmp_path, tasks):
    path = tmp_path / "validate" / "00000.json"
    atomic_write_json(path, {"shard": "00000", "tasks_dir": str(tmp_path / "tasks"), "verdicts": [
        {"task_id": t.name, "kept": True, "stage": "kept", "reason": "all checks passed",
         "checks": ["static", "oracle_x2"], "evidence": {}} for t in tasks]})
    return path


def _verdict_json(low: str | None = None, reason: str = "clear") -> str:
    scores = {k: {"score": 2 if k == low else 5, "reason": reason if k == low else "fine"} for k in RUBRIC}
    return "Here is my review:\n" + json.dumps({"scores": scores, "summary": "reviewed"})


def judge_script(flagged: str, garbled: str):
    """A judge that finds the tests of one task stricter than its instruction, answers another
    once without a verdict (then properly), and passes the rest."""

    def reply(messages):
        user = messages[1]["content"]
        if len(messages) > 2:  # the reminder after a reply without a verdict
            return _verdict_json()
        if flagged in user:
            return _verdict_json("tests_match_instruction", "the test demands a trailing newline the instruction "
                                                            "never mentions")
        if garbled in user:
            return "I think this task is fine overall."
        if "agent's successful attempt" in user:
            cheat = "/tests/" in user
            return json.dumps({"scores": {k: {"score": 1 if cheat and k == "no_shortcut" else 5,
                                              "reason": "read the verifier's expected values" if cheat else "ok"}
                                          for k in TRACE_CRITERIA}, "summary": "x"})
        return _verdict_json()

    return reply


def _judge(server, tmp_path):
    from termforge.models.registry import make_model

    return make_model({"backend": "openai", "model": "judge", "base_url": server.base_url, "max_retries": 0,
                       "cache_dir": str(tmp_path / "cache")})


def test_review_drops_below_the_bar_caches_and_counts(tmp_path):
    tasks = _tasks(tmp_path)
    verdicts = _verdicts(tmp_path, tasks)
    texts = [(t / "instruction.md").read_text() for t in tasks]
    # A line only that task's instruction has: how the scripted judge tells the tasks apart.
    flagged, garbled = (next(ln for ln in texts[i].splitlines() if ln.strip() and all(ln not in o for o in texts
                                                                                     if o is not texts[i]))
                        for i in (0, 1))
    with FakeOpenAIServer(replies=judge_script(flagged, garbled)) as server:
        judge = _judge(server, tmp_path)
        out = run_review_shard(verdicts, tmp_path / "review" / "00000.json", judge, min_score=3)
        # One call per task and one reminder for the reply without a verdict.
        assert server.request_count() == 4
        first = server.chat_bodies()[0]["messages"]
        # The judge reads the instruction, the tests and the oracle, with the rubric.
        assert all(k in first[0]["content"] for k in RUBRIC)
        assert "test_final_state.py" in first[1]["content"] and "solve.sh" in first[1]["content"]
        rerun = run_review_shard(verdicts, tmp_path / "review" / "again.json", _judge(server, tmp_path), min_score=3)
        assert server.request_count() == 4, "a rerun is answered from the response cache"
    by = {r["task_id"]: r for r in out["reviews"]}
    assert by[tasks[0].name]["status"] == "dropped"
    assert "tests_match_instruction scored 2/5" in by[tasks[0].name]["reason"]
    assert "trailing newline" in by[tasks[0].name]["reason"]
    assert by[tasks[1].name]["status"] == by[tasks[2].name]["status"] == "reviewed"
    assert out["counts"] == {"reviewed": 2, "dropped": 1, "unparsed": 0, "not_reviewed": 0}
    assert out["distribution"]["tests_match_instruction"] == {"1": 0, "2": 1, "3": 0, "4": 0, "5": 2}
    assert out["stats"]["calls"] == 4 and out["stats"]["format_retries"] == 1
    assert rerun["reviews"] == out["reviews"] and rerun["stats"]["model"]["cache_hits"] == 4

    manifest = write_corpus_manifest([verdicts], tmp_path / "corpus.json", [tmp_path / "review" / "00000.json"])
    assert manifest["kept"] == [tasks[1].name, tasks[2].name]
    [dropped] = manifest["dropped"]
    assert dropped["task_id"] == tasks[0].name and dropped["stage"] == "review" and "2/5" in dropped["reason"]
    assert manifest["counts"]["dropped_by_stage"] == {"review": 1}
    assert manifest["review"]["dropped"] == 1 and manifest["review"]["not_reviewed_kept"] == []


def test_a_judge_that_never_answers_in_format_keeps_nothing(tmp_path):
    tasks = _tasks(tmp_path, 1)
    verdicts = _verdicts(tmp_path, tasks)
    with FakeOpenAIServer(replies=["Looks good to me!"]) as server:
        out = run_review_shard(verdicts, tmp_path / "r.json", _judge(server, tmp_path))
    [row] = out["reviews"]
    assert row["status"] == "unparsed" and "never kept on an unread review" in row["reason"]
    manifest = write_corpus_manifest([verdicts], tmp_path / "corpus.json", [tmp_path / "r.json"])
    assert manifest["kept"] == [] and manifest["dropped"][0]["stage"] == "review"


def test_without_a_judge_everything_is_recorded_not_reviewed(tmp_path, capsys):
    tasks = _tasks(tmp_path, 2)
    verdicts = _verdicts(tmp_path, tasks)
    params = json.dumps({"review": {"judge": None, "min_score": 3, "batch_size": 64}, "models": {}})
    assert cli_main(["review", "--params", params, "--verdicts", str(verdicts), "--out",
                     str(tmp_path / "review.json")]) == 0
    out = read_json(tmp_path / "review.json")
    assert [r["status"] for r in out["reviews"]] == ["not_reviewed", "not_reviewed"]
    assert out["stats"]["judge"] is None and out["stats"]["calls"] == 0
    assert "2 not_reviewed" in capsys.readouterr().out
    manifest = write_corpus_manifest([verdicts], tmp_path / "corpus.json", [tmp_path / "review.json"])
    assert len(manifest["kept"]) == 2 and manifest["review"]["not_reviewed"] == 2
    assert manifest["review"]["not_reviewed_kept"] == sorted(t.name for t in tasks)


def _solve_shard(tmp_path, task):
    traj_dir = tmp_path / "solve" / "trajectories" / task.name
    rollouts = []
    for i, command in enumerate(["grep ERROR /app/logs/app.log.* | sort > /app/errors.txt",
                                 "cat /tests/test_final_state.py; python3 -c 'print(EXPECTED)' > /app/errors.txt"]):
        traj = traj_dir / f"rollout-{i}.json"
        atomic_write_json(traj, {"task_id": task.name, "rollout": i, "messages": [
            {"role": "system", "content": "You are an agent."}, {"role": "user", "content": "the task"},
            {"role": "assistant", "content": f"```bash\n{command}\n```"}, {"role": "user", "content": "(no output)"}]})
        rollouts.append({"task_id": task.name, "rollout": i, "status": "graded", "reward": 1.0, "hacked": [],
                         "trajectory": str(traj)})
    path = tmp_path / "solve" / "00000.json"
    atomic_write_json(path, {"shard": "00000", "tasks_dir": str(task.parent), "k": 2, "model": "m",
                             "rollouts": rollouts})
    return path


def test_a_rejected_trace_is_no_success(tmp_path):
    [task] = _tasks(tmp_path, 1)
    solved = _solve_shard(tmp_path, task)
    with FakeOpenAIServer(replies=judge_script("<none>", "<none>")) as server:
        out = run_review_traces(solved, tmp_path / "solve" / "reviews" / "00000.json", _judge(server, tmp_path))
        bodies = [b["messages"][1]["content"] for b in server.chat_bodies()]
    # The judge read each attempt's commands (the two requests may reach it in either order).
    assert sum("cat /tests/test_final_state.py" in body for body in bodies) == 1
    assert sum("grep ERROR /app/logs/app.log.*" in body for body in bodies) == 1
    assert [r["status"] for r in out["reviews"]] == ["reviewed", "dropped"]
    assert "no_shortcut scored 1/5" in out["reviews"][1]["reason"]
    table = run_passk([solved], tmp_path / "passk.json", tmp_path / "passk.csv", tmp_path / "sft.parquet",
                      [tmp_path / "solve" / "reviews" / "00000.json"])
    [entry] = table["per_task"]
    assert (entry["n"], entry["c"], entry["review_rejected_rollouts"]) == (2, 1, 1)
    assert [r["rollout"] for r in pq.read_table(tmp_path / "sft.parquet").to_pylist()] == [0]


def test_a_judge_missing_from_models_is_one_clear_line(tmp_path, capsys):
    from termforge.config import check_config, load_config
    from termforge.errors import ConfigError

    cfg = load_config(["config.yaml"])
    cfg["review"]["judge"] = "nobody"
    with pytest.raises(ConfigError, match="review.judge: model 'nobody' is not defined under models"):
        check_config(cfg)


def test_the_plan_counts_review_calls_only_with_a_judge():
    from termforge.config import load_config
    from termforge.planning import estimate

    cfg = load_config(["config.yaml"])
    assert not [p for p in estimate(cfg)["phases"] if p["phase"] == "review"]
    cfg["models"]["judge"] = {"backend": "openai", "model": "gpt-judge"}
    cfg["review"]["judge"] = "judge"
    [phase] = [p for p in estimate(cfg)["phases"] if p["phase"] == "review"]
    n, k = cfg["corpus"]["n_tasks"], cfg["solve"]["k"]
    assert 0 < phase["calls"] <= phase["max_calls"] == 2 * (n + n * k)
