//! `Bulkhead`: the Python face of one core bulkhead. Argument conversion, error mapping and
//! event-loop / thread plumbing only; every admission decision is the core's.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hullguard_core::{
    Admission, Bulkhead as CoreBulkhead, CancelError, Clock, ClockSource, Config, MAX_PERMITS,
    MAX_QUEUE, Reason, Rejection, TicketPoll,
};
use pyo3::{exceptions::PyValueError, prelude::*, types::PyDict};

use crate::{
    awaitable::{AcquireContext, BareHeld, DrainAwaitable, Ready},
    errors::{acquire_err, count_arg, rejection_err, seconds_arg},
    permit::Permit,
    policy::{Admitting, PyObserver, config_error, resilience_from},
    stats::{drain_dict, stats_dict},
};

/// How long `acquire_sync` / `drain_sync` park before checking for signals (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// A test hook: the host clock taken from a Python callable returning integer ns.
pub(crate) struct PyClock(pub(crate) Py<PyAny>);

impl Clock for PyClock {
    fn now_ns(&self) -> u64 {
        Python::attach(|py| {
            self.0
                .bind(py)
                .call0()
                .and_then(|v| v.extract::<u64>())
                .unwrap_or(0)
        })
    }
}

pub(crate) fn clock_source(clock: Option<Py<PyAny>>) -> ClockSource {
    match clock {
        Some(c) => ClockSource::Shared(Arc::new(PyClock(c))),
        None => ClockSource::default_for_host(),
    }
}

/// The bulkhead's own options, as Python passes them.
#[derive(Clone, Copy)]
pub(crate) struct Options<'a, 'py> {
    pub(crate) max_concurrent: Option<&'a Bound<'py, PyAny>>,
    pub(crate) max_queue: Option<&'a Bound<'py, PyAny>>,
    pub(crate) queue_timeout: Option<&'a Bound<'py, PyAny>>,
    pub(crate) enabled: Option<&'a Bound<'py, PyAny>>,
    /// `Some` replaces `base.resilience` (parsed for the final `max_concurrent`; `None` = off).
    pub(crate) resilience: Option<&'a Bound<'py, PyAny>>,
}

/// Builds a `Config` from Python arguments over `base`, naming the bad one: the types are
/// converted here, the ranges checked by the core's `Config::validate`.
pub(crate) fn config_from(o: Options<'_, '_>, base: Config) -> PyResult<Config> {
    let Options {
        max_concurrent,
        max_queue,
        queue_timeout,
        enabled,
        resilience,
    } = o;
    let mut c = base;
    if let Some(v) = max_concurrent.filter(|v| !v.is_none()) {
        c.max_concurrent = count_arg(v, "max_concurrent", 1, MAX_PERMITS)?;
    }
    if let Some(v) = max_queue.filter(|v| !v.is_none()) {
        c.max_queue = count_arg(v, "max_queue", 0, MAX_QUEUE)?;
    }
    if let Some(d) = seconds_arg(queue_timeout, "queue_timeout")? {
        c.queue_timeout = d;
    }
    if let Some(v) = enabled.filter(|v| !v.is_none()) {
        if !v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "enabled must be a bool, not {}",
                v.get_type().name()?
            )));
        }
        c.enabled = v.extract()?;
    }
    if let Some(r) = resilience {
        c.resilience = resilience_from(r, c.max_concurrent)?;
    }
    c.validate().map_err(config_error)?;
    Ok(c)
}

/// The effective queue timeout of one call: `None` → the bulkhead's `queue_timeout`.
fn call_timeout(bh: &CoreBulkhead, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Duration> {
    Ok(seconds_arg(timeout, "timeout")?.unwrap_or(bh.queue_timeout()))
}

pub(crate) fn weight_arg(bh: &CoreBulkhead, weight: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    match weight {
        None => Ok(1),
        Some(w) => count_arg(w, "weight", 1, bh.max_concurrent()),
    }
}

/// `try_acquire`: a permit, `None` for `concurrency_limit`, any other reason raised.
pub(crate) fn try_acquire_on(
    py: Python<'_>,
    bh: &Arc<CoreBulkhead>,
    key: Option<&str>,
    weight: u64,
) -> PyResult<Option<Permit>> {
    let mut call = Admitting::new(&**bh);
    let admitted = call
        .begin(weight)
        .and_then(|()| bh.try_acquire_units(weight));
    match admitted {
        Ok(()) => Ok(Some(Permit::new(
            bh.clone(),
            weight,
            key.map(str::to_owned),
            call.granted(false),
        ))),
        Err(e) if e.reason() == Some(Reason::ConcurrencyLimit) => Ok(None),
        Err(e) => Err(acquire_err(py, &e, key)),
    }
}

/// `acquire_sync`: parks this thread (GIL released) in slices of at most 100 ms, checking for
/// signals between slices, so Ctrl-C raises promptly and the ticket is given up cleanly.
pub(crate) fn acquire_sync_on(
    py: Python<'_>,
    bh: &Arc<CoreBulkhead>,
    key: Option<&str>,
    weight: u64,
    timeout: Duration,
) -> PyResult<Permit> {
    let key_owned = key.map(str::to_owned);
    let deadline = (timeout != Duration::MAX)
        .then(|| Instant::now().checked_add(timeout))
        .flatten();
    // Every way out below that is not a grant ends the call `ignored` (dropping `call`).
    let mut call = Admitting::new(&**bh);
    let admission = call
        .begin(weight)
        .and_then(|()| bh.enqueue_within(weight, timeout, None));
    let ticket = match admission {
        Ok(Admission::Granted) => {
            return Ok(Permit::new(
                bh.clone(),
                weight,
                key_owned,
                call.granted(false),
            ));
        }
        Ok(Admission::Queued(t)) => t,
        Err(e) => return Err(acquire_err(py, &e, key)),
    };
    let waker = std::task::Waker::from(Arc::new(ThreadWake(std::thread::current())));
    loop {
        let polled = py.detach(|| {
            let slice_end = Instant::now() + SIGNAL_SLICE;
            let until = deadline.map_or(slice_end, |d| d.min(slice_end));
            loop {
                match bh.poll_ticket(ticket, Some(&waker)) {
                    Ok(TicketPoll::Pending) => {}
                    other => return other,
                }
                let now = Instant::now();
                if now >= until {
                    return Ok(TicketPoll::Pending);
                }
                std::thread::park_timeout(until - now);
            }
        });
        match polled {
            Ok(TicketPoll::Granted(w)) => {
                return Ok(Permit::new(bh.clone(), w, key_owned, call.granted(true)));
            }
            Ok(TicketPoll::Rejected(r)) => return Err(rejection_err(py, &r, key)),
            Ok(TicketPoll::Pending) => {}
            Err(_) => {
                let r = Rejection {
                    reason: Reason::Aborted,
                    snapshot: bh.snapshot(),
                };
                return Err(rejection_err(py, &r, key));
            }
        }
        if let Err(e) = py.check_signals() {
            bh.abandon(ticket);
            return Err(e);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            match bh.cancel(ticket, Reason::Timeout) {
                Ok(()) => {
                    let r = Rejection {
                        reason: Reason::Timeout,
                        snapshot: bh.snapshot(),
                    };
                    return Err(rejection_err(py, &r, key));
                }
                // Settled first: the next poll takes the outcome.
                Err(CancelError::Granted | CancelError::Rejected(_)) => {}
                Err(CancelError::Stale) => bh.abandon(ticket),
                Err(_) => {}
            }
        }
    }
}

struct ThreadWake(std::thread::Thread);
impl std::task::Wake for ThreadWake {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// `drain_sync`: parks in slices, checking for signals.
pub(crate) fn drain_sync_on<'py>(
    py: Python<'py>,
    bh: &CoreBulkhead,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let timeout = seconds_arg(timeout, "timeout")?.unwrap_or(Duration::MAX);
    let deadline = (timeout != Duration::MAX)
        .then(|| Instant::now().checked_add(timeout))
        .flatten();
    loop {
        let slice = deadline.map_or(SIGNAL_SLICE, |d| {
            d.saturating_duration_since(Instant::now())
                .min(SIGNAL_SLICE)
        });
        let r = py.detach(|| bh.drain_blocking(Some(slice)));
        if r.drained || deadline.is_some_and(|d| Instant::now() >= d) {
            return drain_dict(py, &r);
        }
        py.check_signals()?;
    }
}

/// A bulkhead: at most `max_concurrent` permits in flight, at most `max_queue` callers waiting
/// (FIFO, no barging) for at most `queue_timeout` seconds. Thread-safe; usable from several
/// event loops and threads at once.
///
/// `resilience={"adaptive": {...}, "breaker": {...}, "call_timeout": seconds}` adds the
/// policies of DESIGN §4 (a part omitted or `None` is off; `{}` is on with the defaults;
/// durations in seconds; an unknown key or bad value raises `ValueError` / `TypeError` naming
/// it, e.g. `resilience.breaker.open_duration`). Every acquire is then a guarded call: an open
/// breaker raises `CircuitOpenError` before admission; the outcome (`permit.release(outcome=)`,
/// or the exception leaving `with` / `async with` / a `guard`ed function) feeds the breaker
/// and the adaptive limit. `call_timeout` bounds `guard`ed calls and `async with` blocks
/// (`CallTimeoutError`). `on_state_change(key, old, new)` is called (with the GIL, on the
/// thread that committed it; `key` is `None`) for each breaker transition between
/// `"closed"`, `"open"` and `"half_open"`; its exceptions go to `sys.unraisablehook`.
#[pyclass(module = "hullguard._native", name = "Bulkhead", subclass, frozen)]
pub(crate) struct Bulkhead {
    pub(crate) bh: Arc<CoreBulkhead>,
    pub(crate) key: Option<String>,
    /// Units held by this object's `async with bh:` blocks.
    bare: Arc<BareHeld>,
}

impl Bulkhead {
    pub(crate) fn wrap(bh: Arc<CoreBulkhead>, key: Option<String>) -> Self {
        Self {
            bare: Arc::new(BareHeld::new(bh.clone())),
            bh,
            key,
        }
    }
}

#[pymethods]
impl Bulkhead {
    #[new]
    #[pyo3(signature = (max_concurrent=None, max_queue=None, queue_timeout=None, enabled=None, *, resilience=None, on_state_change=None, _clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_concurrent: Option<&Bound<'_, PyAny>>,
        max_queue: Option<&Bound<'_, PyAny>>,
        queue_timeout: Option<&Bound<'_, PyAny>>,
        enabled: Option<&Bound<'_, PyAny>>,
        resilience: Option<&Bound<'_, PyAny>>,
        on_state_change: Option<&Bound<'_, PyAny>>,
        _clock: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let config = config_from(
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
        let bh = CoreBulkhead::with_observer(config, clock_source(_clock), observer, None)
            .map_err(config_error)?;
        Ok(Self::wrap(Arc::new(bh), None))
    }

    /// Waits for `weight` permits: `await bh.acquire()` gives a `Permit` (release it yourself);
    /// `async with bh.acquire() as permit:` releases on exit.
    #[pyo3(signature = (weight=None, timeout=None))]
    fn acquire(
        &self,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        let w = weight_arg(&self.bh, weight)?;
        let t = call_timeout(&self.bh, timeout)?;
        Ok(AcquireContext::new(
            self.bh.clone(),
            self.key.clone(),
            w,
            t,
            None,
        ))
    }

    /// `async with bh:` — one permit for the block.
    fn __aenter__(&self) -> AcquireContext {
        AcquireContext::new(
            self.bh.clone(),
            self.key.clone(),
            1,
            self.bh.queue_timeout(),
            Some(self.bare.clone()),
        )
    }

    /// Returns the unit of the `async with bh:` block (a stray call returns nothing and is
    /// counted in `released_twice_total`).
    /// With policies, the block's exception gives the outcome (none → success,
    /// `asyncio.CancelledError` → ignored, other → failure), and a block that overran
    /// `call_timeout` raises `CallTimeoutError`.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        self.bare.exit(py, exc_type)?;
        Ready::exit_false(py)
    }

    /// Blocks this thread (GIL released) until admitted.
    #[pyo3(signature = (weight=None, timeout=None))]
    fn acquire_sync(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let w = weight_arg(&self.bh, weight)?;
        let t = call_timeout(&self.bh, timeout)?;
        acquire_sync_on(py, &self.bh, self.key.as_deref(), w, t)
    }

    /// A permit now, or `None` (`concurrency_limit`); other reasons raise.
    #[pyo3(signature = (weight=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Permit>> {
        let w = weight_arg(&self.bh, weight)?;
        try_acquire_on(py, &self.bh, self.key.as_deref(), w)
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
        let me = slf.borrow();
        weight_arg(&me.bh, weight)?;
        call_timeout(&me.bh, timeout)?;
        let py = slf.py();
        let acquire = slf.getattr("acquire")?;
        let acquire_sync = slf.getattr("acquire_sync")?;
        let call_timeout = me.bh.call_timeout();
        crate::guard::decorator(
            py,
            &acquire,
            &acquire_sync,
            (weight, timeout),
            call_timeout,
            r#fn,
        )
    }

    /// Changes the limit (1 ..= max_concurrent); never blocks, never revokes.
    fn set_limit(&self, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(limit, "limit", 1, self.bh.max_concurrent())?;
        self.bh
            .set_limit(n)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The stats dict (DESIGN §3.7); `adaptive` / `circuit` are dicts when those policies
    /// are on, else `None`. Reading it may commit a due open → half-open transition (and fire
    /// `on_state_change`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.bh.stats())
    }

    /// Stops admission; queued waiters are rejected with `BulkheadClosedError`.
    fn close(&self) {
        self.bh.close();
    }

    /// Waits (without closing) until idle or `timeout` seconds pass.
    #[pyo3(signature = (timeout=None))]
    fn drain(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<DrainAwaitable> {
        let t = seconds_arg(timeout, "timeout")?.unwrap_or(Duration::MAX);
        Ok(DrainAwaitable::new(self.bh.clone(), t))
    }

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
    #[getter]
    fn queue_timeout(&self) -> f64 {
        let t = self.bh.queue_timeout();
        if t == Duration::MAX {
            f64::INFINITY
        } else {
            t.as_secs_f64()
        }
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
        self.bh.call_timeout().map(|d| d.as_secs_f64())
    }
    /// The breaker's state now (`"closed"`, `"open"`, `"half_open"`; committing a due
    /// open → half-open transition), or `None` without a breaker.
    #[getter]
    fn circuit_state(&self) -> Option<&'static str> {
        self.bh.circuit_state().map(|s| s.as_str())
    }

    fn __repr__(&self) -> String {
        let s = self.bh.stats();
        format!(
            "<Bulkhead limit={} active={} queued={}{}>",
            s.limit,
            s.active,
            s.queued,
            self.key
                .as_ref()
                .map(|k| format!(" key={k:?}"))
                .unwrap_or_default()
        )
    }
}
