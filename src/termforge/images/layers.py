"""Apply OCI image layers over a root filesystem whose files may be hard links shared with another
image (termforge.images.dockerfile: a base hard-linked, then the build's own layers on top).

    python -m termforge.images.layers ROOTFS LAYER.tar [LAYER.tar ...]     (as root)

Each layer is applied as the OCI image spec says: its whiteouts first (`.wh.NAME` removes NAME,
`.wh..wh..opq` empties its directory of what lower layers put there), then its entries. Every
entry that is not a directory replaces whatever was at its path (unlinked first, so a file shared
with the base by a hard link is never written through); directories are kept and given the
layer's owner, mode and time. Device nodes and FIFOs are skipped (sandboxes mount their own
/dev). The process chroots into ROOTFS before reading any entry, so a path or link in a layer
resolves inside the tree as it would in a container, never on the host (an absolute symlink in
the image points into the image).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import posixpath
import shutil
import stat
import sys
import tarfile

# (imported before the chroot: tarfile opens compressed layers with them, and nothing can be
# imported once the host's files are out of reach)
PRELOADED = (bz2, gzip, lzma)
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


def _clean(name: str) -> str | None:
    norm = posixpath.normpath("/" + name.lstrip("/"))
    if norm == "/" or any(part == ".." for part in norm.split("/")):
        return None
    return norm


def _remove(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _empty(directory: str) -> None:
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        _remove(posixpath.join(directory, name))


def apply_layer(tar: tarfile.TarFile) -> int:
    members = tar.getmembers()
    for m in members:
        path = _clean(m.name)
        if path is None:
            continue
        parent, base = posixpath.split(path)
        if base == OPAQUE:
            _empty(parent)
        elif base.startswith(WHITEOUT):
            _remove(posixpath.join(parent, base[len(WHITEOUT):]))
    applied = 0
    for m in members:
        path = _clean(m.name)
        if path is None or posixpath.basename(path).startswith(WHITEOUT):
            continue
        if m.ischr() or m.isblk() or m.isfifo():
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not (m.isdir() and stat.S_ISDIR(st.st_mode)):
            _remove(path)
        m.name = path.lstrip("/")
        tar.extract(m, "/", set_attrs=True, numeric_owner=True,
                    **({"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}))
        applied += 1
    return applied


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m termforge.images.layers ROOTFS LAYER.tar...", file=sys.stderr)
        return 2
    rootfs, layers = argv[0], argv[1:]
    files = [open(path, "rb") for path in layers]  # opened on the host, read inside the tree
    os.chroot(rootfs)
    os.chdir("/")
    for fh in files:
        with tarfile.open(fileobj=fh, mode="r:*") as tar:
            apply_layer(tar)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
