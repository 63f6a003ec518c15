"""The share of a Harbor dataset's tasks (Terminal-Bench 2.0: its public task repository, or
`harbor dataset download terminal-bench@2.0` output) whose Dockerfile and test.sh the native
runner can plan, measured with this checkout's code and with a baseline checkout's, in the same run.

    python bench/bench_tb2_native_share.py PATH [--registry registry.json --dataset terminal-bench@2.0]
                                           [--baseline-src /path/to/baseline/src] [--json OUT]

PATH is a dataset folder (task folders, or one folder holding them), or with --registry the
checkout of the registry's task repository. Nothing of the dataset is copied anywhere. Planning
only (no build, no pull, no network): a FROM image counts as plannable here when the store has it
or, for this checkout ("pull"), when pulling is on (eval.tbench.pull_images) — the baseline has no
pulling, so its FROM images must be in the store. Prints one row per code version (plannable / all),
the ratio after/before, and the most common first reasons a task is refused.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from bench_args import existing, fail, one_of

ROOT = Path(__file__).resolve().parents[1]


def _reason_kind(reason: str) -> str:
    """A refusal's first clause without the task's own words (paths, images, line numbers)."""
    text = reason.split(";")[0]
    text = re.sub(r"line \d+", "line N", text)
    text = re.sub(r"base image \S+", "base image X", text)
    text = re.sub(r"`[^`]*`", "`...`", text)
    text = re.sub(r"\([^)]*\)", "(...)", text)
    text = re.sub(r"\S*/\S*", "PATH", text)
    return text.strip()[:110]


def classify(path: str, registry: str | None, dataset: str | None, pull: bool) -> dict:
    """Runs in whichever checkout PYTHONPATH names: {task: null | reason}."""
    from termforge.evals import harbor_tasks as ht

    if registry:
        from termforge.evals.harbor_registry import load_registry_dataset

        tasks, broken = load_registry_dataset(registry, dataset, Path(path))
    else:
        tasks, broken = ht.load_harbor_dataset(path)
    out = {b.name: f"unloadable: {b.reason}" for b in broken}
    for task in tasks:
        if pull:
            try:
                out[task.name] = ht.native_blocker(task, assume_pullable=True)
            except TypeError:  # a checkout without pulling
                out[task.name] = ht.native_blocker(task)
        else:
            out[task.name] = ht.native_blocker(task)
    return out


def registry_datasets(registry: str) -> list[str]:
    """The datasets a registry file lists, as --dataset may name them: NAME@VERSION, and NAME
    alone where one version is listed."""
    try:
        rows = json.loads(Path(registry).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail(f"--registry: {registry} is unreadable ({exc})")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        fail(f"--registry: {registry} is not a JSON list of datasets")
    versions = collections.Counter(r.get("name") for r in rows)
    return [f"{r.get('name')}@{r.get('version')}" for r in rows] + [n for n, c in versions.items() if c == 1]


def _run(src: Path, args, pull: bool) -> dict:
    argv = [sys.executable, __file__, args.path, "--worker"] + (["--pull"] if pull else [])
    if args.registry:
        argv += ["--registry", args.registry, "--dataset", args.dataset]
    res = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)},
                         timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"bench: the worker on {src} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="a dataset folder, or with --registry the checkout of its task repository")
    ap.add_argument("--registry", help="a Harbor registry.json")
    ap.add_argument("--dataset", help="NAME@VERSION (or NAME, when one version is listed) of a --registry dataset")
    ap.add_argument("--baseline-src", help="src/ of the baseline checkout (e.g. main's)")
    ap.add_argument("--json", help="also write the shares and reasons here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pull", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.registry and not args.dataset:
        ap.error("--registry needs --dataset NAME@VERSION")
    if args.dataset and not args.registry:
        ap.error("--dataset names a dataset of --registry, which is missing")
    existing("path", args.path)
    existing("--baseline-src", args.baseline_src)
    if existing("--registry", args.registry):
        one_of("--dataset", args.dataset, registry_datasets(args.registry))
    if args.worker:
        print(json.dumps(classify(args.path, args.registry, args.dataset, args.pull)))
        return 0
    rows = {}
    if args.baseline_src:
        rows["baseline"] = _run(Path(args.baseline_src), args, pull=False)
    rows["this checkout, store only"] = _run(ROOT / "src", args, pull=False)
    rows["this checkout, pulling on"] = _run(ROOT / "src", args, pull=True)
    n = len(next(iter(rows.values())))
    print(f"{'code':30s} {'plannable':>9s} / {'tasks':<5s} share")
    shares = {}
    for name, result in rows.items():
        ok = sum(1 for v in result.values() if v is None)
        shares[name] = ok / n if n else 0.0
        print(f"{name:30s} {ok:9d} / {n:<5d} {shares[name]:.3f}")
    if "baseline" in shares:
        base = shares["baseline"]
        after = shares["this checkout, pulling on"]
        print(f"ratio after/before: {after / base:.2f}" if base else f"ratio after/before: inf (before 0, after {after:.3f})")
    for name, result in rows.items():
        kinds = collections.Counter(_reason_kind(v) for v in result.values() if v is not None)
        print(f"\nfirst refusal reasons, {name}:")
        for kind, count in kinds.most_common(12):
            print(f"  {count:4d}  {kind}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tasks": n, "shares": shares, "reasons": rows}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
