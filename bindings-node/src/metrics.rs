//! The metric table and a bulkhead's samples for the exporters of `metrics.js` (`prom-client`,
//! `@opentelemetry/api`; docs/design.md §8.3). The table and the walk are the core's
//! (`hullguard_core::metrics`); this module only turns them into JS values and names classes
//! (the `key` label is added in JS).

use hullguard_core::{
    Stats,
    metrics::{HistogramSample, METRICS, Metric, MetricKind, MetricLabels, MetricSink, visit},
    stats::{ClassStats, WAIT_BUCKETS, WaitHistogram},
};
use napi_derive::napi;

/// One row of the core's metric table.
#[napi(object)]
pub struct MetricRow {
    /// The exposition name (`'hullguard_in_flight'`; a counter's includes `_total`).
    pub name: String,
    /// `'gauge'`, `'counter'` or `'histogram'`.
    pub kind: String,
    /// `'seconds'` for the wait histogram, `''` for counts.
    pub unit: String,
    /// Label names, `'key'` first.
    pub labels: Vec<String>,
    pub help: String,
    /// The histogram's finite upper bounds in seconds (the core's power-of-two ns bounds),
    /// increasing; absent on other rows.
    pub buckets: Option<Vec<f64>>,
}

/// The core's metric table, in the order the samples are written.
#[napi]
pub fn metric_table() -> Vec<MetricRow> {
    METRICS
        .iter()
        .map(|m| MetricRow {
            name: m.name.to_owned(),
            kind: m.kind.as_str().to_owned(),
            unit: m.unit.to_owned(),
            labels: m.labels.iter().map(|&l| l.to_owned()).collect(),
            help: m.help.to_owned(),
            buckets: (m.kind == MetricKind::Histogram).then(|| {
                (0..WAIT_BUCKETS)
                    .filter_map(WaitHistogram::bound_ns)
                    .map(|ns| ns as f64 / 1e9)
                    .collect()
            }),
        })
        .collect()
}

/// One sample: a gauge's or counter's `value`, or the histogram's cumulative `buckets`
/// (`[upper bound seconds (the last Infinity), count at or below it]`), `sum` (seconds) and
/// `count`. `class` is the class's name (its index when unnamed), absent on the bulkhead's
/// total; `dimension` (`'calls'` / `'budget'`) and `reason` where they apply.
#[napi(object)]
pub struct MetricSample {
    pub name: String,
    pub class: Option<String>,
    pub dimension: Option<String>,
    pub reason: Option<String>,
    pub value: Option<f64>,
    pub buckets: Option<Vec<Vec<f64>>>,
    pub sum: Option<f64>,
    pub count: Option<f64>,
}

/// Collects the core's samples, naming class indices with `names`.
struct Samples<'n> {
    names: &'n dyn Fn(u16) -> String,
    out: Vec<MetricSample>,
}

impl Samples<'_> {
    fn base(&self, metric: &Metric, labels: MetricLabels) -> MetricSample {
        MetricSample {
            name: metric.name.to_owned(),
            class: labels.class.map(|c| (self.names)(c)),
            dimension: labels.dimension.map(str::to_owned),
            reason: labels.reason.map(|r| r.as_str().to_owned()),
            value: None,
            buckets: None,
            sum: None,
            count: None,
        }
    }
}

impl MetricSink for Samples<'_> {
    fn sample(&mut self, metric: &'static Metric, labels: MetricLabels, value: f64) {
        let s = MetricSample {
            value: Some(value),
            ..self.base(metric, labels)
        };
        self.out.push(s);
    }

    fn histogram(&mut self, metric: &'static Metric, labels: MetricLabels, h: &HistogramSample) {
        let s = MetricSample {
            buckets: Some(
                h.buckets
                    .iter()
                    .map(|&(le, n)| vec![le, n as f64])
                    .collect(),
            ),
            sum: Some(h.sum),
            count: Some(h.count as f64),
            ..self.base(metric, labels)
        };
        self.out.push(s);
    }
}

/// The class name of index `c` in `names` (its index when unnamed).
fn named(names: &[Option<String>], c: u16) -> String {
    names
        .get(usize::from(c))
        .and_then(Clone::clone)
        .unwrap_or_else(|| c.to_string())
}

/// A bulkhead's samples (its `metrics` walk: one stats read, then its classes').
pub(crate) fn bulkhead_samples(
    bh: &hullguard_core::Bulkhead,
    names: &[Option<String>],
) -> Vec<MetricSample> {
    let name = |c: u16| named(names, c);
    let mut s = Samples {
        names: &name,
        out: Vec::new(),
    };
    bh.metrics(&mut s);
    s.out
}

/// The samples of a stats reading and its classes (a registry's keys, read without creating or
/// touching a key), class indices named by `names`.
pub(crate) fn stats_samples(
    stats: &Stats,
    classes: &[ClassStats],
    names: &dyn Fn(u16) -> String,
) -> Vec<MetricSample> {
    let mut s = Samples {
        names,
        out: Vec::new(),
    };
    visit(stats, classes, &mut s);
    s.out
}
