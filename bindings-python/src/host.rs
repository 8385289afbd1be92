//! `HostBulkhead` / `HostPermit`: one limit shared by every process on a Linux host
//! (docs/design.md §14), the Python face of `hullguard_host`. Marshalling only: the options go
//! through the crate's table (`HostOptions::set`), admission and its reasons are the crate's,
//! rejections become the local bulkhead's exceptions (`errors::acquire_err`) and the stats
//! dict is built by the local bulkhead's schema walk (`stats::stats_dict`) plus the host keys.
//!
//! Asynchronous admission drives the crate's `HostAcquire` future. Its wake-ups come from the
//! crate's keeper thread (the doorbell, the queue timeout), which also beats the process's
//! lease and must never wait for the interpreter: the waker only hands the wait's target to
//! this module's wake thread (`bridge`), which resolves the asyncio future with
//! `call_soon_threadsafe` (`waiter::WaitTarget`). Cancelling the task drops the future, which
//! gives its place up; a permit exists only once a poll returned it, so none is lost to a
//! cancel.

use std::{
    cell::UnsafeCell,
    future::Future,
    mem,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    task::{Context, Poll, Wake, Waker},
    thread::{self, Thread},
    time::{Duration, Instant},
};

use hullguard_core::{DrainResult, MAX_PERMITS, Request};
use hullguard_host::{
    HostAcquire, HostBulkhead as CoreHost, HostError, HostOptions, HostPermit as CorePermit,
    HostValue, LeaseError,
    options::{HostKind, HostOption},
};
use pyo3::{
    exceptions::{PyRuntimeError, PyStopIteration, PyTypeError, PyValueError},
    prelude::*,
    types::{PyBool, PyCFunction, PyDict, PyFloat, PyInt, PyString},
};

use crate::{
    awaitable::{Done, Ready},
    bulkhead::seconds,
    errors::acquire_err,
    gateway::{self, Extra, py_error},
    options::{timeout_arg, type_name},
    stats::{drain_dict, stats_dict},
    waiter::WaitTarget,
};

/// How long `acquire_sync` / `drain_sync` park before checking for signals (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// Registers the host classes and functions on `_native` (Linux only).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HostBulkhead>()?;
    m.add_class::<HostPermit>()?;
    m.add_class::<HostAcquireContext>()?;
    m.add_function(wrap_pyfunction!(host_reap, m)?)?;
    m.add_function(wrap_pyfunction!(host_cli, m)?)?;
    // The wake thread stops attaching once the interpreter starts to exit (atexit runs before
    // finalization: a thread attaching during finalization would be ended mid-call). Setting the
    // flag is not enough: a wake-up already in Python (`call_soon_threadsafe` releases the
    // interpreter to write the loop's self-pipe) would take it back during finalization and be
    // ended by `pthread_exit`, whose forced unwind through Rust frames aborts the process. So
    // the hook also waits, interpreter released, until the wake thread is out of Python.
    let stop = PyCFunction::new_closure(m.py(), None, None, |args, _kwargs| {
        EXITING.store(true, Ordering::Release);
        args.py().detach(|| {
            // Wait (bounded) for the wake-ups in Python to leave it.
            let until = Instant::now() + Duration::from_secs(5);
            while in_python() > 0 && Instant::now() < until {
                thread::sleep(Duration::from_millis(1));
            }
        });
    })?;
    m.py().import("atexit")?.call_method1("register", (stop,))?;
    Ok(())
}

// ----- errors ----------------------------------------------------------------------------------

/// A `HostError` as Python raises it: a rejection as the local bulkhead's exception, a bad
/// option as `ValueError`, anything about the segment file as `HostSegmentError` (an
/// `OSError`; `.kind`, `.path`, `.errno` for a failed system call), message from the crate.
fn host_err(py: Python<'_>, e: HostError) -> PyErr {
    match &e {
        HostError::Acquire(a) => return acquire_err(py, a, None),
        HostError::Option { .. } => return PyValueError::new_err(e.to_string()),
        _ => {}
    }
    let (kind, path, errno) = (e.kind().unwrap_or("other"), e.path(), e.errno());
    let build = || -> PyResult<PyErr> {
        let path = path.map(|p| p.to_string_lossy().into_owned());
        let kw = [
            ("kind", kind.into_pyobject(py)?.into_any().unbind()),
            ("path", path.into_pyobject(py)?.into_any().unbind()),
            ("errno", errno.into_pyobject(py)?.into_any().unbind()),
        ];
        Ok(py_error(py, "HostSegmentError", e.to_string(), &kw))
    };
    build().unwrap_or_else(|e| e)
}

/// A refused release: `StaleLeaseError` / `ForeignLeaseError` (`.code` the crate's).
fn lease_err(py: Python<'_>, e: LeaseError) -> PyErr {
    let class = match e {
        LeaseError::Stale => "StaleLeaseError",
        LeaseError::Foreign => "ForeignLeaseError",
        LeaseError::AlreadyReleased => return PyValueError::new_err(e.to_string()),
    };
    let code = pyo3::types::PyString::new(py, e.code()).into_any().unbind();
    py_error(py, class, e.to_string(), &[("code", code)])
}

// ----- options ---------------------------------------------------------------------------------

/// The `HostBulkhead(...)` keyword arguments as `HostOptions`, each through the crate's table
/// (`HostOptions::set`: it range-checks and refuses unknown names and a local bulkhead's options
/// by name). `None` is "not given" (the default). Python spells every name snake_case and
/// every duration in float seconds.
fn host_options(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<HostOptions> {
    let mut o = HostOptions {
        library: "py",
        ..HostOptions::default()
    };
    let Some(kwargs) = kwargs else {
        return Ok(o);
    };
    for (k, v) in kwargs.iter() {
        let key: String = k
            .extract()
            .map_err(|_| PyTypeError::new_err("HostBulkhead(): option names must be str"))?;
        let Some(opt) = HostOptions::find(&key) else {
            // The crate's message: unknown (listing the known ones), or a local bulkhead's
            // option a host bulkhead does not support.
            let e = o.set(&key, HostValue::Int(0)).err();
            let msg = e.map_or_else(|| format!("unknown option `{key}`"), |e| e.to_string());
            return Err(PyTypeError::new_err(format!("HostBulkhead(): {msg}")));
        };
        if opt.name != key {
            return Err(PyTypeError::new_err(format!(
                "HostBulkhead(): option `{key}` is spelled `{}` in Python (durations in seconds)",
                opt.name
            )));
        }
        if v.is_none() {
            continue;
        }
        let text = option_text(opt, &v)?;
        let value = option_value(opt, &v, &text)?;
        o.set(opt.name, value)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
    }
    o.validate()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(o)
}

/// The text of a string-kind option's value (`dir` may be any `os.PathLike`).
fn option_text(opt: &HostOption, v: &Bound<'_, PyAny>) -> PyResult<String> {
    match opt.kind {
        HostKind::Path => {
            let fspath = v.py().import("os")?.getattr("fspath")?.call1((v,));
            let s = fspath.and_then(|p| p.extract::<String>());
            s.map_err(|_| wrong_type(opt, "a str or os.PathLike", v))
        }
        HostKind::Choice(_) => v
            .cast::<PyString>()
            .map_err(|_| wrong_type(opt, "a str", v))
            .map(|s| s.to_string()),
        _ => Ok(String::new()),
    }
}

fn wrong_type(opt: &HostOption, what: &str, v: &Bound<'_, PyAny>) -> PyErr {
    let (name, t) = (opt.name, type_name(v));
    PyTypeError::new_err(format!("HostBulkhead(): `{name}` must be {what}, not {t}"))
}

fn below_zero(opt: &HostOption, v: &Bound<'_, PyAny>) -> PyErr {
    let got = v.repr().map_or_else(|_| "?".into(), |r| r.to_string());
    let name = opt.name;
    PyValueError::new_err(format!(
        "host bulkhead option `{name}`: {got}: expected a value >= 0 (the range is the crate's: see HOST_OPTIONS)"
    ))
}

/// `v` as the crate's value for `opt`'s kind (the range is the crate's to check).
fn option_value<'a>(
    opt: &HostOption,
    v: &Bound<'_, PyAny>,
    text: &'a str,
) -> PyResult<HostValue<'a>> {
    let is_int = v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>();
    match opt.kind {
        HostKind::Int { .. } => {
            if !is_int {
                return Err(wrong_type(opt, "an int", v));
            }
            if v.lt(0)? {
                return Err(below_zero(opt, v));
            }
            // Beyond u64 it is out of range either way: the crate says so, with the range.
            Ok(HostValue::Int(v.extract().unwrap_or(u64::MAX)))
        }
        HostKind::Duration { .. } => {
            if !is_int && !v.is_instance_of::<PyFloat>() {
                return Err(wrong_type(opt, "a number of seconds", v));
            }
            let secs: f64 = v.extract().unwrap_or(f64::INFINITY);
            if secs.is_nan() || secs < 0.0 {
                return Err(below_zero(opt, v));
            }
            Ok(HostValue::Duration(
                Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX),
            ))
        }
        HostKind::Path | HostKind::Choice(_) => Ok(HostValue::Str(text)),
    }
}

// ----- the wake thread -------------------------------------------------------------------------

/// The sender to this process's wake thread, which resolves the asyncio futures of woken host
/// acquires; guarded by [`BRIDGE_LOCK`].
struct BridgeSlot(UnsafeCell<Option<mpsc::Sender<Arc<WaitTarget>>>>);

// SAFETY: the slot is only touched while `BRIDGE_LOCK` is held by the touching thread.
unsafe impl Sync for BridgeSlot {}

static BRIDGE: BridgeSlot = BridgeSlot(UnsafeCell::new(None));

/// The lock of [`BRIDGE`]: `pid << 32 | 1` while a thread of `pid` holds it, `pid << 32` when a
/// thread of `pid` last released it. Not a `Mutex`: one held by a thread of the parent at
/// `fork()` (the keeper handing over a wake-up) would stay held in the child for ever, and the
/// child's wake-ups would block behind it — a queued acquire in a forked child never woken
/// (`test_fork_child_gets_its_own_slot_and_parent_permits_are_foreign` timed out once in
/// `make test` under a CPU hog, issue 21). A word of another pid is free, and what it guarded
/// is the parent's: forgotten, never read.
static BRIDGE_LOCK: AtomicU64 = AtomicU64::new(0);

/// Holds [`BRIDGE_LOCK`]; released on drop.
struct BridgeGuard {
    pid: u64,
}

impl BridgeGuard {
    fn lock() -> BridgeGuard {
        let pid = u64::from(std::process::id());
        loop {
            let cur = BRIDGE_LOCK.load(Ordering::Acquire);
            let foreign = cur >> 32 != pid;
            if (foreign || cur & 1 == 0)
                && BRIDGE_LOCK
                    .compare_exchange(cur, pid << 32 | 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                if foreign {
                    // SAFETY: held now; the slot's contents are a parent's (its thread does not
                    // exist here, and a write of it may have been cut by the fork): overwritten
                    // without being read or dropped.
                    unsafe { std::ptr::write(BRIDGE.0.get(), None) };
                }
                return BridgeGuard { pid };
            }
            // Held by another thread of this process for a channel send or a thread spawn.
            thread::yield_now();
        }
    }

    fn slot(&mut self) -> &mut Option<mpsc::Sender<Arc<WaitTarget>>> {
        // SAFETY: the lock is held by this thread (exclusive access) for the guard's life.
        unsafe { &mut *BRIDGE.0.get() }
    }
}

impl Drop for BridgeGuard {
    fn drop(&mut self) {
        BRIDGE_LOCK.store(self.pid << 32, Ordering::Release);
    }
}

/// Set by an `atexit` hook: the interpreter is exiting, wake-ups are dropped.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Wake-ups running in Python now, with the pid they count in (`pid << 32 | count`): the
/// `atexit` hook waits until none is, so no wake-up is in Python when finalization starts. Not
/// a mutex: one held by the parent's wake thread at `fork()` would stay held in the child
/// forever (a count of another pid reads as 0).
static IN_PYTHON: AtomicU64 = AtomicU64::new(0);

/// This process's wake-ups in Python now.
fn in_python() -> u64 {
    let cur = IN_PYTHON.load(Ordering::Acquire);
    if cur >> 32 == u64::from(std::process::id()) {
        cur & 0xffff_ffff
    } else {
        0
    }
}

/// Runs `f` attached to the interpreter unless it is exiting (`None` then, or when it is
/// finalizing already).
fn attach_unless_exiting(f: impl for<'py> FnOnce(Python<'py>)) -> Option<()> {
    let pid = u64::from(std::process::id());
    let mut cur = IN_PYTHON.load(Ordering::Acquire);
    loop {
        let count = if cur >> 32 == pid {
            cur & 0xffff_ffff
        } else {
            0
        };
        match IN_PYTHON.compare_exchange(
            cur,
            pid << 32 | (count + 1),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => break,
            Err(now) => cur = now,
        }
    }
    let out = if EXITING.load(Ordering::Acquire) {
        None
    } else {
        Python::try_attach(f)
    };
    IN_PYTHON.fetch_sub(1, Ordering::AcqRel);
    out
}

/// Hands `target` to the wake thread (started on first use, and again in a forked child).
fn bridge_wake(target: Arc<WaitTarget>) {
    if EXITING.load(Ordering::Acquire) {
        return;
    }
    let mut bridge = BridgeGuard::lock();
    let target = match bridge.slot().as_ref() {
        Some(tx) => match tx.send(target) {
            Ok(()) => return,
            Err(mpsc::SendError(t)) => t, // the thread is gone: start another
        },
        None => target,
    };
    let (tx, rx) = mpsc::channel::<Arc<WaitTarget>>();
    let spawned = thread::Builder::new()
        .name("hullguard-wake".into())
        .spawn(move || bridge_run(&rx));
    if spawned.is_err() || tx.send(target.clone()).is_err() {
        // No thread: wake from here (the keeper waits for the interpreter this once).
        drop(bridge);
        attach_unless_exiting(|py| target.wake_now(py));
        return;
    }
    // The old sender, if any, is one whose thread is gone.
    *bridge.slot() = Some(tx);
}

fn bridge_run(rx: &mpsc::Receiver<Arc<WaitTarget>>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let woke = attach_unless_exiting(move |py| {
            for t in &batch {
                t.wake_now(py);
            }
            drop(batch);
        });
        if woke.is_none() {
            return; // the interpreter is exiting
        }
    }
}

/// The waker of a host acquire awaited on an event loop.
struct BridgeWake(Arc<WaitTarget>);

impl Wake for BridgeWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        bridge_wake(self.0.clone());
    }
}

/// The waker of a host acquire waited for on a thread (`acquire_sync`).
struct ThreadWake(Thread);

impl Wake for ThreadWake {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

fn poll_once(fut: &mut HostAcquire, waker: &Waker) -> Poll<Result<CorePermit, HostError>> {
    Pin::new(fut).poll(&mut Context::from_waker(waker))
}

/// Waits for `fut` on this thread with the interpreter released, checking for signals every
/// 100 ms (a signal handler's exception drops the future: the place is given up).
fn block_on(py: Python<'_>, mut fut: HostAcquire) -> PyResult<Result<CorePermit, HostError>> {
    let waker = Waker::from(Arc::new(ThreadWake(thread::current())));
    if let Poll::Ready(r) = poll_once(&mut fut, &waker) {
        return Ok(r);
    }
    let waker = &waker;
    loop {
        let (f, r) = py.detach(move || {
            let until = Instant::now() + SIGNAL_SLICE;
            loop {
                if let Poll::Ready(r) = poll_once(&mut fut, waker) {
                    return (fut, Some(r));
                }
                let now = Instant::now();
                if now >= until {
                    return (fut, None);
                }
                thread::park_timeout(until - now);
            }
        });
        fut = f;
        match r {
            Some(r) => return Ok(r),
            None => py.check_signals()?,
        }
    }
}

// ----- HostPermit ------------------------------------------------------------------------------

/// Permits held on a `HostBulkhead` (and the budget units of its `cost`).
///
/// `release()` returns them: `True` the first time, `False` afterwards. It raises
/// `StaleLeaseError` when this process's lease expired first (it was stopped or hung past
/// `lease_ttl`: the permits were already returned to the host, nothing is counted twice) and
/// `ForeignLeaseError` in a forked child for a permit its parent acquired (nothing is
/// released; the parent still holds it). `with permit:` / `async with permit:` release at the
/// exit (a refused release raises there unless the block raised). A permit garbage-collected
/// while held is released. Thread-safe.
#[pyclass(module = "hullguard._native", name = "HostPermit", frozen)]
pub(crate) struct HostPermit {
    permit: Mutex<CorePermit>,
}

impl HostPermit {
    fn new(permit: CorePermit) -> Self {
        Self {
            permit: Mutex::new(permit),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CorePermit> {
        // Held for a few atomic steps, never across Python code.
        self.permit.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases; `Ok(false)` if it was released already.
    fn release_now(&self, py: Python<'_>) -> PyResult<bool> {
        match self.lock().release_in_place() {
            Ok(()) => Ok(true),
            Err(LeaseError::AlreadyReleased) => Ok(false),
            Err(e) => Err(lease_err(py, e)),
        }
    }

    /// The exit of a `with` block: a refused release raises unless the block raised.
    fn exit(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        match self.release_now(py) {
            Err(e) if exc_type.is_none_or(|t| t.is_none()) => Err(e),
            _ => Ok(()),
        }
    }
}

#[pymethods]
impl HostPermit {
    /// Returns the permits to the host: `True` the first time, `False` afterwards. Raises
    /// `StaleLeaseError` (the lease expired first; nothing released twice) or
    /// `ForeignLeaseError` (acquired by the parent before `fork`; nothing released).
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        self.release_now(py)
    }

    /// Permits still held (0 once released).
    #[getter]
    fn weight(&self) -> u64 {
        let p = self.lock();
        if p.is_released() { 0 } else { p.weight() }
    }

    /// Budget units still held (0 once released; without a budget 0).
    #[getter]
    fn cost(&self) -> u64 {
        let p = self.lock();
        if p.is_released() { 0 } else { p.cost() }
    }

    /// Whether `release()` ran (or the permit was returned by `with` / `async with`).
    #[getter]
    fn released(&self) -> bool {
        self.lock().is_released()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Releases (silently if already released). Never swallows the block's exception.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.exit(py, exc_type)
    }

    /// `async with permit:` enters at once with the permit; the exit releases it.
    fn __aenter__(slf: &Bound<'_, Self>) -> Done {
        Done::new(slf.clone().into_any().unbind())
    }

    /// Releases (silently if already released). Never swallows the block's exception.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        self.exit(py, exc_type)?;
        Ready::shared(py)
    }

    fn __repr__(&self) -> String {
        let p = self.lock();
        format!(
            "<HostPermit weight={} cost={} released={}>",
            p.weight(),
            p.cost(),
            p.is_released()
        )
    }
}

// ----- HostAcquireContext ----------------------------------------------------------------------

enum State {
    Start(Arc<CoreHost>, Request),
    Queued {
        fut: HostAcquire,
        target: Arc<WaitTarget>,
        waker: Waker,
    },
    Done,
}

/// `host_bh.acquire(...)`: await it for a `HostPermit`, or use it as `async with` (released at
/// the exit). Awaiting raises the local bulkhead's rejections (`BulkheadFullError`,
/// `BulkheadQueueTimeoutError`, `BulkheadClosedError`); a second await raises `RuntimeError`.
/// A queued acquire waits on the running loop of its first await; cancelling the task gives its
/// place up.
#[pyclass(module = "hullguard._native", name = "HostAcquireContext")]
pub(crate) struct HostAcquireContext {
    state: State,
    /// The permit of `async with` (released by `__aexit__`).
    permit: Option<Py<HostPermit>>,
    cm: bool,
}

/// One step: `Some` to yield to the task, or finished (`StopIteration(permit)`) or an error.
type Step = PyResult<Option<Py<PyAny>>>;

impl HostAcquireContext {
    fn settled(&mut self, py: Python<'_>, r: Result<CorePermit, HostError>) -> Step {
        let permit = Py::new(py, HostPermit::new(r.map_err(|e| host_err(py, e))?))?;
        if self.cm {
            self.permit = Some(permit.clone_ref(py));
        }
        Err(PyStopIteration::new_err((permit,)))
    }

    fn wait(
        &mut self,
        py: Python<'_>,
        mut fut: HostAcquire,
        target: Arc<WaitTarget>,
        waker: Waker,
    ) -> Step {
        if let Poll::Ready(r) = poll_once(&mut fut, &waker) {
            return self.settled(py, r);
        }
        let yielded = target.future_to_yield(py)?.unbind();
        self.state = State::Queued { fut, target, waker };
        Ok(Some(yielded))
    }

    fn step(&mut self, py: Python<'_>) -> Step {
        match mem::replace(&mut self.state, State::Done) {
            State::Start(bh, request) => {
                let mut fut = bh.acquire(request);
                if fut.is_settled() {
                    if let Poll::Ready(r) = poll_once(&mut fut, Waker::noop()) {
                        return self.settled(py, r);
                    }
                }
                // No running loop: the future is dropped (its place given up) before raising.
                let target = WaitTarget::new(py)?;
                let waker = Waker::from(Arc::new(BridgeWake(target.clone())));
                self.wait(py, fut, target, waker)
            }
            State::Queued { fut, target, waker } => {
                // Woken: a fresh future first, so a wake-up after this poll resolves it.
                target.renew(py)?;
                self.wait(py, fut, target, waker)
            }
            State::Done => Err(PyRuntimeError::new_err(
                "this acquire has already been awaited",
            )),
        }
    }
}

fn sent(step: Step) -> PyResult<Py<PyAny>> {
    match step {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(PyStopIteration::new_err(())),
        Err(e) => Err(e),
    }
}

#[pymethods]
impl HostAcquireContext {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

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
    /// up (the future is dropped) and re-raise it unchanged.
    #[pyo3(signature = (typ, value=None, _tb=None))]
    fn throw(
        &mut self,
        typ: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.state = State::Done;
        let exc = match value.filter(|v| !v.is_none()) {
            Some(v) => v.clone(),
            None if typ.is_instance_of::<pyo3::exceptions::PyBaseException>() => typ.clone(),
            None => typ.call0()?,
        };
        Err(PyErr::from_value(exc))
    }

    fn close(&mut self) {
        self.state = State::Done;
    }

    /// `async with host_bh.acquire() as permit:` — the permit is released at the exit.
    fn __aenter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        slf.cm = true;
        slf
    }

    /// Releases the permit taken by `__aenter__` (silently if already released; a refused
    /// release raises unless the block raised). Never swallows the block's exception.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Ready>> {
        if let Some(p) = self.permit.take() {
            p.get().exit(py, exc_type)?;
        }
        Ready::shared(py)
    }
}

// ----- HostBulkhead ----------------------------------------------------------------------------

/// A bulkhead whose limit holds across every process on this host that opens the same `name`
/// (docs/design.md §14; Linux). Admission is the local `Bulkhead`'s — FIFO across processes,
/// weights, an optional budget (`cost`), queue timeout and deadline, close and drain, the same
/// reasons, exceptions and stats keys — over a lease ledger in a shared file
/// (`dir/hullguard.<uid>.<name>`, created atomically, never removed automatically: `hullguard
/// host rm`). A process killed while holding permits gives them back within about one `probe`
/// period; one stopped or hung past `lease_ttl` is expired (its late releases raise
/// `StaleLeaseError`). After `os.fork()` the child attaches with a slot of its own on first use;
/// a permit of the parent released in the child raises `ForeignLeaseError`.
///
/// `HostBulkhead(name, *, max_concurrent=10, max_queue=100, queue_timeout=30.0, budget=None,
/// lease_ttl=10.0, beat=1.0, probe=0.25, slots=256, dir="/dev/shm", mode=0o600,
/// on_mismatch="error")` — durations in float seconds. `max_concurrent`, `budget`,
/// `lease_ttl`, `beat` and `probe` are the host's (written by the creator; another value
/// raises `HostSegmentError` unless `on_mismatch="adopt"`); `max_queue` and `queue_timeout`
/// are this process's. An unknown option, or a local bulkhead's option a host bulkhead does
/// not support (`classes`, `resilience`, …), raises `TypeError` naming it; a bad value
/// `TypeError` / `ValueError` naming the option and its range. Thread-safe; usable from
/// several event loops and threads at once.
#[pyclass(module = "hullguard._native", name = "HostBulkhead", frozen)]
pub(crate) struct HostBulkhead {
    bh: Arc<CoreHost>,
}

impl HostBulkhead {
    fn request(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let extra = Extra {
            cost,
            class: None,
            observe: None,
            deadline,
        };
        // The weight's upper bound is the segment's `max_concurrent`: the crate checks it.
        gateway::request(py, MAX_PERMITS, &[], weight, timeout, extra)
    }

    fn acquire_sync_impl(&self, py: Python<'_>, request: Request) -> PyResult<HostPermit> {
        let fut = self.bh.acquire(request);
        let permit = block_on(py, fut)?.map_err(|e| host_err(py, e))?;
        Ok(HostPermit::new(permit))
    }

    fn drain_now<'py>(&self, py: Python<'py>, drained: bool) -> PyResult<Bound<'py, PyDict>> {
        let s = py.detach(|| self.bh.stats());
        let r = DrainResult {
            drained,
            active: s.local_active,
            queued: s.local_queued,
            orphaned: 0,
        };
        drain_dict(py, &r)
    }
}

#[pymethods]
impl HostBulkhead {
    #[new]
    #[pyo3(signature = (name, **kwargs))]
    fn new(name: &Bound<'_, PyAny>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let py = name.py();
        let name: String = name.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "HostBulkhead(): name must be a str, not {}",
                type_name(name)
            ))
        })?;
        let options = host_options(kwargs)?;
        let bh = py
            .detach(|| CoreHost::open(&name, options))
            .map_err(|e| host_err(py, e))?;
        Ok(Self { bh: Arc::new(bh) })
    }

    /// Permits now, or `None` (`concurrency_limit`, also while a waiter of any process is
    /// queued: no barging); other reasons raise (`BulkheadFullError` for `budget_limit`,
    /// `BulkheadClosedError`, `BulkheadQueueTimeoutError` for a `deadline` that has passed).
    #[pyo3(signature = (weight=None, *, cost=None, deadline=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<HostPermit>> {
        let request = self.request(py, weight, None, cost, deadline)?;
        // A zero queue timeout: decided at once, never waits.
        match self.bh.admit_blocking(&request.no_wait()) {
            Ok(p) => Ok(Some(HostPermit::new(p))),
            Err(e) if e.reason() == Some(hullguard_core::Reason::ConcurrencyLimit) => Ok(None),
            Err(e) => Err(host_err(py, e)),
        }
    }

    /// Waits for `weight` permits (and `cost` budget units) host-wide, at most `timeout`
    /// seconds queued (`None`: `queue_timeout`; `math.inf`: no deadline; 0: do not queue), by
    /// `deadline` (absolute seconds on the `time.monotonic()` scale, min'd with the ambient
    /// `hullguard.deadline`): `await bh.acquire()` gives a `HostPermit`; `async with
    /// bh.acquire() as permit:` releases it at the exit. Rejections raise when awaited, as the
    /// local bulkhead's (`BulkheadQueueTimeoutError` after `timeout`); bad arguments raise here.
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, deadline=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<HostAcquireContext> {
        let request = self.request(py, weight, timeout, cost, deadline)?;
        Ok(HostAcquireContext {
            state: State::Start(self.bh.clone(), request),
            permit: None,
            cm: false,
        })
    }

    /// Blocks this thread (interpreter released) until admitted, at most `timeout` seconds
    /// queued (as `acquire`). Raises the rejection, or a signal handler's exception (Ctrl-C:
    /// `KeyboardInterrupt` within 100 ms; the place is given up).
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, deadline=None))]
    fn acquire_sync(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<HostPermit> {
        let request = self.request(py, weight, timeout, cost, deadline)?;
        self.acquire_sync_impl(py, request)
    }

    /// `acquire_sync` (the Rust crate's name).
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, deadline=None))]
    fn acquire_blocking(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<HostPermit> {
        self.acquire_sync(py, weight, timeout, cost, deadline)
    }

    /// The host's figures read from this process: the local bulkhead's stats keys (`active`,
    /// `queued`, `limit`, `available`, `admitted_total`, `rejected_by_reason`, the queue-wait
    /// figures, `orphaned_total`, `budget`… — host-wide) plus `in_flight`, `attached`, `slots`,
    /// `reclaimed_dead_total`, `reclaimed_expired_total`, `reclaimed_permits_total`,
    /// `stale_releases_total`, `foreign_releases_total`, `local_in_flight`, `local_active`,
    /// `local_queued` (this process's), `slot` and `path`. Dead processes are reaped first, so
    /// only live holders count.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py.detach(|| self.bh.stats());
        let d = stats_dict(py, &s.stats)?;
        d.set_item("in_flight", s.in_flight)?;
        d.set_item("attached", s.attached)?;
        d.set_item("slots", s.slots)?;
        d.set_item("reclaimed_dead_total", s.reclaimed_dead_total)?;
        d.set_item("reclaimed_expired_total", s.reclaimed_expired_total)?;
        d.set_item("reclaimed_permits_total", s.reclaimed_permits_total)?;
        d.set_item("stale_releases_total", s.stale_releases_total)?;
        d.set_item("foreign_releases_total", s.foreign_releases_total)?;
        d.set_item("local_in_flight", s.local_in_flight)?;
        d.set_item("local_active", s.local_active)?;
        d.set_item("local_queued", s.local_queued)?;
        d.set_item("slot", s.slot)?;
        d.set_item("path", s.path.to_string_lossy())?;
        Ok(d)
    }

    /// The host's samples of the core's metric table (docs/design.md §8.3), for the
    /// exporters (`Bulkhead._metric_samples()`'s shape): the host's figures, the same from any
    /// process, counting live holders only (dead ones are reaped first: C37).
    fn _metric_samples<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyList>> {
        let s = py.detach(|| self.bh.stats());
        crate::metrics::stats_samples(py, &s.stats, &[], &|c| c.to_string())
    }

    /// Probes every other process's liveness now and reclaims the dead (their permits return
    /// at once); the slots reclaimed or expired.
    fn reap(&self, py: Python<'_>) -> usize {
        py.detach(|| self.bh.reap())
    }

    /// Closes this handle: its new requests and its waiters are refused `shutdown`
    /// (`BulkheadClosedError`); held permits stay valid until released. Other handles (other
    /// threads' and loops' too) and other processes are not affected.
    fn close(&self) {
        self.bh.close();
    }

    /// Waits (without closing) until this process holds no permit and has no waiter, or
    /// `timeout` seconds pass (`None` / `math.inf`: no deadline; 0: report at once):
    /// `{"drained", "active", "queued"}` (this process's).
    #[pyo3(signature = (timeout=None))]
    fn drain<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let t = timeout_arg(timeout)?.map(seconds);
        let drain = py.import("hullguard.host")?.getattr("_drain")?;
        drain.call1((slf, t))
    }

    /// `drain` on this thread (interpreter released; Ctrl-C raises promptly).
    #[pyo3(signature = (timeout=None))]
    fn drain_sync<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let deadline = timeout_arg(timeout)?.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let slice = left.map_or(SIGNAL_SLICE, |l| l.min(SIGNAL_SLICE));
            let drained = py.detach(|| self.bh.drain_blocking(slice));
            if drained || left.is_some_and(|l| l <= slice) {
                return self.drain_now(py, drained);
            }
            py.check_signals()?;
        }
    }

    /// `drain_sync` (the Rust crate's name).
    #[pyo3(signature = (timeout=None))]
    fn drain_blocking<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.drain_sync(py, timeout)
    }

    /// Whether `close()` was called in this process.
    #[getter]
    fn closed(&self) -> bool {
        self.bh.is_closed()
    }

    #[getter]
    fn name(&self) -> String {
        self.bh.name().to_owned()
    }

    /// The segment file.
    #[getter]
    fn path(&self) -> String {
        self.bh.path().to_string_lossy().into_owned()
    }

    /// This process's slot in the segment.
    #[getter]
    fn slot(&self) -> usize {
        self.bh.slot()
    }

    /// This process's queue places.
    #[getter]
    fn max_queue(&self) -> u64 {
        self.bh.options().max_queue
    }

    /// This process's default queue timeout, seconds.
    #[getter]
    fn queue_timeout(&self) -> f64 {
        seconds(self.bh.options().queue_timeout)
    }

    fn __repr__(&self) -> String {
        format!(
            "<HostBulkhead name={:?} path={:?} slot={}>",
            self.bh.name(),
            self.bh.path().display().to_string(),
            self.bh.slot()
        )
    }
}

// ----- module functions ------------------------------------------------------------------------

/// Reclaims every dead process's slot of segment `name` in `dir` without attaching (a gunicorn
/// master's `child_exit` hook); the slots reclaimed. `HostSegmentError` if there is no such
/// segment (or it cannot be read).
#[pyfunction(name = "_host_reap")]
#[pyo3(signature = (name, dir))]
fn host_reap(py: Python<'_>, name: String, dir: String) -> PyResult<usize> {
    py.detach(|| hullguard_host::inspect::reap(std::path::Path::new(&dir), &name))
        .map_err(|e| host_err(py, e))
}

/// Runs `hullguard host ...` (`args` without the program name): `(status, stdout, stderr)`.
#[pyfunction(name = "_host_cli")]
#[pyo3(signature = (args))]
fn host_cli(py: Python<'_>, args: Vec<String>) -> (i32, String, String) {
    let out = py.detach(|| hullguard_host::cli::run(&args));
    (out.status, out.stdout, out.stderr)
}
