//! [`Deadline`]: an absolute time a request must be admitted by (docs/design.md §5.9), and
//! the time left until it on a bulkhead's clock.
//!
//! A deadline is absolute so that it can flow through a whole request: every call of the
//! request takes what the calls before it left, and a deadline that has passed is told apart
//! from "no deadline" (a remaining time computed from a passed deadline would be negative —
//! C36, palantir/dialogue PR#3104). "No deadline" never turns into "expired": `u64::MAX` ns and
//! anything past the clock's range mean none.

use core::time::Duration;

use crate::clock::ClockSource;

/// An absolute deadline: the request is refused `timeout` once it has passed (at once, with
/// no ticket, if it has passed on arrival), and a queued request waits at most until it.
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::{ClockSource, Deadline};
/// let clock = ClockSource::None; // no clock: now is 0 on it
/// assert_eq!(Deadline::Ns(5_000).time_left(&clock), Some(Duration::from_nanos(5_000)));
/// assert_eq!(Deadline::Ns(0).time_left(&clock), Some(Duration::ZERO)); // passed
/// assert_eq!(Deadline::NONE.time_left(&clock), None);                  // no deadline
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Deadline {
    /// In ns on the bulkhead's clock's absolute scale ([`ClockSource::absolute_ns`]):
    /// `CLOCK_MONOTONIC` for the host clock (C's `clock_gettime(CLOCK_MONOTONIC)`, Python's
    /// `time.monotonic_ns()`), the injected clock's own `now_ns` otherwise (a test's virtual
    /// time). `u64::MAX` means no deadline.
    Ns(u64),
    /// A `std::time::Instant` (read against `Instant::now()`, whatever the bulkhead's clock).
    #[cfg(feature = "std")]
    At(std::time::Instant),
}

impl Deadline {
    /// No deadline (`Ns(u64::MAX)`).
    pub const NONE: Deadline = Deadline::Ns(u64::MAX);

    /// The time left until the deadline on `clock`: `None` for no deadline, `Some(ZERO)` once
    /// it has passed (never negative, never an overflow).
    #[inline]
    pub fn time_left(&self, clock: &ClockSource) -> Option<Duration> {
        match *self {
            Deadline::Ns(u64::MAX) => None,
            Deadline::Ns(at) => Some(Duration::from_nanos(at.saturating_sub(clock.absolute_ns()))),
            #[cfg(feature = "std")]
            Deadline::At(at) => Some(at.saturating_duration_since(std::time::Instant::now())),
        }
    }
}

/// The wait a queued request may spend, given its queue timeout (`Duration::MAX`: none) and
/// the time `left` until its deadline (`None`: none), keeping `min_service` of it for the
/// work itself (docs/design.md §5.9: a waiter that could only be granted with less than
/// `min_service` left is refused `timeout` then, not granted to fail): `min(timeout, left −
/// min_service)`, saturating at 0.
#[inline]
pub fn queue_wait(timeout: Duration, left: Option<Duration>, min_service: Duration) -> Duration {
    match left {
        None => timeout,
        Some(left) => timeout.min(left.saturating_sub(min_service)),
    }
}

/// A per-call timeout capped by the time `left` until the request's deadline (`None`:
/// none): what the host arms for the work (docs/design.md §5.9). `None` when neither bounds
/// the call.
#[inline]
pub fn cap_call_timeout(
    call_timeout: Option<Duration>,
    left: Option<Duration>,
) -> Option<Duration> {
    match (call_timeout, left) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    }
}

/// The time `left` until a deadline as a `grpc-timeout` header value (the gRPC over HTTP/2
/// protocol: `TimeoutValue TimeoutUnit`, at most 8 digits, units `H` `M` `S` `m` `u` `n`) —
/// one rule for every binding that propagates a budget downstream (docs/design.md §5.9): the
/// finest unit whose value fits in 8 digits, **rounded down** (a propagated deadline is never
/// later than ours), then written in the coarsest unit that holds the same value exactly
/// (1.5 s → `1500m`, 2 s → `2S`, 120 s → `2M`). Zero is `0n`; more than 99 999 999 hours is
/// capped at `99999999H`.
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::deadline::grpc_timeout;
/// assert_eq!(grpc_timeout(Duration::from_millis(1500)).as_str(), "1500m");
/// assert_eq!(grpc_timeout(Duration::from_nanos(1_499_751_234)).as_str(), "1499751u");
/// assert_eq!(grpc_timeout(Duration::from_secs(120)).as_str(), "2M");
/// assert_eq!(grpc_timeout(Duration::ZERO).as_str(), "0n");
/// ```
pub fn grpc_timeout(left: Duration) -> GrpcTimeout {
    const UNITS: [(u8, u128); 6] = [
        (b'n', 1),
        (b'u', 1_000),
        (b'm', 1_000_000),
        (b'S', 1_000_000_000),
        (b'M', 60_000_000_000),
        (b'H', 3_600_000_000_000),
    ];
    const MAX: u128 = 99_999_999;
    let ns = left.as_nanos();
    let (value, unit) = match UNITS.iter().position(|&(_, size)| ns / size <= MAX) {
        _ if ns == 0 => (0, b'n'),
        None => (MAX, b'H'),
        Some(mut i) => {
            let rounded = ns - ns % UNITS[i].1;
            while i + 1 < UNITS.len() && rounded % UNITS[i + 1].1 == 0 {
                i += 1;
            }
            (rounded / UNITS[i].1, UNITS[i].0)
        }
    };
    let mut out = GrpcTimeout {
        buf: [0; 9],
        len: 0,
    };
    // At most 8 digits (value ≤ MAX), then the unit.
    let mut digits = [0u8; 8];
    let (mut n, mut v) = (0, value);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for (k, d) in digits[..n].iter().rev().enumerate() {
        out.buf[k] = *d;
    }
    out.buf[n] = unit;
    out.len = (n + 1) as u8;
    out
}

/// Parses a `grpc-timeout` header value (the gRPC over HTTP/2 protocol: `TimeoutValue
/// TimeoutUnit`, 1 to 8 ASCII digits then one of `H` `M` `S` `m` `u` `n`) into the time it
/// grants — the inverse of [`grpc_timeout`], which writes the header
/// hullguard's clients send downstream. `None` for anything else (no sign, no spaces, no
/// fraction, no more than 8 digits): a malformed header is no budget, as gRPC servers treat it.
/// One rule for every edge adapter (Python's ASGI middleware, Node's `hullguard/edge`, the
/// tower layer).
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::deadline::{grpc_timeout, parse_grpc_timeout};
/// assert_eq!(parse_grpc_timeout(b"1500m"), Some(Duration::from_millis(1500)));
/// assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
/// assert_eq!(parse_grpc_timeout(b"0n"), Some(Duration::ZERO));
/// assert_eq!(parse_grpc_timeout(b"1.5S"), None);
/// let left = Duration::from_nanos(1_499_751_234);
/// let sent = grpc_timeout(left); // "1499751u": rounded down
/// assert_eq!(parse_grpc_timeout(sent.as_str().as_bytes()), Some(Duration::from_micros(1_499_751)));
/// ```
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A `grpc-timeout` header value ([`grpc_timeout`]): ASCII, at most 9 bytes, no allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrpcTimeout {
    buf: [u8; 9],
    len: u8,
}

impl GrpcTimeout {
    /// The header value.
    pub fn as_str(&self) -> &str {
        // ASCII digits and a unit letter, written above.
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("0n")
    }
}

impl core::fmt::Debug for GrpcTimeout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::fmt::Display for GrpcTimeout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values() {
        let cases: &[(u64, &str)] = &[
            (0, "0n"),
            (1, "1n"),
            (99_999_999, "99999999n"),
            (100_000_000, "100m"),
            (100_000_001, "100m"),
            (100_001_000, "100001u"),
            (1_500_000_000, "1500m"),
            (2_000_000_000, "2S"),
            (120_000_000_000, "2M"),
            (7_200_000_000_000, "2H"),
            (u64::MAX, "5124095H"),
        ];
        for &(ns, want) in cases {
            assert_eq!(
                grpc_timeout(Duration::from_nanos(ns)).as_str(),
                want,
                "{ns}"
            );
        }
        assert_eq!(grpc_timeout(Duration::MAX).as_str(), "99999999H");
        // Always 1..=8 digits and a unit, never above the time left.
        for ns in (0..200u64).map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (k % 64)) {
            let s = grpc_timeout(Duration::from_nanos(ns));
            let (digits, unit) = s.as_str().split_at(s.as_str().len() - 1);
            assert!((1..=8).contains(&digits.len()), "{s}");
            let size: u128 = match unit {
                "n" => 1,
                "u" => 1_000,
                "m" => 1_000_000,
                "S" => 1_000_000_000,
                "M" => 60_000_000_000,
                "H" => 3_600_000_000_000,
                _ => panic!("{s}"),
            };
            assert!(
                digits.parse::<u128>().unwrap() * size <= ns as u128,
                "{s} > {ns}"
            );
        }
    }
}

#[cfg(all(test, feature = "std"))]
mod grpc_timeout_tests {
    use super::*;

    #[test]
    fn malformed_values_are_no_budget() {
        for bad in [
            &b""[..],
            b"m",
            b"5",
            b"5s",
            b"-5S",
            b" 5S",
            b"5S ",
            b"123456789n",
            b"1.5S",
            b"5x",
        ] {
            assert_eq!(parse_grpc_timeout(bad), None, "{:?}", bad);
        }
        assert_eq!(
            parse_grpc_timeout(b"99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
    }

    #[test]
    fn what_the_core_writes_parses_back_within_one_unit() {
        for ns in [
            0u64,
            1,
            999,
            1_000,
            99_999_999,
            100_000_001,
            1_500_000_000,
            7_200_000_000_000,
        ] {
            let left = Duration::from_nanos(ns);
            let sent = grpc_timeout(left);
            let back = parse_grpc_timeout(sent.as_str().as_bytes()).unwrap();
            assert!(back <= left, "{sent} > {left:?}");
            assert!(left - back < Duration::from_millis(1), "{sent} vs {left:?}");
        }
    }
}
