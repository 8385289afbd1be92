//! Gradient2: Netflix `Gradient2Limit` (`limit/Gradient2Limit.java`) with hullguard's fixes.
//!
//! # Netflix's rule (per sample)
//! ```text
//! short = rtt
//! long  = ExpAvg(rtt): mean of the first min(10, long_window) samples, then
//!         long = long × (1 − f) + rtt × f with f = 2 / (long_window + 1)
//! if long / short > 2:  long ×= 0.95        // recover after prolonged overload
//! if inflight < L / 2:  return L            // app-limited
//! gradient = clamp(rtt_tolerance × long / short, 0.5, 1.0)
//! new = L × gradient + queue_size
//! L   = clamp(L × (1 − smoothing) + new × smoothing, min_limit, max_limit)
//! ```
//!
//! # What hullguard changes, and why
//! 1. **No headroom under queueing** (Netflix PR #134, and jhalterman's 2024 analysis on it:
//!    "under modest overload, ex: when the gradient is around .8, the inclusion of a queue will
//!    cause the limit to gradually increase indefinitely"). With `+queue_size` always added, the
//!    fixed point of `L = L(1 − s) + (L g + q) s` is `L = q / (1 − g)` — 20 at `g = 0.8` — and as
//!    the long RTT drifts up toward the overloaded RTT, `g → 1` and that point runs off to
//!    `max_limit`. Here `queue_size` is added only when the gradient is exactly 1.
//! 2. **Grow only when unqueued.** Netflix treats any RTT up to `rtt_tolerance × long` as
//!    "gradient 1" and grows; a sustained 1.3× slowdown (inside the 1.5 tolerance) therefore
//!    still grows the limit every sample, and the latency it adds is then absorbed into the long
//!    RTT — the same creep, slower. Here the band `long < short ≤ rtt_tolerance × long` *holds*
//!    the limit; growth (`+queue_size`) needs `short ≤ long`. `rtt_tolerance` now only says how
//!    much slowdown is tolerated before shrinking, not what is evidence for growing. A slowdown
//!    that persists for several `long_window`s becomes the new baseline (the long RTT absorbs
//!    it) and growth resumes: from latency alone a slower service and a persistently overloaded
//!    one are indistinguishable (Netflix #137), and never adopting the new level is the C20
//!    trap (collapse to the minimum, never recover).
//! 3. **Failures shrink and carry no RTT** (Netflix #176: `didDrop` is ignored, so drops, which
//!    finish almost at once, *raise* the limit). A failure leaves both RTTs untouched and moves
//!    the limit toward `L × decrease_ratio` with the usual smoothing (with the defaults,
//!    `0.8 + 0.2 × 0.7 = 0.94` per failure). PR #134 proposed gradient 0.5 on a drop; Netflix
//!    PR #146 softened the drop back-off to 0.9 because 0.5 shed too much; the shared
//!    `decrease_ratio` lets one option serve both algorithms.
//! 4. **App-limited guards growth only.** Netflix returns early (no change at all) when
//!    `inflight < L/2`; here only a rise is suppressed, so a latency spike still shrinks a limit
//!    that is not fully used (C20 expects the limit to fall during an outage whatever the offered
//!    load). The guard is the same as AIMD's: grow only when `inflight × 2 ≥ limit`.
//! 5. **Float state, integer output**: the estimate stays `f64` (Netflix truncates to `int`
//!    per update, which swallows sub-1 smoothed steps near small limits; `tower-acc` keeps a
//!    float too); [`Controller::on_sample`] returns `floor(estimate)`.
//!
//! The long-RTT decay (`×0.95` while `long > 2 × short`) is kept as Netflix has it: it is what
//! lets the baseline come back down quickly after an outage (C20: baseline ≤ 2× the normal RTT
//! once it is over).

use super::{
    AdaptiveConfig, AdaptiveConfigError, Controller, Outcome, Sample, clamp_f, floor_clamped,
};

/// Netflix `ExpAvgMeasurement(window, 10)`: a plain mean during warm-up, then an EMA.
#[derive(Debug, Clone, PartialEq)]
struct ExpAvg {
    value: f64,
    count: u64,
    warmup: u64,
    factor: f64,
}

impl ExpAvg {
    fn new(window: u64) -> Self {
        ExpAvg {
            value: 0.0,
            count: 0,
            warmup: if window < 10 { window } else { 10 },
            factor: 2.0 / (window as f64 + 1.0),
        }
    }

    fn add(&mut self, x: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            // Running mean: equal to sum / count without keeping the sum.
            self.value += (x - self.value) / self.count as f64;
        } else {
            self.value = self.value * (1.0 - self.factor) + x * self.factor;
        }
        self.value
    }
}

/// The Gradient2 controller. Build it with [`Gradient2::new`] or through
/// [`AdaptiveController`](super::AdaptiveController).
#[derive(Debug, Clone, PartialEq)]
pub struct Gradient2 {
    estimate: f64,
    long_rtt: ExpAvg,
    min_limit: u64,
    max_limit: u64,
    decrease_ratio: f64,
    smoothing: f64,
    rtt_tolerance: f64,
    queue_size: f64,
}

impl Gradient2 {
    /// Validates `cfg` and starts at `initial_limit` with no RTT history (the `algorithm` field
    /// is not consulted).
    ///
    /// # Errors
    /// As [`AdaptiveConfig::validate`].
    pub fn new(cfg: &AdaptiveConfig) -> Result<Self, AdaptiveConfigError> {
        cfg.validate()?;
        Ok(Gradient2 {
            estimate: cfg.start_limit() as f64,
            long_rtt: ExpAvg::new(cfg.long_window),
            min_limit: cfg.min_limit,
            max_limit: cfg.max_limit,
            decrease_ratio: cfg.decrease_ratio,
            smoothing: cfg.smoothing,
            rtt_tolerance: cfg.rtt_tolerance,
            queue_size: cfg.queue_size as f64,
        })
    }

    /// The long-term RTT average in nanoseconds (0 before the first success sample).
    pub fn long_rtt_ns(&self) -> f64 {
        self.long_rtt.value
    }

    /// Feeds the RTT averages and returns the target of one success sample, before smoothing.
    fn success_target(&mut self, rtt_ns: u64) -> f64 {
        let short = if rtt_ns == 0 { 1.0 } else { rtt_ns as f64 };
        let long = self.long_rtt.add(short);
        if long / short > 2.0 {
            // Netflix: recover quickly after a prolonged overload inflated the long RTT.
            self.long_rtt.value *= 0.95;
        }
        let g = self.rtt_tolerance * long / short;
        let gradient = if g < 0.5 {
            0.5
        } else if g < 1.0 {
            g
        } else {
            1.0
        };
        if gradient < 1.0 {
            // Fix 1 (#134): queueing beyond tolerance: shrink, no headroom.
            self.estimate * gradient
        } else if short <= long {
            // No queueing seen: probe upward by the headroom.
            self.estimate + self.queue_size
        } else {
            // Fix 2: slower than the baseline but within tolerance: hold.
            self.estimate
        }
    }
}

impl Controller for Gradient2 {
    fn reseed(&mut self, limit: u64) {
        self.estimate = clamp_f(limit as f64, self.min_limit, self.max_limit);
    }

    fn on_sample(&mut self, s: Sample) -> u64 {
        let target = match s.outcome.for_limit() {
            Outcome::Ignored => return self.limit(),
            // Fix 3 (#176): no RTT sample, never growth.
            Outcome::Failure | Outcome::Overload => self.estimate * self.decrease_ratio,
            Outcome::Success => {
                let t = self.success_target(s.rtt_ns);
                // Fix 4: the app-limited guard stops growth only.
                if t > self.estimate && s.inflight.saturating_mul(2) < self.limit() {
                    return self.limit();
                }
                t
            }
        };
        let next = self.estimate * (1.0 - self.smoothing) + target * self.smoothing;
        self.estimate = clamp_f(next, self.min_limit, self.max_limit);
        self.limit()
    }

    fn limit(&self) -> u64 {
        floor_clamped(self.estimate, self.min_limit, self.max_limit)
    }

    fn estimate(&self) -> f64 {
        self.estimate
    }
}
