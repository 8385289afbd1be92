'use strict'
// The fast path (docs/design.md, the Node binding; index.js header): `acquire()` / `run()` always return
// Promises, and an uncontended call crosses into the addon exactly once to take its permits
// (plus once to release them): through the hot entry points (`fastTake` / `fastGive`, plain
// functions on the handle's slot) when it passes no options to a bulkhead without policies,
// else through the NativeBulkhead methods.

const { test, describe, after, beforeEach } = require('node:test')
const assert = require('node:assert/strict')

// Spy on the addon *before* the facade creates any bulkhead: every method and accessor of
// NativeBulkhead.prototype and of NativeCall.prototype (the granted call of a bulkhead with
// policies), in one list.
const native = require('../native.js')
const { spyPrototype } = require('./helpers.js')
const spy = spyPrototype(native.NativeBulkhead.prototype)
const callSpy = spyPrototype(native.NativeCall.prototype, spy.calls)

const { Bulkhead, Registry, Permit } = require('../index.js')
const { turn, spyFast } = require('./helpers.js')
const fastSpy = spyFast(spy.calls)

after(() => {
  spy.restore()
  callSpy.restore()
  fastSpy.restore()
})

/** Native calls made by `fn` (sync part, plus what its promise does until it settles). */
async function nativeCallsOf(fn) {
  spy.calls.length = 0
  const r = fn()
  await r
  const calls = [...spy.calls]
  return { calls, result: r }
}

const methodsOnly = (calls) => calls.filter((c) => !c.startsWith('get '))

describe('acquire() and run() always return Promises', () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 0 })
  const cases = {
    'granted at once': (b) => b.acquire(),
    'invalid weight': (b) => b.acquire({ weight: 0 }),
    'options not an object': (b) => b.acquire(7),
    'bad signal': (b) => b.acquire({ signal: 1 }),
    'bad queueTimeoutMs': (b) => b.acquire({ queueTimeoutMs: -1 }),
    'run: fn not a function': (b) => b.run(null),
    'run: invalid weight': (b) => b.run(() => 1, { weight: 2 }),
    'run: options null': (b) => b.run(() => 1, null),
    'run: fn throws': (b) =>
      b.run(() => {
        throw new Error('x')
      }),
    'already aborted': (b) => b.acquire({ signal: AbortSignal.abort() }),
    'run already aborted': (b) => b.run(() => 1, { signal: AbortSignal.abort() }),
    'drain bad option': (b) => b.drain({ timeoutMs: 'x' }),
  }
  for (const [name, call] of Object.entries(cases)) {
    test(name, async () => {
      let p
      assert.doesNotThrow(() => {
        p = call(bh)
      })
      assert.ok(p instanceof Promise, name)
      await p.then(
        (v) => v instanceof Permit && v.release(),
        () => {},
      )
    })
  }

  test('rejections at once (full, closed) are Promises too', async () => {
    const b = new Bulkhead({ maxConcurrent: 1, maxQueue: 0 })
    const h = b.tryAcquire()
    for (const p of [b.acquire(), b.run(() => 1), b.acquire({ queueTimeoutMs: 0 })]) {
      assert.ok(p instanceof Promise)
      await assert.rejects(p, { code: 'BULKHEAD_FULL' })
    }
    b.close()
    for (const p of [b.acquire(), b.run(() => 1)]) {
      assert.ok(p instanceof Promise)
      await assert.rejects(p, { code: 'BULKHEAD_CLOSED' })
    }
    h.release()
  })

  test('Registry.run / acquire: key errors are rejected Promises', async () => {
    const reg = new Registry({ maxKeys: 1 })
    const pin = reg.get('a')
    for (const p of [reg.run(1, () => 1), reg.acquire(null), reg.run('b', () => 1), reg.acquire('b')]) {
      assert.ok(p instanceof Promise)
      await assert.rejects(p)
    }
    assert.equal(pin.key, 'a')
  })
})

describe('native calls per uncontended call', () => {
  let bh
  beforeEach(() => {
    bh = new Bulkhead({ maxConcurrent: 4 })
  })

  test('run(): fn runs in the caller’s turn (inline fast path)', async () => {
    let ran = false
    const p = bh.run(() => {
      ran = true
    })
    assert.equal(ran, true)
    await p
  })

  test('run(): one take + one release, no other native function', async () => {
    // A plain bulkhead records no outcome: run() always returns its permits through fastGive.
    const take = (opts) => [opts === undefined ? 'fastTake' : 'enqueue', 'fastGive']
    for (const opts of [undefined, { weight: 2 }, { signal: new AbortController().signal }]) {
      const { calls } = await nativeCallsOf(() => bh.run(() => 1, opts))
      assert.deepEqual(methodsOnly(calls), take(opts), JSON.stringify(opts))
    }
    const { calls } = await nativeCallsOf(() => bh.run(async () => turn()))
    assert.deepEqual(methodsOnly(calls), ['fastTake', 'fastGive'])
  })

  test('acquire(): exactly one native function to take; release(): one', async () => {
    for (const opts of [undefined, { weight: 3 }, { queueTimeoutMs: 5 }]) {
      const { calls, result } = await nativeCallsOf(() => bh.acquire(opts))
      assert.deepEqual(methodsOnly(calls), [opts === undefined ? 'fastTake' : 'enqueue'], JSON.stringify(opts))
      const permit = await result
      spy.calls.length = 0
      permit.release()
      assert.deepEqual(methodsOnly(spy.calls), ['fastGive'])
      spy.calls.length = 0
      ;(await bh.acquire(opts)).release({ outcome: 'failure' })
      assert.ok(spy.calls.includes('release'), 'an outcome given is checked by the addon')
    }
  })

  test('acquire({queueTimeoutMs: 0}): one native call (the core decides "do not queue")', async () => {
    const { calls, result } = await nativeCallsOf(() => bh.acquire({ queueTimeoutMs: 0 }))
    assert.deepEqual(methodsOnly(calls), ['enqueue'])
    ;(await result).release()
  })

  test('run(): exactly 2 native calls in total (getters included)', async () => {
    const { calls } = await nativeCallsOf(() => bh.run(() => 1))
    assert.deepEqual(calls, ['fastTake', 'fastGive'])
  })

  test('acquire(): exactly 1 native call in total (getters included)', async () => {
    const { calls, result } = await nativeCallsOf(() => bh.acquire())
    assert.deepEqual(calls, ['fastTake'])
    ;(await result).release()
  })

  test('no native call while a queued waiter waits (no polling); one per settle', async () => {
    const b = new Bulkhead({ maxConcurrent: 1 })
    const h = await b.acquire()
    const w = b.acquire()
    spy.calls.length = 0
    for (let i = 0; i < 5; i++) await turn()
    assert.deepEqual(spy.calls, [], 'the waiter never polls the addon while it waits')
    h.release()
    assert.deepEqual(methodsOnly(spy.calls), ['fastGive', 'fastPoll'], 'release + the waiter claims its grant')
    ;(await w).release()
  })
})

test('with a breaker: run() is still one enqueue + one release (the NativeCall’s)', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, resilience: { breaker: {}, adaptive: { algorithm: 'aimd' } } })
  await bh.run(() => 1)
  const { calls } = await nativeCallsOf(() => bh.run(() => 1))
  assert.deepEqual(calls, ['enqueue', 'release'])
  const { calls: taken, result } = await nativeCallsOf(() => bh.acquire())
  assert.deepEqual(taken, ['enqueue'])
  spy.calls.length = 0
  ;(await result).release({ outcome: 'failure' })
  assert.deepEqual(spy.calls, ['release'])
})

test('a fast-path run leaves no settled waiter id behind', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1 })
  await bh.run(() => 1)
  ;(await bh.acquire()).release()
  assert.equal(native.settledPending(), 0)
})

describe('the hot entry points refuse misuse (never a crash, never another bulkhead)', () => {
  const fast = native.fastEntryPoints()

  test('a missing or non-number argument is a TypeError naming the function', () => {
    assert.throws(() => fast.fastTake(), { name: 'TypeError', message: /fastTake: argument 0 must be a number/ })
    assert.throws(() => fast.fastGive(0, 'x'), { name: 'TypeError', message: /fastGive: argument 1 must be a number/ })
    assert.throws(() => fast.fastExpire(0, 0), { name: 'TypeError', message: /fastExpire: argument 2/ })
  })

  test('a disposed handle’s slot names nothing, also once its index is reused', () => {
    const a = new native.NativeBulkhead({ maxConcurrent: 2 }, 0)
    const slot = a.fastSlot
    a.dispose()
    assert.throws(() => fast.fastTake(slot, 2 ** 31), /disposed/)
    const b = new native.NativeBulkhead({ maxConcurrent: 2 }, 0)
    assert.notEqual(b.fastSlot, slot, 'a new generation')
    assert.throws(() => fast.fastGive(slot, 1), /disposed/)
    assert.equal(b.stats().active, 0, 'the stale slot reached no bulkhead')
    assert.throws(() => fast.fastTake(2 ** 40 + 12345, 2 ** 31), /disposed/)
  })

  test('a bulkhead with policies has no slot (its calls own a core Call)', () => {
    const nb = new native.NativeBulkhead({ maxConcurrent: 2, resilience: { breaker: {} } }, 0)
    assert.equal(nb.fastSlot, -1)
  })

  test('hot-path waiters: ids reused, every one settled once, nothing left behind', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const order = []
    const all = []
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 50; i++) all.push(bh.run(async () => order.push(round * 50 + i)))
      await Promise.all(all)
    }
    assert.deepEqual(order, [...Array(150).keys()], 'FIFO, each exactly once')
    assert.equal(native.settledPending(), 0)
    const s = bh.stats()
    assert.equal(s.active, 0)
    assert.equal(s.queued, 0)
    assert.equal(s.admittedTotal, 150)
  })
})
