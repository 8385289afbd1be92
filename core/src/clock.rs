//! The host clock: the core owns no clock and no timer (docs/design.md §4, §8.1). The host hands one
//! time source to a bulkhead at construction; stats (and later the policies) read it. Under
//! `std` the default is a monotonic [`std::time::Instant`]; a bare `no_std` build has none and
//! the `_ns` figures stay 0. Bindings replace it with a virtual clock in tests.

use core::fmt;

/// A monotonic time source in nanoseconds from an arbitrary origin.
///
/// Implementations must be cheap and must never go backwards.
pub trait Clock: Send + Sync {
    /// Now, in ns.
    fn now_ns(&self) -> u64;
}

/// Where a bulkhead takes time from.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum ClockSource {
    /// No clock: `_ns` stats stay 0.
    #[default]
    None,
    /// A clock that lives forever (usable without an allocator).
    Static(&'static dyn Clock),
    /// A shared clock (a binding's virtual test clock, for example).
    #[cfg(feature = "alloc")]
    Shared(alloc::sync::Arc<dyn Clock>),
    /// `std::time::Instant`, measured from this origin.
    #[cfg(feature = "std")]
    Monotonic(std::time::Instant),
}

impl ClockSource {
    /// The monotonic clock under `std`, else none.
    pub fn default_for_host() -> Self {
        #[cfg(feature = "std")]
        return ClockSource::Monotonic(std::time::Instant::now());
        #[cfg(not(feature = "std"))]
        return ClockSource::None;
    }

    /// Whether a clock is present.
    pub fn is_some(&self) -> bool {
        !matches!(self, ClockSource::None)
    }

    /// Now in ns, or 0 without a clock.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self {
            ClockSource::None => 0,
            ClockSource::Static(c) => c.now_ns(),
            #[cfg(feature = "alloc")]
            ClockSource::Shared(c) => c.now_ns(),
            #[cfg(feature = "std")]
            ClockSource::Monotonic(origin) => {
                u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }
        }
    }
}

impl fmt::Debug for ClockSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClockSource::None => "ClockSource::None",
            ClockSource::Static(_) => "ClockSource::Static",
            #[cfg(feature = "alloc")]
            ClockSource::Shared(_) => "ClockSource::Shared",
            #[cfg(feature = "std")]
            ClockSource::Monotonic(_) => "ClockSource::Monotonic",
        })
    }
}
