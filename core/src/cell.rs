//! One waiter cell of the ring and its stamp encoding.
//!
//! A cell is reused lap after lap; its stamp carries the ticket it belongs to, so a stale
//! canceller or poller (holding an old ticket) can never touch the cell's next occupant: every
//! transition is one CAS whose expected value names the ticket, with exactly one winner.
//!
//! ```text
//! stamp = lap << KIND_BITS | kind        where lap = ticket >> log2(capacity)
//!
//! (the cell index is the ticket's low bits, so the lap names the ticket; every cell starts as
//! FREE of lap 0, which lets a `static` ring be all zeroes)
//!
//!   FREE(t)  --enqueuer claims `tail = t`, writes weight, publishes-->  WAITING(t)
//!   WAITING(t) --dispatcher-->  GRANTED(t)     --owner consumes-->  FREE(t + cap)
//!   WAITING(t) --dispatcher-->  SHUTDOWN(t) / LIMIT(t)  --owner consumes-->  FREE(t + cap)
//!   WAITING(t) --owner/timer cancels-->  CANCELLED(t)  --dispatcher sweeps at head-->  FREE(t + cap)
//! ```
//! A claimed cell whose stamp still reads FREE(t) is being published; the dispatcher stops
//! there and the enqueuer dispatches again after publishing.

use crate::{
    sync::{AtomicWord, Word},
    waker_slot::WakerSlot,
};

/// Bits of the stamp that hold the kind.
pub(crate) const KIND_BITS: u32 = 3;
const KIND_MASK: Word = (1 << KIND_BITS) - 1;

/// The state part of a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Claimable by the stamp's ticket.
    Free = 0,
    /// A live waiter.
    Waiting = 1,
    /// Permits moved into the cell; the owner has not claimed them yet (`granted_unclaimed`).
    Granted = 2,
    /// The owner (or its timer) cancelled; the dispatcher sweeps it when it reaches the head.
    Cancelled = 3,
    /// Rejected `shutdown` by the dispatcher after `close()`; the owner consumes it.
    Shutdown = 4,
    /// Rejected `concurrency_limit` (the limit shrank below its weight); the owner consumes it.
    Limit = 5,
}

/// The stamp for ticket `t` in state `kind`, for a ring of capacity `1 << cap_shift`.
#[inline]
pub(crate) const fn stamp(t: Word, cap_shift: u32, kind: Kind) -> Word {
    (t >> cap_shift).wrapping_shl(KIND_BITS) | kind as Word
}

/// The kind of a stamp.
#[inline]
pub(crate) const fn kind(stamp: Word) -> Kind {
    match stamp & KIND_MASK {
        0 => Kind::Free,
        1 => Kind::Waiting,
        2 => Kind::Granted,
        3 => Kind::Cancelled,
        4 => Kind::Shutdown,
        _ => Kind::Limit,
    }
}

/// One waiter cell.
#[derive(Debug)]
pub(crate) struct Cell {
    /// `ticket << KIND_BITS | kind`; see the module docs.
    pub(crate) stamp: AtomicWord,
    /// Permits wanted. Written by the owner before it publishes `WAITING` (Release), read by
    /// the dispatcher after it reads `WAITING` (Acquire).
    pub(crate) weight: AtomicWord,
    /// Host clock at enqueue (ns, truncated to the word), for `queue_wait_*`.
    pub(crate) enqueued_ns: AtomicWord,
    /// The owner's waker, tagged with its ticket.
    pub(crate) waker: WakerSlot,
}

impl Cell {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            stamp: AtomicWord::new(0),
            weight: AtomicWord::new(0),
            enqueued_ns: AtomicWord::new(0),
            waker: WakerSlot::new(),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            stamp: AtomicWord::new(0),
            weight: AtomicWord::new(0),
            enqueued_ns: AtomicWord::new(0),
            waker: WakerSlot::new(),
        }
    }
}
