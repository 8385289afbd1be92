'use strict'
// `hullguard fleet show POOL [--redis URL] [--json]` (bin/hullguard.js; docs/design.md §16.8)
// against a real redis-server (fleet-redis.js) where a FleetBulkhead holds a block: the table
// and the JSON name the holder and the limit, through ioredis and node-redis; the URL from
// $HULLGUARD_REDIS_URL; the library loaded on a server that lost it (or run as one script where
// an ACL forbids FUNCTION); bad usage exits 2; Redis unreachable, or neither client installed,
// exits 1 with a message. The command runs as a child process (spawned, so this process's
// driver keeps renewing the lease meanwhile).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { once } = require('node:events')

const { FleetBulkhead } = require('../index.js')
const { startRedis, ioredis, eventually } = require('./fleet-redis.js')

const BIN = path.join(__dirname, '..', 'bin', 'hullguard.js')

/** Runs `node <args>` (at most 20 s): `{status, stdout, stderr}`. */
async function node(args, env = {}) {
  const p = spawn(process.execPath, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, HULLGUARD_REDIS_URL: '', HULLGUARD_REDIS_CLIENT: '', ...env },
  })
  let stdout = ''
  let stderr = ''
  p.stdout.on('data', (d) => (stdout += d))
  p.stderr.on('data', (d) => (stderr += d))
  const timer = setTimeout(() => p.kill('SIGKILL'), 20_000)
  const [status] = await once(p, 'exit')
  clearTimeout(timer)
  return { status, stdout, stderr }
}

/** `hullguard <args>`. */
const hullguard = (args, env) => node([BIN, ...args], env)

/** A pool `pool` (limit 7) on `server` with one holder holding a block: `{f, holder}`. */
async function held(t, server, pool) {
  const c = await ioredis(t, server)
  const f = new FleetBulkhead(c, { pool, maxConcurrent: 7, leaseTtlMs: 5000 })
  t.after(() => f.close())
  const p = await f.acquire({ queueTimeoutMs: 10_000 })
  t.after(() => p.release())
  await eventually('a block', () => f.stats().lease.held > 0)
  return { f, holder: f.holder }
}

test('fleet show: the table and the JSON name the holder and the limit (ioredis, node-redis)', async (t) => {
  const server = await startRedis(t)
  if (server === null) return
  const { holder } = await held(t, server, 'cli')
  for (const client of ['ioredis', 'redis']) {
    const env = { HULLGUARD_REDIS_CLIENT: client }
    let r = await hullguard(['fleet', 'show', 'cli', '--redis', server.url], env)
    assert.equal(r.status, 0, `${client}: ${r.stderr}`)
    assert.match(r.stdout, /^pool cli: limit 7 \(rev \d+\), used [1-7], wanted \d+, 1 holder\n/, client)
    const row = r.stdout.split('\n').find((l) => l.includes(holder))
    assert.ok(row, `${client}: no row for ${holder}:\n${r.stdout}`)
    r = await hullguard(['fleet', 'show', 'cli', '--json', '--redis', server.url], env)
    assert.equal(r.status, 0, `${client}: ${r.stderr}`)
    const j = JSON.parse(r.stdout)
    assert.equal(j.pool, 'cli')
    assert.equal(j.exists, true)
    assert.equal(j.limit, 7)
    assert.equal(j.holders.length, 1)
    assert.equal(j.holders[0].holder, holder)
    assert.ok(j.holders[0].held >= 1 && j.holders[0].held <= 7, r.stdout)
    assert.ok(j.holders[0].expires_in_ms > 0 && j.holders[0].expires_in_ms <= 5000, r.stdout)
  }
  // The URL from the environment; a pool nobody opened.
  const r = await hullguard(['fleet', 'show', 'nobody', '--json'], { HULLGUARD_REDIS_URL: server.url })
  assert.equal(r.status, 0, r.stderr)
  const { exists, limit, holders } = JSON.parse(r.stdout)
  assert.deepEqual({ exists, limit, holders }, { exists: false, limit: null, holders: [] })
})

test('fleet show loads the library on a server that has none; under an ACL without FUNCTION it runs as a script', async (t) => {
  const server = await startRedis(t)
  if (server === null) return
  const c = await ioredis(t, server)
  await c.call('FUNCTION', 'FLUSH')
  const r = await hullguard(['fleet', 'show', 'fresh', '--redis', server.url])
  assert.equal(r.status, 0, r.stderr)
  assert.match(r.stdout, /^pool fresh: no such pool in this Redis/)
  assert.match(await c.call('FUNCTION', 'LIST', 'LIBRARYNAME', 'hullguard').then(String), /hullguard/)
  // An ACL that forbids FUNCTION: the same read as one script (EVAL), as the driver does.
  await c.call('FUNCTION', 'FLUSH')
  await c.call('ACL', 'SETUSER', 'ro', 'on', '>pw', '~*', '&*', '+@all', '-function', '-fcall', '-fcall_ro')
  for (const client of ['ioredis', 'redis']) {
    const url = `redis://ro:pw@127.0.0.1:${server.port}/`
    const r = await hullguard(['fleet', 'show', 'fresh', '--redis', url], { HULLGUARD_REDIS_CLIENT: client })
    assert.equal(r.status, 0, `${client}: ${r.stderr}`)
    assert.match(r.stdout, /^pool fresh: no such pool in this Redis/, client)
  }
  assert.deepEqual(await c.call('FUNCTION', 'LIST'), [])
})

test('fleet show: bad usage exits 2 with the usage; Redis unreachable exits 1', async (t) => {
  const bad = [['fleet'], ['fleet', 'show'], ['fleet', 'show', 'a{b}'], ['fleet', 'show', 'x', '--nope'], ['fleet', 'ls']]
  const runs = await Promise.all(bad.map((args) => hullguard(args)))
  for (const [i, r] of runs.entries()) {
    const args = bad[i].join(' ')
    assert.equal(r.status, 2, `${args}: ${r.stderr}`)
    assert.equal(r.stdout, '')
    assert.match(r.stderr, /^hullguard: .*\nusage: hullguard fleet show POOL/, args)
  }
  for (const client of ['ioredis', 'redis']) {
    const r = await hullguard(['fleet', 'show', 'x', '--redis', 'redis://127.0.0.1:1/'], { HULLGUARD_REDIS_CLIENT: client })
    assert.equal(r.status, 1, client)
    assert.match(r.stderr, /^hullguard: .*ECONNREFUSED/, client)
  }
  const r = await hullguard(['fleet', 'show', 'x'], { HULLGUARD_REDIS_CLIENT: 'valkey' })
  assert.equal(r.status, 1)
  assert.match(r.stderr, /HULLGUARD_REDIS_CLIENT must be ioredis or redis/)
})

test('fleet show without ioredis or redis installed says so and exits 1', async (t) => {
  // Neither client resolvable (as in a project that has neither): the command is required
  // after hiding them.
  const hide = `
    const Module = require('node:module')
    const resolve = Module._resolveFilename
    Module._resolveFilename = function (request, ...rest) {
      if (request === 'ioredis' || request === 'redis') {
        const e = new Error("Cannot find module '" + request + "'")
        e.code = 'MODULE_NOT_FOUND'
        throw e
      }
      return resolve.call(this, request, ...rest)
    }
    process.argv = [process.argv[0], ${JSON.stringify(BIN)}, 'fleet', 'show', 'x']
    require(${JSON.stringify(BIN)})
  `
  const r = await node(['-e', hide])
  assert.equal(r.status, 1, r.stderr)
  assert.match(r.stderr, /^hullguard: fleet show needs a Redis client: npm install ioredis \(or redis\)\n$/)
})
