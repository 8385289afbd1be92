#!/usr/bin/env bash
# The npm tarball works as published: `npm pack`, install the tarball into a fresh project in a
# temp dir (outside the repo, offline: the package has no dependencies, and its peers are
# optional), then load it with `require` and with `import`, run a call through each, load the
# subpaths (`hullguard/edge`, `hullguard/metrics`), on Linux `HostBulkhead` and the `hullguard`
# bin, and type-check a consumer against the installed index.d.ts. Run after `make node-build`.
set -euo pipefail
pkg="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tsc="$pkg/node_modules/.bin/tsc"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/hullguard-pack.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

cd "$pkg"
tarball="$(npm pack --silent --pack-destination "$tmp" | tail -n 1)"
echo "pack-check: $tarball"

# Everything index.js / index.mjs need at run time must be in the tarball.
listing="$(tar -tzf "$tmp/$tarball")"
for f in package.json index.js index.mjs index.d.ts native.js; do
    grep -qx "package/$f" <<<"$listing" || { echo "pack-check: $f missing from the tarball" >&2; exit 1; }
done
grep -q '^package/.*\.node$' <<<"$listing" || { echo "pack-check: no .node addon in the tarball" >&2; exit 1; }
# ... including every local module the packed hand-written JS loads (`require('./x')`,
# `from './x'`); the generated loader native.js probes every platform's addon and is skipped.
mkdir "$tmp/unpacked"
tar -xzf "$tmp/$tarball" -C "$tmp/unpacked"
missing=0
for js in $(grep -E '^package/[^/]+\.(js|mjs|cjs)$' <<<"$listing" | grep -vx 'package/native.js'); do
    for dep in $(grep -oE "(require\(|from )'\./[^']+'" "$tmp/unpacked/$js" | grep -oE "\./[^']+" | sort -u); do
        if [ ! -e "$tmp/unpacked/package/${dep#./}" ]; then
            echo "pack-check: ${js#package/} loads $dep, which is not in the tarball" \
                "(add it to \"files\" in bindings-node/package.json)" >&2
            missing=1
        fi
    done
done
[ "$missing" -eq 0 ] || exit 1

app="$tmp/app"
mkdir "$app"
cd "$app"
printf '{"name": "pack-check", "version": "0.0.0", "private": true}\n' >package.json
npm install --offline --no-audit --no-fund --ignore-scripts --loglevel=error "$tmp/$tarball"

# require
node -e '
const assert = require("node:assert/strict")
const path = require("node:path")
const hg = require("hullguard")
assert.equal(path.dirname(require.resolve("hullguard")), path.join(process.cwd(), "node_modules", "hullguard"))
const bh = new hg.Bulkhead({ maxConcurrent: 1, maxQueue: 0 })
const p = bh.tryAcquire()
assert.ok(p instanceof hg.Permit)
assert.equal(bh.tryAcquire(), null)
assert.equal(p.release(), true)
assert.equal(hg.originKey("https://Example.com/x"), "https://example.com:443")
bh.run(async () => "cjs").then((v) => { assert.equal(v, "cjs"); console.log("pack-check: require OK") })
'

# import (and the same objects as require)
node --input-type=module -e '
import assert from "node:assert/strict"
import { createRequire } from "node:module"
import hg, { Bulkhead, Registry, BulkheadError, MAX_PERMITS, REASONS, originKey } from "hullguard"
assert.equal(hg, createRequire(import.meta.url)("hullguard"))
assert.equal(Bulkhead, hg.Bulkhead)
assert.equal(MAX_PERMITS, Number.MAX_SAFE_INTEGER)
assert.ok(REASONS[0] === "concurrency_limit" && REASONS.includes("budget_limit") && Object.isFrozen(REASONS))
const reg = new Registry({ maxConcurrent: 1, maxQueue: 0 })
const key = originKey("http://localhost:8080/")
const held = await reg.acquire(key)
await assert.rejects(reg.acquire(key), (e) => e instanceof BulkheadError && e.reason === "concurrency_limit")
held.release()
assert.equal(await new Bulkhead().run(() => "esm"), "esm")
console.log("pack-check: import OK")
'

# the subpaths: hullguard/edge runs without any framework; hullguard/metrics loads without its
# optional peers and says what to install when one is needed
node -e '
const assert = require("node:assert/strict")
const { Bulkhead } = require("hullguard")
const { admission, parseGrpcTimeout } = require("hullguard/edge")
const { registerPrometheus, metricTable } = require("hullguard/metrics")
const edge = admission({ bulkhead: new Bulkhead({ maxConcurrent: 1 }), deadlineHeader: "grpc-timeout" })
assert.equal(typeof edge.handler(() => {}), "function")
edge.close()
assert.equal(parseGrpcTimeout("1500m"), 1500)
assert.equal(metricTable()[0].name, "hullguard_in_flight")
assert.throws(() => registerPrometheus({}), /prom-client is not installed \(an optional peer dependency/)
console.log("pack-check: hullguard/edge and hullguard/metrics OK")
'

# one limit per host (Linux): HostBulkhead from the installed package, and its `hullguard` bin
if [ "$(uname -s)" = Linux ]; then
    mkdir "$tmp/segments"
    HG_DIR="$tmp/segments" node -e '
const assert = require("node:assert/strict")
const { HostBulkhead } = require("hullguard")
const hb = new HostBulkhead("pack-check", { maxConcurrent: 1, dir: process.env.HG_DIR })
const p = hb.tryAcquire()
assert.equal(hb.tryAcquire(), null)
assert.equal(p.release(), true)
'
    out="$(node_modules/.bin/hullguard host ls --dir "$tmp/segments")"
    grep -q '^pack-check ' <<<"$out" || { echo "pack-check: hullguard host ls did not list the segment: $out" >&2; exit 1; }
    node_modules/.bin/hullguard host rm pack-check --dir "$tmp/segments" >/dev/null
    echo "pack-check: HostBulkhead and the hullguard bin OK"
fi

# types of the installed package, for an ESM and a CommonJS consumer
cat >tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "target": "es2022", "lib": ["es2022", "dom"], "module": "nodenext",
    "moduleResolution": "nodenext", "types": [], "strict": true, "noEmit": true
  },
  "files": ["check.mts", "check.cts"]
}
JSON
cat >check.mts <<'TS'
import { Bulkhead, Registry, type BulkheadStats } from 'hullguard'
const bh = new Bulkhead({ maxConcurrent: 2 })
const n: number = await bh.run(async () => 1)
const s: BulkheadStats = bh.stats()
const q: number = s.rejectedByReason.queue_limit + n
const permit = await new Registry().acquire('k', { weight: 1 })
permit.release()
export { q }
TS
cat >check.cts <<'TS'
import hg = require('hullguard')
const p: hg.Permit | null = new hg.Bulkhead().tryAcquire({ weight: 1 })
export const released: boolean | undefined = p?.release()
TS
"$tsc" -p tsconfig.json
echo "pack-check: types OK"
