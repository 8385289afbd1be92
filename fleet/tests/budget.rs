//! A fleet bulkhead's budget, classes and events (docs/design.md §16.10) against a real
//! `redis-server` (started by the fixture on a free loopback port): the budget leased like the
//! permits (fair shares with an in-flight oracle of units, a cost that waits for the block to
//! grow, the fleet budget's ceiling, `fleet_lease` while the block is empty, `apply_limits`
//! under a revision, both leases given back at close), admission classes inside the block, and
//! the local core's events. Time bounds are upper bounds of 10× the stated target or more.

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, AtomicU64, Ordering::*},
    },
    thread,
    time::{Duration, Instant},
};

use common::{RedisServer, eventually, transport};
use hullguard_core::{
    AcquireError, Bound, Decision, LimitsSnapshot, Reason, Request,
    config::classes::{ClassSpec, ClassTable, PriorityReserve},
    event::{Event, Observer, SharedObserver},
};
use hullguard_fleet::{Dimension, FleetBulkhead, FleetConfig, Local, PoolName};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn config(pool: &str, limit: u64, budget: u64, ttl_ms: u64) -> FleetConfig {
    let mut c = FleetConfig::new(PoolName::new(pool).unwrap());
    c.max_concurrent = limit;
    c.budget = Some(budget);
    c.lease_ttl = MS(ttl_ms);
    c.queue_timeout = Duration::from_secs(10);
    c
}

fn open(srv: &RedisServer, cfg: FleetConfig) -> FleetBulkhead {
    FleetBulkhead::open(transport(srv), cfg).expect("open")
}

fn refused<B: std::ops::Deref<Target = hullguard_core::Bulkhead>>(
    d: Decision<B, 0>,
) -> hullguard_core::RejectionDetail {
    match d {
        Decision::Rejected(AcquireError::Rejected(r)) => r.detail(),
        Decision::Rejected(e) => panic!("refused otherwise: {e}"),
        _ => panic!("admitted or queued"),
    }
}

#[test]
fn busy_holders_share_the_fleet_budget_and_units_in_flight_never_exceed_it() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let budget = 100;
    let a = Arc::new(open(&srv, config("units", 50, budget, 600)));
    let b = Arc::new(open(&srv, config("units", 50, budget, 600)));
    // The oracle: units in flight across both processes' bulkheads.
    let units = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicU64::new(0));
    let mut workers = vec![];
    for bh in [&a, &b] {
        for i in 0..6u64 {
            let (bh, units, peak, stop) =
                (Arc::clone(bh), units.clone(), peak.clone(), stop.clone());
            workers.push(thread::spawn(move || {
                let cost = 10 + 5 * (i % 3); // 10, 15, 20 units
                while stop.load(Relaxed) == 0 {
                    let req = Request::new(1).cost(cost).queue_timeout(MS(200));
                    let call = match bh.admit(&req) {
                        Decision::Granted(c) => c,
                        Decision::Queued(w) => {
                            match w.wait_blocking(Some(Instant::now() + MS(200))) {
                                Ok(c) => c,
                                Err(_) => continue,
                            }
                        }
                        Decision::Rejected(_) => {
                            thread::sleep(MS(1));
                            continue;
                        }
                    };
                    let now = units.fetch_add(cost as i64, SeqCst) + cost as i64;
                    peak.fetch_max(now, SeqCst);
                    thread::sleep(MS(2));
                    units.fetch_sub(cost as i64, SeqCst);
                    drop(call);
                }
            }));
        }
    }
    // Both want more than half: each converges to 50 units (target: a few beats; 20 s).
    eventually(
        Duration::from_secs(20),
        "budget shares of 50 and 50",
        || {
            let (sa, sb) = (a.stats(), b.stats());
            let (ba, bb) = (sa.budget_lease.unwrap(), sb.budget_lease.unwrap());
            ba.share == 50 && bb.share == 50 && ba.held == 50 && bb.held == 50
        },
    );
    stop.store(1, Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(
        peak.load(SeqCst) <= budget as i64,
        "units in flight {} > the fleet budget {budget}",
        peak.load(SeqCst)
    );
    let pool = a.pool_stats_of(Dimension::Budget).unwrap();
    assert_eq!(pool.limit, Some(budget));
    assert!(pool.used <= budget);
    assert_eq!(pool.holders.len(), 2);
}

#[test]
fn a_cost_waits_for_the_block_and_only_the_fleet_budget_refuses_it() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let a = open(&srv, config("wait", 10, 100, 600));
    let b = open(&srv, config("wait", 10, 100, 600));
    // A takes the whole fleet budget.
    let big = match a.admit(&Request::new(1).cost(100)) {
        Decision::Granted(c) => c,
        Decision::Queued(w) => w
            .wait_blocking(Some(Instant::now() + Duration::from_secs(10)))
            .expect("A's first budget block"),
        Decision::Rejected(e) => panic!("{e}"),
    };
    // B's budget block stays empty: a try is refused budget_limit with the bound
    // fleet_lease (once B holds a lease at all).
    eventually(Duration::from_secs(10), "B leased", || {
        let s = b.stats();
        s.lease.state == hullguard_fleet::LeaseState::Leased
            && s.budget_lease.unwrap().state == hullguard_fleet::LeaseState::Leased
    });
    // Once B's permit block has room (the refusals ring its bell), the short dimension is the
    // budget's empty block.
    let _permit = b
        .acquire_blocking(1, Some(Duration::from_secs(10)))
        .expect("B's permits");
    eventually(
        Duration::from_secs(10),
        "budget_limit, bound fleet_lease",
        || {
            let d = refused(b.admit(&Request::new(1).cost(10).no_wait()));
            (d.reason, d.bound) == (Reason::BudgetLimit, Bound::FleetLease)
        },
    );
    // Above the fleet budget: refused at once, whatever the block.
    let d = refused(b.admit(&Request::new(1).cost(101)));
    assert_eq!(d.reason, Reason::BudgetLimit);
    // A cost within the fleet budget waits for B's block to grow: granted once A gives back.
    let Decision::Queued(w) = b.admit(&Request::new(1).cost(60)) else {
        panic!("a cost within the fleet budget must wait")
    };
    thread::scope(|scope| {
        let deadline = Some(Instant::now() + Duration::from_secs(10));
        let waiter = scope.spawn(move || w.wait_blocking(deadline).map(drop));
        drop(big);
        waiter
            .join()
            .unwrap()
            .expect("granted within the queue timeout once A's block shrank");
    });
}

#[test]
fn apply_limits_sets_the_fleet_budget_and_close_releases_both_leases() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let mut a = open(&srv, config("set", 4, 100, 600));
    let r = a
        .apply_limits(&LimitsSnapshot::new(5).limit(6).budget(300))
        .unwrap();
    assert!(r.applied(), "{r:?}");
    assert_eq!(r.budget.map(|b| b.limit), Some(300));
    assert_eq!(r.limit.map(|b| b.limit), Some(6));
    let stale = a.apply_limits(&LimitsSnapshot::new(4).budget(10)).unwrap();
    assert!(!stale.applied() && stale.budget.unwrap().limit == 300);
    eventually(Duration::from_secs(10), "the new fleet budget", || {
        a.stats().budget_lease.unwrap().fleet_limit == 300
    });
    let p = a.bulkhead().admit(&Request::new(1).cost(250), None);
    eventually(Duration::from_secs(10), "a budget lease in Redis", || {
        a.pool_stats_of(Dimension::Budget).unwrap().holders.len() == 1
    });
    drop(p);
    a.close();
    assert!(a.pool_stats().unwrap().holders.is_empty(), "permits kept");
    assert!(
        a.pool_stats_of(Dimension::Budget)
            .unwrap()
            .holders
            .is_empty(),
        "the budget's lease was not given back"
    );
    // Without a budget, apply_limits(budget) is refused by name.
    let plain = {
        let mut c = config("plain", 4, 1, 600);
        c.budget = None;
        open(&srv, c)
    };
    let e = plain
        .apply_limits(&LimitsSnapshot::new(1).budget(5))
        .unwrap_err();
    assert_eq!(e.option(), Some("budget"), "{e}");
    assert!(plain.stats().budget_lease.is_none());
}

#[derive(Default)]
struct Admits(Mutex<Vec<(u16, u64)>>);

impl Observer for Admits {
    fn on_event(&self, e: &Event<'_>) {
        if let Event::Admit { class, cost, .. } = *e {
            self.0.lock().unwrap().push((class, cost));
        }
    }
}

#[test]
fn classes_partition_the_block_and_events_reach_the_observer() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let classes = [
        ClassSpec {
            priority: 0,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            priority: 9,
            ..ClassSpec::DEFAULT
        },
    ];
    let table = ClassTable {
        lending: false,
        shed: false,
        rates: Default::default(),
        classes: &classes,
        reserve: PriorityReserve::default(),
    };
    let seen = Arc::new(Admits::default());
    let observer: SharedObserver = seen.clone();
    let mut cfg = config("classes", 1, 100, 600);
    cfg.budget = None;
    let bh = FleetBulkhead::open_with(
        transport(&srv),
        cfg,
        None,
        Local {
            classes: Some(&table),
            observer: Some(observer),
        },
    )
    .unwrap();
    // The fleet limit is 1: hold it, queue a low then a high priority waiter.
    let held = bh
        .acquire_blocking(1, Some(Duration::from_secs(10)))
        .expect("the block");
    let Decision::Queued(low) = bh.admit(&Request::new(1).class(0)) else {
        panic!("queued")
    };
    let Decision::Queued(high) = bh.admit(&Request::new(1).class(1)) else {
        panic!("queued")
    };
    thread::scope(|scope| {
        let deadline = Some(Instant::now() + Duration::from_secs(10));
        let low = scope.spawn(move || low.wait_blocking(deadline).map(drop));
        let high = scope.spawn(move || high.wait_blocking(deadline).map(drop));
        drop(held);
        high.join().unwrap().expect("the high-priority waiter");
        low.join().unwrap().expect("then the low one");
    });
    let order: Vec<u16> = seen.0.lock().unwrap().iter().map(|e| e.0).collect();
    assert_eq!(
        order,
        [0, 1, 0],
        "admit events in grant order (first, high, low)"
    );
    assert_eq!(bh.bulkhead().class_count(), 2);
}
