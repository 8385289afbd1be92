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
