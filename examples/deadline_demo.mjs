// The deadline phase of `make demo-node` (docs/design.md §13, §5.9, §4.10): request budgets and
// queue-delay shedding on real local HTTP traffic, in Node (fetch). The Python twin is
// examples/deadline_demo.py; the experiments and checks are the same.
//
// An upstream in a process of its own on loopback answers `GET /sleep/<ms>` after that many
// milliseconds. Two short experiments run against it, each twice (without, then with):
//
// 1. A request budget across two sequential calls. A gateway serves each incoming request with
//    two upstream calls, A then B, and its caller gives up after `--budget` (1 s). A takes a
//    fifth of the budget, but three quarters of it for 1 in 4 requests and 1.2 budgets for 1 in 4;
//    B takes 0.4 budgets.
//    - without a budget: each call has its own timeout (2 budgets), so B still starts after a
//      slow A — after the caller has given up — and a medium A's B runs past the deadline;
//    - with a budget: `withDeadline(budget, …)` around both calls, through
//      `withBulkhead(fetch, registry)`: every call is aborted at the deadline (the second call
//      sees what the first left), and a call whose deadline has passed is refused before it is
//      sent.
// 2. Queue-delay shedding under a burst. A `Bulkhead({maxConcurrent: 4, queueTimeoutMs: 1000})`
//    before a 50 ms upstream (≈ 80 requests a second) gets a burst of `--burst` requests, then
//    100 a second for 2 s; its callers wait `--patience` (0.5 s) for an answer.
//    - FIFO, queue timeout only: a standing queue forms; every request waits about a second;
//    - CoDel + adaptive LIFO (`queueDelayTargetMs: 20`, `adaptiveLifo: true`): the newest waiter
//      is served first and the oldest are shed (BULKHEAD_SHED), earlier than a timeout.
//
// Standalone: `node examples/deadline_demo.mjs [--report-only] [--json]`; `make demo-node` runs
// it after the other phases (isolation_demo.mjs calls `deadlinePhase`).

import http from 'node:http'
import { fork } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const hullguard = require('../bindings-node')
const { Bulkhead, Registry, withBulkhead, withDeadline } = hullguard

// ----- the upstream (its own process) ---------------------------------------------------------

function serve() {
  const server = http.createServer((req, res) => {
    const m = /^\/sleep\/(\d+(?:\.\d+)?)/.exec(req.url ?? '')
    const done = () => {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.end('ok\n')
    }
    if (m) setTimeout(done, Number(m[1]))
    else done()
  })
  server.keepAliveTimeout = 10_000
  server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }))
  process.on('disconnect', () => process.exit(0))
}

async function startUpstream() {
  const child = fork(fileURLToPath(import.meta.url), ['--serve'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const [msg] = await once(child, 'message')
  return {
    url: (ms) => `http://127.0.0.1:${msg.port}/sleep/${ms}`,
    close: () => {
      child.disconnect()
      child.kill()
    },
  }
}

// ----- helpers ------------------------------------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const now = () => performance.now()

/** Nearest-rank percentile of a sorted array (0 for an empty one). */
function percentile(sorted, p) {
  if (sorted.length === 0) return 0
  const rank = Math.min(Math.max(Math.ceil((p / 100) * sorted.length), 1), sorted.length)
  return sorted[rank - 1]
}

function row(label, a, b, w = 26) {
  console.log(`  ${label.padEnd(34)}${String(a).padStart(w)}${String(b).padStart(w)}`)
}

// ----- 1. a request budget across two sequential calls ----------------------------------------

async function budgetRun(up, name, useBudget, o) {
  const run = { name, okInTime: 0, late: 0, failed: 0, bSentAfterDeadline: 0, bRefused: 0, workPastDeadlineMs: 0, latency: [] }
  const budget = o.budget * 1000
  const fetchFn = useBudget ? withBulkhead(fetch, new Registry({ maxConcurrent: 64, maxQueue: 64 })) : fetch
  // One call: 'ok', 'refused' (by hullguard, never sent) or 'failed'.
  const call = async (url, deadline) => {
    const start = now()
    try {
      const signal = AbortSignal.timeout(2 * budget) // the per-call timeout of both runs
      const r = await fetchFn(url, { signal })
      await r.text()
      return r.ok ? 'ok' : 'failed'
    } catch (e) {
      return e instanceof hullguard.BulkheadError ? 'refused' : 'failed'
    } finally {
      run.workPastDeadlineMs += Math.max(0, now() - Math.max(start, deadline))
    }
  }
  const aMs = (i) => ({ 0: 1.2, 1: 0.75 })[i % 4] ?? 0.2
  const request = async (i) => {
    const t0 = now()
    const deadline = t0 + budget
    const both = async () => {
      if ((await call(up.url(aMs(i) * budget), deadline)) !== 'ok') return false
      const after = now() >= deadline
      const got = await call(up.url(0.4 * budget), deadline)
      if (after && got === 'refused') run.bRefused++
      else if (after) run.bSentAfterDeadline++
      return got === 'ok'
    }
    const ok = useBudget ? await withDeadline(budget, both) : await both()
    const t1 = now()
    run.latency.push(t1 - t0)
    if (!ok) run.failed++
    else if (t1 > deadline) run.late++
    else run.okInTime++
  }
  await (await fetch(up.url(0))).text() // warm-up
  const tasks = []
  for (let i = 0; i < o.requests; i++) {
    tasks.push(request(i))
    await sleep(1000 / o.rate)
  }
  await Promise.all(tasks)
  run.latency.sort((a, b) => a - b)
  return run
}

async function budgetExperiment(up, o) {
  const b = o.budget * 1000
  console.log()
  console.log(
    `== deadlines: a ${o.budget} s request budget across two sequential calls (A: ${0.2 * b} ms, 1 in 4 ` +
      `${0.75 * b} ms, 1 in 4 ${1.2 * b} ms; then B: ${0.4 * b} ms), ${o.requests} requests at ${o.rate}/s ==`,
  )
  const without = await budgetRun(up, `per-call timeouts (${2 * o.budget} s)`, false, o)
  const withB = await budgetRun(up, `withDeadline(${b})`, true, o)
  row('', without.name, withB.name)
  row('answered within the budget', without.okInTime, withB.okInTime)
  row('answered after the caller left', without.late, withB.late)
  row('failed (timeout / refused)', without.failed, withB.failed)
  row('B sent after the deadline', without.bSentAfterDeadline, withB.bSentAfterDeadline)
  row('B refused before sending', without.bRefused, withB.bRefused)
  row('upstream work past deadlines', `${without.workPastDeadlineMs.toFixed(0)} ms`, `${withB.workPastDeadlineMs.toFixed(0)} ms`)
  const pp = (r) => `${percentile(r.latency, 50).toFixed(0)} / ${percentile(r.latency, 99).toFixed(0)} ms`
  row('request latency p50 / p99', pp(without), pp(withB))
  const slack = o.slack * 1000
  const checks = [
    ["no call sent after its request's deadline with the budget (some without)", without.bSentAfterDeadline > 0 && withB.bSentAfterDeadline === 0],
    [
      `with the budget every request ends by the deadline (p99 <= ${b} + ${slack} ms; without: p99 past it)`,
      percentile(withB.latency, 99) <= b + slack && percentile(without.latency, 99) > b + slack,
    ],
    ['upstream work past deadlines with the budget at most a fifth of without', withB.workPastDeadlineMs * 5 <= without.workPastDeadlineMs],
    ['as many requests answered within the budget (goodput not lower)', withB.okInTime >= without.okInTime],
  ]
  for (const [text, ok] of checks) console.log(`check: ${text}: ${ok ? 'PASS' : 'FAIL'}`)
  return { ok: checks.every(([, ok]) => ok), summary: { without, with: withB } }
}

// ----- 2. queue-delay shedding under a burst ---------------------------------------------------

async function burstRun(up, name, options, o) {
  const run = { name, ok: 0, timeout: 0, shed: 0, other: 0, latency: [], failureWait: [] }
  const bh = new Bulkhead({ maxConcurrent: 4, maxQueue: 1000, queueTimeoutMs: 1000, ...options })
  const url = up.url(50)
  for (let i = 0; i < 4; i++) await (await fetch(up.url(0))).text() // warm-up
  const request = async () => {
    const t0 = now()
    try {
      await bh.run(async () => {
        const r = await fetch(url)
        await r.text()
      })
      run.ok++
      run.latency.push(now() - t0)
    } catch (e) {
      if (e.code === 'BULKHEAD_SHED') {
        run.shed++
        run.failureWait.push(now() - t0)
      } else if (e.code === 'BULKHEAD_QUEUE_TIMEOUT') {
        run.timeout++
        run.failureWait.push(now() - t0)
      } else run.other++
    }
  }
  const tasks = []
  for (let i = 0; i < o.burst; i++) tasks.push(request())
  const steady = Math.floor(o.steadyRate * o.steadySeconds)
  for (let i = 0; i < steady; i++) {
    await sleep(1000 / o.steadyRate)
    tasks.push(request())
  }
  await Promise.all(tasks)
  run.latency.sort((a, b) => a - b)
  return { run, shedCounted: bh.stats().rejectedByReason.shed }
}

async function burstExperiment(up, o) {
  const steady = Math.floor(o.steadyRate * o.steadySeconds)
  const patience = o.patience * 1000
  console.log()
  console.log(
    `== queue-delay shedding: Bulkhead({maxConcurrent: 4, queueTimeoutMs: 1000}) before a 50 ms upstream (≈ 80/s); ` +
      `a burst of ${o.burst}, then ${o.steadyRate}/s for ${o.steadySeconds} s (${steady} more); callers wait ${patience} ms ==`,
  )
  const { run: fifo } = await burstRun(up, 'FIFO, queue timeout only', {}, o)
  const { run: codel, shedCounted } = await burstRun(
    up,
    'CoDel 20 ms + adaptive LIFO',
    { queueDelayTargetMs: 20, queueDelayIntervalMs: 100, adaptiveLifo: true },
    o,
  )
  const inTime = (r) => r.latency.filter((x) => x <= patience).length
  const mean = (xs) => (xs.length ? `${(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(0)} ms` : '-')
  const pp = (r) => `${percentile(r.latency, 50).toFixed(0)} / ${percentile(r.latency, 99).toFixed(0)} ms`
  row('', fifo.name, codel.name, 28)
  row('served', fifo.ok, codel.ok, 28)
  row(`served within ${patience} ms (goodput)`, inTime(fifo), inTime(codel), 28)
  row('served latency p50 / p99', pp(fifo), pp(codel), 28)
  row('timed out after waiting 1 s', fifo.timeout, codel.timeout, 28)
  row('shed (fail fast, retryable)', fifo.shed, codel.shed, 28)
  row('time until refused, mean', mean(fifo.failureWait), mean(codel.failureWait), 28)
  const f50 = fifo.latency.length ? percentile(fifo.latency, 50) : Infinity
  const c50 = codel.latency.length ? percentile(codel.latency, 50) : Infinity
  const checks = [
    ['CoDel shed the standing queue (shed > 0, counted in the stats; none without it)', codel.shed > 0 && fifo.shed === 0 && shedCounted === codel.shed],
    ['served latency at the median at least 3x lower with CoDel + LIFO', c50 * 3 <= f50],
    [`at least twice the requests served within ${patience} ms`, inTime(codel) >= 2 * inTime(fifo)],
  ]
  for (const [text, ok] of checks) console.log(`check: ${text}: ${ok ? 'PASS' : 'FAIL'}`)
  return { ok: checks.every(([, ok]) => ok), summary: { fifo, codel, codelStatsShed: shedCounted } }
}

// ----- the phase ------------------------------------------------------------------------------

/** Both experiments against one upstream process: `{ok, summary}`. */
export async function deadlinePhase(o) {
  const up = await startUpstream()
  try {
    const a = await budgetExperiment(up, o)
    const b = await burstExperiment(up, o)
    return { ok: a.ok && b.ok, summary: { budget: a.summary, burst: b.summary } }
  } finally {
    up.close()
  }
}

/** The phase's flags for `parseArgs` (`prefix` = `'deadline-'` when another demo embeds them). */
export function phaseFlags(prefix = '') {
  const f = (name, def) => [`${prefix}${name}`, { type: 'string', default: String(def) }]
  return Object.fromEntries([
    f('budget', 1.0),
    f('requests', 40),
    f('rate', 25),
    f('slack', 0.15),
    f('burst', 120),
    f('steady-rate', 100),
    f('steady-seconds', 2),
    f('patience', 0.5),
  ])
}

/** The phase's options from `parseArgs` values; exits 2 on a bad one. */
export function phaseOptions(values, prefix = '') {
  const num = (name, min) => {
    const v = Number(values[`${prefix}${name}`])
    if (!Number.isFinite(v) || v < min) {
      console.error(`--${prefix}${name} must be a number >= ${min}`)
      process.exit(2)
    }
    return v
  }
  return {
    budget: num('budget', 0.05),
    requests: Math.floor(num('requests', 4)),
    rate: num('rate', 1),
    slack: num('slack', 0),
    burst: Math.floor(num('burst', 1)),
    steadyRate: num('steady-rate', 1),
    steadySeconds: num('steady-seconds', 0.1),
    patience: num('patience', 0.01),
  }
}

// The entry point.
if (process.argv.includes('--serve')) {
  serve()
} else if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: { ...phaseFlags(), 'report-only': { type: 'boolean', default: false }, json: { type: 'boolean', default: false } },
  })
  const { ok, summary } = await deadlinePhase(phaseOptions(values))
  if (values.json) console.log(`RESULT ${JSON.stringify(summary)}`)
  process.exit(ok || values['report-only'] ? 0 : 1)
}
