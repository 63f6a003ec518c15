"""Validation cost per step, and tasks per core-hour of the old and the new validation path in
the same run (issue 27).

A fixed sample: every family twice, once as the family makes it (its own fixture and verifier
kinds) and once composed (a container fixture and a verifier strategy, rotating over them). Each
task is validated exactly as the validate rule does it (quality.validate.validate_task on real
bwrap sandboxes over the task's image, the rule's limits, `--workers` tasks at a time as
validate.workers runs them), once per path, the paths one after another over the whole sample
(after one warm-up task each, not counted). Prints, per path, the per-step table (count, wall s,
CPU s including the sandboxes', share of the total CPU), then per path tasks per core-hour two
ways: per CPU-hour actually used, and per core-hour held (wall x `--cores`, what a job holding
that many cores is charged: the issue's measure, 8.7 s wall per task on 2 workers = 17
core-seconds), the ratios against `old`, and whether every verdict and reason agree.

    .venv/bin/python bench/bench_validate.py                      # every family x 2; paths old, pool, new
    .venv/bin/python bench/bench_validate.py --tasks 4            # the first 4 of the sample
    .venv/bin/python bench/bench_validate.py --families log_level_filter --paths old,new
    .venv/bin/python bench/bench_validate.py --baseline df5ae13 --paths old,new   # and the issue's baseline

`--baseline REV` re-measures commit REV's validation on the same sample in the same run, first:
REV's own src/ (from `git archive`) generates, builds and validates the sample's tasks through
bench/validate_at_commit.py, with the same workers and limits, in a cgroup of its own for its CPU.
Only families REV has are sampled then. df5ae13 is main as it stood when issue 27 was filed: the
"before" of its figure (8.7 s wall per task on 2 workers).

Paths: `old` is the reference path (validate.grade_pool: false): a fresh bwrap sandbox and a
fresh python3 per grade, every grade in full, an oracle run for each check that needs a solved
/app, checks one after another; `pool` is the default path without zero-check grades (grade
pools, the first oracle run's /app seeding the mutants and input sensitivity, config.yaml's
validate.concurrent_checks); `new` is the default path (the rule's: pools kept from task to task,
the first oracle run's /app seeding the mutants and input sensitivity, zero-check grades, and
config.yaml's validate.concurrent_checks of a task's checks in flight at once, each lane with a
pool of its own; docs/grading.md, "What validation reuses, and what it leaves out");
`concurrent` is `new` with `--concurrent-checks` of them instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_args import chosen  # noqa: E402
from conftest import make_signature  # noqa: E402
from termforge.generate.bundles import CONTAINERS  # noqa: E402
from termforge.generate.families import all_families  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.generate.verifier_kinds import STRATEGIES  # noqa: E402
from termforge.quality.validate import DEFAULT_MUTANTS, validate_task  # noqa: E402
from termforge.runtime import accounting  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402
from termforge.grading.gradepool import PoolShelf  # noqa: E402

PATHS = ("old", "pool", "new", "concurrent")
REPO = Path(__file__).resolve().parents[1]
LIMITS = {"wall_sec": 120, "cpu_sec": 120, "memory_mb": 4096}
# The validate rule's own settings (config.yaml validate.*), for the paths that are the rule's.
RULE = yaml.safe_load((REPO / "config.yaml").read_text())["validate"]


class Baseline:
    """Another commit's validation, run by bench/validate_at_commit.py on that commit's src/."""

    def __init__(self, rev: str, root: Path):
        self.rev = rev
        self.src = root / "baseline"
        self.src.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"],
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            raise SystemExit(f"--baseline {rev}: git archive failed: {archive.stderr.decode()[-300:]}")
        subprocess.run(["tar", "-x", "-C", str(self.src)], input=archive.stdout, check=True)

    def _run(self, *args: str, cgroup=None) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(self.src / "src")}
        return subprocess.run([sys.executable, str(REPO / "bench" / "validate_at_commit.py"), *args], env=env,
                              stdout=subprocess.PIPE, text=True, check=False, cwd=self.src,
                              preexec_fn=cgroup.join if cgroup is not None else None)

    def families(self) -> set[str]:
        res = self._run("--families-only")
        if res.returncode != 0:
            raise SystemExit(f"--baseline {self.rev}: its families could not be listed")
        return set(json.loads(res.stdout.splitlines()[-1]))

    def validate(self, jobs: list, workers: int, root: Path) -> dict:
        sample = root / "baseline-sample.json"
        sample.write_text(json.dumps([{"family": fam.name, "signature": sig} for fam, sig, _ in jobs]))
        cgroup = accounting.sandbox_cgroup()
        usage = [] if cgroup is None else \
            ["--cpu-usage-file", str(cgroup.path / ("cpu.stat" if cgroup.kind == "v2" else "cpuacct.usage"))]
        try:
            res = self._run(str(sample), "--workers", str(workers), "--limits", json.dumps(LIMITS), *usage,
                            cgroup=cgroup)
        finally:
            if cgroup is not None:
                cgroup.finish(wait=0)
        for line in res.stdout.splitlines()[:-1]:
            print(line, flush=True)
        if res.returncode != 0:
            raise SystemExit(f"--baseline {self.rev}: its validation failed (exit {res.returncode})")
        return json.loads(res.stdout.splitlines()[-1])


def sample(families: list[str] | None) -> list[dict]:
    """(family, signature) of the fixed sample, native and composed tasks interleaved."""
    fams = [f for f in all_families() if not families or f.name in families]
    containers, strategies = list(CONTAINERS), list(STRATEGIES)
    jobs = []
    for i, fam in enumerate(fams):
        native = make_signature(5000 + 2 * i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
        composed = make_signature(5001 + 2 * i, fam.domains[0], strategies[i % len(strategies)],
                                  containers[i % len(containers)])
        jobs += [(fam, native, "native"), (fam, composed, "composed")]
    return jobs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="*", help="only these families")
    ap.add_argument("--tasks", type=int, default=0, help="only the first N tasks of the sample (0: all)")
    ap.add_argument("--paths", default="old,pool,new",
                    help="which paths to run, comma-separated: old, pool, new, concurrent")
    ap.add_argument("--workers", type=int, default=2, help="tasks validated at once (validate.workers; the rule's 2)")
    ap.add_argument("--cores", type=int, default=os.cpu_count(),
                    help="cores the run holds, for tasks per core-hour held (default: this machine's)")
    ap.add_argument("--concurrent-checks", type=int, default=3,
                    help="validate.concurrent_checks of the concurrent path")
    ap.add_argument("--mutants", type=int, default=DEFAULT_MUTANTS, help="validate.mutants")
    ap.add_argument("--oracle-repeats", type=int, default=2, help="validate.oracle_repeats")
    ap.add_argument("--baseline", metavar="REV",
                    help="also re-measure commit REV's validation on the same sample, first (df5ae13: the issue's)")
    args = ap.parse_args()
    paths = chosen("--paths", args.paths, PATHS)
    jobs = sample(chosen("--families", args.families, [f.name for f in all_families()]))
    # The validate rule's limits (config.yaml runtime.*): what a task is allowed, not a bench choice.
    limits = Limits(**LIMITS)
    profiles = {p: accounting.StepProfile() for p in paths}
    verdicts: dict[str, dict[str, tuple]] = {p: {} for p in paths}
    walls = {p: 0.0 for p in paths}
    base = None
    with tempfile.TemporaryDirectory(prefix="tf-bench-validate-") as tmp:
        root = Path(tmp)
        if args.baseline:
            baseline = Baseline(args.baseline, root)
            known = baseline.families()
            missing = sorted({fam.name for fam, _, _ in jobs} - known)
            if missing:
                print(f"not at {args.baseline}, left out of the sample: {', '.join(missing)}")
            jobs = [j for j in jobs if j[0].name in known]
        if args.tasks:
            jobs = jobs[:args.tasks]
        if args.baseline:
            base = baseline.validate(jobs, args.workers, root)
        tasks = [(generate_task(sig, root / "tasks", families=[fam]), kind) for fam, sig, kind in jobs]
        # Build every image first (cached per task): both paths then validate on the same images,
        # and the build step measured below is the cache hit the validate rule sees.
        rt = BwrapRuntime()
        for task, _ in tasks:
            rt.build(task, root / "images", timeout=limits.wall_sec * 2)
        options = {"old": {"grade_pool": False, "zero_checks": False},
                   "pool": {"grade_pool": True, "zero_checks": False, "concurrent_checks": RULE["concurrent_checks"]},
                   "new": {"grade_pool": True, "concurrent_checks": RULE["concurrent_checks"]},
                   "concurrent": {"grade_pool": True, "concurrent_checks": args.concurrent_checks}}

        def validate(path: str, task: Path, profile, shelf=None) -> object:
            return validate_task(task, BwrapRuntime(), root / "images", limits, args.oracle_repeats,
                                 mutants=args.mutants, profile=profile, pool_shelf=shelf, **options[path])

        for path in paths:  # warm-up: the first task once per path, not counted
            validate(path, tasks[0][0], None)
        for path in paths:
            def one(item, path=path, shelf=None):
                n, (task, kind) = item
                v = validate(path, task, profiles[path], shelf)
                verdicts[path][task.name] = (v.kept, v.stage, v.reason, tuple(v.checks))
                print(f"[{n + 1}/{len(tasks)}] {path} {task.name} ({kind}): {v.stage}: {v.reason[:120]}", flush=True)

            # A path's pools are kept from task to task, as run_validate_shard keeps them.
            with PoolShelf() as shelf:
                t0 = time.monotonic()
                with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
                    list(pool.map(lambda item: one(item, shelf=shelf), enumerate(tasks)))
                walls[path] = time.monotonic() - t0
    rates, held = {}, {}
    for path in paths:
        steps = profiles[path].to_dict()
        total = accounting.profile_table(steps)[-1]
        rates[path] = len(tasks) * 3600 / total["cpu_s"] if total["cpu_s"] else float("nan")
        held[path] = len(tasks) * 3600 / (walls[path] * args.cores)
        unmeasured = total["cpu_unmeasured_sandboxes"]
        print(f"\n== path {path}: {len(tasks)} tasks, {walls[path]:.1f} s wall on {args.workers} workers, "
              f"{total['cpu_s']:.1f} CPU s ({total['sandboxes']} sandboxes"
              f"{f', {unmeasured} with CPU unmeasured' if unmeasured else ''}; step walls overlap when "
              "tasks or checks run at once)")
        print(accounting.format_profile(steps))
    print(f"\ntasks per core-hour ({len(tasks)} tasks, {args.workers} workers, {args.cores} cores held):")
    if base is not None:
        rates["baseline"] = len(tasks) * 3600 / base["cpu_s"] if base["cpu_s"] else float("nan")
        held["baseline"] = len(tasks) * 3600 / (base["wall_s"] * args.cores)
        print(f"  baseline {args.baseline}: {base['wall_s']:.1f} s wall, "
              f"{base['cpu_s'] if base['cpu_s'] is not None else float('nan'):.1f} CPU s")
    for path in ([] if base is None else ["baseline"]) + paths:
        versus = [f"{held[path] / held[ref]:.2f}x {ref} held, {rates[path] / rates[ref]:.2f}x CPU"
                  for ref in ("baseline", "old") if ref in held and ref != path and path != "baseline"]
        print(f"  {path:8s} per CPU-hour used {rates[path]:8.1f}   per core-hour held {held[path]:8.1f}"
              + (f"   ({'; '.join(versus)})" if versus else ""))
    differ = sorted({t for p in paths for t in verdicts[p] if verdicts[p][t] != verdicts[paths[0]][t]})
    for t in differ:
        print(f"  verdicts differ on {t}: " + "; ".join(f"{p} {verdicts[p][t][:3]}" for p in paths))
    if len(paths) > 1:
        print(f"verdicts, reasons and checks identical on {len(tasks) - len(differ)}/{len(tasks)} tasks "
              f"across {', '.join(paths)}")
    if base is not None:
        # The baseline's checks are fewer (input sensitivity and second solutions came later): its
        # verdict and reason are compared.
        apart = sorted(t for t in verdicts[paths[0]] if list(verdicts[paths[0]][t][:3]) != base["verdicts"].get(t))
        for t in apart:
            print(f"  verdicts differ on {t}: baseline {base['verdicts'].get(t)}; {paths[0]} {verdicts[paths[0]][t][:3]}")
        print(f"verdicts and reasons identical on {len(tasks) - len(apart)}/{len(tasks)} tasks "
              f"between baseline {args.baseline} and {paths[0]}")
        differ += apart
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
