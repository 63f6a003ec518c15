"""The LLM judge and the extraction probe, end to end against a local OpenAI-protocol server: a
draft the offline gate passes but a model shows to leak goes back for repair (told the kind, not
the text), both checks are counted and cached, and their recall on the hint corpus is reported."""

import json

import pyarrow.parquet as pq
import pytest

from fake_openai_server import FakeOpenAIServer
from termforge.hints import run_hints
from termforge.hints.corpus import corpus_tasks
from termforge.hints.judge import parse_judgement


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return corpus_tasks(tmp_path_factory.mktemp("judge"), seeds=(0,),
                        families=("binary_passphrase_recovery", "sqlite_shop_questions"))


def _spec(server, tmp_path, name):
    return {"backend": "openai", "model": name, "base_url": server.base_url, "max_retries": 0,
            "cache_dir": str(tmp_path / "cache")}


def test_parse_judgement():
    assert parse_judgement('{"leak": true, "kinds": ["answer"], "reason": "states it"}').leak is True
    assert parse_judgement('<think>hmm</think> {"leak": false, "kinds": []}').leak is False
    assert parse_judgement("Looks fine to me.") is None


def test_judge_and_probe_in_the_stage(tasks, tmp_path):
    task_dir = tasks[("binary_passphrase_recovery", 0)]
    truth = json.loads((task_dir / "private" / "truth.json").read_text())
    # Passes the offline gate (no value of the key in it) but tells the probe where to look: the
    # scripted probe "extracts" the passphrase whenever the hint says the word "dictionary".
    sneaky = ("Run /app/bin/licensed on guesses drawn from the dictionary word list and write the two lines "
              "to /app/recovered.txt.")
    clean = ("Run /app/bin/licensed on a few wrong guesses, record the exit status of each, and if it moves "
             "with how much of the guess is right grow the passphrase one character at a time; then write "
             "the two lines to /app/recovered.txt.")

    def reply(messages):
        system, user = messages[0]["content"], messages[-1]["content"]
        if system.startswith("You audit hints"):
            leak = "dictionary" in user.split("## Hint under review")[1]
            return json.dumps({"leak": leak, "kinds": ["hidden_parameter"] if leak else [], "reason": "x"})
        if system.startswith("You are solving"):
            return f"passphrase={truth['passphrase']}" if "dictionary" in user else "passphrase=unknown"
        return sneaky if len(messages) == 2 else clean

    with FakeOpenAIServer(replies=reply) as server:
        cov = run_hints([task_dir], "llm", tmp_path / "out", model=_spec(server, tmp_path, "writer"),
                        judge=_spec(server, tmp_path, "judge"), probe=_spec(server, tmp_path, "probe"),
                        max_rounds=2, judge_corpus=6)
        bodies = server.chat_bodies()
    assert cov["counts"]["hinted"] == 1 and cov["repaired"] == 1
    [row] = pq.read_table(tmp_path / "out" / "demos.parquet").to_pylist()
    assert row["demo"] == clean
    first = json.loads(row["gate_report"])["rounds"][0]
    assert {f["kind"] for f in first["findings"]} == {"judge_leak", "probe_leak"}
    assert truth["passphrase"] not in row["gate_report"]
    # The writer's repair request names the kinds and quotes nothing.
    repair = [b for b in bodies if b["model"] == "writer"][1]["messages"][-1]["content"]
    assert "reviewer" in repair and "dictionary" not in repair and truth["passphrase"] not in repair
    # Counted: judge twice (draft, repair); probe once without the hint (baseline) and twice with.
    assert cov["checks"]["judge"]["calls"] == 2 and cov["checks"]["judge"]["flagged"] == 1
    assert cov["checks"]["probe"]["calls"] == 3 and cov["checks"]["probe"]["flagged"] == 1
    corpus = cov["checks_corpus"]
    assert corpus["leaks"] == 6 and corpus["honest"] == 3
    assert set(corpus) >= {"judge", "probe", "any"} and 0.0 <= corpus["judge"]["recall"] <= 1.0

    # A rerun is answered from the response cache and gives the same bytes.
    with FakeOpenAIServer(replies=reply) as server:
        cov2 = run_hints([task_dir], "llm", tmp_path / "out2", model=_spec(server, tmp_path, "writer"),
                         judge=_spec(server, tmp_path, "judge"), probe=_spec(server, tmp_path, "probe"),
                         max_rounds=2)
        assert server.request_count() == 0
    assert cov2["checks"]["judge"]["cached"] == 2
    assert (tmp_path / "out" / "demos.parquet").read_bytes() == (tmp_path / "out2" / "demos.parquet").read_bytes()


def test_a_probe_guess_without_the_hint_does_not_count(tasks, tmp_path):
    task_dir = tasks[("sqlite_shop_questions", 0)]
    answers = json.loads((task_dir / "private" / "truth.json").read_text())["answers"]
    hint = ("Open /app/shop.db with sqlite3, read the schema, and cross-check every answer with a second query "
            "before you write /app/answers.txt.")

    def reply(messages):
        if messages[0]["content"].startswith("You are solving"):
            return f"q3: {answers['q3']}"  # the same guess with or without the hint
        return hint

    with FakeOpenAIServer(replies=reply) as server:
        cov = run_hints([task_dir], "llm", tmp_path / "out", model=_spec(server, tmp_path, "w"),
                        probe=_spec(server, tmp_path, "p"))
    assert cov["counts"]["hinted"] == 1 and cov["checks"]["probe"]["flagged"] == 0
    assert cov["checks"]["judge"] is None


def test_the_report_shows_the_checks_and_their_corpus_recall(tmp_path):
    from termforge.report.build import _Builder

    (tmp_path / "hints").mkdir()
    (tmp_path / "hints" / "coverage.json").write_text(json.dumps({
        "backend": "llm", "model": "openai:w", "repaired": 1, "cleaned": 2,
        "counts": {"hinted": 3, "dropped_leak": 1, "refused": 1, "not_attempted": 0}, "by_domain": {},
        "checks": {"judge": {"calls": 9, "cached": 4, "flagged": 2, "unparsed": 0}, "probe": None},
        "checks_corpus": {"leaks": 40, "honest": 20, "judge": {"recall": 0.85, "false_positive_rate": 0.05},
                          "probe": {"recall": 0.5, "false_positive_rate": 0.0},
                          "any": {"recall": 0.9, "false_positive_rate": 0.05}}}))
    builder = _Builder(tmp_path, {})
    builder.hints = json.loads((tmp_path / "hints" / "coverage.json").read_text())
    text = " ".join(str(p) for p in builder.hints_section().parts)
    assert "LLM judge: 9 calls (4 cached), 2 flagged" in text and "2 replies had chatter cut off" in text
    assert "judge on the leak corpus: recall 0.85, false positives 0.05" in text
