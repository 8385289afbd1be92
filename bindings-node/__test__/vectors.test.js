'use strict'
// The Node runner of the scenario vectors in tests/vectors/*.json, the policy vectors in
// tests/vectors/policies/*.json, the admission vectors in tests/vectors/admission/*.json and
// the deadline vectors in tests/vectors/deadline/*.json (docs/design.md §11; schema
// tests/vectors/schema.json) — every one of them, none skipped. It
// mirrors the Rust runner (tests/tests/vectors.rs): every step runs to quiescence, then exactly
// the acquires that settled during the step are compared with its `settles`; I2 and the
// budget's counts (in use, overrun held, queued cost, the settlement identity) are checked
// against the runner's own records after every step.
// Admission: `cost` / `class` become `acquire({cost, admissionClass})` (a class by index),
// `try_acquire` runs through the non-throwing `tryAdmit`, a refusal's `bound` /
// `retry_after_ms` are read from its `detail`, `used` is `release({usage})`, and
// `refund` / `report_usage` / `orphan` / `apply_limits` / `would_admit` / `set_budget` /
// `set_observe` / `class_stats` / `key_stats` call the facade's methods. `advance_clock` also
// stops where a rate-held head conforms and ticks the rate there (the Rust runner's host rate
// timer), before a queue deadline of the same time.
// Deadlines (docs/design.md §5.9, §4.10): an acquire's `deadline_ms` is the facade's `deadline`
// (absolute ms on the bulkhead's virtual clock, which starts at 0; "infinite" → Infinity); the
// config's `min_service_time_ms`, `queue_delay_target_ms`, `queue_delay_interval_ms` and
// `adaptive_lifo` are camel-cased like every other key. A queued acquire's timer is the capped
// wait the core reports (`min(timeout, deadline − now − min_service_time)`), which the runner
// computes the same way to stop the clock there.
// Field names of stats expectations are camel-cased (the top level, and inside `circuit` /
// `adaptive`): reason keys, reason / state / algorithm strings and registry keys never are.
// Policies: `config.resilience` becomes the facade's `resilience` (camelCase, `…Ms`); a
// release takes the step's `outcome` (`permit.release({outcome})`); `expect_state` reads
// `stats().circuit.state`; `expect_events` compares the `stateChange` events heard since the
// previous check (`[old, new]`, or `[key, old, new]` in a registry).
//
// Time: the addon's test hook replaces the stats clock (`{[kClock]: new VirtualClock()}`), and
// the facade's queue timers (setTimeout) run on node:test's mock timers; `advance_clock` moves
// both together, stopping at every deadline in order (as the Rust runner sets its clock to each
// deadline before firing that timer).

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')

const { Bulkhead, Registry, BulkheadError, StaleRevisionError, __test } = require('../index.js')
const { kClock, kNative, VirtualClock } = __test

const VECTORS = path.resolve(__dirname, '..', '..', 'tests', 'vectors')
const POLICY_VECTORS = path.join(VECTORS, 'policies')
const schema = JSON.parse(fs.readFileSync(path.join(VECTORS, 'schema.json'), 'utf8'))

// ----- a light structural check against schema.json (no JSON-schema library) -----------------

const STEP_SHAPES = Object.fromEntries(
  schema.$defs.step.oneOf.map((alt) => [
    alt.properties.op.const,
    { props: new Set(Object.keys(alt.properties)), required: alt.required },
  ]),
)
const STATS_FIELDS = new Set(Object.keys(schema.$defs.stats_expect.properties))
const CONFIG_FIELDS = new Set(Object.keys(schema.$defs.config.properties))

function checkShape(v, file) {
  const where = (s) => `${path.basename(file)}: ${s}`
  for (const k of Object.keys(v)) assert.ok(k in schema.properties, where(`unknown top-level key ${k}`))
  assert.ok(!(v.config && v.registry), where('config and registry are exclusive'))
  assert.match(v.name, new RegExp(schema.properties.name.pattern), where('name'))
  const configs = [v.config, v.registry?.defaults, ...Object.values(v.registry?.overrides ?? {})]
  for (const c of configs.filter(Boolean)) {
    for (const k of Object.keys(c)) assert.ok(CONFIG_FIELDS.has(k), where(`unknown config key ${k}`))
  }
  assert.ok(Array.isArray(v.steps) && v.steps.length > 0, where('steps'))
  v.steps.forEach((step, i) => {
    const shape = STEP_SHAPES[step.op]
    assert.ok(shape, where(`step ${i}: unknown op ${step.op}`))
    for (const k of Object.keys(step)) assert.ok(shape.props.has(k), where(`step ${i}: unknown key ${k}`))
    for (const k of shape.required) assert.ok(k in step, where(`step ${i}: missing ${k}`))
    if (step.op === 'stats') {
      for (const k of Object.keys(step.expect)) assert.ok(STATS_FIELDS.has(k), where(`step ${i}: stats field ${k}`))
    }
  })
}

// ----- the runner -----------------------------------------------------------------------------

/** snake_case → camelCase, for field names only. */
const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase())

/**
 * A vector config → the facade's options: every key camel-cased (`…_ms` → `…Ms`, `"infinite"`
 * → `Infinity`), `resilience` two levels deep. Unknown keys reach the addon, which refuses them.
 */
function options(c = {}) {
  const o = {}
  for (const [k, v] of Object.entries(c)) {
    if (k === 'resilience') o.resilience = camelKeys(v, 2)
    else o[camel(k)] = k.endsWith('_ms') ? ms(v) : v
  }
  return o
}

/** A vector's class table → the facade's options `{classes, reserve, lending, shed, rates}`. */
function classTable(t) {
  if (t === undefined) return {}
  const o = { classes: t.classes.map((c) => camelKeys(c, 1)) }
  if (t.reserve !== undefined) o.reserve = camelKeys(t.reserve, 1)
  if (t.lending !== undefined) o.lending = t.lending
  if (t.shed !== undefined) o.shed = t.shed
  if (t.rates !== undefined) o.rates = camelKeys(t.rates, 2)
  return o
}

/** An apply_limits step → `applyLimits` options (values as the step gives them). */
function limitsOf(step) {
  const o = {}
  for (const k of ['revision', 'limit', 'budget', 'max_queue', 'queue_timeout_ms']) {
    if (step[k] !== undefined) o[camel(k)] = k.endsWith('_ms') ? ms(step[k]) : step[k]
  }
  if (step.reserve !== undefined) o.reserve = camelKeys(step.reserve, 1)
  if (step.rates !== undefined) o.rates = camelKeys(step.rates, 2)
  return o
}

/** A step's request → `acquire` / `wouldAdmit` options. */
function requestOf(step) {
  const o = {}
  if (step.weight !== undefined) o.weight = step.weight
  if (step.cost !== undefined) o.cost = step.cost
  if (step.class !== undefined) o.admissionClass = step.class
  if (step.timeout_ms !== undefined) o.queueTimeoutMs = ms(step.timeout_ms)
  if (step.deadline_ms !== undefined) o.deadline = ms(step.deadline_ms)
  return o
}

/**
 * `resilience` → the facade's spelling: keys camel-cased `depth` levels deep (`…_ms` →
 * `…Ms`), values (algorithm strings, nulls) unchanged.
 */
function camelKeys(v, depth) {
  if (depth === 0 || v === null || typeof v !== 'object') return v
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [camel(k), camelKeys(x, depth - 1)]))
}

/**
 * A stats expectation → camelCase field names (top level; inside circuit / adaptive / budget;
 * the reason keys of rejected_by_reason / observed_by_reason kept).
 */
function statsExpect(e) {
  return Object.fromEntries(
    Object.entries(e).map(([k, v]) => [
      camel(k),
      k === 'circuit' || k === 'adaptive' || k === 'budget' || k === 'load' ? camelKeys(v, 1) : v,
    ]),
  )
}
const ms = (t) => (t === 'infinite' ? Infinity : t)

/** A macrotask turn: every microtask (promise reaction) queued before it has run. */
const turn = () => new Promise((resolve) => setImmediate(resolve))

/** Every key of `want` (recursively) equals `got`'s. */
function subset(ctx, want, got) {
  if (want !== null && typeof want === 'object' && !Array.isArray(want)) {
    for (const [k, v] of Object.entries(want)) {
      assert.ok(got !== null && typeof got === 'object' && k in got, `${ctx}: no field ${k} in ${JSON.stringify(got)}`)
      subset(`${ctx}.${k}`, v, got[k])
    }
  } else {
    assert.deepEqual(got, want, ctx)
  }
}

class Runner {
  /**
   * @param v the vector
   * @param timers node:test's MockTimers, enabled for setTimeout
   */
  constructor(v, timers) {
    this.v = v
    this.name = v.name
    this.timers = timers
    this.clock = new VirtualClock()
    this.now = 0
    if (v.registry) {
      const r = v.registry
      const overrides = {}
      for (const [k, c] of Object.entries(r.overrides ?? {})) overrides[k] = options(c)
      this.reg = new Registry({
        ...options(r.defaults),
        overrides,
        ...(r.max_keys !== undefined ? { maxKeys: r.max_keys } : {}),
        ...(r.global !== undefined ? { global: camelKeys(r.global, 1) } : {}),
        [kClock]: this.clock,
      })
      this.global = r.global !== undefined
    } else {
      this.bh = new Bulkhead({ ...options(v.config), ...classTable(v.classes), [kClock]: this.clock })
    }
    /** The breaker transitions heard since the last `expect_events`. */
    this.events = []
    const emitter = this.reg ?? this.bh
    emitter.on('stateChange', (key, from, to) => this.events.push(this.reg ? [key, from, to] : [from, to]))
    /** id → {state: 'pending'|'held'|'rejected', permit, outcome, ac, immediate} */
    this.acquires = new Map()
    /** Queue deadlines (virtual ms) of the acquires that queued. */
    this.deadlines = []
    /** The acquires that settled during the current step: id → outcome. */
    this.settled = new Map()
  }

  ctx(i, step) {
    return `${this.name} step ${i} ${JSON.stringify(step)}`
  }

  /**
   * The bulkhead of `key` (registry vectors must name one, others must not). Note: a
   * `Registry.get()` handle pins its entry until it is garbage-collected (the Rust runner drops
   * its `Arc` at once), so a vector that evicts a key after a keyed set_limit / close / drain
   * would need the handle released first; no current vector does.
   */
  bulkhead(key) {
    if (this.reg && key !== undefined) return this.reg.get(key)
    if (this.bh && key === undefined) return this.bh
    throw new Error(`${this.name}: \`key\` must be given exactly for registry vectors`)
  }

  stats(key) {
    if (this.reg && key !== undefined) {
      const s = this.reg.stats()[key]
      assert.ok(s, `${this.name}: no registry entry ${JSON.stringify(key)}`)
      return s
    }
    return this.bulkhead(key).stats()
  }

  /** The per-call default queue timeout of `key` (Node merges overrides over the defaults). */
  defaultTimeout(key) {
    if (!this.reg) return this.bh.queueTimeoutMs
    if (key !== undefined && !this.global) return this.reg.get(key).queueTimeoutMs
    const r = this.v.registry
    const o = r.overrides?.[key]?.queue_timeout_ms ?? r.defaults?.queue_timeout_ms
    return o === undefined ? 30_000 : ms(o)
  }

  /**
   * The wait a request queued now may spend (docs/design.md §5.9; what the core reports as the
   * waiter's timeout and the facade arms): its queue `timeout` capped by the time left until
   * its `deadline` less the bulkhead's `min_service_time_ms`.
   */
  queueWait(timeout, deadline, key) {
    if (deadline === undefined || deadline === Infinity) return timeout
    const r = this.v.registry
    const config = r ? { ...r.defaults, ...r.overrides?.[key] } : this.v.config
    const minService = config?.min_service_time_ms ?? 0
    return Math.min(timeout, Math.max(0, deadline - this.now - minService))
  }

  /** Runs every pending promise reaction (and anything they schedule with setImmediate). */
  async settle() {
    await turn()
    await turn()
  }

  /** An error from the facade → the vector outcome. */
  outcomeOf(e, rec) {
    if (e instanceof BulkheadError) return e.reason
    if (rec && e === rec.ac.signal.reason) return 'aborted'
    if (e instanceof TypeError || e instanceof RangeError) return 'invalid'
    throw e
  }

  /** A refusal's detail against the step's `bound` / `retry_after_ms` (docs/design.md §5.7). */
  checkDetail(ctx, step, rec) {
    if (step.bound === undefined && step.retry_after_ms === undefined) return
    const d = rec.error?.detail
    assert.ok(d, `${ctx}: ${step.id} has no rejection detail (${rec.outcome})`)
    if (step.bound !== undefined) assert.equal(d.bound, step.bound, `${ctx}: the bound of ${step.id}`)
    if (step.retry_after_ms !== undefined) {
      const got = d.retryAfterMs === null ? null : Math.floor(d.retryAfterMs)
      assert.equal(got, step.retry_after_ms, `${ctx}: the retry time of ${step.id}`)
    }
  }

  track(id, rec, promise) {
    promise.then(
      (permit) => {
        assert.equal(rec.state, 'pending', `${this.name}: ${id} settled twice`)
        rec.state = 'held'
        rec.permit = permit
        rec.outcome = 'granted'
        if (!rec.immediate) this.settled.set(id, 'granted')
      },
      (e) => {
        assert.equal(rec.state, 'pending', `${this.name}: ${id} settled twice`)
        rec.state = 'rejected'
        rec.error = e
        try {
          rec.outcome = this.outcomeOf(e, rec)
        } catch (err) {
          rec.outcome = `unexpected error: ${err && err.stack}`
        }
        if (!rec.immediate) this.settled.set(id, rec.outcome)
      },
    )
  }

  async acquire(step, queue) {
    const { id, key } = step
    // `key` and `weight` are the runner's own records (what it asked for, less what
    // releasePartial returned), never read back from the addon.
    // `cost` / `overrun` / `reported`: the budget units it holds by the same rule (the step's
    // cost, less refunds, plus usage growth), as the Rust runner keeps them.
    const rec = {
      state: 'pending',
      permit: null,
      outcome: null,
      ac: new AbortController(),
      immediate: true,
      key: key ?? null,
      weight: step.weight ?? 1,
      cost: typeof step.cost === 'number' ? step.cost : 0,
      overrun: 0,
      reported: 0,
    }
    this.acquires.set(id, rec)
    if (queue) {
      const opts = { signal: rec.ac.signal, ...requestOf(step) }
      const p = this.reg ? this.reg.acquire(key, opts) : this.bulkhead(key).acquire(opts)
      assert.ok(p instanceof Promise)
      this.track(id, rec, p)
      await this.settle()
      rec.immediate = false
      if (rec.state === 'pending') {
        const wait = this.queueWait(opts.queueTimeoutMs ?? this.defaultTimeout(key), opts.deadline, key)
        if (wait !== Infinity) this.deadlines.push(this.now + wait)
        return 'queued'
      }
      return rec.outcome
    }
    rec.immediate = false
    const opts = requestOf(step)
    // The non-throwing style: a refusal is `{ok: false, reason, detail}`.
    try {
      const r = this.reg ? this.reg.tryAdmit(key, opts) : this.bulkhead(key).tryAdmit(opts)
      if (!r.ok) {
        assert.ok(r.error instanceof BulkheadError && r.detail === r.error.detail)
        rec.state = 'rejected'
        rec.error = r.error
        return (rec.outcome = r.reason)
      }
      rec.state = 'held'
      rec.permit = r.permit
      return (rec.outcome = 'granted')
    } catch (e) {
      rec.state = 'rejected'
      return (rec.outcome = this.outcomeOf(e))
    }
  }

  /** When (virtual ms) a head held back by a rate conforms, or `null`. */
  rateDue() {
    if (!this.bh) return null
    const ms = this.bh[kNative].rateRetryAfterMs
    return ms === null || ms === undefined ? null : this.now + Math.ceil(ms)
  }

  /** Moves the virtual clock and the mock timers forward together. */
  advance(delta) {
    if (delta <= 0) return
    this.clock.advance(delta)
    this.timers.tick(delta)
    this.now += delta
  }

  async step(i, step) {
    const ctx = this.ctx(i, step)
    const { op, key } = step
    this.settled = new Map()
    switch (op) {
      case 'acquire':
      case 'try_acquire': {
        const got = await this.acquire(step, op === 'acquire')
        assert.equal(got, step.expect, ctx)
        this.checkDetail(ctx, step, this.acquires.get(step.id))
        break
      }
      case 'release':
      case 'record_outcome': {
        const rec = this.acquires.get(step.id)
        assert.ok(rec && rec.permit, `${ctx}: ${step.id} holds no permit`)
        const opts = {}
        if (step.outcome !== undefined) opts.outcome = step.outcome
        // Usage reported: the unused rest refunded, the excess overrun.
        if (step.used !== undefined) opts.usage = step.used
        const got = Object.keys(opts).length === 0 ? rec.permit.release() : rec.permit.release(opts)
        assert.equal(got, step.expect ?? true, ctx)
        assert.equal(got, rec.state === 'held', `${ctx}: a release returns true exactly once`)
        rec.state = 'released'
        break
      }
      case 'orphan': {
        const rec = this.acquires.get(step.id)
        assert.ok(rec && rec.state === 'held', `${ctx}: ${step.id} holds no permit`)
        let got
        try {
          got = rec.permit.orphan() ? 'ok' : 'none'
          // The runner holds none of its permits from here on.
          if (got === 'ok') rec.weight = 0
        } catch (e) {
          assert.ok(e instanceof RangeError, `${ctx}: ${e}`)
          got = 'refused'
        }
        assert.equal(got, step.expect, ctx)
        break
      }
      case 'refund': {
        const rec = this.acquires.get(step.id)
        assert.ok(rec && rec.state === 'held', `${ctx}: ${step.id} holds no permit`)
        let got = 'ok'
        try {
          rec.permit.refund(step.n)
          // The part held past the budget goes first.
          const over = Math.min(step.n, rec.overrun)
          rec.overrun -= over
          rec.cost -= step.n - over
        } catch (e) {
          got = this.outcomeOf(e)
        }
        assert.equal(got, step.expect ?? 'ok', ctx)
        break
      }
      case 'report_usage': {
        const rec = this.acquires.get(step.id)
        assert.ok(rec && rec.state === 'held', `${ctx}: ${step.id} holds no permit`)
        let got
        try {
          const r = rec.permit.reportUsage(step.used, step.remaining ?? 0)
          got = r.change
          assert.equal(r.cancel, step.cancel ?? false, `${ctx}: cancel`)
          assert.equal(rec.permit.cancelRequested || r.cancel, rec.permit.cancelRequested, ctx)
          if (step.by !== undefined) assert.equal(r.by, step.by, `${ctx}: the change`)
        } catch (e) {
          const codes = { ERR_USAGE_DECREASED: 'decreased', ERR_USAGE_TOO_LARGE: 'invalid', ERR_USAGE_RELEASED: 'released' }
          assert.ok(e instanceof RangeError && e.code in codes, `${ctx}: ${e}`)
          got = codes[e.code]
        }
        assert.equal(got, step.expect, ctx)
        if (rec.weight > 0) {
          assert.equal(got === 'decreased', step.used < rec.reported, `${ctx}: cumulative usage`)
        }
        // The runner's own record: the hold becomes used + remaining; a shrink takes the part
        // past the budget first; a growth is charged or held past the budget as expected.
        if (['unchanged', 'shrank', 'grew', 'overran'].includes(got) && rec.weight > 0) {
          rec.reported = step.used
          const target = step.used + (step.remaining ?? 0)
          const held = rec.cost + rec.overrun
          if (target < held) {
            const over = Math.min(held - target, rec.overrun)
            rec.overrun -= over
            rec.cost -= held - target - over
          } else if (got === 'grew') {
            rec.cost += target - held
          } else if (got === 'overran') {
            rec.overrun += target - held
          }
        }
        break
      }
      case 'apply_limits': {
        const bh = this.bulkhead(key)
        const before = this.stats(key)
        let got = 'ok'
        try {
          bh.applyLimits(limitsOf(step))
        } catch (e) {
          if (e instanceof StaleRevisionError) {
            got = 'stale'
            if (step.current !== undefined) assert.equal(e.current, step.current, `${ctx}: current`)
          } else {
            got = this.outcomeOf(e)
          }
        }
        if (got !== 'ok') {
          const after = this.stats(key)
          const pick = (s) => [s.revision, s.limit, s.budget?.limit]
          assert.deepEqual(pick(after), pick(before), `${ctx}: a refused applyLimits changes nothing`)
        }
        assert.equal(got, step.expect ?? 'ok', ctx)
        break
      }
      case 'would_admit': {
        // In a registry through the registry: a dry run never creates the key.
        const opts = requestOf(step)
        const before = JSON.stringify(this.reg ? this.reg.stats() : this.bh.stats())
        let got, position
        try {
          const r = this.reg ? this.reg.wouldAdmit(key, opts) : this.bh.wouldAdmit(opts)
          got = r.decision
          position = r.position
          if (got !== 'admit_now' && got !== 'would_queue') {
            assert.ok(r.detail && r.detail.reason === got, `${ctx}: detail`)
          }
        } catch (e) {
          got = this.outcomeOf(e)
        }
        const after = JSON.stringify(this.reg ? this.reg.stats() : this.bh.stats())
        assert.equal(after, before, `${ctx}: a dry run changes nothing`)
        assert.equal(got, step.expect, ctx)
        if (step.position !== undefined) assert.equal(position, step.position, `${ctx}: position`)
        break
      }
      case 'report_load': {
        // The signals of docs/design.md §4.11: the lag in ms, the CPU in cores.
        this.bulkhead(key).reportLoad({ eventLoopLagMs: step.event_loop_lag_ms, cpu: step.cpu })
        break
      }
      case 'set_observe': {
        let got = 'ok'
        try {
          this.bulkhead(key).setObserve(step.mode)
        } catch (e) {
          got = this.outcomeOf(e)
        }
        assert.equal(got, step.expect ?? 'ok', ctx)
        break
      }
      case 'set_budget': {
        let got = 'ok'
        try {
          this.bulkhead(key).setBudget(step.limit)
        } catch (e) {
          got = this.outcomeOf(e)
        }
        assert.equal(got, step.expect ?? 'ok', ctx)
        break
      }
      case 'class_stats': {
        const bh = this.bulkhead(undefined)
        const c = bh.classStats(step.class)
        const got = { in_flight: c.inFlight, queued: c.queued, shared_in_use: bh[kNative].classSharedInUse()[0] }
        subset(ctx, step.expect, got)
        break
      }
      case 'key_stats': {
        assert.ok(this.reg, `${ctx}: not a registry`)
        const c = this.reg.keyStats(key)
        assert.ok(c, `${ctx}: no key stats (no global cap, or no key)`)
        subset(ctx, step.expect, { in_flight: c.inFlight, queued: c.queued, ceiling: c.ceiling, observed: c.observed })
        break
      }
      case 'expect_state': {
        const s = this.stats(key)
        assert.ok(s.circuit !== null, `${ctx}: no breaker`)
        assert.equal(s.circuit.state, step.state, ctx)
        break
      }
      case 'expect_events': {
        const got = this.events
        this.events = []
        assert.deepEqual(got, step.events, `${ctx}: events`)
        break
      }
      case 'release_partial': {
        const rec = this.acquires.get(step.id)
        assert.ok(rec && rec.permit && !rec.permit.released, `${ctx}: ${step.id} holds no permit`)
        let got = 'ok'
        try {
          rec.permit.releasePartial(step.n)
          rec.weight -= step.n
          // Units return with the last permit (docs/design.md §4.5).
          if (rec.weight === 0) rec.cost = rec.overrun = 0
        } catch (e) {
          got = this.outcomeOf(e)
        }
        assert.equal(got, step.expect ?? 'ok', ctx)
        break
      }
      case 'cancel': {
        const rec = this.acquires.get(step.id)
        assert.ok(rec, `${ctx}: no acquire ${step.id}`)
        const wasPending = rec.state === 'pending'
        rec.ac.abort()
        await this.settle()
        const got = wasPending && rec.outcome === 'aborted' ? 'cancelled' : 'already_settled'
        assert.equal(got, step.expect ?? 'cancelled', ctx)
        break
      }
      case 'set_limit': {
        let got = 'ok'
        try {
          this.bulkhead(key).setLimit(step.limit)
        } catch (e) {
          got = this.outcomeOf(e)
        }
        assert.equal(got, step.expect ?? 'ok', ctx)
        break
      }
      case 'close':
        if (this.reg && key === undefined) this.reg.close()
        else this.bulkhead(key).close()
        break
      case 'advance_clock': {
        const to = this.now + step.ms
        // Stop at every queue deadline and every time a rate-held head conforms, in order
        // (the host's rate timer ticks before a queue deadline of the same time, as in the
        // Rust runner); bounded.
        for (let n = 0; n < 10_000; n++) {
          const next = Math.min(to, ...this.deadlines.filter((d) => d > this.now))
          const rate = this.rateDue()
          if (rate !== null && rate <= next) {
            this.advance(rate - this.now)
            this.bh[kNative].rateTick()
            await this.settle()
            continue
          }
          if (next >= to) break
          this.advance(next - this.now)
          await this.settle()
        }
        this.advance(to - this.now)
        await this.settle()
        break
      }
      case 'drain': {
        const r = await this.bulkhead(key).drain({ timeoutMs: step.timeout_ms ?? 0 })
        subset(ctx, step.expect, r)
        break
      }
      case 'stats': {
        subset(ctx, statsExpect(step.expect), this.stats(key))
        break
      }
      case 'keys': {
        assert.ok(this.reg, `${ctx}: not a registry`)
        assert.deepEqual(this.reg.keys(), step.expect, ctx)
        break
      }
      default:
        throw new Error(`${ctx}: unknown op ${JSON.stringify(op)}`)
    }
    // Every step runs to quiescence: then compare exactly what settled.
    await this.settle()
    const got = Object.fromEntries([...this.settled].sort(([a], [b]) => (a < b ? -1 : 1)))
    const want = Object.fromEntries(Object.entries(step.settles ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)))
    assert.deepEqual(got, want, `${ctx}: settles (at ${this.now} ms)`)
    this.checkInvariants(ctx)
  }

  /**
   * After every step, for every bulkhead: `active` is what the runner holds of it (its own
   * records), `queued` its pending acquires, no grant is left unclaimed, and I2 holds with the
   * runner's count: `available + held === limit`.
   */
  checkInvariants(ctx) {
    const held = new Map()
    const queued = new Map()
    const units = new Map()
    const over = new Map()
    const queuedCost = new Map()
    const add = (m, k, n) => m.set(k, (m.get(k) ?? 0) + n)
    for (const rec of this.acquires.values()) {
      if (rec.state === 'held') {
        add(held, rec.key, rec.weight)
        add(units, rec.key, rec.cost)
        add(over, rec.key, rec.overrun)
      }
      if (rec.state === 'pending') {
        add(queued, rec.key, 1)
        add(queuedCost, rec.key, rec.cost)
      }
    }
    let all = this.reg ? Object.entries(this.reg.stats()) : [[null, this.bh.stats()]]
    if (this.global) {
      // Under a global cap (docs/design.md §9.2): each key's class holds what the runner holds
      // of it, and the one admission holds what all keys hold.
      for (const [key] of all) {
        const c = this.reg.keyStats(key)
        const want = [held.get(key) ?? 0, queued.get(key) ?? 0]
        assert.deepEqual([c.inFlight, c.queued], want, `${ctx}: key ${key}: ${JSON.stringify(c)}`)
      }
      const sum = (m) => [...m.values()].reduce((a, b) => a + b, 0)
      for (const m of [held, queued, units, over, queuedCost]) {
        const total = sum(m)
        m.clear()
        m.set(null, total)
      }
      all = [[null, this.reg.globalStats()]]
    }
    for (const [key, s] of all) this.checkBudget(ctx, key, s, units.get(key) ?? 0, over.get(key) ?? 0, queuedCost.get(key) ?? 0)
    for (const [key, s] of all) {
      const h = held.get(key) ?? 0
      const q = queued.get(key) ?? 0
      held.delete(key)
      queued.delete(key)
      const at = `${ctx}: ${JSON.stringify(key)} ${JSON.stringify(s)}`
      assert.equal(s.active, h, `${at}: active vs the ${h} permits the runner holds`)
      assert.equal(s.queued, q, `${at}: queued vs the runner's ${q} pending acquires`)
      assert.equal(s.grantedUnclaimed, 0, `${at}: the runner claims every grant`)
      assert.equal(s.available + h, s.limit, `${at}: I2 with the runner's count`)
    }
    const left = [...held].filter(([, w]) => w > 0).concat([...queued])
    assert.deepEqual(left, [], `${ctx}: permits or waiters in bulkheads missing from the stats`)
  }

  /** The budget of one bulkhead against the units the runner holds (the Rust runner's check). */
  checkBudget(ctx, key, s, units, over, queuedCost) {
    const at = `${ctx}: ${JSON.stringify(key)} ${JSON.stringify(s.budget)}`
    const b = s.budget
    if (b === null) {
      assert.deepEqual([units, over], [0, 0], `${at}: no budget but the runner holds ${units} (+${over}) units`)
      return
    }
    assert.equal(b.queuedCost, queuedCost, `${at}: queuedCost vs the runner's queued costs`)
    assert.equal(b.overrunHeld, over, `${at}: overrunHeld vs the ${over} units held past the budget`)
    assert.equal(b.inUse, units, `${at}: budget inUse vs the ${units} units held`)
    assert.equal(b.grantedUnclaimed, 0, `${at}: unclaimed units`)
    assert.equal(b.available + units, b.limit, `${at}: the budget's I2 with the runner's count`)
    assert.equal(
      b.reservedTotal + b.overrunTotal,
      b.consumedTotal + b.refundedTotal + b.inUse + b.overrunHeld,
      `${at}: the C30 settlement identity`,
    )
  }

  async run() {
    for (const [i, step] of this.v.steps.entries()) await this.step(i, step)
  }
}

// ----- the vectors ----------------------------------------------------------------------------

const vectorFiles = (dir) =>
  fs.existsSync(dir)
    ? fs
        .readdirSync(dir)
        .filter((f) => f.endsWith('.json') && f !== 'schema.json')
        .sort()
        .map((f) => path.join(dir, f))
    : []
const ADMISSION_VECTORS = path.join(VECTORS, 'admission')
const DEADLINE_VECTORS = path.join(VECTORS, 'deadline')
const files = [
  ...vectorFiles(VECTORS),
  ...vectorFiles(POLICY_VECTORS),
  ...vectorFiles(ADMISSION_VECTORS),
  ...vectorFiles(DEADLINE_VECTORS),
]
const policyFiles = vectorFiles(POLICY_VECTORS)
const admissionFiles = vectorFiles(ADMISSION_VECTORS)
const deadlineFiles = vectorFiles(DEADLINE_VECTORS)
const ran = new Set()

describe('scenario vectors (tests/vectors/*.json, policies/*.json, admission/*.json, deadline/*.json)', () => {
  const names = new Set()
  for (const file of files) {
    const f = file
    const v = JSON.parse(fs.readFileSync(file, 'utf8'))
    test(v.name, async (t) => {
      checkShape(v, file)
      assert.equal(path.basename(f, '.json'), v.name, 'file name = vector name')
      assert.ok(!names.has(v.name), `duplicate vector ${v.name}`)
      names.add(v.name)
      t.mock.timers.enable({ apis: ['setTimeout'] })
      try {
        await new Runner(v, t.mock.timers).run()
      } finally {
        t.mock.timers.reset()
      }
      ran.add(f)
    })
  }

  test('every vector file ran', () => {
    const top = files.length - policyFiles.length - admissionFiles.length - deadlineFiles.length
    assert.ok(top >= 25, `only ${top} vectors in ${VECTORS}`)
    assert.ok(policyFiles.length >= 10, `only ${policyFiles.length} policy vectors in ${POLICY_VECTORS}`)
    assert.ok(admissionFiles.length >= 99, `only ${admissionFiles.length} admission vectors in ${ADMISSION_VECTORS}`)
    assert.ok(deadlineFiles.length >= 9, `only ${deadlineFiles.length} deadline vectors in ${DEADLINE_VECTORS}`)
    assert.deepEqual([...ran].sort(), [...files].sort())
  })
})

describe('the runner can fail', () => {
  const runs = async (t, v) => {
    t.mock.timers.enable({ apis: ['setTimeout'] })
    try {
      await new Runner(v, t.mock.timers).run()
    } finally {
      t.mock.timers.reset()
    }
  }

  test('an unknown op fails the runner', async (t) => {
    await assert.rejects(runs(t, { name: 'u', steps: [{ op: 'frobnicate' }] }), /unknown op "frobnicate"/)
  })

  test('a wrong `settles` fails the runner', async (t) => {
    const wrong = {
      name: 'w',
      config: { max_concurrent: 1 },
      steps: [
        { op: 'acquire', id: 'a', expect: 'granted' },
        { op: 'release', id: 'a', settles: { a: 'granted' } },
      ],
    }
    await assert.rejects(runs(t, wrong), /settles/)
  })

  test('a missing settle fails the runner', async (t) => {
    const missing = {
      name: 'm',
      config: { max_concurrent: 1, max_queue: 1 },
      steps: [
        { op: 'acquire', id: 'h', expect: 'granted' },
        { op: 'acquire', id: 'w', expect: 'queued' },
        { op: 'release', id: 'h' },
      ],
    }
    await assert.rejects(runs(t, missing), /settles/)
  })

  test('wrong policy expectations (state, events, circuit stats, a fast-fail) fail the runner', async (t) => {
    const tripOnce = (then) => ({
      name: 'p',
      config: { max_concurrent: 2, resilience: { breaker: { failure_threshold: 2, open_duration_ms: 100 } } },
      steps: [{ op: 'acquire', id: 'a', expect: 'granted' }, { op: 'record_outcome', id: 'a', outcome: 'failure' }, then],
    })
    await assert.rejects(runs(t, tripOnce({ op: 'expect_state', state: 'open' })), /closed|open/)
    await assert.rejects(runs(t, tripOnce({ op: 'expect_events', events: [['closed', 'open']] })), /events/)
    await assert.rejects(runs(t, tripOnce({ op: 'try_acquire', id: 'b', expect: 'circuit_open' })), /circuit_open|granted/)
    await assert.rejects(
      runs(t, tripOnce({ op: 'stats', expect: { circuit: { consecutive_failures: 0 } } })),
      /consecutiveFailures/,
    )
    await assert.rejects(
      runs(t, { name: 'n', config: { max_concurrent: 1 }, steps: [{ op: 'expect_state', state: 'closed' }] }),
      /no breaker/,
    )
    // …and the right expectations pass.
    await runs(t, {
      name: 'r',
      config: { max_concurrent: 2, resilience: { breaker: { failure_threshold: 2, open_duration_ms: 100 } } },
      steps: [
        { op: 'acquire', id: 'a', expect: 'granted' },
        { op: 'record_outcome', id: 'a', outcome: 'failure' },
        { op: 'stats', expect: { circuit: { state: 'closed', consecutive_failures: 1 } } },
        { op: 'acquire', id: 'b', expect: 'granted' },
        { op: 'release', id: 'b', outcome: 'failure' },
        { op: 'expect_state', state: 'open' },
        { op: 'expect_events', events: [['closed', 'open']] },
        { op: 'try_acquire', id: 'c', expect: 'circuit_open' },
      ],
    })
  })

  test('wrong admission expectations fail the runner (budget stats, a refused refund, a bound, a reason)', async (t) => {
    const budget = { max_concurrent: 2, budget: 10 }
    const granted = { op: 'acquire', id: 'a', cost: 5, expect: 'granted' }
    for (const steps of [
      [granted, { op: 'stats', expect: { budget: { in_use: 4 } } }],
      [granted, { op: 'refund', id: 'a', n: 6 }],
      [{ op: 'acquire', id: 'a', cost: 11, expect: 'budget_limit' }],
      [granted, { op: 'release', id: 'a', used: 2 }, { op: 'stats', expect: { budget: { refunded_total: 2 } } }],
      [granted, { op: 'report_usage', id: 'a', used: 1, expect: 'grew' }],
      [granted, { op: 'would_admit', cost: 6, expect: 'admit_now' }],
      [{ op: 'apply_limits', revision: 1, limit: 1, expect: 'stale' }],
    ]) {
      await assert.rejects(runs(t, { name: 'b', config: budget, steps }), JSON.stringify(steps))
    }
    const wrongBound = {
      name: 'wb',
      config: { max_concurrent: 1, max_queue: 0 },
      steps: [
        { op: 'acquire', id: 'a', expect: 'granted' },
        { op: 'acquire', id: 'b', expect: 'concurrency_limit', bound: 'kill_switch' },
      ],
    }
    await assert.rejects(runs(t, wrongBound), /bound/)
    // …and the right ones pass.
    await runs(t, {
      name: 'r',
      config: budget,
      steps: [
        granted,
        { op: 'would_admit', cost: 6, expect: 'would_queue', position: 1 },
        { op: 'report_usage', id: 'a', used: 1, expect: 'shrank', by: 4 },
        { op: 'release', id: 'a', used: 2 },
        { op: 'stats', expect: { budget: { in_use: 0, consumed_total: 2, refunded_total: 4, overrun_total: 1 } } },
      ],
    })
  })

  test('wrong deadline expectations fail the runner (the capped wait, a passed deadline)', async (t) => {
    const config = { max_concurrent: 1, max_queue: 2, queue_timeout_ms: 60_000, min_service_time_ms: 2_000 }
    const held = { op: 'acquire', id: 'h', expect: 'granted' }
    // The wait is capped at 5 s − 2 s: W settles at 3 s, not at 5 s.
    const late = [
      held,
      { op: 'acquire', id: 'w', deadline_ms: 5_000, expect: 'queued' },
      { op: 'advance_clock', ms: 2_999 },
      { op: 'advance_clock', ms: 1 },
      { op: 'advance_clock', ms: 2_000, settles: { w: 'timeout' } },
    ]
    await assert.rejects(runs(t, { name: 'd', config, steps: late }), /settles/)
    // A passed deadline is refused timeout, not queued and not invalid.
    const queued = [{ op: 'advance_clock', ms: 10 }, held, { op: 'acquire', id: 'p', deadline_ms: 5, expect: 'queued' }]
    await assert.rejects(runs(t, { name: 'p', config, steps: queued }), /timeout/)
    // …and the right ones pass.
    await runs(t, {
      name: 'r',
      config,
      steps: [
        held,
        { op: 'acquire', id: 'w', deadline_ms: 5_000, expect: 'queued' },
        { op: 'advance_clock', ms: 2_999 },
        { op: 'advance_clock', ms: 1, settles: { w: 'timeout' } },
        { op: 'try_acquire', id: 'p', deadline_ms: 5, expect: 'timeout' },
        { op: 'release', id: 'h' },
      ],
    })
  })

  test('a wrong stats expectation and a wrong timer outcome fail the runner', async (t) => {
    await assert.rejects(runs(t, { name: 's', steps: [{ op: 'stats', expect: { limit: 11 } }] }), /limit/)
    const early = {
      name: 't',
      config: { max_concurrent: 1, queue_timeout_ms: 100 },
      steps: [
        { op: 'acquire', id: 'h', expect: 'granted' },
        { op: 'acquire', id: 'w', expect: 'queued' },
        { op: 'advance_clock', ms: 99, settles: { w: 'timeout' } },
      ],
    }
    await assert.rejects(runs(t, early), /settles/)
  })
})
