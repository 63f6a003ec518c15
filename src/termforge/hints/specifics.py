"""The allow-list for specifics: every specific a hint states must come from what the agent is given.

A hint is read as pieces (words, numbers, single characters) after Unicode normalisation. A plain
English word (hints/data/plain_words.txt, made by bench/make_plain_words.py) needs no justification;
every other piece is a *specific* — a number in any spelling (digits, number words, ordinals), an
identifier, a name, a letter standing alone, a character of another script or an emoji — and must
be justified by the task's public side: the instruction, the agent's files (their names and the
text it will read anyway), the family's method vocabulary, or a short list of tools and formats
(hints/data/tool_words.txt). What is not justified is a leak whatever the encoding, because the
check is what the hint may say, not which disguises are known: base32, leetspeak, Roman numerals,
a spelled-out word or a unit conversion all produce pieces the task never gave.

Three rules close what an allow-list of the public side leaves open:

- **answer values**: a value of the answer key (the answer row's key, a count, a total) named by
  the hint is a leak even when the data shows it, unless the instruction itself states it
  ("the region with the highest revenue is north" names the answer although `north` is in the data);
- **bug identifiers**: identifiers of a planted bug's code (from the answer key) that the
  instruction does not use point at the bug;
- **test cases**: words of the verifier's fixed case lists that only the verifier has.

Spans that quote the instruction (four words or more in its order) are what the agent was told and
are never a leak; `instruction_quotes` gives them so the other detectors skip them too.
"""

from __future__ import annotations

import builtins
import codecs
import io
import keyword
import re
import tokenize
import unicodedata
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator

from termforge.generate.families import family_by_name
from termforge.generate.public_view import PublicTaskView, method_vocabulary, view_of_task_dir

QUOTE_MIN_WORDS = 4
# Numbers anyone may use: "one pass", "two or three inputs", "exit status 0".
FREE_NUMBERS = frozenset({Decimal(0), Decimal(1), Decimal(2), Decimal(3)})
_SPELLED_RUN = 3  # this many single characters in a row spell something out

_INVISIBLE = dict.fromkeys([0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0x180E, 0xFE0E, 0xFE0F, 0x20E3])
_WORD = re.compile(r"[a-z0-9]+")
_CHUNK = re.compile(r"\S+")
_PIECE = re.compile(r"[A-Za-z]+|\d+(?:[.,]\d+)*|[^\sA-Za-z0-9]")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+[.)])\s+", re.M)
_CONTRACTION = re.compile(r"(?<=[A-Za-z])['’](?:s|t|re|ve|ll|d|m)\b", re.I)
_CODE_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINALS = ("zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
             "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth").split()
NUMBER_WORDS: dict[str, int] = {
    **{w: i for i, w in enumerate(_UNITS)}, **{w: 10 * (i + 2) for i, w in enumerate(_TENS)},
    **{w: i for i, w in enumerate(_ORDINALS)}, **{w[:-1] + "ieth": 10 * (i + 2) for i, w in enumerate(_TENS)},
    "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "dozen": 12, "hundredth": 100,
    "thousandth": 1000, "thrice": 3, "triple": 3, "quadruple": 4, "thirds": 3,
}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_PY_BUILTINS = frozenset(dir(builtins))


@lru_cache(maxsize=None)
def _word_list(name: str) -> frozenset[str]:
    text = resources.files("termforge.hints").joinpath("data", name).read_text(encoding="utf-8")
    return frozenset(w.lower() for line in text.splitlines() if not line.startswith("#") for w in line.split())


def plain_words() -> frozenset[str]:
    return _word_list("plain_words.txt")


@lru_cache(maxsize=None)
def tool_words() -> frozenset[str]:
    return _word_list("tool_words.txt") | {w.lower() for w in keyword.kwlist} | {w.lower() for w in _PY_BUILTINS}


def fold(text: str) -> str:
    """NFKC (full-width and circled digits become digits) without invisible characters."""
    return unicodedata.normalize("NFKC", text).translate(_INVISIBLE)


def _stems(word: str) -> Iterator[str]:
    """The word and the forms it may be an inflection of (plural, past, -ing, -ly, British -ise)."""
    yield word
    for suffix, repl in (("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("ing", ""), ("ing", "e"),
                         ("ly", ""), ("er", ""), ("ers", ""), ("ise", "ize"), ("ised", "ized"), ("ising", "izing"),
                         ("isation", "ization"), ("our", "or"), ("'s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            yield word[: len(word) - len(suffix)] + repl


def as_decimal(text: str) -> Decimal | None:
    if len(text) > 40:
        return None  # a digit run this long is an encoding, not a quantity (it is still a specific)
    t = text.replace(",", "") if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", text) else text.replace(",", ".")
    try:
        d = Decimal(t)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def numbers_in(text: str) -> set[Decimal]:
    out = set()
    for m in _NUMBER.finditer(text):
        d = as_decimal(m.group(0))
        if d is not None:
            out.add(d.normalize())
            out.add(abs(d).normalize())
    return out


def _words_of(text: str) -> list[str]:
    return _WORD.findall(fold(text).lower())


# -- what the task gives ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Allowed:
    """What a hint for one task may state, and the answer-side values it may not."""

    words: frozenset[str]
    """Lower-case words and whole tokens the public side uses (instruction, files, method vocabulary)."""
    numbers: frozenset[Decimal]
    chars: frozenset[str]
    """Non-ASCII characters the public side uses."""
    instruction_words: tuple[str, ...]
    answer_phrases: frozenset[tuple[str, ...]]
    answer_numbers: frozenset[Decimal]
    bug_identifiers: frozenset[str]
    test_words: frozenset[str]


def _public_text(view: PublicTaskView, limit: int = 2_000_000) -> str:
    """Everything the agent reads anyway: the instruction, file names, text files, and the printable
    strings of binary files (what `strings` shows)."""
    parts = [view.instruction, "\n".join(view.file_names())]
    size = 0
    for name, data in view.files:
        if size >= limit:
            break
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = "\n".join(m.decode("ascii") for m in re.findall(rb"[\x20-\x7e]{4,}", data))
        parts.append(text[: limit - size])
        size += len(parts[-1])
    return "\n".join(parts)


def _list_lengths(instruction: str) -> set[Decimal]:
    """How many items each list of the instruction has, and all lists of each section together: a
    hint may count them."""
    out, run = set(), 0
    for section in re.split(r"^#+ .*$", instruction, flags=re.M):
        out.add(Decimal(len(_LIST_ITEM.findall(section))))
    for line in instruction.splitlines() + [""]:
        if _LIST_ITEM.match(line):
            run += 1
        elif line.strip() or not run:
            if run:
                out.add(Decimal(run))
            run = 0
    return out


def allowed_for(view: PublicTaskView, hidden: Any, test_sources: Iterable[str] = ()) -> Allowed:
    """The allow-list of one task (from its public view) and its answer-side values (from the answer
    key minus what the instruction states, and the verifier's fixed case lists)."""
    public = fold(_public_text(view))
    method = " ".join(view.vocabulary)
    tokens = set(_WORD.findall(public.lower())) | set(view.vocabulary)
    for chunk in _CHUNK.findall(public + " " + method):
        tokens.add(chunk.strip("`'\".,;:()[]{}<>").lower())
    numbers = numbers_in(public) | numbers_in(method) | _list_lengths(view.instruction)
    numbers |= {Decimal(v) for w, v in NUMBER_WORDS.items() if re.search(rf"\b{w}\b", public, re.I)}
    chars = {c for c in public if ord(c) > 127}
    instruction = fold(view.instruction)
    stated_words = set(_words_of(instruction))
    stated_numbers = numbers_in(instruction)
    headers = _header_names(view)
    visible_numbers = numbers_in(public)
    phrases, answer_numbers = set(), set()
    for piece in _answer_pieces(hidden):
        d = as_decimal(piece)
        if d is not None:
            # A round number the data shows (a UID_MIN of 1000) is more likely a setting than the answer.
            if _significant(d) >= 2 and d.normalize() not in stated_numbers and abs(d) > 2 and not (
                    _round(abs(d)) and d.normalize() in visible_numbers):
                answer_numbers.add(d.normalize())
            continue
        words = tuple(_words_of(piece))
        if not words or len(words) > 3 or all(w in stated_words or w in headers for w in words):
            continue
        if len("".join(words)) < 3 or all(w in view.vocabulary or w.isdigit() for w in words):
            continue
        phrases.add(words)
    bug_idents = {i for i in _bug_identifiers(hidden)
                  if i.lower() not in stated_words and i.lower() not in set(view.vocabulary)}
    test_words = set()
    for source in test_sources:
        for value in _case_list_strings(source):
            test_words |= set(_words_of(value))
    test_words -= tokens
    test_words = {w for w in test_words if len(w) >= 3 and not w.isdigit()}
    return Allowed(words=frozenset(tokens), numbers=frozenset(numbers), chars=frozenset(chars),
                   instruction_words=tuple(_words_of(view.instruction)),
                   answer_phrases=frozenset(phrases), answer_numbers=frozenset(answer_numbers),
                   bug_identifiers=frozenset(bug_idents), test_words=frozenset(test_words))


def _significant(d: Decimal) -> int:
    """Digits that carry information: all of an integer's (50 is two), the significant ones of a fraction."""
    if d == d.to_integral_value():
        return d.adjusted() + 1 if d != 0 else 1
    return len(d.normalize().as_tuple().digits)


def _round(d: Decimal) -> bool:
    """10, 50, 300, 1000: a size of something to try ("fifty random inputs"), not a measured value."""
    n = d.normalize()
    return d >= 10 and d == d.to_integral_value() and len(n.as_tuple().digits) == 1


def _header_names(view: PublicTaskView) -> set[str]:
    """Words of the first line of each CSV/TSV file: column names are structure, not answers."""
    out: set[str] = set()
    for name, text in view.text_files():
        if name.lower().endswith((".csv", ".tsv")) and text:
            out |= set(_words_of(text.splitlines()[0]))
    return out


_SPLIT = re.compile(r"[,\t\n;|:=]")


def _answer_pieces(obj: Any) -> Iterator[str]:
    """Scalar values of the answer key and the delimited pieces of each (a row `north,14,1.5`)."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _answer_pieces(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _answer_pieces(v)
    elif isinstance(obj, bool) or obj is None:
        return
    elif isinstance(obj, (int, float)):
        yield str(obj)
    elif isinstance(obj, str):
        text = obj.strip()
        if re.search(r"[()\[\]{}=;\n]", text):
            return  # code or a document: the n-gram, code-shingle and bug-identifier checks read those
        if len(text.split()) <= 3:
            yield text
        for part in _SPLIT.split(text):
            part = part.strip()
            if part and part != text and len(part.split()) <= 3:
                yield part


def _bug_identifiers(truth: Any) -> set[str]:
    """Identifiers of planted bugs' code (`buggy`/`fixed` snippets) that are not keywords or builtins."""
    out: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            code = [obj[k] for k in ("buggy", "fixed", "bug", "fix") if isinstance(obj.get(k), str)]
            for snippet in code:
                out.update(i for i in _CODE_IDENT.findall(snippet)
                           if len(i) > 1 and not keyword.iskeyword(i) and i not in _PY_BUILTINS
                           and i.lower() not in _SHELL_WORDS)
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk(truth)
    return out


_SHELL_WORDS = frozenset("if then else elif fi for in do done while case esac function local echo printf read "
                         "return exit set shift test true false export".split())


def _case_list_strings(source: str) -> Iterator[str]:
    """String values inside the list and tuple constants of a test module (its fixed cases).

    Read with the tokenizer rather than the AST: the gate runs in worker threads, and CPython
    3.11's AST conversion is not safe to run from two of them at once."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return
    depth, inside = 0, False
    for i, tok in enumerate(tokens):
        if depth == 0:
            # NAME = [ ... ] or NAME = ( ... ) at the top level of the module
            inside = (tok.type == tokenize.OP and tok.string in "[(" and i >= 2 and tokens[i - 1].string == "="
                      and tokens[i - 2].type == tokenize.NAME and tokens[i - 2].start[1] == 0)
        if tok.type == tokenize.OP and tok.string in "[({":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in "])}":
            depth = max(0, depth - 1)
        elif inside and depth and tok.type == tokenize.STRING:
            value = _unquote(tok.string)
            if value and value.strip():
                yield value


def _unquote(literal: str) -> str | None:
    m = re.match(r"(?is)^([rbuf]*)('\'\'|\"\"\"|'|\")(.*)\2$", literal)
    if not m or "f" in m.group(1).lower():
        return None
    body = m.group(3)
    if "r" in m.group(1).lower():
        return body
    try:
        return codecs.decode(body.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return body


# -- reading a hint ------------------------------------------------------------------------------


def instruction_quotes(hint: str, instruction_words: tuple[str, ...], n: int = QUOTE_MIN_WORDS
                       ) -> list[tuple[int, int]]:
    """Character spans of the hint that repeat the instruction, n words or more in its order."""
    grams = {tuple(instruction_words[i:i + n]) for i in range(len(instruction_words) - n + 1)}
    text = fold(hint)
    if len(text) != len(hint):
        return []  # folding changed offsets: no quote is masked rather than a wrong one
    toks = [(m.group(0).lower(), m.start(), m.end()) for m in re.finditer(r"[A-Za-z0-9]+", text)]
    covered = [False] * len(toks)
    for i in range(len(toks) - n + 1):
        if tuple(t for t, _, _ in toks[i:i + n]) in grams:
            for j in range(i, i + n):
                covered[j] = True
    spans: list[tuple[int, int]] = []
    for j, c in enumerate(covered):
        if not c:
            continue
        start, end = toks[j][1], toks[j][2]
        if spans and j > 0 and covered[j - 1]:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return spans


def mask(text: str, spans: list[tuple[int, int]]) -> str:
    """The text with each span blanked out (offsets kept); a bar in the middle keeps the words on
    either side from reading as one run."""
    out = list(text)
    for s, e in spans:
        out[s:e] = " " * (e - s)
        out[(s + e) // 2] = "|"
    return "".join(out)


@dataclass(frozen=True)
class Specific:
    kind: str  # unsupported | answer_value | bug_identifier | test_case
    text: str
    why: str


_RADIX = re.compile(r"^-?0(?:[xX][0-9a-fA-F_]+|[oO][0-7_]+|[bB][01_]+)$")
_CLASS_RANGE = re.compile(r"A-Z|a-z|0-9")  # a regex's character classes name no value


def _number_ok(piece: str, allowed: Allowed) -> bool:
    """A number is justified when the task states it; `2,2` may be a decimal or two numbers."""
    readings = [as_decimal(piece)]
    if "," in piece:
        parts = [as_decimal(x) for x in piece.split(",")]
        if all(x is not None for x in parts):
            return all(_number_ok(x, allowed) for x in piece.split(",")) or _number_ok(piece.replace(",", "."), allowed)
    for d in readings:
        if d is None or d.normalize() in allowed.numbers or d in FREE_NUMBERS or _round(d):
            return True
    return False


def _known(word: str, allowed: Allowed) -> bool:
    return any(s in plain_words() or s in allowed.words or s in tool_words() for s in _stems(word))


def _word_ok(word: str, allowed: Allowed, name: bool = False) -> bool:
    """Whether a word needs no justification. A lower-case word does when English has it: the word
    list, an inflection, a prefix or a compound of two known words, or, for a rarer word, spelling
    that reads as English (letter trigrams of the word list). A name (a capitalised word inside a
    sentence, an all-capitals word) only when the task or the tool list has it, or English has it
    as an ordinary word."""
    low = word.lower()
    if low in allowed.words or low in tool_words():
        return True
    if len(low) == 1:
        return True  # one letter says nothing; runs of them are read as spelling (specifics())
    if _known(low, allowed):
        return True
    for prefix in _PREFIXES:
        if low.startswith(prefix) and len(low) - len(prefix) >= 3 and _known(low[len(prefix):], allowed):
            return True
    if any(_known(low[:i], allowed) and _known(low[i:], allowed) for i in range(3, len(low) - 2)):
        return True
    if name or len(low) < 5:
        return False
    return english_like(low)


_PREFIXES = ("sub", "re", "un", "non", "pre", "multi", "over", "under", "de", "co", "mis", "inter", "out", "self",
             "post", "anti", "semi", "auto", "super", "meta")
ENGLISH_LIKE = -3.0
"""Mean log-probability per letter trigram at or above which an unknown lower-case word reads as
English: about 97% of English words held out from the word list pass, under 1% of base32 strings
and Caesar-shifted words do (measured when the threshold was set)."""


@lru_cache(maxsize=1)
def _trigrams() -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    tri: dict[tuple[str, str], int] = {}
    ctx: dict[str, int] = {}
    for w in sorted(plain_words()):
        for c, x in _grams(w):
            ctx[c] = ctx.get(c, 0) + 1
            tri[(c, x)] = tri.get((c, x), 0) + 1
    return tri, ctx


def _grams(word: str) -> list[tuple[str, str]]:
    w = "^^" + word + "$"
    return [(w[i:i + 2], w[i + 2]) for i in range(len(w) - 2)]


def english_like(word: str) -> bool:
    import math

    tri, ctx = _trigrams()
    grams = _grams(word)
    score = sum(math.log((tri.get(g, 0) + 0.1) / (ctx.get(g[0], 0) + 2.7)) for g in grams) / len(grams)
    return score >= ENGLISH_LIKE


def _number_word_values(words: list[str]) -> Iterator[tuple[int, int, Decimal]]:
    """Runs of number words (`forty two`, `nineteen thousand`) as (start, end, value)."""
    i = 0
    while i < len(words):
        if words[i] not in NUMBER_WORDS:
            i += 1
            continue
        j, total, current = i, 0, 0
        while j < len(words) and (words[j] in NUMBER_WORDS or (words[j] == "and" and j > i and j + 1 < len(words)
                                                                and words[j + 1] in NUMBER_WORDS)):
            w = words[j]
            if w in _SCALES:
                current = max(current, 1) * _SCALES[w]
                if _SCALES[w] >= 1000:
                    total, current = total + current, 0
            elif w != "and":
                current += NUMBER_WORDS[w]
            j += 1
        yield i, j, Decimal(total + current)
        i = j


def specifics(hint: str, allowed: Allowed) -> list[Specific]:
    """Every specific of the hint that the task does not give, and every answer-side value it names."""
    text = mask(fold(hint), instruction_quotes(hint, allowed.instruction_words))
    found: list[Specific] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: str, what: str, why: str) -> None:
        if (kind, what.lower()) not in seen:
            seen.add((kind, what.lower()))
            found.append(Specific(kind, what, why))

    singles: list[str] = []

    def close_run() -> None:
        # Spelling a word out is a way to state it, not a method: whatever it spells, even a word
        # of the data, it is a specific unless the instruction itself spells it so.
        if len(singles) >= _SPELLED_RUN:
            spelled = " ".join(singles).lower()
            if spelled not in " ".join(allowed.instruction_words):
                add("unsupported", " ".join(singles), "spells something out one character at a time")
        singles.clear()

    sentence_start = True
    for m in _CHUNK.finditer(text):
        starts, sentence_start = sentence_start, bool(re.search(r"[.!?:;]['\"”’)]*$", m.group(0)))
        chunk = _CONTRACTION.sub("", m.group(0)).strip("`'\"“”‘’.,;:!?()[]{}<>*_")
        chunk = _CLASS_RANGE.sub(" ", chunk)
        bare = chunk.strip("-")
        if len(bare) == 1 and (bare.isalnum() or ord(bare) > 127):
            singles.append(bare)
        elif chunk:
            close_run()
        if not chunk or chunk.lower() in allowed.words or chunk.lower() in tool_words():
            continue
        if _RADIX.match(chunk):
            # 0x38, 0o70, 0b111000: a number in another base is a number like any other.
            value = int(chunk.replace("_", ""), 0)
            if not _number_ok(str(value), allowed):
                add("unsupported", chunk, "a number the task does not state")
            continue
        for p in _PIECE.finditer(chunk):
            piece = p.group(0)
            if piece[0].isdigit():
                if not _number_ok(piece, allowed):
                    add("unsupported", piece, "a number the task does not state")
            elif piece[0].isascii() and piece[0].isalpha():
                name = (piece.isupper() and len(piece) > 1) or (piece[0].isupper() and not (starts and p.start() == 0))
                if _word_ok(piece, allowed, name=name):
                    continue
                parts = _CAMEL.findall(piece) if not piece.islower() and not piece.isupper() else []
                if len(parts) > 1 and all(_word_ok(x, allowed, name=True) for x in parts):
                    continue
                if piece.lower() in NUMBER_WORDS:
                    continue  # read below, as a number
                add("unsupported", piece, "a word the task does not use and English does not have")
            elif ord(piece[0]) > 127:
                cat = unicodedata.category(piece[0])
                if cat[0] in "PZ" or piece in allowed.chars:
                    continue
                add("unsupported", piece, "a character the task does not use")
    close_run()

    words = _words_of(text)
    for i, j, value in _number_word_values(words):
        if value not in FREE_NUMBERS and value not in allowed.numbers and not _round(value):
            add("unsupported", " ".join(words[i:j]), "a number the task does not state")
    found += _answer_side(text, words, allowed, seen)
    return found


def _answer_side(text: str, words: list[str], allowed: Allowed, seen: set[tuple[str, str]]) -> list[Specific]:
    out: list[Specific] = []
    stems = [w[:-1] if w.endswith("s") and len(w) > 3 else w for w in words]
    for phrase in sorted(allowed.answer_phrases):
        n = len(phrase)
        want = tuple(w[:-1] if w.endswith("s") and len(w) > 3 else w for w in phrase)
        if any(tuple(stems[i:i + n]) == want for i in range(len(stems) - n + 1)):
            out.append(Specific("answer_value", " ".join(phrase), "names a value of the answer key"))
    values = {as_decimal(m.group(0)) for m in _NUMBER.finditer(text)}
    values |= {v for _, _, v in _number_word_values(words)}
    for v in sorted(x for x in values if x is not None):
        for a in allowed.answer_numbers:
            if _same_number(v, a):
                out.append(Specific("answer_value", str(v), "states a number of the answer key"))
                break
    idents = {m.group(0) for m in _CODE_IDENT.finditer(text)}
    named = sorted(i for i in idents if i in allowed.bug_identifiers)
    codey = [i for i in named if not _word_ok(i, _NO_TASK) or "_" in i or any(c.isdigit() for c in i)]
    if codey or len(named) >= 2:
        out.append(Specific("bug_identifier", ", ".join(named), "names identifiers of the planted bugs' code"))
    tests = sorted({w for w in words if w in allowed.test_words})
    # Common words of the cases ("tab", "files") say little alone: three, or an unusual one with another.
    if sum(1 if w in plain_words() else 2 for w in tests) >= 3:
        out.append(Specific("test_case", ", ".join(tests), "restates the verifier's fixed cases"))
    return [s for s in out if (s.kind, s.text.lower()) not in seen]


_NO_TASK = Allowed(frozenset(), frozenset(), frozenset(), (), frozenset(), frozenset(), frozenset(), frozenset())
"""An empty allow-list: whether a word reads as English on its own."""


def _same_number(v: Decimal, answer: Decimal) -> bool:
    """The hint's number is the answer, written as it is or rounded (keeping two or more significant
    digits)."""
    try:
        if v == answer:
            return True
        # Rounded as written: "56.0" is 56.04 to one decimal; "1000" is 1000, not 1364 to thousands.
        exp = v.as_tuple().exponent
        if not isinstance(exp, int) or len(v.as_tuple().digits) < 2 or exp > 0:
            return False
        return answer.quantize(Decimal(1).scaleb(exp)) == v
    except ArithmeticError:
        return False


def public_view(task_dir: str | Path) -> PublicTaskView:
    """The task's public view with its family's method vocabulary (none for a task no family built)."""
    view = view_of_task_dir(task_dir)
    try:
        family = family_by_name(view.family)
    except KeyError:
        return view
    return replace(view, vocabulary=method_vocabulary(" ".join(family.method_texts())))


def read_tests(task_dir: Path) -> list[str]:
    tests = task_dir / "tests"
    return [p.read_text(encoding="utf-8") for p in sorted(tests.glob("*.py"))] if tests.is_dir() else []
