'use strict'
// Shared helpers of the node:test suites (not a test file: `node --test __test__/` only runs
// `*.test.{js,mjs}`).

const assert = require('node:assert/strict')

/** One macrotask turn (setImmediate): every pending microtask has run when it resolves. */
const turn = () => new Promise((resolve) => setImmediate(resolve))

/** `n` macrotask turns. */
async function turns(n) {
  for (let i = 0; i < n; i++) await turn()
}

/** A promise plus its settle functions. */
function deferred() {
  let resolve, reject
  const promise = new Promise((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/**
 * Tracks a promise without awaiting it: `t.state` is 'pending' | 'fulfilled' | 'rejected',
 * `t.value` / `t.error` the outcome, `t.settledCount` how many times a handler ran (must be ≤ 1).
 */
function track(promise) {
  const t = { state: 'pending', value: undefined, error: undefined, settledCount: 0, promise }
  promise.then(
    (v) => {
      t.settledCount++
      t.state = 'fulfilled'
      t.value = v
    },
    (e) => {
      t.settledCount++
      t.state = 'rejected'
      t.error = e
    },
  )
  return t
}

/** I2 and I5-style checks on a stats object. */
function assertConserved(s, msg = '') {
  assert.equal(s.available + s.active + s.grantedUnclaimed, s.limit, `I2 ${msg} ${JSON.stringify(s)}`)
}

function assertIdle(s, msg = '') {
  assertConserved(s, msg)
  assert.equal(s.active, 0, `active ${msg}`)
  assert.equal(s.queued, 0, `queued ${msg}`)
  assert.equal(s.grantedUnclaimed, 0, `grantedUnclaimed ${msg}`)
  assert.equal(s.available, s.limit, `available ${msg}`)
}

/**
 * Wraps every method and accessor of a native class prototype with a counter. Returns
 * `{calls, restore}`: `calls` is the list of names called (`'get x'` for getters); pass the
 * `calls` of another spy to count several classes in one list.
 */
/**
 * Records the facade's calls of the hot entry points (`fastTake`, …: plain functions, not
 * methods) into `calls`; `restore()` puts them back.
 */
function spyFast(calls = []) {
  const { fast } = require('../index.js').__test
  const saved = { ...fast }
  for (const [name, orig] of Object.entries(saved)) {
    fast[name] = (...args) => {
      calls.push(name)
      return orig(...args)
    }
  }
  return {
    calls,
    restore() {
      Object.assign(fast, saved)
    },
  }
}

function spyPrototype(proto, calls = []) {
  const saved = []
  for (const name of Object.getOwnPropertyNames(proto)) {
    if (name === 'constructor') continue
    const d = Object.getOwnPropertyDescriptor(proto, name)
    saved.push([name, d])
    if (typeof d.value === 'function') {
      const orig = d.value
      Object.defineProperty(proto, name, {
        ...d,
        value: function (...args) {
          calls.push(name)
          return orig.apply(this, args)
        },
      })
    } else if (typeof d.get === 'function') {
      const get = d.get
      Object.defineProperty(proto, name, {
        ...d,
        get() {
          calls.push(`get ${name}`)
          return get.call(this)
        },
      })
    }
  }
  return {
    calls,
    restore() {
      for (const [name, d] of saved) Object.defineProperty(proto, name, d)
    },
  }
}

const STATS_KEYS = [
  'active',
  'queued',
  'grantedUnclaimed',
  'limit',
  'maxConcurrent',
  'available',
  'admittedTotal',
  'rejectedByReason',
  'releasedTwiceTotal',
  'leakedTotal',
  'orphanedInFlight',
  'orphanedTotal',
  'ringFree',
  'queueWaitCount',
  'queueWaitSumNs',
  'queueWaitMaxNs',
  'queueWaitHistogram',
  'revision',
  'observe',
  'observedByReason',
  'observerPanics',
  'reservationsHeld',
  'reservationsExpiredTotal',
  'adaptive',
  'circuit',
  'budget',
  'load',
]

/**
 * Runs `node script ...args` (a demo), killed after `killMs`: `{code, out, err}`. Shared by the
 * demo smokes (demo, llm-demo, deadline-demo).
 */
function runScript(script, args, killMs = 45_000) {
  const { spawn } = require('node:child_process')
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), killMs)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, out, err })
    })
  })
}

module.exports = { turn, turns, deferred, track, assertConserved, assertIdle, spyPrototype, spyFast, runScript, STATS_KEYS }
