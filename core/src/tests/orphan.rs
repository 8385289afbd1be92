//! Orphaning (docs/design.md §5.3): a call hands its permits back while its work goes on,
//! under its own cap (`max_orphaned`), tracked in `orphaned_in_flight` and waited for by
//! `drain`; the budget units, reports and outcome stay with the call.

use core::time::Duration;

use crate::{
    Bulkhead, Config, OrphanError, Outcome,
    tests::budget::{ask, books_balance, budget, granted, poll_granted, queued},
};

fn orphanable(max_concurrent: u64, max_orphaned: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent,
        max_queue: 4,
        max_orphaned,
        ..Config::DEFAULT
    })
    .unwrap()
}

/// I2 against the test's own count of permits held by live (not orphaned) calls.
fn i2(bh: &Bulkhead, held: u64) {
    let s = bh.stats();
    assert_eq!(s.active, held, "{s}");
    assert_eq!(
        s.available + held as i64 + s.granted_unclaimed as i64,
        s.limit as i64,
        "{s}"
    );
}

#[test]
fn orphaning_is_off_by_default() {
    let bh = orphanable(2, 0);
    let mut p = bh.try_acquire(1).unwrap();
    let e = p.orphan().unwrap_err();
    assert_eq!(
        e,
        OrphanError {
            weight: 1,
            in_flight: 0,
            max: 0
        }
    );
    assert!(std::format!("{e}").contains("orphaning is off"), "{e}");
    assert_eq!((p.weight(), p.is_orphaned()), (1, false));
    i2(&bh, 1);
}

#[test]
fn an_orphan_gives_its_permits_to_the_queue_and_drain_waits_for_it() {
    let bh = orphanable(1, 1);
    let mut slow = bh.try_acquire(1).unwrap();
    let mut w = queued(bh.admit(&crate::Request::new(1), None));
    assert_eq!(slow.orphan(), Ok(true));
    assert_eq!(slow.orphan(), Ok(false), "idempotent");
    assert_eq!((slow.weight(), slow.is_orphaned()), (0, true));
    let next = poll_granted(&mut w).expect("the orphan's permit went to the head");
    let s = bh.stats();
    assert_eq!(
        (s.active, s.orphaned_in_flight, s.orphaned_total),
        (1, 1, 1)
    );
    i2(&bh, 1);
    drop(next);
    let r = bh.drain_blocking(Some(Duration::ZERO));
    assert!(!r.drained && r.active == 0 && r.orphaned == 1, "{r:?}");
    assert!(
        slow.release_partial(1).is_err(),
        "an orphan holds no permits"
    );
    slow.end(Outcome::Success);
    let r = bh.drain_blocking(Some(Duration::from_secs(5)));
    assert!(r.drained && r.orphaned == 0, "{r:?}");
    let s = bh.stats();
    assert_eq!(
        (s.orphaned_in_flight, s.orphaned_total, s.available),
        (0, 1, 1)
    );
}

#[test]
fn the_cap_is_never_passed() {
    let bh = orphanable(5, 2);
    let mut a = bh.try_acquire(1).unwrap();
    let mut b = bh.try_acquire(1).unwrap();
    let mut c = bh.try_acquire(1).unwrap();
    let mut d = bh.try_acquire(2).unwrap();
    assert!(a.orphan().unwrap());
    let e = d.orphan().unwrap_err();
    assert_eq!((e.in_flight, e.max), (1, 2));
    assert!(std::format!("{e}").contains("max_orphaned is 2"), "{e}");
    assert!(b.orphan().unwrap());
    assert_eq!(c.orphan().unwrap_err().in_flight, 2);
    assert_eq!(bh.stats().orphaned_in_flight, 2);
    drop(a);
    assert!(c.orphan().unwrap(), "room again once an orphan ended");
    drop((b, c, d));
    let s = bh.stats();
    assert_eq!(
        (
            s.orphaned_in_flight,
            s.orphaned_total,
            s.active,
            s.available
        ),
        (0, 3, 0, 5)
    );
}

#[test]
fn an_orphan_keeps_its_budget_units_and_reports() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 1,
        max_queue: 4,
        budget: Some(100),
        max_orphaned: 1,
        ..Config::DEFAULT
    })
    .unwrap();
    let mut stream = granted(bh.admit(&ask(1, 60), None));
    assert!(stream.orphan().unwrap());
    // The permit is free, the units are not: a request for 50 units must wait.
    let mut w = queued(bh.admit(&ask(1, 50), None));
    assert_eq!((budget(&bh).in_use, bh.stats().active), (60, 0));
    // The orphan's stream shrinks its hold: the waiter now fits.
    stream.report_usage(30, 10).unwrap();
    let next = poll_granted(&mut w).expect("granted by the orphan's shrink");
    stream.end_with_usage(Outcome::Success, 45);
    drop(next);
    books_balance(&bh);
    let s = bh.stats();
    assert_eq!((s.orphaned_in_flight, s.available), (0, 1));
}

#[test]
fn the_handle_free_paths_end_an_orphan() {
    let bh = orphanable(2, 2);
    let mut p = bh.try_acquire(1).unwrap();
    p.orphan().unwrap();
    let (_, w, _) = p.into_parts();
    assert_eq!((w, bh.stats().orphaned_in_flight), (0, 0));
    let mut p = bh.try_acquire(1).unwrap();
    p.orphan().unwrap();
    assert_eq!(p.forget(), 0);
    let mut p = bh.try_acquire(1).unwrap();
    p.orphan().unwrap();
    p.reclaim();
    let s = bh.stats();
    assert_eq!(
        (s.orphaned_in_flight, s.leaked_total, s.available),
        (0, 0, 2)
    );
}

#[test]
fn max_orphaned_reads_back_the_configuration() {
    assert_eq!(orphanable(2, 0).max_orphaned(), 0);
    assert_eq!(orphanable(2, 3).max_orphaned(), 3);
}
