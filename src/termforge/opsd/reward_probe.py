"""The held-out reward probe of terminal training: does the policy solve more held-out tasks after
training? (docs/opsd.md, "Held-out reward").

Held-out tasks are kept out of both parts of training (OPSD and GRPO). Before the first step and
after the last, the policy runs `reward_probe_episodes` of its own episodes on each of them
(the training episodes' harness, sandboxes, sampling and clean verifier), with the same sampling
seeds both times, so the two numbers differ only because the weights changed. The KL probe says
whether the student moved towards the teacher; this says whether the verifier's reward moved.

Which tasks: `reward_probe_tasks` (a file listing task ids) or `reward_probe_size` of the kept
tasks, those inside the GRPO pass-rate band first (a task the policy never or always solves
cannot show a change), each group in an order fixed by the task ids alone, so every seed and
every ablation of one corpus measures the same tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from termforge.containment import check_task_id, contained
from termforge.errors import ConfigError, TermforgeError
from termforge.io import read_json, seed_from
from termforge.opsd.config import OPSDConfig
from termforge.opsd.data import PromptRow

__all__ = ["measure_reward", "reward_probe_report", "split_reward_probe"]


def _listed_ids(path: str, where: str) -> list[str]:
    if not Path(path).is_file():
        raise ConfigError(f"{where}.reward_probe_tasks: {path} does not exist")
    data = read_json(path)
    ids = data.get("kept", data.get("tasks")) if isinstance(data, dict) else data
    if not isinstance(ids, list) or not ids or not all(isinstance(t, str) for t in ids):
        raise ConfigError(f"{where}.reward_probe_tasks: {path} must hold a non-empty list of task ids "
                          "(a JSON list, or an object with `kept` or `tasks`)")
    return ids


def _row_for(task_id: str, cfg: OPSDConfig, where: str) -> PromptRow:
    from termforge.harness import initial_messages

    path = contained(cfg.tasks_dir or "", check_task_id(task_id, f"{where}.reward_probe_tasks"), "instruction.md")
    if not path.is_file():
        raise ConfigError(f"{where}.reward_probe_tasks: task {task_id}: {path} is missing")
    return PromptRow(id=task_id, prompt_messages=tuple(initial_messages(path.read_text())), privileged_context="",
                     kind="terminal")


def split_reward_probe(rows: Sequence[PromptRow], cfg: OPSDConfig, where: str = "train"
                       ) -> tuple[list[PromptRow], list[PromptRow], dict[str, Any]]:
    """(training rows, held-out probe rows, how they were chosen). Off (no probe rows) unless
    reward_probe_tasks or reward_probe_size is set; terminal data only."""
    rows = list(rows)
    if cfg.data_kind != "terminal" or not (cfg.reward_probe_tasks or cfg.reward_probe_size):
        return rows, [], {}
    by_id = {r.id: r for r in rows}
    if cfg.reward_probe_tasks:
        ids = _listed_ids(cfg.reward_probe_tasks, where)
        probe = [by_id.get(t) or _row_for(t, cfg, where) for t in ids]
        rule = f"the tasks listed in {cfg.reward_probe_tasks}"
    else:
        rates = {}
        if cfg.passk and Path(cfg.passk).is_file():
            rates = {e["task_id"]: e["c"] / e["n"] for e in read_json(cfg.passk).get("per_task", []) if e.get("n")}
        low, high = cfg.rl_pass_rate_low, cfg.rl_pass_rate_high

        def rank(r: PromptRow) -> tuple[int, int]:
            in_band = r.id in rates and low < rates[r.id] < high
            return (0 if in_band else 1, seed_from("reward-probe-order", r.id))

        # A small corpus shrinks the probe (at least one task stays in training), and says so.
        size = min(cfg.reward_probe_size, len(rows) - 1)
        if size < cfg.reward_probe_size:
            print(f"train: only {len(rows)} kept tasks; the held-out reward probe holds out {size} "
                  f"(reward_probe_size {cfg.reward_probe_size})")
        if size < 1:
            return rows, [], {}
        probe = sorted(rows, key=rank)[:size]
        rule = (f"{size} kept tasks, those with {low} < solve pass rate < {high} first "
                f"({sum(1 for r in probe if rank(r)[0] == 0)} of them in that band)")
    held = {r.id for r in probe}
    train = [r for r in rows if r.id not in held]
    if not train:
        raise ConfigError(f"{where}.reward_probe_tasks: every training task is held out for the reward probe")
    report = {"rule": rule, "tasks": [r.id for r in probe], "episodes_per_task": cfg.reward_probe_episodes}
    print(f"train: holding {len(probe)} tasks out of training for the held-out reward probe ({rule})")
    return train, probe, report


def measure_reward(terminal_run: Any, trainer: Any, probe_rows: Sequence[PromptRow], cfg: OPSDConfig) -> dict[str, Any]:
    """Mean verifier reward of the current policy over reward_probe_episodes episodes per task.
    The sampling seed depends on cfg.seed only: the before and after measurements draw alike."""
    from termforge.opsd.terminal import EpisodeSpec

    specs = [EpisodeSpec(r.id, i, "probe") for r in probe_rows for i in range(cfg.reward_probe_episodes)]
    # The outcomes of every process's share (all of them on one process): every rank measures alike.
    _, outcomes, _ = terminal_run.run_episodes(trainer, specs, seed_from("reward-probe", cfg.seed))
    per_task: dict[str, dict[str, Any]] = {r.id: {"id": r.id, "n": 0, "solved": 0, "reward_sum": 0.0}
                                           for r in probe_rows}
    for e in outcomes:
        if e.status != "graded":
            continue
        row = per_task[e.spec.task_id]
        row["n"] += 1
        row["solved"] += int(e.reward == 1.0)
        row["reward_sum"] += float(e.reward)
    graded = sum(r["n"] for r in per_task.values())
    if not graded:
        raise TermforgeError(f"train: none of the {len(specs)} reward-probe episodes was graded (see the infra "
                             "errors above); set train.reward_probe_size 0 or fix the sandbox")
    rows = [{"id": r["id"], "n": r["n"], "solved": r["solved"],
             "reward_mean": r["reward_sum"] / r["n"] if r["n"] else None} for r in per_task.values()]
    return {"reward_mean": sum(r["reward_sum"] for r in per_task.values()) / graded, "episodes": graded,
            "infra_failed": len(specs) - graded, "rows": rows}


def reward_probe_report(before: dict[str, Any], after: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """Before and after, per task and overall, with the paired per-task changes."""
    after_rows = {r["id"]: r for r in after["rows"]}
    rows = []
    for b in before["rows"]:
        a = after_rows.get(b["id"], {})
        delta = (a["reward_mean"] - b["reward_mean"]) if a.get("reward_mean") is not None \
            and b["reward_mean"] is not None else None
        rows.append({"id": b["id"], "before": b["reward_mean"], "after": a.get("reward_mean"), "delta": delta,
                     "n_before": b["n"], "n_after": a.get("n", 0)})
    return {"metric": "mean verifier reward of the policy's own episodes on held-out tasks (same sampling seeds "
                      "before and after)",
            **choice, "before": before["reward_mean"], "after": after["reward_mean"],
            "delta": after["reward_mean"] - before["reward_mean"],
            "episodes": {"before": before["episodes"], "after": after["episodes"]},
            "infra_failed": {"before": before["infra_failed"], "after": after["infra_failed"]}, "rows": rows}
