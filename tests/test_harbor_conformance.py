"""Conformance of the native Terminal-Bench runner with Harbor 0.26, on small Harbor tasks written
for the purpose (tests/data/harbor_conformance). Each task exercises one Harbor feature; what
Harbor does with it is stated beside each assertion, with the Harbor source file it comes from.
The dataset holds one deliberately broken task (invalid-config) sorted into its middle."""

import os
import shutil
from pathlib import Path

import pytest

from conftest import needs_bwrap
from termforge.evals.harbor_tasks import (HarborTaskError, load_harbor_dataset, load_harbor_dir,
                                          load_harbor_task, native_blocker, resolve_env, strip_canary)
from termforge.evals.tbench import noop_agent, oracle_agent, run_native, trial_record
from termforge.io import read_json

CONFORMANCE = Path(__file__).parent / "data" / "harbor_conformance"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The whole dataset run once by the oracle and once by the no-op agent."""
    root = tmp_path_factory.mktemp("conformance")
    tasks, broken = load_harbor_dataset(CONFORMANCE)
    out = {}
    for name, agent in (("oracle", oracle_agent), ("noop", noop_agent)):
        res = run_native(tasks, agent, 1, root / "images", root / name, n_concurrent=2, broken=broken)
        out[name] = (res, {t.task_name: t for t in res.trials}, root / name)
    return out


# -- loading ----------------------------------------------------------------------------------------

def test_one_broken_task_does_not_stop_the_dataset():
    tasks, broken = load_harbor_dataset(CONFORMANCE)
    assert [b.name for b in broken] == ["invalid-config"]
    assert "[environment] cpus must be a positive number" in broken[0].reason and "'two'" in broken[0].reason
    # Every other task loads, including those that come after the broken one.
    assert {t.path.name for t in tasks} == {p.name for p in CONFORMANCE.iterdir()} - {"invalid-config"}
    # The strict loader still refuses the dataset, naming the broken task.
    with pytest.raises(HarborTaskError, match="invalid-config"):
        load_harbor_dir(CONFORMANCE)


def test_canary_lines_never_reach_the_agent():
    # harbor/models/task/task.py strip_canary: leading `<!-- ...canary... -->` / `# ...canary...`
    # lines and the blank lines after them are removed from the instruction.
    task = load_harbor_task(CONFORMANCE / "canary")
    assert task.instruction == "Create the file `/app/done`.\n"
    assert strip_canary("# not a marker\nDo it\n") == "# not a marker\nDo it\n"
    assert strip_canary("Do it\n# canary later\n") == "Do it\n# canary later\n"  # only leading lines


def test_network_mode_wins_over_allow_internet_and_defaults_are_harbors():
    # harbor/models/task/config.py: network_mode (default "public") is read first; the deprecated
    # allow_internet maps to public/no-network only when network_mode is not set.
    task = load_harbor_task(CONFORMANCE / "network-mode")
    assert task.network_mode == "no-network" and task.allow_internet is False
    # Harbor's EnvironmentConfig leaves cpus, memory_mb, storage_mb unset and AgentConfig leaves
    # timeout_sec unset; VerifierConfig.timeout_sec and build_timeout_sec default to 600.
    assert (task.cpus, task.memory_mb, task.storage_mb, task.agent_timeout) == (None, None, None, None)
    assert (task.verifier_timeout_sec, task.build_timeout_sec) == (600.0, 600.0)


def test_fractional_cpus_and_task_name():
    # harbor/models/task/config.py: cpus is int | float (a whole float collapses to int).
    assert load_harbor_task(CONFORMANCE / "fractional-cpus").cpus == 0.5
    # harbor/models/task/task.py: Task.name is [task].name when the section exists.
    named = load_harbor_task(CONFORMANCE / "named-task")
    assert named.name == "conformance/named-task" and named.slug == "conformance__named-task"


def test_env_tables_resolve_like_harbor():
    # harbor/utils/env.py resolve_env_vars: exactly ${VAR} or ${VAR:-default} comes from the host.
    task = load_harbor_task(CONFORMANCE / "verifier-env")
    assert task.verifier_env == {"EXPECTED": "${TF_CONFORMANCE_EXPECTED:-42}"}
    assert resolve_env(task.verifier_env, "t", {}) == {"EXPECTED": "42"}
    assert resolve_env(task.verifier_env, "t", {"TF_CONFORMANCE_EXPECTED": "7"}) == {"EXPECTED": "7"}
    assert resolve_env({"A": "x${B}"}, "t", {}) == {"A": "x${B}"}  # not a whole-value template: literal
    with pytest.raises(HarborTaskError, match="TOKEN"):
        resolve_env({"A": "${TOKEN}"}, "t", {})
    assert (task.solution_env, task.environment_env) == ({"ANSWER": "42"}, {"MODE": "strict"})


def test_unsupported_features_are_named_and_steps_are_read():
    assert any("gpus" in r for r in load_harbor_task(CONFORMANCE / "gpu-task").unsupported)
    # harbor/models/task/paths.py: steps/<name>/instruction.md, tests/ (else the shared tests/),
    # solution/ and workdir/; harbor/models/task/config.py StepConfig: min_reward, verifier.env.
    task = load_harbor_task(CONFORMANCE / "multi-step")
    assert not task.unsupported and [st.name for st in task.steps] == ["write", "check"]
    write, check = task.steps
    assert write.instruction == "Create the file `/app/done`.\n" and write.min_reward == 1.0
    assert check.verifier_env == {"MARK": "ok"} and check.verifier_timeout_sec == 30.0
    assert check.tests_root == check.dir and check.solution_dir == check.dir / "solution"
    # StepConfig.verifier is a whole VerifierConfig: 600 s unless the step sets it.
    assert write.verifier_timeout_sec == 600.0
    shared = load_harbor_task(CONFORMANCE / "multi-step-shared-tests")
    make, verify = shared.steps
    assert make.test_sources == [shared.path / "tests", make.dir / "tests"] and make.tests_root == make.dir
    assert verify.test_sources == [shared.path / "tests", verify.dir / "tests"] and verify.tests_root == shared.path
    assert (shared.verifier_timeout_sec, verify.verifier_timeout_sec) == (2.0, 600.0)


# -- running ---------------------------------------------------------------------------------------

@needs_bwrap
def test_rewards_follow_harbors_parsing_and_error_policy(runs):
    _, oracle, oracle_dir = runs["oracle"]
    _, noop, _ = runs["noop"]
    # shebang-scripts: test.sh and solve.sh are Python programs, run by their shebang as Harbor runs
    # them (see its task.toml); legacy-memory: memory = " 1.5g ".
    for name in ("canary", "fractional-cpus", "network-mode", "conformance/named-task", "verifier-env",
                 "shebang-scripts", "legacy-memory", "environment-workdir", "boolean-reward", "large-reward-json",
                 "agent-deadline"):
        assert oracle[name].reward == 1.0, (name, oracle[name])
        assert noop[name].reward == 0.0, (name, noop[name])
    # harbor/verifier/verifier.py: reward.json is read first and may hold several named rewards.
    assert oracle["multi-key-reward"].rewards == {"reward": 1.0, "style": 0.5}
    assert noop["multi-key-reward"].rewards == {"reward": 0.0, "style": 0.5}
    assert oracle["multi-key-reward"].reward == 1.0
    # A JSON boolean is 1.0 / 0.0 (see boolean-reward/task.toml), also when a result is re-read.
    assert (oracle["boolean-reward"].rewards, noop["boolean-reward"].rewards) == ({"reward": 1.0}, {"reward": 0.0})
    harbor_style = {"task_name": "t", "trial_name": "t__0", "verifier_result": {"rewards": {"reward": True}}}
    assert trial_record(harbor_style).reward == 1.0 and trial_record(harbor_style).error_kind is None
    # A non-finite reward is a VerifierOutputParseError: no reward (error_policy.py), never a score.
    for trials in (oracle,):
        t = trials["nonfinite-reward"]
        assert t.reward is None and t.exception_type == "VerifierOutputParseError" and t.error_kind == "error"
    # A verifier timeout is VerifierTimeoutError: graded but has_valid_reward=False, not a 0.
    for trials in (oracle, noop):
        t = trials["verifier-timeout"]
        assert t.reward is None and t.exception_type == "VerifierTimeoutError" and t.error_kind == "error"
    # network_mode = "no-network" (with allow_internet = true beside it): the sandbox gets no network.
    assert read_json(oracle_dir.parent / "images" / "network-mode" / "image.json")["allow_network"] is False
    raw = read_json(oracle_dir / "verifier-timeout__0" / "result.json")
    assert raw["verifier_result"] is None and raw["reward_valid"] is False
    # Re-reading the written results gives the same records (the Harbor-job parser path).
    for name, t in oracle.items():
        slug = name.replace("/", "__")
        again = trial_record(read_json(oracle_dir / f"{slug}__0" / "result.json"))
        assert (again.reward, again.rewards, again.error_kind) == (t.reward, t.rewards, t.error_kind)


@needs_bwrap
def test_multi_step_tasks_run_step_by_step_as_harbor_runs_them(runs):
    """harbor/trial/multi_step.py: per step the workdir files and setup.sh, the agent on the step's
    instruction, the step's own tests with its verifier env; a step below min_reward ends the
    trial; harbor/trial/trial.py: the trial reward is the per-key mean over the steps that ran."""
    _, oracle, oracle_dir = runs["oracle"]
    _, noop, noop_dir = runs["noop"]
    assert oracle["multi-step"].rewards == {"reward": 1.0}
    raw = read_json(oracle_dir / "multi-step__0" / "result.json")
    assert [(sr["step_name"], sr["verifier_result"]) for sr in raw["step_results"]] == [
        ("write", {"rewards": {"reward": 1.0}}), ("check", {"rewards": {"reward": 1.0}})]
    # The no-op agent fails step 1's min_reward: step 2 never runs; the mean is over step 1 only.
    raw = read_json(noop_dir / "multi-step__0" / "result.json")
    assert [sr["step_name"] for sr in raw["step_results"]] == ["write"]
    assert "below min_reward 1.0" in raw["termforge"]["stopped_after"]
    assert noop["multi-step"].rewards == {"reward": 0.0}
    # multi-step-shared-tests (see its task.toml): /tests is the shared tests/ with the step's own
    # over it, and the step's verifier has its own 600 s, not the task's 2 s.
    raw = read_json(oracle_dir / "multi-step-shared-tests__0" / "result.json")
    assert [(sr["step_name"], sr["verifier_result"], sr["exception_info"]) for sr in raw["step_results"]] == [
        ("make", {"rewards": {"reward": 1.0}}, None), ("verify", {"rewards": {"reward": 1.0}}, None)]
    assert oracle["multi-step-shared-tests"].rewards == {"reward": 1.0}
    assert noop["multi-step-shared-tests"].rewards == {"reward": 0.0}


@needs_bwrap
def test_what_cannot_run_natively_is_an_environment_error_never_a_score(runs):
    res, oracle, _ = runs["oracle"]
    t = oracle["gpu-task"]
    assert t.reward is None and t.error_kind == "environment" and "gpus" in t.exception_message
    t = oracle["toolchain-image"]
    assert t.reward is None and t.error_kind == "environment"
    assert "base image python:3.12-slim-bookworm is not in termforge's image store" in t.exception_message
    # The broken task is listed with its reason; every other task was evaluated.
    assert [b["task_name"] for b in res.summary["unloadable_tasks"]] == ["invalid-config"]
    assert "unloadable: invalid-config" in res.table()
    assert res.summary["n_tasks"] == len(list(CONFORMANCE.iterdir())) - 1
    # Headline metric over valid trials only (harbor/metrics/mean.py): 14 tasks score 1.
    valid = [t for t in oracle.values() if t.rewards is not None]
    assert len(valid) == 14
    assert res.summary["headline_metric"] == "reward"
    assert res.summary["mean_reward"] == 1.0
    # Several keys: each key averaged over the valid trials, a trial without the key counting 0.
    assert res.summary["mean_by_key"] == pytest.approx({"reward": 1.0, "style": 0.5 / len(valid)})


@needs_bwrap
def test_eval_tbench_cli_runs_the_dataset_around_its_broken_task_with_control_rows(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from fake_openai_server import FakeOpenAIServer
    from termforge.config import load_config
    from termforge.evals.run import write_eval_table
    from termforge.params import stage_params_json

    root = Path(__file__).resolve().parents[1]
    with FakeOpenAIServer(replies=lambda messages: "ls") as server:
        overlay = tmp_path / "overlay.yaml"
        overlay.write_text(json.dumps({"eval": {"tbench": {"tasks_dir": str(CONFORMANCE),
                                                           "benchmark": "conformance"}}}))
        params = json.loads(stage_params_json(load_config([root / "config.yaml", overlay]), "eval_tbench"))
        params["models.policy"] = {"backend": "openai", "model": "fake", "base_url": server.base_url}
        res = subprocess.run(
            [sys.executable, "-m", "termforge.cli", "eval-tbench", "--params", json.dumps(params),
             "--model-name", "base", "--images-dir", str(tmp_path / "images"), "--out-dir", str(tmp_path / "run"),
             "--out", str(tmp_path / "tbench.json")],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root / "src")}, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "unloadable: invalid-config" in res.stdout and "control oracle: mean 1.000" in res.stdout
    record = read_json(tmp_path / "tbench.json")
    assert record["summary"]["n_tasks"] == len(list(CONFORMANCE.iterdir())) - 1 and set(record["controls"]) == {"oracle", "noop"}
    assert record["controls"]["noop"]["mean_reward"] == 0.0
    rows = write_eval_table([tmp_path / "tbench.json"], tmp_path / "results.csv")
    assert {r["model"] for r in rows} == {"base", "control:oracle", "control:noop"}


@pytest.mark.parametrize("layout, needle", [
    # harbor/models/task/task.py is_valid_dir: an environment/ without a Dockerfile is a valid
    # task (compose environments); harbor/models/task/paths.py: Windows tasks verify with test.bat.
    ({"environment/docker-compose.yaml": "services: {main: {build: .}}\n"}, "multi-container"),
    # Harbor's [verifier] environment_mode = "separate" (its own image for the verifier): one line.
    ({"task.toml": '[verifier]\nenvironment_mode = "separate"\n', "environment/Dockerfile": "FROM debian:bookworm-slim\n"},
     "[verifier] separate verifier environment"),
    ({"tests/test.bat": "@echo off\n", "_os": "windows", "environment/Dockerfile": "FROM mcr/windows\n"},
     "os = 'windows'"),
])
def test_tasks_harbor_accepts_load_and_are_reported_unsupported(tmp_path, layout, needle):
    d = tmp_path / "t"
    (d / "environment").mkdir(parents=True)
    (d / "instruction.md").write_text("Do it.\n")
    os_line = f'os = "{layout.pop("_os")}"\n' if "_os" in layout else ""
    (d / "task.toml").write_text(f'[environment]\n{os_line}')
    for rel, text in layout.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    if not (d / "tests" / "test.bat").exists():
        (d / "tests").mkdir()
        (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    task = load_harbor_task(d)
    assert any(needle in r for r in task.unsupported), task.unsupported
    assert needle in native_blocker(task)


def test_image_python_is_looked_up_inside_the_image(tmp_path):
    from termforge.grading.verifier import image_has_python

    bare = tmp_path / "bare"
    (bare / "usr" / "bin").mkdir(parents=True)
    assert not image_has_python(bare)
    with_py = tmp_path / "py"
    (with_py / "usr" / "bin").mkdir(parents=True)
    (with_py / "usr" / "bin" / "python3.11").write_text("")
    (with_py / "usr" / "bin" / "python3").symlink_to("python3.11")
    assert image_has_python(with_py)
    # An absolute link resolves inside the image, never on the host (whose python3 exists).
    absolute = tmp_path / "abs"
    (absolute / "usr" / "bin").mkdir(parents=True)
    (absolute / "usr" / "bin" / "python3").symlink_to("/usr/local/bin/python3")
    assert not image_has_python(absolute)
    (absolute / "usr" / "local" / "bin").mkdir(parents=True)
    (absolute / "usr" / "local" / "bin" / "python3").write_text("")
    assert image_has_python(absolute)
    (tmp_path / "esc" / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "esc" / "usr" / "bin" / "python3").symlink_to("../../../py/usr/bin/python3.11")
    assert not image_has_python(tmp_path / "esc")


@needs_bwrap
def test_a_bare_image_runs_test_sh_as_harbor_does_with_no_grader_channel(runs):
    """harbor/verifier/verifier.py runs test.sh with whatever the image has: FROM debian:bookworm-slim
    has no python3, so termforge's grader (and its supervisor) cannot run there. test.sh then runs
    with no channel at all: nothing it starts can send a verdict, the reward files alone count."""
    _, oracle, oracle_dir = runs["oracle"]
    raw = read_json(oracle_dir / "canary__0" / "result.json")
    assert oracle["canary"].reward == 1.0
    assert raw["termforge"]["verdict"]["graded_by"] == "reward_file", raw["termforge"]


def _task_with(tmp_path, environment: str) -> Path:
    d = tmp_path / "t"
    shutil.copytree(CONFORMANCE / "canary", d)
    (d / "task.toml").write_text(f"[environment]\n{environment}")
    return d


def test_legacy_memory_strings_are_parsed_as_harbor_parses_them(tmp_path):
    # harbor/models/task/config.py EnvironmentConfig._parse_size_to_mb (see legacy-memory/task.toml).
    task = load_harbor_task(CONFORMANCE / "legacy-memory")
    assert (task.memory_mb, task.storage_mb) == (1536, 512)
    for text, mb in (("2G", 2048), ("512m", 512), ("2048K", 2), ("100K", 0)):
        assert load_harbor_task(_task_with(tmp_path / text, f'memory = "{text}"\n')).memory_mb == mb
    # Any other string is a ValueError there: the task is refused, naming the field.
    for text in ("2048", "2GB", "512Mi", "lots", "G", "infG"):
        with pytest.raises(HarborTaskError, match=r"\[environment\] memory must be a size"):
            load_harbor_task(_task_with(tmp_path / f"bad{text}", f'memory = "{text}"\n'))
    # A non-string legacy value is dropped; one disagreeing with memory_mb is refused.
    assert load_harbor_task(_task_with(tmp_path / "int", "memory = 2048\n")).memory_mb is None
    assert load_harbor_task(_task_with(tmp_path / "same", 'memory = "1G"\nmemory_mb = 1024\n')).memory_mb == 1024
    with pytest.raises(HarborTaskError, match="conflicts with memory_mb"):
        load_harbor_task(_task_with(tmp_path / "conflict", 'memory = "1G"\nmemory_mb = 2048\n'))


@needs_bwrap
def test_the_oracle_reads_the_task_as_the_runner_does_never_a_valid_zero(tmp_path):
    """harbor/agents/oracle.py OracleAgent.run uploads solution/ into the environment, so where the
    dataset lies does not matter. A dataset the sandbox's uid cannot read (under a 0700 folder, as
    under /root or written with umask 077) still scores 1; a solution the runner itself cannot read
    makes the control row an infrastructure error, never a valid 0."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shutil.copytree(CONFORMANCE / "canary", private / "canary")
    for p in [private / "canary", *(private / "canary").rglob("*")]:
        p.chmod(0o700 if p.is_dir() else 0o600)
    task = load_harbor_task(private / "canary")
    res = run_native([task], oracle_agent, 1, tmp_path / "images", tmp_path / "readable")
    assert res.trials[0].reward == 1.0, res.trials[0]
    shutil.rmtree(private / "canary" / "solution")
    res = run_native([task], oracle_agent, 1, tmp_path / "images", tmp_path / "unreadable")
    t = res.trials[0]
    assert t.reward is None and t.error_kind is not None and t.exception_type == "AgentInfraError", t
    assert "cannot read the task's solution" in t.exception_message
    assert res.summary["n_scored"] == 0


@needs_bwrap
def test_environment_workdir_is_honoured_or_an_environment_error(tmp_path):
    """environment-workdir (see its task.toml) scores 1 above; a workdir the image lacks is an
    environment error naming the field (Docker cannot exec there either), never a score."""
    task = load_harbor_task(CONFORMANCE / "environment-workdir")
    assert task.workdir == "/app/work"
    d = tmp_path / "t"
    shutil.copytree(CONFORMANCE / "environment-workdir", d)
    (d / "task.toml").write_text((d / "task.toml").read_text().replace('"/app/work"', '"/srv/nowhere"'))
    res = run_native([load_harbor_task(d)], oracle_agent, 1, tmp_path / "images", tmp_path / "run")
    t = res.trials[0]
    assert t.reward is None and t.error_kind == "environment", t
    assert "[environment] workdir = '/srv/nowhere'" in t.exception_message
    (d / "task.toml").write_text((d / "task.toml").read_text().replace('"/srv/nowhere"', '"app"'))
    with pytest.raises(HarborTaskError, match=r"\[environment\] workdir must be an absolute path"):
        load_harbor_task(d)


@needs_bwrap
def test_pass_at_k_is_reported_where_harbor_reports_it(runs):
    """harbor/utils/pass_at_k.py _compute_pass_at_k_for_trials: no pass@k at all for an agent's run
    when a valid trial has several named rewards or one other than 0 or 1 (multi-key-reward here);
    otherwise k = 2, 4, 8, ... and 5, 10, ... up to the fewest valid trials of any task."""
    from termforge.evals.tbench import TrialRecord, harbor_pass_at_k, summarize

    res, _, oracle_dir = runs["oracle"]
    assert "multi-key-reward__0 has 2 named rewards" in res.summary["pass_at_k_none"]
    assert set(res.summary["pass_at_k"].values()) == {None} and res.summary["pass_at_k_harbor"] == {}
    assert read_json(oracle_dir / "result.json")["stats"]["evals"]
    for evals in read_json(oracle_dir / "result.json")["stats"]["evals"].values():
        assert evals["pass_at_k"] == {}

    def trial(task, i, reward):
        return TrialRecord(task, f"{task}__{i}", reward, None, None, None, None, None, {}, {"reward": reward})

    binary = [trial("a", i, float(i % 2)) for i in range(5)] + [trial("b", i, 1.0) for i in range(5)]
    assert sorted(harbor_pass_at_k(binary)) == [2, 4, 5]
    assert summarize(binary)["pass_at_k"]["1"] == pytest.approx((0.4 + 1.0) / 2)
    partial = binary + [trial("c", 0, 0.5)]
    assert summarize(partial)["pass_at_k_none"] == "trial c__0 has reward 0.5, not 0 or 1"
    assert harbor_pass_at_k(partial) == {} and summarize(partial)["pass_at_k"]["1"] is None


@needs_bwrap
def test_the_agent_is_stopped_at_its_deadline_and_graded_as_then(runs, tmp_path):
    """harbor/trial/trial.py: the agent is cancelled at [agent] timeout_sec and the state at that
    moment is graded, with AgentTimeoutError (the reward stays valid). agent-deadline (see its
    task.toml): the oracle is cut off after making /app/done and before removing it."""
    import time

    from termforge.evals.tbench import AgentDeadline

    _, oracle, _ = runs["oracle"]
    t = oracle["agent-deadline"]
    assert t.reward == 1.0 and t.exception_type == "AgentTimeoutError" and t.error_kind is None, t
    d = tmp_path / "t"
    shutil.copytree(CONFORMANCE / "agent-deadline", d)
    (d / "task.toml").write_text((d / "task.toml").read_text().replace("timeout_sec = 2.0", "timeout_sec = 1.0"))
    task = load_harbor_task(d)
    refused = []

    def late_writer(session, task):
        session.exec("true")
        time.sleep(2.5)  # past the deadline: what it asks for now must not run
        try:
            session.exec("echo done > /app/done")
        except AgentDeadline:
            refused.append(True)
            raise
        return {}

    def long_command(session, task):
        shell = session.open_shell()
        shell.run("sleep 4; echo done > /app/done", timeout=60)  # cut at the deadline
        shell.close()
        return {}

    for agent in (late_writer, long_command):
        res = run_native([task], agent, 1, tmp_path / "images", tmp_path / agent.__name__)
        t = res.trials[0]
        assert t.reward == 0.0 and t.exception_type == "AgentTimeoutError" and t.error_kind is None, (agent, t)
    time.sleep(2)
    assert refused == [True]  # the late writer's command was refused, not run after the grading


# -- the same set through Harbor's own code (skipped without the Harbor venv) ------------------------

HARBOR_PYTHON = Path(os.environ.get("TERMFORGE_HARBOR_PYTHON", "/work/harbor-venv/bin/python"))
HARBOR_SCRIPT = r"""
import json, sys, warnings
from pathlib import Path
from types import SimpleNamespace
warnings.simplefilter("ignore")
from harbor.models.task.task import Task
from harbor.models.task.config import EnvironmentConfig
from harbor.verifier.verifier import Verifier
root, sizes, rewards = Path(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
out = {"tasks": {}, "sizes": {}, "rewards": {}}
for d in sorted(root.iterdir()):
    try:
        c = Task(d).config
    except Exception as exc:
        out["tasks"][d.name] = type(exc).__name__
        continue
    e = c.environment
    out["tasks"][d.name] = {"memory_mb": e.memory_mb, "storage_mb": e.storage_mb, "cpus": e.cpus,
                            "workdir": e.workdir, "verifier": c.verifier.timeout_sec, "agent": c.agent.timeout_sec,
                            "steps": [s.verifier.timeout_sec for s in c.steps or []]}
for text in sizes:
    try:
        out["sizes"][text] = EnvironmentConfig(memory=text).memory_mb
    except Exception as exc:
        out["sizes"][text] = None
for f in sorted(rewards.iterdir()):
    try:
        r = Verifier._parse_reward_json(SimpleNamespace(trial_paths=SimpleNamespace(reward_json_path=f)))
        out["rewards"][f.name] = {k: float(v) for k, v in r.items()} if isinstance(r, dict) else "not a dict"
    except Exception as exc:
        out["rewards"][f.name] = type(exc).__name__
print(json.dumps(out))
"""


def _harbor_missing() -> str | None:
    import subprocess

    if not HARBOR_PYTHON.exists():
        return f"no Harbor venv at {HARBOR_PYTHON} (python3.12 -m venv; pip install harbor==0.26.*)"
    res = subprocess.run([str(HARBOR_PYTHON), "-c", "import harbor.verifier.verifier, harbor.models.task.task"],
                         capture_output=True, text=True)
    return None if res.returncode == 0 else f"harbor does not import: {res.stderr[-300:]}"


@pytest.mark.skipif(_harbor_missing() is not None, reason=str(_harbor_missing()))
def test_harbors_own_code_reads_the_conformance_set_as_termforge_does(tmp_path):
    """Harbor 0.26's Task/TaskConfig (harbor/models/task/task.py, config.py) and
    Verifier._parse_reward_json (harbor/verifier/verifier.py) on the same inputs as termforge's loader
    and reward reader: the same fields, the same refusals, the same rewards."""
    import json
    import subprocess

    from termforge.grading.reward_file import read_reward

    sizes = ["2G", " 1.5g ", "512M", "2048K", "2048", "2GB", "512Mi", "lots", "G"]
    payloads = {"bool.json": '{"reward": true, "style": false}', "big.json": '{"reward": 1' + " " * 9000 + "}",
                "nan.json": '{"reward": NaN}', "text.json": '{"reward": "1"}', "multi.json": '{"a": 0.5, "b": 1}'}
    rewards = tmp_path / "rewards"
    rewards.mkdir()
    for name, text in payloads.items():
        (rewards / name).write_text(text)
    res = subprocess.run([str(HARBOR_PYTHON), "-c", HARBOR_SCRIPT, str(CONFORMANCE), json.dumps(sizes), str(rewards)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    harbor = json.loads(res.stdout.strip().splitlines()[-1])
    for d in sorted(CONFORMANCE.iterdir()):
        theirs = harbor["tasks"][d.name]
        if d.name == "invalid-config":
            assert isinstance(theirs, str)  # refused by both
            continue
        task = load_harbor_task(d)
        ours = {"memory_mb": task.memory_mb, "storage_mb": task.storage_mb, "cpus": task.cpus, "workdir": task.workdir,
                "verifier": task.verifier_timeout_sec, "agent": task.agent_timeout,
                "steps": [st.verifier_timeout_sec for st in task.steps]}
        assert ours == theirs, d.name
    for text, mb in harbor["sizes"].items():
        d = tmp_path / "sizes" / str(sizes.index(text))
        shutil.copytree(CONFORMANCE / "canary", d)
        (d / "task.toml").write_text(f'[environment]\nmemory = "{text}"\n')
        if mb is None:
            with pytest.raises(HarborTaskError):
                load_harbor_task(d)
        else:
            assert load_harbor_task(d).memory_mb == mb, text
    for name, theirs in harbor["rewards"].items():
        d = tmp_path / "verifier" / name
        d.mkdir(parents=True)
        shutil.copy(rewards / name, d / "reward.json")
        ours = read_reward(d).rewards
        assert ours == (theirs if isinstance(theirs, dict) else None), (name, theirs, ours)
