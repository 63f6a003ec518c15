#!/bin/bash
# A derived base's apt layer: `apt-layer.sh ROOTFS APT_CACHE PACKAGE...`, run by images/build.py
# in a private mount and pid namespace (unshare), so /proc, /dev and the shared apt caches leave
# with it and any daemon a maintainer script starts dies with the build; policy-rc.d stops
# services starting. apt's package lists and downloaded .debs are kept in the image cache
# (<cache>/apt/) across builds: a second derived base downloads only what is new.
set -eu
R=$1; APT=$2; shift 2
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mkdir -p "$APT/lists/partial" "$APT/archives/partial"
mount --bind "$APT/lists" "$R/var/lib/apt/lists"
mount --bind "$APT/archives" "$R/var/cache/apt/archives"
printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"
chmod 755 "$R/usr/sbin/policy-rc.d"
cat /etc/resolv.conf > "$R/etc/resolv.conf" 2>/dev/null || true
run() { chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" "$@"; }
run apt-get -q -o Acquire::Languages=none update
run apt-get -q -y --no-install-recommends install "$@"
rm -f "$R/usr/sbin/policy-rc.d"
