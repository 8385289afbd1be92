//! The `resilience` options (docs/design.md §6): an adaptive limit, a circuit breaker and a call
//! timeout around one bulkhead. One shape in every layer; a part that is `None` is off, and a
//! bulkhead whose [`Config::resilience`](crate::Config::resilience) is [`Resilience::OFF`] is
//! plain (its hot path pays one predictable branch).

use core::time::Duration;

use crate::policy::{adaptive::AdaptiveConfig, breaker::BreakerConfig};

/// Policies around a bulkhead (docs/design.md §7).
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::{Bulkhead, Config, Resilience, adaptive::AdaptiveConfig,
///     breaker::BreakerConfig};
/// let config = Config {
///     max_concurrent: 50,
///     resilience: Resilience {
///         adaptive: Some(AdaptiveConfig::for_max_concurrent(50)),
///         breaker: Some(BreakerConfig { open_duration: Duration::from_secs(5), ..BreakerConfig::DEFAULT }),
///         call_timeout: Some(Duration::from_secs(2)),
///     },
///     ..Config::DEFAULT
/// };
/// let bh = Bulkhead::new(config)?;
/// assert_eq!(bh.stats().circuit.unwrap().state.as_str(), "closed");
/// # Ok::<(), hullguard_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Resilience {
    /// The adaptive limit; its `max_limit` must not exceed `max_concurrent`.
    pub adaptive: Option<AdaptiveConfig>,
    /// The circuit breaker.
    pub breaker: Option<BreakerConfig>,
    /// Bounds the work itself (the guarded-call path; bindings enforce it with their timers).
    /// Must be non-zero.
    pub call_timeout: Option<Duration>,
}

impl Resilience {
    /// No policies: a plain bulkhead.
    pub const OFF: Resilience = Resilience {
        adaptive: None,
        breaker: None,
        call_timeout: None,
    };

    /// Whether every part is off.
    pub const fn is_off(&self) -> bool {
        self.adaptive.is_none() && self.breaker.is_none() && self.call_timeout.is_none()
    }
}
