'use strict'
/**
 * Edge admission (issue 18, docs/design.md §4.11): a bulkhead in front of a server's incoming
 * requests, classed from the request, with load shedding by overload signals.
 *
 *   const { admission } = require('hullguard/edge')
 *   const bh = new Bulkhead({
 *     maxConcurrent: 64, maxQueue: 256, queueTimeoutMs: 2_000,
 *     classes: [{ name: 'batch', priority: 0 }, { name: 'critical', priority: 1 }],
 *     shedCpuThreshold: 0.85, shedLagThresholdMs: 50,
 *   })
 *   const edge = admission({ bulkhead: bh, classify: 'x-priority', deadlineHeader: 'grpc-timeout',
 *                            lagProbe: true, cpuProbe: true })
 *   http.createServer(edge.handler((req, res) => { … }))   // node:http
 *   app.use(edge.express())                                // Express
 *   fastify.register(edge.fastify)                         // Fastify
 *   edge.close()                                           // stops the probes it started
 *
 * Per request: the class (`classify`), the deadline (`deadlineHeader`, in the grpc-timeout
 * format), then one admission of the bulkhead (`bulkhead.admit({admissionClass, deadline,
 * queueTimeoutMs, signal})`). Every decision is the core's: this module only marshals the
 * request into admission options and the refusal into a response. While a request queues, a
 * client that goes away (the response's `'close'`) aborts its wait (counted `aborted`).
 *
 * - **Admitted**: the handler runs inside `withDeadlineAt(deadline)` when the request carried
 *   a deadline (every admission and `withBulkhead` fetch it makes takes what is left of it, and
 *   `remainingMs()` reads it). The permit is released once, at the first of: the response's
 *   `'finish'` (outcome by its status, the core's rule: 5xx `failure`, 429 `overload`, else
 *   `success`), its `'close'` before finishing (the client went away: `ignored`), and — for
 *   the `node:http` handler — the handler throwing or rejecting (`failure`). Express and Fastify
 *   turn a handler's error into their error response, whose `'finish'` releases.
 * - **Refused**: status `detail.httpStatus` (the core's table: 429 for `rate_limit`, 503 for
 *   every other reason), a JSON body `{"reason", "bound", "code", "class", "retry_after"?}`
 *   (the same in every binding's edge) and `Retry-After` (whole seconds, rounded up) only when
 *   the core gave an honest estimate (`detail.retryAfterMs`: a rate's conformance time). A
 *   client that went away while queued gets no response.
 *
 * Overload signals: `lagProbe` (`EventLoopLagProbe`: `perf_hooks.monitorEventLoopDelay`) and
 * `cpuProbe` (`CpuProbe`: `process.cpuUsage()` deltas over wall time) report into
 * `bulkhead.reportLoad({eventLoopLagMs})` / `({cpu})` every `intervalMs`; the bulkhead's
 * `shedLagThresholdMs` / `shedCpuThreshold` decide (the core's gate): while a signal is above
 * its threshold, a class below `criticalPriority` is refused `shed` (bound `overload`, 503)
 * and a critical one passes while capacity is left. Probe timers are unref'd; `close()` stops
 * them. Tests inject the readings (`histogram`, `cpuUsage`, `now`) and call `sample()`.
 *
 * Units: ms; CPU in cores (1.0 = one core busy the whole interval). One isolate.
 */

const { monitorEventLoopDelay } = require('node:perf_hooks')
const native = require('./native.js')
const { withDeadlineAt, nowMs } = require('./ambient.js')

// The facade (index.js) is looked up on first use (it loads the addon's facade state).
let facade = null
function hullguard() {
  facade ??= require('./index.js')
  return facade
}

/** An HTTP header name (RFC 9110 token). */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

const describe = (x) => (x === null ? 'null' : Array.isArray(x) ? 'an array' : typeof x)

/** Checks that `opts` holds only `known` keys (a `TypeError` naming the unknown one). */
function knownKeys(opts, known, what) {
  if (opts === undefined || opts === null) return {}
  if (typeof opts !== 'object' || Array.isArray(opts)) throw new TypeError(`${what} options must be an object, got ${describe(opts)}`)
  for (const k of Object.keys(opts)) {
    if (!known.includes(k)) {
      throw new TypeError(`${what}: unknown option ${JSON.stringify(k)} (known: ${known.map((n) => JSON.stringify(n)).join(', ')})`)
    }
  }
  return opts
}

/** A positive finite number of ms (`name`), or `dflt` when not given. */
function msArg(v, name, dflt) {
  if (v === undefined || v === null) return dflt
  if (typeof v !== 'number') throw new TypeError(`${name} must be a number of ms, got ${describe(v)}`)
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`${name} must be a finite number of ms above 0, got ${v}`)
  return v
}

/** Reports `reading` to every target (a `reportLoad` that throws is reported, never thrown). */
function reportTo(targets, reading) {
  for (const t of targets) {
    try {
      t.reportLoad(reading)
    } catch (e) {
      process.emitWarning(`hullguard: a load probe's report failed: ${e && e.message}`, { code: 'HULLGUARD_PROBE', detail: String(e && e.stack) })
    }
  }
}

/** `targets`: one object with `reportLoad` (a Bulkhead, a Registry) or a list of them. */
function targetsArg(v, what) {
  const list = v === undefined || v === null ? [] : Array.isArray(v) ? v : [v]
  for (const t of list) {
    if (t === null || typeof t !== 'object' || typeof t.reportLoad !== 'function') {
      throw new TypeError(`${what}: targets must be bulkheads (objects with reportLoad), got ${describe(t)}`)
    }
  }
  return new Set(list)
}

// ----- probes ---------------------------------------------------------------------------------

/**
 * The shared part of the probes: targets, an unref'd interval timer, `close()`.
 * Subclasses define `read()` → the reading object or `undefined` (nothing to report).
 */
class Probe {
  #targets
  #timer = null
  #intervalMs
  #reported = false
  constructor(targets, intervalMs, what) {
    this.#targets = targetsArg(targets, what)
    this.#intervalMs = intervalMs
  }

  /** Starts the interval timer (unref'd: a probe never keeps the process alive). */
  start() {
    if (this.#timer !== null) return this
    this.#timer = setInterval(() => this.sample(), this.#intervalMs)
    this.#timer.unref?.()
    return this
  }

  /** Adds a target (a Bulkhead or anything with `reportLoad`); idempotent. */
  add(target) {
    for (const t of targetsArg(target, this.constructor.name)) this.#targets.add(t)
    return this
  }

  /** Removes a target (reporting the idle reading to it: no stale overload is left there). */
  remove(target) {
    if (this.#targets.delete(target) && this.#reported) reportTo([target], this.idle())
    return this
  }

  /**
   * Takes one reading now and reports it to every target. Returns the reading
   * (`{eventLoopLagMs}` / `{cpu}`), or `undefined` when there was nothing to report.
   */
  sample() {
    const reading = this.read()
    if (reading !== undefined) {
      this.#reported = true
      reportTo(this.#targets, reading)
    }
    return reading
  }

  /** The reporting period, ms. */
  get intervalMs() {
    return this.#intervalMs
  }

  /** Whether the timer runs. */
  get running() {
    return this.#timer !== null
  }

  /**
   * Stops the timer (the probe can be `start()`ed again) and reports the idle reading (a lag
   * or a CPU use of 0) to its targets, so no stale overload outlives it — the rule of every
   * adapter's probes (Python's stop, the tower probe's drop). Idempotent.
   */
  close() {
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
    if (this.#reported) {
      this.#reported = false
      reportTo(this.#targets, this.idle())
    }
  }
}

/**
 * Event-loop lag: `perf_hooks.monitorEventLoopDelay({resolution})` read every `intervalMs`
 * (default 500), reported as `{eventLoopLagMs}` — the interval's `percentile` (default 99;
 * `'mean'` or `'max'` also) of the timer delays, less the sampling `resolutionMs` (default 10:
 * the histogram records the whole timer period), at least 0 — then reset for the next interval.
 * An interval with no sample reports nothing.
 *
 * Options: `{targets, intervalMs, resolutionMs, percentile, histogram, start}`; `histogram`
 * injects the source (an object with `percentile(p)`, `mean`, `max`, `count` in ns, `reset()`,
 * and optionally `enable()` / `disable()`), `start: false` leaves the timer off (call
 * `sample()` yourself).
 */
class EventLoopLagProbe extends Probe {
  #h
  #resolutionMs
  #stat
  constructor(options) {
    const o = knownKeys(options, ['targets', 'intervalMs', 'resolutionMs', 'percentile', 'histogram', 'start'], 'EventLoopLagProbe')
    const intervalMs = msArg(o.intervalMs, 'intervalMs', 500)
    super(o.targets, intervalMs, 'EventLoopLagProbe')
    this.#resolutionMs = msArg(o.resolutionMs, 'resolutionMs', 10)
    const p = o.percentile ?? 99
    if (!(p === 'mean' || p === 'max' || (typeof p === 'number' && p > 0 && p <= 100))) {
      throw new RangeError(`percentile must be a number in (0, 100], 'mean' or 'max', got ${JSON.stringify(p)}`)
    }
    this.#stat = p
    const h = o.histogram ?? monitorEventLoopDelay({ resolution: Math.max(1, Math.round(this.#resolutionMs)) })
    if (typeof h.percentile !== 'function' || typeof h.reset !== 'function') {
      throw new TypeError('histogram must have percentile(p) and reset() (a perf_hooks IntervalHistogram)')
    }
    this.#h = h
    h.enable?.()
    if (o.start !== false) this.start()
  }

  read() {
    const h = this.#h
    if (h.count === 0) return undefined
    const ns = this.#stat === 'mean' ? h.mean : this.#stat === 'max' ? h.max : h.percentile(this.#stat)
    h.reset()
    return { eventLoopLagMs: Math.max(0, ns / 1e6 - this.#resolutionMs) }
  }

  /** The reading of an idle loop (reported when the probe stops). */
  idle() {
    return { eventLoopLagMs: 0 }
  }

  close() {
    super.close()
    this.#h.disable?.()
  }

  start() {
    this.#h?.enable?.()
    return super.start()
  }
}

/**
 * Process CPU: `process.cpuUsage()` (user + system µs) over wall time (`performance.now()`)
 * since the previous reading, every `intervalMs` (default 500), reported as `{cpu}` in cores
 * (1.0 = one core busy the whole interval; above 1 with worker threads).
 *
 * Options: `{targets, intervalMs, cpuUsage, now, start}`; `cpuUsage()` (cumulative
 * `{user, system}` µs) and `now()` (ms) inject the sources.
 */
class CpuProbe extends Probe {
  #cpuUsage
  #now
  #lastCpu
  #lastAt
  constructor(options) {
    const o = knownKeys(options, ['targets', 'intervalMs', 'cpuUsage', 'now', 'start'], 'CpuProbe')
    super(o.targets, msArg(o.intervalMs, 'intervalMs', 500), 'CpuProbe')
    for (const k of ['cpuUsage', 'now']) {
      if (o[k] !== undefined && o[k] !== null && typeof o[k] !== 'function') throw new TypeError(`${k} must be a function, got ${describe(o[k])}`)
    }
    this.#cpuUsage = o.cpuUsage ?? (() => process.cpuUsage())
    this.#now = o.now ?? (() => performance.now())
    this.#mark()
    if (o.start !== false) this.start()
  }

  #mark() {
    const u = this.#cpuUsage()
    this.#lastCpu = u.user + u.system
    this.#lastAt = this.#now()
  }

  read() {
    const before = this.#lastCpu
    const at = this.#lastAt
    this.#mark()
    const wallMs = this.#lastAt - at
    if (!(wallMs > 0)) return undefined
    return { cpu: Math.max(0, (this.#lastCpu - before) / 1000 / wallMs) }
  }

  /** The reading of an idle process (reported when the probe stops). */
  idle() {
    return { cpu: 0 }
  }
}

// ----- classification and deadlines -----------------------------------------------------------

/** The first value of header `name` (lower case) of `req`, or `undefined`. */
function header(req, name) {
  const v = req.headers?.[name]
  return Array.isArray(v) ? v[0] : v
}

/** The path of `req` (`originalUrl` under an Express mount), without its query. */
function pathOf(req) {
  const url = req.originalUrl ?? req.url ?? '/'
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}

/** Whether `path` is `prefix` or below it (`/api` matches `/api` and `/api/x`, not `/apix`). */
function under(path, prefix) {
  if (!path.startsWith(prefix)) return false
  return path.length === prefix.length || prefix.endsWith('/') || path[prefix.length] === '/'
}

/**
 * Checks `cls` against the bulkhead's class table by a dry run (the core's option parser,
 * counting nothing): a `RangeError` / `TypeError` naming `what`.
 */
function checkClass(bh, cls, what) {
  try {
    bh.wouldAdmit({ admissionClass: cls })
  } catch (e) {
    const err = new e.constructor(`${what}: ${e.message}`)
    throw err
  }
  return cls
}

/**
 * `classify` as `(req) => class name | index | undefined`:
 * - a string: a header whose value is a class name (a value that names no class of the
 *   bulkhead takes `defaultClass`: a client cannot make its request fail by a bad value). A
 *   client can name any class this way: class by a header your own proxy sets (and strips
 *   from outside requests), or by route;
 * - an object or a Map of path prefix → class: the longest prefix of the path that matches;
 * - a function `(req) => name | index | undefined | null`: its answer; one that names no class
 *   of the bulkhead takes `defaultClass`, as Python's middleware does (a function that throws
 *   is an error of the request).
 */
function classifier(classify, bh, dflt) {
  if (classify === undefined || classify === null) return () => dflt
  if (typeof classify === 'function') {
    const names = new Set(bh.classNames.filter((n) => typeof n === 'string'))
    const count = Math.max(1, bh.classNames.length)
    return (req) => {
      const c = classify(req)
      if (typeof c === 'string' && names.has(c)) return c
      if (Number.isInteger(c) && c >= 0 && c < count) return c
      return dflt
    }
  }
  if (typeof classify === 'string') {
    if (!TOKEN.test(classify)) throw new TypeError(`classify: a header name must be an HTTP token, got ${JSON.stringify(classify)}`)
    const name = classify.toLowerCase()
    const known = new Set(bh.classNames.filter((n) => typeof n === 'string'))
    return (req) => {
      const v = header(req, name)
      return v !== undefined && known.has(v) ? v : dflt
    }
  }
  if (typeof classify === 'object' && !Array.isArray(classify)) {
    const entries = classify instanceof Map ? [...classify] : Object.entries(classify)
    for (const [prefix, cls] of entries) {
      if (typeof prefix !== 'string' || !prefix.startsWith('/')) {
        throw new TypeError(`classify: a route prefix must be a path starting with '/', got ${JSON.stringify(prefix)}`)
      }
      checkClass(bh, cls, `classify[${JSON.stringify(prefix)}]`)
    }
    // Longest first: the most specific prefix wins.
    entries.sort((a, b) => b[0].length - a[0].length)
    return (req) => {
      const path = pathOf(req)
      for (const [prefix, cls] of entries) {
        if (under(path, prefix)) return cls
      }
      return dflt
    }
  }
  throw new TypeError(`classify must be a header name, a map of route prefix → class, or a function (req) => class, got ${describe(classify)}`)
}

/**
 * A `grpc-timeout` header value as ms (`'1500m'` → 1500, `'2S'` → 2000, `'0n'` → 0), or
 * `undefined` for a malformed one (not 1–8 ASCII digits then one of `H M S m u n`): no budget,
 * as gRPC servers treat it. The core's one parser (`hullguard_core::deadline::
 * parse_grpc_timeout`), the inverse of the grpc-timeout that `withBulkhead`'s `deadlineHeader`
 * sends (rounded down, so a round trip never extends a deadline); Python's and the tower
 * layer's are the same.
 */
function parseGrpcTimeout(value) {
  return typeof value === 'string' ? native.parseGrpcTimeout(value) ?? undefined : undefined
}

/**
 * The absolute deadline (ms, `performance.now()` scale) of a request whose header `name`
 * holds a grpc-timeout value; `undefined` without the header or for a malformed value.
 */
function deadlineOf(req, name) {
  const ms = parseGrpcTimeout(header(req, name))
  return ms === undefined ? undefined : nowMs() + ms
}

/**
 * The response to a refused admission (`result`: `admit()`'s `{ok: false, reason, detail,
 * error}`; `classNames`: the bulkhead's, to name the class): `{status, headers, body}` —
 * status `detail.httpStatus` (the core's table: 429 `rate_limit`, else 503; 503 when the
 * refusal has no detail), `Retry-After` (whole seconds, rounded up) only when the core gave an
 * honest estimate (`detail.retryAfterMs`), and the JSON body of every binding's edge:
 * `{"reason", "bound", "code", "class", "retry_after"?}` (`class` the refused class's name, or
 * its index when unnamed, `null` without classes; `retry_after` in seconds). For other
 * frameworks too.
 */
function rejectionResponse(result, classNames = []) {
  const d = result.detail ?? null
  const headers = { 'content-type': 'application/json' }
  const cls = d?.class?.class
  const body = {
    reason: d?.reason ?? result.reason,
    bound: d?.bound ?? null,
    code: result.error?.code ?? null,
    class: cls === undefined ? null : (classNames[cls] ?? cls),
  }
  const retryAfterMs = d?.retryAfterMs ?? null
  if (retryAfterMs !== null) {
    body.retry_after = retryAfterMs / 1000
    headers['retry-after'] = String(Math.max(0, Math.ceil(retryAfterMs / 1000)))
  }
  return { status: d?.httpStatus ?? 503, headers, body: JSON.stringify(body) }
}

/** The outcome of a finished response, by the core's rule. */
function statusOutcome(res) {
  const s = res.statusCode
  return Number.isInteger(s) && s >= 0 ? native.outcomeForHttpStatus(s) : 'success'
}

/**
 * One request's hold: the wait's abort controller and, once admitted, its permit; released
 * once at the first end (`finish`, `close`, `fail`).
 */
class Hold {
  constructor(res) {
    this.res = res
    this.permit = null
    this.ac = new AbortController()
    this.over = false
    // The handler's work still runs (`node:http` handler's promise pending): a client that
    // goes away does not end the hold before the work does — the limit bounds work in
    // flight, not open connections (as Python's middleware, which releases when the app ends).
    this.busy = false
    this.deferred = undefined
    this.onFinish = () => this.end(statusOutcome(res))
    this.onClose = () => {
      const outcome = res.writableFinished ? statusOutcome(res) : 'ignored'
      if (this.busy && this.permit !== null) this.deferred = outcome
      else this.end(outcome)
    }
    res.once('finish', this.onFinish)
    res.once('close', this.onClose)
  }

  /** The handler's work is `p`: a disconnect's release waits until it settles. */
  busyWith(p) {
    if (this.over) return
    this.busy = true
    const done = () => {
      this.busy = false
      if (this.deferred !== undefined) this.end(this.deferred)
    }
    p.then(done, done)
  }

  /** Ends the hold: releases the permit with `outcome`, or aborts the wait. Idempotent. */
  end(outcome) {
    if (this.over) return
    this.over = true
    this.res.off('finish', this.onFinish)
    this.res.off('close', this.onClose)
    if (this.permit !== null) this.permit.release({ outcome })
    else this.ac.abort()
  }

  /** Takes the granted permit; a request that ended meanwhile releases it at once. */
  admitted(permit) {
    this.permit = permit
    if (this.over) permit.release({ outcome: 'ignored' })
  }
}

const kState = Symbol('hullguard.edge')

// ----- the admission ------------------------------------------------------------------------

const ADMISSION_KEYS = ['bulkhead', 'classify', 'defaultClass', 'deadlineHeader', 'queueTimeoutMs', 'lagProbe', 'cpuProbe', 'onError']

/** A probe option: `true` / an options object → a probe started here; a probe → used as given. */
function probeArg(v, Kind, bh, name) {
  if (v === undefined || v === null || v === false) return [undefined, false]
  if (v instanceof Probe) return [v.add(bh), false]
  if (v === true) return [new Kind({ targets: bh }), true]
  if (typeof v === 'object' && !Array.isArray(v)) {
    if ('targets' in v) throw new TypeError(`${name}: targets is the bulkhead (leave it out)`)
    return [new Kind({ ...v, targets: bh }), true]
  }
  throw new TypeError(`${name} must be true, a ${Kind.name} options object or a ${Kind.name}, got ${describe(v)}`)
}

/** The default `onError` of the `node:http` handler: 500 (or the connection closed) and a warning. */
function defaultOnError(err, req, res) {
  process.emitWarning(`hullguard: request handler failed: ${err && err.stack ? err.stack : err}`, { code: 'HULLGUARD_HANDLER' })
  if (res.headersSent) res.destroy()
  else res.writeHead(500, { 'content-type': 'application/json; charset=utf-8' }).end('{"error":"internal_error"}')
}

/**
 * Edge admission of one bulkhead (see the module notes). Options:
 * - `bulkhead` (required): a hullguard `Bulkhead`;
 * - `classify`: a header name, a map of route prefix → class, or `(req) => class`; `defaultClass`
 *   the class of a request it does not class (default: the bulkhead's default, class 0);
 * - `deadlineHeader`: a header name (e.g. `'grpc-timeout'`) whose grpc-timeout value becomes the
 *   request's budget (off by default);
 * - `queueTimeoutMs`: the queue wait of each request (default the bulkhead's);
 * - `lagProbe`, `cpuProbe`: `true`, probe options (`{intervalMs, …}`), or a probe of yours (its
 *   targets gain the bulkhead; `close()` leaves it running);
 * - `onError(err, req, res)`: the `node:http` handler's error handling (default: 500, or the
 *   connection closed if the response started, and a process warning).
 *
 * @throws {TypeError|RangeError} naming a bad option (classes and `queueTimeoutMs` are checked
 *   by the core's option parser, by a dry run that counts nothing).
 */
class EdgeAdmission {
  #bh
  #names
  #classify
  #header
  #queueTimeoutMs
  #onError
  #own = []
  #borrowed = []
  #fastify
  constructor(options) {
    if (options === undefined || options === null) throw new TypeError('admission needs options with a bulkhead')
    const o = knownKeys(options, ADMISSION_KEYS, 'admission')
    const { Bulkhead } = hullguard()
    if (!(o.bulkhead instanceof Bulkhead)) throw new TypeError(`admission: bulkhead must be a hullguard Bulkhead, got ${describe(o.bulkhead)}`)
    const bh = o.bulkhead
    this.#bh = bh
    this.#names = bh.classNames
    const dflt = o.defaultClass ?? undefined
    if (dflt !== undefined) checkClass(bh, dflt, 'defaultClass')
    this.#classify = classifier(o.classify, bh, dflt)
    const h = o.deadlineHeader
    if (h === undefined || h === null || h === false) this.#header = undefined
    else if (typeof h === 'string' && TOKEN.test(h)) this.#header = h.toLowerCase()
    else throw new TypeError(`deadlineHeader must be a header name (e.g. 'grpc-timeout'), or false / null for none, got ${JSON.stringify(h)}`)
    this.#queueTimeoutMs = o.queueTimeoutMs ?? undefined
    if (this.#queueTimeoutMs !== undefined) {
      try {
        bh.wouldAdmit({ queueTimeoutMs: this.#queueTimeoutMs })
      } catch (e) {
        throw new e.constructor(`admission: ${e.message}`)
      }
    }
    if (o.onError !== undefined && o.onError !== null && typeof o.onError !== 'function') {
      throw new TypeError(`onError must be a function (err, req, res), got ${describe(o.onError)}`)
    }
    this.#onError = o.onError ?? defaultOnError
    for (const [v, Kind, name] of [
      [o.lagProbe, EventLoopLagProbe, 'lagProbe'],
      [o.cpuProbe, CpuProbe, 'cpuProbe'],
    ]) {
      const [probe, own] = probeArg(v, Kind, bh, name)
      if (probe !== undefined) (own ? this.#own : this.#borrowed).push(probe)
    }
  }

  /** The bulkhead. */
  get bulkhead() {
    return this.#bh
  }

  /** The probes in use (started here or given). */
  get probes() {
    return [...this.#own, ...this.#borrowed]
  }

  /**
   * Admits one request: `subject` is what `classify` gets (`req`, or Fastify's `request`),
   * `res` the `http.ServerResponse`. Calls `admitted(deadline)` (`undefined`: none) once the
   * permit is held, `refused(result)` with `admit()`'s refusal (not for a client that went away
   * while queued), `failed(err)` when classifying or the admission options fail.
   */
  enter(subject, res, admitted, refused, failed) {
    let hold, opts, at
    try {
      const cls = this.#classify(subject)
      at = this.#header === undefined ? undefined : deadlineOf(subject, this.#header)
      hold = new Hold(res)
      opts = { signal: hold.ac.signal }
      if (cls !== undefined) opts.admissionClass = cls
      if (at !== undefined) opts.deadline = at
      if (this.#queueTimeoutMs !== undefined) opts.queueTimeoutMs = this.#queueTimeoutMs
    } catch (e) {
      hold?.end('ignored')
      failed(e)
      return
    }
    this.#bh.admit(opts).then(
      (r) => {
        if (r.ok) {
          hold.admitted(r.permit)
          if (hold.over) return
          if (subject !== null && typeof subject === 'object') subject[kState] = { hold, deadline: at }
          admitted(at)
        } else {
          hold.end('ignored')
          // A client that went away while queued gets nothing.
          if (r.reason !== 'aborted' && !res.destroyed) refused(r)
        }
      },
      (e) => {
        hold.end('ignored')
        failed(e)
      },
    )
  }

  /**
   * A `node:http` request listener: `handler(req, res)` behind the admission
   * (`http.createServer(edge.handler(fn))`). A handler that throws or rejects releases the
   * permit (`failure`) and goes to `onError`. The permit is held until the response finishes,
   * or — when the client goes away first — until the handler's returned promise settles (the
   * limit bounds the work in flight; a callback-style handler that returns nothing is released
   * at the disconnect).
   */
  handler(fn) {
    if (typeof fn !== 'function') throw new TypeError(`handler must be a function (req, res), got ${describe(fn)}`)
    const onError = this.#onError
    const fail = (req, res, e) => {
      req[kState]?.hold.end('failure')
      try {
        onError(e, req, res)
      } catch (e2) {
        process.emitWarning(`hullguard: onError threw: ${e2 && e2.stack}`, { code: 'HULLGUARD_HANDLER' })
        res.destroy()
      }
    }
    const refused = (res, r) => {
      const { status, headers, body } = rejectionResponse(r, this.#names)
      res.writeHead(status, headers).end(body)
    }
    return (req, res) => {
      this.enter(
        req,
        res,
        (at) => {
          let ret
          try {
            ret = at === undefined ? fn(req, res) : withDeadlineAt(at, () => fn(req, res))
          } catch (e) {
            fail(req, res, e)
            return
          }
          if (ret !== null && typeof ret === 'object' && typeof ret.then === 'function') {
            ret.then(undefined, (e) => fail(req, res, e))
            // The permit covers the handler's work: a client that disconnects first releases
            // it when the promise settles, not at the disconnect.
            req[kState]?.hold.busyWith(Promise.resolve(ret))
          }
        },
        (r) => refused(res, r),
        (e) => fail(req, res, e),
      )
    }
  }

  /**
   * An Express middleware (`app.use(edge.express())`): refused requests get the response,
   * admitted ones go on (`next()`, inside the request's deadline). An error classifying goes
   * to `next(err)`. Express gives no end-of-handler signal: the permit is released when the
   * response finishes or the client goes away (stop the work on `req`'s `'close'`, or use
   * `.handler(fn)`, whose promise bounds the hold).
   */
  express() {
    return (req, res, next) => {
      this.enter(
        req,
        res,
        (at) => (at === undefined ? next() : withDeadlineAt(at, () => next())),
        (r) => {
          const { status, headers, body } = rejectionResponse(r, this.#names)
          res.writeHead(status, headers).end(body)
        },
        (e) => next(e),
      )
    }
  }

  /**
   * A Fastify plugin (`fastify.register(edge.fastify)`; not encapsulated: it guards every route
   * of the instance it is registered on): an `onRequest` hook admits, a `preHandler` hook runs
   * the rest inside the request's deadline, and `onClose` closes this admission. `classify`
   * gets Fastify's `request`.
   */
  get fastify() {
    if (this.#fastify !== undefined) return this.#fastify
    const self = this
    function hullguardEdge(instance, _opts, done) {
      instance.addHook('onRequest', (request, reply, next) => {
        self.enter(
          request,
          reply.raw,
          () => next(),
          (r) => {
            const { status, headers, body } = rejectionResponse(r, self.#names)
            reply.code(status).headers(headers).send(body)
          },
          (e) => next(e),
        )
      })
      instance.addHook('preHandler', (request, _reply, next) => {
        const at = request[kState]?.deadline
        if (at === undefined) next()
        else withDeadlineAt(at, () => next())
      })
      instance.addHook('onClose', (_instance, closed) => {
        self.close()
        closed()
      })
      done()
    }
    // fastify-plugin's marks: the hooks apply to the instance it is registered on.
    hullguardEdge[Symbol.for('skip-override')] = true
    hullguardEdge[Symbol.for('fastify.display-name')] = 'hullguard-edge'
    this.#fastify = hullguardEdge
    return hullguardEdge
  }

  /** Stops the probes started here and detaches the bulkhead from given ones. Idempotent. */
  close() {
    for (const p of this.#own) p.close()
    for (const p of this.#borrowed) p.remove(this.#bh)
    this.#own = []
    this.#borrowed = []
  }
}

/**
 * `admission(options)`: an `EdgeAdmission` (`.handler(fn)`, `.express()`, `.fastify`,
 * `.close()`). `admission(handler, options)`: the `node:http` listener of `handler` at once
 * (`http.createServer(admission(fn, {bulkhead}))`), with `close()` and `admission` on it.
 */
function admission(handlerOrOptions, options) {
  if (typeof handlerOrOptions !== 'function') return new EdgeAdmission(handlerOrOptions)
  const edge = new EdgeAdmission(options)
  const listener = edge.handler(handlerOrOptions)
  listener.admission = edge
  listener.close = () => edge.close()
  return listener
}

module.exports = { admission, EdgeAdmission, EventLoopLagProbe, CpuProbe, rejectionResponse, parseGrpcTimeout }
