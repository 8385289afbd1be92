'use strict'
// Failure classification in the HTTP integrations (docs/design.md §6.2, outcomes; issue 8): transport
// errors and HTTP 5xx are failures, 429 is `overload` (a failure for the adaptive limit, a
// success for the breaker), a cancellation is ignored, anything else a success — recorded when
// the request stops using its connection (the body ends / errors / is cancelled; the agent's
// request closes). Real local servers on 127.0.0.1, Node's global fetch and http.request.

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { once } = require('node:events')

const { Registry, originKey, withBulkhead, BulkheadAgent } = require('../index.js')
const { turns } = require('./helpers.js')

/** Routes: `/status/N` answers N; `/reset` destroys the socket before any response; `/hold`
 * answers 200 with a first chunk and ends the body on `release()`. */
async function startServer() {
  const held = []
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x')
    if (url.pathname.startsWith('/status/')) {
      res.writeHead(Number(url.pathname.slice(8)), { 'content-type': 'text/plain' })
      res.end('body')
    } else if (url.pathname === '/reset') {
      req.socket.destroy()
    } else if (url.pathname === '/hold') {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('first;')
      held.push(() => res.end('last'))
    } else {
      res.end('ok')
    }
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address()
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    release: () => held.splice(0).forEach((f) => f()),
    close: () => {
      server.closeAllConnections()
      return new Promise((r) => server.close(r))
    },
  }
}

/**
 * A registry whose breaker never trips in these tests (it only counts) and whose AIMD limit
 * halves on every failure or overload.
 */
function countingRegistry() {
  return new Registry({
    maxConcurrent: 16,
    resilience: {
      breaker: { failureThreshold: 1000, volumeThreshold: 1000 },
      adaptive: { algorithm: 'aimd', decreaseRatio: 0.5, targetLatencyMs: 60_000 },
    },
  })
}

let srv
before(async () => {
  srv = await startServer()
})
after(() => srv.close())

describe('withBulkhead(fetch): outcomes', () => {
  test('5xx failure, 429 overload, 2xx/4xx success — recorded when the body is read', async () => {
    const reg = countingRegistry()
    const f = withBulkhead(fetch, reg)
    const key = originKey(srv.base)
    const stats = () => reg.stats()[key]

    let res = await f(`${srv.base}/status/503`)
    assert.equal(res.status, 503)
    assert.equal(stats().circuit.consecutiveFailures, 0, 'not recorded before the body ends')
    await res.text()
    let s = stats()
    assert.deepEqual([s.circuit.consecutiveFailures, s.circuit.windowFailures, s.adaptive.decreasesTotal], [1, 1, 1])

    res = await f(`${srv.base}/status/500`)
    await res.arrayBuffer()
    s = stats()
    assert.deepEqual([s.circuit.consecutiveFailures, s.adaptive.decreasesTotal], [2, 2])

    res = await f(`${srv.base}/status/429`)
    await res.text()
    s = stats()
    assert.equal(s.circuit.consecutiveFailures, 0, '429 is a success for the breaker')
    assert.equal(s.circuit.windowFailures, 2)
    assert.equal(s.adaptive.decreasesTotal, 3, '429 is a failure for the adaptive limit')

    for (const status of [200, 404]) {
      res = await f(`${srv.base}/status/${status}`)
      await res.text()
    }
    s = stats()
    assert.deepEqual([s.circuit.windowRequests, s.circuit.windowFailures, s.adaptive.decreasesTotal], [5, 2, 3])
    assert.equal(s.active, 0)
  })

  test('a transport error is a failure; a cancelled request is ignored', async () => {
    const reg = countingRegistry()
    const f = withBulkhead(fetch, reg)
    const key = originKey(srv.base)
    await assert.rejects(f(`${srv.base}/reset`), TypeError) // fetch failed: socket closed
    let s = reg.stats()[key]
    assert.deepEqual([s.circuit.consecutiveFailures, s.adaptive.decreasesTotal, s.active], [1, 1, 0])

    const ac = new AbortController()
    const res = await f(`${srv.base}/hold`, { signal: ac.signal })
    const reader = res.body.getReader()
    await reader.read()
    ac.abort()
    await assert.rejects(reader.read())
    await turns(2)
    s = reg.stats()[key]
    assert.deepEqual([s.circuit.windowRequests, s.adaptive.samplesTotal, s.active], [1, 1, 0], 'the abort is ignored')
    srv.release()
  })

  test('a body error mid-stream is a failure; a cancelled body keeps the status outcome', async () => {
    const reg = countingRegistry()
    const key = originKey(srv.base)
    // A fetch whose body errors after its first chunk (a connection reset mid-body).
    const broken = async () =>
      new Response(
        new ReadableStream({
          start(c) {
            c.enqueue(new TextEncoder().encode('first'))
          },
          pull(c) {
            c.error(new Error('ECONNRESET'))
          },
        }),
        { status: 200 },
      )
    const f = withBulkhead(broken, reg)
    const res = await f(`${srv.base}/x`)
    await assert.rejects(res.text(), /ECONNRESET/)
    let s = reg.stats()[key]
    assert.deepEqual([s.circuit.consecutiveFailures, s.active], [1, 0])

    const g = withBulkhead(fetch, reg)
    const r2 = await g(`${srv.base}/status/200`)
    await r2.body.cancel()
    s = reg.stats()[key]
    assert.deepEqual([s.circuit.consecutiveFailures, s.circuit.windowFailures, s.active], [0, 1, 0])
  })
})

describe('BulkheadAgent: outcomes', () => {
  function get(agent, path) {
    return new Promise((resolve) => {
      const req = http.get(`${srv.base}${path}`, { agent }, (res) => {
        res.resume()
      })
      req.on('error', () => {})
      req.on('close', resolve)
    })
  }

  test('5xx failure, 429 overload, 200 success, a reset socket failure, a destroyed request ignored', async () => {
    const reg = countingRegistry()
    const agent = new BulkheadAgent({ registry: reg, keepAlive: false })
    const key = originKey(srv.base)
    const stats = () => reg.stats()[key]

    await get(agent, '/status/502')
    let s = stats()
    assert.deepEqual([s.circuit.consecutiveFailures, s.adaptive.decreasesTotal], [1, 1])
    await get(agent, '/reset')
    s = stats()
    assert.deepEqual([s.circuit.consecutiveFailures, s.adaptive.decreasesTotal], [2, 2])
    await get(agent, '/status/429')
    s = stats()
    assert.deepEqual([s.circuit.consecutiveFailures, s.adaptive.decreasesTotal], [0, 3])
    await get(agent, '/status/200')
    s = stats()
    assert.deepEqual([s.circuit.windowRequests, s.circuit.windowFailures, s.adaptive.decreasesTotal], [4, 2, 3])

    // Destroyed (cancelled) before any response: ignored.
    await new Promise((resolve) => {
      const req = http.get(`${srv.base}/hold`, { agent })
      req.on('error', () => {})
      req.on('close', resolve)
      req.on('socket', () => setImmediate(() => req.destroy()))
    })
    await turns(2)
    s = stats()
    assert.deepEqual([s.circuit.windowRequests, s.active], [4, 0])
    srv.release()
    agent.destroy()
  })
})
