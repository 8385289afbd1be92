//! The reservation table (docs/design.md §5.8): a fixed array of `max_reservations` slots,
//! allocated once, each holding one reserved admission — its permits, budget units and
//! guarded-call token — until it is committed, aborted or expired. Lock-free: every transition
//! of a slot is one CAS of its stamp, with exactly one winner.
//!
//! ```text
//! stamp = gen << 2 | state        state: FREE 0, CLAIMED 1, HELD 2
//!
//!   FREE(g)    --claim (a reserve)-->             CLAIMED(g)
//!   CLAIMED(g) --the claimer writes, publishes--> HELD(g)      (Release)
//!   CLAIMED(g) --the claimer's admission failed-> FREE(g + 1)
//!   HELD(g)    --commit | abort | expiry-->       FREE(g + 1)  (AcqRel; the winner owns the
//!                                                               permits it read before)
//! ```
//!
//! A handle names its slot by `(index, g)`, so a stale commit or a late sweep can never touch
//! the slot's next occupant: its CAS expects `HELD(g)`. The winner reads the fields *before*
//! its CAS (after it, the slot may be claimed again and rewritten) and keeps them only if the
//! CAS succeeds — as a cancelled waiter's cost is read before its cell is freed.

// Without `alloc` only the stand-in type below is built.
#![cfg_attr(not(feature = "alloc"), allow(dead_code, unused_imports))]

#[cfg(feature = "alloc")]
use alloc::boxed::Box;

use crate::{
    engine::CallWord,
    sync::{AtomicWord, Ordering::*, Word},
};

const FREE: Word = 0;
const CLAIMED: Word = 1;
const HELD: Word = 2;
const STATE_MASK: Word = 0b11;
const GEN_SHIFT: u32 = 2;

/// What a slot holds for its reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) weight: u64,
    pub(crate) cost: u64,
    pub(crate) call: CallWord,
    pub(crate) deadline_ns: u64,
    /// The revision in force when it was reserved (`Call::revision` after the commit).
    pub(crate) revision: u64,
}

/// A `u64` as two words (see `Slot::deadline_lo`).
#[cfg_attr(not(feature = "alloc"), allow(dead_code))]
fn split_u64(v: u64) -> (Word, Word) {
    #[cfg(target_has_atomic = "64")]
    return (v as Word, 0);
    #[cfg(not(target_has_atomic = "64"))]
    return (v as Word, (v >> 32) as Word);
}

/// The inverse of [`split_u64`].
#[cfg_attr(not(feature = "alloc"), allow(dead_code))]
fn join_u64(lo: Word, hi: Word) -> u64 {
    #[cfg(target_has_atomic = "64")]
    return {
        let _ = hi;
        lo as u64
    };
    #[cfg(not(target_has_atomic = "64"))]
    return (hi as u64) << 32 | lo as u64;
}

#[cfg(feature = "alloc")]
#[derive(Debug)]
struct Slot {
    stamp: AtomicWord,
    weight: AtomicWord,
    cost: AtomicWord,
    admit: AtomicWord,
    flags: AtomicWord,
    tag: AtomicWord,
    /// The deadline (ns, `u64`), as two words: the whole value on a 64-bit word, its low and
    /// high halves on a 32-bit one (a torn read is caught by the CAS that follows it).
    deadline_lo: AtomicWord,
    deadline_hi: AtomicWord,
    revision: AtomicWord,
}

#[cfg(feature = "alloc")]
impl Slot {
    fn new() -> Self {
        Slot {
            stamp: AtomicWord::new(0),
            weight: AtomicWord::new(0),
            cost: AtomicWord::new(0),
            admit: AtomicWord::new(0),
            flags: AtomicWord::new(0),
            tag: AtomicWord::new(0),
            deadline_lo: AtomicWord::new(0),
            deadline_hi: AtomicWord::new(0),
            revision: AtomicWord::new(0),
        }
    }

    /// Relaxed: ordered by the Acquire load of the `HELD` stamp the caller read (and checked
    /// by the caller's CAS from that stamp).
    fn read(&self) -> Held {
        Held {
            weight: self.weight.load(Relaxed) as u64,
            cost: self.cost.load(Relaxed) as u64,
            call: CallWord {
                admit: self.admit.load(Relaxed),
                flags: self.flags.load(Relaxed),
                tag: self.tag.load(Relaxed),
            },
            deadline_ns: join_u64(
                self.deadline_lo.load(Relaxed),
                self.deadline_hi.load(Relaxed),
            ),
            revision: self.revision.load(Relaxed) as u64,
        }
    }
}

/// A claimed slot, not yet published: [`ReservationTable::publish`] or
/// [`ReservationTable::unclaim`] it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) index: usize,
    pub(crate) generation: Word,
}

/// How a bulkhead keeps its table: a `Box` (allocated once, only with `max_reservations > 0`);
/// without `alloc` the uninhabited [`ReservationTable`] itself.
#[cfg(feature = "alloc")]
pub(crate) type TableBox = Box<ReservationTable>;
/// Without `alloc`: no values.
#[cfg(not(feature = "alloc"))]
pub(crate) type TableBox = ReservationTable;

/// Without `alloc` there are no reservations: this type has no values.
#[cfg(not(feature = "alloc"))]
#[derive(Debug)]
pub(crate) enum ReservationTable {}

#[cfg(not(feature = "alloc"))]
impl ReservationTable {
    pub(crate) fn capacity(&self) -> usize {
        match *self {}
    }
    pub(crate) fn claim(&self) -> Option<Claim> {
        match *self {}
    }
    pub(crate) fn unclaim(&self, _: Claim) {
        match *self {}
    }
    pub(crate) fn publish(&self, _: Claim, _: Held) {
        match *self {}
    }
    pub(crate) fn take(&self, _: Claim) -> Option<Held> {
        match *self {}
    }
    pub(crate) fn sweep(&self, _: u64, _: impl FnMut(Held)) -> u64 {
        match *self {}
    }
    pub(crate) fn held(&self) -> u64 {
        match *self {}
    }
    pub(crate) fn expired_total(&self) -> u64 {
        match *self {}
    }
}

/// A fixed table of reservation slots.
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub(crate) struct ReservationTable {
    slots: Box<[Slot]>,
    /// Where the next claim starts looking (a hint; Relaxed).
    hint: AtomicWord,
    /// Slots `HELD` now (Relaxed counter: the gauge in stats and the sweep's cheap test).
    held: AtomicWord,
    /// Reservations that expired (their TTL passed before a commit or an abort).
    expired: AtomicWord,
}

#[cfg(feature = "alloc")]
impl ReservationTable {
    /// A table of `capacity` (≥ 1) slots, allocated here.
    pub(crate) fn new(capacity: usize) -> Self {
        ReservationTable {
            slots: (0..capacity).map(|_| Slot::new()).collect(),
            hint: AtomicWord::new(0),
            held: AtomicWord::new(0),
            expired: AtomicWord::new(0),
        }
    }

    /// The number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Claims a free slot (`FREE(g) → CLAIMED(g)`), or `None` when every slot is taken.
    pub(crate) fn claim(&self) -> Option<Claim> {
        let n = self.slots.len();
        let start = self.hint.fetch_add(1, Relaxed) as usize;
        for k in 0..n {
            let index = (start + k) % n;
            let slot = &self.slots[index];
            let s = slot.stamp.load(Acquire);
            if s & STATE_MASK == FREE
                && slot
                    .stamp
                    .compare_exchange(s, s | CLAIMED, Acquire, Relaxed)
                    .is_ok()
            {
                return Some(Claim {
                    index,
                    generation: s >> GEN_SHIFT,
                });
            }
        }
        None
    }

    /// Gives a claimed slot back unused (`CLAIMED(g) → FREE(g + 1)`).
    pub(crate) fn unclaim(&self, c: Claim) {
        // Release: nothing was written that anyone reads; only the claimer moves a CLAIMED slot.
        self.slots[c.index]
            .stamp
            .store((c.generation.wrapping_add(1)) << GEN_SHIFT | FREE, Release);
    }

    /// Writes `held` into a claimed slot and publishes it (`CLAIMED(g) → HELD(g)`).
    pub(crate) fn publish(&self, c: Claim, held: Held) {
        let slot = &self.slots[c.index];
        // Relaxed: published by the Release store below.
        slot.weight.store(held.weight as Word, Relaxed);
        slot.cost.store(held.cost as Word, Relaxed);
        slot.admit.store(held.call.admit, Relaxed);
        slot.flags.store(held.call.flags, Relaxed);
        slot.tag.store(held.call.tag, Relaxed);
        let (lo, hi) = split_u64(held.deadline_ns);
        slot.deadline_lo.store(lo, Relaxed);
        slot.deadline_hi.store(hi, Relaxed);
        slot.revision.store(held.revision as Word, Relaxed);
        self.held.fetch_add(1, Relaxed);
        // Release: a reader that sees HELD(g) sees the fields.
        slot.stamp.store(c.generation << GEN_SHIFT | HELD, Release);
    }

    /// Takes the reservation in slot `c` if it is still `HELD(g)`: one CAS to `FREE(g + 1)`,
    /// whose winner (a commit, an abort or a sweep) owns what it held. `None`: someone else
    /// took it first.
    pub(crate) fn take(&self, c: Claim) -> Option<Held> {
        self.take_if(c, |_| true)
    }

    /// [`take`](Self::take) only if `pred` holds for what the slot holds. The fields are read
    /// after the Acquire load that showed `HELD(g)` and before the CAS from it, so a CAS that
    /// succeeds proves they were generation `g`'s (a reuse in between makes it fail).
    fn take_if(&self, c: Claim, pred: impl FnOnce(&Held) -> bool) -> Option<Held> {
        let slot = &self.slots[c.index];
        let held = c.generation << GEN_SHIFT | HELD;
        // Acquire: pairs with `publish`'s Release.
        if slot.stamp.load(Acquire) != held {
            return None;
        }
        let fields = slot.read();
        if !pred(&fields) {
            return None;
        }
        slot.stamp
            .compare_exchange(
                held,
                (c.generation.wrapping_add(1)) << GEN_SHIFT | FREE,
                AcqRel,
                Relaxed,
            )
            .ok()?;
        self.held.fetch_sub(1, Relaxed);
        Some(fields)
    }

    /// Takes every reservation whose deadline is at or before `now_ns`, handing each to
    /// `expire` (after its CAS: exactly once). Returns how many expired. Cheap when nothing
    /// is held.
    pub(crate) fn sweep(&self, now_ns: u64, mut expire: impl FnMut(Held)) -> u64 {
        if self.held.load(Relaxed) == 0 {
            return 0;
        }
        let mut n = 0;
        for (index, slot) in self.slots.iter().enumerate() {
            let s = slot.stamp.load(Relaxed);
            if s & STATE_MASK != HELD {
                continue;
            }
            let c = Claim {
                index,
                generation: s >> GEN_SHIFT,
            };
            if let Some(h) = self.take_if(c, |h| h.deadline_ns <= now_ns) {
                self.expired.fetch_add(1, Relaxed);
                n += 1;
                expire(h);
            }
        }
        n
    }

    /// Reservations held now.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Relaxed) as u64
    }

    /// Reservations that expired so far.
    pub(crate) fn expired_total(&self) -> u64 {
        self.expired.load(Relaxed) as u64
    }
}
