#!/usr/bin/env bash
# Callgrind counts per op of the single-thread benchmark cases, hullguard beside its anchors
# (DESIGN.md §8): instructions, and locked read-modify-writes (lock-prefixed instructions found
# with objdump). Deterministic, so one run is enough. Called by `make bench`; see bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

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
VALGRIND="$VALGRIND" "${CARGO_TARGET_DIR:-target}/release/icount" table
