'use strict'
// Cancellation (docs/design.md, the Node binding): the promise rejects with `signal.reason`, as fetch does, and
// `fn` is never called; the core records `aborted`; the waiter's queue slot frees at once; a
// cancel racing a grant has exactly one winner (I3, I7) and never loses a permit (I2).

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')

const { Bulkhead, Registry } = require('../index.js')
const { turn, turns, track, assertIdle, assertConserved } = require('./helpers.js')

describe('an already aborted signal', () => {
  test('run: rejects at once with signal.reason; fn never runs; nothing admitted', async () => {
    for (const maxConcurrent of [1, 2]) {
      const bh = new Bulkhead({ maxConcurrent, maxQueue: 10 })
      const hold = maxConcurrent === 1 ? bh.tryAcquire() : null
      const ac = new AbortController()
      ac.abort()
      let called = false
      const p = track(bh.run(() => (called = true), { signal: ac.signal }))
      await turn()
      assert.equal(p.state, 'rejected')
      assert.equal(p.error, ac.signal.reason)
      assert.equal(p.error.name, 'AbortError')
      assert.ok(p.error instanceof DOMException)
      assert.equal(called, false)
      const s = bh.stats()
      assert.equal(s.queued, 0)
      assert.equal(s.admittedTotal, hold ? 1 : 0, 'never admitted, not even briefly')
      hold?.release()
      assertIdle(bh.stats())
    }
  })

  test('acquire: rejects at once with the custom reason', async () => {
    const bh = new Bulkhead()
    const reason = new Error('caller gave up')
    await assert.rejects(bh.acquire({ signal: AbortSignal.abort(reason) }), (e) => e === reason)
    await assert.rejects(bh.acquire({ signal: AbortSignal.abort('a string') }), (e) => e === 'a string')
    const r = new Registry()
    await assert.rejects(r.run('k', () => 1, { signal: AbortSignal.abort(reason) }), (e) => e === reason)
    await assert.rejects(r.acquire('k', { signal: AbortSignal.abort(reason) }), (e) => e === reason)
    assert.equal(bh.stats().admittedTotal, 0)
  })
})

describe('aborting a queued waiter', () => {
  test('rejects with signal.reason, removes the waiter, frees its slot at once, counts aborted', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 1 })
    const h = await bh.acquire()
    const ac = new AbortController()
    let called = false
    const w = track(bh.run(() => (called = true), { signal: ac.signal }))
    assert.equal(bh.stats().queued, 1)
    await assert.rejects(bh.acquire(), { reason: 'queue_limit' })
    ac.abort()
    // synchronously: the slot is free and a new acquire can queue
    assert.equal(bh.stats().queued, 0)
    const next = track(bh.acquire())
    assert.equal(bh.stats().queued, 1)
    await turn()
    assert.equal(w.state, 'rejected')
    assert.equal(w.error, ac.signal.reason)
    assert.equal(w.error.name, 'AbortError')
    assert.equal(called, false)
    assert.equal(next.state, 'pending')
    h.release()
    await turn()
    assert.equal(next.state, 'fulfilled')
    next.value.release()
    const s = bh.stats()
    assertIdle(s)
    assert.equal(s.rejectedByReason.aborted, 1)
    assert.equal(s.rejectedByReason.queue_limit, 1)
  })

  test('custom abort reasons propagate unchanged (Error, string, undefined → AbortError)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = await bh.acquire()
    const reasons = [new TypeError('custom'), 'plain string', 42, { why: 'object' }]
    for (const reason of reasons) {
      const ac = new AbortController()
      const w = bh.acquire({ signal: ac.signal })
      ac.abort(reason)
      await assert.rejects(w, (e) => e === reason)
    }
    const ac = new AbortController()
    const w = bh.run(() => 1, { signal: ac.signal })
    ac.abort()
    await assert.rejects(w, (e) => e instanceof DOMException && e.name === 'AbortError')
    assert.equal(bh.stats().rejectedByReason.aborted, 5)
    h.release()
    assertIdle(bh.stats())
  })

  test('AbortSignal.timeout aborts a queued waiter with a TimeoutError DOMException', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1, queueTimeoutMs: Infinity })
    const h = await bh.acquire()
    const signal = AbortSignal.timeout(5)
    const keep = setTimeout(() => {}, 1000)
    await assert.rejects(bh.acquire({ signal }), (e) => e === signal.reason && e.name === 'TimeoutError')
    clearTimeout(keep)
    h.release()
    assert.equal(bh.stats().rejectedByReason.aborted, 1)
  })

  test('cancelling the heavy head passes the turn on (C02 in Node)', async () => {
    const bh = new Bulkhead({ maxConcurrent: 10, maxQueue: 10 })
    const h = await bh.acquire({ weight: 8 })
    const ac = new AbortController()
    const w1 = track(bh.acquire({ weight: 5, signal: ac.signal }))
    const w2 = track(bh.acquire({ weight: 2 }))
    await turn()
    assert.equal(w2.state, 'pending', 'no barging past the head')
    ac.abort()
    await turn()
    assert.equal(w1.state, 'rejected')
    assert.equal(w2.state, 'fulfilled')
    assert.equal(bh.stats().available, 0)
    h.release()
    w2.value.release()
    assertIdle(bh.stats())
  })

  test('abort after the grant is a no-op: the caller keeps the permit', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = await bh.acquire()
    const ac = new AbortController()
    const w = bh.acquire({ signal: ac.signal })
    h.release()
    const permit = await w
    ac.abort()
    assert.equal(permit.released, false)
    assert.equal(bh.stats().active, 1)
    assert.equal(bh.stats().rejectedByReason.aborted, 0)
    permit.release()
    assertIdle(bh.stats())
  })

  test('a running fn sees its signal abort; the permit is released when fn settles', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const ac = new AbortController()
    const p = bh.run(
      (signal) =>
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true })),
      { signal: ac.signal },
    )
    assert.equal(bh.stats().active, 1)
    ac.abort()
    await assert.rejects(p, { name: 'AbortError' })
    assertIdle(bh.stats())
    assert.equal(bh.stats().rejectedByReason.aborted, 0, 'in-flight work is not an admission abort')
  })

  test('the abort listener is removed once the waiter settles', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = await bh.acquire()
    const ac = new AbortController()
    const added = []
    const removed = []
    const { addEventListener, removeEventListener } = ac.signal
    ac.signal.addEventListener = function (type, fn, o) {
      added.push(type)
      return addEventListener.call(this, type, fn, o)
    }
    ac.signal.removeEventListener = function (type, fn, o) {
      removed.push(type)
      return removeEventListener.call(this, type, fn, o)
    }
    const w = bh.acquire({ signal: ac.signal })
    h.release()
    ;(await w).release()
    assert.deepEqual(added, ['abort'])
    assert.deepEqual(removed, ['abort'])
  })
})

describe('AbortSignal races: one outcome, no permit lost', () => {
  test('release then abort in the same tick: granted', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = await bh.acquire()
    const ac = new AbortController()
    const w = track(bh.acquire({ signal: ac.signal }))
    h.release()
    ac.abort()
    await turns(2)
    assert.equal(w.state, 'fulfilled')
    assert.equal(w.settledCount, 1)
    assert.equal(bh.stats().rejectedByReason.aborted, 0)
    w.value.release()
    assertIdle(bh.stats())
  })

  test('abort then release in the same tick: aborted; the permit returns', async () => {
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const h = await bh.acquire()
    const ac = new AbortController()
    const w = track(bh.acquire({ signal: ac.signal }))
    ac.abort()
    h.release()
    await turns(2)
    assert.equal(w.state, 'rejected')
    assert.equal(w.settledCount, 1)
    assertIdle(bh.stats())
    assert.equal(bh.stats().rejectedByReason.aborted, 1)
  })

  test('abort inside the release (an abort listener that releases the holder)', async () => {
    // The user's listener runs first and releases: the grant and the abort race inside one
    // event dispatch. Either outcome is fine; exactly one must happen.
    for (const order of ['listener-first', 'waiter-first']) {
      const bh = new Bulkhead({ maxConcurrent: 1 })
      const h = await bh.acquire()
      const ac = new AbortController()
      if (order === 'listener-first') ac.signal.addEventListener('abort', () => h.release())
      const w = track(bh.acquire({ signal: ac.signal }))
      if (order === 'waiter-first') ac.signal.addEventListener('abort', () => h.release())
      ac.abort()
      await turns(2)
      assert.equal(w.settledCount, 1, order)
      if (w.state === 'fulfilled') w.value.release()
      const s = bh.stats()
      assertIdle(s, order)
      assert.equal(s.admittedTotal + s.rejectedByReason.aborted, 2, order)
    }
  })

  test('release + abort with a second waiter: the turn passes to it either way', async () => {
    for (const abortFirst of [true, false]) {
      const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 4 })
      const h = await bh.acquire()
      const ac = new AbortController()
      const w1 = track(bh.acquire({ signal: ac.signal }))
      const w2 = track(bh.acquire())
      if (abortFirst) {
        ac.abort()
        h.release()
      } else {
        h.release()
        ac.abort()
      }
      await turns(2)
      if (abortFirst) {
        assert.equal(w1.state, 'rejected')
        assert.equal(w2.state, 'fulfilled')
        w2.value.release()
      } else {
        assert.equal(w1.state, 'fulfilled')
        assert.equal(w2.state, 'pending')
        w1.value.release()
        await turn()
        assert.equal(w2.state, 'fulfilled')
        w2.value.release()
      }
      assertIdle(bh.stats())
    }
  })

  test('fuzz: random same-tick orders of release / abort W1 / abort W2 / new acquire', async () => {
    // C11 in Node: 2 000 iterations, each ends with every promise settled exactly once and the
    // bulkhead idle (available == limit).
    let seed = 0x9e3779b9
    const rand = (n) => {
      seed ^= seed << 13
      seed ^= seed >>> 17
      seed ^= seed << 5
      return (seed >>> 0) % n
    }
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 8 })
    for (let i = 0; i < 2000; i++) {
      const h = await bh.acquire()
      const a1 = new AbortController()
      const a2 = new AbortController()
      const all = [track(bh.acquire({ signal: a1.signal })), track(bh.run(() => turn(), { signal: a2.signal }))]
      const ops = [
        () => h.release(),
        () => a1.abort(),
        () => a2.abort(),
        () => all.push(track(bh.acquire({ queueTimeoutMs: Infinity }))),
      ]
      for (let k = ops.length - 1; k > 0; k--) {
        const j = rand(k + 1)
        ;[ops[k], ops[j]] = [ops[j], ops[k]]
      }
      for (const op of ops) op()
      assertConserved(bh.stats(), `iteration ${i}`)
      // drain: release every permit that comes out, until everything settled
      for (let spins = 0; spins < 50 && all.some((t) => t.state === 'pending' || (t.value && !t.value.released)); spins++) {
        await turn()
        for (const t of all) if (t.state === 'fulfilled' && t.value && typeof t.value.release === 'function' && !t.value.released) t.value.release()
      }
      for (const t of all) {
        assert.equal(t.settledCount, 1, `iteration ${i}: settles once`)
      }
      assertIdle(bh.stats(), `iteration ${i}`)
    }
    const s = bh.stats()
    assert.equal(s.releasedTwiceTotal, 0)
    assert.equal(s.leakedTotal, 0)
  })
})
