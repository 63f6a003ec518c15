"""Mutation kill rate per family (termforge.quality.mutation): the oracle's outputs perturbed;
answer-changing mutants must score 0 (kill rate 100%), allowed ones 1. Several seeds per family.
The exchange mutants (values moved between keys and rows with every aggregate kept:
mutation.EXCHANGE_KINDS) are counted apart as well; `--names` keeps the mutants whose name starts
with one of the given kinds (e.g. `--names values_swapped,values_rotated,fields_swapped --seeds 1`).

    .venv/bin/python bench/bench_mutation.py [--families a,b] [--seeds 3] [--names k1,k2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_args import chosen, prefixes  # noqa: E402
from conftest import make_signature  # noqa: E402
from termforge.generate.families import all_families  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.quality.mutation import EXCHANGE_KINDS, PROBE_ORDER, kill_rate, run_mutants  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--names", default="", help="only mutants whose name starts with one of these (comma-separated)")
    args = ap.parse_args()
    # Every mutant kind (termforge.quality.mutation): the probe's order holds all but the exchange ones.
    kinds = prefixes("--names", args.names, dict.fromkeys(PROBE_ORDER + EXCHANGE_KINDS)) or None
    names = chosen("--families", args.families, [f.name for f in all_families()])
    fams = [f for f in all_families() if f.name in names]
    with tempfile.TemporaryDirectory(prefix="tf-bench-mutation-") as tmp:
        root = Path(tmp)
        rt, limits = BwrapRuntime(), Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)
        total_wrong = total_killed = total_allowed = total_ok = ex_wrong = ex_killed = 0
        t0 = time.monotonic()
        print(f"{'family':32} {'killed/wrong':>13} {'allowed ok':>11} {'exchange':>9}  survivors / rejected allowed")
        for i, fam in enumerate(fams):
            results = []
            for seed in range(args.seeds):
                # Distinct indexes: families of one domain would otherwise share a task id.
                sig = make_signature(1000 * (seed + 1) + i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
                task = generate_task(sig, root / "tasks", families=[fam])
                results += run_mutants(task, rt, root / "images", limits, seed=seed, names=kinds)
            k = kill_rate(results)
            ex = kill_rate([r for r in results if r["name"].split("@")[0] in EXCHANGE_KINDS])
            ex_wrong += ex["answer_changing"]
            ex_killed += ex["killed"]
            total_wrong += k["answer_changing"]
            total_killed += k["killed"]
            total_allowed += k["allowed"]
            total_ok += k["allowed_passed"]
            print(f"{fam.name:32} {k['killed']:>6}/{k['answer_changing']:<6} {k['allowed_passed']:>5}/{k['allowed']:<5} "
                  f"{ex['killed']:>4}/{ex['answer_changing']:<4}  "
                  f"{k['survivors'][:3]} {k['rejected_allowed'][:3]}", flush=True)
        rate = total_killed / total_wrong if total_wrong else 1.0
        print(f"\nall: kill rate {rate:.4f} ({total_killed}/{total_wrong}), allowed passed {total_ok}/{total_allowed}, "
              f"exchange mutants killed {ex_killed}/{ex_wrong}, {time.monotonic() - t0:.0f}s")
        return 0 if total_killed == total_wrong and total_ok == total_allowed else 1


if __name__ == "__main__":
    sys.exit(main())
