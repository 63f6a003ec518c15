"""Validation: prove each task sound, cheapest checks first, stopping at the first failure.

static (including: no test imports the agent's code into the grader) -> build -> initial-state
test passes -> final test fails untouched (its collected test ids are recorded: the set every later
grade must collect) -> oracle scores exactly 1 (twice: flaky verifiers are rejected) -> a no-op
agent scores 0 -> every reward-hack probe scores 0, including the hijack class (a payload planted
in each program the final tests execute, trying every route to a forged grade) -> mutants of the
oracle's outputs that change the answer score 0 and allowed ones score 1 (quality/mutation.py,
`mutants` of them, and every exchange mutant: values moved between keys and rows with every aggregate
kept) -> the oracle computes from the inputs (quality/sensitivity.py: a task whose answer does not
move when one named input changes alone is dropped, naming it) -> the verifier's tests provably ran. Second
solutions (solution/alternatives/*.sh: a family's second reference implementation, or the
independent solution the llm generator had a model write) must score 1 like the oracle, and a model's
must not be the oracle's text or structure again (quality/independence.py: a copy confirms nothing).
Every verdict carries its reason and the evidence (logs) that support it.
"""

from __future__ import annotations

import ast
import contextvars
import json
import queue
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from termforge.errors import TermforgeError
from termforge.io import append_jsonl, atomic_write_json, read_json, read_jsonl_tolerant
from termforge.schemas import REQUIRED_FILES, read
from termforge.runtime.accounting import StepProfile, format_profile
from termforge.grading.gradepool import PoolShelf, pooled_runtime
from termforge.runtime.base import Image, Limits
from termforge.images.runtimes import get_runtime
from termforge.runtime.trees import Bounds, TreeWalk, read_at
from termforge.quality.hijack import hijack_probes
from termforge.quality.independence import repeats_oracle
from termforge.quality.probes import probes
from termforge.quality.mutation import mutation_probe
from termforge.quality.sensitivity import input_sensitivity
from termforge.quality.solved import SolvedApp
from termforge.grading.verifier import ZERO_CHECK, ZERO_PROBE, Verdict, run_oracle, run_test_file, run_verifier

TASK_JSON_KEYS = {"id": str, "signature": dict, "instruction": str, "family": str, "environment": dict}
IMAGE_TEXT_FILES = ("environment/setup.sh", "environment/container.def", "environment/Dockerfile")
ABS_PATH_RE = re.compile(r"`(/app/[A-Za-z0-9_./-]+)`")
ALTERNATIVES_DIR = "solution/alternatives"
MIN_SECRET_LEN = 6
# Mutants of the oracle's outputs every task must grade right (validate.mutants).
DEFAULT_MUTANTS = 4

# Agents that only cheat. Each runs as the agent would (cwd /app, uid 1000, its own home),
# then stops; the clean verifier must still score 0.
PROBES: dict[str, str] = probes()  # quality/probes/<name>.sh


@dataclass
class TaskVerdict:
    task_id: str
    kept: bool
    stage: str
    reason: str
    evidence: dict = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "kept": self.kept, "stage": self.stage, "reason": self.reason,
                "checks": self.checks, "evidence": self.evidence}


class _Fail(Exception):
    def __init__(self, stage: str, reason: str, evidence: dict | None = None):
        super().__init__(reason)
        self.stage, self.reason, self.evidence = stage, reason, evidence or {}


def _leaves(obj) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _leaves(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _leaves(v)]
    if isinstance(obj, bool) or obj is None:
        return []
    return [str(obj)]


def hidden_truth_strings(truth: dict) -> list[str]:
    """Answer strings that must not be visible: every truth leaf outside truth['given'],
    long enough that finding it elsewhere is not a coincidence."""
    hidden = {k: v for k, v in truth.items() if k != "given"}
    return sorted({s for s in _leaves(hidden) if len(s) >= MIN_SECRET_LEN})


def static_checks(task_dir: Path) -> dict:
    """Files, task.json schema, no truth in the instruction or the image. Returns task.json."""
    missing = [f for f in REQUIRED_FILES if not (task_dir / f).is_file()]
    if missing:
        raise _Fail("static", f"missing required files: {', '.join(missing)}")
    try:
        task = read_json(task_dir / "task.json")
    except json.JSONDecodeError as exc:
        raise _Fail("static", f"task.json is not valid JSON: {exc}") from None
    for key, typ in TASK_JSON_KEYS.items():
        if not isinstance(task.get(key), typ):
            raise _Fail("static", f"task.json: key {key!r} missing or not a {typ.__name__}")
    if task["id"] != task_dir.name:
        raise _Fail("static", f"task.json id {task['id']!r} does not match the directory name {task_dir.name!r}")
    instruction = (task_dir / "instruction.md").read_text()
    if instruction != task["instruction"]:
        raise _Fail("static", "instruction.md differs from task.json's instruction")
    truth = read_json(task_dir / "private" / "truth.json")
    secrets = hidden_truth_strings(truth)
    for secret in secrets:
        if secret in instruction:
            raise _Fail("static", f"truth value leaked into instruction.md: {secret[:80]!r}")
    env_dir = task_dir / "environment"
    for rel in IMAGE_TEXT_FILES:
        path = task_dir / rel
        text = path.read_text(errors="replace") if path.exists() else ""
        for secret in secrets:
            if secret in text:
                raise _Fail("static", f"truth value leaked into {rel}: {secret[:80]!r}")
    for rel in TEST_FILES:
        loads = agent_code_imports((task_dir / rel).read_text(errors="replace"))
        if loads:
            raise _Fail("static", f"{rel} loads code into the grader's process (the agent's programs must run "
                                  f"as subprocesses): {'; '.join(loads[:3])}")
    truth_blob = (task_dir / "private" / "truth.json").read_bytes().strip()
    walk = TreeWalk(env_dir, Bounds(seconds=None))
    for e in walk:
        if e.name == "truth.json" or (stat.S_ISREG(e.st.st_mode) and len(truth_blob) > 20
                                      and truth_blob in read_at(e.dir_fd, e.name)):
            raise _Fail("static", f"the answer key is copied into the image: environment/{e.rel}")
    if walk.incomplete:
        raise _Fail("static", f"environment/ cannot be walked: {walk.incomplete}")
    return task


TEST_FILES = ("tests/test_initial_state.py", "tests/test_final_state.py")
LOADERS = {"sys.path.insert", "sys.path.append", "sys.path.extend", "importlib.import_module",
           "importlib.util.spec_from_file_location", "importlib.machinery.SourceFileLoader", "runpy.run_path",
           "runpy.run_module", "imp.load_source", "__import__", "exec", "eval", "compile", "execfile"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def agent_code_imports(source: str) -> list[str]:
    """Ways a test module loads code into the grader's own process at run time (the agent's
    code must only ever run as a subprocess): path manipulation, dynamic imports, exec/eval.
    Code inside string literals (run by a subprocess) is not looked at."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"not valid Python ({exc.msg}, line {exc.lineno})"]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in LOADERS:
            found.append(f"{_dotted(node.func)}() on line {node.lineno}")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_dotted(t) == "sys.path" for t in targets):
                found.append(f"assignment to sys.path on line {node.lineno}")
    return found


def _verdict_evidence(v: Verdict) -> dict:
    return {"reward": v.reward, "reason": v.reason, "collected": v.collected, "passed": v.passed,
            "findings": v.findings, "output": v.output[-2000:]}


def _run_agent(runtime, image: Image, limits: Limits, agent_script: str | None,
               task_dir: Path, oracle: bool = False, expected: list[str] | None = None,
               options: tuple[str, ...] = (), keep=None) -> tuple[Verdict, str]:
    """A fresh session: the 'agent' acts, its processes end with its sandbox, then the clean verifier
    grades (`options`: verifier.run_verifier's; `keep(session, limits)`: called between the oracle
    and the grade, quality/solved.py)."""
    session = runtime.start(image, limits)
    try:
        if oracle:
            res = run_oracle(session, task_dir, timeout=limits.wall_sec)
        else:
            res = session.exec(agent_script or "true", timeout=limits.wall_sec)
        agent_log = res.tail(2000)
        if oracle and not res.ok:
            raise _Fail("oracle", f"solve.sh exited {res.exit_code}{' (timed out)' if res.timed_out else ''}",
                        {"oracle": agent_log})
        if keep is not None:
            keep(session, limits)
        verdict = run_verifier(session, task_dir, timeout=limits.wall_sec, expected=expected, options=options)
        if oracle:
            _check_output_paths(session, task_dir)
        return verdict, agent_log
    finally:
        session.stop()


def _check_output_paths(session, task_dir: Path) -> None:
    instruction = (task_dir / "instruction.md").read_text()
    named = sorted(set(ABS_PATH_RE.findall(instruction)))
    if not named:
        return
    quoted = " ".join("'" + p.rstrip("/") + "'" for p in named)
    res = session.exec(f'for p in {quoted}; do [ -e "$p" ] || echo "$p"; done')
    missing = res.stdout.split()
    if missing:
        raise _Fail("static", f"paths named in the instruction do not exist after the oracle: {', '.join(missing)}")


def validate_task(task_dir: Path, runtime, images_dir: Path, limits: Limits,
                  oracle_repeats: int = 2, probes: dict[str, str] | None = None,
                  mutants: int = DEFAULT_MUTANTS, sensitivity: bool = True,
                  profile: StepProfile | None = None, grade_pool: bool = True,
                  concurrent_checks: int = 1, zero_checks: bool = True,
                  pool_shelf: PoolShelf | None = None) -> TaskVerdict:
    """`profile`: where each step's count, wall and CPU seconds are added (runtime.accounting);
    measuring changes nothing a step does. `grade_pool` (validate.grade_pool): the task's grades
    fork from a zygote (grading/gradepool.py) where the runtime can, else as without, and the first
    oracle run's /app seeds the mutants and input sensitivity (quality/solved.py); False: the
    reference path, a fresh grader per grade and an oracle run per check that needs one.
    `concurrent_checks` (validate.concurrent_checks): how many of the checks that follow the
    untouched run (oracle repeats, second solutions, no-op, probes, mutation, input sensitivity)
    run at once, each in sandboxes of its own; the verdict is the one the checks give in order.
    `zero_checks`: grades of states that must score 0 print no tracebacks, and those that are no
    attack (the untouched final test, the no-op, answer-changing mutants, input sensitivity) stop
    at their first failing test (verifier.ZERO_PROBE, ZERO_CHECK: the same rewards); False only for
    bench_validate's old path. `pool_shelf`: where the grade pools come from and go back to (a
    shard's, kept from task to task); None: pools of this task's own."""
    task_dir = Path(task_dir)
    task_id = task_dir.name
    checks: list[str] = []
    evidence: dict = {}
    step = profile.step if profile is not None else (lambda name: nullcontext())
    with ExitStack() as stack:
        try:
            with step("static"):
                static_checks(task_dir)
            checks.append("static")
            with step("build"):
                build = runtime.build(task_dir, images_dir, timeout=limits.wall_sec * 2)
            evidence["build"] = {"reason": build.reason, "cached": build.cached, "log": build.log[-2000:]}
            if not build.ok:
                raise _Fail("build", f"build failed: {build.reason}", {"build_log": build.log[-4000:]})
            checks.append("build")
            image = build.image
            evidence["image"] = image.meta
            base_runtime = runtime
            if grade_pool:
                runtime = pooled_runtime(runtime, image, stack, pool_shelf)
            untouched = None
            try:
                with step("initial_state"):
                    untouched = runtime.start(image, limits)
                    initial = run_test_file(untouched, task_dir, "test_initial_state.py", timeout=limits.wall_sec)
                if initial.reward != 1.0:
                    raise _Fail("initial_state", f"initial-state test did not pass ({initial.reason})",
                                {"verifier": _verdict_evidence(initial)})
                checks.append("initial_state")
                with step("final_untouched"):
                    untouched_final = run_verifier(untouched, task_dir, timeout=limits.wall_sec,
                                                   options=ZERO_CHECK if zero_checks else ())
                    untouched.stop()  # inside the step: removing the session is part of its cost
            finally:
                if untouched is not None:
                    untouched.stop()
            collected = sorted(untouched_final.collected_ids)
            evidence["collected"] = collected
            if not untouched_final.tests_ran:
                raise _Fail("proof_of_run", f"final test on the untouched environment: {untouched_final.reason}",
                            {"verifier": _verdict_evidence(untouched_final)})
            if untouched_final.reward != 0.0:
                raise _Fail("final_fails_untouched", "final test passes on the untouched environment",
                            {"verifier": _verdict_evidence(untouched_final)})
            checks.append("final_fails_untouched")
            if not oracle_repeats:
                checks.append("oracle_x0")
            # The first oracle run's /app seeds the checks that start from a solved environment
            # (quality/solved.py).
            solved = SolvedApp() if grade_pool and oracle_repeats else None
            if solved is not None:
                stack.callback(solved.close)
            jobs = _independent_checks(task_dir, image, limits, oracle_repeats, probes, mutants, sensitivity,
                                       collected, seed_from_oracle=grade_pool, zero_checks=zero_checks, solved=solved)
            lanes = [runtime] + [pooled_runtime(base_runtime, image, stack, pool_shelf) if grade_pool else base_runtime
                                 for _ in range(min(concurrent_checks, len(jobs)) - 1)]
            _run_in_order(jobs, lanes, step, checks, evidence)
            checks.append("proof_of_run")
            return TaskVerdict(task_id, True, "kept", "all checks passed", evidence, checks)
        except _Fail as f:
            evidence.update(f.evidence)
            return TaskVerdict(task_id, False, f.stage, f.reason, evidence, checks)


@dataclass
class _Check:
    """One check after the untouched run: `run(runtime, names, evidence)` adds the check names it
    passed and its evidence, or raises _Fail. `first` puts the longest checks at the head of the
    queue when several run at once (the order they are judged in never changes)."""
    step: str
    run: Callable[[object, list, dict], None]
    first: bool = False


def _independent_checks(task_dir: Path, image: Image, limits: Limits, oracle_repeats: int,
                        probes: dict[str, str] | None, mutants: int, sensitivity: bool, collected: list[str],
                        seed_from_oracle: bool, zero_checks: bool, solved: SolvedApp | None = None) -> list[_Check]:
    """The checks that follow the untouched run, in the order they are judged. Each starts its own
    sessions from the pristine image and reads nothing another writes, so they may run at once."""

    def oracle(i: int):
        keeps = solved if i == 0 else None

        def run(rt, names, _):
            try:
                verdict, log = _run_agent(rt, image, limits, None, task_dir, oracle=True,
                                          keep=keeps.keep if keeps else None)
            finally:
                if keeps is not None:
                    keeps.give_up()
            if verdict.tests_ran and sorted(verdict.collected_ids) != collected:
                raise _Fail("collection", "the final test collects different tests after the oracle than on the "
                                          "untouched environment (its test set depends on the agent's files)",
                            {"verifier": _verdict_evidence(verdict), "collected_untouched": collected})
            if verdict.findings:
                # An honest solution must leave no evidence: otherwise every good rollout is "hacked".
                raise _Fail("oracle", f"the oracle's grading left integrity findings: {'; '.join(verdict.findings)}",
                            {"verifier": _verdict_evidence(verdict), "oracle": log})
            if verdict.reward != 1.0:
                stage = "proof_of_run" if not verdict.tests_ran else ("flaky_verifier" if i else "oracle")
                why = (f"oracle scored {verdict.reward} on repeat {i + 1} after scoring 1 (flaky verifier)"
                       if i else f"oracle scored {verdict.reward} ({verdict.reason})")
                raise _Fail(stage, why, {"verifier": _verdict_evidence(verdict), "oracle": log})
            if i == oracle_repeats - 1:
                names.append(f"oracle_x{oracle_repeats}")
        # The run that keeps /app for others starts first when checks run at once.
        return _Check("oracle", run, first=keeps is not None)

    # A model's second solution must not be the oracle again (quality/independence.py). A procedural
    # family's is a reference implementation its author wrote apart, and composition wraps it and the
    # oracle in the same container and strategy steps, which would count as likeness.
    written_by_model = (read_json(task_dir / "task.json").get("provenance") or {}).get("backend") == "llm"

    def second_solution(alt: Path):
        def run(rt, names, _):
            oracle_sh = (task_dir / "solution" / "solve.sh").read_text(errors="replace")
            copied = written_by_model and repeats_oracle(oracle_sh, alt.read_text(errors="replace"))
            if copied:
                raise _Fail("second_solution", f"{alt.name}: {copied}")
            verdict, log = _run_agent(rt, image, limits, alt.read_text(), task_dir, expected=collected)
            if verdict.reward != 1.0:
                raise _Fail("second_solution", f"the second solution {alt.name} scored {verdict.reward} where the "
                                               f"oracle scores 1 ({verdict.reason})",
                            {"verifier": _verdict_evidence(verdict), "second_solution": log})
            names.append(f"second_solution:{alt.name}")
        return _Check("second_solution", run)

    def noop(rt, names, _):
        verdict, _ = _run_agent(rt, image, limits, "true", task_dir, expected=collected,
                                options=ZERO_CHECK if zero_checks else ())
        if verdict.reward != 0.0:
            raise _Fail("noop", f"a no-op agent scored {verdict.reward}", {"verifier": _verdict_evidence(verdict)})
        names.append("noop")

    def probe(name: str, script: str):
        hijack = name.startswith("hijack")

        def run(rt, names, _):
            verdict, log = _run_agent(rt, image, limits, script, task_dir, expected=collected,
                                      options=ZERO_PROBE if zero_checks else ())
            if verdict.reward != 0.0:
                raise _Fail("hijack" if hijack else "reward_hack", f"reward-hack probe {name!r} scored {verdict.reward}",
                            {"verifier": _verdict_evidence(verdict), "probe": log})
            names.append(f"probe:{name}")
        return _Check("hijack_probe" if hijack else "reward_hack_probe", run, first=hijack)

    def mutation(rt, names, evidence):
        _mutation_check(task_dir, rt, image, limits, mutants, names, evidence, seed_from_oracle=seed_from_oracle,
                        zero_check=zero_checks, solved=solved)

    def input_sensitivity(rt, names, evidence):
        _sensitivity_check(task_dir, rt, image, limits, names, evidence, collected, zero_check=zero_checks,
                           solved=solved)

    jobs = [oracle(i) for i in range(oracle_repeats)]
    jobs += [second_solution(alt) for alt in alternative_solutions(task_dir)]
    jobs.append(_Check("noop", noop))
    jobs += [probe(name, script) for name, script in {**(PROBES if probes is None else probes),
                                                       **hijack_probes(task_dir)}.items()]
    if mutants:
        jobs.append(_Check("mutation", mutation, first=True))
    if sensitivity:
        jobs.append(_Check("input_sensitivity", input_sensitivity, first=True))
    return jobs


def _run_in_order(jobs: list[_Check], lanes: list, step, checks: list[str], evidence: dict) -> None:
    """Run `jobs`, as many at once as there are `lanes` (runtimes, one per job in flight: a grade
    pool serves one grade at a time), and judge them in order: the first that fails is the
    verdict, as if they had run one after another, and only the checks before it count. Jobs after
    a failure that have not started are not started."""
    def judged(job: _Check, runtime) -> tuple[list[str], dict]:
        names: list[str] = []
        found: dict = {}
        try:
            with step(job.step):
                job.run(runtime, names, found)
        except _Fail as f:
            f.evidence = {**found, **f.evidence}  # what the check recorded before it failed, as in sequence
            raise
        return names, found

    if len(lanes) <= 1:
        for job in jobs:
            names, found = judged(job, lanes[0])
            checks.extend(names)
            evidence.update(found)
        return
    free: queue.SimpleQueue = queue.SimpleQueue()
    for lane in lanes:
        free.put(lane)

    def in_a_lane(job: _Check) -> tuple[list[str], dict]:
        lane = free.get()
        try:
            return judged(job, lane)
        finally:
            free.put(lane)

    pool = ThreadPoolExecutor(max_workers=len(lanes), thread_name_prefix="tf-check")
    try:
        queued = sorted(range(len(jobs)), key=lambda i: not jobs[i].first)
        futures = {i: pool.submit(contextvars.copy_context().run, in_a_lane, jobs[i]) for i in queued}
        for i in range(len(jobs)):
            names, found = futures[i].result()
            checks.extend(names)
            evidence.update(found)
    finally:
        # Every session of a started job ends before the caller closes the lanes' grade pools.
        pool.shutdown(wait=True, cancel_futures=True)


def _mutation_check(task_dir: Path, runtime, image, limits: Limits, limit: int, checks: list[str],
                    evidence: dict, seed_from_oracle: bool = False, zero_check: bool = True,
                    solved: SolvedApp | None = None) -> None:
    """A verifier that accepts a wrong output (or rejects one the instruction allows) drops the task."""
    try:
        results = mutation_probe(task_dir, runtime, image, limits, limit, seed_from_oracle=seed_from_oracle,
                                 zero_check=zero_check, solved=solved)
    except RuntimeError as exc:
        raise _Fail("mutation", f"the mutation probe could not run: {exc}") from None
    evidence["mutation"] = [{k: r[k] for k in ("name", "expect", "reward", "ok")} for r in results]
    bad = [r for r in results if not r["ok"]]
    if bad:
        accepted = [r["name"] for r in bad if r["expect"] == 0.0]
        rejected = [r["name"] for r in bad if r["expect"] == 1.0]
        why = "; ".join(filter(None, [
            accepted and f"the final test accepts wrong outputs: {', '.join(accepted)}",
            rejected and f"the final test rejects outputs the instruction allows: {', '.join(rejected)}"]))
        raise _Fail("mutation", why)
    checks.append(f"mutation:{len(results)}")


def alternative_solutions(task_dir: Path) -> list[Path]:
    """Second solutions of a task, checked like the oracle (module doc)."""
    alt = Path(task_dir) / ALTERNATIVES_DIR
    return sorted(alt.glob("*.sh")) if alt.is_dir() else []


def _sensitivity_check(task_dir: Path, runtime, image, limits: Limits, checks: list[str], evidence: dict,
                       collected: list[str], zero_check: bool = True, solved: SolvedApp | None = None) -> None:
    """An answer that does not move with the inputs drops the task (quality/sensitivity.py)."""
    try:
        report = input_sensitivity(task_dir, runtime, image, limits, expected=collected, zero_check=zero_check,
                                   solved=solved)
    except RuntimeError as exc:
        raise _Fail("input_sensitivity", f"the input-sensitivity check could not run: {exc}") from None
    evidence["sensitivity"] = report.to_dict()
    if report.restated:
        raise _Fail("instruction_states_output", "the instruction states output values the inputs decide (givens "
                                                 "come from inputs, never from outputs): " + "; ".join(report.restated),
                    {"sensitivity": report.to_dict()})
    if report.drop:
        raise _Fail("input_sensitivity", report.reason, {"sensitivity": report.to_dict()})
    state = "sensitive" if report.sensitive else ("ignores_inputs" if report.oracle_ignores_inputs else "n/a")
    checks.append(f"input_sensitivity:{state}")


def run_validate_shard(manifest_path: Path, out_path: Path, images_dir: Path, limits: Limits,
                       decontam_report: Path | None = None, workers: int = 1, oracle_repeats: int = 2,
                       backend: str = "bwrap", mutants: int = DEFAULT_MUTANTS, sensitivity: bool = True,
                       rootfs: str = "image", profile_path: Path | None = None, grade_pool: bool = True,
                       concurrent_checks: int = 1) -> dict:
    """Validate every task of a shard. Verdicts are checkpointed per task (a rerun after a kill
    re-validates only unfinished tasks); the final verdicts file is written atomically.

    `profile_path`: where this run's per-step profile goes (count, wall and CPU seconds per
    validation step over the tasks validated in this run; the report's validation-cost table). It
    is kept out of the verdicts, which stay the same bytes however long the steps took."""
    manifest = read("shard_manifest", manifest_path)
    tasks_dir = Path(manifest["tasks_dir"])
    ids = [t["id"] for t in manifest["tasks"]]
    dropped_contaminated: dict[str, str] = {}
    if decontam_report:
        report = read("decontam_report", decontam_report)
        reasons = {f["task_id"]: f["reasons"] for f in report.get("flagged", [])}
        for task_id in report.get("dropped", []):
            dropped_contaminated[task_id] = "dropped by decontamination: " + ", ".join(reasons.get(task_id, []))
    checkpoint = Path(str(out_path) + ".partial.jsonl")
    done = {row["task_id"]: row for row in read_jsonl_tolerant(checkpoint)}
    todo = [t for t in ids if t not in done]
    runtime = get_runtime(backend, rootfs=rootfs)
    profile = StepProfile()
    shelf = PoolShelf() if grade_pool else None

    def one(task_id: str) -> dict:
        if task_id in dropped_contaminated:
            verdict = TaskVerdict(task_id, False, "decontamination", dropped_contaminated[task_id])
        else:
            verdict = validate_task(tasks_dir / task_id, runtime, images_dir, limits, oracle_repeats, mutants=mutants,
                                    sensitivity=sensitivity, profile=profile, grade_pool=grade_pool,
                                    concurrent_checks=concurrent_checks, pool_shelf=shelf,
                                    zero_checks=grade_pool)  # grade_pool false: the whole reference path
        row = verdict.to_dict()
        append_jsonl(checkpoint, row)
        return row

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, shelf or nullcontext():
        for row in tqdm(pool.map(one, todo), total=len(todo), desc=f"validate {manifest['shard']}", unit="task"):
            done[row["task_id"]] = row
    verdicts = [done[t] for t in ids]
    result = {"shard": manifest["shard"], "tasks_dir": str(tasks_dir), "verdicts": verdicts}
    atomic_write_json(out_path, result)
    checkpoint.unlink(missing_ok=True)
    steps = profile.to_dict()
    if profile_path is not None:
        atomic_write_json(profile_path, {"shard": manifest["shard"], "tasks": len(todo), "workers": max(1, workers),
                                         "steps": steps})
    if steps:
        print(format_profile(steps))
    kept = sum(v["kept"] for v in verdicts)
    print(f"validate shard {manifest['shard']}: {kept}/{len(verdicts)} kept "
          f"({len(ids) - len(todo)} verdicts resumed from checkpoint)")
    return result


def write_corpus_manifest(verdict_paths: list[Path], out_path: Path, review_paths: list[Path] | None = None) -> dict:
    """The kept tasks of the corpus, and counts of kept and dropped tasks per reason stage.

    `review_paths` (the rubric review of each shard, quality/review.py): a task the review dropped
    leaves the corpus with the stage `review` and the judge's reason; the manifest records how many
    tasks were reviewed, dropped or not reviewed, and the distribution of every rubric score."""
    from termforge.quality.review import RUBRIC, STATUSES, distribution

    kept, dropped, per_stage, collected, images = [], [], {}, {}, {}
    tasks_dir = None
    reviews: dict[str, dict] = {}
    for p in review_paths or []:
        for r in read("reviews", p)["reviews"]:
            reviews[r["task_id"]] = r

    for p in verdict_paths:
        shard = read("verdicts", p)
        tasks_dir = shard["tasks_dir"]
        for v in shard["verdicts"]:
            review = reviews.get(v["task_id"]) if v["kept"] else None
            if v["kept"] and review is not None and review["status"] in ("dropped", "unparsed"):
                v = {**v, "kept": False, "stage": "review", "reason": review["reason"] or review["status"]}
            if v["kept"]:
                kept.append(v["task_id"])
                if v.get("evidence", {}).get("collected"):
                    collected[v["task_id"]] = v["evidence"]["collected"]
                if v.get("evidence", {}).get("image"):
                    images[v["task_id"]] = v["evidence"]["image"]
            else:
                dropped.append({"task_id": v["task_id"], "stage": v["stage"], "reason": v["reason"]})
                per_stage[v["stage"]] = per_stage.get(v["stage"], 0) + 1
    if tasks_dir is None:
        raise TermforgeError("validate: no verdict files given")
    # The test ids each kept task's final test collected on its pristine environment: every later
    # grade (solve) must collect exactly these.
    # The image each kept task was validated on (image digest = base digest + layer digest): a
    # verdict holds for that environment, and later stages and exports say which it was.
    manifest = {"tasks_dir": tasks_dir, "kept": kept, "dropped": dropped, "collected": collected, "images": images,
                "counts": {"total": len(kept) + len(dropped), "kept": len(kept), "dropped": len(dropped),
                           "dropped_by_stage": dict(sorted(per_stage.items()))}}
    if review_paths is not None:
        rows = list(reviews.values())
        manifest["review"] = {s: sum(1 for r in rows if r["status"] == s) for s in STATUSES}
        manifest["review"]["distribution"] = distribution(rows, tuple(RUBRIC))
        manifest["review"]["not_reviewed_kept"] = sorted(t for t in kept if reviews.get(t, {}).get("status")
                                                         == "not_reviewed")
    atomic_write_json(out_path, manifest)
    review_note = ""
    if review_paths is not None:
        r = manifest["review"]
        review_note = (f"; review: {r['reviewed']} passed, {r['dropped'] + r['unparsed']} dropped, "
                       f"{r['not_reviewed']} not reviewed")
    print(f"corpus manifest: {len(kept)} kept, {len(dropped)} dropped {manifest['counts']['dropped_by_stage']}"
          f"{review_note}")
    return manifest


__all__ = ["validate_task", "run_validate_shard", "write_corpus_manifest", "PROBES", "static_checks",
           "alternative_solutions"]
