"""Every family x every attack (termforge.quality.hijack.ATTACKS) on the solve path's grading:
the reward each attack got (must be 0) and whether the grader recorded evidence of it. The oracle
row is the control (must be 1, not hacked). Then every escape a Dockerfile's RUN step tries
against the builder (tests/build_attacks.py), each in a build of its own on a tb-mini task: what
it reached of the host (must be nothing). tests/test_attacks.py keeps a representative slice.

Then the sandbox's own attacks, once each on the first family's image, on the plain bwrap path,
the agent's shell and the grade pool (each row names the path and whether the attack was held):
/dev and /dev/shm filled past disk_mb, the cap split over every writable place, /proc showing a
host path, and (as root, on a small tmpfs work root) sessions filling a shared work root.

    .venv/bin/python bench/bench_attacks.py [--families a,b] [--attacks x,y] [--seed 7] [--no-sandbox]
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
from termforge.images.runtimes import BwrapRuntime  # noqa: E402

LIMITS = Limits(wall_sec=40, cpu_sec=40, memory_mb=2048, max_procs=64, max_open_files=256, max_file_mb=32,
                disk_mb=64, tmp_mb=32)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="", help="comma-separated family names (default: every family)")
    ap.add_argument("--attacks", default="", help="comma-separated attack names (default: every attack)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--escapes", default="", help="comma-separated build escapes (default: every escape)")
    builds = ap.add_mutually_exclusive_group()
    builds.add_argument("--builds-only", action="store_true", help="only the Dockerfile-build escapes")
    builds.add_argument("--no-builds", action="store_true", help="no Dockerfile-build escapes")
    ap.add_argument("--no-sandbox", action="store_true", help="skip the sandbox attacks after the matrix")
    args = ap.parse_args()
    from build_attacks import ESCAPES

    # Every name checked before any work, whichever part runs.
    families = chosen("--families", args.families, [f.name for f in all_families()])
    attacks = chosen("--attacks", args.attacks, sorted(ATTACKS))
    escapes = chosen("--escapes", args.escapes, list(ESCAPES))
    forged = 0 if args.builds_only else grade_attacks(families, attacks, args.seed, not args.no_sandbox)
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


def grade_attacks(names: list[str], attacks: list[str], seed: int, sandbox: bool) -> int:
    """Every family x attack on the solve path's grading, then (`sandbox`) the sandbox's own
    attacks; the number of forged grades and broken sandbox attacks."""
    fams = [f for f in all_families() if f.name in names]
    with tempfile.TemporaryDirectory(prefix="tf-bench-attacks-") as tmp:
        root = Path(tmp)
        rt = BwrapRuntime()
        rows, forged, t0, first_image = [], 0, time.monotonic(), None
        for i, fam in enumerate(fams):
            # Distinct indexes: families of one domain would otherwise share a task id.
            sig = make_signature(seed * 100 + i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
            task = generate_task(sig, root / "tasks", families=[fam])
            built = rt.build(task, root / "images")
            if not built.ok:
                rows.append([fam.name, "build failed", built.reason[:60]])
                continue
            first_image = first_image or built.image
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
        failed = 0
        if sandbox and first_image is not None:
            print()
            for name, path, held, detail in sandbox_attacks(rt, first_image, root):
                failed += not held
                print(f"{name:34} {path:12} {'held' if held else 'BROKEN'}  {detail}", flush=True)
            print(f"sandbox attacks broken: {failed}")
        return forged + failed


FILL = ("for d in {places}; do mkdir -p $d; for i in $(seq {n}); do dd if=/dev/zero of=$d/.fill$i bs=1M count=8 "
        "2>/dev/null || break; done; done; echo filled")
PROC_SCAN = ("/usr/bin/python3 -c 'import os,sys\nfor p in os.listdir(\"/proc\"):\n if p.isdigit():\n  for n in "
             "(\"cmdline\",\"environ\"):\n   try: sys.stdout.buffer.write(open(f\"/proc/{p}/{n}\",\"rb\").read())\n"
             "   except OSError: pass'")


def sandbox_attacks(rt, image, root: Path):
    """(attack, path, held, detail) for the sandbox's own attacks (issue 39 items 2, 3 and 6)."""
    from contextlib import ExitStack

    from termforge.grading.gradepool import pooled_runtime

    over = LIMITS.disk_mb * 4 // 8
    # A fresh session for each: what one attack left in /app must not trip the next one's cap.
    for name, places in (("/dev/shm past disk_mb", "/dev/shm"), ("/tmp past disk_mb", "/tmp"),
                         ("disk_mb split over 4 places", "/app /tmp /dev/shm /home/user")):
        n = over // (2 * len(places.split())) + 1  # each place under the cap, together twice past it
        with rt.start(image, LIMITS) as s:
            res = s.exec(FILL.format(places=places, n=n if len(places.split()) > 1 else over), timeout=60)
        yield name, "bwrap", bool(res.limit_hit), res.limit_hit or "no limit hit"
    with rt.start(image, LIMITS) as s:
        res = s.exec("touch /dev/x 2>&1; mkdir /dev/y 2>&1; true", timeout=20)
        yield "write into /dev", "bwrap", res.stdout.count("Read-only") == 2, " / ".join(res.stdout.split("\n"))[:80]
    with rt.start(image, LIMITS) as s:
        shell = s.open_shell()
        try:
            res = shell.run(FILL.format(places="/dev/shm", n=over), 60)
        finally:
            shell.close()
        yield "/dev/shm past disk_mb", "shell", bool(res.limit_hit), res.limit_hit or "no limit hit"
    with rt.start(image, LIMITS) as s:
        shell = s.open_shell()
        try:
            seen = shell.run(PROC_SCAN, 20).stdout
        finally:
            shell.close()
        host = [str(s.workdir), str(image.rootfs)]
        res = s.exec(PROC_SCAN, timeout=20)
        for path, text in (("bwrap", res.stdout), ("shell", seen)):
            leaked = [h for h in host if h in text]
            yield "/proc/*/cmdline,environ host paths", path, not leaked, ", ".join(leaked) or "none shown"
    with ExitStack() as stack:
        pooled = pooled_runtime(rt, image, stack)
        with pooled.start(image, LIMITS) as s:
            task_dir = root / "tasks" / image.task_id
            probe = task_dir / "tests" / "test_bench_shm.py"
            probe.write_text("def test_fill():\n    for i in range(" + str(LIMITS.disk_mb // 4) + "):\n"
                             "        with open(f'/dev/shm/f{i}', 'wb') as f:\n            f.write(bytes(8 << 20))\n")
            from termforge.grading.verifier import run_test_file

            try:
                v = run_test_file(s, task_dir, probe.name, timeout=60)
            finally:
                probe.unlink()
            yield "/dev/shm past disk_mb", "grade pool", bool(v.limit_hit), v.limit_hit or v.reason
    yield from _work_root_attack(rt, image)


def _work_root_attack(rt, image):
    """Two sessions fill a small work root to just under their caps; a third must be refused
    cleanly (never ENOSPC mid-run)."""
    import os
    import subprocess

    from termforge.errors import TermforgeError
    from termforge.runtime import workspace

    if os.geteuid() != 0:
        yield "shared work root exhausted", "bwrap", True, "skipped (mounting a tmpfs needs root)"
        return
    limits = Limits(wall_sec=30, cpu_sec=30, disk_mb=32)
    root = Path(tempfile.mkdtemp(prefix="tf-bench-root-"))
    root.chmod(0o711)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=80m,mode=0711", "tmpfs", str(root)], check=True)
    old_wait, workspace.WAIT_SEC = workspace.WAIT_SEC, 1.0
    sessions = []
    try:
        sessions = [rt.start(image, limits, work_root=root) for _ in range(2)]
        for s in sessions:
            s.exec("head -c 30M /dev/zero > /app/fill", timeout=30)
        try:
            sessions.append(rt.start(image, limits, work_root=root))
            res = sessions[-1].exec("head -c 30M /dev/zero > /app/fill && echo ok", timeout=30)
            yield "shared work root exhausted", "bwrap", False, f"a third session started: {res.stderr.strip()[:80]}"
        except TermforgeError as exc:
            yield "shared work root exhausted", "bwrap", True, f"refused: {str(exc)[:90]}..."
    finally:
        workspace.WAIT_SEC = old_wait
        for s in sessions:
            s.stop()
        subprocess.run(["umount", "-l", str(root)], check=False)
        os.rmdir(root)


if __name__ == "__main__":
    sys.exit(main())
