"""Procedural hints true to their variant: a family's method note is written for the whole family,
so each of its sentences is kept only when what it claims about the task holds for this task.

A claim is a feature a sentence mentions (quoted CSV fields, currency symbols, repeated records, a
refunds file, a file or column name); its evidence is read from the task's public view: the
instruction, the agent's files and their names (never the answer key, the oracle or the tests). Sentences that state how the task was generated (a hidden
mechanism such as the binary's XOR key stream, a hidden parameter such as a curved relationship,
decoys planted by the generator) are dropped unless the instruction states the same thing.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from termforge.generate.public_view import PublicTaskView

_DATA_SUFFIXES = (".csv", ".tsv", ".txt", ".log", ".json", ".jsonl", ".sql", ".policy", ".conf")


@dataclass
class TaskFacts:
    instruction: str  # lower case
    data: str  # the text of the environment's data files (not its scripts)
    setup: str  # the scripts and programs among the agent's files
    names: list[str]  # every file path under environment/fixtures
    tables: list[list[list[str]]]  # parsed CSV/TSV fixtures

    @classmethod
    def of(cls, view: PublicTaskView) -> "TaskFacts":
        """The evidence a claim is checked against: what the agent is given, nothing more."""
        data, setup, tables = [], [], []
        names = [f"fixtures/{name}" for name in view.file_names()]
        for name, text in view.text_files():
            suffix = Path(name).suffix.lower()
            if suffix in _DATA_SUFFIXES:
                data.append(text)
                if suffix in (".csv", ".tsv"):
                    delim = "\t" if suffix == ".tsv" else ","
                    tables.append(list(csv.reader(io.StringIO(text), delimiter=delim)))
            else:
                setup.append(text)
        return cls(view.instruction.lower(), "\n".join(data), "\n".join(setup), names, tables)

    @property
    def everything(self) -> str:
        return "\n".join([self.instruction, self.data.lower(), self.setup.lower(), "\n".join(self.names).lower()])


def _has_quotes(f: TaskFacts) -> bool:
    if "quot" in f.instruction:
        return True
    return any('"' in "".join(",".join(r) for r in t) or any("," in c or "\n" in c for r in t for c in r)
               for t in f.tables) or '"' in f.data


def _has_currency(f: TaskFacts) -> bool:
    return bool(re.search(r"[$€£]\s?\d", f.data))


def _has_thousands(f: TaskFacts) -> bool:
    return bool(re.search(r"\d,\d{3}(?:\.\d+)?\"", f.data)) or any(
        re.fullmatch(r"[$€£]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", c.strip()) for t in f.tables for r in t for c in r)


def _has_repeats(f: TaskFacts) -> bool:
    for t in f.tables:
        keys = [r[0].strip() for r in t[1:] if r]
        if len(keys) != len(set(keys)):
            return True
    return False


def _has_junk_rows(f: TaskFacts) -> bool:
    for t in f.tables:
        width = len(t[0]) if t else 0
        for r in t[1:]:
            if r and (len(r) != width or r[0].lstrip().startswith("#")):
                return True
    return bool(re.search(r"^\s*#", f.data, re.M)) and bool(f.tables)


def _has_folders(f: TaskFacts) -> bool:
    """The task is about a directory of files, not one file."""
    if re.search(r"folder|director|\btree\b|\bdir\b", f.instruction):
        return True
    return len({n.rsplit("/", 1)[0] for n in f.names if "/" in n.replace("fixtures/", "", 1)}) > 1


def _mentions(word: str) -> Callable[[TaskFacts], bool]:
    return lambda f: word in f.everything


def _stated(pattern: str) -> Callable[[TaskFacts], bool]:
    return lambda f: re.search(pattern, f.instruction) is not None


# (what the sentence claims, how to recognise the claim, the evidence that it holds for this task)
CLAIMS: tuple[tuple[str, re.Pattern[str], Callable[[TaskFacts], bool]], ...] = (
    ("quoted fields", re.compile(r"quoted (?:fields|commas|newlines)|fields (?:contain|hold) quoted|quotes", re.I),
     _has_quotes),
    ("currency symbols", re.compile(r"currency symbol|\$ sign", re.I), _has_currency),
    ("thousands separators", re.compile(r"(?:strip|thousands?) [^.]*separators", re.I), _has_thousands),
    ("repeated records", re.compile(r"repeated (?:orders|readings|rows|records)|newest version|duplicate rows", re.I),
     _has_repeats),
    ("unreadable rows", re.compile(r"notes and unreadable rows|skip notes|unreadable rows", re.I), _has_junk_rows),
    ("refunds", re.compile(r"refund", re.I), _mentions("refund")),
    ("compressed files", re.compile(r"compressed|gzip|\.gz\b|zcat", re.I), _mentions(".gz")),
    ("names starting with a dash", re.compile(r"start with a dash", re.I),
     lambda f: any(re.search(r"(?:^|/)-", n) for n in f.names) or bool(re.search(r"(?:^|[/\s'\"])-\w[^\s]*\.\w", f.setup))),
    ("folders", re.compile(r"\b(?:folders?|directories|subdirector\w*|directory tree)\b", re.I), _has_folders),
    ("globs", re.compile(r"\bglobs?\b", re.I), lambda f: _has_folders(f) or bool(re.search(r"glob|wildcard|\*", f.instruction))),
    ("sample files", re.compile(r"sample files|against the sample", re.I), _mentions("sample")),
    ("a worked example", re.compile(r"worked example", re.I), _stated(r"example")),
    ("'never' questions", re.compile(r"'never' questions|\bnever questions|\bnever\b.{0,20}\bquestions?\b", re.I),
     _stated(r"\bnever\b|\bno \w+ (?:ever|at all)\b")),
    ("rankings", re.compile(r"\brankings?\b|\btop[- ]n\b", re.I),
     _stated(r"largest|highest|most|top \d|smallest|lowest|fewest|rank")),
    ("tie-breaks", re.compile(r"\btie[- ]?breaks?\b", re.I), _stated(r"\bties?\b|tie-?break")),
)

# Statements of how the task was generated: never in a hint unless the instruction says the same.
HIDDEN = (
    ("a hidden mechanism", re.compile(r"\bxor\b|key stream|\.rodata", re.I), _stated(r"\bxor\b")),
    ("a hidden parameter", re.compile(r"not a straight line|curv|squared \(?standardi[sz]ed\)? terms", re.I),
     _stated(r"curv|nonlinear|non-linear")),
    ("planted decoys", re.compile(r"revoked|decoy", re.I), _stated(r"revoked|decoy")),
)

_CODE_NAME = re.compile(r"`([A-Za-z_][\w.-]*)`|\b([\w-]+\.(?:csv|tsv|txt|json|py|sh|awk|md|db|sql|log|conf))\b")


def claims_of(sentence: str) -> list[str]:
    return [name for name, pattern, _ in (*CLAIMS, *HIDDEN) if pattern.search(sentence)]


def check_sentence(sentence: str, facts: TaskFacts) -> list[str]:
    """Why this method sentence does not fit the task (empty when it does)."""
    problems = []
    for name, pattern, holds in CLAIMS:
        if pattern.search(sentence) and not holds(facts):
            problems.append(f"claims {name}, which this task lacks")
    for name, pattern, stated in HIDDEN:
        if pattern.search(sentence) and not stated(facts):
            problems.append(f"states {name}")
    everything = facts.everything
    for m in _CODE_NAME.finditer(sentence):
        name = (m.group(1) or m.group(2)).lower()
        # A code name the task never mentions (a column, a file) belongs to another variant; tool
        # names and syntax (`.schema`, `strings`) are not the task's and are left alone.
        if m.group(2) and name not in everything:
            problems.append("names a file this task does not have")
        elif m.group(1) and "_" in name and name not in everything:
            problems.append("names a field this task does not have")
    return problems


def fit_sentences(sentences: list[str], view: PublicTaskView) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(kept, dropped with reasons): the method sentences that hold for the task `view` shows."""
    facts = TaskFacts.of(view)
    kept, dropped = [], []
    for s in sentences:
        problems = check_sentence(s, facts)
        if not problems:
            kept.append(s)
            continue
        trimmed = _trim(s, facts)
        if trimmed:
            kept.append(trimmed)
        dropped.append((s, problems))
    return kept, dropped


def _top_level_split(text: str, seps: tuple[str, ...]) -> list[str]:
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        depth += ch == "("
        depth -= ch == ")"
        sep = next((x for x in seps if depth == 0 and text.startswith(x, i)), None)
        if sep:
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _trim(sentence: str, facts: TaskFacts) -> str | None:
    """The sentence without its parentheticals and list items that do not hold (None when nothing
    useful is left)."""
    body = sentence.rstrip(".")
    body = re.sub(r"\s*\(([^()]*)\)", lambda m: "" if check_sentence(m.group(1), facts) else m.group(0), body)
    if not check_sentence(body, facts):
        return _capital(body) + "."
    lead = ""
    head = re.match(r"^([^:]{3,60}:)\s+(.*)$", body)
    if head and not check_sentence(head.group(1), facts):
        lead, body = head.group(1) + " ", head.group(2)
    clauses = _top_level_split(body, (", then ", "; ", ", "))
    good = [re.sub(r"^(?:and|then|and then)\s+", "", c) for c in clauses if not check_sentence(c, facts)]
    if not good or len(good) == len(clauses):
        return None
    text = ", ".join(good[:-1]) + " and " + good[-1] if len(good) > 1 else good[0]
    out = lead + (text if lead else _capital(text))
    from termforge.hints.shape import is_imperative

    return out + "." if is_imperative(out) else None


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s+(.+)$", re.M)
_LABEL = re.compile(r"^\*\*([^*]{1,30})\*\*\s*[:.-]?\s*")
_SPECIFIC = re.compile(r"`([^`\n/]{1,30})`")
QUOTE_WORDS = 8
MAX_ITEMS = 6


def _words_of(text: str, n: int) -> str:
    words = re.sub(r"[`*]", "", text).split()
    return " ".join(words[:n]).rstrip(",;:.")


def variant_sentence(instruction: str) -> str | None:
    """A sentence only this variant's hint has: the points its instruction lists, each by its label
    and its opening words in quotes (two variants with different questions never share it), or,
    without a list, the specifics the instruction names in backticks. Restating the instruction is
    allowed; the gate checks every quoted phrase against the task (hints/shape.py)."""
    body = instruction.split("## Deliverables")[0]
    items = [m.group(1).strip() for m in _ITEM.finditer(body)]
    if len(items) >= 2:
        parts = []
        for item in items[:MAX_ITEMS]:
            label = _LABEL.match(item)
            text = item[label.end():] if label else item
            quote = _words_of(text, QUOTE_WORDS)
            parts.append(f'{label.group(1)} ("{quote}")' if label else f'"{quote}"')
        more = f" and {len(items) - MAX_ITEMS} more" if len(items) > MAX_ITEMS else ""
        return (f"Work through the {len(items)} points the instruction lists one at a time, each with a check of its "
                f"own: {'; '.join(parts)}{more}.")
    # No list: the first sentence of the request that names a specific (a backticked value that is
    # not a path, or a number), quoted: variants that differ there get different hints.
    text = re.sub(r"^\s*(?:#.*|_From .*_)\s*$", "", body, flags=re.M)
    sentences = [x.strip() for x in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if x.strip()]
    pick = next((x for x in sentences if any("/" not in m.group(1) for m in _SPECIFIC.finditer(x))
                 or re.search(r"\d", x)), sentences[0] if sentences else "")
    quote = _words_of(pick, QUOTE_WORDS + 4)
    if len(quote.split()) >= 4:
        return f'Start from what this variant asks, "{quote}", and keep every step to it.'
    return None

