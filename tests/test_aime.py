"""AIME grading and metrics: extraction edge cases, grading verdicts and paths, hand-computed
metrics, and a full run through run_aime_eval with canned model replies."""

from __future__ import annotations

import csv
import json
import math

import pytest

from termforge.errors import TermforgeError
from termforge.evals.aime import (
    build_prompt,
    default_ks,
    evaluate_generations,
    extract_boxed,
    grade,
    load_aime,
    majority_answer,
    normalize_answer,
    run_aime_eval,
)
from termforge.models.base import ChatModel, Completion, SamplingParams

# (model output, gold, expected extraction, expected correct, expected grading path)
GRADING_TABLE = [
    ("so the answer is \\boxed{42}.", "42", "42", True, "math_verify"),
    ("\\boxed{042}", "42", "042", True, "math_verify"),
    ("\\boxed{ 042 }", "42", " 042 ", True, "math_verify"),
    ("\\boxed{42}", "042", "42", True, "math_verify"),
    ("$\\boxed{\\frac{1}{2}}$", "0.5", "\\frac{1}{2}", True, "math_verify"),
    ("\\boxed{0.5}", "\\frac{1}{2}", "0.5", True, "math_verify"),
    ("\\boxed{\\frac{a}{b}}", "\\frac{a}{b}", "\\frac{a}{b}", True, "math_verify"),
    ("\\boxed{\\frac{a}{b}}", "42", "\\frac{a}{b}", False, "math_verify"),
    ("\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", "\\dfrac{\\sqrt{3}}{2}", True, "math_verify"),
    # The last box wins, even when an earlier one (inside the thinking block) was right.
    ("<think>maybe \\boxed{42}? no.</think> Final: \\boxed{41}", "42", "41", False, "math_verify"),
    ("<think>maybe \\boxed{41}? no.</think> Final: \\boxed{42}", "42", "42", True, "math_verify"),
    ("The answer is 42.", "42", None, False, "unformatted"),
    ("\\boxed{}", "42", "", False, "unformatted"),
    ("\\boxed{   }", "42", "   ", False, "unformatted"),
    ("\\boxed{42 \\text{ meters}}", "42", "42 \\text{ meters}", True, "math_verify"),
    ("\\boxed{\\text{forty-two}}", "42", "\\text{forty-two}", False, "math_verify"),
    # math-verify cannot parse a percent sign: the normalised strings decide.
    ("\\boxed{42\\%}", "42", "42\\%", True, "string"),
    ("\\boxed{???}", "42", "???", False, "string"),
    ("\\fbox{7}", "7", "7", True, "math_verify"),
    ("thus $\\boxed 7$.", "7", "7", True, "math_verify"),
    ("\\boxed{1,000}", "1000", "1,000", True, "math_verify"),
    ("\\boxed{\\{1, 2\\}}", "\\{1,2\\}", "\\{1, 2\\}", True, "math_verify"),
    # A truncated final box decides (as unformatted) rather than reviving the earlier guess.
    ("\\boxed{42} then later \\boxed{4", "42", None, False, "unformatted"),
]


@pytest.mark.parametrize("output,gold,extracted,correct,path", GRADING_TABLE)
def test_extract_and_grade_table(output, gold, extracted, correct, path):
    assert extract_boxed(output) == extracted
    # The timeout guards a parse that never ends; a busy machine must not reach it on these.
    assert grade(extract_boxed(output), gold, timeout=120) == (correct, path)


def test_extract_nested_braces_and_commands():
    assert extract_boxed("\\boxed{\\frac{\\binom{4}{2}}{3}}") == "\\frac{\\binom{4}{2}}{3}"
    assert extract_boxed("no box here") is None
    assert extract_boxed("") is None
    # `\boxedfoo` is a different command, not a box.
    assert extract_boxed("\\boxedfoo{3}") is None


def test_normalize_answer():
    assert normalize_answer(" 042 ") == "42"
    assert normalize_answer("$1,234$") == "1234"
    assert normalize_answer("\\text{7}") == "7"
    assert normalize_answer("90^\\circ") == "90"
    assert normalize_answer("12.00") == "12"
    assert normalize_answer("-0") == "0"
    assert normalize_answer("\\dfrac{1}{2}") == "\\frac{1}{2}"


def test_majority_vote_ties_break_on_first_appearance():
    # 7 and 042 each appear twice ("42" and "042" are one answer); 7 appears first.
    assert majority_answer(["7", "042", None, "42", "7", ""]) == ("7", 0)
    assert majority_answer(["42", "7", "7", "042"]) == ("42", 0)
    assert majority_answer([None, ""]) == (None, None)


def test_metrics_match_hand_computation():
    problems = [{"id": "p1", "answer": "42"}, {"id": "p2", "answer": "7"}, {"id": "p3", "answer": "100"}]
    generations = [
        # p1: 2 of 4 correct; majority 42 (2 votes vs 13 once, 5 once).
        ["\\boxed{42}", "\\boxed{13}", "\\boxed{042}", "\\boxed{5}"],
        # p2: 1 of 4 correct; the majority answer 3 (3 votes) is wrong.
        ["\\boxed{3}", "\\boxed{3}", "\\boxed{3}", "\\boxed{7}"],
        # p3: none correct, two unformatted.
        ["\\boxed{99}", "nothing", "\\boxed{}", "\\boxed{101}"],
    ]
    summary, rows = evaluate_generations(problems, generations)
    assert summary["n"] == 4 and summary["num_problems"] == 3
    assert summary["avg@4"] == pytest.approx((2 / 4 + 1 / 4 + 0) / 3)
    assert summary["pass@4"] == pytest.approx(2 / 3)
    assert summary["maj@4"] == pytest.approx(1 / 3)
    # pass@k = 1 - C(n-c, k) / C(n, k), averaged over problems.
    p2_1 = (1 - math.comb(2, 2) / math.comb(4, 2)) + (1 - math.comb(3, 2) / math.comb(4, 2)) + 0
    assert summary["pass@2"] == pytest.approx(p2_1 / 3)
    assert summary["pass@1"] == pytest.approx(summary["avg@4"])
    assert summary["formatted_rate"] == pytest.approx(10 / 12)
    assert summary["grading_paths"] == {"math_verify": 10, "string": 0, "unformatted": 2}
    assert [r["correct"] for r in rows] == [2, 1, 0]
    assert [r["maj_answer"] for r in rows] == ["42", "3", "99"]
    assert [r["maj_correct"] for r in rows] == [True, False, False]
    assert default_ks(4) == [1, 2] and default_ks(12) == [1, 2, 4, 8]


def test_evaluate_rejects_uneven_sample_counts():
    with pytest.raises(TermforgeError, match="problem 'b' has 1 samples"):
        evaluate_generations([{"id": "a", "answer": "1"}, {"id": "b", "answer": "2"}],
                             [["\\boxed{1}", "x"], ["\\boxed{2}"]])


def test_build_prompt_asks_for_a_box_and_switches_thinking():
    plain = build_prompt("What is 1+1?")
    assert plain[0]["role"] == "user" and "\\boxed{}" in plain[0]["content"]
    assert "step by step" in plain[0]["content"] and plain[0]["content"].endswith("What is 1+1?")
    assert build_prompt("Q", thinking=True)[0]["content"].endswith("/think")
    assert build_prompt("Q", thinking=False)[0]["content"].endswith("/no_think")


class CannedChat:
    """A stand-in exposing only `chat`: replies are looked up by a word in the problem text."""

    def __init__(self, replies: dict[str, list[str]]):
        self.replies = replies
        self.calls: list[tuple[int, object]] = []

    def chat(self, messages, n=1, sampling=None):
        self.calls.append((n, sampling))
        text = messages[-1]["content"]
        key = next(k for k in self.replies if k in text)
        return [Completion(text=t, prompt_tokens=10, completion_tokens=len(t), finish_reason="stop")
                for t in self.replies[key][:n]]


class CannedChatModel(ChatModel):
    """A real ChatModel subclass (batched `chat_many`) that answers from a table."""

    backend = "canned"

    def __init__(self, replies: dict[str, list[str]]):
        super().__init__("canned-v1")
        self.replies = replies
        self.batches: list[int] = []

    def chat_many(self, conversations, n=1, sampling=None):
        self.batches.append(len(conversations))
        out = []
        for conv in conversations:
            key = next(k for k in self.replies if k in conv[-1]["content"])
            out.append([Completion(text=t, prompt_tokens=5, completion_tokens=3, finish_reason="stop")
                        for t in self.replies[key][:n]])
        return out


PROBLEMS = [
    {"id": "alpha", "problem": "Compute alpha.", "answer": "042"},
    {"id": "beta", "problem": "Compute beta.", "answer": "5"},
    {"id": "gamma", "problem": "Compute gamma.", "answer": "1"},
]
REPLIES = {
    "alpha": ["<think>\\boxed{41}</think> \\boxed{42}", "\\boxed{42}", "I give up"],
    "beta": ["\\boxed{5}", "\\boxed{6}", "\\boxed{6}"],
    "gamma": ["\\boxed{2}", "\\boxed{\\frac{2}{2}}", "\\boxed{3}"],
}


def test_run_aime_eval_writes_results(tmp_path):
    model = CannedChat(REPLIES)
    sampling = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=64, seed=1)
    summary = run_aime_eval(model, PROBLEMS, 3, sampling, tmp_path / "out", thinking=True)

    assert model.calls == [(3, sampling)] * 3
    assert summary["avg@3"] == pytest.approx((2 / 3 + 1 / 3 + 1 / 3) / 3)
    assert summary["pass@3"] == pytest.approx(1.0)
    assert summary["maj@3"] == pytest.approx(1 / 3)  # alpha: 42 wins; beta: 6 wins; gamma: tie -> 2 first
    assert summary["sampling"]["top_p"] == 0.95 and summary["thinking"] is True

    out = tmp_path / "out"
    assert json.loads((out / "summary.json").read_text()) == summary
    with open(out / "per_problem.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["id"] for r in rows] == ["alpha", "beta", "gamma"]
    assert [r["correct"] for r in rows] == ["2", "1", "1"]
    assert rows[0]["maj_answer"] == "42" and rows[0]["maj_correct"] == "1" and rows[0]["formatted"] == "2"
    lines = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(lines) == 9
    assert lines[0]["problem_id"] == "alpha" and lines[0]["extracted"] == "42" and lines[0]["correct"] is True
    assert lines[2]["grading_path"] == "unformatted" and lines[2]["text"] == "I give up"
    assert not (out / ".generations.ckpt.jsonl").exists()


def test_run_aime_eval_batches_and_is_deterministic(tmp_path):
    model = CannedChatModel(REPLIES)
    first = run_aime_eval(model, PROBLEMS, 2, None, tmp_path / "a", batch_size=2)
    assert model.batches == [2, 1]
    run_aime_eval(CannedChatModel(REPLIES), PROBLEMS, 2, None, tmp_path / "b", batch_size=2)
    for name in ("summary.json", "per_problem.csv", "generations.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert first["model"] == {"backend": "canned", "model": "canned-v1"}


def test_run_aime_eval_resumes_from_checkpoint(tmp_path):
    out = tmp_path / "out"

    class DiesAfterFirstBatch(CannedChatModel):
        def chat_many(self, conversations, n=1, sampling=None):
            if self.batches:
                raise RuntimeError("killed")
            return super().chat_many(conversations, n, sampling)

    with pytest.raises(RuntimeError):
        run_aime_eval(DiesAfterFirstBatch(REPLIES), PROBLEMS, 2, None, out, batch_size=2)
    assert len((out / ".generations.ckpt.jsonl").read_text().splitlines()) == 2
    resumed = CannedChatModel(REPLIES)
    run_aime_eval(resumed, PROBLEMS, 2, None, out, batch_size=2)
    assert resumed.batches == [1]  # only gamma was sampled again
    assert len((out / "generations.jsonl").read_text().splitlines()) == 6


def test_load_aime_local_files_and_columns(tmp_path):
    path = tmp_path / "aime.jsonl"
    path.write_text('{"ID": "2025-I-1", "Problem": "Find x.", "Answer": 70}\n'
                    '{"ID": "2025-I-2", "Problem": "Find y.", "Answer": "588"}\n')
    problems = load_aime(str(path), problem_col="Problem", answer_col="Answer", id_col="ID")
    assert problems == [{"id": "2025-I-1", "problem": "Find x.", "answer": "70"},
                        {"id": "2025-I-2", "problem": "Find y.", "answer": "588"}]
    with pytest.raises(TermforgeError, match=r"eval\.aime\.answer_col: dataset .* has no column 'answer' \(columns: ID, Problem, Answer\)"):
        load_aime(str(path), problem_col="Problem", where="eval.aime")
    # Without an id column the problems are numbered.
    assert [p["id"] for p in load_aime(str(path), problem_col="Problem", answer_col="Answer")] == ["0", "1"]


def test_load_aime_hub_layout_through_datasets(tmp_path):
    # The Hub branch goes through datasets.load_dataset; a local folder laid out like the
    # HuggingFaceH4/aime_2024 snapshot (split "train", int64 ids) exercises it offline.
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "aime_2024" / "data"
    folder.mkdir(parents=True)
    table = pa.Table.from_pylist([
        {"id": 60, "problem": "P one", "solution": "s", "answer": "204", "url": "u", "year": "2024"},
        {"id": 61, "problem": "P two", "solution": "s", "answer": "025", "url": "u", "year": "2024"},
    ])
    pq.write_table(table, folder / "train-00000-of-00001.parquet")
    problems = load_aime(str(tmp_path / "aime_2024"), cache_dir=tmp_path / "hf-cache")
    assert problems == [{"id": "60", "problem": "P one", "answer": "204"},
                        {"id": "61", "problem": "P two", "answer": "025"}]
    with pytest.raises(TermforgeError, match="could not be loaded"):
        load_aime(str(tmp_path / "aime_2024"), split="test", cache_dir=tmp_path / "hf-cache")


def test_grade_works_off_the_main_thread():
    # math-verify's timeout uses SIGALRM, which only the main thread may set; a grading worker
    # thread must still get a verdict (without the alarm) instead of an error.
    import threading

    results = []
    worker = threading.Thread(target=lambda: results.append(grade("\\frac{84}{2}", "42", timeout=5)))
    worker.start()
    worker.join()
    assert results == [(True, "math_verify")]
