"""Input sensitivity (termforge.quality.sensitivity): every procedural family's oracle computes its
answer from its inputs; an oracle that writes a constant (a hard-coded key, or a key read from a
file the instruction never names) is dropped with the stage named; a final test that does not
exercise a program deliverable is dropped too. The perturbations themselves are checked on the
formats they claim to handle."""

import base64
import shutil
import io
import json
import sqlite3
import struct
import subprocess
import sys
import wave

import pytest
from PIL import Image

from conftest import make_signature, needs_bwrap
from termforge.generate.families import all_families, family_by_name
from termforge.generate.procedural import generate_task
from termforge.quality import perturb_inputs as P
from termforge.quality.sensitivity import PERTURB_SCRIPT, constant_program, input_sensitivity, named_inputs
from termforge.quality.validate import validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime

LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)


def _task(tmp_path, name, seed=0, anchor=None):
    """`anchor`: the same signature, id included (so the same family data), asking for it."""
    fam = family_by_name(name)
    sig = make_signature(seed, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0],
                         corpus_kind=f"family-test-{fam.name}")
    sig = {**sig, "anchor": anchor} if anchor else sig
    return generate_task(sig, tmp_path / "tasks", families=[fam])


def _oracle_outputs(task_dir, tmp_path):
    from termforge.grading.verifier import run_oracle

    rt = BwrapRuntime()
    build = rt.build(task_dir, tmp_path / "images")
    assert build.ok, build.reason
    paths = json.loads((task_dir / "task.json").read_text())["output_paths"]
    with rt.start(build.image, LIMITS) as s:
        assert run_oracle(s, task_dir).ok
        return {p: s._host_path(p).read_bytes() for p in paths}


# The calibration family's write_line has no input (the instruction states the whole deliverable)
# and append_line edits its one file in place (the check perturbs inputs other than the outputs):
# test_tasks_without_a_separate_input_have_nothing_to_perturb. Its other kinds are checked.
CALIBRATION_INPUT_KINDS = ("count_word", "rename_file", "fix_script")
FAMILY_CASES = [(f.name, None) for f in all_families() if f.name != "one_step_file_task"] + [
    ("one_step_file_task", kind) for kind in CALIBRATION_INPUT_KINDS]


def _calibration_task(tmp_path, kind, seed):
    from termforge.generate.families.calibration.one_step_file_task import OneStepFileTask

    fam = family_by_name("one_step_file_task")
    sig = make_signature(seed, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0],
                         corpus_kind="family-test-one_step_file_task")
    return generate_task(sig, tmp_path / "tasks", families=[OneStepFileTask(kinds=(kind,))])


@needs_bwrap
@pytest.mark.parametrize("seed", (0, 1))
@pytest.mark.parametrize("name,kind", FAMILY_CASES, ids=lambda x: x or "")
def test_every_family_oracle_computes_from_its_inputs(name, kind, seed, tmp_path):
    task_dir = _calibration_task(tmp_path, kind, seed) if kind else _task(tmp_path, name, seed)
    rt = BwrapRuntime()
    build = rt.build(task_dir, tmp_path / "images")
    assert build.ok, build.reason
    report = input_sensitivity(task_dir, rt, build.image, LIMITS)
    assert report.sensitive is True and not report.oracle_ignores_inputs and not report.drop, report.to_dict()
    assert not report.restated, report.to_dict()  # the family's instruction states no output the data decides
    if report.mode == "data":
        # A real change of the deliverables, not an oracle crashing on broken inputs.
        assert report.changed_outputs, report.to_dict()


@needs_bwrap
@pytest.mark.parametrize("kind", ("write_line", "append_line"))
def test_tasks_without_a_separate_input_have_nothing_to_perturb(kind, tmp_path):
    """write_line names no input file and append_line's one file is its output: the check says so
    and drops nothing (validation's oracle, no-op and mutants still check the deliverable)."""
    task_dir = _calibration_task(tmp_path / kind, kind, 0)
    rt = BwrapRuntime()
    build = rt.build(task_dir, tmp_path / "images")
    assert build.ok, build.reason
    report = input_sensitivity(task_dir, rt, build.image, LIMITS)
    assert report.mode == "none" and report.sensitive is None and not report.drop, report.to_dict()
    assert "names no input" in report.reason


@needs_bwrap
def test_a_hard_coded_answer_is_dropped_and_blamed_on_the_oracle(tmp_path):
    task_dir = _task(tmp_path, "regional_revenue_report")
    [(path, data)] = _oracle_outputs(task_dir, tmp_path).items()
    # The right answer, written as a constant: every other check passes it.
    (task_dir / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\nset -euo pipefail\nbase64 -d > {path} <<'EOF'\n{base64.b64encode(data).decode()}\nEOF\n")
    v = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert not v.kept and v.stage == "input_sensitivity", (v.stage, v.reason)
    assert "oracle_ignores_inputs" in v.reason
    assert v.evidence["sensitivity"]["blame"] == "oracle" and v.evidence["sensitivity"]["oracle_ignores_inputs"]
    assert "oracle_x2" in v.checks and "noop" in v.checks  # it got this far: the other checks passed it


@needs_bwrap
def test_an_oracle_reading_a_file_the_instruction_never_names_is_dropped(tmp_path):
    task_dir = _task(tmp_path, "log_level_filter")
    [(path, data)] = _oracle_outputs(task_dir, tmp_path).items()
    # The key ships with the environment, XOR-ed so no leak scan reads it; the oracle decodes it.
    key = bytes(b ^ 0x5A for b in data)
    setup = task_dir / "environment" / "setup.sh"
    setup.write_text(setup.read_text() + f"\nmkdir -p /app/.cache\necho {base64.b64encode(key).decode()} "
                                          "> /app/.cache/index.bin\n")
    (task_dir / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nset -euo pipefail\npython3 - <<'PY'\nimport base64\n"
        "key = base64.b64decode(open('/app/.cache/index.bin').read())\n"
        f"open({path!r}, 'wb').write(bytes(b ^ 0x5A for b in key))\nPY\n")
    v = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert not v.kept and v.stage == "input_sensitivity", (v.stage, v.reason)
    assert "/app/.cache/index.bin" not in v.evidence["sensitivity"]["inputs"]


@needs_bwrap
def test_a_final_test_that_never_runs_the_program_is_dropped(tmp_path):
    task_dir = _task(tmp_path, "csv_groupby_tool")
    final = task_dir / "tests" / "test_final_state.py"
    final.write_text("import os\n\n\ndef test_tool_exists():\n    assert os.path.isfile('/app/csvq.py')\n")
    rt = BwrapRuntime()
    build = rt.build(task_dir, tmp_path / "images")
    report = input_sensitivity(task_dir, rt, build.image, LIMITS)
    assert report.mode == "program" and report.drop and report.blame == "final_test", report.to_dict()


def test_named_inputs_are_app_paths_not_urls_or_outputs():
    text = ("Read `/app/data/orders.csv` and every file in `/app/logs/`, serve `/results/NAME` on "
            "http://127.0.0.1:8080/app/x and write `/app/report.csv`.")
    assert named_inputs(text, ["/app/report.csv"]) == ["/app/data/orders.csv", "/app/logs/"]


def test_text_perturbations_change_numbers_or_drop_records():
    csv = "region,orders,revenue\nnorth,3,10.50\nsouth,4,7.25\nwest,5,1.00\neast,6,2.00\nmid,7,3.00\nfar,8,4.00\n"
    numbers, what = P.perturb_text(csv, 0)
    assert numbers.splitlines()[0] == "region,orders,revenue" and numbers != csv and "number" in what
    assert numbers.count("\n") == csv.count("\n")
    fewer, what = P.perturb_text(csv, 1)
    assert fewer.count("\n") < csv.count("\n") and "dropped" in what
    # Octal modes stay octal, versions stay versions, short settings files are left whole.
    assert P.perturb_text("/srv/a 0644\n", 0)[0] == "/srv/a 0645\n"
    assert P.perturb_text("/srv/a 0657\n", 0)[0] == "/srv/a 0660\n"
    assert P.perturb_text('version = "1.2.3"\n', 0)[0] == 'version = "1.2.4"\n'
    assert P.perturb_text("a = 1\nb = 2\n", 1) == ("a = 1\nb = 2\n", "")


def test_media_and_database_perturbations(tmp_path):
    img = Image.new("RGB", (40, 30), "white")
    for x in range(5, 12):
        for y in range(5, 10):
            img.putpixel((x, y), (214, 39, 40))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    out = Image.open(io.BytesIO(P.perturb_png(buf.getvalue(), 0))).convert("RGB")
    red = sum(1 for x in range(40) for y in range(30) if out.getpixel((x, y)) == (214, 39, 40))
    assert red == 35 + 9  # one 3x3 square of the existing colour, apart from the others

    frames = b"YUV4MPEG2 W2 H2 F1:1 C444\n" + b"".join(b"FRAME\n" + bytes([i]) * 12 for i in range(3))
    assert P.perturb_y4m(frames, 0).count(b"FRAME\n") == 2

    wav = tmp_path / "a.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(struct.pack("<800h", *([1000, -1000] * 400)))
    before = wav.read_bytes()
    assert "tone" in P.perturb_wav(str(wav), 0) and wav.read_bytes() != before

    db = tmp_path / "shop.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, qty INTEGER)")
    con.executemany("INSERT INTO items (qty) VALUES (?)", [(i,) for i in range(1, 10)])
    con.commit()
    con.close()
    assert "changed" in P.perturb_sqlite(str(db), 0)
    assert "dropped" in P.perturb_sqlite(str(db), 1)
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM items").fetchone()[0] == 6
    con.close()


def test_the_script_runs_standalone_and_reports_what_it_could_not_change(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,2\n3,4\n")
    (tmp_path / "tool.py").write_text("print(42)\n")
    spec = json.dumps({"files": [str(tmp_path / "a.csv"), str(tmp_path / "tool.py")], "variant": 0})
    res = subprocess.run([sys.executable, "-I", "-", spec], input=PERTURB_SCRIPT.read_bytes(), capture_output=True)
    report = json.loads(res.stdout)
    assert [c["path"] for c in report["changed"]] == [str(tmp_path / "a.csv")]
    assert report["skipped"][0]["why"].startswith("source")  # code under study is not data
    assert (tmp_path / "tool.py").read_text() == "print(42)\n"


def test_constant_programs_keep_their_language():
    assert constant_program("/app/x.py", b"print(1)\n").startswith(b"#!/usr/bin/env python3")
    assert constant_program("/app/x", b"#!/usr/bin/python3\nprint(1)\n").startswith(b"#!/usr/bin/python3\n")
    assert constant_program("/app/x.sh", b"echo hi\n") == b"#!/bin/bash\nexit 0\n"


def _with_instruction(task_dir, extra):
    text = (task_dir / "instruction.md").read_text() + extra
    (task_dir / "instruction.md").write_text(text)
    meta = json.loads((task_dir / "task.json").read_text())
    meta["instruction"] = text
    (task_dir / "task.json").write_text(json.dumps(meta))


@needs_bwrap
def test_an_instruction_that_states_the_output_is_dropped(tmp_path):
    """Givens come from inputs, never from outputs: the real census as an "example", or restated
    in prose, is caught; the family's own instruction (format, labels) is not."""
    task_dir = _task(tmp_path, "png_shape_census")
    [(path, data)] = _oracle_outputs(task_dir, tmp_path).items()
    rt = BwrapRuntime()
    clean = input_sensitivity(task_dir, rt, rt.build(task_dir, tmp_path / "images").image, LIMITS)
    assert clean.sensitive and not clean.restated, clean.to_dict()
    lines = data.decode().splitlines()
    example = tmp_path / "example" / task_dir.name
    shutil.copytree(task_dir, example)
    _with_instruction(example, "\nFor example, the file could look like:\n\n```\n" + data.decode() + "```\n")
    v = validate_task(example, rt, tmp_path / "images", LIMITS)
    assert not v.kept and v.stage == "instruction_states_output", (v.stage, v.reason)
    assert data.decode().splitlines()[0] not in v.reason  # described, never quoted
    restated = tmp_path / "restated" / task_dir.name
    shutil.copytree(task_dir, restated)
    words = "; ".join(f"{c}: {n} shapes covering {a} pixels" for c, n, a in (ln.split() for ln in lines))
    _with_instruction(restated, f"\nHint from the last audit: we counted {words}.\n")
    report = input_sensitivity(restated, rt, rt.build(restated, tmp_path / "images").image, LIMITS)
    assert report.restated, (words, report.to_dict())


@needs_bwrap
@pytest.mark.parametrize("anchor", (None, "GNU tar"))
def test_a_log_level_filter_task_whose_selected_lines_the_blanket_perturbations_miss_is_kept(anchor, tmp_path):
    """Issue 40: the family's oracle plainly reads its logs, but for this seed both blanket
    perturbations (numbers in every second line, every third line dropped) miss the one line it
    selects, and the task was dropped as "answer is a constant". The perturbation aimed at the
    lines the oracle's output holds moves it; with an anchor too, where the logs reach the agent
    only inside the packed form (they are perturbed before packing)."""
    task_dir = _task(tmp_path, "log_level_filter", seed=19, anchor=anchor)
    assert (task_dir / "environment" / "setup.sh").read_text().count("tar --sort=name") == (anchor is not None)
    [selected] = json.loads((task_dir / "private" / "truth.json").read_text())["expected_lines"]
    for variant in (0, 1):  # the case as it is: neither blanket perturbation touches the selected line
        for log in (task_dir / "environment" / "fixtures" / "logs").iterdir():
            assert selected in P.perturb_text(log.read_text(), variant)[0].splitlines() or \
                selected not in log.read_text().splitlines()
    v = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert v.kept, (v.stage, v.reason)
    [row] = v.evidence["sensitivity"]["per_input"]
    assert row["input"] == "/app/logs/" and row["moved"] and row["variant"].endswith("_at_answer"), row
    assert v.evidence["sensitivity"]["before_packing"] is (anchor is not None)


@needs_bwrap
def test_a_named_input_the_oracle_never_reads_is_dropped_naming_it(tmp_path):
    """Every input the instruction names must move the answer when it alone changes: perturbing
    all of them at once moves it through the logs, and hides the one the oracle never opens."""
    task_dir = _task(tmp_path, "log_level_filter", seed=2)
    aliases = "".join(f"{s} {i + 1}\n" for i, s in enumerate(("auth", "billing", "search", "gateway", "scheduler",
                                                             "storage", "payments")))
    (task_dir / "environment" / "fixtures" / "aliases.txt").write_text(aliases)
    setup = task_dir / "environment" / "setup.sh"
    setup.write_text(setup.read_text() + "\ncp /tmp/env/fixtures/aliases.txt /app/aliases.txt\n")
    _with_instruction(task_dir, "\nServices may log under a numbered alias: `/app/aliases.txt` maps each to its id.\n")
    rt = BwrapRuntime()
    report = input_sensitivity(task_dir, rt, rt.build(task_dir, tmp_path / "images").image, LIMITS)
    assert report.drop and report.blame == "oracle" and "/app/aliases.txt" in report.reason, report.to_dict()
    moved = {r["input"]: r["moved"] for r in report.per_input}
    assert moved == {"/app/logs/": True, "/app/aliases.txt": False}, report.per_input


def test_aimed_perturbations_reach_the_records_the_answer_holds():
    """Selected records with no number in them, placed where the blanket variants miss them: the
    aimed variants find them by the oracle's output and change or drop them."""
    rows = ["user,status,team", "ana,ok,red", "bob,FAIL,blue", "cy,ok,red", "di,ok,blue", "ed,FAIL,green",
            "fu,ok,red", "gil,ok,blue"]
    text = "\n".join(rows) + "\n"
    selected = ["bob blue", "ed green"]  # the oracle's output: who failed, and their team
    for variant in (0, 1):
        kept = P.perturb_text(text, variant)[0].splitlines()
        assert "bob,FAIL,blue" in kept and "ed,FAIL,green" in kept
    assert P.perturb_text(text, 2, selected) == (text, "")  # no number in those lines to change
    dropped, what = P.perturb_text(text, 3, selected)
    assert "bob,FAIL,blue" not in dropped and "ed,FAIL,green" not in dropped and "answer draws on" in what
    assert dropped.splitlines()[0] == "user,status,team" and dropped.count("\n") == text.count("\n") - 2
    # A selected line copied whole into the output is found as it is, and every number of it moves.
    log = "".join(f"17000{i} svc{i % 3} {'ERROR' if i == 3 else 'INFO'} code={500 + i}\n" for i in range(8))
    changed, what = P.perturb_text(log, 2, ["170003 svc0 ERROR code=503"])
    assert "170003 svc0 ERROR code=503" not in changed and "1 line(s) the answer draws on" in what
    assert [a for a, b in zip(log.splitlines(), changed.splitlines()) if a != b] == ["170003 svc0 ERROR code=503"]


class _TwoLedgers:
    """An invented family (built lazily: the family base class is imported with the generator):
    /app/ledgers/north.txt and /app/ledgers/south.txt hold amounts, the deliverable is their total.
    `reads_south=False` is a dishonest oracle: it sums the north ledger alone, which the final test,
    written from that oracle, accepts."""

    @staticmethod
    def make(reads_south: bool):
        import random as _random

        from termforge.generate.base import (FamilyAxes, TaskFamily, TaskSpec, bash_script, instruction_frame,
                                             pytest_module)

        class TwoLedgers(TaskFamily):
            axes = FamilyAxes(name="two_ledgers" if reads_south else "two_ledgers_north_only",
                              domains=("file_operations",), verifier_kinds=("exact_text",), fixture_kinds=("text_only",))

            def build(self, sig: dict, rng: _random.Random) -> TaskSpec:
                north = [rng.randint(10, 999) for _ in range(12)]
                south = [rng.randint(10, 999) for _ in range(12)]
                total = sum(north) + (sum(south) if reads_south else 0)
                files = " ".join(["/app/ledgers/north.txt"] + (["/app/ledgers/south.txt"] if reads_south else []))
                return TaskSpec(
                    instruction=instruction_frame(
                        sig, "Ledger total", "Add up every amount in `/app/ledgers/north.txt` and "
                        "`/app/ledgers/south.txt` (one amount per line).", ["`/app/total.txt`: the total"]),
                    setup_sh=bash_script(
                        "mkdir -p /app/ledgers\n"
                        f"printf '%s\\n' {' '.join(map(str, north))} > /app/ledgers/north.txt\n"
                        f"printf '%s\\n' {' '.join(map(str, south))} > /app/ledgers/south.txt\n"),
                    test_initial=pytest_module('''
                        import os

                        def test_ledgers_are_there():
                            assert os.path.isdir("/app/ledgers")
                        '''),
                    test_final=pytest_module(f'''
                        def test_total():
                            assert open("/app/total.txt").read().strip() == "{total}"
                        '''),
                    solve_sh=bash_script(f"cat {files} | awk '{{s += $1}} END {{print s}}' > /app/total.txt"),
                    truth={"total": total}, verifier_kind="exact_text", fixture_kind="text_only",
                    output_paths=["/app/total.txt"])

        return TwoLedgers()


def _ledger_task(tmp_path, reads_south: bool, anchor: str | None, fixture_kind: str = "text_only"):
    sig = make_signature(4, "file_operations", "exact_text", fixture_kind, anchor=anchor,
                         corpus_kind="family-test-two-ledgers")
    return generate_task(sig, tmp_path / "tasks", families=[_TwoLedgers.make(reads_south)])


@needs_bwrap
@pytest.mark.parametrize("anchor, fixture_kind", [("GNU tar", "text_only"), ("SQLite", "text_only"),
                                                  (None, "image"), ("OpenSSL", "audio")])
def test_a_packed_oracle_that_ignores_a_named_input_is_dropped_naming_it(anchor, fixture_kind, tmp_path):
    """Packing (an anchor, a fixture kind's container, or both) puts every input into one file; the
    check still perturbs each family input alone, before packing, and drops the task naming the
    one the oracle never reads (issue 40)."""
    task_dir = _ledger_task(tmp_path, reads_south=False, anchor=anchor, fixture_kind=fixture_kind)
    honoured = json.loads((task_dir / "task.json").read_text())["honoured"]
    assert honoured["anchor"] is True and honoured["fixture_kind"] is True, honoured
    rt = BwrapRuntime()
    build = rt.build(task_dir, tmp_path / "images")
    assert build.ok, build.reason
    report = input_sensitivity(task_dir, rt, build.image, LIMITS)
    assert report.before_packing and report.drop and report.blame == "oracle", report.to_dict()
    assert report.reason.startswith("oracle_ignores_inputs: /app/ledgers/south.txt"), report.reason
    moved = {r["input"]: r["moved"] for r in report.per_input}
    assert moved == {"/app/ledgers/north.txt": True, "/app/ledgers/south.txt": False}, report.per_input
    # Perturbing the packed form as a whole (the check before this guarantee) cannot name it: the
    # packed file breaks the oracle (a corrupt archive) or moves nothing, never the south ledger.
    whole = input_sensitivity(task_dir, rt, build.image, LIMITS, before_packing=False)
    assert "/app/ledgers/south.txt" not in whole.reason, whole.to_dict()
    # Validation calls the check the same way, and names the input in its verdict.
    v = validate_task(task_dir, rt, tmp_path / "images", LIMITS, mutants=0)
    assert not v.kept and v.stage == "input_sensitivity" and "/app/ledgers/south.txt" in v.reason, (v.stage, v.reason)


@needs_bwrap
def test_an_honest_anchored_task_is_kept_with_every_input_moving_the_answer(tmp_path):
    task_dir = _ledger_task(tmp_path, reads_south=True, anchor="GNU tar")
    v = validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS)
    assert v.kept, (v.stage, v.reason)
    sens = v.evidence["sensitivity"]
    assert sens["before_packing"] and sens["sensitive"], sens
    assert {r["input"]: r["moved"] for r in sens["per_input"]} == {"/app/ledgers/north.txt": True,
                                                                   "/app/ledgers/south.txt": True}
