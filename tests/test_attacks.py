"""The attack suite (docs/grading.md): every way an agent could forge its grade or hurt the host,
tried as an attacker would, on the validation path, the solve path and the Terminal-Bench native
path. Every attack must score 0; reward attacks must also leave evidence (`hacked` findings) and
the attack must visibly have happened (the planted reward file, the forged line), so a test
cannot pass because the payload never ran.

CI keeps a representative slice: a task of each family whose final tests run agent programs,
plus an output-file family, built once; bench/bench_attacks.py sweeps every family x attack.
Validation's every-family probe test (tests/test_validate.py) runs the hijack probes (all routes,
direct and obfuscated) on a family per kind of program in the gate, on every family in `make test-all`.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from conftest import gate_slice, make_signature, needs_bwrap, returns
from termforge.evals.harbor_tasks import build_harbor_image, load_harbor_dir
from termforge.evals.tbench import run_native
from termforge.generate.families import family_by_name
from termforge.generate.procedural import generate_task
from termforge.harness import SUBMIT_MARKER, HarnessConfig
from termforge.io import read_json
from termforge.models.base import ChatModel, Completion, SamplingParams
from termforge.quality.hijack import (ATTACKS, CHANNEL_STEAL_PY, ROUTES, odd_names_attack, plant_script,
                                     programs_run_by_tests)
from termforge.quality.validate import _run_agent, agent_code_imports, static_checks
from termforge.grading.reward_file import read_reward
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.runtime.process import DiskWatch, allocated_bytes
from termforge.solve import SolveSettings, rollout_once

pytestmark = needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
# Final tests that run an agent-written python tool, a bash script, a vendored package (imported
# by a subprocess), a binary; and one that only reads output files.
PROGRAM_FAMILIES = ["csv_groupby_tool", "shell_script_fix", "vendored_semver_fix", "upload_path_guard"]
FAMILIES = PROGRAM_FAMILIES + ["log_level_filter"]
# Attacks on resources cost a sandbox's wall clock each, and odd names have tests of their own
# below: two families carry them.
RESOURCE_ATTACKS = ("fork_bomb", "disk_fill", "shm_fill", "sparse_outputs", "fifo_outputs", "odd_names")
SOLVE_CASES = [(a, f) for a in sorted(ATTACKS) for f in FAMILIES
               if a not in RESOURCE_ATTACKS or f in ("csv_groupby_tool", "log_level_filter")]
LIMITS = Limits(wall_sec=15, cpu_sec=30, memory_mb=2048, max_procs=64, max_open_files=256, max_file_mb=32,
                disk_mb=64, tmp_mb=32, tree_entries=4000)


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


# FIFOs for outputs wait out a sandbox's wall limit: the gate runs them where output files are
# what the tests read (log_level_filter); test-all adds the program family.
@pytest.mark.parametrize("attack,family", gate_slice(SOLVE_CASES, set(SOLVE_CASES) - {("fifo_outputs", "csv_groupby_tool")}))
def test_attack_scores_zero_on_the_solve_path(corpus, family, attack, tmp_path):
    root, rt, tasks = corpus
    task, _, paths = tasks[family]
    make, evidence = ATTACKS[attack]
    t0 = time.monotonic()
    # rollout_once raises only for infrastructure failures: an attack must come back as a graded 0.
    row = rollout_once(ScriptedAgent(make(paths)), rt, root / "images", task, 0, _settings(), None)
    assert row["status"] == "graded" and row["reward"] == 0.0, row["verifier"]
    if attack in ("disk_fill", "shm_fill"):  # the agent's own run hit the one disk cap, and says so
        assert any("disk" in hit for hit in row["agent_limit_hits"]), row
    if evidence and family in PROGRAM_FAMILIES:
        # The payload ran inside the verifier, and the grader recorded what it did.
        assert any(evidence in f for f in row["hacked"]), row
    # Never a hang: the harness's task timeout bounds the agent, the wall limits each grading run. A
    # bound on what the limits allow, not a timing claim: a busy machine stays far inside it.
    assert time.monotonic() - t0 < _settings().harness.task_timeout_sec + 3 * LIMITS.wall_sec


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
    # A poll interval's worth of overshoot at most, then everything stops. How much a poll interval
    # is worth depends on the machine's write speed (page-cache writes reach 3 GB/s here, 600 MB
    # in one 0.2 s interval): the bound is two intervals at the rate this sandbox wrote, far
    # below the 1.6 GB the loop writes when nothing stops it.
    time.sleep(0.3)  # the sandbox's own processes die a moment after bwrap (SIGKILL by --die-with-parent)
    written = allocated_bytes([session.layer])
    rate = written / max(res.duration_sec, 1e-3)
    assert written < LIMITS.disk_mb * 1024 * 1024 + rate * 2 * DiskWatch.INTERVAL + 64 * 1024 * 1024, \
        (written, res.duration_sec)
    time.sleep(0.5)
    assert allocated_bytes([session.layer]) == written  # nothing writes once the sandbox is killed


def test_sparse_file_past_the_size_limit_fails(session):
    res = session.exec("truncate -s 8G /app/sparse; echo rc=$?; stat -c %s /app/sparse 2>/dev/null || echo none",
                       timeout=20)
    assert "rc=0" not in res.stdout
    size = res.stdout.split()[-1]
    assert size == "none" or int(size) <= LIMITS.max_file_mb * 1024 * 1024


def test_open_files_are_capped(session):
    res = session.exec("ulimit -n", timeout=20)
    assert res.stdout.split() == [str(LIMITS.max_open_files)]


# Every place a sandbox can write (issue 39: /dev/shm was a tmpfs of half the host's memory that no
# limit counted). Files of 8 MiB, under the file-size limit, so that only the disk cap stops them.
WRITABLE_PLACES = ("/dev/shm", "/tmp", "/home/user", "/app", "/dev/shm/deep/er")


def _fill(place: str, mib: int) -> str:
    return (f"mkdir -p {place}; for i in $(seq {mib // 8}); do dd if=/dev/zero of={place}/.fill$i bs=1M count=8 "
            "2>/dev/null || break; done; echo filled")


@pytest.mark.parametrize("place", WRITABLE_PLACES)
def test_every_writable_place_counts_against_the_disk_cap(session, place):
    res = session.exec(_fill(place, 5 * LIMITS.disk_mb), timeout=60)
    assert res.limit_hit and "disk" in res.limit_hit, (place, res.stdout[-300:], res.stderr[-300:])


def test_the_disk_cap_is_one_budget_for_all_places_together(session):
    """Each place below the cap, all of them together past it: one budget, not one per mount."""
    third = LIMITS.disk_mb // 2
    res = session.exec("; ".join(_fill(p, third) for p in ("/app", "/tmp", "/dev/shm", "/home/user")), timeout=60)
    assert res.limit_hit and "disk" in res.limit_hit, (res.stdout[-300:], res.stderr[-300:])


def test_dev_itself_is_read_only_and_its_nodes_work(session):
    res = session.exec("for p in /dev/x /dev/pts/x /dev/.hidden; do (echo 1 > $p) 2>/dev/null && echo WROTE $p; done; "
                       "mkdir /dev/d 2>/dev/null && echo MADE; ln -s /app /dev/l 2>/dev/null && echo LINKED; "
                       "echo ok > /dev/null && head -c 4 /dev/urandom | wc -c && head -c 2 /dev/zero | wc -c",
                       timeout=20)
    assert res.stdout.split() == ["4", "2"], res.stdout


# System V shared memory: segments written and detached one after another, memory that no file
# and no rlimit counts (1,280 MiB under disk_mb: 64 before each sandbox had an IPC namespace of
# its own with limits).
SYSV_SHM_FILL = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
made = 0
for _ in range(64):
    sid = libc.shmget(0, 8 << 20, 0o1000 | 0o600)
    if sid < 0:
        break
    addr = libc.shmat(sid, None, 0)
    ctypes.memset(addr, 1, 8 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
    made += 1
print(made * 8)
"""


def sysv_shm_mib(run) -> int:
    return int(run(f"/usr/bin/python3 -c {shlex.quote(SYSV_SHM_FILL)}").stdout.split()[-1])


def test_system_v_shared_memory_is_capped(session):
    from termforge.runtime.bwrap import own_ipc_namespaces

    if not own_ipc_namespaces():
        pytest.skip("IPC namespaces with limits need root (bwrap's own IPC namespace has none)")
    assert sysv_shm_mib(lambda c: session.exec(c, timeout=30)) <= LIMITS.tmp_mb
    shell = session.open_shell()
    try:
        assert sysv_shm_mib(lambda c: shell.run(c, 30)) <= LIMITS.tmp_mb
    finally:
        shell.close()


def test_the_agents_shell_counts_tmp_and_shm_against_the_disk_cap(session):
    shell = session.open_shell()
    try:
        first = shell.run("echo kept > /tmp/note; echo kept > /dev/shm/note; cat /tmp/note /dev/shm/note", 20)
        assert first.stdout.split() == ["kept", "kept"] and not first.limit_hit
        res = shell.run(_fill("/dev/shm", 5 * LIMITS.disk_mb), 60)
        assert res.limit_hit and "disk" in res.limit_hit, res.stdout[-300:]
    finally:
        shell.close()


# What a sandbox may read of every process it can see (issue 39: bwrap, the sandbox's pid 1, showed
# its own command line: the image cache's root filesystem and the session's tree on the work root).
PROC_SCAN = r"""
import os, sys
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for task in os.listdir(f"/proc/{pid}/task"):
            for name in ("cmdline", "environ", "comm"):
                try:
                    seen.append(open(f"/proc/{pid}/task/{task}/{name}", "rb").read())
                except OSError:
                    pass
sys.stdout.buffer.write(b"\n".join(seen))
"""


def host_paths(session) -> list[str]:
    """The host paths a sandbox of `session` is made from, and the directories holding them."""
    paths = [session.workdir, session.workdir.parent, Path(session.rootfs), Path(session.rootfs).parent]
    return [str(p) for p in paths if str(p) not in ("/", "/tmp")]


def test_no_process_a_sandbox_sees_shows_a_host_path(session):
    res = session.exec(f"sleep 5 & /usr/bin/python3 -c {shlex.quote(PROC_SCAN)}", timeout=20)
    assert res.exit_code == 0 and "/usr/bin/python3" in res.stdout, res.stderr
    shell = session.open_shell()
    try:
        in_shell = shell.run(f"/usr/bin/python3 -c {shlex.quote(PROC_SCAN)}", 20)
    finally:
        shell.close()
    assert "--noprofile" in in_shell.stdout
    for text in (res.stdout, in_shell.stdout):
        assert not [p for p in host_paths(session) if p in text], text[:2000]


def test_host_reads_nothing_odd_at_the_reward_path(tmp_path):
    """A FIFO, directory or symlink at reward.txt never blocks the host and is no reward."""
    d = tmp_path / "verifier"
    for make in (lambda p: os.mkfifo(p), lambda p: p.mkdir(), lambda p: p.symlink_to("/proc/sys/kernel/pid_max")):
        d.mkdir()
        make(d / "reward.txt")
        reading = returns(read_reward, d)
        assert reading.reward is None and reading.error
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
    from termforge.grading.verifier import TEST_SH, run_verifier

    _, rt, tasks = corpus
    task, image, _ = tasks["log_level_filter"]
    assert (task / "tests" / "test.sh").read_text() == TEST_SH and '"$py" -I -c "$runner"' in TEST_SH
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


# == round two (issue #28): nothing an agent does is an infrastructure error ========================
#
# Each class below runs on every path that grades an agent: validation, solve, terminal training
# episodes and the Terminal-Bench native runner. Every one must score 0 with a finding, never be
# recorded infra_failed (or an error), and leave no session directory on the host.

def _no_leftovers(work: Path) -> list[str]:
    return sorted(os.listdir(work)) if work.exists() else []


_WORK_DIRS: list[Path] = []


def _work_dir() -> Path:
    """A fresh host work root for sessions (searchable by their uids, like /tmp itself)."""
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="tf-attack-work-"))
    work.chmod(0o711)
    _WORK_DIRS.append(work)
    return work


@pytest.fixture(autouse=True, scope="module")
def _remove_work_dirs():
    yield
    import subprocess

    for work in _WORK_DIRS:
        subprocess.run(["rm", "-rf", str(work)])


def _runtime(tmp_path: Path) -> tuple[BwrapRuntime, Path]:
    work = _work_dir()
    return BwrapRuntime(work_root=work), work


# Pathological trees, each made under the directory given as $1. `deep` and `wide` are beyond what
# the host walks (LIMITS: 128 levels, 4,000 entries); the others it walks without following or
# reading anything (a path far past PATH_MAX, symlink loops and links into bind mounts, modes 000,
# FIFOs and sockets).
TREES = {
    "deep": "python3 - \"$1\" <<'PY'\nimport os, sys\nos.makedirs(sys.argv[1], exist_ok=True)\n"
            "os.chdir(sys.argv[1])\nfor _ in range(1300):\n    os.mkdir('d')\n    os.chdir('d')\nPY",
    "wide": "python3 - \"$1\" <<'PY'\nimport os, sys\nos.makedirs(sys.argv[1], exist_ok=True)\n"
            "for i in range(6000):\n    open(os.path.join(sys.argv[1], f'f{i}'), 'w').close()\nPY",
    "long_names": "python3 - \"$1\" <<'PY'\nimport os, sys\nos.makedirs(sys.argv[1], exist_ok=True)\n"
                  "os.chdir(sys.argv[1])\nfor i in range(60):\n    os.mkdir('n' * 255)\n    os.chdir('n' * 255)\n"
                  "open('x' * 255, 'w').write('deep')\nPY",
    "loops": "mkdir -p \"$1/a/b\" && ln -s / \"$1/root\" && ln -s . \"$1/self\" && ln -s ../.. \"$1/a/b/up\" && "
             "ln -s /logs \"$1/logs\" && ln -s /tests \"$1/tests\" && ln -s /app \"$1/app\" && ln -s /proc/self/root \"$1/proc\"",
    "unreadable": "mkdir -p \"$1/x/y\" && echo s > \"$1/x/y/f\" && echo t > \"$1/x/g\" && chmod 000 \"$1/x/g\" \"$1/x/y\" "
                  "\"$1/x\" \"$1\"",
    "fifos": "mkdir -p \"$1\" && mkfifo \"$1/pipe\" && python3 -c 'import socket, sys; "
             "socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \"$1/sock\"",
}
UNWALKABLE = {"deep", "wide"}


def tree_script(kinds, where: str) -> str:
    """Bash that makes each kind of tree under where/<kind> (never failing the agent's command)."""
    lines = []
    for kind in kinds:
        body = TREES[kind].replace("\n", "\n")
        lines.append(f"tf_tree_{kind}() {{\n{body}\n}}\ntf_tree_{kind} {where}/{kind} 2>/dev/null")
    return "\n".join(lines) + "\ntrue\n"


def tree_attack(kinds, where: str, paths: list[str]) -> str:
    """The agent's script: the trees under /app now (`app`), or planted by the programs the final
    tests run, under /logs while they run (`logs`)."""
    if where == "app":
        return tree_script(kinds, "/app/trees")
    return plant_script(paths, False, {"trees": tree_script(kinds, "/logs/trees")})


def _tree_finding(findings: list[str]) -> bool:
    return any("pathological tree" in f or "under /logs" in f for f in findings)


@pytest.mark.parametrize("where", ["app", "logs"])
@pytest.mark.parametrize("kind", sorted(TREES))
def test_pathological_tree_scores_zero_on_the_validation_path(corpus, kind, where, tmp_path):
    _, _, tasks = corpus
    rt, work = _runtime(tmp_path)
    task, image, paths = tasks["csv_groupby_tool"]
    # Before #28: RecursionError out of os.walk/shutil.rmtree for `deep`, the shard crashed.
    verdict, _ = _run_agent(rt, image, LIMITS, tree_attack([kind], where, paths), task)
    assert verdict.reward == 0.0, verdict.reason
    if kind in UNWALKABLE or where == "logs":
        assert _tree_finding(verdict.findings), verdict.to_dict()
    if kind in UNWALKABLE and where == "app":
        assert verdict.graded_by == "host" and "cannot walk" in verdict.reason
    assert _no_leftovers(work) == []


@pytest.mark.parametrize("where", ["app", "logs"])
def test_pathological_trees_score_zero_on_the_solve_path(corpus, where, tmp_path):
    root, _, tasks = corpus
    rt, work = _runtime(tmp_path)
    task, _, paths = tasks["csv_groupby_tool"]
    row = rollout_once(ScriptedAgent(tree_attack(sorted(TREES), where, paths)), rt, root / "images", task, 0,
                       _settings(), None)
    # Before #28 this rollout raised, was retried, recorded infra_failed and dropped from pass@k.
    assert row["status"] == "graded" and row["reward"] == 0.0, row["verifier"]
    assert _tree_finding(row["hacked"]), row["hacked"]
    assert _no_leftovers(work) == []


class ScriptedEngine:
    """A rollout engine for terminal training episodes whose first reply is an attack script."""

    def __init__(self, tok, script: str):
        self.tok, self.script, self.stop_ids = tok, script, [tok.eos_token_id]

    def generate(self, prompts, max_new_tokens, seed):
        from termforge.opsd.terminal import Sample

        out = []
        for prompt, cap in zip(prompts, max_new_tokens):
            turn = self.tok.decode(prompt).count("<|im_start|>assistant") - 1
            reply = (f"```bash\nbash <<'TF_ATTACK_EOF'\n{self.script}\nTF_ATTACK_EOF\n```" if turn == 0
                     else f"```bash\necho {SUBMIT_MARKER}\n```")
            ids = self.tok(reply, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append(Sample(ids[:cap], [-0.1] * min(cap, len(ids)), "stop"))
        return out


_TOKENIZER: dict = {}


def _episode(tasks_dir: Path, images_dir: Path, task_id: str, script: str, tmp_path: Path):
    """One terminal training episode (opsd/terminal.py) whose policy runs `script`."""
    pytest.importorskip("torch")
    from conftest import smollm2_tokenizer
    from termforge.opsd.terminal import EpisodeSpec, run_terminal_episodes

    rt, work = _runtime(tmp_path)
    tok = _TOKENIZER.get("tok") or _TOKENIZER.setdefault("tok", smollm2_tokenizer())
    episodes, stats = run_terminal_episodes(
        ScriptedEngine(tok, script), tok, [EpisodeSpec(task_id, 0, "grpo")], tasks_dir=tasks_dir,
        images_dir=images_dir, runtime=rt, harness=_settings().harness, limits=LIMITS, seed=1,
        max_new_tokens=4096, max_infra_retries=0)
    ep = episodes[0]
    assert stats["infra_failed"] == 0 and ep.status == "graded", ep.infra_attempts
    assert _no_leftovers(work) == []
    return ep


@pytest.mark.parametrize("where", ["app", "logs"])
def test_pathological_trees_score_zero_on_terminal_training_episodes(corpus, where, tmp_path):
    root, _, tasks = corpus
    task, _, paths = tasks["csv_groupby_tool"]
    ep = _episode(root / "tasks", root / "images", task.name, tree_attack(sorted(TREES), where, paths), tmp_path)
    assert ep.reward == 0.0 and _tree_finding(ep.verifier["hacked"]), ep.verifier


def test_pathological_trees_score_zero_on_the_tb_native_path(tb_tasks, tmp_path):
    task = tb_tasks["fix-median"]
    images = tb_tasks["_images"]
    work = _work_dir()

    def planter(where):
        def agent(session, t):
            session.exec(tree_attack(sorted(TREES), where, ["/app/stats.py"]), timeout=60)
            return {"name": f"trees-{where}"}

        agent.agent_name = f"trees-{where}"
        return agent

    for where in ("app", "logs"):
        res = run_native([task], planter(where), 1, images, tmp_path / where, LIMITS, work_root=work)
        trial = read_json(tmp_path / where / res.trials[0].trial_name / "result.json")
        # Before #28 the RecursionError aborted the whole run.
        assert res.trials[0].reward == 0.0 and res.trials[0].error_kind is None, trial["exception_info"]
        assert _tree_finding(trial["termforge"]["verdict"]["findings"]), trial["termforge"]["verdict"]
    assert _no_leftovers(work) == []


def test_the_disk_cap_survives_a_tree_the_watcher_cannot_walk(session):
    """A deep tree first (before #28 it killed the watcher's thread), then 200 MiB: the sandbox is
    killed, and well under the cap plus one interval's writing was written. The writer is paced
    (2 MiB per 50 ms): the watcher polls, so an unpaced writer on tmpfs may write all 200 MiB
    within one interval on an idle machine (DiskWatch's documented overshoot), which says nothing
    about whether the deep tree stopped the watcher."""
    import subprocess

    res = session.exec(tree_script(["deep"], "/app/trees") +
                       "for i in $(seq 100); do dd if=/dev/zero of=/app/fill$i bs=1M count=2 2>/dev/null; "
                       "sleep 0.05; done", timeout=60)
    assert res.limit_hit and "disk" in res.limit_hit, res
    used = int(subprocess.run(["du", "-sk", str(session.layer)], capture_output=True, text=True).stdout.split()[0])
    assert used < (LIMITS.disk_mb + 64) * 1024, used


# -- host work directories are always removed ------------------------------------------------------

@pytest.mark.parametrize("as_root", [True, False])
def test_work_directories_are_removed_however_deep_and_locked(as_root):
    """remove_tree on 1,500 levels of 200-character names with modes 000 on the way, FIFOs,
    sockets and symlink loops: nothing is left, as root and as the tree's unprivileged owner."""
    import subprocess
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("builds the unprivileged case by switching uid, which needs root")
    base = Path(tempfile.mkdtemp(prefix="tf-remove-"))
    try:
        base.chmod(0o755)
        root = base / "tree"
        root.mkdir()
        make = r"""
import os, socket, sys
root = sys.argv[1]
os.chdir(root)
os.mkfifo("pipe"); socket.socket(socket.AF_UNIX).bind("sock"); os.symlink(".", "loop"); os.symlink("/", "slash")
os.makedirs("x/y"); open("x/y/f", "w").close(); os.chmod("x/y", 0); os.chmod("x", 0)
for i in range(1500):
    os.mkdir("d" * 200); os.chdir("d" * 200)
    if i % 300 == 150:
        os.chmod("..", 0)  # we are below it already: its owner can neither list nor enter it any more
open("f", "w").write("x")
"""
        code = ("import os, sys; sys.path.insert(0, sys.argv[2]); from termforge.runtime.trees import remove_tree; "
                "print(remove_tree(sys.argv[1]), os.path.exists(sys.argv[1]))")
        src = str(Path(__file__).resolve().parents[1] / "src")
        user = [] if as_root else ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if not as_root:  # the user's own work root, as on a cluster
            os.chown(base, 65534, 65534)
            os.chown(root, 65534, 65534)
        subprocess.run([*user, "/usr/bin/python3", "-c", make, str(root)], check=True)
        # Python's own helper fails here: RecursionError (shutil.rmtree) -- the pre-#28 cleanup.
        out = subprocess.run([*user, "/usr/bin/python3", "-c", code, str(root), src], capture_output=True, text=True)
        assert out.stdout.strip() == "[] False", out.stdout + out.stderr
    finally:
        subprocess.run(["rm", "-rf", str(base)])  # coreutils rm: any depth, whatever happened above


# -- the Terminal-Bench native path: tb-mini copies --------------------------------------------------

TB_MINI = ROOT / "benchmarks" / "tb-mini"
# test.sh runs the agent's code before the tests (as a task that sources a venv under /app does).
SOURCES_APP = ". /app/env.sh\n"


def _tb_copy(root: Path, name: str, new_name: str, test_sh_prefix: str = "", extra_test: str = "") -> Path:
    import shutil

    d = root / new_name
    shutil.copytree(TB_MINI / name, d)
    if test_sh_prefix:
        text = (d / "tests" / "test.sh").read_text().replace("mkdir -p /logs/verifier\n",
                                                            "mkdir -p /logs/verifier\n" + test_sh_prefix, 1)
        (d / "tests" / "test.sh").write_text(text)
    if extra_test:
        (d / "tests" / "test_outputs.py").write_text((d / "tests" / "test_outputs.py").read_text() + extra_test)
    return d


def test_a_tb_dockerfile_build_cannot_reach_the_host_or_the_network(tmp_path):
    """A third-party Dockerfile's RUN steps are task code: they run as root of a user namespace
    mapped to unprivileged ids (never the host's root), with no network when the config says offline
    (eval.tbench.build_network: false; with network: tests/test_tbench_network.py), in the step sandbox (bwrap
    pivot_rooted into the image), in a pid namespace of their own (no host process or its command
    line is visible); what they write lands in the image, never on the host."""
    import shutil
    import subprocess

    task_dir = tmp_path / "tb-hostile-build"
    shutil.copytree(TB_MINI / "log-error-summary", task_dir)
    marker = f"/tmp/tf-build-escape-{os.getpid()}"
    canary = f"tf-host-process-canary-{os.getpid()}"  # grep'd as ...-123[4]: no build command line holds it
    dockerfile = task_dir / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + (
        f"RUN echo pwned > {marker}; cp /proc/self/uid_map /app/uid_map; readlink /proc/self/ns/user > /app/userns; "
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' > /app/ifaces; "
        "(ls /work /root/.cache 2>&1 || true) > /app/host_view; "
        f"(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c {canary[:-1]}[{canary[-1]}] || true) > /app/host_procs\n"))
    from termforge.evals.harbor_tasks import NativeOptions, load_harbor_task

    # A host process whose command line a build that sees the host's processes would find.
    host_process = subprocess.Popen(["bash", "-c", f"exec -a {canary} sleep 600"])
    try:
        built = build_harbor_image(load_harbor_task(task_dir), tmp_path / "images",
                                   options=NativeOptions(build_network=False))
    finally:
        host_process.kill()
        host_process.wait()
    assert built.ok, built.reason
    layer = built.image.path / "layer"
    inside, _outside, _count = (layer / "uid_map").read_text().split()[:3]
    # uid 0 of a user namespace other than the host's (whose ids the build's maps to subordinate ones)
    assert inside == "0" and (layer / "userns").read_text().strip() != os.readlink("/proc/self/ns/user"), \
        "the build ran as the host's root"
    assert (layer / "ifaces").read_text().split() == ["lo"], "the build had a network"
    view = (layer / "host_view").read_text().splitlines()
    assert len(view) == 2 and all("No such file or directory" in line for line in view), view
    assert not Path(marker).exists(), "the build wrote the host's /tmp"
    assert (layer / "host_procs").read_text().split() == ["0"], "the build saw the host's processes"


def test_a_dockerfile_run_step_finds_nothing_of_the_host(tmp_path):
    """Issue 39 item 1: a RUN step escaped buildah's chroot (mkdir x; chroot x; cd .. x64; chroot .)
    into the host's tree, read a host-only file and wrote the host's /tmp, /var/tmp and /dev/shm.
    Every escape of tests/build_attacks.py (that one, /proc/1/root, another process's root, an
    inherited descriptor, a new proc or bind mount, /sys and the host's devices, the builder's
    processes and the capabilities to reach them) runs in one build of a tb-mini Dockerfile, and
    finds nothing: no trace of the host canary's content in the image or the log, nothing SEEN,
    no marker on the host. Each escape must have run. bench/bench_attacks.py --builds runs each
    in a build of its own."""
    import shutil

    from build_attacks import ESCAPES, Canary
    from termforge.evals.harbor_tasks import load_harbor_task
    from termforge.images.dockerfile import find_built

    task_dir = tmp_path / "tb-escaping-build"
    shutil.copytree(TB_MINI / "log-error-summary", task_dir)
    canary = Canary.plant()
    try:
        dockerfile = task_dir / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + canary.install(task_dir / "environment", ESCAPES))
        built = build_harbor_image(load_harbor_task(task_dir), tmp_path / "images")
        assert built.ok, built.reason
        rootfs = find_built(read_json(built.image.path / "image.json")["dockerfile"]["key"]).rootfs
        findings = canary.findings(ESCAPES, built.image.path / "layer" / "escape", built.log, rootfs)
        assert findings == [], findings
    finally:
        canary.remove()


@pytest.fixture(scope="module")
def tb_tasks(tmp_path_factory):
    from termforge.evals.harbor_tasks import load_harbor_task

    root = _work_dir()  # searchable by the sessions' uids: the oracle binds solution/ from here
    images = root / "images"
    dirs = {"fix-median": _tb_copy(root, "fix-median", "fix-median")}
    venv = _tb_copy(root, "fix-median", "fix-median-venv", SOURCES_APP)
    (venv / "environment" / "src" / "env.sh").write_text("export STATS_MODE=plain\n")
    dockerfile = venv / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("src/test_stats.py /app/", "src/test_stats.py src/env.sh /app/"))
    dirs["fix-median-venv"] = venv
    tasks = {name: load_harbor_task(d) for name, d in dirs.items()}
    for task in tasks.values():
        assert build_harbor_image(task, images).ok
    return {**tasks, "_images": images, "_root": root}


def _tb_run(tb_tasks, task, agent, tmp_path, name: str):
    from termforge.evals.tbench import oracle_agent  # noqa: F401 - agents below may call it

    work = _work_dir()
    res = run_native([task], agent, 1, tb_tasks["_images"], tmp_path / name, LIMITS, work_root=work)
    trial = read_json(tmp_path / name / res.trials[0].trial_name / "result.json")
    assert _no_leftovers(work) == []
    return res.trials[0], trial


def _agent(name: str, script: str, solve: bool = False):
    from termforge.evals.tbench import oracle_agent

    def agent(session, task):
        if solve:
            oracle_agent(session, task)
        res = session.exec(script, timeout=60)
        return {"name": name, "output_tail": res.tail(3000)}

    agent.agent_name = name
    return agent


# -- the grade channel cannot be handed away (Harbor tasks whose test.sh runs agent code first) ------

FAKE_TEST = "def test_x():\n    pass\n"
CHANNEL_FIRST = f"""cat > /app/env.sh <<'TF_ENV'
# Runs inside test.sh, before /verifier/run-tests: everything the old design let it do.
printf %s {FAKE_TEST!r} > /tmp/test_fake.py
/usr/bin/python3 -c {shlex.quote(CHANNEL_STEAL_PY)} 2>/dev/null
/verifier/run-tests /tmp/test_fake.py >/dev/null 2>&1
mkdir -p /logs/verifier; echo '{{"reward": 1}}' > /logs/verifier/reward.json
printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n    o = yield\\n    o.get_result().outcome = "passed"\\n' > /tests/conftest.py 2>/dev/null
printf 'def test_x():\\n    pass\\n' > /tests/test_outputs.py 2>/dev/null
TF_ENV
"""
KILL_SUPERVISOR = """cat > /app/env.sh <<'TF_ENV'
mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt
for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q -- '--supervise' && kill -9 ${p#/proc/}; done
TF_ENV
"""
GARBAGE_REQUESTS = """cat > /app/env.sh <<'TF_ENV'
# Garbage on the request socket so the real grader would be refused, then a reward file of its own.
python3 -c 'import os, socket
fd = int(os.environ["TERMFORGE_RUN_TESTS_FD"])
s = socket.socket(fileno=os.dup(fd))
for m in (b"termforge-grader-hello", b"{}", b"not json"):
    s.send(m)'
mkdir -p /logs/verifier; echo '{"reward": 1}' > /logs/verifier/reward.json
TF_ENV
"""


def test_a_harbor_task_whose_test_sh_runs_agent_code_first_still_grades_honestly(tb_tasks, tmp_path):
    """The oracle with the task's own env.sh: 1 (the supervisor path works for honest code)."""
    from termforge.evals.tbench import oracle_agent

    record, trial = _tb_run(tb_tasks, tb_tasks["fix-median-venv"], oracle_agent, tmp_path, "oracle")
    verdict = trial["termforge"]["verdict"]
    assert record.reward == 1.0 and verdict["graded_by"] == "grader" and not verdict["findings"], verdict


@pytest.mark.parametrize("attack", ["channel_first", "kill_supervisor", "garbage_requests"])
def test_test_sh_running_agent_code_first_cannot_forge_the_grade(tb_tasks, tmp_path, attack):
    """Before #28 `channel_first` scored 1.0 with no finding: the agent's code said hello first on
    the boot socket test.sh's bash held, and sent an all-passed verdict."""
    script = {"channel_first": CHANNEL_FIRST, "kill_supervisor": KILL_SUPERVISOR,
              "garbage_requests": GARBAGE_REQUESTS}[attack]
    record, trial = _tb_run(tb_tasks, tb_tasks["fix-median-venv"], _agent(attack, script), tmp_path, attack)
    verdict = trial["termforge"]["verdict"]
    assert record.reward == 0.0 and record.error_kind is None, (trial["exception_info"], verdict)
    assert verdict["findings"], verdict
    if attack == "channel_first":
        assert any("the grader was asked for" in f for f in verdict["findings"]), verdict


# -- no host environment in sandboxes ------------------------------------------------------------

CANARY = "TERMFORGE_TEST_CANARY"
# Every place a sandboxed process can read an environment or a command line: each process's
# environ and cmdline (pid 1 included), and its own environment.
# (The pattern is written so that no command line holding it matches it.)
SCAN = r"""( n=$( { for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < "$f"; echo; done; env; } 2>/dev/null | grep -c 'TERMFORGE_TEST_CANAR[Y]')
r=unreadable; cat /proc/1/environ >/dev/null 2>&1 && r=readable
echo "canary-scan leaks=$n pid1-environ=$r pid1=[$(tr '\0' ' ' < /proc/1/cmdline | cut -c1-30)]" )"""


def _clean_scan(text: str) -> bool:
    # The scan ran (pid 1 is bwrap, its environ readable: the place the host's variables showed
    # before #28) and found nothing.
    return "canary-scan leaks=0 pid1-environ=readable pid1=[" in text and "bwrap" in text


def _canary_task(root: Path) -> Path:
    """A task that scans at build time (setup.sh), and whose final test scans from a program the
    grader runs and checks the build's and the agent's scans: 1 iff every scan is clean."""
    import json

    d = root / "tf-canary"
    for sub in ("environment", "tests", "solution", "private"):
        (d / sub).mkdir(parents=True)
    (d / "environment" / "setup.sh").write_text(f"{SCAN} > /app/build-scan.txt\n")  # noqa: E501
    (d / "task.json").write_text(json.dumps({"id": "tf-canary"}))
    (d / "instruction.md").write_text("Scan.\n")
    (d / "solution" / "solve.sh").write_text("true\n")
    (d / "tests" / "test_final_state.py").write_text(
        "import subprocess\n\n"
        f"SCAN = {SCAN!r}\n\n"
        "def clean(text):\n"
        "    return 'canary-scan leaks=0 pid1-environ=readable pid1=[' in text and 'bwrap' in text\n\n"
        "def test_build_agent_and_grader_see_no_host_environment():\n"
        "    grader = subprocess.run(['bash', '-c', SCAN], capture_output=True, text=True).stdout\n"
        "    build = open('/app/build-scan.txt').read()\n"
        "    agent = open('/app/agent-scan.txt').read()\n"
        "    assert clean(grader) and clean(build) and clean(agent), (grader, build, agent)\n")
    (d / "tests" / "test.sh").write_text("true\n")
    return d


def test_no_host_environment_is_visible_on_any_path(monkeypatch, tmp_path, tb_tasks):

    monkeypatch.setenv(CANARY, "sk-canary-7f3a9c1e")
    task = _canary_task(tmp_path)
    rt, work = _runtime(tmp_path)
    built = rt.build(task, tmp_path / "images")
    assert built.ok and _clean_scan((built.image.path / "layer" / "build-scan.txt").read_text()), built.reason
    # Validation: the agent's sandbox, then the grader's (the final test fails on any leak).
    verdict, _ = _run_agent(rt, built.image, LIMITS, f"{SCAN} > /app/agent-scan.txt", task)
    assert verdict.reward == 1.0, verdict.output
    # Solve: the agent's persistent shell.
    row = rollout_once(ScriptedAgent(f"{SCAN} | tee /app/agent-scan.txt"), rt, tmp_path / "images", task, 0,
                       _settings(), None)
    assert row["reward"] == 1.0 and _clean_scan(str(row["episode"])), row["verifier"]
    # Terminal training episodes.
    (tmp_path / "ep").mkdir()
    ep = _episode(tmp_path, tmp_path / "images", "tf-canary", f"{SCAN} | tee /app/agent-scan.txt", tmp_path / "ep")
    assert ep.reward == 1.0, ep.verifier
    # Terminal-Bench native: the agent, test.sh before the grader, and a program the grader runs.
    tb = _tb_copy(tb_tasks["_root"], "fix-median", "fix-median-canary", SCAN + "\n",
                  "\n\ndef test_no_host_environment():\n    import subprocess\n"
                  f"    out = subprocess.run(['bash', '-c', {SCAN!r}], capture_output=True, text=True).stdout\n"
                  "    assert 'leaks=0 pid1-environ=readable' in out and 'bwrap' in out, out\n")
    from termforge.evals.harbor_tasks import load_harbor_task

    tb_task = load_harbor_task(tb)
    record, trial = _tb_run(tb_tasks, tb_task, _agent("scanner", SCAN, solve=True), tmp_path, "tb")
    assert record.reward == 1.0, trial["termforge"]["verdict"]
    assert _clean_scan(trial["agent_result"]["metadata"]["output_tail"])
    assert _clean_scan((tmp_path / "tb" / record.trial_name / "verifier" / "test-stdout.txt").read_text())
    assert _no_leftovers(work) == []


# -- killing the grader, and processes that keep changing their pid ----------------------------------

PROCESS_ROUTES = {
    # Forks and exits over and over (a new pid every hop), detached from the test's session.
    "fork_hopper": ("mkdir /tmp/tf-hopper 2>/dev/null && /usr/bin/python3 -c 'import os, time\n"
                    "if os.fork(): os._exit(0)\nos.setsid()\n"
                    "while True:\n    if os.fork(): os._exit(0)\n    time.sleep(0.001)' >/dev/null 2>&1 &"),
    # Kills the process grading it.
    "kill_grader": ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'verifier/grade[.]py' "
                    "&& kill -9 ${p#/proc/}; done"),
}
PROCESS_EVIDENCE = {"fork_hopper": "processes left behind", "kill_grader": "killed"}


def _process_attack(name: str, paths: list[str]) -> str:
    return plant_script(paths, False, {name: PROCESS_ROUTES[name]})


@pytest.mark.parametrize("repeat", range(5))
@pytest.mark.parametrize("name", sorted(PROCESS_ROUTES))
def test_process_attacks_score_zero_with_a_finding_on_the_validation_path(corpus, name, repeat, tmp_path):
    """Before #28 a killed grader scored 0 with no finding, and a fork-hopping daemon escaped the
    leftover check in 1 of 14 runs (hence the repeats)."""
    _, _, tasks = corpus
    rt, work = _runtime(tmp_path)
    task, image, paths = tasks["csv_groupby_tool"]
    verdict, _ = _run_agent(rt, image, LIMITS, _process_attack(name, paths), task)
    assert verdict.reward == 0.0 and any(PROCESS_EVIDENCE[name] in f for f in verdict.findings), verdict.to_dict()
    assert _no_leftovers(work) == []


@pytest.mark.parametrize("name", sorted(PROCESS_ROUTES))
def test_process_attacks_score_zero_with_a_finding_on_solve_and_training_paths(corpus, name, tmp_path):
    root, _, tasks = corpus
    rt, work = _runtime(tmp_path)
    task, _, paths = tasks["csv_groupby_tool"]
    row = rollout_once(ScriptedAgent(_process_attack(name, paths)), rt, root / "images", task, 0, _settings(), None)
    assert row["status"] == "graded" and row["reward"] == 0.0, row["verifier"]
    assert any(PROCESS_EVIDENCE[name] in f for f in row["hacked"]), row["hacked"]
    assert _no_leftovers(work) == []
    ep = _episode(root / "tasks", root / "images", task.name, _process_attack(name, paths), tmp_path)
    assert ep.reward == 0.0 and any(PROCESS_EVIDENCE[name] in f for f in ep.verifier["hacked"]), ep.verifier


@pytest.mark.parametrize("name", sorted(PROCESS_ROUTES))
def test_process_attacks_score_zero_with_a_finding_on_the_tb_native_path(tb_tasks, tmp_path, name):
    record, trial = _tb_run(tb_tasks, tb_tasks["fix-median"], _agent(name, _process_attack(name, ["/app/stats.py"])),
                            tmp_path, name)
    verdict = trial["termforge"]["verdict"]
    assert record.reward == 0.0 and record.error_kind is None, (trial["exception_info"], verdict)
    assert any(PROCESS_EVIDENCE[name] in f for f in verdict["findings"]), verdict


# -- reward files on the Terminal-Bench fallback -----------------------------------------------------

@pytest.mark.parametrize("content, expected", [
    # Finite but outside [0, 1]: Harbor would record them (harbor/verifier/verifier.py rejects only
    # non-finite and non-numeric values); termforge scores them 0 with a finding, so one trial cannot
    # make a run's mean reward +-inf or above 1.
    ('{"reward": 1e308}', (0.0, None, "outside [0, 1]")),
    ('{"reward": -1e308}', (0.0, None, "outside [0, 1]")),
    ("2", (0.0, None, "outside [0, 1]")),
    # Non-finite: harbor/verifier/verifier.py raises VerifierOutputParseError, which
    # harbor/models/trial/error_policy.py grades with has_valid_reward=False: an error, no score.
    ('{"reward": NaN}', (None, "VerifierOutputParseError", None)),
    ('{"reward": 1e400}', (None, "VerifierOutputParseError", None)),
    # A JSON boolean passes Harbor's isinstance(value, (int, float)) check and its VerifierResult
    # (`float | int`) makes it 1.0: Harbor is explicit by construction, followed here.
    ('{"reward": true}', (1.0, None, None)),
    ('{"reward": false}', (0.0, None, None)),
])
def test_reward_file_values_on_the_tb_fallback(tb_tasks, tmp_path, content, expected):
    import json

    from termforge.evals.harbor_tasks import load_harbor_task
    from termforge.evals.tbench import noop_agent

    d = tb_tasks["_root"] / f"writes-{abs(hash(content))}"
    if not d.exists():
        _tb_copy(tb_tasks["_root"], "fix-median", d.name)
        target = "reward.json" if content.startswith("{") else "reward.txt"
        (d / "tests" / "test.sh").write_text(f"#!/bin/bash\nmkdir -p /logs/verifier\n"
                                             f"printf '%s' {shlex.quote(content)} > /logs/verifier/{target}\n")
    record, trial = _tb_run(tb_tasks, load_harbor_task(d), noop_agent, tmp_path, "job")
    reward, error, finding = expected
    assert (record.reward, record.exception_type) == (reward, error), json.dumps(trial)[:2000]
    findings = trial["termforge"].get("verdict", {}).get("findings", [])
    if finding:
        assert any(finding in f for f in findings), findings


def test_a_verifier_timeout_follows_harbor(tb_tasks, tmp_path):
    """harbor/trial/trial.py raises VerifierTimeoutError, graded by harbor/models/trial/
    error_policy.py with has_valid_reward=False: the trial is an error (no score), as in Harbor."""
    from termforge.evals.harbor_tasks import load_harbor_task
    from termforge.evals.tbench import noop_agent

    d = _tb_copy(tb_tasks["_root"], "fix-median", "sleeps-past-timeout")
    (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\nsleep 30\n")
    (d / "task.toml").write_text((d / "task.toml").read_text().replace("timeout_sec = 120.0", "timeout_sec = 2.0", 1))
    task = load_harbor_task(d)
    assert task.verifier_timeout_sec == 2.0
    record, trial = _tb_run(tb_tasks, task, noop_agent, tmp_path, "job")
    assert record.reward is None and record.exception_type == "VerifierTimeoutError", trial["exception_info"]


# -- exports run the way Harbor runs them ----------------------------------------------------------------

HARBOR_PYTHON = Path(os.environ.get("TERMFORGE_HARBOR_PYTHON", "/work/harbor-venv/bin/python"))
# The exported test.sh before #28: pytest under -I, but reward.txt only, reward.json never removed,
# the test file left in /tests.
OLD_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
cd /tests || exit 1
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if env -u PYTHONPATH -u PYTHONHOME PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$py" -I -m pytest -q -p no:cacheprovider \\
    --import-mode=importlib --rootdir=/tests /tests/test_final_state.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
EXPORT_ROUTES = {
    "reward_write": ROUTES["reward_write"],
    # Read the expected values: the test file where Harbor put it, or any private copy.
    "steal_tests": "cat /tests/test_final_state.py /tmp/tf-tests.*/test_final_state.py > /app/stolen.txt 2>/dev/null",
    # Write reward.json again once test.sh would have written its own reward.
    "late_writer": ("(nohup bash -c 'for i in $(seq 200); do echo \"{\\\"reward\\\": 1}\" > /logs/verifier/reward.json; "
                    "sleep 0.01; done' >/dev/null 2>&1 &) 2>/dev/null"),
}


def _harbor_available() -> str | None:
    import subprocess

    if not HARBOR_PYTHON.exists():
        return f"no Harbor venv at {HARBOR_PYTHON} (python3.12 -m venv; pip install harbor==0.26.*)"
    res = subprocess.run([str(HARBOR_PYTHON), "-c", "import harbor.verifier.verifier"], capture_output=True, text=True)
    return None if res.returncode == 0 else f"harbor does not import: {res.stderr[-300:]}"


@pytest.mark.skipif(_harbor_available() is not None, reason=str(_harbor_available()))
def test_exported_task_cannot_be_forged_under_harbors_own_verifier(corpus, tmp_path):
    """Harbor 0.26's Verifier.verify (harbor/verifier/verifier.py: it removes stale rewards, uploads
    tests/, runs tests/test.sh, then reads reward.json before reward.txt) over a bwrap sandbox,
    on an export whose programs the final tests run were replaced by a forger. With the pre-#28
    test.sh Harbor records the forged 1 and the program reads the test file; with the current one,
    0 and nothing read."""
    import json
    import shutil
    import subprocess

    from termforge.export import write_harbor_task
    from termforge.runtime.base import Bind
    from termforge.runtime.bwrap import sandbox_argv

    _, rt, tasks = corpus
    task, image, paths = tasks["csv_groupby_tool"]
    out = {}
    for name, test_sh in (("old", OLD_TEST_SH), ("current", None)):
        export = tmp_path / name
        write_harbor_task(read_json(task / "task.json"), task, export)
        task_dir = export / task.name
        if test_sh:
            (task_dir / "tests" / "test.sh").write_text(test_sh)
        with rt.start(image, LIMITS) as session:
            session.exec(plant_script(paths, False, EXPORT_ROUTES), timeout=60)
            mounts = {"/tests": session.workdir / "harbor-tests", "/logs": session.workdir / "harbor-logs"}
            for d in (*mounts.values(), mounts["/logs"] / "verifier"):
                d.mkdir()
                if session.uid is not None:
                    os.chown(d, session.uid, session.uid)
            argv = sandbox_argv(session.layer, [], rootfs=session.rootfs,
                                binds=[Bind(h, s, writable=True) for s, h in mounts.items()],
                                home_dir=session.home, cwd="/app", tmp_mb=LIMITS.tmp_mb)
            if session.uid is not None:
                argv = ["setpriv", f"--reuid={session.uid}", f"--regid={session.uid}", "--clear-groups", *argv]
            spec = {"task_dir": str(task_dir), "trial_dir": str(tmp_path / f"trial-{name}"), "argv": argv,
                    "mounts": {k: str(v) for k, v in mounts.items()}}
            (tmp_path / f"spec-{name}.json").write_text(json.dumps(spec))
            res = subprocess.run([str(HARBOR_PYTHON), str(Path(__file__).with_name("harbor_driver.py")),
                                  str(tmp_path / f"spec-{name}.json")], capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stderr[-2000:]
            stolen = (session.layer / "stolen.txt").read_text() if (session.layer / "stolen.txt").exists() else ""
            out[name] = (json.loads(res.stdout.strip().splitlines()[-1]), stolen)
        shutil.rmtree(export)
    (old, old_stolen), (current, current_stolen) = out["old"], out["current"]
    assert old == {"rewards": {"reward": 1}} and "def test_" in old_stolen, out  # the attack is real
    assert current == {"rewards": {"reward": 0.0}}, out
    assert "def test_" not in current_stolen, current_stolen


# -- the shared work root (issue 39) ---------------------------------------------------------------

def test_an_agent_filling_its_own_cap_never_takes_another_sessions_space(corpus, monkeypatch):
    """On a work root that holds two sessions' allowances: two agents each write just under their
    cap, and a third session is refused at its start with one line naming the root and the space
    (never an ENOSPC in the middle of its run); queued instead, it starts once the others end and
    gets its whole allowance."""
    import subprocess
    import threading

    from termforge.errors import TermforgeError
    from termforge.runtime import workspace

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as a work root needs root")
    _, rt, tasks = corpus
    image = tasks["log_level_filter"][1]
    limits = Limits(wall_sec=30, cpu_sec=30, disk_mb=32)
    # Two allowances (2 x 36 MiB reserved) fit and a third does not; three agents' 30 MiB do not.
    root = _work_dir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=80m,mode=0711", "tmpfs", str(root)], check=True)
    fill = "head -c 20M /dev/zero > /app/fill && head -c 10M /dev/zero > /home/user/fill && echo filled"
    try:
        a = rt.start(image, limits, work_root=root)
        b = rt.start(image, limits, work_root=root)
        for s in (a, b):
            res = s.exec(fill, timeout=30)
            assert res.stdout.split() == ["filled"] and not res.limit_hit, (res.stdout, res.stderr, res.limit_hit)
        monkeypatch.setattr(workspace, "WAIT_SEC", 0.5)
        with pytest.raises(TermforgeError) as refused:
            rt.start(image, limits, work_root=root)
        message = str(refused.value)
        assert str(root) in message and "36 MiB" in message and "\n" not in message, message
        monkeypatch.setattr(workspace, "WAIT_SEC", 60)
        third = []
        waiter = threading.Thread(target=lambda: third.append(rt.start(image, limits, work_root=root)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not third  # queued while the root holds no room for it
        # What a running session wrote counts as taken and its allowance as still to come (never
        # over-committed): the third starts once the root is back to two allowances' room.
        a.stop()
        b.stop()
        waiter.join(60)
        res = third[0].exec(fill, timeout=30)
        assert res.stdout.split() == ["filled"] and "No space" not in res.stderr, res.stderr
        third[0].stop()
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


# -- names that are not UTF-8 (issue 39; the attack is quality.hijack.odd_names_attack) -------------
# Each is recorded as text, never a crash of the path that grades it.
ODD_SHOWN = "\\xff\\xfe"  # how a recorded finding shows the name


def _odd_findings(findings: list[str]) -> None:
    assert any("processes left behind" in f and ODD_SHOWN in f for f in findings), findings
    assert any("under /logs" in f and ODD_SHOWN in f for f in findings), findings
    assert all(f.isprintable() and f.encode() for f in findings), findings


def test_odd_names_are_data_on_the_solve_path(corpus, tmp_path):
    from termforge.io import append_jsonl, atomic_write_json, read_jsonl_tolerant

    root, rt, tasks = corpus
    task, _, paths = tasks["csv_groupby_tool"]
    row = rollout_once(ScriptedAgent(odd_names_attack(paths)), rt, root / "images", task, 0, _settings(), None)
    assert row["status"] == "graded" and row["reward"] == 0.0, row["verifier"]
    _odd_findings(row["hacked"])
    # What run_solve_shard does with a row: its checkpoint line and the shard's output.
    append_jsonl(tmp_path / "rows.partial.jsonl", row)
    atomic_write_json(tmp_path / "shard.json", {"rollouts": [row]})
    assert read_jsonl_tolerant(tmp_path / "rows.partial.jsonl")[0]["hacked"] == row["hacked"]
    assert read_json(tmp_path / "shard.json")["rollouts"][0]["hacked"] == row["hacked"]


def test_odd_names_are_data_on_the_validation_path(corpus):
    _, rt, tasks = corpus
    task, image, paths = tasks["csv_groupby_tool"]
    verdict, _ = _run_agent(rt, image, LIMITS, odd_names_attack(paths), task)
    assert verdict.reward == 0.0, verdict.reason
    _odd_findings(verdict.findings)


def test_odd_names_are_data_on_the_tb_native_path(tb_tasks, tmp_path):
    trial, result = _tb_run(tb_tasks, tb_tasks["fix-median"], _agent("odd-names", odd_names_attack(["/app/stats.py"])),
                            tmp_path, "odd")
    assert trial.reward == 0.0 and trial.error_kind is None, result["exception_info"]
    _odd_findings(result["termforge"]["verdict"]["findings"])


def test_a_grader_that_fails_is_itself_a_finding(corpus, monkeypatch):
    """Whatever stops the grader before its verdict (here: a grader that cannot read the process
    table) leaves a 0 with a reason and a finding, never a clean 0."""
    import termforge.grading.verifier as verifier

    failing = verifier.GRADE_PY.replace(
        "def leftovers():", "def leftovers():\n    raise UnicodeDecodeError('utf-8', b'\\xff', 0, 1, 'odd comm')", 1)
    assert failing != verifier.GRADE_PY
    monkeypatch.setattr(verifier, "GRADE_PY", failing)
    _, rt, tasks = corpus
    task, image, _ = tasks["log_level_filter"]
    verdict, _ = _run_agent(rt, image, LIMITS, None, task, oracle=True)
    assert verdict.reward == 0.0 and any("grader failed" in f and "UnicodeDecodeError" in f
                                         for f in verdict.findings), verdict.to_dict()
