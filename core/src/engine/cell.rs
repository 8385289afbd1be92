//! One waiter cell of the ring and its stamp encoding (docs/design.md §4.2).
//!
//! A cell is reused lap after lap. Its stamp names the ticket that occupies it, so a stale
//! canceller or poller (holding an old ticket) can never touch the cell's next occupant: every
//! transition is one CAS whose expected value is the stamp it read, with exactly one winner.
//!
//! ```text
//! stamp = pos << (DELTA_BITS + KIND_BITS) | delta << KIND_BITS | kind
//!
//!   kind   FREE, CLAIMED, WAITING, GRANTED, or REJECTED + reason index (4 bits)
//!   pos    the lap of the latest ticket position this cell stands for: a ticket t uses the
//!          cell t mod capacity, on lap t / capacity (kept modulo 2³⁶ laps, 2¹⁸ on 32-bit targets)
//!   delta  how many laps the tail has skipped this cell while its occupant stayed (see below)
//!
//!   identity = pos − delta: the lap of the occupant's own ticket (for FREE: the lap that may
//!              claim the cell next; delta is 0)
//!
//!   FREE(L)   --claim by the ticket of lap L (before the tail passes it)-->  CLAIMED(L)
//!   CLAIMED   --a dispatcher pass stops at it-->  CLAIMED + mark  (the enqueuer must pass)
//!   CLAIMED   --its enqueuer writes weight, time, waker, then publishes-->    WAITING
//!   WAITING   --dispatcher grants-->  GRANTED          --owner consumes-->  FREE(pos + 1)
//!   WAITING   --dispatcher rejects (shutdown, limit) or a third party expires it (timeout)-->
//!                                     REJECTED(reason) --owner consumes-->  FREE(pos + 1)
//!   WAITING   --its owner cancels-->  FREE(pos + 1)    (at once: no tombstone)
//!   any occupied state  --the tail passes it (skip)-->  the same state, pos + 1, delta + 1
//! ```
//!
//! Why the skip: a waiter can stay queued (a heavy head, an infinite deadline) while cancelled
//! and settled neighbours come and go, and the tail then laps the ring back to its cell. The
//! enqueuer at that ticket does not wait and does not refuse: it *relabels* the occupant one lap
//! further (`pos + 1`, `delta + 1`), which marks the ticket as skipped, and takes the next
//! ticket. The occupant keeps its identity (`pos − delta`); when it is freed, the cell becomes
//! `FREE(pos + 1)`, claimable only on the lap after the last skipped one. Every cell is marked
//! (claimed or relabelled) for a ticket's lap *before* the tail moves past that ticket, so the
//! dispatcher at head `h` knows: identity == lap(h) is ticket `h` itself; anything else means `h`
//! was skipped or is gone. The claim starts with the CAS `FREE(L) → CLAIMED(L)`, which also
//! means no enqueuer that read an old tail can ever claim a ticket the tail has passed.
//!
//! The **mark** (the delta field's top bit) is set only on a CLAIMED cell, by a dispatcher pass
//! that reached it and stopped there: the pass relies on the cell's enqueuer to run one after it
//! publishes. The publish CAS replaces the mark (WAITING has none) and so tells its enqueuer,
//! and both race on this one word: either the pass marks first (the enqueuer sees it and runs a
//! pass) or the publish lands first (the mark CAS fails and the pass goes on with the waiter).
//! So an enqueuer whose cell no pass stopped at may skip its own pass when a waiter was already
//! queued ahead of it (docs/design.md §4.3). A skip carries the mark along.
//!
//! Every cell starts as FREE of lap 0, which lets a `static` ring be all zeroes.

use crate::{
    engine::waker_slot::WakerSlot,
    reason::Reason,
    sync::{AtomicWord, Word},
};

/// Bits of the stamp that hold the kind.
pub(crate) const KIND_BITS: u32 = 4;
const KIND_MASK: Word = (1 << KIND_BITS) - 1;

/// Bits of the skip delta field: its top bit is the mark (module docs), the rest count how many
/// laps one occupant can be skipped before the ring refuses (`queue_limit`; 2²³ − 1 laps with
/// 64-bit atomics, 2⁹ − 1 on 32-bit targets).
#[cfg(target_has_atomic = "64")]
pub(crate) const DELTA_BITS: u32 = 24;
/// Bits of the skip delta field (see the 64-bit docs).
#[cfg(not(target_has_atomic = "64"))]
pub(crate) const DELTA_BITS: u32 = 10;
const DELTA_MAX: Word = (1 << (DELTA_BITS - 1)) - 1;
/// The mark: a pass stopped at this CLAIMED cell (module docs).
const MARK: Word = 1 << (KIND_BITS + DELTA_BITS - 1);
const POS_SHIFT: u32 = DELTA_BITS + KIND_BITS;
/// Lap positions are kept modulo 2^(word bits − POS_SHIFT) (2³⁶ laps with 64-bit atomics).
pub(crate) const POS_MASK: Word = Word::MAX >> POS_SHIFT;

/// The request's observe bits sit in the top bits of its cell's cost word (a cost is at most
/// `MAX_BUDGET`, which leaves them free on every target).
pub(crate) const COST_OBSERVE_SHIFT: u32 = Word::BITS - 4;
const COST_MASK: Word = (1 << COST_OBSERVE_SHIFT) - 1;
const _: () = assert!(crate::limits::MAX_BUDGET as Word <= COST_MASK);
/// The observe bits a request may carry (`OBSERVE_CALLS | OBSERVE_BUDGET` of the permit word;
/// checked equal in `engine`).
pub(crate) const COST_OBSERVE_MASK: Word = 0b110;

/// A no-wait request of a classed bulkhead (docs/design.md §4.8): its cell holds no live place
/// (`live`, `queued_cost`): the pass that threads it decides it at once.
pub(crate) const COST_NOWAIT: Word = 1 << (Word::BITS - 1);

/// Whether a cell's cost word is a no-wait request's.
#[inline]
pub(crate) const fn is_nowait(word: Word) -> bool {
    word & COST_NOWAIT != 0
}

/// The cost in a cell's cost word.
#[inline]
pub(crate) const fn cost_of(word: Word) -> Word {
    word & COST_MASK
}

/// The request's own observe bits in a cell's cost word.
#[inline]
pub(crate) const fn observe_of(word: Word) -> Word {
    (word >> COST_OBSERVE_SHIFT) & COST_OBSERVE_MASK
}

/// The state part of a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Claimable by the ticket of lap `pos`.
    Free,
    /// Claimed by a ticket whose enqueuer has not published it yet.
    Claimed,
    /// A live waiter.
    Waiting,
    /// Permits moved into the cell; the owner has not claimed them yet (`granted_unclaimed`).
    Granted,
    /// Settled without permits; the owner consumes it.
    Rejected(Reason),
}

const FREE: Word = 0;
const CLAIMED: Word = 1;
const WAITING: Word = 2;
const GRANTED: Word = 3;
const REJECTED: Word = 4;

// Every reason fits the kind field.
const _: () = assert!(REJECTED as usize + Reason::COUNT <= KIND_MASK as usize + 1);

impl Kind {
    const fn bits(self) -> Word {
        match self {
            Kind::Free => FREE,
            Kind::Claimed => CLAIMED,
            Kind::Waiting => WAITING,
            Kind::Granted => GRANTED,
            Kind::Rejected(r) => REJECTED + r.index() as Word,
        }
    }

    /// Whether the cell is taken (anything but `Free`).
    pub(crate) const fn is_occupied(self) -> bool {
        !matches!(self, Kind::Free)
    }
}

/// A decoded stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp(pub(crate) Word);

impl Stamp {
    /// `FREE(lap)`.
    #[inline]
    pub(crate) const fn free(lap: Word) -> Stamp {
        Stamp((lap & POS_MASK) << POS_SHIFT)
    }

    /// `CLAIMED(lap)`, delta 0.
    #[inline]
    pub(crate) const fn claimed(lap: Word) -> Stamp {
        Stamp((lap & POS_MASK) << POS_SHIFT | CLAIMED)
    }

    #[inline]
    pub(crate) const fn kind(self) -> Kind {
        match self.0 & KIND_MASK {
            FREE => Kind::Free,
            CLAIMED => Kind::Claimed,
            WAITING => Kind::Waiting,
            GRANTED => Kind::Granted,
            k => match Reason::from_index((k - REJECTED) as usize) {
                Some(r) => Kind::Rejected(r),
                // Never written; read as a rejection the owner can still consume.
                None => Kind::Rejected(Reason::Aborted),
            },
        }
    }

    /// The lap position this cell stands for.
    #[inline]
    pub(crate) const fn pos(self) -> Word {
        self.0 >> POS_SHIFT
    }

    const fn delta(self) -> Word {
        (self.0 >> KIND_BITS) & DELTA_MAX
    }

    /// The lap of the occupant's own ticket (for `FREE`, the lap that may claim it).
    #[inline]
    pub(crate) const fn identity(self) -> Word {
        self.pos().wrapping_sub(self.delta()) & POS_MASK
    }

    /// The same occupant and position in another state (without the mark).
    #[inline]
    pub(crate) const fn with(self, kind: Kind) -> Stamp {
        Stamp(self.0 & !(KIND_MASK | MARK) | kind.bits())
    }

    /// This CLAIMED stamp with the mark: a pass stopped here (module docs).
    #[inline]
    pub(crate) const fn marked(self) -> Stamp {
        Stamp(self.0 | MARK)
    }

    /// Whether a pass stopped at this cell while it was CLAIMED.
    #[inline]
    pub(crate) const fn is_marked(self) -> bool {
        self.0 & MARK != 0
    }

    /// The occupant skipped by the tail for one more lap; `None` when the delta is exhausted.
    #[inline]
    pub(crate) const fn skipped(self) -> Option<Stamp> {
        if self.delta() == DELTA_MAX {
            return None;
        }
        let pos = (self.pos() + 1) & POS_MASK;
        Some(Stamp(
            pos << POS_SHIFT | (self.delta() + 1) << KIND_BITS | (self.0 & (KIND_MASK | MARK)),
        ))
    }

    /// The free stamp after this occupant leaves: claimable on the lap after its position.
    #[inline]
    pub(crate) const fn freed(self) -> Stamp {
        Stamp::free(self.pos().wrapping_add(1))
    }
}

/// The lap of ticket `t` in a ring of `1 << cap_shift` cells (modulo the lap range).
#[inline]
pub(crate) const fn lap(t: Word, cap_shift: u32) -> Word {
    // `cap_shift` is below the word width (a ring has fewer cells than tickets).
    (t >> cap_shift) & POS_MASK
}

/// `lap - 1`, modulo the lap range.
#[inline]
pub(crate) const fn prev_lap(lap: Word) -> Word {
    lap.wrapping_sub(1) & POS_MASK
}

/// One waiter cell.
#[derive(Debug)]
pub(crate) struct Cell {
    /// See the module docs.
    pub(crate) stamp: AtomicWord,
    /// Permits wanted (low bits) and the flags of the waiter's call (top two bits). Written by
    /// the owner before it publishes `WAITING` (Release), read by the dispatcher after it reads
    /// `WAITING` (Acquire).
    pub(crate) weight: AtomicWord,
    /// Budget units wanted (0 without a budget); written and read with `weight`.
    pub(crate) cost: AtomicWord,
    /// The breaker word of the waiter's guarded call (docs/design.md §6.3), written with the
    /// weight; handed back with the settlement.
    pub(crate) call: AtomicWord,
    /// Host clock at enqueue (ns, truncated to the word), for `queue_wait_*`.
    pub(crate) enqueued_ns: AtomicWord,
    /// The waiter's tag (admission id and its own observed dimensions), written with the
    /// weight.
    pub(crate) tag: AtomicWord,
    /// Host clock at the grant (ns), written by the dispatcher before the settle that
    /// publishes it (only the dispatcher writes it); for the `Admit` event's `wait_ns`.
    pub(crate) granted_ns: AtomicWord,
    /// The dimensions observe mode let the grant through short (`OBSERVE_*` bits), written
    /// with `granted_ns` (the `observe_bypass` event of a queued grant).
    pub(crate) bypass: AtomicWord,
    /// The owner's waker, tagged with its ticket.
    pub(crate) waker: WakerSlot,
}

impl Cell {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            stamp: AtomicWord::new(0),
            weight: AtomicWord::new(0),
            cost: AtomicWord::new(0),
            call: AtomicWord::new(0),
            enqueued_ns: AtomicWord::new(0),
            tag: AtomicWord::new(0),
            granted_ns: AtomicWord::new(0),
            bypass: AtomicWord::new(0),
            waker: WakerSlot::new(),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            stamp: AtomicWord::new(0),
            weight: AtomicWord::new(0),
            cost: AtomicWord::new(0),
            call: AtomicWord::new(0),
            enqueued_ns: AtomicWord::new(0),
            tag: AtomicWord::new(0),
            granted_ns: AtomicWord::new(0),
            bypass: AtomicWord::new(0),
            waker: WakerSlot::new(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn identity_survives_skips() {
        let s = Stamp::claimed(7).with(Kind::Waiting);
        assert_eq!((s.kind(), s.pos(), s.identity()), (Kind::Waiting, 7, 7));
        let s2 = s.skipped().unwrap().skipped().unwrap();
        assert_eq!((s2.kind(), s2.pos(), s2.identity()), (Kind::Waiting, 9, 7));
        assert_eq!(s2.freed(), Stamp::free(10));
        let r = s2.with(Kind::Rejected(Reason::Timeout));
        assert_eq!(
            (r.kind(), r.identity()),
            (Kind::Rejected(Reason::Timeout), 7)
        );
    }

    #[test]
    fn laps_wrap() {
        let top = POS_MASK;
        let s = Stamp::claimed(top);
        assert_eq!(s.freed(), Stamp::free(0));
        assert_eq!(prev_lap(0), top);
        let k = s.skipped().unwrap();
        assert_eq!((k.pos(), k.identity()), (0, top));
    }

    #[test]
    fn the_mark_rides_skips_and_leaves_with_the_publish() {
        let s = Stamp::claimed(3).marked();
        assert!(s.is_marked());
        assert_eq!((s.kind(), s.identity()), (Kind::Claimed, 3));
        let k = s.skipped().unwrap();
        assert!(k.is_marked());
        assert_eq!((k.kind(), k.pos(), k.identity()), (Kind::Claimed, 4, 3));
        let w = k.with(Kind::Waiting);
        assert!(!w.is_marked());
        assert_eq!((w.kind(), w.pos(), w.identity()), (Kind::Waiting, 4, 3));
        assert!(!Stamp::claimed(3).is_marked());
    }

    #[test]
    fn delta_is_bounded() {
        // The whole walk natively; under Miri (2^24 steps on 64-bit targets, many minutes in the
        // interpreter) the last steps only, from a stamp built near the bound.
        let start = if cfg!(miri) { DELTA_MAX - 3 } else { 0 };
        let claimed = Stamp::claimed(0);
        let mut s = Stamp(start << POS_SHIFT | start << KIND_BITS | claimed.0 & KIND_MASK);
        assert_eq!((s.identity(), s.kind()), (0, claimed.kind()));
        for _ in start..DELTA_MAX {
            s = s.skipped().unwrap();
        }
        assert_eq!((s.identity(), s.pos()), (0, DELTA_MAX));
        assert!(s.skipped().is_none());
    }
}
