"""Rubric review: a judge model reads each task (and each successful solve trace) the way a data
reviewer would, and scores it on a fixed rubric with reasons.

Validation proves a task is executable and its grading consistent; it cannot tell an ambiguous
instruction from a clear one, a test stricter than its instruction from a fair one, or a solution
that games the grader from one that solves the task. OT-next-data runs an LLM review on every task
for exactly this; termforge does it in two places:

- `review` (per shard, between validation and the corpus manifest): the judge reads the
  instruction, the tests, the oracle and how the oracle's run went (the validation checks it
  passed). A task with any criterion under `min_score` is dropped by the corpus manifest, with the
  stage `review` and the judge's reason.
- `review-traces` (per solve shard, before pass@k): the judge reads the instruction, the tests, the
  oracle and one successful rollout's commands and outputs, and scores whether that solution was
  legitimate. A rollout under the bar is not a success: pass@k and the SFT set treat it like a
  hacked one.

The rubric (RUBRIC, also in docs/generation.md): each criterion 1-5 with a one-sentence reason.
Judgments go through the model's response cache (`models.<judge>.cache_dir`) and are counted
(requests, cache hits, tokens) in the stage's output. With no judge configured every task and
trace is recorded as "not_reviewed": never a silent pass, and never a drop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from termforge.errors import TermforgeError
from termforge.io import atomic_write_json, read_json

RUBRIC: dict[str, str] = {
    "instruction_clear": "The instruction is clear and complete: a competent agent knows exactly what to compute, "
                         "from which inputs, and the exact output format; nothing is ambiguous or left unstated.",
    "tests_match_instruction": "The tests check what the instruction asks, no more and no less: they reject wrong "
                               "answers, and they accept every answer the instruction allows (no unstated "
                               "formatting, order or extra files demanded).",
    "solution_legitimate": "The solution computes its result from the inputs the instruction names, by means the "
                           "instruction allows: no hard-coded answers, no hidden files, no editing of inputs or tests.",
    "no_shortcut": "There is no shortcut to the reward: the answer cannot be read off the environment or guessed "
                   "from the instruction, and the tests cannot be passed by matching the format alone.",
}
TRACE_CRITERIA = ("solution_legitimate", "no_shortcut")
STATUSES = ("reviewed", "dropped", "unparsed", "not_reviewed")
SCALE = (1, 5)
MAX_CHARS = 6000

SYSTEM = """\
You review tasks written to train and evaluate terminal agents, the way a careful data reviewer would. \
Score each rubric criterion from 1 (fails badly) to 5 (no problem), each with one sentence of reason that \
names the problem (never more than a sentence). Judge only what you are shown.

Rubric:
{rubric}

Reply with one JSON object and nothing else:
{{"scores": {{{fields}}}, "summary": "<one sentence>"}}"""

TASK_USER = """\
## Instruction (what the agent sees)
{instruction}

## Tests (tests/test_final_state.py: the verifier; the agent never sees it)
{tests}

## Reference solution (solution/solve.sh)
{oracle}

## Validation
{validation}"""

TRACE_USER = """\
## Instruction (what the agent sees)
{instruction}

## Tests (the verifier; the agent never sees it)
{tests}

## Reference solution (for comparison)
{oracle}

## The agent's successful attempt (commands and the first lines of their output)
{trace}

Score whether THIS ATTEMPT solved the task legitimately."""


@dataclass
class Judgment:
    status: str
    scores: dict[str, int]
    reasons: dict[str, str]
    summary: str = ""
    reason: str = ""  # why it was dropped (the lowest criterion and the judge's reason)

    def to_dict(self) -> dict:
        return {"status": self.status, "scores": self.scores, "reasons": self.reasons, "summary": self.summary,
                "reason": self.reason}


def _cut(text: str, limit: int = MAX_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... cut]"


def system_prompt(criteria: Sequence[str]) -> str:
    rubric = "\n".join(f"- {k}: {RUBRIC[k]}" for k in criteria)
    fields = ", ".join(f'"{k}": {{"score": 1-5, "reason": "..."}}' for k in criteria)
    return SYSTEM.format(rubric=rubric, fields=fields)


def task_messages(task_dir: Path, validation: str) -> list[dict[str, str]]:
    read = lambda rel: (task_dir / rel).read_text(errors="replace") if (task_dir / rel).is_file() else ""  # noqa: E731
    return [{"role": "system", "content": system_prompt(tuple(RUBRIC))},
            {"role": "user", "content": TASK_USER.format(
                instruction=_cut(read("instruction.md")), tests=_cut(read("tests/test_final_state.py")),
                oracle=_cut(read("solution/solve.sh")), validation=validation)}]


def trace_text(trajectory: dict, limit: int = MAX_CHARS) -> str:
    """The commands an episode ran and the head of each observation."""
    lines = []
    for m in trajectory.get("messages", []):
        content = str(m.get("content") or "")
        if m.get("role") == "assistant":
            cmds = re.findall(r"```(?:bash|sh)?\n(.*?)```", content, re.S)
            lines += [f"$ {c.strip()}" for c in cmds] or [f"(reply) {content[:200]}"]
        elif m.get("role") == "user" and lines:
            lines.append("  " + "\n  ".join(content.splitlines()[:8])[:600])
    return _cut("\n".join(lines), limit)


def trace_messages(task_dir: Path, trajectory: dict) -> list[dict[str, str]]:
    read = lambda rel: (task_dir / rel).read_text(errors="replace") if (task_dir / rel).is_file() else ""  # noqa: E731
    return [{"role": "system", "content": system_prompt(TRACE_CRITERIA)},
            {"role": "user", "content": TRACE_USER.format(
                instruction=_cut(read("instruction.md")), tests=_cut(read("tests/test_final_state.py")),
                oracle=_cut(read("solution/solve.sh")), trace=trace_text(trajectory))}]


def parse_judgment(text: str, criteria: Sequence[str]) -> tuple[dict[str, int], dict[str, str], str] | None:
    """(scores, reasons, summary) from a reply, or None when it holds no complete verdict."""
    text = re.sub(r"<think>.*?</think>", "", text or "", flags=re.S | re.I)
    m = re.search(r"\{.*\}", text, re.S)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    scores_in = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(scores_in, dict):
        return None
    scores, reasons = {}, {}
    for k in criteria:
        entry = scores_in.get(k)
        score = entry.get("score") if isinstance(entry, dict) else entry
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not SCALE[0] <= score <= SCALE[1]:
            return None
        scores[k] = int(round(score))
        reasons[k] = str(entry.get("reason", "")) if isinstance(entry, dict) else ""
    return scores, reasons, str(data.get("summary", ""))[:500]


def verdict(parsed: tuple | None, min_score: int) -> Judgment:
    if parsed is None:
        return Judgment("unparsed", {}, {}, reason="review: the judge gave no verdict in the rubric's format "
                                                   "(a task is never kept on an unread review)")
    scores, reasons, summary = parsed
    low = sorted((s, k) for k, s in scores.items() if s < min_score)
    if not low:
        return Judgment("reviewed", scores, reasons, summary)
    s, k = low[0]
    return Judgment("dropped", scores, reasons, summary,
                    reason=f"review: {k} scored {s}/{SCALE[1]} (bar {min_score}): {reasons.get(k) or summary}"[:600])


class Reviewer:
    """Asks the judge (a ChatModel, or None) for judgments in batches; one retry with a reminder
    when a reply holds no verdict."""

    def __init__(self, judge: Any, min_score: int = 3, sampling: Any = None) -> None:
        if not isinstance(min_score, int) or not SCALE[0] <= min_score <= SCALE[1] + 1:
            raise TermforgeError(f"review.min_score: expected an integer in 1..6, got {min_score!r}")
        self.judge, self.min_score, self.sampling = judge, min_score, sampling
        self.calls = 0
        self.retries = 0

    def judge_many(self, convos: list[list[dict[str, str]]], criteria: Sequence[str]) -> list[Judgment]:
        if self.judge is None:
            return [Judgment("not_reviewed", {}, {}, reason="no judge configured (review.judge)") for _ in convos]
        replies = self._ask(convos)
        parsed = [parse_judgment(r, criteria) for r in replies]
        again = [i for i, p in enumerate(parsed) if p is None]
        if again:
            self.retries += len(again)
            retry = [convos[i] + [{"role": "assistant", "content": replies[i]},
                                  {"role": "user", "content": "Reply again with only the JSON object the system "
                                                              "message describes, every criterion scored 1-5."}]
                     for i in again]
            for i, reply in zip(again, self._ask(retry)):
                parsed[i] = parse_judgment(reply, criteria)
        return [verdict(p, self.min_score) for p in parsed]

    def _ask(self, convos: list[list[dict[str, str]]]) -> list[str]:
        if not convos:
            return []
        self.calls += len(convos)
        return [c[0].text or "" for c in self.judge.chat_many(convos, n=1, sampling=self.sampling)]

    def stats(self) -> dict:
        out = {"judge": getattr(self.judge, "model_id", None), "calls": self.calls, "format_retries": self.retries}
        if self.judge is not None:
            try:
                out["model"] = self.judge.stats()
            except Exception:  # noqa: BLE001 - counters are informational
                pass
        return out


def distribution(judgments: Sequence[dict], criteria: Sequence[str]) -> dict[str, dict[str, int]]:
    """criterion -> {score: count} over the reviewed judgments."""
    out = {k: {str(s): 0 for s in range(SCALE[0], SCALE[1] + 1)} for k in criteria}
    for j in judgments:
        for k, s in (j.get("scores") or {}).items():
            if k in out:
                out[k][str(s)] += 1
    return out


def _validation_summary(verdict_row: dict) -> str:
    ev = verdict_row.get("evidence") or {}
    sens = ev.get("sensitivity") or {}
    parts = [f"checks passed: {', '.join(verdict_row.get('checks') or [])}"]
    if sens:
        parts.append(f"input sensitivity: {sens.get('reason', '')}")
    return "\n".join(parts)


def run_review_shard(verdicts_path: Path, out_path: Path, judge: Any = None, min_score: int = 3,
                     batch_size: int = 64) -> dict:
    """Review every task validation kept in one shard (module doc) and write the shard's reviews."""
    from termforge.schemas import read

    shard = read("verdicts", verdicts_path)
    tasks_dir = Path(shard["tasks_dir"])
    kept = [v for v in shard["verdicts"] if v["kept"]]
    reviewer = Reviewer(judge, min_score)
    judgments: list[Judgment] = []
    for i in range(0, len(kept), batch_size):
        batch = kept[i:i + batch_size]
        convos = [task_messages(tasks_dir / v["task_id"], _validation_summary(v)) for v in batch]
        judgments += reviewer.judge_many(convos, tuple(RUBRIC))
    rows = [{"task_id": v["task_id"], **j.to_dict()} for v, j in zip(kept, judgments)]
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in STATUSES}
    result = {"shard": shard["shard"], "tasks_dir": str(tasks_dir), "kind": "tasks", "rubric": RUBRIC,
              "min_score": min_score, "reviews": rows, "counts": counts,
              "distribution": distribution(rows, tuple(RUBRIC)), "stats": reviewer.stats()}
    atomic_write_json(out_path, result)
    print(f"review shard {shard['shard']}: {len(rows)} tasks, " + ", ".join(f"{v} {k}" for k, v in counts.items())
          + f" (judge {result['stats']['judge'] or 'none'}, {reviewer.calls} calls)")
    return result


def run_review_traces(solve_path: Path, out_path: Path, judge: Any = None, min_score: int = 3,
                      batch_size: int = 64) -> dict:
    """Review every successful rollout of one solve shard (module doc)."""
    from termforge.schemas import read

    shard = read("solve_records", solve_path)
    tasks_dir = Path(shard["tasks_dir"])
    wins = [r for r in shard["rollouts"] if r.get("status") == "graded" and r.get("reward") == 1.0
            and not r.get("hacked") and r.get("trajectory")]
    reviewer = Reviewer(judge, min_score)
    judgments: list[Judgment] = []
    for i in range(0, len(wins), batch_size):
        batch = wins[i:i + batch_size]
        convos = [trace_messages(tasks_dir / r["task_id"], read_json(Path(r["trajectory"]))) for r in batch]
        judgments += reviewer.judge_many(convos, TRACE_CRITERIA)
    rows = [{"task_id": r["task_id"], "rollout": r["rollout"], **j.to_dict()} for r, j in zip(wins, judgments)]
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in STATUSES}
    result = {"shard": shard["shard"], "tasks_dir": str(tasks_dir), "kind": "traces",
              "rubric": {k: RUBRIC[k] for k in TRACE_CRITERIA}, "min_score": min_score, "reviews": rows,
              "counts": counts, "distribution": distribution(rows, TRACE_CRITERIA), "stats": reviewer.stats()}
    atomic_write_json(out_path, result)
    print(f"review-traces shard {shard['shard']}: {len(rows)} successful rollouts, "
          + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" (judge {result['stats']['judge'] or 'none'})")
    return result


def rejected_by_review(review_paths: Sequence[Path]) -> dict[str, str]:
    """task id (or "task_id#rollout" for traces) -> the reason, for everything a review dropped."""
    from termforge.schemas import read

    out = {}
    for p in review_paths:
        doc = read("reviews", p)
        for r in doc["reviews"]:
            if r["status"] in ("dropped", "unparsed"):
                key = f"{r['task_id']}#{r['rollout']}" if "rollout" in r else r["task_id"]
                out[key] = r["reason"] or r["status"]
    return out


__all__ = ["RUBRIC", "TRACE_CRITERIA", "Reviewer", "Judgment", "run_review_shard", "run_review_traces",
           "parse_judgment", "rejected_by_review", "distribution", "task_messages", "trace_messages"]
