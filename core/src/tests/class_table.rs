//! A class table's run-time part (docs/design.md §4.8, §4.9): the priority reserve and the rates
//! installed with a revision by `apply_limits_with_table`, validated whole, stricter first.

use core::{
    sync::atomic::{AtomicU64, Ordering::SeqCst},
    time::Duration,
};
use std::sync::Arc;

use crate::{
    Bound, Bulkhead, ClassTableLimits, ClockSource, Config, LimitsError, LimitsSnapshot, Reason,
    Request,
    config::classes::{ClassError, ClassSpec, ClassTable, PriorityReserve, Rate, Rates},
    tests::budget::{granted, poll_granted, queued, refused},
};

use super::VClock;

const MS: u64 = 1_000_000;

/// Interactive (priority 10) and batch (priority 0, floor 1) over a limit of 4, on a virtual
/// clock at 1 s.
fn two() -> (Bulkhead, Arc<VClock>) {
    let clock = Arc::new(VClock(AtomicU64::new(1_000 * MS)));
    let classes = [
        ClassSpec {
            priority: 10,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            floor: 1,
            ..ClassSpec::DEFAULT
        },
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 4,
            max_queue: 4,
            ..Config::DEFAULT
        },
        &ClassTable::new(&classes),
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    (bh, clock)
}

fn now(class: u16) -> Request {
    Request::new(1).class(class).no_wait()
}

fn reserve(permits: u64, min_priority: u8) -> ClassTableLimits<'static> {
    ClassTableLimits {
        reserve: Some(PriorityReserve {
            permits,
            budget: 0,
            min_priority,
        }),
        ..ClassTableLimits::NONE
    }
}

#[test]
fn a_reserve_set_at_run_time_holds_low_priorities_back_and_a_lower_one_grants_at_once() {
    let (bh, _) = two();
    let a = granted(bh.admit(&now(1), None));
    let b = granted(bh.admit(&now(1), None));
    // Reserve 2 for priority ≥ 5: batch holds 2 (its floor and one shared) and may take no more;
    // nobody is pre-empted.
    bh.apply_limits_with_table(&LimitsSnapshot::new(1), &reserve(2, 5))
        .unwrap();
    let e = refused(bh.admit(&now(1), None));
    assert_eq!(e.rejection().unwrap().detail().bound, Bound::Reserve);
    let mut w = queued(bh.admit(&Request::new(1).class(1), None));
    let i = granted(bh.admit(&now(0), None));
    assert_eq!(bh.stats().revision, 1);
    // No reserve any more: the last unit is shared, and the batch waiter goes in the same call.
    bh.apply_limits_with_table(&LimitsSnapshot::new(2), &reserve(0, 5))
        .unwrap();
    let c = poll_granted(&mut w).expect("granted by the apply");
    assert_eq!(
        bh.priority_reserve(),
        Some(PriorityReserve {
            permits: 0,
            budget: 0,
            min_priority: 5
        })
    );
    drop((a, b, c, i));
}

#[test]
fn a_reserve_is_checked_against_the_limits_the_same_call_installs() {
    let (bh, _) = two();
    // Floors 1 + reserve 4 > limit 4: refused by name, nothing installed.
    let e = bh
        .apply_limits_with_table(&LimitsSnapshot::new(1), &reserve(4, 5))
        .unwrap_err();
    assert!(
        matches!(
            e,
            LimitsError::Class(ClassError::Floors {
                total: 5,
                limit: 4,
                ..
            })
        ),
        "{e:?}"
    );
    assert_eq!(bh.stats().revision, 0);
    assert_eq!(bh.priority_reserve().unwrap().permits, 0);
    // With a limit of 5 in the same call it fits.
    bh.apply_limits_with_table(&LimitsSnapshot::new(1).limit(5), &reserve(4, 5))
        .unwrap();
    assert_eq!(
        (bh.stats().limit, bh.priority_reserve().unwrap().permits),
        (5, 4)
    );
    // A budget reserve needs a budget; reserves and rates need classes.
    let budget_reserve = ClassTableLimits {
        reserve: Some(PriorityReserve {
            permits: 0,
            budget: 1,
            min_priority: 0,
        }),
        ..ClassTableLimits::NONE
    };
    assert_eq!(
        bh.apply_limits_with_table(&LimitsSnapshot::new(2), &budget_reserve),
        Err(LimitsError::Class(ClassError::NoBudget { class: None }))
    );
    let plain = Bulkhead::new(Config::DEFAULT).unwrap();
    assert_eq!(
        plain.apply_limits_with_table(&LimitsSnapshot::new(1), &reserve(0, 0)),
        Err(LimitsError::Class(ClassError::Unknown {
            class: 0,
            count: 0
        }))
    );
}

/// 1 request per 100 ms, a burst of 1.
const ONE_PER_100MS: Rate = Rate {
    amount: 1,
    per: Duration::from_millis(100),
    burst: 1,
};

fn rates(requests: Option<Rate>) -> ClassTableLimits<'static> {
    ClassTableLimits {
        rates: Some(Rates {
            requests,
            units: None,
        }),
        ..ClassTableLimits::NONE
    }
}

#[test]
fn rates_set_at_run_time_start_with_their_burst_and_a_looser_one_grants_the_held_head() {
    let (bh, clock) = two();
    assert_eq!(bh.rates(), Some(Rates::default()));
    bh.apply_limits_with_table(&LimitsSnapshot::new(1), &rates(Some(ONE_PER_100MS)))
        .unwrap();
    let a = granted(bh.admit(&now(0), None));
    let e = refused(bh.admit(&now(0), None));
    assert_eq!(e.reason(), Some(Reason::RateLimit));
    let mut w = queued(bh.admit(&Request::new(1), None));
    clock.0.fetch_add(10 * MS, SeqCst);
    // Ten a second, a burst of 2: the held head conforms now and is granted by the apply.
    let faster = Rate {
        amount: 10,
        per: Duration::from_secs(1),
        burst: 2,
    };
    bh.apply_limits_with_table(&LimitsSnapshot::new(2), &rates(Some(faster)))
        .unwrap();
    let b = poll_granted(&mut w).expect("granted by the looser rate");
    assert_eq!(bh.rates().unwrap().requests.unwrap().burst, 2);
    // Removing every rate: nothing is held back by a rate any more.
    let _ = refused(bh.admit(&now(0), None));
    bh.apply_limits_with_table(&LimitsSnapshot::new(3), &rates(None))
        .unwrap();
    let c = granted(bh.admit(&now(0), None));
    assert_eq!(bh.rates(), Some(Rates::default()));
    drop((a, b, c));
}

#[test]
fn bad_rates_are_refused_by_name_and_need_a_clock() {
    let (bh, _) = two();
    let zero = Rate {
        amount: 0,
        ..ONE_PER_100MS
    };
    assert_eq!(
        bh.apply_limits_with_table(&LimitsSnapshot::new(1), &rates(Some(zero))),
        Err(LimitsError::Class(ClassError::Rate { rate: "requests" }))
    );
    let units = ClassTableLimits {
        rates: Some(Rates {
            requests: None,
            units: Some(ONE_PER_100MS),
        }),
        ..ClassTableLimits::NONE
    };
    assert_eq!(
        bh.apply_limits_with_table(&LimitsSnapshot::new(1), &units),
        Err(LimitsError::Class(ClassError::Rate { rate: "units" })),
        "a units rate needs a budget"
    );
    let classes = [ClassSpec::DEFAULT];
    let clockless = Bulkhead::with_classes(
        Config::DEFAULT,
        &ClassTable::new(&classes),
        ClockSource::None,
    )
    .unwrap();
    assert_eq!(
        clockless.apply_limits_with_table(&LimitsSnapshot::new(1), &rates(Some(ONE_PER_100MS))),
        Err(LimitsError::Class(ClassError::Unsupported {
            option: "rates without a clock"
        }))
    );
    assert_eq!(bh.stats().revision, 0);
}

#[test]
fn a_rate_change_never_refuses_a_waiter_both_settings_would_take() {
    // A units rate of 100 a second with a burst of 10 becomes 1 000 a second with a burst of
    // 20: a waiter of 5 units conforms under both, so the change must never refuse it (an
    // intermediate "stricter than both" setting of the larger interval and the smaller
    // tolerance allowed 2 units at most and refused it `rate_limit` — found in review).
    let clock = Arc::new(VClock(AtomicU64::new(1_000 * MS)));
    let classes = [ClassSpec::DEFAULT];
    let slow = Rate {
        amount: 100,
        per: Duration::from_secs(1),
        burst: 10,
    };
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
                units: Some(slow),
            },
            ..ClassTable::new(&classes)
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let a = granted(bh.admit(&Request::new(1).cost(10).no_wait(), None));
    let mut w = queued(bh.admit(&Request::new(1).cost(5), None));
    let fast = ClassTableLimits {
        rates: Some(Rates {
            requests: None,
            units: Some(Rate {
                amount: 1_000,
                per: Duration::from_secs(1),
                burst: 20,
            }),
        }),
        ..ClassTableLimits::NONE
    };
    bh.apply_limits_with_table(&LimitsSnapshot::new(1), &fast)
        .unwrap();
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::RateLimit), 0);
    clock.0.fetch_add(100 * MS, SeqCst);
    bh.rate_tick();
    let b = poll_granted(&mut w).expect("granted once it conforms, never refused");
    drop((a, b));
}
