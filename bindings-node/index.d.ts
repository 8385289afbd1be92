/// <reference lib="esnext.disposable" />
/**
 * hullguard for Node: a bulkhead caps concurrent work per dependency (per origin, per pool, per
 * LLM provider) so that one slow upstream can only consume its own slice of capacity.
 *
 * The hand-written public types of the facade (`index.js` / `index.mjs`). Conventions:
 * - **options** are checked by the core's option table: an unknown name (`maxConcurent`, in
 *   any options object, per-call ones included) is a `TypeError` naming it and listing the
 *   known ones; a value of the wrong type a `TypeError`; a value out of range a `RangeError`
 *   naming the option (its path, e.g. `resilience.breaker.openDurationMs`) and its range.
 *   A key whose value is `undefined` is not set; `null` is "not given" too (the default, or
 *   in a registry override the defaults' value), except that a policy part (`adaptive`,
 *   `breaker`), `resilience` itself and `callTimeoutMs` set to `null` are off (the core's
 *   null rule, docs/design.md §7.2). "No deadline" is always `Infinity`, never `null`.
 * - **counts** (permits, weights, limits, queue sizes) are Numbers that must be safe integers;
 *   a non-number is a `TypeError`, anything else out of range (including above
 *   `Number.MAX_SAFE_INTEGER`, NaN, fractions) is a `RangeError`.
 * - **durations** are milliseconds (`…Ms`); `Infinity` means "no deadline", `0` means "do not queue";
 *   NaN or negative is a `RangeError`, a non-number a `TypeError`.
 * - **deadlines** (`deadline`, `withDeadlineAt`, `currentDeadline()`) are absolute times in ms on
 *   the `performance.now()` scale; `Infinity` (and anything at or past 2^63 ns, e.g.
 *   `Number.MAX_VALUE`) is none; a deadline that has passed is refused `timeout`
 *   (`BULKHEAD_QUEUE_TIMEOUT`), never an argument error (C36); NaN or `-Infinity` is a
 *   `RangeError`, a non-number a `TypeError`.
 * - `acquire()`, `run()` and `drain()` always return Promises: argument errors reject them,
 *   they never throw synchronously. `tryAcquire()`, `setLimit()` and the constructors throw.
 * - `stats()` field names are camelCase; the keys of `rejectedByReason`, `reason` values and
 *   registry keys are exactly the strings of every other layer (`'queue_limit'`, …).
 * - A `Bulkhead` belongs to one isolate (one thread).
 *
 * @packageDocumentation
 */

// ----- helpers ----------------------------------------------------------------------------------

/**
 * The global `AbortSignal` (from `lib.dom` or `@types/node`), or its structural shape when
 * neither is loaded.
 */
type SignalOf<G> = G extends { AbortSignal: { prototype: infer S } } ? S : AbortSignalLike

/** What the facade needs from a signal: any real `AbortSignal` fits. */
export interface AbortSignalLike {
  readonly aborted: boolean
  readonly reason?: unknown
  addEventListener(type: 'abort', listener: (...args: any[]) => unknown, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: (...args: any[]) => unknown): void
}

/** The `AbortSignal` type of the environment. */
export type HullguardAbortSignal = SignalOf<typeof globalThis>

// ----- constants --------------------------------------------------------------------------------

/**
 * Largest permit count: `min(core MAX_PERMITS, Number.MAX_SAFE_INTEGER)` — `2 ** 53 - 1` on
 * 64-bit hosts. `maxConcurrent`, weights and limits must not exceed it.
 */
export declare const MAX_PERMITS: number

/** Largest `maxQueue`: `2 ** 20` (1 048 576) live waiters. */
export declare const MAX_QUEUE: number

/** An admission reason (docs/design.md, reasons); identical strings in every layer. */
export type Reason =
  | 'concurrency_limit'
  | 'queue_limit'
  | 'key_limit'
  | 'timeout'
  | 'aborted'
  | 'shutdown'
  | 'circuit_open'
  | 'call_timeout'
  | 'budget_limit'
  | 'shed'
  | 'rate_limit'

/** The admission reasons, indexed like C's `hg_reason` (frozen). */
export declare const REASONS: readonly [
  'concurrency_limit',
  'queue_limit',
  'key_limit',
  'timeout',
  'aborted',
  'shutdown',
  'circuit_open',
  'call_timeout',
  'budget_limit',
  'shed',
  'rate_limit',
]

/**
 * How a guarded call ended (docs/design.md §6.2): `'success'`, `'failure'`, `'ignored'` (a cancellation:
 * no breaker count, no adaptive sample) or `'overload'` (HTTP 429: a failure for the adaptive
 * limit, a success for the breaker).
 */
export type Outcome = 'success' | 'failure' | 'ignored' | 'overload'

/** The outcomes with the addon's codes (frozen). */
export declare const OUTCOMES: Readonly<{ success: 0; failure: 1; ignored: 2; overload: 3 }>

/** A circuit breaker's state; identical strings in every layer. */
export type CircuitState = 'closed' | 'open' | 'half_open'

// ----- errors -----------------------------------------------------------------------------------

/**
 * The stable error code of a rejection, the same in every binding:
 * `BULKHEAD_FULL` (`concurrency_limit`, `queue_limit`, `key_limit`, `budget_limit`),
 * `BULKHEAD_QUEUE_TIMEOUT` (`timeout`), `BULKHEAD_CLOSED` (`shutdown`), `CIRCUIT_OPEN`,
 * `BULKHEAD_CALL_TIMEOUT`, `BULKHEAD_SHED` (`shed`), `BULKHEAD_RATE_LIMITED` (`rate_limit`).
 * (`ABORTED` is never thrown: a cancelled call rejects with `signal.reason`.)
 */
export type BulkheadErrorCode =
  | 'BULKHEAD_FULL'
  | 'BULKHEAD_QUEUE_TIMEOUT'
  | 'BULKHEAD_CLOSED'
  | 'CIRCUIT_OPEN'
  | 'BULKHEAD_CALL_TIMEOUT'
  | 'BULKHEAD_SHED'
  | 'BULKHEAD_RATE_LIMITED'
  | 'ABORTED'

/** The bulkhead's state at a rejection. */
export interface BulkheadSnapshot {
  /** Permits held by claimed grants. */
  active: number
  /** Live waiters. */
  queued: number
  /** The current limit. */
  limit: number
  /** Free permits (negative after the limit shrank below `active`). */
  available: number
  /** The registry key, or `null` outside a registry. */
  key: string | null
}

/**
 * A rejection by a bulkhead (never an argument error: those are `TypeError` / `RangeError`,
 * and a cancelled call rejects with its `signal.reason`).
 *
 * @example
 * try { await bh.run(call) } catch (e) {
 *   if (e instanceof BulkheadError && e.retryable) retryLater()
 * }
 */
export declare class BulkheadError extends Error {
  constructor(
    reason: Reason,
    snapshot: { active: number; queued: number; limit: number; available: number },
    key?: string | null,
    detail?: RejectionDetail,
  )
  readonly name: 'BulkheadError'
  /** Stable across layers, e.g. `'BULKHEAD_FULL'`. */
  readonly code: BulkheadErrorCode
  /** The admission reason, e.g. `'queue_limit'`. */
  readonly reason: Reason
  /** `false` for `shutdown` (and `aborted`), `true` otherwise. */
  readonly retryable: boolean
  /** Always `'resilience'`. */
  readonly category: 'resilience'
  /** The state at the rejection. */
  readonly snapshot: BulkheadSnapshot
  /** The core's detail of the rejection (docs/design.md §5.7); `null` only if built by hand. */
  readonly detail: RejectionDetail | null
}

/** Which constraint refused (docs/design.md §5.7). */
export type Bound =
  | 'limit'
  | 'kill_switch'
  | 'budget'
  | 'queue'
  | 'queued_cost'
  | 'keys'
  | 'deadline'
  | 'cancelled'
  | 'closed'
  | 'breaker'
  | 'call_timeout'
  | 'shed'
  | 'class'
  | 'shared'
  | 'reserve'
  | 'rate'
  | 'overload'
  | 'fleet_lease'

/** One dimension's counts at a rejection. */
export interface DimensionSnapshot {
  /** The ceiling in force. */
  limit: number
  /** Held by claimed grants. */
  inUse: number
  /** Free (negative after a shrink). */
  available: number
}

/**
 * A rejection's detail, computed by the core from the counters at the rejection (stale as soon
 * as it returns under concurrency).
 */
export interface RejectionDetail {
  reason: Reason
  /** Which constraint bound. */
  bound: Bound
  /** The permits. */
  calls: DimensionSnapshot
  /** The budget units; `null` without a budget. */
  budget: DimensionSnapshot | null
  /** Live waiters, `maxQueue`, and the total cost of the waiters. */
  queued: number
  maxQueue: number
  queuedCost: number
  /** The revision of the limits in force. */
  revision: number
  /** A classed bulkhead's refusal of one class: its index, what held it back, the short dimension. */
  class: { class: number; bound: Bound; dimension: 'permits' | 'budget' } | null
  /** For `rate_limit`: ms until the request would conform; else `null`. */
  retryAfterMs: number | null
  /**
   * The refusal's HTTP status, the core's one table: 429 for `rate_limit`, 503 for every other
   * reason (what `hullguard/edge` answers; send `Retry-After` only from `retryAfterMs`).
   */
  httpStatus: number
}

/**
 * `applyLimits()` with a revision older than the one in force: nothing changed. `current` is
 * the revision in force.
 */
export declare class StaleRevisionError extends Error {
  private constructor()
  readonly name: 'StaleRevisionError'
  readonly code: 'BULKHEAD_STALE_REVISION'
  /** The revision that was refused. */
  readonly revision: number
  /** The revision in force. */
  readonly current: number
}

// ----- options ----------------------------------------------------------------------------------

/**
 * `resilience.adaptive`: an adaptive limit within `[minLimit, maxLimit]` (docs/design.md §6). `{}` turns
 * it on with the defaults. Counts are safe integers; the core checks the ranges and a bad value
 * is a `RangeError` naming it (`resilience.adaptive.minLimit: …`).
 */
export interface AdaptiveOptions {
  /** `'gradient2'` (default, recommended) or `'aimd'`. */
  algorithm?: 'gradient2' | 'aimd' | null
  /** The starting limit, `minLimit … maxLimit`. Default `maxLimit`. */
  initialLimit?: number | null
  /** The floor, ≥ 1. Default 1. */
  minLimit?: number | null
  /** The ceiling, ≤ `maxConcurrent`. Default `maxConcurrent`. */
  maxLimit?: number | null
  /** AIMD: a success slower than this (ms) is a congestion signal. Default 500. */
  targetLatencyMs?: number | null
  /** AIMD: the additive increase. Default 1. */
  increaseStep?: number | null
  /** The multiplicative back-off, in (0, 1). Default 0.7. */
  decreaseRatio?: number | null
  /** Gradient2: weight of a new estimate, in (0, 1]. Default 0.2. */
  smoothing?: number | null
  /** Gradient2: tolerated RTT growth over the long-term RTT, ≥ 1. Default 1.5. */
  rttTolerance?: number | null
  /** Gradient2: samples in the long-term RTT average. Default 600. */
  longWindow?: number | null
  /** Gradient2: headroom while no queueing is seen. Default 4. */
  queueSize?: number | null
}

/**
 * `resilience.breaker`: a circuit breaker (docs/design.md §6); both trip modes are always on. `{}`
 * turns it on with the defaults (Hystrix's numbers).
 */
export interface BreakerOptions {
  /** Consecutive failures that open it. Default 5. */
  failureThreshold?: number | null
  /** Failure fraction over the window that opens it, in (0, 1]. Default 0.5. */
  errorRateThreshold?: number | null
  /** The rolling window, ms. Default 10 000. */
  errorRateWindowMs?: number | null
  /** Buckets of the window. Default 10. */
  errorRateBuckets?: number | null
  /** Calls in the window before the error rate counts. Default 20. */
  volumeThreshold?: number | null
  /** Time open before half-open, ms. Default 30 000. */
  openDurationMs?: number | null
  /** Probes admitted while half-open. Default 1. */
  halfOpenMaxCalls?: number | null
  /** A probe that has not reported within this (ms) counts as a failure. Default 30 000. */
  halfOpenTimeoutMs?: number | null
}

/**
 * Policies around the bulkhead (docs/design.md §6): a part that is omitted or `null` is off. In a
 * registry's `overrides`, each part merges key by key over the defaults' (`null` turns it off).
 * Unknown keys are a `TypeError` naming them.
 */
export interface ResilienceOptions {
  adaptive?: AdaptiveOptions | null
  breaker?: BreakerOptions | null
  /**
   * Bounds the work of `run(fn)` (ms; `Infinity` / `null` = off): at the deadline the signal
   * passed to `fn` aborts, the promise rejects `BULKHEAD_CALL_TIMEOUT` (a failure) at once, and
   * the permits are released when `fn`'s promise settles.
   */
  callTimeoutMs?: number | null
}

/** Construction options of a `Bulkhead` (and the defaults / overrides of a `Registry`). */
export interface BulkheadOptions {
  /** The ceiling of the limit: 1 … `MAX_PERMITS`. Default 10. */
  maxConcurrent?: number | null
  /** Live waiters allowed: 0 … `MAX_QUEUE`; 0 = fail fast. Default 100. */
  maxQueue?: number | null
  /**
   * Default queue deadline in ms (`Infinity` = none, 0 = never queue). Default 30 000; `null`
   * is the default too (not "none").
   */
  queueTimeoutMs?: number | null
  /** `false` admits everything (still counted in stats). Default `true`. */
  enabled?: boolean | null
  /**
   * An in-flight ceiling of cost units (tokens, bytes) beside the permits: 1 … 2^40 − 1, with
   * `maxConcurrent` at most 2^18 − 1. Default none. Its state is `stats().budget`; a call
   * holds its `cost` (default 0) with its permits.
   */
  budget?: number | null
  /**
   * A bound on the total cost of queued requests beside `maxQueue` (1 … 2^40 − 1; needs a
   * budget): a request whose cost would pass it is refused `queue_limit`. Default none.
   */
  maxQueuedCost?: number | null
  /**
   * Observe (shadow) mode (docs/design.md §4.7): the dimensions decided and counted
   * (`stats().observedByReason`) but not enforced. Default `'off'`; `'budget'` needs a budget.
   */
  observe?: ObserveMode | null
  /**
   * Permits calls may hand back while their work goes on (orphaning, docs/design.md §5.3):
   * 0 … 2^60 − 1, default 0 (off); `permit.orphan()`.
   */
  maxOrphaned?: number | null
  /**
   * The limit at construction, 0 … `maxConcurrent` (default `maxConcurrent`); 0 is a
   * fail-closed start: everything is refused until the limits are applied (docs/design.md §4.6).
   */
  startLimit?: number | null
  /**
   * Reservations (two-phase admission, docs/design.md §5.8) held at once, 0 … 65536, default 0
   * (off); `reserve()` from Node comes with the gateway admission.
   */
  maxReservations?: number | null
  /**
   * A streaming call whose hold must grow past the budget is asked to cancel its work
   * (docs/design.md §4.5; default false: held as overrun): `permit.reportUsage()` answers
   * `cancel: true` and `permit.cancelRequested` turns true.
   */
  cancelOnOverrun?: boolean | null
  /** The adaptive limit, circuit breaker and call timeout; omitted / `null` = a plain bulkhead. */
  resilience?: ResilienceOptions | null
  /**
   * The least time (ms) a request's work needs once granted (docs/design.md §5.9; default 0):
   * a queued request with a `deadline` waits at most until `deadline − minServiceTimeMs` and
   * is refused `timeout` then; one that would have to queue with less left is refused at once.
   */
  minServiceTimeMs?: number | null
  /**
   * Load shedding by the event-loop lag (docs/design.md §4.11), ms: while the last
   * `reportLoad({eventLoopLagMs})` is above it, a request of a class below `criticalPriority`
   * is refused `shed` at once (`BULKHEAD_SHED`, detail bound `'overload'`). Default 0 (off). A
   * bulkhead without classes gets one non-critical class (everything is shed).
   */
  shedLagThresholdMs?: number | null
  /**
   * Load shedding by the process's CPU use, in cores (0 … 1024; 0.85 = 85% of one core), as
   * `shedLagThresholdMs` with `reportLoad({cpu})`. Default 0 (off).
   */
  shedCpuThreshold?: number | null
  /**
   * Classes of this priority or above (0 … 255, default 1) are critical: never shed by an
   * overload signal (they pass while capacity is left, then the limits decide as always).
   */
  criticalPriority?: number | null
  /**
   * Queue-delay shedding, CoDel (docs/design.md §4.10), ms: when the waiters granted have
   * queued at least this long for a whole `queueDelayIntervalMs`, the waiter about to be
   * granted is shed instead (rejected `shed`, `BULKHEAD_SHED`, retryable). Default 0 (off).
   */
  queueDelayTargetMs?: number | null
  /** How long (ms, > 0) the queue delay must stay above the target before shedding. Default 100. */
  queueDelayIntervalMs?: number | null
  /**
   * Adaptive LIFO: the newest waiter first while the oldest has queued at least
   * `queueDelayTargetMs` (FIFO otherwise; needs a target). Default false.
   */
  adaptiveLifo?: boolean | null
}

/** One admission class of `classes` (docs/design.md §4.8); counts are safe integers. */
export interface ClassOptions {
  /** The name requests use (`admissionClass: 'interactive'`); unique. */
  name?: string | null
  /** 0 … 255: served first for the shared units when higher (FIFO within one). Default 0. */
  priority?: number | null
  /** Permits protected for this class. Default 0. */
  floor?: number | null
  /** The most permits this class may hold. Default the limit. */
  ceiling?: number | null
  /** Budget units protected for this class. Default 0. */
  budgetFloor?: number | null
  /** The most budget units this class may hold. Default the budget. */
  budgetCeiling?: number | null
  /** This class's own ceilings observed, not enforced. Default `'off'`. */
  observe?: ObserveMode | null
}

/** `reserve`: units kept for classes of priority ≥ `minPriority`. */
export interface ReserveOptions {
  permits?: number | null
  budget?: number | null
  minPriority?: number | null
}

/** One rate of `rates` (GCRA): `amount` per `perMs`, at most `burst` at once after an idle spell. */
export interface RateOptions {
  amount?: number | null
  perMs?: number | null
  burst?: number | null
}

/** `rates`: of requests, and of budget units (the cost). */
export interface RatesOptions {
  requests?: RateOptions | null
  units?: RateOptions | null
}

/** Options of a `Bulkhead` with admission classes and admission events. */
export interface GatewayOptions {
  /** Admission classes (index = class); requests name one with `admissionClass`. */
  classes?: ClassOptions[] | null
  /** Units kept for high-priority classes. */
  reserve?: ReserveOptions | null
  /** Idle floor units lent to other classes, reclaimed first. Default false. */
  lending?: boolean | null
  /** A full queue evicts its youngest lowest-priority waiter for a higher arrival. Default false. */
  shed?: boolean | null
  /** Rates of requests and units (the facade runs the host's rate timer). */
  rates?: RatesOptions | null
  /**
   * Admission events (`on('admit' | 'reject' | …)`). Default false: without it the bulkhead
   * builds no event and its plain path stays plain (no listener = no cost).
   */
  events?: boolean | null
}

/** Options of `permit.release()` (any other key is a `TypeError`). */
export interface ReleaseOptions {
  /** How the call ended, reported to the policies. Default `'success'`. */
  outcome?: Outcome
  /** Budget units the call used in all: the rest of its hold is refunded, use beyond it counted as overrun. */
  usage?: number | null
}

/** A `stateChange` listener: `key` is `null` outside a registry. */
export type StateChangeListener = (key: string | null, oldState: CircuitState, newState: CircuitState) => void

/** Options of one `acquire()` / `run()` (any other key is a `TypeError`). */
export interface AcquireOptions {
  /**
   * Cancels the call while it is queued: the promise rejects with `signal.reason` (an
   * `AbortError` `DOMException` unless the caller chose another reason), `fn` is never called
   * and the waiter's queue slot frees at once. An already aborted signal rejects at once (and
   * is counted in `stats().rejectedByReason.aborted`, like every call that never ran).
   * Any number of calls may share one signal (it gets one 'abort' listener).
   */
  signal?: HullguardAbortSignal | null
  /** Permits to hold: 1 … `maxConcurrent`. Default 1. */
  weight?: number
  /**
   * Bounds only the time spent queued, in ms: `undefined` / `null` = the bulkhead's
   * `queueTimeoutMs`; `Infinity` = no deadline; `0` = do not queue (`concurrency_limit` if not
   * admitted at once).
   */
  queueTimeoutMs?: number | null
  /** Budget units (tokens, bytes) the call holds with its permits: 0 … the budget. Default 0. */
  cost?: number | null
  /** The admission class: a name of `classes`, or its index. Default class 0. */
  admissionClass?: string | number | null
  /** This call's own observe (shadow) mode, on top of the bulkhead's. Default `'off'`. */
  observe?: ObserveMode | null
  /**
   * The request's absolute deadline: ms on the `performance.now()` scale (e.g.
   * `performance.now() + 1500`, or `currentDeadline()` from upstream). Min'd with the ambient
   * deadline of `withDeadline`. A passed one is refused `timeout` at once (never queued, never
   * an argument error); a queued call waits at most until it (less `minServiceTimeMs`) and
   * `run()`'s `fn` gets a signal that aborts at it (the call timeout capped by the deadline).
   * `undefined` / `null` = the ambient one or none; `Infinity`, `Number.MAX_VALUE` = none.
   */
  deadline?: number | null
}

/** Options of `run()`: `acquire`'s plus `getUsage`. */
export interface RunOptions<T = unknown> extends AcquireOptions {
  /**
   * The budget units the call used, from `fn`'s result: the permit is released with that usage
   * (the rest of `cost` refunded), as async-bulkhead-llm's `getUsage`. A `getUsage` that
   * throws still releases (the whole cost charged) and `run()` rejects with its error;
   * `undefined` / `null` means no usage is known (the whole cost charged).
   */
  getUsage?: ((result: T) => number | null | undefined) | null
}

/** Options of `tryAcquire()` (any other key is a `TypeError`). */
export interface TryAcquireOptions {
  /** Permits to take: 1 … `maxConcurrent`. Default 1. */
  weight?: number
  /** Budget units: 0 … the budget. Default 0. */
  cost?: number | null
  /** The admission class: a name of `classes`, or its index. */
  admissionClass?: string | number | null
  /** This call's own observe (shadow) mode. */
  observe?: ObserveMode | null
  /** The absolute deadline (ms, `performance.now()` scale): a passed one throws `timeout`. */
  deadline?: number | null
}

/** The non-throwing style's answer (`admit()` / `tryAdmit()`), as async-bulkhead-llm's `acquire()`. */
export type AdmitResult =
  | { ok: true; permit: Permit }
  | { ok: false; reason: Reason; detail: RejectionDetail | null; error: unknown }

/** What `wouldAdmit()` predicts. */
export interface WouldAdmitResult {
  /** `'admit_now'`, `'would_queue'`, or the reason it would be refused. */
  decision: 'admit_now' | 'would_queue' | Reason
  /** For `'would_queue'`: the place it would take (1 = next); else `null`. */
  position: number | null
  /** For a refusal: its detail; else `null`. */
  detail: RejectionDetail | null
}

/** A revisioned limits snapshot for `applyLimits()` (every other field optional). */
export interface LimitsOptions {
  /** Must not be older than the revision in force. */
  revision: number
  /** The call limit (0 = the kill switch; above `maxConcurrent` raises the ceiling). */
  limit?: number | null
  budget?: number | null
  maxQueue?: number | null
  queueTimeoutMs?: number | null
  /** A classed bulkhead's new reserve. */
  reserve?: ReserveOptions | null
  /** A classed bulkhead's new rates (`{}` removes them). */
  rates?: RatesOptions | null
  /**
   * New queue-delay dispatch options, replaced together (a bulkhead built with
   * `queueDelayTargetMs` or classes; CoDel's state starts over).
   */
  queueDelay?: QueueDelayOptions | null
}

/** `applyLimits({queueDelay})` (any other key is a `TypeError` naming it). */
export interface QueueDelayOptions {
  /** The CoDel target in ms (required; 0 turns shedding and adaptive LIFO off). */
  targetMs: number
  /** The interval in ms (> 0). Default 100. */
  intervalMs?: number | null
  /** Adaptive LIFO (needs a target above 0). Default false. */
  lifo?: boolean | null
}

/** What `permit.reportUsage()` did to the hold. */
export interface UsageReport {
  change: 'unchanged' | 'shrank' | 'grew' | 'overran'
  /** Units the hold changed by. */
  by: number
  /** The host is asked to cancel the call's work (`cancelOnOverrun`). */
  cancel: boolean
  used: number
  held: number
  overrun: number
}

/** One class's counts (`classStats()`, a registry's `keyStats()`). */
export interface ClassStats {
  class: number
  priority: number
  floor: number
  ceiling: number
  inFlight: number
  budgetFloor: number
  budgetCeiling: number
  budgetInUse: number
  queued: number
  observe: ObserveMode
  observed: number
}

/** The admission events (`events: true`). */
export type AdmissionEventName = 'admit' | 'reject' | 'release' | 'usage' | 'reconfigure' | 'shed' | 'observeBypass'

/** The admission event names, in a list. */
export declare const ADMISSION_EVENTS: readonly AdmissionEventName[]

/**
 * An admission event (docs/design.md §8.2); `id` joins the events of one admission. Times in
 * ns. Fields not of its type are absent.
 */
export interface AdmissionEvent {
  type: AdmissionEventName
  /** The registry key, or `null`. */
  key: string | null
  id?: number
  class?: number
  revision?: number
  weight?: number
  cost?: number
  queued?: boolean
  decisionNs?: number
  waitNs?: number
  reason?: Reason
  held?: number
  used?: number
  ended?: boolean
  overrun?: number
  change?: UsageReport['change']
  by?: number
  cancel?: boolean
  victim?: number
  victimClass?: number
  limit?: number
  budget?: number
  observe?: ObserveMode
}

/** A listener of an admission event. */
export type AdmissionListener = (event: AdmissionEvent) => void

/** Options of `drain()` (any other key is a `TypeError`). */
export interface DrainOptions {
  /**
   * Give up after this many ms (`undefined` / `null` / `Infinity` = wait until idle; `0` =
   * report at once). Not a queue timeout.
   */
  timeoutMs?: number | null
}

/** What `drain()` reports. */
export interface DrainResult {
  /** `true` when the bulkhead became idle (`active == 0 && queued == 0`). */
  drained: boolean
  active: number
  queued: number
}

/** Options of a `Registry`: the defaults of every key plus the registry's own. */
export interface RegistryOptions extends BulkheadOptions {
  /** Admission events of every key (`on('admit', …)`); default false. */
  events?: boolean | null
  /**
   * One cap over every key (docs/design.md §9.2): each key is a class of one admission, so
   * `maxKeys` must then be 1 … 63 (give it: its default, 1024, is refused), and a key's
   * override may set only its `maxConcurrent` and `observe`.
   */
  global?: { limit: number; maxQueue?: number } | null
  /** Per-key options, merged option by option over the defaults (keys unchanged). */
  overrides?: Record<string, BulkheadOptions> | null
  /** Most entries at once: 1 … 2³²−1. Default 1024. */
  maxKeys?: number | null
}

// ----- stats ------------------------------------------------------------------------------------

/** Rejections per admission reason; keys are the reason strings (snake_case), all present. */
export type RejectedByReason = { [R in Reason]: number }

/** `stats()` of one bulkhead: the names of docs/design.md §8.1 in camelCase. Counts are Numbers. */
/** Observe (shadow) mode's dimensions (docs/design.md §4.7). */
export type ObserveMode = 'off' | 'concurrency' | 'budget' | 'all'

export interface BulkheadStats {
  /** Permits held by claimed grants. */
  active: number
  /** Live waiters. */
  queued: number
  /** Permits granted to waiters that have not yet claimed them. */
  grantedUnclaimed: number
  /** The current limit. */
  limit: number
  /** The ceiling of the limit. */
  maxConcurrent: number
  /** Free permits; negative after the limit shrank below `active`. */
  available: number
  /** Admissions since construction. */
  admittedTotal: number
  /** Rejections per reason (argument errors are never counted). */
  rejectedByReason: RejectedByReason
  /** Explicit `release()` calls on an already released permit. */
  releasedTwiceTotal: number
  /** Permits reclaimed after their `Permit` was garbage-collected while held. */
  leakedTotal: number
  /** Permits of orphaned calls whose work goes on (outside `active`, at most `maxOrphaned`). */
  orphanedInFlight: number
  /** Permits ever orphaned. */
  orphanedTotal: number
  /** Free cells of the waiter ring. */
  ringFree: number
  /** Acquires that queued and were then granted. */
  queueWaitCount: number
  /** Sum of their enqueue → grant times, in ns. */
  queueWaitSumNs: number
  /** The longest enqueue → grant time, in ns. */
  queueWaitMaxNs: number
  /**
   * Those waits per power-of-two bucket of ns, keyed by each bucket's exclusive upper bound
   * (`'1024'` … `'68719476736'`) and `'inf'` (docs/design.md §8.1, C35).
   */
  queueWaitHistogram: Record<string, number>
  /**
   * The revision of the limits in force (docs/design.md §4.6): 0 until the first
   * `applyLimits()`.
   */
  revision: number
  /** The dimensions observe mode lets through (the `observe` option). */
  observe: ObserveMode
  /**
   * Admissions observe mode let through that the enforced decision would not have admitted at
   * once, by the reason it would have given (all reason keys, as `rejectedByReason`).
   */
  observedByReason: RejectedByReason
  /** Observer calls that panicked in the core (caught and counted; 0 without an observer). */
  observerPanics: number
  /** Reservations held now (two-phase admission; their units count in `active`). */
  reservationsHeld: number
  /** Reservations whose TTL passed before a commit or an abort. */
  reservationsExpiredTotal: number
  /** `null` unless an adaptive limit is attached (`resilience.adaptive`). */
  adaptive: AdaptiveStats | null
  /** `null` unless a circuit breaker is attached (`resilience.breaker`). */
  circuit: CircuitStats | null
  /**
   * A bulkhead's budget (its second dimension, docs/design.md §4.5); `null` without one
   * (configured with the `budget` option).
   */
  budget: BudgetStats | null
  /**
   * Load shedding's readings (docs/design.md §4.11); `null` without a threshold
   * (`shedLagThresholdMs`, `shedCpuThreshold`).
   */
  load: LoadStats | null
}

/** The overload signals as the core last saw them (`reportLoad`). */
export interface LoadStats {
  /** The last event-loop lag reported, ns. */
  eventLoopLagNs: number
  /** The last CPU use reported, thousandths of a core. */
  cpuPermille: number
  /** 1 while a signal is above its threshold (non-critical classes are shed), else 0. */
  overloaded: number
  /** Requests refused `shed` by a signal (also in `rejectedByReason.shed`). */
  shedTotal: number
}

/** A `reportLoad()` reading: either or both (`null` / `undefined`: not given). */
export interface LoadReading {
  /** The event-loop lag, ms (≥ 0): how late the loop ran a timer. */
  eventLoopLagMs?: number | null
  /** The process's CPU use over the last interval, cores (≥ 0; 1 = one core busy). */
  cpu?: number | null
}

/**
 * One sample of the core's metric table (`hullguard/metrics` publishes them): a gauge's or
 * counter's `value`, or the wait histogram's cumulative `buckets` (`[upper bound s, count]`,
 * the last `Infinity`), `sum` (s) and `count`. `class` is the class name (its index when
 * unnamed), absent on a total.
 */
export interface MetricSample {
  name: string
  class?: string
  dimension?: 'calls' | 'budget'
  reason?: Reason
  value?: number
  buckets?: Array<[number, number]>
  sum?: number
  count?: number
}

/** The budget block of the stats: the second dimension, shaped like the permits' fields. */
export interface BudgetStats {
  /** The current ceiling of the budget. */
  limit: number
  /** The ceiling the bulkhead was built with. */
  maxBudget: number
  /** Units held by claimed grants (charged to the budget). */
  inUse: number
  /** Free units; negative after the budget shrank below `inUse`. */
  available: number
  /** Units granted to waiters that have not yet claimed them. */
  grantedUnclaimed: number
  /** Units taken by grants. */
  reservedTotal: number
  /** Units reported used when calls ended. */
  consumedTotal: number
  /** Units returned unused. */
  refundedTotal: number
  /** Units reported used beyond what their call held, and streaming growth that did not fit. */
  overrunTotal: number
  /** Units of live holds past the budget (streaming growth that did not fit; never charged). */
  overrunHeld: number
  /** The total cost of queued requests (bounded by `maxQueuedCost`). */
  queuedCost: number
}

/** The adaptive limit's state. */
export interface AdaptiveStats {
  algorithm: 'gradient2' | 'aimd'
  /** The limit the controller last applied. */
  limit: number
  minLimit: number
  maxLimit: number
  /** Samples fed (successes and failures; ignored outcomes are no samples). */
  samplesTotal: number
  /** Samples that lowered the limit. */
  decreasesTotal: number
  /** The RTT of the last success, ns. */
  lastRttNs: number
  /** Gradient2's long-term RTT average, ns (0 for AIMD). */
  longRttNs: number
}

/** The breaker's state and counters (reading them commits a due open → half-open transition). */
export interface CircuitStats {
  state: CircuitState
  generation: number
  /** Consecutive failures in the current closed generation. */
  consecutiveFailures: number
  /** Calls in the rolling window of the current closed period. */
  windowRequests: number
  /** Failures in that window. */
  windowFailures: number
  /** When the breaker last opened (host-clock ns; 0 if never). */
  openedAtNs: number
}

// ----- permits ----------------------------------------------------------------------------------

/**
 * Permits held by one `acquire()` / `tryAcquire()`, which alone make them (`new Permit()` is a
 * `TypeError`). Release them with `release()` or `using` (`[Symbol.dispose]`); a permit
 * garbage-collected while held is reclaimed on a later turn and counted in
 * `stats().leakedTotal`.
 */
export declare class Permit implements Disposable {
  private constructor()
  /** The permits still held (0 once released). */
  readonly weight: number
  /** Whether the permits were returned. */
  readonly released: boolean
  /** The registry key of its bulkhead, or `null`. */
  readonly key: string | null
  /**
   * Returns the permits and reports the call's `outcome` to the policies (`'success'` by
   * default). Idempotent: `true` the first time, `false` after (a second explicit call is
   * counted in `stats().releasedTwiceTotal`, never an extra permit).
   * @throws {TypeError} an unknown `outcome` or option (the permits stay held).
   */
  release(options?: ReleaseOptions): boolean
  /**
   * Returns `n` of the held permits now (a refund); the rest stay held.
   * @throws {TypeError} `n` is not a number.
   * @throws {RangeError} `n` is not a safe integer in 1 … `weight`, or the permit was released.
   */
  releasePartial(n: number): void
  /**
   * Reports the cumulative units used so far and those still expected: the hold becomes
   * `used + remaining` (shrunk at once; grown through admission, else held past the budget).
   * @throws {RangeError} a usage below an earlier report (`code` `'ERR_USAGE_DECREASED'`), too
   *   large (`'ERR_USAGE_TOO_LARGE'`), or after the permits returned (`'ERR_USAGE_RELEASED'`).
   */
  reportUsage(used: number, remaining?: number): UsageReport
  /** Returns `n` budget units now. @throws {RangeError} more than held, or no budget. */
  refund(n: number): void
  /**
   * Hands the permits back while the work goes on (`maxOrphaned`): `true` if it did.
   * @throws {RangeError} `maxOrphaned` reached, or a bulkhead that cannot orphan.
   */
  orphan(): boolean
  /** Budget units charged now. */
  readonly cost: number
  /** Whether a usage report asked to cancel the work (`cancelOnOverrun`). */
  readonly cancelRequested: boolean
  /** The revision of the limits the call was admitted under (0 on a plain bulkhead and once released). */
  readonly revision: number
  /** Releases if still held, silently (never counted as a double release). */
  [Symbol.dispose](): void
}

// ----- Bulkhead ---------------------------------------------------------------------------------

/**
 * The function `run()` guards; it receives the call's signal (or `undefined`): the caller's
 * `signal`, or with `callTimeoutMs` or a request deadline (`deadline`, `withDeadline`) a signal
 * of its own that also aborts at the call timeout capped by the deadline (the promise then
 * rejects `BULKHEAD_CALL_TIMEOUT`).
 * Its outcome: resolves → success; rejects with that signal's reason or an error named
 * "AbortError" → ignored; any other error → failure.
 */
export type Guarded<T> = (signal: HullguardAbortSignal | undefined) => T | PromiseLike<T>

/**
 * A bulkhead: at most `maxConcurrent` permits in flight, at most `maxQueue` callers waiting
 * (FIFO, no barging) for at most `queueTimeoutMs` ms.
 *
 * @example
 * const bh = new Bulkhead({ maxConcurrent: 10, maxQueue: 100, queueTimeoutMs: 5_000 })
 * const body = await bh.run((signal) => fetch(url, { signal }), { signal })
 */
export declare class Bulkhead {
  /**
   * @throws {TypeError} an unknown option (listing the known ones) or an option of the wrong
   *   type (`options` not an object, `enabled` not a boolean, a count or duration not a
   *   number), naming it.
   * @throws {RangeError} an option out of range (not a safe integer, NaN, negative, above
   *   `MAX_PERMITS` / `MAX_QUEUE`), naming it and showing its range.
   */
  constructor(options?: BulkheadOptions & GatewayOptions)

  /**
   * Resolves with a `Permit` once admitted (release it yourself, or `using`).
   * Rejects with a `BulkheadError` (`BULKHEAD_FULL`, `BULKHEAD_QUEUE_TIMEOUT`,
   * `BULKHEAD_CLOSED`), with `signal.reason` when aborted, or with a `TypeError` / `RangeError`
   * for a bad argument. Never throws synchronously.
   */
  acquire(options?: AcquireOptions): Promise<Permit>

  /**
   * Runs `fn(signal)` holding `weight` permits, in the caller's `AsyncLocalStorage` context;
   * the permits are released when `fn`'s result settles or `fn` throws. Resolves with `fn`'s
   * result; rejects with its error, a `BulkheadError`, `signal.reason` (then `fn` never ran) or
   * an argument error. Never throws synchronously.
   */
  run<T>(fn: Guarded<T>, options?: RunOptions<Awaited<T>>): Promise<Awaited<T>>

  /**
   * A `Permit` now, or `null` when not admitted at once (`concurrency_limit`, counted).
   * @throws {BulkheadError} any other reason, e.g. `BULKHEAD_CLOSED` after `close()`.
   * @throws {TypeError|RangeError} a bad `weight`.
   */
  tryAcquire(options?: TryAcquireOptions): Permit | null

  /**
   * `acquire()` that resolves `{ok: true, permit}` or, for a refusal, `{ok: false, reason,
   * detail, error}` (an aborted signal too: `reason` `'aborted'`). Bad options reject.
   */
  admit(options?: AcquireOptions): Promise<AdmitResult>

  /** `tryAcquire()` as `{ok: true, permit}` / `{ok: false, …}`. @throws {TypeError|RangeError} bad options. */
  tryAdmit(options?: TryAcquireOptions): AdmitResult

  /** What `acquire(options)` would decide now, counting nothing. @throws {RangeError} an invalid request. */
  wouldAdmit(options?: AcquireOptions): WouldAdmitResult

  /**
   * Applies a revisioned limits snapshot at once, validated whole.
   * @throws {StaleRevisionError} an older revision (`.current`); nothing changed.
   * @throws {RangeError|TypeError} a value the core refuses or a bad option; nothing changed.
   */
  applyLimits(limits: LimitsOptions): void

  /** Changes the budget (a bulkhead built with `budget`). @throws {RangeError} */
  setBudget(budget: number): void

  /** Sets the observe (shadow) mode. @throws {RangeError} */
  setObserve(mode: ObserveMode): void

  /** One class's counts, by name or index. @throws {RangeError} no such class. */
  classStats(admissionClass: string | number): ClassStats

  /** The class names of `classes` (index = class; `null` for an unnamed one; `[]` without classes). */
  readonly classNames: Array<string | null>

  /**
   * Reports the process's overload signals (docs/design.md §4.11; the probes of
   * `hullguard/edge` call it, tests call it with readings of their own). With
   * `shedLagThresholdMs` / `shedCpuThreshold`, while a reading is above its threshold a class
   * below `criticalPriority` is refused `shed`; the readings are in `stats().load`.
   * @throws {TypeError} a non-number, an unknown key, neither reading. {RangeError} NaN or negative.
   */
  reportLoad(reading: LoadReading): void

  /** The core's metric samples of this bulkhead (internal: `hullguard/metrics` reads them). */
  _metricSamples(): MetricSample[]

  /** How many event listeners threw (each reported with `process.emitWarning`). */
  readonly listenerErrors: number

  /**
   * Changes the limit (1 … `maxConcurrent`). Never blocks, never revokes: growing grants
   * waiters, shrinking lets `available` go negative until releases pay it back.
   * @throws {TypeError|RangeError} naming `limit`.
   */
  setLimit(limit: number): void

  /** A fresh stats object. */
  stats(): BulkheadStats

  /**
   * Stops admission; queued callers are rejected `BULKHEAD_CLOSED`; in-flight work completes.
   * @throws {TypeError} on a key of a registry with a global cap (it has no bulkhead of its own).
   */
  close(): void

  /**
   * Resolves `{drained, active, queued}` once idle or after `timeoutMs` (does not close:
   * graceful shutdown is `close()` then `drain()`). Rejects (never throws) for a bad option.
   */
  drain(options?: DrainOptions): Promise<DrainResult>

  /** The ceiling of the limit. */
  readonly maxConcurrent: number
  readonly maxQueue: number
  /** Default queue deadline in ms (`Infinity` = none). */
  readonly queueTimeoutMs: number
  readonly enabled: boolean
  /** The current limit. */
  readonly limit: number
  readonly closed: boolean
  /** The registry key, or `null` outside a registry. */
  readonly key: string | null

  /**
   * Listens to the breaker's transitions (`key` is `null` outside a registry; a registry's
   * `get(key)` bulkhead hears its key's). Listeners run on the JS thread after the native call
   * that committed the transition; one that throws is reported with `process.emitWarning`,
   * counted in `listenerErrors`, and never breaks that call.
   */
  on(event: 'stateChange', listener: StateChangeListener): this
  /**
   * Listens to admission events (needs `events: true`, else a `TypeError`). A listener that
   * throws is reported with `process.emitWarning`, counted in `listenerErrors`, and never
   * breaks admission.
   */
  on(event: AdmissionEventName, listener: AdmissionListener): this
  /** Removes a listener added with `on`. */
  off(event: 'stateChange', listener: StateChangeListener): this
  off(event: AdmissionEventName, listener: AdmissionListener): this
}

// ----- Registry ---------------------------------------------------------------------------------

/**
 * Independent bulkheads per key (per origin: see `originKey`), created on first use from the
 * defaults or the key's entry in `overrides`. At `maxKeys` a new key evicts the least recently
 * used idle entry that no permit or `get()` handle holds, or is rejected `key_limit`
 * (`BULKHEAD_FULL`). Keys are opaque strings compared byte for byte.
 *
 * @example
 * const reg = new Registry({ maxConcurrent: 8, overrides: { 'https://slow.example:443': { maxConcurrent: 2 } } })
 * await reg.run(originKey(url), () => fetch(url))
 */
export declare class Registry {
  /**
   * @throws {TypeError|RangeError} a bad option, naming it (`overrides["k"]: …` for overrides).
   */
  constructor(options?: RegistryOptions)

  /**
   * The bulkhead of `key`; while the returned object lives the entry is not evicted (except
   * under a global cap: there only a held permit or a waiter of the key keeps it, so the key's
   * own `setLimit` is lost when an idle key is evicted). Under a global cap the key has no
   * bulkhead of its own: its `setLimit` sets the key's own limit, and `applyLimits`,
   * `setBudget`, `setObserve` and `close` (which would change the shared admission of every
   * key) throw a `TypeError`.
   */
  get(key: string): Bulkhead

  /** `run()` on `key`'s bulkhead (a `key_limit` or closed registry rejects the promise). */
  run<T>(key: string, fn: Guarded<T>, options?: RunOptions<Awaited<T>>): Promise<Awaited<T>>

  /** `acquire()` on `key`'s bulkhead; the permit's `key` is `key`. */
  acquire(key: string, options?: AcquireOptions): Promise<Permit>

  /**
   * `tryAcquire()` on `key`'s bulkhead.
   * @throws {BulkheadError} `key_limit`, `shutdown`.
   * @throws {TypeError|RangeError} a bad key or weight.
   */
  tryAcquire(key: string, options?: TryAcquireOptions): Permit | null

  /** `acquire()` on `key` as `{ok: true, permit}` / `{ok: false, …}`. */
  admit(key: string, options?: AcquireOptions): Promise<AdmitResult>

  /** `tryAcquire()` on `key` as `{ok: true, permit}` / `{ok: false, …}`. */
  tryAdmit(key: string, options?: TryAcquireOptions): AdmitResult

  /** What `acquire(key, options)` would decide now, without creating the key. */
  wouldAdmit(key: string, options?: AcquireOptions): WouldAdmitResult

  /** Under a global cap: `key`'s counts (`ceiling` its limit); else `null`. */
  keyStats(key: string): ClassStats | null

  /** Under a global cap: the shared admission's stats (`limit` is the cap); else `null`. */
  globalStats(): BulkheadStats | null

  /** `{key: stats}` for every live entry (keys unchanged). */
  stats(): Record<string, BulkheadStats>

  /**
   * Every live key's metric samples (internal: `hullguard/metrics` reads them); no key is
   * created or touched. Under a global cap the shared admission's once, without `key`.
   */
  _metricSamples(): Array<{ key?: string; samples: MetricSample[] }>

  /** The live keys, sorted. */
  keys(): string[]

  /** Closes every entry and refuses new keys (`BULKHEAD_CLOSED`). */
  close(): void

  /** Live entries. */
  readonly size: number
  readonly maxKeys: number
  /** The `overrides` as given (frozen). */
  readonly overrides: Readonly<Record<string, BulkheadOptions>>

  /** Listens to the breaker transitions of every key (`(key, old, new)`). */
  on(event: 'stateChange', listener: StateChangeListener): this
  /** Listens to the admission events of every key (needs `events: true`). */
  on(event: AdmissionEventName, listener: AdmissionListener): this
  /** Removes a listener added with `on`. */
  off(event: 'stateChange', listener: StateChangeListener): this
  off(event: AdmissionEventName, listener: AdmissionListener): this
  /** How many event listeners threw (each reported with `process.emitWarning`). */
  readonly listenerErrors: number
}

/**
 * The canonical origin key of `url`: `scheme://host:port`, lowercase, IDNA host, IPv6 in
 * brackets, explicit default port (`'https://api.example.com:443'`). Computed by the core.
 * @throws {TypeError} `url` is not a string or has no origin.
 */
export declare function originKey(url: string): string

// ----- HTTP integrations (http.js, re-exported by the entry) ------------------------------------
// Typed structurally so that index.d.ts needs neither lib.dom nor @types/node.

/**
 * A fetch-compatible function that runs every request inside the bulkhead of its origin
 * (`limiter` a `Registry`, keyed by `originKey(url)`) or inside one `Bulkhead`. The permit is held until the response body is fully
 * read, cancelled or errors (or the caller releases `response.permit` itself). Rejects with a `BulkheadError` when the bulkhead rejects the call,
 * with `signal.reason` when aborted while waiting, with a `TypeError` for a URL without an
 * origin, and otherwise as `fetchImpl` does.
 * @throws {TypeError} `fetchImpl` is not a function, `limiter` neither a `Registry` nor a
 *   `Bulkhead`, or `options` has an unknown key.
 */
export declare function withBulkhead<F extends (input: any, init?: any) => Promise<any>>(
  fetchImpl: F,
  limiter: Registry | Bulkhead,
  options?: WithBulkheadOptions | null,
): F

/** Options of `withBulkhead` (any other key is a `TypeError`). */
export interface WithBulkheadOptions {
  /**
   * Sends the request's time left downstream in this header (e.g. `'grpc-timeout'`), in the
   * grpc-timeout format: whole ms rounded down, the finest unit that fits 8 digits (`'1500m'`).
   * Only when a deadline is in effect (`withDeadline`, or `deadline` from `admission`). Off by
   * default (`undefined` / `null` / `false`). Whether or not it is sent, the time left is the
   * request's timeout (its signal aborts with a `TimeoutError`).
   */
  deadlineHeader?: string | false | null
  /**
   * The acquire options of one request (gateway admission): its `cost`, `admissionClass`,
   * `observe`, `queueTimeoutMs`; `undefined` for the defaults. The request's own `signal` is
   * added. A response with a body then carries its permit as `response.permit` (not
   * enumerable): report usage while streaming and `release({usage})` once it is final, before
   * the body ends (then the body's end releases nothing more; otherwise it releases with no
   * usage, the whole hold consumed).
   */
  admission?: ((input: any, init?: any) => AcquireOptions | undefined) | null
}

/** Options of a guarded agent class: the agent's own plus the `registry` (required). */
export type GuardedAgentOptions<O> = (O extends undefined ? {} : O) & { registry: Registry }

/** An agent class made by `guardAgent(Base)`: `Base`'s instances with a `registry`. */
export type GuardedAgentClass<B extends abstract new (...args: any) => any> = new (
  options: GuardedAgentOptions<ConstructorParameters<B>[0]>,
) => InstanceType<B> & { readonly registry: Registry }

/**
 * `Base` (`http.Agent`, `https.Agent` or a subclass) with a bulkhead per origin key in front of
 * its socket pool: `const HttpsBulkheadAgent = guardAgent(https.Agent)`.
 * @throws {TypeError} `Base` is not `http.Agent` or a subclass.
 */
export declare function guardAgent<B extends new (options?: any) => any>(Base: B): GuardedAgentClass<B>

/**
 * `http.Agent` with a bulkhead per origin: `new BulkheadAgent({registry, keepAlive, ...})`.
 * (Its instance type is `any` here, as index.d.ts does not depend on `@types/node`; use
 * `guardAgent(http.Agent)` for the precise type.)
 */
export declare const BulkheadAgent: new (options: { registry: Registry; [option: string]: unknown }) => any

// ----- one limit per host (host.js, re-exported by the entry; Linux only) -----------------------

/**
 * Options of `new HostBulkhead(name, options)`, read by the host crate's option table (any other
 * key is a `TypeError` naming it — a local bulkhead's option a host bulkhead does not take, such
 * as `classes`, `resilience`, `budgetFloor` or `shedLagThresholdMs`, is refused as such; `undefined`
 * / `null` is the default). `maxConcurrent`, `budget`, `leaseTtlMs`, `beatMs` and `probeMs` are
 * host-wide: the segment's creator writes them and every later attacher must ask for the same
 * (else an `Error` with `code` `'HOST_SEGMENT'` naming both values) unless `onMismatch: 'adopt'`.
 * `maxQueue` and `queueTimeoutMs` are this process's.
 */
export interface HostBulkheadOptions {
  /** Permits the whole host may hold at once: 1 … 1 048 575. Default 10. */
  maxConcurrent?: number | null
  /** This process's waiters: 0 … 2^20 (0 = never queue). Default 100. */
  maxQueue?: number | null
  /** How long a request may wait by default, ms: 0 … 365 days. Default 30 000. */
  queueTimeoutMs?: number | null
  /** The host-wide budget (tokens, bytes; the second dimension): 1 … 2^40 − 1. Default none. */
  budget?: number | null
  /**
   * A process whose heartbeat has not moved for this long (stopped, hung) is expired: its
   * permits return and its later releases throw `BULKHEAD_STALE_LEASE`. Ms, 100 … 3 600 000, at
   * least 3 × `beatMs`. Default 10 000.
   */
  leaseTtlMs?: number | null
  /** The heartbeat period, ms: 10 … 600 000. Default 1 000. */
  beatMs?: number | null
  /**
   * How often each process probes the others' liveness, ms: 10 … 60 000. A killed process's
   * permits return within about this long. Default 250.
   */
  probeMs?: number | null
  /** Processes that may attach at once (a new segment): 1 … 4096. Default 256. */
  slots?: number | null
  /** The directory of the segment file (a volume shared between containers works). Default `'/dev/shm'`. */
  dir?: string | null
  /** The mode of a new segment file (never world-writable). Default `0o600`. */
  mode?: number | null
  /** An existing segment with other host-wide settings: refuse (`'error'`, the default) or use its settings. */
  onMismatch?: 'error' | 'adopt' | null
}

/** Options of `HostBulkhead.acquire()` (any other key is a `TypeError`). */
export interface HostAcquireOptions {
  /**
   * Cancels the acquire while it waits: the promise rejects with `signal.reason` and its place
   * in the host's queue is given up. An already aborted signal rejects at once.
   */
  signal?: HullguardAbortSignal | null
  /** Permits to hold: 1 … the host's `maxConcurrent`. Default 1. */
  weight?: number
  /** Bounds the wait, ms: `undefined` / `null` = the bulkhead's `queueTimeoutMs`; `0` = do not queue. */
  queueTimeoutMs?: number | null
  /** Budget units held with the permits: 0 … the budget. Default 0. */
  cost?: number | null
  /** The request's absolute deadline (ms, `performance.now()` scale), min'd with `withDeadline`'s. */
  deadline?: number | null
}

/** Options of `HostBulkhead.tryAcquire()` (any other key is a `TypeError`). */
export interface HostTryAcquireOptions {
  /** Permits to take: 1 … the host's `maxConcurrent`. Default 1. */
  weight?: number
  /** Budget units: 0 … the budget. Default 0. */
  cost?: number | null
  /** The absolute deadline (ms, `performance.now()` scale): a passed one throws `timeout`. */
  deadline?: number | null
}

/**
 * `HostBulkhead.stats()`: the host's figures in the local bulkhead's stats object (`active` =
 * permits held by every process, `queued` = waiters of every process, host-wide counters; dead
 * processes are reaped first, so only live holders count), plus the lease ledger's own.
 */
export interface HostBulkheadStats extends BulkheadStats {
  /** Calls in flight on the host. */
  inFlight: number
  /** Processes attached now. */
  attached: number
  /** The segment's slot count. */
  slots: number
  /** Slots reclaimed from dead processes. */
  reclaimedDeadTotal: number
  /** Slots expired (stopped or hung past the lease TTL). */
  reclaimedExpiredTotal: number
  /** Permits those reclaims and expiries returned. */
  reclaimedPermitsTotal: number
  /** Releases refused `BULKHEAD_STALE_LEASE`. */
  staleReleasesTotal: number
  /** Releases refused `BULKHEAD_FOREIGN_LEASE`. */
  foreignReleasesTotal: number
  /** This process's calls in flight. */
  localInFlight: number
  /** This process's permits held. */
  localActive: number
  /** This process's waiters. */
  localQueued: number
  /** This process's slot. */
  slot: number
  /** The segment file. */
  path: string
}

/**
 * What `new HostBulkhead()` (and a later admission, for `'poisoned'` / `'removed'`) throws about
 * the segment file: an `Error` with the crate's message naming the file. `kind` (the Python
 * binding's `HostSegmentError.kind`): `'io'` (a system call failed: `errno`), `'permission'`
 * (another owner, or world-writable), `'incompatible'` (not a segment this library reads: layout
 * or version, naming both sides), `'mismatch'` (another host-wide setting: `onMismatch: 'adopt'`
 * takes the segment's), `'no_slot'` (every slot held by a live process), `'poisoned'` (found
 * inconsistent: `hullguard host rm` it), `'removed'` (the file was removed while attached).
 */
export type HostSegmentError = Error & {
  readonly code: 'HOST_SEGMENT'
  readonly kind: 'io' | 'permission' | 'incompatible' | 'mismatch' | 'no_slot' | 'poisoned' | 'removed' | 'other'
  /** The segment file. */
  readonly path: string | null
  /** The OS error number of a failed system call (`kind` `'io'`), else `null`. */
  readonly errno: number | null
}

/**
 * A release of a host permit that did not count: `'BULKHEAD_STALE_LEASE'` (its lease expired
 * or was reclaimed first — the process was stopped past the lease TTL: the permits were already
 * returned, nothing is released twice) or `'BULKHEAD_FOREIGN_LEASE'` (another process's permit).
 */
export declare class LeaseError extends Error {
  private constructor()
  readonly name: 'LeaseError'
  readonly code: 'BULKHEAD_STALE_LEASE' | 'BULKHEAD_FOREIGN_LEASE'
}

/**
 * Permits held on a host bulkhead, made only by `acquire()` / `tryAcquire()`. A permit
 * garbage-collected while held is released then.
 */
export declare class HostPermit implements Disposable {
  private constructor()
  /** Permits held (0 once released). */
  readonly weight: number
  /** Budget units held (0 once released). */
  readonly cost: number
  /** Whether the permits were returned. */
  readonly released: boolean
  /**
   * Returns the permits to the host: `true`; `false` if already released.
   * @throws {LeaseError} the release did not count (`BULKHEAD_STALE_LEASE`, `BULKHEAD_FOREIGN_LEASE`).
   */
  release(): boolean
  /** Releases if still held (throws as `release()`). */
  [Symbol.dispose](): void
}

/**
 * One limit per host: a bulkhead shared by every process — `cluster` workers, forked or
 * separately started processes, containers sharing `dir` — and every worker thread that opens
 * `name`. FIFO across processes; a SIGKILLed holder's permits come back within about `probeMs`,
 * a stopped or hung one's after `leaseTtlMs`. Rejections are the local bulkhead's
 * `BulkheadError`s (same reasons and codes). Linux only.
 *
 * @example
 * const db = new HostBulkhead('payments-db', { maxConcurrent: 5 })   // 5 on this host, all workers
 * const permit = await db.acquire({ queueTimeoutMs: 2_000 })
 * try { await query() } finally { permit.release() }
 */
export declare class HostBulkhead {
  /**
   * Opens (creating if absent) the segment `name` and attaches this process (once per process).
   * @throws {TypeError} an unknown option, a local bulkhead's option a host bulkhead does not
   *   take (named), a value of the wrong type.
   * @throws {RangeError} a value out of range, or a bad `name` (1 … 200 of `A-Z a-z 0-9 . _ -`).
   * @throws {HostSegmentError} `code` `'HOST_SEGMENT'`: permission, an incompatible file,
   *   another host-wide setting, no free slot (`kind`); an `Error` with `code`
   *   `'HOST_UNSUPPORTED'` off Linux.
   */
  constructor(name: string, options?: HostBulkheadOptions | null)
  /**
   * A permit now, or `null` when not admitted at once (`concurrency_limit`).
   * @throws {BulkheadError} any other refusal (`budget_limit`, `timeout`, `shutdown`).
   * @throws {TypeError|RangeError} a bad argument.
   */
  tryAcquire(options?: HostTryAcquireOptions): HostPermit | null
  tryAcquire(weight: number, options?: { cost?: number | null; deadline?: number | null } | null): HostPermit | null
  /**
   * Resolves with a permit once admitted (FIFO across the host). Rejects with a `BulkheadError`
   * (`BULKHEAD_QUEUE_TIMEOUT`, `BULKHEAD_FULL` for this process's full queue,
   * `BULKHEAD_CLOSED`), with `signal.reason` when aborted, or with an argument error (never
   * throws). While it waits the process stays alive.
   */
  acquire(options?: HostAcquireOptions): Promise<HostPermit>
  /** The host's figures (see `HostBulkheadStats`). */
  stats(): HostBulkheadStats
  /** Probes the other processes now and reclaims the dead ones' slots: how many. */
  reap(): number
  /**
   * Closes this handle: its new requests are refused `shutdown`, its waiters rejected
   * `BULKHEAD_CLOSED`; held permits stay valid. Other handles and processes are not affected.
   */
  /** The host's metric samples for `hullguard/metrics`: the host's figures, live holders only (C37). */
  _metricSamples(): MetricSample[]
  close(): void
  /**
   * Resolves `{drained, active, queued}` (`active`, `queued`: this process's permits held and
   * waiters) once this process holds no permit of the host bulkhead and this handle has no waiter
   * (`drained: true`) or after `timeoutMs`
   * (`drained: false`; a number or `{timeoutMs}`; `undefined` / `Infinity` = until idle, `0` =
   * report at once). Does not close: graceful shutdown is `close()` then `drain()`. Rejects
   * (never throws) for a bad argument.
   */
  drain(timeoutMs?: number | DrainOptions | null): Promise<DrainResult>
  /** Whether `close()` was called in this process. */
  readonly closed: boolean
  readonly name: string
  /** The segment file. */
  readonly path: string
  /** This process's slot in the segment. */
  readonly slot: number
}

/**
 * Reclaims the slots of dead processes of host bulkhead `name` without attaching: for a
 * `cluster` primary's `worker.on('exit')` handler. Returns how many.
 * @throws {HostSegmentError} no such segment (`kind` `'io'`, `errno` 2) or unreadable; an `Error`
 *   with `code` `'HOST_UNSUPPORTED'` off Linux.
 */
export declare function reapHost(name: string, options?: { dir?: string | null } | null): number

// ----- one limit for a fleet (fleet.js, re-exported by the entry) -------------------------------

/**
 * The Redis client a `FleetBulkhead` drives — the one the application already has (its
 * connection, TLS, auth, Sentinel and Cluster settings stay its own), detected by shape:
 * - ioredis (`Redis` or `Cluster`): `client.call(...args)`;
 * - node-redis v4 and later: a client's `sendCommand(args)`, a cluster's
 *   `sendCommand(firstKey, isReadonly, args)` (routed by the pool's key);
 * - any function `(args) => Promise<reply>` (a wrapper, another client): `args` is the whole
 *   command as strings (`['FCALL', 'hg_sync', '6', …]`), the reply as the client resolves it
 *   (an integer, an array of integers, or of integers and strings).
 */
export type FleetRedisClient =
  | { call(command: string, ...args: string[]): Promise<unknown> }
  | { sendCommand(args: string[], ...rest: any[]): Promise<unknown> }
  | { sendCommand(firstKey: any, isReadonly: boolean | undefined, args: string[], ...rest: any[]): Promise<unknown> }
  | ((args: string[]) => Promise<unknown>)

/**
 * Options of `new FleetBulkhead(client, options)`: the fleet's, read by the fleet crate's option
 * table, and what stays local to this process — the class table (`classes`, `reserve`,
 * `lending`, `shed`) and `events` — read by the local `Bulkhead`'s own parser, with its errors
 * (`classes[1].priority must be …`). Any other key is a `TypeError` naming it — a local
 * bulkhead's option that cannot be fleet-wide, such as `rates`, `resilience`, `adaptive` or
 * `startLimit`, is refused as such, a snake_case spelling too; `undefined` / `null` is the
 * default. A value out of range is a `RangeError` naming the option and its range.
 */
export interface FleetBulkheadOptions {
  /**
   * The pool: every process that opens the same pool on the same Redis shares its limit.
   * 1 … 64 characters of `A-Z a-z 0-9 _ . : -`. Required.
   */
  pool: string
  /**
   * The fleet limit a *new* pool starts with: 1 … 2^32. Default 10. Once the pool exists its
   * limit lives in Redis (`applyLimits` changes it under a revision).
   */
  maxConcurrent?: number | null
  /**
   * The fleet budget — units in flight (tokens, bytes) across the pool — a *new* budget table
   * starts with: 1 … 2^32. Default none (no budget). Leased like the permits, in a second
   * lease table of the pool: this process admits a request's `cost` on its block of it (its
   * fair share); a cost above the block but within the fleet budget waits (queues) for the
   * block to grow, a cost above the fleet budget is refused `budget_limit` (while the block is
   * 0 a try is refused `budget_limit` with `detail.bound` `'fleet_lease'`). Once the table
   * exists its budget lives in Redis (`applyLimits({revision, budget})` changes it).
   */
  budget?: number | null
  /** This process's waiters: 0 … 2^20 (0 = never queue). Default 100. */
  maxQueue?: number | null
  /** How long a request may wait by default, ms. Default 30 000. */
  queueTimeoutMs?: number | null
  /**
   * The lease's time to live, ms: 100 … 3 600 000. Default 10 000. A crashed or partitioned
   * process's block returns within it; keep the longest call under it.
   */
  leaseTtlMs?: number | null
  /** The renewal period, ms: 10 … `leaseTtlMs` / 2. Default `leaseTtlMs` / 3. */
  beatMs?: number | null
  /**
   * Permits admitted on local authority while Redis is unreachable and the lease has run out
   * (0 … 2^32; 0, the default, fails closed). The fleet may then run up to `processes ×
   * localShare` over its limit: the user's choice.
   */
  localShare?: number | null
  /** Clock-rate allowance taken off each lease, parts per million of the TTL: 0 … 100 000. Default 10 000 (1 %). */
  clockDriftPpm?: number | null
  /** A fixed allowance taken off each lease deadline, ms: 0 … 1 000. Default 2. */
  leaseMarginMs?: number | null
  /** The shortest time between two syncs, ms: 1 … 1 000. Default 5. */
  minSyncIntervalMs?: number | null
  /** The most processes the pool admits: 1 … 100 000. Default 10 000. */
  maxHolders?: number | null
  /**
   * Replicated durability: after a sync that grew the block, `WAIT` for this many replicas
   * before admitting on the growth (0 … 16; 0, the default, is off).
   */
  waitReplicas?: number | null
  /** How long that `WAIT` may take, ms: 1 … 10 000. Default 100. */
  waitTimeoutMs?: number | null
  /** This process's holder id: 1 … 128 printable characters, no spaces. Default `<hostname>:<pid>:<random hex>`. */
  holder?: string | null
  /**
   * Admission classes, local to this process (as a local `Bulkhead`'s; index = class):
   * requests name one with `admissionClass`. They partition this process's block (and budget
   * block) — priorities, floors and ceilings apply inside it, not fleet-wide; a block below
   * the floors is fine. `classStats()` / `classNames` as on a local classed bulkhead.
   */
  classes?: ClassOptions[] | null
  /** Units of this process's block kept for high-priority classes (as a local `Bulkhead`'s). */
  reserve?: ReserveOptions | null
  /** Idle floor units lent to other classes, reclaimed first. Default false. */
  lending?: boolean | null
  /** A full queue evicts its youngest lowest-priority waiter for a higher arrival. Default false. */
  shed?: boolean | null
  /**
   * Admission events of the local core (`on('admit' | 'reject' | 'release' | …)`), delivered
   * as a local `Bulkhead`'s. Default false.
   */
  events?: boolean | null
}

/** The lease's state: `'idle'` (none yet, or a late grant given back), `'leased'`, `'lost'` (Redis answered LOST: a new one is on its way), `'expired'` (the deadline passed with no renewal), `'full'` (the pool has `maxHolders` holders). */
export type FleetLeaseState = 'idle' | 'leased' | 'lost' | 'expired' | 'full'

/**
 * `FleetBulkhead.stats().lease`: the lease of the permits as this process sees it; and
 * `stats().budgetLease`: the fleet budget's, the same fields in budget units (`held`, `share`,
 * `localLimit`, `fleetUsed`, `unleasedInFlight` are units; `fleetLimit` is the fleet budget,
 * `rev` its revision). Counts are Numbers, times ms.
 */
export interface FleetLeaseStats {
  pool: string
  holder: string
  state: FleetLeaseState
  /** The lease's generation (its fencing token; 0 without one). */
  generation: number
  /** The block Redis counts for this process. */
  held: number
  /** This process's share: the block it converges to (its fair share under contention). */
  share: number
  /** The block admissions run on now (0 without a valid lease; `localShare` while unreachable). */
  localLimit: number
  /** The fleet limit (0 before the first reply). */
  fleetLimit: number
  /** Permits held across the fleet, at the last reply. */
  fleetUsed: number
  /** Processes holding leases in the pool, at the last reply. */
  holders: number
  /** The pool state's epoch (server µs at its creation): it changes when Redis loses its state. */
  epoch: number
  /** The fleet limit's revision. */
  rev: number
  /** Whether the pool is learning (after a state loss: blocks do not grow). */
  learning: boolean
  /** Time left on the lease, ms (`null` without one). */
  leaseLeftMs: number | null
  /** Whether Redis failed to answer since the last successful sync. */
  unreachable: boolean
  /** The last error (`'redis unreachable: …'`, `'redis error: …'`), until a sync succeeds. */
  lastError: string | null
  /** Permits in flight here that no valid lease covers (after a loss or an expiry they run to completion). */
  unleasedInFlight: number
  /** Syncs answered. */
  syncsTotal: number
  /** Calls that failed (transport or protocol errors, no reply within 2 × `leaseTtlMs`). */
  errorsTotal: number
  /** LOST answers. */
  lossesTotal: number
  /** Deadlines passed with no renewal. */
  expiriesTotal: number
  /** Grants that came back too late to use and were given back (C42). */
  lateGrantsTotal: number
  /** Releases Redis fenced (the lease had already expired or been replaced). */
  releasesFencedTotal: number
  /** Changes of the pool's epoch seen (Redis restarted, failed over, `FLUSHALL`). */
  epochChangesTotal: number
  /** Growths `WAIT` did not see replicated in time (`waitReplicas`). */
  unreplicatedTotal: number
}

/**
 * `FleetBulkhead.stats()`: the local bulkhead's stats (its `limit` is the block admitted on, its
 * `budget.limit` the budget block) plus `lease` and `budgetLease`.
 */
export interface FleetBulkheadStats extends BulkheadStats {
  lease: FleetLeaseStats
  /** The fleet budget's lease (units); `null` without `budget`. */
  budgetLease: FleetLeaseStats | null
}

/**
 * `FleetBulkhead.applyLimits()`: the fleet limit and/or the fleet budget under a revision, at
 * least one of them (any other key is refused by name).
 */
export type FleetLimits = {
  /** 1 … 2^53 − 1; applied only above the revision in force (each lease table has its own). */
  revision: number
} & (
  | {
      /** The fleet limit: 0 … 2^32. */
      limit: number
      /** The fleet budget, units: 1 … 2^32 (a bulkhead opened with `budget` only). */
      budget?: number | null
    }
  | { limit?: number | null; budget: number }
)

/**
 * What `applyLimits()` resolves: `applied` true only if every value given was installed (false
 * when a revision as new or newer is in force); the revision in force (the limit's table's, or
 * the budget's when only `budget` was given); the fleet limit and the fleet budget in force,
 * each `null` when not given.
 */
export interface FleetLimitsResult {
  applied: boolean
  revision: number
  limit: number | null
  budget: number | null
}

/** One holder of a pool, as Redis holds it. */
export interface FleetPoolHolder {
  holder: string
  generation: number
  held: number
  /** Its last reported want. */
  want: number
  /** When its lease expires, server ms. */
  expiresMs: number
}

/**
 * `FleetBulkhead.poolStats()`: the pool's lease table as Redis holds it (times are server ms):
 * of its permits, or (`poolStats('budget')`) of its fleet budget, in units.
 */
export interface FleetPoolStats {
  nowMs: number
  /** The fleet limit (the fleet budget); `null` when the table does not exist (yet, or any more). */
  limit: number | null
  /** Permits (units) held across the pool. */
  used: number
  /** The state's epoch. */
  epoch: number
  /** The last generation handed out. */
  fence: number
  /** The limit's revision. */
  rev: number
  /** Until when the pool learns (0: not since its creation). */
  learnUntilMs: number
  /** The sum of the holders' wants. */
  wantSum: number
  holders: FleetPoolHolder[]
}

/**
 * One limit for a fleet of processes on many hosts, held in Redis (≥ 7.0: Functions;
 * docs/design.md §16): each process leases a block of permits under a TTL and admits on it
 * locally — an acquire is a local bulkhead's acquire plus one clock read, never a round trip —
 * while a fenced sync per beat (and when demand changes) grows, shrinks and renews the block by
 * fair share of the processes' wants. A `Bulkhead` in every other respect: `acquire`, `run`,
 * `tryAcquire`, `admit`, `drain`, AbortSignals, deadlines, `Permit`s, `BulkheadError`s (a
 * refusal for want of a lease is `concurrency_limit` with `detail.bound` `'fleet_lease'`),
 * `withBulkhead`, `hullguard/metrics`. Without a valid lease it admits nothing (or
 * `localShare`); a crashed process's block returns within `leaseTtlMs`.
 *
 * With `budget`, a fleet budget of units (tokens, bytes) is leased the same way: a request's
 * `cost` is admitted on this process's budget block, waits for it to grow when above it, and is
 * refused `budget_limit` above the fleet budget. Admission classes (`classes`, …) and
 * admission events (`events: true`, `on('admit' | …)`) are this process's, as a local
 * `Bulkhead`'s: classes partition its blocks.
 *
 * @example
 * const redis = new Redis(process.env.REDIS_URL)            // ioredis, or a connected node-redis client
 * const llm = new FleetBulkhead(redis, { pool: 'llm-provider', maxConcurrent: 50 })
 * const answer = await llm.run((signal) => callProvider(prompt, { signal }))
 * // at shutdown: give the block back, then quit the client
 * await llm.close()
 * await redis.quit()
 */
export declare class FleetBulkhead extends Bulkhead implements AsyncDisposable {
  /**
   * Starts at once: the first block is asked for in one round trip (acquires queue until it
   * arrives). The driver runs on the event loop; it keeps the process alive only while callers
   * are queued for the block (their queue timeout bounds that), never after `close()`.
   * @throws {TypeError} a client of no known kind; an unknown option, a local bulkhead's option
   *   that cannot be fleet-wide, a snake_case spelling, a value of the wrong type; no `pool`.
   * @throws {RangeError} a value out of range (naming the option and its range), a bad `pool`
   *   or `holder`, `beatMs` above half of `leaseTtlMs`.
   */
  constructor(client: FleetRedisClient, options: FleetBulkheadOptions)
  /**
   * `new FleetBulkhead(client, options)`, resolved once the hullguard library is on the server
   * (loaded if missing: one round trip when it is there). Rejects with the client's error, the
   * bulkhead closed, when Redis cannot be reached or refuses the library; throws as the
   * constructor for bad arguments (as a rejection).
   */
  static open(client: FleetRedisClient, options: FleetBulkheadOptions): Promise<FleetBulkhead>
  /** The pool. */
  readonly pool: string
  /** This process's holder id in the pool. */
  readonly holder: string
  /** The local bulkhead's stats plus `lease` and `budgetLease` (`null` without `budget`). */
  stats(): FleetBulkheadStats
  /**
   * Sets the fleet limit and/or the fleet budget in Redis under `revision` (one call per value,
   * the limit's first; each lease table keeps its own revision; lowering never revokes:
   * holders shrink to their shares at their next syncs). Resolves `{applied, revision, limit,
   * budget}` — `applied` true only if every value given was installed, the values in force
   * (`null` when not given); rejects with a `TypeError` for another field (`maxQueue`,
   * `reserve`, `rates`, …: not fleet-wide), neither value, or `budget` on a bulkhead opened
   * without one (naming `budget`), a `RangeError` for a value out of range, or with the
   * client's error.
   */
  applyLimits(limits: FleetLimits): Promise<FleetLimitsResult>
  /**
   * The pool's lease table as Redis holds it (one read-only call): of its permits (default),
   * or of its fleet budget (`'budget'`: units; rejects with a `TypeError` without `budget`).
   * Rejects with the client's error.
   */
  poolStats(dimension?: 'permits' | 'budget'): Promise<FleetPoolStats>
  /**
   * Stops admission (queued callers are rejected `BULKHEAD_CLOSED`, calls in flight finish),
   * stops the driver and gives the blocks back (the permits', and the budget's), then resolves
   * (never rejects: a block that could not be given back expires in Redis within
   * `leaseTtlMs`). Idempotent. Call it before quitting the client.
   */
  close(): Promise<void>
  /** `close()`: `await using fleet = new FleetBulkhead(…)`. */
  [Symbol.asyncDispose](): Promise<void>
  /** @throws {TypeError} always: the limit is the lease's block; set the fleet limit with `applyLimits`. */
  setLimit(limit: number): never
  /** @throws {TypeError} always: the budget is the lease's block; set the fleet budget with `applyLimits({revision, budget})`. */
  setBudget(budget: number): never
  /** @throws {TypeError} always: observe mode is not fleet-wide. */
  setObserve(mode: ObserveMode): never
}

// ----- deadlines (ambient time budgets) ---------------------------------------------------------

/**
 * Runs `fn()` with a time budget of `ms` from now (an `AsyncLocalStorage` scope that follows its
 * async continuations): every admission inside it without a `deadline` takes the deadline
 * `performance.now() + ms` (an explicit one is min'd with it) — refused `timeout` once it has
 * passed, queued at most until it, `run()`'s `fn` signal aborting at it — and
 * `withBulkhead`'s fetch gets the time left as its timeout. Nested scopes take the earlier
 * deadline. A negative `ms` is a spent budget (admissions are refused `timeout`), `Infinity`
 * adds no bound. Returns what `fn` returns.
 *
 * @example
 * await withDeadline(1500, async () => {
 *   const user = await db.run(() => getUser(id))          // queues at most until the deadline
 *   return api.run((signal) => fetch(url, { signal }))     // aborts at what is left of it
 * })
 * @throws {TypeError} `ms` not a number or `fn` not a function. @throws {RangeError} `ms` NaN or -Infinity.
 */
export declare function withDeadline<T>(ms: number, fn: () => T): T

/**
 * `withDeadline` with an absolute deadline `at` (ms on the `performance.now()` scale, e.g.
 * `currentDeadline()` or a deadline received from upstream); `Infinity` adds no bound.
 * @throws {TypeError} `at` not a number or `fn` not a function. @throws {RangeError} `at` NaN or -Infinity.
 */
export declare function withDeadlineAt<T>(at: number, fn: () => T): T

/** The deadline in effect here: absolute ms on the `performance.now()` scale, or `undefined`. */
export declare function currentDeadline(): number | undefined

/** The ms left until the deadline in effect (0 once it has passed, never negative), or `undefined`. */
export declare function remainingMs(): number | undefined

/**
 * Private test hook (not part of the public API): pass a `VirtualClock` as
 * `options[__test.kClock]` to `Bulkhead` / `Registry` to replace the stats clock (a
 * `deadline` is then ms on that clock), and `setNow(() => clock.nowMs())` so that
 * `withDeadline` / `remainingMs` read it (`setNow(undefined)` restores `performance.now()`).
 * @internal
 */
export declare const __test: {
  readonly kClock: symbol
  readonly kNative: symbol
  readonly VirtualClock: {
    new (): { advance(ms: number): void; nowMs(): number }
  }
  setNow(now: (() => number) | undefined): void
}
