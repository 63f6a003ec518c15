"""Final state: /app/region_totals.tsv holds the per-region revenue of the untouched export."""

import hashlib
from pathlib import Path

OUTPUT = Path("/app/region_totals.tsv")
SALES = Path("/app/data/sales.csv")
SALES_SHA256 = "7dc475aa53284d5082e6384306630498c703611c9429d0b1dd4283a131d43abd"
EXPECTED = [
    "West\t5939.89",
    "East\t3628.77",
    "North\t3067.52",
    "South\t2670.08",
    "Central\t2483.41",
    "INVALID\t4",
]


def test_export_untouched():
    assert hashlib.sha256(SALES.read_bytes()).hexdigest() == SALES_SHA256


def test_output_exists():
    assert OUTPUT.is_file(), "missing /app/region_totals.tsv"


def test_region_lines_exact():
    lines = OUTPUT.read_text().rstrip("\n").split("\n")
    assert lines == EXPECTED


def test_no_header_or_padding():
    for line in OUTPUT.read_text().splitlines():
        region, value = line.split("\t")
        assert region == region.strip()
        assert value == value.strip()
