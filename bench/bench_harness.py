"""Harness overhead and rollout concurrency against a local OpenAI-protocol server.

1. Overhead: per rollout, the time the harness itself spends (episode wall time minus the time
   waiting for the model and minus the commands' own run time), as a fraction of the episode,
   with an instant-reply server. Sandbox start and grading are reported separately.
2. Concurrency: rollouts per minute at concurrency 1, 4 and 16 against a server that answers
   after a fixed delay; the speed-up over concurrency 1 (the baseline measured in this run).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_signature  # noqa: E402
from fake_openai_server import FakeOpenAIServer  # noqa: E402
from termforge.generate.families import family_by_name  # noqa: E402
from termforge.generate.procedural import generate_task  # noqa: E402
from termforge.harness import SUBMIT_MARKER, HarnessConfig  # noqa: E402
from termforge.io import atomic_write_json  # noqa: E402
from termforge.models.base import SamplingParams  # noqa: E402
from termforge.models.registry import make_model  # noqa: E402
from termforge.runtime.base import Limits  # noqa: E402
from termforge.images.runtimes import BwrapRuntime  # noqa: E402
from termforge.solve import SolveSettings, run_solve_shard  # noqa: E402

TURNS = 4


def reply(messages):
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn < TURNS - 1:
        return f"```bash\nls /app | head -3; echo step {turn}\n```"
    return f"```bash\necho {SUBMIT_MARKER}\n```"


def corpus(root: Path, n_tasks: int):
    fam = family_by_name("log_level_filter")
    tasks = [generate_task(make_signature(i, "file_operations", "exact_text", "text_only"), root / "tasks",
                           families=[fam]) for i in range(n_tasks)]
    rt = BwrapRuntime()
    for t in tasks:
        rt.build(t, root / "images")
    atomic_write_json(root / "shard.json", {"shard": "bench", "tasks_dir": str(root / "tasks"),
                                            "tasks": [{"id": t.name} for t in tasks]})
    # The corpus manifest as termforge.quality.validate.write_corpus_manifest writes it (the fields
    # solving reads: where the tasks are and which were kept).
    atomic_write_json(root / "corpus.json", {"tasks_dir": str(root / "tasks"), "kept": [t.name for t in tasks]})


def solve(root: Path, base_url: str, k: int, concurrency: int, tag: str) -> dict:
    model = make_model({"backend": "openai", "model": "bench", "base_url": base_url, "concurrency": 64})
    settings = SolveSettings(k=k, concurrency=concurrency, max_infra_retries=0, seed=1,
                             harness=HarnessConfig(turn_cap=TURNS + 1, sampling=SamplingParams(max_new_tokens=16)),
                             limits=Limits(wall_sec=60))
    start = time.perf_counter()
    res = run_solve_shard(root / "shard.json", root / "corpus.json", root / "images", root / f"{tag}.json",
                          root / f"traj-{tag}", model, settings)
    res["elapsed"] = time.perf_counter() - start
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--delay", type=float, default=1.0, help="server reply delay for the concurrency test")
    ap.add_argument("--concurrency", default="1,4,16", help="rollouts in flight to compare (the first is the baseline)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus(root, a.tasks)
        with FakeOpenAIServer(replies=reply) as server:
            res = solve(root, server.base_url, 2, 1, "overhead")
        fractions, harness_s = [], []
        for r in res["rollouts"]:
            from termforge.io import read_json

            ep = read_json(r["trajectory"])
            own = ep["wall_seconds"] - ep["model_seconds"] - ep["exec_seconds"]
            fractions.append(own / ep["wall_seconds"])
            harness_s.append(own)
        rollout_wall = statistics.median(r["wall_seconds"] for r in res["rollouts"])
        print(f"harness overhead (instant server, {TURNS} turns): median {statistics.median(fractions) * 100:.2f}% "
              f"of episode time ({statistics.median(harness_s) * 1000:.1f} ms); whole rollout incl. sandbox start "
              f"and grading: {rollout_wall:.2f} s")
        rates = {}
        levels = [int(c) for c in a.concurrency.split(",")]
        for conc in levels:
            with FakeOpenAIServer(replies=reply, latency_s=a.delay) as server:
                k = max(2, conc // a.tasks * 2)
                res = solve(root, server.base_url, k, conc, f"c{conc}")
            n = len(res["rollouts"])
            rates[conc] = n / res["elapsed"] * 60
            print(f"concurrency {conc:>2}: {n} rollouts in {res['elapsed']:.1f} s -> {rates[conc]:.1f} rollouts/min "
                  f"(speed-up {rates[conc] / rates[levels[0]]:.2f}x over concurrency {levels[0]})")


if __name__ == "__main__":
    main()
