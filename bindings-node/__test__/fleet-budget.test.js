'use strict'
// FleetBulkhead's fleet budget, classes and events (docs/design.md §16.10) against real
// redis-server processes (fleet-redis.js: a free loopback port each, killed and reaped after),
// with ioredis and node-redis: the budget leased like the permits (two holders converge to fair
// shares while Redis never counts more than the budget held and an oracle never sees more units
// in flight; a cost above the block waits for it to grow, one above the fleet budget is refused
// `budget_limit`; a try refused while the budget block is 0 has the bound `fleet_lease`);
// applyLimits({revision, budget}) under a revision; close gives both blocks back; admission
// classes inside this process's block (a higher-priority waiter first); the local core's
// admission events through `on`; bad input refused by name. Time bounds are queue timeouts or
// eventually()'s generous limits (10× the target or more); no speed is asserted.

const { test } = require('node:test')
const assert = require('node:assert/strict')

const { BulkheadError, FleetBulkhead } = require('../index.js')
const { startRedis, client, eventually } = require('./fleet-redis.js')

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** A fleet bulkhead on `c` for `pool` (closed when `t` ends). */
function fleet(t, c, pool, options = {}) {
  const f = new FleetBulkhead(c, { pool, maxConcurrent: 10, leaseTtlMs: 600, queueTimeoutMs: 10_000, ...options })
  t.after(() => f.close())
  return f
}

/** `tryAdmit(opts)`'s refusal (asserting it is one), as `{reason, bound}`. */
function refusal(f, opts) {
  const r = f.tryAdmit(opts)
  if (r.ok) {
    r.permit.release()
    assert.fail(`admitted ${JSON.stringify(opts)}`)
  }
  assert.ok(r.error instanceof BulkheadError)
  return { reason: r.reason, bound: r.detail.bound }
}

/** The units held across a pool's budget table, as Redis counts them (one `hg_stats`). */
async function heldInRedis(f) {
  const p = await f.poolStats('budget')
  return { sum: p.holders.reduce((n, h) => n + h.held, 0), used: p.used, limit: p.limit, holders: p.holders.length }
}

test('a fleet budget: two holders converge to fair shares; Redis never holds, and no oracle sees in flight, more than it', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const budget = 100
  const pool = 'units'
  // The permits are not the bound here (50 each at most); the budget is.
  const a = fleet(t, client(t, srv, 'ioredis'), pool, { maxConcurrent: 50, budget })
  const b = fleet(t, await client(t, srv, 'node-redis'), pool, { maxConcurrent: 50, budget })
  let units = 0
  let peak = 0
  let admitted = 0
  let stop = false
  const loops = []
  for (const f of [a, b]) {
    for (let i = 0; i < 6; i++) {
      const cost = 10 + 5 * (i % 3) // 10, 15, 20 units
      loops.push(
        (async () => {
          while (!stop) {
            let p
            try {
              p = await f.acquire({ cost, queueTimeoutMs: 200 })
            } catch {
              await sleep(1)
              continue
            }
            units += cost
            peak = Math.max(peak, units)
            admitted++
            await sleep(2)
            units -= cost
            p.release()
          }
        })(),
      )
    }
  }
  // Every sample of the budget table: the blocks Redis counts sum to at most the budget.
  let samples = 0
  let worst = 0
  const sampler = (async () => {
    while (!stop) {
      const h = await heldInRedis(a)
      worst = Math.max(worst, h.sum, h.used)
      samples++
      await sleep(5)
    }
  })()
  try {
    // Both want more than half: each converges to 50 units (target: a few beats; allowed 20 s).
    await eventually(
      'budget shares of 50 and 50',
      () => {
        const [sa, sb] = [a.stats().budgetLease, b.stats().budgetLease]
        return sa.share === 50 && sb.share === 50 && sa.held === 50 && sb.held === 50
      },
      20_000,
    )
  } finally {
    stop = true
    await Promise.all([...loops, sampler])
  }
  assert.ok(peak <= budget, `units in flight ${peak} > the fleet budget ${budget}`)
  assert.ok(worst <= budget, `Redis held ${worst} units > the fleet budget ${budget}`)
  assert.ok(samples >= 1 && admitted >= 2, `${samples} samples, ${admitted} admitted`)
  const h = await heldInRedis(a)
  assert.equal(h.limit, budget)
  assert.equal(h.holders, 2)
  // The local view: the budget block is the local core's budget, its lease the budget lease.
  const s = a.stats()
  assert.equal(s.budgetLease.fleetLimit, budget)
  assert.equal(s.budgetLease.pool, pool)
  assert.equal(s.budgetLease.holder, a.holder)
  assert.equal(s.budgetLease.state, 'leased')
  assert.equal(s.budget.limit, s.budgetLease.localLimit)
  assert.equal(s.lease.fleetLimit, 50, 'the permits have a lease of their own')
})

test('a cost above the budget block waits for it to grow; above the fleet budget it is refused budget_limit', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const a = fleet(t, client(t, srv, 'ioredis'), 'wait', { budget: 100 })
  const b = fleet(t, await client(t, srv, 'node-redis'), 'wait', { budget: 100 })
  // A takes the whole fleet budget (its block grows to it: the first acquire waits for it).
  const big = await a.acquire({ cost: 100 })
  assert.equal(a.stats().budgetLease.held, 100)
  assert.equal(a.stats().budget.inUse, 100)
  // B's budget block stays 0: once B's permits block has room (a refusal for want of permits
  // rings the bell), a try is refused budget_limit with the bound fleet_lease.
  await eventually('a budget refusal on B', () => {
    const r = refusal(b, { cost: 10 })
    return r.reason === 'budget_limit' ? r : null
  })
  assert.deepEqual(refusal(b, { cost: 10 }), { reason: 'budget_limit', bound: 'fleet_lease' })
  assert.equal(b.stats().budgetLease.localLimit, 0)
  assert.equal(b.stats().budget.limit, 0)
  // Above the fleet budget: refused at once, whatever the block (and on A, which holds it all).
  for (const f of [a, b]) {
    const over = await f.admit({ cost: 101 })
    assert.equal(over.ok, false)
    assert.equal(over.reason, 'budget_limit')
    await assert.rejects(f.acquire({ cost: 101 }), (e) => e instanceof BulkheadError && e.reason === 'budget_limit')
  }
  // Within the fleet budget: it waits (queued), and is granted within its queue timeout once A
  // gives back — B's block grows (no wall-clock bound: without the growth it would time out).
  const waiting = b.acquire({ cost: 60, queueTimeoutMs: 10_000 })
  assert.equal(b.stats().queued, 1)
  assert.equal(b.stats().budget.queuedCost, 60)
  big.release()
  const p = await waiting
  assert.equal(p.cost, 60)
  assert.ok(b.stats().budgetLease.held >= 60, JSON.stringify(b.stats().budgetLease))
  const h = await heldInRedis(a)
  assert.ok(h.sum <= 100 && h.used <= 100, JSON.stringify(h))
  p.release()
})

test('applyLimits({revision, budget}) sets the fleet budget under a revision; close gives both blocks back', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const a = fleet(t, client(t, srv, 'ioredis'), 'set', { maxConcurrent: 4, budget: 100 })
  const b = fleet(t, await client(t, srv, 'node-redis'), 'set', { maxConcurrent: 4, budget: 100 })
  ;(await a.acquire({ cost: 1 })).release()
  assert.equal(a.stats().budgetLease.fleetLimit, 100)
  // A cost above the budget in force is refused.
  assert.equal((await a.admit({ cost: 250 })).reason, 'budget_limit')
  assert.deepEqual(await a.applyLimits({ revision: 5, limit: 6, budget: 300 }), { applied: true, revision: 5, limit: 6, budget: 300 })
  // Stale for the budget's table: not applied, the value and revision in force returned.
  assert.deepEqual(await b.applyLimits({ revision: 4, budget: 10 }), { applied: false, revision: 5, limit: null, budget: 300 })
  assert.deepEqual(await b.applyLimits({ revision: 5, budget: 10 }), { applied: false, revision: 5, limit: null, budget: 300 })
  await eventually('a sees the new fleet budget', () => a.stats().budgetLease.fleetLimit === 300 && a.stats().budgetLease.rev === 5)
  await eventually('b sees it', () => b.stats().budgetLease.fleetLimit === 300)
  assert.equal(a.stats().lease.fleetLimit, 6)
  assert.equal(a.stats().lease.rev, 5)
  assert.equal((await a.poolStats('budget')).limit, 300)
  assert.equal((await a.poolStats()).limit, 6)
  // A cost the old budget refused waits for the block, and is granted.
  const p = await a.acquire({ cost: 250 })
  assert.equal(p.cost, 250)
  p.release()
  // Lowering: only the budget, newer revision.
  assert.deepEqual(await b.applyLimits({ revision: 6, budget: 50 }), { applied: true, revision: 6, limit: null, budget: 50 })
  await eventually('a sees the lowered budget', () => a.stats().budgetLease.fleetLimit === 50)
  assert.equal((await a.admit({ cost: 51 })).reason, 'budget_limit')
  // Both leases of both holders are given back at close.
  assert.equal((await a.poolStats('budget')).holders.length, 2)
  await Promise.all([a.close(), b.close()])
  assert.deepEqual((await a.poolStats()).holders, [], 'the permits lease')
  const budgetPool = await a.poolStats('budget')
  assert.deepEqual(budgetPool.holders, [], 'the budget lease was not given back')
  assert.equal(budgetPool.used, 0)
  assert.equal(a.stats().budgetLease.state, 'idle')
})

test('classes partition this process block: a higher-priority waiter is served first; events reach on()', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  // The fleet limit is 1: the block is at most 1.
  const f = fleet(t, client(t, srv, 'ioredis'), 'classes', {
    maxConcurrent: 1,
    classes: [
      { name: 'low', priority: 0 },
      { name: 'high', priority: 9 },
    ],
    events: true,
  })
  assert.deepEqual(f.classNames, ['low', 'high'])
  const admits = []
  const rejects = []
  const releases = []
  f.on('admit', (e) => admits.push(e))
  f.on('reject', (e) => rejects.push(e))
  f.on('release', (e) => releases.push(e))
  const held = await f.acquire({ admissionClass: 'low' })
  assert.equal(f.classStats('low').inFlight, 1)
  // Full: a try is refused (an event too), then a low and a high waiter queue, in that order.
  assert.equal(f.tryAcquire({ admissionClass: 'high' }), null)
  const order = []
  const low = f.acquire({ admissionClass: 'low' }).then((p) => (order.push('low'), p))
  const high = f.acquire({ admissionClass: 1 }).then((p) => (order.push('high'), p))
  assert.equal(f.stats().queued, 2)
  assert.equal(f.classStats('high').queued, 1)
  held.release()
  const h = await high
  assert.deepEqual(order, ['high'], 'the high-priority waiter first')
  assert.equal(f.classStats('high').inFlight, 1)
  assert.equal(f.classStats('low').queued, 1)
  h.release()
  ;(await low).release()
  assert.deepEqual(order, ['high', 'low'])
  // The admission events, delivered as a local bulkhead's: in grant order (first, high, low).
  assert.deepEqual(
    admits.map((e) => [e.type, e.class, e.key]),
    [
      ['admit', 0, null],
      ['admit', 1, null],
      ['admit', 0, null],
    ],
  )
  assert.ok(admits[1].queued && admits[2].queued)
  assert.deepEqual(
    rejects.map((e) => [e.class, e.reason]),
    [[1, 'concurrency_limit']],
  )
  assert.equal(releases.length, 3)
  assert.equal(f.listenerErrors, 0)
  // A class the table does not have is refused by name.
  assert.throws(() => f.tryAcquire({ admissionClass: 'nope' }), (e) => e instanceof RangeError && /admissionClass must be a class name \("low", "high"\)/.test(e.message))
})

test('events carry the cost on a fleet budget; without events: true an admission listener is refused by name', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const c = await client(t, srv, 'node-redis')
  const f = fleet(t, c, 'events', { budget: 40, events: true })
  const seen = []
  const listener = (e) => seen.push([e.type, e.cost ?? null])
  f.on('admit', listener).on('reject', listener)
  const p = await f.acquire({ cost: 30 })
  const over = await f.admit({ cost: 41 })
  assert.equal(over.reason, 'budget_limit')
  p.release()
  assert.deepEqual(seen, [
    ['admit', 30],
    ['reject', 41],
  ])
  f.off('admit', listener)
  ;(await f.acquire({ cost: 1 })).release()
  assert.equal(seen.length, 2, 'off removed the listener')
  const quiet = fleet(t, c, 'events-off', { budget: 40 })
  assert.throws(() => quiet.on('admit', () => {}), (e) => e instanceof TypeError && /events: true/.test(e.message))
  assert.notEqual(quiet.stats().budgetLease, null)
})

test('bad input is refused by name: budget, rates, the class table, events; applyLimits and poolStats', async (t) => {
  const c = async () => 0
  const refused = (options, type, re) =>
    assert.throws(
      () => new FleetBulkhead(c, { pool: 'p', ...options }),
      (e) => e instanceof type && re.test(e.message),
      JSON.stringify(options),
    )
  refused({ budget: 0 }, RangeError, /^budget must be an integer in 1 \.\.= 4294967296, got 0$/)
  refused({ budget: 2 ** 33 }, RangeError, /^budget must be an integer in 1 \.\.= 4294967296/)
  refused({ budget: 1.5 }, RangeError, /^budget must be an integer/)
  refused({ budget: '5' }, TypeError, /^budget must be an integer/)
  refused({ rates: { requests: { amount: 1, perMs: 1000 } } }, TypeError, /^option "rates" is not supported by a fleet bulkhead: class rates are not fleet-wide/)
  refused({ maxQueuedCost: 5 }, TypeError, /^option "maxQueuedCost" is not supported by a fleet bulkhead/)
  refused({ resilience: null }, TypeError, /"resilience" is not supported by a fleet bulkhead/)
  refused({ nope: 1 }, TypeError, /^unknown option "nope" \(known: "pool", "maxConcurrent", "budget", .*"classes", "reserve", "lending", "shed", "events"\)$/)
  // The class table and events by the local Bulkhead's own parser (its messages).
  refused({ classes: {} }, TypeError, /^classes must be an array of class objects/)
  refused({ classes: [{ priority: 300 }] }, RangeError, /^classes\[0\]\.priority must be an integer in 0\.\.=255, got 300$/)
  refused({ classes: [{ nope: 1 }] }, TypeError, /^classes\[0\]: unknown option "nope"/)
  refused({ classes: [{ floor: 5, ceiling: 2 }] }, RangeError, /^classes\[0\]: the permits floor \(5\) and ceiling \(2\)/)
  // Floors need lending on a fleet bulkhead (the block can stay below them).
  refused({ classes: [{ floor: 1 }] }, RangeError, /^lending: class floors on a fleet bulkhead need lending/)
  refused({ lending: 1 }, TypeError, /^lending must be/)
  refused({ events: 'yes' }, TypeError, /^events must be a boolean/)

  const srv = await startRedis(t)
  if (srv === null) return
  const io = client(t, srv, 'ioredis')
  const plain = fleet(t, io, 'bad-plain')
  const budgeted = fleet(t, io, 'bad-budget', { budget: 10 })
  assert.equal(plain.stats().budgetLease, null)
  // applyLimits: a budget needs a fleet budget; one of the two is required; values in range.
  await assert.rejects(plain.applyLimits({ revision: 1, budget: 5 }), (e) => e instanceof TypeError && /^budget: this fleet bulkhead has no fleet budget \(open it with \{budget: …\}\)$/.test(e.message))
  await assert.rejects(budgeted.applyLimits({ revision: 1 }), (e) => e instanceof TypeError && /^limit: applyLimits on a fleet bulkhead sets the fleet limit or budget/.test(e.message))
  await assert.rejects(budgeted.applyLimits({ revision: 1, budget: 0 }), (e) => e instanceof RangeError && /^budget: must be an integer in 1 \.\.= 2\^32$/.test(e.message))
  await assert.rejects(budgeted.applyLimits({ revision: 1, budget: 2 ** 33 }), (e) => e instanceof RangeError && /^budget: /.test(e.message))
  await assert.rejects(budgeted.applyLimits({ revision: 1, budget: 5, maxQueue: 1 }), (e) => e instanceof TypeError && /^limits: /.test(e.message))
  await assert.rejects(budgeted.applyLimits({ revision: 1, budget: 5, rates: {} }), (e) => e instanceof TypeError && /^rates: not supported/.test(e.message))
  await assert.rejects(budgeted.applyLimits({ revision: 1, budget: 5, reserve: {} }), (e) => e instanceof TypeError && /^reserve: not supported/.test(e.message))
  await assert.rejects(budgeted.applyLimits({ revision: 0, budget: 5 }), (e) => e instanceof RangeError && /^revision: /.test(e.message))
  // Nothing was set by a refused call.
  assert.equal((await budgeted.poolStats('budget')).rev, 0)
  // poolStats: the budget's table only with a budget.
  await assert.rejects(plain.poolStats('budget'), (e) => e instanceof TypeError && /^dimension: 'budget' needs a fleet budget/.test(e.message))
  await assert.rejects(plain.poolStats('tokens'), (e) => e instanceof TypeError && /^dimension must be 'permits' or 'budget'/.test(e.message))
  // What the lease owns.
  assert.throws(() => budgeted.setBudget(3), (e) => e instanceof TypeError && /^setBudget: .*applyLimits\(\{revision, budget\}\)/.test(e.message))
})
