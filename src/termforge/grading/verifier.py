"""The clean verifier: grading that the agent cannot influence (docs/grading.md).

After the agent's processes are gone (its sandbox, and with it its pid namespace, is killed), a
fresh sandbox over the same task layer runs the task's tests with: a fresh environment (no
inherited variables), an empty read-only home, the tests copied in only now at /tests, a fresh
/logs, and a grader at /verifier (read-only) that the agent never saw. The grader is
`python3 -I /verifier/grade.py` (nothing from cwd, user site or PYTHON* variables on the path;
pytest in importlib mode, so the test directory is not on sys.path either), and the reward the
host records is the grader's own verdict, sent over a private socket that agent processes neither
inherit nor can open (termforge.grading.grader): 1 iff every collected test passed and the collected set
equals the one recorded from the pristine tests. No file under /logs and no line of output is
trusted for our own tasks.

Harbor tasks run their test.sh, which may run the agent's code before the tests: the sandbox's
first process is then the grader's supervisor (it alone holds the channel), /tests is read-only,
and the grader runs only when /verifier/run-tests asks the supervisor, on the pristine tests;
its collected set must equal the one recorded for the task on its untouched environment
(`record=True`). A test.sh that runs its own pytest falls back to the reward file, read on the
host with nothing followed (termforge.grading.reward_file), and only a reward in [0, 1] (or the task's
declared range) counts.

Before the tests run, the host walks the agent's writable trees within the tree bounds
(runtime.trees): a tree it cannot walk is a 0 with a finding, and so is a grader or supervisor
killed before it reported. None of this is ever an infrastructure error.

Integrity findings (`Verdict.findings`) are evidence from the run itself, not string matching:
the channel touched by a non-grader, files written under /logs, the reward directory or file
tampered with, processes the tests started still alive when the tests ended, the grader killed,
a tree the host cannot walk, a reward file out of range.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from termforge.errors import TermforgeError
from termforge.grading.grader import GRADE_PY, RUN_TESTS, GraderChannel
from termforge.grading import program
from termforge.grading.reward_file import DEFAULT_REWARD_RANGE, RewardReading, range_problem, read_reward
from termforge.runtime import trees
from termforge.runtime.base import Bind, ExecResult
from termforge.runtime.bwrap import HOST_ROOTFS, BwrapSession, chown_tree, tree_bounds

TEST_SH = program("test.sh")

VERIFIER_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
GRADER_ARGV = ["/usr/bin/python3", "-I", "/verifier/grade.py"]
# Grades whose one use is whether they scored 0 (validation's states that must score 0) print no
# tracebacks; ZERO_CHECK also stops at the first failing test, for states that are no attack (an
# attack's payload in a later test must still run, so probes never stop early). The reward is the
# full run's either way: a reward of 1 needs every collected test to pass, so no test left unrun
# could change a 0, and a run without a failure is never cut short. Collection is unchanged.
ZERO_PROBE = ("--tb=no",)
ZERO_CHECK = ("-x", "--tb=no")
# test.sh runs by its path, so by its shebang, as Harbor runs it (made executable, then the path
# given to the shell: harbor/verifier/verifier.py Verifier.verify, harbor/utils/scripts.py
# build_execution_command): a Python test.sh runs under Python; one without a shebang, under bash.
PLAIN_TEST_SH = ["/bin/bash", "--noprofile", "--norc", "-c", "/tests/test.sh"]
SUPERVISED_TEST_SH = [*GRADER_ARGV, "--supervise", "--", *PLAIN_TEST_SH]
HARBOR_LOG_FILES = ("reward.txt", "reward.json")
# Signals that end a grader on its own account (its CPU or file-size limit), not somebody's kill.
SELF_INFLICTED = {signal.SIGXCPU, signal.SIGXFSZ}
LOG_BOUNDS = trees.Bounds(depth=16, entries=10_000, seconds=10.0)


@dataclass
class Verdict:
    """The outcome of one verifier run."""

    reward: float
    tests_ran: bool
    collected: int
    passed: int
    failed: int
    exit_code: int
    timed_out: bool
    output: str
    reason: str
    findings: list[str] = field(default_factory=list)
    collected_ids: list[str] = field(default_factory=list)
    # "grader" (the private channel), "reward_file" (Harbor fallback) or "host" (the host scored 0
    # itself: a tree it cannot walk, a killed supervisor).
    graded_by: str = "grader"
    limit_hit: str | None = None
    # Harbor tasks: the named rewards as Harbor would record them (reward_file.RewardReading.to_dict()).
    reading: dict | None = None

    def __post_init__(self) -> None:
        # What a verdict names (files under /logs, processes the tests left, arguments, test ids)
        # is whatever the agent made: kept as valid text, so that nothing recording or showing a
        # verdict can fail on a name that is not UTF-8.
        self.findings = [trees.printable(f) for f in self.findings]
        self.reason, self.output = trees.unicode_text(self.reason), trees.unicode_text(self.output)
        self.collected_ids = [trees.unicode_text(i) for i in self.collected_ids]

    @property
    def hacked(self) -> bool:
        return bool(self.findings)

    def to_dict(self) -> dict:
        return asdict(self)


class _Toolchain:
    """A per-run /tests copy, /logs and read-only /verifier, owned by the session's uid."""

    def __init__(self, session: BwrapSession, task_dir: Path, tests_writable: bool = True,
                 sources: list[Path] | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="tf-verify-", dir=session.workdir))
        self.tests_writable = tests_writable
        try:
            self.tests = self.root / "tests"
            # Several sources (a Harbor step's shared and own tests/) are merged in order, a later
            # one's files winning, as Harbor uploads them.
            for src in sources or [Path(task_dir) / "tests"]:
                problems = trees.copy_tree(Path(src), self.tests)
                if problems:
                    raise TermforgeError(f"task {Path(task_dir).name}: {src} cannot be copied: {problems[0]}")
            test_sh = self.tests / "test.sh"
            if not tests_writable and test_sh.is_file() and not test_sh.is_symlink():
                test_sh.chmod(test_sh.stat().st_mode | 0o555)  # Harbor's `chmod +x` before it runs
            self.logs = self.root / "logs"
            (self.logs / "verifier").mkdir(parents=True)
            self.tool = self.root / "verifier"
            self.tool.mkdir()
            (self.tool / "grade.py").write_text(GRADE_PY)
            run = self.tool / "run-tests"
            run.write_text(RUN_TESTS)
            run.chmod(0o755)
            uid = getattr(session, "uid", None)
            chown_tree(self.root, uid)
            # The grader's code is root's (when the host is root) and never writable inside.
            chown_tree(self.tool, 0 if uid is not None else None)
        except BaseException:
            self.cleanup()
            raise

    def binds(self) -> list[Bind]:
        # /tests is writable for our own tasks so the grader can delete what it has read; read-only
        # for Harbor tasks, whose test.sh may run the agent's code before the grader collects.
        return [Bind(self.tests, "/tests", writable=self.tests_writable), Bind(self.tool, "/verifier"),
                Bind(self.logs, "/logs", writable=True)]

    def cleanup(self) -> None:
        trees.remove_tree(self.root)


def expected_tests(task_dir: Path) -> list[str] | None:
    """The collected test ids recorded for a task from its pristine tests, when recorded."""
    from termforge.io import read_json

    path = Path(task_dir) / "private" / "collected_tests.json"
    if not path.is_file():
        return None
    data = read_json(path)
    return list(data.get("test_final_state.py", [])) or None


@dataclass
class _Run:
    res: ExecResult
    verdict: dict | None
    findings: list[str]
    report: dict | None  # the supervisor's (Harbor tasks)


def _run_grader(session: BwrapSession, tc: _Toolchain, argv: list[str], timeout: float, cwd: str,
                env: dict | None, supervised: bool = False) -> _Run:
    channel = GraderChannel()
    try:
        env = {**VERIFIER_ENV, **(env or {}), **channel.env}
        pool = getattr(session, "grade_pool", None)
        # A grade pool (grading.gradepool) forks the grader from a zygote into a fresh sandbox of
        # its own; None where it cannot, and then the grader starts the plain way.
        res = None if pool is None or supervised else pool.run(session, argv, timeout, env, cwd, tc.binds(),
                                                              channel.boot.fileno())
        if res is None:
            res = session.exec("", timeout=timeout, env=env, cwd=cwd, binds=tc.binds(), keep_home=False, argv=argv,
                               pass_fds=channel.pass_fds)
    finally:
        verdict = channel.finish()
    findings = channel.findings
    report = channel.report
    ended = res.timed_out or res.limit_hit
    if verdict is not None and verdict.get("died"):
        # The grader's pytest process was killed; the grader itself lived to say so.
        _died(findings, verdict.get("signal"), ended)
    if supervised:
        grader = (report or {}).get("grader")
        if verdict is None and isinstance(grader, dict):
            verdict = _died(findings, grader.get("signal"), ended)
        if report is None and channel.private is not None and not ended:
            findings.append("the grader's supervisor was killed before it reported")
        if isinstance(report, dict) and isinstance(report.get("requests"), int) and report["requests"] > 1:
            findings.append(f"the grader was asked for {report['requests']} times (test.sh's processes asked for it)")
    elif verdict is None and channel.private is not None:
        # The grader started (it took its private socket) but never reported: the processes the
        # tests started killed or stalled it. That is the agent's failure, graded 0.
        sig = res.exit_code - 128 if res.exit_code is not None and res.exit_code > 128 else None
        before = len(findings)
        verdict = _died(findings, sig, ended)
        if len(findings) == before and not ended and not sig:
            # It ended on its own without a verdict: it failed on something the agent made (what it
            # could not check is unchecked), so its failure is itself a finding.
            findings.append(f"the grader failed before it had its verdict (exit {res.exit_code}): "
                            f"{_last_line(res.stderr)}")
    return _Run(res, verdict, findings, report)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return trees.printable(lines[-1][:200]) if lines else "no output"


def _died(findings: list[str], sig: int | None, ended) -> dict:
    if sig and not ended and sig not in SELF_INFLICTED:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        findings.append(f"the grader was killed ({name}) before it had its verdict")
    return {"collected": [], "outcomes": {}, "exitstatus": -1, "leftover": [], "died": True}


def _logs_findings(logs: Path, allowed: tuple[str, ...]) -> list[str]:
    """What the tests' processes did under /logs (looked at with lstat only, within bounds)."""
    findings = []
    vdir = logs / "verifier"
    try:
        st = os.lstat(vdir)
        if not stat.S_ISDIR(st.st_mode):
            findings.append("reward dir replaced: /logs/verifier is not a directory")
        elif not st.st_mode & stat.S_IWUSR:
            findings.append("read-only reward dir: /logs/verifier lost its write permission")
    except OSError:
        findings.append("reward dir removed: /logs/verifier is gone")
    unexpected = []
    walk = trees.TreeWalk(logs, LOG_BOUNDS)
    for e in walk:
        rel = e.rel
        if rel == "verifier" or (e.depth == 2 and rel.startswith("verifier/") and e.name in allowed):
            continue
        if len(unexpected) < 6:
            unexpected.append("/logs/" + rel[:200])
    if unexpected:
        shown = ", ".join(sorted(unexpected)[:5]) + (" ..." if len(unexpected) > 5 else "")
        findings.append(f"unexpected files under /logs: {shown}")
    if walk.incomplete:
        findings.append(f"a tree under /logs the host cannot walk: {walk.incomplete}")
    for name in allowed:
        try:
            st = os.lstat(vdir / name)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            findings.append(f"reward file tampered: /logs/verifier/{name} is not a regular file")
        elif not st.st_mode & stat.S_IWUSR:
            findings.append(f"reward file tampered: /logs/verifier/{name} made read-only")
    return findings


def unwalkable(session: BwrapSession) -> str | None:
    """Why the host cannot walk what the agent left in the session's writable trees (deeper or
    larger than the tree bounds, unreadable, too slow), or None."""
    limits = getattr(session, "limits", None)
    bounds = tree_bounds(limits) if limits is not None else trees.DEFAULT_BOUNDS
    for root, where in ((session.layer, "/app"), (getattr(session, "home", None), "/home/user")):
        if root is None:
            continue
        m = trees.allocated([root], bounds)
        if m.incomplete:
            return f"{where}: {m.incomplete}"
    return None


def _host_zero(why: str) -> Verdict:
    reason = f"the agent left a tree the host cannot walk ({why})"
    return Verdict(0.0, False, 0, 0, 0, -1, False, "", reason, [f"pathological tree: {why}"], [], "host")


def _grade(res: ExecResult, verdict: dict | None, findings: list[str], expected: list[str] | None,
           fallback: tuple[float | None, str] | None = None) -> Verdict:
    """Reward from the grader's verdict (or, for Harbor tasks without one, the reward file)."""
    output = (res.stdout + res.stderr)[-4000:]
    if verdict is not None:
        ids = [str(n) for n in verdict["collected"]]
        outcomes = {str(k): str(v) for k, v in verdict["outcomes"].items()}
        passed = sum(1 for n in ids if outcomes.get(n) == "passed")
        failed = sum(1 for n in ids if outcomes.get(n) in ("failed", None))
        left = [str(x) for x in verdict.get("leftover") or []]
        if left:
            findings.append(f"processes left behind by the tests: {', '.join(left[:5])}")
        tests_ran = bool(ids)
        all_passed = tests_ran and passed == len(ids)
        reward = 1.0 if all_passed else 0.0
        ignored = [str(a) for a in verdict.get("ignored_args") or []]
        if verdict.get("died"):
            tests_ran, reason = True, "the grader was killed before it had a verdict (by the tests' processes?)"
        elif not tests_ran:
            reason = "the grader collected no tests" + (f" (arguments it refused: {' '.join(ignored)[:200]})"
                                                       if ignored else "")
        elif expected is not None and sorted(ids) != sorted(expected):
            reward = 0.0
            reason = (f"collected tests differ from the recorded set ({len(ids)} collected, "
                      f"{len(expected)} recorded)")
        else:
            reason = f"{passed}/{len(ids)} tests passed"
        graded_by = "grader"
    else:
        ids, passed, failed, tests_ran, reward, graded_by = [], 0, 0, False, 0.0, "grader"
        reason = "the grader sent no verdict"
        if fallback is not None:
            value, why = fallback
            graded_by = "reward_file"
            if value is not None:
                reward, tests_ran, reason = value, True, why
            else:
                reason = why
    if res.limit_hit:
        reward, reason = 0.0, f"limit reached: {res.limit_hit}"
    elif res.timed_out:
        reward, reason = 0.0, "verifier timed out"
    return Verdict(reward, tests_ran, len(ids), passed, failed, res.exit_code, res.timed_out, output, reason,
                   findings, ids, graded_by, res.limit_hit)


def _disk_findings(res: ExecResult) -> list[str]:
    """A sandbox killed because its trees could not be measured: the tests' programs built a
    tree the host cannot walk (a limit reached by honest work is a reason, not a finding)."""
    if res.limit_hit and "could not be measured" in res.limit_hit:
        return [f"pathological tree: {res.limit_hit}"]
    return []


def run_test_file(session: BwrapSession, task_dir: Path, test_file: str, timeout: float = 300,
                  expected: list[str] | None = None) -> Verdict:
    """Run one pytest file of the task through the grader; reward 1 iff all its tests pass."""
    why = unwalkable(session)
    if why:
        return _host_zero(why)
    tc = _Toolchain(session, task_dir)
    try:
        run = _run_grader(session, tc, [*GRADER_ARGV, f"/tests/{test_file}"], timeout, "/tests", None)
        findings = run.findings + _logs_findings(tc.logs, ()) + _disk_findings(run.res)
        return _grade(run.res, run.verdict, findings, expected)
    finally:
        tc.cleanup()


def run_verifier(session: BwrapSession, task_dir: Path, timeout: float = 300, *, cwd: str = "/tests",
                 env: dict | None = None, harbor: bool = False, expected: list[str] | None = None,
                 reward_file_proof: bool | None = None, record: bool = False,
                 reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE,
                 tests_dirs: list[Path] | None = None, options: tuple[str, ...] = ()) -> Verdict:
    """Grade a finished episode.

    termforge tasks: the grader runs tests/test_final_state.py as the sandbox's first process and
    its verdict is the reward (`expected`, else private/collected_tests.json, is the recorded set
    of test ids). Harbor / Terminal-Bench tasks (`harbor=True`): tests/test.sh runs under the
    grader's supervisor from the image's WORKDIR (`cwd`) with extra variables (`env`), as Harbor
    runs it; when it asks for the grader (/verifier/run-tests) the grader's verdict is the reward
    and its collected set must equal `expected`, the set recorded on the untouched environment
    (`record=True` is that recording run: no set to compare with yet); otherwise the reward is the
    reward file test.sh wrote, if it lies in `reward_range`. `tests_dirs`: the folders merged into
    /tests, in order (default task_dir/tests). `options`: pytest options of termforge's own grader,
    ZERO_PROBE or ZERO_CHECK for a grade whose reward alone is read and must be 0."""
    harbor = harbor or bool(reward_file_proof)
    if expected is None and not harbor:
        expected = expected_tests(task_dir)
    why = unwalkable(session)
    if why:
        graded = _host_zero(why)
        if harbor:
            graded.reading = RewardReading({"reward": 0.0}, "host").to_dict()
        return graded
    tc = _Toolchain(session, task_dir, tests_writable=not harbor, sources=tests_dirs)
    try:
        if harbor:
            return _harbor_verdict(session, tc, timeout, cwd, env, expected, record, reward_range)
        run = _run_grader(session, tc, [*GRADER_ARGV, *options, "/tests/test_final_state.py"], timeout, cwd, env)
        findings = run.findings + _logs_findings(tc.logs, ()) + _disk_findings(run.res)
        return _grade(run.res, run.verdict, findings, expected)
    finally:
        tc.cleanup()


def image_has_python(rootfs) -> bool:
    """Whether an image's root filesystem has the grader's /usr/bin/python3 (symlinks resolved
    inside the image, as the sandbox sees them)."""
    if str(rootfs) == HOST_ROOTFS:
        return os.path.isfile("/usr/bin/python3")
    root, rel = Path(rootfs), "usr/bin/python3"
    for _ in range(16):
        path = root / rel
        if not path.is_symlink():
            return path.is_file()
        target = os.readlink(path)
        rel = target.lstrip("/") if target.startswith("/") else os.path.normpath(
            os.path.join(os.path.dirname(rel), target))
        if rel.startswith(".."):
            return False
    return False


def _unsupervised(session: BwrapSession, tc: _Toolchain, timeout: float, cwd: str, env: dict | None) -> _Run:
    """test.sh on an image without the grader's Python (a Harbor task FROM a bare image): run as
    Harbor runs it, with no grader and no channel at all (so nothing test.sh starts can send a
    verdict); the reward files are the only outcome, read with Harbor's rules."""
    res = session.exec("", timeout=timeout, env={**VERIFIER_ENV, **(env or {})}, cwd=cwd, binds=tc.binds(),
                       keep_home=False, argv=PLAIN_TEST_SH)
    return _Run(res, None, [], None)


def _harbor_verdict(session: BwrapSession, tc: _Toolchain, timeout: float, cwd: str, env: dict | None,
                    expected: list[str] | None, record: bool, reward_range: tuple[float, float]) -> Verdict:
    supervised = image_has_python(getattr(session, "rootfs", HOST_ROOTFS))
    if supervised:
        run = _run_grader(session, tc, SUPERVISED_TEST_SH, timeout, cwd, env, supervised=True)
    else:
        run = _unsupervised(session, tc, timeout, cwd, env)
    res, verdict, findings = run.res, run.verdict, run.findings
    reading = read_reward(tc.logs / "verifier")
    findings += _logs_findings(tc.logs, HARBOR_LOG_FILES) + _disk_findings(res)
    out_of_range = range_problem(reading.rewards, reward_range) if reading.rewards is not None else None
    if out_of_range:
        findings.append(f"reward file out of range: {out_of_range}")
    if verdict is not None and reading.reward is not None:
        grader_reward = 1.0 if verdict["collected"] and all(
            verdict["outcomes"].get(n) == "passed" for n in verdict["collected"]) else 0.0
        if reading.reward != grader_reward:
            findings.append(f"reward file says {reading.reward:g}, the grader {grader_reward:g}")
    asked = isinstance(run.report, dict) and isinstance(run.report.get("requests"), int) and run.report["requests"] > 0
    wants_grader = bool(expected) or asked
    if verdict is None and wants_grader and not record:
        # The task's test.sh asks for the grader (recorded, or seen asking): the reward file is
        # never a stand-in for its verdict (a process test.sh ran could have written it).
        fallback = None
    elif out_of_range:
        fallback = (0.0, f"tests/test.sh wrote {out_of_range}: scored 0")
    elif reading.reward is not None:
        fallback = (reading.reward, f"tests/test.sh wrote reward {reading.reward:g} to {reading.source} "
                                    "(no grader ran: unverified)")
    elif reading.rewards is not None:
        # Several named rewards and none called `reward`: valid for Harbor, which averages each key
        # (Verdict.reward has no single value to give; the trial records reading.rewards).
        fallback = (0.0, f"tests/test.sh wrote the rewards {', '.join(sorted(reading.rewards))} to "
                         f"{reading.source} (no headline reward; no grader ran: unverified)")
    else:
        fallback = (None, f"tests/test.sh wrote no numeric reward: {reading.error}")
    if verdict is not None and expected == [] and not record:
        findings.append("the grader was asked for although this task's test.sh never asks for it")
    unrecorded = verdict is not None and expected is None and not record
    if unrecorded:
        # A grader verdict on a Harbor task is checked against the test set recorded on the task's
        # untouched environment; without one, a verdict on a subset of the tests could pass.
        expected = []
    graded = _grade(res, verdict, findings, expected, fallback=fallback)
    ended = graded.timed_out or res.limit_hit
    if unrecorded and not ended:
        graded.reason = "no test set was recorded for this task: the grader's verdict cannot be checked"
    if supervised and run.report is None and not ended:
        graded.reward, graded.graded_by = 0.0, "host"
        graded.reason = "the grader's supervisor ended without reporting (killed?): scored 0"
    elif fallback is None and not ended:
        graded.graded_by = "host"
        graded.reason = "test.sh asks for the grader, which sent no verdict: scored 0"
        if asked:
            findings.append("the grader was asked for but never sent a verdict (malformed or refused requests)")
    if graded.graded_by == "host" or (graded.graded_by == "reward_file" and out_of_range):
        # Scored 0 by termforge's own rule, a valid reward (Harbor has no range rule; a reward of
        # 1e308 would make a run's mean infinite).
        graded.reading = RewardReading({"reward": 0.0}, graded.graded_by, None).to_dict()
    else:
        graded.reading = _harbor_reading(graded, reading)
    return graded


def _harbor_reading(graded: Verdict, reading: RewardReading) -> dict:
    """The rewards a Harbor trial records. Graded by the grader: its verdict (whatever it
    collected), keeping the reward files' named rewards only when they agree with it; graded by
    the reward file: Harbor's reading of it (no reward at all when Harbor would raise a parse
    error)."""
    if graded.graded_by == "grader":
        if graded.tests_ran and reading.rewards is not None and reading.reward == graded.reward:
            return reading.to_dict()
        return RewardReading({"reward": graded.reward}, "grader").to_dict()
    return reading.to_dict()


def run_oracle(session: BwrapSession, task_dir: Path, timeout: float = 300) -> ExecResult:
    """Run solution/solve.sh as the agent would (from /app), with the solution bound read-only."""
    # A copy inside the session's own tree: the sandbox's uid need not be able to read task_dir.
    copy = Path(tempfile.mkdtemp(prefix="tf-solution-", dir=session.workdir))
    try:
        problems = trees.copy_tree(Path(task_dir) / "solution", copy / "solution")
        if problems:
            raise TermforgeError(f"task {Path(task_dir).name}: its solution/ cannot be copied: {problems[0]}")
        chown_tree(copy, getattr(session, "uid", None))
        return session.exec("/bin/bash --noprofile --norc /solution/solve.sh", timeout=timeout,
                            binds=[Bind(copy / "solution", "/solution")])
    finally:
        trees.remove_tree(copy)
