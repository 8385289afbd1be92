//! The timer a queued request waits with: the core arms none (docs/design.md §5.2).

use core::{future::Future, pin::Pin, time::Duration};

/// A sleep future, boxed (one allocation per armed timer: only a queued request arms one).
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where [`AdmissionService`](crate::AdmissionService) gets its sleeps: a queued request's
/// queue deadline, and the tick that lets a rate-held queue move on
/// ([`Bulkhead::rate_tick`](hullguard_core::Bulkhead::rate_tick)). [`TokioTimer`] with the
/// `tokio` feature (the default); plug another runtime's sleep in with
/// [`AdmissionLayer::timer`](crate::AdmissionLayer::timer).
///
/// `sleep` is called from inside `Service::call` and the response future's `poll`, i.e. on the
/// server's runtime.
///
/// # Examples
/// ```
/// use std::{sync::Arc, time::Duration};
/// use hullguard_core::{Bulkhead, Config};
/// use hullguard_tower::{AdmissionLayer, Sleep, Timer};
/// /// A timer of another runtime (here: tokio's, spelled out).
/// struct MyTimer;
/// impl Timer for MyTimer {
///     fn sleep(&self, d: Duration) -> Sleep {
///         Box::pin(tokio::time::sleep(d))
///     }
/// }
/// let bh = Arc::new(Bulkhead::new(Config::default())?);
/// let _layer = AdmissionLayer::new(bh).timer(MyTimer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Timer: Send + Sync + 'static {
    /// A future that completes after `d`.
    fn sleep(&self, d: Duration) -> Sleep;
}

/// tokio's timer (`tokio::time::sleep`, millisecond resolution); needs a tokio runtime with
/// its time driver enabled (`#[tokio::main]` has it).
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioTimer;

#[cfg(feature = "tokio")]
impl Timer for TokioTimer {
    fn sleep(&self, d: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(d))
    }
}
