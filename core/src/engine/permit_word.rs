//! The permit word: the signed count of free permits, optionally the free units of a budget,
//! plus two flag bits, changed only by single read-modify-write operations that carry every
//! flag through (tokio#8021 reopened a closed semaphore by rebuilding its word without the
//! flag). Both dimensions live in this one word, so an admission takes both or neither in one
//! CAS — its linearisation point — and no reader can ever see one taken without the other
//! (docs/design.md §4.1; C29).
//!
//! ```text
//! `PermitWord::state` layout (64-bit word; the 32-bit word of thumbv6m/thumbv7em in brackets):
//!   bit 0     CLOSED  - set once by `close()`, never cleared
//!   bit 1     WAITERS - a waiter may be queued: the fast path must fail (no barging, I6).
//!                       Set by an enqueuer after publishing its cell, and by the dispatcher when
//!                       the head cannot be granted; cleared only by the dispatcher, when it finds
//!                       the ring empty (and it re-checks the ring after clearing).
//!   without a budget:
//!   bits 2..  available permits, two's complement: read as `(state as signed) >> 2`.
//!             Negative after `set_limit` shrinks below `active` (never revokes in-flight work).
//!   with a budget:
//!   bits 2..44 [2..22]   available budget units + BUDGET_BIAS (biased, so the field never
//!                        borrows from or carries into its neighbour: it stays in
//!                        0 .. 2^BUDGET_BITS while |available| < BUDGET_BIAS)
//!   bits 44.. [22..]     available permits, two's complement, as above (20 [10] bits)
//! ```

use crate::sync::{AtomicWord, Ordering::*, SWord, Word};

/// Set once by `close()`.
pub(crate) const CLOSED: Word = 1;
/// A waiter may be queued; the fast path must not barge.
pub(crate) const WAITERS: Word = 2;
/// Shift of the `available` field without a budget, and of the budget field with one.
pub(crate) const SHIFT: u32 = 2;

/// Bits of the biased budget field.
#[cfg(target_has_atomic = "64")]
pub(crate) const BUDGET_BITS: u32 = 42;
/// Bits of the biased budget field (32-bit word).
#[cfg(not(target_has_atomic = "64"))]
pub(crate) const BUDGET_BITS: u32 = 20;
const BUDGET_MASK: Word = (1 << BUDGET_BITS) - 1;
/// The budget field holds `available + BUDGET_BIAS`.
const BUDGET_BIAS: SWord = 1 << (BUDGET_BITS - 1);
/// Shift of the `available` permits field when the word also holds a budget.
pub(crate) const CALLS_SHIFT_WITH_BUDGET: u32 = SHIFT + BUDGET_BITS;

// The shared limits fit the layout: a budget and its shrink/overrun below zero stay inside the
// biased field, and the permits (down to −max_concurrent when disabled) inside theirs.
const _: () = assert!(crate::limits::MAX_BUDGET as SWord * 2 < BUDGET_BIAS);
// Twice the largest count fits each signed range: a disabled bulkhead may over-admit down to
// −max and a shrink may then take up to max more (to the kill switch's limit 0). Two shrinks
// racing on such a word can pass the range for a moment (the loser undoes its delta): left as
// a known edge of a disabled, fully over-admitted bulkhead.
const _: () = assert!(
    2 * (crate::limits::MAX_CONCURRENT_WITH_BUDGET as SWord)
        < 1 << (Word::BITS - CALLS_SHIFT_WITH_BUDGET - 1)
);

/// Observe mode (docs/design.md §4.7): the permit limit is let through when short.
pub(crate) const OBSERVE_CALLS: Word = 1 << 1;
/// Observe mode: the budget is let through when short.
pub(crate) const OBSERVE_BUDGET: Word = 1 << 2;

/// `n` permits in word units without a budget (`n << SHIFT`); callers validated
/// `n ≤ MAX_PERMITS`.
#[inline]
pub(crate) const fn units(n: Word) -> Word {
    n << SHIFT
}

/// What the fast path found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakeError {
    /// Not enough free permits, or waiters queued (taking would barge).
    Busy,
    /// Enough free permits, but not enough free budget units.
    Budget,
    /// `close()` ran.
    Closed,
    /// A rate dimension of a classed bulkhead refused (docs/design.md §4.9).
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    Rate,
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
    /// Shift of the `available` permits field: [`SHIFT`], or [`CALLS_SHIFT_WITH_BUDGET`] when
    /// the word holds a budget. Fixed at construction.
    calls_shift: u32,
}

impl PermitWord {
    /// A word with `permits` free, and `budget` units free if it has a budget. Callers
    /// validated `permits ≤ MAX_PERMITS` (`≤ MAX_CONCURRENT_WITH_BUDGET` with a budget) and
    /// `budget ≤ MAX_BUDGET`.
    #[cfg(not(loom))]
    pub(crate) const fn new(permits: Word, budget: Option<Word>) -> Self {
        let (state, calls_shift) = Self::initial(permits, budget);
        Self {
            state: AtomicWord::new(state),
            calls_shift,
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(permits: Word, budget: Option<Word>) -> Self {
        let (state, calls_shift) = Self::initial(permits, budget);
        Self {
            state: AtomicWord::new(state),
            calls_shift,
        }
    }

    const fn initial(permits: Word, budget: Option<Word>) -> (Word, u32) {
        match budget {
            None => (units(permits), SHIFT),
            Some(b) => (
                permits << CALLS_SHIFT_WITH_BUDGET | (b + BUDGET_BIAS as Word) << SHIFT,
                CALLS_SHIFT_WITH_BUDGET,
            ),
        }
    }

    /// Whether the word holds a budget.
    #[inline]
    pub(crate) fn has_budget(&self) -> bool {
        self.calls_shift != SHIFT
    }

    /// `n` permits and `c` budget units as one delta of the word (`c` is 0 without a budget).
    #[inline]
    pub(crate) fn delta(&self, n: Word, c: Word) -> Word {
        (n << self.calls_shift).wrapping_add(c << SHIFT)
    }

    /// The signed `available` permits of a state value.
    #[inline]
    pub(crate) fn calls(&self, state: Word) -> SWord {
        (state as SWord) >> self.calls_shift
    }

    /// The signed available budget units of a state value (0 without a budget).
    #[inline]
    pub(crate) fn budget(&self, state: Word) -> SWord {
        if self.has_budget() {
            ((state >> SHIFT) & BUDGET_MASK) as SWord - BUDGET_BIAS
        } else {
            0
        }
    }

    /// The current state (for stats and decisions that tolerate staleness).
    #[inline]
    pub(crate) fn load(&self) -> Word {
        // Acquire pairs with the Release half of every RMW below: a reader that sees permits
        // returned also sees the work done before the return.
        self.state.load(Acquire)
    }

    /// Why `n` permits and `c` units do not fit in `cur` (permits checked first), if they do not.
    #[inline]
    pub(crate) fn short(&self, cur: Word, n: Word, c: Word) -> Option<TakeError> {
        if self.calls(cur) < n as SWord {
            Some(TakeError::Busy)
        } else if c != 0 && self.budget(cur) < c as SWord {
            Some(TakeError::Budget)
        } else {
            None
        }
    }

    /// Why the fast path would refuse `n` permits and `c` units in state `cur` — closed, a
    /// waiter queued (no barging), then the dimension that is short — if it would. The one
    /// check of [`try_take`](Self::try_take) and [`would_take`](Self::would_take).
    #[inline]
    fn refusal(&self, cur: Word, n: Word, c: Word) -> Option<TakeError> {
        if cur & CLOSED != 0 {
            Some(TakeError::Closed)
        } else if cur & WAITERS != 0 {
            Some(TakeError::Busy)
        } else {
            self.short(cur, n, c)
        }
    }

    /// What [`try_take`](Self::try_take) would answer now, without taking anything (a dry
    /// run; stale as soon as it returns).
    pub(crate) fn would_take(&self, n: Word, c: Word) -> Result<(), TakeError> {
        self.refusal(self.load(), n, c).map_or(Ok(()), Err)
    }

    /// Fast path: takes `n` permits and `c` budget units if no waiter is queued and both fit
    /// — both or neither, in one CAS.
    #[inline]
    pub(crate) fn try_take(&self, n: Word, c: Word) -> Result<(), TakeError> {
        let unit = self.delta(n, c);
        // Acquire: a failed attempt behaves as an Acquire load (the documented contract).
        let mut cur = self.state.load(Acquire);
        loop {
            if let Some(e) = self.refusal(cur, n, c) {
                return Err(e);
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

    /// `enabled = false`: takes `n` permits and `c` units unconditionally (the counts may go
    /// negative), unless closed or a signed field would leave its range (see
    /// [`floors`](Self::floors)).
    pub(crate) fn take_unbounded(&self, n: Word, c: Word) -> Result<(), TakeError> {
        let unit = self.delta(n, c);
        let mut cur = self.state.load(Relaxed);
        loop {
            if let Some(e) = self.unbounded_refusal(cur, n, c) {
                return Err(e);
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

    /// The most negative values the signed fields may take when disabled (docs/design.md §4.1):
    /// the fields' ranges, not the limits — the counts go as far below zero as the word holds.
    fn floors(&self) -> (SWord, SWord) {
        if self.has_budget() {
            (
                -(crate::limits::MAX_CONCURRENT_WITH_BUDGET as SWord),
                -(crate::limits::MAX_BUDGET as SWord),
            )
        } else {
            (-(crate::limits::MAX_PERMITS as SWord), 0)
        }
    }

    /// Observe mode (docs/design.md §4.7): why `n` permits and `c` units do not fit `cur` when
    /// the dimensions in `observed` ([`OBSERVE_CALLS`], [`OBSERVE_BUDGET`]) are let through —
    /// an enforced dimension short (permits first), an observed one at its field's floor — or
    /// which observed dimensions were short (0: none). `observed == 0` is [`short`](Self::short).
    fn observed_short(
        &self,
        cur: Word,
        n: Word,
        c: Word,
        observed: Word,
    ) -> Result<Word, TakeError> {
        let (floor_calls, floor_budget) = self.floors();
        let mut short = 0;
        let calls = self.calls(cur);
        // A request of no permits (a streaming hold's growth) asks nothing of the permits,
        // even when they are overdrawn.
        if n != 0 && calls < n as SWord {
            if observed & OBSERVE_CALLS == 0 || calls - (n as SWord) < floor_calls {
                return Err(TakeError::Busy);
            }
            short |= OBSERVE_CALLS;
        }
        let units = self.budget(cur);
        if c != 0 && units < c as SWord {
            if observed & OBSERVE_BUDGET == 0 || units - (c as SWord) < floor_budget {
                return Err(TakeError::Budget);
            }
            short |= OBSERVE_BUDGET;
        }
        Ok(short)
    }

    /// [`refusal`](Self::refusal) in observe mode: closed, a waiter queued (no barging), then
    /// [`observed_short`](Self::observed_short).
    fn observed_refusal(
        &self,
        cur: Word,
        n: Word,
        c: Word,
        observed: Word,
    ) -> Result<Word, TakeError> {
        if cur & CLOSED != 0 {
            Err(TakeError::Closed)
        } else if cur & WAITERS != 0 {
            Err(TakeError::Busy)
        } else {
            self.observed_short(cur, n, c, observed)
        }
    }

    /// Observe mode's fast path: takes `n` permits and `c` units in one CAS unless an enforced
    /// dimension is short (or closed, or a waiter is queued); returns the observed dimensions
    /// that were short — what the enforced decision would have refused.
    pub(crate) fn try_take_observed(
        &self,
        n: Word,
        c: Word,
        observed: Word,
    ) -> Result<Word, TakeError> {
        let unit = self.delta(n, c);
        // Acquire: as in `try_take`.
        let mut cur = self.state.load(Acquire);
        loop {
            let short = self.observed_refusal(cur, n, c, observed)?;
            match self
                .state
                .compare_exchange_weak(cur, cur.wrapping_sub(unit), Acquire, Acquire)
            {
                Ok(_) => return Ok(short),
                Err(actual) => cur = actual,
            }
        }
    }

    /// What [`try_take_observed`](Self::try_take_observed) would answer now, taking nothing.
    pub(crate) fn would_take_observed(
        &self,
        n: Word,
        c: Word,
        observed: Word,
    ) -> Result<Word, TakeError> {
        self.observed_refusal(self.load(), n, c, observed)
    }

    /// Why [`take_unbounded`](Self::take_unbounded) would refuse in state `cur`, if it would.
    fn unbounded_refusal(&self, cur: Word, n: Word, c: Word) -> Option<TakeError> {
        let (floor_calls, floor_budget) = self.floors();
        if cur & CLOSED != 0 {
            Some(TakeError::Closed)
        } else if self.calls(cur) - (n as SWord) < floor_calls {
            Some(TakeError::Busy)
        } else if c != 0 && self.budget(cur) - (c as SWord) < floor_budget {
            Some(TakeError::Budget)
        } else {
            None
        }
    }

    /// What [`take_unbounded`](Self::take_unbounded) would answer now, without taking anything.
    pub(crate) fn would_take_unbounded(&self, n: Word, c: Word) -> Result<(), TakeError> {
        self.unbounded_refusal(self.load(), n, c)
            .map_or(Ok(()), Err)
    }

    /// Returns `n` permits and `c` budget units; yields the previous state (its `WAITERS` bit
    /// says whether to dispatch).
    #[inline]
    pub(crate) fn give(&self, n: Word, c: Word) -> Word {
        // SeqCst: Release publishes the holder's writes to the next taker; the total order
        // with the drain-waiter count (`Bulkhead::notify_idle`) makes a concurrent `drain`
        // either see this release or be woken by it. On x86 this is the same `lock xadd`.
        self.state.fetch_add(self.delta(n, c), SeqCst)
    }

    /// Adds signed deltas to the available permits and budget units (`set_limit`,
    /// `set_budget`). Two's complement wrapping add keeps the flag bits and the other field:
    /// each delta is a multiple of its field's unit, and neither field leaves its range.
    pub(crate) fn adjust(&self, calls: SWord, budget: SWord) -> Word {
        let d = self.delta(calls as Word, budget as Word);
        self.state.fetch_add(d, SeqCst)
    }

    /// Sets `CLOSED`; returns the previous state.
    pub(crate) fn close(&self) -> Word {
        self.state.fetch_or(CLOSED, SeqCst)
    }

    /// Dispatcher only: takes `n` permits and `c` units for the head waiter, ignoring
    /// `WAITERS` (the head *is* the waiter it guards); when either is short, sets `WAITERS`
    /// in that same state.
    #[inline]
    pub(crate) fn reserve_for_head(&self, n: Word, c: Word) -> Reserve {
        self.reserve_with(n, c, |cur| self.short(cur, n, c).is_none())
    }

    /// [`reserve_for_head`](Self::reserve_for_head) in observe mode: the dimensions in
    /// `observed` are let through when short; `short` receives which were. Out of line: the
    /// enforcing dispatcher does not carry it.
    #[cold]
    #[inline(never)]
    pub(crate) fn reserve_for_head_observed(
        &self,
        n: Word,
        c: Word,
        observed: Word,
        short: &mut Word,
    ) -> Reserve {
        self.reserve_with(n, c, |cur| {
            self.observed_short(cur, n, c, observed)
                .map(|s| *short = s)
                .is_ok()
        })
    }

    /// The reservation loop: `fits(cur)` decides whether the head's `n` and `c` are taken.
    #[inline(always)]
    fn reserve_with(&self, n: Word, c: Word, mut fits: impl FnMut(Word) -> bool) -> Reserve {
        let mut cur = self.state.load(Acquire);
        loop {
            // Checked in the same CAS as the reservation: a pass that began before `close()` can
            // never decide a grant after it.
            if cur & CLOSED != 0 {
                return Reserve::Closed;
            }
            let (next, outcome) = if fits(cur) {
                (cur.wrapping_sub(self.delta(n, c)), Reserve::Reserved)
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
    /// Returns the state before (its `WAITERS` bit: a waiter was queued before this one).
    pub(crate) fn set_waiters(&self) -> Word {
        self.state.fetch_or(WAITERS, SeqCst)
    }

    /// Dispatcher only: clears `WAITERS` after finding the ring empty. The caller must
    /// re-check the ring afterwards (an enqueuer may have published meanwhile).
    pub(crate) fn clear_waiters(&self) {
        self.state.fetch_and(!WAITERS, SeqCst);
    }
}
