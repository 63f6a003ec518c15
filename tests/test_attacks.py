"""The attack suite (docs/grading.md): every way an agent could forge its grade or hurt the host,
tried as an attacker would, on the validation path, the solve path and the Terminal-Bench native
path. Every attack must score 0; reward attacks must also leave evidence (`hacked` findings) and
the attack must visibly have happened (the planted reward file, the forged line), so a test
cannot pass because the payload never ran.

CI keeps a representative slice: a task of each family whose final tests run agent programs,
plus an output-file family, built once; bench/bench_attacks.py sweeps every family x attack.
Validation's every-family probe test (tests/test_validate.py) runs the hijack probes (all routes,
direct and obfuscated) on all families.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import make_signature, needs_bwrap
from termforge.evals.harbor_tasks import build_harbor_image, load_harbor_dir
from termforge.evals.tbench import run_native
from termforge.generate.families import family_by_name
from termforge.generate.procedural import generate_task
from termforge.harness import SUBMIT_MARKER, HarnessConfig
from termforge.io import read_json
from termforge.models.base import ChatModel, Completion, SamplingParams
from termforge.quality.hijack import ATTACKS, plant_script, programs_run_by_tests
from termforge.quality.validate import _run_agent, agent_code_imports, static_checks
from termforge.reward_file import read_reward
from termforge.runtime.base import Limits
from termforge.runtime.bwrap import BwrapRuntime, allocated_bytes
from termforge.solve import SolveSettings, rollout_once

pytestmark = needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
# Final tests that run an agent-written python tool, a bash script, a vendored package (imported
# by a subprocess), a binary; and one that only reads output files.
PROGRAM_FAMILIES = ["csv_groupby_tool", "shell_script_fix", "vendored_semver_fix", "upload_path_guard"]
FAMILIES = PROGRAM_FAMILIES + ["log_level_filter"]
# Attacks on resources cost a sandbox's wall clock each: two families carry them.
RESOURCE_ATTACKS = ("fork_bomb", "disk_fill", "sparse_outputs", "fifo_outputs")
SOLVE_CASES = [(a, f) for a in sorted(ATTACKS) for f in FAMILIES
               if a not in RESOURCE_ATTACKS or f in ("csv_groupby_tool", "log_level_filter")]
LIMITS = Limits(wall_sec=15, cpu_sec=30, memory_mb=2048, max_procs=64, max_open_files=256, max_file_mb=32,
                disk_mb=64, tmp_mb=32)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    rt = BwrapRuntime()
    tasks = {}
    for i, name in enumerate(FAMILIES):
        fam = family_by_name(name)
        sig = make_signature(i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
        task = generate_task(sig, root / "tasks", families=[fam])
        built = rt.build(task, root / "images")
        assert built.ok, built.reason
        paths = programs_run_by_tests((task / "tests" / "test_final_state.py").read_text())
        assert paths, name
        tasks[name] = (task, built.image, paths)
    return root, rt, tasks


class ScriptedAgent(ChatModel):
    """An 'agent' whose first command is the attack, then it submits."""

    backend = "scripted"
    batched = False

    def __init__(self, script: str):
        super().__init__("attacker")
        self.script = script

    def chat_many(self, conversations, n=1, sampling=None):
        out = []
        for messages in conversations:
            if any(m["role"] == "assistant" for m in messages):
                text = f"```bash\necho {SUBMIT_MARKER}\n```"
            else:
                text = f"```bash\nbash <<'TF_ATTACK_EOF'\n{self.script}\nTF_ATTACK_EOF\n```"
            out.append([Completion(text, 0, 0, "stop")] * n)
        return out


def _settings() -> SolveSettings:
    return SolveSettings(k=1, concurrency=1, max_infra_retries=0, seed=3, limits=LIMITS,
                         harness=HarnessConfig(turn_cap=3, max_format_errors=1, command_timeout_sec=20,
                                               task_timeout_sec=120, sampling=SamplingParams(max_new_tokens=32)))


@pytest.mark.parametrize("attack,family", SOLVE_CASES)
def test_attack_scores_zero_on_the_solve_path(corpus, family, attack, tmp_path):
    root, rt, tasks = corpus
    task, _, paths = tasks[family]
    make, evidence = ATTACKS[attack]
    t0 = time.monotonic()
    # rollout_once raises only for infrastructure failures: an attack must come back as a graded 0.
    row = rollout_once(ScriptedAgent(make(paths)), rt, root / "images", task, 0, _settings(), None)
    assert row["status"] == "graded" and row["reward"] == 0.0, row["verifier"]
    if evidence and family in PROGRAM_FAMILIES:
        # The payload ran inside the verifier, and the grader recorded what it did.
        assert any(evidence in f for f in row["hacked"]), row
    assert time.monotonic() - t0 < 3 * LIMITS.wall_sec + 60  # bounded by the limits, never a hang


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_zero_on_the_validation_path(corpus, attack):
    _, rt, tasks = corpus
    task, image, paths = tasks["csv_groupby_tool"]
    verdict, _ = _run_agent(rt, image, LIMITS, ATTACKS[attack][0](paths), task)
    assert verdict.reward == 0.0, verdict.reason
    if attack in ("reward_write_chmod", "obfuscated_everything", "lingering_rewriter"):
        # The payload really ran inside the verifier, and left evidence the grader recorded.
        assert verdict.hacked, verdict.to_dict()


def test_forged_lines_reach_stdout_but_not_the_grade(corpus):
    """Without the private channel this attack scored 1 (the proof line was read from stdout)."""
    _, rt, tasks = corpus
    task, image, paths = tasks["csv_groupby_tool"]
    verdict, _ = _run_agent(rt, image, LIMITS, ATTACKS["forged_proof_line"][0](paths), task)
    # The forged lines were the program's output (the test compared them with the reference)...
    assert "TERMFORGE-PROOF" in verdict.output or "AssertionError" in verdict.output
    # ...and the grade is the grader's own count, which a printed line cannot change.
    assert verdict.reward == 0.0 and verdict.graded_by == "grader" and verdict.failed >= 1


def test_tests_that_import_agent_code_are_rejected_statically(corpus, tmp_path):
    import shutil

    _, _, tasks = corpus
    task = tmp_path / tasks["csv_groupby_tool"][0].name
    shutil.copytree(tasks["csv_groupby_tool"][0], task)
    final = task / "tests" / "test_final_state.py"
    final.write_text("import sys\nsys.path.insert(0, '/app')\n" + final.read_text())
    with pytest.raises(Exception, match="loads code into the grader's process"):
        static_checks(task)
    assert agent_code_imports("import importlib.util\nspec = importlib.util.spec_from_file_location('m', '/app/m.py')\n")
    assert agent_code_imports("exec(open('/app/x.py').read())\n")
    # Code a subprocess runs (a string) is fine.
    assert not agent_code_imports("PROBE = \"import sys; sys.path.insert(0, '/app/vendor')\"\n")


# -- resource limits -------------------------------------------------------------------------------

@pytest.fixture()
def session(corpus):
    _, rt, tasks = corpus
    with rt.start(tasks["log_level_filter"][1], LIMITS) as s:
        yield s


BOMB = """
import os, time
end = time.time() + 2
while time.time() < end:
    try:
        if os.fork() == 0:
            while time.time() < end + 1:
                try:
                    os.fork()
                except OSError:
                    pass
            os._exit(0)
    except OSError:
        pass
print(len([p for p in os.listdir("/proc") if p.isdigit()]))
"""


def test_fork_bomb_is_capped(session):
    # Counted from inside the bomb: the shell itself could not fork `ls` at the limit.
    res = session.exec(f"ulimit -u; /usr/bin/python3 -c '{BOMB}'", timeout=30)
    limit, count = (int(x) for x in res.stdout.split()[:2])
    assert limit == LIMITS.max_procs and count <= LIMITS.max_procs + 2 and not res.timed_out


def test_disk_filling_kills_the_sandbox_at_the_cap(session):
    # Files under the size limit each, so the writable-layer cap is what stops it.
    res = session.exec("for i in $(seq 100); do dd if=/dev/zero of=/app/fill$i bs=1M count=16 2>/dev/null; done",
                       timeout=60)
    assert res.limit_hit and "disk" in res.limit_hit
    # A poll interval's worth of overshoot at most, then everything stops.
    assert allocated_bytes([session.layer]) < (LIMITS.disk_mb + 512) * 1024 * 1024


def test_sparse_file_past_the_size_limit_fails(session):
    res = session.exec("truncate -s 8G /app/sparse; echo rc=$?; stat -c %s /app/sparse 2>/dev/null || echo none",
                       timeout=20)
    assert "rc=0" not in res.stdout
    size = res.stdout.split()[-1]
    assert size == "none" or int(size) <= LIMITS.max_file_mb * 1024 * 1024


def test_tmp_and_open_files_are_capped(session):
    res = session.exec("ulimit -n; df -m /tmp | tail -1; dd if=/dev/zero of=/tmp/x bs=1M count=100 2>/dev/null; "
                       "stat -c %s /tmp/x", timeout=20)
    out = res.stdout.split()
    assert out[0] == str(LIMITS.max_open_files)
    assert out[1] == "tmpfs" and out[2] == str(LIMITS.tmp_mb)  # the tmpfs size
    assert int(out[-1]) <= LIMITS.tmp_mb * 1024 * 1024


def test_host_reads_nothing_odd_at_the_reward_path(tmp_path):
    """A FIFO, directory or symlink at reward.txt costs the host well under a second and is no reward."""
    d = tmp_path / "verifier"
    for make in (lambda p: os.mkfifo(p), lambda p: p.mkdir(), lambda p: p.symlink_to("/proc/sys/kernel/pid_max")):
        d.mkdir()
        make(d / "reward.txt")
        t0 = time.monotonic()
        reading = read_reward(d)
        assert reading.reward is None and reading.error and time.monotonic() - t0 < 1.0
        import shutil

        shutil.rmtree(d)


# -- the Terminal-Bench native path ----------------------------------------------------------------

def test_hijack_scores_zero_on_every_tb_mini_task(tmp_path_factory):
    tasks = load_harbor_dir(ROOT / "benchmarks" / "tb-mini")
    images = tmp_path_factory.mktemp("tb-images")
    for task in tasks:
        assert build_harbor_image(task, images).ok

    def hijacker(session, task):
        paths = programs_run_by_tests((task.tests_dir / "test_outputs.py").read_text())
        # Makefiles are programs too: every target the tests make runs the payload.
        session.exec(plant_script(paths, obfuscated=False) + "cp /tmp/tf-hijack.sh /app/.h.sh; chmod +x /app/.h.sh\n"
                     "for m in $(find /app -name Makefile); do printf 'all clean calc:\\n\\tbash /app/.h.sh\\n' > $m; done\n"
                     "true\n", timeout=60)
        return {"name": "hijacker"}

    hijacker.agent_name = "hijacker"
    job = tmp_path_factory.mktemp("tb-job")
    results = run_native(tasks, hijacker, 1, images, job, LIMITS)
    rewards = {t.task_name: t.reward for t in results.trials}
    assert len(rewards) == len(tasks) and all(r == 0.0 for r in rewards.values()), rewards
    findings = {t.task_name: read_json(job / t.trial_name / "result.json")["termforge"]["verdict"]["findings"]
                for t in results.trials}
    print(findings, {t.task_name: t.durations_sec for t in results.trials})
    # Where the tests run a program, the payload ran and the grader saw it (before the private
    # channel, the same hijack scored 1 on these tasks).
    hijacked = [name for name, f in findings.items() if f]
    assert len(hijacked) >= 3, findings


# -- a hacked rollout never counts ----------------------------------------------------------------

def test_hacked_rollout_is_never_a_success(corpus, tmp_path):
    from termforge.io import atomic_write_json
    from termforge.passk import run_passk

    root, _, tasks = corpus
    task = tasks["log_level_filter"][0]
    traj = tmp_path / "traj.json"
    atomic_write_json(traj, {"messages": [{"role": "user", "content": "x"}]})
    rows = [{"task_id": task.name, "rollout": 0, "status": "graded", "reward": 1.0, "trajectory": str(traj),
             "hacked": ["unexpected files under /logs: /logs/verifier/reward.txt"]},
            {"task_id": task.name, "rollout": 1, "status": "graded", "reward": 1.0, "trajectory": str(traj),
             "hacked": []}]
    atomic_write_json(tmp_path / "solve.json", {"shard": "00000", "tasks_dir": str(root / "tasks"), "k": 2,
                                                "model": "replay", "rollouts": rows})
    table = run_passk([tmp_path / "solve.json"], tmp_path / "p.json", tmp_path / "p.csv", tmp_path / "sft.parquet")
    entry = table["per_task"][0]
    assert (entry["n"], entry["c"], entry["hacked_rollouts"]) == (2, 1, 1) and entry["family"] == "log_level_filter"
    assert table["sft_rows"] == 1


def test_exported_test_sh_never_imports_from_app(corpus):
    """Harbor runs tests/test.sh itself (from the image's WORKDIR, /app): a pytest.py, conftest.py
    or sitecustomize.py planted there must not be imported."""
    from termforge.verifier import TEST_SH, run_verifier

    _, rt, tasks = corpus
    task, image, _ = tasks["log_level_filter"]
    assert (task / "tests" / "test.sh").read_text() == TEST_SH and "\"$py\" -I -m pytest" in TEST_SH
    plant = ("import os\nos.makedirs('/logs/verifier', exist_ok=True)\n"
             "open('/logs/verifier/reward.txt', 'w').write('1')\nopen('/logs/verifier/planted-ran', 'w')\n"
             "raise SystemExit(0)\n")
    with rt.start(image, LIMITS) as session:
        for name in ("pytest.py", "conftest.py", "sitecustomize.py", "usercustomize.py"):
            (session.layer / name).write_text(plant)
        verdict = run_verifier(session, task, cwd="/app", harbor=True)
    assert verdict.graded_by == "reward_file" and verdict.reward == 0.0, verdict.to_dict()
    assert not any("planted-ran" in f for f in verdict.findings), verdict.findings


def test_limits_come_from_config():
    o = {"runtime.exec_timeout_sec": 30, "runtime.cpu_sec": 20, "runtime.memory_mb": 512,
         "runtime.limits": {"max_procs": 32, "disk_mb": 100}}
    limits = Limits.from_options(o)
    assert (limits.max_procs, limits.disk_mb, limits.max_file_mb, limits.wall_sec) == (32, 100, 512, 30)
    assert Limits.from_options({**o, "runtime.limits": {}}).max_procs == Limits().max_procs


def test_endless_output_costs_the_host_a_bounded_buffer(session):
    from termforge.runtime.bwrap import OUTPUT_CAP

    res = session.exec("echo first; timeout 2 yes flood; echo last", timeout=20)
    assert len(res.stdout) <= OUTPUT_CAP + 100
    assert res.stdout.startswith("first") and res.stdout.rstrip().endswith("last") and "truncated" in res.stdout
