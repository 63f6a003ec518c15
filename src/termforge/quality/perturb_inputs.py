"""Perturb a task's input files in place (runs INSIDE the task's sandbox, stdlib only).

The input-sensitivity check (termforge.quality.sensitivity) sends this file to `python3 -I -` in
a fresh session and passes one JSON argument: {"files": [absolute paths], "variant": 0 to 3, "targets": [strings]}.
It changes the data the way a different but equally valid input would look, and prints one JSON
line: {"changed": [{"path", "kind", "detail"}], "skipped": [{"path", "why"}]}.

Variant 0 changes numbers (in every second data line of a text file, every fourth row of each
SQLite table, a new shape in a PNG, a new tone in a WAV), variant 1 drops records (every third
data line or row, a frame of a video, shapes added elsewhere). Variants 2 and 3 aim at the records
the answer depends on: the spec's "targets" are the oracle's own output lines and the words they
hold, and the data lines that hold an output line (or, failing that, one of its words) get every
number changed (2) or are dropped (3); a file none of whose lines is a target gets the lines the
first two variants left alone (the other phase), a table the other rows, and a format without a
second phase nothing (no oracle run is wasted on the same change twice). An executable is wrapped
so that what it prints is shifted (its exit status and stdin are kept): a program under study is
an input too. Nothing here trusts the files: a file it cannot parse is skipped and reported.

It runs in the sandbox rather than on the host because the inputs are written by task code (an
adversary): a SQLite file or an image is only ever opened by the task's own interpreter.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import sys
import zlib

NUMBER = re.compile(r"(?<![\w.])(-?\d+)(\.\d+)?(?![\w.])|(?<![\w.])(\d+(?:\.\d+){2,})(?![\w.])")
MIN_RECORDS = 6  # files with fewer data lines are settings, not records: dropping one breaks them
MAX_TEXT = 8 * 1024 * 1024
SOURCE_SUFFIXES = (".py", ".sh", ".bash", ".awk", ".pl", ".rb", ".c", ".h", ".js")


def _shift_number(m: re.Match) -> str:
    if m.group(3):  # a dotted version: the next patch release
        parts = m.group(3).split(".")
        return ".".join(parts[:-1] + [str(int(parts[-1]) + 1)])
    whole, frac = m.group(1), m.group(2) or ""
    if frac:
        value = float(whole + frac) + 1.5 + abs(float(whole + frac)) * 0.25
        return f"{value:.{len(frac) - 1}f}"
    if len(whole) > 1 and whole.startswith("0") and set(whole) <= set("01234567"):
        # An octal field (a file mode): the next valid value, same width.
        return format(int(whole, 8) + 1, "o").zfill(len(whole))[-len(whole):]
    n = int(whole)
    # Keep the width of zero-padded fields (a date, a mode, an id): a shorter token breaks formats.
    out = str(n + 1 + abs(n) // 4)
    if whole.startswith("0") and len(whole) > 1 and len(out) <= len(whole):
        out = out.zfill(len(whole))
    return out


def _data_lines(lines: list[str]) -> list[int]:
    """Indexes of lines holding data: not blank, not comments, not a header row."""
    idx = [i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith(("#", "//", ";"))]
    if idx and len(idx) > 2:
        first = lines[idx[0]]
        if re.search(r"[,\t|;]", first) and not re.search(r"\d", first):
            idx = idx[1:]  # a CSV/TSV header
    return idx


TARGET_LINE_MIN = 4  # an output line shorter than this ("1", "ok") is found in lines by chance
_WORD = re.compile(r"[A-Za-z0-9_]{3,}")


def target_lines(lines: list[str], data: list[int], targets: list[str]) -> list[int]:
    """The data lines the oracle's output draws on: those holding one of its lines (a selected
    record, copied), else those holding one of its words that few lines share (a key it counts)."""
    whole = [t for t in targets if len(t) >= TARGET_LINE_MIN]
    hit = [i for i in data if any(t in lines[i] or lines[i].strip() and lines[i].strip() in t for t in whole)]
    if hit:
        return hit
    words = {w for t in targets for w in _WORD.findall(t)}
    held = {i: set(_WORD.findall(lines[i])) & words for i in data}
    share: dict[str, int] = {}
    for ws in held.values():
        for w in ws:
            share[w] = share.get(w, 0) + 1
    # A word on most lines (a level, a year) says nothing of which record the answer holds.
    rare = {w for w, n in share.items() if n <= max(1, len(data) // 2)}
    out: set[int] = set()
    for t in targets:
        want = set(_WORD.findall(t)) & rare
        overlap = {i: len(held[i] & want) for i in data}
        best = max(overlap.values(), default=0)
        if best:  # the records that hold the most of this output line's words
            out |= {i for i, n in overlap.items() if n == best}
    return sorted(out)


def _shift_last_number(lines: list[str], rows: list[int]) -> int:
    touched = 0
    for i in rows:
        ms = list(NUMBER.finditer(lines[i]))
        if ms:
            m = ms[-1]
            lines[i] = lines[i][:m.start()] + _shift_number(m) + lines[i][m.end():]
            touched += 1
    return touched


def perturb_text(text: str, variant: int, targets: list[str] | None = None) -> tuple[str, str]:
    lines = text.split("\n")
    data = _data_lines(lines)
    if not data:
        return text, ""
    if variant >= 2:
        aimed = target_lines(lines, data, targets or [])
        rows = aimed or (data[1::2] if variant == 2 else data[0::3])
        where = "line(s) the answer draws on" if aimed else "other line(s)"
        if variant == 2:
            touched = _shift_last_number(lines, rows)
            return ("\n".join(lines), f"a number changed in {touched} {where}") if touched else (text, "")
        if not aimed and len(data) < MIN_RECORDS or len(rows) >= len(data):
            return text, ""  # settings, or every record: dropping them breaks the file, not the answer
        drop = set(rows)
        return "\n".join(ln for i, ln in enumerate(lines) if i not in drop), f"{len(drop)} {where} dropped"
    if variant == 0:
        touched = 0
        for i in data[::2] if len(data) > 1 else data:
            ms = list(NUMBER.finditer(lines[i]))
            if ms:
                m = ms[-1]
                lines[i] = lines[i][:m.start()] + _shift_number(m) + lines[i][m.end():]
                touched += 1
        return ("\n".join(lines), f"a number changed in {touched} line(s)") if touched else (text, "")
    if len(data) < MIN_RECORDS:
        return text, ""
    drop = set(data[2::3])
    kept = [ln for i, ln in enumerate(lines) if i not in drop]
    return "\n".join(kept), f"{len(drop)} line(s) dropped"


def perturb_sqlite(path: str, variant: int) -> str:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                            "AND name NOT LIKE 'sqlite_%'")]
        done = []
        for t in tables:
            q = '"' + t.replace('"', '""') + '"'
            cols = con.execute(f"PRAGMA table_info({q})").fetchall()
            if variant % 2 == 0:
                nums = [c[1] for c in cols if (c[2] or "").upper() in ("INTEGER", "INT", "REAL", "NUMERIC", "FLOAT")
                        and not c[5] and not c[1].lower().endswith("id")]
                phase = 1 if variant == 0 else 3  # variant 2: the rows variant 0 left alone
                for c in nums:
                    qc = '"' + c.replace('"', '""') + '"'
                    con.execute(f"UPDATE {q} SET {qc} = {qc} * 2 + 1 WHERE rowid % 4 = {phase} AND {qc} IS NOT NULL")
                if nums:
                    done.append(f"{t}: {len(nums)} numeric column(s) changed")
            else:
                cur = con.execute(f"DELETE FROM {q} WHERE rowid % 3 = {0 if variant == 1 else 1}")
                if cur.rowcount:
                    done.append(f"{t}: {cur.rowcount} row(s) dropped")
        con.commit()
        return "; ".join(done)
    finally:
        con.close()


# -- PNG ---------------------------------------------------------------------------------------------


def _png_chunks(data: bytes):
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        yield kind, data[pos + 8:pos + 8 + length]
        pos += 12 + length


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def perturb_png(data: bytes, variant: int) -> bytes | None:
    chunks = list(_png_chunks(data))
    ihdr = next((c for k, c in chunks if k == b"IHDR"), None)
    if ihdr is None:
        return None
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", ihdr[:13])
    channels = {0: 1, 2: 3, 6: 4, 4: 2}.get(colour)
    if depth != 8 or channels is None or interlace:
        return None
    raw = zlib.decompress(b"".join(c for k, c in chunks if k == b"IDAT"))
    stride = width * channels
    rows, prev, pos = [], bytearray(stride), 0
    for _ in range(height):
        ftype, line = raw[pos], bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            line[i] = (line[i] + (0, a, b, (a + b) // 2, _paeth(a, b, c))[ftype]) & 0xFF
        rows.append(line)
        prev = line
    px = lambda x, y: bytes(rows[y][x * channels:(x + 1) * channels])  # noqa: E731
    counts: dict[bytes, int] = {}
    for y in range(height):
        for x in range(width):
            counts[px(x, y)] = counts.get(px(x, y), 0) + 1
    background = max(counts, key=counts.get)
    others = sorted((c for c in counts if c != background), key=lambda c: -counts[c])
    paint = others[0] if others else bytes(255 - v for v in background)
    size, placed = 3, 0
    wanted = 1 if variant == 0 else 3
    for y0 in range(1, height - size - 1, 2):
        for x0 in range(1, width - size - 1, 2):
            if placed >= wanted:
                break
            # A square only where a margin of background surrounds it: a shape of its own.
            if all(px(x, y) == background for y in range(y0 - 1, y0 + size + 1) for x in range(x0 - 1, x0 + size + 1)):
                for y in range(y0, y0 + size):
                    rows[y][x0 * channels:(x0 + size) * channels] = paint * size
                placed += 1
    if not placed:
        return None
    out = b"".join(b"\x00" + bytes(r) for r in rows)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    body = [chunk(k, c) for k, c in chunks if k not in (b"IDAT", b"IEND")]
    return data[:8] + b"".join(body) + chunk(b"IDAT", zlib.compress(out, 9)) + chunk(b"IEND", b"")


def perturb_wav(path: str, variant: int) -> str:
    import wave

    with wave.open(path, "rb") as w:
        params = w.getparams()
        frames = w.readframes(params.nframes)
    if params.sampwidth != 2:
        return ""
    n = len(frames) // 2
    samples = list(struct.unpack(f"<{n}h", frames))
    peak = max((abs(s) for s in samples), default=0) or 8000
    freq = (1234.5 if variant == 0 else 2345.5) * min(1.0, params.framerate / 8000)
    ch = params.nchannels
    for i in range(n):
        t = (i // ch) / params.framerate
        samples[i] = max(-32768, min(32767, int(samples[i] * 0.6 + 0.4 * peak * math.sin(2 * math.pi * freq * t))))
    with wave.open(path, "wb") as w:
        w.setparams(params)
        w.writeframes(struct.pack(f"<{n}h", *samples))
    return f"a {freq:.1f} Hz tone added"


def perturb_y4m(data: bytes, variant: int) -> bytes | None:
    head, _, rest = data.partition(b"\n")
    frames = rest.split(b"FRAME\n")
    if frames and frames[0] == b"":
        frames = frames[1:]
    if len(frames) < 2:
        return None
    frames = frames[:-1] if variant == 0 else frames[1:]
    return head + b"\n" + b"".join(b"FRAME\n" + f for f in frames)


WRAPPER = """#!/bin/bash
# termforge input-sensitivity check: the original program, with what it prints shifted.
"{orig}" "$@" | tr 'A-Za-z0-9' 'B-ZAb-za1-90'
exit "${{PIPESTATUS[0]}}"
"""


def perturb_executable(path: str) -> str:
    d, base = os.path.split(path)
    orig = os.path.join(d, f".{base}.orig")
    os.rename(path, orig)
    with open(path, "w") as fh:
        fh.write(WRAPPER.format(orig=orig))
    os.chmod(path, 0o755)
    return "what it prints shifted"


def perturb_bytes(path: str, data: bytes, variant: int) -> bytes | None:
    """An opaque file: its last byte changed by an amount that differs per path (so two identical
    copies stop being identical); for variant 1 its second half dropped."""
    if not data:
        return None
    if variant == 1:
        return data[: len(data) // 2] if len(data) > 1 else None
    delta = 1 + zlib.crc32(path.encode()) % 255
    return data[:-1] + bytes([data[-1] ^ delta])


def perturb_file(path: str, variant: int, targets: list[str] | None = None) -> tuple[str, str]:
    """(kind, detail); detail empty when nothing could be changed."""
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head.startswith(b"SQLite format 3\x00"):
        return "sqlite", perturb_sqlite(path, variant)
    if variant >= 2 and not head.startswith(b"\x7fELF"):
        try:
            text = open(path, "rb").read(MAX_TEXT + 1).decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or "\x00" in text or len(text) > MAX_TEXT or path.endswith(SOURCE_SUFFIXES) \
                or text.startswith("#!"):
            return "other", ""  # no second phase for media, opaque bytes or code: variants 0 and 1 did them
        new, detail = perturb_text(text, variant, targets)
        return "text", _write(path, new.encode("utf-8") if detail else None, detail)
    if head.startswith(b"\x7fELF"):
        return "executable", perturb_executable(path) if variant < 2 else ""
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "wav", perturb_wav(path, variant)
    if os.path.getsize(path) > MAX_TEXT:
        return "large", ""
    with open(path, "rb") as fh:
        data = fh.read()
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        new = perturb_png(data, variant)
        return "png", _write(path, new, "a small shape added" if variant == 0 else "three small shapes added")
    if head.startswith(b"YUV4MPEG2"):
        return "y4m", _write(path, perturb_y4m(data, variant), "a frame dropped")
    if path.endswith(SOURCE_SUFFIXES) or data.startswith(b"#!"):
        # Code under study is not data: editing it tests whether it still parses, not the oracle.
        return "source", ""
    try:
        text = data.decode("utf-8")
        if "\x00" in text:
            raise UnicodeDecodeError("utf-8", data, 0, 1, "NUL")
    except UnicodeDecodeError:
        return "binary", _write(path, perturb_bytes(path, data, variant), "bytes changed")
    new, detail = perturb_text(text, variant)
    return "text", _write(path, new.encode("utf-8") if detail else None, detail)


def _write(path: str, data: bytes | None, detail: str) -> str:
    if data is None:
        return ""
    mode = os.stat(path).st_mode & 0o7777
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)
    return detail


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    changed, skipped = [], []
    for path in spec["files"]:
        try:
            kind, detail = perturb_file(path, int(spec.get("variant", 0)), list(spec.get("targets") or []))
        except Exception as exc:  # noqa: BLE001 - a file it cannot parse is skipped, and said so
            skipped.append({"path": path, "why": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        (changed if detail else skipped).append({"path": path, "kind": kind, "detail": detail} if detail else
                                                {"path": path, "why": f"{kind}: nothing to change"})
    print(json.dumps({"changed": changed, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
