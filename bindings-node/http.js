'use strict'
/**
 * HTTP integrations: one bulkhead per canonical origin key (`originKey`, docs/design.md: origin keys), taken
 * from a `Registry`, around a request.
 *
 * - `withBulkhead(fetch, registry)` wraps a WHATWG `fetch` (Node's global `fetch`, undici's).
 * - `BulkheadAgent` (an `http.Agent`), and `guardAgent(AgentClass)` for `https.Agent` or any other
 *   `http.Agent` subclass, guard `http.request` / `https.request` and every library that takes
 *   an `agent` option.
 *
 * When is the permit released? When the request stops using a connection, so that a bulkhead
 * with `maxConcurrent: n` bounds the origin's connections in use to n:
 *
 * - fetch: when the response body has been fully read, cancelled or has errored (the permit is
 *   held while the body streams: releasing at the headers would let a slow or streaming body
 *   hold a connection outside the limit); at once when fetch rejects (transport error, abort)
 *   or the response has no body (`HEAD`, 204, 304). A body you never read or cancel holds its
 *   permit, exactly as it holds its connection (undici's rule: consume or cancel every body);
 *   if the response is garbage-collected unread, the permit is reclaimed and counted in
 *   `stats().leakedTotal`.
 * - agent: when the request emits `'close'`: after the response has been read to the end or
 *   when the request fails or is destroyed. A request that this release admits enters the agent
 *   a microtask later, once the freed keep-alive socket is back on the agent's free list (Node
 *   emits the request's `'close'` just before the socket's `'free'`, in the same tick). A
 *   response you never consume (`res.resume()`) holds its permit, as it holds its socket.
 *
 * Outcomes (docs/design.md §6.2), reported to the key's policies (breaker, adaptive limit) at the release:
 * a transport error (fetch rejects, the request or response emits 'error') and HTTP 5xx are a
 * `failure`; 429 is `overload` (a failure for the adaptive limit, a success for the breaker);
 * a cancellation (the caller's `signal.reason`, an error named "AbortError", a request destroyed
 * without an error before its response) is `ignored`; any other response is a `success`.
 *
 * Rejections by the bulkhead surface as `BulkheadError` (fetch: the promise rejects; agent: the
 * request emits `'error'` and no socket is ever taken). Cancellation surfaces as the caller's
 * own: fetch rejects with `signal.reason`; a destroyed request emits what `req.destroy(err)` or
 * its `signal` gave it.
 *
 * Deadlines (issue 17, docs/design.md §5.9): the admission takes the request's deadline (the
 * `deadline` of its admission options, min'd with the ambient one of `withDeadline`); a passed
 * one is refused `timeout` before anything is sent. fetch: the time left once admitted becomes
 * the request's timeout (`AbortSignal.timeout`, combined with the caller's signal), and with
 * `deadlineHeader` it is sent downstream in that header, in the grpc-timeout format. The
 * agent's admission takes the ambient deadline of the context that made the request.
 */

const http = require('node:http')
const { errorMonitor } = require('node:events')
const { errorOutcome } = require('./outcome.js')
const native = require('./native.js')
const { ambient, anySignal, deadlineOf, nowMs } = require('./ambient.js')
const { MAX_TIMER_MS } = require('./deadlines.js')

// The facade (index.js) re-exports this module, so it is looked up on first use, not at load.
let facade = null
function hullguard() {
  facade ??= require('./index.js')
  return facade
}

function originKey(url) {
  return hullguard().originKey(url)
}

function registryArg(registry) {
  if (!(registry instanceof hullguard().Registry)) throw new TypeError('registry must be a hullguard Registry')
  return registry
}

/** The outcome of an HTTP status, by the core's rule (5xx failure, 429 overload, else success). */
function statusOutcome(status) {
  return Number.isInteger(status) && status >= 0 ? native.outcomeForHttpStatus(status) : 'success'
}

// ----- fetch ----------------------------------------------------------------------------------

/** The URL string of fetch's `input`: a string, a `URL`, a `Request` (or anything with `url`). */
function urlOf(input) {
  if (typeof input === 'string') return input
  if (input instanceof URL) return input.href
  if (input !== null && typeof input === 'object' && typeof input.url === 'string') return input.url
  return String(input)
}

/** The signal fetch will use: `init.signal` when given (even `null`), else the Request's. */
function signalOf(input, init) {
  if (init !== undefined && init !== null && 'signal' in init) return init.signal ?? undefined
  if (input !== null && typeof input === 'object' && !(input instanceof URL) && input.signal) return input.signal
  return undefined
}

/**
 * The response with its body wrapped so that `done(err)` runs once when the body ends or is
 * cancelled (`err` undefined) or errors. The wrapper pulls from the original body only when its
 * reader asks (highWaterMark 0): it adds no buffering and no read-ahead.
 */
function guardBody(res, done) {
  const body = res.body
  if (typeof body.getReader !== 'function') {
    // A Node stream body (node-fetch and the like): 'close' follows end, error and destroy.
    let failed
    body.on(errorMonitor, (e) => {
      failed = e
    })
    body.once('close', () => done(failed))
    return res
  }
  const reader = body.getReader()
  const wrapped = new ReadableStream(
    {
      async pull(controller) {
        let chunk
        try {
          chunk = await reader.read()
        } catch (e) {
          done(e)
          throw e
        }
        if (chunk.done) {
          done()
          controller.close()
        } else {
          controller.enqueue(chunk.value)
        }
      },
      cancel(reason) {
        done()
        return reader.cancel(reason)
      },
    },
    { highWaterMark: 0 },
  )
  const out = new Response(wrapped, { status: res.status, statusText: res.statusText, headers: res.headers })
  // What `new Response` cannot take from an init: keep the fetched response's values.
  Object.defineProperties(out, {
    url: { value: res.url },
    redirected: { value: res.redirected },
    type: { value: res.type },
  })
  return out
}

/** An HTTP header name (RFC 9110 token). */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

/**
 * `withBulkhead`'s options: `undefined`, `null` or `{admission, deadlineHeader}`; any other key
 * is a `TypeError`. Returns `{admission, header}` (each `undefined` when not given).
 */
function fetchOptionsArg(options) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object') throw new TypeError('withBulkhead options must be an object')
  for (const k of Object.keys(options)) {
    if (k !== 'admission' && k !== 'deadlineHeader') {
      throw new TypeError(`withBulkhead: unknown option ${JSON.stringify(k)} (known: "admission", "deadlineHeader")`)
    }
  }
  const { admission, deadlineHeader } = options
  if (admission !== undefined && admission !== null && typeof admission !== 'function') {
    throw new TypeError('withBulkhead: admission must be a function (input, init) => acquire options')
  }
  const off = deadlineHeader === undefined || deadlineHeader === null || deadlineHeader === false
  if (!off && (typeof deadlineHeader !== 'string' || !TOKEN.test(deadlineHeader))) {
    throw new TypeError(
      `withBulkhead: deadlineHeader must be a header name (e.g. 'grpc-timeout'), or false / null for none, got ${JSON.stringify(deadlineHeader)}`,
    )
  }
  return { admission: admission ?? undefined, header: off ? undefined : deadlineHeader }
}

/**
 * `ms` (a time left) as a grpc-timeout header value, by the core's one rule for every binding:
 * at most 8 digits and a unit (H, M, S, m, u, n) — the finest unit whose value fits, rounded
 * down (the downstream's deadline is never later than ours), written in the coarsest unit that
 * holds it exactly (1500 → `'1500m'`, 2000 → `'2S'`, 1499.75 → `'1499750u'`).
 */
function grpcTimeout(ms) {
  return native.grpcTimeout(ms)
}


/** Whether fetch's `input` is a `Request` (its headers are the request's unless init has some). */
function isRequestLike(input) {
  return input !== null && typeof input === 'object' && !(input instanceof URL) && typeof input.url === 'string'
}

/**
 * The fetch `init` of a request with `left` ms until its deadline: its signal also aborts then
 * (`AbortSignal.timeout`, a `TimeoutError`; none beyond the host timer's range), combined with
 * the caller's `signal`; with `header`, the time left in it (grpc-timeout format).
 */
function deadlineInit(input, init, signal, left, header) {
  const out = { ...init }
  if (left <= MAX_TIMER_MS) {
    // Whole ms, rounded up: the request is never cut before the deadline.
    const timeout = AbortSignal.timeout(Math.ceil(left))
    out.signal = signal === undefined ? timeout : anySignal([signal, timeout])
  }
  if (header !== undefined) {
    const headers = new Headers(init?.headers ?? (isRequestLike(input) ? input.headers : undefined))
    headers.set(header, grpcTimeout(left))
    out.headers = headers
  }
  return out
}

/**
 * A fetch-compatible function that runs every request inside the bulkhead of its origin
 * (`limiter` a `Registry`, keyed by `originKey(url)`), or inside one bulkhead (`limiter` a
 * `Bulkhead`: one dependency, e.g. an LLM provider's account with a token budget and classes).
 *
 * The caller's `signal` (`init.signal`, or the `Request`'s) bounds both the wait for a permit
 * and the fetch itself. The permit is held until the response body is fully read, cancelled or
 * errors (see the module notes), so `response.body` is a wrapper stream over the original
 * (`url`, `redirected` and `type` are kept; `clone()` works, but a clone's `url` is empty).
 *
 * Gateway admission (issue 16): `options.admission(input, init)` returns the request's acquire
 * options (`cost`, `admissionClass`, `observe`, `queueTimeoutMs`; `undefined` for none), and a
 * response with a body carries its permit as `response.permit` (not enumerable), so a streaming
 * caller can `reportUsage(used, remaining)` as tokens arrive and `release({usage})` once the
 * usage is final — before the body ends, e.g. on the stream's usage event (the rest of the
 * reservation is refunded; the body's end then releases nothing more). A permit the caller
 * has not released when the body ends is released then, with no usage (its whole hold
 * consumed); a release after that is a double release (counted, nothing returned twice).
 *
 * Deadlines (issue 17): a request's deadline is its admission options' `deadline` (absolute ms
 * on the `performance.now()` scale) min'd with the ambient one (`withDeadline`). The admission
 * refuses a passed one `timeout` (nothing is sent) and queues at most until it; once admitted,
 * the time left becomes the request's timeout — its signal aborts then with a `TimeoutError`
 * (an outcome `failure`), combined with the caller's signal (`AbortSignal.any`) — and with
 * `options.deadlineHeader` (a header name, e.g. `'grpc-timeout'`; off by default) the time left
 * is sent downstream in that header in the grpc-timeout format (whole ms rounded down, the
 * finest unit that fits 8 digits: `'1500m'`). Less than 1 ms left once admitted: rejected with a
 * `TimeoutError` before sending (the permit is released `ignored`).
 *
 * Rejects with a `BulkheadError` when the bulkhead rejects the call (`BULKHEAD_FULL`,
 * `BULKHEAD_QUEUE_TIMEOUT`, `BULKHEAD_CLOSED`, a budget's `budget_limit`…), with `signal.reason`
 * when aborted while waiting, with a `TypeError` for a URL without an origin (`data:`, `file:`,
 * a bad URL) or bad acquire options, with what `admission` throws, and otherwise as `fetch`
 * does.
 *
 * @param {typeof fetch} fetchImpl  usually the global `fetch`
 * @param {Registry | Bulkhead} limiter
 * @param {{admission?: (input: any, init: any) => object | undefined, deadlineHeader?: string | false | null} | undefined} options
 * @returns {typeof fetch}
 */
function withBulkhead(fetchImpl, limiter, options) {
  if (typeof fetchImpl !== 'function') throw new TypeError('fetch must be a function')
  const { Bulkhead, Registry } = hullguard()
  const one = limiter instanceof Bulkhead
  if (!one && !(limiter instanceof Registry)) {
    throw new TypeError('withBulkhead needs a hullguard Registry (a bulkhead per origin) or a Bulkhead (one for every request)')
  }
  const { admission, header } = fetchOptionsArg(options)
  return async function fetchWithBulkhead(input, init) {
    // The key first: a URL without an origin is refused before any admission.
    const key = originKey(urlOf(input))
    const signal = signalOf(input, init)
    const asked = admission === undefined ? undefined : admission(input, init)
    let opts = asked ?? undefined
    if (signal !== undefined) opts = opts === undefined ? { signal } : { ...opts, signal }
    // The ambient deadline of the caller's context (the admission reads it too).
    const amb = ambient()
    const permit = await (one ? limiter.acquire(opts) : limiter.acquire(key, opts))
    // The caller may have released it already (`response.permit.release({usage})`).
    const release = (outcome) => {
      if (!permit.released) permit.release({ outcome })
    }
    // The request's deadline (its `deadline` was checked by the admission).
    const at = deadlineOf(opts, amb)
    let sent = init
    if (at !== Infinity) {
      const left = at - nowMs()
      if (left < 1) {
        release('ignored')
        throw new DOMException('the deadline passed before the request was sent', 'TimeoutError')
      }
      sent = deadlineInit(input, init, signal, left, header)
    }
    let res
    try {
      res = await fetchImpl(input, sent)
    } catch (e) {
      release(errorOutcome(e, signal))
      throw e
    }
    const outcome = statusOutcome(res?.status)
    if (res === null || typeof res !== 'object' || res.body === null || res.body === undefined) {
      release(outcome)
      return res
    }
    let out
    try {
      out = guardBody(res, (err) => release(err === undefined ? outcome : errorOutcome(err, signal)))
    } catch (e) {
      release(errorOutcome(e, signal))
      throw e
    }
    Object.defineProperty(out, 'permit', { value: permit })
    return out
  }
}

// ----- http.Agent ---------------------------------------------------------------------------

/** The origin key of a request the agent is about to serve (the host and port it connects to). */
function agentKey(agent, options) {
  // The agent connects with its own options over the request's (Agent#addRequest does the same).
  const o = { ...options, ...agent.options }
  if (o.socketPath) return `unix:${o.socketPath}`
  const protocol = agent.protocol || o.protocol || 'http:'
  let host = o.host || o.hostname || 'localhost'
  if (host.includes(':') && !host.startsWith('[')) host = `[${host}]`
  const port = o.port || agent.defaultPort
  return originKey(`${protocol}//${host}${port ? `:${port}` : ''}/`)
}

/** Fails a request that never got a socket: it emits 'error' (unless aborted) and 'close'. */
function failRequest(req, err) {
  // `onSocket(null, err)` is how an agent reports a failed socket to its request (Node's own
  // Agent does it when a connection cannot be created). On a destroyed request it reports the
  // error `req.destroy(err)` stored.
  req.onSocket(null, req.destroyed ? undefined : err)
}

/**
 * The outcome of a closed request: its error, else its response's error or status; a request
 * destroyed without an error before any response is a cancellation (`ignored`).
 */
function agentOutcome(req, failed) {
  if (failed !== undefined) return errorOutcome(failed, undefined)
  const res = req.res
  if (res === null || res === undefined) return 'ignored'
  if (res.errored) return errorOutcome(res.errored, undefined)
  return statusOutcome(res.statusCode)
}

/**
 * `Base` (`http.Agent`, `https.Agent` or a subclass) with a bulkhead per origin key in front of
 * its socket pool. Every request takes a permit of its origin's bulkhead before the agent sees
 * it (so a rejected or waiting request never holds or waits for a socket of the agent) and
 * returns it when it emits `'close'`. With `maxConcurrent` per origin adding up to at most the
 * agent's `maxTotalSockets`, one origin can never take another's sockets.
 *
 * Options: the agent's own, plus `registry` (a hullguard `Registry`, required).
 * Requests over a Unix socket (`socketPath`) use the opaque key `unix:<path>`.
 */
function guardAgent(Base) {
  if (typeof Base !== 'function' || !(Base === http.Agent || Base.prototype instanceof http.Agent)) {
    throw new TypeError('guardAgent needs http.Agent or a subclass of it')
  }
  return class BulkheadAgent extends Base {
    #registry
    constructor(options) {
      if (options === null || typeof options !== 'object') throw new TypeError('options must be an object')
      const { registry, ...rest } = options
      registryArg(registry)
      super(rest)
      this.#registry = registry
    }

    /** The registry of the bulkheads. */
    get registry() {
      return this.#registry
    }

    addRequest(req, options, ...legacy) {
      // Destroyed before it got here (an already aborted signal): report it, take nothing.
      if (req.destroyed) {
        failRequest(req, undefined)
        return
      }
      let key
      try {
        key = agentKey(this, typeof options === 'string' ? { host: options, port: legacy[0] } : options)
      } catch (e) {
        failRequest(req, e)
        return
      }
      // Always `acquire` (never `tryAcquire` first): one admission decision per request, so a
      // rejection is counted once. A free permit resolves in a microtask; the request enters the
      // agent then, with its data buffered meanwhile as when the agent itself queues it.
      const cancel = new AbortController()
      // A request without a socket emits nothing when destroyed (it reports once it gets one),
      // so `destroy` is hooked on this request until it closes: it cancels the wait for a
      // permit, and a destroy without an error (the caller's cancellation; Node's own paths
      // pass the error) marks the call `ignored` even though Node then reports a hang-up.
      const own = Object.prototype.hasOwnProperty.call(req, 'destroy')
      const destroy = req.destroy
      let cancelled = false
      req.destroy = function (err) {
        if (err === undefined || err === null) cancelled = true
        const r = destroy.call(this, err)
        cancel.abort()
        return r
      }
      const unhook = () => {
        if (own) req.destroy = destroy
        else delete req.destroy
      }
      this.#registry.acquire(key, { signal: cancel.signal }).then(
        (permit) => {
          // The outcome is read at 'close' (a 'response' listener would change what Node does
          // with an unhandled response; errorMonitor does not count as handling 'error').
          let failed
          req.on(errorMonitor, (e) => {
            failed = e
          })
          req.once('close', () => {
            unhook()
            permit.release({ outcome: cancelled ? 'ignored' : agentOutcome(req, failed) })
          })
          // Destroyed just as the grant came: report it without taking a socket.
          if (req.destroyed) failRequest(req, undefined)
          else super.addRequest(req, options, ...legacy)
        },
        (err) => {
          unhook()
          failRequest(req, err)
        },
      )
    }
  }
}

/**
 * `http.Agent` with a bulkhead per origin: `new BulkheadAgent({registry, keepAlive, ...})`.
 * For HTTPS: `const HttpsBulkheadAgent = guardAgent(https.Agent)` (not built here, so that
 * loading hullguard does not load TLS).
 */
const BulkheadAgent = guardAgent(http.Agent)

module.exports = { withBulkhead, guardAgent, BulkheadAgent }
// For tests: the grpc-timeout format (not re-exported by the facade).
Object.defineProperty(module.exports, 'grpcTimeout', { value: grpcTimeout, enumerable: false })
