//! Multi-thread stress of one bulkhead (docs/design.md §11): 8 worker threads run random acquires
//! (`try_acquire`, `enqueue` + poll loops, `acquire_blocking` with short timeouts), releases
//! (whole, partial, checked), cancels (`cancel(t, aborted)`, `abandon`) and timeouts
//! (`cancel(t, timeout)` after a random patience, counted in the other threads' operations so
//! that outcomes do not hinge on the OS scheduler), 2·10⁵ operations per test in `--release`
//! (`make soak`: 10⁶; scaled down in debug builds). Each thread tallies what it observed; at the end
//! the bulkhead must be quiescent and its counters must equal the tallies. Variants add a
//! concurrent `set_limit` thread, or a `close()` half-way through. Nothing here asserts on time.
//!
//! Run in release: `cargo test --release -p hullguard-tests --test stress`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::SeqCst},
    },
    task::{Wake, Waker},
    thread,
    time::Duration,
};

use hullguard_core::{
    AcquireError, Admission, Bulkhead, CancelError, ClockSource, Config, Permit, Reason, Stats,
    Ticket, TicketPoll,
};

const THREADS: u64 = 8;

/// Operations per worker thread: 8 × 25 000 = 2·10⁵ per test (`make test`; 8 × 5 000 in debug),
/// or `HULLGUARD_STRESS_OPS` per thread — `make soak` runs 125 000 (10⁶ per test). Under a CPU
/// hog the workers' yield loops give their slices away, so `make test` keeps the short run.
fn ops_per_thread() -> u64 {
    if let Some(n) = std::env::var("HULLGUARD_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if cfg!(debug_assertions) {
        5_000
    } else {
        25_000
    }
}

/// SplitMix64: a tiny deterministic generator per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Yields a waiter spends waiting for the wake-up of a settlement that is already committed
/// (its cancel lost to the grant) before the test calls the wake-up lost. Not a timing
/// assertion: a hang guard, orders of magnitude above what a preempted dispatcher needs.
const LOST_WAKE_YIELDS: u64 = 50_000_000;

/// Records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

/// What one thread observed.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    /// Acquires that ended with the caller holding permits.
    grants: u64,
    /// Of which: queued tickets whose poll returned `Granted`.
    queued_grants: u64,
    /// Rejections per reason, as answered to the caller.
    rejected: [u64; Reason::COUNT],
    /// `abandon` calls (their outcome is not reported to the caller: each adds exactly one
    /// grant or one `aborted` / `shutdown` / `concurrency_limit` rejection to the stats).
    abandons: u64,
    /// Acquires started after `is_closed()` was observed (each must be rejected `shutdown`).
    after_close: u64,
    /// Tickets whose owner waited for the wake-up (never polling before it) and got one.
    woken: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.grants += o.grants;
        self.queued_grants += o.queued_grants;
        for (a, b) in self.rejected.iter_mut().zip(o.rejected) {
            *a += b;
        }
        self.abandons += o.abandons;
        self.after_close += o.after_close;
        self.woken += o.woken;
    }
}

/// What every thread shares.
struct Shared {
    bh: Bulkhead,
    /// Permits the threads hold, by their own count: incremented after an acquire returns,
    /// decremented before a release, so it never exceeds what the engine has out.
    held: AtomicU64,
    /// `held` may never exceed this (I1): the limit, or `max_concurrent` when it changes.
    bound: u64,
    /// Operations started, over all workers.
    progress: AtomicU64,
    done: AtomicBool,
}

/// How an acquire ended for its caller.
enum Outcome {
    Granted(u64),
    Rejected(Reason),
    /// Given up through `abandon`: outcome unknown to the caller.
    Abandoned,
    /// Weight 0: an argument error, never counted.
    Invalid,
}

struct Worker<'a> {
    sh: &'a Shared,
    rng: Rng,
    tally: Tally,
    units: Vec<u64>,
    permits: Vec<Permit<'a>>,
}

impl<'a> Worker<'a> {
    fn bh(&self) -> &'a Bulkhead {
        &self.sh.bh
    }

    fn weight(&mut self) -> u64 {
        // Weight 0 now and then: InvalidWeight, never counted.
        if self.rng.below(200) == 0 {
            0
        } else {
            1 + self.rng.below(3)
        }
    }

    fn granted(&mut self, w: u64) {
        self.tally.grants += 1;
        let held = self.sh.held.fetch_add(w, SeqCst) + w;
        assert!(
            held <= self.sh.bound,
            "I1: threads hold {held} permits, bound {}: {}",
            self.sh.bound,
            self.bh().stats()
        );
    }

    fn releasing(&self, w: u64) {
        self.sh.held.fetch_sub(w, SeqCst);
    }

    fn err(&mut self, e: AcquireError) -> Outcome {
        match e.reason() {
            Some(r) => Outcome::Rejected(r),
            None => Outcome::Invalid,
        }
    }

    /// Whether a waiter has waited long enough: `patience` operations started by the other
    /// threads since `start` (so the answer does not depend on how the OS schedules threads),
    /// or, when they are all waiting too, `64 × (patience + 1)` yields of its own.
    fn out_of_patience(&self, start: u64, patience: u64, yields: u64) -> bool {
        self.sh.progress.load(SeqCst) - start >= patience || yields >= 64 * (patience + 1)
    }

    /// Polls `t` until it settles (a yield between polls); out of patience it is cancelled with
    /// `reason`, or abandoned when `reason` is `None`.
    fn wait(&mut self, t: Ticket, patience: u64, reason: Option<Reason>) -> Outcome {
        let bh = self.bh();
        let start = self.sh.progress.load(SeqCst);
        let mut yields = 0;
        loop {
            match bh.poll_ticket(t, None) {
                Ok(TicketPoll::Pending) => {}
                Ok(TicketPoll::Granted(w)) => {
                    self.tally.queued_grants += 1;
                    return Outcome::Granted(w);
                }
                Ok(TicketPoll::Rejected(r)) => return Outcome::Rejected(r.reason),
                Err(_) => panic!("the owner's ticket {t:?} went stale"),
            }
            if self.out_of_patience(start, patience, yields) {
                let Some(reason) = reason else {
                    bh.abandon(t);
                    return Outcome::Abandoned;
                };
                match bh.cancel(t, reason) {
                    Ok(()) => return Outcome::Rejected(reason),
                    // Settled first: the next poll consumes it.
                    Err(CancelError::Granted | CancelError::Rejected(_)) => {}
                    Err(e) => panic!("cancel of the owner's ticket {t:?}: {e:?}"),
                }
            }
            yields += 1;
            thread::yield_now();
        }
    }

    /// The async owner's protocol: registers a waker at enqueue and polls only once woken.
    /// Out of patience it cancels with `reason`; if the waiter settled first, the wake-up must
    /// still come (state is committed first, wakers run after), so it keeps waiting for it.
    fn wait_for_wake(&mut self, t: Ticket, flag: &Flag, patience: u64, reason: Reason) -> Outcome {
        let bh = self.bh();
        let start = self.sh.progress.load(SeqCst);
        let mut yields = 0;
        let mut settled_at = None;
        while !flag.0.load(SeqCst) {
            match settled_at {
                None if self.out_of_patience(start, patience, yields) => {
                    match bh.cancel(t, reason) {
                        Ok(()) => return Outcome::Rejected(reason),
                        Err(CancelError::Granted | CancelError::Rejected(_)) => {
                            settled_at = Some(yields);
                        }
                        Err(e) => panic!("cancel of the owner's ticket {t:?}: {e:?}"),
                    }
                }
                Some(at) => assert!(
                    yields - at < LOST_WAKE_YIELDS,
                    "lost wake-up: ticket {t:?} settled, its waker never ran: {}",
                    bh.stats()
                ),
                None => {}
            }
            yields += 1;
            thread::yield_now();
        }
        self.tally.woken += 1;
        match bh.poll_ticket(t, None) {
            Ok(TicketPoll::Granted(w)) => {
                self.tally.queued_grants += 1;
                Outcome::Granted(w)
            }
            Ok(TicketPoll::Rejected(r)) => Outcome::Rejected(r.reason),
            other => panic!("woken before the settlement was committed: {other:?}"),
        }
    }

    fn acquire(&mut self, roll: u64) -> Outcome {
        let bh = self.bh();
        let w = self.weight();
        match roll {
            // Fast path, handle-free.
            0..20 => match bh.try_acquire_units(w) {
                Ok(()) => Outcome::Granted(w),
                Err(e) => self.err(e),
            },
            // Fast path, RAII permit.
            20..28 => match bh.try_acquire(w) {
                Ok(p) => {
                    self.permits.push(p);
                    Outcome::Granted(w)
                }
                Err(e) => self.err(e),
            },
            // Queue with a waker, wait for the wake-up; time out after a random patience.
            28..40 => {
                let flag = Arc::new(Flag::default());
                match bh.enqueue(w, Some(&Waker::from(flag.clone()))) {
                    Ok(Admission::Granted) => Outcome::Granted(w),
                    Ok(Admission::Queued(t)) => {
                        let patience = self.rng.below(128);
                        let reason = if self.rng.below(4) == 0 {
                            Reason::Aborted
                        } else {
                            Reason::Timeout
                        };
                        self.wait_for_wake(t, &flag, patience, reason)
                    }
                    Err(e) => self.err(e),
                }
            }
            // Queue, poll; time out (or abort) after a random patience.
            40..56 => match bh.enqueue(w, None) {
                Ok(Admission::Granted) => Outcome::Granted(w),
                Ok(Admission::Queued(t)) => {
                    let patience = self.rng.below(64);
                    let reason = match self.rng.below(4) {
                        0 => Some(Reason::Aborted),
                        1 => None,
                        _ => Some(Reason::Timeout),
                    };
                    self.wait(t, patience, reason)
                }
                Err(e) => self.err(e),
            },
            // Blocking waits with a short deadline (0 = try_acquire).
            _ => {
                let timeout = Duration::from_micros(self.rng.below(200));
                match bh.acquire_blocking(w, Some(timeout)) {
                    Ok(p) => {
                        self.permits.push(p);
                        Outcome::Granted(w)
                    }
                    Err(e) => self.err(e),
                }
            }
        }
    }

    /// Releases one hold (whole, partly, or through the checked raw release).
    fn release(&mut self, how: u64) {
        let n_units = self.units.len() as u64;
        let n = n_units + self.permits.len() as u64;
        if n == 0 {
            return;
        }
        let k = self.rng.below(n);
        if k < n_units {
            let w = self.units.swap_remove(k as usize);
            self.releasing(w);
            if how % 4 == 0 {
                // Held permits always fit under the limit: the checked release accepts them.
                self.bh()
                    .release_units_checked(w)
                    .unwrap_or_else(|_| panic!("checked release of {w} held permits refused"));
            } else {
                self.bh().release_units(w);
            }
            return;
        }
        let k = (k - n_units) as usize;
        let held = self.permits[k].weight();
        if how % 2 == 0 {
            // Partial release, sometimes out of range (refused, nothing changes: I9).
            let n = self.rng.below(held + 2);
            if n == 0 || n > held {
                assert!(self.permits[k].release_partial(n).is_err());
                assert_eq!(self.permits[k].weight(), held);
            } else {
                self.releasing(n);
                self.permits[k].release_partial(n).unwrap();
                assert_eq!(self.permits[k].weight(), held - n);
            }
        } else {
            let p = self.permits.swap_remove(k);
            self.releasing(p.weight());
            drop(p);
        }
    }

    fn run(mut self, ops: u64) -> Tally {
        for _ in 0..ops {
            self.sh.progress.fetch_add(1, SeqCst);
            let roll = self.rng.below(100);
            if roll < 65 {
                let kind = roll * 100 / 65;
                // Callers that may wait mostly hold nothing while they do; a quarter of them
                // wait while holding (nested acquires), which only timeouts resolve.
                if kind >= 28 && self.rng.below(4) != 0 {
                    self.release_all();
                }
                let closed_before = self.bh().is_closed();
                let permits_before = self.permits.len();
                let outcome = self.acquire(kind);
                match outcome {
                    Outcome::Granted(w) => {
                        assert!(!closed_before, "I8: admitted after close()");
                        self.granted(w);
                        if self.permits.len() == permits_before {
                            self.units.push(w);
                        }
                    }
                    Outcome::Rejected(r) => {
                        self.tally.rejected[r.index()] += 1;
                        if closed_before {
                            assert_eq!(r, Reason::Shutdown, "I8: after close()");
                        }
                        // Back off a little, as a real caller would: otherwise cheap
                        // rejections eat the operation budget while the queue is full.
                        if matches!(r, Reason::QueueLimit | Reason::ConcurrencyLimit) {
                            thread::yield_now();
                        }
                    }
                    Outcome::Abandoned => self.tally.abandons += 1,
                    Outcome::Invalid => {}
                }
                if closed_before && !matches!(outcome, Outcome::Invalid) {
                    self.tally.after_close += 1;
                }
            } else {
                let how = self.rng.next();
                self.release(how);
            }
            // Hold at most three things at once so that queues drain.
            while self.units.len() + self.permits.len() > 3 {
                let how = self.rng.next() | 1;
                self.release(how);
            }
        }
        self.release_all();
        self.tally
    }

    fn release_all(&mut self) {
        for w in std::mem::take(&mut self.units) {
            self.releasing(w);
            self.bh().release_units(w);
        }
        for p in std::mem::take(&mut self.permits) {
            self.releasing(p.weight());
            drop(p);
        }
    }
}

enum Extra {
    None,
    /// A thread calling `set_limit` with random limits until the workers finish.
    Resize,
    /// `close()` once half of the operations have started.
    CloseMidway,
}

/// Runs the workers (plus the extra thread) and checks the end state against the tallies.
fn stress(cfg: Config, seed: u64, extra: Extra) -> (Stats, Tally) {
    let resizing = matches!(extra, Extra::Resize);
    let sh = Shared {
        bh: Bulkhead::new(cfg).unwrap(),
        held: AtomicU64::new(0),
        bound: cfg.max_concurrent,
        progress: AtomicU64::new(0),
        done: AtomicBool::new(false),
    };
    let ops = ops_per_thread();
    let total_ops = ops * THREADS;
    let mut total = Tally::default();
    thread::scope(|s| {
        let extra_thread = match extra {
            Extra::None => None,
            Extra::Resize => Some(s.spawn(|| {
                let mut rng = Rng(seed ^ 0x5e71);
                while !sh.done.load(SeqCst) {
                    let n = 1 + rng.below(cfg.max_concurrent);
                    sh.bh.set_limit(n).unwrap();
                    for _ in 0..rng.below(16) {
                        thread::yield_now();
                    }
                }
            })),
            Extra::CloseMidway => Some(s.spawn(|| {
                while sh.progress.load(SeqCst) < total_ops / 2 && !sh.done.load(SeqCst) {
                    thread::yield_now();
                }
                sh.bh.close();
                assert!(sh.bh.is_closed());
            })),
        };
        let workers: Vec<_> = (0..THREADS)
            .map(|i| {
                let sh = &sh;
                s.spawn(move || {
                    Worker {
                        sh,
                        rng: Rng(seed.wrapping_add(i.wrapping_mul(0x1000_0001))),
                        tally: Tally::default(),
                        units: Vec::new(),
                        permits: Vec::new(),
                    }
                    .run(ops)
                })
            })
            .collect();
        // Join everything before failing, so that a worker's panic cannot leave the extra
        // thread running forever.
        let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        sh.done.store(true, SeqCst);
        let extra_result = extra_thread.map(|t| t.join());
        for r in results {
            match r {
                Ok(t) => total.add(&t),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        if let Some(Err(panic)) = extra_result {
            std::panic::resume_unwind(panic);
        }
    });

    let bh = &sh.bh;
    let s = bh.stats();
    let ctx = format!("seed {seed:#x}, {cfg:?}: {s}; observed {total:?}");
    if std::env::var_os("HG_STRESS_VERBOSE").is_some() {
        eprintln!("{ctx}");
    }
    // I5 quiescence and I2 conservation.
    assert_eq!(sh.held.load(SeqCst), 0);
    assert_eq!(s.available, s.limit as i64, "I5 available == limit; {ctx}");
    assert_eq!(s.queued, 0, "I5 queued; {ctx}");
    assert_eq!(s.granted_unclaimed, 0, "I5 granted_unclaimed; {ctx}");
    assert_eq!(s.active, 0, "I5 active; {ctx}");
    assert_eq!(
        s.ring_free,
        if cfg.max_queue == 0 {
            0
        } else {
            cfg.ring_capacity() as u64
        },
        "every ring cell is free again; {ctx}"
    );
    assert!(bh.is_idle(), "{ctx}");
    if !resizing {
        assert_eq!(s.limit, cfg.max_concurrent, "{ctx}");
    }
    assert_eq!((s.released_twice_total, s.leaked_total), (0, 0), "{ctx}");

    // The counters equal what the callers were told. An `abandon` adds exactly one outcome the
    // caller does not see: a grant (handed back at once), or `aborted`, or a dispatcher's
    // `shutdown` / `concurrency_limit`.
    let extra_admitted = s
        .admitted_total
        .checked_sub(total.grants)
        .unwrap_or_else(|| panic!("admitted_total below the grants observed; {ctx}"));
    let mut extra_rejected = 0;
    for r in Reason::ALL {
        let got = s.rejected_by_reason.get(r);
        let seen = total.rejected[r.index()];
        let more = got
            .checked_sub(seen)
            .unwrap_or_else(|| panic!("rejected[{r}] below the rejections observed; {ctx}"));
        if !matches!(
            r,
            Reason::Aborted | Reason::Shutdown | Reason::ConcurrencyLimit
        ) {
            assert_eq!(more, 0, "rejected[{r}] vs observed; {ctx}");
        }
        extra_rejected += more;
    }
    assert_eq!(
        extra_admitted + extra_rejected,
        total.abandons,
        "each abandon settles exactly once; {ctx}"
    );
    // Queue-wait stats cover every queued grant (some grants hide inside acquire_blocking and
    // abandon).
    assert!(
        s.queue_wait_count >= total.queued_grants && s.queue_wait_count <= s.admitted_total,
        "{ctx}"
    );

    // The fast path works again (no stuck WAITERS flag), or reports shutdown.
    match bh.try_acquire(s.limit) {
        Ok(p) => {
            assert!(!bh.is_closed(), "admitted after close; {ctx}");
            drop(p);
        }
        Err(e) => {
            assert!(
                bh.is_closed(),
                "a quiescent bulkhead refused its limit: {e}; {ctx}"
            );
            assert_eq!(e.reason(), Some(Reason::Shutdown), "{ctx}");
        }
    }
    (s, total)
}

fn cfg(max_concurrent: u64, max_queue: u64) -> Config {
    Config {
        max_concurrent,
        max_queue,
        ..Config::default()
    }
}

#[test]
fn stress_mixed_small_queue() {
    // 4 live waiters over 8 threads: queue_limit is frequent.
    let (s, t) = stress(cfg(8, 4), 0x4855_4c4c_0001, Extra::None);
    assert!(s.rejected_by_reason.get(Reason::QueueLimit) > 0, "{s}");
    assert!(t.queued_grants > 0 && t.woken > 0, "{s}");
}

#[test]
fn stress_mixed_deep_queue() {
    // Every thread can queue: grants by handoff, timeouts and aborts dominate.
    let (s, t) = stress(cfg(6, 16), 0x4855_4c4c_0002, Extra::None);
    assert!(t.queued_grants > 0 && t.woken > 0, "{s}");
    assert!(s.rejected_by_reason.get(Reason::Timeout) > 0, "{s}");
}

#[test]
fn stress_with_concurrent_set_limit() {
    let (s, _) = stress(cfg(8, 8), 0x4855_4c4c_0003, Extra::Resize);
    // Shrinks below queued weights reject them `concurrency_limit` (counted above exactly).
    assert!(
        s.rejected_by_reason.get(Reason::ConcurrencyLimit) > 0,
        "{s}"
    );
}

#[test]
fn stress_close_midway() {
    let (s, t) = stress(cfg(8, 8), 0x4855_4c4c_0004, Extra::CloseMidway);
    assert!(t.after_close > 0, "{s}");
    assert!(
        s.rejected_by_reason.get(Reason::Shutdown) >= t.after_close,
        "{s}"
    );
}

/// I6 (no barging) against a dispatcher pass that runs on an empty ring at the moment an
/// arrival queues: after `enqueue` returned `Queued`, the same thread's `try_acquire` must fail
/// while its waiter is still queued. The waiter here can never be granted (weight 3, at most
/// 2 permits free), so every successful `try_acquire` is a barge.
///
/// Regression test for a race the first version of this test found (it failed on most
/// release runs): `Bulkhead::pass` cleared `WAITERS` on an empty ring after a concurrent
/// enqueuer had set it, and the fast path trusted the flag alone. The fast path now also checks
/// that the ring is empty; the loom model `loom_dispatcher_clear_vs_enqueue_no_barging` pins
/// the interleaving.
#[test]
fn no_barging_past_a_queued_waiter() {
    // Queued waiters to try (the loop runs until this many queued).
    let target: u64 = if cfg!(debug_assertions) {
        500_000
    } else {
        3_000_000
    };
    // No clock: the shorter the enqueue, the more often it lands inside the window.
    let bh = Bulkhead::with_clock(cfg(4, 2), ClockSource::None).unwrap();
    bh.try_acquire_units(2).unwrap();
    let done = AtomicBool::new(false);
    let (mut queued, mut barged) = (0u64, 0u64);
    thread::scope(|s| {
        // Every set_limit runs a dispatcher pass, mostly on an empty ring. Two of them on
        // two cores: preemptions inside a pass widen the window.
        for _ in 0..2 {
            s.spawn(|| {
                let mut limit = 3;
                while !done.load(SeqCst) {
                    bh.set_limit(limit).unwrap();
                    limit = 7 - limit;
                }
            });
        }
        while queued < target {
            // A refused enqueue (e.g. queue_limit) is simply retried: only queued ones count.
            if let Ok(Admission::Queued(t)) = bh.enqueue(3, None) {
                queued += 1;
                if bh.try_acquire_units(1).is_ok() {
                    barged += 1;
                    bh.release_units(1);
                }
                bh.abandon(t);
            }
        }
        done.store(true, SeqCst);
    });
    bh.release_units(2);
    let s = bh.stats();
    assert_eq!(
        (s.available, s.queued, s.active),
        (s.limit as i64, 0, 0),
        "{s}"
    );
    assert!(queued > 0);
    assert_eq!(
        barged, 0,
        "I6: try_acquire succeeded {barged} times right after this thread's own waiter queued \
         ({queued} queued)"
    );
}

/// Issue 12: cancel / timeout / re-enqueue churn on a small ring never refuses an arrival
/// `queue_limit` while fewer than `max_queue` waiters are live. Four threads each keep at most
/// one waiter (live, or settled until the thread itself takes the result); with one more waiter
/// parked by the test that is at most 5 = `max_queue` live, so every refusal would be spurious.
/// Phase 1: the parked waiter is the head and never moves (the permit stays held), so the tail
/// laps the 8-cell static ring and must skip its cell on every lap. Phase 2: it is gone, and a
/// fifth thread keeps taking and returning the single permit, so grants, cancels that lose to
/// a grant and timer expiries race. Counts zero refusals; asserts nothing about time.
#[test]
fn no_spurious_queue_limit_under_cancel_churn() {
    let per_phase: u64 = if cfg!(debug_assertions) {
        20_000
    } else {
        125_000
    };
    let bh = Bulkhead::<8>::try_new_static(Config {
        max_concurrent: 1,
        max_queue: 5,
        ..Config::DEFAULT
    })
    .unwrap();
    let refused = AtomicU64::new(0);
    let (grants, expired, cancelled) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let (queued, last_ticket) = (AtomicU64::new(0), AtomicU64::new(0));
    let churn = |seed: u64| {
        let mut rng = Rng(seed);
        let flag = Arc::new(Flag::default());
        let waker = Waker::from(flag.clone());
        for _ in 0..per_phase {
            let t = match bh.enqueue(1, Some(&waker)) {
                Ok(Admission::Queued(t)) => {
                    queued.fetch_add(1, SeqCst);
                    last_ticket.fetch_max(t.to_raw(), SeqCst);
                    t
                }
                Ok(Admission::Granted) => {
                    bh.release_units(1);
                    continue;
                }
                Err(e) => {
                    assert_eq!(e.reason(), Some(Reason::QueueLimit), "{e}");
                    refused.fetch_add(1, SeqCst);
                    continue;
                }
            };
            let outcome = match rng.below(3) {
                0 => bh.cancel(t, Reason::Aborted),
                1 => bh.cancel(t, Reason::Timeout),
                // A host timer's expiry: the owner takes the rejection below.
                _ => bh.expire(t, Reason::Timeout),
            };
            match outcome {
                Ok(()) if bh.poll_ticket(t, None).is_err() => {
                    cancelled.fetch_add(1, SeqCst);
                }
                Ok(()) => {
                    expired.fetch_add(1, SeqCst);
                }
                Err(CancelError::Granted | CancelError::Rejected(_)) => {
                    match bh.poll_ticket(t, None) {
                        Ok(TicketPoll::Granted(w)) => {
                            grants.fetch_add(1, SeqCst);
                            bh.release_units(w);
                        }
                        Ok(TicketPoll::Rejected(_)) => {
                            expired.fetch_add(1, SeqCst);
                        }
                        other => panic!("a settled ticket polled {other:?}"),
                    }
                }
                Err(e) => panic!("owner's ticket gone: {e:?}"),
            }
        }
    };
    // Phase 1: a parked head behind a held permit.
    let held = bh.try_acquire(1).unwrap();
    let parked = match bh.enqueue(1, None).unwrap() {
        Admission::Queued(t) => t,
        Admission::Granted => panic!("the permit is held"),
    };
    thread::scope(|s| {
        for i in 0..4u64 {
            let churn = &churn;
            s.spawn(move || churn(0xc0ffee + i));
        }
    });
    let skipped = last_ticket.load(SeqCst) + 1 > queued.load(SeqCst) + 1;
    assert!(
        skipped,
        "phase 1 never skipped the parked head's cell: {} tickets for {} waiters",
        last_ticket.load(SeqCst) + 1,
        queued.load(SeqCst) + 1
    );
    bh.cancel(parked, Reason::Aborted).unwrap();
    drop(held);
    // Phase 2: the permit changes hands constantly.
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        // Stops the holder however this scope ends (a failed worker must not hang the test).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        let _stop = StopOnDrop(&stop);
        let holder = s.spawn(|| {
            let mut rng = Rng(0x5eed);
            while !stop.load(SeqCst) {
                if let Ok(p) = bh.try_acquire(1) {
                    for _ in 0..rng.below(64) {
                        std::hint::spin_loop();
                    }
                    drop(p);
                }
                thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..4u64)
            .map(|i| {
                let churn = &churn;
                s.spawn(move || churn(0xfeed + i))
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, SeqCst);
        holder.join().unwrap();
    });
    let s = bh.stats();
    assert_eq!(refused.load(SeqCst), 0, "spurious queue_limit: {s}");
    assert_eq!(
        (s.available, s.queued, s.granted_unclaimed),
        (1, 0, 0),
        "{s}"
    );
    assert_eq!(s.ring_free, 8, "every cell free again: {s}");
    assert_eq!(s.rejected_by_reason.get(Reason::QueueLimit), 0, "{s}");
    assert!(
        expired.load(SeqCst) > 0 && cancelled.load(SeqCst) > 0,
        "expired {expired:?} cancelled {cancelled:?}"
    );
    // Grants need the holder to lose the permit to a queued waiter at least once: reported,
    // not required (they depend on the scheduler); phase 1 pins the skip path.
    eprintln!(
        "churn: {} grants, {} expired, {} cancelled, {} tickets for {} waiters",
        grants.load(SeqCst),
        expired.load(SeqCst),
        cancelled.load(SeqCst),
        last_ticket.load(SeqCst) + 1,
        queued.load(SeqCst)
    );
}

/// What one thread of the budget stress did, in budget units and calls.
#[derive(Debug, Default, Clone, Copy)]
struct BudgetTally {
    grants: u64,
    reserved: u64,
    refunded: u64,
    consumed: u64,
    overrun: u64,
    rejected: [u64; Reason::COUNT],
}

/// C29 step 7 (`../shared/cases/CASES.md`): 8 threads admit calls with random costs (1–100) on
/// a bulkhead of 4 permits and a budget of 100, queueing, refunding, streaming usage reports
/// (shrinks, growth through admission, overrun), settling with random usage
/// (below and above the hold) and cancelling; an observer samples the stats throughout. Neither
/// dimension is ever over-charged (`available ≥ 0`, so `in_use ≤ limit`); at the end the
/// bulkhead is idle and every budget counter equals the threads' own tallies, and every queue
/// wait is in the histogram and within the run's elapsed time (C35 step 6).
#[test]
fn budget_is_never_over_charged() {
    use hullguard_core::{Cancelled, Decision, HoldChange, Outcome, Request};
    use std::task::Poll;
    let bh = Arc::new(
        Bulkhead::new(Config {
            max_concurrent: 4,
            max_queue: 16,
            budget: Some(100),
            queue_timeout: Duration::MAX,
            ..Config::default()
        })
        .unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let started = std::time::Instant::now();
    let observer = {
        let (bh, done) = (bh.clone(), done.clone());
        thread::spawn(move || {
            let mut samples = 0u64;
            while !done.load(SeqCst) {
                let s = bh.stats();
                let b = s.budget.unwrap();
                assert!(s.available >= 0, "permits over-charged: {s}");
                assert!(b.available >= 0, "budget over-charged: {b:?}");
                assert!(b.available <= 100 && s.available <= 4, "minted: {s} {b:?}");
                samples += 1;
            }
            samples
        })
    };
    let ops = ops_per_thread() / 4;
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let bh = bh.clone();
            thread::spawn(move || {
                let mut rng = Rng(0x4255_4447_4554_0000 + i);
                let mut t = BudgetTally::default();
                let flag = Arc::new(Flag::default());
                let waker = Waker::from(flag.clone());
                for _ in 0..ops {
                    let cost = 1 + rng.below(100);
                    let req = Request::new(1).cost(cost);
                    let req = if rng.below(4) == 0 {
                        req.no_wait()
                    } else {
                        req
                    };
                    let call = match Bulkhead::admit_via(&*bh, &req, Some(&waker)) {
                        Decision::Granted(c) => Some(c),
                        Decision::Rejected(e) => {
                            t.rejected[e.reason().expect("a reason").index()] += 1;
                            None
                        }
                        Decision::Queued(mut w) => {
                            // Patience in polls, then the owner cancels (counted `aborted`).
                            let patience = rng.below(100);
                            let mut got = None;
                            for _ in 0..patience {
                                if let Poll::Ready(r) = w.poll(Some(&waker)) {
                                    got = Some(r.expect("never refused after queueing"));
                                    break;
                                }
                                thread::yield_now();
                            }
                            match got {
                                Some(c) => Some(c),
                                None => match w.cancel(Reason::Aborted) {
                                    Cancelled::Granted(c) => Some(c),
                                    Cancelled::Cancelled(_) => {
                                        t.rejected[Reason::Aborted.index()] += 1;
                                        None
                                    }
                                    Cancelled::Rejected(r) => panic!("rejected {r:?}"),
                                },
                            }
                        }
                    };
                    let Some(mut call) = call else { continue };
                    t.grants += 1;
                    t.reserved += cost;
                    let mut held = cost;
                    if rng.below(3) == 0 && held > 1 {
                        let n = 1 + rng.below(held - 1);
                        call.refund(n).unwrap();
                        t.refunded += n;
                        held -= n;
                    }
                    // A streaming report: the hold becomes used + remaining — shrunk, grown
                    // through admission, or held past the budget (docs/design.md §4.5).
                    let mut reported = 0;
                    if rng.below(3) == 0 {
                        reported = rng.below(held + 1);
                        let r = call.report_usage(reported, rng.below(60)).unwrap();
                        match r.change {
                            HoldChange::Shrank(n) => t.refunded += n,
                            HoldChange::Grew(n) => t.reserved += n,
                            HoldChange::Overran(n) => t.overrun += n,
                            HoldChange::Unchanged => {}
                        }
                        held = r.held;
                        assert_eq!(call.cost(), held);
                    }
                    thread::yield_now();
                    match rng.below(3) {
                        0 => {
                            t.consumed += held;
                            drop(call);
                        }
                        _ => {
                            let used = rng.below(held * 2 + 1).max(reported);
                            call.end_with_usage(Outcome::Success, used);
                            t.consumed += used;
                            if used < held {
                                t.refunded += held - used;
                            } else {
                                t.overrun += used - held;
                            }
                        }
                    }
                }
                t
            })
        })
        .collect();
    let mut total = BudgetTally::default();
    for w in workers {
        let t = w.join().unwrap();
        total.grants += t.grants;
        total.reserved += t.reserved;
        total.refunded += t.refunded;
        total.consumed += t.consumed;
        total.overrun += t.overrun;
        for (a, b) in total.rejected.iter_mut().zip(t.rejected) {
            *a += b;
        }
    }
    done.store(true, SeqCst);
    let samples = observer.join().unwrap();
    let s = bh.stats();
    let b = s.budget.unwrap();
    assert!(samples > 0);
    assert_eq!(
        (s.active, s.queued, s.granted_unclaimed, s.available),
        (0, 0, 0, 4),
        "{s}"
    );
    assert_eq!(
        (b.in_use, b.granted_unclaimed, b.available, b.overrun_held),
        (0, 0, 100, 0),
        "{b:?}"
    );
    assert_eq!(s.admitted_total, total.grants, "{s}");
    assert_eq!(
        (
            b.reserved_total,
            b.refunded_total,
            b.consumed_total,
            b.overrun_total
        ),
        (
            total.reserved,
            total.refunded,
            total.consumed,
            total.overrun
        ),
        "{b:?} vs {total:?}"
    );
    assert_eq!(s.rejected_by_reason.0, total.rejected, "{s}");
    assert!(total.rejected[Reason::BudgetLimit.index()] > 0, "{total:?}");
    // C35 step 6 on the real clock: one wait per queued grant, each in the histogram, none
    // above the run's elapsed time (no "now minus an unset start").
    let elapsed = u64::try_from(started.elapsed().as_nanos()).unwrap();
    assert!(s.queue_wait_count > 0, "{s}");
    assert_eq!(s.queue_wait_histogram.total(), s.queue_wait_count, "{s}");
    assert!(
        s.queue_wait_max_ns <= elapsed,
        "{} > {elapsed}: {s}",
        s.queue_wait_max_ns
    );
    assert!(
        s.queue_wait_sum_ns <= s.queue_wait_count * s.queue_wait_max_ns,
        "{s}"
    );
    assert!(total.grants > ops, "{total:?}");
}

/// Found by review: a cancelled waiter's cost was read after its cell was freed, so the next
/// lap's enqueuer could rewrite it first and `queued_cost` drifted — up (the bound shrinking
/// for good) or down (the bound passed). A tiny inline ring makes cells come round at once:
/// three threads queue and cancel waiters of different costs; at the end the total is 0 and
/// the bound still refuses 60 + 60 > 100.
#[test]
fn queued_cost_never_drifts_under_cancel_and_cell_reuse() {
    use hullguard_core::{Decision, Request};
    let bh: Bulkhead<2> = Bulkhead::try_new_static(Config {
        max_concurrent: 1,
        max_queue: 2,
        budget: Some(100),
        max_queued_cost: Some(100),
        ..Config::DEFAULT
    })
    .unwrap();
    let Decision::Granted(hold) = bh.admit(&Request::new(1).cost(100), None) else {
        panic!("the holder")
    };
    // Four times the default: each op is short, and the race needs a cell to come round.
    let ops = 4 * ops_per_thread();
    thread::scope(|s| {
        for cost in [1u64, 40, 13] {
            let bh = &bh;
            s.spawn(move || {
                for _ in 0..ops {
                    match bh.admit(&Request::new(1).cost(cost), None) {
                        Decision::Queued(w) => drop(w),
                        Decision::Rejected(_) => {}
                        Decision::Granted(_) => panic!("granted with the budget held"),
                    }
                }
            });
        }
    });
    let s = bh.stats();
    assert_eq!((s.queued, s.budget.unwrap().queued_cost), (0, 0), "{s}");
    let a = bh.admit(&Request::new(1).cost(60), None);
    let b = bh.admit(&Request::new(1).cost(60), None);
    assert!(matches!(a, Decision::Queued(_)), "{a:?}");
    assert!(
        matches!(b, Decision::Rejected(_)),
        "60 + 60 queued under a bound of 100: {b:?}"
    );
    drop((a, b, hold));
}

/// Two-phase admission under threads (docs/design.md §5.8): four threads reserve, commit,
/// abort and drop reservations with TTLs around "now" while a fifth sweeps and a sixth admits
/// plainly. Every reservation ends exactly once, so at the end nothing is held, the table is
/// empty, and the budget's settlement identity balances to the unit.
#[test]
fn reservations_settle_exactly_once_under_threads() {
    use std::sync::Arc;

    use hullguard_core::{ClockSource, Decision, Request};
    struct Ticking(std::sync::atomic::AtomicU64);
    impl hullguard_core::Clock for Ticking {
        fn now_ns(&self) -> u64 {
            // Every read moves time on by 1 µs: TTLs of a few µs expire mid-run.
            self.0
                .fetch_add(1_000, std::sync::atomic::Ordering::Relaxed)
        }
    }
    let bh = Arc::new(
        Bulkhead::with_clock(
            Config {
                max_concurrent: 8,
                max_queue: 16,
                budget: Some(400),
                max_reservations: 8,
                ..Config::DEFAULT
            },
            ClockSource::Shared(Arc::new(Ticking(std::sync::atomic::AtomicU64::new(0)))),
        )
        .unwrap(),
    );
    let ops = ops_per_thread() / 4;
    thread::scope(|s| {
        for t in 0..4u64 {
            let bh = &bh;
            s.spawn(move || {
                // A window of two live reservations per thread, so TTLs pass while held.
                let mut window = std::collections::VecDeque::new();
                for i in 0..ops {
                    let ttl = Duration::from_micros((i + t) % 7);
                    if let Ok(r) = bh.reserve(&Request::new(1).cost(10 + t), ttl) {
                        window.push_back(r);
                    }
                    if window.len() < 2 {
                        continue;
                    }
                    let r = window.pop_front().unwrap();
                    match (i + t) % 3 {
                        0 => {
                            if let Ok(call) = r.commit() {
                                call.end_with_usage(hullguard_core::Outcome::Success, i % 15);
                            }
                        }
                        1 => r.abort(),
                        _ => drop(r),
                    }
                }
            });
        }
        let bh2 = &bh;
        s.spawn(move || {
            for _ in 0..ops {
                bh2.expire_reservations();
            }
        });
        s.spawn(move || {
            for i in 0..ops {
                if let Decision::Granted(c) =
                    bh2.admit(&Request::new(1).cost(i % 20).no_wait(), None)
                {
                    drop(c);
                }
            }
        });
    });
    let s = bh.stats();
    let b = s.budget.unwrap();
    assert_eq!(
        (s.active, s.queued, s.reservations_held, b.in_use),
        (0, 0, 0, 0),
        "{s}"
    );
    assert_eq!(s.available, 8);
    assert_eq!(
        b.reserved_total + b.overrun_total,
        b.consumed_total + b.refunded_total + b.in_use + b.granted_unclaimed + b.overrun_held,
        "{s}"
    );
    assert!(
        s.reservations_expired_total > 0,
        "the TTLs expired some: {s}"
    );
}

/// Admission events under threads (docs/design.md §8.2): every admission's id is unique, each
/// granted id gets exactly one `admit` and one final `release`, each refused id one `reject`,
/// and the counts match the stats.
#[test]
fn events_fire_exactly_once_per_step_under_threads() {
    use std::{
        collections::HashMap,
        sync::{Arc, Mutex},
    };

    use hullguard_core::{ClockSource, Decision, Event, Observer, Reason, Request};
    #[derive(Default)]
    struct Log(Mutex<HashMap<u64, (u32, u32, u32)>>);
    impl Observer for Log {
        fn on_event(&self, e: &Event<'_>) {
            let mut m = self.0.lock().unwrap();
            match *e {
                Event::Admit { id, .. } => m.entry(id).or_default().0 += 1,
                Event::Reject { id, .. } => m.entry(id).or_default().1 += 1,
                Event::Release {
                    id, ended: true, ..
                } => m.entry(id).or_default().2 += 1,
                _ => {}
            }
        }
    }
    let log = Arc::new(Log::default());
    let bh = Bulkhead::with_observer(
        Config {
            max_concurrent: 2,
            max_queue: 4,
            ..Config::DEFAULT
        },
        ClockSource::default_for_host(),
        Some(log.clone()),
        None,
    )
    .unwrap();
    let ops = ops_per_thread() / 4;
    thread::scope(|s| {
        for t in 0..4u64 {
            let bh = &bh;
            s.spawn(move || {
                for i in 0..ops {
                    match bh.admit(&Request::new(1), None) {
                        Decision::Granted(c) => drop(c),
                        Decision::Queued(mut w) => {
                            if (i + t) % 2 == 0 {
                                drop(w); // abandoned: a reject (or, if granted first, admit + release)
                            } else {
                                let _ = bh.expire(w.ticket(), Reason::Timeout);
                                if let core::task::Poll::Ready(Ok(c)) = w.poll(None) {
                                    drop(c);
                                }
                            }
                        }
                        Decision::Rejected(_) => {}
                    }
                }
            });
        }
    });
    let s = bh.stats();
    let m = log.0.lock().unwrap();
    let (mut admits, mut rejects) = (0u64, 0u64);
    for (id, &(a, r, rel)) in m.iter() {
        assert!(*id > 0);
        assert!(
            (a, r, rel) == (1, 0, 1) || (a, r, rel) == (0, 1, 0),
            "id {id}: admit {a}, reject {r}, release {rel}"
        );
        admits += u64::from(a);
        rejects += u64::from(r);
    }
    assert_eq!(admits, s.admitted_total, "{s}");
    let refused: u64 = s.rejected_by_reason.iter().map(|(_, n)| n).sum();
    assert_eq!(rejects, refused, "{s}");
    assert_eq!(s.observer_panics, 0);
}

/// Admission classes under threads (docs/design.md §4.8): three classes with floors, a ceiling
/// and a priority reserve; workers admit no-wait and queued requests of every class, wait
/// (bounded, with deadlines), cancel, release in parts. A watcher thread checks the partition
/// on every snapshot it takes (a class never holds beyond its ceiling; the global count never
/// passes the limit); at the end the class counts are back at 0 and add up to the stats.
#[test]
fn classes_keep_their_partition_under_threads() {
    use hullguard_core::config::{ClassSpec, ClassTable, PriorityReserve};
    let classes = [
        ClassSpec {
            priority: 10,
            floor: 2,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            priority: 5,
            floor: 1,
            ceiling: Some(4),
            ..ClassSpec::DEFAULT
        },
        ClassSpec::DEFAULT,
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 8,
            max_queue: 16,
            ..Config::DEFAULT
        },
        &ClassTable {
            lending: false,
            shed: false,
            rates: Default::default(),
            classes: &classes,
            reserve: PriorityReserve {
                permits: 1,
                budget: 0,
                min_priority: 5,
            },
        },
        ClockSource::None,
    )
    .unwrap();
    let (granted, refused) = hammer_classes(&bh, 3, false, |bh| {
        // Only single-word figures are checked mid-run (a sum of racing reads is no
        // invariant): the permit word's free count, each class's hold, the shared units.
        let s = bh.stats();
        assert!(s.available >= 0, "I1: {s}");
        for c in 0..3u16 {
            let cs = bh.class_stats(c).unwrap();
            assert!(
                cs.in_flight <= cs.ceiling,
                "class {c} above its ceiling: {cs:?}"
            );
        }
        let shared = bh.class_shared_in_use().unwrap()[0];
        assert!(
            shared <= 8 - 3,
            "the shared units passed the limit less the floors: {shared}"
        );
    });
    let s = bh.stats();
    assert_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0), "{s}");
    assert_eq!(s.available, 8, "{s}");
    for c in 0..3u16 {
        let cs = bh.class_stats(c).unwrap();
        assert_eq!((cs.in_flight, cs.queued), (0, 0), "{cs:?}");
    }
    assert_eq!(bh.class_shared_in_use(), Some([0, 0]));
    assert_eq!(s.admitted_total, granted, "{s}");
    assert!(granted > 0 && refused > 0);
}

/// Four threads of random classed admissions on `bh` (classes `0 .. classes`, weights 1–2,
/// with `cost` also costs 0–4 units; no-wait or queued with a short blocking wait), releases
/// whole and partial; a fifth thread runs `check` until they are done. Returns (granted,
/// refused).
fn hammer_classes(
    bh: &Bulkhead,
    classes: u64,
    cost: bool,
    check: impl Fn(&Bulkhead) + Sync,
) -> (u64, u64) {
    use std::time::Instant;

    use hullguard_core::{Decision, Request};
    let ops = ops_per_thread() / 4;
    let running = AtomicU64::new(4);
    let (granted, refused) = (AtomicU64::new(0), AtomicU64::new(0));
    thread::scope(|s| {
        for t in 0..4u64 {
            let (granted, refused, running) = (&granted, &refused, &running);
            s.spawn(move || {
                let mut rng = Rng(0xc1a5 + t);
                let mut held: Vec<hullguard_core::Call<&Bulkhead, 0>> = Vec::new();
                for _ in 0..ops {
                    let class = rng.below(classes) as u16;
                    let w = 1 + rng.below(2);
                    let units = if cost { rng.below(5) } else { 0 };
                    let request = Request::new(w).cost(units).class(class);
                    let decision = if rng.below(2) == 0 {
                        bh.admit(&request.no_wait(), None)
                    } else {
                        bh.admit(&request, None)
                    };
                    match decision {
                        Decision::Granted(c) => {
                            granted.fetch_add(1, SeqCst);
                            held.push(c);
                        }
                        Decision::Queued(waiter) => {
                            let deadline =
                                Instant::now() + Duration::from_micros(200 + rng.below(800));
                            match waiter.wait_blocking(Some(deadline)) {
                                Ok(c) => {
                                    granted.fetch_add(1, SeqCst);
                                    held.push(c);
                                }
                                Err(_) => {
                                    refused.fetch_add(1, SeqCst);
                                }
                            }
                        }
                        Decision::Rejected(e) => {
                            assert!(e.reason().is_some(), "{e}");
                            refused.fetch_add(1, SeqCst);
                        }
                    }
                    if held.len() > 2 || rng.below(2) == 0 {
                        if let Some(mut c) = (!held.is_empty())
                            .then(|| held.swap_remove(rng.below(held.len() as u64) as usize))
                        {
                            if c.weight() > 1 && rng.below(2) == 0 {
                                c.release_partial(1).unwrap();
                                held.push(c);
                            }
                        }
                    }
                }
                drop(held);
                running.fetch_sub(1, SeqCst);
            });
        }
        let (running, check) = (&running, &check);
        s.spawn(move || {
            let mut checks = 0u64;
            while running.load(SeqCst) > 0 || checks == 0 {
                checks += 1;
                check(bh);
                thread::yield_now();
            }
        });
    });
    (granted.load(SeqCst), refused.load(SeqCst))
}

#[test]
fn classes_with_a_budget_lending_and_a_reserve_keep_both_dimensions_under_threads() {
    use hullguard_core::config::{ClassSpec, ClassTable, PriorityReserve};
    // Both dimensions partitioned (floors and a reserve in each), lending on: the lent-floor
    // reclaim, the reserve and the two-dimension takes all race here.
    let classes = [
        ClassSpec {
            priority: 10,
            floor: 1,
            budget_floor: 3,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            floor: 2,
            budget_floor: 4,
            budget_ceiling: Some(10),
            ..ClassSpec::DEFAULT
        },
        ClassSpec::DEFAULT,
    ];
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 8,
            max_queue: 16,
            budget: Some(16),
            ..Config::DEFAULT
        },
        &ClassTable {
            lending: true,
            reserve: PriorityReserve {
                permits: 1,
                budget: 2,
                min_priority: 5,
            },
            ..ClassTable::new(&classes)
        },
        ClockSource::None,
    )
    .unwrap();
    let (granted, refused) = hammer_classes(&bh, 3, true, |bh| {
        let s = bh.stats();
        assert!(s.available >= 0, "I1: {s}");
        assert!(s.budget.unwrap().available >= 0, "I1 of the budget: {s}");
        for c in 0..3u16 {
            let cs = bh.class_stats(c).unwrap();
            assert!(
                cs.in_flight <= cs.ceiling && cs.budget_in_use <= cs.budget_ceiling,
                "class {c} above a ceiling: {cs:?}"
            );
        }
    });
    let s = bh.stats();
    assert_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0), "{s}");
    let b = s.budget.unwrap();
    assert_eq!(
        (b.in_use, b.available, b.granted_unclaimed),
        (0, 16, 0),
        "{s}"
    );
    for c in 0..3u16 {
        let cs = bh.class_stats(c).unwrap();
        assert_eq!(
            (cs.in_flight, cs.budget_in_use, cs.queued),
            (0, 0, 0),
            "{cs:?}"
        );
    }
    assert_eq!(bh.class_shared_in_use(), Some([0, 0]));
    assert_eq!(s.admitted_total, granted, "{s}");
    assert!(granted > 0 && refused > 0);
}
