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
    /// # Errors
    /// [`ConfigError::Limit`] above `MAX_PERMITS`, or below a classed bulkhead's class floors.
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
        if held > crate::config::MAX_PERMITS {
            return Err(ConfigError::Limit);
        }
        self.check_partition(Some(held), None)?;
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
    /// fleet limit) — up or down, `1 ..= MAX_PERMITS`; queued waiters above a lower ceiling are
    /// rejected `concurrency_limit`, and a request above it is an invalid argument.
    ///
    /// # Errors
    /// [`ConfigError::Limit`] outside `1 ..= MAX_PERMITS`, or when the bulkhead is not leased.
    pub fn set_lease_ceiling(&self, ceiling: u64) -> Result<(), ConfigError> {
        if !self.engine.is_leased() || ceiling == 0 || ceiling > crate::config::MAX_PERMITS {
            return Err(ConfigError::Limit);
        }
        self.engine.set_lease_ceiling(ceiling);
        Ok(())
    }

    /// Whether the limit is a leased block ([`set_lease`](Self::set_lease) was called).
    pub fn is_leased(&self) -> bool {
        self.engine.is_leased()
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

    /// How many admissions the leased block has turned away so far (a running total: the lease
    /// manager reports the change as demand).
    pub fn lease_shorts(&self) -> u64 {
        self.engine.lease.shorts()
    }

    /// The largest weight the leased block turned away since the last call (0: none), reset:
    /// the lease manager asks for at least that much room.
    pub fn take_lease_short_weight(&self) -> u64 {
        self.engine.lease.take_short_weight()
    }
}
