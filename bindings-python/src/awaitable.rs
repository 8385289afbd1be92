//! The awaitables: `bh.acquire()` (awaitable *and* async context manager), `bh.drain()`, and a
//! ready value for `__aexit__`.
//!
//! An acquire that is admitted at once finishes inside the first `send()`: no yield to the
//! loop, no `asyncio.Future`. Only a queued acquire creates a future, yields it, and is resumed
//! by the core's grant (see `waiter`). Cancellation (`throw`) or garbage collection while
//! queued abandons the ticket: a grant that raced it passes on to the next waiter.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, atomic::Ordering::SeqCst},
    task::{Context, Poll},
    time::Duration,
};

use hullguard_core::{
    Admission, Bulkhead as CoreBulkhead, Reason, Rejection, Ticket, TicketPoll, drain::DrainOf,
};
use pyo3::{
    exceptions::{PyRuntimeError, PyStopIteration},
    prelude::*,
};

use crate::{
    errors::{acquire_err, rejection_err},
    permit::Permit,
    waiter::{QueueTimer, WaitTarget},
};

/// Units held by `async with bh:` blocks of one `Bulkhead` object. `__aexit__` returns a
/// unit only if one is outstanding, so a stray `__aexit__` can never mint a permit (counted as
/// a double release instead).
#[derive(Debug)]
pub(crate) struct BareHeld {
    bh: Arc<CoreBulkhead>,
    held: std::sync::atomic::AtomicU64,
}

impl BareHeld {
    pub(crate) fn new(bh: Arc<CoreBulkhead>) -> Self {
        Self {
            bh,
            held: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn enter(&self) {
        self.held.fetch_add(1, SeqCst);
    }

    /// Returns one unit if a block holds one.
    pub(crate) fn exit(&self) {
        let took = self
            .held
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if took {
            self.bh.release_units(1);
        } else {
            self.bh.record_double_release();
        }
    }
}

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

/// What to yield to the task, or the final value (as `StopIteration`), or an error.
type Step = PyResult<Py<PyAny>>;

fn stop(value: Py<PyAny>) -> Step {
    Err(PyStopIteration::new_err((value,)))
}

/// An already-finished awaitable (the result of `__aexit__`).
#[pyclass(module = "hullguard._native", name = "_Ready", frozen)]
pub(crate) struct Ready {
    value: Py<PyAny>,
}

static READY_FALSE: pyo3::sync::PyOnceLock<Py<Ready>> = pyo3::sync::PyOnceLock::new();

impl Ready {
    /// The one shared, already-finished awaitable of `False` (what every `__aexit__` returns).
    pub(crate) fn exit_false(py: Python<'_>) -> PyResult<Py<Ready>> {
        READY_FALSE
            .get_or_try_init(py, || {
                Py::new(
                    py,
                    Ready {
                        value: false.into_pyobject(py)?.to_owned().into_any().unbind(),
                    },
                )
            })
            .map(|r| r.clone_ref(py))
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
    fn __next__(&self, py: Python<'_>) -> Step {
        stop(self.value.clone_ref(py))
    }
    #[pyo3(signature = (_value=None))]
    fn send(&self, py: Python<'_>, _value: Option<&Bound<'_, PyAny>>) -> Step {
        stop(self.value.clone_ref(py))
    }
}

enum State {
    Init,
    Waiting {
        ticket: Ticket,
        target: Arc<WaitTarget>,
        timer: Option<Py<PyAny>>,
    },
    Failed(Option<PyErr>),
    Done,
}

/// Arms the queue-timeout timer (`loop.call_later`), unless there is no deadline.
fn arm_timer(
    py: Python<'_>,
    bh: &Arc<CoreBulkhead>,
    ticket: Ticket,
    target: &Arc<WaitTarget>,
    timeout: Duration,
) -> PyResult<Option<Py<PyAny>>> {
    if timeout == Duration::MAX {
        return Ok(None);
    }
    let cb = Py::new(py, QueueTimer::new(bh.clone(), ticket, target.clone()))?;
    let handle = target
        .event_loop(py)
        .call_method1("call_later", (timeout.as_secs_f64(), cb))?;
    Ok(Some(handle.unbind()))
}

fn cancel_timer(py: Python<'_>, timer: Option<Py<PyAny>>) {
    if let Some(t) = timer {
        drop(t.bind(py).call_method0("cancel"));
    }
}

/// `bh.acquire(weight, timeout)`: await it for a `Permit`, or use it as `async with`.
#[pyclass(module = "hullguard._native", name = "AcquireContext")]
pub(crate) struct AcquireContext {
    bh: Arc<CoreBulkhead>,
    key: Option<String>,
    weight: u64,
    /// Resolved queue timeout: `ZERO` = do not queue, `MAX` = no deadline.
    timeout: Duration,
    /// `async with bh:` — hold one unit without a `Permit` object, counted in this bulkhead
    /// object's `BareHeld` so that `Bulkhead.__aexit__` can never return more than was taken.
    bare: Option<Arc<BareHeld>>,
    state: State,
    permit: Option<Py<Permit>>,
}

impl AcquireContext {
    pub(crate) fn new(
        bh: Arc<CoreBulkhead>,
        key: Option<String>,
        weight: u64,
        timeout: Duration,
        bare: Option<Arc<BareHeld>>,
    ) -> Self {
        Self {
            bh,
            key,
            weight,
            timeout,
            bare,
            state: State::Init,
            permit: None,
        }
    }

    /// An acquire that raises `err` when awaited (a registry key that could not be created).
    pub(crate) fn failed(bh: Arc<CoreBulkhead>, key: Option<String>, err: PyErr) -> Self {
        let mut s = Self::new(bh, key, 1, Duration::ZERO, None);
        s.state = State::Failed(Some(err));
        s
    }

    fn granted(&mut self, py: Python<'_>, weight: u64) -> Step {
        self.state = State::Done;
        if let Some(bare) = &self.bare {
            bare.enter();
            return stop(py.None());
        }
        let permit = Py::new(py, Permit::new(self.bh.clone(), weight, self.key.clone()))?;
        self.permit = Some(permit.clone_ref(py));
        stop(permit.into_any())
    }

    fn rejected(&mut self, py: Python<'_>, r: &Rejection) -> Step {
        self.state = State::Done;
        Err(rejection_err(py, r, self.key.as_deref()))
    }

    fn first_step(&mut self, py: Python<'_>) -> Step {
        let admission = self.bh.enqueue_within(self.weight, self.timeout, None);
        let ticket = match admission {
            Ok(Admission::Granted) => return self.granted(py, self.weight),
            Ok(Admission::Queued(t)) => t,
            Err(e) => {
                self.state = State::Done;
                return Err(acquire_err(py, &e, self.key.as_deref()));
            }
        };
        let target = match WaitTarget::new(py) {
            Ok(t) => t,
            Err(e) => {
                // No running loop: give the place back before raising.
                self.bh.abandon(ticket);
                self.state = State::Done;
                return Err(e);
            }
        };
        self.wait(py, ticket, target, None, true)
    }

    /// Registers the waker and yields the future, or finishes if the ticket settled.
    fn wait(
        &mut self,
        py: Python<'_>,
        ticket: Ticket,
        target: Arc<WaitTarget>,
        timer: Option<Py<PyAny>>,
        first: bool,
    ) -> Step {
        match self.bh.poll_ticket(ticket, Some(&target.waker())) {
            Ok(TicketPoll::Pending) => {
                let timer = if first {
                    match arm_timer(py, &self.bh, ticket, &target, self.timeout) {
                        Ok(t) => t,
                        Err(e) => {
                            self.bh.abandon(ticket);
                            self.state = State::Done;
                            return Err(e);
                        }
                    }
                } else {
                    timer
                };
                let fut = target.future_to_yield(py)?;
                self.state = State::Waiting {
                    ticket,
                    target,
                    timer,
                };
                Ok(fut.unbind())
            }
            Ok(TicketPoll::Granted(w)) => {
                cancel_timer(py, timer);
                self.granted(py, w)
            }
            Ok(TicketPoll::Rejected(r)) => {
                cancel_timer(py, timer);
                self.rejected(py, &r)
            }
            Err(_) => {
                cancel_timer(py, timer);
                let reason = if target.timed_out.load(SeqCst) {
                    Reason::Timeout
                } else {
                    Reason::Aborted
                };
                let r = Rejection {
                    reason,
                    snapshot: self.bh.snapshot(),
                };
                self.rejected(py, &r)
            }
        }
    }

    fn step(&mut self, py: Python<'_>) -> Step {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Init => self.first_step(py),
            State::Waiting {
                ticket,
                target,
                timer,
            } => {
                if target.timed_out.load(SeqCst) {
                    let r = Rejection {
                        reason: Reason::Timeout,
                        snapshot: self.bh.snapshot(),
                    };
                    return self.rejected(py, &r);
                }
                // Woken: take the outcome first; only a spurious wake-up (still pending)
                // needs a fresh future for the next wait.
                match self.bh.poll_ticket(ticket, None) {
                    Ok(TicketPoll::Granted(w)) => {
                        cancel_timer(py, timer);
                        self.granted(py, w)
                    }
                    Ok(TicketPoll::Rejected(r)) => {
                        cancel_timer(py, timer);
                        self.rejected(py, &r)
                    }
                    _ => {
                        target.renew(py)?;
                        self.wait(py, ticket, target, timer, false)
                    }
                }
            }
            State::Failed(e) => Err(e.unwrap_or_else(|| {
                PyRuntimeError::new_err("this acquire has already been awaited")
            })),
            State::Done => Err(PyRuntimeError::new_err(
                "this acquire has already been awaited",
            )),
        }
    }

    /// Gives a queued ticket up (cancellation, close, garbage collection).
    fn abandon(&mut self, py: Python<'_>) {
        if let State::Waiting { ticket, timer, .. } =
            std::mem::replace(&mut self.state, State::Done)
        {
            cancel_timer(py, timer);
            self.bh.abandon(ticket);
        }
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
    fn send(&mut self, py: Python<'_>, _value: Option<&Bound<'_, PyAny>>) -> Step {
        self.step(py)
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
    ) -> Step {
        self.abandon(py);
        Err(thrown(typ, value)?)
    }

    fn close(&mut self, py: Python<'_>) {
        self.abandon(py);
    }

    fn __aenter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Releases the permit taken by `__aenter__` (skipped silently if already released).
    #[pyo3(signature = (_exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &mut self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        if let Some(p) = self.permit.take() {
            p.get().release_inner(false);
        }
        Ready::exit_false(py)
    }
}

impl Drop for AcquireContext {
    fn drop(&mut self) {
        if matches!(self.state, State::Waiting { .. }) {
            Python::attach(|py| self.abandon(py));
        }
    }
}

/// The timer of an async drain: marks it timed out and wakes it.
#[pyclass(module = "hullguard._native", frozen)]
pub(crate) struct DrainTimer {
    target: Arc<WaitTarget>,
}

#[pymethods]
impl DrainTimer {
    fn __call__(&self, py: Python<'_>) {
        self.target.timed_out.store(true, SeqCst);
        self.target.wake_now(py);
    }
}

type CoreDrain = DrainOf<Arc<CoreBulkhead>, std::future::Pending<()>, 0>;

/// `await bh.drain(timeout)`: `{"drained", "active", "queued"}`.
#[pyclass(module = "hullguard._native", name = "DrainAwaitable")]
pub(crate) struct DrainAwaitable {
    drain: Pin<Box<CoreDrain>>,
    timeout: Duration,
    target: Option<Arc<WaitTarget>>,
    timer: Option<Py<PyAny>>,
    done: bool,
}

impl DrainAwaitable {
    pub(crate) fn new(bh: Arc<CoreBulkhead>, timeout: Duration) -> Self {
        Self {
            drain: Box::pin(bh.drain_owned(None)),
            timeout,
            target: None,
            timer: None,
            done: false,
        }
    }

    fn finish(&mut self, py: Python<'_>, drained: bool) -> Step {
        self.done = true;
        cancel_timer(py, self.timer.take());
        let r = self.drain.result(drained);
        stop(crate::stats::drain_dict(py, &r)?.into_any().unbind())
    }

    fn step(&mut self, py: Python<'_>) -> Step {
        if self.done {
            return Err(PyRuntimeError::new_err(
                "this drain has already been awaited",
            ));
        }
        let target = match &self.target {
            Some(t) => {
                t.renew(py)?;
                t.clone()
            }
            None => {
                let t = WaitTarget::new(py)?;
                self.target = Some(t.clone());
                t
            }
        };
        let waker = target.waker();
        let mut cx = Context::from_waker(&waker);
        if let Poll::Ready(r) = self.drain.as_mut().poll(&mut cx) {
            self.done = true;
            cancel_timer(py, self.timer.take());
            return stop(crate::stats::drain_dict(py, &r)?.into_any().unbind());
        }
        if target.timed_out.load(SeqCst) || self.timeout.is_zero() {
            return self.finish(py, false);
        }
        if self.timer.is_none() && self.timeout != Duration::MAX {
            let cb = Py::new(
                py,
                DrainTimer {
                    target: target.clone(),
                },
            )?;
            let h = target
                .event_loop(py)
                .call_method1("call_later", (self.timeout.as_secs_f64(), cb))?;
            self.timer = Some(h.unbind());
        }
        Ok(target.future_to_yield(py)?.unbind())
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
    fn send(&mut self, py: Python<'_>, _value: Option<&Bound<'_, PyAny>>) -> Step {
        self.step(py)
    }
    #[pyo3(signature = (typ, value=None, _tb=None))]
    fn throw(
        &mut self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> Step {
        self.done = true;
        cancel_timer(py, self.timer.take());
        Err(thrown(typ, value)?)
    }
}
