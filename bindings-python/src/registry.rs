//! `Registry`: one bulkhead per key (per origin, per database, per provider).

use std::sync::Arc;

use hullguard_core::{
    Bulkhead as CoreBulkhead, KeyedError, Registry as CoreRegistry, RegistryConfig,
    config::{PartialConfig, Section},
    origin_key as core_origin_key,
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyDict, PyString, PyTuple},
};

use crate::{
    awaitable::AcquireContext,
    bulkhead::{Bulkhead, acquire_sync_on, clock_source, request_arg, try_acquire_on},
    errors::acquire_err,
    options::{self, config_err, count_arg, timeout_arg, type_name},
    permit::Permit,
    policy::PyObserver,
    stats::stats_dict,
};

static DEEPCOPY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn deepcopy<'py>(v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    DEEPCOPY.import(v.py(), "copy", "deepcopy")?.call1((v,))
}

fn keyed_err(py: Python<'_>, e: &KeyedError) -> PyErr {
    acquire_err(py, &e.error, Some(&e.key))
}

/// The `overrides` argument: `{key: {option: value}}`, each read like the defaults (messages
/// start with `overrides["key"]: `).
fn overrides_arg(o: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, PartialConfig)>> {
    let Some(o) = o else { return Ok(Vec::new()) };
    let o = o.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "overrides must be a dict of dicts, not {}",
            type_name(o)
        ))
    })?;
    let entry = |(k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>)| {
        let key: String = k.extract().map_err(|_| {
            PyTypeError::new_err(format!("overrides keys must be str, not {}", type_name(&k)))
        })?;
        let prefix = format!("overrides[{key:?}]: ");
        if v.is_none() {
            // The core's null rule: an override that sets nothing.
            return Ok((key, PartialConfig::new()));
        }
        let d = v.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!("{prefix}must be a dict, not {}", type_name(&v)))
        })?;
        let partial = options::parse(d, Section::Bulkhead, &prefix, PyValueError::new_err)?;
        Ok((key, partial))
    };
    o.iter().map(entry).collect()
}

/// Independent bulkheads per key, created on first use from the defaults (or the key's entry
/// in `overrides`). At `max_keys` a new key evicts the least recently used idle entry with no
/// outside handle, or is rejected `key_limit`. Thread-safe.
///
/// The defaults are a bulkhead's options (see `Bulkhead`), plus `max_keys`. Each
/// `overrides[key]` dict is merged key by key over them by the core (its `"resilience"` part by
/// part: its `"breaker"` dict over the default `"breaker"` dict). A `None` value in an
/// override is not given, so the defaults' value is kept; except that a part or
/// `"call_timeout"` set to `None` turns it off for that key.
/// URL-shaped override keys (`scheme://…`) are canonicalised with `origin_key`, so
/// `"https://Slow.example"` configures the key `origin_key("https://slow.example/")`; two
/// override keys with the same canonical form raise `ValueError`. Lookups (`get`, `acquire`,
/// …) use keys exactly as given. `on_state_change(key, old, new)` receives every key's breaker
/// transitions.
#[pyclass(module = "hullguard._native", name = "Registry", subclass, frozen)]
pub(crate) struct Registry {
    reg: Arc<CoreRegistry>,
    /// A deep copy of the `overrides` argument, for the getter.
    overrides: Py<PyAny>,
}

impl Registry {
    fn bulkhead(&self, py: Python<'_>, key: &str) -> PyResult<Arc<CoreBulkhead>> {
        self.reg.get(key).map_err(|e| keyed_err(py, &e))
    }
}

#[pymethods]
impl Registry {
    /// `Registry(max_concurrent=10, max_queue=100, queue_timeout=30.0, enabled=True, *,
    /// budget=None, max_queued_cost=None, observe="off", max_orphaned=0, start_limit=None,
    /// max_reservations=0, cancel_on_overrun=False,
    /// resilience=None, overrides=None, max_keys=1024, on_state_change=None)`; see the class
    /// docs.
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let py = args.py();
        let d = options::arguments("Registry", args, kwargs)?;
        let observer = PyObserver::from_arg(options::take(&d, "on_state_change")?.as_ref())?;
        let clock = clock_source(options::take(&d, "_clock")?);
        let given = options::take(&d, "overrides")?;
        let overrides = overrides_arg(given.as_ref())?;
        let defaults = options::parse(&d, Section::Registry, "", PyTypeError::new_err)?;
        let config = RegistryConfig::from_partial(&defaults, overrides)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let reg = CoreRegistry::with_observer(config, clock, observer)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let empty = || Ok(PyDict::new(py).into_any());
        let overrides = given.as_ref().map_or_else(empty, deepcopy)?;
        Ok(Self {
            reg: Arc::new(reg),
            overrides: overrides.unbind(),
        })
    }

    /// The bulkhead of `key` (created on first use). While the returned object lives, the
    /// entry is never evicted.
    fn get(&self, py: Python<'_>, key: &str) -> PyResult<Bulkhead> {
        Bulkhead::wrap(py, self.bulkhead(py, key)?, Some(key.to_owned()))
    }

    /// `bh.acquire()` on `key`'s bulkhead: awaitable and async context manager. A key that
    /// cannot be created (`key_limit`, `shutdown`) raises when awaited.
    #[pyo3(signature = (key, weight=None, timeout=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        let bh = match self.bulkhead(py, key) {
            Ok(bh) => bh,
            Err(e) => return Ok(AcquireContext::failed(Some(key.to_owned()), e)),
        };
        let request = request_arg(&bh, weight, timeout)?;
        Ok(AcquireContext::new(bh, Some(key.to_owned()), request, None))
    }

    /// Decorator: every call of the function holds `weight` permits of `key`'s bulkhead (its
    /// `call_timeout` is the key's).
    #[pyo3(signature = (key, *, weight=None, timeout=None))]
    fn guard(
        slf: &Bound<'_, Self>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        timeout_arg(timeout)?;
        let functools = py.import("functools")?;
        let acquire = functools.call_method1("partial", (slf.getattr("acquire")?, key))?;
        let acquire_sync =
            functools.call_method1("partial", (slf.getattr("acquire_sync")?, key))?;
        let call_timeout = slf.get().reg.config_for(key).resilience.call_timeout;
        let args = (weight, timeout);
        crate::guard::decorator(py, &acquire, &acquire_sync, args, call_timeout, None)
    }

    #[pyo3(signature = (key, weight=None, timeout=None))]
    fn acquire_sync(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let bh = self.bulkhead(py, key)?;
        let request = request_arg(&bh, weight, timeout)?;
        acquire_sync_on(py, &bh, Some(key), request)
    }

    /// A permit of `key`'s bulkhead now, or `None` (`concurrency_limit`). Leaves no outside
    /// handle behind once the permit is released.
    #[pyo3(signature = (key, weight=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Permit>> {
        let bh = self.bulkhead(py, key)?;
        let weight = request_arg(&bh, weight, None)?.weight;
        try_acquire_on(py, &bh, Some(key), weight)
    }

    fn set_limit(&self, py: Python<'_>, key: &str, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        let bh = self.bulkhead(py, key)?;
        let n = count_arg(limit, "limit", 1, bh.max_concurrent())?;
        bh.set_limit(n).map_err(config_err)
    }

    /// `{key: stats}` for every key.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, s) in self.reg.stats() {
            d.set_item(k, stats_dict(py, &s)?)?;
        }
        Ok(d)
    }

    fn keys(&self) -> Vec<String> {
        let mut k = self.reg.keys();
        k.sort();
        k
    }

    fn close(&self) {
        self.reg.close();
    }

    fn __len__(&self) -> usize {
        self.reg.len()
    }

    #[getter]
    fn max_keys(&self) -> usize {
        self.reg.max_keys()
    }

    /// A deep copy of the per-key overrides given at construction (keys as given).
    #[getter]
    fn overrides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        deepcopy(self.overrides.bind(py))
    }

    /// New keys rejected `key_limit` so far.
    #[getter]
    fn key_limit_rejections(&self) -> u64 {
        self.reg.key_limit_rejections()
    }
}

/// The canonical origin key of `url`: `scheme://host:port`, lowercase, IDNA host, IPv6 in
/// brackets, default port explicit. `TypeError` unless `url` is a `str`; `ValueError` for a URL
/// without an origin.
#[pyfunction]
pub(crate) fn origin_key(url: &Bound<'_, PyAny>) -> PyResult<String> {
    let s = url
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("url must be a str, not {}", type_name(url))))?;
    core_origin_key(&s.to_cow()?).map_err(|e| PyValueError::new_err(e.to_string()))
}
