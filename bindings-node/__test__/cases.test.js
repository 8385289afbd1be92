'use strict'
// The Node cases of shared/cases/CASES.md: C15, C16, C17 and the Node flavour of C05.
// Mapping: add(fn) = run(fn); size = stats().queued; pending/activeCount = stats().active;
// onIdle() = drain(). "Within 1 tick / macrotask" = by the next setImmediate turn.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')

const native = require('../native.js')
const { Bulkhead, Registry } = require('../index.js')
const { turn, deferred, track, assertIdle, spyPrototype, spyFast } = require('./helpers.js')

/** A task that runs until its own signal aborts, then rejects with the signal's reason. */
function untilAborted(started) {
  return (signal) =>
    new Promise((_, reject) => {
      started.push(true)
      signal.addEventListener('abort', () => reject(signal.reason), { once: true })
    })
}

describe('C15 aborting the running task and a queued task together (p-queue#168)', () => {
  for (const variant of ['S1 then S2', 'S2 then S1', 'both before T1 starts']) {
    test(`C15 ${variant}: both reject AbortError within 1 macrotask; idle; T3 runs`, async () => {
      const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 10 })
      const s1 = new AbortController()
      const s2 = new AbortController()
      const started = []
      let t2Ran = false
      if (variant === 'both before T1 starts') {
        s1.abort()
        s2.abort()
      }
      const t1 = track(bh.run(untilAborted(started), { signal: s1.signal }))
      const t2 = track(bh.run(() => (t2Ran = true), { signal: s2.signal }))
      if (variant !== 'both before T1 starts') {
        assert.equal(started.length, 1, 'T1 is running')
        assert.deepEqual([bh.stats().active, bh.stats().queued], [1, 1], 'T2 is queued')
        // one macrotask, synchronously
        if (variant === 'S1 then S2') {
          s1.abort()
          s2.abort()
        } else {
          s2.abort()
          s1.abort()
        }
      }
      await turn()
      for (const [t, s] of [[t1, s1], [t2, s2]]) {
        assert.equal(t.state, 'rejected')
        assert.equal(t.error, s.signal.reason)
        assert.equal(t.error.name, 'AbortError')
        assert.equal(t.settledCount, 1)
      }
      assert.equal(t2Ran, false)
      assert.equal(started.length, variant === 'both before T1 starts' ? 0 : 1)
      const s = bh.stats()
      assertIdle(s) // size 0, pending 0
      const idle = track(bh.drain())
      await turn()
      assert.deepEqual(idle.value, { drained: true, active: 0, queued: 0 }, 'onIdle() resolves')
      let t3Started = false
      const t3 = bh.run(async () => {
        t3Started = true
        return 't3'
      })
      assert.equal(t3Started, true, 'T3 starts within 1 tick (at once)')
      assert.equal(await t3, 't3')
      assertIdle(bh.stats())
    })
  }
})

describe('C16 already-aborted signal on a saturated queue (p-queue#241)', () => {
  test('C16 concurrency 1: rejects with the signal’s reason within 1 tick; fn never called', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 10 })
    const t0 = bh.run(() => new Promise(() => {})) // never resolves, holds the slot
    void t0
    const ac = new AbortController()
    ac.abort()
    let called = false
    const p = track(bh.run(() => (called = true), { signal: ac.signal }))
    await turn()
    assert.equal(p.state, 'rejected')
    assert.equal(p.error, ac.signal.reason)
    assert.equal(p.error.name, 'AbortError')
    assert.equal(called, false)
    const s = bh.stats()
    assert.equal(s.queued, 0, 'size stays 0')
    assert.equal(s.active, 1, 'pending stays 1 (T0)')
    const q = track(bh.acquire({ signal: ac.signal }))
    await turn()
    assert.equal(q.error, ac.signal.reason, 'acquire too')
  })

  test('C16 concurrency 2 (a slot is free): same rejection; activeCount never goes up', async () => {
    const spy = spyPrototype(native.NativeBulkhead.prototype)
    const fastSpy = spyFast(spy.calls)
    try {
      const bh = new Bulkhead({ maxConcurrent: 2, maxQueue: 10 })
      const t0 = bh.run(() => new Promise(() => {}))
      void t0
      const ac = new AbortController()
      ac.abort()
      let called = false
      spy.calls.length = 0
      const p = track(bh.run(() => (called = true), { signal: ac.signal }))
      const q = track(bh.acquire({ signal: ac.signal }))
      // not even briefly: no admission call reached the core
      assert.deepEqual(
        spy.calls.filter((c) => c === 'enqueue' || c === 'tryTake' || c === 'fastTake'),
        [],
      )
      await turn()
      for (const t of [p, q]) {
        assert.equal(t.state, 'rejected')
        assert.equal(t.error, ac.signal.reason)
      }
      assert.equal(called, false)
      const s = bh.stats()
      assert.equal(s.active, 1)
      assert.equal(s.admittedTotal, 1, 'only T0 was ever admitted')
      assert.equal(s.queued, 0)
    } finally {
      spy.restore()
      fastSpy.restore()
    }
  })
})

describe('C17 aborted tasks free their queue slots at once (p-queue#219)', () => {
  test('C17 10 waiters sharing one signal + H: queued drops by 10 in the same tick; H runs after the release', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 11 })
    const running = deferred()
    const r = bh.run(() => running.promise)
    const s = new AbortController()
    const aborted = []
    const fnCalls = []
    for (let i = 0; i < 10; i++) aborted.push(track(bh.run(() => fnCalls.push(i), { signal: s.signal })))
    let hStarted = false
    const h = track(bh.run(() => (hStarted = true)))
    assert.equal(bh.stats().queued, 11)
    assert.equal(bh.stats().ringFree, 128 - 11) // next_power_of_two(11 + 64) cells
    s.abort()
    // same tick: the 10 slots are free (size 1: only H)
    let st = bh.stats()
    assert.equal(st.queued, 1)
    assert.equal(st.rejectedByReason.aborted, 10)
    // the freed slots are usable at once
    const extra = []
    for (let i = 0; i < 10; i++) extra.push(track(bh.acquire()))
    assert.equal(bh.stats().queued, 11)
    assert.equal(bh.stats().rejectedByReason.queue_limit, 0)
    await turn()
    for (const t of aborted) {
      assert.equal(t.state, 'rejected', 'the 10 promises reject within 1 tick')
      assert.equal(t.error, s.signal.reason)
    }
    assert.deepEqual(fnCalls, [])
    assert.equal(hStarted, false, 'H waits for the running task only')
    running.resolve('r')
    assert.equal(await r, 'r')
    await turn()
    assert.equal(hStarted, true, 'H starts as soon as the running task releases')
    assert.equal(h.state, 'fulfilled')
    // the extras are granted in turn
    for (const t of extra) {
      for (let i = 0; i < 3 && t.state === 'pending'; i++) await turn()
      assert.equal(t.state, 'fulfilled')
      t.value.release()
    }
    st = bh.stats()
    assertIdle(st)
    assert.equal(st.rejectedByReason.aborted, 10)
  })
})

describe('C05 the waiter resumes exactly once, at most 3 loop iterations after the release', () => {
  // Node flavour of C05 (async-lock#41): H holds, W waits through one acquire flavour; H
  // releases after a timer. W's continuation must run exactly once, no later than 3
  // setImmediate turns after the release, and W must not touch the addon while it waits.
  const flavours = {
    'acquire()': (bh) => bh.acquire(),
    'acquire({weight: 2})': (bh) => bh.acquire({ weight: 2 }),
    'acquire({queueTimeoutMs})': (bh) => bh.acquire({ queueTimeoutMs: 60_000 }),
    'acquire({signal})': (bh) => bh.acquire({ signal: new AbortController().signal }),
    'run(fn)': (bh) => bh.run(async () => 'ran'),
    'registry acquire': (bh, reg) => reg.acquire('k'),
    'registry run': (bh, reg) => reg.run('k', () => 'ran'),
  }
  for (const [name, start] of Object.entries(flavours)) {
    test(`C05 ${name}`, async () => {
      const reg = new Registry({ maxConcurrent: 2, queueTimeoutMs: 60_000 })
      const bh = name.startsWith('registry') ? reg.get('k') : new Bulkhead({ maxConcurrent: 2 })
      const h = await bh.acquire({ weight: 2 })
      let resumes = 0
      let resumedAt = -1
      let turnNo = 0
      const w = start(bh, reg).then((v) => {
        resumes++
        resumedAt = turnNo
        if (v && typeof v.release === 'function') v.release()
        return v
      })
      const spy = spyPrototype(native.NativeBulkhead.prototype)
      const fastSpy = spyFast(spy.calls)
      let waitCalls
      try {
        await new Promise((r) => setTimeout(r, 20)) // H works for a while
        waitCalls = [...spy.calls]
      } finally {
        spy.restore()
        fastSpy.restore()
      }
      assert.deepEqual(waitCalls, [], 'W never polls while it waits')
      assert.equal(resumes, 0)
      h.release()
      for (turnNo = 0; turnNo < 10 && resumes === 0; ) {
        await turn()
        turnNo++
      }
      assert.equal(resumes, 1)
      assert.ok(resumedAt <= 3, `resumed ${resumedAt} turns after the release`)
      for (let i = 0; i < 5; i++) await turn()
      assert.equal(resumes, 1, 'exactly once')
      await w
      assertIdle(bh.stats())
    })
  }
})
