'use strict'
/**
 * Metrics (issue 18, docs/design.md §8.3): the core's metric table published through
 * `prom-client` and `@opentelemetry/api` — both optional peer dependencies, loaded only by the
 * function that needs it.
 *
 *   const { registerPrometheus, registerOpenTelemetry } = require('hullguard/metrics')
 *   registerPrometheus({ bulkheads: { db: dbBulkhead }, registries: [httpRegistry], register })
 *   registerOpenTelemetry({ meter: metrics.getMeter('my-service'), bulkheads: { db: dbBulkhead } })
 *
 * The names, kinds, units, help texts and label names are the core's table
 * (`native.metricTable()`, `hullguard_core::metrics`), and so are the samples: the core walks a
 * bulkhead's stats into them (`bulkhead._metricSamples()`). This module adds the `key` label —
 * the name a bulkhead was given in `bulkheads`, or the registry key — and hands the samples to
 * the library. Class labels are the class names (the index for an unnamed class; `""` on a
 * bulkhead's total). One collection reads every source once (one snapshot shared by all the
 * families of one scrape).
 *
 * | metric | kind | labels |
 * |---|---|---|
 * | `hullguard_in_flight` | gauge | key, class, dimension (`calls` / `budget`) |
 * | `hullguard_queued` | gauge | key, class |
 * | `hullguard_limit` | gauge | key, class, dimension |
 * | `hullguard_admitted_total` | counter | key |
 * | `hullguard_rejected_total` | counter | key, reason (every reason, zeros too) |
 * | `hullguard_queue_wait_seconds` | histogram | key |
 * | `hullguard_circuit_state` | gauge (0 closed, 1 open, 2 half-open) | key |
 * | `hullguard_budget_in_use` | gauge | key, class |
 * | `hullguard_orphaned_in_flight` | gauge | key |
 *
 * Cardinality: per bulkhead, one series per reason, class and dimension; a registry's keys are
 * bounded by its `maxKeys` — at the bound an idle key is evicted (or a new one refused
 * `key_limit`), and an evicted key's series are gone from the next prom-client collection (its
 * counters start from 0 if the key comes back). OpenTelemetry's JavaScript SDK keeps every
 * attribute set an instrument reported (cumulative temporality; a gauge stays at its last
 * value), and no API removes one: an evicted key's OpenTelemetry series stay, bounded by the
 * keys ever seen and then by the SDK's cardinality limit. For a registry whose keys churn, use
 * delta temporality or a View that drops `key` (docs/design.md §8.3). Keys must be distinct across the sources: a key seen
 * twice in one collection keeps its first source's series.
 *
 * OpenTelemetry has no observable histogram: the wait histogram is a synchronous `Histogram`
 * (explicit buckets = the core's bounds in seconds) fed at each collection, inside the batch
 * observable callback, with what the core's histogram gained since the previous collection —
 * for each bucket as many recordings as it gained waits, each of a value inside that bucket,
 * chosen so that the recorded sum equals the core's `queue_wait_sum` gain (bucket counts and
 * the sum exact; a wait above the last finite bound, ~68.7 s, is recorded at the value that
 * keeps the sum). A counter that went down (a registry key evicted and re-created) starts a
 * new baseline. So a reader sees exactly the core's counts; the cost is one `record` per
 * queued wait, paid at collection.
 *
 * Thread-safety: one isolate; the sources must belong to it.
 */

const native = require('./native.js')

let table = null
/**
 * The core's metric table: frozen rows `{name, kind: 'gauge' | 'counter' | 'histogram', unit,
 * labels, help, buckets?}` (`buckets`: the histogram's finite upper bounds, seconds).
 */
function metricTable() {
  table ??= Object.freeze(native.metricTable().map((r) => Object.freeze({ ...r, labels: Object.freeze([...r.labels]) })))
  return table
}

// The facade (index.js) is looked up on first use.
let facade = null
function hullguard() {
  facade ??= require('./index.js')
  return facade
}

const describe = (x) => (x === null ? 'null' : Array.isArray(x) ? 'an array' : typeof x)

/** Checks that `opts` holds only `known` keys (a `TypeError` naming the unknown one). */
function knownKeys(opts, known, what) {
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) {
    throw new TypeError(`${what} needs an options object, got ${describe(opts)}`)
  }
  for (const k of Object.keys(opts)) {
    if (!known.includes(k)) {
      throw new TypeError(`${what}: unknown option ${JSON.stringify(k)} (known: ${known.map((n) => JSON.stringify(n)).join(', ')})`)
    }
  }
  return opts
}

/**
 * The sources of `{bulkheads, registries}`: `bulkheads` an object or a Map of key label →
 * Bulkhead; `registries` a Registry, a list, an object or a Map of them (registry keys label
 * their series; under a global cap the keys share one admission, whose series the
 * registry's name in the object labels — `'global'` in a list — with the keys as classes).
 * Returns `() => snapshot`: the samples of every source, each `{key, name, value | buckets/sum/count, class?, dimension?, reason?}`, read once per
 * collection (kept until the current task's microtasks have run).
 */
function sources(o, what) {
  const { Bulkhead, HostBulkhead, Registry } = hullguard()
  // A host bulkhead (Linux) is sampled like a bulkhead: the host's figures, live holders only.
  const sampled = (bh) => bh instanceof Bulkhead || (typeof HostBulkhead === 'function' && bh instanceof HostBulkhead)
  const bhs = o.bulkheads ?? {}
  if (typeof bhs !== 'object' || Array.isArray(bhs)) throw new TypeError(`${what}: bulkheads must be an object or a Map of key → Bulkhead, got ${describe(bhs)}`)
  const named = bhs instanceof Map ? [...bhs] : Object.entries(bhs)
  for (const [key, bh] of named) {
    if (typeof key !== 'string') throw new TypeError(`${what}: a bulkhead's key must be a string, got ${describe(key)}`)
    if (!sampled(bh)) throw new TypeError(`${what}: bulkheads[${JSON.stringify(key)}] must be a hullguard Bulkhead or HostBulkhead, got ${describe(bh)}`)
  }
  const r = o.registries ?? []
  // [name, registry]: the name labels a global cap's shared admission (default 'global').
  const regs =
    r instanceof Registry
      ? [['global', r]]
      : Array.isArray(r)
        ? r.map((x) => ['global', x])
        : typeof r === 'object'
          ? r instanceof Map
            ? [...r]
            : Object.entries(r)
          : null
  if (regs === null) throw new TypeError(`${what}: registries must be a Registry, a list or an object of them, got ${describe(r)}`)
  for (const [, reg] of regs) {
    if (!(reg instanceof Registry)) throw new TypeError(`${what}: registries must hold hullguard Registries, got ${describe(reg)}`)
  }
  let snap = null
  return function snapshot() {
    if (snap !== null) return snap
    const seen = new Set()
    const out = []
    const add = (key, samples) => {
      if (seen.has(key)) return
      seen.add(key)
      for (const s of samples) out.push({ key, ...s })
    }
    for (const [key, bh] of named) add(key, bh._metricSamples())
    for (const [name, reg] of regs) {
      for (const { key, samples } of reg._metricSamples()) add(key ?? name, samples)
    }
    snap = out
    // Every family's collect of one scrape runs in this task: they share the snapshot.
    queueMicrotask(() => {
      snap = null
    })
    return out
  }
}

/**
 * A bucket bound as Go (and Python's prometheus_client) write it — `1.024e-06`, not JS's
 * `0.000001024` — so that a fleet of Python and Node workers exports the same `le` strings
 * (before Prometheus 3.0 normalised them, different strings were different series).
 */
function goFloat(v) {
  if (v === Infinity) return '+Inf'
  const a = Math.abs(v)
  if (a !== 0 && (a < 1e-4 || a >= 1e21)) {
    const [m, e] = v.toExponential().split('e')
    const n = Number(e)
    return `${m}e${n < 0 ? '-' : '+'}${String(Math.abs(n)).padStart(2, '0')}`
  }
  return String(v)
}

/** A sample's labels for the row's label names (`class` `""` on a total). */
function labelsOf(row, s) {
  const l = { key: s.key }
  for (const n of row.labels) {
    if (n === 'class') l.class = s.class ?? ''
    else if (n === 'dimension') l.dimension = s.dimension
    else if (n === 'reason') l.reason = s.reason
  }
  return l
}

function optionalPeer(name) {
  try {
    return require(name)
  } catch (e) {
    if (e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(`'${name}'`)) {
      throw new Error(`hullguard/metrics: ${name} is not installed (an optional peer dependency: npm install ${name})`, { cause: e })
    }
    throw e
  }
}

// ----- prom-client ----------------------------------------------------------------------------

/**
 * The wait histogram as a prom-client metric (the registry's metric protocol: `get()` gives
 * `{name, help, type, values, aggregator}` as prom-client's own Histogram does); its `get()` is
 * the collect callback: the core's cumulative buckets, sum and count as they are.
 */
class CoreHistogram {
  constructor(row, snapshot) {
    this.name = row.name
    this.help = row.help
    this.type = 'histogram'
    this.aggregator = 'sum'
    this.row = row
    this.snapshot = snapshot
  }

  async get() {
    const values = []
    for (const s of this.snapshot()) {
      if (s.name !== this.name) continue
      const labels = labelsOf(this.row, s)
      for (const [le, n] of s.buckets) {
        values.push({ labels: { ...labels, le: goFloat(le) }, value: n, metricName: `${this.name}_bucket` })
      }
      values.push({ labels, value: s.sum, metricName: `${this.name}_sum` })
      values.push({ labels, value: s.count, metricName: `${this.name}_count` })
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator }
  }

  reset() {}
}

/**
 * Registers the metric families of the core's table in a prom-client registry, each collected
 * from the sources at scrape time (gauges and counters are prom-client's `Gauge` / `Counter`
 * with a `collect()` callback; the histogram a metric of the registry's protocol that writes
 * the core's buckets as they are).
 *
 * Options: `bulkheads` (key → Bulkhead), `registries` (Registries), `register` (a prom-client
 * `Registry`; default prom-client's global one), `client` (the prom-client module; default
 * `require('prom-client')`). Returns `{metrics, register, close()}`: serve
 * `await register.metrics()` (content type `register.contentType`); `close()` removes the
 * families from the register.
 *
 * @throws {TypeError} a bad option; {Error} a family of that name is already registered, or
 *   prom-client is not installed.
 */
function registerPrometheus(options) {
  const o = knownKeys(options, ['bulkheads', 'registries', 'register', 'client'], 'registerPrometheus')
  const snapshot = sources(o, 'registerPrometheus')
  const client = o.client ?? optionalPeer('prom-client')
  const register = o.register ?? client.register
  const metrics = []
  const names = []
  try {
    for (const row of metricTable()) {
      if (row.kind === 'histogram') {
        const m = new CoreHistogram(row, snapshot)
        register.registerMetric(m)
        metrics.push(m)
        names.push(row.name)
        continue
      }
      const gauge = row.kind === 'gauge'
      const Kind = gauge ? client.Gauge : client.Counter
      const m = new Kind({
        name: row.name,
        help: row.help,
        labelNames: [...row.labels],
        registers: [register],
        collect() {
          this.reset()
          for (const s of snapshot()) {
            if (s.name !== row.name) continue
            if (gauge) this.set(labelsOf(row, s), s.value)
            else this.inc(labelsOf(row, s), s.value)
          }
        },
      })
      metrics.push(m)
      names.push(row.name)
    }
  } catch (e) {
    for (const [i, m] of metrics.entries()) {
      if (register.getSingleMetric(names[i]) === m) register.removeSingleMetric(names[i])
    }
    throw e
  }
  return {
    metrics,
    register,
    close() {
      // By the names registered: an OpenMetrics scrape renames a counter in place (prom-client
      // strips its `_total`), but the registry still files it under the name it was given.
      for (const [i, m] of metrics.entries()) {
        if (register.getSingleMetric(names[i]) === m) register.removeSingleMetric(names[i])
      }
    },
  }
}

// ----- OpenTelemetry --------------------------------------------------------------------------

/** A table unit as a UCUM unit (`seconds` → `s`; counts have none). */
const otelUnit = (unit) => (unit === 'seconds' ? 's' : unit === '' ? undefined : unit)

/**
 * Records into `hist` what one key's core histogram gained since `last` (see the module notes).
 * `bounds`: the finite upper bounds (s). Returns the new baseline.
 */
function recordGain(hist, bounds, attrs, s, last) {
  // Per-bucket counts (the samples are cumulative).
  const counts = s.buckets.map(([, n], i) => n - (i === 0 ? 0 : s.buckets[i - 1][1]))
  let d = counts
  let sum = s.sum
  if (last !== undefined && last.count <= s.count && last.sum <= s.sum && last.counts.every((n, i) => n <= counts[i])) {
    d = counts.map((n, i) => n - last.counts[i])
    sum = s.sum - last.sum
  }
  const base = { counts, sum: s.sum, count: s.count }
  const fin = bounds.length
  const dInf = d[fin] ?? 0
  let lo = 0
  let hi = 0
  let mid = 0
  for (let i = 0; i < fin; i++) {
    const a = i === 0 ? 0 : bounds[i - 1]
    lo += d[i] * a
    hi += d[i] * bounds[i]
    mid += (d[i] * (a + bounds[i])) / 2
  }
  const top = bounds[fin - 1]
  const vInf = dInf > 0 ? Math.max(top * (1 + 1e-9), (sum - mid) / dInf) : 0
  const rest = sum - dInf * vInf
  // One position inside every finite bucket, so that the recorded sum is the gained sum.
  const eps = 1e-6
  const alpha = hi > lo ? Math.min(1 - eps, Math.max(eps, (rest - lo) / (hi - lo))) : 0.5
  for (let i = 0; i < fin; i++) {
    if (d[i] === 0) continue
    const a = i === 0 ? 0 : bounds[i - 1]
    const v = a + alpha * (bounds[i] - a)
    for (let k = 0; k < d[i]; k++) hist.record(v, attrs)
  }
  for (let k = 0; k < dInf; k++) hist.record(vInf, attrs)
  return base
}

/**
 * Publishes the core's table through an OpenTelemetry `Meter`: observable gauges and counters
 * (one batch observable callback reads every source once per collection) and the wait
 * histogram on a synchronous `Histogram` with the core's bucket bounds (see the module notes).
 *
 * Options: `meter` (default `metrics.getMeter('hullguard')` of `@opentelemetry/api`),
 * `bulkheads`, `registries` (as `registerPrometheus`). Returns `{instruments, close()}`:
 * `close()` removes the callback (the instruments stay with the meter).
 *
 * @throws {TypeError} a bad option; {Error} `@opentelemetry/api` not installed (no `meter`).
 */
function registerOpenTelemetry(options) {
  const o = knownKeys(options, ['meter', 'bulkheads', 'registries'], 'registerOpenTelemetry')
  const snapshot = sources(o, 'registerOpenTelemetry')
  const meter = o.meter ?? optionalPeer('@opentelemetry/api').metrics.getMeter('hullguard')
  if (meter === null || typeof meter !== 'object' || typeof meter.addBatchObservableCallback !== 'function') {
    throw new TypeError(`registerOpenTelemetry: meter must be an OpenTelemetry Meter, got ${describe(meter)}`)
  }
  const instruments = {}
  const observables = []
  const rows = new Map()
  for (const row of metricTable()) {
    const opts = { description: row.help, unit: otelUnit(row.unit) }
    rows.set(row.name, row)
    if (row.kind === 'histogram') {
      instruments[row.name] = meter.createHistogram(row.name, { ...opts, advice: { explicitBucketBoundaries: [...row.buckets] } })
      continue
    }
    const inst = row.kind === 'gauge' ? meter.createObservableGauge(row.name, opts) : meter.createObservableCounter(row.name, opts)
    instruments[row.name] = inst
    observables.push(inst)
  }
  /** key → the histogram's baseline at the previous collection. */
  const baselines = new Map()
  const callback = (result) => {
    const live = new Set()
    for (const s of snapshot()) {
      const row = rows.get(s.name)
      const attrs = labelsOf(row, s)
      if (row.kind === 'histogram') {
        live.add(s.key)
        baselines.set(s.key, recordGain(instruments[s.name], row.buckets, attrs, s, baselines.get(s.key)))
      } else {
        result.observe(instruments[s.name], s.value, attrs)
      }
    }
    for (const k of baselines.keys()) if (!live.has(k)) baselines.delete(k)
  }
  meter.addBatchObservableCallback(callback, observables)
  return {
    instruments,
    close() {
      meter.removeBatchObservableCallback(callback, observables)
    },
  }
}

module.exports = { registerPrometheus, registerOpenTelemetry, metricTable }
