// One limit for a fleet, typed (docs/design.md §16): typechecked by `tsc --noEmit -p types-check`,
// never run. Lines marked @ts-expect-error must stay errors: they pin the names and shapes.
import {
  Bulkhead,
  BulkheadError,
  FleetBulkhead,
  type FleetBulkheadOptions,
  type FleetBulkheadStats,
  type FleetLeaseState,
  type FleetLeaseStats,
  type FleetLimitsResult,
  type FleetPoolStats,
  type FleetRedisClient,
  type Permit,
} from 'hullguard'

// The clients, by shape (ioredis, node-redis, a node-redis cluster, a function).
declare const ioredis: { call(command: string, ...args: (string | number | Uint8Array)[]): Promise<unknown>; quit(): Promise<'OK'> }
declare const nodeRedis: { sendCommand<T = unknown>(args: ReadonlyArray<string | Uint8Array>, options?: object): Promise<T> }
declare const cluster: {
  sendCommand<T = unknown>(firstKey: string | Uint8Array | undefined, isReadonly: boolean | undefined, args: ReadonlyArray<string | Uint8Array>): Promise<T>
}
const send: FleetRedisClient = async (args: string[]) => ioredis.call(args[0]!, ...args.slice(1))

const options: FleetBulkheadOptions = {
  pool: 'llm-provider',
  maxConcurrent: 50,
  maxQueue: 100,
  queueTimeoutMs: 2_000,
  leaseTtlMs: 10_000,
  beatMs: 3_000,
  localShare: 0,
  clockDriftPpm: 10_000,
  leaseMarginMs: 2,
  minSyncIntervalMs: 5,
  maxHolders: 10_000,
  waitReplicas: 0,
  waitTimeoutMs: 100,
  holder: null,
}
const llm = new FleetBulkhead(ioredis, options)
new FleetBulkhead(nodeRedis, { pool: 'p' })
new FleetBulkhead(cluster, { pool: 'p' })
new FleetBulkhead(send, { pool: 'p' })
const opened: FleetBulkhead = await FleetBulkhead.open(nodeRedis, { pool: 'p', leaseTtlMs: 5_000 })
// @ts-expect-error the pool is required
new FleetBulkhead(ioredis, { maxConcurrent: 5 })
// @ts-expect-error durations are …Ms
new FleetBulkhead(ioredis, { pool: 'p', leaseTtl: 10 })
// @ts-expect-error class rates are not fleet-wide (refused by name at run time too)
new FleetBulkhead(ioredis, { pool: 'p', rates: { requests: { amount: 1, perMs: 1000 } } })
// A fleet budget, classes and events (this process's, as a local Bulkhead's).
const tokens = new FleetBulkhead(ioredis, {
  pool: 'llm-tokens',
  maxConcurrent: 50,
  budget: 100_000,
  classes: [{ name: 'batch', priority: 0 }, { name: 'interactive', priority: 9, floor: 1 }],
  reserve: null,
  lending: true,
  shed: false,
  events: true,
})
tokens.on('admit', (e) => console.log(e.type, e.cost))
const costly: Permit = await tokens.acquire({ cost: 2_000, admissionClass: 'interactive' })
costly.release({ usage: 1_500 })
const budgetLease = tokens.stats().budgetLease
const units: number = budgetLease === null ? 0 : budgetLease.held + budgetLease.fleetLimit
const both: FleetLimitsResult = await tokens.applyLimits({ revision: 4, limit: 60, budget: 200_000 })
const onlyBudget: number | null = (await tokens.applyLimits({ revision: 5, budget: 150_000 })).budget
// @ts-expect-error applyLimits sets the limit or the budget: one is required
await tokens.applyLimits({ revision: 6 })
const budgetPool: FleetPoolStats = await tokens.poolStats('budget')
// @ts-expect-error a lease table is 'permits' or 'budget'
await tokens.poolStats('tokens')
const interactive: string | null = tokens.classNames[1] ?? null
void [units, both, onlyBudget, budgetPool, interactive]
// @ts-expect-error not a Redis client
new FleetBulkhead({ get: () => 1 }, { pool: 'p' })

// A Bulkhead in every other respect.
const asLocal: Bulkhead = llm
const permit: Permit = await llm.acquire({ signal: new AbortController().signal, queueTimeoutMs: 500 })
permit.release()
const answer: string = await llm.run(async (signal) => (signal?.aborted ? '' : 'ok'))
const now: Permit | null = llm.tryAcquire()
const r = await llm.admit()
if (!r.ok && r.reason === 'concurrency_limit' && r.detail?.bound === 'fleet_lease') console.log('no lease')

const s: FleetBulkheadStats = llm.stats()
const state: FleetLeaseState = s.lease.state
const left: number | null = s.lease.leaseLeftMs
const err: string | null = s.lease.lastError
const counters: number = s.lease.syncsTotal + s.lease.lateGrantsTotal + s.active + s.lease.unreplicatedTotal
const noBudget: FleetLeaseStats | null = s.budgetLease
const applied: FleetLimitsResult = await llm.applyLimits({ revision: 2, limit: 40 })
// @ts-expect-error only the limit and the budget are fleet-wide
await llm.applyLimits({ revision: 3, limit: 1, maxQueue: 3 })
const pool: FleetPoolStats = await llm.poolStats()
const holders: string[] = pool.holders.map((h) => `${h.holder}:${h.held}/${h.want}@${h.expiresMs}`)
const limit: number | null = pool.limit
const name: string = llm.pool + llm.holder
const closing: Promise<void> = llm.close()
await opened[Symbol.asyncDispose]()
const never: never = llm.setLimit(3)
void [asLocal, answer, now, state, left, err, counters, noBudget, applied, holders, limit, name, closing, never, BulkheadError]
