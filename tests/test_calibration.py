"""The calibration family (generate/families/calibration/one_step_file_task.py): every kind
validates like any family (oracle, no-op, reward-hack and hijack probes, mutants) at the level that
gives the command and at the level with a twist; the command an easy instruction gives really
solves its task; the careless command fails where the twist is; and the family is opt-in: only the
`calibration` corpus kind draws it, never the default mixes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from conftest import gate_slice, make_signature, needs_bwrap
from termforge.axes.sampler import corpus_axis_weights, sample_signatures
from termforge.axes.taxonomy import load_taxonomy
from termforge.generate.families import default_families, families_for, family_by_name
from termforge.generate.families.calibration.one_step_file_task import KINDS, OneStepFileTask
from termforge.generate.procedural import build_task, generate_task
from termforge.quality.validate import validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.verifier import run_verifier

ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=2048)


def _task(tmp_path: Path, kind: str, level: str, index: int = 3) -> Path:
    sig = make_signature(index, "file_operations", "exact_text", "text_only", task_complexity=level,
                         corpus_kind="calibration")
    return generate_task(sig, tmp_path / "tasks", families=[OneStepFileTask(kinds=(kind,))])


def _given_command(task: Path) -> str:
    """The fenced command a `short` instruction gives."""
    text = (task / "instruction.md").read_text()
    return text.split("```bash\n", 1)[1].split("\n```", 1)[0]


def _grade_after(task: Path, tmp_path: Path, command: str) -> float:
    rt = BwrapRuntime()
    image = rt.build(task, tmp_path / "images").image
    with rt.start(image, LIMITS) as session:
        session.exec(command, timeout=30)
        return run_verifier(session, task, timeout=60).reward


@needs_bwrap
# The gate validates each kind at one level, both levels appearing; make test-all runs both for all.
@pytest.mark.parametrize("kind,level", gate_slice([(k, lv) for k in KINDS for lv in ("short", "intricate")],
                                                   [(k, ("short", "intricate")[i % 2]) for i, k in enumerate(KINDS)]))
def test_every_kind_validates(kind, level, tmp_path):
    task = _task(tmp_path, kind, level)
    assert json.loads((task / "private" / "truth.json").read_text())["given"]["kind"] == kind
    v = validate_task(task, BwrapRuntime(), tmp_path / "images", LIMITS, mutants=12)
    assert v.kept, f"{kind}/{level}: {v.stage}: {v.reason}"
    assert "probe:hijack_direct" in v.checks and any(c.startswith("mutation:") for c in v.checks)


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_the_given_command_solves_the_easy_task(kind, tmp_path):
    task = _task(tmp_path, kind, "short")
    assert _grade_after(task, tmp_path, _given_command(task)) == 1.0
    # moderate names the tool only; complex and intricate give no command at all
    for level in ("moderate", "complex", "intricate"):
        assert "```bash" not in (_task(tmp_path / level, kind, level) / "instruction.md").read_text()


# The careless command for each twist of the intricate level (module docstring).
CARELESS = {
    "write_line": lambda t: f"echo {t['given']['lines'][0]!r} > {t['given']['path']}",
    "append_line": lambda t: f"echo {t['given']['line']!r} >> {t['given']['path']}",
    "count_word": lambda t: f"grep -c {t['given']['word']} {t['given']['path']} > /app/count.txt",
    "rename_file": lambda t: f"mv /app/{t['given']['old']} /app/{t['given']['new']}",
    "fix_script": lambda t: f"sed -i 's/^[a-z]* /echo /' {t['given']['script']}",
}


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_the_careless_command_fails_the_intricate_task(kind, tmp_path):
    task = _task(tmp_path, kind, "intricate")
    truth = json.loads((task / "private" / "truth.json").read_text())
    assert _grade_after(task, tmp_path, CARELESS[kind](truth)) == 0.0


def test_hidden_answers_stay_hidden():
    """A count is never in the instruction, even in the one that gives the command."""
    fam = OneStepFileTask(kinds=("count_word",))
    for index in range(20):
        sig = make_signature(index, "file_operations", "exact_text", "text_only", task_complexity="short",
                             corpus_kind="calibration")
        built = build_task(sig, [fam])
        count = built.spec.truth["count"]
        assert 10 <= count <= 24  # two digits: a truncated answer is a wrong one
        assert str(count) not in built.spec.instruction


def test_kinds_must_be_known():
    with pytest.raises(ValueError, match="kinds"):
        OneStepFileTask(kinds=("delete_everything",))


def test_only_the_calibration_kind_draws_the_family():
    cal = family_by_name("one_step_file_task")
    assert cal.opt_in and cal.name not in {f.name for f in default_families()}
    assert [f.name for f in families_for({"corpus_kind": "calibration"})] == ["one_step_file_task"]
    tax = load_taxonomy()
    sigs = sample_signatures(200, 7, {"legacy": 0.4, "rl_v2": 0.4, "calibration": 0.2}, tax)
    families = {s["corpus_kind"]: set() for s in sigs}
    for s in sigs:
        families[s["corpus_kind"]].add(build_task(s).family.name)
    assert families["calibration"] == {"one_step_file_task"}
    assert "one_step_file_task" not in families["legacy"] | families["rl_v2"]
    cal_sigs = [s for s in sigs if s["corpus_kind"] == "calibration"]
    assert len(cal_sigs) == 40
    assert {s["verifier_kind"] for s in cal_sigs} == {"exact_text"}
    assert {s["fixture_kind"] for s in cal_sigs} == {"text_only"}
    assert corpus_axis_weights("calibration")["task_complexity"] == {lv: 0.25 for lv in
                                                                     ("short", "moderate", "complex", "intricate")}


def test_the_default_mixes_never_ask_for_calibration():
    for name in ("config.yaml", "configs/tmax15k.yaml"):
        mix = (yaml.safe_load((ROOT / name).read_text()).get("corpus") or {}).get("mix") or {}
        assert not mix.get("calibration"), name


def test_adding_the_calibration_kind_left_existing_signatures_unchanged():
    """The new kind comes last in the vocabulary, so mixes without it deal out the same kinds and
    ids as before it existed (digests computed with the code before the calibration kind)."""
    tax = load_taxonomy()
    for mix, digest in (({"legacy": 0.5, "rl_v2": 0.5},
                         "a26bbb68e0d8c71ee088eb7a563cc5ba3f596f20ee5a7d3bf13c51526658f5a6"),
                        ({"legacy": 1, "sft_v2": 1, "rl_v2": 1},
                         "6dea510f80c03b6d778aa1204cb27f2bb1049994e2dfdfccd90dddf4b0ea830e")):
        sigs = sample_signatures(200, 1234, mix, tax)
        assert hashlib.sha256("\n".join(s["id"] + s["corpus_kind"] for s in sigs).encode()).hexdigest() == digest


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("level", ["short", "intricate"])
def test_hints_fit_the_one_command_protocol(kind, level, tmp_path):
    """Training gives these tasks a two-turn cap: the command, then the submit. A hint that opens
    with "inspect ... before you change anything" or asks to check afterwards spends the turn the
    task needs, so the frame follows the family's declared protocol and the method names the one
    command (and the hints of an explored family keep their frame)."""
    from termforge.hints import procedural_hint
    from termforge.hints.generate import procedural_parts

    task = _task(tmp_path, kind, level)
    assert OneStepFileTask.episode_protocol == "one_command"
    opening, sentences, closing = procedural_parts(task)
    hint = procedural_hint(task)
    assert opening.startswith("Do the whole task with one command") and "no turn for looking" in closing
    assert len(sentences) >= 2  # the variant's sentence and the kind's method survive the fit
    for phrase in ("inspect", "before you change anything", "look at", "ls -la", "tail -c1"):
        assert phrase not in hint.lower(), (phrase, hint)
    for sentence in sentences:  # no step before or after the one command
        for phrase in ("first", "afterwards", "again", "then ", "check"):
            assert phrase not in sentence.lower(), (phrase, sentence)


def test_explored_families_keep_the_look_act_check_frame(tmp_path):
    from termforge.hints.generate import procedural_parts

    sig = make_signature(3, "file_operations", "exact_text", "text_only", task_complexity="short")
    fam = next(f for f in default_families() if f.episode_protocol == "explore" and "file_operations" in f.domains
               and "exact_text" in f.verifier_kinds and "text_only" in f.fixture_kinds)
    opening, _, closing = procedural_parts(generate_task(sig, tmp_path / "tasks", families=[fam]))
    assert opening.startswith("Inspect") and closing.startswith("Check")
