'use strict'
// The Node runner of the scenario vectors in tests/vectors/*.json and the policy vectors in
// tests/vectors/policies/*.json (docs/design.md, scenario vectors; schema tests/vectors/schema.json). It mirrors the
// Rust runner (tests/tests/vectors.rs): every step runs to quiescence, then exactly the acquires
// that settled during the step are compared with its `settles`; I2 is checked after every step.
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

const { Bulkhead, Registry, BulkheadError, __test } = require('../index.js')
const { kClock, VirtualClock } = __test

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

/** A vector config → the facade's options. */
function options(c = {}) {
  const o = {}
  if (c.max_concurrent !== undefined) o.maxConcurrent = c.max_concurrent
  if (c.max_queue !== undefined) o.maxQueue = c.max_queue
  if (c.queue_timeout_ms !== undefined) o.queueTimeoutMs = ms(c.queue_timeout_ms)
  if (c.enabled !== undefined) o.enabled = c.enabled
  if (c.resilience !== undefined) o.resilience = camelKeys(c.resilience, 2)
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

/** A stats expectation → camelCase field names (top level; inside circuit / adaptive). */
function statsExpect(e) {
  return Object.fromEntries(
    Object.entries(e).map(([k, v]) => [camel(k), k === 'circuit' || k === 'adaptive' ? camelKeys(v, 1) : v]),
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
        [kClock]: this.clock,
      })
    } else {
      this.bh = new Bulkhead({ ...options(v.config), [kClock]: this.clock })
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
    const r = this.v.registry
    const o = r.overrides?.[key]?.queue_timeout_ms ?? r.defaults?.queue_timeout_ms
    return o === undefined ? 30_000 : ms(o)
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
    const rec = { state: 'pending', permit: null, outcome: null, ac: new AbortController(), immediate: true, key: key ?? null, weight: step.weight ?? 1 }
    this.acquires.set(id, rec)
    if (queue) {
      const opts = { signal: rec.ac.signal }
      if (step.weight !== undefined) opts.weight = step.weight
      if (step.timeout_ms !== undefined) opts.queueTimeoutMs = ms(step.timeout_ms)
      const p = this.reg ? this.reg.acquire(key, opts) : this.bulkhead(key).acquire(opts)
      assert.ok(p instanceof Promise)
      this.track(id, rec, p)
      await this.settle()
      rec.immediate = false
      if (rec.state === 'pending') {
        const timeout = opts.queueTimeoutMs ?? this.defaultTimeout(key)
        if (timeout !== Infinity) this.deadlines.push(this.now + timeout)
        return 'queued'
      }
      return rec.outcome
    }
    rec.immediate = false
    const opts = step.weight !== undefined ? { weight: step.weight } : undefined
    try {
      const permit = this.reg ? this.reg.tryAcquire(key, opts) : this.bulkhead(key).tryAcquire(opts)
      if (permit === null) {
        rec.state = 'rejected'
        return (rec.outcome = 'concurrency_limit')
      }
      rec.state = 'held'
      rec.permit = permit
      return (rec.outcome = 'granted')
    } catch (e) {
      rec.state = 'rejected'
      return (rec.outcome = this.outcomeOf(e))
    }
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
        break
      }
      case 'release':
      case 'record_outcome': {
        const rec = this.acquires.get(step.id)
        assert.ok(rec && rec.permit, `${ctx}: ${step.id} holds no permit`)
        const got = step.outcome === undefined ? rec.permit.release() : rec.permit.release({ outcome: step.outcome })
        assert.equal(got, step.expect ?? true, ctx)
        assert.equal(got, rec.state === 'held', `${ctx}: a release returns true exactly once`)
        rec.state = 'released'
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
        const due = [...new Set(this.deadlines.filter((d) => d > this.now && d <= to))].sort((a, b) => a - b)
        for (const d of due) {
          this.advance(d - this.now)
          await this.settle()
        }
        this.advance(to - this.now)
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
    for (const rec of this.acquires.values()) {
      if (rec.state === 'held') held.set(rec.key, (held.get(rec.key) ?? 0) + rec.weight)
      if (rec.state === 'pending') queued.set(rec.key, (queued.get(rec.key) ?? 0) + 1)
    }
    const all = this.reg ? Object.entries(this.reg.stats()) : [[null, this.bh.stats()]]
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
const files = [...vectorFiles(VECTORS), ...vectorFiles(POLICY_VECTORS)]
const policyFiles = vectorFiles(POLICY_VECTORS)
const ran = new Set()

describe('scenario vectors (tests/vectors/*.json, tests/vectors/policies/*.json)', () => {
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
    assert.ok(files.length - policyFiles.length >= 25, `only ${files.length} vectors in ${VECTORS}`)
    assert.ok(policyFiles.length >= 10, `only ${policyFiles.length} policy vectors in ${POLICY_VECTORS}`)
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
