//! The stats schema of DESIGN §3.7 and the counters behind it.
//!
//! Counters live off the permit word's cache line. The one counter on the fast path
//! (`admitted_total`) is sharded by the caller's stack address so that threads rarely share a
//! line; everything else is counted on slow paths only.

use core::fmt;

use crossbeam_utils::CachePadded;

use crate::{
    adaptive::AdaptiveStats,
    breaker::CircuitStats,
    reason::Reason,
    sync::{AtomicWord, Ordering::*, Word},
};

/// Rejections counted per admission reason (all eight keys always present).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RejectedByReason(pub [u64; 8]);

impl RejectedByReason {
    /// The count for one reason.
    pub fn get(&self, reason: Reason) -> u64 {
        self.0[reason.index()]
    }

    /// `(reason, count)` for every reason, in `hg_reason` order.
    pub fn iter(&self) -> impl Iterator<Item = (Reason, u64)> + '_ {
        Reason::ALL.into_iter().map(|r| (r, self.0[r.index()]))
    }

    /// The sum over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// A point-in-time view of one bulkhead. Field names are the schema's keys in every layer.
///
/// The fields are read one by one without a lock: each is exact, and together they are
/// consistent at quiescent points (I2: `available + active + granted_unclaimed == limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Permits held by claimed grants.
    pub active: u64,
    /// Live waiters.
    pub queued: u64,
    /// Permits granted to waiters that have not claimed them yet.
    pub granted_unclaimed: u64,
    /// The current limit.
    pub limit: u64,
    /// The ceiling of the limit.
    pub max_concurrent: u64,
    /// Permits free now; negative after a shrink until releases pay it back.
    pub available: i64,
    /// Acquires granted (at once or after queueing).
    pub admitted_total: u64,
    /// Rejections per reason.
    pub rejected_by_reason: RejectedByReason,
    /// Explicit releases of an already released permit (no-ops).
    pub released_twice_total: u64,
    /// Permits returned because a binding handle was destroyed while held.
    pub leaked_total: u64,
    /// Ring cells free for new waiters.
    pub ring_free: u64,
    /// Acquires that queued and were then granted.
    pub queue_wait_count: u64,
    /// Their total wait, enqueue to grant, in ns of the host clock.
    pub queue_wait_sum_ns: u64,
    /// The longest such wait, in ns.
    pub queue_wait_max_ns: u64,
    /// The adaptive limit's state; `None` unless one is attached.
    pub adaptive: Option<AdaptiveStats>,
    /// The circuit breaker's state and counters; `None` unless one is attached. Reading the
    /// stats commits a due lazy transition (open → half-open) like any state read.
    pub circuit: Option<CircuitStats>,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "active={} queued={} granted_unclaimed={} limit={} max_concurrent={} available={} \
             admitted_total={}",
            self.active,
            self.queued,
            self.granted_unclaimed,
            self.limit,
            self.max_concurrent,
            self.available,
            self.admitted_total
        )?;
        for (r, n) in self.rejected_by_reason.iter() {
            write!(f, " rejected.{}={}", r.as_str(), n)?;
        }
        write!(
            f,
            " released_twice_total={} leaked_total={} ring_free={} queue_wait_count={} \
             queue_wait_sum_ns={} queue_wait_max_ns={}",
            self.released_twice_total,
            self.leaked_total,
            self.ring_free,
            self.queue_wait_count,
            self.queue_wait_sum_ns,
            self.queue_wait_max_ns
        )
    }
}

const SHARDS: usize = 16;

/// The fast path's admission counter, off the permit word's cache line.
///
/// Under `std` each of the first [`SHARDS`] threads of the process owns one shard outright and
/// bumps it with a plain load and store (no locked instruction: exact, because it is the only
/// writer); later threads share an `overflow` counter with `fetch_add`. Without `std` the shard
/// is picked by hashing the caller's stack address (threads' stacks lie far apart).
#[derive(Debug)]
pub(crate) struct ShardedCounter {
    shards: [CachePadded<AtomicWord>; SHARDS],
    overflow: CachePadded<AtomicWord>,
}

#[cfg(all(feature = "std", not(loom)))]
mod thread_shard {
    use core::cell::Cell;

    use crate::sync::{AtomicWord, Ordering::Relaxed};

    static NEXT: AtomicWord = AtomicWord::new(0);

    std::thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }

    /// This thread's shard index, assigned on first use (`>= SHARDS` means none).
    #[inline]
    pub(super) fn index() -> usize {
        SHARD.with(|s| {
            let i = s.get();
            if i != usize::MAX {
                return i;
            }
            // Relaxed: only uniqueness matters.
            let i = usize::try_from(NEXT.fetch_add(1, Relaxed)).unwrap_or(usize::MAX - 1);
            s.set(i);
            i
        })
    }
}

impl ShardedCounter {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            shards: [const { CachePadded::new(AtomicWord::new(0)) }; SHARDS],
            overflow: CachePadded::new(AtomicWord::new(0)),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            shards: core::array::from_fn(|_| CachePadded::new(AtomicWord::new(0))),
            overflow: CachePadded::new(AtomicWord::new(0)),
        }
    }

    #[inline]
    pub(crate) fn add(&self, n: Word) {
        // Relaxed everywhere: a statistic; it publishes nothing.
        #[cfg(all(feature = "std", not(loom)))]
        {
            let i = thread_shard::index();
            if let Some(shard) = self.shards.get(i) {
                // This thread is the shard's only writer: no RMW needed.
                shard.store(shard.load(Relaxed).wrapping_add(n), Relaxed);
            } else {
                self.overflow.fetch_add(n, Relaxed);
            }
        }
        #[cfg(loom)]
        self.overflow.fetch_add(n, Relaxed);
        #[cfg(all(not(feature = "std"), not(loom)))]
        {
            let probe = 0u8;
            // Fibonacci hashing of the page number: default thread stacks are 2 MiB + 4 KiB
            // apart, which a plain modulus of the address maps to one shard.
            let page = core::ptr::addr_of!(probe).addr() >> 12;
            let i = page.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> (usize::BITS - 4);
            self.shards[i % SHARDS].fetch_add(n, Relaxed);
        }
    }

    pub(crate) fn sum(&self) -> u64 {
        self.shards
            .iter()
            .chain(core::iter::once(&self.overflow))
            .map(|s| s.load(Relaxed) as u64)
            .fold(0u64, u64::wrapping_add)
    }
}

/// The slow-path counters of one bulkhead.
#[derive(Debug)]
pub(crate) struct Counters {
    /// Admissions on the fast path (any thread).
    pub(crate) admitted: ShardedCounter,
    /// Grants to queued waiters. Written only by the dispatcher (one at a time, serialized by
    /// its flag's Acquire/Release), so plain load + store; like the `wait_*` fields.
    pub(crate) admitted_queued: AtomicWord,
    pub(crate) rejected: [AtomicWord; 8],
    pub(crate) released_twice: AtomicWord,
    pub(crate) leaked: AtomicWord,
    /// Permits in `GRANTED` cells.
    pub(crate) unclaimed: AtomicWord,
    pub(crate) wait_count: AtomicWord,
    pub(crate) wait_sum_ns: AtomicWord,
    pub(crate) wait_max_ns: AtomicWord,
}

impl Counters {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            admitted: ShardedCounter::new(),
            admitted_queued: AtomicWord::new(0),
            rejected: [const { AtomicWord::new(0) }; 8],
            released_twice: AtomicWord::new(0),
            leaked: AtomicWord::new(0),
            unclaimed: AtomicWord::new(0),
            wait_count: AtomicWord::new(0),
            wait_sum_ns: AtomicWord::new(0),
            wait_max_ns: AtomicWord::new(0),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            admitted: ShardedCounter::new(),
            admitted_queued: AtomicWord::new(0),
            rejected: core::array::from_fn(|_| AtomicWord::new(0)),
            released_twice: AtomicWord::new(0),
            leaked: AtomicWord::new(0),
            unclaimed: AtomicWord::new(0),
            wait_count: AtomicWord::new(0),
            wait_sum_ns: AtomicWord::new(0),
            wait_max_ns: AtomicWord::new(0),
        }
    }

    pub(crate) fn reject(&self, reason: Reason) {
        self.rejected[reason.index()].fetch_add(1, Relaxed);
    }

    pub(crate) fn rejected(&self) -> RejectedByReason {
        let mut out = [0u64; 8];
        for (o, c) in out.iter_mut().zip(&self.rejected) {
            *o = c.load(Relaxed) as u64;
        }
        RejectedByReason(out)
    }

    /// Dispatcher only (see `admitted_queued`): a plain load + store is exact.
    fn bump(c: &AtomicWord, f: impl FnOnce(Word) -> Word) {
        c.store(f(c.load(Relaxed)), Relaxed);
    }

    /// Dispatcher only: a queued waiter was granted.
    pub(crate) fn record_queued_grant(&self) {
        Self::bump(&self.admitted_queued, |v| v.wrapping_add(1));
    }

    /// Dispatcher only: a queued waiter waited `ns`.
    pub(crate) fn record_wait(&self, ns: Word) {
        Self::bump(&self.wait_count, |v| v.wrapping_add(1));
        Self::bump(&self.wait_sum_ns, |v| v.wrapping_add(ns));
        Self::bump(&self.wait_max_ns, |v| v.max(ns));
    }

    /// `admitted_total`.
    pub(crate) fn admitted_total(&self) -> u64 {
        self.admitted
            .sum()
            .wrapping_add(self.admitted_queued.load(Relaxed) as u64)
    }
}
