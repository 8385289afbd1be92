// One limit per host, typed (issue 19): typechecked by `tsc --noEmit -p types-check`, never run.
// Lines marked @ts-expect-error must stay errors: they pin the names and shapes.
import {
  BulkheadError,
  HostBulkhead,
  HostPermit,
  LeaseError,
  reapHost,
  type HostBulkheadOptions,
  type HostBulkheadStats,
  type HostSegmentError,
} from 'hullguard'

const options: HostBulkheadOptions = {
  maxConcurrent: 5,
  maxQueue: 100,
  queueTimeoutMs: 2_000,
  budget: null,
  leaseTtlMs: 10_000,
  beatMs: 1_000,
  probeMs: 250,
  slots: 64,
  dir: '/dev/shm',
  mode: 0o600,
  onMismatch: 'adopt',
}
const db = new HostBulkhead('payments-db', options)
const segmentKind = (e: HostSegmentError): string => `${e.kind} ${e.path} ${e.errno ?? ''}`
// @ts-expect-error a host bulkhead has no classes (refused by name at run time too)
new HostBulkhead('x', { classes: [] })
// @ts-expect-error durations are …Ms
new HostBulkhead('x', { leaseTtl: 10 })
// @ts-expect-error onMismatch is 'error' or 'adopt'
new HostBulkhead('x', { onMismatch: 'ignore' })

const now: HostPermit | null = db.tryAcquire()
const weighed: HostPermit | null = db.tryAcquire(2, { cost: 10 })
const same: HostPermit | null = db.tryAcquire({ weight: 2, cost: 10 })
// @ts-expect-error tryAcquire never queues: no signal
db.tryAcquire({ signal: new AbortController().signal })

const ac = new AbortController()
const permit: HostPermit = await db.acquire({ weight: 1, queueTimeoutMs: 500, cost: 0, signal: ac.signal })
// @ts-expect-error a host bulkhead has no admission classes
await db.acquire({ admissionClass: 'batch' })
const released: boolean = permit.release()
const held: number = permit.weight + permit.cost
try {
  permit.release()
} catch (e) {
  if (e instanceof LeaseError) {
    const code: 'BULKHEAD_STALE_LEASE' | 'BULKHEAD_FOREIGN_LEASE' = e.code
  } else if (e instanceof BulkheadError) {
    const reason: string = e.reason
  }
}
{
  using p = await db.acquire()
}

const s: HostBulkheadStats = db.stats()
const figures: number = s.active + s.inFlight + s.attached + s.localActive + s.reclaimedDeadTotal + s.staleReleasesTotal
const file: string = s.path
const drained: boolean = (await db.drain(1_000)).drained
const left: number = (await db.drain({ timeoutMs: 1_000 })).active
// @ts-expect-error drain reports {drained, active, queued}, as the local bulkhead's
const flag: boolean = await db.drain()
const reaped: number = db.reap() + reapHost('payments-db', { dir: '/dev/shm' })
// @ts-expect-error reapHost takes only a dir
reapHost('payments-db', { probeMs: 1 })
db.close()
const info: [boolean, string, string, number] = [db.closed, db.name, db.path, db.slot]
export { now, weighed, same, released, held, figures, file, drained, left, flag, reaped, info, segmentKind }
