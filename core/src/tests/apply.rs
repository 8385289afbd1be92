//! Revisioned runtime limits (docs/design.md §4.6): `apply_limits`, the kill switch, and the
//! C33 recipe (`../shared/cases/CASES.md`): new limits are enforced once reported, a stale
//! revision never wins, the kill switch is reversible.

use core::{sync::atomic::Ordering::SeqCst, task::Poll, time::Duration};
use std::{sync::Arc, thread, vec::Vec};

use crate::{
    Bulkhead, Config, ConfigError, Decision, LimitsError, LimitsSnapshot, Reason, Request,
    Resilience, adaptive::AdaptiveConfig,
};

fn bh(max_concurrent: u64, budget: Option<u64>) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent,
        max_queue: 8,
        budget,
        ..Config::DEFAULT
    })
    .unwrap()
}

/// C33 steps 1–3 and 6 on one bulkhead.
#[test]
fn c33_limits_are_enforced_once_reported_and_stale_revisions_lose() {
    // Step 1: built with 4, limit 2, both held; revision 1 raises to 4: at once admitted.
    let b = bh(4, None);
    b.set_limit(2).unwrap();
    let held = [b.try_acquire(1).unwrap(), b.try_acquire(1).unwrap()];
    b.apply_limits(&LimitsSnapshot::new(1).limit(4)).unwrap();
    let third = b
        .try_acquire(1)
        .expect("enforced as soon as apply_limits returned");
    assert_eq!((b.stats().limit, b.stats().revision), (4, 1));
    // Step 2: the kill switch: refused at once, the 3 holders are not pre-empted.
    b.apply_limits(&LimitsSnapshot::new(2).limit(0)).unwrap();
    let e = b.try_acquire(1).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    assert_eq!((b.stats().active, b.stats().available), (3, -3));
    drop((held, third));
    assert_eq!(b.stats().available, 0);
    // Step 3: 5 (limit 10 → above max_concurrent here: 4), 7, then a delayed 6.
    let b = bh(20, None);
    b.apply_limits(&LimitsSnapshot::new(5).limit(10)).unwrap();
    b.apply_limits(&LimitsSnapshot::new(7).limit(20)).unwrap();
    let stale = b.apply_limits(&LimitsSnapshot::new(6).limit(1));
    assert_eq!(stale, Err(LimitsError::Stale { current: 7 }));
    let equal = b.apply_limits(&LimitsSnapshot::new(7).limit(1));
    assert_eq!(equal, Err(LimitsError::Stale { current: 7 }));
    assert_eq!((b.stats().limit, b.revision()), (20, 7));
    // Step 6: limit 1 with three waiters; raising to 3 grants two in the same call.
    let b = bh(3, None);
    b.set_limit(1).unwrap();
    let _h = b.try_acquire(1).unwrap();
    let mut waiters: Vec<_> = (0..3)
        .map(|_| match b.admit(&Request::new(1), None) {
            Decision::Queued(w) => w,
            other => panic!("{other:?}"),
        })
        .collect();
    b.apply_limits(&LimitsSnapshot::new(1).limit(3)).unwrap();
    // Polled and kept (a dropped grant would pass its permit on to the third waiter).
    let polls: Vec<_> = waiters.iter_mut().map(|w| w.poll(None)).collect();
    let granted = polls
        .iter()
        .filter(|p| matches!(p, Poll::Ready(Ok(_))))
        .count();
    assert_eq!((granted, b.stats().active), (2, 3));
}

#[test]
fn the_kill_switch_rejects_queued_waiters_and_is_reversible() {
    let b = bh(2, Some(100));
    let _h = b.try_acquire(2).unwrap();
    let mut w = match b.admit(&Request::new(1).cost(10), None) {
        Decision::Queued(w) => w,
        other => panic!("{other:?}"),
    };
    b.apply_limits(&LimitsSnapshot::new(1).limit(0)).unwrap();
    let Poll::Ready(Err(e)) = w.poll(None) else {
        panic!("the kill switch rejects the queue")
    };
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    match b.admit(&Request::new(1), None) {
        Decision::Rejected(crate::AcquireError::Rejected(r)) => {
            assert_eq!(r.reason, Reason::ConcurrencyLimit);
            // The refusal names the limits that refused it.
            assert_eq!((r.snapshot.revision, r.snapshot.limit), (1, 0));
        }
        other => panic!("killed: refused at once, not queued: {other:?}"),
    }
    b.apply_limits(&LimitsSnapshot::new(2).limit(2)).unwrap();
    drop(_h);
    assert!(b.try_acquire(2).is_ok(), "reversible, unlike close()");
}

#[test]
fn both_dimensions_in_one_revision_and_nothing_changes_on_an_error() {
    let b = bh(4, Some(100));
    b.apply_limits(&LimitsSnapshot::new(3).limit(2).budget(40))
        .unwrap();
    let s = b.stats();
    assert_eq!((s.limit, s.budget.unwrap().limit, s.revision), (2, 40, 3));
    // Invalid values: validated whole first, nothing installed, the revision unchanged.
    for (snap, want) in [
        (
            LimitsSnapshot::new(4)
                .limit(crate::MAX_CONCURRENT_WITH_BUDGET + 1)
                .budget(10),
            LimitsError::Limit {
                max: crate::MAX_CONCURRENT_WITH_BUDGET,
            },
        ),
        (
            LimitsSnapshot::new(4).limit(1).budget(101),
            LimitsError::Config(ConfigError::BudgetLimit),
        ),
        (LimitsSnapshot::new(0).limit(1), LimitsError::Revision(0)),
        (
            LimitsSnapshot::new(crate::MAX_REVISION + 1),
            LimitsError::Revision(crate::MAX_REVISION + 1),
        ),
    ] {
        assert_eq!(b.apply_limits(&snap), Err(want));
        let s = b.stats();
        assert_eq!((s.limit, s.budget.unwrap().limit, s.revision), (2, 40, 3));
    }
    let plain = bh(4, None);
    assert_eq!(
        plain.apply_limits(&LimitsSnapshot::new(1).budget(1)),
        Err(LimitsError::Config(ConfigError::BudgetLimit))
    );
    // A snapshot that sets nothing still moves the revision on.
    b.apply_limits(&LimitsSnapshot::new(9)).unwrap();
    assert_eq!((b.revision(), b.stats().limit), (9, 2));
    // Messages name the rule.
    let m = std::format!("{}", LimitsError::Stale { current: 9 });
    assert!(m.contains("above the revision in force (9)"), "{m}");
}

#[test]
fn an_adaptive_limit_is_not_overridden() {
    let b = Bulkhead::new(Config {
        max_concurrent: 4,
        resilience: Resilience {
            adaptive: Some(AdaptiveConfig::for_max_concurrent(4)),
            ..Resilience::OFF
        },
        ..Config::DEFAULT
    })
    .unwrap();
    assert_eq!(
        b.apply_limits(&LimitsSnapshot::new(1).limit(0)),
        Err(LimitsError::AdaptiveLimit)
    );
    assert_eq!(b.revision(), 0);
}

/// C33 step 5: two threads apply revisions 8 and 9 at the same time, in random order; the
/// final revision is 9 with 9's limit in every iteration, and a reader never sees 9 then 8.
#[test]
fn c33_concurrent_applies_leave_the_highest_revision() {
    // Miri runs a handful (each iteration spawns three threads).
    let n = if cfg!(miri) { 4 } else { 2_000u64 };
    for i in 0..n {
        let b = Arc::new(bh(16, Some(1000)));
        let seen = Arc::new(core::sync::atomic::AtomicU64::new(0));
        let reader = {
            let (b, seen) = (b.clone(), seen.clone());
            thread::spawn(move || {
                // Until revision 9 is seen (bounded: 10^6 reads), checking each read.
                for _ in 0..1_000_000 {
                    let r = b.revision();
                    assert!(r >= seen.load(SeqCst), "went back to {r}");
                    seen.store(r, SeqCst);
                    if r == 9 {
                        assert_eq!(b.stats().limit, 9, "revision 9 reported before enforced");
                        return;
                    }
                    thread::yield_now();
                }
                panic!("revision 9 never seen");
            })
        };
        let appliers: Vec<_> = [8u64, 9]
            .into_iter()
            .map(|rev| {
                let b = b.clone();
                thread::spawn(move || {
                    let _ = b.apply_limits(&LimitsSnapshot::new(rev).limit(rev).budget(rev * 10));
                })
            })
            .collect();
        for t in appliers {
            t.join().unwrap();
        }
        reader.join().unwrap();
        let s = b.stats();
        assert_eq!(
            (s.revision, s.limit, s.budget.unwrap().limit),
            (9, 9, 90),
            "iteration {i}"
        );
    }
}

#[test]
fn the_kill_switch_holds_on_a_disabled_bulkhead() {
    let b = Bulkhead::new(Config {
        max_concurrent: 2,
        enabled: false,
        ..Config::DEFAULT
    })
    .unwrap();
    let _over = [b.try_acquire(2).unwrap(), b.try_acquire(2).unwrap()]; // disabled: over-admits
    b.apply_limits(&LimitsSnapshot::new(1).limit(0)).unwrap();
    assert_eq!(
        b.try_acquire(1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    assert_eq!(
        b.would_admit(&Request::new(1)).reason(),
        Some(Reason::ConcurrencyLimit)
    );
    b.apply_limits(&LimitsSnapshot::new(2).limit(2)).unwrap();
    assert!(b.try_acquire(1).is_ok(), "released: disabled admits again");
}

/// A waker that panics in the dispatcher pass of an install unwinds out of `apply_limits`
/// with the revision unchanged, and does not leave later applies waiting forever.
#[test]
fn a_panicking_waker_does_not_wedge_later_applies() {
    struct Boom;
    impl std::task::Wake for Boom {
        fn wake(self: Arc<Self>) {
            panic!("waker panics");
        }
    }
    let b = Arc::new(bh(2, None));
    b.set_limit(1).unwrap();
    let _h = b.try_acquire_owned(1).unwrap();
    let waker = core::task::Waker::from(Arc::new(Boom));
    let w = match b.admit_owned(&Request::new(1), Some(&waker)) {
        Decision::Queued(w) => w,
        other => panic!("{other:?}"),
    };
    let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        b.apply_limits(&LimitsSnapshot::new(1).limit(2))
    }));
    assert!(r.is_err(), "the waker's panic unwinds out of apply_limits");
    assert_eq!(b.revision(), 0, "not published");
    // Not wedged: a later apply (from another thread, bounded by join) installs.
    let t = {
        let b = b.clone();
        thread::spawn(move || b.apply_limits(&LimitsSnapshot::new(2).limit(2)))
    };
    assert_eq!(t.join().unwrap(), Ok(()));
    assert_eq!(b.revision(), 2);
    drop(w);
}

#[test]
fn a_limit_above_max_concurrent_raises_the_ceiling() {
    let b = bh(4, None);
    assert_eq!(
        b.try_acquire(5).unwrap_err().reason(),
        None,
        "weight 5 is invalid at first"
    );
    b.apply_limits(&LimitsSnapshot::new(1).limit(150)).unwrap();
    let s = b.stats();
    assert_eq!((s.limit, s.max_concurrent, s.available), (150, 150, 150));
    let heavy = b.try_acquire(100).unwrap();
    // A shrink keeps the raised ceiling (it only rises), so the weight stays valid.
    b.apply_limits(&LimitsSnapshot::new(2).limit(30)).unwrap();
    assert_eq!((b.stats().max_concurrent, b.stats().available), (150, -70));
    drop(heavy);
    assert_eq!(b.stats().available, 30);
}

#[test]
fn a_fail_closed_start_refuses_until_applied() {
    let b = Bulkhead::new(Config {
        max_concurrent: 4,
        max_queue: 4,
        start_limit: Some(0),
        ..Config::DEFAULT
    })
    .unwrap();
    let s = b.stats();
    assert_eq!((s.limit, s.available, s.max_concurrent), (0, 0, 4));
    assert_eq!(
        b.try_acquire(1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    match b.admit(&crate::Request::new(1), None) {
        crate::Decision::Rejected(e) => assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit)),
        other => panic!("queued under a fail-closed start: {other:?}"),
    }
    b.apply_limits(&LimitsSnapshot::new(1).limit(4)).unwrap();
    assert!(b.try_acquire(4).is_ok());
    // Validated: at most max_concurrent, and not with an adaptive limit.
    let bad = |start_limit, adaptive| {
        let mut c = Config {
            max_concurrent: 4,
            start_limit: Some(start_limit),
            ..Config::DEFAULT
        };
        if adaptive {
            c.resilience.adaptive = Some(crate::adaptive::AdaptiveConfig::for_max_concurrent(4));
        }
        Bulkhead::new(c).unwrap_err()
    };
    assert_eq!(bad(5, false).option(), "start_limit");
    assert_eq!(bad(2, true).option(), "start_limit");
    static S: Bulkhead<4> = Bulkhead::new_static(Config {
        max_concurrent: 2,
        max_queue: 4,
        start_limit: Some(0),
        ..Config::DEFAULT
    });
    assert!(
        S.try_acquire(1).is_err(),
        "a static bulkhead starts closed too"
    );
}

#[test]
fn c33_step4_registry_limits_reach_existing_and_future_keys() {
    use crate::{KeyLimits, Registry, RegistryConfig, RegistryLimits, RegistryLimitsError};
    let reg = Registry::new(RegistryConfig {
        defaults: Config {
            max_concurrent: 30,
            max_queue: 0,
            ..Config::DEFAULT
        },
        ..RegistryConfig::default()
    })
    .unwrap();
    // K1 is created under the first revision with a per-key limit of 30.
    let k1 = reg.get("k1").unwrap();
    let apply = |rev: u64, limit: u64| {
        let mut l = RegistryLimits::new(rev);
        l.overrides.insert(
            "k1".into(),
            KeyLimits {
                limit: Some(limit),
                budget: None,
                ..KeyLimits::default()
            },
        );
        l.defaults = KeyLimits {
            limit: Some(limit),
            budget: None,
            ..KeyLimits::default()
        };
        reg.apply_limits(&l)
    };
    apply(1, 30).unwrap();
    apply(2, 0).unwrap();
    assert!(
        reg.try_acquire("k1", 1).is_err(),
        "the kill switch reached K1"
    );
    apply(3, 150).unwrap();
    // 30 -> 0 -> 150: K1 admits 150 (Scality's bucket stayed at 30).
    let held: Vec<_> = (0..150)
        .map(|_| reg.try_acquire("k1", 1).unwrap())
        .collect();
    assert!(reg.try_acquire("k1", 1).is_err());
    assert_eq!(
        (k1.stats().limit, k1.revision(), reg.revision()),
        (150, 3, 3)
    );
    // A key created after the update behaves the same.
    let later: Vec<_> = (0..150)
        .map(|_| reg.try_acquire("k2", 1).unwrap())
        .collect();
    assert!(reg.try_acquire("k2", 1).is_err());
    assert_eq!(reg.get("k2").unwrap().revision(), 3);
    drop((held, later));
    // Stale, and all-or-nothing: a budget on keys without one refuses and changes nothing.
    assert_eq!(apply(3, 5), Err(RegistryLimitsError::Stale { current: 3 }));
    let mut bad = RegistryLimits::new(4);
    bad.defaults = KeyLimits {
        limit: Some(5),
        budget: Some(10),
        ..KeyLimits::default()
    };
    let e = reg.apply_limits(&bad).unwrap_err();
    assert!(matches!(e, RegistryLimitsError::Limits { .. }), "{e:?}");
    assert!(std::format!("{e}").contains("nothing was applied"), "{e}");
    assert_eq!((k1.stats().limit, reg.revision()), (150, 3));
    let mut odd = RegistryLimits::new(4);
    odd.overrides
        .insert("HTTPS://Odd.Example".into(), KeyLimits::default());
    assert!(matches!(
        reg.apply_limits(&odd),
        Err(RegistryLimitsError::Key(_))
    ));
    // A brand-new key gets the limits in force.
    assert_eq!(reg.get("k3").unwrap().stats().limit, 150);
}

#[test]
fn registry_limits_for_keys_not_created_yet_are_checked_and_dry_runs_see_them() {
    use crate::{
        KeyLimits, Registry, RegistryConfig, RegistryLimits, RegistryLimitsError, Request,
        WouldAdmit,
    };
    // Found by review: an override for a key that neither exists nor has a configuration of
    // its own was never checked (a budget on a key built without one).
    let reg = Registry::new(RegistryConfig::default()).unwrap();
    let mut l = RegistryLimits::new(1);
    l.overrides.insert(
        "k".into(),
        KeyLimits {
            limit: Some(5),
            budget: Some(3),
            ..KeyLimits::default()
        },
    );
    let e = reg.apply_limits(&l).unwrap_err();
    assert!(
        matches!(&e, RegistryLimitsError::Limits { key: Some(k), .. } if k == "k"),
        "{e:?}"
    );
    assert_eq!(
        (reg.revision(), reg.get("k").unwrap().stats().limit),
        (0, 10)
    );
    // The dry run of a key not created yet asks the bulkhead it would get: a fail-closed start
    // refuses, a raised ceiling admits a heavier weight.
    let closed = Registry::new(RegistryConfig {
        defaults: Config {
            max_concurrent: 10,
            max_queue: 0,
            start_limit: Some(0),
            ..Config::DEFAULT
        },
        ..RegistryConfig::default()
    })
    .unwrap();
    assert!(matches!(
        closed.would_admit("new", &Request::new(1)),
        WouldAdmit::Reject(_)
    ));
    assert!(closed.try_acquire("new", 1).is_err());
    let mut raise = RegistryLimits::new(1);
    raise.defaults.limit = Some(50);
    closed.apply_limits(&raise).unwrap();
    assert_eq!(
        closed.would_admit("other", &Request::new(40)),
        WouldAdmit::AdmitNow
    );
    assert!(closed.try_acquire("other", 40).is_ok());
}

#[test]
fn calls_record_the_revision_they_were_granted_under() {
    let b = Bulkhead::new(Config {
        max_concurrent: 4,
        max_queue: 4,
        ..Config::DEFAULT
    })
    .unwrap();
    let before = b.try_acquire(1).unwrap();
    b.apply_limits(&LimitsSnapshot::new(3).limit(2)).unwrap();
    let after = b.try_acquire(1).unwrap();
    assert_eq!((before.revision(), after.revision()), (0, 3));
}

#[test]
fn max_queue_and_queue_timeout_change_under_a_revision() {
    let b = Bulkhead::new(Config {
        max_concurrent: 1,
        max_queue: 3,
        ..Config::DEFAULT
    })
    .unwrap();
    assert_eq!(
        b.apply_limits(&LimitsSnapshot::new(1).max_queue(4)),
        Err(LimitsError::MaxQueue { max: 3 })
    );
    assert_eq!((b.revision(), b.max_queue()), (0, 3), "nothing installed");
    b.apply_limits(
        &LimitsSnapshot::new(2)
            .max_queue(1)
            .queue_timeout(Duration::from_millis(250)),
    )
    .unwrap();
    assert_eq!(b.max_queue(), 1);
    assert_eq!(b.queue_timeout(), Duration::from_millis(250));
    let h = b.try_acquire(1).unwrap();
    let Decision::Queued(w) = b.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(
        w.queue_timeout(),
        Duration::from_millis(250),
        "the new default"
    );
    let Decision::Rejected(e) = b.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::QueueLimit));
    b.apply_limits(&LimitsSnapshot::new(3).queue_timeout(Duration::MAX))
        .unwrap();
    assert_eq!(b.queue_timeout(), Duration::MAX);
    drop((w, h));
}
