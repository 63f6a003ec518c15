"""Mutation testing of the family verifiers (termforge.quality.mutation): perturbations of the
oracle's outputs that change the answer score 0, perturbations the instruction allows score 1.

A representative slice: every family with a seeded sample of its mutants, and the five defects
found by mutation testing pinned one by one. bench/bench_mutation.py runs every mutant of every
family over several seeds and prints the kill rate.
"""

from __future__ import annotations

import random

import pytest

from conftest import make_signature, needs_bwrap
from termforge.generate.families import all_families, family_by_name
from termforge.generate.procedural import generate_task
from termforge.quality.mutation import kill_rate, mutants, output_paths, run_mutants
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.verifier import run_oracle, run_verifier

pytestmark = needs_bwrap
LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)


def _task(name, tmp_path, index=11):
    fam = family_by_name(name)
    sig = make_signature(index, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
    return generate_task(sig, tmp_path / "tasks", families=[fam])


def test_mutants_are_named_and_classified(tmp_path):
    task = _task("regional_revenue_report", tmp_path)
    data = b"region,paid_orders,revenue\nwest,3,120.50\neast,2,99.00\n"
    got = {m.name.split("@")[0]: m for m in mutants(task, {"/app/report.csv": data})}
    assert {"truncated", "number_plus_1", "number_minus_1", "nan", "inf", "line_dropped", "line_duplicated",
            "trailing_blank_line"} <= set(got)
    assert got["trailing_blank_line"].expect == 1.0 and got["line_dropped"].expect == 0.0
    # "Sort rows by revenue, highest first": order matters here.
    assert got["lines_reordered"].expect == 0.0
    assert b"nan" in got["nan"].content and got["number_plus_1"].content != data
    # A program output: the planted bug restored is the answer-changing mutant, no text operators.
    prog = {m.name.split("@")[0] for m in mutants(task, {"/app/x.py": b"print(2)\n"}, {"/app/x.py": b"print(1)\n"})}
    assert prog == {"truncated", "bug_restored"}


# Each defect mutation testing found, as the mutant that used to survive (or the allowed one
# that used to be rejected).
DEFECTS = {
    "tone_inventory": "nan",
    "sqlite_shop_questions": "line_duplicated",
    "png_shape_census": "wrong_case",
    "regional_revenue_report": "trailing_blank_line",
}


@pytest.mark.parametrize("family", sorted(DEFECTS))
def test_fixed_defect(family, tmp_path):
    task = _task(family, tmp_path)
    results = run_mutants(task, BwrapRuntime(), tmp_path / "images", LIMITS, names=(DEFECTS[family],))
    assert results, f"no {DEFECTS[family]} mutant for {family}"
    assert all(r["ok"] for r in results), results


def test_permission_policy_checks_directory_modes(tmp_path):
    task = _task("permission_policy", tmp_path)
    rt = BwrapRuntime()
    image = rt.build(task, tmp_path / "images").image
    with rt.start(image, LIMITS) as session:
        assert run_oracle(session, task).ok
        assert run_verifier(session, task).reward == 1.0
        # "Directories are not part of the policy: leave them as they are."
        session.exec("find /app/srv -mindepth 1 -type d | head -1 | xargs chmod 0777")
        verdict = run_verifier(session, task)
    assert verdict.reward == 0.0 and verdict.failed == 1, verdict.output


@pytest.mark.parametrize("fam", all_families(), ids=lambda f: f.name)
def test_family_kills_a_sample_of_its_mutants(fam, tmp_path):
    task = _task(fam.name, tmp_path, index=5)
    if not output_paths(task):
        pytest.skip(f"{fam.name} declares no output files (its final test inspects the tree itself)")
    rng = random.Random(fam.name)
    # Sample by operator, so the slice stays small: the answer-changing ones plus the allowed ones.
    ops = ["bug_restored", "format_only", "number_plus_1", "numbers_scaled", "nan", "line_dropped", "line_duplicated", "wrong_case"]
    picked = ("truncated", *rng.sample(ops, 3), "trailing_blank_line", "lines_reordered")
    results = run_mutants(task, BwrapRuntime(), tmp_path / "images", LIMITS, names=picked)
    k = kill_rate(results)
    assert k["answer_changing"] >= 1, (fam.name, results)
    assert not k["survivors"] and not k["rejected_allowed"], (fam.name, k)


def _sums(data: bytes) -> tuple[list[bytes], float, int]:
    """What an aggregate-only check sees: each line's first field, the total of the lines' last
    numbers, the line count."""
    import re

    lines = [ln for ln in data.split(b"\n") if ln.strip()]
    keys = [re.split(rb"[,\s]", ln)[0] for ln in lines]
    total = sum(float(re.findall(rb"-?\d+(?:\.\d+)?", ln)[-1]) for ln in lines if re.search(rb"\d", ln))
    return keys, round(total, 6), len(lines)


def test_exchange_mutants_keep_every_aggregate_and_change_the_answer(tmp_path):
    task = _task("regional_revenue_report", tmp_path)
    data = b"region,paid_orders,revenue\nwest,3,120.50\neast,2,99.00\nnorth,4,10.25\n"
    got = {m.name.split("@")[0]: m for m in mutants(task, {"/app/report.csv": data})}
    assert {"values_swapped", "values_rotated", "fields_swapped"} <= set(got)
    for kind in ("values_swapped", "values_rotated"):
        m = got[kind]
        assert m.expect == 0.0 and m.content != data
        assert _sums(m.content) == _sums(data), kind  # keys, total, line count and order kept
    assert got["fields_swapped"].expect == 0.0
    assert sorted(got["fields_swapped"].content.split(b"\n")[1].split(b",")) != \
        sorted(got["fields_swapped"].content.split(b"\n")[0].split(b","))
    # Values that only permute whole lines are a reorder: allowed where the instruction says any order.
    (task / "instruction.md").write_text("List the values, one per line, in any order.\n")
    same = {m.name.split("@")[0]: m.expect for m in mutants(task, {"/app/v.txt": b"1\n3\n5\n"})}
    assert same["values_swapped"] == 1.0 and same["values_rotated"] == 1.0


def test_a_final_test_of_aggregates_only_is_dropped(tmp_path):
    """Issue 40: a final test that checks the set of keys, the total and the order passes a report
    with two regions' figures swapped. Every other mutant changes an aggregate and is killed."""
    from termforge.quality.validate import validate_task

    task = _task("regional_revenue_report", tmp_path)
    rt = BwrapRuntime()
    [path] = output_paths(task)
    with rt.start(rt.build(task, tmp_path / "images").image, LIMITS) as session:
        assert run_oracle(session, task).ok
        data = session._host_path(path).read_bytes()
    keys, total, count = _sums(data)
    (task / "tests" / "test_final_state.py").write_text(
        "import re\n\n\ndef test_aggregates():\n"
        f"    lines = [ln for ln in open({path!r}, 'rb').read().split(b'\\n') if ln.strip()]\n"
        f"    assert [re.split(rb'[,\\s]', ln)[0] for ln in lines] == {keys!r}\n"
        "    total = sum(float(re.findall(rb'-?\\d+(?:\\.\\d+)?', ln)[-1]) for ln in lines if re.search(rb'\\d', ln))\n"
        f"    assert round(total, 6) == {total!r} and len(lines) == {count}\n")
    v = validate_task(task, rt, tmp_path / "images", LIMITS)
    assert not v.kept and v.stage == "mutation", (v.stage, v.reason)
    assert "values_swapped@" in v.reason or "values_rotated@" in v.reason, v.reason
