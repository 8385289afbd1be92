//! White-box tests. Loom models compile only under `--cfg loom`; the rest only without it.

#[cfg(not(loom))]
mod adaptive;
#[cfg(all(not(loom), feature = "std"))]
mod admission;
#[cfg(all(not(loom), feature = "std"))]
mod apply;
#[cfg(not(loom))]
mod breaker;
#[cfg(all(not(loom), feature = "std"))]
mod budget;
#[cfg(not(loom))]
mod bulkhead;
#[cfg(all(not(loom), feature = "std"))]
mod class_table;
#[cfg(not(loom))]
mod classes;
#[cfg(all(not(loom), feature = "std"))]
mod deadline;
#[cfg(all(not(loom), feature = "std"))]
mod detail;
#[cfg(all(not(loom), feature = "std"))]
mod dry_run;
#[cfg(all(not(loom), feature = "std"))]
mod events;
#[cfg(all(not(loom), feature = "std"))]
mod lease;
// Safe atomics only (no unsafe, no cell protocol): natively, not under Miri (its time goes to
// the engine's tests, within the warm make test budget).
#[cfg(all(not(loom), not(miri), feature = "std"))]
mod load_shed;
#[cfg(loom)]
mod loom_adaptive;
#[cfg(all(loom, feature = "std"))]
mod loom_apply;
#[cfg(loom)]
mod loom_breaker;
#[cfg(all(loom, feature = "std"))]
mod loom_budget;
#[cfg(loom)]
mod loom_bulkhead;
#[cfg(all(loom, feature = "std"))]
mod loom_classes;
#[cfg(all(loom, feature = "std"))]
mod loom_lease;
#[cfg(all(loom, feature = "std"))]
mod loom_observe;
#[cfg(all(loom, feature = "std"))]
mod loom_orphan;
#[cfg(all(loom, feature = "std"))]
mod loom_queue_delay;
#[cfg(all(loom, feature = "std"))]
mod loom_reserve;
#[cfg(all(loom, feature = "std"))]
mod loom_waker_slot;
// The metric walker reads stats (safe code): natively, not under Miri.
#[cfg(all(not(loom), not(miri), feature = "std"))]
mod metrics;
#[cfg(all(not(loom), feature = "std"))]
mod observe;
#[cfg(all(not(loom), feature = "std"))]
mod orphan;
#[cfg(all(not(loom), feature = "std"))]
mod queue_delay;
#[cfg(all(not(loom), feature = "std"))]
mod queued_cost;
#[cfg(all(not(loom), feature = "std"))]
mod rates;
#[cfg(all(not(loom), feature = "std"))]
mod registry;
#[cfg(all(not(loom), feature = "std"))]
mod registry_global;
#[cfg(all(not(loom), feature = "std"))]
mod reserve;
#[cfg(all(not(loom), feature = "std"))]
mod usage;
#[cfg(all(not(loom), feature = "std"))]
mod wait_stats;

/// A virtual clock for the white-box tests: ns, moved by the test (`.0.fetch_add`).
#[cfg(all(not(loom), feature = "std"))]
#[derive(Default)]
pub(super) struct VClock(pub(super) core::sync::atomic::AtomicU64);

#[cfg(all(not(loom), feature = "std"))]
impl crate::Clock for VClock {
    fn now_ns(&self) -> u64 {
        self.0.load(core::sync::atomic::Ordering::SeqCst)
    }
}
