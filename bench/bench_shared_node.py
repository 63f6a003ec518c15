"""One CPU training step on a shared node: how much a CPU burner slows it, per thread setting.

Runs bench/bench_terminal_step.py (CPU, a real model) in a subprocess, without and with `--burners`
busy-looping processes beside it, for each setting:

    spin      torch's default threads, OpenMP's default wait policy (threads spin between regions)
    passive   the same threads, OMP_WAIT_POLICY=PASSIVE (what `termforge train` sets)
    one       one torch thread, passive

and prints each setting's step time and its burner/quiet ratio. With B burners on C cores a
process that gets a fair share runs about (B + 1) / C times slower when it needs every core; far
more than that is oversubscription (threads waiting on preempted peers, spinning while they wait).
The machine's own background load is printed too: "quiet" is only as quiet as the machine.

    python bench/bench_shared_node.py --model smollm2-135m-instruct --burners 2
    python bench/bench_shared_node.py --tiny --settings spin,passive     # cheaper
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_args import chosen

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"spin": ({}, 0), "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, 0), "one": ({"OMP_WAIT_POLICY": "PASSIVE"}, 1)}


def step_seconds(args, env_extra: dict, threads: int, out: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(env_extra)
    cmd = [sys.executable, str(ROOT / "bench" / "bench_terminal_step.py"), "--device", "cpu", "--json", str(out)]
    cmd += ["--tiny"] if args.tiny else ["--model", args.model, "--prompts", str(args.prompts), "--max-new-tokens",
                                         str(args.max_new_tokens), "--micro-batch", str(args.prompts), "--steps",
                                         str(args.steps)]
    if threads:
        cmd += ["--threads", str(threads)]
    subprocess.run(cmd, check=True, env=env, capture_output=True, text=True, timeout=900)
    return json.loads(out.read_text())["transformers"]["step_s"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="the model bench_terminal_step.py loads (an embedded name, a local model or a Hub id)")
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--settings", default="spin,passive,one",
                        help=f"comma-separated thread settings ({', '.join(SETTINGS)})")
    parser.add_argument("--tiny", action="store_true", help="the step bench's tiny random model (cheap, but its "
                        "step is mostly Python overhead, so threads matter less than with a real model)")
    args = parser.parse_args()
    settings = chosen("--settings", args.settings, SETTINGS)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; burners: {args.burners}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-shared-node-") as tmp:
        for name in settings:
            env_extra, threads = SETTINGS[name]
            quiet = step_seconds(args, env_extra, threads, Path(tmp) / f"{name}-quiet.json")
            burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)]
            try:
                loaded = step_seconds(args, env_extra, threads, Path(tmp) / f"{name}-loaded.json")
            finally:
                for b in burners:
                    b.kill()
                    b.wait()
            results[name] = (quiet, loaded)
            print(f"{name}: step {quiet:.2f}s quiet, {loaded:.2f}s with {args.burners} burners: "
                  f"x{loaded / quiet:.2f} (load average now {os.getloadavg()[0]:.1f})", flush=True)
    if "spin" in results:
        base = results["spin"][1]
        for name, (_, loaded) in results.items():
            print(f"{name} / spin under burners: x{loaded / base:.2f}")


if __name__ == "__main__":
    main()
