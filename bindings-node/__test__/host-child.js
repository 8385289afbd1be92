'use strict'
// A process of host.test.js (not a test file): opens one HostBulkhead — argv[2] is
// `{name, options}` as JSON — reports `{ready, pid, slot}`, then obeys its parent over IPC
// (child_process.fork or a cluster worker): `{op, id, ...}` → `{id, ok, ...}`.
//   acquire {opts}  → {ok: true, ms} once granted (ms: time waited), or {ok: false, code, reason}
//   try             → {ok: true, got: boolean}
//   release         → releases the last permit held
//   stats           → {stats}
//   exit            → exits 0 (permits still held are the process's to lose)

const { HostBulkhead } = require('../index.js')

const { name, options } = JSON.parse(process.argv[2])
const hb = new HostBulkhead(name, options)
const held = []

process.on('message', async (m) => {
  const reply = (r) => process.send({ id: m.id, ...r })
  switch (m.op) {
    case 'acquire': {
      const t0 = performance.now()
      try {
        held.push(await hb.acquire(m.opts))
        reply({ ok: true, ms: performance.now() - t0 })
      } catch (e) {
        reply({ ok: false, code: e.code, reason: e.reason, message: String(e.message) })
      }
      break
    }
    case 'try': {
      const p = hb.tryAcquire()
      if (p !== null) held.push(p)
      reply({ ok: true, got: p !== null })
      break
    }
    case 'release':
      held.pop()?.release()
      reply({ ok: true })
      break
    case 'stats':
      reply({ ok: true, stats: hb.stats() })
      break
    case 'exit':
      process.exit(0)
  }
})

process.send({ ready: true, pid: process.pid, slot: hb.slot })
