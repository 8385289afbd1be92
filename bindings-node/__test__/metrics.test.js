'use strict'
// Issue 18 in Node: the core's metric table through the real libraries (`hullguard/metrics`).
// prom-client: `register.metrics()` served by a real node:http server on 127.0.0.1 (port 0),
// scraped with fetch and parsed by a strict Prometheus text parser (./prometheus.js says why
// not npm's). OpenTelemetry: the SDK's MeterProvider read through its in-memory exporter
// (`InMemoryMetricExporter` + `PeriodicExportingMetricReader`, flushed by hand). C35
// (/work/shared/cases/CASES.md) is a named test here: a virtual clock and node:test's mock
// timers, as in issue17.test.js.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')

const client = require('prom-client')
const {
  MeterProvider,
  PeriodicExportingMetricReader,
  InMemoryMetricExporter,
  AggregationTemporality,
  DataPointType,
} = require('@opentelemetry/sdk-metrics')

const hg = require('../index.js')
const { Bulkhead, Registry, REASONS, __test } = hg
const { kClock, VirtualClock, setNow } = __test
const native = require('../native.js')
const metricsModule = require('../metrics.js')
const { registerPrometheus, registerOpenTelemetry, metricTable } = metricsModule
const { parseExposition, value } = require('./prometheus.js')
const { turns, track } = require('./helpers.js')

const TABLE = native.metricTable()
const NAMES = TABLE.map((r) => r.name)
const WAIT = 'hullguard_queue_wait_seconds'

/** A prom-client registry served on 127.0.0.1: `scrape()` fetches and parses it. */
async function exposition(t, register) {
  const server = http.createServer(async (req, res) => {
    try {
      const body = await register.metrics()
      res.writeHead(200, { 'content-type': register.contentType }).end(body)
    } catch (e) {
      res.writeHead(500).end(String(e && e.stack))
    }
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  t.after(async () => {
    server.closeAllConnections()
    await new Promise((r) => server.close(r))
  })
  const url = `http://127.0.0.1:${server.address().port}/metrics`
  return {
    async scrape() {
      const r = await fetch(url)
      const text = await r.text()
      assert.equal(r.status, 200, text)
      assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
      return parseExposition(text)
    },
  }
}

/** The labels of a total sample (`class` "" where the metric has it). */
const total = (name, key, extra = {}) => {
  const row = TABLE.find((r) => r.name === name)
  const l = { key, ...extra }
  if (row.labels.includes('class') && !('class' in extra)) l.class = ''
  return l
}

describe('prom-client collector', () => {
  test('the core table’s families, scraped from a real endpoint and parsed strictly', async (t) => {
    const register = new client.Registry()
    const db = new Bulkhead({ maxConcurrent: 4, maxQueue: 2, resilience: { breaker: {} } })
    const llm = new Bulkhead({
      maxConcurrent: 8,
      budget: 1000,
      classes: [
        { name: 'interactive', priority: 1 },
        { name: 'batch', priority: 0, ceiling: 3 },
      ],
    })
    const reg = new Registry({ maxConcurrent: 2, maxQueue: 0 })
    const handle = registerPrometheus({ bulkheads: { db, llm }, registries: [reg], register })
    const ep = await exposition(t, register)

    const a = await db.acquire()
    const b = await db.acquire({ weight: 2 })
    const c = await llm.acquire({ admissionClass: 'batch', cost: 300 })
    const d = await llm.acquire({ admissionClass: 'interactive', cost: 100 })
    const k = await reg.acquire('https://a.example:443')
    const k2 = reg.tryAcquire('https://a.example:443')
    assert.equal(reg.tryAcquire('https://a.example:443'), null)
    assert.throws(() => db.tryAcquire({ weight: 2 }) ?? (() => { throw new Error('full') })())
    const f = await ep.scrape()

    // Every family of the core's table, with its help and type, and nothing else.
    assert.deepEqual([...f.keys()], NAMES)
    for (const row of TABLE) {
      assert.equal(f.get(row.name).help, row.help)
      assert.equal(f.get(row.name).type, row.kind)
    }
    // Gauges: totals and per class (names), both dimensions.
    const IF = 'hullguard_in_flight'
    assert.equal(value(f, IF, IF, total(IF, 'db', { dimension: 'calls' })), 3)
    assert.equal(value(f, IF, IF, total(IF, 'llm', { dimension: 'calls' })), 2)
    assert.equal(value(f, IF, IF, total(IF, 'llm', { dimension: 'budget' })), 400)
    assert.equal(value(f, IF, IF, { key: 'llm', class: 'batch', dimension: 'calls' }), 1)
    assert.equal(value(f, IF, IF, { key: 'llm', class: 'interactive', dimension: 'budget' }), 100)
    assert.equal(value(f, IF, IF, total(IF, 'https://a.example:443', { dimension: 'calls' })), 2)
    assert.equal(value(f, IF, IF, { key: 'db', class: 'x', dimension: 'calls' }), undefined)
    const L = 'hullguard_limit'
    assert.equal(value(f, L, L, total(L, 'db', { dimension: 'calls' })), 4)
    assert.equal(value(f, L, L, { key: 'llm', class: 'batch', dimension: 'calls' }), 3)
    assert.equal(value(f, L, L, total(L, 'llm', { dimension: 'budget' })), 1000)
    assert.equal(value(f, 'hullguard_queued', 'hullguard_queued', total('hullguard_queued', 'db')), 0)
    assert.equal(value(f, 'hullguard_budget_in_use', 'hullguard_budget_in_use', total('hullguard_budget_in_use', 'llm')), 400)
    assert.equal(value(f, 'hullguard_budget_in_use', 'hullguard_budget_in_use', total('hullguard_budget_in_use', 'db')), undefined, 'only with a budget')
    assert.equal(value(f, 'hullguard_orphaned_in_flight', 'hullguard_orphaned_in_flight', { key: 'db' }), 0)
    // The breaker's state only where there is a breaker.
    const CS = 'hullguard_circuit_state'
    assert.equal(value(f, CS, CS, { key: 'db' }), 0)
    assert.equal(f.get(CS).samples.length, 1)
    // Counters: every reason, zeros included.
    const A = 'hullguard_admitted_total'
    assert.equal(value(f, A, A, { key: 'db' }), 2)
    assert.equal(value(f, A, A, { key: 'https://a.example:443' }), 2)
    const R = 'hullguard_rejected_total'
    for (const key of ['db', 'llm', 'https://a.example:443']) {
      const got = f.get(R).samples.filter((s) => s.labels.key === key)
      assert.deepEqual(got.map((s) => s.labels.reason).sort(), [...REASONS].sort(), key)
    }
    assert.equal(value(f, R, R, { key: 'db', reason: 'concurrency_limit' }), 1)
    assert.equal(value(f, R, R, { key: 'https://a.example:443', reason: 'concurrency_limit' }), 1)
    assert.equal(value(f, R, R, { key: 'llm', reason: 'shed' }), 0)
    // The histogram: the core's bounds (seconds) plus +Inf, for every key.
    const buckets = f.get(WAIT).samples.filter((s) => s.name === `${WAIT}_bucket` && s.labels.key === 'db')
    const bounds = TABLE.find((r) => r.name === WAIT).buckets
    assert.equal(bounds.length, 27)
    assert.deepEqual(
      buckets.map((s) => (s.labels.le === '+Inf' ? Infinity : Number(s.labels.le))),
      [...bounds, Infinity],
    )
    assert.equal(bounds[0], 1024e-9)
    assert.equal(value(f, WAIT, `${WAIT}_count`, { key: 'llm' }), 0)

    for (const p of [a, b, c, d, k, k2]) p.release()
    const f2 = await ep.scrape()
    assert.equal(value(f2, IF, IF, total(IF, 'db', { dimension: 'calls' })), 0)
    handle.close()
    assert.equal(await register.metrics(), '\n')
  })

  test('one collection reads each source once; a registry’s evicted key is gone from the next', async (t) => {
    const register = new client.Registry()
    const bh = new Bulkhead({ maxConcurrent: 2 })
    const reg = new Registry({ maxConcurrent: 1, maxKeys: 2 })
    let reads = 0
    const orig = bh._metricSamples
    bh._metricSamples = function () {
      reads++
      return orig.call(this)
    }
    registerPrometheus({ bulkheads: new Map([['bh', bh]]), registries: { origins: reg }, register })
    const ep = await exposition(t, register)
    await ep.scrape()
    assert.equal(reads, 1, 'one read for nine families')
    reg.tryAcquire('a').release()
    reg.tryAcquire('b').release()
    let f = await ep.scrape()
    assert.equal(reads, 2)
    const keys = (fam) => new Set(fam.get('hullguard_admitted_total').samples.map((s) => s.labels.key))
    assert.deepEqual(keys(f), new Set(['bh', 'a', 'b']))
    // At maxKeys a new key evicts the least recently used idle one: its series go.
    reg.tryAcquire('c').release()
    f = await ep.scrape()
    assert.deepEqual(keys(f), new Set(['bh', 'b', 'c']))
    assert.equal(reg.size, 2)
  })

  test('a global cap: the shared admission once, its keys as classes', async (t) => {
    const register = new client.Registry()
    const reg = new Registry({ maxConcurrent: 4, maxKeys: 4, global: { limit: 3 } })
    registerPrometheus({ registries: { edge: reg }, register })
    const ep = await exposition(t, register)
    const p = await reg.acquire('a')
    const q = await reg.acquire('b')
    const r2 = await reg.acquire('b')
    const f = await ep.scrape()
    const IF = 'hullguard_in_flight'
    assert.equal(value(f, IF, IF, { key: 'edge', class: '', dimension: 'calls' }), 3)
    assert.equal(value(f, IF, IF, { key: 'edge', class: 'a', dimension: 'calls' }), 1)
    assert.equal(value(f, IF, IF, { key: 'edge', class: 'b', dimension: 'calls' }), 2)
    assert.equal(value(f, 'hullguard_limit', 'hullguard_limit', { key: 'edge', class: '', dimension: 'calls' }), 3)
    for (const x of [p, q, r2]) x.release()
  })

  test('OpenMetrics registries and the options', async () => {
    const om = new client.Registry(client.Registry.OPENMETRICS_CONTENT_TYPE)
    const bh = new Bulkhead({ maxConcurrent: 1 })
    const reg = registerPrometheus({ bulkheads: { bh }, register: om, client })
    assert.equal(reg.register, om)
    const text = await om.metrics()
    assert.match(text, /^# TYPE hullguard_admitted counter$/m)
    assert.match(text, /^hullguard_admitted_total\{key="bh"\} 0$/m)
    assert.match(text, /^hullguard_queue_wait_seconds_bucket\{key="bh",le="\+Inf"\} 0$/m)
    assert.match(text, /# EOF\n$/)
    // close() after an OpenMetrics scrape (which renames counters in place) removes them all,
    // and the set registers again (review finding).
    reg.close()
    assert.deepEqual(om.getMetricsAsArray().map((m) => m.name), [])
    registerPrometheus({ bulkheads: { bh }, register: om, client }).close()
    // Registered twice in one registry: prom-client refuses, and nothing is left half-registered.
    const r = new client.Registry()
    registerPrometheus({ bulkheads: { bh }, register: r })
    assert.throws(() => registerPrometheus({ bulkheads: { bh }, register: r }), /already been registered/)
    assert.equal(r.getMetricsAsArray().length, TABLE.length)
    const bad = (o, re) => assert.throws(() => registerPrometheus(o), re)
    bad(undefined, TypeError)
    bad({ bulkheads: { bh }, regsitries: [] }, /unknown option "regsitries"/)
    bad({ bulkheads: [bh] }, /bulkheads must be an object or a Map/)
    bad({ bulkheads: { x: {} } }, /bulkheads\["x"\] must be a hullguard Bulkhead/)
    bad({ registries: 5 }, /registries must be/)
    bad({ registries: [bh] }, /registries must hold hullguard Registries/)
    assert.throws(() => registerOpenTelemetry({ meter: {} }), /meter must be an OpenTelemetry Meter/)
    assert.deepEqual(Object.keys(metricsModule).sort(), ['metricTable', 'registerOpenTelemetry', 'registerPrometheus'])
    assert.deepEqual(metricTable().map((r) => r.name), NAMES)
    assert.ok(Object.isFrozen(metricTable()[0]))
  })
})

/**
 * A bulkhead on a virtual clock; with `mock`, node:test's mock timers too (the facade's queue
 * timers), and `advance` moves both. Without (the OpenTelemetry SDK's export runs on real
 * timers), no queue timer may come due in the test.
 */
function virtual(t, opts, mock = true) {
  if (mock) t.mock.timers.enable({ apis: ['setTimeout'] })
  const clock = new VirtualClock()
  setNow(() => clock.nowMs())
  t.after(() => {
    setNow(undefined)
    if (mock) t.mock.timers.reset()
  })
  return {
    bh: new Bulkhead({ ...opts, [kClock]: clock }),
    async advance(ms) {
      clock.advance(ms)
      if (mock) t.mock.timers.tick(ms)
      await turns(3)
    },
  }
}

test('C35: queue-wait metrics', async (t) => {
  // C35 (queue-wait times come out wrong): L=1, Q=10 on the virtual clock. H holds 0–100 ms;
  // W1 enqueues at 10 ms (released at 200 ms); W2 enqueues at 20 ms with a 50 ms timeout; W3
  // acquires at 300 ms with a free permit (released at 350 ms). Scraped from the real endpoint:
  // after step 1 `_count` 1 and `_sum` 0.09; steps 2 and 3 leave them; `hullguard_queued`
  // equals the live waiters at every sample (1, 2, 1, 0).
  const v = virtual(t, { maxConcurrent: 1, maxQueue: 10, queueTimeoutMs: 60_000 })
  const { bh } = v
  const register = new client.Registry()
  registerPrometheus({ bulkheads: { c35: bh }, register })
  const ep = await exposition(t, register)
  const queued = []
  const sample = async () => {
    const f = await ep.scrape()
    const q = value(f, 'hullguard_queued', 'hullguard_queued', { key: 'c35', class: '' })
    assert.equal(q, bh.stats().queued, 'the gauge is the live waiters')
    queued.push(q)
    return {
      count: value(f, WAIT, `${WAIT}_count`, { key: 'c35' }),
      sum: value(f, WAIT, `${WAIT}_sum`, { key: 'c35' }),
      bucket: (le) => value(f, WAIT, `${WAIT}_bucket`, { key: 'c35', le }),
    }
  }

  const h = await bh.acquire() // t=0
  await v.advance(10)
  const w1 = track(bh.acquire()) // t=10
  await turns(2)
  await sample()
  await v.advance(10)
  const w2 = track(bh.acquire({ queueTimeoutMs: 50 })) // t=20
  await turns(2)
  await sample()
  await v.advance(50) // t=70: W2 times out; its wait is no granted wait
  assert.equal(w2.state, 'rejected')
  assert.equal(w2.error.reason, 'timeout')
  let m = await sample()
  assert.deepEqual([m.count, m.sum], [0, 0])
  await v.advance(30) // t=100: H releases; W1 is granted after exactly 90 ms
  h.release()
  await turns(2)
  assert.equal(w1.state, 'fulfilled')
  m = await sample()
  assert.deepEqual(queued, [1, 2, 1, 0], 'step 5: the gauge equals the live waiters at every sample')
  assert.equal(m.count, 1)
  assert.equal(m.sum, 0.09)
  // 90 ms lies in [2^26, 2^27) ns: below le 0.134217728, above le 0.067108864.
  assert.equal(m.bucket('0.067108864'), 0)
  assert.equal(m.bucket('0.134217728'), 1)
  assert.equal(m.bucket('+Inf'), 1)
  await v.advance(100) // t=200
  w1.value.release()
  await v.advance(100) // t=300: step 3, admitted at once
  const w3 = await bh.acquire()
  await v.advance(50)
  w3.release()
  m = await sample()
  assert.deepEqual([m.count, m.sum], [1, 0.09], 'steps 2 and 3 leave the wait metrics')
  const s = bh.stats()
  assert.deepEqual([s.queueWaitCount, s.queueWaitSumNs, s.queueWaitMaxNs], [1, 90_000_000, 90_000_000])
})

describe('OpenTelemetry binding', () => {
  /** A MeterProvider read through the SDK's in-memory exporter: `collect()` → metrics by name. */
  function otel(t) {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 })
    const provider = new MeterProvider({ readers: [reader] })
    t.after(() => provider.shutdown())
    return {
      meter: provider.getMeter('hullguard-test'),
      async collect() {
        exporter.reset()
        await reader.forceFlush()
        const rm = exporter.getMetrics()
        assert.equal(rm.length, 1)
        const out = new Map()
        for (const sm of rm[0].scopeMetrics) for (const md of sm.metrics) out.set(md.descriptor.name, md)
        return out
      },
    }
  }
  const point = (md, attrs) => md.dataPoints.find((p) => JSON.stringify(Object.entries(p.attributes).sort()) === JSON.stringify(Object.entries(attrs).sort()))

  test('observable gauges and counters, and the wait histogram with the core’s counts and sum', async (t) => {
    const o = otel(t)
    const v = virtual(t, { maxConcurrent: 1, maxQueue: 10, queueTimeoutMs: Infinity }, false)
    const { bh } = v
    const handle = registerOpenTelemetry({ meter: o.meter, bulkheads: { w: bh } })
    // Waits of 30 ms and 90 ms (the first collection), then of 2 ms and 5 s.
    const wait = async (ms) => {
      const h = await bh.acquire()
      const w = track(bh.acquire())
      await turns(2)
      await v.advance(ms)
      h.release()
      await turns(2)
      w.value.release()
    }
    await wait(30)
    await wait(90)
    const held = await bh.acquire()
    let m = await o.collect()
    for (const row of TABLE) {
      const md = m.get(row.name)
      if (row.name === 'hullguard_circuit_state' || row.name === 'hullguard_budget_in_use') {
        assert.equal(md?.dataPoints.length ?? 0, 0, `${row.name}: no breaker, no budget`)
        continue
      }
      assert.ok(md, row.name)
      assert.equal(md.descriptor.description, row.help)
      assert.equal(md.descriptor.unit, row.unit === 'seconds' ? 's' : '')
    }
    assert.equal(m.get('hullguard_in_flight').dataPointType, DataPointType.GAUGE)
    assert.equal(point(m.get('hullguard_in_flight'), { key: 'w', class: '', dimension: 'calls' }).value, 1)
    const adm = m.get('hullguard_admitted_total')
    assert.equal(adm.dataPointType, DataPointType.SUM)
    assert.equal(adm.isMonotonic, true)
    assert.equal(point(adm, { key: 'w' }).value, 5)
    assert.equal(m.get('hullguard_rejected_total').dataPoints.length, REASONS.length)
    const hist = () => {
      const md = m.get(WAIT)
      assert.equal(md.dataPointType, DataPointType.HISTOGRAM)
      const p = point(md, { key: 'w' })
      return p.value
    }
    const core = () => {
      const s = bh.stats()
      const counts = Object.values(s.queueWaitHistogram)
      return { counts, sum: s.queueWaitSumNs / 1e9, count: s.queueWaitCount }
    }
    let hv = hist()
    assert.deepEqual(hv.buckets.boundaries, TABLE.find((r) => r.name === WAIT).buckets)
    assert.deepEqual(hv.buckets.counts, core().counts)
    assert.equal(hv.count, 2)
    assert.ok(Math.abs(hv.sum - 0.12) < 1e-9, `sum ${hv.sum}`)
    held.release()
    await wait(2)
    await wait(5_000)
    // A second collection: cumulative, still exactly the core's.
    m = await o.collect()
    hv = hist()
    const c = core()
    assert.deepEqual(hv.buckets.counts, c.counts)
    assert.equal(hv.count, 4)
    assert.ok(Math.abs(hv.sum - c.sum) < 1e-9, `sum ${hv.sum} vs ${c.sum}`)
    assert.ok(Math.abs(c.sum - 5.122) < 1e-9)
    // A collection with nothing new records nothing.
    m = await o.collect()
    assert.equal(hist().count, 4)
    // close() removes the callback: the sources are read no more.
    handle.close()
    let reads = 0
    bh._metricSamples = () => {
      reads++
      return []
    }
    await o.collect()
    assert.equal(reads, 0)
  })

  test('registry keys and classes as attributes', async (t) => {
    const o = otel(t)
    const reg = new Registry({ maxConcurrent: 2 })
    const bh = new Bulkhead({ maxConcurrent: 4, classes: [{ name: 'gold', priority: 1 }, { name: 'tin' }] })
    registerOpenTelemetry({ meter: o.meter, registries: [reg], bulkheads: { gw: bh } })
    const p = await reg.acquire('k1')
    const q = await bh.acquire({ admissionClass: 'gold' })
    const m = await o.collect()
    const md = m.get('hullguard_in_flight')
    assert.equal(point(md, { key: 'k1', class: '', dimension: 'calls' }).value, 1)
    assert.equal(point(md, { key: 'gw', class: 'gold', dimension: 'calls' }).value, 1)
    assert.equal(point(md, { key: 'gw', class: 'tin', dimension: 'calls' }).value, 0)
    p.release()
    q.release()
  })
})
