#!/usr/bin/env bash
# Regenerates ffi/include/hullguard.h with the pinned cbindgen (installed into target/tools on
# first use). `--check` fails if the committed header differs (the rustls-ffi habit).
set -euo pipefail
cd "$(dirname "$0")/.."
CBINDGEN_VERSION=0.29.4   # pinned: header text must not change with the tool's version
bin=target/tools/bin/cbindgen
if [ ! -x "$bin" ] || [ "$("$bin" --version)" != "cbindgen $CBINDGEN_VERSION" ]; then
    cargo install --quiet --locked --root target/tools cbindgen --version "=$CBINDGEN_VERSION"
fi
"$bin" --quiet --config ffi/cbindgen.toml --crate hullguard-ffi --output ffi/include/hullguard.h ffi
if [ "${1:-}" = "--check" ]; then
    git diff --exit-code -- ffi/include/hullguard.h || {
        echo "ffi/include/hullguard.h is out of date: run 'make header' and commit it" >&2
        exit 1
    }
fi
