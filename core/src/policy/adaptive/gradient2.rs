//! Gradient2: Netflix `Gradient2Limit` (`limit/Gradient2Limit.java`) with hullguard's fixes
//! (`docs/design.md` § Adaptive limit).
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
//! 6. **Probe the no-load RTT** (hullguard's; the idea is BBR's ProbeRTT and Netflix's own
//!    Gradient v1 reset). From latency alone a slower service and a standing queue are the
//!    same, so an upstream that is overloaded from the start (or for longer than a window)
//!    becomes the long RTT's baseline and the limit never comes down to its capacity — the
//!    closed-loop test `tests/tests/adaptive_capacity.rs` pins this: plain Gradient2 stays at
//!    the ceiling against a 16-worker upstream. Only a change in load tells them apart. So once
//!    per `long_window` samples *while the limit is fully used* (`inflight ≥ limit`), the
//!    controller halves the limit for one round (`⌈1.5 × limit⌉` samples: the calls already in
//!    flight drain, then calls at half the load report) and adopts the lowest RTT of that
//!    round as the **no-load RTT** (any lower RTT seen later lowers it at once). The gradient is
//!    taken against `min(long, no_load)`: against a standing queue the no-load RTT is the
//!    service time and the limit settles where the latency is `rtt_tolerance` × it, about
//!    `rtt_tolerance × capacity`; against a slower service the next probe finds the new RTT
//!    and the limit grows back. The limit comes back after the round; a failure during it is
//!    applied to the limit it comes back to.
//!
//! 7. **One reading per round** (hullguard's; TCP's one congestion response per window,
//!    RFC 5681). A sample's RTT reflects the load in flight while its call ran, so after a
//!    change the next `inflight − 1` samples still report the load from before it. Netflix applies
//!    each one to the current estimate: the shrink `× (1 − smoothing × (1 − gradient))`
//!    compounds over one reading (×0.9 per sample at gradient 0.5 is ×0.03 over 35 samples)
//!    and the growth `+ smoothing × queue_size` per sample is `+ smoothing × queue_size ×
//!    limit` per round; in the closed loop the limit swings 3 ↔ 35 against a 16-worker
//!    upstream. Here a success that would change the limit opens a round of `inflight`
//!    samples, and every target in it is taken against the limit the round started from
//!    (`base × gradient`, `base + queue_size`): the smoothing still moves the estimate toward
//!    the target sample by sample, but one round moves it at most to the target — at most a
//!    halving (Netflix's floor on the gradient) or `+ queue_size` per round. Failures still
//!    apply one by one against the current estimate (fix 3).
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
    /// The RTT without queueing, as the last probe measured it (lowered by any lower RTT since);
    /// `f64::INFINITY` before the first probe.
    no_load: f64,
    /// Samples of a fully used limit since the last probe.
    since_probe: u64,
    /// The probe under way: the limit to come back to, samples left, the lowest RTT so far.
    probe: Option<Probe>,
    /// Successes left in the round of the last latency step (change 7).
    round_left: u64,
    /// The estimate the open round started from.
    round_base: f64,
    long_window: u64,
    min_limit: u64,
    max_limit: u64,
    decrease_ratio: f64,
    smoothing: f64,
    rtt_tolerance: f64,
    queue_size: f64,
}

/// A no-load probe in progress (see the module docs, change 6).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Probe {
    saved: f64,
    left: u64,
    min_rtt: f64,
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
            no_load: f64::INFINITY,
            since_probe: 0,
            probe: None,
            round_left: 0,
            round_base: 0.0,
            long_window: cfg.long_window,
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

    /// The no-load RTT in nanoseconds the last probe measured (`None` before the first).
    pub fn no_load_rtt_ns(&self) -> Option<f64> {
        self.no_load.is_finite().then_some(self.no_load)
    }

    /// Whether a no-load probe is under way (the limit is halved for one round).
    pub fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// The limit latency targets are taken against (change 7): the round's start while one is
    /// open, else the current estimate.
    fn base(&self) -> f64 {
        if self.round_left > 0 {
            self.round_base
        } else {
            self.estimate
        }
    }

    /// Feeds the RTT averages and returns the target of one success sample, before smoothing.
    fn success_target(&mut self, rtt_ns: u64) -> f64 {
        let short = if rtt_ns == 0 { 1.0 } else { rtt_ns as f64 };
        let long = self.long_rtt.add(short);
        // `long / short > 2` without the division (`short > 0`).
        if long > 2.0 * short {
            // Netflix: recover quickly after a prolonged overload inflated the long RTT.
            self.long_rtt.value *= 0.95;
        }
        // Change 6: a lower RTT is evidence of a lower no-load RTT at once.
        if short < self.no_load {
            self.no_load = short;
        }
        let base = if long < self.no_load {
            long
        } else {
            self.no_load
        };
        // `g = tolerance · base / short`, clamped to [0.5, 1]; the common step (g ≥ 1: no
        // queueing beyond tolerance) needs no division (`short > 0`).
        let scaled = self.rtt_tolerance * base;
        let gradient = if scaled >= short {
            1.0
        } else {
            let g = scaled / short;
            if g < 0.5 { 0.5 } else { g }
        };
        if gradient < 1.0 {
            // Fix 1 (#134): queueing beyond tolerance: shrink, no headroom.
            self.base() * gradient
        } else if short <= long {
            // No queueing seen: probe upward by the headroom.
            self.base() + self.queue_size
        } else {
            // Fix 2: slower than the baseline but within tolerance: hold.
            self.estimate
        }
    }

    /// Change 6: one sample of a probe under way. Returns `true` while it goes on.
    fn probe_step(&mut self, s: &Sample) -> bool {
        let Some(p) = &mut self.probe else {
            return false;
        };
        match s.outcome.for_limit() {
            Outcome::Ignored => return true,
            Outcome::Failure | Outcome::Overload => {
                // Applied to the limit the probe comes back to.
                p.saved = p.saved * (1.0 - self.smoothing)
                    + p.saved * self.decrease_ratio * self.smoothing;
            }
            Outcome::Success => {
                let rtt = if s.rtt_ns == 0 { 1.0 } else { s.rtt_ns as f64 };
                if rtt < p.min_rtt {
                    p.min_rtt = rtt;
                }
            }
        }
        p.left -= 1;
        if p.left > 0 {
            return true;
        }
        let p = self.probe.take().expect("checked above");
        if p.min_rtt.is_finite() {
            self.no_load = p.min_rtt;
        }
        self.estimate = clamp_f(p.saved, self.min_limit, self.max_limit);
        self.since_probe = 0;
        // The readings of the round before the probe are stale now.
        self.round_left = 0;
        true
    }

    /// Change 6: counts a sample of a fully used limit and starts a probe once per window.
    /// `used`: the limit was fully used when the sample came in (`inflight ≥ limit` before it).
    fn maybe_probe(&mut self, used: bool) {
        if !used {
            return;
        }
        self.since_probe += 1;
        if self.since_probe < self.long_window || self.limit() < 2 {
            return;
        }
        let saved = self.estimate;
        self.probe = Some(Probe {
            saved,
            // The calls in flight drain (~limit samples), then half as many report at half load.
            left: ceil_u64(saved * 1.5),
            min_rtt: f64::INFINITY,
        });
        self.estimate = clamp_f(saved / 2.0, self.min_limit, self.max_limit);
    }
}

impl Controller for Gradient2 {
    fn reseed(&mut self, limit: u64) {
        self.estimate = clamp_f(limit as f64, self.min_limit, self.max_limit);
        self.probe = None;
        self.since_probe = 0;
        self.round_left = 0;
    }

    fn on_sample(&mut self, s: Sample) -> u64 {
        if self.probe_step(&s) {
            return self.limit();
        }
        let used = s.inflight >= self.limit();
        let target = match s.outcome.for_limit() {
            Outcome::Ignored => return self.limit(),
            // Fix 3 (#176): no RTT sample, never growth.
            Outcome::Failure | Outcome::Overload => self.estimate * self.decrease_ratio,
            Outcome::Success => {
                let t = self.success_target(s.rtt_ns);
                // Fix 4: the app-limited guard stops growth only.
                let app_limited = t > self.estimate && s.inflight.saturating_mul(2) < self.limit();
                // Change 7: successes count down the open round, or open one.
                if self.round_left > 0 {
                    self.round_left -= 1;
                } else if !app_limited && t != self.estimate {
                    self.round_base = self.estimate;
                    self.round_left = s.inflight.saturating_sub(1);
                }
                if app_limited || t == self.estimate {
                    self.maybe_probe(used);
                    return self.limit();
                }
                t
            }
        };
        let next = self.estimate * (1.0 - self.smoothing) + target * self.smoothing;
        self.estimate = clamp_f(next, self.min_limit, self.max_limit);
        self.maybe_probe(used);
        self.limit()
    }

    fn limit(&self) -> u64 {
        floor_clamped(self.estimate, self.min_limit, self.max_limit)
    }

    fn estimate(&self) -> f64 {
        self.estimate
    }
}

/// `x.ceil() as u64` for a finite `x >= 0`, without `f64::ceil` (not in `core`: no_std).
fn ceil_u64(x: f64) -> u64 {
    let t = x as u64;
    if (t as f64) < x { t + 1 } else { t }
}
