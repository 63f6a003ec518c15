"""Terminal-Bench evals: Harbor task loading, the bwrap build of Dockerfiles, the native runner
(oracle scores 1, no-op 0, environment errors apart from both), pass@k, and the harbor CLI side."""

import itertools
import json
import os
import re
import shutil
import threading
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import needs_bwrap
from termforge.errors import TermforgeError
from termforge.evals.harbor_tasks import (HarborTaskError, build_harbor_image, load_harbor_dir, load_harbor_task,
                                          parse_dockerfile, plan_dockerfile, start_harbor_session)
from termforge.evals.tbench import (AgentInfraError, harbor_command, noop_agent, oracle_agent, parse_harbor_job,
                                    run_harbor, run_native)
from termforge.io import read_json
from termforge.metrics import pass_at_k
from termforge.runtime.base import Limits

ROOT = Path(__file__).resolve().parents[1]
TB_MINI = ROOT / "benchmarks" / "tb-mini"
TB2 = Path(__file__).parent / "data" / "tb2_format"
HARBOR_JOB = Path(__file__).parent / "data" / "harbor_job" / "2025-11-30__10-00-00"
TRIAL_FIELDS = {"task_name", "trial_name", "verifier_result", "exception_info", "started_at", "finished_at",
                "environment_setup", "agent_execution", "verifier", "agent_info", "agent_result"}


# -- the benchmark and the native runner ----------------------------------------------------------

@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Every tb-mini and TB2-format task built once; the runs below hit this cache."""
    path = tmp_path_factory.mktemp("images")
    for task in load_harbor_dir(TB_MINI) + [load_harbor_task(TB2 / "count-log-levels")]:
        built = build_harbor_image(task, path)
        assert built.ok, built.reason
    return path


def test_tb_mini_covers_the_kinds_of_terminal_work():
    tasks = load_harbor_dir(TB_MINI)
    assert len(tasks) >= 6
    assert len({t.category for t in tasks}) >= 5
    for t in tasks:
        assert t.allow_internet is False and t.solve_sh is not None
        assert t.dockerfile.read_text().startswith("FROM debian:bookworm-slim")
        assert "/logs/verifier/reward.txt" in t.test_sh.read_text()
        assert (t.tests_dir / "test_outputs.py").is_file()


@needs_bwrap
def test_native_runner_scores_oracle_1_and_noop_0(images, tmp_path):
    tasks = load_harbor_dir(TB_MINI)
    results = {}

    def run(name, agent):
        results[name] = run_native(tasks, agent, 1, images, tmp_path / name, n_concurrent=2)

    threads = [threading.Thread(target=run, args=a) for a in (("oracle", oracle_agent), ("noop", noop_agent))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    oracle, noop = results["oracle"], results["noop"]
    assert {t.task_name: t.reward for t in oracle.trials} == {t.name: 1.0 for t in tasks}, oracle.table()
    assert {t.task_name: t.reward for t in noop.trials} == {t.name: 0.0 for t in tasks}, noop.table()
    assert oracle.summary["mean_reward"] == 1.0 and oracle.summary["pass_at_k"]["1"] == 1.0
    assert noop.summary["mean_reward"] == 0.0 and noop.summary["n_errors"] == 0
    # Harbor's trial shape on disk, and tb-mini's test.sh went through the proof-of-run launcher.
    for trial in oracle.trials:
        result = read_json(tmp_path / "oracle" / trial.trial_name / "result.json")
        assert TRIAL_FIELDS <= set(result)
        assert result["verifier_result"] == {"rewards": {"reward": 1.0}}
        assert result["termforge"]["verdict"]["collected"] > 0
        assert set(trial.durations_sec) == {"environment_setup", "agent_execution", "verifier"}
    job = read_json(tmp_path / "oracle" / "result.json")
    assert job["n_total_trials"] == len(tasks)
    assert job["stats"]["evals"]["oracle__adhoc"]["reward_stats"]["reward"]["1.0"] == sorted(
        f"{t.name}__0" for t in tasks)
    assert "ALL" in oracle.table()


# -- Terminal-Bench 2.0 format --------------------------------------------------------------------

def test_tb2_task_toml_fields_are_read_with_harbor_defaults():
    plain = load_harbor_task(TB2 / "count-log-levels")
    assert (plain.name, plain.version, plain.difficulty, plain.category) == (
        "count-log-levels", "1.0", "easy", "file-operations")
    assert plain.tags == ["logs", "counting"]
    assert plain.metadata["author_email"] == "tests@termforge.invalid"
    assert (plain.verifier_timeout_sec, plain.agent_timeout_sec, plain.build_timeout_sec) == (180.0, 900.0, 600.0)
    assert (plain.cpus, plain.memory_mb, plain.storage_mb) == (2, 4096, 10240)  # memory = "4G"
    assert plain.allow_internet is True and plain.docker_image is None  # Harbor's default: internet on
    assert plain.instruction.startswith("The file `/app/server.log`")
    assert plain.test_sh == TB2 / "count-log-levels" / "tests" / "test.sh"
    assert plain.solve_sh == TB2 / "count-log-levels" / "solution" / "solve.sh"
    uv = load_harbor_task(TB2 / "checksum-manifest")
    assert uv.docker_image == "termforge-tests/checksum-manifest:20251031"
    assert (uv.verifier_timeout_sec, uv.agent_timeout_sec, uv.memory_mb, uv.cpus) == (900.0, 1800.0, 2048, 1)
    for task in (plain, uv):
        assert "echo 1 > /logs/verifier/reward.txt" in task.test_sh.read_text()
    assert [t.name for t in load_harbor_dir(TB2)] == ["checksum-manifest", "count-log-levels"]


@needs_bwrap
def test_tb2_task_runs_natively_with_the_reward_file_as_proof(images, tmp_path):
    task = load_harbor_task(TB2 / "count-log-levels")
    oracle = run_native([task], oracle_agent, 1, images, tmp_path / "oracle")
    noop = run_native([task], noop_agent, 1, images, tmp_path / "noop")
    assert [t.reward for t in oracle.trials] == [1.0] and [t.reward for t in noop.trials] == [0.0]
    verdict = read_json(tmp_path / "oracle" / "count-log-levels__0" / "result.json")["termforge"]["verdict"]
    # The TB2 test.sh runs pytest itself (no proof token) and refuses to run outside its WORKDIR.
    assert verdict["collected"] == 0 and verdict["graded_by"] == "reward_file" and "no grader ran" in verdict["reason"]
    # A second run of the same job resumes: the finished trial is kept, not re-run.
    first = read_json(tmp_path / "oracle" / "count-log-levels__0" / "result.json")["started_at"]
    again = run_native([task], oracle_agent, 1, images, tmp_path / "oracle")
    assert again.trials[0].reward == 1.0
    assert read_json(tmp_path / "oracle" / "count-log-levels__0" / "result.json")["started_at"] == first


# -- environment errors ---------------------------------------------------------------------------

def _task(root: Path, name: str, dockerfile: str, files: dict | None = None) -> Path:
    d = root / name
    shutil.copytree(TB2 / "count-log-levels", d)
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, text in (files or {}).items():
        (d / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "environment" / rel).write_text(text)
    return d


BAD_ENVIRONMENTS = {
    "missing-package": ("FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y python3 "
                        "tf-no-such-package-zz\nWORKDIR /app\n", "tf-no-such-package-zz"),
    "run-fails": ("FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo tf-log-marker-42 && exit 3\n",
                  "tf-log-marker-42"),
    "alpine-base": ("FROM alpine:3.19\nWORKDIR /app\n",
                    "base image alpine:3.19 is not in termforge's image store; add it with `termforge images add"),
    "secret-mount": ("FROM debian:bookworm-slim\nRUN --mount=type=secret,id=tok cat /run/secrets/tok\n",
                     "--mount=type=secret"),
}


@needs_bwrap
@pytest.mark.parametrize("case", sorted(BAD_ENVIRONMENTS))
def test_unbuildable_environment_is_an_environment_error(case, tmp_path):
    dockerfile, reason = BAD_ENVIRONMENTS[case]
    task = load_harbor_task(_task(tmp_path, case, dockerfile))
    built = build_harbor_image(task, tmp_path / "images")
    assert not built.ok and reason in built.reason and case in built.reason
    assert not (tmp_path / "images" / case).exists()


@needs_bwrap
def test_environment_errors_are_counted_apart_from_rewards(images, tmp_path):
    tasks = [load_harbor_task(TB2 / "count-log-levels"), load_harbor_task(TB2 / "checksum-manifest")]
    for case in ("missing-package", "run-fails"):
        tasks.append(load_harbor_task(_task(tmp_path / "tasks", case, BAD_ENVIRONMENTS[case][0])))
    res = run_native(tasks, oracle_agent, 2, images, tmp_path / "job", n_concurrent=2)
    by_task = {p["task_name"]: p for p in res.summary["per_task"]}
    assert by_task["count-log-levels"]["n_passed"] == 2
    for name in ("checksum-manifest", "missing-package", "run-fails"):
        assert by_task[name]["n_scored"] == 0 and by_task[name]["n_environment_errors"] == 2
        assert by_task[name]["mean_reward"] is None and by_task[name]["pass_at_k"]["1"] is None
    # Its test.sh installs its toolchain over the network, which a task with network may do; its
    # FROM image is what this machine lacks (pulling is off by default).
    assert "base image python:3.13-slim-bookworm is not in termforge's image store" in \
        by_task["checksum-manifest"]["errors"][0]
    assert (res.summary["n_trials"], res.summary["n_scored"], res.summary["n_environment_errors"]) == (8, 2, 6)
    # Errors are neither 0 nor 1: the mean and pass@k are over the one task that could run.
    assert res.summary["mean_reward"] == 1.0 and res.summary["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert res.summary["n_tasks_pass_at_k"] == {"1": 1, "2": 1}
    trial = read_json(tmp_path / "job" / "missing-package__1" / "result.json")
    assert trial["verifier_result"] is None
    assert trial["exception_info"]["exception_type"] == "EnvironmentBuildError"


# -- agents ---------------------------------------------------------------------------------------

@needs_bwrap
def test_agent_failures_and_token_counts(images, tmp_path):
    task = load_harbor_task(TB2 / "count-log-levels")

    def infra_down(session, task):
        raise AgentInfraError("model server unreachable")

    def crashes_after_work(session, task):
        session.exec("cut -d: -f1 server.log | sort | uniq -c | awk '{print $2, $1}' > levels.txt")
        raise RuntimeError("parser bug after the last command")

    def counted(session, task):
        res = session.exec("pwd; echo $LANG")
        return {"name": "scripted", "model_name": "smollm2-135m", "n_input_tokens": 120, "n_output_tokens": 7,
                "pwd": res.stdout.split()[0]}

    infra = run_native([task], infra_down, 1, images, tmp_path / "infra")
    assert infra.trials[0].reward is None and infra.trials[0].exception_type == "AgentInfraError"
    assert infra.summary["n_errors"] == 1 and infra.summary["n_environment_errors"] == 0
    crash = run_native([task], crashes_after_work, 1, images, tmp_path / "crash")
    assert crash.trials[0].reward == 1.0 and crash.trials[0].exception_type == "RuntimeError"
    tokens = run_native([task], counted, 1, images, tmp_path / "tokens")
    result = read_json(tmp_path / "tokens" / "count-log-levels__0" / "result.json")
    assert result["agent_info"]["name"] == "scripted"
    assert result["agent_info"]["model_info"]["name"] == "smollm2-135m"
    assert (result["agent_result"]["n_input_tokens"], result["agent_result"]["n_output_tokens"]) == (120, 7)
    assert result["agent_result"]["metadata"]["pwd"] == "/app"  # the Dockerfile's WORKDIR
    assert (tokens.summary["n_input_tokens"], tokens.summary["n_output_tokens"]) == (120, 7)


# -- loader errors and Dockerfile interpretation ---------------------------------------------------

@pytest.mark.parametrize("breakage, message", [
    (lambda d: (d / "instruction.md").unlink(), "missing instruction.md"),
    (lambda d: (d / "task.toml").unlink(), "missing task.toml"),
    (lambda d: (d / "tests" / "test.sh").unlink(), "missing tests/test.sh"),
    (lambda d: (d / "task.toml").write_text("[verifier\ntimeout_sec = 1\n"), "task.toml is not valid TOML"),
    (lambda d: (d / "task.toml").write_text('[verifier]\ntimeout_sec = "soon"\n'), "[verifier] timeout_sec"),
    (lambda d: (d / "task.toml").write_text('[environment]\nmemory = "lots"\n'), "[environment] memory"),
    (lambda d: (d / "task.toml").write_text('[environment]\nallow_internet = "no"\n'), "allow_internet"),
    (lambda d: shutil.rmtree(d / "environment"), "missing environment/"),
])
def test_malformed_task_errors_name_the_directory_and_field(tmp_path, breakage, message):
    d = tmp_path / "broken-task"
    shutil.copytree(TB2 / "count-log-levels", d)
    breakage(d)
    with pytest.raises(HarborTaskError) as err:
        load_harbor_task(d)
    assert message in str(err.value) and str(d) in str(err.value)


def test_dockerfile_plan_keeps_real_commands_and_drops_apt(tmp_path):
    (tmp_path / "app.py").write_text("print('hi')\n")
    (tmp_path / "Dockerfile").write_text(
        "# syntax=docker/dockerfile:1\nARG BASE=debian:bookworm-slim\nFROM ${BASE}\n"
        "ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8\n"
        "RUN --mount=type=cache,target=/var/cache/apt apt-get update && \\\n\n"
        "    apt-get install -y --no-install-recommends python3=3.11* make \\\n"
        "    && mkdir -p /app/out && echo 'a && b; c' > /app/out/x && rm -rf /var/lib/apt/lists/*\n"
        "WORKDIR /app\nCOPY --chmod=755 app.py ./bin/\nCMD [\"bash\"]\n")
    plan = plan_dockerfile(tmp_path / "Dockerfile", tmp_path)
    assert plan.base_image == "debian:bookworm-slim"
    assert plan.apt_packages == ["make", "python3"]
    assert plan.env == {"DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"} and plan.workdir == "/app"
    run = plan.steps[0]
    assert run.argv[:2] == ["/bin/sh", "-c"]
    assert run.text == "true && true && mkdir -p /app/out && echo 'a && b; c' > /app/out/x && true"
    copy = plan.steps[-1]
    assert (copy.dest, copy.dest_is_dir, copy.chmod) == ("/app/bin", True, 0o755)
    assert [i.keyword for i in parse_dockerfile((tmp_path / "Dockerfile").read_text())] == [
        "ARG", "FROM", "ENV", "RUN", "WORKDIR", "COPY", "CMD"]


@needs_bwrap
def test_build_runs_the_dockerfile_in_buildah_and_caches(tmp_path):
    """The Dockerfile is built by buildah as Docker would build it (RUN as the image's root, files
    outside /app land in the image, never on the host), and a second build is the cached one."""
    probe = f"/etc/tf-build-probe-{os.getpid()}"
    task = load_harbor_task(_task(tmp_path, "steps", (
        "FROM debian:bookworm-slim\nRUN apt-get install -y python3 python3-pytest\nENV GREETING=hello\nWORKDIR /app/work\nCOPY server.log /tmp/stage/\n"
        "RUN cp /tmp/stage/server.log . && echo \"$GREETING $(id -u)\" > greeting.txt && rm -r /tmp/stage\n"
        f"RUN echo in-the-image > {probe}\n"
        "ADD bundle.tar /app/vendor/\n"), {}))
    import tarfile

    src = tmp_path / "member.txt"
    src.write_text("vendored\n")
    with tarfile.open(task.environment_dir / "bundle.tar", "w") as tar:
        tar.add(src, arcname="lib/member.txt")
    built = build_harbor_image(task, tmp_path / "images")
    assert built.ok, built.reason
    layer = built.image.path / "layer"
    assert (layer / "work" / "greeting.txt").read_text() == "hello 0\n"  # RUN as root, as under Docker
    assert (layer / "work" / "server.log").exists() and (layer / "vendor" / "lib" / "member.txt").exists()
    assert (layer / "vendor" / "lib" / "member.txt").stat().st_uid == os.getuid()
    # The image's whole Env, as Docker starts every process with it: the base's PATH and the ENV.
    assert built.image.meta["workdir"] == "/app/work" and built.image.meta["env"] == {
        "GREETING": "hello", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert (Path(built.image.rootfs) / probe.lstrip("/")).read_text() == "in-the-image\n"
    assert not Path(probe).exists()
    meta = read_json(built.image.path / "image.json")
    assert meta["rootfs"] == "dockerfile" and meta["image_digest"].startswith("sha256:")
    assert meta["image_digest"] == meta["dockerfile"]["manifest_digest"]
    with start_harbor_session(built.image, Limits(wall_sec=60, cpu_sec=30, memory_mb=2048)) as session:
        res = session.exec(f"cat {probe} greeting.txt && pwd")
        assert res.ok and res.stdout == "in-the-image\nhello 0\n/app/work\n", res.stdout + res.stderr
    again = build_harbor_image(task, tmp_path / "images")
    assert again.ok and again.cached and again.image.rootfs == built.image.rootfs


# -- pass@k ---------------------------------------------------------------------------------------

def _brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    outcomes = [True] * c + [False] * (n - c)
    draws = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(outcomes[i] for i in d) for d in draws), len(draws))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_brute_force_enumeration(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(float(_brute_force_pass_at_k(n, c, k)), abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    for args in ((3, 4, 1), (3, 1, 4), (0, 0, 1), (3, -1, 1), (3, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(*args)


# -- harbor CLI -----------------------------------------------------------------------------------

def test_harbor_command_line(tmp_path):
    cmd = harbor_command(TB_MINI, "terminus-2", "openai/gpt-4o-mini", "docker", 4, 5, tmp_path / "jobs",
                         job_name="tb-mini-k5")
    assert cmd == ["harbor", "run", "-p", str(TB_MINI), "-a", "terminus-2", "-m", "openai/gpt-4o-mini",
                   "--env", "docker", "-n", "4", "-k", "5", "-o", str(tmp_path / "jobs"), "--job-name", "tb-mini-k5"]
    registry = harbor_command("terminal-bench@2.0", "oracle", env="daytona", n_concurrent=32)
    assert registry == ["harbor", "run", "-d", "terminal-bench@2.0", "-a", "oracle", "--env", "daytona",
                        "-n", "32", "-k", "1"]
    with pytest.raises(TermforgeError):
        harbor_command(TB_MINI, "oracle", k=0)


def test_run_harbor_without_the_cli_is_a_clear_error(tmp_path):
    with pytest.raises(TermforgeError, match="not on PATH"):
        run_harbor(TB_MINI, "oracle", jobs_dir=tmp_path, harbor="tf-no-such-harbor-cli")


def test_parse_harbor_job_builds_the_same_table():
    res = parse_harbor_job(HARBOR_JOB)
    s = res.summary
    assert s["k"] == 3  # from config.json n_attempts
    assert (s["n_trials"], s["n_scored"], s["n_errors"], s["n_environment_errors"]) == (9, 6, 3, 2)
    assert s["n_missing_trials"] == 1  # the job announced 10 trials
    assert s["mean_reward"] == pytest.approx(0.5)
    by_task = {p["task_name"]: p for p in s["per_task"]}
    assert by_task["tb-task-alpha"]["pass_at_k"] == pytest.approx({"1": 2 / 3, "2": 1.0, "3": 1.0})
    assert by_task["tb-task-beta"]["pass_at_k"] == {"1": 0.5, "2": 1.0, "3": None}
    assert by_task["tb-task-beta"]["n_errors"] == 1 and by_task["tb-task-beta"]["n_environment_errors"] == 0
    assert by_task["tb-task-gamma"]["n_environment_errors"] == 2
    assert s["pass_at_k"]["1"] == pytest.approx((2 / 3 + 0.5 + 0.0) / 3)
    assert s["pass_at_k"]["2"] == 1.0 and s["n_tasks_pass_at_k"] == {"1": 3, "2": 2, "3": 1}
    assert (s["n_input_tokens"], s["n_output_tokens"]) == (13200, 3180)
    timed_out = next(t for t in res.trials if t.trial_name == "tb-task-beta__M1n2O3p")
    assert timed_out.reward == 0.0 and timed_out.exception_type == "AgentTimeoutError"
    assert timed_out.durations_sec["agent_execution"] == 28.0
    table = res.table().splitlines()
    assert table[0].split() == ["task", "trials", "scored", "passed", "errors", "env_err", "mean", "pass@1", "pass@3"]
    assert table[-1].split()[:6] == ["ALL", "9", "6", "3", "3", "2"]


def test_parse_harbor_job_errors_name_the_file(tmp_path):
    with pytest.raises(TermforgeError, match="not a directory"):
        parse_harbor_job(tmp_path / "nope")
    (tmp_path / "job" / "t__1").mkdir(parents=True)
    with pytest.raises(TermforgeError, match="no trial directories"):
        parse_harbor_job(tmp_path / "job")
    (tmp_path / "job" / "t__1" / "result.json").write_text(json.dumps({"trial_name": "t__1"}))
    with pytest.raises(TermforgeError, match="no task_name"):
        parse_harbor_job(tmp_path / "job")


@needs_bwrap
def test_a_test_sh_that_writes_no_reward_is_an_error_not_a_zero(tmp_path):
    d = tmp_path / "count-log-levels"
    shutil.copytree(TB2 / "count-log-levels", d)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 'collecting...'\nexit 3\n")
    res = run_native([load_harbor_task(d)], oracle_agent, 1, tmp_path / "images", tmp_path / "job")
    trial = res.trials[0]
    # Harbor raises RewardFileNotFoundError (harbor/verifier/verifier.py): no reward, not a 0.
    assert trial.reward is None and trial.error_kind == "error" and trial.exception_type == "RewardFileNotFoundError"
    assert "no reward.json or reward.txt" in trial.exception_message
    assert res.summary["mean_reward"] is None and res.summary["n_errors"] == 1


@needs_bwrap
def test_verifier_finds_real_tools_before_agent_planted_ones(tmp_path):
    """An image that puts /app/bin first on PATH: a fake pytest the agent drops there must not
    grade the episode (the verifier searches the system directories first)."""
    d = tmp_path / "count-log-levels"
    shutil.copytree(TB2 / "count-log-levels", d)
    dockerfile = d / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "ENV PATH=/app/bin:$PATH\n")

    def plants_fake_pytest(session, task):
        session.exec("mkdir -p /app/bin && printf '#!/bin/sh\\nexit 0\\n' > /app/bin/pytest && chmod +x /app/bin/pytest")
        assert session.exec("command -v pytest").stdout.strip() == "/app/bin/pytest"  # the agent sees its PATH
        return {"name": "hacker"}

    res = run_native([load_harbor_task(d)], plants_fake_pytest, 1, tmp_path / "images", tmp_path / "job")
    assert res.trials[0].reward == 0.0


# -- Harbor's error policy on Harbor's own trial results -------------------------------------------

def _harbor_trial(rewards, exc_type=None, message="", **extra):
    return {"task_name": "t", "trial_name": "t__x", "verifier_result": {"rewards": rewards} if rewards else None,
            "exception_info": {"exception_type": exc_type, "exception_message": message} if exc_type else None,
            **extra}


@pytest.mark.parametrize("rewards, exc_type, message, extra, expected", [
    # harbor/models/trial/error_policy.py: ApiError is graded but has_valid_reward=False.
    ({"reward": 0.0}, "ApiError", "", {}, (None, "error")),
    # VerifierTimeoutError: no valid reward, whatever the result holds.
    ({"reward": 0.0}, "VerifierTimeoutError", "", {}, (None, "error")),
    # AgentTimeoutError and NonZeroAgentExitCodeError keep the reward.
    ({"reward": 1.0}, "AgentTimeoutError", "", {}, (1.0, None)),
    ({"reward": 0.0}, "NonZeroAgentExitCodeError", "", {}, (0.0, None)),
    # An exception type Harbor does not list keeps the reward (UNKNOWN_ERROR_POLICY).
    ({"reward": 1.0}, "SomethingNewError", "", {}, (1.0, None)),
    # Environment failures: counted apart from rewards and from other errors.
    (None, "SandboxBuildFailedError", "", {}, (None, "environment")),
    (None, "HealthcheckError", "", {}, (None, "environment")),
    (None, "RuntimeError", "Docker compose command failed for environment t", {}, (None, "environment")),
    (None, "RuntimeError", "something else broke", {}, (None, "error")),
    (None, "RuntimeError", "Command timed out after 30 seconds", {}, (None, "error")),
    # harbor/models/trial/result.py: reward_valid is a computed field dumped into result.json; honoured.
    ({"reward": 1.0}, None, "", {"reward_valid": False}, (None, "error")),
    # Failures Harbor records on a step of a multi-step trial void the trial's reward too.
    ({"reward": 1.0}, None, "", {"step_results": [{"exception_info": {"exception_type": "ApiError"}}]},
     (None, "error")),
    # Non-finite rewards are never a score (harbor/verifier/verifier.py rejects them).
    ({"reward": float("nan")}, None, "", {}, (None, "error")),
])
def test_harbor_trials_follow_the_error_policy(rewards, exc_type, message, extra, expected):
    from termforge.evals.tbench import trial_record

    t = trial_record(_harbor_trial(rewards, exc_type, message, **extra))
    assert (t.reward, t.error_kind) == expected


def test_multi_key_rewards_are_kept_whole():
    from termforge.evals.tbench import summarize, trial_record

    a = trial_record(_harbor_trial({"accuracy": 0.5, "style": 1.0}))
    b = trial_record({**_harbor_trial({"accuracy": 1.0}), "trial_name": "t__y"})
    assert a.rewards == {"accuracy": 0.5, "style": 1.0} and a.reward is None  # no `reward` key: no headline
    assert b.reward == 1.0
    s = summarize([a, b])
    # harbor/metrics/base.py aggregate_reward_dicts: per key, a trial without the key counts 0.
    assert s["mean_by_key"] == {"accuracy": 0.75, "style": 0.5}
    assert s["headline_metric"] is None  # several keys and none named `reward`: Harbor reports each key


@needs_bwrap
def test_control_rows_tell_a_broken_harness_from_a_weak_policy(images, tmp_path):
    from termforge.evals.tbench import control_checks, format_controls, run_native_controls

    tasks = load_harbor_dir(TB_MINI)[:2]
    controls = run_native_controls(tasks, images, tmp_path / "ok")
    assert controls["oracle"]["mean_reward"] == 1.0 and controls["noop"]["mean_reward"] == 0.0
    assert control_checks(controls) == [] and "control oracle: mean 1.000" in format_controls(controls)
    # A harness that cannot run the oracle's solution: the control rows say so.
    broken = tmp_path / "tasks" / tasks[0].path.name
    shutil.copytree(tasks[0].path, broken)
    (broken / "solution" / "solve.sh").write_text("#!/bin/bash\nexit 0\n")
    controls = run_native_controls([load_harbor_task(broken)], images, tmp_path / "bad")
    assert control_checks(controls) == [f"oracle scores 0 on {tasks[0].name} (expected 1)"]


def test_base_images_resolve_from_termforge_images_only():
    """FROM names an image termforge has (a declared base under one of its image names, as
    Docker normalises them); anything else is an environment error naming the image and the
    command that adds it, whatever toolchains the host happens to have."""
    from termforge.evals.harbor_tasks import EnvironmentUnsupported, check_base_image

    assert check_base_image("debian:bookworm-slim") == "debian-bookworm-slim"
    assert check_base_image("docker.io/library/debian:bookworm-slim") == "debian-bookworm-slim"
    assert check_base_image("termforge/base:bookworm") == "termforge-bookworm"
    for image in ("python:3.11-slim-bookworm", "ubuntu:24.04", "rust:1.80-bookworm", "debian", "alpine:3.19",
                  "ghcr.io/laude-institute/t-bench/python-3-11:20250620"):
        with pytest.raises(EnvironmentUnsupported, match=re.escape(
                f"base image {image} is not in termforge's image store; add it with `termforge images add {image}")):
            check_base_image(image)
