//! The policies around a bulkhead (DESIGN §4) as Python sees them: the `resilience={...}`
//! option, the `on_state_change` observer, outcomes (`permit.release(outcome=...)`, the
//! classification of an exception leaving `with` / `async with`) and the `call_timeout` timer
//! of `async with`. Every decision stays in the core: this converts and wires.

use std::{
    ops::Deref,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering::SeqCst},
    },
    time::Duration,
};

use hullguard_core::{
    AcquireError, Bulkhead as CoreBulkhead, CallStart, ConfigError, Outcome, Reason, Rejection,
    Resilience,
    adaptive::{AdaptiveConfig, Algorithm},
    breaker::{BreakerConfig, CircuitState, Observer},
    policy::SharedObserver,
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyBool, PyDict, PyFloat, PyInt, PyString},
};

use crate::errors::{count_arg, rejection_err};

const SECTIONS: [&str; 3] = ["adaptive", "breaker", "call_timeout"];
const ADAPTIVE_KEYS: [&str; 11] = [
    "algorithm",
    "initial_limit",
    "min_limit",
    "max_limit",
    "target_latency",
    "increase_step",
    "decrease_ratio",
    "smoothing",
    "rtt_tolerance",
    "long_window",
    "queue_size",
];
const BREAKER_KEYS: [&str; 8] = [
    "failure_threshold",
    "error_rate_threshold",
    "error_rate_window",
    "error_rate_buckets",
    "volume_threshold",
    "open_duration",
    "half_open_max_calls",
    "half_open_timeout",
];

// ----- option parsing ------------------------------------------------------------------------

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// An optional dict (`None` = off). Anything else is a `TypeError` naming `name`.
fn opt_dict<'py>(v: &Bound<'py, PyAny>, name: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
    if v.is_none() {
        return Ok(None);
    }
    v.cast::<PyDict>().map(|d| Some(d.clone())).map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be a dict or None, not {}",
            type_name(v)
        ))
    })
}

/// Rejects keys outside `allowed`, naming the first unknown one.
fn check_keys(d: &Bound<'_, PyDict>, name: &str, allowed: &[&str]) -> PyResult<()> {
    for k in d.keys() {
        let Ok(k) = k.extract::<String>() else {
            return Err(PyTypeError::new_err(format!("{name} keys must be str")));
        };
        if !allowed.contains(&k.as_str()) {
            return Err(PyValueError::new_err(format!(
                "{name}: unknown option {k:?} (expected one of {allowed:?})"
            )));
        }
    }
    Ok(())
}

/// A real number (int or float, not a bool).
fn float_opt(v: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    if v.is_instance_of::<PyBool>()
        || !(v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>())
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a number, not {}",
            type_name(v)
        )));
    }
    v.extract::<f64>()
        .map_err(|_| PyValueError::new_err(format!("{name} is out of range, got {v}")))
}

/// A non-negative int (not a bool); its range is the core's to check.
fn u64_opt(v: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    count_arg(v, name, 0, u64::MAX)
}

/// [`u64_opt`] for a `u32` field: a value above `u32::MAX` saturates (every such field's core
/// maximum is lower, so the core still names it).
fn u32_opt(v: &Bound<'_, PyAny>, name: &str) -> PyResult<u32> {
    u64_opt(v, name).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// A duration in seconds: a number `> 0` (NaN, zero and negative have no meaning for any
/// policy duration). Its upper bound is the core's to check.
fn seconds_opt(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Duration> {
    positive_seconds(float_opt(v, name)?, name)
}

/// [`seconds_opt`] of a number already converted.
fn positive_seconds(s: f64, name: &str) -> PyResult<Duration> {
    if s.is_nan() || s <= 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be > 0 seconds, got {s}"
        )));
    }
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{name} is too large, got {s}")))
}

/// Converts the `adaptive` dict over the defaults for `max_concurrent` (ranges: the core's
/// `Config::validate`).
fn adaptive_from(d: &Bound<'_, PyDict>, max_concurrent: u64) -> PyResult<AdaptiveConfig> {
    let name = "resilience.adaptive";
    check_keys(d, name, &ADAPTIVE_KEYS)?;
    let mut a = AdaptiveConfig {
        // Not given: 0, the core's "start at max_limit" (DESIGN §4).
        initial_limit: 0,
        ..AdaptiveConfig::for_max_concurrent(max_concurrent)
    };
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        let n = format!("{name}.{k}");
        match k.as_str() {
            "algorithm" => {
                let s = v.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!("{n} must be a str, not {}", type_name(&v)))
                })?;
                let s: String = s.extract()?;
                a.algorithm = Algorithm::parse(&s).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "{n} must be \"gradient2\" or \"aimd\", got {s:?}"
                    ))
                })?;
            }
            // A given 0 stays out of range (the core names `initial_limit`).
            "initial_limit" => {
                a.initial_limit = match u64_opt(&v, &n)? {
                    0 => u64::MAX,
                    given => given,
                }
            }
            "min_limit" => a.min_limit = u64_opt(&v, &n)?,
            "max_limit" => a.max_limit = u64_opt(&v, &n)?,
            "target_latency" => {
                a.target_latency_ns = u64::try_from(seconds_opt(&v, &n)?.as_nanos())
                    .map_err(|_| PyValueError::new_err(format!("{n} is too large, got {v}")))?;
            }
            "increase_step" => a.increase_step = u64_opt(&v, &n)?,
            "decrease_ratio" => a.decrease_ratio = float_opt(&v, &n)?,
            "smoothing" => a.smoothing = float_opt(&v, &n)?,
            "rtt_tolerance" => a.rtt_tolerance = float_opt(&v, &n)?,
            "long_window" => a.long_window = u64_opt(&v, &n)?,
            "queue_size" => a.queue_size = u64_opt(&v, &n)?,
            _ => unreachable!("checked by check_keys"),
        }
    }
    Ok(a)
}

/// Converts the `breaker` dict over the defaults (ranges: the core's `Config::validate`).
fn breaker_from(d: &Bound<'_, PyDict>) -> PyResult<BreakerConfig> {
    let name = "resilience.breaker";
    check_keys(d, name, &BREAKER_KEYS)?;
    let mut b = BreakerConfig::DEFAULT;
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        let n = format!("{name}.{k}");
        match k.as_str() {
            "failure_threshold" => b.failure_threshold = u32_opt(&v, &n)?,
            "error_rate_threshold" => b.error_rate_threshold = float_opt(&v, &n)?,
            "error_rate_window" => b.error_rate_window = seconds_opt(&v, &n)?,
            "error_rate_buckets" => b.error_rate_buckets = u32_opt(&v, &n)?,
            "volume_threshold" => b.volume_threshold = u32_opt(&v, &n)?,
            "open_duration" => b.open_duration = seconds_opt(&v, &n)?,
            "half_open_max_calls" => b.half_open_max_calls = u32_opt(&v, &n)?,
            "half_open_timeout" => b.half_open_timeout = seconds_opt(&v, &n)?,
            _ => unreachable!("checked by check_keys"),
        }
    }
    Ok(b)
}

/// Converts the `resilience` option (`None`: a plain bulkhead) for a bulkhead of
/// `max_concurrent`. Types only: the caller validates the whole `Config` (the core names the
/// option out of range, mapped by [`config_error`]).
pub(crate) fn resilience_from(v: &Bound<'_, PyAny>, max_concurrent: u64) -> PyResult<Resilience> {
    let name = "resilience";
    let Some(d) = opt_dict(v, name)? else {
        return Ok(Resilience::OFF);
    };
    check_keys(&d, name, &SECTIONS)?;
    let mut r = Resilience::OFF;
    if let Some(a) = d.get_item("adaptive")? {
        if let Some(a) = opt_dict(&a, "resilience.adaptive")? {
            r.adaptive = Some(adaptive_from(&a, max_concurrent)?);
        }
    }
    if let Some(b) = d.get_item("breaker")? {
        if let Some(b) = opt_dict(&b, "resilience.breaker")? {
            r.breaker = Some(breaker_from(&b)?);
        }
    }
    if let Some(t) = d.get_item("call_timeout")?.filter(|t| !t.is_none()) {
        let n = "resilience.call_timeout";
        let s = float_opt(&t, n)?;
        // math.inf: no call timeout (like C's HG_TIMEOUT_INFINITE).
        if s != f64::INFINITY {
            r.call_timeout = Some(positive_seconds(s, n)?);
        }
    }
    Ok(r)
}

/// A core configuration error as a `ValueError` naming the option with its full path
/// (`resilience.breaker.open_duration`, `max_queue`, …).
pub(crate) fn config_error(e: ConfigError) -> PyErr {
    let path = match e.section() {
        Some("resilience") => format!("resilience.{}", e.option()),
        Some(s) => format!("resilience.{s}.{}", e.option()),
        None => e.option().to_owned(),
    };
    PyValueError::new_err(format!("{path}: {e}"))
}

/// Merges an override's `resilience` over the defaults' (key by key: an override's
/// `breaker` dict merges over the default's `breaker` dict; `None` turns a part off). `None`
/// when the key has no policies.
pub(crate) fn merge_resilience<'py>(
    py: Python<'py>,
    defaults: Option<&Bound<'py, PyAny>>,
    over: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let base = match defaults {
        Some(d) => opt_dict(d, "resilience")?,
        None => None,
    };
    let Some(over) = over else {
        return Ok(base.map_or_else(|| py.None().into_bound(py), Bound::into_any));
    };
    let name = "resilience";
    let Some(over) = opt_dict(over, name)? else {
        // `"resilience": None` in an override: a plain bulkhead for that key.
        return Ok(py.None().into_bound(py));
    };
    check_keys(&over, name, &SECTIONS)?;
    let out = match &base {
        Some(b) => b.copy()?,
        None => PyDict::new(py),
    };
    for (k, v) in over.iter() {
        let section: String = k.extract()?;
        let inner = out.get_item(&section)?;
        match (section.as_str(), inner) {
            ("adaptive" | "breaker", Some(old))
                if old.is_instance_of::<PyDict>() && !v.is_none() =>
            {
                let sub = format!("{name}.{section}");
                let v = opt_dict(&v, &sub)?.expect("not None");
                let merged = old.cast::<PyDict>()?.copy()?;
                merged.update(v.as_mapping())?;
                out.set_item(section, merged)?;
            }
            _ => out.set_item(section, v)?,
        }
    }
    Ok(out.into_any())
}

// ----- observer ------------------------------------------------------------------------------

/// `on_state_change(key, old, new)`: a Python callable, called with the GIL after each breaker
/// commit. Its exceptions go to `sys.unraisablehook`, never into the acquire or release that
/// committed the transition. (The core holds no lock of its own while it notifies, so the
/// callback may use the bulkhead or registry.)
pub(crate) struct PyObserver {
    callback: Py<PyAny>,
}

impl PyObserver {
    /// The observer of an `on_state_change` argument (`None`: no observer).
    pub(crate) fn from_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<SharedObserver>> {
        let Some(v) = v.filter(|v| !v.is_none()) else {
            return Ok(None);
        };
        if !v.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "on_state_change must be callable, not {}",
                type_name(v)
            )));
        }
        Ok(Some(Arc::new(PyObserver {
            callback: v.clone().unbind(),
        })))
    }
}

impl Observer for PyObserver {
    fn on_state_change(&self, key: Option<&str>, old: CircuitState, new: CircuitState) {
        Python::attach(|py| {
            let cb = self.callback.bind(py);
            if let Err(e) = cb.call1((key, old.as_str(), new.as_str())) {
                e.write_unraisable(py, Some(cb));
            }
        });
    }
}

// ----- the guarded call's admission ----------------------------------------------------------

/// One acquire's guarded call (DESIGN §4) from step 1 to the grant, with the bulkhead it runs
/// on: [`begin`](Self::begin) runs the breaker's check; [`granted`](Self::granted) hands the
/// call on to the permit; any other way out — refused, cancelled, abandoned, dropped — ends it
/// `ignored`, exactly once. Every acquire path (`try_acquire`, `acquire_sync`, `acquire`) goes
/// through it. On a bulkhead without policies the call is inert and every step a no-op.
pub(crate) struct Admitting<B: Deref<Target = CoreBulkhead>> {
    bh: B,
    call: CallStart,
}

impl<B: Deref<Target = CoreBulkhead>> Admitting<B> {
    /// Not begun yet (nothing to end).
    pub(crate) const fn new(bh: B) -> Self {
        Self {
            bh,
            call: CallStart::NONE,
        }
    }

    /// Step 1, before admission: the breaker's check (`circuit_open`, counted).
    pub(crate) fn begin(&mut self, weight: u64) -> Result<(), AcquireError> {
        self.call = self.bh.begin_call_for(weight)?;
        Ok(())
    }

    /// Admission granted (`queued`: after queueing, so the RTT restarts at the grant): the
    /// call, for the permit to end at its release.
    pub(crate) fn granted(&mut self, queued: bool) -> CallStart {
        let mut call = std::mem::take(&mut self.call);
        if queued {
            self.bh.mark_granted(&mut call);
        }
        call
    }

    /// Admission refused, or the waiter gave up: ends the call `ignored` (once).
    pub(crate) fn refused(&mut self) {
        self.bh
            .end_call(std::mem::take(&mut self.call), Outcome::Ignored);
    }
}

impl<B: Deref<Target = CoreBulkhead>> Deref for Admitting<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.bh
    }
}

impl<B: Deref<Target = CoreBulkhead>> Drop for Admitting<B> {
    fn drop(&mut self) {
        self.refused();
    }
}

// ----- outcomes ------------------------------------------------------------------------------

static CANCELLED_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn cancelled_error(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    CANCELLED_ERROR
        .get_or_try_init(py, || {
            py.import("asyncio")?
                .getattr("CancelledError")
                .map(Bound::unbind)
        })
        .map(|c| c.bind(py))
}

/// Whether `exc_type` (an exception class, or `None`) is `asyncio.CancelledError`.
pub(crate) fn is_cancel(exc_type: Option<&Bound<'_, PyAny>>) -> bool {
    let Some(t) = exc_type.filter(|t| !t.is_none()) else {
        return false;
    };
    let py = t.py();
    let Ok(c) = cancelled_error(py) else {
        return false;
    };
    let Ok(t) = t.cast::<pyo3::types::PyType>() else {
        return false;
    };
    t.is_subclass(c).unwrap_or(false)
}

/// The outcome of leaving `with` / `async with` (DESIGN §4): no exception → success;
/// `asyncio.CancelledError` → ignored; any other exception → failure.
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

/// `outcome="success"|"failure"|"ignored"|"overload"`.
pub(crate) fn outcome_arg(v: &Bound<'_, PyAny>) -> PyResult<Outcome> {
    let s = v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("outcome must be a str, not {}", type_name(v)))
    })?;
    let s: String = s.extract()?;
    Outcome::parse(&s).ok_or_else(|| {
        PyValueError::new_err(format!(
            "outcome must be \"success\", \"failure\", \"ignored\" or \"overload\", got {s:?}"
        ))
    })
}

/// A guarded call overran `call_timeout` (DESIGN §4): counts `call_timeout` and ends the call
/// as a failure now; its permits stay held until the work has really ended (that release
/// records nothing more).
/// The `CallTimeoutError` of a guarded call that overran `call_timeout`.
pub(crate) fn call_timeout_err(py: Python<'_>, bh: &CoreBulkhead, key: Option<&str>) -> PyErr {
    let r = Rejection {
        reason: Reason::CallTimeout,
        snapshot: bh.snapshot(),
    };
    rejection_err(py, &r, key)
}

/// The call of one guarded call, ended exactly once by whoever takes it first (the release, or
/// the `call_timeout` timer).
#[derive(Debug, Default)]
pub(crate) struct CallSlot(Mutex<Option<CallStart>>);

impl CallSlot {
    pub(crate) fn new(call: CallStart) -> Self {
        Self(Mutex::new(Some(call)))
    }

    pub(crate) fn take(&self) -> Option<CallStart> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Ends the call with `outcome` unless it was ended already.
    pub(crate) fn end(&self, bh: &CoreBulkhead, outcome: Outcome) {
        if let Some(c) = self.take() {
            bh.end_call(c, outcome);
        }
    }
}

/// The `call_timeout` deadline of one `async with` block: counts `call_timeout`, ends the call
/// as a failure, and cancels the task running the block (whose exit then raises
/// `CallTimeoutError`). The permits stay held until the block has unwound.
#[pyclass(module = "hullguard._native", frozen)]
pub(crate) struct CallTimer {
    bh: Arc<CoreBulkhead>,
    call: CallRef,
    task: Py<PyAny>,
    fired: Arc<AtomicBool>,
}

/// Where the call of a block lives: a slot (`async with bh:`) or its permit.
pub(crate) enum CallRef {
    Slot(Arc<CallSlot>),
    Permit(Py<crate::permit::Permit>),
}

impl CallRef {
    fn take(&self) -> Option<CallStart> {
        match self {
            CallRef::Slot(s) => s.take(),
            CallRef::Permit(p) => p.get().take_call(),
        }
    }
}

#[pymethods]
impl CallTimer {
    fn __call__(&self, py: Python<'_>) {
        if let Some(c) = self.call.take() {
            self.fired.store(true, SeqCst);
            self.bh.end_call_timed_out(c);
            drop(self.task.bind(py).call_method0("cancel"));
        }
    }
}

static CURRENT_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `asyncio.current_task()`, or `None` outside a task.
pub(crate) fn current_task(py: Python<'_>) -> Option<Bound<'_, PyAny>> {
    let f = CURRENT_TASK
        .get_or_try_init(py, || {
            py.import("asyncio")?
                .getattr("current_task")
                .map(Bound::unbind)
        })
        .ok()?;
    f.bind(py).call0().ok().filter(|t| !t.is_none())
}

/// An armed `call_timeout`: the loop's timer handle and whether it fired.
pub(crate) struct ArmedCall {
    handle: Py<PyAny>,
    fired: Arc<AtomicBool>,
    task: Py<PyAny>,
}

impl ArmedCall {
    /// Arms `bh`'s `call_timeout` for the block running in the current task (nothing without
    /// a call timeout, or outside a task: no loop to arm a timer on).
    pub(crate) fn arm(py: Python<'_>, bh: &Arc<CoreBulkhead>, call: CallRef) -> Option<ArmedCall> {
        let limit = bh.call_timeout()?;
        let task = current_task(py)?;
        let fired = Arc::new(AtomicBool::new(false));
        let cb = Py::new(
            py,
            CallTimer {
                bh: bh.clone(),
                call,
                task: task.clone().unbind(),
                fired: fired.clone(),
            },
        )
        .ok()?;
        let handle = task
            .call_method0("get_loop")
            .and_then(|l| l.call_method1("call_later", (limit.as_secs_f64(), cb)))
            .ok()?;
        Some(ArmedCall {
            handle: handle.unbind(),
            fired,
            task: task.unbind(),
        })
    }

    /// Cancels the timer (the block is gone without an exit).
    pub(crate) fn cancel(self, py: Python<'_>) {
        drop(self.handle.bind(py).call_method0("cancel"));
    }

    /// Disarms the timer at the block's exit. `Ok(true)` when it had fired: the caller raises
    /// `CallTimeoutError` (the task's pending cancellation is withdrawn when the block is
    /// unwinding from it).
    pub(crate) fn disarm(self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> bool {
        drop(self.handle.bind(py).call_method0("cancel"));
        if !self.fired.load(SeqCst) {
            return false;
        }
        let task = self.task.bind(py);
        if is_cancel(exc_type) || exc_type.is_none_or(|t| t.is_none()) {
            // Python >= 3.11: withdraw our cancel request (as asyncio.timeout does).
            if task.hasattr("uncancel").unwrap_or(false) {
                drop(task.call_method0("uncancel"));
            }
            return true;
        }
        // The block raised its own exception after the deadline: that one propagates.
        false
    }
}
