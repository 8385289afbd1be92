//! A rejection's detail (docs/design.md §5.7): every constraint that can refuse is named, with
//! the counts of each dimension at the moment of the rejection.

use crate::{
    AcquireError, Bound, Bulkhead, Config, DimensionSnapshot, LimitsSnapshot, Reason, Registry,
    RegistryConfig, Rejection,
    tests::budget::{ask, budgeted, granted, queued, refused},
};

fn rejection(e: AcquireError) -> Rejection {
    match e {
        AcquireError::Rejected(r) => r,
        other => panic!("not a rejection: {other:?}"),
    }
}

#[test]
fn each_constraint_is_named_with_the_counts_of_each_dimension() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 2,
        max_queue: 1,
        budget: Some(100),
        max_queued_cost: Some(30),
        ..Config::DEFAULT
    })
    .unwrap();
    let a = granted(bh.admit(&ask(1, 70), None));
    // Budget: 70 held of 100, 40 asked, not queueing.
    let d = rejection(refused(bh.admit(&ask(1, 40).no_wait(), None))).detail();
    assert_eq!((d.reason, d.bound), (Reason::BudgetLimit, Bound::Budget));
    let budget = DimensionSnapshot {
        limit: 100,
        in_use: 70,
        available: 30,
    };
    assert_eq!(d.budget, Some(budget));
    assert_eq!(
        d.calls,
        DimensionSnapshot {
            limit: 2,
            in_use: 1,
            available: 1
        }
    );
    // The queued cost: 40 > max_queued_cost 30 with no waiter queued.
    let d = rejection(refused(bh.admit(&ask(1, 40), None))).detail();
    assert_eq!(
        (d.bound, d.queued, d.max_queue, d.queued_cost),
        (Bound::QueuedCost, 0, 1, 0)
    );
    // The queue: the permits full, one waiter of max_queue 1.
    let b = granted(bh.admit(&ask(1, 0), None));
    let w = queued(bh.admit(&ask(1, 30), None));
    let d = rejection(refused(bh.admit(&ask(1, 1), None))).detail();
    assert_eq!((d.bound, d.queued, d.queued_cost), (Bound::Queue, 1, 30));
    drop(w);
    // The permits, then the kill switch, with the revision that refused.
    let d = rejection(bh.try_acquire(1).unwrap_err()).detail();
    assert_eq!((d.bound, d.calls.available), (Bound::Limit, 0));
    bh.apply_limits(&LimitsSnapshot::new(9).limit(0)).unwrap();
    let d = rejection(bh.try_acquire(1).unwrap_err()).detail();
    assert_eq!(
        (d.bound, d.calls.limit, d.calls.in_use, d.revision),
        (Bound::KillSwitch, 0, 2, 9)
    );
    drop((a, b));
    bh.close();
    let d = rejection(bh.try_acquire(1).unwrap_err()).detail();
    assert_eq!(d.bound, Bound::Closed);
}

#[test]
fn deadlines_cancels_and_keys_are_named() {
    let bh = budgeted(1, 10, 4);
    let h = granted(bh.admit(&ask(1, 0), None));
    let w = queued(bh.admit(&ask(1, 0), None));
    bh.expire(w.ticket(), Reason::Timeout).unwrap();
    let mut w = w;
    match w.poll(None) {
        core::task::Poll::Ready(Err(e)) => assert_eq!(rejection(e).detail().bound, Bound::Deadline),
        other => panic!("{other:?}"),
    }
    let w = queued(bh.admit(&ask(1, 0), None));
    match w.cancel(Reason::Aborted) {
        crate::Cancelled::Cancelled(r) => assert_eq!(r.detail().bound, Bound::Cancelled),
        other => panic!("{other:?}"),
    }
    drop(h);
    let reg = Registry::new(RegistryConfig {
        max_keys: 1,
        ..RegistryConfig::default()
    })
    .unwrap();
    let _held = reg.try_acquire("a", 1).unwrap();
    let e = reg.try_acquire("b", 1).unwrap_err();
    assert_eq!(rejection(e.error).detail().bound, Bound::Keys);
    // Every bound has a name.
    assert_eq!(Bound::KillSwitch.as_str(), "kill_switch");
}
