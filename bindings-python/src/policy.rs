//! The policies around a bulkhead (DESIGN §4) as Python sees them: the `resilience={...}`
//! option, the `on_state_change` observer, outcomes (`permit.release(outcome=...)`, the
//! classification of an exception leaving `with` / `async with`) and the `call_timeout` timer
//! of `async with`. Every decision stays in the core: this converts and wires.

use std::{
    cell::{Cell, RefCell},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering::SeqCst},
    },
    time::Duration,
};

use hullguard_core::{
    Bulkhead as CoreBulkhead, CallStart, ConfigError, MAX_PERMITS, Outcome, Reason, Rejection,
    Resilience,
    adaptive::{AdaptiveConfig, Algorithm},
    breaker::{
        BreakerConfig, CircuitState, MAX_BUCKETS, MAX_DURATION, MAX_HALF_OPEN_CALLS, MAX_THRESHOLD,
        Observer,
    },
    policy::SharedObserver,
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyBool, PyDict, PyFloat, PyInt, PyString},
};

use crate::errors::rejection_err;

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

/// An int (not a bool) in `min ..= max`.
fn int_opt(v: &Bound<'_, PyAny>, name: &str, min: u64, max: u64) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            type_name(v)
        )));
    }
    match v.extract::<i128>() {
        Ok(n) if n >= i128::from(min) && n <= i128::from(max) => Ok(n as u64),
        _ => Err(PyValueError::new_err(format!(
            "{name} must be in {min}..={max}, got {v}"
        ))),
    }
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

/// A duration in seconds, `> 0` and at most `max`.
fn seconds_opt(v: &Bound<'_, PyAny>, name: &str, max: Duration) -> PyResult<Duration> {
    let s = float_opt(v, name)?;
    if s.is_nan() || s <= 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be > 0 seconds, got {s}"
        )));
    }
    match Duration::try_from_secs_f64(s) {
        Ok(d) if d <= max && !d.is_zero() => Ok(d),
        Ok(d) if d.is_zero() => Err(PyValueError::new_err(format!(
            "{name} must be > 0 seconds (at least 1 ns), got {s}"
        ))),
        _ => Err(PyValueError::new_err(format!(
            "{name} must be at most {} seconds, got {s}",
            max.as_secs()
        ))),
    }
}

/// A fraction: `lo < x < hi` (`hi_incl`: `x <= hi`).
fn fraction_opt(v: &Bound<'_, PyAny>, name: &str, hi_incl: bool) -> PyResult<f64> {
    let x = float_opt(v, name)?;
    let ok = x > 0.0 && if hi_incl { x <= 1.0 } else { x < 1.0 };
    if !ok {
        let range = if hi_incl { "(0, 1]" } else { "(0, 1)" };
        return Err(PyValueError::new_err(format!(
            "{name} must be in {range}, got {x}"
        )));
    }
    Ok(x)
}

fn adaptive_from(
    d: &Bound<'_, PyDict>,
    max_concurrent: u64,
    prefix: &str,
) -> PyResult<AdaptiveConfig> {
    let name = format!("{prefix}resilience.adaptive");
    check_keys(d, &name, &ADAPTIVE_KEYS)?;
    let mut a = AdaptiveConfig::for_max_concurrent(max_concurrent);
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
            "initial_limit" => a.initial_limit = int_opt(&v, &n, 1, max_concurrent)?,
            "min_limit" => a.min_limit = int_opt(&v, &n, 1, max_concurrent)?,
            "max_limit" => a.max_limit = int_opt(&v, &n, 1, max_concurrent)?,
            "target_latency" => {
                let d = seconds_opt(&v, &n, Duration::from_nanos(u64::MAX))?;
                a.target_latency_ns = d.as_nanos() as u64;
            }
            "increase_step" => a.increase_step = int_opt(&v, &n, 1, MAX_PERMITS)?,
            "decrease_ratio" => a.decrease_ratio = fraction_opt(&v, &n, false)?,
            "smoothing" => a.smoothing = fraction_opt(&v, &n, true)?,
            "rtt_tolerance" => {
                let x = float_opt(&v, &n)?;
                if !(x.is_finite() && x >= 1.0) {
                    return Err(PyValueError::new_err(format!(
                        "{n} must be finite and >= 1, got {x}"
                    )));
                }
                a.rtt_tolerance = x;
            }
            "long_window" => a.long_window = int_opt(&v, &n, 1, 1 << 32)?,
            "queue_size" => a.queue_size = int_opt(&v, &n, 0, MAX_PERMITS)?,
            _ => unreachable!("checked by check_keys"),
        }
    }
    // A limit given alone moves the bounds that default to max_concurrent with it only as
    // far as the relations allow; the core names a pair out of order.
    Ok(a)
}

fn breaker_from(d: &Bound<'_, PyDict>, prefix: &str) -> PyResult<BreakerConfig> {
    let name = format!("{prefix}resilience.breaker");
    check_keys(d, &name, &BREAKER_KEYS)?;
    let mut b = BreakerConfig::DEFAULT;
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        let n = format!("{name}.{k}");
        let thr = u64::from(MAX_THRESHOLD);
        match k.as_str() {
            "failure_threshold" => b.failure_threshold = int_opt(&v, &n, 1, thr)? as u32,
            "error_rate_threshold" => b.error_rate_threshold = fraction_opt(&v, &n, true)?,
            "error_rate_window" => b.error_rate_window = seconds_opt(&v, &n, MAX_DURATION)?,
            "error_rate_buckets" => {
                b.error_rate_buckets = int_opt(&v, &n, 1, u64::from(MAX_BUCKETS))? as u32;
            }
            "volume_threshold" => b.volume_threshold = int_opt(&v, &n, 1, thr)? as u32,
            "open_duration" => b.open_duration = seconds_opt(&v, &n, MAX_DURATION)?,
            "half_open_max_calls" => {
                b.half_open_max_calls = int_opt(&v, &n, 1, u64::from(MAX_HALF_OPEN_CALLS))? as u32;
            }
            "half_open_timeout" => b.half_open_timeout = seconds_opt(&v, &n, MAX_DURATION)?,
            _ => unreachable!("checked by check_keys"),
        }
    }
    Ok(b)
}

/// The `resilience` option (`None` / omitted: a plain bulkhead) for a bulkhead of
/// `max_concurrent`. `prefix` goes before the option names in errors (`overrides["k"]: `).
pub(crate) fn resilience_from(
    v: Option<&Bound<'_, PyAny>>,
    max_concurrent: u64,
    prefix: &str,
) -> PyResult<Resilience> {
    let Some(v) = v else {
        return Ok(Resilience::OFF);
    };
    let name = format!("{prefix}resilience");
    let Some(d) = opt_dict(v, &name)? else {
        return Ok(Resilience::OFF);
    };
    check_keys(&d, &name, &SECTIONS)?;
    let mut r = Resilience::OFF;
    if let Some(a) = d.get_item("adaptive")? {
        if let Some(a) = opt_dict(&a, &format!("{name}.adaptive"))? {
            r.adaptive = Some(adaptive_from(&a, max_concurrent, prefix)?);
        }
    }
    if let Some(b) = d.get_item("breaker")? {
        if let Some(b) = opt_dict(&b, &format!("{name}.breaker"))? {
            r.breaker = Some(breaker_from(&b, prefix)?);
        }
    }
    if let Some(t) = d.get_item("call_timeout")?.filter(|t| !t.is_none()) {
        let n = format!("{name}.call_timeout");
        let s = float_opt(&t, &n)?;
        // math.inf: no call timeout (like C's HG_TIMEOUT_INFINITE).
        if !s.is_infinite() {
            r.call_timeout = Some(seconds_opt(&t, &n, Duration::MAX)?);
        } else if s < 0.0 {
            return Err(PyValueError::new_err(format!(
                "{n} must be > 0 seconds, got {s}"
            )));
        }
    }
    r.validate(max_concurrent)
        .map_err(|e| config_error(&e, prefix))?;
    Ok(r)
}

/// A core configuration error as a `ValueError` naming the option with its full path.
pub(crate) fn config_error(e: &ConfigError, prefix: &str) -> PyErr {
    let path = match e.section() {
        Some("resilience") => format!("{prefix}resilience.{}", e.option()),
        Some(s) => format!("{prefix}resilience.{s}.{}", e.option()),
        None => format!("{prefix}{}", e.option()),
    };
    PyValueError::new_err(format!("{path}: {e}"))
}

/// Merges an override's `resilience` over the defaults' (key by key: an override's
/// `breaker` dict merges over the default's `breaker` dict; `None` turns a part off).
pub(crate) fn merge_resilience<'py>(
    py: Python<'py>,
    defaults: Option<&Bound<'py, PyAny>>,
    over: Option<&Bound<'py, PyAny>>,
    prefix: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let base = match defaults {
        Some(d) => opt_dict(d, "resilience")?,
        None => None,
    };
    let Some(over) = over else {
        return Ok(base.map(Bound::into_any));
    };
    let name = format!("{prefix}resilience");
    let Some(over) = opt_dict(over, &name)? else {
        // `"resilience": None` in an override: a plain bulkhead for that key.
        return Ok(None);
    };
    check_keys(&over, &name, &SECTIONS)?;
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
    Ok(Some(out.into_any()))
}

// ----- observer ------------------------------------------------------------------------------

thread_local! {
    /// While > 0, state-change events on this thread are queued, not delivered (a registry
    /// stats read holds the registry's lock; a callback creating a key would deadlock).
    static DEFER: Cell<u32> = const { Cell::new(0) };
    static QUEUED: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
}

struct Event {
    callback: Arc<PyObserver>,
    key: Option<String>,
    old: CircuitState,
    new: CircuitState,
}

/// Runs `f` with this thread's events queued, then delivers them (after `f` returned, with
/// no core lock held).
pub(crate) fn deferring_events<T>(py: Python<'_>, f: impl FnOnce() -> T) -> T {
    DEFER.with(|d| d.set(d.get() + 1));
    let out = f();
    let depth = DEFER.with(|d| {
        d.set(d.get() - 1);
        d.get()
    });
    if depth == 0 {
        let events = QUEUED.with(|q| std::mem::take(&mut *q.borrow_mut()));
        for e in events {
            e.callback.deliver(py, e.key.as_deref(), e.old, e.new);
        }
    }
    out
}

/// `on_state_change(key, old, new)`: a Python callable, called with the GIL after each breaker
/// commit. Its exceptions go to `sys.unraisablehook`, never into the acquire or release that
/// committed the transition.
pub(crate) struct PyObserver {
    callback: Py<PyAny>,
    me: std::sync::Weak<PyObserver>,
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
        let callback = v.clone().unbind();
        let o: Arc<PyObserver> = Arc::new_cyclic(|me| PyObserver {
            callback,
            me: me.clone(),
        });
        Ok(Some(o))
    }

    fn deliver(&self, py: Python<'_>, key: Option<&str>, old: CircuitState, new: CircuitState) {
        let cb = self.callback.bind(py);
        if let Err(e) = cb.call1((key, old.as_str(), new.as_str())) {
            e.write_unraisable(py, Some(cb));
        }
    }
}

impl Observer for PyObserver {
    fn on_state_change(&self, key: Option<&str>, old: CircuitState, new: CircuitState) {
        if DEFER.with(Cell::get) > 0 {
            if let Some(me) = self.me.upgrade() {
                QUEUED.with(|q| {
                    q.borrow_mut().push(Event {
                        callback: me,
                        key: key.map(str::to_owned),
                        old,
                        new,
                    });
                });
                return;
            }
        }
        Python::attach(|py| self.deliver(py, key, old, new));
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
    pub(crate) fired: Arc<AtomicBool>,
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
            self.bh.count_call_timeout();
            self.bh.end_call(c, Outcome::Failure);
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
    /// a call timeout, a task or a loop).
    pub(crate) fn arm(
        py: Python<'_>,
        bh: &Arc<CoreBulkhead>,
        call: CallRef,
    ) -> PyResult<Option<ArmedCall>> {
        let Some(limit) = bh.call_timeout() else {
            return Ok(None);
        };
        let Some(task) = current_task(py) else {
            return Ok(None);
        };
        let fired = Arc::new(AtomicBool::new(false));
        let cb = Py::new(
            py,
            CallTimer {
                bh: bh.clone(),
                call,
                task: task.clone().unbind(),
                fired: fired.clone(),
            },
        )?;
        let handle = task
            .call_method0("get_loop")?
            .call_method1("call_later", (limit.as_secs_f64(), cb))?;
        Ok(Some(ArmedCall {
            handle: handle.unbind(),
            fired,
            task: task.unbind(),
        }))
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
