#!/bin/bash
# Sort a copy, use the two middle elements for even lengths, and ceil-based nearest rank.
set -euo pipefail
cd /app
python3 - <<'PY'
from pathlib import Path

path = Path("stats.py")
src = path.read_text()
src = src.replace(
    """    n = len(values)
    mid = n // 2
    if n % 2:
        return values[mid]
    return (values[mid] + values[mid + 1]) / 2""",
    """    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2""")
src = src.replace(
    """    rank = int(p / 100 * len(values))
    return sorted(values)[rank]""",
    """    if not 0 <= p <= 100:
        raise ValueError(f"percentile p must be in [0, 100], got {p}")
    rank = max(1, math.ceil(p / 100 * len(values)))
    return sorted(values)[rank - 1]""")
path.write_text(src)
PY
