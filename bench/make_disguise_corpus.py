"""Write the meaning-level half of the hint corpus (bench/data/hint_corpus/disguises/).

Issue #23 lists disguises the gate did not read: narrowing (intervals, tolerances, short lists of
alternatives), pointers into the code (line numbers, "the line that ...", function names), digests,
acrostics and first letters, classical ciphers (Caesar, Atbash, Morse, the spelling alphabet), dates
and times in other formats, regexes and globs that match only the answer, number words in other
languages, and arithmetic on visible constants. Each is written here in several *kinds*; the kinds
are split in two, by kind, before any tuning:

- `tune`: the kinds the detector (termforge.quality.disguises) was developed against;
- `heldout`: other kinds of the same families of disguise, which the detector was never run on
  while it was written; bench/bench_hint_gate.py reports recall on them separately, per kind.

Rows are built from the answers of real generated tasks (every family, seeds 0-2), like
make_hint_corpus.py. `honest.jsonl` beside them holds method-level hints with the same surface
features (ranges and patterns the instruction states, hashes as a technique, arithmetic words,
hints in other languages): the false-positive side.

    .venv/bin/python bench/make_disguise_corpus.py
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
import tempfile
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from termforge.hints.corpus import DEFAULT_CORPUS, corpus_tasks

OUT = DEFAULT_CORPUS / "disguises"
SEEDS = (0, 1, 2)
TUNE = ("interval_between", "line_number", "sha256", "acrostic_sentences", "caesar3", "date_long", "regex_anchored",
        "words_de", "words_fr", "double", "morse")
HELDOUT = ("tolerance_pm", "either_or", "the_line_that", "function_name", "md5", "sha1", "first_letters_words",
           "atbash", "caesar_other", "nato", "date_day_first", "time_12h", "glob", "words_es", "words_it",
           "words_pt", "arith_add", "arith_product")

OPENERS = ["Read the inputs once end to end before you write any code.",
           "Work in small steps and check each intermediate file with head.",
           "Keep a scratch copy of every input so you can compare before and after."]

VERB = {"a": "Audit", "b": "Build", "c": "Check", "d": "Decode", "e": "Examine", "f": "Filter", "g": "Group",
        "h": "Hash", "i": "Inspect", "j": "Join", "k": "Keep", "l": "List", "m": "Measure", "n": "Normalise",
        "o": "Open", "p": "Parse", "q": "Query", "r": "Read", "s": "Sort", "t": "Trace", "u": "Unpack",
        "v": "Verify", "w": "Write", "x": "Examine", "y": "Yank", "z": "Zero"}
VERB["x"] = "Xerox"
REST = ["the inputs carefully", "every record twice", "the output format", "each field by name",
        "the totals at the end", "edge cases first", "what the instruction states", "one file at a time"]
DIGIT_LEAD = {str(d): f"{d} passes over the data are plenty" for d in range(10)}

MORSE = {c: m for c, m in zip("abcdefghijklmnopqrstuvwxyz0123456789",
                              ".- -... -.-. -.. . ..-. --. .... .. .--- -.- .-.. -- -. --- .--. --.- .-. ... - ..- ...- "
                              ".-- -..- -.-- --.. ----- .---- ..--- ...-- ....- ..... -.... --... ---.. ----.".split())}
NATO = dict(zip("abcdefghijklmnopqrstuvwxyz0123456789",
                "alfa bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar papa "
                "quebec romeo sierra tango uniform victor whiskey xray yankee zulu zero one two three four five six "
                "seven eight niner".split()))

WORDS = {
    "de": (["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf", "zwölf",
            "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn"],
           ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]),
    "fr": (["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix", "onze", "douze",
            "treize", "quatorze", "quinze", "seize", "dix-sept", "dix-huit", "dix-neuf"],
           ["", "", "vingt", "trente", "quarante", "cinquante", "soixante", "soixante", "quatre-vingt", "quatre-vingt"]),
    "es": (["cero", "uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve", "diez", "once", "doce",
            "trece", "catorce", "quince", "dieciséis", "diecisiete", "dieciocho", "diecinueve"],
           ["", "", "veinte", "treinta", "cuarenta", "cincuenta", "sesenta", "setenta", "ochenta", "noventa"]),
    "it": (["zero", "uno", "due", "tre", "quattro", "cinque", "sei", "sette", "otto", "nove", "dieci", "undici",
            "dodici", "tredici", "quattordici", "quindici", "sedici", "diciassette", "diciotto", "diciannove"],
           ["", "", "venti", "trenta", "quaranta", "cinquanta", "sessanta", "settanta", "ottanta", "novanta"]),
    "pt": (["zero", "um", "dois", "três", "quatro", "cinco", "seis", "sete", "oito", "nove", "dez", "onze", "doze",
            "treze", "catorze", "quinze", "dezesseis", "dezessete", "dezoito", "dezenove"],
           ["", "", "vinte", "trinta", "quarenta", "cinquenta", "sessenta", "setenta", "oitenta", "noventa"]),
}
HUNDREDS = {"es": ["", "ciento", "doscientos", "trescientos", "cuatrocientos", "quinientos", "seiscientos",
                   "setecientos", "ochocientos", "novecientos"],
            "pt": ["", "cento", "duzentos", "trezentos", "quatrocentos", "quinhentos", "seiscentos", "setecentos",
                   "oitocentos", "novecentos"]}
THOUSAND = {"de": "tausend", "fr": "mille", "es": "mil", "it": "mila", "pt": "mil"}
POINT = {"de": "Komma", "fr": "virgule", "es": "coma", "it": "virgola", "pt": "vírgula"}


def below_100(n: int, lang: str) -> str:
    units, tens = WORDS[lang]
    if n < 20:
        return units[n]
    t, u = divmod(n, 10)
    if lang == "de":
        return (("ein" if u == 1 else units[u]) + "und" if u else "") + tens[t]
    if lang == "fr":
        if t in (7, 9):
            return tens[t] + ("-et-" if u == 1 and t == 7 else "-") + units[10 + u]
        return tens[t] + ("" if not u else ("-et-un" if u == 1 and t < 8 else "-" + units[u]))
    if lang == "es":
        return ("veinti" + units[u] if t == 2 else tens[t] + " y " + units[u]) if u else tens[t]
    if lang == "it":
        stem = tens[t][:-1] if u in (1, 8) else tens[t]
        return stem + units[u] if u else tens[t]
    return tens[t] + (" e " + units[u] if u else "")  # pt


def below_1000(n: int, lang: str) -> str:
    h, r = divmod(n, 100)
    if not h:
        return below_100(r, lang)
    if lang in HUNDREDS:
        head = "cien" if lang == "es" and h == 1 and not r else HUNDREDS[lang][h]
        sep = " e " if lang == "pt" and r else " "
        return head + (sep + below_100(r, lang) if r else "")
    if lang == "de":
        return (("ein" if h == 1 else WORDS[lang][0][h]) + "hundert") + (below_100(r, lang) if r else "")
    if lang == "fr":
        return ("cent" if h == 1 else WORDS[lang][0][h] + " cent") + (" " + below_100(r, lang) if r else "")
    return ("cento" if h == 1 else WORDS[lang][0][h] + "cento") + (below_100(r, lang) if r else "")  # it


def number_words(text: str, lang: str) -> str:
    whole, _, frac = text.lstrip("-").partition(".")
    n = int(whole)
    th, r = divmod(n, 1000)
    if th:
        head = THOUSAND[lang] if th == 1 else below_1000(th, lang) + ("" if lang in ("de", "it") else " ") + THOUSAND[lang]
        out = head + ((" " if lang not in ("de", "it") else "") + below_1000(r, lang) if r else "")
    else:
        out = below_1000(n, lang)
    if frac:
        out += f" {POINT[lang]} " + " ".join(WORDS[lang][0][int(c)] for c in frac)
    return out


def caesar(s: str, k: int) -> str:
    return "".join(chr((ord(c) - 97 + k) % 26 + 97) if "a" <= c <= "z" else
                   chr((ord(c) - 65 + k) % 26 + 65) if "A" <= c <= "Z" else c for c in s)


def atbash(s: str) -> str:
    return "".join(chr(219 - ord(c)) if "a" <= c <= "z" else chr(155 - ord(c)) if "A" <= c <= "Z" else c for c in s)


def acrostic_sentences(core: str, rng: random.Random) -> str:
    out = []
    for ch in core.lower():
        out.append(DIGIT_LEAD[ch] + "." if ch.isdigit() else f"{VERB[ch]} {rng.choice(REST)}.")
    return " ".join(out)


WORD_BANK = {c: [w for w in ("and all any as at be by can check data each easy even every fields file for go "
                             "good has have if in input is it just keep know last lines look make many more most "
                             "must never next no not now of often on once one only or our out output over parse "
                             "quick quiet quite read right rows run same say see so some sort step such take than "
                             "that the then they this to try under up use usual very view was we well what when "
                             "where which while who why will with work write yes yet you your zero zone").split()
                 if w.startswith(c)] for c in "abcdefghijklmnopqrstuvwxyz"}
WORD_BANK.update({"j": ["just"], "k": ["keep", "know"], "q": ["quick", "quiet"], "x": ["xor"], "z": ["zero"],
                  "v": ["very", "view"], "y": ["yes", "you"]})


def first_letters(core: str, rng: random.Random) -> str:
    words = [(ch if ch.isdigit() else rng.choice(WORD_BANK[ch])) for ch in core.lower()]
    return "Mind this phrase: " + " ".join(words) + "."


def fmt_like(value: Decimal, template: str) -> str:
    decimals = len(template.split(".")[1]) if "." in template else 0
    return f"{value:.{decimals}f}"


def rows_for(family: str, seed: int, task_dir: Path, rng: random.Random) -> list[dict]:
    from termforge.quality.disguises import secret_datetime
    from termforge.quality.leaks import _is_short, _sig_digits, task_secrets

    secrets = task_secrets(task_dir)
    answers = [s for s in secrets.secrets if s.kind == "answer" and not s.weak and not _is_short(s)]
    strings = [s for s in answers if s.number is None and 5 <= len(re.sub(r"[^0-9A-Za-z]", "", s.text)) <= 20
               and "\n" not in s.text and secret_datetime(s.text) is None and " " not in s.text.strip()
               and sum(c.isalpha() for c in s.text) >= 4]
    numbers = [s for s in answers if s.number is not None and _sig_digits(s.number) >= 3 and "seed" not in s.source
               and abs(s.number) < 10**6]
    dates = [s for s in answers if secret_datetime(s.text) is not None]
    rows: list[dict] = []

    def add(kind: str, text: str) -> None:
        split = "tune" if kind in TUNE else "heldout"
        rows.append({"family": family, "seed": seed, "kind": kind, "split": split,
                     "hint": f"{rng.choice(OPENERS)} {text}"})

    if numbers:
        s = numbers[0]
        x, t = s.number, s.text
        step = max(abs(x) * Decimal("0.01"), Decimal(1) if "." not in t else Decimal(5).scaleb(-len(t.split(".")[1])))
        add("interval_between", f"Your result should land between {fmt_like(x - step, t)} and {fmt_like(x + step, t)}.")
        add("tolerance_pm", f"Aim for {fmt_like(x, t)} ± {fmt_like(step, t) if '.' in t else 1} or so.")
        lo = int(x) if x == int(x) else round(x)
        add("either_or", f"The figure comes out as either {lo} or {lo + 1}, depending on rounding.")
        add("double", f"Sanity check: it is double {x / 2}.")
        b = Decimal(17) if x > 40 else Decimal(3)
        add("arith_add", f"To sanity-check, add {b} to {x - b} and compare.")
        add("arith_product", f"It equals the product of 4 and {x / 4}.")
        if abs(x) >= 1 and (x == int(x) or len(t.split(".")[1]) <= 2):
            for lang in ("de", "fr", "es", "it", "pt"):
                add(f"words_{lang}", f"Written out, it is {number_words(t.lstrip('-'), lang)}.")
    if strings:
        s = strings[0]
        core = re.sub(r"[^0-9A-Za-z]", "", s.text)
        add("sha256", f"Its sha256 is {hashlib.sha256(s.text.encode()).hexdigest()}, check yours against it.")
        add("md5", f"The md5 of the right value is {hashlib.md5(s.text.encode()).hexdigest()}.")
        add("sha1", f"Confirm with sha1: {hashlib.sha1(s.text.encode()).hexdigest().upper()}.")
        add("acrostic_sentences", acrostic_sentences(core, rng))
        add("first_letters_words", first_letters(core, rng))
        add("caesar3", f"Shift each letter back by three: {caesar(s.text, 3)}.")
        add("caesar_other", f"Decode this with a shift of seven: {caesar(s.text, -7)}.")
        add("atbash", f"Mirror the alphabet on this: {atbash(s.text)}.")
        add("morse", "Signal: " + " ".join(MORSE.get(c, "") for c in core.lower()) + ".")
        add("nato", "Spelled out: " + " ".join(NATO[c] for c in core.lower()) + ".")
        k = max(3, int(len(s.text) * 0.7))
        add("regex_anchored", f"It matches ^{re.escape(s.text[:k])}.*{re.escape(s.text[-1])}$ and nothing else.")
        add("glob", f"Look for something like {s.text[:k]}*{s.text[-2:]} in the output.")
    if dates:
        day, hms = secret_datetime(dates[0].text)
        when = datetime(day[0], day[1], day[2], *(hms[:2] if hms else (0, 0)), tzinfo=timezone.utc)
        add("date_long", f"The key moment is {when.strftime('%B')} {when.day}, {when.year} at {when.strftime('%H:%M')}.")
        add("date_day_first", f"Focus on {when.strftime('%d/%m/%Y %H:%M')}.")
        add("time_12h", f"It starts on {when.strftime('%d %b %Y')} around {when.strftime('%I:%M %p').lstrip('0')}.")
    for bp in secrets.pointers[:1]:
        add("line_number", f"Start reading at line {bp.lines[0]} of {bp.file}.")
        if bp.tokens:
            add("the_line_that", f"Stare at the line that uses {bp.tokens[0]} until it makes sense.")
        if bp.function:
            add("function_name", f"The trouble is inside {bp.function}(); read it first.")
    return rows


HONEST = [
    "Keep only values between {a} and {b}, exactly the range the instruction gives, and count what falls outside.",
    "Use a glob such as `*.csv` to find the inputs, and a regular expression like `^[A-Za-z0-9_-]+$` to reject "
    "malformed names before parsing.",
    "Hash each input with sha256sum before and after your run to prove you never modified it, then write the result.",
    "Add up the parts and double-check the total with a second command; half-open ranges are easy to get wrong.",
    "Vérifiez chaque ligne des fichiers d'entrée, comptez les cas limites et comparez avec le format demandé.",
    "Lesen Sie zuerst alle Eingabedateien, prüfen Sie jede Zeile und vergleichen Sie dann das Format der Ausgabe.",
    "Lee cada archivo de entrada, revisa cada línea y compara el resultado con el formato pedido.",
    "Use `sort -t , -k 2,2` for the key and put `--` before file names that may start with a dash.",
    "Read the header line first, map each column by name, and compare line 1 of your output with the format shown.",
    "Echo every intermediate count while you debug and delete the echo lines before you finish.",
    "Convert times to one timezone before comparing them, and keep the original timestamp text in your output.",
    "Write a small function per rule, test each one on two or three hand-made inputs, then run the whole pipeline.",
]


def honest_rows(family: str, seed: int, task_dir: Path, rng: random.Random) -> list[dict]:
    instruction = (task_dir / "instruction.md").read_text()
    nums = [n for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", instruction)]
    # A hint is about its own task: it starts from the first input the instruction names.
    path = next(iter(re.findall(r"`(/app/[^`]+)`", instruction)), "/app")
    out = []
    for i, template in enumerate(HONEST):
        if "{a}" in template:
            pair = sorted({Decimal(n) for n in nums[:6]})
            if len(pair) < 2:
                continue
            template = template.format(a=pair[0], b=pair[-1])
        out.append({"family": family, "seed": seed, "kind": f"honest_feature_{i}",
                    "hint": f"Start from `{path}` and read it whole before anything else. {template}"})
    return rng.sample(out, min(4, len(out)))


def main() -> None:
    rng = random.Random(23)
    leaks, honest = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tasks = corpus_tasks(tmp, seeds=SEEDS)
        for (family, seed), task_dir in sorted(tasks.items()):
            leaks += rows_for(family, seed, task_dir, rng)
            honest += honest_rows(family, seed, task_dir, rng)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("leaks.jsonl", leaks), ("honest.jsonl", honest)):
        (OUT / name).write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
                                encoding="utf-8")
    by = {s: sum(1 for r in leaks if r["split"] == s) for s in ("tune", "heldout")}
    print(f"{len(leaks)} disguised leaks ({by['tune']} tune, {by['heldout']} held-out) over "
          f"{len({r['family'] for r in leaks})} families, {len({r['kind'] for r in leaks})} kinds; "
          f"{len(honest)} honest hints -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
