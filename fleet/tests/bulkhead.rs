//! `FleetBulkhead` against a real `redis-server` (started by the fixture on a free loopback
//! port): the first block, fair shares under contention with an in-flight oracle, Redis killed
//! (fail closed, then back), a local share, FLUSHALL (learning), C42's late grant through a
//! slow transport, an injected clock that jumps, the fleet limit set under a revision, and a
//! Redis Cluster. Time bounds are upper bounds of 10× the stated target or more.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*},
    },
    thread,
    time::{Duration, Instant},
};

use common::{RedisCluster, RedisServer, eventually, transport};
use hullguard_core::{AcquireError, Bound, LimitsSnapshot, Reason, clock::Clock};
use hullguard_fleet::{
    FleetBulkhead, FleetConfig, LeaseState, PoolName, Unreachable,
    protocol::Field,
    redis_transport::RedisTransport,
    transport::{Transport, TransportError},
};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn config(pool: &str, limit: u64, ttl_ms: u64) -> FleetConfig {
    let mut c = FleetConfig::new(PoolName::new(pool).unwrap());
    c.max_concurrent = limit;
    c.lease_ttl = MS(ttl_ms);
    c.queue_timeout = Duration::from_secs(10);
    c
}

fn open(srv: &RedisServer, cfg: FleetConfig) -> FleetBulkhead {
    FleetBulkhead::open(transport(srv), cfg).expect("open")
}

fn refusal_bound(r: Result<impl Sized, AcquireError>) -> Bound {
    match r {
        Err(AcquireError::Rejected(r)) => {
            assert_eq!(r.reason, Reason::ConcurrencyLimit);
            r.detail().bound
        }
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("admitted"),
    }
}

#[test]
fn the_first_block_arrives_in_one_round_trip_and_then_admissions_are_local() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let bh = open(&srv, config("first", 4, 3000));
    // Target: one round trip (well under a millisecond on loopback); the 10 s queue timeout
    // bounds it.
    let p = bh
        .acquire_blocking(1, Some(Duration::from_secs(10)))
        .expect("first block");
    let s = bh.stats();
    assert_eq!(s.lease.state, LeaseState::Leased);
    assert!(
        s.lease.held >= 1 && s.lease.fleet_limit == 4,
        "{:?}",
        s.lease
    );
    assert_eq!(s.stats.active, 1);
    // While the block has room, acquires do not sync.
    eventually(Duration::from_secs(10), "a block of 2 or more", || {
        let _q = bh.try_acquire(1);
        bh.stats().lease.held >= 2
    });
    let syncs = bh.stats().lease.counters.syncs_total;
    for _ in 0..1000 {
        drop(bh.try_acquire(1).expect("inside the block"));
    }
    assert!(
        bh.stats().lease.counters.syncs_total <= syncs + 2,
        "acquires went to Redis"
    );
    drop(p);
    // The pool shows this holder.
    let pool = bh.pool_stats().unwrap();
    assert_eq!(pool.limit, Some(4));
    assert_eq!(pool.holders.len(), 1);
    assert_eq!(pool.holders[0].holder, bh.holder());
}

#[test]
fn busy_holders_converge_to_fair_shares_and_never_exceed_the_limit() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let limit = 10;
    let a = Arc::new(open(&srv, config("fair", limit, 600)));
    let b = Arc::new(open(&srv, config("fair", limit, 600)));
    let in_flight = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicU64::new(0));
    let mut workers = vec![];
    for bh in [&a, &b] {
        for _ in 0..8 {
            let (bh, in_flight, peak, stop) = (
                Arc::clone(bh),
                in_flight.clone(),
                peak.clone(),
                stop.clone(),
            );
            workers.push(thread::spawn(move || {
                while stop.load(Relaxed) == 0 {
                    if let Ok(p) = bh.acquire_blocking(1, Some(MS(200))) {
                        let now = in_flight.fetch_add(1, SeqCst) + 1;
                        peak.fetch_max(now, SeqCst);
                        thread::sleep(MS(2));
                        in_flight.fetch_sub(1, SeqCst);
                        drop(p);
                    }
                }
            }));
        }
    }
    // Both want more than half: each converges to 5 (target: a few beats; allowed 20 s).
    eventually(Duration::from_secs(20), "shares of 5 and 5", || {
        let (sa, sb) = (a.stats().lease, b.stats().lease);
        sa.share == 5 && sb.share == 5 && sa.held == 5 && sb.held == 5
    });
    stop.store(1, Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(
        peak.load(SeqCst) <= limit as i64,
        "in flight {} > {limit}",
        peak.load(SeqCst)
    );
    let pool = a.pool_stats().unwrap();
    assert!(pool.used <= limit);
}

#[test]
fn redis_killed_fails_closed_at_the_deadline_and_the_lease_comes_back() {
    let Some(mut srv) = RedisServer::start() else {
        return;
    };
    let bh = open(&srv, config("killed", 4, 400));
    drop(
        bh.acquire_blocking(1, Some(Duration::from_secs(10)))
            .unwrap(),
    );
    srv.kill9();
    // At most one TTL (400 ms) later the lease has expired and nothing is admitted; allowed
    // 10 s. (An idle holder's failed sync already capped its block at its want, 0.)
    eventually(Duration::from_secs(10), "fail closed", || {
        bh.stats().lease.state == LeaseState::Expired
    });
    assert!(bh.try_acquire(1).is_err());
    assert_eq!(bh.stats().lease.local_limit, 0);
    assert_eq!(refusal_bound(bh.try_acquire(1)), Bound::FleetLease);
    let s = bh.stats().lease;
    assert!(s.unreachable && s.last_error.is_some(), "{s:?}");
    assert_eq!(s.state, LeaseState::Expired);
    srv.restart();
    eventually(
        Duration::from_secs(20),
        "a new lease after the restart",
        || bh.try_acquire(1).is_ok(),
    );
    let s = bh.stats().lease;
    assert_eq!(s.state, LeaseState::Leased);
    assert!(s.counters.epoch_changes_total >= 1, "{s:?}");
}

#[test]
fn a_local_share_admits_while_redis_is_unreachable() {
    let Some(mut srv) = RedisServer::start() else {
        return;
    };
    let mut cfg = config("share", 4, 400);
    cfg.on_unreachable = Unreachable::LocalShare(2);
    let bh = open(&srv, cfg);
    drop(
        bh.acquire_blocking(1, Some(Duration::from_secs(10)))
            .unwrap(),
    );
    srv.kill9();
    eventually(Duration::from_secs(10), "the local share", || {
        bh.stats().lease.local_limit == 2 && bh.bulkhead().limit() == 2
    });
    let (x, y) = (bh.try_acquire(1).unwrap(), bh.try_acquire(1).unwrap());
    assert!(bh.try_acquire(1).is_err(), "no more than the share");
    drop((x, y));
}

#[test]
fn flushall_puts_the_pool_in_learning_and_holders_keep_their_blocks() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let bh = open(&srv, config("learn", 6, 600));
    let held: Vec<_> = (0..3)
        .map(|_| {
            bh.acquire_blocking(1, Some(Duration::from_secs(10)))
                .unwrap()
        })
        .collect();
    let before = bh.stats().lease;
    let mut c = srv.conn();
    redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    // The holder's next sync re-admits what it has, in a new epoch, learning.
    eventually(
        Duration::from_secs(10),
        "re-admitted in a new epoch",
        || {
            let s = bh.stats().lease;
            s.epoch != before.epoch && s.state == LeaseState::Leased
        },
    );
    let s = bh.stats().lease;
    assert!(s.held >= 3, "kept what it has: {s:?}");
    let pool = bh.pool_stats().unwrap();
    assert!(pool.used >= 3 && pool.used <= 6, "{pool:?}");
    drop(held);
}

/// A transport that answers every sync `delay` after Redis did (a proxy adding latency).
struct Slow<T> {
    inner: T,
    delay: Duration,
}

impl<T: Transport> Transport for Slow<T> {
    fn ensure_library(&mut self, keys: &hullguard_fleet::pool::Keys) -> Result<(), TransportError> {
        self.inner.ensure_library(keys)
    }
    fn call_ints(
        &mut self,
        function: &str,
        keys: &hullguard_fleet::pool::Keys,
        argv: &[String],
    ) -> Result<Vec<i64>, TransportError> {
        let r = self.inner.call_ints(function, keys, argv);
        if function == "hg_sync" {
            thread::sleep(self.delay);
        }
        r
    }
    fn call_fields(
        &mut self,
        function: &str,
        keys: &hullguard_fleet::pool::Keys,
        argv: &[String],
    ) -> Result<Vec<Field>, TransportError> {
        self.inner.call_fields(function, keys, argv)
    }
}

#[test]
fn c42_a_grant_whose_reply_comes_after_the_ttl_is_never_used_and_given_back() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let ttl = 300;
    let slow = Slow {
        inner: transport(&srv),
        delay: MS(ttl + 20),
    };
    let bh = FleetBulkhead::open(slow, config("c42", 4, ttl)).unwrap();
    eventually(Duration::from_secs(10), "a late grant", || {
        bh.stats().lease.counters.late_grants_total >= 1
    });
    // Nothing was ever admitted on it.
    assert_eq!(refusal_bound(bh.try_acquire(1)), Bound::FleetLease);
    assert_eq!(bh.stats().stats.admitted_total, 0);
    // The block went back (a fenced release), so Redis counts nothing for this holder.
    let mut c = srv.conn();
    eventually(Duration::from_secs(10), "the block given back", || {
        let held: Option<i64> = redis::cmd("HGET")
            .arg("{hg:c42}:held")
            .arg(bh.holder())
            .query(&mut c)
            .unwrap();
        held.unwrap_or(0) == 0
    });
}

/// A clock the test moves (it never goes backwards).
#[derive(Debug, Default)]
struct ManualClock {
    origin: Option<Instant>,
    skew_ns: AtomicU64,
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        let real = self.origin.map_or(0, |o| o.elapsed().as_nanos() as u64);
        real + self.skew_ns.load(SeqCst)
    }
}

#[test]
fn a_client_clock_that_jumps_ahead_stops_admissions_at_once_then_renews() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let clock = Arc::new(ManualClock {
        origin: Some(Instant::now()),
        ..ManualClock::default()
    });
    let bh = FleetBulkhead::open_with_clock(
        transport(&srv),
        config("jump", 4, 3000),
        Some(clock.clone()),
    )
    .unwrap();
    drop(
        bh.acquire_blocking(1, Some(Duration::from_secs(10)))
            .unwrap(),
    );
    // The local clock jumps 1 h ahead: the lease's deadline is behind it, so the very next
    // acquire is refused (no admission on a lease the client believes expired) — unless the
    // driver renewed in between, at the new time (it may be mid-cycle when the clock jumps).
    let syncs = bh.stats().lease.counters.syncs_total;
    clock.skew_ns.store(3_600_000_000_000, SeqCst);
    match bh.try_acquire(1) {
        Ok(p) => {
            drop(p);
            assert!(
                bh.stats().lease.counters.syncs_total > syncs,
                "admitted after the jump without a renewal"
            );
        }
        r => assert_eq!(refusal_bound(r), Bound::FleetLease),
    }
    // The driver renews (Redis time is untouched, so the lease is still valid there).
    eventually(Duration::from_secs(10), "renewed after the jump", || {
        bh.try_acquire(1).is_ok()
    });
}

#[test]
fn apply_limits_sets_the_fleet_limit_under_a_revision() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let a = open(&srv, config("limit", 4, 600));
    let b = open(&srv, config("limit", 4, 600));
    let r = a.apply_limits(&LimitsSnapshot::new(2).limit(7)).unwrap();
    assert!(r.applied() && r.budget.is_none());
    let r = r.limit.unwrap();
    assert!(r.applied && r.limit == 7 && r.rev == 2);
    let stale = b.apply_limits(&LimitsSnapshot::new(1).limit(1)).unwrap();
    let stale = stale.limit.unwrap();
    assert!(
        !stale.applied && stale.limit == 7 && stale.rev == 2,
        "{stale:?}"
    );
    eventually(Duration::from_secs(10), "b sees the new limit", || {
        b.stats().lease.fleet_limit == 7
    });
    let e = a
        .apply_limits(&LimitsSnapshot::new(3).max_queue(1))
        .unwrap_err();
    assert_eq!(e.option(), Some("limits"));
}

#[test]
fn bad_options_are_refused_by_name() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let mut cfg = config("bad", 4, 600);
    cfg.beat = Some(MS(400));
    let e = FleetBulkhead::open(transport(&srv), cfg).unwrap_err();
    assert_eq!(e.option(), Some("beat"), "{e}");
}

#[test]
fn a_cluster_holds_the_pool_in_one_slot() {
    let Some(cluster) = RedisCluster::start(3) else {
        return;
    };
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut opened = vec![];
    for pool in ["alpha", "bravo", "charlie"] {
        let conn = client.get_connection().unwrap();
        let bh = FleetBulkhead::open(RedisTransport::new(conn), config(pool, 3, 1000)).unwrap();
        let p = bh
            .acquire_blocking(1, Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(bh.pool_stats().unwrap().limit, Some(3));
        drop(p);
        opened.push(bh);
    }
}

#[test]
fn with_wait_replicas_growth_is_used_once_a_replica_has_it() {
    let Some(primary) = RedisServer::start() else {
        return;
    };
    let Some(mut replica) = RedisServer::start_replica_of(&primary) else {
        return;
    };
    let mut c = replica.conn();
    eventually(Duration::from_secs(20), "the replica in sync", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
        info.contains("master_link_status:up")
    });
    let mut cfg = config("replicated", 20, 1000);
    cfg.wait_replicas = 1;
    // A busy machine can hold a replica's acknowledgement back (under the transport's 500 ms
    // read timeout).
    cfg.wait_timeout = Duration::from_millis(400);
    let bh = open(&primary, cfg);
    let p = bh
        .acquire_blocking(1, Some(Duration::from_secs(10)))
        .expect("a replicated block");
    let before = bh.stats().lease;
    assert!(
        before.local_limit >= 1 && before.local_limit < 20,
        "{before:?}"
    );
    // Without the replica, a growth is never used: the block stays what was replicated.
    replica.kill9();
    let mut extra = vec![];
    eventually(
        Duration::from_secs(30),
        "a growth WAIT could not confirm",
        || {
            extra.extend(bh.try_acquire(1).ok());
            bh.stats().lease.counters.unreplicated_total >= 1
        },
    );
    let s = bh.stats().lease;
    assert!(
        s.local_limit <= before.local_limit,
        "an unconfirmed growth is never admitted on: {s:?}"
    );
    assert!(
        (extra.len() as u64) < s.local_limit.max(before.local_limit),
        "{s:?} {}",
        extra.len()
    );
    drop((p, extra));
}

/// A transport whose syncs block until the test lets them go (a hung Redis).
struct Hung<T> {
    inner: T,
    entered: Arc<AtomicBool>,
    answered: Arc<AtomicBool>,
    gate: std::sync::mpsc::Receiver<()>,
}

impl<T: Transport> Transport for Hung<T> {
    fn ensure_library(&mut self, keys: &hullguard_fleet::pool::Keys) -> Result<(), TransportError> {
        self.inner.ensure_library(keys)
    }
    fn call_ints(
        &mut self,
        function: &str,
        keys: &hullguard_fleet::pool::Keys,
        argv: &[String],
    ) -> Result<Vec<i64>, TransportError> {
        if function == "hg_sync" {
            self.entered.store(true, SeqCst);
            let _ = self.gate.recv(); // until the test drops its sender
            self.answered.store(true, SeqCst);
        }
        self.inner.call_ints(function, keys, argv)
    }
    fn call_fields(
        &mut self,
        function: &str,
        keys: &hullguard_fleet::pool::Keys,
        argv: &[String],
    ) -> Result<Vec<Field>, TransportError> {
        self.inner.call_fields(function, keys, argv)
    }
}

#[test]
fn close_does_not_hang_on_a_transport_that_never_answers() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let (entered, answered) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let mut bh = FleetBulkhead::open(
        Hung {
            inner: transport(&srv),
            entered: entered.clone(),
            answered: answered.clone(),
            gate,
        },
        config("hang", 4, 300),
    )
    .unwrap();
    eventually(
        Duration::from_secs(10),
        "the driver inside its first call",
        || entered.load(SeqCst),
    );
    // close() returns (after at most one TTL) while the call is still hung: it never waits for
    // an answer that does not come. An ordering, not a wall-clock, assertion.
    bh.close();
    assert!(!answered.load(SeqCst), "close waited for the hung call");
    drop(release);
}
