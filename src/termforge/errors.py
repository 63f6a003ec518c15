"""Errors a user can act on: the CLI prints their message alone, without a traceback."""

from __future__ import annotations

import os
import re


class TermforgeError(Exception):
    """Bad input or an unrecoverable stage failure, with a message naming the culprit."""


class ConfigError(TermforgeError):
    """A config value is wrong; the message names the key path and what was expected."""


# Which rule makes which file: (path pattern as written in rules/*.smk, rule). A file the
# workflow makes gets, in its error line, the command that rebuilds it. Patterns end a path
# (`…/results/…` in any working directory); `{x}` is one path component, and a pattern ending in
# `/` covers everything under it. tests/test_cli_bad_input.py keeps this table equal to the
# outputs the rules declare.
PRODUCERS: tuple[tuple[str, str], ...] = (
    ("results/axes/signatures.jsonl", "sample_axes"),
    ("results/axes/stats.json", "sample_axes"),
    ("results/tasks/manifests/{shard}.json", "generate"),
    ("results/tasks/{task}/", "generate"),
    ("results/data/math/train.jsonl", "make_math_set"),
    ("results/data/math/heldout.jsonl", "make_math_set"),
    ("results/images/manifests/{shard}.json", "build_images"),
    ("results/decontam/report.json", "decontaminate"),
    ("results/validate/{shard}.json", "validate"),
    ("results/review/{shard}.json", "review"),
    ("results/corpus/manifest.json", "corpus_manifest"),
    ("results/serve/{server}.json", "serve_policy"),
    ("results/solve/{shard}.json", "solve"),
    ("results/solve/trajectories/", "solve"),
    ("results/solve/reviews/{shard}.json", "review_traces"),
    ("results/solve/passk.json", "passk"),
    ("results/solve/passk.csv", "passk"),
    ("results/solve/sft.parquet", "passk"),
    ("results/hints/demos.parquet", "hints"),
    ("results/hints/coverage.json", "hints"),
    ("results/hints/uplift.json", "hint_uplift"),
    ("results/export/export.json", "export"),
    ("results/export/verifiers/export.json", "export_verifiers"),
    ("results/runs/{model}/train/summary.json", "train_opsd"),
    ("results/runs/{model}/eval/aime.json", "eval_aime"),
    ("results/runs/{model}/eval/tbench.json", "eval_tbench"),
    ("results/eval/results.csv", "eval_table"),
    ("results/eval/metrics.json", "eval_table"),
    ("results/report.html", "report"),
    ("results/report/", "report"),
)


def _pattern_regex(pattern: str) -> re.Pattern:
    out = ""
    for part in re.split(r"(\{\w+\})", pattern):
        out += r"[^/]+" if part.startswith("{") else re.escape(part)
    return re.compile(r"(?:^|/)" + out + (r".*$" if pattern.endswith("/") else r"/?$"))


_PRODUCER_RES = tuple((_pattern_regex(p), p, rule) for p, rule in PRODUCERS)


def producer_of(path: str | os.PathLike) -> tuple[str, str] | None:
    """(output pattern, rule) of the workflow rule that makes path, or None for a file it does not make."""
    text = os.fspath(path).replace(os.sep, "/")
    for regex, pattern, rule in _PRODUCER_RES:
        if regex.search(text):
            return pattern, rule
    return None


def rebuild_advice(path: str | os.PathLike) -> str:
    """How to rebuild a workflow file ('' for a file the workflow does not make).

    Deleting a declared output is the precise fix: Snakemake reruns the one job that makes it
    (and, by modification time, what reads it). A file inside a folder a rule fills as a side
    effect (a task directory, a trajectory) is no output Snakemake tracks, so there the rule
    must be forced (generate keeps the task directories that are still there)."""
    found = producer_of(path)
    if found is None:
        return ""
    pattern, rule = found
    if pattern.endswith("/"):
        what = "that task directory" if rule == "generate" else "it"
        return f"it is made by rule {rule}: delete {what} and run `snakemake --forcerun {rule}`"
    return f"it is made by rule {rule}: delete it and rerun snakemake (or run `snakemake --forcerun {rule}`)"


# -- one line, of bounded length ----------------------------------------------------------------
# A message names paths, keys and values that came from the user's files, so any of them may hold
# a newline or be megabytes long: each is shown through these, and main() passes the whole line
# through one_line() as a last guard.

VALUE_CHARS = 80    # a value is shown up to this many characters, then "... (N chars)"
PATH_CHARS = 240    # a path longer than this is cut in the middle
LINE_CHARS = 2000   # no message line is longer than this


def _escaped(text: str) -> str:
    """text with every non-printable character written as its Python escape."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def show_path(path: str | os.PathLike) -> str:
    """A path as it goes into a message: as is when it is plain, else quoted with escapes (a
    newline in a file name cannot break the line), and cut in the middle when very long."""
    text = os.fsdecode(os.fspath(path))
    shown = text if text.isprintable() and text.strip() == text and text else repr(text)
    if len(shown) > PATH_CHARS:
        half = PATH_CHARS // 2
        shown = f"{shown[:half]}...{shown[-half:]} ({len(text)} chars)"
    return shown


def show_key(key: object) -> str:
    """One component of a key path: as is when it is a plain name, else quoted."""
    text = str(key)
    if re.fullmatch(r"[A-Za-z0-9_@.:+-]{1,80}", text):
        return text
    return show_value(text)


def show_value(value: object, limit: int = VALUE_CHARS) -> str:
    """repr(value) on one line, shortened to about `limit` characters with the full length stated."""
    if isinstance(value, (str, bytes)):
        size, unit = len(value), "chars" if isinstance(value, str) else "bytes"
        text = repr(value[: limit + 1])
    else:
        text = repr(value)
        size, unit = len(text), "chars"
    text = _escaped(text)
    if len(text) > limit:
        return f"{text[:limit]}... ({size} {unit})"
    return text


def one_line(message: str, limit: int = LINE_CHARS) -> str:
    """message with control characters escaped and its length capped: always one terminal line."""
    text = _escaped(message)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class InputError(TermforgeError):
    """A stage input (file or directory) is missing, unreadable, corrupt or of the wrong shape.

    The message is `<path>: <problem>` plus, for a file the workflow makes, how to rebuild it;
    the CLI prefixes `termforge: error: <command>: `. One class for every reader, so every command
    (including ones added later) reports bad input the same way."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        self.advice = rebuild_advice(self.path)
        msg = f"{show_path(self.path)}: {problem}"
        if self.advice:
            msg += f"; {self.advice}"
        super().__init__(msg)


def is_no_space(exc: BaseException) -> bool:
    """A full disk or an exhausted quota: about the output being written, never about an input
    (shutil's copies put the *source* in the error's filename)."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes (for an unprivileged writer) on the file system that holds path or, where path
    does not exist yet, its nearest existing folder."""
    probe = os.path.abspath(os.fspath(path))
    while True:
        try:
            st = os.statvfs(probe)
            return st.f_bavail * st.f_frsize
        except OSError:
            if probe == os.path.dirname(probe):
                return None
            probe = os.path.dirname(probe)


class NoSpaceError(TermforgeError):
    """An output could not be written for lack of space. Names the output and how much more space
    the command needs: exactly, where the writer knew the size, else more than what it had written
    when the disk filled (a lower bound: its partial outputs are removed, so that much is free again)."""

    def __init__(self, output: str | os.PathLike, needed: int | None = None, exact: bool = False):
        self.output = os.fspath(output)
        self.needed, self.exact = needed, exact
        free = free_bytes(self.output)
        where = f"{_size(free)} free there" if free is not None else "its file system is full"
        if not needed:
            need = "free space there"
        elif exact:
            need = f"it needs {_size(needed)}: free at least {_size(max(needed - (free or 0), 1))} more"
        else:
            need = (f"the command needs more than {_size(needed)} there (what it had written when the disk "
                    "filled): free more than that")
        super().__init__(f"{show_path(self.output)}: no space left on the device ({where}); {need} and rerun "
                         f"(nothing half-written was left)")


def os_error_problem(exc: OSError) -> str:
    """What an OSError says about a path, in words (no errno numbers)."""
    import errno

    words = {errno.ENOENT: "does not exist", errno.EACCES: "is not readable (permission denied)",
             errno.EPERM: "is not readable (operation not permitted)", errno.EISDIR: "is a directory, not a file",
             errno.ENOTDIR: "is not a directory (or a parent of it is a file)",
             errno.ELOOP: "is a symlink loop (too many levels of symbolic links)",
             errno.ENAMETOOLONG: "has a name too long for the file system"}
    return words.get(exc.errno, exc.strerror or type(exc).__name__)
