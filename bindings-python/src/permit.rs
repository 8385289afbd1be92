//! `Permit`: permits held by one acquire. `release()` is idempotent (a second explicit call
//! returns `False` and is counted in `released_twice_total`); a permit finalized while held is
//! returned and counted in `leaked_total`. A released permit keeps no outside handle on its
//! bulkhead (a registry may evict it).

use std::sync::{Arc, Weak};

use hullguard_core::Bulkhead as CoreBulkhead;
use pyo3::{exceptions::PyValueError, prelude::*};

use crate::errors::count_arg;

/// Permits held by one acquire; see the module docs.
#[pyclass(module = "hullguard._native", name = "Permit")]
pub(crate) struct Permit {
    held: Option<Arc<CoreBulkhead>>,
    weak: Weak<CoreBulkhead>,
    weight: u64,
    key: Option<String>,
}

impl Permit {
    pub(crate) fn new(bh: Arc<CoreBulkhead>, weight: u64, key: Option<String>) -> Self {
        Self {
            weak: Arc::downgrade(&bh),
            held: Some(bh),
            weight,
            key,
        }
    }

    /// Releases if still held. `explicit` calls on a released permit are counted.
    pub(crate) fn release_inner(&mut self, explicit: bool) -> bool {
        match self.held.take() {
            Some(bh) => {
                if self.weight > 0 {
                    bh.release_units(self.weight);
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
    fn release(&mut self) -> bool {
        self.release_inner(true)
    }

    /// Returns `n` of the held permits now (a refund); the rest stay held.
    fn release_partial(&mut self, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(n, "n", 1, u64::MAX)?;
        let Some(bh) = &self.held else {
            return Err(PyValueError::new_err("permit already released"));
        };
        if n > self.weight {
            return Err(PyValueError::new_err(format!(
                "n must be in 1..={} (permits held), got {n}",
                self.weight
            )));
        }
        self.weight -= n;
        bh.release_units(n);
        Ok(())
    }

    /// Permits still held (0 once released).
    #[getter]
    fn weight(&self) -> u64 {
        if self.held.is_some() { self.weight } else { 0 }
    }

    /// Whether `release()` ran (or the permit was returned by `with` / `async with`).
    #[getter]
    fn released(&self) -> bool {
        self.held.is_none()
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
    fn __exit__(&mut self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release_inner(false);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<Permit weight={} released={}{}>",
            self.weight(),
            self.held.is_none(),
            self.key
                .as_ref()
                .map(|k| format!(" key={k:?}"))
                .unwrap_or_default()
        )
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(bh) = self.held.take() {
            if self.weight > 0 {
                bh.record_leak(self.weight);
                bh.release_units(self.weight);
            }
        }
    }
}
