//! Two-phase admission (docs/design.md §5.8): reserve → commit | abort, TTL expiry on an
//! injected clock, the table's bound, and the settlement identity through every end.

use core::{
    sync::atomic::{AtomicU64, Ordering::SeqCst},
    time::Duration,
};
use std::{string::ToString, sync::Arc};

use crate::{
    Bulkhead, ClockSource, Config, Decision, Outcome, Reason, Request, ReservationExpired,
    ReserveError,
};

struct Manual(AtomicU64);
impl crate::Clock for Manual {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

const MS: u64 = 1_000_000;
const TTL: Duration = Duration::from_millis(100);

fn bulkhead(max_reservations: u64) -> (Bulkhead, Arc<Manual>) {
    let clock = Arc::new(Manual(AtomicU64::new(MS)));
    let bh = Bulkhead::with_clock(
        Config {
            max_concurrent: 2,
            max_queue: 4,
            budget: Some(100),
            max_reservations,
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    (bh, clock)
}

/// The budget's settlement identity (docs/design.md §4.5).
fn settled(bh: &Bulkhead) -> bool {
    let b = bh.stats().budget.unwrap();
    b.reserved_total + b.overrun_total
        == b.consumed_total + b.refunded_total + b.in_use + b.granted_unclaimed + b.overrun_held
}

#[test]
fn a_reservation_holds_its_units_until_committed() {
    let (bh, _) = bulkhead(2);
    let r = bh.reserve(&Request::new(1).cost(60), TTL).unwrap();
    assert_eq!((r.weight(), r.cost()), (1, 60));
    let s = bh.stats();
    assert_eq!(
        (s.active, s.reservations_held, s.budget.unwrap().in_use),
        (1, 1, 60)
    );
    // Held, not re-decided: a request that needs those units is refused meanwhile.
    let Decision::Rejected(e) = bh.admit(&Request::new(1).cost(50).no_wait(), None) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::BudgetLimit));
    let call = r.commit().unwrap();
    assert_eq!((call.weight(), call.cost()), (1, 60));
    assert_eq!(bh.stats().reservations_held, 0);
    call.end_with_usage(Outcome::Success, 40);
    let s = bh.stats();
    assert_eq!((s.active, s.budget.unwrap().in_use), (0, 0));
    assert_eq!(s.budget.unwrap().consumed_total, 40);
    assert!(settled(&bh));
}

#[test]
fn abort_and_drop_return_everything_counted_refunded() {
    let (bh, _) = bulkhead(2);
    bh.reserve(&Request::new(1).cost(30), TTL).unwrap().abort();
    drop(bh.reserve(&Request::new(2).cost(70), TTL).unwrap());
    let s = bh.stats();
    let b = s.budget.unwrap();
    assert_eq!((s.active, s.reservations_held, b.in_use), (0, 0, 0));
    assert_eq!(
        (b.reserved_total, b.refunded_total, b.consumed_total),
        (100, 100, 0)
    );
    assert_eq!(s.admitted_total, 2);
    assert!(settled(&bh));
}

#[test]
fn an_expired_reservation_returns_its_units_and_its_commit_fails() {
    let (bh, clock) = bulkhead(2);
    let r = bh.reserve(&Request::new(2).cost(100), TTL).unwrap();
    let Decision::Queued(mut w) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    clock.0.fetch_add(100 * MS - 1, SeqCst);
    assert_eq!(bh.expire_reservations(), 0, "1 ns before the deadline");
    clock.0.fetch_add(1, SeqCst);
    // Nobody commits: the next look at the bulkhead (here a stats read) returns the units
    // and grants the waiter.
    let s = bh.stats();
    assert_eq!((s.reservations_held, s.reservations_expired_total), (0, 1));
    assert!(matches!(w.poll(None), core::task::Poll::Ready(Ok(_))));
    assert_eq!(r.commit().unwrap_err(), ReservationExpired);
    assert_eq!(bh.stats().reservations_expired_total, 1, "counted once");
    assert!(settled(&bh));
}

#[test]
fn an_admission_sweeps_expired_reservations_before_deciding() {
    let (bh, clock) = bulkhead(2);
    let _forgotten = bh.reserve(&Request::new(2), TTL).unwrap();
    assert!(bh.try_acquire(1).is_err());
    clock.0.fetch_add(100 * MS, SeqCst);
    // Not refused for units that a passed deadline returned.
    let got = bh.try_acquire(2).unwrap();
    assert_eq!(
        bh.stats().rejected_by_reason.get(Reason::ConcurrencyLimit),
        1
    );
    drop(got);
}

#[test]
fn the_table_is_bounded_and_off_by_default() {
    let (bh, _) = bulkhead(1);
    let a = bh.reserve(&Request::new(1), TTL).unwrap();
    assert_eq!(
        bh.reserve(&Request::new(1), TTL).unwrap_err(),
        ReserveError::Full {
            max_reservations: 1
        }
    );
    assert_eq!(bh.stats().active, 1, "a full table takes no permit");
    drop(a);
    let (off, _) = bulkhead(0);
    let e = off.reserve(&Request::new(1), TTL).unwrap_err();
    assert_eq!(
        e,
        ReserveError::Full {
            max_reservations: 0
        }
    );
    assert!(e.to_string().contains("max_reservations is 0"));
}

#[test]
fn a_refused_reservation_holds_nothing_and_frees_its_slot() {
    let (bh, _) = bulkhead(1);
    let held = bh.try_acquire(2).unwrap();
    let e = bh.reserve(&Request::new(1), TTL).unwrap_err();
    assert!(
        matches!(e, ReserveError::Rejected(ref a) if a.reason() == Some(Reason::ConcurrencyLimit))
    );
    drop(held);
    // The slot it claimed is free again.
    let r = bh.reserve(&Request::new(1), TTL).unwrap();
    drop(r);
    assert!(matches!(
        bh.reserve(&Request::new(0), TTL).unwrap_err(),
        ReserveError::Rejected(crate::AcquireError::InvalidWeight { .. })
    ));
}

#[test]
fn max_reservations_is_validated_and_not_for_static_bulkheads() {
    let bad = Bulkhead::new(Config {
        max_reservations: crate::limits::MAX_RESERVATIONS + 1,
        ..Config::DEFAULT
    })
    .unwrap_err();
    assert!(bad.to_string().contains("max_reservations"), "{bad}");
    let e = Bulkhead::<4>::try_new_static(Config {
        max_queue: 4,
        max_reservations: 1,
        ..Config::DEFAULT
    })
    .unwrap_err();
    assert!(e.to_string().contains("max_reservations"), "{e}");
}

#[test]
fn concurrent_commits_and_sweeps_settle_each_reservation_once() {
    // Every reservation ends exactly once whoever wins: a commit, an abort or the sweep.
    let clock = Arc::new(Manual(AtomicU64::new(MS)));
    let bh = Arc::new(
        Bulkhead::with_clock(
            Config {
                max_concurrent: 64,
                budget: Some(6_400),
                max_reservations: 64,
                ..Config::DEFAULT
            },
            ClockSource::Shared(clock.clone()),
        )
        .unwrap(),
    );
    // Sized down under Miri (28 s there at 50 rounds; the cell reuse shows within 10).
    for round in 0..if cfg!(miri) { 10u64 } else { 50 } {
        let rs: std::vec::Vec<_> = (0..16)
            .map(|_| bh.reserve_owned(&Request::new(1).cost(10), TTL).unwrap())
            .collect();
        clock
            .0
            .fetch_add(if round % 2 == 0 { 100 * MS } else { 0 }, SeqCst);
        let sweeper = {
            let bh = bh.clone();
            std::thread::spawn(move || bh.expire_reservations())
        };
        let mut committed = 0;
        for (i, r) in rs.into_iter().enumerate() {
            if i % 2 == 0 {
                if let Ok(c) = r.commit() {
                    committed += 1;
                    drop(c);
                }
            } else {
                r.abort();
            }
        }
        let expired = sweeper.join().unwrap();
        let s = bh.stats();
        assert_eq!(
            (s.active, s.reservations_held),
            (0, 0),
            "round {round}: {s}"
        );
        assert!(committed + expired <= 16);
        assert!(settled(&bh), "round {round}");
    }
}
