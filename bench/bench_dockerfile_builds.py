"""Dockerfile build time (termforge.images.dockerfile) against a baseline source tree: the same
tb-mini task's Dockerfile, given a fresh token each time so nothing is cached, built alternately by
this tree and by the baseline's (e.g. a checkout before the RUN step sandbox), median of each and
their ratio. Each build runs in its own process with that tree first on PYTHONPATH.

    .venv/bin/python bench/bench_dockerfile_builds.py --baseline-src /path/to/checkout/src [--task log-error-summary] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_args import existing, one_of

ROOT = Path(__file__).resolve().parents[1]
BUILD_ONCE = r"""
import secrets, shutil, sys, time
from pathlib import Path
from termforge.evals.harbor_tasks import build_harbor_image, load_harbor_task
task, work = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(task, work / "task")
dockerfile = work / "task" / "environment" / "Dockerfile"
dockerfile.write_text(dockerfile.read_text() + f"RUN echo {secrets.token_hex(8)} > /app/token\n")
start = time.monotonic()
built = build_harbor_image(load_harbor_task(work / "task"), work / "images")
if not built.ok:
    sys.exit(built.reason)
print(time.monotonic() - start)
"""


def build_seconds(src: str, task: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="tf-bench-dockerfile-") as work:
        res = subprocess.run([sys.executable, "-c", BUILD_ONCE, str(task), work], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=src))
    if res.returncode != 0:
        raise SystemExit(f"bench_dockerfile_builds: the build with {src} failed: {res.stderr.strip()[-500:]}")
    return float(res.stdout.split()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline-src", required=True, help="the src/ folder of the baseline checkout")
    ap.add_argument("--task", default="log-error-summary", help="a task of benchmarks/tb-mini")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    existing("--baseline-src", args.baseline_src)
    tasks = ROOT / "benchmarks" / "tb-mini"
    one_of("--task", args.task, sorted(p.name for p in tasks.iterdir() if (p / "environment" / "Dockerfile").is_file()))
    task = tasks / args.task
    times: dict[str, list[float]] = {"baseline": [], "this tree": []}
    for _ in range(args.rounds):
        for name, src in (("baseline", args.baseline_src), ("this tree", str(ROOT / "src"))):
            times[name].append(build_seconds(src, task))
            print(f"{name}: {times[name][-1]:.2f}s", flush=True)
    base, this = statistics.median(times["baseline"]), statistics.median(times["this tree"])
    print(f"\n{args.task}, {args.rounds} rounds: median build {this:.2f}s vs baseline {base:.2f}s "
          f"(ratio {this / base:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
