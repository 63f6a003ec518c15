"""Procedural generation throughput (tasks per second per core) and sandbox exec overhead
(`true` in a bwrap sandbox versus a plain subprocess), each against its baseline in the same run.

--signatures builds the task spec of every signature of an overlay (default: all 15,000 of
configs/tmax15k.yaml, in memory, no fixtures written) and prints how many built, how many needed a
retry or a fallback family, the share honoured per axis, on (domain, verifier kind, fixture kind)
together and on every axis, and difficulty measures per task complexity (oracle lines, fixture
bytes, test lines).

    .venv/bin/python bench/bench_generate.py --signatures configs/tmax15k.yaml   # ~2 min on one core
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_args import existing  # noqa: E402
from termforge.axes.sampler import sample_signatures  # noqa: E402
from termforge.axes.taxonomy import load_taxonomy  # noqa: E402
from termforge.generate.honour import AXES, SHAPE_AXES, actual_axes, honoured_axes  # noqa: E402
from termforge.generate.procedural import build_task, generate_task  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402


def bench_generate(n: int) -> None:
    sigs = sample_signatures(n, 99, {"legacy": 0.5, "rl_v2": 0.5}, load_taxonomy())
    with tempfile.TemporaryDirectory() as tmp:
        start = time.process_time()
        wall = time.perf_counter()
        for sig in sigs:
            generate_task(sig, Path(tmp))
        cpu = time.process_time() - start
        wall = time.perf_counter() - wall
    print(f"procedural generation: {n} tasks in {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"-> {n / max(cpu, 1e-9):.1f} tasks/s/core")


def overlay_signatures(overlay: str, unrestricted: bool = False) -> list[dict]:
    """The overlay's signatures as the sample_axes stage draws them: each domain asked only for the
    verifier kinds its families grade themselves and the anchors its tasks can bear (`unrestricted`:
    the corpus weights and the taxonomy's anchors alone)."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((root / "config.yaml").read_text())
    for key, value in (yaml.safe_load((root / overlay).read_text()) or {}).items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    c = cfg["corpus"]
    restriction = {}
    if not unrestricted:  # (imported here: the unrestricted draw also runs against older checkouts)
        from termforge.generate.anchors import anchorless_corpus_kinds, load_bearing_anchors_by_domain
        from termforge.generate.families import default_families, intrinsic_verifier_kinds_by_domain

        restriction["verifier_kinds_by_domain"] = intrinsic_verifier_kinds_by_domain()
        restriction["anchors_by_domain"] = load_bearing_anchors_by_domain(load_taxonomy(), default_families())
        restriction["anchorless_kinds"] = anchorless_corpus_kinds()
    return sample_signatures(c["n_tasks"], cfg["seed"], c["mix"], load_taxonomy(), domains=c["domains"] or None,
                             anchor_prob=c["anchor_prob"], new_bucket_weight=c["sft_v2_new_bucket_weight"],
                             **restriction)


def bench_signatures(overlay: str, limit: int = 0) -> None:
    sigs = overlay_signatures(overlay)
    if limit:
        sigs = sigs[:limit]
    honoured = {a: 0 for a in AXES}
    shape = full = retried = fell_back = some_skill = 0
    difficulty: dict[tuple[str, str], list[tuple[int, int, int, int]]] = {}
    start = time.process_time()
    for sig in sigs:
        built = build_task(sig)  # the signature's corpus kind picks the families, as generate does
        spec = built.spec
        ok = honoured_axes(sig, actual_axes(sig, built.family, spec.verifier_kind, spec.fixture_kind,
                                            built.anchor.name if built.anchor else None), built.family)
        for a in AXES:
            honoured[a] += ok[a]
        shape += all(ok[a] for a in SHAPE_AXES)
        full += all(ok.values())
        some_skill += bool(set(sig["skills"]) & set(built.family.skills))
        retried += bool(built.failed_attempts)
        fell_back += any(f["family"] != built.family.name for f in built.failed_attempts)
        if ok["task_complexity"]:
            difficulty.setdefault((built.family.name, sig["task_complexity"]), []).append((
                spec.solve_sh.count("\n"), sum(len(b) for b in spec.fixtures.values()),
                spec.test_final.count("\n"), len(json.dumps(spec.truth))))
    cpu = time.process_time() - start
    n = len(sigs)
    print(f"{overlay}: {n} signatures -> {n} task specs in {cpu:.1f} s CPU ({n / cpu:.0f} specs/s/core); "
          f"{retried} needed a retried draw, {fell_back} of them another family")
    for a in AXES:
        print(f"  honoured {a:<20} {honoured[a] / n:6.1%}")
    print(f"  honoured on (domain, verifier_kind, fixture_kind) together: {shape / n:.1%} (goal >= 90%)")
    print(f"  fully honoured signatures (every axis): {full / n:.1%}; at least one requested skill exercised: "
          f"{some_skill / n:.1%}")
    # Families differ in size by orders of magnitude, so difficulty is compared within a family:
    # each measure at a level over the same family's median at "moderate", then the median over families.
    levels = ("short", "moderate", "complex", "intricate")
    names = ("oracle lines", "fixture bytes", "final-test lines", "answer-key bytes")
    print("  difficulty by task_complexity, relative to the same family at moderate (median over families):")
    for level in levels:
        ratios: list[list[float]] = [[] for _ in names]
        for fam in {f for f, _ in difficulty}:
            rows, base = difficulty.get((fam, level)), difficulty.get((fam, "moderate"))
            if not rows or not base:
                continue
            for k in range(len(names)):
                ref = statistics.median(r[k] for r in base)
                if ref:
                    ratios[k].append(statistics.median(r[k] for r in rows) / ref)
        cells = "  ".join(f"{name} x{statistics.median(r):.2f}" for name, r in zip(names, ratios) if r)
        print(f"    {level:<10} {cells}")


def bench_exec(reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        task = Path(tmp) / "tf-bench"
        (task / "environment").mkdir(parents=True)
        (task / "environment" / "setup.sh").write_text("true\n")
        (task / "task.json").write_text('{"id": "tf-bench", "environment": {}}')
        rt = BwrapRuntime()
        image = rt.build(task, Path(tmp) / "images").image
        with rt.start(image, Limits()) as session:
            sandboxed = []
            for _ in range(reps):
                t = time.perf_counter()
                session.exec("true")
                sandboxed.append(time.perf_counter() - t)
        plain = []
        for _ in range(reps):
            t = time.perf_counter()
            subprocess.run(["/bin/bash", "--noprofile", "--norc", "-c", "true"], check=True)
            plain.append(time.perf_counter() - t)
    s, p = statistics.median(sandboxed), statistics.median(plain)
    print(f"exec `true`: bwrap sandbox {s * 1000:.1f} ms, plain subprocess {p * 1000:.1f} ms (medians of {reps}) "
          f"-> overhead ratio {s / p:.1f}x, +{(s - p) * 1000:.1f} ms per command")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--signatures", metavar="OVERLAY", help="build every signature of this overlay (in memory)")
    ap.add_argument("--limit", type=int, default=0, help="with --signatures: only the first N signatures")
    a = ap.parse_args()
    existing("--signatures", a.signatures)
    if a.signatures:
        bench_signatures(a.signatures, a.limit)
    else:
        bench_generate(a.tasks)
        bench_exec(a.reps)
