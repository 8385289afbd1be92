'use strict'
/**
 * AbortSignal plumbing shared by the local `Bulkhead` (index.js) and the `HostBulkhead`
 * (host.js): one 'abort' listener per signal, however many calls of either share it.
 */

function abortReason(signal) {
  return signal.reason !== undefined ? signal.reason : new DOMException('This operation was aborted', 'AbortError')
}

/**
 * Whether `e` is what a call of `signal` rejected with for its abort: `signal.reason`, or — a
 * signal without a reason (a polyfill) — the AbortError `abortReason` made for it.
 */
function isAbortOf(signal, e) {
  if (signal === undefined || signal === null || !signal.aborted) return false
  if (signal.reason !== undefined) return e === signal.reason
  return e instanceof DOMException && e.name === 'AbortError'
}

/** The `signal` of per-call options (`undefined` for none); a TypeError if it is no AbortSignal. */
function signalOf(opts) {
  const signal = opts?.signal ?? undefined
  if (signal !== undefined && (typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function')) {
    throw new TypeError('signal must be an AbortSignal')
  }
  return signal
}

/**
 * Who waits on each signal: one 'abort' listener per signal, however many calls share it (no
 * MaxListenersExceededWarning). A party's `aborted()` runs once when the signal aborts (at
 * once if it already has). `signal` may be `undefined` (no signal: nothing to watch).
 */
const watched = new WeakMap()

function watch(signal, party) {
  if (signal === undefined) return
  if (signal.aborted) return party.aborted()
  let w = watched.get(signal)
  if (w === undefined) {
    w = { parties: new Set(), onAbort: null }
    w.onAbort = () => {
      watched.delete(signal)
      for (const p of [...w.parties]) p.aborted()
    }
    watched.set(signal, w)
    signal.addEventListener('abort', w.onAbort, { once: true })
  }
  w.parties.add(party)
}

function unwatch(signal, party) {
  if (signal === undefined) return
  const w = watched.get(signal)
  if (w === undefined || !w.parties.delete(party) || w.parties.size !== 0) return
  watched.delete(signal)
  signal.removeEventListener('abort', w.onAbort)
}

module.exports = { abortReason, isAbortOf, signalOf, watch, unwatch }
