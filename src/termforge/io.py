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

from termforge.errors import InputError, os_error_problem


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
    atomic_write_chunks(path, (data,))


def atomic_write_chunks(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    """atomic_write_bytes of the chunks' concatenation, without building it in memory first
    (gathered writes straight from the chunks: no copy in user space)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb", buffering=0) as fh:
            pending = [memoryview(c) for c in chunks if len(c)]
            i = 0
            while i < len(pending):
                written = os.writev(fd, pending[i:i + 1024])  # IOV_MAX buffers per call
                while written and i < len(pending):  # a short write resumes mid-chunk
                    step = min(written, len(pending[i]))
                    written -= step
                    pending[i] = pending[i][step:]
                    i += not len(pending[i])
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


# -- stage inputs -------------------------------------------------------------------------------
# Every file a stage reads as input goes through these: each failure (missing, unreadable,
# corrupt, truncated, empty) becomes one InputError naming the file. read_json/read_jsonl above
# stay raw for a stage's own bookkeeping files, whose callers handle their errors themselves.


def read_input_bytes(path: str | os.PathLike) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise InputError(path, os_error_problem(exc)) from None


def read_input_text(path: str | os.PathLike) -> str:
    data = read_input_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"is not UTF-8 text (bad byte at offset {exc.start}); the file is corrupt") from None


def _json_where(exc: json.JSONDecodeError) -> str:
    # json's messages read "Unterminated string starting at" + a position.
    return f"{exc.msg}{'' if exc.msg.endswith(' at') else ' at'} column {exc.colno}"


def _json_problem(exc: json.JSONDecodeError, text: str) -> str:
    truncated = exc.pos >= len(text.rstrip())
    tail = "; it ends early (truncated file?)" if truncated else ""
    return f"is not valid JSON (line {exc.lineno}: {_json_where(exc)}){tail}"


def load_json(path: str | os.PathLike) -> Any:
    """Parse a JSON input file; InputError on any problem."""
    text = read_input_text(path)
    if not text.strip():
        raise InputError(path, "is empty (expected JSON)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, _json_problem(exc, text)) from None


def load_jsonl(path: str | os.PathLike, require_rows: bool = True) -> list[Any]:
    """Parse a JSONL input file (one JSON value per line); a torn last line is an error here
    (unlike read_jsonl_tolerant: an input must be complete)."""
    text = read_input_text(path)
    lines = text.splitlines()
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            last = lineno == len(lines) or not any(x.strip() for x in lines[lineno:])
            why = "is cut off (truncated file?)" if last else "is not valid JSON"
            raise InputError(path, f"line {lineno} {why}: {_json_where(exc)}") from None
    if require_rows and not rows:
        raise InputError(path, "has no rows (empty file)")
    return rows


def load_parquet(path: str | os.PathLike, columns: Iterable[str] = (), require_rows: bool = False):
    """A pyarrow Table from a parquet input, with the named columns present."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = read_input_bytes(path)
    if not data:
        raise InputError(path, "is empty (expected a parquet file)")
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(path, f"is not a valid parquet file ({first})") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputError(path, f"has no column {missing[0]!r} (columns: {', '.join(table.column_names) or 'none'})")
    if require_rows and table.num_rows == 0:
        raise InputError(path, "has no rows")
    return table


def require_dir(path: str | os.PathLike) -> Path:
    """An input directory that must exist (and be a directory)."""
    p = Path(path)
    if not p.exists():
        raise InputError(path, "does not exist (expected a directory)")
    if not p.is_dir():
        raise InputError(path, "is not a directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise InputError(path, "is not readable (permission denied)")
    return p


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
    """Deterministic task id from (corpus seed, index, signature hash)."""
    axes = {k: v for k, v in signature.items() if k not in ("id", "index")}
    return f"tf-{stable_hash([corpus_seed, index, stable_hash(axes, 16)], 12)}"
