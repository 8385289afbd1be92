//! The dry run (docs/design.md §5.6): `would_admit` predicts `admit` through the same checks,
//! read-only. The random-operation comparisons are in `tests/tests/model.rs` and
//! `model_budget.rs`; these pin the cases the models do not reach (policies, close, disabled)
//! and async-bulkhead-llm's dry-run bug (ANCHORS-ADMISSION §4).

use core::{sync::atomic::Ordering::SeqCst, time::Duration};
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use super::budget::budgeted;
use crate::{
    Bulkhead, ClockSource, Config, Decision, Event, Observer, Outcome, Reason, Request, Resilience,
    WouldAdmit, breaker::BreakerConfig,
};

use super::VClock;

#[derive(Default)]
struct Events(Mutex<Vec<std::string::String>>);
impl Observer for Events {
    fn on_event(&self, e: &Event<'_>) {
        self.0.lock().unwrap().push(std::format!("{e:?}"));
    }
}

/// The decision `admit` makes, as the dry run names it (a grant or waiter is dropped).
fn real(bh: &Bulkhead, r: &Request) -> WouldAdmit {
    let queued = bh.stats().queued;
    match bh.admit(r, None) {
        Decision::Granted(c) => {
            let _held = c.into_parts_with_cost(); // the permits stay out
            WouldAdmit::AdmitNow
        }
        Decision::Queued(w) => {
            core::mem::forget(w);
            WouldAdmit::WouldQueue {
                position: queued + 1,
                ahead: queued,
            }
        }
        Decision::Rejected(e) => WouldAdmit::Reject(e),
    }
}

/// Same kind, same reason (the snapshots of a rejection may differ: the real one is counted).
fn same(a: &WouldAdmit, b: &WouldAdmit) -> bool {
    match (a, b) {
        (WouldAdmit::Reject(x), WouldAdmit::Reject(y)) => x.reason() == y.reason(),
        _ => a == b,
    }
}

/// Dry run, then the real admission: the dry run counted nothing and predicted it.
fn predicts(bh: &Bulkhead, r: &Request) -> WouldAdmit {
    let before = bh.stats();
    let dry = bh.would_admit(r);
    assert_eq!(bh.stats(), before, "a dry run changes nothing");
    let got = real(bh, r);
    assert!(same(&dry, &got), "dry run {dry:?} vs admit {got:?}");
    dry
}

#[test]
fn each_outcome_is_predicted_and_nothing_is_counted() {
    let bh = budgeted(2, 100, 1);
    assert_eq!(
        predicts(&bh, &Request::new(1).cost(60)),
        WouldAdmit::AdmitNow
    );
    let r = predicts(&bh, &Request::new(1).cost(60).no_wait());
    assert_eq!(r.reason(), Some(Reason::BudgetLimit));
    let q = predicts(&bh, &Request::new(1).cost(60));
    assert_eq!(
        q,
        WouldAdmit::WouldQueue {
            position: 1,
            ahead: 0
        }
    );
    let r = predicts(&bh, &Request::new(1).cost(10));
    assert_eq!(r.reason(), Some(Reason::QueueLimit));
    let r = predicts(&bh, &Request::new(3));
    assert!(matches!(
        r,
        WouldAdmit::Reject(crate::AcquireError::InvalidWeight { .. })
    ));
    let r = predicts(&bh, &Request::new(1).cost(101));
    assert!(matches!(
        r,
        WouldAdmit::Reject(crate::AcquireError::InvalidCost { .. })
    ));
    // Only the real admissions were counted (one budget_limit, one queue_limit).
    let s = bh.stats();
    assert_eq!(s.rejected_by_reason.get(Reason::BudgetLimit), 1);
    assert_eq!(s.rejected_by_reason.get(Reason::QueueLimit), 1);
}

/// ANCHORS-ADMISSION §4: async-bulkhead-llm's dry run answers `shutdown` where its acquire
/// answers `budget_limit` (two check orders). One order here: after close both say shutdown;
/// before it both name the short dimension.
#[test]
fn one_check_order_for_close_and_a_short_budget() {
    let bh = budgeted(4, 10, 4);
    real(&bh, &Request::new(1).cost(10));
    let r = predicts(&bh, &Request::new(1).cost(5).no_wait());
    assert_eq!(r.reason(), Some(Reason::BudgetLimit));
    bh.close();
    for req in [
        Request::new(1).cost(5),
        Request::new(1).cost(5).no_wait(),
        Request::new(1),
    ] {
        assert_eq!(predicts(&bh, &req).reason(), Some(Reason::Shutdown));
    }
    // Invalid arguments come first, closed or not.
    assert_eq!(predicts(&bh, &Request::new(0)).reason(), None);
}

#[test]
fn a_queued_waiter_blocks_the_dry_run_too() {
    // No barging: with a waiter queued, a request that would fit is predicted to queue.
    let bh = budgeted(2, 100, 4);
    real(&bh, &Request::new(2));
    assert!(matches!(
        predicts(&bh, &Request::new(1)),
        WouldAdmit::WouldQueue { .. }
    ));
    bh.release_units(2); // one goes to the queued waiter (granted, unclaimed), one is free
    assert_eq!(bh.stats().granted_unclaimed, 1);
    assert_eq!(predicts(&bh, &Request::new(1)), WouldAdmit::AdmitNow);
}

#[test]
fn limits_above_the_current_ceiling_and_fail_fast() {
    let bh = budgeted(4, 100, 4);
    bh.set_limit(2).unwrap();
    bh.set_budget(50).unwrap();
    real(&bh, &Request::new(2));
    assert_eq!(
        predicts(&bh, &Request::new(3)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    // Permits short, and the cost above the shrunk budget: it could never be served.
    assert_eq!(
        predicts(&bh, &Request::new(1).cost(60)).reason(),
        Some(Reason::BudgetLimit)
    );
    let bh = budgeted(4, 100, 4);
    bh.set_budget(50).unwrap();
    assert_eq!(
        predicts(&bh, &Request::new(1).cost(60)).reason(),
        Some(Reason::BudgetLimit)
    );
    let ff = budgeted(1, 100, 0);
    real(&ff, &Request::new(1));
    assert_eq!(
        predicts(&ff, &Request::new(1)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let off = Bulkhead::new(Config {
        max_concurrent: 1,
        enabled: false,
        budget: Some(10),
        ..Config::DEFAULT
    })
    .unwrap();
    for _ in 0..3 {
        assert_eq!(
            predicts(&off, &Request::new(1).cost(10)),
            WouldAdmit::AdmitNow
        );
    }
}

/// The breaker's check is read-only in a dry run: an open breaker past its `open_duration`
/// is predicted to admit (the call would take the first probe) but does not move to
/// half-open, fire an event or take the probe slot; the real admission does.
#[test]
fn the_breaker_is_checked_without_committing() {
    let clock = Arc::new(VClock::default());
    let events = Arc::new(Events::default());
    let observer: crate::event::SharedObserver = events.clone();
    let bh = Bulkhead::with_observer(
        Config {
            max_concurrent: 4,
            resilience: Resilience {
                breaker: Some(BreakerConfig {
                    failure_threshold: 1,
                    open_duration: Duration::from_millis(10),
                    half_open_max_calls: 1,
                    ..BreakerConfig::DEFAULT
                }),
                ..Resilience::OFF
            },
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
        Some(observer),
        None,
    )
    .unwrap();
    let Decision::Granted(c) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    c.end(Outcome::Failure);
    assert_eq!(
        predicts(&bh, &Request::new(1)).reason(),
        Some(Reason::CircuitOpen)
    );
    clock.0.fetch_add(20_000_000, SeqCst);
    let n = events.0.lock().unwrap().len();
    for _ in 0..3 {
        assert_eq!(bh.would_admit(&Request::new(1)), WouldAdmit::AdmitNow);
    }
    assert_eq!(
        events.0.lock().unwrap().len(),
        n,
        "no transition fired by a dry run"
    );
    // The real admission commits open -> half-open and takes the only probe slot...
    let Decision::Granted(probe) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(bh.circuit_state().unwrap().as_str(), "half_open");
    // ...after which both refuse.
    assert_eq!(
        predicts(&bh, &Request::new(1)).reason(),
        Some(Reason::CircuitOpen)
    );
    probe.end(Outcome::Success);
    assert_eq!(predicts(&bh, &Request::new(1)), WouldAdmit::AdmitNow);
}
