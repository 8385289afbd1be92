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
    AcquireError, Bulkhead as CoreBulkhead, ClassStats, ClassTableLimits, Clock, ClockSource,
    Config, Deadline, Decision, LimitsError, LimitsSnapshot, MAX_BUDGET, MAX_PERMITS, MAX_QUEUE,
    MAX_REVISION, Observe, QueueDelay, Reason, Rejection, Request,
    config::{OptionId, Section, Value},
    event::SharedObserver,
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyDict, PyList, PyTuple},
};

use crate::{
    awaitable::{AcquireContext, DrainAwaitable, Ready, Source, SourceRef},
    errors::acquire_err,
    events::PyObserver,
    gateway::{self, ClassNames, Extra},
    metrics,
    options::{self, config_err, count_arg, timeout_arg},
    permit::{CoreCall, Permit},
    policy::{ArmedCall, exit_block},
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

/// Decides `request` without queueing (`Request::no_wait`): the call, or the refusal. A plain
/// request (no cost, no class, no observe mode of its own) on a bulkhead without classes takes
/// the core's plain path (`try_acquire_owned`), as before gateway admission.
pub(crate) fn admit_now(source: SourceRef<'_>, request: Request) -> Result<CoreCall, AcquireError> {
    if request.cost == 0
        && request.class == 0
        && request.observe == Observe::Off
        && request.deadline == Deadline::NONE
    {
        match source {
            SourceRef::Bulkhead(bh) if bh.class_count() == 0 => {
                return bh.try_acquire_owned(request.weight);
            }
            SourceRef::Registry(r, key) => {
                return r.try_acquire(key, request.weight).map_err(|e| e.error);
            }
            SourceRef::Bulkhead(_) => {}
        }
    }
    match source.decide(&request.no_wait()) {
        Decision::Granted(call) => Ok(call),
        Decision::Rejected(e) => Err(e),
        // Not queued with a zero timeout; should it happen, the waiter is given up.
        Decision::Queued(w) => {
            let r = Rejection::new(Reason::Aborted, w.bulkhead().snapshot());
            drop(w);
            Err(AcquireError::Rejected(r))
        }
    }
}

/// `try_acquire`: a permit, `None` for `concurrency_limit`, any other reason raised.
pub(crate) fn try_acquire_on(
    py: Python<'_>,
    source: SourceRef<'_>,
    key: Option<&str>,
    request: Request,
) -> PyResult<Option<Permit>> {
    let deadline = request.deadline;
    match admit_now(source, request) {
        Ok(call) => Ok(Some(Permit::new(call, key.map(str::to_owned), deadline))),
        Err(e) if e.reason() == Some(Reason::ConcurrencyLimit) => Ok(None),
        Err(e) => Err(acquire_err(py, &e, key)),
    }
}

/// `try_admit`: an `Admission` (a bad argument raises).
pub(crate) fn try_admit_on(
    py: Python<'_>,
    source: SourceRef<'_>,
    key: Option<&str>,
    request: Request,
) -> PyResult<Py<PyAny>> {
    let deadline = request.deadline;
    match admit_now(source, request) {
        Ok(call) => {
            let permit = Py::new(py, Permit::new(call, key.map(str::to_owned), deadline))?;
            gateway::admitted(py, permit.into_any())
        }
        Err(e) => gateway::refused(py, &e, key),
    }
}

/// `acquire_sync`: a queued acquire parks this thread in the core's blocking wait with the
/// interpreter released, checking for signals every 100 ms (Ctrl-C raises promptly; the
/// waiter is then abandoned, a grant that raced it passed on).
///
/// On a classed bulkhead with rates the waiting thread is also the host's rate timer: it ticks
/// the bulkhead (`rate_tick`) at each slice, so a head a rate held back is granted within 100 ms
/// of conforming.
pub(crate) fn acquire_sync_on(
    py: Python<'_>,
    source: SourceRef<'_>,
    key: Option<&str>,
    request: Request,
) -> PyResult<Permit> {
    let deadline = request.deadline;
    let call = settle_sync(py, source, request)?.map_err(|e| acquire_err(py, &e, key))?;
    Ok(Permit::new(call, key.map(str::to_owned), deadline))
}

/// `admit_sync`: an `Admission` (a bad argument, or a signal handler's exception, raises).
pub(crate) fn admit_sync_on(
    py: Python<'_>,
    source: SourceRef<'_>,
    key: Option<&str>,
    request: Request,
) -> PyResult<Py<PyAny>> {
    let deadline = request.deadline;
    match settle_sync(py, source, request)? {
        Ok(call) => {
            let permit = Py::new(py, Permit::new(call, key.map(str::to_owned), deadline))?;
            gateway::admitted(py, permit.into_any())
        }
        Err(e) => gateway::refused(py, &e, key),
    }
}

fn settle_sync(
    py: Python<'_>,
    source: SourceRef<'_>,
    request: Request,
) -> PyResult<Result<CoreCall, AcquireError>> {
    Ok(match source.decide(&request) {
        Decision::Granted(call) => Ok(call),
        Decision::Rejected(e) => Err(e),
        Decision::Queued(w) => {
            // `Duration::MAX` (no deadline) overflows the instant: `None`.
            let deadline = Instant::now().checked_add(w.queue_timeout());
            let bh = w.handle().clone();
            let signals = || {
                bh.rate_tick();
                Python::attach(|py| py.check_signals())
            };
            py.detach(|| w.wait_blocking_interruptible(deadline, SIGNAL_SLICE, signals))?
        }
    })
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
///
/// Deadlines (docs/design.md §5.9, §4.10): every acquire takes `deadline=` (absolute seconds on
/// the `time.monotonic()` scale, or the `_clock` hook's scale) and the ambient budget of
/// `hullguard.deadline(seconds)`; `min_service_time=` (seconds) refuses a waiter once less is
/// left; `queue_delay_target=` / `queue_delay_interval=` shed a standing queue (CoDel:
/// `BulkheadShedError`, reason `shed`) and `adaptive_lifo=True` serves the newest waiter first
/// while the oldest has waited past the target.
/// `on_state_change(key, old, new)` is called (with the GIL, on the thread that committed it;
/// `key` is `None`) for each breaker transition between `"closed"`, `"open"` and
/// `"half_open"`; its exceptions go to `sys.unraisablehook` (counted in `listener_errors`).
///
/// Gateway admission (docs/design.md §4.5–4.9): `budget=` adds a second dimension (cost
/// units: tokens, bytes) decided with the permits in one step (`acquire(cost=…)`, settled by
/// `permit.release(usage=…)` / `report_usage` / `refund`); `classes=` (with `reserve`,
/// `lending`, `shed`, `rates`) partitions it by priority; `apply_limits` installs a control
/// plane's revisioned limits; `would_admit` is the dry run; `admit` / `admit_sync` /
/// `try_admit` answer an `Admission` instead of raising; `events=True` with `on` / `off` /
/// `events()` delivers the admission events.
#[pyclass(module = "hullguard._native", name = "Bulkhead", subclass, frozen)]
pub(crate) struct Bulkhead {
    pub(crate) bh: Arc<CoreBulkhead>,
    pub(crate) key: Option<String>,
    /// `async with bh:` on a bulkhead without policies: the units this object's blocks hold
    /// (a stray `__aexit__` can never return more than was taken).
    held: AtomicU64,
    /// `async with bh:` blocks that hold a `Permit` — every block on a bulkhead with policies
    /// (an outcome to record), a block with a deadline on any bulkhead (its work is bounded by
    /// the deadline: `Bulkhead::call_timeout_within`) — on a `contextvars.ContextVar` holding
    /// the open blocks of each context as a tuple stack (each task finds its own block's
    /// call). Built with the bulkhead when it has policies, else at its first such block.
    blocks: PyOnceLock<Py<PyAny>>,
    /// The class names of a classed bulkhead, by index (empty otherwise).
    pub(crate) names: ClassNames,
    /// The observer of a bulkhead built here (`on`/`off`); `None` for a registry's key (the
    /// registry has it).
    observer: Option<Arc<PyObserver>>,
}

impl Bulkhead {
    pub(crate) fn wrap(
        py: Python<'_>,
        bh: Arc<CoreBulkhead>,
        key: Option<String>,
    ) -> PyResult<Self> {
        Self::wrap_with(py, bh, key, Arc::from([]), None)
    }

    /// `wrap` with a classed core's class names and the observer it was built with (a
    /// `FleetBulkhead`'s local bulkhead: its classes and events are this process's).
    pub(crate) fn wrap_with(
        py: Python<'_>,
        bh: Arc<CoreBulkhead>,
        key: Option<String>,
        names: ClassNames,
        observer: Option<Arc<PyObserver>>,
    ) -> PyResult<Self> {
        let me = Self {
            bh,
            key,
            held: AtomicU64::new(0),
            blocks: PyOnceLock::new(),
            names,
            observer,
        };
        if me.bh.has_policies() {
            me.blocks_var(py)?;
        }
        Ok(me)
    }

    /// The stack of open `async with bh:` blocks that hold a permit (see `blocks`).
    fn blocks_var<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyAny>> {
        let var = self.blocks.get_or_try_init(py, || {
            let kwargs = PyDict::new(py);
            kwargs.set_item("default", PyTuple::empty(py))?;
            let var = CONTEXT_VAR.import(py, "contextvars", "ContextVar")?;
            var.call(("hullguard.blocks",), Some(&kwargs))
                .map(Bound::unbind)
        })?;
        Ok(var.bind(py))
    }

    fn source(&self) -> Source {
        Source::Bulkhead(self.bh.clone())
    }

    fn source_ref(&self) -> SourceRef<'_> {
        SourceRef::Bulkhead(&self.bh)
    }

    fn request(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        extra: Extra<'_, '_>,
    ) -> PyResult<Request> {
        gateway::request(
            py,
            self.bh.max_concurrent(),
            &self.names,
            weight,
            timeout,
            extra,
        )
    }

    fn observer(&self) -> PyResult<&Arc<PyObserver>> {
        self.observer.as_ref().ok_or_else(|| {
            PyValueError::new_err(if self.key.is_some() {
                "this bulkhead belongs to a Registry: listen with Registry.on(event, callback)"
            } else {
                "this bulkhead has no event listeners"
            })
        })
    }

    fn class_index(&self, class: &Bound<'_, PyAny>) -> PyResult<u16> {
        gateway::class_arg(class, &self.names)
    }

    /// An `async with bh:` block of a request with `deadline` was granted `call`.
    pub(crate) fn enter_block(
        &self,
        py: Python<'_>,
        call: CoreCall,
        deadline: Deadline,
    ) -> PyResult<()> {
        if !self.bh.has_policies() {
            // No policies, so no outcome to record: only the unit is kept (its exit may run in
            // another task). A deadline bounded the wait; the work of a bare block is not
            // bounded by it (`async with bh.acquire()` is: its permit arms the call timeout).
            call.forget();
            self.held.fetch_add(1, SeqCst);
            return Ok(());
        }
        let permit = Py::new(py, Permit::new(call, self.key.clone(), deadline))?;
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
        let var = self.blocks_var(py)?;
        let stack = var.call_method0("get")?.cast_into::<PyTuple>()?;
        let pushed = stack.add(PyTuple::new(py, [&block])?)?;
        let token = var.call_method1("set", (pushed,))?;
        drop(block.get().token.set(py, token.unbind()));
        Ok(())
    }

    /// An `async with bh:` block exits: its call ends as `exc_type` says. A stray exit (no
    /// block of this context open) returns nothing and is counted in `released_twice_total`.
    ///
    /// Without policies a block holds a permit only when it had a deadline: the innermost
    /// block of this context on the stack is this exit's if its push can be undone here (a
    /// block without a deadline cannot be nested in one with a deadline of the same context:
    /// the ambient budget only narrows inside it); otherwise the block kept only its unit.
    fn exit_block(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let policies = self.bh.has_policies();
        let var = match self.blocks.get(py) {
            Some(v) => Some(v.bind(py)),
            None if policies => Some(self.blocks_var(py)?),
            None => None,
        };
        let popped = match var {
            None => None,
            Some(var) => {
                let stack = var.call_method0("get")?.cast_into::<PyTuple>()?;
                let top = stack
                    .iter()
                    .last()
                    .map(|b| b.cast_into::<Block>())
                    .transpose()?;
                top.filter(|b| {
                    let token = b.get().token.get(py);
                    token.is_some_and(|t| var.call_method1("reset", (t,)).is_ok())
                })
            }
        };
        match popped {
            Some(block) => {
                let block = block.get();
                exit_block(py, block.permit.get(), block.armed.as_ref(), exc_type)
            }
            None if policies => {
                self.bh.record_double_release();
                Ok(())
            }
            None => {
                let took = self.held.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1));
                took.map_or_else(
                    |_| self.bh.record_double_release(),
                    |_| self.bh.release_units(1),
                );
                Ok(())
            }
        }
    }
}

#[pymethods]
impl Bulkhead {
    /// `Bulkhead(max_concurrent=10, max_queue=100, queue_timeout=30.0, enabled=True, *,
    /// budget=None, max_queued_cost=None, observe="off", max_orphaned=0, start_limit=None,
    /// max_reservations=0, cancel_on_overrun=False, min_service_time=0, queue_delay_target=0,
    /// queue_delay_interval=0.1, adaptive_lifo=False,
    /// resilience=None, on_state_change=None, events=False, classes=None, reserve=None,
    /// lending=False, shed=False, rates=None)`; see the class docs.
    /// `budget`: an in-flight ceiling of cost units beside the permits (`stats()["budget"]`);
    /// `observe`: the dimensions decided and counted but not enforced (`"off"`,
    /// `"concurrency"`, `"budget"`, `"all"`; `stats()["observed_by_reason"]`).
    /// `events=True`: the admission events reach `on` / `events()` listeners (without it the
    /// core builds none). A class table (docs/design.md §4.8, §4.9; read by walking the core's
    /// class-option table): `classes=[{"name", "priority", "floor", "ceiling",
    /// "budget_floor", "budget_ceiling", "observe"}, …]` (requests name a class by its `name`
    /// or index), `reserve={"permits", "budget", "min_priority"}`, `lending`, `shed`,
    /// `rates={"requests": {"amount", "per" (seconds), "burst"}, "units": {…}}`.
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let py = args.py();
        let d = options::arguments("Bulkhead", args, kwargs)?;
        let on_state_change = options::take(&d, "on_state_change")?;
        let events = options::take(&d, "events")?;
        let observer = PyObserver::from_args(on_state_change.as_ref(), events.as_ref())?;
        let clock = clock_source(options::take(&d, "_clock")?);
        let table = gateway::class_table(&d)?;
        let partial = options::parse(&d, Section::Bulkhead, "", PyTypeError::new_err)?;
        let config = partial.to_config().map_err(config_err)?;
        let shared: SharedObserver = observer.clone();
        let (bh, names) = match table {
            Some(mut b) => {
                let names = gateway::names_of(&b);
                let t = b.table();
                let bh = CoreBulkhead::with_classes_and_observer(config, &t, clock, Some(shared));
                (bh.map_err(config_err)?, names)
            }
            None => {
                let bh = CoreBulkhead::with_observer(config, clock, Some(shared), None);
                (bh.map_err(config_err)?, Arc::from([]))
            }
        };
        observer.set_names(names.clone());
        Self::wrap_with(py, Arc::new(bh), None, names, Some(observer))
    }

    /// Waits for `weight` permits (at most `timeout` seconds queued; `None`: `queue_timeout`)
    /// and `cost` budget units, in `admission_class` (a class name or index of a classed
    /// bulkhead), with the request's own `observe` mode (`"off"`, `"concurrency"`, `"budget"`,
    /// `"all"`: those dimensions decided and counted, not enforced): `await bh.acquire()` gives
    /// a `Permit` (release it yourself); `async with bh.acquire() as permit:` releases on exit.
    /// `deadline`: the request's absolute deadline in seconds on the `time.monotonic()` scale
    /// (docs/design.md §5.9; `None` / `math.inf`: none), min'd with the ambient one of
    /// `hullguard.deadline(...)`: one that has passed raises `BulkheadQueueTimeoutError`
    /// (`timeout`, `.detail["bound"] == "deadline"`) at once — never a `ValueError` — and a
    /// queued acquire waits at most until it (less `min_service_time`); the `call_timeout` of
    /// an `async with` block is capped by the time left (a block still running at the
    /// deadline raises `CallTimeoutError`, also without `call_timeout`).
    /// Bad arguments raise `TypeError` / `ValueError` here, naming the argument; a rejection
    /// raises when awaited (`.detail` says which bound refused).
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire(
        &self,
        py: Python<'_>,
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
        let request = self.request(py, weight, timeout, extra)?;
        Ok(AcquireContext::from_source(
            self.source(),
            self.key.clone(),
            request,
            None,
        ))
    }

    /// `acquire` that never raises a refusal: `await bh.admit(...)` gives an `Admission`
    /// (`ok=True, permit=…` or `ok=False, reason=…, detail=…, error=<the exception acquire
    /// would raise>`). Bad arguments still raise.
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit(
        &self,
        py: Python<'_>,
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
                weight,
                timeout,
                cost,
                admission_class,
                observe,
                deadline,
            )?
            .non_throwing())
    }

    /// `async with bh:` — one permit for the block, by the ambient deadline of
    /// `hullguard.deadline` if one is set (its queue wait and the block's work bounded by it).
    fn __aenter__(slf: &Bound<'_, Self>) -> PyResult<AcquireContext> {
        let me = slf.get();
        let (bh, key) = (me.bh.clone(), me.key.clone());
        let request = Request::new(1).deadline(crate::deadline::ambient_deadline(slf.py())?);
        Ok(AcquireContext::new(
            bh,
            key,
            request,
            Some(slf.clone().unbind()),
        ))
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
    /// (`None`: `queue_timeout`; `math.inf`: no deadline; 0: do not queue); the other
    /// arguments as `acquire`. Raises the rejection, or the exception of a signal handler
    /// (Ctrl-C: `KeyboardInterrupt`, within 100 ms; the place is given up).
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire_sync(
        &self,
        py: Python<'_>,
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
        let request = self.request(py, weight, timeout, extra)?;
        acquire_sync_on(py, self.source_ref(), self.key.as_deref(), request)
    }

    /// `acquire_sync` that never raises a refusal: an `Admission`.
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit_sync(
        &self,
        py: Python<'_>,
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
        let request = self.request(py, weight, timeout, extra)?;
        admit_sync_on(py, self.source_ref(), self.key.as_deref(), request)
    }

    /// A permit now, or `None` (`concurrency_limit`, also while a waiter is queued: no
    /// barging); other reasons raise (`BulkheadClosedError`, `CircuitOpenError`,
    /// `BulkheadFullError` for `budget_limit` / `queue_limit`, `BulkheadRateLimitError`,
    /// `BulkheadQueueTimeoutError` for a `deadline` that has passed).
    #[pyo3(signature = (weight=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    pub(crate) fn try_acquire(
        &self,
        py: Python<'_>,
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
        let request = self.request(py, weight, None, extra)?;
        try_acquire_on(py, self.source_ref(), self.key.as_deref(), request)
    }

    /// `try_acquire` that never raises a refusal: an `Admission` (every reason, including
    /// `concurrency_limit`, is `ok=False` with its `detail`).
    #[pyo3(signature = (weight=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    pub(crate) fn try_admit(
        &self,
        py: Python<'_>,
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
        let request = self.request(py, weight, None, extra)?;
        try_admit_on(py, self.source_ref(), self.key.as_deref(), request)
    }

    /// The dry run (docs/design.md §5.6): what `acquire` with these arguments would answer now,
    /// committing nothing (no count, no queue place, no breaker probe). A `WouldAdmit`:
    /// `.decision` is `"admit_now"`, `"would_queue"` (`.position` in the queue, 1-based) or
    /// the reason it would be refused (`.detail`). Bad arguments raise.
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn would_admit(
        &self,
        py: Python<'_>,
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
        let request = self.request(py, weight, timeout, extra)?;
        gateway::would_admit(py, self.bh.would_admit(&request), self.key.as_deref())
    }

    /// Decorator: every call of `fn` (sync or async) holds `weight` permits (and `cost` units
    /// in `admission_class`). `@bh.guard` or `@bh.guard(weight=2, timeout=1.0, cost=500)`.
    #[pyo3(signature = (r#fn=None, *, weight=None, timeout=None, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn guard(
        slf: &Bound<'_, Self>,
        r#fn: Option<&Bound<'_, PyAny>>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let me = slf.get();
        let extra = Extra {
            cost,
            class: admission_class,
            observe,
            deadline,
        };
        me.request(slf.py(), weight, timeout, extra)?;
        let acquire = slf.getattr("acquire")?;
        let acquire_sync = slf.getattr("acquire_sync")?;
        let kw = crate::guard::extra_kwargs(slf.py(), extra)?;
        crate::guard::decorator(
            slf.py(),
            &acquire,
            &acquire_sync,
            (weight, timeout),
            kw,
            r#fn,
        )
    }

    /// Installs limits from a control plane (docs/design.md §4.6) if `revision` is above the
    /// one in force: `limit` (0: the kill switch; above `max_concurrent` raises the ceiling),
    /// `budget`, `max_queue` (at most the one it was built with), `queue_timeout` (seconds),
    /// on a classed bulkhead `reserve={"permits", "budget", "min_priority"}` and
    /// `rates={"requests": {...}, "units": {...}}` (`{}` removes every rate), and on a
    /// bulkhead built with `queue_delay_target` or classes `queue_delay={"target": seconds,
    /// "interval": seconds, "lifo": bool}` (docs/design.md §4.10: the three together, an
    /// omitted key its default — target 0 (off), interval 0.1, lifo `False`; CoDel's state
    /// starts over). Validated whole:
    /// nothing changes unless all of it is accepted. Raises `StaleRevision` (a `ValueError`,
    /// `.current` the revision in force) or `ValueError` naming the bad value.
    #[pyo3(signature = (revision, *, limit=None, budget=None, max_queue=None, queue_timeout=None, reserve=None, rates=None, queue_delay=None))]
    #[allow(clippy::too_many_arguments)]
    fn apply_limits(
        &self,
        py: Python<'_>,
        revision: &Bound<'_, PyAny>,
        limit: Option<&Bound<'_, PyAny>>,
        budget: Option<&Bound<'_, PyAny>>,
        max_queue: Option<&Bound<'_, PyAny>>,
        queue_timeout: Option<&Bound<'_, PyAny>>,
        reserve: Option<&Bound<'_, PyAny>>,
        rates: Option<&Bound<'_, PyAny>>,
        queue_delay: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let count = |v: Option<&Bound<'_, PyAny>>, name: &str, max: u64| {
            v.filter(|v| !v.is_none())
                .map(|v| count_arg(v, name, 0, max))
                .transpose()
        };
        let mut snap = LimitsSnapshot::new(count_arg(revision, "revision", 0, MAX_REVISION)?);
        snap.limit = count(limit, "limit", MAX_PERMITS)?;
        snap.budget = count(budget, "budget", MAX_BUDGET)?;
        snap.max_queue = count(max_queue, "max_queue", MAX_QUEUE)?;
        snap.queue_timeout = options::named_timeout_arg(queue_timeout, "queue_timeout")?;
        snap.queue_delay = queue_delay
            .filter(|q| !q.is_none())
            .map(queue_delay_arg)
            .transpose()?;
        let (reserve, rates) = gateway::table_limits(reserve, rates)?;
        if self.bh.class_count() == 0 {
            // The core's message names `Bulkhead::with_classes`; this names the arguments.
            for (name, given) in [("reserve", reserve.is_some()), ("rates", rates.is_some())] {
                if given {
                    return Err(PyValueError::new_err(format!(
                        "{name}: this bulkhead has no classes (build it with \
                         Bulkhead(classes=[...])); nothing was applied"
                    )));
                }
            }
        }
        let table = ClassTableLimits {
            reserve,
            rates,
            ..ClassTableLimits::NONE
        };
        let applied = self.bh.apply_limits_with_table(&snap, &table);
        gateway::arm_rate_timer(py, None, &self.bh);
        match applied {
            Ok(()) => Ok(()),
            Err(LimitsError::Stale { current }) => {
                let c = current.into_pyobject(py)?.into_any().unbind();
                let msg = LimitsError::Stale { current }.to_string();
                Err(gateway::py_error(
                    py,
                    "StaleRevision",
                    msg,
                    &[("current", c)],
                ))
            }
            Err(e) => Err(PyValueError::new_err(e.to_string())),
        }
    }

    /// Changes the budget (units in flight, `0..=` the budget it was built with); never blocks,
    /// never revokes. `ValueError` out of range or on a bulkhead without a budget.
    fn set_budget(&self, py: Python<'_>, budget: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(budget, "budget", 0, MAX_BUDGET)?;
        let r = self.bh.set_budget(n).map_err(config_err);
        gateway::arm_rate_timer(py, None, &self.bh);
        r
    }

    /// Changes the observe mode (`"off"`, `"concurrency"`, `"budget"`, `"all"`; `"budget"`
    /// and `"all"` need a budget for the budget part): the dimensions named are decided and
    /// counted (`stats()["observed_by_reason"]`) but not enforced.
    fn set_observe(&self, py: Python<'_>, mode: &Bound<'_, PyAny>) -> PyResult<()> {
        let mode = gateway::observe_arg(mode, "mode")?;
        let r = self.bh.set_observe(mode).map_err(config_err);
        gateway::arm_rate_timer(py, None, &self.bh);
        r
    }

    /// One class's counts (a classed bulkhead, docs/design.md §4.8): `{"class", "name",
    /// "priority", "floor", "ceiling", "in_flight", "budget_floor", "budget_ceiling",
    /// "budget_in_use", "queued", "observe", "observed"}`. `ValueError` for a class it does
    /// not have.
    fn class_stats<'py>(
        &self,
        py: Python<'py>,
        admission_class: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let i = self.class_index(admission_class)?;
        let c = self.bh.class_stats(i).ok_or_else(|| {
            PyValueError::new_err(format!(
                "admission_class must be a class of this bulkhead (0..{}), got {i}",
                self.bh.class_count()
            ))
        })?;
        let name = self.names.get(usize::from(i)).cloned().flatten();
        class_stats_dict(py, &c, name)
    }

    /// Shared units held now by classes beyond their floors, `(permits, budget units)`;
    /// `None` without classes.
    fn class_shared_in_use(&self) -> Option<(u64, u64)> {
        self.bh.class_shared_in_use().map(|[p, b]| (p, b))
    }

    /// The class names, by index (`None` for an unnamed class); `()` without classes.
    #[getter]
    fn classes(&self) -> Vec<Option<String>> {
        self.names.to_vec()
    }

    /// The revision of the limits in force (0 before any `apply_limits`).
    #[getter]
    fn revision(&self) -> u64 {
        self.bh.revision()
    }

    /// Calls `callback(event)` for every event `name` (`"admit"`, `"reject"`, `"release"`,
    /// `"usage"`, `"reconfigure"`, `"shed"`, `"observe_bypass"` — these need
    /// `Bulkhead(events=True)`, else `ValueError` — or `"state_change"`). `event` is a dict:
    /// `kind`, `key`, the admission `id`, `class` / `class_name`, and the kind's fields
    /// (`weight`, `cost`, `reason`, `queued`, `decision` / `wait` in seconds, …). Runs on the
    /// thread that committed the event, with the GIL; an exception goes to
    /// `sys.unraisablehook` and is counted in `listener_errors`, never into the admission.
    /// It must not block.
    fn on(&self, event: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        self.observer()?.on(event, callback)
    }

    /// Removes one registration of `callback` for `event`; whether there was one.
    fn off(&self, event: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.observer()?.off(event, callback)
    }

    /// An async iterator of this bulkhead's events (`async for e in bh.events(): …`) of the
    /// kinds named (default: every admission event), buffered up to `maxsize`: when the buffer
    /// is full an event is dropped and counted (`stream.dropped`), admission never blocks.
    /// `aclose()` (or leaving `async with bh.events() as stream:`) unregisters it.
    #[pyo3(signature = (*kinds, maxsize=None))]
    fn events<'py>(
        slf: &Bound<'py, Self>,
        kinds: &Bound<'py, PyTuple>,
        maxsize: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        slf.get().observer()?;
        let py = slf.py();
        let stream = py.import("hullguard._events")?.getattr("EventStream")?;
        let kw = PyDict::new(py);
        if let Some(m) = maxsize {
            kw.set_item("maxsize", m)?;
        }
        stream.call((slf, kinds), Some(&kw))
    }

    /// Event callbacks (and `on_state_change` calls) that raised so far.
    #[getter]
    fn listener_errors(&self) -> u64 {
        self.observer.as_ref().map_or(0, |o| o.errors())
    }

    /// Changes the limit (`1..=max_concurrent`, else `ValueError`); never blocks, never
    /// revokes: growing hands permits to waiters, shrinking waits for releases.
    fn set_limit(&self, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(limit, "limit", 1, self.bh.max_concurrent())?;
        let r = self.bh.set_limit(n).map_err(config_err);
        gateway::arm_rate_timer(limit.py(), None, &self.bh);
        r
    }

    /// The stats dict (docs/design.md §8.1); `adaptive` / `circuit` are dicts when those
    /// policies are on, else `None`. Reading it may commit a due open → half-open transition
    /// (and call `on_state_change`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.bh.stats())
    }

    /// Reports an overload signal (docs/design.md §4.11): `event_loop_lag` (seconds: how late
    /// the host's event loop ran a timer) and / or `cpu` (the process's CPU use in cores: CPU
    /// time over wall time, 1.0 is one core busy). While a signal is above its threshold
    /// (`shed_lag_threshold` / `shed_cpu_threshold`) requests of a class below
    /// `critical_priority` are refused `shed` (`BulkheadShedError`, bound `"overload"`); a
    /// signal without a threshold is recorded and changes nothing. `TypeError` for a
    /// non-number or when neither is given, `ValueError` for a negative or NaN reading (nothing
    /// is reported then). Thread-safe; never blocks.
    #[pyo3(signature = (*, event_loop_lag=None, cpu=None))]
    fn report_load(
        &self,
        event_loop_lag: Option<&Bound<'_, PyAny>>,
        cpu: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        for s in metrics::load_signals(event_loop_lag, cpu)? {
            self.bh.report_load(s);
        }
        Ok(())
    }

    /// This bulkhead's samples of the core's metric table (docs/design.md §8.3), for the
    /// exporters: `[(name, class, dimension, reason, value)]` (see
    /// `hullguard._native.metric_table()`); `class` is the class name (`""` for the total).
    fn _metric_samples<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        metrics::bulkhead_samples(py, &self.bh, &self.names)
    }

    /// Stops admission; queued waiters are rejected with `BulkheadClosedError`.
    fn close(&self) {
        self.bh.close();
    }

    /// Waits (without closing) until idle or `timeout` seconds pass (`None` / `math.inf`: no
    /// deadline; 0: report at once).
    #[pyo3(signature = (timeout=None))]
    pub(crate) fn drain(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<DrainAwaitable> {
        let t = timeout_arg(timeout)?.unwrap_or(Duration::MAX);
        Ok(DrainAwaitable::new(self.bh.clone(), t))
    }

    /// `drain` on this thread (GIL released; Ctrl-C raises promptly).
    #[pyo3(signature = (timeout=None))]
    pub(crate) fn drain_sync<'py>(
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

/// `apply_limits`' `queue_delay={"target", "interval", "lifo"}` (docs/design.md §4.10): each
/// key by its option row (`queue_delay_target`, `queue_delay_interval`, `adaptive_lifo`);
/// `target` is required (0 turns shedding off: never by omission), an omitted `interval` or
/// `lifo` is its default; an unknown key is refused, naming it and the known ones.
fn queue_delay_arg(v: &Bound<'_, PyAny>) -> PyResult<QueueDelay> {
    let d = v.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "queue_delay must be a dict {{\"target\", \"interval\", \"lifo\"}} or None, not {}",
            options::type_name(v)
        ))
    })?;
    let mut q = Config::DEFAULT.queue_delay();
    let mut target = false;
    for (k, x) in d.iter() {
        let k: String = k
            .extract()
            .map_err(|_| PyTypeError::new_err("queue_delay: option names must be str"))?;
        let id = match k.as_str() {
            "target" => OptionId::QueueDelayTarget,
            "interval" => OptionId::QueueDelayInterval,
            "lifo" => OptionId::AdaptiveLifo,
            other => {
                return Err(PyValueError::new_err(format!(
                    "queue_delay: unknown option {other:?} (known: \"target\", \"interval\", \"lifo\"); nothing was applied"
                )));
            }
        };
        if x.is_none() {
            continue; // not given: the default
        }
        let name = format!("queue_delay.{k}");
        match options::value(id.spec().kind, &x, &name)? {
            Value::Duration(t) if id == OptionId::QueueDelayTarget => {
                q.target = t;
                target = true;
            }
            Value::Duration(t) => q.interval = t,
            Value::Bool(b) => q.lifo = b,
            _ => unreachable!("the kinds of the three rows"),
        }
    }
    if !target {
        return Err(PyValueError::new_err(
            "queue_delay needs \"target\" (seconds; 0 turns queue-delay shedding and LIFO off); nothing was applied",
        ));
    }
    q.validate().map_err(config_err)?;
    Ok(q)
}

/// A duration in float seconds (`Duration::MAX`, "none": `math.inf`).
pub(crate) fn seconds(d: Duration) -> f64 {
    if d == Duration::MAX {
        f64::INFINITY
    } else {
        d.as_secs_f64()
    }
}

/// A class's counts as a dict (see `Bulkhead.class_stats`).
pub(crate) fn class_stats_dict<'py>(
    py: Python<'py>,
    c: &ClassStats,
    name: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("class", c.class)?;
    d.set_item("name", name)?;
    d.set_item("priority", c.priority)?;
    d.set_item("floor", c.floor)?;
    d.set_item("ceiling", c.ceiling)?;
    d.set_item("in_flight", c.in_flight)?;
    d.set_item("budget_floor", c.budget_floor)?;
    d.set_item("budget_ceiling", c.budget_ceiling)?;
    d.set_item("budget_in_use", c.budget_in_use)?;
    d.set_item("queued", c.queued)?;
    d.set_item("observe", c.observe.as_str())?;
    d.set_item("observed", c.observed)?;
    Ok(d)
}
