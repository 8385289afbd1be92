//! Unit tests of the circuit breaker on virtual time (`now_ns` passed by the test).

use core::time::Duration;
use std::{sync::Barrier, thread, vec::Vec};

use crate::breaker::{
    Admit, Breaker, BreakerConfig, BreakerConfigError, CircuitState, Observer, Outcome, Transition,
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

fn breaker(open_ms: u64) -> Breaker {
    Breaker::new(BreakerConfig {
        open_duration: Duration::from_millis(open_ms),
        ..BreakerConfig::DEFAULT
    })
    .unwrap()
}

fn admit(b: &Breaker, now: u64) -> Admit {
    b.try_admit(now).expect("admitted")
}

/// Trips a closed breaker with `failure_threshold` (5) consecutive failures at `now`.
fn trip(b: &Breaker, now: u64) -> Transition {
    let mut tr = None;
    for _ in 0..5 {
        let a = admit(b, now);
        if let Some(t) = b.record(a, Outcome::Failure, now) {
            assert!(tr.replace(t).is_none());
        }
    }
    tr.expect("tripped")
}

#[test]
fn defaults_and_validate_names_option() {
    let c = BreakerConfig::default();
    assert_eq!(c.failure_threshold, 5);
    assert_eq!(c.error_rate_buckets, 10);
    assert_eq!(c.volume_threshold, 20);
    assert_eq!(c.half_open_max_calls, 1);
    assert!(c.validate().is_ok());
    let bad = |c: BreakerConfig| Breaker::new(c).unwrap_err().option();
    assert_eq!(
        bad(BreakerConfig {
            failure_threshold: 0,
            ..c
        }),
        "failure_threshold"
    );
    assert_eq!(
        bad(BreakerConfig {
            error_rate_threshold: f64::NAN,
            ..c
        }),
        "error_rate_threshold"
    );
    assert_eq!(
        bad(BreakerConfig {
            error_rate_threshold: 1.5,
            ..c
        }),
        "error_rate_threshold"
    );
    assert_eq!(
        bad(BreakerConfig {
            error_rate_buckets: 0,
            ..c
        }),
        "error_rate_buckets"
    );
    assert_eq!(
        bad(BreakerConfig {
            error_rate_window: Duration::ZERO,
            ..c
        }),
        "error_rate_window"
    );
    assert_eq!(
        bad(BreakerConfig {
            volume_threshold: 0,
            ..c
        }),
        "volume_threshold"
    );
    assert_eq!(
        bad(BreakerConfig {
            open_duration: Duration::ZERO,
            ..c
        }),
        "open_duration"
    );
    assert_eq!(
        bad(BreakerConfig {
            half_open_max_calls: 256,
            ..c
        }),
        "half_open_max_calls"
    );
    assert_eq!(
        bad(BreakerConfig {
            half_open_timeout: Duration::ZERO,
            ..c
        }),
        "half_open_timeout"
    );
    assert_eq!(BreakerConfigError::OpenDuration.option(), "open_duration");
    assert_eq!(CircuitState::HalfOpen.as_str(), "half_open");
    assert_eq!(CircuitState::Closed.as_str(), "closed");
    assert_eq!(CircuitState::Open.as_str(), "open");
}

#[test]
fn opens_after_5_consecutive_failures_and_fails_fast() {
    let b = breaker(30_000);
    for i in 0..4 {
        let a = admit(&b, i);
        assert_eq!(b.record(a, Outcome::Failure, i), None);
    }
    // A success resets the consecutive count.
    let a = admit(&b, 5);
    assert_eq!(b.record(a, Outcome::Success, 5), None);
    assert_eq!(b.snapshot(5).consecutive_failures, 0);
    let tr = trip(&b, 10);
    assert_eq!(
        (tr.old, tr.new, tr.generation),
        (CircuitState::Closed, CircuitState::Open, 1)
    );
    for now in [10, 29 * S, 30 * S + 9] {
        let e = b.try_admit(now).unwrap_err();
        assert_eq!((e.state, e.transition), (CircuitState::Open, None));
    }
    let s = b.snapshot(11);
    assert_eq!(
        (s.state, s.generation, s.opened_at_ns),
        (CircuitState::Open, 1, 10)
    );
}

#[test]
fn half_opens_after_open_duration_and_probe_success_closes() {
    let b = breaker(100);
    trip(&b, 0);
    assert_eq!(b.state(99 * MS).0, CircuitState::Open);
    let p = admit(&b, 100 * MS);
    assert!(p.is_probe());
    let tr = p.transition.unwrap();
    assert_eq!(
        (tr.old, tr.new, tr.generation),
        (CircuitState::Open, CircuitState::HalfOpen, 2)
    );
    assert_eq!(
        b.try_admit(101 * MS).unwrap_err().state,
        CircuitState::HalfOpen
    );
    let tr = b.record(p, Outcome::Success, 105 * MS).unwrap();
    assert_eq!(
        (tr.old, tr.new, tr.generation),
        (CircuitState::HalfOpen, CircuitState::Closed, 3)
    );
    let a = admit(&b, 106 * MS);
    assert!(!a.is_probe());
    let s = b.snapshot(106 * MS);
    assert_eq!((s.window_requests, s.consecutive_failures), (0, 0));
}

#[test]
fn probe_failure_reopens_with_fresh_opened_at() {
    let b = breaker(100);
    trip(&b, 0);
    let p = admit(&b, 150 * MS);
    let tr = b.record(p, Outcome::Failure, 160 * MS).unwrap();
    assert_eq!(
        (tr.old, tr.new),
        (CircuitState::HalfOpen, CircuitState::Open)
    );
    assert_eq!(b.snapshot(160 * MS).opened_at_ns, 160 * MS);
    assert!(b.try_admit(259 * MS).is_err());
    assert!(admit(&b, 260 * MS).is_probe());
}

#[test]
fn ignored_probe_gives_its_slot_back() {
    let b = breaker(100);
    trip(&b, 0);
    let p = admit(&b, 100 * MS);
    assert!(b.try_admit(100 * MS).is_err());
    assert_eq!(b.record(p, Outcome::Ignored, 101 * MS), None);
    assert_eq!(b.state(101 * MS).0, CircuitState::HalfOpen);
    let p2 = admit(&b, 102 * MS);
    assert!(p2.is_probe() && p2.transition.is_none());
    // The slot was returned once: a second Ignored of the same admit... is the same generation,
    // but the slot counts only one holder; recording the real probe closes.
    assert!(b.record(p2, Outcome::Success, 103 * MS).is_some());
}

#[test]
fn silent_probe_times_out_as_failure_and_reopens() {
    let b = Breaker::new(BreakerConfig {
        open_duration: Duration::from_millis(100),
        half_open_timeout: Duration::from_millis(50),
        ..BreakerConfig::DEFAULT
    })
    .unwrap();
    trip(&b, 0);
    let p = admit(&b, 100 * MS);
    assert!(b.try_admit(149 * MS).is_err());
    assert_eq!(b.state(149 * MS), (CircuitState::HalfOpen, None));
    // Detected lazily by the next admission: re-open, fresh opened_at.
    let e = b.try_admit(150 * MS).unwrap_err();
    let tr = e.transition.unwrap();
    assert_eq!(
        (tr.old, tr.new),
        (CircuitState::HalfOpen, CircuitState::Open)
    );
    assert_eq!(b.snapshot(150 * MS).opened_at_ns, 150 * MS);
    // The silent probe's late report is a stale generation.
    assert_eq!(b.record(p, Outcome::Success, 151 * MS), None);
    assert_eq!(b.state(249 * MS).0, CircuitState::Open);
    // A state read also detects it (and a late report counts as failure).
    let p = admit(&b, 250 * MS);
    let (st, tr) = b.state(300 * MS);
    assert_eq!(
        (st, tr.map(|t| t.new)),
        (CircuitState::Open, Some(CircuitState::Open))
    );
    let _ = p;
    let p = admit(&b, 400 * MS);
    assert_eq!(
        b.record(p, Outcome::Success, 450 * MS).unwrap().new,
        CircuitState::Open
    );
}

#[test]
fn error_rate_trips_only_with_volume_and_not_a_full_window() {
    let b = Breaker::new(BreakerConfig {
        failure_threshold: 1000,
        ..BreakerConfig::DEFAULT
    })
    .unwrap();
    // 19 calls, all alternating: below volume 20, no trip even at 50 %+.
    let mut now = 0;
    for i in 0..19 {
        let a = admit(&b, now);
        let o = if i % 2 == 0 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        assert_eq!(b.record(a, o, now), None, "call {i}");
        now += 10 * MS;
    }
    let s = b.snapshot(now);
    assert_eq!((s.window_requests, s.window_failures), (19, 10));
    // The 20th call (a failure) reaches volume at 11/20 = 55 % ≥ 50 %: trips at 0.2 s, long
    // before the 10 s window is full (r4j #1731).
    let a = admit(&b, now);
    let tr = b.record(a, Outcome::Failure, now).unwrap();
    assert_eq!(tr.new, CircuitState::Open);
}

#[test]
fn error_rate_below_threshold_and_old_buckets_roll_off() {
    let b = Breaker::new(BreakerConfig {
        failure_threshold: 1000,
        ..BreakerConfig::DEFAULT
    })
    .unwrap();
    for i in 0..40u64 {
        let a = admit(&b, i * MS);
        let o = if i % 3 == 0 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        assert_eq!(b.record(a, o, i * MS), None);
    }
    assert_eq!(b.snapshot(S).window_requests, 40);
    // 10 s later every bucket is stale.
    assert_eq!(b.snapshot(11 * S).window_requests, 0);
    // 19 failures in the new window: volume not reached.
    for _ in 0..19 {
        let a = admit(&b, 11 * S);
        assert_eq!(b.record(a, Outcome::Failure, 11 * S), None);
    }
}

#[test]
fn stale_generation_outcomes_are_ignored() {
    let b = breaker(100);
    let old: Vec<Admit> = (0..10).map(|_| admit(&b, 0)).collect();
    trip(&b, 0);
    for a in &old {
        assert_eq!(b.record(*a, Outcome::Failure, 50 * MS), None);
        assert_eq!(b.record(*a, Outcome::Success, 50 * MS), None);
    }
    assert_eq!(b.snapshot(50 * MS).opened_at_ns, 0);
    let p = admit(&b, 100 * MS);
    b.record(p, Outcome::Success, 100 * MS).unwrap();
    // Closed again (generation 3): generation-0 failures must not count toward a new trip.
    for a in &old {
        assert_eq!(b.record(*a, Outcome::Failure, 101 * MS), None);
    }
    assert_eq!(b.snapshot(101 * MS).consecutive_failures, 0);
}

/// C23 (opossum#385): many failures on an already-open breaker must not move the reset.
#[test]
fn c23_duplicate_open_does_not_cancel_reset() {
    for calls in [6usize, 50] {
        let b = breaker(100);
        let admits: Vec<Admit> = (0..calls).map(|_| admit(&b, 0)).collect();
        let transitions = admits
            .iter()
            .filter_map(|a| b.record(*a, Outcome::Failure, 10 * MS))
            .collect::<Vec<_>>();
        assert_eq!(
            transitions.len(),
            1,
            "{calls} calls: exactly 1 OPEN transition"
        );
        assert_eq!(transitions[0].new, CircuitState::Open);
        assert_eq!(
            b.snapshot(10 * MS).opened_at_ns,
            10 * MS,
            "deadline written once"
        );
        let (st, tr) = b.state(110 * MS);
        assert_eq!(st, CircuitState::HalfOpen);
        assert_eq!(tr.unwrap().old, CircuitState::Open);
        let p = admit(&b, 120 * MS);
        assert!(p.is_probe());
        assert_eq!(
            b.record(p, Outcome::Success, 121 * MS).unwrap().new,
            CircuitState::Closed
        );
    }
}

/// C23 with real threads: concurrent failures trip once.
#[test]
fn c23_concurrent_failures_trip_once() {
    let n = if cfg!(miri) { 6 } else { 50 };
    let b = breaker(100);
    let admits: Vec<Admit> = (0..n).map(|_| admit(&b, 0)).collect();
    let barrier = Barrier::new(n);
    let trips: usize = thread::scope(|s| {
        let hs: Vec<_> = admits
            .iter()
            .map(|a| {
                let (b, barrier) = (&b, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    b.record(*a, Outcome::Failure, 10 * MS).is_some() as usize
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(trips, 1);
    assert_eq!(b.snapshot(10 * MS).opened_at_ns, 10 * MS);
    assert_eq!(b.state(110 * MS).0, CircuitState::HalfOpen);
}

/// C24 (opossum#119): half-open admits exactly one trial; a failed trial re-opens at once.
#[test]
fn c24_half_open_admits_exactly_one_of_10() {
    let b = breaker(100);
    trip(&b, 10 * MS);
    let mut t0 = 110 * MS; // half-open of this cycle
    for cycle in 1..=3 {
        let results: Vec<_> = (0..10).map(|_| b.try_admit(t0)).collect();
        let admitted: Vec<Admit> = results.iter().filter_map(|r| r.ok()).collect();
        assert_eq!(
            admitted.len(),
            1,
            "cycle {cycle}: exactly 1 reaches the backend"
        );
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 9);
        let ok = cycle == 3;
        let out = if ok {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        let tr = b.record(admitted[0], out, t0).unwrap();
        if ok {
            assert_eq!(tr.new, CircuitState::Closed);
        } else {
            assert_eq!(tr.new, CircuitState::Open);
            assert_eq!(b.state(t0 + 99 * MS).0, CircuitState::Open);
            assert_eq!(b.state(t0 + 100 * MS).0, CircuitState::HalfOpen);
        }
        t0 += 100 * MS;
    }
    // Closed: the next 10 concurrent calls all pass.
    assert!((0..10).all(|_| b.try_admit(t0).is_ok()));
}

/// C24 with real threads: 10 racing admissions at the half-open instant, one winner.
#[test]
fn c24_concurrent_half_open_race() {
    let b = breaker(100);
    trip(&b, 10 * MS);
    let barrier = Barrier::new(10);
    let results: Vec<(bool, bool)> = thread::scope(|s| {
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let (b, barrier) = (&b, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    match b.try_admit(110 * MS) {
                        Ok(a) => (true, a.transition.is_some()),
                        Err(e) => (false, e.transition.is_some()),
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|r| r.0).count(), 1);
    assert_eq!(results.iter().filter(|r| r.1).count(), 1);
}

#[test]
fn observer_gets_old_and_new() {
    use core::cell::RefCell;
    struct Log(RefCell<Vec<(CircuitState, CircuitState)>>);
    impl Observer for Log {
        fn on_state_change(&self, _key: Option<&str>, old: CircuitState, new: CircuitState) {
            self.0.borrow_mut().push((old, new));
        }
    }
    let log = Log(RefCell::new(Vec::new()));
    let b = breaker(100);
    trip(&b, 0).notify(None, &log);
    if let Some(t) = admit(&b, 100 * MS).transition {
        t.notify(None, &log);
    }
    assert_eq!(
        *log.0.borrow(),
        [
            (CircuitState::Closed, CircuitState::Open),
            (CircuitState::Open, CircuitState::HalfOpen)
        ]
    );
}

#[test]
fn several_half_open_probes() {
    let b = Breaker::new(BreakerConfig {
        half_open_max_calls: 3,
        open_duration: Duration::from_millis(100),
        ..BreakerConfig::DEFAULT
    })
    .unwrap();
    trip(&b, 0);
    let ps: Vec<Admit> = (0..5).filter_map(|_| b.try_admit(100 * MS).ok()).collect();
    assert_eq!(ps.len(), 3);
    assert_eq!(
        b.record(ps[1], Outcome::Failure, 101 * MS).unwrap().new,
        CircuitState::Open
    );
    assert_eq!(
        b.record(ps[0], Outcome::Success, 101 * MS),
        None,
        "stale after the re-open"
    );
}
