//! Admission classes (docs/design.md §4.8): the table a classed bulkhead is built with, and its
//! validation.
//!
//! A class is an index `0 .. classes.len()` into the table (the bindings map their names onto
//! indices). Per class and per dimension (permits, budget units) a **floor** (units protected
//! for the class: nobody else ever takes them) and a **ceiling** (the most the class may hold);
//! the bulkhead's limit less every floor and the priority reserve is the **shared** remainder,
//! borrowable by any class up to its ceiling; the **reserve** (the last units of each
//! dimension) only for classes of priority `≥ min_priority`. So per dimension
//! `limit = Σ floors + reserve + shared`, a partition: floor > reserve > shared.

use core::fmt;

use crate::config::Config;

/// The most classes one bulkhead may declare (a dispatcher bit mask of one `u64`).
pub const MAX_CLASSES: usize = 64;

/// One admission class: its priority and its floor and ceiling on each dimension.
///
/// # Examples
/// ```
/// use hullguard_core::config::ClassSpec;
/// let interactive = ClassSpec { priority: 10, floor: 4, ..ClassSpec::DEFAULT };
/// assert_eq!((interactive.ceiling, interactive.budget_floor), (None, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSpec {
    /// Higher is served first for the shared units (strict priority; FIFO across classes of one priority).
    pub priority: u8,
    /// Permits protected for this class: `0 ..= ceiling`.
    pub floor: u64,
    /// The most permits this class may hold at once, `floor ..= max_concurrent`; `None`: no
    /// ceiling of its own (the limit).
    pub ceiling: Option<u64>,
    /// Budget units protected for this class (0 without a budget).
    pub budget_floor: u64,
    /// The most budget units this class may hold, `budget_floor ..= budget`; `None`: the
    /// budget.
    pub budget_ceiling: Option<u64>,
    /// The class's own ceilings in observe (shadow) mode (docs/design.md §4.8): a request past
    /// an observed ceiling is counted (`ClassStats::observed`; `observed_by_reason` when it is
    /// let through) and decided by everything else — floors, the shared units, the reserve, the
    /// limit and the budget stay enforced (C32). How a registry key under a global cap observes
    /// its own limit. `Budget` and `All` need a budget. `Off` by default.
    pub observe: crate::observe::Observe,
}

impl ClassSpec {
    /// Priority 0, no floor, no ceiling of its own.
    pub const DEFAULT: ClassSpec = ClassSpec {
        priority: 0,
        floor: 0,
        ceiling: None,
        budget_floor: 0,
        budget_ceiling: None,
        observe: crate::observe::Observe::Off,
    };
}

impl Default for ClassSpec {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The priority reserve: the last `permits` permits and `budget` units of each dimension, only
/// for classes of priority `≥ min_priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PriorityReserve {
    /// Permits reserved (0: none).
    pub permits: u64,
    /// Budget units reserved (0: none).
    pub budget: u64,
    /// The lowest priority that may take the reserve.
    pub min_priority: u8,
}

/// One rate limit (GCRA, the generic cell rate algorithm of ATM networks, as in
/// `redis-cell`/`throttled`): `amount` units per `per`, with up to `burst` units at once. Its
/// emission interval is `T = per / amount` (in ns, at least 1) and its tolerance `burst · T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Units per `per`, `1 ..`.
    pub amount: u64,
    /// The interval, at least `amount` ns.
    pub per: core::time::Duration,
    /// The most units admitted at once after an idle spell, `1 ..`; a request above it can
    /// never conform (refused `rate_limit` at once).
    pub burst: u64,
}

/// The rate dimensions of a classed bulkhead (docs/design.md §4.9): requests per interval
/// (every admission counts 1, whatever its weight) and budget units per interval (its cost;
/// needs a budget). Decided with the in-flight dimensions in the same dispatcher step, never
/// charged for a request that is then refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rates {
    /// Requests per interval.
    pub requests: Option<Rate>,
    /// Budget units (tokens) per interval.
    pub units: Option<Rate>,
}

impl Rates {
    /// Checks each rate: `amount ≥ 1`, `burst ≥ 1`, `per ≥ amount` ns, a tolerance below 2⁶²
    /// ns, 64-bit atomics, and a budget (`has_budget`) for a units rate. The rule of the class
    /// table and of `apply_limits`.
    ///
    /// # Errors
    /// [`ClassError::Rate`] naming the first bad rate.
    pub fn validate(&self, has_budget: bool) -> Result<(), ClassError> {
        for (rate, r) in [("requests", self.requests), ("units", self.units)] {
            let Some(r) = r else { continue };
            let per = r.per.as_nanos();
            let t = per / u128::from(r.amount.max(1));
            let ok = r.amount >= 1
                && r.burst >= 1
                && per >= u128::from(r.amount)
                && t.checked_mul(u128::from(r.burst))
                    .is_some_and(|tau| tau < (1u128 << 62))
                && (rate == "requests" || has_budget)
                && cfg!(target_has_atomic = "64");
            if !ok {
                return Err(ClassError::Rate { rate });
            }
        }
        Ok(())
    }

    /// Whether any rate is set.
    pub const fn any(&self) -> bool {
        self.requests.is_some() || self.units.is_some()
    }
}

/// The class table of a classed bulkhead
/// ([`Bulkhead::with_classes`](crate::Bulkhead::with_classes)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassTable<'a> {
    /// `1 ..= MAX_CLASSES` classes; a request names one by its index
    /// ([`Request::class`](crate::Request::class)), 0 by default.
    pub classes: &'a [ClassSpec],
    /// The priority reserve.
    pub reserve: PriorityReserve,
    /// Work-conserving lending: a class that has used its floor and the shared units may
    /// borrow other classes' idle floor units (never the reserve). A lent unit comes back to
    /// its owner first: as borrowers release, a waiting owner's floor turn comes before any
    /// borrower's. The price: while its floor is lent out, an owner's no-wait request may be
    /// refused (a queued one waits for the reclaim). `false` (the default): floors are never
    /// lent.
    pub lending: bool,
    /// Shedding: when the queue is full (`max_queue` live waiters), an arriving waiter evicts
    /// the youngest waiter of the lowest priority below its own, which is rejected `shed`
    /// (retryable), and takes its place — instead of being refused `queue_limit` itself. An
    /// arrival with nobody of a lower priority queued is refused `queue_limit` as ever.
    /// `false` (the default): a full queue refuses every arrival.
    pub shed: bool,
    /// Rate limits decided with the in-flight dimensions (docs/design.md §4.9); none by default.
    /// A one-class table gives a bulkhead rates and nothing else.
    pub rates: Rates,
}

/// What is wrong with a class table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClassError {
    /// No classes, or more than [`MAX_CLASSES`].
    Count {
        /// How many were given.
        count: usize,
    },
    /// A class's floor above its ceiling, or its ceiling above the dimension's ceiling.
    Ceiling {
        /// The class.
        class: usize,
        /// `"permits"` or `"budget"`.
        dimension: &'static str,
        /// Its floor.
        floor: u64,
        /// Its ceiling.
        ceiling: u64,
        /// The dimension's ceiling (`max_concurrent` or `budget`).
        max: u64,
    },
    /// The floors and the reserve of a dimension add up to more than its limit (nothing would
    /// be left to share, or less than nothing).
    Floors {
        /// `"permits"` or `"budget"`.
        dimension: &'static str,
        /// Σ floors + reserve.
        total: u64,
        /// The limit (the start limit, or `budget`).
        limit: u64,
    },
    /// A budget floor, ceiling or reserve on a bulkhead without a budget.
    NoBudget {
        /// The class (`None`: the reserve).
        class: Option<usize>,
    },
    /// A rate out of range: `amount` 0, `per` below `amount` ns, `burst` 0, or a tolerance
    /// above what a word holds; a units rate on a bulkhead without a budget.
    Rate {
        /// `"requests"` or `"units"`.
        rate: &'static str,
    },
    /// A class index the bulkhead does not have (or a bulkhead without classes: `count` 0).
    Unknown {
        /// The class asked for.
        class: usize,
        /// How many classes the bulkhead has.
        count: usize,
    },
    /// A registry under a global cap was asked for a key's own bulkhead: its keys are classes
    /// of one admission, reached through the registry's acquire methods.
    Keyed,
    /// An option that classes do not take yet: `"observe"`, `"enabled"`, `"adaptive"`,
    /// `"max_reservations"`, `"static"` (a static bulkhead: classes need `alloc`).
    Unsupported {
        /// The option's name.
        option: &'static str,
    },
}

impl fmt::Display for ClassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ClassError::Count { count } => write!(
                f,
                "classes must hold 1..={MAX_CLASSES} classes, got {count}"
            ),
            ClassError::Ceiling {
                class,
                dimension,
                floor,
                ceiling,
                max,
            } => write!(
                f,
                "classes[{class}]: the {dimension} floor ({floor}) and ceiling ({ceiling}) must \
                 satisfy floor <= ceiling <= {max}"
            ),
            ClassError::Floors {
                dimension,
                total,
                limit,
            } => write!(
                f,
                "classes: the {dimension} floors plus the reserve ({total}) must be at most the \
                 limit ({limit})"
            ),
            ClassError::NoBudget { class: Some(c) } => write!(
                f,
                "classes[{c}]: a budget floor, ceiling or observe needs a bulkhead with a budget"
            ),
            ClassError::NoBudget { class: None } => {
                f.write_str("classes: a budget reserve needs a bulkhead with a budget")
            }
            ClassError::Rate { rate } => write!(
                f,
                "classes.rates.{rate}: amount and burst must be at least 1 and per at least \
                 amount ns (a units rate needs a budget)"
            ),
            ClassError::Unknown { class, count: 0 } => write!(
                f,
                "class {class}: this bulkhead has no classes (build it with Bulkhead::with_classes)"
            ),
            ClassError::Unknown { class, count } => {
                write!(f, "class must be 0..={}, got {class}", count - 1)
            }
            ClassError::Keyed => f.write_str(
                "under a registry's global cap a key has no bulkhead of its own (keys are classes \
                 of one admission): acquire through the registry, read Registry::key_stats",
            ),
            ClassError::Unsupported { option } => write!(
                f,
                "classes: a classed bulkhead does not take `{option}` yet (docs/design.md §4.8)"
            ),
        }
    }
}

impl core::error::Error for ClassError {}

impl<'a> ClassTable<'a> {
    /// `classes` with no reserve, no lending and no shedding (set the fields to change them).
    pub const fn new(classes: &'a [ClassSpec]) -> Self {
        ClassTable {
            classes,
            reserve: PriorityReserve {
                permits: 0,
                budget: 0,
                min_priority: 0,
            },
            lending: false,
            shed: false,
            rates: Rates {
                requests: None,
                units: None,
            },
        }
    }

    /// Checks the table against `config` (validated already).
    ///
    /// # Errors
    /// The first [`ClassError`] found.
    pub fn validate(&self, config: &Config) -> Result<(), ClassError> {
        let n = self.classes.len();
        if n == 0 || n > MAX_CLASSES {
            return Err(ClassError::Count { count: n });
        }
        if let Some(id) = config.class_conflict() {
            let option = match id {
                crate::config::OptionId::AdaptiveAlgorithm => "adaptive",
                id => id.spec().name,
            };
            return Err(ClassError::Unsupported { option });
        }
        let budget = config.budget.unwrap_or(0);
        self.rates.validate(budget != 0)?;
        if budget == 0 && self.reserve.budget != 0 {
            return Err(ClassError::NoBudget { class: None });
        }
        let (mut floors, mut budget_floors) = (0u64, 0u64);
        for (i, c) in self.classes.iter().enumerate() {
            let ceiling = c.ceiling.unwrap_or(config.max_concurrent);
            if c.floor > ceiling || ceiling > config.max_concurrent {
                return Err(ClassError::Ceiling {
                    class: i,
                    dimension: "permits",
                    floor: c.floor,
                    ceiling,
                    max: config.max_concurrent,
                });
            }
            if budget == 0
                && (c.budget_floor != 0 || c.budget_ceiling.is_some() || c.observe.budget())
            {
                return Err(ClassError::NoBudget { class: Some(i) });
            }
            let bceiling = c.budget_ceiling.unwrap_or(budget);
            if c.budget_floor > bceiling || bceiling > budget {
                return Err(ClassError::Ceiling {
                    class: i,
                    dimension: "budget",
                    floor: c.budget_floor,
                    ceiling: bceiling,
                    max: budget,
                });
            }
            floors = floors.saturating_add(c.floor);
            budget_floors = budget_floors.saturating_add(c.budget_floor);
        }
        let total = floors.saturating_add(self.reserve.permits);
        let limit = config.start();
        // A fail-closed start (limit 0) is the kill switch: the partition applies once an
        // `apply_limits` raises the limit.
        if limit != 0 && total > limit {
            return Err(ClassError::Floors {
                dimension: "permits",
                total,
                limit,
            });
        }
        let btotal = budget_floors.saturating_add(self.reserve.budget);
        if btotal > budget {
            return Err(ClassError::Floors {
                dimension: "budget",
                total: btotal,
                limit: budget,
            });
        }
        Ok(())
    }
}
