#!/usr/bin/env bash
# A short libFuzzer run of one target over its seeds: fails on any crash, leak, timeout or sanitizer report.
#   smoke.sh <fuzz binary> <seed dir> <seconds>
set -euo pipefail
bin=$1 seeds=$2 secs=$3
[ -d "$seeds" ] || { echo "no seeds in $seeds (run the fuzz.seeds test first)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
cd "$work"  # crash-* / leak-* / timeout-* files land here and are printed below
rc=0
"$bin" "$work/corpus" "$seeds" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 2>&1 | tail -n 40 || rc=$?
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
  [ -e "$f" ] || continue
  echo "reproducer $f:"; od -A d -c "$f" | head -n 20; rc=1
done
exit $rc
