"""Run the test suite while the machine is deliberately busy (issue: the suite passes however
busy the machine is).

Starts `--burners` CPU-burning processes (default: one per core), then runs the README's
test command (`make test`) or the pytest arguments given after `--`, and prints the pytest summary,
the wall time and the load average seen during the run. The burners are stopped however the run
ends. Repeat it (`--repeat 2`) to catch failures that depend on scheduling.

    .venv/bin/python bench/stress_suite.py                    # make test, one burner per core
    .venv/bin/python bench/stress_suite.py --repeat 2 --burners 4
    .venv/bin/python bench/stress_suite.py -- tests/test_opsd_trainer.py -q   # a slice
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|error).*?) in [\d.]+s", re.M)


def burn(stop_at: float) -> None:
    """Spin on arithmetic until the deadline or until killed (a busy core, not a sleeping one)."""
    x = 0
    while time.time() < stop_at:
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def load_sampler(samples: list[float], stop: threading.Event) -> None:
    while not stop.wait(15):
        samples.append(os.getloadavg()[0])


def run_once(command: list[str], burners: int, max_hours: float) -> dict:
    stop_at = time.time() + max_hours * 3600
    procs = [mp.Process(target=burn, args=(stop_at,), daemon=True) for _ in range(burners)]
    for p in procs:
        p.start()
    samples: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=load_sampler, args=(samples, stop), daemon=True)
    sampler.start()
    start = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join()
    wall = time.monotonic() - start
    output = proc.stdout
    found = SUMMARY.findall(output)
    summary = found[-1][0] if found else "(no pytest summary: see the log)"
    failed = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"command": command, "returncode": proc.returncode, "summary": summary, "wall_sec": round(wall, 1),
            "burners": burners, "load_avg_max": max(samples, default=None),
            "load_avg_mean": round(sum(samples) / len(samples), 2) if samples else None,
            "failed": failed, "log_tail": output[-4000:], "output": output}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 1,
                    help="CPU-burning processes kept running during the suite (default: one per core)")
    ap.add_argument("--repeat", type=int, default=1, help="run the suite this many times")
    ap.add_argument("--max-hours", type=float, default=2.0, help="burners stop on their own after this long")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("pytest_args", nargs="*", help="after --: pytest arguments instead of `make test`")
    args = ap.parse_args(argv)
    if args.pytest_args:
        command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args]
    else:
        command = ["make", "test"]
    results = []
    for i in range(args.repeat):
        print(f"stress run {i + 1}/{args.repeat}: {' '.join(command)} with {args.burners} CPU burners", flush=True)
        r = run_once(command, args.burners, args.max_hours)
        output = r.pop("output")
        results.append(r)
        print(f"  {r['summary']}  wall {r['wall_sec']:.0f}s  load avg mean {r['load_avg_mean']} max {r['load_avg_max']}",
              flush=True)
        for line in r["failed"]:
            print("  " + line)
        if args.out:
            # Written after every run (each run's whole pytest output beside the summaries so far),
            # so a machine lost during a later run keeps what finished.
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.with_suffix(f".run{i + 1}.log").write_text(output)
            tmp = args.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(results, indent=2))
            tmp.replace(args.out)
    bad = sum(r["returncode"] != 0 for r in results)
    print(f"stress: {len(results) - bad}/{len(results)} runs green")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
