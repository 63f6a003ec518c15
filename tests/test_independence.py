"""A second solution counts as a second opinion only when it is not the oracle again
(termforge.quality.independence): checked as a property over every procedural family's oracle and
the llm tests' oracles, each disguised by edits that change no behaviour (every name changed,
comments added, layout reflowed, quotes swapped), and against solutions written apart."""

import builtins
import keyword
import random
import re
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import make_signature, needs_bwrap
from termforge.generate.families import all_families
from termforge.generate.procedural import generate_task
from termforge.quality.independence import THRESHOLD, bound_names, repeats_oracle, similarity
from termforge.quality.validate import validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime

sys.path.insert(0, str(Path(__file__).parent))
import test_generate_llm as census_case  # noqa: E402
import test_generate_llm_independence as logs_case  # noqa: E402


def _oracles() -> dict[str, str]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fam in all_families():
            sig = make_signature(3, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0],
                                 corpus_kind=f"family-test-{fam.name}")
            task = generate_task(sig, Path(tmp) / "tasks", families=[fam])
            out[fam.name] = (task / "solution" / "solve.sh").read_text()
    out["llm_census"] = census_case.SOLVE_SH
    out["llm_logs"] = logs_case.ONE_LOG_SH.format(root="logs")
    return out


ORACLES = _oracles()
def disguise(script: str, rng: random.Random) -> str:
    """The same program another way round: every name the author chose renamed, comments and a
    statement that does nothing added, spacing inside lines widened."""
    renames = {n: f"{n}_{rng.randrange(10**6):06d}" for n in bound_names(script)
               if not keyword.iskeyword(n) and n not in dir(builtins) and len(n) > 1}
    if renames:
        script = re.sub(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(renames, key=len, reverse=True)))
                        + r")\b", lambda m: renames[m.group(1)], script)
    out = []
    for i, ln in enumerate(script.split("\n")):
        if i == 1:
            out.append("# the same steps, written again")
            out.append(": started")  # a statement that does nothing
        indent = ln[:len(ln) - len(ln.lstrip())]
        continued = out and out[-1].rstrip().endswith("\\")
        if rng.random() < 0.2 and not indent and not ln.startswith("#!") and not continued:
            out.append("# " + " ".join(rng.choice(("step", "here", "then", "now", "data")) for _ in range(3)))
        out.append(indent + re.sub(r"(?<=\S) (?=[=|>])", "  ", ln.lstrip()) if rng.random() < 0.5 else ln)
    return "\n".join(out)


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_the_oracle_disguised_is_still_the_oracle(name):
    oracle = ORACLES[name]
    for seed in range(5):
        copy = disguise(oracle, random.Random(f"{name}:{seed}"))
        assert copy != oracle
        assert similarity(oracle, copy) >= THRESHOLD, (name, seed, similarity(oracle, copy))
        assert repeats_oracle(oracle, copy)


def test_solutions_written_apart_are_second_opinions():
    pairs = {
        # A family's own second reference implementation (awk pipeline vs a Python loop).
        "log_level_filter": (ORACLES["log_level_filter"], None),
        # Flood fill vs union-find over the same pixels.
        "census": (census_case.SOLVE_SH, census_case.second_reply(
            '```json files\n[{"path": "/app/c/scan.png"}]\n```').split("```bash solve.sh\n")[1].rsplit("```", 1)[0]),
        # A Python loop over one file vs a Counter over a glob.
        "logs": (logs_case.ONE_LOG_SH.format(root="r"), logs_case.INDEPENDENT_SH.format(root="r")),
        # An awk pipeline vs a Python loop.
        "logs_awk": (logs_case.BOTH_LOGS_SH.format(root="r"), logs_case.ONE_LOG_SH.format(root="r")),
    }
    with tempfile.TemporaryDirectory() as tmp:
        fam = next(f for f in all_families() if f.name == "log_level_filter")
        sig = make_signature(3, fam.domains[0], "exact_text", "text_only", corpus_kind="family-test-log_level_filter")
        task = generate_task(sig, Path(tmp) / "t", families=[fam])
        pairs["log_level_filter"] = (ORACLES["log_level_filter"],
                                     (task / "solution" / "alternatives" / "python.sh").read_text())
    for name, (a, b) in pairs.items():
        assert similarity(a, b) < THRESHOLD, (name, similarity(a, b))
        assert repeats_oracle(a, b) is None


def test_short_scripts_are_copies_only_when_identical_after_normalising():
    one = "#!/bin/bash\nsort -u /app/in.txt > /app/out.txt\n"
    assert repeats_oracle(one, "#!/bin/bash\n# dedupe\nsort   -u /app/in.txt >/app/out.txt\n")
    assert repeats_oracle(one, "#!/bin/bash\nawk '!seen[$0]++' /app/in.txt | sort > /app/out.txt\n") is None


@needs_bwrap
def test_validation_refuses_a_second_solution_that_is_the_oracle_again(tmp_path):
    """A published llm task's second solution is checked again at validation: a copy of the oracle
    shipped as solution/alternatives/independent.sh is refused before it is run."""
    import json

    fam = next(f for f in all_families() if f.name == "log_level_filter")
    task = generate_task(make_signature(3, fam.domains[0], "exact_text", "text_only",
                                        corpus_kind="family-test-log_level_filter"), tmp_path / "t", families=[fam])
    meta = json.loads((task / "task.json").read_text())
    meta["provenance"] = {**meta.get("provenance", {}), "backend": "llm"}  # as the llm backend writes it
    (task / "task.json").write_text(json.dumps(meta))
    oracle = (task / "solution" / "solve.sh").read_text()
    (task / "solution" / "alternatives" / "python.sh").unlink()
    (task / "solution" / "alternatives" / "independent.sh").write_text(disguise(oracle, random.Random(0)))
    limits = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)
    v = validate_task(task, BwrapRuntime(), tmp_path / "images", limits)
    assert not v.kept and v.stage == "second_solution" and "independent.sh" in v.reason, (v.stage, v.reason)
    # The family's own second implementation, written apart, is a second opinion.
    again = generate_task(make_signature(3, fam.domains[0], "exact_text", "text_only",
                                         corpus_kind="family-test-log_level_filter"), tmp_path / "u", families=[fam])
    (task / "solution" / "alternatives" / "independent.sh").write_text(
        (again / "solution" / "alternatives" / "python.sh").read_text())
    v = validate_task(task, BwrapRuntime(), tmp_path / "images", limits)
    assert v.kept and "second_solution:independent.sh" in v.checks, (v.stage, v.reason)
