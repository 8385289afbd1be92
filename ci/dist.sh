#!/usr/bin/env bash
# `make dist`: what a user installs, built once into dist/ (docs/design.md §11, "Artefacts").
#
#   dist/python/hullguard-<v>-cp39-abi3-<platform>.whl   abi3 wheel (auditwheel shows its tag)
#   dist/node/hullguard-<v>.tgz                          the JS package, no binary in it
#   dist/node/hullguard-linux-x64-gnu-<v>.tgz            the addon, napi-rs's per-platform package
#   dist/c/hullguard-<v>-linux-x86_64.tar.gz             include/, lib/ (.a, .so), lib/pkgconfig/
#
# Every binary is built with the `dist` profile (no debug info, stripped); the sizes are printed.
# Needs cargo, the venv's maturin and auditwheel, and npm (the install check does not).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
out="${CARGO_TARGET_DIR:-target}"
case "$out" in /*) ;; *) out="$root/$out" ;; esac
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "dist: packages are laid out for linux-x64-gnu only; this is $(uname -s)-$(uname -m)" >&2
    exit 1
fi
rm -rf dist
mkdir -p dist/python dist/node dist/c
stage="$(mktemp -d "${TMPDIR:-/tmp}/hullguard-dist.XXXXXX")"
trap 'rm -rf "$stage"' EXIT

echo "== Python: abi3 wheel (maturin, profile dist; its own target dir)"
(cd bindings-python && env CARGO_TARGET_DIR="$root/target/python" VIRTUAL_ENV="$root/.venv" \
    PATH="$root/.venv/bin:$PATH" "$root/.venv/bin/maturin" build --profile dist --quiet \
    --out "$root/dist/python")
"$root/.venv/bin/auditwheel" show dist/python/hullguard-*.whl

echo "== Node: the JS package and the per-platform addon package"
cargo build --quiet --profile dist -p hullguard-node
addon=hullguard.linux-x64-gnu.node
plat="$stage/hullguard-linux-x64-gnu"
mkdir -p "$plat"
cp "$out/dist/libhullguard_node.so" "$plat/$addon"
cat > "$plat/package.json" <<JSON
{
  "name": "hullguard-linux-x64-gnu",
  "version": "$version",
  "description": "The hullguard addon for Linux x64 (glibc).",
  "license": "MIT OR Apache-2.0",
  "main": "$addon",
  "files": ["$addon"],
  "os": ["linux"],
  "cpu": ["x64"],
  "libc": ["glibc"],
  "engines": { "node": ">= 18" }
}
JSON
js="$stage/hullguard"
mkdir -p "$js"
# The package's own "files" list, less the binary.
for f in $(node -p 'require("./bindings-node/package.json").files.filter((f) => !f.endsWith(".node")).join(" ")'); do
    cp "bindings-node/$f" "$js/"
done
# The committed package.json, with the addon as an optional dependency and no binary in "files"
# (native.js loads ./hullguard.linux-x64-gnu.node when present, else the platform package).
node -e '
  const fs = require("fs")
  const [src, dst, version] = process.argv.slice(1)
  const p = JSON.parse(fs.readFileSync(src, "utf8"))
  p.files = p.files.filter((f) => !f.endsWith(".node"))
  p.optionalDependencies = { "hullguard-linux-x64-gnu": version }
  delete p.devDependencies
  delete p.scripts
  fs.writeFileSync(dst, JSON.stringify(p, null, 2) + "\n")
' bindings-node/package.json "$js/package.json" "$version"
(cd "$plat" && npm pack --silent --pack-destination "$root/dist/node" >/dev/null)
(cd "$js" && npm pack --silent --pack-destination "$root/dist/node" >/dev/null)

echo "== C: header, static and shared library, relocatable pkg-config file"
cargo build --quiet --profile dist -p hullguard-ffi
c="$stage/hullguard-$version-linux-x86_64"
mkdir -p "$c/include" "$c/lib/pkgconfig"
cp ffi/include/hullguard.h "$c/include/"
cp "$out/dist/libhullguard.a" "$c/lib/"
strip --strip-debug "$c/lib/libhullguard.a"
cp "$out/dist/libhullguard.so" "$c/lib/libhullguard.so.$version"
ln -s "libhullguard.so.$version" "$c/lib/libhullguard.so.0"
ln -s libhullguard.so.0 "$c/lib/libhullguard.so"
# prefix from the .pc file's own place, and an rpath to the library directory: a program built
# with `pkg-config --libs hullguard` finds libhullguard.so wherever the tarball was unpacked.
sed -e 's|^prefix=@PREFIX@|prefix=${pcfiledir}/../..|' -e "s|@VERSION@|$version|" \
    -e 's|^Libs: -L${libdir} -lhullguard$|Libs: -L${libdir} -Wl,-rpath,${libdir} -lhullguard|' \
    ffi/hullguard.pc.in | grep -v '^#' > "$c/lib/pkgconfig/hullguard.pc"
grep -q 'rpath' "$c/lib/pkgconfig/hullguard.pc"
tar -czf "dist/c/hullguard-$version-linux-x86_64.tar.gz" -C "$stage" "hullguard-$version-linux-x86_64"

echo "== sizes (bytes)"
size() { printf '  %-58s %10s\n' "$1" "$(stat -c %s "$2")"; }
size "python: the wheel" dist/python/hullguard-*.whl
size "node: hullguard-linux-x64-gnu's $addon (stripped)" "$plat/$addon"
for f in dist/node/*.tgz; do size "node: $(basename "$f")" "$f"; done
size "c: lib/libhullguard.a (debug info stripped)" "$c/lib/libhullguard.a"
size "c: lib/libhullguard.so (stripped)" "$c/lib/libhullguard.so.$version"
size "c: $(basename dist/c/*.tar.gz)" dist/c/*.tar.gz
