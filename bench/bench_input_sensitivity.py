"""Input sensitivity per named input (termforge.quality.sensitivity), over every procedural family:
for one representative task each, every input the instruction names perturbed alone must move the
oracle's answer. Prints, per family, each named input with whether it moved, the variant that moved
it and the oracle runs it took, then the check's oracle runs and seconds against the baseline
measured in the same run: every named input perturbed at once (`per_input=False`, the check before
issue 40), with the same variants.

    .venv/bin/python bench/bench_input_sensitivity.py [--families a,b] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_args import chosen  # noqa: E402
from conftest import make_signature  # noqa: E402
from termforge.generate.families import all_families  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.quality.sensitivity import input_sensitivity  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402


def _runs(report) -> int:
    """Oracle runs on perturbed inputs (variants that changed something)."""
    return sum(1 for p in report.perturbations if p.get("changed"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="", help="comma-separated family names (default: every family)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    names = chosen("--families", args.families, [f.name for f in all_families()])
    fams = [f for f in all_families() if f.name in names]
    rt, limits = BwrapRuntime(), Limits(wall_sec=60, cpu_sec=60, memory_mb=4096)
    totals = {"inputs": 0, "moved": 0, "ignored": 0, "unjudged": 0, "runs": 0, "base_runs": 0, "s": 0.0,
              "base_s": 0.0, "dropped": 0}
    with tempfile.TemporaryDirectory(prefix="tf-bench-sensitivity-") as tmp:
        root = Path(tmp)
        print(f"{'family':32} {'mode':8} per named input (moved by variant, oracle runs)")
        for fam in fams:
            sig = make_signature(args.seed, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0],
                                 corpus_kind=f"family-test-{fam.name}")
            task = generate_task(sig, root / "tasks", families=[fam])
            build = rt.build(task, root / "images")
            if not build.ok:
                print(f"{fam.name:32} build failed: {build.reason}")
                continue
            t = time.monotonic()
            base = input_sensitivity(task, rt, build.image, limits, per_input=False)
            totals["base_s"] += time.monotonic() - t
            t = time.monotonic()
            report = input_sensitivity(task, rt, build.image, limits)
            totals["s"] += time.monotonic() - t
            totals["runs"] += _runs(report)
            totals["base_runs"] += _runs(base)
            totals["dropped"] += report.drop
            rows = []
            for r in report.per_input:
                totals["inputs"] += 1
                key = {True: "moved", False: "ignored", None: "unjudged"}[r["moved"]]
                totals[key] += 1
                rows.append(f"{r['input']}: {key}{' by ' + r['variant'] if r['variant'] else ''} ({r['oracle_runs']})")
            print(f"{fam.name:32} {report.mode:8} {'; '.join(rows) or report.reason[:90]}"
                  f"{'  DROPPED: ' + report.reason[:120] if report.drop else ''}", flush=True)
    print(f"\nnamed inputs {totals['inputs']}: moved {totals['moved']}, ignored {totals['ignored']}, "
          f"unjudged {totals['unjudged']}; tasks dropped {totals['dropped']}")
    ratio = totals["runs"] / totals["base_runs"] if totals["base_runs"] else float("nan")
    print(f"oracle runs on perturbed inputs: per input {totals['runs']}, all at once (baseline) {totals['base_runs']} "
          f"(x{ratio:.2f}); seconds {totals['s']:.1f} vs {totals['base_s']:.1f} "
          f"(x{totals['s'] / totals['base_s'] if totals['base_s'] else float('nan'):.2f})")
    return 0 if not totals["dropped"] and not totals["ignored"] else 1


if __name__ == "__main__":
    sys.exit(main())
