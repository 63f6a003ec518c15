"""Base images: what they cost and what they change (docs/images.md).

1. Base builds: the default base from the cache (what every later run pays), unpacked from the
   image store into an empty cache (another machine, offline), and a derived base (one extra
   Debian package: apt in a copy of the base); with --full, also a root base by mmdebstrap.
2. Per-task build: seconds and disk of the task layer alone (the base is shared) for procedural
   tasks, against the base's own size.
3. Sandbox start: `true` in a fresh sandbox on the image's root filesystem vs on the host's /usr
   (`runtime.rootfs: host`, the layout before images; the baseline measured in this run). Goal:
   within +10 ms.
4. Validation throughput: tasks validated per minute on images vs on the host's /usr. Goal: no
   slower.

    python bench/bench_images.py [--tasks 4] [--starts 30] [--full]
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_signature  # noqa: E402
from termforge.generate.families import family_by_name  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.images import DEFAULT_BASE, ensure_base, ensure_task_base, load_declarations  # noqa: E402
from termforge.images import BaseDecl  # noqa: E402
from termforge.images.store import ImageStore, register_base  # noqa: E402
from termforge.quality.validate import validate_task  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402

FAMILIES = ("log_level_filter", "account_audit", "shell_script_fix", "png_shape_census")


def reachable_tmp(prefix: str) -> Path:
    """A scratch folder sandboxes' uids can reach (they are not root's)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(d, 0o755)
    return d


def du(path: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in [path, *path.rglob("*")])


def bench_bases(full: bool) -> None:
    print("== base images")
    t = time.perf_counter()
    base = ensure_base(DEFAULT_BASE)
    print(f"  {DEFAULT_BASE} from the cache:            {1000 * (time.perf_counter() - t):8.1f} ms")
    store = ImageStore()
    register_base(ensure_base("debian-bookworm-slim"), store)
    register_base(base, store)
    cache = reachable_tmp("tf-bench-cache-")
    os.environ["TERMFORGE_IMAGE_STORE"] = str(store.root)  # an empty cache beside the full store
    try:
        t = time.perf_counter()
        ensure_base(DEFAULT_BASE, cache, log=lambda m: None)
        print(f"  {DEFAULT_BASE} unpacked from the store:   {time.perf_counter() - t:8.1f} s  (empty cache)")
        os.environ.pop("TERMFORGE_IMAGE_STORE")  # what follows is built here, not found in the store
        t = time.perf_counter()
        derived = ensure_task_base(DEFAULT_BASE, ["dc"], cache, log=lambda m: None)
        print(f"  derived base (+ dc, apt in a copy):       {time.perf_counter() - t:8.1f} s  "
              f"({derived.record['size'] / 1e6:.0f} MB, parent {base.record['size'] / 1e6:.0f} MB)")
        if full:
            # New declarations (their own keys): built from Debian's mirror, not found in the store.
            root = load_declarations()["debian-bookworm-slim"]
            fresh = BaseDecl(**{**root.__dict__, "name": "bench-slim", "names": (), "source_date_epoch": 1700000001})
            t = time.perf_counter()
            built = ensure_base(fresh, cache, log=lambda m: None)
            print(f"  root base by mmdebstrap (minbase, slim):  {time.perf_counter() - t:8.1f} s  "
                  f"({built.record['size'] / 1e6:.0f} MB)")
            layered = BaseDecl("bench-base", packages=base.decl.packages, parent=fresh)
            t = time.perf_counter()
            built = ensure_base(layered, cache, log=lambda m: None)
            print(f"  + the default base's packages (apt):      {time.perf_counter() - t:8.1f} s  "
                  f"({built.record['size'] / 1e6:.0f} MB)")
    finally:
        os.environ.pop("TERMFORGE_IMAGE_STORE", None)
        shutil.rmtree(cache, ignore_errors=True)
    print(f"  (first build of each declared base, recorded in base.json: "
          + ", ".join(f"{b.record['name']} {b.record['build_seconds']} s" for b in
                      (ensure_base("debian-bookworm-slim"), base)) + ")")


def corpus(root: Path, n: int) -> list[Path]:
    tasks = []
    for i in range(n):
        fam = family_by_name(FAMILIES[i % len(FAMILIES)])
        sig = make_signature(i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
        tasks.append(generate_task(sig, root / "tasks", families=[fam]))
    return tasks


def bench_task_builds(tasks: list[Path], root: Path) -> None:
    print("== per-task image builds (task layer only; the base is shared)")
    rt = BwrapRuntime()
    base = ensure_base(DEFAULT_BASE)
    secs, sizes = [], []
    for t in tasks:
        res = rt.build(t, root / "images")
        assert res.ok, res.reason
        secs.append(res.duration_sec)
        sizes.append(du(res.image.path / "layer"))
    print(f"  build: mean {statistics.mean(secs):.2f} s per task over {len(tasks)} tasks")
    print(f"  task layer disk: mean {statistics.mean(sizes) / 1e3:.0f} kB; the shared base "
          f"{du(base.rootfs) / 1e6:.0f} MB (layer/base = {statistics.mean(sizes) / du(base.rootfs):.5f})")


def bench_starts(task: Path, root: Path, n: int) -> None:
    print(f"== sandbox start: `true` in a fresh sandbox, {n} runs each")
    limits = Limits(wall_sec=30, cpu_sec=10, memory_mb=1024)
    samples: dict[str, list[float]] = {"host": [], "image": []}
    sessions = {}
    for mode in samples:
        rt = BwrapRuntime(rootfs=mode)
        sessions[mode] = rt.start(rt.build(task, root / f"images-{mode}").image, limits)
        sessions[mode].exec("true")  # warm
    try:
        for i in range(n):  # interleaved, so a busy moment of the machine hits both
            for mode in (("host", "image") if i % 2 else ("image", "host")):
                t = time.perf_counter()
                assert sessions[mode].exec("true").ok
                samples[mode].append(1000 * (time.perf_counter() - t))
    finally:
        for s in sessions.values():
            s.stop()
    times = {}
    for mode, xs in samples.items():
        times[mode] = statistics.median(xs)
        print(f"  {mode:5s}: median {times[mode]:6.1f} ms  (p90 {sorted(xs)[int(0.9 * n)]:.1f} ms)")
    print(f"  image - host: {times['image'] - times['host']:+.1f} ms (goal: <= +10 ms); "
          f"ratio {times['image'] / times['host']:.2f}x")


def bench_validation(tasks: list[Path], root: Path) -> None:
    print(f"== validation throughput over {len(tasks)} tasks")
    limits = Limits(wall_sec=60, cpu_sec=30, memory_mb=2048)
    runtimes = {mode: BwrapRuntime(rootfs=mode) for mode in ("host", "image")}
    for mode, rt in runtimes.items():
        for t in tasks:  # builds are not what this measures
            assert rt.build(t, root / f"val-{mode}").ok
    elapsed = {mode: 0.0 for mode in runtimes}
    kept = {mode: 0 for mode in runtimes}
    for i, t in enumerate(tasks):  # task by task, the two modes in alternating order
        for mode in (("host", "image") if i % 2 else ("image", "host")):
            t0 = time.perf_counter()
            kept[mode] += validate_task(t, runtimes[mode], root / f"val-{mode}", limits, oracle_repeats=1,
                                        mutants=0).kept
            elapsed[mode] += time.perf_counter() - t0
    rate = {}
    for mode in runtimes:
        rate[mode] = len(tasks) / elapsed[mode] * 60
        print(f"  {mode:5s}: {rate[mode]:5.1f} tasks/min ({elapsed[mode] / len(tasks):.1f} s per task, "
              f"{kept[mode]} kept)")
    print(f"  image / host throughput: {rate['image'] / rate['host']:.2f}x (goal: >= 1.0)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--starts", type=int, default=30)
    ap.add_argument("--full", action="store_true", help="also time a root base built by mmdebstrap")
    args = ap.parse_args()
    bench_bases(args.full)
    root = reachable_tmp("tf-bench-images-")
    try:
        tasks = corpus(root, args.tasks)
        bench_task_builds(tasks, root)
        bench_starts(tasks[0], root, args.starts)
        bench_validation(tasks, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
