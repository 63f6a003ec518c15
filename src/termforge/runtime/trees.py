"""Host-side work over directory trees a sandbox wrote: walks, size counts, digests, chown, copies
and removal that never recurse, never follow a symlink and never raise on what they find
(docs/grading.md, design point 8).

Everything under a session's /app, /home/user, /tmp or /logs was written by code termforge does
not trust (the agent, or task code at build time). Python's own tree helpers recurse (`os.walk`,
`shutil.rmtree`, `shutil.copytree`, `Path.rglob`): 1,200 nested directories raise RecursionError,
which `ignore_errors=True` does not catch, and path-based calls fail with ENAMETOOLONG once a path
passes PATH_MAX. So every operation here is iterative and relative to an open directory
descriptor (one descriptor per level, `openat` with O_NOFOLLOW), and bounded:

- `Bounds(depth, entries, seconds)`: a walk stops at the first bound it meets and says why
  (`TreeWalk.incomplete`); a walk never raises on the tree's content (unreadable directories,
  FIFOs, sockets, names at NAME_MAX, entries vanishing under it are all reasons, not exceptions).
  What a caller cannot finish is the *agent's* failure (a 0 with a reason and a finding, or a
  killed sandbox for the disk watcher), never an infrastructure error.
- `remove_tree` has no bound: a host work directory is always removed, however deep (directories
  past `REMOVE_FDS` levels are moved up to the top and removed from there, so it holds at most
  that many descriptors), and whatever modes the agent set (as root nothing stops it; as the
  owner, a directory it cannot enter is given its owner's rwx back first, through an O_PATH
  descriptor so a symlink is never followed).
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
# Descriptors remove_tree holds at once; deeper directories are hoisted to the top first.
REMOVE_FDS = 64
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Bounds:
    """How far a walk may go: levels below the root, entries seen, wall-clock seconds (None: no
    time bound, for results that must be deterministic, such as digests)."""

    depth: int = 128
    entries: int = 200_000
    seconds: float | None = 30.0


DEFAULT_BOUNDS = Bounds()


def _fd_headroom(needed: int) -> None:
    """Walks hold one descriptor per level: make sure the soft RLIMIT_NOFILE leaves room for
    several at once (raised toward the hard limit; sandboxes set their own limit explicitly)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed * 16 + 1024
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(hard, want)
        if new > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            except (ValueError, OSError):
                pass


class Entry:
    """One entry of a walk. `dir_fd` (its directory) is valid only until the walk moves on."""

    __slots__ = ("dir_fd", "name", "st", "depth", "_parents")

    def __init__(self, dir_fd: int, name: str, st: os.stat_result, depth: int, parents: list[str]):
        self.dir_fd, self.name, self.st, self.depth, self._parents = dir_fd, name, st, depth, parents

    @property
    def rel(self) -> str:
        """Path relative to the walk's root."""
        return "/".join([*self._parents, self.name])

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)


def unicode_text(text: str | bytes) -> str:
    """`text` as valid Unicode: bytes that are not UTF-8 (which Python holds as lone surrogates
    where it decoded a name) as backslash escapes (\\xff), everything else as it was."""
    if isinstance(text, str):
        try:
            text.encode()
            return text
        except UnicodeEncodeError:
            try:
                text = text.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a surrogate no decoding made (a JSON \ud800 escape)
                return text.encode("utf-8", "backslashreplace").decode()
    return text.decode("utf-8", "backslashreplace")


def printable(name: str | bytes) -> str:
    """A name as one line of text that can be recorded and shown anywhere (a finding, a problem,
    a process): unicode_text, with control characters (a newline that would forge a line) as
    backslash escapes too. Every name a sandbox can make is data."""
    text = unicode_text(name)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def describe_mode(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def _open_root(root: Path) -> tuple[int | None, str | None]:
    try:
        return os.open(root, DIR_FLAGS), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None, f"{root} is not a plain directory"
        return None, f"{root} cannot be opened: {exc.strerror}"


class TreeWalk:
    """Iterate every entry below `root` (pre-order, each directory's names sorted), lstat only,
    crossing no symlink and no filesystem boundary. After iteration `incomplete` is None when the
    whole tree was seen, else the first reason it was not; `entries` counts what was seen.
    A missing root is an empty tree."""

    def __init__(self, root: str | Path, bounds: Bounds = DEFAULT_BOUNDS):
        self.root = Path(root)
        self.bounds = bounds
        self.incomplete: str | None = None
        self.entries = 0
        self._prune = False

    def prune(self) -> None:
        """Called while at a directory entry: do not descend into it."""
        self._prune = True

    def _stop(self, reason: str) -> None:
        if self.incomplete is None:
            self.incomplete = reason

    def __iter__(self) -> Iterator[Entry]:
        b = self.bounds
        _fd_headroom(b.depth)
        deadline = None if b.seconds is None else time.monotonic() + b.seconds
        root_fd, why = _open_root(self.root)
        if root_fd is None:
            if why:
                self._stop(why)
            return
        root_dev = os.fstat(root_fd).st_dev
        # Stack of [fd, remaining names (reversed), name of this directory in its parent].
        stack: list[list] = []
        parents: list[str] = []
        try:
            names = self._list(root_fd, "")
            if names is None:
                return
            stack.append([root_fd, names, None])
            root_fd = None
            while stack:
                fd, names, _ = stack[-1]
                if not names:
                    stack.pop()
                    os.close(fd)
                    if parents:
                        parents.pop()
                    continue
                if self.entries >= b.entries:
                    self._stop(f"more than {b.entries} entries")
                    return
                if deadline is not None and self.entries % 256 == 0 and time.monotonic() > deadline:
                    self._stop(f"not walked within {b.seconds:g}s ({self.entries} entries seen)")
                    return
                name = names.pop()
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since it was listed
                self.entries += 1
                depth = len(stack)
                self._prune = False
                yield Entry(fd, name, st, depth, parents)
                if self._prune or not stat.S_ISDIR(st.st_mode) or st.st_dev != root_dev:
                    continue
                if depth >= b.depth:
                    self._stop(f"deeper than {b.depth} levels (at {printable('/'.join([*parents, name])[:200])})")
                    return
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        continue  # replaced by something else since the lstat
                    where = printable("/".join([*parents, name])[:200])
                    self._stop(f"directory {where} cannot be opened: {exc.strerror}")
                    continue
                sub = self._list(child, "/".join([*parents, name]))
                if sub is None:
                    os.close(child)
                    continue
                parents.append(name)
                stack.append([child, sub, name])
        finally:
            if root_fd is not None:
                os.close(root_fd)
            for item in stack:
                os.close(item[0])

    def _list(self, fd: int, rel: str) -> list[str] | None:
        """The names in a directory, sorted and reversed (popped from the end), or None (with a
        reason) when it cannot be read. Reading stops past the entry bound."""
        room = self.bounds.entries - self.entries + 1
        names: list[str] = []
        try:
            with os.scandir(fd) as it:
                for e in it:
                    names.append(e.name)
                    if len(names) > room:
                        break
        except OSError as exc:
            self._stop(f"directory {printable(rel) or '.'} cannot be read: {exc.strerror}")
            return None
        names.sort(reverse=True)
        return names


# -- consumers ------------------------------------------------------------------------------------

@dataclass
class Measure:
    bytes: int
    entries: int
    incomplete: str | None


def allocated(roots: list[Path], bounds: Bounds = DEFAULT_BOUNDS) -> Measure:
    """Disk blocks held under `roots` (sparse files count what they occupy, a file hard-linked
    many times once). `incomplete` says why the count may be short."""
    total, entries, seen, why = 0, 0, set(), None
    for root in roots:
        walk = TreeWalk(root, Bounds(bounds.depth, max(1, bounds.entries - entries), bounds.seconds))
        for e in walk:
            key = (e.st.st_dev, e.st.st_ino)
            if e.st.st_nlink > 1:
                if key in seen:
                    continue
                seen.add(key)
            total += e.st.st_blocks * 512
        entries += walk.entries
        why = why or walk.incomplete
        if why:
            break
    return Measure(total, entries, why)


def chown(root: Path, uid: int, gid: int | None = None, bounds: Bounds = DEFAULT_BOUNDS) -> str | None:
    """Give `root` and everything below it to uid (symlinks themselves, never their targets).
    Returns why it could not finish, or None."""
    gid = uid if gid is None else gid
    try:
        os.chown(root, uid, gid, follow_symlinks=False)
    except OSError as exc:
        return f"{root}: {exc.strerror}"
    walk = TreeWalk(root, bounds)
    for e in walk:
        try:
            os.chown(e.name, uid, gid, dir_fd=e.dir_fd, follow_symlinks=False)
        except OSError as exc:
            return f"{printable(e.rel[:200])}: {exc.strerror}"
    return walk.incomplete


def _sha256_at(dir_fd: int, name: str) -> str | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        h = hashlib.sha256()
        while chunk := os.read(fd, READ_CHUNK):
            h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def read_at(dir_fd: int, name: str, limit: int | None = None) -> bytes:
    """The bytes of regular file `name` in `dir_fd` (at most `limit`), symlinks refused; b"" when
    it cannot be read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        chunks, size = [], 0
        while chunk := os.read(fd, READ_CHUNK if limit is None else min(READ_CHUNK, limit - size)):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                break
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


def digest_entries(root: Path, bounds: Bounds = Bounds(seconds=None)) -> list[list]:
    """[rel, mode, sha256] per regular file, [rel, "link", target] per symlink, [rel, "dir"] per
    directory, in path order; a walk that could not finish adds ["!incomplete", reason], so the
    digest is still a function of the tree (the bounds are on depth and entries, not time)."""
    out: list[list] = []
    walk = TreeWalk(root, bounds)
    for e in walk:
        mode = e.st.st_mode
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(e.name, dir_fd=e.dir_fd)
            except OSError:
                target = ""
            out.append([e.rel, "link", target])
        elif stat.S_ISREG(mode):
            out.append([e.rel, oct(mode & 0o777), _sha256_at(e.dir_fd, e.name) or "unreadable"])
        elif stat.S_ISDIR(mode):
            out.append([e.rel, "dir"])
    if walk.incomplete:
        out.append(["!incomplete", walk.incomplete])
    return out


def copy_tree(src: Path, dst: Path, bounds: Bounds = DEFAULT_BOUNDS,
              skip: Callable[[Entry], bool] | None = None) -> list[str]:
    """Copy the tree at `src` into the (new or existing) directory `dst`: directories, regular
    files and symlinks (as symlinks), with permission bits and modification times (as
    shutil.copytree with copy2 and symlinks=True). Never follows a symlink on either side (a
    file or symlink in `dst` where a directory must go is replaced). FIFOs, sockets and devices
    are not copied; entries `skip` names are left out. Returns the problems (empty when
    everything was copied)."""
    problems: list[str] = []
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    # One open directory per level of dst, with the mode and times to give it once it is full.
    out_stack: list[tuple[int, os.stat_result | None]] = [(os.open(dst, DIR_FLAGS), None)]
    walk = TreeWalk(src, bounds)

    def close_level() -> None:
        fd, st = out_stack.pop()
        try:
            if st is not None:
                os.chmod(fd, stat.S_IMODE(st.st_mode))
                os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError as exc:
            problems.append(f"setting a directory's mode: {exc.strerror}")
        finally:
            os.close(fd)

    try:
        for e in walk:
            while len(out_stack) > e.depth:
                close_level()
            parent = out_stack[-1][0]
            mode = e.st.st_mode
            if skip is not None and skip(e):
                walk.prune()
                continue
            try:
                if stat.S_ISDIR(mode):
                    out_stack.append((_make_dir(parent, e.name), e.st))
                elif stat.S_ISLNK(mode):
                    target = os.readlink(e.name, dir_fd=e.dir_fd)
                    _clear_for_file(parent, e.name)
                    os.symlink(target, e.name, dir_fd=parent)
                    os.utime(e.name, ns=(e.st.st_atime_ns, e.st.st_mtime_ns), dir_fd=parent, follow_symlinks=False)
                elif stat.S_ISREG(mode):
                    copy_file(e.dir_fd, e.name, parent, e.st)
                else:
                    problems.append(f"{printable(e.rel[:200])} is {describe_mode(mode)} (not copied)")
            except OSError as exc:
                problems.append(f"{printable(e.rel[:200])}: {exc.strerror}")
                if stat.S_ISDIR(mode):
                    walk.prune()
    finally:
        while len(out_stack) > 1:
            close_level()
        os.close(out_stack.pop()[0])
    if walk.incomplete:
        problems.append(walk.incomplete)
    return problems


def _make_dir(parent: int, name: str) -> int:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=parent)
            raise FileNotFoundError
    except FileNotFoundError:
        os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    os.chmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | 0o700)  # writable while it is filled
    return fd


def _clear_for_file(parent: int, name: str) -> None:
    """Make room for a file or symlink: a file or symlink there goes; a directory is a problem."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "a directory is in the way")
    os.unlink(name, dir_fd=parent)


def copy_file(src_dir: int, name: str, dst_dir: int, st: os.stat_result) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        _clear_for_file(dst_dir, name)
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            while chunk := os.read(fd, READ_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
            os.chmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(fd)


# -- removal --------------------------------------------------------------------------------------

def _open_for_removal(parent: int, name: str) -> int:
    """A readable, writable descriptor of directory `name`: as root always; as its owner, after
    giving it back rwx for the owner (through an O_PATH descriptor: a symlink is never followed)."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        _own_rwx(parent, name)
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    if os.geteuid() != 0:
        st = os.fstat(fd)
        if st.st_mode & 0o700 != 0o700:
            os.chmod(fd, stat.S_IMODE(st.st_mode) | 0o700)
    return fd


def _own_rwx(parent: int, name: str) -> None:
    pfd = os.open(name, PATH_FLAGS, dir_fd=parent)
    try:
        st = os.fstat(pfd)
        if stat.S_ISDIR(st.st_mode):
            os.chmod(f"/proc/self/fd/{pfd}", stat.S_IMODE(st.st_mode) | 0o700)
    finally:
        os.close(pfd)


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as it:
        return [e.name for e in it]


def _remove_entry(parent: int, name: str, top: int) -> None:
    """Remove `name` in directory `parent`, post-order and iteratively; directories found
    REMOVE_FDS levels down are renamed into `top` (hoisted) and removed by the caller's next pass."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = _open_for_removal(parent, name)
    stack: list[list] = [[fd, _names(fd), name]]
    try:
        while stack:
            fd, names, _ = stack[-1]
            if names:
                child = names.pop()
                try:
                    cst = os.stat(child, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(cst.st_mode):
                    os.unlink(child, dir_fd=fd)
                elif len(stack) >= REMOVE_FDS:
                    if os.geteuid() != 0:
                        _own_rwx(fd, child)  # moving a directory rewrites its "..": needs its w bit
                    os.rename(child, f".tf-rm-{secrets.token_hex(8)}", src_dir_fd=fd, dst_dir_fd=top)
                else:
                    cfd = _open_for_removal(fd, child)
                    stack.append([cfd, _names(cfd), child])
                continue
            _, _, done = stack.pop()
            os.close(fd)
            holder = stack[-1][0] if stack else parent
            try:
                os.rmdir(done, dir_fd=holder)
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                # Something appeared while it was emptied: go through it again.
                again = _open_for_removal(holder, done)
                stack.append([again, _names(again), done])
    finally:
        for item in stack:
            os.close(item[0])


def remove_tree(path: str | Path, passes: int = 10_000) -> list[str]:
    """Remove `path` (a directory tree, a file or a symlink) however deep and whatever its modes.
    Never raises; returns what could not be removed (empty on success)."""
    path = Path(path)
    problems: list[str] = []
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return problems
    except OSError as exc:
        return [f"{path}: {exc.strerror}"]
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror}")
        return problems
    _fd_headroom(REMOVE_FDS)
    try:
        parent_fd = os.open(path.parent, DIR_FLAGS)
    except OSError as exc:
        return [f"{path.parent}: {exc.strerror}"]
    try:
        try:
            top = _open_for_removal(parent_fd, path.name)
        except OSError as exc:
            return [f"{path}: {exc.strerror}"]
        try:
            for _ in range(passes):
                names = _names(top)
                if not names:
                    break
                for name in names:
                    try:
                        _remove_entry(top, name, top)
                    except OSError as exc:
                        problems.append(f"{path}/{name[:100]}: {exc.strerror}")
                if problems:
                    break
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror}")
        finally:
            os.close(top)
        if not problems:
            try:
                os.rmdir(path.name, dir_fd=parent_fd)
            except OSError as exc:
                problems.append(f"{path}: {exc.strerror}")
    finally:
        os.close(parent_fd)
    return problems


__all__ = ["Bounds", "DEFAULT_BOUNDS", "Entry", "TreeWalk", "Measure", "allocated", "chown", "digest_entries",
           "describe_mode", "copy_file", "copy_tree", "read_at", "remove_tree"]
