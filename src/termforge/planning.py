"""Planning before spending: projected tokens and API cost of a config, and merging corpora.

`estimate` reads only the config: how many model calls each stage makes, and how many tokens they
send and receive, expected and at worst (every turn used, every reply at its length cap, every
repair round taken). Figures that a config cannot know (how long a prompt is, how many tasks
survive validation, how many turns a rollout lasts) are named assumptions with defaults measured
on the embedded run; pass your own to `estimate(cfg, assumptions=...)` or put them under
`planning.assumptions` in the config. Prices come from a `prices` mapping (model name ->
{input_per_mtok, output_per_mtok}, US dollars per million tokens); a model without a price gets
cost null and a note: local models (transformers, vLLM) cost GPU time, not API money.

`combine` merges corpus manifests (results/corpus/manifest.json of several runs) into one.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from termforge.config import run_ablations
from termforge.errors import ConfigError, TermforgeError
from termforge.io import atomic_write_json, seed_from
from termforge.schemas import read

# Defaults of the assumptions; each is overridable. Token counts are per call unless named otherwise.
DEFAULT_ASSUMPTIONS: dict[str, float] = {
    # Share of sampled tasks that survive decontamination and validation.
    "kept_fraction": 0.8,
    # generate (llm backend): prompt of one chain step (signature, earlier steps' text) ...
    "generate_prompt_tokens": 2500,
    # ... a repair prompt adds the failing step's log.
    "generate_repair_extra_tokens": 1500,
    # Reply length as a share of the step's length cap, on average.
    "generate_output_fraction": 0.5,
    # Repair rounds a task takes on average, and chain steps regenerated per repair round.
    "generate_repair_rounds": 0.7,
    "generate_steps_per_repair": 2,
    # solve / tbench: first prompt (system prompt and instruction): ~550 tokens measured with
    # SmolLM2's tokenizer on the embedded corpus.
    "agent_prompt_tokens": 600,
    # Command output fed back per turn (the harness truncates it at 10,000 characters ~ 2,500 tokens).
    "observation_tokens": 300,
    "observation_tokens_max": 2500,
    # Share of the turn cap a rollout uses, and of max_new_tokens a reply uses, on average.
    "turn_fraction": 0.5,
    "reply_fraction": 0.6,
    # hints: prompt (instruction, solution, tests), replies, repair rounds on average.
    "hint_prompt_tokens": 2500,
    "hint_output_tokens": 300,
    "hint_repair_rounds": 0.3,
    # hints' judge (instruction, answer key, draft; a JSON verdict) and extraction probe
    # (instruction and draft, or the instruction alone for its baseline; an answer).
    "hint_judge_prompt_tokens": 2000,
    "hint_judge_output_tokens": 120,
    "hint_probe_prompt_tokens": 800,
    "hint_probe_output_tokens": 200,
    # review: the judge's prompt (rubric, instruction, tests, oracle or a trace) and its JSON reply.
    "review_prompt_tokens": 3000,
    "review_output_tokens": 250,
    # Share of solve rollouts that succeed (their traces are reviewed too).
    "solved_fraction": 0.3,
    # AIME-style evaluation: problem prompt; tb evaluation: tasks when tasks_dir cannot be counted.
    "aime_prompt_tokens": 200,
    "tbench_tasks": 10,
    # OPSD training: prompt of one rollout.
    "train_prompt_tokens": 300,
}

# Length caps of the llm generation chain's steps (termforge.generate.llm.STEP_MAX_TOKENS).
_STEP_MAX_TOKENS_FALLBACK = {"task": 4096, "initial_test": 2048, "final_test": 4096, "environment": 2048,
                             "second_solution": 4096}
_LOCAL_BACKENDS = ("transformers", "vllm")


def _step_caps() -> dict[str, int]:
    try:
        from termforge.generate.llm import STEP_MAX_TOKENS
    except ImportError:
        return dict(_STEP_MAX_TOKENS_FALLBACK)
    return dict(STEP_MAX_TOKENS)


def _agent_tokens(turns: float, prompt: float, reply: float, observation: float) -> tuple[float, float]:
    """(input, output) tokens of one rollout of `turns` turns with the whole history re-sent each turn."""
    turns = max(turns, 0.0)
    # Turn t sends the first prompt plus t-1 earlier (reply, observation) pairs.
    return turns * prompt + turns * (turns - 1) / 2 * (reply + observation), turns * reply


class _Plan:
    def __init__(self, cfg: dict, assumptions: Mapping[str, float]):
        self.cfg = cfg
        self.a = assumptions
        self.prices = dict(cfg.get("prices") or (cfg.get("planning") or {}).get("prices") or {})
        self.phases: list[dict] = []
        self.notes: list[str] = []

    def model(self, name: str | None, where: str) -> tuple[str, str | None]:
        """(model id, backend) of a named model in cfg["models"]; an unknown name is used as the id."""
        spec = (self.cfg.get("models") or {}).get(name) if name else None
        if spec is None:
            return (name or "?"), None
        return spec.get("model", name), spec.get("backend")

    def price(self, model_id: str, name: str | None) -> dict | None:
        for key in (model_id, name):
            if key is not None and key in self.prices:
                p = self.prices[key]
                try:
                    return {"input": float(p["input_per_mtok"]), "output": float(p["output_per_mtok"])}
                except (KeyError, TypeError, ValueError):
                    raise ConfigError(f"prices.{key}: needs numbers input_per_mtok and output_per_mtok") from None
        return None

    def add(self, phase: str, name: str | None, calls: tuple[float, float], inp: tuple[float, float],
            out: tuple[float, float], note: str = "", local: bool = False) -> None:
        model_id, backend = self.model(name, phase)
        backend = backend or ("local" if local else None)
        price = self.price(model_id, name)
        notes = [note] if note else []
        if price is None:
            cost = max_cost = None
            why = "local model: GPU time, not API money" if backend in _LOCAL_BACKENDS or local else "add it to `prices`"
            notes.append(f"no price for {model_id} ({why})")
        else:
            cost = (inp[0] * price["input"] + out[0] * price["output"]) / 1e6
            max_cost = (inp[1] * price["input"] + out[1] * price["output"]) / 1e6
        self.phases.append({
            "phase": phase, "model": model_id, "backend": backend,
            "calls": round(calls[0]), "max_calls": round(calls[1]),
            "input_tokens": round(inp[0]), "output_tokens": round(out[0]),
            "max_input_tokens": round(inp[1]), "max_output_tokens": round(out[1]),
            "cost_usd": None if cost is None else round(cost, 4),
            "max_cost_usd": None if max_cost is None else round(max_cost, 4),
            "note": "; ".join(notes),
        })

    # -- stages ----------------------------------------------------------------------------------
    def generate(self, n_tasks: int) -> None:
        gen = self.cfg.get("generate") or {}
        if gen.get("backend", "procedural") != "llm":
            self.notes.append("generate: procedural backend, no model calls")
            return
        a = self.a
        caps = _step_caps()
        if not gen.get("second_solution", True):
            caps.pop("second_solution", None)  # the independent solver's call per candidate
        steps = len(caps)
        mean_cap = sum(caps.values()) / steps
        rounds_max = int(gen.get("max_repair_rounds", 2))
        rounds_exp = min(float(a["generate_repair_rounds"]), rounds_max)
        per_repair = min(float(a["generate_steps_per_repair"]), steps)
        calls_exp = n_tasks * (steps + rounds_exp * per_repair)
        calls_max = n_tasks * steps * (1 + rounds_max)
        prompt, extra = a["generate_prompt_tokens"], a["generate_repair_extra_tokens"]
        inp_exp = n_tasks * (steps * prompt + rounds_exp * per_repair * (prompt + extra + mean_cap * a["generate_output_fraction"]))
        inp_max = n_tasks * (steps * prompt + rounds_max * steps * (prompt + extra + mean_cap))
        out_exp = calls_exp * mean_cap * a["generate_output_fraction"]
        out_max = calls_max * mean_cap
        self.add("generate", gen.get("model", "policy"), (calls_exp, calls_max), (inp_exp, inp_max), (out_exp, out_max),
                 f"{steps} chain steps per task, up to {rounds_max} repair rounds")

    def agent_phase(self, phase: str, name: str | None, tasks: tuple[float, float], attempts: int, turn_cap: int,
                    max_new: int, note: str) -> None:
        a = self.a
        turns_exp = max(1.0, turn_cap * a["turn_fraction"])
        inp1, out1 = _agent_tokens(turns_exp, a["agent_prompt_tokens"], max_new * a["reply_fraction"],
                                   a["observation_tokens"])
        inpm, outm = _agent_tokens(turn_cap, a["agent_prompt_tokens"], max_new, a["observation_tokens_max"])
        r_exp, r_max = tasks[0] * attempts, tasks[1] * attempts
        self.add(phase, name, (r_exp * turns_exp, r_max * turn_cap), (r_exp * inp1, r_max * inpm),
                 (r_exp * out1, r_max * outm), note)

    def solve(self, n_tasks: int) -> None:
        s = self.cfg.get("solve") or {}
        if s.get("agent", "model") == "oracle":
            self.notes.append("solve: oracle agent, no model calls")
            return
        kept = (n_tasks * self.a["kept_fraction"], n_tasks)
        k, cap = int(s.get("k", 2)), int(s.get("turn_cap", 64))
        max_new = int((s.get("sampling") or {}).get("max_new_tokens", 256))
        note = f"k={k} rollouts x up to {cap} turns x {max_new} new tokens; history re-sent each turn"
        if s.get("cache_dir"):
            note += "; replies cached, reruns do not pay again"
        self.agent_phase("solve", s.get("model", "policy"), kept, k, cap, max_new, note)

    def hints(self, n_tasks: int) -> None:
        h = self.cfg.get("hints")
        if not h:
            self.notes.append("hints: not configured")
            return
        if h.get("backend", "procedural") != "llm":
            self.notes.append("hints: procedural backend, no model calls")
            return
        a = self.a
        rounds_max = int(h.get("max_rounds", 2))
        max_new = int((h.get("sampling") or {}).get("max_new_tokens", 512))
        out_one = min(float(h["max_words"]) * 1.4 if h.get("max_words") else a["hint_output_tokens"], max_new)
        kept = n_tasks * a["kept_fraction"]
        calls_exp = kept * (1 + min(a["hint_repair_rounds"], rounds_max))
        calls_max = n_tasks * (1 + rounds_max)
        self.add("hints", h.get("model", "policy"), (calls_exp, calls_max),
                 (calls_exp * a["hint_prompt_tokens"], calls_max * (a["hint_prompt_tokens"] + max_new)),
                 (calls_exp * out_one, calls_max * max_new), f"up to {rounds_max} repair rounds")
        # Every draft is judged and probed (at most, every draft passes the offline gate); the
        # probe also answers once per task from the instruction alone (its baseline), and
        # judge_corpus measures both on that many corpus rows.
        corpus = int(h.get("judge_corpus") or 0)
        for role, baseline in (("judge", 0), ("probe", 1)):
            if not h.get(role):
                continue
            prompt, reply = a[f"hint_{role}_prompt_tokens"], a[f"hint_{role}_output_tokens"]
            calls = (calls_exp + baseline * kept + corpus * (1 + baseline),
                     calls_max + baseline * n_tasks + corpus * (1 + baseline))
            self.add(f"hints {role}", h[role], calls, (calls[0] * prompt, calls[1] * (prompt + max_new)),
                     (calls[0] * reply, calls[1] * reply * 2),
                     f"one call per hint draft{' and a baseline per task' if baseline else ''}"
                     f"{f', plus {corpus} corpus rows' if corpus else ''}")

    def review(self, n_tasks: int) -> None:
        r = self.cfg.get("review") or {}
        if not r.get("judge"):
            self.notes.append("review: no judge, every task and trace recorded not_reviewed (no model calls)")
            return
        a = self.a
        k = int((self.cfg.get("solve") or {}).get("k", 2))
        kept = n_tasks * a["kept_fraction"]
        calls_exp = kept + kept * k * a["solved_fraction"]
        calls_max = 2 * (n_tasks + n_tasks * k)  # every task and rollout, each with one format retry
        self.add("review", r["judge"], (calls_exp, calls_max),
                 (calls_exp * a["review_prompt_tokens"], calls_max * a["review_prompt_tokens"] * 1.2),
                 (calls_exp * a["review_output_tokens"], calls_max * a["review_output_tokens"] * 2),
                 f"one judgment per kept task and per successful rollout (k={k}); cached")

    def evals(self, root: Path | None) -> None:
        ev = self.cfg.get("eval")
        if not ev:
            self.notes.append("eval: not configured")
            return
        a = self.a
        models = 1 + len(run_ablations(self.cfg))
        name = ev.get("model", "policy")
        aime = ev.get("aime") or {}
        if aime.get("enabled", True) and aime:
            if aime.get("max_problems"):
                problems = int(aime["max_problems"])
            elif aime.get("source", "math_data:heldout") == "math_data:heldout":
                md = self.cfg.get("math_data") or {}
                problems = max(1, round(int(md.get("n", 64)) * float(md.get("heldout_fraction", 0.25))))
            else:
                problems = 30  # one AIME year
            n = int(aime.get("n", 12))
            max_new = int((aime.get("sampling") or {}).get("max_new_tokens", 38912))
            calls = problems * n * models
            self.add("eval aime", name, (calls, calls), (calls * a["aime_prompt_tokens"],) * 2,
                     (calls * max_new * a["reply_fraction"], calls * max_new),
                     f"{problems} problems x {n} samples x {models} models (base + ablations)")
        tb = ev.get("tbench") or {}
        if tb.get("enabled", True) and tb:
            tasks = self._count_tasks(tb.get("tasks_dir"), root)
            k, cap = int(tb.get("k", 1)), int(tb.get("turn_cap", 64))
            max_new = int((tb.get("sampling") or {}).get("max_new_tokens", 512))
            self.agent_phase("eval tbench", name, (tasks * models, tasks * models), k, cap, max_new,
                             f"{tasks} tasks x k={k} x {models} models, up to {cap} turns")

    def _count_tasks(self, tasks_dir: str | None, root: Path | None) -> int:
        if tasks_dir:
            d = Path(tasks_dir) if Path(tasks_dir).is_absolute() or root is None else root / tasks_dir
            if d.is_dir():
                n = sum(1 for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
                if n:
                    return n
        self.notes.append(f"eval tbench: {tasks_dir} not found; assumed {int(self.a['tbench_tasks'])} tasks")
        return int(self.a["tbench_tasks"])

    def train(self) -> None:
        base = self.cfg.get("train")
        if base is None:
            self.notes.append("train: not configured")
            return
        ablations = self.cfg.get("ablations") or {}
        # Each ablation that runs is one training run (results/runs/<ablation>/train); the base
        # policy is evaluated untrained.
        runs = {f"train {name}": {**base, **(ablations[name].get("train") or {})} for name in run_ablations(self.cfg)}
        if not runs:
            self.notes.append("train: no ablation runs, so nothing is trained")
        for phase, t in runs.items():
            rollouts = int(t.get("max_steps", 8)) * int(t.get("prompts_per_step", 4)) * int(t.get("rollouts_per_prompt", 1))
            max_new = int(t.get("max_new_tokens", 32))
            prompt = self.a["train_prompt_tokens"]
            # The student generates; teacher and student then both score prompt + completion.
            model = t.get("model", "smollm2-135m-instruct")
            self.add(phase, model, (rollouts, rollouts), (rollouts * prompt * 3, rollouts * (prompt + max_new) * 3),
                     (rollouts * max_new * self.a["reply_fraction"], rollouts * max_new),
                     f"{rollouts} rollouts; tokens are local forward passes (student and teacher)", local=True)


def generation_cost(cfg: dict, n_tasks: int, input_tokens: int, output_tokens: int) -> dict:
    """What `termforge plan` projects for generating n_tasks with cfg's llm backend (its generate
    phase), beside what the run really sent and received and what that cost at cfg's prices
    (None without a price for the model)."""
    merged = {**DEFAULT_ASSUMPTIONS, **((cfg.get("planning") or {}).get("assumptions") or {})}
    plan = _Plan(cfg, merged)
    plan.generate(n_tasks)
    name = (cfg.get("generate") or {}).get("model")
    price = plan.price(plan.model(name, "generate")[0], name)
    cost = None if price is None else round((input_tokens * price["input"] + output_tokens * price["output"]) / 1e6, 4)
    return {"planned": plan.phases[0] if plan.phases else None,
            "actual": {"input_tokens": input_tokens, "output_tokens": output_tokens, "cost_usd": cost}}


def estimate(cfg: dict, assumptions: Mapping[str, float] | None = None, root: str | Path | None = None) -> dict:
    """Project model calls, tokens and API cost of a run of `cfg` (a merged config dict).

    Returns {"phases": [...], "totals": {...}, "assumptions": {...}, "notes": [...]}; each phase has
    calls, input/output tokens (expected and max_*) and cost_usd / max_cost_usd (null when the
    model has no price). `root` resolves relative paths of the config (eval.tbench.tasks_dir).
    """
    if not isinstance(cfg, dict):
        raise ConfigError("planning: the config must be a mapping")
    merged = dict(DEFAULT_ASSUMPTIONS)
    for source, where in (((cfg.get("planning") or {}).get("assumptions") or {}, "planning.assumptions"),
                          (assumptions or {}, "assumptions")):
        for key, value in source.items():
            if key not in DEFAULT_ASSUMPTIONS:
                raise ConfigError(f"{where}.{key}: unknown assumption (known: {', '.join(sorted(DEFAULT_ASSUMPTIONS))})")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}.{key}: must be a non-negative number, got {value!r}")
            merged[key] = float(value)
    try:
        n_tasks = int((cfg.get("corpus") or {})["n_tasks"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError("corpus.n_tasks: required to plan a run") from None
    plan = _Plan(cfg, merged)
    plan.generate(n_tasks)
    plan.solve(n_tasks)
    plan.hints(n_tasks)
    plan.review(n_tasks)
    plan.evals(Path(root) if root is not None else None)
    plan.train()
    priced = [p for p in plan.phases if p["cost_usd"] is not None]
    totals = {
        "tasks": n_tasks,
        "calls": sum(p["calls"] for p in plan.phases),
        "input_tokens": sum(p["input_tokens"] for p in plan.phases),
        "output_tokens": sum(p["output_tokens"] for p in plan.phases),
        "max_input_tokens": sum(p["max_input_tokens"] for p in plan.phases),
        "max_output_tokens": sum(p["max_output_tokens"] for p in plan.phases),
        # Null when nothing has a price: "$0" would read as "free".
        "cost_usd": round(sum(p["cost_usd"] for p in priced), 4) if priced else None,
        "max_cost_usd": round(sum(p["max_cost_usd"] for p in priced), 4) if priced else None,
        "unpriced_phases": [p["phase"] for p in plan.phases if p["cost_usd"] is None],
    }
    return {"phases": plan.phases, "totals": totals, "assumptions": merged, "notes": plan.notes}


def _tok(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f}G"
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e4:
        return f"{n / 1e3:.1f}k"
    return str(n)


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def format_estimate(est: dict) -> str:
    """The estimate as a plain-text table (expected values, worst case in the max columns)."""
    head = ["phase", "model", "calls", "in tok", "out tok", "cost", "max in", "max out", "max cost"]
    rows = [[p["phase"], p["model"], _tok(p["calls"]), _tok(p["input_tokens"]), _tok(p["output_tokens"]),
             _usd(p["cost_usd"]), _tok(p["max_input_tokens"]), _tok(p["max_output_tokens"]), _usd(p["max_cost_usd"])]
            for p in est["phases"]]
    t = est["totals"]
    rows.append(["total", "", _tok(t["calls"]), _tok(t["input_tokens"]), _tok(t["output_tokens"]), _usd(t["cost_usd"]),
                 _tok(t["max_input_tokens"]), _tok(t["max_output_tokens"]), _usd(t["max_cost_usd"])])
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]

    def line(r: list) -> str:
        return "  ".join(str(v).ljust(w) if i < 2 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))

    out = [line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in rows[:-1]]
    out += ["  ".join("-" * w for w in widths), line(rows[-1])]
    if t["unpriced_phases"]:
        out.append(f"costs exclude unpriced phases: {', '.join(t['unpriced_phases'])}")
    for p in est["phases"]:
        if p["note"]:
            out.append(f"{p['phase']}: {p['note']}")
    out += est["notes"]
    return "\n".join(out) + "\n"


# -- combining corpora ---------------------------------------------------------------------------------

def _run_root(manifest: Path) -> Path:
    """The working directory of the run that wrote <root>/results/corpus/manifest.json."""
    p = manifest.resolve()
    return p.parents[2] if len(p.parents) > 2 and p.parent.name == "corpus" and p.parents[1].name == "results" \
        else p.parent


def _tasks_dir(manifest: Path, data: dict) -> Path:
    """The tasks_dir of a manifest made usable from here (it is relative to its run's directory)."""
    td = Path(data.get("tasks_dir") or "results/tasks")
    if td.is_absolute():
        return td
    for cand in (_run_root(manifest) / td, Path.cwd() / td):
        if cand.is_dir():
            return cand.resolve()
    return (_run_root(manifest) / td).resolve()


def _axis_value(task: dict, axis: str, where: Path) -> str:
    # What the task is (a family records the values it really produced under "actual") wins over
    # what the signature asked for.
    for source in (task.get("actual") or {}, task.get("signature") or {}, task):
        if axis in source and source[axis] is not None and not isinstance(source[axis], (dict, list)):
            return str(source[axis])
    raise TermforgeError(f"combine: {where} has no axis {axis!r} (in actual, signature or at the top level)")


def combine(manifests: Sequence[str | Path], mode: str, out: str | Path, axis: str = "domain", seed: int = 0) -> dict:
    """Merge corpus manifests into one manifest written to `out`, and return it.

    union: every kept task of every manifest, deduplicated by id (the first manifest listing an id
    wins). balanced: the union cut to an equal share per bucket of `axis` (read from each task's
    task.json): every bucket keeps as many tasks as the smallest bucket has, chosen by an RNG
    seeded from (seed, axis, bucket), so the same inputs give the same corpus.
    The output has the corpus-manifest keys (kept, dropped, counts, tasks_dir) plus task_dirs (id ->
    directory; corpora from different runs live in different places) and combine (provenance).
    """
    if mode not in ("union", "balanced"):
        raise ConfigError(f"combine: mode must be 'union' or 'balanced', got {mode!r}")
    if not manifests:
        raise TermforgeError("combine: no manifests given")
    kept: list[str] = []
    task_dirs: dict[str, str] = {}
    dropped: dict[str, dict] = {}
    sources, duplicates = [], 0
    for m in map(Path, manifests):
        if not m.is_file():
            raise TermforgeError(f"combine: manifest {m} does not exist")
        data = read("any_corpus_manifest", m)
        tdir = _tasks_dir(m, data)
        new = 0
        for tid in data["kept"]:
            if tid in task_dirs:
                duplicates += 1
                continue
            kept.append(tid)
            task_dirs[tid] = str(tdir / tid)
            new += 1
        for d in data.get("dropped", []):
            dropped.setdefault(d["task_id"], d)
        sources.append({"manifest": str(m), "tasks_dir": str(tdir), "kept": len(data["kept"]), "new": new})
    info: dict[str, Any] = {"mode": mode, "seed": seed, "sources": sources, "duplicates": duplicates}
    if mode == "balanced":
        buckets: dict[str, list[str]] = {}
        for tid in kept:
            tj = Path(task_dirs[tid]) / "task.json"
            if not tj.is_file():
                raise TermforgeError(f"combine: task {tid}: {tj} not found (balanced mode reads each task's axis "
                                     f"from its task.json)")
            buckets.setdefault(_axis_value(read("task", tj), axis, tj), []).append(tid)
        per_bucket = min(len(v) for v in buckets.values()) if buckets else 0
        chosen: list[str] = []
        for bucket in sorted(buckets):
            rng = random.Random(seed_from("combine", seed, axis, bucket))
            chosen += rng.sample(sorted(buckets[bucket]), per_bucket)
        info.update({"axis": axis, "per_bucket": per_bucket,
                     "buckets": {b: {"available": len(v), "kept": per_bucket} for b, v in sorted(buckets.items())},
                     "left_out_by_balance": len(kept) - len(chosen)})
        kept = sorted(chosen)
    # A task dropped by one run but kept by another stays kept.
    kept_set = set(kept)
    dropped_rows = [d for tid, d in sorted(dropped.items()) if tid not in task_dirs]
    by_stage: dict[str, int] = {}
    for d in dropped_rows:
        by_stage[d.get("stage", "?")] = by_stage.get(d.get("stage", "?"), 0) + 1
    dirs = {str(Path(task_dirs[t]).parent) for t in kept}
    manifest = {
        "tasks_dir": dirs.pop() if len(dirs) == 1 else None,
        "task_dirs": {t: task_dirs[t] for t in sorted(kept_set)},
        "kept": kept,
        "dropped": dropped_rows,
        "counts": {"kept": len(kept), "dropped": len(dropped_rows), "total": len(kept) + len(dropped_rows),
                   "dropped_by_stage": dict(sorted(by_stage.items()))},
        "combine": info,
    }
    atomic_write_json(out, manifest)
    return manifest
