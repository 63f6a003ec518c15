"""Network as Harbor gives it: the agent and the verifier of a task with network (Harbor's default
network_mode "public", harbor/models/task/config.py EnvironmentConfig) reach what the runner's
network reaches, so a test.sh that installs its verifier toolchain over the network (Terminal-
Bench 2.0's `curl ... | sh` then a fetched tool) runs as under Harbor; where the install host
cannot be reached, the trial is an environment error naming it, never a score.

The network is a private one: a named network namespace with only its loopback interface up,
holding a local HTTP server that stands in for the install URL and a package index. The host's
own network never sees it, which is what the unreachable case uses."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import needs_bwrap
from local_registry import free_port
from termforge.evals.harbor_tasks import (NativeOptions, build_harbor_image, load_harbor_task, native_blocker,
                                          verifier_apt_packages)
from termforge.evals.tbench import noop_agent, oracle_agent, run_native
from termforge.images.dockerfile import HOST_CA_BUNDLES

needs_netns = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="private network namespaces need root and iproute2")
ANSWER = "tf-net-answer-31"


@pytest.fixture
def private_network(tmp_path):
    """(namespace name, port): a network namespace with loopback only, serving tmp_path/www on
    127.0.0.1:port inside it; the same port is free on the host's loopback."""
    name = f"tftest{os.getpid()}{secrets.token_hex(3)}"
    port = free_port()
    www = tmp_path / "www"
    (www / "simple" / "tf-verify").mkdir(parents=True)
    (www / "install.sh").write_text(
        "#!/bin/sh\nset -e\nmkdir -p \"$HOME/.local/bin\"\n"
        f"curl -fsS http://127.0.0.1:{port}/simple/tf-verify/tf-verify -o \"$HOME/.local/bin/tf-verify\"\n"
        "chmod +x \"$HOME/.local/bin/tf-verify\"\n"
        "echo 'export PATH=\"$HOME/.local/bin:$PATH\"' > \"$HOME/.local/bin/env\"\n")
    (www / "simple" / "tf-verify" / "tf-verify").write_text(f"#!/bin/sh\n[ \"$(cat \"$1\")\" = {ANSWER} ]\n")
    (www / "answer").write_text(ANSWER + "\n")
    subprocess.run(["ip", "netns", "add", name], check=True)
    server = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-u", "-m", "http.server", str(port),
                                   "--bind", "127.0.0.1", "--directory", str(www)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            probe = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c",
                                    f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                                   capture_output=True)
            if probe.returncode == 0:
                break
            assert time.monotonic() < deadline and server.poll() is None, "the namespace's HTTP server did not start"
            time.sleep(0.1)
        yield name, port
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        subprocess.run(["ip", "netns", "delete", name], check=False)


def _install_task(root: Path, port: int, network_mode: str | None = None) -> Path:
    """A TB2-shaped task: the image installs curl; the oracle fetches its answer over the network;
    test.sh installs its checker from the install URL and runs it (the curl | sh, source env, run
    preamble of Terminal-Bench 2.0's test.sh)."""
    d = root / f"net-install-{network_mode or 'default'}"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "instruction.md").write_text("Fetch the answer and write it to /app/answer.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n' + (f'[environment]\nnetwork_mode = "{network_mode}"\n'
                                                         if network_mode else ""))
    # The image has no curl: test.sh installs it with apt-get, as Terminal-Bench 2.0's does.
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\ncurl -fsS http://127.0.0.1:{port}/answer -o /app/answer.txt\n")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "apt-get update\n"
        "apt-get install -y curl\n"
        f"curl -LsSf http://127.0.0.1:{port}/install.sh | sh\n"
        "source $HOME/.local/bin/env\n"
        "tf-verify /app/answer.txt\n"
        "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d


def _run(task_dir: Path, tmp: Path, options: NativeOptions) -> dict:
    task = load_harbor_task(task_dir)
    return {name: run_native([task], agent, 1, tmp / "images", tmp / "jobs" / f"{name}-{secrets.token_hex(2)}",
                             options=options) for name, agent in (("oracle", oracle_agent), ("noop", noop_agent))}


@needs_bwrap
@needs_netns
def test_a_test_sh_installing_its_toolchain_runs_where_the_network_reaches(tmp_path, private_network):
    name, port = private_network
    task_dir = _install_task(tmp_path / "tasks", port)
    task = load_harbor_task(task_dir)
    assert task.network_mode == "public" and native_blocker(task) is None
    assert verifier_apt_packages(task) == ["curl"]

    reached = _run(task_dir, tmp_path, NativeOptions(network_namespace=name))
    assert {k: [t.reward for t in r.trials] for k, r in reached.items()} == {"oracle": [1.0], "noop": [0.0]}, \
        {k: r.table() for k, r in reached.items()}

    # The host's network does not reach the install URL: an environment error naming it, for
    # the oracle as for the no-op agent, never a reward.
    unreached = _run(task_dir, tmp_path, NativeOptions(network_namespace=None))
    for result in unreached.values():
        (trial,) = result.trials
        assert trial.reward is None and trial.error_kind == "environment", result.table()
        assert trial.exception_type == "VerifierNetworkError"
        assert f"127.0.0.1:{port}" in trial.exception_message and "does not reach" in trial.exception_message


@needs_bwrap
def test_a_task_without_network_that_installs_its_verifier_is_refused_up_front(tmp_path):
    """network_mode no-network: the install could never happen (Harbor's docker-compose-no-network
    gives the container network_mode none), so the task is an environment error before building,
    and the line names the task's network_mode and the test.sh line."""
    task = load_harbor_task(_install_task(tmp_path / "tasks", 1, "no-network"))
    built = build_harbor_image(task, tmp_path / "images")
    assert not built.ok
    assert "tests/test.sh line 2 installs its verifier toolchain at run time (apt-get update)" in built.reason
    assert "network_mode is no-network" in built.reason


def test_a_missing_network_namespace_is_bad_input_naming_the_key(tmp_path):
    from termforge.errors import TermforgeError

    with pytest.raises(TermforgeError, match=r"eval.tbench.network_namespace: no network namespace 'tf-absent-ns'"):
        run_native([], oracle_agent, 1, tmp_path / "images", tmp_path / "job",
                   options=NativeOptions(network_namespace="tf-absent-ns"))
    with pytest.raises(TermforgeError, match="is not a network namespace name"):
        NativeOptions(network_namespace="../../proc/1/ns/net").netns_path()


@pytest.fixture
def host_http(tmp_path):
    """(port, www): a local HTTP server on the host's loopback standing in for a download URL."""
    port = free_port()
    www = tmp_path / "build-www"
    www.mkdir()
    (www / "tool").write_text(f"#!/bin/sh\necho {ANSWER}\n")
    (www / "data.txt").write_text("fetched-by-add\n")
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(www)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not start"
                time.sleep(0.1)
        yield port, www
    finally:
        server.terminate()
        server.wait(10)


def _fetching_build_task(root: Path, port: int) -> Path:
    """A task whose Dockerfile fetches its tool at build time (RUN curl, ADD of a URL) and records
    the CA bundle its RUN steps see; the oracle runs the tool."""
    d = root / "build-fetch"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "instruction.md").write_text("Run the tool; write what it prints to /app/answer.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n')
    (d / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y curl ca-certificates\n"
        f"RUN curl -fsS http://127.0.0.1:{port}/tool -o /usr/local/bin/tool && chmod 755 /usr/local/bin/tool\n"
        f"ADD http://127.0.0.1:{port}/data.txt /opt/data.txt\n"
        "RUN sha256sum < /etc/ssl/certs/ca-certificates.crt | cut -d' ' -f1 > /opt/step-ca.sum\nWORKDIR /app\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\ntool > /app/answer.txt\n")
    (d / "tests" / "test.sh").write_text(
        f"#!/bin/bash\nif [ \"$(cat /app/answer.txt)\" = {ANSWER} ] && [ \"$(cat /opt/data.txt)\" = fetched-by-add ]; "
        "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d


@needs_bwrap
def test_the_dockerfile_build_gets_the_network_and_the_hosts_ca_bundle(tmp_path, host_http):
    """RUN curl and ADD of a URL reach a local stand-in for the download host (the build's network
    is the host's, as `docker build`'s is); each RUN step sees the host's CA bundle, bound
    read-only (a TLS-intercepting proxy's root is only there), which the image never keeps."""
    import hashlib

    port, _www = host_http
    task_dir = _fetching_build_task(tmp_path / "tasks", port)
    scores = {name: [t.reward for t in r.trials] for name, r in _run(task_dir, tmp_path, NativeOptions()).items()}
    assert scores == {"oracle": [1.0], "noop": [0.0]}, scores
    built = build_harbor_image(load_harbor_task(task_dir), tmp_path / "images")
    rootfs = Path(built.image.rootfs)
    host_ca = next(Path(c) for c in HOST_CA_BUNDLES if Path(c).is_file()).read_bytes()
    # The image keeps its own bundle (the one its ca-certificates wrote), not the host's.
    image_ca = (rootfs / "etc/ssl/certs/ca-certificates.crt").read_bytes()
    if image_ca == host_ca:
        pytest.skip("the host's CA bundle is byte for byte the image's: which one a step saw cannot be told")
    assert (rootfs / "opt/step-ca.sum").read_text().split() == [hashlib.sha256(host_ca).hexdigest()]


@needs_bwrap
def test_an_offline_build_refuses_a_fetching_step_up_front(tmp_path, host_http):
    port, _www = host_http
    task = load_harbor_task(_fetching_build_task(tmp_path / "tasks", port))
    built = build_harbor_image(task, tmp_path / "images", options=NativeOptions(build_network=False))
    assert not built.ok and "needs network at build time" in built.reason and "build_network: false" in built.reason
