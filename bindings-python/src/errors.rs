//! Core rejections as the Python exceptions of `hullguard/_errors.py`: the class is the one
//! that declares the reason's `code` (`_errors._class_for`), its attributes come from the
//! core's reason table (`Reason::info`). Invalid arguments are `ValueError`s.

use hullguard_core::{AcquireError, Rejection};
use pyo3::{
    exceptions::PyValueError,
    prelude::*,
    sync::PyOnceLock,
    types::{PyDict, PyTuple},
};

static CLASS_FOR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `hullguard._native.REASONS`: the core's reason table as a tuple of dicts
/// `{"name", "code", "retryable", "category"}`, in `hg_reason` order.
pub(crate) fn reasons(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    let rows = hullguard_core::Reason::ALL.map(|r| {
        let i = r.info();
        let d = PyDict::new(py);
        d.set_item("name", i.name)?;
        d.set_item("code", i.code)?;
        d.set_item("retryable", i.retryable)?;
        d.set_item("category", i.category)?;
        Ok::<_, PyErr>(d)
    });
    PyTuple::new(py, rows.into_iter().collect::<PyResult<Vec<_>>>()?)
}

/// The `snapshot` dict of a rejection: the counters when it settled, and the registry key.
fn snapshot_dict<'py>(
    py: Python<'py>,
    r: &Rejection,
    key: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("active", r.snapshot.active)?;
    d.set_item("queued", r.snapshot.queued)?;
    d.set_item("limit", r.snapshot.limit)?;
    d.set_item("available", r.snapshot.available)?;
    d.set_item("key", key)?;
    Ok(d)
}

/// The exception for a rejection (of the bulkhead of registry key `key`, if any).
pub(crate) fn rejection_err(py: Python<'_>, r: &Rejection, key: Option<&str>) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let info = r.reason.info();
        let class_for = CLASS_FOR.get_or_try_init(py, || {
            let m = py.import("hullguard._errors")?;
            m.getattr("_class_for").map(Bound::unbind)
        })?;
        let cls = class_for.bind(py).call1((info.code,))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("reason", info.name)?;
        kwargs.set_item("code", info.code)?;
        kwargs.set_item("retryable", info.retryable)?;
        kwargs.set_item("category", info.category)?;
        kwargs.set_item("snapshot", snapshot_dict(py, r, key)?)?;
        // Built when `.detail` is first read (a rejection nobody inspects builds no dict).
        kwargs.set_item("detail", crate::gateway::LazyDetail::new(r.detail()))?;
        let message = key.map_or_else(|| r.to_string(), |k| format!("{r} (key {k:?})"));
        Ok(PyErr::from_value(cls.call((message,), Some(&kwargs))?))
    };
    build().unwrap_or_else(|e| e)
}

/// The exception for any acquire error: a rejection, or a `ValueError` naming the argument.
pub(crate) fn acquire_err(py: Python<'_>, e: &AcquireError, key: Option<&str>) -> PyErr {
    e.rejection().map_or_else(
        || match e {
            // The core's request field is `class`; Python's argument is `admission_class`.
            AcquireError::InvalidClass { .. } => {
                PyValueError::new_err(format!("admission_class: {e}"))
            }
            _ => PyValueError::new_err(e.to_string()),
        },
        |r| rejection_err(py, r, key),
    )
}
