"""Does a task mean what its signature says? Per family and overall, over a sample of a run's
signatures:

- intrinsic verifier kind: of the tasks that request a kind other than exact_text, the share whose
  requested kind grades the family's OWN deliverable, rather than a program a strategy adds beside
  the task (compose.py). Behavioural check (--behavioural K, real bwrap sandboxes, a seeded random
  sample of K such tasks): the task is built, the oracle runs, and the final test cut down to the
  requested kind's tests alone must give 1; then every deliverable of the family is truncated to
  nothing and the same kind-only test runs again. The kind grades the family's work only if that
  verdict drops to 0. Without --behavioural only the cheap proxy is printed (the built task's kind
  is the requested one and no strategy was added).
- anchor involvement: of the tasks that request an anchor, the share where the anchor changes what
  grades the task. The task is generated twice from the same signature and seeds, once with the
  anchor and once with it removed; if the fixtures, setup, tests, truth and oracle come out byte
  for byte the same, no verdict can depend on the anchor (only the instruction's words changed).
  Behavioural check (--anchor-behavioural K, real bwrap sandboxes, a seeded random sample of K
  anchored tasks): the anchored task's oracle must score 1 on its own final test, and the oracle
  of the task built without the anchor, run on the anchored task, must score 0 there: ignoring
  the anchor changes the verdict. Beside them, the metadata's view: task.json's honoured.anchor.

    .venv/bin/python bench/bench_honour.py --n 300                 # proxy + anchors, seconds
    .venv/bin/python bench/bench_honour.py --n 300 --behavioural 24 --anchor-behavioural 24  # + sandboxes, minutes
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

from termforge.generate.base import TaskSpec
from termforge.generate.compose import compose, plan
from termforge.generate.honour import honest_view
from termforge.generate.procedural import build_task, task_json, write_task

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import existing  # noqa: E402
from bench_generate import overlay_signatures  # noqa: E402

GRADING_PARTS = ("setup_sh", "test_initial", "test_final", "solve_sh", "truth", "fixtures", "test_data")


def sample(config: Path, n: int, unrestricted: bool) -> list[dict]:
    """n signatures spread evenly over the run's whole corpus (its kinds depend on the full size)."""
    sigs = overlay_signatures(str(config), unrestricted)
    return sigs[::max(1, len(sigs) // n)][:n]


def kind_only_spec(sig: dict, built) -> TaskSpec:
    """The built task with its final test cut down to the requested kind's tests: the strategy's
    tests where a strategy added the kind, else the family's own test (the family grades it)."""
    fam = built.family
    p = plan(sig, fam)
    if p.strategy is None:
        return built.spec
    rng = random.Random(built.seed)
    own = fam.build(honest_view(sig, fam), rng)
    return compose(replace(own, test_final=""), p, sig, rng)


def family_outputs(sig: dict, built) -> list[str]:
    """The family's own deliverables (without a strategy's program)."""
    p = plan(sig, built.family)
    tool = p.strategy.tool if p.strategy else None
    return [o for o in built.spec.output_paths if o != tool]


def intrinsic_proxy(sig: dict, built) -> bool:
    """The cheap view: the built task's kind is the requested one and no strategy added it."""
    return built.spec.verifier_kind == sig["verifier_kind"] and plan(sig, built.family).strategy is None


def without_anchor(sig: dict, built) -> TaskSpec:
    """The same signature's task with the anchor removed (same family and seeds)."""
    return build_task({**sig, "anchor": None}, families=[built.family]).spec


def anchor_involved(sig: dict, built) -> bool:
    """Whether removing the anchor (same signature otherwise, same family and seeds) changes any
    file that decides a verdict."""
    without = without_anchor(sig, built)
    return any(getattr(built.spec, part) != getattr(without, part) for part in GRADING_PARTS)


def anchor_behavioural(sig: dict, built, work: Path, runtime, limits) -> tuple[bool | None, str]:
    """(True: the anchored task's oracle scores 1 and the oracle of the task without the anchor
    scores 0 on it; False: ignoring the anchor still scores; None: not measurable, with why)."""
    from termforge.grading.verifier import run_oracle, run_verifier

    task_dir, _ = write_task(sig, work / "anchored", families=[built.family])
    naive_dir = work / "naive" / task_dir.name
    shutil.copytree(task_dir, naive_dir)
    (naive_dir / "solution" / "solve.sh").write_text(without_anchor(sig, built).solve_sh)
    shutil.rmtree(naive_dir / "solution" / "alternatives", ignore_errors=True)
    build = runtime.build(task_dir, work / "images")
    if not build.ok:
        return None, f"build failed: {build.reason}"[:200]
    verdicts = []
    for solution_of in (task_dir, naive_dir):
        with runtime.start(build.image, limits) as session:
            run_oracle(session, solution_of, timeout=limits.wall_sec)
            verdicts.append(run_verifier(session, task_dir, timeout=limits.wall_sec).reward)
    if verdicts[0] != 1.0:
        return None, f"the anchored oracle scores {verdicts[0]}"
    return verdicts[1] == 0.0, f"the oracle that ignores the anchor scores {verdicts[1]}"


def behavioural(sig: dict, built, work: Path, runtime, limits) -> tuple[bool | None, str]:
    """(True: breaking the family's deliverable fails the kind's tests; False: they still pass;
    None: not measurable here, with why)."""
    from termforge.quality.solved import solve_in
    from termforge.grading.verifier import run_verifier

    outputs = family_outputs(sig, built)
    if not outputs:
        return None, "the family has no deliverable files"
    task_dir, _ = write_task(sig, work / "tasks", families=[built.family])
    kind_dir = work / "kind-only" / task_dir.name
    shutil.copytree(task_dir, kind_dir)
    (kind_dir / "tests" / "test_final_state.py").write_text(kind_only_spec(sig, built).test_final)
    build = runtime.build(kind_dir, work / "images")
    if not build.ok:
        return None, f"build failed: {build.reason}"[:200]
    verdicts = []
    for broken in (False, True):
        session, res = solve_in(runtime.start(build.image, limits), runtime, build.image, limits, kind_dir)
        try:
            if res is not None and not res.ok:
                return None, "the oracle failed"
            if broken:
                for path in outputs:
                    host = session._host_path(path)
                    if host.is_file():
                        host.write_bytes(b"")
            verdicts.append(run_verifier(session, kind_dir, timeout=limits.wall_sec).reward)
        finally:
            session.stop()
    if verdicts[0] != 1.0:
        return None, f"the oracle scores {verdicts[0]} on the kind's tests alone"
    return verdicts[1] == 0.0, f"broken deliverable scores {verdicts[1]}"


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/tmax15k.yaml", help="overlay, relative to the repository")
    ap.add_argument("--n", type=int, default=300, help="signatures sampled from the run")
    ap.add_argument("--behavioural", type=int, default=0, metavar="K",
                    help="run the sandboxed check on K non-exact_text tasks (a seeded random sample)")
    ap.add_argument("--anchor-behavioural", type=int, default=0, metavar="K",
                    help="run the sandboxed anchor check on K anchored tasks (a seeded random sample)")
    ap.add_argument("--unrestricted", action="store_true",
                    help="verifier kinds by the corpus weights alone, every domain asked for every kind, and "
                         "every taxonomy anchor drawn (the old draw)")
    args = ap.parse_args()
    existing("--config", ROOT / args.config)
    sigs = sample(args.config, args.n, args.unrestricted)
    rows: dict[str, Counter] = defaultdict(Counter)
    requested_vs_built: Counter = Counter()
    picked: dict[str, list] = defaultdict(list)
    anchored: list = []
    start = time.perf_counter()
    built_all = [(sig, build_task(sig)) for sig in sigs]
    gen_ms = 1000 * (time.perf_counter() - start) / max(1, len(sigs))
    for sig, built in built_all:
        fam = built.family.name
        want = sig["verifier_kind"]
        if want != "exact_text":
            intrinsic = intrinsic_proxy(sig, built)
            rows[fam]["kind_requested"] += 1
            rows[fam]["kind_intrinsic"] += intrinsic
            added = not intrinsic and plan(sig, built.family).strategy is not None
            requested_vs_built[(want, f"strategy:{want}" if added else built.spec.verifier_kind)] += 1
            picked[fam].append((sig, built))
        if sig.get("anchor"):
            rows[fam]["anchor_requested"] += 1
            rows[fam]["anchor_involved"] += anchor_involved(sig, built)
            rows[fam]["anchor_claimed"] += task_json(sig, built, {})["honoured"]["anchor"]
            anchored.append((sig, built))
    def in_sandbox(chosen, check, record):
        """check(sig, built, tmp, runtime, limits) -> (ok or None, why) on each chosen task in a
        real bwrap sandbox; record(sig, built, ok, why) books it."""
        from termforge.images.runtimes import BwrapRuntime
        from termforge.runtime.base import Limits

        runtime, limits = BwrapRuntime(), Limits(wall_sec=120, cpu_sec=120, memory_mb=4096)
        with tempfile.TemporaryDirectory() as tmp:
            for sig, built in chosen:
                record(sig, built, *check(sig, built, Path(tmp), runtime, limits))

    def record_kind(sig, built, ok, why):
        fam = built.family.name
        if ok is None:
            rows[fam]["behaviour_unmeasured"] += 1
            print(f"  unmeasured {sig['id']} {fam} {sig['verifier_kind']}: {why}")
            return
        rows[fam]["behaviour_checked"] += 1
        rows[fam]["behaviour_intrinsic"] += ok
        if ok != intrinsic_proxy(sig, built):
            print(f"  proxy disagrees {sig['id']} {fam} {sig['verifier_kind']}: {why}")

    def record_anchor(sig, built, ok, why):
        fam = built.family.name
        if ok is None:
            rows[fam]["anchor_unmeasured"] += 1
            print(f"  anchor unmeasured {sig['id']} {fam} {sig['anchor']}: {why}")
            return
        rows[fam]["anchor_checked"] += 1
        rows[fam]["anchor_verdict_changes"] += ok
        if not ok:
            print(f"  anchor ignored and still passes {sig['id']} {fam} {sig['anchor']}: {why}")

    if args.behavioural:
        pool = [t for fam in sorted(picked) for t in picked[fam]]
        in_sandbox(random.Random(0).sample(pool, min(args.behavioural, len(pool))), behavioural, record_kind)
    if args.anchor_behavioural:
        in_sandbox(random.Random(1).sample(anchored, min(args.anchor_behavioural, len(anchored))),
                   anchor_behavioural, record_anchor)
    print(f"{'family':36} {'kind intrinsic (proxy)':>24} {'behavioural':>16} {'anchor involved':>18} "
          f"{'anchor behavioural':>19} {'anchor claimed':>18}")
    total: Counter = Counter()
    for fam in sorted(rows):
        total.update(rows[fam])
    for name, r in [*sorted(rows.items()), ("OVERALL", total)]:
        print(f"{name:36} {pct(r['kind_intrinsic'], r['kind_requested']):>24} "
              f"{pct(r['behaviour_intrinsic'], r['behaviour_checked']):>16} "
              f"{pct(r['anchor_involved'], r['anchor_requested']):>18} "
              f"{pct(r['anchor_verdict_changes'], r['anchor_checked']):>19} "
              f"{pct(r['anchor_claimed'], r['anchor_requested']):>18}")
    print("requested kind -> what grades it:")
    for (want, got), c in sorted(requested_vs_built.items()):
        print(f"  {want:20} -> {got:30} {c}")
    draw = " (unrestricted draw)" if args.unrestricted else ""
    print(f"signatures {len(sigs)} from {args.config}{draw}; generation {gen_ms:.1f} ms per task (in memory)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
