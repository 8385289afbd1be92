'use strict'
/**
 * How a guarded call ended (DESIGN §4 "Outcomes"), shared by the facade (index.js: `run()`) and
 * the HTTP integrations (http.js): the outcome names with the addon's codes, and the one rule
 * that tells a cancellation from a failure.
 */

/** Outcome name → the addon's code (`Outcome as u8` in the core). */
const OUTCOMES = Object.freeze({ success: 0, failure: 1, ignored: 2, overload: 3 })

/**
 * Whether `e`, thrown or rejected by a guarded call, is a cancellation (outcome `ignored`): the
 * call's own `signal.reason`, or an error named "AbortError". Anything else is a `failure`.
 */
function isCancellation(e, signal) {
  if (signal !== undefined && signal !== null && signal.aborted && e === signal.reason) return true
  return e !== null && (typeof e === 'object' || typeof e === 'function') && e.name === 'AbortError'
}

module.exports = { OUTCOMES, isCancellation }
