//! Why an acquire was not granted: the eight admission reasons of DESIGN §3.1, the snapshot
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
}

impl Reason {
    /// Every reason, in `hg_reason` order.
    pub const ALL: [Reason; 8] = [
        Reason::ConcurrencyLimit,
        Reason::QueueLimit,
        Reason::KeyLimit,
        Reason::Timeout,
        Reason::Aborted,
        Reason::Shutdown,
        Reason::CircuitOpen,
        Reason::CallTimeout,
    ];

    /// The snake_case name used in every layer (`"concurrency_limit"`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::ConcurrencyLimit => "concurrency_limit",
            Reason::QueueLimit => "queue_limit",
            Reason::KeyLimit => "key_limit",
            Reason::Timeout => "timeout",
            Reason::Aborted => "aborted",
            Reason::Shutdown => "shutdown",
            Reason::CircuitOpen => "circuit_open",
            Reason::CallTimeout => "call_timeout",
        }
    }

    /// Parses [`as_str`](Self::as_str) back.
    pub fn from_name(name: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The bindings' error code (`BULKHEAD_FULL`, `BULKHEAD_QUEUE_TIMEOUT`, …). `aborted` has
    /// none of its own (each runtime raises its own cancellation); `"ABORTED"` is used where a
    /// code is still needed.
    pub const fn code(self) -> &'static str {
        match self {
            Reason::ConcurrencyLimit | Reason::QueueLimit | Reason::KeyLimit => "BULKHEAD_FULL",
            Reason::Timeout => "BULKHEAD_QUEUE_TIMEOUT",
            Reason::Aborted => "ABORTED",
            Reason::Shutdown => "BULKHEAD_CLOSED",
            Reason::CircuitOpen => "CIRCUIT_OPEN",
            Reason::CallTimeout => "BULKHEAD_CALL_TIMEOUT",
        }
    }

    /// Whether retrying later may succeed.
    pub const fn retryable(self) -> bool {
        !matches!(self, Reason::Aborted | Reason::Shutdown)
    }

    /// The rejection category; every reason belongs to `"resilience"`.
    pub const fn category(self) -> &'static str {
        "resilience"
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
}

/// A settled acquire that got no permit: the reason and the snapshot taken when it settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub reason: Reason,
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
}

impl AcquireError {
    /// The admission reason, or `None` for an invalid argument.
    pub const fn reason(&self) -> Option<Reason> {
        match self {
            AcquireError::Rejected(r) => Some(r.reason),
            AcquireError::Config(_) | AcquireError::InvalidWeight { .. } => None,
        }
    }

    /// The rejection, if this is one.
    pub const fn rejection(&self) -> Option<&Rejection> {
        match self {
            AcquireError::Rejected(r) => Some(r),
            AcquireError::Config(_) | AcquireError::InvalidWeight { .. } => None,
        }
    }

    /// The name of the bad argument (`"weight"`, `"limit"`, …), for an invalid-argument error.
    pub const fn invalid_argument(&self) -> Option<&'static str> {
        match self {
            AcquireError::Rejected(_) => None,
            AcquireError::Config(e) => Some(e.option()),
            AcquireError::InvalidWeight { .. } => Some("weight"),
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
        }
    }
}

impl core::error::Error for AcquireError {}

impl From<Rejection> for AcquireError {
    fn from(r: Rejection) -> Self {
        AcquireError::Rejected(r)
    }
}
