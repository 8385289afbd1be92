//! Streaming settlement (docs/design.md §4.5, "Streaming holds"): what
//! [`Call::report_usage`](crate::Call::report_usage) answers and why it refuses.
//!
//! A call with a budget hold reports, as its work streams, the units it used so far
//! (cumulative, never decreasing) and the units it may still use. Its hold becomes their sum:
//! a shrink returns units at once (waking whoever now fits), a growth goes through admission —
//! taken if it fits with nobody queued, otherwise held past the budget as *overrun* (counted,
//! never taken from others). The design answers async-bulkhead-llm's unchecked growth
//! (`../shared/research/ANCHORS-ADMISSION.md` §1.2, "A progressive hold can grow again").

use core::fmt;

pub use crate::event::HoldChange;

/// The answer of [`report_usage`](crate::Call::report_usage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageReport {
    /// Units used so far (the report's cumulative figure).
    pub used: u64,
    /// Units the call holds now: `used + remaining` (0 on a bulkhead without a budget).
    pub held: u64,
    /// The part of `held` past the budget (growth that did not fit).
    pub overrun: u64,
    /// What this report did to the hold.
    pub change: HoldChange,
    /// The host should cancel the call's work now: this report overran and the bulkhead has
    /// `cancel_on_overrun` (docs/design.md §4.5). Also [`Call::cancel_requested`]
    /// (sticky); the units stay held past the budget until the call ends.
    ///
    /// [`Call::cancel_requested`]: crate::Call::cancel_requested
    pub cancel: bool,
}

/// Why [`report_usage`](crate::Call::report_usage) refused; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageError {
    /// `used` is below an earlier report: usage is cumulative.
    Decreased {
        /// The highest `used` reported before.
        previous: u64,
        /// The `used` of this report.
        got: u64,
    },
    /// `used + remaining` is above [`MAX_BUDGET`](crate::MAX_BUDGET).
    TooLarge {
        /// The `used` of this report.
        used: u64,
        /// The `remaining` of this report.
        remaining: u64,
    },
    /// The call returned all its permits (units are held only with a permit).
    Released,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Decreased { previous, got } => write!(
                f,
                "used is cumulative and must not decrease: must be >= {previous}, got {got}"
            ),
            Self::TooLarge { used, remaining } => write!(
                f,
                "used + remaining must be in 0..={}, got {used} + {remaining}",
                crate::limits::MAX_BUDGET
            ),
            Self::Released => f.write_str("the call holds no permits: nothing to report against"),
        }
    }
}

impl core::error::Error for UsageError {}
