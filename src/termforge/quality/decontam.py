"""Decontamination: hashed word n-grams against reference sets, MinHash near duplicates in the corpus.

A task document (instruction, answer key and tests) is cut into lowercase alphanumeric word
tokens. A batch of documents is tokenised and hashed with numpy over its bytes: a few uint8 array
operations find the token bytes and lower ASCII, each token is hashed once from its 8-byte words,
and no Python object is made per token or per n-gram. The hash of an n-gram is a polynomial in its
n token hashes (mod 2**64) plus a 64-bit finaliser. The 5-gram polynomials (the near-duplicate
shingles) are computed for every position, unfinalised (their bits are already uniform); an
n-gram is hashed and probed only where the 5-grams at both of its ends occur in some reference (a
table lookup), which is a few windows in a hundred, and the shared windows are grouped per
document and reference with array operations. References are indexed once (sorted n-gram hashes
-> reference ids, with a byte table in front that rejects most misses in one lookup). In
non-ASCII documents only the runs of non-ASCII bytes are folded (one table lookup per code
point, each distinct run once per process), in place where the fold keeps the run's length; the
rest takes the ASCII path. Near duplicates inside the corpus come from one-permutation MinHash
sketches of word shingles, computed per batch with array operations, and LSH bands whose
candidates are confirmed by the sketch's Jaccard estimate (after one byte per bin rules most of
them out); they are reported as clusters. Each task file is read once, as bytes, and not at all
where generate's shard documents file holds the task's text (see "shard documents" below).

Everything is deterministic: token and n-gram hashes are seedless functions of the text, the
sketch hash is salted by a fixed seed, tasks are visited in sorted id order and every list in the
report is sorted.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from termforge.containment import read_regular
from termforge.errors import ConfigError, TermforgeError
from termforge.io import atomic_write_chunks, read_json

DEFAULT_N = 13
DEFAULT_SHINGLE = 5
DEFAULT_NUM_PERM = 64
DEFAULT_MINHASH_SEED = 1
# Windows of at least this many tokens are only hashed where the k-grams at both of their ends
# occur in some reference (ReferenceIndex.kgram_candidates).
PREFILTER_K = 5
POLICIES = ("drop", "flag")

# Token hash: the token's first 8 bytes as a little-endian word (masked to the token); longer
# tokens fold in a length-dependent value and more words (multiply by an odd constant, xor the
# word; see _long_token_hashes); then finalised. Most tokens fit one word, so hashing is two
# gathers and a mask per token.
_LEN_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
_WORD_MUL = np.uint64(0xD6E8FEB86659FD93)
# Window hash: the polynomial START * P**n + sum(t_k * P**(n - 1 - k)) over the n token hashes
# (mod 2**64); the non-zero start keeps sequences of different lengths apart by construction.
_POLY = 0x9E3779B97F4A7C15
_START = 0x27D4EB2F165667C5
_FMIX_SHIFT = np.uint64(33)
_FMIX_M1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_SPACE = 32
_EMPTY_BIN = np.uint32(0xFFFFFFFF)  # a MinHash bin no shingle fell into


def _fold_table() -> bytes:
    """bytes.translate table: ASCII letters to lowercase, digits kept, other ASCII to a space.

    Bytes >= 0x80 are kept: they only occur in text already reduced to tokens by the regex path.
    """
    table = bytearray(b" " * 128) + bytearray(range(128, 256))
    for c in b"abcdefghijklmnopqrstuvwxyz0123456789":
        table[c] = c
    for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        table[c] = c + 32
    return bytes(table)


_FOLD = _fold_table()


_CP_FOLD: np.ndarray | None = None
_UNKNOWN = 0xFFFFFFFF
# Code points whose lowercase is not one fixed code point: U+0130 lowers to two characters, and
# capital sigma lowers to final or medial sigma by context. Texts holding one take str.lower().
_CONTEXT_LOWER = ("\u0130", "\u03a3")


def _code_point_fold(cps: np.ndarray) -> np.ndarray:
    """Each code point -> its lowercase code point if that is alphanumeric, else a space.

    One table over all of Unicode, filled lazily for the code points met (a corpus uses a few
    hundred): building it whole costs tens of milliseconds per process.
    """
    global _CP_FOLD
    if _CP_FOLD is None:
        _CP_FOLD = np.full(0x110000, _UNKNOWN, dtype=np.uint32)
    table = _CP_FOLD
    folded = table.take(cps)
    unknown = folded == _UNKNOWN
    if unknown.any():
        for c in np.unique(cps[unknown]).tolist():
            low = chr(c).lower()
            table[c] = ord(low) if len(low) == 1 and low.isalnum() else _SPACE
        folded = table.take(cps)
    return folded


def _unfolded_many(texts: Sequence[str]) -> list[bytes]:
    """Bytes that _FOLD turns into each non-ASCII text's tokens separated by runs of spaces.

    Vectorised over the whole batch: the texts become one array of code points, one table lookup
    maps each to its lowercase if that is alphanumeric (str.isalnum, exactly what re's [^\\W_]
    keeps on lowercased text) and to a space otherwise, and the array goes back to UTF-8 in one
    encode: a few array passes per character, like the ASCII path, instead of a regex match
    object per token. Documents are joined by NUL, which survives as the cut mark.
    """
    if not texts:
        return []
    joined = "\0".join(texts)
    if any(c in joined for c in _CONTEXT_LOWER):  # rare: lowercase those texts whole, by context
        texts = [t.lower() if any(c in t for c in _CONTEXT_LOWER) else t for t in texts]
        joined = "\0".join(texts)
    # surrogatepass: a lone surrogate is not alphanumeric, so the table turns it into a space.
    cps = np.frombuffer(joined.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
    folded = _code_point_fold(cps)
    if len(texts) > 1:
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        folded[np.cumsum(lengths[:-1] + 1) - 1] = 0
    return str(memoryview(folded), "utf-32-le").encode("utf-8").split(b"\0")


def _unfolded(text: str) -> bytes:
    """Bytes that _FOLD turns into the text's tokens separated by runs of spaces."""
    # Most task text is pure ASCII, where the translate table alone finds the tokens; re's \w is
    # exactly [a-zA-Z0-9_] on ASCII, so both paths give the same tokens there.
    if text.isascii():
        return text.encode("ascii")
    return _unfolded_many([text])[0]


def _as_bytes(t: str | bytes) -> bytes:
    """The text as UTF-8 bytes for the batch buffer; a str with lone surrogates (not UTF-8) is
    folded whole here by the code-point path, which turns them into spaces."""
    if isinstance(t, bytes):
        return t
    try:
        return t.encode("utf-8")
    except UnicodeEncodeError:
        return _unfolded_many([t])[0]


def _prefolded(t: bytes) -> bytes:
    """A document holding a context-dependent lowercase (see _CONTEXT_LOWER), folded whole."""
    if t.isascii() or not any(c.encode("utf-8") in t for c in _CONTEXT_LOWER):
        return t
    return _unfolded_many([t.decode("utf-8", errors="replace")])[0]


# Folded non-ASCII runs by their bytes: a corpus repeats a few hundred distinct runs (accented
# letters, dashes, quotes), so most runs cost one dictionary lookup. None: the run folds to
# itself. Runs holding a context-dependent lowercase are also in _CONTEXT_RUNS. Both are cleared
# when the cache grows large.
_RUN_FOLDS: dict[bytes, bytes | None] = {}
_CONTEXT_RUNS: set[bytes] = set()
_RUN_FOLDS_MAX = 1 << 16


def _folded_runs(runs: list[bytes]) -> list[bytes | None]:
    """Each run of bytes >= 0x80 folded by the code-point table (invalid UTF-8 replaced: never a
    token), or None where the fold is the run itself; a fold made only of separators is padded
    with spaces to the run's length (the same tokens, and nothing after it moves)."""
    cache = _RUN_FOLDS
    try:
        return list(map(cache.__getitem__, runs))
    except KeyError:
        pass
    if len(cache) > _RUN_FOLDS_MAX:
        cache.clear()
        _CONTEXT_RUNS.clear()
    missing = [r for r in dict.fromkeys(runs) if r not in cache]
    texts = [r.decode("utf-8", errors="replace") for r in missing]
    for run, text, folded in zip(missing, texts, _unfolded_many(texts)):
        if any(c in text for c in _CONTEXT_LOWER):
            _CONTEXT_RUNS.add(run)
        if folded == run:
            cache[run] = None
        elif len(folded) < len(run) and not folded.strip(b" "):
            cache[run] = b" " * len(run)
        else:
            cache[run] = folded
    return list(map(cache.__getitem__, runs))


def _fold_high_runs(data: bytes, doc_starts: np.ndarray, parts: list[bytes]) -> tuple[bytes | bytearray, np.ndarray]:
    """The batch buffer with every run of bytes >= 0x80 folded by the code-point table, and the
    documents' start offsets in it (a fold may change a run's byte length).

    Folding is per code point and every ASCII byte decodes alone, so a run of bytes >= 0x80 between
    ASCII bytes decodes to the same code points in isolation as in its text, and folding only the
    runs gives the tokens that folding the whole text gives (the fold is idempotent, which a test
    checks, so text folded before is unchanged). A document with one accented word thus costs what
    an ASCII one costs, plus its runs. Documents whose runs hold a context-dependent lowercase
    (_CONTEXT_LOWER) are folded whole first, then the batch is folded again.
    """
    # The non-ASCII bytes are few: find them, then cut them into runs of consecutive positions.
    at = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) >= 0x80)
    if len(at) == 0:  # documents folded whole (below) can come back all ASCII
        return data, doc_starts
    breaks = np.flatnonzero(at[1:] != at[:-1] + 1)
    run_starts = at[np.append(0, breaks + 1)]
    run_ends = at[np.append(breaks, len(at) - 1)] + 1
    starts, ends = run_starts.tolist(), run_ends.tolist()
    runs = [data[a:b] for a, b in zip(starts, ends)]
    folded = _folded_runs(runs)
    if _CONTEXT_RUNS and not _CONTEXT_RUNS.isdisjoint(runs):  # rare: fold those documents whole
        parts = [_prefolded(p) for p in parts]
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        doc_starts = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(lengths + 1, out=doc_starts[1:])
        return _fold_high_runs(b" ".join([*parts, _PAD]), doc_starts, parts)
    edits = [(a, b, piece) for a, b, piece in zip(starts, ends, folded) if piece is not None]
    if not edits:
        return data, doc_starts
    if all(len(piece) == b - a for a, b, piece in edits):
        buffer = bytearray(data)  # the usual case: every fold fits its run, written in place
        for a, b, piece in edits:
            buffer[a:b] = piece
        return buffer, doc_starts
    folded = [run if piece is None else piece for run, piece in zip(runs, folded)]
    pieces, prev = [], 0
    for a, b, piece in zip(starts, ends, folded):
        pieces += (data[prev:a], piece)
        prev = b
    pieces.append(data[prev:])
    # A document starts after every run before it: shift its start by their change in length.
    growth = np.zeros(len(folded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, folded), dtype=np.int64, count=len(folded)) - (run_ends - run_starts),
              out=growth[1:])
    return b"".join(pieces), doc_starts + growth[np.searchsorted(run_starts, doc_starts)]


def _fold(text: str) -> bytes:
    """The text's tokens as UTF-8, separated by runs of spaces and nothing else."""
    return _unfolded(text).translate(_FOLD)


def word_tokens(text: str) -> list[str]:
    """Lowercase alphanumeric word tokens (Unicode letters and digits; '_' and punctuation split)."""
    return [t.decode("utf-8") for t in _fold(text).split()]


@dataclass
class _TokenBatch:
    """Documents tokenised together: token byte spans in `data` (the batch buffer with ASCII
    lowercased, a uint8 array), token hashes, per-document offsets."""

    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    hashes: np.ndarray
    offsets: np.ndarray

    def words(self, first: int, stop: int) -> str:
        """Tokens first..stop-1 of the batch, joined by single spaces."""
        data = self.data
        return b" ".join(data[a:b].tobytes() for a, b in zip(self.starts[first:stop].tolist(),
                                                             self.ends[first:stop].tolist())).decode("utf-8")


# Seven spaces after the one that follows the last document: the last token ends inside the
# buffer and every 8-byte word a token touches lies within it.
_PAD = b"       "
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_THREE = np.uint64(3)


def _tokenize(texts: Sequence[str | bytes]) -> _TokenBatch:
    """Tokenise and hash a batch of texts with array operations over their bytes.

    No Python object is made per token. The texts are joined into one buffer (non-ASCII runs folded
    first, see _fold_high_runs); a byte is part of a token when it is an ASCII letter or digit or a
    byte >= 0x80 (folded runs hold only lowercase letters and digits there), which a few uint8
    array operations decide; token boundaries are where that changes. ASCII is lowercased by
    setting bit 5 of every byte below 0x80. Each token's first 8 bytes come from the aligned
    words of the buffer, masked to its length.
    """
    parts = [t if type(t) is bytes else _as_bytes(t) for t in texts]
    doc_lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    # Documents are joined by one space; doc_starts[i] is where document i starts in the buffer.
    doc_starts = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(doc_lengths + 1, out=doc_starts[1:])
    data = b" ".join([*parts, _PAD])
    if not data.isascii():
        data, doc_starts = _fold_high_runs(data, doc_starts, parts)
    size = len(data) - 8
    raw = np.frombuffer(data, dtype=np.uint8)
    # The buffer with ASCII lowered (bit 7 -> bit 5, inverted: bit 5 set on bytes below 0x80,
    # which lowers letters and keeps digits; bytes >= 0x80 stay as they are), 8-byte aligned and
    # padded so that a uint64 array over it holds every word a token touches.
    low = np.empty(len(data) + 16, dtype=np.uint8)
    lowered = low[:len(data)]
    np.right_shift(raw, np.uint8(2), out=lowered)
    np.invert(lowered, out=lowered)
    lowered &= np.uint8(0x20)
    lowered |= raw
    low[len(data):] = _SPACE
    codes = raw[:size]
    in_token = np.zeros(size + 2, dtype=bool)
    flags = in_token[1:-1]
    scratch = np.subtract(low[:size], np.uint8(0x61))
    np.less(scratch, 26, out=flags)  # a-z after lowering (uint8 wraps below 'a')
    np.subtract(codes, np.uint8(0x30), out=scratch)
    flags |= scratch < 10
    flags |= codes >= 0x80
    # Token runs begin and end exactly where the in-token flag changes, alternately. (nonzero on
    # a bool array is several times faster than on int8 differences.)
    changes = np.flatnonzero(in_token[1:] != in_token[:-1])
    starts, ends = changes[0::2], changes[1::2]
    token_lengths = ends - starts
    lengths = token_lengths.view(np.uint64)  # positive: the view is the value
    # Each token's first 8 bytes (_words_at); tokens of 8 bytes and more keep whole words under the mask.
    aligned = low[:len(low) // 8 * 8].view(np.uint64)
    hashes = _words_at(aligned, starts)
    mask = _ALL_ONES << (lengths << _THREE)
    np.invert(mask, out=mask)
    hashes &= mask  # a token of at most 8 bytes has no NUL: the masked word alone tells its length
    longer = np.flatnonzero(token_lengths > 8)
    if len(longer):
        hashes[longer] = _long_token_hashes(aligned, hashes[longer], starts[longer], token_lengths[longer])
    _fmix64(hashes)
    offsets = np.searchsorted(starts, doc_starts)
    return _TokenBatch(low, starts, ends, hashes, offsets)


_WORDWISE_MAX = 64
"""Tokens up to this many bytes are hashed word by word; longer ones by one digest each."""


def _words_at(aligned: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The 8 bytes starting at each byte position, as little-endian words, from two gathers of
    the aligned words they fall in (gathers from a contiguous array are several times faster than
    indexing an overlapping unaligned view)."""
    word_at = positions >> 3
    shift = (positions & 7).view(np.uint64) << _THREE
    out = aligned.take(word_at)
    out >>= shift
    word_at += 1
    following = aligned.take(word_at)
    np.subtract(np.uint64(64), shift, out=shift)
    following <<= shift  # numpy gives 0 for a shift of 64: a position on a word boundary takes one word
    out |= following
    return out


def _long_token_hashes(aligned: np.ndarray, hashes: np.ndarray, starts: np.ndarray,
                       lengths: np.ndarray) -> np.ndarray:
    """Fold the rest of tokens longer than 8 bytes into their hashes: the 8-byte words at 8, 16,
    ... that end before the token's last 8 bytes, then those last 8 bytes (a whole word, inside
    the token). With the first word and the length they cover every byte of the token; most long
    tokens are at most 16 bytes, so this is usually one gather and no loop."""
    hashes ^= lengths.view(np.uint64) * _LEN_MIX  # 9 and 10 times "a" share their first and last words
    last = _words_at(aligned, starts + (lengths - 8))
    middle = np.flatnonzero((lengths > 16) & (lengths <= _WORDWISE_MAX))
    offset = 8
    while len(middle):
        hashes[middle] = (hashes[middle] * _WORD_MUL) ^ _words_at(aligned, starts[middle] + offset)
        offset += 8
        middle = middle[lengths[middle] > offset + 8]
    hashes *= _WORD_MUL
    hashes ^= last
    # Very long tokens (encoded blobs, hex dumps) are rare but would cost one pass of the loop
    # above per 8 bytes: they are hashed whole, one digest each.
    very = np.flatnonzero(lengths > _WORDWISE_MAX)
    if len(very):
        buf = memoryview(aligned.view(np.uint8))
        hashes[very] = np.fromiter(
            (int.from_bytes(hashlib.blake2b(buf[s:s + n], digest_size=8).digest(), "little")
             for s, n in zip(starts[very].tolist(), lengths[very].tolist())), dtype=np.uint64, count=len(very))
    return hashes


def _fmix64(h: np.ndarray) -> np.ndarray:
    """In-place 64-bit avalanche finaliser: every input bit affects every output bit."""
    h ^= h >> _FMIX_SHIFT
    h *= _FMIX_M1
    h ^= h >> _FMIX_SHIFT
    h *= _FMIX_M2
    h ^= h >> _FMIX_SHIFT
    return h


def _window_hashes(token_hashes: np.ndarray, n: int, blocks: dict | None = None,
                   finalise: bool = True) -> np.ndarray:
    """Hash of every run of n consecutive token hashes (len - n + 1 values; empty if too short).

    The window polynomial is assembled from power-of-two blocks (block[2m] = block[m] * P**m +
    block[m] shifted by m), so n = 13 costs about a dozen array passes instead of 26. `blocks`
    (a dict kept by the caller for one token_hashes array) shares the blocks between window
    lengths: the 5-word shingles reuse the blocks of the 13-grams. finalise=False leaves out the
    finaliser: the polynomial of finalised token hashes is already uniform in its bits, which is
    all a bit table or a MinHash sketch needs (only n-grams that must not collide are finalised).
    """
    width = len(token_hashes) - n + 1
    if width <= 0 or n <= 0:
        return np.empty(0, dtype=np.uint64)
    if blocks is None:
        blocks = {}
    blocks.setdefault(1, token_hashes)
    size = 1
    while size * 2 <= n:
        if size * 2 not in blocks:
            prev = blocks[size]
            block = prev[: len(prev) - size] * np.uint64(pow(_POLY, size, 1 << 64))
            block += prev[size:]
            blocks[size * 2] = block
        size *= 2
    acc = None
    offset = 0
    while size:
        if n - offset >= size:
            part = blocks[size][offset:offset + width]
            if acc is None:  # START * P**size + the first block: one pass instead of three
                acc = part + np.uint64(_START * pow(_POLY, size, 1 << 64) % (1 << 64))
            else:
                acc *= np.uint64(pow(_POLY, size, 1 << 64))
                acc += part
            offset += size
        size //= 2
    return _fmix64(acc) if finalise else acc


def _batch_windows(token_hashes: np.ndarray, offsets: np.ndarray, n: int,
                   blocks: dict | None = None, finalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Window hashes of a batch of documents laid end to end in one token-hash array.

    Returns (hashes, start position in the flat token array), in increasing start order. Windows
    that would run into the next document are discarded; a document with fewer than n tokens (but
    at least one) contributes one hash of its whole token sequence.
    """
    hashes = _window_hashes(token_hashes, n, blocks, finalise)
    starts = np.empty(0, dtype=np.int64)
    if len(hashes):
        valid = np.ones(len(hashes), dtype=bool)
        valid[_crossing_windows(offsets, n, len(hashes))] = False
        starts = np.flatnonzero(valid)
        hashes = hashes[starts]
    return _with_short_documents(token_hashes, offsets, n, hashes, starts, finalise)


def _crossing_windows(offsets: np.ndarray, n: int, count: int) -> np.ndarray:
    """Start positions (below count) of the windows of n tokens that run past their document."""
    # The windows starting in the last n-1 tokens of each document run past its end. (For a
    # document shorter than that, the positions reach back into the previous document's own
    # last n-1 starts, which are invalid anyway.)
    tails = (offsets[1:, None] - np.arange(1, n, dtype=np.int64)[None, :]).ravel()
    return tails[(tails >= 0) & (tails < count)]


def _short_documents(token_hashes: np.ndarray, offsets: np.ndarray, n: int,
                     finalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(documents with 1..n-1 tokens, the hash of each one's whole token sequence)."""
    lengths = np.diff(offsets)
    short = np.flatnonzero((lengths > 0) & (lengths < n))
    hashes = [_window_hashes(token_hashes[offsets[d]:offsets[d + 1]], int(lengths[d]), finalise=finalise)
              for d in short.tolist()]
    return short, (np.concatenate(hashes) if hashes else np.empty(0, dtype=np.uint64))


def _with_short_documents(token_hashes: np.ndarray, offsets: np.ndarray, n: int, hashes: np.ndarray,
                          starts: np.ndarray, finalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Add each document shorter than n tokens as one whole-sequence hash, in start order."""
    short, extra = _short_documents(token_hashes, offsets, n, finalise)
    if len(short):
        hashes = np.concatenate([hashes, extra])
        starts = np.concatenate([starts, offsets[short]])
        order = np.argsort(starts, kind="stable")
        hashes, starts = hashes[order], starts[order]
    return hashes, starts


def _windows_at(blocks: dict, positions: np.ndarray, n: int) -> np.ndarray:
    """_window_hashes(token_hashes, n)[positions] from the power-of-two blocks already built (any
    chunking of Horner's rule gives the same polynomial mod 2**64): a few gathers per position
    instead of a dozen passes over every position."""
    sizes = sorted(blocks, reverse=True)
    acc = None
    offset = 0
    while offset < n:
        size = next(sz for sz in sizes if sz <= n - offset)
        part = blocks[size].take(positions + offset)
        if acc is None:
            acc = part
            acc += np.uint64(_START * pow(_POLY, size, 1 << 64) % (1 << 64))
        else:
            acc *= np.uint64(pow(_POLY, size, 1 << 64))
            acc += part
        offset += size
    return _fmix64(acc)


def _prefiltered_windows(token_hashes: np.ndarray, offsets: np.ndarray, n: int, blocks: dict,
                         in_refs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """_batch_windows(token_hashes, offsets, n) restricted to windows that can occur in a reference.

    in_refs[p] says whether the k-gram (k <= n) starting at token p may occur in some reference
    (a superset: a table on hash bits). A window of n tokens that occurs in a reference starts and
    ends with k-grams of that reference, so only positions where both hold are hashed, from the
    blocks, and probed; every other window is certainly not shared. Documents shorter than n
    tokens contribute their whole-sequence hash, as in _batch_windows.
    """
    size = len(token_hashes)
    if size >= n:
        cand = np.flatnonzero(in_refs[:size - n + 1] & in_refs[n - k:size - k + 1])
        doc = np.searchsorted(offsets, cand, side="right") - 1
        starts = cand[cand + n <= offsets[doc + 1]]
        hashes = _windows_at(blocks, starts, n)
    else:
        starts, hashes = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint64)
    return _with_short_documents(token_hashes, offsets, n, hashes, starts)


def ngram_hashes(text: str, n: int = DEFAULT_N) -> np.ndarray:
    """Sorted unique uint64 hashes of the word n-grams of text.

    A text with fewer than n tokens (but at least one) yields one hash of its whole token sequence,
    so short texts still match exact short copies; an empty text yields none.
    """
    if n < 1:
        raise ValueError(f"n-gram size must be at least 1, got {n}")
    token_hashes = _tokenize([text]).hashes
    return np.unique(_window_hashes(token_hashes, min(n, len(token_hashes))))


# ----------------------------------------------------------------------------- references


@dataclass(frozen=True)
class RefDoc:
    """One reference text: a benchmark task instruction, an eval problem, ..."""

    ref_id: str
    source: str
    text: str


def load_harbor_references(directory: str | Path, source: str | None = None) -> list[RefDoc]:
    """Every instruction.md under a Terminal-Bench / Harbor task directory, one RefDoc per task.

    The reference id is ``<source>/<task path relative to directory>``; source defaults to the
    directory's name.
    """
    root = Path(directory)
    if not root.is_dir():
        raise TermforgeError(f"reference task directory {root} does not exist or is not a directory")
    source = source or root.name
    refs = []
    for path in sorted(root.rglob("instruction.md")):
        rel = path.parent.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        task_name = rel.as_posix() if rel.parts else root.name
        # A third-party dataset: an instruction.md linking out of it is refused (containment).
        text = read_regular(path, root).decode("utf-8", errors="replace")
        refs.append(RefDoc(f"{source}/{task_name}", source, text))
    if not refs:
        raise TermforgeError(f"no */instruction.md found under reference task directory {root}")
    return refs


def load_hf_references(dataset_id: str, column: str, split: str = "test", source: str | None = None,
                       id_column: str | None = None, config_name: str | None = None,
                       cache_dir: str | Path | None = None) -> list[RefDoc]:
    """One RefDoc per row of a Hugging Face dataset (a hub id, a local dataset directory, or a
    local .parquet/.json/.jsonl/.csv file), taking the text from `column`.

    The reference id is ``<source>/<id_column value>`` or ``<source>/<row index>``.
    """
    import datasets  # heavy import, only needed for this loader

    source = source or dataset_id
    local = Path(dataset_id).expanduser()
    # A path-looking id that is missing would otherwise be tried on the hub (slow, and misleading).
    if dataset_id.startswith(("/", "./", "../", "~")) and not local.exists():
        raise TermforgeError(f"reference dataset {dataset_id!r}: no such file or directory")
    builders = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}
    try:
        if local.is_file() and local.suffix in builders:
            ds = datasets.load_dataset(builders[local.suffix], data_files={split: str(local)}, split=split,
                                       cache_dir=None if cache_dir is None else str(cache_dir))
        else:
            ds = datasets.load_dataset(dataset_id, config_name, split=split,
                                       cache_dir=None if cache_dir is None else str(cache_dir))
    except Exception as exc:  # datasets raises many types (hub, file, builder, split errors)
        raise TermforgeError(
            f"cannot load reference dataset {dataset_id!r} (split {split!r}): {type(exc).__name__}: {exc}"
        ) from exc
    names = list(ds.column_names)
    for wanted in (column, id_column):
        if wanted is not None and wanted not in names:
            raise TermforgeError(
                f"reference dataset {dataset_id!r} (split {split!r}) has no column {wanted!r}; "
                f"columns are {names}"
            )
    texts = ds[column]
    ids = ds[id_column] if id_column else range(len(texts))
    return [RefDoc(f"{source}/{rid}", source, "" if text is None else str(text)) for rid, text in zip(ids, texts)]


def load_jsonl_references(path: str | Path, column: str, source: str | None = None,
                          id_column: str | None = None) -> list[RefDoc]:
    """One RefDoc per line of a JSONL file (the run's own eval sets), text from `column`."""
    path = Path(path)
    if not path.is_file():
        raise TermforgeError(f"reference JSONL file {path} does not exist")
    source = source or path.stem
    refs = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TermforgeError(f"{path}:{lineno}: not valid JSON ({exc})") from exc
            if not isinstance(row, dict) or column not in row:
                raise TermforgeError(f"{path}:{lineno}: row has no column {column!r}")
            if id_column is not None and id_column not in row:
                raise TermforgeError(f"{path}:{lineno}: row has no id column {id_column!r}")
            rid = row[id_column] if id_column is not None else lineno
            text = row[column]
            refs.append(RefDoc(f"{source}/{rid}", source, "" if text is None else str(text)))
    return refs


class ReferenceIndex:
    """n-gram hash -> reference ids, built once and probed many times.

    Stored as a sorted array of distinct hashes with CSR offsets into an array of reference
    indices, so a batch of probes is one vectorised ``searchsorted``.

    A reference shorter than n tokens is one hash of its whole token sequence. If it has at least
    short_min_tokens tokens, documents are also probed with windows of its length, so a short eval
    problem pasted verbatim into a long task is still caught (``short_lengths`` lists those lengths).
    Shorter references only match documents that are exactly the same words.
    """

    def __init__(self, references: Sequence[RefDoc], n: int = DEFAULT_N, short_min_tokens: int = 8,
                 batch_size: int = 128):
        if n < 1:
            raise ConfigError(f"decontaminate n-gram size must be at least 1, got {n}")
        seen: set[str] = set()
        for ref in references:
            if ref.ref_id in seen:
                raise TermforgeError(f"duplicate reference id {ref.ref_id!r}")
            seen.add(ref.ref_id)
        self.n = n
        self.refs: list[RefDoc] = list(references)
        keys, vals, kgrams = [], [], []
        short_lengths: set[int] = set()
        for start in range(0, len(self.refs), batch_size):
            chunk = self.refs[start:start + batch_size]
            tokens = _tokenize([r.text for r in chunk])
            lengths = np.diff(tokens.offsets)
            short_lengths.update(lengths[(lengths >= short_min_tokens) & (lengths < n)].tolist())
            blocks: dict = {}
            kgrams.append(_batch_windows(tokens.hashes, tokens.offsets, PREFILTER_K, blocks, finalise=False)[0])
            h, p = _batch_windows(tokens.hashes, tokens.offsets, n, blocks)
            keys.append(h)
            vals.append(np.searchsorted(tokens.offsets, p, side="right") - 1 + start)
        key = np.concatenate(keys) if keys else np.empty(0, dtype=np.uint64)
        val = np.concatenate(vals) if vals else np.empty(0, dtype=np.int64)
        # Sort by (hash, reference): a quicksort on the hash, then the few runs of equal hashes (an
        # n-gram repeated in a text or shared by references) sorted on the reference as well.
        order = np.argsort(key)
        key, val = key[order], val[order]
        tied = np.zeros(len(key), dtype=bool)
        if len(key) > 1:
            same = key[1:] == key[:-1]
            tied[1:] = same
            tied[:-1] |= same
        if tied.any():
            at = np.flatnonzero(tied)
            resort = np.lexsort((val[at], key[at]))
            val[at] = val[at][resort]
        distinct = np.ones(len(key), dtype=bool)
        distinct[1:] = (key[1:] != key[:-1]) | (val[1:] != val[:-1])
        key, val = key[distinct], val[distinct]
        first = np.ones(len(key), dtype=bool)
        np.not_equal(key[1:], key[:-1], out=first[1:])
        first = np.flatnonzero(first)
        self.hashes = key[first]
        self.offsets = np.append(first, len(key)).astype(np.int64)
        self.ref_of = val.astype(np.int32)
        self.short_lengths: list[int] = sorted(short_lengths)
        # A byte table on the top hash bits, about 8 entries per distinct n-gram (false candidates
        # near 12%, which the binary search then rejects): one gather per probe (a packed bit
        # table costs four more array passes than its cache misses save). scan_documents probes
        # only the windows the k-gram table lets through, so a small table that stays in cache
        # beats a sparser one that rejects a few more.
        bits = int(min(26, max(16, np.ceil(np.log2(max(len(self.hashes), 1) * 8)))))
        self._filter_shift = np.uint64(64 - bits)
        self._filter = np.zeros(1 << bits, dtype=bool)
        self._filter[self.hashes >> self._filter_shift] = True
        # The same kind of table for the references' PREFILTER_K-grams: a window can only be shared
        # if the k-grams it starts and ends with are (see _prefiltered_windows).
        kgram = np.concatenate(kgrams) if kgrams else np.empty(0, dtype=np.uint64)
        # Looked up at every token: 8 entries per k-gram (repeats counted too: no sort to find the
        # distinct ones) keep the table in cache, and the ~12% false candidates at each end of a
        # window leave ~1.5% of windows to hash and probe.
        bits = int(min(24, max(16, np.ceil(np.log2(max(len(kgram), 1) * 8)))))
        self._kgram_shift = np.uint64(64 - bits)
        self._kgram_filter = np.zeros(1 << bits, dtype=bool)
        self._kgram_filter[kgram >> self._kgram_shift] = True

    def kgram_candidates(self, kgram_hashes: np.ndarray) -> np.ndarray:
        """Boolean mask: which PREFILTER_K-gram hashes may occur in some reference (a superset)."""
        return self._kgram_filter.take((kgram_hashes >> self._kgram_shift).view(np.int64))

    def __len__(self) -> int:
        """Number of distinct reference n-grams."""
        return len(self.hashes)

    def probe(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in hashes that occur in some reference, their slots in self.hashes)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        # Most probes miss: a direct-mapped byte table on the top hash bits rejects nearly all of
        # them with one lookup, and only the survivors pay for the binary search.
        # (a view, not a copy: the shifted values are below 2**26)
        candidates = np.flatnonzero(self._filter.take((hashes >> self._filter_shift).view(np.int64)))
        if len(candidates) == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        wanted = hashes[candidates]
        slot = np.searchsorted(self.hashes, wanted)
        np.minimum(slot, len(self.hashes) - 1, out=slot)
        hit = self.hashes[slot] == wanted
        return candidates[hit], slot[hit]

    def references_of(self, hashes: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For probed hashes found at slots: (each hash once per reference holding it, that
        reference's index, how many references each hash has)."""
        counts = self.offsets[slots + 1] - self.offsets[slots]
        total = int(counts.sum())
        # Entry k of hash i is ref_of[offsets[slot_i] + k]: the slot's start, repeated, plus a
        # count that restarts at 0 for every hash.
        at = np.repeat(self.offsets[slots] - (np.cumsum(counts) - counts), counts) + np.arange(total)
        return np.repeat(hashes, counts), self.ref_of[at], counts

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """Boolean mask: which of the given n-gram hashes occur in some reference."""
        mask = np.zeros(len(hashes), dtype=bool)
        mask[self.probe(hashes)[0]] = True
        return mask

    def ref_indices(self, h: int) -> list[int]:
        """Positions in self.refs of the references containing n-gram hash h."""
        slot = int(np.searchsorted(self.hashes, np.uint64(h)))
        if slot >= len(self.hashes) or int(self.hashes[slot]) != int(h):
            return []
        return self.ref_of[self.offsets[slot]:self.offsets[slot + 1]].tolist()

    def lookup(self, h: int) -> list[str]:
        """Ids of the references containing n-gram hash h."""
        return [self.refs[i].ref_id for i in self.ref_indices(h)]

    def shared_counts(self, text: str) -> dict[str, int]:
        """Reference id -> number of distinct n-grams that text shares with it."""
        hits, _ = scan_documents([("text", text)], self)
        return {hit["ref_id"]: hit["shared_ngrams"] for hit in hits}


# ----------------------------------------------------------------------------- task documents

TASK_TEXT_FILES = ("instruction.md", "private/truth.json")


def task_id_of(task_dir: str | Path) -> str:
    """The id in task.json, or the directory name (the writer names directories by id)."""
    task_dir = Path(task_dir)
    meta = task_dir / "task.json"
    if meta.is_file():
        try:
            tid = read_json(meta).get("id")
        except (json.JSONDecodeError, AttributeError) as exc:
            raise TermforgeError(f"{meta}: not a JSON object with an 'id' ({exc})") from exc
        if tid:
            return str(tid)
    return task_dir.name


# Below glibc's mmap threshold (128 KiB): a larger read buffer is mmapped and unmapped per call,
# which costs more than the whole read of a typical task file.
_READ_CHUNK = 1 << 16


def _read_optional(path: str) -> bytes | None:
    """The file's bytes, or None when it is missing. Raw os calls: no buffered file object per
    file, and one read() for any file below 64 KiB (a short read of a regular file is its end)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = os.read(fd, _READ_CHUNK)
        if len(data) == _READ_CHUNK:
            chunks = [data]
            while chunk := os.read(fd, _READ_CHUNK):
                chunks.append(chunk)
            data = b"".join(chunks)
        return data
    except IsADirectoryError:
        return None
    finally:
        os.close(fd)


def task_document_bytes(task_dir: str | Path) -> bytes:
    """task_document as the UTF-8 bytes on disk: every file opened once, nothing decoded (the
    tokeniser works on bytes, and decodes only documents that are not ASCII)."""
    base = os.fspath(task_dir)
    instruction = _read_optional(f"{base}/instruction.md")
    if instruction is None:
        if not os.path.isdir(base):
            raise TermforgeError(f"task directory {task_dir} does not exist")
        raise TermforgeError(f"task directory {task_dir} has no instruction.md")
    parts = [instruction]
    # Plain string paths: os.path.join costs more than the read of a small file.
    for rel in TASK_TEXT_FILES[1:]:
        data = _read_optional(f"{base}/{rel}")
        if data is not None:
            parts.append(data)
    tests = f"{base}/tests"
    try:
        names = sorted(name for name in os.listdir(tests) if name.endswith(".py"))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    for name in names:
        data = _read_optional(f"{tests}/{name}")
        if data is not None:
            parts.append(data)
    return b"\n".join(parts)


def task_document(task_dir: str | Path) -> str:
    """instruction.md + private/truth.json + tests/*.py of a task directory, as one text.

    instruction.md is required; the answer key and tests are included when present (validation,
    not decontamination, decides whether a task is complete).
    """
    return task_document_bytes(task_dir).decode("utf-8", errors="replace")


def task_document_from_files(files: dict[str, bytes | tuple[bytes, int]]) -> bytes:
    """task_document_bytes of the task directory these files (relative path -> bytes, or the
    writer's (bytes, mode)) make: what generate records before the directory is even written."""
    values = [files[TASK_TEXT_FILES[0]]]  # instruction.md is required
    values += [files[rel] for rel in TASK_TEXT_FILES[1:] if rel in files]
    values += map(files.__getitem__, sorted(filter(_TEST_SOURCE, files)))  # one C-level match per file
    return b"\n".join([v[0] for v in values] if type(values[0]) is tuple else values)


# tests/*.py directly in tests/, as task_document_bytes lists them.
_TEST_SOURCE = re.compile(r"tests/[^/]*\.py", re.DOTALL).fullmatch


# ----------------------------------------------------------------------------- shard documents
#
# Reading a task's text costs four small files (open, read, close each): at 15k tasks that is
# 60k files and more CPU than the n-gram scan itself. generate, which holds each task's text in
# memory when it writes the directory, also writes it once per shard next to the shard manifest
# (a JSON header line, then the documents back to back). decontaminate uses a shard's documents
# file only where it is fresh: same format, same tasks_dir and ids as the manifest, and each task
# directory's ctime not after the file's mtime (a task directory replaced or re-published, or a
# file inside it replaced by rename, since generate wrote the file makes that task stale). Stale
# and missing entries (imported Harbor tasks, an llm-generated shard, a copied results tree) are
# read from their task directories: the report is the same either way. In-place edits of a file
# inside a task directory (which no termforge stage does: every write is atomic) are not seen.

DOCUMENTS_FORMAT = "termforge-task-documents/1"


def documents_path(manifest_path: str | Path) -> Path:
    """The shard documents file that goes with a shard manifest."""
    return Path(manifest_path).with_suffix(".docs")


def write_task_documents(path: str | Path, tasks_dir: str | Path, documents: Sequence[tuple[str, bytes]]) -> None:
    """Write a shard's (task id, task document bytes) atomically, in the given order."""
    header = {"format": DOCUMENTS_FORMAT, "tasks_dir": os.fspath(tasks_dir),
              "ids": [tid for tid, _ in documents], "lengths": [len(doc) for _, doc in documents]}
    atomic_write_chunks(path, [json.dumps(header, separators=(",", ":")).encode() + b"\n",
                               *(doc for _, doc in documents)])


def read_task_documents(path: str | Path, tasks_dir: str | Path, ids: Sequence[str]) -> dict[str, bytes]:
    """Task id -> document bytes for the tasks whose entry in the documents file is fresh (see
    above); {} when the file is missing, unreadable or written for other tasks."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            blob = fh.read()
            mtime = os.fstat(fh.fileno()).st_mtime_ns
        cut = blob.index(b"\n")
        header = json.loads(blob[:cut])
    except (OSError, ValueError):
        return {}
    base = os.fspath(tasks_dir)
    if (not isinstance(header, dict) or header.get("format") != DOCUMENTS_FORMAT
            or header.get("tasks_dir") != base or header.get("ids") != list(ids)):
        return {}
    lengths = header.get("lengths")
    if (not isinstance(lengths, list) or len(lengths) != len(ids)
            or not all(type(n) is int and n >= 0 for n in lengths) or cut + 1 + sum(lengths) != len(blob)):
        return {}  # a cache of another shape is no cache: the task directories are read instead
    out: dict[str, bytes] = {}
    ends = itertools.accumulate(lengths, initial=cut + 1)
    pos = next(ends)
    stat_of, prefix = os.stat, base + "/"
    for tid, end in zip(ids, ends):
        try:
            if stat_of(prefix + tid).st_ctime_ns <= mtime:
                out[tid] = blob[pos:end]
        except OSError:
            pass  # missing: reading the directory reports it
        pos = end
    return out


def manifest_tasks(manifest_paths: Sequence[str | Path]) -> tuple[list[tuple[str, str]], dict[str, bytes]]:
    """(task id, task dir) of every task the shard manifests name, and the fresh documents of
    their shard documents files (what decontaminate_tasks takes as documents)."""
    from termforge.schemas import read

    tasks: list[tuple[str, str]] = []
    documents: dict[str, bytes] = {}
    for m in manifest_paths:
        manifest = read("shard_manifest", m)
        ids = [e["id"] for e in manifest["tasks"]]
        base = manifest["tasks_dir"]
        tasks += [(tid, f"{base}/{tid}") for tid in ids]  # plain strings: a Path per task costs microseconds
        documents.update(read_task_documents(documents_path(m), manifest["tasks_dir"], ids))
    return tasks, documents


# ----------------------------------------------------------------------------- near duplicates


class NearDuplicateFinder:
    """Near-duplicate clusters inside the corpus, in time near-linear in the number of tasks.

    Each task gets a one-permutation MinHash sketch of its word shingles (num_perm bins chosen by
    the high hash bits, the minimum of each bin), computed for a whole batch with array operations.
    LSH then runs once over all sketches, vectorised: per band of BAND_ROWS bins the tasks are
    sorted by the band's value, and each task becomes a candidate pair with the first task and
    with the previous task of its bucket (never with every member, so a family of a thousand
    look-alike tasks gives about two thousand candidates per band, not half a million). Each
    candidate is confirmed by the sketches' Jaccard estimate, and the report holds the connected
    components of the confirmed links (clusters), never all pairs. Tasks must be added in sorted
    id order.
    """

    BAND_ROWS = 4
    _BAND_MUL = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, threshold: float = 0.8, num_perm: int = DEFAULT_NUM_PERM, seed: int = DEFAULT_MINHASH_SEED):
        if not 0.0 < threshold <= 1.0:
            raise ConfigError(f"decontaminate near_dup_threshold must be in (0, 1], got {threshold}")
        if num_perm < self.BAND_ROWS:
            raise ConfigError(f"decontaminate num_perm must be at least {self.BAND_ROWS}, got {num_perm}")
        self.threshold = threshold
        self.num_perm = num_perm
        self.seed = seed
        self._salt = np.uint64((seed * 0x9E3779B97F4A7C15) & ((1 << 64) - 1))
        self._ids: list[str] = []
        self._stored = np.empty((0, num_perm), dtype=np.uint32)
        self._pending: list[np.ndarray] = []
        self._links: list[tuple[str, str, float]] | None = None

    def sketches(self, shingle_hashes: np.ndarray, doc_bounds: np.ndarray) -> np.ndarray:
        """One sketch row per document; doc_bounds[i]:doc_bounds[i+1] are document i's shingles."""
        n_docs = len(doc_bounds) - 1
        out = np.full((n_docs, self.num_perm), _EMPTY_BIN, dtype=np.uint32)
        if len(shingle_hashes):
            rows = np.repeat(np.arange(0, n_docs * self.num_perm, self.num_perm, dtype=np.int64), np.diff(doc_bounds))
            self._lower_bins(out, rows, shingle_hashes)
        return out

    def window_sketches(self, windows: np.ndarray, offsets: np.ndarray, width: int,
                        token_hashes: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Sketches of a batch of documents (tokens offsets[i]:offsets[i+1] of token_hashes) whose
        shingles are windows of `width` tokens; windows[p] is the unfinalised hash of the window
        starting at token p (_window_hashes(token_hashes, width, finalise=False)), whether or not it
        runs into the next document. Those that do are left out by giving them the empty value
        (cheaper than cutting them out of the array); a document shorter than width has its whole
        token sequence as its one shingle, as in _batch_windows. Returns (sketches, shingles per
        document)."""
        n_docs = len(offsets) - 1
        out = np.full((n_docs, self.num_perm), _EMPTY_BIN, dtype=np.uint32)
        counts = np.diff(offsets)
        if len(windows):
            rows = np.repeat(np.arange(0, n_docs * self.num_perm, self.num_perm, dtype=np.int64), counts)
            self._lower_bins(out, rows[:len(windows)], windows, _crossing_windows(offsets, width, len(windows)),
                             uniform=True)
        short, whole = _short_documents(token_hashes, offsets, width, finalise=False)
        if len(short):
            self._lower_bins(out, short * self.num_perm, whole, uniform=True)
        sizes = np.where(counts >= width, counts - width + 1, np.minimum(counts, 1))
        return out, sizes.tolist()

    def _lower_bins(self, out: np.ndarray, rows: np.ndarray, shingle_hashes: np.ndarray,
                    skip: np.ndarray | None = None, uniform: bool = False) -> None:
        """Lower each shingle's bin in out to its value; rows[i] is the flat index of shingle i's
        document row (updated in place), skip the shingles that do not count. uniform: the hashes
        are already uniform in every bit (window polynomials of finalised token hashes), so the
        salt alone permutes them; any other hashes (ids, counters) are finalised with the salt."""
        h = shingle_hashes ^ self._salt
        if not uniform:
            _fmix64(h)
        # Multiply-shift range reduction of the high 32 bits: any number of bins, no modulo bias.
        # For a power of two that is just the top bits.
        if self.num_perm & (self.num_perm - 1):
            bins = h >> np.uint64(32)
            bins *= np.uint64(self.num_perm)
            bins >>= np.uint64(32)
        else:
            bins = h >> np.uint64(64 - (int(self.num_perm).bit_length() - 1))
        rows += bins.view(np.int64)  # below num_perm: the view is the value
        values = h.astype(np.uint32)  # the cast keeps the low 32 bits
        if skip is not None:
            values[skip] = _EMPTY_BIN
        np.minimum.at(out.reshape(-1), rows, values)

    def add_sketches(self, task_ids: Sequence[str], sketches: np.ndarray, sizes: Sequence[int]) -> None:
        """Add a batch of sketched tasks (a task with no shingles is not evidence of anything)."""
        keep = [i for i, size in enumerate(sizes) if size > 0]
        if not keep:
            return
        self._ids += [task_ids[i] for i in keep]
        self._pending.append(sketches[keep])  # joined once when needed, not copied per batch
        self._links = None

    @property
    def _store(self) -> np.ndarray:
        """Sketch of task i in row i."""
        if self._pending:
            self._stored = np.concatenate([self._stored, *self._pending])
            self._pending = []
        return self._stored

    def add(self, task_id: str, shingle_hashes: np.ndarray) -> None:
        """Sketch and add one task."""
        shingle_hashes = np.asarray(shingle_hashes, dtype=np.uint64)
        bounds = np.array([0, len(shingle_hashes)])
        self.add_sketches([task_id], self.sketches(shingle_hashes, bounds), [len(shingle_hashes)])

    def _candidates(self) -> np.ndarray:
        """(earlier, later) task index pairs that share a band bucket with the bucket's first or
        previous member; unique rows, sorted."""
        n, rows = len(self._ids), self.BAND_ROWS
        n_bands = self.num_perm // rows
        if n < 2:
            return np.empty((0, 2), dtype=np.int64)
        cells = self._store[:, :n_bands * rows].reshape(n, n_bands, rows).astype(np.uint64)
        keys = cells[:, :, 0].copy()
        for k in range(1, rows):
            keys *= self._BAND_MUL
            keys += cells[:, :, k]
        # One row per band, each sorted on its own; stable, so a bucket lists its tasks in order.
        keys = np.ascontiguousarray(keys.T)
        order = np.argsort(keys, axis=1, kind="stable")
        sorted_keys = np.take_along_axis(keys, order, axis=1)
        repeat = np.zeros((n_bands, n), dtype=bool)
        np.equal(sorted_keys[:, 1:], sorted_keys[:, :-1], out=repeat[:, 1:])
        # Where each task's bucket begins in its band's order: the last bucket start at or before it.
        first = np.where(repeat, 0, np.arange(n))
        np.maximum.accumulate(first, axis=1, out=first)
        band, at = np.nonzero(repeat)
        later = order[band, at]
        earlier = np.concatenate([order[band, at - 1], order[band, first[band, at]]])
        # Unique rows via one int64 key per pair, sorted and deduplicated (np.unique hashes first:
        # slower here; a row-wise unique sorts void records: slower still).
        key = earlier * n + np.concatenate([later, later])
        key = np.sort(key.astype(np.uint32) if n * n <= 1 << 32 else key)  # 32-bit keys sort faster
        keep = np.ones(len(key), dtype=bool)
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep].astype(np.int64)
        return np.stack([key // n, key % n], axis=1)

    @property
    def pairs(self) -> list[tuple[str, str, float]]:
        """Confirmed links (earlier task, later task, Jaccard estimate), sorted: what the clusters
        are made of (at most two per task and band), not every similar pair."""
        if self._links is None:
            links = []
            cand = self._candidates()
            store = self._store
            # A pair at the threshold agrees in at least that share of its bins, and then so do the
            # bins' low bytes: one byte per bin rules out most candidates at a quarter of the cost.
            low = store.astype(np.uint8)
            need = self.threshold * self.num_perm - 1e-9
            for lo in range(0, len(cand), 65536):
                chunk = cand[lo:lo + 65536]
                chunk = chunk[_row_counts(low[chunk[:, 0]] == low[chunk[:, 1]]) >= need]
                est = self.estimates_pairwise(store[chunk[:, 0]], store[chunk[:, 1]])
                for (a, b), e in zip(chunk[est >= self.threshold].tolist(), est[est >= self.threshold].tolist()):
                    links.append((self._ids[a], self._ids[b], e))
            self._links = sorted(links)
        return self._links

    @staticmethod
    def estimates_pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Row-wise Jaccard estimates of two stacks of sketches."""
        # Bins empty in both sketches are not evidence: they count neither as used nor as agreeing.
        same = a == b
        both_empty = np.count_nonzero(same & (a == _EMPTY_BIN), axis=1)
        n = a.shape[1] - both_empty
        agree = np.count_nonzero(same, axis=1) - both_empty
        return np.where(n > 0, agree / np.maximum(n, 1), 0.0)

    def estimate(self, a: np.ndarray, b: np.ndarray) -> float:
        """Jaccard estimate of two sketches."""
        return float(self.estimates_pairwise(a[None, :], b[None, :])[0])

    def duplicate_of(self) -> dict[str, str]:
        """Task id -> the kept task of its cluster (the smallest id), for every non-kept member."""
        parent: dict[str, str] = {}

        def root(x: str) -> str:
            while parent.get(x, x) != x:
                parent[x] = parent.get(parent[x], parent[x])
                x = parent[x]
            return x

        for a, b, _ in self.pairs:
            ra, rb = root(a), root(b)
            if ra != rb:
                lo, hi = sorted((ra, rb))
                parent[hi] = lo
        return {t: root(t) for t in sorted(parent) if root(t) != t}

    def clusters(self) -> list[dict]:
        """Every cluster of two or more tasks: the kept task (smallest id), the others, the size."""
        members: dict[str, list[str]] = {}
        for t, kept in self.duplicate_of().items():
            members.setdefault(kept, []).append(t)
        return [{"kept": k, "duplicates": sorted(v), "size": len(v) + 1} for k, v in sorted(members.items())]


def _row_counts(flags: np.ndarray) -> np.ndarray:
    """True values per row of a 2-d bool array."""
    width = flags.shape[1]
    if width % 8 or width > 255 or not flags.flags.c_contiguous:
        return np.count_nonzero(flags, axis=1)
    # Eight bool bytes per uint64 word: summing the words adds each byte lane without carries (a
    # lane gets at most width / 8), and one multiply adds the lanes into the top byte (width < 256).
    lanes = flags.view(np.uint64).sum(axis=1)
    return (lanes * np.uint64(0x0101010101010101)) >> np.uint64(56)


# ----------------------------------------------------------------------------- the stage


def _batches(docs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    if isinstance(docs, list):  # slices: no per-document step through an iterator
        for lo in range(0, len(docs), size):
            yield docs[lo:lo + size]
        return
    it = iter(docs)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _shared_windows(shared: list[tuple], offsets: np.ndarray, widths: list[int],
                    n_refs: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(document, reference, distinct shared n-grams, first shared window's start, its length) for
    every document and reference of a batch that share a window, from scan_documents' probes: per
    window length (in `widths` order), the shared hashes, the reference of each and the window
    starts. The first window is the earliest of the first window length that has one, the order
    in which the windows are probed. Array operations: a planted copy shares hundreds of windows."""
    if not shared:
        return
    hashes = np.concatenate([h for h, _, _, _, _ in shared])
    refs = np.concatenate([r for _, r, _, _, _ in shared])
    starts = np.concatenate([np.repeat(p, c) for _, _, c, p, _ in shared])
    ranks = np.concatenate([np.full(len(h), rank) for h, _, _, _, rank in shared])
    group = (np.searchsorted(offsets, starts, side="right") - 1) * n_refs + refs
    order = np.lexsort((starts, ranks, group))
    group, hashes, starts, ranks = group[order], hashes[order], starts[order], ranks[order]
    new = np.ones(len(group), dtype=bool)
    np.not_equal(group[1:], group[:-1], out=new[1:])
    firsts = np.flatnonzero(new)
    # Distinct hashes per group: sorted by (group, hash), count where either changes.
    by_hash = np.lexsort((hashes, group))
    g, h = group[by_hash], hashes[by_hash]
    distinct = np.ones(len(g), dtype=bool)
    distinct[1:] = (g[1:] != g[:-1]) | (h[1:] != h[:-1])
    counts = np.bincount(np.cumsum(new)[by_hash][distinct] - 1, minlength=len(firsts))
    for key, count, first, rank in zip(group[firsts].tolist(), counts.tolist(), starts[firsts].tolist(),
                                       ranks[firsts].tolist()):
        yield key // n_refs, key % n_refs, count, first, widths[rank]


_HEAP_KEPT = False


def _keep_freed_memory() -> None:
    """Ask glibc to keep freed memory in the heap (up to 64 MiB) instead of handing it back to the
    kernel: a batch allocates and frees about 10 MiB of arrays, and with the default thresholds
    glibc trims the heap after each batch, so that the next one faults every page back in (about
    a tenth of the stage's CPU time). Once per process; nothing where there is no mallopt (not
    glibc). The thresholds stay for the process: a few tens of MiB kept, never more than 64."""
    global _HEAP_KEPT
    if _HEAP_KEPT:
        return
    _HEAP_KEPT = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks below 32 MiB come from the heap
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: the heap's free top is kept up to 64 MiB


def scan_documents(docs: Iterable[tuple[str, str]], index: ReferenceIndex, min_shared: int = 1,
                   near_dups: NearDuplicateFinder | None = None, shingle_size: int = DEFAULT_SHINGLE,
                   batch_size: int = 128) -> tuple[list[dict], list[str]]:
    """Contamination hits of (task id, text) documents against index, feeding near_dups on the way.

    Tokenises and hashes each document once for both checks. Returns (hits sorted by task id then
    reference id, task ids in the order seen).
    """
    _keep_freed_memory()
    n = index.n
    hits: list[dict] = []
    seen_ids: list[str] = []
    for batch in _batches(docs, batch_size):
        ids = [tid for tid, _ in batch]
        seen_ids += ids
        tokens = _tokenize([text for _, text in batch])
        flat, offsets = tokens.hashes, tokens.offsets

        blocks: dict = {}
        widths = [n, *index.short_lengths]
        kgrams = _window_hashes(flat, PREFILTER_K, blocks, finalise=False) if min(widths) >= PREFILTER_K else None
        in_refs = index.kgram_candidates(kgrams) if kgrams is not None else None
        shared = []
        for rank, width in enumerate(widths):
            if in_refs is not None:
                h, p = _prefiltered_windows(flat, offsets, width, blocks, in_refs, PREFILTER_K)
            else:
                h, p = _batch_windows(flat, offsets, width, blocks)
            found, slot = index.probe(h)
            if len(found):
                shared.append((*index.references_of(h[found], slot), p[found], rank))
        for dv, r, count, first, width in _shared_windows(shared, offsets, widths, len(index.refs)):
            if count < min_shared:
                continue
            end = min(first + width, int(offsets[dv + 1]))
            ref = index.refs[r]
            hits.append({
                "task_id": ids[dv], "ref_id": ref.ref_id, "source": ref.source,
                "shared_ngrams": count,
                "example_ngram": tokens.words(first, end),
                "example_token_offset": first - int(offsets[dv]),
            })

        if near_dups is not None:
            windows = kgrams if kgrams is not None and shingle_size == PREFILTER_K else \
                _window_hashes(flat, shingle_size, blocks, finalise=False)
            near_dups.add_sketches(ids, *near_dups.window_sketches(windows, offsets, shingle_size, flat))
    hits.sort(key=lambda x: (x["task_id"], x["ref_id"]))
    return hits, seen_ids


def decontaminate_documents(docs: Iterable[tuple[str, str]], references: Sequence[RefDoc] | ReferenceIndex,
                            n: int = DEFAULT_N, policy: str = "drop", near_dup_threshold: float = 0.8,
                            min_shared: int = 1, **options) -> dict:
    """The decontamination report for (task id, document text) pairs; see decontaminate()."""
    docs = sorted(docs, key=lambda doc: doc[0])
    counts = Counter(tid for tid, _ in docs)
    dupes = sorted(t for t, c in counts.items() if c > 1)
    if dupes:
        raise TermforgeError(f"duplicate task ids in the corpus: {dupes[:10]}")
    return _report(docs, references, n, policy, near_dup_threshold, min_shared, **options)


def decontaminate(task_dirs: Sequence[str | Path], references: Sequence[RefDoc] | ReferenceIndex,
                  n: int = DEFAULT_N, policy: str = "drop", near_dup_threshold: float = 0.8,
                  min_shared: int = 1, **options) -> dict:
    """Check task directories against reference sets and against each other; return the report.

    Report (JSON-able, deterministic): ``contamination`` (per task and reference: the number of
    distinct shared n-grams, and the words and token offset of the first shared n-gram in the
    task document), ``near_duplicate_clusters`` (kept task, its duplicates, size),
    ``near_duplicates`` (each non-kept cluster member and the kept task of its cluster: the
    smallest id), ``flagged`` (task id and reasons), ``kept`` and ``dropped`` (policy "flag"
    drops nothing), ``summary`` counts and the ``params`` used. Extra options: near_dups (False
    skips the near-duplicate pass), near_dup_policy, num_perm, shingle_size, minhash_seed,
    batch_size, workers (processes that read and scan chunks of tasks; same report). Task ids
    come from each task.json; decontaminate_tasks takes them from the caller.
    """
    pairs = []
    for d in map(Path, task_dirs):
        if not d.is_dir():
            raise TermforgeError(f"task directory {d} does not exist")
        pairs.append((task_id_of(d), d))
    return decontaminate_tasks(pairs, references, n, policy, near_dup_threshold, min_shared, **options)


def decontaminate_tasks(tasks: Sequence[tuple[str, str | Path]], references: Sequence[RefDoc] | ReferenceIndex,
                        n: int = DEFAULT_N, policy: str = "drop", near_dup_threshold: float = 0.8,
                        min_shared: int = 1, **options) -> dict:
    """decontaminate() for (task id, task directory) pairs the caller already knows (the shard
    manifests list them): every file of a task is read exactly once. Option documents (task id ->
    document bytes, from the shard documents files: manifest_tasks) spares reading those tasks'
    directories; the report is the same."""
    by_id: dict[str, str | Path] = dict(tasks)
    if len(by_id) < len(tasks):  # find the first repeated id to name it
        seen: dict[str, str | Path] = {}
        for tid, d in tasks:
            if tid in seen:
                raise TermforgeError(f"task id {tid!r} appears twice: {seen[tid]} and {d}")
            seen[tid] = d
    workers = int(options.pop("workers", 1) or 1)
    documents = options.pop("documents", None) or {}
    if workers > 1 and len(by_id) > WORKER_CHUNK:
        ordered = [(tid, os.fspath(by_id[tid]), documents.get(tid)) for tid in sorted(by_id)]
        return _report(_ParallelScan(ordered, workers), references, n, policy, near_dup_threshold, min_shared,
                       **options)
    ids = sorted(by_id)
    if all(tid in documents for tid in ids):  # every text already in memory (the documents files)
        docs = [(tid, documents[tid]) for tid in ids]
    else:
        # A generator: texts are read one batch at a time, so a large corpus never sits in memory whole.
        docs = ((tid, _document(by_id[tid], documents.get(tid))) for tid in ids)
    return _report(docs, references, n, policy, near_dup_threshold, min_shared, **options)


def _document(task_dir: str | Path, known: bytes | None) -> bytes:
    return task_document_bytes(task_dir) if known is None else known


WORKER_CHUNK = 512
_WORKER_STATE: dict = {}


def _worker_init(index: "ReferenceIndex", min_shared: int, near: tuple | None, shingle_size: int,
                 batch_size: int) -> None:
    _WORKER_STATE.update(index=index, min_shared=min_shared, near=near, shingle_size=shingle_size,
                         batch_size=batch_size)


def _worker_scan(chunk: list[tuple[str, str, bytes | None]]) -> tuple[list[dict], list[str], list[str], np.ndarray]:
    """Read, tokenise, probe and sketch one chunk of tasks (in a worker process)."""
    st = _WORKER_STATE
    finder = NearDuplicateFinder(*st["near"]) if st["near"] else None
    docs = ((tid, _document(d, known)) for tid, d, known in chunk)
    hits, seen = scan_documents(docs, st["index"], st["min_shared"], finder, st["shingle_size"], st["batch_size"])
    if finder is None:
        return hits, seen, [], np.empty((0, 0), dtype=np.uint32)
    return hits, seen, finder._ids, finder._store


class _ParallelScan:
    """Tasks to scan in worker processes (the stage's threads): contiguous chunks in id order, so
    hits, task order and near-duplicate sketches come back exactly as one process makes them."""

    def __init__(self, tasks: list[tuple[str, str, bytes | None]], workers: int):
        self.tasks = tasks
        self.workers = workers

    def scan(self, index: "ReferenceIndex", min_shared: int, near: "NearDuplicateFinder | None", shingle_size: int,
             batch_size: int) -> tuple[list[dict], list[str]]:
        from concurrent.futures import ProcessPoolExecutor

        chunks = [self.tasks[i:i + WORKER_CHUNK] for i in range(0, len(self.tasks), WORKER_CHUNK)]
        near_args = (near.threshold, near.num_perm, near.seed) if near is not None else None
        hits: list[dict] = []
        seen: list[str] = []
        with ProcessPoolExecutor(self.workers, initializer=_worker_init,
                                 initargs=(index, min_shared, near_args, shingle_size, batch_size)) as pool:
            for chunk_hits, chunk_seen, ids, sketches in pool.map(_worker_scan, chunks):
                hits += chunk_hits
                seen += chunk_seen
                if near is not None and ids:
                    near.add_sketches(ids, sketches, [1] * len(ids))
        hits.sort(key=lambda x: (x["task_id"], x["ref_id"]))
        return hits, seen


def _report(sorted_docs: Iterable[tuple[str, str]], references: Sequence[RefDoc] | ReferenceIndex, n: int,
            policy: str, near_dup_threshold: float, min_shared: int, num_perm: int = DEFAULT_NUM_PERM,
            near_dup_policy: str | None = None, near_dups: bool = True,
            shingle_size: int = DEFAULT_SHINGLE, minhash_seed: int = DEFAULT_MINHASH_SEED,
            batch_size: int = 128) -> dict:
    if policy not in POLICIES:
        raise ConfigError(f"decontaminate policy must be one of {list(POLICIES)}, got {policy!r}")
    if min_shared < 1:
        raise ConfigError(f"decontaminate min_shared must be at least 1, got {min_shared}")
    if shingle_size < 1:
        raise ConfigError(f"decontaminate shingle_size must be at least 1, got {shingle_size}")
    if isinstance(references, ReferenceIndex):
        index = references
        if index.n != n:
            raise ConfigError(f"decontaminate n={n} but the reference index was built with n={index.n}")
    else:
        index = ReferenceIndex(references, n)

    near = NearDuplicateFinder(near_dup_threshold, num_perm, minhash_seed) if near_dups else None
    if isinstance(sorted_docs, _ParallelScan):
        hits, task_ids = sorted_docs.scan(index, min_shared, near, shingle_size, batch_size)
    else:
        hits, task_ids = scan_documents(sorted_docs, index, min_shared, near, shingle_size, batch_size)
    dup_of = near.duplicate_of() if near else {}
    reasons: dict[str, list[str]] = {}
    for hit in hits:
        if "contamination" not in reasons.setdefault(hit["task_id"], []):
            reasons[hit["task_id"]].append("contamination")
    for tid in dup_of:
        reasons.setdefault(tid, []).append("near_duplicate")
    flagged = sorted(reasons)
    # Near-duplicates may follow their own policy: procedural families share their templates by
    # design, so a large procedural corpus usually flags rather than drops them.
    near_policy = policy if near_dup_policy is None else near_dup_policy
    if near_policy not in POLICIES:
        raise ConfigError(f"decontaminate near_dup_policy must be one of {list(POLICIES)}, got {near_policy!r}")
    dropped = sorted(t for t in flagged
                     if (policy == "drop" and "contamination" in reasons[t])
                     or (near_policy == "drop" and "near_duplicate" in reasons[t]))
    dropped_set = set(dropped)
    kept = sorted(t for t in task_ids if t not in dropped_set)
    sources = Counter(ref.source for ref in index.refs)
    return {
        "params": {"n": n, "policy": policy, "near_dup_policy": near_policy, "min_shared": min_shared,
                   "near_dups": bool(near_dups), "near_dup_threshold": near_dup_threshold, "num_perm": num_perm,
                   "shingle_size": shingle_size, "minhash_seed": minhash_seed},
        "references": {"documents": len(index.refs), "distinct_ngrams": len(index),
                       "sources": dict(sorted(sources.items()))},
        "contamination": hits,
        "near_duplicate_clusters": near.clusters() if near else [],
        "near_duplicates": [{"task_id": t, "kept": k} for t, k in sorted(dup_of.items())],
        "flagged": [{"task_id": t, "reasons": reasons[t]} for t in flagged],
        "kept": kept,
        "dropped": dropped,
        "summary": {
            "tasks": len(task_ids), "references": len(index.refs),
            "contaminated_tasks": len({h["task_id"] for h in hits}), "contamination_hits": len(hits),
            "contaminated_tasks_by_source": dict(sorted(Counter(
                source for _, source in {(h["task_id"], h["source"]) for h in hits}).items())),
            "near_duplicate_tasks": len(dup_of),
            "near_duplicate_clusters": len({k for k in dup_of.values()}), "flagged": len(flagged),
            "kept": len(kept), "dropped": len(dropped),
        },
    }


__all__ = [
    "RefDoc", "ReferenceIndex", "NearDuplicateFinder", "word_tokens", "ngram_hashes",
    "load_harbor_references", "load_hf_references", "load_jsonl_references",
    "task_document", "task_document_bytes", "task_document_from_files", "task_id_of", "documents_path",
    "write_task_documents", "read_task_documents", "manifest_tasks", "scan_documents", "decontaminate_documents",
    "decontaminate", "decontaminate_tasks",
]
