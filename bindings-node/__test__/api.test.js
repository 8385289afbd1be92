'use strict'
// Every public API of the facade and every error it raises (docs/design.md: reasons, options, stats, registry, origin keys, the Node binding).

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')

const hg = require('../index.js')
const { Bulkhead, Registry, Permit, BulkheadError, originKey, MAX_PERMITS, MAX_QUEUE, REASONS } = hg
const { turn, turns, track, deferred, assertIdle, assertConserved, STATS_KEYS } = require('./helpers.js')

const ALL_REASONS = [
  'concurrency_limit',
  'queue_limit',
  'key_limit',
  'timeout',
  'aborted',
  'shutdown',
  'circuit_open',
  'call_timeout',
  'budget_limit',
  'shed',
  'rate_limit',
]
const zeroRejections = () => Object.fromEntries(ALL_REASONS.map((r) => [r, 0]))

/** Asserts `fn` throws `Type` with a message naming `name`. */
function throwsNaming(fn, Type, name) {
  assert.throws(fn, (e) => {
    assert.equal(e.constructor, Type, `${e.constructor.name}: ${e.message}`)
    assert.match(e.message, new RegExp(`\\b${name}\\b`))
    return true
  })
}

/** Asserts `p` is a Promise rejecting with `Type` naming `name`. */
async function rejectsNaming(p, Type, name) {
  assert.ok(p instanceof Promise, 'must return a Promise')
  await assert.rejects(p, (e) => {
    assert.equal(e.constructor, Type, `${e.constructor.name}: ${e.message}`)
    assert.match(e.message, new RegExp(`\\b${name}\\b`))
    return true
  })
}

describe('constants', () => {
  test('MAX_PERMITS is min(core MAX_PERMITS, 2^53-1); MAX_QUEUE is 2^20', () => {
    assert.equal(MAX_PERMITS, Number.MAX_SAFE_INTEGER) // 64-bit host: core 2^60-1
    assert.ok(Number.isSafeInteger(MAX_PERMITS))
    assert.equal(MAX_QUEUE, 2 ** 20)
  })

  test('REASONS: the admission reasons in hg_reason order, frozen', () => {
    assert.deepEqual([...REASONS], ALL_REASONS)
    assert.ok(Object.isFrozen(REASONS))
  })

  test('the entry exports the public names and the private test hook', () => {
    for (const name of ['Bulkhead', 'BulkheadError', 'MAX_PERMITS', 'MAX_QUEUE', 'Permit', 'REASONS', 'Registry', 'originKey']) {
      assert.ok(name in hg, name)
    }
    assert.equal(typeof hg.__test.kClock, 'symbol')
    assert.equal(typeof hg.__test.VirtualClock, 'function')
  })
})

describe('Bulkhead constructor', () => {
  test('defaults: 10 / 100 / 30 s / enabled', () => {
    for (const bh of [new Bulkhead(), new Bulkhead({})]) {
      assert.equal(bh.maxConcurrent, 10)
      assert.equal(bh.maxQueue, 100)
      assert.equal(bh.queueTimeoutMs, 30_000)
      assert.equal(bh.enabled, true)
      assert.equal(bh.limit, 10)
      assert.equal(bh.closed, false)
      assert.equal(bh.key, null)
    }
  })

  test('options are read back', () => {
    const bh = new Bulkhead({ maxConcurrent: 3, maxQueue: 0, queueTimeoutMs: Infinity, enabled: false })
    assert.equal(bh.maxConcurrent, 3)
    assert.equal(bh.maxQueue, 0)
    assert.equal(bh.queueTimeoutMs, Infinity)
    assert.equal(bh.enabled, false)
    assert.equal(new Bulkhead({ queueTimeoutMs: 0 }).queueTimeoutMs, 0)
    assert.equal(new Bulkhead({ queueTimeoutMs: 1500 }).queueTimeoutMs, 1500)
  })

  test('options must be an object', () => {
    throwsNaming(() => new Bulkhead(null), TypeError, 'options')
    throwsNaming(() => new Bulkhead(5), TypeError, 'options')
    throwsNaming(() => new Bulkhead('x'), TypeError, 'options')
  })

  for (const name of ['maxConcurrent', 'maxQueue']) {
    test(`${name}: TypeError for a non-number, RangeError out of range, naming the option`, () => {
      for (const bad of ['5', 5n, true, {}]) throwsNaming(() => new Bulkhead({ [name]: bad }), TypeError, name)
      for (const bad of [-1, 1.5, NaN, Infinity, -Infinity, 2 ** 53, Number.MAX_VALUE]) {
        throwsNaming(() => new Bulkhead({ [name]: bad }), RangeError, name)
      }
    })
  }

  test('maxConcurrent: 1 … MAX_PERMITS; above MAX_SAFE_INTEGER is a RangeError naming it', () => {
    throwsNaming(() => new Bulkhead({ maxConcurrent: 0 }), RangeError, 'maxConcurrent')
    throwsNaming(() => new Bulkhead({ maxConcurrent: Number.MAX_SAFE_INTEGER + 1 }), RangeError, 'maxConcurrent')
    throwsNaming(() => new Bulkhead({ maxConcurrent: Number.MAX_SAFE_INTEGER + 2 }), RangeError, 'maxConcurrent')
    const big = new Bulkhead({ maxConcurrent: MAX_PERMITS, maxQueue: 0 })
    assert.equal(big.maxConcurrent, MAX_PERMITS)
    const s = big.stats()
    assert.equal(s.available, MAX_PERMITS)
    const p = big.tryAcquire({ weight: MAX_PERMITS })
    assert.ok(p)
    assert.equal(big.stats().active, MAX_PERMITS)
    assert.equal(big.tryAcquire(), null)
    p.release()
    assertIdle(big.stats())
  })

  test('maxQueue: 0 … MAX_QUEUE (C09: MAX_QUEUE succeeds and queues; above is a RangeError)', async () => {
    throwsNaming(() => new Bulkhead({ maxQueue: MAX_QUEUE + 1 }), RangeError, 'maxQueue')
    throwsNaming(() => new Bulkhead({ maxQueue: Number.MAX_SAFE_INTEGER + 1 }), RangeError, 'maxQueue')
    const bh = new Bulkhead({ maxConcurrent: 10, maxQueue: MAX_QUEUE, queueTimeoutMs: Infinity })
    const held = []
    for (let i = 0; i < 10; i++) held.push(bh.tryAcquire())
    const waiters = []
    for (let i = 0; i < 1000; i++) waiters.push(bh.acquire())
    const s = bh.stats()
    assert.equal(s.queued, 1000)
    assert.deepEqual(s.rejectedByReason, zeroRejections())
    bh.close()
    const results = await Promise.allSettled(waiters)
    assert.ok(results.every((r) => r.status === 'rejected' && r.reason.code === 'BULKHEAD_CLOSED'))
    for (const p of held) p.release()
  })

  test('queueTimeoutMs: a number of ms ≥ 0 or Infinity', () => {
    for (const bad of ['10', {}, true]) throwsNaming(() => new Bulkhead({ queueTimeoutMs: bad }), TypeError, 'queueTimeoutMs')
    for (const bad of [-1, -Infinity, NaN]) throwsNaming(() => new Bulkhead({ queueTimeoutMs: bad }), RangeError, 'queueTimeoutMs')
  })

  test('queueTimeoutMs: a huge finite value is a RangeError (or no deadline), never a process abort', () => {
    for (const v of ['1e300', 'Number.MAX_VALUE', '1.9e22']) {
      const r = spawnSync(
        process.execPath,
        [
          '-e',
          `const { Bulkhead, Registry } = require(${JSON.stringify(require.resolve('../index.js'))})
           for (const make of [() => new Bulkhead({ queueTimeoutMs: ${v} }),
                               () => new Registry({ overrides: { k: { queueTimeoutMs: ${v} } } })]) {
             try { make() } catch (e) { if (!(e instanceof RangeError) || !/queueTimeoutMs/.test(e.message)) throw e }
           }`,
        ],
        { encoding: 'utf8' },
      )
      assert.equal(r.signal, null, `queueTimeoutMs ${v}: the process died with ${r.signal}`)
      assert.equal(r.status, 0, `queueTimeoutMs ${v}: ${r.stderr.split('\n')[0]}`)
    }
  })

  test('null is "not given" (the core null rule): defaults, inherited in overrides; parts and callTimeoutMs off', async () => {
    const bh = new Bulkhead({ maxConcurrent: null, maxQueue: null, queueTimeoutMs: null, enabled: null, resilience: null })
    assert.deepEqual(
      [bh.maxConcurrent, bh.maxQueue, bh.queueTimeoutMs, bh.enabled],
      [10, 100, 30000, true],
      'null queueTimeoutMs is the default 30 s, not "no deadline"',
    )
    // Per-call options too: a null weight is one permit, a null queue timeout the bulkhead's.
    const p1 = bh.tryAcquire({ weight: null })
    assert.equal(p1.weight, 1)
    p1.release()
    const p2 = await bh.acquire({ weight: null, queueTimeoutMs: null })
    assert.equal(p2.weight, 1)
    p2.release()
    const off = new Bulkhead({ resilience: { adaptive: null, breaker: null, callTimeoutMs: null } })
    assert.equal(off.stats().adaptive, null)
    assert.equal(off.stats().circuit, null)
    const reg = new Registry({
      maxConcurrent: 1,
      queueTimeoutMs: 0,
      resilience: { breaker: { failureThreshold: 1 }, callTimeoutMs: 20 },
      overrides: {
        inherit: { maxConcurrent: null, queueTimeoutMs: null, resilience: { breaker: { failureThreshold: null } } },
        off: { resilience: { breaker: null, callTimeoutMs: null } },
        none: null,
      },
      maxKeys: null,
    })
    for (const key of ['inherit', 'none']) {
      const p = reg.tryAcquire(key)
      assert.ok(p, key)
      // queueTimeoutMs inherited (0): no queueing; a null would have been "no deadline" before.
      await assert.rejects(reg.acquire(key), { reason: 'concurrency_limit' }, key)
      p.release({ outcome: 'failure' })
      assert.equal(reg.stats()[key].circuit.state, 'open', `${key}: the breaker (threshold 1) is inherited`)
    }
    // call timeout off: a call longer than the defaults' 20 ms completes.
    assert.equal(await reg.run('off', () => new Promise((r) => setTimeout(() => r(7), 60))), 7)
    assert.equal(reg.stats().off.circuit, null)
  })

  test('enabled must be a boolean', () => {
    for (const bad of [1, 'true']) throwsNaming(() => new Bulkhead({ enabled: bad }), TypeError, 'enabled')
  })

  test('enabled: false admits everything and still counts it', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, enabled: false })
    const a = bh.tryAcquire()
    const b = await bh.acquire()
    const c = bh.tryAcquire()
    assert.ok(a && b && c)
    const s = bh.stats()
    assert.equal(s.active, 3)
    assert.equal(s.available, -2)
    assert.equal(s.admittedTotal, 3)
    a.release()
    b.release()
    c.release()
    assertIdle(bh.stats())
  })
})

describe('run(fn, {signal, weight, queueTimeoutMs})', () => {
  test('resolves with fn’s value and releases when fn resolves', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2 })
    let during
    const v = await bh.run(async () => {
      during = bh.stats().active
      await turn()
      return 'ok'
    })
    assert.equal(v, 'ok')
    assert.equal(during, 1)
    assertIdle(bh.stats())
    assert.equal(await bh.run(() => 7), 7) // a plain value
  })

  test('releases when fn rejects, and rejects with the same error', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const err = new Error('boom')
    await assert.rejects(
      bh.run(async () => {
        throw err
      }),
      (e) => e === err,
    )
    assertIdle(bh.stats())
  })

  test('releases when fn throws synchronously; run still returns a rejected Promise', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const err = new Error('sync')
    let p
    assert.doesNotThrow(() => {
      p = bh.run(() => {
        throw err
      })
    })
    assert.ok(p instanceof Promise)
    await assert.rejects(p, (e) => e === err)
    assertIdle(bh.stats())
  })

  test('fn gets the call’s signal (undefined without one)', async () => {
    const bh = new Bulkhead()
    const ac = new AbortController()
    assert.equal(await bh.run((s) => s, { signal: ac.signal }), ac.signal)
    assert.equal(await bh.run((s) => s), undefined)
    assert.equal(await bh.run((...args) => args.length), 1)
  })

  test('weight holds that many permits', async () => {
    const bh = new Bulkhead({ maxConcurrent: 5 })
    const seen = await bh.run(() => bh.stats().active, { weight: 4 })
    assert.equal(seen, 4)
    assertIdle(bh.stats())
  })

  test('queued run: fn starts after a release and releases its own permits', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = await bh.acquire()
    let ran = false
    const p = track(bh.run(() => (ran = true)))
    await turns(2)
    assert.equal(ran, false)
    assert.equal(bh.stats().queued, 1)
    h.release()
    await turns(1)
    assert.equal(ran, true)
    assert.equal(p.state, 'fulfilled')
    assertIdle(bh.stats())
    assert.equal(bh.stats().queueWaitCount, 1)
  })

  test('argument errors reject (never throw): fn, options, weight, queueTimeoutMs, signal', async () => {
    const bh = new Bulkhead({ maxConcurrent: 3 })
    await rejectsNaming(bh.run(), TypeError, 'fn')
    await rejectsNaming(bh.run('x'), TypeError, 'fn')
    await rejectsNaming(bh.run(() => 1, null), TypeError, 'options')
    await rejectsNaming(bh.run(() => 1, 3), TypeError, 'options')
    await rejectsNaming(bh.run(() => 1, { weight: '1' }), TypeError, 'weight')
    await rejectsNaming(bh.run(() => 1, { weight: 0 }), RangeError, 'weight')
    await rejectsNaming(bh.run(() => 1, { weight: 4 }), RangeError, 'weight')
    await rejectsNaming(bh.run(() => 1, { weight: 1.5 }), RangeError, 'weight')
    await rejectsNaming(bh.run(() => 1, { weight: 2 ** 53 }), RangeError, 'weight')
    await rejectsNaming(bh.run(() => 1, { queueTimeoutMs: -1 }), RangeError, 'queueTimeoutMs')
    await rejectsNaming(bh.run(() => 1, { queueTimeoutMs: NaN }), RangeError, 'queueTimeoutMs')
    await rejectsNaming(bh.run(() => 1, { queueTimeoutMs: '5' }), TypeError, 'queueTimeoutMs')
    await rejectsNaming(bh.run(() => 1, { signal: {} }), TypeError, 'signal')
    await rejectsNaming(bh.run(() => 1, { signal: 'abort' }), TypeError, 'signal')
    const s = bh.stats()
    assert.deepEqual(s.rejectedByReason, zeroRejections(), 'argument errors are never counted')
    assert.equal(s.admittedTotal, 0)
  })

  test('queueTimeoutMs: null / undefined use the default; 0 does not queue', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, queueTimeoutMs: 5 })
    assert.equal(await bh.run(() => 1, { queueTimeoutMs: null }), 1)
    const h = bh.tryAcquire()
    await assert.rejects(bh.run(() => 1, { queueTimeoutMs: 0 }), { code: 'BULKHEAD_FULL', reason: 'concurrency_limit' })
    assert.equal(bh.stats().queued, 0)
    const keep = setTimeout(() => {}, 1000)
    await assert.rejects(bh.run(() => 1, { queueTimeoutMs: null }), { code: 'BULKHEAD_QUEUE_TIMEOUT' })
    clearTimeout(keep)
    h.release()
  })
})

describe('acquire(opts) / Permit', () => {
  test('acquire resolves with a Permit; release() is idempotent and reports', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2 })
    const p = bh.acquire()
    assert.ok(p instanceof Promise)
    const permit = await p
    assert.ok(permit instanceof Permit)
    assert.equal(permit.weight, 1)
    assert.equal(permit.released, false)
    assert.equal(permit.key, null)
    assert.equal(bh.stats().active, 1)
    assert.equal(permit.release(), true)
    assert.equal(permit.released, true)
    assert.equal(permit.weight, 0)
    assert.equal(bh.stats().releasedTwiceTotal, 0)
    assert.equal(permit.release(), false)
    assert.equal(permit.release(), false)
    const s = bh.stats()
    assert.equal(s.releasedTwiceTotal, 2, 'every explicit second release is counted')
    assertIdle(s)
  })

  test('weighted acquire and releasePartial(n)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 10, maxQueue: 4 })
    const h = await bh.acquire({ weight: 8 })
    assert.equal(h.weight, 8)
    const w = track(bh.acquire({ weight: 4 }))
    await turn()
    assert.equal(w.state, 'pending')
    h.releasePartial(2) // the refund hands 4 on at once
    await turn()
    assert.equal(w.state, 'fulfilled')
    assert.equal(h.weight, 6)
    let s = bh.stats()
    assert.equal(s.active, 10)
    assert.equal(s.available, 0)
    throwsNaming(() => h.releasePartial(0), RangeError, 'n')
    throwsNaming(() => h.releasePartial(7), RangeError, 'n')
    throwsNaming(() => h.releasePartial(1.5), RangeError, 'n')
    throwsNaming(() => h.releasePartial('1'), TypeError, 'n')
    throwsNaming(() => h.releasePartial(), TypeError, 'n')
    h.releasePartial(6)
    assert.equal(h.weight, 0)
    assert.equal(h.release(), true, 'a fully refunded permit is still released once')
    assert.throws(() => h.releasePartial(1), RangeError)
    assert.equal(w.value.release(), true)
    s = bh.stats()
    assertIdle(s)
    assert.equal(s.releasedTwiceTotal, 0)
  })

  test('[Symbol.dispose] and Symbol.for("nodejs.dispose") release silently', async () => {
    const keys = [Symbol.for('nodejs.dispose')]
    if (typeof Symbol.dispose === 'symbol') keys.push(Symbol.dispose)
    for (const key of keys) {
      const bh = new Bulkhead({ maxConcurrent: 2 })
      const p = await bh.acquire()
      assert.equal(typeof p[key], 'function')
      p[key]()
      assert.equal(p.released, true)
      assert.equal(bh.stats().active, 0)
      p[key]() // a second dispose: silent, not counted
      assert.equal(bh.stats().releasedTwiceTotal, 0)
      assert.equal(p.release(), false, 'an explicit release after dispose reports false')
      assert.equal(bh.stats().releasedTwiceTotal, 1)
      assertIdle(bh.stats())
    }
    const bh = new Bulkhead()
    const p = await bh.acquire()
    p.release()
    p[Symbol.for('nodejs.dispose')]()
    assert.equal(bh.stats().releasedTwiceTotal, 0, 'dispose after release is never counted')
  })

  test('acquire argument errors reject with TypeError / RangeError naming the option', async () => {
    const bh = new Bulkhead({ maxConcurrent: 3 })
    await rejectsNaming(bh.acquire(null), TypeError, 'options')
    await rejectsNaming(bh.acquire('x'), TypeError, 'options')
    await rejectsNaming(bh.acquire({ weight: 0 }), RangeError, 'weight')
    await rejectsNaming(bh.acquire({ weight: 4 }), RangeError, 'weight')
    await rejectsNaming(bh.acquire({ weight: -1 }), RangeError, 'weight')
    await rejectsNaming(bh.acquire({ weight: Number.MAX_SAFE_INTEGER + 1 }), RangeError, 'weight')
    await rejectsNaming(bh.acquire({ weight: '2' }), TypeError, 'weight')
    await rejectsNaming(bh.acquire({ queueTimeoutMs: -5 }), RangeError, 'queueTimeoutMs')
    await rejectsNaming(bh.acquire({ queueTimeoutMs: NaN }), RangeError, 'queueTimeoutMs')
    await rejectsNaming(bh.acquire({ queueTimeoutMs: {} }), TypeError, 'queueTimeoutMs')
    await rejectsNaming(bh.acquire({ signal: { aborted: false } }), TypeError, 'signal')
    assert.deepEqual(bh.stats().rejectedByReason, zeroRejections())
  })

  test('weight above the current limit (≤ maxConcurrent) is concurrency_limit at once', async () => {
    const bh = new Bulkhead({ maxConcurrent: 10, maxQueue: 4 })
    bh.setLimit(4)
    await assert.rejects(bh.acquire({ weight: 5 }), { code: 'BULKHEAD_FULL', reason: 'concurrency_limit' })
    assert.equal(bh.stats().queued, 0)
    const p = await bh.acquire({ weight: 4 })
    p.release()
  })
})

describe('tryAcquire({weight})', () => {
  test('synchronous: a Permit, or null only for concurrency_limit (counted)', () => {
    const bh = new Bulkhead({ maxConcurrent: 3 })
    const a = bh.tryAcquire({ weight: 2 })
    assert.ok(a instanceof Permit)
    assert.equal(a.weight, 2)
    assert.equal(bh.tryAcquire({ weight: 2 }), null)
    const b = bh.tryAcquire()
    assert.ok(b instanceof Permit)
    assert.equal(bh.tryAcquire(), null)
    assert.equal(bh.stats().rejectedByReason.concurrency_limit, 2)
    a.release()
    b.release()
    assertIdle(bh.stats())
  })

  test('does not barge past a queued waiter (I6)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 3, maxQueue: 4 })
    const h = bh.tryAcquire({ weight: 2 })
    const w = track(bh.acquire({ weight: 2 }))
    assert.equal(bh.tryAcquire(), null, 'a permit is free but a waiter is queued')
    h.release()
    await turn()
    assert.equal(w.state, 'fulfilled')
    w.value.release()
  })

  test('argument errors throw synchronously', () => {
    const bh = new Bulkhead({ maxConcurrent: 2 })
    throwsNaming(() => bh.tryAcquire(null), TypeError, 'options')
    throwsNaming(() => bh.tryAcquire({ weight: 0 }), RangeError, 'weight')
    throwsNaming(() => bh.tryAcquire({ weight: 3 }), RangeError, 'weight')
    throwsNaming(() => bh.tryAcquire({ weight: '1' }), TypeError, 'weight')
    throwsNaming(() => bh.tryAcquire({ weight: 2 ** 53 }), RangeError, 'weight')
    assert.deepEqual(bh.stats().rejectedByReason, zeroRejections())
  })

  test('after close() it throws BulkheadError BULKHEAD_CLOSED (not null)', () => {
    const bh = new Bulkhead({ maxConcurrent: 2 })
    bh.close()
    assert.throws(
      () => bh.tryAcquire(),
      (e) => {
        assert.ok(e instanceof BulkheadError)
        assert.ok(e instanceof Error)
        assert.equal(e.name, 'BulkheadError')
        assert.equal(e.code, 'BULKHEAD_CLOSED')
        assert.equal(e.reason, 'shutdown')
        assert.equal(e.retryable, false)
        assert.equal(e.category, 'resilience')
        assert.deepEqual(e.snapshot, { active: 0, queued: 0, limit: 2, available: 2, key: null })
        return true
      },
    )
    assert.equal(bh.stats().rejectedByReason.shutdown, 1)
  })
})

describe('BulkheadError', () => {
  test('queue_limit: BULKHEAD_FULL, retryable, snapshot at the rejection', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 1 })
    const h = bh.tryAcquire()
    const w = bh.acquire()
    await assert.rejects(bh.acquire(), (e) => {
      assert.ok(e instanceof BulkheadError)
      assert.equal(e.code, 'BULKHEAD_FULL')
      assert.equal(e.reason, 'queue_limit')
      assert.equal(e.retryable, true)
      assert.equal(e.category, 'resilience')
      assert.deepEqual(e.snapshot, { active: 1, queued: 1, limit: 1, available: 0, key: null })
      assert.match(e.message, /queue_limit/)
      return true
    })
    h.release()
    ;(await w).release()
    assert.equal(bh.stats().rejectedByReason.queue_limit, 1)
  })

  test('timeout: BULKHEAD_QUEUE_TIMEOUT, retryable, not a TimeoutError', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, queueTimeoutMs: 5 })
    const h = bh.tryAcquire()
    const keep = setTimeout(() => {}, 1000) // the queue timer is unref'd
    await assert.rejects(bh.acquire(), (e) => {
      assert.ok(e instanceof BulkheadError)
      assert.equal(e.code, 'BULKHEAD_QUEUE_TIMEOUT')
      assert.equal(e.reason, 'timeout')
      assert.equal(e.retryable, true)
      assert.notEqual(e.name, 'TimeoutError')
      assert.equal(e.snapshot.queued, 0)
      return true
    })
    await assert.rejects(bh.acquire({ queueTimeoutMs: 1 }), { reason: 'timeout' })
    clearTimeout(keep)
    assert.equal(bh.stats().rejectedByReason.timeout, 2)
    h.release()
    assertIdle(bh.stats())
  })

  test('per-call queueTimeoutMs: Infinity never times out', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, queueTimeoutMs: 1 })
    const h = bh.tryAcquire()
    const w = track(bh.acquire({ queueTimeoutMs: Infinity }))
    await new Promise((r) => setTimeout(r, 20))
    assert.equal(w.state, 'pending')
    h.release()
    await turn()
    assert.equal(w.state, 'fulfilled')
    w.value.release()
  })

  test('a queue timeout above 2^31-1 ms does not fire after 1 ms', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, queueTimeoutMs: 2 ** 31 })
    const h = bh.tryAcquire()
    const onWarning = () => {}
    process.on('warning', onWarning)
    try {
      const w = track(bh.acquire())
      const v = track(bh.acquire({ queueTimeoutMs: 30 * 24 * 3600 * 1000 }))
      const d = track(bh.drain({ timeoutMs: 2 ** 31 }))
      await new Promise((r) => setTimeout(r, 20))
      assert.equal(w.state, 'pending', `default timeout 2^31 ms: ${w.error && w.error.code}`)
      assert.equal(v.state, 'pending', `per-call 30 days: ${v.error && v.error.code}`)
      assert.equal(d.state, 'pending', `drain({timeoutMs: 2^31}) resolved ${JSON.stringify(d.value)}`)
    } finally {
      process.off('warning', onWarning)
      bh.close()
      h.release()
    }
  })

  test('shutdown: queued waiters and new acquires reject BULKHEAD_CLOSED, not retryable', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 4 })
    const h = await bh.acquire()
    const w1 = track(bh.acquire())
    const w2 = track(bh.run(() => assert.fail('never runs')))
    bh.close()
    assert.equal(bh.closed, true)
    await turn()
    for (const w of [w1, w2]) {
      assert.equal(w.state, 'rejected')
      assert.equal(w.error.code, 'BULKHEAD_CLOSED')
      assert.equal(w.error.retryable, false)
    }
    await assert.rejects(bh.acquire(), { code: 'BULKHEAD_CLOSED', reason: 'shutdown' })
    await assert.rejects(bh.run(() => 1), { code: 'BULKHEAD_CLOSED' })
    assert.equal(h.release(), true, 'in-flight work releases normally (I8)')
    const s = bh.stats()
    assertIdle(s)
    assert.equal(s.rejectedByReason.shutdown, 4)
  })

  test('BulkheadError can be constructed (code / retryable derive from the reason)', () => {
    const e = new BulkheadError('key_limit', { active: 0, queued: 0, limit: 0, available: 0 }, 'k')
    assert.equal(e.code, 'BULKHEAD_FULL')
    assert.equal(e.retryable, true)
    assert.equal(e.snapshot.key, 'k')
    const c = new BulkheadError('circuit_open', { active: 1, queued: 0, limit: 1, available: 0 })
    assert.equal(c.code, 'CIRCUIT_OPEN')
    assert.equal(c.snapshot.key, null)
    assert.equal(new BulkheadError('call_timeout', {}).code, 'BULKHEAD_CALL_TIMEOUT')
    assert.equal(new BulkheadError('shutdown', {}).retryable, false)
  })
})

describe('setLimit(n)', () => {
  test('growing hands permits to waiters; shrinking never revokes', async () => {
    const bh = new Bulkhead({ maxConcurrent: 4, maxQueue: 4 })
    bh.setLimit(1)
    assert.equal(bh.limit, 1)
    const h = await bh.acquire()
    const w1 = track(bh.acquire())
    const w2 = track(bh.acquire())
    bh.setLimit(3)
    await turn()
    assert.equal(w1.state, 'fulfilled')
    assert.equal(w2.state, 'fulfilled')
    bh.setLimit(1)
    let s = bh.stats()
    assert.equal(s.limit, 1)
    assert.equal(s.active, 3)
    assert.equal(s.available, -2)
    assert.equal(bh.tryAcquire(), null)
    h.release()
    w1.value.release()
    w2.value.release()
    s = bh.stats()
    assertIdle(s)
    assert.equal(s.limit, 1)
  })

  test('invalid limits: TypeError / RangeError naming limit, never counted', () => {
    const bh = new Bulkhead({ maxConcurrent: 4 })
    for (const bad of [0, 5, -1, 1.5, NaN, 2 ** 53]) throwsNaming(() => bh.setLimit(bad), RangeError, 'limit')
    for (const bad of [undefined, '2', null]) throwsNaming(() => bh.setLimit(bad), TypeError, 'limit')
    assert.equal(bh.limit, 4)
  })
})

describe('stats()', () => {
  test('camelCase field names, snake_case reason keys, adaptive/circuit/budget/load null', () => {
    const bh = new Bulkhead()
    const s = bh.stats()
    assert.deepEqual(Object.keys(s).sort(), [...STATS_KEYS].sort())
    assert.deepEqual(Object.keys(s.rejectedByReason).sort(), [...ALL_REASONS].sort())
    assert.deepEqual(s, {
      active: 0,
      queued: 0,
      grantedUnclaimed: 0,
      limit: 10,
      maxConcurrent: 10,
      available: 10,
      admittedTotal: 0,
      rejectedByReason: zeroRejections(),
      releasedTwiceTotal: 0,
      leakedTotal: 0,
      orphanedInFlight: 0,
      orphanedTotal: 0,
      ringFree: 256,
      queueWaitCount: 0,
      queueWaitSumNs: 0,
      queueWaitMaxNs: 0,
      // C35: power-of-two buckets of ns, keyed by their exclusive upper bound (kept exactly).
      queueWaitHistogram: Object.fromEntries(
        [...Array.from({ length: 27 }, (_, i) => String(2 ** (10 + i))), 'inf'].map((k) => [k, 0]),
      ),
      revision: 0,
      observe: 'off',
      observedByReason: zeroRejections(),
      observerPanics: 0,
      reservationsHeld: 0,
      reservationsExpiredTotal: 0,
      adaptive: null,
      circuit: null,
      budget: null,
      load: null,
    })
    assert.notEqual(bh.stats(), bh.stats(), 'a fresh object each call')
  })

  test('the observe option comes from the core table (stats().observedByReason)', () => {
    // Observe (shadow) mode, docs/design.md §4.7: decided and counted by the core (C32 step 1
    // in small); the rest of C32 comes with the bindings' gateway admission.
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 0, observe: 'all' })
    const [a, b] = [bh.tryAcquire(), bh.tryAcquire()]
    const s = bh.stats()
    assert.deepEqual([s.active, s.available, s.observe], [2, -1, 'all'])
    assert.equal(s.observedByReason.concurrency_limit, 1)
    assert.equal(s.rejectedByReason.concurrency_limit, 0)
    a.release()
    b.release()
    throwsNaming(() => new Bulkhead({ observe: 'shadow' }), RangeError, 'observe')
    throwsNaming(() => new Bulkhead({ observe: true }), TypeError, 'observe')
    throwsNaming(() => new Bulkhead({ observe: 'budget' }), RangeError, 'observe')
    const r = new Registry({ maxConcurrent: 1, maxQueue: 0, overrides: { shadow: { observe: 'all' } } })
    const [p, q] = [r.tryAcquire('shadow'), r.tryAcquire('shadow')]
    assert.equal(r.stats().shadow.observedByReason.concurrency_limit, 1)
    p.release()
    q.release()
  })

  test('the budget option comes from the core table (stats().budget)', () => {
    // Per-call costs come with the bindings' gateway admission; every call costs 0 until then.
    const bh = new Bulkhead({ maxConcurrent: 4, budget: 500 })
    const b = bh.stats().budget
    assert.deepEqual([b.limit, b.maxBudget, b.inUse, b.available], [500, 500, 0, 500])
    bh.tryAcquire().release()
    throwsNaming(() => new Bulkhead({ budget: 0 }), RangeError, 'budget')
    throwsNaming(() => new Bulkhead({ budget: '5' }), TypeError, 'budget')
    throwsNaming(() => new Bulkhead({ maxConcurrent: 300_000, budget: 10 }), RangeError, 'budget')
    // The streaming and queue-bound keys of the block (docs/design.md §4.5).
    assert.deepEqual([b.overrunHeld, b.queuedCost], [0, 0])
    assert.equal(new Bulkhead({ budget: 10, maxQueuedCost: 5 }).stats().budget.queuedCost, 0)
    throwsNaming(() => new Bulkhead({ maxQueuedCost: 5 }), RangeError, 'maxQueuedCost')
    const r = new Registry({ budget: 100, overrides: { small: { budget: 10 } } })
    r.tryAcquire('small').release()
    r.tryAcquire('big').release()
    const s = r.stats()
    assert.deepEqual([s.small.budget.limit, s.big.budget.limit], [10, 100])
  })

  test('queue wait figures are integers in ns', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = bh.tryAcquire()
    const w = bh.acquire()
    await new Promise((r) => setTimeout(r, 5))
    h.release()
    ;(await w).release()
    const s = bh.stats()
    assert.equal(s.queueWaitCount, 1)
    assert.ok(Number.isSafeInteger(s.queueWaitSumNs) && s.queueWaitSumNs >= 1_000_000, `${s.queueWaitSumNs}`)
    assert.equal(s.queueWaitMaxNs, s.queueWaitSumNs)
  })
})

describe('close() / drain({timeoutMs})', () => {
  test('drain reports {drained, active, queued}; timeoutMs 0 reports at once', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 2 })
    assert.deepEqual(await bh.drain({ timeoutMs: 0 }), { drained: true, active: 0, queued: 0 })
    assert.deepEqual(await bh.drain(), { drained: true, active: 0, queued: 0 })
    const h = await bh.acquire()
    const w = bh.acquire()
    assert.deepEqual(await bh.drain({ timeoutMs: 0 }), { drained: false, active: 1, queued: 1 })
    assert.equal(bh.closed, false, 'drain does not close')
    const d = track(bh.drain())
    h.release()
    await turn()
    assert.equal(d.state, 'pending', 'the granted waiter is still active')
    ;(await w).release()
    await turn()
    assert.deepEqual(d.value, { drained: true, active: 0, queued: 0 })
  })

  test('drain with a timeout resolves drained: false when it passes', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = await bh.acquire()
    const keep = setTimeout(() => {}, 1000) // drain's timer is unref'd
    assert.deepEqual(await bh.drain({ timeoutMs: 10 }), { drained: false, active: 1, queued: 0 })
    clearTimeout(keep)
    h.release()
  })

  test('graceful shutdown: close() then drain()', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2 })
    const a = await bh.acquire()
    const r = track(bh.run(() => turns(3)))
    bh.close()
    const d = track(bh.drain())
    await turns(5)
    assert.equal(r.state, 'fulfilled')
    assert.equal(d.state, 'pending')
    a.release()
    await turn()
    assert.deepEqual(d.value, { drained: true, active: 0, queued: 0 })
  })

  test('drain option errors reject (never throw)', async () => {
    const bh = new Bulkhead()
    await rejectsNaming(bh.drain(null), TypeError, 'options')
    await rejectsNaming(bh.drain({ timeoutMs: -1 }), RangeError, 'timeoutMs')
    await rejectsNaming(bh.drain({ timeoutMs: NaN }), RangeError, 'timeoutMs')
    await rejectsNaming(bh.drain({ timeoutMs: '1' }), TypeError, 'timeoutMs')
  })
})

describe('Registry', () => {
  test('defaults, overrides (frozen, as given) and maxKeys', () => {
    const overrides = { big: { maxConcurrent: 3 } }
    const reg = new Registry({ maxConcurrent: 1, maxQueue: 0, overrides, maxKeys: 5 })
    assert.equal(reg.maxKeys, 5)
    assert.deepEqual(reg.overrides, overrides)
    assert.ok(Object.isFrozen(reg.overrides))
    assert.equal(new Registry().maxKeys, 1024)
    const big = reg.tryAcquire('big', { weight: 3 })
    assert.ok(big)
    assert.equal(big.key, 'big')
    throwsNaming(() => reg.tryAcquire('small', { weight: 2 }), RangeError, 'weight')
    const st = reg.stats()
    assert.equal(st.big.maxConcurrent, 3)
    assert.equal(st.big.active, 3)
    assert.equal(st.big.adaptive, null)
    assert.equal(st.big.circuit, null)
    assert.deepEqual(Object.keys(st.big).sort(), [...STATS_KEYS].sort())
    big.release()
  })

  test('option errors name the option (overrides["k"]: …)', () => {
    throwsNaming(() => new Registry(null), TypeError, 'options')
    throwsNaming(() => new Registry({ maxKeys: 0 }), RangeError, 'maxKeys')
    throwsNaming(() => new Registry({ maxKeys: 2 ** 53 }), RangeError, 'maxKeys')
    throwsNaming(() => new Registry({ maxKeys: '4' }), TypeError, 'maxKeys')
    throwsNaming(() => new Registry({ maxConcurrent: 0 }), RangeError, 'maxConcurrent')
    throwsNaming(() => new Registry({ overrides: 5 }), TypeError, 'overrides')
    assert.throws(() => new Registry({ overrides: { k: 5 } }), (e) => e instanceof TypeError && e.message.startsWith('overrides["k"]: '))
    assert.throws(() => new Registry({ overrides: { k: { maxQueue: -1 } } }), (e) => {
      assert.ok(e instanceof RangeError)
      assert.match(e.message, /overrides\["k"\]/)
      assert.match(e.message, /maxQueue/)
      return true
    })
  })

  test('run(key, fn, opts), acquire(key, opts), tryAcquire(key, {weight}) per key', async () => {
    const reg = new Registry({ maxConcurrent: 1, maxQueue: 1 })
    const ac = new AbortController()
    assert.equal(await reg.run('a', (s) => s, { signal: ac.signal }), ac.signal)
    const p = await reg.acquire('a', { weight: 1 })
    assert.equal(p.key, 'a')
    assert.equal(reg.tryAcquire('a'), null)
    const other = reg.tryAcquire('b', { weight: 1 })
    assert.ok(other, 'keys are independent')
    const queued = track(reg.run('a', () => 'later'))
    await assert.rejects(reg.acquire('a'), (e) => {
      assert.equal(e.code, 'BULKHEAD_FULL')
      assert.equal(e.reason, 'queue_limit')
      assert.equal(e.snapshot.key, 'a')
      assert.match(e.message, /key="a"/)
      return true
    })
    p.release()
    other.release()
    await turn()
    assert.equal(queued.value, 'later')
    const st = reg.stats()
    assert.deepEqual(Object.keys(st).sort(), ['a', 'b'])
    assertIdle(st.a)
    assertIdle(st.b)
    assert.equal(st.a.rejectedByReason.concurrency_limit, 1)
    assert.equal(st.a.rejectedByReason.queue_limit, 1)
  })

  test('key argument errors: TypeError (rejects for run/acquire, throws for tryAcquire/get)', async () => {
    const reg = new Registry()
    await rejectsNaming(reg.run(1, () => 1), TypeError, 'key')
    await rejectsNaming(reg.acquire(undefined), TypeError, 'key')
    throwsNaming(() => reg.tryAcquire(null), TypeError, 'key')
    throwsNaming(() => reg.get({}), TypeError, 'key')
    await rejectsNaming(reg.run('k', 'not fn'), TypeError, 'fn')
    await rejectsNaming(reg.acquire('k', { weight: 0 }), RangeError, 'weight')
  })

  test('get(key): the bulkhead of key, carrying the key', async () => {
    const reg = new Registry({ maxConcurrent: 2 })
    const bh = reg.get('https://api.example:443')
    assert.ok(bh instanceof Bulkhead)
    assert.equal(bh.key, 'https://api.example:443')
    assert.equal(bh.maxConcurrent, 2)
    const p = await bh.acquire()
    assert.equal(p.key, 'https://api.example:443')
    assert.equal(reg.stats()['https://api.example:443'].active, 1)
    bh.setLimit(1)
    await assert.rejects(bh.acquire({ queueTimeoutMs: 0 }), (e) => e.snapshot.key === 'https://api.example:443')
    p.release()
    assert.equal(reg.size, 1)
  })

  test('key_limit at maxKeys with nothing evictable; LRU eviction after release', async () => {
    const reg = new Registry({ maxConcurrent: 1, maxQueue: 0, maxKeys: 2 })
    const a = await reg.acquire('k1')
    const b = await reg.acquire('k2')
    await assert.rejects(reg.acquire('k3'), (e) => {
      assert.ok(e instanceof BulkheadError)
      assert.equal(e.code, 'BULKHEAD_FULL')
      assert.equal(e.reason, 'key_limit')
      assert.equal(e.retryable, true)
      assert.equal(e.snapshot.key, 'k3')
      return true
    })
    await assert.rejects(reg.run('k3', () => 1), { reason: 'key_limit' })
    assert.throws(() => reg.tryAcquire('k3'), { reason: 'key_limit' })
    a.release()
    const d = await reg.acquire('k3') // k1 is idle and unheld: evicted
    assert.deepEqual(reg.keys(), ['k2', 'k3'])
    b.release()
    d.release()
    assert.equal(await reg.run('k2', () => 'k2 again'), 'k2 again') // k2 is now most recent
    assert.equal(await reg.run('k1', () => 'k1 back'), 'k1 back') // evicts k3 (LRU)
    assert.deepEqual(reg.keys(), ['k1', 'k2'])
    assert.equal(reg.size, 2)
    // a tryAcquire that returned null holds nothing either
    const reg2 = new Registry({ maxConcurrent: 1, maxKeys: 1 })
    const x = reg2.tryAcquire('x')
    assert.equal(reg2.tryAcquire('x'), null)
    x.release()
    assert.ok(await reg2.acquire('y').then((p) => p.release()))
    assert.deepEqual(reg2.keys(), ['y'])
  })

  test('a live get() handle pins its entry', async () => {
    const reg = new Registry({ maxKeys: 1 })
    const bh = reg.get('pinned')
    await assert.rejects(reg.acquire('other'), { reason: 'key_limit' })
    assert.equal(bh.key, 'pinned')
  })

  test('a Registry.tryAcquire argument error does not pin the key', async () => {
    const reg = new Registry({ maxKeys: 1, maxConcurrent: 1 })
    assert.throws(() => reg.tryAcquire('a', { weight: 0 }), RangeError)
    assert.throws(() => reg.tryAcquire('a', null), TypeError)
    const p = await reg.acquire('b') // 'a' is idle and unheld: must be evicted
    p.release()
    assert.deepEqual(reg.keys(), ['b'])
  })

  test('close(): entries reject shutdown, new keys too', async () => {
    const reg = new Registry({ maxConcurrent: 1, maxQueue: 2 })
    const h = await reg.acquire('k1')
    const w = track(reg.acquire('k1'))
    reg.close()
    await turn()
    assert.equal(w.error.code, 'BULKHEAD_CLOSED')
    await assert.rejects(reg.run('k3', () => 1), (e) => e.code === 'BULKHEAD_CLOSED' && e.snapshot.key === 'k3')
    await assert.rejects(reg.acquire('k1'), { code: 'BULKHEAD_CLOSED' })
    h.release()
    const s = reg.stats().k1
    assertIdle(s)
    assert.equal(s.rejectedByReason.shutdown, 2)
  })

  test('Registry.run rejecting at once returns a Promise rejecting with BulkheadError', async () => {
    const reg = new Registry({ maxConcurrent: 1, maxQueue: 0 })
    const hold = deferred()
    const first = reg.run('a', () => hold.promise)
    let p
    assert.doesNotThrow(() => {
      p = reg.run('a', () => 1)
    }, 'run() must never throw synchronously')
    await assert.rejects(p, { name: 'BulkheadError', code: 'BULKHEAD_FULL', reason: 'concurrency_limit' })
    let q
    assert.doesNotThrow(() => {
      q = reg.run('a', () => 1, { queueTimeoutMs: 0 })
    })
    await assert.rejects(q, { code: 'BULKHEAD_FULL', reason: 'concurrency_limit' })
    hold.resolve()
    await first
  })

  test('Registry.run on a full queue rejects queue_limit with a BulkheadError', async () => {
    const reg = new Registry({ maxConcurrent: 1, maxQueue: 1 })
    const hold = deferred()
    const first = reg.run('a', () => hold.promise)
    const second = reg.run('a', () => 2)
    let p
    assert.doesNotThrow(() => {
      p = reg.run('a', () => 3)
    })
    await assert.rejects(p, (e) => e instanceof BulkheadError && e.reason === 'queue_limit' && e.snapshot.key === 'a')
    hold.resolve()
    await first
    assert.equal(await second, 2)
  })

  test('Registry.tryAcquire on a closed entry throws BulkheadError BULKHEAD_CLOSED', () => {
    const reg = new Registry({ maxConcurrent: 1 })
    const h = reg.tryAcquire('k1')
    reg.close()
    assert.throws(() => reg.tryAcquire('k1'), (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_CLOSED')
    h.release()
  })

  test('registry keys are opaque strings (byte for byte), stats keys unchanged', async () => {
    const reg = new Registry()
    for (const k of ['A', 'a', 'queue_limit', '', 'ü', 'https://x.example:443']) await reg.run(k, () => 1)
    assert.deepEqual(Object.keys(reg.stats()).sort(), ['', 'A', 'a', 'https://x.example:443', 'queue_limit', 'ü'].sort())
    for (const s of Object.values(reg.stats())) assertConserved(s)
  })
})

describe('originKey(url)', () => {
  test('scheme://host:port: lowercase, IDNA, IPv6 brackets, explicit default port', () => {
    assert.equal(originKey('https://API.Example.com/v1/x?q=1'), 'https://api.example.com:443')
    assert.equal(originKey('http://example.com'), 'http://example.com:80')
    assert.equal(originKey('http://localhost:8080/'), 'http://localhost:8080')
    assert.equal(originKey('http://[::1]:3000/x'), 'http://[::1]:3000')
    assert.equal(originKey('https://bücher.example/'), 'https://xn--bcher-kva.example:443')
  })

  test('errors are TypeErrors', () => {
    assert.throws(() => originKey(42), TypeError)
    assert.throws(() => originKey(undefined), TypeError)
    assert.throws(() => originKey('not a url'), TypeError)
    assert.throws(() => originKey(''), TypeError)
  })
})
