//! Loom models of the adaptive limit's races (compiled only with `RUSTFLAGS="--cfg loom"`; run
//! by `ci/loom.sh loom_adaptive`): two finishers feeding one [`SharedController`] lose no sample
//! and leave the last applied limit equal to the controller's; limit updates applied through
//! `end_call` → `set_limit` racing `try_acquire` / release leave no permit leaked or invented.

use loom::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    thread,
};

use crate::{
    Bulkhead, ClockSource, Config, Resilience,
    adaptive::{AdaptiveConfig, Algorithm, Outcome, Sample, SharedController},
};

fn aimd(initial: u64, max: u64) -> AdaptiveConfig {
    AdaptiveConfig {
        algorithm: Algorithm::Aimd,
        initial_limit: initial,
        min_limit: 1,
        max_limit: max,
        decrease_ratio: 0.5,
        ..AdaptiveConfig::for_max_concurrent(max)
    }
}

fn sample(outcome: Outcome) -> Sample {
    Sample {
        rtt_ns: 1_000_000,
        inflight: 8,
        outcome,
    }
}

/// Two threads feed one sample each; `apply` records the last limit it was given (only the
/// runner calls it, and runners are serialised, so a plain store suffices).
fn feed_race(initial: u64, a: Outcome, b: Outcome, want_limits: &'static [u64]) {
    loom::model(move || {
        let c = Arc::new(SharedController::new(&aimd(initial, 16)).unwrap());
        let applied = Arc::new(AtomicU64::new(initial));
        let h = {
            let (c, applied) = (c.clone(), applied.clone());
            thread::spawn(move || c.feed(sample(b), |l| applied.store(l, SeqCst)))
        };
        c.feed(sample(a), |l| applied.store(l, SeqCst));
        h.join().unwrap();
        let s = c.stats();
        assert_eq!(s.samples_total, 2, "no sample lost: {s:?}");
        assert_eq!(c.dropped(), 0);
        assert_eq!(
            applied.load(SeqCst),
            s.limit,
            "last applied = controller: {s:?}"
        );
        assert!(want_limits.contains(&s.limit), "{s:?}");
    });
}

#[test]
fn loom_adaptive_feed_two_failures() {
    // 8 → 4 → 2 whatever the interleaving (one runner may drain both).
    feed_race(8, Outcome::Failure, Outcome::Failure, &[2]);
}

#[test]
fn loom_adaptive_feed_success_and_failure() {
    // At limit 1 one fast success is a whole round, so it adds one. Success first: 1 → 2 → 1;
    // failure first: 1 → 1 (the minimum) → 2 (inflight 8 × 2 ≥ 1). A batch drained together
    // feeds the failure first.
    feed_race(1, Outcome::Success, Outcome::Failure, &[1, 2]);
}

/// A bulkhead with an AIMD limit (max 2, starts at 2): one thread's failure shrinks the limit
/// to 1 through `end_call` → `set_limit` while the other acquires and releases with a success
/// (which may grow it back). At the end: nothing in flight, `available == limit`, and the
/// bulkhead's limit is the controller's.
#[test]
fn loom_adaptive_limit_update_races_acquire_release() {
    loom::model(|| {
        let config = Config {
            max_concurrent: 2,
            max_queue: 0,
            resilience: Resilience {
                adaptive: Some(aimd(2, 2)),
                ..Resilience::OFF
            },
            ..Config::DEFAULT
        };
        let bh = Arc::new(Bulkhead::with_observer(config, ClockSource::None, None, None).unwrap());
        let p = bh.try_acquire(1).unwrap();
        let h = {
            let bh = bh.clone();
            thread::spawn(move || {
                let got = bh.try_acquire(1);
                // (`snapshot().active` may over-report during a shrink: set_limit takes the
                // permits out before it publishes the lower limit. Only the end is checked.)
                if let Ok(q) = got {
                    q.release_with(Outcome::Success);
                }
            })
        };
        p.release_with(Outcome::Failure);
        h.join().unwrap();
        let s = bh.stats();
        let a = s.adaptive.unwrap();
        assert_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0), "{s}");
        assert_eq!(s.available, s.limit as i64, "no leaked permits: {s}");
        assert_eq!(a.limit, s.limit, "bulkhead limit = controller limit: {s}");
        assert!((1..=2).contains(&s.limit), "{s}");
        // The failure always counts; the success only if its acquire won a permit.
        assert!((1..=2).contains(&a.samples_total), "{a:?}");
    });
}
