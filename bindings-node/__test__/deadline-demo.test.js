'use strict'
// The deadline phase of the Node demo (examples/deadline_demo.mjs, docs/design.md §13), scaled
// down: a 0.25 s request budget, 8 requests, a burst of 20 and 0.5 s of steady load,
// --report-only.
//
// Asserts only what the set-up makes deterministic, never a latency: both experiments ran and
// printed every check; every request was accounted for once; with the budget no second call was
// ever *sent* after its request's deadline (a call whose deadline has passed is refused before
// sending — structural), while without it the slow first calls (1.2 budgets long) make some
// second calls start late; the FIFO run shed nothing and the CoDel run's sheds are exactly what
// its bulkhead counted. The demo's own latency and goodput checks run in `make demo-node`.

const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { runScript } = require('./helpers.js')

const DEMO = path.join(__dirname, '..', '..', 'examples', 'deadline_demo.mjs')

/** The demo with `args`: `{code, out, err}`. */
const runDemo = (args) => runScript(DEMO, args)

test('deadline demo phase (scaled down): budgets never send late, sheds are counted', { timeout: 50_000 }, async () => {
  const { code, out, err } = await runDemo([
    '--budget', '0.25', '--requests', '8', '--rate', '40', '--burst', '20', '--steady-seconds', '0.5',
    '--json', '--report-only',
  ])
  assert.equal(code, 0, out + err)
  assert.match(out, /== deadlines: a 0\.25 s request budget/)
  assert.match(out, /== queue-delay shedding:/)
  assert.equal(out.split('check: ').length - 1, 7, out)
  const line = out.split('\n').find((l) => l.startsWith('RESULT '))
  assert.ok(line, out)
  const { budget, burst } = JSON.parse(line.slice('RESULT '.length))
  for (const run of [budget.without, budget.with]) {
    assert.equal(run.okInTime + run.late + run.failed, 8, JSON.stringify(run))
    assert.equal(run.latency.length, 8)
  }
  assert.equal(budget.with.bSentAfterDeadline, 0)
  assert.ok(budget.without.bSentAfterDeadline >= 1) // requests 0 and 4: A is 1.2 budgets long
  const steady = Math.floor(100 * 0.5)
  for (const run of [burst.fifo, burst.codel]) {
    assert.equal(run.ok + run.timeout + run.shed + run.other, 20 + steady, JSON.stringify(run))
    assert.equal(run.other, 0)
  }
  assert.equal(burst.fifo.shed, 0)
  assert.equal(burst.codelStatsShed, burst.codel.shed)
})
