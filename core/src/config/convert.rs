//! A layer's numbers as option values (docs/design.md §7.3): one rule for every layer, so that
//! Python seconds, Node and C milliseconds and JS numbers for counts are checked alike. The
//! binding names the argument and renders the range ([`OptionSpec::range`]); the rule is here.
//!
//! [`OptionSpec::range`]: super::options::OptionSpec::range

use core::{fmt, time::Duration};

use super::options::Kind;

/// Why a number is not a value of its option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// NaN.
    NotANumber,
    /// Not an integer, or (JS) not a safe integer.
    NotAnInteger,
    /// Outside the option's range (negative, zero where zero is no value, too large).
    OutOfRange,
    /// A positive duration so short that it rounds to zero nanoseconds: refused rather than
    /// read as "do not queue".
    BelowResolution,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Problem::NotANumber => "not a number",
            Problem::NotAnInteger => "not an integer",
            Problem::OutOfRange => "out of range",
            Problem::BelowResolution => "below the resolution of 1 ns",
        })
    }
}

/// A duration in seconds (Python) for an option of kind `kind`: `inf` is "none" where the
/// option allows it (and so is a value too large to hold, for such options); 0 only where zero
/// is a value; a positive value below 1 ns is refused.
///
/// # Errors
/// The [`Problem`].
pub fn duration_from_secs(secs: f64, kind: Kind) -> Result<Duration, Problem> {
    let Kind::Duration {
        zero,
        max,
        infinite,
    } = kind
    else {
        return Err(Problem::OutOfRange);
    };
    if secs.is_nan() {
        return Err(Problem::NotANumber);
    }
    if secs < 0.0 {
        return Err(Problem::OutOfRange);
    }
    if secs == 0.0 {
        return if zero {
            Ok(Duration::ZERO)
        } else {
            Err(Problem::OutOfRange)
        };
    }
    let d = match Duration::try_from_secs_f64(secs) {
        Ok(d) if d > max => None,
        Ok(d) => Some(d),
        Err(_) => None,
    };
    match d {
        Some(d) if d.is_zero() => Err(Problem::BelowResolution),
        Some(d) => Ok(d),
        None if infinite => Ok(Duration::MAX),
        None => Err(Problem::OutOfRange),
    }
}

/// [`duration_from_secs`] for milliseconds (Node, C, vectors).
///
/// # Errors
/// The [`Problem`].
pub fn duration_from_millis(ms: f64, kind: Kind) -> Result<Duration, Problem> {
    duration_from_secs(ms / 1000.0, kind)
}

/// Largest integer a JS number holds exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A count given as a JS number: a safe integer in the option's range.
///
/// # Errors
/// [`Problem::NotAnInteger`] for NaN, fractions and numbers beyond `MAX_SAFE_INTEGER`;
/// [`Problem::OutOfRange`] outside `kind`'s range.
pub fn count_from_f64(x: f64, kind: Kind) -> Result<u64, Problem> {
    let safe = MAX_SAFE_INTEGER as f64;
    // (No `f64::fract` in `core`: within ±2⁵³ the round trip through `i64` is exact.)
    if x.is_nan() || !(-safe..=safe).contains(&x) || (x as i64) as f64 != x {
        return Err(Problem::NotAnInteger);
    }
    let Kind::Count { min, max } = kind else {
        return Err(Problem::OutOfRange);
    };
    if x < 0.0 || (x as u64) < min || (x as u64) > max {
        return Err(Problem::OutOfRange);
    }
    Ok(x as u64)
}

/// A count given as an integer (Python, C) in the option's range.
///
/// # Errors
/// [`Problem::OutOfRange`] outside `kind`'s range.
pub fn count_in(n: i128, kind: Kind) -> Result<u64, Problem> {
    let Kind::Count { min, max } = kind else {
        return Err(Problem::OutOfRange);
    };
    if n < i128::from(min) || n > i128::from(max) {
        return Err(Problem::OutOfRange);
    }
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OptionId;

    #[test]
    fn durations() {
        let q = OptionId::QueueTimeout.spec().kind;
        let c = OptionId::CallTimeout.spec().kind;
        let b = OptionId::BreakerOpenDuration.spec().kind;
        assert_eq!(duration_from_secs(0.0, q), Ok(Duration::ZERO));
        assert_eq!(duration_from_secs(0.0, c), Err(Problem::OutOfRange));
        assert_eq!(duration_from_secs(1e-12, q), Err(Problem::BelowResolution));
        assert_eq!(duration_from_secs(1e-9, q), Ok(Duration::from_nanos(1)));
        assert_eq!(duration_from_secs(f64::INFINITY, q), Ok(Duration::MAX));
        assert_eq!(duration_from_secs(1e300, q), Ok(Duration::MAX));
        assert_eq!(
            duration_from_secs(f64::INFINITY, b),
            Err(Problem::OutOfRange)
        );
        assert_eq!(duration_from_secs(-1.0, q), Err(Problem::OutOfRange));
        assert_eq!(duration_from_secs(f64::NAN, q), Err(Problem::NotANumber));
        assert_eq!(
            duration_from_millis(1.5, q),
            Ok(Duration::from_micros(1500))
        );
        assert_eq!(duration_from_millis(1e-7, q), Err(Problem::BelowResolution));
    }

    #[test]
    fn counts() {
        let k = OptionId::MaxConcurrent.spec().kind;
        assert_eq!(count_from_f64(3.0, k), Ok(3));
        assert_eq!(count_from_f64(0.0, k), Err(Problem::OutOfRange));
        assert_eq!(count_from_f64(1.5, k), Err(Problem::NotAnInteger));
        assert_eq!(count_from_f64(2f64.powi(60), k), Err(Problem::NotAnInteger));
        assert_eq!(count_from_f64(f64::NAN, k), Err(Problem::NotAnInteger));
        assert_eq!(count_in(-1, k), Err(Problem::OutOfRange));
        assert_eq!(count_in(7, k), Ok(7));
    }
}
