//! Streaming settlement (docs/design.md §4.5, "Streaming holds"): `report_usage` shrinks a
//! hold at once, grows it through admission (no barging) or as counted overrun, and the books
//! balance after every step (C30 with `overrun_held`).

use std::string::ToString;

use crate::{
    Bulkhead, Config, HoldChange, MAX_BUDGET, Outcome, Reason, Request, UsageError,
    tests::budget::{ask, books_balance, budget, budgeted, granted, poll_granted, queued},
};

#[test]
fn a_shrink_returns_units_at_once_and_wakes_who_now_fits() {
    let bh = budgeted(4, 100, 4);
    let mut a = granted(bh.admit(&ask(1, 90), None));
    let mut w = queued(bh.admit(&ask(1, 50), None));
    assert!(poll_granted(&mut w).is_none());
    let r = a.report_usage(10, 20).unwrap();
    assert_eq!((r.used, r.held, r.overrun), (10, 30, 0));
    assert_eq!(r.change, HoldChange::Shrank(60));
    // 30 + 50 of 100: the waiter was granted in the same call.
    let b = poll_granted(&mut w).expect("granted by the shrink");
    assert_eq!(
        (a.cost(), budget(&bh).in_use, budget(&bh).refunded_total),
        (30, 80, 60)
    );
    books_balance(&bh);
    drop((a, b));
    books_balance(&bh);
}

#[test]
fn a_growth_that_fits_goes_through_admission() {
    let bh = budgeted(4, 100, 0);
    let mut a = granted(bh.admit(&ask(1, 40), None));
    assert_eq!(a.report_usage(0, 40).unwrap().change, HoldChange::Unchanged);
    let r = a.report_usage(30, 40).unwrap();
    assert_eq!((r.held, r.change), (70, HoldChange::Grew(30)));
    let b = budget(&bh);
    assert_eq!((b.in_use, b.available, b.reserved_total), (70, 30, 70));
    assert_eq!((b.overrun_total, b.overrun_held), (0, 0));
    // The growth holds: a request for the rest of the old headroom no longer fits.
    let e = crate::tests::budget::refused(bh.admit(&ask(1, 40), None));
    assert_eq!(e.reason(), Some(Reason::BudgetLimit));
    books_balance(&bh);
}

#[test]
fn a_growth_that_does_not_fit_is_held_as_overrun_and_takes_from_nobody() {
    let bh = budgeted(4, 100, 4);
    let mut a = granted(bh.admit(&ask(1, 60), None));
    let other = granted(bh.admit(&ask(1, 30), None));
    let r = a.report_usage(50, 40).unwrap();
    assert_eq!(
        (r.held, r.overrun, r.change),
        (90, 30, HoldChange::Overran(30))
    );
    assert_eq!((a.cost(), a.overrun()), (90, 30));
    let b = budget(&bh);
    // Charged units unchanged; the excess is in the gauge and the total, never in the word.
    assert_eq!((b.in_use, b.available), (90, 10));
    assert_eq!((b.overrun_total, b.overrun_held), (30, 30));
    // Held ≤ budget + overrun: 90 + 30 = 120 ≤ 100 + 30.
    assert!(b.in_use + b.overrun_held <= b.limit + b.overrun_held);
    // The 10 free units are still anyone's.
    let c = granted(bh.admit(&ask(1, 10), None));
    books_balance(&bh);
    // A shrink returns the part past the budget first: nothing comes back to the budget yet.
    assert_eq!(
        a.report_usage(50, 10).unwrap().change,
        HoldChange::Shrank(30)
    );
    let b = budget(&bh);
    assert_eq!((a.overrun(), b.overrun_held, b.available), (0, 0, 0));
    books_balance(&bh);
    drop((a, other, c));
    let b = budget(&bh);
    assert_eq!((b.in_use, b.available, b.overrun_held), (0, 100, 0));
    books_balance(&bh);
}

#[test]
fn a_growth_never_barges_past_a_queued_waiter() {
    let bh = budgeted(4, 100, 4);
    let mut a = granted(bh.admit(&ask(1, 20), None));
    let other = granted(bh.admit(&ask(1, 50), None));
    // 30 free, but the head wants 40: it waits, and owns the free units' turn.
    let mut w = queued(bh.admit(&ask(1, 40), None));
    assert!(poll_granted(&mut w).is_none());
    let r = a.report_usage(20, 10).unwrap();
    assert_eq!(
        r.change,
        HoldChange::Overran(10),
        "growth barged past the queue"
    );
    assert_eq!(budget(&bh).available, 30);
    // The head is granted once enough returns; the overrun part never stood in its way.
    drop(other);
    let head = poll_granted(&mut w).expect("the head is granted");
    assert_eq!(head.cost(), 40);
    books_balance(&bh);
    drop((a, head));
    books_balance(&bh);
}

#[test]
fn refund_takes_the_overrun_part_first() {
    let bh = budgeted(2, 10, 0);
    let mut a = granted(bh.admit(&ask(1, 10), None));
    assert_eq!(a.report_usage(8, 6).unwrap().change, HoldChange::Overran(4));
    a.refund(5).unwrap();
    // 4 from the overrun part, 1 from the charge.
    assert_eq!((a.cost(), a.overrun()), (9, 0));
    assert_eq!(budget(&bh).available, 1);
    assert!(a.refund(10).is_err(), "more than held");
    books_balance(&bh);
}

#[test]
fn the_end_settles_against_the_reports() {
    let bh = budgeted(2, 100, 0);
    // Ended with a final usage below a report: raised to the report.
    let mut a = granted(bh.admit(&ask(1, 50), None));
    a.report_usage(40, 0).unwrap();
    a.end_with_usage(Outcome::Success, 30);
    let b = budget(&bh);
    assert_eq!((b.consumed_total, b.refunded_total), (40, 10));
    books_balance(&bh);
    // Ended by a drop after an overrun: the whole hold was used, and the gauge empties.
    let mut a = granted(bh.admit(&ask(1, 100), None));
    assert_eq!(
        a.report_usage(90, 30).unwrap().change,
        HoldChange::Overran(20)
    );
    drop(a);
    let b = budget(&bh);
    assert_eq!(
        (b.consumed_total, b.overrun_total, b.overrun_held),
        (40 + 120, 20, 0)
    );
    books_balance(&bh);
    // Usage past the hold at the end: overrun beyond what was held.
    let mut a = granted(bh.admit(&ask(1, 10), None));
    a.report_usage(5, 5).unwrap();
    a.end_with_usage(Outcome::Success, 25);
    assert_eq!(budget(&bh).overrun_total, 20 + 15);
    books_balance(&bh);
}

#[test]
fn bad_reports_are_refused_and_change_nothing() {
    let bh = budgeted(4, 100, 0);
    let mut a = granted(bh.admit(&ask(2, 50), None));
    a.report_usage(20, 10).unwrap();
    let before = (a.cost(), a.reported(), bh.stats());
    let e = a.report_usage(19, 100).unwrap_err();
    assert_eq!(
        e,
        UsageError::Decreased {
            previous: 20,
            got: 19
        }
    );
    assert!(e.to_string().contains(">= 20, got 19"), "{e}");
    let e = a.report_usage(20, MAX_BUDGET).unwrap_err();
    assert_eq!(
        e,
        UsageError::TooLarge {
            used: 20,
            remaining: MAX_BUDGET
        }
    );
    assert!(e.to_string().contains(&MAX_BUDGET.to_string()), "{e}");
    assert!(
        a.report_usage(u64::MAX, 1).is_err(),
        "overflow is refused, not wrapped"
    );
    assert_eq!((a.cost(), a.reported(), bh.stats()), before);
    // Equal usage is fine (cumulative, not strictly increasing).
    assert_eq!(
        a.report_usage(20, 10).unwrap().change,
        HoldChange::Unchanged
    );
    a.release_partial(2).unwrap();
    assert_eq!(a.report_usage(30, 0).unwrap_err(), UsageError::Released);
    books_balance(&bh);
}

#[test]
fn without_a_budget_only_the_usage_is_recorded() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 2,
        ..Config::DEFAULT
    })
    .unwrap();
    let mut a = granted(bh.admit(&Request::new(1), None));
    let r = a.report_usage(500, 100).unwrap();
    assert_eq!((r.held, r.overrun, r.change), (0, 0, HoldChange::Unchanged));
    assert_eq!((a.reported(), a.cost()), (500, 0));
    assert!(bh.stats().budget.is_none());
}

#[test]
fn a_disabled_bulkhead_grows_unbounded_and_the_kill_switch_overruns() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 2,
        budget: Some(10),
        enabled: false,
        ..Config::DEFAULT
    })
    .unwrap();
    let mut a = granted(bh.admit(&ask(1, 10), None));
    // Disabled: admitted past the budget, charged (the counts go negative), no overrun.
    assert_eq!(a.report_usage(0, 25).unwrap().change, HoldChange::Grew(15));
    assert_eq!(budget(&bh).available, -15);
    drop(a);
    let bh = budgeted(2, 10, 0);
    let mut a = granted(bh.admit(&ask(1, 5), None));
    bh.apply_limits(&crate::LimitsSnapshot {
        revision: 1,
        limit: Some(0),
        ..crate::LimitsSnapshot::new(1)
    })
    .unwrap();
    // Under the kill switch nothing new is taken, not even by a live hold.
    assert_eq!(a.report_usage(0, 6).unwrap().change, HoldChange::Overran(1));
    books_balance(&bh);
}

#[test]
fn a_growth_asks_no_permit_even_when_the_permits_are_overdrawn() {
    // Found by review: a limit shrunk below `active` left the permit count negative, and a
    // growth (which asks 0 permits) was refused for it though the budget had room.
    let bh = budgeted(4, 1000, 8);
    let mut calls: std::vec::Vec<_> = (0..4)
        .map(|_| granted(bh.admit(&ask(1, 100), None)))
        .collect();
    bh.set_limit(2).unwrap();
    assert_eq!((bh.stats().available, budget(&bh).available), (-2, 600));
    assert_eq!(
        calls[0].report_usage(50, 100).unwrap().change,
        HoldChange::Grew(50)
    );
    // In observe mode a budget-only growth is not an observed concurrency admission.
    let bh = Bulkhead::new(Config {
        max_concurrent: 2,
        budget: Some(1000),
        observe: crate::Observe::Concurrency,
        ..Config::DEFAULT
    })
    .unwrap();
    let mut held: std::vec::Vec<_> = (0..3)
        .map(|_| granted(bh.admit(&ask(1, 100), None)))
        .collect();
    let before = bh.stats().observed_by_reason.get(Reason::ConcurrencyLimit);
    assert_eq!(
        held[0].report_usage(0, 200).unwrap().change,
        HoldChange::Grew(100)
    );
    assert_eq!(
        bh.stats().observed_by_reason.get(Reason::ConcurrencyLimit),
        before
    );
    calls.clear();
    held.clear();
}
