#!/usr/bin/env bash
# Callgrind counts per op of the single-thread benchmark cases, hullguard beside its anchors
# (docs/design.md § Benchmarks): instructions, and locked read-modify-writes (lock-prefixed
# instructions found with objdump). Deterministic, so one run is enough. Called by `make bench`;
# see bench/README.md.
#
#   bench/callgrind.sh            the table (`icount table`, 16 000 and 80 000 ops per case)
#   bench/callgrind.sh --smoke    the same runs and table at tiny sizes (`icount table --smoke`):
#                                 proves it runs end to end in seconds; the counts mean nothing
set -euo pipefail
cd "$(dirname "$0")/.."

args=()
case "${1:-}" in
    "") ;;
    --smoke) args=(--smoke) ;;
    *) echo "usage: bench/callgrind.sh [--smoke]" >&2; exit 2 ;;
esac

VALGRIND="${VALGRIND:-valgrind}"
if ! command -v "$VALGRIND" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "callgrind.sh: installing valgrind (Debian package)" >&2
        apt-get install -y -qq --no-install-recommends valgrind binutils >/dev/null
    else
        echo "callgrind.sh: valgrind not found; install it (e.g. apt-get install valgrind)" >&2
        exit 1
    fi
fi

cargo build --release --quiet -p hullguard-bench --bin icount
VALGRIND="$VALGRIND" "${CARGO_TARGET_DIR:-target}/release/icount" table "${args[@]}"
