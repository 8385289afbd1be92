'use strict'
// Regressions of issue 13 in the Node binding: bug 1 (a user-made Permit crashed the process
// from the FinalizationRegistry), bug 2 (misspelled option names were silently ignored), bug 5
// (URL-shaped override keys were not canonicalised), bug 6 (calls with an already aborted signal
// were not counted; calls sharing one AbortSignal printed MaxListenersExceededWarning).

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const { getEventListeners } = require('node:events')

const native = require('../native.js')
const { Bulkhead, Registry, Permit, BulkheadError, REASONS, originKey } = require('../index.js')
const { turn, turns, track, assertIdle } = require('./helpers.js')

const INDEX = JSON.stringify(require.resolve('../index.js'))

/** Asserts `fn` throws a TypeError naming `key` as unknown and listing the known names. */
function refusesUnknown(fn, key, known) {
  assert.throws(fn, (e) => {
    assert.equal(e.constructor, TypeError, `${e.constructor.name}: ${e.message}`)
    assert.ok(e.message.includes(`unknown option "${key}"`), e.message)
    for (const k of known) assert.ok(e.message.includes(`"${k}"`), `${e.message} lists ${k}`)
    return true
  })
}

async function rejectsUnknown(p, key, known) {
  assert.ok(p instanceof Promise)
  let error
  await p.then(
    () => assert.fail(`resolved: ${key} was ignored`),
    (e) => {
      error = e
    },
  )
  refusesUnknown(() => {
    throw error
  }, key, known)
}

describe('bug 1: a Permit is made only by acquire() / tryAcquire()', () => {
  test('new Permit() is a TypeError', () => {
    assert.throws(() => new Permit(), { name: 'TypeError', message: 'Permit is created by acquire()/tryAcquire()' })
    assert.throws(() => new Permit(Symbol('hullguard.internal')), TypeError)
  })

  test('the issue’s program (many new Permit(), then GC) exits 0', () => {
    const r = spawnSync(
      process.execPath,
      [
        '--expose-gc',
        '-e',
        `const { Permit } = require(${INDEX})
         let refused = 0
         for (let i = 0; i < 1e5; i++) { try { new Permit() } catch (e) { if (e instanceof TypeError) refused++ } }
         global.gc()
         setTimeout(() => process.exit(refused === 1e5 ? 0 : 3), 300)`,
      ],
      { encoding: 'utf8' },
    )
    assert.equal(r.signal, null)
    assert.equal(r.status, 0, r.stderr)
  })
})

describe('bug 2: misspelled option names are refused (TypeError naming them)', () => {
  const BULKHEAD = ['maxConcurrent', 'maxQueue', 'queueTimeoutMs', 'enabled', 'budget', 'maxQueuedCost', 'observe', 'maxOrphaned', 'startLimit', 'maxReservations', 'cancelOnOverrun', 'resilience']

  test('the issue’s five cases', () => {
    refusesUnknown(() => new Bulkhead({ maxConcurent: 3 }), 'maxConcurent', BULKHEAD)
    refusesUnknown(() => new Bulkhead({ queueTimeout: 5 }), 'queueTimeout', BULKHEAD)
    refusesUnknown(() => new Registry({ maxkeys: 1 }), 'maxkeys', [...BULKHEAD, 'maxKeys', 'overrides'])
    refusesUnknown(() => new Bulkhead().tryAcquire({ wieght: 2 }), 'wieght', ['weight'])
    assert.throws(() => new Registry({ overrides: { k: { maxConcurent: 2 } } }), (e) => {
      assert.ok(e instanceof TypeError)
      assert.match(e.message, /^overrides\["k"\]: unknown option "maxConcurent"/)
      return true
    })
  })

  test('inside resilience and its parts; a registry option in an override', () => {
    refusesUnknown(() => new Bulkhead({ resilience: { callTimeout: 5 } }), 'callTimeout', ['adaptive', 'breaker', 'callTimeoutMs'])
    refusesUnknown(() => new Bulkhead({ resilience: { breaker: { openDuration: 5 } } }), 'openDuration', ['openDurationMs'])
    refusesUnknown(() => new Bulkhead({ resilience: { adaptive: { minLimt: 1 } } }), 'minLimt', ['minLimit'])
    refusesUnknown(() => new Registry({ overrides: { k: { maxKeys: 3 } } }), 'maxKeys', BULKHEAD)
    refusesUnknown(() => new Bulkhead({ overrides: {} }), 'overrides', BULKHEAD)
    // `undefined` values and symbol keys are not options.
    assert.equal(new Bulkhead({ maxConcurrent: undefined, [Symbol('x')]: 1 }).maxConcurrent, 10)
  })

  test('per-call options of acquire / run / tryAcquire / drain / release', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2 })
    const call = ['weight', 'signal', 'queueTimeoutMs']
    await rejectsUnknown(bh.acquire({ wieght: 2 }), 'wieght', call)
    await rejectsUnknown(bh.acquire({ queueTimeout: 5 }), 'queueTimeout', call)
    await rejectsUnknown(bh.run(() => 1, { timeoutMs: 5 }), 'timeoutMs', call)
    await rejectsUnknown(new Registry().run('k', () => 1, { sigal: null }), 'sigal', call)
    refusesUnknown(() => bh.tryAcquire({ queueTimeoutMs: 0 }), 'queueTimeoutMs', ['weight'])
    await rejectsUnknown(bh.drain({ timeout: 5 }), 'timeout', ['timeoutMs'])
    const p = bh.tryAcquire()
    refusesUnknown(() => p.release({ outcom: 'failure' }), 'outcom', ['outcome'])
    assert.equal(p.released, false, 'the refused release released nothing')
    assert.equal(p.release(), true)
    const s = bh.stats()
    assertIdle(s)
    assert.equal(s.admittedTotal, 1, 'no refused call was admitted')
  })
})

test('bug 5: URL-shaped override keys are canonical origin keys', async () => {
  const reg = new Registry({ maxConcurrent: 5, overrides: { 'https://Slow.example': { maxConcurrent: 1 } } })
  const key = originKey('https://slow.example/v1/x')
  const held = reg.tryAcquire(key)
  assert.equal(reg.tryAcquire(key), null, 'the override applies to the canonical key')
  assert.equal(reg.stats()[key].maxConcurrent, 1)
  held.release()
  assert.deepEqual(reg.overrides, { 'https://Slow.example': { maxConcurrent: 1 } }, 'as given')
  assert.throws(
    () => new Registry({ overrides: { 'https://a.example': {}, 'https://A.example:443/': {} } }),
    (e) => e instanceof TypeError && /overrides\["https:\/\/A\.example:443\/"\]/.test(e.message),
  )
})

describe('bug 6: AbortSignal', () => {
  test('calls whose signal was already aborted are counted (admitted + rejected = calls)', async () => {
    let seed = 0x2545f491
    const rand = (n) => {
      seed ^= seed << 13
      seed ^= seed >>> 17
      seed ^= seed << 5
      return (seed >>> 0) % n
    }
    const bh = new Bulkhead({ maxConcurrent: 8, maxQueue: 256, queueTimeoutMs: Infinity })
    const calls = 20_000
    let preAborted = 0
    const all = []
    for (let i = 0; i < calls; i++) {
      const ac = new AbortController()
      const r = rand(16)
      if (r === 0) {
        ac.abort()
        preAborted++
      } else if (r === 1) {
        setImmediate(() => ac.abort())
      }
      all.push(bh.run(() => (rand(2) === 0 ? turn() : 1), { signal: ac.signal }).catch(() => {}))
      if (all.length === 64) await Promise.all(all.splice(0))
    }
    await Promise.all(all)
    await turns(2)
    const s = bh.stats()
    assertIdle(s)
    const rejected = Object.values(s.rejectedByReason).reduce((a, b) => a + b, 0)
    assert.ok(preAborted > 0 && s.rejectedByReason.aborted >= preAborted, JSON.stringify(s.rejectedByReason))
    assert.equal(s.admittedTotal + rejected, calls, JSON.stringify(s))
  })

  test('an already aborted signal: one native call, counted aborted, rejects with its reason', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const reason = new Error('gone')
    await assert.rejects(bh.run(() => 1, { signal: AbortSignal.abort(reason) }), (e) => e === reason)
    await assert.rejects(bh.acquire({ signal: AbortSignal.abort(reason) }), (e) => e === reason)
    // An argument error still comes first, and is never counted.
    await assert.rejects(bh.acquire({ weight: 2, signal: AbortSignal.abort(reason) }), RangeError)
    assert.equal(bh.stats().rejectedByReason.aborted, 2)
    assert.equal(bh.stats().admittedTotal, 0)
  })

  test('many calls sharing one signal: one abort listener, no MaxListenersExceededWarning', async () => {
    const warnings = []
    const onWarning = (w) => warnings.push(w)
    process.on('warning', onWarning)
    try {
      const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 100 })
      const held = bh.tryAcquire()
      const ac = new AbortController()
      const waiters = Array.from({ length: 30 }, (_, i) =>
        track(i % 2 ? bh.acquire({ signal: ac.signal }) : bh.run(() => 1, { signal: ac.signal })),
      )
      assert.equal(getEventListeners(ac.signal, 'abort').length, 1)
      ac.abort()
      await turn()
      for (const w of waiters) assert.equal(w.error, ac.signal.reason)
      assert.equal(bh.stats().rejectedByReason.aborted, 30)
      // Settled waiters leave the signal: its listener goes with the last one.
      const ac2 = new AbortController()
      const w2 = Array.from({ length: 12 }, () => track(bh.acquire({ signal: ac2.signal })))
      assert.equal(getEventListeners(ac2.signal, 'abort').length, 1)
      held.release()
      for (let i = 0; i < 12; i++) {
        await turn()
        w2[i].value.release()
      }
      await turn()
      assert.ok(w2.every((w) => w.state === 'fulfilled'))
      assert.equal(getEventListeners(ac2.signal, 'abort').length, 0)
      // run() with callTimeoutMs forwards the caller's signal through the same single listener.
      const timed = new Bulkhead({ maxConcurrent: 20, resilience: { callTimeoutMs: 60_000 } })
      const ac3 = new AbortController()
      const runs = Array.from({ length: 15 }, () =>
        timed.run((s) => new Promise((_, reject) => s.addEventListener('abort', () => reject(s.reason))), {
          signal: ac3.signal,
        }),
      )
      assert.equal(getEventListeners(ac3.signal, 'abort').length, 1)
      ac3.abort()
      for (const r of runs) await assert.rejects(r, (e) => e === ac3.signal.reason)
      assertIdle(timed.stats())
      await turn()
      assert.deepEqual(
        warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map(String),
        [],
      )
    } finally {
      process.off('warning', onWarning)
    }
  })
})

test('REASONS and the BulkheadError codes are the core’s reason table', () => {
  const rows = native.reasons()
  assert.deepEqual([...REASONS], rows.map((r) => r.name))
  for (const r of rows) {
    const e = new BulkheadError(r.name, { active: 0, queued: 0, limit: 1, available: 1 })
    assert.deepEqual([e.code, e.retryable, e.category], [r.code, r.retryable, r.category])
  }
})

test('a package without its addon says what is missing (not "npm has a bug")', () => {
  const fs = require('node:fs')
  const os = require('node:os')
  const path = require('node:path')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hullguard-noaddon-'))
  try {
    for (const f of ['index.js', 'native.js', 'outcome.js', 'http.js', 'package.json']) {
      fs.copyFileSync(path.join(__dirname, '..', f), path.join(dir, f))
    }
    const r = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(path.join(dir, 'index.js'))})`], {
      encoding: 'utf8',
    })
    assert.notEqual(r.status, 0)
    assert.match(r.stderr, /no native addon for .* could be loaded/)
    assert.match(r.stderr, /make node-build/)
    assert.match(r.stderr, /hullguard-linux-x64-gnu/)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
