//! The policies as Python meets them (docs/design.md §6; the `on_state_change` observer is
//! `events`): outcomes (`permit.release(outcome=...)`, the exception leaving `with` / `async with`, an
//! HTTP status) and the host timer of `call_timeout` for `async with` blocks. The rules are the
//! core's; this wires them to Python.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use hullguard_core::Outcome;
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyString, PyType},
};

use crate::{options::type_name, permit::Permit};

// ----- outcomes ------------------------------------------------------------------------------

static CANCELLED_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Whether `exc_type` (an exception class, or `None`) is `asyncio.CancelledError`.
pub(crate) fn is_cancel(exc_type: Option<&Bound<'_, PyAny>>) -> bool {
    let Some(t) = exc_type.and_then(|t| t.cast::<PyType>().ok()) else {
        return false;
    };
    let py = t.py();
    CANCELLED_ERROR
        .import(py, "asyncio", "CancelledError")
        .and_then(|c| t.is_subclass(c))
        .unwrap_or(false)
}

/// The outcome of leaving `with` / `async with` (docs/design.md §6.2): no exception →
/// success; `asyncio.CancelledError` → ignored; any other exception → failure.
pub(crate) fn classify_exit(exc_type: Option<&Bound<'_, PyAny>>) -> Outcome {
    match exc_type.filter(|t| !t.is_none()) {
        None => Outcome::Success,
        Some(_) if is_cancel(exc_type) => Outcome::Ignored,
        Some(_) => Outcome::Failure,
    }
}

/// The outcome of an HTTP response by its status: the core's one rule (5xx → `"failure"`, 429
/// → `"overload"`, anything else → `"success"`), for hullguard's HTTP integrations.
#[pyfunction]
pub(crate) fn outcome_of_status(status_code: i64) -> &'static str {
    let status = u16::try_from(status_code.max(0)).unwrap_or(u16::MAX);
    Outcome::for_http_status(status).as_str()
}

/// An `outcome=` argument: one of the core's outcome names (`TypeError` unless a `str`,
/// `ValueError` listing them otherwise).
pub(crate) fn outcome_arg(v: &Bound<'_, PyAny>) -> PyResult<Outcome> {
    let s = v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("outcome must be a str, not {}", type_name(v)))
    })?;
    let s = s.to_cow()?;
    Outcome::parse(&s).ok_or_else(|| {
        let names: Vec<_> = (0..)
            .map_while(Outcome::from_code)
            .map(Outcome::as_str)
            .collect();
        PyValueError::new_err(format!("outcome must be one of {names:?}, got {s:?}"))
    })
}

// ----- the call_timeout timer of `async with` --------------------------------------------------

static CURRENT_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `asyncio.current_task()`, or `None` outside a task.
fn current_task(py: Python<'_>) -> Option<Bound<'_, PyAny>> {
    let f = CURRENT_TASK.import(py, "asyncio", "current_task").ok()?;
    f.call0().ok().filter(|t| !t.is_none())
}

/// The `call_timeout` deadline of one `async with` block: reports the overrun to the core
/// (`Call::timed_out`: counted, a failure now) and cancels the task running the block, whose
/// exit then raises `CallTimeoutError`. The permits stay held until the block has unwound.
#[pyclass(module = "hullguard._native", frozen)]
pub(crate) struct CallTimer {
    permit: Py<Permit>,
    task: Py<PyAny>,
    fired: AtomicBool,
}

#[pymethods]
impl CallTimer {
    fn __call__(&self, py: Python<'_>) {
        if self.permit.get().timed_out(py) {
            self.fired.store(true, SeqCst);
            drop(self.task.bind(py).call_method0("cancel"));
        }
    }
}

/// An armed `call_timeout` (the loop's timer handle).
pub(crate) struct ArmedCall {
    handle: Py<PyAny>,
    timer: Py<CallTimer>,
}

impl ArmedCall {
    /// Arms the `call_timeout` of `permit`'s call (`loop.call_later(call.call_timeout())`) for
    /// the block running in the current task; nothing without a call timeout, or outside a task
    /// (no loop to arm a timer on).
    pub(crate) fn arm(py: Python<'_>, permit: &Py<Permit>) -> Option<ArmedCall> {
        let limit = permit.get().call_timeout(py)?;
        let task = current_task(py)?;
        let timer = CallTimer {
            permit: permit.clone_ref(py),
            task: task.clone().unbind(),
            fired: AtomicBool::new(false),
        };
        let timer = Py::new(py, timer).ok()?;
        let event_loop = task.call_method0("get_loop").ok()?;
        let args = (limit.as_secs_f64(), timer.clone_ref(py));
        let handle = event_loop.call_method1("call_later", args).ok()?;
        Some(ArmedCall {
            handle: handle.unbind(),
            timer,
        })
    }

    /// Cancels the timer (the block is gone without an exit).
    pub(crate) fn cancel(&self, py: Python<'_>) {
        drop(self.handle.bind(py).call_method0("cancel"));
    }

    /// Disarms the timer at the block's exit: whether it had fired (the caller raises
    /// `CallTimeoutError`). When the block is unwinding from our cancellation, the task's
    /// cancel request is withdrawn (`Task.uncancel()`, Python ≥ 3.11, as `asyncio.timeout`
    /// does); a block that raised its own exception after the deadline keeps it.
    fn disarm(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> bool {
        self.cancel(py);
        let timer = self.timer.get();
        if !timer.fired.load(SeqCst) {
            return false;
        }
        let unwinding = is_cancel(exc_type) || exc_type.is_none_or(|t| t.is_none());
        let task = timer.task.bind(py);
        if unwinding && task.hasattr("uncancel").unwrap_or(false) {
            drop(task.call_method0("uncancel"));
        }
        unwinding
    }
}

/// Ends the call of an `async with` block (`permit`, its timer `armed`) as its exception says;
/// `CallTimeoutError` if the block overran `call_timeout`.
pub(crate) fn exit_block(
    py: Python<'_>,
    permit: &Permit,
    armed: Option<&ArmedCall>,
    exc_type: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let overran = armed.is_some_and(|a| a.disarm(py, exc_type));
    permit.end(py, classify_exit(exc_type));
    if overran {
        return Err(permit.call_timeout_err(py));
    }
    Ok(())
}
