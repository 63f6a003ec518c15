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
cgroup used (sandboxes included; null where this process has no cgroup of its own to read), and
each task's verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def cgroup_cpu_seconds() -> float | None:
    """CPU seconds used so far in this process's own cgroup (v2 cpu.stat, or v1 cpuacct)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        try:
            if hier == "0" and not controllers:
                for row in Path(f"/sys/fs/cgroup{path}/cpu.stat").read_text().splitlines():
                    if row.startswith("usage_usec"):
                        return int(row.split()[1]) / 1e6
            elif "cpuacct" in controllers.split(","):
                for mount in ("cpuacct", "cpu,cpuacct"):
                    usage = Path(f"/sys/fs/cgroup/{mount}{path}/cpuacct.usage")
                    if usage.exists():
                        return int(usage.read_text()) / 1e9
        except (OSError, ValueError):
            continue
    return None


def main() -> int:
    from termforge.generate.families import all_families
    from termforge.generate.procedural import generate_task
    from termforge.quality.validate import validate_task
    from termforge.runtime.base import Limits
    from termforge.runtime.bwrap import BwrapRuntime

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sample", nargs="?", help="the sample: a JSON list of {family, signature}")
    ap.add_argument("--families-only", action="store_true", help="print this commit's family names and stop")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limits", default='{"wall_sec": 120, "cpu_sec": 120, "memory_mb": 4096}')
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

        cpu0, t0 = cgroup_cpu_seconds(), time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            list(pool.map(one, enumerate(tasks)))
        wall, cpu1 = time.monotonic() - t0, cgroup_cpu_seconds()
    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "verdicts": verdicts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
