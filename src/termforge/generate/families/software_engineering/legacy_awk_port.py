"""Port a legacy awk formatter to Python, checked for byte-identical output on fuzzed inputs."""

from __future__ import annotations

import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                      instruction_frame, pytest_module)
from termforge.generate.families.package_files import family_template


INVALID_TOKENS = ("invalid", "ERR", "?", "n/a", "bad-input")


def _awk_validate(q: dict, regex: str) -> list[str]:
    """The numeric test on the whole record ($0) or, more leniently, on its first field ($1)."""
    field = "$1" if q["first_field"] else "$0"
    return [f"    if ({field} !~ /{regex}/) {{ print {_awk_str(q['invalid'])}; next }}", f"    v = {field} + 0"]


def _python_validate(q: dict) -> str:
    # awk's default field splitting drops leading and trailing blanks and splits on runs of them;
    # on printable ASCII that is exactly str.split().
    token = ("    fields = line.split()\n    token = fields[0] if fields else \"\"\n" if q["first_field"]
             else "    token = line\n")
    return (token + "    if not VALID.fullmatch(token):\n"
            f"        return {q['invalid']!r}\n"
            "    v = float(token)\n")


def _awk_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def humansize_params(rng: random.Random, p: float) -> dict:
    base = rng.choice((1000, 1024))
    if base == 1000:
        units = ["B", "kB", "MB", "GB", "TB", "PB", "EB"]
    else:
        units = rng.choice((["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"], ["B", "K", "M", "G", "T", "P", "E"]))
    decimals = rng.choice((0, 1, 1, 2))
    return {
        "base": base, "units": units, "decimals": decimals,
        "promote": rng.choice(("0.9", "0.95")) if rng.random() < p else "1",
        "trim": decimals > 0 and rng.random() < p,
        "sep": rng.choice((" ", "")),
        "negatives": rng.random() < p,
        "invalid": rng.choice(INVALID_TOKENS),
        "first_field": rng.random() < p,
        "max_digits": 18,
    }


def humansize_awk(tool: str, q: dict) -> str:
    regex = "^-?[0-9]+$" if q["negatives"] else "^[0-9]+$"
    lines = [
        "#!/usr/bin/awk -f",
        f"# {tool}: byte counts -> human-readable sizes, one output line per input line.",
        "BEGIN {",
        f"    base = {q['base']}",
        f"    limit = {q['base']} * {q['promote']}",
        f"    nunits = split({_awk_str(' '.join(q['units']))}, unit, \" \")",
        "}",
        "{",
        *_awk_validate(q, regex),
        '    sign = ""',
    ]
    if q["negatives"]:
        lines.append('    if (v < 0) { sign = "-"; v = -v }')
    lines += [
        "    i = 1",
        "    while (v >= limit && i < nunits) { v = v / base; i++ }",
        "    if (i == 1) {",
        '        out = sprintf("%d", v)',
        "    } else {",
        f'        out = sprintf("%.{q["decimals"]}f", v)',
    ]
    if q["trim"]:
        lines += ['        sub(/0+$/, "", out)', '        sub(/\\.$/, "", out)']
    lines += ["    }", f"    print sign out {_awk_str(q['sep'])} unit[i]", "}"]
    return "\n".join(lines) + "\n"


def humansize_python(q: dict) -> str:
    """The reference: the same double-precision steps as the awk script, line for line."""
    trim = ('        out = re.sub(r"0+$", "", out)\n        out = re.sub(r"\\.$", "", out)\n'
            if q["trim"] else "")
    negative = ('    if v < 0:\n        sign = "-"\n        v = -v\n' if q["negatives"] else "")
    return (
        f"VALID = re.compile(r\"{'-?' if q['negatives'] else ''}[0-9]+\")\n"
        f"UNITS = {q['units']!r}\n"
        f"BASE = {q['base']}\n"
        f"LIMIT = {q['base']} * {q['promote']}\n\n\n"
        "def convert(line):\n"
        f"{_python_validate(q)}"
        '    sign = ""\n'
        f"{negative}"
        "    i = 0\n"
        "    while v >= LIMIT and i < len(UNITS) - 1:\n"
        "        v = v / BASE\n"
        "        i += 1\n"
        "    if i == 0:\n"
        '        out = "%d" % v\n'
        "    else:\n"
        f'        out = "%.{q["decimals"]}f" % v\n'
        f"{trim}"
        f"    return sign + out + {q['sep']!r} + UNITS[i]\n"
    )


def duration_params(rng: random.Random, p: float) -> dict:
    days = rng.random() < 0.7
    units = ([86400] if days else []) + [3600, 60, 1]
    style = rng.choice(("compact", "spaced", "words")) if rng.random() < p else rng.choice(("compact", "spaced"))
    short = (["d"] if days else []) + ["h", "m", "s"]
    if style == "words":
        one = (["day"] if days else []) + ["hour", "minute", "second"]
        many = [w + "s" for w in one]
        glue, sep, zero = " ", rng.choice((", ", " ")), rng.choice(("0 seconds", "now"))
    else:
        one = many = short
        glue, sep, zero = "", ("" if style == "compact" else " "), rng.choice(("0s", "now"))
    negative = rng.choice(("minus", "ago")) if rng.random() < p else "invalid"
    return {"sizes": units, "one": one, "many": many, "glue": glue, "sep": sep, "zero": zero,
            "max_parts": rng.randint(1 if p > 0.5 else 2, len(units)), "negative": negative,
            "invalid": rng.choice(INVALID_TOKENS), "first_field": rng.random() < p, "max_digits": 12}


def duration_awk(tool: str, q: dict) -> str:
    regex = "^[0-9]+$" if q["negative"] == "invalid" else "^-?[0-9]+$"
    lines = [
        "#!/usr/bin/awk -f",
        f"# {tool}: seconds -> a readable duration, one output line per input line.",
        "BEGIN {",
        f"    nunits = split({_awk_str(' '.join(map(str, q['sizes'])))}, size, \" \")",
        f"    split({_awk_str(' '.join(q['one']))}, one, \" \")",
        f"    split({_awk_str(' '.join(q['many']))}, many, \" \")",
        f"    glue = {_awk_str(q['glue'])}",
        f"    sep = {_awk_str(q['sep'])}",
        f"    maxparts = {q['max_parts']}",
        "}",
        "{",
        *_awk_validate(q, regex),
        "    neg = 0",
        "    if (v < 0) { neg = 1; v = -v }",
        f"    if (v == 0) {{ print {_awk_str(q['zero'])}; next }}",
        '    out = ""',
        "    shown = 0",
        "    for (k = 1; k <= nunits && shown < maxparts; k++) {",
        "        q = int(v / size[k])",
        "        v = v - q * size[k]",
        "        if (q > 0) {",
        '            part = sprintf("%d", q) glue (q == 1 ? one[k] : many[k])',
        '            out = (shown ? out sep : "") part',
        "            shown++",
        "        }",
        "    }",
    ]
    if q["negative"] == "minus":
        lines.append('    if (neg) out = "-" out')
    elif q["negative"] == "ago":
        lines.append('    if (neg) out = out " ago"')
    lines += ["    print out", "}"]
    return "\n".join(lines) + "\n"


def duration_python(q: dict) -> str:
    negative = {"minus": '    if neg:\n        out = "-" + out\n',
                "ago": '    if neg:\n        out = out + " ago"\n'}.get(q["negative"], "")
    return (
        f"VALID = re.compile(r\"{'' if q['negative'] == 'invalid' else '-?'}[0-9]+\")\n"
        f"SIZES = {q['sizes']!r}\n"
        f"ONE = {q['one']!r}\n"
        f"MANY = {q['many']!r}\n\n\n"
        "def convert(line):\n"
        f"{_python_validate(q)}"
        "    neg = v < 0\n"
        "    if neg:\n"
        "        v = -v\n"
        "    if v == 0:\n"
        f"        return {q['zero']!r}\n"
        "    parts = []\n"
        "    for size, one, many in zip(SIZES, ONE, MANY):\n"
        f"        if len(parts) >= {q['max_parts']}:\n"
        "            break\n"
        "        count = int(v / size)\n"
        "        v = v - count * size\n"
        "        if count > 0:\n"
        f"            parts.append(\"%d\" % count + {q['glue']!r} + (one if count == 1 else many))\n"
        f"    out = {q['sep']!r}.join(parts)\n"
        f"{negative}"
        "    return out\n"
    )


TOOLS = {
    "humansize": (humansize_params, humansize_awk, humansize_python,
                  "byte counts into human-readable sizes", "whole numbers of bytes"),
    "fmtduration": (duration_params, duration_awk, duration_python,
                    "second counts into readable durations", "whole numbers of seconds"),
}

# Input generation lives in the tests (fixed seed), shared by the initial-state self-check (the
# legacy script agrees with the reference) and the final grading of the port.
FUZZ_INPUTS = family_template(__name__, "fuzz_inputs.py.txt")


def _anchors(tool: str, q: dict) -> list[int]:
    if tool == "humansize":
        out = []
        limit_fraction = float(q["promote"])
        for k in range(1, len(q["units"])):
            power = q["base"] ** k
            out += [power, int(power * limit_fraction), int(power * (1 - 0.5 * 10 ** -q["decimals"] / q["base"]))]
        return sorted(set(v for v in out if len(str(v)) <= q["max_digits"]))
    sizes = q["sizes"]
    out = [s for s in sizes] + [sizes[0] * 2, sizes[0] + sizes[-1], sum(sizes), 90061, 3599 * 24]
    return sorted(set(out))


class LegacyAwkPort(TaskFamily):
    """Port a legacy awk formatter to Python; graded against a reference on fuzzed inputs."""

    knobs = DifficultyKnobs(feature_probability=(0.2, 0.4, 0.6, 0.8), fuzz_lines=(300, 500, 800, 1000))
    axes = FamilyAxes(name="legacy_awk_port", domains=("software_engineering",), verifier_kinds=("fuzz_equivalence",),
                      fixture_kinds=("text_only",), skill_types=("refactoring",),
                      skills=("keep behaviour identical while restructuring code",), languages=("python", "awk"),
                      command_complexities=("bash_code",),
                      summary="port a legacy awk formatter to Python with byte-identical output on fuzzed inputs")
    method = (
        ('Read the awk script line by line and mirror its semantics, not its intent: awk numbers are doubles, '
         'so parse with float() and divide in floating point in the same order; printf-style formatting (%d, '
         "%.Nf) in Python rounds exactly like awk's; the regex decides what counts as malformed before any "
         'conversion; sub() trims only what its pattern matches; read lines by splitting on newline only. Then '
         'build a differential test: generate many inputs around unit boundaries, rounding carries (values '
         'just below a power of the base), signs, zero, leading zeros and junk, run both programs and diff '
         'until there is no difference.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        knobs = self.knobs.at(complexity_level(sig))
        p = knobs.feature_probability
        tool = rng.choice(sorted(TOOLS))
        make_params, make_awk, make_python, what, inputs = TOOLS[tool]
        q = make_params(rng, p)
        awk_src = make_awk(tool, q)
        reference = make_python(q)
        anchors = _anchors(tool, q)
        seed = rng.randrange(1, 2**31)
        batches = 3
        batch = knobs.fuzz_lines // batches
        legacy = f"/app/legacy/{tool}.awk"
        port = f"/app/{tool}.py"
        header = (
            "import random\nimport re\nimport subprocess\n\n"
            f"SEED = {seed}\nBATCH = {batch}\nBATCHES = {batches}\nMAX_DIGITS = {q['max_digits']}\n"
            f"ANCHORS = {anchors!r}\n"
        )
        shared = header + "\n" + reference + "\n" + FUZZ_INPUTS
        edge_ns: dict = {}
        exec(compile(shared, "<fuzz>", "exec"), edge_ns)
        numeric = [v for v in edge_ns["special_values"]() if v.lstrip("-").isdigit()]
        edges = [[v, edge_ns["convert"](v)] for v in dict.fromkeys(numeric[:12])]

        instruction = instruction_frame(
            sig, f"Port the legacy `{tool}` awk script to Python",
            f"""
            `{legacy}` turns {what}; it is run as `awk -f {legacy} < input.txt` and prints one
            line per input line. We are retiring awk from this pipeline. Write `{port}`, a
            standalone Python 3 program run as `python3 {port} < input.txt`, whose stdout is
            byte-identical to the awk script's for every input: every line of the output must
            match, including malformed lines, spaces, signs, leading zeros, unit boundaries and rounding.
            Inputs are lines of printable ASCII; numeric lines have at most {q['max_digits']}
            digits ({inputs}).

            Use only the Python standard library and do not start other programs (no `subprocess`,
            `os.system`, `os.popen`, `os.exec*`, `os.spawn*` or `ctypes`). The port is graded
            against the legacy behaviour on many generated inputs.
            """,
            [f"`{port}`: reads stdin, writes stdout, behaves exactly like `{legacy}`."],
        )
        test_initial = pytest_module(
            shared + f'''

import os


def test_legacy_script_matches_reference():
    for lines in fuzz_batches()[:2]:
        compare_batch(["awk", "-f", "{legacy}"], lines)


def test_port_not_written_yet():
    assert not os.path.exists("{port}")
''')
        test_final = pytest_module(
            shared + f'''

import pytest

FORBIDDEN = re.compile(r"subprocess|os\\.system|os\\.popen|os\\.exec|os\\.spawn|posix_spawn|ctypes|\\bpty\\b")


def test_port_is_pure_python():
    with open("{port}") as fh:
        source = fh.read()
    assert not FORBIDDEN.search(source), "the port must not start other programs"


@pytest.mark.parametrize("index", range(BATCHES + 1))
def test_port_matches_reference(index):
    compare_batch(["/usr/bin/python3", "{port}"], fuzz_batches()[index])
''')
        program = ("#!/usr/bin/env python3\nimport re\nimport sys\n\n" + reference
                   + "\n\ndef main():\n    data = sys.stdin.read()\n    lines = data.split(\"\\n\")\n"
                   + "    if data.endswith(\"\\n\"):\n        lines.pop()\n"
                   + "    sys.stdout.write(\"\".join(convert(line) + \"\\n\" for line in lines))\n\n\n"
                   + "if __name__ == \"__main__\":\n    main()\n")
        # After writing the port the oracle diffs it against the legacy script, as an agent would.
        solve = bash_script(f"""
            cat > {port} <<'PY'
            {{program}}PY
            {{ seq 0 3000; seq -50 7 60; seq 1 997 999999; echo; echo 12x; echo -; }} > /tmp/port-check.txt
            awk -f {legacy} < /tmp/port-check.txt > /tmp/port-legacy.out
            python3 {port} < /tmp/port-check.txt > /tmp/port-new.out
            cmp /tmp/port-legacy.out /tmp/port-new.out
        """).replace("{program}", program)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script(f"mkdir -p /app/legacy && cp /tmp/env/fixtures/{tool}.awk {legacy}"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={
                # The legacy script shows every parameter to the agent, so they count as given.
                "given": {"legacy_script": legacy, "port": port, "legacy_parameters": q},
                "fuzz_seed": seed,
                "edge_expectations": [e for e in edges if not any(len(x) >= 6 and x in instruction for x in e)],
            },
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={f"{tool}.awk": awk_src.encode()},
            output_paths=[port],
            apt_packages=("mawk",),
        )


FAMILY = LegacyAwkPort
