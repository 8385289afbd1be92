'use strict'
// SingleFlight (hullguard/dedup; issue 16 item 3). Each test is named after the failure it
// prevents. No timers: every step is driven by promises and macrotask turns.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Readable } = require('node:stream')
const { Bulkhead, BulkheadError } = require('../index.js')
const { SingleFlight, UnshareableResultError, costBucket } = require('../dedup.js')
const { turns, deferred, track } = require('./helpers.js')

/** The shared work: counts its runs, waits for `open`, records the signal it got. */
function gate(result = 'answer') {
  const g = { runs: 0, signals: [], open: deferred() }
  g.fn = async (signal) => {
    g.runs++
    g.signals.push(signal)
    const v = await g.open.promise
    return v === undefined ? result : v
  }
  return g
}

function idle(bh) {
  const s = bh.stats()
  assert.deepEqual([s.active, s.queued, s.available], [0, 0, s.limit])
  return s
}

test('followers share one admission and one run', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2, maxQueue: 8 })
  const sf = new SingleFlight(bh)
  const g = gate()
  const ps = [sf.run('k', g.fn), sf.run('k', g.fn), sf.run('k', g.fn)]
  await turns(2)
  assert.deepEqual([g.runs, sf.size, sf.hits, bh.stats().active], [1, 1, 2, 1])
  g.open.resolve()
  assert.deepEqual(await Promise.all(ps), ['answer', 'answer', 'answer'])
  assert.equal(bh.stats().admittedTotal, 1)
  assert.equal(sf.size, 0)
  idle(bh)
})

test('nothing is cached after the flight lands', async () => {
  const sf = new SingleFlight(new Bulkhead({ maxConcurrent: 2 }))
  let runs = 0
  const fn = async () => ++runs
  assert.equal(await sf.run('k', fn), 1)
  assert.equal(await sf.run('k', fn), 2)
})

test('different keys and weights never share', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4 })
  const sf = new SingleFlight(bh)
  const g = gate()
  const ps = [sf.run('a', g.fn), sf.run('b', g.fn), sf.run('a', g.fn, { weight: 2 }), sf.run(1, g.fn)]
  await turns(2)
  assert.deepEqual([g.runs, sf.size, sf.hits], [3, 4, 0])
  g.open.resolve()
  await Promise.all(ps)
  idle(bh)
})

test('leader abort does not fail followers', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const g = gate()
  const ac = new AbortController()
  const mine = new Error('the leader gave up')
  const leader = track(sf.run('k', g.fn, { signal: ac.signal }))
  const followers = [track(sf.run('k', g.fn)), track(sf.run('k', g.fn))]
  await turns(2)
  ac.abort(mine)
  await turns(2)
  assert.equal(leader.state, 'rejected')
  assert.equal(leader.error, mine) // its own reason
  assert.equal(g.signals[0].aborted, false) // the work goes on for the followers
  assert.deepEqual(followers.map((f) => f.state), ['pending', 'pending'])
  g.open.resolve()
  await Promise.all(followers.map((f) => f.promise))
  assert.deepEqual(followers.map((f) => f.value), ['answer', 'answer'])
  assert.equal(g.runs, 1)
  idle(bh)
})

test("a follower's abort rejects it with its own reason, never a foreign one, and fails no one else", async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const g = gate()
  const leader = track(sf.run('k', g.fn))
  const ac = new AbortController()
  const follower = track(sf.run('k', g.fn, { signal: ac.signal }))
  await turns(2)
  ac.abort() // no reason given: the signal's own AbortError
  await turns(1)
  assert.equal(follower.state, 'rejected')
  assert.equal(follower.error, ac.signal.reason)
  g.open.resolve()
  assert.equal(await leader.promise, 'answer')
})

test('an already aborted signal rejects at once with its reason and starts nothing', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const reason = new Error('already')
  const g = gate()
  await assert.rejects(sf.run('k', g.fn, { signal: AbortSignal.abort(reason) }), (e) => e === reason)
  assert.deepEqual([g.runs, sf.size], [0, 0])
})

test('last-waiter cancellation cancels the work', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const g = gate()
  const acs = [new AbortController(), new AbortController()]
  const ps = acs.map((ac) => track(sf.run('k', g.fn, { signal: ac.signal })))
  await turns(2)
  acs[0].abort()
  await turns(1)
  assert.equal(g.signals[0].aborted, false)
  acs[1].abort()
  await turns(1)
  assert.equal(g.signals[0].aborted, true)
  assert.equal(g.signals[0].reason.name, 'AbortError')
  assert.deepEqual(ps.map((p) => p.error), acs.map((ac) => ac.signal.reason))
  assert.equal(sf.size, 0) // a new caller starts a new flight
  assert.equal(bh.stats().active, 1) // held until fn settles
  g.open.reject(g.signals[0].reason)
  await turns(2)
  idle(bh)
})

test('last-waiter cancellation while queued frees the queue place', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 4 })
  const sf = new SingleFlight(bh)
  const held = await bh.acquire()
  const ac = new AbortController()
  const g = gate()
  const p = track(sf.run('k', g.fn, { signal: ac.signal }))
  await turns(1)
  assert.equal(bh.stats().queued, 1)
  ac.abort()
  await turns(2)
  assert.equal(p.state, 'rejected')
  assert.deepEqual([g.runs, bh.stats().queued, sf.size], [0, 0, 0])
  held.release()
  idle(bh)
})

test('refused leader → followers admitted themselves', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 0 })
  const sf = new SingleFlight(bh)
  const held = await bh.acquire()
  const g = gate()
  g.open.resolve()
  const leader = track(sf.run('k', g.fn))
  const follower = track(sf.run('k', g.fn))
  held.release() // the leader's refusal was decided while full; the follower's is its own
  await turns(3)
  assert.equal(leader.state, 'rejected')
  assert.ok(leader.error instanceof BulkheadError)
  assert.equal(leader.error.reason, 'concurrency_limit')
  assert.equal(await follower.promise, 'answer')
  assert.equal(g.runs, 1)
  idle(bh)
})

test("fn's error is shared and recorded once", async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const boom = new Error('boom')
  const g = gate()
  const ps = [track(sf.run('k', g.fn)), track(sf.run('k', g.fn))]
  await turns(2)
  g.open.reject(boom)
  await turns(2)
  assert.deepEqual(ps.map((p) => p.error), [boom, boom])
  assert.equal(g.runs, 1)
  idle(bh)
})

// ----- streaming results -----------------------------------------------------------------------

function source(n, { failAt = -1 } = {}) {
  const s = { reads: 0, returned: false }
  s.iterable = {
    [Symbol.asyncIterator]() {
      return {
        async next() {
          await null
          if (s.reads === failAt) throw new Error('upstream broke')
          if (s.returned || s.reads >= n) return { done: true, value: undefined }
          return { done: false, value: ++s.reads }
        },
        async return() {
          s.returned = true
          return { done: true, value: undefined }
        },
      }
    },
  }
  return s
}

async function collect(it) {
  const out = []
  for await (const x of it) out.push(x)
  return out
}

test('non-shareable stream refused', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(3)
  const open = deferred()
  const fn = async () => {
    await open.promise
    return src.iterable
  }
  const leader = sf.run('k', fn)
  const follower = track(sf.run('k', fn))
  open.resolve()
  assert.deepEqual(await collect(await leader), [1, 2, 3])
  await turns(1)
  assert.ok(follower.error instanceof UnshareableResultError)
  assert.ok(!(follower.error instanceof BulkheadError))
  assert.equal(follower.error.key, 'k')
  idle(bh)
})

test('a stream holds its permit until it ends', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(2)
  const it = await sf.run('k', async () => src.iterable)
  assert.equal(bh.stats().active, 1)
  assert.deepEqual(await collect(it), [1, 2])
  idle(bh)
})

test('tee shares it (async iterable)', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(4)
  const open = deferred()
  const fn = async () => {
    await open.promise
    return src.iterable
  }
  const ps = [0, 1, 2].map(() => sf.run('k', fn, { tee: true }).then(collect))
  open.resolve()
  assert.deepEqual(await Promise.all(ps), [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]])
  assert.equal(src.reads, 4) // read once
  assert.equal(bh.stats().admittedTotal, 1)
  idle(bh)
})

test('tee shares it (ReadableStream and Node Readable keep their kind)', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const open = deferred()
  const web = async () => {
    await open.promise
    return new ReadableStream({
      start(c) {
        for (const x of ['a', 'b']) c.enqueue(x)
        c.close()
      },
    })
  }
  const ws = [sf.run('w', web, { tee: true }), sf.run('w', web, { tee: true })]
  const node = async () => {
    await open.promise
    return Readable.from(['x', 'y'])
  }
  const ns = [sf.run('n', node, { tee: true }), sf.run('n', node, { tee: true })]
  open.resolve()
  for (const s of await Promise.all(ws)) {
    assert.ok(s instanceof ReadableStream)
    assert.deepEqual(await collect(s), ['a', 'b'])
  }
  for (const s of await Promise.all(ns)) {
    assert.ok(s instanceof Readable)
    assert.deepEqual(await collect(s), ['x', 'y'])
  }
  await turns(2)
  idle(bh)
})

test('every consumer leaving early cancels the source and releases', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(100)
  const fn = async () => src.iterable
  const first = async () => {
    for await (const x of await sf.run('k', fn, { tee: true })) return x
  }
  assert.deepEqual(await Promise.all([first(), first()]), [1, 1])
  await turns(1)
  assert.ok(src.returned)
  assert.ok(src.reads < 100)
  idle(bh)
})

test('a failing stream fails every consumer and releases', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(3, { failAt: 1 })
  const fn = async () => src.iterable
  const ps = [track(sf.run('k', fn, { tee: true }).then(collect)), track(sf.run('k', fn, { tee: true }).then(collect))]
  await turns(4)
  assert.deepEqual(ps.map((p) => p.error?.message), ['upstream broke', 'upstream broke'])
  idle(bh)
})

test("a follower aborted after the stream arrived does not keep the permit held", async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(3)
  const ac = new AbortController()
  const fn = async () => src.iterable
  const leader = sf.run('k', fn)
  const follower = track(sf.run('k', fn, { tee: true, signal: ac.signal }))
  const it = await leader
  ac.abort()
  assert.deepEqual(await collect(it), [1, 2, 3])
  await turns(1)
  idle(bh)
  assert.ok(follower.state !== 'pending')
})

test('a Response is teed with clone()', { skip: typeof Response !== 'function' }, async () => {
  const sf = new SingleFlight(new Bulkhead({ maxConcurrent: 2 }))
  const fn = async () => new Response('hello')
  const [a, b] = await Promise.all([sf.run('k', fn), sf.run('k', fn, { tee: true })])
  assert.deepEqual([await a.text(), await b.text()], ['hello', 'hello'])
  const [c, d] = await Promise.allSettled([sf.run('r', fn), sf.run('r', fn)])
  assert.equal(await c.value.text(), 'hello')
  assert.ok(d.reason instanceof UnshareableResultError)
})

// ----- partitions ------------------------------------------------------------------------------

test('the cost bucket rule', () => {
  assert.deepEqual([0, 1, 2, 3, 4, 7, 8].map(costBucket), [0, 1, 2, 2, 3, 3, 4])
})

test('a call reserving far more never rides a cheaper admission', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, budget: 1000 })
  const sf = new SingleFlight(bh)
  const g = gate()
  const ps = [sf.run('k', g.fn, { cost: 100 }), sf.run('k', g.fn, { cost: 120 }), sf.run('k', g.fn, { cost: 400 })]
  await turns(2)
  assert.deepEqual([g.runs, sf.size, sf.hits], [2, 2, 1])
  assert.equal(bh.stats().budget.inUse, 500)
  g.open.resolve()
  await Promise.all(ps)
  idle(bh)
})

test('a custom cost bucket partitions exact costs', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, budget: 1000 })
  const sf = new SingleFlight(bh, { costBucket: (c) => c })
  const g = gate()
  const ps = [sf.run('k', g.fn, { cost: 100 }), sf.run('k', g.fn, { cost: 101 })]
  await turns(2)
  assert.deepEqual([g.runs, sf.size], [2, 2])
  g.open.resolve()
  await Promise.all(ps)
})

test('enforce follower never joins an observed/bypassed leader', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 4 })
  const sf = new SingleFlight(bh)
  const held = await bh.acquire()
  const shadow = track(sf.run('k', async () => 'shadow', { observe: 'concurrency' }))
  await turns(2)
  assert.equal(shadow.value, 'shadow')
  assert.equal(bh.stats().observedByReason.concurrency_limit, 1)
  const g = gate('enforced')
  g.open.resolve()
  const s2 = sf.run('k', async () => {
    await turns(1)
    return 'shadow'
  }, { observe: 'concurrency' })
  const enforced = track(sf.run('k', g.fn))
  await turns(1)
  assert.equal(enforced.state, 'pending') // queued for its own permit, not the bypassed result
  assert.equal(bh.stats().queued, 1)
  await s2
  held.release()
  assert.equal(await enforced.promise, 'enforced')
  assert.equal(g.runs, 1)
  idle(bh)
})

test('different admission classes never share', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, classes: [{ name: 'batch' }, { name: 'interactive', priority: 1 }] })
  const sf = new SingleFlight(bh)
  const g = gate()
  const ps = [
    sf.run('k', g.fn, { admissionClass: 'batch' }),
    sf.run('k', g.fn, { admissionClass: 'interactive' }),
    sf.run('k', g.fn, { admissionClass: 'interactive' }),
  ]
  await turns(2)
  assert.deepEqual([g.runs, sf.size, sf.hits], [2, 2, 1])
  g.open.resolve()
  await Promise.all(ps)
  idle(bh)
})

// ----- arguments -------------------------------------------------------------------------------

test('bad arguments are named', async () => {
  const sf = new SingleFlight(new Bulkhead({ maxConcurrent: 1 }))
  const fn = async () => 1
  const cases = [
    [() => sf.run(undefined, fn), TypeError, /key/],
    [() => sf.run({}, fn), TypeError, /key/],
    [() => sf.run(NaN, fn), TypeError, /key/],
    [() => sf.run('k', 3), TypeError, /fn/],
    [() => sf.run('k', fn, { cost: -1 }), RangeError, /cost/],
    [() => sf.run('k', fn, { cost: 1.5 }), RangeError, /cost/],
    [() => sf.run('k', fn, { tee: 'yes' }), TypeError, /tee/],
    [() => sf.run('k', fn, { weight: '1' }), TypeError, /weight/],
    [() => sf.run('k', fn, { admissionClass: {} }), TypeError, /admissionClass/],
    [() => sf.run('k', fn, { observe: 1 }), TypeError, /observe/],
    [() => sf.run('k', fn, { weight: 0 }), RangeError, /weight/], // the binding's own check
    [() => sf.run('k', fn, { signal: {} }), TypeError, /signal/],
    [() => sf.run('k', fn, { timeout: 5 }), TypeError, /unknown option "timeout".*"weight"/],
    [() => sf.run('k', fn, 5), TypeError, /options/],
  ]
  for (const [call, type, message] of cases) {
    await assert.rejects(call(), (e) => e instanceof type && message.test(e.message))
  }
  assert.equal(sf.size, 0)
  assert.throws(() => new SingleFlight({}), /bulkhead/)
  assert.throws(() => new SingleFlight(new Bulkhead({ maxConcurrent: 1 }), { costBucket: 3 }), /costBucket/)
  assert.throws(() => new SingleFlight(new Bulkhead({ maxConcurrent: 1 }), { bucket: 3 }), /unknown option "bucket"/)
})

test('a stream nobody claims (every waiter left) is closed and its permit released', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(3)
  const sdk = { controller: new AbortController(), [Symbol.asyncIterator]: () => src.iterable[Symbol.asyncIterator]() }
  const open = deferred()
  const ac = new AbortController()
  const p = track(sf.run('k', async () => {
    await open.promise.catch(() => {})
    return sdk // fn ignores the abort and returns its stream anyway
  }, { signal: ac.signal }))
  await turns(1)
  ac.abort()
  open.resolve()
  await turns(2)
  assert.equal(p.state, 'rejected')
  assert.ok(src.returned)
  assert.equal(sdk.controller.signal.aborted, true)
  idle(bh)
})

test('a branch dropped unread (garbage-collected) lets go of the stream and its permit', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2 })
  const sf = new SingleFlight(bh)
  const src = source(3)
  await (async () => {
    await sf.run('k', async () => src.iterable) // the branch is dropped at once
  })()
  assert.equal(bh.stats().active, 1)
  global.gc()
  for (let i = 0; i < 10 && bh.stats().active !== 0; i++) await turns(1)
  assert.ok(src.returned)
  idle(bh)
})

test('a bulkhead observe switch starts a new flight (when the binding exposes bh.observe)', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 4 })
  const exposed = { observe: 'off', acquire: (o) => bh.acquire(o) }
  const sf = new SingleFlight(exposed)
  const held = await bh.acquire()
  bh.setObserve('concurrency')
  exposed.observe = 'concurrency'
  const shadow = gate('shadow')
  const s = sf.run('k', shadow.fn)
  await turns(2)
  assert.equal(bh.stats().active, 2) // let through in shadow
  bh.setObserve('off')
  exposed.observe = 'off'
  const enforced = gate('enforced')
  enforced.open.resolve()
  const e = track(sf.run('k', enforced.fn))
  await turns(2)
  assert.deepEqual([sf.hits, bh.stats().queued], [0, 1])
  shadow.open.resolve()
  assert.equal(await s, 'shadow')
  assert.equal(e.state, 'pending')
  held.release()
  assert.equal(await e.promise, 'enforced')
  idle(bh)
})

test('a follower of a leader that left is never handed its refusal', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 0 })
  const sf = new SingleFlight(bh)
  const held = await bh.acquire()
  const g = gate()
  g.open.resolve()
  const ac = new AbortController()
  const leader = track(sf.run('k', g.fn, { signal: ac.signal }))
  const follower = track(sf.run('k', g.fn))
  ac.abort() // the leader leaves before its refusal lands
  held.release()
  await turns(3)
  assert.equal(leader.error, ac.signal.reason)
  assert.equal(await follower.promise, 'answer') // retried on its own, not refused
  idle(bh)
})

test('getUsage refunds the unused reservation once', async () => {
  const llm = require('../llm.js')
  const bh = new Bulkhead({ maxConcurrent: 2, budget: 1000 })
  const sf = new SingleFlight(bh)
  const g = gate({ usage: { input_tokens: 30, output_tokens: 12 } })
  const ps = [0, 1, 2].map(() => sf.run('k', g.fn, { cost: 500, getUsage: llm.getUsage }))
  await turns(2)
  g.open.resolve()
  const rs = await Promise.all(ps)
  assert.ok(rs.every((r) => r === rs[0]))
  const b = bh.stats().budget
  assert.deepEqual([b.reservedTotal, b.consumedTotal, b.refundedTotal, b.inUse], [500, 42, 458, 0])
})

test('a throwing getUsage still releases and rejects with its error', async () => {
  const bh = new Bulkhead({ maxConcurrent: 2, budget: 1000 })
  const sf = new SingleFlight(bh)
  const broken = new Error('no usage in this response')
  await assert.rejects(sf.run('k', async () => 1, { cost: 100, getUsage: () => { throw broken } }), (e) => e === broken)
  const b = bh.stats().budget
  assert.deepEqual([b.consumedTotal, b.inUse], [100, 0])
  idle(bh)
  await assert.rejects(sf.run('k', async () => 1, { getUsage: 3 }), /getUsage/)
})
