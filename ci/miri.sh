#!/usr/bin/env bash
# Miri on the core's unit tests (docs/design.md §11): undefined behaviour, data races, provenance.
#
# Only hullguard-core: Miri cannot run pyo3 (nor napi, nor the C toolchain). In the core,
# proptest, the stress tests and the loom models are `cfg(not(miri))`; what remains is sized to
# finish under the interpreter. Needs the `nightly` toolchain with the `miri` and `rust-src`
# components (`make setup`).
#
# Extra arguments are passed to `cargo miri test`, e.g. `ci/miri.sh permit`.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/miri}"
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-strict-provenance}"

exec cargo +nightly miri test -p hullguard-core --lib "$@"
