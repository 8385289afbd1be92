'use strict'
// index.d.ts declares exactly the runtime exports of the entries (the types themselves are
// checked by `tsc --noEmit -p types-check`, see the Makefile's node-test).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')

const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')
const declared = new Set(
  [...dts.matchAll(/^export declare (?:const|function|class) ([A-Za-z_$][\w$]*)/gm)].map((m) => m[1]),
)

test('every value export of index.js is declared in index.d.ts, and nothing more', () => {
  const runtime = Object.keys(require('../index.js')).sort()
  assert.deepEqual([...declared].sort(), runtime)
})

test('every named export of index.mjs is declared in index.d.ts', async () => {
  const esm = await import('../index.mjs')
  for (const name of Object.keys(esm)) {
    if (name === 'default') continue
    assert.ok(declared.has(name), `index.mjs exports ${name}, index.d.ts does not declare it`)
  }
})

test('package.json maps types / import / require', () => {
  const pkg = require('../package.json')
  assert.deepEqual(pkg.exports['.'], { types: './index.d.ts', import: './index.mjs', require: './index.js' })
  assert.equal(pkg.types, 'index.d.ts')
  assert.ok(pkg.files.includes('index.d.ts'))
})
