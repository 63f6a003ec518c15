"""Readings of a text that reveal a value by its meaning rather than its spelling.

termforge.quality.leaks matches secrets in many spellings (formats, encodings, number words in
English); the functions here give it the readings that need meaning: number words in the major
languages, Morse and the NATO alphabet, every Caesar shift and Atbash, the first letters of words,
sentences and lines (acrostics), common digests, dates and times in any common format, regular
expressions and globs, intervals, tolerances and short lists of alternatives, spoken arithmetic, and
pointers into a program (line numbers, "the line that ..."). All pure and deterministic.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import unicodedata
import zlib
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation

# -- number words in the major languages --------------------------------------------------------------

_SCALES = {100, 1000, 10**6, 10**9}
_LEXICONS: dict[str, dict[str, int | str]] = {
    "fr": {"zero": 0, "un": 1, "une": 1, "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "six": 6, "sept": 7,
           "huit": 8, "neuf": 9, "dix": 10, "onze": 11, "douze": 12, "treize": 13, "quatorze": 14, "quinze": 15,
           "seize": 16, "vingt": 20, "vingts": 20, "trente": 30, "quarante": 40, "cinquante": 50, "soixante": 60,
           "quatrevingt": 80, "quatrevingts": 80, "cent": 100, "cents": 100, "mille": 1000, "million": 10**6,
           "millions": 10**6, "milliard": 10**9, "et": "and", "virgule": "point"},
    "de": {"null": 0, "ein": 1, "eins": 1, "eine": 1, "zwei": 2, "drei": 3, "vier": 4, "funf": 5, "sechs": 6,
           "sieben": 7, "acht": 8, "neun": 9, "zehn": 10, "elf": 11, "zwolf": 12, "dreizehn": 13, "vierzehn": 14,
           "funfzehn": 15, "sechzehn": 16, "siebzehn": 17, "achtzehn": 18, "neunzehn": 19, "zwanzig": 20,
           "dreissig": 30, "vierzig": 40, "funfzig": 50, "sechzig": 60, "siebzig": 70, "achtzig": 80, "neunzig": 90,
           "hundert": 100, "tausend": 1000, "million": 10**6, "millionen": 10**6, "und": "and", "komma": "point"},
    "es": {"cero": 0, "uno": 1, "una": 1, "un": 1, "dos": 2, "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6,
           "siete": 7, "ocho": 8, "nueve": 9, "diez": 10, "once": 11, "doce": 12, "trece": 13, "catorce": 14,
           "quince": 15, "dieciseis": 16, "diecisiete": 17, "dieciocho": 18, "diecinueve": 19, "veinte": 20,
           "veinti": 20, "treinta": 30, "cuarenta": 40, "cincuenta": 50, "sesenta": 60, "setenta": 70,
           "ochenta": 80, "noventa": 90, "cien": 100, "ciento": 100, "doscientos": 200, "doscientas": 200,
           "trescientos": 300, "cuatrocientos": 400, "quinientos": 500, "seiscientos": 600, "setecientos": 700,
           "ochocientos": 800, "novecientos": 900, "mil": 1000, "millon": 10**6, "millones": 10**6, "y": "and",
           "coma": "point"},
    "it": {"zero": 0, "uno": 1, "una": 1, "un": 1, "due": 2, "tre": 3, "quattro": 4, "cinque": 5, "sei": 6,
           "sette": 7, "otto": 8, "nove": 9, "dieci": 10, "undici": 11, "dodici": 12, "tredici": 13,
           "quattordici": 14, "quindici": 15, "sedici": 16, "diciassette": 17, "diciotto": 18, "diciannove": 19,
           "venti": 20, "vent": 20, "trenta": 30, "trent": 30, "quaranta": 40, "quarant": 40, "cinquanta": 50,
           "cinquant": 50, "sessanta": 60, "sessant": 60, "settanta": 70, "settant": 70, "ottanta": 80,
           "ottant": 80, "novanta": 90, "novant": 90, "cento": 100, "mille": 1000, "mila": 1000, "milione": 10**6,
           "milioni": 10**6, "e": "and", "virgola": "point"},
    "pt": {"zero": 0, "um": 1, "uma": 1, "dois": 2, "duas": 2, "tres": 3, "quatro": 4, "cinco": 5, "seis": 6,
           "sete": 7, "oito": 8, "nove": 9, "dez": 10, "onze": 11, "doze": 12, "treze": 13, "catorze": 14,
           "quatorze": 14, "quinze": 15, "dezesseis": 16, "dezasseis": 16, "dezessete": 17, "dezassete": 17,
           "dezoito": 18, "dezenove": 19, "dezanove": 19, "vinte": 20, "trinta": 30, "quarenta": 40,
           "cinquenta": 50, "sessenta": 60, "setenta": 70, "oitenta": 80, "noventa": 90, "cem": 100, "cento": 100,
           "duzentos": 200, "duzentas": 200, "trezentos": 300, "quatrocentos": 400, "quinhentos": 500,
           "seiscentos": 600, "setecentos": 700, "oitocentos": 800, "novecentos": 900, "mil": 1000,
           "milhao": 10**6, "milhoes": 10**6, "e": "and", "virgula": "point"},
    "nl": {"nul": 0, "een": 1, "twee": 2, "drie": 3, "vier": 4, "vijf": 5, "zes": 6, "zeven": 7, "acht": 8,
           "negen": 9, "tien": 10, "elf": 11, "twaalf": 12, "dertien": 13, "veertien": 14, "vijftien": 15,
           "zestien": 16, "zeventien": 17, "achttien": 18, "negentien": 19, "twintig": 20, "dertig": 30,
           "veertig": 40, "vijftig": 50, "zestig": 60, "zeventig": 70, "tachtig": 80, "negentig": 90,
           "honderd": 100, "duizend": 1000, "miljoen": 10**6, "en": "and", "komma": "point"},
}
# Words that are everyday words elsewhere ("once", "elf", "sept", "e"): a number only beside others.
_AMBIGUOUS = frozenset("un une uno una um uma een ein eine e y et en und once elf cent sept dos tres mil null nul "
                       "sei tre otto nove due vier acht drie twee tien zes dez cem mille cento vent trent mila "
                       "coma komma".split())
_CJK = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
        "十": 10, "百": 100, "千": 1000, "万": 10**4, "萬": 10**4, "亿": 10**8}
_WORD_RUN = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*(?:\s+[^\W\d_]+(?:-[^\W\d_]+)*)*")


def _fold(text: str) -> str:
    text = text.replace("ß", "ss")
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


_STARTS = frozenset(w[:2] for lex in _LEXICONS.values() for w in lex)


def _segment(token: str) -> list[int | str] | None:
    """A token as number morphemes of one language (fewest pieces), or None."""
    if token[:2] not in _STARTS or len(token) > 80:
        return None
    best: list[int | str] | None = None
    for lex in _LEXICONS.values():
        n = len(token)
        dp: list[list[str] | None] = [None] * (n + 1)
        dp[0] = []
        for i in range(n):
            if dp[i] is None:
                continue
            for j in range(i + 1, n + 1):
                piece = token[i:j]
                if piece in lex and (dp[j] is None or len(dp[j]) > len(dp[i]) + 1):
                    dp[j] = dp[i] + [piece]
        if dp[n] is not None:
            values = [lex[p] for p in dp[n]]
            if best is None or len(values) < len(best):
                best = values
    return best


def _evaluate(values: list[int | str]) -> str | None:
    if "point" in values:
        i = values.index("point")
        whole = _evaluate(values[:i]) if values[:i] else "0"
        frac = [v for v in values[i + 1:] if v != "and"]
        if whole is None or not frac or not all(isinstance(v, int) and v < 10 for v in frac):
            return None
        return whole + "." + "".join(str(v) for v in frac)
    nums = [v for v in values if isinstance(v, int)]
    if not nums:
        return None
    if len(nums) > 1 and all(v < 10 for v in nums) and "and" not in values:
        return "".join(str(v) for v in nums)  # digit by digit ("drei vier eins")
    total = current = 0
    for v in nums:
        if v == 100:
            current = max(current, 1) * 100
        elif v in _SCALES:
            total += max(current, 1) * v
            current = 0
        else:
            current += v
    return str(total + current)


# English number words are read by termforge.quality.leaks (with "and", "point", scales): left alone here.
_ENGLISH = frozenset("""zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred
thousand million millions billion point and a cent cents""".split())


def multilingual_digits(text: str) -> str:
    """Number words of French, German, Spanish, Italian, Portuguese and Dutch, and Chinese or
    Japanese numerals, written as digits ("dreiundzwanzig" -> 23, "quatre-vingt-dix-sept" -> 97,
    "veintitrés" -> 23, "三百四十五" -> 345). Other text is kept as it is (folded to lower case,
    accents off)."""
    text = _fold(text)
    text = re.sub(r"[零〇一二两三四五六七八九十百千万萬亿]+(?:点[零〇一二三四五六七八九]+)?", _cjk, text)
    out, pos = [], 0
    for m in _WORD_RUN.finditer(text):
        words = m.group(0).split()
        english = [w in _ENGLISH or any(p in _ENGLISH for p in w.split("-")) for w in words]
        segs = [None if e else _segment(w.replace("-", "")) for w, e in zip(words, english)]
        changed = True
        while changed:  # a word both languages share ("zero", "six") joins a foreign run it touches
            changed = False
            for k, w in enumerate(words):
                if segs[k] is None and english[k] and ((k and segs[k - 1]) or (k + 1 < len(words) and segs[k + 1])):
                    segs[k] = _segment(w.replace("-", ""))
                    changed = changed or segs[k] is not None
        i, kept = 0, []
        while i < len(words):
            j, values = i, []
            while j < len(words) and segs[j] is not None:
                values += segs[j]
                j += 1
            if j == i:
                kept.append(words[i])
                i += 1
                continue
            while values and values[-1] in ("and", "point"):
                values.pop()  # a trailing "et" belongs to the prose
            lone = j - i == 1 and len(segs[i]) == 1 and words[i].replace("-", "") in _AMBIGUOUS
            value = None if lone or not any(isinstance(v, int) for v in values) else _evaluate(values)
            kept += [value] if value is not None else words[i:j]
            i = j
        out.append(text[pos:m.start()])
        out.append(" ".join(kept))
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _cjk(m: re.Match) -> str:
    s = m.group(0)
    whole, _, frac = s.partition("点")
    if len(whole) > 1 and all(_CJK[c] < 10 for c in whole):
        value = "".join(str(_CJK[c]) for c in whole)
    else:
        total = section = current = 0
        for c in whole:
            v = _CJK[c]
            if v < 10:
                current = v
            elif v < 10**4:
                section += max(current, 1) * v
                current = 0
            else:
                total += (section + current) * v
                section = current = 0
        value = str(total + section + current)
    if frac:
        value += "." + "".join(str(_CJK[c]) for c in frac)
    return f" {value} "


# -- ciphers and positional encodings ------------------------------------------------------------------

_MORSE = {".-": "a", "-...": "b", "-.-.": "c", "-..": "d", ".": "e", "..-.": "f", "--.": "g", "....": "h",
          "..": "i", ".---": "j", "-.-": "k", ".-..": "l", "--": "m", "-.": "n", "---": "o", ".--.": "p",
          "--.-": "q", ".-.": "r", "...": "s", "-": "t", "..-": "u", "...-": "v", ".--": "w", "-..-": "x",
          "-.--": "y", "--..": "z", "-----": "0", ".----": "1", "..---": "2", "...--": "3", "....-": "4",
          ".....": "5", "-....": "6", "--...": "7", "---..": "8", "----.": "9", ".-.-.-": ".", "-....-": "-"}
_MORSE_RUN = re.compile(r"(?:[.\-·•–—_]{1,6}(?:[ \t]+|[ \t]*/[ \t]*|$)){3,}")
_NATO = {"alfa": "a", "alpha": "a", "bravo": "b", "charlie": "c", "delta": "d", "echo": "e", "foxtrot": "f",
         "golf": "g", "hotel": "h", "india": "i", "juliett": "j", "juliet": "j", "kilo": "k", "lima": "l",
         "mike": "m", "november": "n", "oscar": "o", "papa": "p", "quebec": "q", "romeo": "r", "sierra": "s",
         "tango": "t", "uniform": "u", "victor": "v", "whiskey": "w", "whisky": "w", "xray": "x", "x-ray": "x",
         "yankee": "y", "zulu": "z", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
         "six": "6", "seven": "7", "eight": "8", "nine": "9", "niner": "9", "dash": "-", "hyphen": "-"}
_NATO_WORD = re.compile(r"[a-z]+(?:-ray)?")


def morse_decoded(text: str) -> list[str]:
    """Every run of three or more Morse letters, decoded ('/' or a wide gap between words)."""
    out = []
    t = text.replace("·", ".").replace("•", ".").replace("–", "-").replace("—", "-").replace("_", "-")
    for m in _MORSE_RUN.finditer(t):
        run = m.group(0).strip()
        # A sentence's full stop may cling to the last code: read it with and without.
        for body in dict.fromkeys((run, run[:-1] if run.endswith(".") else run)):
            words = re.split(r"\s*/\s*|\s{3,}", body)
            decoded = " ".join("".join(_MORSE.get(code, "?") for code in w.split()) for w in words if w.strip())
            if decoded and decoded.count("?") * 4 <= len(decoded):
                out.append(decoded)
    return out


def nato_decoded(text: str) -> list[str]:
    """Runs of three or more spelling-alphabet words, as the letters and digits they spell."""
    out, run = [], []
    for m in _NATO_WORD.finditer(text.lower()):
        w = m.group(0)
        if w in _NATO:
            run.append(_NATO[w])
            continue
        if len(run) >= 3:
            out.append("".join(run))
        run = []
    if len(run) >= 3:
        out.append("".join(run))
    return out


def shifted(text: str, k: int) -> str:
    return "".join(chr((ord(c) - 97 + k) % 26 + 97) if "a" <= c <= "z" else c for c in text)


def atbash(text: str) -> str:
    return "".join(chr(219 - ord(c)) if "a" <= c <= "z" else c for c in text)


def cipher_variants(secret: str) -> list[tuple[str, str]]:
    """(name, enciphered) for every Caesar shift (ROT13 is read elsewhere) and Atbash of a lower-case
    alphanumeric secret: a text holding one of them holds the secret."""
    out = [(f"caesar{k}", shifted(secret, k)) for k in range(1, 26) if k != 13]
    out.append(("atbash", atbash(secret)))
    return [(n, v) for n, v in out if v != secret]


_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_ALNUM_TOKEN = re.compile(r"[a-z0-9]+")


def initials(text: str) -> dict[str, str]:
    """First characters of every word, sentence and line (lower case): where an acrostic hides."""
    low = unicodedata.normalize("NFKC", text).lower()
    words = "".join(t[0] for t in _ALNUM_TOKEN.findall(low))
    sentences = "".join(m[0][0] for s in _SENTENCE_END.split(low) if (m := _ALNUM_TOKEN.findall(s)))
    lines = "".join(m[0][0] for ln in low.splitlines() if (m := _ALNUM_TOKEN.findall(ln)))
    return {"words": words, "sentences": sentences, "lines": lines}


# -- digests ---------------------------------------------------------------------------------------------

_HEX_DIGEST = re.compile(r"(?<![0-9a-fA-F])(?:[0-9a-fA-F]{128}|[0-9a-fA-F]{96}|[0-9a-fA-F]{64}|[0-9a-fA-F]{56}|"
                         r"[0-9a-fA-F]{40}|[0-9a-fA-F]{32}|[0-9a-fA-F]{8})(?![0-9a-fA-F])")
_ALGOS = ("md5", "sha1", "sha224", "sha256", "sha384", "sha512", "sha3_256", "sha3_512", "blake2b", "blake2s")


def hex_runs(text: str) -> set[str]:
    return {m.group(0).lower() for m in _HEX_DIGEST.finditer(text)}


def digests_of(value: str) -> dict[str, str]:
    """hex digest -> algorithm, for the common hashes of a value as written, in lower and upper
    case, and with a trailing newline (what `echo x | sha256sum` hashes)."""
    out: dict[str, str] = {}
    for form in dict.fromkeys((value, value.lower(), value.upper(), value + "\n", value.strip())):
        data = form.encode()
        for algo in _ALGOS:
            out.setdefault(hashlib.new(algo, data).hexdigest(), algo)
        out.setdefault(format(zlib.crc32(data) & 0xFFFFFFFF, "08x"), "crc32")
    return out


# -- dates and times -------------------------------------------------------------------------------------

_MONTHS = {m: i + 1 for i, ms in enumerate(
    ["jan january janvier januar enero gennaio janeiro", "feb february fevrier februar febrero febbraio fevereiro",
     "mar march mars marz marzo marco", "apr april avril abril aprile", "may mai mayo maggio maio",
     "jun june juin juni junio giugno junho", "jul july juillet juli julio luglio julho",
     "aug august aout agosto", "sep sept september septembre septiembre settembre setembro",
     "oct october octobre oktober octubre ottobre outubro", "nov november novembre noviembre novembro",
     "dec december decembre dezember diciembre dicembre dezembro"]) for m in ms.split()}
_MON = r"(?P<mon>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_TIME = r"(?:[ T,]+(?:at\s+)?(?P<H>\d{1,2})[:h.](?P<M>\d{2})(?:[:.](?P<S>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?)?"
_DATE_PATTERNS = [
    re.compile(r"(?<!\d)(?P<y>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})(?!\d)" + _TIME, re.I),
    re.compile(r"(?<!\d)(?P<y>\d{4})(?P<m>[01]\d)(?P<d>[0-3]\d)(?:T(?P<H>\d{2})(?P<M>\d{2})(?P<S>\d{2})?)?(?!\d)"),
    re.compile(r"(?<!\d)(?P<a>\d{1,2})[-/.](?P<b>\d{1,2})[-/.](?P<y>\d{4}|\d{2})(?!\d)" + _TIME, re.I),
    re.compile(r"(?<![a-z])" + _MON + r"\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})" + _TIME, re.I),
    re.compile(r"(?<!\d)(?P<d>\d{1,2})(?:st|nd|rd|th)?(?:\s+of)?\s+" + _MON + r",?\s+(?P<y>\d{4})" + _TIME, re.I),
    re.compile(r"(?<![a-z])" + _MON + r"\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?" + _TIME, re.I),  # syslog, no year
]
_CLOCK = re.compile(r"(?<![\d:])(?P<H>\d{1,2})[:h](?P<M>\d{2})(?:[:.](?P<S>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?(?![\d:])",
                    re.I)
_ISO_SECRET = re.compile(r"(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?:[T ](?P<H>\d{2}):(?P<M>\d{2})(?::(?P<S>\d{2}))?)?")


def _hour(g: dict) -> int | None:
    if not g.get("H"):
        return None
    h = int(g["H"])
    ampm = (g.get("ampm") or "").lower().replace(".", "")
    if ampm == "pm" and h < 12:
        h += 12
    elif ampm == "am" and h == 12:
        h = 0
    return h


def dates_in(text: str) -> list[tuple[tuple, tuple | None, str]]:
    """((year or None, month, day), (hour, minute, second or None) or None, evidence) for every date
    the text writes in a common format; a day and month that could be read either way (03/04)
    give both readings."""
    out = []
    low = _fold(text)
    for i, pat in enumerate(_DATE_PATTERNS):
        for m in pat.finditer(low):
            g = m.groupdict()
            hms = (_hour(g), int(g["M"]), int(g["S"]) if g.get("S") else None) if g.get("H") else None
            y = int(g["y"]) if g.get("y") else None
            if y is not None and y < 100:
                y += 2000
            if "mon" in g and g.get("mon"):
                days = [(y, _MONTHS[g["mon"].lower().rstrip(".")], int(g["d"]))]
            elif "a" in g and g.get("a"):
                a, b = int(g["a"]), int(g["b"])
                days = [(y, b, a), (y, a, b)]  # day first (most of the world), month first (US)
            else:
                days = [(y, int(g["m"]), int(g["d"]))]
            for d in days:
                if 1 <= d[1] <= 12 and 1 <= d[2] <= 31:
                    out.append((d, hms, m.group(0).strip()))
    return out


def clocks_in(text: str) -> list[tuple[tuple, str]]:
    return [((_hour(m.groupdict()), int(m.group("M")), int(m.group("S")) if m.group("S") else None), m.group(0))
            for m in _CLOCK.finditer(text) if int(m.group("H")) < 24 and int(m.group("M")) < 60]


def secret_datetime(text: str) -> tuple[tuple, tuple | None] | None:
    """The date (and time) a secret states: ISO text, or seconds since the epoch (2001-2033)."""
    m = _ISO_SECRET.fullmatch(text.strip())
    if m:
        g = m.groupdict()
        hms = (int(g["H"]), int(g["M"]), int(g["S"]) if g["S"] else None) if g["H"] else None
        return (int(g["y"]), int(g["m"]), int(g["d"])), hms
    if re.fullmatch(r"1[0-9]{9}", text.strip()):
        t = datetime.fromtimestamp(int(text), tz=timezone.utc)
        return (t.year, t.month, t.day), (t.hour, t.minute, t.second)
    return None


def same_day(a: tuple, b: tuple) -> bool:
    return a[1:] == b[1:] and (a[0] is None or b[0] is None or a[0] == b[0])


def same_time(a: tuple | None, b: tuple | None) -> bool:
    return a is not None and b is not None and a[:2] == b[:2] and (a[2] is None or b[2] is None or a[2] == b[2])


def valid_date(d: tuple) -> bool:
    try:
        date(d[0] or 2000, d[1], d[2])
        return True
    except ValueError:
        return False


# -- regular expressions and globs ---------------------------------------------------------------------

_PATTERN_SPANS = re.compile(r"`([^`\n]{3,120})`|(?<![\w/])/(\^[^/\s]{3,80}\$?)/|(?<![\w])([\w.^$\-\[\]{}()*+?|\\/%~]{4,80})")
_META = re.compile(r"[\^$*+?\[\]{}()|\\]|\.\*|\.\+")
_GLOB_META = re.compile(r"[*?\[]")


def patterns_in(text: str) -> list[str]:
    """Spans that look like a regular expression or a glob (they hold a metacharacter)."""
    out = []
    for m in _PATTERN_SPANS.finditer(text):
        s = next(g for g in m.groups() if g)
        if _META.search(s) or _GLOB_META.search(s):
            out.append(s)
    return out


def _literal_chars(pattern: str) -> int:
    """Characters a pattern pins down: alphanumerics outside classes, escapes and quantifiers."""
    s = re.sub(r"\[[^\]]*\]", "", pattern)
    s = re.sub(r"\\[dDwWsSbB]", "", s)
    s = re.sub(r"\{\d+(?:,\d*)?\}", "", s)
    return len(re.findall(r"[A-Za-z0-9]", s))


def pattern_pins(pattern: str, secret: str) -> bool:
    """True when the regex or glob matches the secret and spells most of it out: a pattern that
    matches only the answer is the answer."""
    core = secret.strip()
    alnum = len(re.findall(r"[A-Za-z0-9]", core))
    if alnum < 5 or len(pattern) > 120:
        return False
    need = max(4, int(0.6 * alnum + 0.999))
    if _literal_chars(pattern) < need:
        return False
    if fnmatch.fnmatchcase(core, pattern) or fnmatch.fnmatchcase(core.lower(), pattern.lower()):
        return True
    body = pattern.strip("^$")
    try:
        rx = re.compile(body, re.I)
    except (re.error, RecursionError, OverflowError):
        return False
    return rx.fullmatch(core) is not None or (pattern.startswith("^") and rx.match(core) is not None
                                              and _literal_chars(pattern) >= alnum - 2)


# -- narrowing: intervals, tolerances, alternatives --------------------------------------------------------

_N = r"(-?\d+(?:\.\d+)?)"
_INTERVALS = [
    re.compile(r"between\s+" + _N + r"\s*(?:and|&)\s*" + _N, re.I),
    re.compile(r"from\s+" + _N + r"\s*(?:to|through|until|-|–)\s*" + _N, re.I),
    re.compile(r"(?<![\w.])" + _N + r"\s*(?:-|–|—|to|\.\.\.?)\s*" + _N + r"(?![\w.])", re.I),
    re.compile(r"[\[(]\s*" + _N + r"\s*[,;]\s*" + _N + r"\s*[\])]"),
]
_TOLERANCES = [
    re.compile(_N + r"\s*(?:±|\+/-|\+-|plus or minus|give or take)\s*" + _N + r"(\s*%)?", re.I),
    re.compile(r"within\s+" + _N + r"(\s*%)?\s+of\s+" + _N, re.I),
]
_ALTERNATIVES = re.compile(r"(?:either\s+|one of\s+)?" + _N + r"(?:\s*(?:,|or|/)\s*" + _N + r"){1,2}"
                           r"(?:\s*,?\s*or\s+" + _N + r")?", re.I)
_ALT_CUE = re.compile(r"\beither\b|\bone of\b|\bor\b", re.I)


def _dec(s: str) -> Decimal | None:
    try:
        return Decimal(s)
    except (InvalidOperation, TypeError):
        return None


def intervals_in(text: str) -> list[tuple[Decimal, Decimal, str]]:
    """(low, high, evidence) for every range or tolerance the text states."""
    out = []
    for pat in _INTERVALS:
        for m in pat.finditer(text):
            a, b = _dec(m.group(1)), _dec(m.group(2))
            if a is not None and b is not None and a < b:
                out.append((a, b, m.group(0)))
    for m in _TOLERANCES[0].finditer(text):
        x, d = _dec(m.group(1)), _dec(m.group(2))
        if x is not None and d is not None:
            d = abs(x) * d / 100 if m.group(3) else d
            out.append((x - d, x + d, m.group(0)))
    for m in _TOLERANCES[1].finditer(text):
        d, x = _dec(m.group(1)), _dec(m.group(3))
        if x is not None and d is not None:
            d = abs(x) * d / 100 if m.group(2) else d
            out.append((x - d, x + d, m.group(0)))
    return out


def alternatives_in(text: str) -> list[tuple[list[Decimal], str]]:
    """Short lists of numbers offered as alternatives ("either 56 or 57", "one of 12, 13 or 14")."""
    out = []
    for m in _ALTERNATIVES.finditer(text):
        if not _ALT_CUE.search(m.group(0)):
            continue
        values = [_dec(g) for g in m.groups() if g]
        values = [v for v in values if v is not None]
        if 2 <= len(values) <= 3:
            out.append((values, m.group(0)))
    return out


def narrows(lo: Decimal, hi: Decimal, x: Decimal) -> bool:
    """A range pins x down: it holds x and at most three whole numbers (counts), or is within 5%
    of |x| wide (measurements)."""
    if not lo <= x <= hi:
        return False
    width = hi - lo
    if x == x.to_integral_value() and lo == lo.to_integral_value() and hi == hi.to_integral_value() and abs(x) < 100:
        return width <= 2
    return width <= max(abs(x) * Decimal("0.05"), Decimal("0.000001"))


def near_alternative(v: Decimal, x: Decimal) -> bool:
    """One offered alternative stands for x: equal, or within 2% of it (a rounded value)."""
    if v == x:
        return True
    return x != 0 and abs(v - x) <= abs(x) * Decimal("0.02") and abs(v - x) <= Decimal(5).scaleb(v.as_tuple().exponent)


# -- spoken arithmetic -------------------------------------------------------------------------------------

_ARITH_PHRASES = [
    (re.compile(r"\b(?:double|twice)\s+(?:of\s+)?" + _N, re.I), lambda a: a * 2),
    (re.compile(_N + r"\s+doubled\b", re.I), lambda a: a * 2),
    (re.compile(r"\b(?:triple|three times)\s+" + _N, re.I), lambda a: a * 3),
    (re.compile(r"\bhalf\s+(?:of\s+)?" + _N, re.I), lambda a: a / 2),
    (re.compile(_N + r"\s+halved\b", re.I), lambda a: a / 2),
    (re.compile(_N + r"\s+squared\b", re.I), lambda a: a * a),
]
_ARITH_PAIRS = [
    (re.compile(r"\badd\s+" + _N + r"\s+to\s+" + _N, re.I), lambda a, b: a + b),
    (re.compile(r"\b(?:subtract|take)\s+" + _N + r"\s+(?:from|away from|off)\s+" + _N, re.I), lambda a, b: b - a),
    (re.compile(r"\b(?:sum|total) of\s+" + _N + r"\s+and\s+" + _N, re.I), lambda a, b: a + b),
    (re.compile(r"\bproduct of\s+" + _N + r"\s+and\s+" + _N, re.I), lambda a, b: a * b),
    (re.compile(r"\bdifference (?:between|of)\s+" + _N + r"\s+and\s+" + _N, re.I), lambda a, b: abs(a - b)),
    (re.compile(r"\bmultiply\s+" + _N + r"\s+by\s+" + _N, re.I), lambda a, b: a * b),
    (re.compile(r"\bdivide\s+" + _N + r"\s+by\s+" + _N, re.I), lambda a, b: a / b if b else None),
    (re.compile(_N + r"\s*(?:%|percent)\s+of\s+" + _N, re.I), lambda a, b: a * b / 100),
    (re.compile(r"\bincrease\s+" + _N + r"\s+by\s+" + _N, re.I), lambda a, b: a + b),
    (re.compile(r"\b(?:decrease|reduce|lower)\s+" + _N + r"\s+by\s+" + _N, re.I), lambda a, b: a - b),
    (re.compile(_N + r"\s+(?:more|greater|higher|larger) than\s+" + _N, re.I), lambda a, b: a + b),
    (re.compile(_N + r"\s+(?:less|fewer|lower|smaller) than\s+" + _N, re.I), lambda a, b: b - a),
]


def spoken_arithmetic(text: str) -> list[tuple[Decimal, str]]:
    """Values the text computes in words ("double 28.02", "subtract 17 from 1000")."""
    out = []
    for pat, fn in _ARITH_PHRASES:
        for m in pat.finditer(text):
            a = _dec(m.group(1))
            if a is not None:
                out.append((fn(a), m.group(0)))
    for pat, fn in _ARITH_PAIRS:
        for m in pat.finditer(text):
            a, b = _dec(m.group(1)), _dec(m.group(2))
            if a is not None and b is not None:
                try:
                    v = fn(a, b)
                except (InvalidOperation, ArithmeticError):
                    v = None
                if v is not None:
                    out.append((v, m.group(0)))
    return out


# -- pointers into a program -------------------------------------------------------------------------------

_ORDINALS = {w: i + 1 for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split())}
_LINE_REFS = [
    re.compile(r"\blines?\s*(?:no\.?|number|#)?\s*(\d{1,4})(?:\s*(?:-|–|to|and)\s*(\d{1,4}))?", re.I),
    re.compile(r"(?<![\w.])(\d{1,4})(?:st|nd|rd|th)\s+line\b", re.I),
    re.compile(r"[\w.-]+\.(?:py|sh|awk|c|js|rb|pl|conf|ini):(\d{1,4})\b"),
    re.compile(r"\bL(\d{1,4})\b"),
]
_ORDINAL_LINE = re.compile(r"\b(" + "|".join(_ORDINALS) + r")\s+line\b", re.I)
POINTER_PHRASE = re.compile(r"\bthe\s+(?:line|statement|condition|comparison|expression|call|assignment|check|"
                            r"test|loop|branch|clause|lambda|sort key|key function)\s+(?:that|which|where|with|"
                            r"in which|whose)\b", re.I)


def line_refs(text: str) -> list[tuple[int, int, str]]:
    """(first, last, evidence) for every line (or range of lines) the text points at."""
    out = []
    for pat in _LINE_REFS:
        for m in pat.finditer(text):
            a = int(m.group(1))
            b = int(m.group(2)) if m.lastindex and m.lastindex >= 2 and m.group(2) else a
            if a <= b:
                out.append((a, b, m.group(0)))
    for m in _ORDINAL_LINE.finditer(text):
        n = _ORDINALS[m.group(1).lower()]
        out.append((n, n, m.group(0)))
    return out


__all__ = ["multilingual_digits", "morse_decoded", "nato_decoded", "cipher_variants", "initials", "hex_runs",
           "digests_of", "dates_in", "clocks_in", "secret_datetime", "same_day", "same_time", "patterns_in",
           "pattern_pins", "intervals_in", "alternatives_in", "narrows", "near_alternative", "spoken_arithmetic",
           "line_refs", "POINTER_PHRASE", "valid_date"]
