'use strict'
/**
 * How a guarded call ended (docs/design.md §6, outcomes), shared by the facade (index.js:
 * `run()`) and the HTTP integrations (http.js): the one rule that tells a cancellation from a
 * failure. The outcome names and codes themselves are the core's (`OUTCOMES`, from the addon).
 */

/**
 * Whether `e`, thrown or rejected by a guarded call, is a cancellation (outcome `ignored`): the
 * call's own `signal.reason`, or an error named "AbortError". Anything else is a `failure`.
 */
function isCancellation(e, signal) {
  if (signal !== undefined && signal !== null && signal.aborted && e === signal.reason) return true
  return e !== null && (typeof e === 'object' || typeof e === 'function') && e.name === 'AbortError'
}

/** The outcome of a guarded call that threw or rejected with `e`: 'ignored' or 'failure'. */
function errorOutcome(e, signal) {
  return isCancellation(e, signal) ? 'ignored' : 'failure'
}

module.exports = { isCancellation, errorOutcome }
