//! Loom models of the breaker's races (compiled only with `RUSTFLAGS="--cfg loom"`; run by
//! `ci/loom.sh loom_breaker`): the open → half-open race admits exactly `half_open_max_calls`
//! probes with exactly one transition, and a probe's outcome racing the half-open timeout
//! settles once.

use core::time::Duration;
use std::vec::Vec;

use loom::{sync::Arc, thread};

use crate::breaker::{Breaker, BreakerConfig, CircuitState, Outcome};

const MS: u64 = 1_000_000;

/// A breaker tripped open at t=0 (failure_threshold 1, open 100 ms, half-open timeout 50 ms).
fn open_breaker(max_probes: u32) -> Arc<Breaker> {
    let b = Breaker::new(BreakerConfig {
        failure_threshold: 1,
        error_rate_buckets: 1,
        open_duration: Duration::from_millis(100),
        half_open_timeout: Duration::from_millis(50),
        half_open_max_calls: max_probes,
        ..BreakerConfig::DEFAULT
    })
    .unwrap();
    let a = b.try_admit(0).unwrap();
    assert!(b.record(a, Outcome::Failure, 0).is_some());
    Arc::new(b)
}

/// `threads` callers race `try_admit` at the half-open instant.
fn open_to_half_open_race(threads: usize, max_probes: u32) {
    loom::model(move || {
        let b = open_breaker(max_probes);
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || match b.try_admit(100 * MS) {
                    Ok(a) => (1usize, a.transition.is_some() as usize),
                    Err(e) => (0, e.transition.is_some() as usize),
                })
            })
            .collect();
        let (admitted, events) = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |acc, r| (acc.0 + r.0, acc.1 + r.1));
        assert_eq!(
            admitted,
            (max_probes as usize).min(threads),
            "probes admitted"
        );
        assert_eq!(events, 1, "exactly one open -> half_open transition");
        let s = b.snapshot(100 * MS);
        assert_eq!((s.state, s.generation), (CircuitState::HalfOpen, 2));
    });
}

#[test]
fn loom_breaker_half_open_race_3_threads_1_probe() {
    open_to_half_open_race(3, 1);
}

#[test]
fn loom_breaker_half_open_race_3_threads_2_probes() {
    open_to_half_open_race(3, 2);
}

/// A state read racing an admission at the half-open instant: one transition; the admission
/// gets the probe either way.
#[test]
fn loom_breaker_state_read_vs_admit() {
    loom::model(|| {
        let b = open_breaker(1);
        let b2 = b.clone();
        let h = thread::spawn(move || b2.state(100 * MS).1.is_some() as usize);
        let a = b.try_admit(100 * MS).unwrap();
        assert!(a.is_probe());
        let events = h.join().unwrap() + a.transition.is_some() as usize;
        assert_eq!(events, 1);
    });
}

/// A probe reporting (success or failure) races the timeout check of another caller: exactly
/// one of them commits the transition out of this half-open generation.
fn probe_vs_timeout(outcome: Outcome, report_at: u64) {
    loom::model(move || {
        let b = open_breaker(1);
        let p = b.try_admit(100 * MS).unwrap();
        let b2 = b.clone();
        let h = thread::spawn(move || b2.try_admit(150 * MS).map_err(|e| e.transition));
        let mine = b.record(p, outcome, report_at);
        let theirs = h.join().unwrap();
        let (their_tr, their_admit) = match theirs {
            Ok(a) => (a.transition, true),
            Err(tr) => (tr, false),
        };
        let commits = mine.is_some() as usize + their_tr.is_some() as usize;
        assert_eq!(commits, 1, "settled once: {mine:?} / {their_tr:?}");
        let s = b.snapshot(150 * MS);
        assert_eq!(s.generation, 3);
        match (mine, their_tr) {
            (Some(t), None) => {
                assert_eq!(t.new, s.state);
                // After a close the racing caller may be admitted (closed) or was rejected.
                assert_eq!(their_admit, t.new == CircuitState::Closed);
            }
            (None, Some(t)) => {
                assert_eq!(
                    (t.old, t.new, s.state),
                    (
                        CircuitState::HalfOpen,
                        CircuitState::Open,
                        CircuitState::Open
                    )
                );
                assert!(!their_admit);
            }
            _ => unreachable!(),
        }
    });
}

#[test]
fn loom_breaker_probe_success_vs_timeout() {
    probe_vs_timeout(Outcome::Success, 149 * MS);
}

#[test]
fn loom_breaker_probe_failure_vs_timeout() {
    probe_vs_timeout(Outcome::Failure, 149 * MS);
}

#[test]
fn loom_breaker_probe_ignored_vs_timeout() {
    // An Ignored probe gives its slot back; the timeout then has nothing to time out, or it
    // re-opened first and the report is stale. Either way no double commit.
    loom::model(|| {
        let b = open_breaker(1);
        let p = b.try_admit(100 * MS).unwrap();
        let b2 = b.clone();
        let h = thread::spawn(move || b2.state(150 * MS).1);
        let mine = b.record(p, Outcome::Ignored, 149 * MS);
        let theirs = h.join().unwrap();
        assert!(mine.is_none());
        let s = b.snapshot(150 * MS);
        match theirs {
            Some(t) => assert_eq!(
                (t.new, s.state, s.generation),
                (CircuitState::Open, CircuitState::Open, 3)
            ),
            None => assert_eq!((s.state, s.generation), (CircuitState::HalfOpen, 2)),
        }
    });
}
