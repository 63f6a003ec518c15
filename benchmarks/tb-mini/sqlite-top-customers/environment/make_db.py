"""Builds the shop database the task queries (deterministic: a fixed seed)."""

import random
import sqlite3
import sys

FIRST = ["Ada", "Boris", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivo", "June", "Kofi", "Lena",
         "Milo", "Nora", "Omar", "Pia", "Quin", "Rosa", "Sven", "Tara"]
LAST = ["Ahn", "Berg", "Costa", "Diaz", "Eker", "Fox", "Gale", "Holt", "Ito", "Jovic"]


def main(path: str) -> None:
    rng = random.Random(20240501)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
        CREATE TABLE products (id INTEGER PRIMARY KEY, title TEXT NOT NULL, price_cents INTEGER NOT NULL);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                             status TEXT NOT NULL CHECK (status IN ('shipped', 'pending', 'cancelled')),
                             placed_at TEXT NOT NULL);
        CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id),
                                  product_id INTEGER NOT NULL REFERENCES products(id),
                                  quantity INTEGER NOT NULL);
    """)
    for cid in range(1, 31):
        db.execute("INSERT INTO customers VALUES (?, ?, ?)",
                   (cid, f"{rng.choice(FIRST)} {rng.choice(LAST)}", rng.choice(["DE", "FR", "NL", "PL", "SE"])))
    for pid in range(1, 16):
        db.execute("INSERT INTO products VALUES (?, ?, ?)", (pid, f"part-{pid:03d}", rng.randint(150, 9900)))
    for oid in range(1, 221):
        status = rng.choices(["shipped", "pending", "cancelled"], weights=[6, 2, 2])[0]
        db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)",
                   (oid, rng.randint(1, 30), status, f"2024-0{rng.randint(1, 4)}-{rng.randint(1, 28):02d}"))
        for _ in range(rng.randint(1, 4)):
            db.execute("INSERT INTO order_items VALUES (?, ?, ?)", (oid, rng.randint(1, 15), rng.randint(1, 5)))
    db.commit()
    db.close()


if __name__ == "__main__":
    main(sys.argv[1])
