"""The single-node test Slurm cluster (scripts/slurm-test-cluster.sh), for tests that need one.

Use the session fixture in a test module (or conftest.py):

    from slurm_helpers import slurm_cluster  # noqa: F401  (pytest finds fixtures by name)

    @pytest.mark.slow
    def test_something(slurm_cluster, tmp_path):
        result = run_snakemake_on_slurm(SNAKEFILE, tmp_path)
        records = slurm_cluster.records_for(job_ids)

The fixture skips (with the reason) where the cluster cannot run here: not root, or Slurm and
munge are not installed. Where it can run but fails to start, the test errors with the
script's own message.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = REPO_ROOT / "scripts" / "slurm-test-cluster.sh"
SLURM_PROFILE = REPO_ROOT / "profiles" / "slurm"

# The profile's first status check waits 10 s, then 20 s, 30 s ... while nothing finishes;
# jobs here take seconds, so tests poll squeue every 2 s (still far below MinJobAge / 3).
FAST_STATUS_CHECKS = ("--slurm-init-seconds-before-status-checks", "2")

# One jobcomp/filetxt line is `Key=value Key=value ...`; a value runs until the next ` Key=`,
# so values with spaces (WorkDir, Name) survive as long as they hold no ` Word=` themselves.
_JOBCOMP_FIELD = re.compile(r"(\w+)=(.*?)(?= \w+=|\s*$)")


def cluster_unavailable_reason() -> str | None:
    """Why the test cluster cannot run on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (it writes /etc/slurm and starts slurmctld)"
    for daemon in ("slurmctld", "slurmd", "munged"):
        if shutil.which(daemon) is None and not Path("/usr/sbin", daemon).exists():
            return f"{daemon} is not installed (apt-get install slurm-wlm munge)"
    return None


def _run_script(action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), action], capture_output=True, text=True, timeout=180
    )


def cluster_is_running() -> bool:
    return _run_script("status").returncode == 0


def start_cluster() -> Path:
    """Start the cluster (a no-op when it is up) and return its job-completion file."""
    result = _run_script("start")
    if result.returncode != 0:
        raise RuntimeError(
            f"{CLUSTER_SCRIPT.name} start failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return jobcomp_path()


def stop_cluster() -> None:
    result = _run_script("stop")
    if result.returncode != 0:
        raise RuntimeError(
            f"{CLUSTER_SCRIPT.name} stop failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )


def jobcomp_path() -> Path:
    """The JobCompLoc the running slurmctld writes to (asked of Slurm, not assumed)."""
    config = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "JobCompLoc":
            return Path(value.strip())
    raise RuntimeError("'scontrol show config' has no JobCompLoc; is JobCompType=jobcomp/filetxt set?")


def parse_jobcomp_line(line: str) -> dict[str, str]:
    return {key: value for key, value in _JOBCOMP_FIELD.findall(line.strip())}


def jobcomp_records(path: Path) -> list[dict[str, str]]:
    """Every job Slurm recorded as finished, in the order it finished; keys as Slurm writes
    them (JobId, JobState, Partition, ExitCode, Name, WorkDir, NodeList, ...)."""
    if not Path(path).exists():
        return []
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return [parse_jobcomp_line(line) for line in text.splitlines() if line.startswith("JobId=")]


def wait_for_jobcomp(path: Path, job_ids: list[str], timeout_s: float = 30.0) -> dict[str, dict[str, str]]:
    """The records of `job_ids`, keyed by job id, once slurmctld has written all of them."""
    wanted = {str(job_id) for job_id in job_ids}
    deadline = time.monotonic() + timeout_s
    while True:
        found = {r["JobId"]: r for r in jobcomp_records(path) if r.get("JobId") in wanted}
        if len(found) == len(wanted) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def snakemake_env() -> dict[str, str]:
    """The environment to run Snakemake in: sbatch --export=ALL hands it to every job, so a
    GPU pinning or an enclosing Slurm job of the caller must not leak into the test's jobs."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "CUDA_VISIBLE_DEVICES" and not key.startswith(("SLURM_", "SBATCH_", "SRUN_"))
    }
    # Rules call the `termforge` console script: the jobs need this environment's bin on PATH,
    # as they would after `source .venv/bin/activate`.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def run_snakemake_on_slurm(
    snakefile: Path, workdir: Path, *extra_args: str, timeout_s: float = 600
) -> subprocess.CompletedProcess:
    """`snakemake --profile profiles/slurm` for real, from the repository root."""
    command = [
        sys.executable, "-m", "snakemake",
        "--profile", str(SLURM_PROFILE),
        "--snakefile", str(snakefile),
        "--directory", str(workdir),
        *FAST_STATUS_CHECKS,
        *extra_args,
    ]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=snakemake_env(), capture_output=True, text=True, timeout=timeout_s
    )


@dataclass(frozen=True)
class SlurmCluster:
    jobcomp: Path

    def records(self) -> list[dict[str, str]]:
        return jobcomp_records(self.jobcomp)

    def records_for(self, job_ids: list[str], timeout_s: float = 30.0) -> dict[str, dict[str, str]]:
        return wait_for_jobcomp(self.jobcomp, job_ids, timeout_s)


@pytest.fixture(scope="session")
def slurm_cluster():
    """The running test cluster, stopped at the end of the session so no daemon outlives the
    tests (even one left over from a crashed session). TERMFORGE_KEEP_SLURM_CLUSTER=1 keeps it
    up for debugging; `scripts/slurm-test-cluster.sh stop` ends it then."""
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    jobcomp = start_cluster()
    try:
        yield SlurmCluster(jobcomp=jobcomp)
    finally:
        if os.environ.get("TERMFORGE_KEEP_SLURM_CLUSTER") != "1":
            stop_cluster()
