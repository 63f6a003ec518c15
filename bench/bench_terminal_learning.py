"""Does the loop learn? GRPO (and mixed GRPO + OPSD) on calibration tasks that SmolLM2-135M solves
sometimes, held-out reward before and after, over seeds (issue #30; docs/opsd.md, "Showing that
the loop learns").

1. pool: a calibration corpus (the opt-in `one_step_file_task` family, corpus kind `calibration`),
   built in bwrap, with procedural hints (the OPSD part's privileged context);
2. pass@k: k episodes per task of the untrained model through the harness (the training episode
   engine: same harness rules as solve, real sandboxes, the clean verifier), written as a
   passk.json in the solve stage's format; the tasks solved sometimes but not always (the band
   0 < c/k < 1) are split into train and held-out;
3. hint uplift of the untrained policy on the train split (termforge.opsd.uplift: pass rate with
   the hint in context vs without, `--uplift-k` episodes per task and arm on the same seeds), per
   task and per family: OPSD can only distil what the hint changes;
4. per seed, objective (grpo, opsd, mixed) and learning rate (`--lrs`, a grid such as
   2e-3,2e-4,2e-5): the real trainer (termforge.opsd.trainer.train; the teacher is the current
   policy given the hint, teacher_mode's default for terminal data) on the train split, with its
   held-out reward probe on the held-out split: mean verifier reward of `--eval-episodes` episodes
   per held-out task before and after training (the same sampling seeds both times, so only the
   weights differ);
5. prints the reward curve, the share of GRPO groups with signal and the KL to the teacher per step, held-out reward
   before and after per seed, the mean change with a bootstrap 95% interval over held-out tasks
   and an exact paired sign-flip test, and the same against a baseline measured in the same run
   (no training: the change is 0 by construction, so the interval is the test's own noise floor).

Every stage checkpoints under --out (a killed bench resumes: finished stages and finished runs
are read back; a run killed mid-training resumes from its last checkpoint).

    python bench/bench_terminal_learning.py                 # the full bench: 5 seeds x 3 arms (hours on 2 idle cores)
    python bench/bench_terminal_learning.py --lrs 2e-3,2e-4,2e-5 --objectives mixed   # learning-rate grid
    python bench/bench_terminal_learning.py --quick         # smoke test: tiny pool, 1 seed, 1 step
    python bench/bench_terminal_learning.py --measure       # pass@k grid: temperature x turn cap x tokens

Threads: on a shared machine `--threads 1` is several times faster than 2 (OpenMP workers spin
while other processes hold the cores); on idle cores use 2. The bench sets OMP_WAIT_POLICY=PASSIVE
as `termforge train` does (termforge.cpu_budget).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_args import chosen, numbers  # noqa: E402
from termforge.axes.vocab import TASK_COMPLEXITIES  # noqa: E402
from termforge.io import atomic_write_json, read_json, seed_from  # noqa: E402
from termforge.opsd.config import OPSDConfig  # noqa: E402

LEVELS = TASK_COMPLEXITIES
# What train.objective may be: checked before the pool is built (the trainer would refuse it after).
OBJECTIVES = next(f.metadata["choices"] for f in dataclasses.fields(OPSDConfig) if f.name == "objective")
TASK_TIMEOUT_SEC = 3600.0


# ---------------------------------------------------------------------------------------------
# pool
# ---------------------------------------------------------------------------------------------

def make_pool(root: Path, n: int, seed: int, levels: tuple[str, ...]) -> list[str]:
    """n calibration tasks at the given complexity levels, generated, built and hinted under root
    (tasks/, images/, demos.parquet). Resumable: finished tasks and images are kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from termforge.axes.sampler import sample_signatures
    from termforge.axes.taxonomy import load_taxonomy
    from termforge.generate.procedural import generate_task
    from termforge.hints import procedural_hint
    from termforge.images.runtimes import BwrapRuntime

    done = root / "pool.json"
    if done.exists():
        return read_json(done)["tasks"]
    # Signatures of the calibration corpus kind (every level alike), filtered to the levels asked.
    sigs, size = [], n
    while len(sigs) < n:
        size *= 2
        sigs = [s for s in sample_signatures(size, seed, {"calibration": 1}, load_taxonomy(),
                                             domains=["file_operations"]) if s["task_complexity"] in levels][:n]
    rt = BwrapRuntime()
    tasks = []
    for i, sig in enumerate(sigs):
        task = generate_task(sig, root / "tasks")
        build = rt.build(task, root / "images")
        if not build.ok:
            raise SystemExit(f"bench: task {task.name} did not build: {build.reason}")
        tasks.append(task)
        print(f"pool: {i + 1}/{n} {task.name} built", end="\r", flush=True)
    pq.write_table(pa.table({"task_id": [t.name for t in tasks], "demo": [procedural_hint(t) for t in tasks]}),
                   root / "demos.parquet")
    ids = [t.name for t in tasks]
    atomic_write_json(done, {"tasks": ids})
    print(f"pool: {len(ids)} calibration tasks built ({dict(Counter(s['task_complexity'] for s in sigs))})")
    return ids


def task_facts(root: Path, task_id: str) -> dict:
    given = read_json(root / "tasks" / task_id / "private" / "truth.json")["given"]
    return {"kind": given["kind"], "level": LEVELS[given["level"]]}


# ---------------------------------------------------------------------------------------------
# pass@k of the untrained model
# ---------------------------------------------------------------------------------------------

class BaseModel:
    """The untrained policy and its tokenizer, loaded once."""

    def __init__(self, threads: int):
        import torch

        from termforge.models.transformers_backend import load_causal_lm

        torch.set_num_threads(threads)
        self.model, self.tok = load_causal_lm("smollm2-135m-instruct", device="cpu", dtype="float32")


def passk(root: Path, base: BaseModel, task_ids: list[str], k: int, *, temperature: float, top_p: float,
          top_k: int, turn_cap: int, max_new_tokens: int, seed: int, label: str, batch: int = 64) -> dict:
    """k episodes per task, graded by the clean verifier; the solve stage's passk.json format
    (per_task: task_id, n, c), written to root/<label>.json. Resumable per label."""
    from termforge.harness import HarnessConfig
    from termforge.metrics import pass_at_k
    from termforge.opsd.rollout import stop_token_ids
    from termforge.opsd.terminal import EpisodeSpec, TransformersEngine, run_terminal_episodes
    from termforge.runtime.base import Limits
    from termforge.images.runtimes import BwrapRuntime

    path = root / f"{label}.json"
    if path.exists():
        return read_json(path)
    engine = TransformersEngine(lambda: base.model, base.tok, temperature=temperature, top_p=top_p, top_k=top_k,
                                stop_ids=stop_token_ids(base.model, base.tok))
    specs = [EpisodeSpec(t, r, "probe") for t in task_ids for r in range(k)]
    t0 = time.perf_counter()
    episodes, stats = [], Counter()
    # Batches of `batch` episodes: one batch of every episode would hold a KV cache and per-step
    # logits of several GB.
    for start in range(0, len(specs), batch):
        got, st = run_terminal_episodes(
            engine, base.tok, specs[start: start + batch], tasks_dir=root / "tasks", images_dir=root / "images",
            runtime=BwrapRuntime(),
            # The episode clock also runs while a batched generate serves every other episode, so
            # the task limit is generous: on a busy CPU one turn of a large batch takes minutes.
            harness=HarnessConfig(turn_cap=turn_cap, max_format_errors=turn_cap, command_timeout_sec=30,
                                  task_timeout_sec=TASK_TIMEOUT_SEC),
            limits=Limits(wall_sec=60, cpu_sec=60, memory_mb=2048), seed=seed_from(seed, start),
            max_new_tokens=max_new_tokens, max_episode_tokens=4096, workers=4)
        episodes += got
        stats.update({"generate_s": st["generate_s"]})
        print(f"pass@k {label}: {len(episodes)}/{len(specs)} episodes", end="\r", flush=True)
    wall = time.perf_counter() - t0
    per_task: dict[str, dict] = {t: {"task_id": t, "n": 0, "c": 0, **task_facts(root, t)} for t in task_ids}
    infra = 0
    for e in episodes:
        if e.status != "graded":
            infra += 1
            continue
        row = per_task[e.spec.task_id]
        row["n"] += 1
        row["c"] += int(e.reward == 1.0)
    graded = [r for r in per_task.values() if r["n"]]
    k_min = min((r["n"] for r in graded), default=0)
    # The solve stage's passk.json keys the trainer's schema reads: task count and overall pass@k.
    overall = {f"pass@{j}": round(sum(pass_at_k(r["n"], r["c"], j) for r in graded) / len(graded), 6)
               for j in range(1, k_min + 1)}
    out = {"tasks": len(per_task), "overall": overall, "label": label, "k": k, "temperature": temperature, "top_p": top_p, "top_k": top_k, "turn_cap": turn_cap,
           "max_new_tokens": max_new_tokens, "episodes": len(episodes), "infra_failed": infra,
           "wall_s": round(wall, 1), "generate_s": round(stats["generate_s"], 1),
           "end_reasons": dict(Counter(e.end_reason for e in episodes if e.status == "graded")),
           "per_task": list(per_task.values()),
           # What the model replied: the first reply of every episode, for reading failures.
           "first_replies": [{"task_id": e.spec.task_id, "reward": e.reward,
                              "reply": next((m["content"] for m in e.messages if m["role"] == "assistant"), "")}
                             for e in episodes]}
    atomic_write_json(path, out)
    return out


def rates_table(result: dict) -> str:
    """Pass rate (c/n) per kind x level, and the share of tasks in the band 0 < c/n < 1."""
    cells: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    band = Counter()
    for row in result["per_task"]:
        for key in ((row["kind"], row["level"]), ("all", row["level"]), (row["kind"], "all"), ("all", "all")):
            cells[key][0] += row["c"]
            cells[key][1] += row["n"]
        band["in_band" if 0 < row["c"] < row["n"] else ("never" if row["c"] == 0 else "always")] += 1
    kinds = sorted({k for k, _ in cells if k != "all"}) + ["all"]
    levels = [lv for lv in LEVELS if any(l2 == lv for _, l2 in cells)] + ["all"]
    lines = ["kind \\ level".ljust(14) + "".join(lv.rjust(12) for lv in levels)]
    for kind in kinds:
        line = kind.ljust(14)
        for lv in levels:
            c, n = cells.get((kind, lv), (0, 0))
            line += (f"{c}/{n}={c / n:.2f}" if n else "-").rjust(12)
        lines.append(line)
    lines.append(f"tasks: {dict(band)} (band: solved sometimes, not always)")
    return "\n".join(lines)


def measure(args) -> None:
    """The pass@k grid of the untrained model over the calibration pool (issue #30, step 2)."""
    root = Path(args.out)
    ids = make_pool(root, args.pool, args.pool_seed, args.levels)
    base = BaseModel(args.threads)
    for temperature in [float(x) for x in args.temperatures.split(",")]:
        for turn_cap in [int(x) for x in args.turn_caps.split(",")]:
            for tokens in [int(x) for x in args.token_caps.split(",")]:
                label = f"passk-T{temperature:g}-turns{turn_cap}-tok{tokens}-k{args.k}"
                res = passk(root, base, ids, args.k, temperature=temperature, top_p=args.top_p, top_k=args.top_k,
                            turn_cap=turn_cap, max_new_tokens=tokens, seed=seed_from("bench-passk", args.pool_seed),
                            label=label)
                print(f"\n== {label}: {res['episodes']} episodes in {res['wall_s']} s "
                      f"(generate {res['generate_s']} s), end reasons {res['end_reasons']}")
                print(rates_table(res), flush=True)


# ---------------------------------------------------------------------------------------------
# training runs
# ---------------------------------------------------------------------------------------------

def split_band(root: Path, selection: dict, heldout: int, seed: int, fill: bool = False,
               select: str = "band") -> tuple[list[str], list[str]]:
    """The tasks solved sometimes but not always (select "band"; "all": every pool task),
    shuffled by the seed, split into train and held-out (held-out: `heldout` tasks, at most
    half). Written as train.json / heldout.json. With `fill` (--quick only) a band under 4 tasks
    is topped up from the rest of the pool, and the bench says so: the smoke test checks the
    machinery, not the model."""
    band = [r["task_id"] for r in selection["per_task"] if select == "all" or 0 < r["c"] < r["n"]]
    if len(band) < 4 and fill:
        rest = [r["task_id"] for r in selection["per_task"] if r["task_id"] not in band]
        print(f"bench --quick: only {len(band)} tasks in the band; topped up with {min(4 - len(band), len(rest))} "
              "others (no learning claim from a quick run)")
        band += rest[: 4 - len(band)]
    if len(band) < 4:
        print(f"bench: only {len(band)} pool tasks lie in the band 0 < pass rate < 1 (need 4); use a larger --pool "
              "or another --temperature (see --measure)", file=sys.stderr)
        raise SystemExit(2)
    random.Random(seed_from("bench-split", seed)).shuffle(band)
    n_held = max(2, min(heldout, len(band) // 2))
    held, train = sorted(band[:n_held]), sorted(band[n_held:])
    # train.json is the trainer's corpus manifest (schema corpus_manifest), heldout.json its
    # reward_probe_tasks list.
    atomic_write_json(root / "train.json", {"kept": train, "tasks_dir": str(root / "tasks")})
    atomic_write_json(root / "heldout.json", {"kept": held})
    return train, held


def train_options(args, objective: str, seed: int, root: Path) -> dict:
    """The trainer's settings of one run (everything not set here is the OPSDConfig default)."""
    return {
        "data_kind": "terminal", "objective": objective, "seed": seed, "device": "cpu", "num_threads": args.threads,
        "max_steps": args.steps, "prompts_per_step": args.prompts, "group_size": args.group,
        "learning_rate": args.lr, "lora_r": args.lora_r, "lora_alpha": 2.0 * args.lora_r,
        "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens, "max_episode_tokens": 1024, "episode_turn_cap": args.turn_cap,
        "episode_max_format_errors": args.turn_cap, "episode_task_timeout_sec": TASK_TIMEOUT_SEC,
        "micro_batch_size": 8, "probe_size": 0,
        "reward_probe_tasks": str(root / "heldout.json"), "reward_probe_episodes": args.eval_episodes,
        "checkpoint_every": 1, "plot": False,
    }


def hint_uplift(args, root: Path) -> dict:
    """The untrained policy's hint uplift on the train split (read back when done earlier)."""
    from termforge.opsd.uplift_run import run_uplift_cli

    path = root / "uplift.json"
    if path.exists():
        return read_json(path)
    return run_uplift_cli(train_options(args, "opsd", args.first_seed, root), path, demos=str(root / "demos.parquet"),
                          tasks_dir=str(root / "tasks"), images_dir=str(root / "images"),
                          corpus=str(root / "train.json"), k=args.uplift_k)


def run_training(args, root: Path, objective: str, seed: int, lr: float | None = None) -> dict:
    """One training run with the held-out reward probe; a finished run is read back, a killed one
    resumes from its last checkpoint (the trainer's own resume). `lr` overrides --lr (a grid arm)."""
    from termforge.opsd.trainer import run_train_cli_args

    out = root / "runs" / (f"{objective}-seed{seed}" if lr is None else f"{objective}-lr{lr:g}-seed{seed}")
    if (out / "summary.json").exists() and (out / "reward_probe.json").exists():
        print(f"run {out.name}: finished earlier, read back")
    else:
        t0 = time.perf_counter()
        # --select all: no pass rates, so the trainer's GRPO pool is every training task (its
        # fallback, said in its log); band: the pool is the band, as the workflow calibrates it.
        options = {**train_options(args, objective, seed, root), **({"learning_rate": lr} if lr is not None else {})}
        run_train_cli_args(options, out, demos=str(root / "demos.parquet"),
                           tasks_dir=str(root / "tasks"), images_dir=str(root / "images"),
                           passk=str(root / "passk.json") if args.select == "band" else None,
                           corpus=str(root / "train.json"))
        print(f"run {out.name}: {time.perf_counter() - t0:.0f} s")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"objective": objective, "seed": seed, "summary": read_json(out / "summary.json"),
            "reward_probe": read_json(out / "reward_probe.json"), "metrics": metrics}


# ---------------------------------------------------------------------------------------------
# statistics (paired: the same held-out tasks before and after)
# ---------------------------------------------------------------------------------------------

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def bootstrap_ci(values: list[float], seed: int, reps: int = 10_000) -> tuple[float, float]:
    """Percentile 95% interval of the mean, resampling the values (held-out tasks) with replacement."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    return means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def sign_flip_p(values: list[float], seed: int, reps: int = 200_000) -> float:
    """Two-sided p-value of the paired sign-flip (permutation) test of mean change 0: exact for up
    to 20 pairs, Monte Carlo beyond."""
    n = len(values)
    observed = abs(sum(values))
    if n <= 20:
        hits = 0
        for mask in range(1 << n):
            total = sum(-v if mask >> i & 1 else v for i, v in enumerate(values))
            hits += abs(total) >= observed - 1e-12
        return hits / (1 << n)
    rng = random.Random(seed)
    hits = sum(abs(sum(v if rng.random() < 0.5 else -v for v in values)) >= observed - 1e-12 for _ in range(reps))
    return (hits + 1) / (reps + 1)


def objective_stats(runs: list[dict], seed: int) -> dict:
    """Per seed: held-out reward before, after, change; over seeds: the per-task change averaged
    over seeds, its mean with a bootstrap interval and the sign-flip test over tasks, and the
    per-seed changes' mean with a t interval."""
    per_task: dict[str, list[float]] = defaultdict(list)
    seeds = []
    for run in runs:
        rp = run["reward_probe"]
        seeds.append({"seed": run["seed"], "before": rp["before"], "after": rp["after"], "delta": rp["delta"]})
        for row in rp["rows"]:
            if row["delta"] is not None:
                per_task[row["id"]].append(row["delta"])
    task_deltas = [sum(v) / len(v) for _, v in sorted(per_task.items())]
    out = {"seeds": seeds, "tasks": len(task_deltas),
           "before_mean": sum(s["before"] for s in seeds) / len(seeds),
           "after_mean": sum(s["after"] for s in seeds) / len(seeds),
           "delta_mean": sum(task_deltas) / len(task_deltas) if task_deltas else None}
    if task_deltas:
        out["delta_ci95_bootstrap_tasks"] = bootstrap_ci(task_deltas, seed)
        out["sign_flip_p"] = sign_flip_p(task_deltas, seed)
        out["tasks_up_down_same"] = [sum(d > 0 for d in task_deltas), sum(d < 0 for d in task_deltas),
                                     sum(d == 0 for d in task_deltas)]
    deltas = [s["delta"] for s in seeds]
    if len(deltas) >= 2:
        m = sum(deltas) / len(deltas)
        sd = math.sqrt(sum((d - m) ** 2 for d in deltas) / (len(deltas) - 1))
        half = T_975.get(len(deltas) - 1, 1.96) * sd / math.sqrt(len(deltas))
        out["delta_ci95_t_seeds"] = (m - half, m + half)
    return out


def curves(runs: list[dict]) -> list[dict]:
    """Per step, averaged over seeds: GRPO reward, share of GRPO groups with signal, OPSD reward."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for run in runs:
        for m in run["metrics"]:
            by_step[m["step"]].append(m)
    rows = []
    for step in sorted(by_step):
        ms = by_step[step]

        def mean(key):
            vals = [m[key] for m in ms if isinstance(m.get(key), (int, float))]
            return sum(vals) / len(vals) if vals else None

        groups = [(m.get("groups_kept", 0), sum(m.get(k, 0) for k in ("groups_kept", "groups_all_failed",
                                                                      "groups_all_solved",
                                                                      "groups_zero_variance_other")))
                  for m in ms]
        kept, total = sum(g[0] for g in groups), sum(g[1] for g in groups)
        rows.append({"step": step, "reward_grpo": mean("reward_mean_grpo"), "reward_opsd": mean("reward_mean_opsd"),
                     "groups_with_signal": f"{kept}/{total}", "signal_share": kept / total if total else None,
                     "grpo_loss": mean("grpo_loss"), "opsd_kl": mean("opsd_kl_mean"), "step_s": mean("step_s")})
    return rows


def _f(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_uplift(uplift: dict) -> None:
    overall = uplift["overall"]
    print(f"\n--- hint uplift of the untrained policy (k={uplift['k']} per arm, same seeds): pass rate without "
          f"{_f(overall['pass_without'])}, with {_f(overall['pass_with'])}, uplift {_f(overall['uplift'])}; "
          f"{len(uplift['no_uplift'])} of {overall['tasks']} hints without uplift")
    for name, fam in uplift["families"].items():
        print(f"  family {name}: {fam['tasks']} tasks, without {_f(fam['pass_without'])} with {_f(fam['pass_with'])} "
              f"uplift {_f(fam['uplift'])}")
    for t in uplift["tasks"]:
        print(f"  {t['task_id']}: without {_f(t['pass_without'])} with {_f(t['pass_with'])} uplift {_f(t['uplift'])}"
              + ("  (no uplift)" if t["no_uplift"] else ""))


def print_report(result: dict) -> None:
    sel = result["selection"]
    print("\n=== held-out reward before/after training (bench/bench_terminal_learning.py)")
    chosen = "in the band 0 < c/k < 1" if result["settings"]["select"] == "band" else "taken (--select all)"
    print(f"pool: {result['pool']} calibration tasks; pass@{sel['k']} at T {sel['temperature']}, turn cap "
          f"{sel['turn_cap']}, {sel['max_new_tokens']} tokens: {result['in_band']} in the band 0 < c/k < 1; "
          f"{result['band']} {chosen} -> {len(result['train'])} train, {len(result['heldout'])} held-out")
    print(f"settings: {json.dumps(result['settings'])}")
    if result.get("uplift"):
        print_uplift(result["uplift"])
    for objective, block in result["objectives"].items():
        st = block["stats"]
        print(f"\n--- {objective}: reward curve and GRPO groups with signal per step (mean over {len(st['seeds'])} seeds)")
        print("step  grpo reward  opsd reward  groups with signal  share  KL(teacher)   step s")
        for r in block["curve"]:
            print(f"{r['step']:>4}  {_f(r['reward_grpo']):>11}  {_f(r['reward_opsd']):>11}  "
                  f"{r['groups_with_signal']:>18}  {_f(r['signal_share'], 2):>5}  {_f(r['opsd_kl'], 4):>11}  "
                  f"{_f(r['step_s'], 0):>7}")
        print(f"held-out reward per seed ({st['tasks']} tasks x {result['settings']['eval_episodes']} episodes):")
        for s in st["seeds"]:
            ratio = s["after"] / s["before"] if s["before"] else float("inf")
            print(f"  seed {s['seed']}: before {s['before']:.3f} (baseline, same run) after {s['after']:.3f}  "
                  f"change {s['delta']:+.3f}  after/before x{ratio:.2f}")
        lo, hi = st.get("delta_ci95_bootstrap_tasks", (None, None))
        print(f"  mean: before {st['before_mean']:.3f} after {st['after_mean']:.3f}; change per held-out task "
              f"(mean over seeds) {_f(st['delta_mean'])} [95% bootstrap over tasks {_f(lo)}, {_f(hi)}]; "
              f"paired sign-flip test p = {_f(st.get('sign_flip_p'), 4)}; tasks up/down/same "
              f"{st.get('tasks_up_down_same')}")
        if "delta_ci95_t_seeds" in st:
            lo, hi = st["delta_ci95_t_seeds"]
            print(f"  per-seed changes: 95% t interval over seeds [{lo:+.3f}, {hi:+.3f}]")


def learn(args) -> dict:
    root = Path(args.out)
    ids = make_pool(root, args.pool, args.pool_seed, args.levels)
    base = BaseModel(args.threads)
    selection = passk(root, base, ids, args.k, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                      turn_cap=args.turn_cap, max_new_tokens=args.max_new_tokens,
                      seed=seed_from("bench-passk", args.pool_seed), label="passk")
    del base
    print(rates_table(selection))
    train, held = split_band(root, selection, args.heldout, args.pool_seed, fill=args.quick, select=args.select)
    band = len(train) + len(held)
    uplift = hint_uplift(args, root) if args.uplift_k else None
    objectives = {}
    lrs = [float(x) for x in args.lrs.split(",")] if args.lrs else [args.lr]
    for objective in args.objectives:
        for lr in lrs:
            arm = objective if not args.lrs else f"{objective}@lr{lr:g}"
            runs = [run_training(args, root, objective, seed, lr=lr if args.lrs else None)
                    for seed in range(args.first_seed, args.first_seed + args.seeds)]
            objectives[arm] = {"stats": objective_stats(runs, seed_from("bench-stats", objective)),
                               "curve": curves(runs)}
    settings = {k: getattr(args, k) for k in ("steps", "prompts", "group", "lr", "lrs", "lora_r", "temperature",
                                              "top_p", "top_k", "turn_cap", "max_new_tokens", "eval_episodes",
                                              "seeds", "select", "uplift_k")}
    in_band = sum(1 for r in selection["per_task"] if 0 < r["c"] < r["n"])
    result = {"pool": len(ids), "band": band, "in_band": in_band, "train": train, "heldout": held,
              "selection": {k: selection[k] for k in ("k", "temperature", "turn_cap", "max_new_tokens")},
              "settings": settings, "objectives": objectives, "uplift": uplift}
    atomic_write_json(root / "result.json", result)
    print_report(result)
    return result


# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None,
                        help="checkpoint folder (a rerun resumes from it); default results/bench/terminal_learning, "
                             "with --quick a temporary folder removed at the end")
    parser.add_argument("--measure", action="store_true", help="only the pass@k grid of the untrained model")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny pool, one seed, one step")
    parser.add_argument("--pool", type=int, default=48, help="calibration tasks generated")
    parser.add_argument("--pool-seed", type=int, default=30)
    parser.add_argument("--levels", default="short", help="complexity levels of the pool (SmolLM2 solves "
                                                                  "none above short: --measure)")
    parser.add_argument("--k", type=int, default=6, help="pass@k episodes per task")
    parser.add_argument("--temperatures", default="0.7", help="--measure: comma-separated")
    parser.add_argument("--turn-caps", default="1", help="--measure: comma-separated")
    parser.add_argument("--token-caps", default="40", help="--measure: comma-separated")
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 is faster on a busy machine)")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (pass@k, training, "
                                                                     "held-out reward)")
    parser.add_argument("--turn-cap", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--heldout", type=int, default=8, help="held-out tasks (at most half the band)")
    parser.add_argument("--select", choices=("band", "all"), default="band",
                        help="which pool tasks train and are held out: those solved sometimes by the untrained "
                             "model (band), or all of them")
    parser.add_argument("--objectives", default="grpo,opsd,mixed",
                        help=f"comma-separated training objectives to compare ({', '.join(OBJECTIVES)})")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds first-seed .. first-seed + seeds - 1: processes may share the seeds out over "
                             "copies of one --out folder, whose runs/ a later call with every seed reads back")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=4, help="tasks per step (each part)")
    parser.add_argument("--group", type=int, default=8, help="GRPO group size")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lrs", default=None, help="a learning-rate grid (comma-separated, e.g. 2e-3,2e-4,2e-5): "
                                                  "every objective runs at each")
    parser.add_argument("--uplift-k", type=int, default=8, help="hint-uplift episodes per task and arm before "
                                                               "training (0: skip; at least 8)")
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--eval-episodes", type=int, default=8, help="held-out episodes per task, before and after")
    args = parser.parse_args(argv)
    # Names checked before any work (an unknown level would otherwise sample signatures forever).
    args.levels = tuple(chosen("--levels", args.levels, TASK_COMPLEXITIES))
    args.objectives = chosen("--objectives", args.objectives, OBJECTIVES)
    numbers("--temperatures", args.temperatures)
    numbers("--turn-caps", args.turn_caps, int)
    numbers("--token-caps", args.token_caps, int)
    numbers("--lrs", args.lrs)
    from termforge.cpu_budget import passive_openmp_env

    passive_openmp_env()  # before torch loads its OpenMP runtime
    if args.quick:
        args.pool, args.k, args.seeds, args.steps, args.prompts, args.group = 8, 3, 1, 1, 1, 2
        args.heldout, args.eval_episodes, args.max_new_tokens = 2, 2, 32
        args.uplift_k = 8 if args.uplift_k else 0
    scratch = None
    if args.out is None and args.quick:
        # A smoke run has nothing worth resuming: it works in a temporary folder and leaves nothing.
        scratch = tempfile.TemporaryDirectory(prefix="bench-terminal-learning-")
        args.out = scratch.name
    elif args.out is None:
        args.out = str(ROOT / "results" / "bench" / "terminal_learning")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        if args.measure:
            measure(args)
        else:
            learn(args)
    finally:
        if scratch is not None:
            scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
