//! The book of a bulkhead's budget (docs/design.md §4.5): the second dimension of admission —
//! an in-flight ceiling of cost units (tokens, bytes) beside the permit limit. The free units
//! themselves live in the permit word (so a grant takes permits and units in one CAS); this is
//! everything else: the current ceiling, the units sitting in `GRANTED` cells, and the
//! settlement counters.
//!
//! Settlement identity, exact at quiescent points (C30):
//! `reserved_total + overrun_total == consumed_total + refunded_total + in use + overrun held`,
//! where a call that ends without reporting usage consumed its whole hold, and `overrun held`
//! is the part of the streaming holds that grew past the budget (held beyond it, never taken
//! from the permit word).

use crate::sync::{AtomicWord, Ordering::*, Word};

/// The budget book. `max == 0` means the bulkhead has no budget (every counter stays 0).
#[derive(Debug)]
pub(crate) struct BudgetBook {
    /// The ceiling it was built with, `1 ..= MAX_BUDGET`; 0 without a budget.
    pub(crate) max: Word,
    /// The current ceiling, `0 ..= max` (0: the budget admits only cost-0 requests).
    pub(crate) limit: AtomicWord,
    /// Units in `GRANTED` cells (granted, not yet claimed by their owner).
    pub(crate) unclaimed: AtomicWord,
    /// Units taken by grants to queued waiters. Written only by the dispatcher (one at a
    /// time), so plain load + store; fast-path grants count in the sharded counter's lane.
    pub(crate) reserved_queued: AtomicWord,
    /// Units returned before their call ended (refunds, and the unused rest at settlement).
    pub(crate) refunded_total: AtomicWord,
    /// Units reported used beyond what the call held, and growth of a hold that did not fit.
    pub(crate) overrun_total: AtomicWord,
    /// Units of live holds beyond the budget: growth through `report_usage` that did not fit
    /// (a gauge; `held ≤ budget + overrun_held`).
    pub(crate) overrun_held: AtomicWord,
}

/// The book of a ceiling of `max` units (0: no budget).
macro_rules! book {
    ($max:expr) => {
        BudgetBook {
            max: $max,
            limit: AtomicWord::new($max),
            unclaimed: AtomicWord::new(0),
            reserved_queued: AtomicWord::new(0),
            refunded_total: AtomicWord::new(0),
            overrun_total: AtomicWord::new(0),
            overrun_held: AtomicWord::new(0),
        }
    };
}

impl BudgetBook {
    #[cfg(not(loom))]
    pub(crate) const fn new(budget: Option<u64>) -> Self {
        match budget {
            Some(b) => book!(b as Word),
            None => book!(0),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(budget: Option<u64>) -> Self {
        book!(budget.map_or(0, |b| b as Word))
    }

    /// Dispatcher only: counts `c` units taken by a grant to a queued waiter.
    #[inline]
    pub(crate) fn reserved_by_dispatcher(&self, c: Word) {
        if c != 0 {
            // Relaxed, plain load + store: one writer at a time (see the field).
            let q = &self.reserved_queued;
            q.store(q.load(Relaxed).wrapping_add(c), Relaxed);
        }
    }

    /// A live hold grew `c` units past the budget (`c > 0`): counted in `overrun_total` and
    /// held in the `overrun_held` gauge until [`overrun_returned`](Self::overrun_returned).
    #[inline]
    pub(crate) fn overran(&self, c: Word) {
        // Relaxed: statistics and a gauge; they publish nothing.
        self.overrun_total.fetch_add(c, Relaxed);
        self.overrun_held.fetch_add(c, Relaxed);
    }

    /// `c` units of a hold's overrun part left it (a shrink, or its call ended).
    #[inline]
    pub(crate) fn overrun_returned(&self, c: Word) {
        if c != 0 {
            // Relaxed: a gauge.
            self.overrun_held.fetch_sub(c, Relaxed);
        }
    }

    /// Counts the refund or overrun of a settlement: `used` units reported against a hold of
    /// `held` (the consumed units count in the sharded counter's lane).
    #[inline]
    pub(crate) fn settled(&self, held: Word, used: Word) {
        // Relaxed: statistics.
        if used < held {
            self.refunded_total.fetch_add(held - used, Relaxed);
        } else if used > held {
            self.overrun_total.fetch_add(used - held, Relaxed);
        }
    }
}
