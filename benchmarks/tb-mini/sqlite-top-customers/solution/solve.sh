#!/bin/bash
# One aggregate query over shipped orders, grouped by customer id (names are not unique).
set -euo pipefail
cd /app
python3 - <<'PY'
import csv
import sqlite3

db = sqlite3.connect("file:shop.db?mode=ro", uri=True)
rows = db.execute("""
    SELECT c.id, c.name, SUM(oi.quantity * p.price_cents) AS cents
    FROM customers c
    JOIN orders o ON o.customer_id = c.id AND o.status = 'shipped'
    JOIN order_items oi ON oi.order_id = o.id
    JOIN products p ON p.id = oi.product_id
    GROUP BY c.id
    ORDER BY cents DESC, c.id
    LIMIT 5
""").fetchall()
with open("top_customers.csv", "w", newline="") as fh:
    out = csv.writer(fh, lineterminator="\n")
    out.writerow(["customer_id", "name", "total_spent"])
    for cid, name, cents in rows:
        out.writerow([cid, name, f"{cents // 100}.{cents % 100:02d}"])
PY
