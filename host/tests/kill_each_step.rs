//! A4.2 `host_kill9_each_step`: for every named protocol step (`crash::Step::ALL`), a child
//! process runs an operation that passes that step with `HG_CRASH_AT=<step>` and dies there
//! (`abort()`: SIGABRT proves the step was reached); then this process checks that a reaper
//! leaves nothing behind — Σ permits 0, no call in flight, nothing queued, no ticket published —
//! and that a full-limit acquire gets through (the queue drains past whatever the dead left).
//!
//! Needs the `crash-hook` feature (`make host-test`).

#![cfg(feature = "crash-hook")]

mod common;

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use common::{HostEnv, Proc, RawSegment, Spawn, SpawnHost, TempDir, env_str, say};
use hullguard_core::Request;
use hullguard_host::{
    HostBulkhead,
    crash::Step,
    layout::{LeaseState, s},
};

const SEC: Duration = Duration::from_secs(1);
/// The host-wide limit of every scenario.
const LIMIT: u64 = 2;

/// Not a test: the entry point of every child role (returns at once in the parent).
#[test]
fn child() {
    let Some(role) = common::role() else { return };
    match role.as_str() {
        "holder" => common::holder(),
        "victim" => victim(),
        other => common::die(format!("unknown role {other:?}")),
    }
}

/// How a child reaches a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// It attaches (claims a slot).
    Attach,
    /// A fast-path acquire.
    Fast,
    /// An acquire with a cost, then its release.
    Release,
    /// A queued acquire (the parent holds the whole limit) that times out.
    Queued,
    /// Two threads race full-limit fast-path acquires until one's tentative bump does not fit.
    Race,
    /// It observes a holder (with a queued waiter) that is SIGKILLed: its keeper reclaims it.
    Reap,
    /// It observes a holder (with a queued waiter) that is SIGSTOPped: its keeper expires it.
    Expire,
}

impl Scenario {
    /// The scenario that passes `step` (exhaustive: a new step needs a scenario).
    fn of(step: Step) -> Scenario {
        match step {
            Step::AcquireBump | Step::AcquireCheck => Scenario::Fast,
            Step::AcquireUndo => Scenario::Race,
            Step::ReleaseHeld | Step::ReleaseCost => Scenario::Release,
            Step::PublishTicket | Step::PublishHead | Step::CancelUnpublish => Scenario::Queued,
            Step::ClaimWords | Step::ClaimLease => Scenario::Attach,
            Step::ReclaimLease | Step::ReclaimWords | Step::ReclaimHead | Step::ReclaimFree => {
                Scenario::Reap
            }
            Step::ExpireLease | Step::ExpireWords => Scenario::Expire,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scenario::Attach => "attach",
            Scenario::Fast => "fast",
            Scenario::Release => "release",
            Scenario::Queued => "queued",
            Scenario::Race => "race",
            Scenario::Reap | Scenario::Expire => "observer",
        }
    }
}

/// Role `victim`: runs `HG_SCENARIO` (its `HG_CRASH_AT` step should abort it on the way); says
/// `passed …` if it got through (the step was not reached), `ready` for an observer, then
/// parks.
fn victim() -> ! {
    let env = HostEnv::from_env();
    let scenario = env_str("HG_SCENARIO");
    let bh: &'static HostBulkhead = Box::leak(Box::new(env.open()));
    match scenario.as_str() {
        "attach" => say("passed"),
        "fast" => {
            let p = bh.try_acquire(1).unwrap_or_else(|e| common::die(e));
            say("passed");
            std::mem::forget(p); // held until the process goes
        }
        "release" => {
            let p = bh
                .admit_blocking(&Request::new(1).cost(5))
                .unwrap_or_else(|e| common::die(e));
            let r = common::lease_word(p.release());
            say(format!("passed {r}"));
        }
        "queued" => {
            let r = bh.acquire_blocking(1, Some(Duration::from_millis(300)));
            say(format!("passed {:?}", r.map(|p| p.weight())));
        }
        "race" => {
            let until = Instant::now() + 20 * SEC;
            let spin = move || {
                while Instant::now() < until {
                    if let Ok(p) = bh.try_acquire(env.limit) {
                        drop(p);
                    }
                }
            };
            let other = std::thread::spawn(spin);
            spin();
            let _ = other.join();
            say("passed");
        }
        "observer" => say("ready"),
        other => common::die(format!("unknown scenario {other:?}")),
    }
    common::park()
}

fn spawn_victim(env: &HostEnv, scenario: Scenario, step: Step) -> Proc {
    Spawn::new("victim", &format!("victim@{}", step.name()))
        .host(env)
        .env("HG_SCENARIO", scenario.name())
        .env("HG_CRASH_AT", step.name())
        .spawn()
}

/// A holder of the whole limit with one more call queued behind it (its ticket published).
fn queued_holder(env: &HostEnv) -> (Proc, usize) {
    let mut h = Spawn::new("holder", "holder")
        .host(env)
        .env("HG_WEIGHT", LIMIT)
        .spawn();
    let slot = h.expect("held", 10 * SEC).num(0) as usize;
    h.send("queue");
    h.expect("queueing", 10 * SEC);
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let raw = RawSegment::open(&env.dir.join(format!("hullguard.{euid}.{}", env.name)));
    common::poll(10 * SEC, Duration::from_millis(2), || {
        raw.tickets().contains(&slot).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the holder's waiter never published its ticket\n{}",
            h.log()
        )
    });
    (h, slot)
}

/// What one step's run measured.
#[derive(Debug)]
struct Outcome {
    /// How long the parent's full-limit acquire waited.
    drained: Duration,
    /// Reclaimed / expired slots the segment counted.
    reclaimed: (u64, u64),
}

fn run_step(step: Step) -> Outcome {
    let scenario = Scenario::of(step);
    let dir = TempDir::new(&format!("step-{}", step.name()));
    let mut env = HostEnv::new(dir.path(), "steps", LIMIT);
    env.budget = 100;
    let mut parent: Option<HostBulkhead> = None;
    // A stopped holder stays stopped through the check (its slot must not block the host).
    let mut stopped: Option<(Proc, usize)> = None;
    match scenario {
        Scenario::Attach | Scenario::Fast | Scenario::Release | Scenario::Race => {
            spawn_victim(&env, scenario, step).expect_signal(libc::SIGABRT, 30 * SEC);
        }
        Scenario::Queued => {
            let bh = env.open();
            let all = bh
                .acquire_blocking(LIMIT, Some(10 * SEC))
                .expect("the parent takes the whole limit");
            spawn_victim(&env, scenario, step).expect_signal(libc::SIGABRT, 30 * SEC);
            drop(all);
            parent = Some(bh);
        }
        Scenario::Reap => {
            let (mut h, _) = queued_holder(&env);
            let mut v = spawn_victim(&env, scenario, step);
            v.expect("ready", 10 * SEC);
            h.kill();
            v.expect_signal(libc::SIGABRT, 30 * SEC);
        }
        Scenario::Expire => {
            let (h, slot) = queued_holder(&env);
            let mut v = spawn_victim(&env, scenario, step);
            v.expect("ready", 10 * SEC);
            h.stop();
            v.expect_signal(libc::SIGABRT, 30 * SEC);
            stopped = Some((h, slot));
        }
    }
    // The check, from this process (attaching now if it was not: attach reaps too).
    let bh = parent.unwrap_or_else(|| env.open());
    let raw = RawSegment::open(bh.path());
    let ttl = Duration::from_millis(env.ttl_ms);
    let probe = Duration::from_millis(env.probe_ms);
    // Targets: a dead slot within a probe period of this process's wait (0.5 s is the reclaim
    // target); a stopped holder's after the lease TTL (this process observes it afresh).
    let bound = match scenario {
        Scenario::Expire => 10 * (ttl + probe),
        _ => 5 * SEC,
    };
    let t0 = Instant::now();
    let all = bh.acquire_blocking(LIMIT, Some(bound)).unwrap_or_else(|e| {
        panic!(
            "{}: the full limit was not admitted within {bound:?}: {e}\n  stats: {:?}\n  raw Σ (calls, permits) {:?}, tickets at slots {:?}, leases {:?}",
            step.name(),
            bh.stats(),
            raw.sums(),
            raw.tickets(),
            (0..raw.hwm()).map(|i| raw.lease(i)).collect::<Vec<_>>()
        )
    });
    let drained = t0.elapsed();
    drop(all);
    bh.reap();
    let st = bh.stats();
    let what = format!("{}: {st:?}", step.name());
    assert_eq!(st.stats.active, 0, "{what}");
    assert_eq!(st.in_flight, 0, "{what}");
    // A stopped holder's own waiter still exists (in its process: `queued` counts it), but
    // its ticket is withdrawn (below): it blocks nobody.
    let stopped_waiters = stopped.as_ref().map_or(0, |&(_, slot)| {
        raw.slot_word(slot, s::QUEUED).load(Ordering::SeqCst)
    });
    assert!(stopped_waiters <= 1, "{what}");
    assert_eq!(st.stats.queued, stopped_waiters, "{what}");
    assert_eq!(st.stats.budget.map(|b| b.in_use), Some(0), "{what}");
    assert_eq!(raw.sums(), (0, 0), "{what}");
    assert!(
        raw.tickets().is_empty(),
        "{what}: tickets {:?}",
        raw.tickets()
    );
    for i in 0..raw.hwm() {
        let (state, _) = raw.lease(i);
        let expected = if i == bh.slot() {
            LeaseState::Active
        } else if stopped.as_ref().is_some_and(|(_, s)| *s == i) {
            LeaseState::Expired
        } else {
            LeaseState::Free
        };
        assert_eq!(state, expected, "{what}: slot {i}");
    }
    match scenario {
        Scenario::Reap => assert!(st.reclaimed_dead_total >= 1, "{what}"),
        Scenario::Expire => assert!(st.reclaimed_expired_total >= 1, "{what}"),
        _ => {}
    }
    drop(stopped);
    Outcome {
        drained,
        reclaimed: (st.reclaimed_dead_total, st.reclaimed_expired_total),
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`).
fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// A reaper frozen (SIGSTOP) at each step of a reclaim does not keep the dead process's
/// permits: any other observer finishes the reclaim (review found a RECLAIMING slot nobody
/// else would touch).
#[test]
fn host_stopped_reaper_at_each_reclaim_step() {
    for step in [
        Step::ReclaimLease,
        Step::ReclaimWords,
        Step::ReclaimHead,
        Step::ReclaimFree,
    ] {
        let dir = TempDir::new(&format!("stop-{}", step.name()));
        let env = HostEnv::new(dir.path(), "stopped", LIMIT);
        let (mut h, _) = queued_holder(&env);
        let mut v = Spawn::new("victim", &format!("stopped@{}", step.name()))
            .host(&env)
            .env("HG_SCENARIO", "observer")
            .env("HG_CRASH_AT", step.name())
            .env("HG_CRASH_MODE", "stop")
            .spawn();
        v.expect("ready", 10 * SEC);
        h.kill();
        let t0 = Instant::now();
        while !is_stopped(v.pid()) {
            assert!(
                t0.elapsed() < 10 * SEC,
                "{}: the reaper never reached the step",
                step.name()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let bh = env.open();
        let all = bh
            .acquire_blocking(LIMIT, Some(5 * SEC))
            .unwrap_or_else(|e| panic!("{}: a frozen reaper kept the permits: {e}", step.name()));
        drop(all);
        let st = bh.stats();
        assert_eq!(
            (st.stats.active, st.in_flight),
            (0, 0),
            "{}: {st:?}",
            step.name()
        );
        v.kill();
    }
}

#[test]
fn host_kill_each_step() {
    let start = Instant::now();
    let mut failed = Vec::new();
    for step in Step::ALL {
        let t = Instant::now();
        match std::panic::catch_unwind(|| run_step(step)) {
            Ok(o) => println!(
                "{:<17} {:<8} ok: drained in {:>9.1?}, reclaimed dead/expired {:?} ({:.1?})",
                step.name(),
                Scenario::of(step).name(),
                o.drained,
                o.reclaimed,
                t.elapsed()
            ),
            Err(_) => {
                println!("{:<17} FAILED ({:.1?})", step.name(), t.elapsed());
                failed.push(step.name());
            }
        }
    }
    println!(
        "host_kill_each_step: {} steps in {:.1?}",
        Step::ALL.len(),
        start.elapsed()
    );
    assert!(failed.is_empty(), "failed steps: {failed:?}");
}
