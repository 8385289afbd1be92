//! The admission API (docs/design.md §5): `admit` → `Decision`, `Call`, `Waiter`.

use core::{
    sync::atomic::{AtomicUsize, Ordering::SeqCst},
    task::{Poll, Waker},
    time::Duration,
};
use std::{sync::Arc, task::Wake, vec::Vec};

use crate::{
    Bulkhead, Call, Cancelled, ClockSource, Config, Decision, Outcome, Reason, Request, Resilience,
    Waiter,
    adaptive::{AdaptiveConfig, Algorithm},
    breaker::BreakerConfig,
};

#[derive(Default)]
struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

use super::VClock;

fn plain(max_concurrent: u64, max_queue: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent,
        max_queue,
        ..Config::DEFAULT
    })
    .unwrap()
}

fn granted<B: core::ops::Deref<Target = Bulkhead<N>>, const N: usize>(
    d: Decision<B, N>,
) -> Call<B, N> {
    match d {
        Decision::Granted(c) => c,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn queued<B: core::ops::Deref<Target = Bulkhead<N>>, const N: usize>(
    d: Decision<B, N>,
) -> Waiter<B, N> {
    match d {
        Decision::Queued(w) => w,
        other => panic!("expected to queue, got {other:?}"),
    }
}

#[test]
fn admit_grants_queues_and_refuses() {
    let bh = plain(2, 1);
    let a = granted(bh.admit(&Request::new(2), None));
    let mut w = queued(bh.admit(&Request::new(1), None));
    assert_eq!(w.queue_timeout(), Duration::from_secs(30));
    let Decision::Rejected(e) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::QueueLimit));
    let Decision::Rejected(e) = bh.admit(&Request::new(3), None) else {
        panic!()
    };
    assert_eq!(e.invalid_argument(), Some("weight"));
    assert!(w.poll(None).is_pending());
    a.end(Outcome::Success);
    let Poll::Ready(Ok(c)) = w.poll(None) else {
        panic!()
    };
    assert_eq!(c.weight(), 1);
    drop(c);
    let s = bh.stats();
    assert_eq!((s.available, s.queued, s.admitted_total), (2, 0, 2));
}

#[test]
fn a_zero_queue_timeout_never_queues() {
    let bh = plain(1, 4);
    let _held = granted(bh.admit(&Request::new(1), None));
    let Decision::Rejected(e) = bh.admit(&Request::new(1).no_wait(), None) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    let w = queued(bh.admit(
        &Request::new(1).queue_timeout(Duration::from_millis(5)),
        None,
    ));
    assert_eq!(w.queue_timeout(), Duration::from_millis(5));
}

#[test]
fn expire_settles_for_the_owner_who_takes_it_with_the_next_poll() {
    let bh = plain(1, 4);
    let held = granted(bh.admit(&Request::new(1), None));
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    let mut w = queued(bh.admit(&Request::new(1), Some(&waker)));
    bh.expire(w.ticket(), Reason::Timeout).unwrap();
    assert_eq!(count.0.load(SeqCst), 1, "the owner is woken");
    assert_eq!(bh.stats().queued, 0, "the place is free at once");
    let Poll::Ready(Err(e)) = w.poll(None) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::Timeout));
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::Timeout), 1);
    drop(held);
    assert!(bh.is_idle());
}

#[test]
fn a_dropped_waiter_is_abandoned_and_a_racing_grant_passes_on() {
    let bh = plain(1, 4);
    let held = granted(bh.admit(&Request::new(1), None));
    let w1 = queued(bh.admit(&Request::new(1), None));
    let mut w2 = queued(bh.admit(&Request::new(1), None));
    drop(held); // granted to w1, unclaimed
    drop(w1); // abandoned: the grant passes on to w2
    let Poll::Ready(Ok(c)) = w2.poll(None) else {
        panic!()
    };
    drop(c);
    let s = bh.stats();
    assert_eq!((s.available, s.granted_unclaimed, s.queued), (1, 0, 0));
}

#[test]
fn cancel_returns_a_grant_that_won() {
    let bh = plain(1, 4);
    let held = granted(bh.admit(&Request::new(1), None));
    let w = queued(bh.admit(&Request::new(1), None));
    drop(held);
    match w.cancel(Reason::Timeout) {
        Cancelled::Granted(c) => drop(c),
        other => panic!("{other:?}"),
    }
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::Timeout), 0);
    // A cancel that wins frees the place and counts its reason.
    let held = granted(bh.admit(&Request::new(1), None));
    let w = queued(bh.admit(&Request::new(1), None));
    let Cancelled::Cancelled(r) = w.cancel(Reason::Timeout) else {
        panic!()
    };
    assert_eq!(r.reason, Reason::Timeout);
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::Timeout), 1);
    drop(held);
    assert!(bh.is_idle());
}

/// The guarded call of a *queued* waiter lives in its cell: a half-open breaker's probe that
/// queues keeps its probe admission, and its outcome at the end closes the breaker.
#[test]
fn a_queued_probe_keeps_its_breaker_admission_in_the_cell() {
    let clock = Arc::new(VClock::default());
    let bh = Bulkhead::with_clock(
        Config {
            max_concurrent: 1,
            max_queue: 4,
            resilience: Resilience {
                breaker: Some(BreakerConfig {
                    failure_threshold: 1,
                    open_duration: Duration::from_millis(10),
                    ..BreakerConfig::DEFAULT
                }),
                ..Resilience::OFF
            },
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    granted(bh.admit(&Request::new(1), None)).end(Outcome::Failure);
    assert_eq!(bh.circuit_state().unwrap().as_str(), "open");
    clock.0.fetch_add(20_000_000, SeqCst);
    // A plain (policy-free) holder takes the permit; the probe queues behind it.
    bh.try_acquire_units(1).unwrap();
    let mut probe = queued(bh.admit(&Request::new(1), None));
    assert_eq!(bh.circuit_state().unwrap().as_str(), "half_open");
    // Half-open admits one probe: the next arrival is refused by the breaker.
    let Decision::Rejected(e) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::CircuitOpen));
    bh.release_units(1);
    let Poll::Ready(Ok(call)) = probe.poll(None) else {
        panic!()
    };
    assert!(
        call.call().is_probe(),
        "the probe admission came back with the grant"
    );
    call.end(Outcome::Success);
    assert_eq!(bh.circuit_state().unwrap().as_str(), "closed");
}

#[test]
fn a_cancelled_queued_probe_gives_its_slot_back() {
    let clock = Arc::new(VClock::default());
    let bh = Bulkhead::with_clock(
        Config {
            max_concurrent: 1,
            max_queue: 4,
            resilience: Resilience {
                breaker: Some(BreakerConfig {
                    failure_threshold: 1,
                    open_duration: Duration::from_millis(10),
                    ..BreakerConfig::DEFAULT
                }),
                ..Resilience::OFF
            },
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    granted(bh.admit(&Request::new(1), None)).end(Outcome::Failure);
    clock.0.fetch_add(20_000_000, SeqCst);
    bh.try_acquire_units(1).unwrap();
    let probe = queued(bh.admit(&Request::new(1), None));
    // Cancelled while queued: the call ends `ignored` and the probe slot is free again.
    let Cancelled::Cancelled(_) = probe.cancel(Reason::Aborted) else {
        panic!()
    };
    let again = queued(bh.admit(&Request::new(1), None));
    // …and an expiry of the next probe does the same when its owner takes the rejection.
    bh.expire(again.ticket(), Reason::Timeout).unwrap();
    let mut again = again;
    assert!(matches!(again.poll(None), Poll::Ready(Err(_))));
    let third = queued(bh.admit(&Request::new(1), None));
    drop(third);
    bh.release_units(1);
}

#[test]
fn timed_out_records_the_failure_once_and_keeps_the_permits() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 2,
        resilience: Resilience {
            breaker: Some(BreakerConfig {
                failure_threshold: 1,
                ..BreakerConfig::DEFAULT
            }),
            call_timeout: Some(Duration::from_millis(50)),
            ..Resilience::OFF
        },
        ..Config::DEFAULT
    })
    .unwrap();
    let mut c = granted(bh.admit(&Request::new(1), None));
    assert_eq!(c.call_timeout(), Some(Duration::from_millis(50)));
    assert!(c.timed_out());
    assert!(!c.timed_out(), "reported once");
    let s = bh.stats();
    assert_eq!(s.rejected_by_reason.get(Reason::CallTimeout), 1);
    assert_eq!(s.active, 1, "the permits stay held until the work ends");
    assert_eq!(
        s.circuit.unwrap().state.as_str(),
        "open",
        "recorded as a failure"
    );
    c.end(Outcome::Success); // nothing more is recorded
    let s = bh.stats();
    assert_eq!((s.active, s.circuit.unwrap().consecutive_failures), (0, 0));
    assert_eq!(s.circuit.unwrap().state.as_str(), "open");
}

#[test]
fn reclaim_counts_a_leak_and_ends_the_call_ignored() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 4,
        resilience: Resilience {
            adaptive: Some(AdaptiveConfig {
                algorithm: Algorithm::Aimd,
                ..AdaptiveConfig::for_max_concurrent(4)
            }),
            ..Resilience::OFF
        },
        ..Config::DEFAULT
    })
    .unwrap();
    let c = granted(bh.admit(&Request::new(3), None));
    c.reclaim();
    let s = bh.stats();
    assert_eq!((s.leaked_total, s.available), (3, 4));
    assert_eq!(s.adaptive.unwrap().samples_total, 0, "ignored: no sample");
}

#[test]
fn waiters_from_raw_tickets_and_back() {
    let bh = Arc::new(plain(1, 4));
    let held = bh.try_acquire_owned(1).unwrap();
    let w = queued(bh.admit_owned(&Request::new(1), None));
    let t = w.into_ticket(); // a binding keeps only the ticket
    let mut w = Waiter::from_ticket(bh.clone(), t);
    assert!(w.poll(None).is_pending());
    let t = w.into_ticket();
    drop(held);
    let mut w = Waiter::from_ticket(bh.clone(), t);
    let Poll::Ready(Ok(c)) = w.poll(None) else {
        panic!()
    };
    drop(c);
    // A ticket that is not live settles `aborted` (and is counted by nobody).
    let mut stale = Waiter::from_ticket(bh.clone(), t);
    let Poll::Ready(Err(e)) = stale.poll(None) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::Aborted));
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::Aborted), 0);
}

#[test]
fn blocking_waits_can_be_interrupted() {
    let bh = plain(1, 4);
    let held = bh.try_acquire(1).unwrap();
    let w = queued(bh.admit(&Request::new(1), None));
    let mut asked = 0;
    let r = w.wait_blocking_interruptible(None, Duration::from_millis(1), || {
        asked += 1;
        if asked == 3 { Err("signal") } else { Ok(()) }
    });
    assert_eq!(r.unwrap_err(), "signal");
    assert_eq!(bh.stats().queued, 0, "abandoned");
    // A deadline that has passed: the owner cancels it as `timeout`.
    let w = queued(bh.admit(&Request::new(1), None));
    let r = w.wait_blocking(Some(std::time::Instant::now()));
    assert_eq!(r.unwrap_err().reason(), Some(Reason::Timeout));
    drop(held);
    assert!(bh.is_idle());
}

#[test]
fn aborted_before_admission_is_counted() {
    let bh = plain(1, 4);
    let r = bh.aborted_before_admission();
    assert_eq!(r.reason, Reason::Aborted);
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::Aborted), 1);
}

#[test]
fn stats_visit_every_field_in_schema_order() {
    struct Keys(Vec<&'static str>);
    impl crate::StatsVisitor for Keys {
        fn count(&mut self, key: &'static str, _: u64) {
            self.0.push(key);
        }
        fn signed(&mut self, key: &'static str, _: i64) {
            self.0.push(key);
        }
        fn text(&mut self, key: &'static str, _: &'static str) {
            self.0.push(key);
        }
        fn begin(&mut self, key: &'static str, _: crate::Nested) {
            self.0.push(key);
        }
        fn end(&mut self) {}
        fn absent(&mut self, key: &'static str) {
            self.0.push(key);
        }
    }
    let mut k = Keys(Vec::new());
    plain(1, 1).stats().visit(&mut k);
    // The reason keys (both per-reason blocks) and the histogram's bucket bounds, written
    // here once each rather than read from the code under test.
    let reasons = [
        "concurrency_limit",
        "queue_limit",
        "key_limit",
        "timeout",
        "aborted",
        "shutdown",
        "circuit_open",
        "call_timeout",
        "budget_limit",
        "shed",
        "rate_limit",
    ];
    let buckets: Vec<std::string::String> = (10..37)
        .map(|b| std::format!("{}", 1u64 << b))
        .chain(core::iter::once("inf".into()))
        .collect();
    let mut want: Vec<&str> = [
        "active",
        "queued",
        "granted_unclaimed",
        "limit",
        "max_concurrent",
        "available",
        "admitted_total",
        "rejected_by_reason",
    ]
    .to_vec();
    want.extend(reasons);
    want.extend([
        "released_twice_total",
        "leaked_total",
        "orphaned_in_flight",
        "orphaned_total",
        "ring_free",
        "queue_wait_count",
        "queue_wait_sum_ns",
        "queue_wait_max_ns",
        "queue_wait_histogram",
    ]);
    want.extend(buckets.iter().map(std::string::String::as_str));
    want.extend(["revision", "observe", "observed_by_reason"]);
    want.extend(reasons);
    want.extend([
        "observer_panics",
        "reservations_held",
        "reservations_expired_total",
        "adaptive",
        "circuit",
        "budget",
        "load",
    ]);
    assert_eq!(k.0, want);
}

/// A `Waiter` is a future: awaiting it registers the task's waker; a release wakes that task
/// and the next poll yields the call.
#[test]
fn a_waiter_is_a_future_of_its_call() {
    use core::{future::Future, pin::Pin, task::Context};
    let bh = plain(1, 4);
    let held = granted(bh.admit(&Request::new(1), None));
    let mut w = queued(bh.admit(&Request::new(1), None));
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut w).poll(&mut cx).is_pending());
    held.end(Outcome::Success);
    assert_eq!(
        count.0.load(SeqCst),
        1,
        "the release woke the awaiting task"
    );
    let Poll::Ready(Ok(call)) = Pin::new(&mut w).poll(&mut cx) else {
        panic!("granted after the release")
    };
    assert_eq!((call.weight(), bh.stats().active), (1, 1));
    drop(call);
    assert_eq!(bh.stats().available, 1);
}

#[test]
fn take_now_is_admits_uncontended_grant_and_never_counts_a_refusal() {
    // A plain bulkhead: the same grant and stats as `admit`.
    let bh = plain(2, 4);
    let a = bh.take_now(1).expect("free");
    let b = granted(bh.admit(&Request::new(1), None));
    assert_eq!(bh.stats().admitted_total, 2);
    // Full: `None`, nothing counted.
    assert!(bh.take_now(1).is_none());
    drop(b);
    // One permit free, but a heavier waiter queued ahead: no barging.
    let w = queued(bh.admit(&Request::new(2), None));
    assert!(bh.take_now(1).is_none());
    drop(w);
    drop(a);
    assert!(
        bh.take_now(3).is_none(),
        "a weight above the limit: `admit` refuses it"
    );
    assert!(bh.take_now(0).is_none());
    bh.close();
    assert!(bh.take_now(1).is_none());
    let s = bh.stats();
    assert_eq!(
        s.rejected_by_reason.total(),
        1,
        "only the abandoned waiter: {s:?}"
    );
    assert_eq!((s.active, s.queued, s.admitted_total), (0, 0, 2));

    // Anything with more to run than a take goes through `admit`.
    let breaker = Bulkhead::new(Config {
        max_concurrent: 2,
        resilience: Resilience {
            breaker: Some(BreakerConfig::default()),
            ..Resilience::default()
        },
        ..Config::default()
    })
    .unwrap();
    assert!(breaker.take_now(1).is_none());
    assert_eq!(breaker.stats().admitted_total, 0);
}

#[test]
fn a_waiter_lends_its_handle_for_the_host_timers() {
    let bh = Arc::new(plain(1, 4));
    let held = bh.try_acquire_owned(1).unwrap();
    let w = queued(bh.admit_owned(&Request::new(1), None));
    // The same `Arc` the waiter was queued through (a host clones it for its deadline timer).
    assert!(Arc::ptr_eq(w.handle(), &bh));
    assert_eq!(w.handle().stats().queued, 1);
    drop(w);
    drop(held);
    assert_eq!(bh.stats().queued, 0);
}
