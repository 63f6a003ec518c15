"""Planning time of `snakemake -n` for the 15k overlay (sharded) versus the same corpus with one
task per shard (per-task jobs), measured in the same run. Prints both and the ratio."""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_args import existing

ROOT = Path(__file__).resolve().parents[1]


def plan(overlays: list[Path]) -> tuple[float, str]:
    cmd = [str(Path(sys.executable).with_name("snakemake")), "-n", "-q", "--cores", "2",
           "--configfile", *map(str, overlays)]
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - start
    if res.returncode != 0:
        sys.exit(f"snakemake -n failed:\n{res.stderr[-2000:]}")
    return took, res.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--overlay", default=str(ROOT / "configs" / "tmax15k.yaml"), help="the config overlay to plan")
    ap.add_argument("--skip-baseline", action="store_true", help="only time the sharded plan")
    args = ap.parse_args()
    existing("--overlay", args.overlay)
    sharded, _ = plan([Path(args.overlay)])
    print(f"sharded plan ({args.overlay}): {sharded:.2f} s")
    if args.skip_baseline:
        return
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        per_task_overlay = Path(tmp) / "per-task.yaml"
        per_task_overlay.write_text("corpus:\n  shard_size: 1\n")
        per_task, _ = plan([Path(args.overlay), per_task_overlay])
    print(f"per-task plan (shard_size 1): {per_task:.2f} s")
    print(f"ratio per-task / sharded: {per_task / sharded:.1f}x")


if __name__ == "__main__":
    main()
