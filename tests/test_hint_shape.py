"""Hints are imperative guidance about their own task: refusals in any wording are recorded as
refusals, chatter around a hint is cut off and counted, and a hint swapped to another task is
caught (every cross-pair over one task per family)."""

import json

import pyarrow.parquet as pq
import pytest

from fake_openai_server import FakeOpenAIServer
from termforge.hints import procedural_hint, run_hints
from termforge.hints.corpus import corpus_tasks, load_corpus
from termforge.hints.gate import check_hint, load_context
from termforge.hints.shape import clean_structure, is_imperative, mapping_findings
from termforge.models.registry import make_model

REFUSALS = [
    "That falls outside what I'm able to do.",
    "Providing such guidance would undermine the exercise, so this request is declined.",
    "Unable to comply.",
    "This content cannot be generated under the current policy.",
    "No hint will be written for this task; it could be misused.",
    "Writing that is not something this assistant does. Perhaps ask a human reviewer instead?",
]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return corpus_tasks(tmp_path_factory.mktemp("shape"), seeds=(0,))


@pytest.mark.parametrize("reply", REFUSALS)
def test_refusals_in_any_wording(reply):
    assert clean_structure(reply).refused, reply


def test_guidance_is_kept_and_chatter_is_cut():
    hint = ("Run the binary on a few wrong guesses and record the exit status; if it moves, grow the guess "
            "one character at a time. Then write both lines to /app/recovered.txt.")
    s = clean_structure(f"Sure! Here's a method-level hint for you:\n\n{hint}\n\nHope this helps, good luck!")
    assert not s.refused and s.text == hint and len(s.removed) == 3
    for sentence in ("If the status changes, grow the passphrase by one character.",
                     "First, list /app/etc with ls -la.", "Do not edit the binary.",
                     "You should compare each output with the specification."):
        assert is_imperative(sentence), sentence
    assert not is_imperative("The binary is stripped and prints a token.")


def test_llm_refusals_and_preambles_through_the_stage(tasks, tmp_path):
    dirs = [tasks[("binary_passphrase_recovery", 0)], tasks[("log_level_filter", 0)],
            tasks[("sqlite_shop_questions", 0)]]
    hint = ("Open /app/shop.db with sqlite3, read the schema first, and cross-check every answer with a "
            "second query before you write /app/answers.txt.")

    def reply(messages):
        prompt = messages[1]["content"]
        if "/app/shop.db" in prompt:
            return f"Certainly, happy to assist with that one:\n{hint}\nLet me know if you need more."
        if "/app/logs" in prompt:
            return REFUSALS[1]
        return REFUSALS[0]

    with FakeOpenAIServer(replies=reply) as server:
        model = make_model({"backend": "openai", "model": "w", "base_url": server.base_url, "max_retries": 0})
        cov = run_hints(dirs, "llm", tmp_path / "out", model=model, max_rounds=1)
        assert server.request_count() == 3, "a refusal is not retried"
    assert cov["counts"] == {"hinted": 1, "dropped_leak": 0, "refused": 2, "not_attempted": 0}
    assert cov["cleaned"] == 1
    [row] = pq.read_table(tmp_path / "out" / "demos.parquet").to_pylist()
    assert row["demo"] == hint
    assert json.loads(row["gate_report"])["rounds"][0]["cleaned"] == 2


def test_every_swapped_hint_is_caught(tasks):
    """One task per family; each family's procedural hint and honest corpus hint fit their own task
    and are caught on every other task."""
    _, honest = load_corpus()
    hints = {key: [procedural_hint(d)] for key, d in tasks.items()}
    for row in honest:
        if (row["family"], row["seed"]) in hints:
            hints[(row["family"], row["seed"])].append(row["hint"])
    terms = {key: load_context(d).terms for key, d in tasks.items()}
    pairs = caught = 0
    missed = []
    for own, texts in hints.items():
        for text in texts:
            assert not mapping_findings(text, terms[own]), (own, text)
            for other in tasks:
                if other != own:
                    pairs += 1
                    hit = bool(mapping_findings(text, terms[other]))
                    caught += hit
                    if not hit:
                        missed.append((own[0], other[0], text))
    assert pairs >= 18 * 17 * 2
    # Every hint that names one of its task's paths is caught on every other task; a hint naming
    # no path at all rests on shared words, and may slip through on a close neighbour.
    assert all("/app/" not in text for _, _, text in missed), missed
    assert caught >= 0.99 * pairs, (caught, pairs)


def test_the_gate_reports_off_task_hints(tasks):
    own, other = tasks[("log_level_filter", 0)], tasks[("tone_inventory", 0)]
    hint = procedural_hint(own)
    assert check_hint(hint, own).passed
    report = check_hint(hint, other)
    assert "off_task" in report.kinds()
    assert "/app/errors.txt" not in json.dumps(report.to_dict())


# -- procedural hints fit their variant ------------------------------------------------------------

HIDDEN_MARKERS = ("xor", "key stream", ".rodata", "straight line", "curv", "revoked", "decoy")


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """Every family at two complexities (the levels at which variants add features)."""
    from conftest import make_signature
    from termforge.generate.families import all_families
    from termforge.generate.procedural import generate_task

    root = tmp_path_factory.mktemp("variants")
    out = []
    for fam in all_families():
        for seed, level in ((0, "moderate"), (1, "complex")):
            sig = make_signature(seed, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0],
                                 corpus_kind=f"fit-{fam.name}", task_complexity=level)
            out.append((fam.name, level, generate_task(sig, root, families=[fam])))
    return out


def test_every_familys_hint_fits_its_variant(variants):
    from termforge.generate.public_view import view_of_task_dir
    from termforge.hints.fit import TaskFacts, check_sentence
    from termforge.hints.shape import sentences

    for family, level, task_dir in variants:
        hint = procedural_hint(task_dir)
        facts = TaskFacts.of(view_of_task_dir(task_dir))
        for sentence in sentences(hint):
            assert not check_sentence(sentence, facts), (family, level, sentence)
        low = hint.lower()
        assert not [m for m in HIDDEN_MARKERS if m in low], (family, level, hint)
        # The frame is a small part of the hint: most of it is about this task's method.
        frame = len(sentences(hint)[0].split()) + len(sentences(hint)[-1].split())
        assert frame <= 0.5 * len(hint.split()), (family, hint)


def test_hint_features_follow_the_fixture(variants, tmp_path):
    """The same family's hint mentions quoted fields only when the variant's files have them."""
    import shutil

    [task_dir] = [d for f, level, d in variants if f == "regional_revenue_report" and level == "moderate"]
    orders = task_dir / "environment" / "fixtures" / "orders.csv"
    if '"' in orders.read_text():
        pytest.skip("this variant already quotes its fields")
    assert "quoted" not in procedural_hint(task_dir)
    quoted = tmp_path / "quoted"
    shutil.copytree(task_dir, quoted)
    lines = (quoted / "environment" / "fixtures" / "orders.csv").read_text().splitlines()
    lines[1] = ",".join(f'"{c}"' for c in lines[1].split(","))
    (quoted / "environment" / "fixtures" / "orders.csv").write_text("\n".join(lines) + "\n")
    assert "quoted fields" in procedural_hint(quoted)
    # A hidden mechanism stays out even when the note states it.
    [binary] = [d for f, level, d in variants if f == "binary_passphrase_recovery" and level == "moderate"]
    assert "XOR" in (binary / "private" / "method.md").read_text() and "XOR" not in procedural_hint(binary)


def test_claims_about_folders_need_a_folder(tmp_path):
    from termforge.generate.public_view import view_of_task_dir
    from termforge.hints.fit import fit_sentences

    task = tmp_path / "t"
    (task / "environment" / "fixtures").mkdir(parents=True)
    (task / "environment" / "fixtures" / "lines.txt").write_text("b\na\nb\n")
    (task / "instruction.md").write_text("Remove repeated lines from `/app/lines.txt`, keeping the first of each.\n")
    note = ["Walk every folder recursively and expand the globs before you compare files.",
            "Keep a set of the lines already seen and print each line the first time only."]
    kept, dropped = fit_sentences(note, view_of_task_dir(task))
    assert kept == note[1:] and len(dropped) == 1
    (task / "instruction.md").write_text("Remove repeated lines from every file in the folder `/app/in/`.\n")
    assert fit_sentences(note, view_of_task_dir(task))[0] == note


def test_a_scratch_file_the_hint_suggests_is_not_foreign(tasks):
    own = tasks[("python_edge_case_fix", 0)]
    hint = ("Write a reference implementation of the specification in ref.py, generate random texts, and "
            "compare its output with /app/topwords.py for many values of K.")
    assert check_hint(hint, own).passed
    assert "off_task" in check_hint(hint.replace("/app/topwords.py", "/app/wordcount.py"), own).kinds()
