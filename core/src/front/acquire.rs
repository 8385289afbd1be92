//! The acquire futures: runtime-agnostic (they only use `core::task::Waker`), built on the one
//! admission ([`Bulkhead::admit`]) and its [`Waiter`]. Dropping one while queued abandons the
//! waiter cleanly: if a grant won the race, its permits pass on (I7).

use core::{
    fmt,
    future::Future,
    ops::Deref,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use crate::{
    engine::Ticket,
    front::{
        admit::Decision,
        bulkhead::Bulkhead,
        call::Call,
        request::Request,
        waiter::{Cancelled, Waiter},
    },
    reason::{AcquireError, Reason},
};

enum State<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    Init(B),
    Queued(Waiter<B, N>),
    Done,
}

/// Future of an acquire on a bulkhead reached through `B`. See [`Acquire`] / [`OwnedAcquire`].
#[must_use = "futures do nothing unless polled"]
pub struct AcquireOf<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    state: State<B, N>,
    weight: u64,
    /// The admission class (0 on a bulkhead without classes).
    class: u16,
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
        Self::in_class(bh, weight, 0)
    }

    /// An acquire in admission class `class` (a registry key under a global cap).
    pub(crate) fn in_class(bh: B, weight: u64, class: u16) -> Self {
        Self {
            state: State::Init(bh),
            weight,
            class,
        }
    }

    /// The ticket while queued.
    pub fn ticket(&self) -> Option<Ticket> {
        match &self.state {
            State::Queued(w) => Some(w.ticket()),
            _ => None,
        }
    }

    /// The deadline passed while queued: the owner's own cancel, as `timeout`. If the waiter
    /// settled first, that settlement is the outcome.
    fn expire(&mut self) -> Poll<Result<Call<B, N>, AcquireError>> {
        match core::mem::replace(&mut self.state, State::Done) {
            State::Queued(w) => Poll::Ready(match w.cancel(Reason::Timeout) {
                Cancelled::Granted(call) => Ok(call),
                Cancelled::Cancelled(r) | Cancelled::Rejected(r) => Err(r.into()),
            }),
            other => {
                self.state = other;
                Poll::Pending
            }
        }
    }
}

impl<B, const N: usize> Future for AcquireOf<B, N>
where
    B: Deref<Target = Bulkhead<N>> + Unpin,
{
    type Output = Result<Call<B, N>, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match core::mem::replace(&mut this.state, State::Done) {
            State::Init(bh) => {
                // No deadline of its own (`acquire_timeout` races a sleep instead).
                let req = Request::new(this.weight)
                    .class(this.class)
                    .queue_timeout(Duration::MAX);
                match Bulkhead::admit_via(bh, &req, Some(cx.waker())) {
                    Decision::Granted(call) => Poll::Ready(Ok(call)),
                    Decision::Queued(w) => {
                        this.state = State::Queued(w);
                        Poll::Pending
                    }
                    Decision::Rejected(e) => Poll::Ready(Err(e)),
                }
            }
            State::Queued(mut w) => match w.poll(Some(cx.waker())) {
                Poll::Pending => {
                    this.state = State::Queued(w);
                    Poll::Pending
                }
                Poll::Ready(r) => Poll::Ready(r),
            },
            State::Done => panic!("acquire future polled after completion"),
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
            .field("ticket", &self.ticket())
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

impl<B, const N: usize, S> AcquireTimeoutOf<B, N, S>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// An acquire in admission class `class` that settles `timeout` when `sleep` finishes.
    #[cfg(feature = "std")]
    pub(crate) fn in_class(bh: B, weight: u64, class: u16, sleep: S) -> Self {
        AcquireTimeoutOf {
            acquire: AcquireOf::in_class(bh, weight, class),
            sleep,
        }
    }
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
    type Output = Result<Call<B, N>, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `sleep` is structurally pinned: it is never moved out of `self` and no `Drop`
        // touches it; `acquire` is `Unpin` and not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if let Poll::Ready(r) = Pin::new(&mut this.acquire).poll(cx) {
            return Poll::Ready(r);
        }
        // SAFETY: see above; `this.sleep` stays where it is for the rest of its life.
        let sleep = unsafe { Pin::new_unchecked(&mut this.sleep) };
        match sleep.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => this.acquire.expire(),
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
