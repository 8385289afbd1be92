//! `stats()` and `drain()` results as dicts. The stats dict is built by walking the core's
//! stats schema (`Stats::visit`, docs/design.md §8.1): its keys are exactly the schema's, in
//! its order; `adaptive` / `circuit` are `None` unless those policies are attached.

use hullguard_core::{DrainResult, Nested, Stats, StatsVisitor};
use pyo3::{prelude::*, types::PyDict};

/// Builds nested dicts from the schema walk; the first Python error is kept and returned.
struct DictBuilder<'py> {
    py: Python<'py>,
    /// The dicts being filled: the stats dict, then the nested part open now (with its key).
    open: Vec<(&'static str, Bound<'py, PyDict>)>,
    err: Option<PyErr>,
}

impl<'py> DictBuilder<'py> {
    fn put(&mut self, key: &'static str, value: impl IntoPyObject<'py>) {
        let (_, d) = self.open.last().expect("the stats dict stays open");
        if let Err(e) = d.set_item(key, value) {
            self.err.get_or_insert(e);
        }
    }
}

impl StatsVisitor for DictBuilder<'_> {
    fn count(&mut self, key: &'static str, value: u64) {
        self.put(key, value);
    }
    fn signed(&mut self, key: &'static str, value: i64) {
        self.put(key, value);
    }
    fn text(&mut self, key: &'static str, value: &'static str) {
        self.put(key, value);
    }
    /// Python spells every key as the schema does (reason names, field names): `nested` is
    /// not needed.
    fn begin(&mut self, key: &'static str, _nested: Nested) {
        self.open.push((key, PyDict::new(self.py)));
    }
    fn end(&mut self) {
        let (key, d) = self.open.pop().expect("end follows begin");
        self.put(key, d);
    }
    fn absent(&mut self, key: &'static str) {
        self.put(key, self.py.None());
    }
}

/// The stats dict of `s`.
pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let mut b = DictBuilder {
        py,
        open: vec![("", PyDict::new(py))],
        err: None,
    };
    s.visit(&mut b);
    b.err.map_or(Ok(()), Err)?;
    Ok(b.open.pop().expect("the stats dict").1)
}

/// `{"drained", "active", "queued"}`.
pub(crate) fn drain_dict<'py>(py: Python<'py>, r: &DrainResult) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("drained", r.drained)?;
    d.set_item("active", r.active)?;
    d.set_item("queued", r.queued)?;
    Ok(d)
}
