'use strict'
// The Node isolation demo (examples/isolation_demo.mjs, docs/design.md, the demo), scaled down: a shared budget
// of 4 sockets, 3 s of load per run, a degraded upstream answering in 1-1.5 s. It must show both
// properties the demo exists for, and that the problem is real without hullguard.

const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { runScript } = require('./helpers.js')

const DEMO = path.join(__dirname, '..', '..', 'examples', 'isolation_demo.mjs')

/** The demo with `args`: `{code, out, err}`. */
const runDemo = (args) => runScript(DEMO, args)

test('demo (scaled down): hullguard isolates the healthy origin', { timeout: 50_000 }, async () => {
  const { code, out, err } = await runDemo([
    '--budget',
    '4',
    '--seconds',
    '3',
    '--degraded-min',
    '1',
    '--degraded-max',
    '1.5',
    '--json',
    '--no-llm', // the LLM-gateway phase has its own test (llm-demo.test.js)
    '--no-deadline', // and so has the deadline phase (deadline-demo.test.js)
  ])
  const line = out.split('\n').find((l) => l.startsWith('RESULT '))
  assert.ok(line, `no RESULT line; exit ${code}\n${out}\n${err}`)
  const r = JSON.parse(line.slice('RESULT '.length))
  const context = `\n${out}`

  // The problem is real: without hullguard healthy requests waited behind degraded ones.
  assert.ok(r.without.healthyWaitedBehindDegraded > 0, `nothing waited without hullguard${context}`)
  // 1. healthy p99 with hullguard at most a fifth of without.
  assert.ok(
    r.with.healthyPct[2] * 5 <= r.without.healthyPct[2],
    `p99 ${r.with.healthyPct[2]} vs ${r.without.healthyPct[2]}${context}`,
  )
  // 2. with hullguard no healthy request waited behind a degraded one (nor at all).
  assert.equal(r.with.healthyWaitedBehindDegraded, 0, context)
  assert.equal(r.with.healthyWaited, 0, context)
  assert.deepEqual(r.checks, { p99: true, isolated: true })
  assert.equal(code, 0, `exit code${context}\n${err}`)

  // The bulkheads ended idle with nothing leaked.
  for (const s of [r.stats.healthy, r.stats.degraded]) {
    assert.equal(s.active, 0)
    assert.equal(s.queued, 0)
    assert.equal(s.leakedTotal, 0)
    assert.equal(s.releasedTwiceTotal, 0)
  }
  assert.equal(r.stats.healthy.maxConcurrent + r.stats.degraded.maxConcurrent, 4)
  assert.equal(r.stats.healthy.admittedTotal, r.with.healthyTotal)
})
