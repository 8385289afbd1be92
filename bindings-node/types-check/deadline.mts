// Deadlines and time budgets, typed (issue 17): typechecked by `tsc --noEmit -p types-check`,
// never run. Lines marked @ts-expect-error must stay errors: they pin the names and shapes.
import {
  Bulkhead,
  BulkheadError,
  Registry,
  currentDeadline,
  remainingMs,
  withBulkhead,
  withDeadline,
  withDeadlineAt,
  type AcquireOptions,
  type LimitsOptions,
  type QueueDelayOptions,
  type TryAcquireOptions,
} from 'hullguard'

const bh = new Bulkhead({
  maxConcurrent: 8,
  minServiceTimeMs: 50,
  queueDelayTargetMs: 10,
  queueDelayIntervalMs: 100,
  adaptiveLifo: true,
})
// @ts-expect-error adaptiveLifo is a boolean
new Bulkhead({ adaptiveLifo: 1 })

const at: number = performance.now() + 1_500
const opts: AcquireOptions = { deadline: at, queueTimeoutMs: 200 }
const none: AcquireOptions = { deadline: Infinity }
const tryOpts: TryAcquireOptions = { deadline: null }
// @ts-expect-error a deadline is a number (ms), not a Date
const wrong: AcquireOptions = { deadline: new Date() }

export async function budgets(): Promise<number> {
  const permit = await bh.acquire(opts)
  permit.release()
  bh.tryAcquire(tryOpts)?.release()
  const r: number = await withDeadline(1_500, () => bh.run((signal) => (signal?.aborted ? 0 : 1), { deadline: at }))
  const nested: Promise<string> = withDeadlineAt(at, async () => 'x')
  const d: number | undefined = currentDeadline()
  const left: number | undefined = remainingMs()
  const dry = new Registry().wouldAdmit('k', { deadline: at })
  try {
    await bh.acquire({ deadline: performance.now() - 1 })
  } catch (e) {
    if (e instanceof BulkheadError && e.code === 'BULKHEAD_QUEUE_TIMEOUT') void e.detail?.bound
    if (e instanceof BulkheadError && e.code === 'BULKHEAD_SHED') void e.retryable
  }
  void [nested, d, left, dry, none]
  return r
}

const q: QueueDelayOptions = { targetMs: 10, intervalMs: 1_000, lifo: true }
const limits: LimitsOptions = { revision: 2, queueDelay: q }
bh.applyLimits(limits)
bh.applyLimits({ revision: 3, queueDelay: { targetMs: 0 } })
// @ts-expect-error targetMs is required
bh.applyLimits({ revision: 4, queueDelay: { lifo: true } })

export const gfetch = withBulkhead(fetch, new Registry(), { deadlineHeader: 'grpc-timeout' })
export const plain = withBulkhead(fetch, bh, { deadlineHeader: false })
// @ts-expect-error the header option is a name
withBulkhead(fetch, bh, { deadlineHeader: true })
void [wrong]
