#!/usr/bin/env node
// The Node benchmark (docs/design.md § Benchmarks): hullguard beside cockatiel, p-limit and
// async-sema, in one process, one run. `make bench` runs it (after `make node-build`); alone:
//   cd bench/node && npm ci && node --expose-gc bench.mjs    (REPS=n, default 9, at least 5)
//   node --expose-gc bench.mjs --smoke                       (or SMOKE=1: see below)
//
// Rows (ratio = hullguard / anchor, lower is better):
//
// | row | one op | anchor | target |
// |---|---|---|---|
// | uncontended run(fn) | `await bh.run(fn)` one at a time, limit 10, nothing else running | cockatiel `await bulkhead(10, 100).execute(fn)` | ≤ 1.5 |
// | 100 000 tasks through limit 10 | 100 000 `bh.run(fn)` started at once (99 990 queue), `await Promise.all` | async-sema `Sema(10)` acquire/try/finally release | ≤ 0.5 |
// |  |  | cockatiel `bulkhead(10, 100 000).execute(fn)` | ≤ 0.1 |
// | composed policy, uncontended (issue 8) | `await bh.run(fn)` on a bulkhead with `resilience: {breaker: {}}` (bulkhead + breaker: breaker check, admission, outcome recorded, release) | opossum `new CircuitBreaker(() => cockatiel bulkhead(10, 100).execute(fn), {timeout: false}).fire()` | (reported) |
//
// The composed rows also show cockatiel's own composition `wrap(bulkhead(10, 100),
// circuitBreaker(handleAll, {breaker: new ConsecutiveBreaker(5)}))`, opossum alone and the plain
// hullguard bulkhead (what the breaker adds). opossum runs with `timeout: false`: the composed
// hullguard policy has no call timeout either (opossum would otherwise arm a timer per call).
//
// "floor: fn + 2 no-op native calls" is the physical floor of any native limiter (issue 15
// item 6): the bare call and two crossings into the addon's cheapest export; the table "overhead
// above the floor" sets hullguard's cost above it beside each JS anchor's cost above the bare
// call.
//
// `fn` is `async () => {}` everywhere. p-limit (`pLimit(10)(fn)`) and async-sema are in every
// table for reference; "no limiter" (`await fn()` / `Promise.all` of the bare calls) shows the
// floor that every limiter pays. The task rows run hullguard as a user builds it, with the
// default 30 s queue deadline (the anchors have none; the deadlines share one timer per timeout
// value); the row "hullguard, no deadline" (`queueTimeoutMs: Infinity`) is the like-for-like
// reference.
//
// Method: every repetition (REPS, default 9, at least 5) runs every case (one tinybench `Bench`
// per case), in an order that alternates (forward, reversed) so drift hits both sides of a
// ratio alike. Each tinybench iteration is a batch (uncontended: 15 batches of 2 000 sequential
// ops; tasks: one 100 000-task run, after a full GC when run with --expose-gc) timed inside the
// task (`overriddenDuration`), so set-up and tinybench's own per-iteration overhead are never
// timed. A case's figure in a repetition is its median batch;
// a ratio is computed per repetition; the table prints the median ratio and the min–max, and
// each side's median per op. Limiters are built once per case and reused (idle between
// batches). A background check reads /proc/stat: when other processes took more than 5 % of the
// machine during the run, the table says the timed rows are unreliable.
//
// Smoke mode (`--smoke` or SMOKE=1; bench/smoke.sh, `make test`): every case and row through the
// same code and tables with 1 repetition, tiny batches (SMOKE_BATCH sequential ops, SMOKE_TASKS
// tasks) and a one-batch warm-up; it proves the script runs end to end in a second or two. Its
// numbers mean nothing. Every row must name known cases (checked before anything runs).
//
// Benchmarks are never unit tests: nothing here asserts a time.

import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { cpus } from 'node:os'
import { Bench } from 'tinybench'
import { bulkhead, circuitBreaker, ConsecutiveBreaker, handleAll, wrap } from 'cockatiel'
import CircuitBreaker from 'opossum'
import pLimit from 'p-limit'
import { Sema } from 'async-sema'
import { createLLMBulkhead } from 'async-bulkhead-llm'

const require = createRequire(import.meta.url)
const { Bulkhead } = require('../../bindings-node/index.js')
/** The addon's cheapest export (a no-argument napi function): the physical floor of a crossing. */
const { settledPending: nativeNoop } = require('../../bindings-node/native.js')

const args = process.argv.slice(2)
for (const a of args) {
  if (a !== '--smoke') {
    console.error(`usage: node --expose-gc bench.mjs [--smoke]   (REPS=n, SMOKE=1); unknown argument ${a}`)
    process.exit(2)
  }
}
const SMOKE = args.includes('--smoke') || (process.env.SMOKE ?? '') === '1'
const SMOKE_BATCH = 50
const SMOKE_TASKS = 200
const REPS = SMOKE ? 1 : Math.max(5, Number(process.env.REPS ?? 9))
const LIMIT = 10
const TASKS = SMOKE ? SMOKE_TASKS : 100_000
const UNCONTENDED_BATCH = SMOKE ? SMOKE_BATCH : 2_000
/** Batches per repetition of an uncontended case, and warm-up batches. */
const U_ITERATIONS = SMOKE ? 2 : 15
const U_WARMUP = SMOKE ? 1 : 20

const fn = async () => {}

// Gateway admission (issue 16): calls + tokens in one decision. async-bulkhead-llm estimates
// each request's reservation; its cheapest estimator (a constant) stands beside hullguard's
// `cost` option, the same 200 units a call against a budget that never binds.
const BUDGET = 1_000_000_000
const COST = 200
const LLM_REQUEST = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 100 }
const llmBulkhead = (maxQueue) =>
  createLLMBulkhead({
    model: 'bench',
    maxConcurrent: LIMIT,
    maxQueue,
    tokenBudget: { budget: BUDGET, estimator: () => ({ input: 100, maxOutput: 100 }) },
  })

// ----- the cases: each returns an async function running one batch, resolving its ms ----------

/** `n` sequential `await call()`, timed. */
function sequential(call, n) {
  return async () => {
    const t0 = performance.now()
    for (let i = 0; i < n; i++) await call()
    return performance.now() - t0
  }
}

/** `n` calls started at once, then `await Promise.all`, timed. */
function burst(call, n) {
  return async () => {
    const ps = new Array(n)
    const t0 = performance.now()
    for (let i = 0; i < n; i++) ps[i] = call()
    await Promise.all(ps)
    return performance.now() - t0
  }
}

function semaCall(sema) {
  return async () => {
    await sema.acquire()
    try {
      return await fn()
    } finally {
      sema.release()
    }
  }
}

const UNCONTENDED = {
  'hullguard run(fn)': () => {
    const bh = new Bulkhead({ maxConcurrent: LIMIT, maxQueue: 100 })
    return sequential(() => bh.run(fn), UNCONTENDED_BATCH)
  },
  'cockatiel execute(fn)': () => {
    const bh = bulkhead(LIMIT, 100)
    return sequential(() => bh.execute(fn), UNCONTENDED_BATCH)
  },
  'p-limit limit(fn)': () => {
    const limit = pLimit(LIMIT)
    return sequential(() => limit(fn), UNCONTENDED_BATCH)
  },
  'async-sema acquire/release': () => {
    const call = semaCall(new Sema(LIMIT))
    return sequential(call, UNCONTENDED_BATCH)
  },
  'no limiter': () => sequential(fn, UNCONTENDED_BATCH),
  // The physical floor of a native limiter: the bare call plus two no-op native calls (take,
  // release) and nothing else.
  'floor: fn + 2 no-op native calls': () =>
    sequential(() => {
      nativeNoop()
      const p = fn()
      nativeNoop()
      return p
    }, UNCONTENDED_BATCH),
  // The composed policy: bulkhead + circuit breaker, one call at a time.
  'hullguard run(fn) + breaker': () => {
    const bh = new Bulkhead({ maxConcurrent: LIMIT, maxQueue: 100, resilience: { breaker: {} } })
    return sequential(() => bh.run(fn), UNCONTENDED_BATCH)
  },
  'opossum(cockatiel bulkhead)': () => {
    const bh = bulkhead(LIMIT, 100)
    const breaker = new CircuitBreaker(() => bh.execute(fn), { timeout: false })
    return sequential(() => breaker.fire(), UNCONTENDED_BATCH)
  },
  'cockatiel wrap(bulkhead, breaker)': () => {
    const policy = wrap(bulkhead(LIMIT, 100), circuitBreaker(handleAll, { halfOpenAfter: 30_000, breaker: new ConsecutiveBreaker(5) }))
    return sequential(() => policy.execute(fn), UNCONTENDED_BATCH)
  },
  'opossum alone': () => {
    const breaker = new CircuitBreaker(fn, { timeout: false })
    return sequential(() => breaker.fire(), UNCONTENDED_BATCH)
  },
  // Events (issue 16): admission events on, one `admit` listener that does nothing; beside it
  // what one call of such a listener costs JavaScript itself.
  'hullguard run(fn), admit listener': () => {
    const bh = new Bulkhead({ maxConcurrent: LIMIT, maxQueue: 100, events: true })
    bh.on('admit', () => {})
    return sequential(() => bh.run(fn), UNCONTENDED_BATCH)
  },
  'fn + one JS listener call': () => {
    const listener = (event) => event
    const event = { kind: 'admit' }
    return sequential(() => {
      listener(event)
      return fn()
    }, UNCONTENDED_BATCH)
  },
  'hullguard run(fn, {cost})': () => {
    const bh = new Bulkhead({ maxConcurrent: LIMIT, maxQueue: 100, budget: BUDGET })
    const opts = { cost: COST }
    return sequential(() => bh.run(fn, opts), UNCONTENDED_BATCH)
  },
  'async-bulkhead-llm run(req, fn)': () => {
    const bh = llmBulkhead(100)
    return sequential(() => bh.run(LLM_REQUEST, fn), UNCONTENDED_BATCH)
  },
}

const TASK_CASES = {
  // The headline: hullguard as a user builds it (the default 30 s queue deadline).
  'hullguard run(fn)': () => {
    const bh = new Bulkhead({ maxConcurrent: LIMIT, maxQueue: TASKS })
    return burst(() => bh.run(fn), TASKS)
  },
  'hullguard, no deadline': () => {
    const bh = new Bulkhead({ maxConcurrent: LIMIT, maxQueue: TASKS, queueTimeoutMs: Infinity })
    return burst(() => bh.run(fn), TASKS)
  },
  'cockatiel execute(fn)': () => {
    const bh = bulkhead(LIMIT, TASKS)
    return burst(() => bh.execute(fn), TASKS)
  },
  'p-limit limit(fn)': () => {
    const limit = pLimit(LIMIT)
    return burst(() => limit(fn), TASKS)
  },
  'async-sema acquire/release': () => {
    const call = semaCall(new Sema(LIMIT))
    return burst(call, TASKS)
  },
  'no limiter': () => burst(fn, TASKS),
  'hullguard run(fn, {cost})': () => {
    const bh = new Bulkhead({ maxConcurrent: LIMIT, maxQueue: TASKS, budget: BUDGET })
    const opts = { cost: COST }
    return burst(() => bh.run(fn, opts), TASKS)
  },
  'async-bulkhead-llm run(req, fn)': () => {
    const bh = llmBulkhead(TASKS)
    return burst(() => bh.run(LLM_REQUEST, fn), TASKS)
  },
}

/** [label, ours, anchor, target ratio or null]. */
const ROWS = [
  ['uncontended run(fn)', 'u', 'hullguard run(fn)', 'cockatiel execute(fn)', 1.5],
  ['uncontended run(fn)', 'u', 'hullguard run(fn)', 'p-limit limit(fn)', null],
  ['uncontended run(fn)', 'u', 'hullguard run(fn)', 'async-sema acquire/release', null],
  ['uncontended run(fn)', 'u', 'hullguard run(fn)', 'floor: fn + 2 no-op native calls', null],
  ['100 000 tasks, limit 10', 't', 'hullguard run(fn)', 'async-sema acquire/release', 0.5],
  ['100 000 tasks, limit 10', 't', 'hullguard run(fn)', 'cockatiel execute(fn)', 0.1],
  ['100 000 tasks, limit 10', 't', 'hullguard run(fn)', 'p-limit limit(fn)', null],
  ['… hullguard, no deadline', 't', 'hullguard, no deadline', 'async-sema acquire/release', null],
  ['composed: bulkhead + breaker', 'u', 'hullguard run(fn) + breaker', 'opossum(cockatiel bulkhead)', null],
  ['composed: bulkhead + breaker', 'u', 'hullguard run(fn) + breaker', 'cockatiel wrap(bulkhead, breaker)', null],
  ['composed: bulkhead + breaker', 'u', 'hullguard run(fn) + breaker', 'opossum alone', null],
  ['composed: what the breaker adds', 'u', 'hullguard run(fn) + breaker', 'hullguard run(fn)', null],
  ['gateway: calls + tokens', 'u', 'hullguard run(fn, {cost})', 'async-bulkhead-llm run(req, fn)', 0.5],
  ['gateway: 100 000 tasks, limit 10', 't', 'hullguard run(fn, {cost})', 'async-bulkhead-llm run(req, fn)', 0.5],
  ['gateway: what the budget adds', 'u', 'hullguard run(fn, {cost})', 'hullguard run(fn)', null],
  ['events: an admit listener attached', 'u', 'hullguard run(fn), admit listener', 'hullguard run(fn)', null],
  ['events: a listener call, in JS', 'u', 'fn + one JS listener call', 'no limiter', null],
]

/** Every row names a group and two known cases of it: a gap fails here, before anything runs. */
function checkRows() {
  const groups = { u: UNCONTENDED, t: TASK_CASES }
  const gaps = []
  for (const [label, group, ours, anchor] of ROWS) {
    if (!(group in groups)) gaps.push(`row '${label}': unknown group '${group}'`)
    else for (const c of [ours, anchor]) if (!(c in groups[group])) gaps.push(`row '${label}': no case '${c}' in group '${group}'`)
  }
  if (gaps.length > 0) {
    console.error(`bench.mjs: the row table has gaps:\n  ${gaps.join('\n  ')}`)
    process.exit(1)
  }
}

// ----- cost curves (issue 15 item 7) ---------------------------------------------------------

const DEPTHS = SMOKE ? [10, 100] : [10, 1_000, 100_000]
const DEPTH_OPS = SMOKE ? 200 : 20_000
const DEPTH_REPS = SMOKE ? 1 : 5

/**
 * One op at queue depth `depth`, in ns (median of DEPTH_REPS runs of DEPTH_OPS ops): the single
 * permit held and `depth` waiters queued; an op releases it, awaits the head's grant (now the
 * holder) and queues a new waiter at the tail, so the depth stays `depth`. `lim` adapts the
 * limiter: `{hold(), take(), give(held)}`.
 */
async function depthCycle(make, depth) {
  const runs = []
  for (let r = 0; r < DEPTH_REPS; r++) {
    const lim = make(depth)
    let held = await lim.take()
    const q = new Array(depth)
    for (let i = 0; i < depth; i++) q[i] = lim.take()
    let head = 0
    const cycle = async (ops) => {
      for (let i = 0; i < ops; i++) {
        lim.give(held)
        held = await q[head]
        q[head] = lim.take()
        head = head + 1 === depth ? 0 : head + 1
      }
    }
    await cycle(Math.min(DEPTH_OPS, 1_000)) // warm-up
    globalThis.gc?.()
    const t0 = performance.now()
    await cycle(DEPTH_OPS)
    runs.push(((performance.now() - t0) * 1e6) / DEPTH_OPS)
    // Every waiter granted and released in turn: the limiter ends idle.
    for (let k = 0; k < depth; k++) {
      lim.give(held)
      held = await q[(head + k) % depth]
    }
    lim.give(held)
  }
  return median(runs)
}

const DEPTH_CASES = {
  'hullguard acquire/release': (depth) => {
    const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: depth + 1 })
    return { take: () => bh.acquire(), give: (p) => p.release() }
  },
  'async-sema acquire/release': () => {
    const sema = new Sema(1)
    return { take: () => sema.acquire(), give: () => sema.release() }
  },
}

/** Runs the cost curves; returns the lines of their table (printed after the main tables). */
async function costCurves() {
  const lines = []
  const console = { log: (line = '') => lines.push(line) }
  console.log()
  console.log(
    `== cost curve: one op at queue depth D (limit 1, D waiters queued; op = release + the head's grant awaited + a new waiter; median of ${DEPTH_REPS} × ${DEPTH_OPS} ops) ==`,
  )
  const names = Object.keys(DEPTH_CASES)
  console.log(`  ${'depth'.padStart(8)} ${names.map((n) => n.padStart(28)).join(' ')} ${'ratio'.padStart(7)}`)
  const first = {}
  for (const depth of DEPTHS) {
    const ns = []
    for (const name of names) ns.push(await depthCycle(DEPTH_CASES[name], depth))
    names.forEach((n, i) => (first[n] ??= ns[i]))
    console.log(`  ${String(depth).padStart(8)} ${ns.map((v) => fmtNs(v).padStart(28)).join(' ')} ${(ns[0] / ns[1]).toFixed(3).padStart(7)}`)
    if (depth === DEPTHS[DEPTHS.length - 1]) {
      const flat = names.map((n, i) => `${n} ${(ns[i] / first[n]).toFixed(2)}×`).join(', ')
      console.log(`  depth ${depth} / depth ${DEPTHS[0]} (flat = 1.00): ${flat}`)
    }
  }
  console.log('  threads: a Node bulkhead belongs to one isolate (one thread): there is no 2-thread row in this layer.')
  return lines
}

// ----- running --------------------------------------------------------------------------------

/** CPU jiffies: [machine busy, machine total] from /proc/stat, or null. */
function machineTimes() {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
    const idle = f[3] + (f[4] || 0)
    const total = f.reduce((a, b) => a + b, 0)
    return [total - idle, total]
  } catch {
    return null
  }
}

async function repetition(rep, makers) {
  // Every case of both groups, in an order that alternates between repetitions.
  const names = []
  for (const [group, cases] of Object.entries(makers)) for (const name of Object.keys(cases)) names.push([group, name])
  if (rep % 2 === 1) names.reverse()
  // One tinybench run per case, in this repetition's order: a case's batches run together.
  const out = {}
  for (const [group, name] of names) {
    const iterations = group === 'u' ? U_ITERATIONS : 1
    const b = new Bench({ time: 0, iterations, warmup: false, throws: true })
    const run = makers[group][name].runner
    b.add(name, async () => ({ overriddenDuration: await run() }))
    globalThis.gc?.()
    await b.run()
    const r = b.tasks[0].result
    const ops = group === 'u' ? UNCONTENDED_BATCH : TASKS
    out[`${group}:${name}`] = (r.latency.p50 * 1e6) / ops // ns per op
  }
  return out
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

function fmtNs(ns) {
  return ns >= 1000 ? `${(ns / 1000).toFixed(2)} µs` : `${ns.toFixed(0)} ns`
}

async function main() {
  checkRows()
  const makers = { u: {}, t: {} }
  for (const [name, make] of Object.entries(UNCONTENDED)) makers.u[name] = { runner: make() }
  for (const [name, make] of Object.entries(TASK_CASES)) makers.t[name] = { runner: make() }

  if (SMOKE) console.log('SMOKE RUN (--smoke / SMOKE=1): 1 repetition of tiny batches; the numbers below mean nothing')
  console.log(
    `hullguard Node benchmark (docs/design.md § Benchmarks): node ${process.version}, ${cpus()[0]?.model ?? 'cpu'} × ${cpus().length}`,
  )
  const version = (pkg) =>
    JSON.parse(readFileSync(new URL(`node_modules/${pkg}/package.json`, import.meta.url), 'utf8')).version
  console.log(
    `  ${['cockatiel', 'opossum', 'p-limit', 'async-sema', 'async-bulkhead-llm', 'tinybench'].map((p) => `${p} ${version(p)}`).join(', ')} (bench/node/package-lock.json)`,
  )
  console.log(
    `  ${REPS} interleaved repetitions; uncontended: batches of ${UNCONTENDED_BATCH} sequential ops; tasks: ${TASKS} at once through limit ${LIMIT}`,
  )

  // Warm-up: every case a few batches (JIT, inline caches, the addon's first calls).
  for (const group of Object.keys(makers)) {
    for (const c of Object.values(makers[group])) for (let i = 0; i < (group === 'u' ? U_WARMUP : 1); i++) await c.runner()
  }

  const t0 = machineTimes()
  const c0 = process.cpuUsage()
  const w0 = performance.now()
  const reps = []
  for (let rep = 0; rep < REPS; rep++) {
    reps.push(await repetition(rep, makers))
    process.stdout.write(`  repetition ${rep + 1}/${REPS} done\r`)
  }
  process.stdout.write(' '.repeat(40) + '\r')
  const curves = await costCurves()
  const wallS = (performance.now() - w0) / 1000
  const c1 = process.cpuUsage(c0)
  const t1 = machineTimes()

  const row = (a, b, c, d, e, f, g) =>
    console.log(
      `  ${a.padEnd(31)} ${b.padEnd(33)} ${c.padStart(7)} ${d.padStart(13)} ${e.padStart(10)} ${f.padStart(10)}  ${g}`,
    )
  console.log()
  console.log('== ratios: hullguard / anchor (median of the per-repetition ratios, min–max; lower is better) ==')
  row('row', 'anchor', 'ratio', 'min–max', 'hullguard', 'anchor', 'target')
  for (const [label, group, ours, anchor, target] of ROWS) {
    const ratios = reps.map((r) => r[`${group}:${ours}`] / r[`${group}:${anchor}`])
    const m = median(ratios)
    const verdict = target === null ? '(reference)' : `≤ ${target}: ${m <= target ? 'met' : 'MISSED'}`
    row(
      label,
      anchor,
      m.toFixed(3),
      `${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}`,
      fmtNs(median(reps.map((r) => r[`${group}:${ours}`]))),
      fmtNs(median(reps.map((r) => r[`${group}:${anchor}`]))),
      verdict,
    )
  }

  // Issue 15 item 6: every ratio read against what is possible. hullguard's floor is the bare
  // call plus two native crossings; a pure-JS anchor's floor is the bare call.
  console.log()
  console.log('== uncontended overhead above the floor (median per op; floor: hullguard = fn + 2 no-op native calls, JS anchors = fn) ==')
  const med = (name) => median(reps.map((r) => r[`u:${name}`]))
  const floorNative = med('floor: fn + 2 no-op native calls')
  const floorJs = med('no limiter')
  console.log(`  floors: fn ${fmtNs(floorJs)}, fn + 2 no-op native calls ${fmtNs(floorNative)}`)
  for (const [name, floor] of [
    ['hullguard run(fn)', floorNative],
    ['cockatiel execute(fn)', floorJs],
    ['async-sema acquire/release', floorJs],
    ['p-limit limit(fn)', floorJs],
  ]) {
    console.log(`    ${name.padEnd(30)} ${fmtNs(med(name) - floor).padStart(10)} above its floor`)
  }

  // Issue 16: what one delivered event costs hullguard beside what one listener call costs JS.
  console.log(
    `  events: ${fmtNs(med('hullguard run(fn), admit listener') - med('hullguard run(fn)'))} per delivered event` +
      ` (events on, one admit listener); one JS listener call: ${fmtNs(med('fn + one JS listener call') - floorJs)}`,
  )

  console.log()
  console.log('== per op (median over repetitions) ==')
  for (const [group, title] of [
    ['u', 'uncontended, one op'],
    ['t', `${TASKS} tasks through limit ${LIMIT}, per task`],
  ]) {
    console.log(`  ${title}`)
    for (const name of Object.keys(makers[group])) {
      const v = reps.map((r) => r[`${group}:${name}`])
      console.log(
        `    ${name.padEnd(30)} ${fmtNs(median(v)).padStart(10)}   (min ${fmtNs(Math.min(...v))}, max ${fmtNs(Math.max(...v))})`,
      )
    }
  }

  for (const line of curves) console.log(line)

  if (t0 !== null && t1 !== null) {
    const hz = 100 // USER_HZ
    const busy = (t1[0] - t0[0]) / hz
    const total = (t1[1] - t0[1]) / hz
    const own = (c1.user + c1.system) / 1e6
    const others = total > 0 ? Math.max(0, (busy - own) / total) : 0
    console.log()
    console.log(
      `background: other processes used ${(others * 100).toFixed(1)} % of the machine during the run (${wallS.toFixed(1)} s)` +
        (others > 0.05 ? ' — above 5 %: the timed rows are unreliable' : ''),
    )
  }
}

await main()
