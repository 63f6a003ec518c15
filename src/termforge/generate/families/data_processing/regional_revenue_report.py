"""Clean, deduplicate and join messy CSV exports, then aggregate revenue per region."""

from __future__ import annotations

import random

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     instruction_frame)
from termforge.generate.families.sources import csv_inputs_initial_test, csv_text, packaged_source, python_oracle


REGIONS = ("north", "south", "east", "west", "central", "coastal", "highlands", "metro", "harbor", "valley")
COMPANY_WORDS = ("Acme", "Blue Fin", "Cobalt", "Dunmore", "Eastgate", "Foxglove", "Granite", "Helix",
                 "Ironwood", "Juniper", "Kestrel", "Lumen", "Meridian", "Northwind", "Orchid", "Pinecrest")
COMPANY_SUFFIXES = ("Ltd", "GmbH", "Inc.", "& Sons", "Co-op", "Partners, LLC", "Trading, Inc.")
STATUSES = ("paid", "pending", "cancelled", "failed")


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


class RegionalRevenue(TaskFamily):
    """Join orders to customers and report paid revenue per region, following stated cleaning rules."""

    knobs = DifficultyKnobs(regions=(3, 4, 5, 6), customers=(8, 15, 30, 50), orders=(30, 70, 150, 300))
    axes = FamilyAxes(name="regional_revenue_report", domains=("data_processing",), verifier_kinds=("exact_text",),
                      fixture_kinds=("text_only",), skill_types=("cleaning_and_validation",),
                      skills=("normalise dates, numbers and units",), languages=("python", "bash", "awk"),
                      command_complexities=("bash_only", "bash_code"),
                      summary="clean, deduplicate and join two or three CSV files, then aggregate revenue per "
                              "region")
    method = (
        ('Parse the files with a real CSV parser (quoted fields contain commas). Normalise keys before '
         'comparing (trim, lower-case), resolve repeated orders to their newest version before filtering on '
         'status, convert amounts to integer cents (strip currency symbols and separators) so sums are exact, '
         'join orders to customers with a default region for missing customers, then aggregate, sort and '
         'format. Cross-check the grand total.', None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        knobs = self.knobs.at(lvl)
        regions = rng.sample(REGIONS, knobs.regions)
        n_customers = knobs.customers
        n_orders = knobs.orders

        def messy(text: str) -> str:
            if lvl == 0:
                return text
            return rng.choice((text, text.upper(), text.title(), f" {text}", f"{text} ", f"  {text.title()} "))

        customers = []
        region_of: dict[str, str] = {}
        for i, cid in enumerate(sorted(rng.sample(range(1000, 9000), n_customers))):
            region = regions[i % len(regions)] if i < len(regions) else rng.choice(regions)
            cust_id = f"C{cid}"
            region_of[cust_id] = region
            name = f"{rng.choice(COMPANY_WORDS)} {rng.choice(COMPANY_SUFFIXES if lvl >= 2 else COMPANY_SUFFIXES[:4])}"
            customers.append([cust_id, name, messy(region)])
        rng.shuffle(customers)
        known_ids = sorted(region_of)
        unknown_ids = [f"C{9000 + k}" for k in rng.sample(range(999), 3)] if lvl >= 1 else []

        # Each order has one or more versions; the newest version (by updated_at) is the truth.
        orders: list[dict] = []
        order_ids = rng.sample(range(10000, 99999), n_orders)
        for oid in order_ids:
            cust = rng.choice(unknown_ids) if unknown_ids and rng.random() < 0.06 else rng.choice(known_ids)
            n_versions = rng.choice((1, 1, 2, 3)) if lvl >= 2 else 1
            stamps = sorted(rng.sample(range(1_704_067_200, 1_735_603_200), n_versions))
            for stamp in stamps:
                status = rng.choices(STATUSES, weights=(6, 2, 1, 1))[0]
                orders.append({"order_id": f"O{oid}", "customer_id": cust, "cents": rng.randint(500, 250_000),
                               "status": status, "stamp": stamp})
        rng.shuffle(orders)
        refunds: list[tuple[str, int]] = []

        latest: dict[str, dict] = {}
        for o in orders:
            if o["order_id"] not in latest or o["stamp"] > latest[o["order_id"]]["stamp"]:
                latest[o["order_id"]] = o
        if lvl == 3:
            for oid in rng.sample(sorted(latest), n_orders // 8):
                final = latest[oid]
                for _ in range(rng.choice((1, 1, 2))):
                    refunds.append((oid, rng.randint(100, max(100, final["cents"] // 3))))
            rng.shuffle(refunds)

        totals: dict[str, list[int]] = {}
        refunded: dict[str, int] = {}
        for oid, cents in refunds:
            refunded[oid] = refunded.get(oid, 0) + cents
        for oid, o in latest.items():
            if o["status"] != "paid":
                continue
            region = region_of.get(o["customer_id"], "unknown")
            acc = totals.setdefault(region, [0, 0])
            acc[0] += 1
            acc[1] += o["cents"] - refunded.get(oid, 0)
        ranked = sorted(totals.items(), key=lambda kv: (-kv[1][1], kv[0]))
        expected = ["region,paid_orders,revenue"] + [f"{r},{n},{_money(c)}" for r, (n, c) in ranked]

        def amount_text(cents: int) -> str:
            plain = _money(cents)
            if lvl < 2:
                return plain
            grouped = f"{cents // 100:,}.{cents % 100:02d}"
            return rng.choice((plain, grouped, "$" + grouped, "$" + plain))

        order_rows = []
        for o in orders:
            when = _iso(o["stamp"])
            row = [o["order_id"], o["customer_id"], amount_text(o["cents"]), messy(o["status"])]
            order_rows.append(row + [when] if lvl >= 2 else row)
        order_header = ["order_id", "customer_id", "amount", "status"] + (["updated_at"] if lvl >= 2 else [])
        fixtures = {
            "customers.csv": csv_text(["customer_id", "name", "region"], customers).encode(),
            "orders.csv": csv_text(order_header, order_rows).encode(),
        }
        if lvl == 3:
            fixtures["refunds.csv"] = csv_text(["order_id", "amount"], [[o, _money(c)] for o, c in refunds]).encode()

        rules = ["Only orders whose status is `paid` count."]
        if lvl >= 1:
            rules.append("Region names and statuses are not consistently cased or trimmed: compare "
                         "them case-insensitively after trimming spaces, and report regions in lower case.")
            rules.append("Orders whose `customer_id` is not in `customers.csv` belong to region `unknown`.")
        if lvl >= 2:
            rules.append("`orders.csv` holds several versions of some orders; only the version with the "
                         "latest `updated_at` counts (its status and amount replace the older ones).")
            rules.append("Amounts may carry a leading `$` and `,` thousands separators.")
        if lvl == 3:
            rules.append("`refunds.csv` lists refunds (an order can have several). Subtract them from the "
                         "revenue of orders that count; refunds of orders that do not count are ignored. "
                         "Refunds do not change the order count.")
        files = "`/app/data/customers.csv` and `/app/data/orders.csv`" + (
            " (plus `/app/data/refunds.csv`)" if lvl == 3 else "")
        out = "/app/report.csv"
        body = (
            f"Finance wants paid revenue per customer region from {files}. Rules:\n\n"
            + "\n".join(f"- {r}" for r in rules)
            + "\n\nThe report is a CSV with the header `region,paid_orders,revenue` and one row per "
            "region that has at least one counted order: the number of counted orders and the revenue "
            "with exactly two decimals (no `$`, no separators). Sort rows by revenue, highest first; "
            "break ties by region name."
        )
        instruction = instruction_frame(sig, "Paid revenue per region", body,
                                        [f"`{out}`: the report described above, with `\\n` line endings."])
        test_initial = csv_inputs_initial_test({"customers.csv": len(customers), "orders.csv": len(order_rows),
                                                **({"refunds.csv": len(refunds)} if lvl == 3 else {})}, out)
        test_final = packaged_source(__name__, "test_final_state.py.txt", OUT=out, EXPECTED=expected)
        solve = python_oracle(packaged_source(__name__, "oracle.py.txt"))
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/data && cp /tmp/env/fixtures/*.csv /app/data/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"rules": rules, "header": expected[0]},
                   "expected_rows": expected[1:],
                   "total_paid_revenue": _money(sum(c for _, c in totals.values()))},
            verifier_kind="exact_text",
            fixture_kind="text_only",
            fixtures=fixtures,
            output_paths=[out],
        )


def _iso(stamp: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(stamp, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


FAMILY = RegionalRevenue
