// Both entries work: `import` (index.mjs, also through the package's own `exports`) and
// `require` (index.js), and they hand out the very same objects.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

import hullguard, {
  Bulkhead,
  BulkheadError,
  MAX_PERMITS,
  MAX_QUEUE,
  Permit,
  REASONS,
  Registry,
  originKey,
  withDeadline,
  withDeadlineAt,
  currentDeadline,
  remainingMs,
} from '../index.mjs'

const require = createRequire(import.meta.url)

test('import and require give the same objects', () => {
  const cjs = require('../index.js')
  assert.equal(hullguard, cjs)
  assert.equal(Bulkhead, cjs.Bulkhead)
  assert.equal(Registry, cjs.Registry)
  assert.equal(Permit, cjs.Permit)
  assert.equal(BulkheadError, cjs.BulkheadError)
  assert.equal(originKey, cjs.originKey)
  assert.equal(MAX_PERMITS, cjs.MAX_PERMITS)
  assert.equal(MAX_QUEUE, cjs.MAX_QUEUE)
  assert.equal(REASONS, cjs.REASONS)
  assert.equal(withDeadline, cjs.withDeadline)
  assert.equal(withDeadlineAt, cjs.withDeadlineAt)
  assert.equal(currentDeadline, cjs.currentDeadline)
  assert.equal(remainingMs, cjs.remainingMs)
})

test('the package name resolves through `exports` for import and require', async () => {
  const esm = await import('hullguard')
  assert.equal(esm.Bulkhead, Bulkhead)
  assert.equal(esm.default, hullguard)
  assert.equal(require('hullguard'), hullguard)
  assert.equal(require.resolve('hullguard'), require.resolve('../index.js'))
  assert.ok(require('hullguard/package.json').exports['.'].types)
})

test('the ESM entry works end to end', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1, maxQueue: 0 })
  const p = await bh.acquire()
  assert.ok(p instanceof Permit)
  await assert.rejects(bh.run(() => 1), (e) => e instanceof BulkheadError && e.reason === 'concurrency_limit')
  p.release()
  assert.equal(await bh.run(async () => 'esm'), 'esm')
  const reg = new Registry()
  assert.equal(await reg.run(originKey('https://Example.com/'), () => 1), 1)
  assert.deepEqual(Object.keys(reg.stats()), ['https://example.com:443'])
})
