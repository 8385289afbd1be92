//! Admission classes (docs/design.md §4.8): floors, ceilings, the shared rest and the priority
//! reserve as a partition; per-class FIFO queues; floors first, then strict priority.

use std::{string::ToString, vec::Vec};

use crate::{
    AcquireError, Bulkhead, ClockSource, Config, ConfigError, Decision, LimitsSnapshot, Reason,
    Request,
    config::classes::{ClassError, ClassSpec, ClassTable, PriorityReserve},
    tests::budget::{granted, poll_granted, queued, refused},
};

/// Interactive (class 0: priority 10, floor `f0`) and batch (class 1: priority 0, floor `f1`).
fn two(limit: u64, f0: u64, f1: u64, reserve: u64) -> Bulkhead {
    classed(
        limit,
        &[
            ClassSpec {
                priority: 10,
                floor: f0,
                ..ClassSpec::DEFAULT
            },
            ClassSpec {
                priority: 0,
                floor: f1,
                ..ClassSpec::DEFAULT
            },
        ],
        PriorityReserve {
            permits: reserve,
            budget: 0,
            min_priority: 5,
        },
    )
}

fn classed(limit: u64, classes: &[ClassSpec], reserve: PriorityReserve) -> Bulkhead {
    Bulkhead::with_classes(
        Config {
            max_concurrent: limit,
            max_queue: 8,
            ..Config::DEFAULT
        },
        &ClassTable {
            lending: false,
            shed: false,
            rates: Default::default(),
            classes,
            reserve,
        },
        ClockSource::None,
    )
    .unwrap()
}

fn now(class: u16, w: u64) -> Request {
    Request::new(w).class(class).no_wait()
}

fn wait(class: u16, w: u64) -> Request {
    Request::new(w).class(class)
}

/// The partition's invariants at a quiescent point: the class counts add up to the global
/// ones, each class is within its ceiling, the shared units held are what the classes hold
/// beyond their floors and fit the shared rest.
fn partition_holds(bh: &Bulkhead) {
    let s = bh.stats();
    let n = bh.class_count() as u16;
    let classes: Vec<_> = (0..n).map(|c| bh.class_stats(c).unwrap()).collect();
    let held: u64 = classes.iter().map(|c| c.in_flight).sum();
    assert_eq!(held, s.active + s.granted_unclaimed, "{s:?} {classes:?}");
    let over: u64 = classes
        .iter()
        .map(|c| c.in_flight.saturating_sub(c.floor))
        .sum();
    assert_eq!(bh.class_shared_in_use().unwrap()[0], over);
    let floors: u64 = classes.iter().map(|c| c.floor).sum();
    // With lending the shared units may also be borrowed idle floors: the limit bounds all.
    let lent: u64 = classes
        .iter()
        .map(|c| c.floor.saturating_sub(c.in_flight))
        .sum();
    assert!(over <= s.limit.saturating_sub(floors) + lent, "{classes:?}");
    for c in &classes {
        assert!(c.in_flight <= c.ceiling, "{c:?}");
    }
    assert_eq!(
        s.available + s.active as i64 + s.granted_unclaimed as i64,
        s.limit as i64,
        "I2 {s:?}"
    );
}

#[test]
fn a_class_never_takes_another_class_untouched_floor() {
    // limit 4 = floor 2 (interactive) + shared 2.
    let bh = two(4, 2, 0, 0);
    let b1 = granted(bh.admit(&now(1, 1), None));
    let b2 = granted(bh.admit(&now(1, 1), None));
    let e = refused(bh.admit(&now(1, 1), None));
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    partition_holds(&bh);
    // The interactive floor is still whole.
    let i = granted(bh.admit(&now(0, 2), None));
    assert_eq!(bh.class_stats(0).unwrap().in_flight, 2);
    assert_eq!(bh.class_shared_in_use(), Some([2, 0]));
    partition_holds(&bh);
    drop((b1, b2, i));
    partition_holds(&bh);
    assert_eq!(bh.stats().active, 0);
}

#[test]
fn a_class_holds_its_floor_first_and_borrows_the_shared_rest_up_to_its_ceiling() {
    let bh = classed(
        6,
        &[
            ClassSpec {
                priority: 1,
                floor: 2,
                ceiling: Some(3),
                ..ClassSpec::DEFAULT
            },
            ClassSpec::DEFAULT,
        ],
        PriorityReserve::default(),
    );
    let a = granted(bh.admit(&now(0, 3), None));
    assert_eq!(
        bh.class_shared_in_use(),
        Some([1, 0]),
        "2 of its floor, 1 shared"
    );
    let e = refused(bh.admit(&now(0, 1), None));
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit), "its ceiling");
    // A waiter above its class's ceiling is refused at once, never queued.
    let e = refused(bh.admit(&wait(0, 4), None));
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    let b = granted(bh.admit(&now(1, 3), None));
    partition_holds(&bh);
    drop(a);
    assert_eq!(bh.class_shared_in_use(), Some([3, 0]));
    drop(b);
    assert_eq!(bh.class_shared_in_use(), Some([0, 0]));
}

#[test]
fn the_reserve_is_only_for_high_priority_and_comes_after_the_shared_units() {
    // limit 4 = reserve 1 + shared 3; interactive (priority 10 >= 5) may take the reserve.
    let bh = two(4, 0, 0, 1);
    let batch: Vec<_> = (0..3)
        .map(|_| granted(bh.admit(&now(1, 1), None)))
        .collect();
    let e = refused(bh.admit(&now(1, 1), None));
    assert_eq!(
        e.reason(),
        Some(Reason::ConcurrencyLimit),
        "batch cannot take the reserve"
    );
    let i = granted(bh.admit(&now(0, 1), None));
    partition_holds(&bh);
    drop((batch, i));
    // Interactive takes shared first: with 3 interactive held, batch is out of shared units.
    let held: Vec<_> = (0..3)
        .map(|_| granted(bh.admit(&now(0, 1), None)))
        .collect();
    assert_eq!(
        refused(bh.admit(&now(1, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    drop(held);
}

#[test]
fn waiters_are_served_floors_first_then_by_priority_fifo_within_a_class() {
    // limit 3 = floor 1 (interactive) + floor 1 (batch) + shared 1.
    let bh = two(3, 1, 1, 0);
    let i0 = granted(bh.admit(&now(0, 1), None)); // interactive floor
    let s = granted(bh.admit(&now(1, 2), None)); // batch floor + the shared unit
    // Queue: batch first, then two interactive.
    let mut b = queued(bh.admit(&wait(1, 1), None));
    let mut i1 = queued(bh.admit(&wait(0, 1), None));
    let mut i2 = queued(bh.admit(&wait(0, 1), None));
    assert_eq!(bh.class_stats(0).unwrap().queued, 2);
    assert_eq!(bh.class_stats(1).unwrap().queued, 1);
    // A no-wait request behind a queued head of its class is refused (no barging).
    assert_eq!(
        refused(bh.admit(&now(0, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    drop(i0); // frees an interactive floor unit: the interactive head takes it
    let g1 = poll_granted(&mut i1).expect("the interactive head");
    assert!(poll_granted(&mut i2).is_none());
    assert!(poll_granted(&mut b).is_none());
    drop(s); // batch's floor unit and the shared unit come back
    // The floor unit goes to batch's head (floors first), the shared unit by priority.
    let gb = poll_granted(&mut b).expect("batch's own floor");
    let g2 = poll_granted(&mut i2).expect("the shared unit goes to interactive");
    partition_holds(&bh);
    drop((g1, g2, gb));
    partition_holds(&bh);
    assert_eq!(bh.stats().active, 0);
}

#[test]
fn a_higher_priority_head_short_of_shared_units_holds_lower_ranks_back() {
    // limit 4, no floors: everything is shared.
    let bh = two(4, 0, 0, 0);
    let a = granted(bh.admit(&now(1, 3), None));
    let mut big = queued(bh.admit(&wait(0, 2), None)); // needs 2, 1 free
    let mut small = queued(bh.admit(&wait(1, 1), None));
    assert!(
        poll_granted(&mut small).is_none(),
        "strict priority: no barging across ranks"
    );
    assert!(poll_granted(&mut big).is_none());
    drop(a);
    let g = poll_granted(&mut big).expect("the high-priority head first");
    let s = poll_granted(&mut small).expect("then the lower rank");
    partition_holds(&bh);
    drop((g, s));
}

#[test]
fn classes_of_one_priority_are_served_fifo_across_classes() {
    // Three classes of priority 0, limit 3, no floors: the oldest head of the three queues is
    // granted first, whatever its class index; a heavy old head holds younger light ones of
    // its priority back (no barging within a priority), and a head at its own ceiling does not.
    let bh = classed(
        3,
        &[
            ClassSpec::DEFAULT,
            ClassSpec::DEFAULT,
            ClassSpec {
                ceiling: Some(1),
                ..ClassSpec::DEFAULT
            },
        ],
        PriorityReserve::default(),
    );
    let a = granted(bh.admit(&now(2, 1), None));
    let b = granted(bh.admit(&now(1, 1), None));
    let c = granted(bh.admit(&now(0, 1), None));
    let mut capped = queued(bh.admit(&wait(2, 1), None)); // its class is at its ceiling
    let mut old = queued(bh.admit(&wait(1, 2), None)); // heavy: the oldest that may go
    let mut young = queued(bh.admit(&wait(0, 1), None));
    assert_eq!(
        refused(bh.admit(&now(0, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    drop(b);
    assert!(
        poll_granted(&mut young).is_none(),
        "a younger head of the same priority waits behind the oldest (FIFO across classes)"
    );
    assert!(
        poll_granted(&mut old).is_none(),
        "one unit free, it needs 2"
    );
    drop(c);
    let o = poll_granted(&mut old).expect("the oldest first, though class 0 has a lower index");
    assert!(poll_granted(&mut young).is_none());
    drop(o);
    let y = poll_granted(&mut young).expect("then the younger");
    assert!(
        poll_granted(&mut capped).is_none(),
        "its own ceiling holds it back, nobody else"
    );
    drop(a);
    let k = poll_granted(&mut capped).expect("its class has room now");
    partition_holds(&bh);
    drop((k, y));
}

#[test]
fn a_head_held_back_by_its_own_ceiling_does_not_hold_other_classes_back() {
    let bh = classed(
        4,
        &[
            ClassSpec {
                priority: 10,
                ceiling: Some(1),
                ..ClassSpec::DEFAULT
            },
            ClassSpec::DEFAULT,
        ],
        PriorityReserve::default(),
    );
    let hi = granted(bh.admit(&now(0, 1), None));
    let mut hi2 = queued(bh.admit(&wait(0, 1), None));
    let lo = granted(bh.admit(&Request::new(1).class(1), None));
    assert!(poll_granted(&mut hi2).is_none());
    drop(hi);
    let g = poll_granted(&mut hi2).expect("its turn once its class has room");
    drop((g, lo));
    partition_holds(&bh);
}

#[test]
fn cancelled_waiters_leave_their_class_lists_and_their_cells_are_reused() {
    let bh = two(2, 1, 0, 0);
    let hold = granted(bh.admit(&now(1, 1), None));
    let floor = granted(bh.admit(&now(0, 1), None));
    // Many rounds of queue-and-cancel: cells are reused while stale entries are still linked
    // (the 8-cell ring wraps every few rounds; 24 under Miri, where 60 took 24 s).
    for round in 0..if cfg!(miri) { 24u64 } else { 300 } {
        let class = (round % 2) as u16;
        let w = queued(bh.admit(&wait(class, 1), None));
        if round % 3 == 0 {
            let _keep = queued(bh.admit(&wait(1 - class, 1), None));
        }
        drop(w);
        assert_eq!(bh.stats().queued, 0, "round {round}");
    }
    assert_eq!(bh.class_stats(0).unwrap().queued, 0);
    assert_eq!(bh.class_stats(1).unwrap().queued, 0);
    let mut w = queued(bh.admit(&wait(1, 1), None));
    drop(hold);
    let g = poll_granted(&mut w).expect("granted after all the churn");
    partition_holds(&bh);
    drop((g, floor));
    partition_holds(&bh);
}

#[test]
fn every_way_a_call_ends_returns_its_class_units() {
    let bh = classed(
        8,
        &[
            ClassSpec::DEFAULT,
            ClassSpec {
                floor: 2,
                ..ClassSpec::DEFAULT
            },
        ],
        PriorityReserve::default(),
    );
    let mut c = granted(bh.admit(&now(1, 4), None));
    c.release_partial(1).unwrap();
    assert_eq!(bh.class_stats(1).unwrap().in_flight, 3);
    partition_holds(&bh);
    c.end(crate::Outcome::Success);
    assert_eq!(bh.class_stats(1).unwrap().in_flight, 0);
    // A forgotten call's permits stay in its class, returned with `release_units_of`.
    let c = granted(bh.admit(&now(1, 2), None));
    let w = c.forget();
    assert_eq!(
        (
            bh.class_stats(0).unwrap().in_flight,
            bh.class_stats(1).unwrap().in_flight
        ),
        (0, 2)
    );
    bh.release_units_of(w, 1);
    partition_holds(&bh);
    // The raw pair is class 0's.
    bh.try_acquire_units(3).unwrap();
    assert_eq!(bh.class_stats(0).unwrap().in_flight, 3);
    bh.release_units_checked(3).unwrap();
    partition_holds(&bh);
    assert_eq!(bh.stats().active, 0);
}

#[test]
fn the_kill_switch_holds_every_class_and_is_reversible() {
    let bh = two(4, 1, 1, 0);
    bh.apply_limits(&LimitsSnapshot::new(1).limit(0)).unwrap();
    assert_eq!(
        refused(bh.admit(&now(0, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit),
        "not even a floor"
    );
    assert_eq!(
        refused(bh.admit(&wait(1, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    // A limit below the floors is refused whole.
    let e = bh
        .apply_limits(&LimitsSnapshot::new(2).limit(1))
        .unwrap_err();
    assert!(std::format!("{e}").contains("floors"), "{e}");
    assert_eq!(bh.revision(), 1);
    bh.apply_limits(&LimitsSnapshot::new(3).limit(4)).unwrap();
    let a = granted(bh.admit(&now(0, 1), None));
    drop(a);
    assert!(bh.set_limit(1).is_err());
    bh.set_limit(3).unwrap();
    partition_holds(&bh);
}

#[test]
fn growth_grants_waiters_in_the_dispatch_order() {
    let bh = two(2, 0, 0, 0);
    let a = granted(bh.admit(&now(1, 2), None));
    let mut lo = queued(bh.admit(&wait(1, 1), None));
    let mut hi = queued(bh.admit(&wait(0, 1), None));
    bh.apply_limits(&LimitsSnapshot::new(1).limit(3)).unwrap();
    let g = poll_granted(&mut hi).expect("the higher rank takes the new unit");
    assert!(poll_granted(&mut lo).is_none());
    drop(a);
    let l = poll_granted(&mut lo).unwrap();
    drop((g, l));
    partition_holds(&bh);
}

#[test]
fn budgets_have_floors_and_ceilings_per_class() {
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 10,
            max_queue: 4,
            budget: Some(100),
            ..Config::DEFAULT
        },
        &ClassTable {
            lending: false,
            shed: false,
            rates: Default::default(),
            classes: &[
                ClassSpec {
                    priority: 1,
                    budget_floor: 40,
                    ..ClassSpec::DEFAULT
                },
                ClassSpec {
                    budget_ceiling: Some(50),
                    ..ClassSpec::DEFAULT
                },
            ],
            reserve: PriorityReserve::default(),
        },
        ClockSource::None,
    )
    .unwrap();
    let b = granted(bh.admit(&Request::new(1).cost(50).class(1).no_wait(), None));
    assert_eq!(
        refused(bh.admit(&Request::new(1).cost(1).class(1).no_wait(), None)).reason(),
        Some(Reason::BudgetLimit),
        "its budget ceiling"
    );
    // 60 shared units, 50 taken: interactive has its 40 and 10 shared.
    let i = granted(bh.admit(&Request::new(1).cost(50).no_wait(), None));
    assert_eq!(bh.class_shared_in_use(), Some([2, 60]));
    assert_eq!(
        refused(bh.admit(&Request::new(1).cost(1).no_wait(), None)).reason(),
        Some(Reason::BudgetLimit)
    );
    drop((b, i));
    assert_eq!(bh.class_shared_in_use(), Some([0, 0]));
}

#[test]
fn bad_tables_and_classes_are_named() {
    let config = Config {
        max_concurrent: 4,
        ..Config::DEFAULT
    };
    let build = |classes: &[ClassSpec], reserve: PriorityReserve, config: Config| {
        Bulkhead::with_classes(
            config,
            &ClassTable {
                lending: false,
                shed: false,
                rates: Default::default(),
                classes,
                reserve,
            },
            ClockSource::None,
        )
        .map(drop)
    };
    let e = build(&[], PriorityReserve::default(), config).unwrap_err();
    assert_eq!(e, ConfigError::Class(ClassError::Count { count: 0 }));
    assert!(std::format!("{e}").contains("1..=64"), "{e}");
    let floors = [ClassSpec {
        floor: 3,
        ..ClassSpec::DEFAULT
    }];
    let e = build(
        &floors,
        PriorityReserve {
            permits: 2,
            ..PriorityReserve::default()
        },
        config,
    )
    .unwrap_err();
    assert!(
        std::format!("{e}").contains("(5) must be at most the limit (4)"),
        "{e}"
    );
    let e = build(
        &[ClassSpec {
            floor: 2,
            ceiling: Some(1),
            ..ClassSpec::DEFAULT
        }],
        PriorityReserve::default(),
        config,
    )
    .unwrap_err();
    assert!(std::format!("{e}").contains("classes[0]"), "{e}");
    let e = build(
        &[ClassSpec::DEFAULT],
        PriorityReserve::default(),
        Config {
            observe: crate::Observe::Concurrency,
            ..config
        },
    )
    .unwrap_err();
    assert!(std::format!("{e}").contains("`observe`"), "{e}");
    let e = build(
        &[ClassSpec {
            budget_floor: 1,
            ..ClassSpec::DEFAULT
        }],
        PriorityReserve::default(),
        config,
    )
    .unwrap_err();
    assert!(
        std::format!("{e}").contains("needs a bulkhead with a budget"),
        "{e}"
    );
    // Requests name a class of the table.
    let bh = two(4, 0, 0, 0);
    let e = refused(bh.admit(&now(2, 1), None));
    assert_eq!(
        e,
        AcquireError::InvalidClass {
            class: 2,
            classes: 2
        }
    );
    assert_eq!(e.invalid_argument(), Some("class"));
    assert!(std::format!("{e}").contains("0..=1"), "{e}");
    let plain = Bulkhead::new(config).unwrap();
    let e = refused(plain.admit(&now(1, 1), None));
    assert!(std::format!("{e}").contains("without classes"), "{e}");
    assert_eq!(
        bh.set_observe(crate::Observe::Concurrency),
        Err(ConfigError::Class(ClassError::Unsupported {
            option: "observe"
        }))
    );
    // A request's own observe is refused by name, never silently enforced (classes take no
    // observe mode): in the admission and in its dry run alike.
    let e = refused(bh.admit(&now(1, 1).observe(crate::Observe::Concurrency), None));
    assert_eq!(
        e,
        AcquireError::InvalidObserve {
            observe: crate::Observe::Concurrency
        }
    );
    assert_eq!(e.invalid_argument(), Some("observe"));
    assert!(std::format!("{e}").contains("bulkhead with classes"), "{e}");
    assert_eq!(
        bh.would_admit(&now(0, 1).observe(crate::Observe::All)),
        crate::WouldAdmit::Reject(AcquireError::InvalidObserve {
            observe: crate::Observe::All
        })
    );
    assert_eq!(bh.stats().admitted_total, 0);
    assert_eq!(
        bh.stats().rejected_by_reason.total(),
        0,
        "argument errors are not counted"
    );
}

#[test]
fn a_refused_no_wait_request_is_counted_once_and_a_dry_run_agrees() {
    let bh = two(2, 1, 0, 0);
    let a = granted(bh.admit(&now(1, 1), None));
    assert_eq!(
        bh.would_admit(&now(1, 1)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    assert!(matches!(
        bh.would_admit(&now(0, 1)),
        crate::WouldAdmit::AdmitNow
    ));
    assert_eq!(
        refused(bh.admit(&now(1, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let s = bh.stats();
    assert_eq!(s.rejected_by_reason.get(Reason::ConcurrencyLimit), 1);
    assert_eq!(s.admitted_total, 1);
    assert_eq!(s.queued, 0);
    assert_eq!(
        bh.try_acquire(1).map(drop),
        Ok(()),
        "try_acquire is class 0 (its floor is free)"
    );
    drop(a);
    partition_holds(&bh);
}

#[test]
fn close_refuses_every_class_waiter() {
    let bh = two(1, 0, 0, 0);
    let a = granted(bh.admit(&now(0, 1), None));
    let mut w = queued(bh.admit(&wait(1, 1), None));
    bh.close();
    match w.poll(None) {
        core::task::Poll::Ready(Err(e)) => assert_eq!(e.reason(), Some(Reason::Shutdown)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        bh.admit(&now(0, 1), None),
        Decision::Rejected(e) if e.reason() == Some(Reason::Shutdown)
    ));
    drop(a);
}

#[test]
fn lending_lends_idle_floors_and_the_owner_reclaims_first() {
    // limit 4 = interactive's floor 2 + batch's floor 0 + shared 2; lending on.
    let classes = [
        ClassSpec {
            priority: 10,
            floor: 2,
            ..ClassSpec::DEFAULT
        },
        ClassSpec::DEFAULT,
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 4,
            max_queue: 8,
            ..Config::DEFAULT
        },
        &ClassTable {
            classes: &classes,
            reserve: PriorityReserve::default(),
            lending: true,
            shed: false,
            rates: Default::default(),
        },
        ClockSource::None,
    )
    .unwrap();
    // Batch borrows the shared 2 and then interactive's idle floor: work-conserving.
    let mut batch: Vec<_> = (0..4)
        .map(|_| granted(bh.admit(&now(1, 1), None)))
        .collect();
    assert_eq!(bh.class_shared_in_use(), Some([4, 0]));
    // Interactive's floor is lent out: a no-wait request is refused, a queued one waits …
    assert_eq!(
        refused(bh.admit(&now(0, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let mut owner = queued(bh.admit(&wait(0, 1), None));
    let mut borrower = queued(bh.admit(&wait(1, 1), None));
    // … and the first unit a borrower returns goes to it, not to the next borrower.
    drop(batch.pop());
    let i = poll_granted(&mut owner).expect("the owner reclaims first");
    assert!(poll_granted(&mut borrower).is_none());
    partition_holds(&bh);
    drop((batch, i));
    let b = poll_granted(&mut borrower).expect("then the borrower");
    drop(b);
    partition_holds(&bh);
}

#[test]
fn a_full_queue_sheds_the_youngest_lowest_priority_waiter_for_a_higher_arrival() {
    let classes = [
        ClassSpec {
            priority: 10,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            priority: 5,
            ..ClassSpec::DEFAULT
        },
        ClassSpec::DEFAULT,
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 1,
            max_queue: 3,
            ..Config::DEFAULT
        },
        &ClassTable {
            shed: true,
            ..ClassTable::new(&classes)
        },
        ClockSource::None,
    )
    .unwrap();
    let held = granted(bh.admit(&now(0, 1), None));
    let mut mid = queued(bh.admit(&wait(1, 1), None));
    let mut old = queued(bh.admit(&wait(2, 1), None));
    let mut young = queued(bh.admit(&wait(2, 1), None));
    // A low arrival at the full queue has nobody below it: refused as ever.
    assert_eq!(
        refused(bh.admit(&wait(2, 1), None)).reason(),
        Some(Reason::QueueLimit)
    );
    // A high one evicts the youngest of the lowest priority.
    let mut hi = queued(bh.admit(&wait(0, 1), None));
    match young.poll(None) {
        core::task::Poll::Ready(Err(e)) => {
            assert_eq!(e.reason(), Some(Reason::Shed));
            assert_eq!(e.reason().unwrap().info().code, "BULKHEAD_SHED");
            assert!(e.reason().unwrap().info().retryable);
        }
        other => panic!("{other:?}"),
    }
    let s = bh.stats();
    assert_eq!(
        (s.queued, s.rejected_by_reason.get(Reason::Shed)),
        (3, 1),
        "{s}"
    );
    assert_eq!(
        (0..3)
            .map(|c| bh.class_stats(c).unwrap().queued)
            .collect::<Vec<_>>(),
        [1, 1, 1]
    );
    // Then by priority: hi, mid, old.
    drop(held);
    let h = poll_granted(&mut hi).expect("the arrival that shed");
    assert!(poll_granted(&mut mid).is_none() && poll_granted(&mut old).is_none());
    drop(h);
    let m = poll_granted(&mut mid).unwrap();
    drop(m);
    let o = poll_granted(&mut old).unwrap();
    drop(o);
    partition_holds(&bh);
    assert_eq!(bh.stats().queued, 0);
    // Without shedding the same arrival is refused.
    let plain = Bulkhead::with_classes(
        Config {
            max_concurrent: 1,
            max_queue: 1,
            ..Config::DEFAULT
        },
        &ClassTable::new(&classes),
        ClockSource::None,
    )
    .unwrap();
    let held = granted(plain.admit(&now(0, 1), None));
    let _low = queued(plain.admit(&wait(2, 1), None));
    assert_eq!(
        refused(plain.admit(&wait(0, 1), None)).reason(),
        Some(Reason::QueueLimit)
    );
    drop(held);
}

#[test]
fn a_refusal_names_its_class_and_the_constraint_that_held_it_back() {
    use crate::Bound;
    let detail = |d: Decision<&Bulkhead, 0>| match d {
        Decision::Rejected(AcquireError::Rejected(r)) => r.detail(),
        other => panic!("{other:?}"),
    };
    // limit 6 = interactive's floor 2 + reserve 1 (priority >= 5) + shared 3; batch ceiling 2.
    let classes = [
        ClassSpec {
            priority: 10,
            floor: 2,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            ceiling: Some(2),
            ..ClassSpec::DEFAULT
        },
        ClassSpec::DEFAULT,
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 6,
            max_queue: 1,
            ..Config::DEFAULT
        },
        &ClassTable {
            reserve: PriorityReserve {
                permits: 1,
                budget: 0,
                min_priority: 5,
            },
            ..ClassTable::new(&classes)
        },
        ClockSource::None,
    )
    .unwrap();
    let b = granted(bh.admit(&now(1, 2), None));
    let d = detail(bh.admit(&now(1, 1), None));
    assert_eq!(
        (d.reason, d.bound),
        (Reason::ConcurrencyLimit, Bound::Class)
    );
    let c = d.class.unwrap();
    assert_eq!((c.class, c.dimension), (1, 0));
    let other = granted(bh.admit(&now(2, 1), None)); // the last shared unit
    let d = detail(bh.admit(&now(2, 1), None));
    assert_eq!(d.bound, Bound::Reserve, "{d:?}");
    assert_eq!(bh.class_shared_in_use(), Some([3, 0]));
    let i = granted(bh.admit(&now(0, 3), None)); // floor 2 + the reserve
    let d = detail(bh.admit(&now(0, 1), None));
    assert_eq!(d.bound, Bound::Shared, "{d:?}");
    let _w = queued(bh.admit(&wait(2, 1), None));
    let d = detail(bh.admit(&wait(2, 1), None));
    assert_eq!((d.reason, d.bound), (Reason::QueueLimit, Bound::Queue));
    assert_eq!(d.class.unwrap().class, 2);
    // The kill switch stays the kill switch.
    drop((b, other, i));
    bh.apply_limits(&LimitsSnapshot::new(1).limit(0)).unwrap();
    let d = detail(bh.admit(&now(0, 1), None));
    assert_eq!(d.bound, Bound::KillSwitch);
    assert_eq!(Bound::Reserve.as_str(), "reserve");
}

#[test]
fn a_class_ceiling_changes_at_run_time_raise_grants_lower_holds_back() {
    let bh = classed(
        8,
        &[
            ClassSpec {
                floor: 1,
                ceiling: Some(1),
                ..ClassSpec::DEFAULT
            },
            ClassSpec::DEFAULT,
        ],
        PriorityReserve::default(),
    );
    let a = granted(bh.admit(&now(0, 1), None));
    let mut w1 = queued(bh.admit(&wait(0, 1), None));
    let mut w2 = queued(bh.admit(&wait(0, 1), None));
    // Raised: both waiters go before the call returns.
    bh.set_class_ceiling(0, Some(3), None).unwrap();
    assert_eq!(bh.class_stats(0).unwrap().ceiling, 3);
    let g1 = poll_granted(&mut w1).expect("granted by the raise");
    let g2 = poll_granted(&mut w2).expect("granted by the raise");
    // Lowered below what it holds: nobody is pre-empted, new grants wait for attrition.
    bh.set_class_ceiling(0, Some(1), None).unwrap();
    let mut w3 = queued(bh.admit(&wait(0, 1), None));
    drop(g1);
    drop(g2);
    assert!(poll_granted(&mut w3).is_none(), "still at its ceiling of 1");
    drop(a);
    let g3 = poll_granted(&mut w3).expect("attrition made room");
    // Above the limit is allowed (the limit still bounds): how a registry key sits under a cap.
    bh.set_class_ceiling(1, Some(100), None).unwrap();
    partition_holds(&bh);
    drop(g3);
    // Errors name the class and the range; nothing changes.
    let e = bh.set_class_ceiling(0, Some(0), None).unwrap_err();
    assert!(e.to_string().contains("floor (1)"), "{e}");
    assert_eq!(bh.class_stats(0).unwrap().ceiling, 1);
    let e = bh.set_class_ceiling(2, Some(1), None).unwrap_err();
    assert_eq!(
        e,
        ConfigError::Class(ClassError::Unknown { class: 2, count: 2 })
    );
    assert!(e.to_string().contains("0..=1"), "{e}");
    let e = bh.set_class_ceiling(0, None, Some(1)).unwrap_err();
    assert_eq!(
        e,
        ConfigError::Class(ClassError::NoBudget { class: Some(0) })
    );
    let plain = Bulkhead::new(Config::DEFAULT).unwrap();
    let e = plain.set_class_ceiling(0, Some(1), None).unwrap_err();
    assert!(e.to_string().contains("no classes"), "{e}");
}

#[test]
fn apply_limits_installs_class_ceilings_with_the_revision_all_or_nothing() {
    use crate::{ClassLimits, LimitsError};
    let bh = classed(
        4,
        &[
            ClassSpec {
                priority: 10,
                ceiling: Some(1),
                ..ClassSpec::DEFAULT
            },
            ClassSpec {
                ceiling: Some(3),
                ..ClassSpec::DEFAULT
            },
        ],
        PriorityReserve::default(),
    );
    let hi = granted(bh.admit(&now(0, 1), None));
    let mut hi2 = queued(bh.admit(&wait(0, 1), None));
    let lo = granted(bh.admit(&now(1, 2), None));
    // One revision: the limit grows to 6, class 0's ceiling to 3, class 1's shrinks to 1.
    let snap = LimitsSnapshot::new(1).limit(6);
    let classes = [
        ClassLimits {
            class: 0,
            ceiling: Some(3),
            budget_ceiling: None,
        },
        ClassLimits {
            class: 1,
            ceiling: Some(1),
            budget_ceiling: None,
        },
    ];
    bh.apply_limits_with_classes(&snap, &classes).unwrap();
    let g = poll_granted(&mut hi2).expect("the raised ceiling granted it before the call returned");
    assert_eq!(
        (
            bh.revision(),
            bh.stats().limit,
            bh.class_stats(0).unwrap().ceiling
        ),
        (1, 6, 3)
    );
    // Class 1 holds 2 above its new ceiling of 1: attrition, nobody pre-empted.
    assert_eq!(bh.class_stats(1).unwrap().in_flight, 2);
    assert!(refused(bh.admit(&now(1, 1), None)).reason().is_some());
    // All or nothing: an unknown class refuses the whole revision.
    let bad = [ClassLimits {
        class: 9,
        ceiling: Some(1),
        budget_ceiling: None,
    }];
    let e = bh
        .apply_limits_with_classes(&LimitsSnapshot::new(2).limit(2), &bad)
        .unwrap_err();
    assert!(
        matches!(
            e,
            LimitsError::Class(ClassError::Unknown { class: 9, count: 2 })
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("nothing was applied"), "{e}");
    assert_eq!((bh.revision(), bh.stats().limit), (1, 6));
    // A stale revision installs no ceiling either.
    let stale = [ClassLimits {
        class: 0,
        ceiling: Some(2),
        budget_ceiling: None,
    }];
    assert!(matches!(
        bh.apply_limits_with_classes(&LimitsSnapshot::new(1), &stale),
        Err(LimitsError::Stale { current: 1 })
    ));
    assert_eq!(bh.class_stats(0).unwrap().ceiling, 3);
    drop((hi, g, lo));
    partition_holds(&bh);
}

#[test]
fn a_dry_run_sees_the_heads_the_dispatch_order_serves_first() {
    // Interactive (priority 10) and batch (priority 0), no floors: a batch holder leaves one
    // unit free while an interactive head of weight 2 waits for two.
    let bh = two(2, 0, 0, 0);
    let a = granted(bh.admit(&now(1, 1), None));
    let b = granted(bh.admit(&now(1, 1), None));
    let mut head = queued(bh.admit(&wait(0, 2), None));
    drop(a);
    // One unit is free and batch's own verdict fits, but the older, higher-priority head
    // keeps the shared units: the admission would be refused, and the dry run says so.
    assert_eq!(
        bh.would_admit(&now(1, 1)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    assert_eq!(
        bh.would_admit(&wait(1, 1)),
        crate::WouldAdmit::WouldQueue {
            position: 2,
            ahead: 1
        },
        "the interactive waiter is served first"
    );
    // An interactive request queues behind its own class's head too.
    assert_eq!(
        bh.would_admit(&wait(0, 1)),
        crate::WouldAdmit::WouldQueue {
            position: 2,
            ahead: 1
        }
    );
    let e = refused(bh.admit(&now(1, 1), None));
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    // The dry run's refusal names the class and its bound, as the admission's does.
    let Some(crate::WouldAdmit::Reject(x)) = Some(bh.would_admit(&now(1, 1))) else {
        panic!()
    };
    assert_eq!(
        x.rejection().and_then(|r| r.class),
        e.rejection().and_then(|r| r.class)
    );
    drop(b);
    let call = poll_granted(&mut head);
    assert_eq!(
        bh.would_admit(&now(1, 1)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    drop(call);
    assert!(matches!(
        bh.would_admit(&now(1, 1)),
        crate::WouldAdmit::AdmitNow
    ));
    partition_holds(&bh);
}

#[test]
fn a_lent_floor_taken_back_never_eats_the_priority_reserve() {
    // Limit 4 = B's floor 1 + a reserve of 1 (priority ≥ 5) + 2 shared; lending on; A and B
    // both priority 0. A borrows B's idle floor unit past the shared two. B's floor is then
    // lent out: taking it back now would hold 4 units among the classes the reserve is not for,
    // eating the reserve — B waits for the reclaim instead (the reference model found B
    // granted when its floor take checked only the limit).
    let classes = [
        ClassSpec::DEFAULT,
        ClassSpec {
            floor: 1,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            priority: 10,
            ..ClassSpec::DEFAULT
        },
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 4,
            max_queue: 8,
            ..Config::DEFAULT
        },
        &ClassTable {
            lending: true,
            reserve: PriorityReserve {
                permits: 1,
                budget: 0,
                min_priority: 5,
            },
            ..ClassTable::new(&classes)
        },
        ClockSource::None,
    )
    .unwrap();
    let a = granted(bh.admit(&now(0, 3), None));
    assert_eq!(
        refused(bh.admit(&now(1, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit),
        "B's floor is lent out and the rest is the reserve"
    );
    let mut b = queued(bh.admit(&wait(1, 1), None));
    // The reserve is still there for the high class.
    let hi = granted(bh.admit(&now(2, 1), None));
    drop(hi);
    // A returns a unit: B's floor comes back to it first.
    let mut a = a;
    a.release_partial(1).unwrap();
    let b = poll_granted(&mut b).expect("reclaimed");
    assert_eq!(bh.class_stats(1).unwrap().in_flight, 1);
    drop((a, b));
    partition_holds(&bh);
}

#[test]
fn a_class_observing_its_ceiling_counts_past_it_and_stays_inside_the_enforced_limit() {
    // Class 0 observes its ceiling of 1; the limit of 3 is enforced (C32: an observed bound
    // never switches the enforced ones off).
    let classes = [
        ClassSpec {
            ceiling: Some(1),
            observe: crate::Observe::Concurrency,
            ..ClassSpec::DEFAULT
        },
        ClassSpec::DEFAULT,
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 3,
            max_queue: 4,
            ..Config::DEFAULT
        },
        &ClassTable::new(&classes),
        ClockSource::None,
    )
    .unwrap();
    let a = granted(bh.admit(&now(0, 1), None));
    // Past its observed ceiling: let through, counted for the class and the bulkhead.
    assert!(matches!(
        bh.would_admit(&now(0, 1)),
        crate::WouldAdmit::AdmitNow
    ));
    let b = granted(bh.admit(&now(0, 1), None));
    let c = granted(bh.admit(&now(0, 1), None));
    // The limit is enforced: refused, and counted as one its own ceiling would have refused.
    assert_eq!(
        refused(bh.admit(&now(0, 1), None)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let cs = bh.class_stats(0).unwrap();
    assert_eq!(
        (cs.in_flight, cs.ceiling, cs.observe, cs.observed),
        (3, 1, crate::Observe::Concurrency, 3)
    );
    let s = bh.stats();
    assert_eq!(
        (
            s.observed_by_reason.get(Reason::ConcurrencyLimit),
            s.rejected_by_reason.get(Reason::ConcurrencyLimit)
        ),
        (2, 1)
    );
    // A waiter past the observed ceiling is granted when the limit has room, counted then.
    let mut w = queued(bh.admit(&wait(0, 1), None));
    drop(a);
    drop(poll_granted(&mut w).expect("granted past the observed ceiling"));
    assert_eq!(bh.class_stats(0).unwrap().observed, 4);
    drop((b, c));
    partition_holds(&bh);
}

/// `set_observe(Off)` on a classed bulkhead (the one mode it takes) leaves it classed: it used
/// to rewrite the mode word without the classed bit, and every later admission took the plain
/// path and was refused `concurrency_limit` (found by a review of the Python binding).
#[test]
fn set_observe_off_keeps_a_classed_bulkhead_classed() {
    let bh = two(4, 1, 1, 0);
    assert_eq!(bh.set_observe(crate::Observe::Off), Ok(()));
    let a = granted(bh.admit(&now(0, 1), None));
    let b = granted(bh.admit(&now(1, 2), None));
    assert_eq!(bh.class_stats(1).unwrap().in_flight, 2);
    drop((a, b));
    assert_eq!(bh.stats().active, 0);
}
