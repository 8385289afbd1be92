//! Construction-time configuration and its validation (DESIGN §3.4).

use core::{fmt, time::Duration};

use crate::{
    adaptive::AdaptiveConfigError, breaker::BreakerConfigError, resilience::Resilience, sync::Word,
};

/// Largest permit count accepted anywhere (limits, weights, `max_concurrent`).
///
/// 2⁶⁰−1 on targets with 64-bit atomics. On targets with only 32-bit atomics (thumbv6m,
/// thumbv7em) it is 2²⁹−1: the permit word holds a *signed* `available` (it goes negative after
/// a shrink, down to `1 − MAX_PERMITS`) plus two flag bits, and 31 + 2 bits do not fit in 32.
#[cfg(target_has_atomic = "64")]
pub const MAX_PERMITS: u64 = (1 << 60) - 1;
/// Largest permit count accepted anywhere (limits, weights, `max_concurrent`).
///
/// 2²⁹−1 here, because this target has no 64-bit atomics (see the 64-bit docs for why).
#[cfg(not(target_has_atomic = "64"))]
pub const MAX_PERMITS: u64 = (1 << 29) - 1;

/// Largest `max_queue` (2²⁰ live waiters).
pub const MAX_QUEUE: u64 = 1 << 20;

/// Configuration of one [`Bulkhead`](crate::Bulkhead).
///
/// Defaults are the common HTTP-client bulkhead defaults: 10 concurrent, 100 queued, 30 s.
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::Config;
/// let c = Config { max_concurrent: 4, ..Config::default() };
/// assert_eq!(c.max_queue, 100);
/// assert_eq!(c.queue_timeout, Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// The ceiling of the limit, `1 ..= MAX_PERMITS`. The limit starts here.
    pub max_concurrent: u64,
    /// Live waiters allowed at once, `0 ..= MAX_QUEUE`; `0` means fail fast.
    pub max_queue: u64,
    /// The default deadline of a queued acquire wherever the host has a timer.
    /// `Duration::MAX` means no deadline. The core itself arms no timer.
    pub queue_timeout: Duration,
    /// `false` admits everything (still counted in the stats; I1 does not apply).
    pub enabled: bool,
    /// The policies around this bulkhead (DESIGN §4); [`Resilience::OFF`] by default. Needs
    /// the `alloc` feature (the policy state is allocated once, at construction).
    pub resilience: Resilience,
}

impl Config {
    /// The defaults, usable in `const` and `static` items.
    pub const DEFAULT: Config = Config {
        max_concurrent: 10,
        max_queue: 100,
        queue_timeout: Duration::from_secs(30),
        enabled: true,
        resilience: Resilience::OFF,
    };

    /// Checks every option, naming the first bad one.
    ///
    /// # Errors
    /// [`ConfigError::MaxConcurrent`] outside `1 ..= MAX_PERMITS`,
    /// [`ConfigError::MaxQueue`] above [`MAX_QUEUE`], then the `resilience` errors of
    /// [`Resilience::validate`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_base()?;
        self.resilience.validate(self.max_concurrent)
    }

    /// The `const` part of [`validate`](Self::validate) (for static bulkheads, which take no
    /// policies).
    pub(crate) const fn validate_base(&self) -> Result<(), ConfigError> {
        if self.max_concurrent == 0 || self.max_concurrent > MAX_PERMITS {
            return Err(ConfigError::MaxConcurrent);
        }
        if self.max_queue > MAX_QUEUE {
            return Err(ConfigError::MaxQueue);
        }
        Ok(())
    }

    /// The ring capacity a runtime-sized bulkhead allocates:
    /// `next_power_of_two(max_queue + max(max_queue, 64))`. Live waiters take at most
    /// `max_queue` cells; the rest is room for results their owners have not taken yet
    /// (docs/design.md §4.2).
    pub const fn ring_capacity(&self) -> usize {
        let slack = if self.max_queue > 64 {
            self.max_queue
        } else {
            64
        };
        ((self.max_queue + slack) as usize).next_power_of_two()
    }

    pub(crate) const fn max_concurrent_word(&self) -> Word {
        self.max_concurrent as Word
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A configuration value out of range; the variant names the option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_concurrent` is 0 or above [`MAX_PERMITS`].
    MaxConcurrent,
    /// `max_queue` is above [`MAX_QUEUE`], above a static ring's capacity, or the ring for it
    /// could not be allocated.
    MaxQueue,
    /// A `set_limit` value outside `1 ..= max_concurrent`.
    Limit,
    /// An `adaptive` option out of range (`max_limit` also when above `max_concurrent`).
    Adaptive(AdaptiveConfigError),
    /// A `breaker` option out of range.
    Breaker(BreakerConfigError),
    /// `call_timeout` is zero.
    CallTimeout,
    /// `resilience` was given where policies are unavailable (a static bulkhead, or a build
    /// without the `alloc` feature).
    Resilience,
}

impl ConfigError {
    /// The option's name as every layer spells it (`"max_concurrent"`, `"max_queue"`, `"limit"`).
    pub const fn option(&self) -> &'static str {
        match self {
            ConfigError::MaxConcurrent => "max_concurrent",
            ConfigError::MaxQueue => "max_queue",
            ConfigError::Limit => "limit",
            ConfigError::Adaptive(e) => e.option(),
            ConfigError::Breaker(e) => e.option(),
            ConfigError::CallTimeout => "call_timeout",
            ConfigError::Resilience => "resilience",
        }
    }

    /// The part of `resilience` the option belongs to: `Some("adaptive")`, `Some("breaker")`,
    /// `Some("resilience")` for `call_timeout`, `None` for the bulkhead's own options.
    pub const fn section(&self) -> Option<&'static str> {
        match self {
            ConfigError::Adaptive(_) => Some("adaptive"),
            ConfigError::Breaker(_) => Some("breaker"),
            ConfigError::CallTimeout => Some("resilience"),
            _ => None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MaxConcurrent => {
                write!(f, "max_concurrent must be in 1..={MAX_PERMITS}")
            }
            ConfigError::MaxQueue => write!(
                f,
                "max_queue must be in 0..={MAX_QUEUE} (and fit the ring; allocation may have failed)"
            ),
            ConfigError::Limit => write!(f, "limit must be in 1..=max_concurrent"),
            ConfigError::Adaptive(AdaptiveConfigError::MaxLimit) => {
                f.write_str("adaptive.max_limit must be in 1..=max_concurrent")
            }
            ConfigError::Adaptive(e) => write!(f, "{e}"),
            ConfigError::Breaker(e) => write!(f, "{e}"),
            ConfigError::CallTimeout => f.write_str("call_timeout must be greater than zero"),
            ConfigError::Resilience => f.write_str(
                "resilience needs the alloc feature and a runtime-sized Bulkhead (not new_static)",
            ),
        }
    }
}

impl core::error::Error for ConfigError {}
