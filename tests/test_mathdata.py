"""The offline math set (deterministic, disjoint split, solutions that box their answer) and the
loaders and filters for real math data."""

from __future__ import annotations

import json

import pytest

from termforge.errors import TermforgeError
from termforge.evals.aime import extract_boxed, grade
from termforge.mathdata import (
    TEMPLATES,
    answer_matches,
    filter_rows,
    load_math_dataset,
    make_math_set,
    make_problem,
    write_math_set,
)


def test_same_seed_same_set_and_bytes(tmp_path):
    assert make_math_set(60, seed=11, heldout_fraction=0.2) == make_math_set(60, seed=11, heldout_fraction=0.2)
    assert make_math_set(60, seed=11, heldout_fraction=0.2) != make_math_set(60, seed=12, heldout_fraction=0.2)
    stats = write_math_set(tmp_path / "a", 40, seed=5, heldout_fraction=0.25)
    write_math_set(tmp_path / "b", 40, seed=5, heldout_fraction=0.25)
    for name in ("train.parquet", "heldout.parquet", "train.jsonl", "heldout.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert stats["train"] == 30 and stats["heldout"] == 10
    assert set(stats["templates"]) == set(TEMPLATES) and sum(stats["templates"].values()) == 40


def test_rows_do_not_depend_on_set_size():
    small, _ = make_math_set(10, seed=3, heldout_fraction=0)
    large, _ = make_math_set(30, seed=3, heldout_fraction=0)
    assert large[:10] == small


def test_split_is_disjoint_and_complete():
    train, heldout = make_math_set(90, seed=1, heldout_fraction=0.1)
    assert len(train) == 81 and len(heldout) == 9
    train_text = {r["problem"] for r in train}
    held_text = {r["problem"] for r in heldout}
    assert not train_text & held_text
    assert len(train_text) == 81 and len(held_text) == 9  # no duplicates inside a split either
    assert len({r["id"] for r in train + heldout}) == 90
    # A positive fraction always holds something out and always leaves something to train on.
    assert [len(s) for s in make_math_set(3, seed=1, heldout_fraction=0.01)] == [2, 1]
    assert [len(s) for s in make_math_set(3, seed=1, heldout_fraction=0.99)] == [1, 2]


def test_every_solution_boxes_its_integer_answer():
    train, heldout = make_math_set(270, seed=2024, heldout_fraction=0.1)
    for row in train + heldout:
        assert set(row) == {"id", "problem", "solution", "answer"}
        assert extract_boxed(row["solution"]) == row["answer"], row["id"]
        assert str(int(row["answer"])) == row["answer"], row["id"]
        assert "\\boxed" not in row["problem"] and row["answer"] not in ("",)


def test_templates_compute_what_they_claim():
    # Recompute a few answers by brute force from the problem's own numbers.
    import math
    import re

    checked = set()
    for index in range(len(TEMPLATES) * 6):
        row = make_problem(77, index)
        nums = [int(x) for x in re.findall(r"-?\d+", row["problem"])]
        kind = row["id"].split("-")[1]
        answer = int(row["answer"])
        if kind == "power_mod":
            base, exponent, m = nums
            assert answer == pow(base, exponent, m)
        elif kind == "gcd_lcm":
            x, y = nums
            assert answer == math.gcd(x, y) + math.lcm(x, y)
        elif kind == "divisor_count":
            (value,) = nums
            root = math.isqrt(value)
            pairs = sum(2 for d in range(1, root + 1) if value % d == 0)
            assert answer == pairs - (root * root == value)
        elif kind == "digit_sum":
            a, b = nums
            assert answer == sum(int(ch) for ch in str(a * b))
        elif kind == "arithmetic_series":
            a, d, n = nums
            assert answer == sum(a + k * d for k in range(n))
        else:
            continue
        checked.add(kind)
    assert len(checked) == 5


def test_generated_answers_grade_against_themselves():
    train, _ = make_math_set(9, seed=9, heldout_fraction=0)
    for row in train:
        assert grade(extract_boxed(row["solution"]), row["answer"]) == (True, "math_verify")


def test_load_local_jsonl_and_parquet(tmp_path):
    write_math_set(tmp_path, 12, seed=4, heldout_fraction=0.25)
    from_parquet = load_math_dataset(str(tmp_path / "train.parquet"), id_col="id")
    from_jsonl = load_math_dataset(str(tmp_path / "train.jsonl"), id_col="id")
    expected = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert from_parquet == from_jsonl == expected
    # Without an id column the position names the row.
    assert load_math_dataset(str(tmp_path / "heldout.jsonl"))[0]["id"] == "row-0"


def test_loader_names_missing_column(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"question": "q", "solution": "s \\\\boxed{3}", "final": "3"}\n')
    with pytest.raises(TermforgeError, match=r"dataset .*set\.jsonl has no column 'problem' \(columns: question, solution, final\)"):
        load_math_dataset(str(path))
    with pytest.raises(TermforgeError, match=r"opsd\.data\.answer_col: dataset .* has no column 'answer'"):
        load_math_dataset(str(path), problem_col="question", where="opsd.data")
    rows = load_math_dataset(str(path), problem_col="question", answer_col="final")
    assert rows == [{"id": "row-0", "problem": "q", "solution": "s \\boxed{3}", "answer": "3"}]
    # A set with no answer column takes the answer from the solution's last box.
    assert load_math_dataset(str(path), problem_col="question", answer_col=None)[0]["answer"] == "3"
    with pytest.raises(TermforgeError, match="no such file"):
        load_math_dataset(str(tmp_path / "missing.parquet"))


def test_loader_through_datasets_folder(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "ds" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"problem": "p", "solution": "worked \\boxed{12}"}]),
                   tmp_path / "ds" / "data" / "train-00000-of-00001.parquet")
    rows = load_math_dataset(str(tmp_path / "ds"), answer_col=None, cache_dir=tmp_path / "cache")
    assert rows == [{"id": "row-0", "problem": "p", "solution": "worked \\boxed{12}", "answer": "12"}]


def test_filters_report_and_refuse_empty_result(capsys):
    rows = [
        {"id": "a", "problem": "p", "solution": "x" * 50, "answer": "042"},
        {"id": "b", "problem": "p", "solution": "x" * 50, "answer": "\\frac{1}{2}"},
        {"id": "c", "problem": "p", "solution": "short", "answer": "7"},
        {"id": "d", "problem": "p", "solution": "x" * 50, "answer": ""},
        {"id": "e", "problem": "", "solution": "", "answer": None},
    ]
    kept = filter_rows(rows, answer_pattern=r"-?\d{1,6}", min_solution_chars=20, where="opsd.data")
    assert [r["id"] for r in kept] == ["a"]
    out = capsys.readouterr().out
    assert "opsd.data: kept 1 of 5 rows" in out
    assert r"(dropped 3 with an answer not matching -?\d{1,6}, 1 with a solution under 20 characters)" in out
    # Every filter off keeps every row, empty answers, problems and solutions included (the reference
    # trains on every row of its set); dropping empty answers is a setting of its own.
    assert [r["id"] for r in filter_rows(rows)] == ["a", "b", "c", "d", "e"]
    assert "kept 5 of 5 rows (no filter on)" in capsys.readouterr().out
    assert [r["id"] for r in filter_rows(rows, drop_empty_answers=True)] == ["a", "b", "c"]
    assert "(dropped 2 with an empty answer)" in capsys.readouterr().out
    with pytest.raises(TermforgeError, match=r"opsd\.data: no rows left after filtering 5 rows .*answer_pattern="
                                             r"'-\?\\\\d\{1,6\}' dropped 3, min_solution_chars=100 dropped 2"):
        filter_rows(rows, answer_pattern=r"-?\d{1,6}", min_solution_chars=100, where="opsd.data")


# Every answer form the trace's filter must tell apart, labelled by hand: is the stored string, once
# stripped of whitespace at both ends (the trace strips before matching), an optional minus sign and
# 1 to 6 digits, nothing before or after? (The earlier filter, AIME's
# normaliser on the stripped string with at most 6 digits, kept 12 of the 22 rejected here.)
TRACE_ANSWER_FORMS = [
    ("0", True), ("7", True), ("42", True), ("-3", True), ("-0", True), ("100", True), ("0042", True),
    ("999999", True), ("123456", True), ("-123456", True),
    ("+15", False), ("1,000", False), ("0000042", False), ("12.0", False), ("$42$", False),
    ("\\text{42}", False), (" 42", True), ("42 ", True), ("42\n", True), (" 42 ", True), ("\t-7\r\n", True),
    ("4 2", False), (" +15 ", False), ("1\\,000", False), ("5%", False),
    ("42^\\circ", False), ("1234567", False), ("-1234567", False), ("1000000", False), ("\\frac{1}{2}", False),
    ("3.5", False), ("x+1", False), ("\\boxed{42}", False), ("(1, 2)", False), ("", False), ("\u22125", False),
]


@pytest.mark.parametrize("answer, keep", TRACE_ANSWER_FORMS, ids=[repr(a) for a, _ in TRACE_ANSWER_FORMS])
def test_trace_answer_pattern_matches_the_stripped_string_in_full(answer, keep):
    assert answer_matches(answer, r"-?\d{1,6}") is keep
    assert answer_matches(None, r"-?\d{1,6}") is False


def test_answer_pattern_is_configurable():
    assert answer_matches("+15", r"[+-]?\d+") and not answer_matches("+15", r"-?\d{1,6}")
    rows = [{"id": str(i), "answer": a, "solution": "s"} for i, a in enumerate(["1", "1.5", "x"])]
    assert [r["id"] for r in filter_rows(rows, answer_pattern=r"\d+(\.\d+)?")] == ["0", "1"]
