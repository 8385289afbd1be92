'use strict'
// The LLM-gateway phase of the Node demo (examples/llm_gateway_demo.mjs, docs/design.md §13),
// scaled down: 0.5 s of load per run, a fast provider stream, short queue timeouts, --report-only.
// The fake provider is examples/fake_llm_provider.py (standard-library Python, run with
// `python3`, or $PYTHON).
//
// Asserts only what the set-up makes deterministic: the four runs ran and printed every row and
// check; every request of the schedule was accounted for; the bulkheads ended idle with the
// budget's settlement identity exact; the refunding run refunded and the other did not; and the
// two runs with a token budget saw no provider 429 — structural, not timing: the budget equals
// the provider's ceiling and a call never holds less than the provider counts for it.
// Latencies and throughput are the demo's own checks, in `make demo-node`.

const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { runScript } = require('./helpers.js')

const DEMO = path.join(__dirname, '..', '..', 'examples', 'llm_gateway_demo.mjs')
const MODES = ['none', 'count', 'tokens', 'tokensNoRefund']

/** The demo with `args`: `{code, out, err}`. */
const runDemo = (args) => runScript(DEMO, args)

test('LLM-gateway demo phase (scaled down): four runs, budget runs never see a 429', { timeout: 50_000 }, async () => {
  const { code, out, err } = await runDemo([
    '--seconds',
    '0.5',
    '--tokens-per-second',
    '4000',
    '--chunk-ms',
    '20',
    '--batch-timeout',
    '0.5',
    '--interactive-timeout',
    '0.5',
    '--json',
    '--report-only',
  ])
  const context = `\nexit ${code}\n${out}\n${err}`
  assert.equal(code, 0, context)
  for (const section of [
    '== LLM gateway: no bulkhead ==',
    '== LLM gateway: count-only bulkhead ==',
    '== LLM gateway: calls+tokens, refunds ==',
    '== LLM gateway: calls+tokens, no refund ==',
    '== LLM gateway: side by side ==',
  ]) {
    assert.ok(out.includes(section), section + context)
  }
  for (const label of ['success rate', 'p50 latency', 'p99 latency', '429s from the provider', 'tokens/s delivered']) {
    assert.ok(out.split(label).length - 1 >= 2, label + context) // once per class
  }
  for (const label of ['billed by the provider', 'provider ceiling use', 'client budget utilisation', 'budget refunded']) {
    assert.ok(out.includes(label), label + context)
  }
  assert.equal(out.split('\ncheck: ').length - 1, 4, context)

  const line = out.split('\n').find((l) => l.startsWith('RESULT '))
  assert.ok(line, `no RESULT line${context}`)
  const r = JSON.parse(line.slice('RESULT '.length))
  assert.deepEqual(Object.keys(r.checks).sort(), ['batchProgresses', 'interactiveP99', 'refundsRaiseThroughput', 'zero429'])
  for (const mode of MODES) {
    const run = r[mode]
    // The schedule: an interactive call every 50 ms and a batch call every 25 ms.
    assert.deepEqual(run.requests, { interactive: 10, batch: 20 }, mode) // 0.5 s at 50 / 25 ms
    for (const cls of ['interactive', 'batch']) {
      const refused = Object.values(run.refused[cls]).reduce((a, b) => a + b, 0)
      const settled = run.ok[cls] + run.provider429[cls] + refused
      assert.ok(settled <= run.requests[cls], mode)
      const errors = Object.values(run.errors).reduce((a, b) => a + b, 0)
      assert.ok(settled + errors >= run.requests[cls], mode)
      // The first call of each class finds an empty provider and bulkhead.
      assert.ok(run.ok[cls] >= 1, `${mode} ${cls}${context}`)
    }
    if (mode === 'none') continue
    const s = run.stats
    assert.deepEqual([s.active, s.queued, s.leakedTotal, s.releasedTwiceTotal], [0, 0, 0, 0], mode)
  }
  for (const mode of ['tokens', 'tokensNoRefund']) {
    const run = r[mode]
    assert.equal(run.providerTotal.refused_429, 0, mode)
    assert.deepEqual(run.provider429, { interactive: 0, batch: 0 }, mode)
    assert.ok(run.providerTotal.occupancy_peak <= run.providerTotal.ceiling, mode)
    const b = run.stats.budget
    assert.deepEqual([b.inUse, b.grantedUnclaimed, b.overrunTotal, b.overrunHeld], [0, 0, 0, 0], mode)
    assert.equal(b.reservedTotal, b.consumedTotal + b.refundedTotal, mode)
  }
  assert.ok(r.tokens.stats.budget.refundedTotal > 0)
  assert.equal(r.tokensNoRefund.stats.budget.refundedTotal, 0)
  const billed = r.tokens.providerTotal
  assert.equal(r.tokens.stats.budget.consumedTotal, billed.billed_input + billed.billed_output)
})
