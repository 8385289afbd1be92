'use strict'
// Issue 17 in Node: request deadlines and time budgets (docs/design.md §5.9) and queue-delay
// dispatch (§4.10) — the `deadline` option of every admission entry point, the ambient
// `withDeadline` / `withDeadlineAt` / `currentDeadline` / `remainingMs`, the call timeout
// capped by the deadline, CoDel shedding and adaptive LIFO, `applyLimits({queueDelay})`, and
// the C36 recipe (/work/shared/cases/CASES.md) as named tests.
//
// Time: the bulkheads run on the test hook's virtual clock, and `withDeadline` reads it through
// the private `__test.setNow`; the facade's timers run on node:test's mock timers, moved with
// the clock (as the vector runner does). One test reads the host clock (the performance.now()
// scale), with a 10x bound.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')

const hg = require('../index.js')
const {
  Bulkhead,
  Registry,
  BulkheadError,
  withDeadline,
  withDeadlineAt,
  currentDeadline,
  remainingMs,
  __test,
} = hg
const { kClock, VirtualClock, setNow } = __test
const native = require('../native.js')
const { turns, track, spyPrototype, spyFast, assertIdle } = require('./helpers.js')

/** A bulkhead (or registry) on a virtual clock that `withDeadline` reads too; `advance` moves both. */
function virtual(t, opts, Kind = Bulkhead) {
  t.mock.timers.enable({ apis: ['setTimeout'] })
  const clock = new VirtualClock()
  setNow(() => clock.nowMs())
  t.after(() => {
    setNow(undefined)
    t.mock.timers.reset()
  })
  const v = {
    bh: new Kind({ ...opts, [kClock]: clock }),
    clock,
    async advance(ms) {
      clock.advance(ms)
      t.mock.timers.tick(ms)
      await turns(3)
    },
  }
  return v
}

/** A rejection of reason `reason` (a BulkheadError, never an argument error). */
const refused = (reason) => (e) => {
  assert.ok(e instanceof BulkheadError, `a BulkheadError, got ${e && e.stack}`)
  assert.equal(e.reason, reason)
  return true
}

const TIMEOUT = { code: 'BULKHEAD_QUEUE_TIMEOUT', reason: 'timeout' }

describe('C36 (queued waits ignore the caller’s deadline)', () => {
  test('C36: a passed deadline is refused timeout, not invalid', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 2, queueTimeoutMs: 60_000 })
    const { bh } = v
    await v.advance(6_000)
    // Step 3: passed (and exactly now) — with the permit free, never queued, no ticket.
    await assert.rejects(bh.acquire({ deadline: 5_000 }), (e) => {
      refused('timeout')(e)
      assert.equal(e.code, 'BULKHEAD_QUEUE_TIMEOUT')
      assert.equal(e.detail.bound, 'deadline')
      return true
    })
    await assert.rejects(bh.acquire({ deadline: 6_000 }), TIMEOUT)
    assert.throws(() => bh.tryAcquire({ deadline: 0 }), refused('timeout'))
    assert.deepEqual(
      (({ ok, reason }) => ({ ok, reason }))(bh.tryAdmit({ deadline: 1 })),
      { ok: false, reason: 'timeout' },
    )
    const a = await bh.admit({ deadline: 1 })
    assert.equal(a.ok, false)
    assert.equal(a.reason, 'timeout')
    let ran = false
    await assert.rejects(
      bh.run(() => {
        ran = true
      }, { deadline: -1e9 }),
      TIMEOUT,
    )
    assert.equal(ran, false, 'fn never ran')
    // The ambient spelling: a budget that is already spent.
    await assert.rejects(withDeadline(-1, () => bh.acquire()), TIMEOUT)
    await assert.rejects(withDeadline(0, () => bh.run(() => 1)), TIMEOUT)
    // The dry run reads it as the admission does, counting nothing.
    const before = bh.stats().rejectedByReason.timeout
    assert.equal(bh.wouldAdmit({ deadline: 5_000 }).decision, 'timeout')
    assert.equal(withDeadline(-5, () => bh.wouldAdmit()).decision, 'timeout')
    assert.equal(bh.stats().rejectedByReason.timeout, before)
    const s = bh.stats()
    assert.equal(s.rejectedByReason.timeout, 8)
    assert.equal(s.queued, 0)
    assertIdle(s)
    // One ms left with the permit free: admitted.
    const p = await bh.acquire({ deadline: 6_001 })
    p.release()
  })

  test('C36: the deadline bounds the queue wait (steps 1, 2, 4)', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 2, queueTimeoutMs: 60_000 })
    const { bh } = v
    const h = await bh.acquire()
    const w1 = track(bh.acquire({ deadline: 5_000 }))
    const w2 = track(bh.acquire({ deadline: 5_000, queueTimeoutMs: Infinity }))
    await turns(2)
    assert.equal(bh.stats().queued, 2)
    await v.advance(4_999)
    assert.deepEqual([w1.state, w2.state, bh.stats().queued], ['pending', 'pending', 2])
    await v.advance(1)
    assert.deepEqual([w1.state, w2.state], ['rejected', 'rejected'])
    refused('timeout')(w1.error)
    refused('timeout')(w2.error)
    assert.equal(bh.stats().queued, 0, 'the dead waiters keep no place')
    // Step 4: X1 and X2 with no deadline both queue, never queue_limit.
    await v.advance(1)
    const x1 = track(bh.acquire())
    const x2 = track(bh.acquire())
    await turns(2)
    assert.deepEqual([x1.state, x2.state, bh.stats().queued], ['pending', 'pending', 2])
    h.release()
    await turns(2)
    ;(await x1.promise).release()
    ;(await x2.promise).release()
    const s = bh.stats()
    assert.equal(s.rejectedByReason.timeout, 2)
    assert.equal(s.rejectedByReason.queue_limit, 0)
    assertIdle(s)
  })

  test('C36: every spelling of no deadline (undefined, null, Infinity, Number.MAX_VALUE, huge finite)', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 16, queueTimeoutMs: 60_000 })
    const { bh } = v
    const h = await bh.acquire()
    const huge = 2 ** 62 / 1e6 // 2^62 ns from 0, in ms: a finite deadline of about 146 years
    const spellings = {
      undefined: () => bh.acquire({ deadline: undefined }),
      null: () => bh.acquire({ deadline: null }),
      Infinity: () => bh.acquire({ deadline: Infinity }),
      MAX_VALUE: () => bh.acquire({ deadline: Number.MAX_VALUE }),
      'huge finite': () => bh.acquire({ deadline: huge }),
      MAX_SAFE_INTEGER: () => bh.acquire({ deadline: Number.MAX_SAFE_INTEGER }),
      'withDeadline(Infinity)': () => withDeadline(Infinity, () => bh.acquire()),
      'withDeadline(MAX_VALUE)': () => withDeadline(Number.MAX_VALUE, () => bh.acquire()),
      'withDeadlineAt(Infinity)': () => withDeadlineAt(Infinity, () => bh.acquire()),
      'withDeadlineAt(MAX_VALUE)': () => withDeadlineAt(Number.MAX_VALUE, () => bh.acquire()),
      'withDeadlineAt(huge)': () => withDeadlineAt(huge, () => bh.acquire()),
    }
    const waiters = Object.entries(spellings).map(([name, acquire]) => [name, track(acquire())])
    await turns(2)
    for (const [name, w] of waiters) assert.equal(w.state, 'pending', `${name}: nothing expires at once`)
    assert.equal(bh.stats().queued, waiters.length)
    // None of them is an ambient deadline.
    for (const x of [Infinity, Number.MAX_VALUE]) {
      assert.equal(withDeadline(x, currentDeadline), undefined)
      assert.equal(withDeadlineAt(x, remainingMs), undefined)
    }
    await v.advance(30_000)
    for (const [name, w] of waiters) assert.equal(w.state, 'pending', `${name}: still queued at 30 s`)
    // H releases at 30 s: each is granted in turn, inside its 60 s queue timeout.
    h.release()
    for (const [name, w] of waiters) {
      await turns(2)
      assert.equal(w.state, 'fulfilled', `${name}: granted`)
      w.value.release()
    }
    const s = bh.stats()
    assert.equal(s.rejectedByReason.timeout, 0)
    assertIdle(s)
  })

  test('C36: retries end with the deadline (step 5, the ambient budget)', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 2, queueTimeoutMs: 60_000 })
    const { bh, clock } = v
    const h = await bh.acquire()
    const ended = []
    const attempts = withDeadline(10_000, async () => {
      // Each attempt has its own 3 s queue timeout; the budget is one for all of them.
      for (let i = 0; i < 10; i++) {
        const start = clock.nowMs()
        try {
          ;(await bh.acquire({ queueTimeoutMs: 3_000 })).release()
          return 'granted'
        } catch (e) {
          refused('timeout')(e)
          ended.push(clock.nowMs())
          if (clock.nowMs() === start) return 'refused at once'
        }
      }
      return 'unbounded'
    })
    const done = track(attempts)
    for (let i = 0; i < 12 && done.state === 'pending'; i++) await v.advance(1_000)
    assert.equal(await attempts, 'refused at once')
    // Attempts end at 3, 6 and 9 s; the 4th is bounded by the 1 s left and ends at 10 s; the
    // 5th, at 10 s, is refused at once. None starts after 10 s.
    assert.deepEqual(ended, [3_000, 6_000, 9_000, 10_000, 10_000])
    assert.equal(bh.stats().rejectedByReason.timeout, 5)
    h.release()
  })

  test('C36: min_service_time refuses early (step 7)', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 2, queueTimeoutMs: 60_000, minServiceTimeMs: 2_000 })
    const { bh } = v
    const h = await bh.acquire()
    const w4 = track(bh.acquire({ deadline: 5_000 }))
    await v.advance(2_999)
    assert.equal(w4.state, 'pending')
    await v.advance(1)
    assert.equal(w4.state, 'rejected', 'shed at 3 s, not at 5 s')
    refused('timeout')(w4.error)
    // 2 s left and it would have to queue: refused at once, never queued.
    await assert.rejects(bh.acquire({ deadline: 5_000 }), TIMEOUT)
    assert.equal(bh.stats().queued, 0)
    h.release()
    // With the permit free it is admitted (the work may still fit).
    ;(await bh.acquire({ deadline: 4_000 })).release()
    assert.equal(bh.stats().rejectedByReason.timeout, 2)
  })
})

describe('ambient deadlines: withDeadline / withDeadlineAt / currentDeadline / remainingMs', () => {
  test('nested withDeadline takes the minimum; remainingMs is never negative', async (t) => {
    const v = virtual(t, { maxConcurrent: 1 })
    assert.equal(currentDeadline(), undefined)
    assert.equal(remainingMs(), undefined)
    await v.advance(100)
    const seen = await withDeadline(1_000, async () => {
      const outer = currentDeadline()
      const innerLonger = withDeadline(5_000, currentDeadline)
      const innerShorter = withDeadline(200, currentDeadline)
      const atLonger = withDeadlineAt(outer + 1, currentDeadline)
      const atShorter = withDeadlineAt(500, currentDeadline)
      const left = remainingMs()
      await v.advance(2_000)
      // The continuation keeps its context.
      return { outer, innerLonger, innerShorter, atLonger, atShorter, left, after: remainingMs(), still: currentDeadline() }
    })
    assert.deepEqual(seen, {
      outer: 1_100,
      innerLonger: 1_100,
      innerShorter: 300,
      atLonger: 1_100,
      atShorter: 500,
      left: 1_000,
      after: 0,
      still: 1_100,
    })
    assert.equal(currentDeadline(), undefined, 'nothing outside the scope')
  })

  test('an explicit deadline is min’d with the ambient one', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 4, queueTimeoutMs: 60_000 })
    const { bh } = v
    const h = await bh.acquire()
    const [later, earlier] = withDeadline(1_000, () => [
      track(bh.acquire({ deadline: 50_000 })),
      track(bh.acquire({ deadline: 400 })),
    ])
    await v.advance(400)
    assert.deepEqual([later.state, earlier.state], ['pending', 'rejected'])
    await v.advance(600)
    assert.equal(later.state, 'rejected', 'the ambient 1 s bound the later explicit deadline')
    refused('timeout')(later.error)
    h.release()
  })

  test('every acquire entry point takes the ambient deadline (registry too)', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 4, queueTimeoutMs: 60_000 }, Registry)
    const reg = v.bh
    const bh = reg.get('k')
    await v.advance(10)
    await withDeadline(-1, async () => {
      await assert.rejects(reg.acquire('k'), TIMEOUT)
      await assert.rejects(reg.run('k', () => 1), TIMEOUT)
      assert.throws(() => reg.tryAcquire('k'), refused('timeout'))
      assert.equal(reg.tryAdmit('k').reason, 'timeout')
      assert.equal((await reg.admit('k')).reason, 'timeout')
      assert.equal(reg.wouldAdmit('k').decision, 'timeout')
      assert.equal(reg.wouldAdmit('fresh').decision, 'timeout')
      await assert.rejects(bh.acquire(), TIMEOUT)
      await assert.rejects(bh.run(() => 1), TIMEOUT)
      assert.throws(() => bh.tryAcquire(), refused('timeout'))
    })
    assert.deepEqual(reg.keys(), ['k'], 'the dry run created no key')
    assert.equal(reg.stats().k.rejectedByReason.timeout, 8)
    // The explicit spelling on the registry, queued: bounded by its deadline.
    const h = await reg.acquire('k')
    const w = track(reg.acquire('k', { deadline: 110 }))
    await v.advance(99)
    assert.equal(w.state, 'pending')
    await v.advance(1)
    refused('timeout')(w.error)
    h.release()
  })

  test('bad deadlines are argument errors naming them; a passed one is not', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const reg = new Registry({ maxConcurrent: 1 })
    for (const [bad, Err] of [
      [NaN, RangeError],
      [-Infinity, RangeError],
      ['5', TypeError],
      [{}, TypeError],
      [true, TypeError],
      [5n, TypeError],
    ]) {
      const named = (e) => e instanceof Err && /^deadline must be an absolute time in ms on the performance\.now\(\) scale/.test(e.message)
      await assert.rejects(bh.acquire({ deadline: bad }), named)
      await assert.rejects(bh.run(() => 1, { deadline: bad }), named)
      await assert.rejects(bh.admit({ deadline: bad }), named)
      assert.throws(() => bh.tryAcquire({ deadline: bad }), named)
      assert.throws(() => bh.tryAdmit({ deadline: bad }), named)
      assert.throws(() => bh.wouldAdmit({ deadline: bad }), named)
      await assert.rejects(reg.acquire('k', { deadline: bad }), named)
      assert.throws(() => reg.wouldAdmit('k', { deadline: bad }), named)
      const at = (e) => e instanceof Err && /^deadline must be/.test(e.message)
      assert.throws(() => withDeadlineAt(bad, () => 1), at)
      assert.throws(() => withDeadline(bad, () => 1), (e) => e instanceof Err && /^ms must be a time budget in ms/.test(e.message))
    }
    assert.throws(() => withDeadline(10, 5), /fn must be a function, got number/)
    assert.throws(() => withDeadlineAt(10), /fn must be a function, got undefined/)
    assert.throws(() => bh.tryAcquire({ deadlne: 1 }), /unknown option "deadlne" \(known: .*"deadline"/)
    // Argument errors are never counted; nothing was admitted or queued.
    assertIdle(bh.stats())
    assert.equal(bh.stats().rejectedByReason.timeout, 0)
  })

  test('the host clock: deadlines are ms on the performance.now() scale (a 10x bound)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 4, queueTimeoutMs: 60_000 })
    const keepAlive = setInterval(() => {}, 1_000)
    try {
      ;(await bh.acquire({ deadline: performance.now() + 60_000 })).release()
      await assert.rejects(bh.acquire({ deadline: performance.now() - 1 }), TIMEOUT)
      const h = await bh.acquire()
      const t0 = performance.now()
      await assert.rejects(bh.acquire({ deadline: t0 + 50 }), TIMEOUT)
      const waited = performance.now() - t0
      assert.ok(waited >= 45 && waited < 500, `expired after ${waited} ms (deadline 50 ms)`)
      const t1 = performance.now()
      await assert.rejects(
        withDeadline(50, () => bh.run(() => 1)),
        TIMEOUT,
      )
      const waited2 = performance.now() - t1
      assert.ok(waited2 >= 45 && waited2 < 500, `withDeadline(50): expired after ${waited2} ms`)
      const left = withDeadline(10_000, remainingMs)
      assert.ok(left > 9_000 && left <= 10_000, `remainingMs ${left}`)
      h.release()
    } finally {
      clearInterval(keepAlive)
    }
  })
})

describe('the call timeout is capped by the deadline (call_timeout_within)', () => {
  test('a bulkhead with callTimeoutMs: fn’s signal aborts at the deadline, not at the call timeout', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, resilience: { callTimeoutMs: 2_000 } })
    const { bh } = v
    let release
    let aborted = null
    const run = track(
      withDeadline(500, () =>
        bh.run(
          (signal) =>
            new Promise((resolve) => {
              release = resolve
              signal.addEventListener('abort', () => (aborted = signal.reason))
            }),
        ),
      ),
    )
    await turns(2)
    await v.advance(499)
    assert.equal(run.state, 'pending')
    await v.advance(1)
    assert.equal(run.state, 'rejected')
    assert.equal(run.error.code, 'BULKHEAD_CALL_TIMEOUT')
    assert.equal(aborted, run.error, 'fn’s signal aborted with it')
    assert.equal(bh.stats().rejectedByReason.call_timeout, 1)
    assert.equal(bh.stats().active, 1, 'held until fn settles')
    release()
    await turns(2)
    assertIdle(bh.stats())
    // A later deadline than the call timeout: the call timeout bounds it.
    const long = track(bh.run((signal) => new Promise((resolve) => signal.addEventListener('abort', resolve)), { deadline: 60_000 }))
    await turns(2)
    await v.advance(2_000)
    assert.equal(long.error?.code, 'BULKHEAD_CALL_TIMEOUT')
    await turns(2)
    assertIdle(bh.stats())
  })

  test('a plain bulkhead: with a deadline fn gets a signal that aborts at it (counted call_timeout)', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 1, queueTimeoutMs: 60_000 })
    const { bh } = v
    const signals = []
    // No deadline: no signal (the plain path).
    await bh.run((signal) => signals.push(signal))
    assert.deepEqual(signals, [undefined])
    let release
    const run = track(
      bh.run(
        (signal) => {
          signals.push(signal)
          return new Promise((resolve) => (release = resolve))
        },
        { deadline: 300 },
      ),
    )
    await turns(2)
    assert.equal(signals[1].aborted, false)
    await v.advance(300)
    assert.equal(run.error?.code, 'BULKHEAD_CALL_TIMEOUT')
    assert.equal(signals[1].aborted, true)
    assert.equal(signals[1].reason, run.error)
    assert.equal(bh.stats().active, 1, 'held until fn settles')
    release('late')
    await turns(2)
    const s = bh.stats()
    assert.equal(s.rejectedByReason.call_timeout, 1)
    assertIdle(s)
  })

  test('a queued run: the call timeout is what is left when it is granted', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 1, queueTimeoutMs: 60_000 })
    const { bh } = v
    const h = await bh.acquire()
    let signal
    const run = track(withDeadline(1_000, () => bh.run((s) => new Promise((resolve) => {
      signal = s
      s.addEventListener('abort', resolve)
    }))))
    await v.advance(600)
    h.release()
    await turns(2)
    assert.equal(signal.aborted, false)
    await v.advance(399)
    assert.equal(run.state, 'pending')
    await v.advance(1)
    assert.equal(run.error?.code, 'BULKHEAD_CALL_TIMEOUT')
    await turns(2)
    assertIdle(bh.stats())
  })
})

describe('queue-delay dispatch (docs/design.md §4.10)', () => {
  test('CoDel sheds a standing queue: the shed waiter rejects BULKHEAD_SHED', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 8, queueTimeoutMs: Infinity, queueDelayTargetMs: 10, queueDelayIntervalMs: 100 })
    const { bh } = v
    const h = await bh.acquire()
    const w = [0, 1, 2, 3].map(() => track(bh.acquire()))
    await turns(2)
    await v.advance(150)
    h.release()
    await turns(2)
    assert.deepEqual(w.map((x) => x.state), ['fulfilled', 'pending', 'pending', 'pending'])
    await v.advance(110)
    w[0].value.release()
    await turns(2)
    assert.deepEqual(w.map((x) => x.state), ['fulfilled', 'rejected', 'fulfilled', 'pending'])
    const e = w[1].error
    refused('shed')(e)
    assert.equal(e.code, 'BULKHEAD_SHED')
    assert.equal(e.retryable, true)
    w[2].value.release()
    await turns(2)
    w[3].value.release()
    const s = bh.stats()
    assert.equal(s.rejectedByReason.shed, 1)
    assertIdle(s)
  })

  test('adaptiveLifo serves the newest waiter first once the oldest has queued past the target', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 8, queueTimeoutMs: Infinity, queueDelayTargetMs: 10, queueDelayIntervalMs: 1_000, adaptiveLifo: true })
    const { bh } = v
    const h = await bh.acquire()
    const order = []
    const runs = ['w0', 'w1', 'w2'].map((id) => bh.run(() => order.push(id)))
    await turns(2)
    await v.advance(10)
    h.release()
    await Promise.all(runs)
    assert.deepEqual(order, ['w2', 'w1', 'w0'])
    assert.equal(bh.stats().rejectedByReason.shed, 0)
  })

  test('applyLimits({queueDelay: {targetMs, intervalMs, lifo}}) turns LIFO on and everything off', async (t) => {
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 8, queueTimeoutMs: Infinity, queueDelayTargetMs: 10, queueDelayIntervalMs: 1_000 })
    const { bh } = v
    const served = async () => {
      const h = await bh.acquire()
      const order = []
      const runs = ['a', 'b', 'c'].map((id) => bh.run(() => order.push(id)))
      await turns(2)
      await v.advance(20)
      h.release()
      await Promise.all(runs)
      return order
    }
    assert.deepEqual(await served(), ['a', 'b', 'c'], 'FIFO without LIFO')
    bh.applyLimits({ revision: 1, queueDelay: { targetMs: 10, intervalMs: 1_000, lifo: true } })
    assert.deepEqual(await served(), ['c', 'b', 'a'], 'LIFO past the target')
    bh.applyLimits({ revision: 2, queueDelay: { targetMs: 0 } })
    assert.deepEqual(await served(), ['a', 'b', 'c'], 'a target of 0 turns both off')
    // Bad snapshots: refused whole, naming the key.
    assert.throws(() => bh.applyLimits({ revision: 3, queueDelay: { target: 10 } }), /queueDelay: unknown option "target" \(known: "targetMs", "intervalMs", "lifo"\)/)
    assert.throws(() => bh.applyLimits({ revision: 3, queueDelay: {} }), /queueDelay\.targetMs is required/)
    assert.throws(() => bh.applyLimits({ revision: 3, queueDelay: { targetMs: -1 } }), (e) => e instanceof RangeError && /queueDelay\.targetMs must be/.test(e.message))
    assert.throws(() => bh.applyLimits({ revision: 3, queueDelay: { targetMs: 5, intervalMs: 0 } }), (e) => e instanceof RangeError && /queueDelay\.intervalMs/.test(e.message))
    assert.throws(() => bh.applyLimits({ revision: 3, queueDelay: { targetMs: 5, lifo: 1 } }), (e) => e instanceof TypeError && /queueDelay\.lifo must be a boolean/.test(e.message))
    assert.throws(() => bh.applyLimits({ revision: 3, queueDelay: { targetMs: 0, lifo: true } }), (e) => e instanceof RangeError && /adaptiveLifo needs a queueDelayTargetMs above 0/.test(e.message))
    assert.throws(() => bh.applyLimits({ revision: 3, queueDelay: 5 }), TypeError)
    assert.equal(bh.stats().revision, 2, 'nothing applied')
    // A plain bulkhead has no lists: refused, naming the option.
    const plain = new Bulkhead({ maxConcurrent: 1 })
    assert.throws(() => plain.applyLimits({ revision: 1, queueDelay: { targetMs: 10 } }), (e) => e instanceof RangeError && /queueDelayTargetMs/.test(e.message))
  })

  test('the queue-delay options are checked at construction', () => {
    assert.throws(() => new Bulkhead({ adaptiveLifo: true }), (e) => e instanceof RangeError && /adaptiveLifo needs a queueDelayTargetMs/.test(e.message))
    assert.throws(() => new Bulkhead({ queueDelayIntervalMs: 0, queueDelayTargetMs: 5 }), (e) => e instanceof RangeError && /queueDelayIntervalMs/.test(e.message))
    assert.throws(() => new Bulkhead({ minServiceTimeMs: -1 }), (e) => e instanceof RangeError && /minServiceTimeMs/.test(e.message))
    assert.throws(() => new Bulkhead({ minServiceTimeMs: '1' }), (e) => e instanceof TypeError && /minServiceTimeMs/.test(e.message))
  })
})

describe('the fast path stays fast', () => {
  test('no deadline in effect: no extra native call; a deadline takes the ordinary path', async () => {
    // A budget was set somewhere in the process (the store is read from now on).
    withDeadline(1_000, () => 0)
    const spy = spyPrototype(native.NativeBulkhead.prototype)
    const fastSpy = spyFast(spy.calls)
    try {
      const bh = new Bulkhead({ maxConcurrent: 2 })
      spy.calls.length = 0
      await bh.run(() => 1)
      ;(await bh.acquire()).release()
      assert.deepEqual(spy.calls, ['fastTake', 'fastGive', 'fastTake', 'fastGive'])
      spy.calls.length = 0
      await withDeadline(60_000, () => bh.run(() => 1))
      assert.ok(!spy.calls.includes('fastTake'), `the ordinary path: ${spy.calls}`)
      assert.ok(spy.calls.includes('enqueue') && spy.calls.includes('callTimeoutWithinMs'), `${spy.calls}`)
      // Outside the scope again: the hot path.
      spy.calls.length = 0
      await bh.run(() => 1)
      assert.deepEqual(spy.calls, ['fastTake', 'fastGive'])
      assertIdle(bh.stats())
    } finally {
      spy.restore()
      fastSpy.restore()
    }
  })
})

// ----- regressions from the issue-17 review -------------------------------------------------

describe('review regressions', () => {
  test('SingleFlight: one caller’s budget never cuts the shared work short for the others', async () => {
    const { SingleFlight } = require('../dedup.js')
    const front = new Bulkhead({ maxConcurrent: 4 })
    const sf = new SingleFlight(front)
    let release
    const gate = new Promise((r) => (release = r))
    let started
    const running = new Promise((r) => (started = r))
    const work = async () => {
      started()
      await gate
      return 'answer'
    }
    // AbortSignal.timeout's timer does not keep the event loop alive: this interval does.
    const keep = setInterval(() => {}, 1000)
    const leader = withDeadline(30, () => sf.run('k', work))
    const follower = running.then(() => sf.run('k', work))
    try {
      await assert.rejects(leader, (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_CALL_TIMEOUT')
    } finally {
      clearInterval(keep)
    }
    release()
    assert.equal(await follower, 'answer')
    await turns(4)
    const st = front.stats()
    assert.equal(st.active, 0)
    assert.equal(st.available, 4)
  })

  test('a budget of 0 ms is spent: refused timeout (the clock offset is calibrated)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 4 })
    let admitted = 0
    let timedOut = 0
    for (let i = 0; i < 200; i++) {
      await withDeadline(0, async () => {
        try {
          const p = bh.tryAcquire()
          if (p) {
            admitted++
            p.release()
          }
        } catch (e) {
          assert.equal(e.code, 'BULKHEAD_QUEUE_TIMEOUT')
          timedOut++
        }
      })
    }
    assert.equal(admitted, 0)
    assert.equal(timedOut, 200)
  })

  test('constructor errors name the right rule for the queue-delay options', () => {
    assert.throws(() => new Bulkhead({ queueDelayTargetMs: -1 }), /queueDelayTargetMs must be 0 or at least/)
    assert.throws(() => new Bulkhead({ queueDelayTargetMs: 10, adaptiveLifo: 1 }), /adaptiveLifo must be a bool/)
    assert.throws(() => new Bulkhead({ adaptiveLifo: true }), /adaptiveLifo needs a queueDelayTargetMs above 0/)
    assert.throws(
      () => new Bulkhead({ maxConcurrent: 1 }).applyLimits({ revision: 1, queueDelay: { targetMs: 10 } }),
      /queueDelayTargetMs needs a runtime-sized bulkhead with a clock \(and, to change it with applyLimits/,
    )
  })

  test('the AbortSignal.any fallback leaves no listener on the caller’s signal once one aborts', () => {
    const { anySignal } = require('../ambient.js')
    const saved = AbortSignal.any
    AbortSignal.any = undefined
    try {
      const caller = new AbortController()
      let added = 0
      let removed = 0
      const add = caller.signal.addEventListener.bind(caller.signal)
      const remove = caller.signal.removeEventListener.bind(caller.signal)
      caller.signal.addEventListener = (...a) => (added++, add(...a))
      caller.signal.removeEventListener = (...a) => (removed++, remove(...a))
      for (let i = 0; i < 100; i++) {
        const budget = new AbortController()
        const s = anySignal([caller.signal, budget.signal])
        budget.abort(new Error('deadline'))
        assert.equal(s.aborted, true)
      }
      assert.equal(added, 100)
      assert.equal(removed, 100)
    } finally {
      AbortSignal.any = saved
    }
  })
})
