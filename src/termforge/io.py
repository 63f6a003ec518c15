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

from termforge.errors import InputError, NoSpaceError, is_no_space, os_error_problem


def _dumps(obj: Any, **options) -> str:
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, **options)
    try:
        text.encode()
    except UnicodeEncodeError:
        # A name an agent made that is not UTF-8 (Python holds its bytes as lone surrogates) is
        # data: written as JSON's \udcXX escapes, which read back as the very same name, never a
        # crash of whatever records it.
        text = json.dumps(obj, sort_keys=True, ensure_ascii=True, **options)
    return text


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace variance: the form that is hashed and compared."""
    return _dumps(obj, separators=(",", ":"))


def pretty_json(obj: Any) -> str:
    return _dumps(obj, indent=2) + "\n"


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
    chunks = list(chunks)
    made = make_parents(path)
    try:
        _write_then_rename(path, chunks)
    except OSError as exc:
        remove_empty(made)
        if is_no_space(exc):
            raise NoSpaceError(path, sum(len(c) for c in chunks), exact=True) from None
        # An error about the temporary sibling (the output is a directory, its folder is read
        # only) names the output the user gave instead.
        if exc.filename is not None and os.fspath(exc.filename) != os.fspath(path) and \
                Path(os.fspath(exc.filename)).name.startswith(f".{path.name}."):
            if isinstance(exc, IsADirectoryError) or path.is_dir():
                raise InputError(path, "is a directory (expected a file to write)") from None
            raise type(exc)(exc.errno, exc.strerror, os.fspath(path)) from None
        raise


def make_parents(path: Path) -> list[Path]:
    """Create path's missing parent folders; the ones created, outermost first (so a failed
    write can take them away again with remove_empty)."""
    missing = []
    parent = Path(path).parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove the folders (innermost first) that are still empty: what a failed command made
    for its outputs and left nothing in."""
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:
            pass


def _write_then_rename(path: Path, chunks: Iterable[bytes]) -> None:
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


def stat_problem(path: str | os.PathLike) -> str | None:
    """Why path cannot be stat'ed, in words (a symlink loop named as one), or None."""
    try:
        os.stat(path)
    except OSError as exc:
        return os_error_problem(exc)
    except ValueError:  # a NUL in the name
        return "is not a valid path (it holds a NUL character)"
    return None


def require_dir(path: str | os.PathLike) -> Path:
    """An input directory that must exist (and be a directory)."""
    p = Path(path)
    problem = stat_problem(p)
    if problem == "does not exist":
        raise InputError(path, "does not exist (expected a directory)")
    if problem:
        raise InputError(path, problem)
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


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def staging_owner(name: str) -> str | None:
    """The output a staging leftover belongs to: `.{output}.{random}.partial` (or `.tmp`), or
    `.{output}.old-{pid}`; None for any other name. mkstemp/mkdtemp's random part has no dot."""
    if not name.startswith("."):
        return None
    for suffix in (".partial", ".tmp"):
        if name.endswith(suffix) and "." in name[1:-len(suffix)]:
            return name[1:-len(suffix)].rsplit(".", 1)[0]
    if ".old-" in name:
        return name[1:].rsplit(".old-", 1)[0]
    return None


def clean_stale_staging(root: Path, names: Iterable[str] | None = None) -> int:
    """Remove staging leftovers of a killed or failed run; returns how many were removed.
    With names, only the leftovers of those outputs: other jobs (another shard of generate) may
    be writing beside them."""
    wanted = None if names is None else set(names)
    n = 0
    if root.is_dir():
        for p in root.iterdir():
            owner = staging_owner(p.name)
            if owner is not None and (wanted is None or owner in wanted):
                _remove(p)
                n += 1
    return n


class StagedOutputs:
    """The outputs of one command, written aside and published together at the end.

    `file(final)` and `dir(final)` give a hidden staging sibling to write into; `publish()`
    renames every one into place (in the order staged, a directory replacing any old one). If
    the command fails before publishing, every staging path is removed, so a failure after the
    input checks writes nothing. Staging leftovers of an earlier failed run of the same outputs
    are removed when an output is staged again.

        with StagedOutputs() as out:
            atomic_write_json(out.file(json_path), data)
            write_parquet(rows, out.file(parquet_path))
            out.publish()
    """

    def __init__(self) -> None:
        self._moves: list[tuple[Path, Path, bool]] = []
        self._made: list[Path] = []  # folders made for the outputs, removed again when left empty

    def _fresh(self, final: Path) -> None:
        self._made += make_parents(final)
        clean_stale_staging(final.parent, [final.name])

    def file(self, final: str | os.PathLike) -> Path:
        final = Path(final)
        self._fresh(final)
        if final.is_dir() and not final.is_symlink():
            raise InputError(final, "is a directory (expected a file to write)")
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
        os.close(fd)
        self._moves.append((Path(tmp), final, False))
        return Path(tmp)

    def dir(self, final: str | os.PathLike) -> Path:
        final = Path(final)
        self._fresh(final)
        tmp = staging_dir(final)
        self._moves.append((tmp, final, True))
        return tmp

    def publish(self) -> None:
        moves, self._moves = self._moves, []
        try:
            for i, (tmp, final, is_dir) in enumerate(moves):
                if is_dir:
                    publish_dir(tmp, final)
                else:
                    os.chmod(tmp, 0o644)  # mkstemp makes the file private; outputs are readable
                    os.replace(tmp, final)
        except BaseException:
            self._moves = moves[i:]
            raise

    def discard(self) -> None:
        for tmp, _, _ in self._moves:
            _remove(tmp)
        self._moves = []
        remove_empty(self._made)
        self._made = []

    def _written(self) -> int:
        total = 0
        for tmp, _, _ in self._moves:
            for p in [tmp, *(tmp.rglob("*") if tmp.is_dir() and not tmp.is_symlink() else ())]:
                try:
                    total += os.lstat(p).st_blocks * 512
                except OSError:
                    pass
        return total

    def __enter__(self) -> "StagedOutputs":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # A full disk is about the output being written (the last one staged), whatever file the
        # error names (a copy names its source): the error names that output and what it needs.
        full = is_no_space(exc) or isinstance(exc, NoSpaceError)
        blamed = self._moves[-1][1] if self._moves and full else None
        written = self._written() if blamed is not None else 0
        if isinstance(exc, NoSpaceError):  # a writer into a staging path: it knew its own size
            blamed = next((final for tmp, final, _ in self._moves if Path(exc.output).is_relative_to(tmp)), blamed)
            written += exc.needed or 0
        self.discard()
        if blamed is not None:
            raise NoSpaceError(blamed, written) from None


def make_task_id(corpus_seed: int, index: int, signature: dict) -> str:
    """Deterministic task id from (corpus seed, index, signature hash)."""
    axes = {k: v for k, v in signature.items() if k not in ("id", "index")}
    return f"tf-{stable_hash([corpus_seed, index, stable_hash(axes, 16)], 12)}"
