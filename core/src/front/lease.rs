//! Leased mode (docs/design.md §16): the limit is a block of permits leased from elsewhere — a
//! fleet bulkhead's share of a limit held in Redis (`hullguard-fleet`). The lease manager sets
//! the block with [`Bulkhead::set_lease`] and its deadline with
//! [`Bulkhead::set_lease_until`]; admissions stay local and lock-free, check the deadline (one
//! clock read: a leased bulkhead's admissions take the out-of-line path) and ring the lease
//! manager's bell ([`Bulkhead::register_lease_demand`]) when the block is short. Unlike the kill
//! switch, an empty block keeps its waiters queued (the block grows back at the next grant) and
//! refuses a try with the bound `fleet_lease`.

use crate::{config::ConfigError, front::bulkhead::Bulkhead};

impl<const N: usize> Bulkhead<N> {
    /// Sets the leased block to `held` permits, `0 ..= MAX_PERMITS`, and switches the bulkhead
    /// to leased mode for good on the first call. Never blocks, never revokes: growing grants
    /// the queued waiters that now fit; shrinking lets `available` go negative until releases
    /// pay it back. A block above `max_concurrent` raises the ceiling (the largest weight that
    /// may wait). In leased mode a limit of 0 is an empty block, not the kill switch: queued
    /// waiters stay until their deadline, and a refused try names the bound `fleet_lease`.
    /// Emits `reconfigure` when the block changes. Thread-safe; meant for one lease manager.
    ///
    /// Not for a bulkhead with an adaptive limit (both would move the limit): the fleet layer
    /// refuses that option.
    ///
    /// On a classed bulkhead a block below the class floors is accepted: the floors are then
    /// taken first-come up to the block (the permit word bounds the whole), and protected
    /// again once the block covers them.
    ///
    /// # Errors
    /// [`ConfigError::Limit`] above [`max_lease`](Self::max_lease) (`MAX_PERMITS`, or
    /// `MAX_CONCURRENT_WITH_BUDGET` with a budget).
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{AcquireError, Bound, Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 4, max_queue: 4, ..Config::default() })?;
    /// bh.set_lease(0)?; // no block yet
    /// let Err(AcquireError::Rejected(r)) = bh.try_acquire(1) else { panic!() };
    /// assert_eq!(r.detail().bound, Bound::FleetLease);
    /// bh.set_lease(2)?; // a block of 2 was granted
    /// let _held = bh.try_acquire(2)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_lease(&self, held: u64) -> Result<(), ConfigError> {
        if held > self.max_lease() {
            return Err(ConfigError::Limit);
        }
        // No partition check: a block smaller than the class floors is a lease's passing
        // state, not a configuration error — the permit word still bounds the whole at the
        // block, and the floors are protected again once it grows back.
        self.engine.set_leased();
        self.engine.raise_ceiling(held);
        let before = self.engine.limit();
        self.engine.resize_limit(held)?;
        if before != held {
            self.emit_reconfigure();
        }
        Ok(())
    }

    /// Sets a leased bulkhead's ceiling — the largest weight that may be admitted or wait (the
    /// fleet limit) — up or down, `1 ..= max_lease()`; queued waiters above a lower ceiling are
    /// rejected `concurrency_limit`, and a request above it is an invalid argument.
    ///
    /// # Errors
    /// [`ConfigError::Limit`] outside `1 ..= max_lease()`, or when the bulkhead is not leased.
    pub fn set_lease_ceiling(&self, ceiling: u64) -> Result<(), ConfigError> {
        if !self.engine.is_leased() || ceiling == 0 || ceiling > self.max_lease() {
            return Err(ConfigError::Limit);
        }
        self.engine.set_lease_ceiling(ceiling);
        Ok(())
    }

    /// Whether the limit is a leased block ([`set_lease`](Self::set_lease) was called).
    pub fn is_leased(&self) -> bool {
        self.engine.is_leased()
    }

    /// The largest block (and ceiling) this bulkhead's permit word holds: `MAX_PERMITS`, or
    /// `MAX_CONCURRENT_WITH_BUDGET` with a budget (the permits then share the word with the
    /// units).
    pub fn max_lease(&self) -> u64 {
        if self.engine.has_budget() {
            crate::MAX_CONCURRENT_WITH_BUDGET
        } else {
            crate::config::MAX_PERMITS
        }
    }

    /// Sets a leased bulkhead's budget block to `units`, `0 ..= budget` (the budget it was
    /// built with): the second leased dimension (a fleet budget, docs/design.md §16.10). As
    /// [`set_lease`](Self::set_lease) for permits: never blocks, never revokes (shrinking
    /// lets the free units go negative until releases pay them back), grants the queued
    /// waiters that now fit, and — unlike [`set_budget`](Self::set_budget) — keeps waiting a
    /// waiter whose cost is above the block but within the budget ceiling
    /// ([`set_lease_budget_ceiling`](Self::set_lease_budget_ceiling)). A block below the
    /// classes' budget floors is accepted. A cost refused while the block is 0 names the bound
    /// `fleet_lease`. Emits `reconfigure` when the block changes. Call
    /// [`set_lease`](Self::set_lease) first (it switches to leased mode).
    ///
    /// # Errors
    /// [`ConfigError::BudgetLimit`] without a budget, above the budget it was built with, or
    /// before leased mode.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Decision, Request};
    /// let bh = Bulkhead::new(Config { budget: Some(10_000), ..Config::default() })?;
    /// bh.set_lease(4)?;
    /// bh.set_lease_budget_ceiling(10_000)?; // the fleet budget
    /// bh.set_lease_budget(500)?; // this process's block of it
    /// assert!(matches!(bh.admit(&Request::new(1).cost(400), None), Decision::Granted(_)));
    /// let big = Request::new(1).cost(800);
    /// assert!(matches!(bh.admit(&big.no_wait(), None), Decision::Rejected(_)));
    /// assert!(matches!(bh.admit(&big, None), Decision::Queued(_))); // the block grows back
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_lease_budget(&self, units: u64) -> Result<(), ConfigError> {
        if !self.engine.is_leased() {
            return Err(ConfigError::BudgetLimit);
        }
        let before = self.engine.budget_limit();
        self.engine.apply_budget(units)?;
        if before != units {
            self.emit_reconfigure();
        }
        Ok(())
    }

    /// A leased bulkhead's budget ceiling in force (`u64::MAX` before one is set).
    pub fn lease_budget_ceiling(&self) -> u64 {
        let c = self.engine.lease_budget_ceiling();
        if c == crate::sync::Word::MAX {
            u64::MAX
        } else {
            c as u64
        }
    }

    /// Sets a leased bulkhead's budget ceiling — the largest cost that may be admitted or wait
    /// (the fleet budget) — up or down, `1 ..= budget`; queued waiters above a lower ceiling
    /// are rejected `budget_limit`.
    ///
    /// # Errors
    /// [`ConfigError::BudgetLimit`] outside `1 ..= budget`, without a budget, or when the
    /// bulkhead is not leased.
    pub fn set_lease_budget_ceiling(&self, units: u64) -> Result<(), ConfigError> {
        if !self.engine.is_leased()
            || !self.engine.has_budget()
            || units == 0
            || units > self.engine.max_budget()
        {
            return Err(ConfigError::BudgetLimit);
        }
        self.engine.set_lease_budget_ceiling(units);
        Ok(())
    }
}

#[cfg(all(feature = "std", target_has_atomic = "64"))]
impl<const N: usize> Bulkhead<N> {
    /// Sets the time until which the leased block admits: `until_ns` on the bulkhead's clock
    /// (its [`now_ns`](Self::now_ns) scale; `u64::MAX`: no deadline, the default). From that
    /// moment no admission is granted at once — a try is refused `concurrency_limit`, a request
    /// that may wait queues — until a later deadline is set, whatever the lease manager's own
    /// thread is doing. (A release may still hand its permit to a queued waiter: in flight never
    /// exceeds the block.) Set a later deadline before growing the block, an earlier one after
    /// shrinking it. Only meaningful in leased mode.
    pub fn set_lease_until(&self, until_ns: u64) {
        self.engine.set_lease_until(until_ns);
    }

    /// The lease's deadline in force (`u64::MAX`: none).
    pub fn lease_until(&self) -> u64 {
        self.engine.lease.until()
    }

    /// Registers the lease manager's waker: woken once, by the next admission the block turns
    /// away (a refused try, a waiter queued, or the deadline passed). Register again after each
    /// wake (the `AtomicWaker` pattern); a wake is never lost between two registrations.
    pub fn register_lease_demand(&self, waker: &core::task::Waker) {
        self.engine.lease.register(waker);
    }

    /// How many admissions the leased block has turned away for want of permits so far (a
    /// running total: the lease manager reports the change as demand).
    pub fn lease_shorts(&self) -> u64 {
        self.engine.lease.shorts()
    }

    /// How many admissions the leased budget block has turned away for want of units so far
    /// (a running total: the budget's lease reports the change as its demand).
    pub fn lease_budget_shorts(&self) -> u64 {
        self.engine.lease.budget_shorts()
    }

    /// The largest weight the leased block turned away since the last call (0: none), reset:
    /// the lease manager asks for at least that much room.
    pub fn take_lease_short_weight(&self) -> u64 {
        self.engine.lease.take_short_weight()
    }

    /// The largest cost the leased budget block turned away since the last call (0: none),
    /// reset: the lease manager asks for at least that much room.
    pub fn take_lease_short_cost(&self) -> u64 {
        self.engine.lease.take_short_cost()
    }
}
