// Gateway admission, typed (issue 16): typechecked by `tsc --noEmit -p types-check`, never
// run. Lines marked @ts-expect-error must stay errors: they pin the option names and shapes.
import {
  Bulkhead,
  BulkheadError,
  Registry,
  StaleRevisionError,
  ADMISSION_EVENTS,
  type AdmissionEvent,
  type AdmitResult,
  type ClassStats,
  type RejectionDetail,
  type UsageReport,
  type WouldAdmitResult,
} from 'hullguard'

const bh = new Bulkhead({
  maxConcurrent: 8,
  budget: 100_000,
  classes: [
    { name: 'interactive', priority: 10, floor: 2, budgetFloor: 10_000 },
    { name: 'batch', ceiling: 4, observe: 'off' },
  ],
  reserve: { permits: 1, minPriority: 5 },
  lending: true,
  shed: false,
  rates: { requests: { amount: 10, perMs: 1000, burst: 5 }, units: { amount: 1000, perMs: 1000, burst: 2000 } },
  events: true,
})

async function gateway(): Promise<number> {
  const text: string = await bh.run(async () => 'hi', {
    cost: 500,
    admissionClass: 'interactive',
    getUsage: (r: string) => r.length,
  })
  const permit = await bh.acquire({ cost: 10, admissionClass: 1, observe: 'budget', queueTimeoutMs: 50 })
  const r: UsageReport = permit.reportUsage(5, 5)
  const change: 'unchanged' | 'shrank' | 'grew' | 'overran' = r.change
  permit.refund(1)
  const n: number = permit.cost + permit.revision
  const cancel: boolean = permit.cancelRequested
  permit.release({ outcome: 'success', usage: 7 })
  const a: AdmitResult = await bh.admit({ cost: 1 })
  if (a.ok) a.permit.release()
  else {
    const d: RejectionDetail | null = a.detail
    void [a.reason, d?.bound, d?.retryAfterMs]
  }
  const t = bh.tryAdmit({ admissionClass: 'batch' })
  if (t.ok) t.permit.release()
  const w: WouldAdmitResult = bh.wouldAdmit({ cost: 3 })
  const pos: number | null = w.position
  try {
    bh.applyLimits({ revision: 2, limit: 6, budget: 50_000, reserve: { permits: 0 }, rates: {} })
  } catch (e) {
    if (e instanceof StaleRevisionError) return e.current
    if (e instanceof BulkheadError) return e.detail?.calls.limit ?? 0
  }
  bh.setBudget(1000)
  bh.setObserve('all')
  const c: ClassStats = bh.classStats('batch')
  bh.on('admit', (e: AdmissionEvent) => void [e.id, e.cost, e.waitNs]).off('stateChange', () => {})
  for (const name of ADMISSION_EVENTS) bh.on(name, (e) => void e.type)
  const reg = new Registry({ maxConcurrent: 2, maxKeys: 8, global: { limit: 4, maxQueue: 8 } })
  const k: ClassStats | null = reg.keyStats('a')
  void [text, change, n, cancel, pos, c, k, reg.globalStats(), reg.wouldAdmit('a', { cost: 0 }), bh.listenerErrors]
  return 0
}
void gateway

// @ts-expect-error an unknown class option (budget_floor is Python's spelling)
new Bulkhead({ classes: [{ budget_floor: 1 }] })
// @ts-expect-error an unknown rate option (per is Python's; Node's is perMs)
new Bulkhead({ rates: { requests: { amount: 1, per: 1 } } })
// @ts-expect-error an unknown per-call option (admission_class)
void bh.acquire({ admission_class: 'batch' })
// @ts-expect-error cost is a number
void bh.tryAcquire({ cost: '5' })
// @ts-expect-error not an observe mode
void bh.acquire({ observe: 'shadow' })
// @ts-expect-error getUsage takes the result's type
void bh.run(async () => 'x', { getUsage: (r: number) => r })
// @ts-expect-error applyLimits needs a revision
bh.applyLimits({ limit: 1 })
// @ts-expect-error an unknown limits option (max_queue)
bh.applyLimits({ revision: 1, max_queue: 1 })
// @ts-expect-error not an admission event
bh.on('admitted', () => {})
// @ts-expect-error release takes usage, not used
permitOf().release({ used: 1 })
// @ts-expect-error an unknown global cap option
new Registry({ global: { limit: 1, max_queue: 1 } })

declare function permitOf(): import('hullguard').Permit
