"""Final state: /app/top_customers.csv ranks the five biggest spenders on shipped orders."""

import csv
import sqlite3
from pathlib import Path

OUTPUT = Path("/app/top_customers.csv")
DB = Path("/app/shop.db")
EXPECTED = [
    ["customer_id", "name", "total_spent"],
    ["23", "Pia Ahn", "4343.79"],
    ["11", "Boris Diaz", "4207.13"],
    ["14", "Tara Diaz", "3897.28"],
    ["24", "Hana Berg", "3552.24"],
    ["5", "Kofi Ito", "3007.43"],
]


def test_database_unchanged():
    db = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
              for t in ("customers", "products", "orders", "order_items")]
    assert counts == [30, 15, 220, 575]
    assert db.execute("SELECT COUNT(*) FROM orders WHERE status = 'shipped'").fetchone()[0] > 100


def test_output_exists():
    assert OUTPUT.is_file(), "missing /app/top_customers.csv"


def test_ranking_exact():
    with OUTPUT.open(newline="") as fh:
        rows = [row for row in csv.reader(fh)]
    assert rows == EXPECTED
