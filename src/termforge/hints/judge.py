"""Two model-based checks beside the offline gate, for the llm backend.

- The **judge** reads the instruction, the answer key and the hint, and says by a rubric whether the
  hint reveals anything the agent must discover (the discover-vs-given rule: what the instruction
  states may be restated; answers, computed or discovered values, expected output, hidden
  generation parameters, the oracle's shortcut and the verifier's internals may not, in any form).
- The **extraction probe** is a model that sees only the instruction and the hint and is asked for
  the answer. Its reply is graded like the task's answer: the shared leak detector looks for the
  answer key's values in it (any format). A value the probe also produces without the hint was
  guessable from the instruction and does not count against the hint.

Both go through `ChatModel.chat_many` (batched; a model spec with a cache_dir answers reruns from
its response cache), and every call is counted in `CheckStats`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from termforge.quality.leaks import SecretSet, find_leaks

JUDGE_SYSTEM = """\
You audit hints written for terminal tasks. An agent will solve the task; the hint is read by a \
teacher model beside the agent. A good hint teaches the method: the key steps, the core technique, \
where a naive attempt goes wrong. The rule is discover-vs-given: anything the instruction states \
may be restated; anything the agent must discover must not appear in any form.

The hint LEAKS if it reveals, even partly, reformatted, encoded, spelled out, as arithmetic or as a \
value one step away:
- an answer or any value of the answer key (numbers, names, passwords, tokens, lines of the \
expected output, which rows or files are involved);
- a computed or discovered value, or the exact expected output;
- a hidden generation parameter or mechanism (how the task was built, planted bugs by name or by \
their exact location or fix);
- the reference solution's shortcut or private paths, or the verifier's tests and assertions.
It does NOT leak by naming tools, techniques, pitfalls, or values and paths the instruction gives.

Reply with one JSON object and nothing else: {"leak": true or false, "kinds": [zero or more of \
"answer", "computed_value", "expected_output", "hidden_parameter", "oracle", "verifier"], \
"reason": "<one sentence that names the kind of information, never the value>"}"""

JUDGE_USER = """\
## Instruction (the agent sees exactly this)
{instruction}

## Answer key (what must be discovered)
{hidden}

## Hint under review
{hint}"""

PROBE_SYSTEM = """\
You are solving a terminal task without access to the machine. Using only the task text and the \
hint, state the final answer the task asks for (the values, lines or passphrase the deliverable \
must contain) as precisely as you can. If you cannot know it, give your best guess anyway. Reply \
with the answer only."""

PROBE_USER = """\
## Task
{instruction}
{hint_block}"""

_JSON = re.compile(r"\{.*\}", re.S)


@dataclass
class CheckStats:
    calls: int = 0
    cached: int = 0
    flagged: int = 0
    unparsed: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"calls": self.calls, "cached": self.cached, "flagged": self.flagged, "unparsed": self.unparsed}


@dataclass
class Verdict:
    leak: bool
    kinds: list[str] = field(default_factory=list)
    detail: str = ""


def _cut(text: str, limit: int = 6000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... cut]"


def judge_messages(instruction: str, hidden: Any, hint: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": JUDGE_USER.format(
            instruction=_cut(instruction), hidden=_cut(json.dumps(hidden, indent=1, sort_keys=True, ensure_ascii=False),
                                                       4000), hint=hint)},
    ]


def probe_messages(instruction: str, hint: str | None) -> list[dict[str, str]]:
    block = f"\n## Hint\n{hint}" if hint else ""
    return [{"role": "system", "content": PROBE_SYSTEM},
            {"role": "user", "content": PROBE_USER.format(instruction=_cut(instruction), hint_block=block)}]


def parse_judgement(text: str) -> Verdict | None:
    """The judge's JSON verdict; None when the reply holds none (counted as unparsed, not a pass)."""
    text = re.sub(r"<think>.*?</think>", "", text or "", flags=re.S | re.I)
    m = _JSON.search(text)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("leak"), bool):
        return None
    kinds = [str(k) for k in data.get("kinds") or [] if isinstance(k, str)]
    return Verdict(data["leak"], kinds, f"the judge found {', '.join(kinds) or 'a leak'}" if data["leak"] else "")


def _hidden(task_dir: Path) -> Any:
    path = task_dir / "private" / "truth.json"
    if not path.exists():
        return {}
    truth = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in truth.items() if k != "given"} if isinstance(truth, dict) else truth


def _answer_only(secrets: SecretSet) -> SecretSet:
    """What the probe is graded on: the answer key's values (not verifier internals)."""
    return SecretSet([s for s in secrets.secrets if s.kind in ("answer", "answer_key")], given="")


class HintChecker:
    """The judge and the probe for a batch of hints (either may be None). `check` returns one
    finding list per hint: [] when neither flags it."""

    def __init__(self, judge: Any = None, probe: Any = None, sampling: Any = None) -> None:
        self.judge = judge
        self.probe = probe
        self.sampling = sampling
        self.judge_stats = CheckStats()
        self.probe_stats = CheckStats()
        self._baseline: dict[str, set[str]] = {}

    @property
    def active(self) -> bool:
        return self.judge is not None or self.probe is not None

    def _ask(self, model: Any, convos: list[list[dict[str, str]]], stats: CheckStats) -> list[str]:
        if not convos:
            return []
        replies = model.chat_many(convos, n=1, sampling=self.sampling)
        out = []
        for completions in replies:
            c = completions[0]
            stats.calls += 1
            stats.cached += bool(getattr(c, "cached", False))
            out.append(c.text or "")
        return out

    def check(self, items: Sequence[tuple[str, Path, str, str, SecretSet]]) -> list[list[dict[str, str]]]:
        """items: (task id, task dir, instruction, hint, secrets)."""
        findings: list[list[dict[str, str]]] = [[] for _ in items]
        if self.judge is not None:
            convos = [judge_messages(instr, _hidden(d), hint) for _, d, instr, hint, _ in items]
            for i, reply in enumerate(self._ask(self.judge, convos, self.judge_stats)):
                verdict = parse_judgement(reply)
                if verdict is None:
                    self.judge_stats.unparsed += 1
                    findings[i].append({"kind": "judge_leak", "detail": "the judge gave no verdict", "evidence": ""})
                elif verdict.leak:
                    self.judge_stats.flagged += 1
                    findings[i].append({"kind": "judge_leak", "detail": verdict.detail, "evidence": reply[:500]})
        if self.probe is not None:
            need_base = [(tid, instr) for tid, _, instr, _, _ in items if tid not in self._baseline]
            base_replies = self._ask(self.probe, [probe_messages(instr, None) for _, instr in need_base],
                                     self.probe_stats)
            by_tid = {tid: s for tid, _, _, _, s in items}
            for (tid, _), reply in zip(need_base, base_replies):
                self._baseline[tid] = {leak.secret.text for leak in find_leaks(reply, _answer_only(by_tid[tid]))}
            convos = [probe_messages(instr, hint) for _, _, instr, hint, _ in items]
            for i, reply in enumerate(self._ask(self.probe, convos, self.probe_stats)):
                tid, secrets = items[i][0], items[i][4]
                got = [leak for leak in find_leaks(reply, _answer_only(secrets))
                       if leak.secret.text not in self._baseline[tid]]
                if got:
                    self.probe_stats.flagged += 1
                    findings[i].append({"kind": "probe_leak",
                                        "detail": f"a model given only the instruction and the hint produced "
                                                  f"{len(got)} answer value(s)",
                                        "evidence": "; ".join(leak.evidence for leak in got)[:500]})
        return findings

    def stats(self) -> dict[str, Any]:
        return {"judge": self.judge_stats.to_dict() if self.judge is not None else None,
                "probe": self.probe_stats.to_dict() if self.probe is not None else None}


def corpus_recall(checker: HintChecker, corpus: str | Path | None = None, limit: int = 40,
                  work_dir: str | Path | None = None) -> dict[str, Any]:
    """Recall and false-positive rate of the judge and the probe (each alone and together) on a
    deterministic slice of the hint corpus: `limit` leaks and `limit // 2` honest hints, spread
    over the families."""
    import tempfile

    from termforge.hints.corpus import DEFAULT_CORPUS, corpus_tasks, load_corpus
    from termforge.quality.leaks import task_secrets

    leaks, honest = load_corpus(corpus or DEFAULT_CORPUS)
    leaks = _spread(leaks, limit)
    honest = _spread(honest, max(1, limit // 2))
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        tasks = corpus_tasks(tmp, seeds=sorted({r["seed"] for r in leaks + honest}),
                             families=sorted({r["family"] for r in leaks + honest}))
        rows = leaks + honest
        items = []
        for r in rows:
            d = tasks[(r["family"], r["seed"])]
            items.append((f"{r['family']}/{r['seed']}", d, (d / "instruction.md").read_text(encoding="utf-8"),
                          r["hint"], task_secrets(d)))
        found = checker.check(items)
    out: dict[str, Any] = {"leaks": len(leaks), "honest": len(honest)}
    for name in ("judge_leak", "probe_leak", "any"):
        flags = [any(f["kind"] == name or name == "any" for f in fs) for fs in found]
        hit = sum(flags[: len(leaks)])
        fp = sum(flags[len(leaks):])
        key = name.replace("_leak", "")
        out[key] = {"recall": hit / len(leaks) if leaks else 0.0,
                    "false_positive_rate": fp / len(honest) if honest else 0.0}
    return out


def _spread(rows: list[dict], limit: int) -> list[dict]:
    """Every k-th row, so a slice covers all families and kinds in the corpus order."""
    if len(rows) <= limit:
        return rows
    step = len(rows) / limit
    return [rows[int(i * step)] for i in range(limit)]
