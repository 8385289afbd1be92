//! Serializes the dispatcher without making anyone wait: the "dispatching" and "work pending"
//! flags of DESIGN §3.2a(2).
//!
//! Every state change that might enable a grant (release, enqueue publish, cancel, resize,
//! close) calls [`DispatchFlag::enter`]. Whoever finds the flag taken only leaves `PENDING`
//! behind and returns at once; the runner clears `PENDING` before each pass and re-checks it
//! before it leaves, so no request is lost and no caller ever waits. A preempted runner delays
//! grants (documented), never other callers.

use core::task::Waker;

use crate::sync::{AtomicWord, Ordering::*, Word};

const RUNNING: Word = 1;
const PENDING: Word = 2;

/// The dispatcher's two flags.
#[derive(Debug)]
pub(crate) struct DispatchFlag {
    state: AtomicWord,
}

impl DispatchFlag {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            state: AtomicWord::new(0),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicWord::new(0),
        }
    }

    /// Announces work. Returns `true` if the caller became the runner and must call
    /// [`begin_pass`](Self::begin_pass) / [`try_leave`](Self::try_leave).
    #[inline]
    pub(crate) fn enter(&self) -> bool {
        // AcqRel: Release publishes the caller's state change to the runner, which reads this
        // flag with an RMW (`begin_pass` / `try_leave`); Acquire makes a new runner see the
        // previous runner's writes (it left with a Release RMW).
        self.state.fetch_or(RUNNING | PENDING, AcqRel) & RUNNING == 0
    }

    /// Runner: clears `PENDING` before a pass; requests made after this are seen by a later pass.
    pub(crate) fn begin_pass(&self) {
        // AcqRel RMW (not a store): it reads every requester's Release `fetch_or`, so this pass
        // sees their state changes.
        self.state.swap(RUNNING, AcqRel);
    }

    /// Runner: leaves if nothing is pending. `false` means a request arrived during the pass:
    /// run another.
    pub(crate) fn try_leave(&self) -> bool {
        self.state
            .compare_exchange(RUNNING, 0, AcqRel, Acquire)
            .is_ok()
    }
}

/// Wakers collected during a dispatcher pass, woken after it (never inside a protocol step:
/// a waker may run arbitrary code, including a C callback that releases).
#[derive(Debug)]
pub(crate) struct WakeBatch {
    wakers: [Option<Waker>; WakeBatch::CAPACITY],
    len: usize,
}

impl WakeBatch {
    /// How many grants one pass makes before it stops to wake them.
    pub(crate) const CAPACITY: usize = 32;

    pub(crate) const fn new() -> Self {
        Self {
            wakers: [const { None }; Self::CAPACITY],
            len: 0,
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len == Self::CAPACITY
    }

    /// Counts one settled waiter (with or without a waker to wake).
    pub(crate) fn push(&mut self, waker: Option<Waker>) {
        self.wakers[self.len] = waker;
        self.len += 1;
    }

    /// Wakes everything collected and empties the batch.
    pub(crate) fn wake_all(&mut self) {
        for w in &mut self.wakers[..self.len] {
            if let Some(w) = w.take() {
                w.wake();
            }
        }
        self.len = 0;
    }
}
