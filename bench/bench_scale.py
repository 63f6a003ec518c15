"""The data half at a measured scale: sample, generate, build, decontaminate, validate and the corpus
manifest, run through the real `termforge` CLI (the commands the Snakemake rules run) on --tasks
tasks, each stage timed from the kernel's own accounting of its process (user + system CPU seconds,
peak RSS). Prints per-stage throughput in tasks per second per core, and projects core-hours and
Slurm jobs for a --project-size corpus with the shard size of --overlay (one generate, build and
validate job per shard, one sample, decontaminate and manifest job). Ends with the report's
honoured-axis table for the run.

    .venv/bin/python bench/bench_scale.py --tasks 200            # validation in bwrap dominates
    .venv/bin/python bench/bench_scale.py --tasks 40 --shard-size 20
"""

from __future__ import annotations

import argparse
import csv
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_args import existing
from termforge.config import load_config
from termforge.params import stage_params_json

ROOT = Path(__file__).resolve().parents[1]
TERMFORGE = [sys.executable, "-m", "termforge.cli"]


def timed_stage(workdir: Path, *args: str) -> tuple[float, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*TERMFORGE, *args], cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"termforge {args[0]} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far (KiB on Linux): a lower bound per stage.
    return wall, cpu, after.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--shard-size", type=int, default=50)
    ap.add_argument("--overlay", default="configs/tmax15k.yaml", help="the full-scale config to project for")
    ap.add_argument("--project-size", type=int, default=15_000)
    ap.add_argument("--keep", help="run in this directory and keep it")
    args = ap.parse_args()
    existing("--overlay", ROOT / args.overlay)  # before any work is set up

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "benchmarks", work / "benchmarks", dirs_exist_ok=True)
    overlay = work / "overlay.yaml"
    overlay.write_text(f"corpus: {{n_tasks: {args.tasks}, shard_size: {args.shard_size}}}\n"
                       "generate: {workers: 1}\nvalidate: {workers: 1}\n")
    cfg = load_config([ROOT / "config.yaml", overlay])
    full = load_config([ROOT / "config.yaml", ROOT / args.overlay])
    shards = [f"{s:05d}" for s in range(-(-args.tasks // args.shard_size))]
    manifests = [f"results/tasks/manifests/{s}.json" for s in shards]
    stages: dict[str, list[float]] = {}

    def add(stage: str, result: tuple[float, float, float]) -> None:
        cell = stages.setdefault(stage, [0.0, 0.0, 0.0, 0])
        cell[0] += result[0]
        cell[1] += result[1]
        cell[2] = max(cell[2], result[2])
        cell[3] += 1

    try:
        add("sample", timed_stage(work, "sample-axes", "--params", stage_params_json(cfg, "sample_axes"),
                                  "--out", "results/axes/signatures.jsonl", "--stats", "results/axes/stats.json"))
        for shard, manifest in zip(shards, manifests):
            add("generate", timed_stage(work, "generate", "--params", stage_params_json(cfg, "generate"),
                                        "--signatures", "results/axes/signatures.jsonl", "--shard", shard,
                                        "--tasks-dir", "results/tasks", "--out", manifest))
        for shard, manifest in zip(shards, manifests):
            add("build", timed_stage(work, "build-images", "--params", stage_params_json(cfg, "build_images"),
                                     "--manifest", manifest, "--images-dir", "results/images",
                                     "--out", f"results/images/manifests/{shard}.json"))
        add("decontaminate", timed_stage(work, "decontaminate", "--params", stage_params_json(cfg, "decontaminate"),
                                         "--manifests", *manifests, "--out", "results/decontam/report.json"))
        verdicts = []
        for shard, manifest in zip(shards, manifests):
            verdicts.append(f"results/validate/{shard}.json")
            add("validate", timed_stage(work, "validate", "--params", stage_params_json(cfg, "validate"),
                                        "--manifest", manifest, "--images-dir", "results/images",
                                        "--decontam", "results/decontam/report.json", "--out", verdicts[-1]))
        add("manifest", timed_stage(work, "corpus-manifest", "--verdicts", *verdicts,
                                    "--out", "results/corpus/manifest.json"))
        add("report", timed_stage(work, "report", "--results", "results", "--out", "results/report.html",
                                  "--tables", "results/report"))

        n = args.tasks
        full_shards = -(-args.project_size // full["corpus"]["shard_size"])
        print(f"data half on {n} tasks ({len(shards)} shards of {args.shard_size}), one worker per stage")
        # CPU seconds are what the kernel charged to the stage and its reaped descendants; a
        # sandboxed process may escape that accounting, and a stage also waits (timeouts, sleeps),
        # so wall seconds of a one-worker stage are the upper bound a Slurm allocation must cover.
        print(f"{'stage':<14}{'jobs':>6}{'wall s':>9}{'CPU s':>9}{'tasks/s/core':>14}{'peak MiB':>10}"
              f"{'core-h CPU':>12}{'core-h wall':>13}{'Slurm jobs':>12}   (projected to {args.project_size})")
        total_cpu_h = total_wall_h = 0.0
        for stage, (wall, cpu, rss, jobs) in stages.items():
            cpu_h, wall_h = cpu / n * args.project_size / 3600, wall / n * args.project_size / 3600
            total_cpu_h += cpu_h
            total_wall_h += wall_h
            jobs_full = full_shards if stage in ("generate", "build", "validate") else 1
            print(f"{stage:<14}{jobs:>6}{wall:>9.1f}{cpu:>9.1f}{n / max(cpu, 1e-9):>14.1f}{rss:>10.0f}"
                  f"{cpu_h:>12.2f}{wall_h:>13.2f}{jobs_full:>12}")
        print(f"projected for {args.project_size} tasks ({args.overlay}: shard_size {full['corpus']['shard_size']}, "
              f"{full_shards} shards): {total_cpu_h:.1f} core-hours by CPU, at most {total_wall_h:.1f} by wall "
              f"time; {3 * full_shards + 4} Slurm jobs (decontaminate is one job over all shards)")
        table = next((work / "results" / "report").rglob("honoured_axes.csv"), None)
        if table is not None:
            print("\nhonoured per axis (this run's report):")
            with open(table) as fh:
                for row in csv.DictReader(fh):
                    print(f"  {row['axis']:<42} {row['honoured']:>5}/{row['tasks']:<5} {float(row['share']):6.1%}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
