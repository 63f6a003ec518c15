"""Terminal-Bench evaluation: Harbor-format tasks run natively (bwrap) or through the `harbor` CLI.

Native runner. For every task x attempt: a fresh session over the task's built layer, the agent
acts in it, the agent stops, then a clean verifier sandbox runs tests/test.sh
(termforge.grading.verifier.run_verifier). When test.sh runs the grader (/verifier/run-tests, as every
tb-mini task does) the grader's own verdict, sent over its private channel, is the reward;
otherwise the host reads /logs/verifier/reward.json or reward.txt with Harbor's rules and nothing
followed (termforge.grading.reward_file), and the trial is marked graded by the reward file; multi-step
tasks run step by step. Each trial writes a result.json shaped like Harbor's TrialResult
(task_name, trial_name, verifier_result.rewards, reward_valid, exception_info, step_results,
agent_info, agent_result token counts, started_at/finished_at per phase), and both runners'
trials are judged by Harbor's error policy (termforge.evals.error_policy), so native and Harbor
jobs aggregate the same way.

An agent is any callable `agent(session, task) -> dict | None` that acts through the session
(`session.exec(command, timeout=...)`, copy_in/copy_out). The dict it returns is recorded; the keys
name, version, model_name, model_provider, n_input_tokens, n_cache_tokens, n_output_tokens and
cost_usd fill Harbor's agent_info / agent_result, the rest goes to agent_result.metadata. An agent
raises AgentInfraError when its own infrastructure failed (a model server down): that trial is an
error, not a 0. Any other exception is the agent's failure: it is recorded and the verifier still
grades the environment as the agent left it.

Outcomes: a trial is *scored* when it has a valid reward (Harbor's reward_valid: rewards present
and no recorded exception that voids them); otherwise it is an error, and an error of the
environment (a build the bwrap runtime cannot do, a session that cannot start) is counted apart
from the others. Errors never count as reward 0 or 1: mean reward and pass@k are
over scored trials only, and the counts of errors are reported beside them.

Harbor runner. `harbor_command` builds the command line of Harbor's `harbor run` (an alias of
`harbor jobs start`); the flags, as documented for the harbor CLI:
    -p/--path PATH         a local task or dataset directory (or -d/--dataset NAME@VERSION, e.g.
                           terminal-bench@2.0, from the Harbor registry)
    -a/--agent NAME        agent (oracle, claude-code, terminus-2, ...; default oracle)
    -m/--model NAME        model as provider/name (e.g. anthropic/claude-opus-4-1)
    -e/--env NAME          environment: docker (default), daytona, modal, e2b, runloop
    -n/--n-concurrent N    trials run at once
    -k/--n-attempts K      attempts per task
    -o/--jobs-dir DIR      where jobs are written (default ~/.cache/harbor/jobs, older versions ./jobs)
    --job-name NAME        the job's directory name (default: a timestamp)
Harbor writes <jobs-dir>/<job-name>/config.json and result.json (JobResult: id, started_at,
finished_at, n_total_trials, stats.evals["<agent>__<model>__<dataset>"] with n_trials, n_errors,
metrics, reward_stats, exception_stats) and one directory per trial, <task>__<suffix>/, holding
result.json (TrialResult) and verifier/reward.txt. `parse_harbor_job` reads those into the same
table as the native runner.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from termforge.errors import TermforgeError
from termforge.evals.error_policy import is_environment_error, reward_valid
from termforge.evals.harbor_tasks import (NATIVE_MEMORY_MB, BrokenTask, HarborSession, HarborStep, HarborTask,
                                          HarborTaskError, NativeOptions,
                                          build_harbor_image, resolve_env, verifier_hosts)
from termforge.io import atomic_write_json, atomic_write_text, read_json
from termforge.metrics import pass_at_k
from termforge.grading.reward_file import DEFAULT_REWARD_RANGE, HEADLINE_KEY, RewardReading
from termforge.runtime import trees
from termforge.runtime.base import Bind, BuildResult, ExecResult, Limits
from termforge.runtime.bwrap import SANDBOX_PATH, chown_tree, tree_digest

Agent = Callable[[HarborSession, HarborTask], "dict | None"]

SUCCESS_REWARD = 1.0
ENVIRONMENT_ERROR = "environment"
OTHER_ERROR = "error"
AGENT_INFO_KEYS = ("name", "version", "model_name", "model_provider")
AGENT_RESULT_KEYS = ("n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd")


class AgentInfraError(TermforgeError):
    """Raised by an agent whose infrastructure failed: the trial counts as an error, never a 0."""


class AgentDeadline(Exception):
    """Raised to an agent that asks for anything after its deadline (not a TermforgeError, so an
    agent's handler for its own failures does not take it for one)."""


def _deadline_hit(exc: BaseException | None) -> bool:
    """Whether `exc` is, or was raised while handling, an AgentDeadline."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, AgentDeadline):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class AgentView:
    """The session as the agent sees it, with Harbor's agent deadline (harbor/trial/trial.py: the
    agent runs under asyncio.wait_for(..., timeout=[agent] timeout_sec), is cancelled there, and the
    verifier grades what is there then). Every command the agent starts ends by the deadline at the
    latest (its timeout is cut to the time left); at the deadline the runner calls expire(), which
    kills the agent's shells and refuses whatever the agent asks for from then on (AgentDeadline),
    so nothing it does after the deadline reaches what the verifier grades. Other attributes are the
    session's."""

    def __init__(self, session, deadline: float):
        self._session = session
        self._deadline = deadline
        self._expired = False
        self._lock = threading.Condition()
        self._inflight = 0
        self._shells: list = []

    def __getattr__(self, name):
        return getattr(self._session, name)

    def _begin(self, timeout: float | None) -> float:
        """Admit one call: the timeout it may run for; AgentDeadline once the time is up."""
        with self._lock:
            left = self._deadline - time.monotonic()
            if self._expired or left <= 0:
                raise AgentDeadline("the agent's time is up: nothing more runs for it")
            self._inflight += 1
        return min(timeout or self._session.limits.wall_sec, left)

    def _end(self) -> None:
        with self._lock:
            self._inflight -= 1
            self._lock.notify_all()

    def _call(self, fn, timeout: float | None, *args, **kwargs):
        left = self._begin(timeout)
        try:
            return fn(*args, left, **kwargs)
        finally:
            self._end()

    def exec(self, command: str, timeout: float | None = None, **kwargs) -> ExecResult:
        return self._call(lambda t: self._session.exec(command, timeout=t, **kwargs), timeout)

    def open_shell(self, env: dict | None = None):
        self._begin(None)
        try:
            shell = self._session.open_shell(env=env)
            self._shells.append(shell)
        finally:
            self._end()
        return _DeadlineShell(shell, self)

    def copy_in(self, src, dst: str) -> None:
        return self._call(lambda _: self._session.copy_in(src, dst), None)

    def copy_out(self, src: str, dst) -> None:
        return self._call(lambda _: self._session.copy_out(src, dst), None)

    def expire(self, wait: float = 60.0) -> None:
        """The deadline has passed: refuse what comes next, kill the shells now, and wait for the
        calls already running (each ends by the deadline)."""
        with self._lock:
            self._expired = True
        for shell in self._shells:
            proc = getattr(shell, "proc", None)
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        end = time.monotonic() + wait
        with self._lock:
            while self._inflight and time.monotonic() < end:
                self._lock.wait(max(0.0, end - time.monotonic()))


class _DeadlineShell:
    """An agent's persistent shell whose commands end by the agent's deadline."""

    def __init__(self, shell, view: AgentView):
        self._shell, self._view = shell, view

    def __getattr__(self, name):
        return getattr(self._shell, name)

    def run(self, command: str, timeout: float) -> ExecResult:
        return self._view._call(lambda t: self._shell.run(command, t), timeout)

    def close(self) -> None:
        self._shell.close()


# -- agents ---------------------------------------------------------------------------------------

def oracle_agent(session: HarborSession, task: HarborTask) -> dict:
    """Run solution/solve.sh (or a step's own) as Harbor's oracle agent does (harbor/agents/
    oracle.py OracleAgent.run): the solution directory uploaded to /solution, solve.sh made
    executable and run by its path (so by its shebang: harbor/utils/scripts.py
    build_execution_command) from the working directory, with DEBIAN_FRONTEND=noninteractive and
    [solution].env over it.

    The upload is a copy made by the host, which reads the dataset wherever it lies (under /root,
    written with umask 077) even where the sandbox's uid could not; a solution the host cannot read
    is an AgentInfraError: the control row is then an infrastructure error, never a valid 0."""
    solution_dir = task.solution_dir or task.path / "solution"
    if task.solve_sh is None:
        raise AgentInfraError(f"task {task.name}: the oracle needs {solution_dir.name}/solve.sh, which this task lacks")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    if task.solution_env:
        # Harbor's oracle runs solve.sh with [solution].env (harbor/models/task/config.py SolutionConfig).
        try:
            env.update(resolve_env(task.solution_env, f"task {task.name} [solution] env"))
        except HarborTaskError as exc:
            raise AgentInfraError(str(exc)) from None
    stage = Path(tempfile.mkdtemp(prefix="tf-solution-", dir=session.workdir))
    try:
        copy = stage / "solution"
        try:
            problems = trees.copy_tree(solution_dir, copy)
        except OSError as exc:
            problems = [f"{type(exc).__name__}: {exc}"]
        solve = copy / "solve.sh"
        if not problems and not (solve.is_file() and not solve.is_symlink()):
            problems = ["solve.sh did not come through the copy"]
        if problems:
            raise AgentInfraError(f"task {task.name}: the runner cannot read the task's solution {solution_dir}: "
                                  f"{problems[0]}")
        solve.chmod(solve.stat().st_mode | 0o555)
        chown_tree(stage, getattr(session, "uid", None))
        res = session.exec("/solution/solve.sh", timeout=task.agent_timeout_sec, env=env,
                           binds=[Bind(copy, "/solution")])
    finally:
        trees.remove_tree(stage)
    return {"name": "oracle", "exit_code": res.exit_code, "timed_out": res.timed_out,
            "duration_sec": round(res.duration_sec, 3), "output_tail": res.tail(2000)}


oracle_agent.agent_name = "oracle"


def noop_agent(session: HarborSession, task: HarborTask) -> dict:
    """Does nothing: every task must score 0 with it."""
    return {"name": "noop"}


noop_agent.agent_name = "noop"


def agent_display_name(agent: Agent) -> str:
    return getattr(agent, "agent_name", None) or getattr(agent, "__name__", None) or type(agent).__name__


# -- records and aggregation -----------------------------------------------------------------------

@dataclass
class TrialRecord:
    """One trial, normalised from a Harbor-format result.json (native or Harbor's own)."""

    task_name: str
    trial_name: str
    reward: float | None
    error_kind: str | None
    exception_type: str | None = None
    exception_message: str | None = None
    n_input_tokens: int | None = None
    n_output_tokens: int | None = None
    durations_sec: dict = field(default_factory=dict)
    rewards: dict | None = None  # every named reward of a valid trial (reward.json may hold several)

    @property
    def scored(self) -> bool:
        return self.rewards is not None or self.reward is not None


@dataclass
class EvalResults:
    """Trials plus their aggregate (mean reward, pass@k, per-task table, error counts)."""

    trials: list[TrialRecord]
    summary: dict
    job_dir: Path | None = None

    def table(self) -> str:
        return format_table(self.summary)


def _parse_time(value) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _duration(phase) -> float | None:
    if not isinstance(phase, dict):
        return None
    start, end = _parse_time(phase.get("started_at")), _parse_time(phase.get("finished_at"))
    return round((end - start).total_seconds(), 3) if start and end else None


def trial_record(result: dict, source: str = "result.json") -> TrialRecord:
    """Normalise a Harbor TrialResult dict: scored iff the verifier produced a reward."""
    for key in ("task_name", "trial_name"):
        if not isinstance(result.get(key), str):
            raise TermforgeError(f"{source}: trial result has no {key}")
    rewards = (result.get("verifier_result") or {}).get("rewards")
    # A JSON boolean is a reward of 1.0 / 0.0, as Harbor's VerifierResult (dict[str, float | int],
    # pydantic's lax mode) records it.
    if not (isinstance(rewards, dict) and rewards and all(
            isinstance(v, (int, float)) and math.isfinite(v) for v in rewards.values())):
        rewards = None
    exc = result.get("exception_info") or None
    exc_type = exc.get("exception_type") if isinstance(exc, dict) else (str(exc) if exc else None)
    exc_msg = exc.get("exception_message") if isinstance(exc, dict) else None
    # Harbor records handled failures of multi-step trials on the steps (TrialResult.recorded_exceptions).
    step_excs = [s.get("exception_info") for s in result.get("step_results") or [] if isinstance(s, dict)]
    exc_types = [t for t in [exc_type, *(e.get("exception_type") for e in step_excs if isinstance(e, dict))] if t]
    valid = result["reward_valid"] if isinstance(result.get("reward_valid"), bool) else reward_valid(rewards, exc_types)
    if rewards is None:
        valid = False
    reward = None
    if valid:
        rewards = {str(k): float(v) for k, v in rewards.items()}
        reward = RewardReading(rewards).reward
    else:
        rewards = None
    error_kind = None
    if not valid:
        tf_kind = (result.get("termforge") or {}).get("error_kind")
        env_like = any(is_environment_error(t, exc_msg) for t in exc_types)
        error_kind = tf_kind or (ENVIRONMENT_ERROR if env_like else OTHER_ERROR)
    agent_result = result.get("agent_result") or {}
    durations = {phase: d for phase in ("environment_setup", "agent_setup", "agent_execution", "verifier")
                 if (d := _duration(result.get(phase))) is not None}
    return TrialRecord(result["task_name"], result["trial_name"], reward, error_kind, exc_type, exc_msg,
                       agent_result.get("n_input_tokens"), agent_result.get("n_output_tokens"), durations, rewards)


def mean_by_key(trials: list[TrialRecord]) -> dict:
    """Harbor's Mean metric over the valid trials (harbor/metrics/mean.py and metrics/base.py): one
    reward key gives {"mean": m}; several give each key's mean, a trial missing a key counting 0."""
    rows = [t.rewards for t in trials if t.rewards is not None]
    if not rows:
        return {}
    keys = sorted({k for r in rows for k in r})
    if len(keys) <= 1:
        return {"mean": sum(next(iter(r.values()), 0) for r in rows) / len(rows)}
    return {k: sum(r.get(k, 0) for r in rows) / len(rows) for k in keys}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def summarize(trials: list[TrialRecord], k: int | None = None, success_reward: float = SUCCESS_REWARD) -> dict:
    """Mean reward and pass@1..k over scored trials, per task and overall; errors counted apart.

    A task's pass@j is the unbiased estimator over its n scored attempts (c of them with reward >=
    success_reward); it is undefined (None) when n < j, and the overall pass@j is the mean over the
    tasks where it is defined (their number is reported as n_tasks_pass_at_k). Where Harbor reports
    no pass@k (harbor/utils/pass_at_k.py _compute_pass_at_k_for_trials: some valid trial has several
    named rewards, or one other than 0 or 1) none is reported here either: every pass@j is None and
    `pass_at_k_none` says why. `pass_at_k_harbor` is Harbor's own figure (its k values)."""
    no_pass_at_k = harbor_pass_at_k_problem(trials)
    by_task: dict[str, list[TrialRecord]] = {}
    for t in sorted(trials, key=lambda t: (t.task_name, t.trial_name)):
        by_task.setdefault(t.task_name, []).append(t)
    k = k or max((len(v) for v in by_task.values()), default=1)
    per_task = []
    for name, rows in by_task.items():
        scored = [r for r in rows if r.scored]
        n, c = len(scored), sum(1 for r in scored if r.reward is not None and r.reward >= success_reward)
        per_task.append({
            "task_name": name,
            "n_trials": len(rows),
            "n_scored": n,
            "n_passed": c,
            "n_errors": sum(1 for r in rows if not r.scored),
            "n_environment_errors": sum(1 for r in rows if r.error_kind == ENVIRONMENT_ERROR),
            "mean_reward": _mean([r.reward for r in scored if r.reward is not None]),
            "pass_at_k": {str(j): (pass_at_k(n, c, j) if n >= j and not no_pass_at_k else None)
                          for j in range(1, k + 1)},
            "errors": sorted({f"{r.exception_type}: {r.exception_message}" for r in rows if not r.scored}),
        })
    scored_all = [t for t in trials if t.scored]
    pass_overall, counted = {}, {}
    for j in range(1, k + 1):
        values = [p["pass_at_k"][str(j)] for p in per_task if p["pass_at_k"][str(j)] is not None]
        pass_overall[str(j)] = _mean(values)
        counted[str(j)] = len(values)
    return {
        "k": k,
        "n_tasks": len(by_task),
        "n_trials": len(trials),
        "n_scored": len(scored_all),
        "n_errors": len(trials) - len(scored_all),
        "n_environment_errors": sum(1 for t in trials if t.error_kind == ENVIRONMENT_ERROR),
        "mean_reward": _mean([t.reward for t in scored_all if t.reward is not None]),
        # Which reward is the headline (mean_reward, pass@k): `reward`, or the only key there is.
        "headline_metric": _headline(scored_all),
        "mean_by_key": mean_by_key(trials),
        "pass_at_k": pass_overall,
        "n_tasks_pass_at_k": counted,
        "pass_at_k_none": no_pass_at_k,
        "pass_at_k_harbor": {str(j): v for j, v in harbor_pass_at_k(trials).items()},
        "n_input_tokens": _sum_or_none(t.n_input_tokens for t in trials),
        "n_output_tokens": _sum_or_none(t.n_output_tokens for t in trials),
        "per_task": per_task,
    }


def harbor_pass_at_k_problem(trials: list[TrialRecord]) -> str | None:
    """Why Harbor reports no pass@k for these trials (harbor/utils/pass_at_k.py
    _compute_pass_at_k_for_trials: each valid trial must have exactly one reward, 0 or 1), or None."""
    for t in sorted(trials, key=lambda t: t.trial_name):
        if t.rewards is None:
            continue
        if len(t.rewards) != 1:
            return f"trial {t.trial_name} has {len(t.rewards)} named rewards"
        value = next(iter(t.rewards.values()))
        if value not in (0, 1):
            return f"trial {t.trial_name} has reward {value:g}, not 0 or 1"
    return None


def harbor_pass_at_k(trials: list[TrialRecord]) -> dict[int, float]:
    """pass@k as Harbor computes it for one agent, model and dataset (harbor/utils/pass_at_k.py):
    none unless harbor_pass_at_k_problem is None; k = 2, 4, 8, ... and 5, 10, 15, ... up to the
    fewest valid trials of any task; each task's unbiased estimate, averaged over the tasks."""
    if harbor_pass_at_k_problem(trials):
        return {}
    successes: dict[str, list[int]] = {}
    for t in trials:
        if t.rewards is not None:
            successes.setdefault(t.task_name, []).append(int(next(iter(t.rewards.values()))))
    if not successes:
        return {}
    fewest = min(len(v) for v in successes.values())
    ks = sorted({2 ** i for i in range(1, fewest.bit_length() + 1) if 2 ** i <= fewest}
                | set(range(5, fewest + 1, 5)))
    return {j: sum(pass_at_k(len(v), sum(v), j) for v in successes.values()) / len(successes) for j in ks}


def _headline(trials: list[TrialRecord]) -> str | None:
    keys = {k for t in trials for k in (t.rewards or {})}
    if not keys or HEADLINE_KEY in keys:
        return HEADLINE_KEY
    return next(iter(keys)) if len(keys) == 1 else None


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(summary: dict) -> str:
    """The per-task table as aligned text, with the overall row last."""
    k = summary["k"]
    cols = ["task", "trials", "scored", "passed", "errors", "env_err", "mean", "pass@1"] + (
        [f"pass@{k}"] if k > 1 else [])
    rows = []
    for p in summary["per_task"]:
        row = [p["task_name"], str(p["n_trials"]), str(p["n_scored"]), str(p["n_passed"]), str(p["n_errors"]),
               str(p["n_environment_errors"]), _fmt(p["mean_reward"]), _fmt(p["pass_at_k"]["1"])]
        rows.append(row + ([_fmt(p["pass_at_k"][str(k)])] if k > 1 else []))
    total = ["ALL", str(summary["n_trials"]), str(summary["n_scored"]),
             str(sum(p["n_passed"] for p in summary["per_task"])), str(summary["n_errors"]),
             str(summary["n_environment_errors"]), _fmt(summary["mean_reward"]), _fmt(summary["pass_at_k"]["1"])]
    rows.append(total + ([_fmt(summary["pass_at_k"][str(k)])] if k > 1 else []))
    widths = [max(len(r[i]) for r in [cols, *rows]) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [cols, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, lines[1])
    for b in summary.get("unloadable_tasks") or []:
        lines.append(f"unloadable: {b['task_name']}: {b['reason']}")
    return "\n".join(lines) + "\n"


# -- native runner ---------------------------------------------------------------------------------

def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _exception_info(exc_type: str, message: str, tb: str = "") -> dict:
    return {"exception_type": exc_type, "exception_message": message, "exception_traceback": tb,
            "occurred_at": _now()}


def _json_safe(obj):
    return json.loads(json.dumps(obj, default=str))


def _agent_blocks(agent_name: str, info: dict) -> tuple[dict, dict | None]:
    info = _json_safe(info or {})
    agent_info = {"name": info.get("name") or agent_name, "version": info.get("version"),
                  "model_info": ({"name": info["model_name"], "provider": info.get("model_provider")}
                                 if info.get("model_name") else None)}
    agent_result = {key: info.get(key) for key in AGENT_RESULT_KEYS}
    agent_result["metadata"] = {k: v for k, v in info.items() if k not in AGENT_INFO_KEYS + AGENT_RESULT_KEYS}
    return agent_info, agent_result


def verifier_path(image_env: dict) -> str:
    """PATH for test.sh: the system directories first, then the image's own additions, so a
    `pytest` or `python3` the agent drops into a directory the image put on PATH (/app/bin)
    cannot stand in for the real one, while the task's own tools are still found."""
    system = SANDBOX_PATH.split(":")
    extra = [p for p in image_env.get("PATH", "").split(":") if p and p not in system]
    return ":".join(system + extra)


def default_limits(task: HarborTask) -> Limits:
    """Per-task limits from task.toml: the agent's timeout as the default command wall clock and
    CPU budget, and the task's memory as the address-space limit."""
    longest = max(task.agent_timeout_sec, task.verifier_timeout_sec)
    memory = task.memory_mb if task.memory_mb is not None else NATIVE_MEMORY_MB
    return Limits(wall_sec=task.agent_timeout_sec, cpu_sec=int(longest), memory_mb=max(memory, 1024))


@dataclass
class _Job:
    name: str
    dir: Path
    agent: Agent
    agent_name: str
    limits: Limits | None
    work_root: Path | None
    dataset: str | None
    options: NativeOptions = field(default_factory=NativeOptions)
    # (task name, tests root) -> recorded_tests(...) of the task's untouched environment.
    recorded: dict = field(default_factory=dict)

    def expected(self, task: HarborTask, step: HarborStep | None = None) -> list[str] | None:
        return expected_from(self.recorded.get((task.name, step.name if step else None)))


def _trial(job: _Job, task: HarborTask, checksum: str, build: BuildResult, attempt: int) -> dict:
    trial_name = f"{task.slug}__{attempt}"
    trial_dir = job.dir / trial_name
    result = {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"termforge:{job.name}:{trial_name}")),
        "task_name": task.name,
        "trial_name": trial_name,
        "trial_uri": trial_dir.resolve().as_uri(),
        "task_id": {"path": str(task.path.resolve())},
        "source": job.dataset,
        "task_checksum": checksum,
        "config": {"agent": job.agent_name, "attempt": attempt, "runner": "native-bwrap"},
        "agent_info": {"name": job.agent_name, "version": None, "model_info": None},
        "agent_result": None,
        "verifier_result": None,
        "exception_info": None,
        "started_at": _now(),
        "finished_at": None,
        "environment_setup": None,
        "agent_setup": None,
        "agent_execution": None,
        "verifier": None,
        "termforge": {"error_kind": None, "attempt": attempt,
                      "build": {"ok": build.ok, "cached": build.cached, "reason": build.reason,
                                "duration_sec": round(build.duration_sec, 3)}},
    }
    tf = result["termforge"]

    def finish() -> dict:
        result["finished_at"] = _now()
        atomic_write_json(trial_dir / "result.json", result)
        return result

    setup = {"started_at": _now(), "finished_at": None}
    result["environment_setup"] = setup
    if not build.ok:
        setup["finished_at"] = _now()
        if build.infra:  # the builder's own failure: the harness's error, as AgentInfraError is
            result["exception_info"] = _exception_info("BuilderInfraError", build.reason)
            tf["error_kind"] = OTHER_ERROR
        else:
            result["exception_info"] = _exception_info("EnvironmentBuildError", build.reason)
            tf["error_kind"] = ENVIRONMENT_ERROR
        return finish()
    limits = job.limits or default_limits(task)
    try:
        # [environment].env is the container's environment: the agent, oracle and verifier see it.
        task_env = resolve_env(task.environment_env, f"task {task.name} [environment] env")
        session = HarborSession(build.image, limits, job.work_root, workdir=task.workdir,
                                netns=job.options.netns_path(), env=task_env)
    except Exception as exc:  # the layer could not be copied: the environment failed, not the agent
        setup["finished_at"] = _now()
        result["exception_info"] = _exception_info("EnvironmentStartError", str(exc), traceback.format_exc())
        tf["error_kind"] = ENVIRONMENT_ERROR
        return finish()
    failed = run_healthcheck(session, task.healthcheck)
    setup["finished_at"] = _now()
    if failed:
        # Harbor's trial raises it while preparing (harbor/trial/trial.py _prepare): no agent, no verifier.
        session.stop()
        result["exception_info"] = _exception_info("HealthcheckError", failed)
        tf["error_kind"] = ENVIRONMENT_ERROR
        return finish()
    try:
        if task.steps:
            _run_steps(job, task, session, result, trial_dir)
        else:
            if _agent_phase(job, session, task, result, result):
                _verifier_phase(session, task, [task.path / "tests"], task.verifier_timeout_sec, [task.verifier_env],
                                result, trial_dir, tf, job.expected(task))
            else:
                tf["error_kind"] = OTHER_ERROR
        types = [e["exception_type"] for e in [result["exception_info"]] + [
            sr.get("exception_info") for sr in result.get("step_results") or []] if e]
        result["reward_valid"] = reward_valid((result["verifier_result"] or {}).get("rewards"), types)
        return finish()
    finally:
        session.stop()


def _agent_phase(job: _Job, session: HarborSession, view: HarborTask, target: dict, trial: dict) -> bool:
    """Run the agent on `view` (the task, or one step of it) until it returns or its deadline
    (AgentView: at the deadline it is cut off and the trial graded on what is there, with Harbor's
    AgentTimeoutError); False when the agent's own infrastructure failed (AgentInfraError: nothing
    to grade)."""
    execution = {"started_at": _now(), "finished_at": None}
    target["agent_execution"] = execution
    timeout = view.agent_timeout_sec
    agent_view = AgentView(session, time.monotonic() + timeout)
    box: dict = {}

    def run() -> None:
        try:
            box["info"] = job.agent(agent_view, view) or {}
        except BaseException as exc:  # noqa: BLE001 - recorded below, as Harbor records it
            box["exc"], box["tb"] = exc, traceback.format_exc()

    # A Python thread cannot be cancelled as Harbor cancels its agent's task: at the deadline the
    # view refuses the agent everything and kills its shells; the thread is left to end on its own.
    thread = threading.Thread(target=run, name=f"agent-{view.slug}", daemon=True)
    thread.start()
    thread.join(timeout)
    timed_out = thread.is_alive() or _deadline_hit(box.get("exc"))
    agent_view.expire()
    execution["finished_at"] = _now()
    info, exc = box.get("info") or {}, box.get("exc")
    if isinstance(exc, AgentInfraError) and not timed_out:
        target["exception_info"] = _exception_info("AgentInfraError", str(exc), box.get("tb", ""))
        return False
    if timed_out:
        target["exception_info"] = _exception_info(
            "AgentTimeoutError", f"Agent execution timed out after {timeout:g} seconds")
    elif exc is not None:  # the agent's own failure: still graded on what it left behind
        target["exception_info"] = _exception_info(type(exc).__name__, str(exc), box.get("tb", ""))
    if not isinstance(info, dict):
        info = {"returned": info}
    agent_info, target["agent_result"] = _agent_blocks(job.agent_name, info)
    if trial.get("agent_result") is None or target is trial:
        trial["agent_info"] = agent_info
    return True


def _verifier_phase(session: HarborSession, task: HarborTask, sources: list[Path], timeout: float, env_tables: list,
                    target: dict, out_dir: Path, tf: dict, expected: list[str] | None = None) -> None:
    """Run the verifier for `target` (the trial, or one step): its rewards, or the exception Harbor
    would record; a harness failure marks the trial an error (tf error_kind)."""
    target["verifier"] = phase = {"started_at": _now(), "finished_at": None}
    try:
        env: dict = {}
        for table in env_tables:  # Harbor: the task's [verifier].env, then the step's on top
            env.update(resolve_env(table, f"task {task.name} verifier env"))
    except HarborTaskError as exc:
        phase["finished_at"] = _now()
        target["exception_info"] = _exception_info("VerifierEnvError", str(exc))
        tf["error_kind"] = OTHER_ERROR
        return
    try:
        # A test.sh that fetches its toolchain from a host this sandbox's network does not reach
        # could only score 0: an environment error naming the host instead.
        unreachable = session.unreachable(verifier_hosts(task)) if task.allow_internet else []
    except Exception as exc:  # noqa: BLE001 - the probe itself failed: the harness, not the agent
        unreachable = [f"(the probe failed: {exc})"]
    if unreachable:
        phase["finished_at"] = _now()
        target["exception_info"] = _exception_info(
            "VerifierNetworkError", f"tests/test.sh fetches from {', '.join(unreachable)}, which the verifier's "
            "network does not reach (eval.tbench.network_namespace, or slirp4netns's NAT from this host)")
        tf["error_kind"] = ENVIRONMENT_ERROR
        return
    try:
        verdict = run_harbor_verifier(session, task, env, sources=sources, timeout=timeout, expected=expected)
    except Exception as exc:  # the harness failed to grade: an error, never a reward
        phase["finished_at"] = _now()
        target["exception_info"] = _exception_info("VerifierError", f"{type(exc).__name__}: {exc}",
                                                   traceback.format_exc())
        tf["error_kind"] = OTHER_ERROR
        return
    phase["finished_at"] = _now()
    summary = {k: v for k, v in verdict.items() if k != "output"}
    if "step_name" in target:
        tf.setdefault("step_verdicts", {})[target["step_name"]] = summary
    else:
        tf["verdict"] = summary
    atomic_write_text(out_dir / "verifier" / "test-stdout.txt", verdict["output"])
    reading = verdict["reading"]
    failure = None
    if verdict["timed_out"]:
        # Harbor raises VerifierTimeoutError: graded, but the reward is invalid
        # (harbor/models/trial/error_policy.py), never a 0.
        failure = _exception_info("VerifierTimeoutError", f"tests/test.sh ran past the task's {timeout:g}s")
    elif reading["rewards"] is None:
        failure = _exception_info(_reward_exception(reading["error"]), reading["error"])
    else:
        target["verifier_result"] = {"rewards": reading["rewards"]}
        atomic_write_json(out_dir / "verifier" / "reward.json", reading["rewards"])
    if failure is not None:
        tf.setdefault("verifier_exceptions", []).append(failure)
        target["exception_info"] = target["exception_info"] or failure


def _min_reward_failure(rewards: dict | None, min_reward) -> str | None:
    """Harbor's step gate (harbor/trial/multi_step.py): a number gates `reward`, a table each of
    its keys; a missing reward or key counts as -inf."""
    thresholds = {"reward": min_reward} if isinstance(min_reward, (int, float)) else min_reward
    for key, threshold in thresholds.items():
        actual = (rewards or {}).get(key, float("-inf"))
        if actual < threshold:
            return f"{key}={actual} below min_reward {threshold}"
    return None


def _aggregate_steps(task: HarborTask, step_results: list[dict]) -> dict | None:
    """The trial's verifier_result from its steps (harbor/trial/trial.py): `final` takes the last
    step's verbatim; `mean` (the default) averages each key over the steps that have a verifier
    result, a step missing a key counting 0."""
    if not step_results:
        return None
    if task.multi_step_reward_strategy == "final":
        return step_results[-1]["verifier_result"]
    rows = [(sr["verifier_result"] or {}).get("rewards") or {} for sr in step_results if sr["verifier_result"]]
    keys = {k for r in rows for k in r}
    if not keys:
        return None
    return {"rewards": {k: sum(r.get(k, 0) for r in rows) / len(rows) for k in sorted(keys)}}


def _run_steps(job: _Job, task: HarborTask, session: HarborSession, result: dict, trial_dir: Path) -> None:
    """A multi-step trial as Harbor runs one (harbor/trial/multi_step.py): per step, in order, the
    step's workdir files and setup.sh, the agent on the step's instruction, the step's verifier in
    the same environment; a step that failed without a verifier result, or below its min_reward,
    ends the trial; the trial's reward aggregates the steps'."""
    tf = result["termforge"]
    result["step_results"] = []
    for step in task.steps:
        sr = {"step_name": step.name, "agent_result": None, "verifier_result": None, "exception_info": None,
              "agent_execution": None, "verifier": None}
        result["step_results"].append(sr)
        _prepare_step(session, step, sr)
        if sr["exception_info"] is None:
            view = replace(task, instruction=step.instruction, solution_dir=step.solution_dir, steps=[],
                           solve_sh=(step.solution_dir / "solve.sh") if (step.solution_dir / "solve.sh").is_file()
                           else None, agent_timeout=step.agent_timeout or task.agent_timeout)
            if not _agent_phase(job, session, view, sr, result):
                tf["error_kind"] = OTHER_ERROR
                break
            # The step's own verifier timeout (600 s unless it sets one, never the task's).
            _verifier_phase(session, task, step.test_sources, step.verifier_timeout_sec,
                            [task.verifier_env, step.verifier_env], sr, trial_dir / "steps" / step.name, tf,
                            job.expected(task, step))
            if tf["error_kind"]:
                break
        if sr["exception_info"] and not sr["verifier_result"]:
            tf["stopped_after"] = f"step {step.name} failed: {sr['exception_info']['exception_type']}"
            break
        if step.min_reward is not None:
            why = _min_reward_failure((sr["verifier_result"] or {}).get("rewards"), step.min_reward)
            if why:
                tf["stopped_after"] = f"step {step.name}: {why}"
                break
    if result["step_results"] and result["step_results"][0]["agent_result"] is not None:
        result["agent_result"] = result["step_results"][0]["agent_result"]
    result["verifier_result"] = _aggregate_steps(task, result["step_results"])


def run_healthcheck(session: HarborSession, hc) -> str | None:
    """A healthcheck as Harbor runs it (harbor/environments/base.py run_healthcheck, Docker's
    HEALTHCHECK semantics): the command until it exits 0; failures in the start period do not count,
    after it `retries` consecutive failures fail it. None when healthy, else Harbor's message (or
    why the check could not run at all)."""
    if hc is None:
        return None
    try:
        return _healthcheck_loop(session, hc)
    except Exception as exc:  # noqa: BLE001 - a sandbox that cannot run it: the environment's failure
        return f"the healthcheck could not run ({type(exc).__name__}: {exc}): {hc.command}"


def _healthcheck_loop(session: HarborSession, hc) -> str | None:
    start_period_end = time.monotonic() + hc.start_period_sec
    failures = 0
    while True:
        in_start_period = time.monotonic() < start_period_end
        res = session.exec(hc.command, timeout=hc.timeout_sec)
        if res.exit_code == 0 and not res.timed_out:
            return None
        if in_start_period:
            time.sleep(hc.start_interval_sec)
            continue
        failures += 1
        if failures >= hc.retries:
            return f"Healthcheck failed after {hc.retries} consecutive retries: {hc.command}"
        time.sleep(hc.interval_sec)


def _prepare_step(session: HarborSession, step, sr: dict) -> None:
    """steps/<name>/workdir/ into the working directory, then its setup.sh there (Harbor records
    a failing setup.sh as the step's RuntimeError), then the step's healthcheck (a failing one is
    the step's HealthcheckError: harbor/trial/multi_step.py _prepare_step)."""
    _prepare_step_workdir(session, step, sr)
    if sr["exception_info"] is None:
        failed = run_healthcheck(session, step.healthcheck)
        if failed:
            sr["exception_info"] = _exception_info("HealthcheckError", failed)


def _prepare_step_workdir(session: HarborSession, step, sr: dict) -> None:
    if not step.workdir_dir.is_dir():
        return
    try:
        session.copy_in(step.workdir_dir, session.task_workdir)
        if (step.workdir_dir / "setup.sh").is_file():
            res = session.exec(f"bash {shlex.quote(session.task_workdir.rstrip('/') + '/setup.sh')}")
            if res.exit_code != 0 or res.timed_out:
                sr["exception_info"] = _exception_info(
                    "RuntimeError", f"Step '{step.name}' setup.sh exited with code {res.exit_code}: {res.tail(300)}")
    except Exception as exc:
        sr["exception_info"] = _exception_info(type(exc).__name__, str(exc), traceback.format_exc())


def _reward_exception(error: str | None) -> str:
    """Harbor's exception for a verifier that left no usable reward (harbor/verifier/verifier.py)."""
    if error and error.startswith("no "):
        return "RewardFileNotFoundError"
    if error and error.endswith("is empty"):
        return "RewardFileEmptyError"
    return "VerifierOutputParseError"


def reward_range(task: HarborTask) -> tuple[float, float]:
    """The rewards termforge scores for a task: [0, 1], or [metadata] reward_range = [lo, hi]."""
    value = task.metadata.get("reward_range")
    if value is None:
        return DEFAULT_REWARD_RANGE
    ok = (isinstance(value, list) and len(value) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
          and value[0] < value[1])
    if not ok:
        raise TermforgeError(f"task {task.name}: task.toml [metadata] reward_range must be [low, high] "
                             f"(finite numbers, low < high), got {value!r}")
    return float(value[0]), float(value[1])


def run_harbor_verifier(session: HarborSession, task: HarborTask, env: dict, *, sources: list[Path] | None = None,
                        timeout: float | None = None, expected: list[str] | None = None,
                        record: bool = False) -> dict:
    """Run tests/test.sh as Harbor's verifier does, in a clean sandbox after the agent stopped
    (fresh /tests and /logs, no inherited variables, the task's [verifier].env, from the image's
    WORKDIR), through termforge's grader (termforge.grading.verifier.run_verifier with harbor=True): a
    test.sh that uses /verifier/run-tests is graded by the grader's own verdict, whose collected
    set must equal `expected` (recorded_tests), any other by the reward files read with Harbor's
    rules. `sources`: the tests/ folders merged into /tests in order (default the task's tests/; a
    multi-step task's shared tests/ and then the step's own, as Harbor uploads them)."""
    from termforge.grading.verifier import run_verifier

    verdict = run_verifier(session, task.path, timeout=timeout or task.verifier_timeout_sec,
                           cwd=session.task_workdir, harbor=True,
                           env={**env, "PATH": verifier_path(session.image_env)}, expected=expected,
                           record=record, reward_range=reward_range(task),
                           tests_dirs=sources or [task.path / "tests"])
    reading = dict(verdict.reading or {"rewards": None, "reward": None, "headline": None, "source": None,
                                       "error": verdict.reason})
    if verdict.limit_hit:
        # The agent's leftovers hit a sandbox limit while the tests ran: a 0, as for our own tasks.
        reading.update(rewards={"reward": 0.0}, reward=0.0, headline="reward", error=None)
    return {"reading": reading, "timed_out": verdict.timed_out, "exit_code": verdict.exit_code,
            "collected": verdict.collected, "passed": verdict.passed, "failed": verdict.failed,
            "reason": verdict.reason, "graded_by": verdict.graded_by, "findings": verdict.findings,
            "collected_ids": verdict.collected_ids, "output": verdict.output}


RECORD_FILE = "recorded_tests.json"


def verifier_targets(task: HarborTask) -> list[tuple[HarborStep | None, list[Path], list[dict]]]:
    """What the verifier runs for a task: (the step or None, the tests/ sources, the env tables)."""
    if not task.steps:
        return [(None, [task.path / "tests"], [task.verifier_env])]
    return [(st, list(st.test_sources), [task.verifier_env, st.verifier_env]) for st in task.steps]


def recorded_tests(task: HarborTask, build: BuildResult, step: HarborStep | None = None, limits: Limits | None = None,
                   work_root: Path | None = None, options: NativeOptions | None = None) -> dict | None:
    """The test set a task's verifier collects on its untouched environment: {"uses_grader": bool,
    "collected": [ids]}, recorded once per image and tests (kept beside the image, like validation's
    recorded set for termforge's own tasks). A trial's grader verdict must collect exactly this set,
    so a test.sh that runs the agent's code first cannot have the grader run on fewer tests; a task
    whose test.sh never asks for the grader gets none, and a grader verdict there is a 0. None when
    it could not be recorded (then a grader verdict cannot be checked: 0)."""
    from termforge.io import stable_hash

    _, sources, tables = next(t for t in verifier_targets(task) if t[0] is step)
    path = build.image.path / RECORD_FILE
    key = stable_hash([build.image.digest, [tree_digest(src) for src in sources]], 24)
    try:
        table = read_json(path) if path.is_file() else {}
    except (OSError, ValueError):
        table = {}
    if isinstance(table.get(key), dict):
        return table[key]
    limits = limits or default_limits(task)
    try:
        env: dict = {}
        for t in tables:
            env.update(resolve_env(t, f"task {task.name} verifier env"))
        session = HarborSession(build.image, limits, work_root, workdir=task.workdir,
                                netns=(options or NativeOptions()).netns_path(),
                                env=resolve_env(task.environment_env, f"task {task.name} [environment] env"))
    except Exception:  # noqa: BLE001 - unrecordable: the trials' grader verdicts then score 0
        return None
    try:
        verdict = run_harbor_verifier(session, task, env, sources=sources, record=True)
    except Exception:  # noqa: BLE001
        return None
    finally:
        session.stop()
    if verdict["timed_out"] or verdict["graded_by"] == "host":
        return None
    entry = {"uses_grader": verdict["graded_by"] == "grader",
             "collected": sorted(verdict["collected_ids"]) if verdict["graded_by"] == "grader" else []}
    table[key] = entry
    atomic_write_json(path, table)
    return entry


def expected_from(entry: dict | None) -> list[str] | None:
    if entry is None:
        return None
    return list(entry["collected"]) if entry.get("uses_grader") else []


def _reusable(trial_dir: Path, agent_name: str, checksum: str) -> dict | None:
    """A finished trial of the same agent on the same task contents (a resumed job)."""
    path = trial_dir / "result.json"
    if not path.exists():
        return None
    try:
        old = read_json(path)
    except (OSError, ValueError):
        return None
    # Errors are not kept: a resumed job retries them (a host package installed since, a model
    # server back up).
    if old.get("task_checksum") == checksum and (old.get("config") or {}).get("agent") == agent_name \
            and old.get("finished_at") and not (old.get("termforge") or {}).get("error_kind"):
        return old
    return None


def run_native(tasks: list[HarborTask], agent: Agent, k: int, images_dir: str | Path, out_dir: str | Path,
               limits: Limits | None = None, *, n_concurrent: int = 1, agent_name: str | None = None,
               dataset: str | None = None, work_root: str | Path | None = None, resume: bool = True,
               broken: Iterable[BrokenTask] = (), options: NativeOptions | None = None) -> EvalResults:
    """Run every task k times with `agent` in bwrap sandboxes, grade each with the clean verifier.

    out_dir becomes a Harbor-style job directory: config.json, result.json (the job, with the
    termforge summary) and <task>__<attempt>/result.json per trial. With resume, trials already
    finished there by the same agent on unchanged tasks are kept instead of re-run. `broken` are
    the dataset's unloadable tasks (load_harbor_dataset): listed in the results with their reasons."""
    if k < 1:
        raise TermforgeError(f"run_native: k must be at least 1, got {k}")
    if n_concurrent < 1:
        raise TermforgeError(f"run_native: n_concurrent must be at least 1, got {n_concurrent}")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise TermforgeError(f"run_native: duplicate task names {dup}")
    for task in tasks:
        reward_range(task)  # a malformed [metadata] reward_range is bad input: said before anything runs
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = agent_name or agent_display_name(agent)
    options = options or NativeOptions()
    options.netns_path()  # a missing namespace is bad input: said before anything runs
    job = _Job(out_dir.name, out_dir, agent, name, limits, Path(work_root) if work_root else None, dataset,
               options)
    started = _now()
    atomic_write_json(out_dir / "config.json", {
        "job_name": job.name, "runner": "native-bwrap", "agent": name, "n_attempts": k,
        "n_concurrent": n_concurrent, "dataset": dataset, "tasks": [str(t.path) for t in tasks],
        "limits": asdict(limits) if limits else "per task (task.toml)"})
    checksums = {t.name: tree_digest(t.path) for t in tasks}

    with ThreadPoolExecutor(max_workers=n_concurrent) as pool:
        builds = dict(zip(names, pool.map(lambda t: build_harbor_image(t, images_dir, options=options), tasks)))
        todo, done = [], []
        for task in tasks:
            for attempt in range(k):
                old = _reusable(out_dir / f"{task.slug}__{attempt}", name, checksums[task.name]) if resume else None
                (done.append(old) if old else todo.append((task, attempt)))

        def record(task):
            for step, _, _ in verifier_targets(task):
                job.recorded[(task.name, step.name if step else None)] = recorded_tests(
                    task, builds[task.name], step, job.limits, job.work_root, options)

        list(pool.map(record, [t for t in tasks if builds[t.name].ok and any(item[0] is t for item in todo)]))
        lock = threading.Lock()

        def one(item):
            task, attempt = item
            res = _trial(job, task, checksums[task.name], builds[task.name], attempt)
            with lock:
                done.append(res)

        list(pool.map(one, todo))
    results = sorted(done, key=lambda r: (r["task_name"], r["termforge"]["attempt"]))
    trials = [trial_record(r) for r in results]
    summary = summarize(trials, k)
    summary["unloadable_tasks"] = [b.to_dict() for b in broken]
    atomic_write_json(out_dir / "result.json", _job_result(job, started, results, summary, k))
    return EvalResults(trials, summary, out_dir)


def _job_result(job: _Job, started: str, results: list[dict], summary: dict, k: int) -> dict:
    """The job's result.json in Harbor's JobResult shape, with termforge's summary beside it."""
    key = f"{job.agent_name}__{job.dataset or 'adhoc'}"
    reward_stats: dict[str, dict[str, list[str]]] = {}
    exception_stats: dict[str, list[str]] = {}
    for r in results:
        rewards = (r.get("verifier_result") or {}).get("rewards")
        if rewards and r.get("reward_valid", True):
            for name, value in rewards.items():
                reward_stats.setdefault(name, {}).setdefault(str(float(value)), []).append(r["trial_name"])
        if r.get("exception_info"):
            exception_stats.setdefault(r["exception_info"]["exception_type"], []).append(r["trial_name"])
    n_errors = sum(1 for r in results if r.get("exception_info"))
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"termforge:{job.name}")),
        "started_at": started,
        "finished_at": _now(),
        "n_total_trials": len(results),
        "stats": {
            "n_completed_trials": len(results),
            "n_errored_trials": n_errors,
            "evals": {key: {
                "n_trials": summary["n_scored"],
                "n_errors": n_errors,
                "metrics": [summary["mean_by_key"]] if summary["mean_by_key"] else [],
                # Harbor's JobStats pass_at_k: its own k values, none where it reports none.
                "pass_at_k": summary["pass_at_k_harbor"],
                "reward_stats": reward_stats,
                "exception_stats": exception_stats,
            }},
            "n_input_tokens": summary["n_input_tokens"],
            "n_output_tokens": summary["n_output_tokens"],
        },
        "termforge_summary": summary,
    }


# -- control rows --------------------------------------------------------------------------------

CONTROL_AGENTS = {"oracle": "oracle", "noop": "nop"}  # termforge's name -> Harbor's agent name


def control_checks(controls: dict) -> list[str]:
    """What the control rows say about the harness: the oracle must score 1 on every scored task
    and the no-op agent 0, else a policy's number from the same runner is not to be trusted."""
    out = []
    for name, want in (("oracle", 1.0), ("noop", 0.0)):
        summary = controls.get(name)
        if summary is None:
            continue
        for p in summary["per_task"]:
            if p["mean_reward"] is not None and p["mean_reward"] != want:
                out.append(f"{name} scores {p['mean_reward']:g} on {p['task_name']} (expected {want:g})")
    return out


def run_native_controls(tasks: list[HarborTask], images_dir: str | Path, out_dir: str | Path,
                        limits: Limits | None = None, *, broken: Iterable[BrokenTask] = (), dataset: str | None = None,
                        n_concurrent: int = 1, work_root: str | Path | None = None,
                        options: NativeOptions | None = None) -> dict:
    """The oracle and no-op control runs (one attempt each) on the same tasks with the same
    runner, for the control rows of the eval table."""
    out_dir = Path(out_dir)
    return {name: run_native(tasks, agent, 1, images_dir, out_dir / name, limits, n_concurrent=n_concurrent,
                             dataset=dataset, work_root=work_root, broken=broken, options=options).summary
            for name, agent in (("oracle", oracle_agent), ("noop", noop_agent))}


def format_controls(controls: dict) -> str:
    lines = []
    for name, summary in controls.items():
        lines.append(f"control {name}: mean {_fmt(summary['mean_reward'])}, scored {summary['n_scored']}/"
                     f"{summary['n_trials']}, errors {summary['n_errors']} "
                     f"(environment {summary['n_environment_errors']})")
    lines += [f"control check: {w}" for w in control_checks(controls)]
    return "\n".join(lines) + ("\n" if lines else "")


# -- harbor runner ---------------------------------------------------------------------------------

def harbor_command(dataset_or_path: str | Path, agent: str, model: str | None = None, env: str = "docker",
                   n_concurrent: int = 1, k: int = 1, jobs_dir: str | Path | None = None, *,
                   job_name: str | None = None, harbor: str = "harbor",
                   extra_args: Iterable[str] = ()) -> list[str]:
    """`harbor run` for a local task/dataset directory (-p) or a registry dataset NAME@VERSION (-d)."""
    if n_concurrent < 1 or k < 1:
        raise TermforgeError(f"harbor_command: n_concurrent and k must be at least 1 (got {n_concurrent}, {k})")
    target = str(dataset_or_path)
    is_path = isinstance(dataset_or_path, Path) or Path(target).exists() or target.startswith((".", "/", "~")) \
        or ("/" in target and "@" not in target)
    cmd = [harbor, "run", "-p" if is_path else "-d", target, "-a", agent]
    if model:
        cmd += ["-m", model]
    cmd += ["--env", env, "-n", str(n_concurrent), "-k", str(k)]
    if jobs_dir is not None:
        cmd += ["-o", str(jobs_dir)]
    if job_name:
        cmd += ["--job-name", job_name]
    return cmd + list(extra_args)


def run_harbor(dataset_or_path: str | Path, agent: str, model: str | None = None, env: str = "docker",
               n_concurrent: int = 1, k: int = 1, jobs_dir: str | Path = "results/harbor-jobs", *,
               job_name: str | None = None, harbor: str = "harbor", extra_args: Iterable[str] = (),
               timeout: float | None = None) -> EvalResults:
    """Run `harbor run` (needs the harbor CLI and a container engine) and parse the job it wrote."""
    exe = shutil.which(harbor)
    if exe is None:
        raise TermforgeError(
            f"the harbor CLI ({harbor!r}) is not on PATH: install it (`uv tool install harbor` or "
            "`pip install harbor`, plus a container engine such as Docker), or use the native runner")
    job_name = job_name or f"termforge-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"
    jobs_dir = Path(jobs_dir)
    jobs_dir.mkdir(parents=True, exist_ok=True)
    cmd = harbor_command(dataset_or_path, agent, model, env, n_concurrent, k, jobs_dir, job_name=job_name,
                         harbor=exe, extra_args=extra_args)
    log_path = jobs_dir / f"{job_name}.log"
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TermforgeError(f"harbor run timed out after {timeout}s (log: {log_path})") from None
    if proc.returncode != 0:
        raise TermforgeError(f"harbor run exited with code {proc.returncode} (log: {log_path})")
    return parse_harbor_job(jobs_dir / job_name, k=k)


def parse_harbor_job(job_dir: str | Path, k: int | None = None) -> EvalResults:
    """Read a Harbor job directory (its per-trial result.json files) into the evaluation table.

    k defaults to the job's n_attempts (config.json), else to the most attempts any task has.
    Trials the job announced (result.json n_total_trials) but never wrote are counted as missing."""
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        raise TermforgeError(f"Harbor job {job_dir}: not a directory")
    results = []
    for trial_dir in sorted(p for p in job_dir.iterdir() if p.is_dir()):
        path = trial_dir / "result.json"
        if not path.exists():
            continue
        try:
            results.append((path, read_json(path)))
        except (OSError, ValueError) as exc:
            raise TermforgeError(f"Harbor job {job_dir}: cannot read {path}: {exc}") from None
    if not results:
        raise TermforgeError(f"Harbor job {job_dir}: no trial directories with result.json")
    trials = [trial_record(r, str(p)) for p, r in results]
    config = _read_optional(job_dir / "config.json")
    if k is None and isinstance(config.get("n_attempts"), int):
        k = config["n_attempts"]
    summary = summarize(trials, k)
    job = _read_optional(job_dir / "result.json")
    announced = job.get("n_total_trials")
    summary["n_missing_trials"] = max(0, announced - len(trials)) if isinstance(announced, int) else 0
    summary["unloadable_tasks"] = []
    return EvalResults(trials, summary, job_dir)


def _read_optional(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise TermforgeError(f"cannot read {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


__all__ = [
    "Agent", "AgentInfraError", "EvalResults", "TrialRecord", "oracle_agent", "noop_agent", "run_native",
    "summarize", "format_table", "trial_record", "harbor_command", "run_harbor", "parse_harbor_job",
    "default_limits", "run_native_controls", "control_checks", "format_controls", "mean_by_key",
    "run_harbor_verifier",
]
