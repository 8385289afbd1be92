//! Revisioned runtime limits (docs/design.md §4.6): [`Bulkhead::apply_limits`] installs a
//! [`LimitsSnapshot`] — validated whole first, then installed — under a revision that must
//! rise: a stale or equal one is refused with the revision in force (C33), so a delayed
//! control-plane update can never undo a newer one. A limit of 0 is the kill switch:
//! reversible, unlike [`close`](Bulkhead::close).

use core::fmt;

use crate::{
    config::ConfigError,
    front::{bulkhead::Bulkhead, class_ceilings::ClassLimits, class_table::ClassTableLimits},
    limits::MAX_REVISION,
    policy::state::Policies,
};

/// The limits one control-plane revision sets. A field left `None` keeps its current value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitsSnapshot {
    /// `1 ..= MAX_REVISION`, above the revision in force.
    pub revision: u64,
    /// The permit limit, `0 ..= MAX_PERMITS` (`MAX_CONCURRENT_WITH_BUDGET` with a budget); 0
    /// is the kill switch (nothing is admitted, queued waiters are rejected
    /// `concurrency_limit`, holders finish normally). Above `max_concurrent` it raises the
    /// ceiling too (the ring is sized by `max_queue`, not by the limit).
    pub limit: Option<u64>,
    /// The budget's ceiling, `0 ..= budget` (a bulkhead built with a budget only).
    pub budget: Option<u64>,
    /// The bound on live waiters, `0 ..= max_queue` (the one the bulkhead was built with: the
    /// ring is sized by it). Lowering it never evicts: waiters above it stay until they settle;
    /// 0 makes the bulkhead fail fast.
    pub max_queue: Option<u64>,
    /// The default queue timeout (`Duration::MAX`: none), for admissions from now on; queued
    /// waiters keep the deadline their host armed.
    pub queue_timeout: Option<core::time::Duration>,
    /// New queue-delay dispatch options (docs/design.md §4.10), only on a bulkhead built with
    /// queue-delay shedding (its dispatcher keeps the lists it needs); a target of zero turns
    /// shedding and LIFO off. The shedding state starts over.
    pub queue_delay: Option<crate::config::QueueDelay>,
}

impl LimitsSnapshot {
    /// A snapshot of `revision` that changes nothing yet.
    pub const fn new(revision: u64) -> Self {
        LimitsSnapshot {
            revision,
            limit: None,
            budget: None,
            max_queue: None,
            queue_timeout: None,
            queue_delay: None,
        }
    }

    /// With the queue-delay dispatch options `queue_delay`.
    pub const fn queue_delay(mut self, queue_delay: crate::config::QueueDelay) -> Self {
        self.queue_delay = Some(queue_delay);
        self
    }

    /// With the permit limit `limit` (0: the kill switch).
    pub const fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// With the budget ceiling `budget`.
    pub const fn budget(mut self, budget: u64) -> Self {
        self.budget = Some(budget);
        self
    }

    /// With the bound on live waiters `max_queue`.
    pub const fn max_queue(mut self, max_queue: u64) -> Self {
        self.max_queue = Some(max_queue);
        self
    }

    /// With the default queue timeout `timeout`.
    pub const fn queue_timeout(mut self, timeout: core::time::Duration) -> Self {
        self.queue_timeout = Some(timeout);
        self
    }

    /// The one rule of [`Bulkhead::check_limits`] (and of a registry's check for keys not
    /// created yet): the revision in range and above `current`; `limit` at most the largest
    /// ceiling (`MAX_CONCURRENT_WITH_BUDGET` with a budget, else `MAX_PERMITS`) and not on an
    /// adaptive limit; `budget` only with one, at most `max_budget`; `max_queue` at most
    /// `max_queue_ceiling`.
    pub(crate) fn check(
        &self,
        with_budget: bool,
        adaptive: bool,
        max_budget: Option<u64>,
        max_queue_ceiling: u64,
        current: u64,
    ) -> Result<(), LimitsError> {
        if self.revision == 0 || self.revision > MAX_REVISION {
            return Err(LimitsError::Revision(self.revision));
        }
        if self.revision <= current {
            return Err(LimitsError::Stale { current });
        }
        if let Some(l) = self.limit {
            let max = if with_budget {
                crate::limits::MAX_CONCURRENT_WITH_BUDGET
            } else {
                crate::limits::MAX_PERMITS
            };
            if l > max {
                return Err(LimitsError::Limit { max });
            }
            if adaptive {
                return Err(LimitsError::AdaptiveLimit);
            }
        }
        if let Some(b) = self.budget {
            if max_budget.is_none_or(|m| b > m) {
                return Err(LimitsError::Config(ConfigError::BudgetLimit));
            }
        }
        if self.max_queue.is_some_and(|q| q > max_queue_ceiling) {
            return Err(LimitsError::MaxQueue {
                max: max_queue_ceiling,
            });
        }
        if let Some(q) = &self.queue_delay {
            q.validate().map_err(LimitsError::Config)?;
        }
        Ok(())
    }
}

/// Why [`Bulkhead::apply_limits`] installed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitsError {
    /// The revision is not above the one in force (`current`): a stale or repeated update.
    Stale {
        /// The revision in force.
        current: u64,
    },
    /// The revision is 0 or above [`MAX_REVISION`].
    Revision(u64),
    /// A value out of range: [`ConfigError::BudgetLimit`] (`budget` above the ceiling, or
    /// without a budget).
    Config(ConfigError),
    /// `limit` is above the largest ceiling, `max`.
    Limit {
        /// `MAX_PERMITS`, or `MAX_CONCURRENT_WITH_BUDGET` on a bulkhead with a budget.
        max: u64,
    },
    /// `limit` was given for a bulkhead whose limit an adaptive policy moves.
    AdaptiveLimit,
    /// `max_queue` is above the one the bulkhead was built with, `max` (its ring is sized by
    /// it).
    MaxQueue {
        /// The bulkhead's construction-time `max_queue`.
        max: u64,
    },
    /// A class's new ceilings refused ([`ClassError`](crate::config::classes::ClassError):
    /// an unknown class, a ceiling below its floor or out of range, a budget ceiling without a
    /// budget).
    Class(crate::config::classes::ClassError),
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitsError::Class(e) => write!(f, "{e}; nothing was applied"),
            LimitsError::Stale { current } => write!(
                f,
                "revision must be above the revision in force ({current}); nothing was applied"
            ),
            LimitsError::Revision(r) => {
                write!(
                    f,
                    "revision must be an integer in 1..={MAX_REVISION}, not {r}"
                )
            }
            LimitsError::Limit { max } => write!(
                f,
                "limit must be an integer in 0..={max} (0: the kill switch; above max_concurrent raises the ceiling)"
            ),
            LimitsError::Config(e) => e.fmt(f),
            LimitsError::MaxQueue { max } => write!(
                f,
                "max_queue must be an integer in 0..={max} (the max_queue the bulkhead was built with)"
            ),
            LimitsError::AdaptiveLimit => f.write_str(
                "limit cannot be applied to a bulkhead with an adaptive limit (it moves the limit)",
            ),
        }
    }
}

impl core::error::Error for LimitsError {}

impl<const N: usize> Bulkhead<N> {
    /// The checks of [`apply_limits`](Self::apply_limits) without installing anything: `Ok`
    /// when `snapshot` would be installed now (a registry validates every key with it before
    /// changing any; a concurrent apply may still make it stale).
    ///
    /// # Errors
    /// As [`apply_limits`](Self::apply_limits).
    pub fn check_limits(&self, snapshot: &LimitsSnapshot) -> Result<(), LimitsError> {
        self.check_partition(snapshot.limit, snapshot.budget)
            .map_err(LimitsError::Config)?;
        self.check_limits_unpartitioned(snapshot)
    }

    /// [`check_limits`](Self::check_limits) without the classes' partition (an install that
    /// changes the reserve checks it against the new one).
    fn check_limits_unpartitioned(&self, snapshot: &LimitsSnapshot) -> Result<(), LimitsError> {
        if snapshot.queue_delay.is_some()
            && (!self.engine.is_classed()
                || !self.engine.has_clock()
                || core::mem::size_of::<crate::sync::Word>() < 8)
        {
            // Its dispatcher has no lists to shed from (docs/design.md §4.10): only a bulkhead
            // built with queue-delay shedding or classes.
            return Err(LimitsError::Config(ConfigError::Unsupported(
                crate::config::OptionId::QueueDelayTarget,
            )));
        }
        snapshot.check(
            self.has_budget(),
            self.policies().and_then(Policies::adaptive).is_some(),
            self.has_budget().then(|| self.engine.max_budget()),
            self.engine.max_queue_ceiling(),
            self.revision(),
        )
    }

    /// Installs `snapshot`: validated whole first (nothing changes on an error), then each
    /// dimension it sets — the ones that shrink first, then the ones that grow, so no admission
    /// ever sees a state more permissive than both the old and the new limits — and then its
    /// revision, which [`revision`](Self::revision) and `stats().revision` report from then on.
    /// Never revokes: a shrink lets `available` go negative until releases pay it back and
    /// rejects queued waiters that no longer fit; growth grants waiters — by this call, or by
    /// the dispatcher pass another thread is running at that moment. Once it returns, what is
    /// reported is what is enforced (C33). Concurrent calls are serialized (a later caller
    /// waits for the install in progress, a few non-blocking steps; a stale one is refused at
    /// once; admissions never wait); the highest revision wins whatever the order of arrival.
    /// Do not call it from a waker or, without `std`, from an interrupt that may preempt
    /// another `apply_limits` (it would wait for an install that cannot finish). A waker that
    /// panics during the install unwinds out of this call with the revision unchanged.
    ///
    /// # Errors
    /// [`LimitsError::Stale`] with the revision in force when `snapshot.revision` is not above
    /// it; [`LimitsError::Revision`], [`LimitsError::Config`] or [`LimitsError::AdaptiveLimit`]
    /// for a value out of range; `LimitsError::Config(ConfigError::Leased)` on a leased
    /// bulkhead (a fleet bulkhead's limits are set in Redis).
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, LimitsError, LimitsSnapshot, Reason};
    /// let bh = Bulkhead::new(Config { max_concurrent: 8, ..Config::default() })?;
    /// bh.apply_limits(&LimitsSnapshot::new(5).limit(4))?;
    /// bh.apply_limits(&LimitsSnapshot::new(6).limit(0))?; // the kill switch
    /// assert_eq!(bh.try_acquire(1).unwrap_err().reason(), Some(Reason::ConcurrencyLimit));
    /// // A delayed, older update is refused; the newest stays in force.
    /// let stale = bh.apply_limits(&LimitsSnapshot::new(5).limit(8));
    /// assert_eq!(stale, Err(LimitsError::Stale { current: 6 }));
    /// bh.apply_limits(&LimitsSnapshot::new(7).limit(8))?; // reversible
    /// assert!(bh.try_acquire(1).is_ok());
    /// assert_eq!((bh.revision(), bh.stats().limit), (7, 8));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply_limits(&self, snapshot: &LimitsSnapshot) -> Result<(), LimitsError> {
        self.apply_limits_with_classes(snapshot, &[])
    }

    /// [`apply_limits`](Self::apply_limits) that also installs new class ceilings
    /// (docs/design.md §4.8) under the same revision and install right: validated whole with
    /// the snapshot first (nothing changes on an error), then the lowered ceilings and the
    /// shrinking dimensions, then the growing dimensions and the raised ceilings, then one
    /// pass that grants what the raises let go — so no admission meanwhile sees a state more
    /// permissive than the new one — and then the revision.
    ///
    /// # Errors
    /// As [`apply_limits`](Self::apply_limits), plus [`LimitsError::Class`] for a class entry
    /// [`set_class_ceiling`](Self::set_class_ceiling) would refuse (and for any entry on a
    /// bulkhead without classes).
    pub fn apply_limits_with_classes(
        &self,
        snapshot: &LimitsSnapshot,
        classes: &[ClassLimits],
    ) -> Result<(), LimitsError> {
        self.apply_limits_with_table(
            snapshot,
            &ClassTableLimits {
                classes,
                ..ClassTableLimits::NONE
            },
        )
    }

    /// [`apply_limits`](Self::apply_limits) that also installs the run-time part of a class
    /// table (docs/design.md §4.8, §4.9) under the same revision and install right: class
    /// ceilings, the priority reserve and the rates ([`ClassTableLimits`]). Validated whole
    /// with the snapshot first (the reserve against the limits this call installs; nothing
    /// changes on an error), and the partition again once the install right is held; then,
    /// while this thread holds the dispatcher's run flag (no pass decides in between: every
    /// decision sees the old table or the new one whole), the shrinks, the growth, the class
    /// table's part; then the pass that grants what the new table lets go, then the revision.
    ///
    /// # Errors
    /// As [`apply_limits_with_classes`](Self::apply_limits_with_classes), plus
    /// [`LimitsError::Class`] for a reserve or rates the table would refuse
    /// ([`ClassError::Floors`](crate::config::classes::ClassError::Floors),
    /// [`NoBudget`](crate::config::classes::ClassError::NoBudget),
    /// [`Rate`](crate::config::classes::ClassError::Rate), rates without a clock, or either on a
    /// bulkhead without classes).
    pub fn apply_limits_with_table(
        &self,
        snapshot: &LimitsSnapshot,
        table: &ClassTableLimits<'_>,
    ) -> Result<(), LimitsError> {
        if self.engine.is_leased() {
            return Err(LimitsError::Config(ConfigError::Leased));
        }
        let s = snapshot;
        let classes = table.classes;
        match table.reserve {
            // The partition against the new reserve (checked in `check_table`).
            Some(_) => self.check_limits_unpartitioned(s)?,
            None => self.check_limits(s)?,
        }
        self.check_table(s.limit, s.budget, table)
            .map_err(LimitsError::Class)?;
        self.engine
            .begin_apply(s.revision)
            .map_err(|current| LimitsError::Stale { current })?;
        // If a waker run by a resize's dispatcher pass panics, the install right is given back
        // (the revision stays the old one) instead of blocking every later apply.
        struct Abandon<'a, const N: usize>(&'a crate::engine::Engine<N>);
        impl<const N: usize> Drop for Abandon<'_, N> {
            fn drop(&mut self) {
                self.0.abandon_apply();
            }
        }
        let guard = Abandon(&self.engine);
        // Checked again under the install right: a concurrent install (or `set_limit`) may
        // have changed the limits or the reserve the checks above read.
        if self.class_count() != 0 {
            let reserve = table.reserve.map(|r| [r.permits, r.budget]);
            let budget = s.budget.filter(|_| self.has_budget());
            self.check_partition_with(s.limit, budget, reserve)
                .map_err(|e| LimitsError::Config(crate::config::ConfigError::Class(e)))?;
            if reserve.is_some() {
                self.check_table(s.limit, s.budget, table)
                    .map_err(LimitsError::Class)?;
            }
        }
        // On a classed bulkhead no pass decides during the install: this thread holds the
        // dispatcher's run flag (the passes the steps below ask for are left pending and run
        // when it is given back), so every decision sees the old table or the new one whole.
        #[cfg(feature = "alloc")]
        let hold = self.engine.hold_dispatch();
        let (limit, budget) = (self.engine.limit(), self.engine.budget_limit());
        // Shrinks first, then growth (validated above: these cannot fail) — for the paths that
        // decide without a pass (a plain bulkhead's fast path, the one-CAS floor take).
        for grow in [false, true] {
            if !grow {
                self.store_class_ceilings(classes, false);
            }
            if let Some(l) = s.limit.filter(|&l| (l > limit) == grow && l != limit) {
                if grow {
                    // A ceiling above `max_concurrent` first (it only widens the valid weights).
                    self.engine.raise_ceiling(l);
                }
                let _ = self.engine.resize_limit(l);
            }
            if let Some(b) = s.budget.filter(|&b| (b > budget) == grow && b != budget) {
                let _ = self.engine.apply_budget(b);
            }
        }
        if !table.is_empty() {
            self.store_class_ceilings(classes, true);
            self.install_table(table);
            // The raised ceilings', the looser reserve's and the rates' waiters.
            self.rate_tick();
        }
        // The pass the steps above left pending runs now, on the new table.
        #[cfg(feature = "alloc")]
        drop(hold);
        if let Some(q) = s.max_queue {
            self.engine.set_max_queue(q);
        }
        if let Some(t) = s.queue_timeout {
            self.set_queue_timeout(t);
        }
        if let Some(q) = s.queue_delay {
            self.set_queue_delay(q);
        }
        core::mem::forget(guard);
        self.engine.end_apply(s.revision);
        self.emit_reconfigure();
        Ok(())
    }

    /// Installs new queue-delay options (validated; a classed bulkhead) under the dispatcher's
    /// run flag: no pass decides with half of them. The shedding state starts over.
    fn set_queue_delay(&self, q: crate::config::QueueDelay) {
        #[cfg(feature = "alloc")]
        self.engine.install_queue_delay(q);
        #[cfg(not(feature = "alloc"))]
        let _ = q;
    }

    /// The revision of the limits in force: 0 until the first
    /// [`apply_limits`](Self::apply_limits), then the highest one applied.
    pub fn revision(&self) -> u64 {
        self.engine.revision()
    }
}
