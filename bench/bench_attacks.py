"""Every family x every attack (termforge.quality.hijack.ATTACKS) on the solve path's grading:
the reward each attack got (must be 0) and whether the grader recorded evidence of it. The oracle
row is the control (must be 1, not hacked). tests/test_attacks.py keeps a representative slice.

    .venv/bin/python bench/bench_attacks.py [--families a,b] [--attacks x,y] [--seed 7]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import make_signature  # noqa: E402
from termforge.generate.families import all_families  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.quality.hijack import ATTACKS, programs_run_by_tests  # noqa: E402
from termforge.quality.validate import _run_agent  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402

LIMITS = Limits(wall_sec=40, cpu_sec=40, memory_mb=2048, max_procs=64, max_open_files=256, max_file_mb=32,
                disk_mb=64, tmp_mb=32)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="")
    ap.add_argument("--attacks", default="")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    fams = [f for f in all_families() if not args.families or f.name in args.families.split(",")]
    attacks = [a for a in sorted(ATTACKS) if not args.attacks or a in args.attacks.split(",")]
    with tempfile.TemporaryDirectory(prefix="tf-bench-attacks-") as tmp:
        root = Path(tmp)
        rt = BwrapRuntime()
        rows, forged, t0 = [], 0, time.monotonic()
        for i, fam in enumerate(fams):
            # Distinct indexes: families of one domain would otherwise share a task id.
            sig = make_signature(args.seed * 100 + i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
            task = generate_task(sig, root / "tasks", families=[fam])
            built = rt.build(task, root / "images")
            if not built.ok:
                rows.append([fam.name, "build failed", built.reason[:60]])
                continue
            paths = programs_run_by_tests((task / "tests" / "test_final_state.py").read_text())
            oracle, _ = _run_agent(rt, built.image, LIMITS, None, task, oracle=True)
            cells = [f"oracle={oracle.reward:g}{'!' if oracle.hacked else ''}"]
            for name in attacks:
                verdict, _ = _run_agent(rt, built.image, LIMITS, ATTACKS[name][0](paths), task)
                forged += verdict.reward != 0.0
                cells.append(f"{name}={verdict.reward:g}{'H' if verdict.hacked else ''}")
            rows.append([fam.name, *cells])
            print(" ".join(rows[-1]), flush=True)
        print(f"\n{len(fams)} families x {len(attacks)} attacks in {time.monotonic() - t0:.0f}s; "
              f"forged grades: {forged} (H = the grader recorded evidence)")
        return 1 if forged else 0


if __name__ == "__main__":
    sys.exit(main())
