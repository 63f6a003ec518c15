"""A CSV group-by query tool, graded by fuzzing it against a reference."""

from __future__ import annotations

import inspect
import random
import textwrap

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     indent_block, instruction_frame, pytest_module)
from termforge.generate.families.package_files import family_template


CSV_THEMES = {
    "shipments": {"keys": {"warehouse": ["Rotterdam", "Zürich", "Lyon", "Gdańsk", "Porto"],
                           "carrier": ["DHL", "UPS", "PostNL", "GLS"]},
                  "values": ["weight_kg", "cost_cents"], "text": "note", "id": "shipment_id"},
    "tickets": {"keys": {"team": ["Infra", "Billing", "Mobile", "Search", "Data"],
                         "priority": ["P1", "P2", "P3", "P4"]},
                "values": ["minutes_spent", "reopen_count"], "text": "summary", "id": "ticket_id"},
    "readings": {"keys": {"site": ["Ørsund", "Bergamo", "Kyoto", "Tarifa", "Nome"],
                          "sensor": ["temp", "humidity", "wind", "pressure"]},
                 "values": ["value", "battery_pct"], "text": "comment", "id": "reading_id"},
}
NOTE_WORDS = ("late", "fragile", "re-sent", "ok", "customs", "checked", "urgent", "see ticket", "n/a")


def csvq_reference(text: str, group: str, value: str, agg: str, where: str | None, top: int | None,
                   spec: dict) -> tuple[int, str]:
    """The specified behaviour of csvq.py: (exit status, stdout) for one invocation."""
    import csv as _csv
    import io as _io

    def norm(s):
        return s.strip().lower() if spec["normalize"] else s

    reader = _csv.reader(_io.StringIO(text, newline=""))
    rows = list(reader)
    header, body = rows[0], rows[1:]
    where_col = where_val = None
    if where is not None:
        where_col, _, where_val = where.partition("=")
    for col in (group, value, where_col):
        if col is not None and col not in header:
            return 2, ""
    gi, vi = header.index(group), header.index(value)
    wi = header.index(where_col) if where_col is not None else None
    groups: dict[str, list[int]] = {}
    for row in body:
        if wi is not None and norm(row[wi]) != norm(where_val):
            continue
        raw = row[vi].strip()
        if raw == "":
            if spec["empty"] == "skip":
                continue
            num = 0
        else:
            num = int(raw)
        groups.setdefault(norm(row[gi]), []).append(num)
    result = {}
    for key, nums in groups.items():
        result[key] = {"sum": sum(nums), "min": min(nums), "max": max(nums), "count": len(nums)}[agg]
    if spec["order"] == "key":
        ordered = sorted(result.items())
    else:
        ordered = sorted(result.items(), key=lambda kv: (-kv[1], kv[0]))
    if top is not None:
        ordered = ordered[:top]
    return 0, "".join(f"{k}{spec['sep']}{v}\n" for k, v in ordered)


def csvq_make_case(rng, theme: dict, spec: dict, shape: str = "random") -> tuple[str, str, str, str, str | None, int | None]:
    """One random invocation: a CSV text with its quirks and the arguments to run on it. shape
    "header_only" and "unknown_column" force the two edge cases every run must include."""
    import csv as _csv
    import io as _io

    keys = dict(theme["keys"])
    columns = [theme["id"], *keys, *theme["values"], theme["text"]]
    rng.shuffle(columns)

    def key_value(col):
        base = rng.choice(keys[col])
        if spec["normalize"] and rng.random() < 0.4:
            base = rng.choice((base.upper(), base.lower(), f" {base}", f"{base}  "))
        elif not spec["normalize"] and rng.random() < 0.15:
            base = base.lower()  # a distinct group when keys are compared exactly
        return base

    def note():
        words = rng.sample(spec["note_words"], rng.randint(1, 3))
        sep = rng.choice((" ", ", ", "; ", "\n", ' "quoted" '))
        return sep.join(words)

    rows = []
    n_rows = 0 if shape == "header_only" else rng.choice((0, 1, 2, 5, 12, 25, 40))
    for i in range(n_rows):
        row = {theme["id"]: str(1000 + i)}
        for col in keys:
            row[col] = key_value(col)
        for col in theme["values"]:
            roll = rng.random()
            row[col] = ("" if roll < 0.12 else f" {rng.randint(-20, 400)} " if roll < 0.2
                        else str(rng.randint(-20, 400)))
        row[theme["text"]] = note()
        rows.append([row[c] for c in columns])
    buf = _io.StringIO()
    quoting = rng.choice((_csv.QUOTE_MINIMAL, _csv.QUOTE_ALL))
    writer = _csv.writer(buf, quoting=quoting, lineterminator=rng.choice(("\n", "\r\n")))
    writer.writerow(columns)
    writer.writerows(rows)
    group = rng.choice(list(keys))
    value = rng.choice(theme["values"])
    if shape == "unknown_column" or rng.random() < 0.04:
        group = group + "_x"  # an unknown column: the tool must refuse
    agg = rng.choice(("sum", "min", "max", "count"))
    where = None
    if spec["where"] and rng.random() < 0.5:
        other = rng.choice([c for c in keys if c != group.removesuffix("_x")])
        where = f"{other}={rng.choice(keys[other])}"
    top = rng.randint(1, 4) if spec["top"] and rng.random() < 0.5 else None
    return buf.getvalue(), group, value, agg, where, top


CSVQ_ORACLE = family_template(__name__, "oracle.py.txt")


class CsvGroupByTool(TaskFamily):
    """Write a group-by query CLI over quirky CSV files; graded by fuzzing against a reference."""

    knobs = DifficultyKnobs(fuzz_cases=(12, 16, 20, 24))
    axes = FamilyAxes(name="csv_groupby_tool", domains=("data_querying",), verifier_kinds=("fuzz_equivalence",),
                      fixture_kinds=("text_only",), skill_types=("semi_structured_queries", "relational_aggregation"),
                      skills=("query CSV files by column name", "group rows and compute aggregates per group"),
                      languages=("python",), command_complexities=("bash_code",),
                      summary="implement a CSV group-by/aggregate query tool, checked on randomly generated CSV "
                              "files")
    method = (
        ("Parse with a real CSV parser (csv module with newline=''), never by splitting lines on commas: "
         'fields hold quoted commas, quotes and newlines. Look columns up by header name. Decide the empty-'
         'value and key-normalisation rules before aggregating, sort with an explicit key, and build small '
         'adversarial files (empty, header only, CRLF, quoted newlines, unknown column) to compare against the '
         'worked example.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        theme_name = rng.choice(sorted(CSV_THEMES))
        theme = CSV_THEMES[theme_name]
        spec = {
            "normalize": rng.random() < 0.5,
            "empty": rng.choice(("skip", "zero")),
            "order": rng.choice(("key", "value")),
            "sep": rng.choice(("\t", ",", " | ")),
            "where": level >= 2,
            "top": level >= 3,
            "note_words": list(NOTE_WORDS),
        }
        fuzz_seed = rng.randrange(10**8, 10**9)
        n_cases = knobs.fuzz_cases

        # The sample shown to the agent: a mid-sized file and one worked invocation.
        sample_rng = random.Random(rng.randrange(2**32))
        while True:
            text, group, value, agg, where, top = csvq_make_case(sample_rng, theme, spec)
            code, out = csvq_reference(text, group, value, agg, where, top, spec)
            if code == 0 and out.count("\n") >= 2:
                break
        example_args = _csvq_argv("/app/data/sample.csv", group, value, agg, where, top)

        sep_name = {"\t": "a tab", ",": "a comma", " | ": "` | ` (space, bar, space)"}[spec["sep"]]
        rules = [
            "The first row is a header; columns are addressed by header name and their order varies "
            "between files. Fields use standard CSV quoting (they may contain commas, doubled quotes "
            "and newlines). Files are UTF-8; line endings may be `\\n` or `\\r\\n`.",
            "Values are integers, possibly with surrounding spaces. "
            + ("A row whose value field is empty (or only spaces) is ignored entirely; a group left with "
               "no rows is not printed." if spec["empty"] == "skip"
               else "An empty (or all-space) value counts as `0` and the row still counts."),
            ("Group keys are normalised before grouping and printing: surrounding spaces stripped and "
             "lowercased (`' Lyon'` and `LYON` are the group `lyon`)." if spec["normalize"]
             else "Group keys are compared and printed exactly as stored (case and spaces matter)."),
            "`--agg` is one of `sum`, `min`, `max`, `count` (the number of rows counted in the group).",
            ("Output one line per group, `<key><SEP><aggregate>`, sorted by key (plain code-point order)."
             if spec["order"] == "key" else
             "Output one line per group, `<key><SEP><aggregate>`, sorted by the aggregate, largest first; "
             "ties by key in plain code-point order."),
            f"`<SEP>` is {sep_name}. A file with no data rows prints nothing. Exit status 0 on success.",
            "If `--group`, `--value` or the `--where` column names a column that is not in the header, "
            "print an error to stderr and exit with status 2.",
        ]
        if spec["where"]:
            rules.append("`--where COL=VALUE` (split at the first `=`) keeps only rows whose `COL` field equals "
                         "`VALUE`" + (", both normalised like group keys." if spec["normalize"] else " exactly."))
        if spec["top"]:
            rules.append("`--top N` prints only the first N lines of the sorted output.")
        usage = "python3 /app/csvq.py FILE --group COL --value COL --agg AGG"
        usage += " [--where COL=VALUE]" if spec["where"] else ""
        usage += " [--top N]" if spec["top"] else ""
        rules_md = "\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1))
        example_out = out.replace("\t", "<TAB>")
        instruction = instruction_frame(
            sig, "A group-by tool for our CSV exports",
            f"""
            We keep answering the same questions about our `{theme_name}` CSV exports by hand. Write a
            command-line tool:

            `{usage}`

            Rules:

            {indent_block(rules_md, 12)}

            A sample export is in `/app/data/sample.csv`. For example,
            `{example_args}` must print:

            ```
            {indent_block(example_out.rstrip(chr(10)), 12)}
            ```

            Your tool will be run with `/usr/bin/python3` (standard library only) on many other files.
            """,
            [f"`/app/csvq.py`: the tool, behaving exactly as specified."],
        )
        ref_src = inspect.getsource(csvq_reference)
        case_src = inspect.getsource(csvq_make_case)
        test_initial = pytest_module(f"""
            import os

            def test_sample_present():
                with open("/app/data/sample.csv", encoding="utf-8") as fh:
                    assert fh.readline().strip()

            def test_tool_not_written_yet():
                assert not os.path.exists("/app/csvq.py")
        """)
        test_final = _fuzz_test_module(
            ref_src + "\n\n" + case_src,
            setup=f"THEME = {theme!r}\nSPEC = {spec!r}\nSEED = {fuzz_seed}\nN_CASES = {n_cases}\n",
            body="""
                def _run(tmp_path, i, case):
                    text, group, value, agg, where, top = case
                    path = tmp_path / f"case{i}.csv"
                    path.write_bytes(text.encode("utf-8"))
                    argv = [str(path), "--group", group, "--value", value, "--agg", agg]
                    if where is not None:
                        argv += ["--where", where]
                    if top is not None:
                        argv += ["--top", str(top)]
                    res = subprocess.run(["/usr/bin/python3", "/app/csvq.py", *argv], capture_output=True,
                                         timeout=30, env=ENV, cwd=str(tmp_path))
                    return argv, res

                def test_tool_exists():
                    assert os.path.isfile("/app/csvq.py")

                def test_matches_reference_on_random_files(tmp_path):
                    rng = random.Random(SEED)
                    for i in range(N_CASES):
                        shape = ("header_only", "unknown_column")[i] if i < 2 else "random"
                        case = csvq_make_case(rng, THEME, SPEC, shape)
                        want_code, want_out = csvq_reference(*case, SPEC)
                        argv, res = _run(tmp_path, i, case)
                        where = f"case {i}: csvq.py {' '.join(argv)}\\nfile:\\n{case[0]!r}"
                        assert res.returncode == want_code, f"{where}\\nexit {res.returncode}, want {want_code}\\n{res.stderr.decode(errors='replace')[-800:]}"
                        if want_code == 0:
                            assert res.stdout.decode("utf-8", errors="replace") == want_out, f"{where}\\ngot {res.stdout!r}\\nwant {want_out!r}"
            """,
        )
        solve = bash_script(f"""
            cat > /app/csvq.py <<'PY'
            {indent_block(CSVQ_ORACLE.strip().replace("__SPEC__", repr({k: spec[k] for k in ("normalize", "empty", "order", "sep")})), 12)}
            PY
            python3 /app/csvq.py /app/data/sample.csv --group {group} --value {value} --agg {agg} >/dev/null
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/data && cp /tmp/env/fixtures/sample.csv /app/data/sample.csv"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"theme": theme_name, "rules": {k: spec[k] for k in ("normalize", "empty", "order",
                                                                                  "sep", "where", "top")}},
                   "fuzz_seed": fuzz_seed, "fuzz_cases": n_cases},
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={"sample.csv": text.encode("utf-8")},
            output_paths=["/app/csvq.py"],
        )


def _csvq_argv(path, group, value, agg, where, top) -> str:
    parts = ["python3 /app/csvq.py", path, "--group", group, "--value", value, "--agg", agg]
    if where is not None:
        parts += ["--where", f"'{where}'"]
    if top is not None:
        parts += ["--top", str(top)]
    return " ".join(parts)


def _fuzz_test_module(helpers: str, setup: str, body: str) -> str:
    """A final-state test: imports, the reference helpers verbatim, constants, then the tests."""
    head = ("import os\nimport random\nimport subprocess\n\n"
            "ENV = {\"PATH\": \"/usr/bin:/bin\", \"LANG\": \"C.UTF-8\", \"LC_ALL\": \"C.UTF-8\", \"PYTHONUTF8\": \"1\"}\n")
    return head + "\n" + setup + "\n\n" + helpers.strip() + "\n\n\n" + textwrap.dedent(body).strip() + "\n"


FAMILY = CsvGroupByTool
