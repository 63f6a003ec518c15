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


def one_of(option: str, given: str | None, known: Iterable[str]) -> str | None:
    """given, when it is one of `known` (None stays None)."""
    known = list(known)
    if given is not None and given not in known:
        fail(f"{option}: unknown name {given!r} (known: {', '.join(known) or 'none'})")
    return given


def prefixes(option: str, given: str | None, known: Iterable[str]) -> tuple[str, ...]:
    """The comma-separated prefixes given to `option`, each the start of one of `known` or a known
    name followed by more (`kind@path`); () when none is given."""
    known = list(known)
    names = tuple(dict.fromkeys(n.strip() for n in (given or "").split(",") if n.strip()))
    for name in names:
        if not any(k.startswith(name) or name.startswith(k + "@") for k in known):
            fail(f"{option}: {name!r} starts no known name (known: {', '.join(known)})")
    return names


def numbers(option: str, given: str | None, kind: type = float) -> list:
    """The comma-separated numbers given to `option`, each parsed as `kind` ([] when none is given)."""
    out = []
    for part in (given or "").split(","):
        if part.strip():
            try:
                out.append(kind(part.strip()))
            except ValueError:
                fail(f"{option}: {part.strip()!r} is not {'an integer' if kind is int else 'a number'}")
    return out
