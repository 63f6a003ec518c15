"""Cost of the input checks on a corpus-scale solve record, against plain json.loads.

A synthetic solve record of --tasks tasks x --k rollouts (each task directory laid out as the
task contract has it: task.json, instruction.md, environment/, tests/, solution/, private/) is
read three ways in one process: plain `json.loads` (the baseline: what the stages did before),
`schemas.read` the first time (parse + JSON Schema check + task-directory checks, including the
containment walk of every task tree: what the CLI does before a command runs) and `schemas.read`
again (what the stage's own reader then costs, the file being unchanged). Prints seconds (best
of --repeat) and ratios to the baseline.

    .venv/bin/python bench/bench_input_checks.py               # 15,000 tasks x 8 rollouts
    .venv/bin/python bench/bench_input_checks.py --tasks 2000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from termforge import schemas


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=15000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-input-checks-") as tmp:
        root = Path(tmp)
        tasks = root / "tasks"
        # Task trees laid out as the task contract has them: the checks walk every one.
        layout = ("task.json", "instruction.md", "environment/setup.sh", "environment/Dockerfile",
                  "environment/container.def", "environment/fixtures/.keep", "tests/test.sh",
                  "tests/test_initial_state.py", "tests/test_final_state.py", "solution/solve.sh",
                  "private/truth.json", "private/method.md")
        for i in range(a.tasks):
            for rel in layout:
                f = tasks / f"tf-{i:06d}" / rel
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text("{}")
        rollouts = [{"task_id": f"tf-{i:06d}", "rollout": r, "status": "graded", "reward": float(r % 2),
                     "trajectory": f"results/solve/trajectories/tf-{i:06d}/rollout-{r}.json"}
                    for i in range(a.tasks) for r in range(a.k)]
        path = root / "results" / "solve" / "00000.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"shard": "00000", "tasks_dir": str(tasks), "k": a.k, "model": "m",
                                    "rollouts": rollouts}, indent=2))

        def best(fn) -> float:
            times = []
            for _ in range(a.repeat):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            return min(times)

        baseline = best(lambda: json.loads(path.read_text()))

        def first() -> None:
            schemas._CHECKED.clear()
            schemas.read("solve_records", path)

        checked = best(first)
        schemas.read("solve_records", path)
        again = best(lambda: schemas.read("solve_records", path))
        n = len(rollouts)
        print(f"{n} rollouts over {a.tasks} tasks ({path.stat().st_size / 1e6:.1f} MB)")
        print(f"json.loads (baseline)        {baseline:.3f}s")
        print(f"schemas.read, first (checks) {checked:.3f}s  ratio {checked / baseline:.1f}x")
        print(f"schemas.read, unchanged file {again:.3f}s  ratio {again / baseline:.2f}x")


if __name__ == "__main__":
    main()
