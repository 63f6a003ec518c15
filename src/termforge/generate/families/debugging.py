"""debugging families: a Python tool and a shell script, each with planted bugs to find and fix.

Both are built from a program template with *bug sites*: each site has the correct code and one or
more buggy variants. A task plants buggy variants at some sites (more with higher complexity); the
oracle patches exactly those sites back; the tests exercise behaviour through subprocess only, on
inputs that trigger every site's bug (whether planted or not, so the tests reveal nothing) plus
random ones (Python) or fixed scenarios (shell).
"""

from __future__ import annotations

import inspect
import random
import textwrap
from dataclasses import dataclass

from termforge.generate.base import (TaskFamily, TaskSpec, bash_script, complexity_level, indent_block,
                                     instruction_frame, pytest_module)




@dataclass(frozen=True)
class BugSite:
    key: str
    fixed: str
    buggy: tuple[str, ...]
    effect: str
    """What goes wrong (private: truth and method note, never the instruction)."""
    report: str
    """How a user would describe the symptom (may be quoted in the instruction)."""


def plant(template: str, sites: list[BugSite], planted: dict[str, str]) -> str:
    """Render a template: planted sites get their chosen buggy code, the rest the fixed code.
    Every buggy snippet must occur exactly once, or the oracle's patch would be ambiguous."""
    out = template
    for site in sites:
        out = out.replace(f"@@{site.key}@@", planted.get(site.key, site.fixed))
    if "@@" in out:
        raise ValueError(f"unfilled bug site in template: {out[out.index('@@'):][:40]!r}")
    for key, buggy in planted.items():
        if out.count(buggy) != 1:
            raise ValueError(f"buggy code for site {key!r} is not unique in the rendered program")
    return out


def _choose_bugs(rng: random.Random, sites: list[BugSite], level: int) -> dict[str, str]:
    n = min(len(sites), (1, 2, 3, len(sites))[level])
    chosen = rng.sample(sites, n)
    return {s.key: rng.choice(s.buggy) for s in sorted(chosen, key=lambda s: s.key)}


def _patch_oracle(path: str, planted: dict[str, str], sites: list[BugSite]) -> str:
    fixed = {s.key: s.fixed for s in sites}
    patches = [(planted[k], fixed[k]) for k in sorted(planted)]
    return bash_script(f"""
        python3 - <<'PY'
        PATCHES = {patches!r}
        with open("{path}", encoding="utf-8") as fh:
            src = fh.read()
        # Locate every faulty snippet in the original first, then splice: a fix never gets re-patched.
        spots = []
        for bad, good in PATCHES:
            assert src.count(bad) == 1, bad
            spots.append((src.index(bad), bad, good))
        for start, bad, good in sorted(spots, reverse=True):
            src = src[:start] + good + src[start + len(bad):]
        with open("{path}", "w", encoding="utf-8") as fh:
            fh.write(src)
        PY
    """)


def _truth(planted: dict[str, str], sites: list[BugSite], given: dict) -> dict:
    by_key = {s.key: s for s in sites}
    return {"given": given,
            "planted_bugs": {k: {"buggy": v, "fixed": by_key[k].fixed, "effect": by_key[k].effect}
                             for k, v in sorted(planted.items())}}


# ============================================================================================
# Python tools, graded by fuzzing against a reference implementation held in the test
# ============================================================================================

INTERVALS_TEMPLATE = r'''#!/usr/bin/env python3
"""Merge [start, end] intervals read from a file (one "start end" pair per line)."""

import sys


def read_intervals(path):
    intervals = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            @@skip@@
                continue
            start, end = line.split()
            intervals.append((int(start), int(end)))
    return intervals


def merge(intervals):
    @@empty@@
        return []
    @@sort@@
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if @@touch@@:
            @@extend@@
        else:
            merged.append([start, end])
    return merged


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: merge_intervals.py FILE")
    for start, end in merge(read_intervals(sys.argv[1])):
        print(f"{start}@@P_SEP@@{end}")


if __name__ == "__main__":
    main()
'''


def ref_merge_intervals(text: str, args: list, P: dict) -> str:
    ivs = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        a, b = line.split()
        ivs.append((int(a), int(b)))
    ivs.sort()
    out = []
    for s, e in ivs:
        if out and (s <= out[-1][1] if P["touching"] else s < out[-1][1]):
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return "".join(f"{s}{P['sep']}{e}\n" for s, e in out)


def case_merge_intervals(rng, P: dict) -> tuple[str, list]:
    lines = []
    for _ in range(rng.randint(0, 14)):
        roll = rng.random()
        if roll < 0.1:
            lines.append(rng.choice(("", "   ", "\t")))
        elif roll < 0.2:
            lines.append(rng.choice(("# comment", "  # indented note", "#")))
        else:
            s = rng.randint(-20, 40)
            e = s + rng.choice((0, 1, 2, 3, 5, 8, 13))
            lines.append(rng.choice(("", " ")) + f"{s}{rng.choice((' ', '  ', chr(9)))}{e}" + rng.choice(("", " ")))
    text = "\n".join(lines) + ("\n" if lines and rng.random() < 0.85 else "")
    return text, []


def _intervals(rng: random.Random) -> dict:
    touching = rng.random() < 0.5
    sep = rng.choice((" ", "-", ","))
    sites = [
        BugSite("skip", 'if not line.strip() or line.lstrip().startswith("#"):',
                ('if line.startswith("#"):', 'if line.strip().startswith("#"):'),
                "blank or whitespace-only lines (and indented comments) are not skipped, so unpacking crashes",
                "It died with a traceback on a file someone had tidied up by hand."),
        BugSite("empty", "if not intervals:", ("if intervals is None:",),
                "an input with no intervals indexes an empty list and crashes",
                "A file with nothing but comments in it makes it crash."),
        BugSite("sort", "intervals = sorted(intervals)",
                ("intervals = list(intervals)", "intervals = sorted(intervals, key=lambda iv: iv[1])"),
                "intervals are not sorted by start before merging",
                "Results look wrong when the input is not already in order."),
        BugSite("touch", "start <= last[1]" if touching else "start < last[1]",
                ("start < last[1]" if touching else "start <= last[1]",),
                "intervals that only touch are merged (or not) against the specification",
                "Intervals that meet at one point come out wrong."),
        BugSite("extend", "last[1] = max(last[1], end)", ("last[1] = end",),
                "an interval contained in the previous one shrinks the merged end",
                "Sometimes a merged range ends too early."),
    ]
    spec = (f"""
        `python3 /app/merge_intervals.py FILE` reads intervals, one per line as two integers
        `start end` separated by whitespace (`start <= end`; integers may be negative; spaces around
        them are allowed). Blank or whitespace-only lines, and lines whose first non-space character
        is `#`, are ignored. It prints the merged intervals sorted by start, one per line as
        `start{sep}end` (e.g. `3{sep}9`). Two intervals merge when they overlap
        {"or touch (the next start equals the current end)" if touching else
         "(sharing more than one point: intervals that only touch, next start equal to current end, stay separate)"}.
        An input with no intervals prints nothing. Exit status 0.
    """)
    return {"file": "merge_intervals.py", "template": INTERVALS_TEMPLATE.replace("@@P_SEP@@", sep),
            "sites": sites, "P": {"touching": touching, "sep": sep}, "spec": spec,
            "ref": ref_merge_intervals, "case": case_merge_intervals,
            "edge": [("", []), ("# only a comment\n", []), ("1 3\n\n  # note\n5 6\n", []), ("5 8\n1 2\n", []),
                     ("1 3\n3 5\n", []), ("1 10\n2 3\n", []), ("4 6\n1 9\n2 3\n", []), ("  \t\n7 7\n", [])]}


NUMSTATS_TEMPLATE = r'''#!/usr/bin/env python3
"""Summary statistics of the integers in a file, one per line."""

import sys

SEP = "@@P_SEP@@"
DECIMALS = @@P_DEC@@


def read_values(path):
    values = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            @@skip@@
                continue
            values.append(int(line))
    return values


def summarize(values):
    @@empty@@
        return [f"count{SEP}0"]
    @@init@@
    for v in values:
        lo = min(lo, v)
        hi = max(hi, v)
    n = len(values)
    @@order@@
    mid = n // 2
    @@median@@
    mean = sum(values) / n
    return [f"count{SEP}{n}", f"min{SEP}{lo}", f"max{SEP}{hi}",
            f"mean{SEP}{mean:.{DECIMALS}f}", f"median{SEP}{median:.{DECIMALS}f}"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: numstats.py FILE")
    for line in summarize(read_values(sys.argv[1])):
        print(line)


if __name__ == "__main__":
    main()
'''


def ref_numstats(text: str, args: list, P: dict) -> str:
    vals = [int(x) for x in text.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    sep, d = P["sep"], P["decimals"]
    if not vals:
        return f"count{sep}0\n"
    n = len(vals)
    s = sorted(vals)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    lines = [f"count{sep}{n}", f"min{sep}{min(vals)}", f"max{sep}{max(vals)}",
             f"mean{sep}{sum(vals) / n:.{d}f}", f"median{sep}{median:.{d}f}"]
    return "\n".join(lines) + "\n"


def case_numstats(rng, P: dict) -> tuple[str, list]:
    lo, hi = rng.choice(((-50, 99), (1, 500), (-400, -1), (-5, 5)))
    lines = []
    for _ in range(rng.choice((0, 1, 2, 3, 4, 7, 10, 13))):
        roll = rng.random()
        if roll < 0.1:
            lines.append(rng.choice(("", "  ", "\t")))
        elif roll < 0.18:
            lines.append(rng.choice(("# sensor reset", "  # skipped", "#")))
        else:
            lines.append(rng.choice(("", " ", "  ")) + str(rng.randint(lo, hi)) + rng.choice(("", " ")))
    text = "\n".join(lines) + ("\n" if lines and rng.random() < 0.85 else "")
    return text, []


def _numstats(rng: random.Random) -> dict:
    sep = rng.choice(("=", ": ", "\t"))
    decimals = rng.randint(1, 3)
    sites = [
        BugSite("skip", 'if not line.strip() or line.lstrip().startswith("#"):',
                ('if not line.strip("\\n"):', 'if line == "\\n":'),
                "whitespace-only and comment lines are passed to int() and crash it",
                "It crashes on files with comments or stray spaces in them."),
        BugSite("empty", "if not values:", ("if values is None:",),
                "an input with no values divides by zero / indexes an empty list",
                "An empty file makes it crash instead of reporting a count of zero."),
        BugSite("init", "lo = hi = values[0]", ("lo = hi = 0",),
                "min/max start at 0 instead of the first value",
                "The minimum is wrong for some files (it shows 0 when no value is 0)."),
        BugSite("order", "ordered = sorted(values)", ("ordered = values", "ordered = list(reversed(values))"),
                "the median is taken from unsorted values",
                "The median is wrong unless the file happens to be sorted."),
        BugSite("median", "median = (ordered[mid - 1] + ordered[mid]) / 2 if n % 2 == 0 else ordered[mid]",
                ("median = ordered[mid]", "median = ordered[mid - 1] if n % 2 == 0 else ordered[mid]"),
                "the median of an even number of values is not the mean of the two middle ones",
                "The median looks off by one position for some files."),
    ]
    sep_shown = {"=": "=", ": ": ": ", "\t": "<TAB>"}[sep]
    spec = f"""
        `python3 /app/numstats.py FILE` reads integers, one per line (spaces around a number are allowed).
        Blank or whitespace-only lines, and lines whose first non-space character is `#`, are ignored.
        It prints five lines: `count{sep_shown}N`, `min{sep_shown}MIN`, `max{sep_shown}MAX`,
        `mean{sep_shown}MEAN` and `median{sep_shown}MEDIAN`, where the separator is
        {"a tab character" if sep == chr(9) else f"`{sep}`"}, MIN and MAX are integers, and MEAN and
        MEDIAN are printed with exactly {decimals} decimal place(s) (Python `f"{{x:.{decimals}f}}"`). The
        median of an even number of values is the mean of the two middle values (after sorting). When
        there are no values it prints only `count{sep_shown}0`. Exit status 0.
    """
    template = NUMSTATS_TEMPLATE.replace("@@P_SEP@@", sep.replace("\t", "\\t")).replace("@@P_DEC@@", str(decimals))
    return {"file": "numstats.py", "template": template, "sites": sites,
            "P": {"sep": sep, "decimals": decimals}, "spec": spec, "ref": ref_numstats, "case": case_numstats,
            "edge": [("", []), ("# none yet\n\n", []), ("4\n   \n# c\n6\n", []), ("5\n7\n9\n", []),
                     ("-3\n-8\n-1\n", []), ("9\n1\n5\n", []), ("1\n2\n3\n10\n", []), ("10\n3\n2\n1\n", [])]}


TOPWORDS_TEMPLATE = r'''#!/usr/bin/env python3
"""The most frequent words of a text file: topwords.py FILE K"""

import re
import sys
from collections import Counter

MIN_LEN = @@P_MINLEN@@
LINE = "@@P_FMT@@"


def words(text):
    @@tokenize@@
    return [w for w in tokens if @@minlen@@]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: topwords.py FILE K")
    with open(sys.argv[1], encoding="utf-8") as fh:
        counts = Counter(words(fh.read()))
    k = int(sys.argv[2])
    @@ties@@
    @@topk@@


if __name__ == "__main__":
    main()
'''


def ref_topwords(text: str, args: list, P: dict) -> str:
    import re as _re

    k = int(args[0])
    counts: dict = {}
    for w in _re.findall(r"[a-z]+", text.lower()):
        if len(w) >= P["min_len"]:
            counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return "".join(P["fmt"].format(word=w, n=n) + "\n" for w, n in ranked)


def case_topwords(rng, P: dict) -> tuple[str, list]:
    vocab = ["the", "a", "an", "to", "of", "data", "Data", "DATA", "log", "logs", "error", "node", "it's",
             "don't", "x", "ok", "id42x", "e-mail", "café", "naïve", "über", "re-run", "rerun", "go", "be"]
    parts = []
    for _ in range(rng.choice((0, 1, 3, 8, 20, 40))):
        parts.append(rng.choice(vocab) + rng.choice(("", "", "", ",", ".", "!", "?", ";", ":", ")", "'s")))
        parts.append(rng.choice((" ", " ", "  ", "\n", "\t", " -- ", "\n\n")))
    text = "".join(parts)
    return text, [str(rng.choice((1, 2, 3, 5, 8, 30)))]


def _topwords(rng: random.Random) -> dict:
    min_len = rng.randint(1, 3)
    fmt = rng.choice(("{word}\t{n}", "{n} {word}", "{word}: {n}"))
    shown = fmt.replace("\t", "<TAB>").replace("{word}", "WORD").replace("{n}", "COUNT")
    sites = [
        BugSite("tokenize", 'tokens = re.findall(r"[a-z]+", text.lower())', ("tokens = text.lower().split()",),
                "tokens are whitespace-split, so punctuation stays attached to words",
                "`word,` and `word` are counted as different words."),
        BugSite("minlen", "len(w) >= MIN_LEN", ("len(w) > MIN_LEN",),
                "words of exactly the minimum length are dropped",
                "Some short words never show up even though they are frequent."),
        BugSite("ties", "ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))",
                ("ranked = counts.most_common()", "ranked = sorted(counts.items(), key=lambda kv: -kv[1])"),
                "equal counts are ordered by first appearance instead of alphabetically",
                "The order of words with the same count changes from file to file."),
        BugSite("topk", "for word, n in ranked[:k]:\n        print(LINE.format(word=word, n=n))",
                ("for i in range(k):\n        word, n = ranked[i]\n        print(LINE.format(word=word, n=n))",),
                "asking for more words than the text has crashes with IndexError",
                "Asking for a large K on a short file crashes."),
    ]
    spec = f"""
        `python3 /app/topwords.py FILE K` prints the K most frequent words of the UTF-8 text FILE. A word
        is a maximal run of ASCII letters `a`-`z` after lowercasing the whole text (so `it's` is `it`
        and `s`, and `café` contains the word `caf`); words shorter than {min_len} letter(s) are ignored.
        Output: one line per word, `{shown}`{" (a tab between)" if chr(9) in fmt else ""}, by count
        descending, ties in alphabetical order; fewer than K lines when there are fewer distinct words
        (none for an empty text). Exit status 0.
    """
    template = (TOPWORDS_TEMPLATE.replace("@@P_MINLEN@@", str(min_len))
                .replace("@@P_FMT@@", fmt.replace("\t", "\\t")))
    return {"file": "topwords.py", "template": template, "sites": sites,
            "P": {"min_len": min_len, "fmt": fmt}, "spec": spec, "ref": ref_topwords, "case": case_topwords,
            "edge": [("", ["3"]), ("Hello, world! hello.\nWorld\n", ["5"]), ("bb aa\n", ["5"]),
                     ("zeta alpha alpha zeta mid\n", ["2"]), ("a a b ab ab abc abc abc\n", ["9"]),
                     ("one two three four\n", ["2"])]}


FLATCFG_TEMPLATE = r'''#!/usr/bin/env python3
"""Flatten an INI-style config into sorted section.key lines."""

import sys

SEP = "@@P_SEP@@"


def parse(path):
    entries = {}
    @@default@@
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            stripped = raw.strip()
            @@comment@@
                continue
            if stripped.startswith("[") and stripped.endswith("]"):
                @@header@@
                continue
            if "=" not in stripped:
                continue
            @@split@@
            @@dupes@@
    return entries


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: flatcfg.py FILE")
    for name, value in sorted(parse(sys.argv[1]).items()):
        print(f"{name}{SEP}{value}")


if __name__ == "__main__":
    main()
'''


def ref_flatcfg(text: str, args: list, P: dict) -> str:
    section, entries = P["default"], {}
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s[0] in "#;":
            continue
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1].strip()
            continue
        if "=" not in s:
            continue
        k, v = s.split("=", 1)
        entries[f"{section}.{k.strip()}"] = v.strip()
    return "".join(f"{k}{P['sep']}{v}\n" for k, v in sorted(entries.items()))


def case_flatcfg(rng, P: dict) -> tuple[str, list]:
    sections = ["db", "cache", "server", "auth", "paths", "Server"]
    keys = ["host", "port", "url", "user", "timeout", "retries", "path", "mode", "Host"]
    values = ["localhost", "5432", "postgres://u:p@h/db?sslmode=require&x=1", "a = b", "", "  spaced out  ",
              "/var/lib/app", "yes", "0", "key=value=more", "é-ok", "# not a comment"]
    lines = []
    if rng.random() < 0.5:
        lines.append(f"{rng.choice(keys)} = {rng.choice(values)}")  # before any section header
    for _ in range(rng.choice((0, 1, 3, 6, 12))):
        roll = rng.random()
        if roll < 0.15:
            sec = rng.choice(sections)
            lines.append(rng.choice((f"[{sec}]", f"[ {sec} ]", f"  [{sec}]  ")))
        elif roll < 0.25:
            lines.append(rng.choice(("# comment", "; comment", "  ; old = 1", "# x = y", ";")))
        elif roll < 0.32:
            lines.append(rng.choice(("", "   ", "just some words")))
        else:
            eq = rng.choice(("=", " = ", "= ", "  =  "))
            lines.append(rng.choice(("", "  ")) + rng.choice(keys) + eq + rng.choice(values))
    text = "\n".join(lines) + ("\n" if lines and rng.random() < 0.85 else "")
    return text, []


def _flatcfg(rng: random.Random) -> dict:
    default = rng.choice(("global", "main", "root"))
    sep = rng.choice(("=", " = ", ": "))
    sites = [
        BugSite("default", f'section = "{default}"', ("section = None", 'section = ""'),
                "keys before the first header get the wrong section name",
                "Settings at the top of the file, before any [section], come out under a strange name."),
        BugSite("comment", 'if not stripped or stripped[0] in "#;":',
                ('if not stripped or stripped.startswith("#"):', 'if not stripped or stripped[0] == "#":'),
                "`;` comment lines are not recognised and can be parsed as settings",
                "Commented-out settings still show up."),
        BugSite("header", "section = stripped[1:-1].strip()", ("section = stripped[1:-1]",),
                "spaces inside a section header are kept in the section name",
                "Sections written like `[ db ]` produce keys with spaces in them."),
        BugSite("split", 'key, value = stripped.split("=", 1)', ('key, value = stripped.split("=")',),
                "a value containing `=` makes the unpacking crash",
                "It crashes on our database URL setting."),
        BugSite("dupes", 'entries[f"{section}.{key.strip()}"] = value.strip()',
                ('entries.setdefault(f"{section}.{key.strip()}", value.strip())',),
                "the first of duplicated keys wins instead of the last",
                "Overriding a setting further down the file has no effect."),
    ]
    spec = f"""
        `python3 /app/flatcfg.py FILE` flattens an INI-style file. Each line is stripped of surrounding
        whitespace; empty lines and lines starting with `#` or `;` are comments. `[name]` starts a
        section (the name is stripped: `[ db ]` is `db`); settings before the first header belong to
        section `{default}`. Any other line containing `=` is a setting: the key is the text before
        the first `=`, the value everything after it, both stripped. Lines without `=` are ignored.
        When a key repeats within a section the last value wins (a section may appear several times).
        Output: one line per setting, `section.key{sep}value`, sorted by `section.key` in plain
        code-point order; nothing for a file without settings. Exit status 0.
    """
    template = FLATCFG_TEMPLATE.replace("@@P_SEP@@", sep)
    return {"file": "flatcfg.py", "template": template, "sites": sites,
            "P": {"default": default, "sep": sep}, "spec": spec, "ref": ref_flatcfg, "case": case_flatcfg,
            "edge": [("", []), ("top = 1\n[db]\nhost = h\n", []), ("[s]\n; old = 1\n# x = y\nk = v\n", []),
                     ("[ db ]\nport = 1\n", []), ("[db]\nurl = a=b\n", []), ("[db]\nk = 1\nk = 2\n", []),
                     ("[a]\nx=1\n[b]\nx=2\n[a]\nx=3\n", [])]}


PYTHON_PROGRAMS = {"merge_intervals": _intervals, "numstats": _numstats, "topwords": _topwords,
                   "flatcfg": _flatcfg}


class PythonEdgeCaseFix(TaskFamily):
    """A small Python CLI with planted bugs (crashes on edge-case input, wrong results); the agent
    fixes it in place and is graded by comparing it with a reference on many generated inputs."""

    name = "python_edge_case_fix"
    method = (
        ('Read the specification line by line against the code and list every input class it names (empty '
         'input, blank and comment lines, ties, repeated keys, boundaries). Build a tiny file for each, run '
         'the tool, and compare with what the specification says; fix the root cause in the code (no special-'
         'casing of test inputs), then rerun all the small files.', None),
    )
    domains = ("debugging",)
    verifier_kinds = ("fuzz_equivalence",)
    fixture_kinds = ("text_only",)
    summary = "fix a Python CLI that crashes or misbehaves on edge-case input; checked by fuzzing"
    skill_types = ("crash_analysis", "logic_errors")
    skills = ("reproduce a crash with the smallest possible input", "find the first line where state goes wrong")
    languages = ("python",)
    command_complexities = ("bash_code",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        prog_name = rng.choice(sorted(PYTHON_PROGRAMS))
        prog = PYTHON_PROGRAMS[prog_name](rng)
        sites: list[BugSite] = prog["sites"]
        planted = _choose_bugs(rng, sites, level)
        source = plant(prog["template"], sites, planted)
        path = f"/app/{prog['file']}"
        fuzz_seed = rng.randrange(10**8, 10**9)
        n_random = (10, 12, 16, 20)[level]
        ref, case = prog["ref"], prog["case"]

        example_text, example_args = case(random.Random(rng.randrange(2**32)), prog["P"])
        while example_text.count("\n") < 3:
            example_text, example_args = case(random.Random(rng.randrange(2**32)), prog["P"])
        example_out = ref(example_text, example_args, prog["P"])
        by_key = {s.key: s for s in sites}
        reports = [by_key[k].report for k in sorted(planted)]
        rng.shuffle(reports)
        # Easier tasks quote every user report; harder ones only one, the rest must be found.
        shown = reports if level <= 1 else reports[:1]
        more = "" if level <= 1 else " There are more problems than the one reported."
        report_md = "\n".join(f"> {r}" for r in shown)
        arg_str = " ".join(example_args)
        instruction = instruction_frame(
            sig, f"Fix {prog['file']}",
            f"""
            `{path}` is a small tool our team relies on. It is supposed to behave like this:

            {indent_block(_dedent(prog["spec"]), 12)}

            Users have reported problems:

            {indent_block(report_md, 12)}

            {more.strip()}

            For example, with `/app/examples/input.txt` (already there),
            `python3 {path} /app/examples/input.txt{(" " + arg_str) if arg_str else ""}` must print:

            ```
            {indent_block(example_out.rstrip(chr(10)).replace(chr(9), "<TAB>") or "(nothing)", 12)}
            ```

            Fix the tool in place so that it meets the specification on every input (keep its file name and
            command-line interface; standard library only). It will be run with `/usr/bin/python3` on many
            generated inputs.
            """,
            [f"`{path}`: fixed, behaving exactly as specified."],
        )
        test_initial = pytest_module(f"""
            import os

            def test_tool_present():
                assert os.path.isfile("{path}")
                assert os.path.isfile("/app/examples/input.txt")
        """)
        head = ("import os\nimport random\nimport subprocess\n\n"
                "ENV = {\"PATH\": \"/usr/bin:/bin\", \"LANG\": \"C.UTF-8\", \"LC_ALL\": \"C.UTF-8\", \"PYTHONUTF8\": \"1\"}\n"
                f"PROGRAM = {path!r}\nP = {prog['P']!r}\nSEED = {fuzz_seed}\nN_RANDOM = {n_random}\n"
                f"EDGE_CASES = {prog['edge']!r}\n\n\n")
        helpers = inspect.getsource(ref) + "\n\n" + inspect.getsource(case)
        body = pytest_module(f"""
            REFERENCE = {ref.__name__}
            MAKE_CASE = {case.__name__}


            def _check(tmp_path, label, text, args):
                path = tmp_path / f"{{label}}.txt"
                path.write_bytes(text.encode("utf-8"))
                res = subprocess.run(["/usr/bin/python3", PROGRAM, str(path), *args], capture_output=True,
                                     timeout=30, env=ENV, cwd=str(tmp_path))
                want = REFERENCE(text, args, P)
                where = f"{{label}}: input {{text!r}} args {{args}}"
                assert res.returncode == 0, f"{{where}}: exit {{res.returncode}}\\n{{res.stderr.decode(errors='replace')[-1500:]}}"
                got = res.stdout.decode("utf-8", errors="replace")
                assert got == want, f"{{where}}\\ngot  {{got!r}}\\nwant {{want!r}}"


            def test_edge_cases(tmp_path):
                for i, (text, args) in enumerate(EDGE_CASES):
                    _check(tmp_path, f"edge{{i}}", text, args)


            def test_random_inputs(tmp_path):
                rng = random.Random(SEED)
                for i in range(N_RANDOM):
                    text, args = MAKE_CASE(rng, P)
                    _check(tmp_path, f"random{{i}}", text, args)
        """)
        test_final = head + helpers.strip() + "\n\n\n" + body
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script(f"""
                mkdir -p /app/examples
                cp /tmp/env/fixtures/{prog['file']} {path}
                cp /tmp/env/fixtures/input.txt /app/examples/input.txt
            """),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=_patch_oracle(path, planted, sites),
            truth=_truth(planted, sites, {"program": prog["file"], "parameters": prog["P"]})
            | {"fuzz_seed": fuzz_seed},
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={prog["file"]: source.encode(), "input.txt": example_text.encode("utf-8")},
            output_paths=[path],
        )


def _dedent(text: str) -> str:
    return textwrap.dedent(text).strip()


# ============================================================================================
# Shell scripts, graded on fixed scenarios with exact expected output
# ============================================================================================

LOGSUM_TEMPLATE = r'''#!/bin/bash
# logsum.sh DIR -- line counts of the .log files directly inside DIR, then their total.
set -u
dir="${1:?usage: logsum.sh DIR}"
total=0
rows=()
@@loop@@
    @@guard@@
    @@count@@
    @@name@@
    rows+=("$name"$'\t'"$n")
    total=$((total + n))
done
@@emit@@
'''


def _logsum(rng: random.Random) -> dict:
    label = rng.choice(("TOTAL", "ALL", "SUM"))
    sites = [
        BugSite("loop", 'for f in "$dir"/*.log; do',
                ('for f in $(ls "$dir"/*.log 2>/dev/null); do',
                 "find \"$dir\" -maxdepth 1 -name '*.log' | while IFS= read -r f; do"),
                "file names are word-split, or the loop runs in a pipeline subshell and loses its results",
                "The numbers are wrong for some folders."),
        BugSite("guard", '[ -f "$f" ] || continue', ('[ -e "$f" ] || continue',),
                "a directory whose name ends in .log is treated as a file",
                "It breaks on one of our archive folders."),
        BugSite("count", "n=$(grep -c '' < \"$f\")", ('n=$(wc -l < "$f")',),
                "a last line without a trailing newline is not counted",
                "Some files are reported one line short."),
        BugSite("name", 'name=$(basename -- "$f")', ("name=$(basename $f)",),
                "unquoted basename mangles names containing spaces",
                "File names with spaces come out truncated."),
        BugSite("emit",
                f"if [ \"${{#rows[@]}}\" -gt 0 ]; then\n    printf '%s\\n' \"${{rows[@]}}\" | LC_ALL=C sort\nfi\n"
                f"printf '{label}\\t%s\\n' \"$total\"",
                (f"printf '%s\\n' \"${{rows[@]}}\" | LC_ALL=C sort\nprintf '{label}\\t%s\\n' \"$total\"",
                 f"{{ printf '%s\\n' \"${{rows[@]}}\"; printf '{label}\\t%s\\n' \"$total\"; }} | LC_ALL=C sort"),
                "the total line is sorted in with the file lines, or an empty folder prints a blank line",
                "The summary line is sometimes in the wrong place, or there is a stray empty line."),
    ]
    spec = f"""
        `bash /app/logsum.sh DIR` reports, for every regular file directly inside DIR whose name ends in
        `.log` (names may contain spaces; names starting with `.` are skipped; directories are not
        files), one line `<file name><TAB><number of lines>`, sorted by file name in byte order. A last
        line without a trailing newline still counts as a line; an empty file has 0 lines. After them
        comes one line `{label}<TAB><sum of all counts>`. A folder with no such files prints only
        `{label}<TAB>0`. Exit status 0.
    """

    def expected(files: dict) -> tuple[str, None]:
        rows, total = [], 0
        for name, content in sorted(files.items()):
            if content is None or not name.endswith(".log") or name.startswith(".") or "/" in name:
                continue
            n = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
            rows.append(f"{name}\t{n}")
            total += n
        return "".join(r + "\n" for r in sorted(rows, key=lambda r: r.encode())) + f"{label}\t{total}\n", None

    def random_files(r: random.Random) -> dict:
        stems = ["app", "web 1", "db", "z-last", "Alpha", "nightly run", "b", "error_2024"]
        files = {}
        for stem in r.sample(stems, r.randint(1, 5)):
            lines = [r.choice(("ok", "warn: disk", "error x", "", "  indented")) for _ in range(r.randint(0, 6))]
            text = "\n".join(lines)
            if lines and r.random() < 0.7:
                text += "\n"
            files[f"{stem}.log"] = text
        if r.random() < 0.5:
            files["notes.txt"] = "a\nb\n"
        if r.random() < 0.3:
            files[".hidden.log"] = "secret\n"
        return files

    edges = [
        {},
        {"a.log": "1\n2\n", "b.log": "x"},
        {"web server.log": "1\n2\n3\n", "db.log": "q\n"},
        {"old.log": None, "old.log/inner.log": "1\n", "cur.log": "a\nb\n"},
        {"x.log": "", "y.log": "one\ntwo"},
        {"readme.txt": "not a log\n"},
    ]
    return {"file": "logsum.sh", "template": LOGSUM_TEMPLATE, "sites": sites, "P": {"label": label},
            "spec": spec, "expected": expected, "random_files": random_files, "edges": edges,
            "args": ["{dir}"], "check_listing": False}


RENAME_TEMPLATE = r'''#!/bin/bash
# rename_ext.sh DIR FROM TO -- rename DIR/*.FROM to *.TO, never overwriting anything.
set -u
dir="${1:?usage: rename_ext.sh DIR FROM TO}"
from="${2:?usage: rename_ext.sh DIR FROM TO}"
to="${3:?usage: rename_ext.sh DIR FROM TO}"
count=0
@@list@@
for name in "${names[@]}"; do
    @@stem@@
    @@exists@@
        printf 'skip %s\n' "$name"
        continue
    fi
    @@move@@
    printf '%s -> %s\n' "$name" "$new"
    count=$((count + 1))
done
printf 'renamed %d\n' "$count"
'''


def _rename(rng: random.Random) -> dict:
    src_ext, dst_ext = rng.choice((("txt", "md"), ("jpeg", "jpg"), ("yml", "yaml"), ("htm", "html")))
    sites = [
        BugSite("list",
                "mapfile -t names < <(for f in \"$dir\"/*.\"$from\"; do [ -f \"$f\" ] && printf '%s\\n' \"${f##*/}\"; "
                "done | LC_ALL=C sort)",
                ('names=($(cd "$dir" && ls -- *."$from" 2>/dev/null))',),
                "the file list is word-split on spaces (and includes directories)",
                "Files with spaces in their names are not renamed."),
        BugSite("stem", 'new="${name%."$from"}.$to"', ('new="${name%%.*}.$to"',),
                "everything after the first dot is replaced, not just the final extension",
                "`report.v2.FROM` came out with the wrong name."),
        BugSite("exists", 'if [ -e "$dir/$new" ]; then', ('if [ -e "$new" ]; then',),
                "the collision check looks in the current directory instead of DIR, so files get overwritten",
                "We lost a file: it was overwritten by a rename."),
        BugSite("move", 'mv -- "$dir/$name" "$dir/$new"', ("mv $dir/$name $dir/$new",),
                "unquoted mv arguments break on names with spaces",
                "It says it renamed a file but the file still has its old name."),
    ]
    spec = f"""
        `bash /app/rename_ext.sh DIR FROM TO` renames every regular file directly inside DIR whose name
        ends in `.FROM` (names may contain spaces and several dots; names starting with `.` and
        directories are left alone) by replacing only that final `.FROM` with `.TO`. It handles the
        files in byte order of their names. If the new name already exists in DIR (as anything), the
        file is left as it is and the line `skip <name>` is printed; otherwise it is renamed and
        `<old name> -> <new name>` is printed. Finally it prints `renamed <count>`. It never overwrites
        or deletes anything. Exit status 0. We run it as e.g. `bash /app/rename_ext.sh /data/docs {src_ext} {dst_ext}`.
    """

    def expected(files: dict) -> tuple[str, list]:
        state = {k: v for k, v in files.items() if "/" not in k}
        out, count = [], 0
        names = sorted((n for n, c in state.items() if c is not None and n.endswith("." + src_ext)
                        and not n.startswith(".")), key=lambda n: n.encode())
        for name in names:
            new = name[: -len(src_ext) - 1] + "." + dst_ext
            if new in state:
                out.append(f"skip {name}")
                continue
            state[new] = state.pop(name)
            out.append(f"{name} -> {new}")
            count += 1
        out.append(f"renamed {count}")
        listing = sorted([n, c] for n, c in state.items())
        return "".join(line + "\n" for line in out), listing

    def random_files(r: random.Random) -> dict:
        stems = ["notes", "meeting 2", "a.b", "v1.2.3", "-dash", "plan", "Zeta", "photo final"]
        files = {}
        for stem in r.sample(stems, r.randint(1, 5)):
            files[f"{stem}.{src_ext}"] = f"content of {stem}\n"
            if r.random() < 0.25:
                files[f"{stem}.{dst_ext}"] = "already here\n"
        if r.random() < 0.4:
            files[f"keep.{dst_ext}"] = "other\n"
        if r.random() < 0.3:
            files[f".hidden.{src_ext}"] = "dot\n"
        return files

    edges = [
        {},
        {f"a.{src_ext}": "1\n", f"b.{src_ext}": "2\n"},
        {f"my notes.{src_ext}": "spaces\n", f"x.{src_ext}": "x\n"},
        {f"report.v2.{src_ext}": "r\n", f"report.{dst_ext}": "existing\n"},
        {f"a.{src_ext}": "new\n", f"a.{dst_ext}": "keep me\n"},
        {f"dir.{src_ext}": None, f"dir.{src_ext}/inside.{src_ext}": "i\n", f"f.{src_ext}": "f\n"},
        {f"x.{src_ext}": "x\n", f"x.{dst_ext}": None},
        {f".cfg.{src_ext}": "hidden\n", f"plain.{src_ext}": "p\n"},
    ]
    return {"file": "rename_ext.sh", "template": RENAME_TEMPLATE, "sites": sites,
            "P": {"from": src_ext, "to": dst_ext}, "spec": spec, "expected": expected,
            "random_files": random_files, "edges": edges, "args": ["{dir}", src_ext, dst_ext],
            "check_listing": True}


DEDUPE_TEMPLATE = r'''#!/bin/bash
# dedupe.sh FILE -- print the lines of FILE without repeats, first occurrence wins, order kept.
set -u
file="${1:?usage: dedupe.sh FILE}"
declare -A seen=()
@@read@@
    @@blank@@
    @@key@@
    if [[ -z "${seen[$key]+x}" ]]; then
        seen[$key]=1
        @@emit@@
    fi
done < "$file"
'''


def _dedupe(rng: random.Random) -> dict:
    fold = rng.random() < 0.5
    sites = [
        BugSite("read", 'while IFS= read -r line || [ -n "$line" ]; do',
                ("while read -r line; do", "while read line; do"),
                "lines lose surrounding spaces (and backslashes), and an unterminated last line is dropped",
                "Indented lines come out changed, and sometimes the last line goes missing."),
        BugSite("blank", "[[ $line =~ ^[[:space:]]*$ ]] && continue", ('[ -z "$line" ] && continue',),
                "lines of only spaces are not treated as blank",
                "Lines that look empty still show up in the output."),
        BugSite("key", 'key="${line,,}"' if fold else 'key="$line"',
                ('key="$line"' if fold else 'key="${line,,}"',),
                "lines are compared with the wrong case sensitivity",
                "Duplicates are not detected the way we specified." if fold
                else "Lines that differ only in case are wrongly treated as duplicates."),
        BugSite("emit", "printf '%s\\n' \"$line\"", ("echo $line", 'echo "$line"'),
                "echo mangles lines (collapses spaces, expands globs, or eats -n/-e)",
                "A few lines are printed differently from how they are in the file."),
    ]
    spec = f"""
        `bash /app/dedupe.sh FILE` prints the lines of FILE with repeats removed: the first occurrence
        of each line is kept, in the original order. Lines are compared exactly as they are in the file
        (leading/trailing spaces, backslashes and everything else count){", except that ASCII letter case is ignored (the first spelling seen is printed)" if fold else ", and letter case matters"}.
        Blank lines (empty or only spaces/tabs) are dropped. Every printed line is printed exactly as it
        appears in the file, followed by a newline; a last line without a trailing newline is still a
        line. Exit status 0.
    """

    def expected(files: dict) -> tuple[str, None]:
        text = files["input.txt"]
        seen, out = set(), []
        for line in text.split("\n")[:-1] + ([text.split("\n")[-1]] if not text.endswith("\n") else []):
            if line.strip(" \t") == "":
                continue
            key = line.lower() if fold else line
            if key not in seen:
                seen.add(key)
                out.append(line)
        return "".join(line + "\n" for line in out), None

    pool = ["alpha", "Alpha", "  indented", "trailing  ", "two  spaces", "back\\slash", "C:\\temp\\new",
            "-n", "-e", "*", "a*b", "x?", "[x]", "tab\there", "ALPHA", "beta", "   ", "", "\t", "$HOME", "a;b"]

    def random_files(r: random.Random) -> dict:
        lines = [r.choice(pool) for _ in range(r.randint(0, 14))]
        text = "\n".join(lines)
        if lines and r.random() < 0.8:
            text += "\n"
        return {"input.txt": text}

    edges = [
        {"input.txt": ""},
        {"input.txt": "  lead\nlead\n  lead\n"},
        {"input.txt": "a\nb\na\nlast"},
        {"input.txt": "x\n   \n\t\nx\n"},
        {"input.txt": "Apple\napple\nAPPLE\n"},
        {"input.txt": "two  spaces\n-n\nback\\slash\n*\n"},
    ]
    return {"file": "dedupe.sh", "template": DEDUPE_TEMPLATE, "sites": sites, "P": {"ignore_case": fold},
            "spec": spec, "expected": expected, "random_files": random_files, "edges": edges,
            "args": ["{dir}/input.txt"], "check_listing": False}


SHELL_SCRIPTS = {"logsum": _logsum, "rename_ext": _rename, "dedupe": _dedupe}


class ShellScriptFix(TaskFamily):
    """A bash script with planted quoting/ordering/subshell bugs; the agent fixes it in place and is
    graded on fixed scenarios (files with spaces, empty folders, collisions...) with exact output."""

    name = "shell_script_fix"
    method = (
        ('Read the script against the specification and test it on a scratch folder built to break it: names '
         'with spaces and several dots, a directory with a matching name, an empty folder, a file without a '
         'final newline, collisions, lines with spaces, backslashes or a lone `-n`. Run it from another '
         'directory. Quote every expansion, loop over globs rather than `ls` output, keep state out of '
         'pipeline subshells, and print with printf.', None),
    )
    domains = ("debugging",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "fix a bash script with quoting, globbing and ordering bugs; checked on exact scenario output"
    skill_types = ("crash_analysis",)
    skills = ("find the first line where state goes wrong",)
    languages = ("bash",)
    command_complexities = ("bash_only",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        script_name = rng.choice(sorted(SHELL_SCRIPTS))
        script = SHELL_SCRIPTS[script_name](rng)
        sites: list[BugSite] = script["sites"]
        planted = _choose_bugs(rng, sites, level)
        source = plant(script["template"], sites, planted)
        path = f"/app/{script['file']}"

        file_sets = list(script["edges"])
        for _ in range((3, 5, 7, 9)[level]):
            file_sets.append(script["random_files"](rng))
        scenarios = []
        for files in file_sets:
            stdout, listing = script["expected"](files)
            scenarios.append({"files": files, "args": script["args"], "stdout": stdout,
                              "listing": listing if script["check_listing"] else None})

        by_key = {s.key: s for s in sites}
        reports = [by_key[k].report for k in sorted(planted)]
        rng.shuffle(reports)
        shown = reports if level <= 1 else reports[:1]
        more = "" if level <= 1 else "There are more problems than the one reported."
        report_md = "\n".join(f"> {r}" for r in shown)
        instruction = instruction_frame(
            sig, f"Fix {script['file']}",
            f"""
            `{path}` is a small script our team relies on. It is supposed to behave like this:

            {indent_block(_dedent(script["spec"]), 12)}

            Users have reported problems:

            {indent_block(report_md, 12)}

            {more}

            Fix the script in place (keep its name and arguments; bash and coreutils only) so that it
            meets the specification for any folder or file contents. It will be run as
            `bash {path} ...` from a different working directory than the data.
            """,
            [f"`{path}`: fixed, behaving exactly as specified."],
        )
        test_initial = pytest_module(f"""
            import os

            def test_script_present():
                assert os.path.isfile("{path}")
        """)
        test_final = pytest_module(f"""
            import os
            import subprocess

            import pytest

            SCRIPT = {path!r}
            SCENARIOS = {scenarios!r}
            ENV = {{"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}}


            def _materialise(root, files):
                for rel in sorted(files):
                    target = root / rel
                    if files[rel] is None:
                        target.mkdir(parents=True, exist_ok=True)
                    else:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(files[rel].encode("utf-8"))


            def _listing(root):
                out = []
                for entry in sorted(os.listdir(root)):
                    full = root / entry
                    out.append([entry, None if full.is_dir() else full.read_bytes().decode("utf-8")])
                return out


            @pytest.mark.parametrize("index", range(len(SCENARIOS)))
            def test_scenario(index, tmp_path):
                sc = SCENARIOS[index]
                data = tmp_path / "data"
                data.mkdir()
                work = tmp_path / "elsewhere"
                work.mkdir()
                _materialise(data, sc["files"])
                args = [a.replace("{{dir}}", str(data)) for a in sc["args"]]
                res = subprocess.run(["/bin/bash", SCRIPT, *args], cwd=str(work), env=ENV,
                                     capture_output=True, timeout=30)
                where = f"files {{sc['files']!r}} args {{sc['args']}}"
                assert res.returncode == 0, f"{{where}}: exit {{res.returncode}}: {{res.stderr.decode(errors='replace')[-800:]}}"
                got = res.stdout.decode("utf-8", errors="replace")
                assert got == sc["stdout"], f"{{where}}\\ngot  {{got!r}}\\nwant {{sc['stdout']!r}}"
                if sc["listing"] is not None:
                    assert _listing(data) == sc["listing"], f"{{where}}: folder left as {{_listing(data)!r}}"
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script(f"cp /tmp/env/fixtures/{script['file']} {path}"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=_patch_oracle(path, planted, sites),
            truth=_truth(planted, sites, {"script": script["file"], "parameters": script["P"]}),
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures={script["file"]: source.encode()},
            output_paths=[path],
        )


FAMILIES = [PythonEdgeCaseFix, ShellScriptFix]
