//! The event-loop lag probe (feature `tokio`): how late the runtime runs a timer, reported to
//! the core as [`LoadSignal::EventLoopLag`] (docs/design.md §4.11).

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use hullguard_core::{Bulkhead, LoadSignal};
use tokio::{task::JoinHandle, time::Instant};

/// The handle of a running lag probe ([`spawn_lag_probe`]). **Dropping it stops the probe**
/// (the task is aborted) and reports a lag of 0, so no stale overload outlives it (the rule of
/// every adapter's probes); dropping the last `Arc` of its bulkhead ends it too.
#[must_use = "the probe stops when its handle is dropped"]
#[derive(Debug)]
pub struct LagProbe {
    task: JoinHandle<()>,
    bh: Weak<Bulkhead>,
}

impl LagProbe {
    /// Stops the probe (as dropping the handle does).
    pub fn stop(self) {}

    /// Whether the probe's task has ended (its bulkhead is gone, or the runtime shut down).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for LagProbe {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(bh) = self.bh.upgrade() {
            bh.report_load(LoadSignal::EventLoopLag(Duration::ZERO));
        }
    }
}

/// Spawns a task on the current tokio runtime that measures the runtime's scheduling lag and
/// reports it to `bh` every `interval`: it sleeps `interval` and reports how much later than
/// asked it woke up ([`LoadSignal::EventLoopLag`], the sleep's overshoot — what Node's
/// `monitorEventLoopDelay` and an asyncio lag probe measure). A runtime whose workers are busy
/// (blocking calls, long polls, too much work) wakes the probe late, and the bulkhead's
/// `shed_lag_threshold` then sheds non-critical classes until a reading comes back under it.
///
/// tokio's timer has millisecond resolution, so an idle runtime reads about 0–1 ms; keep the
/// threshold well above that (tens of ms) and `interval` comparable to it (10–100 ms: each
/// reading is one sample, the last one stands until the next). On a multi-threaded runtime the
/// probe measures the worker it lands on; a blocked worker whose tasks are stolen by others
/// reads less lag than the blocked one has. The probe holds the bulkhead weakly: it ends when
/// the bulkhead is dropped.
///
/// CPU is not measured here: sample the process's CPU use yourself and report it with
/// `bh.report_load(LoadSignal::Cpu(cores))` (`shed_cpu_threshold`).
///
/// # Panics
/// Outside a tokio runtime (with its time driver), or for an `interval` of zero.
///
/// # Examples
/// ```
/// use std::{sync::Arc, time::Duration};
/// use hullguard_core::{Bulkhead, Config};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bh = Arc::new(Bulkhead::new(Config {
///     shed_lag_threshold: Duration::from_millis(50),
///     ..Config::default()
/// })?);
/// let probe = hullguard_tower::spawn_lag_probe(bh.clone(), Duration::from_millis(20));
/// tokio::time::sleep(Duration::from_millis(100)).await;
/// let load = bh.stats().load.unwrap(); // the last reading (ns) and whether it is over
/// println!("lag {} ns, overloaded {}", load.event_loop_lag_ns, load.overloaded);
/// drop(probe); // stops it, and reports a lag of 0
/// assert_eq!(bh.stats().load.unwrap().overloaded, 0);
/// # Ok(())
/// # }
/// ```
pub fn spawn_lag_probe(bh: Arc<Bulkhead>, interval: Duration) -> LagProbe {
    assert!(
        !interval.is_zero(),
        "spawn_lag_probe: interval must not be zero"
    );
    let bh: Weak<Bulkhead> = Arc::downgrade(&bh);
    let weak = bh.clone();
    let task = tokio::spawn(async move {
        loop {
            let start = Instant::now();
            tokio::time::sleep(interval).await;
            let lag = start.elapsed().saturating_sub(interval);
            match bh.upgrade() {
                Some(bh) => bh.report_load(LoadSignal::EventLoopLag(lag)),
                None => return,
            }
        }
    });
    LagProbe { task, bh: weak }
}
