"""A Python tool with planted edge-case bugs, graded by fuzzing against a reference
implementation held in the test."""

from __future__ import annotations

import inspect
import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     indent_block, instruction_frame, pytest_module)
from termforge.generate.families.debugging.planted_bugs import (EVERY_SITE, BugSite, draw_planted_program, patch_oracle,
                                                                planted_truth, program_and_symptoms)
from termforge.generate.families.package_files import family_template


INTERVALS_TEMPLATE = family_template(__name__, "merge_intervals.py.txt")


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


NUMSTATS_TEMPLATE = family_template(__name__, "numstats.py.txt")


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


TOPWORDS_TEMPLATE = family_template(__name__, "topwords.py.txt")


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


FLATCFG_TEMPLATE = family_template(__name__, "flatcfg.py.txt")


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

    knobs = DifficultyKnobs(planted_bugs=(1, 2, 3, EVERY_SITE), random_cases=(10, 12, 16, 20))
    axes = FamilyAxes(name="python_edge_case_fix", domains=("debugging",), verifier_kinds=("fuzz_equivalence",),
                      fixture_kinds=("text_only",), skill_types=("crash_analysis", "logic_errors"),
                      skills=("reproduce a crash with the smallest possible input",
                              "find the first line where state goes wrong"), languages=("python",),
                      command_complexities=("bash_code",),
                      summary="fix a Python CLI that crashes or misbehaves on edge-case input; checked by fuzzing")
    method = (
        ('Read the specification line by line against the code and list every input class it names (empty '
         'input, blank and comment lines, ties, repeated keys, boundaries). Build a tiny file for each, run '
         'the tool, and compare with what the specification says; fix the root cause in the code (no special-'
         'casing of test inputs), then rerun all the small files.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        drawn = draw_planted_program(rng, PYTHON_PROGRAMS, knobs.planted_bugs)
        prog, sites, planted, source, path = drawn
        fuzz_seed = rng.randrange(10**8, 10**9)
        n_random = knobs.random_cases
        ref, case = prog["ref"], prog["case"]

        example_text, example_args = case(random.Random(rng.randrange(2**32)), prog["P"])
        while example_text.count("\n") < 3:
            example_text, example_args = case(random.Random(rng.randrange(2**32)), prog["P"])
        example_out = ref(example_text, example_args, prog["P"])
        opening = program_and_symptoms(rng, drawn, level, "tool")
        arg_str = " ".join(example_args)
        instruction = instruction_frame(
            sig, f"Fix {prog['file']}",
            f"""
            {indent_block(opening, 12)}

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
            solve_sh=patch_oracle(path, planted, sites),
            truth=planted_truth(planted, sites, {"program": prog["file"], "parameters": prog["P"]})
            | {"fuzz_seed": fuzz_seed},
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={prog["file"]: source.encode(), "input.txt": example_text.encode("utf-8")},
            output_paths=[path],
        )


FAMILY = PythonEdgeCaseFix
