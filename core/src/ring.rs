//! The waiter ring: a fixed-capacity array of [`Cell`]s indexed by monotonically increasing
//! tickets (cell = ticket mod capacity, lap = ticket / capacity), in the spirit of crossbeam's
//! `ArrayQueue` stamps and embassy's ticketed `FairSemaphore`, but with mid-queue cancellation
//! by tombstone (a `CANCELLED` stamp swept lazily at the head, as cats-effect PR#4648 does).
//!
//! Storage is either inline (`N > 0`, const-generic, for `static` bulkheads with no allocator)
//! or a boxed slice allocated once, fallibly, at construction (`N == 0`, feature `alloc`).
//!
//! # Progress
//! Claiming a ticket is lock-free: the claim CAS on `tail` fails only when another enqueuer
//! claimed first. A claimed but not yet published cell never makes anyone wait: the dispatcher
//! stops at it and the enqueuer dispatches again after publishing. "Full" means full: the cell
//! at `tail` still holds the waiter (or unclaimed grant) of the previous lap.

#[cfg(feature = "alloc")]
use alloc::{boxed::Box, vec::Vec};

use crossbeam_utils::CachePadded;

#[cfg(feature = "alloc")]
use crate::config::ConfigError;
use crate::{
    cell::{Cell, Kind, stamp},
    sync::{AtomicWord, Ordering::*, Word},
};

/// Why a ticket could not be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimError {
    /// `max_queue` live waiters already.
    QueueLimit,
    /// The cell at `tail` is still occupied (a cancelled cell behind a live head, or an
    /// unclaimed grant): rejected `queue_limit` although `live < max_queue`.
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
    /// Cells not `FREE` (for `ring_free`): +1 on claim, −1 when a cell is freed.
    occupied: AtomicWord,
    max_queue: Word,
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
            max_queue,
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
            max_queue,
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

    /// The cell of a ticket from outside (a poll or cancel): `None` for a ring with no cells,
    /// so a forged ticket can never index out of bounds.
    #[inline]
    pub(crate) fn cell_checked(&self, t: Word) -> Option<&Cell> {
        let cells = self.cells();
        cells.get((t as usize) & cells.len().wrapping_sub(1))
    }

    #[inline]
    pub(crate) fn stamp(&self, t: Word, kind: Kind) -> Word {
        stamp(t, self.cap_shift, kind)
    }

    /// The stamp that frees ticket `t`'s cell for its next lap.
    #[inline]
    pub(crate) fn free_stamp_after(&self, t: Word) -> Word {
        stamp(
            t.wrapping_add(self.capacity() as Word),
            self.cap_shift,
            Kind::Free,
        )
    }

    pub(crate) fn max_queue(&self) -> Word {
        self.max_queue
    }

    /// Live waiters.
    pub(crate) fn live(&self) -> Word {
        self.live.load(Acquire)
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
    /// the flag at that moment (I6).
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

    /// A waiter settled (granted, rejected, or cancelled).
    pub(crate) fn settle_live(&self) {
        self.live.fetch_sub(1, AcqRel);
    }

    /// A cell went back to `FREE`.
    pub(crate) fn free_cell(&self, t: Word) {
        // Release: the next lap's claimant (Acquire on the stamp) sees we are done with it.
        self.cell(t).stamp.store(self.free_stamp_after(t), Release);
        self.occupied.fetch_sub(1, AcqRel);
    }

    /// Frees ticket `t`'s cell if its stamp is exactly `expected` (one winner).
    pub(crate) fn free_cell_if(&self, t: Word, expected: Word) -> bool {
        let ok = self
            .cell(t)
            .stamp
            .compare_exchange(expected, self.free_stamp_after(t), AcqRel, Acquire)
            .is_ok();
        if ok {
            self.occupied.fetch_sub(1, AcqRel);
        }
        ok
    }

    /// Reserves a live-waiter place and claims the next ticket. The caller then writes the
    /// cell and publishes `WAITING`.
    pub(crate) fn claim(&self) -> Result<Word, ClaimError> {
        let cap = self.capacity() as Word;
        // Count first: `live` may never exceed `max_queue`, whatever the interleaving.
        let mut live = self.live.load(Relaxed);
        loop {
            if live >= self.max_queue || cap == 0 {
                return Err(ClaimError::QueueLimit);
            }
            match self
                .live
                .compare_exchange_weak(live, live + 1, AcqRel, Relaxed)
            {
                Ok(_) => break,
                Err(actual) => live = actual,
            }
        }
        let mut t = self.tail.load(Acquire);
        loop {
            let cell = self.cell(t);
            // Acquire pairs with the Release that freed the cell last lap.
            let s = cell.stamp.load(Acquire);
            if s == self.stamp(t, Kind::Free) {
                // Free for this lap: try to take `tail` (SeqCst: see `tail()`).
                match self
                    .tail
                    .compare_exchange_weak(t, t.wrapping_add(1), SeqCst, Acquire)
                {
                    Ok(_) => {
                        self.occupied.fetch_add(1, AcqRel);
                        return Ok(t);
                    }
                    Err(actual) => t = actual,
                }
            } else {
                let now = self.tail.load(Acquire);
                if now != t {
                    // Another enqueuer claimed `t`; try the next ticket.
                    t = now;
                    continue;
                }
                // The cell still holds last lap's occupant: the ring is full.
                self.live.fetch_sub(1, AcqRel);
                return Err(ClaimError::RingFull);
            }
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
