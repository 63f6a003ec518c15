#!/bin/bash
# A base's Python byte code: `compile-python.sh ROOTFS`, run by images/build.py in a private mount
# and pid namespace. Unchecked-hash .pyc files: valid whatever the sources' mtimes (the layer
# clamps them, so timestamp .pyc files would be stale, and recompiled in memory at every import,
# wherever the image is unpacked), and never re-hashed at import (checked-hash .pyc files, what
# py3compile writes under SOURCE_DATE_EPOCH, cost ~90 ms more per `import pytest`). The image is
# read-only, so its sources never change.
set -eu
R=$1; shift
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
dirs=$(cd "$R" && ls -d usr/lib/python3 usr/lib/python3.* 2>/dev/null | sed 's,^,/,')
chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
  python3 -m compileall -q -f -j 1 --invalidation-mode unchecked-hash $dirs || true  # (a package's unparsable file must not fail the build)
