//! AIMD: additive increase, multiplicative decrease (DESIGN §4).
//!
//! Per sample, exactly as DESIGN §4 states it:
//! * success with `rtt ≤ target_latency`: `limit += increase_step`, **only when
//!   `inflight × 2 ≥ limit`** — the app-limited guard of Netflix `AIMDLimit`
//!   (`limit/AIMDLimit.java`: `else if (inflight * 2 >= currentLimit)`): a limit that is not
//!   being used is not evidence that a larger one is safe, and without the guard an idle
//!   service ratchets its limit to `max_limit` and then admits a burst it cannot take;
//! * failure, or success with `rtt > target_latency`: `limit = floor(limit × decrease_ratio)`
//!   (always a strict decrease before the clamp, even when rounding would say otherwise);
//! * ignored: nothing;
//!
//! then clamp to `[min_limit, max_limit]`. Every step is integral, so the state is the integer
//! limit itself.

use super::{AdaptiveConfig, AdaptiveConfigError, Controller, Outcome, Sample};

/// The AIMD controller. Build it with [`Aimd::new`] or through
/// [`AdaptiveController`](super::AdaptiveController).
#[derive(Debug, Clone, PartialEq)]
pub struct Aimd {
    limit: u64,
    min_limit: u64,
    max_limit: u64,
    target_latency_ns: u64,
    increase_step: u64,
    decrease_ratio: f64,
}

impl Aimd {
    /// Validates `cfg` and starts at `initial_limit` (the `algorithm` field is not consulted).
    ///
    /// # Errors
    /// As [`AdaptiveConfig::validate`].
    pub fn new(cfg: &AdaptiveConfig) -> Result<Self, AdaptiveConfigError> {
        cfg.validate()?;
        Ok(Aimd {
            limit: cfg.start_limit(),
            min_limit: cfg.min_limit,
            max_limit: cfg.max_limit,
            target_latency_ns: cfg.target_latency_ns,
            increase_step: cfg.increase_step,
            decrease_ratio: cfg.decrease_ratio,
        })
    }

    fn decrease(&self) -> u64 {
        let scaled = (self.limit as f64 * self.decrease_ratio) as u64;
        // f64 rounding of huge limits must not turn a decrease into "no change".
        scaled.min(self.limit.saturating_sub(1))
    }
}

impl Controller for Aimd {
    fn reseed(&mut self, limit: u64) {
        self.limit = limit.clamp(self.min_limit, self.max_limit);
    }

    fn on_sample(&mut self, s: Sample) -> u64 {
        let next = match s.outcome.for_limit() {
            Outcome::Ignored => return self.limit,
            Outcome::Failure | Outcome::Overload => self.decrease(),
            Outcome::Success if s.rtt_ns > self.target_latency_ns => self.decrease(),
            Outcome::Success if s.inflight.saturating_mul(2) >= self.limit => {
                self.limit.saturating_add(self.increase_step)
            }
            // App-limited: a fast success at low utilisation changes nothing.
            Outcome::Success => self.limit,
        };
        self.limit = next.clamp(self.min_limit, self.max_limit);
        self.limit
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn estimate(&self) -> f64 {
        self.limit as f64
    }
}
