//! Fleet bulkheads in real processes (tests/procs.rs, tests/mixed.rs): a pool on a real
//! `redis-server` and an oracle — a second `redis-server` that counts the calls in flight across
//! all processes (each worker `HINCRBY`s its own field around every call with [`ORACLE`]; the
//! step sums the fields and keeps the maximum) — the Rust `worker` role, and the parent's reads
//! of both servers.
//!
//! A worker of any language speaks the same protocol (`hullguard_testkit::child`): env
//! `HG_POOL`, `HG_LIMIT`, `HG_TTL_MS` (the fleet bulkhead), `HG_REDIS`, `HG_ORACLE` (the two
//! URLs), `HG_ORACLE_LUA` ([`ORACLE`]), `HG_THREADS` (concurrent loops), `HG_HOLD_MS`; it says
//! `ready` after its first grant; on `stop` it stops its loops, closes the bulkhead (a fenced
//! release) and says `stopped <fenced releases>`, then exits 0; at EOF on stdin it exits.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::*},
    },
    thread,
    time::Duration,
};

use hullguard_fleet::{
    FleetBulkhead, FleetConfig, PoolName,
    redis_transport::{Reconnecting, RedisTransport},
};
use hullguard_testkit::child::{self, Proc, Spawn};

use super::RedisServer;

pub const MS: fn(u64) -> Duration = Duration::from_millis;
pub const SEC: Duration = Duration::from_secs(1);

/// The oracle's step (`EVAL`, keys `inflight` and `max`): add `ARGV[2]` to this worker's field
/// `ARGV[1]`, and keep the maximum of the sum.
pub const ORACLE: &str = "redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2]) \
    local s = 0 for _, v in ipairs(redis.call('HVALS', KEYS[1])) do s = s + tonumber(v) end \
    if s > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], s) end \
    return s";

/// Role `worker`: opens pool `HG_POOL` on `HG_REDIS`, runs `HG_THREADS` threads that each
/// acquire (200 ms timeout), count themselves in at the oracle `HG_ORACLE`, hold `HG_HOLD_MS`,
/// count themselves out and release. Says `ready` after its first grant; on `stop`, stops the
/// threads, closes the bulkhead (a fenced release) and says `stopped <fenced releases>`.
pub fn worker() -> ! {
    let pid = std::process::id().to_string();
    let mut cfg = FleetConfig::new(PoolName::new(&child::env_str("HG_POOL")).unwrap());
    cfg.max_concurrent = child::env_u64("HG_LIMIT");
    cfg.lease_ttl = MS(child::env_u64("HG_TTL_MS"));
    let client = redis::Client::open(child::env_str("HG_REDIS")).unwrap();
    let transport = RedisTransport::new(Reconnecting::new(client, MS(300)));
    let bh = Arc::new(FleetBulkhead::open(transport, cfg).unwrap_or_else(|e| child::die(e)));
    let hold = MS(child::env_u64("HG_HOLD_MS"));
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let oracle = redis::Script::new(ORACLE);
    let mut threads = vec![];
    for _ in 0..child::env_u64("HG_THREADS") {
        let (bh, stop, ready, oracle, pid) = (
            bh.clone(),
            stop.clone(),
            ready.clone(),
            oracle.clone(),
            pid.clone(),
        );
        let mut conn = redis::Client::open(child::env_str("HG_ORACLE"))
            .unwrap()
            .get_connection()
            .unwrap();
        threads.push(thread::spawn(move || {
            while !stop.load(Relaxed) {
                let Ok(p) = bh.acquire_blocking(1, Some(MS(200))) else {
                    continue;
                };
                let step = |n: i64, conn: &mut redis::Connection| -> i64 {
                    oracle
                        .key("inflight")
                        .key("max")
                        .arg(&pid)
                        .arg(n)
                        .invoke(conn)
                        .unwrap()
                };
                step(1, &mut conn);
                if !ready.swap(true, SeqCst) {
                    child::say("ready");
                }
                thread::sleep(hold);
                step(-1, &mut conn);
                drop(p);
            }
        }));
    }
    while let Some(cmd) = child::listen() {
        if cmd == "stop" {
            stop.store(true, Relaxed);
            for t in threads.drain(..) {
                let _ = t.join();
            }
            let mut bh = Arc::into_inner(bh).expect("threads joined");
            bh.close();
            let s = bh.stats().lease;
            child::say(format!("stopped {}", s.counters.releases_fenced_total));
            std::process::exit(0);
        }
    }
    std::process::exit(0)
}

/// A pool on its own `redis-server`, and the oracle's.
pub struct Fleet {
    pub redis: RedisServer,
    pub oracle: RedisServer,
    pub pool: String,
    pub limit: u64,
    pub ttl_ms: u64,
}

impl Fleet {
    /// `None` only when the tests are skipped (no redis-server, `HG_SKIP_REDIS=1`).
    pub fn start(pool: &str, limit: u64, ttl_ms: u64) -> Option<Fleet> {
        Some(Fleet {
            redis: RedisServer::start()?,
            oracle: RedisServer::start()?,
            pool: pool.into(),
            limit,
            ttl_ms,
        })
    }

    /// Starts `spawn` (a worker of any language) with the worker's parameters.
    pub fn spawn(&self, spawn: Spawn, threads: u64, hold_ms: u64) -> Proc {
        spawn
            .env("HG_POOL", &self.pool)
            .env("HG_LIMIT", self.limit)
            .env("HG_TTL_MS", self.ttl_ms)
            .env("HG_REDIS", self.redis.url())
            .env("HG_ORACLE", self.oracle.url())
            .env("HG_ORACLE_LUA", ORACLE)
            .env("HG_THREADS", threads)
            .env("HG_HOLD_MS", hold_ms)
            .spawn()
    }

    /// A Rust worker (role `worker` of the calling test binary).
    pub fn worker(&self, label: &str, threads: u64, hold_ms: u64) -> Proc {
        self.spawn(Spawn::new("worker", label), threads, hold_ms)
    }

    /// Holder → block, as Redis counts them.
    pub fn held(&self) -> BTreeMap<String, u64> {
        redis::cmd("HGETALL")
            .arg(format!("{{hg:{}}}:held", self.pool))
            .query(&mut self.redis.conn())
            .unwrap_or_default()
    }

    /// The pool's `used`, as Redis counts it.
    pub fn used(&self) -> u64 {
        let v: Option<u64> = redis::cmd("HGET")
            .arg(format!("{{hg:{}}}:cfg", self.pool))
            .arg("used")
            .query(&mut self.redis.conn())
            .unwrap();
        v.unwrap_or(0)
    }

    /// The largest number of calls the oracle saw in flight at once.
    pub fn peak(&self) -> u64 {
        let v: Option<u64> = redis::cmd("GET")
            .arg("max")
            .query(&mut self.oracle.conn())
            .unwrap();
        v.unwrap_or(0)
    }

    /// Forgets a dead worker's calls at the oracle (they ended with it).
    pub fn forget(&self, p: &Proc) {
        redis::cmd("HDEL")
            .arg("inflight")
            .arg(p.pid().to_string())
            .query::<()>(&mut self.oracle.conn())
            .unwrap();
    }
}

/// Stops a worker (`stop`, then its `stopped` line and a clean exit); its fenced releases.
pub fn stop(mut p: Proc) -> u64 {
    p.send("stop");
    let l = p.expect("stopped", 20 * SEC);
    let fenced = l.num(0);
    p.expect_success(20 * SEC);
    fenced
}
