//! `Registry`: one bulkhead per key (per origin, per database, per provider).

use std::{collections::HashMap, sync::Arc};

use hullguard_core::{
    Config, KeyedError, Registry as CoreRegistry, RegistryConfig, origin_key as core_origin_key,
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    types::PyDict,
};

use crate::{
    awaitable::AcquireContext,
    bulkhead::{
        Bulkhead, Options, acquire_sync_on, clock_source, config_from, try_acquire_on, weight_arg,
    },
    errors::{acquire_err, count_arg, seconds_arg},
    permit::Permit,
    policy::{PyObserver, merge_resilience},
    stats::stats_dict,
};

const CONFIG_KEYS: [&str; 5] = [
    "max_concurrent",
    "max_queue",
    "queue_timeout",
    "enabled",
    "resilience",
];

/// One override dict merged key by key over the defaults (its `resilience` merged over the
/// defaults' `resilience`, section by section).
fn override_config(
    key: &str,
    d: &Bound<'_, PyAny>,
    defaults: Config,
    default_resilience: Option<&Bound<'_, PyAny>>,
) -> PyResult<Config> {
    let d = d
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("overrides[{key:?}] must be a dict")))?;
    for k in d.keys() {
        let name: String = k.extract()?;
        if !CONFIG_KEYS.contains(&name.as_str()) {
            return Err(PyValueError::new_err(format!(
                "overrides[{key:?}]: unknown option {name:?} (expected one of {CONFIG_KEYS:?})"
            )));
        }
    }
    let get = |n: &str| d.get_item(n).ok().flatten();
    let py = d.py();
    let config = merge_resilience(py, default_resilience, get("resilience").as_ref()).and_then(
        |resilience| {
            config_from(
                Options {
                    max_concurrent: get("max_concurrent").as_ref(),
                    max_queue: get("max_queue").as_ref(),
                    queue_timeout: get("queue_timeout").as_ref(),
                    enabled: get("enabled").as_ref(),
                    // Parsed again for this key's max_concurrent (the adaptive defaults follow
                    // it); `None` turns the defaults' policies off.
                    resilience: Some(&resilience),
                },
                defaults,
            )
        },
    );
    config.map_err(|e| {
        // Keep the exception class (TypeError stays TypeError); prefix the key.
        let msg = format!("overrides[{key:?}]: {}", e.value(py));
        if e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(msg)
        } else {
            PyValueError::new_err(msg)
        }
    })
}

fn keyed_err(py: Python<'_>, e: &KeyedError) -> PyErr {
    acquire_err(py, &e.error, Some(&e.key))
}

/// Independent bulkheads per key, created on first use from the defaults (or the key's entry
/// in `overrides`). At `max_keys` a new key evicts the least recently used idle entry with no
/// outside handle, or is rejected `key_limit`. Thread-safe.
///
/// `resilience={...}` (as on `Bulkhead`) applies to every key; an `overrides[key]` dict may
/// carry its own `"resilience"`, merged key by key over the defaults' (its `"breaker"` dict
/// over the default `"breaker"` dict; `None` turns a part off). `on_state_change(key, old,
/// new)` receives every key's breaker transitions.
#[pyclass(module = "hullguard._native", name = "Registry", subclass, frozen)]
pub(crate) struct Registry {
    reg: Arc<CoreRegistry>,
    overrides: Py<PyDict>,
}

impl Registry {
    fn bulkhead(&self, py: Python<'_>, key: &str) -> PyResult<Arc<hullguard_core::Bulkhead>> {
        self.reg.get(key).map_err(|e| keyed_err(py, &e))
    }
}

#[pymethods]
impl Registry {
    #[new]
    #[pyo3(signature = (max_concurrent=None, max_queue=None, queue_timeout=None, enabled=None, *, resilience=None, overrides=None, max_keys=None, on_state_change=None, _clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        max_concurrent: Option<&Bound<'_, PyAny>>,
        max_queue: Option<&Bound<'_, PyAny>>,
        queue_timeout: Option<&Bound<'_, PyAny>>,
        enabled: Option<&Bound<'_, PyAny>>,
        resilience: Option<&Bound<'_, PyAny>>,
        overrides: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        on_state_change: Option<&Bound<'_, PyAny>>,
        _clock: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let defaults = config_from(
            Options {
                max_concurrent,
                max_queue,
                queue_timeout,
                enabled,
                resilience,
            },
            Config::DEFAULT,
        )?;
        let observer = PyObserver::from_arg(on_state_change)?;
        let max_keys = match max_keys.filter(|v| !v.is_none()) {
            Some(v) => count_arg(v, "max_keys", 1, usize::MAX as u64)? as usize,
            None => 1024,
        };
        let mut map = HashMap::new();
        let copy = PyDict::new(py);
        if let Some(o) = overrides.filter(|v| !v.is_none()) {
            let o = o
                .cast::<PyDict>()
                .map_err(|_| PyTypeError::new_err("overrides must be a dict of dicts"))?;
            for (k, v) in o.iter() {
                let key: String = k
                    .extract()
                    .map_err(|_| PyTypeError::new_err("overrides keys must be str"))?;
                map.insert(
                    key.clone(),
                    override_config(&key, &v, defaults, resilience)?,
                );
                copy.set_item(key, v.cast::<PyDict>()?.copy()?)?;
            }
        }
        let reg = CoreRegistry::with_observer(
            RegistryConfig {
                defaults,
                overrides: map,
                max_keys,
            },
            clock_source(_clock),
            observer,
        )
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Self {
            reg: Arc::new(reg),
            overrides: copy.unbind(),
        })
    }

    /// The bulkhead of `key` (created on first use). While the returned object lives, the
    /// entry is never evicted.
    fn get(&self, py: Python<'_>, key: &str) -> PyResult<Bulkhead> {
        Ok(Bulkhead::wrap(
            self.bulkhead(py, key)?,
            Some(key.to_owned()),
        ))
    }

    /// `bh.acquire()` on `key`'s bulkhead: awaitable and async context manager.
    #[pyo3(signature = (key, weight=None, timeout=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        let bh = match self.reg.get(key) {
            Ok(bh) => bh,
            Err(e) => {
                // Raised when awaited, like every other rejection.
                let placeholder = Arc::new(
                    hullguard_core::Bulkhead::new(Config {
                        max_queue: 0,
                        ..Config::DEFAULT
                    })
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
                );
                return Ok(AcquireContext::failed(
                    placeholder,
                    Some(key.to_owned()),
                    keyed_err(py, &e),
                ));
            }
        };
        let w = weight_arg(&bh, weight)?;
        let t = seconds_arg(timeout, "timeout")?.unwrap_or(bh.queue_timeout());
        Ok(AcquireContext::new(bh, Some(key.to_owned()), w, t, None))
    }

    /// Decorator: every call of the function holds `weight` permits of `key`'s bulkhead.
    #[pyo3(signature = (key, *, weight=None, timeout=None))]
    fn guard(
        slf: &Bound<'_, Self>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        seconds_arg(timeout, "timeout")?;
        let acquire = slf.getattr("acquire")?;
        let acquire_sync = slf.getattr("acquire_sync")?;
        let functools = py.import("functools")?;
        let acquire = functools.call_method1("partial", (acquire, key))?;
        let acquire_sync = functools.call_method1("partial", (acquire_sync, key))?;
        let call_timeout = slf.get().reg.config_for(key).resilience.call_timeout;
        crate::guard::decorator(
            py,
            &acquire,
            &acquire_sync,
            (weight, timeout),
            call_timeout,
            None,
        )
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
        let w = weight_arg(&bh, weight)?;
        let t = seconds_arg(timeout, "timeout")?.unwrap_or(bh.queue_timeout());
        acquire_sync_on(py, &bh, Some(key), w, t)
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
        let w = weight_arg(&bh, weight)?;
        try_acquire_on(py, &bh, Some(key), w)
    }

    fn set_limit(&self, py: Python<'_>, key: &str, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        let bh = self.bulkhead(py, key)?;
        let n = count_arg(limit, "limit", 1, bh.max_concurrent())?;
        bh.set_limit(n)
            .map_err(|e| PyValueError::new_err(e.to_string()))
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

    /// A copy of the per-key overrides given at construction (inner dicts copied too).
    #[getter]
    fn overrides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (k, v) in self.overrides.bind(py).iter() {
            out.set_item(k, v.cast::<PyDict>()?.copy()?)?;
        }
        Ok(out)
    }

    /// New keys rejected `key_limit` so far.
    #[getter]
    fn key_limit_rejections(&self) -> u64 {
        self.reg.key_limit_rejections()
    }
}

/// The canonical origin key of `url`: `scheme://host:port`, lowercase, IDNA host, IPv6 in
/// brackets, default port explicit. Raises `ValueError` for a URL without one.
#[pyfunction]
pub(crate) fn origin_key(url: &str) -> PyResult<String> {
    core_origin_key(url).map_err(|e| PyValueError::new_err(e.to_string()))
}
