//! The budget, a bulkhead's second dimension (docs/design.md §4.5): permits and cost units in one
//! decision, budgets that queue, settlement counters, runtime changes; C29 and C30 as named
//! cases (`../shared/cases/CASES.md`, the in-flight-budget parts).

use core::{
    sync::atomic::{AtomicUsize, Ordering::SeqCst},
    task::{Poll, Waker},
};
use std::{string::ToString, sync::Arc, task::Wake};

use crate::{
    AcquireError, BudgetStats, Bulkhead, Call, Config, ConfigError, Decision, MAX_BUDGET,
    MAX_CONCURRENT_WITH_BUDGET, Outcome, Reason, Request, Waiter,
};

#[derive(Default)]
struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A runtime-sized bulkhead with a budget (shared with the dry-run tests).
pub(super) fn budgeted(max_concurrent: u64, budget: u64, max_queue: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent,
        max_queue,
        budget: Some(budget),
        ..Config::DEFAULT
    })
    .unwrap()
}

pub(super) fn ask(weight: u64, cost: u64) -> Request {
    Request::new(weight).cost(cost)
}

pub(super) fn granted(d: Decision<&Bulkhead, 0>) -> Call<&Bulkhead, 0> {
    match d {
        Decision::Granted(c) => c,
        other => panic!("expected a grant, got {other:?}"),
    }
}

pub(super) fn queued(d: Decision<&Bulkhead, 0>) -> Waiter<&Bulkhead, 0> {
    match d {
        Decision::Queued(w) => w,
        other => panic!("expected to queue, got {other:?}"),
    }
}

pub(super) fn refused(d: Decision<&Bulkhead, 0>) -> AcquireError {
    match d {
        Decision::Rejected(e) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

pub(super) fn poll_granted<'a>(w: &mut Waiter<&'a Bulkhead, 0>) -> Option<Call<&'a Bulkhead, 0>> {
    match w.poll(None) {
        Poll::Pending => None,
        Poll::Ready(Ok(c)) => Some(c),
        Poll::Ready(Err(e)) => panic!("waiter refused: {e}"),
    }
}

pub(super) fn budget(bh: &Bulkhead) -> BudgetStats {
    bh.stats().budget.expect("a budget")
}

/// I2 for both dimensions at a quiescent point, and the settlement identity (C30).
pub(super) fn books_balance(bh: &Bulkhead) {
    let s = bh.stats();
    assert_eq!(
        s.available + s.active as i64 + s.granted_unclaimed as i64,
        s.limit as i64,
        "I2 (permits): {s:?}"
    );
    let b = s.budget.expect("a budget");
    assert_eq!(
        b.available + b.in_use as i64 + b.granted_unclaimed as i64,
        b.limit as i64,
        "I2 (budget): {b:?}"
    );
    assert_eq!(
        b.reserved_total + b.overrun_total,
        b.consumed_total + b.refunded_total + b.in_use + b.granted_unclaimed + b.overrun_held,
        "settlement identity: {b:?}"
    );
}

#[test]
fn both_dimensions_or_neither() {
    let bh = budgeted(2, 100, 0);
    let a = granted(bh.admit(&ask(1, 70), None));
    // Permits free, budget short: nothing is taken.
    let e = refused(bh.admit(&ask(1, 40), None));
    assert_eq!(e.reason(), Some(Reason::BudgetLimit));
    let s = bh.stats();
    assert_eq!((s.active, s.available), (1, 1));
    assert_eq!((budget(&bh).in_use, budget(&bh).available), (70, 30));
    // Budget free, permits short: nothing is taken.
    let b = granted(bh.admit(&ask(1, 10), None));
    let e = refused(bh.admit(&ask(1, 5), None));
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    assert_eq!((bh.stats().active, budget(&bh).in_use), (2, 80));
    // Both short: the permits are named (checked first).
    let e = refused(bh.admit(&ask(1, 50), None));
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    let s = bh.stats();
    assert_eq!(s.rejected_by_reason.get(Reason::BudgetLimit), 1);
    assert_eq!(s.rejected_by_reason.get(Reason::ConcurrencyLimit), 2);
    drop((a, b));
    books_balance(&bh);
    assert_eq!(budget(&bh).available, 100);
}

#[test]
fn cost_is_validated() {
    let bh = budgeted(2, 100, 4);
    assert_eq!(
        refused(bh.admit(&ask(1, 101), None)),
        AcquireError::InvalidCost {
            cost: 101,
            max_budget: 100
        }
    );
    let plain = Bulkhead::new(Config::DEFAULT).unwrap();
    let e = match plain.admit(&ask(1, 1), None) {
        Decision::Rejected(e) => e,
        _ => panic!(),
    };
    assert_eq!(
        e,
        AcquireError::InvalidCost {
            cost: 1,
            max_budget: 0
        }
    );
    assert_eq!(e.invalid_argument(), Some("cost"));
    assert_eq!(
        e.to_string(),
        "cost must be 0 on a bulkhead without a budget, got 1"
    );
    // Never counted.
    assert_eq!(bh.stats().rejected_by_reason.total(), 0);
    assert_eq!(plain.stats().budget, None);
    // Cost 0 on a budget bulkhead is a plain call.
    let c = granted(bh.admit(&ask(1, 0), None));
    assert_eq!((c.cost(), budget(&bh).in_use), (0, 0));
}

#[test]
fn config_limits_of_a_budget() {
    let cfg = |max_concurrent, budget| Config {
        max_concurrent,
        budget: Some(budget),
        ..Config::DEFAULT
    };
    assert_eq!(Bulkhead::new(cfg(1, 0)).err(), Some(ConfigError::Budget));
    assert_eq!(
        Bulkhead::new(cfg(1, MAX_BUDGET + 1)).err(),
        Some(ConfigError::Budget)
    );
    assert_eq!(
        Bulkhead::new(cfg(MAX_CONCURRENT_WITH_BUDGET + 1, 10)).err(),
        Some(ConfigError::Budget)
    );
    let msg = ConfigError::Budget.to_string();
    assert!(msg.contains("budget must be an integer in 1..="), "{msg}");
    // The extremes fit the shared word: the fields never spill into each other.
    let bh = Bulkhead::new(cfg(MAX_CONCURRENT_WITH_BUDGET, MAX_BUDGET)).unwrap();
    let all = granted(bh.admit(&ask(MAX_CONCURRENT_WITH_BUDGET, MAX_BUDGET), None));
    let s = bh.stats();
    assert_eq!((s.available, s.active), (0, MAX_CONCURRENT_WITH_BUDGET));
    assert_eq!(budget(&bh).available, 0);
    bh.set_budget(0).unwrap();
    bh.set_limit(1).unwrap();
    let s = bh.stats();
    assert_eq!(s.available, 1 - MAX_CONCURRENT_WITH_BUDGET as i64);
    assert_eq!(budget(&bh).available, -(MAX_BUDGET as i64));
    drop(all);
    let s = bh.stats();
    assert_eq!((s.available, budget(&bh).available), (1, 0));
    bh.set_limit(MAX_CONCURRENT_WITH_BUDGET).unwrap();
    bh.set_budget(MAX_BUDGET).unwrap();
    books_balance(&bh);
    assert_eq!(budget(&bh).available, MAX_BUDGET as i64);
}

/// A disabled bulkhead admits everything and still counts both dimensions (I1 exempt).
#[test]
fn disabled_takes_both_dimensions_unbounded() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 1,
        budget: Some(10),
        enabled: false,
        ..Config::DEFAULT
    })
    .unwrap();
    let calls: std::vec::Vec<_> = (0..3)
        .map(|_| granted(bh.admit(&ask(1, 8), None)))
        .collect();
    assert_eq!(bh.stats().available, -2);
    assert_eq!(budget(&bh).available, 10 - 24);
    drop(calls);
    books_balance(&bh);
    assert_eq!(budget(&bh).available, 10);
}

/// Budgets queue FIFO with no barging; a refund wakes the head; never refused after the wait.
#[test]
fn budgets_queue_in_order() {
    let bh = budgeted(10, 100, 8);
    let mut a = granted(bh.admit(&ask(1, 80), None));
    let mut b = queued(bh.admit(&ask(1, 50), None));
    // Fits the budget on its own, but B is ahead: no barging.
    let mut c = queued(bh.admit(&ask(1, 10), None));
    assert!(poll_granted(&mut b).is_none() && poll_granted(&mut c).is_none());
    assert_eq!(
        refused(bh.admit(&ask(1, 10).no_wait(), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    a.refund(40).unwrap();
    // 40 held: B (50) fits, then C (10).
    let b = poll_granted(&mut b).expect("granted after the refund");
    let c = poll_granted(&mut c).expect("granted after B");
    assert_eq!(budget(&bh).in_use, 100);
    assert_eq!(bh.stats().queue_wait_count, 2);
    drop((a, b, c));
    books_balance(&bh);
}

#[test]
fn a_cost_above_the_current_budget_never_queues() {
    let bh = budgeted(4, 100, 8);
    let h = granted(bh.admit(&ask(1, 10), None));
    bh.set_budget(50).unwrap();
    let e = refused(bh.admit(&ask(1, 60), None));
    assert_eq!(e.reason(), Some(Reason::BudgetLimit));
    assert_eq!(bh.stats().queued, 0);
    drop(h);
    books_balance(&bh);
}

/// A shrink below a queued waiter's cost refuses it (`budget_limit`, the one refusal after a
/// wait); a grow grants the waiters that now fit, in the same call.
#[test]
fn set_budget_shrinks_by_attrition_and_grants_on_growth() {
    let bh = budgeted(4, 120, 8);
    bh.set_budget(100).unwrap();
    let h = granted(bh.admit(&ask(1, 90), None));
    let mut big = queued(bh.admit(&ask(1, 80), None));
    let mut small = queued(bh.admit(&ask(1, 20), None));
    bh.set_budget(60).unwrap();
    match big.poll(None) {
        Poll::Ready(Err(e)) => assert_eq!(e.reason(), Some(Reason::BudgetLimit)),
        other => panic!("{other:?}"),
    }
    assert!(poll_granted(&mut small).is_none(), "60 − 90 < 20");
    assert_eq!(budget(&bh).available, -30);
    bh.set_budget(120).unwrap();
    let small = poll_granted(&mut small).expect("granted by the growth");
    assert_eq!(budget(&bh).in_use, 110);
    assert_eq!(bh.set_budget(121), Err(ConfigError::BudgetLimit));
    let plain = Bulkhead::new(Config::DEFAULT).unwrap();
    assert_eq!(plain.set_budget(1), Err(ConfigError::BudgetLimit));
    drop((h, small));
    books_balance(&bh);
    // Budget 0: only cost-0 requests.
    bh.set_budget(0).unwrap();
    assert_eq!(
        refused(bh.admit(&ask(1, 1), None)).reason(),
        Some(Reason::BudgetLimit)
    );
    drop(granted(bh.admit(&ask(1, 0), None)));
}

#[test]
fn settlement_counts_refunds_and_overrun() {
    let bh = budgeted(4, 1000, 0);
    let a = granted(bh.admit(&ask(1, 500), None));
    a.end_with_usage(Outcome::Success, 320);
    let b = granted(bh.admit(&ask(1, 100), None));
    b.end_with_usage(Outcome::Success, 130);
    let mut c = granted(bh.admit(&ask(1, 200), None));
    c.refund(50).unwrap();
    assert_eq!(c.refund(151).unwrap_err().held, 150);
    drop(c); // no usage reported: the whole remaining hold was used
    let d = granted(bh.admit(&ask(1, 40), None));
    let (bh_ref, weight, cost, token) = d.into_parts_with_cost();
    assert_eq!((weight, cost), (1, 40));
    drop(Call::from_parts_with_cost(bh_ref, weight, cost, token));
    let e = granted(bh.admit(&ask(1, 30), None));
    let (_, w, _) = e.into_parts(); // the units return, counted refunded
    bh.release_units(w);
    let b = budget(&bh);
    assert_eq!(b.reserved_total, 500 + 100 + 200 + 40 + 30);
    assert_eq!(b.consumed_total, 320 + 130 + 150 + 40);
    assert_eq!(b.refunded_total, 180 + 50 + 30);
    assert_eq!(b.overrun_total, 30);
    assert_eq!(b.in_use, 0);
    books_balance(&bh);
}

#[test]
fn a_cancelled_or_abandoned_budget_waiter_gives_back_nothing_it_did_not_take() {
    let bh = budgeted(4, 100, 8);
    let h = granted(bh.admit(&ask(1, 100), None));
    let w1 = queued(bh.admit(&ask(1, 30), None));
    let w2 = queued(bh.admit(&ask(1, 30), None));
    drop(w1); // abandoned while queued
    let _ = w2.cancel(Reason::Aborted);
    assert_eq!(budget(&bh).in_use, 100);
    drop(h);
    books_balance(&bh);
    assert_eq!(
        (budget(&bh).available, budget(&bh).reserved_total),
        (100, 100)
    );
}

/// A grant decided for a waiter that its owner then abandons: the units pass on, counted
/// refunded.
#[test]
fn a_grant_that_races_the_drop_passes_its_units_on() {
    let bh = budgeted(4, 100, 8);
    let h = granted(bh.admit(&ask(1, 100), None));
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    let mut w = queued(bh.admit(&ask(1, 60), Some(&waker)));
    assert!(w.poll(Some(&waker)).is_pending());
    drop(h); // grants w
    assert_eq!(count.0.load(SeqCst), 1);
    assert_eq!(budget(&bh).granted_unclaimed, 60);
    drop(w);
    books_balance(&bh);
    let b = budget(&bh);
    assert_eq!((b.available, b.refunded_total), (100, 60));
}

// ----- C29 (../shared/cases/CASES.md): a budget checked before it is charged ----------------

/// Steps 1–4 and the oversize reservation: one decision over permits and tokens, FIFO.
#[test]
fn c29_budget_is_charged_in_the_same_decision() {
    let bh = budgeted(4, 100, 10);
    let r1 = granted(bh.admit(&ask(1, 60), None));
    let mut rs: std::vec::Vec<_> = (0..4)
        .map(|_| queued(bh.admit(&ask(1, 60), None)))
        .collect();
    assert_eq!(budget(&bh).in_use, 60, "only R1 admitted");
    assert_eq!(
        bh.stats().queued,
        4,
        "R2..R5 queue although the count limit has room"
    );
    // Step 3: R1 reports 25 (refund 35): R2 is admitted at once (85), R3 waits.
    let mut r1 = r1;
    r1.refund(35).unwrap();
    let r2 = poll_granted(&mut rs[0]).expect("R2 admitted after the refund");
    assert_eq!(budget(&bh).in_use, 85);
    assert!(poll_granted(&mut rs[1]).is_none(), "85 + 60 > 100");
    // Step 4: R1 releases → 60 in use, R3 waits; R2 releases → R3 admitted, R4 waits.
    r1.end_with_usage(Outcome::Success, 25);
    assert_eq!(budget(&bh).in_use, 60);
    assert!(poll_granted(&mut rs[1]).is_none());
    drop(r2);
    let r3 = poll_granted(&mut rs[1]).expect("R3 admitted");
    assert_eq!(budget(&bh).in_use, 60);
    assert!(poll_granted(&mut rs[2]).is_none());
    // A reservation above the whole budget: refused at once, never queued (an argument).
    assert!(matches!(
        refused(bh.admit(&ask(1, 150), None)),
        AcquireError::InvalidCost { cost: 150, .. }
    ));
    drop(r3);
    let r4 = poll_granted(&mut rs[2]).expect("R4");
    drop(r4);
    let r5 = poll_granted(&mut rs[3]).expect("R5");
    drop(r5);
    books_balance(&bh);
    let b = budget(&bh);
    assert_eq!(
        (b.in_use, b.refunded_total, b.consumed_total),
        (0, 35, 25 + 60 * 4)
    );
}

/// Step 5: X is refused (Q=0) or queued (Q=1) holding no tokens: in use stays 10, never 20.
#[test]
fn c29_a_refused_or_queued_request_holds_no_tokens() {
    for max_queue in [0, 1] {
        let bh = budgeted(1, 100, max_queue);
        let h = granted(bh.admit(&ask(1, 10), None));
        let d = bh.admit(&ask(1, 10), None);
        if max_queue == 0 {
            assert_eq!(refused(d).reason(), Some(Reason::ConcurrencyLimit));
            assert_eq!(budget(&bh).in_use, 10);
        } else {
            let mut x = queued(d);
            assert_eq!(budget(&bh).in_use, 10);
            drop(h);
            let x = poll_granted(&mut x).expect("granted after H");
            assert_eq!(budget(&bh).in_use, 10);
            drop(x);
            books_balance(&bh);
            continue;
        }
        drop(h);
        books_balance(&bh);
    }
}

// ----- C30: a streamed call's hold (the in-flight-budget parts) -----------------------------

/// Count limit 1, budget 1000, Q=0: a streamed call keeps its slot until it ends; the hold
/// shrinks with reports, never below the reported usage; the rest returns at the end.
#[test]
fn c30_a_streamed_call_holds_until_it_ends() {
    let bh = budgeted(1, 1000, 0);
    let mut s1 = granted(bh.admit(&ask(1, 500), None));
    assert_eq!(
        refused(bh.admit(&ask(1, 10), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    // Usage 150 then 300 reported: a hold of what is left of the reservation may shrink, but
    // never below what was used (the caller refunds only what it will not need).
    s1.refund(100).unwrap();
    assert!(budget(&bh).in_use >= 300);
    s1.end_with_usage(Outcome::Success, 320);
    let b = budget(&bh);
    assert_eq!(
        (b.in_use, b.consumed_total, b.refunded_total),
        (0, 320, 180)
    );
    // Every entry path gives its slot back: 10 rounds of 2 calls on limit 4.
    let bh = budgeted(4, 1000, 0);
    for round in 0..10 {
        let a = granted(bh.admit(&ask(1, 100), None));
        let b = granted(bh.admit(&ask(1, 100), None));
        if round % 2 == 0 {
            a.end_with_usage(Outcome::Success, 50);
        } else {
            drop(a);
        }
        drop(b);
        assert_eq!(bh.stats().active, 0);
    }
    assert_eq!(bh.stats().rejected_by_reason.total(), 0);
    books_balance(&bh);
}

/// async-bulkhead-llm skips `totalConsumed` when the final hold is 0 (ANCHORS-ADMISSION §4 bug
/// 4, found here by the budget reference model): usage reported by a call that holds no units
/// is consumed and counted as overrun, so the settlement identity still holds.
#[test]
fn usage_of_a_call_that_holds_nothing_is_still_counted() {
    let bh = budgeted(2, 100, 0);
    let mut a = granted(bh.admit(&ask(1, 40), None));
    a.refund(40).unwrap();
    a.end_with_usage(Outcome::Success, 25);
    granted(bh.admit(&ask(1, 0), None)).end_with_usage(Outcome::Success, 5);
    let b = budget(&bh);
    assert_eq!(
        (
            b.reserved_total,
            b.refunded_total,
            b.consumed_total,
            b.overrun_total
        ),
        (40, 40, 30, 30)
    );
    books_balance(&bh);
    // Without a budget there is nothing to count.
    let plain = Bulkhead::new(Config::DEFAULT).unwrap();
    plain
        .try_acquire(1)
        .unwrap()
        .end_with_usage(Outcome::Success, 5);
    assert_eq!(plain.stats().budget, None);
}

/// Units are held only together with a permit: returning a call's last permit returns its
/// units too (counted refunded), so `drain` and I5 never see an idle bulkhead holding units.
#[test]
fn the_last_permit_takes_the_units_with_it() {
    let bh = budgeted(4, 100, 0);
    let mut c = granted(bh.admit(&ask(3, 60), None));
    c.release_partial(2).unwrap();
    assert_eq!((c.weight(), c.cost(), budget(&bh).in_use), (1, 60, 60));
    c.release_partial(1).unwrap();
    assert_eq!((c.weight(), c.cost()), (0, 0));
    let s = bh.stats();
    assert_eq!(
        (s.active, budget(&bh).in_use, budget(&bh).refunded_total),
        (0, 0, 60)
    );
    assert!(bh.is_idle());
    c.end_with_usage(Outcome::Success, 0);
    books_balance(&bh);
}

/// The permits field keeps room below zero for a disabled bulkhead's over-admission and a shrink
/// after it (found in review: at 2¹⁹−1 the field wrapped and the bulkhead read idle).
#[test]
fn overadmission_then_a_shrink_stays_inside_the_field() {
    let max = MAX_CONCURRENT_WITH_BUDGET;
    let bh = Bulkhead::new(Config {
        max_concurrent: max,
        budget: Some(1),
        enabled: false,
        ..Config::DEFAULT
    })
    .unwrap();
    let a = granted(bh.admit(&ask(max, 0), None));
    let b = granted(bh.admit(&ask(max, 0), None));
    bh.set_limit(1).unwrap();
    let s = bh.stats();
    assert_eq!(s.available, 1 - 2 * max as i64, "{s}");
    assert_eq!(s.active, 2 * max);
    assert!(!bh.is_idle());
    assert_eq!(budget(&bh).available, 1, "the budget field is untouched");
    drop((a, b));
    assert_eq!((bh.stats().available, bh.stats().active), (1, 0));
}
