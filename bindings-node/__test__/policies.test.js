'use strict'
// Policies in the Node binding (docs/design.md §6, issue 8): the `resilience` options, the guarded-call
// steps in run / acquire / tryAcquire / Registry, `permit.release({outcome})`, `callTimeoutMs`,
// `on('stateChange')`, `stats().adaptive` / `stats().circuit`, and the cases C21, C22, C24 of
// shared/cases/CASES.md. Breaker time runs on the addon's virtual clock (the test hook
// `opts[__test.kClock]`, as in the vector runner).

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')

const { Bulkhead, Registry, BulkheadError, OUTCOMES, __test } = require('../index.js')
const { turn, turns, deferred, track, assertIdle } = require('./helpers.js')

const { kClock, VirtualClock } = __test

const fail = async () => {
  throw new Error('backend down')
}
const ok = async () => 'ok'

/** A bulkhead with a breaker on a virtual clock, plus its recorded events. */
function breakerBulkhead(breaker, extra = {}) {
  const clock = new VirtualClock()
  const bh = new Bulkhead({ maxConcurrent: 20, ...extra, resilience: { breaker, ...extra.resilience }, [kClock]: clock })
  const events = []
  bh.on('stateChange', (key, from, to) => events.push([key, from, to]))
  return { bh, clock, events }
}

// ----- options ----------------------------------------------------------------------------------

describe('resilience options', () => {
  test('without resilience: plain bulkhead, stats().adaptive and .circuit are null', () => {
    for (const r of [undefined, null, {}, { adaptive: null, breaker: null, callTimeoutMs: null }]) {
      const s = new Bulkhead({ resilience: r }).stats()
      assert.equal(s.adaptive, null)
      assert.equal(s.circuit, null)
    }
  })

  test('`{}` parts are on with the defaults (camelCase stats, strings unchanged)', () => {
    const s = new Bulkhead({ maxConcurrent: 12, resilience: { adaptive: {}, breaker: {} } }).stats()
    assert.deepEqual(Object.keys(s.adaptive).sort(), [
      'algorithm',
      'decreasesTotal',
      'lastRttNs',
      'limit',
      'longRttNs',
      'maxLimit',
      'minLimit',
      'samplesTotal',
    ])
    assert.equal(s.adaptive.algorithm, 'gradient2')
    assert.equal(s.adaptive.maxLimit, 12)
    assert.equal(s.adaptive.limit, 12)
    assert.equal(s.adaptive.minLimit, 1)
    assert.deepEqual(s.circuit, {
      state: 'closed',
      generation: 0,
      consecutiveFailures: 0,
      windowRequests: 0,
      windowFailures: 0,
      openedAtNs: 0,
    })
  })

  test('unknown keys are TypeErrors naming them', () => {
    const cases = [
      [{ circuit: {} }, /resilience: unknown option "circuit"/],
      [{ breaker: { resetTimeout: 1 } }, /resilience\.breaker: unknown option "resetTimeout"/],
      [{ adaptive: { target_latency_ms: 1 } }, /resilience\.adaptive: unknown option "target_latency_ms"/],
      [{ call_timeout_ms: 5 }, /resilience: unknown option "call_timeout_ms"/],
    ]
    for (const [resilience, message] of cases) {
      assert.throws(() => new Bulkhead({ resilience }), { name: 'TypeError', message })
    }
  })

  test('bad types are TypeErrors, bad values RangeErrors, both naming the option', () => {
    const cases = [
      [{ breaker: { openDurationMs: '5' } }, TypeError, 'resilience.breaker.openDurationMs'],
      [{ breaker: { openDurationMs: -1 } }, RangeError, 'resilience.breaker.openDurationMs'],
      [{ breaker: { openDurationMs: 0 } }, RangeError, 'resilience.breaker.openDurationMs'],
      [{ breaker: { openDurationMs: Infinity } }, RangeError, 'resilience.breaker.openDurationMs'],
      [{ breaker: { halfOpenTimeoutMs: 0 } }, RangeError, 'resilience.breaker.halfOpenTimeoutMs'],
      [{ breaker: { failureThreshold: 0 } }, RangeError, 'resilience.breaker.failureThreshold'],
      [{ breaker: { failureThreshold: 1.5 } }, RangeError, 'resilience.breaker.failureThreshold'],
      [{ breaker: { errorRateThreshold: 1.5 } }, RangeError, 'resilience.breaker.errorRateThreshold'],
      [{ breaker: { errorRateThreshold: 'x' } }, TypeError, 'resilience.breaker.errorRateThreshold'],
      [{ breaker: { errorRateBuckets: 1000 } }, RangeError, 'resilience.breaker.errorRateBuckets'],
      [{ breaker: { halfOpenMaxCalls: 0 } }, RangeError, 'resilience.breaker.halfOpenMaxCalls'],
      [{ adaptive: { algorithm: 'vegas' } }, RangeError, 'resilience.adaptive.algorithm'],
      [{ adaptive: { minLimit: 0 } }, RangeError, 'resilience.adaptive.minLimit'],
      [{ adaptive: { maxLimit: 11 } }, RangeError, 'resilience.adaptive.maxLimit'],
      [{ adaptive: { minLimit: 5, maxLimit: 4 } }, RangeError, 'resilience.adaptive.minLimit'],
      [{ adaptive: { decreaseRatio: 1 } }, RangeError, 'resilience.adaptive.decreaseRatio'],
      [{ adaptive: { targetLatencyMs: 0 } }, RangeError, 'resilience.adaptive.targetLatencyMs'],
      // NaN is a number out of range (a RangeError, as for every numeric option).
      [{ adaptive: { smoothing: NaN } }, RangeError, 'resilience.adaptive.smoothing'],
      [{ adaptive: 5 }, TypeError, 'resilience.adaptive'],
      [{ callTimeoutMs: 0 }, RangeError, 'resilience.callTimeoutMs'],
      [{ callTimeoutMs: -5 }, RangeError, 'resilience.callTimeoutMs'],
      [{ callTimeoutMs: '5' }, TypeError, 'resilience.callTimeoutMs'],
    ]
    for (const [resilience, type, name] of cases) {
      assert.throws(
        () => new Bulkhead({ maxConcurrent: 10, resilience }),
        (e) => e instanceof type && e.message.includes(name),
        `${JSON.stringify(resilience)} → ${type.name} naming ${name}`,
      )
    }
    assert.throws(() => new Bulkhead({ resilience: 'on' }), TypeError)
    // Infinity / null call timeouts are off.
    assert.equal(new Bulkhead({ resilience: { callTimeoutMs: Infinity } }).stats().circuit, null)
  })

  test('Registry: defaults and overrides; errors name the override key', () => {
    assert.throws(
      () => new Registry({ overrides: { k: { resilience: { breaker: { openDurationMs: 0 } } } } }),
      (e) => e instanceof RangeError && e.message.includes('overrides["k"]') && e.message.includes('resilience.breaker.openDurationMs'),
    )
    assert.throws(
      () => new Registry({ overrides: { k: { resilience: { breaker: { nope: 1 } } } } }),
      (e) => e instanceof TypeError && e.message.includes('overrides["k"]') && e.message.includes('"nope"'),
    )
    assert.throws(() => new Registry({ resilience: { adaptive: { maxLimit: 11 } } }), /resilience\.adaptive\.maxLimit/)
  })

  test('Registry overrides merge key by key over the defaults (per part, null turns a part off)', async () => {
    const clock = new VirtualClock()
    const reg = new Registry({
      maxConcurrent: 8,
      resilience: { adaptive: { algorithm: 'aimd', minLimit: 2 }, breaker: { failureThreshold: 2, openDurationMs: 1000 } },
      overrides: {
        merged: { resilience: { adaptive: { maxLimit: 4 }, breaker: { openDurationMs: 50 } } },
        off: { resilience: { adaptive: null } },
        plain: { resilience: null },
      },
      [kClock]: clock,
    })
    for (const k of ['default', 'merged', 'off', 'plain']) (await reg.acquire(k)).release()
    const s = reg.stats()
    assert.deepEqual(
      [s.default.adaptive.algorithm, s.default.adaptive.minLimit, s.default.adaptive.maxLimit],
      ['aimd', 2, 8],
    )
    assert.deepEqual([s.merged.adaptive.algorithm, s.merged.adaptive.minLimit, s.merged.adaptive.maxLimit], ['aimd', 2, 4])
    assert.equal(s.off.adaptive, null)
    assert.equal(s.off.circuit.state, 'closed')
    assert.equal(s.plain.adaptive, null)
    assert.equal(s.plain.circuit, null)
    // "merged" keeps the defaults' failureThreshold 2 and takes its own openDurationMs 50.
    for (const k of ['merged', 'default']) {
      for (let i = 0; i < 2; i++) await assert.rejects(reg.run(k, fail), /backend down/)
    }
    assert.equal(reg.stats().merged.circuit.state, 'open')
    clock.advance(50)
    assert.equal(reg.stats().merged.circuit.state, 'half_open')
    assert.equal(reg.stats().default.circuit.state, 'open')
  })
})

// ----- the breaker through run / acquire / tryAcquire ---------------------------------------------

describe('circuit breaker lifecycle (virtual clock)', () => {
  test('closed → open → half_open → closed, with CIRCUIT_OPEN fast-fails and the events', async () => {
    const { bh, clock, events } = breakerBulkhead({ failureThreshold: 3, openDurationMs: 100 })
    for (let i = 0; i < 3; i++) await assert.rejects(bh.run(fail), /backend down/)
    assert.deepEqual(events, [[null, 'closed', 'open']])
    assert.equal(bh.stats().circuit.state, 'open')
    let reached = 0
    const e = await bh.run(() => reached++).catch((err) => err)
    assert.ok(e instanceof BulkheadError)
    assert.equal(e.code, 'CIRCUIT_OPEN')
    assert.equal(e.reason, 'circuit_open')
    assert.equal(e.retryable, true)
    assert.equal(reached, 0)
    await assert.rejects(bh.acquire(), { code: 'CIRCUIT_OPEN' })
    assert.throws(() => bh.tryAcquire(), { code: 'CIRCUIT_OPEN' })
    assert.equal(bh.stats().rejectedByReason.circuit_open, 3)
    clock.advance(99)
    assert.equal(bh.stats().circuit.state, 'open')
    clock.advance(1)
    // A state read commits the lazy open → half-open transition and fires its event.
    assert.equal(bh.stats().circuit.state, 'half_open')
    assert.deepEqual(events.slice(1), [[null, 'open', 'half_open']])
    assert.equal(await bh.run(ok), 'ok')
    assert.deepEqual(events.slice(2), [[null, 'half_open', 'closed']])
    const s = bh.stats()
    assert.equal(s.circuit.state, 'closed')
    assert.equal(s.circuit.generation, 3)
    assertIdle(s)
  })

  test('C23: many concurrent failures open once; half-open after openDuration', async () => {
    const { bh, clock, events } = breakerBulkhead({ failureThreshold: 5, openDurationMs: 100 })
    const gate = deferred()
    const calls = Array.from({ length: 50 }, () => track(bh.run(() => gate.promise)))
    clock.advance(10)
    gate.reject(new Error('down'))
    await turns(2)
    assert.ok(calls.every((c) => c.state === 'rejected' && c.error.message === 'down'))
    assert.deepEqual(events, [[null, 'closed', 'open']])
    clock.advance(100)
    assert.equal(bh.stats().circuit.state, 'half_open')
    assert.equal(await bh.run(ok), 'ok')
    assert.equal(bh.stats().circuit.state, 'closed')
  })

  test('C24: 10 concurrent run() while half-open: exactly 1 reaches fn, 9 reject CIRCUIT_OPEN; 3 cycles', async () => {
    const { bh, clock, events } = breakerBulkhead({ failureThreshold: 5, openDurationMs: 100, halfOpenMaxCalls: 1 })
    let backendUp = false
    let backendCalls = 0
    const backend = async () => {
      backendCalls++
      await turn()
      if (!backendUp) throw new Error('backend down')
      return 'ok'
    }
    for (let i = 0; i < 5; i++) await assert.rejects(bh.run(backend))
    assert.equal(bh.stats().circuit.state, 'open')
    for (let cycle = 1; cycle <= 3; cycle++) {
      clock.advance(110)
      assert.equal(bh.stats().circuit.state, 'half_open', `cycle ${cycle}`)
      if (cycle === 3) backendUp = true
      backendCalls = 0
      const calls = Array.from({ length: 10 }, () => track(bh.run(backend)))
      // The 9 rejections are already settled within one turn (no waiting for the probe).
      await Promise.resolve()
      await Promise.resolve()
      const open = calls.filter((c) => c.state === 'rejected' && c.error.code === 'CIRCUIT_OPEN')
      assert.equal(open.length, 9, `cycle ${cycle}: 9 fast-fail CIRCUIT_OPEN`)
      assert.equal(backendCalls, 1, `cycle ${cycle}: exactly one call reaches the backend`)
      await Promise.allSettled(calls.map((c) => c.promise))
      if (cycle < 3) {
        // The failed trial re-opens at once.
        assert.equal(bh.stats().circuit.state, 'open', `cycle ${cycle}`)
        // …and re-arms its open duration: still open 99 ms later (the next cycle advances 110).
        clock.advance(99)
        assert.equal(bh.stats().circuit.state, 'open')
      } else {
        assert.equal(bh.stats().circuit.state, 'closed')
      }
    }
    backendCalls = 0
    const after = await Promise.allSettled(Array.from({ length: 10 }, () => bh.run(backend)))
    assert.equal(backendCalls, 10, 'closed: every call reaches the backend')
    assert.ok(after.every((r) => r.status === 'fulfilled'))
    assert.deepEqual(
      events.map(([, , to]) => to),
      ['open', 'half_open', 'open', 'half_open', 'open', 'half_open', 'closed'],
    )
    assert.equal(bh.stats().rejectedByReason.circuit_open, 27)
    assertIdle(bh.stats())
  })

  test('a half-open probe that never reports within halfOpenTimeoutMs counts as a failure', async () => {
    const { bh, clock, events } = breakerBulkhead({ failureThreshold: 1, openDurationMs: 100, halfOpenTimeoutMs: 50 })
    await assert.rejects(bh.run(fail))
    clock.advance(100)
    const probe = await bh.acquire() // the probe, held and never reported
    assert.throws(() => bh.tryAcquire(), { code: 'CIRCUIT_OPEN' })
    clock.advance(50)
    // The probe timed out: the breaker re-opens (and, 100 ms later, admits a new probe).
    assert.equal(bh.stats().circuit.state, 'open')
    clock.advance(100)
    const next = bh.tryAcquire()
    assert.ok(next !== null)
    next.release()
    probe.release() // a stale generation's outcome: ignored
    assert.equal(bh.stats().circuit.state, 'closed')
    assert.deepEqual(
      events.map(([, from, to]) => `${from}>${to}`),
      ['closed>open', 'open>half_open', 'half_open>open', 'open>half_open', 'half_open>closed'],
    )
  })

  test('rejected, cancelled and queued-then-aborted calls are ignored (no breaker count)', async () => {
    const { bh } = breakerBulkhead({ failureThreshold: 1, openDurationMs: 100 }, { maxConcurrent: 1, maxQueue: 1 })
    const held = await bh.acquire()
    await assert.rejects(bh.acquire({ queueTimeoutMs: 0 }), { code: 'BULKHEAD_FULL' })
    assert.equal(bh.tryAcquire(), null)
    const ac = new AbortController()
    const queued = track(bh.run(ok, { signal: ac.signal }))
    await assert.rejects(bh.acquire(), { code: 'BULKHEAD_FULL' }) // queue_limit
    ac.abort()
    await turn()
    assert.equal(queued.state, 'rejected')
    held.release({ outcome: 'ignored' })
    // fn rejecting with its own signal's reason, or an AbortError, is a cancellation too.
    const ac2 = new AbortController()
    await assert.rejects(
      bh.run(
        (signal) =>
          new Promise((_, reject) => {
            signal.addEventListener('abort', () => reject(signal.reason))
            ac2.abort()
          }),
        { signal: ac2.signal },
      ),
    )
    await assert.rejects(
      bh.run(async () => {
        throw new DOMException('gone', 'AbortError')
      }),
    )
    const s = bh.stats()
    assert.equal(s.circuit.state, 'closed')
    assert.equal(s.circuit.consecutiveFailures, 0)
    assert.equal(s.circuit.windowRequests, 0)
    assertIdle(s)
  })

  test('a synchronous throw from fn is a failure', async () => {
    const { bh } = breakerBulkhead({ failureThreshold: 1, openDurationMs: 100 })
    await assert.rejects(
      bh.run(() => {
        throw new Error('sync')
      }),
      /sync/,
    )
    assert.equal(bh.stats().circuit.state, 'open')
  })
})

// ----- permit.release({outcome}) ------------------------------------------------------------------

describe('permit.release({outcome})', () => {
  test("'success' is the default; 'failure' counts; 'ignored' counts nothing; 'overload' is a breaker success", async () => {
    const { bh } = breakerBulkhead(
      { failureThreshold: 3, volumeThreshold: 100, openDurationMs: 100 },
      { resilience: { adaptive: { algorithm: 'aimd', decreaseRatio: 0.5 } } },
    )
    assert.equal(OUTCOMES.failure, 1)
    ;(await bh.acquire()).release({ outcome: 'failure' })
    bh.tryAcquire().release({ outcome: 'failure' })
    let s = bh.stats()
    assert.equal(s.circuit.consecutiveFailures, 2)
    assert.equal(s.adaptive.decreasesTotal, 2)
    assert.equal(s.adaptive.limit, 5) // 20 → 10 → 5
    ;(await bh.acquire()).release({ outcome: 'ignored' })
    s = bh.stats()
    assert.equal(s.circuit.consecutiveFailures, 2)
    assert.equal(s.adaptive.samplesTotal, 2)
    ;(await bh.acquire()).release({ outcome: 'overload' })
    s = bh.stats()
    assert.equal(s.circuit.consecutiveFailures, 0, 'overload is a success for the breaker')
    assert.equal(s.adaptive.decreasesTotal, 3, 'overload is a failure for the adaptive limit')
    ;(await bh.acquire()).release()
    s = bh.stats()
    assert.equal(s.adaptive.samplesTotal, 4)
    assert.equal(s.adaptive.limit, 2) // one credit: AIMD adds one per round of `limit` successes
    ;(await bh.acquire()).release()
    s = bh.stats()
    assert.equal(s.adaptive.samplesTotal, 5)
    assert.equal(s.adaptive.limit, 3) // 2 + 1: a round of 2 fast successes at limit 2
    assert.equal(s.circuit.windowRequests, 5)
    assertIdle(s)
  })

  test('an unknown outcome is a TypeError and the permit stays held; a second release is false', async () => {
    const { bh } = breakerBulkhead({ failureThreshold: 1, openDurationMs: 100 })
    const p = await bh.acquire()
    assert.throws(() => p.release({ outcome: 'timeout' }), TypeError)
    assert.throws(() => p.release(5), TypeError)
    assert.equal(p.released, false)
    assert.equal(p.release({ outcome: 'failure' }), true)
    assert.equal(p.release({ outcome: 'failure' }), false)
    const s = bh.stats()
    assert.equal(s.circuit.state, 'open')
    assert.equal(s.circuit.generation, 1)
    assert.equal(s.releasedTwiceTotal, 1)
  })

  test('partial releases keep the call going; the last release ends it once', async () => {
    const { bh } = breakerBulkhead({ failureThreshold: 1, openDurationMs: 100 })
    const p = await bh.acquire({ weight: 3 })
    p.releasePartial(1)
    p.releasePartial(2)
    assert.equal(bh.stats().circuit.consecutiveFailures, 0)
    assert.equal(p.release({ outcome: 'failure' }), true)
    assert.equal(bh.stats().circuit.state, 'open')
    assertIdle(bh.stats())
  })

  test('a permit reclaimed after GC is ignored (no sample, no breaker count)', async () => {
    const bh = new Bulkhead({ resilience: { breaker: { failureThreshold: 1 }, adaptive: { algorithm: 'aimd' } } })
    await (async () => {
      await bh.acquire()
    })()
    global.gc()
    for (let i = 0; i < 10 && bh.stats().leakedTotal === 0; i++) await turn()
    const s = bh.stats()
    assert.equal(s.leakedTotal, 1)
    assert.equal(s.adaptive.samplesTotal, 0)
    assert.equal(s.circuit.state, 'closed')
    assert.equal(s.circuit.windowRequests, 0)
    assertIdle(s)
  })
})

// ----- callTimeoutMs ---------------------------------------------------------------------------------

describe('callTimeoutMs', () => {
  test('fn gets a signal that aborts at the deadline; run() rejects BULKHEAD_CALL_TIMEOUT at once; release when fn settles', async () => {
    const bh = new Bulkhead({
      maxConcurrent: 2,
      resilience: { callTimeoutMs: 30, breaker: { failureThreshold: 1, openDurationMs: 60_000 } },
    })
    const events = []
    bh.on('stateChange', (...e) => events.push(e))
    const work = deferred()
    // The call timer is unref'd (like the queue timers): real work keeps the loop alive.
    const keepAlive = setTimeout(() => {}, 10_000)
    let signal
    const t0 = Date.now()
    const call = track(
      bh.run((s) => {
        signal = s
        return work.promise
      }),
    )
    assert.ok(signal && signal.aborted === false, 'fn received an AbortSignal')
    await assert.rejects(call.promise, (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_CALL_TIMEOUT' && e.reason === 'call_timeout')
    assert.ok(Date.now() - t0 >= 25, 'rejected at the deadline')
    assert.equal(signal.aborted, true)
    assert.equal(signal.reason.code, 'BULKHEAD_CALL_TIMEOUT')
    let s = bh.stats()
    assert.equal(s.rejectedByReason.call_timeout, 1)
    assert.equal(s.active, 1, 'the permit is held until fn settles')
    assert.equal(s.circuit.state, 'open', 'the overrun is a failure, recorded at the deadline')
    assert.deepEqual(events, [[null, 'closed', 'open']])
    work.resolve('late')
    clearTimeout(keepAlive)
    await turns(2)
    s = bh.stats()
    assertIdle(s)
    assert.equal(s.circuit.generation, 1, 'the release records nothing more')
    assert.equal(call.settledCount, 1)
  })

  test('a call within the deadline resolves normally; the caller signal is forwarded to fn', async () => {
    const bh = new Bulkhead({ resilience: { callTimeoutMs: 5_000, breaker: { failureThreshold: 1 } } })
    assert.equal(await bh.run(async (s) => (s.aborted ? 'aborted' : 'ok')), 'ok')
    const ac = new AbortController()
    const p = bh.run(
      (signal) =>
        new Promise((_, reject) => {
          signal.addEventListener('abort', () => reject(signal.reason))
        }),
      { signal: ac.signal },
    )
    ac.abort()
    await assert.rejects(p, (e) => e === ac.signal.reason)
    const s = bh.stats()
    assert.equal(s.circuit.state, 'closed', 'a cancelled call is ignored')
    assert.equal(s.rejectedByReason.call_timeout, 0)
    assertIdle(s)
  })

  test('Registry.run honours the key’s callTimeoutMs', async () => {
    const reg = new Registry({ overrides: { slow: { resilience: { callTimeoutMs: 10 } } } })
    await assert.rejects(
      reg.run('slow', () => new Promise((r) => setTimeout(r, 40))),
      (e) => e.code === 'BULKHEAD_CALL_TIMEOUT' && e.snapshot.key === 'slow',
    )
    assert.equal(await reg.run('fast', () => new Promise((r) => setTimeout(() => r(1), 20))), 1)
    await new Promise((r) => setTimeout(r, 50))
    assertIdle(reg.stats().slow)
  })
})

// ----- events --------------------------------------------------------------------------------------

describe("on('stateChange')", () => {
  test('Registry: (key, old, new) for every key; get(key).on hears only its key; off removes', async () => {
    const clock = new VirtualClock()
    const reg = new Registry({ resilience: { breaker: { failureThreshold: 1, openDurationMs: 10 } }, [kClock]: clock })
    const all = []
    const onlyA = []
    const listener = (...e) => all.push(e)
    reg.on('stateChange', listener)
    const a = reg.get('a')
    const aListener = (...e) => onlyA.push(e)
    assert.equal(a.on('stateChange', aListener), a)
    await assert.rejects(reg.run('a', fail))
    await assert.rejects(reg.run('b', fail))
    assert.deepEqual(all, [
      ['a', 'closed', 'open'],
      ['b', 'closed', 'open'],
    ])
    assert.deepEqual(onlyA, [['a', 'closed', 'open']])
    reg.off('stateChange', listener)
    a.off('stateChange', aListener)
    clock.advance(10)
    assert.equal(reg.stats().a.circuit.state, 'half_open')
    assert.equal(all.length, 2)
    assert.equal(onlyA.length, 1)
  })

  test('listeners run after the native call returned, on the JS thread; they may call the bulkhead', async () => {
    const { bh, clock } = breakerBulkhead({ failureThreshold: 1, openDurationMs: 10 })
    const seen = []
    bh.on('stateChange', (key, from, to) => {
      // Re-entering the addon from a listener is allowed.
      seen.push([to, bh.stats().circuit.state])
    })
    await assert.rejects(bh.run(fail))
    clock.advance(10)
    bh.stats()
    assert.deepEqual(seen, [
      ['open', 'open'],
      ['half_open', 'half_open'],
    ])
  })

  test('argument checks', () => {
    const bh = new Bulkhead()
    assert.throws(() => bh.on('change', () => {}), TypeError)
    assert.throws(() => bh.on('stateChange', 5), TypeError)
    assert.equal(bh.on('stateChange', () => {}), bh, 'a plain bulkhead accepts listeners (no events)')
  })
})

// ----- C21, C22 ------------------------------------------------------------------------------------

describe('C21 client cancellations never shrink the limit (AbortSignal)', () => {
  test('AIMD: 50% of requests cancelled by their AbortSignal → 0 decreases; real failures decrease', async () => {
    const bh = new Bulkhead({
      maxConcurrent: 200,
      maxQueue: 1000,
      resilience: { adaptive: { algorithm: 'aimd', initialLimit: 20, minLimit: 1, maxLimit: 200, decreaseRatio: 0.9 } },
    })
    const server = (signal) =>
      new Promise((resolve, reject) => {
        const t = setTimeout(resolve, 3)
        signal.addEventListener('abort', () => {
          clearTimeout(t)
          reject(signal.reason)
        })
      })
    let next = 0
    let cancelled = 0
    const worker = async () => {
      while (next < 1000) {
        const i = next++
        const ac = new AbortController()
        if (i % 2 === 0) setTimeout(() => ac.abort(), 1)
        try {
          await bh.run(server, { signal: ac.signal })
        } catch (e) {
          assert.equal(e, ac.signal.reason)
          cancelled++
        }
      }
    }
    await Promise.all(Array.from({ length: 15 }, worker))
    let s = bh.stats()
    assert.ok(cancelled > 0, 'some calls were cancelled')
    assert.equal(s.adaptive.decreasesTotal, 0, 'cancellations are ignored: 0 decreases')
    assert.ok(s.adaptive.limit >= 20, `limit ${s.adaptive.limit} >= 20`)
    assert.equal(s.adaptive.samplesTotal, 1000 - cancelled, 'only the completed calls are samples')
    // Step 4: 10 genuine server-side failures lower the limit multiplicatively, never below 1.
    let expected = s.adaptive.limit
    for (let i = 0; i < 10; i++) {
      await assert.rejects(bh.run(fail))
      expected = Math.max(1, Math.floor(expected * 0.9))
    }
    s = bh.stats()
    assert.equal(s.adaptive.decreasesTotal, 10)
    assert.equal(s.adaptive.limit, expected)
    assert.equal(s.limit, expected, 'the adaptive limit drives the bulkhead limit')
    assertIdle(s)
  })

  test('rejected and queued-then-aborted calls give no sample', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 1, resilience: { adaptive: { algorithm: 'aimd' } } })
    const h = await bh.acquire()
    const ac = new AbortController()
    const w = track(bh.acquire({ signal: ac.signal }))
    await assert.rejects(bh.acquire(), { code: 'BULKHEAD_FULL' })
    ac.abort()
    await turn()
    assert.equal(w.state, 'rejected')
    h.release({ outcome: 'ignored' })
    const s = bh.stats()
    assert.equal(s.adaptive.samplesTotal, 0)
    assert.equal(s.adaptive.decreasesTotal, 0)
  })
})

describe('C22 runtime resize through setLimit', () => {
  test('steps 1–6: no over-grant, FIFO, takes effect at once', async () => {
    const bh = new Bulkhead({ maxConcurrent: 4, maxQueue: 10, queueTimeoutMs: Infinity })
    bh.setLimit(2)
    const A = await bh.acquire()
    const B = await bh.acquire()
    const C = track(bh.acquire())
    const D = track(bh.acquire())
    await turn()
    bh.setLimit(1) // step 2: in_use 2 over limit 1, nothing pre-empted
    let s = bh.stats()
    assert.deepEqual([s.active, s.available, s.queued], [2, -1, 2])
    bh.setLimit(2) // step 3: no waiter admitted
    await turn()
    assert.deepEqual([C.state, D.state, bh.stats().active], ['pending', 'pending', 2])
    A.release() // step 4: exactly C (FIFO)
    await turn()
    assert.deepEqual([C.state, D.state, bh.stats().active], ['fulfilled', 'pending', 2])
    bh.setLimit(4) // step 5: D at once
    await turn()
    s = bh.stats()
    assert.equal(D.state, 'fulfilled')
    assert.deepEqual([s.active, s.available], [3, 1])
    bh.setLimit(1) // step 6
    const E = track(bh.acquire())
    for (const p of [B, C.value]) {
      p.release()
      await turn()
      assert.equal(E.state, 'pending', 'no admission while in_use >= 1')
    }
    D.value.release()
    await turn()
    assert.equal(E.state, 'fulfilled')
    E.value.release()
    s = bh.stats()
    assertIdle(s)
    assert.equal(s.available, 1)
  })

  test('step 7: 1 → 3 → 1 on a fresh bulkhead leaves a maximum concurrency of 1', async () => {
    const bh = new Bulkhead({ maxConcurrent: 3, maxQueue: 100 })
    bh.setLimit(1)
    bh.setLimit(3)
    bh.setLimit(1)
    let inFlight = 0
    let max = 0
    await Promise.all(
      Array.from({ length: 20 }, () =>
        bh.run(async () => {
          inFlight++
          max = Math.max(max, inFlight)
          await turn()
          inFlight--
        }),
      ),
    )
    assert.equal(max, 1)
    assert.throws(() => bh.setLimit(4), RangeError)
  })

  test('with an adaptive limit, setLimit still resizes (and the controller may move it later)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 4, resilience: { adaptive: { algorithm: 'aimd' } } })
    bh.setLimit(2)
    assert.equal(bh.limit, 2)
    const a = await bh.acquire()
    const b = await bh.acquire()
    assert.equal(bh.tryAcquire(), null)
    a.release({ outcome: 'ignored' })
    b.release({ outcome: 'ignored' })
    assert.equal(bh.limit, 2)
  })
})
