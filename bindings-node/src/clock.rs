//! Clocks: the virtual clock of the test hook (the scenario-vector runner advances it by
//! hand), and the unit conversion of a request's deadline (docs/design.md §5.9).
//!
//! A Node deadline is an absolute time in **ms on the `performance.now()` scale**. The core
//! takes `Deadline::Ns` on the bulkhead clock's absolute scale: `CLOCK_MONOTONIC` for the host
//! clock, whose origin differs from `performance.now()`'s by a constant — measured once, at
//! load ([`init`]) — and, on a bulkhead built on the test hook's virtual clock, that clock's own
//! ns (the deadline is then ms on the virtual clock: no offset).

use std::{
    cell::Cell,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
};

use hullguard_core::{Clock, ClockSource, Deadline};
use napi_derive::napi;

thread_local! {
    /// The host clock's absolute ns (`CLOCK_MONOTONIC`) at `performance.now() == 0` in this
    /// isolate, measured once by [`init`].
    static PERF_ORIGIN_NS: Cell<f64> = const { Cell::new(0.0) };
}

/// The host clock's absolute ns now (`CLOCK_MONOTONIC`), for the facade's calibration: it
/// brackets this call with two `performance.now()` reads, keeps the sample of the narrowest
/// bracket and sets the origin from its midpoint ([`set_perf_origin_ns`]) — a deadline is then
/// off by at most half that bracket (well under a microsecond), not by a whole native call.
#[napi]
pub fn host_clock_ns() -> f64 {
    ClockSource::default_for_host().absolute_ns() as f64
}

/// Sets the host clock's absolute ns at `performance.now() == 0` in this isolate (see
/// [`host_clock_ns`]).
#[napi]
pub fn set_perf_origin_ns(origin_ns: f64) {
    PERF_ORIGIN_NS.with(|o| o.set(origin_ns));
}

/// 2^63 ns: a deadline at or past it is none (about 292 years).
const NO_DEADLINE_NS: f64 = 9_223_372_036_854_775_808.0;

/// A deadline of `ms` (absolute, ms on `performance.now()`'s scale, or on the virtual clock
/// when `virtual_clock`): `Infinity` and anything at or past 2^63 ns are none; a time before
/// the scale's origin is a passed deadline (`Ns(0)`). `ms` is not NaN or `-Infinity` (the
/// caller refused those).
pub(crate) fn deadline_of(ms: f64, virtual_clock: bool) -> Deadline {
    let origin = if virtual_clock {
        0.0
    } else {
        PERF_ORIGIN_NS.with(Cell::get)
    };
    let ns = ms * 1e6 + origin;
    if ns.is_nan() || ns >= NO_DEADLINE_NS {
        Deadline::NONE
    } else if ns <= 0.0 {
        Deadline::Ns(0)
    } else {
        // Below 2^63: exact to the ns the f64 holds (truncated: never later).
        Deadline::Ns(ns as u64)
    }
}

#[derive(Default)]
struct Virtual(AtomicU64);

impl Clock for Virtual {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

/// A virtual clock (ns) to hand to `NativeBulkhead` / `NativeRegistry` in tests.
#[napi]
pub struct VirtualClock {
    inner: Arc<Virtual>,
}

#[napi]
impl VirtualClock {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Virtual::default()),
        }
    }

    /// Moves the clock forward by `ms` milliseconds.
    #[napi]
    pub fn advance(&self, ms: f64) {
        self.inner.0.fetch_add((ms * 1e6) as u64, SeqCst);
    }

    /// Now, in ms.
    #[napi]
    pub fn now_ms(&self) -> f64 {
        self.inner.0.load(SeqCst) as f64 / 1e6
    }
}

pub(crate) fn source(clock: Option<&VirtualClock>) -> ClockSource {
    clock.map_or_else(ClockSource::default_for_host, |c| {
        ClockSource::Shared(c.inner.clone())
    })
}
