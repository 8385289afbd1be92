'use strict'
// The HTTP integrations (http.js): withBulkhead(fetch, registry) and BulkheadAgent, against real
// local servers on 127.0.0.1 (port 0) and Node's global fetch.

const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const https = require('node:https')
const { once } = require('node:events')

const { Registry, BulkheadError, originKey, withBulkhead, guardAgent, BulkheadAgent } = require('../index.js')

/**
 * A local server. Routes: `/` answers "ok"; `/slow?ms=N` answers after N ms; `/stream` sends a
 * first chunk and holds the body open until `release()`; `/break` sends a first chunk, then
 * destroys the socket; `/empty` answers 204. It tracks requests in progress (`inFlight`,
 * `maxInFlight`), requests seen (`seen`) and connections (`connections`).
 */
async function startServer() {
  const state = { inFlight: 0, maxInFlight: 0, seen: 0, connections: 0, held: [] }
  const server = http.createServer((req, res) => {
    state.seen += 1
    state.inFlight += 1
    state.maxInFlight = Math.max(state.maxInFlight, state.inFlight)
    let ended = false
    const end = () => {
      if (!ended) {
        ended = true
        state.inFlight -= 1
      }
    }
    res.on('close', end)
    const url = new URL(req.url, 'http://x')
    if (url.pathname === '/slow') {
      setTimeout(() => res.end('slow'), Number(url.searchParams.get('ms') ?? 50))
    } else if (url.pathname === '/stream') {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('first;')
      state.held.push(() => res.end('last'))
    } else if (url.pathname === '/break') {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('first;')
      setTimeout(() => res.socket.destroy(), 20)
    } else if (url.pathname === '/empty') {
      res.writeHead(204)
      res.end()
    } else {
      res.writeHead(200, { 'content-type': 'text/plain', 'x-test': 'yes' })
      res.end('ok')
    }
  })
  server.on('connection', () => {
    state.connections += 1
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address()
  return {
    state,
    port,
    base: `http://127.0.0.1:${port}`,
    key: originKey(`http://127.0.0.1:${port}`),
    /** Ends every held `/stream` body. */
    release() {
      for (const f of state.held.splice(0)) f()
    },
    async close() {
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    },
  }
}

/** A port with nothing listening (bound, then closed). */
async function deadPort() {
  const s = http.createServer()
  s.listen(0, '127.0.0.1')
  await once(s, 'listening')
  const { port } = s.address()
  s.close()
  await once(s, 'close')
  return port
}

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms))

/** Resolves once `pred()` holds (polling), or fails after `ms`. */
async function until(pred, ms = 2000) {
  const deadline = Date.now() + ms
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('condition not reached in time')
    await tick(2)
  }
}

// ----- fetch ----------------------------------------------------------------------------------

test('fetch: the call runs in the bulkhead of its canonical origin key', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 2 })
  const f = withBulkhead(fetch, registry)
  const res = await f(`${s.base}/hello?x=1`)
  assert.equal(res.status, 200)
  assert.equal(res.statusText, 'OK')
  assert.equal(res.headers.get('x-test'), 'yes')
  assert.equal(res.url, `${s.base}/hello?x=1`)
  assert.equal(res.redirected, false)
  assert.equal(res.type, 'basic')
  assert.equal(res.ok, true)
  assert.deepEqual(registry.keys(), [s.key])
  assert.equal(registry.stats()[s.key].active, 1, 'held while the body is unread')
  assert.equal(await res.text(), 'ok')
  const st = registry.stats()[s.key]
  assert.equal(st.active, 0)
  assert.equal(st.admittedTotal, 1)
  assert.equal(st.leakedTotal, 0)
  assert.equal(st.releasedTwiceTotal, 0)
})

test('fetch: URL and Request inputs use the same key; arrayBuffer() and blob() release', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry()
  const f = withBulkhead(fetch, registry)
  const a = await f(new URL(`${s.base}/a`))
  assert.equal(await a.text(), 'ok')
  const b = await f(new Request(`${s.base}/b`))
  assert.equal(new TextDecoder().decode(await b.arrayBuffer()), 'ok')
  const c = await f(`${s.base}/c`, { method: 'POST', body: 'payload' })
  assert.equal((await c.blob()).size, 2)
  assert.deepEqual(registry.keys(), [s.key])
  assert.equal(registry.stats()[s.key].admittedTotal, 3)
  assert.equal(registry.stats()[s.key].active, 0)
})

test('fetch: at most maxConcurrent requests of one origin reach the server', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 2 })
  const f = withBulkhead(fetch, registry)
  const bodies = await Promise.all(Array.from({ length: 6 }, () => f(`${s.base}/slow?ms=30`).then((r) => r.text())))
  assert.deepEqual(bodies, Array(6).fill('slow'))
  assert.equal(s.state.maxInFlight, 2)
  const st = registry.stats()[s.key]
  assert.equal(st.admittedTotal, 6)
  assert.ok(st.queueWaitCount >= 4, `queued waits: ${st.queueWaitCount}`)
  assert.equal(st.active, 0)
})

test('fetch: origins are independent bulkheads', async (t) => {
  const a = await startServer()
  const b = await startServer()
  t.after(() => Promise.all([a.close(), b.close()]))
  const registry = new Registry({ maxConcurrent: 1, maxQueue: 0 })
  const f = withBulkhead(fetch, registry)
  const held = await f(`${a.base}/stream`)
  // a is full (fail-fast): another call to a is rejected, a call to b goes through.
  await assert.rejects(f(`${a.base}/`), (e) => e instanceof BulkheadError && e.reason === 'concurrency_limit')
  assert.equal(await (await f(`${b.base}/`)).text(), 'ok')
  a.release()
  assert.equal(await held.text(), 'first;last')
})

test('fetch: the permit is held while the body streams, released at its end', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const res = await f(`${s.base}/stream`)
  const reader = res.body.getReader()
  const first = await reader.read()
  assert.equal(new TextDecoder().decode(first.value), 'first;')
  assert.equal(registry.stats()[s.key].active, 1)
  // A second call queues behind the streaming body.
  let secondDone = false
  const second = f(`${s.base}/`).then(async (r) => {
    secondDone = true
    return r.text()
  })
  await tick(30)
  assert.equal(secondDone, false, 'the second call waits while the first body streams')
  assert.equal(registry.stats()[s.key].queued, 1)
  s.release()
  let text = ''
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    text += new TextDecoder().decode(value)
  }
  assert.equal(text, 'last')
  assert.equal(await second, 'ok')
  assert.equal(registry.stats()[s.key].active, 0)
})

test('fetch: cancelling the body releases the permit', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const res = await f(`${s.base}/stream`)
  assert.equal(registry.stats()[s.key].active, 1)
  await res.body.cancel(new Error('not interested'))
  assert.equal(registry.stats()[s.key].active, 0)
  assert.equal(await (await f(`${s.base}/`)).text(), 'ok')
  s.release()
})

test('fetch: a body that errors mid-stream releases the permit', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const res = await f(`${s.base}/break`)
  await assert.rejects(res.text())
  assert.equal(registry.stats()[s.key].active, 0)
})

test('fetch: a transport error releases at once and surfaces as fetch rejects', async () => {
  const port = await deadPort()
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  await assert.rejects(f(`http://127.0.0.1:${port}/`), (e) => e instanceof TypeError && e.message === 'fetch failed')
  const key = originKey(`http://127.0.0.1:${port}`)
  assert.equal(registry.stats()[key].active, 0)
  assert.equal(registry.stats()[key].admittedTotal, 1)
})

test('fetch: responses without a body (204, HEAD) release at once', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const r204 = await f(`${s.base}/empty`)
  assert.equal(r204.status, 204)
  assert.equal(registry.stats()[s.key].active, 0)
  const head = await f(`${s.base}/`, { method: 'HEAD' })
  assert.equal(head.status, 200)
  assert.equal(registry.stats()[s.key].active, 0)
})

test('fetch: bulkhead rejections are BulkheadErrors with the key; fetch is not called', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1, maxQueue: 1, queueTimeoutMs: 40 })
  const f = withBulkhead(fetch, registry)
  const held = await f(`${s.base}/stream`)
  const queued = f(`${s.base}/`) // waits, then times out
  await assert.rejects(f(`${s.base}/`), (e) => {
    assert.ok(e instanceof BulkheadError)
    assert.equal(e.code, 'BULKHEAD_FULL')
    assert.equal(e.reason, 'queue_limit')
    assert.equal(e.snapshot.key, s.key)
    return true
  })
  await assert.rejects(queued, (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_QUEUE_TIMEOUT')
  assert.equal(s.state.seen, 1, 'rejected calls never reach the server')
  s.release()
  await held.text()
  registry.close()
  await assert.rejects(f(`${s.base}/`), (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_CLOSED')
})

test('fetch: the signal aborts the wait for a permit (rejects with signal.reason, no request)', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const held = await f(`${s.base}/stream`)
  const ac = new AbortController()
  const p = f(`${s.base}/`, { signal: ac.signal })
  await tick(10)
  assert.equal(registry.stats()[s.key].queued, 1)
  const reason = new Error('caller gave up')
  ac.abort(reason)
  await assert.rejects(p, (e) => e === reason)
  const st = registry.stats()[s.key]
  assert.equal(st.queued, 0)
  assert.equal(st.rejectedByReason.aborted, 1)
  assert.equal(s.state.seen, 1)
  // A signal already aborted: rejects at once with its reason (a DOMException by default).
  const gone = new AbortController()
  gone.abort()
  await assert.rejects(f(`${s.base}/`, { signal: gone.signal }), (e) => e.name === 'AbortError')
  s.release()
  await held.text()
  assert.equal(registry.stats()[s.key].active, 0)
})

test("fetch: a Request's own signal bounds the wait too", async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const held = await f(`${s.base}/stream`)
  const ac = new AbortController()
  const p = f(new Request(`${s.base}/`, { signal: ac.signal }))
  await tick(10)
  ac.abort()
  await assert.rejects(p, (e) => e.name === 'AbortError')
  assert.equal(registry.stats()[s.key].queued, 0)
  s.release()
  await held.text()
})

test('fetch: aborting during the fetch or the body releases the permit', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const during = new AbortController()
  const p = f(`${s.base}/slow?ms=500`, { signal: during.signal })
  await until(() => s.state.seen === 1)
  during.abort()
  await assert.rejects(p, (e) => e.name === 'AbortError')
  assert.equal(registry.stats()[s.key].active, 0)

  const body = new AbortController()
  const res = await f(`${s.base}/stream`, { signal: body.signal })
  assert.equal(registry.stats()[s.key].active, 1)
  body.abort()
  await assert.rejects(res.text(), (e) => e.name === 'AbortError')
  assert.equal(registry.stats()[s.key].active, 0)
  s.release()
})

test('fetch: clone() of a guarded response reads both copies and releases once', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const f = withBulkhead(fetch, registry)
  const res = await f(`${s.base}/`)
  const copy = res.clone()
  assert.deepEqual(await Promise.all([res.text(), copy.text()]), ['ok', 'ok'])
  const st = registry.stats()[s.key]
  assert.equal(st.active, 0)
  assert.equal(st.releasedTwiceTotal, 0)
})

test(
  'fetch: an unread response that is garbage-collected gives its permit back',
  { skip: typeof gc !== 'function' && 'needs --expose-gc' },
  async (t) => {
    const s = await startServer()
    t.after(() => s.close())
    const registry = new Registry({ maxConcurrent: 1 })
    const f = withBulkhead(fetch, registry)
    await (async () => {
      const res = await f(`${s.base}/stream`)
      assert.equal(res.status, 200)
    })()
    for (let i = 0; i < 50 && registry.stats()[s.key].active !== 0; i++) {
      gc()
      await tick(5)
    }
    const st = registry.stats()[s.key]
    assert.equal(st.active, 0)
    assert.equal(st.leakedTotal, 1)
    s.release()
  },
)

test('fetch: bad arguments', async () => {
  const registry = new Registry()
  assert.throws(() => withBulkhead('fetch', registry), TypeError)
  assert.throws(() => withBulkhead(fetch, {}), TypeError)
  assert.throws(() => withBulkhead(fetch, new Map()), TypeError)
  const f = withBulkhead(fetch, registry)
  await assert.rejects(f('data:text/plain,hi'), TypeError)
  await assert.rejects(f('/relative'), TypeError)
  assert.equal(registry.size, 0)
})

// ----- http.Agent -----------------------------------------------------------------------------

/** One GET through `agent`: resolves `{status, body}` or rejects with the request's error. */
function get(agent, url, opts = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { agent, ...opts }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

test('agent: at most maxConcurrent requests per origin; the key is the canonical origin', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 2 })
  const agent = new BulkheadAgent({ registry, keepAlive: true })
  t.after(() => agent.destroy())
  assert.ok(agent instanceof http.Agent)
  assert.equal(agent.registry, registry)
  const results = await Promise.all(Array.from({ length: 6 }, () => get(agent, `${s.base}/slow?ms=30`)))
  assert.deepEqual(
    results.map((r) => r.body),
    Array(6).fill('slow'),
  )
  assert.equal(s.state.maxInFlight, 2)
  assert.deepEqual(registry.keys(), [s.key])
  const st = registry.stats()[s.key]
  assert.equal(st.admittedTotal, 6)
  assert.equal(st.active, 0)
  assert.ok(s.state.connections <= 2, `keep-alive sockets reused: ${s.state.connections} connections`)
  // The options form (host/port) gives the same key.
  await new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port: s.port, path: '/', agent }, (res) => {
        res.resume()
        res.on('end', resolve)
      })
      .on('error', reject)
  })
  assert.deepEqual(registry.keys(), [s.key])
})

test('agent: origins are independent; the budget is never taken by a rejected request', async (t) => {
  const a = await startServer()
  const b = await startServer()
  t.after(() => Promise.all([a.close(), b.close()]))
  const registry = new Registry({ maxConcurrent: 1, maxQueue: 0, overrides: { [b.key]: { maxConcurrent: 2 } } })
  const agent = new BulkheadAgent({ registry, keepAlive: true, maxTotalSockets: 3 })
  t.after(() => agent.destroy())
  const slowA = get(agent, `${a.base}/slow?ms=80`)
  await until(() => a.state.seen === 1)
  // a is full and fails fast: the request errors with a BulkheadError and never connects.
  const connectionsBefore = a.state.connections
  let closed = false
  const rejected = new Promise((resolve) => {
    const req = http.get(`${a.base}/`, { agent }, () => assert.fail('must not get a response'))
    req.on('error', resolve)
    req.on('close', () => (closed = true))
  })
  const err = await rejected
  assert.ok(err instanceof BulkheadError)
  assert.equal(err.reason, 'concurrency_limit')
  assert.equal(err.snapshot.key, a.key)
  await until(() => closed)
  assert.equal(a.state.connections, connectionsBefore)
  // b has its own two permits.
  const [r1, r2] = await Promise.all([get(agent, `${b.base}/slow?ms=20`), get(agent, `${b.base}/slow?ms=20`)])
  assert.equal(r1.body + r2.body, 'slowslow')
  assert.equal((await slowA).body, 'slow')
  assert.equal(registry.stats()[a.key].rejectedByReason.concurrency_limit, 1)
})

test('agent: a request waits for a permit, then runs; the permit follows the response end', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const agent = new BulkheadAgent({ registry, keepAlive: true })
  t.after(() => agent.destroy())
  // The first response is not read until we say so: its permit stays held.
  const firstRes = await new Promise((resolve, reject) => {
    http.get(`${s.base}/`, { agent }, resolve).on('error', reject)
  })
  assert.equal(registry.stats()[s.key].active, 1)
  const second = get(agent, `${s.base}/`)
  await tick(20)
  assert.equal(registry.stats()[s.key].queued, 1)
  assert.equal(s.state.seen, 1)
  firstRes.resume()
  assert.deepEqual(await second, { status: 200, body: 'ok' })
  assert.equal(registry.stats()[s.key].active, 0)
  assert.equal(s.state.connections, 1, 'the second request reused the freed keep-alive socket')
})

test('agent: a signal or destroy() cancels the wait; nothing leaks', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const agent = new BulkheadAgent({ registry, keepAlive: true })
  t.after(() => agent.destroy())
  const held = await new Promise((resolve, reject) => {
    http.get(`${s.base}/stream`, { agent }, resolve).on('error', reject)
  })

  const ac = new AbortController()
  const viaSignal = get(agent, `${s.base}/`, { signal: ac.signal })
  await tick(10)
  assert.equal(registry.stats()[s.key].queued, 1)
  ac.abort()
  await assert.rejects(viaSignal, (e) => e.name === 'AbortError')
  assert.equal(registry.stats()[s.key].queued, 0)
  assert.equal(registry.stats()[s.key].rejectedByReason.aborted, 1)

  const events = []
  const req = http.get(`${s.base}/`, { agent })
  req.on('error', (e) => events.push(`error:${e.message}`))
  req.on('close', () => events.push('close'))
  await tick(10)
  assert.equal(registry.stats()[s.key].queued, 1)
  req.destroy(new Error('gone'))
  await until(() => events.includes('close'))
  assert.deepEqual(events, ['error:gone', 'close'])
  assert.equal(registry.stats()[s.key].queued, 0)
  assert.equal(Object.prototype.hasOwnProperty.call(req, 'destroy'), false, 'destroy hook removed')

  // A signal that is already aborted: the request fails at once and is never admitted.
  const gone = new AbortController()
  gone.abort()
  const admitted = registry.stats()[s.key].admittedTotal
  await assert.rejects(get(agent, `${s.base}/`, { signal: gone.signal }), (e) => e.name === 'AbortError')
  assert.equal(registry.stats()[s.key].admittedTotal, admitted)

  s.release()
  held.resume()
  await once(held, 'end')
  await tick(5)
  const st = registry.stats()[s.key]
  assert.equal(st.active, 0)
  assert.equal(st.queued, 0)
  assert.equal(s.state.seen, 1, 'cancelled requests never reached the server')
})

test('agent: queue timeout, close() and connection errors', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1, queueTimeoutMs: 30 })
  const agent = new BulkheadAgent({ registry })
  t.after(() => agent.destroy())
  const held = await new Promise((resolve, reject) => {
    http.get(`${s.base}/stream`, { agent }, resolve).on('error', reject)
  })
  await assert.rejects(
    get(agent, `${s.base}/`),
    (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_QUEUE_TIMEOUT',
  )
  s.release()
  held.resume()
  await once(held, 'end')

  const port = await deadPort()
  const key = originKey(`http://127.0.0.1:${port}`)
  await assert.rejects(get(agent, `http://127.0.0.1:${port}/`), (e) => e.code === 'ECONNREFUSED')
  await until(() => registry.stats()[key].active === 0)

  registry.close()
  await assert.rejects(get(agent, `${s.base}/`), (e) => e instanceof BulkheadError && e.code === 'BULKHEAD_CLOSED')
})

test('agent: a request the server closes (Connection: close) releases its permit', async (t) => {
  const s = await startServer()
  t.after(() => s.close())
  const registry = new Registry({ maxConcurrent: 1 })
  const agent = new BulkheadAgent({ registry, keepAlive: false })
  t.after(() => agent.destroy())
  for (let i = 0; i < 3; i++) assert.equal((await get(agent, `${s.base}/`)).body, 'ok')
  await until(() => registry.stats()[s.key].active === 0)
  assert.equal(s.state.connections, 3)
})

test('agent: guardAgent(https.Agent) keys by https origins; bad arguments', async () => {
  const HttpsBulkheadAgent = guardAgent(https.Agent)
  const registry = new Registry()
  const agent = new HttpsBulkheadAgent({ registry })
  assert.ok(agent instanceof https.Agent)
  const port = await deadPort()
  await assert.rejects(
    new Promise((resolve, reject) => {
      https.get(`https://127.0.0.1:${port}/`, { agent }, resolve).on('error', reject)
    }),
    (e) => e.code === 'ECONNREFUSED',
  )
  assert.deepEqual(registry.keys(), [`https://127.0.0.1:${port}`])
  agent.destroy()

  assert.throws(() => guardAgent(class {}), TypeError)
  assert.throws(() => new BulkheadAgent(), TypeError)
  assert.throws(() => new BulkheadAgent({ keepAlive: true }), TypeError)
})
