// No lib.dom, no @types/node: the signal option falls back to a structural AbortSignal type.
import { Bulkhead, withDeadline, remainingMs, type AbortSignalLike } from 'hullguard'

declare const signal: AbortSignalLike
const bh = new Bulkhead({ maxConcurrent: 1 })
export async function bare(): Promise<number> {
  const permit = await bh.acquire({ signal })
  permit[Symbol.dispose]()
  return bh.run((s) => (s?.aborted ? 0 : 1), { signal })
}
export const policies = new Bulkhead({ resilience: { adaptive: {}, callTimeoutMs: 10 } }).on('stateChange', () => {})
export const budget: number | undefined = withDeadline(1_500, () => remainingMs())
