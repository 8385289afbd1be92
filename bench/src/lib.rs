//! # hullguard-bench
//!
//! The workloads of docs/design.md § Benchmarks, shared by three drivers so that every number
//! comes from the same code:
//!
//! | driver | what it prints |
//! |---|---|
//! | `src/bin/ratios.rs` | the ratio table: hullguard beside its anchor in one run, ≥ 5 interleaved repetitions |
//! | `src/bin/icount.rs` | callgrind instructions per op for the single-thread cases, and their ratios |
//! | `benches/engine.rs` | criterion's estimate for every case |
//! | `src/bin/host.rs` | the host bulkhead's table: beside the local bulkhead and a SysV `SEM_UNDO` semaphore |
//!
//! [`machine`] is what the tables say about the machine they ran on.
//!
//! A [`Case`] runs `n` operations of one workload on one engine and returns the time those `n`
//! operations took; set-up (building a bulkhead, filling a queue, starting threads or a runtime)
//! is never timed. The anchors are `tokio::sync::Semaphore` and [`CasSemaphore`], the bare
//! `AtomicUsize` CAS loop of `research/ANCHORS-ENGINES.md` §6.
//!
//! Every workload keeps the engines' stats and clocks as a user gets them: `Bulkhead::new`, so
//! the monotonic clock is on (docs/design.md § Benchmarks: the fast-path targets are measured
//! with stats on).

use std::{
    collections::VecDeque,
    future::Future,
    hint::black_box,
    pin::Pin,
    sync::{
        Arc, Barrier,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll, Waker},
    thread,
    time::{Duration, Instant},
};

use hullguard_core::{Admission, Bulkhead, Config, Reason, Ticket, TicketPoll};

pub mod machine;
use tokio::sync::Semaphore;

/// Queue depths of the depth rows.
pub const DEPTHS: [usize; 3] = [10, 1_000, 100_000];

/// `max_queue` of the depth rows' bulkhead, the same at every depth (ring: 262 144 cells).
pub const DEPTH_MAX_QUEUE: u64 = 100_000;

/// Tasks of the handoff row.
pub const HANDOFF_TASKS: usize = 16;

/// The most cancels one hullguard state takes before it is rebuilt (untimed). A cancel frees
/// its cell at once (docs/design.md §4.2), so the ring never fills; the rebuild only keeps every
/// chunk on a fresh state of the same size (the same as the tokio side's).
pub const CANCEL_CHUNK: u64 = 131_072;

// ----- the bare CAS-loop anchor ----------------------------------------------------------

/// The bare anchor: one `AtomicUsize` of free permits; acquire is a CAS loop, release one
/// `fetch_add`. Two locked RMWs per acquire + release, no queue, no flags, no stats.
#[derive(Debug)]
#[repr(align(128))]
pub struct CasSemaphore {
    permits: AtomicUsize,
}

impl CasSemaphore {
    /// `permits` free permits.
    pub const fn new(permits: usize) -> Self {
        Self {
            permits: AtomicUsize::new(permits),
        }
    }

    /// Takes one permit if one is free.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let mut cur = self.permits.load(Ordering::Relaxed);
        loop {
            if cur == 0 {
                return false;
            }
            match self.permits.compare_exchange_weak(
                cur,
                cur - 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Returns one permit.
    #[inline]
    pub fn release(&self) {
        self.permits.fetch_add(1, Ordering::Release);
    }
}

// ----- try_acquire + release, on one or two threads ---------------------------------------

/// A limiter for the try_acquire + release rows.
pub trait Limiter: Sync {
    /// `n` times: take one permit without waiting (it must be free), then release it.
    fn cycles(&self, n: u64);
}

impl Limiter for Bulkhead {
    #[inline(never)]
    fn cycles(&self, n: u64) {
        for _ in 0..n {
            let permit = black_box(self).try_acquire(1).expect("a permit is free");
            drop(permit);
        }
    }
}

impl Limiter for Semaphore {
    #[inline(never)]
    fn cycles(&self, n: u64) {
        for _ in 0..n {
            let permit = black_box(self).try_acquire().expect("a permit is free");
            drop(permit);
        }
    }
}

impl Limiter for CasSemaphore {
    #[inline(never)]
    fn cycles(&self, n: u64) {
        for _ in 0..n {
            assert!(black_box(self).try_acquire(), "a permit is free");
            self.release();
        }
    }
}

/// A bulkhead of `permits` with the default queue and the host clock (stats on).
pub fn bulkhead(permits: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent: permits,
        ..Config::default()
    })
    .expect("valid config")
}

/// `n` admissions through [`Bulkhead::admit`] that must be granted at once, each ended at
/// once: `cost` budget units per call (0 on a bulkhead without a budget). The calls + budget
/// row compares a bulkhead with a budget against the same path without one.
#[inline(never)]
pub fn admit_cycles(bh: &Bulkhead, cost: u64, n: u64) -> Duration {
    use hullguard_core::{Decision, Request};
    let req = Request::new(1).cost(cost).no_wait();
    let t0 = Instant::now();
    for _ in 0..n {
        match black_box(bh).admit(black_box(&req), None) {
            Decision::Granted(call) => drop(call),
            _ => panic!("a permit and the units are free"),
        }
    }
    t0.elapsed()
}

/// `n` no-wait admissions of `weight` permits of class `class` on a classed bulkhead (docs/design.md §4.8), each
/// ended at once: the classed path (through the ring and the dispatcher) beside
/// [`admit_cycles`] on a plain one.
#[inline(never)]
pub fn class_cycles(bh: &Bulkhead, class: u16, weight: u64, n: u64) -> Duration {
    use hullguard_core::{Decision, Request};
    let req = Request::new(weight).class(class).no_wait();
    let t0 = Instant::now();
    for _ in 0..n {
        match black_box(bh).admit(black_box(&req), None) {
            Decision::Granted(call) => drop(call),
            _ => panic!("the class's floor is free"),
        }
    }
    t0.elapsed()
}

/// A classed bulkhead of `classes` classes (priorities spread over 0..8, a floor of 1 each),
/// with a priority reserve of 2 for priority ≥ 5 when `reserve`.
pub fn classed_bulkhead(classes: usize, reserve: bool) -> Bulkhead {
    use hullguard_core::config::{ClassSpec, ClassTable, PriorityReserve};
    let specs: Vec<ClassSpec> = (0..classes)
        .map(|i| ClassSpec {
            priority: (i % 8) as u8,
            floor: 1,
            ..ClassSpec::DEFAULT
        })
        .collect();
    Bulkhead::with_classes(
        Config {
            max_concurrent: 256,
            ..Config::default()
        },
        &ClassTable {
            lending: false,
            shed: false,
            rates: Default::default(),
            classes: &specs,
            reserve: PriorityReserve {
                permits: if reserve { 2 } else { 0 },
                budget: 0,
                min_priority: 5,
            },
        },
        hullguard_core::ClockSource::default_for_host(),
    )
    .expect("valid classes")
}

/// A bulkhead of `permits` and a budget of `budget` units.
pub fn budgeted_bulkhead(permits: u64, budget: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent: permits,
        budget: Some(budget),
        ..Config::default()
    })
    .expect("valid config")
}

/// A bulkhead of `permits` with an observer that counts every event (host clock): the cost
/// of the event path (docs/design.md §8.2) beside the plain one, which pays nothing for it.
pub fn observed_bulkhead(permits: u64) -> Bulkhead {
    use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    };
    struct Count(AtomicU64);
    impl hullguard_core::Observer for Count {
        fn on_event(&self, e: &hullguard_core::Event<'_>) {
            self.0.fetch_add(e.id().unwrap_or(0) & 1, Relaxed);
        }
    }
    Bulkhead::with_observer(
        Config {
            max_concurrent: permits,
            ..Config::default()
        },
        hullguard_core::ClockSource::default_for_host(),
        Some(Arc::new(Count(AtomicU64::new(0)))),
        None,
    )
    .expect("valid config")
}

/// A bulkhead of `permits` with the given policies (host clock, stats on).
pub fn guarded_bulkhead(permits: u64, breaker: bool, adaptive: bool) -> Bulkhead {
    use hullguard_core::{Resilience, adaptive::AdaptiveConfig, breaker::BreakerConfig};
    Bulkhead::new(Config {
        max_concurrent: permits,
        resilience: Resilience {
            adaptive: adaptive.then(|| AdaptiveConfig::for_max_concurrent(permits)),
            breaker: breaker.then_some(BreakerConfig::DEFAULT),
            call_timeout: None,
        },
        ..Config::default()
    })
    .expect("valid config")
}

/// `n` guarded calls with an empty body on this thread: breaker check, admission, outcome
/// `success` recorded to the policies, release (what `Bulkhead::call` does around the work).
#[inline(never)]
pub fn guarded_calls(bh: &Bulkhead, n: u64) -> Duration {
    let t0 = Instant::now();
    for _ in 0..n {
        let mut permit = black_box(bh).try_acquire(1).expect("a permit is free");
        permit.set_outcome(hullguard_core::Outcome::Success);
        drop(permit);
    }
    t0.elapsed()
}

/// `n` × (one read of the host clock + one bare try_acquire/release): the budget of a guarded
/// call ("≤ bare + one clock read").
#[inline(never)]
pub fn bare_plus_clock(bh: &Bulkhead, n: u64) -> Duration {
    let t0 = Instant::now();
    for _ in 0..n {
        black_box(black_box(bh).now_ns());
        let permit = black_box(bh).try_acquire(1).expect("a permit is free");
        drop(permit);
    }
    t0.elapsed()
}

/// `n` uncontended try_acquire + release on this thread.
pub fn uncontended<L: Limiter>(limiter: &L, n: u64) -> Duration {
    let t0 = Instant::now();
    limiter.cycles(n);
    t0.elapsed()
}

/// Two threads, each doing `n` try_acquire + release on its own limiter (`limiters[0]` and
/// `limiters[1]`, which may be the same one). Returns the slower thread's time from a common
/// start (a barrier), so `2n / time` is the aggregate throughput.
pub fn two_threads<L: Limiter>(limiters: [&L; 2], n: u64) -> Duration {
    let start = Barrier::new(2);
    thread::scope(|s| {
        let workers = limiters.map(|l| {
            let start = &start;
            s.spawn(move || {
                start.wait();
                let t0 = Instant::now();
                l.cycles(n);
                t0.elapsed()
            })
        });
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .max()
            .expect("two workers")
    })
}

// ----- queued handoff on a current-thread executor ----------------------------------------

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime")
}

/// Acquires per task for `n` handoffs in total, and the factor that scales the measured time
/// to exactly `n` handoffs.
fn handoff_split(n: u64) -> (u64, f64) {
    let tasks = HANDOFF_TASKS as u64;
    let per_task = n.div_ceil(tasks).max(1);
    (per_task, n as f64 / (per_task * tasks) as f64)
}

fn scaled(d: Duration, factor: f64) -> Duration {
    d.mul_f64(factor)
}

/// Limit 1, [`HANDOFF_TASKS`] tasks on a current-thread runtime, each looping `acquire(1).await`
/// then dropping the permit. The timer starts once every task is queued behind a permit held
/// by the driver, so every acquire is a queued handoff: release → grant to the head → wake →
/// poll → enqueue again. Returns the time of `n` handoffs.
pub fn handoff_hullguard(n: u64) -> Duration {
    let (per_task, factor) = handoff_split(n);
    let bh = Arc::new(
        Bulkhead::new(Config {
            max_concurrent: 1,
            max_queue: 64,
            ..Config::default()
        })
        .expect("valid config"),
    );
    let ready = Arc::new(AtomicUsize::new(0));
    let d = current_thread_runtime().block_on(async move {
        let held = bh.try_acquire(1).expect("free");
        let tasks: Vec<_> = (0..HANDOFF_TASKS)
            .map(|_| {
                let (bh, ready) = (bh.clone(), ready.clone());
                tokio::spawn(async move {
                    ready.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..per_task {
                        let permit = bh.acquire(1).await.expect("granted");
                        drop(permit);
                    }
                })
            })
            .collect();
        while ready.load(Ordering::Relaxed) < HANDOFF_TASKS {
            tokio::task::yield_now().await;
        }
        let t0 = Instant::now();
        drop(held);
        for t in tasks {
            t.await.expect("task");
        }
        t0.elapsed()
    });
    scaled(d, factor)
}

/// [`handoff_hullguard`] on `tokio::sync::Semaphore`.
pub fn handoff_tokio(n: u64) -> Duration {
    let (per_task, factor) = handoff_split(n);
    let sem = Arc::new(Semaphore::new(1));
    let ready = Arc::new(AtomicUsize::new(0));
    let d = current_thread_runtime().block_on(async move {
        let held = sem.try_acquire().expect("free");
        let tasks: Vec<_> = (0..HANDOFF_TASKS)
            .map(|_| {
                let (sem, ready) = (sem.clone(), ready.clone());
                tokio::spawn(async move {
                    ready.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..per_task {
                        let permit = sem.acquire().await.expect("granted");
                        drop(permit);
                    }
                })
            })
            .collect();
        while ready.load(Ordering::Relaxed) < HANDOFF_TASKS {
            tokio::task::yield_now().await;
        }
        let t0 = Instant::now();
        drop(held);
        for t in tasks {
            t.await.expect("task");
        }
        t0.elapsed()
    });
    scaled(d, factor)
}

// ----- queue depth: cost per op with D waiters queued --------------------------------------

fn depth_bulkhead() -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent: 1,
        max_queue: DEPTH_MAX_QUEUE,
        ..Config::default()
    })
    .expect("valid config")
}

fn enqueue(bh: &Bulkhead) -> Ticket {
    match bh.enqueue(1, Some(Waker::noop())) {
        Ok(Admission::Queued(t)) => t,
        other => panic!("expected to queue, got {other:?}"),
    }
}

/// With the single permit held and `depth` waiters queued, `n` times: the holder releases, the
/// head is granted, its owner consumes the grant (and now holds the permit), and a new waiter
/// queues at the tail, so the depth stays `depth`. Polling API, a (no-op) waker registered.
pub fn depth_cycle_hullguard(depth: usize, n: u64) -> Duration {
    let bh = depth_bulkhead();
    bh.try_acquire_units(1).expect("free");
    depth_cycle(&bh, depth, n, || bh.release_units(1), enqueue)
}

/// The timed loop of the depth-cycle rows: `depth` waiters queued by `enqueue`, then `n` times
/// `release` the single permit, take the head's grant, queue a new waiter at the tail.
fn depth_cycle(
    bh: &Bulkhead,
    depth: usize,
    n: u64,
    release: impl Fn(),
    enqueue: impl Fn(&Bulkhead) -> Ticket,
) -> Duration {
    let mut queue: VecDeque<Ticket> = (0..depth).map(|_| enqueue(bh)).collect();
    let t0 = Instant::now();
    for _ in 0..n {
        release();
        let head = queue.pop_front().expect("depth > 0");
        match bh.poll_ticket(head, None) {
            Ok(TicketPoll::Granted(1)) => {}
            other => panic!("expected the head to be granted, got {other:?}"),
        }
        queue.push_back(enqueue(bh));
    }
    t0.elapsed()
}

/// [`depth_cycle_hullguard`] on a classed bulkhead (docs/design.md §4.8): 8 classes (no floors,
/// priorities 0..8), the single permit and every waiter in class 3, so each grant goes through
/// the dispatcher's pass over the class lists. Flat in depth is the target.
pub fn depth_cycle_classed(depth: usize, n: u64) -> Duration {
    use hullguard_core::{
        ClockSource, Decision, Request,
        config::{ClassSpec, ClassTable},
    };
    let specs: Vec<ClassSpec> = (0..8)
        .map(|i| ClassSpec {
            priority: i as u8,
            ..ClassSpec::DEFAULT
        })
        .collect();
    let bh = Bulkhead::with_classes(
        Config {
            max_concurrent: 1,
            max_queue: DEPTH_MAX_QUEUE,
            ..Config::default()
        },
        &ClassTable::new(&specs),
        ClockSource::default_for_host(),
    )
    .expect("valid classes");
    let req = Request::new(1).class(3);
    let enqueue = |bh: &Bulkhead| match bh.admit(&req, Some(Waker::noop())) {
        Decision::Queued(w) => w.into_ticket(),
        other => panic!("expected to queue, got {other:?}"),
    };
    match bh.admit(&req.no_wait(), None) {
        Decision::Granted(call) => {
            call.forget();
        }
        other => panic!("expected a grant, got {other:?}"),
    }
    depth_cycle(&bh, depth, n, || bh.release_units_of(1, 3), enqueue)
}

/// With the single permit held and `depth` waiters queued, `n` times: cancel the waiter in the
/// middle of the queue (`aborted`, as a dropped future or a timer does) and queue a new one at
/// the tail. Each waiter of the back half lives `depth / 2` ops, so the cancelled one is always
/// at position `depth - depth / 2` of `depth` (the front half never moves).
pub fn depth_cancel_hullguard(depth: usize, n: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let k = left.min(CANCEL_CHUNK);
        let bh = depth_bulkhead();
        bh.try_acquire_units(1).expect("free");
        let front: Vec<Ticket> = (0..depth - depth / 2).map(|_| enqueue(&bh)).collect();
        let mut back: VecDeque<Ticket> = (0..depth / 2).map(|_| enqueue(&bh)).collect();
        let t0 = Instant::now();
        for _ in 0..k {
            let mid = back.pop_front().expect("depth >= 2");
            bh.cancel(mid, Reason::Aborted).expect("live waiter");
            back.push_back(enqueue(&bh));
        }
        total += t0.elapsed();
        black_box(front);
        left -= k;
    }
    total
}

/// Fixed slots that keep `!Unpin` futures in place, so the tokio anchor's queued `acquire()`
/// futures need no `Box` each (an allocation per op would be charged to tokio).
struct PinSlots<F> {
    slots: Box<[Option<F>]>,
}

impl<F: Future> PinSlots<F> {
    fn new(len: usize) -> Self {
        Self {
            slots: (0..len).map(|_| None).collect(),
        }
    }

    /// Drops slot `i`'s future in place (if any), puts `fut` there and polls it once.
    fn put_and_poll(&mut self, i: usize, fut: F, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.slots[i] = Some(fut);
        self.poll(i, cx)
    }

    fn poll(&mut self, i: usize, cx: &mut Context<'_>) -> Poll<F::Output> {
        let fut = self.slots[i].as_mut().expect("the slot holds a future");
        // SAFETY: the slot lives in a boxed slice that is never reallocated and never moved
        // out of; a future in it is only dropped in place (overwritten, or with the slice), so
        // it stays at this address from its first poll until its drop.
        unsafe { Pin::new_unchecked(fut) }.poll(cx)
    }
}

/// [`depth_cycle_hullguard`] on `tokio::sync::Semaphore`: `acquire()` futures polled with a
/// no-op waker stand for the queued tasks.
pub fn depth_cycle_tokio(depth: usize, n: u64) -> Duration {
    let sem = Semaphore::new(1);
    let mut cx = Context::from_waker(Waker::noop());
    let mut held = Some(sem.try_acquire().expect("free"));
    let mut slots = PinSlots::new(depth);
    for i in 0..depth {
        assert!(slots.put_and_poll(i, sem.acquire(), &mut cx).is_pending());
    }
    let mut head = 0;
    let t0 = Instant::now();
    for _ in 0..n {
        drop(held.take());
        match slots.poll(head, &mut cx) {
            Poll::Ready(Ok(permit)) => held = Some(permit),
            _ => panic!("expected the head to be granted"),
        }
        assert!(
            slots
                .put_and_poll(head, sem.acquire(), &mut cx)
                .is_pending()
        );
        head += 1;
        if head == depth {
            head = 0;
        }
    }
    let d = t0.elapsed();
    drop(slots);
    drop(held);
    d
}

/// [`depth_cancel_hullguard`] on `tokio::sync::Semaphore`: dropping a queued `acquire()` future
/// is tokio's cancel.
pub fn depth_cancel_tokio(depth: usize, n: u64) -> Duration {
    let sem = Semaphore::new(1);
    let mut cx = Context::from_waker(Waker::noop());
    let held = sem.try_acquire().expect("free");
    let mut slots = PinSlots::new(depth);
    for i in 0..depth {
        assert!(slots.put_and_poll(i, sem.acquire(), &mut cx).is_pending());
    }
    // Slots `front..depth` are the back half, a FIFO ring whose oldest waiter is at `mid`.
    let front = depth - depth / 2;
    let mut mid = front;
    let t0 = Instant::now();
    for _ in 0..n {
        // Overwriting drops (cancels) the middle waiter in place, then queues a new one.
        assert!(slots.put_and_poll(mid, sem.acquire(), &mut cx).is_pending());
        mid += 1;
        if mid == depth {
            mid = front;
        }
    }
    let d = t0.elapsed();
    drop(slots);
    drop(held);
    d
}

// ----- the case registry --------------------------------------------------------------------

/// Which kind of row a case belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One thread; deterministic enough for callgrind.
    SingleThread,
    /// Two threads.
    TwoThreads,
}

/// One workload on one engine: `run(n)` performs `n` ops and returns their time.
pub struct Case {
    /// `row/engine`, e.g. `uncontended/hullguard`.
    pub name: String,
    /// Ops per timed batch in the ratio table (about 25–150 ms each here).
    pub batch: u64,
    /// Single- or two-thread.
    pub kind: Kind,
    /// The workload.
    pub run: Box<dyn Fn(u64) -> Duration + Send + Sync>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("batch", &self.batch)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

fn case(
    name: String,
    batch: u64,
    kind: Kind,
    run: impl Fn(u64) -> Duration + Send + Sync + 'static,
) -> Case {
    Case {
        name,
        batch,
        kind,
        run: Box::new(run),
    }
}

/// Every case, anchors beside the hullguard case they are compared with.
pub fn cases() -> Vec<Case> {
    use Kind::*;
    const UNC: u64 = 4_000_000;
    const TWO: u64 = 2_000_000;
    let mut v = vec![
        case("uncontended/cas".into(), UNC, SingleThread, |n| {
            uncontended(&CasSemaphore::new(1), n)
        }),
        case("uncontended/hullguard".into(), UNC, SingleThread, |n| {
            uncontended(&bulkhead(1), n)
        }),
        case("uncontended/tokio".into(), UNC, SingleThread, |n| {
            uncontended(&Semaphore::new(1), n)
        }),
        case(
            "uncontended/hullguard+observer".into(),
            UNC,
            SingleThread,
            |n| uncontended(&observed_bulkhead(1), n),
        ),
        case("2t-shared/cas".into(), TWO, TwoThreads, |n| {
            let c = CasSemaphore::new(2);
            two_threads([&c, &c], n)
        }),
        case("2t-shared/hullguard".into(), TWO, TwoThreads, |n| {
            let b = bulkhead(2);
            two_threads([&b, &b], n)
        }),
        case("2t-shared/tokio".into(), TWO, TwoThreads, |n| {
            let s = Semaphore::new(2);
            two_threads([&s, &s], n)
        }),
        case("2t-private/cas".into(), TWO, TwoThreads, |n| {
            let (a, b) = (
                Box::new(CasSemaphore::new(1)),
                Box::new(CasSemaphore::new(1)),
            );
            two_threads([&*a, &*b], n)
        }),
        case("2t-private/hullguard".into(), TWO, TwoThreads, |n| {
            let (a, b) = (Box::new(bulkhead(1)), Box::new(bulkhead(1)));
            two_threads([&*a, &*b], n)
        }),
        case("2t-private/tokio".into(), TWO, TwoThreads, |n| {
            let (a, b) = (Box::new(Semaphore::new(1)), Box::new(Semaphore::new(1)));
            two_threads([&*a, &*b], n)
        }),
        case(
            "handoff/hullguard".into(),
            320_000,
            SingleThread,
            handoff_hullguard,
        ),
        case("handoff/tokio".into(), 320_000, SingleThread, handoff_tokio),
        case("guarded/bare".into(), UNC, SingleThread, |n| {
            guarded_calls(&bulkhead(1), n)
        }),
        case("budget/plain".into(), UNC, SingleThread, |n| {
            admit_cycles(&bulkhead(1), 0, n)
        }),
        case("budget/calls+budget".into(), UNC, SingleThread, |n| {
            admit_cycles(&budgeted_bulkhead(1, 1000), 10, n)
        }),
        case("classes/1".into(), UNC / 4, SingleThread, |n| {
            class_cycles(&classed_bulkhead(1, false), 0, 1, n)
        }),
        case("classes/8+reserve".into(), UNC / 4, SingleThread, |n| {
            class_cycles(&classed_bulkhead(8, true), 3, 1, n)
        }),
        case("classes/64".into(), UNC / 4, SingleThread, |n| {
            class_cycles(&classed_bulkhead(64, false), 33, 1, n)
        }),
        case(
            "classes/8+reserve/shared".into(),
            UNC / 8,
            SingleThread,
            |n| class_cycles(&classed_bulkhead(8, true), 3, 2, n),
        ),
        case("guarded/bare+clock".into(), UNC, SingleThread, |n| {
            bare_plus_clock(&bulkhead(1), n)
        }),
        case("guarded/breaker".into(), UNC, SingleThread, |n| {
            guarded_calls(&guarded_bulkhead(1, true, false), n)
        }),
        case("guarded/adaptive".into(), UNC, SingleThread, |n| {
            guarded_calls(&guarded_bulkhead(1, false, true), n)
        }),
        case("guarded/composed".into(), UNC, SingleThread, |n| {
            guarded_calls(&guarded_bulkhead(1, true, true), n)
        }),
    ];
    for d in DEPTHS {
        v.push(case(
            format!("depth-cycle/{d}/hullguard"),
            200_000,
            SingleThread,
            move |n| depth_cycle_hullguard(d, n),
        ));
        v.push(case(
            format!("depth-cycle/{d}/tokio"),
            200_000,
            SingleThread,
            move |n| depth_cycle_tokio(d, n),
        ));
        v.push(case(
            format!("depth-cycle/{d}/classed"),
            100_000,
            SingleThread,
            move |n| depth_cycle_classed(d, n),
        ));
    }
    for d in DEPTHS {
        v.push(case(
            format!("depth-cancel/{d}/hullguard"),
            CANCEL_CHUNK,
            SingleThread,
            move |n| depth_cancel_hullguard(d, n),
        ));
        v.push(case(
            format!("depth-cancel/{d}/tokio"),
            CANCEL_CHUNK,
            SingleThread,
            move |n| depth_cancel_tokio(d, n),
        ));
    }
    v
}

/// The case named `name`.
pub fn find(name: &str) -> Option<Case> {
    cases().into_iter().find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Correctness only (every workload runs and keeps its invariants); never timing.
    #[test]
    fn every_case_runs() {
        for c in cases() {
            let n = if c.name.contains("100000") { 3 } else { 40 };
            (c.run)(n);
        }
    }
}
