"""What a hint is, structurally: imperative guidance about its own task.

Two checks that do not depend on stock phrases:

- `clean_structure(text)`: a reply is split into sentences; sentences that talk about the writer
  or the exchange (first person, a lead-in ending in a colon, a closing question to the reader)
  are chatter and are removed from the ends, and counted; what remains must contain at least one
  imperative sentence (a base-form verb or a prohibition at its head, possibly after a connective
  or a leading clause), or the reply is a refusal, however it is worded.
- `task_terms` / `mapping_findings`: a hint must be about its task: it must share file names,
  paths or code names with the task, or enough of its distinctive words, and must not name files
  or paths the task does not have. A hint swapped between two tasks fails both ways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_SENTENCE = re.compile(r"(?<=[.!?:])\s+(?=\S)")
_FIRST_PERSON = re.compile(r"(?<![-\w])(?:I|I'm|I've|I'll|I'd)(?![-\w])|\b(?:[Mm]e|[Mm]y|[Mm]yself|[Ll]et's|[Ll]et me)\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
# Connectives and leading clauses that may precede an imperative ("First, run ...", "If it fails, read ...").
_LEADERS = frozenset("first then next finally also always never afterwards instead now again once "
                     "carefully quickly separately meanwhile lastly second third".split())
_CLAUSE_HEAD = frozenset("if when before after once while since because where whenever unless as for "
                         "in on with to from for by at during".split())
# Base-form verbs that open guidance in a terminal: a lexicon of actions, not of phrases.
_VERBS = frozenset("""
add aggregate aim align apply assert assume avoid audit automate back bisect break build bump cache
calculate call capture cast catch change check chmod choose clean clear collect combine compare compile
compute concatenate confirm consider construct convert copy count create cross-check cut debug decode
decide define delete derive describe detect determine diff disassemble discard dissect do double-check
drop dump echo edit emit enable encode ensure enumerate escape estimate evaluate examine exclude execute
expect experiment explore export extend extract feed fetch figure filter find fit fix flag flatten fold
follow format generate get go grep group grow guard handle hash identify ignore implement import impute
include infer inspect install interpret isolate iterate join keep label launch leave limit list load
locate log look loop make map mark match measure merge mind model modify monitor move name normalise
normalize note notice observe obtain open order output parse pass patch pay pick pin pipe plan plot
port predict prefer prepare preserve print probe process profile prove pull put query quote read
rebuild recompute reconcile record recover redirect reduce refactor refine reject remember remove rename
reorder repeat replace replay report reproduce request rerun resolve restore retrace retry return
reuse review rewrite round run sample save scan search see select separate set simulate skip solve
sort spell split start stat step stop store strip study submit subtract sum swap take tally test
think trace track transform translate treat trim truncate try turn undo understand unpack update use
validate verify view walk watch weigh weight work wrap write zero
""".split())
_PROHIBITIONS = re.compile(r"^(?:do not|don't|never|avoid|no need to)\b", re.I)
_ADVICE = re.compile(r"\b(?:is|are|helps?|pays|want|best|worth|useful|wise|safer|easier|key)\s+(?:\w+\s+)?to\s+([a-z-]+)",
                    re.I)
_YOU_MODAL = re.compile(r"\byou(?:'ll| will| should| must| need| can| may| might|'d| would)\b", re.I)


@dataclass
class Structure:
    text: str  # the cleaned hint ("" when nothing usable is left)
    refused: bool
    removed: list[str] = field(default_factory=list)  # chatter sentences taken off the ends
    imperative: int = 0  # imperative sentences kept
    reason: str = ""


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def is_imperative(sentence: str) -> bool:
    s = sentence.strip().lstrip("*_-\"'(`").strip()
    if _PROHIBITIONS.match(s) or _YOU_MODAL.search(s):
        return True
    # Advice in the infinitive ("The key is to compare ...", "It helps to grow ...").
    for m in _ADVICE.finditer(s):
        if m.group(1).lower() in _VERBS:
            return True
    # Each part between semicolons or dashes may carry the order; within one, connectives and a
    # leading clause may come first ("If the status changes, grow ...").
    return any(_part_is_imperative(part) for part in re.split(r";|\s[-–—]\s", s) if part.strip())


def _part_is_imperative(part: str) -> bool:
    clauses = [c.strip() for c in part.split(",") if c.strip()]
    for clause in clauses[:3]:
        words = [w.lower() for w in _WORD.findall(clause)]
        while words and words[0] in _LEADERS:
            words = words[1:]
        if not words:
            continue  # a bare connective ("First,")
        if words[0] in _VERBS:
            return True
        if words and words[0] in ("make", "be") or (len(words) > 1 and words[0] == "please" and words[1] in _VERBS):
            return True
        if not words or words[0] not in _CLAUSE_HEAD:
            break
    return False


def _is_chatter(sentence: str, at_end: bool, terms: "TaskTerms | None" = None) -> bool:
    """Talk about the writer or the exchange rather than the task."""
    if _FIRST_PERSON.search(sentence):
        return True  # a hint speaks to the agent about the task, never about its writer
    imperative = is_imperative(sentence)
    if not imperative and len(_WORD.findall(sentence)) <= 4 and not _ABS.search(sentence):
        return True  # an interjection ("Sure!", "Good luck.")
    if not imperative and terms is not None and not _about_task(sentence, terms):
        return True  # an aside at the edge of the reply that mentions nothing of the task
    if sentence.endswith(":") and len(sentence.split()) <= 20 and not is_imperative(sentence):
        return True  # a lead-in ("Sure thing, this should get you going:")
    if at_end and sentence.endswith(("?", "!")) and not is_imperative(sentence):
        return True  # a closing question or exclamation to the reader
    return False


def clean_structure(text: str, terms: "TaskTerms | None" = None) -> Structure:
    """Chatter off the ends of a reply, counted; a reply without imperative guidance is a refusal.
    With the task's terms, a non-imperative sentence at either end that mentions nothing of the
    task is chatter too."""
    parts = sentences(text)
    removed: list[str] = []
    while parts and _is_chatter(parts[0], at_end=len(parts) == 1, terms=terms):
        removed.append(parts.pop(0))
    while parts and _is_chatter(parts[-1], at_end=True, terms=terms):
        removed.append(parts.pop())
    # First-person sentences inside are chatter too ("I think you'll like this").
    kept = [s for s in parts if not _FIRST_PERSON.search(s)]
    removed += [s for s in parts if s not in kept]
    imperative = sum(1 for s in kept if is_imperative(s))
    if not kept or imperative == 0:
        why = "nothing but talk about the request" if not kept else "no imperative guidance"
        return Structure("", True, removed, imperative, why)
    return Structure(" ".join(kept), False, removed, imperative)


# -- mapping integrity ----------------------------------------------------------------------------

_ABS = re.compile(r"(?<![\w.~:/\\-])/(?:[\w.+@%-]+/?)+")
_FILE_TOKEN = re.compile(r"(?<![\w/.-])[\w-]*[A-Za-z][\w-]*\.(?:[a-z][a-z0-9]{0,4})\b(?![\w-])")
_BACKTICK = re.compile(r"`([^`\n]{2,60})`")
_CONTENT = re.compile(r"[a-z][a-z0-9_]{3,}")
_SCRATCH = ("/tmp/", "/usr/", "/bin/", "/sbin/", "/dev/", "/proc/", "/etc/", "/lib", "/var/tmp/")
_COMMON_FILES = frozenset({"e.g", "i.e", "etc.", "input.txt", "output.txt", "a.out"})
_GENERIC = frozenset("""
about above after again against also always another anything before being below between both cannot
careful carefully check checks close command commands compare correct could count counts data
each either every exactly example expected file files first following format from given have here
into itself just keep least line lines make many match more most must need never next none number
numbers once only order other output outputs over path paths print prints read reads result results
same script should show since small some step steps still such than that their them then there these
they thing things this those through time times under until using value values very what when where
which while will with within without work write writes your you'll yourself python python3 bash shell
task tool tools program programs rule rules code test tests string strings text instruction instructions
left right round listed whose separator separators estimate
noise relative input inputs user users case cases character characters column columns field fields row
rows list number count total sort sorted order error errors true false check need needs does done given
should would could like also well into onto upon both least most more less than then them they their
""".split())


@dataclass(frozen=True)
class TaskTerms:
    names: frozenset[str]  # paths, their basenames, backticked names, fixture and output names
    words: frozenset[str]  # distinctive content words of the instruction
    text: str  # instruction and file listing, lower case (to accept a name the task states in passing)


def task_terms(task_dir: str | Path, instruction: str, output_paths: list[str] | None = None) -> TaskTerms:
    task_dir = Path(task_dir)
    names: set[str] = set()
    listing: list[str] = []
    for p in _ABS.findall(instruction):
        p = p.rstrip(".,;:")
        names.add(p.rstrip("/"))
        base = p.rstrip("/").rsplit("/", 1)[-1]
        if base:
            names.add(base)
    for m in _BACKTICK.findall(instruction):
        names.add(m.strip())
    for f in _FILE_TOKEN.findall(instruction):
        names.add(f)
    for p in output_paths or []:
        names.add(p)
        names.add(p.rsplit("/", 1)[-1])
    env = task_dir / "environment"
    if env.is_dir():
        for p in sorted(env.rglob("*")):
            if p.is_file() and p.name not in (".keep", "Dockerfile", "container.def", "setup.sh"):
                names.add(p.name)
                listing.append(str(p.relative_to(env)))
    words = _content_words(instruction)
    low_names = frozenset(n.lower() for n in names if len(n) >= 3)
    return TaskTerms(low_names, frozenset(words), (instruction + "\n" + "\n".join(listing)).lower())


def _stem(word: str) -> str:
    """A light stem, so "folders" meets "folder" and "fixed" meets "fix"."""
    for suffix in ("ies", "es", "s", "ed", "ing"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _content_words(text: str) -> set[str]:
    return {_stem(w) for w in _CONTENT.findall(text.lower()) if w not in _GENERIC and _stem(w) not in _GENERIC}


def _about_task(sentence: str, terms: TaskTerms) -> bool:
    if any(n in terms.names or n in terms.text for n in _hint_names(sentence)):
        return True
    return bool(_content_words(sentence) & terms.words)


def _hint_names(hint: str) -> set[str]:
    found = {p.rstrip(".,;:").rstrip("/") for p in _ABS.findall(hint)}
    found |= set(_FILE_TOKEN.findall(hint))
    found |= {m.strip() for m in _BACKTICK.findall(hint) if m.startswith("/") or _FILE_TOKEN.fullmatch(m.strip())}
    return {n.lower() for n in found if len(n) >= 3}


_QUOTED = re.compile(r'"([^"\n]{3,200})"|“([^”\n]{3,200})”')
_LABEL_ID = re.compile(r"(?<![\w-])(q\d{1,2})(?![\w-])", re.I)
_COLOUR = re.compile(r"#[0-9a-fA-F]{6}\b")


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[`*]", "", text).lower().split())


def variant_findings(hint: str, terms: TaskTerms) -> list[str]:
    """What a hint says about a variant this task is not: phrases it quotes from an instruction
    (three words or more) that this task's text lacks, question labels (q1, q2 ...) and colour codes
    the task does not have. A hint moved between two variants of one family fails here when the
    variants differ."""
    text = _plain(terms.text)
    out = []
    for m in _QUOTED.finditer(hint):
        quote = _plain(m.group(1) or m.group(2))
        if len(quote.split()) >= 3 and quote not in text:
            out.append("quotes a phrase the task does not have")
    labels = {m.group(1).lower() for m in _LABEL_ID.finditer(hint)}
    if any(not re.search(rf"(?<![\w-]){lab}(?![\w-])", text) for lab in labels):
        out.append("names a question the task does not have")
    if any(c.lower() not in text for c in _COLOUR.findall(hint)):
        out.append("names a colour the task does not have")
    return out


def mapping_findings(hint: str, terms: TaskTerms, min_words: int = 3, quotes_task: bool = False
                     ) -> list[dict[str, str]]:
    """Is this hint about this task? Findings of kind `off_task` (details never quote the hint).
    `quotes_task`: the hint quotes the task's instruction, which ties it to its task by itself."""
    names = _hint_names(hint)
    # Only absolute paths can be foreign: a bare file name may be a scratch file the hint suggests.
    foreign = sorted(
        n for n in names
        if n.startswith("/") and not n.startswith(_SCRATCH) and n not in _COMMON_FILES and n not in terms.names
        and n not in terms.text and n.rsplit("/", 1)[-1] not in terms.text
    )
    shared_names = sorted(n for n in names if n in terms.names or n in terms.text)
    shared_words = _content_words(hint) & terms.words
    out = []
    if foreign:
        out.append({"kind": "off_task", "detail": f"names {len(foreign)} file(s) or path(s) the task does not have",
                    "evidence": ", ".join(foreign[:5])})
    for detail in dict.fromkeys(variant_findings(hint, terms)):
        out.append({"kind": "off_task", "detail": detail, "evidence": ""})
    if not shared_names and len(shared_words) < min_words and not quotes_task:
        out.append({"kind": "off_task",
                    "detail": f"shares no file name or path and {len(shared_words)} distinctive word(s) with its task",
                    "evidence": ", ".join(sorted(shared_words))})
    return out
