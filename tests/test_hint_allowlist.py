"""The hint gate's allow-list for specifics (hints/specifics.py): every specific a hint states must
come from what the agent is given, whatever its encoding; answer values, planted bugs' identifiers
and the verifier's fixed cases are leaks even when the data shows them; quoting the instruction is
never a leak. Cases from issue 40 first, then encodings no detector was written for."""

import base64
import json

import pytest

from termforge.hints.corpus import corpus_tasks
from termforge.hints.gate import LEAK_FINDINGS, check_hint

FAMILIES = ("regional_revenue_report", "python_edge_case_fix", "legacy_awk_port", "decay_half_life_fit",
            "binary_passphrase_recovery", "sqlite_shop_questions", "account_audit", "shell_script_fix")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return {fam: d for (fam, _), d in corpus_tasks(tmp_path_factory.mktemp("allow"), seeds=(0,),
                                                      families=FAMILIES).items()}


def _truth(task_dir):
    return json.loads((task_dir / "private" / "truth.json").read_text())


def _leaks(hint, task_dir):
    return set(check_hint(hint, task_dir, max_words=400).kinds()) & set(LEAK_FINDINGS)


REV = "Parse both CSVs under /app/data with a CSV reader, trim and lower-case region and status"


# -- the failing cases of issue 40 ------------------------------------------------------------------


def test_a_sentence_naming_the_answer_row_is_a_leak(tasks):
    # The top region is in the data file the agent reads, and it is the answer's key.
    revenue = tasks["regional_revenue_report"]
    top = _truth(revenue)["expected_rows"][0].split(",")[0]
    assert top in (revenue / "environment" / "fixtures" / "customers.csv").read_text()
    hint = f"{REV}. The region with the highest paid revenue is {top}, so check your top row against that."
    assert "answer_value" in _leaks(hint, revenue)
    # The same sentence without the name is method guidance.
    assert check_hint(f"{REV}. Check which region has the highest paid revenue by hand.", revenue).passed


def test_a_paraphrase_of_the_planted_bugs_in_the_codes_identifiers_is_a_leak(tasks):
    fix = tasks["python_edge_case_fix"]
    hint = ("Read /app/topwords.py against the specification. The ranked list is sorted on -kv[1] alone, so give the "
            "key a second element, and the loop over range(k) indexes ranked past its end; slice it instead.")
    assert "bug_identifier" in _leaks(hint, fix)
    shell = tasks["shell_script_fix"]
    [script] = [p.name for p in (shell / "environment" / "fixtures").iterdir() if p.suffix == ".sh"]
    hint = (f"Read /app/{script} against the specification. Count with grep -c '' instead of wc -l so n includes a "
            "last line without a newline, and replace the find | while read -r f pipeline with a glob loop.")
    assert _leaks(hint, shell) & {"bug_identifier", "unsupported_specific"}


def test_restating_the_verifiers_fixed_edge_cases_is_a_leak(tasks):
    fix = tasks["python_edge_case_fix"]
    source = (fix / "tests" / "test_final_state.py").read_text()
    assert "zeta alpha alpha zeta mid" in source  # the verifier's own fixed case
    hint = ("Run /app/topwords.py on small files first: an empty text, 'zeta alpha alpha zeta mid' and "
            "'a a b ab ab abc abc abc', and compare with the specification.")
    assert "test_case" in _leaks(hint, fix)
    awk = tasks["legacy_awk_port"]
    hint = ("Read /app/legacy/humansize.awk closely. Make sure --3, -0 and -997 come out as bad-input, 007 as 7 B and "
            "1000 as 1.00 kB before anything else.")
    assert _leaks(hint, awk)


def test_quoting_the_instructions_own_sentence_is_never_a_leak(tasks):
    for fam, task_dir in tasks.items():
        instruction = (task_dir / "instruction.md").read_text()
        lines = [ln.strip("- ").strip() for ln in instruction.splitlines()
                 if len(ln.split()) >= 6 and not ln.startswith(("#", "_From", "```"))]
        for line in lines:
            hint = f'The instruction says "{line}", so check each step against it.'
            report = check_hint(hint, task_dir, max_words=400)
            assert report.passed, (fam, line, report.to_dict(redact=False))


# -- the allow-list generalises: encodings no detector was written for ---------------------------


@pytest.mark.parametrize("encode", [
    lambda s: base64.b32encode(s.encode()).decode().rstrip("="),
    lambda s: base64.b85encode(s.encode()).decode(),
    lambda s: "".join(f"%{b:02X}" for b in s.encode()),
    lambda s: s.translate(str.maketrans("aeiolst", "4310157")),
    lambda s: "-".join(str(ord(c) - 96) for c in s),
    lambda s: " ".join(s.upper()),
    lambda s: s[1:] + s[0] + "ay",
], ids=["base32", "base85", "url", "leet", "alphabet-positions", "spelled", "pig-latin"])
def test_any_encoding_of_the_answer_is_an_unsupported_specific(tasks, encode):
    revenue = tasks["regional_revenue_report"]
    top = _truth(revenue)["expected_rows"][0].split(",")[0]
    hint = f"{REV}. Sanity check: the leading region is {encode(top)}."
    assert "unsupported_specific" in _leaks(hint, revenue), encode(top)


@pytest.mark.parametrize("written", ["LVI seconds", "5\ufe0f\u20e36\ufe0f\u20e3 seconds", "0.934 minutes",
                                     "0o70 seconds", "fifty-six seconds", "the 56th second"])
def test_numbers_in_any_spelling_need_the_task_to_state_them(tasks, written):
    decay = tasks["decay_half_life_fit"]
    hint = f"Fit /app/data/counts.csv with a weighted least-squares scan over the decay constant; expect about {written}."
    assert _leaks(hint, decay), written


def test_other_scripts_and_names_need_the_task(tasks):
    revenue = tasks["regional_revenue_report"]
    assert "unsupported_specific" in _leaks(f"{REV}. The top region reads βαλλεϋ.", revenue)
    assert "unsupported_specific" in _leaks(f"{REV}. Spell the top one Victor Alfa Lima Lima Echo Yankee.", revenue)


# -- honest hints stay honest ---------------------------------------------------------------------


def test_honest_hints_naming_files_columns_and_tools_pass(tasks):
    revenue = tasks["regional_revenue_report"]
    for hint in (
        "Read the region column of customers.csv and the amount and status columns of orders.csv; trim and lower-case "
        "before comparing, sum amounts in integer cents with Python's decimal module, and sort by revenue with ties "
        "broken by region name.",
        "Join /app/data/orders.csv to /app/data/customers.csv on customer_id with csv.DictReader, keep a dictionary "
        "of per-region totals, and write /app/report.csv with the header region,paid_orders,revenue.",
        "Generate fifty small random files shaped like /app/data/orders.csv, compare your script with a slow, "
        "obviously correct version, and re-read the subdirectories' contents before you finish.",
    ):
        report = check_hint(hint, revenue, max_words=400)
        assert report.passed, (hint, report.to_dict(redact=False))
    decay = tasks["decay_half_life_fit"]
    hint = ("The expected count at time t is N0 * 2^(-t / T) + B, as the instruction says: read /app/data/counts.csv, "
            "fit T and B by least squares over a grid of decay constants, and write /app/fit.json.")
    assert check_hint(hint, decay).passed


def test_findings_never_quote_the_specific(tasks):
    revenue = tasks["regional_revenue_report"]
    top = _truth(revenue)["expected_rows"][0].split(",")[0]
    report = check_hint(f"{REV}. The region with the highest paid revenue is {top}.", revenue)
    assert top not in json.dumps(report.to_dict())
    assert top in json.dumps(report.to_dict(redact=False)), "the evidence is kept for the host-side audit"
