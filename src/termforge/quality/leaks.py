"""Leak detection shared by every stage that must keep an answer key away from what an agent sees.

Two halves:

- a **secrets model**: what must be discovered, each secret tagged with the file or step that
  introduced it (`Secret.source`). `task_secrets(task_dir)` reads a task directory: the answer key
  (private/truth.json minus truth["given"]), the verifier's constants and assertion values
  (tests/*.py), and subtracts what the agent is given (instruction.md, truth["given"], and, for
  verifier constants, the environment's files). `SecretSet.from_values` builds one from any
  mapping, so the task generator can check a fixture or a setup script against the secrets of the
  step that wrote them.
- a **normalising matcher**: `find_leaks(text, secrets)`. It reads the text through several views
  (Unicode-normalised with zero-width characters and confusables folded; number words turned into
  digits; ROT13; reversed; every base64 or hex run decoded) and matches secrets inside each view in
  whatever form they take: numbers in any format (separators, trailing zeros, scientific notation,
  units such as kHz or ms, simple arithmetic, a few cheap derived values), strings in any case or
  spacing, letter by letter, or split in two halves. A value too short or too common to mean
  anything alone (`0`, `7`, `NONE`) counts only where it stands as the answer: next to the name of
  its key or after words such as "answer" or "expected".

Pure and deterministic; a `Leak` says which secret (kind, source) leaked and how, and keeps the
matched text apart in `evidence` so reports can be stored without quoting it.
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, Iterator

from termforge.errors import TermforgeError

# Secret kinds, in the order a report lists them.
KINDS = ("answer", "bug_name", "answer_key", "assertion", "pointer")
KIND_WORDS = {
    "answer": "a value from the answer key",
    "bug_name": "the name of a planted bug",
    "answer_key": "a key of the answer key",
    "assertion": "a value the verifier asserts",
    "pointer": "where a planted bug is",
}
# How a secret was found; everything but "literal" is a disguise.
HOW_WORDS = {
    "literal": "written as is",
    "normalised": "with case, spacing, confusable or zero-width characters changed",
    "spaced": "spelled out letter by letter or with its separators changed",
    "split": "split in two parts",
    "number": "as a reformatted number",
    "unit": "as a number in another unit",
    "words": "in number words",
    "arithmetic": "as arithmetic",
    "derived": "as a value derived from it",
    "context": "as a short value where the answer stands",
    "pieces": "as several pieces of one answer line",
    "code": "as code from the fix",
    "rot13": "ROT13-encoded",
    "reversed": "reversed",
    "base64": "base64-encoded",
    "hex": "hex-encoded",
    "cipher": "under a classical cipher (a Caesar shift or Atbash)",
    "morse": "in Morse code",
    "nato": "in the spelling alphabet",
    "acrostic": "as the first letters of words, sentences or lines",
    "digest": "as a digest (a hash of it)",
    "date": "as the same date or time in another format",
    "pattern": "as a pattern (regex or glob) that matches only it",
    "narrowing": "narrowed to a small range or a short list of alternatives",
    "line": "as its line number",
    "function": "by the function that holds it",
    "pointer_phrase": "described as the line that holds it",
}

# Values this common say nothing alone; they leak only in context.
COMMON_WORDS = frozenset(
    {"true", "false", "none", "null", "yes", "no", "ok", "nan", "inf", "-inf", "n/a", "na", "error", "err",
     "allow", "deny", "pass", "fail"}
)
# Everyday English and the words code is written in: a secret that is one of them alone (a field
# of a planted code line such as `section = ""`) says nothing; it leaks only beside another piece.
EVERYDAY_WORDS = frozenset("""
about above access account action active address after again against agent all allow also always amount
and answer any append apply archive area argument args argv array assert attempt audit author auto
available average back backup base batch before begin being below between binary block body bool both
break broken bucket buffer build bytes cache call case category cause change char check child class
clean clear client close code column columns command comment commit common config connect content
context copy correct count counts create current cursor daily data database date day debug decode
default define delete depth detail device dict diff directory disk done down drop each edit else empty
encode end entries entry environment error errors event every example exit expected export false field
fields file files filter final first fix fixed flag float folder format found frame from function
global group hash have head header height help high history home host hour import index info input
insert install integer item items join json just keep kernel key keys kind label last later layer
left length level limit line lines link list load local lock log login logs long loop lower main make
manager map mark master match max mean median memory merge message method middle min minute missing
mode model month name names need network never new next node none normal note null number object
offset old only open option options order orders other output owner page pair parent parse part pass
password patch path pattern peak period point policy pool port position post prefix price print
process product profile program query queue quote random range rate read reader record records region
release remote remove report request reset resolve result results return revenue right root round
row rows rule rules run sample scale scan schema score script search second section select send
separator server service session set settings shape size skip sort sorted source space split stack
start state status step stop store string strip sum summary table tail target task test text then
time timeout title token total trace true type unit unknown update upper user users value values
version view week weight width window word words work write year zone
""".split())
_STRONG_ALNUM = 4  # a string secret with fewer letters/digits than this needs context
_SQUASH_MIN = 5  # shortest secret matched letter by letter
_ENCODED_MIN = 6  # shortest string looked for in ROT13 or reversed text
_SPLIT_MIN = 6  # shortest secret matched in two halves (each >= 3)
_CONTEXT_BEFORE = 8
_CONTEXT_AFTER = 3
_ANSWER_CUES = frozenset({"answer", "answers", "result", "results", "expected", "correct", "solution"})
_PIECE_SPLIT = re.compile(r"[,\t\n;|:=]")
_ZERO_WIDTH = dict.fromkeys([0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0x180E])
_CONFUSABLES = str.maketrans(
    "аеорсхуіјѕԁһԛԝАВЕКМНОРСТХУІЈЅοαειкνρτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcxyijsdhqwABEKMHOPCTXYIJSoaeikvptuxABEZHIKMNOPTYX",
)
_TOKEN = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(
    r"(?<![\w.])[-+−]?(?:\d{1,3}(?:[,_' \u00a0\u202f]\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])"
    r"|(?<![\w.])[-+−]?\.\d+(?:e[-+]?\d+)?(?![\w])"
)
_UNIT = re.compile(r"\s*(khz|mhz|ghz|hz|ms|µs|us|ns|kb|mb|gb|k|%|percent|seconds?|secs?|s|minutes?|mins?|hours?|h)\b")
_UNIT_SCALE = {
    "khz": 1e3, "mhz": 1e6, "ghz": 1e9, "hz": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9, "k": 1e3,
    "kb": 1e3, "mb": 1e6, "gb": 1e9, "%": 1e-2, "percent": 1e-2, "s": 1.0, "sec": 1.0, "secs": 1.0,
    "second": 1.0, "seconds": 1.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0,
    "hour": 3600.0, "hours": 3600.0,
}
_ARITH = re.compile(
    r"(?<![\w.])\(?\s*-?\d+(?:\.\d+)?(?:\s*(?:\*\*|[-+*/x×^·])\s*\(?\s*-?\d+(?:\.\d+)?\s*\)?)+"
)
_HEX_INT = re.compile(r"(?<![\w])0x([0-9a-f]{2,12})(?![\w])")
_B64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{6,}={0,2}(?![A-Za-z0-9+/=])")
_HEX_RUN = re.compile(r"(?<![0-9a-fA-Fx])(?:0x)?((?:[0-9a-fA-F]{2}){3,})(?![0-9a-fA-F])")
_HEX_BYTES = re.compile(r"(?:(?:\\x|0x)?[0-9a-fA-F]{2}[\s:,-]+){2,}(?:\\x|0x)?[0-9a-fA-F]{2}")
_HEX_ESC = re.compile(r"(?:\\x[0-9a-fA-F]{2}){3,}")

_UNITS_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS_WORDS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALE_WORDS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_NUMWORD = re.compile(
    r"\b(?:" + "|".join(sorted([*_UNITS_WORDS, *_TENS_WORDS, *_SCALE_WORDS, "point", "and", "a"], key=len,
                               reverse=True)) + r")\b(?:[\s-]+|$)"
)
_SPOKEN_OPS = ((re.compile(r"\s+(?:times|multiplied by)\s+"), " * "), (re.compile(r"\s+divided by\s+"), " / "),
               (re.compile(r"\s+plus\s+"), " + "), (re.compile(r"\s+minus\s+"), " - "),
               (re.compile(r"\s+(?:to the power of)\s+"), " ^ "))


@dataclass(frozen=True)
class Secret:
    text: str
    kind: str  # one of KINDS
    source: str  # the file or step that introduced it, and where: "private/truth.json:answers.q1"
    context: tuple[str, ...] = ()  # words that name where this value stands (its key's words)
    weak: bool = False  # a piece the agent is shown elsewhere: it leaks only beside another piece of its whole

    @property
    def number(self) -> Decimal | None:
        return _as_decimal(self.text)


@dataclass(frozen=True)
class Leak:
    secret: Secret
    how: str  # a key of HOW_WORDS
    view: str  # the view of the text it was found in ("plain", "base64", ...)
    evidence: str  # the matched text (host-side only: it may be the secret)

    def describe(self) -> str:
        """What leaked, by kind and source, without quoting it."""
        return f"{KIND_WORDS.get(self.secret.kind, self.secret.kind)} ({self.secret.source}), {HOW_WORDS[self.how]}"


@dataclass(frozen=True)
class BugPointer:
    """Where a planted bug sits in the task's files: pointing there gives the finding away."""

    file: str  # the file's name as the agent sees it
    lines: tuple[int, ...]  # 1-based line numbers of the buggy code
    function: str | None  # the function holding it, when the file has several
    tokens: tuple[str, ...]  # identifiers of the buggy line that few other lines use
    source: str

    def secret(self, what: str) -> Secret:
        return Secret(what, "pointer", self.source)


@dataclass
class SecretSet:
    """Secrets minus what is given. `given` is the text the agent sees (instruction and the like):
    a secret it states is no secret, in any format."""

    secrets: list[Secret] = field(default_factory=list)
    given: str = ""
    dropped_given: int = 0
    shown: frozenset[str] = frozenset()
    """Tokens the agent is shown (instruction, environment): two of them side by side are no split secret."""
    code: dict[tuple[str, ...], str] = field(default_factory=dict)
    """Runs of CODE_SHINGLE code tokens of the key's code values (a fix) that nothing given shows."""
    pointers: list[BugPointer] = field(default_factory=list)
    """Planted bugs' places (task_secrets reads them from the truth and the environment)."""
    piece_window: int | None = None
    """Pieces of one answer line leak together only within this many words of each other (None:
    anywhere). A hint is a paragraph; an instruction is long, and names labels and numbers apart."""

    def __post_init__(self) -> None:
        self._given_view = _View.of("plain", self.given) if self.given else None
        # A short value the given text states in words ("one line per colour" for 1) is given too:
        # short values only ever leak in context, and the given text is that context.
        given_words = _View.of("words", self.given) if self.given else None
        kept, seen = [], set()
        for s in self.secrets:
            key = (_norm(s.text), s.kind)
            if key in seen or not _norm(s.text):
                continue
            seen.add(key)
            if self._given_view is not None and (_matches_plain(s, self._given_view) or (
                    _is_short(s) and _matches_plain(s, given_words))):
                self.dropped_given += 1
                continue
            kept.append(s)
        # Longest first: a reported span is not reported again for a piece of it.
        self.secrets = sorted(kept, key=lambda s: (-len(s.text), KINDS.index(s.kind) if s.kind in KINDS else 9,
                                                   s.source, s.text))

    @classmethod
    def from_values(cls, values: Any, source: str, kind: str = "answer", given: str = "") -> "SecretSet":
        """Secrets from any JSON-like value (a mapping, a list, a string): every scalar leaf, pieces
        of delimited strings and numbers inside strings; `source` names the file or step."""
        return cls(list(_secrets_from(values, source, kind)), given=given)

    def merge(self, other: "SecretSet") -> "SecretSet":
        given = "\n".join(t for t in (self.given, other.given) if t)
        return SecretSet([*self.secrets, *other.secrets], given=given, code={**other.code, **self.code},
                         shown=self.shown | other.shown, pointers=[*self.pointers, *other.pointers],
                         piece_window=self.piece_window or other.piece_window)

    def __len__(self) -> int:
        return len(self.secrets)

    def given_numbers(self) -> list[tuple[Decimal, Decimal]]:
        return [(v, t) for v, t, _, _ in self._given_view.numbers] if self._given_view is not None else []


# -- text normalisation and views -------------------------------------------------------------------


def _norm(text: str) -> str:
    """NFKC (full-width digits, ligatures), zero-width and format characters out, confusables
    folded to Latin, lower case, runs of whitespace as one space."""
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    text = text.translate(_CONFUSABLES).replace("−", "-")
    return " ".join(text.lower().split())


def _digits_for_words(text: str) -> str:
    """'sixty-three' -> '63', 'two thousand five hundred' -> '2500', 'fifty six point zero four' ->
    '56.04'; spoken operators to symbols ('seven times nine' -> '7 * 9')."""
    out: list[str] = []
    pos = 0
    for m in re.finditer(r"(?:\b(?:" + "|".join([*_UNITS_WORDS, *_TENS_WORDS, *_SCALE_WORDS, "point", "and", "a"])
                         + r")\b[\s-]*)+", text):
        words = re.findall(r"[a-z]+", m.group(0))
        value = _words_value(words)
        if value is None:
            continue
        out.append(text[pos:m.start()])
        trail = m.group(0)[len(m.group(0).rstrip()):]
        out.append(value + trail)
        pos = m.end()
    out.append(text[pos:])
    text = "".join(out)
    # "2.57 million", "54 thousand": a digit mantissa with a scale word.
    text = re.sub(r"(\d+(?:\.\d+)?)\s+(thousand|million|billion)\b",
                  lambda m: f"{m.group(1)}e{len(str(_SCALE_WORDS[m.group(2)])) - 1}", text)
    for pattern, op in _SPOKEN_OPS:
        text = pattern.sub(op, text)
    return text


def _words_value(words: list[str]) -> str | None:
    while words and words[0] in ("and", "a", "point"):
        words = words[1:]
    while words and words[-1] in ("and", "a", "point"):
        words = words[:-1]
    if not words or not any(w in _UNITS_WORDS or w in _TENS_WORDS for w in words):
        return None
    if "point" in words:
        i = words.index("point")
        whole = _words_value(words[:i]) if words[:i] else "0"
        frac = words[i + 1:]
        if whole is None or not frac or not all(w in _UNITS_WORDS and _UNITS_WORDS[w] < 10 for w in frac):
            return None
        return whole + "." + "".join(str(_UNITS_WORDS[w]) for w in frac)
    # A run of single digits ("five four six") reads digit by digit.
    if len(words) > 1 and all(w in _UNITS_WORDS and _UNITS_WORDS[w] < 10 for w in words):
        return "".join(str(_UNITS_WORDS[w]) for w in words)
    total, current = 0, 0
    for w in words:
        if w in _UNITS_WORDS:
            current += _UNITS_WORDS[w]
        elif w in _TENS_WORDS:
            current += _TENS_WORDS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in _SCALE_WORDS:
            total += max(current, 1) * _SCALE_WORDS[w]
            current = 0
        elif w in ("and", "a"):
            continue
    return str(total + current)


@dataclass
class _View:
    name: str
    text: str  # normalised
    tokens: list[tuple[str, int, int]]  # (token, start, end) over text
    squash: str  # the tokens concatenated
    bounds: frozenset[int]  # offsets in squash where a token starts or ends
    numbers: list[tuple[Decimal, Decimal, str, int]]  # (value, tolerance, evidence, token index)
    flat: str = ""  # the text as given, whitespace runs as one space (to tell literal from disguised)

    @classmethod
    def of(cls, name: str, raw: str, orig: str = "") -> "_View":
        text = _norm(raw)
        if name in ("plain", "words"):
            if name == "words":
                from termforge.quality.disguises import multilingual_digits

                # Number words of the major languages first ("dreiundzwanzig"), then English.
                text = _digits_for_words(" ".join(multilingual_digits(text).split()))
        tokens = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
        squash, bounds, pos = [], {0}, 0
        for tok, _, _ in tokens:
            squash.append(tok)
            pos += len(tok)
            bounds.add(pos)
        numbers = []
        starts = [t[1] for t in tokens]
        for m in _NUMBER.finditer(text):
            value, tol = _parse_number(m.group(0))
            if value is None:
                continue
            idx = _bisect(starts, m.start())
            numbers.append((value, tol, m.group(0), idx))
            if re.match(r"0x[0-9a-f]{2,}", text[m.start():m.start() + 4]):
                continue
            unit = _UNIT.match(text, m.end())
            if unit and unit.group(1) in _UNIT_SCALE and _UNIT_SCALE[unit.group(1)] != 1.0:
                # normalize(): 1E+3, not 1000.0 (whose trailing zeros would read as precision)
                scale = Decimal(repr(_UNIT_SCALE[unit.group(1)])).normalize()
                numbers.append((value * scale, tol * scale, m.group(0) + unit.group(0), -1 - idx))
        for m in _HEX_INT.finditer(text):
            numbers.append((Decimal(int(m.group(1), 16)), Decimal(0), m.group(0), _bisect(starts, m.start())))
        return cls(name, text, tokens, "".join(squash), frozenset(bounds), numbers, " ".join((orig or raw).split()))


def _bisect(starts: list[int], pos: int) -> int:
    lo, hi = 0, len(starts)
    while lo < hi:
        mid = (lo + hi) // 2
        if starts[mid] <= pos:
            lo = mid + 1
        else:
            hi = mid
    return max(lo - 1, 0)


def _views(text: str) -> list[_View]:
    """Every reading of the text a secret could hide in."""
    base = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    views = [_View.of("plain", base, orig=text), _View.of("words", base)]
    views.append(_View.of("rot13", codecs.encode(base, "rot13")))
    views.append(_View.of("reversed", base[::-1]))
    for name, decoded in _decodings(base):
        views.append(_View.of(name, decoded))
    return views


def _decodings(text: str) -> Iterator[tuple[str, str]]:
    seen: set[str] = set()

    def ok(raw: bytes) -> str | None:
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if not s or sum(ch.isprintable() or ch.isspace() for ch in s) < 0.9 * len(s) or s in seen:
            return None
        seen.add(s)
        return s

    for m in _B64.finditer(text):
        tok = m.group(0)
        if tok.isdigit() or tok.isalpha() and tok.islower():
            continue
        for cand in (tok, tok + "=" * (-len(tok) % 4)):
            try:
                s = ok(base64.b64decode(cand, validate=True))
            except (binascii.Error, ValueError):
                continue
            if s:
                yield "base64", s
                break
    for pattern in (_HEX_ESC, _HEX_BYTES):
        for m in pattern.finditer(text):
            digits = re.sub(r"\\x|0x|[\s:,-]", "", m.group(0))
            try:
                s = ok(bytes.fromhex(digits))
            except ValueError:
                continue
            if s:
                yield "hex", s
    for m in _HEX_RUN.finditer(text):
        try:
            s = ok(bytes.fromhex(m.group(1)))
        except ValueError:
            continue
        if s:
            yield "hex", s


# -- numbers ---------------------------------------------------------------------------------------


def _as_decimal(text: str) -> Decimal | None:
    t = text.strip()
    if not re.fullmatch(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?", t):
        return None
    try:
        return Decimal(t)
    except InvalidOperation:
        return None


def _parse_number(token: str) -> tuple[Decimal | None, Decimal]:
    """The value and the rounding half-width of a number as written."""
    t = token.replace("−", "-")
    t = re.sub(r"(?<=\d)[,_' \u00a0\u202f](?=\d{3})", "", t)
    try:
        d = Decimal(t)
    except InvalidOperation:
        return None, Decimal(0)
    return d, _half_ulp(d)


def _half_ulp(d: Decimal) -> Decimal:
    return Decimal(5).scaleb(d.as_tuple().exponent - 1)


def _sig_digits(d: Decimal) -> int:
    digits = "".join(str(x) for x in d.as_tuple().digits).lstrip("0")
    return len(digits.rstrip("0")) or (1 if d == 0 else 0)


def _written_sig(d: Decimal) -> int:
    """Significant digits as written ('56.0' has three, '56' two, '5600' two)."""
    digits = "".join(str(x) for x in d.as_tuple().digits).lstrip("0")
    if d.as_tuple().exponent >= 0:
        digits = digits.rstrip("0")
    return len(digits)


def _near(y: Decimal, ytol: Decimal, x: Decimal, xtol: Decimal) -> bool:
    # A number with four or more significant digits may be truncated rather than rounded (1846 for
    # 1846.62): one unit in its last digit still tells the answer.
    if _written_sig(y) >= 4:
        ytol = ytol * 2
    return abs(y - x) <= max(ytol, xtol) * Decimal("1.000001")


def _derived(x: Decimal) -> list[Decimal]:
    """Cheap values an answer is one step from: ln2/x (a rate from a half-life), x/ln2, 1/x."""
    if x == 0:
        return []
    ln2 = Decimal(math.log(2))
    return [ln2 / x, x / ln2, 1 / x]


def _safe_eval(expr: str) -> Decimal | None:
    expr = expr.replace("×", "*").replace("·", "*").replace("^", "**")
    expr = re.sub(r"(?<=[\d)\s])x(?=[\s\d(])", "*", expr)
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> Decimal:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Decimal(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Div):
                return a / b
            if isinstance(node.op, ast.Pow) and abs(b) <= 64 and b == int(b):
                return a ** int(b)
        raise ValueError("not simple arithmetic")

    try:
        return ev(tree)
    except (ValueError, ArithmeticError, InvalidOperation):
        return None


# -- matching ----------------------------------------------------------------------------------------


def _alnum(text: str) -> str:
    return "".join(_TOKEN.findall(_norm(text)))


def _is_short(secret: Secret) -> bool:
    """Too short or common to mean anything without context."""
    n = secret.number
    if n is not None:
        # Two significant digits under 100 (a count of 16, a gap of 30) turn up in any method text.
        return _sig_digits(n) <= 1 or abs(n) < 100 and _sig_digits(n) <= 2
    low = _norm(secret.text)
    if secret.kind == "bug_name" and re.fullmatch(r"[a-z]+", low):
        return True  # a one-word bug name ("loop", "ties") is an everyday word until called a bug
    return len(_alnum(low)) < _STRONG_ALNUM or low in COMMON_WORDS or low in EVERYDAY_WORDS


def _literal_re(norm_secret: str) -> re.Pattern[str]:
    head = r"(?<![a-z0-9])" if norm_secret[:1].isalnum() else ""
    tail = r"(?![a-z0-9]|\.\d)" if norm_secret[-1:].isalnum() else ""
    body = r"\s*".join(re.escape(p) for p in norm_secret.split(" ")) if " " in norm_secret else re.escape(norm_secret)
    return re.compile(head + body + tail)


def _matches_plain(secret: Secret, view: _View) -> bool:
    """Is the secret stated in this (given) text, literally or as the same number?"""
    n = secret.number
    if n is not None:
        need = min(3, _sig_digits(n))
        return any(_near(v, tol, n, _half_ulp(n)) and (v == n or _written_sig(v) >= need)
                   for v, tol, _, _ in view.numbers)
    return _literal_re(_norm(secret.text)).search(view.text) is not None


# What joins the fields of one compound token: between digit groups (a timestamp 10:00:02, a date
# 2024-05-01, an address 10.0.0.2, a version 1.2.3, a ratio 1/2), or an identifier's underscore
# (req_0002). A number inside one is a field of a value the text holds for its own sake, not a
# statement of that number; `auth:2` or `auth-2` (a label, then the number) still states it.
_DIGIT_JOINERS = frozenset(":-/.")
_NAME_JOINERS = frozenset("_")


def _embedded_number(view: _View, token_index: int) -> bool:
    """Is the number at `token_index` a field of a compound token? Then the text does not state it
    as a number: a short answer (a count of 2) is not leaked by the seconds of a timestamp."""
    if token_index < 0 or token_index >= len(view.tokens):
        return False
    tok, start, end = view.tokens[token_index]
    if not tok.isdigit():
        return False
    text = view.text

    def joined(joiner: str, other: str) -> bool:
        return (joiner in _DIGIT_JOINERS and other.isdigit()) or (joiner in _NAME_JOINERS and other.isalnum())

    before = joined(text[start - 1], text[start - 2]) if start >= 2 else False
    after = joined(text[end], text[end + 1]) if end + 1 < len(text) else False
    return before or after


def _in_context(secret: Secret, view: _View, token_index: int) -> bool:
    if token_index < 0:
        token_index = -1 - token_index
    before = [t for t, _, _ in view.tokens[max(0, token_index - _CONTEXT_BEFORE):token_index]]
    after = [t for t, _, _ in view.tokens[token_index + 1:token_index + 1 + _CONTEXT_AFTER]]
    near = set(before) | set(after)
    ctx = [c for c in secret.context if c]
    if ctx and any(c in near for c in ctx):
        return True
    return any(t in _ANSWER_CUES for t in before[-4:])


def _string_leaks(secret: Secret, view: _View, spans: list[tuple[str, int, int]],
                  shown: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    ns = _norm(secret.text)
    short = _is_short(secret)
    disguised_view = view.name not in ("plain", "words")
    if short and disguised_view:
        return None
    if view.name in ("rot13", "reversed") and len(_alnum(ns)) < _ENCODED_MIN:
        return None  # short words read backwards or rotated are often other words ("file"/"elif")
    for m in _literal_re(ns).finditer(view.text):
        if any(v == view.name and a <= m.start() and m.end() <= b for v, a, b in spans):
            continue
        if short:
            idx = _bisect([t[1] for t in view.tokens], m.start())
            if not _in_context(secret, view, idx):
                continue
        spans.append((view.name, m.start(), m.end()))
        how = "literal" if view.name == "plain" and " ".join(secret.text.split()) in view.flat else "normalised"
        return how, m.group(0)
    if short:
        return None
    sq = _alnum(ns)
    if len(sq) >= _SQUASH_MIN and not (sq.isdigit() and secret.number is not None):
        # One word of a longer secret (`section` of `section = ""`) is that word, not the secret.
        several = len(_TOKEN.findall(ns)) >= 2
        start = view.squash.find(sq)
        while start != -1:
            if start in view.bounds and start + len(sq) in view.bounds and (
                    several or any(b in view.bounds for b in range(start + 1, start + len(sq)))):
                return "spaced", sq
            start = view.squash.find(sq, start + 1)
    if len(sq) >= _SPLIT_MIN:
        toks = [t for t, _, _ in view.tokens]
        where = {t: i for i, t in reversed(list(enumerate(toks)))}
        for i, tok in enumerate(toks):
            if 3 <= len(tok) <= len(sq) - 3 and sq.startswith(tok):
                rest = sq[len(tok):]
                if tok.isdigit() and rest.isdigit() and tok in shown and rest in shown:
                    continue  # two numbers the task shows ("1000 and 60000" in login.defs) are not halves
                j = where.get(rest)
                if j is not None and j > i + 1:
                    return "split", f"{tok} ... {rest}"
    return None


def _number_leaks(secret: Secret, view: _View, spans: list[tuple[str, int, int]],
                  given: SecretSet | None = None) -> tuple[str, str] | None:
    x = secret.number
    assert x is not None
    xtol = _half_ulp(x)
    short = _is_short(secret)
    if view.name not in ("plain", "words"):
        # Encoded views: only numbers that mean something alone (ROT13 leaves digits as they are).
        if short or view.name == "rot13" or _sig_digits(x) < 3:
            return None
    # A verifier holds many numbers (labels, cases): a match to one of them must be more precise.
    need = min(4 if secret.kind == "assertion" else 3, _sig_digits(x))
    for value, tol, evidence, idx in view.numbers:
        if idx < 0 and view.name not in ("plain", "words"):
            continue  # a unit read into reversed or decoded text is noise
        if not _near(value, tol, x, xtol):
            continue
        if idx >= 0 and _written_sig(value) < need and value != x:
            continue
        if short and not _in_context(secret, view, idx):
            continue
        if short and idx >= 0 and _embedded_number(view, idx):
            continue  # a coincident short number: a field of a timestamp, date, id or version
        if view.name == "plain":
            how = "unit" if idx < 0 else ("literal" if evidence == secret.text and secret.text in view.flat else "number")
        else:
            how = view.name
        return how, evidence
    if view.name != "plain" and view.name != "words":
        return None
    given_text = given.given.lower() if given is not None else ""
    for m in _ARITH.finditer(view.text):
        if m.group(0).strip() in given_text:
            continue  # the instruction's own formula
        value = _safe_eval(m.group(0))
        if value is not None and _near(value, Decimal(0), x, xtol) and m.group(0).strip() != secret.text:
            if short and not _in_context(secret, view, _bisect([t[1] for t in view.tokens], m.start())):
                continue
            return "arithmetic", m.group(0).strip()
    if _sig_digits(x) >= 3 and secret.kind == "answer":
        targets = _derived(x)
        shown = given.given_numbers() if given is not None else []
        for value, tol, evidence, idx in view.numbers:
            if _written_sig(value) < 3 or any(_near(value, tol, g, gt) for g, gt in shown):
                continue  # a value the task states is no derived answer
            if any(abs(value - t) <= tol * Decimal("1.000001") for t in targets):
                return "derived", evidence
    return None


def _piece_leaks(views: list[_View], secrets: SecretSet) -> list[Leak]:
    """Two or more pieces of one answer line in the text (an expected row described field by
    field), even when each piece alone says nothing."""
    found: dict[str, list[tuple[Secret, str, int]]] = {}
    for secret in secrets.secrets:
        if not secret.source.endswith(("(part)", "(field)")):
            continue
        group = secret.source.rsplit(" (", 1)[0]
        ns = _norm(secret.text)
        for view in views:
            hit, where = None, -1
            if secret.number is not None:
                x = secret.number
                need = min(3, _sig_digits(x))
                hit, where = next(((e, abs(idx) if idx >= 0 else -1 - idx) for v, tol, e, idx in view.numbers
                                   if _near(v, tol, x, _half_ulp(x)) and (v == x or _written_sig(v) >= need)
                                   and not (_is_short(secret) and _embedded_number(view, idx))),
                                  (None, -1))
            elif len(_alnum(ns)) >= 2:
                m = _literal_re(ns).search(view.text)
                if m:
                    hit, where = m.group(0), _bisect([t[1] for t in view.tokens], m.start())
            if hit:
                found.setdefault(group, []).append((secret, hit, where if view is views[0] else -1))
                break
    out = []
    window = secrets.piece_window
    for group, hits in sorted(found.items()):
        texts = {_norm(s.text) for s, _, _ in hits}
        if len(texts) >= 2 and any(s.weak or _is_short(s) for s, _, _ in hits):
            if window is not None and not any(
                    a[2] >= 0 and b[2] >= 0 and _norm(a[0].text) != _norm(b[0].text) and abs(a[2] - b[2]) <= window
                    for a in hits for b in hits):
                continue  # the pieces are far apart: a label and a number the text names for other reasons
            first = hits[0][0]
            out.append(Leak(Secret(group, first.kind, group, first.context), "pieces", "plain",
                            " / ".join(e for _, e, _ in hits)))
    # The first field of three or more lines of one expected list (the accounts an audit must list).
    lists: dict[str, set[str]] = {}
    for group, hits in found.items():
        m = re.match(r"^(.*)\[(\d+)\]$", group)
        if window is None and m and any(_names_a_row(s) for s, _, _ in hits):
            lists.setdefault(m.group(1), set()).add(m.group(2))
    for parent, lines in sorted(lists.items()):
        if len(lines) >= 3 and not any(leak.secret.source.startswith(parent + "[") for leak in out):
            out.append(Leak(Secret(parent, "answer", parent), "pieces", "plain", f"{len(lines)} lines"))
    return out


def _names_a_row(secret: Secret) -> bool:
    """A piece that can name its row (a user, a region, a package), not a bare number."""
    return secret.number is None and len(_alnum(secret.text)) >= 3


CODE_SHINGLE = 4
_CODE_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|[^\sA-Za-z0-9_]")


def code_shingles(text: str, n: int = CODE_SHINGLE) -> Iterator[tuple[str, ...]]:
    toks = _CODE_TOKEN.findall(unicodedata.normalize("NFKC", text))
    for i in range(len(toks) - n + 1):
        yield tuple(toks[i: i + n])


def _code_secrets(hidden: Any, given_text: str, source: str) -> dict[tuple[str, ...], str]:
    """Shingles of the key's code values (a fixed line, a query) that the given text lacks and that
    hold a name: restating the fix's code, even in part, is a leak."""
    given = set(code_shingles(given_text))
    out: dict[tuple[str, ...], str] = {}
    for where, value in _code_leaves(hidden, ""):
        for sh in code_shingles(value):
            if sh not in given and any(len(t) >= 2 and t[0].isalpha() for t in sh):
                out.setdefault(sh, f"{source}:{where} (code)")
    return out


def _code_leaves(obj: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(obj, dict):
        for i, k in enumerate(sorted(obj, key=str)):
            yield from _code_leaves(obj[k], f"{where}[{i}]")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _code_leaves(v, f"{where}[{i}]")
    elif isinstance(obj, str) and _CODE_LIKE.search(obj) and len(obj) <= 2000:
        yield where or "value", obj


def find_leaks(text: str, secrets: SecretSet, input_data: bool = False) -> list[Leak]:
    """Every secret of `secrets` that `text` reveals in any of the forms above, one Leak per
    secret, in the set's order (longest secret first). input_data=True is for the task's own
    inputs (fixtures, setup scripts): they name the very things an answer line is about (the
    colours a census counts), so there only whole values leak, not the fields or parts of one."""
    if not text or not secrets.secrets:
        return []
    views = _views(text)
    spans: list[tuple[str, int, int]] = []
    out: list[Leak] = []
    if not input_data:
        out += _piece_leaks(views[:2], secrets)
    if secrets.code:
        for sh in code_shingles(text):
            if sh in secrets.code:
                src = secrets.code[sh]
                out.append(Leak(Secret(src, "answer", src), "code", "plain", " ".join(sh)))
                break
    for secret in secrets.secrets:
        if secret.weak or input_data and secret.source.endswith(("(part)", "(field)")):
            continue
        for view in views:
            if secret.number is not None:
                hit = _number_leaks(secret, view, spans, secrets) or (
                    _string_leaks(secret, view, spans, secrets.shown) if len(_alnum(secret.text)) >= _SQUASH_MIN + 1
                    else None
                )
            else:
                hit = _string_leaks(secret, view, spans, secrets.shown)
            if hit:
                how, evidence = hit
                if view.name in ("rot13", "reversed", "base64", "hex"):
                    how = view.name
                out.append(Leak(secret, how, view.name, evidence))
                break
    if len(text) <= MEANING_MAX_CHARS:
        out += _meaning_leaks(text, views, secrets, {id(leak.secret) for leak in out}, input_data)
    return out


# -- meaning: what a text reveals without spelling the value (termforge.quality.disguises) -------------

MEANING_MAX_CHARS = 200_000  # the readings below are for authored text (hints, instructions), not data dumps
_CIPHER_MIN = 6
_ACROSTIC_MIN = {"words": 6, "sentences": 5, "lines": 5}


def _meaning_leaks(text: str, views: list["_View"], secrets: SecretSet, found: set[int],
                   input_data: bool) -> list[Leak]:
    from termforge.quality import disguises as D

    out: list[Leak] = []
    plain = views[0]
    given = secrets.given
    decoded = [("morse", d) for d in D.morse_decoded(text)] + [("nato", d) for d in D.nato_decoded(text)]
    decoded_sq = [(name, "".join(_TOKEN.findall(_norm(d)))) for name, d in decoded]
    heads = D.initials(text)
    hexes = D.hex_runs(text)
    patterns = D.patterns_in(text)
    dates = D.dates_in(text)
    clocks = D.clocks_in(text)
    given_dates = D.dates_in(given) if given else []
    numeric_texts = [v.text for v in views[:2]]
    ranges = [r for t in numeric_texts for r in D.intervals_in(t)]
    alternatives = [a for t in numeric_texts for a in D.alternatives_in(t)]
    spoken = [a for t in numeric_texts for a in D.spoken_arithmetic(t)]
    given_low = given.lower()
    for secret in secrets.secrets:
        if id(secret) in found or secret.weak or input_data and secret.source.endswith(("(part)", "(field)")):
            continue
        if input_data:
            # Data files are full of dates, numbers, words and ranges that the answer is made from:
            # there only a digest of a secret is read as one (a cached hash of the answer).
            if hexes and len(secret.text.strip()) >= 3:
                digests = D.digests_of(secret.text.strip())
                h = next((h for h in hexes if h in digests), None)
                if h:
                    out.append(Leak(secret, "digest", "meaning", f"{digests[h]} {h[:12]}..."))
            continue
        hit = _meaning_hit(secret, plain, decoded_sq, heads, hexes, patterns, dates, clocks, given_dates, ranges,
                           alternatives, spoken, given_low, D)
        if hit:
            out.append(Leak(secret, hit[0], "meaning", hit[1]))
    if not input_data:
        out += _pointer_leaks(text, secrets, D)
    return out


def _meaning_hit(secret: Secret, plain: "_View", decoded_sq, heads, hexes, patterns, dates, clocks, given_dates,
                 ranges, alternatives, spoken, given_low: str, D) -> tuple[str, str] | None:
    ns = _alnum(secret.text)
    short = _is_short(secret)
    when = D.secret_datetime(secret.text)
    if when is not None:
        day, hms = when
        if any(D.same_day(g, day) and (hms is None or D.same_time(gt, hms)) for g, gt, _ in given_dates):
            return None  # the instruction states this date
        for d, t, ev in dates:
            if D.same_day(d, day) and D.valid_date((d[0] or 2000, d[1], d[2])) and (
                    hms is None or D.same_time(t, hms) or any(D.same_time(c, hms) for c, _ in clocks)):
                return "date", ev
    if short:
        return None
    letters = sum(ch.isalpha() for ch in ns)
    if secret.number is None or len(ns) >= _SQUASH_MIN + 1:
        if len(ns) >= _CIPHER_MIN and letters >= 4:
            for name, variant in D.cipher_variants(ns):
                start = plain.squash.find(variant)
                while start != -1:
                    if start in plain.bounds and start + len(variant) in plain.bounds:
                        return "cipher", variant
                    start = plain.squash.find(variant, start + 1)
        if len(ns) >= _SQUASH_MIN:
            for name, sq in decoded_sq:
                if ns in sq:
                    return name, ns
            for where, letters_of in heads.items():
                if len(ns) >= _ACROSTIC_MIN[where] and ns in letters_of:
                    return "acrostic", f"{where}: {ns}"
            for pattern in patterns:
                if D.pattern_pins(pattern, secret.text):
                    return "pattern", pattern
    if hexes and len(secret.text.strip()) >= 3:
        digests = D.digests_of(secret.text.strip())
        for h in hexes:
            if h in digests:
                return "digest", f"{digests[h]} {h[:12]}..."
    x = secret.number
    if x is not None and _sig_digits(x) >= 2:
        for lo, hi, ev in ranges:
            if D.narrows(lo, hi, x) and not (str(lo) in given_low and str(hi) in given_low):
                return "narrowing", ev
        for values, ev in alternatives:
            if any(D.near_alternative(v, x) for v in values) and not all(str(v) in given_low for v in values):
                return "narrowing", ev
        if _sig_digits(x) >= 3:
            for value, ev in spoken:
                if value is not None and _near(value, Decimal(0), x, _half_ulp(x)):
                    return "arithmetic", ev
    return None


def _pointer_leaks(text: str, secrets: SecretSet, D) -> list[Leak]:
    out = []
    given = secrets.given
    refs = D.line_refs(text)
    for bp in secrets.pointers:
        hit = None
        for a, b, ev in refs:
            if b - a <= 3 and any(a <= n <= b for n in bp.lines) and not D.line_refs(given):
                hit = ("line", ev)
                break
        if hit is None and bp.function and re.search(rf"(?<![\w.]){re.escape(bp.function)}(?![\w])", text) and \
                not re.search(rf"(?<![\w.]){re.escape(bp.function)}(?![\w])", given):
            hit = ("function", bp.function)
        if hit is None and bp.tokens:
            for m in D.POINTER_PHRASE.finditer(text):
                window = text[m.end():m.end() + 100]
                named = [t for t in bp.tokens if re.search(rf"(?<![\w]){re.escape(t)}(?![\w])", window)]
                if named:
                    hit = ("pointer_phrase", m.group(0) + " ... " + named[0])
                    break
        if hit:
            out.append(Leak(bp.secret(bp.file), hit[0], "meaning", hit[1]))
    return out


# -- building secrets --------------------------------------------------------------------------------

_BUG_PARENTS = re.compile(r"(?:^|[._])(?:planted_)?(?:bugs?|faults?|defects?|mutations?)$", re.I)
_CODE_CHARS = re.compile(r"[\n()\[\]{}<>\"'`$]")
# Code rather than a delimited record: its pieces are keywords, not values.
_CODE_LIKE = re.compile(r"[\n{}<>\"'`$]|\w\(|==|;\s")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INNER_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")


def _context_words(where: str) -> tuple[str, ...]:
    """The words of the innermost key naming a value ('answers.q1' -> ('q1',),
    'noise_specks' -> ('noise', 'specks'))."""
    keys = [k for k in re.split(r"[.\[\]]+", where) if k and not k.isdigit() and not k.startswith("key ")]
    if not keys:
        return ()
    last = keys[-1].lower()
    words = [w for w in re.split(r"[_\-\s]+", last) if w]
    return tuple(dict.fromkeys([last, *words]))


def _secrets_from(obj: Any, source: str, kind: str, where: str = "") -> Iterator[Secret]:
    if isinstance(obj, dict):
        bug_parent = bool(_BUG_PARENTS.search(where.split("[")[0])) if where else False
        for i, k in enumerate(sorted(obj, key=str)):
            # A key that is itself secret is named by position, so a source never quotes a secret.
            data_key = bug_parent or not _IDENT.match(str(k))
            sub = f"{where}[key {i}]" if data_key else (f"{where}.{k}" if where else str(k))
            if bug_parent:
                yield from _name_secrets(str(k), f"{source}:{sub}", "bug_name")
            elif data_key and len(_alnum(str(k))) >= 2:
                # Data used as keys (a colour, a path, a user name) is part of the answer.
                yield Secret(str(k), "answer_key", f"{source}:{sub}", _context_words(where))
            yield from _secrets_from(obj[k], source, kind, sub)
    elif isinstance(obj, list):
        bug_list = bool(where) and bool(_BUG_PARENTS.search(where))
        for i, v in enumerate(obj):
            if bug_list and isinstance(v, str):
                yield from _name_secrets(v, f"{source}:{where}[{i}]", "bug_name")
            else:
                yield from _secrets_from(v, source, kind, f"{where}[{i}]")
    elif isinstance(obj, bool) or obj is None:
        return
    elif isinstance(obj, (int, float)):
        if isinstance(obj, float) and not math.isfinite(obj):
            return
        yield Secret(repr(obj) if isinstance(obj, float) else str(obj), kind, f"{source}:{where or 'value'}",
                     _context_words(where))
    elif isinstance(obj, str):
        yield from _string_secrets(obj, source, kind, where)


_BUG_CONTEXT = ("bug", "bugs", "broken", "fault", "faulty", "culprit", "defect", "planted", "wrong")


def _name_secrets(name: str, source: str, kind: str) -> Iterator[Secret]:
    words = [w for w in re.split(r"[_\-\s]+", name) if w]
    yield Secret(name, kind, source, _BUG_CONTEXT)
    if len(words) > 1:
        yield Secret(" ".join(words), kind, source, _BUG_CONTEXT)


def _string_secrets(text: str, source: str, kind: str, where: str) -> Iterator[Secret]:
    ctx = _context_words(where)
    loc = f"{source}:{where or 'value'}"
    stripped = text.strip()
    if not stripped:
        return
    if "\n" in stripped or len(stripped) > 120:
        # Long text and code: its lines and the numbers in it; longer runs go to the n-gram check.
        for line in stripped.splitlines():
            line = line.strip()
            if line and len(line) <= 120 and not _CODE_CHARS.search(line):
                yield from _string_secrets(line, source, kind, where)
        return
    yield Secret(stripped, kind, loc, ctx)
    words = stripped.split()
    if 2 <= len(words) <= 4 and all(w[:1].isupper() for w in words if w.isalpha()):
        # A name ("Ada Castillo"): its surname alone points at the answer.
        for w in words:
            if w.isalpha() and len(w) >= 4 and w[:1].isupper():
                yield Secret(w, kind, f"{loc} (name part)", ctx)
    parts = [p.strip() for p in _PIECE_SPLIT.split(stripped)]
    if len(parts) == 1 and len(words) == 2 and not _CODE_LIKE.search(stripped):
        parts = words  # a two-field record ("data/cache.bin 0600", "pkgstat 11.9.1")
        loc_part = f"{loc} (field)"
    else:
        loc_part = f"{loc} (part)"
    if len(parts) > 1 and not _CODE_LIKE.search(stripped):
        for p in parts:
            if len(_alnum(p)) >= 3 or _as_decimal(p) is not None:
                yield Secret(p, kind, loc_part, ctx)
    for m in _INNER_NUMBER.finditer(stripped):
        d = _as_decimal(m.group(0))
        if d is not None and _sig_digits(d) >= 3 and m.group(0) != stripped:
            yield Secret(m.group(0), kind, f"{loc} (part)", ctx)
    if stripped.startswith("/") and "/" in stripped[1:]:
        base = stripped.rstrip("/").rsplit("/", 1)[-1]
        if "." in base and len(base) >= 5:
            yield Secret(base, kind, f"{loc} (file name)", ctx)


def _test_constants(path: Path) -> Iterator[tuple[str, Any]]:
    """Module-level constants and the values assertions compare against, from a verifier file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return

    def literal(node: ast.AST) -> Any:
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None

    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.isupper():
                value = literal(node.value)
                if value is not None:
                    yield name.lower(), value
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            for comp in [node.test.left, *node.test.comparators]:
                value = literal(comp)
                if value is not None and not isinstance(value, bool):
                    yield "assert", value


_FILE_NAME = re.compile(r"^[\w .-]+\.[A-Za-z0-9]{1,5}$")
_LOCALE = re.compile(r"^[A-Za-z]{1,5}(?:_[A-Z]{2})?\.(?:UTF-?8|utf-?8)$")
_SYSTEM_PATH = re.compile(r"^/(?:usr|bin|sbin|lib|dev|proc|etc)\b")


def _strong_assertion(secret: Secret) -> bool:
    """Verifier constants that mean something alone: not its input file names, system paths, code
    headers or small numbers (the answer key covers what is asserted about the answer)."""
    t = secret.text.strip()
    if secret.kind == "answer_key" or _FILE_NAME.match(t) or _SYSTEM_PATH.match(t) or t.startswith(("import ", "from ")):
        return False
    if _LOCALE.match(t) or re.search(r":(?:env|environ)\b", secret.source, re.I):
        return False  # the verifier's process settings, not the task's answer
    n = secret.number
    if n is not None:
        return _sig_digits(n) >= 3
    return len(_alnum(t)) >= 5


def _short_piece(secret: Secret) -> bool:
    if secret.source.endswith("(field)"):
        return True  # a field of a two-field record the environment shows is data, whatever its length
    if not secret.source.endswith("(part)"):
        return False
    n = secret.number
    if n is not None:
        return len(str(abs(n)).replace(".", "").lstrip("0")) <= 4
    return len(secret.text.strip()) <= 8


def task_given_text(task_dir: Path) -> str:
    """What the agent is told: the instruction and truth["given"]."""
    parts = [_read(task_dir / "instruction.md")]
    truth = _truth(task_dir)
    if isinstance(truth, dict) and "given" in truth:
        parts.append(json.dumps(truth["given"], ensure_ascii=False))
    return "\n".join(p for p in parts if p)


def environment_text(task_dir: Path, limit: int = 2_000_000) -> str:
    """The text of the environment's files (what the agent can read for itself), capped."""
    env = task_dir / "environment"
    out, size = [], 0
    if env.is_dir():
        for p in sorted(env.rglob("*")):
            if p.is_file() and size < limit:
                try:
                    t = p.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                out.append(t[: limit - size])
                size += len(out[-1])
    return "\n".join(out)


def task_secrets(task_dir: str | Path) -> SecretSet:
    """The secrets of one task directory, each tagged with its file: the answer key minus what is
    given, and the verifier's constants minus what the instruction or the environment shows."""
    task_dir = Path(task_dir)
    given = task_given_text(task_dir)
    truth = _truth(task_dir)
    hidden = {k: v for k, v in truth.items() if k != "given"} if isinstance(truth, dict) else truth
    answers = SecretSet.from_values(hidden, "private/truth.json", "answer", given=given)
    env = environment_text(task_dir)
    if env:
        # A whole answer stays secret even when the data holds it (choosing it is the discovery);
        # a short piece of one that the environment shows (a region name, a mode such as 0644) is given.
        env_view = _View.of("plain", env)
        answers = SecretSet([Secret(s.text, s.kind, s.source, s.context, weak=True)
                             if _short_piece(s) and _matches_plain(s, env_view) else s for s in answers.secrets],
                            given=given)
    answers.code = _code_secrets(hidden, given + "\n" + env, "private/truth.json")
    answers.shown = frozenset(_TOKEN.findall(_norm(given + "\n" + env)))
    tests_dir = task_dir / "tests"
    verifier: list[Secret] = []
    if tests_dir.is_dir():
        for path in sorted(tests_dir.glob("*.py")):
            for name, value in _test_constants(path):
                verifier += list(_secrets_from(value, f"tests/{path.name}", "assertion", name))
    verifier = [s for s in verifier if _strong_assertion(s)]
    answers.pointers = bug_pointers(task_dir, truth)
    if verifier:
        # Verifier constants the agent can read in its files (fixture names, paths) are not secret.
        known = {_norm(s.text) for s in answers.secrets}
        verifier = [s for s in verifier if _norm(s.text) not in known]
        asserted = SecretSet(verifier, given=given + "\n" + env)
        return SecretSet([*answers.secrets, *asserted.secrets], given=given, code=answers.code, shown=answers.shown,
                         pointers=answers.pointers)
    return answers


PIECE_WINDOW = 12


def against_inputs(values: Any, source: str, declared: str, inputs: str, kind: str = "answer") -> SecretSet:
    """Secrets of `values` for a text the task's author wrote (its instruction): only what the
    agent would see without the answer is subtracted, never the text under scan itself.
    `declared` (paths, parameters the task declares, the signature) is given outright; `inputs`
    (fixtures, the environment) gives whole values, and makes short pieces of an answer weak, as
    task_secrets does."""
    out = SecretSet.from_values(values, source, kind, given=declared)
    # A short value (a count of 2, a flag) is everywhere in a page of instructions, and its key's
    # words are too (the count is of what the task is about): alone it says nothing there; beside
    # another piece of its answer line ("2 red") it does.
    # So is a word of an answer line (a row label such as "macro avg", an "unknown" bucket): the format
    # the instruction fixes; a number of such a line with three or more digits is still the answer.
    out = SecretSet([Secret(s.text, s.kind, s.source, s.context, weak=True)
                     if _is_short(s) or (s.number is None and s.source.endswith(("(part)", "(field)"))) else s
                     for s in out.secrets], given=declared)
    if inputs:
        view = _View.of("plain", inputs)
        kept = []
        for s in out.secrets:
            if not _matches_plain(s, view):
                kept.append(s)
            elif s.source.endswith(("(part)", "(field)")):
                kept.append(Secret(s.text, s.kind, s.source, s.context, weak=True))
            # else: a whole value the inputs hold is data the agent reads, not an answer
        out = SecretSet(kept, given=declared)
        out.shown = frozenset(_TOKEN.findall(_norm(declared + "\n" + inputs)))
    out.piece_window = PIECE_WINDOW
    return out


def output_lines_changed(before: dict[str, bytes], after: dict[str, bytes | None]) -> dict[str, list[str]]:
    """Per output file, the lines of `before` that `after` lacks: what the data decides (a header,
    a key or a unit the format fixes stays the same when the inputs change)."""
    out: dict[str, list[str]] = {}
    for path, data in sorted(before.items()):
        try:
            old = data.decode("utf-8").splitlines()
            new = set((after.get(path) or b"").decode("utf-8", "replace").splitlines())
        except UnicodeDecodeError:
            continue
        changed = [ln.strip() for ln in old if ln.strip() and ln not in new]
        if changed:
            out[path] = changed[:200]
    return out


def stated_outputs(text: str, changed_lines: dict[str, list[str]], inputs: str, unchanged: str = "",
                   declared: str = "") -> list[Leak]:
    """Output values the data decides (output_lines_changed) that `text` states: an expected output
    written into an instruction, verbatim, as an "example", or restated in prose. Whatever the
    inputs hold is given (an output line copied from a log the agent reads is no leak); a piece of
    a line that the outputs on other inputs (`unchanged`) also hold (a row label, a year, a unit)
    is format, and counts only beside another piece of its line. `declared`: what the task declares
    outright (truth.given, its paths), given as in against_inputs."""
    shown = "\n".join(t for t in (inputs, unchanged) if t)
    sets = [against_inputs(lines, f"oracle output {path}", declared, shown)
            for path, lines in sorted(changed_lines.items())]
    if not sets:
        return []
    merged = sets[0]
    for other in sets[1:]:
        merged = merged.merge(other)
    return find_leaks(text, merged)


_KEYWORDS = frozenset("""
def return if elif else for while in not and or is lambda true false none self cls import from as with try
except finally raise pass break continue class yield global print len range str int float list dict set
sorted open read write then do done fi case esac echo local function let declare export printf test
""".split())
_PY_DEF = re.compile(r"^(\s*)def\s+([A-Za-z_]\w*)\s*\(")
_SH_DEF = re.compile(r"^(\s*)(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?")


def _bug_snippets(truth: Any) -> list[tuple[str | None, str, str]]:
    """(file or None, buggy code, where in the truth) of every planted bug the answer key records."""
    out: list[tuple[str | None, str, str]] = []
    if not isinstance(truth, dict):
        return out
    bugs = truth.get("planted_bugs")
    if isinstance(bugs, dict):
        for i, (name, info) in enumerate(sorted(bugs.items())):
            if isinstance(info, dict):
                for key in ("buggy", "wrong", "code"):
                    if isinstance(info.get(key), str) and info[key].strip():
                        out.append((info.get("file"), info[key], f"planted_bugs[key {i}]"))
    for i, item in enumerate(truth.get("faulty_lines") or []):
        if isinstance(item, dict) and isinstance(item.get("wrong"), str) and item["wrong"].strip():
            out.append((item.get("file"), item["wrong"], f"faulty_lines[{i}]"))
    return out


def bug_pointers(task_dir: Path, truth: Any) -> list[BugPointer]:
    """Where each planted bug sits in the environment's files: its line numbers, the function around
    it (when the file has several), and the identifiers of its line few other lines use."""
    env = task_dir / "environment" / "fixtures"
    files: list[tuple[str, list[str]]] = []
    if env.is_dir():
        for p in sorted(env.rglob("*")):
            if p.is_file() and p.stat().st_size < 1_000_000:
                try:
                    files.append((str(p.relative_to(env)), p.read_text(encoding="utf-8").splitlines()))
                except (UnicodeDecodeError, OSError):
                    continue
    out = []
    for file_hint, code, where in _bug_snippets(truth):
        first = code.strip().splitlines()[0].strip()
        if len(first) < 4:
            continue
        for rel, lines in files:
            if file_hint and Path(file_hint).name != Path(rel).name:
                continue
            hits = [i + 1 for i, ln in enumerate(lines) if first in ln]
            if not hits:
                continue
            defs = [(i, m) for i, ln in enumerate(lines) for m in [(_PY_DEF.match(ln) or _SH_DEF.match(ln))] if m]
            function = None
            if len(defs) >= 2:
                before = [m.group(2) for i, m in defs if i < hits[0] - 1]
                function = before[-1] if before else None
            idents = [t for t in re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", first) if t.lower() not in _KEYWORDS]
            rare = tuple(sorted({t for t in idents
                                 if sum(1 for ln in lines if re.search(rf"(?<![\w]){re.escape(t)}(?![\w])", ln)) <= 2}))
            out.append(BugPointer(Path(rel).name, tuple(hits), function, rare,
                                  f"private/truth.json:{where} (in {Path(rel).name})"))
            break
    return out


def _truth(task_dir: Path) -> Any:
    path = task_dir / "private" / "truth.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TermforgeError(f"{path}: not valid JSON ({exc})") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def leak_kinds_summary(leaks: Iterable[Leak]) -> list[str]:
    """One line per kind of information leaked (no text, no source): what a writer may be told."""
    seen: dict[str, set[str]] = {}
    for leak in leaks:
        seen.setdefault(leak.secret.kind, set()).add(HOW_WORDS[leak.how])
    return [f"{KIND_WORDS[k]} ({', '.join(sorted(seen[k]))})" for k in KINDS if k in seen]
