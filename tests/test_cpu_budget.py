"""termforge.cpu_budget: the threads a compute process may use on a shared node, and OpenMP's
passive wait policy (docs/opsd.md, "Training on a shared machine")."""

from __future__ import annotations

from pathlib import Path

from termforge.cpu_budget import allotted_cpus, cgroup_cpu_quota, passive_openmp_env


def test_the_smallest_limit_wins_and_processes_share_it():
    assert allotted_cpus({}, affinity=16, quota=0) == 16
    assert allotted_cpus({"TERMFORGE_JOB_THREADS": "2"}, affinity=16, quota=0) == 2
    assert allotted_cpus({"TERMFORGE_JOB_THREADS": "8"}, affinity=4, quota=0) == 4  # the affinity is tighter
    assert allotted_cpus({"TERMFORGE_JOB_THREADS": "8"}, affinity=16, quota=3) == 3
    # torchrun's processes on one node split the job's threads; never below one.
    assert allotted_cpus({"TERMFORGE_JOB_THREADS": "8", "LOCAL_WORLD_SIZE": "2"}, affinity=16, quota=0) == 4
    assert allotted_cpus({"TERMFORGE_JOB_THREADS": "1", "LOCAL_WORLD_SIZE": "4"}, affinity=16, quota=0) == 1
    # Values that are not a positive count are ignored, not trusted.
    assert allotted_cpus({"TERMFORGE_JOB_THREADS": "0", "LOCAL_WORLD_SIZE": "x"}, affinity=6, quota=0) == 6
    assert allotted_cpus({"TERMFORGE_JOB_THREADS": "-3"}, affinity=6, quota=0) == 6


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_quota_v2_and_v1_with_the_tightest_ancestor(tmp_path):
    v2 = tmp_path / "v2"
    _write(v2 / "job" / "step" / "cpu.max", "max 100000\n")
    _write(v2 / "job" / "cpu.max", "250000 100000\n")  # 2.5 CPUs: 3 threads
    assert cgroup_cpu_quota("0::/job/step\n", v2) == 3
    _write(v2 / "cpu.max", "100000 100000\n")  # the root allows one
    assert cgroup_cpu_quota("0::/job/step\n", v2) == 1

    v1 = tmp_path / "v1"
    _write(v1 / "cpu,cpuacct" / "slurm" / "cpu.cfs_quota_us", "400000\n")
    _write(v1 / "cpu,cpuacct" / "slurm" / "cpu.cfs_period_us", "100000\n")
    _write(v1 / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    _write(v1 / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota("4:memory:/slurm\n3:cpu,cpuacct:/slurm\n", v1) == 4
    assert cgroup_cpu_quota("0::/\n", tmp_path / "missing") is None  # nothing readable: no quota


def test_openmp_threads_wait_passively_unless_the_user_chose():
    env: dict = {}
    passive_openmp_env(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    passive_openmp_env(env)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"


def test_every_command_sets_the_passive_wait_policy_before_torch_loads(monkeypatch):
    """solve, the evals and serving load torch too, not only training: main() sets it for all."""
    import os

    import pytest

    from termforge.cli import main

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with pytest.raises(SystemExit):
        main(["solve", "--help"])
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_local_model_generates_with_the_jobs_threads_not_every_core(monkeypatch):
    from types import SimpleNamespace

    from transformers import LlamaConfig, LlamaForCausalLM

    from termforge.models.transformers_backend import TransformersChatModel

    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    tokenizer = SimpleNamespace(eos_token_id=1, pad_token_id=0)
    monkeypatch.setenv("TERMFORGE_JOB_THREADS", "1")
    assert TransformersChatModel("tiny", loaded=(model, tokenizer)).num_threads == 1
    # An explicit setting (models.<name>.num_threads) still wins.
    assert TransformersChatModel("tiny", loaded=(model, tokenizer), num_threads=3).num_threads == 3
