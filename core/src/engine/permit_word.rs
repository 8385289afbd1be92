//! The permit word: the signed count of free permits plus two flag bits, changed only by single
//! read-modify-write operations that carry every flag through (tokio#8021 reopened a closed
//! semaphore by rebuilding its word without the flag).
//!
//! ```text
//! `PermitWord::state` layout:
//!   bit 0     CLOSED  - set once by `close()`, never cleared
//!   bit 1     WAITERS - a waiter may be queued: the fast path must fail (no barging, I6).
//!                       Set by an enqueuer after publishing its cell, and by the dispatcher when
//!                       the head cannot be granted; cleared only by the dispatcher, when it finds
//!                       the ring empty (and it re-checks the ring after clearing).
//!   bits 2..  available permits, two's complement: read as `(state as signed) >> SHIFT`.
//!             Negative after `set_limit` shrinks below `active` (never revokes in-flight work).
//! ```

use crate::sync::{AtomicWord, Ordering::*, SWord, Word};

/// Set once by `close()`.
pub(crate) const CLOSED: Word = 1;
/// A waiter may be queued; the fast path must not barge.
pub(crate) const WAITERS: Word = 2;
/// Shift of the `available` field.
pub(crate) const SHIFT: u32 = 2;

/// `n` permits in word units (`n << SHIFT`); callers validated `n ≤ MAX_PERMITS`.
#[inline]
pub(crate) const fn units(n: Word) -> Word {
    n << SHIFT
}

/// The signed `available` field of a state value.
#[inline]
pub(crate) const fn available(state: Word) -> SWord {
    (state as SWord) >> SHIFT
}

/// What the fast path found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakeError {
    /// Not enough free permits, or waiters queued (taking would barge).
    Busy,
    /// `close()` ran.
    Closed,
}

/// What the dispatcher's reservation for the head waiter found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reserve {
    /// The permits are taken out of the word for the head waiter.
    Reserved,
    /// Not enough permits; `WAITERS` is set in the same state that showed it, so the next
    /// release will dispatch.
    Blocked,
    /// `CLOSED` is set: no admission decision may be made any more (I8).
    Closed,
}

/// The packed permit word. See the module docs for the layout.
#[derive(Debug)]
pub(crate) struct PermitWord {
    state: AtomicWord,
}

impl PermitWord {
    #[cfg(not(loom))]
    pub(crate) const fn new(permits: Word) -> Self {
        Self {
            state: AtomicWord::new(units(permits)),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(permits: Word) -> Self {
        Self {
            state: AtomicWord::new(units(permits)),
        }
    }

    /// The current state (for stats and decisions that tolerate staleness).
    #[inline]
    pub(crate) fn load(&self) -> Word {
        // Acquire pairs with the Release half of every RMW below: a reader that sees permits
        // returned also sees the work done before the return.
        self.state.load(Acquire)
    }

    /// Fast path: takes `n` permits if no waiter is queued and enough are free.
    #[inline]
    pub(crate) fn try_take(&self, n: Word) -> Result<(), TakeError> {
        let unit = units(n);
        // Acquire: a failed attempt behaves as an Acquire load (the documented contract).
        let mut cur = self.state.load(Acquire);
        loop {
            if cur & CLOSED != 0 {
                return Err(TakeError::Closed);
            }
            if cur & WAITERS != 0 || available(cur) < n as SWord {
                return Err(TakeError::Busy);
            }
            // Success: Acquire pairs with the Release of the `give` that returned these
            // permits, so the new holder sees the previous holder's writes.
            // Failure: Acquire, we re-decide from the fresh value.
            match self
                .state
                .compare_exchange_weak(cur, cur.wrapping_sub(unit), Acquire, Acquire)
            {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    /// `enabled = false`: takes `n` permits unconditionally (the count may go negative), unless
    /// closed or the signed field would underflow.
    pub(crate) fn take_unbounded(&self, n: Word) -> Result<(), TakeError> {
        let unit = units(n);
        let floor = -(crate::limits::MAX_PERMITS as SWord);
        let mut cur = self.state.load(Relaxed);
        loop {
            if cur & CLOSED != 0 {
                return Err(TakeError::Closed);
            }
            if available(cur) - (n as SWord) < floor {
                return Err(TakeError::Busy);
            }
            match self
                .state
                .compare_exchange_weak(cur, cur.wrapping_sub(unit), Acquire, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Returns `n` permits; yields the previous state (its `WAITERS` bit says whether to
    /// dispatch).
    #[inline]
    pub(crate) fn give(&self, n: Word) -> Word {
        // SeqCst: Release publishes the holder's writes to the next taker; the total order
        // with the drain-waiter count (`Bulkhead::notify_idle`) makes a concurrent `drain`
        // either see this release or be woken by it. On x86 this is the same `lock xadd`.
        self.state.fetch_add(units(n), SeqCst)
    }

    /// Adds a signed delta to `available` (`set_limit`). Two's complement wrapping add keeps the
    /// flag bits: the delta is a multiple of `1 << SHIFT`.
    pub(crate) fn adjust(&self, delta: SWord) -> Word {
        self.state.fetch_add(units(delta as Word), SeqCst)
    }

    /// Sets `CLOSED`; returns the previous state.
    pub(crate) fn close(&self) -> Word {
        self.state.fetch_or(CLOSED, SeqCst)
    }

    /// Dispatcher only: takes `n` permits for the head waiter, ignoring `WAITERS` (the head
    /// *is* the waiter it guards); when short, sets `WAITERS` in that same state.
    pub(crate) fn reserve_for_head(&self, n: Word) -> Reserve {
        let mut cur = self.state.load(Acquire);
        loop {
            // Checked in the same CAS as the reservation: a pass that began before `close()` can
            // never decide a grant after it.
            if cur & CLOSED != 0 {
                return Reserve::Closed;
            }
            let (next, outcome) = if available(cur) >= n as SWord {
                (cur.wrapping_sub(units(n)), Reserve::Reserved)
            } else if cur & WAITERS == 0 {
                (cur | WAITERS, Reserve::Blocked)
            } else {
                return Reserve::Blocked;
            };
            // AcqRel: Acquire pairs with the `give` that freed these permits (the grantee
            // sees the releaser's writes through the cell stamp's Release/Acquire chain);
            // Release publishes WAITERS to the next `give`, which then dispatches.
            match self.state.compare_exchange(cur, next, AcqRel, Acquire) {
                Ok(_) => return outcome,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Enqueuer, after publishing its cell: from now on the fast path fails (I6).
    pub(crate) fn set_waiters(&self) {
        self.state.fetch_or(WAITERS, SeqCst);
    }

    /// Dispatcher only: clears `WAITERS` after finding the ring empty. The caller must
    /// re-check the ring afterwards (an enqueuer may have published meanwhile).
    pub(crate) fn clear_waiters(&self) {
        self.state.fetch_and(!WAITERS, SeqCst);
    }
}
