"""Every family composed with every container fixture kind, the verifier strategies rotating over
them, through the whole validation stage in real bwrap sandboxes (static checks, build, initial
state, the final test failing untouched, the oracle twice, the no-op and reward-hack probes, the
hijack probes and the mutation probe). Prints the kept share per family, per fixture kind and per
verifier kind, and every task that was not kept with its stage and reason.

    .venv/bin/python bench/bench_compose.py                 # 22 families x 6 containers
    .venv/bin/python bench/bench_compose.py --all-verifiers # x 4 strategies as well (slow)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_args import chosen  # noqa: E402
from conftest import make_signature  # noqa: E402
from termforge.generate.bundles import CONTAINERS  # noqa: E402
from termforge.generate.families import all_families  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.generate.verifier_kinds import STRATEGIES  # noqa: E402
from termforge.quality.validate import validate_task  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402

LEVELS = ("short", "moderate", "complex", "intricate")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all-verifiers", action="store_true", help="every strategy with every container")
    ap.add_argument("--families", nargs="*", help="only these families")
    ap.add_argument("--fixtures", nargs="*", help="only these fixture kinds (containers)")
    args = ap.parse_args()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        def tqdm(x, **_):
            return x
    names = chosen("--families", args.families, [f.name for f in all_families()])
    families = [f for f in all_families() if f.name in names]
    kinds = chosen("--fixtures", args.fixtures, CONTAINERS)
    verifiers = list(STRATEGIES)
    jobs = []
    for i, fam in enumerate(families):
        for j, fk in enumerate(kinds):
            for vk in (verifiers if args.all_verifiers else [verifiers[(i + j) % len(verifiers)]]):
                jobs.append((fam, fk, vk, LEVELS[(i + j) % len(LEVELS)]))
    kept: dict[str, Counter] = {"family": Counter(), "fixture": Counter(), "verifier": Counter()}
    total: dict[str, Counter] = {"family": Counter(), "fixture": Counter(), "verifier": Counter()}
    failures = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for n, (fam, fk, vk, level) in enumerate(tqdm(jobs, desc="validate composed tasks")):
            sig = {**make_signature(n, fam.domains[0], vk, fk), "task_complexity": level}
            task = generate_task(sig, Path(tmp) / "tasks", families=[fam])
            verdict = validate_task(task, BwrapRuntime(), Path(tmp) / "images",
                                    Limits(wall_sec=120, cpu_sec=120, memory_mb=4096))
            for axis, key in (("family", fam.name), ("fixture", fk), ("verifier", vk)):
                total[axis][key] += 1
                kept[axis][key] += verdict.kept
            if not verdict.kept:
                failures.append(f"{fam.name} {fk} {vk} {level}: {verdict.stage}: {verdict.reason[:200]}")
    n_kept = sum(kept["family"].values())
    print(f"\n{n_kept}/{len(jobs)} composed tasks kept by validation in {time.perf_counter() - start:.0f} s")
    for axis in ("fixture", "verifier", "family"):
        print(f"kept per {axis}: " + ", ".join(f"{k} {kept[axis][k]}/{total[axis][k]}" for k in sorted(total[axis])))
    for line in failures:
        print("  not kept:", line)
    return 0 if n_kept == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
