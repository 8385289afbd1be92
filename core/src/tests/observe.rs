//! Observe (shadow) mode (docs/design.md §4.7): observed dimensions are decided and counted but
//! let through, enforced ones are checked as ever; C32 (`../shared/cases/CASES.md`) as named
//! cases — steps 1, 2, 4 (the Rust entry paths) and 5; step 3 needs a registry's global cap
//! (not built yet).

use crate::{
    Bulkhead, Config, ConfigError, Decision, Observe, Outcome, Reason, Request, WouldAdmit,
    block_on,
    tests::budget::{ask, books_balance, budget, granted, poll_granted, queued},
};

fn observed(bh: &Bulkhead, r: Reason) -> u64 {
    bh.stats().observed_by_reason.get(r)
}

fn config(max_concurrent: u64, max_queue: u64, observe: Observe) -> Config {
    Config {
        max_concurrent,
        max_queue,
        observe,
        ..Config::DEFAULT
    }
}

#[test]
fn c32_step1_whole_limiter_observed_admits_and_counts() {
    // L=2, Q=0, everything observed: five calls acquire one after another and hold.
    let bh = Bulkhead::new(config(2, 0, Observe::All)).unwrap();
    let held: std::vec::Vec<_> = (0..5).map(|_| bh.try_acquire(1).unwrap()).collect();
    let s = bh.stats();
    assert_eq!(
        observed(&bh, Reason::ConcurrencyLimit),
        3,
        "calls 3, 4 and 5"
    );
    assert_eq!(
        s.rejected_by_reason.0,
        [0; Reason::COUNT],
        "nothing really rejected"
    );
    // Reported as it is, above the limit, not clamped.
    assert_eq!((s.active, s.available, s.admitted_total), (5, -3, 5));
    assert_eq!(s.observe, Observe::All);
    drop(held);
    let s = bh.stats();
    assert_eq!((s.active, s.available), (0, 2));
}

#[test]
fn c32_step2_an_observed_budget_never_switches_the_enforced_limit_off() {
    // Calls limit 3 enforced, a budget of 100 observed; R1..R4 each reserve 60 and hold.
    let bh = Bulkhead::new(Config {
        budget: Some(100),
        ..config(3, 0, Observe::Budget)
    })
    .unwrap();
    let r1 = granted(bh.admit(&ask(1, 60), None));
    assert_eq!(observed(&bh, Reason::BudgetLimit), 0);
    let r2 = granted(bh.admit(&ask(1, 60), None));
    assert_eq!(
        (observed(&bh, Reason::BudgetLimit), budget(&bh).in_use),
        (1, 120)
    );
    let r3 = granted(bh.admit(&ask(1, 60), None));
    assert_eq!(
        (observed(&bh, Reason::BudgetLimit), budget(&bh).in_use),
        (2, 180)
    );
    // R4: the enforced dimension is still checked, and refuses for real.
    let e = crate::tests::budget::refused(bh.admit(&ask(1, 60), None));
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    let s = bh.stats();
    assert_eq!(s.rejected_by_reason.get(Reason::ConcurrencyLimit), 1);
    assert_eq!(
        observed(&bh, Reason::BudgetLimit),
        2,
        "R4 was refused, not observed"
    );
    assert_eq!(budget(&bh).available, -80);
    drop((r1, r2, r3));
    books_balance(&bh);
    assert_eq!(budget(&bh).available, 100);
}

#[test]
fn c32_step2_an_observed_limit_never_switches_the_enforced_budget_off() {
    let bh = Bulkhead::new(Config {
        budget: Some(100),
        ..config(1, 0, Observe::Concurrency)
    })
    .unwrap();
    let a = granted(bh.admit(&ask(1, 60), None));
    let b = granted(bh.admit(&ask(1, 30), None)); // over the limit: observed
    assert_eq!(observed(&bh, Reason::ConcurrencyLimit), 1);
    let e = crate::tests::budget::refused(bh.admit(&ask(1, 20), None));
    assert_eq!(
        e.reason(),
        Some(Reason::BudgetLimit),
        "the budget is enforced"
    );
    drop((a, b));
    books_balance(&bh);
}

#[test]
fn c32_step4_every_entry_path_and_the_dry_run_agree() {
    // Step 1 through every Rust entry path, with `would_admit` before each acquire.
    type Path = fn(&Bulkhead) -> crate::Permit<'_, 0>;
    let paths: [(&str, Path); 4] = [
        ("try_acquire", |bh| bh.try_acquire(1).unwrap()),
        ("admit", |bh| granted(bh.admit(&Request::new(1), None))),
        ("acquire (async)", |bh| block_on(bh.acquire(1)).unwrap()),
        ("acquire_blocking", |bh| {
            bh.acquire_blocking(1, Some(core::time::Duration::from_secs(5)))
                .unwrap()
        }),
    ];
    for (name, path) in paths {
        let bh = Bulkhead::new(config(2, 0, Observe::All)).unwrap();
        let mut held = std::vec::Vec::new();
        for _ in 0..5 {
            let before = bh.stats();
            assert_eq!(
                bh.would_admit(&Request::new(1)),
                WouldAdmit::AdmitNow,
                "{name}"
            );
            assert_eq!(bh.stats(), before, "{name}: the dry run counted something");
            held.push(path(&bh));
        }
        assert_eq!(observed(&bh, Reason::ConcurrencyLimit), 3, "{name}");
        assert_eq!(bh.stats().active, 5, "{name}");
    }
}

#[test]
fn c32_step5_enforcing_again_refuses_and_preempts_nobody() {
    let bh = Bulkhead::new(config(2, 0, Observe::All)).unwrap();
    let held: std::vec::Vec<_> = (0..5).map(|_| bh.try_acquire(1).unwrap()).collect();
    bh.set_observe(Observe::Off).unwrap();
    let e = bh.try_acquire(1).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    let s = bh.stats();
    assert_eq!((s.active, s.available, s.observe), (5, -3, Observe::Off));
    assert_eq!(
        observed(&bh, Reason::ConcurrencyLimit),
        3,
        "the 6th was refused, not observed"
    );
    for p in held {
        p.end(Outcome::Success);
    }
    let s = bh.stats();
    assert_eq!((s.active, s.available), (0, 2));
}

#[test]
fn switching_to_observe_grants_the_waiters_of_the_observed_dimension() {
    let bh = Bulkhead::new(config(1, 4, Observe::Off)).unwrap();
    let a = bh.try_acquire(1).unwrap();
    let mut w1 = queued(bh.admit(&Request::new(1), None));
    let mut w2 = queued(bh.admit(&Request::new(1), None));
    bh.set_observe(Observe::Concurrency).unwrap();
    let (b, c) = (
        poll_granted(&mut w1).unwrap(),
        poll_granted(&mut w2).unwrap(),
    );
    assert_eq!(observed(&bh, Reason::ConcurrencyLimit), 2);
    assert_eq!((bh.stats().active, bh.stats().queued), (3, 0));
    drop((a, b, c));
    assert_eq!(bh.stats().available, 1);
}

#[test]
fn an_observed_budget_lets_a_queued_head_through_when_only_the_budget_is_short() {
    // Permits enforced (the request queues for them), budget observed: once a permit is back
    // the head is granted though its cost does not fit — by the dispatcher, counted
    // budget_limit.
    let bh = Bulkhead::new(Config {
        budget: Some(10),
        ..config(2, 4, Observe::Budget)
    })
    .unwrap();
    let a = granted(bh.admit(&ask(1, 8), None));
    let c = granted(bh.admit(&ask(1, 0), None));
    let mut w = queued(bh.admit(&ask(1, 8), None));
    // A cost above the current ceiling queues too: an observed budget never refuses.
    bh.set_budget(6).unwrap();
    let mut w2 = queued(bh.admit(&ask(1, 10), None));
    assert!(poll_granted(&mut w).is_none());
    drop(c);
    let b = poll_granted(&mut w).expect("granted when the permit returned");
    assert_eq!((b.cost(), budget(&bh).available), (8, -10));
    assert_eq!(observed(&bh, Reason::BudgetLimit), 1);
    drop(a);
    let d = poll_granted(&mut w2).expect("the costlier head too");
    assert_eq!(observed(&bh, Reason::BudgetLimit), 2);
    drop((b, d));
    books_balance(&bh);
}

#[test]
fn the_kill_switch_holds_in_observe_mode() {
    let bh = Bulkhead::new(config(2, 4, Observe::All)).unwrap();
    let a = bh.try_acquire(1).unwrap();
    bh.apply_limits(&crate::LimitsSnapshot::new(1).limit(0))
        .unwrap();
    assert_eq!(
        bh.try_acquire(1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    match bh.admit(&Request::new(1), None) {
        Decision::Rejected(e) => assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        bh.would_admit(&Request::new(1)),
        WouldAdmit::Reject(_)
    ));
    drop(a);
}

#[test]
fn observe_budget_needs_a_budget() {
    let e = Bulkhead::new(config(2, 0, Observe::Budget)).unwrap_err();
    assert_eq!(e, ConfigError::Observe);
    assert_eq!(e.option(), "observe");
    let msg = std::format!("{}", e.spelled(crate::config::Spelling::Python));
    assert!(msg.contains("observe") && msg.contains("budget"), "{msg}");
    let bh = Bulkhead::new(config(2, 0, Observe::Off)).unwrap();
    assert_eq!(bh.set_observe(Observe::Budget), Err(ConfigError::Observe));
    assert_eq!(bh.stats().observe, Observe::Off);
    // All without a budget observes the one dimension there is.
    bh.set_observe(Observe::All).unwrap();
    assert_eq!(bh.stats().observe, Observe::All);
}

#[test]
fn a_disabled_bulkhead_ignores_observe_mode() {
    let bh = Bulkhead::new(Config {
        enabled: false,
        ..config(1, 0, Observe::All)
    })
    .unwrap();
    let (a, b) = (bh.try_acquire(1).unwrap(), bh.try_acquire(1).unwrap());
    assert_eq!(
        observed(&bh, Reason::ConcurrencyLimit),
        0,
        "disabled: nothing is decided"
    );
    assert_eq!(bh.stats().observe, Observe::Off);
    drop((a, b));
}

#[test]
fn observed_calls_are_waited_for_by_drain() {
    let bh = std::sync::Arc::new(Bulkhead::new(config(1, 0, Observe::All)).unwrap());
    let a = bh.try_acquire_owned(1).unwrap();
    let b = bh.try_acquire_owned(1).unwrap();
    drop(a);
    let r = bh.drain_blocking(Some(core::time::Duration::ZERO));
    assert!(!r.drained, "an observed call is in flight: {r:?}");
    assert_eq!(r.active, 1);
    drop(b);
    assert!(bh.drain_blocking(None).drained);
}
