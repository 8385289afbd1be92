'use strict'
// Property tests of the Node API (issue 21): fast-check model-based runs (`fc.commands`) over
// one `Bulkhead` — `acquire` (the hot path without options, and with weight / cost / queue
// timeout), `run`, `tryAcquire`, AbortController aborts at random points (before admission,
// while queued, after the grant), `release` (outcome, usage; a second one), `releasePartial`,
// `refund`, `orphan`, permits and whole acquires dropped unreleased, `setLimit` /
// `applyLimits` (stale revisions, the kill switch) / `setBudget`, `close`, `drain` — checked
// against a naive model after every command, with GC pressure between commands:
//
// * conservation (I2, honestly: against what the test itself holds): `active` is the weight of
//   the calls the model holds, `available == limit - active` (nothing is granted and unclaimed
//   at the end of a turn: the facade takes every grant in the native call that settled it), the
//   same for the budget (`inUse`, `available`, `queuedCost`) and its settlement identity;
// * settle once (I3, I7, I9): every acquire settles exactly once, as the model says — granted
//   (then released once: a second `release()` is `false` and counted), refused with the model's
//   reason, timed out, aborted (rejected with `signal.reason`) — never both, never late;
// * the finalizer rules (docs/design.md §5.3, README "Quick start in Node"): a permit dropped
//   unreleased — also one granted later to an acquire whose promise was dropped — is reclaimed
//   after a GC and counted in `leakedTotal` by the permits it still held (an orphan's none: a
//   reclaimed orphan is not a leak), its units settled as used; a released permit that is
//   collected changes nothing (never counted twice). Reclaims in any order end in one state:
//   each returns a fixed amount and the queue is granted as a FIFO prefix;
// * the counters: `admittedTotal`, `rejectedByReason` (every reason), `releasedTwiceTotal`,
//   `leakedTotal`, `orphaned*`, `queueWaitCount`, `revision`, the budget's totals, drains.
//
// Time is the test hook's virtual clock with node:test's mock timers (a waiter's queue timeout
// and a drain's timeout fire only in `advance`). Bounded and reproducible: a fixed seed,
// NUM_RUNS runs of at most MAX_COMMANDS commands (about 9 s); HULLGUARD_PROPS=long runs 7.5x the
// runs of longer programs with a random seed (about 6 minutes; a failure prints its seed and
// replay path).
// Runs with --expose-gc (package.json "test").

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fc = require('fast-check')

const { Bulkhead, BulkheadError, StaleRevisionError, REASONS, __test } = require('../index.js')
const { kClock, VirtualClock } = __test
const { turns } = require('./helpers.js')

assert.equal(typeof global.gc, 'function', 'run with node --expose-gc')

const LONG = process.env.HULLGUARD_PROPS === 'long'
const NUM_RUNS = LONG ? 1500 : 200
const MAX_COMMANDS = LONG ? 80 : 40
const SEED = LONG ? undefined : 21
const OUTCOMES = ['success', 'failure', 'ignored', 'overload']
// A lost reclaim fails the run after this many GC rounds (never a claim about time).
const GC_ROUNDS = 200
// HULLGUARD_PROPS_STATS=1: how often each outcome happened (printed as a test diagnostic).
const STATS = process.env.HULLGUARD_PROPS_STATS ? new Map() : null
const count = (k) => STATS?.set(k, (STATS.get(k) ?? 0) + 1)

// ----- the model ---------------------------------------------------------------------------------

/** A held call (a permit of the pool, a run's call, or a dropped permit awaiting its reclaim). */
class Call {
  constructor(weight, cost) {
    this.weight = weight
    this.cost = cost
    this.orphaned = 0
    this.live = true
    this.dropped = false // unreachable: reclaimed by the next GC
  }
}

/**
 * One world of a run: the real bulkhead and the model beside it (fast-check's model and real
 * are this one object; every command updates both and checks them).
 */
class World {
  constructor(cfg) {
    this.cfg = cfg
    this.clock = new VirtualClock()
    const opts = { maxConcurrent: cfg.maxConcurrent, maxQueue: cfg.maxQueue, queueTimeoutMs: cfg.queueTimeoutMs }
    if (cfg.budget !== null) opts.budget = cfg.budget
    if (cfg.maxOrphaned > 0) opts.maxOrphaned = cfg.maxOrphaned
    this.bh = new Bulkhead({ ...opts, [kClock]: this.clock })
    this.limit = cfg.maxConcurrent
    this.ceiling = cfg.budget ?? 0
    this.closed = false
    this.revision = 0
    this.nowMs = 0
    this.timerSeq = 0
    this.queue = [] // waiters, FIFO
    this.reqs = [] // every acquire attempt (settled ones too)
    this.calls = new Set() // live calls
    this.pool = [] // {permit, call}: permits the test holds (released ones too)
    this.drains = []
    this.fullGcs = 0 // full collections the next settle runs
    this.n = {
      admitted: 0,
      releasedTwice: 0,
      leaked: 0,
      orphanedTotal: 0,
      queueWait: 0,
      reserved: 0,
      consumed: 0,
      refunded: 0,
      overrun: 0,
    }
    this.rejected = Object.fromEntries(REASONS.map((r) => [r, 0]))
  }

  // --- sums

  active() {
    let n = 0
    for (const c of this.calls) n += c.weight
    return n
  }
  inUse() {
    let n = 0
    for (const c of this.calls) n += c.cost
    return n
  }
  orphaned() {
    let n = 0
    for (const c of this.calls) n += c.orphaned
    return n
  }
  available() {
    return this.limit - this.active()
  }
  unitsAvailable() {
    return this.ceiling - this.inUse()
  }
  idle() {
    return this.queue.length === 0 && this.active() === 0 && this.orphaned() === 0
  }
  /** Both dimensions fit now (a cost of 0 asks nothing of the budget, overdrawn or not). */
  fits(r) {
    return r.weight <= this.available() && (r.cost === 0 || r.cost <= this.unitsAvailable())
  }

  // --- admission

  refuse(r, reason) {
    count(`${r.how}${r.keep ? '' : ' dropped'}: ${reason}${r.state === 'queued' ? ' (queued)' : ''}`)
    r.state = 'refused'
    r.reason = reason
    this.rejected[reason]++
  }

  grant(r, queued) {
    count(`${r.how}${r.keep ? '' : ' dropped'}: granted${queued ? ' (queued)' : ''}`)
    r.state = 'granted'
    this.n.admitted++
    this.n.reserved += r.cost
    if (queued) this.n.queueWait++
    r.call = new Call(r.weight, r.cost)
    this.calls.add(r.call)
    // A grant nobody holds (the acquire's promise or tryAcquire's permit was dropped) is
    // garbage at once: reclaimed by the next GC.
    if (!r.keep) r.call.dropped = true
  }

  /** The admission of `r` (docs/design.md §4.5, §5.1): granted, refused or queued. */
  decide(r, mayQueue) {
    if (this.closed) return this.refuse(r, 'shutdown')
    if (this.queue.length === 0 && this.fits(r)) return this.grant(r, false)
    if (!mayQueue) {
      return this.refuse(r, this.queue.length > 0 || r.weight > this.available() ? 'concurrency_limit' : 'budget_limit')
    }
    if (r.weight > this.limit) return this.refuse(r, 'concurrency_limit')
    if (this.cfg.budget !== null && r.cost > this.ceiling) return this.refuse(r, 'budget_limit')
    if (this.queue.length >= this.cfg.maxQueue) return this.refuse(r, 'queue_limit')
    r.state = 'queued'
    count(`${r.how}: queued`)
    this.queue.push(r)
    if (r.timeoutMs !== Infinity) {
      r.deadline = this.nowMs + r.timeoutMs
      r.seq = ++this.timerSeq
    }
  }

  /** The dispatcher pass: grants the head while it fits; refuses a head above the limit or
   * the ceiling (FIFO, head of line). */
  dispatch() {
    while (this.queue.length > 0) {
      const r = this.queue[0]
      if (r.weight > this.limit) {
        this.queue.shift()
        this.refuse(r, 'concurrency_limit')
      } else if (this.cfg.budget !== null && r.cost > this.ceiling) {
        this.queue.shift()
        this.refuse(r, 'budget_limit')
      } else if (this.fits(r)) {
        this.queue.shift()
        this.grant(r, true)
      } else {
        break
      }
    }
    this.idleChanged()
  }

  /** A queued waiter leaves (its abort or its deadline): the turn passes on. */
  leave(r, reason) {
    this.queue.splice(this.queue.indexOf(r), 1)
    this.refuse(r, reason)
    this.dispatch()
  }

  /** A call ends: released (`used`: the usage reported), or reclaimed (`leaked`). */
  end(c, used, leaked = false) {
    c.live = false
    this.calls.delete(c)
    if (used === undefined) {
      this.n.consumed += c.cost
    } else {
      this.n.consumed += used
      this.n.refunded += Math.max(0, c.cost - used)
      this.n.overrun += Math.max(0, used - c.cost)
    }
    if (leaked) this.n.leaked += c.weight
    this.dispatch()
  }

  /** A drain completes when the native call that made the bulkhead idle ends. */
  idleChanged() {
    if (!this.idle()) return
    for (const d of this.drains) if (d.state === 'waiting') d.state = 'drained'
  }

  /** Every dropped call is reclaimed (a reclaim may grant a dropped acquire: a cascade). */
  reclaimAll() {
    for (let round = 0; ; round++) {
      assert.ok(round < 10_000, 'the model never settled its reclaims')
      const c = [...this.calls].find((x) => x.dropped)
      if (c === undefined) return
      count(`reclaimed${c.orphaned ? ' orphan' : ''}`)
      this.end(c, undefined, true)
    }
  }

  // --- the real side

  /** Options of one acquire (`undefined`: none, the hot path of a plain bulkhead). */
  opts(r) {
    if (r.bare) return undefined
    const o = { weight: r.weight }
    if (this.cfg.budget !== null) o.cost = r.cost
    if (r.timeoutMsGiven !== undefined) o.queueTimeoutMs = r.timeoutMsGiven
    if (r.controller !== undefined) o.signal = r.controller.signal
    return o
  }

  /** Follows a promise without keeping what it settles with beyond `r` (settle-once count). */
  follow(r, promise) {
    r.settled = 0
    promise.then(
      (v) => {
        r.settled++
        r.value = v
      },
      (e) => {
        r.settled++
        r.error = e
      },
    )
  }

  /**
   * The end of every command: turns, GC pressure, every reclaim the model expects (the SUT
   * waited for, bounded), then each acquire checked against the model and the stats compared.
   */
  async settle() {
    await turns(2)
    this.reclaimAll()
    // GC pressure: a scavenge after every command; after a drop (or the `gc` command) full
    // collections, so that a permit dropped after its release is collected too (its finalizer
    // must change nothing).
    global.gc({ type: 'minor' })
    for (; this.fullGcs > 0; this.fullGcs--) {
      global.gc()
      await turns(2)
    }
    for (let round = 0; ; round++) {
      await turns(2)
      const s = this.bh.stats()
      const done =
        s.leakedTotal === this.n.leaked &&
        s.active === this.active() &&
        s.orphanedInFlight === this.orphaned() &&
        (s.budget === null || s.budget.consumedTotal === this.n.consumed)
      if (done) break
      assert.ok(
        round < GC_ROUNDS,
        `after ${GC_ROUNDS} GC rounds the stats still differ from the model (a reclaim lost, or one ` +
          `too many): ${JSON.stringify(s)}; the model: active ${this.active()}, leaked ${this.n.leaked}`,
      )
      global.gc()
    }
    this.collect()
    this.check()
  }

  /** Every acquire settled as the model says (and only those); granted permits join the pool. */
  collect() {
    for (const r of this.reqs) {
      if (r.done) continue
      assert.ok(r.settled <= 1, 'a promise settled twice')
      if (r.how === 'try') continue
      if (r.state === 'queued') {
        if (r.keep) assert.equal(r.settled, 0, `queued acquire ${r.id} settled: ${r.error ?? r.value}`)
        continue
      }
      if (r.state === 'granted' && r.how === 'run') {
        // The run's fn holds the call; it settles when the run finishes.
        if (!r.finished) {
          assert.equal(r.settled, 0, `a run settled before its fn: ${r.error}`)
          assert.equal(r.started, true, 'a granted run never started its fn')
          continue
        }
      }
      if (!r.keep) {
        r.done = true
        continue
      }
      assert.equal(r.settled, 1, `acquire ${r.id} (${r.how}, ${r.state} ${r.reason ?? ''}) has not settled`)
      r.done = true
      if (r.state === 'refused') {
        if (r.reason === 'aborted') {
          assert.equal(r.error, r.controller.signal.reason, `aborted ${r.id} rejected with ${r.error}`)
        } else {
          assert.ok(r.error instanceof BulkheadError, `${r.id}: ${r.error && r.error.stack}`)
          assert.equal(r.error.reason, r.reason)
        }
      } else if (r.how === 'run') {
        if (r.fail) assert.equal(r.error?.message, 'run failed')
        else assert.equal(r.value, `run ${r.id}`)
      } else {
        assert.equal(r.error, undefined, `granted ${r.id} rejected: ${r.error && r.error.stack}`)
        const p = r.value
        assert.equal(p.weight, r.call.weight)
        assert.equal(p.cost, r.call.cost)
        this.pool.push({ permit: p, call: r.call })
      }
      r.value = r.error = undefined // the pool is the permit's only holder now
      r.promise = undefined
    }
    for (const d of this.drains) {
      if (d.state === 'waiting') {
        assert.equal(d.settled, 0, `a drain completed while busy: ${JSON.stringify(d.value)}`)
      } else if (!d.checked) {
        assert.equal(d.settled, 1, `drain ${d.state} has not settled`)
        assert.equal(d.value.drained, d.state === 'drained', JSON.stringify(d.value))
        d.checked = true
      }
    }
  }

  check() {
    const s = this.bh.stats()
    const want = {
      active: this.active(),
      queued: this.queue.length,
      grantedUnclaimed: 0,
      limit: this.limit,
      available: this.available(),
      admittedTotal: this.n.admitted,
      rejectedByReason: this.rejected,
      releasedTwiceTotal: this.n.releasedTwice,
      leakedTotal: this.n.leaked,
      orphanedInFlight: this.orphaned(),
      orphanedTotal: this.n.orphanedTotal,
      queueWaitCount: this.n.queueWait,
      revision: this.revision,
    }
    const got = Object.fromEntries(Object.keys(want).map((k) => [k, s[k]]))
    assert.deepEqual(got, want)
    assert.equal(s.available + s.active + s.grantedUnclaimed, s.limit, 'I2')
    if (this.cfg.budget === null) {
      assert.equal(s.budget, null)
      return
    }
    const b = s.budget
    const bwant = {
      limit: this.ceiling,
      inUse: this.inUse(),
      grantedUnclaimed: 0,
      available: this.unitsAvailable(),
      queuedCost: this.queue.reduce((n, r) => n + r.cost, 0),
      reservedTotal: this.n.reserved,
      consumedTotal: this.n.consumed,
      refundedTotal: this.n.refunded,
      overrunTotal: this.n.overrun,
      overrunHeld: 0,
    }
    const bgot = Object.fromEntries(Object.keys(bwant).map((k) => [k, b[k]]))
    assert.deepEqual(bgot, bwant)
    assert.equal(b.available + b.inUse + b.grantedUnclaimed, b.limit, 'I2 (budget)')
    assert.equal(
      b.reservedTotal + b.overrunTotal,
      b.consumedTotal + b.refundedTotal + b.inUse + b.grantedUnclaimed + b.overrunHeld,
      'settlement identity',
    )
  }

  /** The end of a run: closed (queued acquires refused), every run finished, every permit
   * released; then I5 — idle in both dimensions, and a drain says so. */
  async finish() {
    this.bh.close()
    this.closed = true
    for (const r of [...this.queue]) {
      this.queue.splice(this.queue.indexOf(r), 1)
      this.refuse(r, 'shutdown')
    }
    this.idleChanged()
    await this.settle()
    for (const r of this.reqs) if (r.how === 'run' && r.state === 'granted' && !r.finished) this.finishRun(r, false)
    for (const { permit, call } of this.pool) {
      if (call.live) {
        permit.release()
        this.end(call)
      }
    }
    await this.settle()
    const s = this.bh.stats()
    assert.deepEqual([s.active, s.queued, s.grantedUnclaimed, s.orphanedInFlight], [0, 0, 0, 0], JSON.stringify(s))
    assert.equal(s.available, s.limit)
    const d = await this.bh.drain({ timeoutMs: 0 })
    assert.equal(d.drained, true, JSON.stringify(d))
  }

  finishRun(r, fail) {
    r.finished = true
    r.fail = fail
    if (fail) r.gate.reject(new Error('run failed'))
    else r.gate.resolve(`run ${r.id}`)
    this.end(r.call) // released when fn settles (a microtask: before the next check)
  }

  /** The model's picks: `i` modulo the candidates (none: the command does nothing). */
  pick(list, i) {
    return list.length === 0 ? undefined : list[i % list.length]
  }
}

// ----- commands ----------------------------------------------------------------------------------

/** A command: `act(w)` acts on the world (SUT and model); every command ends with `settle`. */
class Cmd {
  constructor(name, args, act) {
    this.name = name
    this.args = args
    this.act = act
  }
  check() {
    return true
  }
  async run(w) {
    count(`cmd ${this.name}`)
    await this.act(w)
    await w.settle()
  }
  toString() {
    return `${this.name}(${JSON.stringify(this.args)})`
  }
}

const TIMEOUTS = [undefined, 0, Infinity, 5, 15, 25, 45]

/**
 * One acquire attempt: `how` is `acquire` (with options, or `bare`: none — the hot path of a
 * plain bulkhead), `run` (its fn waits for `finishRun`) or `try`; `keep` false drops its
 * promise (or tryAcquire's permit) at once; `abort`: `before` aborts the signal before the
 * call, `signal` gives it one to abort later (`abort` command).
 */
const acquireCmd = fc
  .record({
    how: fc.constantFrom('acquire', 'bare', 'run', 'try'),
    w: fc.nat(4),
    c: fc.nat(12),
    timeout: fc.constantFrom(...TIMEOUTS),
    keep: fc.boolean(),
    abort: fc.constantFrom('none', 'signal', 'signal', 'before'),
  })
  .map(
    (a) =>
      new Cmd('acquire', a, (w) => {
        const cfg = w.cfg
        const bare = a.how === 'bare'
        const r = {
          id: w.reqs.length,
          how: bare ? 'acquire' : a.how,
          bare,
          weight: bare ? 1 : 1 + (a.w % cfg.maxConcurrent),
          cost: bare || cfg.budget === null ? 0 : a.c % (cfg.budget + 1),
          keep: a.how === 'run' ? true : a.keep,
          timeoutMsGiven: bare || a.how === 'try' ? undefined : a.timeout,
          state: 'new',
          settled: 0,
        }
        r.timeoutMs = r.timeoutMsGiven ?? cfg.queueTimeoutMs
        if (!bare && a.how !== 'try' && a.abort !== 'none') {
          r.controller = new AbortController()
          if (a.abort === 'before') r.controller.abort()
        }
        w.reqs.push(r)
        if (r.controller?.signal.aborted) {
          // Refused before admission: the signal's reason, counted `aborted` (nothing else).
          r.state = 'refused'
          r.reason = 'aborted'
          w.rejected.aborted++
        } else {
          w.decide(r, r.how !== 'try' && r.timeoutMs !== 0)
        }
        if (r.how === 'try') {
          let p
          try {
            p = w.bh.tryAcquire(w.opts(r))
          } catch (e) {
            assert.equal(r.state, 'refused', `tryAcquire threw ${e}`)
            assert.ok(e instanceof BulkheadError && r.reason !== 'concurrency_limit', String(e))
            assert.equal(e.reason, r.reason)
            r.done = true
            return
          }
          if (p === null) {
            assert.equal(r.reason, 'concurrency_limit', `tryAcquire gave null; the model: ${r.state} ${r.reason}`)
            r.done = true
            return
          }
          assert.equal(r.state, 'granted', 'tryAcquire granted')
          assert.deepEqual([p.weight, p.cost], [r.weight, r.cost])
          if (r.keep) w.pool.push({ permit: p, call: r.call })
          r.done = true
          return
        }
        let promise
        if (r.how === 'run') {
          r.gate = {}
          const gated = new Promise((resolve, reject) => Object.assign(r.gate, { resolve, reject }))
          gated.catch(() => {})
          promise = w.bh.run(() => {
            r.started = true
            return gated
          }, w.opts(r))
        } else {
          promise = w.bh.acquire(w.opts(r))
        }
        if (r.keep) {
          r.promise = promise
          w.follow(r, promise)
        } else {
          promise.catch(() => {}) // dropped: nobody will ever hold its permit
        }
      }),
  )

/** Aborts the signal of an acquire: a queued one leaves (`aborted`); else nothing changes. */
const abortCmd = fc.nat(50).map(
  (i) =>
    new Cmd('abort', { i }, (w) => {
      const r = w.pick(
        w.reqs.filter((x) => x.controller !== undefined && !x.controller.signal.aborted),
        i,
      )
      if (r === undefined) return
      r.controller.abort()
      if (r.state === 'queued') w.leave(r, 'aborted')
    }),
)

/** Releases a permit of the pool (an unreleased one first): `true` once, then `false` (counted). */
const releaseCmd = fc
  .record({ i: fc.nat(50), outcome: fc.constantFrom(...OUTCOMES), usage: fc.option(fc.nat(20)), again: fc.boolean() })
  .map(
    (a) =>
      new Cmd('release', a, (w) => {
        const live = w.pool.filter((e) => e.call.live)
        const e = a.again || live.length === 0 ? w.pick(w.pool, a.i) : w.pick(live, a.i)
        if (e === undefined) return
        if (!e.call.live) {
          assert.equal(e.permit.release(), false)
          assert.equal(e.permit.released, true)
          w.n.releasedTwice++
          return
        }
        const used = w.cfg.budget === null || a.usage === null ? undefined : a.usage
        const opts = { outcome: a.outcome }
        if (used !== undefined) opts.usage = used
        assert.equal(e.permit.release(opts), true)
        assert.deepEqual([e.permit.released, e.permit.weight, e.permit.cost], [true, 0, 0])
        w.end(e.call, used)
      }),
  )

/** One other step on a permit: `releasePartial(n)`, `refund(n)`, `orphan()`, or `drop` (the
 * pool lets go of it unreleased: reclaimed by the next GC). */
const permitCmd = fc
  .record({ op: fc.constantFrom('releasePartial', 'refund', 'orphan', 'drop'), i: fc.nat(50), n: fc.integer({ min: 1, max: 12 }) })
  .map(
    (a) =>
      new Cmd('permit', a, (w) => {
        const e = w.pick(w.pool, a.i)
        if (e === undefined) return
        const { permit, call: c } = e
        const plain = w.cfg.budget === null && w.cfg.maxOrphaned === 0
        if (a.op === 'drop') {
          count(c.live ? `drop held${c.orphaned ? ' orphan' : ''}` : 'drop released')
          w.pool.splice(w.pool.indexOf(e), 1)
          w.fullGcs = 3
          if (c.live) c.dropped = true
          return
        }
        if (a.op === 'releasePartial') {
          if (!c.live || c.orphaned > 0 || a.n > c.weight) {
            assert.throws(() => permit.releasePartial(a.n), RangeError)
            return
          }
          permit.releasePartial(a.n)
          c.weight -= a.n
          if (c.weight === 0) {
            // The last permit returns the units too (refunded).
            w.n.refunded += c.cost
            c.cost = 0
          }
          assert.deepEqual([permit.weight, permit.cost], [c.weight, c.cost])
          w.dispatch()
          return
        }
        if (a.op === 'refund') {
          if (!c.live || w.cfg.budget === null || a.n > c.cost) {
            assert.throws(() => permit.refund(a.n), RangeError)
            return
          }
          permit.refund(a.n)
          c.cost -= a.n
          w.n.refunded += a.n
          w.dispatch()
          return
        }
        // orphan
        if (!c.live || plain || w.cfg.maxOrphaned === 0) {
          if (!c.live || plain) assert.throws(() => permit.orphan(), RangeError)
          return
        }
        if (c.weight === 0) {
          assert.equal(permit.orphan(), false)
          return
        }
        if (w.orphaned() + c.weight > w.cfg.maxOrphaned) {
          assert.throws(() => permit.orphan(), RangeError)
          return
        }
        assert.equal(permit.orphan(), true)
        c.orphaned = c.weight
        c.weight = 0
        w.n.orphanedTotal += c.orphaned
        assert.equal(permit.weight, 0)
        w.dispatch()
      }),
  )

/** A granted run's fn settles (fulfils, or rejects: a failure): its permits return. */
const finishRunCmd = fc.record({ i: fc.nat(50), fail: fc.boolean() }).map(
  (a) =>
    new Cmd('finishRun', a, (w) => {
      const r = w.pick(
        w.reqs.filter((x) => x.how === 'run' && x.state === 'granted' && !x.finished),
        a.i,
      )
      if (r !== undefined) w.finishRun(r, a.fail)
    }),
)

/** Moves the virtual clock: queue timeouts and drain timeouts due by then fire, in order. */
const advanceCmd = fc.constantFrom(10, 20, 50).map(
  (ms) =>
    new Cmd('advance', { ms }, (w) => {
      const target = w.nowMs + ms
      const due = []
      for (const r of w.queue) if (r.deadline !== undefined && r.deadline <= target) due.push([r.deadline, r.seq, r])
      for (const d of w.drains) if (d.state === 'waiting' && d.deadline !== undefined && d.deadline <= target) due.push([d.deadline, d.seq, d])
      due.sort((x, y) => x[0] - y[0] || x[1] - y[1])
      for (const [, , x] of due) {
        if (x.drain) {
          if (x.state === 'waiting') x.state = 'timed out'
        } else if (x.state === 'queued') {
          w.leave(x, 'timeout')
        }
      }
      w.nowMs = target
      w.clock.advance(ms)
      w.mockTimers.tick(ms)
    }),
)

/** `setLimit`, `setBudget`, or `applyLimits` under a revision (a stale one changes nothing). */
const limitsCmd = fc
  .record({
    op: fc.constantFrom('setLimit', 'applyLimits', 'setBudget'),
    step: fc.integer({ min: -1, max: 2 }),
    limit: fc.option(fc.nat(5)),
    budget: fc.option(fc.nat(12)),
  })
  .map(
    (a) =>
      new Cmd('limits', a, (w) => {
        const cfg = w.cfg
        const limit = a.limit === null ? null : Math.min(a.limit, cfg.maxConcurrent)
        const budget = cfg.budget === null || a.budget === null ? null : a.budget % (cfg.budget + 1)
        if (a.op === 'setLimit') {
          const l = Math.max(1, limit ?? 1)
          w.bh.setLimit(l)
          w.limit = l
        } else if (a.op === 'setBudget') {
          if (budget === null) return
          w.bh.setBudget(budget)
          w.ceiling = budget
        } else {
          const revision = Math.max(1, w.revision + a.step)
          const snap = { revision }
          if (limit !== null) snap.limit = limit
          if (budget !== null) snap.budget = budget
          if (revision <= w.revision) {
            assert.throws(
              () => w.bh.applyLimits(snap),
              (e) => e instanceof StaleRevisionError && e.current === w.revision,
            )
            return
          }
          w.bh.applyLimits(snap)
          w.revision = revision
          if (limit !== null) w.limit = limit
          if (budget !== null) w.ceiling = budget
        }
        w.dispatch()
      }),
  )

/** `close()`, rarely: queued acquires are refused `shutdown`, holders finish normally. */
const closeCmd = fc.nat(19).map(
  (go) =>
    new Cmd('close', { go }, (w) => {
      if (go !== 13) return
      w.bh.close()
      w.closed = true
      for (const r of [...w.queue]) {
        w.queue.splice(w.queue.indexOf(r), 1)
        w.refuse(r, 'shutdown')
      }
      w.idleChanged()
    }),
)

/** `drain({timeoutMs})`: resolves `drained` once idle, or not drained at its timeout. */
const drainCmd = fc.constantFrom(Infinity, 17, 37).map(
  (timeoutMs) =>
    new Cmd('drain', { timeoutMs }, (w) => {
      const d = { drain: true, state: w.idle() ? 'drained' : 'waiting', settled: 0 }
      if (timeoutMs !== Infinity) {
        d.deadline = w.nowMs + timeoutMs
        d.seq = ++w.timerSeq
      }
      w.follow(d, w.bh.drain({ timeoutMs }))
      w.drains.push(d)
    }),
)

/** GC pressure: full collections; nothing the test holds is collectable, so nothing changes. */
const gcCmd = fc.constant(
  new Cmd('gc', {}, (w) => {
    w.fullGcs = 3
  }),
)

const commands = [
  acquireCmd,
  acquireCmd,
  acquireCmd,
  releaseCmd,
  permitCmd,
  abortCmd,
  finishRunCmd,
  advanceCmd,
  limitsCmd,
  closeCmd,
  drainCmd,
  gcCmd,
]

const configArb = fc.record({
  maxConcurrent: fc.integer({ min: 1, max: 5 }),
  maxQueue: fc.integer({ min: 1, max: 5 }),
  queueTimeoutMs: fc.constantFrom(Infinity, 25),
  budget: fc.option(fc.integer({ min: 1, max: 12 })),
  maxOrphaned: fc.constantFrom(0, 2, 5),
})

test('Bulkhead against the model: conservation, settle once, reclaim once', { timeout: LONG ? 3_600_000 : 600_000 }, async (t) => {
  await fc.assert(
    fc.asyncProperty(configArb, fc.commands(commands, { maxCommands: MAX_COMMANDS, size: 'max' }), async (cfg, cmds) => {
      t.mock.timers.enable({ apis: ['setTimeout'] })
      const w = new World(cfg)
      w.mockTimers = t.mock.timers
      try {
        await fc.asyncModelRun(() => ({ model: w, real: w }), cmds)
        await w.finish()
      } finally {
        w.bh.close()
        t.mock.timers.reset()
      }
    }),
    { numRuns: NUM_RUNS, seed: SEED, verbose: LONG ? 1 : 0, includeErrorInReport: true },
  )
  if (STATS) t.diagnostic(JSON.stringify(Object.fromEntries([...STATS].sort()), null, 1))
})
