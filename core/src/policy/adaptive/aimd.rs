//! AIMD: additive increase, multiplicative decrease, one step per round
//! (`docs/design.md` § Adaptive limit).
//!
//! A *round* is what one limit's worth of calls takes: a sample's RTT reflects the load in flight
//! while its call ran, so the `inflight` samples that follow a change still report the load from
//! before it. Counting each of them as fresh evidence compounds one observation
//! `inflight` times — Netflix `AIMDLimit` (`limit/AIMDLimit.java`) does that, `+1` per success
//! and `× ratio` per slow success, which in a closed loop doubles the limit per round and then
//! collapses it to the minimum (`tests/tests/adaptive_capacity.rs` pins the sawtooth 1 ↔ 64
//! against a 16-worker upstream). The rule here is the one Chiu & Jain analysed and TCP Reno
//! uses (RFC 5681 §3.1: `cwnd += 1` per round trip in congestion avoidance, one halving per
//! window of losses):
//!
//! * success with `rtt ≤ target_latency` while the limit is used (`inflight × 2 ≥ limit`, the
//!   app-limited guard of Netflix `AIMDLimit`: an unused limit is no evidence a larger one is
//!   safe): one credit; after `limit` credits, `limit += increase_step` and the credits restart;
//! * success with `rtt > target_latency`: `limit = floor(limit × decrease_ratio)`; the next
//!   `inflight − 1` successes are the rest of that round, and a slow one among them changes
//!   nothing;
//! * failure or overload: `limit = floor(limit × decrease_ratio)` on every one (a failure is a
//!   direct signal, not a delayed reading of the load);
//! * ignored: nothing;
//!
//! then clamp to `[min_limit, max_limit]`. Every decrease is strict before the clamp, even when
//! rounding would say otherwise, and resets the credits.

use super::{AdaptiveConfig, AdaptiveConfigError, Controller, Outcome, Sample};

/// The AIMD controller. Build it with [`Aimd::new`] or through
/// [`AdaptiveController`](super::AdaptiveController).
#[derive(Debug, Clone, PartialEq)]
pub struct Aimd {
    limit: u64,
    /// Fast, used successes since the last change; `limit` of them make one increase.
    credit: u64,
    /// Slow successes still to ignore in the round of the last latency decrease.
    hold: u64,
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
            credit: 0,
            hold: 0,
            min_limit: cfg.min_limit,
            max_limit: cfg.max_limit,
            target_latency_ns: cfg.target_latency_ns,
            increase_step: cfg.increase_step,
            decrease_ratio: cfg.decrease_ratio,
        })
    }

    fn decrease(&mut self) -> u64 {
        self.credit = 0;
        let scaled = (self.limit as f64 * self.decrease_ratio) as u64;
        // f64 rounding of huge limits must not turn a decrease into "no change".
        scaled.min(self.limit.saturating_sub(1))
    }
}

impl Controller for Aimd {
    fn reseed(&mut self, limit: u64) {
        self.limit = limit.clamp(self.min_limit, self.max_limit);
        self.credit = 0;
        self.hold = 0;
    }

    fn on_sample(&mut self, s: Sample) -> u64 {
        let outcome = s.outcome.for_limit();
        // Successes count down the round of the last latency decrease.
        let held = outcome == Outcome::Success && self.hold > 0;
        if held {
            self.hold -= 1;
        }
        let next = match outcome {
            Outcome::Ignored => return self.limit,
            Outcome::Failure | Outcome::Overload => self.decrease(),
            // The rest of the round that already caused a decrease.
            Outcome::Success if s.rtt_ns > self.target_latency_ns && held => return self.limit,
            Outcome::Success if s.rtt_ns > self.target_latency_ns => {
                self.hold = s.inflight.saturating_sub(1);
                self.decrease()
            }
            Outcome::Success if s.inflight.saturating_mul(2) >= self.limit => {
                self.credit += 1;
                if self.credit < self.limit {
                    return self.limit;
                }
                self.credit = 0;
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
