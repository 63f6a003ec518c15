#!/bin/bash
# Totals per trimmed region with awk; invalid rows are counted instead of summed.
set -euo pipefail
cd /app
awk -F',' '
  /^#/ || /^[[:space:]]*$/ { next }
  !seen_header { seen_header = 1; next }
  {
    region = $2; gsub(/^[[:space:]]+|[[:space:]]+$/, "", region)
    if ($4 !~ /^[0-9]+$/ || $5 !~ /^[0-9]+(\.[0-9]+)?$/) { invalid++; next }
    total[region] += $4 * $5
  }
  END {
    for (r in total) printf "%s\t%.2f\n", r, total[r] | "sort -t \"\t\" -k2,2gr -k1,1"
    close("sort -t \"\t\" -k2,2gr -k1,1")
    printf "INVALID\t%d\n", invalid
  }
' data/sales.csv > region_totals.tsv
