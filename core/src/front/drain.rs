//! `drain`: wait (without closing) until the bulkhead is idle — `active == 0`, `queued == 0`,
//! `granted_unclaimed == 0` — or a timeout passes (feature `std`). The waiters sit in the
//! engine's [`IdleWaiters`](crate::engine::idle::IdleWaiters); every binding's drain is this
//! future (or [`Bulkhead::drain_blocking`]).

use core::{
    future::Future,
    ops::Deref,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};
use std::time::Instant;

use crate::{front::bulkhead::Bulkhead, sync::Ordering::*};

/// What `drain` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainResult {
    /// Whether the bulkhead became idle before the timeout.
    pub drained: bool,
    /// Permits held when it returned.
    pub active: u64,
    /// Live waiters when it returned.
    pub queued: u64,
    /// Permits of orphaned calls still in flight when it returned (`Call::orphan`).
    pub orphaned: u64,
}

/// Future of a drain on a bulkhead reached through `B` (a reference or an `Arc`).
/// See [`Bulkhead::drain`] and [`Bulkhead::drain_owned`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct DrainOf<B, S, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    bh: B,
    sleep: Option<S>,
    watching: bool,
}

/// Future returned by [`Bulkhead::drain`].
pub type Drain<'a, S, const N: usize = 0> = DrainOf<&'a Bulkhead<N>, S, N>;

impl<B, S, const N: usize> DrainOf<B, S, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// What the drain would report now.
    pub fn result(&self, drained: bool) -> DrainResult {
        self.bh.drain_result(drained)
    }
}

impl<B, S: Future, const N: usize> Future for DrainOf<B, S, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    type Output = DrainResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<DrainResult> {
        // SAFETY: `sleep` is structurally pinned (never moved; `Drop` does not touch it), and
        // `bh` is never pinned-projected.
        let this = unsafe { self.get_unchecked_mut() };
        if !this.watching {
            this.watching = true;
            this.bh.engine.idle.watchers.fetch_add(1, SeqCst);
        }
        this.bh.engine.idle.register(cx.waker());
        if this.bh.is_idle() {
            return Poll::Ready(this.result(true));
        }
        if let Some(sleep) = this.sleep.as_mut() {
            // SAFETY: as above.
            if unsafe { Pin::new_unchecked(sleep) }.poll(cx).is_ready() {
                return Poll::Ready(this.result(false));
            }
        }
        Poll::Pending
    }
}

impl<B, S, const N: usize> Drop for DrainOf<B, S, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn drop(&mut self) {
        if self.watching {
            self.bh.engine.idle.watchers.fetch_sub(1, SeqCst);
        }
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Completes when the bulkhead is idle, or when `sleep` (if any) finishes first. Does not
    /// close: graceful shutdown is [`close`](Self::close) then `drain`.
    pub fn drain<S: Future>(&self, sleep: Option<S>) -> Drain<'_, S, N> {
        DrainOf {
            bh: self,
            sleep,
            watching: false,
        }
    }

    /// [`drain`](Self::drain) on an `Arc` (`'static`).
    pub fn drain_owned<S: Future>(
        self: std::sync::Arc<Self>,
        sleep: Option<S>,
    ) -> DrainOf<std::sync::Arc<Self>, S, N> {
        DrainOf {
            bh: self,
            sleep,
            watching: false,
        }
    }

    /// [`drain`](Self::drain) on this thread. `timeout` `None` (or `Duration::MAX`) waits until
    /// idle; `Some(Duration::ZERO)` reports at once.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config::default()).unwrap();
    /// let p = bh.try_acquire(1).unwrap();
    /// let r = bh.drain_blocking(Some(Duration::ZERO));
    /// assert!(!r.drained && r.active == 1);
    /// drop(p);
    /// assert!(bh.drain_blocking(None).drained);
    /// ```
    pub fn drain_blocking(&self, timeout: Option<Duration>) -> DrainResult {
        let deadline = timeout
            .filter(|t| *t != Duration::MAX)
            .and_then(|t| Instant::now().checked_add(t));
        let waker = crate::front::blocking::thread_waker();
        let mut cx = Context::from_waker(&waker);
        let mut fut = core::pin::pin!(self.drain(None::<core::future::Pending<()>>));
        loop {
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                return r;
            }
            match deadline {
                None => std::thread::park(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return self.drain_result(false);
                    }
                    std::thread::park_timeout(d - now);
                }
            }
        }
    }

    /// What a drain reports now: `drained` as given, the permits held, the live waiters and
    /// the orphaned permits in flight (one reading for every layer's drain).
    pub fn drain_result(&self, drained: bool) -> DrainResult {
        let s = self.snapshot();
        DrainResult {
            drained,
            active: s.active,
            queued: s.queued,
            orphaned: self.engine.counters.orphaned_now(),
        }
    }
}
