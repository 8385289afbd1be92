//! The fleet bulkhead's table (issue 20; docs/design.md § Benchmarks): `FleetBulkhead` beside
//! the local bulkhead and two per-acquire Redis anchors, in one run against one real
//! `redis-server` this run starts on a free loopback port:
//!
//! 1. **Acquire + release while the block has room**, one thread: the local `Bulkhead`
//!    (`try_acquire(1)` + drop) and the `FleetBulkhead` (the same on its leased block), `REPS`
//!    (default 9) interleaved repetitions whose order alternates; the median of the
//!    per-repetition ratios and their min–max. Target: fleet ≤ 2× local.
//! 2. **Per-acquire round trips**: `PING` (one round trip, the floor of any per-acquire Redis
//!    scheme) and a redis-semaphore-style Lua semaphore (swarthy/redis-semaphore's algorithm:
//!    a ZSET of holders scored by time; acquire = one script that drops expired members and adds
//!    this one if `ZCARD < limit`; release = `ZREM`: two round trips per acquire + release).
//!    Target: fleet ≥ 50× faster than one round trip.
//! 3. **Rebalance**: two fleet bulkheads (TTL 600 ms, beat 200 ms), limit 10. A is busy alone
//!    (8 threads) and holds the whole limit; then B gets busy too: the time until both hold
//!    their fair share (5 and 5). `REBALANCE_REPS` repetitions; median and min–max.
//! 4. **Syncs per second per process** at steady state (busy and idle) with the default TTL
//!    10 s (beat 3.3 s) and with TTL 600 ms.
//!
//! Usage: `cargo run --release -p hullguard-bench --bin fleet [-- --smoke]` (`REPS=n`).
//! `--smoke` runs every part once at tiny sizes through the same code and tables (its numbers
//! mean nothing).

use std::{
    hint::black_box,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    thread,
    time::{Duration, Instant},
};

use hullguard_bench::machine::{
    Background, background_line, cpu_model, median, min_max, repetitions,
};
use hullguard_core::{Bulkhead, Config};
use hullguard_fleet::{
    FleetBulkhead, FleetConfig, PoolName,
    redis_transport::{Reconnecting, RedisTransport},
};
use hullguard_testkit::redis_server::RedisServer;

/// The time one timed batch of the in-process rows aims at.
const BATCH: Duration = Duration::from_millis(40);

/// redis-semaphore's acquire (swarthy/redis-semaphore `src/semaphore/acquire/lua.ts`, its
/// algorithm in our words): drop members older than the lock timeout, then add this holder if
/// fewer than `limit` remain. KEYS[1] = the ZSET; ARGV = limit, id, now ms, timeout ms.
const SEMAPHORE_ACQUIRE: &str = "\
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[3]) - tonumber(ARGV[4])) \
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then \
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2]) return 1 end \
return 0";

fn transport(srv: &RedisServer) -> RedisTransport<Reconnecting> {
    let client = redis::Client::open(srv.url()).expect("client");
    RedisTransport::new(Reconnecting::new(client, Duration::from_secs(2)))
}

fn fleet(srv: &RedisServer, pool: &str, limit: u64, ttl: Duration) -> FleetBulkhead {
    let mut cfg = FleetConfig::new(PoolName::new(pool).unwrap());
    cfg.max_concurrent = limit;
    cfg.lease_ttl = ttl;
    cfg.queue_timeout = Duration::from_secs(10);
    FleetBulkhead::open(transport(srv), cfg).expect("open the fleet bulkhead")
}

/// Ops per second of `f` run in batches of `n` for about `BATCH` (at least one batch).
fn per_op_ns(n: u64, mut f: impl FnMut(u64)) -> f64 {
    let t = Instant::now();
    let mut done = 0;
    while done == 0 || t.elapsed() < BATCH {
        f(n);
        done += n;
    }
    t.elapsed().as_nanos() as f64 / done as f64
}

fn local_cycles(bh: &Bulkhead, n: u64) {
    for _ in 0..n {
        drop(black_box(bh.try_acquire(1).expect("free")));
    }
}

fn fleet_cycles(bh: &FleetBulkhead, n: u64) {
    for _ in 0..n {
        drop(black_box(bh.try_acquire(1).expect("inside the block")));
    }
}

fn row(name: &str, ratios: &[f64], ns: &[f64], target: &str) {
    let (lo, hi) = min_max(ratios);
    println!(
        "  {name:<44} {:>10.2} ns   ratio {:>8.2} (min {lo:.2} – max {hi:.2})   {target}",
        median(ns),
        median(ratios)
    );
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let reps = repetitions(smoke);
    let n: u64 = if smoke { 64 } else { 4096 };
    let srv = RedisServer::start().expect("redis-server is needed (make setup installs it)");
    println!("== fleet bulkhead (issue 20): {} ==", cpu_model());
    println!(
        "  redis-server {} on 127.0.0.1:{}",
        redis_version(&srv),
        srv.port()
    );
    let bg = Background::start();

    // ----- 1 + 2: acquire + release ------------------------------------------------------
    let local = Bulkhead::new(Config {
        max_concurrent: 4,
        ..Config::DEFAULT
    })
    .unwrap();
    let fb = fleet(&srv, "bench-acquire", 64, Duration::from_secs(10));
    // The block: one acquire that waits for the first sync.
    drop(
        fb.acquire_blocking(1, Some(Duration::from_secs(10)))
            .expect("first block"),
    );
    let mut conn = srv.conn();
    let sem = redis::Script::new(SEMAPHORE_ACQUIRE);
    let (mut local_ns, mut fleet_ns, mut ping_ns, mut sem_ns) = (vec![], vec![], vec![], vec![]);
    let (mut r_local, mut r_ping, mut r_sem) = (vec![], vec![], vec![]);
    let rt_n = if smoke { 8 } else { 200 };
    let mut ids = 0u64;
    for rep in 0..reps {
        let (l, f) = if rep % 2 == 0 {
            let l = per_op_ns(n, |n| local_cycles(&local, n));
            (l, per_op_ns(n, |n| fleet_cycles(&fb, n)))
        } else {
            let f = per_op_ns(n, |n| fleet_cycles(&fb, n));
            (per_op_ns(n, |n| local_cycles(&local, n)), f)
        };
        let p = per_op_ns(rt_n, |n| {
            for _ in 0..n {
                let _: String = redis::cmd("PING").query(&mut conn).unwrap();
            }
        });
        let s = per_op_ns(rt_n, |n| {
            for _ in 0..n {
                ids += 1;
                let id = ids.to_string();
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as u64;
                let got: i64 = sem
                    .key("bench-sem")
                    .arg(64)
                    .arg(&id)
                    .arg(now_ms)
                    .arg(10_000)
                    .invoke(&mut conn)
                    .unwrap();
                assert_eq!(got, 1);
                let _: i64 = redis::cmd("ZREM")
                    .arg("bench-sem")
                    .arg(&id)
                    .query(&mut conn)
                    .unwrap();
            }
        });
        local_ns.push(l);
        fleet_ns.push(f);
        ping_ns.push(p);
        sem_ns.push(s);
        r_local.push(f / l);
        r_ping.push(p / f);
        r_sem.push(s / f);
    }
    let syncs_during = fb.stats().lease.counters.syncs_total;
    println!();
    println!(
        "  acquire + release, one thread ({reps} repetitions, median; ratio = median of per-repetition ratios)"
    );
    row(
        "local Bulkhead try_acquire + drop",
        &vec![1.0; reps],
        &local_ns,
        "",
    );
    row(
        "FleetBulkhead try_acquire + drop (block has room)",
        &r_local,
        &fleet_ns,
        "fleet / local, target <= 2",
    );
    row(
        "PING (one round trip)",
        &r_ping,
        &ping_ns,
        "PING / fleet, target >= 50",
    );
    row(
        "redis-semaphore-style Lua acquire + ZREM release",
        &r_sem,
        &sem_ns,
        "semaphore / fleet",
    );
    println!("  syncs the fleet bulkhead sent over the whole part: {syncs_during}");

    // ----- 3: rebalance ------------------------------------------------------------------
    println!();
    let rb_reps = if smoke { 1 } else { 5 };
    let mut times = vec![];
    for rep in 0..rb_reps {
        times.push(rebalance(&srv, &format!("bench-rebalance-{rep}"), smoke));
    }
    let ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let (lo, hi) = min_max(&ms);
    println!(
        "  rebalance (TTL 600 ms, beat 200 ms, limit 10): A alone holds 10; B gets busy → 5 and 5 in {:.0} ms median (min {lo:.0} – max {hi:.0}, {rb_reps} runs)",
        median(&ms)
    );

    // ----- 4: syncs per second -----------------------------------------------------------
    println!();
    let window = if smoke {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(3)
    };
    for (ttl, label) in [
        (Duration::from_secs(10), "TTL 10 s (default)"),
        (Duration::from_millis(600), "TTL 600 ms"),
    ] {
        let (busy, idle) = syncs_per_second(&srv, ttl, window);
        println!(
            "  syncs per second per process, {label:<18}: busy {busy:>5.2}/s, idle {idle:>5.2}/s"
        );
    }
    println!();
    println!("  {}", background_line("the run", bg.shares()));
}

fn redis_version(srv: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut srv.conn())
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

/// Busy workers on `bh`: `threads` threads acquiring, holding 2 ms, releasing, until `stop`.
fn busy(
    bh: &Arc<FleetBulkhead>,
    threads: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<()>> {
    (0..threads)
        .map(|_| {
            let (bh, stop) = (Arc::clone(bh), Arc::clone(stop));
            thread::spawn(move || {
                while !stop.load(Relaxed) {
                    if let Ok(p) = bh.acquire_blocking(1, Some(Duration::from_millis(100))) {
                        thread::sleep(Duration::from_millis(2));
                        drop(p);
                    }
                }
            })
        })
        .collect()
}

fn rebalance(srv: &RedisServer, pool: &str, smoke: bool) -> Duration {
    let ttl = Duration::from_millis(600);
    let a = Arc::new(fleet(srv, pool, 10, ttl));
    let b = Arc::new(fleet(srv, pool, 10, ttl));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = busy(&a, 8, &stop);
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.stats().lease.held < 10 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    if !smoke {
        thread::sleep(Duration::from_millis(500));
    }
    let t = Instant::now();
    workers.extend(busy(&b, 8, &stop));
    while Instant::now() < deadline {
        let (sa, sb) = (a.stats().lease, b.stats().lease);
        if sa.held == 5 && sb.held == 5 {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let took = t.elapsed();
    stop.store(true, Relaxed);
    for w in workers {
        let _ = w.join();
    }
    took
}

fn syncs_per_second(srv: &RedisServer, ttl: Duration, window: Duration) -> (f64, f64) {
    let bh = Arc::new(fleet(
        srv,
        &format!("bench-syncs-{}", ttl.as_millis()),
        10,
        ttl,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let workers = busy(&bh, 4, &stop);
    thread::sleep(window.min(Duration::from_secs(1)));
    let s0 = bh.stats().lease.counters.syncs_total;
    thread::sleep(window);
    let busy_rate = (bh.stats().lease.counters.syncs_total - s0) as f64 / window.as_secs_f64();
    stop.store(true, Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let s1 = bh.stats().lease.counters.syncs_total;
    thread::sleep(window);
    let idle_rate = (bh.stats().lease.counters.syncs_total - s1) as f64 / window.as_secs_f64();
    (busy_rate, idle_rate)
}
