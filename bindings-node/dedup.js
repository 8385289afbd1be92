'use strict'
/**
 * In-flight deduplication (single-flight) over a bulkhead: `new SingleFlight(bulkhead)`
 * (`require('hullguard/dedup')`; issue 16, item 3).
 *
 * Concurrent calls that name the same work (a **caller-supplied key**: hullguard never hashes a
 * prompt) run it once, under one admission, and share its result:
 *
 *     const sf = new SingleFlight(bh)
 *     const answer = await sf.run(`summary:${docId}`, (signal) => summarise(docId, { signal }), { cost: 1500 })
 *
 * The rules (each one a failure single-flight libraries and async-bulkhead-llm have shipped):
 *
 * - **Partitioned by everything that changes the admission.** Calls share a flight only when
 *   their partition is equal: the key, `weight`, `admissionClass`, the per-call `observe` mode
 *   (`undefined` and 'off' are the same) and the **cost bucket**: costs 0 | 1 | 2–3 | 4–7 | 8–15
 *   | … (powers of two: the bit length of the cost), so two estimates of one request that differ
 *   by less than a factor of two share, and a call reserving far more never rides on a cheaper
 *   admission. `new SingleFlight(bh, { costBucket })` replaces the rule (`costBucket(cost)` →
 *   a string or number; `(c) => c` shares exact costs only). An enforce-mode call never joins
 *   an observed (shadow) one; when the bulkhead exposes its own mode (`bh.observe`), that mode
 *   is part of the partition too, so a `setObserve` switch starts new flights.
 * - **One admission, made by the shared work**: `bulkhead.acquire({weight, cost,
 *   admissionClass, observe, signal})`, then `fn(signal)` while the permit is held; released
 *   with fn's outcome ('success', 'failure', or 'ignored' when it ended by the shared signal's
 *   abort). The flight leaves the table when its result is known (nothing is cached).
 * - **A refusal is not shared.** When the admission is refused (a `BulkheadError`), the caller
 *   that started the flight gets it and every other waiter tries admission itself (one of them
 *   becomes the new leader; at most one round per waiter).
 * - **Aborts are per caller.** A caller's own `signal` rejects that caller only, with its own
 *   abort reason (never a foreign one); the others keep waiting. The `signal` handed to `fn` is
 *   aborted only when **every** waiter has left; the permit is released once fn settles.
 * - **fn's errors are shared**: every waiter gets the same rejection.
 * - **Usage**: `getUsage(result)` (e.g. `hullguard/llm`'s `getUsage`) gives the units the work
 *   used; the permit is released with that usage, the rest refunded (as `bh.run`'s `getUsage`).
 * - **Streaming results** (a `ReadableStream`, a Node `Readable` or any async iterable; a fetch
 *   `Response`) have one consumer. A stream keeps the permit held until it ends ('success'),
 *   errors ('failure') or every consumer cancels it ('ignored': the source is cancelled).
 *   The first waiter (the leader, or the earliest one still there) gets it; every other waiter
 *   rejects with `UnshareableResultError` unless it passed `tee: true`: then it gets its own copy
 *   of the same kind (each item kept until the slowest consumer read it). A `Response` is
 *   teed with `clone()` (its permit is released when fn settles: its body is not tracked).
 *   Other results (arrays, objects holding streams) are shared by reference.
 *
 * `sf.size` is the number of flights in the table, `sf.hits` how many calls joined one.
 */

const { BulkheadError } = require('./index.js')
const ambient = require('./ambient.js')
const { errorOutcome } = require('./outcome.js')

/**
 * A follower's shared result is a single-consumer stream and the caller did not pass
 * `tee: true`. Not a `BulkheadError`: the call was admitted and ran; only its result could not
 * be shared. `key` is the caller's key.
 */
class UnshareableResultError extends TypeError {
  constructor(key) {
    super(`the result of flight ${JSON.stringify(key)} is a single-consumer stream; pass tee: true to give every waiter its own copy`)
    this.name = 'UnshareableResultError'
    this.code = 'UNSHAREABLE_RESULT'
    this.key = key
  }
}

/** The default cost bucket: the bit length of `cost` (0 | 1 | 2–3 | 4–7 | …). */
function costBucket(cost) {
  let n = 0
  for (let c = cost; c >= 1; c = Math.floor(c / 2)) n++
  return n
}

const REFUSED = Symbol('refused')
const OPTION_NAMES = new Set(['weight', 'cost', 'admissionClass', 'observe', 'signal', 'tee', 'getUsage'])

function lastWaiterLeft() {
  return new DOMException('every waiter of the flight left', 'AbortError')
}

function abortReason(signal) {
  return signal.reason !== undefined ? signal.reason : new DOMException('This operation was aborted', 'AbortError')
}

function checkOptions(opts) {
  if (opts === undefined || opts === null) return {}
  if (typeof opts !== 'object') throw new TypeError(`options must be an object, got ${typeof opts}`)
  for (const name of Object.keys(opts)) {
    if (!OPTION_NAMES.has(name)) {
      throw new TypeError(`unknown option "${name}" (known: ${[...OPTION_NAMES].map((n) => `"${n}"`).join(', ')})`)
    }
  }
  const { weight, cost, admissionClass, observe, signal, tee } = opts
  if (weight !== undefined && typeof weight !== 'number') throw new TypeError(`weight must be a number, got ${typeof weight}`)
  if (admissionClass !== undefined && typeof admissionClass !== 'string' && typeof admissionClass !== 'number') {
    throw new TypeError(`admissionClass must be a class name (string) or index (number), got ${typeof admissionClass}`)
  }
  if (observe !== undefined && typeof observe !== 'string') throw new TypeError(`observe must be a string, got ${typeof observe}`)
  if (cost !== undefined && (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 0)) {
    throw new RangeError(`cost must be an integer >= 0 (at most ${Number.MAX_SAFE_INTEGER}), got ${String(cost)}`)
  }
  if (signal !== undefined && (typeof signal?.aborted !== 'boolean' || typeof signal.addEventListener !== 'function')) {
    throw new TypeError('signal must be an AbortSignal')
  }
  if (tee !== undefined && typeof tee !== 'boolean') throw new TypeError(`tee must be a boolean, got ${typeof tee}`)
  if (opts.getUsage !== undefined && typeof opts.getUsage !== 'function') {
    throw new TypeError(`getUsage must be a function, got ${typeof opts.getUsage}`)
  }
  return opts
}

/** The acquire options of the shared work: only those given (an older bulkhead sees none). */
function admission(opts, signal) {
  const a = { signal }
  for (const name of ['weight', 'cost', 'admissionClass', 'observe']) {
    if (opts[name] !== undefined) a[name] = opts[name]
  }
  return a
}

/**
 * Releases `permit` ('success') with `getUsage(value)` units when known. Released whatever
 * happens: a `getUsage` that throws, or a usage the binding refuses, still releases (the whole
 * cost charged), then throws.
 */
function settle(permit, value, getUsage) {
  try {
    const usage = getUsage === undefined ? undefined : getUsage(value)
    permit.release(usage === undefined || usage === null ? { outcome: 'success' } : { outcome: 'success', usage })
  } catch (e) {
    if (!permit.released) permit.release({ outcome: 'success' })
    throw e
  }
}

class SingleFlight {
  #bh
  #bucket
  #flights = new Map()
  #hits = 0

  /**
   * @param bulkhead a hullguard `Bulkhead` (anything with its `acquire`).
   * @param opts `{ costBucket?: (cost) => string | number }` (default: powers of two).
   */
  constructor(bulkhead, opts) {
    if (typeof bulkhead?.acquire !== 'function') {
      throw new TypeError('bulkhead must be a hullguard Bulkhead (with acquire())')
    }
    const bucket = opts?.costBucket
    if (bucket !== undefined && typeof bucket !== 'function') {
      throw new TypeError(`costBucket must be a function, got ${typeof bucket}`)
    }
    for (const name of Object.keys(opts ?? {})) {
      if (name !== 'costBucket') throw new TypeError(`unknown option "${name}" (known: "costBucket")`)
    }
    this.#bh = bulkhead
    this.#bucket = bucket ?? costBucket
  }

  /** The flights in the table. */
  get size() {
    return this.#flights.size
  }

  /** How many calls joined a flight another call had started. */
  get hits() {
    return this.#hits
  }

  /**
   * Runs `fn(signal)` once per partition in flight; resolves (or rejects) every waiter with its
   * outcome. Options: `weight`, `cost`, `admissionClass`, `observe` (the shared admission, as
   * `bulkhead.acquire`; validated there), `signal` (this caller's abort), `tee` (a copy of a
   * streaming result for this caller), `getUsage` (`getUsage(result)` → the units used, or
   * `undefined`: the permit is released with that usage, the rest of `cost` refunded, as
   * `bh.run`'s; the flight's starter's is used; one that throws still releases and every
   * waiter gets its error). Rejects with this caller's own `BulkheadError`, fn's
   * error, `UnshareableResultError`, its own `signal.reason`, or a TypeError / RangeError naming
   * a bad argument.
   */
  async run(key, fn, opts) {
    if (typeof key !== 'string' && !(typeof key === 'number' && Number.isFinite(key))) {
      throw new TypeError(`key must be a string or a finite number, got ${typeof key}`)
    }
    if (typeof fn !== 'function') throw new TypeError(`fn must be a function, got ${typeof fn}`)
    const o = checkOptions(opts)
    // The shared work runs outside every budget (another caller's deadline must not cut it
    // short for the rest); this caller's own budget bounds its wait: a signal that aborts at
    // its deadline, answered with the BULKHEAD_CALL_TIMEOUT a guarded call gets there.
    const left = ambient.remainingMs()
    const budget = left === undefined ? undefined : AbortSignal.timeout(Math.ceil(left))
    const signal = budget === undefined ? o.signal : o.signal === undefined ? budget : ambient.anySignal([o.signal, budget])
    if (signal?.aborted) throw this.#reason(signal, budget)
    const partition = JSON.stringify([
      key,
      o.weight ?? 1,
      o.admissionClass ?? null,
      o.observe === undefined || o.observe === null ? 'off' : o.observe,
      this.#bucket(o.cost ?? 0),
      // The bulkhead's own observe mode when the binding exposes it (a switch between a
      // leader's admission and a follower's arrival then starts a new flight).
      this.#bh.observe ?? null,
    ])
    const me = {}
    // Each round the flight's leader leaves (refused) or every waiter gets the result.
    for (;;) {
      let flight = this.#flights.get(partition)
      if (flight === undefined) {
        flight = this.#start(partition, fn, o, me)
      } else {
        this.#hits++
      }
      flight.waiters.add(me)
      let r
      try {
        r = await this.#wait(flight, me, signal, budget)
      } finally {
        this.#leave(flight, me)
      }
      if (r.kind === REFUSED) {
        if (flight.leader === me) throw r.error
        continue
      }
      if (r.stream !== undefined) return r.stream.claim(key, o.tee === true, me)
      return r.value
    }
  }

  #start(partition, fn, o, leader) {
    const ac = new AbortController()
    const flight = { partition, ac, leader, waiters: new Set(), done: false, result: undefined }
    flight.result = ambient.outside(() => this.#work(flight, fn, o)).finally(() => {
      flight.done = true
      if (this.#flights.get(partition) === flight) this.#flights.delete(partition)
    })
    // Observed by the waiters; never an unhandled rejection when every waiter has left.
    flight.result.catch(() => {})
    this.#flights.set(partition, flight)
    return flight
  }

  async #work(flight, fn, o) {
    const signal = flight.ac.signal
    let permit
    try {
      permit = await this.#bh.acquire(admission(o, signal))
    } catch (e) {
      if (e instanceof BulkheadError) return { kind: REFUSED, error: e }
      throw e
    }
    let value
    try {
      value = await fn(signal)
    } catch (e) {
      permit.release({ outcome: errorOutcome(e, signal) })
      throw e
    }
    const stream = Shared.of(value, permit, new Set(flight.waiters))
    if (stream !== undefined) return { kind: 'stream', stream }
    settle(permit, value, o.getUsage)
    return { kind: 'value', value }
  }

  /** The flight's result for one waiter, or its own signal's abort reason. */
  /** Why `signal` aborted: the caller's reason, or this caller's budget as a call timeout. */
  #reason(signal, budget) {
    if (budget === undefined || !budget.aborted || (signal !== budget && signal.reason !== budget.reason)) {
      return abortReason(signal)
    }
    const s = this.#bh.stats()
    return new BulkheadError('call_timeout', { active: s.active, queued: s.queued, limit: s.limit, available: s.available })
  }

  #wait(flight, me, signal, budget) {
    if (signal === undefined) return flight.result
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(this.#reason(signal, budget))
      signal.addEventListener('abort', onAbort, { once: true })
      flight.result.then(
        (r) => {
          signal.removeEventListener('abort', onAbort)
          if (signal.aborted) {
            if (r.stream !== undefined) r.stream.forfeit(me)
            return
          }
          resolve(r)
        },
        (e) => {
          signal.removeEventListener('abort', onAbort)
          reject(e)
        },
      )
    })
  }

  #leave(flight, me) {
    if (!flight.waiters.delete(me) || flight.waiters.size !== 0 || flight.done) return
    // The last waiter left before the result: abort the work; the partition is free again.
    if (this.#flights.get(flight.partition) === flight) this.#flights.delete(flight.partition)
    flight.ac.abort(lastWaiterLeft())
  }
}

// ----- streaming results -----------------------------------------------------------------------

function isReadableStream(v) {
  return typeof v?.getReader === 'function' && typeof v?.tee === 'function'
}

function isResponse(v) {
  return typeof Response === 'function' && v instanceof Response
}

function isNodeReadable(v) {
  return typeof v?.pipe === 'function' && typeof v?.on === 'function' && typeof v?.read === 'function'
}

function isAsyncIterable(v) {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v[Symbol.asyncIterator] === 'function'
}

/** A branch garbage-collected while open leaves its stream (as `return()` / `cancel()` would). */
const branchGone = new FinalizationRegistry(({ shared, id }) => shared.close(id))

/**
 * A streaming result held under its permit until it ends, handed out as branches. Each item
 * stays in `buf` until every open branch read it and every waiter of the flight claimed its
 * branch or left (`expected`). One read of the source is in flight at a time (`pending`).
 */
class Shared {
  static of(value, permit, expected) {
    if (isResponse(value)) return new SharedResponse(value, permit, expected)
    let kind
    if (isReadableStream(value)) kind = 'web'
    else if (isNodeReadable(value)) kind = 'node'
    else if (isAsyncIterable(value)) kind = 'iterable'
    else return undefined
    const s = new Shared(value, kind, permit, expected)
    s.forfeit(undefined) // every waiter left already: cancel it and release now
    return s
  }

  constructor(source, kind, permit, expected) {
    this.source = source
    this.kind = kind
    this.permit = permit
    this.expected = expected
    this.handed = false
    this.buf = []
    this.base = 0
    this.cursors = new Map()
    this.pending = undefined
    this.end = undefined // { done: true } or { error }
    this.settled = false
    this.reader = undefined
  }

  /** A waiter of the flight takes its branch (`waiter`: its token in `expected`). */
  claim(key, tee, waiter) {
    this.expected.delete(waiter)
    if (this.handed && !tee) {
      this.#abandonIfUnused()
      throw new UnshareableResultError(key)
    }
    this.handed = true
    const id = {}
    this.cursors.set(id, this.base)
    const branch = this.#wrap(id)
    branchGone.register(branch, { shared: this, id })
    return branch
  }

  /** A waiter of the flight left without claiming its branch. */
  forfeit(waiter) {
    this.expected.delete(waiter)
    this.#abandonIfUnused()
  }

  settle(outcome) {
    if (this.settled) return
    this.settled = true
    this.permit.release({ outcome })
  }

  #open() {
    return this.expected.size > 0 || this.cursors.size > 0
  }

  #abandonIfUnused() {
    if (this.settled || this.#open()) return
    this.settle('ignored')
    this.#cancelSource()
  }

  #cancelSource() {
    const reason = lastWaiterLeft()
    try {
      if (this.reader !== undefined) this.reader.cancel(reason).catch(() => {})
      else if (this.kind === 'web') this.source.cancel(reason).catch(() => {})
      else if (this.kind === 'node') this.source.destroy()
      else {
        // Also when never read: an SDK stream holds its connection before the first read.
        this.iterator ??= this.source[Symbol.asyncIterator]()
        if (typeof this.iterator.return === 'function') Promise.resolve(this.iterator.return()).catch(() => {})
        if (typeof this.source.controller?.abort === 'function') this.source.controller.abort()
      }
    } catch {
      // A source whose cancel throws is gone either way.
    }
  }

  #readSource() {
    if (this.kind === 'web') {
      this.reader ??= this.source.getReader()
      return this.reader.read()
    }
    this.iterator ??= this.source[Symbol.asyncIterator]()
    return this.iterator.next()
  }

  #advance() {
    this.pending ??= Promise.resolve()
      .then(() => this.#readSource())
      .then(
        (r) => {
          this.pending = undefined
          if (r.done) {
            this.end = { done: true }
            this.settle('success')
          } else {
            this.buf.push(r.value)
          }
        },
        (error) => {
          this.pending = undefined
          this.end = { error }
          this.settle('failure')
        },
      )
    return this.pending
  }

  async next(id) {
    for (;;) {
      const at = this.cursors.get(id)
      if (at === undefined) return { done: true, value: undefined }
      if (at < this.base + this.buf.length) {
        this.cursors.set(id, at + 1)
        const value = this.buf[at - this.base]
        this.#trim()
        return { done: false, value }
      }
      if (this.end !== undefined) {
        this.close(id)
        if (this.end.error !== undefined) throw this.end.error
        return { done: true, value: undefined }
      }
      await this.#advance()
    }
  }

  #trim() {
    if (this.expected.size > 0) return
    let low = this.base + this.buf.length
    for (const at of this.cursors.values()) low = Math.min(low, at)
    if (low > this.base) {
      this.buf.splice(0, low - this.base)
      this.base = low
    }
  }

  close(id) {
    if (!this.cursors.delete(id)) return
    this.#trim()
    this.#abandonIfUnused()
  }

  #wrap(id) {
    const self = this
    const iterator = {
      next: () => self.next(id),
      return: (value) => {
        self.close(id)
        return Promise.resolve({ done: true, value })
      },
      [Symbol.asyncIterator]() {
        return this
      },
    }
    if (this.kind === 'web') {
      return new ReadableStream({
        pull: async (controller) => {
          const r = await self.next(id)
          if (r.done) controller.close()
          else controller.enqueue(r.value)
        },
        cancel: () => self.close(id),
      })
    }
    if (this.kind === 'node') {
      const { Readable } = require('node:stream')
      const r = Readable.from(iterator, { objectMode: this.source.readableObjectMode ?? true })
      r.once('close', () => self.close(id))
      return r
    }
    return iterator
  }
}

/** A fetch `Response`: the first claimer gets it, teeing claimers get `clone()`s. */
class SharedResponse {
  constructor(response, permit, expected) {
    // The clones must be taken before anyone reads the body: take them all now.
    this.copies = []
    for (let i = 1; i < expected.size; i++) this.copies.push(response.clone())
    this.response = response
    this.handed = false
    permit.release({ outcome: 'success' })
  }

  claim(key, tee) {
    if (!this.handed) {
      this.handed = true
      return this.response
    }
    const copy = this.copies.pop()
    if (!tee || copy === undefined) throw new UnshareableResultError(key)
    return copy
  }

  forfeit() {}
}

module.exports = { SingleFlight, UnshareableResultError, costBucket }
