//! `Permit`: permits held by one acquire. `release()` is idempotent (a second explicit call
//! returns `False` and is counted in `released_twice_total`); a permit finalized while held is
//! returned and counted in `leaked_total`. A released permit keeps no outside handle on its
//! bulkhead (a registry may evict it).

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use hullguard_core::Bulkhead as CoreBulkhead;
use pyo3::{exceptions::PyValueError, prelude::*};

use crate::errors::count_arg;

/// What a permit holds. Behind a mutex that is held only to take or change it, never while
/// the release runs (a release may wake waiters, which runs Python code that may touch this
/// permit again, from this thread or another).
struct Held {
    bh: Option<Arc<CoreBulkhead>>,
    weight: u64,
}

/// Permits held by one acquire; see the module docs. Thread-safe.
#[pyclass(module = "hullguard._native", name = "Permit", frozen)]
pub(crate) struct Permit {
    held: Mutex<Held>,
    weak: Weak<CoreBulkhead>,
    key: Option<String>,
}

impl Permit {
    pub(crate) fn new(bh: Arc<CoreBulkhead>, weight: u64, key: Option<String>) -> Self {
        Self {
            weak: Arc::downgrade(&bh),
            held: Mutex::new(Held {
                bh: Some(bh),
                weight,
            }),
            key,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Releases if still held. `explicit` calls on a released permit are counted.
    pub(crate) fn release_inner(&self, explicit: bool) -> bool {
        let taken = {
            let mut h = self.lock();
            h.bh.take().map(|bh| (bh, h.weight))
        };
        match taken {
            Some((bh, weight)) => {
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
    /// Returns the permits. Idempotent: `True` the first time, `False` afterwards.
    fn release(&self) -> bool {
        self.release_inner(true)
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

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release_inner(false);
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
            if h.weight > 0 {
                bh.record_leak(h.weight);
                bh.release_units(h.weight);
            }
        }
    }
}
