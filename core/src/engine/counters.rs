//! The counters behind the stats (docs/design.md §8.1), off the permit word's cache line.
//!
//! The one counter on the fast path (`admitted_total`) is sharded: under `std` each of the first
//! [`SHARDS`] threads owns a shard outright; everything else is counted on slow paths only, and
//! the dispatcher-only counters are plain load + store (one writer at a time, serialized by the
//! dispatch flag).

use crossbeam_utils::CachePadded;

use crate::{
    reason::Reason,
    reason::RejectedByReason,
    stats::{WAIT_BUCKETS, WaitHistogram},
    sync::{AtomicWord, Ordering::*, Word},
};

const SHARDS: usize = 16;

/// Lanes of the [`ShardedCounter`]: the counts that the fast paths bump.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lane {
    /// Admissions on the fast path.
    Admitted = 0,
    /// Budget units taken by fast-path grants.
    Reserved = 1,
    /// Budget units used by ended calls.
    Consumed = 2,
}
const LANES: usize = 3;

/// The fast paths' counters (admissions, and a budget's reserved and consumed units), off the
/// permit word's cache line: one cache line per shard holds every lane.
///
/// Under `std` each of the first [`SHARDS`] threads of the process owns one shard outright and
/// bumps it with a plain load and store (no locked instruction: exact, because it is the only
/// writer); later threads share an `overflow` shard with `fetch_add`. Without `std` the shard
/// is picked by hashing the caller's stack address (threads' stacks lie far apart).
#[derive(Debug)]
pub(crate) struct ShardedCounter {
    shards: [CachePadded<[AtomicWord; LANES]>; SHARDS],
    overflow: CachePadded<[AtomicWord; LANES]>,
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
            shards: [const { CachePadded::new([const { AtomicWord::new(0) }; LANES]) }; SHARDS],
            overflow: CachePadded::new([const { AtomicWord::new(0) }; LANES]),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        let lanes = || core::array::from_fn(|_| AtomicWord::new(0));
        Self {
            shards: core::array::from_fn(|_| CachePadded::new(lanes())),
            overflow: CachePadded::new(lanes()),
        }
    }

    /// Adds `n` to `lane`.
    #[inline]
    pub(crate) fn add(&self, lane: Lane, n: Word) {
        self.add_pair(lane, n, Lane::Reserved, 0);
    }

    /// Adds `a` to lane `la` and, unless `b` is 0, `b` to lane `lb` (one shard look-up).
    #[inline]
    pub(crate) fn add_pair(&self, la: Lane, a: Word, lb: Lane, b: Word) {
        // Relaxed everywhere: statistics; they publish nothing.
        #[cfg(all(feature = "std", not(loom)))]
        {
            let i = thread_shard::index();
            if let Some(shard) = self.shards.get(i) {
                // This thread is the shard's only writer: no RMW needed.
                let bump = |c: &AtomicWord, n: Word| {
                    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
                };
                bump(&shard[la as usize], a);
                if b != 0 {
                    bump(&shard[lb as usize], b);
                }
                return;
            }
        }
        #[cfg(all(not(feature = "std"), not(loom)))]
        let shard = {
            let probe = 0u8;
            // Fibonacci hashing of the page number: default thread stacks are 2 MiB + 4 KiB
            // apart, which a plain modulus of the address maps to one shard.
            let page = core::ptr::addr_of!(probe).addr() >> 12;
            let i = page.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> (usize::BITS - 4);
            &self.shards[i % SHARDS]
        };
        // Threads past the shards (and every loom thread) share the overflow shard.
        #[cfg(any(feature = "std", loom))]
        let shard = &self.overflow;
        shard[la as usize].fetch_add(a, Relaxed);
        if b != 0 {
            shard[lb as usize].fetch_add(b, Relaxed);
        }
    }

    /// The total of `lane`.
    pub(crate) fn sum(&self, lane: Lane) -> u64 {
        self.shards
            .iter()
            .chain(core::iter::once(&self.overflow))
            .map(|s| s[lane as usize].load(Relaxed) as u64)
            .fold(0u64, u64::wrapping_add)
    }
}

/// The slow-path counters of one bulkhead.
#[derive(Debug)]
pub(crate) struct Counters {
    /// Admissions on the fast path (any thread), and the budget units of fast-path grants and
    /// of ended calls (lanes of one sharded counter).
    pub(crate) admitted: ShardedCounter,
    /// Grants to queued waiters. Written only by the dispatcher (one at a time, serialized by
    /// its flag's Acquire/Release), so plain load + store; like the `wait_*` fields.
    pub(crate) admitted_queued: AtomicWord,
    pub(crate) rejected: [AtomicWord; Reason::COUNT],
    /// Admissions observe mode let through, by the reason the enforced decision would have
    /// given (docs/design.md §4.7).
    pub(crate) observed: [AtomicWord; Reason::COUNT],
    pub(crate) released_twice: AtomicWord,
    pub(crate) leaked: AtomicWord,
    /// Permits of orphaned calls whose work goes on (a gauge), and all ever orphaned.
    pub(crate) orphaned: AtomicWord,
    pub(crate) orphaned_total: AtomicWord,
    /// Permits in `GRANTED` cells.
    pub(crate) unclaimed: AtomicWord,
    pub(crate) wait_count: AtomicWord,
    pub(crate) wait_sum_ns: AtomicWord,
    pub(crate) wait_max_ns: AtomicWord,
    /// The waits per bucket of [`WaitHistogram`] (dispatcher only, as `wait_count`).
    pub(crate) wait_buckets: [AtomicWord; WAIT_BUCKETS],
}

impl Counters {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            admitted: ShardedCounter::new(),
            admitted_queued: AtomicWord::new(0),
            rejected: [const { AtomicWord::new(0) }; Reason::COUNT],
            observed: [const { AtomicWord::new(0) }; Reason::COUNT],
            released_twice: AtomicWord::new(0),
            leaked: AtomicWord::new(0),
            orphaned: AtomicWord::new(0),
            orphaned_total: AtomicWord::new(0),
            unclaimed: AtomicWord::new(0),
            wait_count: AtomicWord::new(0),
            wait_sum_ns: AtomicWord::new(0),
            wait_max_ns: AtomicWord::new(0),
            wait_buckets: [const { AtomicWord::new(0) }; WAIT_BUCKETS],
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            admitted: ShardedCounter::new(),
            admitted_queued: AtomicWord::new(0),
            rejected: core::array::from_fn(|_| AtomicWord::new(0)),
            observed: core::array::from_fn(|_| AtomicWord::new(0)),
            released_twice: AtomicWord::new(0),
            leaked: AtomicWord::new(0),
            orphaned: AtomicWord::new(0),
            orphaned_total: AtomicWord::new(0),
            unclaimed: AtomicWord::new(0),
            wait_count: AtomicWord::new(0),
            wait_sum_ns: AtomicWord::new(0),
            wait_max_ns: AtomicWord::new(0),
            wait_buckets: core::array::from_fn(|_| AtomicWord::new(0)),
        }
    }

    pub(crate) fn reject(&self, reason: Reason) {
        self.rejected[reason.index()].fetch_add(1, Relaxed);
    }

    pub(crate) fn rejected(&self) -> RejectedByReason {
        Self::by_reason(&self.rejected)
    }

    /// Counts one admission observe mode let through that the enforced decision would have
    /// refused (or queued) with `reason`.
    pub(crate) fn observe(&self, reason: Reason) {
        self.observed[reason.index()].fetch_add(1, Relaxed);
    }

    pub(crate) fn observed(&self) -> RejectedByReason {
        Self::by_reason(&self.observed)
    }

    fn by_reason(counts: &[AtomicWord; Reason::COUNT]) -> RejectedByReason {
        let mut out = [0u64; Reason::COUNT];
        for (o, c) in out.iter_mut().zip(counts) {
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
        Self::bump(
            &self.wait_buckets[WaitHistogram::bucket_of(ns as u64)],
            |v| v.wrapping_add(1),
        );
    }

    /// The queue-wait histogram.
    pub(crate) fn wait_histogram(&self) -> WaitHistogram {
        let mut out = [0u64; WAIT_BUCKETS];
        for (o, c) in out.iter_mut().zip(&self.wait_buckets) {
            *o = c.load(Relaxed) as u64;
        }
        WaitHistogram(out)
    }

    /// Counts an explicit release of an already released handle.
    pub(crate) fn record_double_release(&self) {
        self.released_twice.fetch_add(1, Relaxed);
    }

    /// Counts permits returned because a binding handle was destroyed while held.
    pub(crate) fn record_leak(&self, w: Word) {
        self.leaked.fetch_add(w, Relaxed);
    }

    /// Permits in `GRANTED` cells now.
    pub(crate) fn unclaimed_now(&self) -> u64 {
        // Acquire: pairs with the grant bookkeeping (see `Engine::pass`).
        self.unclaimed.load(Acquire) as u64
    }

    pub(crate) fn released_twice_total(&self) -> u64 {
        self.released_twice.load(Relaxed) as u64
    }

    /// Permits of orphaned calls in flight now.
    pub(crate) fn orphaned_now(&self) -> u64 {
        // Acquire: pairs with the orphan's reservation and the end's decrement (drain).
        self.orphaned.load(Acquire) as u64
    }

    pub(crate) fn orphaned_total(&self) -> u64 {
        self.orphaned_total.load(Relaxed) as u64
    }

    pub(crate) fn leaked_total(&self) -> u64 {
        self.leaked.load(Relaxed) as u64
    }

    pub(crate) fn wait_count_total(&self) -> u64 {
        self.wait_count.load(Relaxed) as u64
    }

    pub(crate) fn wait_sum_total(&self) -> u64 {
        self.wait_sum_ns.load(Relaxed) as u64
    }

    pub(crate) fn wait_max(&self) -> u64 {
        self.wait_max_ns.load(Relaxed) as u64
    }

    /// `admitted_total`.
    pub(crate) fn admitted_total(&self) -> u64 {
        self.admitted
            .sum(Lane::Admitted)
            .wrapping_add(self.admitted_queued.load(Relaxed) as u64)
    }
}
