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
    Admission, Bulkhead as CoreBulkhead, CallStart, Reason, Rejection, Ticket, TicketPoll,
    drain::DrainOf,
};
use pyo3::{
    exceptions::{PyRuntimeError, PyStopIteration},
    prelude::*,
};

use crate::{
    errors::{acquire_err, rejection_err},
    permit::Permit,
    policy::{
        Admitting, ArmedCall, CallRef, CallSlot, call_timeout_err, classify_exit, current_task,
    },
    waiter::{QueueTimer, WaitTarget},
};

/// Units held by `async with bh:` blocks of one `Bulkhead` object. `__aexit__` returns a
/// unit only if one is outstanding, so a stray `__aexit__` can never mint a permit (counted as
/// a double release instead). With policies, each open block also keeps its guarded call,
/// found again at the exit by the task running it (blocks of one task exit in LIFO order);
/// without, `calls` stays empty and is never locked.
pub(crate) struct BareHeld {
    bh: Arc<CoreBulkhead>,
    held: std::sync::atomic::AtomicU64,
    calls: std::sync::Mutex<Vec<BareCall>>,
}

struct BareCall {
    /// `id()` of the task that entered the block (0 outside a task).
    task: usize,
    slot: Arc<CallSlot>,
    armed: Option<ArmedCall>,
}

fn task_id(py: Python<'_>) -> usize {
    current_task(py).map_or(0, |t| t.as_ptr() as usize)
}

impl BareHeld {
    pub(crate) fn new(bh: Arc<CoreBulkhead>) -> Self {
        Self {
            bh,
            held: std::sync::atomic::AtomicU64::new(0),
            calls: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, Vec<BareCall>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enter(&self, py: Python<'_>, call: CallStart) {
        if self.bh.has_policies() {
            let slot = Arc::new(CallSlot::new(call));
            let armed = ArmedCall::arm(py, &self.bh, CallRef::Slot(slot.clone()));
            let task = task_id(py);
            self.calls().push(BareCall { task, slot, armed });
        }
        self.held.fetch_add(1, SeqCst);
    }

    /// The call of the block the current task is leaving (its latest; else the latest of any
    /// task). Only a bulkhead with policies keeps calls.
    fn take_call(&self, py: Python<'_>) -> Option<BareCall> {
        if !self.bh.has_policies() {
            return None;
        }
        let task = task_id(py);
        let mut calls = self.calls();
        let i = calls
            .iter()
            .rposition(|c| c.task == task)
            .or(calls.len().checked_sub(1))?;
        Some(calls.remove(i))
    }

    /// Returns one unit if a block holds one, ending its call as the exception says. Raises
    /// `CallTimeoutError` if the block overran `call_timeout`.
    pub(crate) fn exit(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let took = self
            .held
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !took {
            self.bh.record_double_release();
            return Ok(());
        }
        let mut fired = false;
        if let Some(e) = self.take_call(py) {
            fired = e.armed.is_some_and(|a| a.disarm(py, exc_type));
            e.slot.end(&self.bh, classify_exit(exc_type));
        }
        self.bh.release_units(1);
        if fired {
            return Err(call_timeout_err(py, &self.bh, None));
        }
        Ok(())
    }
}

impl std::fmt::Debug for BareHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareHeld")
            .field("held", &self.held)
            .finish_non_exhaustive()
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
    /// The bulkhead, with the guarded call being admitted (ended `ignored` unless granted).
    bh: Admitting<Arc<CoreBulkhead>>,
    key: Option<String>,
    weight: u64,
    /// Resolved queue timeout: `ZERO` = do not queue, `MAX` = no deadline.
    timeout: Duration,
    /// `async with bh:` — hold one unit without a `Permit` object, counted in this bulkhead
    /// object's `BareHeld` so that `Bulkhead.__aexit__` can never return more than was taken.
    bare: Option<Arc<BareHeld>>,
    state: State,
    permit: Option<Py<Permit>>,
    /// Used as `async with` (`__aenter__` ran): the block is a guarded call with a deadline.
    cm: bool,
    /// The `call_timeout` timer of the `async with` block.
    armed: Option<ArmedCall>,
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
            bh: Admitting::new(bh),
            key,
            weight,
            timeout,
            bare,
            state: State::Init,
            permit: None,
            cm: false,
            armed: None,
        }
    }

    /// Refused before the grant (rejected, no loop, …): the call ends `ignored`; raises `err`.
    fn refuse(&mut self, err: PyErr) -> Step {
        self.state = State::Done;
        self.bh.refused();
        Err(err)
    }

    /// An acquire that raises `err` when awaited (a registry key that could not be created).
    pub(crate) fn failed(bh: Arc<CoreBulkhead>, key: Option<String>, err: PyErr) -> Self {
        let mut s = Self::new(bh, key, 1, Duration::ZERO, None);
        s.state = State::Failed(Some(err));
        s
    }

    /// `queued`: the grant came after queueing (the adaptive sample restarts at the grant).
    fn granted(&mut self, py: Python<'_>, weight: u64, queued: bool) -> Step {
        self.state = State::Done;
        let call = self.bh.granted(queued);
        if let Some(bare) = &self.bare {
            bare.enter(py, call);
            return stop(py.None());
        }
        let permit = Py::new(
            py,
            Permit::new(self.bh.clone(), weight, self.key.clone(), call),
        )?;
        if self.cm {
            self.armed = ArmedCall::arm(py, &self.bh, CallRef::Permit(permit.clone_ref(py)));
        }
        self.permit = Some(permit.clone_ref(py));
        stop(permit.into_any())
    }

    fn rejected(&mut self, py: Python<'_>, r: &Rejection) -> Step {
        let err = rejection_err(py, r, self.key.as_deref());
        self.refuse(err)
    }

    fn first_step(&mut self, py: Python<'_>) -> Step {
        // The breaker's check, then admission.
        let admission = self
            .bh
            .begin(self.weight)
            .and_then(|()| self.bh.enqueue_within(self.weight, self.timeout, None));
        let ticket = match admission {
            Ok(Admission::Granted) => return self.granted(py, self.weight, false),
            Ok(Admission::Queued(t)) => t,
            Err(e) => {
                let err = acquire_err(py, &e, self.key.as_deref());
                return self.refuse(err);
            }
        };
        let target = match WaitTarget::new(py) {
            Ok(t) => t,
            Err(e) => {
                // No running loop: give the place back before raising.
                self.bh.abandon(ticket);
                return self.refuse(e);
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
                            return self.refuse(e);
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
                self.granted(py, w, true)
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
                        self.granted(py, w, true)
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
        self.bh.refused();
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

    /// `async with bh.acquire() as permit:` — the block is one guarded call (its
    /// `call_timeout`, if configured, is armed at the grant).
    fn __aenter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        slf.cm = true;
        slf
    }

    /// Releases the permit taken by `__aenter__` (skipped silently if already released),
    /// recording the outcome the block's exception gives (none → success,
    /// `asyncio.CancelledError` → ignored, other → failure). Raises `CallTimeoutError` if the
    /// block overran `call_timeout` (its cancellation is replaced, as `asyncio.timeout` does).
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        let fired = self.armed.take().is_some_and(|a| a.disarm(py, exc_type));
        if let Some(p) = self.permit.take() {
            p.get().release_inner(false, classify_exit(exc_type));
        }
        if fired {
            return Err(call_timeout_err(py, &self.bh, self.key.as_deref()));
        }
        Ready::exit_false(py)
    }
}

impl Drop for AcquireContext {
    fn drop(&mut self) {
        // A call never granted ends `ignored` when `bh` drops.
        if matches!(self.state, State::Waiting { .. }) {
            Python::attach(|py| self.abandon(py));
        }
        if let Some(a) = self.armed.take() {
            Python::attach(|py| a.cancel(py));
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
