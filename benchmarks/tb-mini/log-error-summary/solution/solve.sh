#!/bin/bash
# An awk filter on the exact line shape, counted per component, sorted by count then name.
set -euo pipefail
mkdir -p /app/bin
cat > /app/bin/errsum <<'SH'
#!/bin/bash
if [ "$#" -ne 1 ]; then
  echo "usage: errsum LOGFILE" >&2
  exit 2
fi
if [ ! -f "$1" ] || [ ! -r "$1" ]; then
  echo "errsum: cannot read $1" >&2
  exit 1
fi
awk '$1 ~ /^[^ ]+$/ && ($2 == "ERROR" || $2 == "CRITICAL") && $3 ~ /^\[[^][ ]+\]$/ {
  count[substr($3, 2, length($3) - 2)]++
}
END { for (c in count) printf "%d %s\n", count[c], c }' "$1" | LC_ALL=C sort -k1,1nr -k2,2
SH
chmod 755 /app/bin/errsum
