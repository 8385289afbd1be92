#!/usr/bin/env bash
# The core builds for bare-metal targets without `std` or `alloc` (docs/design.md §2):
#   thumbv7em-none-eabihf  (Cortex-M4F: native CAS atomics)
#   thumbv6m-none-eabi     (Cortex-M0: no CAS, so `critical-section` via portable-atomic)
# Needs both targets installed (`make setup`).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/nostd}"

set -x
cargo build -p hullguard-core --no-default-features --target thumbv7em-none-eabihf
cargo build -p hullguard-core --no-default-features --features critical-section \
    --target thumbv6m-none-eabi
