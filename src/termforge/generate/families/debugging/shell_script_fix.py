"""A bash script with planted quoting, globbing and ordering bugs, graded on fixed scenarios with
exact expected output."""

from __future__ import annotations

import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     indent_block, instruction_frame, pytest_module)
from termforge.generate.families.debugging.planted_bugs import (EVERY_SITE, BugSite, draw_planted_program, patch_oracle,
                                                                planted_truth, program_and_symptoms)
from termforge.generate.families.package_files import family_template


LOGSUM_TEMPLATE = family_template(__name__, "logsum.sh.txt")


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


RENAME_TEMPLATE = family_template(__name__, "rename_ext.sh.txt")


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


DEDUPE_TEMPLATE = family_template(__name__, "dedupe.sh.txt")


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

    knobs = DifficultyKnobs(planted_bugs=(1, 2, 3, EVERY_SITE), random_file_sets=(3, 5, 7, 9))
    axes = FamilyAxes(name="shell_script_fix", domains=("debugging",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("crash_analysis",),
                      skills=("find the first line where state goes wrong",), languages=("bash",),
                      command_complexities=("bash_only",),
                      summary="fix a bash script with quoting, globbing and ordering bugs; checked on exact "
                              "scenario output")
    method = (
        ('Read the script against the specification and test it on a scratch folder built to break it: names '
         'with spaces and several dots, a directory with a matching name, an empty folder, a file without a '
         'final newline, collisions, lines with spaces, backslashes or a lone `-n`. Run it from another '
         'directory. Quote every expansion, loop over globs rather than `ls` output, keep state out of '
         'pipeline subshells, and print with printf.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        drawn = draw_planted_program(rng, SHELL_SCRIPTS, knobs.planted_bugs)
        script, sites, planted, source, path = drawn

        file_sets = list(script["edges"])
        for _ in range(knobs.random_file_sets):
            file_sets.append(script["random_files"](rng))
        scenarios = []
        for files in file_sets:
            stdout, listing = script["expected"](files)
            scenarios.append({"files": files, "args": script["args"], "stdout": stdout,
                              "listing": listing if script["check_listing"] else None})

        opening = program_and_symptoms(rng, drawn, level, "script")
        instruction = instruction_frame(
            sig, f"Fix {script['file']}",
            f"""
            {indent_block(opening, 12)}

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
            solve_sh=patch_oracle(path, planted, sites),
            truth=planted_truth(planted, sites, {"script": script["file"], "parameters": script["P"]}),
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures={script["file"]: source.encode()},
            output_paths=[path],
        )


FAMILY = ShellScriptFix
