//! `Permit`: the Python handle of one core `Call` (the permits of one acquire and its guarded
//! call, docs/design.md §5.3). Every rule is the call's: `release(outcome)` is `Call::end`, the
//! `call_timeout` report is `Call::timed_out`, a refund is `Call::release_partial`, a permit
//! finalized while held is `Call::reclaim` (counted in `leaked_total`). A released permit keeps
//! no outside handle on its bulkhead (a registry may evict it).
//!
//! Thread-safe: the call sits behind a mutex, locked without blocking the interpreter
//! (`lock_py_attached`). A release takes the call out and ends it after unlocking (ending wakes
//! waiters, which runs Python code that may touch this permit again, from this thread or
//! another). Every other step that may run Python code (a usage report, a refund, a partial
//! release, orphaning, the timeout report: their events and breaker transitions) takes the
//! call out too, marked busy: another thread waits for it to be back; a listener of that step
//! may release the permit (done as the step returns, never lost) but not run a step of its own.

use std::{
    panic,
    sync::{Arc, Condvar, Mutex, MutexGuard, Weak},
    thread::{self, ThreadId},
    time::Duration,
};

use hullguard_core::{
    Bulkhead as CoreBulkhead, Deadline, MAX_BUDGET, Outcome, OwnedPermit, Reason, Rejection,
    UsageError,
};
use pyo3::{exceptions::PyValueError, prelude::*, sync::MutexExt};

use crate::{
    awaitable::{Done, Ready},
    errors::rejection_err,
    gateway::{arm_rate_timer, py_error, usage_report},
    options::count_arg,
    policy::{classify_exit, outcome_arg},
};

/// A granted core call on an `Arc` of its bulkhead.
pub(crate) type CoreCall = OwnedPermit;

/// Permits held by one acquire (and the budget units of its `cost`), and its guarded call.
/// `release(outcome=..., usage=...)` returns them once (a second call returns `False`,
/// counted in `released_twice_total`); `with permit:` / `async with permit:` releases at the
/// exit, the outcome given by the block's exception; a permit garbage-collected while held is
/// returned and counted in `leaked_total`. A streaming call reports its usage as it goes
/// (`report_usage`, `refund`). Thread-safe: any thread may release it; an event callback
/// running inside `report_usage` / `refund` / `release_partial` / `orphan` may release it (the
/// release is done as that step returns; `weight` and `cost` read 0 meanwhile) but not run
/// another of these steps (`ValueError`).
#[pyclass(module = "hullguard._native", name = "Permit", frozen)]
pub(crate) struct Permit {
    slot: Mutex<Slot>,
    /// Notified when a step that took the call out puts it back (`Slot::busy` cleared).
    idle: Condvar,
    /// The bulkhead, for a release after the release (counted) and for the error of a timed
    /// out call.
    weak: Weak<CoreBulkhead>,
    key: Option<String>,
    /// The request's deadline (docs/design.md §5.9): caps the call timeout armed for its work.
    deadline: Deadline,
}

/// The permit's call, and the step that has it out.
struct Slot {
    /// `None` once released (and while `busy`).
    call: Option<CoreCall>,
    /// The thread of a step running on the call taken out (`with_call`): another thread
    /// waits until it is put back; on this thread (an event listener of that step) the call
    /// is out.
    busy: Option<ThreadId>,
    /// A release asked by a listener of the step that has the call out: done as the step
    /// ends, never lost.
    pending: Option<(Outcome, Option<u64>)>,
}

/// Why a step found no call.
enum Gone {
    Released,
    /// Out for a step of this thread (asked from one of that step's event listeners).
    Busy,
}

impl Gone {
    fn err(&self) -> PyErr {
        match self {
            Gone::Released => PyValueError::new_err("permit already released"),
            Gone::Busy => PyValueError::new_err(
                "permit busy: called from an event listener of its own report_usage / refund / \
                 release_partial / orphan (only release() may be called there)",
            ),
        }
    }
}

/// Ends `call` with `outcome`, settling `used` units in all if given.
fn finish(call: CoreCall, outcome: Outcome, used: Option<u64>) {
    match used {
        Some(u) => call.end_with_usage(outcome, u),
        None => call.end(outcome),
    }
}

impl Permit {
    /// The permit of `call`, granted to a request with `deadline` (`Deadline::NONE`: none).
    pub(crate) fn new(call: CoreCall, key: Option<String>, deadline: Deadline) -> Self {
        Self {
            deadline,
            weak: Arc::downgrade(call.handle()),
            slot: Mutex::new(Slot {
                call: Some(call),
                busy: None,
                pending: None,
            }),
            idle: Condvar::new(),
            key,
        }
    }

    /// After a step that returned units of a classed bulkhead: a head a rate holds back gets
    /// the host's rate timer (`gateway::arm_rate_timer`).
    fn rearm_rates(&self, py: Python<'_>, classed: bool) {
        if classed && let Some(bh) = self.weak.upgrade() {
            arm_rate_timer(py, None, &bh);
        }
    }

    /// Runs `f` on the held call, taken out of the mutex meanwhile (`f` may deliver events,
    /// whose callbacks run Python code that may use this permit again). Another thread waits
    /// for the call to be back; a callback on this thread finds it out (`Gone::Busy`), except
    /// that its `release` is kept and done as `f` returns.
    fn with_call<R>(&self, py: Python<'_>, f: impl FnOnce(&mut CoreCall) -> R) -> Result<R, Gone> {
        let mut slot = self.lock(py);
        if slot.busy.is_some() {
            return Err(Gone::Busy);
        }
        let mut call = slot.call.take().ok_or(Gone::Released)?;
        slot.busy = Some(thread::current().id());
        drop(slot);
        let classed = call.bulkhead().class_count() != 0;
        // Put back even if `f` panics (pyo3 turns the panic into an exception).
        let r = panic::catch_unwind(panic::AssertUnwindSafe(|| f(&mut call)));
        let mut slot = self.lock(py);
        slot.busy = None;
        let ending = match slot.pending.take() {
            None => {
                slot.call = Some(call);
                None
            }
            Some(p) => Some((call, p)),
        };
        drop(slot);
        self.idle.notify_all();
        if let Some((call, (outcome, used))) = ending {
            finish(call, outcome, used);
        }
        self.rearm_rates(py, classed);
        r.map_err(|p| panic::resume_unwind(p))
    }

    /// The slot, once no other thread has the call out (waiting with the interpreter
    /// released). The mutex is locked without blocking the interpreter (`lock_py_attached`).
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Slot> {
        loop {
            let slot = self
                .slot
                .lock_py_attached(py)
                .unwrap_or_else(|e| e.into_inner());
            match slot.busy {
                Some(t) if t != thread::current().id() => drop(slot),
                _ => return slot,
            }
            py.detach(|| {
                let me = thread::current().id();
                let slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
                let busy = |s: &mut Slot| s.busy.is_some_and(|t| t != me);
                drop(self.idle.wait_while(slot, busy));
            });
        }
    }

    /// Ends the call with `outcome` if still held; whether it was.
    pub(crate) fn end(&self, py: Python<'_>, outcome: Outcome) -> bool {
        self.end_with(py, outcome, None)
    }

    /// Ends the call with `outcome`, reporting `used` units in all if given
    /// (`Call::end_with_usage`: the rest refunded, the excess counted overrun). From an event
    /// listener of a step on this permit: ends it as that step returns.
    pub(crate) fn end_with(&self, py: Python<'_>, outcome: Outcome, used: Option<u64>) -> bool {
        let mut slot = self.lock(py);
        if slot.busy.is_some() {
            if slot.pending.is_some() {
                return false;
            }
            slot.pending = Some((outcome, used));
            return true;
        }
        let Some(call) = slot.call.take() else {
            return false;
        };
        drop(slot);
        let classed = call.bulkhead().class_count() != 0;
        finish(call, outcome, used);
        self.rearm_rates(py, classed);
        true
    }

    /// The `call_timeout` rule of the core (`Call::timed_out`): counts `call_timeout` and ends
    /// the call as a failure now; the permits stay held. `false` if it was reported already
    /// or the permit is released. Out of the mutex: the breaker transition it may commit
    /// calls `on_state_change`, which may read this permit.
    pub(crate) fn timed_out(&self, py: Python<'_>) -> bool {
        self.with_call(py, CoreCall::timed_out).unwrap_or(false)
    }

    /// How long the host lets the work run from now: the bulkhead's `call_timeout` capped by
    /// the time left until the request's deadline (`Bulkhead::call_timeout_within`,
    /// docs/design.md §5.9); `None`: neither bounds it, or released.
    pub(crate) fn call_timeout(&self, py: Python<'_>) -> Option<Duration> {
        let slot = self.lock(py);
        let call = slot.call.as_ref()?;
        if self.deadline == Deadline::NONE {
            return call.call_timeout();
        }
        call.bulkhead().call_timeout_within(&self.deadline)
    }

    /// The `CallTimeoutError` of this permit's call.
    pub(crate) fn call_timeout_err(&self, py: Python<'_>) -> PyErr {
        self.weak.upgrade().map_or_else(
            || PyValueError::new_err("the bulkhead of this permit is gone"),
            |bh| {
                let r = Rejection::new(Reason::CallTimeout, bh.snapshot());
                rejection_err(py, &r, self.key.as_deref())
            },
        )
    }
}

#[pymethods]
impl Permit {
    /// Returns the permits, recording how the call ended: `outcome` is `"success"` (the
    /// default), `"failure"`, `"ignored"` (cancelled; counts nothing) or `"overload"` (HTTP
    /// 429: a failure for the adaptive limit, a success for the breaker). `usage`: the budget
    /// units the call actually used in all (an `int`, `0..=MAX_BUDGET`): the unused rest of its
    /// hold is refunded, the excess counted as overrun (`stats()["budget"]`); `None` settles
    /// the whole hold as used. Idempotent: `True` the first time, `False` afterwards (counted
    /// in `released_twice_total`). Raises `TypeError` / `ValueError` for a bad `outcome` or
    /// `usage` (nothing is released). Thread-safe.
    #[pyo3(signature = (outcome=None, usage=None))]
    fn release(
        &self,
        py: Python<'_>,
        outcome: Option<&Bound<'_, PyAny>>,
        usage: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let outcome = outcome.map_or(Ok(Outcome::Success), outcome_arg)?;
        let used = usage
            .filter(|u| !u.is_none())
            .map(|u| count_arg(u, "usage", 0, MAX_BUDGET))
            .transpose()?;
        let ended = self.end_with(py, outcome, used);
        if let Some(bh) = self.weak.upgrade().filter(|_| !ended) {
            bh.record_double_release();
        }
        Ok(ended)
    }

    /// Releases silently if still held (never counted as a second release), recording
    /// `outcome`. For hullguard's integrations (`guard`, httpx).
    fn _finish(&self, py: Python<'_>, outcome: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.end(py, outcome_arg(outcome)?))
    }

    /// The guarded call overran `call_timeout` (reported by the host's timer or a measured
    /// sync call): counts `call_timeout` and ends the call as a failure now (the permits stay
    /// held until released; that release records nothing more). Returns the
    /// `CallTimeoutError` to raise; a second report counts nothing.
    fn _call_timed_out(&self, py: Python<'_>) -> Py<PyAny> {
        self.timed_out(py);
        self.call_timeout_err(py).into_value(py).into_any()
    }

    /// The seconds a guarded call of this permit may run from now (for hullguard's `guard`):
    /// `resilience.call_timeout` capped by the time left until the request's deadline; `None`
    /// when neither bounds it (or released).
    fn _call_timeout(&self, py: Python<'_>) -> Option<f64> {
        self.call_timeout(py).map(|d| d.as_secs_f64())
    }

    /// Returns `n` of the held permits now (a refund once actual usage is known); the rest stay
    /// held. `TypeError` unless `n` is an `int`; `ValueError` for `n` outside `1..=weight` or
    /// on a released permit (nothing changes).
    fn release_partial(&self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(n, "n", 1, u64::MAX)?;
        self.with_call(py, |c| c.release_partial(n))
            .map_err(|g| g.err())?
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Returns `n` budget units of the hold now (`1..=` what it holds; the part held past the
    /// budget goes first), waking whoever now fits. `TypeError` unless `n` is an `int`;
    /// `ValueError` for `n` out of range or on a released permit (nothing changes).
    fn refund(&self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<()> {
        let n = count_arg(n, "n", 1, MAX_BUDGET)?;
        let held = |c: &mut CoreCall| {
            let held = c.cost();
            c.refund(n).map_err(|_| held)
        };
        self.with_call(py, held)
            .map_err(|g| g.err())?
            .map_err(|held| {
                PyValueError::new_err(if held == 0 {
                    format!("n: the permit holds no budget units, got {n}")
                } else {
                    format!("n must be in 1..={held} (budget units held), got {n}")
                })
            })
    }

    /// A streaming call's usage so far (docs/design.md §4.5): `used` units in all (cumulative,
    /// never decreasing) and `remaining` it may still use; the hold becomes `used + remaining`
    /// — a shrink returns units at once, a growth goes through admission or is held past the
    /// budget as overrun. Returns a `UsageReport` (`change`: `"unchanged"` / `"shrank"` /
    /// `"grew"` / `"overran"`, `by`, `cancel`: the bulkhead's `cancel_on_overrun` asks the
    /// caller to stop the work). Raises `UsageError` (a `ValueError`, `.kind` `"decreased"`,
    /// `"too_large"` or `"released"`: nothing changed), `TypeError` for a non-`int`.
    #[pyo3(signature = (used, remaining=None))]
    fn report_usage(
        &self,
        py: Python<'_>,
        used: &Bound<'_, PyAny>,
        remaining: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let u = count_arg(used, "used", 0, MAX_BUDGET)?;
        let r = remaining
            .filter(|r| !r.is_none())
            .map_or(Ok(0), |r| count_arg(r, "remaining", 0, MAX_BUDGET))?;
        match self.with_call(py, |c| c.report_usage(u, r)) {
            Ok(Ok(report)) => usage_report(py, &report),
            Ok(Err(e)) => {
                let kind = match e {
                    UsageError::Decreased { .. } => "decreased",
                    UsageError::TooLarge { .. } => "too_large",
                    _ => "released",
                };
                let kind = kind.into_pyobject(py)?.into_any().unbind();
                Err(py_error(py, "UsageError", e.to_string(), &[("kind", kind)]))
            }
            Err(g @ Gone::Busy) => Err(g.err()),
            Err(Gone::Released) => {
                let kind = "released".into_pyobject(py)?.into_any().unbind();
                Err(py_error(
                    py,
                    "UsageError",
                    "permit already released".into(),
                    &[("kind", kind)],
                ))
            }
        }
    }

    /// Hands the permits back while the work goes on (docs/design.md §5.3; `max_orphaned`):
    /// `True` if they were handed back, `False` if there were none; `ValueError` when the
    /// bulkhead refuses (no `max_orphaned` room) or the permit is released.
    fn orphan(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_call(py, |c| c.orphan())
            .map_err(|g| g.err())?
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Budget units the call holds now (0 once released; without a budget 0).
    #[getter]
    fn cost(&self, py: Python<'_>) -> u64 {
        self.lock(py).call.as_ref().map_or(0, CoreCall::cost)
    }

    /// The revision of the limits in force when it was admitted (0 before any
    /// `apply_limits`; 0 once released).
    #[getter]
    fn revision(&self, py: Python<'_>) -> u64 {
        self.lock(py).call.as_ref().map_or(0, CoreCall::revision)
    }

    /// Whether a usage report asked to cancel the work (`cancel_on_overrun`; sticky).
    #[getter]
    fn cancel_requested(&self, py: Python<'_>) -> bool {
        self.lock(py)
            .call
            .as_ref()
            .is_some_and(CoreCall::cancel_requested)
    }

    /// Permits still held (0 once released).
    #[getter]
    fn weight(&self, py: Python<'_>) -> u64 {
        self.lock(py).call.as_ref().map_or(0, CoreCall::weight)
    }

    /// Whether `release()` ran (or the permit was returned by `with` / `async with`).
    #[getter]
    fn released(&self, py: Python<'_>) -> bool {
        let slot = self.lock(py);
        slot.pending.is_some() || (slot.call.is_none() && slot.busy.is_none())
    }

    /// The registry key of its bulkhead, or `None`.
    #[getter]
    fn key(&self) -> Option<String> {
        self.key.clone()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// `async with permit:` (a permit from `await bh.acquire()` or an `Admission`): enters at
    /// once with the permit; the exit releases it as `__exit__` does.
    fn __aenter__(slf: &Bound<'_, Self>) -> Done {
        Done::new(slf.clone().into_any().unbind())
    }

    /// Releases (silently if already released), classifying the block's exception as
    /// `__exit__` does. Never swallows it.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        self.end(py, classify_exit(exc_type));
        Ready::shared(py)
    }

    /// Releases (silently if already released), classifying the block's exception: none →
    /// success, `asyncio.CancelledError` → ignored, any other → failure. Never swallows it.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) {
        self.end(py, classify_exit(exc_type));
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let key = self.key.as_ref().map(|k| format!(" key={k:?}"));
        format!(
            "<Permit weight={} released={}{}>",
            self.weight(py),
            self.released(py),
            key.unwrap_or_default()
        )
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // Finalized while held: counted in `leaked_total`, ended `ignored`, released.
        let slot = self.slot.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(call) = slot.call.take() {
            call.reclaim();
        }
    }
}
