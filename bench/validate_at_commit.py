"""Validate a fixed sample with whatever termforge is on the import path: the baseline side of
bench/bench_validate.py --baseline, which runs this script with an older commit's src/ first on
PYTHONPATH. Uses only what every commit since the validation stage began has: all_families,
generate_task, BwrapRuntime, validate_task and Limits, each called as the validate rule of that
commit called it (its own defaults for everything else).

    python bench/validate_at_commit.py --families-only          # the family names this commit has
    python bench/validate_at_commit.py SAMPLE.json --workers 2   # validate; one JSON line at the end

SAMPLE.json is a list of {"family": NAME, "signature": {...}}. The tasks are generated and built
first, one task is validated once to warm up (not counted), then all are validated `--workers` at
a time. The last line printed is JSON: the wall seconds of that phase, the CPU seconds its
cgroup used (sandboxes included; null without --cpu-usage-file), and each task's verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def cpu_seconds(path: str | None) -> float | None:
    """CPU seconds used so far in the cgroup whose usage file is `path` (v2 cpu.stat, v1
    cpuacct.usage): the one bench_validate made for this process, so sandboxes are counted too."""
    if not path:
        return None
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    if path.endswith("cpu.stat"):
        rows = [r.split() for r in text.splitlines() if r.startswith("usage_usec")]
        return int(rows[0][1]) / 1e6 if rows else None
    return int(text) / 1e9


def main() -> int:
    from termforge.generate.families import all_families
    from termforge.generate.procedural import generate_task
    from termforge.quality.validate import validate_task
    from termforge.runtime.base import Limits
    from termforge.images.runtimes import BwrapRuntime

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sample", nargs="?", help="the sample: a JSON list of {family, signature}")
    ap.add_argument("--families-only", action="store_true", help="print this commit's family names and stop")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limits", default='{"wall_sec": 120, "cpu_sec": 120, "memory_mb": 4096}')
    ap.add_argument("--cpu-usage-file", help="the usage file of the cgroup this process runs in (for its CPU)")
    args = ap.parse_args()
    families = {f.name: f for f in all_families()}
    if args.families_only:
        print(json.dumps(sorted(families)))
        return 0
    jobs = json.loads(Path(args.sample).read_text())
    limits = Limits(**json.loads(args.limits))
    with tempfile.TemporaryDirectory(prefix="tf-validate-at-commit-") as tmp:
        root = Path(tmp)
        tasks = [generate_task(j["signature"], root / "tasks", families=[families[j["family"]]]) for j in jobs]
        runtime = BwrapRuntime()
        for task in tasks:
            runtime.build(task, root / "images", timeout=limits.wall_sec * 2)
        validate_task(tasks[0], BwrapRuntime(), root / "images", limits)  # warm-up, not counted
        verdicts = {}

        def one(item):
            n, task = item
            v = validate_task(task, BwrapRuntime(), root / "images", limits)
            verdicts[task.name] = [v.kept, v.stage, v.reason]
            print(f"[{n + 1}/{len(tasks)}] baseline {task.name}: {v.stage}: {v.reason[:120]}", flush=True)

        cpu0, t0 = cpu_seconds(args.cpu_usage_file), time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            list(pool.map(one, enumerate(tasks)))
        wall, cpu1 = time.monotonic() - t0, cpu_seconds(args.cpu_usage_file)
    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "verdicts": verdicts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
