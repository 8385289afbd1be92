//! Adaptive concurrency limit controllers (docs/design.md §6): AIMD and Gradient2.
//!
//! A controller turns a stream of [`Sample`]s — one per finished call, grant → release time —
//! into a concurrency limit. It is a pure, allocation-free state machine over `core` only: it
//! reads no clock (the host measures the RTT), touches no atomics, and knows nothing of the
//! [`Bulkhead`](crate::Bulkhead). The caller feeds one sample at a time through
//! [`Controller::on_sample`] and applies the returned limit with
//! [`Bulkhead::set_limit`](crate::Bulkhead::set_limit); in-flight work is never revoked by a
//! shrink. Feeding is `&mut self`: a host that completes calls on many threads serialises the
//! feed (Netflix runs every update under `synchronized onSample` for the same reason).
//!
//! | algorithm | type | rule |
//! |---|---|---|
//! | `aimd` | [`Aimd`] | per round of `limit` successes ≤ target: `+increase_step`; > target: `× decrease_ratio` once per round; per failure: `× decrease_ratio` |
//! | `gradient2` (default) | [`Gradient2`] | toward `round start × clamp(tolerance × base_rtt / rtt, 0.5, 1)` (+ headroom when unqueued), smoothed; `base_rtt = min(long, no-load probe)` |
//!
//! # Rounds
//! A sample reports the load that was in flight while its call ran, so after the limit moves,
//! the next `inflight − 1` samples still describe the old limit. Both controllers therefore
//! act on latency once per *round* (`inflight` samples), as TCP acts on congestion once per
//! window (RFC 5681), rather than once per sample as Netflix's do; applied per sample, one
//! reading is counted `inflight` times, and in a closed loop the limit swings between the
//! minimum and the ceiling (`tests/tests/adaptive_capacity.rs` pins both: the limit stays in
//! `[C/3, 3C]` with its mean in `[C, 2C]` against an upstream of `C` workers, `C` = 16 → 4 →
//! 16). Failures still act one by one: a failure is a direct signal, not a reading of load.
//!
//! Both keep the limit as `f64` internally (Netflix truncates to `int` on every update, which
//! makes small smoothed steps vanish; `tower-acc` keeps a float for the same reason) and return
//! `floor(limit)` clamped to `[min_limit, max_limit]`.
//!
//! # Outcomes
//! [`Outcome::Ignored`] — cancellation, and hullguard's own rejections before the call started
//! (`concurrency_limit`, `queue_limit`, `key_limit`, `timeout`, `shutdown`, `circuit_open`,
//! `aborted`) — changes nothing: no limit move, no RTT sample (docs/design.md §6.2; Netflix
//! PR #146, hullguard case C21). [`Outcome::Failure`] never grows the limit and never feeds an
//! RTT average: a dropped or failed call often finishes almost at once, and Netflix
//! `Gradient2Limit` ignoring `didDrop` let such near-zero RTTs *raise* the limit (Netflix #176).
//!
//! # Example
//! ```
//! use hullguard_core::adaptive::{AdaptiveConfig, AdaptiveController, Algorithm, Controller,
//!     Outcome, Sample};
//! let cfg = AdaptiveConfig { algorithm: Algorithm::Aimd, ..AdaptiveConfig::for_max_concurrent(20) };
//! let mut c = AdaptiveController::new(&cfg)?;
//! assert_eq!(c.limit(), 20);
//! let failed = Sample { rtt_ns: 1_000_000, inflight: 20, outcome: Outcome::Failure };
//! assert_eq!(c.on_sample(failed), 14); // floor(20 × 0.7)
//! let cancelled = Sample { outcome: Outcome::Ignored, ..failed };
//! assert_eq!(c.on_sample(cancelled), 14);
//! # Ok::<(), hullguard_core::adaptive::AdaptiveConfigError>(())
//! ```

use core::fmt;

use crate::limits::{DEFAULT_MAX_CONCURRENT, MAX_PERMITS};

mod aimd;
mod gradient2;
mod shared;

pub use aimd::Aimd;
pub use gradient2::Gradient2;
pub use shared::{AdaptiveStats, SharedController};

pub use crate::outcome::Outcome;

/// One finished call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sample {
    /// Grant → release time in nanoseconds (0 is treated as 1 ns).
    pub rtt_ns: u64,
    /// Calls in flight when this one finished (before its permits return), itself included.
    pub inflight: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// A limit controller, updated by one sample at a time.
pub trait Controller {
    /// Feeds one sample and returns the new limit, an integer in `[min_limit, max_limit]`.
    fn on_sample(&mut self, s: Sample) -> u64;
    /// The current limit, an integer in `[min_limit, max_limit]`.
    fn limit(&self) -> u64;
    /// The internal (fractional) limit estimate, in `[min_limit, max_limit]`.
    fn estimate(&self) -> f64;
    /// Restarts the controller from `limit` (clamped to `[min_limit, max_limit]`): the host
    /// set the limit by hand (`set_limit`), and the next sample moves on from there.
    fn reseed(&mut self, limit: u64);
}

/// Which controller [`AdaptiveController::new`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Additive increase, multiplicative decrease against `target_latency_ns`.
    Aimd,
    /// Netflix Gradient2 with hullguard's fixes (the recommended one).
    #[default]
    Gradient2,
}

impl Algorithm {
    /// `"aimd"` or `"gradient2"`, as every layer spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Algorithm::Aimd => "aimd",
            Algorithm::Gradient2 => "gradient2",
        }
    }

    /// Parses [`as_str`](Self::as_str)'s spelling.
    pub fn parse(s: &str) -> Option<Algorithm> {
        match s {
            "aimd" => Some(Algorithm::Aimd),
            "gradient2" => Some(Algorithm::Gradient2),
            _ => None,
        }
    }
}

/// The `adaptive` options (docs/design.md §6), one shape for both algorithms.
///
/// `target_latency_ns`, `increase_step` are AIMD's; `smoothing`, `rtt_tolerance`, `long_window`,
/// `queue_size` are Gradient2's; `decrease_ratio` is AIMD's back-off and Gradient2's back-off on
/// a failure. All are validated whichever algorithm is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// The controller; default [`Algorithm::Gradient2`].
    pub algorithm: Algorithm,
    /// The starting limit, `min_limit ..= max_limit`, or 0 for "start at `max_limit`" (the
    /// docs/design.md §6 default `initial_limit` = `max_limit`; what a binding passes when the user set
    /// `max_limit` but no `initial_limit`). [`Self::for_max_concurrent`] sets `max_concurrent`.
    pub initial_limit: u64,
    /// The floor, `1 ..= max_limit`; default 1.
    pub min_limit: u64,
    /// The ceiling, `1 ..= MAX_PERMITS`; default `max_concurrent`.
    pub max_limit: u64,
    /// AIMD: a success slower than this is a congestion signal; default 500 ms. Must be ≥ 1.
    pub target_latency_ns: u64,
    /// AIMD: the additive increase, `1 ..= MAX_PERMITS`; default 1.
    pub increase_step: u64,
    /// The multiplicative back-off, in `(0, 1)`; default 0.7.
    pub decrease_ratio: f64,
    /// Gradient2: weight of the new estimate, in `(0, 1]`; default 0.2.
    pub smoothing: f64,
    /// Gradient2: RTT growth over the long-term RTT tolerated before shrinking, finite and
    /// `≥ 1`; default 1.5.
    pub rtt_tolerance: f64,
    /// Gradient2: samples in the long-term RTT average, `1 ..= 2³²`; default 600.
    pub long_window: u64,
    /// Gradient2: headroom added while no queueing is seen, `0 ..= MAX_PERMITS`; default 4.
    pub queue_size: u64,
}

impl AdaptiveConfig {
    /// The defaults for a bulkhead of the default [`Config`](crate::Config) (`max_concurrent` 10).
    pub const DEFAULT: AdaptiveConfig = AdaptiveConfig::for_max_concurrent(DEFAULT_MAX_CONCURRENT);

    /// The docs/design.md §6 defaults for a bulkhead of `max_concurrent`: `initial_limit` = `max_limit`
    /// = `max_concurrent`, `min_limit` 1, `target_latency` 500 ms, `increase_step` 1,
    /// `decrease_ratio` 0.7, `smoothing` 0.2, `rtt_tolerance` 1.5, `long_window` 600,
    /// `queue_size` 4, algorithm Gradient2.
    pub const fn for_max_concurrent(max_concurrent: u64) -> AdaptiveConfig {
        AdaptiveConfig {
            algorithm: Algorithm::Gradient2,
            initial_limit: max_concurrent,
            min_limit: 1,
            max_limit: max_concurrent,
            target_latency_ns: 500_000_000,
            increase_step: 1,
            decrease_ratio: 0.7,
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            long_window: 600,
            queue_size: 4,
        }
    }

    /// The limit a controller starts at: `initial_limit`, or `max_limit` when it is 0.
    pub const fn start_limit(&self) -> u64 {
        if self.initial_limit == 0 {
            self.max_limit
        } else {
            self.initial_limit
        }
    }

    /// Checks every option, naming the first bad one.
    ///
    /// # Errors
    /// The [`AdaptiveConfigError`] variant of the first option out of range, checked in the
    /// order `max_limit`, `min_limit`, `initial_limit`, `target_latency`, `increase_step`,
    /// `decrease_ratio`, `smoothing`, `rtt_tolerance`, `long_window`, `queue_size`.
    pub fn validate(&self) -> Result<(), AdaptiveConfigError> {
        use AdaptiveConfigError as E;
        if self.max_limit == 0 || self.max_limit > MAX_PERMITS {
            return Err(E::MaxLimit);
        }
        if self.min_limit == 0 || self.min_limit > self.max_limit {
            return Err(E::MinLimit);
        }
        if self.initial_limit != 0
            && (self.initial_limit < self.min_limit || self.initial_limit > self.max_limit)
        {
            return Err(E::InitialLimit);
        }
        if self.target_latency_ns == 0 {
            return Err(E::TargetLatency);
        }
        if self.increase_step == 0 || self.increase_step > MAX_PERMITS {
            return Err(E::IncreaseStep);
        }
        // Written so that NaN fails every check.
        if !(self.decrease_ratio > 0.0 && self.decrease_ratio < 1.0) {
            return Err(E::DecreaseRatio);
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(E::Smoothing);
        }
        if !(self.rtt_tolerance >= 1.0 && self.rtt_tolerance.is_finite()) {
            return Err(E::RttTolerance);
        }
        if self.long_window == 0 || self.long_window > 1 << 32 {
            return Err(E::LongWindow);
        }
        if self.queue_size > MAX_PERMITS {
            return Err(E::QueueSize);
        }
        Ok(())
    }
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// An `adaptive` option out of range; the variant names the option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdaptiveConfigError {
    /// `max_limit` is 0 or above [`MAX_PERMITS`].
    MaxLimit,
    /// `min_limit` is 0 or above `max_limit`.
    MinLimit,
    /// `initial_limit` is outside `min_limit ..= max_limit`.
    InitialLimit,
    /// `target_latency` is zero.
    TargetLatency,
    /// `increase_step` is 0 or above [`MAX_PERMITS`].
    IncreaseStep,
    /// `decrease_ratio` is outside `(0, 1)` or NaN.
    DecreaseRatio,
    /// `smoothing` is outside `(0, 1]` or NaN.
    Smoothing,
    /// `rtt_tolerance` is below 1, infinite or NaN.
    RttTolerance,
    /// `long_window` is 0 or above 2³².
    LongWindow,
    /// `queue_size` is above [`MAX_PERMITS`].
    QueueSize,
}

impl AdaptiveConfigError {
    /// The option's name as every layer spells it (Python keys: `"decrease_ratio"`, …).
    pub const fn option(&self) -> &'static str {
        match self {
            AdaptiveConfigError::MaxLimit => "max_limit",
            AdaptiveConfigError::MinLimit => "min_limit",
            AdaptiveConfigError::InitialLimit => "initial_limit",
            AdaptiveConfigError::TargetLatency => "target_latency",
            AdaptiveConfigError::IncreaseStep => "increase_step",
            AdaptiveConfigError::DecreaseRatio => "decrease_ratio",
            AdaptiveConfigError::Smoothing => "smoothing",
            AdaptiveConfigError::RttTolerance => "rtt_tolerance",
            AdaptiveConfigError::LongWindow => "long_window",
            AdaptiveConfigError::QueueSize => "queue_size",
        }
    }

    const fn rule(&self) -> &'static str {
        match self {
            AdaptiveConfigError::MaxLimit => "must be in 1..=MAX_PERMITS",
            AdaptiveConfigError::MinLimit => "must be in 1..=max_limit",
            AdaptiveConfigError::InitialLimit => "must be in min_limit..=max_limit",
            AdaptiveConfigError::TargetLatency => "must be greater than zero",
            AdaptiveConfigError::IncreaseStep => "must be in 1..=MAX_PERMITS",
            AdaptiveConfigError::DecreaseRatio => "must be in (0, 1)",
            AdaptiveConfigError::Smoothing => "must be in (0, 1]",
            AdaptiveConfigError::RttTolerance => "must be finite and >= 1",
            AdaptiveConfigError::LongWindow => "must be in 1..=2^32",
            AdaptiveConfigError::QueueSize => "must be in 0..=MAX_PERMITS",
        }
    }
}

impl fmt::Display for AdaptiveConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "adaptive {} {}", self.option(), self.rule())
    }
}

impl core::error::Error for AdaptiveConfigError {}

/// Either controller, chosen by [`AdaptiveConfig::algorithm`] (an enum, so no allocation).
#[derive(Debug, Clone, PartialEq)]
pub enum AdaptiveController {
    /// See [`Aimd`].
    Aimd(Aimd),
    /// See [`Gradient2`].
    Gradient2(Gradient2),
}

impl AdaptiveController {
    /// Validates `cfg` and builds the controller it names, starting at `initial_limit`.
    ///
    /// # Errors
    /// As [`AdaptiveConfig::validate`].
    pub fn new(cfg: &AdaptiveConfig) -> Result<Self, AdaptiveConfigError> {
        Ok(match cfg.algorithm {
            Algorithm::Aimd => AdaptiveController::Aimd(Aimd::new(cfg)?),
            Algorithm::Gradient2 => AdaptiveController::Gradient2(Gradient2::new(cfg)?),
        })
    }

    /// Which algorithm this is.
    pub const fn algorithm(&self) -> Algorithm {
        match self {
            AdaptiveController::Aimd(_) => Algorithm::Aimd,
            AdaptiveController::Gradient2(_) => Algorithm::Gradient2,
        }
    }
}

impl Controller for AdaptiveController {
    fn on_sample(&mut self, s: Sample) -> u64 {
        match self {
            AdaptiveController::Aimd(c) => c.on_sample(s),
            AdaptiveController::Gradient2(c) => c.on_sample(s),
        }
    }

    fn limit(&self) -> u64 {
        match self {
            AdaptiveController::Aimd(c) => c.limit(),
            AdaptiveController::Gradient2(c) => c.limit(),
        }
    }

    fn estimate(&self) -> f64 {
        match self {
            AdaptiveController::Aimd(c) => c.estimate(),
            AdaptiveController::Gradient2(c) => c.estimate(),
        }
    }

    fn reseed(&mut self, limit: u64) {
        match self {
            AdaptiveController::Aimd(c) => c.reseed(limit),
            AdaptiveController::Gradient2(c) => c.reseed(limit),
        }
    }
}

/// `floor(x)` of a value already clamped to `[min, max]` (both ≥ 1), as an integer limit.
///
/// `as` truncates toward zero, which is `floor` for the non-negative values used here; the
/// final clamp guards against rounding at the ends of the range.
fn floor_clamped(x: f64, min: u64, max: u64) -> u64 {
    (x as u64).clamp(min, max)
}

/// Clamps a float estimate to `[min, max]`; NaN (impossible from validated inputs) goes to `min`.
fn clamp_f(x: f64, min: u64, max: u64) -> f64 {
    let (lo, hi) = (min as f64, max as f64);
    if x >= hi {
        hi
    } else if x >= lo {
        x
    } else {
        lo
    }
}
