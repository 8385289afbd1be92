//! A fleet bulkhead's stats (docs/design.md §16.7): the local core's schema, plus the lease.

use core::time::Duration;

use hullguard_core::Stats;

use crate::lease::{LeaseCounters, LeaseState};

/// The lease as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStats {
    /// The pool.
    pub pool: String,
    /// This process's holder id.
    pub holder: String,
    /// The lease's state.
    pub state: LeaseState,
    /// The lease's generation (its fencing token; 0 without one).
    pub generation: u64,
    /// The block Redis counts for this process.
    pub held: u64,
    /// This process's share: the block it converges to (its fair share under contention).
    pub share: u64,
    /// The block the local core admits on now (0 without a valid lease, or the local share
    /// while Redis is unreachable in that mode).
    pub local_limit: u64,
    /// The fleet limit (0 before the first reply).
    pub fleet_limit: u64,
    /// Permits held across the fleet, at the last reply.
    pub fleet_used: u64,
    /// Processes holding leases in the pool, at the last reply.
    pub holders: u64,
    /// The pool state's epoch (server µs at its creation): it changes when Redis loses its state.
    pub epoch: u64,
    /// The fleet limit's revision.
    pub rev: u64,
    /// Whether the pool is learning (after a state loss: blocks do not grow).
    pub learning: bool,
    /// Time left on the lease (`None` without one).
    pub lease_left: Option<Duration>,
    /// Whether Redis failed to answer since the last successful sync.
    pub unreachable: bool,
    /// The last error, until a sync succeeds.
    pub last_error: Option<String>,
    /// Permits in flight here that no valid lease covers (after a loss or an expiry: they run
    /// to completion; the fleet may be over its limit by at most these).
    pub unleased_in_flight: u64,
    /// The counters.
    pub counters: LeaseCounters,
}

/// A fleet bulkhead's stats.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetStats {
    /// The local core's stats (its `limit` is the block it admits on).
    pub stats: Stats,
    /// The lease of the permits.
    pub lease: LeaseStats,
    /// The lease of the fleet budget's units (`None` without a budget): the same fields, in
    /// units (`held`, `share`, `local_limit` are units of the budget block; `fleet_limit` is
    /// the fleet budget).
    pub budget_lease: Option<LeaseStats>,
}
