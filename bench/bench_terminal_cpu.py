"""CPU bench of terminal training episodes (SmolLM2-135M, real bwrap sandboxes).

1. Episodes/min and scored tokens/s at generation batch 1 (each episode alone: one generate call
   per turn per episode) versus batch B (all episodes together: one call per turn), on the same
   episodes, measured in the same run; prints the ratio.
2. With --train: a short mixed-objective training run (GRPO part + OPSD part) on the same tasks,
   printing the held-out KL(teacher||student) before and after, the GRPO group counts and the
   wall time (what the embedded `terminal` ablation does).

    python bench/bench_terminal_cpu.py --tasks 4 --episodes 8 [--train]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

FAMILIES = ("log_level_filter", "account_audit", "shell_script_fix")


def make_corpus(root: Path, n: int) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from conftest import make_signature
    from termforge.generate.families import family_by_name
    from termforge.generate.procedural import generate_task
    from termforge.hints import procedural_hint
    from termforge.io import atomic_write_json
    from termforge.images.runtimes import BwrapRuntime

    names = FAMILIES
    tasks = []
    for i in range(n):
        fam = family_by_name(names[i % len(names)])
        sig = make_signature(i, fam.domains[0], fam.verifier_kinds[0], fam.fixture_kinds[0])
        tasks.append(generate_task(sig, root / "tasks", families=[fam]))
    rt = BwrapRuntime()
    for t in tasks:
        assert rt.build(t, root / "images").ok, t
    pq.write_table(pa.table({"task_id": [t.name for t in tasks], "demo": [procedural_hint(t) for t in tasks]}),
                   root / "demos.parquet")
    atomic_write_json(root / "corpus.json", {"kept": [t.name for t in tasks]})
    return tasks


def bench_batching(root: Path, tasks, episodes: int, batch: int, max_new_tokens: int, turn_cap: int) -> dict:
    import torch

    from termforge.harness import HarnessConfig
    from termforge.models.transformers_backend import load_causal_lm
    from termforge.opsd.rollout import stop_token_ids
    from termforge.opsd.terminal import EpisodeSpec, TransformersEngine, run_terminal_episodes
    from termforge.runtime.base import Limits
    from termforge.images.runtimes import BwrapRuntime

    torch.set_num_threads(2)
    model, tok = load_causal_lm("smollm2-135m-instruct", device="cpu", dtype="float32")
    engine = TransformersEngine(lambda: model, tok, temperature=1.1, top_p=0.95, top_k=20,
                                stop_ids=stop_token_ids(model, tok))
    specs = [EpisodeSpec(tasks[i % len(tasks)].name, i, "grpo") for i in range(episodes)]
    options = dict(tasks_dir=root / "tasks", images_dir=root / "images", runtime=BwrapRuntime(),
                   harness=HarnessConfig(turn_cap=turn_cap, max_format_errors=turn_cap, command_timeout_sec=30,
                                         task_timeout_sec=300),
                   limits=Limits(wall_sec=120, cpu_sec=120, memory_mb=4096), max_new_tokens=max_new_tokens,
                   max_episode_tokens=2048, workers=4)
    out = {}
    for label, groups in (("batch_1", [[s] for s in specs]),
                          (f"batch_{batch}", [specs[i: i + batch] for i in range(0, len(specs), batch)])):
        t0 = time.perf_counter()
        eps, calls, gen_s = [], 0, 0.0
        for k, group in enumerate(groups):
            got, stats = run_terminal_episodes(engine, tok, group, seed=k, **options)
            eps += got
            calls += stats["generate_calls"]
            gen_s += stats["generate_s"]
        wall = time.perf_counter() - t0
        scored = sum(e.num_scored for e in eps)
        out[label] = {"episodes": len(eps), "wall_s": round(wall, 2), "generate_calls": calls,
                      "generate_s": round(gen_s, 2), "episodes_per_min": round(60 * len(eps) / wall, 2),
                      "scored_tokens": scored, "scored_tokens_per_s": round(scored / wall, 2),
                      "graded": sum(e.status == "graded" for e in eps),
                      "rewards": [e.reward for e in eps]}
        print(label, json.dumps(out[label]))
    b1, bb = out["batch_1"], out[f"batch_{batch}"]
    out["ratio_episodes_per_min"] = round(bb["episodes_per_min"] / b1["episodes_per_min"], 2)
    out["ratio_scored_tokens_per_s"] = round(bb["scored_tokens_per_s"] / b1["scored_tokens_per_s"], 2)
    print(f"batch {batch} vs 1: episodes/min x{out['ratio_episodes_per_min']}, "
          f"scored tokens/s x{out['ratio_scored_tokens_per_s']}")
    return out


def bench_train(root: Path, out_dir: Path, steps: int) -> dict:
    from termforge.opsd.trainer import run_train_cli_args

    options = {"data_kind": "terminal", "objective": "mixed", "max_steps": steps, "prompts_per_step": 1,
               "group_size": 2, "max_new_tokens": 32, "max_episode_tokens": 1024, "episode_turn_cap": 2,
               "probe_size": 1, "probe_max_new_tokens": 32, "checkpoint_every": 1, "device": "cpu",
               "num_threads": 2}
    t0 = time.perf_counter()
    summary = run_train_cli_args(options, out_dir, demos=str(root / "demos.parquet"), tasks_dir=str(root / "tasks"),
                                 images_dir=str(root / "images"), corpus=str(root / "corpus.json"))
    wall = time.perf_counter() - t0
    metrics = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    result = {"wall_s": round(wall, 1), "kl_probe": summary.get("kl_probe"), "rl_pool": summary.get("rl_pool"),
              "steps": [{k: m.get(k) for k in ("step", "loss", "opsd_loss", "grpo_loss", "reward_mean", "groups_kept",
                                               "groups_all_failed", "grpo_no_signal_reason", "step_s")}
                        for m in metrics]}
    print("train", json.dumps(result, indent=1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--turn-cap", type=int, default=2)
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--skip-batching", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-terminal-") as tmp:
        root = Path(tmp)
        tasks = make_corpus(root, args.tasks)
        if not args.skip_batching:
            bench_batching(root, tasks, args.episodes, args.batch, args.max_new_tokens, args.turn_cap)
        if args.train:
            bench_train(root, root / "run", args.train_steps)


if __name__ == "__main__":
    main()
