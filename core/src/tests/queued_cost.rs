//! The bound on the total queued cost (`max_queued_cost`, docs/design.md §4.5): beside
//! `max_queue`, a budget's queue may be bounded by the sum of its waiters' costs. Reserved at
//! enqueue with the live place (never passed), freed when a waiter settles or is cancelled;
//! never a refusal after a waiter queued.

use crate::{
    Bulkhead, Config, ConfigError, MAX_BUDGET, Reason, WouldAdmit,
    tests::budget::{ask, books_balance, budget, granted, poll_granted, queued, refused},
};

fn bounded(budget: u64, max_queued_cost: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent: 8,
        max_queue: 8,
        budget: Some(budget),
        max_queued_cost: Some(max_queued_cost),
        ..Config::DEFAULT
    })
    .unwrap()
}

#[test]
fn the_total_queued_cost_is_bounded() {
    let bh = bounded(100, 50);
    let h = granted(bh.admit(&ask(1, 100), None));
    let mut a = queued(bh.admit(&ask(1, 30), None));
    let mut b = queued(bh.admit(&ask(1, 20), None));
    assert_eq!(budget(&bh).queued_cost, 50);
    // 50 + 1 > 50: refused at once, queue_limit (the queue's bound), counted.
    assert!(
        matches!(bh.would_admit(&ask(1, 1)), WouldAdmit::Reject(e) if e.reason() == Some(Reason::QueueLimit))
    );
    let e = refused(bh.admit(&ask(1, 1), None));
    assert_eq!(e.reason(), Some(Reason::QueueLimit));
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::QueueLimit), 1);
    // A cost of 0 asks nothing of the bound (max_queue still holds).
    let z = queued(bh.admit(&ask(1, 0), None));
    assert_eq!((bh.stats().queued, budget(&bh).queued_cost), (3, 50));
    // A grant frees its cost at once: room for another 30.
    drop(h);
    let (ca, cb) = (poll_granted(&mut a).unwrap(), poll_granted(&mut b).unwrap());
    assert_eq!(budget(&bh).queued_cost, 0);
    let e = refused(bh.admit(&ask(1, 60), None));
    assert_eq!(e.reason(), Some(Reason::QueueLimit), "60 > 50 never queues");
    assert_eq!(budget(&bh).queued_cost, 0);
    drop((ca, cb, z));
    books_balance(&bh);
}

#[test]
fn a_cancelled_or_expired_waiter_frees_its_cost() {
    let bh = bounded(10, 10);
    let h = granted(bh.admit(&ask(1, 10), None));
    let a = queued(bh.admit(&ask(1, 6), None));
    let b = queued(bh.admit(&ask(1, 4), None));
    assert_eq!(
        refused(bh.admit(&ask(1, 1), None)).reason(),
        Some(Reason::QueueLimit)
    );
    drop(a); // cancelled by its owner
    assert_eq!(budget(&bh).queued_cost, 4);
    let mut c = queued(bh.admit(&ask(1, 6), None));
    // A host timer expires b (settled, its owner not yet told): its cost leaves at once.
    bh.expire(b.ticket(), Reason::Timeout).unwrap();
    assert_eq!(budget(&bh).queued_cost, 6);
    drop(b);
    drop(h);
    let cc = poll_granted(&mut c).expect("granted");
    assert_eq!(budget(&bh).queued_cost, 0);
    drop(cc);
    books_balance(&bh);
}

#[test]
fn a_cost_above_the_bound_never_queues() {
    let bh = bounded(100, 20);
    let h = granted(bh.admit(&ask(1, 90), None));
    assert_eq!(
        refused(bh.admit(&ask(1, 21), None)).reason(),
        Some(Reason::QueueLimit)
    );
    // Admitted at once when it fits: the bound is on the queue only.
    drop(h);
    let big = granted(bh.admit(&ask(1, 50), None));
    drop(big);
    books_balance(&bh);
}

#[test]
fn the_bound_is_validated() {
    let with = |budget: Option<u64>, m: u64| {
        Bulkhead::new(Config {
            budget,
            max_queued_cost: Some(m),
            ..Config::DEFAULT
        })
    };
    for e in [
        with(Some(10), 0).unwrap_err(),
        with(Some(10), MAX_BUDGET + 1).unwrap_err(),
        with(None, 5).unwrap_err(),
    ] {
        assert_eq!(e, ConfigError::MaxQueuedCost);
        assert_eq!(e.option(), "max_queued_cost");
        let msg = std::format!("{}", e.spelled(crate::config::Spelling::Python));
        assert!(
            msg.contains("max_queued_cost") && msg.contains("budget"),
            "{msg}"
        );
    }
    assert!(with(Some(10), MAX_BUDGET).is_ok());
}
