//! `stats()` and `drain()` results as dicts with the schema of DESIGN §3.7.

use hullguard_core::{DrainResult, Stats};
use pyo3::{prelude::*, types::PyDict};

/// The stats dict (every key of the schema; `adaptive` / `circuit` are `None` until policies
/// are attached).
pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("active", s.active)?;
    d.set_item("queued", s.queued)?;
    d.set_item("granted_unclaimed", s.granted_unclaimed)?;
    d.set_item("limit", s.limit)?;
    d.set_item("max_concurrent", s.max_concurrent)?;
    d.set_item("available", s.available)?;
    d.set_item("admitted_total", s.admitted_total)?;
    let rejected = PyDict::new(py);
    for (reason, n) in s.rejected_by_reason.iter() {
        rejected.set_item(reason.as_str(), n)?;
    }
    d.set_item("rejected_by_reason", rejected)?;
    d.set_item("released_twice_total", s.released_twice_total)?;
    d.set_item("leaked_total", s.leaked_total)?;
    d.set_item("ring_free", s.ring_free)?;
    d.set_item("queue_wait_count", s.queue_wait_count)?;
    d.set_item("queue_wait_sum_ns", s.queue_wait_sum_ns)?;
    d.set_item("queue_wait_max_ns", s.queue_wait_max_ns)?;
    d.set_item("adaptive", py.None())?;
    d.set_item("circuit", py.None())?;
    Ok(d)
}

/// `{"drained", "active", "queued"}`.
pub(crate) fn drain_dict<'py>(py: Python<'py>, r: &DrainResult) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("drained", r.drained)?;
    d.set_item("active", r.active)?;
    d.set_item("queued", r.queued)?;
    Ok(d)
}
