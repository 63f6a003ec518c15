"""The clean verifier: grading that the agent cannot influence (docs/grading.md).

After the agent's processes are gone (its sandbox, and with it its pid namespace, is killed), a
fresh sandbox over the same task layer runs the task's tests with: a fresh environment (no
inherited variables), an empty read-only home, the tests copied in only now at /tests, a fresh
/logs, and a grader at /verifier (read-only) that the agent never saw. The grader is
`python3 -I /verifier/grade.py` (nothing from cwd, user site or PYTHON* variables on the path;
pytest in importlib mode, so the test directory is not on sys.path either), and the reward the
host records is the grader's own verdict, sent over a private socket that agent processes neither
inherit nor can open (termforge.grader): 1 iff every collected test passed and the collected set
equals the one recorded from the pristine tests. No file under /logs and no line of output is
trusted for our own tasks; Harbor tasks (whose test.sh may run its own pytest) fall back to the
reward file, read on the host with nothing followed (termforge.reward_file).

Integrity findings (`Verdict.findings`) are evidence from the run itself, not string matching:
the channel touched by a non-grader, files written under /logs, the reward directory or file
tampered with, processes the tests started still alive when the tests ended.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from termforge.grader import GRADE_PY, RUN_TESTS, GraderChannel
from termforge.reward_file import RewardReading, read_reward
from termforge.runtime.base import Bind, ExecResult
from termforge.runtime.bwrap import BwrapSession, chown_tree

TEST_SH = """#!/bin/bash
# Harbor verifier entry point: writes 1 to /logs/verifier/reward.txt when every final-state test
# passes, else 0. pytest runs isolated from the agent's files: from /tests, under `python3 -I` (no
# cwd, user site or PYTHON* variables on sys.path), in importlib mode (the test directory is not
# put on sys.path) with plugin autoload off, so a pytest.py, conftest.py or sitecustomize.py
# planted in /app is never imported. termforge never trusts this file's reward for its own tasks:
# its grader reports to the host over a private channel (docs/grading.md).
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

VERIFIER_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
GRADER_ARGV = ["/usr/bin/python3", "-I", "/verifier/grade.py"]
HARBOR_LOG_FILES = ("reward.txt", "reward.json")


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
    graded_by: str = "grader"  # "grader" (the private channel) or "reward_file" (Harbor fallback)
    limit_hit: str | None = None
    # Harbor tasks: the named rewards as Harbor would record them (reward_file.RewardReading.to_dict()).
    reading: dict | None = None

    @property
    def hacked(self) -> bool:
        return bool(self.findings)

    def to_dict(self) -> dict:
        return asdict(self)


class _Toolchain:
    """A per-run /tests copy, /logs and read-only /verifier, owned by the session's uid."""

    def __init__(self, session: BwrapSession, task_dir: Path):
        self.root = Path(tempfile.mkdtemp(prefix="tf-verify-", dir=session.workdir))
        self.tests = self.root / "tests"
        shutil.copytree(Path(task_dir) / "tests", self.tests)
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

    def binds(self) -> list[Bind]:
        # /tests is writable so the grader can delete what it has read; /logs for Harbor's test.sh.
        return [Bind(self.tests, "/tests", writable=True), Bind(self.tool, "/verifier"),
                Bind(self.logs, "/logs", writable=True)]

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def expected_tests(task_dir: Path) -> list[str] | None:
    """The collected test ids recorded for a task from its pristine tests, when recorded."""
    from termforge.io import read_json

    path = Path(task_dir) / "private" / "collected_tests.json"
    if not path.is_file():
        return None
    data = read_json(path)
    return list(data.get("test_final_state.py", [])) or None


def _run_grader(session: BwrapSession, tc: _Toolchain, argv: list[str] | None, command: str, timeout: float,
                cwd: str, env: dict | None) -> tuple[ExecResult, dict | None, list[str]]:
    channel = GraderChannel()
    try:
        res = session.exec(command, timeout=timeout, env={**VERIFIER_ENV, **(env or {}), **channel.env},
                           cwd=cwd, binds=tc.binds(), keep_home=False, argv=argv, pass_fds=channel.pass_fds)
    finally:
        verdict = channel.finish()
    if verdict is None and channel.private is not None:
        # The grader started (it took its private socket) but never reported: the processes the
        # tests started killed or stalled it. That is the agent's failure, graded 0.
        verdict = {"collected": [], "outcomes": {}, "exitstatus": -1, "leftover": [], "died": True}
    return res, verdict, channel.findings


def _logs_findings(logs: Path, allowed: tuple[str, ...]) -> list[str]:
    """What the tests' processes did under /logs (looked at with lstat only)."""
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
    for dirpath, dirnames, filenames in os.walk(logs):
        for name in dirnames + filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), logs)
            if rel == "verifier" or (os.path.dirname(rel) == "verifier" and name in allowed):
                continue
            unexpected.append("/logs/" + rel)
    if unexpected:
        shown = ", ".join(sorted(unexpected)[:5]) + (" ..." if len(unexpected) > 5 else "")
        findings.append(f"unexpected files under /logs: {shown}")
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
        if verdict.get("died"):
            tests_ran, reason = True, "the grader started but sent no verdict (killed by the tests' processes?)"
        elif not tests_ran:
            reason = "the grader collected no tests"
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


def run_test_file(session: BwrapSession, task_dir: Path, test_file: str, timeout: float = 300,
                  expected: list[str] | None = None) -> Verdict:
    """Run one pytest file of the task through the grader; reward 1 iff all its tests pass."""
    tc = _Toolchain(session, task_dir)
    try:
        res, verdict, findings = _run_grader(session, tc, [*GRADER_ARGV, f"/tests/{test_file}"], "", timeout,
                                             "/tests", None)
        findings += _logs_findings(tc.logs, ())
        return _grade(res, verdict, findings, expected)
    finally:
        tc.cleanup()


def run_verifier(session: BwrapSession, task_dir: Path, timeout: float = 300, *, cwd: str = "/tests",
                 env: dict | None = None, harbor: bool = False, expected: list[str] | None = None,
                 reward_file_proof: bool | None = None) -> Verdict:
    """Grade a finished episode.

    termforge tasks: the grader runs tests/test_final_state.py as the sandbox's first process and
    its verdict is the reward (`expected`, else private/collected_tests.json, is the recorded set
    of test ids). Harbor / Terminal-Bench tasks (`harbor=True`): tests/test.sh runs from the
    image's WORKDIR (`cwd`) with extra variables (`env`), as Harbor does; when it runs the grader
    (/verifier/run-tests) the grader's verdict is the reward, otherwise the reward file it wrote."""
    harbor = harbor or bool(reward_file_proof)
    if expected is None and not harbor:
        expected = expected_tests(task_dir)
    tc = _Toolchain(session, task_dir)
    try:
        if harbor:
            res, verdict, findings = _run_grader(session, tc, None, "/bin/bash --noprofile --norc /tests/test.sh",
                                                 timeout, cwd, env)
            reading = read_reward(tc.logs / "verifier")
            findings += _logs_findings(tc.logs, HARBOR_LOG_FILES)
            if verdict is not None and reading.reward is not None:
                grader_reward = 1.0 if verdict["collected"] and all(
                    verdict["outcomes"].get(n) == "passed" for n in verdict["collected"]) else 0.0
                if reading.reward != grader_reward:
                    findings.append(f"reward file says {reading.reward:g}, the grader {grader_reward:g}")
            why = (f"tests/test.sh wrote reward {reading.reward:g} to {reading.source} (no grader ran: unverified)"
                   if reading.reward is not None else f"tests/test.sh wrote no numeric reward: {reading.error}")
            graded = _grade(res, verdict, findings, expected, fallback=(reading.reward, why))
            graded.reading = _harbor_reading(graded, reading)
            return graded
        res, verdict, findings = _run_grader(session, tc, [*GRADER_ARGV, "/tests/test_final_state.py"], "",
                                             timeout, cwd, env)
        findings += _logs_findings(tc.logs, ())
        return _grade(res, verdict, findings, expected)
    finally:
        tc.cleanup()


def _harbor_reading(graded: Verdict, reading: RewardReading) -> dict:
    """The rewards a Harbor trial records. Graded by the grader: its verdict, keeping the reward
    files' named rewards when they agree with it; graded by the reward file: Harbor's reading of
    it (no reward at all when Harbor would raise a parse error)."""
    if graded.graded_by == "grader" and graded.tests_ran and not graded.timed_out:
        if reading.rewards is not None and reading.reward == graded.reward:
            return reading.to_dict()
        return RewardReading({"reward": graded.reward}, "grader").to_dict()
    return reading.to_dict()


def run_oracle(session: BwrapSession, task_dir: Path, timeout: float = 300) -> ExecResult:
    """Run solution/solve.sh as the agent would (from /app), with the solution bound read-only."""
    # A copy inside the session's own tree: the sandbox's uid need not be able to read task_dir.
    copy = Path(tempfile.mkdtemp(prefix="tf-solution-", dir=session.workdir))
    try:
        shutil.copytree(Path(task_dir) / "solution", copy / "solution")
        chown_tree(copy, getattr(session, "uid", None))
        return session.exec("/bin/bash --noprofile --norc /solution/solve.sh", timeout=timeout,
                            binds=[Bind(copy / "solution", "/solution")])
    finally:
        shutil.rmtree(copy, ignore_errors=True)
