"""The served policy (termforge.serve, rule serve_policy): a real OpenAI-protocol server over the
embedded SmolLM2 answers a real client, stops on SIGTERM and when orphaned, and inside the
workflow the solve jobs go through it and it is gone afterwards."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from termforge.io import read_json
from termforge.serve import vllm_serve_args, wait_until_healthy

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", HF_HUB_OFFLINE="1")


def test_vllm_flags_come_from_the_model_spec():
    spec = {"backend": "vllm", "model": "Qwen/Qwen3-1.7B", "dtype": "bfloat16", "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.9, "max_model_len": None, "engine_seed": 7,
            "engine_kwargs": {"data_parallel_size": 2, "enable_prefix_caching": True, "enforce_eager": False}}
    assert vllm_serve_args(spec, ["--served-model-name", "policy"]) == [
        "--dtype", "bfloat16", "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.9",
        "--data-parallel-size", "2", "--enable-prefix-caching", "--seed", "7", "--served-model-name", "policy"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not yet reaped by its parent.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def _port_open(url: str) -> bool:
    host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def _wait_for(path: Path, proc, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        assert time.monotonic() < deadline, "server did not announce itself"
        time.sleep(0.2)
    return read_json(path)


def _serve_cmd(tmp_path: Path) -> list[str]:
    (tmp_path / "config.yaml").write_text((REPO / "config.yaml").read_text())
    return [sys.executable, "-m", "termforge.cli", "serve-policy", "--configfile", str(tmp_path / "config.yaml"),
            "--out", str(tmp_path / "policy.json"), "--log", str(tmp_path / "serve.log")]


def test_server_answers_a_client_and_stops_on_sigterm(tmp_path):
    from termforge.models.base import SamplingParams
    from termforge.models.registry import make_model
    from termforge.serve import served_model_spec

    proc = subprocess.Popen(_serve_cmd(tmp_path), cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        info = _wait_for(tmp_path / "policy.json", proc)
        assert info["model"] == "smollm2-135m-instruct" and info["pid"] == proc.pid
        client = make_model(served_model_spec(tmp_path / "policy.json", concurrency=1))
        replies = client.chat([{"role": "user", "content": "Say hi."}], n=2,
                              sampling=SamplingParams(max_new_tokens=4, seed=1))
        assert len(replies) == 2 and all(r.completion_tokens >= 1 for r in replies)
        assert client.model_id == "openai:smollm2-135m-instruct"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert not _port_open(info["base_url"])
    assert "stopped after 1 chat requests" in (tmp_path / "serve.log").read_text()


def test_an_orphaned_server_stops_on_its_own(tmp_path):
    """A job killed without a signal to the server (SIGKILL to its shell) must not leave the
    server running: it watches its parent."""
    shell = subprocess.Popen(["bash", "-c", " ".join(_serve_cmd(tmp_path)) + " & wait"], cwd=tmp_path, env=ENV)
    info = _wait_for(tmp_path / "policy.json", shell)
    wait_until_healthy(info, "test")
    assert _alive(info["pid"])
    shell.kill()
    shell.wait()
    deadline = time.monotonic() + 30
    while _alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(info["pid"]), "the server outlived its job"


SERVED = """
corpus: {n_tasks: 2, shard_size: 2}
solve: {agent: model, k: 1, turn_cap: 1, concurrency: 1,
        sampling: {temperature: 0.7, top_p: 0.95, top_k: 0, max_new_tokens: 8}}
serve: {enabled: true}
cluster: {cpu_threads: 1, cpus_per_gpu: 1}
"""


@pytest.mark.slow
def test_workflow_serves_the_policy_to_the_solve_jobs_and_stops_it(tmp_path):
    (tmp_path / "config.yaml").write_text((REPO / "config.yaml").read_text())
    (tmp_path / "served.yaml").write_text(SERVED)
    (tmp_path / "benchmarks").symlink_to(REPO / "benchmarks")
    res = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "-s", str(REPO / "Snakefile"),
                          "--directory", str(tmp_path), "results/solve/passk.json",
                          "--configfile", str(tmp_path / "served.yaml")],
                         cwd=REPO, env=ENV, capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stderr[-5000:]
    assert "Terminating service job" in res.stderr
    log = (tmp_path / "results/logs/serve_policy.log").read_text()
    pid = int(re.search(r"serving 'smollm2-135m-instruct' at \S+ \(pid (\d+)\)", log).group(1))
    answered = int(re.search(r"stopped after (\d+) chat requests", log).group(1))
    solved = read_json(tmp_path / "results/solve/00000.json")
    assert solved["model"] == "openai:smollm2-135m-instruct"  # through the server, not in process
    assert answered >= 1
    assert not _alive(pid)
    leftovers = subprocess.run(["pgrep", "-f", f"serve-policy.*{tmp_path}"], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", leftovers.stdout
    # A second run has nothing to do: the service output's absence does not re-trigger solving.
    again = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "-s", str(REPO / "Snakefile"),
                            "--directory", str(tmp_path), "-n", "results/solve/passk.json",
                            "--configfile", str(tmp_path / "served.yaml")],
                           cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert "Nothing to be done" in again.stdout + again.stderr, json.dumps(again.stdout[-2000:])
