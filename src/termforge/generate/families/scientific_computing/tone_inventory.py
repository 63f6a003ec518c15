"""The significant sine tones of a noisy WAV recording, found by spectral analysis."""

from __future__ import annotations

import io
import math
import random
import struct
import wave

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import packaged_source, python_oracle


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

    knobs = DifficultyKnobs(
        tones=((1, 2), (2, 3), (3, 4), (4, 5)), min_gap_hz=(60.0, 60.0, 60.0, 30.0),
        noise=(0.05, 0.1, 0.2, 0.3))
    axes = FamilyAxes(name="tone_inventory", domains=("scientific_computing",), verifier_kinds=("metric_threshold",),
                      fixture_kinds=("audio",), skill_types=("signal_processing",),
                      skills=("compute a spectrum with a proper window", "detect peaks in a noisy signal"),
                      languages=("python",), anchors=("NumPy",), command_complexities=("bash_code",),
                      summary="estimate the frequencies of the significant sine tones in a noisy WAV file (FFT peak "
                              "picking)")
    method = (
        ('Read the PCM samples, remove the mean (DC), apply a window (Hann) and take a zero-padded real FFT. '
         "Pick spectral peaks inside the stated band, strongest first, suppressing each peak's main lobe "
         'before looking for the next, and stop when a peak falls below the stated fraction of the strongest. '
         "Refine each peak's frequency by interpolating between neighbouring bins (e.g. a parabola through log "
         'magnitudes).', None),
    )

    BAND = (100.0, 3500.0)
    RELATIVE_THRESHOLD = 0.1
    TOLERANCE_HZ = 1.0


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        rate = rng.choice((8000, 11025, 16000))
        duration = round(rng.uniform(1.5, 2.5), 2)
        n = int(rate * duration)
        # A draw from every level's range, the level's kept: the RNG sequence, and with it every
        # task's bytes, stays what it was before the ranges were knobs.
        n_tones = [rng.randint(*tones) for tones in self.knobs.per_level["tones"]][lvl]
        min_gap = knobs.min_gap_hz
        tones = _spaced_values(rng, n_tones, 150.0, 3300.0, min_gap)
        # Relative amplitudes stay far from the 10% cut (>= 0.25 or a decoy <= 0.035), so a sound
        # method never sits on the edge of the rule.
        rel_amps = [1.0] + [round(rng.uniform(0.25, 1.0), 3) for _ in tones[1:]]
        rng.shuffle(rel_amps)
        decoys = _spaced_values(rng, 1, 150.0, 3300.0, 80.0, tones) if lvl >= 2 else []
        decoy_amps = [round(rng.uniform(0.02, 0.035), 3) for _ in decoys]
        noise_rel = knobs.noise
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
        test_initial = packaged_source(__name__, "test_initial_state.py.txt", RATE=rate, FRAMES=n, OUT=out)
        test_final = packaged_source(__name__, "test_final_state.py.txt", OUT=out, EXPECTED_HZ=sorted(tones),
                                     TOLERANCE_HZ=self.TOLERANCE_HZ)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt", LOW=low, HIGH=high,
                                              CUT=self.RELATIVE_THRESHOLD))
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
            verifier_kind="metric_threshold",
            fixture_kind="audio",
            fixtures={"recording.wav": wav},
            output_paths=[out],
            apt_packages=("python3-numpy",),
        )


FAMILY = ToneInventory
