"""data_science families: a held-out regression scored by RMSE, a census of shapes in a PNG, and a
per-class evaluation report of a classifier's predictions."""

from __future__ import annotations

import math
import random
import struct
import zlib
from fractions import Fraction

from termforge.generate.base import (TaskFamily, TaskSpec, bash_script, complexity_level, indent_block,
                                     instruction_frame, pytest_module)
from termforge.generate.families.data_processing import _csv_text
from termforge.generate.families.scientific_computing import csv_inputs_initial_test, py_source, python_oracle




# --------------------------------------------------------------------------------------------
# Held-out regression: predict a numeric target, scored by RMSE against labels kept in the test
# --------------------------------------------------------------------------------------------

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
REG_SIZES = ((160, 60), (240, 80), (360, 120), (500, 150))


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


REGRESSION_ORACLE = r'''
import csv
import numpy as np

SPEC = __SPEC__


def load(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def design(rows, stats):
    out = []
    for r in rows:
        feats = [1.0]
        for name in SPEC["numeric"]:
            raw = r[name].strip()
            z = 0.0 if raw == "" else (float(raw) - stats[name][0]) / stats[name][1]
            feats += [z, z * z]
            if name == SPEC["maybe_missing"]:
                feats.append(1.0 if raw == "" else 0.0)
        if SPEC["category"]:
            feats += [1.0 if r[SPEC["category"]] == lv else 0.0 for lv in SPEC["levels"][1:]]
        out.append(feats)
    return np.array(out)


train, test = load("/app/data/train.csv"), load("/app/data/test.csv")
stats = {}
for name in SPEC["numeric"]:
    vals = np.array([float(r[name]) for r in train if r[name].strip() != ""])
    stats[name] = (vals.mean(), vals.std() or 1.0)
X = design(train, stats)
y = np.array([float(r[SPEC["target"]]) for r in train])
coef = np.linalg.lstsq(X, y, rcond=None)[0]
if SPEC["robust"]:
    # Drop rows whose residual is far outside the bulk (unit slips in the labels), then refit.
    res = y - X @ coef
    med = np.median(res)
    mad = np.median(np.abs(res - med)) * 1.4826 or 1.0
    keep = np.abs(res - med) <= 4.0 * mad
    coef = np.linalg.lstsq(X[keep], y[keep], rcond=None)[0]
pred = design(test, stats) @ coef
with open("/app/predictions.csv", "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["id", SPEC["target"]])
    for r, p in zip(test, pred):
        w.writerow([r["id"], f"{p:.4f}"])
'''


class HeldoutRegression(TaskFamily):
    """Fit a model on a training CSV and predict a held-out CSV; the test scores RMSE against
    labels only it holds. The threshold is what a plain least-squares fit with squared terms,
    one-hot categories (and, where needed, imputation and outlier removal) reaches, plus slack."""

    name = "heldout_regression"
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
    domains = ("data_science",)
    verifier_kinds = ("metric_threshold",)
    fixture_kinds = ("text_only",)
    summary = "predict a numeric target for held-out rows; graded by RMSE against hidden labels"
    skill_types = ("feature_engineering", "model_training_and_evaluation")
    skills = ("encode categorical variables", "train a baseline model and a stronger one")
    languages = ("python",)
    anchors = ("NumPy",)
    command_complexities = ("bash_code",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        theme_name = rng.choice(sorted(REGRESSION_THEMES))
        theme = REGRESSION_THEMES[theme_name]
        n_train, n_test = REG_SIZES[level]
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


# --------------------------------------------------------------------------------------------
# PNG shape census: count and measure coloured shapes in a generated image
# --------------------------------------------------------------------------------------------

PALETTE = {"#d62728": "red", "#1f77b4": "blue", "#2ca02c": "green", "#ff7f0e": "orange",
           "#9467bd": "purple", "#e377c2": "pink", "#17becf": "cyan", "#8c564b": "brown"}
CANVAS = ((96, 72), (128, 96), (160, 120), (200, 150))
N_SHAPES = ((5, 7), (7, 10), (10, 14), (14, 20))
MIN_BLOB = 6


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def png_rgb(width: int, height: int, pixels: list[list[tuple[int, int, int]]], filters: list[int]) -> bytes:
    """An 8-bit RGB PNG. Each row uses the given PNG filter type (0-4). The zlib stream is written
    with stored (uncompressed) deflate blocks by hand: compressed output varies between zlib builds,
    and fixtures must be the same bytes on every machine."""
    bpp = 3
    raw = bytearray()
    prev = bytes(width * bpp)
    for y in range(height):
        cur = bytes(v for px in pixels[y] for v in px)
        ftype = filters[y]
        out = bytearray([ftype])
        for i, x in enumerate(cur):
            a = cur[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[ftype]
            out.append((x - pred) & 0xFF)
        raw += out
        prev = cur
    data = bytes(raw)
    stream = bytearray(b"\x78\x01")
    for start in range(0, len(data), 65535):
        block = data[start:start + 65535]
        final = 1 if start + 65535 >= len(data) else 0
        stream += struct.pack("<BHH", final, len(block), 0xFFFF ^ len(block)) + block
    stream += struct.pack(">I", zlib.adler32(data) & 0xFFFFFFFF)

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", bytes(stream)) + chunk(b"IEND", b"")


def _hex_rgb(h: str) -> tuple[int, int, int]:
    return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)


SHAPE_ORACLE = r'''
from collections import deque
from PIL import Image

COLOURS = __COLOURS__
MIN_BLOB = __MIN_BLOB__
WANT_LARGEST = __WANT_LARGEST__

img = Image.open("/app/scan.png").convert("RGB")
w, h = img.size
px = img.load()
wanted = {tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)): c for c in COLOURS}
seen = [[False] * w for _ in range(h)]
census = {c: [0, 0] for c in COLOURS}
blobs = []
for y in range(h):
    for x in range(w):
        if seen[y][x] or px[x, y] not in wanted:
            continue
        colour = px[x, y]
        queue, cells = deque([(x, y)]), []
        seen[y][x] = True
        while queue:
            cx, cy = queue.popleft()
            cells.append((cx, cy))
            for nx, ny in ((cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)):
                if 0 <= nx < w and 0 <= ny < h and not seen[ny][nx] and px[nx, ny] == colour:
                    seen[ny][nx] = True
                    queue.append((nx, ny))
        if len(cells) < MIN_BLOB:
            continue
        name = wanted[colour]
        census[name][0] += 1
        census[name][1] += len(cells)
        xs, ys = [c[0] for c in cells], [c[1] for c in cells]
        blobs.append((len(cells), min(ys), min(xs), name, min(xs), min(ys), max(xs), max(ys)))
lines = [f"{c} {census[c][0]} {census[c][1]}" for c in COLOURS]
if WANT_LARGEST:
    best = sorted(blobs, key=lambda b: (-b[0], b[1], b[2]))[0]
    lines.append("largest {} {} {} {} {}".format(*best[3:]))
with open("/app/census.txt", "w") as fh:
    fh.write("\n".join(lines) + "\n")
'''


class PngShapeCensus(TaskFamily):
    """Count and measure coloured shapes in a PNG scan: per colour, the number of shapes and their
    total area; at higher complexity also the bounding box of the largest shape, with noise specks
    to ignore and a non-uniform background."""

    name = "png_shape_census"
    method = (
        ("Decode the PNG with Pillow (or NumPy on top of it), build a mask per listed colour with exact RGB "
         "equality, and label 4-connected components with a BFS/flood fill; count components and sum their "
         "pixel counts per colour.", None),
        (f"Drop components below {MIN_BLOB} pixels before counting.", r"scanner specks"),
        ("Track each component's pixel count and min/max x and y to report the largest one.", r"`largest "),
        ("Check the total of all listed-colour pixels against the sum of the reported areas.", None),
    )
    domains = ("data_science",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("image",)
    summary = "count shapes and measure their areas per colour in a generated PNG image"
    skill_types = ()
    skills = ()
    languages = ("python",)
    anchors = ("NumPy",)
    command_complexities = ("bash_code",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        width, height = CANVAS[level]
        colours = rng.sample(sorted(PALETTE), 2 + level)
        noisy = level >= 3
        gradient = level >= 2
        want_largest = level >= 2

        occupied: set[tuple[int, int]] = set()
        shapes = []  # (colour, cells)
        target = rng.randint(*N_SHAPES[level])
        kinds = ("rect",) if level == 0 else ("rect", "disc") if level == 1 else ("rect", "disc", "triangle")
        attempts = 0
        while len(shapes) < target and attempts < 2000:
            attempts += 1
            cells = self._shape(rng, rng.choice(kinds), width, height)
            if cells and self._fits(cells, occupied, width, height):
                occupied |= cells
                shapes.append((rng.choice(colours), cells))
        specks = []
        if noisy:
            for _ in range(rng.randint(6, 12)):
                for _try in range(50):
                    x, y = rng.randrange(width - 2), rng.randrange(height - 2)
                    cells = {(x, y), (x + 1, y), (x, y + 1)}
                    cells = set(list(sorted(cells))[: rng.randint(1, 3)])
                    if self._fits(cells, occupied, width, height):
                        occupied |= cells
                        specks.append((rng.choice(colours), cells))
                        break

        bg_base = rng.randint(225, 245)
        pixels = []
        for y in range(height):
            row = []
            for x in range(width):
                if gradient:  # a scanner's uneven lighting: many near-grey shades, none in the palette
                    v = bg_base - (x * 12) // width - (y * 8) // height
                    row.append((v, v, min(255, v + 3)))
                else:
                    row.append((bg_base, bg_base, bg_base))
            pixels.append(row)
        for colour, cells in shapes + specks:
            rgb = _hex_rgb(colour)
            for x, y in cells:
                pixels[y][x] = rgb
        filters = [rng.randrange(5) for _ in range(height)]
        png = png_rgb(width, height, pixels, filters)

        census = {c: [0, 0] for c in colours}
        blobs = []
        for colour, cells in shapes:
            census[colour][0] += 1
            census[colour][1] += len(cells)
            xs, ys = [c[0] for c in cells], [c[1] for c in cells]
            blobs.append((len(cells), min(ys), min(xs), colour, min(xs), min(ys), max(xs), max(ys)))
        expected = [f"{c} {census[c][0]} {census[c][1]}" for c in colours]
        largest = None
        if want_largest:
            best = sorted(blobs, key=lambda b: (-b[0], b[1], b[2]))[0]
            largest = "largest {} {} {} {} {}".format(*best[3:])
            expected.append(largest)

        colour_list = ", ".join(f"`{c}` ({PALETTE[c]})" for c in colours)
        rules = [
            "A *shape* is a 4-connected region of pixels of exactly one listed colour. Shapes never touch "
            "each other (not even diagonally). Every pixel whose colour is not listed is background"
            + (" (the background is not one uniform colour)." if gradient else "."),
        ]
        if noisy:
            rules.append(f"Regions smaller than {MIN_BLOB} pixels are scanner specks, not shapes: ignore them "
                         "completely (they count neither as shapes nor towards areas).")
        rules_md = "\n".join(f"- {r}" for r in rules)
        deliver = [f"`/app/census.txt`: one line per listed colour, in the order listed: "
                   "`<colour> <number of shapes> <total area in pixels>` (colour written as above, "
                   "lowercase `#rrggbb`, single spaces)."]
        if want_largest:
            deliver.append("Then one more line, `largest <colour> <x_min> <y_min> <x_max> <y_max>`: the colour "
                           "and inclusive bounding box of the shape with the most pixels (x grows right, y "
                           "grows down, origin at the top-left pixel; ties: smallest `y_min`, then `x_min`).")
        instruction = instruction_frame(
            sig, "Shape census of a scanned sheet",
            f"""
            `/app/scan.png` ({width}x{height}, RGB) is a scan of a sheet with coloured marks. I need a census of
            the marks in these colours: {colour_list}.

            {indent_block(rules_md, 12)}

            `python3` has Pillow and NumPy available.
            """,
            deliver,
        )
        test_initial = pytest_module(f"""
            import os

            def test_scan_present():
                with open("/app/scan.png", "rb") as fh:
                    head = fh.read(24)
                assert head[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
                assert int.from_bytes(head[16:20], "big") == {width}
                assert int.from_bytes(head[20:24], "big") == {height}

            def test_no_census_yet():
                assert not os.path.exists("/app/census.txt")
        """)
        test_final = pytest_module(f"""
            EXPECTED = {expected!r}

            def _lines():
                with open("/app/census.txt", encoding="utf-8") as fh:
                    return [" ".join(line.split()) for line in fh if line.strip()]

            def test_line_count():
                assert len(_lines()) == len(EXPECTED)

            def test_colour_lines():
                got = _lines()
                for i, want in enumerate(EXPECTED):
                    if want.startswith("#"):
                        # The instruction asks for lowercase #rrggbb: case is part of the answer.
                        assert got[i] == want, f"line {{i + 1}}: got {{got[i]!r}}"
        """)
        if want_largest:
            test_final += "\n\n" + pytest_module("""
                def test_largest_shape():
                    assert _lines()[-1].lower() == EXPECTED[-1]
            """)
        oracle_src = (SHAPE_ORACLE.strip().replace("__COLOURS__", repr(colours))
                      .replace("__MIN_BLOB__", str(MIN_BLOB if noisy else 1))
                      .replace("__WANT_LARGEST__", repr(want_largest)))
        solve = bash_script(f"""
            python3 - <<'PY'
            {indent_block(oracle_src, 12)}
            PY
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("cp /tmp/env/fixtures/scan.png /app/scan.png"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"colours": colours, "min_region_pixels": MIN_BLOB if noisy else 1},
                   "census": {c: census[c] for c in colours}, "largest": largest, "noise_specks": len(specks),
                   "shape_count": len(shapes)},
            verifier_kind="exact_text",
            fixture_kind="image",
            fixtures={"scan.png": png},
            output_paths=["/app/census.txt"],
            apt_packages=("python3-pil", "python3-numpy"),
        )

    @staticmethod
    def _shape(rng, kind, width, height) -> set[tuple[int, int]]:
        if kind == "rect":
            w, h = rng.randint(3, max(4, width // 5)), rng.randint(3, max(4, height // 5))
            x0, y0 = rng.randrange(width - w), rng.randrange(height - h)
            return {(x, y) for x in range(x0, x0 + w) for y in range(y0, y0 + h)}
        if kind == "disc":
            r = rng.randint(2, max(3, min(width, height) // 9))
            cx, cy = rng.randrange(r, width - r), rng.randrange(r, height - r)
            return {(x, y) for x in range(cx - r, cx + r + 1) for y in range(cy - r, cy + r + 1)
                    if (x - cx) ** 2 + (y - cy) ** 2 <= r * r + r}
        # A right triangle with its right angle at the top-left: 4-connected row by row.
        n = rng.randint(4, max(5, min(width, height) // 5))
        x0, y0 = rng.randrange(width - n), rng.randrange(height - n)
        return {(x0 + dx, y0 + dy) for dy in range(n) for dx in range(n - dy)}

    @staticmethod
    def _fits(cells, occupied, width, height) -> bool:
        for x, y in cells:
            if not (0 <= x < width and 0 <= y < height):
                return False
            for dx in (-1, 0, 1):
                for dy in (-1, 0, 1):
                    if (x + dx, y + dy) in occupied:
                        return False
        return True


# --------------------------------------------------------------------------------------------
# Classifier report: per-class precision, recall, F1 and support from a predictions export
# --------------------------------------------------------------------------------------------

# theme -> (what made the predictions, what one row is, id prefix, class -> other spellings of it)
CLASSIFIER_THEMES = {
    "tickets": ("a support-ticket router", "ticket", "t",
                {"billing": ("invoice", "payment"), "bug": ("defect", "error report"),
                 "feature_request": ("feature request", "feature"), "account": ("login", "acct"),
                 "shipping": ("delivery", "shipment"), "spam": ("junk",), "refund": ("money back", "refunds")}),
    "landcover": ("a land-cover classifier for satellite tiles", "tile", "s",
                  {"water": ("lake", "river"), "forest": ("woodland", "trees"), "urban": ("built-up", "city"),
                   "cropland": ("crops", "farmland"), "grassland": ("pasture", "meadow"), "wetland": ("marsh",),
                   "bare_soil": ("bare soil", "barren")}),
    "wildlife": ("a camera-trap species classifier", "photo", "p",
                 {"deer": ("roe deer", "red deer"), "fox": ("red fox",), "badger": ("brock",),
                  "boar": ("wild boar",), "hare": ("brown hare",), "empty": ("blank", "no animal"),
                  "bird": ("birds", "avian")}),
}
CLASSIFIER_SIZES = ((3, 40), (4, 90), (5, 160), (6, 260))  # (classes, rows of the export) per level
REPORT_HEADER = "class,precision,recall,f1,support"


def _fixed4(value: Fraction) -> str:
    """A non-negative exact value with 4 decimals, half to even, in integer arithmetic (a float or
    a decimal context could move a tie)."""
    q, r = divmod(value.numerator * 10000, value.denominator)
    if 2 * r > value.denominator or (2 * r == value.denominator and q % 2):
        q += 1
    return f"{q // 10000}.{q % 10000:04d}"


def _classification_report(rows: list[list[str]], aliases: dict[str, str], threshold_milli: int | None,
                           last_wins: bool = True, abstain_at_equal: bool = False) -> list[str]:
    """The report lines for the export's rows (id, true, predicted, score) under the stated rules.
    The flags switch to misreadings of the rules, which a task's data must tell from the answer."""
    latest: dict[str, list[str]] = {}
    for row in rows:
        if last_wins or row[0] not in latest:
            latest[row[0]] = row
    counted = []
    for _ident, true_raw, pred_raw, score in latest.values():
        if not pred_raw.strip():
            continue
        pred: str | None = aliases.get(pred_raw.strip().lower(), pred_raw.strip().lower())
        if threshold_milli is not None:
            milli = int(score.replace(".", ""))  # scores are written 0.ddd
            if milli < threshold_milli or (abstain_at_equal and milli == threshold_milli):
                pred = None
        counted.append((aliases.get(true_raw.strip().lower(), true_raw.strip().lower()), pred))
    stats = {}
    for c in {t for t, _ in counted} | {p for _, p in counted if p is not None}:
        tp = sum(1 for t, p in counted if t == c and p == c)
        predicted = sum(1 for _, p in counted if p == c)
        support = sum(1 for t, _ in counted if t == c)
        prec = Fraction(tp, predicted) if predicted else Fraction(0)
        rec = Fraction(tp, support) if support else Fraction(0)
        stats[c] = (prec, rec, 2 * prec * rec / (prec + rec) if prec + rec else Fraction(0), support)
    total = len(counted)
    lines = [REPORT_HEADER]
    for c in sorted(stats, key=lambda c: (-stats[c][3], c)):
        p, r, f, n = stats[c]
        lines.append(f"{c},{_fixed4(p)},{_fixed4(r)},{_fixed4(f)},{n}")
    macro = [sum((s[i] for s in stats.values()), Fraction(0)) / len(stats) for i in range(3)]
    weighted = [sum((s[i] * s[3] for s in stats.values()), Fraction(0)) / total for i in range(3)]
    for name, avg in (("macro avg", macro), ("weighted avg", weighted)):
        lines.append(f"{name},{','.join(_fixed4(v) for v in avg)},{total}")
    return lines


CLASSIFIER_ORACLE = """
    import csv
    import os
    from decimal import ROUND_HALF_EVEN, Decimal
    from fractions import Fraction

    __CONSTANTS__

    aliases = {}
    if os.path.exists("/app/data/labels.csv"):
        with open("/app/data/labels.csv", newline="") as fh:
            aliases = {r["alias"].strip().lower(): r["label"].strip().lower() for r in csv.DictReader(fh)}

    def label(value):
        key = value.strip().lower()
        return aliases.get(key, key)

    last = {}
    with open("/app/data/predictions.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            last[r["id"].strip()] = r  # a later row of an id replaces the earlier one
    pairs = []
    for r in last.values():
        if not r["predicted_label"].strip():
            continue
        pred = label(r["predicted_label"])
        if THRESHOLD is not None and Decimal(r["score"]) < Decimal(THRESHOLD):
            pred = None
        pairs.append((label(r["true_label"]), pred))

    def ratio(a, b):
        return Fraction(a, b) if b else Fraction(0)

    def fmt(x):
        exact = Decimal(x.numerator) / Decimal(x.denominator)
        return str(exact.quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN))

    stats = {}
    for c in {t for t, _ in pairs} | {p for _, p in pairs if p is not None}:
        tp = sum(t == c and p == c for t, p in pairs)
        support = sum(t == c for t, _ in pairs)
        precision, recall = ratio(tp, sum(p == c for _, p in pairs)), ratio(tp, support)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else Fraction(0)
        stats[c] = (precision, recall, f1, support)
    total = len(pairs)
    out = ["class,precision,recall,f1,support"]
    for c, (p, r, f, n) in sorted(stats.items(), key=lambda kv: (-kv[1][3], kv[0])):
        out.append(f"{c},{fmt(p)},{fmt(r)},{fmt(f)},{n}")
    weights = {"macro avg": lambda n: Fraction(1, len(stats)), "weighted avg": lambda n: Fraction(n, total)}
    for name, weight in weights.items():
        avg = [sum(s[i] * weight(s[3]) for s in stats.values()) for i in range(3)]
        out.append(f"{name},{','.join(fmt(v) for v in avg)},{total}")
    with open("/app/report.csv", "w") as fh:
        fh.write("\\n".join(out) + "\\n")
"""


class ClassifierReport(TaskFamily):
    """Evaluate a classifier from its exported predictions: a per-class precision/recall/F1/support
    table with macro and weighted averages, exact rounding, and (as complexity grows) messy labels,
    an alias map, re-exported ids, missing predictions and an abstention threshold."""

    name = "classifier_report"
    method = (
        ("Read the CSVs with a CSV parser; normalise every label (trim, lower-case, then the alias map) before "
         "comparing; keep the last row per id before dropping missing predictions; then count, per class, true "
         "positives, predictions and support. Keep precision, recall, F1 and the averages as exact fractions "
         "(fractions.Fraction) and round once at the end with decimal's ROUND_HALF_EVEN; float round() and "
         "'%.4f' can round ties the other way. Check that supports add up to the counted rows.", None),
        ("Compare scores as decimals so a score equal to the threshold is not an abstention.",
         r"model abstains when"),
    )
    domains = ("data_science",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "per-class precision, recall, F1 and support with macro/weighted averages from a predictions CSV"
    skill_types = ("model_training_and_evaluation", "reporting")
    skills = ("report metrics suited to imbalanced classes", "export tidy result tables")
    languages = ("python",)
    command_complexities = ("bash_code",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        what, item, prefix, spellings = CLASSIFIER_THEMES[rng.choice(sorted(CLASSIFIER_THEMES))]
        n_classes, n_rows = CLASSIFIER_SIZES[level]
        classes = rng.sample(sorted(spellings), n_classes)
        aliases = {a: c for c in classes for a in spellings[c]} if level >= 2 else {}
        threshold = rng.choice((500, 550, 600)) if level == 3 else None
        for _attempt in range(30):
            rows = self._rows(rng, level, classes, aliases, n_rows, prefix, threshold)
            expected = _classification_report(rows, aliases, threshold)
            if self._discriminates(level, rows, aliases, threshold, expected, classes):
                break
        else:  # pragma: no cover - the rates below make a discriminating draw near certain
            raise RuntimeError(f"classifier_report: no discriminating export for task {sig.get('id')}")

        t_text = f"0.{threshold:03d}" if threshold is not None else None
        rules = []
        if level >= 1:
            rules.append("Labels are not written consistently: trim surrounding spaces and compare them "
                         "case-insensitively. Write class names in lower case.")
        if level >= 2:
            rules.append("`/app/data/labels.csv` (`alias,label`) lists other spellings: a trimmed, lower-cased "
                         "value that is an alias there stands for its label; any other value is a label itself.")
            rules.append("Some ids occur more than once (the model was re-run): only the last row of an id, in "
                         "file order, counts. If that row has an empty `predicted_label`, the prediction is "
                         "missing: leave the id out entirely (it counts nowhere).")
        if level == 3:
            rules.append(f"The model abstains when `score` is below {t_text} (a score of exactly {t_text} is not "
                         "an abstention). An abstained row still counts with its true label (it is in that "
                         "class's support and a miss for its recall), but its predicted label is dropped: it "
                         "predicts no class, and `abstain` gets no row of its own.")
        rules_md = "".join(f"- {r}\n" for r in rules) + ("\n" if rules else "")
        counted = "" if level >= 2 else "Every row of the export counts. "
        body = f"""
            `/app/data/predictions.csv` is the export of {what}, run on a labelled evaluation set: one row
            per {item} with the columns `id`, `true_label`, `predicted_label` and `score` (the model's
            confidence in its prediction). The classes are imbalanced, so I need the per-class table, not
            one accuracy.

            {indent_block(rules_md, 12)}{counted}The table has one row per class that is the true or the predicted
            label of at least one counted row. For a class c, with TP the counted rows whose true and
            predicted labels are both c:

            - `support`: the counted rows whose true label is c;
            - `precision` = TP / (counted rows predicted as c), and 0 when nothing is predicted as c;
            - `recall` = TP / support, and 0 when the support is 0;
            - `f1` = 2 * precision * recall / (precision + recall) from the unrounded values, 0 when both are 0.

            After the class rows come `macro avg` (each column's plain mean of the unrounded per-class values)
            and `weighted avg` (their mean weighted by support); the `support` of both is the number of counted
            rows. Write precision, recall and f1 with exactly 4 decimals, rounded once from the exact value,
            half to even (0.03125 -> 0.0312, 0.03135 -> 0.0314); supports are plain integers.

            The report is a CSV with the header `{REPORT_HEADER}`, then the class rows sorted by support,
            highest first, ties by class name (ascending), then `macro avg`, then `weighted avg`: no quoting,
            no spaces around commas. Only `python3` with its standard library is available (no pandas or
            scikit-learn).
            """
        out = "/app/report.csv"
        instruction = instruction_frame(sig, "Per-class evaluation report of a classifier", body,
                                        [f"`{out}`: the report described above, with `\\n` line endings."])
        fixtures = {"predictions.csv": _csv_text(["id", "true_label", "predicted_label", "score"], rows).encode()}
        if aliases:
            fixtures["labels.csv"] = _csv_text(["alias", "label"], sorted(aliases.items())).encode()
        row_counts = {"predictions.csv": len(rows), **({"labels.csv": len(aliases)} if aliases else {})}
        test_initial = csv_inputs_initial_test(row_counts, out)
        test_final = py_source("""
            __CONSTANTS__

            def _lines():
                with open(OUT, newline="") as fh:
                    got = fh.read().split("\\n")
                # Trailing blank lines are not rows (a final newline is expected anyway); blank lines inside are.
                while got and got[-1] == "":
                    got.pop()
                return got

            def test_header():
                assert _lines()[:1] == EXPECTED[:1], "header line differs"

            def test_report_matches():
                got = _lines()
                for i, (g, want) in enumerate(zip(got, EXPECTED)):
                    assert g == want, f"line {i + 1}: got {g!r}"
                assert len(got) == len(EXPECTED), f"{len(got)} lines, expected {len(EXPECTED)}"
            """, OUT=out, EXPECTED=expected)
        solve = python_oracle(py_source(CLASSIFIER_ORACLE, THRESHOLD=t_text))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/data && cp /tmp/env/fixtures/*.csv /app/data/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"rules": rules, "header": REPORT_HEADER, "threshold": t_text},
                   "expected_rows": expected[1:], "export_rows": len(rows)},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )

    @staticmethod
    def _rows(rng: random.Random, level: int, classes: list[str], aliases: dict[str, str], n_rows: int,
              prefix: str, threshold: int | None) -> list[list[str]]:
        never_predicted = classes[-1] if level >= 1 else None  # exercises the precision-0 rule
        predicted_only = classes[-2] if level >= 2 else None  # exercises the recall-0 rule
        true_pool = [c for c in classes if c != predicted_only]
        # Imbalanced: up to ten to one, and a class the model never predicts is a rare one.
        weights = [rng.randint(1, 3) if c == never_predicted else rng.randint(1, 10) for c in true_pool]
        accuracy = {c: rng.uniform(0.45, 0.92) for c in classes}
        by_label: dict[str, list[str]] = {}
        for alias, c in sorted(aliases.items()):
            by_label.setdefault(c, []).append(alias)

        def spell(label: str) -> str:
            if level == 0:
                return label
            if by_label.get(label) and rng.random() < 0.3:
                label = rng.choice(by_label[label])
            return rng.choice((label, label, label.upper(), label.title(), f" {label}", f"{label}  ",
                               f" {label.title()} "))

        def record(ident: str, true_text: str | None = None) -> list[str]:
            true = rng.choices(true_pool, weights)[0]
            if true != never_predicted and rng.random() < accuracy[true]:
                pred, milli = true, rng.randint(420, 999)
            else:
                pred = rng.choice([c for c in classes if c not in (true, never_predicted)])
                milli = rng.randint(250, 880)
            if threshold is not None and rng.random() < 0.05:
                milli = threshold  # on the boundary, which is not an abstention
            true_text = true_text if true_text is not None else spell(true)
            if level >= 2 and rng.random() < 0.05:
                return [ident, true_text, "", ""]
            return [ident, true_text, spell(pred), f"0.{milli:03d}"]

        ids = [f"{prefix}{n:05d}" for n in rng.sample(range(1, 100000), n_rows)]
        rows = [record(i) for i in ids]
        if level >= 2:
            # Re-runs: an earlier row of some ids (same true label) sits before the row that counts.
            for ident in rng.sample(ids, n_rows // 10):
                pos = next(k for k, r in enumerate(rows) if r[0] == ident)
                rows.insert(rng.randint(0, pos), record(ident, rows[pos][1]))
        return rows

    @staticmethod
    def _discriminates(level: int, rows: list[list[str]], aliases: dict[str, str], threshold: int | None,
                       expected: list[str], classes: list[str]) -> bool:
        """Whether the export exercises the level's rules: each misreading changes the report."""
        support = {line.split(",")[0]: line.split(",")[4] for line in expected[1:-2]}
        if level >= 1 and support.get(classes[-1], "0") == "0":
            return False
        if level >= 2 and (classes[-2] not in support
                           or _classification_report(rows, aliases, threshold, last_wins=False) == expected):
            return False
        return not (level == 3 and _classification_report(rows, aliases, threshold, abstain_at_equal=True) == expected)


FAMILIES = [HeldoutRegression, PngShapeCensus, ClassifierReport]


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

