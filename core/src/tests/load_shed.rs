//! Load shedding by overload signals (docs/design.md §4.11): non-critical classes are refused
//! `shed` (bound `overload`) while a signal is over its threshold; critical ones pass while
//! capacity is left; every path that admits (admit, try_acquire, the dry run, reserve) agrees;
//! the refusal is counted once and reported in `stats().load`.

use core::time::Duration;

use crate::{
    AcquireError, Bound, Bulkhead, ClockSource, Config, ConfigError, Decision, LoadSignal, Reason,
    Request, WouldAdmit,
    config::{ClassSpec, ClassTable, OptionId},
};

const CRITICAL: u16 = 0;
const NORMAL: u16 = 1;
const BATCH: u16 = 2;

fn gateway(config: Config) -> Bulkhead {
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
    Bulkhead::with_classes(config, &ClassTable::new(&classes), ClockSource::None).unwrap()
}

fn shed_config() -> Config {
    Config {
        max_concurrent: 2,
        max_queue: 4,
        shed_lag_threshold: Duration::from_millis(50),
        shed_cpu_threshold: 0.8,
        critical_priority: 10,
        ..Config::DEFAULT
    }
}

fn reason(d: &Decision<&Bulkhead, 0>) -> Option<Reason> {
    match d {
        Decision::Rejected(e) => e.reason(),
        _ => None,
    }
}

#[test]
fn under_the_thresholds_nobody_is_shed() {
    let bh = gateway(shed_config());
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_millis(50))); // at, not over
    bh.report_load(LoadSignal::Cpu(0.8));
    let a = bh.admit(&Request::new(1).class(BATCH), None);
    assert!(matches!(a, Decision::Granted(_)));
    let l = bh.stats().load.unwrap();
    assert_eq!(
        (
            l.event_loop_lag_ns,
            l.cpu_permille,
            l.overloaded,
            l.shed_total
        ),
        (50_000_000, 800, 0, 0)
    );
}

#[test]
fn an_overload_signal_sheds_non_critical_classes_and_lets_critical_pass() {
    let bh = gateway(shed_config());
    bh.report_load(LoadSignal::Cpu(0.95));
    for class in [NORMAL, BATCH] {
        let d = bh.admit(&Request::new(1).class(class), None);
        let Decision::Rejected(AcquireError::Rejected(r)) = d else {
            panic!("class {class} not shed: {d:?}")
        };
        let detail = r.detail();
        assert_eq!(
            (detail.reason, detail.bound, detail.class.unwrap().class),
            (Reason::Shed, Bound::Overload, class)
        );
        assert_eq!((detail.http_status(), detail.retry_after), (503, None));
    }
    // Critical passes while capacity is left, then the limits decide as always (it queues).
    let c1 = bh.admit(&Request::new(1).class(CRITICAL), None);
    let c2 = bh.admit(&Request::new(1).class(CRITICAL), None);
    assert!(matches!(
        (&c1, &c2),
        (Decision::Granted(_), Decision::Granted(_))
    ));
    let c3 = bh.admit(&Request::new(1).class(CRITICAL), None);
    assert!(matches!(c3, Decision::Queued(_)));
    let c4 = bh.admit(&Request::new(1).class(CRITICAL).no_wait(), None);
    assert_eq!(reason(&c4), Some(Reason::ConcurrencyLimit));
    let s = bh.stats();
    assert_eq!(s.rejected_by_reason.get(Reason::Shed), 2);
    assert_eq!(s.load.unwrap().shed_total, 2);
    assert_eq!(s.load.unwrap().overloaded, 1);
    drop((c1, c2, c3));
    // The signal falls: the non-critical classes are admitted again.
    bh.report_load(LoadSignal::Cpu(0.3));
    assert!(matches!(
        bh.admit(&Request::new(1).class(BATCH), None),
        Decision::Granted(_)
    ));
    assert_eq!(bh.stats().load.unwrap().overloaded, 0);
}

#[test]
fn either_signal_sheds_and_both_must_fall() {
    let bh = gateway(shed_config());
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_millis(120)));
    bh.report_load(LoadSignal::Cpu(2.0));
    let shed = |bh: &Bulkhead| {
        reason(&bh.admit(&Request::new(1).class(BATCH).no_wait(), None)) == Some(Reason::Shed)
    };
    assert!(shed(&bh));
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_millis(1)));
    assert!(shed(&bh), "the CPU is still over");
    bh.report_load(LoadSignal::Cpu(f64::NAN)); // a bad reading counts as 0
    assert!(!shed(&bh));
    assert_eq!(bh.stats().load.unwrap().cpu_permille, 0);
}

#[test]
fn a_signal_without_a_threshold_is_recorded_and_never_sheds() {
    let bh = gateway(Config {
        shed_lag_threshold: Duration::ZERO,
        ..shed_config()
    });
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_secs(5)));
    assert!(matches!(
        bh.admit(&Request::new(1).class(BATCH), None),
        Decision::Granted(_)
    ));
    assert_eq!(
        bh.stats().load.unwrap().event_loop_lag_ns,
        5_000_000_000,
        "recorded"
    );
}

#[test]
fn every_admitting_path_agrees_and_the_dry_run_counts_nothing() {
    let bh = gateway(shed_config());
    bh.report_load(LoadSignal::Cpu(1.0));
    let dry = bh.would_admit(&Request::new(1).class(BATCH));
    assert_eq!(dry.reason(), Some(Reason::Shed));
    let WouldAdmit::Reject(AcquireError::Rejected(r)) = dry else {
        panic!()
    };
    assert_eq!(r.detail().bound, Bound::Overload);
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::Shed), 0);
    assert_eq!(
        bh.would_admit(&Request::new(1).class(CRITICAL)),
        WouldAdmit::AdmitNow
    );
    // try_acquire is class 0 — critical here. (Reservations take no classes yet, so no
    // load-shedding bulkhead has them; `reserve` admits through `admit` anyway.)
    assert!(bh.try_acquire(1).is_ok());
    assert_eq!(bh.stats().load.unwrap().shed_total, 0);
}

#[test]
fn a_bulkhead_without_classes_gets_one_non_critical_class() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 2,
        shed_cpu_threshold: 0.5,
        ..Config::DEFAULT
    })
    .unwrap();
    assert_eq!(bh.class_count(), 1);
    assert!(bh.try_acquire(1).is_ok());
    bh.report_load(LoadSignal::Cpu(0.9));
    let e = bh.try_acquire(1).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Shed));
    // With critical_priority 0 every class is critical: signals never shed.
    let all_critical = Bulkhead::new(Config {
        shed_cpu_threshold: 0.5,
        critical_priority: 0,
        ..Config::DEFAULT
    })
    .unwrap();
    all_critical.report_load(LoadSignal::Cpu(0.9));
    assert!(all_critical.try_acquire(1).is_ok());
}

/// Found by the `c_abi` fuzz target (issue 21): the one-class table a bulkhead that sheds by
/// queue delay or by load gets refuses `enabled = false`, an observe mode, an adaptive limit and
/// reservations, but only when the bulkhead was built; `Config::validate` (what
/// `hg_config_check` and every binding's option parser run) accepted them. Now `validate`
/// refuses each, naming the option that brings the table and the one it does not take, and
/// building answers the same.
#[test]
fn what_the_implied_one_class_table_refuses_is_refused_by_validate() {
    use crate::{Observe, config::Spelling, policy::adaptive::AdaptiveConfig};
    type Set = fn(&mut Config);
    let triggers: [(OptionId, Set); 3] = [
        (OptionId::QueueDelayTarget, |c| {
            c.queue_delay_target = Duration::from_millis(50)
        }),
        (OptionId::ShedLagThreshold, |c| {
            c.shed_lag_threshold = Duration::from_millis(100)
        }),
        (OptionId::ShedCpuThreshold, |c| c.shed_cpu_threshold = 0.9),
    ];
    let conflicts: [(OptionId, Set, &str, &str); 4] = [
        (
            OptionId::Enabled,
            |c| c.enabled = false,
            "enabled set to false",
            "enabled set to false",
        ),
        (
            OptionId::Observe,
            |c| c.observe = Observe::Concurrency,
            "an observe mode",
            "an observe mode",
        ),
        (
            OptionId::AdaptiveAlgorithm,
            |c| c.resilience.adaptive = Some(AdaptiveConfig::for_max_concurrent(8)),
            "resilience.adaptive",
            "adaptive_enabled",
        ),
        (
            OptionId::MaxReservations,
            |c| c.max_reservations = 4,
            "max_reservations above 0",
            "max_reservations above 0",
        ),
    ];
    for (option, trigger) in triggers {
        for (with, conflict, python, c_name) in conflicts {
            let mut c = Config {
                max_concurrent: 8,
                ..Config::DEFAULT
            };
            trigger(&mut c);
            assert!(c.validate().is_ok(), "{option:?} alone");
            conflict(&mut c);
            let e = c.validate().unwrap_err();
            assert_eq!(
                e,
                ConfigError::Conflicts { option, with },
                "{option:?} {with:?}"
            );
            assert_eq!(e.option_id(), Some(option));
            // Building says what checking says (it used to name classes instead).
            let built = Bulkhead::with_clock(c, ClockSource::default_for_host()).unwrap_err();
            assert_eq!(built, e, "{option:?} {with:?}");
            let msg = std::format!("{}", e.spelled(Spelling::Python));
            assert!(
                msg.contains(option.spec().name) && msg.contains(python),
                "{msg}"
            );
            let msg = std::format!("{}", e.spelled(Spelling::C));
            assert!(msg.contains(c_name), "{msg}");
        }
    }
    // Without a trigger, each conflict is a valid bulkhead.
    for (with, conflict, ..) in conflicts {
        let mut c = Config {
            max_concurrent: 8,
            ..Config::DEFAULT
        };
        conflict(&mut c);
        assert!(Bulkhead::new(c).is_ok(), "{with:?} alone");
    }
}

#[test]
fn bad_thresholds_are_refused_by_name() {
    for bad in [-0.1, f64::NAN, 1024.5] {
        let e = Bulkhead::new(Config {
            shed_cpu_threshold: bad,
            ..Config::DEFAULT
        })
        .unwrap_err();
        assert_eq!(e.option_id(), Some(OptionId::ShedCpuThreshold), "{bad}");
    }
    let e = Bulkhead::<8>::try_new_static(Config {
        max_queue: 8,
        shed_cpu_threshold: 0.5,
        ..Config::DEFAULT
    })
    .unwrap_err();
    assert!(matches!(
        e,
        ConfigError::Unsupported(OptionId::ShedLagThreshold)
    ));
}

#[test]
fn the_options_parse_in_every_spelling() {
    use crate::config::{PartialConfig, Section, Spelling, Value, options::find};
    let mut p = PartialConfig::default();
    for (name, v) in [
        (
            "shedLagThresholdMs",
            Value::Duration(Duration::from_millis(40)),
        ),
        ("shedCpuThreshold", Value::Number(0.75)),
        ("criticalPriority", Value::Count(7)),
    ] {
        let o = find(Section::Bulkhead, Spelling::Node, name).unwrap();
        p.set(o.id, v).unwrap();
    }
    let c = p.to_config().unwrap();
    assert_eq!(
        (
            c.shed_lag_threshold,
            c.shed_cpu_threshold,
            c.critical_priority
        ),
        (Duration::from_millis(40), 0.75, 7)
    );
    let o = find(Section::Bulkhead, Spelling::C, "critical_priority").unwrap();
    assert_eq!(o.id, OptionId::CriticalPriority);
}

#[test]
fn the_raw_units_and_polling_apis_are_shed_too() {
    // Review finding: `try_acquire_units` and `enqueue` (and through them the C
    // `hg_bulkhead_try_acquire_units` and the deprecated `enqueue_within`) took class 0
    // without asking the gate.
    let bh = Bulkhead::new(Config {
        max_concurrent: 4,
        shed_cpu_threshold: 0.5,
        ..Config::DEFAULT
    })
    .unwrap();
    bh.report_load(LoadSignal::Cpu(0.9));
    let e = bh.try_acquire_units(1).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Shed));
    let e = bh.enqueue(1, None).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Shed));
    let s = bh.stats();
    assert_eq!((s.active, s.load.unwrap().shed_total), (0, 2));
    bh.report_load(LoadSignal::Cpu(0.1));
    bh.try_acquire_units(1).unwrap();
    bh.release_units(1);
}

#[test]
fn lag_thresholds_beyond_four_seconds_still_fire() {
    // The lag is kept in µs: a u32 word would have saturated ns at 4.29 s, where a larger
    // threshold could never be passed.
    let bh = gateway(Config {
        shed_lag_threshold: Duration::from_secs(10),
        ..shed_config()
    });
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_secs(9)));
    assert!(matches!(
        bh.admit(&Request::new(1).class(BATCH).no_wait(), None),
        Decision::Granted(_)
    ));
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_secs(11)));
    assert_eq!(
        reason(&bh.admit(&Request::new(1).class(BATCH).no_wait(), None)),
        Some(Reason::Shed)
    );
    assert_eq!(bh.stats().load.unwrap().event_loop_lag_ns, 11_000_000_000);
}

#[test]
fn concurrent_reporters_of_one_signal_end_with_the_last_readings_bit() {
    // Review finding: two reporters of one signal could leave the bit of a reading that was
    // overwritten (a stored 0.1 with `overloaded` 1). Each report now re-reads the slot after
    // setting the bit. Bounded: 2 000 rounds of two racing reporters (5 under Miri).
    use std::sync::Arc;
    let bh = Arc::new(gateway(shed_config()));
    let rounds = if cfg!(miri) { 5 } else { 2_000 };
    for round in 0..rounds {
        let (a, b) = (bh.clone(), bh.clone());
        let go = Arc::new(std::sync::Barrier::new(2));
        let (ga, gb) = (go.clone(), go.clone());
        let t = std::thread::spawn(move || {
            ga.wait();
            a.report_load(LoadSignal::Cpu(0.9));
        });
        gb.wait();
        b.report_load(LoadSignal::Cpu(0.1));
        t.join().unwrap();
        let l = bh.stats().load.unwrap();
        let want = u64::from(l.cpu_permille > 800);
        assert_eq!(l.overloaded, want, "round {round}: {l:?}");
    }
}
