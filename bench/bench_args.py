"""The name and path arguments of the bench scripts, checked before anything runs.

A typo in `--families nosuch` must not measure nothing and print "0 families ... forged 0" (a
zero that reads as a result): an unknown name, or a file that is not there, is one line on
stderr naming the option, the value and what it may be, with exit status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable


def fail(message: str) -> None:
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def chosen(option: str, given: str | list[str] | None, known: Iterable[str]) -> list[str]:
    """The names given to `option` (comma-separated, or a list of such), each one of `known`, in
    the order given without repeats; every known name when none is given."""
    known = list(known)
    parts = [given] if isinstance(given, str) else list(given or [])
    names = list(dict.fromkeys(n.strip() for p in parts for n in p.split(",") if n.strip()))
    for name in names:
        if name not in known:
            fail(f"{option}: unknown name {name!r} (known: {', '.join(known)})")
    return names or known


def existing(option: str, path: str | Path | None) -> Path | None:
    """path, when it names something that exists (None stays None)."""
    if path is None:
        return None
    if not Path(path).exists():
        fail(f"{option}: {path} does not exist")
    return Path(path)
