'use strict'
// `fn` runs in the caller's AsyncLocalStorage context (docs/design.md, the Node binding), also after queueing —
// never in the context of whoever released the permit.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { AsyncLocalStorage } = require('node:async_hooks')

const { Bulkhead, Registry } = require('../index.js')
const { turn, turns } = require('./helpers.js')

const als = new AsyncLocalStorage()

test('fast path: fn sees the caller’s store', async () => {
  const bh = new Bulkhead()
  const seen = await als.run({ id: 'caller' }, () => bh.run(() => als.getStore()?.id))
  assert.equal(seen, 'caller')
  const after = await als.run({ id: 'async' }, () => bh.run(async () => {
    await turn()
    return als.getStore()?.id
  }))
  assert.equal(after, 'async')
})

test('queued run: fn sees the caller’s store, not the releaser’s', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1 })
  const h = await als.run({ id: 'holder' }, () => bh.acquire())
  const results = []
  const waiters = ['a', 'b', 'c'].map((id) =>
    als.run({ id }, () => bh.run(async () => {
      results.push(['start', id, als.getStore()?.id])
      await turn()
      results.push(['end', id, als.getStore()?.id])
    })),
  )
  await turns(2)
  assert.deepEqual(results, [])
  als.run({ id: 'releaser' }, () => h.release())
  await Promise.all(waiters)
  for (const [, id, store] of results) assert.equal(store, id)
  assert.deepEqual(results.filter((r) => r[0] === 'start').map((r) => r[1]), ['a', 'b', 'c'], 'FIFO')
})

test('queued acquire: the awaiting caller resumes in its own store', async () => {
  const bh = new Bulkhead({ maxConcurrent: 1 })
  const h = await bh.acquire()
  const p = als.run({ id: 'waiter' }, async () => {
    const permit = await bh.acquire()
    const id = als.getStore()?.id
    permit.release()
    return id
  })
  await turn()
  als.run({ id: 'releaser' }, () => h.release())
  assert.equal(await p, 'waiter')
})

test('registry run and rejections keep the caller’s store', async () => {
  const reg = new Registry({ maxConcurrent: 1, maxQueue: 1, queueTimeoutMs: Infinity })
  const h = await reg.acquire('k')
  const p = als.run({ id: 'reg' }, () => reg.run('k', () => als.getStore()?.id))
  const rejected = als.run({ id: 'rej' }, () =>
    reg.acquire('k').catch((e) => [e.reason, als.getStore()?.id]),
  )
  assert.deepEqual(await rejected, ['queue_limit', 'rej'])
  als.run({ id: 'other' }, () => h.release())
  assert.equal(await p, 'reg')
})
