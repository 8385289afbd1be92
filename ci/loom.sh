#!/usr/bin/env bash
# Loom models of the core's protocol steps (docs/design.md §3, §11).
#
# Loom explores every interleaving of a model. Unbounded, a 3-thread model of the waiter ring
# runs for hours, so the search is bounded. The founding contract asked for 2 preemptions (3 for
# 2-thread models); we run the models at 4, a superset (a real barging race, the dispatcher
# clearing WAITERS under a publishing enqueuer, only showed at 4), and cap the three-thread models
# lower (docs/design.md §11); `make loom-deep` (LOOM_DEEP=1) runs those one bound deeper. About
# 2 minutes for all models on this 2-core machine (measured; tokio and crossbeam CI use 2).
# LOOM_MAX_BRANCHES caps the branches of one execution so a model that spins (a retry loop)
# fails fast instead of hanging.
#
# Extra arguments are passed through to `cargo test`. A first argument that is not an option
# replaces the default test-name filter `loom_`:
#   ci/loom.sh -- --nocapture         every loom model, with output
#   ci/loom.sh loom_bulkhead          only the bulkhead models
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-4}"
export LOOM_MAX_BRANCHES="${LOOM_MAX_BRANCHES:-10000}"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"

if [ "$#" -eq 0 ] || [[ "$1" == -* ]]; then
    set -- loom_ "$@"
fi
exec cargo test -p hullguard-core --lib --release "$@"
