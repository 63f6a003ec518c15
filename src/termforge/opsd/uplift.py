"""Hint uplift: what a task's hint does for the policy itself (docs/opsd.md, "Hint uplift").

OPSD pulls the student towards the policy *given the hint*. That target is worth distilling only
where the hint helps: the policy's pass rate on a task with its hint in context, against without,
on the same sampling seeds (each of the k episodes of a task samples the same replies wherever the
prompts agree, so the difference is the hint's). A hint whose uplift is not above `min_uplift` is
flagged; `train.drop_hints_without_uplift` leaves such tasks out of the OPSD part.

The hint goes where the teacher reads it (data.teacher_messages: the same template and
placement, `teacher_context_role`), so the measured policy is the OPSD teacher acting.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from termforge.errors import ConfigError

__all__ = ["DEFAULT_K", "MIN_K", "hints_without_uplift", "measure_hint_uplift", "uplift_report"]

DEFAULT_K = 8
MIN_K = 8  # fewer episodes per arm cannot tell a pass rate of 1/8 from 0
UPLIFT_PART = "uplift"  # one part label for both arms: the same episode seeds with and without the hint


def uplift_report(with_hint: Mapping[str, Sequence[float]], without_hint: Mapping[str, Sequence[float]],
                  families: Mapping[str, str], *, k: int, min_uplift: float = 0.0,
                  infra_failed: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The report from each task's graded rewards in both arms: per task, per family, overall, and
    the tasks whose hint has no uplift (uplift <= min_uplift, or an arm with no graded episode)."""
    tasks = []
    for task_id in sorted(set(with_hint) | set(without_hint)):
        on, off = list(with_hint.get(task_id, [])), list(without_hint.get(task_id, []))
        rate_on = sum(on) / len(on) if on else None
        rate_off = sum(off) / len(off) if off else None
        uplift = rate_on - rate_off if on and off else None
        tasks.append({"task_id": task_id, "family": families.get(task_id, "unknown"), "k": k,
                      "graded_with": len(on), "graded_without": len(off),
                      "infra_failed": int((infra_failed or {}).get(task_id, 0)),
                      "pass_with": rate_on, "pass_without": rate_off, "uplift": uplift,
                      "no_uplift": uplift is None or uplift <= min_uplift})
    by_family: dict[str, list[dict]] = defaultdict(list)
    for t in tasks:
        by_family[t["family"]].append(t)
    return {
        "k": k,
        "min_uplift": min_uplift,
        "tasks": tasks,
        "families": {name: _summary(rows) for name, rows in sorted(by_family.items())},
        "overall": _summary(tasks),
        "no_uplift": [t["task_id"] for t in tasks if t["no_uplift"]],
    }


def _summary(rows: Sequence[dict]) -> dict[str, Any]:
    measured = [r for r in rows if r["uplift"] is not None]

    def mean(key):
        return sum(r[key] for r in measured) / len(measured) if measured else None

    return {"tasks": len(rows), "measured": len(measured), "pass_with": mean("pass_with"),
            "pass_without": mean("pass_without"), "uplift": mean("uplift"),
            "no_uplift": sum(1 for r in rows if r["no_uplift"])}


def tasks_spread_over_families(families: Mapping[str, str], n: int) -> list[str]:
    """n of the task ids (all when n is 0 or covers them), taken from the families in turn (families
    by name, tasks by id), so a small sample still measures as many families as it can."""
    if n < 0:
        raise ConfigError(f"hints.uplift_tasks: expected 0 (every hinted task) or a positive count, got {n}")
    by_family: dict[str, list[str]] = defaultdict(list)
    for task_id, family in sorted(families.items()):
        by_family[family].append(task_id)
    queues = [by_family[f] for f in sorted(by_family)]
    chosen: list[str] = []
    depth = 0
    while queues and (n == 0 or len(chosen) < n):
        layer = [q[depth] for q in queues if depth < len(q)]
        if not layer:
            break
        chosen += layer if n == 0 else layer[:n - len(chosen)]
        depth += 1
    return sorted(chosen)


def uplift_summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The uplift report as the hints stage prints it: one line per family and one overall, each
    with its pass rates without and with the hint and how many hints are flagged as teaching nothing."""
    def line(name: str, s: Mapping[str, Any]) -> str:
        if not s["measured"]:
            return f"  {name}: {s['tasks']} hinted task(s), none measured (no graded episode in an arm)"
        return (f"  {name}: {s['tasks']} hinted task(s), pass rate {s['pass_without']:.3f} without -> "
                f"{s['pass_with']:.3f} with, uplift {s['uplift']:+.3f}; {s['no_uplift']} without uplift")

    return ([line(name, s) for name, s in report["families"].items()]
            + [line("overall", report["overall"])])


def measure_hint_uplift(run: Any, trainer: Any, task_ids: Sequence[str], *, k: int = DEFAULT_K, seed: int = 0,
                        min_uplift: float = 0.0, max_tasks: int = 0) -> dict[str, Any]:
    """Run k episodes of each hinted task without and with its hint (TerminalRun `run`, the
    trainer's current policy), on the same seeds; the uplift report (uplift_report). max_tasks > 0
    measures that many of them, spread over the families (tasks_spread_over_families)."""
    from termforge.opsd.data import PromptRow, teacher_messages
    from termforge.opsd.terminal import EpisodeSpec
    from termforge.schemas import read

    if k < MIN_K:
        raise ConfigError(f"hint uplift: k {k} episodes per arm is too few to compare pass rates (at least {MIN_K})")
    rows = [run.rows[t] for t in task_ids if run.rows[t].privileged_context]
    tasks_dir = Path(run.cfg.tasks_dir)
    families = {r.id: str(read("task", tasks_dir / r.id / "task.json").get("family") or "unknown") for r in rows}
    if max_tasks:
        chosen = set(tasks_spread_over_families(families, max_tasks))
        rows = [r for r in rows if r.id in chosen]
        families = {t: f for t, f in families.items() if t in chosen}
    specs = [EpisodeSpec(r.id, i, UPLIFT_PART) for r in rows for i in range(k)]

    def hinted(spec, messages):
        row = run.rows[spec.task_id]
        return teacher_messages(PromptRow(row.id, tuple(messages), row.privileged_context, "terminal", row.problem),
                                run.cfg)

    arms = {}
    failed: dict[str, int] = defaultdict(int)
    for name, opening in (("without", None), ("with", hinted)):
        # Progress: an arm is minutes of sandboxed episodes on a laptop.
        print(f"hint-uplift: {len(specs)} episodes {name} the hint ({len(rows)} tasks x k={k}) ...", flush=True)
        started = time.monotonic()
        _, outcomes, _ = run.run_episodes(trainer, specs, seed, opening=opening)
        rewards: dict[str, list[float]] = defaultdict(list)
        for o in outcomes:
            if o.status == "graded":
                rewards[o.spec.task_id].append(float(o.reward))
            else:
                failed[o.spec.task_id] += 1
        arms[name] = rewards
        passed = sum(sum(r) for r in rewards.values())
        print(f"hint-uplift: {name} the hint: {passed:g} of {len(specs)} episodes passed "
              f"({sum(len(r) for r in rewards.values())} graded) in {time.monotonic() - started:.0f}s", flush=True)
    return uplift_report(arms["with"], arms["without"], families, k=k, min_uplift=min_uplift, infra_failed=failed)


def hints_without_uplift(path: str | Path | None) -> set[str]:
    """The task ids an uplift report flags (its `no_uplift` list)."""
    if not path:
        return set()
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"train.hint_uplift: {path} does not exist (run `termforge hint-uplift` first)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"train.hint_uplift: {path} is not JSON: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("no_uplift"), list):
        raise ConfigError(f"train.hint_uplift: {path} has no `no_uplift` list; is it an uplift report?")
    return {str(t) for t in report["no_uplift"]}
