"""How many CPU threads a compute process of this job may use, and the OpenMP setting that keeps
idle threads from burning them.

torch's intra-op pool defaults to the machine's cores, whatever the job was given, and its OpenMP
threads spin between parallel regions. On a node shared with other work (a laptop, CI, a
Snakemake run with other jobs beside the trainer) that is oversubscription: the threads wait on
each other's preempted peers and spin while they wait, and a step slows by far more than its
share of the CPU. Slurm's cgroups bound a job's cores; elsewhere nothing does. So the budget is
the smallest of what the process may run on (its CPU affinity), its cgroup's CPU quota, the
threads the workflow gave the job (TERMFORGE_JOB_THREADS, Snakemake's `threads`), split over
the job's processes on this node (torchrun's LOCAL_WORLD_SIZE).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["JOB_THREADS_ENV", "allotted_cpus", "cgroup_cpu_quota", "passive_openmp_env"]

# Set by the workflow's rules to the rule's `threads` (what Snakemake or Slurm reserved for it).
JOB_THREADS_ENV = "TERMFORGE_JOB_THREADS"


def _cgroup_dirs(proc_cgroup: str, root: Path) -> list[Path]:
    """Folders of this process's CPU cgroup and its ancestors (v2 unified, or v1's cpu controller)."""
    dirs = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            base = root
        elif "cpu" in controllers.split(","):
            base = root / ("cpu,cpuacct" if (root / "cpu,cpuacct").is_dir() else "cpu")
        else:
            continue
        node = base / path.lstrip("/")
        while True:
            dirs.append(node)
            if node == base:
                break
            node = node.parent
    return dirs


def cgroup_cpu_quota(proc_cgroup: str | None = None, root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Whole CPUs the cgroup quota allows (rounded up), the tightest over the process's cgroup and
    its ancestors; None when no quota is set or cgroups cannot be read."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    best = None
    for folder in _cgroup_dirs(proc_cgroup, root):
        quota = period = None
        try:
            if (folder / "cpu.max").is_file():
                fields = (folder / "cpu.max").read_text().split()
                if fields and fields[0] != "max":
                    quota, period = int(fields[0]), int(fields[1]) if len(fields) > 1 else 100_000
            elif (folder / "cpu.cfs_quota_us").is_file():
                value = int((folder / "cpu.cfs_quota_us").read_text())
                if value > 0:
                    quota, period = value, int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        if quota and period:
            cpus = max(1, math.ceil(quota / period))
            best = cpus if best is None else min(best, cpus)
    return best


def allotted_cpus(environ: dict | None = None, *, affinity: int | None = None, quota: int | None = None) -> int:
    """CPU threads one compute process of this job should use (at least 1). affinity and quota
    are read from the system when None (quota 0: none)."""
    environ = os.environ if environ is None else environ
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    limits = [affinity]
    quota = cgroup_cpu_quota() if quota is None else quota
    if quota:
        limits.append(quota)
    job = environ.get(JOB_THREADS_ENV, "")
    if job.isdigit() and int(job) > 0:
        limits.append(int(job))
    cpus = min(limits)
    local_processes = environ.get("LOCAL_WORLD_SIZE", "")
    if local_processes.isdigit() and int(local_processes) > 1:
        cpus //= int(local_processes)
    return max(1, cpus)


def passive_openmp_env(environ: dict | None = None) -> None:
    """OpenMP threads sleep when idle instead of spinning (OMP_WAIT_POLICY=PASSIVE), unless the
    user chose otherwise. Read when the OpenMP runtime loads, i.e. when torch is first imported:
    call before that."""
    environ = os.environ if environ is None else environ
    environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
