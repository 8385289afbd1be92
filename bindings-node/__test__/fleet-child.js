'use strict'
// A process of fleet.test.js (not a test file). argv[2] is `{kind, port, options, workers,
// oracle, mode}` as JSON.
//
// mode 'busy' (the fair-share test): opens one FleetBulkhead with a client of `kind` ('ioredis'
// | 'node-redis'), runs `workers` loops of acquire → INCR `oracle` (the fleet-wide count in
// flight, kept by Redis: one atomic counter every process shares) → 2 ms → DECR → release, and
// obeys its parent over IPC: `stats` → `{lease, peak}` (peak: the highest count its INCRs
// saw); `stop` → stops, closes, replies `{peak}`, exits 0.
//
// mode 'exit' (the liveness test): opens a FleetBulkhead, acquires and releases once, then
// `close()`s it (unless options.noClose) and quits the client; it must then exit by itself.

const { FleetBulkhead } = require('../index.js')

const { kind, port, options, workers, oracle, mode, noClose } = JSON.parse(process.argv[2])

async function connect() {
  if (kind === 'ioredis') {
    const IORedis = require('ioredis')
    const c = new IORedis({ host: '127.0.0.1', port, retryStrategy: () => 50 })
    c.on('error', () => {})
    return { client: c, cmd: (...a) => c.call(...a), quit: () => c.quit() }
  }
  const c = require('redis').createClient({ url: `redis://127.0.0.1:${port}` })
  c.on('error', () => {})
  await c.connect()
  return { client: c, cmd: (...a) => c.sendCommand(a.map(String)), quit: () => c.close?.() ?? c.quit() }
}

async function busy() {
  const { client, cmd, quit } = await connect()
  const fleet = new FleetBulkhead(client, options)
  let peak = 0
  let stopping = false
  const loop = async () => {
    while (!stopping) {
      let permit
      try {
        permit = await fleet.acquire({ queueTimeoutMs: 200 })
      } catch {
        continue
      }
      const n = Number(await cmd('INCR', oracle))
      peak = Math.max(peak, n)
      await new Promise((r) => setTimeout(r, 2))
      await cmd('DECR', oracle)
      permit.release()
    }
  }
  const loops = Array.from({ length: workers }, loop)
  process.on('message', async (m) => {
    if (m.op === 'stats') process.send({ id: m.id, lease: fleet.stats().lease, peak })
    if (m.op === 'stop') {
      stopping = true
      await Promise.all(loops)
      await fleet.close()
      await quit()
      process.send({ id: m.id, peak })
      process.disconnect()
    }
  })
  process.send({ ready: true })
}

async function exit() {
  const { client, quit } = await connect()
  const fleet = new FleetBulkhead(client, options)
  const p = await fleet.acquire()
  p.release()
  if (!noClose) await fleet.close()
  await quit()
  process.send?.({ done: true })
  process.disconnect?.()
}

;(mode === 'exit' ? exit() : busy()).catch((e) => {
  console.error(e)
  process.exit(1)
})
