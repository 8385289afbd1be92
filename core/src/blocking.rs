//! Blocking waits for threads (feature `std`): park/unpark through the same `Waker` path the
//! async futures use.

use core::{
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
    bulkhead::{Admission, Bulkhead, CancelError, Ticket, TicketPoll},
    permit::Permit,
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

/// A resolved timeout: `None` = no deadline.
fn deadline(timeout: Duration) -> Option<Instant> {
    if timeout == Duration::MAX {
        None
    } else {
        Instant::now().checked_add(timeout)
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Waits on this thread for `weight` permits.
    ///
    /// `timeout`: `None` uses the configured `queue_timeout`; `Some(Duration::MAX)` waits
    /// without a deadline; `Some(Duration::ZERO)` does not queue (`concurrency_limit` if not
    /// admitted at once).
    ///
    /// # Errors
    /// `timeout` when the deadline passes while queued, and every error of
    /// [`acquire`](Self::acquire).
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
        self.acquire_blocking_units(weight, timeout)
            .map(|(w, call)| crate::permit::PermitOf::with_call(self, w, call))
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
    ) -> Result<crate::OwnedPermit<N>, AcquireError> {
        self.acquire_blocking_units(weight, timeout)
            .map(|(w, call)| crate::permit::PermitOf::with_call(self.clone(), w, call))
    }

    /// The timeout rules of [`acquire_blocking`](Self::acquire_blocking), without a handle.
    fn acquire_blocking_units(
        &self,
        weight: u64,
        timeout: Option<Duration>,
    ) -> Result<(u64, crate::policy::CallStart), AcquireError> {
        let timeout = timeout.unwrap_or(self.queue_timeout());
        let waker = thread_waker();
        let mut call = self.begin_call_for(weight)?;
        let r = match self.enqueue_within(weight, timeout, Some(&waker)) {
            Ok(Admission::Granted) => Ok(weight),
            Ok(Admission::Queued(t)) => self
                .wait_ticket_blocking(t, &waker, deadline(timeout))
                .inspect(|_| self.mark_granted(&mut call)),
            Err(e) => Err(e),
        };
        self.end_call_if_refused(call, r).map(|w| (w, call))
    }

    /// The handle-free form of [`acquire_blocking`](Self::acquire_blocking): on `Ok` the caller
    /// holds the permits. `deadline` `None` waits without one.
    ///
    /// # Errors
    /// As [`acquire_blocking`](Self::acquire_blocking).
    pub fn acquire_units_blocking(
        &self,
        weight: u64,
        deadline: Option<Instant>,
    ) -> Result<u64, AcquireError> {
        let waker = thread_waker();
        match self.enqueue(weight, Some(&waker))? {
            Admission::Granted => Ok(weight),
            Admission::Queued(t) => self.wait_ticket_blocking(t, &waker, deadline),
        }
    }

    /// Parks until ticket `t` settles or `deadline` passes (then cancels it as `timeout`).
    ///
    /// # Errors
    /// The ticket's rejection, or `timeout`.
    pub fn wait_ticket_blocking(
        &self,
        t: Ticket,
        waker: &Waker,
        deadline: Option<Instant>,
    ) -> Result<u64, AcquireError> {
        loop {
            match self.poll_ticket(t, Some(waker)) {
                Ok(TicketPoll::Pending) => {}
                Ok(TicketPoll::Granted(w)) => return Ok(w),
                Ok(TicketPoll::Rejected(r)) => return Err(r.into()),
                Err(_) => return Err(self.reject(Reason::Aborted).into()),
            }
            match deadline {
                None => thread::park(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        match self.cancel(t, Reason::Timeout) {
                            Ok(()) => {
                                return Err(crate::reason::Rejection {
                                    reason: Reason::Timeout,
                                    snapshot: self.snapshot(),
                                }
                                .into());
                            }
                            // Settled first: the next poll consumes the outcome.
                            Err(CancelError::Granted | CancelError::Rejected(_)) => continue,
                            Err(CancelError::Stale) => {
                                return Err(self.reject(Reason::Aborted).into());
                            }
                        }
                    }
                    thread::park_timeout(d - now);
                }
            }
        }
    }
}
