//! The waiter ring: a fixed-capacity array of [`Cell`]s indexed by monotonically increasing
//! tickets (cell = ticket mod capacity, lap = ticket / capacity), in the spirit of crossbeam's
//! `ArrayQueue` stamps and embassy's ticketed `FairSemaphore`, with O(1) cancellation that frees
//! the cell at once and a tail that *skips* cells whose occupant stays (see [`crate::cell`] and
//! docs/design.md §4.2).
//!
//! Storage is either inline (`N > 0`, const-generic, for `static` bulkheads with no allocator)
//! or a boxed slice allocated once, fallibly, at construction (`N == 0`, feature `alloc`).
//!
//! # Capacity
//! A cell is taken by a live waiter, or by a settled waiter whose owner has not taken its
//! result yet. Live waiters are at most `max_queue`; a runtime-sized ring has
//! `next_power_of_two(max_queue + max(max_queue, 64))` cells, so the tail always finds a free
//! cell unless more than `capacity − max_queue` results are waiting for owners that have not
//! run yet (every binding takes its result as soon as it is woken).
//!
//! # Progress
//! Claiming a ticket is lock-free: each step is one CAS on a cell stamp or on `tail`, and it
//! fails only because another thread's CAS on the same word succeeded. A claimed but not yet
//! published cell never makes anyone wait: the dispatcher stops at it and the enqueuer
//! dispatches again after publishing.

#[cfg(feature = "alloc")]
use alloc::{boxed::Box, vec::Vec};

use crossbeam_utils::CachePadded;

#[cfg(feature = "alloc")]
use crate::config::ConfigError;
use crate::{
    engine::cell::{Cell, Kind, POS_MASK, Stamp, lap, prev_lap},
    sync::{AtomicWord, Ordering::*, SWord, Word},
};

/// Why a ticket could not be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimError {
    /// `max_queue` live waiters already, or their costs would pass `max_queued_cost`.
    QueueLimit,
    /// A whole lap of cells is taken by waiters and by results their owners have not taken
    /// (see "Capacity"), or one occupant was skipped for the most laps a stamp can count.
    RingFull,
}

/// The fixed-capacity ring of waiter cells.
#[derive(Debug)]
pub(crate) struct WaiterRing<const N: usize> {
    /// Next ticket to hand out. Written by enqueuers (claim CAS).
    tail: CachePadded<AtomicWord>,
    /// Oldest ticket not yet settled. Written only by the dispatcher (one at a time).
    head: CachePadded<AtomicWord>,
    /// Live waiters (`queued`): +1 before a claim, −1 when a waiter settles.
    live: AtomicWord,
    /// Cells taken or reserved (for `ring_free`, and the capacity check of `claim`): +1
    /// before a claim, −1 when a cell is freed.
    occupied: AtomicWord,
    /// The total cost of live waiters (docs/design.md §4.5): +c before a claim, −c when a
    /// waiter settles (before its CAS, as `live`, so it too may read low for a moment).
    queued_cost: AtomicWord,
    /// `max_queued_cost`; `Word::MAX`: no bound.
    max_queued_cost: Word,
    /// The bound on live waiters now (`apply_limits` may lower it, and raise it back up to
    /// `max_queue_ceiling`).
    max_queue: AtomicWord,
    /// `max_queue` at construction: the ring's cells are sized by it.
    max_queue_ceiling: Word,
    cap_shift: u32,
    inline: [Cell; N],
    #[cfg(feature = "alloc")]
    heap: Option<Box<[Cell]>>,
}

impl<const N: usize> WaiterRing<N> {
    /// An inline ring (`N > 0`) or an empty one (`N == 0`, queueing disabled).
    #[cfg(not(loom))]
    pub(crate) const fn new_inline(max_queue: Word) -> Self {
        const {
            assert!(
                N == 0 || (N.is_power_of_two() && N >= 2),
                "N must be 0 or a power of two >= 2"
            )
        };
        Self {
            tail: CachePadded::new(AtomicWord::new(0)),
            head: CachePadded::new(AtomicWord::new(0)),
            live: AtomicWord::new(0),
            occupied: AtomicWord::new(0),
            queued_cost: AtomicWord::new(0),
            max_queued_cost: Word::MAX,
            max_queue: AtomicWord::new(max_queue),
            max_queue_ceiling: max_queue,
            cap_shift: if N == 0 { 0 } else { N.trailing_zeros() },
            inline: [const { Cell::new() }; N],
            #[cfg(feature = "alloc")]
            heap: None,
        }
    }

    /// An inline ring (`N > 0`) or an empty one (`N == 0`, queueing disabled).
    #[cfg(loom)]
    pub(crate) fn new_inline(max_queue: Word) -> Self {
        assert!(N == 0 || (N.is_power_of_two() && N >= 2));
        Self {
            tail: CachePadded::new(AtomicWord::new(0)),
            head: CachePadded::new(AtomicWord::new(0)),
            live: AtomicWord::new(0),
            occupied: AtomicWord::new(0),
            queued_cost: AtomicWord::new(0),
            max_queued_cost: Word::MAX,
            max_queue: AtomicWord::new(max_queue),
            max_queue_ceiling: max_queue,
            cap_shift: if N == 0 { 0 } else { N.trailing_zeros() },
            inline: core::array::from_fn(|_| Cell::new()),
            #[cfg(feature = "alloc")]
            heap: None,
        }
    }

    /// The cells.
    #[inline]
    fn cells(&self) -> &[Cell] {
        #[cfg(feature = "alloc")]
        if N == 0 {
            return self.heap.as_deref().unwrap_or(&[]);
        }
        &self.inline
    }

    /// Ring capacity (cells).
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.cells().len()
    }

    /// The cell of ticket `t`. Callers hold a claimed ticket, so the ring is not empty.
    #[inline]
    pub(crate) fn cell(&self, t: Word) -> &Cell {
        let cells = self.cells();
        &cells[(t as usize) & (cells.len() - 1)]
    }

    /// The index of ticket `t`'s cell.
    #[inline]
    #[cfg(feature = "alloc")]
    pub(crate) fn index(&self, t: Word) -> usize {
        (t as usize) & (self.capacity().wrapping_sub(1))
    }

    /// The cell of a ticket from outside (a poll or cancel): `None` for a ring with no cells,
    /// so a forged ticket can never index out of bounds.
    #[inline]
    pub(crate) fn cell_checked(&self, t: Word) -> Option<&Cell> {
        let cells = self.cells();
        cells.get((t as usize) & cells.len().wrapping_sub(1))
    }

    /// The lap of ticket `t` (modulo the lap range).
    #[inline]
    pub(crate) fn lap(&self, t: Word) -> Word {
        lap(t, self.cap_shift)
    }

    /// The stamp of ticket `t`'s cell, if it still stands for `t` (its identity is `t`'s lap);
    /// `None` for a ticket that is gone (consumed, cancelled, skipped or never issued).
    #[inline]
    pub(crate) fn stamp_of(&self, t: Word) -> Option<(&Cell, Stamp)> {
        let cell = self.cell_checked(t)?;
        // Acquire: pairs with the Release of the transition that wrote it (publish, grant,
        // rejection), so the cell's other fields written before it are visible.
        let s = Stamp(cell.stamp.load(Acquire));
        (s.kind().is_occupied() && s.identity() == self.lap(t)).then_some((cell, s))
    }

    /// Moves ticket `t`'s cell from `from` to `to`, retrying while only skips (relabels by the
    /// tail) change it. Returns the stamp that was replaced, or the first stamp that is no
    /// longer `t`'s in state `from.kind()`.
    #[inline]
    pub(crate) fn transition(
        &self,
        cell: &Cell,
        mut from: Stamp,
        to: impl Fn(Stamp) -> Stamp,
    ) -> Result<Stamp, Stamp> {
        let (kind, identity) = (from.kind(), from.identity());
        loop {
            // AcqRel: Release publishes what the caller wrote before (grant bookkeeping,
            // weight); Acquire pairs with the transition that wrote `from`.
            match cell
                .stamp
                .compare_exchange(from.0, to(from).0, AcqRel, Acquire)
            {
                Ok(_) => return Ok(from),
                Err(actual) => {
                    let actual = Stamp(actual);
                    if actual.kind() != kind || actual.identity() != identity {
                        return Err(actual);
                    }
                    // Relabelled by a skip meanwhile: same occupant, same state.
                    from = actual;
                }
            }
        }
    }

    pub(crate) fn max_queue(&self) -> Word {
        // Relaxed: a bound read for one decision; a decision racing a change is ordered
        // before or after it.
        self.max_queue.load(Relaxed)
    }

    /// `max_queue` at construction (the most `set_max_queue` may set).
    pub(crate) fn max_queue_ceiling(&self) -> Word {
        self.max_queue_ceiling
    }

    /// Sets the bound on live waiters (`0 ..= max_queue_ceiling`, checked by the caller).
    /// Never evicts: waiters above a lowered bound stay until they settle.
    pub(crate) fn set_max_queue(&self, n: Word) {
        debug_assert!(n <= self.max_queue_ceiling);
        self.max_queue.store(n, Relaxed);
    }

    /// This ring with a bound on the total cost of its live waiters (`max_queued_cost`).
    pub(crate) const fn with_max_queued_cost(mut self, max: Option<u64>) -> Self {
        if let Some(m) = max {
            self.max_queued_cost = m as Word;
        }
        self
    }

    /// The total cost of live waiters (0 while a racing settlement has it low).
    pub(crate) fn queued_cost(&self) -> Word {
        (self.queued_cost.load(Acquire) as SWord).max(0) as Word
    }

    /// Whether `c` more units of queued cost fit `max_queued_cost` now (a dry run's check).
    pub(crate) fn cost_fits(&self, c: Word) -> bool {
        c == 0 || fits_n(self.queued_cost.load(Acquire), c, self.max_queued_cost)
    }

    /// Live waiters (0 while a racing settlement has it one low, see `settle`).
    pub(crate) fn live(&self) -> Word {
        (self.live.load(Acquire) as SWord).max(0) as Word
    }

    /// Free cells.
    pub(crate) fn free_cells(&self) -> Word {
        (self.capacity() as Word).saturating_sub(self.occupied.load(Acquire))
    }

    /// No ticket between head and tail: no waiter is queued (or being published).
    ///
    /// The fast path checks this besides the `WAITERS` flag: an `enqueue` that returned
    /// `Queued` before a `try_acquire` started has moved `tail` (and the head cannot pass its
    /// cell until it settles), so the `try_acquire` fails whatever the dispatcher is doing with
    /// the flag at that moment (I6). Tickets the tail skipped lie between head and tail only
    /// until the dispatcher pass that the skipping enqueuer runs after publishing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        // SeqCst: ordered with the claim CAS of an enqueue that completed before us.
        self.tail.load(SeqCst) == self.head.load(SeqCst)
    }

    pub(crate) fn head(&self) -> Word {
        self.head.load(Acquire)
    }

    pub(crate) fn tail(&self) -> Word {
        // SeqCst: the dispatcher's re-check after clearing WAITERS must see a claim that
        // preceded the enqueuer's `set_waiters` (see `Bulkhead::run`).
        self.tail.load(SeqCst)
    }

    /// Dispatcher only: moves the head on by one.
    pub(crate) fn advance_head(&self, h: Word) -> Word {
        let next = h.wrapping_add(1);
        // Release: stats readers; the dispatcher itself is serialized by its flag.
        self.head.store(next, Release);
        next
    }

    /// Settles ticket `t`'s waiting cell (stamp `from`) as `kind` (granted or rejected):
    /// `Err` with the stamp that won if the waiter settled first (its owner cancelled it, or a
    /// timer expired it).
    ///
    /// The waiter leaves `live` *before* the CAS that its owner can observe: an owner that sees
    /// its result and queues again must never find its old waiter still counted (it would be
    /// refused `queue_limit` below `max_queue`). If the CAS loses, the winner (a cancel) counts
    /// the waiter out itself and this undoes its own decrement, so `live` reads one low only
    /// while a grant and a cancel of the same waiter race.
    /// Its cost leaves `queued_cost` the same way.
    #[inline(always)]
    pub(crate) fn settle(&self, cell: &Cell, from: Stamp, kind: Kind) -> Result<(), Stamp> {
        // Relaxed: written by the enqueuer before its Release publish, which the caller's
        // Acquire load of the stamp saw.
        let word = cell.cost.load(Relaxed);
        // A no-wait request of a classed bulkhead holds no live place.
        let place = !crate::engine::cell::is_nowait(word);
        let c = crate::engine::cell::cost_of(word);
        if place {
            self.leave(c);
        }
        self.transition(cell, from, |s| s.with(kind))
            .map(drop)
            .inspect_err(|_| {
                if place {
                    self.live.fetch_add(1, AcqRel);
                    if c != 0 {
                        self.queued_cost.fetch_add(c, AcqRel);
                    }
                }
            })
    }

    /// Settles a waiting cell as `kind` keeping its live place (and its queued cost) for
    /// another waiter (a shed: the evicted waiter's place passes to the arrival that evicted
    /// it, so `live` never passes `max_queue`).
    #[cfg(feature = "alloc")]
    pub(crate) fn settle_transfer(
        &self,
        cell: &Cell,
        from: Stamp,
        kind: Kind,
    ) -> Result<(), Stamp> {
        self.transition(cell, from, |s| s.with(kind)).map(drop)
    }

    /// Adds `n` to `queued_cost` if it stays within `max_queued_cost` (one CAS loop).
    #[cfg(feature = "alloc")]
    pub(crate) fn reserve_cost(&self, n: Word) -> bool {
        n == 0 || reserve_n(&self.queued_cost, n, self.max_queued_cost)
    }

    /// Takes `n` out of `queued_cost`.
    #[cfg(feature = "alloc")]
    pub(crate) fn release_cost(&self, n: Word) {
        if n != 0 {
            // AcqRel: as `leave`.
            self.queued_cost.fetch_sub(n, AcqRel);
        }
    }

    /// Reserves a live place (and `c` of `max_queued_cost`) for a cell claimed without one,
    /// if the queue has room now.
    #[cfg(feature = "alloc")]
    pub(crate) fn reserve_place(&self, c: Word) -> bool {
        if !reserve(&self.live, self.max_queue()) {
            return false;
        }
        if c != 0 && !reserve_n(&self.queued_cost, c, self.max_queued_cost) {
            self.live.fetch_sub(1, AcqRel);
            return false;
        }
        true
    }

    /// The owner cancels its own waiting ticket (stamp `from`, cost word `word`): frees the
    /// cell; once the free has won, the waiter leaves `live` (and its cost `queued_cost`). Not
    /// before: a settler subtracts before its own CAS, and both subtracting while a grant and a
    /// cancel race would let claimers pass `max_queue` (a review found it). A no-wait cell holds
    /// no place.
    #[inline]
    pub(crate) fn cancel_free(&self, cell: &Cell, from: Stamp, word: Word) -> Result<Stamp, Stamp> {
        let r = self.free(cell, from);
        if r.is_ok() && !crate::engine::cell::is_nowait(word) {
            self.leave(crate::engine::cell::cost_of(word));
        }
        r
    }

    /// A waiter of cost `c` leaves the live count and the queued cost.
    fn leave(&self, c: Word) {
        self.live.fetch_sub(1, AcqRel);
        if c != 0 {
            self.queued_cost.fetch_sub(c, AcqRel);
        }
    }

    /// Frees ticket `t`'s cell from state `from` (consumed or cancelled by its owner): it
    /// becomes claimable on the lap after its position. `Err` if it is no longer `t`'s in
    /// that state (another party settled or consumed it first).
    #[inline]
    pub(crate) fn free(&self, cell: &Cell, from: Stamp) -> Result<Stamp, Stamp> {
        let r = self.transition(cell, from, Stamp::freed);
        if r.is_ok() {
            self.occupied.fetch_sub(1, AcqRel);
        }
        r
    }

    /// Reserves a live-waiter place and a cell, then claims the next ticket: its cell is
    /// `CLAIMED` on return. The caller then writes the cell and publishes `WAITING`
    /// ([`publish`](Self::publish)).
    ///
    /// Cells are reserved like live places (`occupied` counts marked cells plus claimers on
    /// their way to one, never above the capacity), so a claimer that holds a reservation
    /// always has a free cell somewhere ahead of the tail and never refuses: it skips occupied
    /// cells until it marks one. The tail moves past a ticket only once its cell is marked for
    /// that ticket's lap: claimed (`FREE(L) → CLAIMED(L)`), or, when an occupant of an older
    /// lap still holds the cell, relabelled one lap further (a skip, see [`crate::cell`]).
    /// Whoever finds the cell at `tail` already marked helps the tail on.
    ///
    /// A waiter of cost `c` also reserves `c` of `max_queued_cost` (the same way: the total
    /// never passes the bound, except while a racing settlement has it low).
    pub(crate) fn claim(&self, c: Word) -> Result<Word, ClaimError> {
        let cap = self.capacity() as Word;
        if cap == 0 || !reserve(&self.live, self.max_queue()) {
            // Count first: `live` may never exceed `max_queue`, whatever the interleaving.
            return Err(ClaimError::QueueLimit);
        }
        if c != 0 && !reserve_n(&self.queued_cost, c, self.max_queued_cost) {
            self.live.fetch_sub(1, AcqRel);
            return Err(ClaimError::QueueLimit);
        }
        if !reserve(&self.occupied, cap) {
            // Every cell is taken by a waiter or by a result its owner has not taken yet.
            self.leave(c);
            return Err(ClaimError::RingFull);
        }
        self.claim_cell(Some(c))
    }

    /// [`claim`](Self::claim) for a no-wait request of a classed bulkhead: a cell only, no
    /// live place (it is decided by the pass its enqueuer runs, docs/design.md §4.8).
    /// `RingFull` when every cell is taken.
    #[cfg(feature = "alloc")]
    pub(crate) fn claim_nowait(&self) -> Result<Word, ClaimError> {
        let cap = self.capacity() as Word;
        if cap == 0 || !reserve(&self.occupied, cap) {
            return Err(ClaimError::RingFull);
        }
        self.claim_cell(None)
    }

    /// The ticket loop of a claim holding a cell reservation (and, `Some(cost)`, a live
    /// place of that cost).
    #[inline(always)]
    fn claim_cell(&self, live: Option<Word>) -> Result<Word, ClaimError> {
        loop {
            // SeqCst: ordered with every marker's tail CAS, so the stamp load below sees the
            // mark of every ticket before `t` on this cell (see `tail()`).
            let t = self.tail.load(SeqCst);
            let cell = self.cell(t);
            let lt = self.lap(t);
            // Acquire: pairs with the Release of the mark or free that wrote the stamp.
            let s = Stamp(cell.stamp.load(Acquire));
            let ahead = s.pos().wrapping_sub(lt) & POS_MASK;
            if ahead == 0 && s.kind() == Kind::Free {
                // Mark the cell ours before the tail moves past `t` (AcqRel: Acquire pairs
                // with the free; Release orders nothing yet, the fields come later).
                if cell
                    .stamp
                    .compare_exchange(s.0, Stamp::claimed(lt).0, AcqRel, Relaxed)
                    .is_ok()
                {
                    self.help_tail(t);
                    return Ok(t);
                }
            } else if ahead < POS_MASK / 2 {
                // Marked for this lap or a later one (claimed, or an occupant relabelled, and
                // maybe freed since): `t` is taken or skipped. Help the tail on.
                self.help_tail(t);
            } else if s.pos() == prev_lap(lt) && s.kind().is_occupied() {
                // The occupant of an older lap is still here: skip `t` by relabelling it.
                let Some(next) = s.skipped() else {
                    // One occupant skipped for as many laps as a stamp counts: give up.
                    self.occupied.fetch_sub(1, AcqRel);
                    if let Some(c) = live {
                        self.leave(c);
                    }
                    return Err(ClaimError::RingFull);
                };
                // AcqRel: Acquire as above; Release orders the relabel before our tail CAS.
                if cell
                    .stamp
                    .compare_exchange(s.0, next.0, AcqRel, Relaxed)
                    .is_ok()
                {
                    self.help_tail(t);
                }
            }
            // Otherwise our `tail` was stale (it moved on): read it again.
        }
    }

    /// Moves `tail` from `t` to `t + 1` if nobody did yet (the cell of `t` is marked).
    #[inline]
    fn help_tail(&self, t: Word) {
        // SeqCst: see `tail()`; a failure means someone else moved it.
        let _ = self
            .tail
            .compare_exchange(t, t.wrapping_add(1), SeqCst, Relaxed);
    }

    /// The enqueuer of ticket `t` publishes its claimed cell as `WAITING` (after writing the
    /// weight, time, call and waker): Release, for the dispatcher's Acquire of the stamp.
    #[inline]
    ///
    /// Returns whether a dispatcher pass stopped at the cell while it was claimed (its mark, see
    /// `cell`): the enqueuer must then run a pass.
    pub(crate) fn publish(&self, t: Word) -> bool {
        let cell = self.cell(t);
        let mut s = Stamp(cell.stamp.load(Relaxed));
        loop {
            debug_assert!(s.kind() == Kind::Claimed && s.identity() == self.lap(t));
            // AcqRel: Release publishes the cell's fields; Acquire pairs with the marking pass's
            // Release (what it committed before it stopped here is seen by our pass).
            match cell
                .stamp
                .compare_exchange_weak(s.0, s.with(Kind::Waiting).0, AcqRel, Acquire)
            {
                Ok(_) => return s.is_marked(),
                // Relabelled by a skip, or marked by a pass, meanwhile: still ours.
                Err(actual) => s = Stamp(actual),
            }
        }
    }

    /// A dispatcher pass stops at claimed cell `cell` (stamp `s`, not yet marked): marks it,
    /// so that its enqueuer runs a pass after publishing. `Err` with the stamp that won
    /// (published, or relabelled by a skip): the pass looks again.
    pub(crate) fn mark_claimed(&self, cell: &Cell, s: Stamp) -> Result<(), Stamp> {
        // AcqRel: Release so the enqueuer's pass sees what this pass committed; Acquire so a
        // lost CAS reads the published fields.
        cell.stamp
            .compare_exchange(s.0, s.marked().0, AcqRel, Acquire)
            .map(drop)
            .map_err(Stamp)
    }
}

/// Takes one unit of `counter` if it stays at most `max` (one CAS loop). The counter is read
/// as signed: `live` dips below zero for a moment when two settlers race for one waiter.
fn reserve(counter: &AtomicWord, max: Word) -> bool {
    let mut n = counter.load(Relaxed);
    loop {
        if (n as SWord) >= max as SWord {
            return false;
        }
        // AcqRel: a reservation orders after the releases that made room.
        match counter.compare_exchange_weak(n, n.wrapping_add(1), AcqRel, Relaxed) {
            Ok(_) => return true,
            Err(actual) => n = actual,
        }
    }
}

/// Whether `n` more fit under `max` on a counter reading `cur` (read as signed and clamped at
/// 0: it may dip below zero for a moment, as `live`).
#[inline]
fn fits_n(cur: Word, n: Word, max: Word) -> bool {
    let cur = (cur as SWord).max(0) as Word;
    cur.checked_add(n).is_some_and(|t| t <= max)
}

/// Adds `n` to `counter` if the total stays at most `max` (a reservation, as [`reserve`]).
pub(crate) fn reserve_n(counter: &AtomicWord, n: Word, max: Word) -> bool {
    let mut cur = counter.load(Relaxed);
    loop {
        if !fits_n(cur, n, max) {
            return false;
        }
        // AcqRel: as in `reserve`.
        match counter.compare_exchange_weak(cur, cur.wrapping_add(n), AcqRel, Relaxed) {
            Ok(_) => return true,
            Err(actual) => cur = actual,
        }
    }
}

#[cfg(feature = "alloc")]
impl WaiterRing<0> {
    /// A ring of `capacity` cells (a power of two), allocated once, fallibly.
    pub(crate) fn new_heap(max_queue: Word, capacity: usize) -> Result<Self, ConfigError> {
        debug_assert!(capacity.is_power_of_two());
        let mut cells = Vec::new();
        cells
            .try_reserve_exact(capacity)
            .map_err(|_| ConfigError::MaxQueue)?;
        cells.extend((0..capacity).map(|_| Cell::new()));
        let mut ring = Self::new_inline(max_queue);
        ring.cap_shift = capacity.trailing_zeros();
        ring.heap = Some(cells.into_boxed_slice());
        Ok(ring)
    }
}
