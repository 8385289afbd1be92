#!/usr/bin/env bash
# Loom models of the host protocol (host/src/loom_models.rs; docs/design.md §14.7): the ledger
# (admission never passes the limit or the budget), expiry and reclaim against the owner (each
# call leaves the ledger once), tickets and doorbells (no lost wake-up: head, release, cancel),
# and crash injection (a process, a reaper or an observer dying at every crash point of claim,
# admission, ticket publish, release, reclaim and expiry; a reaper then leaves nothing held or
# published, and a waiting survivor is still admitted).
#
# The search is bounded: two-thread models run at LOOM_MAX_PREEMPTIONS (3 here), three-thread
# models and the four-party expiry model at most 2; `LOOM_DEEP=1` runs every model one bound
# deeper (`make loom-deep`). About 40 s on this 2-core machine warm (measured, load 2;
# 50 s at load 3), 35 s more from a cold target dir; `LOOM_DEEP=1` about 10 minutes.
# LOOM_MAX_BRANCHES caps the branches of one execution so a model that spins fails fast
# instead of hanging.
#
# Extra arguments are passed through to `cargo test`. A first argument that is not an option
# replaces the default test-name filter `loom_host`:
#   ci/loom-host.sh -- --nocapture       every model, with its execution counts
#   ci/loom-host.sh loom_host_crash      only the crash-injection models
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom-host}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export LOOM_MAX_BRANCHES="${LOOM_MAX_BRANCHES:-10000}"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"

if [ "$#" -eq 0 ] || [[ "$1" == -* ]]; then
    set -- loom_host "$@"
fi
exec cargo test -p hullguard-host --lib --release "$@"
