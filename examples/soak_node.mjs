#!/usr/bin/env node
// The Node child of the all-layers soak (examples/soak.py, `make soak`): the Node binding under
// random aborts, timeouts and limit changes against the demo upstreams, on three surfaces:
//
// * registry: a `Registry` with a breaker per origin and `callTimeoutMs` — `run()` with an
//   `AbortController` aborted at a random time or `AbortSignal.timeout`, `acquire()` +
//   `release({outcome})`, `tryAcquire()`; `setLimit` / `applyLimits` on a key at random;
// * host: the soak's `HostBulkhead` segment (shared with the Python workers and the C child);
// * fleet: the soak's `FleetBulkhead` pool on its redis-server (ioredis).
//
// Protocol (JSON lines on stdout): `{"ready": true}`, then after `go` on stdin one line a second
// `{"final": false, "ops", "counts", "checks", "failed", "failures"}` and at the end the same
// with `"final": true` once everything was aborted or released, the invariants checked at
// quiescence (I5) and every operation's settlement checked (caller and core). Stops at go +
// seconds, or at once when stdin closes (the parent is gone). Every loop and every request is
// bounded (queue timeouts, a 2 s request timeout).
//
//   node --expose-gc examples/soak_node.mjs --seconds 60 --healthy URL --degraded URL \
//     --scripted URL --host-name NAME --host-dir DIR --redis-port PORT --pool POOL [--seed N]

import http from 'node:http'
import { createRequire } from 'node:module'
import { parseArgs } from 'node:util'
import readline from 'node:readline'

const require = createRequire(import.meta.url)
const PKG = new URL('../bindings-node/', import.meta.url).pathname
const { Registry, HostBulkhead, FleetBulkhead, BulkheadError, originKey, REASONS } = require(PKG)

const { values: opt } = parseArgs({
  options: {
    seconds: { type: 'string', default: '60' },
    seed: { type: 'string', default: '1' },
    healthy: { type: 'string' },
    degraded: { type: 'string' },
    scripted: { type: 'string' },
    'host-name': { type: 'string' },
    'host-dir': { type: 'string' },
    'redis-port': { type: 'string', default: '0' },
    pool: { type: 'string' },
  },
})

const HOST_LIMIT = 4 // as soak.py
const FLEET_LIMIT = 8
const FLEET_TTL_MS = 3000
const HOLD_BOUND_MS = 10_000
const REASON_NAMES = REASONS.map((r) => (typeof r === 'string' ? r : r.name))

// A small seeded PRNG (mulberry32): the soak's runs are reproducible from the parent's seed.
function prng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
const rand = prng(Number(opt.seed))
const uniform = (lo, hi) => lo + (hi - lo) * rand()
const pick = (xs) => xs[Math.floor(rand() * xs.length)]
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

// ----- checks ------------------------------------------------------------------------------------

const checker = { n: 0, failed: 0, failures: [] }
function check(ok, what) {
  checker.n++
  if (!ok) {
    checker.failed++
    if (checker.failures.length < 25) checker.failures.push(what())
  }
  return ok
}

/** The limits of the last HOLD_BOUND_MS: a shrink never revokes (I1). */
class LimitHistory {
  constructor(initial) {
    this.events = [[performance.now(), initial]]
  }
  set(limit) {
    if (this.events[this.events.length - 1][1] !== limit) this.events.push([performance.now(), limit])
  }
  ceiling() {
    const now = performance.now()
    while (this.events.length > 1 && this.events[1][0] < now - HOLD_BOUND_MS) this.events.shift()
    return Math.max(...this.events.map((e) => e[1]))
  }
}

class Watch {
  constructor(name, history, maxQueue) {
    this.name = name
    this.history = history
    this.maxQueue = maxQueue
    this.prev = null
    this.ringFree = null
  }
  live(s) {
    const n = this.name
    check(s.queued >= 0 && s.queued <= this.maxQueue, () => `${n}: queued ${s.queued} outside 0..${this.maxQueue}`)
    check(s.active >= 0 && s.grantedUnclaimed >= 0, () => `${n}: negative active ${s.active} / unclaimed ${s.grantedUnclaimed}`)
    if (this.history) {
      const ceiling = this.history.ceiling()
      check(
        s.active + s.grantedUnclaimed <= ceiling,
        () => `${n}: I1 active ${s.active} + unclaimed ${s.grantedUnclaimed} above every limit of the last ${HOLD_BOUND_MS} ms (max ${ceiling}, limit now ${s.limit})`,
      )
    }
    check(s.available <= s.limit, () => `${n}: available ${s.available} above limit ${s.limit}`)
    check(s.leakedTotal === 0, () => `${n}: leakedTotal ${s.leakedTotal}`)
    check(s.releasedTwiceTotal === 0, () => `${n}: releasedTwiceTotal ${s.releasedTwiceTotal}`)
    const p = this.prev
    if (p) {
      check(s.admittedTotal >= p.admittedTotal, () => `${n}: admittedTotal went back`)
      for (const r of REASON_NAMES)
        check(s.rejectedByReason[r] >= p.rejectedByReason[r], () => `${n}: rejectedByReason.${r} went back`)
    }
    this.prev = s
  }
  quiescent(s) {
    const n = this.name
    check(
      s.active === 0 && s.queued === 0 && s.grantedUnclaimed === 0,
      () => `${n}: not quiescent at the end: active ${s.active} queued ${s.queued} unclaimed ${s.grantedUnclaimed}`,
    )
    check(s.available === s.limit, () => `${n}: I5 available ${s.available} != limit ${s.limit} at the end`)
    check(s.orphanedInFlight === 0 && s.reservationsHeld === 0, () => `${n}: orphaned / reservations at the end`)
    if (this.ringFree !== null)
      check(s.ringFree === this.ringFree, () => `${n}: ringFree ${s.ringFree} at the end, ${this.ringFree} idle at the start`)
    this.live(s)
  }
  settlement(s, t, { exact = true } = {}) {
    const n = this.name
    check(t.started === settled(t), () => `${n}: started ${t.started} != granted + refused + timedOut + cancelled ${settled(t)} (${JSON.stringify(t)})`)
    let rejected = 0
    for (const r of REASON_NAMES) if (r !== 'call_timeout') rejected += s.rejectedByReason[r]
    if (exact)
      check(
        s.admittedTotal + rejected === t.started,
        () => `${n}: core admittedTotal ${s.admittedTotal} + rejections ${rejected} != started ${t.started} (${JSON.stringify(s.rejectedByReason)}; caller ${JSON.stringify(t)})`,
      )
    check(
      t.granted <= s.admittedTotal && s.admittedTotal <= t.granted + t.cancelled,
      () => `${n}: core admittedTotal ${s.admittedTotal} outside caller's granted ${t.granted} .. + cancelled ${t.cancelled}`,
    )
    check(
      s.rejectedByReason.circuit_open === t.circuit_open,
      () => `${n}: circuit_open core ${s.rejectedByReason.circuit_open} != caller ${t.circuit_open}`,
    )
    check(
      s.rejectedByReason.call_timeout === t.call_timeout,
      () => `${n}: call_timeout core ${s.rejectedByReason.call_timeout} != caller ${t.call_timeout}`,
    )
  }
}

const TALLY_KEYS = ['started', 'granted', 'refused', 'timed_out', 'cancelled', 'ok', 'failed', 'call_timeout', 'circuit_open', 'cancelled_after_grant', 'cancelled_waiting']
const newTally = () => Object.fromEntries(TALLY_KEYS.map((k) => [k, 0]))
const settled = (t) => t.granted + t.refused + t.timed_out + t.cancelled
function refusal(t, e) {
  if (e.code === 'BULKHEAD_QUEUE_TIMEOUT') {
    t.timed_out++
    counts.queue_timeouts++
  } else {
    t.refused++
    if (e.code === 'CIRCUIT_OPEN') t.circuit_open++
  }
}

// ----- HTTP ----------------------------------------------------------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 })
/** GET `url`: resolves its status once the body ended; rejects on abort (an AbortError), error
 * or after 2 s. */
function httpGet(url, signal) {
  return new Promise((resolve, reject) => {
    let done = false
    const finish = (f, v) => {
      if (!done) {
        done = true
        f(v)
      }
    }
    const req = http.get(url, { agent, signal: signal ?? undefined }, (res) => {
      res.on('data', () => {})
      res.on('end', () => finish(resolve, res.statusCode))
      res.on('error', (e) => finish(reject, e))
      res.on('close', () => finish(reject, new Error('response closed early')))
    })
    req.on('error', (e) => finish(reject, e))
    req.setTimeout(2000, () => req.destroy(new Error('request timeout')))
  })
}

// ----- the surfaces ----------------------------------------------------------------------------

const urls = { healthy: opt.healthy, degraded: opt.degraded, scripted: opt.scripted }
const keys = Object.fromEntries(Object.entries(urls).map(([n, u]) => [n, originKey(u)]))
const counts = { cancels: 0, op_timeouts: 0, limit_changes: 0, breaker_opens: 0, call_timeouts: 0, queue_timeouts: 0 }

const reg = new Registry({
  maxConcurrent: 6,
  maxQueue: 32,
  queueTimeoutMs: 300,
  resilience: { breaker: { failureThreshold: 5, openDurationMs: 500, halfOpenMaxCalls: 1 }, callTimeoutMs: 400 },
})
reg.on('stateChange', (key, oldState, newState) => {
  if (newState === 'open') counts.breaker_opens++
})
const handles = Object.fromEntries(Object.values(keys).map((k) => [k, reg.get(k)]))
const regTallies = Object.fromEntries(Object.values(keys).map((k) => [k, newTally()]))
const watches = Object.fromEntries(Object.entries(keys).map(([n, k]) => [k, new Watch(`node registry[${n}]`, new LimitHistory(6), 32)]))
const revisions = Object.fromEntries(Object.values(keys).map((k) => [k, 0]))

const host = new HostBulkhead(opt['host-name'], { maxConcurrent: HOST_LIMIT, dir: opt['host-dir'], maxQueue: 64, queueTimeoutMs: 500 })
const hostTally = newTally()
const ioredis = require(PKG + 'node_modules/ioredis')
const Redis = ioredis.Redis ?? ioredis.default ?? ioredis
const redis = new Redis(Number(opt['redis-port']), '127.0.0.1', { maxRetriesPerRequest: 1, lazyConnect: false })
let redisErrors = 0
redis.on('error', () => {
  redisErrors++ // ioredis reconnects by itself; counted in the final report
})
const fleet = new FleetBulkhead(redis, { pool: opt.pool, maxConcurrent: FLEET_LIMIT, maxQueue: 64, queueTimeoutMs: 500, leaseTtlMs: FLEET_TTL_MS })
const fleetTally = newTally()
const fleetWatch = new Watch('node fleet (local)', null, 64)

let stopping = false
const live = new Set() // AbortControllers of operations in flight: the canceller's victims

/** A signal for one operation: none, a controller the canceller may abort, or a timeout. */
function opSignal() {
  const c = new AbortController()
  live.add(c)
  const x = rand()
  let timer = null
  if (x < 0.25) {
    const ms = uniform(1, 400)
    timer = setTimeout(() => {
      counts.op_timeouts++
      c.abort(new DOMException('operation timed out', 'TimeoutError'))
    }, ms)
  }
  return {
    signal: c.signal,
    done() {
      live.delete(c)
      if (timer) clearTimeout(timer)
    },
  }
}

async function registryOp() {
  const name = pick(['healthy', 'healthy', 'degraded', 'scripted'])
  const key = keys[name]
  const url = urls[name]
  const t = regTallies[key]
  const mode = rand()
  const queueTimeoutMs = pick([0, 5, 50, 200, null])
  const s = opSignal()
  try {
    if (mode < 0.6) {
      // run(): the callTimeoutMs applies; fn's signal aborts at it or with the caller's.
      let started = false
      t.started++
      try {
        await reg.run(
          key,
          async (signal) => {
            started = true
            const status = await httpGet(url, signal)
            if (status >= 500) throw new Error(`upstream ${status}`)
          },
          { signal: s.signal, queueTimeoutMs },
        )
        t.granted++
        t.ok++
      } catch (e) {
        if (started) {
          t.granted++
          if (e instanceof BulkheadError && e.code === 'BULKHEAD_CALL_TIMEOUT') {
            t.call_timeout++
            counts.call_timeouts++
          } else if (s.signal.aborted) t.cancelled_after_grant++
          else t.failed++
        } else if (e instanceof BulkheadError) {
          refusal(t, e)
        } else if (s.signal.aborted) {
          t.cancelled++
          t.cancelled_waiting++
        } else throw e
      }
    } else if (mode < 0.9) {
      t.started++
      let p
      try {
        p = await reg.acquire(key, { signal: s.signal, queueTimeoutMs })
      } catch (e) {
        if (e instanceof BulkheadError) refusal(t, e)
        else if (s.signal.aborted) {
          t.cancelled++
          t.cancelled_waiting++
        } else throw e
        return
      }
      t.granted++
      let outcome = 'ignored'
      try {
        const status = await httpGet(url, s.signal)
        outcome = status >= 500 ? 'failure' : 'success'
        t[status >= 500 ? 'failed' : 'ok']++
      } catch (e) {
        if (s.signal.aborted) t.cancelled_after_grant++
        else {
          outcome = 'failure'
          t.failed++
        }
      } finally {
        p.release({ outcome })
      }
    } else {
      t.started++
      let p
      try {
        p = reg.tryAcquire(key)
      } catch (e) {
        if (e instanceof BulkheadError) {
          refusal(t, e)
          return
        }
        throw e
      }
      if (p === null) {
        t.refused++
        return
      }
      t.granted++
      await sleep(uniform(0, 5))
      p.release()
      t.ok++
    }
  } finally {
    s.done()
  }
}

/** One operation on the host or the fleet bulkhead: hold the permit for a request to the
 * healthy upstream or a short sleep. */
async function holdOp(bh, t) {
  const weight = pick([1, 1, 2])
  const s = opSignal()
  t.started++
  try {
    let p
    try {
      if (rand() < 0.2) {
        p = bh.tryAcquire({ weight })
        if (p === null) {
          t.refused++
          return
        }
      } else p = await bh.acquire({ weight, signal: s.signal, queueTimeoutMs: pick([0, 10, 100, 500]) })
    } catch (e) {
      if (e instanceof BulkheadError) refusal(t, e)
      else if (s.signal.aborted) {
        t.cancelled++
        t.cancelled_waiting++
      } else throw e
      return
    }
    t.granted++
    try {
      if (rand() < 0.5) await httpGet(urls.healthy, s.signal)
      else await sleep(uniform(0, 20))
      t.ok++
    } catch (e) {
      if (s.signal.aborted) t.cancelled_after_grant++
      else t.failed++
    } finally {
      p.release()
    }
  } finally {
    s.done()
  }
}

async function loop(op, think) {
  while (!stopping) {
    await op()
    await sleep(uniform(0, think))
  }
}

function changeLimit() {
  const key = pick(Object.values(keys))
  const n = 1 + Math.floor(rand() * 6)
  const bh = handles[key]
  if (rand() < 0.5) bh.setLimit(n)
  else bh.applyLimits({ revision: ++revisions[key], limit: n })
  counts.limit_changes++
  const s = bh.stats()
  check(s.limit === n, () => `node registry: limit ${s.limit} after setting ${n}`)
  watches[key].history.set(s.limit)
}

function checkLive() {
  const all = reg.stats()
  for (const [k, s] of Object.entries(all)) if (watches[k]) watches[k].live(s)
  const hs = host.stats()
  check(hs.inFlight <= HOST_LIMIT, () => `node: host inFlight ${hs.inFlight} > ${HOST_LIMIT}`)
  check(hs.localActive >= 0 && hs.localQueued >= 0 && hs.localQueued <= 64, () => `node: host localActive ${hs.localActive} localQueued ${hs.localQueued}`)
  fleetWatch.live(fleet.stats())
}

function ops() {
  const r = newTally()
  for (const t of Object.values(regTallies)) for (const k of TALLY_KEYS) r[k] += t[k]
  return { 'registry+http': r, host: hostTally, fleet: fleetTally }
}
function report(final, extra = {}) {
  say({ final, ops: ops(), counts, checks: checker.n, failed: checker.failed, failures: checker.failures, ...extra })
}

// ----- the run ---------------------------------------------------------------------------------

async function main() {
  // Every key exists before the checks (one admission each, counted).
  for (const k of Object.values(keys)) {
    reg.tryAcquire(k).release()
    regTallies[k].started++
    regTallies[k].granted++
    regTallies[k].ok++
  }
  const stats0 = reg.stats()
  for (const k of Object.values(keys)) watches[k].ringFree = stats0[k].ringFree
  say({ ready: true })
  const rl = readline.createInterface({ input: process.stdin })
  await new Promise((resolve) => rl.once('line', resolve))
  rl.on('close', () => {
    stopping = true // the parent is gone
  })
  const end = performance.now() + Number(opt.seconds) * 1000
  const timers = [
    setInterval(checkLive, 250),
    setInterval(() => report(false), 1000),
    setInterval(() => {
      if (global.gc) global.gc()
    }, 2000),
  ]
  const chaos = (async () => {
    while (!stopping) {
      await sleep(uniform(100, 600))
      if (!stopping) changeLimit()
    }
  })()
  const canceller = (async () => {
    while (!stopping) {
      await sleep(uniform(2, 30))
      if (live.size) {
        const victims = [...live]
        const c = pick(victims)
        if (!c.signal.aborted) {
          c.abort()
          counts.cancels++
        }
      }
    }
  })()
  const loops = []
  for (let i = 0; i < 24; i++) loops.push(loop(registryOp, 10))
  for (let i = 0; i < 6; i++) loops.push(loop(() => holdOp(host, hostTally), 10))
  for (let i = 0; i < 6; i++) loops.push(loop(() => holdOp(fleet, fleetTally), 10))
  while (!stopping && performance.now() < end) await sleep(Math.min(100, Math.max(0, end - performance.now())))
  stopping = true
  // Everything is bounded; still, wait at most 10 s, then abort what is left.
  const all = Promise.all([...loops, chaos, canceller])
  const first = await Promise.race([all.then(() => 'done'), sleep(10_000).then(() => 'late')])
  if (first === 'late') {
    for (const c of live) c.abort()
    const again = await Promise.race([all.then(() => 'done'), sleep(5_000).then(() => 'late')])
    check(again === 'done', () => 'node: operations never ended')
  }
  for (const t of timers) clearInterval(t)
  for (const [k, bh] of Object.entries(handles)) {
    const r = await bh.drain({ timeoutMs: 5000 })
    check(r.drained, () => `node registry[${k}]: drain ${JSON.stringify(r)}`)
  }
  const hd = await host.drain(5000)
  const fd = await fleet.drain({ timeoutMs: 5000 })
  check(hd.drained && fd.drained, () => `node: drain host ${JSON.stringify(hd)} fleet ${JSON.stringify(fd)}`)
  const end1 = reg.stats()
  for (const [k, s] of Object.entries(end1)) {
    if (!watches[k]) continue
    watches[k].quiescent(s)
    watches[k].settlement(s, regTallies[k])
  }
  const hs = host.stats()
  check(hs.localActive === 0 && hs.localQueued === 0 && hs.localInFlight === 0, () => `node: host not quiescent locally: ${JSON.stringify(hs)}`)
  check(hostTally.started === settled(hostTally), () => `node host: started ${hostTally.started} != settled ${settled(hostTally)}`)
  const fs = fleet.stats()
  check(fs.active === 0 && fs.queued === 0 && fs.grantedUnclaimed === 0, () => `node fleet: not quiescent: active ${fs.active} queued ${fs.queued}`)
  fleetWatch.settlement(fs, fleetTally)
  await fleet.close()
  host.close()
  reg.close()
  agent.destroy()
  redis.disconnect()
  report(true, { memory: process.memoryUsage(), redisErrors })
  rl.close()
  process.exit(0)
}

main().catch((e) => {
  check(false, () => `node: ${e && e.stack ? e.stack : e}`)
  report(true)
  process.exit(1)
})
