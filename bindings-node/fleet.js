'use strict'
/**
 * One limit for a fleet of processes on many hosts (docs/design.md §16): `FleetBulkhead`, a
 * bulkhead whose limit is shared, through Redis, by every process that opens the same `pool`.
 * Each process leases a *block* of permits under a TTL and admits on it locally — an acquire is
 * a local bulkhead's acquire plus one clock read, never a network round trip — while one fenced
 * `hg_sync` per beat (and when demand changes) grows, shrinks and renews the block by fair
 * share of the holders' wants. The Rust crate hullguard-fleet decides everything (the lease
 * manager, its deadline, C42's late grants, learning after a state loss); the addon marshals
 * (native src/fleet.rs) and this file only runs the I/O with the Redis client the user already
 * has — ioredis (`client.call(...)`), node-redis v4+ (`client.sendCommand([...])`, a cluster's
 * `sendCommand(firstKey, readonly, args)`), or a function `(args) => Promise<reply>`.
 *
 * Admission API: a `FleetBulkhead` IS a `Bulkhead` (subclass) over the fleet's local core
 * bulkhead, so `acquire` / `run` / `tryAcquire` / `admit` / `tryAdmit` / `drain`, AbortSignals,
 * deadlines, `Permit`s, `BulkheadError`s (a refusal for want of a lease: `concurrency_limit`,
 * detail bound `'fleet_lease'`), `withBulkhead` and `hullguard/metrics` work as for a local one.
 * What the lease owns is refused by name (`setLimit`, `setBudget`, `setObserve`); `applyLimits`
 * sets the fleet limit and budget in Redis and `close()` gives the blocks back, both async.
 *
 * Fleet budget (`budget`): a second leased dimension, units in flight (tokens, bytes) shared
 * by the pool as the permits are — a second lease table of the pool, synced by the same driver.
 * The local budget is this process's block of it: `acquire({cost})` is admitted while the block
 * has room, waits (queues) for the block to grow when the cost is above it but within the fleet
 * budget, and is refused `budget_limit` above the fleet budget (while the block is 0 a try is
 * refused `budget_limit`, detail bound `'fleet_lease'`). `stats().budgetLease` is its lease.
 *
 * What stays local (docs/design.md §16.10): admission classes (`classes`, `reserve`,
 * `lending`, `shed`) partition this process's block (priorities, floors and ceilings apply
 * inside it; a block below the floors is fine) and `events: true` delivers the local core's
 * admission events to `on('admit' | 'reject' | …)` — both read by the local `Bulkhead`'s own
 * parser and delivered through its emitter, so `admissionClass`, `classStats`, `classNames`
 * and the events work as on a local classed bulkhead. `rates` are refused by name (each process
 * would refill its own).
 *
 * The driver: an async loop on the JS thread — `step()` → send through the client → `complete`
 * / `fail` — that parks between steps on an unref'd timer and on the lease's *bell* (rung by an
 * admission that finds the block short, delivered by the addon at the end of that admission's
 * native call: see src/fleet.rs for why neither a libuv pool thread nor a threadsafe function).
 * It never blocks the event loop, never spins (a bell-ended park is followed by a quiet period
 * of `minSyncIntervalMs`), and keeps the process alive only while callers are queued for the
 * block (what grants them is its next sync): while it waits for a reply the user's client
 * holds the socket; after `close()` nothing of it is left.
 *
 * Library: before its first command, and again after a "Function not found" (a restarted or
 * flushed server), the driver checks `FCALL_RO hg_version` and loads the hullguard Functions
 * library with `FUNCTION LOAD REPLACE` (on every primary of an ioredis or node-redis cluster);
 * where an ACL refuses `FUNCTION` (`NOPERM`) the same code runs as one script (`SCRIPT LOAD`,
 * then `EVALSHA`, loaded again after a `NOSCRIPT`), as the Rust transport does.
 * Each command is bounded by 2 × `leaseTtlMs` (a client that queues commands while offline
 * would otherwise hold the driver forever); a reply after that is dropped.
 */

const native = require('./native.js')
const { MAX_TIMER_MS } = require('./deadlines.js')

function noop() {}

/** The most releases a close sends: one per lease (the permits', the budget's), with room. */
const MAX_RELEASES = 4

// ----- the user's client ----------------------------------------------------------------------

/**
 * How commands reach Redis through `client`: `send(args, route)` resolves with the reply (a
 * cluster routes it by `route`, the pool's key: every command of a pool is about its slot, a
 * `WAIT` too), `loadAll(args)` runs the library's load on every primary of a cluster or on the
 * one server. A `TypeError` for a client of no known kind.
 */
function senderOf(client) {
  if (typeof client === 'function') {
    const send = async (args) => client(args)
    return { kind: 'function', send, loadAll: send }
  }
  if (client !== null && typeof client === 'object') {
    if (typeof client.call === 'function') {
      // ioredis (Redis or Cluster): `call` routes a keyed command to its slot's node.
      const send = async (args) => client.call(...args)
      const loadAll =
        client.isCluster === true && typeof client.nodes === 'function'
          ? (args) => Promise.all(client.nodes('master').map((n) => n.call(...args)))
          : send
      return { kind: 'ioredis', send, loadAll }
    }
    if (typeof client.sendCommand === 'function') {
      if (typeof client.getSlotMaster === 'function' && typeof client.nodeClient === 'function') {
        // A node-redis cluster: `sendCommand(firstKey, isReadonly, args)`.
        const send = async (args, route) => client.sendCommand(route, args[0] === 'FCALL_RO', args)
        const loadAll = async (args) => {
          const masters = client.masters ?? client.getMasters?.() ?? []
          return Promise.all(masters.map(async (m) => (await client.nodeClient(m)).sendCommand(args)))
        }
        return { kind: 'node-redis-cluster', send, loadAll }
      }
      const send = async (args) => client.sendCommand(args)
      return { kind: 'node-redis', send, loadAll: send }
    }
  }
  throw new TypeError(
    'client must be an ioredis client or cluster (it has call()), a node-redis client or cluster ' +
      '(sendCommand()), or a function (args: string[]) => Promise<reply>',
  )
}

/** Whether a command failed because the server does not have the library (any more). */
function libraryMissing(e) {
  return /function not found|^NOSCRIPT/i.test(e?.message ?? '')
}

/** A failure as the lease's `lastError` tells it (the crate's spelling: "redis error: …"). */
function describe(e) {
  if (e?.hullguardTimeout === true) return e.message
  const msg = e instanceof Error ? e.message : String(e)
  const name = (e && (e.name || e.constructor?.name)) || ''
  // A reply error (ioredis ReplyError, node-redis ErrorReply), or Redis' error-code form.
  const server = /Reply/.test(name) || /^[A-Z][A-Z_]{2,} /.test(msg)
  const hint = /unknown command .?FCALL/i.test(msg) ? ' (a fleet bulkhead needs Redis 7.0 or later: Functions)' : ''
  return `${server ? 'redis error' : 'redis unreachable'}: ${msg}${hint}`
}

/** `p`, rejected after `ms` (an unref'd timer) with a timeout naming `what`. */
function bounded(p, ms, what) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const e = new Error(`redis unreachable: no reply to ${what} within ${ms} ms`)
      e.hullguardTimeout = true
      reject(e)
    }, Math.min(ms, MAX_TIMER_MS))
    timer.unref?.()
  })
  // A reply that comes after the timeout is dropped (never an unhandled rejection).
  p.catch(noop)
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer))
}

// ----- the driver -----------------------------------------------------------------------------

/**
 * One fleet bulkhead's driver loop (see the header). `done` settles (never rejects) once the
 * loop has stopped; `ready` once the library is there (rejects with the first failure: `open`).
 */
class Driver {
  constructor(nf, sender) {
    this.nf = nf
    this.sender = sender
    this.route = nf.routeKey
    this.timeoutMs = 2 * nf.leaseTtlMs
    /** Whether the library was found or loaded on this client (until a "Function not found"). */
    this.loaded = false
    /** The check / load in progress, shared by the loop, `applyLimits` and `poolStats`. */
    this.loading = null
    /** `{resolve, timer}` while parked. */
    this.park = null
    this.warned = false
    this.ready = this.library()
    this.ready.catch(noop)
    this.done = this.run()
  }

  async run() {
    let zeros = 0
    for (;;) {
      try {
        const s = this.nf.step()
        if (s === null) return
        if (s.args) {
          zeros = 0
          await this.exchange(s.args)
        } else if (s.waitMs > 0 || ++zeros > 1) {
          zeros = 0
          await this.sleep(Math.max(1, s.waitMs))
        }
        // waitMs 0 once: demand arrived as the park began; step again (quietly: no spin).
      } catch (e) {
        // A bug, never a Redis failure (those are `fail`ed): reported once, and the loop goes on.
        if (!this.warned) warn(e)
        this.warned = true
        await this.sleep(100)
      }
    }
  }

  /** Sends one command of the loop; its outcome goes to the lease. */
  async exchange(args) {
    let reply
    try {
      reply = await this.call(args)
    } catch (e) {
      this.nf.fail(describe(e))
      return
    }
    this.nf.complete(reply)
  }

  /** One command through the client: the library checked first, bounded by `timeoutMs`. */
  call(args, ms = this.timeoutMs) {
    return bounded(this.send(args), ms, `${args[0]} ${args[1]}`)
  }

  async send(args) {
    await this.library()
    try {
      return await this.sender.send(this.nf.wire(args), this.route)
    } catch (e) {
      if (!libraryMissing(e)) throw e
      // The server lost the library (restarted, flushed, failed over): load it, retry once.
      this.loaded = false
      await this.library()
      return await this.sender.send(this.nf.wire(args), this.route)
    }
  }

  /** Resolves once the library of this version is on the server (loading it if not). */
  library() {
    if (this.loaded) return Promise.resolve()
    // Bounded too: a load that never settles must not hold every later command.
    this.loading ??= bounded(this.load(), this.timeoutMs, 'the library check').finally(() => {
      this.loading = null
    })
    return this.loading
  }

  async load() {
    const lib = this.nf.library()
    if (!this.nf.scripted) {
      let version
      try {
        version = await this.sender.send(lib.check, this.route)
      } catch {
        version = undefined
      }
      if (Number(version) === lib.version) {
        this.loaded = true
        return
      }
      try {
        await this.sender.loadAll(lib.load)
        this.loaded = true
        return
      } catch (e) {
        // An ACL that refuses FUNCTION: the library runs as one script (EVALSHA) instead.
        if (!/NOPERM/.test(e?.message ?? '')) throw e
      }
    }
    const shas = await this.sender.loadAll(lib.loadScript)
    this.nf.useScript(String(Array.isArray(shas) ? shas[0] : shas))
    this.loaded = true
  }

  /**
   * Parks for `ms` or until `wake()`. The timer is unref'd unless callers are queued for the
   * block: what grants them is the next sync, so the process stays alive for it (their queue
   * timeout bounds that), as it does for a `HostBulkhead`'s pending acquire.
   */
  sleep(ms) {
    return new Promise((resolve) => {
      const park = { resolve, timer: null }
      park.timer = setTimeout(() => {
        if (this.park === park) this.park = null
        resolve()
      }, Math.min(Math.ceil(ms), MAX_TIMER_MS))
      if (!this.nf.waiting) park.timer.unref?.()
      this.park = park
    })
  }

  /** Ends a park: the bell (`bell`: a quiet period starts), `applyLimits`, `close`. */
  wake(bell) {
    const park = this.park
    if (park === null) return
    this.park = null
    clearTimeout(park.timer)
    if (bell) this.nf.rung()
    park.resolve()
  }

  /**
   * Stops the loop (after its command in flight, waited for at most one TTL) and gives the
   * blocks back, one release per lease — the permits', then the budget's (fenced: a lease that
   * expired meanwhile frees nothing), each bounded by one TTL. Never rejects: what could not
   * be released expires in Redis within the TTL.
   */
  async close() {
    this.nf.close()
    this.wake(false)
    const ttl = this.nf.leaseTtlMs
    await bounded(this.done, ttl, 'the lease driver').catch(noop)
    // The crate hands each lease's release out once: at most two (bounded all the same).
    for (let i = 0; i < MAX_RELEASES; i++) {
      const release = this.nf.releaseCommand()
      if (release === null) return
      try {
        this.nf.released(await this.call(release, ttl))
      } catch (e) {
        this.nf.fail(describe(e))
      }
    }
  }
}

function warn(e) {
  try {
    const w = new Error(`hullguard: the fleet lease driver failed: ${e && e.stack ? e.stack : e}`)
    w.name = 'HullguardFleetWarning'
    process.emitWarning(w)
  } catch {
    // nothing more to do
  }
}

// ----- FleetBulkhead --------------------------------------------------------------------------

/**
 * Builds `FleetBulkhead` over the facade's internals (index.js): `Bulkhead` and its private
 * constructor token, `handleOf`, `newEmitter` (the emitter a local `Bulkhead` delivers its
 * events through: the fleet's local core reports to one too), and `takeId` / `giveId` (a
 * permanent id of the facade's table of settled parties: the bell's).
 */
function defineFleet({ Bulkhead, kInternal, handleOf, newEmitter, takeId, giveId }) {
  const refuse = (what, why) => {
    throw new TypeError(`${what}: ${why}`)
  }

  /**
   * A bulkhead whose limit is shared by every process that opens the same `pool` on one Redis
   * (see the file header). `new FleetBulkhead(client, {pool, maxConcurrent, budget, leaseTtlMs,
   * classes, events, …})` starts at once (acquires queue until the first block arrives, one
   * round trip);
   * `await FleetBulkhead.open(client, options)` also waits until the library is there (and
   * rejects when Redis cannot be reached or refuses it). `await close()` before quitting the
   * client: it gives the block back.
   */
  class FleetBulkhead extends Bulkhead {
    #nf
    #driver
    #closing = null

    constructor(client, options) {
      const sender = senderOf(client)
      const bell = { driver: null, settled: () => bell.driver?.wake(true) }
      const id = takeId(bell)
      // The local core's events (admission events with `events: true`) go to this emitter, as
      // a local Bulkhead's do.
      const emitter = newEmitter()
      let nf
      try {
        nf = new native.NativeFleet(options, id, emitter.id)
      } catch (e) {
        giveId(id)
        throw e
      }
      const h = handleOf(nf.bulkhead(), noop, false)
      emitter.events = h.nb.events
      super(undefined, kInternal, h, undefined, emitter)
      this.#nf = nf
      this.#driver = bell.driver = new Driver(nf, sender)
      this.#driver.done.then(() => giveId(id))
    }

    /**
     * `new FleetBulkhead(client, options)`, resolved once the hullguard library is on the server
     * (one round trip when it is); rejects with the client's error (the bulkhead closed) when
     * Redis cannot be reached or refuses the library.
     */
    static async open(client, options) {
      const fleet = new FleetBulkhead(client, options)
      try {
        await fleet.#driver.ready
      } catch (e) {
        await fleet.close()
        throw e
      }
      return fleet
    }

    /** The pool. */
    get pool() {
      return this.#nf.pool
    }

    /** This process's holder id (`<hostname>:<pid>:<random hex>` unless given). */
    get holder() {
      return this.#nf.holder
    }

    /**
     * The local bulkhead's stats plus `lease` (the lease of the permits as this process sees
     * it; ms) and `budgetLease` (the fleet budget's lease, the same fields in units; `null`
     * without `budget`).
     */
    stats() {
      return this.#nf.stats()
    }

    /**
     * Sets the fleet limit and/or the fleet budget in Redis under `revision` (each lease table
     * keeps its own revision; one `hg_set_limit` per value, the limit's first): resolves
     * `{applied, revision, limit, budget}` — `applied` true only if every value given was
     * installed (false when a revision as new or newer is in force: the value in force is
     * returned), `revision` the revision in force (the limit's table's, else the budget's),
     * `limit` / `budget` the value in force, or `null` when not given. Lowering never revokes:
     * holders shrink to their shares at their next syncs. Only `limit` and `budget` may be
     * set, at least one; rejects with a `TypeError` / `RangeError` naming a bad field (`budget`
     * on a fleet bulkhead opened without one: a `TypeError`), or with the client's error.
     */
    applyLimits(limits) {
      let c
      try {
        c = this.#nf.applyLimitsCommand(limits)
      } catch (e) {
        return Promise.reject(e)
      }
      const driver = this.#driver
      const send = async () => {
        const replies = []
        try {
          for (const args of c.commands) replies.push(await driver.call(args))
        } catch (e) {
          // What was set before the error is in force: record it (it is set again if Redis
          // loses its state), then report the error.
          if (replies.length > 0) this.#nf.limitsApplied(c.revision, c.limit, c.budget, replies)
          throw e
        }
        return replies
      }
      return send().then((replies) => {
        const r = this.#nf.limitsApplied(c.revision, c.limit, c.budget, replies)
        // Sync under the new limits now.
        driver.wake(false)
        return { applied: r.applied, revision: r.revision, limit: r.limit ?? null, budget: r.budget ?? null }
      })
    }

    /**
     * The pool as Redis holds it: one read-only call (`hg_stats`) of its lease table of
     * `dimension`, `'permits'` (default) or `'budget'` (units; a `TypeError` without `budget`).
     */
    poolStats(dimension) {
      const nf = this.#nf
      let args
      try {
        args = nf.poolStatsCommand(dimension)
      } catch (e) {
        return Promise.reject(e)
      }
      return this.#driver.call(args).then((reply) => nf.decodePoolStats(reply))
    }

    /**
     * Stops admission (queued callers are rejected `BULKHEAD_CLOSED`, calls in flight finish),
     * stops the driver and gives the blocks back (the permits', and the budget's). Resolves
     * once done (never rejects: a block that could not be given back expires in Redis within
     * `leaseTtlMs`). Idempotent.
     */
    close() {
      this.#closing ??= this.#driver.close()
      return this.#closing
    }

    setLimit() {
      refuse('setLimit', "a fleet bulkhead's limit is its lease's block; set the fleet limit with applyLimits({revision, limit})")
    }

    setBudget() {
      refuse('setBudget', "a fleet bulkhead's budget is its lease's block; set the fleet budget with applyLimits({revision, budget})")
    }

    setObserve() {
      refuse('setObserve', 'observe mode is not fleet-wide')
    }

    [Symbol.for('nodejs.asyncDispose')]() {
      return this.close()
    }
  }
  if (typeof Symbol.asyncDispose === 'symbol') {
    FleetBulkhead.prototype[Symbol.asyncDispose] = FleetBulkhead.prototype[Symbol.for('nodejs.asyncDispose')]
  }
  return { FleetBulkhead }
}

module.exports = { defineFleet }
