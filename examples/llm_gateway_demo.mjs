#!/usr/bin/env node
// The LLM-gateway phase of `make demo-node` (docs/design.md §13), the Node twin of
// examples/llm_gateway_demo.py: gateway admission on a real streaming LLM API, with fetch.
//
// The fake provider is the Python demo's (examples/fake_llm_provider.py, standard library only,
// a process of its own on 127.0.0.1): it streams tokens as server-sent events at a fixed rate
// per stream, bills usage, and enforces a concurrent-token ceiling (a request occupies
// `input_tokens + max_tokens` from its arrival until its stream ends; one that would pass the
// ceiling is answered 429). One client sends two classes on an open-loop schedule: interactive
// (short prompts, short answers, 20 a second) and batch (long prompts, long answers, a flood of
// 40 a second). The same schedule runs four times:
//
// 1. no bulkhead: the global `fetch`;
// 2. count-only: `withBulkhead(fetch, new Registry({maxConcurrent: 16, ...}))` (bindings-node/
//    http.js): calls are capped, tokens are not, and interactive calls queue FIFO behind batch;
// 3. calls + tokens: `withBulkhead(fetch, bh, {admission})` over one `Bulkhead` with a
//    `budget` equal to the provider's ceiling and two classes (interactive: priority 10, floors
//    and a priority reserve; batch: the shared rest; `shed`). The `admission` function reads
//    each request as a gateway would: `cost` = the prompt's UTF-8 bytes (an upper bound of the
//    provider's count) + `max_tokens` from the JSON body, the class from the
//    `x-admission-class` header, and that class's queue timeout. The stream reports the real
//    input count at `message_start` through `response.permit.reportUsage(used, remaining)` (the
//    hold drops to what the provider counts), reports while streaming, and settles with
//    `response.permit.release({usage})` on the bill event, before the body ends (the unused
//    rest of `max_tokens` refunded);
// 4. calls + tokens without refunds: run 3's bulkhead and costs, each call holding its whole
//    reservation until its body ends (the wrapper's own release).
//
// Run 3 never sees a provider 429, by construction: the budget equals the ceiling and a call
// never holds less than the provider counts for it (the Python module's docs give the argument).
//
// Standalone: `node examples/llm_gateway_demo.mjs [--seconds 3] [--json] [--report-only]`;
// `make demo-node` runs it after the isolation demo (isolation_demo.mjs imports `gatewayPhase`).

import { spawn } from 'node:child_process'
import { performance } from 'node:perf_hooks'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const HULLGUARD = new URL('../bindings-node/index.mjs', import.meta.url).href
const PROVIDER = fileURLToPath(new URL('./fake_llm_provider.py', import.meta.url))
const PYTHON = process.env.PYTHON ?? 'python3'
// The provider's prefill: a fixed 20 ms, then 40,000 input tokens a second.
const TTFT_MS = 20
const PREFILL_TPS = 40000
const CLASSES = ['interactive', 'batch']
const MODES = ['none', 'count', 'tokens', 'tokensNoRefund']
const TITLES = {
  none: 'no bulkhead',
  count: 'count-only bulkhead',
  tokens: 'calls+tokens, refunds',
  tokensNoRefund: 'calls+tokens, no refund',
}
const FILLER = ['alpha', 'bravo', 'delta', 'gamma', 'kappa', 'omega', 'sigma', 'theta']

// ----- the workload (the same schedule for every run) ------------------------------------------

function shapes(o) {
  return {
    interactive: { promptBytes: 240, maxTokens: 200, answerLo: 30, answerHi: 90, everyMs: o.interactiveEveryMs },
    batch: { promptBytes: 8000, maxTokens: 800, answerLo: 300, answerHi: 700, everyMs: o.batchEveryMs },
  }
}

/** The Python demo's prompt, byte for byte: its hint asks for an answer in the class's range. */
function promptFor(cls, n, s) {
  const answer = s.answerLo + ((n * 379) % (s.answerHi - s.answerLo + 1))
  const head = `[${cls} #${n}] (answer in about ${answer} tokens) `
  const words = Math.floor((s.promptBytes - head.length) / 6)
  const parts = []
  for (let i = 0; i < words; i++) parts.push(FILLER[(n + i) % FILLER.length])
  return head + parts.join(' ')
}

function schedule(o) {
  const at = []
  for (const [cls, s] of Object.entries(shapes(o))) {
    for (let n = 0; n * s.everyMs < o.seconds * 1000; n++) at.push([n * s.everyMs, cls, n])
  }
  return at.sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
}

// ----- the provider process --------------------------------------------------------------------

async function startProvider(o) {
  const args = [
    PROVIDER,
    `--ceiling=${o.ceiling}`,
    `--tokens-per-second=${o.tokensPerSecond}`,
    `--chunk-ms=${o.chunkMs}`,
    `--ttft-ms=${TTFT_MS}`,
    `--prefill-tps=${PREFILL_TPS}`,
  ]
  const proc = spawn(PYTHON, args, { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: proc.stdout })
  const first = await new Promise((resolve, reject) => {
    proc.once('error', reject)
    proc.once('exit', (code) => reject(new Error(`the fake provider exited (${code}) before it listened`)))
    lines.once('line', resolve)
  })
  const m = /^PORT (\d+)$/.exec(first)
  if (!m) {
    proc.kill()
    throw new Error(`the fake provider failed to start: ${first}`)
  }
  const base = `http://127.0.0.1:${m[1]}`
  return {
    proc,
    url: `${base}/v1/messages`,
    async control(what) {
      const r = await fetch(`${base}/__${what}`)
      if (!r.ok) throw new Error(`provider /__${what}: HTTP ${r.status}`)
      return r.json()
    },
    async close() {
      lines.close()
      proc.removeAllListeners('exit')
      const exited = new Promise((resolve) => proc.once('exit', resolve))
      proc.stdin.end() // it serves until its stdin closes
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000)
      await exited
      clearTimeout(timer)
    },
  }
}

// ----- the client (the gateway) ----------------------------------------------------------------

class ProviderOverloaded extends Error {
  constructor() {
    super('the provider answered 429 (its concurrent-token ceiling)')
  }
}

/**
 * One streaming request through `fetchFn`; with `permit` (a refunding run) its usage is reported
 * as it streams: at `message_start` the hold drops to what the provider counts (`used` = the
 * real input count, `remaining` = `max_tokens`), then each chunk moves tokens from `remaining`
 * to `used` (the hold stays). Rejects with `ProviderOverloaded` on 429.
 */
async function streamCall(fetchFn, url, cls, prompt, maxTokens, live, settle) {
  const res = await fetchFn(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-admission-class': cls },
    body: JSON.stringify({ prompt, max_tokens: maxTokens }),
  })
  // withBulkhead's permit (runs 3 and 4), when this call settles its usage itself (run 3).
  const permit = settle ? res.permit : null
  if (res.status === 429 || !res.ok) {
    await res.arrayBuffer()
    if (res.status === 429) throw new ProviderOverloaded()
    throw new Error(`HTTP ${res.status}`)
  }
  const out = { input: 0, output: 0 }
  const decoder = new TextDecoder()
  let buf = ''
  let event = ''
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk, { stream: true })
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i)
      buf = buf.slice(i + 1)
      if (line.startsWith('event: ')) {
        event = line.slice(7)
        continue
      }
      if (!line.startsWith('data: ')) continue
      const data = JSON.parse(line.slice(6))
      if (event === 'message_start') {
        out.input = data.usage.input_tokens
        if (permit) permit.reportUsage(out.input, maxTokens)
      } else if (event === 'content_block_delta') {
        out.output += data.tokens
        if (performance.now() <= live.windowEnd) live.windowTokens[cls] += data.tokens
        if (permit) permit.reportUsage(out.input + out.output, maxTokens - out.output)
      } else if (event === 'message_delta') {
        out.output = data.usage.output_tokens
        // The bill: settle with it now, before the body ends (the unused rest of `max_tokens`
        // is refunded; the body's end then releases nothing more).
        if (permit) permit.release({ usage: out.input + out.output })
      }
    }
  }
  return out
}

function gatewayConfig(o) {
  return {
    maxConcurrent: o.maxConcurrent,
    maxQueue: o.maxQueue,
    queueTimeoutMs: o.batchTimeoutMs,
    budget: o.ceiling,
    classes: [
      { name: 'interactive', priority: 10, floor: 6, budgetFloor: 3000 },
      { name: 'batch', priority: 0 },
    ],
    reserve: { permits: 4, budget: 2000, minPriority: 10 },
    shed: true,
  }
}

const perClass = (f) => Object.fromEntries(CLASSES.map((c) => [c, f(c)]))

function percentile(sorted, p) {
  if (sorted.length === 0) return 0
  const rank = Math.min(Math.max(Math.ceil((p / 100) * sorted.length), 1), sorted.length)
  return sorted[rank - 1]
}

async function runOnce(mode, o, provider, hg) {
  const live = {
    windowEnd: 0,
    sent: perClass(() => 0),
    ok: perClass(() => 0),
    provider429: perClass(() => 0),
    windowTokens: perClass(() => 0),
    latencies: perClass(() => []),
    refused: perClass(() => ({})),
    errors: {},
  }
  const shape = shapes(o)
  const timeoutMs = { interactive: o.interactiveTimeoutMs, batch: o.batchTimeoutMs }
  let bh = null
  let registry = null
  let fetchFn = fetch
  if (mode === 'count') {
    // One queue timeout for both classes: withBulkhead takes no per-request options.
    registry = new hg.Registry({ maxConcurrent: o.countLimit, maxQueue: o.maxQueue, queueTimeoutMs: o.batchTimeoutMs })
    fetchFn = hg.withBulkhead(fetch, registry)
  } else if (mode !== 'none') {
    bh = new hg.Bulkhead(gatewayConfig(o))
    // The gateway's admission of one request, read from the request itself.
    const admission = (_url, init) => {
      const { prompt, max_tokens: maxTokens } = JSON.parse(init.body)
      const cls = init.headers['x-admission-class']
      // An upper bound of what the provider will count (its tokenizer, like any byte-level
      // one, never emits more tokens than the prompt has bytes).
      return { cost: Buffer.byteLength(prompt) + maxTokens, admissionClass: cls, queueTimeoutMs: timeoutMs[cls] }
    }
    fetchFn = hg.withBulkhead(fetch, bh, { admission })
  }
  const refunds = mode === 'tokens'
  const budgetSamples = []

  async function request(cls, n, sentAt) {
    const s = shape[cls]
    const prompt = promptFor(cls, n, s)
    try {
      await streamCall(fetchFn, provider.url, cls, prompt, s.maxTokens, live, refunds)
      live.ok[cls] += 1
      live.latencies[cls].push((performance.now() - sentAt) / 1000)
    } catch (e) {
      if (e instanceof hg.BulkheadError) {
        live.refused[cls][e.reason] = (live.refused[cls][e.reason] ?? 0) + 1
      } else if (e instanceof ProviderOverloaded) {
        live.provider429[cls] += 1
      } else {
        const name = e?.cause?.code ?? e?.name ?? 'Error'
        live.errors[name] = (live.errors[name] ?? 0) + 1
      }
    }
  }

  console.log(`\n== LLM gateway: ${TITLES[mode]} ==`)
  await provider.control('reset')
  const started = performance.now()
  live.windowEnd = started + o.seconds * 1000
  let second = 1
  const ticker = setInterval(() => {
    const phase = second <= o.seconds ? 'sending ' : 'settling'
    let budget = ''
    if (bh !== null) {
      const b = bh.stats().budget
      budget = ` | budget ${String(b.inUse).padStart(5)}/${b.limit} in use`
    }
    const parts = CLASSES.map(
      (c) =>
        `${c} ${String(live.sent[c]).padStart(3)} sent ${String(live.ok[c]).padStart(3)} ok ` +
        `${String(live.provider429[c]).padStart(3)} 429 ` +
        `${String(Object.values(live.refused[c]).reduce((a, b) => a + b, 0)).padStart(3)} refused`,
    ).join(' | ')
    console.log(`  [${TITLES[mode].padEnd(23)}] ${String(second).padStart(2)}s ${phase} | ${parts}${budget}`)
    second += 1
  }, 1000)
  const sampler =
    bh === null
      ? null
      : setInterval(() => {
          if (performance.now() > live.windowEnd) return
          const b = bh.stats().budget
          budgetSamples.push(b.inUse / b.limit)
        }, 20)
  const tasks = []
  for (const [offsetMs, cls, n] of schedule(o)) {
    const at = started + offsetMs
    const delay = at - performance.now()
    if (delay > 0) await new Promise((r) => setTimeout(r, delay))
    live.sent[cls] += 1
    tasks.push(request(cls, n, at))
  }
  const untilWindowEnd = live.windowEnd - performance.now()
  if (untilWindowEnd > 0) await new Promise((r) => setTimeout(r, untilWindowEnd))
  const providerWindow = await provider.control('stats')
  await Promise.all(tasks)
  const wall = (performance.now() - started) / 1000
  const providerTotal = await provider.control('stats')
  clearInterval(ticker)
  if (sampler) clearInterval(sampler)
  const stats = bh ? bh.stats() : registry ? Object.values(registry.stats())[0] : null
  return {
    mode,
    requests: { ...live.sent },
    ok: { ...live.ok },
    pct: perClass((c) => {
      const sorted = [...live.latencies[c]].sort((a, b) => a - b)
      return [percentile(sorted, 50), percentile(sorted, 99)]
    }),
    provider429: { ...live.provider429 },
    refused: live.refused,
    errors: live.errors,
    tokensPerS: perClass((c) => live.windowTokens[c] / o.seconds),
    providerWindow,
    providerTotal,
    budgetUtil: budgetSamples.length ? budgetSamples.reduce((a, b) => a + b, 0) / budgetSamples.length : null,
    stats,
    wall,
  }
}

// ----- output and checks -----------------------------------------------------------------------

const msStr = (s) => `${(s * 1000).toFixed(0)} ms`
const rateStr = (ok, total) => (total === 0 ? '-' : `${((ok * 100) / total).toFixed(0)} % (${ok}/${total})`)
const pctStr = (x) => (x === null || x === undefined ? '-' : `${(x * 100).toFixed(0)} %`)
const sumOf = (obj) => Object.values(obj).reduce((a, b) => a + b, 0)

function row(label, values) {
  console.log(`  ${label.padEnd(40)}${values.map((v) => String(v).padStart(24)).join('')}`)
}

function printTable(runs, o) {
  console.log('\n== LLM gateway: side by side ==')
  row('', runs.map((r) => TITLES[r.mode]))
  for (const c of CLASSES) {
    const s = shapes(o)[c]
    console.log(
      `  ${c} (prompt ~${s.promptBytes / 4} tokens, answer ${s.answerLo}-${s.answerHi} of max_tokens ` +
        `${s.maxTokens}, one every ${s.everyMs} ms)`,
    )
    row('  requests', runs.map((r) => r.requests[c]))
    row('  success rate', runs.map((r) => rateStr(r.ok[c], r.requests[c])))
    row('  p50 latency (ok, to last token)', runs.map((r) => msStr(r.pct[c][0])))
    row('  p99 latency (ok, to last token)', runs.map((r) => msStr(r.pct[c][1])))
    row('  429s from the provider', runs.map((r) => r.provider429[c]))
    const reasons = [...new Set(runs.flatMap((r) => Object.keys(r.refused[c])))].sort()
    if (reasons.length === 0) row('  refused by the bulkhead', runs.map(() => 0))
    for (const reason of reasons) row(`  refused by the bulkhead: ${reason}`, runs.map((r) => r.refused[c][reason] ?? 0))
    row('  tokens/s delivered (output)', runs.map((r) => r.tokensPerS[c].toFixed(0)))
  }
  console.log('  all classes')
  row('  tokens/s delivered (output)', runs.map((r) => sumOf(r.tokensPerS).toFixed(0)))
  row('  billed by the provider (in+out)', runs.map((r) => r.providerTotal.billed_input + r.providerTotal.billed_output))
  row(
    '  provider ceiling use, mean / peak',
    runs.map(
      (r) => `${pctStr(r.providerWindow.occupancy_mean / o.ceiling)} / ${pctStr(r.providerWindow.occupancy_peak / o.ceiling)}`,
    ),
  )
  row('  client budget utilisation (mean)', runs.map((r) => pctStr(r.budgetUtil)))
  row(
    '  budget refunded / consumed',
    runs.map((r) => (r.stats?.budget ? `${r.stats.budget.refundedTotal} / ${r.stats.budget.consumedTotal}` : '-')),
  )
  for (const e of [...new Set(runs.flatMap((r) => Object.keys(r.errors)))].sort()) {
    row(`  transport errors: ${e}`, runs.map((r) => r.errors[e] ?? 0))
  }
  row('run time (sending + settling)', runs.map((r) => `${r.wall.toFixed(1)} s`))
}

/** The slowest interactive call on an idle provider: prefill, then its longest answer. */
function idleLatency(o) {
  const s = shapes(o).interactive
  const chunk = Math.max(1, Math.round((o.tokensPerSecond * o.chunkMs) / 1000))
  const chunks = Math.ceil(s.answerHi / chunk)
  return TTFT_MS / 1000 + s.promptBytes / 4 / PREFILL_TPS + (chunks * o.chunkMs) / 1000
}

function checks(runs, o) {
  const gw = runs.tokens
  const noRefund = runs.tokensNoRefund
  const bound = 2 * idleLatency(o)
  const p99 = gw.pct.interactive[1]
  const iOk = gw.ok.interactive
  const iTotal = gw.requests.interactive
  const gained = sumOf(gw.tokensPerS)
  const base = sumOf(noRefund.tokensPerS)
  return [
    [
      'interactiveP99',
      `calls+tokens: interactive p99 ${msStr(p99)} ≤ ${msStr(bound)} (twice the slowest idle answer) with ${iOk}/${iTotal} succeeded`,
      p99 <= bound && iOk >= 0.99 * iTotal,
    ],
    [
      'zero429',
      `calls+tokens: zero 429s from the provider (saw ${gw.providerTotal.refused_429})`,
      gw.providerTotal.refused_429 === 0,
    ],
    [
      'batchProgresses',
      `calls+tokens: batch still progresses (${gw.ok.batch} calls completed, want ≥ ${o.seconds}: one a second)`,
      gw.ok.batch >= o.seconds,
    ],
    [
      'refundsRaiseThroughput',
      `refunds raise tokens/s delivered: ${gained.toFixed(0)} with refunds ≥ 1.25 × ${base.toFixed(0)} reserving prompt + max_tokens without`,
      gained >= 1.25 * base,
    ],
  ]
}

/** The whole phase: the provider, four runs, the table and the checks → `{ok, summary}`. */
export async function gatewayPhase(o) {
  const hg = await import(HULLGUARD)
  console.log('\n== LLM gateway phase (calls and tokens in one decision) ==')
  const provider = await startProvider(o)
  const runs = {}
  try {
    console.log(
      `  fake provider ${provider.url} (pid ${provider.proc.pid}): concurrent-token ceiling ${o.ceiling} ` +
        `(input + max_tokens in flight, else 429), ${o.tokensPerSecond} tokens/s per stream`,
    )
    console.log(
      `  count-only: withBulkhead(fetch, new Registry({maxConcurrent: ${o.countLimit}, maxQueue: ${o.maxQueue}, ` +
        `queueTimeoutMs: ${o.batchTimeoutMs}}))`,
    )
    console.log(`  calls+tokens: new Bulkhead(${JSON.stringify(gatewayConfig(o))})`)
    console.log(
      `  cost = UTF-8 bytes of the prompt + max_tokens; queue timeout interactive ${o.interactiveTimeoutMs} ms, batch ${o.batchTimeoutMs} ms`,
    )
    await provider.control('stats') // warm-up, untimed: the first connection
    for (const m of MODES) runs[m] = await runOnce(m, o, provider, hg)
  } finally {
    await provider.close()
  }
  printTable(
    MODES.map((m) => runs[m]),
    o,
  )
  const b = runs.tokens.stats.budget
  console.log(
    `  calls+tokens bulkhead after the run: budget reservedTotal ${b.reservedTotal} = consumedTotal ${b.consumedTotal} ` +
      `+ refundedTotal ${b.refundedTotal}; inUse ${b.inUse}, overrunTotal ${b.overrunTotal}, leakedTotal ${runs.tokens.stats.leakedTotal}`,
  )
  let ok = true
  const results = checks(runs, o)
  for (const [, label, passed] of results) {
    console.log(`check: ${label}: ${passed ? 'PASS' : 'FAIL'}`)
    ok &&= passed
  }
  return { ok, summary: { ...runs, checks: Object.fromEntries(results.map(([k, , p]) => [k, p])) } }
}

/** The phase's flags for `parseArgs` (`prefix` = `'llm-'` when another demo embeds them). */
export function phaseFlags(prefix = '') {
  const f = (name, def) => [`${prefix}${name}`, { type: 'string', default: String(def) }]
  return Object.fromEntries([
    f('seconds', 3),
    f('ceiling', 40000),
    f('tokens-per-second', 500),
    f('chunk-ms', 50),
    f('interactive-every-ms', 50),
    f('batch-every-ms', 25),
    f('interactive-timeout', 1.0),
    f('batch-timeout', 2.0),
    f('count-limit', 16),
    f('max-concurrent', 32),
    f('max-queue', 64),
  ])
}

/** The phase's options from `parseArgs` values (flags of `phaseFlags(prefix)`); exits 2 on a bad one. */
export function phaseOptions(values, prefix = '') {
  const num = (name, min, integer = false) => {
    const v = Number(values[`${prefix}${name}`])
    if (!Number.isFinite(v) || v < min || (integer && !Number.isInteger(v))) {
      console.error(`--${prefix}${name} must be ${integer ? 'an integer' : 'a number'} >= ${min}`)
      process.exit(2)
    }
    return v
  }
  return {
    seconds: num('seconds', 0.1),
    ceiling: num('ceiling', 10000, true),
    tokensPerSecond: num('tokens-per-second', 1),
    chunkMs: num('chunk-ms', 1),
    interactiveEveryMs: num('interactive-every-ms', 1),
    batchEveryMs: num('batch-every-ms', 1),
    interactiveTimeoutMs: num('interactive-timeout', 0) * 1000,
    batchTimeoutMs: num('batch-timeout', 0) * 1000,
    countLimit: num('count-limit', 1, true),
    maxConcurrent: num('max-concurrent', 11, true),
    maxQueue: num('max-queue', 0, true),
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      ...phaseFlags(),
      json: { type: 'boolean', default: false },
      'report-only': { type: 'boolean', default: false },
    },
  })
  const { ok, summary } = await gatewayPhase(phaseOptions(values))
  if (values.json) console.log(`RESULT ${JSON.stringify(summary)}`)
  return ok || values['report-only'] ? 0 : 1
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main()
