'use strict'
// A strict parser of the Prometheus text exposition format 0.0.4 for the metrics tests (not a
// test file). npm's one parser, parse-prometheus-text-format 1.1.1, drops the labels, `_sum`
// and `_count` of a labelled histogram (and merges the series of two keys), so the tests parse
// with this one, which refuses anything the format does not allow:
// - `# HELP name text` and `# TYPE name type` once per family, before its samples; a family's
//   samples contiguous; every sample of a declared family (`name`, or for a histogram
//   `name_bucket` with `le`, `name_sum`, `name_count`);
// - metric and label names by the format's grammar, label values quoted with the three escapes
//   (`\\`, `\"`, `\n`), no duplicate label in a sample, no duplicate series;
// - values as Go's ParseFloat reads them (`+Inf`, `-Inf`, `NaN`), no timestamps here;
// - a histogram's buckets per series: increasing `le`, non-decreasing counts, a `+Inf` bucket
//   equal to `_count`, `_sum` and `_count` present.
// Returns Map(family → {name, help, type, samples: [{name, labels, value}]}).

const METRIC = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped'])
const FLOAT = /^[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Inf|NaN)$/

function fail(n, line, why) {
  throw new Error(`exposition line ${n}: ${why}: ${JSON.stringify(line)}`)
}

function parseValue(s, n, line) {
  if (!FLOAT.test(s)) fail(n, line, `bad value ${JSON.stringify(s)}`)
  if (s.endsWith('Inf')) return s.startsWith('-') ? -Infinity : Infinity
  return s === 'NaN' ? NaN : Number(s)
}

/** `{a="x",b="y"}` at `s[i]` → [labels, index after `}`]. */
function parseLabels(s, i, n, line) {
  const labels = {}
  i++ // '{'
  for (;;) {
    if (s[i] === '}') return [labels, i + 1]
    const eq = s.indexOf('=', i)
    if (eq === -1) fail(n, line, 'label without =')
    const name = s.slice(i, eq)
    if (!LABEL.test(name)) fail(n, line, `bad label name ${JSON.stringify(name)}`)
    if (name in labels) fail(n, line, `duplicate label ${name}`)
    if (s[eq + 1] !== '"') fail(n, line, 'unquoted label value')
    let v = ''
    let j = eq + 2
    for (;;) {
      const c = s[j]
      if (c === undefined) fail(n, line, 'unterminated label value')
      if (c === '"') break
      if (c === '\\') {
        const e = s[j + 1]
        if (e === '\\') v += '\\'
        else if (e === '"') v += '"'
        else if (e === 'n') v += '\n'
        else fail(n, line, `bad escape \\${e}`)
        j += 2
        continue
      }
      if (c === '\n') fail(n, line, 'newline in label value')
      v += c
      j++
    }
    labels[name] = v
    i = j + 1
    if (s[i] === ',') i++
    else if (s[i] !== '}') fail(n, line, 'expected , or } after a label')
  }
}

function parseExposition(text) {
  if (!text.endsWith('\n')) throw new Error('the exposition must end with a newline')
  const families = new Map()
  const series = new Set()
  let current = null
  const closed = new Set()
  const lines = text.split('\n')
  lines.pop()
  const familyOf = (name) => {
    if (families.has(name)) return [families.get(name), '']
    for (const suffix of ['_bucket', '_sum', '_count']) {
      if (name.endsWith(suffix)) {
        const f = families.get(name.slice(0, -suffix.length))
        if (f !== undefined && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return [f, suffix]
      }
    }
    return [undefined, '']
  }
  const enter = (f, n, line) => {
    if (current === f) return
    if (closed.has(f.name)) fail(n, line, `family ${f.name} is not contiguous`)
    if (current !== null) closed.add(current.name)
    current = f
  }
  lines.forEach((line, k) => {
    const n = k + 1
    if (line === '') return
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line)
      if (m === null) return // a plain comment
      const [, what, name, rest] = m
      if (!METRIC.test(name)) fail(n, line, 'bad metric name')
      let f = families.get(name)
      if (f === undefined) {
        f = { name, help: undefined, type: undefined, samples: [] }
        families.set(name, f)
      }
      enter(f, n, line)
      if (f.samples.length > 0) fail(n, line, `${what} after the family's samples`)
      if (what === 'HELP') {
        if (f.help !== undefined) fail(n, line, 'second HELP')
        f.help = rest.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c))
      } else {
        if (f.type !== undefined) fail(n, line, 'second TYPE')
        if (!TYPES.has(rest)) fail(n, line, `bad type ${rest}`)
        f.type = rest
      }
      return
    }
    const brace = line.indexOf('{')
    const space = line.indexOf(' ')
    let name, labels, i
    if (brace !== -1 && (space === -1 || brace < space)) {
      name = line.slice(0, brace)
      ;[labels, i] = parseLabels(line, brace, n, line)
    } else {
      name = line.slice(0, space)
      labels = {}
      i = space
    }
    if (!METRIC.test(name)) fail(n, line, 'bad metric name')
    if (line[i] !== ' ') fail(n, line, 'expected a space before the value')
    const parts = line.slice(i + 1).split(' ')
    if (parts.length !== 1) fail(n, line, 'expected exactly one value (no timestamp)')
    const value = parseValue(parts[0], n, line)
    const [f, suffix] = familyOf(name)
    if (f === undefined || f.type === undefined) fail(n, line, `sample of an undeclared family ${name}`)
    enter(f, n, line)
    if (suffix === '_bucket' && !('le' in labels)) fail(n, line, 'a bucket without le')
    if (suffix !== '_bucket' && 'le' in labels) fail(n, line, 'le outside a bucket')
    const id = name + JSON.stringify(Object.entries(labels).sort())
    if (series.has(id)) fail(n, line, 'duplicate series')
    series.add(id)
    f.samples.push({ name, labels, value })
  })
  for (const f of families.values()) {
    if (f.type === 'histogram') checkHistogram(f)
  }
  return families
}

/** A histogram's series: cumulative buckets ending in +Inf = _count, with _sum. */
function checkHistogram(f) {
  const bySeries = new Map()
  for (const s of f.samples) {
    const { le, ...rest } = s.labels
    const id = JSON.stringify(Object.entries(rest).sort())
    if (!bySeries.has(id)) bySeries.set(id, { buckets: [], sum: undefined, count: undefined })
    const e = bySeries.get(id)
    if (s.name.endsWith('_bucket')) e.buckets.push([parseValue(le, 0, le), s.value])
    else if (s.name.endsWith('_sum')) e.sum = s.value
    else e.count = s.value
  }
  for (const [id, e] of bySeries) {
    if (e.sum === undefined || e.count === undefined) throw new Error(`${f.name}${id}: no _sum or _count`)
    for (let i = 1; i < e.buckets.length; i++) {
      if (!(e.buckets[i][0] > e.buckets[i - 1][0])) throw new Error(`${f.name}${id}: le not increasing`)
      if (!(e.buckets[i][1] >= e.buckets[i - 1][1])) throw new Error(`${f.name}${id}: bucket counts decrease`)
    }
    const last = e.buckets[e.buckets.length - 1]
    if (last === undefined || last[0] !== Infinity) throw new Error(`${f.name}${id}: no +Inf bucket`)
    if (last[1] !== e.count) throw new Error(`${f.name}${id}: +Inf bucket ${last[1]} != _count ${e.count}`)
  }
}

/** The value of the one sample `name{labels…}` (labels matched exactly), or `undefined`. */
function value(families, family, name, labels) {
  const f = families.get(family)
  if (f === undefined) return undefined
  const want = JSON.stringify(Object.entries(labels).sort())
  const s = f.samples.find((x) => x.name === name && JSON.stringify(Object.entries(x.labels).sort()) === want)
  return s?.value
}

module.exports = { parseExposition, value }
