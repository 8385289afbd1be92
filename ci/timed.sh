#!/usr/bin/env bash
# `make test`'s driver: runs each make target given, in order, and prints how long each took
# (a table at the end, also when a target fails; the run stops at the first failure).
#
#   ci/timed.sh setup fmt-check clippy unit ...
#
# The budget (docs/design.md § Verification): under 30 minutes cold and 10 warm on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."

names=() secs=() codes=()
start_all=$(date +%s.%N)
rc=0
for t in "$@"; do
    echo
    echo "=== make $t ==="
    start=$(date +%s.%N)
    make --no-print-directory "$t"
    rc=$?
    end=$(date +%s.%N)
    names+=("$t")
    secs+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')")
    codes+=("$rc")
    [ "$rc" -eq 0 ] || break
done
total=$(awk -v a="$start_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

echo
echo "make test: time per target"
printf '  %-14s %9s  %s\n' target seconds result
for i in "${!names[@]}"; do
    if [ "${codes[$i]}" -eq 0 ]; then r=ok; else r="FAILED (exit ${codes[$i]})"; fi
    printf '  %-14s %9s  %s\n' "${names[$i]}" "${secs[$i]}" "$r"
done
skipped=$(( $# - ${#names[@]} ))
[ "$skipped" -eq 0 ] || printf '  (%d targets not run after the failure)\n' "$skipped"
printf '  %-14s %9s  (%s min)\n' total "$total" "$(awk -v t="$total" 'BEGIN { printf "%.1f", t / 60 }')"
exit "$rc"
