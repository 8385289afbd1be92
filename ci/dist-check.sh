#!/usr/bin/env bash
# `make dist-test`: installs what `make dist` built the way a user without a Rust toolchain
# would — cargo, rustc and rustup are taken off PATH first — and runs a smoke program against
# each: the wheel into a fresh venv, the two npm tarballs into a fresh npm project (offline; the
# addon comes from the per-platform package), the C tarball unpacked into a fresh prefix and
# used through its pkg-config file (shared, found through the rpath; and static). Prints the
# install times.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
for f in dist/python/hullguard-"$version"-*.whl dist/node/hullguard-"$version".tgz \
         dist/node/hullguard-linux-x64-gnu-"$version".tgz dist/c/hullguard-"$version"-linux-x86_64.tar.gz; do
    [ -e "$f" ] || { echo "dist-check: $f missing: run 'make dist'" >&2; exit 1; }
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/hullguard-dist-check.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# No toolchain: drop the PATH entries that hold cargo, rustc or rustup (rustup's ~/.cargo/bin),
# except the system directories, which the stubs below shadow instead (a distribution's Rust in
# /usr/bin must not take the shell's tools with it); every stub fails loudly.
mkdir "$tmp/no-rust"
for t in cargo rustc rustup; do
    printf '#!/bin/sh\necho "dist-check: %s was called, but a user of the artefacts has no Rust" >&2\nexit 127\n' "$t" \
        > "$tmp/no-rust/$t"
    chmod +x "$tmp/no-rust/$t"
done
clean="$tmp/no-rust"
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    case "$d" in
        /usr/bin | /bin | /usr/local/bin | /usr/sbin | /sbin) ;;
        *) if [ -x "$d/cargo" ] || [ -x "$d/rustc" ] || [ -x "$d/rustup" ]; then continue; fi ;;
    esac
    clean="$clean:$d"
done
export PATH="$clean"
unset CARGO_TARGET_DIR RUSTUP_TOOLCHAIN CARGO_HOME RUSTUP_HOME
for t in cargo rustc rustup; do
    if [ "$(command -v "$t")" != "$tmp/no-rust/$t" ] || "$t" --version >/dev/null 2>&1; then
        echo "dist-check: a real $t is still reachable" >&2
        exit 1
    fi
done
echo "dist-check: cargo, rustc and rustup are off PATH (stubs that fail)"
timed() { local s=$SECONDS; "$@"; echo "dist-check: ${label}: $((SECONDS - s)) s"; }

label="pip install the wheel into a fresh venv"
timed bash -c "python3 -m venv '$tmp/venv' && '$tmp/venv/bin/pip' install --quiet --no-index \
    '$root'/dist/python/hullguard-$version-*.whl"
(cd "$tmp" && "$tmp/venv/bin/python" - <<'PY'
import asyncio, hullguard
bh = hullguard.Bulkhead(max_concurrent=1, queue_timeout=1.0)
async def main():
    async with bh.acquire():
        assert bh.try_acquire() is None
    return bh.stats()["admitted_total"]
assert asyncio.run(main()) == 1
assert hullguard.__file__.startswith(__import__("sys").prefix), hullguard.__file__
print("dist-check: python OK", hullguard.__version__, hullguard.origin_key("https://Example.com"))
PY
)

label="npm install the two tarballs into a fresh project (offline)"
mkdir "$tmp/app"
cd "$tmp/app"
echo '{"name": "app", "version": "1.0.0", "private": true}' > package.json
timed npm install --offline --no-audit --no-fund --silent \
    "$root/dist/node/hullguard-linux-x64-gnu-$version.tgz" "$root/dist/node/hullguard-$version.tgz"
[ ! -e node_modules/hullguard/hullguard.linux-x64-gnu.node ] || {
    echo "dist-check: the JS package carries the binary" >&2; exit 1; }
node -e "
const hg = require('hullguard')
const where = require.resolve('hullguard-linux-x64-gnu')
const bh = new hg.Bulkhead({ maxConcurrent: 1 })
bh.run(async () => 7).then((v) => {
  if (v !== 7 || bh.stats().admittedTotal !== 1) throw new Error('wrong result')
  console.log('dist-check: node (require) OK, addon from', where.replace(process.cwd() + '/', ''))
})"
node --input-type=module -e "
import { Bulkhead, originKey } from 'hullguard'
const bh = new Bulkhead({ maxConcurrent: 1 })
console.log('dist-check: node (import) OK', await bh.run(async () => originKey('https://Example.com')))"
cd "$root"

label="unpack the C tarball into a fresh prefix"
prefix="$tmp/unpacked-anywhere/prefix"
mkdir -p "$prefix"
timed tar -xzf "dist/c/hullguard-$version-linux-x86_64.tar.gz" -C "$prefix" --strip-components=1
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cat > "$tmp/smoke.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include "hullguard.h"
int main(void) {
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = 1;
    hg_bulkhead *bh;
    if (hg_bulkhead_new(&c, &bh) != HG_STATUS_OK) return 1;
    hg_permit *p;
    if (hg_bulkhead_try_acquire(bh, 1, &p) != HG_STATUS_OK) return 2;
    hg_permit *q;
    if (hg_bulkhead_try_acquire(bh, 1, &q) != HG_STATUS_CONCURRENCY_LIMIT) return 3;
    hg_permit_release(p);
    hg_permit_free(p);
    hg_bulkhead_free(bh);
    puts("ok");
    return 0;
}
C
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror "$tmp/smoke.c" $(pkg-config --cflags --libs hullguard) -o "$tmp/smoke-shared"
libs_private="$(pkg-config --static --libs-only-l hullguard | sed 's/-lhullguard//')"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Werror "$tmp/smoke.c" $(pkg-config --cflags hullguard) \
    "$prefix/lib/libhullguard.a" $libs_private -o "$tmp/smoke-static"
(cd / && env -u LD_LIBRARY_PATH "$tmp/smoke-shared" >/dev/null && "$tmp/smoke-static" >/dev/null)
echo "dist-check: C OK (pkg-config from an unpacked prefix; shared through the rpath, and static)"
