//! Why an acquire was not granted: the admission reasons of docs/design.md §10.4, the snapshot
//! every rejection carries, and the error types of the Rust API.

use core::fmt;

/// Why an acquire settled without a permit. The discriminant is the C `hg_reason` index.
///
/// # Examples
/// ```
/// use hullguard_core::Reason;
/// assert_eq!(Reason::QueueLimit.as_str(), "queue_limit");
/// assert_eq!(Reason::QueueLimit.code(), "BULKHEAD_FULL");
/// assert!(Reason::Timeout.retryable());
/// assert!(!Reason::Shutdown.retryable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum Reason {
    /// Not admitted now and not queued (fail-fast, `try_acquire`, timeout 0, or a weight above
    /// the current limit).
    ConcurrencyLimit = 0,
    /// `max_queue` live waiters already queued, or no free ring cell.
    QueueLimit = 1,
    /// A registry at `max_keys` with nothing evictable.
    KeyLimit = 2,
    /// Waited longer than the queue timeout.
    Timeout = 3,
    /// The caller cancelled (in Rust: dropped the future).
    Aborted = 4,
    /// The bulkhead is closed.
    Shutdown = 5,
    /// The paired circuit breaker is open.
    CircuitOpen = 6,
    /// A guarded call overran its per-call timeout.
    CallTimeout = 7,
    /// The bulkhead's budget (its second dimension) has too few free units: not admitted now
    /// and not queued, or the request's cost is above the current budget.
    BudgetLimit = 8,
    /// Evicted from the queue of a classed bulkhead for a higher-priority arrival when the
    /// queue was full (docs/design.md §4.8): the youngest waiter of the lowest priority.
    Shed = 9,
    /// A rate dimension of a classed bulkhead refused (docs/design.md §4.9): the request does
    /// not conform to a requests or units per interval limit now (and may not wait), or never
    /// can (above the rate's burst). [`Bulkhead::rate_retry_after`](crate::Bulkhead::rate_retry_after)
    /// says when a held head conforms.
    RateLimit = 10,
}

/// One row of the reason table: everything every layer says about a reason, in one place.
/// Bindings walk [`Reason::ALL`] (Python `hullguard._native.REASONS`, Node `native.reasons()`,
/// C `hg_reason_name` / `hg_status_message`) instead of keeping their own copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasonInfo {
    /// The reason.
    pub reason: Reason,
    /// The snake_case name every layer uses (`"queue_limit"`).
    pub name: &'static str,
    /// The bindings' error code (`"BULKHEAD_FULL"`).
    pub code: &'static str,
    /// Whether retrying later may succeed.
    pub retryable: bool,
    /// The rejection category (every reason belongs to `"resilience"`).
    pub category: &'static str,
    /// `name` as a NUL-terminated string (for the C ABI).
    pub c_name: &'static core::ffi::CStr,
    /// `"rejected: <name>"` as a NUL-terminated string (the C ABI's status message).
    pub c_message: &'static core::ffi::CStr,
}

macro_rules! reasons {
    ($($variant:ident = $i:literal, $name:literal, $code:literal, $retry:literal;)*) => {
        /// The reason table, in `hg_reason` order (see [`ReasonInfo`]).
        const TABLE: [ReasonInfo; Reason::COUNT] = [$(ReasonInfo {
            reason: Reason::$variant,
            name: $name,
            code: $code,
            retryable: $retry,
            category: "resilience",
            c_name: match core::ffi::CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("reason name with a NUL"),
            },
            c_message: match core::ffi::CStr::from_bytes_with_nul(
                concat!("rejected: ", $name, "\0").as_bytes(),
            ) {
                Ok(c) => c,
                Err(_) => panic!("reason name with a NUL"),
            },
        }),*];
        const _: () = { let mut i = 0; $( assert!($i == i); i += 1; )* let _ = i; };
    };
}

// name, code, retryable. Append only: the index is ABI (`hg_reason`, `HG_STATUS_* = 2000 + i`).
reasons! {
    ConcurrencyLimit = 0, "concurrency_limit", "BULKHEAD_FULL", true;
    QueueLimit = 1, "queue_limit", "BULKHEAD_FULL", true;
    KeyLimit = 2, "key_limit", "BULKHEAD_FULL", true;
    Timeout = 3, "timeout", "BULKHEAD_QUEUE_TIMEOUT", true;
    Aborted = 4, "aborted", "ABORTED", false;
    Shutdown = 5, "shutdown", "BULKHEAD_CLOSED", false;
    CircuitOpen = 6, "circuit_open", "CIRCUIT_OPEN", true;
    CallTimeout = 7, "call_timeout", "BULKHEAD_CALL_TIMEOUT", true;
    BudgetLimit = 8, "budget_limit", "BULKHEAD_FULL", true;
    Shed = 9, "shed", "BULKHEAD_SHED", true;
    RateLimit = 10, "rate_limit", "BULKHEAD_RATE_LIMITED", true;
}

impl Reason {
    /// How many reasons there are (the length of every per-reason array).
    pub const COUNT: usize = 11;

    /// Every reason, in `hg_reason` order.
    pub const ALL: [Reason; Reason::COUNT] = {
        let mut all = [Reason::ConcurrencyLimit; Reason::COUNT];
        let mut i = 0;
        while i < Reason::COUNT {
            all[i] = TABLE[i].reason;
            i += 1;
        }
        all
    };

    /// The table row of this reason.
    pub const fn info(self) -> &'static ReasonInfo {
        &TABLE[self as usize]
    }

    /// The reason with this index (`hg_reason`), if there is one.
    pub const fn from_index(i: usize) -> Option<Reason> {
        if i < Reason::COUNT {
            Some(TABLE[i].reason)
        } else {
            None
        }
    }

    /// The snake_case name used in every layer (`"concurrency_limit"`, …).
    pub const fn as_str(self) -> &'static str {
        self.info().name
    }

    /// Parses [`as_str`](Self::as_str) back.
    pub fn from_name(name: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The bindings' error code (`BULKHEAD_FULL`, `BULKHEAD_QUEUE_TIMEOUT`, …). `aborted` has
    /// none of its own (each runtime raises its own cancellation); `"ABORTED"` is used where a
    /// code is still needed.
    pub const fn code(self) -> &'static str {
        self.info().code
    }

    /// Whether retrying later may succeed.
    pub const fn retryable(self) -> bool {
        self.info().retryable
    }

    /// The rejection category; every reason belongs to `"resilience"`.
    pub const fn category(self) -> &'static str {
        self.info().category
    }

    /// The index into per-reason arrays (`hg_reason`).
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bulkhead's counters at the moment of a rejection (`key` lives in the registry's error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Permits held by claimed grants.
    pub active: u64,
    /// Live waiters.
    pub queued: u64,
    /// The current limit.
    pub limit: u64,
    /// Permits free now (negative after a shrink).
    pub available: i64,
    /// The revision of the limits in force (docs/design.md §4.6; 0 before any
    /// `apply_limits`), so a refusal names the limits that refused it.
    pub revision: u64,
    /// `max_queue`.
    pub max_queue: u64,
    /// The total cost of the live waiters (0 without a budget).
    pub queued_cost: u64,
    /// The budget's counts, from the same load of the permit word; `None` without a budget.
    pub budget: Option<DimensionSnapshot>,
}

/// The class part of a classed bulkhead's refusal (docs/design.md §4.8, §5.7), decided when it
/// refused (`concurrency_limit`, `budget_limit`, `queue_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassRefusal {
    /// The class index.
    pub class: u16,
    /// Which constraint held it back: [`Bound::Class`] (its ceiling), [`Bound::Shared`] (the
    /// shared units, and the reserve if it may take it, are gone), [`Bound::Reserve`] (only the
    /// reserve is left, and the class may not take it), [`Bound::Limit`] (the limit itself, or
    /// older waiters ahead: no barging), or the queue's bounds.
    pub bound: Bound,
    /// The dimension that was short: 0 the permits, 1 the budget. (The class's counts are
    /// `Bulkhead::class_stats`: a refusal stays small, as it travels on every refused path.)
    pub dimension: u8,
}

/// One dimension's counts at a rejection (docs/design.md §5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DimensionSnapshot {
    /// The ceiling in force.
    pub limit: u64,
    /// Held by claimed grants.
    pub in_use: u64,
    /// Free (negative after a shrink).
    pub available: i64,
}

/// Which constraint refused (docs/design.md §5.7): read from the reason and the counters at the
/// rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Bound {
    /// The permit limit (`concurrency_limit`).
    #[default]
    Limit,
    /// The kill switch: a limit of 0 (`concurrency_limit`).
    KillSwitch,
    /// The budget (`budget_limit`).
    Budget,
    /// `max_queue` live waiters (`queue_limit`).
    Queue,
    /// `max_queued_cost`, or no free ring cell, with fewer than `max_queue` waiters
    /// (`queue_limit`).
    QueuedCost,
    /// A registry's `max_keys` (`key_limit`).
    Keys,
    /// The queue deadline (`timeout`).
    Deadline,
    /// The caller cancelled (`aborted`).
    Cancelled,
    /// `close()` (`shutdown`).
    Closed,
    /// The circuit breaker (`circuit_open`).
    Breaker,
    /// The per-call timeout (`call_timeout`).
    CallTimeout,
    /// A higher-priority arrival took the place in a full queue (`shed`).
    Shed,
    /// A class's own ceiling (a classed bulkhead, docs/design.md §4.8).
    Class,
    /// The shared units of a classed bulkhead (and the reserve, for a class that may take it).
    Shared,
    /// Only the priority reserve is left, and the class may not take it.
    Reserve,
    /// A rate dimension (`rate_limit`).
    Rate,
    /// An overload signal (event-loop lag, CPU) over its threshold shed a non-critical class
    /// (`shed`, docs/design.md §4.11).
    Overload,
    /// The block this process leases from the fleet is empty: no lease yet, or it is lost or
    /// past its deadline (`concurrency_limit` of a fleet bulkhead, docs/design.md §16).
    FleetLease,
}

impl Bound {
    /// Every bound, in declaration order: `ALL[b.index()] == b`. A C-style layer numbers
    /// bounds by this index (the C ABI's `hg_bound`); new bounds are appended.
    pub const ALL: [Bound; 18] = [
        Bound::Limit,
        Bound::KillSwitch,
        Bound::Budget,
        Bound::Queue,
        Bound::QueuedCost,
        Bound::Keys,
        Bound::Deadline,
        Bound::Cancelled,
        Bound::Closed,
        Bound::Breaker,
        Bound::CallTimeout,
        Bound::Shed,
        Bound::Class,
        Bound::Shared,
        Bound::Reserve,
        Bound::Rate,
        Bound::Overload,
        Bound::FleetLease,
    ];

    /// Its index in [`ALL`](Self::ALL) (stable: bounds are only ever appended).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The bound of index `i` in [`ALL`](Self::ALL), if there is one.
    pub const fn from_index(i: usize) -> Option<Bound> {
        if i < Self::ALL.len() {
            Some(Self::ALL[i])
        } else {
            None
        }
    }

    /// The name every layer spells (`"kill_switch"`, `"queued_cost"`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Bound::Limit => "limit",
            Bound::KillSwitch => "kill_switch",
            Bound::Budget => "budget",
            Bound::Queue => "queue",
            Bound::QueuedCost => "queued_cost",
            Bound::Keys => "keys",
            Bound::Deadline => "deadline",
            Bound::Cancelled => "cancelled",
            Bound::Closed => "closed",
            Bound::Breaker => "breaker",
            Bound::CallTimeout => "call_timeout",
            Bound::Shed => "shed",
            Bound::Class => "class",
            Bound::Shared => "shared",
            Bound::Reserve => "reserve",
            Bound::Rate => "rate",
            Bound::Overload => "overload",
            Bound::FleetLease => "fleet_lease",
        }
    }
}

/// A rejection's detail (docs/design.md §5.7): per dimension `{limit, in_use, available}`, the
/// queue, the revision and which constraint bound — computed when read, from the snapshot the
/// rejection carries (nothing is allocated on the refusal path). The counters are those of the
/// moment of the rejection, stale as soon as it returns under concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejectionDetail {
    /// Why.
    pub reason: Reason,
    /// Which constraint refused.
    pub bound: Bound,
    /// The permits: `limit`, `in_use` (`active`), `available`.
    pub calls: DimensionSnapshot,
    /// The budget's counts; `None` without a budget.
    pub budget: Option<DimensionSnapshot>,
    /// Live waiters.
    pub queued: u64,
    /// `max_queue`.
    pub max_queue: u64,
    /// The total cost of the live waiters.
    pub queued_cost: u64,
    /// The revision of the limits in force.
    pub revision: u64,
    /// A classed bulkhead's class part (see [`ClassRefusal`]).
    pub class: Option<ClassRefusal>,
    /// For `rate_limit`: the time until the request would conform, as seen when it was
    /// refused (`None` for other reasons, and for a request above a rate's burst).
    pub retry_after: Option<core::time::Duration>,
}

impl RejectionDetail {
    /// The HTTP status a server answers this refusal with (docs/design.md §4.11), one table
    /// for every edge adapter: 429 for `rate_limit` (the caller exceeded its rate), 503 for
    /// every other refusal (the server is at a limit, shedding, out of time for the request —
    /// a queue timeout or a deadline that cannot be met — or closed). Send `Retry-After` only
    /// with [`retry_after`](Self::retry_after) — the one honest estimate (a rate's next
    /// conforming time); none is invented for the others.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, max_queue: 0, ..Config::default() })?;
    /// let _held = bh.try_acquire(1)?;
    /// let Err(hullguard_core::AcquireError::Rejected(r)) = bh.try_acquire(1) else { panic!() };
    /// assert_eq!((r.detail().http_status(), r.detail().retry_after), (503, None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const fn http_status(&self) -> u16 {
        match self.reason {
            Reason::RateLimit => 429,
            _ => 503,
        }
    }
}

/// A settled acquire that got no permit: the reason and the snapshot taken when it settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub reason: Reason,
    /// A classed bulkhead's refusal of a request of one class (docs/design.md §4.8): the class
    /// and the constraint that held it back; `None` otherwise. (Beside `reason`, in its
    /// padding: a rejection does not grow for it.)
    pub class: Option<ClassRefusal>,
    /// Whether a leased bulkhead (a fleet bulkhead's, docs/design.md §16) refused for want of
    /// a lease: its block was 0 or past its deadline, or — for `budget_limit` — its leased
    /// budget block was 0 (bound `fleet_lease`, not the kill switch). (In the same padding.)
    pub leased: bool,
    /// For `rate_limit`: how long, in ns on the bulkhead's clock, until the request would
    /// conform (docs/design.md §4.9), as seen when it was refused; 0 otherwise (and for a
    /// request above a rate's burst, which never conforms). Read it as
    /// [`RejectionDetail::retry_after`].
    pub retry_after_ns: u64,
    /// The counters then.
    pub snapshot: Snapshot,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.snapshot;
        write!(
            f,
            "bulkhead rejected the acquire: {} (active={}, queued={}, limit={}, available={})",
            self.reason, s.active, s.queued, s.limit, s.available
        )
    }
}

impl core::error::Error for Rejection {}

impl Rejection {
    /// A rejection with `reason` and the counters `snapshot`, naming no class and no retry
    /// time (the bindings build their `call_timeout` rejections so).
    pub const fn new(reason: Reason, snapshot: Snapshot) -> Self {
        Rejection {
            reason,
            class: None,
            leased: false,
            retry_after_ns: 0,
            snapshot,
        }
    }

    /// The detail of this rejection (docs/design.md §5.7), computed now from its snapshot.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bound, Bulkhead, Config, LimitsSnapshot};
    /// let bh = Bulkhead::new(Config { max_concurrent: 2, ..Config::default() })?;
    /// bh.apply_limits(&LimitsSnapshot::new(7).limit(0))?;
    /// let Err(hullguard_core::AcquireError::Rejected(r)) = bh.try_acquire(1) else { panic!() };
    /// let d = r.detail();
    /// assert_eq!((d.bound, d.calls.limit, d.revision), (Bound::KillSwitch, 0, 7));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn detail(&self) -> RejectionDetail {
        let s = &self.snapshot;
        let bound = match self.reason {
            Reason::ConcurrencyLimit if self.leased => Bound::FleetLease,
            Reason::ConcurrencyLimit if s.limit == 0 => Bound::KillSwitch,
            Reason::ConcurrencyLimit => Bound::Limit,
            Reason::BudgetLimit if self.leased => Bound::FleetLease,
            Reason::BudgetLimit => Bound::Budget,
            Reason::QueueLimit if s.queued >= s.max_queue => Bound::Queue,
            Reason::QueueLimit => Bound::QueuedCost,
            Reason::KeyLimit => Bound::Keys,
            Reason::Timeout => Bound::Deadline,
            Reason::Aborted => Bound::Cancelled,
            Reason::Shutdown => Bound::Closed,
            Reason::CircuitOpen => Bound::Breaker,
            Reason::CallTimeout => Bound::CallTimeout,
            Reason::Shed => Bound::Shed,
            Reason::RateLimit => Bound::Rate,
        };
        // A classed bulkhead names the class's own constraint for its dimension refusals.
        let bound = match (self.reason, self.class) {
            (Reason::ConcurrencyLimit | Reason::BudgetLimit, Some(c))
                if !matches!(bound, Bound::KillSwitch | Bound::FleetLease) =>
            {
                c.bound
            }
            (Reason::Shed, Some(c)) if c.bound == Bound::Overload => c.bound,
            _ => bound,
        };
        RejectionDetail {
            reason: self.reason,
            bound,
            calls: DimensionSnapshot {
                limit: s.limit,
                in_use: s.active,
                available: s.available,
            },
            budget: s.budget,
            queued: s.queued,
            max_queue: s.max_queue,
            queued_cost: s.queued_cost,
            revision: s.revision,
            class: self.class,
            retry_after: (self.retry_after_ns != 0)
                .then(|| core::time::Duration::from_nanos(self.retry_after_ns)),
        }
    }
}

/// The argument rule for a weight: `1 ..= max_concurrent` (never counted).
#[inline]
pub(crate) const fn check_weight(weight: u64, max_concurrent: u64) -> Result<u64, AcquireError> {
    if weight == 0 || weight > max_concurrent {
        return Err(AcquireError::InvalidWeight {
            weight,
            max_concurrent,
        });
    }
    Ok(weight)
}

/// The argument rule for a cost: `0 ..= max_budget` (only 0 without a budget; never counted).
#[inline]
pub(crate) const fn check_cost(cost: u64, max_budget: u64) -> Result<u64, AcquireError> {
    if cost > max_budget {
        return Err(AcquireError::InvalidCost { cost, max_budget });
    }
    Ok(cost)
}

/// Why an acquire failed: a rejection with a reason, or a bad argument.
///
/// # Examples
/// ```
/// use hullguard_core::{AcquireError, Bulkhead, Config, Reason};
/// let bh = Bulkhead::new(Config { max_concurrent: 1, ..Config::default() }).unwrap();
/// let _held = bh.try_acquire(1).unwrap();
/// let err = bh.try_acquire(1).unwrap_err();
/// assert_eq!(err.reason(), Some(Reason::ConcurrencyLimit));
/// assert_eq!(bh.try_acquire(2).unwrap_err(), AcquireError::InvalidWeight { weight: 2, max_concurrent: 1 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// Settled without a permit.
    Rejected(Rejection),
    /// A configuration value out of range (a `set_limit` value, or a registry key's bulkhead
    /// whose ring could not be allocated); reason `invalid`, never counted.
    Config(crate::config::ConfigError),
    /// `weight` is 0 or above `max_concurrent` (reason `invalid`; never counted in the stats).
    InvalidWeight {
        /// The weight asked for.
        weight: u64,
        /// The bulkhead's ceiling.
        max_concurrent: u64,
    },
    /// `cost` is above the budget the bulkhead was built with, or not 0 on a bulkhead without
    /// a budget (`max_budget` 0) (reason `invalid`; never counted in the stats).
    InvalidCost {
        /// The cost asked for.
        cost: u64,
        /// The bulkhead's budget ceiling (0: no budget).
        max_budget: u64,
    },
    /// `class` is not a class of the bulkhead (`0 .. classes`; only 0 on a bulkhead without
    /// classes, `classes` 0) (reason `invalid`; never counted in the stats).
    InvalidClass {
        /// The class asked for.
        class: u16,
        /// How many classes the bulkhead has.
        classes: usize,
    },
    /// A request's own `observe` on a classed bulkhead, which takes no observe mode (docs/design.md
    /// §4.8) (reason `invalid`; never counted in the stats).
    InvalidObserve {
        /// The observe mode asked for.
        observe: crate::observe::Observe,
    },
}

impl AcquireError {
    /// The admission reason, or `None` for an invalid argument.
    pub const fn reason(&self) -> Option<Reason> {
        match self {
            AcquireError::Rejected(r) => Some(r.reason),
            AcquireError::Config(_)
            | AcquireError::InvalidWeight { .. }
            | AcquireError::InvalidCost { .. }
            | AcquireError::InvalidClass { .. }
            | AcquireError::InvalidObserve { .. } => None,
        }
    }

    /// The rejection, if this is one.
    pub const fn rejection(&self) -> Option<&Rejection> {
        match self {
            AcquireError::Rejected(r) => Some(r),
            AcquireError::Config(_)
            | AcquireError::InvalidWeight { .. }
            | AcquireError::InvalidCost { .. }
            | AcquireError::InvalidClass { .. }
            | AcquireError::InvalidObserve { .. } => None,
        }
    }

    /// The name of the bad argument (`"weight"`, `"limit"`, …), for an invalid-argument error.
    pub const fn invalid_argument(&self) -> Option<&'static str> {
        match self {
            AcquireError::Rejected(_) => None,
            AcquireError::Config(e) => Some(e.option()),
            AcquireError::InvalidWeight { .. } => Some("weight"),
            AcquireError::InvalidCost { .. } => Some("cost"),
            AcquireError::InvalidClass { .. } => Some("class"),
            AcquireError::InvalidObserve { .. } => Some("observe"),
        }
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Rejected(r) => r.fmt(f),
            AcquireError::Config(e) => e.fmt(f),
            AcquireError::InvalidWeight {
                weight,
                max_concurrent,
            } => write!(
                f,
                "weight must be in 1..={max_concurrent} (max_concurrent), got {weight}"
            ),
            AcquireError::InvalidCost {
                cost,
                max_budget: 0,
            } => write!(
                f,
                "cost must be 0 on a bulkhead without a budget, got {cost}"
            ),
            AcquireError::InvalidCost { cost, max_budget } => write!(
                f,
                "cost must be in 0..={max_budget} (the budget), got {cost}"
            ),
            AcquireError::InvalidClass { class, classes: 0 } => write!(
                f,
                "class must be 0 on a bulkhead without classes, got {class}"
            ),
            AcquireError::InvalidClass { class, classes } => write!(
                f,
                "class must be in 0..={} (the class table), got {class}",
                classes - 1
            ),
            AcquireError::InvalidObserve { observe } => write!(
                f,
                "observe must be \"off\" on a bulkhead with classes (classes take no observe \
                 mode), got \"{observe}\""
            ),
        }
    }
}

impl core::error::Error for AcquireError {}

impl From<Rejection> for AcquireError {
    fn from(r: Rejection) -> Self {
        AcquireError::Rejected(r)
    }
}

/// Rejections counted per admission reason (every reason's key always present).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RejectedByReason(pub [u64; Reason::COUNT]);

impl RejectedByReason {
    /// The count for one reason.
    pub fn get(&self, reason: Reason) -> u64 {
        self.0[reason.index()]
    }

    /// `(reason, count)` for every reason, in `hg_reason` order.
    pub fn iter(&self) -> impl Iterator<Item = (Reason, u64)> + '_ {
        Reason::ALL.into_iter().map(|r| (r, self.0[r.index()]))
    }

    /// The sum over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

#[cfg(test)]
mod bound_index_tests {
    use super::Bound;

    #[test]
    fn every_bound_round_trips_through_its_index_and_names_are_unique() {
        for (i, b) in Bound::ALL.iter().enumerate() {
            assert_eq!(b.index(), i);
            assert_eq!(Bound::from_index(i), Some(*b));
            for other in &Bound::ALL[..i] {
                assert_ne!(other.as_str(), b.as_str());
            }
        }
        assert_eq!(Bound::from_index(Bound::ALL.len()), None);
        assert_eq!(Bound::from_index(usize::MAX), None);
    }
}
