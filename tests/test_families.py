"""Every procedural family, over a spread of seeds: the oracle passes, the untouched env fails,
the initial-state test passes, and nothing private leaks into what the agent or the image sees."""

import json

import pytest

from conftest import gate_slice, make_signature, needs_bwrap
from termforge.generate.families import all_families
from termforge.generate.procedural import generate_task
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.taskcheck import check_soundness

FAMILIES = all_families()
SEEDS = (0, 1, 2)


def _sig_for(fam, seed):
    return make_signature(seed, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0],
                          corpus_kind=f"family-test-{fam.name}")


@needs_bwrap
# The gate checks seed 0 of every family; make test-all adds the other seeds.
@pytest.mark.parametrize("seed", gate_slice(SEEDS, [SEEDS[0]]))
@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_family_is_sound(fam, seed, tmp_path):
    task_dir = generate_task(_sig_for(fam, seed), tmp_path / "tasks", families=[fam])
    report = check_soundness(task_dir, BwrapRuntime(), tmp_path / "images")
    assert report.ok, f"{fam.name} seed {seed}: {report.failed_check}: {report.reason}\n{report.evidence}"


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_family_keeps_truth_private(fam, tmp_path):
    task_dir = generate_task(_sig_for(fam, 5), tmp_path / "tasks", families=[fam])
    truth = json.loads((task_dir / "private" / "truth.json").read_text())
    assert truth, "truth.json must not be empty"
    policy_visible = (task_dir / "instruction.md").read_text()
    # truth["given"] holds parameters the instruction states on purpose; the rest must be discovered.
    hidden = {k: v for k, v in truth.items() if k != "given"}
    secrets = [v for v in _leaf_strings(hidden) if len(v) >= 6]
    for secret in secrets:
        assert secret not in policy_visible, f"{fam.name}: truth value {secret!r} appears in instruction.md"
    assert (task_dir / "private" / "method.md").read_text().strip()


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_family_is_deterministic(fam, tmp_path):
    a = generate_task(_sig_for(fam, 3), tmp_path / "a", families=[fam])
    b = generate_task(_sig_for(fam, 3), tmp_path / "b", families=[fam])
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), f"{fam.name}: {rel} differs between runs"


def _leaf_strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaf_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _leaf_strings(v)
    elif isinstance(obj, (str, int, float)) and not isinstance(obj, bool):
        s = str(obj)
        if not s.replace(".", "").isdigit() or len(s) >= 6:
            yield s


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_family_instruction_gives_inputs_never_outputs(fam, tmp_path):
    """Givens come from inputs, never from outputs: what the instruction states of the answer key
    must be in the task's inputs (its files), the signature or the parameters it declares under
    truth.given. (validate's instruction_states_output check runs the oracle on changed inputs and
    catches outputs the data decides however they got into the instruction: test_sensitivity.py.)"""
    from termforge.quality.leaks import against_inputs, environment_text, find_leaks

    for seed in SEEDS:
        task_dir = generate_task(_sig_for(fam, seed), tmp_path / "tasks", families=[fam])
        truth = json.loads((task_dir / "private" / "truth.json").read_text())
        meta = json.loads((task_dir / "task.json").read_text())
        hidden = {k: v for k, v in truth.items() if k != "given"}
        declared = "\n".join([json.dumps(truth.get("given", {}), sort_keys=True), json.dumps(meta["signature"]),
                              *meta.get("output_paths", [])])
        secrets = against_inputs(hidden, "private/truth.json", declared, environment_text(task_dir))
        leaks = find_leaks((task_dir / "instruction.md").read_text(), secrets)
        assert not leaks, f"{fam.name} seed {seed}: the instruction states {[x.describe() for x in leaks]}"
