//! The lease gate of a leased bulkhead (docs/design.md §16): the deadline until which its block
//! admits, and the bell that tells the lease manager about demand the block does not cover.
//!
//! The deadline is checked on every admission of a leased bulkhead (its admissions take the
//! out-of-line moded path, so an ordinary bulkhead pays nothing): past it the block admits
//! nothing, whatever the lease manager's thread is doing, so no process admits on a lease after
//! the moment Redis may have expired it (C42's invariant). Each admission the block turns away
//! (a refused try, a waiter queued, the deadline passed) counts in `shorts` and takes the
//! registered waker, if any, and wakes it: the lease manager syncs for more at once instead of
//! at its next beat.

use core::task::Waker;

use super::waker_slot::WakerSlot;
use crate::sync::{AtomicWord, Ordering::*, Word};

/// The deadline (ns on the bulkhead's clock) and the demand bell of a leased bulkhead.
#[derive(Debug)]
pub(crate) struct LeaseGate {
    /// Admissions are allowed while `now < until_ns`. `Word::MAX`: no deadline.
    until_ns: AtomicWord,
    /// Admissions the block turned away for want of permits (a running total).
    shorts: AtomicWord,
    /// Admissions the budget block turned away for want of units (a running total).
    budget_shorts: AtomicWord,
    /// The largest weight turned away since the lease manager last took it.
    short_weight: AtomicWord,
    /// The largest cost turned away since the lease manager last took it (a leased budget).
    short_cost: AtomicWord,
    /// The lease manager's waker (ticket 0).
    bell: WakerSlot,
}

impl LeaseGate {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        LeaseGate {
            until_ns: AtomicWord::new(Word::MAX),
            shorts: AtomicWord::new(0),
            budget_shorts: AtomicWord::new(0),
            short_weight: AtomicWord::new(0),
            short_cost: AtomicWord::new(0),
            bell: WakerSlot::new(),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        LeaseGate {
            until_ns: AtomicWord::new(Word::MAX),
            shorts: AtomicWord::new(0),
            budget_shorts: AtomicWord::new(0),
            short_weight: AtomicWord::new(0),
            short_cost: AtomicWord::new(0),
            bell: WakerSlot::new(),
        }
    }

    /// Whether the block admits at `now_ns`.
    #[inline]
    pub(crate) fn admits(&self, now_ns: u64) -> bool {
        // Acquire: pairs with `set_until`'s Release (a later deadline is published after the
        // block it guards, an earlier one before the block shrinks).
        now_ns < self.until_ns.load(Acquire) as u64
    }

    /// Sets the deadline (`u64::MAX`: none).
    pub(crate) fn set_until(&self, until_ns: u64) {
        self.until_ns.store(until_ns as Word, Release);
    }

    /// The deadline in force.
    pub(crate) fn until(&self) -> u64 {
        self.until_ns.load(Acquire) as u64
    }

    /// An admission of `weight` permits and `cost` units found the block short — the permits
    /// (`budget` false) or the budget's units (`budget` true): count it under its dimension
    /// (each dimension's lease reports its own demand) and ring the bell.
    pub(crate) fn short(&self, weight: Word, cost: Word, budget: bool) {
        if budget {
            self.budget_shorts.fetch_add(1, Relaxed);
            self.short_cost.fetch_max(cost, Relaxed);
        } else {
            self.shorts.fetch_add(1, Relaxed);
            self.short_weight.fetch_max(weight, Relaxed);
        }
        if let Some(w) = self.bell.take(0) {
            w.wake();
        }
    }

    /// Admissions the block turned away for want of permits so far.
    pub(crate) fn shorts(&self) -> u64 {
        self.shorts.load(Relaxed) as u64
    }

    /// Admissions the budget block turned away so far.
    pub(crate) fn budget_shorts(&self) -> u64 {
        self.budget_shorts.load(Relaxed) as u64
    }

    /// The largest weight turned away since the last call (0: none), reset.
    pub(crate) fn take_short_weight(&self) -> u64 {
        self.short_weight.swap(0, Relaxed) as u64
    }

    /// The largest cost turned away since the last call (0: none), reset.
    pub(crate) fn take_short_cost(&self) -> u64 {
        self.short_cost.swap(0, Relaxed) as u64
    }

    /// Registers the lease manager's waker, woken (once) at the next short admission.
    pub(crate) fn register(&self, waker: &Waker) {
        self.bell.register(0, waker);
    }
}
