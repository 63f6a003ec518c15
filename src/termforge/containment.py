"""Containment: untrusted names and trees never reach outside the directory they belong to.

Task ids come from files (manifests, task.json, a Harbor dataset, whatever a generator model
wrote) and are joined onto the tasks, images and output directories; task directories come from
third parties and are copied into images and exports. One rule, applied here and nowhere else:

- a task id is a single safe path component: letters, digits, `.`, `_`, `-`, starting with a
  letter or digit (so never `.`, `..`, empty, or holding `/`, a newline or a NUL), at most
  TASK_ID_MAX characters (room for the staging and log names built from it);
- a path built under a base directory stays inside it: no `..` or absolute part, and no symlink
  on the way that leads out of the base (symlinks are resolved, never followed out);
- a task directory holds directories and regular files only, plus symlinks that resolve to a
  regular file inside the same task directory. A symlink that leads out (or nowhere, or in a
  loop, or to a directory) and a special file (device, FIFO, socket) are refused with the
  entry named;
- copies out of a task directory (exports, imports) write regular files only.

The checks run where a stage takes task directories in: schemas (the files that name task
directories: shard and corpus manifests, solve records), import-harbor (the source dataset),
generate (task directories kept from an earlier run) and the export's copy. Every refusal is an
InputError naming the offending file.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from pathlib import Path

from termforge.errors import InputError, show_path, show_value

TASK_ID_MAX = 200
# As a JSON Schema pattern (ECMA 262 and Python alike): the lookahead ends the match at the very
# end, where `$` would also accept a trailing newline.
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,%d}(?![\s\S])" % (TASK_ID_MAX - 1)
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,%d}" % (TASK_ID_MAX - 1))
TASK_ID_RULE = (f"a task id must be one safe path component: letters, digits, '.', '_' and '-', starting with a "
                f"letter or digit, at most {TASK_ID_MAX} characters")


def is_task_id(value: object) -> bool:
    return isinstance(value, str) and _TASK_ID.fullmatch(value) is not None


def task_id_problem(value: object) -> str:
    """The words for an unsafe task id (what schemas and check_task_id say)."""
    return f"task id {show_value(value)} is not a single safe path component ({TASK_ID_RULE})"


def check_task_id(value: object, where: str | os.PathLike) -> str:
    """value when it is a safe task id; InputError naming `where` (the file that gave it) otherwise."""
    if not is_task_id(value):
        raise InputError(where, task_id_problem(value))
    return value  # type: ignore[return-value]


def _inside(real: str, real_base: str) -> bool:
    return real == real_base or real.startswith(real_base.rstrip("/") + "/")


def contained(base: str | os.PathLike, *parts: str, where: str | os.PathLike | None = None) -> Path:
    """base/parts[/...], refused (InputError naming `where`, else the path) when it would lie
    outside base: an absolute or `..` part, or an existing symlink on the way that resolves out
    of base. Missing parts are fine (an output about to be written)."""
    base = Path(base)
    rel = Path(*parts) if parts else Path()
    path = base / rel
    if rel.is_absolute() or ".." in rel.parts or any("\0" in p for p in parts):
        raise InputError(where or path, f"{show_path(rel)} would lie outside {show_path(base)}")
    real_base = os.path.realpath(base)
    probe = base
    for part in rel.parts:
        probe = probe / part
        if os.path.islink(probe):
            real = os.path.realpath(probe)
            if not _inside(real, real_base):
                raise InputError(where or probe, f"{show_path(probe)} is a symlink to {show_path(os.readlink(probe))}, "
                                                 f"outside {show_path(base)}")
    return path


def _kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    return "a special file"


def _symlink_problem(link: str, real_root: str) -> str | None:
    """Why the symlink at `link` may not stay in a task directory (None when it may)."""
    target = os.readlink(link)
    try:
        st = os.stat(link)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"is a symlink loop (to {show_path(target)})"
        return f"is a dangling symlink (to {show_path(target)}, which does not exist)"
    if not _inside(os.path.realpath(link), real_root):
        return f"is a symlink to {show_path(target)}, outside the task directory"
    if stat.S_ISDIR(st.st_mode):
        return f"is a symlink to a directory ({show_path(target)}); a task directory may link only to its own files"
    if not stat.S_ISREG(st.st_mode):
        return f"is a symlink to {_kind_of(st.st_mode)} ({show_path(target)})"
    return None


def tree_problem(root: str | os.PathLike, real_root: str | None = None) -> tuple[str, str] | None:
    """(path, problem) of the first entry under root (sorted walk) that may not be in a task
    directory; None when every entry is a directory, a regular file or a symlink to a regular
    file inside root. Uses the directory entries' own types: no stat per regular file.
    real_root: root with its symlinks resolved, when the caller knows it."""
    root = os.fspath(root)
    real_root = real_root or os.path.realpath(root)
    # Unsorted first (the usual case: nothing to report); a problem is then looked for again in
    # sorted order, so the same tree always names the same entry.
    if _walk(root, real_root, sort=False) is None:
        return None
    return _walk(root, real_root, sort=True)


def _walk(root: str, real_root: str, sort: bool) -> tuple[str, str] | None:
    stack = [(real_root, root)]
    while stack:
        real_dir, shown_dir = stack.pop()
        try:
            with os.scandir(real_dir) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True) if sort else list(it)
        except OSError as exc:
            from termforge.errors import os_error_problem

            return shown_dir, os_error_problem(exc)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append((entry.path, f"{shown_dir}/{entry.name}"))
            elif entry.is_file(follow_symlinks=False):
                continue
            elif entry.is_symlink():
                problem = _symlink_problem(entry.path, real_root)
                if problem:
                    return f"{shown_dir}/{entry.name}", problem
            else:
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    mode = 0
                return (f"{shown_dir}/{entry.name}",
                        f"is {_kind_of(mode)}; a task directory holds regular files and directories only")
    return None


def task_dir_entry_problem(base: str | os.PathLike, task_id: str,
                           real_base: str | None = None) -> tuple[str, str] | None:
    """(path, problem) when base/task_id is a symlink leading out of base, else tree_problem of
    it (None when all is well). real_base: base with its symlinks resolved, when the caller
    checks many tasks of one base (a realpath costs a stat per path component)."""
    base = os.fspath(base)
    real_base = real_base or os.path.realpath(base)
    path = f"{base}/{task_id}"
    real = f"{real_base}/{task_id}"
    if os.path.islink(real):
        real = os.path.realpath(real)
        if not _inside(real, real_base):
            return path, f"is a symlink to {show_path(os.readlink(path))}, outside {show_path(base)}"
    return tree_problem(path, real)


def check_tree(root: str | os.PathLike) -> None:
    """tree_problem as an InputError naming the offending entry."""
    found = tree_problem(root)
    if found:
        raise InputError(found[0], found[1])


def check_task_dir(base: str | os.PathLike, task_id: str) -> Path:
    """base/task_id, checked: a safe id, not a symlink out of base, a tree of regular files."""
    check_task_id(task_id, base)
    found = task_dir_entry_problem(base, task_id)
    if found:
        raise InputError(found[0], found[1])
    return Path(base) / task_id


def copy_regular_tree(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy src to dst (which must not exist) writing regular files and directories only: a
    symlink inside src that resolves to a regular file inside src becomes a copy of that file;
    anything else (a symlink out, a special file) is an InputError naming it, checked before
    anything is copied. File modes are kept; times and owners are not."""
    check_tree(src)
    src, dst = Path(src), Path(dst)
    os.makedirs(dst)
    real_root = os.path.realpath(src)
    for dirpath, dirnames, filenames in os.walk(src):  # os.walk does not descend into symlinked dirs
        rel = os.path.relpath(dirpath, src)
        out = dst if rel == "." else dst / rel
        for d in sorted(dirnames):
            os.makedirs(out / d, exist_ok=True)
        for f in sorted(filenames):
            source = os.path.join(dirpath, f)
            real = os.path.realpath(source)
            if not _inside(real, real_root):  # changed since check_tree: refuse, never follow out
                raise InputError(source, "is a symlink outside the task directory")
            shutil.copyfile(real, out / f, follow_symlinks=False)
            os.chmod(out / f, os.stat(real).st_mode & 0o777)


def read_regular(path: str | os.PathLike, root: str | os.PathLike) -> bytes:
    """The bytes of a regular file inside root (a symlink is followed only to a regular file
    inside root); InputError otherwise."""
    path = Path(path)
    real = os.path.realpath(path)
    if not _inside(real, os.path.realpath(root)):
        raise InputError(path, f"resolves to {show_path(real)}, outside {show_path(root)}")
    try:
        st = os.stat(real)
    except OSError as exc:
        from termforge.errors import os_error_problem

        raise InputError(path, os_error_problem(exc)) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, f"is {_kind_of(st.st_mode) if not stat.S_ISDIR(st.st_mode) else 'a directory'}, "
                               "not a regular file")
    with open(real, "rb") as fh:
        return fh.read()


__all__ = ["TASK_ID_PATTERN", "TASK_ID_MAX", "is_task_id", "check_task_id", "task_id_problem", "contained",
           "tree_problem", "check_tree", "check_task_dir", "task_dir_entry_problem", "copy_regular_tree",
           "read_regular"]
