"""Per-class precision, recall, F1 and support from a classifier's predictions export."""

from __future__ import annotations

import random
from fractions import Fraction

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     indent_block, instruction_frame)
from termforge.generate.families.package_files import family_template
from termforge.generate.families.sources import (csv_inputs_initial_test, csv_text, packaged_source, py_source,
                                                 python_oracle)


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


CLASSIFIER_ORACLE = family_template(__name__, "oracle.py.txt")


class ClassifierReport(TaskFamily):
    """Evaluate a classifier from its exported predictions: a per-class precision/recall/F1/support
    table with macro and weighted averages, exact rounding, and (as complexity grows) messy labels,
    an alias map, re-exported ids, missing predictions and an abstention threshold."""

    knobs = DifficultyKnobs(classes=(3, 4, 5, 6), export_rows=(40, 90, 160, 260))
    axes = FamilyAxes(name="classifier_report", domains=("data_science",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("model_training_and_evaluation", "reporting"),
                      skills=("report metrics suited to imbalanced classes", "export tidy result tables"),
                      languages=("python",), command_complexities=("bash_code",),
                      summary="per-class precision, recall, F1 and support with macro/weighted averages from a "
                              "predictions CSV")
    method = (
        ("Read the CSVs with a CSV parser; normalise every label (trim, lower-case, then the alias map) before "
         "comparing; keep the last row per id before dropping missing predictions; then count, per class, true "
         "positives, predictions and support. Keep precision, recall, F1 and the averages as exact fractions "
         "(fractions.Fraction) and round once at the end with decimal's ROUND_HALF_EVEN; float round() and "
         "'%.4f' can round ties the other way. Check that supports add up to the counted rows.", None),
        ("Compare scores as decimals so a score equal to the threshold is not an abstention.",
         r"model abstains when"),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        what, item, prefix, spellings = CLASSIFIER_THEMES[rng.choice(sorted(CLASSIFIER_THEMES))]
        n_classes, n_rows = knobs.classes, knobs.export_rows
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
        fixtures = {"predictions.csv": csv_text(["id", "true_label", "predicted_label", "score"], rows).encode()}
        if aliases:
            fixtures["labels.csv"] = csv_text(["alias", "label"], sorted(aliases.items())).encode()
        row_counts = {"predictions.csv": len(rows), **({"labels.csv": len(aliases)} if aliases else {})}
        test_initial = csv_inputs_initial_test(row_counts, out)
        test_final = packaged_source(__name__, "test_final_state.py.txt", OUT=out, EXPECTED=expected)
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


FAMILY = ClassifierReport
