//! Fleet bulkheads of three languages on one pool (docs/design.md §16): Rust
//! (`hullguard_fleet::FleetBulkhead`), Python (`hullguard.FleetBulkhead` over a redis-py client)
//! and Node (`FleetBulkhead` over an ioredis client) worker processes share limit 10 of one pool
//! on a real `redis-server` — 2 processes (Rust + Python), 3 (Rust + Python + Node), 5 (2 Rust +
//! 2 Python + 1 Node). Each is busy (8 concurrent acquire / hold 3 ms / release loops) and
//! counts itself in and out at the oracle (a second `redis-server`, common/procs.rs) around
//! every call. The blocks converge to the fair split (5/5, 3/3/4, 2×5), the oracle never sees
//! more than 10 in flight, and once every worker has stopped (its close releases its block) the
//! pool's `used` is 0 again. Time bounds are upper bounds of 10× the target or more.
//!
//! A worker of another language is the test binary's child role re-executed (`exec`) as
//! `python -c` / `node -e` with an embedded script: same pid, same pipes, same protocol
//! (`hullguard_testkit::child`: `ready`, `stop` → `stopped <fenced>`), and it dies with the test
//! like a Rust worker (the parent-death signal survives the exec).
//!
//! Needs the Python extension (`make py-dev`) and the Node addon (`make node-build`), so it is
//! `#[ignore]`d in `make fleet-test` and run by `make fleet-mixed` with `HG_MIXED_PYTHON` (the
//! venv's python, which has redis-py) and `HG_MIXED_NODE` (the bindings-node directory, whose
//! node_modules has ioredis) set.

mod common;

use std::{collections::BTreeSet, os::unix::process::CommandExt, path::Path, time::Instant};

use common::{
    eventually,
    procs::{Fleet, SEC, stop, worker},
};
use hullguard_testkit::child::{self, Proc, Spawn};

/// The Python worker (common/procs.rs's protocol): threads over a sync redis-py client.
const PY: &str = r#"
import os, sys, threading, time
import redis
import hullguard

env = os.environ
pid = str(os.getpid())
client = redis.Redis.from_url(env["HG_REDIS"], socket_timeout=1.0, socket_connect_timeout=1.0)
bh = hullguard.FleetBulkhead(
    client, env["HG_POOL"], max_concurrent=int(env["HG_LIMIT"]), lease_ttl=int(env["HG_TTL_MS"]) / 1000
)
hold = int(env["HG_HOLD_MS"]) / 1000
stopping = threading.Event()
lock = threading.Lock()
ready = []


def say(line):
    with lock:
        sys.stdout.write("\nHG:" + line + "\n")
        sys.stdout.flush()


def loop():
    oracle = redis.Redis.from_url(env["HG_ORACLE"])
    step = oracle.register_script(env["HG_ORACLE_LUA"])
    while not stopping.is_set():
        try:
            p = bh.acquire_sync(timeout=0.2)
        except hullguard.BulkheadError:
            continue
        try:
            step(keys=["inflight", "max"], args=[pid, 1])
            with lock:
                first = not ready
                ready.append(1)
            if first:
                say("ready")
            time.sleep(hold)
            step(keys=["inflight", "max"], args=[pid, -1])
        finally:
            p.release()
    oracle.close()


threads = [threading.Thread(target=loop, daemon=True) for _ in range(int(env["HG_THREADS"]))]
for t in threads:
    t.start()
for line in sys.stdin:
    if line.strip() == "stop":
        stopping.set()
        for t in threads:
            t.join()
        bh.close()
        say(f"stopped {bh.stats()['lease']['releases_fenced_total']}")
        client.close()
        sys.exit(0)
os._exit(0)  # the parent is gone
"#;

/// The Node worker (common/procs.rs's protocol): async loops over an ioredis client.
const JS: &str = r#"
const env = process.env
const { FleetBulkhead } = require(env.HG_MIXED_NODE)
const ioredis = require(require('node:path').join(env.HG_MIXED_NODE, 'node_modules', 'ioredis'))
const Redis = ioredis.Redis ?? ioredis.default ?? ioredis
const pid = String(process.pid)
const say = (line) => process.stdout.write(`\nHG:${line}\n`)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const client = new Redis(env.HG_REDIS, { maxRetriesPerRequest: 1 })
const oracle = new Redis(env.HG_ORACLE)
oracle.defineCommand('step', { numberOfKeys: 2, lua: env.HG_ORACLE_LUA })
const f = new FleetBulkhead(client, {
  pool: env.HG_POOL,
  maxConcurrent: Number(env.HG_LIMIT),
  leaseTtlMs: Number(env.HG_TTL_MS),
})
const hold = Number(env.HG_HOLD_MS)
let stopping = false
let ready = false
async function loop() {
  while (!stopping) {
    let p
    try {
      p = await f.acquire({ queueTimeoutMs: 200 })
    } catch {
      await sleep(1) // never a microtask spin
      continue
    }
    try {
      await oracle.step('inflight', 'max', pid, 1)
      if (!ready) {
        ready = true
        say('ready')
      }
      await sleep(hold)
      await oracle.step('inflight', 'max', pid, -1)
    } finally {
      p.release()
    }
  }
}
const loops = Array.from({ length: Number(env.HG_THREADS) }, loop)
const rl = require('node:readline').createInterface({ input: process.stdin })
rl.on('line', async (line) => {
  if (line.trim() !== 'stop' || stopping) return
  stopping = true
  await Promise.all(loops)
  await f.close()
  say(`stopped ${f.stats().lease.releasesFencedTotal}`)
  client.disconnect()
  oracle.disconnect()
  process.exit(0)
})
rl.on('close', () => {
  if (!stopping) process.exit(0) // the parent is gone
})
"#;

#[test]
fn child() {
    let Some(role) = child::role() else { return };
    match role.as_str() {
        "worker" => worker(),
        "python" => exec(&child::env_str("HG_MIXED_PYTHON"), &["-c", PY]),
        "node" => exec("node", &["-e", JS]),
        other => child::die(format!("unknown role {other:?}")),
    }
}

/// Replaces this child with `program` (same pid, pipes and parent-death signal).
fn exec(program: &str, args: &[&str]) -> ! {
    let e = std::process::Command::new(program).args(args).exec();
    child::die(format!("exec {program}: {e}"))
}

/// The pid in a holder id (`<host>:<pid>:<random>`).
fn holder_pid(holder: &str) -> i32 {
    let mut parts = holder.rsplit(':');
    let _random = parts.next();
    parts
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("holder id {holder:?} has no pid"))
}

#[test]
#[ignore = "needs the Python extension and the Node addon: make fleet-mixed"]
fn mixed_languages_get_fair_shares_2_3_5() {
    for (var, what) in [
        ("HG_MIXED_PYTHON", "the venv's python"),
        ("HG_MIXED_NODE", "the bindings-node directory"),
    ] {
        let v = std::env::var(var).unwrap_or_else(|_| panic!("{var} ({what}) is not set"));
        assert!(Path::new(&v).exists(), "{var}={v}: no such path");
    }
    let start = Instant::now();
    for (langs, shares) in [
        (vec!["rust", "python"], vec![5, 5]),
        (vec!["rust", "python", "node"], vec![3, 3, 4]),
        (
            vec!["rust", "rust", "python", "python", "node"],
            vec![2, 2, 2, 2, 2],
        ),
    ] {
        let n = langs.len();
        let Some(f) = Fleet::start(&format!("mixed{n}"), 10, 900) else {
            return;
        };
        let t0 = Instant::now();
        let mut ps: Vec<Proc> = langs
            .iter()
            .enumerate()
            .map(|(i, &lang)| {
                let role = if lang == "rust" { "worker" } else { lang };
                f.spawn(Spawn::new(role, &format!("{lang}{i}")), 8, 3)
            })
            .collect();
        for p in &mut ps {
            p.expect("ready", 30 * SEC);
        }
        let ready = t0.elapsed();
        // Target: a few beats (300 ms each) after the last one is ready; allowed 30 s.
        eventually(30 * SEC, &format!("{langs:?}: shares {shares:?}"), || {
            let mut got: Vec<u64> = f.held().into_values().collect();
            got.sort();
            got == shares
        });
        let converged = t0.elapsed();
        // And it stays fair for about three beats: every worker keeps at least its floor
        // share and never holds more than its ceiling (with 3 the one permit over 3 × 3 moves
        // between holders; 2 and 5 divide 10).
        let (floor, ceil) = (10 / n as u64, 10_u64.div_ceil(n as u64));
        let window = Instant::now();
        let mut samples = 0;
        while window.elapsed() < SEC {
            let held = f.held();
            assert!(
                held.len() == n && held.values().all(|&b| (floor..=ceil).contains(&b)),
                "{langs:?}: blocks {held:?} after converging (fair: {floor} ..= {ceil} each)"
            );
            samples += 1;
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // One block per process, every language's among them.
        let holders: BTreeSet<i32> = f.held().keys().map(|h| holder_pid(h)).collect();
        let pids: BTreeSet<i32> = ps.iter().map(Proc::pid).collect();
        assert_eq!(holders, pids, "{langs:?}: the holders are not the workers");
        assert!(f.used() <= 10, "used {}", f.used());
        let mut fenced = 0;
        for p in ps {
            fenced += stop(p);
        }
        let peak = f.peak();
        assert!(peak <= 10, "{langs:?}: {peak} in flight at once, limit 10");
        assert_eq!(f.used(), 0, "{langs:?}: every block given back");
        assert!(
            f.held().is_empty(),
            "{langs:?}: holders left {:?}",
            f.held()
        );
        println!(
            "fleet mixed {langs:?}: ready in {ready:?}, shares {shares:?} in {converged:?} \
             (then fair in {samples} samples over 1 s), peak in flight {peak}, fenced releases \
             {fenced}, stopped at {:?}",
            t0.elapsed()
        );
    }
    println!("fleet mixed: all in {:?}", start.elapsed());
}
