//! `drain`: wait (without closing) until the bulkhead is idle — `active == 0`, `queued == 0`,
//! `granted_unclaimed == 0` — or a timeout passes (feature `std`).
//!
//! Drain waiters are rare, so they sit in a `Mutex<Vec<Waker>>`; admission never takes this
//! lock. The hot paths only read `watchers` (one load) and take the lock when it is non-zero.

use core::{
    future::Future,
    ops::Deref,
    pin::Pin,
    task::{Context, Poll, Waker},
    time::Duration,
};
use std::{time::Instant, vec::Vec};

use crate::{
    bulkhead::Bulkhead,
    sync::{AtomicWord, Mutex, Ordering::*},
};

/// The drain waiters of one bulkhead.
#[derive(Debug)]
pub(crate) struct IdleWaiters {
    watchers: AtomicWord,
    wakers: Mutex<Vec<Waker>>,
}

impl IdleWaiters {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            watchers: AtomicWord::new(0),
            wakers: Mutex::new(Vec::new()),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            watchers: AtomicWord::new(0),
            wakers: Mutex::new(Vec::new()),
        }
    }

    /// After any change that may make the bulkhead idle.
    #[inline]
    pub(crate) fn notify(&self) {
        // SeqCst: with the SeqCst permit-word RMWs and the drainer's SeqCst increment, either
        // the drainer's idle check sees our change or we see its registration.
        if self.watchers.load(SeqCst) == 0 {
            return;
        }
        let wakers = core::mem::take(&mut *self.wakers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in wakers {
            w.wake();
        }
    }

    fn register(&self, waker: &Waker) {
        let mut list = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !list.iter().any(|w| w.will_wake(waker)) {
            list.push(waker.clone());
        }
    }
}

/// What `drain` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainResult {
    /// Whether the bulkhead became idle before the timeout.
    pub drained: bool,
    /// Permits held when it returned.
    pub active: u64,
    /// Live waiters when it returned.
    pub queued: u64,
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
        let s = self.bh.snapshot();
        DrainResult {
            drained,
            active: s.active,
            queued: s.queued,
        }
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
            this.bh.idle.watchers.fetch_add(1, SeqCst);
        }
        this.bh.idle.register(cx.waker());
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
            self.bh.idle.watchers.fetch_sub(1, SeqCst);
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
        let waker = crate::blocking::thread_waker();
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
                        let s = self.snapshot();
                        return DrainResult {
                            drained: false,
                            active: s.active,
                            queued: s.queued,
                        };
                    }
                    std::thread::park_timeout(d - now);
                }
            }
        }
    }
}
