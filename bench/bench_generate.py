"""Procedural generation throughput (tasks per second per core) and sandbox exec overhead
(`true` in a bwrap sandbox versus a plain subprocess), each against its baseline in the same run."""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from termforge.axes.sampler import sample_signatures  # noqa: E402
from termforge.axes.taxonomy import load_taxonomy  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.runtime.bwrap import BwrapRuntime  # noqa: E402


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
    a = ap.parse_args()
    bench_generate(a.tasks)
    bench_exec(a.reps)
