//! A lock-free circuit breaker (docs/design.md §6): closed / open / half-open plus a generation in one
//! atomic word, two trip modes (consecutive failures, error rate over a rolling window of
//! epoch-stamped buckets), exactly `half_open_max_calls` probes, and a mandatory half-open timeout.
//!
//! Modelled on resilience4j's `CircuitBreakerStateMachine`, without its traps (ANCHORS-ENGINES §5):
//! no allocation per call (r4j's lock-free window allocates per record), a half-open that cannot
//! get stuck (r4j #903/#935: a probe that never reports times out), no extra calls around
//! OPEN → HALF_OPEN (r4j #1432: the transition *and* the first probe slot are one CAS), and a
//! first trip that needs `volume_threshold` calls, not a full window (r4j #1731).
//!
//! The core arms no timer: every call takes `now_ns` from the host's monotonic clock, and
//! `open` becomes `half_open` when an admission, a [`Breaker::state`] or a [`Breaker::snapshot`]
//! finds `now ≥ opened_at + open_duration`. Every method that can commit a transition returns it
//! as a [`Transition`]; the caller fires [`Observer::on_state_change`](crate::event::Observer::on_state_change) after the commit.
//!
//! ```text
//! `Breaker::word` layout (one AtomicWord; every transition is one CAS on it):
//!   bits 0..2    state       - 0 closed, 1 open, 2 half_open
//!   bits 2..10   probes      - half-open probe slots taken (≤ half_open_max_calls ≤ 255); 0 otherwise
//!   bits 10..    generation  - +1 on every transition (wraps: 54 bits, 22 on 32-bit targets).
//!                              An `Admit` carries the generation it was admitted in; an outcome
//!                              whose generation is not the current one is ignored.
//!
//! Side words, each written *before* the state CAS that makes it meaningful and read only after
//! an Acquire load of `word` that saw that CAS (so a Relaxed access suffices):
//!   opened_at    stamp of the OPEN transition        (read in state open)
//!   probe_at     stamp of the latest probe admission (read in state half_open, for the timeout)
//!   floor        window epoch the current closed period began in | FLOOR_VALID (later epochs count)
//! A side word is updated by compare_exchange from the value read after the state load, so a
//! thread that was preempted across a whole round cannot write its old time into a later round;
//! racers of the *same* round may leave the latest of their `now`s (they are concurrent).
//!
//! `buckets[i]` (error-rate window; bucket i holds epochs ≡ i mod P, P = error_rate_buckets
//! rounded up to a power of two; the window counts the buckets whose epoch is among the last
//! `error_rate_buckets`). An epoch is `⌊now_ns / bucket_ns⌋`, computed without a division:
//! `q = ⌊now_ns · m / 2⁶⁴⌋` with `m = ⌊(2⁶⁴ − 1) / bucket_ns⌋` is the quotient or one less, and one
//! compare corrects it (the invariant-divisor method of Granlund and Montgomery, 1994); a mask
//! replaces the modulo:
//!   bits 0..C        successes   (C = 20, 12 on 32-bit targets; at the top both counts halve,
//!   bits C..2C       failures     which keeps the rate)
//!   bits 2C..        epoch tag   - epoch mod 2^E (E = 24, 8 on 32-bit); a stale tag is reset by
//!                                  the CAS that records into it
//!
//! `consecutive`: gen tag (upper half) | count of consecutive failures (lower half).
//! ```
//!
//! Stamps are `now_ns` on targets with 64-bit atomics and `now_ns >> 20` (≈1.05 ms) on 32-bit
//! ones, compared with wrapping arithmetic, so durations are capped ([`MAX_DURATION`]).
//!
//! # Progress
//! Every operation is lock-free: admission, record and state reads are bounded sequences of
//! loads and CAS loops on single words, and a CAS fails only because another thread's CAS on
//! the same word succeeded. No operation waits for another thread to finish a step: side words
//! are written before the transition that publishes them, never after. Nothing allocates.
//! On targets without CAS (`critical-section`) the RMWs are short critical sections.
//!
//! # Examples
//! ```
//! use hullguard_core::breaker::{Breaker, BreakerConfig, CircuitState, Outcome};
//! let b = Breaker::new(BreakerConfig { failure_threshold: 2, ..BreakerConfig::DEFAULT })?;
//! for _ in 0..2 {
//!     let a = b.try_admit(0).unwrap();
//!     let _ = b.record(a, Outcome::Failure, 0);
//! }
//! assert_eq!(b.state(1).0, CircuitState::Open);
//! assert!(b.try_admit(1).is_err());
//! # Ok::<(), hullguard_core::breaker::BreakerConfigError>(())
//! ```

use core::{fmt, time::Duration};

use crate::sync::{AtomicWord, Ordering::*, Word};

const STATE_MASK: Word = 0b11;
const PROBE_SHIFT: u32 = 2;
const PROBE_ONE: Word = 1 << PROBE_SHIFT;
const PROBE_MAX: Word = 0xff;
const GEN_SHIFT: u32 = 10;

/// Largest `half_open_max_calls` (the probe field is 8 bits).
pub const MAX_HALF_OPEN_CALLS: u32 = PROBE_MAX as u32;
/// Largest `error_rate_buckets` (the buckets are a fixed array: no allocation).
pub const MAX_BUCKETS: u32 = 32;

#[cfg(target_has_atomic = "64")]
mod layout {
    pub(super) const TICK_SHIFT: u32 = 0;
    pub(super) const COUNT_BITS: u32 = 20;
    pub(super) const TAG_BITS: u32 = 24;
    pub(super) const HALF_BITS: u32 = 32;
}
#[cfg(not(target_has_atomic = "64"))]
mod layout {
    pub(super) const TICK_SHIFT: u32 = 20;
    pub(super) const COUNT_BITS: u32 = 12;
    pub(super) const TAG_BITS: u32 = 8;
    pub(super) const HALF_BITS: u32 = 16;
}
use layout::*;

const COUNT_MAX: Word = (1 << COUNT_BITS) - 1;
const TAG_MASK: Word = (1 << TAG_BITS) - 1;
const FLOOR_VALID: Word = 1 << TAG_BITS;
const HALF_MASK: Word = (1 << HALF_BITS) - 1;

/// Largest `open_duration` / `half_open_timeout` / `error_rate_window`: 2⁶² ns with 64-bit
/// atomics; 2⁵⁰ ns (≈13 days) on 32-bit targets, where stamps are 32-bit and wrap.
#[cfg(target_has_atomic = "64")]
pub const MAX_DURATION: Duration = Duration::from_nanos(1 << 62);
/// Largest `open_duration` / `half_open_timeout` / `error_rate_window` on this target (≈13 days).
#[cfg(not(target_has_atomic = "64"))]
pub const MAX_DURATION: Duration = Duration::from_nanos(1 << 50);

/// Largest `failure_threshold` and `volume_threshold`.
pub const MAX_THRESHOLD: u32 = COUNT_MAX as u32;

pub use crate::circuit::CircuitState;

/// The state bits of a breaker word.
const fn state_of(word: Word) -> CircuitState {
    match word & STATE_MASK {
        0 => CircuitState::Closed,
        1 => CircuitState::Open,
        _ => CircuitState::HalfOpen,
    }
}

pub use crate::outcome::Outcome;

/// A committed state change. Fire it (see `Transition::notify`, in `crate::event`) after the call that returned
/// it; exactly one caller gets each transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state before the commit.
    pub old: CircuitState,
    /// The state after the commit.
    pub new: CircuitState,
    /// The generation the commit created.
    pub generation: u64,
}

/// Admission to run one call; pass it back to [`Breaker::record`] with the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "record the call's outcome with Breaker::record"]
pub struct Admit {
    word: Word,
    /// A transition this admission committed (open → half-open: this call is its first probe).
    pub transition: Option<Transition>,
}

impl Admit {
    /// The breaker word this call was admitted with (stored in a queued waiter's cell).
    pub(crate) const fn word(&self) -> Word {
        self.word
    }

    /// An admission rebuilt from [`word`](Self::word) (its transition was fired already).
    pub(crate) const fn from_word(word: Word) -> Admit {
        Admit {
            word,
            transition: None,
        }
    }

    /// The generation the call was admitted in.
    pub fn generation(&self) -> u64 {
        (self.word >> GEN_SHIFT) as u64
    }
    /// Whether the call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        state_of(self.word) == CircuitState::HalfOpen
    }
}

/// The breaker rejected the call (`circuit_open`): it is open, or half-open with every probe
/// slot taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    /// The state that rejected (`Open` or `HalfOpen`).
    pub state: CircuitState,
    /// A transition this check committed (a half-open probe timed out: half-open → open).
    pub transition: Option<Transition>,
}

impl fmt::Display for Open {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "circuit_open (breaker is {})", self.state)
    }
}

/// Breaker options (docs/design.md §6.1). Both trip modes are always on; either opens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker, `1 ..= MAX_THRESHOLD`. Default 5.
    pub failure_threshold: u32,
    /// Failure fraction over the window that opens it, in `(0, 1]`. Default 0.5.
    pub error_rate_threshold: f64,
    /// Length of the rolling window. Default 10 s.
    pub error_rate_window: Duration,
    /// Buckets of the window, `1 ..= MAX_BUCKETS`, each `window / buckets` long. Default 10.
    pub error_rate_buckets: u32,
    /// Calls in the window before the error rate counts, `1 ..= MAX_THRESHOLD`. Default 20.
    pub volume_threshold: u32,
    /// Time open before half-open. Default 30 s.
    pub open_duration: Duration,
    /// Probes admitted while half-open, `1 ..= MAX_HALF_OPEN_CALLS`. Default 1.
    pub half_open_max_calls: u32,
    /// A probe that has not reported within this counts as a failure. Default 30 s.
    pub half_open_timeout: Duration,
}

impl BreakerConfig {
    /// The defaults (Hystrix's numbers), usable in `const` items.
    pub const DEFAULT: BreakerConfig = BreakerConfig {
        failure_threshold: 5,
        error_rate_threshold: 0.5,
        error_rate_window: Duration::from_secs(10),
        error_rate_buckets: 10,
        volume_threshold: 20,
        open_duration: Duration::from_secs(30),
        half_open_max_calls: 1,
        half_open_timeout: Duration::from_secs(30),
    };

    /// Checks every option, naming the first bad one.
    ///
    /// # Errors
    /// The [`BreakerConfigError`] variant of the first option out of its documented range.
    pub fn validate(&self) -> Result<(), BreakerConfigError> {
        use BreakerConfigError as E;
        let dur_ok = |d: Duration| !d.is_zero() && d <= MAX_DURATION;
        if self.failure_threshold == 0 || self.failure_threshold > MAX_THRESHOLD {
            return Err(E::FailureThreshold);
        }
        let r = self.error_rate_threshold;
        if !(r > 0.0 && r <= 1.0) {
            return Err(E::ErrorRateThreshold);
        }
        if self.error_rate_buckets == 0 || self.error_rate_buckets > MAX_BUCKETS {
            return Err(E::ErrorRateBuckets);
        }
        if !dur_ok(self.error_rate_window)
            || self.error_rate_window.as_nanos() < u128::from(self.error_rate_buckets)
        {
            return Err(E::ErrorRateWindow);
        }
        if self.volume_threshold == 0 || self.volume_threshold > MAX_THRESHOLD {
            return Err(E::VolumeThreshold);
        }
        if !dur_ok(self.open_duration) {
            return Err(E::OpenDuration);
        }
        if self.half_open_max_calls == 0 || self.half_open_max_calls > MAX_HALF_OPEN_CALLS {
            return Err(E::HalfOpenMaxCalls);
        }
        if !dur_ok(self.half_open_timeout) {
            return Err(E::HalfOpenTimeout);
        }
        Ok(())
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A [`BreakerConfig`] option out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BreakerConfigError {
    /// `failure_threshold` outside `1 ..= MAX_THRESHOLD`.
    FailureThreshold,
    /// `error_rate_threshold` not in `(0, 1]` (or NaN).
    ErrorRateThreshold,
    /// `error_rate_window` zero, above [`MAX_DURATION`], or shorter than one ns per bucket.
    ErrorRateWindow,
    /// `error_rate_buckets` outside `1 ..= MAX_BUCKETS`.
    ErrorRateBuckets,
    /// `volume_threshold` outside `1 ..= MAX_THRESHOLD`.
    VolumeThreshold,
    /// `open_duration` zero or above [`MAX_DURATION`].
    OpenDuration,
    /// `half_open_max_calls` outside `1 ..= MAX_HALF_OPEN_CALLS`.
    HalfOpenMaxCalls,
    /// `half_open_timeout` zero or above [`MAX_DURATION`].
    HalfOpenTimeout,
}

impl BreakerConfigError {
    /// The option's name as every layer spells it (`"failure_threshold"`, …).
    pub const fn option(&self) -> &'static str {
        match self {
            BreakerConfigError::FailureThreshold => "failure_threshold",
            BreakerConfigError::ErrorRateThreshold => "error_rate_threshold",
            BreakerConfigError::ErrorRateWindow => "error_rate_window",
            BreakerConfigError::ErrorRateBuckets => "error_rate_buckets",
            BreakerConfigError::VolumeThreshold => "volume_threshold",
            BreakerConfigError::OpenDuration => "open_duration",
            BreakerConfigError::HalfOpenMaxCalls => "half_open_max_calls",
            BreakerConfigError::HalfOpenTimeout => "half_open_timeout",
        }
    }
}

impl fmt::Display for BreakerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "breaker option {} is out of range", self.option())
    }
}

impl core::error::Error for BreakerConfigError {}

/// One read of a breaker's state and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitStats {
    /// The state (after any lazy transition this read committed).
    pub state: CircuitState,
    /// The current generation.
    pub generation: u64,
    /// Consecutive failures in the current closed generation.
    pub consecutive_failures: u64,
    /// Calls (successes + failures) in the rolling window of the current closed period.
    pub window_requests: u64,
    /// Failures in that window.
    pub window_failures: u64,
    /// When the breaker last opened (host ns; 0 if never; ≈1 ms precision on 32-bit targets).
    pub opened_at_ns: u64,
    /// A transition this read committed; the caller fires it.
    pub transition: Option<Transition>,
}

/// A lock-free circuit breaker. See the module docs for the protocol and word layout.
pub struct Breaker {
    word: AtomicWord,
    opened_at: AtomicWord,
    probe_at: AtomicWord,
    floor: AtomicWord,
    consecutive: AtomicWord,
    buckets: [AtomicWord; MAX_BUCKETS as usize],
    // Derived from the config at construction.
    failure_threshold: Word,
    rate_ppm: u64,
    volume_threshold: u64,
    n_buckets: u64,
    /// `P − 1`: the mask of a bucket index (module docs).
    bucket_mask: u64,
    /// `m`: epochs by multiplication (module docs).
    epoch_factor: u64,
    bucket_ns: u64,
    open_ticks: Word,
    half_open_ticks: Word,
    max_probes: Word,
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.word.load(Relaxed);
        f.debug_struct("Breaker")
            .field("state", &state_of(w))
            .field("generation", &(w >> GEN_SHIFT))
            .field("probes", &probes(w))
            .finish_non_exhaustive()
    }
}

#[inline]
const fn probes(w: Word) -> Word {
    (w >> PROBE_SHIFT) & PROBE_MAX
}

/// The word of the next generation in state `to` with `p` probes taken.
#[inline]
const fn next(w: Word, to: CircuitState, p: Word) -> Word {
    ((w >> GEN_SHIFT).wrapping_add(1) << GEN_SHIFT) | (p << PROBE_SHIFT) | to as Word
}

#[inline]
const fn tick(now_ns: u64) -> Word {
    (now_ns >> TICK_SHIFT) as Word
}

/// `⌊n / d⌋` for `d ≥ 1` given `m = ⌊(2⁶⁴ − 1) / d⌋`: a multiply and a compare (Granlund and
/// Montgomery, "Division by invariant integers using multiplication", PLDI 1994). The product's
/// high word `q` satisfies `⌊n/d⌋ − 1 ≤ q ≤ ⌊n/d⌋`, so one correction makes it exact.
#[inline]
const fn div_by_factor(n: u64, m: u64, d: u64) -> u64 {
    let q = ((n as u128 * m as u128) >> 64) as u64;
    // `n − q·d < 2d`: no overflow.
    q + ((n - q * d >= d) as u64)
}

/// Duration in stamp ticks, rounded up; validated ≤ MAX_DURATION so it fits.
fn ticks(d: Duration) -> Word {
    let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
    (ns.div_ceil(1 << TICK_SHIFT)) as Word
}

/// `now ≥ since + dur` with wrapping stamps (a `since` in the future is not reached).
#[inline]
const fn reached(now: Word, since: Word, dur: Word) -> bool {
    let e = now.wrapping_sub(since);
    e <= Word::MAX / 2 && e >= dur
}

/// Writes `new` into a side word if it still holds `seen` (read after the state load): one
/// write per round, never into a later round (module docs). Relaxed: the state CAS that
/// follows (AcqRel) publishes it to the Acquire load of `word` that reads it.
#[inline]
fn stamp(a: &AtomicWord, seen: Word, new: Word) {
    let _ = a.compare_exchange(seen, new, Relaxed, Relaxed);
}

impl Breaker {
    /// A closed breaker, generation 0.
    ///
    /// # Errors
    /// The first bad option, from [`BreakerConfig::validate`].
    pub fn new(config: BreakerConfig) -> Result<Self, BreakerConfigError> {
        config.validate()?;
        let window_ns = config.error_rate_window.as_nanos() as u64;
        let n = u64::from(config.error_rate_buckets);
        // Parts per million: the trip test is integer (`failures · 10⁶ ≥ requests · ppm`).
        let rate_ppm = ((config.error_rate_threshold * 1_000_000.0) as u64).clamp(1, 1_000_000);
        Ok(Breaker {
            word: AtomicWord::new(0),
            opened_at: AtomicWord::new(0),
            probe_at: AtomicWord::new(0),
            floor: AtomicWord::new(0),
            consecutive: AtomicWord::new(0),
            buckets: core::array::from_fn(|_| AtomicWord::new(0)),
            failure_threshold: config.failure_threshold as Word,
            rate_ppm,
            volume_threshold: u64::from(config.volume_threshold),
            n_buckets: n,
            bucket_mask: n.next_power_of_two() - 1,
            epoch_factor: u64::MAX / (window_ns / n),
            bucket_ns: window_ns / n,
            open_ticks: ticks(config.open_duration),
            half_open_ticks: ticks(config.half_open_timeout),
            max_probes: config.half_open_max_calls as Word,
        })
    }

    /// [`try_admit`](Self::try_admit) reading the clock only when the breaker is not closed
    /// (a closed breaker admits without looking at the time).
    ///
    /// # Errors
    /// As [`try_admit`](Self::try_admit).
    pub fn try_admit_with(&self, now_ns: impl FnOnce() -> u64) -> Result<Admit, Open> {
        // Acquire: as in `try_admit`.
        let w = self.word.load(Acquire);
        if state_of(w) == CircuitState::Closed {
            return Ok(Admit {
                word: w,
                transition: None,
            });
        }
        self.try_admit(now_ns())
    }

    /// Whether [`try_admit`](Self::try_admit) at `now_ns` would admit a call, without
    /// committing anything (no transition, no probe slot taken): a dry run, stale as soon as
    /// it returns. Closed: yes; open: once `open_duration` has passed (the call would take the
    /// first probe); half-open: while a probe slot is free and no probe outlived
    /// `half_open_timeout`.
    pub fn would_admit(&self, now_ns: u64) -> bool {
        self.would_admit_with(|| now_ns)
    }

    /// [`would_admit`](Self::would_admit) reading the clock only when the breaker is not
    /// closed (as [`try_admit_with`](Self::try_admit_with) does).
    pub fn would_admit_with(&self, now_ns: impl FnOnce() -> u64) -> bool {
        // Acquire: as in `try_admit`.
        let w = self.word.load(Acquire);
        if state_of(w) == CircuitState::Closed {
            return true;
        }
        let now_ns = now_ns();
        match state_of(w) {
            CircuitState::Closed => true,
            CircuitState::Open => {
                reached(tick(now_ns), self.opened_at.load(Relaxed), self.open_ticks)
            }
            CircuitState::HalfOpen => {
                let expired = probes(w) > 0
                    && reached(
                        tick(now_ns),
                        self.probe_at.load(Relaxed),
                        self.half_open_ticks,
                    );
                !expired && probes(w) < self.max_probes
            }
        }
    }

    /// Asks to run one call at `now_ns`.
    ///
    /// Closed: admitted. Open: rejected until `open_duration` has passed; then exactly one caller
    /// commits open → half-open *and* takes the first probe slot in the same CAS. Half-open:
    /// admitted as a probe while fewer than `half_open_max_calls` slots are taken; a probe slot
    /// held past `half_open_timeout` re-opens the breaker (it counts as a failure).
    ///
    /// # Errors
    /// [`Open`] when the call must fail fast (`circuit_open`).
    pub fn try_admit(&self, now_ns: u64) -> Result<Admit, Open> {
        let t = tick(now_ns);
        // Acquire pairs with the AcqRel transition / probe CAS that wrote this word, so the
        // side words written before that CAS are visible to the Relaxed loads below.
        let mut w = self.word.load(Acquire);
        loop {
            let next_w = match state_of(w) {
                CircuitState::Closed => {
                    return Ok(Admit {
                        word: w,
                        transition: None,
                    });
                }
                CircuitState::Open => {
                    if !reached(t, self.opened_at.load(Relaxed), self.open_ticks) {
                        return Err(Open {
                            state: CircuitState::Open,
                            transition: None,
                        });
                    }
                    stamp(&self.probe_at, self.probe_at.load(Relaxed), t);
                    next(w, CircuitState::HalfOpen, 1)
                }
                CircuitState::HalfOpen => {
                    let seen = self.probe_at.load(Relaxed);
                    if probes(w) > 0 && reached(t, seen, self.half_open_ticks) {
                        match self.reopen(w, t) {
                            Ok(tr) => {
                                return Err(Open {
                                    state: CircuitState::Open,
                                    transition: Some(tr),
                                });
                            }
                            Err(cur) => {
                                w = cur;
                                continue;
                            }
                        }
                    }
                    if probes(w) >= self.max_probes {
                        return Err(Open {
                            state: CircuitState::HalfOpen,
                            transition: None,
                        });
                    }
                    stamp(&self.probe_at, seen, t);
                    w + PROBE_ONE
                }
            };
            // AcqRel: Release publishes `probe_at` (written above) to the timeout check of any
            // thread that Acquire-loads this word; Acquire as for the first load.
            match self.word.compare_exchange(w, next_w, AcqRel, Acquire) {
                Ok(_) => {
                    let transition = (state_of(w) == CircuitState::Open).then_some({
                        Transition {
                            old: CircuitState::Open,
                            new: CircuitState::HalfOpen,
                            generation: (next_w >> GEN_SHIFT) as u64,
                        }
                    });
                    return Ok(Admit {
                        word: next_w,
                        transition,
                    });
                }
                Err(cur) => w = cur,
            }
        }
    }

    /// Records the outcome of an admitted call at `now_ns`; returns the transition it committed.
    ///
    /// Outcomes from an older generation are ignored (a call admitted while closed that ends
    /// after the breaker opened cannot move `opened_at`, C23). Closed: a success resets the
    /// consecutive count; a failure may trip (consecutive ≥ `failure_threshold`, or window calls
    /// ≥ `volume_threshold` with failure rate ≥ `error_rate_threshold`). Half-open probe: success
    /// closes, failure re-opens, `Ignored` gives the slot back; a report after
    /// `half_open_timeout` counts as a failure whatever the outcome.
    pub fn record(&self, admit: Admit, outcome: Outcome, now_ns: u64) -> Option<Transition> {
        let outcome = outcome.for_breaker();
        let t = tick(now_ns);
        let gen_mask = !(STATE_MASK | (PROBE_MAX << PROBE_SHIFT));
        // Acquire: as in `try_admit` (side words of the transition that made this word).
        let mut w = self.word.load(Acquire);
        loop {
            if w & gen_mask != admit.word & gen_mask {
                return None; // stale generation
            }
            match state_of(w) {
                CircuitState::Closed => return self.record_closed(w, outcome, now_ns, t),
                CircuitState::Open => return None, // unreachable: a generation starts once
                CircuitState::HalfOpen => {
                    let late = reached(t, self.probe_at.load(Relaxed), self.half_open_ticks);
                    let r = match (outcome, late) {
                        (_, true) | (Outcome::Failure, false) => self.reopen(w, t).map(Some),
                        (Outcome::Success | Outcome::Overload, false) => {
                            self.close(w, now_ns).map(Some)
                        }
                        (Outcome::Ignored, false) => {
                            // AcqRel: Release so the slot's return orders after this probe's
                            // reads; Acquire for the retry. Pairs with the probe CAS in try_admit.
                            self.word
                                .compare_exchange(w, w - PROBE_ONE, AcqRel, Acquire)
                                .map(|_| None)
                        }
                    };
                    match r {
                        Ok(tr) => return tr,
                        Err(cur) => w = cur,
                    }
                }
            }
        }
    }

    fn record_closed(&self, w: Word, outcome: Outcome, now_ns: u64, t: Word) -> Option<Transition> {
        let gen_tag = (w >> GEN_SHIFT) & HALF_MASK;
        let consecutive = match outcome {
            Outcome::Ignored => return None,
            Outcome::Success | Outcome::Overload => {
                self.count_consecutive(gen_tag, false);
                self.count_window(now_ns, false);
                return None;
            }
            Outcome::Failure => {
                let c = self.count_consecutive(gen_tag, true);
                self.count_window(now_ns, true);
                c
            }
        };
        let trip = consecutive >= self.failure_threshold || {
            let (requests, failures) = self.window(now_ns);
            requests >= self.volume_threshold
                && u128::from(failures) * 1_000_000
                    >= u128::from(requests) * u128::from(self.rate_ppm)
        };
        if !trip {
            return None;
        }
        stamp(&self.opened_at, self.opened_at.load(Relaxed), t);
        let new = next(w, CircuitState::Open, 0);
        // AcqRel: Release publishes `opened_at` to the Acquire loads of `word` in try_admit /
        // state; Acquire is not needed on failure (someone else tripped this generation).
        self.word
            .compare_exchange(w, new, AcqRel, Relaxed)
            .ok()
            .map(|_| Transition {
                old: CircuitState::Closed,
                new: CircuitState::Open,
                generation: (new >> GEN_SHIFT) as u64,
            })
    }

    /// half_open(w) → open, new generation, fresh `opened_at`. `Err` carries the current word.
    fn reopen(&self, w: Word, t: Word) -> Result<Transition, Word> {
        stamp(&self.opened_at, self.opened_at.load(Relaxed), t);
        let new = next(w, CircuitState::Open, 0);
        // AcqRel: Release publishes `opened_at`; Acquire pairs with the CAS that wrote `cur`.
        self.word.compare_exchange(w, new, AcqRel, Acquire)?;
        Ok(Transition {
            old: state_of(w),
            new: CircuitState::Open,
            generation: (new >> GEN_SHIFT) as u64,
        })
    }

    /// half_open(w) → closed, new generation; the window restarts at `floor`.
    fn close(&self, w: Word, now_ns: u64) -> Result<Transition, Word> {
        let epoch_tag = self.epoch(now_ns) as Word & TAG_MASK;
        stamp(
            &self.floor,
            self.floor.load(Relaxed),
            epoch_tag | FLOOR_VALID,
        );
        let new = next(w, CircuitState::Closed, 0);
        // AcqRel: Release publishes `floor` to window reads after an Acquire load of `word`.
        self.word.compare_exchange(w, new, AcqRel, Acquire)?;
        Ok(Transition {
            old: CircuitState::HalfOpen,
            new: CircuitState::Closed,
            generation: (new >> GEN_SHIFT) as u64,
        })
    }

    /// Updates the consecutive-failure count of generation tag `gen_tag`; returns the count.
    /// Relaxed: a heuristic counter; the decision it feeds is committed by the state CAS.
    fn count_consecutive(&self, gen_tag: Word, failure: bool) -> Word {
        let mut cur = self.consecutive.load(Relaxed);
        loop {
            let tag = cur >> HALF_BITS;
            let count = if tag == gen_tag {
                cur & HALF_MASK
            } else if gen_tag.wrapping_sub(tag) & HALF_MASK <= HALF_MASK / 2 {
                0 // an older generation's count: start over
            } else {
                return 0; // this outcome is older than the count: drop it
            };
            let count = if failure {
                (count + 1).min(HALF_MASK)
            } else {
                0
            };
            let new = (gen_tag << HALF_BITS) | count;
            if new == cur {
                return count;
            }
            match self
                .consecutive
                .compare_exchange_weak(cur, new, Relaxed, Relaxed)
            {
                Ok(_) => return count,
                Err(c) => cur = c,
            }
        }
    }

    /// The window epoch of `now_ns`, `⌊now_ns / bucket_ns⌋` (module docs: a multiply and a
    /// compare, not a division).
    #[inline]
    fn epoch(&self, now_ns: u64) -> u64 {
        div_by_factor(now_ns, self.epoch_factor, self.bucket_ns)
    }

    /// Adds one outcome to the bucket of `now_ns`, resetting it if its epoch is stale.
    /// Relaxed: counters only (see `count_consecutive`).
    fn count_window(&self, now_ns: u64, failure: bool) {
        let epoch = self.epoch(now_ns);
        let tag = epoch as Word & TAG_MASK;
        let b = &self.buckets[(epoch & self.bucket_mask) as usize];
        let mut cur = b.load(Relaxed);
        loop {
            let btag = cur >> (2 * COUNT_BITS);
            let (mut s, mut f) = if btag == tag {
                (cur & COUNT_MAX, (cur >> COUNT_BITS) & COUNT_MAX)
            } else if tag.wrapping_sub(btag) & TAG_MASK <= TAG_MASK / 2 {
                (0, 0) // stale epoch: this CAS resets the bucket
            } else {
                return; // the bucket already holds a newer epoch than this (late) outcome
            };
            if (if failure { f } else { s }) == COUNT_MAX {
                s /= 2;
                f /= 2;
            }
            if failure {
                f += 1
            } else {
                s += 1
            }
            let new = (tag << (2 * COUNT_BITS)) | (f << COUNT_BITS) | s;
            match b.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
    }

    /// (requests, failures) over the window ending at `now_ns`, from the bucket after the
    /// current closed period's floor on (the bucket the breaker closed in may hold the previous
    /// period's calls, so it is skipped whole: at most `window / buckets` of new calls go uncounted). Relaxed loads: a heuristic sum (the floor was published by the state
    /// CAS the caller's Acquire load saw).
    fn window(&self, now_ns: u64) -> (u64, u64) {
        let now_tag = self.epoch(now_ns) as Word & TAG_MASK;
        let floor = self.floor.load(Relaxed);
        let since_floor = if floor & FLOOR_VALID != 0 {
            now_tag.wrapping_sub(floor & TAG_MASK) & TAG_MASK
        } else {
            Word::MAX
        };
        let (mut requests, mut failures) = (0u64, 0u64);
        for b in &self.buckets[..=self.bucket_mask as usize] {
            let v = b.load(Relaxed);
            let age = now_tag.wrapping_sub(v >> (2 * COUNT_BITS)) & TAG_MASK;
            if (age as u64) < self.n_buckets && age < since_floor {
                let f = ((v >> COUNT_BITS) & COUNT_MAX) as u64;
                requests += (v & COUNT_MAX) as u64 + f;
                failures += f;
            }
        }
        (requests, failures)
    }

    /// The state at `now_ns`, committing a due lazy transition (open → half-open after
    /// `open_duration`; half-open → open when a probe slot outlived `half_open_timeout`).
    /// The transition, if any, is returned for the caller to fire.
    pub fn state(&self, now_ns: u64) -> (CircuitState, Option<Transition>) {
        let t = tick(now_ns);
        // Acquire: as in `try_admit`.
        let mut w = self.word.load(Acquire);
        loop {
            let r = match state_of(w) {
                CircuitState::Closed => return (CircuitState::Closed, None),
                CircuitState::Open => {
                    if !reached(t, self.opened_at.load(Relaxed), self.open_ticks) {
                        return (CircuitState::Open, None);
                    }
                    // A state read takes no probe slot: half-open with 0 probes.
                    stamp(&self.probe_at, self.probe_at.load(Relaxed), t);
                    let new = next(w, CircuitState::HalfOpen, 0);
                    // AcqRel: Release publishes `probe_at`; Acquire for the retry.
                    self.word
                        .compare_exchange(w, new, AcqRel, Acquire)
                        .map(|_| Transition {
                            old: CircuitState::Open,
                            new: CircuitState::HalfOpen,
                            generation: (new >> GEN_SHIFT) as u64,
                        })
                }
                CircuitState::HalfOpen => {
                    if probes(w) == 0
                        || !reached(t, self.probe_at.load(Relaxed), self.half_open_ticks)
                    {
                        return (CircuitState::HalfOpen, None);
                    }
                    self.reopen(w, t)
                }
            };
            match r {
                Ok(tr) => return (tr.new, Some(tr)),
                Err(cur) => w = cur,
            }
        }
    }

    /// State and counters at `now_ns` (committing a due lazy transition, like [`Self::state`]).
    pub fn snapshot(&self, now_ns: u64) -> CircuitStats {
        let (state, transition) = self.state(now_ns);
        // Acquire: as in `try_admit`.
        let w = self.word.load(Acquire);
        let gen_tag = (w >> GEN_SHIFT) & HALF_MASK;
        let c = self.consecutive.load(Relaxed);
        let consecutive_failures =
            if state_of(w) == CircuitState::Closed && c >> HALF_BITS == gen_tag {
                (c & HALF_MASK) as u64
            } else {
                0
            };
        let (window_requests, window_failures) = if state_of(w) == CircuitState::Closed {
            self.window(now_ns)
        } else {
            (0, 0)
        };
        let _ = state;
        CircuitStats {
            state: state_of(w),
            generation: (w >> GEN_SHIFT) as u64,
            consecutive_failures,
            window_requests,
            window_failures,
            opened_at_ns: (self.opened_at.load(Relaxed) as u64) << TICK_SHIFT,
            transition,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::div_by_factor;
    extern crate std;
    use std::vec;

    #[test]
    fn division_by_an_invariant_divisor_is_exact() {
        let ds = [
            1,
            2,
            3,
            7,
            10,
            1 << 20,
            100_000_000,
            999_999_937,
            u64::MAX / 3,
            u64::MAX,
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for d in ds {
            let m = u64::MAX / d;
            let mut ns = vec![0, 1, d - 1, d, d.saturating_add(1), u64::MAX, u64::MAX - 1];
            ns.extend((1..64u64).map(|k| (d.saturating_mul(k)).saturating_sub(1)));
            // Under Miri (an interpreter) a sample; natively thousands.
            for _ in 0..if cfg!(miri) { 16 } else { 2_000 } {
                // xorshift64: a spread of numerators without a dependency.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ns.push(x);
                ns.push(x % (d.saturating_mul(64)).max(1));
            }
            for n in ns {
                assert_eq!(div_by_factor(n, m, d), n / d, "n = {n}, d = {d}");
            }
        }
    }
}
