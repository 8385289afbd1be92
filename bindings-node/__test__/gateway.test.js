'use strict'
// Gateway admission in Node (issue 16; docs/design.md §4.5–4.9, §5.6, §5.7, §8.2): calls and
// budget units in one decision (`cost`), classes by name, `run(fn, {getUsage})` settling with
// the result's usage, the non-throwing style (`admit` / `tryAdmit`), revisioned `applyLimits`,
// the dry run, rejection detail, admission events (`events: true`) and their listener errors,
// the host's rate timer, and a registry's global cap. The decisions themselves are the core's
// (checked by the vectors); these tests check the marshalling and the facade's plumbing.

const { test, describe, after } = require('node:test')
const assert = require('node:assert/strict')

// Spy on the addon before any bulkhead exists (see fastpath.test.js).
const native = require('../native.js')
const { spyPrototype, spyFast, turn } = require('./helpers.js')
const spy = spyPrototype(native.NativeBulkhead.prototype)
const callSpy = spyPrototype(native.NativeCall.prototype, spy.calls)
const fastSpy = spyFast(spy.calls)
after(() => {
  spy.restore()
  callSpy.restore()
  fastSpy.restore()
})

const { Bulkhead, Registry, BulkheadError, StaleRevisionError, ADMISSION_EVENTS, __test } = require('../index.js')
const { kClock, VirtualClock } = __test

const classes = () => [
  { name: 'interactive', priority: 10, floor: 1 },
  { name: 'batch', priority: 0, ceiling: 2 },
]

describe('options', () => {
  test('unknown per-call and construction options are TypeErrors listing the known names', () => {
    const bh = new Bulkhead({ maxConcurrent: 2, budget: 10 })
    assert.throws(() => bh.tryAcquire({ costs: 1 }), (e) => e instanceof TypeError && /"costs".*"cost".*"admissionClass"/.test(e.message))
    assert.throws(() => bh.wouldAdmit({ klass: 1 }), /unknown option "klass"/)
    assert.throws(() => new Bulkhead({ clases: [] }), (e) => e instanceof TypeError && /"classes".*"events"/.test(e.message))
    assert.throws(() => new Bulkhead({ classes: [{ name: 'a', prio: 1 }] }), /unknown option "prio".*"priority".*"budgetFloor"/)
    assert.throws(() => new Bulkhead({ classes: [{ priority: 256 }] }), (e) => e instanceof RangeError && /priority must be/.test(e.message))
    assert.throws(() => new Bulkhead({ classes: [{ name: 'a' }, { name: 'a' }] }), /the name "a" is given to two classes/)
    assert.throws(() => new Bulkhead({ classes: {} }), (e) => e instanceof TypeError && /classes must be an array/.test(e.message))
    assert.throws(() => new Bulkhead({ classes: [{}], rates: { tokens: {} } }), /unknown option "tokens".*"requests"/)
    assert.throws(() => new Bulkhead({ classes: [{}], rates: { requests: { amount: 1, per: 5 } } }), /unknown option "per".*"perMs"/)
    assert.throws(() => new Bulkhead({ events: 1 }), (e) => e instanceof TypeError && /events must be a boolean/.test(e.message))
    assert.throws(() => new Registry({ global: { limit: 1, max_queue: 1 } }), /unknown option "max_queue".*"maxQueue"/)
  })

  test('cost, admissionClass and observe are checked and name the bad value', () => {
    const bh = new Bulkhead({ maxConcurrent: 3, budget: 10, classes: classes() })
    assert.throws(() => bh.tryAcquire({ cost: -1 }), (e) => e instanceof RangeError && /cost must be an integer in 0\.\./.test(e.message))
    assert.throws(() => bh.tryAcquire({ cost: '1' }), TypeError)
    assert.throws(() => bh.tryAcquire({ admissionClass: 'nightly' }), (e) => e instanceof RangeError && /"interactive", "batch"/.test(e.message))
    assert.throws(() => bh.tryAcquire({ admissionClass: {} }), TypeError)
    // An index the bulkhead does not have: the core refuses it.
    assert.throws(() => bh.tryAcquire({ admissionClass: 7 }), RangeError)
    // Over the budget's ceiling: the core's `invalid`, never a refusal.
    assert.throws(() => bh.tryAcquire({ cost: 11 }), RangeError)
    assert.throws(() => new Bulkhead({ maxConcurrent: 1 }).tryAcquire({ observe: 'everything' }), /observe must be one of 'off', 'concurrency', 'budget', 'all'/)
    assert.equal(bh.stats().admittedTotal, 0, 'a bad argument is never counted')
  })

  test('a class is named by its name or its index', () => {
    const bh = new Bulkhead({ maxConcurrent: 3, classes: classes() })
    const a = bh.tryAcquire({ admissionClass: 'batch' })
    const b = bh.tryAcquire({ admissionClass: 1 })
    assert.ok(a && b)
    assert.equal(bh.classStats('batch').inFlight, 2)
    assert.equal(bh.classStats(1).ceiling, 2)
    // Batch is at its ceiling; interactive still gets its floor.
    assert.equal(bh.tryAcquire({ admissionClass: 'batch' }), null)
    const c = bh.tryAdmit({ admissionClass: 'batch' })
    assert.equal(c.ok, false)
    assert.equal(c.detail.class.bound, 'class')
    const i = bh.tryAcquire({ admissionClass: 'interactive' })
    assert.ok(i)
    for (const p of [a, b, i]) p.release()
    assert.throws(() => bh.classStats('nightly'), RangeError)
    assert.equal(bh.stats().active, 0)
  })
})

describe('budget settlement', () => {
  test('run(fn, {cost, getUsage}) releases with the usage of the result, the rest refunded', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2, budget: 100 })
    const out = await bh.run(async () => ({ tokens: 30 }), { cost: 50, getUsage: (r) => r.tokens })
    assert.deepEqual(out, { tokens: 30 })
    const b = bh.stats().budget
    assert.deepEqual([b.inUse, b.consumedTotal, b.refundedTotal], [0, 30, 20])
  })

  test('a getUsage that throws, or a bad usage, still releases; the error rejects run()', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, budget: 100 })
    const boom = new Error('no usage')
    await assert.rejects(
      bh.run(async () => 1, {
        cost: 10,
        getUsage: () => {
          throw boom
        },
      }),
      (e) => e === boom,
    )
    await assert.rejects(bh.run(async () => 1, { cost: 10, getUsage: () => -1 }), RangeError)
    await assert.rejects(bh.run(() => 1, { getUsage: 5 }), TypeError)
    const s = bh.stats()
    assert.deepEqual([s.active, s.budget.inUse], [0, 0], 'nothing leaked')
    // fn failing: no usage asked, the whole cost charged, the error passed on.
    let asked = false
    await assert.rejects(
      bh.run(
        async () => {
          throw boom
        },
        { cost: 10, getUsage: () => (asked = true) },
      ),
      (e) => e === boom,
    )
    assert.equal(asked, false)
    assert.equal(bh.stats().budget.inUse, 0)
  })

  test('permit.release({usage}), reportUsage, refund, cost, revision, cancelRequested', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2, budget: 100, cancelOnOverrun: true })
    const p = await bh.acquire({ cost: 40 })
    assert.deepEqual([p.cost, p.revision, p.cancelRequested], [40, 0, false])
    assert.deepEqual(p.reportUsage(10, 10), { change: 'shrank', by: 20, cancel: false, used: 10, held: 20, overrun: 0 })
    assert.throws(() => p.reportUsage(5), (e) => e instanceof RangeError && e.code === 'ERR_USAGE_DECREASED')
    p.refund(5)
    assert.equal(p.cost, 15)
    assert.throws(() => p.refund(1000), RangeError)
    // Growth past the budget: held past it, the host asked to cancel.
    const q = await bh.acquire({ cost: 80 })
    const r = p.reportUsage(10, 50)
    assert.equal(r.change, 'overran')
    assert.equal(r.cancel, true)
    assert.equal(p.cancelRequested, true)
    q.release()
    assert.equal(p.release({ outcome: 'success', usage: 12 }), true)
    assert.throws(() => p.reportUsage(1), RangeError)
    const s = bh.stats()
    assert.deepEqual([s.active, s.budget.inUse, s.budget.overrunHeld], [0, 0, 0])
  })

  test('a permit of a plain bulkhead reports usage and holds nothing', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const p = await bh.acquire()
    assert.equal(p.reportUsage(5, 5).change, 'unchanged')
    assert.throws(() => p.refund(1), /no budget/)
    assert.deepEqual([p.cost, p.cancelRequested, p.revision], [0, false, 0])
    p.release({ usage: 3 })
    assert.equal(bh.stats().active, 0)
  })
})

describe('the non-throwing style', () => {
  test('admit / tryAdmit resolve {ok, permit} or {ok: false, reason, detail, error}', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 0, budget: 10 })
    const a = await bh.admit({ cost: 4 })
    assert.equal(a.ok, true)
    const b = await bh.admit()
    assert.equal(b.ok, false)
    assert.equal(b.reason, 'concurrency_limit')
    assert.ok(b.error instanceof BulkheadError)
    assert.equal(b.detail, b.error.detail)
    assert.equal(b.detail.bound, 'limit')
    const c = bh.tryAdmit()
    assert.deepEqual([c.ok, c.reason, c.detail.bound], [false, 'concurrency_limit', 'limit'])
    a.permit.release()
    const d = bh.tryAdmit({ cost: 10 })
    assert.equal(d.ok, true)
    d.permit.release()
    // Bad options still throw (synchronously for tryAdmit, as a rejection for admit).
    assert.throws(() => bh.tryAdmit({ cost: 11 }), RangeError)
    await assert.rejects(bh.admit({ weight: 0 }), RangeError)
    const ac = new AbortController()
    ac.abort(new Error('stop'))
    const e = await bh.admit({ signal: ac.signal })
    assert.deepEqual([e.ok, e.reason, e.detail], [false, 'aborted', null])
  })

  test('a BulkheadError carries the core detail; a budget refusal names the budget', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2, maxQueue: 0, budget: 10 })
    const p = bh.tryAcquire({ cost: 8 })
    const e = await bh.acquire({ cost: 5 }).catch((x) => x)
    assert.ok(e instanceof BulkheadError)
    assert.equal(e.reason, 'budget_limit')
    assert.equal(e.detail.bound, 'budget')
    assert.deepEqual(e.detail.budget, { limit: 10, inUse: 8, available: 2 })
    assert.deepEqual(e.detail.calls, { limit: 2, inUse: 1, available: 1 })
    assert.equal(e.detail.retryAfterMs, null)
    assert.equal(e.detail.class, null)
    p.release()
  })
})

describe('limits at run time', () => {
  test('applyLimits: revisioned, a stale revision is a StaleRevisionError with .current', () => {
    const bh = new Bulkhead({ maxConcurrent: 4, budget: 100 })
    bh.applyLimits({ revision: 3, limit: 2, budget: 50 })
    const s = bh.stats()
    assert.deepEqual([s.revision, s.limit, s.budget.limit], [3, 2, 50])
    const p = bh.tryAcquire({ cost: 1 })
    assert.equal(p.revision, 3, 'admitted under revision 3')
    p.release()
    assert.equal(p.revision, 0)
    assert.throws(
      () => bh.applyLimits({ revision: 2, limit: 1 }),
      (e) => e instanceof StaleRevisionError && e.current === 3 && e.revision === 2,
    )
    assert.throws(() => bh.applyLimits({ limit: 1 }), /revision is required/)
    assert.throws(() => bh.applyLimits({ revision: 4, lmit: 1 }), /unknown option "lmit".*"limit"/)
    assert.throws(() => bh.applyLimits({ revision: 4, reserve: { permits: 1 } }), RangeError, 'no classes')
    assert.equal(bh.stats().revision, 3, 'a refused applyLimits changes nothing')
    bh.applyLimits({ revision: 4, limit: 0 })
    assert.equal(bh.tryAdmit().detail.bound, 'kill_switch')
  })

  test('wouldAdmit predicts and counts nothing; setBudget and setObserve', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 2, budget: 10 })
    assert.deepEqual(bh.wouldAdmit({ cost: 3 }), { decision: 'admit_now', position: null, detail: null })
    const p = await bh.acquire()
    assert.deepEqual(bh.wouldAdmit(), { decision: 'would_queue', position: 1, detail: null })
    const r = bh.wouldAdmit({ queueTimeoutMs: 0 })
    assert.equal(r.decision, 'concurrency_limit')
    assert.equal(r.detail.bound, 'limit')
    assert.throws(() => bh.wouldAdmit({ cost: 11 }), RangeError)
    assert.equal(bh.stats().admittedTotal, 1)
    bh.setObserve('concurrency')
    assert.equal(bh.stats().observe, 'concurrency')
    assert.throws(() => bh.setObserve('loud'), RangeError)
    const q = await bh.acquire({ queueTimeoutMs: 0 })
    assert.equal(bh.stats().observedByReason.concurrency_limit, 1)
    bh.setBudget(5)
    assert.equal(bh.stats().budget.limit, 5)
    assert.throws(() => bh.setBudget(11), RangeError, 'above the budget it was built with')
    assert.throws(() => bh.setBudget(-1), RangeError)
    assert.throws(() => new Bulkhead({ maxConcurrent: 1 }).setBudget(5), RangeError)
    p.release()
    q.release()
  })

  test('the host rate timer grants a rate-held waiter without anybody polling', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] })
    try {
      const clock = new VirtualClock()
      const bh = new Bulkhead({
        maxConcurrent: 4,
        maxQueue: 4,
        classes: [{}],
        rates: { requests: { amount: 1, perMs: 100, burst: 1 } },
        [kClock]: clock,
      })
      const a = await bh.acquire()
      let granted = null
      bh.acquire().then((p) => (granted = p))
      await turn()
      assert.equal(granted, null)
      assert.equal(bh.stats().queued, 1)
      clock.advance(100)
      t.mock.timers.tick(100)
      await turn()
      assert.ok(granted, 'the facade ticked the rate at its conforming time')
      a.release()
      granted.release()
    } finally {
      t.mock.timers.reset()
    }
  })
})

describe('a registry with a global cap', () => {
  test('keys are classes of one admission: keyStats, globalStats, admit, wouldAdmit', async () => {
    const reg = new Registry({ maxConcurrent: 1, maxQueue: 4, maxKeys: 8, global: { limit: 2, maxQueue: 4 } })
    const a = await reg.acquire('a')
    assert.equal(reg.tryAcquire('a'), null)
    const b = reg.tryAdmit('b')
    assert.equal(b.ok, true)
    assert.equal(reg.wouldAdmit('c').decision, 'would_queue')
    assert.deepEqual(reg.keys(), ['a', 'b'], 'a dry run creates no key')
    assert.equal(reg.keyStats('a').inFlight, 1)
    assert.equal(reg.keyStats('zz'), null)
    assert.equal(reg.globalStats().active, 2)
    let c = null
    reg.acquire('c').then((p) => (c = p))
    await turn()
    assert.equal(reg.keyStats('c').queued, 1)
    b.permit.release()
    await turn()
    assert.ok(c)
    a.release()
    c.release()
    assert.equal(reg.globalStats().active, 0)
    assert.equal(new Registry({ maxConcurrent: 1 }).globalStats(), null)
  })
})

describe('admission events', () => {
  test('an admission event needs events: true (a TypeError naming it); stateChange does not', () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    for (const e of ADMISSION_EVENTS) assert.throws(() => bh.on(e, () => {}), /events: true/)
    assert.throws(() => bh.on('admitted', () => {}), /unknown event "admitted".*'observeBypass'/)
    bh.on('stateChange', () => {}).off('stateChange', () => {})
  })

  test('no listener = no cost: without events an uncontended run() is fastTake + fastGive', async () => {
    const plain = new Bulkhead({ maxConcurrent: 2 })
    spy.calls.length = 0
    await plain.run(() => 1)
    assert.deepEqual(spy.calls, ['fastTake', 'fastGive'])
    // With events the bulkhead takes the guarded path (its calls are NativeCalls).
    const evented = new Bulkhead({ maxConcurrent: 2, events: true })
    spy.calls.length = 0
    await evented.run(() => 1)
    assert.ok(spy.calls.includes('enqueue') && !spy.calls.includes('fastTake'), spy.calls.join())
  })

  test('admit, reject, usage, release, reconfigure and observeBypass reach their listeners', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 0, budget: 10, events: true })
    const seen = []
    const listen = (name) => (e) => seen.push([name, e])
    for (const e of ['admit', 'reject', 'usage', 'release', 'reconfigure', 'observeBypass']) bh.on(e, listen(e))
    const p = await bh.acquire({ cost: 6 })
    await bh.acquire().catch(() => {})
    p.reportUsage(2, 1)
    p.release({ usage: 3 })
    bh.applyLimits({ revision: 1, limit: 1 })
    bh.setObserve('all')
    ;(await bh.acquire({ cost: 1 })).release()
    ;(await bh.acquire({ cost: 1 })).release()
    const names = seen.map(([n]) => n)
    assert.deepEqual(names.slice(0, 6), ['admit', 'reject', 'usage', 'release', 'reconfigure', 'reconfigure'])
    const [admit, reject, usage, release] = seen.map(([, e]) => e)
    assert.deepEqual(
      [admit.type, admit.key, admit.weight, admit.cost, admit.queued, admit.id],
      ['admit', null, 1, 6, false, 1],
    )
    assert.deepEqual([reject.reason, reject.id], ['concurrency_limit', 2])
    assert.deepEqual([usage.change, usage.by, usage.used, usage.held, usage.id], ['shrank', 3, 2, 3, 1])
    assert.deepEqual([release.ended, release.used, release.held, release.id], [true, 3, 3, 1])
    assert.equal(seen[4][1].revision, 1)
    assert.equal(seen[5][1].observe, 'all')
  })

  test('a listener that throws is reported with emitWarning and counted; admission goes on', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, events: true })
    const boom = new Error('listener bug')
    const thrower = () => {
      throw boom
    }
    let after = 0
    bh.on('admit', thrower).on('admit', () => after++)
    const warnings = []
    const onWarning = (w) => warnings.push(w)
    process.on('warning', onWarning)
    try {
      const p = await bh.acquire()
      assert.equal(after, 1, 'the next listener still runs')
      p.release()
      await turn()
      assert.equal(bh.listenerErrors, 1)
      assert.equal(warnings.length, 1)
      assert.equal(warnings[0].cause, boom)
      bh.off('admit', thrower)
      ;(await bh.acquire()).release()
      assert.equal(bh.listenerErrors, 1)
      assert.equal(after, 2)
      assert.equal(bh.stats().active, 0)
    } finally {
      process.off('warning', onWarning)
    }
  })
})

describe('events and permits, more', () => {
  test('shed and observeBypass events; the shed waiter is refused shed', async () => {
    const bh = new Bulkhead({
      maxConcurrent: 1,
      maxQueue: 1,
      classes: [{ name: 'hi', priority: 10 }, { name: 'lo' }],
      shed: true,
      events: true,
    })
    const events = []
    bh.on('shed', (e) => events.push(e))
    const held = await bh.acquire({ admissionClass: 'hi' })
    const lo = bh.acquire({ admissionClass: 'lo' }).catch((e) => e)
    const hi = bh.acquire({ admissionClass: 'hi' })
    const shed = await lo
    assert.ok(shed instanceof BulkheadError)
    assert.equal(shed.reason, 'shed')
    assert.equal(events.length, 1)
    assert.deepEqual([events[0].type, events[0].class, events[0].victimClass], ['shed', 0, 1])
    held.release()
    ;(await hi).release()

    const ob = new Bulkhead({ maxConcurrent: 1, observe: 'concurrency', events: true })
    const bypass = []
    ob.on('observeBypass', (e) => bypass.push(e.reason))
    const a = await ob.acquire()
    const b = await ob.acquire()
    assert.deepEqual(bypass, ['concurrency_limit'])
    a.release()
    b.release()
  })

  test('a stateChange listener that throws is reported and counted too (was: an uncaught exception)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, resilience: { breaker: { failureThreshold: 1, openDurationMs: 1000 } } })
    bh.on('stateChange', () => {
      throw new Error('bad listener')
    })
    const onWarning = () => {}
    process.on('warning', onWarning)
    try {
      ;(await bh.acquire()).release({ outcome: 'failure' })
      assert.equal(bh.stats().circuit.state, 'open')
      assert.equal(bh.listenerErrors, 1)
    } finally {
      process.off('warning', onWarning)
    }
  })

  test('a permit with a cost dropped without release returns its permits and units', async () => {
    const bh = new Bulkhead({ maxConcurrent: 2, budget: 10 })
    await (async () => {
      await bh.acquire({ cost: 7 })
    })()
    assert.equal(bh.stats().budget.inUse, 7)
    global.gc()
    for (let i = 0; i < 10 && bh.stats().leakedTotal === 0; i++) await turn()
    const s = bh.stats()
    assert.deepEqual([s.leakedTotal, s.active, s.budget.inUse], [1, 0, 0])
  })

  test('orphan(): the permits go back while the units stay held until release', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxOrphaned: 1, budget: 10 })
    const p = await bh.acquire({ cost: 4 })
    assert.equal(p.orphan(), true)
    assert.equal(p.orphan(), false)
    const s = bh.stats()
    assert.deepEqual([s.active, s.orphanedInFlight, s.budget.inUse], [0, 1, 4])
    const q = bh.tryAcquire()
    assert.ok(q)
    assert.throws(() => q.orphan(), RangeError, 'maxOrphaned reached')
    p.release()
    q.release()
    assert.deepEqual([bh.stats().orphanedInFlight, bh.stats().budget.inUse], [0, 0])
    const plain = await new Bulkhead({ maxConcurrent: 1 }).acquire()
    assert.throws(() => plain.orphan(), RangeError)
    plain.release()
  })
})

test('a registry with events: true delivers every key’s admission events, with the key', async () => {
  const reg = new Registry({ maxConcurrent: 1, events: true })
  const seen = []
  reg.on('admit', (e) => seen.push(e.key))
  const a = await reg.acquire('a')
  const b = reg.tryAcquire('b')
  a.release()
  b.release()
  assert.deepEqual(seen, ['a', 'b'])
  // A key's bulkhead hears its own key only.
  const onlyA = []
  reg.get('a').on('admit', (e) => onlyA.push(e.key))
  ;(await reg.acquire('b')).release()
  ;(await reg.acquire('a')).release()
  assert.deepEqual(onlyA, ['a'])
  assert.throws(() => new Registry({ maxConcurrent: 1 }).on('admit', () => {}), /events: true/)
})

test('run(fn, {getUsage}) with a call timeout: the usage settles it; the deadline still holds', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, budget: 100, resilience: { callTimeoutMs: 10_000 } })
  assert.equal(await bh.run(async () => 5, { cost: 40, getUsage: (r) => r }), 5)
  let b = bh.stats().budget
  assert.deepEqual([b.inUse, b.consumedTotal, b.refundedTotal], [0, 5, 35])
  // No usage known: the whole cost charged.
  await bh.run(async () => 1, { cost: 10, getUsage: () => undefined })
  b = bh.stats().budget
  assert.deepEqual([b.inUse, b.consumedTotal], [0, 15])
  // Past the deadline run() rejects at once; the permits and units stay held until fn settles.
  const quick = new Bulkhead({ maxConcurrent: 1, budget: 100, resilience: { callTimeoutMs: 1 } })
  let finishFn
  const work = new Promise((resolve) => (finishFn = resolve))
  const keepAlive = setInterval(() => {}, 1000) // the call timer is unref'd
  try {
    await assert.rejects(
      quick.run(() => work, { cost: 10, getUsage: (r) => r }),
      (e) => e instanceof BulkheadError && e.reason === 'call_timeout',
    )
  } finally {
    clearInterval(keepAlive)
  }
  assert.deepEqual([quick.stats().active, quick.stats().budget.inUse], [1, 10])
  finishFn(3)
  await work
  await turn()
  const q = quick.stats()
  assert.deepEqual([q.active, q.budget.inUse, q.budget.consumedTotal], [0, 0, 3])
})

test('a classed bulkhead: run() is one enqueue and one release, plus the rate check', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2, classes: [{ name: 'a' }] })
  spy.calls.length = 0
  await bh.run(() => 1, { admissionClass: 'a' })
  const methods = spy.calls.filter((c) => !c.startsWith('get '))
  assert.deepEqual(methods, ['enqueue', 'release'])
})

test('under a global cap a key handle’s setLimit is the key’s own limit', async () => {
  const reg = new Registry({ maxConcurrent: 1, maxKeys: 4, global: { limit: 3, maxQueue: 4 } })
  const a = reg.get('a')
  a.setLimit(2)
  assert.equal(reg.keyStats('a').ceiling, 2)
  assert.equal(reg.globalStats().limit, 3, 'the cap is unchanged')
  const p = [reg.tryAcquire('a'), reg.tryAcquire('a')]
  assert.ok(p[0] && p[1])
  assert.equal(reg.tryAcquire('a'), null)
  for (const x of p) x.release()
})
