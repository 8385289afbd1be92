//! The test hook's clock: a virtual clock the scenario-vector runner advances by hand.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::SeqCst},
};

use hullguard_core::{Clock, ClockSource};
use napi_derive::napi;

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
