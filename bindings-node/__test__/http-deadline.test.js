'use strict'
// withBulkhead(fetch, …) and deadlines (issue 17): the time left once admitted becomes the
// request's timeout (combined with the caller's signal), is sent downstream in the grpc-timeout
// format when `deadlineHeader` names a header (off by default), and a passed deadline is
// refused before anything is sent. Against a real local server on 127.0.0.1 (port 0); the one
// wall-clock bound allows 10x its target.

const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { once } = require('node:events')

const { Registry, Bulkhead, BulkheadError, withBulkhead, withDeadline } = require('../index.js')
const { grpcTimeout } = require('../http.js')

/**
 * A server that answers `/echo` with the request's headers as JSON and never answers `/hang`;
 * `requests` counts what reached it.
 */
async function startServer() {
  const s = { requests: 0, hanging: [] }
  const server = http.createServer((req, res) => {
    s.requests++
    if (req.url.startsWith('/hang')) {
      s.hanging.push(res)
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(req.headers))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  s.server = server
  s.base = `http://127.0.0.1:${server.address().port}`
  s.close = async () => {
    server.closeAllConnections()
    server.close()
    await once(server, 'close')
  }
  return s
}

test('grpcTimeout: the core\'s rule (finest unit that fits 8 digits, rounded down, coarsest exact unit)', () => {
  assert.equal(grpcTimeout(1500), '1500m')
  assert.equal(grpcTimeout(1499.75), '1499750u')
  assert.equal(grpcTimeout(2000), '2S')
  assert.equal(grpcTimeout(120_000), '2M')
  assert.equal(grpcTimeout(0), '0n')
  assert.equal(grpcTimeout(-5), '0n')
  assert.equal(grpcTimeout(NaN), '0n')
  assert.equal(grpcTimeout(Infinity), '99999999H')
  assert.equal(grpcTimeout(1e20), '99999999H')
  for (const ms of [1e-6, 1, 7.5, 1500, 86_400_000, 2 ** 31, 1e15]) {
    assert.match(grpcTimeout(ms), /^\d{1,8}[HMSmun]$/, String(ms))
  }
})

/** A grpc-timeout value in ms (throws on a malformed one). */
function grpcMs(v) {
  const m = /^(\d{1,8})([HMSmun])$/.exec(v)
  assert.ok(m, `grpc-timeout ${v}`)
  const per = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 1e-3, n: 1e-6 }[m[2]]
  return Number(m[1]) * per
}

test('withBulkhead: the time left is sent in the deadlineHeader (grpc-timeout format); off by default', async () => {
  const s = await startServer()
  try {
    const reg = new Registry({ maxConcurrent: 4 })
    const plain = withBulkhead(fetch, reg)
    const grpc = withBulkhead(fetch, reg, { deadlineHeader: 'grpc-timeout' })
    const custom = withBulkhead(fetch, reg, { deadlineHeader: 'X-Budget' })
    const headersOf = async (f, input, init) => (await f(input, init)).json()

    // No deadline in effect: no header, whatever the option.
    assert.equal((await headersOf(grpc, `${s.base}/echo`))['grpc-timeout'], undefined)
    // Off by default: the deadline bounds the request but is not sent.
    const off = await withDeadline(1_500, () => headersOf(plain, `${s.base}/echo`))
    assert.equal(off['grpc-timeout'], undefined)

    const h = await withDeadline(1_500, () => headersOf(grpc, `${s.base}/echo`, { headers: { 'x-a': '1' } }))
    const sent = grpcMs(h['grpc-timeout'])
    assert.ok(sent > 0 && sent <= 1_500, `sent ${h['grpc-timeout']} of a 1500 ms budget`)
    assert.equal(h['x-a'], '1', 'the caller’s headers are kept')

    // An explicit deadline from the admission options; a Request input keeps its headers.
    const viaAdmission = withBulkhead(fetch, reg, {
      deadlineHeader: 'grpc-timeout',
      admission: () => ({ deadline: performance.now() + 800 }),
    })
    const r = await headersOf(viaAdmission, new Request(`${s.base}/echo`, { headers: { 'x-b': '2' } }))
    assert.ok(grpcMs(r['grpc-timeout']) <= 800, r['grpc-timeout'])
    assert.equal(r['x-b'], '2')

    // The header's name is the caller's.
    const c = await withDeadline(60_000, () => headersOf(custom, `${s.base}/echo`))
    assert.match(c['x-budget'], /^\d{1,8}[HMSmun]$/)
    assert.equal(c['grpc-timeout'], undefined)
    for (const st of Object.values(reg.stats())) assert.equal(st.active, 0)
  } finally {
    await s.close()
  }
})

test('withBulkhead: the deadline aborts the request (TimeoutError), combined with the caller’s signal', async () => {
  const s = await startServer()
  try {
    const bh = new Bulkhead({ maxConcurrent: 2 })
    const f = withBulkhead(fetch, bh)
    const t0 = performance.now()
    await assert.rejects(
      withDeadline(100, () => f(`${s.base}/hang`)),
      (e) => e.name === 'TimeoutError',
    )
    const took = performance.now() - t0
    assert.ok(took >= 90 && took < 1_000, `aborted after ${took} ms (deadline 100 ms)`)
    assert.equal(bh.stats().active, 0, 'the permit was released')
    // The caller's own signal still cancels first (its reason, outcome ignored): aborted once
    // the request has reached the server.
    const ac = new AbortController()
    const reached = once(s.server, 'request')
    const p = withDeadline(60_000, () => f(`${s.base}/hang`, { signal: ac.signal }))
    await reached
    const reason = new Error('caller gave up')
    ac.abort(reason)
    await assert.rejects(p, (e) => e === reason)
    assert.equal(bh.stats().active, 0)
  } finally {
    await s.close()
  }
})

test('withBulkhead: a passed deadline is refused timeout before anything is sent', async () => {
  const s = await startServer()
  try {
    const reg = new Registry({ maxConcurrent: 2 })
    const f = withBulkhead(fetch, reg, { deadlineHeader: 'grpc-timeout' })
    const timeout = (e) => e instanceof BulkheadError && e.reason === 'timeout' && e.code === 'BULKHEAD_QUEUE_TIMEOUT'
    await assert.rejects(withDeadline(-1, () => f(`${s.base}/echo`)), timeout)
    const g = withBulkhead(fetch, reg, { admission: () => ({ deadline: performance.now() - 5 }) })
    await assert.rejects(g(`${s.base}/echo`), timeout)
    assert.equal(s.requests, 0, 'nothing reached the server')
    const [st] = Object.values(reg.stats())
    assert.deepEqual([st.active, st.rejectedByReason.timeout], [0, 2])
  } finally {
    await s.close()
  }
})

test('withBulkhead: a bad deadlineHeader is a TypeError naming it', () => {
  const reg = new Registry({ maxConcurrent: 1 })
  for (const bad of [5, '', 'bad header', true, {}]) {
    assert.throws(() => withBulkhead(fetch, reg, { deadlineHeader: bad }), (e) => e instanceof TypeError && /deadlineHeader must be a header name/.test(e.message))
  }
  for (const off of [undefined, null, false]) withBulkhead(fetch, reg, { deadlineHeader: off })
  assert.throws(() => withBulkhead(fetch, reg, { deadlineHeadr: 'x' }), /unknown option "deadlineHeadr" \(known: "admission", "deadlineHeader"\)/)
})
