//! The metric table and its walker (docs/design.md §8.3): every sample of a bulkhead with
//! classes, a budget and a breaker; the table's shape; C35 (`../shared/cases/CASES.md`) through
//! the exported wait histogram and the waiting gauge, on an injected clock.

use core::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::{collections::BTreeMap, string::String, sync::Arc, vec::Vec};

use crate::{
    Bulkhead, ClockSource, Config, Decision, METRICS, Metric, MetricKind, MetricLabels, MetricSink,
    Reason, Request,
    config::{ClassSpec, ClassTable},
    metrics::HistogramSample,
    policy::{breaker::BreakerConfig, resilience::Resilience},
};

/// Samples keyed `name{class,dimension,reason}`, histograms kept whole.
#[derive(Default)]
struct Collect {
    values: BTreeMap<String, f64>,
    histograms: BTreeMap<String, HistogramSample>,
    order: Vec<&'static str>,
}

fn key(m: &Metric, l: MetricLabels) -> String {
    std::format!(
        "{}{{{},{},{}}}",
        m.name,
        l.class.map_or(String::new(), |c| std::format!("{c}")),
        l.dimension.unwrap_or(""),
        l.reason.map_or("", |r| r.as_str())
    )
}

impl MetricSink for Collect {
    fn sample(&mut self, m: &'static Metric, l: MetricLabels, v: f64) {
        assert!(m.kind != MetricKind::Histogram);
        if self.order.last() != Some(&m.name) {
            self.order.push(m.name);
        }
        assert!(self.values.insert(key(m, l), v).is_none(), "a sample twice");
    }
    fn histogram(&mut self, m: &'static Metric, l: MetricLabels, h: &HistogramSample) {
        assert_eq!(m.kind, MetricKind::Histogram);
        self.order.push(m.name);
        self.histograms.insert(key(m, l), *h);
    }
}

fn collect(bh: &Bulkhead) -> Collect {
    let mut c = Collect::default();
    bh.metrics(&mut c);
    c
}

#[test]
fn the_table_names_every_metric_once_with_key_first() {
    let names: Vec<_> = METRICS.iter().map(|m| m.name).collect();
    assert_eq!(
        names,
        [
            "hullguard_in_flight",
            "hullguard_queued",
            "hullguard_limit",
            "hullguard_admitted_total",
            "hullguard_rejected_total",
            "hullguard_queue_wait_seconds",
            "hullguard_circuit_state",
            "hullguard_budget_in_use",
            "hullguard_orphaned_in_flight",
        ]
    );
    for m in METRICS {
        assert_eq!(m.labels[0], "key", "{}", m.name);
        assert_eq!(m.name.ends_with("_total"), m.kind == MetricKind::Counter);
        assert_eq!(m.unit == "seconds", m.name.ends_with("_seconds"));
        assert!(!m.help.is_empty());
    }
}

#[test]
fn a_classed_bulkhead_with_a_budget_and_a_breaker_exports_every_metric() {
    let classes = [
        ClassSpec {
            priority: 10,
            floor: 1,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            ceiling: Some(3),
            ..ClassSpec::DEFAULT
        },
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 4,
            budget: Some(100),
            resilience: Resilience {
                breaker: Some(BreakerConfig::default()),
                ..Resilience::OFF
            },
            ..Config::DEFAULT
        },
        &ClassTable::new(&classes),
        ClockSource::default_for_host(),
    )
    .unwrap();
    let Decision::Granted(a) = bh.admit(&Request::new(1).cost(30).class(1), None) else {
        panic!()
    };
    let Decision::Granted(b) = bh.admit(&Request::new(2).cost(10).class(0), None) else {
        panic!()
    };
    let refused = bh.admit(&Request::new(1).cost(90).class(1).no_wait(), None);
    assert!(matches!(refused, Decision::Rejected(_)));
    let c = collect(&bh);
    let v = |k: &str| *c.values.get(k).unwrap_or_else(|| panic!("no {k}"));
    assert_eq!(v("hullguard_in_flight{,calls,}"), 3.0);
    assert_eq!(v("hullguard_in_flight{,budget,}"), 40.0);
    assert_eq!(v("hullguard_in_flight{0,calls,}"), 2.0);
    assert_eq!(v("hullguard_in_flight{1,calls,}"), 1.0);
    assert_eq!(v("hullguard_in_flight{1,budget,}"), 30.0);
    assert_eq!(v("hullguard_queued{,,}"), 0.0);
    assert_eq!(v("hullguard_limit{,calls,}"), 4.0);
    assert_eq!(v("hullguard_limit{,budget,}"), 100.0);
    assert_eq!(v("hullguard_limit{1,calls,}"), 3.0);
    assert_eq!(v("hullguard_admitted_total{,,}"), 2.0);
    assert_eq!(v("hullguard_rejected_total{,,budget_limit}"), 1.0);
    assert_eq!(
        v("hullguard_rejected_total{,,shed}"),
        0.0,
        "zeros are exported"
    );
    let reasons = c
        .values
        .keys()
        .filter(|k| k.starts_with("hullguard_rejected_total"))
        .count();
    assert_eq!(reasons, Reason::COUNT);
    assert_eq!(v("hullguard_circuit_state{,,}"), 0.0);
    assert_eq!(v("hullguard_budget_in_use{,,}"), 40.0);
    assert_eq!(v("hullguard_budget_in_use{0,,}"), 10.0);
    assert_eq!(v("hullguard_orphaned_in_flight{,,}"), 0.0);
    // In table order, every metric.
    assert_eq!(c.order, METRICS.map(|m| m.name));
    drop((a, b));
}

#[test]
fn a_plain_bulkhead_leaves_out_classes_budget_and_breaker() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 2,
        ..Config::DEFAULT
    })
    .unwrap();
    let c = collect(&bh);
    assert!(!c.order.contains(&"hullguard_circuit_state"));
    assert!(!c.order.contains(&"hullguard_budget_in_use"));
    assert!(c.values.keys().all(|k| !k.contains("budget,")));
    assert!(
        c.values.keys().all(|k| k.contains("{,")),
        "no class samples"
    );
    // A one-class table (load shedding builds one) repeats nothing either.
    let shedding = Bulkhead::new(Config {
        shed_cpu_threshold: 0.5,
        ..Config::DEFAULT
    })
    .unwrap();
    assert!(collect(&shedding).values.keys().all(|k| k.contains("{,")));
}

struct Manual(AtomicU64);
impl crate::Clock for Manual {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

/// C35 through the exporters' walker: the histogram's count / sum / buckets, and the waiting
/// gauge at every step (1 from 10 to 20 ms, 2 from 20 to 70, 1 from 70 to 100, then 0).
#[test]
fn c35_queue_wait_metrics() {
    const MS: u64 = 1_000_000;
    let clock = Arc::new(Manual(AtomicU64::new(0)));
    let set = |ms: u64| clock.0.store(ms * MS, SeqCst);
    let bh = Bulkhead::with_clock(
        Config {
            max_concurrent: 1,
            max_queue: 10,
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let queued = |bh: &Bulkhead| collect(bh).values["hullguard_queued{,,}"];
    let wait = |bh: &Bulkhead| collect(bh).histograms["hullguard_queue_wait_seconds{,,}"];
    let h = bh.try_acquire(1).unwrap();
    assert_eq!(queued(&bh), 0.0);
    set(10);
    let Decision::Queued(mut w1) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(queued(&bh), 1.0);
    set(20);
    let Decision::Queued(w2) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(queued(&bh), 2.0);
    set(70);
    bh.expire(w2.ticket(), Reason::Timeout).unwrap();
    drop(w2);
    assert_eq!(
        queued(&bh),
        1.0,
        "the timed-out waiter left the gauge at once"
    );
    assert_eq!(wait(&bh).count, 0, "a timed-out wait is not a granted wait");
    set(100);
    drop(h);
    assert_eq!(queued(&bh), 0.0);
    let core::task::Poll::Ready(Ok(g1)) = w1.poll(None) else {
        panic!()
    };
    let hist = wait(&bh);
    assert_eq!((hist.count, hist.sum), (1, 0.09), "W1 waited exactly 90 ms");
    // 90 ms lies in [2^26, 2^27) ns: every bucket from 2^27 ns (0.134 s) up counts it.
    for (bound, n) in hist.buckets {
        assert_eq!(n, u64::from(bound > 0.09), "bucket {bound}");
    }
    assert_eq!(hist.buckets[27].0, f64::INFINITY);
    set(200);
    drop(g1);
    // Step 3: W3 acquires with a permit free and nobody queued: no wait is recorded.
    set(300);
    let w3 = bh.try_acquire(1).unwrap();
    drop(w3);
    let hist = wait(&bh);
    assert_eq!((hist.count, hist.sum), (1, 0.09));
}
