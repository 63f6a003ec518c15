"""data_querying families: questions over a SQLite database, and a CSV group-by query tool."""

from __future__ import annotations

import inspect
import random
import textwrap

from termforge.generate.base import (TaskFamily, TaskSpec, bash_script, complexity_level, indent_block,
                                     instruction_frame, pytest_module)



# --------------------------------------------------------------------------------------------
# SQLite: a small shop database, a handful of parameterised questions
# --------------------------------------------------------------------------------------------

FIRST_NAMES = ("Ada", "Bram", "Chiara", "Dmitri", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jonas",
               "Kavya", "Lars", "Mira", "Nnamdi", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tove",
               "Umar", "Vera", "Wen", "Ximena", "Yusuf", "Zofia")
LAST_NAMES = ("Abara", "Berg", "Castillo", "Dahl", "Eze", "Fischer", "Gallo", "Haddad", "Ito", "Jovanovic",
              "Kowalski", "Lindqvist", "Moreau", "Novak", "O'Neill", "Petrov", "Quist", "Rossi", "Sato",
              "Tanaka", "Ulloa", "Varga", "Weber", "Yilmaz", "Zhou")
REGIONS = ("north", "south", "east", "west", "central", "coastal", "highlands")
CATEGORIES = ("garden", "kitchen", "office", "outdoor", "toys", "lighting", "bath")
ADJECTIVES = ("Sturdy", "Compact", "Deluxe", "Classic", "Foldable", "Rustic", "Modular", "Silent",
              "Bright", "Slim", "Heavy", "Portable", "Tiny", "Smart", "Vintage")
NOUNS = ("Lamp", "Kettle", "Chair", "Planter", "Shelf", "Blender", "Hammock", "Desk", "Lantern", "Towel",
         "Puzzle", "Stool", "Grill", "Mirror", "Clock", "Basket")
STATUSES = ("shipped", "pending", "cancelled", "returned")
STATUS_WEIGHTS = (60, 15, 15, 10)
# rows, columns: customers, products, orders per complexity level
SHOP_SIZES = ((10, 8, 40), (18, 12, 90), (30, 18, 180), (45, 24, 300))
SHOP_QUESTIONS = (2, 3, 5, 7)

SHIPPED_SQL = "lower(trim(o.status)) = 'shipped'"


def _messy_status(status: str, rng: random.Random) -> str:
    """A status as a person might have typed it: case and stray spaces vary."""
    return rng.choice((status, status.capitalize(), status.upper(), f" {status}", f"{status} "))


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class SqliteShopQuestions(TaskFamily):
    """Answer reporting questions over a SQLite shop database (joins, grouping, NOT EXISTS)."""

    name = "sqlite_shop_questions"
    method = (
        ("Start with `.schema` (or sqlite_master) to see how orders, order lines, products and customers link. "
         "Revenue comes from the order lines' charged price, not the product list price.", None),
        ("Normalise the status text before comparing it (trim and lowercase: it was typed by hand); month "
         "filters must tolerate a time suffix on the date.", r"typed by hand"),
        ("Normalise the status text before comparing it.", lambda v: not v.states(r"typed by hand")),
        ("For 'never' questions use NOT EXISTS or a LEFT JOIN, for rankings ORDER BY the aggregate with the "
         "stated tie-break, and cross-check each number with a second query.", None),
    )
    domains = ("data_querying",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "answer parameterised reporting questions over a SQLite database built from a SQL dump"
    skill_types = ("relational_aggregation",)
    skills = ("group rows and compute aggregates per group",)
    languages = ("sql", "python", "bash")
    anchors = ("SQLite",)
    command_complexities = ("bash_only", "bash_code")

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        n_cust, n_prod, n_ord = SHOP_SIZES[level]
        messy = level >= 2
        regions = rng.sample(REGIONS, 3 + (level >= 2))
        categories = rng.sample(CATEGORIES, 3 + (level >= 1))

        names = rng.sample([f"{f} {l}" for f in FIRST_NAMES for l in LAST_NAMES], n_cust)
        customers = [{"id": i + 1, "name": names[i], "region": rng.choice(regions),
                      "joined": f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"} for i in range(n_cust)]
        pnames = rng.sample([f"{a} {n}" for a in ADJECTIVES for n in NOUNS], n_prod)
        products = [{"id": i + 1, "name": pnames[i], "category": categories[i % len(categories)],
                     "list": rng.randint(199, 25000)} for i in range(n_prod)]
        orders = []
        for oid in range(1, n_ord + 1):
            status = rng.choices(STATUSES, STATUS_WEIGHTS)[0]
            month, day = rng.randint(1, 12), rng.randint(1, 28)
            placed = f"2024-{month:02d}-{day:02d}"
            if messy:
                placed += f" {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            # Intricate databases also hold empty orders (abandoned carts): they join to nothing.
            n_items = 0 if level == 3 and rng.random() < 0.05 else rng.randint(1, 4)
            items = []
            for p in rng.sample(products, n_items):
                # The price charged differs from today's list price: revenue must use the charged one.
                unit = int(p["list"] * rng.uniform(0.75, 1.0))
                items.append({"pid": p["id"], "qty": rng.randint(1, 9), "unit": unit})
            orders.append({"id": oid, "cust": rng.randint(1, n_cust), "placed": placed,
                           "status": _messy_status(status, rng) if messy else status, "items": items})

        questions = self._questions(rng, customers, products, orders, regions, categories)
        chosen = rng.sample(questions, min(SHOP_QUESTIONS[level], len(questions)))
        for i, q in enumerate(chosen, 1):
            q["qid"] = f"q{i}"

        sql = self._dump(customers, products, orders)
        out = "/app/answers.txt"
        status_note = (" The `status` column was typed by hand: compare it case-insensitively and ignore "
                       "surrounding spaces (`' Shipped'` means `shipped`). `placed_on` may carry a time of day."
                       if messy else "")
        qlines = "\n".join(f"- **{q['qid']}**: {q['text']}" for q in chosen)
        instruction = instruction_frame(
            sig, "Answer questions from the shop database",
            f"""
            The SQLite database `/app/shop.db` holds our shop's data: tables `customers`, `products`,
            `orders` and `order_items` (inspect the schema yourself). The revenue of an order line is
            `qty * unit_price_cents` (the price actually charged, not the product's current list price);
            an order is *shipped* when its status is `shipped`.{status_note}

            Answer these questions:

            {indent_block(qlines, 12)}
            """,
            [f"`{out}`: one line per question, `<id>: <answer>` (e.g. `q1: 42`), in any order. Money in "
             "integer cents; names exactly as stored; lists comma-separated without spaces."],
        )
        expected = {q["qid"]: q["answer"] for q in chosen}
        test_initial = pytest_module(f"""
            import os
            import sqlite3

            def test_database_present():
                con = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
                tables = {{r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}}
                assert {{"customers", "products", "orders", "order_items"}} <= tables
                assert con.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == {n_ord}

            def test_no_answers_yet():
                assert not os.path.exists("{out}")
        """)
        test_final = pytest_module(f"""
            import pytest

            EXPECTED = {expected!r}

            def _answers():
                got = {{}}
                with open("{out}", encoding="utf-8") as fh:
                    for line in fh:
                        if line.strip():
                            qid, sep, answer = line.partition(":")
                            assert sep, f"line without '<id>: ' prefix: {{line!r}}"
                            # A question answered twice (even identically) is not answered once.
                            assert qid.strip() not in got, f"question {{qid.strip()}} answered twice"
                            got[qid.strip()] = answer.strip()
                return got

            def test_every_question_answered_once():
                assert sorted(_answers()) == sorted(EXPECTED)

            @pytest.mark.parametrize("qid", sorted(EXPECTED))
            def test_answer(qid):
                assert _answers().get(qid) == EXPECTED[qid]
        """)
        plan = [(q["qid"], q["sql"], q["params"], q["shape"]) for q in chosen]
        solve = bash_script(f"""
            python3 - <<'PY'
            import sqlite3
            PLAN = {plan!r}
            con = sqlite3.connect("/app/shop.db")
            lines = []
            for qid, sql, params, shape in PLAN:
                rows = con.execute(sql, params).fetchall()
                value = ",".join(str(r[0]) for r in rows) if shape == "list" else str(rows[0][0])
                lines.append(f"{{qid}}: {{value}}")
            with open("{out}", "w", encoding="utf-8") as fh:
                fh.write("\\n".join(lines) + "\\n")
            PY
        """)
        setup = bash_script("""
            python3 - <<'PY'
            import sqlite3
            con = sqlite3.connect("/app/shop.db")
            with open("/tmp/env/fixtures/shop.sql", encoding="utf-8") as fh:
                con.executescript(fh.read())
            con.commit()
            con.close()
            PY
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=setup,
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"questions": {q["qid"]: q["text"] for q in chosen}}, "answers": expected,
                   "queries": {q["qid"]: q["sql"] for q in chosen}},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures={"shop.sql": sql.encode()},
            output_paths=[out],
        )

    @staticmethod
    def _dump(customers, products, orders) -> str:
        out = [
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT NOT NULL, "
            "joined_on TEXT NOT NULL);",
            "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, "
            "list_price_cents INTEGER NOT NULL);",
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), "
            "placed_on TEXT NOT NULL, status TEXT NOT NULL);",
            "CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id), product_id INTEGER NOT NULL "
            "REFERENCES products(id), qty INTEGER NOT NULL, unit_price_cents INTEGER NOT NULL);",
            "BEGIN;",
        ]
        for c in customers:
            out.append(f"INSERT INTO customers VALUES ({c['id']}, {_sql_text(c['name'])}, "
                       f"{_sql_text(c['region'])}, {_sql_text(c['joined'])});")
        for p in products:
            out.append(f"INSERT INTO products VALUES ({p['id']}, {_sql_text(p['name'])}, "
                       f"{_sql_text(p['category'])}, {p['list']});")
        for o in orders:
            out.append(f"INSERT INTO orders VALUES ({o['id']}, {o['cust']}, {_sql_text(o['placed'])}, "
                       f"{_sql_text(o['status'])});")
        for o in orders:
            for it in o["items"]:
                out.append(f"INSERT INTO order_items VALUES ({o['id']}, {it['pid']}, {it['qty']}, {it['unit']});")
        out.append("COMMIT;")
        return "\n".join(out) + "\n"

    @staticmethod
    def _questions(rng, customers, products, orders, regions, categories) -> list[dict]:
        """Every question kind with parameters that give a non-trivial answer, computed in Python
        (the oracle answers the same questions with SQL, so the two cross-check each other)."""
        by_id = {c["id"]: c for c in customers}
        prod = {p["id"]: p for p in products}

        def shipped(o):
            return o["status"].strip().lower() == "shipped"

        def revenue(o):
            return sum(it["qty"] * it["unit"] for it in o["items"])

        qs = []
        region = rng.choice(regions)
        qs.append({
            "text": f"Total revenue, in cents, of shipped orders placed by customers in region `{region}`.",
            "answer": str(sum(revenue(o) for o in orders if shipped(o) and by_id[o["cust"]]["region"] == region)),
            "sql": "SELECT COALESCE(SUM(oi.qty * oi.unit_price_cents), 0) FROM order_items oi "
                   "JOIN orders o ON o.id = oi.order_id JOIN customers c ON c.id = o.customer_id "
                   f"WHERE c.region = ? AND {SHIPPED_SQL}",
            "params": [region], "shape": "scalar"})

        per_cat: dict[str, dict[str, int]] = {}
        for o in orders:
            if shipped(o):
                for it in o["items"]:
                    cat = prod[it["pid"]]["category"]
                    name = by_id[o["cust"]]["name"]
                    per_cat.setdefault(cat, {}).setdefault(name, 0)
                    per_cat[cat][name] += it["qty"] * it["unit"]
        if per_cat:
            cat = rng.choice(sorted(per_cat))
            best = sorted(per_cat[cat].items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            qs.append({
                "text": f"The name of the customer with the highest shipped revenue from products in category "
                        f"`{cat}` (ties: the alphabetically first name).",
                "answer": best,
                "sql": "SELECT c.name FROM order_items oi JOIN orders o ON o.id = oi.order_id "
                       "JOIN customers c ON c.id = o.customer_id JOIN products p ON p.id = oi.product_id "
                       f"WHERE p.category = ? AND {SHIPPED_SQL} GROUP BY c.id "
                       "ORDER BY SUM(oi.qty * oi.unit_price_cents) DESC, c.name ASC LIMIT 1",
                "params": [cat], "shape": "scalar"})

        month = rng.choice(sorted({o["placed"][:7] for o in orders}))
        qs.append({
            "text": f"The number of orders placed in month `{month}` that were not cancelled (any other status counts).",
            "answer": str(sum(1 for o in orders if o["placed"][:7] == month
                              and o["status"].strip().lower() != "cancelled")),
            "sql": "SELECT COUNT(*) FROM orders o WHERE substr(o.placed_on, 1, 7) = ? "
                   "AND lower(trim(o.status)) != 'cancelled'",
            "params": [month], "shape": "scalar"})

        qty: dict[int, int] = {}
        for o in orders:
            if shipped(o):
                for it in o["items"]:
                    qty[it["pid"]] = qty.get(it["pid"], 0) + it["qty"]
        top = sorted(qty.items(), key=lambda kv: (-kv[1], prod[kv[0]]["name"]))[:3]
        qs.append({
            "text": "The names of the 3 products with the largest total shipped quantity, largest first "
                    "(ties: alphabetical by name).",
            "answer": ",".join(prod[pid]["name"] for pid, _ in top),
            "sql": "SELECT p.name FROM order_items oi JOIN orders o ON o.id = oi.order_id "
                   f"JOIN products p ON p.id = oi.product_id WHERE {SHIPPED_SQL} GROUP BY p.id "
                   "ORDER BY SUM(oi.qty) DESC, p.name ASC LIMIT 3",
            "params": [], "shape": "list"})

        region2 = rng.choice(regions)
        has_shipped = {o["cust"] for o in orders if shipped(o)}
        qs.append({
            "text": f"The number of customers in region `{region2}` who have no shipped order at all.",
            "answer": str(sum(1 for c in customers if c["region"] == region2 and c["id"] not in has_shipped)),
            "sql": "SELECT COUNT(*) FROM customers c WHERE c.region = ? AND NOT EXISTS "
                   f"(SELECT 1 FROM orders o WHERE o.customer_id = c.id AND {SHIPPED_SQL})",
            "params": [region2], "shape": "scalar"})

        valued = [o for o in orders if shipped(o) and o["items"]]
        if valued:
            biggest = sorted(valued, key=lambda o: (-revenue(o), o["id"]))[0]
            qs.append({
                "text": "The id of the shipped order with the largest revenue (ties: the smallest id).",
                "answer": str(biggest["id"]),
                "sql": "SELECT o.id FROM orders o JOIN order_items oi ON oi.order_id = o.id "
                       f"WHERE {SHIPPED_SQL} GROUP BY o.id "
                       "ORDER BY SUM(oi.qty * oi.unit_price_cents) DESC, o.id ASC LIMIT 1",
                "params": [], "shape": "scalar"})

        counts: dict[int, int] = {}
        for o in orders:
            if shipped(o):
                counts[o["cust"]] = counts.get(o["cust"], 0) + 1
        k = rng.randint(2, max(2, min(4, max(counts.values(), default=2))))
        qs.append({
            "text": f"The number of customers with at least {k} shipped orders.",
            "answer": str(sum(1 for n in counts.values() if n >= k)),
            "sql": "SELECT COUNT(*) FROM (SELECT o.customer_id FROM orders o "
                   f"WHERE {SHIPPED_SQL} GROUP BY o.customer_id HAVING COUNT(*) >= ?)",
            "params": [k], "shape": "scalar"})

        cat2 = rng.choice(categories)
        qs.append({
            "text": f"The total discount, in cents, given on shipped order lines for products in category "
                    f"`{cat2}`: the sum over those lines of `qty * (list price - charged unit price)`.",
            "answer": str(sum(it["qty"] * (prod[it["pid"]]["list"] - it["unit"]) for o in orders if shipped(o)
                              for it in o["items"] if prod[it["pid"]]["category"] == cat2)),
            "sql": "SELECT COALESCE(SUM(oi.qty * (p.list_price_cents - oi.unit_price_cents)), 0) "
                   "FROM order_items oi JOIN orders o ON o.id = oi.order_id JOIN products p ON p.id = oi.product_id "
                   f"WHERE p.category = ? AND {SHIPPED_SQL}",
            "params": [cat2], "shape": "scalar"})
        return qs


# --------------------------------------------------------------------------------------------
# CSV group-by tool, graded by fuzzing against a reference
# --------------------------------------------------------------------------------------------

CSV_THEMES = {
    "shipments": {"keys": {"warehouse": ["Rotterdam", "Zürich", "Lyon", "Gdańsk", "Porto"],
                           "carrier": ["DHL", "UPS", "PostNL", "GLS"]},
                  "values": ["weight_kg", "cost_cents"], "text": "note", "id": "shipment_id"},
    "tickets": {"keys": {"team": ["Infra", "Billing", "Mobile", "Search", "Data"],
                         "priority": ["P1", "P2", "P3", "P4"]},
                "values": ["minutes_spent", "reopen_count"], "text": "summary", "id": "ticket_id"},
    "readings": {"keys": {"site": ["Ørsund", "Bergamo", "Kyoto", "Tarifa", "Nome"],
                          "sensor": ["temp", "humidity", "wind", "pressure"]},
                 "values": ["value", "battery_pct"], "text": "comment", "id": "reading_id"},
}
NOTE_WORDS = ("late", "fragile", "re-sent", "ok", "customs", "checked", "urgent", "see ticket", "n/a")


def csvq_reference(text: str, group: str, value: str, agg: str, where: str | None, top: int | None,
                   spec: dict) -> tuple[int, str]:
    """The specified behaviour of csvq.py: (exit status, stdout) for one invocation."""
    import csv as _csv
    import io as _io

    def norm(s):
        return s.strip().lower() if spec["normalize"] else s

    reader = _csv.reader(_io.StringIO(text, newline=""))
    rows = list(reader)
    header, body = rows[0], rows[1:]
    where_col = where_val = None
    if where is not None:
        where_col, _, where_val = where.partition("=")
    for col in (group, value, where_col):
        if col is not None and col not in header:
            return 2, ""
    gi, vi = header.index(group), header.index(value)
    wi = header.index(where_col) if where_col is not None else None
    groups: dict[str, list[int]] = {}
    for row in body:
        if wi is not None and norm(row[wi]) != norm(where_val):
            continue
        raw = row[vi].strip()
        if raw == "":
            if spec["empty"] == "skip":
                continue
            num = 0
        else:
            num = int(raw)
        groups.setdefault(norm(row[gi]), []).append(num)
    result = {}
    for key, nums in groups.items():
        result[key] = {"sum": sum(nums), "min": min(nums), "max": max(nums), "count": len(nums)}[agg]
    if spec["order"] == "key":
        ordered = sorted(result.items())
    else:
        ordered = sorted(result.items(), key=lambda kv: (-kv[1], kv[0]))
    if top is not None:
        ordered = ordered[:top]
    return 0, "".join(f"{k}{spec['sep']}{v}\n" for k, v in ordered)


def csvq_make_case(rng, theme: dict, spec: dict, shape: str = "random") -> tuple[str, str, str, str, str | None, int | None]:
    """One random invocation: a CSV text with its quirks and the arguments to run on it. shape
    "header_only" and "unknown_column" force the two edge cases every run must include."""
    import csv as _csv
    import io as _io

    keys = dict(theme["keys"])
    columns = [theme["id"], *keys, *theme["values"], theme["text"]]
    rng.shuffle(columns)

    def key_value(col):
        base = rng.choice(keys[col])
        if spec["normalize"] and rng.random() < 0.4:
            base = rng.choice((base.upper(), base.lower(), f" {base}", f"{base}  "))
        elif not spec["normalize"] and rng.random() < 0.15:
            base = base.lower()  # a distinct group when keys are compared exactly
        return base

    def note():
        words = rng.sample(spec["note_words"], rng.randint(1, 3))
        sep = rng.choice((" ", ", ", "; ", "\n", ' "quoted" '))
        return sep.join(words)

    rows = []
    n_rows = 0 if shape == "header_only" else rng.choice((0, 1, 2, 5, 12, 25, 40))
    for i in range(n_rows):
        row = {theme["id"]: str(1000 + i)}
        for col in keys:
            row[col] = key_value(col)
        for col in theme["values"]:
            roll = rng.random()
            row[col] = ("" if roll < 0.12 else f" {rng.randint(-20, 400)} " if roll < 0.2
                        else str(rng.randint(-20, 400)))
        row[theme["text"]] = note()
        rows.append([row[c] for c in columns])
    buf = _io.StringIO()
    quoting = rng.choice((_csv.QUOTE_MINIMAL, _csv.QUOTE_ALL))
    writer = _csv.writer(buf, quoting=quoting, lineterminator=rng.choice(("\n", "\r\n")))
    writer.writerow(columns)
    writer.writerows(rows)
    group = rng.choice(list(keys))
    value = rng.choice(theme["values"])
    if shape == "unknown_column" or rng.random() < 0.04:
        group = group + "_x"  # an unknown column: the tool must refuse
    agg = rng.choice(("sum", "min", "max", "count"))
    where = None
    if spec["where"] and rng.random() < 0.5:
        other = rng.choice([c for c in keys if c != group.removesuffix("_x")])
        where = f"{other}={rng.choice(keys[other])}"
    top = rng.randint(1, 4) if spec["top"] and rng.random() < 0.5 else None
    return buf.getvalue(), group, value, agg, where, top


CSVQ_ORACLE = r'''
import argparse
import csv
import sys

SPEC = __SPEC__


def norm(s):
    return s.strip().lower() if SPEC["normalize"] else s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--group", required=True)
    ap.add_argument("--value", required=True)
    ap.add_argument("--agg", required=True, choices=["sum", "min", "max", "count"])
    ap.add_argument("--where")
    ap.add_argument("--top", type=int)
    args = ap.parse_args()
    with open(args.path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        body = list(reader)
    where_col = where_val = None
    if args.where is not None:
        where_col, _, where_val = args.where.partition("=")
    for col in (args.group, args.value, where_col):
        if col is not None and col not in header:
            print(f"unknown column: {col}", file=sys.stderr)
            sys.exit(2)
    gi, vi = header.index(args.group), header.index(args.value)
    wi = header.index(where_col) if where_col is not None else None
    groups = {}
    for row in body:
        if wi is not None and norm(row[wi]) != norm(where_val):
            continue
        raw = row[vi].strip()
        if raw == "":
            if SPEC["empty"] == "skip":
                continue
            raw = "0"
        groups.setdefault(norm(row[gi]), []).append(int(raw))
    agg = {"sum": sum, "min": min, "max": max, "count": len}[args.agg]
    result = {k: agg(v) for k, v in groups.items()}
    if SPEC["order"] == "key":
        ordered = sorted(result.items())
    else:
        ordered = sorted(result.items(), key=lambda kv: (-kv[1], kv[0]))
    if args.top is not None:
        ordered = ordered[: args.top]
    for k, v in ordered:
        sys.stdout.write(f"{k}{SPEC['sep']}{v}\n")


if __name__ == "__main__":
    main()
'''


class CsvGroupByTool(TaskFamily):
    """Write a group-by query CLI over quirky CSV files; graded by fuzzing against a reference."""

    name = "csv_groupby_tool"
    method = (
        ("Parse with a real CSV parser (csv module with newline=''), never by splitting lines on commas: "
         'fields hold quoted commas, quotes and newlines. Look columns up by header name. Decide the empty-'
         'value and key-normalisation rules before aggregating, sort with an explicit key, and build small '
         'adversarial files (empty, header only, CRLF, quoted newlines, unknown column) to compare against the '
         'worked example.', None),
    )
    domains = ("data_querying",)
    verifier_kinds = ("fuzz_equivalence",)
    fixture_kinds = ("text_only",)
    summary = "implement a CSV group-by/aggregate query tool, checked on randomly generated CSV files"
    skill_types = ("semi_structured_queries", "relational_aggregation")
    skills = ("query CSV files by column name", "group rows and compute aggregates per group")
    languages = ("python",)
    command_complexities = ("bash_code",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        theme_name = rng.choice(sorted(CSV_THEMES))
        theme = CSV_THEMES[theme_name]
        spec = {
            "normalize": rng.random() < 0.5,
            "empty": rng.choice(("skip", "zero")),
            "order": rng.choice(("key", "value")),
            "sep": rng.choice(("\t", ",", " | ")),
            "where": level >= 2,
            "top": level >= 3,
            "note_words": list(NOTE_WORDS),
        }
        fuzz_seed = rng.randrange(10**8, 10**9)
        n_cases = (12, 16, 20, 24)[level]

        # The sample shown to the agent: a mid-sized file and one worked invocation.
        sample_rng = random.Random(rng.randrange(2**32))
        while True:
            text, group, value, agg, where, top = csvq_make_case(sample_rng, theme, spec)
            code, out = csvq_reference(text, group, value, agg, where, top, spec)
            if code == 0 and out.count("\n") >= 2:
                break
        example_args = _csvq_argv("/app/data/sample.csv", group, value, agg, where, top)

        sep_name = {"\t": "a tab", ",": "a comma", " | ": "` | ` (space, bar, space)"}[spec["sep"]]
        rules = [
            "The first row is a header; columns are addressed by header name and their order varies "
            "between files. Fields use standard CSV quoting (they may contain commas, doubled quotes "
            "and newlines). Files are UTF-8; line endings may be `\\n` or `\\r\\n`.",
            "Values are integers, possibly with surrounding spaces. "
            + ("A row whose value field is empty (or only spaces) is ignored entirely; a group left with "
               "no rows is not printed." if spec["empty"] == "skip"
               else "An empty (or all-space) value counts as `0` and the row still counts."),
            ("Group keys are normalised before grouping and printing: surrounding spaces stripped and "
             "lowercased (`' Lyon'` and `LYON` are the group `lyon`)." if spec["normalize"]
             else "Group keys are compared and printed exactly as stored (case and spaces matter)."),
            "`--agg` is one of `sum`, `min`, `max`, `count` (the number of rows counted in the group).",
            ("Output one line per group, `<key><SEP><aggregate>`, sorted by key (plain code-point order)."
             if spec["order"] == "key" else
             "Output one line per group, `<key><SEP><aggregate>`, sorted by the aggregate, largest first; "
             "ties by key in plain code-point order."),
            f"`<SEP>` is {sep_name}. A file with no data rows prints nothing. Exit status 0 on success.",
            "If `--group`, `--value` or the `--where` column names a column that is not in the header, "
            "print an error to stderr and exit with status 2.",
        ]
        if spec["where"]:
            rules.append("`--where COL=VALUE` (split at the first `=`) keeps only rows whose `COL` field equals "
                         "`VALUE`" + (", both normalised like group keys." if spec["normalize"] else " exactly."))
        if spec["top"]:
            rules.append("`--top N` prints only the first N lines of the sorted output.")
        usage = "python3 /app/csvq.py FILE --group COL --value COL --agg AGG"
        usage += " [--where COL=VALUE]" if spec["where"] else ""
        usage += " [--top N]" if spec["top"] else ""
        rules_md = "\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1))
        example_out = out.replace("\t", "<TAB>")
        instruction = instruction_frame(
            sig, "A group-by tool for our CSV exports",
            f"""
            We keep answering the same questions about our `{theme_name}` CSV exports by hand. Write a
            command-line tool:

            `{usage}`

            Rules:

            {indent_block(rules_md, 12)}

            A sample export is in `/app/data/sample.csv`. For example,
            `{example_args}` must print:

            ```
            {indent_block(example_out.rstrip(chr(10)), 12)}
            ```

            Your tool will be run with `/usr/bin/python3` (standard library only) on many other files.
            """,
            [f"`/app/csvq.py`: the tool, behaving exactly as specified."],
        )
        ref_src = inspect.getsource(csvq_reference)
        case_src = inspect.getsource(csvq_make_case)
        test_initial = pytest_module(f"""
            import os

            def test_sample_present():
                with open("/app/data/sample.csv", encoding="utf-8") as fh:
                    assert fh.readline().strip()

            def test_tool_not_written_yet():
                assert not os.path.exists("/app/csvq.py")
        """)
        test_final = _fuzz_test_module(
            ref_src + "\n\n" + case_src,
            setup=f"THEME = {theme!r}\nSPEC = {spec!r}\nSEED = {fuzz_seed}\nN_CASES = {n_cases}\n",
            body="""
                def _run(tmp_path, i, case):
                    text, group, value, agg, where, top = case
                    path = tmp_path / f"case{i}.csv"
                    path.write_bytes(text.encode("utf-8"))
                    argv = [str(path), "--group", group, "--value", value, "--agg", agg]
                    if where is not None:
                        argv += ["--where", where]
                    if top is not None:
                        argv += ["--top", str(top)]
                    res = subprocess.run(["/usr/bin/python3", "/app/csvq.py", *argv], capture_output=True,
                                         timeout=30, env=ENV, cwd=str(tmp_path))
                    return argv, res

                def test_tool_exists():
                    assert os.path.isfile("/app/csvq.py")

                def test_matches_reference_on_random_files(tmp_path):
                    rng = random.Random(SEED)
                    for i in range(N_CASES):
                        shape = ("header_only", "unknown_column")[i] if i < 2 else "random"
                        case = csvq_make_case(rng, THEME, SPEC, shape)
                        want_code, want_out = csvq_reference(*case, SPEC)
                        argv, res = _run(tmp_path, i, case)
                        where = f"case {i}: csvq.py {' '.join(argv)}\\nfile:\\n{case[0]!r}"
                        assert res.returncode == want_code, f"{where}\\nexit {res.returncode}, want {want_code}\\n{res.stderr.decode(errors='replace')[-800:]}"
                        if want_code == 0:
                            assert res.stdout.decode("utf-8", errors="replace") == want_out, f"{where}\\ngot {res.stdout!r}\\nwant {want_out!r}"
            """,
        )
        solve = bash_script(f"""
            cat > /app/csvq.py <<'PY'
            {indent_block(CSVQ_ORACLE.strip().replace("__SPEC__", repr({k: spec[k] for k in ("normalize", "empty", "order", "sep")})), 12)}
            PY
            python3 /app/csvq.py /app/data/sample.csv --group {group} --value {value} --agg {agg} >/dev/null
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/data && cp /tmp/env/fixtures/sample.csv /app/data/sample.csv"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"theme": theme_name, "rules": {k: spec[k] for k in ("normalize", "empty", "order",
                                                                                  "sep", "where", "top")}},
                   "fuzz_seed": fuzz_seed, "fuzz_cases": n_cases},
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={"sample.csv": text.encode("utf-8")},
            output_paths=["/app/csvq.py"],
        )


def _csvq_argv(path, group, value, agg, where, top) -> str:
    parts = ["python3 /app/csvq.py", path, "--group", group, "--value", value, "--agg", agg]
    if where is not None:
        parts += ["--where", f"'{where}'"]
    if top is not None:
        parts += ["--top", str(top)]
    return " ".join(parts)


def indent_block(text: str, n: int) -> str:
    """Indent every line after the first so a multi-line value survives textwrap.dedent."""
    pad = " " * n
    return ("\n" + pad).join(text.split("\n"))


def _fuzz_test_module(helpers: str, setup: str, body: str) -> str:
    """A final-state test: imports, the reference helpers verbatim, constants, then the tests."""
    head = ("import os\nimport random\nimport subprocess\n\n"
            "ENV = {\"PATH\": \"/usr/bin:/bin\", \"LANG\": \"C.UTF-8\", \"LC_ALL\": \"C.UTF-8\", \"PYTHONUTF8\": \"1\"}\n")
    return head + "\n" + setup + "\n\n" + helpers.strip() + "\n\n\n" + textwrap.dedent(body).strip() + "\n"


FAMILIES = [SqliteShopQuestions, CsvGroupByTool]
