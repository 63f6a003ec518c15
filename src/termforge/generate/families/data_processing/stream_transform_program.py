"""A stdin-to-stdout streaming transform with stateful per-key rules, fuzz-tested against a reference."""

from __future__ import annotations

import random
import textwrap

from termforge.generate.base import FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level, instruction_frame
from termforge.generate.families.package_files import family_template
from termforge.generate.families.sources import py_source


# Each streaming variant: the reference semantics and a random stream generator, as source text.
# The same text is exec'd here (to make the sample files) and embedded in the final-state test,
# so the samples the agent sees and the grader can never disagree.
STREAM_VARIANTS = {
    "window_sum": '''
def reference(lines):
    windows = {}
    out = []
    for raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        key, value = line.split(",")
        window = windows.setdefault(key, [])
        if RESETS and value == "reset":
            window.clear()
        else:
            window.append(int(value))
            del window[:-WINDOW]
        out.append(f"{key},{sum(window)}")
    return out


def random_stream(rng, size):
    keys = sorted({rng.choice("abcdefgh") + rng.choice(("", "x", "yz")) for _ in range(rng.randint(1, 6))})
    lines = []
    for _ in range(size):
        roll = rng.random()
        if roll < 0.04:
            lines.append(rng.choice(("", "   ", "\\t")))
            continue
        value = "reset" if RESETS and roll < 0.12 else str(rng.randint(-50, 99))
        lines.append(f"{rng.choice(keys)},{value}" + rng.choice(("", "", "", " ", "\\t")))
    return lines
''',
    "sessionize": '''
def reference(lines):
    last_seen, session = {}, {}
    out = []
    for raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        ts_text, user = line.split(" ")
        ts = int(ts_text)
        if FOLD_CASE:
            user = user.lower()
        if user not in last_seen or ts - last_seen[user] > GAP:
            session[user] = session.get(user, 0) + 1
        last_seen[user] = ts
        out.append(f"{ts} {user} {session[user]}")
    return out


def random_stream(rng, size):
    users = sorted({rng.choice(("ana", "bo", "cyd", "dee", "eli", "fay", "gus")) for _ in range(rng.randint(1, 5))})
    ts = rng.randint(0, 10 ** 6)
    last = {}
    lines = []
    for _ in range(size):
        if rng.random() < 0.04:
            lines.append(rng.choice(("", "  ")))
            continue
        user = rng.choice(users)
        if user in last and rng.random() < 0.35:
            # Land exactly on, just before or just after the gap boundary for this user.
            ts = max(ts, last[user] + GAP + rng.choice((-1, 0, 1)))
        else:
            ts += rng.choice((0, 0, 1, 2, rng.randint(0, 3 * GAP)))
        last[user] = ts
        shown = rng.choice((user, user.upper(), user.title())) if FOLD_CASE else user
        lines.append(f"{ts} {shown}" + rng.choice(("", "", " ")))
    return lines
''',
    "throttle": '''
def reference(lines):
    passed_at = {}
    out = []
    for raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        ts_text, key, _message = line.split(" ", 2)
        ts = int(ts_text)
        if FOLD_CASE:
            key = key.lower()
        if key not in passed_at or ts - passed_at[key] >= INTERVAL:
            passed_at[key] = ts
            out.append(line)
    return out


def random_stream(rng, size):
    keys = sorted({rng.choice(("disk", "cpu", "net", "auth", "dns", "tls")) for _ in range(rng.randint(1, 4))})
    words = ("high", "low", "retry", "timeout", "ok", "spike", "flap")
    ts = rng.randint(0, 10 ** 6)
    passed = {}
    lines = []
    for _ in range(size):
        if rng.random() < 0.04:
            lines.append(rng.choice(("", "   ")))
            continue
        key = rng.choice(keys)
        if key in passed and rng.random() < 0.35:
            ts = max(ts, passed[key] + INTERVAL + rng.choice((-1, 0, 1)))
        else:
            ts += rng.choice((0, 1, 2, rng.randint(0, 2 * INTERVAL)))
        shown = rng.choice((key, key.upper())) if FOLD_CASE else key
        message = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
        if shown.lower() not in passed or ts - passed[shown.lower()] >= INTERVAL:
            passed[shown.lower()] = ts
        lines.append(f"{ts} {shown} {message}" + rng.choice(("", "", " ")))
    return lines
''',
}

STREAM_ORACLES = {
    "window_sum": '''
import sys
from collections import defaultdict, deque

windows = defaultdict(lambda: deque(maxlen=WINDOW))
for raw in sys.stdin:
    line = raw.rstrip()
    if not line:
        continue
    key, value = line.split(",")
    if RESETS and value == "reset":
        windows[key].clear()
    else:
        windows[key].append(int(value))
    sys.stdout.write(f"{key},{sum(windows[key])}\\n")
''',
    "sessionize": '''
import sys

last_seen, session = {}, {}
for raw in sys.stdin:
    line = raw.rstrip()
    if not line:
        continue
    ts_text, user = line.split()
    ts = int(ts_text)
    user = user.lower() if FOLD_CASE else user
    if user not in last_seen or ts - last_seen[user] > GAP:
        session[user] = session.get(user, 0) + 1
    last_seen[user] = ts
    sys.stdout.write(f"{ts} {user} {session[user]}\\n")
''',
    "throttle": '''
import sys

passed_at = {}
for raw in sys.stdin:
    line = raw.rstrip()
    if not line:
        continue
    ts_text, key = line.split(" ", 2)[:2]
    ts = int(ts_text)
    key = key.lower() if FOLD_CASE else key
    if key not in passed_at or ts - passed_at[key] >= INTERVAL:
        passed_at[key] = ts
        sys.stdout.write(line + "\\n")
''',
}

_FUZZ_HARNESS = family_template(__name__, "fuzz_harness.py.txt")


class StreamTransform(TaskFamily):
    """Write a line-streaming transform (window sums, sessionizing, throttling); fuzzed against a reference."""

    axes = FamilyAxes(name="stream_transform_program", domains=("data_processing",),
                      verifier_kinds=("fuzz_equivalence",), fixture_kinds=("text_only",),
                      summary="write a stdin-to-stdout streaming transform with stateful per-key rules, fuzz-tested",
                      skill_types=("parsing_and_extraction",), skills=("parse fixed-width and delimited records",),
                      languages=("python",), command_complexities=("bash_code",))
    method = (
        ('Keep per-key state in a dictionary and process one line at a time. Pin down the boundary cases '
         'before coding: what happens exactly at the stated limit, the first event of a key, blank lines and '
         'trailing whitespace, and empty input. Then build your own generator of random inputs (including '
         'values landing exactly on the boundary) and compare against a slow, obviously-correct version, and '
         'against the sample files.', None),
    )

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        variant = rng.choice(sorted(STREAM_VARIANTS))
        params: dict = {"window_sum": {"WINDOW": rng.randint(2, 6), "RESETS": lvl >= 2},
                        "sessionize": {"GAP": rng.randint(10, 120), "FOLD_CASE": lvl >= 2},
                        "throttle": {"INTERVAL": rng.randint(5, 60), "FOLD_CASE": lvl >= 2}}[variant]
        source = STREAM_VARIANTS[variant]
        namespace: dict = dict(params)
        exec(source, namespace)  # noqa: S102 - our own constant source, the same text the test embeds
        sample_in = namespace["random_stream"](rng, (12, 16, 20, 24)[lvl])
        sample_out = namespace["reference"](sample_in)
        fuzz_seed = rng.randrange(10 ** 5)
        n_cases = (8, 12, 16, 20)[lvl]

        if variant == "window_sum":
            w = params["WINDOW"]
            spec_text = (
                f"Each input line is `<key>,<integer>`. For every such line print `<key>,<sum>` where "
                f"`<sum>` is the sum of the last {w} integers seen for that key, this line's included "
                f"(fewer if the key has appeared fewer times).")
            if params["RESETS"]:
                spec_text += (" A line `<key>,reset` empties that key's window and prints `<key>,0`; "
                              "the reset itself is not a value.")
        elif variant == "sessionize":
            g = params["GAP"]
            spec_text = (
                "Each input line is `<unix-seconds> <user>`, timestamps never decreasing. For every "
                "such line print `<unix-seconds> <user> <n>` where `<n>` is that user's session number "
                f"(1 for the user's first event). A user starts a new session when more than {g} "
                "seconds have passed since that user's previous event; a gap of exactly that long "
                "stays in the same session.")
            if params["FOLD_CASE"]:
                spec_text += " User names are case-insensitive: treat them, and print them, in lower case."
        else:
            t = params["INTERVAL"]
            spec_text = (
                "Each input line is `<unix-seconds> <key> <message...>`, timestamps never decreasing. "
                "Print a line (exactly as read, without trailing whitespace) only if its key has no "
                f"printed line within the last {t} seconds: a line passes when the key has never passed "
                f"or at least {t} seconds have gone by since the key's last printed line. Suppressed "
                "lines do not restart the clock.")
            if params["FOLD_CASE"]:
                spec_text += " Keys are case-insensitive (`DISK` and `disk` are one key); print lines unchanged."
        out = "/app/transform.py"
        body = (
            "We need a small streaming filter for our pipeline. " + spec_text + "\n\n"
            "Blank or whitespace-only input lines produce no output, and trailing whitespace is not part "
            "of a line's data. Read standard input to the end and write results to standard output, one "
            "line each, in input order. It will be run as `python3 /app/transform.py < input` on many "
            "generated inputs (including empty input and inputs of thousands of lines) and must match "
            "the intended behaviour exactly. `/app/samples/input.txt` and `/app/samples/expected.txt` "
            "show one example."
        )
        instruction = instruction_frame(sig, "A streaming transform", body,
                                        [f"`{out}`: the program (Python 3 standard library only)."])
        test_initial = py_source("""
            import os

            def test_samples_present():
                with open("/app/samples/input.txt") as fh:
                    assert fh.read().strip()
                assert os.path.exists("/app/samples/expected.txt")

            def test_no_program_yet():
                assert not os.path.exists("/app/transform.py")
            """)
        test_final = (py_source("__CONSTANTS__", **params, FUZZ_SEED=fuzz_seed, CASES=n_cases)
                      + "\n" + source.strip() + "\n\n" + _FUZZ_HARNESS.strip() + "\n")
        oracle_code = py_source("__CONSTANTS__", **params) + STREAM_ORACLES[variant].lstrip("\n")
        solve = bash_script("cat > /app/transform.py <<'PY'\n" + oracle_code + "PY\n"
                            "python3 /app/transform.py < /app/samples/input.txt | diff - /app/samples/expected.txt")
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/samples && cp /tmp/env/fixtures/samples/* /app/samples/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"variant": variant, **{k.lower(): v for k, v in params.items()}},
                   "fuzz_seed": fuzz_seed, "fuzz_cases": n_cases, "reference_source": textwrap.dedent(source).strip()},
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={"samples/input.txt": "".join(x + "\n" for x in sample_in).encode(),
                      "samples/expected.txt": "".join(x + "\n" for x in sample_out).encode()},
            output_paths=[out],
        )


FAMILY = StreamTransform
