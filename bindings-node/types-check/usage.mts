// A typed usage file over the whole public API (ESM). Checked by `tsc --noEmit -p types-check`,
// never run. Lines marked @ts-expect-error must stay errors: they pin the types' strictness.
import hullguard, {
  Bulkhead,
  BulkheadError,
  MAX_PERMITS,
  MAX_QUEUE,
  Permit,
  REASONS,
  Registry,
  originKey,
  // HTTP integrations
  BulkheadAgent,
  guardAgent,
  withBulkhead,
} from 'hullguard'
import type {
  AcquireOptions,
  BulkheadErrorCode,
  BulkheadOptions,
  BulkheadSnapshot,
  BulkheadStats,
  DrainOptions,
  DrainResult,
  Guarded,
  Reason,
  RegistryOptions,
  RejectedByReason,
  TryAcquireOptions,
} from 'hullguard'

// ----- constants --------------------------------------------------------------------------------
const maxPermits: number = MAX_PERMITS
const maxQueue: number = MAX_QUEUE
const first: 'concurrency_limit' = REASONS[0]
const reasons: readonly Reason[] = REASONS
// @ts-expect-error REASONS is read-only
REASONS.push('x')

// ----- construction -----------------------------------------------------------------------------
const opts: BulkheadOptions = { maxConcurrent: 10, maxQueue: 100, queueTimeoutMs: 30_000, enabled: true }
const bh = new Bulkhead(opts)
new Bulkhead()
new Bulkhead({ queueTimeoutMs: Infinity })
// @ts-expect-error counts are numbers
new Bulkhead({ maxConcurrent: '10' })
// @ts-expect-error enabled is a boolean
new Bulkhead({ enabled: 1 })
// @ts-expect-error an unknown option
new Bulkhead({ maxConcurent: 10 })
// Observe (shadow) mode: one of four words.
new Bulkhead({ observe: 'all' })
// @ts-expect-error not an observe mode
new Bulkhead({ observe: 'shadow' })
// Misspelled option names are errors for the types too (issue 13, bug 2; the runtime refuses them).
// @ts-expect-error an unknown option (queueTimeoutMs)
new Bulkhead({ queueTimeout: 5 })
// @ts-expect-error an unknown registry option (maxKeys)
new Registry({ maxkeys: 1 })
// @ts-expect-error an unknown option in an override
new Registry({ overrides: { k: { maxConcurent: 2 } } })

const mc: number = bh.maxConcurrent
const mq: number = bh.maxQueue
const qt: number = bh.queueTimeoutMs
const en: boolean = bh.enabled
const lim: number = bh.limit
const closed: boolean = bh.closed
const key: string | null = bh.key
// @ts-expect-error read-only
bh.limit = 3

async function bulkheadApi(signal: AbortSignal): Promise<void> {
  // acquire → Promise<Permit>
  const a: AcquireOptions = { signal, weight: 2, queueTimeoutMs: 1_000 }
  const permit: Permit = await bh.acquire(a)
  await bh.acquire()
  await bh.acquire({ queueTimeoutMs: null, signal: null })
  const w: number = permit.weight
  const released: boolean = permit.released
  const pkey: string | null = permit.key
  permit.releasePartial(1)
  const first: boolean = permit.release()
  permit[Symbol.dispose]()
  // @ts-expect-error weight is a number
  await bh.acquire({ weight: '2' })
  // @ts-expect-error signal is an AbortSignal
  await bh.acquire({ signal: 'abort' })
  // @ts-expect-error an unknown per-call option (weight)
  await bh.acquire({ wieght: 2 })
  // @ts-expect-error an unknown per-call option (queueTimeoutMs)
  await bh.run(() => 1, { queueTimeout: 5 })
  // @ts-expect-error Permit has no public constructor
  new Permit()

  // `using` releases at scope exit
  {
    using held = await bh.acquire()
    held.weight satisfies number
  }

  // run → Promise of fn's awaited result; fn gets the signal
  const n: number = await bh.run(async (s) => {
    const aborted: boolean | undefined = s?.aborted
    return 42
  }, { signal, weight: 1, queueTimeoutMs: 0 })
  const str: string = await bh.run(() => 'sync value')
  const nested: number = await bh.run(() => Promise.resolve(Promise.resolve(1)))
  const g: Guarded<string> = (s) => (s === undefined ? 'none' : 'some')
  await bh.run(g)
  // @ts-expect-error run's result type is fn's
  const wrong: string = await bh.run(async () => 42)
  // @ts-expect-error fn must be a function
  await bh.run(42)

  // tryAcquire: a Permit or null
  const t: TryAcquireOptions = { weight: 1 }
  const maybe: Permit | null = bh.tryAcquire(t)
  // @ts-expect-error may be null
  bh.tryAcquire().release()
  maybe?.release()
  // @ts-expect-error tryAcquire takes no signal
  bh.tryAcquire({ signal })
  // @ts-expect-error an unknown tryAcquire option (weight)
  bh.tryAcquire({ wieght: 2 })

  bh.setLimit(5)
  // @ts-expect-error limit is a number
  bh.setLimit('5')

  // stats: camelCase fields, snake_case reason keys
  const s: BulkheadStats = bh.stats()
  const counts: number[] = [
    s.active, s.queued, s.grantedUnclaimed, s.limit, s.maxConcurrent, s.available,
    s.admittedTotal, s.releasedTwiceTotal, s.leakedTotal, s.ringFree, s.queueWaitCount,
    s.queueWaitSumNs, s.queueWaitMaxNs,
  ]
  const r: RejectedByReason = s.rejectedByReason
  const ql: number = s.rejectedByReason.queue_limit + r.concurrency_limit + r.key_limit + r.timeout +
    r.aborted + r.shutdown + r.circuit_open + r.call_timeout
  const observedCalls: number = s.observedByReason.concurrency_limit
  const mode: 'off' | 'concurrency' | 'budget' | 'all' = s.observe
  const adaptive: { limit: number } | null = s.adaptive
  const circuit: { state: 'closed' | 'open' | 'half_open' } | null = s.circuit
  // @ts-expect-error reason keys are not camel-cased
  s.rejectedByReason.queueLimit
  // @ts-expect-error field names are camel-cased
  s.granted_unclaimed

  // close / drain
  bh.close()
  const d: DrainOptions = { timeoutMs: 0 }
  const dr: DrainResult = await bh.drain(d)
  const drained: boolean = dr.drained
  const both: number = dr.active + dr.queued
  await bh.drain()
  await bh.drain({ timeoutMs: null })
  // @ts-expect-error drain's option is timeoutMs
  await bh.drain({ timeout: 5 })
}

// ----- errors -----------------------------------------------------------------------------------
function onError(e: unknown): string {
  if (e instanceof BulkheadError) {
    const code: BulkheadErrorCode = e.code
    const reason: Reason = e.reason
    const retryable: boolean = e.retryable
    const category: 'resilience' = e.category
    const snap: BulkheadSnapshot = e.snapshot
    const k: string | null = e.snapshot.key
    const total: number = snap.active + snap.queued + snap.limit + snap.available
    const asError: Error = e
    // @ts-expect-error code is a closed set
    const bad: 'EOTHER' = e.code
    return `${e.name}: ${e.message} ${code} ${reason} ${retryable} ${category} ${k} ${total} ${asError.stack}`
  }
  return 'other'
}
new BulkheadError('queue_limit', { active: 1, queued: 2, limit: 1, available: 0 })
new BulkheadError('key_limit', { active: 0, queued: 0, limit: 0, available: 0 }, 'https://a.example:443')
// @ts-expect-error not a reason
new BulkheadError('full', { active: 0, queued: 0, limit: 0, available: 0 })

// ----- Registry ---------------------------------------------------------------------------------
const ro: RegistryOptions = {
  maxConcurrent: 8,
  maxQueue: 16,
  queueTimeoutMs: 5_000,
  enabled: true,
  maxKeys: 64,
  overrides: { 'https://slow.example:443': { maxConcurrent: 2, queueTimeoutMs: 100 } },
}
const reg = new Registry(ro)
new Registry()
// @ts-expect-error overrides take bulkhead options
new Registry({ overrides: { a: { maxKeys: 3 } } })

async function registryApi(signal: AbortSignal): Promise<void> {
  const k = originKey('https://API.example.com/v1')
  const v: number = await reg.run(k, async (s) => (s ? 1 : 2), { signal, weight: 1, queueTimeoutMs: 10 })
  const p: Permit = await reg.acquire(k, { signal })
  p.release()
  const q: Permit | null = reg.tryAcquire(k, { weight: 1 })
  q?.release()
  const b: Bulkhead = reg.get(k)
  const all: Record<string, BulkheadStats> = reg.stats()
  const aborted: number | undefined = all[k]?.rejectedByReason.aborted
  const keys: string[] = reg.keys()
  const size: number = reg.size
  const mk: number = reg.maxKeys
  const ov: Readonly<Record<string, BulkheadOptions>> = reg.overrides
  reg.close()
  // @ts-expect-error keys are strings
  reg.get(1)
  // @ts-expect-error overrides are read-only
  reg.overrides['x'] = {}
}

// ----- the default export is the same module ------------------------------------------------------
const B2: typeof Bulkhead = hullguard.Bulkhead
const ok: (url: string) => string = hullguard.originKey

void [maxPermits, maxQueue, first, reasons, mc, mq, qt, en, lim, closed, key, bulkheadApi, onError, registryApi, B2, ok]

// ----- HTTP integrations ----------------------------------------------------------------------------
const guardedFetch: typeof fetch = withBulkhead(fetch, reg)
async function httpApi(): Promise<void> {
  const res: Response = await guardedFetch('https://api.example.com/v1', { signal: AbortSignal.timeout(1000) })
  await res.text()
}
// @ts-expect-error the registry is required
withBulkhead(fetch)

class FakeAgent {
  constructor(readonly options?: { keepAlive?: boolean; maxSockets?: number }) {}
  destroy(): void {}
}
const Guarded = guardAgent(FakeAgent)
const agent = new Guarded({ registry: reg, keepAlive: true, maxSockets: 4 })
const agentRegistry: Registry = agent.registry
agent.destroy()
// @ts-expect-error the registry is required
new Guarded({ keepAlive: true })
// @ts-expect-error an option the base class does not take
new Guarded({ registry: reg, keepAliv: true })
const plain = new BulkheadAgent({ registry: reg, keepAlive: true })
void [httpApi, agentRegistry, plain]

// ----- policies (resilience, outcomes, stateChange) ---------------------------------------------
import { OUTCOMES } from 'hullguard'
import type {
  AdaptiveOptions,
  AdaptiveStats,
  BreakerOptions,
  CircuitState,
  CircuitStats,
  Outcome,
  ReleaseOptions,
  ResilienceOptions,
  StateChangeListener,
} from 'hullguard'

const adaptiveOpts: AdaptiveOptions = { algorithm: 'aimd', minLimit: 1, maxLimit: 8, targetLatencyMs: 250 }
const breakerOpts: BreakerOptions = { failureThreshold: 3, openDurationMs: 2_000, halfOpenMaxCalls: 1 }
const resilience: ResilienceOptions = { adaptive: adaptiveOpts, breaker: breakerOpts, callTimeoutMs: 1_000 }
const guarded = new Bulkhead({ maxConcurrent: 8, resilience })
const plainAgain = new Bulkhead({ resilience: null })
const policyRegistry = new Registry({
  maxConcurrent: 4,
  resilience: { breaker: {} },
  overrides: { 'https://slow.example:443': { resilience: { breaker: { openDurationMs: 500 }, adaptive: null } } },
})
// @ts-expect-error algorithm is 'gradient2' | 'aimd'
new Bulkhead({ resilience: { adaptive: { algorithm: 'vegas' } } })
// @ts-expect-error an unknown breaker option
new Bulkhead({ resilience: { breaker: { resetTimeout: 5 } } })

const onChange: StateChangeListener = (key: string | null, from: CircuitState, to: CircuitState) => {
  void [key, from, to]
}
const chained: Bulkhead = guarded.on('stateChange', onChange).off('stateChange', onChange)
const chainedReg: Registry = policyRegistry.on('stateChange', (key, from, to) => void [key, from, to])
// @ts-expect-error only 'stateChange'
guarded.on('limitChange', onChange)

async function outcomes(): Promise<void> {
  const permit = await guarded.acquire()
  const how: Outcome = 'overload'
  const opts: ReleaseOptions = { outcome: how }
  const released: boolean = permit.release(opts)
  // @ts-expect-error an unknown outcome
  permit.release({ outcome: 'timeout' })
  // @ts-expect-error an unknown release option (outcome)
  permit.release({ outcom: 'failure' })
  const code: 0 | 1 | 2 | 3 = OUTCOMES.failure
  const s = guarded.stats()
  const circuit: CircuitStats | null = s.circuit
  const adaptive: AdaptiveStats | null = s.adaptive
  const state: CircuitState | undefined = circuit?.state
  const limit: number | undefined = adaptive?.limit
  const decreases: number | undefined = adaptive?.decreasesTotal
  const viaRun: number = await guarded.run(async (signal) => (signal?.aborted ? 0 : 1))
  try {
    await guarded.run(() => 1)
  } catch (e) {
    if (e instanceof BulkheadError && (e.code === 'CIRCUIT_OPEN' || e.code === 'BULKHEAD_CALL_TIMEOUT')) {
      const r: Reason = e.reason
      void r
    }
  }
  void [released, code, state, limit, decreases, viaRun]
}
void [plainAgain, chained, chainedReg, outcomes]
