//! Admission events (docs/design.md §8.2): ids, kinds, fields and times on an injected clock;
//! a panicking observer contained and counted; a bulkhead without an observer assigns no ids.

use core::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::{
    string::{String, ToString},
    sync::{Arc, Mutex},
    vec::Vec,
};

use crate::{
    Bulkhead, ClockSource, Config, Decision, Event, EventKind, HoldChange, LimitsSnapshot, Observe,
    Observer, Outcome, Reason, Request,
};

struct Manual(AtomicU64);
impl crate::Clock for Manual {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

/// Every event, as an owned line (`kind id field=value …`), plus the raw kinds.
#[derive(Default)]
struct Log(Mutex<Vec<String>>);
impl Observer for Log {
    fn on_event(&self, e: &Event<'_>) {
        let line = match *e {
            Event::Admit {
                id,
                weight,
                cost,
                queued,
                wait_ns,
                revision,
                ..
            } => std::format!(
                "admit {id} w={weight} c={cost} queued={queued} wait={wait_ns} rev={revision}"
            ),
            Event::Reject {
                id,
                reason,
                queued,
                wait_ns,
                ..
            } => std::format!(
                "reject {id} {} queued={queued} wait={wait_ns}",
                reason.as_str()
            ),
            Event::ObserveBypass { id, reason, .. } => {
                std::format!("bypass {id} {}", reason.as_str())
            }
            Event::Release {
                id,
                weight,
                held,
                used,
                ended,
                ..
            } => std::format!("release {id} w={weight} held={held} used={used:?} ended={ended}"),
            Event::Usage {
                id, used, change, ..
            } => std::format!("usage {id} used={used} {change:?}"),
            Event::Reconfigure {
                revision,
                limit,
                budget,
                observe,
                ..
            } => std::format!(
                "reconfigure rev={revision} limit={limit} budget={budget:?} {}",
                observe.as_str()
            ),
            Event::Shed {
                id,
                class,
                victim,
                victim_class,
                ..
            } => {
                std::format!("shed {id} class={class} victim={victim} victim_class={victim_class}")
            }
            _ => e.name().to_string(),
        };
        self.0.lock().unwrap().push(line);
    }
}

impl Log {
    fn take(&self) -> Vec<String> {
        core::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn observed(config: Config) -> (Bulkhead, Arc<Log>, Arc<Manual>) {
    let log = Arc::new(Log::default());
    let clock = Arc::new(Manual(AtomicU64::new(1_000)));
    let bh = Bulkhead::with_observer(
        config,
        ClockSource::Shared(clock.clone()),
        Some(log.clone()),
        None,
    )
    .unwrap();
    (bh, log, clock)
}

#[test]
fn admissions_carry_ids_and_join_their_release() {
    let (bh, log, clock) = observed(Config {
        max_concurrent: 1,
        max_queue: 4,
        ..Config::DEFAULT
    });
    let a = bh.try_acquire(1).unwrap();
    assert_eq!(a.call().id(), 1);
    let Decision::Queued(mut w) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert!(bh.try_acquire(1).is_err()); // id 3, refused at once
    clock.0.fetch_add(5_000, SeqCst);
    drop(a); // grants id 2 at +5 µs
    clock.0.fetch_add(7_000, SeqCst);
    let core::task::Poll::Ready(Ok(b)) = w.poll(None) else {
        panic!()
    };
    assert_eq!(b.call().id(), 2);
    b.end(Outcome::Success);
    assert_eq!(
        log.take(),
        [
            "admit 1 w=1 c=0 queued=false wait=0 rev=0",
            "reject 3 concurrency_limit queued=false wait=0",
            "release 1 w=1 held=0 used=Some(0) ended=true",
            // Enqueue → grant, on the bulkhead's clock (not → the owner's poll 7 µs later).
            "admit 2 w=1 c=0 queued=true wait=5000 rev=0",
            "release 2 w=1 held=0 used=Some(0) ended=true",
        ]
    );
}

#[test]
fn queued_refusals_cancels_and_abandons_are_rejects_with_their_wait() {
    let (bh, log, clock) = observed(Config {
        max_concurrent: 1,
        max_queue: 4,
        ..Config::DEFAULT
    });
    let held = bh.try_acquire(1).unwrap();
    let Decision::Queued(mut timed) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    let Decision::Queued(cancelled) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    let Decision::Queued(dropped) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    clock.0.fetch_add(3_000, SeqCst);
    bh.expire(timed.ticket(), Reason::Timeout).unwrap();
    assert!(matches!(timed.poll(None), core::task::Poll::Ready(Err(_))));
    let _ = cancelled.cancel(Reason::Aborted);
    drop(dropped);
    drop(held);
    let lines = log.take();
    assert_eq!(
        lines[1..],
        [
            "reject 2 timeout queued=true wait=3000",
            "reject 3 aborted queued=true wait=3000",
            "reject 4 aborted queued=true wait=3000",
            "release 1 w=1 held=0 used=Some(0) ended=true",
        ]
    );
}

#[test]
fn budget_usage_and_partial_releases_are_reported() {
    let (bh, log, _) = observed(Config {
        max_concurrent: 4,
        budget: Some(1_000),
        ..Config::DEFAULT
    });
    let Decision::Granted(mut call) = bh.admit(&Request::new(2).cost(600), None) else {
        panic!()
    };
    let r = call.report_usage(100, 300).unwrap();
    assert_eq!(r.change, HoldChange::Shrank(200));
    call.release_partial(1).unwrap();
    call.end_with_usage(Outcome::Success, 350);
    assert_eq!(
        log.take(),
        [
            "admit 1 w=2 c=600 queued=false wait=0 rev=0",
            "usage 1 used=100 Shrank(200)",
            "release 1 w=1 held=400 used=None ended=false",
            "release 1 w=1 held=400 used=Some(350) ended=true",
        ]
    );
}

#[test]
fn observe_bypass_precedes_its_admit() {
    let (bh, log, _) = observed(Config {
        max_concurrent: 1,
        max_queue: 0,
        ..Config::DEFAULT
    });
    let a = bh.try_acquire(1).unwrap();
    // The bulkhead enforces; this request shadows its calls dimension.
    let Decision::Granted(b) = bh.admit(&Request::new(1).observe(Observe::Concurrency), None)
    else {
        panic!()
    };
    assert_eq!(
        log.take(),
        [
            "admit 1 w=1 c=0 queued=false wait=0 rev=0",
            "bypass 2 concurrency_limit",
            "admit 2 w=1 c=0 queued=false wait=0 rev=0",
        ]
    );
    drop((a, b));
}

#[test]
fn c32_a_requests_own_observe_never_switches_the_other_dimension_off() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 1,
        max_queue: 0,
        budget: Some(10),
        ..Config::DEFAULT
    })
    .unwrap();
    let Decision::Granted(hog) = bh.admit(&Request::new(1).cost(10), None) else {
        panic!()
    };
    let ask = |o: Observe| bh.admit(&Request::new(1).cost(1).observe(o), None);
    let Decision::Rejected(e) = ask(Observe::Budget) else {
        panic!()
    };
    assert_eq!(
        e.reason(),
        Some(Reason::ConcurrencyLimit),
        "calls still enforced"
    );
    let Decision::Rejected(e) = ask(Observe::Concurrency) else {
        panic!()
    };
    assert_eq!(
        e.reason(),
        Some(Reason::BudgetLimit),
        "budget still enforced"
    );
    let Decision::Granted(both) = ask(Observe::All) else {
        panic!()
    };
    let s = bh.stats();
    assert_eq!(s.observed_by_reason.get(Reason::ConcurrencyLimit), 1);
    assert_eq!(s.rejected_by_reason.get(Reason::ConcurrencyLimit), 1);
    assert_eq!(s.rejected_by_reason.get(Reason::BudgetLimit), 1);
    assert_eq!(
        s.observe,
        Observe::Off,
        "the bulkhead's own mode is unchanged"
    );
    // The dry run answers from the same rule.
    assert_eq!(
        bh.would_admit(&Request::new(1).cost(1).observe(Observe::All)),
        crate::WouldAdmit::AdmitNow
    );
    drop((hog, both));
}

#[test]
fn a_queued_request_keeps_its_own_observe_at_the_head() {
    // Budget enforced and short, calls shadowed by the request: it queues for the budget;
    // at the head the dispatcher still lets its calls dimension through.
    let bh = Bulkhead::new(Config {
        max_concurrent: 1,
        max_queue: 4,
        budget: Some(10),
        ..Config::DEFAULT
    })
    .unwrap();
    let Decision::Granted(hog) = bh.admit(&Request::new(1).cost(10), None) else {
        panic!()
    };
    let Decision::Queued(mut w) =
        bh.admit(&Request::new(1).cost(5).observe(Observe::Concurrency), None)
    else {
        panic!()
    };
    // The hog returns its budget but keeps its permit: the waiter fits the budget, not the
    // calls limit, which it shadows.
    let mut hog = hog;
    hog.refund(10).unwrap();
    let core::task::Poll::Ready(Ok(got)) = w.poll(None) else {
        panic!("the request's own observe was lost in the queue")
    };
    assert_eq!(bh.stats().active, 2);
    assert_eq!(
        bh.stats().observed_by_reason.get(Reason::ConcurrencyLimit),
        1
    );
    drop((got, hog));
}

#[test]
fn reconfigurations_are_events_with_the_revision() {
    let (bh, log, _) = observed(Config {
        max_concurrent: 4,
        ..Config::DEFAULT
    });
    bh.set_limit(2).unwrap();
    bh.apply_limits(&LimitsSnapshot::new(7).limit(3)).unwrap();
    bh.set_observe(Observe::Concurrency).unwrap();
    let a = bh.try_acquire(1).unwrap();
    assert_eq!(
        log.take(),
        [
            "reconfigure rev=0 limit=2 budget=None off",
            "reconfigure rev=7 limit=3 budget=None off",
            "reconfigure rev=7 limit=3 budget=None concurrency",
            "admit 1 w=1 c=0 queued=false wait=0 rev=7",
        ]
    );
    drop(a);
}

#[test]
fn a_panicking_observer_is_contained_and_counted() {
    struct Boom;
    impl Observer for Boom {
        fn on_event(&self, _: &Event<'_>) {
            panic!("observer bug");
        }
    }
    let bh = Bulkhead::with_observer(
        Config {
            max_concurrent: 1,
            ..Config::DEFAULT
        },
        ClockSource::None,
        Some(Arc::new(Boom)),
        None,
    )
    .unwrap();
    let a = bh.try_acquire(1).unwrap();
    drop(a);
    let s = bh.stats();
    assert_eq!((s.active, s.available, s.admitted_total), (0, 1, 1));
    assert_eq!(s.observer_panics, 2, "the admit and the release");
}

#[test]
fn no_observer_no_ids() {
    let bh = Bulkhead::new(Config::default()).unwrap();
    let a = bh.try_acquire(1).unwrap();
    let Decision::Granted(b) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!((a.call().id(), b.call().id()), (0, 0));
    assert_eq!(bh.stats().observer_panics, 0);
}

#[test]
fn event_kinds_have_one_name_each() {
    let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(
        names,
        [
            "state_change",
            "admit",
            "reject",
            "observe_bypass",
            "release",
            "usage",
            "reconfigure",
            "shed"
        ]
    );
    for (i, k) in EventKind::ALL.iter().enumerate() {
        assert_eq!(*k as usize, i);
    }
}

#[test]
fn a_timed_out_call_still_reports_its_release_and_circuit_open_is_a_reject() {
    use crate::{Resilience, breaker::BreakerConfig};
    let log = Arc::new(Log::default());
    let clock = Arc::new(Manual(AtomicU64::new(1_000)));
    let bh = Bulkhead::with_observer(
        Config {
            max_concurrent: 2,
            resilience: Resilience {
                breaker: Some(BreakerConfig {
                    failure_threshold: 1,
                    ..BreakerConfig::DEFAULT
                }),
                ..Resilience::OFF
            },
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock),
        Some(log.clone()),
        None,
    )
    .unwrap();
    let mut a = bh.try_acquire(1).unwrap();
    assert!(a.timed_out()); // a failure: the breaker trips
    drop(a);
    assert!(bh.try_acquire(1).is_err());
    let lines = log.take();
    assert_eq!(lines[0], "admit 1 w=1 c=0 queued=false wait=0 rev=0");
    assert_eq!(lines[1], "state_change");
    assert_eq!(lines[2], "release 1 w=1 held=0 used=Some(0) ended=true");
    assert_eq!(lines[3], "reject 2 circuit_open queued=false wait=0");
}

#[test]
fn an_observer_of_state_changes_only_keeps_the_plain_path() {
    struct Transitions(Mutex<Vec<String>>);
    impl Observer for Transitions {
        fn admission_events(&self) -> bool {
            false
        }
        fn on_event(&self, e: &Event<'_>) {
            self.0.lock().unwrap().push(e.name().to_string());
        }
    }
    let log = Arc::new(Transitions(Mutex::new(Vec::new())));
    let plain = Bulkhead::with_observer(
        Config::default(),
        ClockSource::None,
        Some(log.clone()),
        None,
    )
    .unwrap();
    assert!(
        !plain.has_policies(),
        "no guarded path for a state-change observer"
    );
    let a = plain.try_acquire(1).unwrap();
    assert_eq!(a.call().id(), 0);
    drop(a);
    plain.set_limit(3).unwrap();
    assert!(log.0.lock().unwrap().is_empty(), "no admission events");
    // With a breaker the transitions still arrive.
    use crate::{Resilience, breaker::BreakerConfig};
    let guarded = Bulkhead::with_observer(
        Config {
            resilience: Resilience {
                breaker: Some(BreakerConfig {
                    failure_threshold: 1,
                    ..BreakerConfig::DEFAULT
                }),
                ..Resilience::OFF
            },
            ..Config::DEFAULT
        },
        ClockSource::None,
        Some(log.clone()),
        None,
    )
    .unwrap();
    let c = guarded.try_acquire(1).unwrap();
    c.end(Outcome::Failure);
    assert_eq!(*log.0.lock().unwrap(), ["state_change"]);
}

/// Found by review: a queued settlement's `decision_ns` was the absolute clock; no
/// `observe_bypass` came for a waiter granted through an observed dimension; a call whose
/// outcome `timed_out` recorded lost its `release` after a round trip through its parts.
#[test]
fn review_queued_events_have_no_decision_time_and_keep_their_bypass() {
    struct Times(Mutex<Vec<String>>);
    impl Observer for Times {
        fn on_event(&self, e: &Event<'_>) {
            let line = match *e {
                Event::Admit {
                    id,
                    queued,
                    decision_ns,
                    ..
                } => std::format!("admit {id} queued={queued} decision={decision_ns}"),
                Event::ObserveBypass { id, reason, .. } => {
                    std::format!("bypass {id} {}", reason.as_str())
                }
                Event::Release { id, ended, .. } => std::format!("release {id} ended={ended}"),
                _ => return,
            };
            self.0.lock().unwrap().push(line);
        }
    }
    let log = Arc::new(Times(Mutex::new(Vec::new())));
    let clock = Arc::new(Manual(AtomicU64::new(1_000_000_000)));
    let bh = Bulkhead::with_observer(
        Config {
            max_concurrent: 1,
            max_queue: 2,
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock),
        Some(log.clone()),
        None,
    )
    .unwrap();
    let h = bh.try_acquire(1).unwrap();
    let Decision::Queued(mut w) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    bh.set_observe(Observe::Concurrency).unwrap(); // grants the waiter through the calls
    let core::task::Poll::Ready(Ok(c)) = w.poll(None) else {
        panic!()
    };
    drop((c, h));
    let lines = log.0.lock().unwrap().clone();
    assert_eq!(lines[0], "admit 1 queued=false decision=0");
    assert_eq!(lines[1], "bypass 2 concurrency_limit");
    assert_eq!(lines[2], "admit 2 queued=true decision=0");
    // timed_out, then a round trip through the parts: the release still comes.
    log.0.lock().unwrap().clear();
    let mut a = bh.try_acquire(1).unwrap();
    assert!(a.timed_out());
    let (b, w, call) = a.into_parts();
    drop(crate::Call::from_parts(b, w, call));
    let lines = log.0.lock().unwrap().clone();
    assert_eq!(
        lines.last().map(std::string::String::as_str),
        Some("release 3 ended=true")
    );
}

#[test]
fn review_the_raw_pair_sweeps_and_a_commit_keeps_its_reserves_revision() {
    let clock = Arc::new(Manual(AtomicU64::new(1_000)));
    let bh = Bulkhead::with_clock(
        Config {
            max_concurrent: 1,
            max_queue: 2,
            max_reservations: 2,
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let r = bh
        .reserve(&Request::new(1), core::time::Duration::from_nanos(10))
        .unwrap();
    clock.0.fetch_add(10, SeqCst);
    // The raw pair sees the expired reservation's unit free.
    bh.try_acquire_units(1).unwrap();
    bh.release_units(1);
    assert!(r.commit().is_err());
    let r = bh
        .reserve(&Request::new(1), core::time::Duration::MAX)
        .unwrap();
    bh.apply_limits(&LimitsSnapshot::new(5).limit(1)).unwrap();
    let c = r.commit().unwrap();
    assert_eq!(c.revision(), 0, "the reserve's revision, not the commit's");
}

#[test]
fn a_shedding_arrival_reports_its_victim_and_the_victim_its_rejection() {
    use crate::{
        config::classes::{ClassSpec, ClassTable},
        tests::budget::{granted, poll_granted, queued},
    };
    let classes = [
        ClassSpec {
            priority: 10,
            ..ClassSpec::DEFAULT
        },
        ClassSpec::DEFAULT,
    ];
    let log = Arc::new(Log::default());
    let bh = Bulkhead::with_classes_and_observer(
        Config {
            max_concurrent: 1,
            max_queue: 2,
            ..Config::DEFAULT
        },
        &ClassTable {
            shed: true,
            ..ClassTable::new(&classes)
        },
        ClockSource::None,
        Some(log.clone()),
    )
    .unwrap();
    let held = granted(bh.admit(&Request::new(1).class(1).no_wait(), None));
    let mut a = queued(bh.admit(&Request::new(1).class(1), None));
    let mut b = queued(bh.admit(&Request::new(1).class(1), None));
    log.take();
    // The queue is full: a priority-10 arrival (id 4) takes the youngest batch waiter's (id 3).
    let mut hi = queued(bh.admit(&Request::new(1), None));
    assert_eq!(log.take(), ["shed 4 class=0 victim=3 victim_class=1"]);
    assert!(matches!(
        b.poll(None),
        core::task::Poll::Ready(Err(e)) if e.reason() == Some(Reason::Shed)
    ));
    assert_eq!(log.take(), ["reject 3 shed queued=true wait=0"]);
    // A plain queued waiter in a reused cell reports no shed.
    drop(held);
    let h = poll_granted(&mut hi).unwrap();
    drop(h);
    let x = poll_granted(&mut a).unwrap();
    let mut c = queued(bh.admit(&Request::new(1).class(1), None));
    let mut d = queued(bh.admit(&Request::new(1).class(1), None));
    assert!(log.take().iter().all(|l| !l.starts_with("shed")));
    drop(x);
    drop(poll_granted(&mut c).unwrap());
    drop(poll_granted(&mut d).unwrap());
}

#[test]
fn class_ceilings_and_the_class_table_at_run_time_are_reconfigurations() {
    use crate::{
        ClassTableLimits,
        config::classes::{ClassSpec, ClassTable, PriorityReserve},
    };
    let classes = [ClassSpec::DEFAULT, ClassSpec::DEFAULT];
    let log = Arc::new(Log::default());
    let bh = Bulkhead::with_classes_and_observer(
        Config {
            max_concurrent: 4,
            ..Config::DEFAULT
        },
        &ClassTable::new(&classes),
        ClockSource::None,
        Some(log.clone()),
    )
    .unwrap();
    bh.set_class_ceiling(1, Some(2), None).unwrap();
    let table = ClassTableLimits {
        reserve: Some(PriorityReserve {
            permits: 1,
            budget: 0,
            min_priority: 1,
        }),
        ..ClassTableLimits::NONE
    };
    bh.apply_limits_with_table(&LimitsSnapshot::new(3), &table)
        .unwrap();
    assert_eq!(
        log.take(),
        [
            "reconfigure rev=0 limit=4 budget=None off",
            "reconfigure rev=3 limit=4 budget=None off",
        ]
    );
}
