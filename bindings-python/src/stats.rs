//! `stats()` and `drain()` results as dicts with the schema of DESIGN §3.7.

use hullguard_core::{DrainResult, Stats};
use pyo3::{prelude::*, types::PyDict};

/// The stats dict (every key of the schema; `adaptive` / `circuit` are `None` unless those
/// policies are attached, else `{algorithm, limit, min_limit, max_limit, samples_total,
/// decreases_total, last_rtt_ns, long_rtt_ns}` / `{state, generation, consecutive_failures,
/// window_requests, window_failures, opened_at_ns}`).
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
    match &s.adaptive {
        Some(a) => {
            let x = PyDict::new(py);
            x.set_item("algorithm", a.algorithm.as_str())?;
            x.set_item("limit", a.limit)?;
            x.set_item("min_limit", a.min_limit)?;
            x.set_item("max_limit", a.max_limit)?;
            x.set_item("samples_total", a.samples_total)?;
            x.set_item("decreases_total", a.decreases_total)?;
            x.set_item("last_rtt_ns", a.last_rtt_ns)?;
            x.set_item("long_rtt_ns", a.long_rtt_ns)?;
            d.set_item("adaptive", x)?;
        }
        None => d.set_item("adaptive", py.None())?,
    }
    match &s.circuit {
        Some(c) => {
            let x = PyDict::new(py);
            x.set_item("state", c.state.as_str())?;
            x.set_item("generation", c.generation)?;
            x.set_item("consecutive_failures", c.consecutive_failures)?;
            x.set_item("window_requests", c.window_requests)?;
            x.set_item("window_failures", c.window_failures)?;
            x.set_item("opened_at_ns", c.opened_at_ns)?;
            d.set_item("circuit", x)?;
        }
        None => d.set_item("circuit", py.None())?,
    }
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
