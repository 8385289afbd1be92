//! A registry's global cap (docs/design.md §9.2): keys are classes of one admission — a key's
//! own limit and the cap over all keys decided in one step, FIFO across keys, never a nested
//! acquire.

use std::{collections::HashMap, format, string::ToString, sync::Arc, thread, vec::Vec};

use crate::{
    AcquireError, Config, ConfigError, GlobalCap, KeyLimits, MAX_GLOBAL_KEYS, Reason, Registry,
    RegistryConfig, RegistryLimits, RegistryLimitsError, Request, WouldAdmit,
    config::classes::ClassError,
};

/// Keys of limit `per_key` (and `"big"` of 7) under a cap of `limit`.
fn capped(per_key: u64, limit: u64, max_queue: u64, max_keys: usize) -> Registry {
    Registry::new(RegistryConfig {
        defaults: Config {
            max_concurrent: per_key,
            ..Config::DEFAULT
        },
        overrides: HashMap::from([(
            "big".to_string(),
            Config {
                max_concurrent: 7,
                ..Config::DEFAULT
            },
        )]),
        max_keys,
        global: Some(GlobalCap { limit, max_queue }),
    })
    .unwrap()
}

fn reason<T: core::fmt::Debug>(r: Result<T, crate::KeyedError>) -> Option<Reason> {
    r.unwrap_err().reason()
}

#[test]
fn a_key_is_held_by_its_own_limit_and_all_keys_by_the_cap() {
    let reg = capped(2, 3, 4, 8);
    let a1 = reg.try_acquire("a", 1).unwrap();
    let a2 = reg.try_acquire("a", 1).unwrap();
    // The key's own limit: refused with the class's bound, not the global one.
    let e = reg.try_acquire("a", 1).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    let AcquireError::Rejected(r) = &e.error else {
        panic!("{e:?}")
    };
    assert_eq!(
        r.class.map(|c| c.bound),
        Some(crate::Bound::Class),
        "{:?}",
        r.class
    );
    let b1 = reg.try_acquire("b", 1).unwrap();
    // The cap: 3 held in all.
    assert_eq!(
        reason(reg.try_acquire("b", 1)),
        Some(Reason::ConcurrencyLimit)
    );
    assert_eq!(
        reason(reg.try_acquire("big", 1)),
        Some(Reason::ConcurrencyLimit)
    );
    let g = reg.global_stats().unwrap();
    assert_eq!((g.limit, g.active), (3, 3));
    let (ka, kb) = (reg.key_stats("a").unwrap(), reg.key_stats("b").unwrap());
    assert_eq!(
        (ka.ceiling, ka.in_flight, kb.ceiling, kb.in_flight),
        (2, 2, 2, 1)
    );
    assert_eq!(reg.key_stats("nope"), None);
    drop((a1, a2, b1));
    assert_eq!(reg.global_stats().unwrap().active, 0);
    // A key's own limit may be above the cap: "big" (7) takes the whole cap of 3.
    let held: Vec<_> = (0..3).map(|_| reg.try_acquire("big", 1).unwrap()).collect();
    assert_eq!(
        reason(reg.try_acquire("big", 1)),
        Some(Reason::ConcurrencyLimit)
    );
    drop(held);
}

#[test]
fn waiters_are_served_fifo_across_keys_and_a_key_at_its_limit_holds_nobody_back() {
    let reg = capped(1, 2, 8, 8);
    // Keys e and d exist first, so their classes come before c's: FIFO, not class order.
    reg.try_acquire("e", 1).map(drop).unwrap();
    reg.try_acquire("d", 1).map(drop).unwrap();
    let a = reg.try_acquire("a", 1).unwrap();
    let b = reg.try_acquire("b", 1).unwrap();
    // Queued in this order: c (the cap), a2 (its own key too), d, e (the cap).
    let mut order = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let reg = Arc::new(reg);
    let mut threads = Vec::new();
    for key in ["c", "a", "d", "e"] {
        let (r, tx) = (reg.clone(), tx.clone());
        threads.push(thread::spawn(move || {
            let p = r
                .acquire_blocking(key, 1, Some(core::time::Duration::from_secs(60)))
                .unwrap();
            tx.send(key).unwrap();
            // Each holds until the test releases the next unit.
            p
        }));
        // Wait until it is queued (bounded: 10 s).
        let want = threads.len() as u64;
        let t0 = std::time::Instant::now();
        while reg.global_stats().unwrap().queued < want {
            assert!(t0.elapsed().as_secs() < 10, "never queued");
            thread::yield_now();
        }
    }
    // The queue holds four waiters, not a global unit each (never a nested acquire).
    let g = reg.global_stats().unwrap();
    assert_eq!((g.active, g.queued), (2, 4));
    let next = || {
        rx.recv_timeout(core::time::Duration::from_secs(30))
            .unwrap()
    };
    drop(b); // one unit: c is the oldest (a2 is also held by its key's own limit)
    order.push(next());
    assert_eq!(order, ["c"]);
    drop(a); // key a has room now and a2 is older than d and e
    order.push(next());
    assert_eq!(order, ["c", "a"]);
    // One unit at a time (two at once would race the two threads' reports): d, then e.
    let mut threads = threads.into_iter();
    drop(threads.next().unwrap().join().unwrap());
    order.push(next());
    drop(threads.next().unwrap().join().unwrap());
    order.push(next());
    assert_eq!(order, ["c", "a", "d", "e"]);
    for t in threads {
        drop(t.join().unwrap());
    }
}

#[test]
fn a_waiter_of_a_full_key_does_not_stop_an_older_key_from_others() {
    // Key a at its limit has a waiter; b's arrivals still take free global units.
    let reg = capped(1, 3, 4, 8);
    let a = reg.try_acquire("a", 1).unwrap();
    let mut w = core::pin::pin!(reg.acquire("a", 1));
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    assert!(w.as_mut().poll(&mut cx).is_pending());
    let b = reg.try_acquire("b", 1).unwrap();
    let c = reg.try_acquire("c", 1).unwrap();
    assert_eq!(reg.global_stats().unwrap().active, 3);
    drop(a);
    let a2 = match w.as_mut().poll(&mut cx) {
        core::task::Poll::Ready(r) => r.unwrap(),
        core::task::Poll::Pending => panic!("a's waiter was granted by a's release"),
    };
    drop((a2, b, c));
}

#[test]
// C33's recipe fills 150-permit keys: 14 s under the interpreter (the largest Miri test); the
// same registry paths run under Miri in the smaller tests here.
#[cfg_attr(
    miri,
    ignore = "C33 recipe sizes: run natively; smaller registry tests cover it under Miri"
)]
fn c33_step4_keys_under_a_global_cap_see_every_update() {
    // K1 is created under revision 1 with a per-key limit of 30 (global 1000).
    let reg = capped(30, 1000, 0, 8);
    reg.try_acquire("k1", 1).map(drop).unwrap();
    let per_key = |rev: u64, limit: u64, global: Option<u64>| {
        let mut l = RegistryLimits::new(rev);
        l.defaults.limit = Some(limit);
        l.overrides.insert(
            "k1".into(),
            KeyLimits {
                limit: Some(limit),
                ..KeyLimits::default()
            },
        );
        l.global = global.map(|g| KeyLimits {
            limit: Some(g),
            ..KeyLimits::default()
        });
        reg.apply_limits(&l)
    };
    let fill = |key: &str| {
        let mut held = Vec::new();
        while let Ok(p) = reg.try_acquire(key, 1) {
            held.push(p);
            assert!(held.len() <= 2000);
        }
        held
    };
    per_key(1, 0, None).unwrap();
    assert_eq!(
        reason(reg.try_acquire("k1", 1)),
        Some(Reason::ConcurrencyLimit)
    );
    per_key(2, 150, None).unwrap();
    assert_eq!(fill("k1").len(), 150, "30 -> 0 -> 150 admits 150");
    per_key(3, 30, Some(100)).unwrap();
    assert_eq!(fill("k1").len(), 30, "global 100 + per-key 30 admits 30");
    assert_eq!(
        fill("k2").len(),
        30,
        "a key created after the update: the same"
    );
    per_key(4, 150, None).unwrap();
    assert_eq!(
        fill("k1").len(),
        100,
        "per-key 150 under global 100 admits 100"
    );
    assert_eq!(fill("k3").len(), 100, "a new key: the same");
    assert_eq!(
        (reg.revision(), reg.global_stats().unwrap().revision),
        (4, 4)
    );
    // Stale and all-or-nothing.
    assert_eq!(
        per_key(4, 5, None),
        Err(RegistryLimitsError::Stale { current: 4 })
    );
    let mut bad = RegistryLimits::new(5);
    bad.overrides.insert(
        "k1".into(),
        KeyLimits {
            max_queue: Some(1),
            ..KeyLimits::default()
        },
    );
    let e = reg.apply_limits(&bad).unwrap_err();
    assert_eq!(
        e,
        RegistryLimitsError::PerKey {
            key: Some("k1".into()),
            field: "max_queue"
        }
    );
    assert!(format!("{e}").contains("belongs in `global`"), "{e}");
    let mut huge = RegistryLimits::new(5);
    huge.global = Some(KeyLimits {
        max_queue: Some(5),
        ..KeyLimits::default()
    });
    let e = reg.apply_limits(&huge).unwrap_err();
    assert!(matches!(e, RegistryLimitsError::Global(_)), "{e:?}");
    assert_eq!(reg.revision(), 4);
    // The kill switch for every key, reversible.
    per_key(6, 150, Some(0)).unwrap();
    assert_eq!(
        reason(reg.try_acquire("k2", 1)),
        Some(Reason::ConcurrencyLimit)
    );
    per_key(7, 150, Some(10)).unwrap();
    assert_eq!(fill("k2").len(), 10);
}

#[test]
fn set_limit_changes_one_key_and_a_raise_grants_its_waiters() {
    let reg = capped(1, 4, 4, 8);
    let a = reg.try_acquire("a", 1).unwrap();
    let mut w = core::pin::pin!(reg.acquire("a", 1));
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    assert!(w.as_mut().poll(&mut cx).is_pending());
    reg.set_limit("a", 2).unwrap();
    let a2 = match w.as_mut().poll(&mut cx) {
        core::task::Poll::Ready(r) => r.unwrap(),
        core::task::Poll::Pending => panic!("the raise grants the waiter before it returns"),
    };
    assert_eq!(reg.key_stats("a").unwrap().ceiling, 2);
    assert_eq!(reg.key_stats("b"), None, "set_limit on a leaves b alone");
    drop((a, a2));
}

#[test]
fn idle_keys_are_evicted_and_their_class_reused_held_ones_never() {
    let reg = capped(2, 8, 4, 2);
    let a = reg.try_acquire("a", 1).unwrap();
    reg.try_acquire("b", 1).map(drop).unwrap();
    // c evicts b (idle), never a (held).
    let c = reg.try_acquire("c", 2).unwrap();
    let mut keys = reg.keys();
    keys.sort();
    assert_eq!(keys, ["a", "c"]);
    assert_eq!(reg.key_stats("c").unwrap().in_flight, 2);
    // Both held: a new key is refused `key_limit`.
    assert_eq!(reason(reg.try_acquire("d", 1)), Some(Reason::KeyLimit));
    assert_eq!(reg.key_limit_rejections(), 1);
    // An evicted key comes back with its own limit: "big" gets 7, not the class's old 2.
    drop(c);
    let big: Vec<_> = (0..7).map(|_| reg.try_acquire("big", 1).unwrap()).collect();
    assert_eq!(reg.key_stats("big").unwrap().ceiling, 7);
    assert_eq!(reg.global_stats().unwrap().active, 8);
    drop((a, big));
}

#[test]
fn dry_runs_answer_as_the_acquire_would_for_old_and_new_keys() {
    let reg = capped(2, 3, 0, 4);
    let a = reg.try_acquire("a", 2).unwrap();
    assert!(matches!(
        reg.would_admit("a", &Request::new(1)),
        WouldAdmit::Reject(e) if e.reason() == Some(Reason::ConcurrencyLimit)
    ));
    assert_eq!(reg.would_admit("b", &Request::new(1)), WouldAdmit::AdmitNow);
    assert!(matches!(
        reg.would_admit("b", &Request::new(3)),
        WouldAdmit::Reject(e) if e.reason() == Some(Reason::ConcurrencyLimit)
    ));
    assert_eq!(reg.len(), 1, "a dry run creates no key");
    let b = reg.try_acquire("b", 1).unwrap();
    assert!(matches!(
        reg.would_admit("c", &Request::new(1)),
        WouldAdmit::Reject(e) if e.reason() == Some(Reason::ConcurrencyLimit)
    ));
    drop((a, b));
    reg.close();
    assert!(matches!(
        reg.would_admit("c", &Request::new(1)),
        WouldAdmit::Reject(e) if e.reason() == Some(Reason::Shutdown)
    ));
    assert_eq!(reason(reg.try_acquire("a", 1)), Some(Reason::Shutdown));
}

#[test]
fn what_a_global_cap_cannot_carry_is_refused_by_name() {
    let build = |defaults: Config, overrides: HashMap<std::string::String, Config>, max_keys| {
        Registry::new(RegistryConfig {
            defaults,
            overrides,
            max_keys,
            global: Some(GlobalCap {
                limit: 4,
                max_queue: 4,
            }),
        })
    };
    let e = build(Config::DEFAULT, HashMap::new(), MAX_GLOBAL_KEYS + 1).unwrap_err();
    assert_eq!(e.option, "max_keys");
    assert!(format!("{e}").contains("1..=63"), "{e}");
    let odd = HashMap::from([(
        "k".to_string(),
        Config {
            max_queue: 1,
            ..Config::DEFAULT
        },
    )]);
    let e = build(Config::DEFAULT, odd, 8).unwrap_err();
    assert_eq!((e.option, e.key.as_deref()), ("overrides", Some("k")));
    let e = build(
        Config {
            start_limit: Some(1),
            ..Config::DEFAULT
        },
        HashMap::new(),
        8,
    )
    .unwrap_err();
    assert_eq!(e.option, "start_limit");
    let e = build(
        Config {
            enabled: false,
            ..Config::DEFAULT
        },
        HashMap::new(),
        8,
    )
    .unwrap_err();
    assert!(format!("{e}").contains("enabled"), "{e}");
    let e = Registry::new(RegistryConfig {
        global: Some(GlobalCap {
            limit: 0,
            max_queue: 4,
        }),
        ..RegistryConfig::default()
    });
    assert!(
        e.is_err(),
        "limit 0 at construction is out of range (apply 0 instead)"
    );
    // A key has no bulkhead of its own.
    let reg = capped(2, 4, 4, 8);
    let e = reg.get("a").unwrap_err();
    assert_eq!(
        e.error,
        AcquireError::Config(ConfigError::Class(ClassError::Keyed))
    );
    // Global limits on a registry without a cap.
    let plain = Registry::new(RegistryConfig::default()).unwrap();
    let mut l = RegistryLimits::new(1);
    l.global = Some(KeyLimits::default());
    assert_eq!(plain.apply_limits(&l), Err(RegistryLimitsError::NoGlobal));
}

#[test]
fn keys_under_a_cap_keep_both_bounds_under_threads() {
    // 4 threads on 3 keys (limit 2 each) under a cap of 3, acquiring and releasing; a sampler
    // checks the cap and every key's limit while they run. Bounded: 2 000 rounds per thread
    // (8 under Miri, whose run of 20 took 27 s).
    let reg = Arc::new(capped(2, 3, 16, 8));
    let stop = Arc::new(core::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let reg = reg.clone();
            thread::spawn(move || {
                for i in 0..if cfg!(miri) { 8 } else { 2_000usize } {
                    let key = ["a", "b", "c"][(t + i) % 3];
                    let p = if i % 2 == 0 {
                        reg.acquire_blocking(key, 1, Some(core::time::Duration::from_secs(10)))
                    } else {
                        reg.try_acquire(key, 1)
                    };
                    drop(p);
                }
            })
        })
        .collect();
    let sampler = {
        let (reg, stop) = (reg.clone(), stop.clone());
        thread::spawn(move || {
            let mut samples = 0u64;
            let max = if cfg!(miri) { 60 } else { 1_000_000 };
            while !stop.load(core::sync::atomic::Ordering::Relaxed) && samples < max {
                let total: u64 = ["a", "b", "c"]
                    .iter()
                    .filter_map(|k| reg.key_stats(k))
                    .map(|s| {
                        assert!(s.in_flight <= 2, "{s:?}");
                        s.in_flight
                    })
                    .sum();
                // Reads race the workers: each class count is exact, their sum may mix moments.
                assert!(total <= 3 + 3, "{total}");
                assert!(reg.global_stats().unwrap().active <= 3);
                samples += 1;
            }
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, core::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let g = reg.global_stats().unwrap();
    assert_eq!((g.active, g.queued, g.granted_unclaimed), (0, 0, 0), "{g}");
    for k in ["a", "b", "c"] {
        assert_eq!(reg.key_stats(k).unwrap().in_flight, 0);
    }
}

#[test]
fn a_keyed_admit_takes_the_whole_request_in_the_key_class() {
    use crate::Decision;
    let reg = capped(1, 2, 4, 8);
    let Decision::Granted(a) = reg.admit("a", &Request::new(1), None) else {
        panic!()
    };
    // The request's own class is replaced by the key's: it queues on key a's limit.
    let Decision::Queued(mut w) = reg.admit("a", &Request::new(1).class(5), None) else {
        panic!()
    };
    assert_eq!(reg.key_stats("a").unwrap().queued, 1);
    // A queued key is not evictable: with max_keys 8 nothing to prove here but its class.
    assert!(matches!(
        reg.admit("a", &Request::new(1).no_wait(), None),
        Decision::Rejected(e) if e.reason() == Some(Reason::ConcurrencyLimit)
    ));
    drop(a);
    assert!(matches!(w.poll(None), core::task::Poll::Ready(Ok(_))));
    // Without a cap: the key's own bulkhead.
    let plain = Registry::new(RegistryConfig::default()).unwrap();
    assert!(matches!(
        plain.admit("k", &Request::new(1), None),
        Decision::Granted(_)
    ));
    reg.close();
    assert!(matches!(
        reg.admit("new", &Request::new(1), None),
        Decision::Rejected(e) if e.reason() == Some(Reason::Shutdown)
    ));
}

#[test]
fn a_waiting_key_is_never_evicted_and_its_class_never_reused() {
    use crate::Decision;
    // max_keys 1: key a waits (its class is busy), so key b is refused `key_limit`.
    let reg = capped(1, 1, 4, 1);
    let Decision::Granted(held) = reg.admit("a", &Request::new(1), None) else {
        panic!()
    };
    let Decision::Queued(w) = reg.admit("a", &Request::new(1), None) else {
        panic!()
    };
    drop(held);
    // The waiter was granted (unclaimed): the class still holds it.
    assert_eq!(reason(reg.try_acquire("b", 1)), Some(Reason::KeyLimit));
    drop(w); // the unclaimed grant goes back
    assert!(
        reg.try_acquire("b", 1).is_ok(),
        "a is idle now: evicted, its class reused"
    );
    assert_eq!(reg.keys(), ["b"]);
}

#[test]
fn events_under_a_cap_name_the_key_and_carry_its_class() {
    use crate::{
        ClockSource,
        event::{Event, Observer},
    };
    use std::{string::String, sync::Mutex};
    /// (event name, key, class).
    type Entry = (String, Option<String>, Option<u16>);
    #[derive(Default)]
    struct Log(Mutex<Vec<Entry>>);
    impl Observer for Log {
        fn on_event(&self, e: &Event<'_>) {
            let key = e.key().map(str::to_string);
            self.0
                .lock()
                .unwrap()
                .push((e.name().to_string(), key, e.class()));
        }
    }
    let log = Arc::new(Log::default());
    let reg = Registry::with_observer(
        RegistryConfig {
            defaults: Config {
                max_concurrent: 1,
                ..Config::DEFAULT
            },
            max_keys: 1,
            global: Some(GlobalCap {
                limit: 4,
                max_queue: 4,
            }),
            ..RegistryConfig::default()
        },
        ClockSource::None,
        Some(log.clone()),
    )
    .unwrap();
    let a = reg.try_acquire("a", 1).unwrap();
    assert!(reg.try_acquire("a", 1).is_err());
    drop(a);
    // b evicts a and takes its class: its events carry b's name.
    drop(reg.try_acquire("b", 1).unwrap());
    let got = core::mem::take(&mut *log.0.lock().unwrap());
    let named = |k: &str, n: &str| (n.to_string(), Some(k.to_string()), Some(1u16));
    assert_eq!(
        got,
        [
            named("a", "admit"),
            named("a", "reject"),
            named("a", "release"),
            named("b", "admit"),
            named("b", "release"),
        ]
    );
}

#[test]
fn c32_step3_a_key_observed_inside_an_enforced_global_cap() {
    // Key K observes its own limit of 1; the registry's cap of 2 over every key is enforced.
    // Three calls on K: two admitted; K records observed rejections for calls 2 and 3 (its own
    // limit would have refused both); the cap really refuses call 3.
    let reg = Registry::new(RegistryConfig {
        defaults: Config {
            max_concurrent: 4,
            ..Config::DEFAULT
        },
        overrides: HashMap::from([(
            "K".to_string(),
            Config {
                max_concurrent: 1,
                observe: crate::Observe::Concurrency,
                ..Config::DEFAULT
            },
        )]),
        max_keys: 4,
        global: Some(GlobalCap {
            limit: 2,
            max_queue: 4,
        }),
    })
    .unwrap();
    let c1 = reg.try_acquire("K", 1).unwrap();
    let c2 = reg.try_acquire("K", 1).unwrap();
    let e = reg.try_acquire("K", 1).unwrap_err();
    assert_eq!(
        e.reason(),
        Some(Reason::ConcurrencyLimit),
        "the cap is enforced"
    );
    let k = reg.key_stats("K").unwrap();
    assert_eq!(
        (k.in_flight, k.ceiling, k.observe, k.observed),
        (2, 1, crate::Observe::Concurrency, 2),
        "{k:?}"
    );
    let g = reg.global_stats().unwrap();
    assert_eq!(
        (
            g.active,
            g.observed_by_reason.get(Reason::ConcurrencyLimit),
            g.rejected_by_reason.get(Reason::ConcurrencyLimit)
        ),
        (2, 1, 1),
        "one grant let through past K's limit, one real refusal: {g}"
    );
    // Another key keeps its own enforced limit and the cap.
    assert_eq!(
        reason(reg.try_acquire("other", 1)),
        Some(Reason::ConcurrencyLimit)
    );
    drop((c1, c2));
    let k = reg.key_stats("K").unwrap();
    assert_eq!((k.in_flight, k.queued), (0, 0));
    assert_eq!(reg.global_stats().unwrap().active, 0);
    // A key not created yet that observes its own limit: the dry run lets a weight above it
    // through, as the admission would (the cap decides).
    assert_eq!(
        reg.would_admit("K", &Request::new(2)),
        WouldAdmit::AdmitNow,
        "an existing key"
    );
    let fresh = Registry::new(RegistryConfig {
        defaults: Config {
            max_concurrent: 1,
            observe: crate::Observe::Concurrency,
            ..Config::DEFAULT
        },
        max_keys: 1,
        global: Some(GlobalCap {
            limit: 4,
            max_queue: 4,
        }),
        ..RegistryConfig::default()
    })
    .unwrap();
    assert_eq!(
        fresh.would_admit("new", &Request::new(2)),
        WouldAdmit::AdmitNow
    );
    let c = fresh.admit("new", &Request::new(2).no_wait(), None);
    assert!(matches!(c, crate::Decision::Granted(_)), "{c:?}");
    drop(c);
    assert_eq!(fresh.key_stats("new").unwrap().observed, 1);
    // Evicted and its class given to another key: the count starts afresh.
    let d = fresh.admit("other", &Request::new(1).no_wait(), None);
    assert!(matches!(d, crate::Decision::Granted(_)), "{d:?}");
    assert_eq!(fresh.key_stats("other").unwrap().observed, 0);
}

#[test]
fn admission_of_is_the_shared_admission_under_a_cap_and_the_key_s_own_without() {
    let r = capped(1, 2, 4, 4);
    let a = r.admission_of("a").unwrap();
    let b = r.admission_of("b").unwrap();
    assert!(Arc::ptr_eq(&a, &b), "one shared admission");
    assert!(r.get("a").is_err(), "get refuses under a cap");
    // Admissions of a key go through `admit` (its class); the ticket polls on the shared one.
    let crate::Decision::Granted(call) = r.admit("a", &Request::new(1), None) else {
        panic!()
    };
    assert!(Arc::ptr_eq(call.handle(), &a));
    assert_eq!(r.key_stats("a").unwrap().in_flight, 1);
    drop(call);
    // Without a cap: the key's own bulkhead, the one `get` returns.
    let plain = Registry::new(RegistryConfig::default()).unwrap();
    let k = plain.admission_of("k").unwrap();
    assert!(Arc::ptr_eq(&k, &plain.get("k").unwrap()));
    plain.close();
    assert_eq!(
        plain.admission_of("new").unwrap_err().reason(),
        Some(Reason::Shutdown)
    );
}
