"""An exact reduction of mixed-unit instrument readings under date-versioned calibrations."""

from __future__ import annotations

import datetime
import random
from decimal import Decimal
from fractions import Fraction

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import packaged_source, python_oracle


# Per quantity: the base unit and each unit as (factor, shift) with base = reading * factor + shift,
# the decimals of a reading in the base unit (the instruments' resolution), the certified reference
# standard and the tolerance a run must meet, the working range, the span sample values take, the
# reading noise (in resolution steps) and the largest calibration offset (in resolution steps).
QUANTITIES = {
    "mass": {"base": "mg", "column": "mean_mg", "units": {"mg": ("1", "0"), "g": ("1000", "0"), "µg": ("0.001", "0")},
             "alias": ("ug", "µg"), "decimals": 3, "reference": ("100.000", "0.050"),
             "range": ("1.000", "1000.000"), "span": (5, 900), "noise": 6, "offset": 200, "instrument": "BAL"},
    "volume": {"base": "mL", "column": "mean_mL",
               "units": {"mL": ("1", "0"), "L": ("1000", "0"), "µL": ("0.001", "0")},
               "alias": ("uL", "µL"), "decimals": 3, "reference": ("10.000", "0.020"),
               "range": ("0.100", "100.000"), "span": (1, 90), "noise": 3, "offset": 50, "instrument": "DSP"},
    "temperature": {"base": "°C", "column": "mean_degC", "units": {"°C": ("1", "0"), "K": ("1", "-273.15")},
                    "alias": ("degC", "°C"), "decimals": 2, "reference": ("0.01", "0.05"),
                    "range": ("-40.00", "150.00"), "span": (4, 95), "noise": 2, "offset": 50, "instrument": "PRT"},
}
UNREADABLE = ("", "NA", "overload", "ERR")
QC_FLAGS = ("flag", "bubble", "drift", "rerun")


def _median(xs: list[Fraction]) -> Fraction:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _robust_mean(values: list[Fraction], k: Fraction | None) -> tuple[int, Fraction | None]:
    """(count, exact mean) after the median/MAD outlier cut (none when k is None)."""
    if k is not None and len(values) >= 3:
        m = _median(values)
        mad = _median([abs(v - m) for v in values])
        if mad:
            values = [v for v in values if abs(v - m) <= k * mad]
    return len(values), (sum(values) / len(values) if values else None)


def _fixed(value: Fraction, decimals: int) -> str:
    """`value` rounded once, half to even (Fraction rounding is exact), with exactly `decimals` decimals."""
    q = round(value * 10 ** decimals)
    digits = str(abs(q)).rjust(decimals + 1, "0")
    return ("-" if q < 0 else "") + digits[:-decimals] + "." + digits[-decimals:]


def _even_tie(value: Fraction, decimals: int) -> bool:
    """Exactly halfway between two roundings whose lower one ends in an even digit: half-up differs."""
    scaled = value * 10 ** decimals
    return scaled.denominator == 2 and (scaled.numerator // 2) % 2 == 0


class CalibratedMeasurements(TaskFamily):
    """Reduce instrument runs to calibrated per-sample means under a lab SOP, in exact arithmetic."""

    knobs = DifficultyKnobs(units=(2, 2, 3, 3), runs=(3, 4, 6, 8), instruments=(1, 2, 3, 3),
                            samples=(4, 8, 12, 18), biased_runs=(1, 1, 1, 2), runs_per_sample=(2, 2, 2, 3),
                            out_of_range=(0, 2, 3, 4), halfway_ties=(1, 1, 1, 2))
    axes = FamilyAxes(name="calibrated_measurement_reduction", domains=("scientific_computing",),
                      verifier_kinds=("exact_text",), fixture_kinds=("text_only",),
                      skill_types=("scientific_data_handling",),
                      skills=("carry physical units through a calculation",
                              "compare results to a reference within tolerances"), languages=("python",),
                      command_complexities=("bash_code",),
                      summary="convert mixed-unit instrument readings, apply date-versioned calibrations, reject "
                              "runs by a reference standard, and report exact half-even rounded means per sample")
    method = (
        ('Read the runs and the calibration table with a CSV reader and keep every number as a decimal, never '
         'binary floating point. Convert to the base unit, find the calibration version whose inclusive date '
         "range holds the run's date, apply gain and offset, then the row exclusions. Decide each run from its "
         'reference-standard mean before using its samples. Per sample, apply the outlier rule if stated '
         '(exact median and MAD), take the exact mean and round it once, half to even. Check by hand any mean '
         'that ends exactly in 5 beyond the last decimal.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        kind = rng.choice(sorted(QUANTITIES))
        q = QUANTITIES[kind]
        d, base = q["decimals"], q["base"]
        out_decimals = d + 1
        units = list(q["units"])[: knobs.units]
        lo, hi = (Fraction(x) for x in q["range"])
        cert, tol = (Fraction(x) for x in q["reference"])
        k = Fraction(rng.choice((3, 4, 5)), 1) if lvl == 3 else None

        start = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(300))
        n_runs = knobs.runs
        instruments = [f"{q['instrument']}-{n}" for n in rng.sample(range(1, 10), knobs.instruments)]
        # Every instrument runs at least once (n_runs >= instruments).
        used = rng.sample([instruments[i % len(instruments)] for i in range(n_runs)], n_runs)
        runs = [((start + datetime.timedelta(days=day)).isoformat(), inst)
                for day, inst in zip(sorted(rng.sample(range(45), n_runs)), used)]
        gap_run = rng.choice(runs) if lvl == 3 else None
        window = ((start - datetime.timedelta(days=rng.randint(10, 60))).isoformat(),
                  (start + datetime.timedelta(days=45 + rng.randint(10, 60))).isoformat())

        def version() -> tuple[Fraction, Fraction]:
            return Fraction(rng.randint(980, 1020), 1000), Fraction(rng.randint(-q["offset"], q["offset"]), 10 ** d)

        def day(iso: str, shift: int) -> str:
            return (datetime.date.fromisoformat(iso) + datetime.timedelta(days=shift)).isoformat()

        cals: list[tuple[str, str, str, Fraction, Fraction]] = []
        for inst in instruments:
            days = sorted({date for date, i in runs if i == inst})
            # Versions end on a run's day (valid_to is inclusive), so the boundary decides that run.
            cuts = sorted(rng.sample(days, min(len(days), rng.randint(1, 2)))) if lvl >= 2 else []
            spans = list(zip([window[0]] + [day(c, 1) for c in cuts], cuts + [window[1]]))
            if gap_run and gap_run[1] == inst:
                # A lapsed calibration: no version covers the gap run's day.
                g = gap_run[0]
                spans = [p for a, b in spans for p in (((a, day(g, -1)), (day(g, 1), b)) if a <= g <= b else ((a, b),))]
            cals += [(inst, a, b, *version()) for a, b in spans if a <= b]

        def calibration(inst: str, date: str) -> tuple[Fraction, Fraction] | None:
            return next(((g, o) for i, a, b, g, o in cals if i == inst and a <= date <= b), None)

        samples = [f"S{n:03d}" for n in sorted(rng.sample(range(1, 400), knobs.samples))]
        true_value = {s: rng.randint(q["span"][0] * 10 ** d, q["span"][1] * 10 ** d) / 10 ** d for s in samples}
        biased = rng.sample([r for r in runs if r != gap_run], knobs.biased_runs)
        # Each sample is read in some of the runs, the reference standard in every run.
        read_in = {s: rng.sample(runs, knobs.runs_per_sample) for s in samples}
        rows: list[dict] = []
        for date, inst in runs:
            bias = float(tol) * rng.uniform(3, 6) * rng.choice((-1, 1)) if (date, inst) in biased else 0.0
            todo = [("CRM", float(cert) + max(-float(tol) / 2, min(float(tol) / 2, rng.gauss(0, float(tol) / 5))))
                    for _ in range(2)]
            for s in (s for s in samples if (date, inst) in read_in[s]):
                reps = 2 if lvl >= 2 else rng.randint(1, 2)
                todo += [(s, true_value[s] + rng.gauss(0, q["noise"]) / 10 ** d) for _ in range(reps)]
            gain, offset = calibration(inst, date) or (Fraction(1), Fraction(0))
            for sample, value in todo:
                rows.append({"run": f"{date}_{inst}.csv", "date": date, "inst": inst, "sample": sample,
                             "ticks": round((value + bias - float(offset)) / float(gain) * 10 ** d),
                             "token": None, "unit": rng.choice(units), "qc": "ok"})
        plain = [r for r in rows if r["sample"] != "CRM"]
        if lvl >= 1:
            for r in rows:
                r["qc"] = "ok" if rng.random() < 0.9 else rng.choice(QC_FLAGS)
            for r in rng.sample(plain, knobs.out_of_range):
                width = float(hi - lo)
                value = (float(hi) + width * rng.uniform(0.02, 0.3) if rng.random() < 0.5
                         else float(lo) - width * rng.uniform(5e-4, 2e-3))
                gain, offset = calibration(r["inst"], r["date"]) or (Fraction(1), Fraction(0))
                r["ticks"] = round((value - float(offset)) / float(gain) * 10 ** d)
        if lvl >= 2:
            for r in rng.sample(plain, rng.randint(2, 4)):
                r["ticks"], r["token"] = None, rng.choice(UNREADABLE)
        if lvl == 3:
            for s in rng.sample(samples, len(samples) // 3):
                mine = [r for r in plain if r["sample"] == s and r["ticks"] is not None]
                if len(mine) >= 3:
                    rng.choice(mine)["ticks"] += rng.choice((-1, 1)) * rng.randint(40, 120) * q["noise"]

        def reduce_rows() -> tuple[dict[str, list[tuple[dict, Fraction]]], list[str]]:
            """sample -> (row, calibrated value) kept by the row and run checks; the rejected runs."""
            def calibrated(r: dict) -> Fraction | None:
                cal = calibration(r["inst"], r["date"])
                if r["ticks"] is None or r["qc"] != "ok" or cal is None:
                    return None
                v = Fraction(r["ticks"], 10 ** d) * cal[0] + cal[1]
                return v if lo <= v <= hi else None

            kept: dict[str, list[tuple[dict, Fraction]]] = {}
            rejected = []
            for run in sorted({r["run"] for r in rows}):
                mine = [(r, calibrated(r)) for r in rows if r["run"] == run]
                crm = [v for r, v in mine if r["sample"] == "CRM" and v is not None]
                if not crm or abs(sum(crm) / len(crm) - cert) > tol:
                    rejected.append(run)
                    continue
                for r, v in mine:
                    if r["sample"] != "CRM" and v is not None:
                        kept.setdefault(r["sample"], []).append((r, v))
            return kept, rejected

        # Plant exact halfway means (lower digit even) so half-even rounding decides some results:
        # nudge one kept reading of a sample by a few resolution steps until its mean is such a tie.
        kept, _ = reduce_rows()
        planted = 0
        for s in rng.sample(sorted(kept), len(kept)):
            if planted == knobs.halfway_ties:
                break
            row, _ = kept[s][-1]
            gain = calibration(row["inst"], row["date"])[0]
            for step in sorted(range(-300, 301), key=lambda x: (abs(x), x))[1:]:
                values = [v + (Fraction(step, 10 ** d) * gain if r is row else 0) for r, v in kept[s]]
                mean = _robust_mean(values, k)[1]
                if mean is not None and _even_tie(mean, out_decimals):
                    row["ticks"] += step
                    planted += 1
                    break
        kept, rejected = reduce_rows()
        results = {s: _robust_mean([v for _, v in kept.get(s, [])], k) for s in samples}
        expected = [f"sample,n,{q['column']}"] + [
            f"{s},{n},{_fixed(mean, out_decimals) if n else 'NA'}" for s, (n, mean) in sorted(results.items())]

        def reading_text(r: dict) -> str:
            if r["ticks"] is None:
                return r["token"]
            factor, shift = (Decimal(x) for x in q["units"][r["unit"]])
            value = (Decimal(r["ticks"]).scaleb(-d) - shift) / factor
            return format(value.quantize(Decimal(1).scaleb(-max(d + factor.adjusted(), 0))), "f")

        alias, aliased = q["alias"]
        header = ["date", "instrument", "sample", "reading", "unit"] + (["qc"] if lvl >= 1 else [])
        fixtures = {}
        for run in sorted({r["run"] for r in rows}):
            mine = [r for r in rows if r["run"] == run]
            rng.shuffle(mine)
            lines = []
            for r in mine:
                unit = alias if lvl == 3 and r["unit"] == aliased and rng.random() < 0.4 else r["unit"]
                qc = [r["qc"]] if lvl >= 1 else []
                lines.append([r["date"], r["inst"], r["sample"], reading_text(r), unit, *qc])
            fixtures[f"runs/{run}"] = "".join(",".join(x) + "\n" for x in [header, *lines]).encode()
        fixtures["calibration.csv"] = ("instrument,valid_from,valid_to,gain,offset\n" + "".join(
            f"{i},{a},{b},{_fixed(g, 3)},{_fixed(o, d)}\n" for i, a, b, g, o in cals)).encode()

        conversions = [f"1 {u} = {Decimal(f).normalize():f} {base}" if s == "0" else f"{base} = {u} − 273.15"
                       for u, (f, s) in q["units"].items() if u in units[1:]]
        if lvl == 3:
            conversions.append(f"`{alias}` is another spelling of `{aliased}`")
        discard = (["its `qc` is anything but `ok`"] if lvl >= 1 else []) + (
            ["its reading is not a number"] if lvl >= 2 else []) + (
            [f"its calibrated value lies outside the working range {q['range'][0]} to {q['range'][1]} {base} "
             "(the limits themselves are inside)"] if lvl >= 1 else [])
        steps = [
            f"Convert each reading to {base} using its `unit` ({'; '.join(conversions)}).",
            "Calibrate it with the version of its instrument's calibration that is valid on the run's date: "
            f"calibrated = converted × gain + offset (the offset is in {base})."
            + (" A reading for which no version is valid is discarded." if lvl >= 2 else ""),
        ]
        if discard:
            steps.append("Discard a row when " + "; or when ".join(discard) + ".")
        steps.append(
            f"Rows whose sample is `CRM` are readings of a certified reference standard of {q['reference'][0]} {base}. "
            "A run is accepted only if at least one of its CRM rows is left after the steps above and the mean of "
            f"their calibrated values differs from {q['reference'][0]} by at most {q['reference'][1]} {base}. "
            "Discard every row of a rejected run. The reference standard is not a sample and is never reported.")
        if k is not None:
            steps.append(
                "Outliers, per sample: if a sample has three or more values left, let m be their median and MAD "
                "the median of their absolute deviations from m (the median of an even count is the mean of the "
                f"two middle values). When MAD is above zero, discard the values whose absolute deviation from m "
                f"is greater than {k} × MAD. Do this once, not repeatedly.")
        steps.append(f"A sample's result is the count of its values left and their exact arithmetic mean, rounded "
                     f"once, half to even, to {out_decimals} decimals. Nothing is rounded before that.")
        out = "/app/results.csv"
        body = (
            f"The {kind} readings of our instruments' recent runs are in `/app/data/runs/`: one CSV file per "
            f"run (one instrument on one day) with the header `{','.join(header)}`. The calibration "
            "certificates are in `/app/data/calibration.csv` (`instrument,valid_from,valid_to,gain,offset`; "
            f"both dates are inclusive). I need one calibrated mean per sample, in {base}, reduced exactly as "
            "the lab's procedure says:\n\n" + "\n".join(f"{i}. {t}" for i, t in enumerate(steps, 1))
            + f"\n\nThe report is a CSV with the header `{expected[0]}` and one row per sample that appears in "
            "any run file, sorted by sample ID (plain string order): the ID, the count and the mean written "
            f"with exactly {out_decimals} decimals (like `1.{'0' * out_decimals}`). A sample with no values "
            "left has count `0` and mean `NA`."
        )
        instruction = instruction_frame(sig, f"Calibrated {kind} per sample", body,
                                        [f"`{out}`: the report described above, with `\\n` line endings."])
        run_files = sorted(f.split("/", 1)[1] for f in fixtures if f.startswith("runs/"))
        test_initial = packaged_source(__name__, "test_initial_state.py.txt", RUN_FILES=run_files,
                                       CALIBRATION_LINES=len(cals) + 1, OUT=out)
        test_final = packaged_source(__name__, "test_final_state.py.txt", OUT=out, EXPECTED=expected)
        all_units = {**q["units"], **({alias: q["units"][aliased]} if lvl == 3 else {})}
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt", UNITS=all_units, LO=q["range"][0],
                                              HI=q["range"][1], CERT=q["reference"][0], TOL=q["reference"][1],
                                              K=int(k) if k is not None else None, N=out_decimals,
                                              HEADER=expected[0]))
        ties = [s for s, (n, mean) in sorted(results.items()) if n and _even_tie(mean, out_decimals)]
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/data/runs\ncp /tmp/env/fixtures/runs/*.csv /app/data/runs/\n"
                                 "cp /tmp/env/fixtures/calibration.csv /app/data/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"quantity": kind, "units": units, "header": expected[0], "decimals": out_decimals,
                             "reference": list(q["reference"]), "working_range": list(q["range"]),
                             "mad_factor": None if k is None else int(k)},
                   "expected_rows": expected[1:],
                   "rejected_runs": rejected,
                   "half_even_ties": ties},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


FAMILY = CalibratedMeasurements
