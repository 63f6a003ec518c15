"""Every family x every attack (termforge.quality.hijack.ATTACKS) on the solve path's grading:
the reward each attack got (must be 0) and whether the grader recorded evidence of it. The oracle
row is the control (must be 1, not hacked). Then every escape a Dockerfile's RUN step tries
against the builder (tests/build_attacks.py), each in a build of its own on a tb-mini task: what
it reached of the host (must be nothing). tests/test_attacks.py keeps a representative slice.

    .venv/bin/python bench/bench_attacks.py [--families a,b] [--attacks x,y] [--seed 7]
                                           [--escapes x,y] [--builds-only | --no-builds]
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
from termforge.quality.hijack import ATTACKS, programs_run_by_tests  # noqa: E402
from termforge.quality.validate import _run_agent  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.runtime.bwrap import BwrapRuntime  # noqa: E402

LIMITS = Limits(wall_sec=40, cpu_sec=40, memory_mb=2048, max_procs=64, max_open_files=256, max_file_mb=32,
                disk_mb=64, tmp_mb=32)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="", help="comma-separated family names (default: every family)")
    ap.add_argument("--attacks", default="", help="comma-separated attack names (default: every attack)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--escapes", default="", help="build escapes to run (default: all)")
    ap.add_argument("--builds-only", action="store_true", help="only the Dockerfile-build escapes")
    ap.add_argument("--no-builds", action="store_true", help="no Dockerfile-build escapes")
    args = ap.parse_args()
    from build_attacks import ESCAPES

    escapes = chosen("--escapes", args.escapes, list(ESCAPES))
    forged = 0 if args.builds_only else grade_attacks(args)
    escaped = 0 if args.no_builds else build_escapes(escapes)
    return 1 if forged or escaped else 0


def build_escapes(names: list[str]) -> int:
    """Each escape in a build of its own; prints what it reached; the number that reached anything."""
    import shutil

    from build_attacks import Canary
    from termforge.evals.harbor_tasks import build_harbor_image, load_harbor_task
    from termforge.images.dockerfile import find_built
    from termforge.io import read_json

    task = Path(__file__).resolve().parents[1] / "benchmarks" / "tb-mini" / "log-error-summary"
    escaped, t0 = 0, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tf-bench-escapes-") as tmp:
        for name in names:
            task_dir = Path(tmp) / name
            shutil.copytree(task, task_dir)
            canary = Canary.plant()
            try:
                dockerfile = task_dir / "environment" / "Dockerfile"
                dockerfile.write_text(dockerfile.read_text() + canary.install(task_dir / "environment", [name]))
                built = build_harbor_image(load_harbor_task(task_dir), Path(tmp) / "images")
                if not built.ok:
                    findings = [f"build failed: {built.reason[-200:]}"]
                else:
                    rootfs = find_built(read_json(built.image.path / "image.json")["dockerfile"]["key"]).rootfs
                    findings = canary.findings([name], built.image.path / "layer" / "escape", built.log, rootfs)
            finally:
                canary.remove()
            escaped += bool(findings)
            print(f"build escape {name}: {'ESCAPED ' + str(len(findings)) + ': ' + '; '.join(findings)[:300] if findings else 'found nothing of the host'}",
                  flush=True)
    print(f"\n{len(names)} build escapes in {time.monotonic() - t0:.0f}s; escaped: {escaped}")
    return escaped


def grade_attacks(args) -> int:
    """Every family x attack on the solve path's grading; the number of forged grades."""
    names = chosen("--families", args.families, [f.name for f in all_families()])
    fams = [f for f in all_families() if f.name in names]
    attacks = chosen("--attacks", args.attacks, sorted(ATTACKS))
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
        return forged


if __name__ == "__main__":
    sys.exit(main())
