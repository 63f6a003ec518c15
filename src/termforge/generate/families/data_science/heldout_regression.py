"""Predict a numeric target for held-out rows, scored by RMSE against labels kept in the test."""

from __future__ import annotations

import math
import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     indent_block, instruction_frame, pytest_module)
from termforge.generate.families.package_files import family_template


REGRESSION_THEMES = {
    "energy": {"target": "kwh", "what": "daily energy use of buildings",
               "numeric": {"outdoor_temp_c": (-5.0, 35.0), "floor_m2": (40.0, 400.0),
                           "occupants": (1.0, 40.0), "glazing_ratio": (0.1, 0.8)},
               "category": ("building_type", ("office", "school", "warehouse", "retail")),
               "irrelevant": ("meter_serial_tail", (0.0, 999.0))},
    "housing": {"target": "price_k", "what": "sale prices of flats, in thousands",
                "numeric": {"area_m2": (25.0, 180.0), "rooms": (1.0, 7.0), "age_years": (0.0, 90.0),
                            "distance_km": (0.2, 25.0)},
                "category": ("district", ("harbour", "old_town", "uplands", "riverside", "station")),
                "irrelevant": ("listing_day", (1.0, 365.0))},
    "delivery": {"target": "minutes", "what": "courier delivery times",
                 "numeric": {"distance_km": (0.5, 30.0), "parcels": (1.0, 25.0), "traffic_index": (0.0, 10.0),
                             "stairs_floors": (0.0, 12.0)},
                 "category": ("vehicle", ("bike", "van", "scooter")),
                 "irrelevant": ("driver_badge", (100.0, 999.0))},
}


def _solve_normal_equations(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Least squares via the normal equations and Gauss-Jordan elimination with partial pivoting.
    Pure Python on purpose: the generator's threshold must be identical on every machine."""
    p = len(rows[0])
    a = [[0.0] * (p + 1) for _ in range(p)]
    for r, y in zip(rows, ys):
        for i in range(p):
            ri = r[i]
            if ri == 0.0:
                continue
            ai = a[i]
            for j in range(p):
                ai[j] += ri * r[j]
            ai[p] += ri * y
    for i in range(p):
        a[i][i] += 1e-9  # a whisper of ridge keeps a constant column from making the system singular
    for col in range(p):
        piv = max(range(col, p), key=lambda r: abs(a[r][col]))
        a[col], a[piv] = a[piv], a[col]
        d = a[col][col]
        for j in range(col, p + 1):
            a[col][j] /= d
        for r in range(p):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                for j in range(col, p + 1):
                    a[r][j] -= f * a[col][j]
    return [a[i][p] for i in range(p)]


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _design(records: list[dict], spec: dict, stats: dict, squares: bool = True) -> list[list[float]]:
    """The oracle's features: intercept, standardised numerics (and their squares), a missing flag
    for the numeric that can be missing, drop-first one-hot of the category."""
    rows = []
    for rec in records:
        row = [1.0]
        for name in spec["numeric"]:
            v = rec[name]
            missing = v is None
            z = 0.0 if missing else (v - stats[name][0]) / stats[name][1]
            row += [z, z * z] if squares else [z]
            if name == spec["maybe_missing"]:
                row.append(1.0 if missing else 0.0)
        if spec["category"]:
            levels = spec["levels"]
            row += [1.0 if rec[spec["category"]] == lv else 0.0 for lv in levels[1:]]
        rows.append(row)
    return rows


def _fit_predict(train: list[dict], test: list[dict], spec: dict, robust: bool,
                 squares: bool = True) -> list[float]:
    """The oracle's method in pure Python (the shipped oracle does the same with NumPy)."""
    stats = {}
    for name in spec["numeric"]:
        vals = [r[name] for r in train if r[name] is not None]
        mean = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals)) or 1.0
        stats[name] = (mean, sd)
    xs, ys = _design(train, spec, stats, squares), [r["y"] for r in train]
    coef = _solve_normal_equations(xs, ys)
    if robust:
        res = [y - sum(c * x for c, x in zip(coef, row)) for row, y in zip(xs, ys)]
        med = _median(res)
        mad = _median([abs(r - med) for r in res]) * 1.4826 or 1.0
        keep = [i for i, r in enumerate(res) if abs(r - med) <= 4.0 * mad]
        coef = _solve_normal_equations([xs[i] for i in keep], [ys[i] for i in keep])
    return [sum(c * x for c, x in zip(coef, row)) for row in _design(test, spec, stats, squares)]


def _rmse(pred: list[float], truth: list[float]) -> float:
    return math.sqrt(sum((p - t) ** 2 for p, t in zip(pred, truth)) / len(truth))


REGRESSION_ORACLE = family_template(__name__, "oracle.py.txt")


class HeldoutRegression(TaskFamily):
    """Fit a model on a training CSV and predict a held-out CSV; the test scores RMSE against
    labels only it holds. The threshold is what a plain least-squares fit with squared terms,
    one-hot categories (and, where needed, imputation and outlier removal) reaches, plus slack."""

    knobs = DifficultyKnobs(training_rows=(160, 240, 360, 500), test_rows=(60, 80, 120, 150))
    axes = FamilyAxes(name="heldout_regression", domains=("data_science",), verifier_kinds=("metric_threshold",),
                      fixture_kinds=("text_only",),
                      skill_types=("feature_engineering", "model_training_and_evaluation"),
                      skills=("encode categorical variables", "train a baseline model and a stronger one"),
                      languages=("python",), anchors=("NumPy",), command_complexities=("bash_code",),
                      summary="predict a numeric target for held-out rows; graded by RMSE against hidden labels")
    method = (
        ("Load both CSVs and look at each feature against the target (scatter or binned means).", None),
        ("A column whose values are words is categorical: one-hot encode it rather than treating it as a number.",
         lambda v: bool(_categorical_columns(v))),
        # Whether a relationship is curved is the generator's secret; the check that finds out is not.
        ("Check the residuals of a straight-line fit against every feature; where they bend, add a squared term "
         "for that feature, and drop columns with no relationship to the target.", None),
        ("Impute empty features (train mean plus a missing indicator), and find label outliers from the "
         "residuals of a first fit (median/MAD), drop them and refit.", r"not perfectly clean"),
        ("Hold out part of train to estimate RMSE before writing predictions.", None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        theme_name = rng.choice(sorted(REGRESSION_THEMES))
        theme = REGRESSION_THEMES[theme_name]
        n_train, n_test = knobs.training_rows, knobs.test_rows
        numeric = list(theme["numeric"])
        cat_name, cat_levels = theme["category"]
        use_cat = level >= 1
        curved = rng.choice(numeric) if level >= 2 else None
        irrelevant = theme["irrelevant"][0] if level >= 2 else None
        maybe_missing = rng.choice([n for n in numeric if n != curved]) if level >= 3 else None
        robust = level >= 3
        for _attempt in range(20):
            model = self._model(rng, theme, numeric, cat_levels if use_cat else (), curved)
            train = self._records(rng, n_train, theme, model, use_cat, curved, irrelevant, maybe_missing)
            test = self._records(rng, n_test, theme, model, use_cat, curved, irrelevant, maybe_missing)
            if robust:
                # Unit slips: a few training labels were entered ten times too large.
                for rec in rng.sample(train, max(3, n_train // 40)):
                    rec["y"] = round(rec["y"] * 10, 3)
            fit_spec = {"numeric": numeric, "maybe_missing": maybe_missing,
                        "category": cat_name if use_cat else None, "levels": list(cat_levels)}
            labels = [r["y"] for r in test]
            oracle_rmse = _rmse(_fit_predict(train, test, fit_spec, robust), labels)
            mean_y = sum(r["y"] for r in train) / n_train
            baseline_rmse = _rmse([mean_y] * n_test, labels)
            # The threshold must leave the oracle slack yet be far out of reach of a constant guess,
            # and (when the target is curved) of a straight-line fit that ignores the curvature.
            threshold = math.ceil(oracle_rmse * 1.12 * 1000) / 1000
            ok = threshold < 0.6 * baseline_rmse
            linear_rmse = _rmse(_fit_predict(train, test, fit_spec, robust, squares=False), labels)
            if curved is not None:
                ok = ok and linear_rmse > threshold * 1.25
            if ok:
                break
        else:  # pragma: no cover - the model ranges make this unreachable in practice
            raise RuntimeError(f"heldout_regression: no separable model for task {sig.get('id')}")

        target = theme["target"]
        columns = ["id", *numeric] + ([cat_name] if use_cat else []) + ([irrelevant] if irrelevant else [])
        train_csv = _to_csv(train, columns + [target], target)
        test_csv = _to_csv(test, columns, target)
        test_ids = [r["id"] for r in test]
        dirty = ("\n\n            The training export is not perfectly clean: some feature fields are empty and a "
                 "few labels look like data-entry slips. Judge for yourself what to do about them." if robust else "")
        instruction = instruction_frame(
            sig, f"Predict {target} for held-out rows",
            f"""
            `/app/data/train.csv` holds {n_train} rows of {theme['what']}: an `id`, feature columns and the
            target `{target}`. `/app/data/test.csv` holds {n_test} more rows with the same features but no
            target.{dirty}

            Predict `{target}` for every test row. Your predictions are scored by root-mean-square error
            against the true values; the task passes when RMSE <= **{threshold}**. NumPy is available to
            `python3`; no network.
            """,
            [f"`/app/predictions.csv`: header `id,{target}`, then one row per test id (each exactly once, "
             "any order) with a finite numeric prediction."],
        )
        test_initial = pytest_module(f"""
            import csv
            import os

            def test_data_present():
                with open("/app/data/train.csv", newline="") as fh:
                    assert len(list(csv.DictReader(fh))) == {n_train}
                with open("/app/data/test.csv", newline="") as fh:
                    rows = list(csv.DictReader(fh))
                assert len(rows) == {n_test} and "{target}" not in rows[0]

            def test_no_predictions_yet():
                assert not os.path.exists("/app/predictions.csv")
        """)
        labels_by_id = dict(zip(test_ids, labels))
        test_final = pytest_module(f"""
            import csv
            import math

            THRESHOLD = {threshold!r}
            LABELS = {labels_by_id!r}

            def _predictions():
                with open("/app/predictions.csv", newline="") as fh:
                    reader = csv.reader(fh)
                    header = [h.strip() for h in next(reader)]
                    assert header == ["id", "{target}"], f"header is {{header}}"
                    got = {{}}
                    for row in reader:
                        if not row:
                            continue
                        assert len(row) == 2, f"bad row {{row}}"
                        key = row[0].strip()
                        assert key not in got, f"id {{key}} predicted twice"
                        value = float(row[1])
                        assert math.isfinite(value), f"id {{key}}: non-finite prediction"
                        got[key] = value
                return got

            def test_every_test_id_predicted_once():
                assert sorted(_predictions()) == sorted(LABELS)

            def test_rmse_within_threshold():
                got = _predictions()
                se = sum((got[k] - v) ** 2 for k, v in LABELS.items())
                rmse = math.sqrt(se / len(LABELS))
                assert rmse <= THRESHOLD, f"RMSE {{rmse:.4f}} > {{THRESHOLD}}"
        """)
        oracle_spec = {"numeric": numeric, "maybe_missing": maybe_missing,
                       "category": cat_name if use_cat else None, "levels": list(cat_levels),
                       "target": target, "robust": robust}
        solve = bash_script(f"""
            python3 - <<'PY'
            {indent_block(REGRESSION_ORACLE.strip().replace("__SPEC__", repr(oracle_spec)), 12)}
            PY
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/data && cp /tmp/env/fixtures/train.csv /tmp/env/fixtures/test.csv /app/data/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"threshold": threshold, "target": target},
                   "model": {"intercept": model["b0"], "weights": model["w"], "category_offsets": model["cat"],
                             "curved_feature": curved, "curvature": model["c"], "noise_sd": model["sd"]},
                   "irrelevant_feature": irrelevant, "feature_with_missing_values": maybe_missing,
                   "oracle_rmse": round(oracle_rmse, 4), "constant_guess_rmse": round(baseline_rmse, 4)},
            verifier_kind="metric_threshold",
            fixture_kind="text_only",
            fixtures={"train.csv": train_csv.encode(), "test.csv": test_csv.encode()},
            output_paths=["/app/predictions.csv"],
            apt_packages=("python3-numpy",),
        )

    @staticmethod
    def _model(rng, theme, numeric, cat_levels, curved) -> dict:
        scale = rng.choice((5.0, 20.0, 80.0))
        return {
            "scale": scale,
            "b0": round(scale * rng.uniform(8, 12), 3),
            "w": {n: round(rng.choice((-1, 1)) * rng.uniform(0.5, 1.5) * scale, 3) for n in numeric},
            "cat": {lv: round(rng.uniform(-1.5, 1.5) * scale, 3) for lv in cat_levels},
            "c": round(rng.choice((-1, 1)) * rng.uniform(1.5, 2.5) * scale, 3) if curved else 0.0,
            "sd": round(rng.uniform(0.3, 0.5) * scale, 3),
        }

    @staticmethod
    def _records(rng, n, theme, model, use_cat, curved, irrelevant, maybe_missing) -> list[dict]:
        recs = []
        for _ in range(n):
            rec = {"id": f"r{rng.randrange(16**6):06x}"}
            y = model["b0"]
            for name, (lo, hi) in theme["numeric"].items():
                v = round(rng.uniform(lo, hi), 2)
                rec[name] = v
                u = (v - (lo + hi) / 2) / ((hi - lo) / 2)  # the feature on [-1, 1]
                y += model["w"][name] * u
                if name == curved:
                    y += model["c"] * u * u
            if use_cat:
                lv = rng.choice(sorted(model["cat"]))
                rec[theme["category"][0]] = lv
                y += model["cat"][lv]
            if irrelevant:
                lo, hi = theme["irrelevant"][1]
                rec[irrelevant] = round(rng.uniform(lo, hi), 2)
            if maybe_missing and rng.random() < 0.08:
                rec[maybe_missing] = None
            rec["y"] = round(y + rng.gauss(0.0, model["sd"]), 3)
            recs.append(rec)
        # Ids are random hex: make them unique without depending on set iteration order.
        seen: set[str] = set()
        for i, rec in enumerate(recs):
            if rec["id"] in seen:
                rec["id"] = f"{rec['id']}{i}"
            seen.add(rec["id"])
        return recs


def _to_csv(records: list[dict], columns: list[str], target: str) -> str:
    lines = [",".join(columns)]
    for rec in records:
        cells = []
        for col in columns:
            v = rec["y"] if col == target else rec[col]
            cells.append("" if v is None else f"{v:.3f}" if col == target else str(v))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def _categorical_columns(view) -> list[str]:
    """Columns of the visible train.csv whose values are not numbers (read from the public view)."""
    import csv
    import io

    text = dict(view.text_files()).get("train.csv", "")
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 2:
        return []

    def numeric(x: str) -> bool:
        try:
            float(x)
        except ValueError:
            return x.strip() == ""
        return True

    # The first column is the row id, whatever its spelling.
    return [name for i, name in enumerate(rows[0])
            if i > 0 and any(len(r) > i and not numeric(r[i]) for r in rows[1:])]


FAMILY = HeldoutRegression
