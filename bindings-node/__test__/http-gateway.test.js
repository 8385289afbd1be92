'use strict'
// withBulkhead(fetch, registry, {admission}) (issue 16): per-request acquire options (a cost, a
// class) and the permit on the response, against a real local server on 127.0.0.1 (port 0).

const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { once } = require('node:events')

const { Registry, BulkheadError, withBulkhead } = require('../index.js')

/** A server streaming `n` chunks of "tok " (query `n`), one per 5 ms. */
async function startServer() {
  const server = http.createServer((req, res) => {
    const n = Number(new URL(req.url, 'http://x').searchParams.get('n') ?? 3)
    res.writeHead(200, { 'content-type': 'text/plain' })
    let i = 0
    const tick = () => {
      if (i++ < n) {
        res.write('tok ')
        setTimeout(tick, 5)
      } else res.end()
    }
    tick()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    base: `http://127.0.0.1:${server.address().port}`,
    async close() {
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    },
  }
}

test('withBulkhead: admission options reserve a cost; the caller settles usage through response.permit', async () => {
  const s = await startServer()
  try {
    const reg = new Registry({ maxConcurrent: 4, budget: 1_000 })
    const seen = []
    const f = withBulkhead(fetch, reg, {
      admission: (input, init) => {
        seen.push([String(input), init?.method])
        return { cost: 400 }
      },
    })
    const res = await f(`${s.base}/?n=4`, { method: 'GET' })
    const { permit } = res
    assert.equal(Object.keys(res).includes('permit'), false, 'not enumerable')
    const key = Object.keys(reg.stats())[0]
    assert.equal(reg.stats()[key].budget.inUse, 400)
    // Streaming: the hold follows what was used plus what may still come.
    let used = 0
    for await (const chunk of res.body) {
      used += new TextDecoder().decode(chunk).split(' ').length - 1
      if (!permit.released) permit.reportUsage(used, 100)
      if (used === 2) permit.release({ usage: used }) // the rest refunded at once
    }
    const b = reg.stats()[key].budget
    // Usage 2 consumed; the rest of every unit held was refunded (reports shrank the hold).
    assert.deepEqual([b.inUse, b.consumedTotal, b.reservedTotal], [0, 2, b.consumedTotal + b.refundedTotal])
    assert.ok(b.refundedTotal >= 398, `refunded ${b.refundedTotal}`)
    // The body's end released nothing more: no double release counted.
    assert.equal(reg.stats()[key].releasedTwiceTotal, 0)
    assert.equal(reg.stats()[key].active, 0)
    assert.deepEqual(seen, [[`${s.base}/?n=4`, 'GET']])
  } finally {
    await s.close()
  }
})

test('withBulkhead: without a release by the caller the body end releases (whole cost consumed)', async () => {
  const s = await startServer()
  try {
    const reg = new Registry({ maxConcurrent: 2, budget: 100 })
    const f = withBulkhead(fetch, reg, { admission: () => ({ cost: 60 }) })
    const res = await f(`${s.base}/?n=2`)
    assert.equal(await res.text(), 'tok tok ')
    const key = Object.keys(reg.stats())[0]
    const st = reg.stats()[key]
    assert.deepEqual([st.active, st.budget.inUse, st.releasedTwiceTotal], [0, 0, 0])
  } finally {
    await s.close()
  }
})

test('withBulkhead: a cost that does not fit is refused budget_limit before any request is sent', async () => {
  const s = await startServer()
  try {
    const reg = new Registry({ maxConcurrent: 4, budget: 100 })
    const f = withBulkhead(fetch, reg, { admission: () => ({ cost: 80, queueTimeoutMs: 0 }) })
    const first = await f(`${s.base}/?n=50`)
    await assert.rejects(f(`${s.base}/?n=1`), (e) => e instanceof BulkheadError && e.reason === 'budget_limit')
    await first.body.cancel()
    const key = Object.keys(reg.stats())[0]
    assert.equal(reg.stats()[key].budget.inUse, 0)
  } finally {
    await s.close()
  }
})

test('withBulkhead: bad options are a TypeError naming them', async () => {
  const reg = new Registry({ maxConcurrent: 1 })
  assert.throws(() => withBulkhead(fetch, reg, { admision: () => ({}) }), /unknown option "admision"/)
  assert.throws(() => withBulkhead(fetch, reg, { admission: 5 }), /admission must be a function/)
  assert.throws(() => withBulkhead(fetch, reg, 5), /options must be an object/)
  const f = withBulkhead(fetch, reg, { admission: () => ({ costs: 1 }) })
  await assert.rejects(f('http://127.0.0.1:9/'), TypeError)
  assert.equal(reg.keys().length <= 1, true)
})

test('withBulkhead over one Bulkhead: every origin shares it; classes from the request', async () => {
  const s = await startServer()
  try {
    const { Bulkhead } = require('../index.js')
    const bh = new Bulkhead({
      maxConcurrent: 2,
      budget: 100,
      classes: [{ name: 'interactive', priority: 10, floor: 1 }, { name: 'batch' }],
    })
    const f = withBulkhead(fetch, bh, {
      admission: (_input, init) => ({ cost: 10, admissionClass: init.headers['x-class'] }),
    })
    const a = await f(`${s.base}/?n=20`, { headers: { 'x-class': 'batch' } })
    assert.equal(bh.classStats('batch').inFlight, 1)
    // The batch class may not take interactive's floor: a second batch call is refused at once.
    const f0 = withBulkhead(fetch, bh, { admission: () => ({ admissionClass: 'batch', queueTimeoutMs: 0 }) })
    await assert.rejects(f0(`${s.base}/?n=1`), (e) => e instanceof BulkheadError && e.reason === 'concurrency_limit')
    const b = await f(`${s.base}/?n=1`, { headers: { 'x-class': 'interactive' } })
    assert.equal(await b.text(), 'tok ')
    await a.body.cancel()
    assert.deepEqual([bh.stats().active, bh.stats().budget.inUse, bh.stats().releasedTwiceTotal], [0, 0, 0])
  } finally {
    await s.close()
  }
})
