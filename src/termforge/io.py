"""Atomic file output, canonical JSON and stable hashing.

Every stage writes through these helpers so a killed run never leaves a half-written file
(write to a temporary sibling, fsync, rename) and the same data always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace variance: the form that is hashed and compared."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def pretty_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=2) + "\n"


def stable_hash(obj: Any, length: int = 16) -> str:
    """Hex digest of the canonical JSON of obj (sha256, truncated)."""
    data = obj if isinstance(obj, (bytes, bytearray)) else canonical_json(obj).encode()
    return hashlib.sha256(data).hexdigest()[:length]


def seed_from(*parts: Any) -> int:
    """A 64-bit RNG seed derived from any JSON-able parts (ids, indices, names)."""
    return int(stable_hash(list(parts), 16), 16)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes the file private (0600); outputs are ordinary readable files.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, pretty_json(obj))


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(canonical_json(r) + "\n" for r in rows))


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def read_jsonl(path: str | os.PathLike) -> list[Any]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def append_jsonl(path: str | os.PathLike, row: Any) -> None:
    """Append one complete line and fsync: a checkpoint a killed run can trust up to its last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(canonical_json(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl_tolerant(path: str | os.PathLike) -> list[Any]:
    """Read a checkpoint JSONL, ignoring a torn last line left by a kill."""
    rows: list[Any] = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def publish_dir(staging: Path, final: Path) -> None:
    """Move a fully written staging directory into place in one rename (replacing any old one)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, trash)
        os.replace(staging, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staging, final)


def staging_dir(final: Path) -> Path:
    """A fresh hidden sibling of final to write into before publish_dir."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))


def clean_stale_staging(root: Path) -> int:
    """Remove staging leftovers of a killed run; returns how many were removed."""
    n = 0
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(".") and (p.name.endswith(".partial") or ".old-" in p.name):
                shutil.rmtree(p, ignore_errors=True)
                n += 1
    return n


def make_task_id(corpus_seed: int, index: int, signature: dict) -> str:
    """Deterministic task id from (corpus seed, index, signature hash) (DESIGN section 2)."""
    axes = {k: v for k, v in signature.items() if k not in ("id", "index")}
    return f"tf-{stable_hash([corpus_seed, index, stable_hash(axes, 16)], 12)}"
