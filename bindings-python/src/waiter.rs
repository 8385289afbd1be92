//! asyncio plumbing: the `Waker` that resolves a waiter's asyncio future (queue deadlines are
//! `queue_timers`). No admission decision is made here: the core decides, this only wakes.
//!
//! A grant wakes the waiter from the thread that performed it. On the waiter's own loop thread
//! the future is resolved directly (no extra loop turn); from any other thread through
//! `loop.call_soon_threadsafe`.

use std::{
    sync::{Arc, Mutex},
    task::{Wake, Waker},
    thread::{self, ThreadId},
};

use pyo3::{intern, prelude::*, sync::PyOnceLock, types::PyCFunction};

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `asyncio.get_running_loop()`.
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            py.import("asyncio")?
                .getattr("get_running_loop")
                .map(Bound::unbind)
        })?
        .bind(py)
        .call0()
}

/// Resolves `fut` with `None` unless it is already done (cancelled, say).
fn resolve_now(fut: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = fut.py();
    if !fut.call_method0(intern!(py, "done"))?.is_truthy()? {
        fut.call_method1(intern!(py, "set_result"), (py.None(),))?;
    }
    Ok(())
}

/// A Python callable that resolves its argument (for `call_soon_threadsafe`).
fn resolver(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    RESOLVE
        .get_or_try_init(py, || {
            PyCFunction::new_closure(py, None, None, |args, _kwargs| -> PyResult<()> {
                resolve_now(&args.get_item(0)?)
            })
            .map(|f| f.into_any().unbind())
        })
        .map(|f| f.bind(py))
}

/// One pending asyncio wait: its future, its loop and the loop's thread.
pub(crate) struct WaitTarget {
    /// The future the task awaits now (replaced after a spurious wake-up). The lock is held
    /// only to swap or clone the reference, never across a Python call.
    fut: Mutex<Py<PyAny>>,
    event_loop: Py<PyAny>,
    thread: ThreadId,
}

impl WaitTarget {
    /// A new future on the running loop. Must be called on the loop's thread.
    pub(crate) fn new(py: Python<'_>) -> PyResult<Arc<Self>> {
        let event_loop = running_loop(py)?;
        let fut = event_loop.call_method0(intern!(py, "create_future"))?;
        Ok(Arc::new(Self {
            fut: Mutex::new(fut.unbind()),
            event_loop: event_loop.unbind(),
            thread: thread::current().id(),
        }))
    }

    /// Replaces the future with a fresh one (after a spurious wake-up).
    pub(crate) fn renew(&self, py: Python<'_>) -> PyResult<()> {
        let fut = self
            .event_loop
            .bind(py)
            .call_method0(intern!(py, "create_future"))?;
        *self.fut.lock().unwrap_or_else(|e| e.into_inner()) = fut.unbind();
        Ok(())
    }

    fn current<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.fut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone_ref(py)
            .into_bound(py)
    }

    /// The future, marked as awaited (what `Future.__await__` does before yielding it).
    pub(crate) fn future_to_yield<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let fut = self.current(py);
        fut.setattr(intern!(py, "_asyncio_future_blocking"), true)?;
        Ok(fut)
    }

    pub(crate) fn event_loop<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.event_loop.bind(py)
    }

    /// Wakes the waiting task: directly on its loop's thread, else thread-safely.
    pub(crate) fn wake_now(&self, py: Python<'_>) {
        let fut = self.current(py);
        let r = if thread::current().id() == self.thread {
            resolve_now(&fut)
        } else {
            resolver(py).and_then(|f| {
                self.event_loop
                    .bind(py)
                    .call_method1(intern!(py, "call_soon_threadsafe"), (f, fut))
                    .map(drop)
            })
        };
        // The loop may be closed or the future gone; the grant then stays with the ticket,
        // whose owner (the awaitable) passes it on when it is dropped.
        drop(r);
    }

    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::new(PyWake(self.clone())))
    }
}

struct PyWake(Arc<WaitTarget>);

impl Wake for PyWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        Python::attach(|py| self.0.wake_now(py));
    }
}
