'use strict'
/**
 * Queue deadlines on one timer per timeout value (issue 15): the facade's counterpart of the
 * Python binding's shared loop timer. Waiters that queue with the same timeout have deadlines
 * in arrival order, so each timeout value keeps a FIFO of waiters and one unref'd `setTimeout`
 * armed for its head — instead of one host `Timeout` (and its `clearTimeout`) per waiter.
 *
 * A waiter that settles first is only marked (`w.due = -1`, through `cancel`); the FIFO drops
 * it when it reaches the head, and compacts once its dead entries outnumber the live ones (so
 * memory stays in the order of the live waiters). When the timer fires, every live head whose
 * deadline passed is expired (`w.expire(false)`: the core decides; a waiter granted meanwhile
 * answers stale), then the timer is re-armed for the next deadline.
 *
 * Time is `performance.now()` (ms). A bulkhead on the test hook's virtual clock keeps one host
 * timer per waiter (the vector runner drives node:test's mock timers and that clock together);
 * so does a deadline beyond the host's 2³¹ − 1 ms timer range. No admission decision is made
 * here. One isolate, one thread.
 */

/** Node clamps setTimeout delays above 2^31-1 ms to 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** Compaction slack: a FIFO compacts once dead entries exceed the live ones plus this. */
const SLACK = 64

class DeadlineFifo {
  constructor(ms) {
    this.ms = ms
    this.items = []
    this.head = 0
    this.live = 0
    this.timer = null
    /** Inside `fire`: expiries may settle (cancel) other waiters of this FIFO meanwhile. */
    this.firing = false
  }

  push(w) {
    w.due = performance.now() + this.ms
    this.items.push(w)
    this.live++
    if (this.timer === null) this.arm(this.ms)
  }

  /** A waiter of this FIFO settled before its deadline. */
  cancel(w) {
    w.due = -1
    this.live--
    // Never under a running `fire`, which walks `items` by `head` (it compacts at its end).
    if (!this.firing) this.maybeCompact()
  }

  /** Compacts once the dead entries outnumber the live ones (plus SLACK). */
  maybeCompact() {
    if (this.items.length - this.head - this.live > this.live + SLACK) this.compact()
  }

  compact() {
    const kept = []
    for (let i = this.head; i < this.items.length; i++) {
      const w = this.items[i]
      if (w.due >= 0) kept.push(w)
    }
    this.items = kept
    this.head = 0
  }

  arm(delay) {
    this.timer = setTimeout(fire, Math.max(1, Math.ceil(delay)), this)
    this.timer.unref?.()
  }

  fire() {
    this.timer = null
    this.firing = true
    try {
      const now = performance.now()
      // `this.items` / `this.head` re-read every step: an expiry may push a new waiter.
      while (this.head < this.items.length) {
        const w = this.items[this.head]
        if (w.due < 0) {
          this.items[this.head++] = undefined
          continue
        }
        if (w.due > now) break
        this.items[this.head++] = undefined
        this.live--
        // Off the FIFO before the expiry settles it (its `done` then cancels nothing).
        w.timer = null
        w.due = -1
        w.expire(false)
      }
    } finally {
      // Also after an expiry that threw: the rest stay armed.
      this.firing = false
      this.settle()
    }
  }

  /** After a fire: drops settled heads, re-arms for the next deadline or is forgotten. */
  settle() {
    const items = this.items
    while (this.head < items.length && items[this.head].due < 0) items[this.head++] = undefined
    if (this.head === items.length) {
      // Empty and unarmed: forgotten (a timeout value seen once does not stay in the map).
      this.items = []
      this.head = 0
      if (this.timer === null && fifos.get(this.ms) === this) fifos.delete(this.ms)
      return
    }
    if (this.timer === null) this.arm(items[this.head].due - performance.now())
    if (this.items.length - this.head - this.live > this.live + SLACK) this.maybeCompact()
    else if (this.head > SLACK && this.head * 2 > items.length) {
      this.items = items.slice(this.head)
      this.head = 0
    }
  }
}

function fire(fifo) {
  fifo.fire()
}

/** The FIFO of each timeout value (ms). */
const fifos = new Map()

/**
 * Arms waiter `w`'s deadline `ms` from now; returns what `cancelDeadline` takes. `w` has
 * `expire(aborted)` and a `due` field. `Infinity` arms nothing (`null`).
 */
function armDeadline(w, ms) {
  if (ms === Infinity) return null
  let f = fifos.get(ms)
  if (f === undefined) {
    f = new DeadlineFifo(ms)
    fifos.set(ms, f)
  }
  f.push(w)
  return f
}

/** `w` settled before its deadline (`f`: what `armDeadline` returned). */
function cancelDeadline(f, w) {
  if (f !== null && w.due >= 0) f.cancel(w)
}

/** Entries held and live waiters over every FIFO, and the FIFO count (for tests). */
function deadlineStats() {
  let entries = 0
  let live = 0
  for (const f of fifos.values()) {
    entries += f.items.length - f.head
    live += f.live
  }
  return { fifos: fifos.size, entries, live }
}

module.exports = { armDeadline, cancelDeadline, DeadlineFifo, MAX_TIMER_MS, deadlineStats }
