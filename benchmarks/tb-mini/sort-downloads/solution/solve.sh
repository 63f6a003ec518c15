#!/bin/bash
# Deduplicate by content hash (first name in C order wins), then file by lower-cased extension.
set -euo pipefail
export LC_ALL=C
cd /app/downloads
declare -A seen=()
while IFS= read -r name; do
  [ -f "$name" ] || continue
  digest=$(sha256sum -- "$name" | cut -d' ' -f1)
  if [ -n "${seen[$digest]:-}" ]; then
    rm -- "$name"
    continue
  fi
  seen[$digest]=1
  case "$name" in
    *.*) ext=$(printf '%s' "${name##*.}" | tr '[:upper:]' '[:lower:]') ;;
    *) ext=other ;;
  esac
  mkdir -p "/app/sorted/$ext"
  mv -- "$name" "/app/sorted/$ext/$name"
done < <(ls -1A | grep -v '^\.' | sort)
cd /app/sorted
find . -type f ! -name MANIFEST | sed 's#^\./##' | sort | while IFS= read -r path; do
  sha256sum -- "$path"
done > MANIFEST
