//! Maps core errors to the Python exception hierarchy (defined in `hullguard/_errors.py`) and
//! argument errors to `ValueError` / `TypeError` naming the argument.

use hullguard_core::{AcquireError, Reason, Rejection};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyDict, PyModule},
};

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || py.import("hullguard._errors").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// The `snapshot` dict of a rejection.
pub(crate) fn snapshot_dict<'py>(
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

fn class_name(reason: Reason) -> &'static str {
    match reason {
        Reason::Timeout => "BulkheadQueueTimeoutError",
        Reason::Shutdown => "BulkheadClosedError",
        Reason::CircuitOpen => "CircuitOpenError",
        Reason::CallTimeout => "CallTimeoutError",
        _ => "BulkheadFullError",
    }
}

/// The exception for a rejection.
pub(crate) fn rejection_err(py: Python<'_>, r: &Rejection, key: Option<&str>) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = errors_module(py)?.getattr(class_name(r.reason))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("reason", r.reason.as_str())?;
        kwargs.set_item("code", r.reason.code())?;
        kwargs.set_item("retryable", r.reason.retryable())?;
        kwargs.set_item("snapshot", snapshot_dict(py, r, key)?)?;
        let message = match key {
            Some(k) => format!("{r} (key {k:?})"),
            None => r.to_string(),
        };
        Ok(PyErr::from_value(cls.call((message,), Some(&kwargs))?))
    };
    build().unwrap_or_else(|e| e)
}

/// The exception for any acquire error.
pub(crate) fn acquire_err(py: Python<'_>, e: &AcquireError, key: Option<&str>) -> PyErr {
    match e {
        AcquireError::Rejected(r) => rejection_err(py, r, key),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// A permit count argument: an `int` (not a `bool`) in range, else `TypeError` / `ValueError`
/// naming it.
pub(crate) fn count_arg(value: &Bound<'_, PyAny>, name: &str, min: u64, max: u64) -> PyResult<u64> {
    if value.is_instance_of::<pyo3::types::PyBool>()
        || !value.is_instance_of::<pyo3::types::PyInt>()
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            value.get_type().name()?
        )));
    }
    // Beyond i128 it is out of range either way: name the argument, never `OverflowError`.
    let Ok(n) = value.extract::<i128>() else {
        return Err(PyValueError::new_err(format!(
            "{name} must be in {min}..={max}, got {value}"
        )));
    };
    if n < i128::from(min) || n > i128::from(max) {
        return Err(PyValueError::new_err(format!(
            "{name} must be in {min}..={max}, got {n}"
        )));
    }
    Ok(n as u64)
}

/// A duration in seconds: `None` → `None`; `math.inf` → `Duration::MAX`; NaN, negative or a
/// non-number → `ValueError` / `TypeError` naming it.
pub(crate) fn seconds_arg(
    value: Option<&Bound<'_, PyAny>>,
    name: &str,
) -> PyResult<Option<std::time::Duration>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if value.is_instance_of::<pyo3::types::PyBool>()
        || !(value.is_instance_of::<pyo3::types::PyFloat>()
            || value.is_instance_of::<pyo3::types::PyInt>())
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a number of seconds, not {}",
            value.get_type().name()?
        )));
    }
    let s: f64 = match value.extract() {
        Ok(s) => s,
        // An int too large for a float: negative is invalid, positive is "no deadline".
        Err(_) if value.lt(0)? => f64::NAN,
        Err(_) => f64::INFINITY,
    };
    if s.is_nan() || s < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be >= 0 seconds (or math.inf), got {s}"
        )));
    }
    if s.is_infinite() {
        return Ok(Some(std::time::Duration::MAX));
    }
    Ok(Some(
        std::time::Duration::try_from_secs_f64(s).unwrap_or(std::time::Duration::MAX),
    ))
}
