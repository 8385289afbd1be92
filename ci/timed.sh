#!/usr/bin/env bash
# `make test`'s driver: runs each make target given, in order, and prints how long each took
# (a table at the end, also when a target fails; the run stops at the first failure).
#
#   ci/timed.sh setup fmt-check clippy unit ...
#   HG_LANE="loom loom-host" ci/timed.sh setup fmt-check clippy unit ...
#
# HG_LANE names targets that run in a second lane, one after another, beside the main one: it
# starts once the first main target (setup) has passed, its output goes to a log printed when
# the lane ends, and its targets join the table (marked "lane"). For targets that keep less than
# the machine busy — the loom models use about one of the two cores for most of their run
# (measured: 208 CPU-s in 182 s) — so the other core runs the main lane meanwhile. A failure in
# either lane stops the main lane at its next target; the lane is killed if the main lane fails.
#
# The budget (docs/design.md § Verification): under 30 minutes cold and 10 warm on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."

names=() secs=() codes=() kinds=()
start_all=$(date +%s.%N)
rc=0
lane_pid=""
lane_dir="$(mktemp -d)"
lane_log="$lane_dir/log"
lane_table="$lane_dir/table"
trap 'rm -rf "$lane_dir"' EXIT

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

start_lane() {
    [ -n "${HG_LANE:-}" ] || return 0
    (
        for t in $HG_LANE; do
            s=$(now)
            echo "=== make $t (lane) ==="
            make --no-print-directory "$t"
            r=$?
            printf '%s %s %s\n' "$t" "$(elapsed "$s" "$(now)")" "$r" >>"$lane_table"
            [ "$r" -eq 0 ] || exit "$r"
        done
    ) >"$lane_log" 2>&1 &
    lane_pid=$!
    echo "(lane started: $HG_LANE; its output is printed when it ends)"
}

lane_failed() {
    [ -s "$lane_table" ] && awk '$3 != 0 { bad = 1 } END { exit !bad }' "$lane_table"
}

finish_lane() {
    [ -n "$lane_pid" ] || return 0
    if [ "$1" = kill ]; then
        kill -- -"$lane_pid" 2>/dev/null || pkill -P "$lane_pid" 2>/dev/null || true
        kill "$lane_pid" 2>/dev/null || true
    fi
    wait "$lane_pid" 2>/dev/null
    echo
    echo "=== the lane's output ($HG_LANE) ==="
    cat "$lane_log"
    lane_pid=""
}

first=1
for t in "$@"; do
    if lane_failed; then
        break
    fi
    echo
    echo "=== make $t ==="
    start=$(now)
    make --no-print-directory "$t"
    rc=$?
    names+=("$t")
    secs+=("$(elapsed "$start" "$(now)")")
    codes+=("$rc")
    kinds+=("")
    [ "$rc" -eq 0 ] || break
    if [ "$first" -eq 1 ]; then
        first=0
        set -m
        start_lane
        set +m
    fi
done
if [ "$rc" -eq 0 ]; then finish_lane wait; else finish_lane kill; fi
if [ -s "$lane_table" ]; then
    while read -r t s r; do
        names+=("$t") secs+=("$s") codes+=("$r") kinds+=("lane")
        if [ "$rc" -eq 0 ] && [ "$r" -ne 0 ]; then rc=$r; fi
    done <"$lane_table"
fi
total=$(elapsed "$start_all" "$(now)")

echo
echo "make test: time per target"
printf '  %-14s %9s  %s\n' target seconds result
for i in "${!names[@]}"; do
    if [ "${codes[$i]}" -eq 0 ]; then r=ok; else r="FAILED (exit ${codes[$i]})"; fi
    [ -z "${kinds[$i]}" ] || r="$r  (lane, beside the main targets)"
    printf '  %-14s %9s  %s\n' "${names[$i]}" "${secs[$i]}" "$r"
done
ran=0
for k in "${kinds[@]}"; do [ -n "$k" ] || ran=$((ran + 1)); done
skipped=$(( $# - ran ))
[ "$skipped" -eq 0 ] || printf '  (%d main targets not run after a failure)\n' "$skipped"
printf '  %-14s %9s  (%s min, wall)\n' total "$total" "$(awk -v t="$total" 'BEGIN { printf "%.1f", t / 60 }')"
exit "$rc"
