// The CommonJS consumer: `require('hullguard')` has the same types.
import hullguard = require('hullguard')
import { Bulkhead, BulkheadError, Registry, originKey } from 'hullguard'

const bh: Bulkhead = new hullguard.Bulkhead({ maxConcurrent: 2 })
const same: typeof Bulkhead = hullguard.Bulkhead
const reg: Registry = new hullguard.Registry({ maxKeys: 8 })

async function cjs(): Promise<number> {
  const permit = await bh.acquire({ weight: 1 })
  permit.release()
  try {
    return await reg.run(originKey('http://localhost:8080/x'), () => 1)
  } catch (e) {
    if (e instanceof BulkheadError) return e.snapshot.queued
    throw e
  }
}
const max: number = hullguard.MAX_PERMITS + hullguard.MAX_QUEUE
void [same, cjs, max]
const policies = new hullguard.Bulkhead({ resilience: { breaker: { openDurationMs: 100 }, callTimeoutMs: 50 } })
policies.on('stateChange', (key, from, to) => void [key, from, to])
void policies.tryAcquire()?.release({ outcome: 'failure' })
