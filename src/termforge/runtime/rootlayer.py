"""A session's writable root: the image's root filesystem as the container's writable layer gives it
under Docker, every byte written counted in the session's own tree (docs/terminal-bench.md).

    root = WritableRoot.mount(rootfs, session_dir, inside=(uid, gid), host_uid)
    ... bwrap --bind root.merged / ...   (watch root.roots with the session's disk cap)
    root.unmount()

The image's tree in the cache is never written: it is bound read-only, nosuid and nodev, and
idmapped so that the files the sandbox's user owns in the image (root's, for an image with no
User) belong to the session's host uid there (the one uid the sandbox's user namespace maps), as
they belong to the container's user under Docker; an overlay over it takes every write into
`upper/` in the session's tree, where the disk watch counts it against `Limits.disk_mb`. Files of
other owners stay theirs (the sandbox's user cannot write them, as a non-root user under Docker
cannot). Both mounts are the host's (the session's tree is private to its uid) and are detached
before the tree is removed. Needs root (mount, idmapped mounts: Linux 5.12+, overlay over an
idmapped layer: 5.19+); `available()` says whether this machine can.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

from termforge.errors import TermforgeError

# x86_64 and aarch64 share these numbers (the new mount API).
NR_OPEN_TREE, NR_MOVE_MOUNT, NR_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH, AT_FDCWD = 1, 0x8000, 0x1000, -100
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x1, 0x2, 0x4, 0x100000
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _fail(what: str) -> TermforgeError:
    errno = ctypes.get_errno()
    return TermforgeError(f"writable root: {what} failed: {os.strerror(errno)} (errno {errno})")


def _userns_fd(inside: tuple[int, int], host: int) -> int:
    """An fd of a user namespace mapping the ids `inside` to the host id `host`. A helper program
    unshares it (util-linux `unshare`, exec'd, so nothing of this process's threads, locks or
    inherited state can make the kernel refuse: a fork of a process that has loaded torch was
    refused with EINVAL after its first session); the fd keeps the namespace once it is gone."""
    proc = subprocess.Popen(["unshare", "--user", "--", "sh", "-c", "echo ready; read _"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True)
    try:
        if proc.stdout.readline().strip() != b"ready":
            proc.stdin.close()
            err = proc.stderr.read().decode(errors="replace").strip()
            raise TermforgeError(f"writable root: cannot make the idmapping's user namespace: {err or 'unshare failed'}")
        for kind, inner in (("uid", inside[0]), ("gid", inside[1])):
            with open(f"/proc/{proc.pid}/{kind}_map", "w") as f:
                f.write(f"{inner} {host} 1\n")
        return os.open(f"/proc/{proc.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def _idmapped_bind(src: Path, dst: Path, inside: tuple[int, int], host: int) -> None:
    tree = _libc.syscall(NR_OPEN_TREE, AT_FDCWD, os.fsencode(src), OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE)
    if tree < 0:
        raise _fail(f"open_tree({src})")
    try:
        ns = _userns_fd(inside, host)
        try:
            attr = _MountAttr(MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, ns)
            if _libc.syscall(NR_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(attr),
                             ctypes.sizeof(attr)) != 0:
                raise _fail("mount_setattr (idmap)")
        finally:
            os.close(ns)
        if _libc.syscall(NR_MOVE_MOUNT, tree, b"", AT_FDCWD, os.fsencode(dst), MOVE_MOUNT_F_EMPTY_PATH) != 0:
            raise _fail(f"move_mount({dst})")
    finally:
        os.close(tree)


def _detach(path: Path) -> bool:
    return _libc.umount2(os.fsencode(path), MNT_DETACH) == 0 or ctypes.get_errno() == 22  # EINVAL: not mounted


class WritableRoot:
    """The overlay a session's sandboxes take as /, in `<dir>/root`; writes land in `<dir>/upper`."""

    def __init__(self, base: Path):
        self.base = base
        self.lower, self.upper, self.work, self.merged = (base / n for n in ("lower", "upper", "work", "root"))
        self.mounted: list[Path] = []

    @property
    def roots(self) -> list[Path]:
        """What the disk watch measures: everything the sandbox's writes can make."""
        return [self.upper, self.work]

    @classmethod
    def mount(cls, rootfs: str | os.PathLike, base: Path, inside: tuple[int, int], host_uid: int) -> "WritableRoot":
        self = cls(Path(base))
        self.base.mkdir(mode=0o755)
        for d in (self.lower, self.upper, self.work, self.merged):
            d.mkdir(mode=0o755)
        for d in (self.upper, self.work):
            os.chown(d, host_uid, host_uid)
        try:
            _idmapped_bind(Path(rootfs), self.lower, inside, host_uid)
            self.mounted.append(self.lower)
            res = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                                  f"lowerdir={self.lower},upperdir={self.upper},workdir={self.work},nosuid,nodev",
                                  str(self.merged)], capture_output=True, text=True)
            if res.returncode != 0:
                raise TermforgeError(f"writable root: mounting the overlay failed: {res.stderr.strip()[-300:]}")
            self.mounted.append(self.merged)
        except BaseException:
            self.unmount()
            raise
        return self

    def unmount(self) -> list[str]:
        """Detach both mounts (the overlay first); what could not be detached, named."""
        problems = []
        for path in reversed(self.mounted):
            if not _detach(path):
                problems.append(f"cannot detach {path}: {os.strerror(ctypes.get_errno())}")
        self.mounted = []
        return problems


def available() -> bool:
    """Whether sessions here can have a writable root (the host runs as root: mounts are its to make)."""
    return os.geteuid() == 0 and os.path.exists("/proc/filesystems") and \
        "overlay" in Path("/proc/filesystems").read_text()
