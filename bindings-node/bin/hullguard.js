#!/usr/bin/env node
'use strict'
// `hullguard host ls | show | reap | rm` (one limit per host, docs/design.md §14.1): the
// command every hullguard package ships. The Rust crate does the work and writes the text
// (hullguard_host::cli), so every package prints the same; this only passes the arguments and
// prints what comes back. Linux only.

const native = require('../native.js')

if (typeof native.hostCli !== 'function') {
  process.stderr.write(`hullguard: the host bulkhead needs Linux; this is ${process.platform}\n`)
  process.exitCode = 1
} else {
  const out = native.hostCli(process.argv.slice(2))
  process.stdout.write(out.stdout)
  process.stderr.write(out.stderr)
  process.exitCode = out.status
}
