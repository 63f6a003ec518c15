"""scientific_computing families: spectral analysis of a recording, and a nonlinear decay fit.

Also home of the small source-building helpers the data_processing, system_administration and
extra file_operations families share (complexity_level, py_source, python_oracle)."""

from __future__ import annotations

import io
import math
import random
import struct
import textwrap
import wave

from termforge.generate.base import TaskFamily, TaskSpec, bash_script, complexity_level, instruction_frame



def py_source(body: str, **constants) -> str:
    """A Python source whose `__CONSTANTS__` line becomes one assignment per constant (repr'd),
    so baked values never pass through f-string brace escaping."""
    consts = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    return textwrap.dedent(body).strip().replace("__CONSTANTS__", consts.rstrip("\n")) + "\n"


def python_oracle(code: str) -> str:
    """An oracle solve.sh that runs `code` with the sandbox's Debian Python."""
    return bash_script("/usr/bin/python3 - <<'PY'\n" + code + "PY")


def _wav_bytes(samples: list[int], rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(struct.pack(f"<{len(samples)}h", *samples))
    return buf.getvalue()


def _spaced_values(rng: random.Random, count: int, low: float, high: float, min_gap: float,
                   avoid: list[float] = ()) -> list[float]:
    """`count` values in [low, high], two decimals, all at least min_gap from each other and from `avoid`."""
    chosen: list[float] = []
    while len(chosen) < count:
        v = round(rng.uniform(low, high), 2)
        if all(abs(v - c) >= min_gap for c in [*chosen, *avoid]):
            chosen.append(v)
    return chosen


class ToneInventory(TaskFamily):
    """Find the frequencies of the steady tones buried in a noisy mono WAV recording."""

    name = "tone_inventory"
    domains = ("scientific_computing",)
    verifier_kinds = ("metric_threshold",)
    fixture_kinds = ("audio",)
    summary = "estimate the frequencies of the significant sine tones in a noisy WAV file (FFT peak picking)"
    skill_types = ("signal_processing",)
    skills = ("compute a spectrum with a proper window", "detect peaks in a noisy signal")
    languages = ("python",)
    anchors = ("NumPy",)
    command_complexities = ("bash_code",)

    BAND = (100.0, 3500.0)
    RELATIVE_THRESHOLD = 0.1
    TOLERANCE_HZ = 1.0

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        rate = rng.choice((8000, 11025, 16000))
        duration = round(rng.uniform(1.5, 2.5), 2)
        n = int(rate * duration)
        n_tones = (rng.randint(1, 2), rng.randint(2, 3), rng.randint(3, 4), rng.randint(4, 5))[lvl]
        min_gap = 30.0 if lvl == 3 else 60.0
        tones = _spaced_values(rng, n_tones, 150.0, 3300.0, min_gap)
        # Relative amplitudes stay far from the 10% cut (>= 0.25 or a decoy <= 0.035), so a sound
        # method never sits on the edge of the rule.
        rel_amps = [1.0] + [round(rng.uniform(0.25, 1.0), 3) for _ in tones[1:]]
        rng.shuffle(rel_amps)
        decoys = _spaced_values(rng, 1, 150.0, 3300.0, 80.0, tones) if lvl >= 2 else []
        decoy_amps = [round(rng.uniform(0.02, 0.035), 3) for _ in decoys]
        noise_rel = (0.05, 0.1, 0.2, 0.3)[lvl]
        dc_rel = round(rng.uniform(0.3, 0.6), 3) if lvl == 3 else 0.0
        headroom = sum(rel_amps) + sum(decoy_amps) + 4 * noise_rel + dc_rel
        scale = 0.9 * 32767 / headroom
        components = [(f, a, rng.uniform(0, 2 * math.pi)) for f, a in zip([*tones, *decoys], [*rel_amps, *decoy_amps])]
        samples = []
        for i in range(n):
            t = i / rate
            v = dc_rel + sum(a * math.sin(2 * math.pi * f * t + ph) for f, a, ph in components)
            v += rng.gauss(0.0, noise_rel)
            samples.append(max(-32768, min(32767, round(v * scale))))
        wav = _wav_bytes(samples, rate)

        out = "/app/tones.txt"
        low, high = self.BAND
        body = f"""
            The lab's test rig recorded `/app/recording.wav` (mono, 16-bit PCM). It contains a few
            steady sine tones, all between {low:.0f} Hz and {high:.0f} Hz and lasting the whole
            recording, on top of broadband noise{" and a constant DC offset" if dc_rel else ""}.
            I need the frequency of every tone whose amplitude is at least
            {self.RELATIVE_THRESHOLD:.0%} of the strongest tone's amplitude; fainter tones (if any)
            must not be listed.

            Grading is numeric: your list must have exactly as many entries as there are such tones,
            and after sorting, the largest difference between a reported and a true frequency must
            be at most {self.TOLERANCE_HZ} Hz.
            """
        instruction = instruction_frame(
            sig, "Identify the tones in a test recording", body,
            [f"`{out}`: one frequency in Hz per line (a decimal number, e.g. `1234.5`), ascending, "
             "nothing else."],
        )
        test_initial = py_source("""
            import os
            import wave

            __CONSTANTS__

            def test_recording_present():
                with wave.open("/app/recording.wav") as w:
                    assert w.getnchannels() == 1
                    assert w.getsampwidth() == 2
                    assert w.getframerate() == RATE
                    assert w.getnframes() == FRAMES

            def test_no_answer_yet():
                assert not os.path.exists(OUT)
            """, RATE=rate, FRAMES=n, OUT=out)
        test_final = py_source("""
            __CONSTANTS__

            def _reported():
                import math

                with open(OUT) as fh:
                    values = [float(line) for line in fh if line.strip()]
                # nan compares false with everything: it would slip through the tolerance check.
                assert all(math.isfinite(v) for v in values), "non-finite frequency reported"
                assert values == sorted(values), "frequencies are not in ascending order"
                return values

            def test_tone_count():
                got = _reported()
                assert len(got) == len(EXPECTED_HZ), f"reported {len(got)} tones, expected {len(EXPECTED_HZ)}"

            def test_max_frequency_error_within_tolerance():
                got = _reported()
                assert len(got) == len(EXPECTED_HZ)
                max_error = max(abs(g - e) for g, e in zip(got, EXPECTED_HZ))
                print(f"max frequency error: {max_error:.4f} Hz (threshold {TOLERANCE_HZ} Hz)")
                assert max_error <= TOLERANCE_HZ
            """, OUT=out, EXPECTED_HZ=sorted(tones), TOLERANCE_HZ=self.TOLERANCE_HZ)
        solve = python_oracle(py_source("""
            import wave

            import numpy as np

            __CONSTANTS__

            with wave.open("/app/recording.wav") as w:
                rate, channels = w.getframerate(), w.getnchannels()
                raw = w.readframes(w.getnframes())
            x = np.frombuffer(raw, dtype="<i2").astype(float).reshape(-1, channels).mean(axis=1)
            x -= x.mean()
            # Zero padding gives a fine frequency grid; the Hann window keeps leakage below the cut.
            pad = 8
            spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x)), n=pad * len(x)))
            freqs = np.fft.rfftfreq(pad * len(x), 1.0 / rate)
            spectrum[(freqs < LOW - 20) | (freqs > HIGH + 20)] = 0.0
            strongest = spectrum.max()
            remaining = spectrum.copy()
            lobe = 3 * pad
            found = []
            while True:
                k = int(remaining.argmax())
                if remaining[k] < CUT * strongest:
                    break
                a, b, c = np.log(spectrum[k - 1:k + 2])
                offset = 0.5 * (a - c) / (a - 2 * b + c)
                found.append((k + offset) * rate / (pad * len(x)))
                remaining[max(0, k - lobe):k + lobe + 1] = 0.0
            with open("/app/tones.txt", "w") as fh:
                fh.writelines(f"{f:.2f}\\n" for f in sorted(found))
            """, LOW=low, HIGH=high, CUT=self.RELATIVE_THRESHOLD))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("cp /tmp/env/fixtures/recording.wav /app/recording.wav"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={
                "given": {"band_hz": [low, high], "relative_threshold": self.RELATIVE_THRESHOLD,
                          "tolerance_hz": self.TOLERANCE_HZ},
                "tones_hz": sorted(tones),
                "relative_amplitudes": [a for _, a in sorted(zip(tones, rel_amps))],
                "decoy_tones_hz": decoys,
                "sample_rate": rate,
                "noise_relative_std": noise_rel,
                "dc_offset_relative": dc_rel,
            },
            method_note=(
                "Read the PCM samples, remove the mean (DC), apply a window (Hann) and take a "
                "zero-padded real FFT. Pick spectral peaks inside the stated band, strongest first, "
                "suppressing each peak's main lobe before looking for the next, and stop when a peak "
                "falls below the stated fraction of the strongest. Refine each peak's frequency by "
                "interpolating between neighbouring bins (e.g. a parabola through log magnitudes)."
            ),
            verifier_kind="metric_threshold",
            fixture_kind="audio",
            fixtures={"recording.wav": wav},
            output_paths=[out],
            apt_packages=("python3-numpy",),
        )


class DecayHalfLife(TaskFamily):
    """Fit N0 * 2^(-t/T) + B to noisy detector counts and report the half-life and background."""

    name = "decay_half_life_fit"
    domains = ("scientific_computing",)
    verifier_kinds = ("metric_threshold",)
    fixture_kinds = ("text_only",)
    summary = "nonlinear least-squares fit of an exponential decay with background from a messy CSV"
    skill_types = ("linear_algebra", "scientific_data_handling")
    skills = ("fit a model by least squares", "carry physical units through a calculation")
    languages = ("python",)
    anchors = ("NumPy",)
    command_complexities = ("bash_code",)

    HALF_LIFE_REL_TOL = 0.03
    BACKGROUND_ABS_TOL = 5.0
    BACKGROUND_REL_TOL = 0.1

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        half_life = round(rng.uniform(4.0, 90.0), 2)
        n0 = rng.randint(2000, 9000)
        background = rng.randint(30, 150)
        n_points = (70, 100, 140, 200)[lvl]
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
        test_initial = py_source("""
            import os

            __CONSTANTS__

            def test_data_present():
                with open("/app/data/counts.csv") as fh:
                    header = fh.readline().strip().split(",")
                assert sorted(header) == sorted(["counts", TIME_COL])

            def test_no_answer_yet():
                assert not os.path.exists(OUT)
            """, TIME_COL=time_col, OUT=out)
        test_final = py_source("""
            import json
            import math

            __CONSTANTS__

            def _answer():
                with open(OUT) as fh:
                    answer = json.load(fh)
                values = {k: float(answer[k]) for k in ("half_life_s", "background")}
                assert all(math.isfinite(v) for v in values.values())
                return values

            def test_half_life_within_tolerance():
                rel_error = abs(_answer()["half_life_s"] - HALF_LIFE) / HALF_LIFE
                print(f"half-life relative error: {rel_error:.4f} (threshold {HALF_LIFE_REL_TOL})")
                assert rel_error <= HALF_LIFE_REL_TOL

            def test_background_within_tolerance():
                abs_error = abs(_answer()["background"] - BACKGROUND)
                limit = max(BACKGROUND_ABS_TOL, BACKGROUND_REL_TOL * BACKGROUND)
                print(f"background absolute error: {abs_error:.3f} (threshold {limit})")
                assert abs_error <= limit
            """, OUT=out, HALF_LIFE=half_life, BACKGROUND=background, HALF_LIFE_REL_TOL=self.HALF_LIFE_REL_TOL,
                         BACKGROUND_ABS_TOL=self.BACKGROUND_ABS_TOL, BACKGROUND_REL_TOL=self.BACKGROUND_REL_TOL)
        solve = python_oracle(py_source("""
            import json

            import numpy as np

            with open("/app/data/counts.csv") as fh:
                header = fh.readline().strip().split(",")
                body = fh.read().splitlines()
            time_col = "t_ms" if "t_ms" in header else "t_s"
            ti, ci = header.index(time_col), header.index("counts")
            seen = set()
            for line in body:
                if not line.strip() or line.startswith("#") or line in seen:
                    continue
                fields = line.split(",")
                try:
                    float(fields[ti]), int(fields[ci])
                except (ValueError, IndexError):
                    continue
                seen.add(line)
            pairs = sorted((float(f.split(",")[ti]), int(f.split(",")[ci])) for f in seen)
            t = np.array([p[0] for p in pairs]) / (1000.0 if time_col == "t_ms" else 1.0)
            y = np.array([p[1] for p in pairs], dtype=float)
            weights = 1.0 / np.sqrt(np.maximum(y, 1.0))

            def residual(tau):
                # For a fixed decay constant the model is linear in (N0, B): solve that exactly.
                design = np.column_stack([np.exp(-t / tau), np.ones_like(t)]) * weights[:, None]
                coef, *_ = np.linalg.lstsq(design, y * weights, rcond=None)
                return float(np.sum((design @ coef - y * weights) ** 2)), coef

            span = t.max() - t.min()
            grid = np.geomspace(span / 500, span * 5, 600)
            k = int(np.argmin([residual(tau)[0] for tau in grid]))
            lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
            golden = (np.sqrt(5) - 1) / 2
            for _ in range(80):
                a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
                if residual(a)[0] < residual(b)[0]:
                    hi = b
                else:
                    lo = a
            tau = (lo + hi) / 2
            _, (amplitude, background) = residual(tau)
            with open("/app/fit.json", "w") as fh:
                json.dump({"half_life_s": tau * np.log(2), "background": background}, fh)
            """))
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
            method_note=(
                "Clean the table first: skip notes and unreadable rows, drop repeated readings, and "
                "convert the time column to seconds using the unit in its header. The model is linear "
                "in N0 and B once the decay constant is fixed, so scan the decay constant over a wide "
                "logarithmic grid, solve the 2-parameter linear least squares at each value (weighting "
                "by 1/sqrt(count) for counting noise), refine around the best value, and convert the "
                "decay constant to a half-life with ln 2. Check the fit by looking at the residuals."
            ),
            verifier_kind="metric_threshold",
            fixture_kind="text_only",
            fixtures={"counts.csv": csv_text.encode()},
            output_paths=[out],
            apt_packages=("python3-numpy",),
        )


FAMILIES = [ToneInventory, DecayHalfLife]
