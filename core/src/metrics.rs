//! The metric table (docs/design.md §8.3): the names, kinds, units, labels and help texts every
//! exporter publishes — Python's `prometheus_client` collector and OpenTelemetry binding,
//! Node's `prom-client` collector and `@opentelemetry/api` binding — and [`visit`], which walks
//! one bulkhead's [`Stats`] (and its classes) into samples of that table. The exporters only
//! marshal: they add the `key` label (the registry key, or the name a user gave the bulkhead),
//! map class indices to class names, and hand the samples to their library.
//!
//! | metric | kind | labels | from |
//! |---|---|---|---|
//! | `hullguard_in_flight` | gauge | key, class, dimension | `active`; the budget's `in_use`; a class's `in_flight` / `budget_in_use` |
//! | `hullguard_queued` | gauge | key, class | `queued`; a class's `queued` |
//! | `hullguard_limit` | gauge | key, class, dimension | `limit`; the budget's `limit`; a class's ceilings |
//! | `hullguard_admitted_total` | counter | key | `admitted_total` |
//! | `hullguard_rejected_total` | counter | key, reason | `rejected_by_reason` (every reason, zeros too) |
//! | `hullguard_queue_wait_seconds` | histogram | key | `queue_wait_histogram`, `queue_wait_sum_ns`, `queue_wait_count` |
//! | `hullguard_circuit_state` | gauge | key | the breaker's state: 0 closed, 1 open, 2 half-open (with a breaker) |
//! | `hullguard_budget_in_use` | gauge | key, class | the budget's `in_use`; a class's `budget_in_use` (with a budget) |
//! | `hullguard_orphaned_in_flight` | gauge | key | `orphaned_in_flight` |
//!
//! A sample without a class is the bulkhead's total: its `class` label is empty (`""`, which
//! Prometheus reads as absent), so `{class=""}` selects totals and `{class!=""}` the classes.
//! Per-class samples are written only for a bulkhead of two classes or more (a one-class table
//! — the one load shedding or CoDel builds — would repeat the total). `dimension` is `"calls"`
//! or `"budget"`. Label cardinality: per bulkhead, one series per reason, per class and
//! dimension; a registry's keys are bounded by its `max_keys` (an evicted key's series go
//! when the exporter next collects).

use crate::{
    circuit::CircuitState,
    reason::Reason,
    stats::{ClassStats, Stats, WAIT_BUCKETS, WaitHistogram},
};

/// A metric's type, as Prometheus and OpenTelemetry name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A value that goes up and down (OpenTelemetry: an observable gauge).
    Gauge,
    /// A monotonic total (OpenTelemetry: an observable counter).
    Counter,
    /// Counts per bucket with a sum (OpenTelemetry: a synchronous histogram, since it has no
    /// observable one).
    Histogram,
}

impl MetricKind {
    /// `"gauge"`, `"counter"`, `"histogram"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One row of the metric table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The exposition name (`hullguard_in_flight`); a counter's includes `_total`.
    pub name: &'static str,
    /// Its type.
    pub kind: MetricKind,
    /// Its unit: `"seconds"` for the wait histogram, `""` for counts.
    pub unit: &'static str,
    /// Its label names, `key` first.
    pub labels: &'static [&'static str],
    /// One line of help.
    pub help: &'static str,
}

/// `hullguard_in_flight`.
pub const IN_FLIGHT: Metric = Metric {
    name: "hullguard_in_flight",
    kind: MetricKind::Gauge,
    unit: "",
    labels: &["key", "class", "dimension"],
    help: "Units held by admitted calls (dimension calls: permits; budget: budget units)",
};
/// `hullguard_queued`.
pub const QUEUED: Metric = Metric {
    name: "hullguard_queued",
    kind: MetricKind::Gauge,
    unit: "",
    labels: &["key", "class"],
    help: "Live waiters in the queue",
};
/// `hullguard_limit`.
pub const LIMIT: Metric = Metric {
    name: "hullguard_limit",
    kind: MetricKind::Gauge,
    unit: "",
    labels: &["key", "class", "dimension"],
    help: "The limit in force (a class: its ceiling)",
};
/// `hullguard_admitted_total`.
pub const ADMITTED: Metric = Metric {
    name: "hullguard_admitted_total",
    kind: MetricKind::Counter,
    unit: "",
    labels: &["key"],
    help: "Admissions granted, at once or after queueing",
};
/// `hullguard_rejected_total`.
pub const REJECTED: Metric = Metric {
    name: "hullguard_rejected_total",
    kind: MetricKind::Counter,
    unit: "",
    labels: &["key", "reason"],
    help: "Admissions refused, by reason",
};
/// `hullguard_queue_wait_seconds`.
pub const QUEUE_WAIT: Metric = Metric {
    name: "hullguard_queue_wait_seconds",
    kind: MetricKind::Histogram,
    unit: "seconds",
    labels: &["key"],
    help: "Queue wait of granted waiters, enqueue to grant",
};
/// `hullguard_circuit_state`.
pub const CIRCUIT_STATE: Metric = Metric {
    name: "hullguard_circuit_state",
    kind: MetricKind::Gauge,
    unit: "",
    labels: &["key"],
    help: "Circuit breaker state: 0 closed, 1 open, 2 half-open",
};
/// `hullguard_budget_in_use`.
pub const BUDGET_IN_USE: Metric = Metric {
    name: "hullguard_budget_in_use",
    kind: MetricKind::Gauge,
    unit: "",
    labels: &["key", "class"],
    help: "Budget units held by admitted calls",
};
/// `hullguard_orphaned_in_flight`.
pub const ORPHANED: Metric = Metric {
    name: "hullguard_orphaned_in_flight",
    kind: MetricKind::Gauge,
    unit: "",
    labels: &["key"],
    help: "Permits of orphaned calls whose work goes on",
};

/// Every metric, in the order [`visit`] writes them.
pub const METRICS: [Metric; 9] = [
    IN_FLIGHT,
    QUEUED,
    LIMIT,
    ADMITTED,
    REJECTED,
    QUEUE_WAIT,
    CIRCUIT_STATE,
    BUDGET_IN_USE,
    ORPHANED,
];

/// The labels of one sample besides `key` (which the exporter adds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricLabels {
    /// The class index; `None` for the bulkhead's total (label `""`).
    pub class: Option<u16>,
    /// `"calls"` or `"budget"`, for the metrics that have a dimension.
    pub dimension: Option<&'static str>,
    /// The reason, for `hullguard_rejected_total`.
    pub reason: Option<Reason>,
}

/// The wait histogram as an exporter takes it: cumulative counts per upper bound in seconds
/// (the last bound is `f64::INFINITY`), the sum in seconds and the count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistogramSample {
    /// `(upper bound in seconds, waits at or below it)`, in increasing order.
    pub buckets: [(f64, u64); WAIT_BUCKETS],
    /// The waits' total, in seconds.
    pub sum: f64,
    /// How many waits (the last bucket's cumulative count).
    pub count: u64,
}

impl HistogramSample {
    /// The cumulative form of `h`, with `sum_ns` of waits.
    pub fn of(h: &WaitHistogram, sum_ns: u64) -> Self {
        let mut buckets = [(0.0, 0); WAIT_BUCKETS];
        let mut total = 0u64;
        for (i, (b, n)) in buckets.iter_mut().zip(h.0.iter()).enumerate() {
            total += n;
            let bound = match WaitHistogram::bound_ns(i) {
                Some(ns) => ns as f64 / 1e9,
                None => f64::INFINITY,
            };
            *b = (bound, total);
        }
        HistogramSample {
            buckets,
            sum: sum_ns as f64 / 1e9,
            count: total,
        }
    }
}

/// Where [`visit`] writes samples.
pub trait MetricSink {
    /// A gauge's or counter's value.
    fn sample(&mut self, metric: &'static Metric, labels: MetricLabels, value: f64);
    /// The wait histogram.
    fn histogram(&mut self, metric: &'static Metric, labels: MetricLabels, h: &HistogramSample);
}

const CALLS: Option<&str> = Some("calls");
const BUDGET: Option<&str> = Some("budget");

/// Walks one bulkhead's `stats` and its `classes` (every class's [`ClassStats`], in index
/// order; empty without classes) into `sink`, in table order.
pub fn visit(stats: &Stats, classes: &[ClassStats], sink: &mut (impl MetricSink + ?Sized)) {
    let total = MetricLabels::default();
    let dim = |dimension, class| MetricLabels {
        class,
        dimension,
        reason: None,
    };
    let per_class = if classes.len() >= 2 { classes } else { &[] };
    let budget = stats.budget.as_ref();

    sink.sample(&IN_FLIGHT, dim(CALLS, None), stats.active as f64);
    if let Some(b) = budget {
        sink.sample(&IN_FLIGHT, dim(BUDGET, None), b.in_use as f64);
    }
    for c in per_class {
        sink.sample(&IN_FLIGHT, dim(CALLS, Some(c.class)), c.in_flight as f64);
        if budget.is_some() {
            sink.sample(
                &IN_FLIGHT,
                dim(BUDGET, Some(c.class)),
                c.budget_in_use as f64,
            );
        }
    }
    sink.sample(&QUEUED, total, stats.queued as f64);
    for c in per_class {
        sink.sample(&QUEUED, dim(None, Some(c.class)), c.queued as f64);
    }
    sink.sample(&LIMIT, dim(CALLS, None), stats.limit as f64);
    if let Some(b) = budget {
        sink.sample(&LIMIT, dim(BUDGET, None), b.limit as f64);
    }
    for c in per_class {
        sink.sample(&LIMIT, dim(CALLS, Some(c.class)), c.ceiling as f64);
        if budget.is_some() {
            sink.sample(&LIMIT, dim(BUDGET, Some(c.class)), c.budget_ceiling as f64);
        }
    }
    sink.sample(&ADMITTED, total, stats.admitted_total as f64);
    for (reason, n) in stats.rejected_by_reason.iter() {
        let labels = MetricLabels {
            reason: Some(reason),
            ..total
        };
        sink.sample(&REJECTED, labels, n as f64);
    }
    sink.histogram(
        &QUEUE_WAIT,
        total,
        &HistogramSample::of(&stats.queue_wait_histogram, stats.queue_wait_sum_ns),
    );
    if let Some(c) = &stats.circuit {
        let state = match c.state {
            CircuitState::Closed => 0.0,
            CircuitState::Open => 1.0,
            CircuitState::HalfOpen => 2.0,
        };
        sink.sample(&CIRCUIT_STATE, total, state);
    }
    if let Some(b) = budget {
        sink.sample(&BUDGET_IN_USE, total, b.in_use as f64);
        for c in per_class {
            sink.sample(
                &BUDGET_IN_USE,
                dim(None, Some(c.class)),
                c.budget_in_use as f64,
            );
        }
    }
    sink.sample(&ORPHANED, total, stats.orphaned_in_flight as f64);
}
