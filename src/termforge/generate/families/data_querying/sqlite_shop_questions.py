"""Parameterised reporting questions over a small shop database loaded from a SQL dump."""

from __future__ import annotations

import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     indent_block, instruction_frame, pytest_module)


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

SHIPPED_SQL = "lower(trim(o.status)) = 'shipped'"


def _messy_status(status: str, rng: random.Random) -> str:
    """A status as a person might have typed it: case and stray spaces vary."""
    return rng.choice((status, status.capitalize(), status.upper(), f" {status}", f"{status} "))


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class SqliteShopQuestions(TaskFamily):
    """Answer reporting questions over a SQLite shop database (joins, grouping, NOT EXISTS)."""

    knobs = DifficultyKnobs(customers=(10, 18, 30, 45), products=(8, 12, 18, 24), orders=(40, 90, 180, 300),
                            questions=(2, 3, 5, 7), regions=(3, 3, 4, 4), categories=(3, 4, 4, 4))
    axes = FamilyAxes(name="sqlite_shop_questions", domains=("data_querying",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("relational_aggregation",),
                      skills=("group rows and compute aggregates per group",), languages=("sql", "python", "bash"),
                      anchors=("SQLite",), command_complexities=("bash_only", "bash_code"),
                      summary="answer parameterised reporting questions over a SQLite database built from a SQL "
                              "dump")
    method = (
        ("Start with `.schema` (or sqlite_master) to see how orders, order lines, products and customers link. "
         "Revenue comes from the order lines' charged price, not the product list price.", None),
        ("Normalise the status text before comparing it (trim and lowercase: it was typed by hand); month "
         "filters must tolerate a time suffix on the date.", r"typed by hand"),
        ("Normalise the status text before comparing it.", lambda v: not v.states(r"typed by hand")),
        ("For 'never' questions use NOT EXISTS or a LEFT JOIN, for rankings ORDER BY the aggregate with the "
         "stated tie-break, and cross-check each number with a second query.", None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        n_cust, n_prod, n_ord = knobs.customers, knobs.products, knobs.orders
        messy = level >= 2
        regions = rng.sample(REGIONS, knobs.regions)
        categories = rng.sample(CATEGORIES, knobs.categories)

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
        chosen = rng.sample(questions, min(knobs.questions, len(questions)))
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


FAMILY = SqliteShopQuestions
