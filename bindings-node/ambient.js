'use strict'
/**
 * Ambient deadlines (issue 17, docs/design.md §5.9): a request's whole time budget, carried
 * through its async calls in an `AsyncLocalStorage`, so that every admission on the way takes
 * what is left of it without passing it by hand.
 *
 *   await withDeadline(1500, async () => {
 *     await db.run(query)                 // queues at most until the deadline
 *     await api.run((signal) => fetch(u, { signal }))  // `signal` aborts at the deadline
 *   })
 *
 * A deadline is an **absolute time in ms on the `performance.now()` scale** (the scale of the
 * per-call `deadline` option too; the addon converts it to the core's `CLOCK_MONOTONIC` ns with
 * an offset measured once at load). `withDeadline(ms, fn)` runs `fn` with the deadline
 * `now + ms`, `withDeadlineAt(at, fn)` with the deadline `at`; nested scopes take the
 * **earlier** deadline (an inner scope never extends the budget of an outer one). An admission
 * without an explicit `deadline` takes the ambient one; an explicit one is min'd with it.
 *
 * No admission decision is made here: the ambient deadline is handed to the addon with the
 * request, and the core refuses a passed deadline `timeout`, caps the queue wait and the call
 * timeout. Cost: until the first `withDeadline` / `withDeadlineAt` of the process an
 * admission reads nothing (a module flag); after it, one `AsyncLocalStorage.getStore()` per
 * admission, and an admission with no deadline in effect still takes the hot path.
 *
 * Units: ms. One isolate: every isolate has its own store.
 */

const { AsyncLocalStorage } = require('node:async_hooks')

/** The ambient deadline (absolute ms) of the current async context, or `undefined`. */
const store = new AsyncLocalStorage()
/** Whether a deadline was ever set: until then nothing is read (no store lookup). */
let used = false

const perfNow = () => performance.now()
/** Now in ms on the deadlines' scale: `performance.now()`, or a test's virtual clock (`setNow`). */
let now = perfNow

/** A deadline at or past 2^63 ns (about 292 years) is none (the addon's rule). */
const NO_DEADLINE_MS = 2 ** 63 / 1e6

/** The ambient deadline in effect (absolute ms), or `undefined`: what admissions read. */
function ambient() {
  return used ? store.getStore() : undefined
}

/** Checks a time argument: a number, not NaN nor -Infinity (a `TypeError` / `RangeError` naming it). */
function timeArg(x, name, what) {
  if (typeof x !== 'number') throw new TypeError(`${name} must be ${what}, got ${x === null ? 'null' : typeof x}`)
  if (Number.isNaN(x) || x === -Infinity) throw new RangeError(`${name} must be ${what}, got ${x}`)
  return x
}

function fnArg(fn) {
  if (typeof fn !== 'function') throw new TypeError(`fn must be a function, got ${fn === null ? 'null' : typeof fn}`)
}

/** Runs `fn` with the deadline `at` min'd with the one in effect. */
function within(at, fn) {
  const outer = ambient()
  const d = outer !== undefined && outer <= at ? outer : at
  // No deadline here and none outside (a stored one is always below the bound): nothing to carry.
  if (d >= NO_DEADLINE_MS) return fn()
  used = true
  return store.run(d, fn)
}

/**
 * Runs `fn()` with a time budget of `ms` from now: every admission inside it (also in its
 * async continuations) is refused `timeout` once the deadline `now + ms` has passed, queues at
 * most until it (less the bulkhead's `minServiceTimeMs`), and `run()` aborts its `fn`'s signal
 * at it. Nested, the earlier deadline wins. A negative `ms` is a deadline that has passed (not
 * an argument error); `Infinity` adds no bound. Returns what `fn` returns.
 *
 * @throws {TypeError} `ms` not a number, `fn` not a function.
 * @throws {RangeError} `ms` NaN or -Infinity.
 */
function withDeadline(ms, fn) {
  timeArg(ms, 'ms', 'a time budget in ms (a number > -Infinity; Infinity: no bound)')
  fnArg(fn)
  return within(ms === Infinity ? Infinity : now() + ms, fn)
}

/**
 * `withDeadline` with an absolute deadline `at` (ms on the `performance.now()` scale; the
 * value of `currentDeadline()`, or a deadline received from upstream). `Infinity`, and
 * anything at or past 2^63 ns, add no bound.
 *
 * @throws {TypeError} `at` not a number, `fn` not a function.
 * @throws {RangeError} `at` NaN or -Infinity.
 */
function withDeadlineAt(at, fn) {
  timeArg(at, 'deadline', 'an absolute time in ms on the performance.now() scale (a number > -Infinity; Infinity: none)')
  fnArg(fn)
  return within(at, fn)
}

/** The deadline in effect here (absolute ms on the `performance.now()` scale), or `undefined`. */
function currentDeadline() {
  return ambient()
}

/** The ms left until the deadline in effect (0 once it has passed, never negative), or `undefined`. */
function remainingMs() {
  const d = ambient()
  return d === undefined ? undefined : Math.max(0, d - now())
}

/**
 * Runs `fn()` outside every budget (work shared by callers with different budgets: no one
 * caller's deadline may bound it; each caller bounds its own wait).
 */
function outside(fn) {
  return used ? store.exit(fn) : fn()
}

/**
 * A signal that aborts with the first of `signals` (`AbortSignal.any`, Node ≥ 20.3; before it, a
 * controller whose listeners on the others are removed as soon as one aborts — a deadline's
 * timeout signal always does, so no caller's long-lived signal collects listeners for long).
 */
function anySignal(signals) {
  if (typeof AbortSignal.any === 'function') return AbortSignal.any(signals)
  const ac = new AbortController()
  const listeners = []
  const done = (reason) => {
    for (const [s, l] of listeners) s.removeEventListener('abort', l)
    listeners.length = 0
    ac.abort(reason)
  }
  for (const s of signals) {
    if (s.aborted) {
      done(s.reason)
      break
    }
    const l = () => done(s.reason)
    listeners.push([s, l])
    s.addEventListener('abort', l, { once: true })
  }
  return ac.signal
}

/** Now on the deadlines' scale (ms). */
function nowMs() {
  return now()
}

/**
 * The absolute deadline of one admission (ms; `Infinity`: none): its `deadline` option min'd
 * with the ambient `amb`. Read after the addon accepted the options (a bad value threw there).
 */
function deadlineOf(opts, amb) {
  let at = amb ?? Infinity
  const d = opts?.deadline
  if (typeof d === 'number' && d < at) at = d
  return at >= NO_DEADLINE_MS ? Infinity : at
}

/**
 * The test hook: `fn` returns now in ms (a `VirtualClock`'s `nowMs()`), so that `withDeadline`
 * and `remainingMs` read the clock a virtual-clock bulkhead decides on; `undefined` restores
 * `performance.now()`.
 */
function setNow(fn) {
  now = fn ?? perfNow
}

module.exports = { ambient, withDeadline, withDeadlineAt, currentDeadline, remainingMs, nowMs, deadlineOf, setNow, outside, anySignal, NO_DEADLINE_MS }
