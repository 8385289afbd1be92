'use strict'
// A permit garbage-collected while held is reclaimed on a later turn and counted in
// `leakedTotal` (docs/design.md §8.1; no permit leak when a Node promise is abandoned).
// Runs with --expose-gc (package.json "test").

const { test } = require('node:test')
const assert = require('node:assert/strict')

const { Bulkhead, Registry } = require('../index.js')
const { turn, track, assertIdle } = require('./helpers.js')

assert.equal(typeof global.gc, 'function', 'run with node --expose-gc')

/** GC once, then wait up to 10 setImmediate turns for `done()`. Returns the turns it took. */
async function collect(done) {
  global.gc()
  for (let i = 0; i < 10; i++) {
    if (done()) return i
    await turn()
  }
  return done() ? 10 : -1
}

// Helpers that take permits and drop them (no reference survives the call).
async function leakOne(bh, opts) {
  await bh.acquire(opts)
}
function leakTry(bh, opts) {
  bh.tryAcquire(opts)
}

test('an acquired permit dropped without release is reclaimed and counted in leakedTotal', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  await leakOne(bh)
  assert.equal(bh.stats().active, 1)
  const n = await collect(() => bh.stats().leakedTotal === 1)
  assert.ok(n >= 0, `not reclaimed within 10 turns: ${JSON.stringify(bh.stats())}`)
  const s = bh.stats()
  assertIdle(s)
  assert.equal(s.leakedTotal, 1)
  assert.equal(s.releasedTwiceTotal, 0)
})

test('leakedTotal counts permits: a weighted (partly refunded) permit returns what it still held', async () => {
  const bh = new Bulkhead({ maxConcurrent: 10 })
  await (async () => {
    const p = await bh.acquire({ weight: 5 })
    p.releasePartial(2)
  })()
  leakTry(bh, { weight: 4 })
  assert.equal(bh.stats().active, 7)
  assert.ok((await collect(() => bh.stats().active === 0)) >= 0, JSON.stringify(bh.stats()))
  const s = bh.stats()
  assertIdle(s)
  assert.equal(s.leakedTotal, 7)
})

test('a reclaimed permit is handed to the next waiter', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, queueTimeoutMs: Infinity })
  await leakOne(bh)
  const w = track(bh.acquire())
  await turn()
  assert.equal(w.state, 'pending')
  assert.ok((await collect(() => w.state === 'fulfilled')) >= 0, 'the waiter got the reclaimed permit')
  assert.equal(bh.stats().leakedTotal, 1)
  w.value.release()
  assertIdle(bh.stats())
})

test('an abandoned queued acquire (never awaited) is granted later and reclaimed', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, queueTimeoutMs: Infinity })
  const h = await bh.acquire()
  bh.acquire() // abandoned: nobody will ever hold its permit
  assert.equal(bh.stats().queued, 1)
  h.release()
  await turn() // granted; its Permit object is unreachable
  assert.ok((await collect(() => bh.stats().leakedTotal === 1)) >= 0, JSON.stringify(bh.stats()))
  assertIdle(bh.stats())
})

test('released permits, run() and disposed permits are never counted as leaks', async () => {
  const bh = new Bulkhead({ maxConcurrent: 3 })
  await (async () => {
    ;(await bh.acquire()).release()
    bh.tryAcquire()[Symbol.for('nodejs.dispose')]()
    await bh.run(() => 1)
    await bh.run(() => Promise.reject(new Error('x'))).catch(() => {})
  })()
  global.gc()
  for (let i = 0; i < 5; i++) await turn()
  const s = bh.stats()
  assertIdle(s)
  assert.equal(s.leakedTotal, 0)
})

test('a leaked registry permit is reclaimed and its entry becomes evictable', async () => {
  const reg = new Registry({ maxConcurrent: 1, maxKeys: 1 })
  await (async () => {
    await reg.acquire('a')
  })()
  await assert.rejects(reg.acquire('b'), { reason: 'key_limit' })
  assert.ok((await collect(() => reg.stats().a?.leakedTotal === 1)) >= 0, JSON.stringify(reg.stats()))
  const p = await reg.acquire('b') // 'a' is idle and unheld now
  p.release()
  assert.deepEqual(reg.keys(), ['b'])
})
