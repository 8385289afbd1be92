'use strict'
// HostBulkhead (issue 19, one limit per host; Linux only): admission, cancellation, timeouts,
// options refused by name, stats, the limit across real processes (child_process.fork and
// cluster workers: a SIGKILLed holder's permits reach a waiting process, `reapHost` from a
// cluster primary), across worker_threads (one process-wide slot), and the `hullguard host`
// command. Every segment lives in this file's temp dir (removed at the end); every child is
// killed and awaited; every wait is bounded (10x its target, lower bounds only where time must
// pass: the machine may be busy).

const { describe, test, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { fork, spawn } = require('node:child_process')
const { once } = require('node:events')
const { Worker } = require('node:worker_threads')

const hg = require('../index.js')
const native = require('../native.js')
const { HostBulkhead, HostPermit, LeaseError, BulkheadError, Bulkhead, reapHost } = hg

const linux = process.platform === 'linux'
const dir = linux ? fs.mkdtempSync(path.join(os.tmpdir(), 'hg-host-node-')) : ''
const CHILD = path.join(__dirname, 'host-child.js')
const BIN = path.join(__dirname, '..', 'bin', 'hullguard.js')
/** Short lease settings: a killed holder's permits are back within about 50 ms. */
const FAST = { dir, probeMs: 50, beatMs: 50, leaseTtlMs: 500 }

let seq = 0
/** A fresh segment name of this run. */
const fresh = (what) => `node-${process.pid}-${what}-${seq++}`

/** `p`, or a rejection after `ms` naming `what` (every wait of this file is bounded). */
function within(p, ms, what) {
  let timer
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
  })
  return Promise.race([p, t]).finally(() => clearTimeout(timer))
}

// ----- child processes ---------------------------------------------------------------------------

const children = new Set()

/** Wires the IPC replies of a process running host-child.js (a fork or a cluster worker). */
function wire(proc, sendTo) {
  const replies = new Map()
  let next = 0
  const ready = new Promise((resolve, reject) => {
    proc.on('message', (m) => {
      if (m.ready) resolve(m)
      else replies.get(m.id)?.(m)
    })
    proc.once('exit', (code, signal) => reject(new Error(`child exited before ready (${code}, ${signal})`)))
  })
  ready.catch(() => {})
  return {
    proc,
    ready: within(ready, 10_000, 'child ready'),
    /** Sends `op` and resolves with its reply (unbounded: wrap it in `within`). */
    ask(op, extra = {}) {
      const id = next++
      return new Promise((resolve) => {
        replies.set(id, resolve)
        sendTo.send({ op, id, ...extra })
      })
    },
  }
}

/** A forked process holding one HostBulkhead `name` with `options`. */
function child(name, options) {
  const proc = fork(CHILD, [JSON.stringify({ name, options })], {
    execArgv: [],
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  })
  const c = wire(proc, proc)
  c.exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })))
  c.stderr = ''
  proc.stderr.on('data', (d) => (c.stderr += d))
  children.add(c)
  return c
}

/** Kills `c` (SIGKILL) unless it already exited, and waits for its exit. */
async function kill(c) {
  if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL')
  await within(c.exited, 10_000, 'child exit')
  children.delete(c)
}

after(async () => {
  for (const c of [...children]) await kill(c)
  if (linux) fs.rmSync(dir, { recursive: true, force: true })
})

// ----- one process -------------------------------------------------------------------------------

describe('HostBulkhead in one process', { skip: !linux && 'Linux only' }, () => {
  test('tryAcquire / acquire / release, the local conventions', async () => {
    const hb = new HostBulkhead(fresh('basic'), { ...FAST, maxConcurrent: 3 })
    assert.equal(hb.closed, false)
    assert.equal(hb.path, path.join(dir, path.basename(hb.path)))
    assert.ok(fs.existsSync(hb.path))
    assert.equal(typeof hb.slot, 'number')

    const a = hb.tryAcquire()
    assert.ok(a instanceof HostPermit)
    assert.deepEqual([a.weight, a.cost, a.released], [1, 0, false])
    const b = hb.tryAcquire(2) // the (weight, options) form
    assert.equal(b.weight, 2)
    assert.equal(hb.tryAcquire(), null, 'concurrency_limit: null, as the local tryAcquire')
    assert.throws(() => hb.tryAcquire(1, 'x'), TypeError)
    assert.throws(() => hb.tryAcquire({ weight: 1 }, {}), TypeError)

    const s = hb.stats()
    assert.equal(s.active, 3)
    assert.equal(s.localActive, 3)
    assert.equal(s.inFlight, 2)
    assert.equal(s.rejectedByReason.concurrency_limit, 1)

    assert.equal(a.release(), true)
    assert.equal(a.release(), false, 'a second release: false, as the local permit')
    assert.deepEqual([a.weight, a.released], [0, true])
    const c = await hb.acquire()
    assert.ok(c instanceof HostPermit)
    b.release()
    c.release()
    assert.equal(hb.stats().active, 0)
    assert.deepEqual(await hb.drain(0), { drained: true, active: 0, queued: 0 })
  })

  test('weights and costs are judged by the crate, refused like the local bulkhead', async () => {
    const hb = new HostBulkhead(fresh('weights'), { ...FAST, maxConcurrent: 2, budget: 10 })
    assert.throws(() => hb.tryAcquire(3), (e) => e instanceof RangeError && /weight must be an integer in 1..=2/.test(e.message))
    await assert.rejects(hb.acquire({ weight: 0 }), RangeError)
    await assert.rejects(hb.acquire({ weight: 'x' }), TypeError)
    await assert.rejects(hb.acquire({ bogus: 1 }), (e) => e instanceof TypeError && /unknown option "bogus"/.test(e.message))
    // A host bulkhead has no classes nor observe mode: refused, never ignored.
    await assert.rejects(hb.acquire({ admissionClass: 1 }), RangeError)
    await assert.rejects(hb.acquire({ observe: 'all' }), RangeError)
    assert.throws(() => hb.tryAcquire(1, { cost: 11 }), RangeError)

    const p = hb.tryAcquire(1, { cost: 8 })
    assert.equal(p.cost, 8)
    // budget_limit is no concurrency_limit: it throws (the local tryAcquire's convention).
    assert.throws(
      () => hb.tryAcquire({ cost: 5 }),
      (e) => e instanceof BulkheadError && e.reason === 'budget_limit' && e.code === 'BULKHEAD_FULL',
    )
    assert.equal(hb.stats().budget.inUse, 8)
    p.release()
    assert.equal(hb.stats().budget.inUse, 0)
  })

  test('a queue timeout rejects with the local bulkhead\'s error class and code', async () => {
    const local = new Bulkhead({ maxConcurrent: 1 })
    const held = local.tryAcquire()
    // (Its queue timer is unref'd: `within` keeps the loop alive meanwhile.)
    const localErr = await within(local.acquire({ queueTimeoutMs: 10 }).catch((e) => e), 5_000, 'local timeout')
    held.release()

    const hb = new HostBulkhead(fresh('timeout'), { ...FAST, maxConcurrent: 1, queueTimeoutMs: 60_000 })
    const p = hb.tryAcquire()
    const t0 = performance.now()
    const err = await within(hb.acquire({ queueTimeoutMs: 100 }).catch((e) => e), 5_000, 'queue timeout')
    const waited = performance.now() - t0
    assert.ok(err instanceof BulkheadError, String(err))
    assert.equal(err.constructor, localErr.constructor)
    assert.equal(err.code, localErr.code)
    assert.equal(err.code, 'BULKHEAD_QUEUE_TIMEOUT')
    assert.equal(err.reason, 'timeout')
    assert.ok(waited >= 90, `waited ${waited} ms`)
    assert.equal(err.detail.calls.limit, 1)
    // A deadline that passed: refused `timeout` at once, as the local bulkhead does.
    await assert.rejects(hb.acquire({ deadline: performance.now() - 1 }), (e) => e.reason === 'timeout')
    // maxQueue 0 / queueTimeoutMs 0: no queueing.
    await assert.rejects(hb.acquire({ queueTimeoutMs: 0 }), (e) => e.reason === 'concurrency_limit')
    p.release()
    assert.equal(hb.stats().rejectedByReason.timeout, 2)
    assert.equal(native.hostPending(), 0)
  })

  test('a queued acquire is granted on release, FIFO', async () => {
    const hb = new HostBulkhead(fresh('fifo'), { ...FAST, maxConcurrent: 1 })
    const p = hb.tryAcquire()
    const order = []
    const waits = [0, 1, 2].map((i) => hb.acquire().then((q) => (order.push(i), q)))
    assert.equal(native.hostPending(), 3)
    assert.equal(hb.stats().localQueued, 3)
    p.release()
    for (const w of waits) (await within(w, 5_000, 'fifo grant')).release()
    assert.deepEqual(order, [0, 1, 2])
    assert.equal(native.hostPending(), 0)
    assert.equal(hb.stats().queueWaitCount, 3)
  })

  test('abort: rejects with signal.reason, the place is given up', async () => {
    const hb = new HostBulkhead(fresh('abort'), { ...FAST, maxConcurrent: 1 })
    const p = hb.tryAcquire()
    // Already aborted: at once, options still checked.
    const gone = AbortSignal.abort(new Error('gone'))
    await assert.rejects(hb.acquire({ signal: gone }), /gone/)
    await assert.rejects(hb.acquire({ signal: gone, bogus: 1 }), TypeError)
    await assert.rejects(hb.acquire({ signal: 'no' }), TypeError)

    const ac = new AbortController()
    const first = hb.acquire({ signal: ac.signal })
    const second = hb.acquire({ signal: ac.signal }) // one signal, two waiters
    const third = hb.acquire()
    assert.equal(native.hostPending(), 3)
    ac.abort()
    await assert.rejects(first, (e) => e.name === 'AbortError')
    await assert.rejects(second, (e) => e.name === 'AbortError')
    assert.equal(native.hostPending(), 1)
    // The aborted ones left the queue: the third is next.
    p.release()
    const q = await within(third, 5_000, 'grant after abort')
    assert.equal(hb.stats().active, 1)
    q.release()
    // Abort after the grant changes nothing.
    const ac2 = new AbortController()
    const r = await hb.acquire({ signal: ac2.signal })
    ac2.abort()
    assert.equal(r.released, false)
    r.release()
    assert.equal(hb.stats().active, 0)
    assert.equal(native.hostPending(), 0)
  })

  test('close rejects the waiters BULKHEAD_CLOSED; drain waits for the permits', async () => {
    const hb = new HostBulkhead(fresh('close'), { ...FAST, maxConcurrent: 1 })
    const p = hb.tryAcquire()
    const waiting = hb.acquire()
    const t0 = performance.now()
    assert.deepEqual(await within(hb.drain(30), 5_000, 'drain 30'), { drained: false, active: 1, queued: 1 })
    assert.ok(performance.now() - t0 >= 25)
    assert.deepEqual(await hb.drain({ timeoutMs: 0 }), { drained: false, active: 1, queued: 1 })
    await assert.rejects(hb.drain(-1), RangeError)
    await assert.rejects(hb.drain({ bogus: 1 }), TypeError)
    hb.close()
    assert.equal(hb.closed, true)
    await assert.rejects(within(waiting, 5_000, 'closed waiter'), (e) => e.code === 'BULKHEAD_CLOSED')
    assert.throws(() => hb.tryAcquire(), (e) => e.code === 'BULKHEAD_CLOSED')
    await assert.rejects(hb.acquire(), (e) => e.code === 'BULKHEAD_CLOSED')
    const drained = hb.drain(5_000)
    setTimeout(() => p.release(), 20)
    assert.deepEqual(await within(drained, 5_000, 'drain'), { drained: true, active: 0, queued: 0 })
  })

  test('options: the crate\'s table, unknown and local-only names refused by name', () => {
    const name = fresh('opts')
    const refused = [
      [{ bogus: 1 }, TypeError, /unknown option `bogus`/],
      [{ maxConcurent: 1 }, TypeError, /unknown option `maxConcurent`/],
      [{ classes: [{ name: 'a' }] }, TypeError, /`classes` is a local bulkhead's option that a host bulkhead does not support/],
      [{ resilience: {} }, TypeError, /`resilience` is a local bulkhead's option/],
      [{ shedLagThresholdMs: 5 }, TypeError, /`shedLagThresholdMs` is a local bulkhead's option/],
      [{ maxConcurrent: 0 }, RangeError, /max_concurrent.*1 \.\.= 1048575/],
      [{ maxConcurrent: 1.5 }, RangeError, /maxConcurrent must be an integer/],
      [{ maxConcurrent: '2' }, TypeError, /maxConcurrent must be an integer, got string/],
      [{ leaseTtlMs: -1 }, RangeError, /leaseTtlMs/],
      [{ leaseTtlMs: 50 }, RangeError, /lease_ttl/],
      [{ leaseTtlMs: 200, beatMs: 100 }, RangeError, /at least 3 beats/],
      [{ mode: 0o666 }, RangeError, /world-writable/],
      [{ onMismatch: 'maybe' }, RangeError, /on_mismatch/],
      [{ dir: 5 }, TypeError, /dir must be a string/],
    ]
    for (const [opts, cls, re] of refused) {
      assert.throws(() => new HostBulkhead(name, { dir, ...opts }), (e) => e instanceof cls && re.test(e.message), JSON.stringify(opts))
    }
    assert.throws(() => new HostBulkhead(name, 'x'), TypeError)
    assert.throws(() => new HostBulkhead(5, { dir }), TypeError)
    assert.throws(() => new HostBulkhead('../x', { dir }), RangeError)
    // Nothing was created by a refused construction.
    assert.equal(fs.readdirSync(dir).some((f) => f.endsWith(name)), false)

    // Node spells names camelCase (durations `…Ms`); the crate's snake_case ones are refused by
    // name (`queue_timeout: 30` would otherwise be 30 ms, and two spellings would race).
    for (const [opts, re] of [
      [{ max_queue: 5 }, /"max_queue" is spelled "maxQueue"/],
      [{ queue_timeout: 30 }, /"queue_timeout" is spelled "queueTimeoutMs"/],
      [{ maxConcurrent: 4, max_concurrent: 3 }, /"max_concurrent" is spelled "maxConcurrent"/],
      [{ bogus: null }, /unknown option `bogus`/],
    ]) {
      assert.throws(() => new HostBulkhead(name, { dir, ...opts }), (e) => e instanceof TypeError && re.test(e.message), JSON.stringify(opts))
    }
    // `undefined` / `null`: the default.
    const hb = new HostBulkhead(name, { dir, maxConcurrent: 4, budget: null, queueTimeoutMs: undefined, maxQueue: 5 })
    assert.equal(hb.stats().maxConcurrent, 4)
    // Another host-wide setting: HOST_SEGMENT naming both; adopt uses the segment's.
    assert.throws(
      () => new HostBulkhead(name, { dir, maxConcurrent: 5 }),
      (e) =>
        e.code === 'HOST_SEGMENT' &&
        e.kind === 'mismatch' &&
        e.path === hb.path &&
        e.errno === null &&
        /max_concurrent is 4, this process asked for 5/.test(e.message),
    )
    const adopted = new HostBulkhead(name, { dir, maxConcurrent: 5, onMismatch: 'adopt' })
    assert.equal(adopted.stats().limit, 4)
    assert.equal(adopted.slot, hb.slot, 'one attachment per process')
  })

  test('stats: the local stats keys plus the host keys', () => {
    const hb = new HostBulkhead(fresh('stats'), { ...FAST, maxConcurrent: 2 })
    const s = hb.stats()
    const local = Object.keys(new Bulkhead().stats())
    for (const k of local) assert.ok(k in s, `local key ${k}`)
    const host = [
      'inFlight',
      'attached',
      'slots',
      'reclaimedDeadTotal',
      'reclaimedExpiredTotal',
      'reclaimedPermitsTotal',
      'staleReleasesTotal',
      'foreignReleasesTotal',
      'localInFlight',
      'localActive',
      'localQueued',
      'slot',
      'path',
    ]
    assert.deepEqual(Object.keys(s), [...local, ...host])
    assert.deepEqual(Object.keys(s.rejectedByReason), hg.REASONS)
    assert.equal(s.attached, 1)
    assert.equal(s.slots, 256)
    assert.equal(s.path, hb.path)
    assert.equal(s.slot, hb.slot)
    assert.equal(s.limit, 2)
    assert.equal(s.available, 2)
    assert.equal(s.budget, null)
    assert.equal(hb.reap(), 0)
  })

  test('the ESM entry exports the same host objects', async () => {
    const esm = await import('../index.mjs')
    assert.equal(esm.HostBulkhead, HostBulkhead)
    assert.equal(esm.HostPermit, HostPermit)
    assert.equal(esm.LeaseError, LeaseError)
    assert.equal(esm.reapHost, reapHost)
    assert.throws(() => new HostPermit(), TypeError)
  })
})

// ----- across processes ----------------------------------------------------------------------------

describe('HostBulkhead across processes', { skip: !linux && 'Linux only' }, () => {
  test('limit 2 over 3 forked processes; a SIGKILLed holder\'s permit reaches a waiting process', async (t) => {
    const name = fresh('fork')
    const opts = { ...FAST, maxConcurrent: 2 }
    const [a, b, c] = [child(name, opts), child(name, opts), child(name, opts)]
    try {
      const ready = await Promise.all([a.ready, b.ready, c.ready])
      assert.equal(new Set(ready.map((r) => r.slot)).size, 3, 'one slot per process')
      assert.equal((await within(a.ask('acquire'), 5_000, 'a acquire')).ok, true)
      assert.equal((await within(b.ask('acquire'), 5_000, 'b acquire')).ok, true)
      // The third process waits: the limit is the host's.
      assert.equal((await within(c.ask('try'), 5_000, 'c try')).got, false)
      const waiting = c.ask('acquire', { opts: { queueTimeoutMs: 30_000 } })
      let granted = false
      waiting.then(() => (granted = true))
      const hb = new HostBulkhead(name, opts)
      const deadlineWait = performance.now() + 5_000
      while (hb.stats().queued < 1 && performance.now() < deadlineWait) await new Promise((r) => setTimeout(r, 10))
      let s = hb.stats()
      assert.deepEqual([s.active, s.queued, s.attached], [2, 1, 4])
      assert.equal(hb.tryAcquire(), null)
      assert.equal(granted, false)

      const t0 = performance.now()
      await kill(a)
      const r = await within(waiting, 5_000, 'the waiting process granted after the SIGKILL')
      const ms = performance.now() - t0
      assert.equal(r.ok, true, JSON.stringify(r))
      assert.ok(ms < 5_000, `granted ${ms} ms after the kill`)
      t.diagnostic(`the waiting process was granted ${ms.toFixed(1)} ms after the SIGKILL (probe 50 ms)`)

      s = hb.stats()
      assert.equal(s.active, 2)
      assert.ok(s.reclaimedDeadTotal >= 1 && s.reclaimedPermitsTotal >= 1, JSON.stringify(s))
      assert.equal(s.attached, 3)
      await within(b.ask('release'), 5_000, 'b release')
      await within(c.ask('release'), 5_000, 'c release')
      assert.equal(hb.stats().active, 0)
    } finally {
      for (const x of [a, b, c]) await kill(x)
    }
  })

  test('C37: prom-client scrapes from any process count only live holders', async () => {
    // Per-process metric files kept reporting a dead worker's values (C37). A host bulkhead's
    // samples are the host's figures from this process, and a scrape reaps the dead first.
    const client = require('prom-client')
    const { registerPrometheus } = require('../metrics.js')
    const name = fresh('c37')
    const opts = { ...FAST, maxConcurrent: 4 }
    const [a, b] = [child(name, opts), child(name, opts)]
    try {
      await Promise.all([a.ready, b.ready])
      assert.equal((await within(a.ask('acquire'), 5_000, 'a acquire')).ok, true)
      assert.equal((await within(a.ask('acquire'), 5_000, 'a acquire')).ok, true)
      assert.equal((await within(b.ask('acquire'), 5_000, 'b acquire')).ok, true)
      const hb = new HostBulkhead(name, opts)
      const register = new client.Registry()
      registerPrometheus({ bulkheads: { db: hb }, register })
      const inFlight = async () => {
        const text = await register.metrics()
        const line = text.split('\n').find((l) => l.startsWith('hullguard_in_flight{') && l.includes('key="db"') && l.includes('dimension="calls"') && l.includes('class=""'))
        assert.ok(line, text)
        return Number(line.split(' ').pop())
      }
      assert.equal(await inFlight(), 3) // a's two and b's one, scraped from a third process
      await kill(a)
      assert.equal(await inFlight(), 1) // only b's: the scrape reaped a's slot
      await within(b.ask('release'), 5_000, 'b release')
      assert.equal(await inFlight(), 0)
    } finally {
      for (const x of [a, b]) await kill(x)
    }
  })

  test('cluster workers share the limit; reapHost in the primary\'s exit handler', async () => {
    const cluster = require('node:cluster')
    const name = fresh('cluster')
    // Probes every minute: only the primary's reapHost reclaims the killed worker's slot.
    const opts = { dir, probeMs: 60_000, beatMs: 1_000, leaseTtlMs: 600_000, maxConcurrent: 2 }
    cluster.setupPrimary({ exec: CHILD, args: [JSON.stringify({ name, options: opts })], execArgv: [], silent: true })
    const workers = [cluster.fork(), cluster.fork(), cluster.fork()]
    const ws = workers.map((w) => {
      const c = wire(w, w)
      c.exited = new Promise((resolve) => w.process.once('exit', (code, signal) => resolve({ code, signal })))
      children.add(c)
      return c
    })
    const reaped = []
    const onExit = () => reaped.push(reapHost(name, { dir }))
    cluster.on('exit', onExit)
    try {
      await Promise.all(ws.map((w) => w.ready))
      assert.equal((await within(ws[0].ask('acquire'), 5_000, 'w0')).ok, true)
      assert.equal((await within(ws[1].ask('acquire'), 5_000, 'w1')).ok, true)
      const r = await within(ws[2].ask('acquire', { opts: { queueTimeoutMs: 100 } }), 5_000, 'w2 timeout')
      assert.deepEqual([r.ok, r.code, r.reason], [false, 'BULKHEAD_QUEUE_TIMEOUT', 'timeout'])

      const exited = once(cluster, 'exit')
      ws[0].proc.process.kill('SIGKILL')
      await within(exited, 10_000, 'worker exit')
      assert.deepEqual(reaped, [1], 'the primary reclaimed the dead worker\'s slot')
      const g = await within(ws[2].ask('acquire', { opts: { queueTimeoutMs: 5_000 } }), 10_000, 'w2 grant')
      assert.equal(g.ok, true, JSON.stringify(g))
      const { stats } = await within(ws[2].ask('stats'), 5_000, 'stats')
      assert.equal(stats.active, 2)
      assert.equal(stats.reclaimedDeadTotal, 1)
      assert.equal(stats.reclaimedPermitsTotal, 1)
    } finally {
      for (const w of ws) {
        if (w.proc.process.exitCode === null && w.proc.process.signalCode === null) w.proc.process.kill('SIGKILL')
        await within(w.exited, 10_000, 'worker exit')
        children.delete(w)
      }
      cluster.off('exit', onExit)
    }
  })

  test('reapHost without attaching; HOST_SEGMENT for no segment', async () => {
    const name = fresh('reap')
    const opts = { dir, probeMs: 60_000, beatMs: 1_000, leaseTtlMs: 600_000, maxConcurrent: 3 }
    const a = child(name, opts)
    await a.ready
    assert.equal((await within(a.ask('acquire', { opts: { weight: 2 } }), 5_000, 'acquire')).ok, true)
    assert.equal(reapHost(name, { dir }), 0, 'a live holder is not reclaimed')
    await kill(a)
    assert.equal(reapHost(name, { dir }), 1)
    assert.equal(reapHost(name, { dir }), 0)
    assert.throws(
      () => reapHost(fresh('none'), { dir }),
      (e) => e.code === 'HOST_SEGMENT' && e.kind === 'io' && e.errno === 2 && /No such file/.test(e.message),
    )
    assert.throws(() => reapHost(name, { dir, bogus: 1 }), TypeError)
    const hb = new HostBulkhead(name, opts)
    const s = hb.stats()
    assert.deepEqual([s.active, s.reclaimedDeadTotal, s.reclaimedPermitsTotal], [0, 1, 2])
  })

  test('the hullguard bin: host ls / show / rm', async () => {
    const name = fresh('bin')
    const a = child(name, { ...FAST, maxConcurrent: 3 })
    await a.ready
    const run = async (...args) => {
      const p = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
      let stdout = ''
      let stderr = ''
      p.stdout.on('data', (d) => (stdout += d))
      p.stderr.on('data', (d) => (stderr += d))
      const [status] = await within(once(p, 'exit'), 10_000, `hullguard ${args.join(' ')}`)
      return { status, stdout, stderr }
    }
    try {
      let r = await run('host', 'ls', '--dir', dir)
      assert.equal(r.status, 0, r.stderr)
      assert.match(r.stdout, new RegExp(`^${name}\\s+3\\s+0\\s+1\\s+1/256$`, 'm'))
      r = await run('host', 'show', name, '--dir', dir, '--json')
      assert.equal(r.status, 0, r.stderr)
      const info = JSON.parse(r.stdout)
      assert.equal(info.name, name)
      assert.equal(info.max_concurrent, 3)
      assert.equal(info.attached, 1)
      assert.equal(info.occupied[0].pid, a.proc.pid)
      assert.equal(info.occupied[0].library, 'node')
      r = await run('host', 'rm', name, '--dir', dir)
      assert.equal(r.status, 1, 'refused while a live process is attached')
      assert.match(r.stderr, /in use by pid/)
      await kill(a)
      r = await run('host', 'rm', name, '--dir', dir)
      assert.equal(r.status, 0, r.stderr)
      assert.match(r.stdout, new RegExp(`removed ${name}`))
      r = await run('host', 'show', name, '--dir', dir)
      assert.equal(r.status, 1)
      r = await run('host', 'bogus')
      assert.equal(r.status, 2)
      assert.match(r.stderr, /usage: hullguard host ls/)
      r = await run()
      assert.equal(r.status, 2)
    } finally {
      await kill(a)
    }
    const pkg = require('../package.json')
    assert.equal(pkg.bin.hullguard, 'bin/hullguard.js')
    assert.ok(pkg.files.includes('bin/hullguard.js') && pkg.files.includes('host.js'))
  })
})

// ----- across worker threads -------------------------------------------------------------------------

/** A worker thread running `body` (the source of an async function of `(hg, workerData, post, next)`). */
function thread(body, workerData) {
  const src = `
    const { parentPort, workerData } = require('node:worker_threads')
    const hg = require(${JSON.stringify(path.join(__dirname, '..', 'index.js'))})
    const inbox = []
    let wake = null
    parentPort.on('message', (m) => { inbox.push(m); wake?.() })
    const next = () => new Promise((r) => { if (inbox.length) r(inbox.shift()); else wake = () => { wake = null; r(inbox.shift()) } })
    const post = (m) => parentPort.postMessage(m)
    ;(${body})(hg, workerData, post, next).catch((e) => post({ error: String(e && e.stack || e) }))
  `
  const w = new Worker(src, { eval: true, workerData })
  const inbox = []
  let wake = null
  w.on('message', (m) => {
    inbox.push(m)
    wake?.()
  })
  w.on('error', (e) => {
    inbox.push({ error: String(e && e.stack) })
    wake?.()
  })
  w.exited = once(w, 'exit')
  /** The next message (bounded). */
  w.next = (what) =>
    within(
      new Promise((r) => {
        if (inbox.length) r(inbox.shift())
        else wake = () => ((wake = null), r(inbox.shift()))
      }),
      10_000,
      what,
    ).then((m) => {
      if (m.error) throw new Error(`worker: ${m.error}`)
      return m
    })
  return w
}

describe('HostBulkhead across worker_threads', { skip: !linux && 'Linux only' }, () => {
  test('worker threads share the process\'s slot and the host\'s limit; a thread\'s own handles', async () => {
    const name = fresh('threads')
    const opts = { ...FAST, maxConcurrent: 2 }
    const hb = new HostBulkhead(name, opts)
    const mine = hb.tryAcquire()
    const w = thread(
      async (hg, { name, opts }, post, next) => {
        const hb = new hg.HostBulkhead(name, opts)
        const first = hb.tryAcquire()
        const second = hb.tryAcquire()
        post({ slot: hb.slot, first: first !== null, second: second !== null })
        const t0 = performance.now()
        const third = await hb.acquire({ queueTimeoutMs: 30_000 })
        post({ granted: true, ms: performance.now() - t0, weight: third.weight })
        await next() // 'exit': ends holding `first` and `third`, released at the thread's teardown
        process.exit(0)
      },
      { name, opts },
    )
    try {
      const m = await w.next('worker tries')
      assert.equal(m.slot, hb.slot, 'one process-wide attachment')
      assert.deepEqual([m.first, m.second], [true, false], 'the limit is shared with this thread')
      const deadlineWait = performance.now() + 5_000
      while (hb.stats().queued < 1 && performance.now() < deadlineWait) await new Promise((r) => setTimeout(r, 10))
      assert.deepEqual([hb.stats().active, hb.stats().queued], [2, 1])
      assert.equal(hb.tryAcquire(), null)
      mine.release() // wakes the other thread's acquire (the crate's waker, on that isolate's thread)
      const g = await w.next('worker granted')
      assert.equal(g.granted, true)
      assert.equal(hb.stats().active, 2)
      w.postMessage('exit')
      await within(w.exited, 10_000, 'worker exit')
      // The ended thread's permits came back with its environment (its permits' finalizers).
      const s = hb.stats()
      assert.equal(s.active, 0, JSON.stringify(s))
      const two = hb.tryAcquire(2)
      assert.equal(two.weight, 2)
      two.release()
    } finally {
      await w.terminate()
    }
  })

  test('a terminated thread\'s pending acquire gives its place up', async () => {
    const name = fresh('terminate')
    const opts = { ...FAST, maxConcurrent: 1 }
    const hb = new HostBulkhead(name, opts)
    const mine = hb.tryAcquire()
    const w = thread(
      async (hg, { name, opts }, post) => {
        const hb = new hg.HostBulkhead(name, opts)
        const p = hb.acquire({ queueTimeoutMs: 60_000 })
        post({ pending: true })
        await p
        post({ granted: true })
      },
      { name, opts },
    )
    try {
      await w.next('worker pending')
      const deadlineWait = performance.now() + 5_000
      while (hb.stats().queued < 1 && performance.now() < deadlineWait) await new Promise((r) => setTimeout(r, 10))
      assert.equal(hb.stats().queued, 1)
      await w.terminate()
      assert.equal(hb.stats().queued, 0, 'the dead thread\'s waiter left the queue')
      const next = hb.acquire({ queueTimeoutMs: 5_000 })
      mine.release()
      const p = await within(next, 5_000, 'granted, not stuck behind the dead thread')
      p.release()
      assert.equal(hb.stats().active, 0)
    } finally {
      await w.terminate()
    }
  })
})
