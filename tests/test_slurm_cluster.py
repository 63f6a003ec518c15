"""profiles/slurm on a real single-node Slurm (scripts/slurm-test-cluster.sh).

Which partition a job ran in is read from Slurm's own completion record (jobcomp/filetxt),
matched by the job id each job wrote into its output.
"""

import json
import subprocess
import sys

import pytest
import yaml
from slurm_helpers import (  # noqa: F401  (slurm_cluster is a fixture pytest finds by name)
    CLUSTER_SCRIPT,
    REPO_ROOT,
    parse_jobcomp_line,
    run_snakemake_on_slurm,
    slurm_cluster,
)

SMOKE_SNAKEFILE = REPO_ROOT / "tests" / "data" / "slurm_smoke" / "Snakefile"


def test_jobcomp_line_parses_into_slurm_fields():
    line = (
        "JobId=12 UserId=root(0) GroupId=root(0) Name=run-uuid JobState=COMPLETED Partition=gpu "
        "TimeLimit=5 NodeList=vm NodeCnt=1 ProcCnt=1 WorkDir=/tmp/a dir/with spaces "
        "ReservationName= Tres=cpu=1,mem=256M,node=1,billing=1 Account= ExitCode=0:0 \n"
    )
    record = parse_jobcomp_line(line)
    assert record["JobId"] == "12"
    assert record["Partition"] == "gpu"
    assert record["WorkDir"] == "/tmp/a dir/with spaces"
    assert record["ReservationName"] == ""
    assert record["Tres"] == "cpu=1,mem=256M,node=1,billing=1"
    assert record["ExitCode"] == "0:0"


@pytest.mark.parametrize("profile", ["local", "slurm"])
def test_profile_is_accepted_by_snakemake(profile, tmp_path):
    """Every key of the profile is a real option of this Snakemake and plugin version:
    a dry run rejects unknown ones, and needs no cluster."""
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", str(REPO_ROOT / "profiles" / profile),
         "--snakefile", str(SMOKE_SNAKEFILE), "--directory", str(tmp_path), "--dry-run"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cpu_job" in result.stdout and "gpu_job" in result.stdout


def test_slurm_profile_sets_no_account():
    """The plugin validates an account with sacctmgr, which fails without slurmdbd."""
    profile = yaml.safe_load((REPO_ROOT / "profiles" / "slurm" / "profile.yaml").read_text())
    assert not any(str(r).startswith("slurm_account") for r in profile["default-resources"])
    assert profile["slurm-status-command"] == "squeue"


@pytest.mark.slow
def test_cluster_start_is_idempotent(slurm_cluster):
    again = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout
    status = subprocess.run(["bash", str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0
    assert "cpu*" in status.stdout and "gpu" in status.stdout


@pytest.mark.slow
def test_slurm_profile_runs_cpu_and_gpu_rules_in_their_partitions(slurm_cluster, tmp_path):
    result = run_snakemake_on_slurm(SMOKE_SNAKEFILE, tmp_path)
    assert result.returncode == 0, f"snakemake failed:\n{result.stdout[-4000:]}{result.stderr[-8000:]}"

    jobs = {
        rule: json.loads((tmp_path / "results" / f"{rule}.json").read_text())
        for rule in ("cpu_job", "gpu_job")
    }
    job_ids = [jobs[rule]["slurm_job_id"] for rule in jobs]
    assert "unset" not in job_ids, f"a rule ran outside Slurm: {jobs}"

    records = slurm_cluster.records_for(job_ids)
    assert set(records) == set(job_ids), f"Slurm recorded {sorted(records)}, jobs were {job_ids}"
    cpu_record = records[jobs["cpu_job"]["slurm_job_id"]]
    gpu_record = records[jobs["gpu_job"]["slurm_job_id"]]

    assert cpu_record["Partition"] == "cpu"
    assert gpu_record["Partition"] == "gpu"
    for record in (cpu_record, gpu_record):
        assert record["JobState"] == "COMPLETED"
        assert record["ExitCode"] == "0:0"
        assert record["WorkDir"] == str(tmp_path)
    # Snakemake names every job of one run after the run's uuid.
    assert cpu_record["Name"] == gpu_record["Name"]

    # What the jobs saw agrees with what Slurm recorded, and only the GPU job got the GPU.
    assert jobs["cpu_job"]["partition"] == "cpu"
    assert jobs["gpu_job"]["partition"] == "gpu"
    assert jobs["gpu_job"]["cuda_visible_devices"] == "0"
    assert jobs["cpu_job"]["cuda_visible_devices"] == "unset"
