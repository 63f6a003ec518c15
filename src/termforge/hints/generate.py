"""Hint generation: one paragraph of method-level guidance per task, every hint through the leak gate.

Backends:

- ``procedural`` (the embedded default): the family's method note rendered from the task's public
  view (instruction and the agent's files only: generate/public_view.py), framed by facts the
  instruction gives (its input and deliverable paths). Deterministic, and unable to depend on the
  answer key. A draft that fails the gate is repaired by dropping the sentences that carry the
  findings.
- ``llm``: any `ChatModel` writes the hint from instruction, truth and oracle (prompts.py); a draft
  that fails the gate goes back with the findings, up to `max_rounds` repair rounds.

A hint that still fails after the last repair is dropped (status ``dropped_leak``); a model that
declines is recorded as ``refused``; a task lacking what the backend needs is ``not_attempted``.
Tasks without a hint stay reward-only in training.
"""

from __future__ import annotations

import io
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from termforge.errors import TermforgeError
from termforge.generate.families import family_by_name
from termforge.generate.public_view import PublicTaskView, render_method, view_of_task_dir
from termforge.hints import prompts
from termforge.hints.fit import fit_sentences, variant_sentence
from termforge.hints.judge import HintChecker, corpus_recall
from termforge.hints.shape import clean_structure
from termforge.hints.gate import (
    DEFAULT_MAX_WORDS,
    DEFAULT_NGRAM,
    GateContext,
    ABS_PATH,
    is_task_path,
    check_with,
    load_context,
)
from termforge.io import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_jsonl,
    publish_dir,
    seed_from,
    stable_hash,
    staging_dir,
)

BACKENDS = ("procedural", "llm")
STATUSES = ("hinted", "dropped_leak", "refused", "not_attempted")

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_LABEL = re.compile(r"^\s*(?:\*\*)?(?:hint|here is (?:the|a|my) hint|here's (?:the|a|my) hint)\s*[:.-]?\s*(?:\*\*)?\s*", re.I)
_FENCE = re.compile(r"^```[\w-]*\n(.*)\n```$", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'/])")
_INPUT_PATHS_MAX = 4


@dataclass
class HintResult:
    task_id: str
    status: str
    hint: str | None
    backend: str
    model: str | None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    """One entry per draft: {round, draft, gate_report (unredacted), ...backend extras}."""
    reason: str = ""

    def gate_summary(self) -> dict[str, Any]:
        """Every round's verdict and redacted findings, without drafts: safe beside a published hint."""
        return {
            "status": self.status,
            "rounds": [
                {
                    "round": r["round"],
                    "passed": r["gate_report"]["passed"] if r.get("gate_report") else False,
                    "refused": bool(r.get("refused")),
                    "cleaned": int(r.get("cleaned") or 0),
                    "words": r["gate_report"]["words"] if r.get("gate_report") else 0,
                    "findings": [
                        {"kind": f["kind"], "detail": f["detail"]}
                        for f in (r["gate_report"]["findings"] if r.get("gate_report") else [])
                    ],
                    "draft_sha256": stable_hash(r.get("draft", "").encode(), 64),
                }
                for r in self.rounds
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "status": self.status,
            "hint": self.hint,
            "backend": self.backend,
            "model": self.model,
            "reason": self.reason,
            "rounds": self.rounds,
        }


# -- task facts -----------------------------------------------------------------------------------


def _task_meta(task_dir: Path) -> dict[str, Any]:
    from termforge.schemas import read

    return read("task", task_dir / "task.json")


def task_id_of(task_dir: Path) -> str:
    return str(_task_meta(task_dir).get("id") or task_dir.name)


def domain_of(meta: dict[str, Any]) -> str:
    actual = meta.get("actual") or {}
    sig = meta.get("signature") or {}
    return str(actual.get("domain") or sig.get("domain") or "unknown")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _paths_in(text: str) -> list[str]:
    """Absolute paths in order of first appearance, trailing punctuation dropped."""
    out: list[str] = []
    for m in ABS_PATH.findall(text):
        p = m.rstrip(".,;:") or m
        if p.endswith("/") and len(p) > 1:
            p = p.rstrip("/") + "/"
        if p not in out:
            out.append(p)
    return out


def _code(p: str) -> str:
    return f"`{p}`"


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# -- procedural backend ----------------------------------------------------------------------------


def procedural_parts(task_dir: str | Path) -> tuple[str, list[str], str]:
    """The opening sentence, the method sentences and the closing sentence of a procedural hint.

    A task built by a registered family gets its hint from the public view alone (what the agent
    is given: generate/public_view.py), so the answer key cannot reach it. A task no family built
    (written by an LLM) has only its author's note, private/method.md, written with the answer in
    view: that note is untrusted and the gate is all that stands between it and a published hint."""
    task_dir = Path(task_dir)
    view = view_of_task_dir(task_dir)
    try:
        family = family_by_name(view.family)
    except KeyError:
        return hint_parts(view, authored_note(task_dir))
    return hint_parts(view, render_method(family, view))


def authored_note(task_dir: Path) -> str:
    """The method note an LLM task's author wrote (no family renders one for it)."""
    method_path = task_dir / "private" / "method.md"
    try:
        return method_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TermforgeError(f"{method_path}: missing; the procedural hint backend needs a method note") from None


def _deliverables(instruction: str) -> list[str]:
    """The paths the instruction's deliverable sections name (what the agent must produce)."""
    out: list[str] = []
    for m in re.finditer(r"^## (?:Deliverables|Also deliver)\s*\n(.*?)(?=^## |\Z)", instruction, re.M | re.S):
        for item in re.finditer(r"^- `(/[^`\s]+)`", m.group(1), re.M):
            if item.group(1) not in out:
                out.append(item.group(1))
    return out


def hint_parts(view: PublicTaskView, method: str) -> tuple[str, list[str], str]:
    """The hint's parts from the public view and a method note: the writer of procedural hints. It
    takes the view and the note and nothing else, so it has no way to the answer key."""
    method = _one_line(method)
    if not method:
        raise TermforgeError(f"task of family {view.family or '(none)'}: empty method note; the procedural hint "
                             "backend needs one")
    instruction = view.instruction

    # Only facts the instruction states: deliverables it names, and the other paths it names under
    # /app (a path outside it, such as a URL's `/results/NAME`, is no file to inspect).
    shown = _paths_in(instruction)
    deliverables = _deliverables(instruction)
    inputs = [
        p for p in shown
        if p.startswith("/app/") and is_task_path(p.rstrip("/")) and p not in deliverables
        and p.rstrip("/") not in deliverables
    ][:_INPUT_PATHS_MAX]

    # The frame says only what is true of every task of the family's protocol: for an explored task,
    # look at what you are given and check what you deliver; for a one-command task, that the first
    # reply is the whole task (a turn spent looking or checking is the turn the task needed).
    one_command = _episode_protocol(view.family) == "one_command"
    if one_command:
        opening = "Do the whole task with one command, in one fenced bash block, as your first reply."
    elif inputs:
        opening = f"Inspect {_join([_code(p) for p in inputs])} before you change anything."
    else:
        opening = "Inspect what /app holds before you change anything."
    if not method.endswith((".", "!", "?")):
        method += "."
    # The variant's own sentence first (so trimming for length never drops it), then the family's
    # note minus what does not hold for this variant.
    sentences, _ = fit_sentences([s.strip() for s in _SENTENCE_END.split(method) if s.strip()], view)
    own = variant_sentence(instruction)
    if own:
        sentences.insert(0, own)
    if one_command:
        made = f" has written {_join([_code(p) for p in deliverables])}" if deliverables else " has run"
        closing = f"Submit as soon as that command{made}: there is no turn for looking around or checking."
    elif deliverables:
        closing = f"Check {_join([_code(p) for p in deliverables])} against the instruction's format before you finish."
    else:
        closing = "Check the end state against every requirement of the instruction before you finish."
    return opening, sentences, closing


def _episode_protocol(family: str | None) -> str:
    """The task family's declared episode protocol (TaskFamily.episode_protocol); explore for tasks
    of no known family (LLM-made, imported)."""
    try:
        return family_by_name(str(family or "")).episode_protocol
    except KeyError:
        return "explore"


def procedural_hint(task_dir: str | Path, max_words: int = DEFAULT_MAX_WORDS) -> str:
    """One imperative paragraph from the method note and the instruction's own facts. Method
    sentences are dropped from the end if the whole would exceed max_words."""
    opening, sentences, closing = procedural_parts(task_dir)
    return _compose(opening, sentences, closing, max_words)


def _compose(opening: str, sentences: list[str], closing: str, max_words: int) -> str:
    kept = list(sentences)
    while True:
        text = " ".join([opening, *kept, closing])
        if len(text.split()) <= max_words or len(kept) <= 1:
            return text
        kept.pop()


def _procedural_result(
    task_dir: Path, task_id: str, ctx: GateContext, max_rounds: int
) -> HintResult:
    try:
        opening, sentences, closing = procedural_parts(task_dir)
    except TermforgeError as exc:
        return HintResult(task_id, "not_attempted", None, "procedural", None, reason=str(exc))
    parts = [opening, *sentences, closing]
    rounds: list[dict[str, Any]] = []
    for round_no in range(1, max_rounds + 2):
        draft = _compose(parts[0], parts[1:-1], parts[-1], ctx.max_words) if len(parts) >= 2 else " ".join(parts)
        report = check_with(draft, ctx)
        rounds.append({"round": round_no, "draft": draft, "gate_report": report.to_dict(redact=False)})
        if report.passed:
            return HintResult(task_id, "hinted", draft, "procedural", None, rounds)
        # Repair: drop every sentence that fails the content checks on its own.
        bad = [i for i, s in enumerate(parts) if not _content_passes(s, ctx)]
        if not bad or len(bad) == len(parts):
            break
        parts = [s for i, s in enumerate(parts) if i not in bad]
    kinds = sorted({f["kind"] for f in rounds[-1]["gate_report"]["findings"]})
    return HintResult(task_id, "dropped_leak", None, "procedural", None, rounds,
                      reason=f"still failing after {len(rounds)} draft(s): {', '.join(kinds)}")


def _content_passes(sentence: str, ctx: GateContext) -> bool:
    report = check_with(sentence, ctx)
    # Form and fit to the task are properties of the whole hint, not of one sentence.
    return not [f for f in report.findings if f["kind"] not in ("not_one_paragraph", "too_long", "off_task")]


# -- llm backend ------------------------------------------------------------------------------------


def is_refusal(text: str, finish_reason: str = "") -> bool:
    """A reply that declines, in any wording: filtered, empty, or without imperative guidance once
    talk about the request is taken off (hints.shape)."""
    if finish_reason == "content_filter":
        return True
    return not text.strip() or clean_structure(clean_reply(text)).refused


def clean_reply(text: str) -> str:
    """The hint inside a reply: reasoning blocks, a code fence around it and a "Hint:" label go."""
    text = _THINK.sub("", text).strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
    text = _LABEL.sub("", text, count=1).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


def _finalise(text: str) -> str:
    # A hint that passed is one paragraph; rewrapped lines inside it carry no meaning.
    return _one_line(text)


def llm_prompt(task_dir: Path, ctx: GateContext) -> list[dict[str, str]]:
    """The first request for one task: rule and examples, then instruction, truth, oracle, method."""
    truth_path = task_dir / "private" / "truth.json"
    truth = json.loads(truth_path.read_text(encoding="utf-8")) if truth_path.exists() else {}
    oracle_path = task_dir / "solution" / "solve.sh"
    method_path = task_dir / "private" / "method.md"
    return prompts.initial_messages(
        ctx.instruction,
        truth,
        oracle_path.read_text(encoding="utf-8") if oracle_path.exists() else "",
        method_path.read_text(encoding="utf-8") if method_path.exists() else "",
        ctx.max_words,
    )


def _round_sampling(sampling: Any, round_no: int) -> Any:
    # A fresh but reproducible draw per round: a repair must not resample the same text. The seed
    # depends on the round only, so one task alone and the same task in a batch send equal requests.
    if sampling is None or getattr(sampling, "seed", None) is None:
        return sampling
    return sampling.replace(seed=seed_from("hint-round", sampling.seed, round_no) % (2**31))


def llm_hints(
    model: Any,
    tasks: Sequence[tuple[str, Path, GateContext]],
    max_rounds: int = 2,
    sampling: Any = None,
    checker: HintChecker | None = None,
) -> list[HintResult]:
    """Hints for many tasks, one batched model call per round: every task still failing the gate
    goes into the next round's batch with its findings. Results in input order."""
    model_id = getattr(model, "model_id", None) or str(model)
    convos = {tid: llm_prompt(task_dir, ctx) for tid, task_dir, ctx in tasks}
    first = dict(convos)
    flagged: dict[str, list[dict[str, str]]] = {tid: [] for tid in convos}
    contexts = {tid: ctx for tid, _, ctx in tasks}
    rounds: dict[str, list[dict[str, Any]]] = {tid: [] for tid, _, _ in tasks}
    done: dict[str, HintResult] = {}
    pending = [tid for tid, _, _ in tasks]
    order = {tid: i for i, tid in enumerate(pending)}
    for round_no in range(1, max_rounds + 2):
        if not pending:
            break
        try:
            replies = model.chat_many([convos[t] for t in pending], n=1, sampling=_round_sampling(sampling, round_no))
        except TermforgeError as exc:
            raise TermforgeError(
                f"hint model {model_id} failed in round {round_no} (tasks {', '.join(pending[:3])}"
                f"{' ...' if len(pending) > 3 else ''}): {exc}"
            ) from exc
        still: list[str] = []
        passed: list[str] = []
        for tid, completions in zip(pending, replies):
            completion = completions[0]
            raw = completion.text or ""
            entry: dict[str, Any] = {
                "round": round_no,
                "raw": raw,
                "finish_reason": completion.finish_reason,
                "cached": bool(getattr(completion, "cached", False)),
                "prompt_sha256": stable_hash(convos[tid], 64),
            }
            rounds[tid].append(entry)
            shape = clean_structure(clean_reply(raw), contexts[tid].terms) if raw.strip() else None
            if completion.finish_reason == "content_filter" or shape is None or shape.refused:
                why = shape.reason if shape is not None and shape.reason else "an empty or filtered reply"
                entry.update(draft=raw.strip(), refused=True, gate_report=None, cleaned=0)
                done[tid] = HintResult(tid, "refused", None, "llm", model_id, rounds[tid],
                                       reason=f"the model declined in round {round_no} ({why})")
                continue
            # Talk about the request (a preamble, a sign-off) is cut off and counted, never published.
            draft = shape.text
            entry["cleaned"] = len(shape.removed)
            report = check_with(draft, contexts[tid])
            entry.update(draft=draft, refused=False, gate_report=report.to_dict(redact=False))
            entry["_raw"] = raw
            if report.passed:
                passed.append(tid)
                continue
            convos[tid] = _repair_convo(first[tid], flagged[tid], report.findings, contexts[tid].max_words)
            still.append(tid)
        # Drafts the offline gate passed go to the judge and the extraction probe, in one batch.
        extra = checker.check([(tid, contexts[tid].task_dir, contexts[tid].instruction, rounds[tid][-1]["draft"],
                                contexts[tid].secrets) for tid in passed]) if checker and passed else [[] for _ in passed]
        for tid, found in zip(passed, extra):
            entry = rounds[tid][-1]
            raw = entry.pop("_raw")
            if not found:
                done[tid] = HintResult(tid, "hinted", _finalise(entry["draft"]), "llm", model_id, rounds[tid])
                continue
            entry["gate_report"]["passed"] = False
            entry["gate_report"]["findings"] += found
            convos[tid] = _repair_convo(first[tid], flagged[tid], found, contexts[tid].max_words)
            still.append(tid)
        for tid in still:
            rounds[tid][-1].pop("_raw", None)
        pending = sorted(still, key=order.__getitem__)
    for tid in pending:
        kinds = sorted({f["kind"] for f in rounds[tid][-1]["gate_report"]["findings"]})
        done[tid] = HintResult(tid, "dropped_leak", None, "llm", model_id, rounds[tid],
                               reason=f"still failing after {max_rounds} repair round(s): {', '.join(kinds)}")
    return [done[tid] for tid, _, _ in tasks]


def _repair_convo(first: list[dict[str, str]], flagged: list[dict[str, str]], findings: list[dict[str, str]],
                  max_words: int) -> list[dict[str, str]]:
    """The first request again plus the kinds of problem every rejected draft had so far. The
    rejected drafts themselves are not sent back: a leak shown to the writer comes back re-encoded."""
    flagged += findings
    return [*first, prompts.repair_message(flagged, max_words)]


def llm_hint(
    model: Any,
    task_dir: str | Path,
    max_rounds: int = 2,
    sampling: Any = None,
    n: int = DEFAULT_NGRAM,
    max_words: int = DEFAULT_MAX_WORDS,
) -> HintResult:
    """Ask `model` (a ChatModel) for one task's hint; repair from the gate's findings up to
    max_rounds times (so at most max_rounds + 1 drafts)."""
    task_dir = Path(task_dir)
    ctx = load_context(task_dir, n=n, max_words=max_words)
    return llm_hints(model, [(task_id_of(task_dir), task_dir, ctx)], max_rounds, sampling)[0]


# -- the stage --------------------------------------------------------------------------------------


def run_hints(
    task_dirs: Sequence[str | Path],
    backend: str,
    out_dir: str | Path,
    model: Any = None,
    max_rounds: int = 2,
    n: int = DEFAULT_NGRAM,
    workers: int = 1,
    *,
    sampling: Any = None,
    max_words: int = DEFAULT_MAX_WORDS,
    batch_size: int = 256,
    judge: Any = None,
    probe: Any = None,
    judge_corpus: int = 0,
) -> dict[str, Any]:
    """Write hints for task_dirs under out_dir and return the coverage summary.

    Outputs (each written atomically): demos.parquet (one row per hinted task, by task id),
    md/<task_id>.md (one per hint), coverage.json (counts overall and per domain, status per task),
    attempts.jsonl (every draft with its unredacted gate report: host-side audit, contains leaks).
    `model` is a ChatModel or a model spec mapping for `make_model` (llm backend only);
    `max_rounds` counts repair rounds after the first draft. The llm backend sends each round of
    up to `batch_size` tasks as one `chat_many` call (the backend batches or runs requests
    concurrently); `workers` threads read tasks, run the procedural backend, and run llm batches
    side by side. Row order never depends on either: rows go by task id.
    """
    if backend not in BACKENDS:
        raise TermforgeError(f"hints backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if not isinstance(max_rounds, int) or max_rounds < 0:
        raise TermforgeError(f"hints max_rounds: expected an integer >= 0, got {max_rounds!r}")
    if not isinstance(workers, int) or workers < 1:
        raise TermforgeError(f"hints workers: expected an integer >= 1, got {workers!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise TermforgeError(f"hints batch_size: expected an integer >= 1, got {batch_size!r}")
    out_dir = Path(out_dir)
    dirs = [Path(d) for d in task_dirs]
    metas = {d: _task_meta(d) for d in dirs}
    ids: dict[str, Path] = {}
    for d in dirs:
        tid = str(metas[d].get("id") or d.name)
        if tid in ids:
            raise TermforgeError(f"task {tid}: given twice ({ids[tid]} and {d})")
        ids[tid] = d

    owned_model = None
    if backend == "llm":
        if model is None:
            raise TermforgeError("hints backend 'llm' needs a model (a ChatModel or a model spec)")
        if isinstance(model, dict):
            from termforge.models.registry import make_model

            model = owned_model = make_model(model, where="hints.model")
    model_id = getattr(model, "model_id", None) if backend == "llm" else None
    # The judge and the extraction probe (llm backend only): ChatModels or model specs.
    owned_checks = []
    checks = {}
    for name, spec in (("judge", judge), ("probe", probe)):
        if spec is not None and backend == "llm" and isinstance(spec, dict):
            from termforge.models.registry import make_model

            spec = make_model(spec, where=f"hints.{name}")
            owned_checks.append(spec)
        checks[name] = spec if backend == "llm" else None
    checker = HintChecker(checks["judge"], checks["probe"], sampling=None) if backend == "llm" else None

    def prepare(tid: str) -> tuple[str, Path, GateContext | None, HintResult | None]:
        task_dir = ids[tid]
        if not (task_dir / "instruction.md").exists():
            return tid, task_dir, None, HintResult(tid, "not_attempted", None, backend, model_id,
                                                   reason="no instruction.md")
        return tid, task_dir, load_context(task_dir, n=n, max_words=max_words), None

    def procedural(item: tuple[str, Path, GateContext | None, HintResult | None]) -> HintResult:
        tid, task_dir, ctx, skipped = item
        return skipped or _procedural_result(task_dir, tid, ctx, max_rounds)

    def llm_batch(batch: list[tuple[str, Path, GateContext]]) -> list[HintResult]:
        return llm_hints(model, batch, max_rounds=max_rounds, sampling=sampling, checker=checker)

    order = sorted(ids)
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            items = list(pool.map(prepare, order))
            if backend == "procedural":
                results = list(pool.map(procedural, items))
            else:
                ready = [(tid, d, ctx) for tid, d, ctx, skipped in items if skipped is None]
                batches = [ready[i : i + batch_size] for i in range(0, len(ready), batch_size)]
                found = {r.task_id: r for batch in pool.map(llm_batch, batches) for r in batch}
                results = [skipped or found[tid] for tid, _, _, skipped in items]
        domains = {tid: domain_of(metas[ids[tid]]) for tid in order}
        coverage = _coverage(results, domains, backend, model_id, max_rounds, n, max_words)
        if checker is not None and checker.active:
            coverage["checks"] = checker.stats()
            if judge_corpus > 0:
                # How well these two checks catch disguised leaks, measured on the committed corpus.
                coverage["checks_corpus"] = corpus_recall(checker, limit=judge_corpus)
    finally:
        if owned_model is not None:
            owned_model.close()
        for m in owned_checks:
            m.close()

    _write_outputs(out_dir, results, coverage)
    c = coverage["counts"]
    if coverage.get("checks_corpus"):
        cc = coverage["checks_corpus"]
        print("hints checks on the corpus (" + f"{cc['leaks']} leaks, {cc['honest']} honest): " + ", ".join(
            f"{k} recall {cc[k]['recall']:.2f} false positives {cc[k]['false_positive_rate']:.2f}"
            for k in ("judge", "probe", "any") if coverage["checks"].get(k) is not None or k == "any"))
    print(
        f"hints ({backend}{', ' + model_id if model_id else ''}): {c['hinted']}/{coverage['total']} hinted "
        f"({coverage['repaired']} after repair), {_dropped_words(coverage['dropped_by_reason'])}, "
        f"{c['refused']} refused, {c['not_attempted']} not attempted, {coverage['cleaned']} cleaned of chatter "
        f"-> {out_dir}"
    )
    return coverage


# Gate findings about a hint's form and its fit to the task; any other finding says a secret got out.
_NOT_LEAKS = ("not_one_paragraph", "too_long", "off_task")


def _dropped_words(dropped: dict[str, int]) -> str:
    words = f"{dropped['leak']} dropped for leaks, {dropped['off_task']} dropped as off-task"
    return words + (f", {dropped['form']} dropped for form" if dropped["form"] else "")


def _dropped_by_reason(results: list[HintResult]) -> dict[str, int]:
    """Dropped hints by why their last draft failed: a leak (any finding that a secret got out,
    the judge's and the probe's included), else off-task, else form alone."""
    out = {"leak": 0, "off_task": 0, "form": 0}
    for r in results:
        if r.status != "dropped_leak":
            continue
        kinds = {f["kind"] for f in ((r.rounds[-1].get("gate_report") or {}).get("findings", []) if r.rounds else [])}
        out["leak" if kinds - set(_NOT_LEAKS) or not kinds else "off_task" if "off_task" in kinds else "form"] += 1
    return out


def _zero_counts() -> dict[str, int]:
    return {s: 0 for s in STATUSES}


def _coverage(
    results: list[HintResult], domains: dict[str, str], backend: str, model_id: str | None,
    max_rounds: int, n: int, max_words: int,
) -> dict[str, Any]:
    counts = _zero_counts()
    by_domain: dict[str, dict[str, int]] = {}
    for r in results:
        counts[r.status] += 1
        by_domain.setdefault(domains[r.task_id], _zero_counts())[r.status] += 1
    findings: dict[str, int] = {}
    for r in results:
        for rnd in r.rounds:
            for f in (rnd.get("gate_report") or {}).get("findings", []):
                findings[f["kind"]] = findings.get(f["kind"], 0) + 1
    return {
        "backend": backend,
        "model": model_id,
        "max_rounds": max_rounds,
        "n": n,
        "max_words": max_words,
        "total": len(results),
        "counts": counts,
        "by_domain": dict(sorted(by_domain.items())),
        "dropped_by_reason": _dropped_by_reason(results),
        "repaired": sum(1 for r in results if r.status == "hinted" and len(r.rounds) > 1),
        "cleaned": sum(1 for r in results if r.status == "hinted" and r.rounds and r.rounds[-1].get("cleaned")),
        "findings_by_kind": dict(sorted(findings.items())),
        "tasks": {r.task_id: {"status": r.status, "rounds": len(r.rounds), "reason": r.reason} for r in results},
    }


def demos_table_bytes(results: list[HintResult]) -> bytes:
    """demos.parquet: hinted tasks only, sorted by task id, written without anything run-specific."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sorted((r for r in results if r.status == "hinted"), key=lambda r: r.task_id)
    schema = pa.schema(
        [
            ("task_id", pa.string()),
            ("demo", pa.string()),
            ("backend", pa.string()),
            ("model", pa.string()),
            ("rounds", pa.int32()),
            ("gate_report", pa.string()),
        ]
    )
    table = pa.table(
        {
            "task_id": [r.task_id for r in rows],
            "demo": [r.hint for r in rows],
            "backend": [r.backend for r in rows],
            "model": [r.model for r in rows],
            "rounds": [len(r.rounds) for r in rows],
            "gate_report": [json.dumps(r.gate_summary(), sort_keys=True, ensure_ascii=False) for r in rows],
        },
        schema=schema,
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", use_dictionary=False, write_statistics=True)
    return buf.getvalue()


def _write_outputs(out_dir: Path, results: list[HintResult], coverage: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    # md/ is replaced as a whole so hints of tasks that lost theirs since the last run disappear.
    stage = staging_dir(out_dir / "md")
    for r in results:
        if r.status == "hinted":
            (stage / f"{r.task_id}.md").write_text(
                f"# Hint for {r.task_id}\n\n{r.hint}\n", encoding="utf-8"
            )
    os.chmod(stage, 0o755)  # mkdtemp makes it private; the hints are meant to be read
    publish_dir(stage, out_dir / "md")
    atomic_write_jsonl(out_dir / "attempts.jsonl", [r.to_dict() for r in sorted(results, key=lambda r: r.task_id)])
    atomic_write_bytes(out_dir / "demos.parquet", demos_table_bytes(results))
    # Written last: its presence means the other outputs are complete.
    atomic_write_json(out_dir / "coverage.json", coverage)
