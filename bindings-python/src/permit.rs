//! `Permit`: the Python handle of one core `Call` (the permits of one acquire and its guarded
//! call, docs/design.md §5.3). Every rule is the call's: `release(outcome)` is `Call::end`, the
//! `call_timeout` report is `Call::timed_out`, a refund is `Call::release_partial`, a permit
//! finalized while held is `Call::reclaim` (counted in `leaked_total`). A released permit keeps
//! no outside handle on its bulkhead (a registry may evict it).
//!
//! Thread-safe: the call sits behind a mutex, locked without blocking the interpreter
//! (`lock_py_attached`). A release takes the call out and ends it after unlocking (ending wakes
//! waiters, which runs Python code that may touch this permit again, from this thread or
//! another). The refund and the timeout report run on the call in place, under the lock.

use std::{
    sync::{Arc, Mutex, MutexGuard, Weak},
    time::Duration,
};

use hullguard_core::{Bulkhead as CoreBulkhead, Outcome, OwnedPermit, Reason, Rejection};
use pyo3::{exceptions::PyValueError, prelude::*, sync::MutexExt};

use crate::{
    errors::rejection_err,
    options::count_arg,
    policy::{classify_exit, outcome_arg},
};

/// A granted core call on an `Arc` of its bulkhead.
pub(crate) type CoreCall = OwnedPermit;

/// Permits held by one acquire, and its guarded call. `release(outcome=...)` returns them once
/// (a second call returns `False`, counted in `released_twice_total`); `with permit:` releases
/// at the exit, the outcome given by the block's exception; a permit garbage-collected while
/// held is returned and counted in `leaked_total`. Thread-safe: any thread may release it.
#[pyclass(module = "hullguard._native", name = "Permit", frozen)]
pub(crate) struct Permit {
    /// `None` once released.
    call: Mutex<Option<CoreCall>>,
    /// The bulkhead, for a release after the release (counted) and for the error of a timed
    /// out call.
    weak: Weak<CoreBulkhead>,
    key: Option<String>,
}

impl Permit {
    pub(crate) fn new(call: CoreCall, key: Option<String>) -> Self {
        let (bh, weight, token) = call.into_parts();
        Self {
            weak: Arc::downgrade(&bh),
            call: Mutex::new(Some(CoreCall::from_parts(bh, weight, token))),
            key,
        }
    }

    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Option<CoreCall>> {
        self.call
            .lock_py_attached(py)
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the call with `outcome` if still held; whether it was.
    pub(crate) fn end(&self, py: Python<'_>, outcome: Outcome) -> bool {
        let call = self.lock(py).take();
        call.map(|c| c.end(outcome)).is_some()
    }

    /// The `call_timeout` rule of the core (`Call::timed_out`): counts `call_timeout` and ends
    /// the call as a failure now; the permits stay held. `false` if it was reported already
    /// or the permit is released.
    pub(crate) fn timed_out(&self, py: Python<'_>) -> bool {
        self.lock(py).as_mut().is_some_and(CoreCall::timed_out)
    }

    /// How long the host lets the work run (`None`: no `call_timeout`, or released).
    pub(crate) fn call_timeout(&self, py: Python<'_>) -> Option<Duration> {
        self.lock(py).as_ref().and_then(CoreCall::call_timeout)
    }

    /// The `CallTimeoutError` of this permit's call.
    pub(crate) fn call_timeout_err(&self, py: Python<'_>) -> PyErr {
        self.weak.upgrade().map_or_else(
            || PyValueError::new_err("the bulkhead of this permit is gone"),
            |bh| {
                let r = Rejection::new(Reason::CallTimeout, bh.snapshot());
                rejection_err(py, &r, self.key.as_deref())
            },
        )
    }
}

#[pymethods]
impl Permit {
    /// Returns the permits, recording how the call ended: `outcome` is `"success"` (the
    /// default), `"failure"`, `"ignored"` (cancelled; counts nothing) or `"overload"` (HTTP
    /// 429: a failure for the adaptive limit, a success for the breaker). Idempotent: `True`
    /// the first time, `False` afterwards (counted in `released_twice_total`). Raises
    /// `TypeError` / `ValueError` for a bad `outcome` (nothing is released).
    #[pyo3(signature = (outcome=None))]
    fn release(&self, py: Python<'_>, outcome: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let outcome = outcome.map_or(Ok(Outcome::Success), outcome_arg)?;
        let ended = self.end(py, outcome);
        if let Some(bh) = self.weak.upgrade().filter(|_| !ended) {
            bh.record_double_release();
        }
        Ok(ended)
    }

    /// Releases silently if still held (never counted as a second release), recording
    /// `outcome`. For hullguard's integrations (`guard`, httpx).
    fn _finish(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.end(py, outcome_arg(outcome)?))
    }

    /// The guarded call overran `call_timeout` (reported by the host's timer or a measured
    /// sync call): counts `call_timeout` and ends the call as a failure now (the permits stay
    /// held until released; that release records nothing more). Returns the
    /// `CallTimeoutError` to raise; a second report counts nothing.
    fn _call_timed_out(&self, py: Python<'_>) -> Py<PyAny> {
        self.timed_out(py);
        self.call_timeout_err(py).into_value(py).into_any()
    }

    /// Returns `n` of the held permits now (a refund once actual usage is known); the rest stay
    /// held. `TypeError` unless `n` is an `int`; `ValueError` for `n` outside `1..=weight` or
    /// on a released permit (nothing changes).
    fn release_partial(&self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(n, "n", 1, u64::MAX)?;
        let mut call = self.lock(py);
        let call = call
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("permit already released"))?;
        call.release_partial(n)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Permits still held (0 once released).
    #[getter]
    fn weight(&self, py: Python<'_>) -> u64 {
        self.lock(py).as_ref().map_or(0, CoreCall::weight)
    }

    /// Whether `release()` ran (or the permit was returned by `with` / `async with`).
    #[getter]
    fn released(&self, py: Python<'_>) -> bool {
        self.lock(py).is_none()
    }

    /// The registry key of its bulkhead, or `None`.
    #[getter]
    fn key(&self) -> Option<String> {
        self.key.clone()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Releases (silently if already released), classifying the block's exception: none →
    /// success, `asyncio.CancelledError` → ignored, any other → failure. Never swallows it.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) {
        self.end(py, classify_exit(exc_type));
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let key = self.key.as_ref().map(|k| format!(" key={k:?}"));
        format!(
            "<Permit weight={} released={}{}>",
            self.weight(py),
            self.released(py),
            key.unwrap_or_default()
        )
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // Finalized while held: counted in `leaked_total`, ended `ignored`, released.
        let held = self.call.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(call) = held.take() {
            call.reclaim();
        }
    }
}
