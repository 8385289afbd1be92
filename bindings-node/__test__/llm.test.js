'use strict'
// hullguard/llm (issue 16 item 4): the reservation estimator (with gpt-tokenizer, which ships its
// encodings: no download), the usage extractors and guardedStream, against fake permits and a
// real bulkhead with a token budget. No timers.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Bulkhead } = require('../index.js')
const llm = require('../llm.js')
const { turns, deferred, track } = require('./helpers.js')

// ----- the estimator ---------------------------------------------------------------------------

test('estimateTokens rounds characters up', () => {
  assert.deepEqual(['', 'abcd', 'abcde'].map((t) => llm.estimateTokens(t)), [0, 1, 2])
  assert.equal(llm.estimateTokens('abcdef', { charsPerToken: 3 }), 2)
})

test("a caller's tokenizer replaces the ratio (gpt-tokenizer, offline)", () => {
  const { encode, countTokens } = require('gpt-tokenizer')
  const text = 'The quick brown fox jumps over the lazy dog.'
  const n = encode(text).length
  assert.ok(n > 5 && n < 20)
  assert.equal(llm.estimateTokens(text, { tokenizer: encode }), n) // tokens: their length counts
  assert.equal(llm.estimateTokens(text, { tokenizer: countTokens }), n) // a count
  const req = { max_tokens: 10, messages: [{ role: 'user', content: text }] }
  assert.equal(llm.reservation(req, { tokenizer: countTokens, perMessageTokens: 0 }), n + 10)
})

test('bad estimator options are named', () => {
  assert.throws(() => llm.estimateTokens('x', { charsPerToken: 0 }), /charsPerToken/)
  assert.throws(() => llm.estimateTokens('x', { charsPerToken: '4' }), /charsPerToken/)
  assert.throws(() => llm.estimateTokens('x', { tokenizer: () => -1 }), /tokenizer/)
  assert.throws(() => llm.estimateTokens('x', { tokenizer: () => ({}) }), /tokenizer/)
  assert.throws(() => llm.estimateTokens(3), /text/)
  assert.throws(() => llm.estimate({}, { defaultMaxTokens: -1 }), /defaultMaxTokens/)
  assert.throws(() => llm.estimate({}, { outputCap: 1 }), /unknown option "outputCap".*"defaultMaxTokens"/)
  assert.throws(() => llm.estimate({ max_tokens: 1.5 }), /max_tokens/)
})

test('an OpenAI chat request', () => {
  const req = {
    max_completion_tokens: 100,
    messages: [
      { role: 'system', content: 'a'.repeat(8) },
      { role: 'user', content: [{ type: 'text', text: 'b'.repeat(12) }, { type: 'image_url' }] },
    ],
  }
  assert.deepEqual(llm.estimate(req), { inputTokens: 2 + 3 + 6, maxOutputTokens: 100, total: 111 })
  assert.equal(llm.reservation(req, { perMessageTokens: 0, extraInputTokens: 5 }), 110)
})

test('an Anthropic request with system blocks and tool results; Responses input; the default cap', () => {
  const a = {
    system: [{ type: 'text', text: 's'.repeat(4) }],
    messages: [{ role: 'user', content: [{ type: 'tool_result', content: [{ type: 'text', text: 't'.repeat(8) }] }] }],
    max_tokens: 50,
  }
  assert.equal(llm.reservation(a, { perMessageTokens: 0 }), 1 + 2 + 50)
  const r = { instructions: 'i'.repeat(4), input: [{ role: 'user', content: 'u'.repeat(4) }, 'v'.repeat(4)] }
  assert.deepEqual(llm.estimate(r, { perMessageTokens: 1 }), { inputTokens: 4, maxOutputTokens: 2048, total: 2052 })
})

// ----- usage extractors ------------------------------------------------------------------------

test('usageOf: OpenAI chat, OpenAI responses (and its completed event), Anthropic with cache', () => {
  assert.deepEqual(llm.usageOf({ usage: { prompt_tokens: 11, completion_tokens: 7 } }), { inputTokens: 11, outputTokens: 7, total: 18 })
  assert.deepEqual(llm.usageOf({ usage: { input_tokens: 5, output_tokens: 3 } }), { inputTokens: 5, outputTokens: 3, total: 8 })
  assert.equal(llm.usageOf({ type: 'response.completed', response: { usage: { input_tokens: 2, output_tokens: 1 } } }).total, 3)
  const anthropic = { usage: { input_tokens: 10, cache_creation_input_tokens: 4, cache_read_input_tokens: 6, output_tokens: 9 } }
  assert.deepEqual(llm.usageOf(anthropic), { inputTokens: 20, outputTokens: 9, total: 29 })
  assert.equal(llm.usageOf({}), null)
  assert.equal(llm.usageOf(null), null)
  assert.equal(llm.getUsage(anthropic), 29)
  assert.equal(llm.getUsage({}), undefined)
})

const ANTHROPIC_STREAM = [
  { type: 'message_start', message: { usage: { input_tokens: 30, output_tokens: 1 } } },
  { type: 'content_block_start', index: 0 },
  { type: 'content_block_delta', delta: { type: 'text_delta', text: 'x'.repeat(20) } },
  { type: 'content_block_delta', delta: { type: 'text_delta', text: 'y'.repeat(20) } },
  { type: 'message_delta', usage: { output_tokens: 9 } },
  { type: 'message_stop' },
]

const OPENAI_STREAM = [
  { choices: [{ delta: { content: 'a'.repeat(8) } }], usage: null },
  { choices: [{ delta: { content: 'b'.repeat(8) } }], usage: null },
  { choices: [], usage: { prompt_tokens: 40, completion_tokens: 5 } },
]

test('StreamUsage follows an Anthropic stream; used never decreases once the input is exact', () => {
  const t = new llm.StreamUsage({ inputEstimate: 100 })
  const seen = ANTHROPIC_STREAM.map((ev) => {
    t.update(ev)
    return [t.inputTokens, t.outputTokens, t.inputExact]
  })
  assert.deepEqual(seen, [[30, 1, true], [30, 1, true], [30, 5, true], [30, 10, true], [30, 9, true], [30, 9, true]])
  assert.equal(t.used, 40)
})

test('StreamUsage follows OpenAI chunks and Responses events', () => {
  const t = new llm.StreamUsage({ inputEstimate: 50 })
  assert.deepEqual(OPENAI_STREAM.map((ev) => t.update(ev)), [true, true, true])
  assert.deepEqual([t.usage, t.inputExact, t.outputExact], [{ inputTokens: 40, outputTokens: 5, total: 45 }, true, true])
  const r = new llm.StreamUsage()
  r.update({ type: 'response.output_text.delta', delta: 'z'.repeat(9) })
  assert.deepEqual([r.outputTokens, r.inputExact], [3, false])
  r.update({ type: 'response.completed', response: { usage: { input_tokens: 4, output_tokens: 2 } } })
  assert.equal(r.usage.total, 6)
})

// ----- guardedStream ---------------------------------------------------------------------------

function upstream(events, { failAt = -1, gate } = {}) {
  const u = { i: 0, returned: false }
  u.stream = {
    [Symbol.asyncIterator]() {
      return {
        async next() {
          if (gate !== undefined) await gate
          await null
          if (u.i === failAt) throw new Error('upstream reset')
          if (u.returned || u.i >= events.length) return { done: true, value: undefined }
          return { done: false, value: events[u.i++] }
        },
        async return() {
          u.returned = true
          return { done: true, value: undefined }
        },
      }
    },
  }
  return u
}

function fakePermit({ cancelAfter } = {}) {
  const p = { reports: [], released: [] }
  p.reportUsage = (used, remaining) => {
    p.reports.push([used, remaining])
    return { change: 'unchanged', by: 0, cancel: cancelAfter !== undefined && p.reports.length > cancelAfter }
  }
  p.release = (opts) => {
    p.released.push([opts.outcome, opts.usage])
    return true
  }
  return p
}

async function collect(it) {
  const out = []
  for await (const x of it) out.push(x)
  return out
}

test('guardedStream reports as usage arrives and settles once', async () => {
  const p = fakePermit()
  const events = await collect(llm.guardedStream(p, upstream(ANTHROPIC_STREAM).stream, { maxTokens: 50, inputEstimate: 80 }))
  assert.equal(events.length, ANTHROPIC_STREAM.length)
  assert.deepEqual(p.reports, [[31, 49], [35, 45], [40, 40]])
  assert.deepEqual(p.released, [['success', 40]])
})

test('guardedStream on OpenAI chunks reports once the usage chunk arrives', async () => {
  const p = fakePermit()
  await collect(llm.guardedStream(p, upstream(OPENAI_STREAM).stream, { maxTokens: 20, inputEstimate: 60 }))
  assert.deepEqual(p.reports, [[45, 15]])
  assert.deepEqual(p.released, [['success', 45]])
})

test("guardedStream: an upstream error settles 'failure' and propagates", async () => {
  const p = fakePermit()
  await assert.rejects(collect(llm.guardedStream(p, upstream(ANTHROPIC_STREAM, { failAt: 3 }).stream, { maxTokens: 50 })), /upstream reset/)
  assert.deepEqual(p.released, [['failure', 35]])
})

test("guardedStream: the consumer's break closes the upstream and settles 'ignored'", async () => {
  const p = fakePermit()
  const u = upstream(ANTHROPIC_STREAM)
  for await (const ev of llm.guardedStream(p, u.stream, { maxTokens: 50 })) {
    if (ev.type === 'content_block_start') break
  }
  assert.ok(u.returned)
  assert.deepEqual(p.released, [['ignored', 31]])
})

test("guardedStream: an abort rejects with the signal's reason and settles 'ignored'", async () => {
  const p = fakePermit()
  const gate = deferred()
  const u = upstream(ANTHROPIC_STREAM, { gate: gate.promise })
  const ac = new AbortController()
  const t = track(collect(llm.guardedStream(p, u.stream, { maxTokens: 50, inputEstimate: 70, signal: ac.signal })))
  await turns(1)
  const reason = new Error('client went away')
  ac.abort(reason)
  await turns(1)
  assert.equal(t.error, reason)
  assert.deepEqual(p.released, [['ignored', 70]]) // nothing known: the estimate
  gate.resolve()
  await turns(1)
  assert.ok(u.returned)
})

test('guardedStream stops when the bulkhead asks to cancel (overrun)', async () => {
  const p = fakePermit({ cancelAfter: 1 })
  const u = upstream(ANTHROPIC_STREAM)
  await assert.rejects(collect(llm.guardedStream(p, u.stream, { maxTokens: 50 })), (e) => {
    assert.ok(e instanceof llm.OverrunCancelled)
    assert.deepEqual(e.usage, { inputTokens: 30, outputTokens: 5, total: 35 })
    return true
  })
  assert.ok(u.returned)
  assert.deepEqual(p.released, [['ignored', 35]])
})

test('guardedStream bad arguments are named', async () => {
  const s = upstream([]).stream
  await assert.rejects(collect(llm.guardedStream(fakePermit(), s, {})), /maxTokens/)
  await assert.rejects(collect(llm.guardedStream(fakePermit(), s, { maxTokens: 1, max_tokens: 1 })), /unknown option "max_tokens"/)
  await assert.rejects(collect(llm.guardedStream(fakePermit(), [1], { maxTokens: 1 })), /stream/)
  await assert.rejects(collect(llm.guardedStream({}, s, { maxTokens: 1 })), /permit/)
  await assert.rejects(collect(llm.guardedStream(fakePermit(), s, { maxTokens: 1, tracker: {} })), /tracker/)
  await assert.rejects(collect(llm.guardedStream(fakePermit(), s, { maxTokens: 1, signal: {} })), /signal/)
})

// ----- against a real bulkhead with a token budget -----------------------------------------------

function settled(b) {
  // The budget's settlement identity (docs/design.md §4.5, C30).
  return b.reservedTotal + b.overrunTotal === b.consumedTotal + b.refundedTotal + b.inUse + b.grantedUnclaimed + b.overrunHeld
}

test('a real budget follows the stream and refunds the rest', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, budget: 1000 })
  const req = { max_tokens: 50, messages: [{ role: 'user', content: 'q'.repeat(400) }] }
  const est = llm.estimate(req)
  const permit = await bh.acquire({ cost: est.total })
  const seen = [bh.stats().budget.inUse]
  for await (const _ of llm.guardedStream(permit, upstream(ANTHROPIC_STREAM).stream, { maxTokens: 50, inputEstimate: est.inputTokens })) {
    seen.push(bh.stats().budget.inUse)
  }
  assert.equal(seen[0], 153)
  assert.equal(seen[1], 80) // the exact input (30) shrank the hold at message_start
  const b = bh.stats().budget
  assert.deepEqual([b.inUse, b.consumedTotal, b.reservedTotal, b.refundedTotal], [0, 40, 153, 113])
  assert.ok(settled(b))
  assert.equal(bh.stats().active, 0)
})

test('a real budget is freed when the stream fails', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, budget: 1000 })
  const permit = await bh.acquire({ cost: 200 })
  await assert.rejects(collect(llm.guardedStream(permit, upstream(ANTHROPIC_STREAM, { failAt: 2 }).stream, { maxTokens: 50 })))
  const b = bh.stats().budget
  assert.deepEqual([b.inUse, b.consumedTotal], [0, 31])
  assert.ok(settled(b))
})

test('a real overrun with cancelOnOverrun stops the stream', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, budget: 40, cancelOnOverrun: true })
  const big = [
    { type: 'message_start', message: { usage: { input_tokens: 30, output_tokens: 1 } } },
    { type: 'message_delta', usage: { output_tokens: 25 } }, // 55 > the budget of 40
    { type: 'message_stop' },
  ]
  const u = upstream(big)
  const permit = await bh.acquire({ cost: 40 })
  await assert.rejects(collect(llm.guardedStream(permit, u.stream, { maxTokens: 10 })), llm.OverrunCancelled)
  assert.ok(u.returned)
  const b = bh.stats().budget
  assert.ok(b.overrunTotal > 0)
  assert.equal(b.inUse, 0)
  assert.ok(settled(b))
})

test('run(fn, { cost, getUsage }) refunds from the result', async () => {
  const bh = new Bulkhead({ maxConcurrent: 4, budget: 1000 })
  const req = { max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }
  const out = await bh.run(async () => ({ usage: { prompt_tokens: 4, completion_tokens: 6 } }), { cost: llm.reservation(req), getUsage: llm.getUsage })
  assert.equal(out.usage.prompt_tokens, 4)
  const b = bh.stats().budget
  assert.deepEqual([b.reservedTotal, b.consumedTotal, b.inUse], [llm.reservation(req), 10, 0])
})

// ----- types ---------------------------------------------------------------------------------------

test('dedup.d.ts and llm.d.ts type-check a typed consumer; wrong option names fail', () => {
  // One tsc run over a consumer in a temp dir, `hullguard/dedup` and `hullguard/llm` mapped to
  // the package's .d.ts files. Each `@ts-expect-error` line must fail to compile (else tsc
  // reports the directive as unused).
  const fs = require('node:fs')
  const os = require('node:os')
  const path = require('node:path')
  const { execFileSync } = require('node:child_process')
  const pkg = path.resolve(__dirname, '..')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hullguard-types-'))
  try {
    fs.writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'es2022',
          lib: ['es2022', 'dom', 'dom.asynciterable'],
          module: 'nodenext',
          moduleResolution: 'nodenext',
          types: [],
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          paths: {
            'hullguard/dedup': [path.join(pkg, 'dedup.d.ts')],
            'hullguard/llm': [path.join(pkg, 'llm.d.ts')],
            hullguard: [path.join(pkg, 'index.d.ts')],
          },
        },
        files: ['usage.mts'],
      }),
    )
    fs.writeFileSync(
      path.join(dir, 'usage.mts'),
      `import { Bulkhead } from 'hullguard'
import { SingleFlight, UnshareableResultError, costBucket } from 'hullguard/dedup'
import { estimate, reservation, usageOf, getUsage, StreamUsage, guardedStream, OverrunCancelled, type Usage } from 'hullguard/llm'

declare const bh: Bulkhead
const sf = new SingleFlight(bh, { costBucket: (c) => c })
export async function ok(): Promise<number> {
  const s: string = await sf.run('k', async (signal) => (signal.aborted ? 'a' : 'b'), { cost: 10, admissionClass: 'batch', observe: 'concurrency', tee: true })
  const n: number = await sf.run(1, () => 3, { weight: 2, signal: new AbortController().signal })
  const r = await sf.run('u', async () => ({ usage: { prompt_tokens: 1, completion_tokens: 2 } }), { cost: 9, getUsage })
  const m: number = await sf.run('v', async () => 5, { getUsage: (x: number) => x * 2 })
  void [r, m]
  const e: Usage | null = usageOf({})
  const est = estimate({ max_tokens: 3 }, { tokenizer: (t) => t.length, defaultMaxTokens: 1 })
  const t = new StreamUsage({ inputEstimate: 3 })
  const permit = await bh.acquire()
  for await (const ev of guardedStream(permit, (async function* () { yield { type: 'x' } })(), { maxTokens: 5, tracker: t })) {
    void ev.type
  }
  void [UnshareableResultError, OverrunCancelled, costBucket(3), getUsage(e), sf.size + sf.hits]
  return s.length + n + est.total + reservation({}) + t.used
}
// @ts-expect-error: unknown option of run()
void sf.run('k', () => 1, { timeoutMs: 5 })
// @ts-expect-error: keys are strings or numbers
void sf.run({}, () => 1)
// @ts-expect-error: an observe mode that does not exist
void sf.run('k', () => 1, { observe: 'shadow' })
// @ts-expect-error: unknown option of estimate()
void estimate({}, { outputCap: 5 })
// @ts-expect-error: maxTokens is required
void guardedStream({ release: () => true }, (async function* () {})(), {})
// @ts-expect-error: getUsage gets the result's type
void sf.run('k', async () => 'text', { getUsage: (x: number) => x })
// @ts-expect-error: unknown option of new SingleFlight()
void new SingleFlight(bh, { bucket: 3 })
`,
    )
    const tsc = path.join(pkg, 'node_modules', 'typescript', 'bin', 'tsc')
    try {
      execFileSync(process.execPath, [tsc, '--noEmit', '-p', dir], { encoding: 'utf8', stdio: 'pipe' })
    } catch (e) {
      assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`)
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test("guardedStream: an SDK stream's controller is aborted when the consumer stops early", async () => {
  const p = fakePermit()
  const u = upstream(ANTHROPIC_STREAM)
  const sdk = { controller: new AbortController(), [Symbol.asyncIterator]: () => u.stream[Symbol.asyncIterator]() }
  for await (const _ of llm.guardedStream(p, sdk, { maxTokens: 50 })) break
  assert.equal(sdk.controller.signal.aborted, true)
  assert.ok(u.returned)
  const done = { controller: new AbortController(), [Symbol.asyncIterator]: () => upstream(OPENAI_STREAM).stream[Symbol.asyncIterator]() }
  await collect(llm.guardedStream(fakePermit(), done, { maxTokens: 50 }))
  assert.equal(done.controller.signal.aborted, false) // ended: nothing to drop
})
