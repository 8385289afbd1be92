//! The guarded-call steps as they were exported before the admission API (docs/design.md
//! §5.5): thin deprecated wrappers over the same steps [`Bulkhead::admit`], [`Call`] and
//! [`Waiter`] run, kept for one release so that Rust callers keep compiling.
//!
//! [`Call`]: crate::Call
//! [`Waiter`]: crate::Waiter

use core::{task::Waker, time::Duration};

#[cfg(feature = "std")]
use crate::{engine::Ticket, front::waiter::Waiter};
use crate::{
    front::bulkhead::{Admission, Bulkhead},
    outcome::Outcome,
    policy::state::CallStart,
    reason::AcquireError,
};

#[allow(deprecated)]
impl<const N: usize> Bulkhead<N> {
    /// Step 1 of a guarded call: the breaker's check, before admission.
    ///
    /// # Errors
    /// [`AcquireError::Rejected`] with `circuit_open` (counted).
    #[deprecated(since = "0.1.0", note = "use `Bulkhead::admit`, which begins the call")]
    pub fn begin_call(&self) -> Result<CallStart, AcquireError> {
        self.begin_plain(1).map(|(_, c)| c)
    }

    /// Step 1 for an acquire of `weight`: argument errors first (never counted), then the
    /// breaker.
    ///
    /// # Errors
    /// [`AcquireError::InvalidWeight`], then as [`begin_call`](Self::begin_call).
    #[deprecated(since = "0.1.0", note = "use `Bulkhead::admit`, which begins the call")]
    pub fn begin_call_for(&self, weight: u64) -> Result<CallStart, AcquireError> {
        self.begin_plain(weight).map(|(_, c)| c)
    }

    /// Ends `call` `ignored` if admission refused it, and passes the result on.
    ///
    /// # Errors
    /// `r`'s error, unchanged.
    #[deprecated(since = "0.1.0", note = "`Bulkhead::admit` ends a refused call itself")]
    pub fn end_call_if_refused<T>(
        &self,
        call: CallStart,
        r: Result<T, AcquireError>,
    ) -> Result<T, AcquireError> {
        if r.is_err() {
            self.finish(call, Outcome::Ignored);
        }
        r
    }

    /// For a call granted after queueing: restarts its RTT clock at the grant.
    #[deprecated(since = "0.1.0", note = "a `Waiter`'s grant restarts it itself")]
    pub fn mark_granted(&self, call: &mut CallStart) {
        *call = self.granted_after_queueing(*call);
    }

    /// Step 3: records `outcome` to the breaker and the adaptive limit.
    #[deprecated(since = "0.1.0", note = "use `Call::end`, or drop the `Call`")]
    pub fn end_call(&self, call: CallStart, outcome: Outcome) {
        self.finish(call, outcome);
    }

    /// [`end_call`](Self::end_call); the time is read from the bulkhead's clock (a caller's
    /// timestamp is no longer used).
    #[deprecated(since = "0.1.0", note = "use `Call::end`, or drop the `Call`")]
    pub fn end_call_at(&self, call: CallStart, outcome: Outcome, _now_ns: u64) {
        self.finish(call, outcome);
    }

    /// The call overran `call_timeout`: counts it and ends the call as a failure now.
    #[deprecated(since = "0.1.0", note = "use `Call::timed_out`")]
    pub fn end_call_timed_out(&self, call: CallStart) {
        self.count_call_timeout_now();
        self.finish(call, Outcome::Failure);
    }

    /// Counts one `call_timeout` in `rejected_by_reason`.
    #[deprecated(since = "0.1.0", note = "use `Call::timed_out`")]
    pub fn count_call_timeout(&self) {
        self.count_call_timeout_now();
    }

    /// [`enqueue`](Self::enqueue) with a queue timeout: `Duration::ZERO` means "do not queue".
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue).
    #[deprecated(
        since = "0.1.0",
        note = "use `Bulkhead::admit` with `Request::queue_timeout`"
    )]
    pub fn enqueue_within(
        &self,
        weight: u64,
        timeout: Duration,
        waker: Option<&Waker>,
    ) -> Result<Admission, AcquireError> {
        if timeout.is_zero() {
            self.try_acquire_units(weight).map(|()| Admission::Granted)
        } else {
            self.enqueue(weight, waker)
        }
    }

    /// Parks until ticket `t` settles or `deadline` passes (then cancels it as `timeout`).
    ///
    /// # Errors
    /// The ticket's rejection, or `timeout`.
    #[cfg(feature = "std")]
    #[deprecated(since = "0.1.0", note = "use `Waiter::wait_blocking`")]
    pub fn wait_ticket_blocking(
        &self,
        t: Ticket,
        _waker: &Waker,
        deadline: Option<std::time::Instant>,
    ) -> Result<u64, AcquireError> {
        Waiter::from_ticket(self, t)
            .wait_blocking(deadline)
            .map(|c| c.forget())
    }
}
