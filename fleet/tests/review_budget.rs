//! Review of the fleet budget / classes / events (docs/design.md §16.10): tests that break it
//! (F1…F10 in /tmp/hg/report-review-fleet.md; `held_*` and `control_*` pass).
//! Each test drives a `FleetCore` on a virtual client clock and sends its commands to a real
//! `redis-server` (the fixture in `common`), so the replies are the library's own.

mod common;

use std::{
    sync::{
        Arc, Mutex, OnceLock, Weak,
        atomic::{AtomicU64, Ordering::*},
        mpsc,
    },
    task::Poll,
    thread,
    time::Duration,
};

use common::RedisServer;
use hullguard_core::{
    Bulkhead, Config, Decision, LimitsSnapshot, Request,
    clock::Clock,
    config::classes::{ClassSpec, ClassTable, PriorityReserve},
    event::{Event, Observer, SharedObserver},
};
use hullguard_fleet::{Command, FleetConfig, FleetCore, Local, PoolName, RawReply, Step};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// A client clock the test moves (never backwards).
#[derive(Debug)]
struct VClock(AtomicU64);

impl Clock for VClock {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

impl VClock {
    fn new() -> Arc<Self> {
        Arc::new(VClock(AtomicU64::new(1_000_000_000)))
    }
    fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, SeqCst);
    }
}

/// Runs one command on the server and returns the reply as a binding hands it over.
fn exec(conn: &mut redis::Connection, c: &Command) -> RawReply {
    let args = c.args();
    let mut cmd = redis::cmd(&args[0]);
    for a in &args[1..] {
        cmd.arg(a);
    }
    if c.scalar_reply() {
        RawReply::Int(cmd.query::<i64>(conn).expect("scalar reply"))
    } else {
        RawReply::Ints(cmd.query::<Vec<i64>>(conn).expect("list reply"))
    }
}

/// Steps once and runs what it asks for (`None`: it asked to wait).
fn step_once(core: &FleetCore, conn: &mut redis::Connection) -> Option<Command> {
    match core.step() {
        Step::Send(c) => {
            let r = exec(conn, &c);
            core.complete(r);
            Some(c)
        }
        Step::Wait(_) => None,
        Step::Closed => panic!("closed"),
    }
}

/// Steps until the driver has nothing to send (at most `n` commands).
fn settle(core: &FleetCore, conn: &mut redis::Connection, n: usize) -> Vec<Command> {
    let mut out = vec![];
    for _ in 0..n {
        match step_once(core, conn) {
            Some(c) => out.push(c),
            None => break,
        }
    }
    out
}

fn config(pool: &str, limit: u64, budget: Option<u64>, ttl_ms: u64) -> FleetConfig {
    let mut c = FleetConfig::new(PoolName::new(pool).unwrap());
    c.max_concurrent = limit;
    c.budget = budget;
    c.lease_ttl = MS(ttl_ms);
    c.queue_timeout = Duration::from_secs(3600);
    c.max_queue = 64;
    c
}

fn server() -> Option<(RedisServer, redis::Connection)> {
    let srv = RedisServer::start()?;
    let mut conn = srv.conn();
    common::load_library(&mut conn);
    Some((srv, conn))
}

fn two_classes() -> [ClassSpec; 2] {
    [
        ClassSpec {
            priority: 0,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            priority: 9,
            ..ClassSpec::DEFAULT
        },
    ]
}

fn table(classes: &[ClassSpec]) -> ClassTable<'_> {
    ClassTable {
        lending: false,
        shed: false,
        rates: Default::default(),
        classes,
        reserve: PriorityReserve::default(),
    }
}

// -------------------------------------------------------------------------------------------
// F1: (report-review-fleet.md) a classed fleet bulkhead admits past the lease's deadline (C42).
// -------------------------------------------------------------------------------------------

/// With the driver stuck in a call (a hung Redis, a transport without a timeout) past the
/// lease's deadline, a queued waiter must not be granted — not even by a release's handoff
/// (§16.3: "Past it no admission is granted, not even a release's handoff to a queued waiter
/// (the dispatcher checks it too), whatever the driver is doing"). `classed` picks a fleet
/// bulkhead with admission classes (§16.10) or without (the control, which holds).
fn admits_past_deadline(classed: bool) -> (bool, bool) {
    let Some((_srv, mut conn)) = server() else {
        return (false, false);
    };
    let clock = VClock::new();
    let classes = two_classes();
    let t = table(&classes);
    let core = FleetCore::with_local(
        &config("c42classes", 1, None, 1000),
        Some(clock.clone()),
        Local {
            classes: classed.then_some(&t),
            observer: None,
        },
    )
    .unwrap();
    let bh = core.bulkhead().clone();
    // A waiter (nothing granted yet: the block is empty), then the first block of 1 arrives.
    let first = match bh.admit(&Request::new(1).class(0), None) {
        Decision::Queued(w) => w,
        _ => panic!("the block is empty: it must queue"),
    };
    settle(&core, &mut conn, 4);
    let mut first = first;
    let call = match first.poll(None) {
        Poll::Ready(Ok(c)) => c,
        other => panic!("the first block must grant the waiter: {other:?}"),
    };
    // A second waiter of the same class queues behind the call in flight.
    let Decision::Queued(mut second) = bh.admit(&Request::new(1).class(0), None) else {
        panic!("the block of 1 is in use: it must queue")
    };
    // The lease's deadline (1000 ms − 1 % − 2 ms after the send) passes while the driver is
    // stuck in a call: no step, no complete.
    clock.advance(MS(1200));
    // 1) a release hands off to the queued waiter?
    drop(call);
    let handoff = match second.poll(None) {
        Poll::Ready(Ok(c)) => {
            drop(c); // the block is free again, still past the deadline
            true
        }
        _ => {
            let _ = second.cancel(hullguard_core::Reason::Timeout);
            false
        }
    };
    // 2) a new waiting admission on the expired lease, the block free?
    let fresh = match bh.admit(&Request::new(1).class(0), None) {
        Decision::Granted(_) => true,
        Decision::Queued(mut w) => matches!(w.poll(None), Poll::Ready(Ok(_))),
        Decision::Rejected(_) => false,
    };
    (handoff, fresh)
}

#[test]
fn control_a_plain_fleet_bulkhead_grants_nobody_past_the_deadline() {
    let (handoff, fresh) = admits_past_deadline(false);
    assert!(!handoff && !fresh, "handoff {handoff}, fresh {fresh}");
}

#[test]
fn a_classed_fleet_bulkhead_grants_nobody_past_the_deadline() {
    let (handoff, fresh) = admits_past_deadline(true);
    assert!(
        !handoff && !fresh,
        "C42 broken with classes: a waiter was granted on an expired lease \
         (release handoff: {handoff}, new waiting admission: {fresh})"
    );
}

// -------------------------------------------------------------------------------------------
// F5: (report-review-fleet.md) events are delivered under the FleetCore's lease lock: an observer that reads
// the fleet bulkhead's stats deadlocks the driver.
// -------------------------------------------------------------------------------------------

struct StatsOnReconfigure {
    core: OnceLock<Weak<FleetCore>>,
    seen: Mutex<Vec<u64>>,
}

impl Observer for StatsOnReconfigure {
    fn on_event(&self, e: &Event<'_>) {
        if let Event::Reconfigure { limit, .. } = *e {
            // What a listener does: log the lease state with the new block.
            if let Some(core) = self.core.get().and_then(Weak::upgrade) {
                let s = core.stats();
                self.seen.lock().unwrap().push(s.lease.held.max(limit));
            }
        }
    }
}

#[test]
fn an_observer_that_reads_stats_on_reconfigure_does_not_deadlock_the_driver() {
    let Some((srv, _conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let obs = Arc::new(StatsOnReconfigure {
        core: OnceLock::new(),
        seen: Mutex::new(vec![]),
    });
    let shared: SharedObserver = obs.clone();
    let core = Arc::new(
        FleetCore::with_local(
            &config("evdeadlock", 4, Some(100), 1000),
            Some(clock.clone()),
            Local {
                classes: None,
                observer: Some(shared),
            },
        )
        .unwrap(),
    );
    obs.core.set(Arc::downgrade(&core)).unwrap();
    // Demand, so the first sync grows the block (a reconfigure event).
    let _w = core.bulkhead().admit(&Request::new(1).cost(10), None);
    let (tx, rx) = mpsc::channel();
    let driver = {
        let core = core.clone();
        let url = srv.url();
        thread::spawn(move || {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            settle(&core, &mut conn, 4);
            let _ = tx.send(());
        })
    };
    let done = rx.recv_timeout(Duration::from_secs(5)).is_ok();
    assert!(
        done,
        "the driver deadlocked: FleetCore::apply emits `reconfigure` while holding the lease \
         lock, and the observer's FleetCore::stats() takes that lock again"
    );
    driver.join().unwrap();
}

// -------------------------------------------------------------------------------------------
// F6: (report-review-fleet.md) a class without a ceiling of its own is capped at the *option* max_concurrent
// (a new pool's limit), not at the block.
// -------------------------------------------------------------------------------------------

#[test]
fn a_class_without_a_ceiling_may_use_the_whole_block() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let classes = two_classes();
    let t = table(&classes);
    // Opened with max_concurrent 2 (the limit a *new* pool starts with), the fleet limit then
    // raised to 10 by apply_limits (or the pool created by another process with a larger one).
    let core = FleetCore::with_local(
        &config("classceiling", 2, None, 1000),
        Some(clock.clone()),
        Local {
            classes: Some(&t),
            observer: None,
        },
    )
    .unwrap();
    let snap = LimitsSnapshot::new(1).limit(10);
    let cmds = core.apply_limits(&snap).unwrap();
    let replies: Vec<_> = cmds.iter().map(|c| exec(&mut conn, c)).collect();
    assert!(core.limits_applied(&snap, &replies).unwrap().applied());
    settle(&core, &mut conn, 4);
    assert_eq!(
        core.bulkhead().max_concurrent(),
        10,
        "the ceiling follows the fleet limit"
    );
    let bh = core.bulkhead().clone();
    // Five calls of class 0 (no ceiling of its own): they queue, the block grows to cover them.
    let mut waiters: Vec<_> = (0..5)
        .map(|_| match bh.admit(&Request::new(1).class(0), None) {
            Decision::Queued(w) => w,
            _ => panic!("queued (empty block)"),
        })
        .collect();
    for _ in 0..4 {
        clock.advance(MS(10));
        settle(&core, &mut conn, 4);
    }
    let block = core.stats().lease.local_limit;
    let mut calls = vec![];
    for w in waiters.iter_mut() {
        if let Poll::Ready(Ok(c)) = w.poll(None) {
            calls.push(c); // held: the calls stay in flight
        }
    }
    let granted = calls.len();
    eprintln!("class 0: {:?}", bh.class_stats(0));
    assert!(block >= 5, "the block grew to {block}");
    assert_eq!(
        granted, 5,
        "a block of {block}, yet class 0 (no ceiling) was granted only {granted}: capped at \
         max_concurrent = 2"
    );
    // And a weight the fleet limit allows is refused outright for the class.
    let d = bh.admit(&Request::new(5).class(1).no_wait(), None);
    assert!(
        !matches!(
            &d,
            Decision::Rejected(hullguard_core::AcquireError::Rejected(r))
                if r.detail().reason == hullguard_core::Reason::ConcurrencyLimit
                    && r.detail().class.is_some()
        ),
        "weight 5 ≤ fleet limit 10 refused by the class's implicit ceiling"
    );
}

// -------------------------------------------------------------------------------------------
// F4: (report-review-fleet.md) with a fleet budget, the local permit field is 20 bits: a permit block above
// MAX_CONCURRENT_WITH_BUDGET (2^18 − 1) is installed unchecked and overflows it.
// -------------------------------------------------------------------------------------------

#[test]
fn core_a_leased_block_above_the_budget_layouts_permit_range_is_refused_or_works() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 10,
        max_queue: 10,
        budget: Some(1000),
        ..Config::DEFAULT
    })
    .unwrap();
    bh.set_lease(0).unwrap();
    bh.set_lease_budget_ceiling(1000).unwrap();
    bh.set_lease_budget(1000).unwrap();
    let r = bh.set_lease(600_000);
    if r.is_ok() {
        let s = bh.stats();
        assert!(
            s.available >= 0 && bh.try_acquire(1).is_ok(),
            "set_lease(600000) accepted on a bulkhead with a budget, then available = {} and \
             an acquire of 1 is refused: the 20-bit permit field wrapped",
            s.available
        );
    }
}

#[test]
fn a_fleet_budget_pool_with_a_large_fleet_limit_keeps_admitting() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let core = FleetCore::with_local(
        &config("bigblock", 10, Some(1000), 1000),
        Some(clock.clone()),
        Local::default(),
    )
    .unwrap();
    // A fleet limit of a million permits is refused on a budget pool, naming `limit` (the fix:
    // with a budget the core's permit field holds at most 2^18 - 1).
    let e = core
        .apply_limits(&LimitsSnapshot::new(1).limit(1_000_000))
        .unwrap_err();
    assert_eq!(e.option(), Some("limit"), "{e}");
    // The largest allowed one works.
    let snap = LimitsSnapshot::new(1).limit(hullguard_core::MAX_CONCURRENT_WITH_BUDGET);
    let cmds = core.apply_limits(&snap).unwrap();
    let replies: Vec<_> = cmds.iter().map(|c| exec(&mut conn, c)).collect();
    assert!(core.limits_applied(&snap, &replies).unwrap().applied());
    settle(&core, &mut conn, 4);
    let bh = core.bulkhead().clone();
    // One heavy request (weight within the fleet limit: valid), then a light one.
    let Decision::Queued(mut heavy) = bh.admit(&Request::new(200_000), None) else {
        panic!("a weight within the fleet limit waits for the block")
    };
    for _ in 0..4 {
        clock.advance(MS(10));
        settle(&core, &mut conn, 4);
    }
    let held = core.stats().lease.held;
    let s = bh.stats();
    assert!(
        matches!(heavy.poll(None), Poll::Ready(Ok(_))),
        "Redis granted a block of {held}, the local core shows limit {} available {}: \
         the waiter was never granted (permit field overflow)",
        s.limit,
        s.available
    );
}

// -------------------------------------------------------------------------------------------
// F3: (report-review-fleet.md) units (and permits) granted to queued waiters but not yet claimed are not
// reported busy: a sync in that window gives them away to another holder.
// -------------------------------------------------------------------------------------------

#[test]
fn units_granted_to_waiters_not_yet_claimed_stay_counted_in_redis() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let (ca, cb) = (VClock::new(), VClock::new());
    let a = FleetCore::with_local(
        &config("unclaimed", 10, Some(100), 3000),
        Some(ca.clone()),
        Local::default(),
    )
    .unwrap();
    let b = FleetCore::with_local(
        &config("unclaimed", 10, Some(100), 3000),
        Some(cb.clone()),
        Local::default(),
    )
    .unwrap();
    let bha = a.bulkhead().clone();
    // Five waiters of 20 units each on A (the blocks are empty): they queue.
    let mut waiters: Vec<_> = (0..5)
        .map(|_| match bha.admit(&Request::new(1).cost(20), None) {
            Decision::Queued(w) => w,
            _ => panic!("queued"),
        })
        .collect();
    for _ in 0..4 {
        ca.advance(MS(10));
        settle(&a, &mut conn, 4);
    }
    let s = bha.stats().budget.unwrap();
    assert_eq!(
        s.granted_unclaimed, 100,
        "the grants landed, not yet claimed: {s:?}"
    );
    // A's next beat (their owners have not run yet: a GIL switch, a busy executor).
    ca.advance(MS(1010));
    let sent = settle(&a, &mut conn, 4);
    let budget_sync: Vec<_> = sent
        .iter()
        .filter(|c| c.keys.0[0].contains("budget:") && c.function == "hg_sync")
        .map(|c| c.argv.clone())
        .collect();
    // B asks for 50 units.
    let bhb = b.bulkhead().clone();
    let Decision::Queued(mut wb) = bhb.admit(&Request::new(1).cost(50), None) else {
        panic!("queued")
    };
    for _ in 0..6 {
        cb.advance(MS(10));
        settle(&b, &mut conn, 4);
    }
    let b_call = match wb.poll(None) {
        Poll::Ready(Ok(c)) => Some(c),
        _ => None,
    };
    // Now A's owners run: every grant is claimed.
    let mut a_calls = vec![];
    for w in waiters.iter_mut() {
        if let Poll::Ready(Ok(c)) = w.poll(None) {
            a_calls.push(c);
        }
    }
    let in_flight = 20 * a_calls.len() as u64 + if b_call.is_some() { 50 } else { 0 };
    assert!(
        in_flight <= 100,
        "{in_flight} units in flight across the fleet > the fleet budget 100: A's budget sync \
         {budget_sync:?} reported busy without its {} granted-unclaimed units, Redis gave them \
         to B",
        s.granted_unclaimed
    );
}

// -------------------------------------------------------------------------------------------
// F7: (report-review-fleet.md) a block below the class floors starves every class without a floor, even with
// the whole block idle (the floors are "protected again once the block covers them", so
// below it they should be first-come, not a wall).
// -------------------------------------------------------------------------------------------

#[test]
fn a_block_below_the_floors_still_admits_a_floorless_class_on_idle_permits() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let classes = [
        ClassSpec {
            priority: 0,
            floor: 3,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            priority: 9,
            ..ClassSpec::DEFAULT
        },
    ];
    // Floors without lending are refused on a fleet bulkhead, naming `lending` (the fix: with
    // lending, idle floor units are borrowable, so nobody starves below the floors).
    let e = FleetCore::with_local(
        &config("floors", 10, None, 1000),
        Some(clock.clone()),
        Local {
            classes: Some(&table(&classes)),
            observer: None,
        },
    )
    .unwrap_err();
    assert_eq!(e.option(), Some("lending"), "{e}");
    let t = ClassTable {
        lending: true,
        ..table(&classes)
    };
    // The option max_concurrent is 10 (the floors fit it); the fleet limit is 2.
    let core = FleetCore::with_local(
        &config("floors", 10, None, 1000),
        Some(clock.clone()),
        Local {
            classes: Some(&t),
            observer: None,
        },
    )
    .unwrap();
    let snap = LimitsSnapshot::new(1).limit(2);
    let cmds = core.apply_limits(&snap).unwrap();
    let replies: Vec<_> = cmds.iter().map(|c| exec(&mut conn, c)).collect();
    assert!(core.limits_applied(&snap, &replies).unwrap().applied());
    let bh = core.bulkhead().clone();
    let Decision::Queued(mut w) = bh.admit(&Request::new(1).class(1), None) else {
        panic!("queued (no block yet)")
    };
    for _ in 0..6 {
        clock.advance(MS(20));
        settle(&core, &mut conn, 4);
    }
    let s = bh.stats();
    assert!(
        matches!(w.poll(None), Poll::Ready(Ok(_))),
        "class 1 waits forever: block {} with {} in flight, class 0 idle (its floor 3 is \
         above the block, so the shared pool is block − floors = 0)",
        s.limit,
        s.active
    );
}

// -------------------------------------------------------------------------------------------
// Held (expected to pass): C42 late grant on the budget table, the Lua key check, an epoch
// change re-applying the budget.
// -------------------------------------------------------------------------------------------

#[test]
fn held_a_late_budget_grant_is_given_back_on_the_budget_table() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let core = FleetCore::with_local(
        &config("lategrant", 4, Some(100), 1000),
        Some(clock.clone()),
        Local::default(),
    )
    .unwrap();
    let _w = core.bulkhead().admit(&Request::new(1).cost(10), None);
    // Permits' first sync: in time.
    let Step::Send(p) = core.step() else { panic!() };
    assert!(!p.keys.0[0].contains("budget:"));
    let r = exec(&mut conn, &p);
    core.complete(r);
    // Budget's first sync: its reply arrives after the deadline (1000 − 10 − 2 ms).
    let Step::Send(b) = core.step() else { panic!() };
    assert!(b.keys.0[0].contains("budget:") && b.function == "hg_sync");
    let r = exec(&mut conn, &b);
    clock.advance(MS(995));
    core.complete(r);
    let s = core.stats();
    assert_eq!(
        s.budget_lease.as_ref().unwrap().counters.late_grants_total,
        1
    );
    assert_eq!(s.lease.counters.late_grants_total, 0);
    assert_eq!(s.stats.budget.unwrap().limit, 0, "never used");
    // The next command gives it back, on the budget's keys.
    let mut sent = vec![];
    let rel = loop {
        let c = step_once(&core, &mut conn).expect("a command");
        if c.function == "hg_release" {
            break c;
        }
        sent.push(c);
        assert!(sent.len() < 4, "no release: {sent:?}");
    };
    assert!(rel.keys.0[0].contains("budget:"), "{rel:?}");
    let held: Option<i64> = redis::cmd("HGET")
        .arg("{hg:lategrant}:budget:held")
        .arg(core.holder())
        .query(&mut conn)
        .unwrap();
    assert_eq!(held, None, "the late budget block is back");
    let held: Option<i64> = redis::cmd("HGET")
        .arg("{hg:lategrant}:held")
        .arg(core.holder())
        .query(&mut conn)
        .unwrap();
    assert!(held.is_some(), "the permits' lease is untouched");
}

#[test]
fn held_the_lua_key_check_refuses_mixed_tables() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = PoolName::new("mix").unwrap();
    let (k, b) = (p.keys(), p.keys_of(hullguard_fleet::Dimension::Budget));
    let mixes: Vec<Vec<String>> = vec![
        // permits cfg, budget rest
        std::iter::once(k.0[0].clone())
            .chain(b.0[1..].iter().cloned())
            .collect(),
        // budget cfg, permits rest
        std::iter::once(b.0[0].clone())
            .chain(k.0[1..].iter().cloned())
            .collect(),
        // one key of the other table in the middle
        {
            let mut v = b.0.to_vec();
            v[3] = k.0[3].clone();
            v
        },
        // another infix
        k.0.iter()
            .map(|s| s.replace("{hg:mix}:", "{hg:mix}:budget:budget:"))
            .collect(),
        k.0.iter()
            .map(|s| s.replace("{hg:mix}:", "{hg:mix}:Budget:"))
            .collect(),
        // another pool's budget table under this pool's cfg
        std::iter::once(k.0[0].clone())
            .chain(
                PoolName::new("mix:budget").unwrap().keys().0[1..]
                    .iter()
                    .cloned(),
            )
            .collect(),
    ];
    for keys in mixes {
        for (f, argv) in [
            (
                "hg_sync",
                vec!["h", "0", "1", "0", "0", "1000", "5", "1000", "10"],
            ),
            ("hg_release", vec!["h", "1"]),
            ("hg_set_limit", vec!["5", "1", "5"]),
            ("hg_stats", vec![]),
        ] {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(f).arg(6);
            for key in &keys {
                cmd.arg(key);
            }
            for a in &argv {
                cmd.arg(*a);
            }
            let r: redis::RedisResult<redis::Value> = cmd.query(&mut conn);
            assert!(r.is_err(), "{f} accepted {keys:?}: {r:?}");
        }
    }
}

#[test]
fn held_an_epoch_change_sets_the_applied_budget_again() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let core = FleetCore::with_local(
        &config("epoch", 4, Some(100), 1000),
        Some(clock.clone()),
        Local::default(),
    )
    .unwrap();
    settle(&core, &mut conn, 4);
    let snap = LimitsSnapshot::new(3).budget(700);
    let cmds = core.apply_limits(&snap).unwrap();
    let replies: Vec<_> = cmds.iter().map(|c| exec(&mut conn, c)).collect();
    assert!(core.limits_applied(&snap, &replies).unwrap().applied());
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    common::load_library(&mut conn);
    for _ in 0..8 {
        clock.advance(MS(400));
        settle(&core, &mut conn, 4);
    }
    let limit: Option<u64> = redis::cmd("HGET")
        .arg("{hg:epoch}:budget:cfg")
        .arg("limit")
        .query(&mut conn)
        .unwrap();
    assert_eq!(limit, Some(700));
    let s = core.stats();
    assert_eq!(s.budget_lease.unwrap().counters.epoch_changes_total, 1);
    assert_eq!(s.lease.counters.epoch_changes_total, 1);
}

// -------------------------------------------------------------------------------------------
// F9: (report-review-fleet.md) apply_limits(limit, budget) whose second command fails: the first was set in
// Redis but never recorded (not set again after a state loss); a retry of the same snapshot
// then reports it stale.
// -------------------------------------------------------------------------------------------

use hullguard_fleet::{
    FleetBulkhead, Transport, TransportError,
    protocol::Field,
    redis_transport::{Reconnecting, RedisTransport},
};

/// A transport whose next `hg_set_limit` on the budget's table fails (a network blip).
struct FailBudgetSetLimit {
    inner: RedisTransport<Reconnecting>,
    fail: Arc<AtomicU64>,
}

impl Transport for FailBudgetSetLimit {
    fn ensure_library(&mut self, keys: &hullguard_fleet::pool::Keys) -> Result<(), TransportError> {
        self.inner.ensure_library(keys)
    }
    fn call_ints(
        &mut self,
        function: &str,
        keys: &hullguard_fleet::pool::Keys,
        argv: &[String],
    ) -> Result<Vec<i64>, TransportError> {
        if function == "hg_set_limit"
            && keys.0[0].contains("budget:")
            && self.fail.swap(0, SeqCst) == 1
        {
            return Err(TransportError {
                kind: hullguard_fleet::transport::TransportErrorKind::Io,
                message: "connection reset".into(),
            });
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
fn apply_limits_with_both_values_and_a_failed_second_call_keeps_the_first() {
    let Some((srv, mut conn)) = server() else {
        return;
    };
    let fail = Arc::new(AtomicU64::new(1));
    let client = redis::Client::open(srv.url()).unwrap();
    let t = FailBudgetSetLimit {
        inner: RedisTransport::new(Reconnecting::new(client, MS(500))),
        fail: fail.clone(),
    };
    let mut cfg = config("partial", 4, Some(100), 600);
    cfg.queue_timeout = Duration::from_secs(10);
    let bh = FleetBulkhead::open(t, cfg).unwrap();
    let snap = LimitsSnapshot::new(2).limit(8).budget(300);
    let e = bh.apply_limits(&snap);
    assert!(e.is_err(), "the budget's call failed");
    let limit: Option<u64> = redis::cmd("HGET")
        .arg("{hg:partial}:cfg")
        .arg("limit")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        limit,
        Some(8),
        "the fleet limit is set in Redis all the same"
    );
    // The caller retries the same snapshot (it got an error): the limit is now 'stale'.
    let retry = bh.apply_limits(&snap).unwrap();
    // Redis loses its state: the limit this process set must be set again (§16.3).
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    common::load_library(&mut conn);
    let end = std::time::Instant::now() + Duration::from_secs(5);
    let mut restored = None;
    while std::time::Instant::now() < end {
        thread::sleep(MS(50));
        restored = redis::cmd("HGET")
            .arg("{hg:partial}:cfg")
            .arg("limit")
            .query(&mut conn)
            .unwrap();
        let budget: Option<u64> = redis::cmd("HGET")
            .arg("{hg:partial}:budget:cfg")
            .arg("limit")
            .query(&mut conn)
            .unwrap();
        if restored == Some(8) && budget == Some(300) {
            break;
        }
    }
    assert!(
        retry.applied() && restored == Some(8),
        "retry of the same snapshot: {retry:?} (applied: {}); after FLUSHALL the fleet limit \
         is {restored:?}, not the 8 this process set",
        retry.applied()
    );
}

// -------------------------------------------------------------------------------------------
// F2: (report-review-fleet.md) a request's own observe mode of the budget admits past the leased budget block
// (only the permits' observe bit is stripped on a leased bulkhead).
// -------------------------------------------------------------------------------------------

#[test]
fn a_requests_own_budget_observe_mode_never_admits_past_the_leased_budget_block() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let (ca, cb) = (VClock::new(), VClock::new());
    let a = FleetCore::with_local(
        &config("observe", 10, Some(100), 1000),
        Some(ca.clone()),
        Local::default(),
    )
    .unwrap();
    let b = FleetCore::with_local(
        &config("observe", 10, Some(100), 1000),
        Some(cb.clone()),
        Local::default(),
    )
    .unwrap();
    // B holds the whole fleet budget.
    let Decision::Queued(mut wb) = b.bulkhead().admit(&Request::new(1).cost(100), None) else {
        panic!("queued")
    };
    for _ in 0..4 {
        cb.advance(MS(10));
        settle(&b, &mut conn, 4);
    }
    let Poll::Ready(Ok(_b_call)) = wb.poll(None) else {
        panic!("B holds 100 units")
    };
    // A gets a permit block and a (empty) budget block.
    let _warm = a.bulkhead().admit(&Request::new(1), None);
    for _ in 0..4 {
        ca.advance(MS(10));
        settle(&a, &mut conn, 4);
    }
    assert_eq!(
        a.stats().stats.budget.unwrap().limit,
        0,
        "A's budget block is empty"
    );
    // A request in its own observe mode of the budget, no wait.
    let d = a.bulkhead().admit(
        &Request::new(1)
            .cost(60)
            .observe(hullguard_core::Observe::Budget)
            .no_wait(),
        None,
    );
    assert!(
        !matches!(d, Decision::Granted(_)),
        "A admitted 60 units on an empty budget block while B holds the whole fleet budget \
         of 100: 160 units in flight"
    );
}

// -------------------------------------------------------------------------------------------
// F8: (report-review-fleet.md) a sync reply that left Redis before apply_limits(budget) but is handed over after
// it puts the old fleet budget back as the ceiling: a waiter the new budget allows is rejected.
// -------------------------------------------------------------------------------------------

#[test]
fn a_sync_reply_older_than_apply_limits_does_not_reject_a_waiter_the_new_budget_allows() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let core = FleetCore::with_local(
        &config("raced", 4, Some(100), 1000),
        Some(clock.clone()),
        Local::default(),
    )
    .unwrap();
    let _demand = core.bulkhead().admit(&Request::new(1).cost(10), None);
    settle(&core, &mut conn, 4);
    // The driver's next budget sync runs in Redis (its reply on the way back to the driver)…
    clock.advance(MS(400));
    let budget_sync = loop {
        match core.step() {
            Step::Send(c) if c.keys.0[0].contains("budget:") => break c,
            Step::Send(c) => {
                let r = exec(&mut conn, &c);
                core.complete(r);
            }
            other => panic!("{other:?}"),
        }
    };
    let late_reply = exec(&mut conn, &budget_sync);
    // …while the user's thread raises the fleet budget to 300 (the transport serialises the
    // two calls; the driver hands its reply over just after).
    let snap = LimitsSnapshot::new(1).budget(300);
    let cmds = core.apply_limits(&snap).unwrap();
    let replies: Vec<_> = cmds.iter().map(|c| exec(&mut conn, c)).collect();
    assert!(core.limits_applied(&snap, &replies).unwrap().applied());
    // A cost the new fleet budget allows: it waits for the block.
    let Decision::Queued(mut w) = core.bulkhead().admit(&Request::new(1).cost(250), None) else {
        panic!("a cost within the new fleet budget waits")
    };
    core.complete(late_reply);
    let r = w.poll(None);
    assert!(
        r.is_pending() || matches!(r, Poll::Ready(Ok(_))),
        "the waiter of cost 250 ≤ the fleet budget 300 was rejected: {r:?} (the older reply \
         put the ceiling back to 100)"
    );
}

// -------------------------------------------------------------------------------------------
// F10: (report-review-fleet.md) class rates are "refused by name" in every binding's option parser, but the
// Rust API (`Local { classes }`, `FleetBulkhead::open_with`) takes a table with rates.
// -------------------------------------------------------------------------------------------

#[test]
fn a_class_table_with_rates_is_refused_by_the_rust_api_too() {
    let classes = two_classes();
    let mut t = table(&classes);
    t.rates.requests = Some(hullguard_core::config::classes::Rate {
        amount: 1,
        per: Duration::from_secs(1),
        burst: 1,
    });
    let r = FleetCore::with_local(
        &config("rates", 4, None, 1000),
        Some(VClock::new()),
        Local {
            classes: Some(&t),
            observer: None,
        },
    );
    assert!(
        r.is_err(),
        "class rates are not fleet-wide (§16.10: 'Class rates stay refused'), yet accepted"
    );
}

#[test]
fn held_the_earlier_of_the_two_deadlines_governs() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let clock = VClock::new();
    let core = FleetCore::with_local(
        &config("twodeadlines", 4, Some(100), 1000),
        Some(clock.clone()),
        Local::default(),
    )
    .unwrap();
    let bh = core.bulkhead().clone();
    let mut ws: Vec<_> = (0..2)
        .map(|_| match bh.admit(&Request::new(1).cost(10), None) {
            Decision::Queued(w) => w,
            _ => panic!("queued"),
        })
        .collect();
    // The permits' lease, sent at t = 0.
    let Step::Send(p) = core.step() else { panic!() };
    assert!(!p.keys.0[0].contains("budget:"));
    let r = exec(&mut conn, &p);
    core.complete(r);
    // The budget's, sent at t = 100 ms: deadline 100 + 1000 − 12 = 1088 ms.
    clock.advance(MS(100));
    let Step::Send(b) = core.step() else { panic!() };
    assert!(b.keys.0[0].contains("budget:"));
    let r = exec(&mut conn, &b);
    core.complete(r);
    // Both granted: claim them, keep one in flight (the block stays >= 2), end the other.
    let mut calls: Vec<_> = ws
        .iter_mut()
        .map(|w| match w.poll(None) {
            Poll::Ready(Ok(c)) => c,
            other => panic!("{other:?}"),
        })
        .collect();
    drop(calls.pop());
    // Renew only the permits from then on; every budget command fails (Redis refused it).
    let mut t = 100;
    while t < 1080 {
        clock.advance(MS(20));
        t += 20;
        match core.step() {
            Step::Send(c) if c.keys.0[0].contains("budget:") => core.fail("ERR injected"),
            Step::Send(c) => {
                let r = exec(&mut conn, &c);
                core.complete(r);
            }
            _ => {}
        }
    }
    let s = core.stats();
    assert!(
        s.lease.lease_left.unwrap() > MS(500),
        "permits renewed: {:?}",
        s.lease
    );
    // t = 1080: still within the budget's lease.
    let r = bh.try_acquire(1);
    assert!(
        r.is_ok(),
        "before the budget's deadline: {:?} {:?}",
        r.err(),
        core.stats()
    );
    // t = 1090: past it (no step ran: the core's own check).
    clock.advance(MS(10));
    assert!(
        bh.try_acquire(1).is_err(),
        "admitted past the budget's deadline"
    );
}
