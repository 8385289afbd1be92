#!/usr/bin/env node
// The isolation demo in Node (docs/design.md §13): `make demo-node`.
//
// Two real HTTP/1.1 upstreams listen on 127.0.0.1, served by a worker thread with its own event
// loop (so the client's loop measures only the client): a healthy origin that answers in about
// 5 ms and a degraded origin that answers in 1-2 s. One client sends an open-loop schedule of
// requests to both with `http.request`: Poisson arrivals (100 healthy and 50 degraded requests a
// second, exponential gaps from a fixed seed, so every run sends the same schedule). Its total
// outbound capacity is a shared budget of N concurrent requests across all origins: ONE
// `http.Agent({keepAlive: true, maxTotalSockets: N})` (HTTP/1.1: one request per socket). Node's
// agent has no pool timeout, so the demo gives up on a request that got no socket within 2 s
// (`pool_timeout`), as a pooled client would.
//
// The same schedule runs twice, each time with a fresh agent:
// 1. without hullguard: the degraded origin's slow requests take the sockets of the shared
//    budget, and healthy requests that need a socket wait in the agent's queue;
// 2. with hullguard: the same agent class with one bulkhead per canonical origin key in front of
//    its socket pool (`BulkheadAgent` = `guardAgent(http.Agent)`, a `Registry` with an override
//    for the degraded origin), so a request takes its origin's permit before the agent sees it.
//    The bulkheads' `maxConcurrent` add up to N: the degraded origin can only ever hold its own
//    slice of the sockets, and a healthy request never waits behind a degraded one.
//
// Why the healthy upstream closes its connections. A keep-alive agent keeps each origin's idle
// sockets for that origin: an origin that already holds sockets keeps using them and asks the
// shared budget again only when it needs one more. So the healthy upstream here does not keep
// connections alive (it answers `Connection: close`, as many proxies, load balancers and older
// services do, or as any server does at its keep-alive request or age limit): every healthy
// request needs a socket from the shared budget, as in the Rust and Python demos. When the
// degraded requests hold the budget, Node's agent queues the healthy request, and a socket that a
// degraded request frees goes to the next queued *degraded* request (the agent serves a freed
// socket's own origin first), so the healthy request waits until the pool timeout. With hullguard
// the degraded origin never holds more than its slice, so the healthy origin always finds room.
// `--recycle K` makes the healthy upstream keep a connection for K requests instead (0: without
// limit); the larger K, the longer the healthy origin lives on the sockets it already holds, and
// the later (and less predictably) it loses the last one to the degraded origin.
//
// The measure "waited behind a degraded one for the shared budget": a thin subclass of the
// agent looks at each request as it enters the agent's pool (`addRequest`; with hullguard that
// is after the bulkhead admitted it). A request that the agent puts in its queue
// (`agent.requests`: no idle socket of its origin and `maxTotalSockets` sockets exist, idle ones
// included) "waited for the shared budget". If at that moment at least one degraded request
// holds a socket (`agent.sockets[degraded].length > 0`) it "waited behind a degraded one". This is
// the agent's own decision, read from its documented `requests` / `sockets` / `freeSockets`.
//
// Then it prints both runs side by side and each bulkhead's stats, and checks the two properties
// the demo exists to show (exit code 1 if either fails), as the Rust and Python demos do: the
// healthy origin's p99 latency with hullguard is at most a fifth of its p99 without, and with
// hullguard no healthy request waited behind a degraded one for the shared budget.
//
// Last, the deadline phase (examples/deadline_demo.mjs; `--no-deadline` skips it): a request
// budget across two sequential calls and CoDel + adaptive LIFO under a burst.
//
// Then the LLM-gateway phase runs (examples/llm_gateway_demo.mjs; `--no-llm` skips it): a fake
// streaming LLM provider with a concurrent-token ceiling, an interactive and a batch class
// through one client, without a bulkhead, through `withBulkhead(fetch)` with a count-only
// registry, and with calls and tokens in one decision (refunds, classes). Its checks count in
// the exit code.
//
// Everything is bounded: only 127.0.0.1, a fixed number of requests per run, every wait has a
// deadline. The whole demo takes about 43 s (21 s with `--no-llm`). Smaller runs (bindings-node/__test__/demo.test.js):
//   node examples/isolation_demo.mjs --budget 4 --seconds 3 --degraded-min 1 --degraded-max 1.5
// `--json` prints one more line, `RESULT {...}`, with the figures the checks use; `--help` lists
// every flag.

import http from 'node:http'
import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import { gatewayPhase, phaseFlags, phaseOptions } from './llm_gateway_demo.mjs'
import {
  deadlinePhase,
  phaseFlags as deadlineFlags,
  phaseOptions as deadlineOptions,
} from './deadline_demo.mjs'

const HEALTHY = 0
const DEGRADED = 1
// The package from this repository (bindings-node/, built by `make node-build`).
const HULLGUARD = new URL('../bindings-node/index.mjs', import.meta.url).href

// ---------------------------------------------------------------------------------------------
// The upstreams (a worker thread with its own event loop).

const BODY = 'ok\n'

function degradedDelayMs(n, lo, hi) {
  // Spread deterministically over [lo, hi) (mean (lo + hi) / 2), as the Rust demo does.
  return lo + ((hi - lo) * ((n * 379) % 1000)) / 1000
}

async function serveUpstreams({ healthyMs, degradedMinMs, degradedMaxMs, recycle }) {
  const servers = []
  for (const kind of [HEALTHY, DEGRADED]) {
    let served = 0
    const server = http.createServer({ noDelay: true }, (req, res) => {
      const n = served++
      const pause = kind === HEALTHY ? healthyMs : degradedDelayMs(n, degradedMinMs, degradedMaxMs)
      req.resume()
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length })
        res.end(BODY)
      }, pause)
    })
    // The healthy upstream closes a connection after `recycle` requests (1: every response says
    // `Connection: close`).
    if (kind === HEALTHY && recycle > 0) server.maxRequestsPerSocket = recycle
    server.listen({ host: '127.0.0.1', port: 0, backlog: 1024 })
    await once(server, 'listening')
    servers.push(server)
  }
  parentPort.postMessage({ ports: servers.map((s) => s.address().port) })
  parentPort.on('message', (msg) => {
    if (msg === 'stop') {
      for (const s of servers) {
        s.closeAllConnections()
        s.close()
      }
      parentPort.close()
    }
  })
}

// ---------------------------------------------------------------------------------------------
// The client.

function options() {
  const { values } = parseArgs({
    options: {
      budget: { type: 'string', default: '8' },
      seconds: { type: 'string', default: '8' },
      'healthy-ms': { type: 'string', default: '5' },
      'degraded-min': { type: 'string', default: '1.0' },
      'degraded-max': { type: 'string', default: '2.0' },
      'healthy-rate': { type: 'string', default: '100' },
      'degraded-rate': { type: 'string', default: '50' },
      seed: { type: 'string', default: '1' },
      recycle: { type: 'string', default: '1' },
      'degraded-slice': { type: 'string' },
      'pool-timeout': { type: 'string', default: '2.0' },
      json: { type: 'boolean', default: false },
      'no-llm': { type: 'boolean', default: false },
      ...phaseFlags('llm-'),
      'no-deadline': { type: 'boolean', default: false },
      ...deadlineFlags('deadline-'),
      help: { type: 'boolean', short: 'h', default: false },
    },
  })
  if (values.help) {
    console.log(`usage: node examples/isolation_demo.mjs [flags]
  --budget N            shared budget: the agent's maxTotalSockets (default 8)
  --seconds S           how long each run keeps sending (default 8)
  --healthy-ms MS       healthy upstream's answer time (default 5)
  --degraded-min S      degraded upstream's answer time, from (default 1.0)
  --degraded-max S      ... to (default 2.0)
  --healthy-rate R      healthy requests per second, Poisson arrivals (default 100)
  --degraded-rate R     degraded requests per second, Poisson arrivals (default 50)
  --seed N              the schedule's random seed (default 1)
  --recycle K           the healthy server closes a connection after K requests (default 1:
                        Connection: close on every response; 0: never)
  --degraded-slice M    the degraded bulkhead's maxConcurrent (default max(1, N/4)); healthy gets N - M
  --pool-timeout S      give up on a request with no socket after S (default 2.0)
  --json                also print RESULT {json} at the end
  --no-llm              skip the LLM-gateway phase (examples/llm_gateway_demo.mjs; its flags
                        prefixed with --llm-, e.g. --llm-seconds 4)
  --no-deadline         skip the deadline phase (examples/deadline_demo.mjs; its flags prefixed
                        with --deadline-, e.g. --deadline-budget 0.5)`)
    process.exit(0)
  }
  const num = (name, min) => {
    const v = Number(values[name])
    if (!Number.isFinite(v) || v < min) {
      console.error(`--${name} must be a number >= ${min}`)
      process.exit(2)
    }
    return v
  }
  const budget = num('budget', 2)
  const degradedSlice =
    values['degraded-slice'] === undefined ? Math.max(1, Math.floor(budget / 4)) : num('degraded-slice', 1)
  if (!Number.isInteger(budget) || !Number.isInteger(degradedSlice) || degradedSlice >= budget) {
    console.error('--budget and --degraded-slice must be integers, the slice below the budget')
    process.exit(2)
  }
  const o = {
    budget,
    loadMs: num('seconds', 0.1) * 1000,
    healthyMs: num('healthy-ms', 0),
    degradedMinMs: num('degraded-min', 0) * 1000,
    degradedMaxMs: num('degraded-max', 0) * 1000,
    healthyRate: num('healthy-rate', 0.1),
    degradedRate: num('degraded-rate', 0.1),
    seed: num('seed', 0),
    recycle: num('recycle', 0),
    degradedSlice,
    healthySlice: budget - degradedSlice,
    poolTimeoutMs: num('pool-timeout', 0.01) * 1000,
    json: values.json,
    llm: values['no-llm'] ? null : phaseOptions(values, 'llm-'),
    deadline: values['no-deadline'] ? null : deadlineOptions(values, 'deadline-'),
  }
  if (o.degradedMaxMs < o.degradedMinMs) o.degradedMaxMs = o.degradedMinMs
  // A safety net on one exchange once it has a socket: never reached here.
  o.requestTimeoutMs = o.degradedMaxMs + 5000
  if (o.loadMs + o.poolTimeoutMs + o.requestTimeoutMs > 25_000) {
    console.error('a run would exceed 25 s: lower --seconds or the degraded times')
    process.exit(2)
  }
  return o
}

/** Thrown at a request that got no socket within the pool timeout. */
class PoolTimeoutError extends Error {
  constructor() {
    super('no socket of the shared budget within the pool timeout')
    this.code = 'POOL_TIMEOUT'
  }
}

function sum(lists) {
  let n = 0
  for (const k in lists) n += lists[k].length
  return n
}

/**
 * The instrumented agent: `Base` (http.Agent) that records, for every request entering its pool,
 * whether the agent queued it and whether a degraded request held a socket then. It also arms
 * the pool timeout of a queued request.
 */
function instrument(Base, run) {
  return class InstrumentedAgent extends Base {
    addRequest(req, options, ...rest) {
      super.addRequest(req, options, ...rest)
      const name = this.getName({ ...options, ...this.options })
      const queue = this.requests[name]
      if (queue === undefined || !queue.includes(req)) return
      const origin = name === run.names[HEALTHY] ? HEALTHY : DEGRADED
      const degradedHolding = (this.sockets[run.names[DEGRADED]] ?? []).length
      if (origin === HEALTHY) {
        run.live.healthyWaited++
        if (degradedHolding > 0) run.live.healthyWaitedBehindDegraded++
      }
      const queuedAt = performance.now()
      // The caller gives up now ('pool_timeout'); the destroyed request stays in the agent's
      // queue until the agent hands it a socket, which it then frees again (Node's behaviour).
      const timer = setTimeout(() => {
        req.emit('pool-timeout')
        req.destroy(new PoolTimeoutError())
      }, run.o.poolTimeoutMs)
      req.once('socket', () => {
        clearTimeout(timer)
        run.live.poolWaitMs[origin].push(performance.now() - queuedAt)
      })
      req.once('close', () => clearTimeout(timer))
    }
  }
}

/** One request as the application makes it; resolves {origin, outcome, latencyMs}. */
function request(run, origin) {
  const start = performance.now()
  run.live.sent[origin]++
  return new Promise((resolve) => {
    let settled = false
    const finish = (outcome) => {
      if (settled) return
      settled = true
      const latencyMs = performance.now() - start
      run.live.done[origin]++
      if (outcome === 'ok') run.live.ok[origin]++
      resolve({ origin, outcome, latencyMs })
    }
    const req = http.request(run.urls[origin], { agent: run.agent })
    req.setTimeout(run.o.requestTimeoutMs, () => req.destroy(new Error('request timeout')))
    req.on('response', (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (body += d))
      res.on('end', () => finish(res.statusCode === 200 && body === BODY ? 'ok' : 'http_error'))
      res.on('error', () => finish('http_error'))
    })
    req.once('pool-timeout', () => finish('pool_timeout'))
    req.on('error', (err) => {
      if (err.name === 'BulkheadError') finish(`rejected:${err.reason}`)
      else if (err.code === 'POOL_TIMEOUT') finish('pool_timeout')
      else finish('http_error')
    })
    req.on('close', () => finish('http_error')) // closed without a response (never expected)
    req.end()
  })
}

/** A small seeded PRNG (mulberry32): the same schedule on every run. */
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

/**
 * The open-loop schedule: [offsetMs, origin], in time order. Each origin's requests arrive as a
 * Poisson process at its rate (exponential gaps), from a fixed seed.
 */
function schedule(o) {
  const rnd = prng(o.seed * 2654435761 + 1)
  const at = []
  for (const [rate, origin] of [
    [o.healthyRate, HEALTHY],
    [o.degradedRate, DEGRADED],
  ]) {
    for (let t = -Math.log(1 - rnd()) * (1000 / rate); t < o.loadMs; t += -Math.log(1 - rnd()) * (1000 / rate)) {
      at.push([t, origin])
    }
  }
  at.sort((a, b) => a[0] - b[0] || a[1] - b[1])
  return at
}

const sleepUntil = (t0, offsetMs) =>
  new Promise((r) => {
    const d = t0 + offsetMs - performance.now()
    if (d <= 0) setImmediate(r)
    else setTimeout(r, d)
  })

function budgetLine(run) {
  const a = run.agent
  const inUse = sum(a.sockets)
  const idle = sum(a.freeSockets)
  const degraded = (a.sockets[run.names[DEGRADED]] ?? []).length
  let waiting = 0
  for (const k in a.requests) waiting += a.requests[k].filter((r) => !r.destroyed).length
  return { inUse, idle, degraded, waiting }
}

async function runOnce(name, o, urls, registry) {
  const live = {
    sent: [0, 0],
    done: [0, 0],
    ok: [0, 0],
    healthyWaited: 0,
    healthyWaitedBehindDegraded: 0,
    poolWaitMs: [[], []],
  }
  const run = { name, o, urls, live, names: [], agent: null }
  const agentOptions = { keepAlive: true, maxTotalSockets: o.budget }
  const Instrumented = instrument(http.Agent, run)
  const hullguard = registry === null ? null : await import(HULLGUARD)
  run.agent =
    registry === null
      ? new Instrumented(agentOptions)
      : new (hullguard.guardAgent(Instrumented))({ registry, ...agentOptions })
  run.names = urls.map((u) => {
    const { hostname, port } = new URL(u)
    return run.agent.getName({ host: hostname, port })
  })

  console.log()
  console.log(`== ${name} ==`)
  const t0 = performance.now()
  let second = 0
  const ticker = setInterval(() => {
    second++
    const b = budgetLine(run)
    const phase = second * 1000 <= o.loadMs ? 'sending ' : 'settling'
    const g = (a, i) => String(a[i]).padStart(4)
    console.log(
      `  [${name.padEnd(17)}] ${String(second).padStart(2)}s ${phase} | healthy ${g(live.sent, 0)} sent ${g(live.done, 0)} done ${g(live.ok, 0)} ok` +
        ` | degraded ${g(live.sent, 1)} sent ${g(live.done, 1)} done ${g(live.ok, 1)} ok` +
        ` | sockets ${b.inUse}/${o.budget} in use (${b.degraded} degraded), ${b.idle} idle, ${String(b.waiting).padStart(3)} waiting`,
    )
  }, 1000)
  const pending = []
  for (const [offset, origin] of schedule(o)) {
    if (performance.now() < t0 + offset) await sleepUntil(t0, offset)
    pending.push(request(run, origin))
  }
  const records = await Promise.all(pending)
  clearInterval(ticker)
  const wallMs = performance.now() - t0
  run.agent.destroy()
  return summarize(run, records, wallMs)
}

/** Nearest-rank percentile of a sorted array. */
function percentile(sorted, p) {
  if (sorted.length === 0) return 0
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1]
}

function summarize(run, records, wallMs) {
  const healthy = records.filter((r) => r.origin === HEALTHY)
  const lat = healthy.map((r) => r.latencyMs).sort((a, b) => a - b)
  const degradedOutcomes = {}
  for (const r of records)
    if (r.origin === DEGRADED) degradedOutcomes[r.outcome] = (degradedOutcomes[r.outcome] ?? 0) + 1
  const poolWait = run.live.poolWaitMs[HEALTHY].slice().sort((a, b) => a - b)
  return {
    healthyTotal: healthy.length,
    healthyOk: healthy.filter((r) => r.outcome === 'ok').length,
    healthyOutcomes: healthy.reduce((m, r) => ((m[r.outcome] = (m[r.outcome] ?? 0) + 1), m), {}),
    healthyPct: [50, 95, 99].map((p) => percentile(lat, p)),
    healthyWaited: run.live.healthyWaited,
    healthyWaitedBehindDegraded: run.live.healthyWaitedBehindDegraded,
    healthyPoolWaitMaxMs: poolWait.length ? poolWait[poolWait.length - 1] : 0,
    degradedTotal: records.length - healthy.length,
    degradedOutcomes,
    wallMs,
  }
}

const ms = (v) => `${v.toFixed(1)} ms`
const rate = (ok, total) => (total === 0 ? '-' : `${((ok * 100) / total).toFixed(1)} % (${ok}/${total})`)

function label(outcome) {
  if (outcome === 'ok') return 'ok'
  if (outcome === 'pool_timeout') return 'pool_timeout (shared budget)'
  if (outcome.startsWith('rejected:')) return `rejected by bulkhead: ${outcome.slice(9)}`
  return outcome
}

function printTable(o, a, b) {
  const row = (l, x, y) => console.log(`  ${l.padEnd(46)} ${String(x).padStart(22)} ${String(y).padStart(22)}`)
  console.log()
  console.log('== side by side ==')
  row('', 'without hullguard', 'with hullguard')
  console.log(`  healthy origin (~${o.healthyMs} ms)`)
  row('  requests', a.healthyTotal, b.healthyTotal)
  row('  success rate', rate(a.healthyOk, a.healthyTotal), rate(b.healthyOk, b.healthyTotal))
  ;['p50', 'p95', 'p99'].forEach((p, i) =>
    row(`  ${p} latency (all requests)`, ms(a.healthyPct[i]), ms(b.healthyPct[i])),
  )
  row('  waited for the shared budget', a.healthyWaited, b.healthyWaited)
  row('  ... behind a degraded request holding a socket', a.healthyWaitedBehindDegraded, b.healthyWaitedBehindDegraded)
  row('  longest wait for a socket (got one)', ms(a.healthyPoolWaitMaxMs), ms(b.healthyPoolWaitMaxMs))
  const hOut = [...new Set([...Object.keys(a.healthyOutcomes), ...Object.keys(b.healthyOutcomes)])]
    .filter((k) => k !== 'ok')
    .sort()
  for (const k of hOut) row(`  ${label(k)}`, a.healthyOutcomes[k] ?? 0, b.healthyOutcomes[k] ?? 0)
  console.log(`  degraded origin (${o.degradedMinMs / 1000}-${o.degradedMaxMs / 1000} s), outcomes`)
  row('  requests', a.degradedTotal, b.degradedTotal)
  const keys = [...new Set([...Object.keys(a.degradedOutcomes), ...Object.keys(b.degradedOutcomes)])].sort()
  for (const k of keys) row(`  ${label(k)}`, a.degradedOutcomes[k] ?? 0, b.degradedOutcomes[k] ?? 0)
  row('run time (sending + settling)', `${(a.wallMs / 1000).toFixed(1)} s`, `${(b.wallMs / 1000).toFixed(1)} s`)
}

function printStats(h, d) {
  const row = (l, x, y) => console.log(`  ${l.padEnd(46)} ${String(x).padStart(22)} ${String(y).padStart(22)}`)
  console.log()
  console.log('== bulkhead stats (with hullguard, after the run) ==')
  row('', 'healthy bulkhead', 'degraded bulkhead')
  for (const k of ['maxConcurrent', 'limit', 'active', 'queued', 'grantedUnclaimed', 'available', 'admittedTotal'])
    row(k, h[k], d[k])
  for (const r of Object.keys(h.rejectedByReason))
    row(`rejectedByReason.${r}`, h.rejectedByReason[r], d.rejectedByReason[r])
  for (const k of ['releasedTwiceTotal', 'leakedTotal', 'ringFree', 'queueWaitCount']) row(k, h[k], d[k])
  const wait = (s, ns) => (s.queueWaitCount === 0 ? '-' : ms(ns / 1e6))
  row(
    'queue wait mean (queueWaitSumNs / count)',
    wait(h, h.queueWaitSumNs / Math.max(1, h.queueWaitCount)),
    wait(d, d.queueWaitSumNs / Math.max(1, d.queueWaitCount)),
  )
  row('queue wait max (queueWaitMaxNs)', wait(h, h.queueWaitMaxNs), wait(d, d.queueWaitMaxNs))
}

async function main() {
  const o = options()
  const { Registry, originKey } = await import(HULLGUARD)
  const worker = new Worker(new URL(import.meta.url), {
    workerData: {
      healthyMs: o.healthyMs,
      degradedMinMs: o.degradedMinMs,
      degradedMaxMs: o.degradedMaxMs,
      recycle: o.recycle,
    },
  })
  const [{ ports }] = await once(worker, 'message')
  const urls = ports.map((p) => `http://127.0.0.1:${p}/`)
  const keys = urls.map((u) => originKey(u))
  const healthyConfig = { maxConcurrent: o.healthySlice, maxQueue: 100, queueTimeoutMs: 1000 }
  const degradedConfig = { maxConcurrent: o.degradedSlice, maxQueue: 4, queueTimeoutMs: 100 }

  console.log('hullguard isolation demo (Node)')
  const keep =
    o.recycle === 0
      ? 'keeps connections alive'
      : o.recycle === 1
        ? 'answers Connection: close'
        : `closes a connection after ${o.recycle} requests`
  console.log(`  healthy upstream  ${urls[0]}  answers in ~${o.healthyMs} ms, ${keep}`)
  console.log(`  degraded upstream ${urls[1]}  answers in ${o.degradedMinMs / 1000}-${o.degradedMaxMs / 1000} s`)
  console.log('  (both served by a worker thread with its own event loop)')
  console.log(
    `  load: ${o.loadMs / 1000} s open loop, Poisson arrivals (seed ${o.seed}): ${o.healthyRate} healthy and ${o.degradedRate} degraded requests/s`,
  )
  console.log(
    `  shared budget: one http.Agent({keepAlive: true, maxTotalSockets: ${o.budget}}) with http.request; pool timeout ${o.poolTimeoutMs / 1000} s (the demo's)`,
  )
  console.log(
    `  with hullguard: BulkheadAgent (the same agent, a bulkhead per origin key in front of its pool): ` +
      `healthy ${JSON.stringify(healthyConfig)}, degraded (override) ${JSON.stringify(degradedConfig)}`,
  )

  let without, withHg, registry
  try {
    without = await runOnce('without hullguard', o, urls, null)
    registry = new Registry({ ...healthyConfig, overrides: { [keys[DEGRADED]]: degradedConfig } })
    withHg = await runOnce('with hullguard', o, urls, registry)
  } finally {
    worker.postMessage('stop')
    await worker.terminate()
  }

  printTable(o, without, withHg)
  const stats = registry.stats()
  printStats(stats[keys[HEALTHY]], stats[keys[DEGRADED]])

  console.log()
  const p99Ok = withHg.healthyPct[2] * 5 <= without.healthyPct[2]
  // The strict form: with hullguard a healthy request never even finds the budget used up.
  const isolated = withHg.healthyWaitedBehindDegraded === 0 && withHg.healthyWaited === 0
  console.log(
    `check: healthy p99 with hullguard (${ms(withHg.healthyPct[2])}) at most a fifth of without (${ms(without.healthyPct[2])}): ${p99Ok ? 'PASS' : 'FAIL'}`,
  )
  console.log(
    `check: healthy requests that waited behind a degraded one for the shared budget, with hullguard: ` +
      `${withHg.healthyWaitedBehindDegraded} (want 0; waited at all: ${withHg.healthyWaited}): ${isolated ? 'PASS' : 'FAIL'}`,
  )
  // The LLM-gateway phase (examples/llm_gateway_demo.mjs): its own provider process and checks.
  const llmOk = o.llm === null || (await gatewayPhase(o.llm)).ok
  // The deadline phase (examples/deadline_demo.mjs): its own upstream process and checks.
  const deadlineOk = o.deadline === null || (await deadlinePhase(o.deadline)).ok
  if (o.json) {
    console.log(
      `RESULT ${JSON.stringify({
        without,
        with: withHg,
        checks: { p99: p99Ok, isolated },
        stats: { healthy: stats[keys[HEALTHY]], degraded: stats[keys[DEGRADED]] },
      })}`,
    )
  }
  return p99Ok && isolated && llmOk && deadlineOk ? 0 : 1
}

// The entry point (at the end: every declaration above is initialized by then).
if (!isMainThread) {
  await serveUpstreams(workerData)
} else {
  process.exitCode = await main()
}
