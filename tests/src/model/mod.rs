//! The sequential reference models of the engine (docs/design.md §11, "The reference model"),
//! shared by the proptest properties (`tests/tests/model*.rs`, which generate the operations)
//! and the differential fuzz targets (`fuzz/fuzz_targets/differential_*.rs`, which decode them
//! from the fuzzer's bytes): one model and one runner per concern, so a case either side finds
//! replays on the other.
//!
//! * [`base`]: permits, the queue and its ring (runtime-sized and 2-, 4- and 8-cell static
//!   rings), polls, cancels, expiries, abandons, raw, checked and partial releases, `set_limit`,
//!   `close`, the virtual clock's deadlines; the whole stats object after every step.
//! * [`budget`]: the budget dimension (costs, refunds, usage reports, settlements with usage,
//!   reservations, observe mode, `set_budget` / `set_limit`).
//! * [`classes`]: admission classes (floors, ceilings, a priority reserve, lending, shedding, a
//!   requests rate, `apply_limits` of either dimension).
//!
//! A runner returns a [`Mismatch`] (`base`, `budget`) or panics (`classes`) at the first step
//! where the engine and the model differ; the message names the step and the operation.

pub mod base;
pub mod budget;
pub mod classes;

use core::fmt;

/// Where the engine and its reference model first differ (or an invariant fails): the message
/// names the step, the operation and both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch(pub String);

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Mismatch {}

/// `ensure!(cond, "fmt", args…)`: returns a [`Mismatch`] with the message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr) => {
        $crate::model::ensure!($cond, "assertion failed: {}", stringify!($cond))
    };
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::model::Mismatch(format!($($fmt)+)));
        }
    };
}

/// `ensure_eq!(left, right, "fmt", args…)`: returns a [`Mismatch`] showing both sides unless
/// they are equal.
macro_rules! ensure_eq {
    ($left:expr, $right:expr) => {
        $crate::model::ensure_eq!($left, $right, "{} == {}", stringify!($left), stringify!($right))
    };
    ($left:expr, $right:expr, $($fmt:tt)+) => {
        match (&$left, &$right) {
            (left, right) => {
                if !(*left == *right) {
                    return Err($crate::model::Mismatch(format!(
                        "{}: left {:?} != right {:?}",
                        format!($($fmt)+),
                        left,
                        right
                    )));
                }
            }
        }
    };
}

pub(crate) use {ensure, ensure_eq};
