"""A nonlinear least-squares fit of an exponential decay with background, from a messy CSV."""

from __future__ import annotations

import math
import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import packaged_source, python_oracle


class DecayHalfLife(TaskFamily):
    """Fit N0 * 2^(-t/T) + B to noisy detector counts and report the half-life and background."""

    knobs = DifficultyKnobs(points=(70, 100, 140, 200))
    axes = FamilyAxes(name="decay_half_life_fit", domains=("scientific_computing",),
                      verifier_kinds=("metric_threshold",), fixture_kinds=("text_only",),
                      skill_types=("linear_algebra", "scientific_data_handling"),
                      skills=("fit a model by least squares", "carry physical units through a calculation"),
                      languages=("python",), anchors=("NumPy",), command_complexities=("bash_code",),
                      summary="nonlinear least-squares fit of an exponential decay with background from a messy CSV")
    method = (
        ('Clean the table first: skip notes and unreadable rows, drop repeated readings, and convert the time '
         'column to seconds using the unit in its header. The model is linear in N0 and B once the decay '
         'constant is fixed, so scan the decay constant over a wide logarithmic grid, solve the 2-parameter '
         'linear least squares at each value (weighting by 1/sqrt(count) for counting noise), refine around '
         'the best value, and convert the decay constant to a half-life with ln 2. Check the fit by looking at '
         'the residuals.', None),
    )

    HALF_LIFE_REL_TOL = 0.03
    BACKGROUND_ABS_TOL = 5.0
    BACKGROUND_REL_TOL = 0.1


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        half_life = round(rng.uniform(4.0, 90.0), 2)
        n0 = rng.randint(2000, 9000)
        background = rng.randint(30, 150)
        n_points = knobs.points
        span = half_life * rng.uniform(12.0, 16.0)
        step = span / n_points
        in_ms = lvl >= 2 and rng.random() < 0.5
        time_col = "t_ms" if in_ms else "t_s"
        counts_first = lvl == 3 and rng.random() < 0.5
        header = ["counts", time_col] if counts_first else [time_col, "counts"]

        rows: list[list[str]] = []
        for i in range(n_points):
            t = i * step
            expected = n0 * 2 ** (-t / half_life) + background
            count = max(0, round(expected + rng.gauss(0.0, math.sqrt(expected))))
            t_text = f"{t * 1000:.0f}" if in_ms else f"{t:.3f}"
            rows.append([str(count), t_text] if counts_first else [t_text, str(count)])
        lines = [",".join(r) for r in rows]
        if lvl >= 2:
            # Re-sent readings, unreadable readings and operator notes, as a real logger leaves them.
            for _ in range(n_points // 12):
                lines.insert(rng.randrange(len(lines)), rng.choice(lines))
            for _ in range(max(2, n_points // 25)):
                t_text = f"{rng.uniform(0, span) * (1000 if in_ms else 1):.3f}"
                bad = ["NA", t_text] if counts_first else [t_text, rng.choice(("NA", "", "overflow"))]
                lines.insert(rng.randrange(len(lines)), ",".join(bad))
            for note in ("# detector gain check", "# operator: shutter reopened"):
                lines.insert(rng.randrange(len(lines)), note)
            lines.insert(rng.randrange(len(lines)), "")
        if lvl == 3:
            rng.shuffle(lines)
        csv_text = ",".join(header) + "\n" + "\n".join(lines) + "\n"

        out = "/app/fit.json"
        messy = ""
        if lvl >= 2:
            messy = ("The logger is not tidy: some readings were re-sent (identical rows: count them "
                     "once), some are unreadable (skip any row whose count is not an integer), and "
                     "lines starting with `#` are operator notes. The time column's name gives its "
                     "unit (`t_s` is seconds, `t_ms` milliseconds).")
        body = f"""
            `/app/data/counts.csv` holds counts from a detector watching a decaying source. The
            expected count at time t is N0 * 2^(-t / T) + B, where T is the half-life and B a
            constant background; readings carry counting noise. The first line of the file names
            the columns. {messy}

            Estimate T (in seconds) and B. Grading is numeric: T must be within
            {self.HALF_LIFE_REL_TOL:.0%} (relative) of the source's true half-life, and B within
            max({self.BACKGROUND_ABS_TOL:g}, {self.BACKGROUND_REL_TOL:.0%} of B) counts of the true
            background.
            """
        instruction = instruction_frame(
            sig, "Half-life of a decaying source", body,
            [f'`{out}`: a JSON object `{{"half_life_s": <number>, "background": <number>}}`.'],
        )
        test_initial = packaged_source(__name__, "test_initial_state.py.txt", TIME_COL=time_col, OUT=out)
        test_final = packaged_source(__name__, "test_final_state.py.txt", OUT=out, HALF_LIFE=half_life,
                                     BACKGROUND=background, HALF_LIFE_REL_TOL=self.HALF_LIFE_REL_TOL,
                                     BACKGROUND_ABS_TOL=self.BACKGROUND_ABS_TOL,
                                     BACKGROUND_REL_TOL=self.BACKGROUND_REL_TOL)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt"))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/data && cp /tmp/env/fixtures/counts.csv /app/data/counts.csv"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={
                "given": {"half_life_rel_tol": self.HALF_LIFE_REL_TOL, "background_abs_tol": self.BACKGROUND_ABS_TOL,
                          "background_rel_tol": self.BACKGROUND_REL_TOL, "time_column": time_col},
                "half_life_s": half_life,
                "background": background,
                "n0": n0,
            },
            verifier_kind="metric_threshold",
            fixture_kind="text_only",
            fixtures={"counts.csv": csv_text.encode()},
            output_paths=[out],
            apt_packages=("python3-numpy",),
        )


FAMILY = DecayHalfLife
