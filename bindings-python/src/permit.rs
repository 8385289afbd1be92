//! `Permit`: permits held by one acquire. `release()` is idempotent (a second explicit call
//! returns `False` and is counted in `released_twice_total`); a permit finalized while held is
//! returned and counted in `leaked_total`. A released permit keeps no outside handle on its
//! bulkhead (a registry may evict it).

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use hullguard_core::{Bulkhead as CoreBulkhead, CallStart, Outcome};
use pyo3::{exceptions::PyValueError, prelude::*};

use crate::{
    errors::count_arg,
    policy::{call_timeout_err, classify_exit, outcome_arg},
};

/// What a permit holds. Behind a mutex that is held only to take or change it, never while
/// the release runs (a release may wake waiters, which runs Python code that may touch this
/// permit again, from this thread or another).
struct Held {
    bh: Option<Arc<CoreBulkhead>>,
    weight: u64,
    /// The guarded call (DESIGN §4), ended once: at the release, or by the `call_timeout`
    /// deadline (then `None`).
    call: Option<CallStart>,
}

/// Permits held by one acquire; see the module docs. Thread-safe.
#[pyclass(module = "hullguard._native", name = "Permit", frozen)]
pub(crate) struct Permit {
    held: Mutex<Held>,
    weak: Weak<CoreBulkhead>,
    key: Option<String>,
}

impl Permit {
    pub(crate) fn new(
        bh: Arc<CoreBulkhead>,
        weight: u64,
        key: Option<String>,
        call: CallStart,
    ) -> Self {
        Self {
            weak: Arc::downgrade(&bh),
            held: Mutex::new(Held {
                bh: Some(bh),
                weight,
                call: Some(call),
            }),
            key,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the call out (it is then ended by the caller; the release records nothing).
    pub(crate) fn take_call(&self) -> Option<CallStart> {
        self.lock().call.take()
    }

    /// Releases if still held, ending the call with `outcome` first (unless the call timeout
    /// ended it already). `explicit` calls on a released permit are counted.
    pub(crate) fn release_inner(&self, explicit: bool, outcome: Outcome) -> bool {
        let taken = {
            let mut h = self.lock();
            h.bh.take().map(|bh| (bh, h.weight, h.call.take()))
        };
        match taken {
            Some((bh, weight, call)) => {
                if let Some(call) = call {
                    bh.end_call(call, outcome);
                }
                if weight > 0 {
                    bh.release_units(weight);
                }
                true
            }
            None => {
                if explicit {
                    if let Some(bh) = self.weak.upgrade() {
                        bh.record_double_release();
                    }
                }
                false
            }
        }
    }
}

#[pymethods]
impl Permit {
    /// Returns the permits, recording how the call ended: `outcome` is `"success"` (the
    /// default), `"failure"`, `"ignored"` (cancelled; counts nothing) or `"overload"` (HTTP
    /// 429: a failure for the adaptive limit, a success for the breaker). Idempotent: `True`
    /// the first time, `False` afterwards (counted in `released_twice_total`).
    #[pyo3(signature = (outcome=None))]
    fn release(&self, outcome: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let outcome = match outcome.filter(|o| !o.is_none()) {
            Some(o) => outcome_arg(o)?,
            None => Outcome::Success,
        };
        Ok(self.release_inner(true, outcome))
    }

    /// Releases silently if still held (never counted as a second release), recording
    /// `outcome`. For hullguard's integrations (httpx).
    fn _finish(&self, outcome: &Bound<'_, PyAny>) -> PyResult<bool> {
        let outcome = outcome_arg(outcome)?;
        Ok(self.release_inner(false, outcome))
    }

    /// The guarded call overran `call_timeout`: counts `call_timeout`, ends the call as a
    /// failure now (the permits stay held until released) and returns the
    /// `CallTimeoutError` to raise. Does nothing but build the error if the call has ended.
    fn _call_timed_out(&self, py: Python<'_>) -> Py<PyAny> {
        let (bh, call) = {
            let mut h = self.lock();
            (h.bh.clone(), h.call.take())
        };
        let bh = bh.or_else(|| self.weak.upgrade());
        match bh {
            Some(bh) => {
                if let Some(call) = call {
                    bh.end_call_timed_out(call);
                }
                call_timeout_err(py, &bh, self.key.as_deref())
            }
            None => PyValueError::new_err("the bulkhead of this permit is gone"),
        }
        .into_value(py)
        .into_any()
    }

    /// Returns `n` of the held permits now (a refund); the rest stay held.
    fn release_partial(&self, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(n, "n", 1, u64::MAX)?;
        let bh = {
            let mut h = self.lock();
            let Some(bh) = h.bh.clone() else {
                return Err(PyValueError::new_err("permit already released"));
            };
            if n > h.weight {
                return Err(PyValueError::new_err(format!(
                    "n must be in 1..={} (permits held), got {n}",
                    h.weight
                )));
            }
            h.weight -= n;
            bh
        };
        bh.release_units(n);
        Ok(())
    }

    /// Permits still held (0 once released).
    #[getter]
    fn weight(&self) -> u64 {
        let h = self.lock();
        if h.bh.is_some() { h.weight } else { 0 }
    }

    /// Whether `release()` ran (or the permit was returned by `with` / `async with`).
    #[getter]
    fn released(&self) -> bool {
        self.lock().bh.is_none()
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
    /// success, `asyncio.CancelledError` → ignored, any other → failure.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.release_inner(false, classify_exit(exc_type));
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<Permit weight={} released={}{}>",
            self.weight(),
            self.released(),
            self.key
                .as_ref()
                .map(|k| format!(" key={k:?}"))
                .unwrap_or_default()
        )
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let h = self.held.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(bh) = h.bh.take() {
            // Finalized while held: the call ends `ignored` (DESIGN §4).
            if let Some(call) = h.call.take() {
                bh.end_call(call, Outcome::Ignored);
            }
            if h.weight > 0 {
                bh.record_leak(h.weight);
                bh.release_units(h.weight);
            }
        }
    }
}
