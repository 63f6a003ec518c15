"""A stdin-to-stdout streaming transform with stateful per-key rules, fuzz-tested against a reference."""

from __future__ import annotations

import random
import textwrap

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.package_files import family_template
from termforge.generate.families.sources import packaged_source, py_source


# Each streaming variant: the reference semantics and a random stream generator, as source text.
# The same text is exec'd here (to make the sample files) and embedded in the final-state test,
# so the samples the agent sees and the grader can never disagree.
STREAM_VARIANTS = {variant: family_template(__name__, f"{variant}_reference.py.txt")
                   for variant in ("window_sum", "sessionize", "throttle")}

STREAM_ORACLES = {variant: family_template(__name__, f"{variant}_oracle.py.txt")
                  for variant in ("window_sum", "sessionize", "throttle")}

_FUZZ_HARNESS = family_template(__name__, "fuzz_harness.py.txt")


class StreamTransform(TaskFamily):
    """Write a line-streaming transform (window sums, sessionizing, throttling); fuzzed against a reference."""

    knobs = DifficultyKnobs(sample_events=(12, 16, 20, 24), fuzz_cases=(8, 12, 16, 20))
    axes = FamilyAxes(name="stream_transform_program", domains=("data_processing",),
                      verifier_kinds=("fuzz_equivalence",), fixture_kinds=("text_only",),
                      skill_types=("parsing_and_extraction",), skills=("parse fixed-width and delimited records",),
                      languages=("python",), command_complexities=("bash_code",),
                      summary="write a stdin-to-stdout streaming transform with stateful per-key rules, fuzz-tested")
    method = (
        ('Keep per-key state in a dictionary and process one line at a time. Pin down the boundary cases '
         'before coding: what happens exactly at the stated limit, the first event of a key, blank lines and '
         'trailing whitespace, and empty input. Then build your own generator of random inputs (including '
         'values landing exactly on the boundary) and compare against a slow, obviously-correct version, and '
         'against the sample files.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        variant = rng.choice(sorted(STREAM_VARIANTS))
        params: dict = {"window_sum": {"WINDOW": rng.randint(2, 6), "RESETS": lvl >= 2},
                        "sessionize": {"GAP": rng.randint(10, 120), "FOLD_CASE": lvl >= 2},
                        "throttle": {"INTERVAL": rng.randint(5, 60), "FOLD_CASE": lvl >= 2}}[variant]
        source = STREAM_VARIANTS[variant]
        namespace: dict = dict(params)
        exec(source, namespace)  # noqa: S102 - our own constant source, the same text the test embeds
        sample_in = namespace["random_stream"](rng, knobs.sample_events)
        sample_out = namespace["reference"](sample_in)
        fuzz_seed = rng.randrange(10 ** 5)
        n_cases = knobs.fuzz_cases

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
        test_initial = packaged_source(__name__, "test_initial_state.py.txt")
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
