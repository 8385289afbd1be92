'use strict'
/**
 * One limit per host (issue 19, docs/design.md §14): `HostBulkhead`, a bulkhead whose limit holds
 * across every process on the host that opens the same name — `cluster` workers, forked or
 * separately started processes, containers sharing a volume — and across the `worker_threads` of
 * each process. The Rust crate hullguard-host decides everything (a lease ledger in a shared
 * segment: FIFO across processes, a SIGKILLed holder's permits back within about one probe
 * period, a stopped one's after the lease TTL); the addon marshals (native src/host.rs) and this
 * file only plumbs Promises and AbortSignals. Linux only: elsewhere the constructor throws.
 *
 * The API follows the local `Bulkhead`'s where it applies: camelCase options with `…Ms`
 * durations, `tryAcquire()` → a permit or `null` (`concurrency_limit`), `acquire()` → a Promise
 * (argument errors reject it), rejections as `BulkheadError` with the same reasons and codes
 * (`BULKHEAD_QUEUE_TIMEOUT`, …), a cancelled acquire rejecting with `signal.reason`.
 *
 * Waiting: a queued `acquire()` is the crate's future, kept by the addon under an id and polled
 * again when the crate wakes it (its turn across the host, its deadline: the crate's keeper
 * thread), through a threadsafe function that calls `onHostWake(id)` here. While one is pending
 * the process stays alive (what grants it comes from other processes; its queue timeout bounds
 * the wait). Aborting drops the future: its place in the host's queue is given up.
 *
 * Processes and threads: the crate attaches each process once (one slot, shared by every handle
 * and worker thread of the process; freed by the process's death, never by a handle). Each
 * handle has its own queue: `close()` and `drain()` are the handle's.
 */

const native = require('./native.js')
const { ambient } = require('./ambient.js')

/** Whether this platform has the host bulkhead (the addon is built with it on Linux only). */
const SUPPORTED = typeof native.NativeHostBulkhead === 'function'

/** Only this module makes HostPermits. */
const kInternal = Symbol('hullguard.host.internal')

/** Pending acquires of this isolate, by the addon's id. */
const waiting = new Map()

/** The addon's report that pending acquire `id` may have settled (on this thread). */
function onHostWake(id) {
  waiting.get(id)?.settled()
}

if (SUPPORTED) native.hostInit(onHostWake)

function unsupported() {
  const e = new Error(
    `hullguard: HostBulkhead needs Linux (shared memory, OFD locks, futexes); this is ${process.platform}`,
  )
  e.code = 'HOST_UNSUPPORTED'
  return e
}

// ----- errors ---------------------------------------------------------------------------------

/**
 * A release that did not count: `code` `'BULKHEAD_STALE_LEASE'` (the lease expired or was
 * reclaimed first — the process was stopped past the lease TTL: its permits were already
 * returned, nothing was released twice) or `'BULKHEAD_FOREIGN_LEASE'` (a permit of another
 * process). The message is the crate's.
 */
class LeaseError extends Error {
  constructor(code, message) {
    super(message)
    this.name = 'LeaseError'
    this.code = code
  }
}

// ----- abort signals --------------------------------------------------------------------------

const { abortReason, signalOf, watch, unwatch } = require('./abort.js')

// ----- permits --------------------------------------------------------------------------------

/**
 * Permits held on a host bulkhead (made only by `acquire()` / `tryAcquire()`). `release()`
 * returns `true`, `false` when already released, and throws a `LeaseError` when the release did
 * not count (a stale or foreign lease). A permit garbage-collected while held is released then.
 */
class HostPermit {
  #p
  constructor(token, p) {
    if (token !== kInternal) throw new TypeError('HostPermit is created by acquire()/tryAcquire()')
    this.#p = p
  }

  /** Permits held (0 once released). */
  get weight() {
    return this.#p.weight
  }

  /** Budget units held (0 once released). */
  get cost() {
    return this.#p.cost
  }

  get released() {
    return this.#p.released
  }

  /**
   * Returns the permits to the host: `true`; `false` if already released.
   * @throws {LeaseError} `BULKHEAD_STALE_LEASE` / `BULKHEAD_FOREIGN_LEASE`.
   */
  release() {
    const refusal = this.#p.release()
    if (refusal === null) return true
    if (refusal.code === 'BULKHEAD_ALREADY_RELEASED') return false
    throw new LeaseError(refusal.code, refusal.message)
  }

  [Symbol.for('nodejs.dispose')]() {
    if (!this.#p.released) this.release()
  }
}
if (typeof Symbol.dispose === 'symbol') {
  HostPermit.prototype[Symbol.dispose] = HostPermit.prototype[Symbol.for('nodejs.dispose')]
}

// ----- pending acquires -----------------------------------------------------------------------

/** One queued `acquire()`: settled by the addon's wake, or cancelled by its signal. */
class HostWaiter {
  constructor(id, signal, resolve, reject) {
    this.id = id
    this.signal = signal
    this.resolve = resolve
    this.reject = reject
    waiting.set(id, this)
    watch(signal, this)
  }

  settled() {
    let p
    try {
      p = native.hostPoll(this.id)
    } catch (e) {
      this.done().reject(e)
      return
    }
    if (p === null) return
    const { resolve, reject } = this.done()
    // Granted as its signal aborted (the abort's listener had not run yet): the permits go
    // straight back, never leaked.
    if (this.signal?.aborted) {
      p.release()
      reject(abortReason(this.signal))
      return
    }
    resolve(new HostPermit(kInternal, p))
  }

  aborted() {
    native.hostCancel(this.id)
    this.done().reject(abortReason(this.signal))
  }

  /** Off the table and the signal: returns its settle functions (and lets go of them). */
  done() {
    waiting.delete(this.id)
    unwatch(this.signal, this)
    const out = { resolve: this.resolve, reject: this.reject }
    this.resolve = this.reject = noop
    return out
  }
}

function noop() {}

// ----- HostBulkhead ---------------------------------------------------------------------------

/** How often a pending `drain()` looks (ms). */
const DRAIN_POLL_MS = 10

/**
 * A bulkhead shared by every process (and worker thread) on the host that opens `name`: at most
 * `maxConcurrent` permits held host-wide, FIFO across processes.
 *
 * Options (`undefined` / `null`: the default): `maxConcurrent` (host-wide, default 10),
 * `maxQueue` (this process's waiters, default 100), `queueTimeoutMs` (default 30 000), `budget`
 * (host-wide units), `leaseTtlMs` (default 10 000), `beatMs` (1 000), `probeMs` (250), `slots`
 * (256), `dir` (`'/dev/shm'`), `mode` (`0o600`), `onMismatch` (`'error'` | `'adopt'`). The
 * host-wide ones must match an existing segment's unless `onMismatch: 'adopt'`.
 *
 * @throws {TypeError} an unknown option or a local bulkhead's option a host bulkhead does not
 *   take (`classes`, `resilience`, …: the crate's message names it), a value of the wrong type.
 * @throws {RangeError} a value out of range, a bad name.
 * @throws {Error} `code` `'HOST_SEGMENT'` (with `kind`, `path`, `errno`): the segment file
 *   (`kind` `'permission'`, `'incompatible'`, `'mismatch'`: another host-wide setting,
 *   `'no_slot'`, `'io'`, …); `'HOST_UNSUPPORTED'` off Linux.
 */
class HostBulkhead {
  #nb
  constructor(name, opts) {
    if (!SUPPORTED) throw unsupported()
    this.#nb = new native.NativeHostBulkhead(name, opts)
  }

  /**
   * A `HostPermit` now, or `null` when not admitted at once (`concurrency_limit`); any other
   * refusal throws its `BulkheadError`. `tryAcquire(weight, {cost})` or `tryAcquire({weight,
   * cost, deadline})`.
   */
  tryAcquire(weight, opts) {
    if (typeof weight !== 'number' && opts !== undefined) {
      throw new TypeError('tryAcquire takes (weight, options) or (options)')
    }
    const o = typeof weight === 'number' ? { ...requestObject(opts), weight } : weight
    const p = this.#nb.tryTake(o, ambient())
    return p === null ? null : new HostPermit(kInternal, p)
  }

  /**
   * Resolves with a `HostPermit` (`{weight, cost, queueTimeoutMs, deadline, signal}`); rejects
   * with the `BulkheadError` of a refusal (`timeout`: `BULKHEAD_QUEUE_TIMEOUT`), with
   * `signal.reason` when aborted (its place in the queue given up), or with an argument error.
   */
  acquire(opts) {
    let r, signal
    try {
      signal = signalOf(opts)
      if (signal?.aborted) {
        this.#nb.checkAcquire(opts)
        throw abortReason(signal)
      }
      r = this.#nb.acquire(opts, ambient())
    } catch (e) {
      return Promise.reject(e)
    }
    if (typeof r !== 'number') return Promise.resolve(new HostPermit(kInternal, r))
    return new Promise((resolve, reject) => new HostWaiter(r, signal, resolve, reject))
  }

  /**
   * The host's figures (every process's permits and waiters, host-wide counters) in the local
   * bulkhead's stats object, plus `inFlight`, `attached`, `slots`, `reclaimedDeadTotal`,
   * `reclaimedExpiredTotal`, `reclaimedPermitsTotal`, `staleReleasesTotal`,
   * `foreignReleasesTotal`, `localInFlight`, `localActive`, `localQueued`, `slot`, `path`. Dead
   * processes are reaped first: the figures count live holders only.
   */
  stats() {
    return this.#nb.stats()
  }

  /** Probes the other processes now and reclaims the dead ones' slots; how many. */
  reap() {
    return this.#nb.reap()
  }

  /**
   * Closes this handle: its new requests are refused `shutdown`, its waiters rejected
   * `BULKHEAD_CLOSED`; held permits stay valid until released. Other handles (other worker
   * threads too) and other processes are not affected.
   */
  /**
   * The host's metric samples for `hullguard/metrics` (`Bulkhead._metricSamples`'s shape): the
   * host's figures from this process, live holders only (C37).
   */
  _metricSamples() {
    return this.#nb.metricSamples()
  }

  close() {
    this.#nb.close()
  }

  /**
   * Resolves `{drained, active, queued}` (`active`, `queued`: this process's permits held and
   * waiters) once this process holds no permit of the host bulkhead and this handle has no waiter
   * (`drained: true`), or after `timeoutMs`
   * (`drained: false`): a number or `{timeoutMs}`, `undefined` / `Infinity` = until idle, `0` =
   * report at once. Does not close (graceful shutdown is `close()` then `drain()`). Rejects
   * (never throws) for a bad argument.
   */
  drain(timeoutMs) {
    const nb = this.#nb
    let ms
    try {
      ms = nb.drainTimeoutMs(typeof timeoutMs === 'number' ? { timeoutMs } : (timeoutMs ?? undefined))
    } catch (e) {
      return Promise.reject(e)
    }
    // The crate has no drain wake-up: this process's holds are looked at every DRAIN_POLL_MS.
    const now = nb.drainNow()
    if (now || ms === 0) return Promise.resolve(nb.drainReport(now))
    const until = performance.now() + ms
    return new Promise((resolve) => {
      const look = () => {
        if (nb.drainNow()) return resolve(nb.drainReport(true))
        const left = until - performance.now()
        if (left <= 0) return resolve(nb.drainReport(false))
        setTimeout(look, Math.min(DRAIN_POLL_MS, left)).unref?.()
      }
      setTimeout(look, Math.min(DRAIN_POLL_MS, ms)).unref?.()
    })
  }

  /** Whether `close()` was called in this process. */
  get closed() {
    return this.#nb.closed
  }

  get name() {
    return this.#nb.name
  }

  /** The segment file. */
  get path() {
    return this.#nb.path
  }

  /** This process's slot in the segment. */
  get slot() {
    return this.#nb.slot
  }
}

/** The options of `tryAcquire(weight, options)`: an object (or nothing). */
function requestObject(opts) {
  if (opts === undefined || opts === null) return {}
  if (typeof opts !== 'object') throw new TypeError(`options must be an object, got ${typeof opts}`)
  return opts
}

/**
 * Reclaims the slots of dead processes of host bulkhead `name` (in `dir`, default `/dev/shm`)
 * without attaching — for a `cluster` primary's `exit` handler. Returns how many.
 * @throws {Error} `code` `'HOST_SEGMENT'` when there is no such segment (or it is unreadable).
 */
function reapHost(name, opts) {
  if (!SUPPORTED) throw unsupported()
  return native.reapHost(name, opts)
}

module.exports = {
  HostBulkhead,
  HostPermit,
  LeaseError,
  reapHost,
}
