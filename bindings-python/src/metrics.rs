//! The metric table and a bulkhead's samples for the exporters (`hullguard.prometheus`,
//! `hullguard.otel`; docs/design.md §8.3), and `report_load`'s arguments. The table and the walk
//! are the core's (`hullguard_core::metrics`); this module only turns them into Python values
//! and maps class indices to class names (the `key` label is added in Python).

use std::time::Duration;

use hullguard_core::{
    Stats,
    load::LoadSignal,
    metrics::{HistogramSample, METRICS, Metric, MetricKind, MetricLabels, MetricSink, visit},
    stats::{ClassStats, WAIT_BUCKETS, WaitHistogram},
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyTuple},
};

use crate::options::type_name;

/// The core's metric table: one dict per metric, `{"name", "kind" ("gauge" | "counter" |
/// "histogram"), "unit" ("seconds" | ""), "labels" (label names, "key" first), "help"}`, in
/// the order `_metric_samples()` writes them; the histogram's row also has `"buckets"`: its
/// finite upper bounds in seconds (the core's power-of-two ns bounds), increasing.
#[pyfunction]
pub(crate) fn metric_table(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for m in METRICS.iter() {
        let d = PyDict::new(py);
        d.set_item("name", m.name)?;
        d.set_item("kind", m.kind.as_str())?;
        d.set_item("unit", m.unit)?;
        d.set_item("labels", m.labels.to_vec())?;
        d.set_item("help", m.help)?;
        if m.kind == MetricKind::Histogram {
            let bounds: Vec<f64> = (0..WAIT_BUCKETS)
                .filter_map(WaitHistogram::bound_ns)
                .map(|ns| ns as f64 / 1e9)
                .collect();
            d.set_item("buckets", bounds)?;
        }
        out.append(d)?;
    }
    Ok(out)
}

/// Collects the core's samples as Python tuples `(name, class, dimension, reason, value)`:
/// `class` the class's name (its index when unnamed; `""` for the bulkhead's total),
/// `dimension` / `reason` `""` where they do not apply, `value` a float or, for the histogram,
/// `(buckets [(upper bound seconds, cumulative count)], sum seconds, count)`.
struct Samples<'py, 'n> {
    py: Python<'py>,
    names: &'n dyn Fn(u16) -> String,
    out: Vec<Bound<'py, PyTuple>>,
    err: Option<PyErr>,
}

impl<'py> Samples<'py, '_> {
    fn push(&mut self, metric: &Metric, labels: MetricLabels, value: Bound<'py, PyAny>) {
        let class = labels.class.map_or_else(String::new, |c| (self.names)(c));
        let reason = labels.reason.map_or("", |r| r.as_str());
        let t = (
            metric.name,
            class,
            labels.dimension.unwrap_or(""),
            reason,
            value,
        );
        match t.into_pyobject(self.py) {
            Ok(t) => self.out.push(t),
            Err(e) => {
                self.err.get_or_insert(e);
            }
        }
    }
}

impl MetricSink for Samples<'_, '_> {
    fn sample(&mut self, metric: &'static Metric, labels: MetricLabels, value: f64) {
        let v = PyFloat::new(self.py, value).into_any();
        self.push(metric, labels, v);
    }

    fn histogram(&mut self, metric: &'static Metric, labels: MetricLabels, h: &HistogramSample) {
        let v = (h.buckets.to_vec(), h.sum, h.count).into_pyobject(self.py);
        match v {
            Ok(v) => self.push(metric, labels, v.into_any()),
            Err(e) => {
                self.err.get_or_insert(e);
            }
        }
    }
}

fn finish<'py>(s: Samples<'py, '_>) -> PyResult<Bound<'py, PyList>> {
    if let Some(e) = s.err {
        return Err(e);
    }
    PyList::new(s.py, s.out)
}

/// The samples of a bulkhead (its `metrics` walk), class indices named by `names`.
pub(crate) fn bulkhead_samples<'py>(
    py: Python<'py>,
    bh: &hullguard_core::Bulkhead,
    names: &[Option<String>],
) -> PyResult<Bound<'py, PyList>> {
    let name = |c: u16| {
        names
            .get(usize::from(c))
            .and_then(Clone::clone)
            .unwrap_or_else(|| c.to_string())
    };
    let mut s = Samples {
        py,
        names: &name,
        out: Vec::new(),
        err: None,
    };
    bh.metrics(&mut s);
    finish(s)
}

/// The samples of a stats reading and its classes (a registry's keys: their `stats()`, read
/// without creating a key; under a global cap the shared admission with each key's class named
/// by the key).
pub(crate) fn stats_samples<'py>(
    py: Python<'py>,
    stats: &Stats,
    classes: &[ClassStats],
    names: &dyn Fn(u16) -> String,
) -> PyResult<Bound<'py, PyList>> {
    let mut s = Samples {
        py,
        names,
        out: Vec::new(),
        err: None,
    };
    visit(stats, classes, &mut s);
    finish(s)
}

/// A `report_load` reading: a number `>= 0` (an int or a float; not a bool, not NaN).
fn reading(v: &Bound<'_, PyAny>, name: &str, what: &str) -> PyResult<f64> {
    let is_int = v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>();
    if !is_int && !v.is_instance_of::<PyFloat>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be {what} (an int or a float >= 0), not {}",
            type_name(v)
        )));
    }
    let x = v.extract::<f64>().unwrap_or(f64::INFINITY);
    if x.is_nan() || x < 0.0 {
        let got = v.repr().map_or_else(|_| "?".into(), |r| r.to_string());
        return Err(PyValueError::new_err(format!(
            "{name} must be {what} (>= 0, not NaN); got {got}"
        )));
    }
    Ok(x)
}

/// `report_load(event_loop_lag=, cpu=)`'s arguments as the core's signals, both checked before
/// either is reported (a bad argument reports nothing). `TypeError` when neither is given.
pub(crate) fn load_signals(
    event_loop_lag: Option<&Bound<'_, PyAny>>,
    cpu: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<LoadSignal>> {
    let lag = event_loop_lag.filter(|v| !v.is_none());
    let cpu = cpu.filter(|v| !v.is_none());
    if lag.is_none() && cpu.is_none() {
        return Err(PyTypeError::new_err(
            "report_load() needs event_loop_lag= (seconds) and/or cpu= (cores)",
        ));
    }
    let mut out = Vec::with_capacity(2);
    if let Some(v) = lag {
        let s = reading(v, "event_loop_lag", "a lag in seconds")?;
        let d = Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX);
        out.push(LoadSignal::EventLoopLag(d));
    }
    if let Some(v) = cpu {
        let c = reading(v, "cpu", "a CPU use in cores")?;
        out.push(LoadSignal::Cpu(c));
    }
    Ok(out)
}
