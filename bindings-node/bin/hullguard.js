#!/usr/bin/env node
'use strict'
// The command every hullguard package ships; the Rust crates do the work and write the text,
// so every package prints the same, and this only passes the arguments and prints what comes
// back:
//
// * `hullguard host ls | show | reap | rm` — one limit per host (docs/design.md §14.1; Linux;
//   hullguard_host::cli);
// * `hullguard fleet show POOL [--redis URL] [--json]` — a fleet pool as Redis holds it
//   (docs/design.md §16.8; hullguard_fleet::cli parses and renders). The pool is read here, with
//   ioredis or else node-redis (`redis`) — whichever the project has installed; neither is a
//   dependency of this package (HULLGUARD_REDIS_CLIENT=ioredis|redis picks one). The URL is
//   --redis, else $HULLGUARD_REDIS_URL, else redis://127.0.0.1:6379/.
//
// Exit status: 0 done, 1 failed (Redis unreachable, no Redis client installed), 2 bad usage.

const native = require('../native.js')

const args = process.argv.slice(2)

if (args[0] === 'fleet') {
  fleet(args).then(
    (status) => {
      process.exitCode = status
    },
    (e) => {
      process.stderr.write(`hullguard: ${e && e.message ? e.message : e}\n`)
      process.exitCode = 1
    },
  )
} else if (typeof native.hostCli !== 'function') {
  process.stderr.write(`hullguard: the host bulkhead needs Linux; this is ${process.platform}\n`)
  process.exitCode = 1
} else {
  const out = native.hostCli(args)
  process.stdout.write(out.stdout)
  process.stderr.write(out.stderr)
  process.exitCode = out.status
}

/** Prints `out`'s text; its status. */
function print(out) {
  process.stdout.write(out.stdout)
  process.stderr.write(out.stderr)
  return out.status
}

/** `hullguard fleet show …`: parsed by the addon, read here, rendered by the addon. */
async function fleet(args) {
  const defaultRedis = process.env.HULLGUARD_REDIS_URL || null
  const plan = native.fleetCli(args, defaultRedis)
  if (plan.status !== 0 || !plan.command) return print(plan)
  const client = await connect(plan.redis)
  let reply
  try {
    reply = await read(client, plan)
  } finally {
    await client.close()
  }
  return print(native.fleetCli(args, defaultRedis, reply))
}

/** `hg_stats`' reply: the library checked (and loaded when missing) first, as the fleet driver
 * does; where an ACL refuses `FUNCTION` (`NOPERM`), the same read as one script (`EVAL`). */
async function read(client, plan) {
  const lib = plan.library
  let version
  try {
    version = await client.send(lib.check)
  } catch {
    version = undefined
  }
  if (Number(version) !== lib.version) {
    try {
      await client.send(lib.load)
    } catch (e) {
      if (!/NOPERM/.test(e?.message ?? '')) throw e
      return client.send(plan.evalCommand)
    }
  }
  return client.send(plan.command)
}

/** Whichever Redis client the project has, loaded only now: `{send(args), close()}`. */
async function connect(url) {
  const want = process.env.HULLGUARD_REDIS_CLIENT || ''
  if (want !== '' && want !== 'ioredis' && want !== 'redis') {
    throw new Error(`HULLGUARD_REDIS_CLIENT must be ioredis or redis, not ${JSON.stringify(want)}`)
  }
  const tries = want ? [want] : ['ioredis', 'redis']
  let found = null
  for (const name of tries) {
    try {
      found = { name, mod: require(name) }
      break
    } catch (e) {
      if (e?.code !== 'MODULE_NOT_FOUND') throw e
    }
  }
  if (found === null) {
    throw new Error(
      `fleet show needs a Redis client: npm install ioredis (or redis)${want ? ` [HULLGUARD_REDIS_CLIENT=${want}]` : ''}`,
    )
  }
  if (found.name === 'ioredis') {
    const Redis = found.mod.Redis ?? found.mod.default ?? found.mod
    const c = new Redis(url, {
      lazyConnect: true,
      connectTimeout: 5000,
      commandTimeout: 5000,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
      retryStrategy: () => null,
      disconnectTimeout: 50,
    })
    // ioredis rejects a failed connect with "Connection is closed."; its 'error' event says why.
    let why = null
    c.on('error', (e) => {
      why ??= e
    })
    try {
      await c.connect()
    } catch (e) {
      c.disconnect()
      throw why ?? e
    }
    return {
      send: (a) => c.call(...a),
      close: async () => c.disconnect(),
    }
  }
  const c = found.mod.createClient({ url, socket: { connectTimeout: 5000, reconnectStrategy: false } })
  c.on('error', () => {})
  await c.connect()
  return {
    send: (a) => c.sendCommand(a),
    close: async () => {
      if (typeof c.destroy === 'function') c.destroy()
      else await c.disconnect()
    },
  }
}
