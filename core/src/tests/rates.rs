//! Rate dimensions (docs/design.md §4.9): GCRA requests-per-interval and units-per-interval
//! limits decided with the in-flight dimensions in the dispatcher's step, on a virtual clock.

use core::{
    sync::atomic::{AtomicU64, Ordering::SeqCst},
    time::Duration,
};
use std::sync::Arc;

use crate::{
    AcquireError, Bound, Bulkhead, ClockSource, Config, ConfigError, Decision, Reason, Request,
    config::classes::{ClassError, ClassSpec, ClassTable, Rate, Rates},
    tests::budget::{granted, poll_granted, queued, refused},
};

use super::VClock;

const MS: u64 = 1_000_000;

/// One class, `rates`, 10 permits, a budget of 1 000, on a virtual clock starting at 1 s.
fn rated(rates: Rates) -> (Bulkhead, Arc<VClock>) {
    let clock = Arc::new(VClock(AtomicU64::new(1_000 * MS)));
    let classes = [ClassSpec::DEFAULT];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 10,
            max_queue: 8,
            budget: Some(1_000),
            ..Config::DEFAULT
        },
        &ClassTable {
            rates,
            ..ClassTable::new(&classes)
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    (bh, clock)
}

/// 2 per 100 ms, a burst of 2.
const TWO_PER_100MS: Rate = Rate {
    amount: 2,
    per: Duration::from_millis(100),
    burst: 2,
};

#[test]
fn a_requests_rate_admits_its_burst_then_refuses_until_it_conforms() {
    let (bh, clock) = rated(Rates {
        requests: Some(TWO_PER_100MS),
        units: None,
    });
    let a = granted(bh.admit(&Request::new(1).no_wait(), None));
    let b = granted(bh.admit(&Request::new(1).no_wait(), None));
    let e = refused(bh.admit(&Request::new(1).no_wait(), None));
    assert_eq!(e.reason(), Some(Reason::RateLimit));
    let AcquireError::Rejected(r) = e else {
        panic!()
    };
    assert_eq!(r.detail().bound, Bound::Rate);
    assert_eq!(e.reason().unwrap().info().code, "BULKHEAD_RATE_LIMITED");
    // Releasing does not refill a rate (it is per interval, not in flight).
    drop((a, b));
    assert_eq!(
        refused(bh.admit(&Request::new(1).no_wait(), None)).reason(),
        Some(Reason::RateLimit)
    );
    // One emission interval (50 ms) later one more conforms.
    clock.0.fetch_add(50 * MS, SeqCst);
    let c = granted(bh.admit(&Request::new(1).no_wait(), None));
    assert_eq!(
        refused(bh.admit(&Request::new(1).no_wait(), None)).reason(),
        Some(Reason::RateLimit)
    );
    drop(c);
    let s = bh.stats();
    assert_eq!(s.rejected_by_reason.get(Reason::RateLimit), 3, "{s}");
    assert_eq!(s.admitted_total, 3);
}

#[test]
fn a_rate_held_waiter_is_granted_by_the_hosts_tick_at_its_conforming_time() {
    let (bh, clock) = rated(Rates {
        requests: Some(TWO_PER_100MS),
        units: None,
    });
    let a = granted(bh.admit(&Request::new(1).no_wait(), None));
    let b = granted(bh.admit(&Request::new(1).no_wait(), None));
    let mut w = queued(bh.admit(&Request::new(1), None));
    assert_eq!(bh.rate_retry_after(), Some(Duration::from_millis(50)));
    clock.0.fetch_add(20 * MS, SeqCst);
    bh.rate_tick();
    assert!(poll_granted(&mut w).is_none(), "not yet");
    assert_eq!(bh.rate_retry_after(), Some(Duration::from_millis(30)));
    clock.0.fetch_add(30 * MS, SeqCst);
    assert_eq!(bh.rate_retry_after(), Some(Duration::ZERO));
    bh.rate_tick();
    let g = poll_granted(&mut w).expect("conforms now");
    assert_eq!(bh.rate_retry_after(), None);
    drop((a, b, g));
}

#[test]
fn a_units_rate_charges_the_cost_and_never_a_refused_request() {
    // 100 units per 100 ms, a burst of 100.
    let (bh, clock) = rated(Rates {
        requests: None,
        units: Some(Rate {
            amount: 100,
            per: Duration::from_millis(100),
            burst: 100,
        }),
    });
    let a = granted(bh.admit(&Request::new(1).cost(60).no_wait(), None));
    // 60 of the burst taken: 50 more do not conform, 40 do — the refusal charged nothing.
    assert_eq!(
        refused(bh.admit(&Request::new(1).cost(50).no_wait(), None)).reason(),
        Some(Reason::RateLimit)
    );
    let b = granted(bh.admit(&Request::new(1).cost(40).no_wait(), None));
    // Above the burst: never conforms, refused at once (and never queued).
    assert_eq!(
        refused(bh.admit(&Request::new(1).cost(101), None)).reason(),
        Some(Reason::RateLimit)
    );
    assert_eq!(bh.stats().queued, 0);
    clock.0.fetch_add(30 * MS, SeqCst);
    let c = granted(bh.admit(&Request::new(1).cost(30).no_wait(), None));
    drop((a, b, c));
}

#[test]
fn a_rate_and_the_in_flight_limit_decide_together() {
    // In flight 10, but 2 requests per 100 ms: the rate binds first; a waiter queued for
    // the rate is granted in FIFO order by ticks, never barged by a no-wait request.
    let (bh, clock) = rated(Rates {
        requests: Some(TWO_PER_100MS),
        units: None,
    });
    let held: std::vec::Vec<_> = (0..2)
        .map(|_| granted(bh.admit(&Request::new(1).no_wait(), None)))
        .collect();
    let mut w1 = queued(bh.admit(&Request::new(1), None));
    let mut w2 = queued(bh.admit(&Request::new(1), None));
    clock.0.fetch_add(50 * MS, SeqCst);
    // A no-wait arrival behind the waiters is refused (no barging), not granted.
    assert!(matches!(
        bh.admit(&Request::new(1).no_wait(), None),
        Decision::Rejected(_)
    ));
    bh.rate_tick();
    let g1 = poll_granted(&mut w1).expect("the head");
    assert!(poll_granted(&mut w2).is_none());
    clock.0.fetch_add(50 * MS, SeqCst);
    bh.rate_tick();
    let g2 = poll_granted(&mut w2).expect("then the next");
    drop((held, g1, g2));
    assert_eq!(bh.stats().active, 0);
}

#[test]
fn bad_rates_are_named() {
    let classes = [ClassSpec::DEFAULT];
    let build = |rates: Rates, budget: Option<u64>, clock: ClockSource| {
        Bulkhead::with_classes(
            Config {
                budget,
                ..Config::DEFAULT
            },
            &ClassTable {
                rates,
                ..ClassTable::new(&classes)
            },
            clock,
        )
        .map(drop)
    };
    let vclock = || ClockSource::Shared(Arc::new(VClock::default()));
    let zero = Rate {
        amount: 0,
        ..TWO_PER_100MS
    };
    let e = build(
        Rates {
            requests: Some(zero),
            units: None,
        },
        None,
        vclock(),
    )
    .unwrap_err();
    assert_eq!(e, ConfigError::Class(ClassError::Rate { rate: "requests" }));
    assert!(
        std::format!("{e}").contains("classes.rates.requests"),
        "{e}"
    );
    let e = build(
        Rates {
            requests: None,
            units: Some(TWO_PER_100MS),
        },
        None,
        vclock(),
    )
    .unwrap_err();
    assert!(std::format!("{e}").contains("needs a budget"), "{e}");
    let e = build(
        Rates {
            requests: Some(TWO_PER_100MS),
            units: None,
        },
        None,
        ClockSource::None,
    )
    .unwrap_err();
    assert!(std::format!("{e}").contains("rates without a clock"), "{e}");
}

#[test]
fn a_blocking_wait_is_its_own_rate_timer() {
    // The host clock: the waiting thread parks until the rate-held head conforms (about 50 ms
    // here) and ticks itself; the deadline allows 100× that.
    let classes = [ClassSpec::DEFAULT];
    let bh = Bulkhead::with_classes(
        Config::DEFAULT,
        &ClassTable {
            rates: Rates {
                requests: Some(TWO_PER_100MS),
                units: None,
            },
            ..ClassTable::new(&classes)
        },
        ClockSource::default_for_host(),
    )
    .unwrap();
    let a = bh.acquire_blocking(1, Some(Duration::ZERO)).unwrap();
    let b = bh.acquire_blocking(1, Some(Duration::ZERO)).unwrap();
    let c = bh
        .acquire_blocking(1, Some(Duration::from_secs(5)))
        .expect("granted once the rate conforms");
    drop((a, b, c));
}

#[test]
fn a_dry_run_answers_the_rate_as_the_admission_does() {
    let (bh, _clock) = rated(Rates {
        requests: Some(TWO_PER_100MS),
        units: None,
    });
    let nowait = Request::new(1).no_wait();
    assert!(matches!(
        bh.would_admit(&nowait),
        crate::WouldAdmit::AdmitNow
    ));
    let _a = granted(bh.admit(&nowait, None));
    let _b = granted(bh.admit(&nowait, None));
    // The burst is spent: the no-wait admission is refused `rate_limit`, and so is its dry run
    // (an estimate from the class counts alone answered `admit_now`).
    assert_eq!(bh.would_admit(&nowait).reason(), Some(Reason::RateLimit));
    assert_eq!(
        refused(bh.admit(&nowait, None)).reason(),
        Some(Reason::RateLimit)
    );
    // A queueing request waits for its conforming time, and its dry run says so.
    assert_eq!(
        bh.would_admit(&Request::new(1)),
        crate::WouldAdmit::WouldQueue {
            position: 1,
            ahead: 0
        }
    );
}

#[test]
fn a_rate_refusal_says_when_it_would_conform_and_a_wait_past_its_deadline_is_refused_at_once() {
    let (bh, clock) = rated(Rates {
        requests: Some(TWO_PER_100MS),
        units: None,
    });
    let _a = granted(bh.admit(&Request::new(1).no_wait(), None));
    let _b = granted(bh.admit(&Request::new(1).no_wait(), None));
    // T = 50 ms, τ = 100 ms: the third conforms one emission interval from now.
    let AcquireError::Rejected(r) = refused(bh.admit(&Request::new(1).no_wait(), None)) else {
        panic!()
    };
    assert_eq!(r.reason, Reason::RateLimit);
    assert_eq!(r.detail().retry_after, Some(Duration::from_millis(50)));
    clock.0.fetch_add(20 * MS, SeqCst);
    // A request whose queue timeout ends before it could conform is refused now, never queued.
    let short = Request::new(1).queue_timeout(Duration::from_millis(10));
    assert_eq!(bh.would_admit(&short).reason(), Some(Reason::RateLimit));
    let AcquireError::Rejected(r) = refused(bh.admit(&short, None)) else {
        panic!()
    };
    assert_eq!(r.detail().retry_after, Some(Duration::from_millis(30)));
    assert_eq!(bh.stats().queued, 0);
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::RateLimit), 2);
    // One whose deadline is after its conforming time waits for it.
    let long = Request::new(1).queue_timeout(Duration::from_millis(30));
    assert!(matches!(
        bh.would_admit(&long),
        crate::WouldAdmit::WouldQueue { .. }
    ));
    let mut w = queued(bh.admit(&long, None));
    clock.0.fetch_add(30 * MS, SeqCst);
    bh.rate_tick();
    drop(poll_granted(&mut w));
    // Other refusals carry no retry time.
    let plain = Bulkhead::new(Config {
        max_concurrent: 1,
        ..Config::DEFAULT
    })
    .unwrap();
    let _held = plain.try_acquire(1).unwrap();
    let AcquireError::Rejected(r) = plain.try_acquire(1).unwrap_err() else {
        panic!()
    };
    assert_eq!(r.detail().retry_after, None);
}

#[test]
fn a_dry_run_sees_a_higher_floor_head_the_rate_holds_back() {
    // Interactive (rank 0, floor 4) waits for the units rate with 8 units; batch (floor 1)
    // asks 1 unit, which conforms by itself — but the pass picks floor heads in rank order and
    // stops at the rate-held one, so batch is refused, and its dry run says so.
    let clock = Arc::new(VClock(AtomicU64::new(1_000 * MS)));
    let classes = [
        ClassSpec {
            priority: 10,
            floor: 4,
            budget_floor: 20,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            floor: 1,
            budget_floor: 10,
            ..ClassSpec::DEFAULT
        },
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 8,
            max_queue: 4,
            budget: Some(100),
            ..Config::DEFAULT
        },
        &ClassTable {
            rates: Rates {
                requests: None,
                units: Some(Rate {
                    amount: 10,
                    per: Duration::from_secs(1),
                    burst: 10,
                }),
            },
            ..ClassTable::new(&classes)
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let a = granted(bh.admit(&Request::new(1).cost(5).class(0).no_wait(), None));
    let mut w = queued(bh.admit(&Request::new(1).cost(8).class(0), None));
    let ask = Request::new(1).cost(1).class(1).no_wait();
    let dry = bh.would_admit(&ask);
    let real = bh.admit(&ask, None);
    assert!(matches!(real, Decision::Rejected(_)), "{real:?}");
    assert_eq!(dry.reason(), Some(Reason::ConcurrencyLimit), "{dry:?}");
    drop(a);
    clock.0.fetch_add(1_000 * MS, SeqCst);
    bh.rate_tick();
    drop(poll_granted(&mut w).unwrap());
}
