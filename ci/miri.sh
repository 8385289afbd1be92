#!/usr/bin/env bash
# Miri on the core's unit tests (docs/design.md §11): undefined behaviour, data races, provenance.
#
# Only hullguard-core: Miri cannot run pyo3 (nor napi, nor the C toolchain). In the core,
# proptest, the stress tests and the loom models are `cfg(not(miri))`; what remains is sized to
# finish under the interpreter. Needs the `nightly` toolchain with the `miri` and `rust-src`
# components (`make setup`).
#
#   ci/miri.sh            every test, in two halves run at once (the interpreter is
#                         single-threaded; the machine has two cores): the tests listed, dealt
#                         alternately to two `cargo miri test --exact` runs, each in its own
#                         target dir (cargo locks a target dir for a whole run); fails if either
#                         fails or if the halves did not run every listed test
#   ci/miri.sh FILTER...  one run with these arguments (`ci/miri.sh permit`)
set -euo pipefail
cd "$(dirname "$0")/.."

export MIRIFLAGS="${MIRIFLAGS:--Zmiri-strict-provenance}"
TARGET="${CARGO_TARGET_DIR:-target/miri}"
MIRI=(cargo +nightly miri test -p hullguard-core --lib)

if [ "$#" -gt 0 ]; then
    CARGO_TARGET_DIR="$TARGET" exec "${MIRI[@]}" "$@"
fi

mapfile -t names < <(CARGO_TARGET_DIR="$TARGET" "${MIRI[@]}" -q -- --list --format terse \
    2>/dev/null | sed -n 's/: test$//p')
if [ "${#names[@]}" -lt 50 ]; then
    echo "miri.sh: listed only ${#names[@]} tests" >&2
    exit 1
fi
half=(); other=()
for i in "${!names[@]}"; do
    if (( i % 2 == 0 )); then half+=("${names[$i]}"); else other+=("${names[$i]}"); fi
done

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
CARGO_TARGET_DIR="$TARGET" "${MIRI[@]}" -- --exact "${half[@]}" >"$logs/a" 2>&1 &
a=$!
CARGO_TARGET_DIR="$TARGET-b" "${MIRI[@]}" -- --exact "${other[@]}" >"$logs/b" 2>&1 &
b=$!
ra=0; rb=0
wait "$a" || ra=$?
wait "$b" || rb=$?
cat "$logs/a" "$logs/b"
ran=$(cat "$logs/a" "$logs/b" | sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; [0-9]* failed; \([0-9]*\) ignored.*/\1 \2/p' \
    | awk '{n += $1 + $2} END {print n + 0}')
echo "miri.sh: ${#names[@]} tests listed, ${#half[@]} + ${#other[@]} run in two halves, $ran passed or ignored"
if [ "$ra" -ne 0 ] || [ "$rb" -ne 0 ]; then
    exit 1
fi
if [ "$ran" -ne "${#names[@]}" ]; then
    echo "miri.sh: the halves ran $ran of ${#names[@]} tests" >&2
    exit 1
fi
