"""Write the disguised-leak half of the hint corpus (bench/data/hint_corpus/leaks.jsonl).

Each leak is one honest-looking sentence of method followed by the answer of a real generated task
in one disguise (the kinds the hint gate was found to miss: reformatted numbers, units, number
words, letter-by-letter, split halves, base64/hex/ROT13/reversed, arithmetic, zero-width and
full-width characters, confusable letters, derived values, short answers in context, expected
output described line by line, restated verifier assertions, planted-bug names). The answer of
each task is read from its private/truth.json, so the corpus is built once and then committed as
data; rerun this only to extend it. The honest half (honest.jsonl) is written by hand.

    .venv/bin/python bench/make_hint_corpus.py
"""

from __future__ import annotations

import base64
import codecs
import json
import random
import re
import sys
import tempfile
from decimal import Decimal

from termforge.hints.corpus import DEFAULT_CORPUS, corpus_tasks

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
        "seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()

OPENERS = [
    "Inspect the inputs with head and wc before writing any code.",
    "Work through the data carefully and verify each step with a second command.",
    "Start by reading the instruction twice and listing every rule it states.",
    "Build the result with a short script and compare it against the stated format.",
]


def words(n: int) -> str:
    if n < 0:
        return "minus " + words(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10 - 2] + ("" if n % 10 == 0 else "-" + _ONES[n % 10])
    if n < 1000:
        return _ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " and " + words(n % 100))
    for scale, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= scale:
            rest = n % scale
            return words(n // scale) + " " + name + ("" if rest == 0 else " " + words(rest))
    raise AssertionError(n)


def number_words(text: str) -> str:
    d = Decimal(text)
    whole = int(abs(d))
    out = words(whole)
    if "." in text:
        out += " point " + " ".join(_ONES[int(c)] for c in text.split(".")[1])
    return ("minus " if d < 0 else "") + out


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def confusable(text: str) -> str:
    table = str.maketrans("aeopcxyAEOPCX", "аеорсхуАЕОРСХ")
    return text.translate(table)


def zero_width(text: str) -> str:
    return "\u200b".join(text)


def first(secrets, pred):
    return next((s for s in secrets if pred(s)), None)


def main() -> None:
    rng = random.Random(17)
    from termforge.quality.leaks import _is_short, _sig_digits, task_secrets

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tasks = corpus_tasks(tmp, seeds=(0, 1))
        for (family, seed), task_dir in sorted(tasks.items()):
            truth = json.loads((task_dir / "private" / "truth.json").read_text())
            secrets = [s for s in task_secrets(task_dir).secrets if s.kind == "answer" and not _is_short(s) and not s.weak]
            secrets.sort(key=lambda s: (s.source.endswith("(part)"), len(s.text) > 40, s.source))
            def is_num(s, part_ok=False, seed_ok=False):
                return (s.number is not None and _sig_digits(s.number) >= 3 and (seed_ok or "seed" not in s.source)
                        and (part_ok or not s.source.endswith("(part)")))

            num = (first(secrets, is_num) or first(secrets, lambda s: is_num(s, part_ok=True))
                   or first(secrets, lambda s: is_num(s, seed_ok=True)))
            word = first(secrets, lambda s: s.number is None and 5 <= len(re.sub(r"\W", "", s.text)) <= 24
                         and "\n" not in s.text)

            def add(kind: str, leak: str) -> None:
                rows.append({"family": family, "seed": seed, "kind": kind,
                             "hint": f"{rng.choice(OPENERS)} {leak}"})

            if num is not None:
                v = num.text
                d = Decimal(v)
                if "." in v:
                    add("number_trailing_zeros", f"You should end up with roughly {v}00 once the fit converges.")
                    if _sig_digits(d) >= 4:
                        add("number_rounded", f"A correct run lands near {round(d, max(1, len(v.split('.')[1]) - 1))}.")
                else:
                    add("number_trailing_zeros", f"The figure to aim for is {v}.0, nothing else.")
                    if abs(d) >= 1000:
                        add("number_separators", f"The total comes to {int(d):,} when you are done.")
                add("number_scientific", f"Sanity check: the key figure is {float(d):.{_sig_digits(d) - 1}e}.")
                add("number_words", f"The value should read {number_words(v)}.")
                add("number_fullwidth", f"The value to deliver is {fullwidth(v)}.")
                add("number_zero_width", f"Expect {zero_width(v)} in the end.")
                if abs(d) >= 100 and "." in v:
                    add("number_unit", f"It works out to {d / 1000} k in the big unit.")
                if d == int(d) and abs(d) > 20:
                    n = int(d)
                    f = next((k for k in (7, 3, 2, 5, 11) if n % k == 0), None)
                    add("arithmetic", f"Hint: it equals {f} * {n // f}." if f else f"Hint: it equals {n - 17} + 17.")
                else:
                    add("arithmetic", f"The result is 2 * {d / 2} if you did it right.")
                add("base64_number", f"Decode this when stuck: {base64.b64encode(v.encode()).decode()}")
                add("reversed_number", f"Read this backwards for the answer: {v[::-1]}")
                if "half_life" in num.source:
                    import math

                    add("derived", f"The decay constant comes out at {math.log(2) / float(d):.5f} per second.")
            if word is not None:
                w = word.text
                add("string_upper", f"The one you want is {w.upper()}.")
                add("string_spaced", f"Spell it out: {' '.join(re.sub(r'[^0-9A-Za-z]', '', w))}.")
                add("string_dashed", f"It is {'-'.join(re.sub(r'[^0-9A-Za-z]', '', w))} if you drop the dashes.")
                core = re.sub(r"[^0-9A-Za-z]", "", w)
                if len(core) >= 6:
                    h = len(core) // 2
                    add("string_split", f"It begins with {core[:h]}. Much later you will see it ends in {core[h:]}.")
                add("string_base64", f"Check against {base64.b64encode(w.encode()).decode()} (base64).")
                add("string_hex", f"Compare with the hex string {w.encode().hex()}.")
                add("string_rot13", f"The answer, in ROT13: {codecs.encode(w, 'rot13')}.")
                add("string_reversed", f"Read it backwards: {w[::-1]}.")
                add("string_zero_width", f"Deliver {zero_width(w)} exactly.")
                add("string_confusable", f"The value is {confusable(w)}.")
            # Short answers, where they stand.
            answers = truth.get("answers") if isinstance(truth.get("answers"), dict) else None
            if answers:
                for q, a in sorted(answers.items()):
                    if len(str(a)) <= 3:
                        add("short_in_context", f"For {q} the answer is {a}, so you can skip that query.")
                        break
            # Expected output, line by line.
            for key in ("expected_lines", "expected_rows", "expected_modes", "expected_resolution", "report_lines"):
                lines = truth.get(key)
                if isinstance(lines, list) and lines:
                    parts = re.split(r"[,:\t ]+", str(lines[0]))
                    desc = ", then ".join(p for p in parts if p)
                    add("expected_output", f"The first line of the result has {desc}.")
                    break
            # Planted bugs, by name or by effect.
            bugs = truth.get("planted_bugs")
            if isinstance(bugs, dict) and bugs:
                name = sorted(bugs)[0]
                add("bug_name", f"The planted bug is the {name} one; fix that first.")
                eff = bugs[name].get("effect") if isinstance(bugs[name], dict) else None
                if eff:
                    add("bug_effect", f"Note that {eff}.")
            elif isinstance(bugs, list) and bugs:
                add("bug_name", f"Look for the {str(bugs[0]).replace('_', ' ')} defect.")
            # A verifier assertion restated.
            test = (task_dir / "tests" / "test_final_state.py").read_text()
            m = re.search(r"^(EXPECTED\w*|[A-Z_]+) = ['\"]([^'\"]{6,60})['\"]", test, re.M)
            if m and m.group(2) not in (task_dir / "instruction.md").read_text() and not m.group(2).startswith("/"):
                add("test_assertion", f"The checker compares against {m.group(2)} so match it exactly.")
    out = DEFAULT_CORPUS / "leaks.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    kinds = sorted({r["kind"] for r in rows})
    print(f"{len(rows)} leaks over {len({r['family'] for r in rows})} families, {len(kinds)} kinds -> {out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
