// ESM entry: the same objects as the CommonJS entry (index.js).
import cjs from './index.js'

export const { Bulkhead, Registry, Permit, BulkheadError, StaleRevisionError, originKey, MAX_PERMITS, MAX_QUEUE, REASONS, OUTCOMES, ADMISSION_EVENTS } = cjs
export const { withDeadline, withDeadlineAt, currentDeadline, remainingMs } = cjs
export const { withBulkhead, guardAgent, BulkheadAgent } = cjs
export const { HostBulkhead, HostPermit, LeaseError, reapHost } = cjs
export const { FleetBulkhead } = cjs
export const { __test } = cjs
export default cjs
