//! The stats schema (docs/design.md §8.1): one [`Stats`] value, the same keys in every layer,
//! and [`Stats::visit`], which walks it field by field so that bindings build their dicts and
//! objects from the schema instead of copying it.

use core::fmt;

use crate::policy::{adaptive::AdaptiveStats, breaker::CircuitStats};
pub use crate::reason::RejectedByReason;

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
    /// Permits of orphaned calls whose work goes on (`Call::orphan`, docs/design.md §5.3):
    /// outside `active`, at most `max_orphaned`; `drain` waits for them.
    pub orphaned_in_flight: u64,
    /// Permits ever orphaned.
    pub orphaned_total: u64,
    /// Ring cells free for new waiters.
    pub ring_free: u64,
    /// Acquires that queued and were then granted.
    pub queue_wait_count: u64,
    /// Their total wait, enqueue to grant, in ns of the host clock.
    pub queue_wait_sum_ns: u64,
    /// The longest such wait, in ns.
    pub queue_wait_max_ns: u64,
    /// Those waits per power-of-two bucket of ns (C35).
    pub queue_wait_histogram: WaitHistogram,
    /// The adaptive limit's state; `None` unless one is attached.
    pub adaptive: Option<AdaptiveStats>,
    /// The circuit breaker's state and counters; `None` unless one is attached. Reading the
    /// stats commits a due lazy transition (open → half-open) like any state read.
    pub circuit: Option<CircuitStats>,
    /// The budget's state and settlement counters (docs/design.md §4.5); `None` without a
    /// budget.
    pub budget: Option<BudgetStats>,
    /// The revision of the limits in force (docs/design.md §4.6): 0 until the first
    /// `apply_limits`.
    pub revision: u64,
    /// The dimensions observe mode lets through (docs/design.md §4.7).
    pub observe: crate::observe::Observe,
    /// Admissions observe mode let through that the enforced decision would not have admitted
    /// at once, by the reason it would have given (`concurrency_limit`, `budget_limit`); all
    /// reason keys, as `rejected_by_reason`. Such admissions count in `admitted_total` and
    /// `active` (I1 is exempt for the observed dimension), never in `rejected_by_reason`.
    pub observed_by_reason: RejectedByReason,
    /// Observer calls that panicked (caught under `std`, docs/design.md §8.2); 0 without an
    /// observer.
    pub observer_panics: u64,
    /// Reservations held now (docs/design.md §5.8; their units count in `active` and the
    /// budget's `in_use`).
    pub reservations_held: u64,
    /// Reservations whose TTL passed before a commit or an abort (their units returned).
    pub reservations_expired_total: u64,
    /// Load shedding's signals and sheds (docs/design.md §4.11); `None` without a threshold.
    pub load: Option<crate::load::LoadStats>,
}

/// One admission class of a classed bulkhead now ([`Bulkhead::class_stats`]; docs/design.md
/// §4.8). Per dimension: its floor, its ceiling and what it holds (granted, claimed or not).
///
/// [`Bulkhead::class_stats`]: crate::Bulkhead::class_stats
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassStats {
    /// The class index.
    pub class: u16,
    /// Its priority.
    pub priority: u8,
    /// Permits protected for it.
    pub floor: u64,
    /// The most permits it may hold.
    pub ceiling: u64,
    /// Permits it holds.
    pub in_flight: u64,
    /// Budget units protected for it.
    pub budget_floor: u64,
    /// The most budget units it may hold.
    pub budget_ceiling: u64,
    /// Budget units it holds.
    pub budget_in_use: u64,
    /// Its live waiters.
    pub queued: u64,
    /// Which of its own ceilings it observes (docs/design.md §4.8).
    pub observe: crate::observe::Observe,
    /// Requests its observed ceilings would have refused: let through (also counted in the
    /// bulkhead's `observed_by_reason`) or refused by another bound.
    pub observed: u64,
}

/// The budget block of [`Stats`]: the second dimension, the same shape as the permits' fields.
///
/// Read from one load of the permit word (with the ceiling and the unclaimed count beside
/// it), so at quiescent points `available + in_use + granted_unclaimed == limit` (I2 for the
/// budget) and `reserved_total + overrun_total == consumed_total + refunded_total + in_use +
/// overrun_held` (C30).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetStats {
    /// The current ceiling, `0 ..= max_budget` (`set_budget`).
    pub limit: u64,
    /// The ceiling the bulkhead was built with.
    pub max_budget: u64,
    /// Units held by claimed grants (charged to the budget; `overrun_held` beside it).
    pub in_use: u64,
    /// Units free now; negative after a shrink until releases pay it back.
    pub available: i64,
    /// Units granted to waiters that have not claimed them yet.
    pub granted_unclaimed: u64,
    /// Units taken by grants.
    pub reserved_total: u64,
    /// Units reported used when calls ended (a call ended without usage used its whole hold).
    pub consumed_total: u64,
    /// Units returned unused (refunds, and the rest of a hold at settlement).
    pub refunded_total: u64,
    /// Units reported used beyond what their call held, and streaming growth that did not fit.
    pub overrun_total: u64,
    /// Units of live holds beyond the budget: streaming growth that did not fit, held but never
    /// charged (so a hold may exceed the budget by this much: `in_use + overrun_held ≤ limit +
    /// overrun_held`, docs/design.md §4.5).
    pub overrun_held: u64,
    /// The total cost of queued waiters (bounded by `max_queued_cost`, docs/design.md §4.5).
    pub queued_cost: u64,
}

/// How a nested part of the stats is keyed (see [`StatsVisitor::begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nested {
    /// Keys are field names (`adaptive`, `circuit`): a layer may re-spell them (Node
    /// camel-cases).
    Fields,
    /// Keys are reason names (`rejected_by_reason`): every layer keeps them exactly.
    Reasons,
    /// Keys are bucket bounds (`queue_wait_histogram`): every layer keeps them exactly.
    Buckets,
}

/// Buckets of the [`WaitHistogram`].
pub const WAIT_BUCKETS: usize = 28;

/// The queue-wait histogram (C35, docs/design.md §8.1): granted waits (enqueue → grant on the
/// host clock, the waits of `queue_wait_count`) counted per power-of-two bucket of ns. Bucket
/// `i < 27` counts waits below `2^(10+i)` ns and at or above the previous bound (bucket 0:
/// below 1 024 ns ≈ 1 µs; bucket 26: below 2^36 ns ≈ 68.7 s); bucket 27 (`"inf"`) the rest.
/// Fixed buckets, no allocation; written by the dispatcher only (one writer at a time), so each
/// count is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitHistogram(pub [u64; WAIT_BUCKETS]);

impl WaitHistogram {
    /// The buckets' keys, in every layer: each bucket's exclusive upper bound in ns, and
    /// `"inf"`.
    pub const KEYS: [&'static str; WAIT_BUCKETS] = [
        "1024",
        "2048",
        "4096",
        "8192",
        "16384",
        "32768",
        "65536",
        "131072",
        "262144",
        "524288",
        "1048576",
        "2097152",
        "4194304",
        "8388608",
        "16777216",
        "33554432",
        "67108864",
        "134217728",
        "268435456",
        "536870912",
        "1073741824",
        "2147483648",
        "4294967296",
        "8589934592",
        "17179869184",
        "34359738368",
        "68719476736",
        "inf",
    ];

    /// The bucket of a wait of `ns`.
    pub const fn bucket_of(ns: u64) -> usize {
        // Bit length − 10: [2^(b−1), 2^b) is bucket b − 10, below 2^10 bucket 0.
        let bits = (u64::BITS - ns.leading_zeros()) as usize;
        if bits <= 10 {
            0
        } else if bits - 10 < WAIT_BUCKETS {
            bits - 10
        } else {
            WAIT_BUCKETS - 1
        }
    }

    /// The exclusive upper bound of bucket `i` in ns (`None` for the last one, and past it).
    pub const fn bound_ns(i: usize) -> Option<u64> {
        if i + 1 < WAIT_BUCKETS {
            Some(1 << (10 + i))
        } else {
            None
        }
    }

    /// `(key, count)` per bucket, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Self::KEYS.iter().copied().zip(self.0.iter().copied())
    }

    /// The number of waits counted (equals `queue_wait_count`).
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// A consumer of the stats schema, driven by [`Stats::visit`] in schema order. Bindings build
/// their dict / object with one visitor, so a new field or reason is one change in the core.
pub trait StatsVisitor {
    /// An unsigned counter or gauge (`active`, `queue_wait_sum_ns`, a reason's count, …).
    fn count(&mut self, key: &'static str, value: u64);
    /// A signed gauge (`available`, negative after a shrink).
    fn signed(&mut self, key: &'static str, value: i64);
    /// A word (`algorithm`, the circuit `state`).
    fn text(&mut self, key: &'static str, value: &'static str);
    /// A nested part starts (`rejected_by_reason`, `adaptive`, `circuit`); [`end`](Self::end)
    /// closes it.
    fn begin(&mut self, key: &'static str, nested: Nested);
    /// The nested part that began last ends.
    fn end(&mut self);
    /// A part that is absent (`adaptive` / `circuit` without that policy): null / `None`.
    fn absent(&mut self, key: &'static str);
}

impl Stats {
    /// Walks every field in schema order (docs/design.md §8.1).
    pub fn visit<V: StatsVisitor + ?Sized>(&self, v: &mut V) {
        v.count("active", self.active);
        v.count("queued", self.queued);
        v.count("granted_unclaimed", self.granted_unclaimed);
        v.count("limit", self.limit);
        v.count("max_concurrent", self.max_concurrent);
        v.signed("available", self.available);
        v.count("admitted_total", self.admitted_total);
        v.begin("rejected_by_reason", Nested::Reasons);
        for (r, n) in self.rejected_by_reason.iter() {
            v.count(r.as_str(), n);
        }
        v.end();
        v.count("released_twice_total", self.released_twice_total);
        v.count("leaked_total", self.leaked_total);
        v.count("orphaned_in_flight", self.orphaned_in_flight);
        v.count("orphaned_total", self.orphaned_total);
        v.count("ring_free", self.ring_free);
        v.count("queue_wait_count", self.queue_wait_count);
        v.count("queue_wait_sum_ns", self.queue_wait_sum_ns);
        v.count("queue_wait_max_ns", self.queue_wait_max_ns);
        v.begin("queue_wait_histogram", Nested::Buckets);
        for (k, n) in self.queue_wait_histogram.iter() {
            v.count(k, n);
        }
        v.end();
        v.count("revision", self.revision);
        v.text("observe", self.observe.as_str());
        v.begin("observed_by_reason", Nested::Reasons);
        for (r, n) in self.observed_by_reason.iter() {
            v.count(r.as_str(), n);
        }
        v.end();
        v.count("observer_panics", self.observer_panics);
        v.count("reservations_held", self.reservations_held);
        v.count(
            "reservations_expired_total",
            self.reservations_expired_total,
        );
        match &self.adaptive {
            None => v.absent("adaptive"),
            Some(a) => {
                v.begin("adaptive", Nested::Fields);
                v.text("algorithm", a.algorithm.as_str());
                v.count("limit", a.limit);
                v.count("min_limit", a.min_limit);
                v.count("max_limit", a.max_limit);
                v.count("samples_total", a.samples_total);
                v.count("decreases_total", a.decreases_total);
                v.count("last_rtt_ns", a.last_rtt_ns);
                v.count("long_rtt_ns", a.long_rtt_ns);
                v.end();
            }
        }
        match &self.circuit {
            None => v.absent("circuit"),
            Some(c) => {
                v.begin("circuit", Nested::Fields);
                v.text("state", c.state.as_str());
                v.count("generation", c.generation);
                v.count("consecutive_failures", c.consecutive_failures);
                v.count("window_requests", c.window_requests);
                v.count("window_failures", c.window_failures);
                v.count("opened_at_ns", c.opened_at_ns);
                v.end();
            }
        }
        match &self.budget {
            None => v.absent("budget"),
            Some(b) => {
                v.begin("budget", Nested::Fields);
                v.count("limit", b.limit);
                v.count("max_budget", b.max_budget);
                v.count("in_use", b.in_use);
                v.signed("available", b.available);
                v.count("granted_unclaimed", b.granted_unclaimed);
                v.count("reserved_total", b.reserved_total);
                v.count("consumed_total", b.consumed_total);
                v.count("refunded_total", b.refunded_total);
                v.count("overrun_total", b.overrun_total);
                v.count("overrun_held", b.overrun_held);
                v.count("queued_cost", b.queued_cost);
                v.end();
            }
        }
        match &self.load {
            None => v.absent("load"),
            Some(l) => {
                v.begin("load", Nested::Fields);
                v.count("event_loop_lag_ns", l.event_loop_lag_ns);
                v.count("cpu_permille", l.cpu_permille);
                v.count("overloaded", l.overloaded);
                v.count("shed_total", l.shed_total);
                v.end();
            }
        }
    }
}

/// `key=value` pairs, nested keys dotted (`rejected.timeout=3`), for `Display`.
struct Line<'a, 'b> {
    f: &'a mut fmt::Formatter<'b>,
    prefix: Option<&'static str>,
    /// Inside the histogram: empty buckets are left out.
    buckets: bool,
    first: bool,
    err: fmt::Result,
}

impl Line<'_, '_> {
    fn put(&mut self, key: &str, value: &dyn fmt::Display) {
        if self.err.is_err() {
            return;
        }
        let sep = if self.first { "" } else { " " };
        self.first = false;
        self.err = match self.prefix {
            Some(p) => write!(self.f, "{sep}{p}.{key}={value}"),
            None => write!(self.f, "{sep}{key}={value}"),
        };
    }
}

impl StatsVisitor for Line<'_, '_> {
    fn count(&mut self, key: &'static str, value: u64) {
        if !(self.buckets && value == 0) {
            self.put(key, &value);
        }
    }
    fn signed(&mut self, key: &'static str, value: i64) {
        self.put(key, &value);
    }
    fn text(&mut self, key: &'static str, value: &'static str) {
        self.put(key, &value);
    }
    fn begin(&mut self, key: &'static str, nested: Nested) {
        self.buckets = nested == Nested::Buckets;
        self.prefix = Some(match key {
            "rejected_by_reason" => "rejected",
            "observed_by_reason" => "observed",
            "queue_wait_histogram" => "wait_lt",
            k => k,
        });
    }
    fn end(&mut self) {
        self.prefix = None;
        self.buckets = false;
    }
    fn absent(&mut self, _key: &'static str) {}
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = Line {
            f,
            prefix: None,
            buckets: false,
            first: true,
            err: Ok(()),
        };
        self.visit(&mut line);
        line.err
    }
}
