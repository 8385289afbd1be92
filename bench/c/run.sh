#!/usr/bin/env bash
# The C benchmark (bench/c/bench.c, docs/design.md § Benchmarks): hullguard's C ABI beside POSIX
# sem_t in one run — timed rows (>= 5 interleaved repetitions, median ratio with min-max;
# 1 thread, 2 threads shared, 2 threads no-sharing control), then the single-thread rows'
# instruction counts under callgrind (deterministic): Ir per acquire+release pair =
# (Ir(N) - Ir(0)) / N.
#
#   bench/c/run.sh [ops-per-thread] [reps]   (make bench runs it with the defaults)
#   bench/c/run.sh --smoke                   every row once: 1 repetition of 1000 ops, callgrind
#                                            at N = 1000; proves it runs, measures nothing
set -euo pipefail
cd "$(dirname "$0")/../.."

SMOKE=0
if [ "${1:-}" = "--smoke" ]; then
    SMOKE=1
    shift
    [ $# -eq 0 ] || { echo "usage: bench/c/run.sh --smoke | [ops-per-thread] [reps]" >&2; exit 2; }
fi

OUT=target/c-bench
TARGET="${CARGO_TARGET_DIR:-target}"
mkdir -p "$OUT"
cargo build --quiet --release -p hullguard-ffi
"${CC:-gcc}" -std=c11 -Wall -Wextra -Werror -O2 -g -Iffi/include bench/c/bench.c \
    "$TARGET/release/libhullguard.a" -lpthread -ldl -lm -o "$OUT/bench"

if [ "$SMOKE" = 1 ]; then
    "$OUT/bench" --smoke 1000
    N=1000
else
    "$OUT/bench" "${1:-2000000}" "${2:-7}"
    N=200000
fi

if ! command -v valgrind >/dev/null; then
    echo "(valgrind not installed: no callgrind instruction counts)"
    exit 0
fi
ir() { # variant ops -> total instructions
    local out count
    out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$OUT/bench" --ir "$1" "$2" 2>&1) || {
        printf 'run.sh: callgrind run of %s %s failed:\n%s\n' "$1" "$2" "$out" >&2
        return 1
    }
    count=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out")
    [ -n "$count" ] || { printf 'run.sh: no "Collected :" line from callgrind:\n%s\n' "$out" >&2; return 1; }
    echo "$count"
}
echo
[ "$SMOKE" = 1 ] && echo "SMOKE RUN (--smoke): callgrind at N = $N; the counts below mean nothing"
echo "callgrind, 1 thread: instructions per acquire+release pair ((Ir($N) - Ir(0)) / $N)"
declare -A per
for v in "sem_t" "raw pair" "handle API" "handle+events"; do
    a=$(ir "$v" "$N")
    b=$(ir "$v" 0)
    per[$v]=$(awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN { printf "%.1f", (a - b) / n }')
done
for v in "sem_t" "raw pair" "handle API" "handle+events"; do
    ratio=$(awk -v x="${per[$v]}" -v s="${per[sem_t]}" 'BEGIN { printf "%.2fx", x / s }')
    [ "$v" = "sem_t" ] && ratio="(anchor)"
    printf '  %-13s %8s Ir/op  %s\n' "$v" "${per[$v]}" "$ratio"
done
awk -v e="${per[handle+events]}" -v h="${per[handle API]}" \
    'BEGIN { printf "  handle+events / handle API: %.2fx (target <= 1.3x)\n", e / h }'
