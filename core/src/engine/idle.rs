//! The drain waiters of one engine (feature `std`): `drain` completes when the bulkhead is
//! idle, and every change that may make it idle calls [`IdleWaiters::notify`].
//!
//! Drain waiters are rare, so they sit in a `Mutex<Vec<Waker>>`; admission never takes this
//! lock. The hot paths only read `watchers` (one load) and take the lock when it is non-zero.

use core::task::Waker;
use std::vec::Vec;

use crate::sync::{AtomicWord, Mutex, Ordering::*};

/// The drain waiters of one bulkhead.
#[derive(Debug)]
pub(crate) struct IdleWaiters {
    pub(crate) watchers: AtomicWord,
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
        self.wake_watchers();
    }

    /// Out of line: a drain is rarely watching.
    #[cold]
    #[inline(never)]
    fn wake_watchers(&self) {
        let wakers = core::mem::take(&mut *self.wakers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in wakers {
            w.wake();
        }
    }

    pub(crate) fn register(&self, waker: &Waker) {
        let mut list = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !list.iter().any(|w| w.will_wake(waker)) {
            list.push(waker.clone());
        }
    }
}
