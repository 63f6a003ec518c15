"""The clean verifier: grading that the agent cannot influence (DESIGN section 4).

After the agent's processes are gone, a fresh sandbox over the same task layer runs the task's
tests with: a fresh environment (no inherited variables), `bash --noprofile --norc`, an empty
home, the tests copied in only now (read-only at /tests), a fresh /logs with no reward file, and
a verifier toolchain at /verifier that the agent never saw. The toolchain runs pytest under
`python3 -I` (no cwd, user site or PYTHON* variables on the path) with a plugin that prints a
per-run token and the number of tests run: a verdict without that proof counts as not run.
"""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from termforge.runtime.base import ExecResult
from termforge.runtime.base import Bind
from termforge.runtime.bwrap import BwrapSession

TEST_SH = """#!/bin/bash
# Harbor verifier entry point: writes 1 to /logs/verifier/reward.txt when the final-state tests
# pass, else 0. Under termforge the clean runner at /verifier/run-tests is used (it proves the
# tests ran); elsewhere (harbor, docker) plain pytest.
mkdir -p /logs/verifier
if [ -x /verifier/run-tests ]; then
  runner=(/verifier/run-tests)
else
  runner=(python3 -m pytest -q -p no:cacheprovider)
fi
if "${runner[@]}" /tests/test_final_state.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

_GRADE_PY = '''
import ctypes
import os
import sys

import pytest

TOKEN = open("/verifier/token").read().strip()
os.unlink("/verifier/token")
# Programs the tests start (the agent's code) must not read the expected values: this process
# becomes non-dumpable (no /proc/<pid>/mem for same-uid processes), and the test files are
# deleted from disk once pytest has imported them.
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
sys.dont_write_bytecode = True  # no __pycache__ copy of the tests (pytest honours this too)


class Proof:
    def __init__(self):
        self.collected = 0
        self.passed = 0
        self.failed = 0

    def pytest_collection_modifyitems(self, session, config, items):
        self.collected = len(items)

    def pytest_collection_finish(self, session):
        for path in {str(item.path) for item in session.items}:
            if path.startswith("/tests/") and os.path.exists(path):
                os.unlink(path)

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed += 1
        elif report.when == "call" and report.passed:
            self.passed += 1

    def pytest_sessionfinish(self, session, exitstatus):
        print(f"\\nTERMFORGE-PROOF {TOKEN} collected={self.collected} passed={self.passed} failed={self.failed}")


proof = Proof()
code = pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir=/tests", *sys.argv[1:]], plugins=[proof])
sys.exit(int(code) if proof.collected > 0 else 5)
'''

_RUN_TESTS = """#!/bin/bash
exec /usr/bin/python3 -I /verifier/grade.py "$@"
"""

PROOF_RE = re.compile(r"TERMFORGE-PROOF (\S+) collected=(\d+) passed=(\d+) failed=(\d+)")
VERIFIER_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}


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

    def to_dict(self) -> dict:
        return asdict(self)


class _Toolchain:
    """A per-run /tests copy, /logs and /verifier directory with a fresh token."""

    def __init__(self, task_dir: Path):
        self.root = Path(tempfile.mkdtemp(prefix="tf-verify-"))
        self.token = secrets.token_hex(12)
        self.tests = self.root / "tests"
        shutil.copytree(Path(task_dir) / "tests", self.tests)
        self.logs = self.root / "logs"
        (self.logs / "verifier").mkdir(parents=True)
        self.tool = self.root / "verifier"
        self.tool.mkdir()
        (self.tool / "grade.py").write_text(_GRADE_PY)
        (self.tool / "token").write_text(self.token)
        run = self.tool / "run-tests"
        run.write_text(_RUN_TESTS)
        run.chmod(0o755)

    def binds(self) -> list[Bind]:
        # Private per-run copies, writable so grade.py can delete what it has read.
        return [Bind(self.tests, "/tests", writable=True), Bind(self.tool, "/verifier", writable=True),
                Bind(self.logs, "/logs", writable=True)]

    def proof(self, res: ExecResult) -> tuple[int, int, int] | None:
        for m in PROOF_RE.finditer(res.stdout):
            if m.group(1) == self.token:
                return int(m.group(2)), int(m.group(3)), int(m.group(4))
        return None

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def run_test_file(session: BwrapSession, task_dir: Path, test_file: str, timeout: float = 300) -> Verdict:
    """Run one pytest file of the task in a clean verifier sandbox; reward 1 iff all its tests pass."""
    tc = _Toolchain(task_dir)
    try:
        res = session.exec(f"/verifier/run-tests /tests/{test_file}", timeout=timeout, env=VERIFIER_ENV,
                           cwd="/tests", binds=tc.binds(), keep_home=False)
        return _verdict(tc, res, reward=1.0 if res.exit_code == 0 else 0.0)
    finally:
        tc.cleanup()


def run_verifier(session: BwrapSession, task_dir: Path, timeout: float = 300, *, cwd: str = "/tests",
                 env: dict | None = None, reward_file_proof: bool = False) -> Verdict:
    """Grade a finished episode: tests/test.sh writes the reward; the proof token must be present.

    Harbor / Terminal-Bench tasks (termforge.evals) pass reward_file_proof=True: their test.sh runs
    pytest itself rather than /verifier/run-tests, so a numeric reward file written by test.sh in
    this clean run is taken as the proof of run when no token is printed. They also run test.sh
    from the image's WORKDIR (cwd) as Harbor does, with extra variables (env) on top of the
    verifier's own."""
    tc = _Toolchain(task_dir)
    try:
        res = session.exec("/bin/bash --noprofile --norc /tests/test.sh", timeout=timeout,
                           env={**VERIFIER_ENV, **(env or {})}, cwd=cwd, binds=tc.binds(), keep_home=False)
        reward_file = tc.logs / "verifier" / "reward.txt"
        text = reward_file.read_text().strip() if reward_file.exists() else ""
        try:
            reward = float(text)
        except ValueError:
            reward = 0.0
        return _verdict(tc, res, reward=reward, reward_text=text, reward_file_proof=reward_file_proof)
    finally:
        tc.cleanup()


def _verdict(tc: _Toolchain, res: ExecResult, reward: float, reward_text: str | None = None,
             reward_file_proof: bool = False) -> Verdict:
    proof = tc.proof(res)
    collected, passed, failed = proof or (0, 0, 0)
    tests_ran = proof is not None and collected > 0
    by_reward_file = proof is None and reward_file_proof and _is_number(reward_text)
    tests_ran = tests_ran or by_reward_file
    if res.timed_out:
        reason = "verifier timed out"
    elif proof is None and reward_file_proof and not tests_ran:
        reason = "tests/test.sh wrote no numeric reward to /logs/verifier/reward.txt"
    elif by_reward_file:
        reason = f"tests/test.sh wrote reward {reward_text} (no proof token: the test.sh ran its own tests)"
    elif not tests_ran:
        reason = "no proof that the verifier's tests ran"
    elif reward_text is not None and reward_text == "":
        reason = "verifier wrote no reward file"
    else:
        reason = f"{passed}/{collected} tests passed"
    if not tests_ran or res.timed_out:
        reward = 0.0
    return Verdict(reward, tests_ran, collected, passed, failed, res.exit_code, res.timed_out,
                   (res.stdout + res.stderr)[-4000:], reason)


def _is_number(text: str | None) -> bool:
    try:
        float(text or "")
    except ValueError:
        return False
    return True


def run_oracle(session: BwrapSession, task_dir: Path, timeout: float = 300) -> ExecResult:
    """Run solution/solve.sh as the agent would (from /app), with the solution bound read-only."""
    return session.exec("/bin/bash --noprofile --norc /solution/solve.sh", timeout=timeout,
                        binds=[Bind(Path(task_dir) / "solution", "/solution")])
