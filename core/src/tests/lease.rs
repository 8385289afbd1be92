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

mod gate {
    use core::{
        sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst},
        task::Waker,
    };
    use std::{sync::Arc, task::Wake};

    use super::*;
    use crate::{ClockSource, clock::Clock};

    #[derive(Debug, Default)]
    struct Manual(AtomicU64);
    impl Clock for Manual {
        fn now_ns(&self) -> u64 {
            self.0.load(SeqCst)
        }
    }

    #[derive(Default)]
    struct Bell(AtomicUsize);
    impl Wake for Bell {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    fn leased(clock: &Arc<Manual>) -> Bulkhead {
        let b = Bulkhead::with_clock(
            Config {
                max_concurrent: 4,
                max_queue: 4,
                ..Config::DEFAULT
            },
            ClockSource::Shared(clock.clone()),
        )
        .unwrap();
        b.set_lease(2).unwrap();
        b
    }

    #[test]
    fn past_the_deadline_nothing_is_admitted_and_the_bound_is_fleet_lease() {
        let clock = Arc::new(Manual::default());
        let b = leased(&clock);
        assert_eq!(b.lease_until(), u64::MAX);
        b.set_lease_until(1_000);
        clock.0.store(999, SeqCst);
        let held = b.try_acquire(1).unwrap();
        clock.0.store(1_000, SeqCst);
        let d = refusal(b.try_acquire(1));
        assert_eq!(
            (d.bound, d.calls.limit),
            (Bound::FleetLease, 2),
            "a block of 2, expired"
        );
        // A request that may wait queues (it is not refused), and a later deadline lets it in.
        let Decision::Queued(mut w) = b.admit(&Request::new(1), None) else {
            panic!()
        };
        b.set_lease_until(5_000);
        drop(held); // the release hands the permit to the waiter
        let Poll::Ready(Ok(call)) = w.poll(None) else {
            panic!()
        };
        drop(call);
        assert!(b.try_acquire(1).is_ok());
    }

    #[test]
    fn a_short_admission_rings_the_bell_once_per_registration() {
        let clock = Arc::new(Manual::default());
        let b = leased(&clock);
        let bell = Arc::new(Bell::default());
        let waker = Waker::from(bell.clone());
        b.register_lease_demand(&waker);
        let (x, y) = (b.try_acquire(1).unwrap(), b.try_acquire(1).unwrap());
        assert_eq!((bell.0.load(SeqCst), b.lease_shorts()), (0, 0));
        assert!(b.try_acquire(1).is_err());
        assert!(matches!(
            b.admit(&Request::new(1), None),
            Decision::Queued(_)
        ));
        assert_eq!(b.lease_shorts(), 2);
        assert_eq!(bell.0.load(SeqCst), 1, "woken once until registered again");
        b.register_lease_demand(&waker);
        assert!(b.try_acquire(1).is_err());
        assert_eq!(bell.0.load(SeqCst), 2);
        // A dry run is not demand.
        b.register_lease_demand(&waker);
        let _ = b.would_admit(&Request::new(1));
        assert_eq!(bell.0.load(SeqCst), 2);
        drop((x, y));
    }
}

mod handoff {
    use core::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;

    use super::*;
    use crate::{ClockSource, clock::Clock};

    #[derive(Debug, Default)]
    struct Manual(AtomicU64);
    impl Clock for Manual {
        fn now_ns(&self) -> u64 {
            self.0.load(SeqCst)
        }
    }

    #[test]
    fn past_the_deadline_a_release_hands_nothing_to_a_waiter_until_a_renewal() {
        let clock = Arc::new(Manual::default());
        let b = Bulkhead::with_clock(
            Config {
                max_concurrent: 4,
                max_queue: 4,
                ..Config::DEFAULT
            },
            ClockSource::Shared(clock.clone()),
        )
        .unwrap();
        b.set_lease(1).unwrap();
        b.set_lease_until(1_000);
        let held = b.try_acquire(1).unwrap();
        let Decision::Queued(mut w) = b.admit(&Request::new(1), None) else {
            panic!()
        };
        clock.0.store(1_000, SeqCst);
        drop(held); // the lease ran out: no handoff (Redis may have given the permit away)
        assert!(w.poll(None).is_pending());
        assert_eq!(b.stats().active, 0);
        b.set_lease_until(5_000); // renewed: the waiter is granted at once
        let Poll::Ready(Ok(c)) = w.poll(None) else {
            panic!("not granted after the renewal")
        };
        drop(c);
    }

    #[test]
    fn the_ceiling_follows_the_fleet_limit_both_ways() {
        let b = bh();
        assert!(b.set_lease_ceiling(8).is_err(), "only in leased mode");
        b.set_lease(0).unwrap();
        b.set_lease_ceiling(8).unwrap();
        let Decision::Queued(mut heavy) = b.admit(&Request::new(6), None) else {
            panic!()
        };
        b.set_lease_ceiling(5).unwrap(); // the fleet limit was lowered below its weight
        let Poll::Ready(Err(e)) = heavy.poll(None) else {
            panic!()
        };
        assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
        let Decision::Rejected(e) = b.admit(&Request::new(6), None) else {
            panic!()
        };
        assert_eq!(e.reason(), None, "above the ceiling: an invalid weight");
        assert!(b.set_lease_ceiling(0).is_err());
    }
}

#[test]
fn a_leased_block_is_never_observed() {
    // Review finding: a request's own observe mode got past the block other processes count on.
    let b = bh();
    b.set_lease(1).unwrap();
    let _held = b.try_acquire(1).unwrap();
    let r = b.admit(
        &Request::new(1).observe(crate::Observe::All).no_wait(),
        None,
    );
    let Decision::Rejected(e) = r else {
        panic!("an observed request got past the block")
    };
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    assert_eq!(
        b.set_observe(crate::Observe::All),
        Err(crate::ConfigError::Leased),
        "nor the bulkhead's own observe mode"
    );
    assert!(b.try_acquire(1).is_err());
}

fn refusal_of(d: Decision<&Bulkhead, 0>) -> crate::RejectionDetail {
    match d {
        Decision::Rejected(AcquireError::Rejected(r)) => r.detail(),
        _ => panic!("not refused"),
    }
}

fn budgeted() -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent: 8,
        max_queue: 8,
        budget: Some(1000),
        ..Config::DEFAULT
    })
    .unwrap()
}

#[test]
fn a_leased_budget_block_admits_within_it_and_keeps_a_larger_cost_waiting() {
    let b = budgeted();
    b.set_lease(8).unwrap();
    b.set_lease_budget_ceiling(1000).unwrap();
    b.set_lease_budget(0).unwrap();
    // An empty budget block: a cost is refused budget_limit with the bound fleet_lease; cost 0
    // is still admitted (the permit block has room).
    let d = refusal_of(b.admit(&Request::new(1).cost(10).no_wait(), None));
    assert_eq!(
        (d.reason, d.bound),
        (Reason::BudgetLimit, Bound::FleetLease)
    );
    assert!(matches!(
        b.admit(&Request::new(1), None),
        Decision::Granted(_)
    ));
    b.set_lease_budget(300).unwrap();
    let Decision::Granted(first) = b.admit(&Request::new(1).cost(200), None) else {
        panic!()
    };
    // Short: the block has 100 left. A try is refused with the block's own bound...
    let d = refusal_of(b.admit(&Request::new(1).cost(150).no_wait(), None));
    assert_eq!(d.reason, Reason::BudgetLimit);
    assert_ne!(d.bound, Bound::FleetLease, "the block is not empty");
    assert_eq!(b.take_lease_short_cost(), 150, "the short cost is reported");
    assert_eq!(
        (b.lease_shorts(), b.lease_budget_shorts()),
        (0, 2),
        "budget shortages count as the budget's demand, not the permits'"
    );
    assert_eq!(b.take_lease_short_weight(), 0);
    assert_eq!(b.take_lease_short_cost(), 0, "and reset");
    // ...a cost above the whole block waits for the block to grow (a local budget would
    // refuse it outright)...
    let Decision::Queued(mut w) = b.admit(&Request::new(1).cost(600), None) else {
        panic!("a cost within the fleet budget must wait for the block to grow")
    };
    assert!(w.poll(None).is_pending());
    // ...and is granted when it does; a shrink below what is held never revokes.
    b.set_lease_budget(900).unwrap();
    let Poll::Ready(Ok(second)) = w.poll(None) else {
        panic!("the grown block did not grant the waiter")
    };
    b.set_lease_budget(100).unwrap();
    let s = b.stats().budget.unwrap();
    assert_eq!((s.limit, s.in_use, s.available), (100, 800, -700));
    drop((first, second));
    assert_eq!(b.stats().budget.unwrap().available, 100);
}

#[test]
fn only_the_budget_ceiling_refuses_a_cost_and_a_lower_one_rejects_waiters() {
    let b = budgeted();
    b.set_lease(8).unwrap();
    b.set_lease_budget(50).unwrap();
    b.set_lease_budget_ceiling(500).unwrap();
    let Decision::Rejected(e) = b.admit(&Request::new(1).cost(501), None) else {
        panic!("a cost above the fleet budget must be refused at once")
    };
    assert_eq!(e.reason(), Some(Reason::BudgetLimit));
    let Decision::Queued(mut w) = b.admit(&Request::new(1).cost(400), None) else {
        panic!()
    };
    b.set_lease_budget_ceiling(300).unwrap();
    let Poll::Ready(Err(AcquireError::Rejected(r))) = w.poll(None) else {
        panic!("a waiter above the lowered ceiling must be rejected")
    };
    assert_eq!(r.reason, Reason::BudgetLimit);
    // Validation: the ceiling is 1 ..= budget; both need leased mode and a budget.
    assert!(b.set_lease_budget_ceiling(0).is_err());
    assert!(b.set_lease_budget_ceiling(1001).is_err());
    assert!(b.set_lease_budget(1001).is_err());
    assert!(budgeted().set_lease_budget(10).is_err(), "not leased");
    let plain = bh();
    plain.set_lease(1).unwrap();
    assert!(plain.set_lease_budget(1).is_err(), "no budget");
    assert!(plain.set_lease_budget_ceiling(1).is_err(), "no budget");
}

#[test]
fn a_block_below_the_class_floors_is_a_lease_state_not_an_error() {
    use crate::{
        ClockSource,
        config::classes::{ClassSpec, ClassTable},
    };
    let classes = [
        ClassSpec {
            floor: 2,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            floor: 2,
            priority: 1,
            ..ClassSpec::DEFAULT
        },
    ];
    let b = Bulkhead::with_classes(
        Config {
            max_concurrent: 6,
            max_queue: 8,
            ..Config::DEFAULT
        },
        &ClassTable {
            lending: false,
            shed: false,
            rates: Default::default(),
            classes: &classes,
            reserve: crate::config::classes::PriorityReserve::default(),
        },
        ClockSource::None,
    )
    .unwrap();
    b.set_lease(1)
        .expect("a block below the floors is accepted");
    let Decision::Granted(a) = b.admit(&Request::new(1).class(0).no_wait(), None) else {
        panic!("a class takes its floor inside the block")
    };
    // The block (1) bounds the whole: the other class's floor take must wait.
    let Decision::Queued(mut w) = b.admit(&Request::new(1).class(1), None) else {
        panic!("the block is full: the second class must queue")
    };
    assert!(w.poll(None).is_pending());
    assert_eq!(b.stats().active, 1);
    b.set_lease(4).unwrap();
    let Poll::Ready(Ok(c)) = w.poll(None) else {
        panic!("the grown block did not grant the other class's floor")
    };
    // With the block covering the floors they are protected again: class 0 may not take
    // class 1's remaining floor permit (shared is 0).
    let Decision::Granted(a2) = b.admit(&Request::new(1).class(0).no_wait(), None) else {
        panic!("class 0's own floor")
    };
    assert!(
        matches!(
            b.admit(&Request::new(1).class(0).no_wait(), None),
            Decision::Rejected(_)
        ),
        "class 0 took class 1's floor"
    );
    drop((a, a2, c));
    assert_eq!(b.stats().active, 0);
}

#[test]
fn a_leased_bulkheads_limits_belong_to_the_lease() {
    // Review finding (C binding): set_budget moved a fleet bulkhead's leased budget block.
    let b = budgeted();
    b.set_lease(4).unwrap();
    b.set_lease_budget(100).unwrap();
    assert_eq!(b.set_limit(8), Err(crate::ConfigError::Leased));
    assert_eq!(b.set_budget(500), Err(crate::ConfigError::Leased));
    assert_eq!(
        b.apply_limits(&LimitsSnapshot::new(1).limit(8)),
        Err(crate::LimitsError::Config(crate::ConfigError::Leased))
    );
    let s = b.stats();
    assert_eq!(
        (s.limit, s.budget.unwrap().limit, b.revision()),
        (4, 100, 0)
    );
    let text = alloc::format!(
        "{}",
        crate::ConfigError::Leased.spelled(crate::config::Spelling::Python)
    );
    assert!(text.contains("apply_limits"), "{text}");
}
