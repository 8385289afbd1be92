//! The acquire futures: runtime-agnostic (they only use `core::task::Waker`). Dropping one
//! while queued cancels it cleanly: if a grant won the race, its permits pass on (I7).

use core::{
    fmt,
    future::Future,
    ops::Deref,
    pin::Pin,
    task::{Context, Poll},
};

use crate::{
    bulkhead::{Admission, Bulkhead, Ticket, TicketPoll},
    outcome::Outcome,
    permit::PermitOf,
    policy::CallStart,
    reason::{AcquireError, Reason, Rejection},
};

/// Future of an acquire on a bulkhead reached through `B`. See [`Acquire`] / [`OwnedAcquire`].
#[must_use = "futures do nothing unless polled"]
pub struct AcquireOf<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    bh: Option<B>,
    weight: u64,
    ticket: Option<Ticket>,
    call: CallStart,
}

/// Future returned by [`Bulkhead::acquire`].
pub type Acquire<'a, const N: usize = 0> = AcquireOf<&'a Bulkhead<N>, N>;

/// Future returned by [`Bulkhead::acquire_owned`] (`Send + 'static`).
#[cfg(feature = "alloc")]
pub type OwnedAcquire<const N: usize = 0> = AcquireOf<alloc::sync::Arc<Bulkhead<N>>, N>;

impl<B, const N: usize> AcquireOf<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    pub(crate) fn new(bh: B, weight: u64) -> Self {
        Self {
            bh: Some(bh),
            weight,
            ticket: None,
            call: CallStart::NONE,
        }
    }

    /// The ticket while queued.
    pub fn ticket(&self) -> Option<Ticket> {
        self.ticket
    }

    fn finish(
        &mut self,
        r: Result<u64, AcquireError>,
    ) -> Poll<Result<PermitOf<B, N>, AcquireError>> {
        let queued = self.ticket.take().is_some();
        let bh = self
            .bh
            .take()
            .expect("acquire future polled after completion");
        let mut call = core::mem::take(&mut self.call);
        if queued && r.is_ok() {
            bh.mark_granted(&mut call);
        }
        Poll::Ready(
            bh.end_call_if_refused(call, r)
                .map(|w| PermitOf::with_call(bh, w, call)),
        )
    }

    /// Settles a queued ticket with `reason` (a deadline passed). If the waiter settled first,
    /// returns that outcome instead.
    fn expire(&mut self, reason: Reason) -> Poll<Result<PermitOf<B, N>, AcquireError>> {
        let (Some(bh), Some(t)) = (self.bh.as_deref(), self.ticket) else {
            return Poll::Pending;
        };
        match bh.cancel(t, reason) {
            Ok(()) => {
                let rejection = Rejection {
                    reason,
                    snapshot: bh.snapshot(),
                };
                self.finish(Err(rejection.into()))
            }
            Err(_) => self.poll_queued(None),
        }
    }

    fn poll_queued(
        &mut self,
        cx: Option<&mut Context<'_>>,
    ) -> Poll<Result<PermitOf<B, N>, AcquireError>> {
        let (Some(bh), Some(t)) = (self.bh.as_deref(), self.ticket) else {
            return Poll::Pending;
        };
        match bh.poll_ticket(t, cx.map(|cx| cx.waker())) {
            Ok(TicketPoll::Pending) => Poll::Pending,
            Ok(TicketPoll::Granted(w)) => self.finish(Ok(w)),
            Ok(TicketPoll::Rejected(r)) => self.finish(Err(r.into())),
            // Only the owner consumes its ticket, so this cannot happen; answer `aborted`.
            Err(_) => {
                let rejection = Rejection {
                    reason: Reason::Aborted,
                    snapshot: bh.snapshot(),
                };
                self.finish(Err(rejection.into()))
            }
        }
    }
}

impl<B, const N: usize> Future for AcquireOf<B, N>
where
    B: Deref<Target = Bulkhead<N>> + Unpin,
{
    type Output = Result<PermitOf<B, N>, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.ticket.is_some() {
            return this.poll_queued(Some(cx));
        }
        let bh = this
            .bh
            .as_deref()
            .expect("acquire future polled after completion");
        match bh.begin_call_for(this.weight) {
            Ok(call) => this.call = call,
            Err(e) => return this.finish(Err(e)),
        }
        let bh = this.bh.as_deref().expect("checked above");
        match bh.enqueue(this.weight, Some(cx.waker())) {
            Ok(Admission::Granted) => {
                let w = this.weight;
                this.finish(Ok(w))
            }
            Ok(Admission::Queued(t)) => {
                this.ticket = Some(t);
                Poll::Pending
            }
            Err(e) => this.finish(Err(e)),
        }
    }
}

impl<B, const N: usize> Drop for AcquireOf<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn drop(&mut self) {
        if let Some(bh) = self.bh.as_deref() {
            if let Some(t) = self.ticket {
                bh.abandon(t);
            }
            // Dropped before it finished: the call never started (a cancellation).
            bh.end_call(self.call, Outcome::Ignored);
        }
    }
}

impl<B, const N: usize> fmt::Debug for AcquireOf<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("weight", &self.weight)
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

/// Future of an acquire with a deadline: settles `timeout` if `sleep` finishes first.
/// See [`Bulkhead::acquire_timeout`].
#[must_use = "futures do nothing unless polled"]
pub struct AcquireTimeoutOf<B, const N: usize, S>
where
    B: Deref<Target = Bulkhead<N>>,
{
    acquire: AcquireOf<B, N>,
    sleep: S,
}

/// Future returned by [`Bulkhead::acquire_timeout`].
pub type AcquireTimeout<'a, S, const N: usize = 0> = AcquireTimeoutOf<&'a Bulkhead<N>, N, S>;

/// Future returned by [`Bulkhead::acquire_timeout_owned`].
#[cfg(feature = "alloc")]
pub type OwnedAcquireTimeout<S, const N: usize = 0> =
    AcquireTimeoutOf<alloc::sync::Arc<Bulkhead<N>>, N, S>;

impl<B, const N: usize, S> Future for AcquireTimeoutOf<B, N, S>
where
    B: Deref<Target = Bulkhead<N>> + Unpin,
    S: Future,
{
    type Output = Result<PermitOf<B, N>, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `sleep` is structurally pinned: it is never moved out of `self` and our
        // `Drop` (via `AcquireOf`) does not touch it; `acquire` is `Unpin` and not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if let Poll::Ready(r) = Pin::new(&mut this.acquire).poll(cx) {
            return Poll::Ready(r);
        }
        // SAFETY: see above; `this.sleep` stays where it is for the rest of its life.
        let sleep = unsafe { Pin::new_unchecked(&mut this.sleep) };
        match sleep.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => this.acquire.expire(Reason::Timeout),
        }
    }
}

impl<B, const N: usize, S> fmt::Debug for AcquireTimeoutOf<B, N, S>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcquireTimeout")
            .field("acquire", &self.acquire)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Waits for `weight` permits with no deadline of its own (FIFO, no barging). Dropping the
    /// future while queued cancels it (`aborted`); a grant that raced the drop passes on.
    ///
    /// # Errors
    /// Resolves to an error for `shutdown`, `queue_limit`, `concurrency_limit` (fail-fast, a
    /// weight above the current limit, or a shrink below it while queued), or an invalid weight.
    ///
    /// # Examples
    /// ```
    /// # futures_lite_block_on(async {
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, ..Config::default() }).unwrap();
    /// let p = bh.acquire(1).await.unwrap();
    /// assert_eq!(bh.stats().active, 1);
    /// drop(p);
    /// # });
    /// # fn futures_lite_block_on<F: core::future::Future>(f: F) -> F::Output {
    /// #     hullguard_core::block_on(f)
    /// # }
    /// ```
    pub fn acquire(&self, weight: u64) -> Acquire<'_, N> {
        AcquireOf::new(self, weight)
    }

    /// [`acquire`](Self::acquire) that settles `timeout` when `sleep` (any runtime's sleep
    /// future, e.g. `tokio::time::sleep(d)`) finishes first.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), plus `timeout`.
    pub fn acquire_timeout<S: Future>(&self, weight: u64, sleep: S) -> AcquireTimeout<'_, S, N> {
        AcquireTimeoutOf {
            acquire: AcquireOf::new(self, weight),
            sleep,
        }
    }

    /// [`acquire`](Self::acquire) on an `Arc`, yielding an [`OwnedPermit`](crate::OwnedPermit);
    /// the future is `Send + 'static`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    #[cfg(feature = "alloc")]
    pub fn acquire_owned(self: alloc::sync::Arc<Self>, weight: u64) -> OwnedAcquire<N> {
        AcquireOf::new(self, weight)
    }

    /// [`acquire_timeout`](Self::acquire_timeout) on an `Arc`.
    ///
    /// # Errors
    /// As [`acquire_timeout`](Self::acquire_timeout).
    #[cfg(feature = "alloc")]
    pub fn acquire_timeout_owned<S: Future>(
        self: alloc::sync::Arc<Self>,
        weight: u64,
        sleep: S,
    ) -> OwnedAcquireTimeout<S, N> {
        AcquireTimeoutOf {
            acquire: AcquireOf::new(self, weight),
            sleep,
        }
    }
}
