//! A class table's run-time part (docs/design.md §4.8, §4.9): what
//! [`Bulkhead::apply_limits_with_table`](crate::Bulkhead::apply_limits_with_table) installs
//! beside a [`LimitsSnapshot`](crate::LimitsSnapshot) under one revision — class ceilings, the
//! priority reserve and the rates — with its checks and its install (under the dispatcher's
//! run flag, so no pass sees part of it).
//!
//! Floors, priorities, lending and shedding stay as the bulkhead was built: they define the
//! partition every limit is validated against.

use crate::{
    config::classes::{ClassError, PriorityReserve, Rates},
    front::{bulkhead::Bulkhead, class_ceilings::ClassLimits},
};

/// The class table's run-time part, installed with a revision by
/// [`Bulkhead::apply_limits_with_table`]: `None` (and an empty `classes`) keeps what is in
/// force.
///
/// # Examples
/// ```
/// use hullguard_core::{
///     Bulkhead, ClassTableLimits, ClockSource, Config, LimitsSnapshot,
///     config::{ClassSpec, ClassTable, PriorityReserve, Rate, Rates},
/// };
/// use std::time::Duration;
/// let classes = [ClassSpec { priority: 10, ..ClassSpec::DEFAULT }, ClassSpec::DEFAULT];
/// let bh = Bulkhead::with_classes(
///     Config { max_concurrent: 8, ..Config::default() },
///     &ClassTable::new(&classes),
///     ClockSource::default_for_host(),
/// )?;
/// // A control plane's update: a reserve of 2 for priority ≥ 5 and 600 requests a minute.
/// let per_minute = Rate { amount: 600, per: Duration::from_secs(60), burst: 20 };
/// bh.apply_limits_with_table(
///     &LimitsSnapshot::new(1),
///     &ClassTableLimits {
///         reserve: Some(PriorityReserve { permits: 2, budget: 0, min_priority: 5 }),
///         rates: Some(Rates { requests: Some(per_minute), units: None }),
///         ..ClassTableLimits::NONE
///     },
/// )?;
/// assert_eq!(bh.priority_reserve(), Some(PriorityReserve { permits: 2, budget: 0, min_priority: 5 }));
/// assert_eq!(bh.rates().and_then(|r| r.requests).map(|r| r.burst), Some(20));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassTableLimits<'a> {
    /// New ceilings for some classes.
    pub classes: &'a [ClassLimits],
    /// A new priority reserve: per dimension `Σ floors + reserve ≤ limit` under the limits
    /// the same call installs (a limit of 0, the kill switch, excepted); a budget reserve
    /// needs a budget.
    pub reserve: Option<PriorityReserve>,
    /// New rates, replacing both (`Rates::default()` removes every rate): checked as the
    /// table's ([`Rates::validate`]) and needing a clock. A rate that stays keeps its
    /// theoretical arrival time; a new one starts with its whole burst.
    pub rates: Option<Rates>,
}

impl ClassTableLimits<'_> {
    /// Nothing changes.
    pub const NONE: ClassTableLimits<'static> = ClassTableLimits {
        classes: &[],
        reserve: None,
        rates: None,
    };

    /// Whether nothing changes.
    pub const fn is_empty(&self) -> bool {
        self.classes.is_empty() && self.reserve.is_none() && self.rates.is_none()
    }
}

impl<const N: usize> Bulkhead<N> {
    /// The priority reserve in force on a classed bulkhead (`None` without classes).
    pub fn priority_reserve(&self) -> Option<PriorityReserve> {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            let (permits, budget, min_priority) = book.reserve_now();
            return Some(PriorityReserve {
                permits: permits as u64,
                budget: budget as u64,
                min_priority,
            });
        }
        None
    }

    /// The rates in force on a classed bulkhead, as GCRA settings (`None` without classes).
    /// A rate reads back as `amount` 1 per its emission interval with the burst its tolerance
    /// allows (`per / amount` and `burst` of the rate it was given, in lowest terms).
    pub fn rates(&self) -> Option<Rates> {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            let rate = |(t, tau): (u64, u64)| {
                (t != 0).then(|| crate::config::classes::Rate {
                    amount: 1,
                    per: core::time::Duration::from_nanos(t),
                    burst: tau / t,
                })
            };
            let [requests, units] = book.rate_params_now();
            return Some(Rates {
                requests: rate(requests),
                units: rate(units),
            });
        }
        None
    }

    /// The checks of `table` against the limits the same call installs (`limit`, `budget`:
    /// `None` keeps the one in force): every class entry as
    /// [`set_class_ceiling`](Self::set_class_ceiling) checks it, the reserve's partition and
    /// budget, the rates' ranges, budget and clock.
    pub(crate) fn check_table(
        &self,
        limit: Option<u64>,
        budget: Option<u64>,
        table: &ClassTableLimits<'_>,
    ) -> Result<(), ClassError> {
        for c in table.classes {
            self.check_class_ceiling(c.class, c.ceiling, c.budget_ceiling)?;
        }
        if table.reserve.is_none() && table.rates.is_none() {
            return Ok(());
        }
        if self.class_count() == 0 {
            return Err(ClassError::Unknown { class: 0, count: 0 });
        }
        if let Some(r) = table.reserve {
            if r.budget != 0 && !self.has_budget() {
                return Err(ClassError::NoBudget { class: None });
            }
            let limits = [
                limit.unwrap_or(self.engine.limit() as u64),
                budget.unwrap_or(self.engine.budget_limit() as u64),
            ];
            self.check_partition_with(
                Some(limits[0]),
                Some(limits[1]).filter(|_| self.has_budget()),
                Some([r.permits, r.budget]),
            )?;
        }
        if let Some(rates) = &table.rates {
            rates.validate(self.has_budget())?;
            if rates.any() && !self.engine.has_clock() {
                return Err(ClassError::Unsupported {
                    option: "rates without a clock",
                });
            }
        }
        Ok(())
    }

    /// Installs `table`'s reserve and rates (checked; the caller holds the dispatcher's run
    /// flag, so no pass sees one without the other).
    pub(crate) fn install_table(&self, table: &ClassTableLimits<'_>) {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            if let Some(r) = table.reserve {
                use crate::sync::Word;
                book.set_reserve(r.permits as Word, r.budget as Word, r.min_priority);
            }
            if let Some(rates) = &table.rates {
                self.engine
                    .install_rate_params(crate::engine::classes::rate_params_of(rates));
            }
        }
        let _ = table;
    }
}
