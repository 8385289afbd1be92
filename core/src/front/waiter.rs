//! [`Waiter`]: the handle of one queued admission (docs/design.md §5.2). Its guarded call lives
//! in its ring cell, so the ticket alone names everything; the handle adds ownership:
//! [`poll`](Waiter::poll) it with a waker until it settles (a [`Call`] or a rejection), let a
//! host timer [`expire`](Bulkhead::expire) it with a reason, [`cancel`](Waiter::cancel) it, or
//! drop it (abandoned: cancelled `aborted`, or, if it settled first, its permits passed on).
//! The core arms no timer; [`queue_timeout`](Waiter::queue_timeout) says what to arm.

use core::{
    fmt,
    future::Future,
    ops::Deref,
    pin::Pin,
    task::{Context, Poll, Waker},
    time::Duration,
};

use crate::{
    engine::{CancelError, Polled, Ticket},
    front::{bulkhead::Bulkhead, call::Call},
    reason::{AcquireError, Reason, Rejection},
};

/// A queued admission on a bulkhead reached through `B` (a reference or an `Arc`).
#[must_use = "dropping a waiter gives its place in the queue up"]
pub struct Waiter<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    bh: Option<B>,
    ticket: Ticket,
    queue_timeout: Duration,
}

/// How an owner's cancel ended (see [`Waiter::cancel`]).
pub enum Cancelled<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// The cancel won: the waiter is gone, its reason counted, its place free.
    Cancelled(Rejection),
    /// A grant won the race: the permits are the caller's (use them, or drop the call).
    Granted(Call<B, N>),
    /// The waiter was rejected first (this rejection).
    Rejected(Rejection),
}

impl<B, const N: usize> fmt::Debug for Cancelled<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cancelled::Cancelled(r) => f.debug_tuple("Cancelled").field(r).finish(),
            Cancelled::Granted(c) => f.debug_tuple("Granted").field(c).finish(),
            Cancelled::Rejected(r) => f.debug_tuple("Rejected").field(r).finish(),
        }
    }
}

impl<B, const N: usize> Waiter<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// The handle of queued ticket `ticket` of `bh`, whose deadline is `queue_timeout`.
    pub(crate) fn new(bh: B, ticket: Ticket, queue_timeout: Duration) -> Self {
        Self {
            bh: Some(bh),
            ticket,
            queue_timeout,
        }
    }

    /// A handle for a ticket its caller owns (a raw ticket kept by a binding, as the C ABI's
    /// polling API and Node do). The deadline is unknown here: [`queue_timeout`] is the
    /// bulkhead's. A ticket that is not live just settles as `aborted` when polled.
    ///
    /// [`queue_timeout`]: Self::queue_timeout
    pub fn from_ticket(bh: B, ticket: Ticket) -> Self {
        let t = bh.queue_timeout();
        Self::new(bh, ticket, t)
    }

    /// The ticket (for the host's timer: [`Bulkhead::expire`]).
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// The deadline to arm: the request's queue timeout, or the bulkhead's (`Duration::MAX`:
    /// none). When it passes, call [`Bulkhead::expire`]`(ticket, Reason::Timeout)` — or
    /// [`cancel`](Self::cancel) if the host owns this handle there.
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }

    /// The bulkhead.
    ///
    /// # Panics
    /// After the waiter settled (a `Ready` poll) or was given up.
    pub fn bulkhead(&self) -> &Bulkhead<N> {
        self.bh.as_deref().expect("waiter used after it settled")
    }

    /// The handle it reaches its bulkhead through (an `Arc` for an owned waiter): a host that
    /// arms timers for the waiter (its queue deadline, a rate tick) keeps a clone of it — under
    /// a registry's global cap that is the shared admission, not the key's bulkhead.
    ///
    /// # Panics
    /// After the waiter settled (a `Ready` poll) or was given up.
    pub fn handle(&self) -> &B {
        self.bh.as_ref().expect("waiter used after it settled")
    }

    /// Polls: `Pending` while queued (`waker`, if any, is woken when it settles); `Ready` with
    /// the [`Call`] (granted: its RTT clock starts now) or the rejection (`shutdown`,
    /// `concurrency_limit` after a shrink of the limit, `budget_limit` after a shrink of the
    /// budget, `timeout` / `aborted` after an expiry; the call ends `ignored`). After `Ready` the
    /// waiter is spent.
    ///
    /// # Panics
    /// When polled again after `Ready`.
    pub fn poll(&mut self, waker: Option<&Waker>) -> Poll<Result<Call<B, N>, AcquireError>> {
        let bh = self.bh.as_deref().expect("waiter polled after it settled");
        match bh.engine.poll(self.ticket, waker, bh.emits_admissions()) {
            Ok(Polled::Pending) => Poll::Pending,
            Ok(Polled::Granted { weight, cost, call }) => {
                let call = bh.granted_from_queue(call);
                let bh = self.bh.take().expect("checked above");
                Poll::Ready(Ok(Call::from_parts_with_cost(bh, weight, cost, call)))
            }
            Ok(Polled::Rejected { rejection, call }) => {
                bh.refused_from_queue(call, rejection.reason);
                self.bh = None;
                Poll::Ready(Err(rejection.into()))
            }
            // Only the owner consumes its ticket, so this happens only for a ticket that was
            // not live (`from_ticket`): it settles as `aborted`, counted by nobody.
            Err(_) => {
                let rejection = Rejection::new(Reason::Aborted, bh.snapshot());
                self.bh = None;
                Poll::Ready(Err(rejection.into()))
            }
        }
    }

    /// The owner cancels with `reason` (`aborted`; `timeout` when the owner's own deadline
    /// passed): the waiter's place is free at once and its call ends `ignored`. If it settled
    /// first, that settlement is returned instead (a grant is the caller's to use).
    pub fn cancel(mut self, reason: Reason) -> Cancelled<B, N> {
        let bh = self.bh.take().expect("waiter used after it settled");
        match bh.cancel(self.ticket, reason) {
            Ok(()) => {
                let rejection = Rejection::new(reason, bh.snapshot());
                Cancelled::Cancelled(rejection)
            }
            Err(CancelError::Granted | CancelError::Rejected(_)) => {
                self.bh = Some(bh);
                let settled = self.poll(None);
                // Settled means consumable, so the poll was `Ready` and the handle is spent;
                // whatever it says, nothing is left for the drop.
                self.bh = None;
                match settled {
                    Poll::Ready(Ok(call)) => Cancelled::Granted(call),
                    Poll::Ready(Err(AcquireError::Rejected(r))) => Cancelled::Rejected(r),
                    Poll::Ready(Err(_)) | Poll::Pending => Cancelled::Rejected(Rejection::new(
                        Reason::Aborted,
                        crate::reason::Snapshot::default(),
                    )),
                }
            }
            Err(_) => {
                let rejection = Rejection::new(Reason::Aborted, bh.snapshot());
                Cancelled::Cancelled(rejection)
            }
        }
    }

    /// Gives the handle up without abandoning the ticket: the caller keeps the raw ticket and
    /// polls it again later with [`from_ticket`](Self::from_ticket) (a binding that stores only
    /// the ticket between polls).
    pub fn into_ticket(mut self) -> Ticket {
        self.bh = None;
        self.ticket
    }
}

/// A waiter is a future of its settlement: `waiter.await` polls it with the task's waker. Drop
/// it (or the task) to give the place up; the core arms no deadline — race it with the
/// runtime's timer, or use [`Bulkhead::acquire_timeout`].
///
/// # Panics
/// When polled again after it resolved (as [`poll`](Waiter::poll)).
impl<B, const N: usize> Future for Waiter<B, N>
where
    B: Deref<Target = Bulkhead<N>> + Unpin,
{
    type Output = Result<Call<B, N>, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Waiter::poll(self.get_mut(), Some(cx.waker()))
    }
}

impl<B, const N: usize> Drop for Waiter<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn drop(&mut self) {
        // Abandoned while queued: a cancellation (`aborted`); a grant that raced it passes on,
        // and the call it carried ends `ignored` either way.
        if let Some(bh) = self.bh.take() {
            bh.abandon(self.ticket);
        }
    }
}

impl<B, const N: usize> fmt::Debug for Waiter<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("ticket", &self.ticket)
            .field("queue_timeout", &self.queue_timeout)
            .finish_non_exhaustive()
    }
}
