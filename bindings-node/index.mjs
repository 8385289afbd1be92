// ESM entry: the same objects as the CommonJS entry (index.js).
import cjs from './index.js'

export const { Bulkhead, Registry, Permit, BulkheadError, originKey, MAX_PERMITS, MAX_QUEUE, REASONS, OUTCOMES } = cjs
export const { withBulkhead, guardAgent, BulkheadAgent } = cjs
export const { __test } = cjs
export default cjs
