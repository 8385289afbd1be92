//! The host clock: the core owns no clock and no timer (docs/design.md §4, §8.1). The host hands one
//! time source to a bulkhead at construction; stats (and later the policies) read it. Under
//! `std` the default is the host's monotonic clock ([`HostClock`]); a bare `no_std` build has none and
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
    /// The host's monotonic clock, measured from an origin taken at construction
    /// ([`HostClock::new`]).
    #[cfg(feature = "std")]
    Monotonic(HostClock),
}

/// The host's monotonic clock (`CLOCK_MONOTONIC`, the clock `std::time::Instant` reads),
/// in ns from the origin taken by [`new`](Self::new). On Unix it reads `clock_gettime`
/// directly and does integer arithmetic on `u64` — no `Instant`/`Duration`/`u128` on the hot
/// path (a guarded call reads it twice; through `Instant::elapsed` that cost ≈ 70 instructions
/// a read, now ≈ 25, `bench/callgrind.sh`); elsewhere it uses `Instant`.
#[cfg(feature = "std")]
#[derive(Debug, Clone, Copy)]
pub struct HostClock {
    #[cfg(unix)]
    origin_ns: u64,
    #[cfg(not(unix))]
    origin: std::time::Instant,
}

#[cfg(feature = "std")]
impl HostClock {
    /// The clock, its origin now.
    pub fn new() -> Self {
        #[cfg(unix)]
        return HostClock {
            origin_ns: Self::raw_ns(),
        };
        #[cfg(not(unix))]
        return HostClock {
            origin: std::time::Instant::now(),
        };
    }

    /// `CLOCK_MONOTONIC` in ns.
    #[cfg(unix)]
    #[inline]
    fn raw_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists on every Unix
        // this builds for, and the call cannot fail with a valid pointer and clock id.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        (ts.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ts.tv_nsec as u64)
    }

    /// Now, in ns since the origin.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        #[cfg(unix)]
        return Self::raw_ns().saturating_sub(self.origin_ns);
        #[cfg(not(unix))]
        return u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
    }

    /// A cheap, conservative reading of [`now_ns`](Self::now_ns): on Linux
    /// `CLOCK_MONOTONIC_COARSE` (the same time base, updated at kernel ticks, a few ns to read
    /// where `CLOCK_MONOTONIC` costs tens of ns under some hypervisors) plus **twice** its
    /// resolution — the coarse clock was measured lagging by up to 1.3 resolutions after an
    /// idle wake, so one resolution is not enough; elsewhere `now_ns`. For checks that should
    /// never be late and may be two ticks early (a leased bulkhead's deadline, docs/design.md
    /// §16; the lease manager also drops the block at the exact deadline on the fine clock).
    #[inline]
    pub fn now_ns_at_most(&self) -> u64 {
        // Not under Miri: it runs no `clock_getres` (and the fine clock is as good there).
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            static RESOLUTION_NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
            let res = *RESOLUTION_NS.get_or_init(|| {
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: `ts` is a valid, writable timespec and the clock id exists on Linux.
                let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
                if rc == 0 {
                    (ts.tv_sec as u64)
                        .saturating_mul(1_000_000_000)
                        .saturating_add(ts.tv_nsec as u64)
                } else {
                    u64::MAX
                }
            });
            if res <= 100_000_000 {
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: as above; the coarse clock cannot fail with a valid pointer.
                unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
                let coarse = (ts.tv_sec as u64)
                    .wrapping_mul(1_000_000_000)
                    .wrapping_add(ts.tv_nsec as u64);
                return (coarse + 2 * res).saturating_sub(self.origin_ns);
            }
        }
        self.now_ns()
    }

    /// Now on the clock's absolute scale, in ns: `CLOCK_MONOTONIC` itself on Unix (what C's
    /// `clock_gettime(CLOCK_MONOTONIC)` and Python's `time.monotonic_ns()` read); elsewhere
    /// the ns since this clock's origin. The scale of [`Deadline::Ns`](crate::Deadline::Ns).
    #[inline]
    pub fn absolute_ns(&self) -> u64 {
        #[cfg(unix)]
        return Self::raw_ns();
        #[cfg(not(unix))]
        return self.now_ns();
    }
}

#[cfg(feature = "std")]
impl Default for HostClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ClockSource {
    /// The monotonic clock under `std`, else none.
    pub fn default_for_host() -> Self {
        #[cfg(feature = "std")]
        return ClockSource::Monotonic(HostClock::new());
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
            ClockSource::Monotonic(c) => c.now_ns(),
        }
    }
}

impl ClockSource {
    /// A cheap upper bound of [`now_ns`](Self::now_ns): the host clock's
    /// [`HostClock::now_ns_at_most`]; any other clock's `now_ns`.
    #[inline]
    pub fn now_ns_at_most(&self) -> u64 {
        match self {
            #[cfg(feature = "std")]
            ClockSource::Monotonic(c) => c.now_ns_at_most(),
            other => other.now_ns(),
        }
    }
}

impl ClockSource {
    /// Now on the clock's absolute scale, in ns — the scale a [`Deadline::Ns`](crate::Deadline::Ns)
    /// is given on: the host clock's is `CLOCK_MONOTONIC` ([`HostClock::absolute_ns`]); an
    /// injected clock's is its own [`now_ns`](Clock::now_ns) (a test's virtual time); 0
    /// without a clock.
    #[inline]
    pub fn absolute_ns(&self) -> u64 {
        match self {
            #[cfg(feature = "std")]
            ClockSource::Monotonic(c) => c.absolute_ns(),
            other => other.now_ns(),
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
