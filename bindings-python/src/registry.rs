//! `Registry`: one bulkhead per key (per origin, per database, per provider).

use std::sync::Arc;

use hullguard_core::{
    Bulkhead as CoreBulkhead, GlobalCap, KeyLimits, KeyedError, MAX_BUDGET, MAX_PERMITS, MAX_QUEUE,
    MAX_REVISION, Registry as CoreRegistry, RegistryConfig, RegistryLimits, RegistryLimitsError,
    Request,
    config::{PartialConfig, Section},
    event::SharedObserver,
    origin_key as core_origin_key,
    stats::ClassStats,
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyDict, PyList, PyString, PyTuple},
};

use crate::{
    awaitable::{AcquireContext, Source, SourceRef},
    bulkhead::{
        Bulkhead, acquire_sync_on, admit_sync_on, class_stats_dict, clock_source, try_acquire_on,
        try_admit_on,
    },
    errors::acquire_err,
    events::PyObserver,
    gateway::{self, Extra},
    metrics,
    options::{self, config_err, count_arg, type_name},
    permit::Permit,
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
    observer: Arc<PyObserver>,
    /// Built with a global cap: each key is a class of one shared admission.
    global: bool,
}

impl Registry {
    fn bulkhead(&self, py: Python<'_>, key: &str) -> PyResult<Arc<CoreBulkhead>> {
        self.reg.get(key).map_err(|e| keyed_err(py, &e))
    }
}

impl Registry {
    fn source(&self, key: &str) -> Source {
        Source::Registry(self.reg.clone(), key.to_owned())
    }

    fn source_ref<'a>(&'a self, key: &'a str) -> SourceRef<'a> {
        SourceRef::Registry(&self.reg, key)
    }

    /// `key`'s request (its `max_concurrent` bounds `weight`; a registry's keys have no class
    /// names: `admission_class` is an index). Creates no key. Under a global cap the key is
    /// the request's class (the core sets it): an `admission_class` is refused, not ignored.
    fn request(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        extra: Extra<'_, '_>,
    ) -> PyResult<Request> {
        if self.global && extra.class.is_some_and(|c| !c.is_none()) {
            return Err(PyValueError::new_err(
                "admission_class cannot be given under a global cap: each key is its own class \
                 of the shared admission",
            ));
        }
        // The key's configuration is looked up only to bound a weight given (the default 1
        // needs none: the plain path copies no configuration).
        let max = weight.map_or(u64::MAX, |_| self.reg.config_for(key).max_concurrent);
        gateway::request(py, max, &[], weight, timeout, extra)
    }
}

/// A `global_cap={"limit": n, "max_queue": m}` argument.
fn global_arg(v: &Bound<'_, PyAny>) -> PyResult<GlobalCap> {
    let d = v.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "global_cap must be a dict {{\"limit\", \"max_queue\"}}, not {}",
            type_name(v)
        ))
    })?;
    let (mut limit, mut max_queue) = (None, 0);
    for (k, x) in d.iter() {
        let k: String = k
            .extract()
            .map_err(|_| PyTypeError::new_err("global_cap: option names must be str"))?;
        match k.as_str() {
            "limit" => limit = Some(count_arg(&x, "global_cap.limit", 1, MAX_PERMITS)?),
            "max_queue" => max_queue = count_arg(&x, "global_cap.max_queue", 0, MAX_QUEUE)?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "global_cap: unknown option {other:?} (known: \"limit\", \"max_queue\")"
                )));
            }
        }
    }
    let limit = limit.ok_or_else(|| PyValueError::new_err("global_cap.limit is required"))?;
    Ok(GlobalCap { limit, max_queue })
}

/// One key's (or the defaults', or the global cap's) limits of `Registry.apply_limits`.
fn key_limits(v: &Bound<'_, PyAny>, what: &str) -> PyResult<KeyLimits> {
    let d = v.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!("{what} must be a dict, not {}", type_name(v)))
    })?;
    let mut l = KeyLimits::default();
    for (k, x) in d.iter() {
        let k: String = k
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("{what}: option names must be str")))?;
        let name = format!("{what}.{k}");
        let known = ["limit", "budget", "max_queue", "queue_timeout"].contains(&k.as_str());
        if known && x.is_none() {
            continue; // not given (an unknown name is refused even as `None`)
        }
        match k.as_str() {
            "limit" => l.limit = Some(count_arg(&x, &name, 0, MAX_PERMITS)?),
            "budget" => l.budget = Some(count_arg(&x, &name, 0, MAX_BUDGET)?),
            "max_queue" => l.max_queue = Some(count_arg(&x, &name, 0, MAX_QUEUE)?),
            "queue_timeout" => l.queue_timeout = options::named_timeout_arg(Some(&x), &name)?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "{what}: unknown option {other:?} (known: \"limit\", \"budget\", \"max_queue\", \"queue_timeout\")"
                )));
            }
        }
    }
    Ok(l)
}

#[pymethods]
impl Registry {
    /// `Registry(max_concurrent=10, max_queue=100, queue_timeout=30.0, enabled=True, *,
    /// budget=None, max_queued_cost=None, observe="off", max_orphaned=0, start_limit=None,
    /// max_reservations=0, cancel_on_overrun=False, min_service_time=0, queue_delay_target=0,
    /// queue_delay_interval=0.1, adaptive_lifo=False,
    /// resilience=None, overrides=None, max_keys=1024, on_state_change=None, events=False,
    /// global_cap=None)`; see the class docs. `global_cap={"limit": n, "max_queue": m}`: one
    /// admission over every key (docs/design.md §9.2): at most `n` permits held by all keys
    /// together, each key a class of it with its own `max_concurrent` as its ceiling.
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let py = args.py();
        let d = options::arguments("Registry", args, kwargs)?;
        let on_state_change = options::take(&d, "on_state_change")?;
        let events = options::take(&d, "events")?;
        let observer = PyObserver::from_args(on_state_change.as_ref(), events.as_ref())?;
        let clock = clock_source(options::take(&d, "_clock")?);
        let given = options::take(&d, "overrides")?;
        let global = options::take(&d, "global_cap")?
            .map(|g| global_arg(&g))
            .transpose()?;
        let overrides = overrides_arg(given.as_ref())?;
        let defaults = options::parse(&d, Section::Registry, "", PyTypeError::new_err)?;
        let mut config = RegistryConfig::from_partial(&defaults, overrides)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let has_global = global.is_some();
        config.global = global;
        let shared: SharedObserver = observer.clone();
        let reg = CoreRegistry::with_observer(config, clock, Some(shared))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let empty = || Ok(PyDict::new(py).into_any());
        let overrides = given.as_ref().map_or_else(empty, deepcopy)?;
        Ok(Self {
            reg: Arc::new(reg),
            overrides: overrides.unbind(),
            observer,
            global: has_global,
        })
    }

    /// The bulkhead of `key` (created on first use). While the returned object lives, the
    /// entry is never evicted. (Under a global cap, acquire through the registry: the key's
    /// bulkhead alone does not see the cap.)
    fn get(&self, py: Python<'_>, key: &str) -> PyResult<Bulkhead> {
        Bulkhead::wrap(py, self.bulkhead(py, key)?, Some(key.to_owned()))
    }

    /// `bh.acquire()` on `key`'s bulkhead (under a global cap, the shared admission):
    /// awaitable and async context manager; the arguments as `Bulkhead.acquire`. A key that
    /// cannot be created (`key_limit`, `shutdown`) raises when awaited.
    #[pyo3(signature = (key, weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        let request = self.request(py, key, weight, timeout, extra)?;
        let key_s = Some(key.to_owned());
        Ok(AcquireContext::from_source(
            self.source(key),
            key_s,
            request,
            None,
        ))
    }

    /// `acquire` that never raises a refusal: awaiting it gives an `Admission`.
    #[pyo3(signature = (key, weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        Ok(self
            .acquire(
                py,
                key,
                weight,
                timeout,
                cost,
                admission_class,
                observe,
                deadline,
            )?
            .non_throwing())
    }

    /// Decorator: every call of the function holds `weight` permits of `key`'s bulkhead (its
    /// `call_timeout` is the key's).
    #[pyo3(signature = (key, *, weight=None, timeout=None, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn guard(
        slf: &Bound<'_, Self>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        // The weight is checked when called (the key's bulkhead may not exist yet).
        slf.get().request(py, key, None, timeout, extra)?;
        let functools = py.import("functools")?;
        let acquire = functools.call_method1("partial", (slf.getattr("acquire")?, key))?;
        let acquire_sync =
            functools.call_method1("partial", (slf.getattr("acquire_sync")?, key))?;
        let args = (weight, timeout);
        let kw = crate::guard::extra_kwargs(py, extra)?;
        crate::guard::decorator(py, &acquire, &acquire_sync, args, kw, None)
    }

    #[pyo3(signature = (key, weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_sync(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        let request = self.request(py, key, weight, timeout, extra)?;
        acquire_sync_on(py, self.source_ref(key), Some(key), request)
    }

    /// `acquire_sync` that never raises a refusal: an `Admission`.
    #[pyo3(signature = (key, weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn admit_sync(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        let request = self.request(py, key, weight, timeout, extra)?;
        admit_sync_on(py, self.source_ref(key), Some(key), request)
    }

    /// A permit of `key`'s bulkhead now, or `None` (`concurrency_limit`). Leaves no outside
    /// handle behind once the permit is released.
    #[pyo3(signature = (key, weight=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn try_acquire(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Permit>> {
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        let request = self.request(py, key, weight, None, extra)?;
        try_acquire_on(py, self.source_ref(key), Some(key), request)
    }

    /// `try_acquire` that never raises a refusal: an `Admission`.
    #[pyo3(signature = (key, weight=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn try_admit(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        let request = self.request(py, key, weight, None, extra)?;
        try_admit_on(py, self.source_ref(key), Some(key), request)
    }

    /// The dry run on `key` (see `Bulkhead.would_admit`); never creates the key.
    #[pyo3(signature = (key, weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn would_admit(
        &self,
        py: Python<'_>,
        key: &str,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        let request = self.request(py, key, weight, timeout, extra)?;
        gateway::would_admit(py, self.reg.would_admit(key, &request), Some(key))
    }

    /// Under a global cap: `key`'s counts as a class of the shared admission (`{"class",
    /// "name", "in_flight", "queued", "ceiling", "observed", …}`), or `None` (no cap, or no
    /// such key).
    fn key_stats<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.reg
            .key_stats(key)
            .map(|c| class_stats_dict(py, &c, Some(key.to_owned())))
            .transpose()
    }

    /// Under a global cap: the shared admission's stats dict (`limit` the cap, `active` what
    /// all keys hold); `None` without one.
    fn global_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.reg
            .global_stats()
            .map(|s| stats_dict(py, &s))
            .transpose()
    }

    /// Installs a control plane's limits for the whole registry (docs/design.md §9) if
    /// `revision` is above the one in force: `defaults` for every key (those created later
    /// too), `overrides={key: {...}}` per key (canonical keys), and under a global cap
    /// `global_cap` for the shared admission; each a dict of `limit` (0: the kill switch),
    /// `budget`, `max_queue`, `queue_timeout` (seconds). Under a global cap a key's entry takes
    /// only `limit` (its ceiling). Validated whole: nothing changes unless every key takes it.
    /// Raises `StaleRevision` (`.current`) or `ValueError` naming the key and the value.
    #[pyo3(signature = (revision, *, defaults=None, overrides=None, global_cap=None))]
    fn apply_limits(
        &self,
        py: Python<'_>,
        revision: &Bound<'_, PyAny>,
        defaults: Option<&Bound<'_, PyAny>>,
        overrides: Option<&Bound<'_, PyAny>>,
        global_cap: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut l = RegistryLimits::new(count_arg(revision, "revision", 0, MAX_REVISION)?);
        if let Some(d) = defaults.filter(|d| !d.is_none()) {
            l.defaults = key_limits(d, "defaults")?;
        }
        if let Some(g) = global_cap.filter(|g| !g.is_none()) {
            l.global = Some(key_limits(g, "global_cap")?);
        }
        if let Some(o) = overrides.filter(|o| !o.is_none()) {
            let o = o.cast::<PyDict>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "overrides must be a dict of dicts, not {}",
                    type_name(o)
                ))
            })?;
            for (k, v) in o.iter() {
                let key: String = k.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "overrides keys must be str, not {}",
                        type_name(&k)
                    ))
                })?;
                let limits = key_limits(&v, &format!("overrides[{key:?}]"))?;
                l.overrides.insert(key, limits);
            }
        }
        match self.reg.apply_limits(&l) {
            Ok(()) => Ok(()),
            Err(RegistryLimitsError::Stale { current }) => {
                let c = current.into_pyobject(py)?.into_any().unbind();
                let msg = RegistryLimitsError::Stale { current }.to_string();
                Err(gateway::py_error(
                    py,
                    "StaleRevision",
                    msg,
                    &[("current", c)],
                ))
            }
            // The core's messages name its Rust fields; these name the Python arguments.
            Err(RegistryLimitsError::NoGlobal) => Err(PyValueError::new_err(
                "global_cap: this registry was built without a global cap \
                 (Registry(global_cap={...})); nothing was applied",
            )),
            Err(RegistryLimitsError::PerKey { key, field }) => {
                let at = key.map_or_else(|| "defaults".to_owned(), |k| format!("overrides[{k:?}]"));
                Err(PyValueError::new_err(format!(
                    "{at}.{field}: under a global cap a key's limits take only \"limit\" \
                     ({field} belongs in global_cap=); nothing was applied"
                )))
            }
            Err(RegistryLimitsError::Global(e)) => Err(PyValueError::new_err(format!(
                "global_cap: {e}; nothing was applied"
            ))),
            Err(e) => Err(PyValueError::new_err(e.to_string())),
        }
    }

    /// The revision every key enforces (0 before any `apply_limits`).
    #[getter]
    fn revision(&self) -> u64 {
        self.reg.revision()
    }

    /// As `Bulkhead.on`, for every key's events (`event["key"]` names the key).
    fn on(&self, event: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        self.observer.on(event, callback)
    }

    /// As `Bulkhead.off`.
    fn off(&self, event: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.observer.off(event, callback)
    }

    /// Event callbacks (and `on_state_change` calls) that raised so far.
    #[getter]
    fn listener_errors(&self) -> u64 {
        self.observer.errors()
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

    /// The samples of the core's metric table (docs/design.md §8.3) for the exporters:
    /// `[(key, samples)]`, one entry per key that exists now (reading creates no key; an
    /// evicted key has none), samples as `Bulkhead._metric_samples()`. Under a global cap the
    /// keys are classes of one shared admission: one entry, key `None`, whose per-class
    /// samples carry the registry keys as their `class`.
    fn _metric_samples<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        if self.global {
            let Some(shared) = self.reg.global_stats() else {
                return Ok(out);
            };
            let mut keyed: Vec<(String, ClassStats)> = self
                .reg
                .keys()
                .into_iter()
                .filter_map(|k| self.reg.key_stats(&k).map(|c| (k, c)))
                .collect();
            keyed.sort_by_key(|(_, c)| c.class);
            let classes: Vec<ClassStats> = keyed.iter().map(|(_, c)| *c).collect();
            let name = |c: u16| {
                keyed
                    .iter()
                    .find(|(_, s)| s.class == c)
                    .map_or_else(|| c.to_string(), |(k, _)| k.clone())
            };
            out.append((
                py.None(),
                metrics::stats_samples(py, &shared, &classes, &name)?,
            ))?;
            return Ok(out);
        }
        let none = |c: u16| c.to_string();
        for (k, s) in self.reg.stats() {
            out.append((k, metrics::stats_samples(py, &s, &[], &none)?))?;
        }
        Ok(out)
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
