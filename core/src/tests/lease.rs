//! Leased mode (docs/design.md §16): the limit as a leased block.

use core::task::Poll;

use crate::{AcquireError, Bound, Bulkhead, Config, Decision, LimitsSnapshot, Reason, Request};

fn bh() -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent: 4,
        max_queue: 4,
        ..Config::DEFAULT
    })
    .unwrap()
}

fn refusal(r: Result<crate::Permit<'_>, AcquireError>) -> crate::RejectionDetail {
    match r {
        Err(AcquireError::Rejected(r)) => r.detail(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn an_empty_block_refuses_a_try_with_fleet_lease_and_keeps_waiters() {
    let b = bh();
    assert!(!b.is_leased());
    b.set_lease(0).unwrap();
    assert!(b.is_leased());
    let d = refusal(b.try_acquire(1));
    assert_eq!(
        (d.reason, d.bound, d.calls.limit),
        (Reason::ConcurrencyLimit, Bound::FleetLease, 0)
    );
    let Decision::Queued(mut w) = b.admit(&Request::new(2), None) else {
        panic!("an empty block must queue, not refuse")
    };
    assert!(w.poll(None).is_pending());
    b.set_lease(1).unwrap();
    assert!(
        w.poll(None).is_pending(),
        "weight 2 does not fit a block of 1"
    );
    b.set_lease(3).unwrap();
    let Poll::Ready(Ok(call)) = w.poll(None) else {
        panic!()
    };
    assert_eq!(b.stats().active, 2);
    // A block with room but full refuses with the plain limit bound.
    let _one = b.try_acquire(1).unwrap();
    assert_eq!(refusal(b.try_acquire(1)).bound, Bound::Limit);
    drop(call);
}

#[test]
fn only_the_ceiling_refuses_a_weight_and_a_larger_block_raises_it() {
    let b = bh();
    b.set_lease(1).unwrap();
    // A weight above the ceiling is an invalid argument (it could never be granted).
    let Decision::Rejected(e) = b.admit(&Request::new(5), None) else {
        panic!()
    };
    assert_eq!(e.reason(), None, "{e:?}");
    b.set_lease(6).unwrap();
    assert_eq!(b.max_concurrent(), 6);
    let p = b.try_acquire(5).unwrap();
    // Shrinking never revokes: available goes negative until the release.
    b.set_lease(2).unwrap();
    assert_eq!(b.stats().available, -3);
    drop(p);
    assert_eq!(b.stats().available, 2);
    assert!(b.set_lease(crate::MAX_PERMITS + 1).is_err());
}

#[test]
fn the_kill_switch_is_unchanged_outside_leased_mode() {
    let b = bh();
    b.apply_limits(&LimitsSnapshot::new(1).limit(0)).unwrap();
    assert_eq!(refusal(b.try_acquire(1)).bound, Bound::KillSwitch);
    assert!(matches!(
        b.admit(&Request::new(1), None),
        Decision::Rejected(_)
    ));
}
