#!/usr/bin/env bash
# The C benchmark (bench/c/bench.c, DESIGN.md §8): hullguard's C ABI beside POSIX sem_t in one
# run — timed rows (>= 5 interleaved repetitions, median ratio with min-max; 1 thread,
# 2 threads shared, 2 threads no-sharing control), then the single-thread rows' instruction
# counts under callgrind (deterministic): Ir per acquire+release pair = (Ir(N) - Ir(0)) / N.
#
#   bench/c/run.sh [ops-per-thread] [reps]        (make bench runs it with the defaults)
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=target/c-bench
mkdir -p "$OUT"
cargo build --quiet --release -p hullguard-ffi
"${CC:-gcc}" -std=c11 -Wall -Wextra -Werror -O2 -g -Iffi/include bench/c/bench.c \
    target/release/libhullguard.a -lpthread -ldl -lm -o "$OUT/bench"

"$OUT/bench" "${1:-2000000}" "${2:-7}"

if ! command -v valgrind >/dev/null; then
    echo "(valgrind not installed: no callgrind instruction counts)"
    exit 0
fi
N=200000
ir() { # variant ops -> total instructions
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$OUT/bench" --ir "$1" "$2" 2>&1 \
        | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo
echo "callgrind, 1 thread: instructions per acquire+release pair ((Ir($N) - Ir(0)) / $N)"
declare -A per
for v in "sem_t" "raw pair" "handle API"; do
    a=$(ir "$v" "$N")
    b=$(ir "$v" 0)
    per[$v]=$(awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN { printf "%.1f", (a - b) / n }')
done
for v in "sem_t" "raw pair" "handle API"; do
    ratio=$(awk -v x="${per[$v]}" -v s="${per[sem_t]}" 'BEGIN { printf "%.2fx", x / s }')
    [ "$v" = "sem_t" ] && ratio="(anchor)"
    printf '  %-11s %8s Ir/op  %s\n' "$v" "${per[$v]}" "$ratio"
done
