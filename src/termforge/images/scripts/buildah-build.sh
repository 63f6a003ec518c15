#!/bin/bash
# A Harbor task's Dockerfile build: `buildah-build.sh WORK STORAGE BASE_REF BASE_NAME TAG BUILDAH SKOPEO`,
# run by images/dockerfile.py as root of the build's user namespace, without network. One overlay
# containers-storage per image cache (S) serves every build: a base goes in once (named by its
# key), each build's image is pushed uncompressed to the build's own OCI layout (the base's blob
# is already linked there, so only the new layers are written) and then dropped from the storage.
# RUN steps go to the step sandbox ($W/step-runtime, termforge.images.step_sandbox), never to
# buildah's chroot.
set -euo pipefail
W=$1; S=$2; BASE_REF=$3; BASE_NAME=$4; TAG=$5; BUILDAH=$6; SKOPEO=$7
B=("$BUILDAH" --root "$S/root" --runroot "$S/run" --storage-driver overlay)
if ! "${B[@]}" inspect --type image "$BASE_NAME" >/dev/null 2>&1; then
  "$SKOPEO" --policy="$W/policy.json" copy --quiet "$BASE_REF" "containers-storage:[overlay@$S/root+$S/run]$BASE_NAME"
fi
echo "+ buildah bud --isolation oci --runtime <termforge step sandbox> --pull=never --from $BASE_NAME (offline, the base from the image store)"
status=0
"${B[@]}" bud --isolation oci --runtime "$W/step-runtime" --network none --pull=never --layers=false --timestamp 0 \
  --signature-policy "$W/policy.json" --from "$BASE_NAME" -f "$W/Dockerfile" -t "$TAG" "$W/context" 2>&1 || status=$?
if [ $status = 0 ]; then
  "${B[@]}" push --quiet --disable-compression --signature-policy "$W/policy.json" "$TAG" "oci:$W/out:image" || status=$?
fi
"${B[@]}" rmi -f "$TAG" >/dev/null 2>&1 || true
exit $status
