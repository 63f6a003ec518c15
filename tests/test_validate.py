"""Validation drops broken tasks with the right reason, keeps sound ones, every reward-hack
probe scores 0 on every family, and an interrupted run resumes from its checkpoint."""

import json
import shutil

import pytest

from conftest import gate_slice, make_signature, needs_bwrap
from termforge.generate.families import all_families, family_by_name
from termforge.generate.procedural import generate_task
from termforge.io import atomic_write_json, read_json
from termforge.quality.validate import run_validate_shard, static_checks, validate_task, write_corpus_manifest
from termforge.runtime.accounting import own_cgroup_dir
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime

pytestmark = needs_bwrap
LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)


def _good_task(tmp_path, index=0):
    fam = family_by_name("log_level_filter")
    sig = make_signature(index, "file_operations", "exact_text", "text_only")
    return generate_task(sig, tmp_path / "tasks", families=[fam])


def _validate(task_dir, tmp_path, **kw):
    return validate_task(task_dir, BwrapRuntime(), tmp_path / "images", LIMITS, **kw)


def test_sound_task_is_kept_with_every_check(tmp_path):
    v = _validate(_good_task(tmp_path), tmp_path)
    assert v.kept, v.reason
    assert v.checks[:5] == ["static", "build", "initial_state", "final_fails_untouched", "oracle_x2"]
    assert sum(c.startswith("probe:") for c in v.checks) == 7 and v.checks[-1] == "proof_of_run"
    assert v.evidence["collected"]  # the pristine test set every later grade must collect


def test_verifier_passing_untouched_is_dropped(tmp_path):
    task = _good_task(tmp_path)
    (task / "tests" / "test_final_state.py").write_text("def test_nothing():\n    assert True\n")
    v = _validate(task, tmp_path)
    assert not v.kept and v.stage == "final_fails_untouched"


def test_failing_oracle_is_dropped(tmp_path):
    task = _good_task(tmp_path)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho wrong > /app/errors.txt\n")
    v = _validate(task, tmp_path)
    assert not v.kept and v.stage == "oracle" and "oracle scored 0" in v.reason


def test_flaky_verifier_is_dropped(tmp_path):
    task = _good_task(tmp_path)
    final = task / "tests" / "test_final_state.py"
    final.write_text(final.read_text() + "\n\ndef test_coin():\n    import os\n    assert os.urandom(1)[0] % 2 == 0\n")
    # 12 repeats: a verifier that passes half the time survives with probability 2**-12.
    v = _validate(task, tmp_path, oracle_repeats=12)
    assert not v.kept and v.stage in ("oracle", "flaky_verifier"), v.reason


def test_truth_leaked_into_instruction_is_dropped(tmp_path):
    task = _good_task(tmp_path)
    truth = read_json(task / "private" / "truth.json")
    leaked = (task / "instruction.md").read_text() + "\nHint: " + truth["expected_lines"][0] + "\n"
    (task / "instruction.md").write_text(leaked)
    meta = read_json(task / "task.json")
    meta["instruction"] = leaked
    atomic_write_json(task / "task.json", meta)
    v = _validate(task, tmp_path)
    assert not v.kept and v.stage == "static" and "leaked into instruction.md" in v.reason


def test_answer_key_copied_into_image_is_dropped(tmp_path):
    task = _good_task(tmp_path)
    shutil.copy(task / "private" / "truth.json", task / "environment" / "fixtures" / "truth.json")
    with pytest.raises(Exception) as exc:
        static_checks(task)
    assert "answer key is copied into the image" in str(exc.value)


def test_setup_writing_outside_layer_is_dropped(tmp_path):
    task = _good_task(tmp_path)
    setup = task / "environment" / "setup.sh"
    setup.write_text(setup.read_text() + "echo pwned > /home/user/.bashrc\n")
    v = _validate(task, tmp_path)
    assert not v.kept and v.stage == "build" and "outside the task layer" in v.reason


def test_tests_that_never_run_are_dropped(tmp_path):
    task = _good_task(tmp_path)
    (task / "tests" / "test_final_state.py").write_text("# no tests at all\n")
    v = _validate(task, tmp_path)
    assert not v.kept and v.stage == "proof_of_run"


def test_missing_file_is_a_static_failure(tmp_path):
    task = _good_task(tmp_path)
    (task / "solution" / "solve.sh").unlink()
    v = _validate(task, tmp_path)
    assert not v.kept and v.stage == "static" and "solution/solve.sh" in v.reason


PROBE_SLICE = ("binary_passphrase_recovery", "stream_transform_program", "heldout_regression", "log_level_filter",
               "upload_path_guard", "permission_policy")


# The gate: a family per kind of program the final tests run (binary, python tool, a metric
# script, output files only, an adversarial corpus, a permissions check); make test-all and
# bench/bench_attacks.py cover every family.
@pytest.mark.parametrize("fam", gate_slice(all_families(), PROBE_SLICE, ids=lambda f: f.name))
def test_every_probe_scores_zero_on_every_family(fam, tmp_path):
    sig = make_signature(7, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
    task = generate_task(sig, tmp_path / "tasks", families=[fam])
    v = _validate(task, tmp_path)
    assert v.kept, f"{fam.name}: {v.stage}: {v.reason}\n{json.dumps(v.evidence)[:3000]}"
    # The hijack class: a payload in every program the final tests run, trying every route to a
    # forged grade (reward file write + chmod, symlink/FIFO swap, forged lines, channel theft,
    # lingering rewriter), directly and obfuscated.
    assert [c for c in v.checks if c.startswith("probe:")] == [
        "probe:planted_reward_file", "probe:fake_pytest_and_python_on_path", "probe:conftest_and_sitecustomize",
        "probe:poisoned_shell_rc", "probe:background_rewriter", "probe:hijack_direct", "probe:hijack_obfuscated"]


@pytest.mark.parametrize("concurrent_checks", [1, 4])
def test_hijackable_tests_are_dropped_with_the_stage_named(tmp_path, concurrent_checks):
    """A final test whose grade a program can forge (here: it also accepts a reward file the
    program it runs could write) is dropped at the hijack stage, with checks run one after
    another or several at once."""
    task = _good_task(tmp_path)
    (task / "tests" / "test_final_state.py").write_text(
        "import subprocess\n\n"
        "def test_tool_says_ok():\n"
        "    subprocess.run(['/bin/bash', '/app/check.sh'], capture_output=True)\n"
        "    import os\n"
        "    assert os.path.exists('/logs/verifier/reward.txt') or os.path.exists('/tmp/tool-ok')\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nmkdir -p /app\nprintf 'touch /tmp/tool-ok\\n' > /app/check.sh\ntouch /app/errors.txt\n")
    shutil.rmtree(task / "solution" / "alternatives")  # the family's second solution solves the real task
    v = _validate(task, tmp_path, concurrent_checks=concurrent_checks)
    assert not v.kept and v.stage == "hijack" and "hijack_direct" in v.reason, (v.stage, v.reason)
    assert v.checks[-1] == "probe:background_rewriter"  # every check before it passed, none after counts


def test_test_collection_that_depends_on_agent_files_is_dropped(tmp_path):
    task = _good_task(tmp_path)
    final = task / "tests" / "test_final_state.py"
    final.write_text(final.read_text() + "\n\nimport os\nimport pytest\n\n"
                     "@pytest.mark.parametrize('name', sorted(os.listdir('/app')))\n"
                     "def test_each_file(name):\n    assert name\n")
    v = _validate(task, tmp_path)
    assert not v.kept and v.stage == "collection", (v.stage, v.reason)


def test_validation_resumes_from_checkpoint(tmp_path):
    tasks = [_good_task(tmp_path, i) for i in range(3)]
    manifest = tmp_path / "manifest.json"
    atomic_write_json(manifest, {"shard": "00000", "tasks_dir": str(tmp_path / "tasks"),
                                 "tasks": [{"id": t.name} for t in tasks]})
    out = tmp_path / "verdicts.json"
    # A killed run left one finished verdict (and a torn line) in the checkpoint.
    planted = {"task_id": tasks[0].name, "kept": False, "stage": "planted", "reason": "from checkpoint",
               "checks": [], "evidence": {}}
    (tmp_path / "verdicts.json.partial.jsonl").write_text(json.dumps(planted) + "\n{\"task_id\": \"tf-torn")
    profile = tmp_path / "profile.json"
    result = run_validate_shard(manifest, out, tmp_path / "images", LIMITS, profile_path=profile)
    stages = [v["stage"] for v in result["verdicts"]]
    assert stages == ["planted", "kept", "kept"]  # the finished verdict was not redone
    # The per-step profile covers the tasks this run validated (not the resumed one), and is kept
    # out of the verdicts file.
    prof = read_json(profile)
    assert prof["tasks"] == 2 and "profile" not in read_json(out)
    assert prof["steps"]["oracle"]["count"] == 4 and prof["steps"]["reward_hack_probe"]["count"] == 10
    assert prof["steps"]["mutation"]["sandboxes"] > 0 and prof["steps"]["oracle"]["wall_s"] > 0
    if own_cgroup_dir() is not None:  # sandbox CPU is measured where a cgroup can be made
        assert all(s["cpu_unmeasured_sandboxes"] == 0 for s in prof["steps"].values())
        assert prof["steps"]["oracle"]["cpu_s"] > 0
    assert not (tmp_path / "verdicts.json.partial.jsonl").exists()
    corpus = write_corpus_manifest([out], tmp_path / "corpus.json")
    assert corpus["counts"] == {"total": 3, "kept": 2, "dropped": 1, "dropped_by_stage": {"planted": 1}}


# -- checks in flight at once (validate.concurrent_checks) ------------------------------------------

def _judge(jobs, lanes):
    """(stage, reason, evidence of the failure, checks, evidence) as _run_in_order leaves them."""
    from contextlib import nullcontext

    from termforge.quality.validate import _Fail, _run_in_order

    checks, evidence = [], {}
    try:
        _run_in_order(jobs, lanes, lambda name: nullcontext(), checks, evidence)
    except _Fail as f:
        return f.stage, f.reason, f.evidence, checks, evidence
    return None, None, None, checks, evidence


def test_concurrent_checks_are_judged_as_if_one_after_another():
    """Later checks may finish (and fail) first; the verdict is still the first failure in order,
    with only the checks before it counted and the evidence the failing check recorded."""
    import threading

    from termforge.quality.validate import _Check, _Fail

    def scenario(lanes):
        slow_done = threading.Event()
        used: dict = {}

        def record(lane, name):
            assert used.setdefault(lane, name) == name, f"lane {lane} in use by {used[lane]} when {name} started"

        def passes(name, wait=False):
            def run(lane, names, found):
                record(lane, name)
                try:
                    if wait:  # the later failure below happens while this one is still running
                        slow_done.wait(5)
                    names.append(name)
                    found[name] = True
                finally:
                    used.pop(lane)
            return run

        def fails(name, stage, after=None):
            def run(lane, names, found):
                record(lane, name)
                try:
                    found[f"{name}_partial"] = 1  # recorded before failing, as _mutation_check does
                    raise _Fail(stage, f"{name} failed", {"why": name})
                finally:
                    used.pop(lane)
                    if after is not None:
                        after.set()
            return run

        jobs = [_Check("a", passes("a", wait=len(lanes) > 1)), _Check("b", fails("b", "stage_b")),
                _Check("c", fails("c", "stage_c", after=slow_done), first=True), _Check("d", passes("d"))]
        return _judge(jobs, lanes)

    one_by_one = scenario(["lane0"])
    assert one_by_one == ("stage_b", "b failed", {"b_partial": 1, "why": "b"}, ["a"], {"a": True})
    assert scenario(["lane0", "lane1", "lane2"]) == one_by_one


def test_concurrent_checks_run_at_once_each_in_a_lane_of_its_own():
    import threading

    from termforge.quality.validate import _Check

    barrier = threading.Barrier(3, timeout=60)  # passes only if three checks are in flight together
    seen = []

    def run(lane, names, found):
        seen.append(lane)
        barrier.wait()
        names.append(lane)

    stage, _, _, checks, _ = _judge([_Check("x", run) for _ in range(3)], ["l0", "l1", "l2"])
    assert stage is None and sorted(seen) == sorted(checks) == ["l0", "l1", "l2"]
