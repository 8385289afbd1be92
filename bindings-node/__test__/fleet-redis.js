'use strict'
// The fleet tests' fixture (not a test file): a real `redis-server` on a free loopback port, in
// a temp dir of its own (`--save '' --appendonly no`), SIGKILLed and reaped after the test; and
// the two clients a Node user has, ioredis and node-redis, connected to it. Without
// redis-server the tests fail with a message saying so, unless HG_SKIP_REDIS=1 (then skipped).

const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { spawn, spawnSync } = require('node:child_process')

const REDIS_SERVER = process.env.HG_REDIS_SERVER || 'redis-server'

/** Whether redis-server runs here (checked once). */
let available
function redisAvailable() {
  available ??= spawnSync(REDIS_SERVER, ['--version'], { stdio: 'ignore' }).status === 0
  return available
}

/** Every server started and not yet reaped (killed at exit if a test died first). */
const live = new Set()
process.on('exit', () => {
  for (const s of live) {
    try {
      s.proc.kill('SIGKILL')
    } catch {}
  }
})

/** A free loopback port (bound and released: a race with other processes is unlikely). */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

/** Resolves once `PING` on `port` answers `+PONG` (polling every 10 ms, at most `ms`). */
async function pinged(port, ms, exited) {
  const end = performance.now() + ms
  for (;;) {
    const ok = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1')
      let got = ''
      s.setTimeout(500, () => s.destroy())
      s.on('connect', () => s.write('PING\r\n'))
      s.on('data', (d) => {
        got += d
        if (got.includes('\r\n')) s.end()
      })
      s.on('close', () => resolve(got.startsWith('+PONG')))
      s.on('error', () => {})
    })
    if (ok) return
    if (exited()) throw new Error(`redis-server on port ${port} exited while starting`)
    if (performance.now() > end) throw new Error(`redis-server on port ${port} did not answer PING within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

/**
 * Starts a redis-server for test `t` (killed and reaped when it ends). Returns `{port, url,
 * kill9(), restart(), stop()}`; `restart()` starts a fresh one on the same port (its state
 * empty: a restart without persistence). Skips `t` without redis-server when HG_SKIP_REDIS=1.
 */
async function startRedis(t, extra = []) {
  if (!redisAvailable()) {
    if (process.env.HG_SKIP_REDIS === '1') {
      t.skip('redis-server not found (HG_SKIP_REDIS=1)')
      return null
    }
    throw new Error(
      `${REDIS_SERVER} not found: the fleet tests need a real Redis ≥ 7.0 (\`make redis\` installs ` +
        "Debian's; HG_SKIP_REDIS=1 skips them)",
    )
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hg-fleet-redis-'))
  const port = await freePort()
  const server = { port, url: `redis://127.0.0.1:${port}`, proc: null, exited: null, log: '' }
  const launch = async () => {
    const proc = spawn(
      REDIS_SERVER,
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no', ...extra],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    )
    let dead = false
    server.proc = proc
    server.exited = new Promise((resolve) =>
      proc.once('exit', () => {
        dead = true
        resolve()
      }),
    )
    proc.stdout.on('data', (d) => (server.log += d))
    proc.stderr.on('data', (d) => (server.log += d))
    live.add(server)
    try {
      await pinged(port, 10_000, () => dead)
    } catch (e) {
      e.message += `\n${server.log}`
      throw e
    }
  }
  server.kill9 = async () => {
    if (server.proc === null) return
    server.proc.kill('SIGKILL')
    await server.exited
    live.delete(server)
    server.proc = null
  }
  server.restart = async () => {
    await server.kill9()
    await launch()
  }
  server.stop = async () => {
    await server.kill9()
    fs.rmSync(dir, { recursive: true, force: true })
  }
  await launch()
  t.after(() => server.stop())
  return server
}

/**
 * A Redis Cluster of `n` (≥ 3) primaries for test `t`: cluster-enabled servers (each bus port
 * chosen free too) joined with `redis-cli --cluster create`, once every node reports
 * `cluster_state:ok`. Returns the servers (`null` when skipped).
 */
async function startCluster(t, n = 3) {
  const nodes = []
  for (let i = 0; i < n; i++) {
    const bus = await freePort()
    const extra = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000', '--cluster-port', String(bus)]
    const node = await startRedis(t, extra)
    if (node === null) return null
    nodes.push(node)
  }
  const addrs = nodes.map((s) => `127.0.0.1:${s.port}`)
  const out = spawnSync('redis-cli', ['--cluster', 'create', ...addrs, '--cluster-replicas', '0', '--cluster-yes'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  if (out.status !== 0) throw new Error(`redis-cli --cluster create failed (${out.status}):\n${out.stdout}\n${out.stderr}`)
  for (const node of nodes) {
    await eventually(`node ${node.port} cluster_state:ok`, () => {
      const info = spawnSync('redis-cli', ['-p', String(node.port), 'CLUSTER', 'INFO'], { encoding: 'utf8' })
      return /cluster_state:ok/.test(info.stdout)
    })
  }
  return nodes
}

/** An ioredis client of `server` (reconnecting every 50 ms), quit when `t` ends. */
function ioredis(t, server, options = {}) {
  const IORedis = require('ioredis')
  const c = new IORedis({ host: '127.0.0.1', port: server.port, retryStrategy: () => 50, ...options })
  c.on('error', () => {})
  t.after(() => c.disconnect())
  return c
}

/**
 * A connected node-redis client of `server` (`module`: `'redis'`, the current major, or
 * `'redis4'`, v4), reconnecting every 50 ms; closed when `t` ends.
 */
async function nodeRedis(t, server, module = 'redis') {
  const c = require(module).createClient({ url: server.url, socket: { reconnectStrategy: () => 50 } })
  c.on('error', () => {})
  await c.connect()
  t.after(() => closeClient(c))
  return c
}

/** Closes a node-redis client of any major (v4 `disconnect`, v5+ `destroy`), at once. */
async function closeClient(c) {
  if (!c.isOpen) return
  try {
    await (typeof c.destroy === 'function' ? c.destroy() : c.disconnect())
  } catch {}
}

/** A client of `kind` (`'ioredis'` | `'node-redis'` | `'redis4'`). */
function client(t, server, kind) {
  if (kind === 'ioredis') return ioredis(t, server)
  return nodeRedis(t, server, kind === 'redis4' ? 'redis4' : 'redis')
}

/** Polls `f` every 5 ms until it is truthy, for at most `ms` (then fails naming `what`). */
async function eventually(what, f, ms = 10_000) {
  const end = performance.now() + ms
  for (;;) {
    const v = await f()
    if (v) return v
    if (performance.now() > end) throw new Error(`not within ${ms} ms: ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

module.exports = { startRedis, startCluster, ioredis, nodeRedis, client, closeClient, eventually, freePort }
