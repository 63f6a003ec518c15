"""Healthchecks, natively, as Harbor runs them (harbor/models/task/config.py HealthcheckConfig;
harbor/environments/base.py run_healthcheck: the command until it exits 0, start-period failures
not counted, then `retries` consecutive failures fail it): the environment's before the agent
(harbor/trial/trial.py _prepare), a step's after its workdir and setup.sh (harbor/trial/
multi_step.py _prepare_step). A failed one is a HealthcheckError, an environment error, never a score."""

import shutil
from pathlib import Path

import pytest

from conftest import needs_bwrap
from termforge.evals.harbor_tasks import HarborTaskError, load_harbor_task
from termforge.evals.tbench import noop_agent, oracle_agent, run_native
from termforge.io import read_json

MULTI_STEP = Path(__file__).parent / "data" / "harbor_conformance" / "multi-step"
# Exits 0 from its third run on: a service that needs a moment to come up.
SLOW_START = "n=$(cat /app/hc-count 2>/dev/null || echo 0); echo $((n+1)) > /app/hc-count; [ $n -ge 2 ]"


def _task(tmp: Path, env_healthcheck: str = "", step_healthcheck: str = "") -> Path:
    d = tmp / "multi-step"
    shutil.copytree(MULTI_STEP, d)
    toml = (d / "task.toml").read_text()
    toml = toml.replace('network_mode = "no-network"\n', 'network_mode = "no-network"\n' + env_healthcheck)
    toml = toml.replace('[steps.verifier]', step_healthcheck + '[steps.verifier]')
    (d / "task.toml").write_text(toml)
    return d


def _run(task_dir: Path, tmp: Path, agent=oracle_agent):
    (trial,) = run_native([load_harbor_task(task_dir)], agent, 1, tmp / "images", tmp / "job").trials
    return trial


@needs_bwrap
def test_healthchecks_that_pass_let_the_task_score_as_without_them(tmp_path):
    # The environment's needs the start period (its first two runs fail, and retries = 1); the
    # step's holds only once the step's setup.sh has run.
    task_dir = _task(tmp_path,
                     "[environment.healthcheck]\n"
                     f"command = '{SLOW_START}'\nstart_period_sec = 60\nstart_interval_sec = 0\nretries = 1\n",
                     "[steps.healthcheck]\ncommand = 'test -f /app/check-ready'\ninterval_sec = 0\n")
    task = load_harbor_task(task_dir)
    assert task.healthcheck.retries == 1 and task.steps[1].healthcheck.command == "test -f /app/check-ready"
    assert task.unsupported == []
    oracle = _run(task_dir, tmp_path / "oracle")
    assert oracle.reward == 1.0, oracle
    noop = _run(task_dir, tmp_path / "noop", noop_agent)
    assert noop.reward == 0.0, noop


@needs_bwrap
@pytest.mark.parametrize("where", ["environment", "step"])
def test_a_failing_healthcheck_is_an_environment_error_not_a_score(tmp_path, where):
    env_hc = ("[environment.healthcheck]\ncommand = 'exit 3'\ninterval_sec = 0\nretries = 2\n"
              if where == "environment" else "")
    # Without a start period the slow starter fails at once with retries = 1.
    step_hc = (f"[steps.healthcheck]\ncommand = '{SLOW_START}'\nretries = 1\n" if where == "step" else "")
    trial = _run(_task(tmp_path, env_hc, step_hc), tmp_path)
    assert trial.reward is None and trial.error_kind == "environment", trial
    result = read_json(tmp_path / "job" / trial.trial_name / "result.json")
    if where == "environment":
        exc, retries, command = result["exception_info"], 2, "exit 3"
        assert not result.get("step_results") and result["verifier_result"] is None  # no agent, no verifier
    else:
        # The first step ran and scored; the second stops before its agent.
        first, second = result["step_results"]
        assert first["verifier_result"] == {"rewards": {"reward": 1.0}}
        assert second["agent_execution"] is None and second["verifier_result"] is None
        exc, retries, command = second["exception_info"], 1, SLOW_START
    assert exc["exception_type"] == "HealthcheckError"
    assert exc["exception_message"] == f"Healthcheck failed after {retries} consecutive retries: {command}"


@pytest.mark.parametrize("table, message", [
    ("[environment.healthcheck]\ninterval_sec = 1\n", "needs a command"),
    ("[environment.healthcheck]\ncommand = 'true'\nretries = 0\n", "retries must be a whole number of at least 1"),
    ("[environment.healthcheck]\ncommand = 'true'\ntimeout_sec = -1\n", "timeout_sec must be a number of seconds"),
    ("[environment.healthcheck]\ncommand = 'true'\nevery = 3\n", "unknown keys ['every']"),
])
def test_a_malformed_healthcheck_names_the_field(tmp_path, table, message):
    with pytest.raises(HarborTaskError, match=r"\[environment.healthcheck\]") as err:
        load_harbor_task(_task(tmp_path, table))
    assert message in str(err.value)
