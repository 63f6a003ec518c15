#!/bin/bash
# A Harbor task's Dockerfile build: `buildah-build.sh WORK STORAGE TAG BUILDAH SKOPEO NETWORK FROM
# [BASE_REF BASE_NAME]...`, run by images/dockerfile.py as root of the build's user namespace (NETWORK
# none: in a network namespace of its own with nothing in it; host: in a network namespace of its
# own that slirp4netns connects to the outside, never the host's; buildah's `--network host` means
# that one). One overlay containers-storage per
# image cache (S) serves every build: each base goes in once (named by its key), FROM (when not
# empty) replaces the Dockerfile's first FROM, and each build's image is pushed uncompressed to the build's own OCI layout (the base's blob
# is already linked there, so only the new layers are written) and then dropped from the storage.
# RUN steps go to the step sandbox ($W/step-runtime, termforge.images.step_sandbox), never to
# buildah's chroot.
set -euo pipefail
W=$1; S=$2; TAG=$3; BUILDAH=$4; SKOPEO=$5; NETWORK=$6; FROM=$7
shift 7
if [ -n "${TF_BUILD_NET_FDS:-}" ]; then
  # Nothing runs before slirp4netns has configured this namespace: say we are in it, wait for the go.
  read -r UP GO <<<"$TF_BUILD_NET_FDS"
  echo up >&"$UP"
  eval "exec $UP>&-"
  read -r _ <&"$GO"
  eval "exec $GO<&-"
  unset TF_BUILD_NET_FDS
  # Names resolve through slirp4netns's DNS forwarder (the host's resolv.conf may name a resolver
  # on the host's loopback, out of this namespace's reach); buildah copies it into every RUN step.
  mount --bind "$W/resolv.conf" /etc/resolv.conf
fi
B=("$BUILDAH" --root "$S/root" --runroot "$S/run" --storage-driver overlay)
while [ $# -ge 2 ]; do
  if ! "${B[@]}" inspect --type image "$2" >/dev/null 2>&1; then
    "$SKOPEO" --policy="$W/policy.json" copy --quiet "$1" "containers-storage:[overlay@$S/root+$S/run]$2"
  fi
  shift 2
done
FROM_ARGS=()
[ -n "$FROM" ] && FROM_ARGS=(--from "$FROM")
echo "+ buildah bud --isolation oci --runtime <termforge step sandbox> --network $NETWORK --pull=never ${FROM_ARGS[*]} (the bases from the image store)"
status=0
"${B[@]}" bud --isolation oci --runtime "$W/step-runtime" --network "$NETWORK" --pull=never --layers=false --timestamp 0 \
  --signature-policy "$W/policy.json" "${FROM_ARGS[@]}" -f "$W/Dockerfile" -t "$TAG" "$W/context" 2>&1 || status=$?
if [ $status = 0 ]; then
  "${B[@]}" push --quiet --disable-compression --signature-policy "$W/policy.json" "$TAG" "oci:$W/out:image" || status=$?
fi
"${B[@]}" rmi -f "$TAG" >/dev/null 2>&1 || true
exit $status
