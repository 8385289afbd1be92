'use strict'
// FleetBulkhead (one limit for a fleet, through Redis; docs/design.md §16) against real
// redis-server processes (fleet-redis.js: a free loopback port each, killed and reaped after),
// with both clients a Node user has — ioredis and node-redis (the current major, and v4) —
// where it matters: the first block then local admissions; close gives the block back; two
// holders (two bulkheads on the two clients, then two processes) converge to fair shares while
// an oracle never sees more than the limit in flight; Redis killed (refused `fleet_lease` within
// the TTL, the lease back after a restart); a local share while unreachable; FLUSHALL (learning,
// the block kept); C42 (a reply later than the TTL: never used, given back); applyLimits
// revisioned; bad options named; the driver neither blocks the event loop nor spins nor keeps
// the process alive. Time bounds are lower bounds or 10× upper bounds (or more); no speed is
// asserted.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { fork, spawn } = require('node:child_process')

const { Bulkhead, BulkheadError, FleetBulkhead } = require('../index.js')
const { startRedis, startCluster, client, eventually, freePort } = require('./fleet-redis.js')

const CHILD = path.join(__dirname, 'fleet-child.js')
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** A fleet bulkhead on `c` for `pool` (closed when `t` ends). */
function fleet(t, c, pool, options = {}) {
  const f = new FleetBulkhead(c, { pool, maxConcurrent: 4, leaseTtlMs: 600, queueTimeoutMs: 10_000, ...options })
  t.after(() => f.close())
  return f
}

/** The refusal of `tryAdmit()` (asserting it is one), as `{reason, bound}`. */
function refusal(f) {
  const r = f.tryAdmit()
  if (r.ok) {
    r.permit.release()
    assert.fail('admitted')
  }
  assert.ok(r.error instanceof BulkheadError)
  return { reason: r.reason, bound: r.detail.bound }
}

/** Whether `tryAcquire()` is refused now (a permit it grants is released at once). */
function refusedNow(f) {
  const p = f.tryAcquire()
  p?.release()
  return p === null
}

/** Whether `tryAcquire()` admits now (the permit released at once). */
function admitsNow(f) {
  return !refusedNow(f)
}

/** `HGET {hg:<pool>}:held <holder>` through an ioredis or node-redis client. */
function heldInRedis(c, pool, holder) {
  const args = ['HGET', `{hg:${pool}}:held`, holder]
  return (typeof c.call === 'function' ? c.call(...args) : c.sendCommand(args)).then((v) => Number(v ?? 0))
}

for (const kind of ['ioredis', 'node-redis', 'redis4']) {
  test(`${kind}: the first block arrives, then admissions are local (no sync per acquire)`, async (t) => {
    const srv = await startRedis(t)
    if (srv === null) return
    const c = await client(t, srv, kind)
    const f = fleet(t, c, `first-${kind}`, { maxConcurrent: 4, leaseTtlMs: 3000 })
    assert.ok(f instanceof Bulkhead)
    const p = await f.acquire()
    const s = f.stats()
    assert.equal(s.lease.state, 'leased')
    assert.ok(s.lease.held >= 1 && s.lease.fleetLimit === 4, JSON.stringify(s.lease))
    assert.equal(s.active, 1)
    assert.equal(s.lease.pool, `first-${kind}`)
    assert.equal(s.lease.holder, f.holder)
    assert.ok(s.lease.leaseLeftMs > 0 && s.lease.leaseLeftMs <= 3000, `${s.lease.leaseLeftMs}`)
    // Demand grows the block (the bell wakes the driver).
    await eventually('a block of 2 or more', () => {
      f.tryAcquire()?.release()
      return f.stats().lease.held >= 2
    })
    // While the block has room, admissions do not go to Redis.
    const syncs = f.stats().lease.syncsTotal
    for (let i = 0; i < 1000; i++) f.tryAcquire().release()
    for (let i = 0; i < 100; i++) (await f.acquire()).release()
    assert.equal(await f.run(async () => 'ran'), 'ran')
    assert.ok(f.stats().lease.syncsTotal <= syncs + 2, 'admissions went to Redis')
    p.release()
    const pool = await f.poolStats()
    assert.equal(pool.limit, 4)
    assert.deepEqual(
      pool.holders.map((h) => h.holder),
      [f.holder],
    )
    assert.ok(pool.holders[0].generation > 0 && pool.holders[0].expiresMs > pool.nowMs)
  })

  if (kind === 'redis4') continue

  test(`${kind}: close() gives the block back (the pool shows no holder), refuses queued callers`, async (t) => {
    const srv = await startRedis(t)
    if (srv === null) return
    const c = await client(t, srv, kind)
    const f = fleet(t, c, `close-${kind}`, { maxConcurrent: 1 })
    const held = await f.acquire()
    const queued = f.acquire()
    assert.equal(f.stats().queued, 1)
    assert.equal((await f.poolStats()).holders.length, 1)
    const closing = f.close()
    assert.equal(f.close(), closing, 'idempotent')
    await assert.rejects(queued, (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_CLOSED')
    await closing
    // A call still in flight at close stays counted: the block shrinks to it (want 0) and the
    // lease runs out by its TTL, instead of a release that would free a permit still in use.
    const pool = await f.poolStats()
    assert.equal(pool.holders.length, 1)
    assert.equal(pool.holders[0].held, 1)
    assert.equal(pool.holders[0].want, 0)
    assert.equal(pool.used, 1)
    assert.equal(f.stats().lease.state, 'idle')
    assert.equal(f.stats().lease.releasesFencedTotal, 0)
    assert.throws(() => f.tryAcquire(), (e) => e.code === 'BULKHEAD_CLOSED')
    // The permit held across close() stays valid and returns.
    assert.equal(held.release(), true)
    // With nothing in flight, close() releases the lease: the pool shows no holder.
    const g = fleet(t, c, `close-idle-${kind}`, { maxConcurrent: 1 })
    ;(await g.acquire()).release()
    assert.equal((await g.poolStats()).holders.length, 1)
    await g.close()
    const idle = await g.poolStats()
    assert.deepEqual(idle.holders, [])
    assert.equal(idle.used, 0)
    assert.equal(await heldInRedis(c, `close-idle-${kind}`, g.holder), 0)
  })
}

test('two holders on the two clients converge to fair shares; in flight never exceeds the limit', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const limit = 10
  const pool = 'fair'
  const a = fleet(t, client(t, srv, 'ioredis'), pool, { maxConcurrent: limit })
  const b = fleet(t, await client(t, srv, 'node-redis'), pool, { maxConcurrent: limit })
  let inFlight = 0
  let peak = 0
  let stop = false
  const loops = []
  for (const f of [a, b]) {
    for (let i = 0; i < 8; i++) {
      loops.push(
        (async () => {
          while (!stop) {
            let p
            try {
              p = await f.acquire({ queueTimeoutMs: 200 })
            } catch {
              continue
            }
            peak = Math.max(peak, ++inFlight)
            await sleep(2)
            inFlight--
            p.release()
          }
        })(),
      )
    }
  }
  // Both want more than half: each converges to 5 (target: a few beats; allowed 20 s).
  await eventually(
    'shares of 5 and 5',
    () => {
      const [sa, sb] = [a.stats().lease, b.stats().lease]
      return sa.share === 5 && sb.share === 5 && sa.held === 5 && sb.held === 5
    },
    20_000,
  )
  stop = true
  await Promise.all(loops)
  assert.ok(peak <= limit, `in flight ${peak} > ${limit}`)
  assert.ok(peak >= 2, `the holders ran (${peak})`)
  const p = await a.poolStats()
  assert.ok(p.used <= limit && p.holders.length === 2, JSON.stringify(p))
})

/** A forked fleet-child.js in mode 'busy', with an id'd request/reply over IPC. */
function busyChild(t, args) {
  const proc = fork(CHILD, [JSON.stringify({ mode: 'busy', ...args })], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })))
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL')
    await exited
  })
  let next = 1
  const waiting = new Map()
  let ready
  const readyP = new Promise((resolve, reject) => {
    ready = resolve
    proc.once('exit', (code) => reject(new Error(`fleet-child exited (${code}) before ready`)))
  })
  proc.on('message', (m) => {
    if (m.ready) ready()
    else waiting.get(m.id)?.(m)
  })
  const ask = (op) =>
    new Promise((resolve) => {
      const id = next++
      waiting.set(id, resolve)
      proc.send({ id, op })
    })
  return { ready: readyP, ask, exited }
}

test('two processes (ioredis, node-redis) converge to fair shares; a Redis oracle never sees more than the limit', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const limit = 10
  const options = { pool: 'procs', maxConcurrent: limit, leaseTtlMs: 600, queueTimeoutMs: 10_000 }
  const common = { port: srv.port, options, workers: 8, oracle: 'oracle:procs' }
  const a = busyChild(t, { kind: 'ioredis', ...common })
  const b = busyChild(t, { kind: 'node-redis', ...common })
  await Promise.all([a.ready, b.ready])
  await eventually(
    'shares of 5 and 5 in both processes',
    async () => {
      const [sa, sb] = await Promise.all([a.ask('stats'), b.ask('stats')])
      return [sa, sb].every((s) => s.lease.share === 5 && s.lease.held === 5)
    },
    20_000,
  )
  const [ra, rb] = await Promise.all([a.ask('stop'), b.ask('stop')])
  const peak = Math.max(ra.peak, rb.peak)
  assert.ok(peak <= limit, `the oracle saw ${peak} in flight > ${limit}`)
  assert.ok(peak >= 2, `both ran (${peak})`)
  assert.deepEqual(await a.exited, { code: 0, signal: null })
  assert.deepEqual(await b.exited, { code: 0, signal: null })
  // Both closed: the pool holds nothing.
  const c = client(t, srv, 'ioredis')
  const keys = ['cfg', 'held', 'gen', 'exp', 'want', 'served'].map((k) => `{hg:procs}:${k}`)
  const stats = await c.call('FCALL', 'hg_stats', '6', ...keys)
  assert.equal(stats[2], 0, `used ${stats}`)
  assert.equal(stats[8], 0, `holders ${stats}`)
})

test('Redis killed: both clients are refused fleet_lease within the TTL; the lease is back after a restart', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const ttl = 400
  const fleets = [
    fleet(t, client(t, srv, 'ioredis'), 'killed-io', { leaseTtlMs: ttl }),
    fleet(t, await client(t, srv, 'node-redis'), 'killed-nr', { leaseTtlMs: ttl }),
  ]
  for (const f of fleets) (await f.acquire()).release()
  await srv.kill9()
  // At most one TTL (400 ms) later nothing is admitted (allowed 10 s).
  for (const f of fleets) {
    await eventually('fail closed', () => refusedNow(f) && f.stats().lease.localLimit === 0)
    assert.deepEqual(refusal(f), { reason: 'concurrency_limit', bound: 'fleet_lease' })
    await eventually('unreachable', () => f.stats().lease.unreachable)
    const s = f.stats().lease
    assert.equal(s.state, 'expired')
    assert.match(s.lastError, /^redis unreachable: /)
  }
  await srv.restart()
  for (const f of fleets) {
    await eventually('a lease after the restart', () => admitsNow(f), 20_000)
    const s = f.stats().lease
    assert.equal(s.state, 'leased')
    assert.ok(s.epochChangesTotal >= 1, JSON.stringify(s))
    assert.equal(s.unreachable, false)
    assert.equal(s.lastError, null)
  }
})

test('localShare admits up to the share while Redis is unreachable', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const f = fleet(t, client(t, srv, 'ioredis'), 'share', { leaseTtlMs: 400, localShare: 2 })
  ;(await f.acquire()).release()
  await srv.kill9()
  await eventually('the local share', () => f.stats().lease.localLimit === 2)
  const [x, y] = [f.tryAcquire(), f.tryAcquire()]
  assert.ok(x !== null && y !== null)
  assert.equal(f.tryAcquire(), null, 'no more than the share')
  x.release()
  y.release()
})

test('FLUSHALL: the pool learns, the holder keeps its block', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const c = await client(t, srv, 'node-redis')
  const f = fleet(t, c, 'learn', { maxConcurrent: 6 })
  const held = [await f.acquire(), await f.acquire(), await f.acquire()]
  const before = f.stats().lease
  await c.sendCommand(['FLUSHALL'])
  // The next sync re-admits what it has, in a new epoch, learning.
  await eventually('re-admitted in a new epoch', () => {
    const s = f.stats().lease
    return s.epoch !== before.epoch && s.state === 'leased'
  })
  const s = f.stats().lease
  assert.ok(s.held >= 3, `kept what it has: ${JSON.stringify(s)}`)
  assert.ok(s.epochChangesTotal >= 1)
  const pool = await f.poolStats()
  assert.ok(pool.used >= 3 && pool.used <= 6, JSON.stringify(pool))
  assert.ok(pool.learnUntilMs > 0, 'the new state learned')
  for (const p of held) p.release()
})

test('C42: a grant whose reply comes after the TTL is never used, and is given back', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const ttl = 300
  const io = client(t, srv, 'ioredis')
  // The user's client behind a proxy that answers every sync TTL + 20 ms after Redis did.
  const slow = async (args) => {
    const reply = await io.call(...args)
    if (args[1] === 'hg_sync') await sleep(ttl + 20)
    return reply
  }
  const f = fleet(t, slow, 'c42', { leaseTtlMs: ttl })
  await eventually('a late grant', () => f.stats().lease.lateGrantsTotal >= 1)
  // Nothing was ever admitted on it.
  assert.deepEqual(refusal(f), { reason: 'concurrency_limit', bound: 'fleet_lease' })
  assert.equal(f.stats().admittedTotal, 0)
  // The block went back (a release, fenced or not), so Redis counts nothing for this holder.
  await eventually('the block given back', async () => (await heldInRedis(io, 'c42', f.holder)) === 0)
})

test('applyLimits sets the fleet limit under a revision; only the limit; stale revisions are reported', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const a = fleet(t, client(t, srv, 'ioredis'), 'limit')
  const b = fleet(t, await client(t, srv, 'node-redis'), 'limit')
  assert.deepEqual(await a.applyLimits({ revision: 2, limit: 7 }), { applied: true, revision: 2, limit: 7, budget: null })
  assert.deepEqual(await b.applyLimits({ revision: 1, limit: 1 }), { applied: false, revision: 2, limit: 7, budget: null })
  assert.deepEqual(await b.applyLimits({ revision: 2, limit: 1 }), { applied: false, revision: 2, limit: 7, budget: null })
  await eventually('b sees the new limit', () => b.stats().lease.fleetLimit === 7 && b.stats().lease.rev === 2)
  assert.equal((await a.poolStats()).limit, 7)
  await assert.rejects(a.applyLimits({ revision: 3, maxQueue: 1 }), (e) => e instanceof TypeError && /^limits: /.test(e.message))
  // A fleet budget needs a bulkhead opened with one (fleet-budget.test.js).
  await assert.rejects(a.applyLimits({ revision: 3, budget: 1 }), (e) => e instanceof TypeError && /^budget: .*no fleet budget/.test(e.message))
  await assert.rejects(a.applyLimits({ revision: 3 }), (e) => e instanceof TypeError && /^limit: /.test(e.message))
  await assert.rejects(a.applyLimits({ revision: 0, limit: 3 }), (e) => e instanceof RangeError && /^revision: /.test(e.message))
  await assert.rejects(a.applyLimits({ revision: 3, limit: 2 ** 33 }), (e) => e instanceof RangeError && /^limit: /.test(e.message))
  await assert.rejects(a.applyLimits({ limit: 3 }), (e) => e instanceof TypeError && /revision is required/.test(e.message))
  await assert.rejects(a.applyLimits({ revision: 3, limit: 3, nope: 1 }), (e) => e instanceof TypeError && /"nope"/.test(e.message))
  // What the lease owns is refused by name.
  assert.throws(() => a.setLimit(3), (e) => e instanceof TypeError && /^setLimit: .*applyLimits/.test(e.message))
  assert.throws(() => a.setBudget(3), (e) => e instanceof TypeError && /^setBudget: .*applyLimits/.test(e.message))
  assert.throws(() => a.setObserve('all'), (e) => e instanceof TypeError && /^setObserve: /.test(e.message))
})

test('an ACL that refuses FUNCTION: the library runs as one script (EVALSHA), loaded again after SCRIPT FLUSH', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const admin = client(t, srv, 'ioredis')
  await admin.call('ACL', 'SETUSER', 'hg', 'on', '>pw', '~*', '&*', '+@all', '-function')
  const { ioredis } = require('./fleet-redis.js')
  const c = ioredis(t, srv, { username: 'hg', password: 'pw' })
  await assert.rejects(c.call('FUNCTION', 'LIST'), /NOPERM/)
  const f = fleet(t, c, 'acl', { leaseTtlMs: 600 })
  ;(await f.acquire()).release()
  assert.equal(f.stats().lease.state, 'leased')
  assert.deepEqual(await admin.call('FUNCTION', 'LIST'), [], 'no library was loaded')
  assert.equal((await f.poolStats()).holders[0].holder, f.holder)
  await admin.call('SCRIPT', 'FLUSH')
  const syncs = f.stats().lease.syncsTotal
  await eventually('syncs go on after SCRIPT FLUSH', () => f.stats().lease.syncsTotal >= syncs + 3)
  assert.equal(f.stats().lease.errorsTotal, 0)
  await f.close()
  assert.deepEqual((await f.poolStats()).holders, [])
})

test('a Redis Cluster: ioredis and node-redis clusters load the library on every primary and route by the pool', async (t) => {
  const nodes = await startCluster(t, 3)
  if (nodes === null) return
  const IORedis = require('ioredis')
  const io = new IORedis.Cluster(nodes.map((n) => ({ host: '127.0.0.1', port: n.port })))
  io.on('error', () => {})
  t.after(() => io.disconnect())
  const nr = require('redis').createCluster({ rootNodes: nodes.map((n) => ({ url: n.url })) })
  nr.on('error', () => {})
  await nr.connect()
  t.after(() => nr.destroy?.() ?? nr.disconnect())
  // Pools on different slots (hence nodes), alternately on each client.
  const pools = ['alpha', 'bravo', 'charlie', 'delta']
  for (const [i, pool] of pools.entries()) {
    const f = fleet(t, i % 2 === 0 ? io : nr, pool, { maxConcurrent: 3, leaseTtlMs: 1000 })
    const p = await f.acquire()
    assert.equal(f.stats().lease.state, 'leased', pool)
    const stats = await f.poolStats()
    assert.equal(stats.limit, 3)
    assert.deepEqual(
      stats.holders.map((h) => h.holder),
      [f.holder],
    )
    p.release()
    await f.close()
    assert.deepEqual((await f.poolStats()).holders, [], pool)
  }
  // The library is on every primary.
  for (const n of nodes) {
    const out = require('node:child_process').spawnSync('redis-cli', ['-p', String(n.port), 'FUNCTION', 'LIST'], { encoding: 'utf8' })
    assert.match(out.stdout, /hullguard/, `node ${n.port}`)
  }
})

test('bad options and clients are refused by name', () => {
  const c = async () => 0
  const refused = (options, type, re) =>
    assert.throws(
      () => new FleetBulkhead(c, options),
      (e) => e instanceof type && re.test(e.message),
    )
  refused({}, TypeError, /^pool is required/)
  refused({ pool: 'a{b}' }, RangeError, /^pool must be 1\.\.=64/)
  refused({ pool: 'p', leaseTtlMs: 5 }, RangeError, /^leaseTtlMs must be a duration in ms in 100 \.\.= 3600000, got 5$/)
  refused({ pool: 'p', maxConcurrent: 0 }, RangeError, /^maxConcurrent must be an integer in 1 \.\.= 4294967296, got 0$/)
  refused({ pool: 'p', maxConcurrent: '4' }, TypeError, /^maxConcurrent must be an integer/)
  refused({ pool: 'p', lease_ttl: 500 }, TypeError, /"lease_ttl" is spelled "leaseTtlMs" in Node/)
  // `budget` is the fleet's, `classes` and `events` this process's (fleet-budget.test.js); rates are refused.
  refused({ pool: 'p', budget: 0 }, RangeError, /^budget must be an integer in 1 \.\.= 4294967296, got 0$/)
  refused({ pool: 'p', rates: {} }, TypeError, /"rates" is not supported by a fleet bulkhead: class rates are not fleet-wide/)
  refused({ pool: 'p', resilience: null }, TypeError, /"resilience" is not supported by a fleet bulkhead/)
  refused({ pool: 'p', startLimit: 1 }, TypeError, /"startLimit" is not supported by a fleet bulkhead/)
  refused({ pool: 'p', leaseTtl: 500 }, TypeError, /unknown option "leaseTtl" \(known: "pool", "maxConcurrent", .*"leaseTtlMs"/)
  refused({ pool: 'p', leaseTtlMs: 300, beatMs: 200 }, RangeError, /^beatMs: .*at most half of leaseTtlMs/)
  refused({ pool: 'p', holder: 'a b' }, RangeError, /^holder must be/)
  assert.throws(() => new FleetBulkhead({}, { pool: 'p' }), (e) => e instanceof TypeError && /client must be an ioredis client/.test(e.message))
  assert.throws(() => new FleetBulkhead(null, { pool: 'p' }), TypeError)
})

test('the driver neither blocks the event loop nor spins; an aborted acquire leaves the queue', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const [a, b] = ['ioredis', 'ioredis'].map((k) => fleet(t, client(t, srv, k), 'quiet', { maxConcurrent: 2, leaseTtlMs: 600 }))
  const held = [await a.acquire(), await b.acquire()]
  await eventually('one each', () => a.stats().lease.held === 1 && b.stats().lease.held === 1)
  // Idle with the blocks full: the event loop turns freely and each driver syncs about once
  // per beat (200 ms): at most 10× that in 1 s.
  let ticks = 0
  const iv = setInterval(() => ticks++, 10)
  const s0 = b.stats().lease.syncsTotal
  const cpu0 = process.cpuUsage()
  await sleep(1000)
  const cpu = process.cpuUsage(cpu0)
  clearInterval(iv)
  const idleSyncs = b.stats().lease.syncsTotal - s0
  assert.ok(ticks >= 10, `the event loop turned ${ticks} times in 1 s`)
  assert.ok(idleSyncs <= 50, `${idleSyncs} syncs in 1 s idle`)
  assert.ok(cpu.user + cpu.system < 900_000, `idle CPU ${JSON.stringify(cpu)} µs in 1 s`)
  // A storm of refusals on a contended pool rings the bell each time: the driver asks for more
  // at most once per minSyncIntervalMs (5 ms), contended at a quarter beat: at most 10× the
  // first in 500 ms.
  const s1 = b.stats().lease.syncsTotal
  const end = performance.now() + 500
  let refusals = 0
  while (performance.now() < end) {
    for (let i = 0; i < 1000; i++) if (b.tryAcquire() === null) refusals++
    await new Promise((r) => setImmediate(r))
  }
  const stormSyncs = b.stats().lease.syncsTotal - s1
  assert.ok(refusals > 1000, `${refusals}`)
  assert.ok(stormSyncs >= 1 && stormSyncs <= 1000, `${stormSyncs} syncs in a 500 ms storm of ${refusals} refusals`)
  // A queued acquire whose signal aborts leaves the queue.
  const ac = new AbortController()
  const queued = b.acquire({ signal: ac.signal })
  assert.equal(b.stats().queued, 1)
  ac.abort(new Error('gave up'))
  await assert.rejects(queued, /gave up/)
  assert.equal(b.stats().queued, 0)
  await assert.rejects(b.acquire({ signal: AbortSignal.abort(new Error('before')) }), /before/)
  // A deadline that passed is refused `timeout`, as on a local bulkhead.
  await assert.rejects(b.acquire({ deadline: performance.now() - 1 }), (e) => e.reason === 'timeout')
  for (const p of held) p.release()
})

test('the bell: acquires beyond the block wake the driver long before its next beat', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  // A TTL of 60 s: the next beat is 20 s away; without the bell nothing would grow before it.
  const f = fleet(t, await client(t, srv, 'node-redis'), 'bell', { maxConcurrent: 64, leaseTtlMs: 60_000 })
  const first = await f.acquire()
  // Settled: the driver is parked until its next beat.
  await sleep(300)
  const block = f.stats().lease.held
  assert.ok(block >= 1 && block < 32, `${block}`)
  const syncs = f.stats().lease.syncsTotal
  // Admitted within their 10 s queue timeouts, half the beat: the bell woke the driver (no
  // wall-clock assertion needed — without the bell they would all time out).
  const more = await Promise.all(Array.from({ length: 32 }, () => f.acquire({ queueTimeoutMs: 10_000 })))
  const s = f.stats().lease
  assert.ok(s.held >= 33 && s.syncsTotal > syncs, JSON.stringify(s))
  for (const p of [first, ...more]) p.release()
})

test('the process exits by itself after close() and the client quit (nothing of the driver keeps it alive)', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  for (const [kind, noClose] of [
    ['ioredis', false],
    ['node-redis', false],
    ['ioredis', true],
  ]) {
    const args = { mode: 'exit', kind, port: srv.port, noClose, options: { pool: `exit-${kind}`, leaseTtlMs: 60_000 } }
    const proc = spawn(process.execPath, [CHILD, JSON.stringify(args)], { stdio: ['ignore', 'inherit', 'inherit'] })
    const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })))
    const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000)
    const r = await exited
    clearTimeout(timer)
    // A lease TTL of 60 s: a driver that kept the process alive would be SIGKILLed at 15 s.
    assert.deepEqual(r, { code: 0, signal: null }, `${kind} noClose=${noClose}`)
  }
})

test('open() resolves once the library is loaded, and rejects (closed) when Redis cannot be reached', async (t) => {
  const srv = await startRedis(t)
  if (srv === null) return
  const c = await client(t, srv, 'node-redis')
  await c.sendCommand(['FUNCTION', 'FLUSH'])
  const f = await FleetBulkhead.open(c, { pool: 'open', maxConcurrent: 2 })
  t.after(() => f.close())
  assert.equal(await c.sendCommand(['FCALL_RO', 'hg_version', '1', '{hg:open}:cfg']), 3)
  ;(await f.acquire()).release()
  // A node-redis client that was never connected.
  const port = await freePort()
  const dead = require('redis').createClient({ url: `redis://127.0.0.1:${port}` })
  await assert.rejects(FleetBulkhead.open(dead, { pool: 'open' }), /closed/i)
  // A client that fails.
  let calls = 0
  const failing = async () => {
    calls++
    throw new Error('connect ECONNREFUSED')
  }
  await assert.rejects(FleetBulkhead.open(failing, { pool: 'open' }), /ECONNREFUSED/)
  assert.ok(calls >= 1)
})
