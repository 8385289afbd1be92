//! Request deadlines as Python gives them (docs/design.md §5.9, issue 17): the `deadline=`
//! argument of every acquire — an **absolute** time in float seconds on the `time.monotonic()`
//! scale — and the ambient budget of `hullguard.deadline(seconds)` (a `contextvars.ContextVar`
//! of `hullguard/_deadline.py`), read here and min'd with the argument. The conversion to the
//! core's [`Deadline::Ns`] (ns on the bulkhead clock's absolute scale: `CLOCK_MONOTONIC` for the
//! host clock, i.e. `time.monotonic_ns()`; the `_clock` hook's own ns for a test's virtual
//! clock) saturates; every decision — a passed deadline refused `timeout`, the queue wait capped,
//! the call timeout capped — is the core's.
//!
//! The ambient budget costs nothing until the first `hullguard.deadline(...)` is entered: the
//! Python module hands its context variable over then (`_enable_ambient_deadline`), and only
//! from then on does an acquire read it (one `ContextVar.get`).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use hullguard_core::Deadline;
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    intern,
    prelude::*,
    sync::PyOnceLock,
    types::{PyBool, PyFloat, PyInt},
};

use crate::options::type_name;

/// Set once the ambient context variable is handed over (the first `hullguard.deadline`).
static AMBIENT: AtomicBool = AtomicBool::new(false);
/// `hullguard._deadline._DEADLINE`: the ambient absolute deadline (float seconds) or `None`.
static VAR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Seconds from which a deadline means none: `2**63` ns (about 292 years of the clock).
const NONE_FROM_SECS: f64 = 9_223_372_036_854_775_808.0 / 1e9;

/// The allowed values, for the messages.
const RANGE: &str = "an absolute time in seconds on the time.monotonic() scale (an int or a \
                     finite float; math.inf, None or anything >= 2**63/1e9 for no deadline)";

/// `v` (not `None`) as absolute seconds: `+inf` for no deadline. `TypeError` for a non-number
/// (a `bool` too), `ValueError` for NaN or `-inf`, naming `name` and the allowed range.
pub(crate) fn secs_arg(v: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    let is_int = v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>();
    if !is_int && !v.is_instance_of::<PyFloat>() {
        let t = type_name(v);
        return Err(PyTypeError::new_err(format!(
            "{name} must be {RANGE}, not {t}"
        )));
    }
    // An int too large for a float: a huge positive one is no deadline (infinity), a huge
    // negative one a time long passed (the most negative float: refused `timeout`, never a
    // `ValueError` — it is a number).
    let s = v.extract::<f64>().or_else(|_| {
        v.lt(0)
            .map(|neg| if neg { f64::MIN } else { f64::INFINITY })
    })?;
    if s.is_nan() || s == f64::NEG_INFINITY {
        let got = v.repr().map_or_else(|_| "?".into(), |r| r.to_string());
        return Err(PyValueError::new_err(format!(
            "{name} must be {RANGE}; got {got}"
        )));
    }
    Ok(s)
}

/// Absolute seconds as the core's deadline, saturating: `+inf` and anything from `2**63` ns
/// on is none; a negative time is 0 (long passed); otherwise the nearest ns.
pub(crate) fn to_core(secs: f64) -> Deadline {
    if secs >= NONE_FROM_SECS {
        Deadline::NONE
    } else if secs <= 0.0 {
        Deadline::Ns(0)
    } else {
        // Below 2**63: the cast cannot saturate.
        Deadline::Ns((secs * 1e9).round() as u64)
    }
}

/// The ambient deadline of the current context (absolute seconds), if one is set.
pub(crate) fn ambient(py: Python<'_>) -> PyResult<Option<f64>> {
    if !AMBIENT.load(Relaxed) {
        return Ok(None);
    }
    let Some(var) = VAR.get(py) else {
        return Ok(None);
    };
    let v = var.bind(py).call_method0(intern!(py, "get"))?;
    if v.is_none() {
        return Ok(None);
    }
    secs_arg(&v, "the ambient deadline (hullguard.deadline)").map(Some)
}

/// The deadline of one request: the `deadline=` argument (`None`: not given) min'd with the
/// ambient one — a call never extends the budget of the request it belongs to.
pub(crate) fn request_deadline(
    py: Python<'_>,
    explicit: Option<&Bound<'_, PyAny>>,
) -> PyResult<Deadline> {
    let given = explicit
        .filter(|v| !v.is_none())
        .map(|v| secs_arg(v, "deadline"))
        .transpose()?;
    let secs = match (given, ambient(py)?) {
        (None, None) => return Ok(Deadline::NONE),
        (Some(a), Some(b)) => a.min(b),
        (Some(s), None) | (None, Some(s)) => s,
    };
    Ok(to_core(secs))
}

/// The ambient deadline alone (`async with bh:`, which takes no arguments).
pub(crate) fn ambient_deadline(py: Python<'_>) -> PyResult<Deadline> {
    Ok(ambient(py)?.map_or(Deadline::NONE, to_core))
}

/// Hands the ambient context variable over (called by `hullguard._deadline` when the first
/// budget is entered); from then on every acquire reads it. Idempotent.
#[pyfunction(name = "_enable_ambient_deadline")]
pub(crate) fn enable_ambient_deadline(var: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = var.py();
    VAR.get_or_init(py, || var.clone().unbind());
    if !VAR.get(py).is_some_and(|v| v.bind(py).is(var)) {
        return Err(PyValueError::new_err(
            "another context variable holds the ambient deadline already",
        ));
    }
    AMBIENT.store(true, Relaxed);
    Ok(())
}

/// `seconds` (a time left) as a `grpc-timeout` header value, by the core's one rule
/// (`hullguard_core::deadline::grpc_timeout`: at most 8 digits and a unit, rounded down; 0, a
/// negative or NaN time is `"0n"`, an infinite one `"99999999H"`).
#[pyfunction(name = "_grpc_timeout")]
pub(crate) fn grpc_timeout(seconds: f64) -> String {
    let left = if seconds > 0.0 {
        std::time::Duration::try_from_secs_f64(seconds).unwrap_or(std::time::Duration::MAX)
    } else {
        std::time::Duration::ZERO
    };
    hullguard_core::deadline::grpc_timeout(left)
        .as_str()
        .to_owned()
}

/// A `grpc-timeout` header value as seconds (`"1500m"` → 1.5), by the core's one parser
/// (`hullguard_core::deadline::parse_grpc_timeout`: 1 to 8 ASCII digits and a unit among
/// `H M S m u n`); `None` for a malformed one (no budget, as gRPC servers treat it).
#[pyfunction(name = "_parse_grpc_timeout")]
pub(crate) fn parse_grpc_timeout(value: &[u8]) -> Option<f64> {
    hullguard_core::deadline::parse_grpc_timeout(value).map(|d| d.as_secs_f64())
}

/// The `deadline` argument checked and converted by the rule of every acquire's `deadline=`
/// (for integrations and `hullguard.deadline_at`): absolute seconds on the `time.monotonic()`
/// scale, or `None` for no deadline (`None`, `math.inf`, anything from `2**63` ns on).
/// `TypeError` / `ValueError` naming `name`.
#[pyfunction(name = "_check_deadline")]
#[pyo3(signature = (deadline, name="deadline"))]
pub(crate) fn check_deadline(
    deadline: Option<&Bound<'_, PyAny>>,
    name: &str,
) -> PyResult<Option<f64>> {
    let Some(v) = deadline.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let s = secs_arg(v, name)?;
    Ok((s < NONE_FROM_SECS).then_some(s))
}
