"""Hints: procedural hints for every family pass the leak gate, planted leaks never do, the llm
backend repairs a leaking draft from the gate's findings (against a real OpenAI-protocol server),
refusals are recorded as such, and the stage's outputs are byte-deterministic."""

import json
import os
import re
import shutil

import pyarrow.parquet as pq
import pytest

from conftest import make_signature
from fake_openai_server import FakeOpenAIServer
from termforge.generate.families import all_families
from termforge.generate.procedural import generate_task
from termforge.hints import check_hint, llm_hint, procedural_hint, run_hints
from termforge.hints.gate import LEAK_FINDINGS, words_of
from termforge.models import SamplingParams
from termforge.models.registry import make_model

FAMILIES = all_families()
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """Tasks from every family over two seeds: family name -> list of task directories."""
    root = tmp_path_factory.mktemp("tasks")
    out = {}
    for fam in FAMILIES:
        out[fam.name] = [
            generate_task(
                make_signature(seed, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0],
                               corpus_kind=f"hint-test-{fam.name}"),
                root, families=[fam],
            )
            for seed in SEEDS
        ]
    return out


def _all_dirs(tasks):
    return [d for dirs in tasks.values() for d in dirs]


def _truth(task_dir):
    return json.loads((task_dir / "private" / "truth.json").read_text())


def _hidden_leaves(obj):
    """Scalar values of the answer key outside truth["given"], in a fixed order."""
    if isinstance(obj, dict):
        for k in sorted(obj):
            if k != "given":
                yield from _hidden_leaves(obj[k])
    elif isinstance(obj, list):
        for v in obj:
            yield from _hidden_leaves(v)
    elif isinstance(obj, (str, int, float)) and not isinstance(obj, bool):
        yield obj


def _family_of(task_dir):
    return json.loads((task_dir / "task.json").read_text())["family"]


# -- the procedural backend ---------------------------------------------------------------------


def test_family_set_is_complete():
    assert len(FAMILIES) == 23, [f.name for f in FAMILIES]  # 22 in the default mixes + the opt-in calibration family


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_procedural_hint_passes_the_gate(fam, tasks):
    for task_dir in tasks[fam.name]:
        hint = procedural_hint(task_dir)
        report = check_hint(hint, task_dir)
        assert report.passed, f"{fam.name}: false positive {report.to_dict(redact=False)}\n{hint}"
        assert "\n" not in hint and 25 <= report.words <= 220
        # Built from the method note: the opening words of some of its sentences are in the hint.
        method = " ".join((task_dir / "private" / "method.md").read_text().split())
        openings = [" ".join(s.split()[:4]) for s in re.split(r"(?<=[.!?])\s+", method) if s]
        assert any(o in hint for o in openings), (fam.name, hint)
        # Facts from the instruction only: every path the hint names is in the instruction.
        instruction = (task_dir / "instruction.md").read_text()
        for path in re.findall(r"`(/[^`]+)`", hint):
            assert path in instruction, f"{fam.name}: {path} is not in the instruction"
        for deliverable in json.loads((task_dir / "task.json").read_text())["output_paths"]:
            if deliverable in instruction:
                assert deliverable in hint
        assert re.match(r"[A-Z][a-z]+ ", hint), "an imperative sentence opens the hint"


def test_run_hints_procedural_covers_every_task_and_is_deterministic(tasks, tmp_path, capsys):
    dirs = _all_dirs(tasks)
    cov = run_hints(dirs, "procedural", tmp_path / "a")
    summary = capsys.readouterr().out
    assert f"{len(dirs)}/{len(dirs)} hinted" in summary
    assert cov["counts"] == {"hinted": len(dirs), "dropped_leak": 0, "refused": 0, "not_attempted": 0}
    assert cov["repaired"] == 0 and cov["findings_by_kind"] == {}
    assert sum(c["hinted"] for c in cov["by_domain"].values()) == len(dirs)
    domains = {json.loads((d / "task.json").read_text())["actual"]["domain"] for d in dirs}
    assert set(cov["by_domain"]) == domains
    assert json.loads((tmp_path / "a" / "coverage.json").read_text()) == cov

    table = pq.read_table(tmp_path / "a" / "demos.parquet")
    assert table.column_names == ["task_id", "demo", "backend", "model", "rounds", "gate_report"]
    rows = table.to_pylist()
    ids = [r["task_id"] for r in rows]
    assert ids == sorted(ids) and len(ids) == len(dirs)
    by_id = {json.loads((d / "task.json").read_text())["id"]: d for d in dirs}
    for r in rows:
        assert r["backend"] == "procedural" and r["model"] is None and r["rounds"] == 1
        assert r["demo"] == procedural_hint(by_id[r["task_id"]])
        assert json.loads(r["gate_report"])["rounds"][0]["passed"] is True
        md = (tmp_path / "a" / "md" / f"{r['task_id']}.md").read_text()
        assert r["demo"] in md

    # Same inputs, same bytes, whatever the worker count.
    run_hints(dirs, "procedural", tmp_path / "b", workers=3)
    for name in ("demos.parquet", "coverage.json", "attempts.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def _as_llm_task(src, dst, suffix):
    """A copy of a family task that no family claims: what an LLM-written task looks like to hints."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "task.json").read_text())
    meta["id"] += suffix
    meta["family"] = "written-by-a-model"
    (dst / "task.json").write_text(json.dumps(meta))
    return meta["id"]


def test_an_authored_note_missing_is_not_attempted_and_leaking_is_repaired(tasks, tmp_path):
    # A task no family built has only its author's note (private/method.md), written with the answer
    # in view: the gate is what stands between it and a published hint.
    [src, _] = tasks["binary_passphrase_recovery"]
    no_note = tmp_path / "no-note"
    missing_id = _as_llm_task(src, no_note, "-no-note")
    (no_note / "private" / "method.md").unlink()

    leaky = tmp_path / "leaky-note"
    leaky_id = _as_llm_task(src, leaky, "-leaky")
    secret = _truth(leaky)["passphrase"]
    note = (leaky / "private" / "method.md").read_text().strip()
    (leaky / "private" / "method.md").write_text(note + f" In this copy it is {secret}, so type that.\n")

    cov = run_hints([no_note, leaky], "procedural", tmp_path / "out")
    statuses = {tid: t["status"] for tid, t in cov["tasks"].items()}
    assert statuses == {missing_id: "not_attempted", leaky_id: "hinted"}
    assert cov["repaired"] == 1
    [row] = pq.read_table(tmp_path / "out" / "demos.parquet").to_pylist()
    assert row["rounds"] == 2 and secret not in row["demo"] and note.split(".")[0].split("`")[0] in row["demo"]
    report = json.loads(row["gate_report"])
    assert [r["passed"] for r in report["rounds"]] == [False, True]
    assert "literal_answer" in {f["kind"] for f in report["rounds"][0]["findings"]}
    assert secret not in row["gate_report"], "stored findings must not quote the secret"


# -- procedural hints cannot see the answer (generate/public_view.py) ------------------------------


def _rewrite_answer_key(task_dir):
    """Change only what the agent is not given: every hidden value of the answer key, the expected
    outputs and constants of the tests, the oracle, second solutions and the recorded method note."""
    def scramble(obj):
        if isinstance(obj, dict):
            return {k: (v if k == "given" else scramble(v)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [scramble(v) for v in reversed(obj)] + ["planted-extra"]
        if isinstance(obj, bool) or obj is None:
            return obj
        if isinstance(obj, (int, float)):
            return obj * 7 + 13
        return f"zz-{obj[::-1]}-qq"

    truth_path = task_dir / "private" / "truth.json"
    truth_path.write_text(json.dumps(scramble(json.loads(truth_path.read_text()))))
    (task_dir / "private" / "method.md").write_text("The answer is 4242 and the bug is in parse_row.\n")
    for p in sorted((task_dir / "tests").rglob("*")):
        if p.is_file():
            p.write_bytes(p.read_bytes() + b"\nEXPECTED_EXTRA = ['north', 4242, 'zz-answer']\n")
    for p in sorted((task_dir / "solution").rglob("*.sh")):
        p.write_text(p.read_text() + "\necho north > /app/answer.txt\n")


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_changing_only_the_answer_key_leaves_every_hint_byte_identical(fam, tasks, tmp_path):
    for i, src in enumerate(tasks[fam.name]):
        before = procedural_hint(src)
        changed = tmp_path / f"changed-{i}"
        shutil.copytree(src, changed)
        _rewrite_answer_key(changed)
        assert procedural_hint(changed) == before, fam.name
        # Stronger: the hint needs none of the hidden parts at all.
        bare = tmp_path / f"bare-{i}"
        shutil.copytree(src, bare)
        for hidden in ("private", "tests", "solution"):
            shutil.rmtree(bare / hidden)
        (bare / "environment" / "setup.sh").unlink()
        assert procedural_hint(bare) == before, fam.name


def test_the_procedural_writer_opens_only_the_public_parts(tasks):
    import sys

    opened = []
    watching = [False]

    def hook(event, args):
        if watching[0] and event == "open" and not isinstance(args[0], int):
            opened.append(os.fsdecode(args[0]))

    sys.addaudithook(hook)  # audit hooks stay for the process: this one records only while watching
    for fam in FAMILIES:
        for task_dir in tasks[fam.name]:
            opened.clear()
            watching[0] = True
            try:
                procedural_hint(task_dir)
            finally:
                watching[0] = False
            inside = [p for p in opened if p.startswith(str(task_dir) + "/")]
            assert inside, "the audit hook saw the task's files opened"
            for p in inside:
                rel = p[len(str(task_dir)) + 1:]
                assert rel in ("instruction.md", "task.json") or rel.startswith("environment/fixtures/"), (fam.name, rel)


def test_the_writer_can_receive_only_the_public_view():
    import dataclasses
    import inspect
    import typing

    from termforge.generate.base import TaskFamily
    from termforge.generate.public_view import PublicTaskView
    from termforge.hints.generate import hint_parts

    # The view has no field that could hold the answer key, the oracle or the tests, and is frozen.
    assert [f.name for f in dataclasses.fields(PublicTaskView)] == ["family", "instruction", "files", "vocabulary"]
    view = PublicTaskView("f", "do the thing", (("a.csv", b"x,y\n"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.instruction = "changed"  # type: ignore[misc]
    # The writer and every family's method note take the view (and the writer a rendered note) only.
    assert list(typing.get_type_hints(hint_parts)) == ["view", "method", "return"]
    assert typing.get_type_hints(hint_parts)["view"] is PublicTaskView
    for fam in FAMILIES:
        method = type(fam).method_note
        params = list(inspect.signature(method).parameters)
        assert params == ["self", "view"], fam.name
        assert typing.get_type_hints(TaskFamily.method_note)["view"] is PublicTaskView
        assert fam.method, f"{fam.name} declares its method steps"
    # No family builds a method note itself: the generator renders it from the view.
    for fam in FAMILIES:
        source = inspect.getsource(type(fam))
        assert "method_note=" not in source, fam.name


def test_a_family_tasks_recorded_note_is_rendered_from_its_view(tasks):
    from termforge.generate.families import family_by_name
    from termforge.generate.public_view import render_method, view_of_task_dir

    for fam in FAMILIES:
        for task_dir in tasks[fam.name]:
            view = view_of_task_dir(task_dir)
            note = (task_dir / "private" / "method.md").read_text().strip()
            assert note == render_method(family_by_name(fam.name), view).strip(), fam.name


# -- the gate catches planted leaks ---------------------------------------------------------------


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_planted_leaks_are_caught(fam, tasks):
    task_dir = tasks[fam.name][0]
    clean = procedural_hint(task_dir)
    instruction = (task_dir / "instruction.md").read_text()

    # The literal answer: the first informative hidden value the instruction does not show
    # (informative: 3+ letters or non-zero digits, so not a 0.0 offset or a 0/1 flag).
    # Values truth["given"] also holds are stated on purpose, so they are no leak.
    given = json.dumps(_truth(task_dir).get("given", {}))
    value = next((
        str(v) for v in _hidden_leaves(_truth(task_dir))
        if len(re.findall(r"[1-9A-Za-z]", str(v))) >= 3 and str(v) not in instruction and str(v) not in given
    ), None)
    if value is None:
        # Only the opt-in calibration family has tasks whose instruction states the whole answer
        # (write a given line, rename to a given name): nothing hidden to plant.
        assert fam.opt_in, f"{fam.name}: no hidden answer value to plant"
    else:
        report = check_hint(f"{clean} The value you need is {value}.", task_dir)
        assert "literal_answer" in report.kinds(), (fam.name, value)
        assert value not in json.dumps(report.to_dict()), "the redacted report must not quote the value"

    # The verifier's files.
    for planted in ("Read tests/test_final_state.py to see exactly what is checked.",
                    "Then echo 1 > /logs/verifier/reward.txt.",
                    "Run bash /tests/test.sh when done."):
        assert "test_reference" in check_hint(f"{clean} {planted}", task_dir).kinds(), planted

    # The oracle's key command: its longest line, pasted.
    oracle = (task_dir / "solution" / "solve.sh").read_text()
    key_line = max((ln.strip() for ln in oracle.splitlines()), key=lambda ln: len(words_of(ln)))
    kinds = check_hint(f"{clean} Shortcut: run {key_line}", task_dir).kinds()
    assert {"oracle_ngram", "oracle_path", "literal_answer", "truth_ngram"} & set(kinds), (fam.name, key_line)
    assert "oracle_ngram" in kinds or "oracle_path" in kinds, (fam.name, kinds)


def test_paraphrases_that_keep_an_8gram_of_the_truth_are_caught(tasks):
    caught = 0
    for fam in FAMILIES:
        task_dir = tasks[fam.name][0]
        instr_words = " " + " ".join(words_of((task_dir / "instruction.md").read_text())) + " "
        for v in _hidden_leaves(_truth(task_dir)):
            words = words_of(str(v))
            windows = [words[i : i + 8] for i in range(len(words) - 7)]
            fresh = [w for w in windows if f" {' '.join(w)} " not in instr_words]
            if fresh:
                # Punctuation and case changed, wrapped in new words: still the same 8 words in a row.
                planted = f"{procedural_hint(task_dir)} Remember: {' '.join(fresh[0]).upper()}, roughly."
                assert "truth_ngram" in check_hint(planted, task_dir).kinds(), (fam.name, fresh[0])
                caught += 1
                break
    assert caught >= 5, f"only {caught} families have long truth text; the test lost its teeth"

    # A hand-written paraphrase of a planted bug's effect keeps 8 of its words in order.
    task_dir = tasks["python_edge_case_fix"][0]
    effect = next(iter(_truth(task_dir)["planted_bugs"].values()))["effect"]
    planted = f"Inspect the code; I suspect that {effect} here, so look there first."
    report = check_hint(planted, task_dir)
    assert "truth_ngram" in report.kinds()
    # n is a parameter: with a window longer than the effect text, the same hint passes that check.
    assert "truth_ngram" not in check_hint(planted, task_dir, n=len(words_of(effect)) + 1).kinds()


def test_named_answers_in_prose_are_caught(tasks):
    bin_dir = tasks["binary_passphrase_recovery"][0]
    truth = _truth(bin_dir)
    hint = (f"Skip the probing of {truth['given']['binary']}: the passphrase is {truth['passphrase']} and it "
            f"prints {truth['token']}.")
    report = check_hint(hint, bin_dir)
    literal = [f for f in report.findings if f["kind"] == "literal_answer"]
    assert len(literal) == 2 and set(report.kinds()) <= set(LEAK_FINDINGS), report.to_dict(redact=False)

    shop = tasks["sqlite_shop_questions"][0]
    answers = _truth(shop)["answers"]
    first_name = answers["q2"].split(",")[0]
    report = check_hint(f"Look at {first_name} first in /app/shop.db; it sells the most.", shop)
    assert "literal_answer" in report.kinds(), "one item of a list answer is a leak too"


def test_restating_the_instruction_is_allowed(tasks):
    for fam in ("sqlite_shop_questions", "upload_path_guard", "account_audit"):
        task_dir = tasks[fam][0]
        instruction = (task_dir / "instruction.md").read_text()
        body = [ln for ln in instruction.splitlines() if ln and not ln.startswith(("#", "_", "-"))]
        sentence = " ".join(" ".join(body).split()[:40])
        hint = f"Keep the instruction's wording in mind: {sentence}. {procedural_hint(task_dir)}"
        report = check_hint(hint, task_dir, max_words=400)
        assert report.passed, (fam, report.to_dict(redact=False))


def test_oracle_only_paths_are_caught_and_the_gate_is_pure(tasks):
    task_dir = tasks["legacy_awk_port"][0]
    oracle = (task_dir / "solution" / "solve.sh").read_text()
    instruction = (task_dir / "instruction.md").read_text()
    private = sorted({p for p in re.findall(r"/tmp/[\w.-]+", oracle) if p not in instruction})
    assert private, "this family's oracle keeps scratch files under /tmp"
    port, legacy = (json.loads((task_dir / "private" / "truth.json").read_text())["given"][k]
                    for k in ("port", "legacy_script"))
    hint = f"Compare both programs on the inputs in {private[0]}, then fix {port} until it matches {legacy}."
    report = check_hint(hint, task_dir)
    assert report.kinds() == ["oracle_path"]
    # Paths the instruction gives are fine; so is the same hint checked twice (same report).
    assert check_hint(f"Diff {port} against {legacy} on many generated inputs.", task_dir).passed
    assert check_hint(hint, task_dir).to_dict(redact=False) == report.to_dict(redact=False)


def test_shape_checks(tasks):
    task_dir = tasks["log_level_filter"][0]
    clean = procedural_hint(task_dir)
    assert check_hint("", task_dir).kinds() == ["not_one_paragraph"]
    assert check_hint("   \n ", task_dir).kinds() == ["not_one_paragraph"]
    assert check_hint(f"{clean}\n\n{clean}", task_dir).kinds() == ["not_one_paragraph"]
    assert check_hint(f"Do this:\n- sort the lines\n- write {clean}", task_dir).kinds() == ["not_one_paragraph"]
    assert check_hint(clean, task_dir, max_words=10).kinds() == ["too_long"]
    # A paragraph wrapped over lines is still one paragraph.
    assert check_hint(clean.replace(", ", ",\n"), task_dir).passed


# -- the llm backend (a real HTTP server speaking the OpenAI protocol) ------------------------------


def _openai_model(server):
    return make_model({"backend": "openai", "model": "hint-writer", "base_url": server.base_url,
                       "max_retries": 0, "timeout_s": 10})


def test_llm_hint_is_repaired_after_a_leaking_draft(tasks, tmp_path):
    task_dir = tasks["binary_passphrase_recovery"][0]
    truth = _truth(task_dir)
    leaking = f"Hint: the passphrase is {truth['passphrase']}; write it and the token to /app/recovered.txt."
    clean = ("Probe the binary with wrong guesses and record stdout and the exit status of each run; if "
             "the status changes with how much of a guess is right, extend the guess one character at a "
             "time over the stated alphabet with a small loop, then run it with the recovered passphrase "
             "and copy the printed line into /app/recovered.txt exactly as the instruction asks.")
    with FakeOpenAIServer(replies=[leaking, clean]) as server:
        cov = run_hints([task_dir], "llm", tmp_path / "out", model=_openai_model(server), max_rounds=2,
                        sampling=SamplingParams(temperature=0.7, seed=11))
        bodies = server.chat_bodies()

    assert cov["counts"]["hinted"] == 1 and cov["repaired"] == 1 and cov["model"] == "openai:hint-writer"
    [row] = pq.read_table(tmp_path / "out" / "demos.parquet").to_pylist()
    assert row["demo"] == clean and row["rounds"] == 2 and row["backend"] == "llm"
    assert row["model"] == "openai:hint-writer"
    report = json.loads(row["gate_report"])
    assert [r["round"] for r in report["rounds"]] == [1, 2]
    assert [r["passed"] for r in report["rounds"]] == [False, True]
    assert "literal_answer" in {f["kind"] for f in report["rounds"][0]["findings"]}
    assert truth["passphrase"] not in row["gate_report"]

    # Two requests: the first carries the rule and the task, the second the same plus the kinds of
    # problem found; the leaking draft is not sent back.
    assert len(bodies) == 2
    first, second = bodies
    assert "never give what must be discovered" in first["messages"][0]["content"]
    assert (task_dir / "instruction.md").read_text().strip()[:60] in first["messages"][1]["content"]
    assert second["messages"][:2] == first["messages"] and len(second["messages"]) == 3
    assert all(leaking not in m["content"] for m in second["messages"])
    repair = second["messages"][2]["content"]
    # The repair names the kind of leak, never the leaked text.
    assert "value from the answer key" in repair and truth["passphrase"] not in repair
    assert first["seed"] != second["seed"], "a repair round draws afresh"

    # The host-side audit keeps both drafts.
    [attempt] = [json.loads(ln) for ln in (tmp_path / "out" / "attempts.jsonl").read_text().splitlines()]
    assert [r["draft"] for r in attempt["rounds"]] == [leaking.removeprefix("Hint: "), clean]


def test_llm_batches_are_deterministic_and_cached(tasks, tmp_path):
    dirs = _all_dirs(tasks)

    def reply(messages):
        # A clean hint naming the task's own title, so a row mixed up with another task would show.
        title = re.search(r"^# (.+)$", messages[1]["content"], re.M).group(1)
        path = re.search(r"`(/app/[^`]*)`", messages[1]["content"]).group(1)
        return (f"For the task titled {title}, inspect every input the instruction names (start at {path}) "
                "with head and wc, build the result with a small script, and compare it with the stated "
                "format before you submit.")

    spec_for = lambda server: {"backend": "openai", "model": "m", "base_url": server.base_url,  # noqa: E731
                               "max_retries": 0, "cache_dir": str(tmp_path / "cache")}
    with FakeOpenAIServer(replies=reply) as server:
        cov = run_hints(dirs, "llm", tmp_path / "a", model=spec_for(server), batch_size=5, workers=3)
        assert server.request_count() == len(dirs)
        run_hints(dirs, "llm", tmp_path / "b", model=spec_for(server), batch_size=100)
        assert server.request_count() == len(dirs), "a rerun is answered from the response cache"
    assert cov["counts"]["hinted"] == len(dirs)
    for name in ("demos.parquet", "coverage.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    for row in pq.read_table(tmp_path / "a" / "demos.parquet").to_pylist():
        [task_dir] = [d for d in dirs if d.name == row["task_id"]]
        title = (task_dir / "instruction.md").read_text().splitlines()[0][2:]
        assert f"titled {title}," in row["demo"]


def test_llm_refusals_are_recorded_and_persistent_leaks_dropped(tasks, tmp_path):
    refusing = tasks["log_level_filter"][0]
    empty = tasks["png_shape_census"][0]
    leaking = tasks["sqlite_shop_questions"][0]
    answer = _truth(leaking)["answers"]["q3"]

    def reply(messages):
        prompt = messages[1]["content"]
        if "/app/errors.txt" in prompt:
            return "I'm sorry, but I can't help with that request."
        if "/app/census.txt" in prompt:
            return ""
        return f"Query the database; the customer is {answer}."

    with FakeOpenAIServer(replies=reply) as server:
        model = _openai_model(server)
        cov = run_hints([refusing, empty, leaking], "llm", tmp_path / "out", model=model, max_rounds=1)
        assert server.request_count() == 1 + 1 + 2  # refusals are not retried; leaks get one repair

    by_task = {tid: t for tid, t in cov["tasks"].items()}
    status = {d: by_task[json.loads((d / "task.json").read_text())["id"]]["status"]
              for d in (refusing, empty, leaking)}
    assert status == {refusing: "refused", empty: "refused", leaking: "dropped_leak"}
    assert cov["counts"] == {"hinted": 0, "dropped_leak": 1, "refused": 2, "not_attempted": 0}
    assert pq.read_table(tmp_path / "out" / "demos.parquet").num_rows == 0
    assert list((tmp_path / "out" / "md").iterdir()) == []

    # The same through the single-task API.
    with FakeOpenAIServer(replies=["Sorry, I cannot assist with this."]) as server:
        result = llm_hint(_openai_model(server), refusing, max_rounds=2)
    assert result.status == "refused" and result.hint is None and len(result.rounds) == 1
    assert result.rounds[0]["refused"] is True


def test_errors_name_the_culprit(tasks, tmp_path):
    task_dir = tasks["log_level_filter"][0]
    from termforge.errors import TermforgeError

    with pytest.raises(TermforgeError, match="backend"):
        run_hints([task_dir], "magic", tmp_path)
    with pytest.raises(TermforgeError, match="needs a model"):
        run_hints([task_dir], "llm", tmp_path)
    with pytest.raises(TermforgeError, match="given twice"):
        run_hints([task_dir, task_dir], "procedural", tmp_path)
    with pytest.raises(TermforgeError, match="task.json"):
        run_hints([tmp_path / "nowhere"], "procedural", tmp_path)


# -- procedural hints true to their variant ---------------------------------------------------------


def test_variants_with_different_questions_never_share_a_hint_and_a_moved_hint_is_off_task(tasks):
    a, b = tasks["sqlite_shop_questions"]
    qa, qb = (json.loads((d / "private" / "truth.json").read_text())["given"]["questions"] for d in (a, b))
    assert qa != qb, "the two variants must ask different questions for this test to mean anything"
    ha, hb = procedural_hint(a), procedural_hint(b)
    assert ha != hb
    for hint, questions in ((ha, qa), (hb, qb)):
        for q, text in questions.items():
            assert f'{q} ("' in hint and " ".join(text.split()[:3]) in hint, (q, hint)
    # The hint of one variant, moved to the other, is caught as being about another task.
    moved = check_hint(ha, b)
    assert "off_task" in moved.kinds(), moved.to_dict(redact=False)
    assert any("quotes a phrase the task does not have" in f["detail"] for f in moved.findings)
    assert check_hint(ha, a).passed and check_hint(hb, b).passed


def test_a_method_sentence_about_questions_the_variant_lacks_is_dropped():
    from termforge.hints.fit import TaskFacts, check_sentence

    facts = TaskFacts("answer these questions: q1: the largest order (ties: smallest id).", "", "", [], [])
    assert check_sentence("For 'never' questions use NOT EXISTS or a LEFT JOIN.", facts)
    assert not check_sentence("For rankings ORDER BY the aggregate with the stated tie-break.", facts)
    never = TaskFacts("q2: customers who never ordered.", "", "", [], [])
    assert not check_sentence("For 'never' questions use NOT EXISTS or a LEFT JOIN.", never)


def test_no_url_path_is_named_as_a_file(tmp_path):
    fam = next(f for f in FAMILIES if f.name == "binary_passphrase_recovery")
    sig = make_signature(3, fam.domains[0], "multi_protocol", fam.fixture_kinds[0], corpus_kind="url-test")
    task_dir = generate_task(sig, tmp_path, families=[fam])
    instruction = (task_dir / "instruction.md").read_text()
    assert "/results/NAME" in instruction, "the multi_protocol strategy serves results over HTTP"
    hint = procedural_hint(task_dir)
    assert "/results/" not in hint and check_hint(hint, task_dir).passed
    assert all(p.startswith("/app/") for p in re.findall(r"`(/[^`]+)`", hint)), hint


def test_the_summary_counts_off_task_drops_apart_from_leak_drops(tasks, tmp_path, capsys):
    """A hint dropped for being about another task is no leak: the summary line and coverage.json
    count the two apart."""
    a, b = tasks["sqlite_shop_questions"]
    moved = procedural_hint(a)  # a's hint, written for b: about another task, and no secret of b's
    assert set(check_hint(moved, b).kinds()) == {"off_task"}
    leaking, answer = a, _truth(a)["answers"]["q3"]
    qa, qb = (json.loads((d / "private" / "truth.json").read_text())["given"]["questions"] for d in (a, b))
    only_a = next(text for text in qa.values() if text not in qb.values())

    def reply(messages):
        return f"Query the database; the customer is {answer}." if only_a in messages[1]["content"] else moved

    with FakeOpenAIServer(replies=reply) as server:
        cov = run_hints([b, leaking], "llm", tmp_path / "out", model=_openai_model(server), max_rounds=1)
    status = {t: v["status"] for t, v in cov["tasks"].items()}
    assert sorted(status.values()) == ["dropped_leak", "dropped_leak"], cov["tasks"]
    assert cov["dropped_by_reason"] == {"leak": 1, "off_task": 1, "form": 0}, cov["tasks"]
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("hints (llm")][0]
    assert "1 dropped for leaks, 1 dropped as off-task" in line, line
    on_disk = json.loads((tmp_path / "out" / "coverage.json").read_text())
    assert on_disk["dropped_by_reason"] == cov["dropped_by_reason"]
