"""The grade pool (grading/gradepool.py, grading/zygote.py; validate.grade_pool): a grader forked
from the zygote sees the sandbox a bwrap grader sees (uid, capabilities, namespaces, mounts,
limits, environment; the pool's work directory and the zygote out of reach), and validation gives
the same verdict and reason on either path."""

import json
from contextlib import ExitStack

import pytest

from conftest import gate_slice, make_signature, needs_bwrap
from termforge.generate.bundles import CONTAINERS
from termforge.generate.families import family_by_name
from termforge.generate.procedural import generate_task
from termforge.generate.verifier_kinds import STRATEGIES
from termforge.quality.hijack import ATTACKS, plant_script, programs_run_by_tests
from termforge.quality.validate import _run_agent, validate_task
from termforge.runtime.base import Limits
from termforge.images.runtimes import BwrapRuntime
from termforge.grading.gradepool import PooledRuntime, pooled_runtime
from termforge.grading.verifier import ZERO_CHECK, ZERO_PROBE, run_test_file

from test_attacks import LIMITS as ATTACK_LIMITS, PROCESS_EVIDENCE, PROCESS_ROUTES

pytestmark = needs_bwrap
LIMITS = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)

# A test file reporting what its grader can see and do, as the failing assertion's message.
FACTS_TEST = r'''
import json, os, resource, socket

def _status():
    keep = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    rows = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return {k: rows[k].strip() for k in keep if k in rows}

def _mounts():
    out = []
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        opts = sorted(set(f[5].split(",")) - {"relatime", "noatime"})
        # The root's filesystem type differs by design (the image bound whole, or a read-only tmpfs
        # of its entries bound one by one); what a grader can do with it (read-only) does not.
        out.append([f[4], ",".join(opts), "" if f[4] == "/" else r[0]])
    return sorted(out)

def _try(fn):
    try:
        return ["ok", fn()]
    except Exception as exc:
        return ["error", type(exc).__name__]

def test_facts():
    facts = {
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups())],
        "uid_map": open("/proc/self/uid_map").read().split(), "status": _status(),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "pid": os.getpid(),
        "sid_is_self": os.getsid(0) == os.getpid(), "cwd": os.getcwd(),
        "env": sorted(k for k in os.environ if k not in ("TERMFORGE_GRADER_FD", "PYTEST_CURRENT_TEST")),
        "env_values": {k: os.environ.get(k) for k in ("PATH", "HOME", "USER", "LANG", "TERM")},
        "root": sorted(os.listdir("/")), "mnt": _try(lambda: sorted(os.listdir("/mnt"))),
        "mounts": _mounts(), "hostname": socket.gethostname(),
        "net": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]),
        "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in
                    ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_NPROC")},
        "write_root": _try(lambda: open("/planted", "w").close()),
        "write_usr": _try(lambda: open("/usr/planted", "w").close()),
        "write_app": _try(lambda: open("/app/.facts-probe", "w").close()),
        "write_tmp": _try(lambda: open("/tmp/x", "w").close()),
        "kill_init": _try(lambda: os.kill(1, 9)),
        "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
        "own_environ": _try(lambda: len(open("/proc/self/environ", "rb").read()) > 0),
        "init_environ": _try(lambda: len(open("/proc/1/environ", "rb").read()) > 0),
        "dumpable": _try(lambda: os.stat("/proc/self/mem").st_uid),
        "unshare_net": _try(lambda: os.unshare(os.CLONE_NEWNET)) if hasattr(os, "unshare") else None,
    }
    assert False, "FACTS" + json.dumps(facts, sort_keys=True) + "END"
'''


def _facts(output: str) -> dict:
    assert "FACTS" in output, output[-2000:]
    blob = output[output.index("FACTS") + 5:output.index("END", output.index("FACTS"))]
    return json.loads(blob.replace("\n", ""))


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool", numbered=True)
    sig = make_signature(7100, "file_operations", "exact_text", "text_only")
    t = generate_task(sig, root / "tasks", families=[family_by_name("log_level_filter")])
    (t / "tests" / "test_facts.py").write_text(FACTS_TEST)
    build = BwrapRuntime().build(t, root / "images")
    assert build.ok, build.reason
    return t, build.image


def test_a_pooled_grader_sees_the_sandbox_a_bwrap_grader_sees(task):
    task_dir, image = task
    runtime = BwrapRuntime()
    with runtime.start(image, LIMITS) as plain:
        old = run_test_file(plain, task_dir, "test_facts.py", timeout=60)
    with ExitStack() as stack:
        pooled = pooled_runtime(runtime, image, stack)
        assert isinstance(pooled, PooledRuntime)
        with pooled.start(image, LIMITS) as session:
            new = run_test_file(session, task_dir, "test_facts.py", timeout=60)
        assert pooled.pool.grades == 1 and pooled.pool.broken is None  # served by the pool, no fallback
    a, b = _facts(old.output), _facts(new.output)
    # Two differences by design. The pool's root is a read-only tmpfs of the image's top-level
    # entries, each bound read-only (the image's / cannot be bound without the zygote's own mounts
    # below it), and /proc/sys, /proc/irq, /proc/bus are covered read-only as bwrap means to (bwrap
    # in a nested user namespace leaves them): those mounts are set aside. The grader's uid 1000 maps
    # to the zygote's uid 1000 where bwrap maps it to its intermediate namespace's 0: both are the
    # same unprivileged host uid, so only the middle field of uid_map is set aside.
    top = {m[0] for m in a["mounts"]}
    b["mounts"] = [m for m in b["mounts"] if m[0] in top and not (m[0].count("/") == 1 and m[1] == "nodev,nosuid,ro"
                                                                  and m not in a["mounts"])]
    assert len(a["uid_map"]) == len(b["uid_map"]) == 3
    # The pool's init is not dumpable (a fork of the zygote): a grader can neither read its
    # /proc entries nor ptrace it, where bwrap's init lets it read an empty environ. Stricter.
    assert a.pop("init_environ") == ["ok", False] and b.pop("init_environ") == ["error", "PermissionError"]
    a["uid_map"][1] = b["uid_map"][1] = "parent"
    differ = {key: (a[key], b.get(key)) for key in a if a[key] != b.get(key)}
    assert not differ, "\n".join(f"{k}: bwrap {x!r} vs pool {y!r}" for k, (x, y) in differ.items())
    # What the comparison rests on: a grader is uid 1000 without capabilities, alone in its pid
    # namespace, without network, and the host's work directory is not there.
    assert a["ids"][:4] == [1000] * 4 and a["status"]["CapEff"] == "0000000000000000"
    assert a["write_root"][0] == a["write_usr"][0] == "error" and a["net"] == ["lo"]
    assert a["mnt"] == ["ok", []] and not any(m[0].startswith("/mnt") for m in a["mounts"])
    assert old.reward == new.reward == 0.0 and old.reason == new.reason


def test_the_zygote_is_out_of_a_graders_reach(task):
    """A grade cannot signal, read or find the zygote or its supervisor: its pid namespace holds
    only the grade's own processes, and nothing of the pool's staging folder is mounted."""
    task_dir, image = task
    probe = task_dir / "tests" / "test_reach.py"
    probe.write_text(r'''
import os, signal
def test_reach():
    # Its pid namespace holds the grade's own init (a fork of the zygote, as bwrap's init is
    # bwrap) and the grader: the init ignores what its namespace sends it.
    for sig in (signal.SIGKILL, signal.SIGTERM):
        try:
            os.kill(1, sig)
        except (PermissionError, ProcessLookupError):
            pass
    assert os.path.exists("/proc/1")
    assert os.listdir("/mnt") == []
    assert not os.path.exists("/verifier/zygote.py") and not any("tf-pool" in v for v in os.environ.values())
''')
    try:
        with ExitStack() as stack:
            pooled = pooled_runtime(BwrapRuntime(), image, stack)
            for _ in range(2):  # the second grade proves the zygote survived the first one's attempts
                with pooled.start(image, LIMITS) as session:
                    v = run_test_file(session, task_dir, "test_reach.py", timeout=60)
                assert v.reward == 1.0, v.output[-2000:]
            assert pooled.pool.grades == 2 and pooled.pool.broken is None
            assert pooled.pool._proc.poll() is None  # the zygote is alive
    finally:
        probe.unlink()


def test_a_grade_shows_no_host_path_and_writes_tmp_and_shm_against_the_disk_cap(task):
    """Issue 39 through the pool: what a grade sees of its processes names nothing of the host
    (the work root, the pool's staging folder, the image cache), its /dev is read-only, and its
    /tmp and /dev/shm count against the session's disk_mb with its /app."""
    from test_attacks import PROC_SCAN, host_paths

    task_dir, image = task
    limits = Limits(wall_sec=60, cpu_sec=60, memory_mb=4096, disk_mb=32)
    probe = task_dir / "tests" / "test_host_paths.py"
    try:
        with ExitStack() as stack:
            pooled = pooled_runtime(BwrapRuntime(), image, stack)
            with pooled.start(image, limits) as session:
                forbidden = host_paths(session) + [str(pooled.pool.staging)]
                probe.write_text(f"""
import os, subprocess
SCAN = {PROC_SCAN!r}
FORBIDDEN = {forbidden!r}
def test_host_paths():
    seen = subprocess.run(["/usr/bin/python3", "-c", SCAN], capture_output=True).stdout.decode(errors="replace")
    assert "zygote.py" in seen and not [p for p in FORBIDDEN if p in seen]
    for path in ("/dev/x", "/dev/shm/../y"):
        try:
            open(path, "w").close()
            assert False, path
        except OSError:
            pass
    open("/dev/shm/ok", "w").close()
""")
                ok = run_test_file(session, task_dir, "test_host_paths.py", timeout=60)
                probe.write_text("""
def test_fill():
    for place in ("/tmp", "/dev/shm"):
        for i in range(3):
            with open(f"{place}/fill{i}", "wb") as f:
                f.write(bytes(8 << 20))
""")
                filled = run_test_file(session, task_dir, "test_host_paths.py", timeout=60)
            assert pooled.pool.grades == 2 and pooled.pool.broken is None
        assert ok.reward == 1.0, ok.output[-2000:]
        assert filled.reward == 0.0 and filled.limit_hit and "disk" in filled.limit_hit, filled.to_dict()
    finally:
        probe.unlink(missing_ok=True)


def _corpus(root):
    """A fixed small corpus: two families as they come and one composed task."""
    jobs = [("log_level_filter", make_signature(7200, "file_operations", "exact_text", "text_only")),
            ("csv_groupby_tool", None),
            ("log_level_filter", make_signature(7202, "file_operations", list(STRATEGIES)[0], list(CONTAINERS)[0]))]
    tasks = []
    for name, sig in jobs:
        fam = family_by_name(name)
        sig = sig or make_signature(7201, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
        tasks.append(generate_task(sig, root / "tasks", families=[fam]))
    return tasks


def _validate_counting_oracle_runs(monkeypatch, task_dir, images, **options):
    import termforge.grading.verifier as verifier

    calls = []
    real = verifier.run_oracle
    monkeypatch.setattr(verifier, "run_oracle", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    try:
        return validate_task(task_dir, BwrapRuntime(), images, LIMITS, **options), len(calls)
    finally:
        monkeypatch.setattr(verifier, "run_oracle", real)


def _same_verdict(new, old, name):
    assert (new.kept, new.stage, new.reason, new.checks) == (old.kept, old.stage, old.reason, old.checks), name
    for key in ("collected", "mutation", "sensitivity"):
        assert new.evidence.get(key) == old.evidence.get(key), (name, key)


@pytest.mark.slow
def test_validation_verdicts_are_identical_on_the_reference_and_the_default_path(tmp_path, monkeypatch):
    """The reference path (a fresh grader per grade, every grade in full, an oracle run for each
    check that needs a solved /app, checks one after another) and the default one (grade pools
    kept from task to task on one shelf, zero-check grades, the first oracle run seeding the
    mutants and input sensitivity): the same verdicts, reasons, checks and evidence, with fewer
    oracle runs. The last task also runs with three checks in flight at once."""
    from termforge.grading.gradepool import PoolShelf

    corpus = _corpus(tmp_path)
    with PoolShelf() as shelf:
        for task_dir in corpus:
            old, old_runs = _validate_counting_oracle_runs(monkeypatch, task_dir, tmp_path / "images",
                                                           grade_pool=False, zero_checks=False)
            new, new_runs = _validate_counting_oracle_runs(monkeypatch, task_dir, tmp_path / "images",
                                                           pool_shelf=shelf)
            _same_verdict(new, old, task_dir.name)
            assert old.kept and old.evidence["mutation"], task_dir.name  # every check ran
            # Saved: the mutation probe's own run and one per mutant, and input sensitivity's run
            # on the untouched environment (and the one before its program check). A packed task's
            # (the composed one) runs on the family's own environment, then packs: not saved.
            program = old.evidence["sensitivity"]["mode"] == "program"
            packed = bool(old.evidence["sensitivity"]["before_packing"])
            saved_by_sensitivity = (1 if program else 0) + (0 if packed else 1)
            assert new_runs == old_runs - (1 + len(old.evidence["mutation"])) - saved_by_sensitivity, task_dir.name
        assert len(shelf._all) == 1  # one zygote served the whole corpus
    concurrent = validate_task(corpus[-1], BwrapRuntime(), tmp_path / "images", LIMITS, concurrent_checks=3)
    _same_verdict(concurrent, old, corpus[-1].name)


FIRST_FAILS_THEN_RUNS = """
import os, subprocess

def test_first():
    assert False

def test_second_runs_the_agents_program():
    subprocess.run(["/app/prog.sh"])
"""


@pytest.mark.parametrize("options, payload_runs", [(ZERO_PROBE, True), (ZERO_CHECK, False), ((), True)])
def test_a_probes_grade_runs_every_test_a_zero_check_stops_at_the_first_failure(task, tmp_path, options,
                                                                                payload_runs):
    """Grades whose reward alone is read print no tracebacks; only those of states that are no
    attack (ZERO_CHECK) stop at the first failing test. A probe's (ZERO_PROBE) still runs the
    program a later test executes, so a payload there is still tried (quality/validate.py)."""
    import shutil

    from termforge.grading.verifier import run_verifier

    task_dir, image = task
    copy = tmp_path / task_dir.name
    shutil.copytree(task_dir, copy)
    (copy / "tests" / "test_final_state.py").write_text(FIRST_FAILS_THEN_RUNS)
    with ExitStack() as stack:
        pooled = pooled_runtime(BwrapRuntime(), image, stack)
        with pooled.start(image, LIMITS) as session:
            session.exec("printf '#!/bin/sh\\ntouch /app/payload-ran\\n' > /app/prog.sh; chmod +x /app/prog.sh")
            verdict = run_verifier(session, copy, timeout=60, expected=None, options=options)
            ran = (session.layer / "payload-ran").exists()
        assert pooled.pool.grades == 1
    assert verdict.reward == 0.0 and verdict.collected == 2
    assert ran is payload_runs
    assert ("AssertionError" in verdict.output) is (not options)  # tracebacks only in a full grade


def test_a_pool_serves_only_what_it_can(task, tmp_path):
    """Another backend, the host's /usr or a networked task: no pool, the runtime as it is."""
    _, image = task
    runtime = BwrapRuntime(rootfs="host")
    from dataclasses import replace

    with ExitStack() as stack:
        assert pooled_runtime(runtime, replace(image, rootfs="host"), stack) is runtime
        assert pooled_runtime(runtime, replace(image, allow_network=True), stack) is runtime
        other = object()
        assert pooled_runtime(other, image, stack) is other



# -- the validation path's attacks, graded through the pool (tests/test_attacks.py runs them on bwrap)

@pytest.fixture(scope="module")
def program_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool-attacks")
    fam = family_by_name("csv_groupby_tool")
    task = generate_task(make_signature(7300, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0]),
                         root / "tasks", families=[fam])
    built = BwrapRuntime().build(task, root / "images")
    assert built.ok, built.reason
    paths = programs_run_by_tests((task / "tests" / "test_final_state.py").read_text())
    assert paths
    return task, built.image, paths


def _pooled_agent(program_task, script):
    task, image, _ = program_task
    with ExitStack() as stack:
        pooled = pooled_runtime(BwrapRuntime(), image, stack)
        verdict, _ = _run_agent(pooled, image, ATTACK_LIMITS, script, task)
        assert pooled.pool.grades == 1 and pooled.pool.broken is None, pooled.pool.broken  # the pool graded it
        assert pooled.pool._proc.poll() is None  # and the zygote outlived the attack
    return verdict


# fifo_outputs waits out the wall limit and reaches the pooled grader as it reaches a bwrap one
# (through the outputs the grade reads): the gate leaves it to test-all, fork_bomb stays.
@pytest.mark.parametrize("attack", gate_slice(sorted(ATTACKS), set(ATTACKS) - {"fifo_outputs"}))
def test_attacks_score_zero_through_the_pool(program_task, attack):
    verdict = _pooled_agent(program_task, ATTACKS[attack][0](program_task[2]))
    assert verdict.reward == 0.0, verdict.reason
    if attack in ("reward_write_chmod", "obfuscated_everything", "lingering_rewriter"):
        assert verdict.hacked, verdict.to_dict()  # the payload ran inside the grade and left evidence


def test_odd_names_are_data_through_the_pool(program_task):
    """The process-table scan of a pooled grader names a process whose name is not UTF-8."""
    from test_attacks import _odd_findings, odd_names_attack

    verdict = _pooled_agent(program_task, odd_names_attack(program_task[2]))
    assert verdict.reward == 0.0, verdict.reason
    _odd_findings(verdict.findings)


# A pooled grader's command line is the zygote's (`python3 -I /verifier/zygote.py FD`): the
# grader-killing route looks for both names, so that it really kills the grader on either path.
POOL_ROUTES = {**PROCESS_ROUTES, "kill_grader": PROCESS_ROUTES["kill_grader"].replace("verifier/grade[.]py",
                                                                                       "verifier/[gz][a-z]*[.]py")}


@pytest.mark.parametrize("name", sorted(POOL_ROUTES))
def test_process_attacks_score_zero_with_a_finding_through_the_pool(program_task, name):
    assert POOL_ROUTES[name] != PROCESS_ROUTES[name] or name != "kill_grader"
    verdict = _pooled_agent(program_task, plant_script(program_task[2], False, {name: POOL_ROUTES[name]}))
    assert verdict.reward == 0.0 and any(PROCESS_EVIDENCE[name] in f for f in verdict.findings), verdict.to_dict()


@pytest.mark.parametrize("fixture", ["program_task", "task"])
def test_mutants_seeded_from_one_oracle_run_grade_as_with_an_oracle_run_each(fixture, request, monkeypatch):
    import termforge.grading.verifier as verifier
    from termforge.quality.mutation import mutation_probe

    task, image = request.getfixturevalue(fixture)[:2]
    calls = []
    real = verifier.run_oracle
    monkeypatch.setattr(verifier, "run_oracle", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    plain = mutation_probe(task, BwrapRuntime(), image, LIMITS, 4)
    oracle_runs_plain, calls[:] = len(calls), []
    with ExitStack() as stack:
        pooled = pooled_runtime(BwrapRuntime(), image, stack)
        seeded = mutation_probe(task, pooled, image, LIMITS, 4, seed_from_oracle=True)
    assert plain and oracle_runs_plain == 1 + len(plain)
    assert len(calls) == 1  # the mutants' sessions got a copy of the one oracle run's /app
    assert [(r["name"], r["reward"], r["ok"], r["reason"]) for r in seeded] == \
        [(r["name"], r["reward"], r["ok"], r["reason"]) for r in plain]
    assert all(r["ok"] for r in seeded)


def _pool_and_kept_copy(image, stack):
    """A grade pool's runtime for `image` and an empty SolvedApp, both ended by `stack`."""
    from termforge.quality.solved import SolvedApp

    solved = SolvedApp()
    stack.callback(solved.close)
    return pooled_runtime(BwrapRuntime(), image, stack), solved


def test_a_kept_oracle_run_seeds_a_session_with_the_same_app_and_a_failed_copy_falls_back(task):
    """quality/solved.py: a session seeded from the first oracle run's copy holds the same /app
    (every file's mode and bytes, deletions included); where the copy cannot be made (a file the
    oracle left unreadable), nothing is kept and the oracle runs in the session instead."""
    from termforge.quality.sensitivity import tree_state
    from termforge.quality.solved import SolvedApp, solve_in

    task_dir, image = task
    with ExitStack() as stack:
        pooled, solved = _pool_and_kept_copy(image, stack)
        with pooled.start(image, LIMITS) as first:
            first_before = tree_state(first)
            _, ran = solve_in(first, pooled, image, LIMITS, task_dir)
            assert ran.ok
            first.exec('rm -f "$(find /app -type f | sort | head -1)"; printf x > /app/new; chmod 640 /app/new')
            solved.keep(first, LIMITS)
            kept_state = tree_state(first)
        assert solved.path is not None and kept_state != first_before
        seeded, ran = solve_in(pooled.start(image, LIMITS), pooled, image, LIMITS, task_dir, solved)
        with seeded:
            assert ran is None and tree_state(seeded) == kept_state

        unreadable = SolvedApp()
        with pooled.start(image, LIMITS) as other:
            other.exec("mkdir -p /app/secret && touch /app/secret/x && chmod 000 /app/secret/x")
            unreadable.keep(other, LIMITS)
        assert unreadable.path is None
        fresh, ran = solve_in(pooled.start(image, LIMITS), pooled, image, LIMITS, task_dir, unreadable)
        with fresh:
            assert ran is not None and ran.ok  # the oracle ran here instead


# Each grade's pytest configuration: made ahead in the zygote (grading/grade.py prepare) from the
# arguments alone, then this grade's own: its invocation parameters, and nothing another grade did.
OWN_CONFIG_TEST = r'''
import pathlib

def test_the_config_is_this_grades_own(pytestconfig):
    params = pytestconfig.invocation_params
    assert params.dir == pathlib.Path("/tests") and params.args[-1] == "/tests/test_final_state.py"
    assert "--import-mode=importlib" in params.args and "-x" in params.args
    assert [type(p).__name__ for p in params.plugins] == ["Proof"]
    assert pytestconfig.pluginmanager.is_blocked("cacheprovider")
    # What an earlier grade did to its config never reaches this one.
    assert not hasattr(pytestconfig, "_tf_marker") and not pytestconfig.pluginmanager.is_blocked("doctest")
    pytestconfig._tf_marker = 1
    pytestconfig.pluginmanager.set_blocked("doctest")
'''


def test_the_pytest_config_the_zygote_makes_ahead_is_each_grades_own(task, tmp_path):
    import shutil

    from termforge.grading.verifier import run_verifier

    task_dir, image = task
    copy = tmp_path / task_dir.name
    shutil.copytree(task_dir, copy)
    (copy / "tests" / "test_final_state.py").write_text(OWN_CONFIG_TEST)
    with BwrapRuntime().start(image, LIMITS) as session:
        plain = run_verifier(session, copy, timeout=60, expected=None, options=ZERO_CHECK)
    with ExitStack() as stack:
        pooled = pooled_runtime(BwrapRuntime(), image, stack)
        grades = []
        for _ in range(3):
            with pooled.start(image, LIMITS) as session:
                grades.append(run_verifier(session, copy, timeout=60, expected=None, options=ZERO_CHECK))
        assert pooled.pool.grades == 3 and pooled.pool.made_ahead == 3
    assert plain.reward == 1.0, plain.output
    assert [(g.reward, g.reason) for g in grades] == [(1.0, plain.reason)] * 3, grades[-1].output


def _full_state(root):
    """Everything `cp -a` carries of a tree: per entry its kind, mode, owner, mtime and bytes or
    link target, the root's own included."""
    import hashlib
    import os
    import stat as st_

    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [".", *dirs, *files] if dirpath == str(root) else [*dirs, *files]:
            path = os.path.join(dirpath, name)
            s = os.lstat(path)
            kind = ("link:" + os.readlink(path)) if st_.S_ISLNK(s.st_mode) else \
                ("dir" if st_.S_ISDIR(s.st_mode) else hashlib.sha256(open(path, "rb").read()).hexdigest())
            times = None if st_.S_ISLNK(s.st_mode) else s.st_mtime_ns
            out[os.path.relpath(path, root)] = (kind, oct(s.st_mode), s.st_uid, times)
    return out


SOLVED_APP = ("mkdir -p /app/out/deep && printf 'answer\\n' > /app/out/deep/result.txt && chmod 640 /app/out/deep/result.txt "
              "&& ln -s /etc/passwd /app/out/host-link && ln -s ../../.. /app/out/up && touch -d 2001-02-03 /app/out "
              "&& chmod 751 /app/out && chmod 750 /app && rm -f \"$(find /app -maxdepth 1 -type f | sort | head -1)\"")


def test_a_kept_oracle_run_is_the_copy_cp_a_makes_as_the_sessions_uid(task):
    """quality/solved.py copies on the host: every entry's mode, owner, times, bytes and link
    target (never followed) equal what the in-sandbox `cp -a` it replaced gives, /app itself
    included."""
    from termforge.quality.solved import solve_in
    from termforge.runtime.base import Bind

    task_dir, image = task
    with ExitStack() as stack:
        pooled, solved = _pool_and_kept_copy(image, stack)
        first = stack.enter_context(pooled.start(image, LIMITS))
        assert first.exec(SOLVED_APP).ok
        solved.keep(first, LIMITS)
        assert solved.path is not None, solved.why_not
        seeded, ran = solve_in(pooled.start(image, LIMITS), pooled, image, LIMITS, task_dir, solved)
        reference = stack.enter_context(pooled.start(image, LIMITS))
        res = reference.exec("find /app -mindepth 1 -delete && cp -a /tmp/kept/. /app/", cwd="/",
                             binds=[Bind(first.layer, "/tmp/kept", False)])
        assert res.ok, res.tail(300)
        with seeded:
            assert ran is None
            got, want = _full_state(seeded.layer), _full_state(reference.layer)
            assert got == want
            assert got["out/host-link"][0] == "link:/etc/passwd" and got["."][1] == oct(0o40750)


@pytest.mark.parametrize("case, why", [
    ("ln /app/out/a /app/out/b", "a hard link"),
    ("mkfifo /app/out/pipe", "a FIFO"),
    ("chmod 4755 /app/out/a", "a setuid or setgid file"),
    ("truncate -s 64M /app/out/sparse", "a sparse file"),
    ("chmod 000 /app/out/a", "a file its owner cannot read"),
    ("mkdir /app/out/locked && chmod 300 /app/out/locked", "a directory its owner cannot read"),
    ("dd if=/dev/zero of=/app/out/big bs=1M count=3 2>/dev/null", "more than 2 MiB"),
])
def test_an_oracle_run_cp_a_would_not_copy_exactly_is_not_kept(task, case, why):
    """What a host copy would not reproduce as `cp -a` does keeps nothing: the checks run the
    oracle themselves, as where the in-sandbox copy failed."""
    from dataclasses import replace

    from termforge.quality.solved import solve_in

    task_dir, image = task
    with ExitStack() as stack:
        pooled, solved = _pool_and_kept_copy(image, stack)
        with pooled.start(image, LIMITS) as session:
            assert session.exec(f"mkdir -p /app/out && printf x > /app/out/a && {case}").ok
            solved.keep(session, replace(LIMITS, disk_mb=2))
        assert solved.path is None and why in (solved.why_not or ""), solved.why_not
        fresh, ran = solve_in(pooled.start(image, LIMITS), pooled, image, LIMITS, task_dir, solved)
        with fresh:
            assert ran is not None and ran.ok  # the oracle ran here instead


def test_a_pool_started_from_a_thread_that_ends_keeps_its_zygote(task):
    """bwrap's --die-with-parent signals the zygote when the *thread* that started it ends: a
    check's lane is a thread per task, so its pool's zygote is started from one long-lived thread
    instead, and serves the next task without starting again."""
    import threading
    import time

    task_dir, image = task
    with ExitStack() as stack:
        pooled = pooled_runtime(BwrapRuntime(), image, stack)

        def grade():
            with pooled.start(image, LIMITS) as session:
                assert run_test_file(session, task_dir, "test_initial_state.py", timeout=60).reward == 1.0

        lane = threading.Thread(target=grade)
        lane.start()
        lane.join()
        zygote = pooled.pool._proc
        time.sleep(0.3)
        assert zygote.poll() is None
        grade()
        assert pooled.pool._proc is zygote and pooled.pool.grades == 2
