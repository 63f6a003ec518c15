"""data_processing families: a messy CSV join/aggregation, and a streaming transform program."""

from __future__ import annotations

import csv
import io
import random
import textwrap

from termforge.generate.base import TaskFamily, TaskSpec, bash_script, instruction_frame
from termforge.generate.base import complexity_level
from termforge.generate.families.scientific_computing import csv_inputs_initial_test, py_source, python_oracle

REGIONS = ("north", "south", "east", "west", "central", "coastal", "highlands", "metro", "harbor", "valley")
COMPANY_WORDS = ("Acme", "Blue Fin", "Cobalt", "Dunmore", "Eastgate", "Foxglove", "Granite", "Helix",
                 "Ironwood", "Juniper", "Kestrel", "Lumen", "Meridian", "Northwind", "Orchid", "Pinecrest")
COMPANY_SUFFIXES = ("Ltd", "GmbH", "Inc.", "& Sons", "Co-op", "Partners, LLC", "Trading, Inc.")
STATUSES = ("paid", "pending", "cancelled", "failed")


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


class RegionalRevenue(TaskFamily):
    """Join orders to customers and report paid revenue per region, following stated cleaning rules."""

    name = "regional_revenue_report"
    method = (
        ('Parse the files with a real CSV parser (quoted fields contain commas). Normalise keys before '
         'comparing (trim, lower-case), resolve repeated orders to their newest version before filtering on '
         'status, convert amounts to integer cents (strip currency symbols and separators) so sums are exact, '
         'join orders to customers with a default region for missing customers, then aggregate, sort and '
         'format. Cross-check the grand total.', None),
    )
    domains = ("data_processing",)
    verifier_kinds = ("exact_text",)
    fixture_kinds = ("text_only",)
    summary = "clean, deduplicate and join two or three CSV files, then aggregate revenue per region"
    skill_types = ("cleaning_and_validation",)
    skills = ("normalise dates, numbers and units",)
    languages = ("python", "bash", "awk")
    command_complexities = ("bash_only", "bash_code")

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        regions = rng.sample(REGIONS, (3, 4, 5, 6)[lvl])
        n_customers = (8, 15, 30, 50)[lvl]
        n_orders = (30, 70, 150, 300)[lvl]

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
            "customers.csv": _csv_text(["customer_id", "name", "region"], customers).encode(),
            "orders.csv": _csv_text(order_header, order_rows).encode(),
        }
        if lvl == 3:
            fixtures["refunds.csv"] = _csv_text(["order_id", "amount"], [[o, _money(c)] for o, c in refunds]).encode()

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
        test_final = py_source("""
            __CONSTANTS__

            def test_report_matches():
                with open(OUT, newline="") as fh:
                    got = fh.read().split("\\n")
                # Trailing blank lines are not rows (the instruction allows them); blank lines inside are.
                while got and got[-1] == "":
                    got.pop()
                assert got[:1] == EXPECTED[:1], "header line differs"
                assert got == EXPECTED
            """, OUT=out, EXPECTED=expected)
        solve = python_oracle(py_source("""
            import csv
            import os
            from decimal import Decimal

            def rows(name):
                path = f"/app/data/{name}"
                if not os.path.exists(path):
                    return []
                with open(path, newline="") as fh:
                    return list(csv.DictReader(fh))

            def cents(text):
                return int(Decimal(text.strip().lstrip("$").replace(",", "")) * 100)

            region_of = {r["customer_id"].strip(): r["region"].strip().lower() for r in rows("customers.csv")}
            latest = {}
            for r in rows("orders.csv"):
                oid = r["order_id"].strip()
                stamp = r.get("updated_at") or ""
                if oid not in latest or stamp > latest[oid][0]:
                    latest[oid] = (stamp, r)
            refunded = {}
            for r in rows("refunds.csv"):
                refunded[r["order_id"].strip()] = refunded.get(r["order_id"].strip(), 0) + cents(r["amount"])
            totals = {}
            for oid, (_, r) in latest.items():
                if r["status"].strip().lower() != "paid":
                    continue
                region = region_of.get(r["customer_id"].strip(), "unknown")
                count, total = totals.get(region, (0, 0))
                totals[region] = (count + 1, total + cents(r["amount"]) - refunded.get(oid, 0))
            with open("/app/report.csv", "w") as fh:
                fh.write("region,paid_orders,revenue\\n")
                for region, (count, total) in sorted(totals.items(), key=lambda kv: (-kv[1][1], kv[0])):
                    fh.write(f"{region},{count},{total // 100}.{total % 100:02d}\\n")
            """))
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


# Each streaming variant: the reference semantics and a random stream generator, as source text.
# The same text is exec'd here (to make the sample files) and embedded in the final-state test,
# so the samples the agent sees and the grader can never disagree.
STREAM_VARIANTS = {
    "window_sum": '''
def reference(lines):
    windows = {}
    out = []
    for raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        key, value = line.split(",")
        window = windows.setdefault(key, [])
        if RESETS and value == "reset":
            window.clear()
        else:
            window.append(int(value))
            del window[:-WINDOW]
        out.append(f"{key},{sum(window)}")
    return out


def random_stream(rng, size):
    keys = sorted({rng.choice("abcdefgh") + rng.choice(("", "x", "yz")) for _ in range(rng.randint(1, 6))})
    lines = []
    for _ in range(size):
        roll = rng.random()
        if roll < 0.04:
            lines.append(rng.choice(("", "   ", "\\t")))
            continue
        value = "reset" if RESETS and roll < 0.12 else str(rng.randint(-50, 99))
        lines.append(f"{rng.choice(keys)},{value}" + rng.choice(("", "", "", " ", "\\t")))
    return lines
''',
    "sessionize": '''
def reference(lines):
    last_seen, session = {}, {}
    out = []
    for raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        ts_text, user = line.split(" ")
        ts = int(ts_text)
        if FOLD_CASE:
            user = user.lower()
        if user not in last_seen or ts - last_seen[user] > GAP:
            session[user] = session.get(user, 0) + 1
        last_seen[user] = ts
        out.append(f"{ts} {user} {session[user]}")
    return out


def random_stream(rng, size):
    users = sorted({rng.choice(("ana", "bo", "cyd", "dee", "eli", "fay", "gus")) for _ in range(rng.randint(1, 5))})
    ts = rng.randint(0, 10 ** 6)
    last = {}
    lines = []
    for _ in range(size):
        if rng.random() < 0.04:
            lines.append(rng.choice(("", "  ")))
            continue
        user = rng.choice(users)
        if user in last and rng.random() < 0.35:
            # Land exactly on, just before or just after the gap boundary for this user.
            ts = max(ts, last[user] + GAP + rng.choice((-1, 0, 1)))
        else:
            ts += rng.choice((0, 0, 1, 2, rng.randint(0, 3 * GAP)))
        last[user] = ts
        shown = rng.choice((user, user.upper(), user.title())) if FOLD_CASE else user
        lines.append(f"{ts} {shown}" + rng.choice(("", "", " ")))
    return lines
''',
    "throttle": '''
def reference(lines):
    passed_at = {}
    out = []
    for raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        ts_text, key, _message = line.split(" ", 2)
        ts = int(ts_text)
        if FOLD_CASE:
            key = key.lower()
        if key not in passed_at or ts - passed_at[key] >= INTERVAL:
            passed_at[key] = ts
            out.append(line)
    return out


def random_stream(rng, size):
    keys = sorted({rng.choice(("disk", "cpu", "net", "auth", "dns", "tls")) for _ in range(rng.randint(1, 4))})
    words = ("high", "low", "retry", "timeout", "ok", "spike", "flap")
    ts = rng.randint(0, 10 ** 6)
    passed = {}
    lines = []
    for _ in range(size):
        if rng.random() < 0.04:
            lines.append(rng.choice(("", "   ")))
            continue
        key = rng.choice(keys)
        if key in passed and rng.random() < 0.35:
            ts = max(ts, passed[key] + INTERVAL + rng.choice((-1, 0, 1)))
        else:
            ts += rng.choice((0, 1, 2, rng.randint(0, 2 * INTERVAL)))
        shown = rng.choice((key, key.upper())) if FOLD_CASE else key
        message = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
        if shown.lower() not in passed or ts - passed[shown.lower()] >= INTERVAL:
            passed[shown.lower()] = ts
        lines.append(f"{ts} {shown} {message}" + rng.choice(("", "", " ")))
    return lines
''',
}

STREAM_ORACLES = {
    "window_sum": '''
import sys
from collections import defaultdict, deque

windows = defaultdict(lambda: deque(maxlen=WINDOW))
for raw in sys.stdin:
    line = raw.rstrip()
    if not line:
        continue
    key, value = line.split(",")
    if RESETS and value == "reset":
        windows[key].clear()
    else:
        windows[key].append(int(value))
    sys.stdout.write(f"{key},{sum(windows[key])}\\n")
''',
    "sessionize": '''
import sys

last_seen, session = {}, {}
for raw in sys.stdin:
    line = raw.rstrip()
    if not line:
        continue
    ts_text, user = line.split()
    ts = int(ts_text)
    user = user.lower() if FOLD_CASE else user
    if user not in last_seen or ts - last_seen[user] > GAP:
        session[user] = session.get(user, 0) + 1
    last_seen[user] = ts
    sys.stdout.write(f"{ts} {user} {session[user]}\\n")
''',
    "throttle": '''
import sys

passed_at = {}
for raw in sys.stdin:
    line = raw.rstrip()
    if not line:
        continue
    ts_text, key = line.split(" ", 2)[:2]
    ts = int(ts_text)
    key = key.lower() if FOLD_CASE else key
    if key not in passed_at or ts - passed_at[key] >= INTERVAL:
        passed_at[key] = ts
        sys.stdout.write(line + "\\n")
''',
}

_FUZZ_HARNESS = '''
import random
import subprocess

import pytest

PROGRAM = ["/usr/bin/python3", "/app/transform.py"]


def _cases():
    rng = random.Random(FUZZ_SEED)
    sizes = [0, 1, 2, 3] + [rng.choice((5, 10, 25, 60, 150, 400)) for _ in range(CASES - 5)] + [2000]
    return [random_stream(rng, size) for size in sizes]


CASES_INPUT = _cases()


def _run(lines):
    data = "".join(line + "\\n" for line in lines)
    proc = subprocess.run(PROGRAM, input=data, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"transform.py exited {proc.returncode}: {proc.stderr[-1500:]}"
    out = proc.stdout.split("\\n")
    if out and out[-1] == "":
        out.pop()
    return out


@pytest.mark.parametrize("index", range(len(CASES_INPUT)))
def test_matches_reference(index):
    lines = CASES_INPUT[index]
    got, want = _run(lines), reference(lines)
    for n, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"case {index} ({len(lines)} input lines): output line {n + 1} is {g!r}, expected {w!r}"
    assert len(got) == len(want), f"case {index}: {len(got)} output lines, expected {len(want)}"
'''


class StreamTransform(TaskFamily):
    """Write a line-streaming transform (window sums, sessionizing, throttling); fuzzed against a reference."""

    name = "stream_transform_program"
    method = (
        ('Keep per-key state in a dictionary and process one line at a time. Pin down the boundary cases '
         'before coding: what happens exactly at the stated limit, the first event of a key, blank lines and '
         'trailing whitespace, and empty input. Then build your own generator of random inputs (including '
         'values landing exactly on the boundary) and compare against a slow, obviously-correct version, and '
         'against the sample files.', None),
    )
    domains = ("data_processing",)
    verifier_kinds = ("fuzz_equivalence",)
    fixture_kinds = ("text_only",)
    summary = "write a stdin-to-stdout streaming transform with stateful per-key rules, fuzz-tested"
    skill_types = ("parsing_and_extraction",)
    skills = ("parse fixed-width and delimited records",)
    languages = ("python",)
    command_complexities = ("bash_code",)

    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        lvl = complexity_level(sig)
        variant = rng.choice(sorted(STREAM_VARIANTS))
        params: dict = {"window_sum": {"WINDOW": rng.randint(2, 6), "RESETS": lvl >= 2},
                        "sessionize": {"GAP": rng.randint(10, 120), "FOLD_CASE": lvl >= 2},
                        "throttle": {"INTERVAL": rng.randint(5, 60), "FOLD_CASE": lvl >= 2}}[variant]
        source = STREAM_VARIANTS[variant]
        namespace: dict = dict(params)
        exec(source, namespace)  # noqa: S102 - our own constant source, the same text the test embeds
        sample_in = namespace["random_stream"](rng, (12, 16, 20, 24)[lvl])
        sample_out = namespace["reference"](sample_in)
        fuzz_seed = rng.randrange(10 ** 5)
        n_cases = (8, 12, 16, 20)[lvl]

        if variant == "window_sum":
            w = params["WINDOW"]
            spec_text = (
                f"Each input line is `<key>,<integer>`. For every such line print `<key>,<sum>` where "
                f"`<sum>` is the sum of the last {w} integers seen for that key, this line's included "
                f"(fewer if the key has appeared fewer times).")
            if params["RESETS"]:
                spec_text += (" A line `<key>,reset` empties that key's window and prints `<key>,0`; "
                              "the reset itself is not a value.")
        elif variant == "sessionize":
            g = params["GAP"]
            spec_text = (
                "Each input line is `<unix-seconds> <user>`, timestamps never decreasing. For every "
                "such line print `<unix-seconds> <user> <n>` where `<n>` is that user's session number "
                f"(1 for the user's first event). A user starts a new session when more than {g} "
                "seconds have passed since that user's previous event; a gap of exactly that long "
                "stays in the same session.")
            if params["FOLD_CASE"]:
                spec_text += " User names are case-insensitive: treat them, and print them, in lower case."
        else:
            t = params["INTERVAL"]
            spec_text = (
                "Each input line is `<unix-seconds> <key> <message...>`, timestamps never decreasing. "
                "Print a line (exactly as read, without trailing whitespace) only if its key has no "
                f"printed line within the last {t} seconds: a line passes when the key has never passed "
                f"or at least {t} seconds have gone by since the key's last printed line. Suppressed "
                "lines do not restart the clock.")
            if params["FOLD_CASE"]:
                spec_text += " Keys are case-insensitive (`DISK` and `disk` are one key); print lines unchanged."
        out = "/app/transform.py"
        body = (
            "We need a small streaming filter for our pipeline. " + spec_text + "\n\n"
            "Blank or whitespace-only input lines produce no output, and trailing whitespace is not part "
            "of a line's data. Read standard input to the end and write results to standard output, one "
            "line each, in input order. It will be run as `python3 /app/transform.py < input` on many "
            "generated inputs (including empty input and inputs of thousands of lines) and must match "
            "the intended behaviour exactly. `/app/samples/input.txt` and `/app/samples/expected.txt` "
            "show one example."
        )
        instruction = instruction_frame(sig, "A streaming transform", body,
                                        [f"`{out}`: the program (Python 3 standard library only)."])
        test_initial = py_source("""
            import os

            def test_samples_present():
                with open("/app/samples/input.txt") as fh:
                    assert fh.read().strip()
                assert os.path.exists("/app/samples/expected.txt")

            def test_no_program_yet():
                assert not os.path.exists("/app/transform.py")
            """)
        test_final = (py_source("__CONSTANTS__", **params, FUZZ_SEED=fuzz_seed, CASES=n_cases)
                      + "\n" + source.strip() + "\n\n" + _FUZZ_HARNESS.strip() + "\n")
        oracle_code = py_source("__CONSTANTS__", **params) + STREAM_ORACLES[variant].lstrip("\n")
        solve = bash_script("cat > /app/transform.py <<'PY'\n" + oracle_code + "PY\n"
                            "python3 /app/transform.py < /app/samples/input.txt | diff - /app/samples/expected.txt")
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("mkdir -p /app/samples && cp /tmp/env/fixtures/samples/* /app/samples/"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"variant": variant, **{k.lower(): v for k, v in params.items()}},
                   "fuzz_seed": fuzz_seed, "fuzz_cases": n_cases, "reference_source": textwrap.dedent(source).strip()},
            verifier_kind="fuzz_equivalence",
            fixture_kind="text_only",
            fixtures={"samples/input.txt": "".join(x + "\n" for x in sample_in).encode(),
                      "samples/expected.txt": "".join(x + "\n" for x in sample_out).encode()},
            output_paths=[out],
        )


FAMILIES = [RegionalRevenue, StreamTransform]
