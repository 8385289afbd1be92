//! `Bulkhead`: the Python face of one core bulkhead. Argument conversion, error mapping and
//! event-loop / thread plumbing only; every admission goes through the core's
//! `Bulkhead::admit_owned` / `try_acquire_owned` and its `Call` / `Waiter` handles.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::{Duration, Instant},
};

use hullguard_core::{
    Bulkhead as CoreBulkhead, Clock, ClockSource, Decision, Reason, Request, config::Section,
};
use pyo3::{
    exceptions::PyTypeError,
    prelude::*,
    sync::PyOnceLock,
    types::{PyDict, PyTuple},
};

use crate::{
    awaitable::{AcquireContext, DrainAwaitable, Ready},
    errors::acquire_err,
    options::{self, config_err, count_arg, timeout_arg},
    permit::{CoreCall, Permit},
    policy::{ArmedCall, PyObserver, exit_block},
    stats::{drain_dict, stats_dict},
};

/// How long `acquire_sync` / `drain_sync` park before checking for signals (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// A test hook: the host clock taken from a Python callable returning integer ns.
pub(crate) struct PyClock(pub(crate) Py<PyAny>);

impl Clock for PyClock {
    fn now_ns(&self) -> u64 {
        Python::attach(|py| {
            let now = self.0.bind(py).call0();
            now.and_then(|v| v.extract::<u64>()).unwrap_or(0)
        })
    }
}

/// The clock of a `_clock` argument (`None`: the host's monotonic clock).
pub(crate) fn clock_source(clock: Option<Bound<'_, PyAny>>) -> ClockSource {
    clock.map_or_else(ClockSource::default_for_host, |c| {
        ClockSource::Shared(Arc::new(PyClock(c.unbind())))
    })
}

/// One acquire's request: `weight` permits (default 1, `1..=max_concurrent`), queued at most
/// `timeout` seconds (`None`: the bulkhead's `queue_timeout`).
pub(crate) fn request_arg(
    bh: &CoreBulkhead,
    weight: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Request> {
    let max = bh.max_concurrent();
    let weight = weight.map_or(Ok(1), |w| count_arg(w, "weight", 1, max))?;
    let request = Request::new(weight);
    Ok(timeout_arg(timeout)?.map_or(request, |t| request.queue_timeout(t)))
}

/// `try_acquire`: a permit, `None` for `concurrency_limit`, any other reason raised.
pub(crate) fn try_acquire_on(
    py: Python<'_>,
    bh: &Arc<CoreBulkhead>,
    key: Option<&str>,
    weight: u64,
) -> PyResult<Option<Permit>> {
    match bh.try_acquire_owned(weight) {
        Ok(call) => Ok(Some(Permit::new(call, key.map(str::to_owned)))),
        Err(e) if e.reason() == Some(Reason::ConcurrencyLimit) => Ok(None),
        Err(e) => Err(acquire_err(py, &e, key)),
    }
}

/// `acquire_sync`: a queued acquire parks this thread in the core's blocking wait with the
/// interpreter released, checking for signals every 100 ms (Ctrl-C raises promptly; the
/// waiter is then abandoned, a grant that raced it passed on).
pub(crate) fn acquire_sync_on(
    py: Python<'_>,
    bh: &Arc<CoreBulkhead>,
    key: Option<&str>,
    request: Request,
) -> PyResult<Permit> {
    let settled = match bh.admit_owned(&request, None) {
        Decision::Granted(call) => Ok(call),
        Decision::Rejected(e) => Err(e),
        Decision::Queued(w) => {
            // `Duration::MAX` (no deadline) overflows the instant: `None`.
            let deadline = Instant::now().checked_add(w.queue_timeout());
            let signals = || Python::attach(|py| py.check_signals());
            py.detach(|| w.wait_blocking_interruptible(deadline, SIGNAL_SLICE, signals))?
        }
    };
    let call = settled.map_err(|e| acquire_err(py, &e, key))?;
    Ok(Permit::new(call, key.map(str::to_owned)))
}

/// `drain_sync`: parks in slices of the core's blocking drain, checking for signals.
pub(crate) fn drain_sync_on<'py>(
    py: Python<'py>,
    bh: &CoreBulkhead,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let deadline = timeout_arg(timeout)?.and_then(|t| Instant::now().checked_add(t));
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let slice = left.map_or(SIGNAL_SLICE, |l| l.min(SIGNAL_SLICE));
        let r = py.detach(|| bh.drain_blocking(Some(slice)));
        if r.drained || left.is_some_and(|l| l <= slice) {
            return drain_dict(py, &r);
        }
        py.check_signals()?;
    }
}

/// The `timeout` argument of every acquire, checked and converted (for integrations that take
/// one at construction, as `hullguard.httpx` does): seconds (`math.inf` = no deadline), or
/// `None` (each bulkhead's `queue_timeout`). `TypeError` / `ValueError` naming `timeout`.
#[pyfunction(name = "_check_timeout")]
#[pyo3(signature = (timeout))]
pub(crate) fn check_timeout(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
    Ok(timeout_arg(timeout)?.map(seconds))
}

static CONTEXT_VAR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The call of one open `async with bh:` block on a bulkhead with policies, on the block stack
/// of the context (task) that entered it.
#[pyclass(module = "hullguard._native", frozen)]
pub(crate) struct Block {
    permit: Py<Permit>,
    armed: Option<ArmedCall>,
    /// The token of the push (`ContextVar.set`): resetting it pops the block, and only works
    /// in the context that pushed it.
    token: PyOnceLock<Py<PyAny>>,
}

/// A bulkhead: at most `max_concurrent` permits in flight, at most `max_queue` callers waiting
/// (FIFO, no barging) for at most `queue_timeout` seconds. Thread-safe; usable from several
/// event loops and threads at once.
///
/// The options are those of the core's option table (docs/design.md §7), by name and in table
/// order positionally; durations in float seconds (`math.inf`: none, "no deadline"), `None`:
/// not given, the default (so `queue_timeout=None` is 30 s, not infinite).
/// `resilience={"adaptive": {...}, "breaker": {...}, "call_timeout": seconds}` adds the
/// policies of docs/design.md §6 (a part or `call_timeout` omitted or `None` is off; `{}` is
/// on with the defaults). An unknown option raises `TypeError` (a keyword argument) or `ValueError` (a key
/// of `resilience`), listing the known ones; a bad value `TypeError` / `ValueError` naming its
/// full path (e.g. `resilience.breaker.open_duration`) and, when out of range, the range.
///
/// With policies every acquire is a guarded call: an open breaker raises `CircuitOpenError`
/// before admission; the outcome (`permit.release(outcome=)`, or the exception leaving `with` /
/// `async with` / a `guard`ed function) feeds the breaker and the adaptive limit.
/// `call_timeout` bounds `guard`ed calls and `async with` blocks (`CallTimeoutError`).
/// `on_state_change(key, old, new)` is called (with the GIL, on the thread that committed it;
/// `key` is `None`) for each breaker transition between `"closed"`, `"open"` and
/// `"half_open"`; its exceptions go to `sys.unraisablehook`.
#[pyclass(module = "hullguard._native", name = "Bulkhead", subclass, frozen)]
pub(crate) struct Bulkhead {
    pub(crate) bh: Arc<CoreBulkhead>,
    pub(crate) key: Option<String>,
    /// `async with bh:` on a bulkhead without policies: the units this object's blocks hold
    /// (a stray `__aexit__` can never return more than was taken).
    held: AtomicU64,
    /// `async with bh:` on a bulkhead with policies: a `contextvars.ContextVar` holding the
    /// open blocks of each context as a tuple stack (each task finds its own block's call).
    blocks: Option<Py<PyAny>>,
}

impl Bulkhead {
    pub(crate) fn wrap(
        py: Python<'_>,
        bh: Arc<CoreBulkhead>,
        key: Option<String>,
    ) -> PyResult<Self> {
        let var = CONTEXT_VAR.import(py, "contextvars", "ContextVar")?;
        let new_var = || {
            let kwargs = PyDict::new(py);
            kwargs.set_item("default", PyTuple::empty(py))?;
            var.call(("hullguard.blocks",), Some(&kwargs))
                .map(Bound::unbind)
        };
        let blocks = bh.has_policies().then(new_var).transpose()?;
        Ok(Self {
            bh,
            key,
            held: AtomicU64::new(0),
            blocks,
        })
    }

    /// An `async with bh:` block was granted `call`.
    pub(crate) fn enter_block(&self, py: Python<'_>, call: CoreCall) -> PyResult<()> {
        let Some(var) = &self.blocks else {
            // No policies, so no outcome to record: only the unit is kept.
            call.forget();
            self.held.fetch_add(1, SeqCst);
            return Ok(());
        };
        let permit = Py::new(py, Permit::new(call, self.key.clone()))?;
        let armed = ArmedCall::arm(py, &permit);
        let token = PyOnceLock::new();
        let block = Py::new(
            py,
            Block {
                permit,
                armed,
                token,
            },
        )?;
        let var = var.bind(py);
        let stack = var.call_method0("get")?.cast_into::<PyTuple>()?;
        let pushed = stack.add(PyTuple::new(py, [&block])?)?;
        let token = var.call_method1("set", (pushed,))?;
        drop(block.get().token.set(py, token.unbind()));
        Ok(())
    }

    /// An `async with bh:` block exits: its call ends as `exc_type` says. A stray exit (no
    /// block of this context open) returns nothing and is counted in `released_twice_total`.
    fn exit_block(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let Some(var) = &self.blocks else {
            let took = self.held.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1));
            took.map_or_else(
                |_| self.bh.record_double_release(),
                |_| self.bh.release_units(1),
            );
            return Ok(());
        };
        let var = var.bind(py);
        let stack = var.call_method0("get")?.cast_into::<PyTuple>()?;
        let top = stack
            .iter()
            .last()
            .map(|b| b.cast_into::<Block>())
            .transpose()?;
        let popped = top.filter(|b| {
            let token = b.get().token.get(py);
            token.is_some_and(|t| var.call_method1("reset", (t,)).is_ok())
        });
        let Some(block) = popped else {
            self.bh.record_double_release();
            return Ok(());
        };
        let block = block.get();
        exit_block(py, block.permit.get(), block.armed.as_ref(), exc_type)
    }
}

#[pymethods]
impl Bulkhead {
    /// `Bulkhead(max_concurrent=10, max_queue=100, queue_timeout=30.0, enabled=True, *,
    /// budget=None, max_queued_cost=None, observe="off", max_orphaned=0, start_limit=None,
    /// max_reservations=0, cancel_on_overrun=False,
    /// resilience=None, on_state_change=None)`; see the class docs.
    /// `budget`: an in-flight ceiling of cost units beside the permits (`stats()["budget"]`);
    /// `observe`: the dimensions decided and counted but not enforced (`"off"`,
    /// `"concurrency"`, `"budget"`, `"all"`; `stats()["observed_by_reason"]`).
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let py = args.py();
        let d = options::arguments("Bulkhead", args, kwargs)?;
        let observer = PyObserver::from_arg(options::take(&d, "on_state_change")?.as_ref())?;
        let clock = clock_source(options::take(&d, "_clock")?);
        let partial = options::parse(&d, Section::Bulkhead, "", PyTypeError::new_err)?;
        let config = partial.to_config().map_err(config_err)?;
        let bh = CoreBulkhead::with_observer(config, clock, observer, None).map_err(config_err)?;
        Self::wrap(py, Arc::new(bh), None)
    }

    /// Waits for `weight` permits (at most `timeout` seconds queued; `None`: `queue_timeout`):
    /// `await bh.acquire()` gives a `Permit` (release it yourself); `async with bh.acquire() as
    /// permit:` releases on exit. Bad arguments raise `TypeError` / `ValueError` here; a
    /// rejection raises when awaited.
    #[pyo3(signature = (weight=None, timeout=None))]
    fn acquire(
        &self,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        let request = request_arg(&self.bh, weight, timeout)?;
        let (bh, key) = (self.bh.clone(), self.key.clone());
        Ok(AcquireContext::new(bh, key, request, None))
    }

    /// `async with bh:` — one permit for the block.
    fn __aenter__(slf: &Bound<'_, Self>) -> AcquireContext {
        let me = slf.get();
        let (bh, key) = (me.bh.clone(), me.key.clone());
        AcquireContext::new(bh, key, Request::new(1), Some(slf.clone().unbind()))
    }

    /// Returns the unit of this task's innermost `async with bh:` block (a stray call returns
    /// nothing and is counted in `released_twice_total`). With policies, the block's exception
    /// gives the outcome (none → success, `asyncio.CancelledError` → ignored, other →
    /// failure), and a block that overran `call_timeout` raises `CallTimeoutError`. Never
    /// swallows the block's exception.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        self.exit_block(py, exc_type)?;
        Ready::shared(py)
    }

    /// Blocks this thread (GIL released) until admitted, at most `timeout` seconds queued
    /// (`None`: `queue_timeout`; `math.inf`: no deadline; 0: do not queue). Raises the
    /// rejection, or the exception of a signal handler (Ctrl-C: `KeyboardInterrupt`, within
    /// 100 ms; the place is given up).
    #[pyo3(signature = (weight=None, timeout=None))]
    fn acquire_sync(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let request = request_arg(&self.bh, weight, timeout)?;
        acquire_sync_on(py, &self.bh, self.key.as_deref(), request)
    }

    /// A permit now, or `None` (`concurrency_limit`, also while a waiter is queued: no
    /// barging); other reasons raise (`BulkheadClosedError`, `CircuitOpenError`).
    #[pyo3(signature = (weight=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Permit>> {
        let weight = request_arg(&self.bh, weight, None)?.weight;
        try_acquire_on(py, &self.bh, self.key.as_deref(), weight)
    }

    /// Decorator: every call of `fn` (sync or async) holds `weight` permits. `@bh.guard` or
    /// `@bh.guard(weight=2, timeout=1.0)`.
    #[pyo3(signature = (r#fn=None, *, weight=None, timeout=None))]
    fn guard(
        slf: &Bound<'_, Self>,
        r#fn: Option<&Bound<'_, PyAny>>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let bh = &slf.get().bh;
        request_arg(bh, weight, timeout)?;
        let acquire = slf.getattr("acquire")?;
        let acquire_sync = slf.getattr("acquire_sync")?;
        let (args, call_timeout) = ((weight, timeout), bh.call_timeout());
        crate::guard::decorator(slf.py(), &acquire, &acquire_sync, args, call_timeout, r#fn)
    }

    /// Changes the limit (`1..=max_concurrent`, else `ValueError`); never blocks, never
    /// revokes: growing hands permits to waiters, shrinking waits for releases.
    fn set_limit(&self, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(limit, "limit", 1, self.bh.max_concurrent())?;
        self.bh.set_limit(n).map_err(config_err)
    }

    /// The stats dict (docs/design.md §8.1); `adaptive` / `circuit` are dicts when those
    /// policies are on, else `None`. Reading it may commit a due open → half-open transition
    /// (and call `on_state_change`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.bh.stats())
    }

    /// Stops admission; queued waiters are rejected with `BulkheadClosedError`.
    fn close(&self) {
        self.bh.close();
    }

    /// Waits (without closing) until idle or `timeout` seconds pass (`None` / `math.inf`: no
    /// deadline; 0: report at once).
    #[pyo3(signature = (timeout=None))]
    fn drain(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<DrainAwaitable> {
        let t = timeout_arg(timeout)?.unwrap_or(Duration::MAX);
        Ok(DrainAwaitable::new(self.bh.clone(), t))
    }

    /// `drain` on this thread (GIL released; Ctrl-C raises promptly).
    #[pyo3(signature = (timeout=None))]
    fn drain_sync<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        drain_sync_on(py, &self.bh, timeout)
    }

    #[getter]
    fn max_concurrent(&self) -> u64 {
        self.bh.max_concurrent()
    }
    #[getter]
    fn max_queue(&self) -> u64 {
        self.bh.max_queue()
    }
    /// Seconds; `math.inf` for no deadline.
    #[getter]
    fn queue_timeout(&self) -> f64 {
        seconds(self.bh.queue_timeout())
    }
    #[getter]
    fn enabled(&self) -> bool {
        self.bh.enabled()
    }
    #[getter]
    fn limit(&self) -> u64 {
        self.bh.limit()
    }
    #[getter]
    fn closed(&self) -> bool {
        self.bh.is_closed()
    }
    #[getter]
    fn key(&self) -> Option<String> {
        self.key.clone()
    }
    /// `resilience.call_timeout` in seconds, or `None`.
    #[getter]
    fn call_timeout(&self) -> Option<f64> {
        self.bh.call_timeout().map(seconds)
    }
    /// The breaker's state now (`"closed"`, `"open"`, `"half_open"`; committing a due
    /// open → half-open transition), or `None` without a breaker.
    #[getter]
    fn circuit_state(&self) -> Option<&'static str> {
        self.bh.circuit_state().map(|s| s.as_str())
    }

    fn __repr__(&self) -> String {
        let s = self.bh.snapshot();
        let key = self.key.as_ref().map(|k| format!(" key={k:?}"));
        let (limit, active, queued) = (s.limit, s.active, s.queued);
        let key = key.unwrap_or_default();
        format!("<Bulkhead limit={limit} active={active} queued={queued}{key}>")
    }
}

/// A duration in float seconds (`Duration::MAX`, "none": `math.inf`).
pub(crate) fn seconds(d: Duration) -> f64 {
    if d == Duration::MAX {
        f64::INFINITY
    } else {
        d.as_secs_f64()
    }
}
