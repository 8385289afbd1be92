'use strict'
// Queue deadlines on one timer per timeout value (deadlines.js; issue 15): waiters time out as
// with a timer each, FIFO, counted `timeout`; one host timer serves every waiter of a timeout
// value; a waiter settled first is dropped, and the FIFO's memory stays in the order of the live
// waiters. Real time: every bound here is generous (a busy machine passes).

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { Bulkhead, Registry } = require('../index.js')
const { deadlineStats } = require('../deadlines.js')

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Queue timers are unref'd (they never keep a process alive): hold the loop open meanwhile.
let keepAlive
before(() => {
  keepAlive = setInterval(() => {}, 1_000)
})
after(() => clearInterval(keepAlive))

test('hot-path waiters time out in arrival order, counted `timeout`, on one host timer', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 1000, queueTimeoutMs: 30 })
  const held = await bh.acquire()
  const realSetTimeout = global.setTimeout
  let armed = 0
  global.setTimeout = (...a) => {
    armed++
    return realSetTimeout(...a)
  }
  const order = []
  let ps
  try {
    ps = Array.from({ length: 100 }, (_, i) =>
      bh.run(() => 1).then(
        () => assert.fail('granted'),
        (e) => {
          assert.equal(e.code, 'BULKHEAD_QUEUE_TIMEOUT')
          order.push(i)
        },
      ),
    )
  } finally {
    global.setTimeout = realSetTimeout
  }
  assert.ok(armed <= 1, `one host timer for 100 waiters, armed ${armed}`)
  const t0 = performance.now()
  await Promise.all(ps)
  const waited = performance.now() - t0
  assert.ok(waited >= 25, `expired after ${waited} ms, before the 30 ms deadline`)
  assert.deepEqual(order, [...Array(100).keys()], 'FIFO')
  const s = bh.stats()
  assert.equal(s.rejectedByReason.timeout, 100)
  assert.equal(s.queued, 0)
  held.release()
  assert.equal(deadlineStats().live, 0)
})

test('waiters granted before their deadline are dropped from the FIFO, and it stays small', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 20_000, queueTimeoutMs: 60_000 })
  for (let round = 0; round < 3; round++) {
    const ps = Array.from({ length: 5_000 }, () => bh.run(() => 1))
    await Promise.all(ps)
    const d = deadlineStats()
    assert.equal(d.live, 0, 'every deadline cancelled')
    assert.ok(d.entries <= 2 * d.live + 64 + 1, `compacted: ${JSON.stringify(d)}`)
  }
  const s = bh.stats()
  assert.equal(s.rejectedByReason.timeout, 0)
  assert.equal(s.admittedTotal, 15_000)
})

test('per-call timeouts: each value its own FIFO; they expire by their own deadlines', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 10 })
  const held = await bh.acquire()
  const settled = []
  const long = bh.acquire({ queueTimeoutMs: 400 })
  const short = bh.acquire({ queueTimeoutMs: 20 }).then(
    () => assert.fail('granted'),
    (e) => settled.push(e.code),
  )
  await short
  assert.deepEqual(settled, ['BULKHEAD_QUEUE_TIMEOUT'], 'the later, shorter deadline first')
  held.release()
  // The long waiter is granted by the release (its deadline then cancelled, never expired).
  ;(await long).release()
  await sleep(450)
  const s = bh.stats()
  assert.equal(s.rejectedByReason.timeout, 1)
  assert.equal(s.admittedTotal, 2)
})

test('a registry key’s waiters use the FIFO too; an abort still settles at once', async () => {
  const reg = new Registry({ maxConcurrent: 1, queueTimeoutMs: 25 })
  const held = await reg.acquire('k')
  const timedOut = reg.run('k', () => 1)
  const ac = new AbortController()
  const aborted = reg.run('k', () => 1, { signal: ac.signal })
  ac.abort()
  await assert.rejects(aborted, { name: 'AbortError' })
  await assert.rejects(timedOut, { code: 'BULKHEAD_QUEUE_TIMEOUT' })
  held.release()
  assert.equal(reg.stats().k.rejectedByReason.timeout, 1)
  assert.equal(reg.stats().k.rejectedByReason.aborted, 1)
})

test('an expiry that settles other waiters of its FIFO mid-walk (a review found a crash here)', async () => {
  // The shared FIFO of one timeout value: [H, 64 settled entries, W1]. Heavy waiter H heads
  // bulkhead `a`'s queue with W1 behind it (no barging); bulkhead `b`'s 64 waiters, queued in
  // between and granted at once, left settled entries. H's expiry grants W1 while the timer walks
  // the FIFO; W1's cancel tips the compaction rule and must not compact under the walk.
  const a = new Bulkhead({ maxConcurrent: 2, maxQueue: 10, queueTimeoutMs: 40 })
  const b = new Bulkhead({ maxConcurrent: 1, maxQueue: 1000, queueTimeoutMs: 40 })
  const held = await a.acquire()
  const heavy = a.acquire({ weight: 2 })
  const bHeld = await b.acquire()
  const churn = Array.from({ length: 64 }, () => b.run(() => 1))
  bHeld.release()
  await Promise.all(churn)
  const w1 = a.acquire()
  await assert.rejects(heavy, { code: 'BULKHEAD_QUEUE_TIMEOUT' })
  ;(await w1).release() // H's expiry granted W1
  held.release()
  const s = a.stats()
  assert.equal(s.active + s.queued + s.grantedUnclaimed, 0)
  assert.equal(s.rejectedByReason.timeout, 1)
  assert.equal(deadlineStats().live, 0)
})
