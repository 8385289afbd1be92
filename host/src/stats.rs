//! [`HostStats`]: the host's figures in the stats schema every layer uses, plus the lease
//! ledger's own (docs/design.md §14.4).

use std::{path::PathBuf, sync::atomic::Ordering};

use hullguard_core::{BudgetStats, RejectedByReason, Stats, WaitHistogram};

use crate::{
    attachment::Attachment,
    layout::{self, LeaseState, h, s},
    options::HostOptions,
};

/// A point-in-time view of a host bulkhead from one process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStats {
    /// The host's figures in the local bulkhead's schema: `active` = permits held by every
    /// process, `queued` = waiters of every process, `limit`, `available`, `admitted_total`,
    /// `rejected_by_reason`, the queue-wait figures (host-wide counters), `orphaned_total`
    /// (calls in flight when their lease was reclaimed or expired), `budget` (`in_use`,
    /// `available`) with a budget.
    pub stats: Stats,
    /// Calls in flight on the host.
    pub in_flight: u64,
    /// Processes attached now (live slots).
    pub attached: u64,
    /// The segment's slot count.
    pub slots: u64,
    /// Slots reclaimed from dead processes.
    pub reclaimed_dead_total: u64,
    /// Slots expired (stopped or hung past the lease TTL).
    pub reclaimed_expired_total: u64,
    /// Permits those reclaims and expiries returned.
    pub reclaimed_permits_total: u64,
    /// Releases refused `stale_lease`.
    pub stale_releases_total: u64,
    /// Releases refused `foreign_lease`.
    pub foreign_releases_total: u64,
    /// This process's calls in flight.
    pub local_in_flight: u64,
    /// This process's permits held.
    pub local_active: u64,
    /// This process's waiters.
    pub local_queued: u64,
    /// This process's slot.
    pub slot: u64,
    /// The segment file.
    pub path: PathBuf,
}

impl HostStats {
    pub(crate) fn read(a: &Attachment, options: &HostOptions) -> HostStats {
        let seg = a.seg();
        let c = seg.config();
        let scan = seg.scan();
        let mut attached = 0;
        for i in 0..seg.hwm() {
            if matches!(seg.lease_of(i), Ok((LeaseState::Active, _))) {
                attached += 1;
            }
        }
        let mut rejected = RejectedByReason::default();
        for (i, r) in rejected.0.iter_mut().enumerate() {
            *r = a.counter(h::REJECTED + i.min(layout::REASON_WORDS - 1));
        }
        let (local_in_flight, local_active) = a.own_held();
        let local_queued = seg.slot_word(a.slot, s::QUEUED).load(Ordering::Relaxed);
        let mut stats = Stats {
            active: scan.permits,
            queued: scan.queued,
            limit: c.max_concurrent,
            max_concurrent: c.max_concurrent,
            available: c.max_concurrent as i64 - scan.permits as i64,
            admitted_total: seg.admitted_total(),
            rejected_by_reason: rejected,
            orphaned_total: a.counter(h::ORPHANED),
            queue_wait_count: a.counter(h::QUEUE_WAIT_COUNT),
            queue_wait_sum_ns: a.counter(h::QUEUE_WAIT_SUM_NS),
            queue_wait_max_ns: a.counter(h::QUEUE_WAIT_MAX_NS),
            queue_wait_histogram: WaitHistogram(core::array::from_fn(|i| {
                a.counter(h::QUEUE_WAIT_HISTOGRAM + i)
            })),
            ..Stats::default()
        };
        if c.budget > 0 {
            stats.budget = Some(BudgetStats {
                limit: c.budget,
                max_budget: c.budget,
                in_use: scan.cost,
                available: c.budget as i64 - scan.cost as i64,
                ..BudgetStats::default()
            });
        }
        let _ = options;
        HostStats {
            stats,
            in_flight: scan.calls,
            attached,
            slots: seg.n_slots() as u64,
            reclaimed_dead_total: a.counter(h::RECLAIMED_DEAD),
            reclaimed_expired_total: a.counter(h::RECLAIMED_EXPIRED),
            reclaimed_permits_total: a.counter(h::RECLAIMED_PERMITS),
            stale_releases_total: a.counter(h::STALE_RELEASES),
            foreign_releases_total: a.counter(h::FOREIGN_RELEASES),
            local_in_flight,
            local_active,
            local_queued,
            slot: a.slot as u64,
            path: a.path.clone(),
        }
    }
}
