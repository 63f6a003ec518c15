"""The termforge workflow on a real single-node Slurm through profiles/slurm: CPU rules land in
the `cpu` partition, GPU rules in `gpu` (read from Slurm's own job-completion records), and the
outputs equal a local run's."""

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import REPO_ROOT, run_snakemake_on_slurm, slurm_cluster  # noqa: F401

from termforge.io import read_json, read_jsonl

SUBMITTED_RE = re.compile(r"SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_([A-Za-z0-9_]+)/")
GPU_RULES = {"train_opsd", "eval_aime", "eval_tbench"}
OVERLAY = """
corpus: {n_tasks: 2, shard_size: 2}
solve: {agent: oracle, k: 1}
math_data: {n: 8, heldout_fraction: 0.25}
eval:
  aime: {max_problems: 1, n: 1, sampling: {temperature: 1.0, top_p: 0.95, top_k: 0, max_new_tokens: 8}}
  tbench: {enabled: false}
train: {max_steps: 1, prompts_per_step: 2, max_new_tokens: 8, probe_size: 1, probe_max_new_tokens: 8,
        checkpoint_every: 0}
cluster: {cpu_threads: 1, cpus_per_gpu: 1, mem_mb_cpu: 2000, mem_mb_gpu: 3000, runtime_min_cpu: 30,
          runtime_min_gpu: 30}
"""
COMPARED = ("results/axes/signatures.jsonl", "results/corpus/manifest.json", "results/export/dataset/train.parquet",
            "results/solve/passk.csv", "results/data/math/heldout.jsonl")


def _workdir(path: Path) -> Path:
    import yaml

    path.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    base["ablations"] = {"fkl": {}}  # one trained policy is enough to place a training job
    (path / "config.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (path / "small.yaml").write_text(OVERLAY)
    (path / "benchmarks").symlink_to(REPO_ROOT / "benchmarks")
    return path


@pytest.mark.slow
@pytest.mark.extended  # the gate: test_slurm_cluster.py runs CPU and GPU rules through the profile
def test_workflow_runs_on_slurm_in_the_right_partitions(slurm_cluster, tmp_path):
    slurm_dir = _workdir(tmp_path / "slurm")
    result = run_snakemake_on_slurm(REPO_ROOT / "Snakefile", slurm_dir, "--configfile", str(slurm_dir / "small.yaml"),
                                    timeout_s=1500)
    assert result.returncode == 0, f"snakemake failed:\n{result.stdout[-4000:]}{result.stderr[-8000:]}"
    submitted = {job_id: rule for job_id, rule in SUBMITTED_RE.findall(result.stdout + result.stderr)}
    assert submitted, "no job was submitted to Slurm"
    records = slurm_cluster.records_for(list(submitted), timeout_s=60)
    assert set(records) == set(submitted)
    rules_seen = set()
    print("\njob  rule                partition  state")
    for job_id, rule in sorted(submitted.items(), key=lambda kv: int(kv[0])):
        rec = records[job_id]
        print(f"{job_id:>4} {rule:<19} {rec['Partition']:<10} {rec['JobState']}")
        assert rec["JobState"] == "COMPLETED", rec
        assert rec["Partition"] == ("gpu" if rule in GPU_RULES else "cpu"), (rule, rec["Partition"])
        rules_seen.add(rule)
    assert {"generate", "validate", "solve", "hints", "train_opsd", "eval_aime"} <= rules_seen

    # The same config run locally (plain `snakemake`: the workflow profile) gives the same outputs;
    # here the training job has gpus_per_job: 2, so two CPU processes train, one rank each.
    local_dir = _workdir(tmp_path / "local")
    (local_dir / "two.yaml").write_text("cluster: {gpus_per_job: 2}\n")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    local = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "-s", str(REPO_ROOT / "Snakefile"),
                            "--directory", str(local_dir), "--configfile", str(local_dir / "small.yaml"),
                            str(local_dir / "two.yaml")], cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    assert local.returncode == 0, local.stderr[-4000:]
    for rel in COMPARED:
        assert filecmp.cmp(slurm_dir / rel, local_dir / rel, shallow=False), f"{rel} differs between Slurm and local"
    assert read_json(slurm_dir / "results/runs/base/eval/aime.json")["summary"]["num_problems"] == 1
    assert read_json(slurm_dir / "results/runs/fkl/train/summary.json")["steps"] == 1
    train_log = (local_dir / "results/logs/train/fkl.log").read_text()
    assert "[rank0]:" in train_log and "[rank1]:" in train_log and "[rank2]:" not in train_log, train_log[-2000:]
    assert "[rank0]:" not in (slurm_dir / "results/logs/train/fkl.log").read_text()  # one GPU, one process
    # Two ranks split the step's prompts: the step scores as many sequences as one process does.
    one, two = (read_jsonl(d / "results/runs/fkl/train/metrics.jsonl") for d in (slurm_dir, local_dir))
    assert [m["sequences"] for m in one] == [m["sequences"] for m in two] == [2]


@pytest.mark.slow
def test_a_request_no_node_can_run_stops_before_submitting(slurm_cluster, tmp_path):
    """The stock `cluster:` block (8 CPUs per GPU, 64 GB) on the small test node: one line naming
    the rules, their ask, the node and the keys, and not a single job submitted."""
    work = _workdir(tmp_path / "stock")
    before = len(slurm_cluster.records())
    result = run_snakemake_on_slurm(REPO_ROOT / "Snakefile", work, timeout_s=300)
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("termforge: cluster check:")]
    assert len(lines) == 1, result.stderr[-3000:]
    assert re.search(r"rules eval_aime, eval_tbench, train_opsd ask 8 CPUs, 65536 MB, 1 GPU, 720 min in "
                     r"partition 'gpu'; the largest node there \(\S+\) has \d+ CPUs, \d+ MB, 1 fake GPU; "
                     r"change cluster.cpus_per_gpu, cluster.mem_mb_gpu$", lines[0]), lines[0]
    assert "SLURM jobid" not in result.stdout + result.stderr
    assert len(slurm_cluster.records()) == before
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip() == ""

    # `termforge check-cluster` says the same on demand, for every rule of the workflow (also
    # serve_policy, which this config does not run), and passes the overlay that fits.
    cli = [sys.executable, "-m", "termforge.cli", "check-cluster"]
    stock = subprocess.run(cli, cwd=REPO_ROOT, capture_output=True, text=True)
    assert stock.returncode == 1, stock.stderr
    assert lines[0].replace("eval_tbench, train_opsd", "eval_tbench, serve_policy, train_opsd") in stock.stderr
    fits = subprocess.run([*cli, "--configfile", str(work / "small.yaml")], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    assert fits.returncode == 0 and "NO:" not in fits.stdout, fits.stdout + fits.stderr
    assert re.search(r"eval_aime, eval_tbench, serve_policy, train_opsd\s+gpu\s+1 CPU, 3000 MB, 1 GPU, 30 min", fits.stdout)


@pytest.mark.slow
def test_a_served_policy_group_that_no_node_fits_stops_before_submitting(slurm_cluster, tmp_path):
    """Each rule fits the 2-CPU node, but the server and both solve shards run as one job (a
    Snakemake service group) asking for 3 CPUs: named as a group, with the keys that shrink it."""
    work = _workdir(tmp_path / "served")
    (work / "served.yaml").write_text(
        "corpus: {n_tasks: 4, shard_size: 2}\nserve: {enabled: true}\n"
        "cluster: {cpu_threads: 1, cpus_per_gpu: 1, mem_mb_cpu: 2000, mem_mb_gpu: 3000, runtime_min_cpu: 30,"
        " runtime_min_gpu: 30}\n")
    # --cores also bounds a group job under the Slurm executor; the workflow profile's `cores: all`
    # would stop this group at this 2-core machine before the node check.
    result = run_snakemake_on_slurm(REPO_ROOT / "Snakefile", work, "--cores", "64", "results/solve/passk.json",
                                    "--configfile", str(work / "served.yaml"), timeout_s=300)
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("termforge: cluster check:")]
    assert len(lines) == 1, result.stderr[-3000:]
    assert re.fullmatch(r"termforge: cluster check: the group job of serve_policy, solve x2 \(one Slurm job, all at "
                        r"once\) asks 3 CPUs, 7000 MB, 1 GPU, 30 min in partition 'gpu'; the largest node there "
                        r"\(\S+\) has 2 CPUs, \d+ MB, 1 fake GPU; change cluster.cpu_threads, corpus.shard_size",
                        lines[0]), lines[0]
    assert "SLURM jobid" not in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.extended  # the gate: test_serve.py serves the policy to the solve jobs locally
def test_served_policy_runs_as_one_slurm_job_with_its_solve_shards(slurm_cluster, tmp_path):
    """serve.enabled on Slurm: the server and the solve shard it serves are one group job in the
    GPU partition; the shard's rollouts went through the server, which was stopped afterwards."""
    work = _workdir(tmp_path / "served")
    (work / "served.yaml").write_text(
        "corpus: {n_tasks: 2, shard_size: 2}\nserve: {enabled: true}\n"
        "solve: {agent: model, k: 1, turn_cap: 1, concurrency: 1,"
        " sampling: {temperature: 0.7, top_p: 0.95, top_k: 0, max_new_tokens: 8}}\n"
        "cluster: {cpu_threads: 1, cpus_per_gpu: 1, mem_mb_cpu: 2000, mem_mb_gpu: 3000, runtime_min_cpu: 30,"
        " runtime_min_gpu: 30}\n")
    result = run_snakemake_on_slurm(REPO_ROOT / "Snakefile", work, "results/solve/passk.json", "--configfile",
                                    str(work / "served.yaml"), timeout_s=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}{result.stderr[-5000:]}"
    group = re.search(r"SLURM jobid (\d+) \(log: \S*/slurm_logs/group_\S+_serve_policy_solve/", result.stderr)
    assert group, result.stderr[-3000:]
    record = slurm_cluster.records_for([group.group(1)], timeout_s=60)[group.group(1)]
    assert (record["JobState"], record["Partition"]) == ("COMPLETED", "gpu")
    log = (work / "results/logs/serve_policy.log").read_text()
    pid = int(re.search(r"\(pid (\d+)\)", log).group(1))
    assert int(re.search(r"stopped after (\d+) chat requests", log).group(1)) >= 1
    assert read_json(work / "results/solve/00000.json")["model"] == "openai:smollm2-135m-instruct"
    assert not Path(f"/proc/{pid}").exists(), "the policy server outlived its job"
