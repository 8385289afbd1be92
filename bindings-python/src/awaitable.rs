//! The awaitables: `bh.acquire()` (awaitable *and* async context manager), `bh.drain()`, and a
//! ready value for `__aexit__`. They drive the core's handles: `Bulkhead::admit_owned` answers
//! a `Call` (granted), a `Waiter` (queued) or a rejection; the waiter is polled until it
//! settles; the drain is the core's drain future.
//!
//! An acquire that is admitted at once finishes inside the first `send()`: no yield to the
//! loop, no `asyncio.Future`. Only a queued acquire creates a future, yields it, and is resumed
//! by the core's wake-up (see `waiter`); its queue-timeout timer asks the core to expire the
//! ticket, and the next poll learns the rejection. Cancellation (`throw`), `close()` or garbage
//! collection while queued drops the waiter, which abandons it (a grant that raced it passes on
//! to the next waiter).

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::SeqCst},
    },
    task::{Context, Poll},
    time::Duration,
};

use hullguard_core::{
    AcquireError, Bulkhead as CoreBulkhead, Deadline as CoreDeadline, Decision,
    Registry as CoreRegistry, Request, Waiter, drain::DrainOf,
};
use pyo3::{
    exceptions::{PyRuntimeError, PyStopIteration},
    intern,
    prelude::*,
    sync::PyOnceLock,
};

use crate::{
    bulkhead::Bulkhead,
    errors::acquire_err,
    gateway,
    permit::{CoreCall, Permit},
    policy::{ArmedCall, exit_block},
    queue_timers,
    stats::drain_dict,
    waiter::WaitTarget,
};

type CoreWaiter = Waiter<Arc<CoreBulkhead>, 0>;

/// The exception `throw(typ, value)` re-raises: the instance given (a task's own
/// `CancelledError`, unchanged), or `typ()` when only a class came.
fn thrown(typ: &Bound<'_, PyAny>, value: Option<&Bound<'_, PyAny>>) -> PyResult<PyErr> {
    let exc = match value.filter(|v| !v.is_none()) {
        Some(v) => v.clone(),
        None if typ.is_instance_of::<pyo3::exceptions::PyBaseException>() => typ.clone(),
        None => typ.call0()?,
    };
    Ok(PyErr::from_value(exc))
}

/// One step of an awaitable: `Some` to yield to the task; `None` finished with the value
/// `None` — returned from `tp_iternext` as NULL with no exception set, which `await` reads as
/// a return of `None`, so an admission granted at once (`async with bh:`) and every
/// `__aexit__` finish without creating a `StopIteration`; any other final value as a raised
/// `StopIteration`; or an error.
type Step = PyResult<Option<Py<PyAny>>>;

/// Finishes with `value`.
fn stop(py: Python<'_>, value: Py<PyAny>) -> Step {
    if value.is_none(py) {
        Ok(None)
    } else {
        Err(PyStopIteration::new_err((value,)))
    }
}

/// A step as a `send()` method returns it: a method call has no "NULL without an exception"
/// convention, so finishing with `None` raises `StopIteration()` there.
fn sent(step: Step) -> PyResult<Py<PyAny>> {
    match step {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(PyStopIteration::new_err(())),
        Err(e) => Err(e),
    }
}

/// An already-finished awaitable of `None` (what every `__aexit__` returns: it never
/// swallows the block's exception).
#[pyclass(module = "hullguard._native", name = "_Ready", frozen)]
pub(crate) struct Ready;

static READY: PyOnceLock<Py<Ready>> = PyOnceLock::new();

impl Ready {
    /// The one shared instance (no allocation per `__aexit__`).
    pub(crate) fn shared(py: Python<'_>) -> PyResult<Py<Ready>> {
        let ready = READY.get_or_try_init(py, || Py::new(py, Ready))?;
        Ok(ready.clone_ref(py))
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }
    fn close(&self) {}
    fn __next__(&self) -> Step {
        Ok(None)
    }
    #[pyo3(signature = (_value=None))]
    fn send(&self, _value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        sent(Ok(None))
    }
}

/// An already-finished awaitable of a value (`async with permit:` enters with the permit).
#[pyclass(module = "hullguard._native", name = "_Done")]
pub(crate) struct Done(Option<Py<PyAny>>);

impl Done {
    pub(crate) fn new(value: Py<PyAny>) -> Self {
        Done(Some(value))
    }

    fn finish(&mut self, py: Python<'_>) -> Step {
        match self.0.take() {
            Some(v) => stop(py, v),
            None => Err(PyRuntimeError::new_err("already awaited")),
        }
    }
}

#[pymethods]
impl Done {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }
    fn close(&mut self) {
        self.0 = None;
    }
    fn __next__(&mut self, py: Python<'_>) -> Step {
        self.finish(py)
    }
    #[pyo3(signature = (_value=None))]
    fn send(&mut self, py: Python<'_>, _value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        sent(self.finish(py))
    }
}

fn cancel_timer(py: Python<'_>, timer: Option<Py<PyAny>>) {
    if let Some(t) = timer {
        drop(t.bind(py).call_method0(intern!(py, "cancel")));
    }
}

/// Where an acquire is decided: a bulkhead, or a registry key (through `Registry::admit`, so
/// a global cap decides: docs/design.md §9.2).
pub(crate) enum Source {
    Bulkhead(Arc<CoreBulkhead>),
    Registry(Arc<CoreRegistry>, String),
}

impl Source {
    pub(crate) fn decide(&self, request: &Request) -> Decision<Arc<CoreBulkhead>, 0> {
        self.as_ref().decide(request)
    }

    pub(crate) fn as_ref(&self) -> SourceRef<'_> {
        match self {
            Source::Bulkhead(bh) => SourceRef::Bulkhead(bh),
            Source::Registry(r, key) => SourceRef::Registry(r, key),
        }
    }
}

/// A [`Source`] borrowed, for a decision made within one call (`try_acquire`, `acquire_sync`):
/// no `Arc` count and no key copy on the way.
#[derive(Clone, Copy)]
pub(crate) enum SourceRef<'a> {
    Bulkhead(&'a Arc<CoreBulkhead>),
    Registry(&'a Arc<CoreRegistry>, &'a str),
}

impl SourceRef<'_> {
    pub(crate) fn decide(self, request: &Request) -> Decision<Arc<CoreBulkhead>, 0> {
        match self {
            SourceRef::Bulkhead(bh) => bh.admit_owned(request, None),
            SourceRef::Registry(r, key) => r.admit(key, request, None),
        }
    }
}

enum State {
    /// Not polled yet.
    Start(Source, Request),
    /// Queued: the core waiter, the asyncio target its wake-up resolves, and whether its
    /// deadline is scheduled on the loop's shared queue timer (`queue_timers`).
    Queued {
        bh: Arc<CoreBulkhead>,
        waiter: CoreWaiter,
        target: Arc<WaitTarget>,
        scheduled: bool,
    },
    Done,
}

/// `bh.acquire(weight, timeout)`: await it for a `Permit`, or use it as `async with`. Awaiting
/// raises the rejection (`BulkheadFullError`, `BulkheadQueueTimeoutError` after `timeout`
/// seconds queued, `BulkheadClosedError`, `CircuitOpenError`); a second await raises
/// `RuntimeError`. A queued acquire waits on the running loop of its first await; cancelling
/// the task gives its place up. One task awaits it; the bulkhead may be shared by any threads.
#[pyclass(module = "hullguard._native", name = "AcquireContext")]
pub(crate) struct AcquireContext {
    state: State,
    key: Option<String>,
    /// `async with bh:` — the block's call goes to this bulkhead object, not to a `Permit`.
    bare: Option<Py<Bulkhead>>,
    /// The granted permit (released by `__aexit__`).
    permit: Option<Py<Permit>>,
    /// Used as `async with` (`__aenter__` ran): the block is a guarded call with a deadline.
    cm: bool,
    /// The `call_timeout` timer of the `async with` block.
    armed: Option<ArmedCall>,
    /// `bh.admit()`: finishes with an `Admission` instead of raising a refusal.
    admission: bool,
    /// The request's deadline (docs/design.md §5.9), for the call timeout of its permit.
    deadline: CoreDeadline,
}

impl AcquireContext {
    pub(crate) fn new(
        bh: Arc<CoreBulkhead>,
        key: Option<String>,
        request: Request,
        bare: Option<Py<Bulkhead>>,
    ) -> Self {
        Self::from_source(Source::Bulkhead(bh), key, request, bare)
    }

    /// An acquire decided by `source`.
    pub(crate) fn from_source(
        source: Source,
        key: Option<String>,
        request: Request,
        bare: Option<Py<Bulkhead>>,
    ) -> Self {
        Self {
            deadline: request.deadline,
            state: State::Start(source, request),
            key,
            bare,
            permit: None,
            cm: false,
            armed: None,
            admission: false,
        }
    }

    /// The non-throwing form (`bh.admit()`): awaiting it gives an `Admission`.
    pub(crate) fn non_throwing(mut self) -> Self {
        self.admission = true;
        self
    }

    fn settled(&mut self, py: Python<'_>, r: Result<CoreCall, AcquireError>) -> Step {
        if self.admission {
            let value = match r {
                Ok(call) => {
                    let permit = Py::new(py, Permit::new(call, self.key.clone(), self.deadline))?;
                    if self.cm {
                        // `async with bh.admit() as a:` is one guarded call as `async with
                        // bh.acquire()` is (its `call_timeout` armed at the grant); the exit
                        // releases a granted permit.
                        self.armed = ArmedCall::arm(py, &permit);
                        self.permit = Some(permit.clone_ref(py));
                    }
                    gateway::admitted(py, permit.into_any())?
                }
                Err(e) => gateway::refused(py, &e, self.key.as_deref())?,
            };
            return stop(py, value);
        }
        let call = r.map_err(|e| acquire_err(py, &e, self.key.as_deref()))?;
        if let Some(bh) = &self.bare {
            bh.get().enter_block(py, call, self.deadline)?;
            return Ok(None);
        }
        let permit = Py::new(py, Permit::new(call, self.key.clone(), self.deadline))?;
        if self.cm {
            self.armed = ArmedCall::arm(py, &permit);
        }
        self.permit = Some(permit.clone_ref(py));
        stop(py, permit.into_any())
    }

    /// Registers the wake-up and yields the future, unless the waiter settled meanwhile.
    fn wait(
        &mut self,
        py: Python<'_>,
        bh: Arc<CoreBulkhead>,
        mut waiter: CoreWaiter,
        target: Arc<WaitTarget>,
        scheduled: bool,
    ) -> Step {
        if let Poll::Ready(r) = waiter.poll(Some(&target.waker())) {
            return self.settled(py, r);
        }
        // Scheduled once, at the first wait (an error drops, i.e. abandons, the waiter); a
        // settled waiter's deadline is left to the shared timer, which finds it stale.
        if !scheduled {
            let timeout = waiter.queue_timeout();
            queue_timers::schedule(py, target.event_loop(py), &bh, waiter.ticket(), timeout)?;
        }
        gateway::arm_rate_timer(py, Some(target.event_loop(py)), &bh);
        let fut = target.future_to_yield(py)?;
        self.state = State::Queued {
            bh,
            waiter,
            target,
            scheduled: true,
        };
        Ok(Some(fut.unbind()))
    }

    fn step(&mut self, py: Python<'_>) -> Step {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Start(source, request) => match source.decide(&request) {
                Decision::Granted(call) => self.settled(py, Ok(call)),
                Decision::Rejected(e) => self.settled(py, Err(e)),
                // No running loop: the waiter is dropped (abandoned) before raising.
                Decision::Queued(waiter) => {
                    let bh = waiter.handle().clone();
                    self.wait(py, bh, waiter, WaitTarget::new(py)?, false)
                }
            },
            // Woken: take the outcome first; only a spurious wake-up (still pending) needs a
            // fresh future for the next wait.
            State::Queued {
                bh,
                mut waiter,
                target,
                scheduled,
            } => match waiter.poll(None) {
                Poll::Ready(r) => self.settled(py, r),
                Poll::Pending => {
                    target.renew(py)?;
                    self.wait(py, bh, waiter, target, scheduled)
                }
            },
            State::Done => Err(PyRuntimeError::new_err(
                "this acquire has already been awaited",
            )),
        }
    }

    /// Gives a queued waiter up (cancellation, close, garbage collection): dropping it
    /// abandons the ticket (its deadline, if scheduled, finds it stale).
    fn abandon(&mut self, _py: Python<'_>) {
        self.state = State::Done;
    }
}

#[pymethods]
impl AcquireContext {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Iterable like a generator-based coroutine, so asyncio's helpers accept it.
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> Step {
        self.step(py)
    }

    #[pyo3(signature = (_value=None))]
    fn send(&mut self, py: Python<'_>, _value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        sent(self.step(py))
    }

    /// The task was cancelled (or another exception thrown in) while waiting: give the place
    /// up — a grant that raced the cancel passes on — and re-raise it unchanged.
    #[pyo3(signature = (typ, value=None, _tb=None))]
    fn throw(
        &mut self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.abandon(py);
        Err(thrown(typ, value)?)
    }

    fn close(&mut self, py: Python<'_>) {
        self.abandon(py);
    }

    /// `async with bh.acquire() as permit:` — the block is one guarded call (its
    /// `call_timeout`, if configured, is armed at the grant).
    fn __aenter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        slf.cm = true;
        slf
    }

    /// Releases the permit taken by `__aenter__` (skipped silently if already released),
    /// recording the outcome the block's exception gives (none → success,
    /// `asyncio.CancelledError` → ignored, other → failure). Raises `CallTimeoutError` if the
    /// block overran `call_timeout` (its cancellation is replaced, as `asyncio.timeout` does);
    /// never swallows the block's exception.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        let armed = self.armed.take();
        if let Some(p) = self.permit.take() {
            exit_block(py, p.get(), armed.as_ref(), exc_type)?;
        }
        Ready::shared(py)
    }
}

impl Drop for AcquireContext {
    fn drop(&mut self) {
        // A waiter still queued is abandoned by its drop; the timers need the interpreter.
        if matches!(self.state, State::Queued { .. }) || self.armed.is_some() {
            Python::attach(|py| {
                self.abandon(py);
                if let Some(a) = self.armed.take() {
                    a.cancel(py);
                }
            });
        }
    }
}

/// The deadline of an async drain, as the core drain's `sleep` future: ready once set (by its
/// loop timer, or at once for a timeout of 0).
struct Deadline(Arc<AtomicBool>);

impl Future for Deadline {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0.load(SeqCst) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// The loop timer of an async drain: sets its deadline and wakes it.
#[pyclass(module = "hullguard._native", frozen)]
pub(crate) struct DrainTimer {
    passed: Arc<AtomicBool>,
    target: Arc<WaitTarget>,
}

#[pymethods]
impl DrainTimer {
    fn __call__(&self, py: Python<'_>) {
        self.passed.store(true, SeqCst);
        self.target.wake_now(py);
    }
}

type CoreDrain = DrainOf<Arc<CoreBulkhead>, Deadline, 0>;

/// `await bh.drain(timeout)`: `{"drained", "active", "queued"}` once the bulkhead is idle or
/// `timeout` seconds passed (then `drained` is `False`). Cancelling it is clean.
#[pyclass(module = "hullguard._native", name = "DrainAwaitable")]
pub(crate) struct DrainAwaitable {
    drain: Pin<Box<CoreDrain>>,
    timeout: Duration,
    passed: Arc<AtomicBool>,
    target: Option<Arc<WaitTarget>>,
    timer: Option<Py<PyAny>>,
    done: bool,
}

impl DrainAwaitable {
    /// `timeout`: `Duration::MAX` waits until idle; zero reports at once.
    pub(crate) fn new(bh: Arc<CoreBulkhead>, timeout: Duration) -> Self {
        let passed = Arc::new(AtomicBool::new(timeout.is_zero()));
        Self {
            drain: Box::pin(bh.drain_owned(Some(Deadline(passed.clone())))),
            timeout,
            passed,
            target: None,
            timer: None,
            done: false,
        }
    }

    fn step(&mut self, py: Python<'_>) -> Step {
        if self.done {
            return Err(PyRuntimeError::new_err(
                "this drain has already been awaited",
            ));
        }
        let target = match &self.target {
            Some(t) => t.renew(py).map(|()| t.clone())?,
            None => self.target.insert(WaitTarget::new(py)?).clone(),
        };
        let waker = target.waker();
        if let Poll::Ready(r) = self.drain.as_mut().poll(&mut Context::from_waker(&waker)) {
            self.close(py);
            return stop(py, drain_dict(py, &r)?.into_any().unbind());
        }
        if self.timer.is_none() && self.timeout != Duration::MAX {
            let passed = self.passed.clone();
            let cb = Py::new(
                py,
                DrainTimer {
                    passed,
                    target: target.clone(),
                },
            )?;
            let args = (self.timeout.as_secs_f64(), cb);
            let h = target.event_loop(py).call_method1("call_later", args)?;
            self.timer = Some(h.unbind());
        }
        Ok(Some(target.future_to_yield(py)?.unbind()))
    }
}

#[pymethods]
impl DrainAwaitable {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }
    fn close(&mut self, py: Python<'_>) {
        self.done = true;
        cancel_timer(py, self.timer.take());
    }
    fn __next__(&mut self, py: Python<'_>) -> Step {
        self.step(py)
    }
    #[pyo3(signature = (_value=None))]
    fn send(&mut self, py: Python<'_>, _value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        sent(self.step(py))
    }
    #[pyo3(signature = (typ, value=None, _tb=None))]
    fn throw(
        &mut self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.close(py);
        Err(thrown(typ, value)?)
    }
}
