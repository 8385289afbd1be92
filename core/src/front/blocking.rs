//! Blocking waits for threads (feature `std`): park/unpark through the same `Waker` path the
//! async futures use, on a [`Waiter`]. [`Waiter::wait_blocking_interruptible`] parks in slices
//! and asks the caller between them whether to give up — the Python binding checks for Ctrl-C
//! there — so every binding's blocking acquire is this one wait.

use core::{
    ops::Deref,
    task::{Context, Poll, Waker},
    time::Duration,
};
use std::{
    sync::Arc,
    task::Wake,
    thread::{self, Thread},
    time::Instant,
};

use crate::{
    front::{
        admit::Decision,
        bulkhead::Bulkhead,
        call::{Call, OwnedPermit, Permit},
        request::Request,
        waiter::{Cancelled, Waiter},
    },
    reason::{AcquireError, Reason},
};

/// Unparks the thread that created it.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker that unparks the current thread.
pub(crate) fn thread_waker() -> Waker {
    Waker::from(Arc::new(ThreadWaker(thread::current())))
}

/// Runs a future to completion on this thread, parking between polls. For examples and tests.
#[doc(hidden)]
pub fn block_on<F: core::future::Future>(fut: F) -> F::Output {
    let waker = thread_waker();
    let mut cx = Context::from_waker(&waker);
    let mut fut = core::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

/// The deadline of a timeout from now: `None` = no deadline.
pub(crate) fn deadline(timeout: Duration) -> Option<Instant> {
    if timeout == Duration::MAX {
        None
    } else {
        Instant::now().checked_add(timeout)
    }
}

impl<B, const N: usize> Waiter<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// Parks this thread until the waiter settles or `deadline` passes (then the owner cancels
    /// it as `timeout`; a settlement that won is the outcome). `None` waits without one.
    ///
    /// On a bulkhead with rates (docs/design.md §4.9) the waiting thread is the host's rate
    /// timer: it parks at most until the earliest rate-held head conforms, then runs
    /// [`Bulkhead::rate_tick`].
    ///
    /// # Errors
    /// The waiter's rejection, or `timeout`.
    pub fn wait_blocking(self, deadline: Option<Instant>) -> Result<Call<B, N>, AcquireError> {
        match self.wait_blocking_interruptible(deadline, Duration::MAX, || Ok::<(), ()>(())) {
            Ok(r) => r,
            Err(()) => unreachable!("the interrupt never fires"),
        }
    }

    /// [`wait_blocking`](Self::wait_blocking) that parks at most `slice` at a time and calls
    /// `interrupt` between slices (the Python binding checks for signals there, with the GIL).
    /// If `interrupt` fails, the waiter is abandoned (a grant that raced it passes on) and its
    /// error returned.
    ///
    /// # Errors
    /// `Ok(Err(…))`: the waiter's rejection, or `timeout`; `Err(e)`: `interrupt`'s error.
    pub fn wait_blocking_interruptible<E>(
        mut self,
        deadline: Option<Instant>,
        slice: Duration,
        mut interrupt: impl FnMut() -> Result<(), E>,
    ) -> Result<Result<Call<B, N>, AcquireError>, E> {
        let waker = thread_waker();
        loop {
            if let Poll::Ready(r) = self.poll(Some(&waker)) {
                return Ok(r);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(match self.cancel(Reason::Timeout) {
                    Cancelled::Granted(call) => Ok(call),
                    Cancelled::Cancelled(r) | Cancelled::Rejected(r) => Err(r.into()),
                });
            }
            let mut until = deadline.map_or(slice, |d| (d - now).min(slice));
            if let Some(due) = self.bulkhead().rate_retry_after() {
                if due.is_zero() {
                    self.bulkhead().rate_tick();
                    if let Poll::Ready(r) = self.poll(Some(&waker)) {
                        return Ok(r);
                    }
                    // Another pass is deciding: look again shortly, never spin.
                    until = until.min(Duration::from_millis(1));
                } else {
                    until = until.min(due);
                }
            }
            if until == Duration::MAX {
                thread::park();
            } else {
                thread::park_timeout(until);
            }
            if slice != Duration::MAX {
                if let Err(e) = interrupt() {
                    // Dropping the waiter abandons it.
                    drop(self);
                    return Err(e);
                }
            }
        }
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Waits on this thread for `weight` permits, as a guarded call.
    ///
    /// `timeout`: `None` uses the configured `queue_timeout`; `Some(Duration::MAX)` waits
    /// without a deadline; `Some(Duration::ZERO)` does not queue (`concurrency_limit` if not
    /// admitted at once).
    ///
    /// # Errors
    /// `timeout` when the deadline passes while queued, and every error of
    /// [`admit`](Self::admit).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use hullguard_core::{Bulkhead, Config, Reason};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, ..Config::default() }).unwrap();
    /// let held = bh.acquire_blocking(1, None).unwrap();
    /// let err = bh.acquire_blocking(1, Some(Duration::from_millis(5))).unwrap_err();
    /// assert_eq!(err.reason(), Some(Reason::Timeout));
    /// drop(held);
    /// ```
    pub fn acquire_blocking(
        &self,
        weight: u64,
        timeout: Option<Duration>,
    ) -> Result<Permit<'_, N>, AcquireError> {
        Self::blocking_via(self, weight, 0, timeout)
    }

    /// [`acquire_blocking`](Self::acquire_blocking) returning an
    /// [`OwnedPermit`](crate::OwnedPermit).
    ///
    /// # Errors
    /// As [`acquire_blocking`](Self::acquire_blocking).
    pub fn acquire_blocking_owned(
        self: &Arc<Self>,
        weight: u64,
        timeout: Option<Duration>,
    ) -> Result<OwnedPermit<N>, AcquireError> {
        Self::blocking_via(self.clone(), weight, 0, timeout)
    }

    /// The blocking acquire of `weight` permits in admission class `class` (a registry key
    /// under a global cap).
    pub(crate) fn blocking_via<B: Deref<Target = Self>>(
        bh: B,
        weight: u64,
        class: u16,
        timeout: Option<Duration>,
    ) -> Result<Call<B, N>, AcquireError> {
        let timeout = timeout.unwrap_or(bh.queue_timeout());
        let waker = thread_waker();
        let request = Request::new(weight).class(class).queue_timeout(timeout);
        match Self::admit_via(bh, &request, Some(&waker)) {
            Decision::Granted(call) => Ok(call),
            Decision::Queued(w) => w.wait_blocking(deadline(timeout)),
            Decision::Rejected(e) => Err(e),
        }
    }
}
