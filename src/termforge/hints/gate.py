"""The leak gate: does a hint give away what the agent is expected to discover?

A hint may restate what the instruction already says; it must never carry the answer key
(private/truth.json, except truth["given"], which the instruction states on purpose), long runs of
words from the key or from the oracle script (solution/solve.sh), the verifier's files and paths,
or paths only the oracle knows. The gate is pure and deterministic: the same hint and task
directory always give the same report, findings in a fixed order.

Findings carry a `detail` that never quotes a secret (it names the truth key, a count, a kind), so
a report can be stored next to a published hint; the matched text itself is kept apart in
`evidence`, for the repair prompt and the host-side audit only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from termforge.errors import TermforgeError
from termforge.hints.shape import TaskTerms, mapping_findings, task_terms
from termforge.hints.specifics import (Allowed, allowed_for, instruction_quotes, mask, public_view, read_tests,
                                       specifics)
from termforge.quality.leaks import SecretSet, find_leaks, task_secrets

DEFAULT_NGRAM = 8
DEFAULT_MAX_WORDS = 220

FINDING_KINDS = (
    "not_one_paragraph",
    "too_long",
    "literal_answer",
    "disguised_answer",
    "bug_name",
    "bug_pointer",
    "test_assertion",
    "truth_ngram",
    "oracle_ngram",
    "test_reference",
    "oracle_path",
    "off_task",
    "unsupported_specific",
    "answer_value",
    "bug_identifier",
    "test_case",
)
# Findings that say a secret got out (the others are about form and fit).
LEAK_FINDINGS = ("literal_answer", "disguised_answer", "bug_name", "bug_pointer", "test_assertion", "truth_ngram", "oracle_ngram",
                 "test_reference", "oracle_path", "unsupported_specific", "answer_value", "bug_identifier", "test_case")
# Which finding each kind of specific (termforge.hints.specifics) becomes.
_SPECIFIC_FINDING = {"unsupported": "unsupported_specific", "answer_value": "answer_value",
                     "bug_identifier": "bug_identifier", "test_case": "test_case"}
# Which finding a leak of each secret kind (termforge.quality.leaks.KINDS) becomes.
_LEAK_FINDING = {"answer": "literal_answer", "answer_key": "literal_answer", "bug_name": "bug_name",
                 "assertion": "test_assertion", "pointer": "bug_pointer"}

# Names of the verifier's files and the places it lives; an agent that reads or writes them is
# attacking the grader, and a hint must not point there.
_TEST_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("test_final_state", re.compile(r"test_final_state(?:\.py)?", re.I)),
    ("test_initial_state", re.compile(r"test_initial_state(?:\.py)?", re.I)),
    ("test.sh", re.compile(r"(?<![\w.-])test\.sh\b", re.I)),
    ("/tests/", re.compile(r"(?<![\w.~-])/tests(?:/|\b)", re.I)),
    ("/logs/verifier", re.compile(r"/logs/verifier\b", re.I)),
    ("reward.txt", re.compile(r"(?<![\w.-])reward\.(?:txt|json)\b", re.I)),
    ("/verifier/", re.compile(r"(?<![\w.~-])/verifier/", re.I)),
)

# Absolute paths: a slash then path characters, not preceded by something that makes it a
# fragment of a longer token (a URL, a relative path, a number).
ABS_PATH = re.compile(r"(?<![\w.~:/\\-])/(?:[\w.+@%-]+/?)+")
# Interpreters, devices and system tools: naming them reveals nothing about a task.
_GLOB_NEXT = re.compile(r"[*?\[{]")
_SYSTEM_PREFIXES = ("/bin/", "/usr/", "/sbin/", "/dev/", "/proc/", "/lib", "/etc/alternatives/")
_SYSTEM_PATHS = frozenset({"/tmp", "/app", "/bin", "/usr", "/dev/null", "/etc", "/home", "/root", "/"})

_WORD = re.compile(r"[a-z0-9]+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_BLOCK_LINE = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|#{1,6}\s|```|>\s?)")


@dataclass
class GateReport:
    passed: bool
    findings: list[dict[str, str]] = field(default_factory=list)
    """Each {kind, detail, evidence}; `detail` names what leaked without quoting it."""
    words: int = 0

    def kinds(self) -> list[str]:
        return sorted({f["kind"] for f in self.findings})

    def to_dict(self, redact: bool = True) -> dict[str, Any]:
        """With redact (the default) the matched text is left out: safe to store beside the hint."""
        keep = ("kind", "detail") if redact else ("kind", "detail", "evidence")
        return {
            "passed": self.passed,
            "words": self.words,
            "findings": [{k: f[k] for k in keep if k in f} for f in self.findings],
        }


@dataclass
class GateContext:
    """What the gate compares a hint against, read once per task so repair rounds reuse it."""

    task_dir: Path
    n: int
    max_words: int
    instruction: str
    secrets: SecretSet
    truth_ngrams: dict[tuple[str, ...], str]
    oracle_ngrams: dict[tuple[str, ...], str]
    oracle_paths: list[str]
    terms: TaskTerms | None = None
    allowed: Allowed | None = None
    """The allow-list for specifics (hints/specifics.py); None leaves that check out."""


def words_of(text: str) -> list[str]:
    """Lower-case alphanumeric tokens: the unit of every n-gram comparison."""
    return _WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> Iterator[tuple[str, ...]]:
    for i in range(len(tokens) - n + 1):
        yield tuple(tokens[i : i + n])


def load_context(task_dir: str | Path, n: int = DEFAULT_NGRAM, max_words: int = DEFAULT_MAX_WORDS) -> GateContext:
    task_dir = Path(task_dir)
    if n < 2:
        raise TermforgeError(f"hint gate: n-gram size must be >= 2, got {n}")
    if max_words < 1:
        raise TermforgeError(f"hint gate: max_words must be >= 1, got {max_words}")
    instruction = _read_text(task_dir / "instruction.md", required=True)
    truth_path = task_dir / "private" / "truth.json"
    truth: Any = {}
    if truth_path.exists():
        try:
            truth = json.loads(truth_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise TermforgeError(f"{truth_path}: not valid JSON ({exc})") from None
    hidden = {k: v for k, v in truth.items() if k != "given"} if isinstance(truth, dict) else truth
    oracle = _read_text(task_dir / "solution" / "solve.sh", required=False)
    # Second solutions (solution/alternatives/) are solutions too: a hint pastes neither.
    alt_dir = task_dir / "solution" / "alternatives"
    if alt_dir.is_dir():
        oracle += "\n" + "\n".join(_read_text(p, required=False) for p in sorted(alt_dir.glob("*.sh")))

    instr_ngrams = set(ngrams(words_of(instruction), n))

    truth_ngrams: dict[tuple[str, ...], str] = {}
    for where, text in _texts_for_ngrams(hidden, ""):
        for g in ngrams(words_of(text), n):
            if g not in instr_ngrams:
                truth_ngrams.setdefault(g, where or "truth")
    oracle_ngrams = {g: "" for g in ngrams(words_of(oracle), n) if g not in instr_ngrams}

    oracle_paths = sorted(
        {p for p in (_clean_path(m) for m in ABS_PATH.findall(oracle)) if is_task_path(p) and p not in instruction}
    )
    return GateContext(
        task_dir=task_dir,
        n=n,
        max_words=max_words,
        instruction=instruction,
        secrets=task_secrets(task_dir),
        truth_ngrams=truth_ngrams,
        oracle_ngrams=oracle_ngrams,
        oracle_paths=oracle_paths,
        terms=task_terms(task_dir, instruction, _output_paths(task_dir)),
        allowed=allowed_for(public_view(task_dir), hidden, read_tests(task_dir)),
    )


def check_hint(
    hint: str, task_dir: str | Path, n: int = DEFAULT_NGRAM, max_words: int = DEFAULT_MAX_WORDS
) -> GateReport:
    """Run every gate check on one hint for the task at task_dir."""
    return check_with(hint, load_context(task_dir, n=n, max_words=max_words))


def check_with(hint: str, ctx: GateContext) -> GateReport:
    findings: list[dict[str, str]] = []
    text = hint or ""
    n_words = len(text.split())

    findings += _shape_findings(text, n_words, ctx.max_words)
    # What the hint quotes from the instruction is what the agent was told: no detector reads it.
    told = mask(text, instruction_quotes(text, ctx.allowed.instruction_words)) if ctx.allowed else text
    findings += _literal_findings(told, ctx)
    if ctx.allowed is not None:
        findings += _specific_findings(text, ctx.allowed)
    # (The n-gram sets already leave out every n-gram of the instruction.)
    tokens = words_of(text)
    findings += _ngram_findings(tokens, ctx.n, ctx.truth_ngrams, "truth_ngram", "private/truth.json")
    findings += _ngram_findings(tokens, ctx.n, ctx.oracle_ngrams, "oracle_ngram", "the oracle script")
    findings += _test_findings(text, ctx.instruction)
    findings += _path_findings(text, ctx.oracle_paths)
    if ctx.terms is not None and text.strip():
        # A hint that quotes the instruction is about its task, however few other words it shares.
        findings += mapping_findings(text, ctx.terms, quotes_task=bool(told != text))
    order = {k: i for i, k in enumerate(FINDING_KINDS)}
    findings.sort(key=lambda f: (order[f["kind"]], f["detail"], f.get("evidence", "")))
    return GateReport(passed=not findings, findings=findings, words=n_words)


# -- checks -----------------------------------------------------------------------------------------


def _shape_findings(text: str, n_words: int, max_words: int) -> list[dict[str, str]]:
    out = []
    body = text.strip()
    if not body:
        out.append({"kind": "not_one_paragraph", "detail": "the hint is empty", "evidence": ""})
    else:
        if _BLANK_LINE.search(body):
            out.append(
                {"kind": "not_one_paragraph", "detail": "the hint has a blank line (more than one paragraph)",
                 "evidence": ""}
            )
        blocks = [ln for ln in body.splitlines() if _BLOCK_LINE.match(ln)]
        if blocks:
            out.append(
                {"kind": "not_one_paragraph",
                 "detail": f"{len(blocks)} line(s) start a list, heading, quote or code block",
                 "evidence": blocks[0].strip()[:80]}
            )
    if n_words > max_words:
        out.append({"kind": "too_long", "detail": f"{n_words} words (at most {max_words})", "evidence": ""})
    return out


def _literal_findings(text: str, ctx: GateContext) -> list[dict[str, str]]:
    """Every secret the shared detector finds, in any disguise; `detail` names its kind, source and
    disguise, never the text."""
    out = []
    for leak in find_leaks(text, ctx.secrets):
        kind = _LEAK_FINDING.get(leak.secret.kind, "literal_answer")
        if kind == "literal_answer" and leak.how != "literal":
            kind = "disguised_answer"
        out.append({"kind": kind, "detail": f"contains {leak.describe()}", "evidence": leak.evidence})
    return out


def _specific_findings(text: str, allowed: Allowed) -> list[dict[str, str]]:
    """The allow-list: every specific the task does not give, and answer-side values, as findings
    whose detail says what kind of specific it is without quoting it."""
    return [{"kind": _SPECIFIC_FINDING[s.kind], "detail": s.why, "evidence": s.text}
            for s in specifics(text, allowed)]


def _ngram_findings(
    tokens: list[str], n: int, source: dict[tuple[str, ...], str], kind: str, label: str
) -> list[dict[str, str]]:
    """One finding per maximal run of hint words covered by shared n-grams."""
    hits = [i for i, g in enumerate(ngrams(tokens, n)) if g in source]
    out = []
    spans: list[tuple[int, int, str]] = []
    for i in hits:
        if spans and i <= spans[-1][1]:
            spans[-1] = (spans[-1][0], i + n, spans[-1][2])
        else:
            spans.append((i, i + n, source[tuple(tokens[i : i + n])]))
    for start, end, where in spans:
        place = f" ({where})" if where else ""
        out.append(
            {"kind": kind, "detail": f"a run of {end - start} words shared with {label}{place}",
             "evidence": " ".join(tokens[start:end])}
        )
    return out


def _test_findings(text: str, instruction: str) -> list[dict[str, str]]:
    out = []
    for name, pattern in _TEST_PATTERNS:
        m = pattern.search(text)
        # A name the instruction itself uses (a project's own tests/ folder, say) is the task's, not
        # the verifier's.
        if m and not pattern.search(instruction):
            out.append({"kind": "test_reference", "detail": f"names the verifier's {name}", "evidence": m.group(0)})
    return out


def _path_findings(text: str, oracle_paths: list[str]) -> list[dict[str, str]]:
    if not oracle_paths:
        return []
    # A glob (`/app/logs/app.log.*`) names a family of files the instruction describes, not the
    # oracle's own path; it is left out rather than truncated into one.
    in_hint = {_clean_path(m.group(0)) for m in ABS_PATH.finditer(text) if not _GLOB_NEXT.match(text, m.end())}
    return [
        {"kind": "oracle_path", "detail": "names a path that only the oracle script uses", "evidence": p}
        for p in oracle_paths
        if p in in_hint
    ]


# -- what counts as a secret ---------------------------------------------------------------------


def _texts_for_ngrams(obj: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string leaf, plus each list of scalars joined: a sequence of values is a text too."""
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield from _texts_for_ngrams(obj[k], f"{where}.{k}" if where else str(k))
    elif isinstance(obj, list):
        if obj and all(_is_scalar(v) for v in obj):
            yield where, " ".join(_scalar_text(v) for v in obj)
        for i, v in enumerate(obj):
            yield from _texts_for_ngrams(v, f"{where}[{i}]")
    elif isinstance(obj, str):
        yield where, obj


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _scalar_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _clean_path(p: str) -> str:
    p = p.rstrip(".,;:")
    return p.rstrip("/") or "/"


def is_task_path(p: str) -> bool:
    """True for an absolute path that could belong to the task (not an interpreter or device)."""
    if p in _SYSTEM_PATHS or len(p) < 3:
        return False
    return not any(p.startswith(prefix) for prefix in _SYSTEM_PREFIXES)


def _output_paths(task_dir: Path) -> list[str]:
    try:
        meta = json.loads((task_dir / "task.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [str(p) for p in meta.get("output_paths") or []] if isinstance(meta, dict) else []


def _read_text(path: Path, required: bool) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise TermforgeError(f"{path}: missing (every task directory needs it)") from None
        return ""
