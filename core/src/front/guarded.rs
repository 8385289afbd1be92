//! The guarded call in Rust (docs/design.md §6.3): breaker check → bulkhead admission → the
//! work, bounded by `call_timeout` → its outcome recorded to the breaker and the adaptive limit.
//!
//! The core arms no timer: [`Bulkhead::call`] takes the runtime's `sleep` function and uses it
//! for the queue deadline (`queue_timeout`) and for `call_timeout`. Pass [`no_timer`] to run
//! without deadlines.

use core::{
    fmt,
    future::{Future, poll_fn},
    pin::pin,
    task::Poll,
    time::Duration,
};

use crate::{
    front::bulkhead::Bulkhead,
    outcome::Outcome,
    reason::{AcquireError, Reason},
};

/// Why a guarded call did not return the work's value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError<E> {
    /// Refused before the work started (`circuit_open`, `queue_limit`, `timeout`, …); the
    /// outcome was `ignored`.
    Rejected(AcquireError),
    /// The work overran `call_timeout` and was dropped (reason `call_timeout`, outcome
    /// `failure`).
    CallTimeout,
    /// The work returned this error (outcome as the classifier said; `failure` by default).
    Failed(E),
}

impl<E> CallError<E> {
    /// The hullguard reason: the rejection's, or `call_timeout`; `None` for the work's error.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            CallError::Rejected(e) => e.reason(),
            CallError::CallTimeout => Some(Reason::CallTimeout),
            CallError::Failed(_) => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rejected(e) => write!(f, "{e}"),
            CallError::CallTimeout => f.write_str("call_timeout: the call overran call_timeout"),
            CallError::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for CallError<E> {}

/// A `sleep` for [`Bulkhead::call`] that never fires: no queue deadline, no call timeout.
pub fn no_timer(_: Duration) -> core::future::Pending<()> {
    core::future::pending()
}

/// `Ok` is a success, `Err` a failure: the default classifier of [`Bulkhead::call`].
pub fn classify_result<T, E>(r: &Result<T, E>) -> Outcome {
    if r.is_ok() {
        Outcome::Success
    } else {
        Outcome::Failure
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Runs `work` as one guarded call of `weight` permits: breaker check, admission (queueing
    /// up to `queue_timeout`), the work bounded by `call_timeout`, then its outcome (`Ok` =
    /// success, `Err` = failure) recorded before the permits are released. On a bulkhead
    /// without policies this is `acquire` + `work` + release.
    ///
    /// `sleep` is the runtime's timer (`tokio::time::sleep`, …), used for both deadlines. If
    /// the caller's future is dropped, the call ends `ignored` (a cancellation, C21).
    ///
    /// # Errors
    /// [`CallError::Rejected`] before the work started, [`CallError::CallTimeout`] after
    /// `call_timeout`, [`CallError::Failed`] with the work's error.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, call::no_timer, block_on};
    /// let bh = Bulkhead::new(Config::default()).unwrap();
    /// let v = block_on(bh.call(1, async { Ok::<_, ()>(42) }, no_timer));
    /// assert_eq!(v, Ok(42));
    /// ```
    pub async fn call<T, E, W, S>(
        &self,
        weight: u64,
        work: W,
        sleep: impl Fn(Duration) -> S,
    ) -> Result<T, CallError<E>>
    where
        W: Future<Output = Result<T, E>>,
        S: Future,
    {
        self.call_classified(weight, work, sleep, classify_result)
            .await
    }

    /// [`call`](Self::call) with a classifier choosing the outcome from the work's result (for
    /// example: a 429 response is [`Outcome::Overload`], a 404 a success).
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub async fn call_classified<T, E, W, S>(
        &self,
        weight: u64,
        work: W,
        sleep: impl Fn(Duration) -> S,
        classify: impl FnOnce(&Result<T, E>) -> Outcome,
    ) -> Result<T, CallError<E>>
    where
        W: Future<Output = Result<T, E>>,
        S: Future,
    {
        let queue_timeout = self.queue_timeout();
        let acquired = if queue_timeout == Duration::MAX {
            self.acquire(weight).await
        } else {
            self.acquire_timeout(weight, sleep(queue_timeout)).await
        };
        let permit = acquired.map_err(CallError::Rejected)?;
        let result = match self.call_timeout() {
            None => work.await,
            Some(limit) => {
                let mut work = pin!(work);
                let mut timer = pin!(sleep(limit));
                let raced = poll_fn(|cx| {
                    if let Poll::Ready(r) = work.as_mut().poll(cx) {
                        return Poll::Ready(Some(r));
                    }
                    timer.as_mut().poll(cx).map(|_| None)
                })
                .await;
                match raced {
                    Some(r) => r,
                    None => {
                        // The work is dropped here (Rust's cancellation) before the release:
                        // the one `call_timeout` rule (counted, a failure), then the permits.
                        let mut permit = permit;
                        permit.timed_out();
                        drop(permit);
                        return Err(CallError::CallTimeout);
                    }
                }
            }
        };
        permit.end(classify(&result));
        result.map_err(CallError::Failed)
    }
}
