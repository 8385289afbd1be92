//! The regression recipes of `shared/cases/CASES.md` that the core-engine issue names (C01,
//! C02, C04, C05), as named tests. Numbers are the recipes'; wall-clock bounds are checked on a
//! virtual clock or as wake-up and poll counts, never as timed assertions.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering::SeqCst},
    },
    task::{Context, Poll, Wake, Waker},
    thread,
    time::Duration,
};

use hullguard_core::{Admission, Bulkhead, CancelError, Config, Reason, Stats, TicketPoll};

struct Counting(AtomicUsize);
impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}
fn counting_waker() -> (Arc<Counting>, Waker) {
    let c = Arc::new(Counting(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

fn bulkhead(l: u64, q: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent: l,
        max_queue: q,
        ..Config::default()
    })
    .unwrap()
}

/// I1, I2 after every step of every recipe, against what the test itself knows: `held`, the
/// permits it holds (what it was granted less what it gave back), and `unclaimed`, the weights
/// of its waiters that were granted and have not yet been polled for their permits.
fn check(s: Stats, held: u64, unclaimed: u64) -> Stats {
    assert_eq!(s.active, held, "active vs permits the test holds: {s}");
    assert_eq!(
        s.granted_unclaimed, unclaimed,
        "granted_unclaimed vs the grants the test has not claimed: {s}"
    );
    assert!(held + unclaimed <= s.limit, "I1: {s}");
    assert_eq!(
        s.available + held as i64 + unclaimed as i64,
        s.limit as i64,
        "I2 with the test's counts ({held} held, {unclaimed} unclaimed): {s}"
    );
    s
}

fn poll<F: Future + Unpin>(f: &mut F, w: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(w))
}

// ----- C01: permit stranded in an unpolled waiter (tokio#6450, heph PR#238) -------------------

#[test]
fn c01_permit_stranded_in_unpolled_waiter() {
    let bh = bulkhead(1, 10);
    let (_c, w) = counting_waker();
    let h = bh.try_acquire(1).unwrap();
    let mut a1 = Box::pin(bh.acquire(1));
    let mut a2 = Box::pin(bh.acquire(1));
    assert!(poll(&mut a1, &w).is_pending());
    assert!(poll(&mut a2, &w).is_pending());
    drop(h);
    // While A1 is alive but unpolled, its grant is visible and I2 holds: nothing held, A1's
    // grant (1) unclaimed.
    let s = check(bh.stats(), 0, 1);
    assert_eq!((s.granted_unclaimed, s.available, s.queued), (1, 0, 1));
    // T keeps awaiting only A2: it stays pending (FIFO), however often it is polled.
    for _ in 0..3 {
        assert!(poll(&mut a2, &w).is_pending());
    }
    // Dropping A1 hands the permit to A2 within one tick.
    drop(a1);
    let Poll::Ready(Ok(p2)) = poll(&mut a2, &w) else {
        panic!("A2 not granted after A1 was dropped")
    };
    let s = check(bh.stats(), 1, 0); // p2
    assert_eq!((s.active, s.available), (1, 0));
    drop(p2);
    let s = check(bh.stats(), 0, 0);
    assert_eq!((s.available, s.queued, s.granted_unclaimed), (1, 0, 0));
}

#[test]
fn c01_heph_variant_three_dropped_waiters() {
    let bh = bulkhead(1, 10);
    let (_c, w) = counting_waker();
    let h = bh.try_acquire(1).unwrap();
    let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(bh.acquire(1))).collect();
    for a in &mut waiters {
        assert!(poll(a, &w).is_pending());
    }
    drop(h);
    check(bh.stats(), 0, 1); // h's permit is the first waiter's, unclaimed
    drop(waiters);
    let s = check(bh.stats(), 0, 0);
    assert_eq!((s.available, s.queued, s.granted_unclaimed), (1, 0, 0));
}

// ----- C02: cancelled head-of-line acquire_many doesn't wake smaller waiters (golang/go#37852)

#[test]
fn c02_cancelled_head_wakes_smaller_waiter() {
    let bh = bulkhead(10, 10);
    let (_c1, w1) = counting_waker();
    let (c2, w2) = counting_waker();
    let h = bh.try_acquire(8).unwrap();
    assert_eq!(check(bh.stats(), 8, 0).available, 2);
    let mut a1 = Box::pin(bh.acquire(5));
    let mut a2 = Box::pin(bh.acquire(2));
    assert!(poll(&mut a1, &w1).is_pending());
    // W2 must not barge although 2 are free.
    assert!(poll(&mut a2, &w2).is_pending());
    assert_eq!(check(bh.stats(), 8, 0).available, 2);
    // Cancel W1 (drop its future): W2 is woken in the same tick, with no release.
    drop(a1);
    assert_eq!(c2.0.load(SeqCst), 1);
    let Poll::Ready(Ok(p2)) = poll(&mut a2, &w2) else {
        panic!("W2 not granted after the head was cancelled")
    };
    let s = check(bh.stats(), 8 + 2, 0); // h, p2
    assert_eq!((s.available, s.active), (0, 10));
    assert_eq!(s.rejected_by_reason.get(Reason::Aborted), 1);
    drop((h, p2));
    let s = check(bh.stats(), 0, 0);
    assert_eq!((s.available, s.queued), (10, 0));
}

#[test]
fn c02_partial_grant_variant_returns_everything() {
    // hullguard never assigns part of a weight: the head reserves all of it at once, so the
    // "2 permits assigned to W1" of the recipe stay free; cancelling W1 grants W2 at once.
    let bh = bulkhead(10, 10);
    let (_c, w) = counting_waker();
    let h = bh.try_acquire(8).unwrap();
    let Admission::Queued(t1) = bh.enqueue(5, Some(&w)).unwrap() else {
        panic!()
    };
    let Admission::Queued(t2) = bh.enqueue(2, Some(&w)).unwrap() else {
        panic!()
    };
    bh.cancel(t1, Reason::Aborted).unwrap();
    check(bh.stats(), 8, 2); // W2 granted by the cancel, not polled yet
    assert_eq!(bh.poll_ticket(t2, None), Ok(TicketPoll::Granted(2)));
    check(bh.stats(), 8 + 2, 0); // h, W2's claimed units
    bh.release_units(2);
    drop(h);
    let s = check(bh.stats(), 0, 0);
    assert_eq!((s.available, s.queued), (10, 0));
}

// ----- C04: cancelled queued requests still occupy the queue or block the head -------------

#[test]
fn c04_recipe_a_queue_accounting() {
    let bh = bulkhead(1, 1);
    let (_c, w) = counting_waker();
    let h = bh.try_acquire(1).unwrap();
    let mut w1 = Box::pin(bh.acquire(1));
    assert!(poll(&mut w1, &w).is_pending());
    assert_eq!(check(bh.stats(), 1, 0).queued, 1);
    drop(w1); // cancel W1's token
    assert_eq!(
        check(bh.stats(), 1, 0).queued,
        0,
        "queue_len is 0 once W1's cancel completes"
    );
    // Same tick: W2 is queued, not rejected.
    let mut w2 = Box::pin(bh.acquire(1));
    assert!(poll(&mut w2, &w).is_pending());
    assert_eq!(check(bh.stats(), 1, 0).queued, 1);
    drop(h);
    let Poll::Ready(Ok(p)) = poll(&mut w2, &w) else {
        panic!("W2 not granted")
    };
    drop(p);
    let s = check(bh.stats(), 0, 0);
    assert_eq!((s.available, s.queued), (1, 0));
}

#[test]
fn c04_recipe_b_cancelled_head_is_skipped() {
    let bh = bulkhead(2, 3);
    let (_c, w) = counting_waker();
    let h1 = bh.try_acquire(1).unwrap();
    let h2 = bh.try_acquire(1).unwrap();
    let Admission::Queued(w1) = bh.enqueue(2, Some(&w)).unwrap() else {
        panic!()
    };
    let Admission::Queued(w2) = bh.enqueue(1, Some(&w)).unwrap() else {
        panic!()
    };
    bh.cancel(w1, Reason::Aborted).unwrap();
    check(bh.stats(), 2, 0); // W2 (1) does not fit yet
    drop(h1);
    check(bh.stats(), 1, 1); // h2; h1's permit is W2's, unclaimed
    assert_eq!(bh.poll_ticket(w2, None), Ok(TicketPoll::Granted(1)));
    assert_eq!(check(bh.stats(), 1 + 1, 0).available, 0); // h2, W2's claimed unit
    // W1 is never granted.
    assert!(bh.poll_ticket(w1, None).is_err());
    assert_eq!(bh.cancel(w1, Reason::Aborted), Err(CancelError::Stale));
    bh.release_units(1);
    drop(h2);
    let s = check(bh.stats(), 0, 0);
    assert_eq!((s.available, s.queued), (2, 0));
}

#[test]
fn c04_recipe_c_cancel_stress() {
    // L=1, Q=4; 8 threads of acquires each cancelled after a random short wait (yield counts
    // instead of 0–2 ms), one thread releasing whatever is granted. Only cancelled, queue-full
    // or granted outcomes; queue_len matches the live waiters; the end state is quiescent.
    const ITERS: usize = if cfg!(debug_assertions) {
        5_000
    } else {
        100_000
    };
    let bh = Arc::new(bulkhead(1, 4));
    let granted = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8u64)
        .map(|seed| {
            let bh = bh.clone();
            let granted = granted.clone();
            thread::spawn(move || {
                let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let w = Waker::from(Arc::new(Counting(AtomicUsize::new(0))));
                for _ in 0..ITERS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let t = match bh.enqueue(1, Some(&w)) {
                        Ok(Admission::Granted) => {
                            granted.fetch_add(1, SeqCst);
                            bh.release_units(1);
                            continue;
                        }
                        Ok(Admission::Queued(t)) => t,
                        Err(e) => {
                            assert_eq!(e.reason(), Some(Reason::QueueLimit));
                            continue;
                        }
                    };
                    for _ in 0..(x % 4) {
                        thread::yield_now();
                    }
                    match bh.cancel(t, Reason::Aborted) {
                        Ok(()) => {}
                        Err(CancelError::Granted) => {
                            let Ok(TicketPoll::Granted(1)) = bh.poll_ticket(t, None) else {
                                panic!("granted ticket did not yield its permit")
                            };
                            granted.fetch_add(1, SeqCst);
                            bh.release_units(1);
                        }
                        Err(e) => panic!("unexpected outcome {e:?}"),
                    }
                }
            })
        })
        .collect();
    for t in workers {
        t.join().unwrap();
    }
    // Every worker released each grant it got (fast path or claimed ticket).
    let s = check(bh.stats(), 0, 0);
    assert_eq!(
        (s.available, s.queued, s.granted_unclaimed),
        (1, 0, 0),
        "{s}"
    );
    assert_eq!(s.admitted_total, granted.load(SeqCst) as u64);
    let r = s.rejected_by_reason;
    assert_eq!(
        r.total(),
        r.get(Reason::Aborted) + r.get(Reason::QueueLimit)
    );
}

// ----- C05: acquire future busy-waits instead of parking (smol-rs/async-lock#41) --------------

/// Counts how often the wrapped future is polled.
struct PollCount<F> {
    inner: Pin<Box<F>>,
    polls: Arc<AtomicUsize>,
}
impl<F: Future> Future for PollCount<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, SeqCst);
        self.inner.as_mut().poll(cx)
    }
}

/// H holds the permit across a 200 ms (virtual) sleep; W awaits `acquire` on a current-thread
/// runtime. W must park: granted right after H releases, and polled at most 3 times.
async fn c05_flavour<F, T>(bh: Arc<Bulkhead>, make: impl FnOnce(Arc<Bulkhead>) -> F)
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let start = tokio::time::Instant::now();
    let h = bh.clone().try_acquire_owned(1).unwrap();
    let holder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(h);
    });
    let polls = Arc::new(AtomicUsize::new(0));
    let w = tokio::spawn(PollCount {
        inner: Box::pin(make(bh.clone())),
        polls: polls.clone(),
    });
    let out = w.await.unwrap();
    holder.await.unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(200) && waited <= Duration::from_millis(205));
    assert!(
        polls.load(SeqCst) <= 3,
        "polled {} times",
        polls.load(SeqCst)
    );
    drop(out);
    let s = check(bh.stats(), 0, 0); // H dropped by the holder, W's permit (if any) with `out`
    assert_eq!((s.available, s.queued), (s.limit as i64, 0));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn c05_acquire_parks_every_flavour() {
    let bh = || Arc::new(bulkhead(1, 10));
    // borrowed
    c05_flavour(bh(), |b| async move {
        let permit = b.acquire(1).await.unwrap();
        drop(permit);
    })
    .await;
    // owned
    c05_flavour(bh(), |b| async move { b.acquire_owned(1).await.unwrap() }).await;
    // weighted (acquire_many)
    let heavy = Arc::new(bulkhead(3, 10));
    c05_flavour(heavy, |b| async move {
        // H holds 1 of 3; asking for all 3 must wait for H.
        b.acquire_owned(3).await.unwrap()
    })
    .await;
    // with a timeout that does not fire
    c05_flavour(bh(), |b| async move {
        b.acquire_timeout_owned(1, tokio::time::sleep(Duration::from_secs(10)))
            .await
            .unwrap()
    })
    .await;
}

// ----- C07: thread-pool bulkhead rejects below capacity (resilience4j#2125) ------------------

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn c07_count_only_admission_never_rejects_below_capacity() {
    // max_concurrent 5, max_queue 1 (capacity 6); every 2 s a burst of 4 one-second tasks,
    // 10 bursts. Admission depends on counts alone: 0 rejections, at most 4 in flight, and
    // every task starts when it is submitted.
    let bh = Arc::new(bulkhead(5, 1));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _burst in 0..10 {
        for _ in 0..4 {
            let (bh, in_flight, peak) = (bh.clone(), in_flight.clone(), peak.clone());
            tasks.push(tokio::spawn(async move {
                let submitted = tokio::time::Instant::now();
                let permit = bh
                    .clone()
                    .acquire_timeout_owned(1, tokio::time::sleep(Duration::from_secs(30)))
                    .await?;
                assert_eq!(submitted.elapsed(), Duration::ZERO, "task waited to start");
                let now = in_flight.fetch_add(1, SeqCst) + 1;
                peak.fetch_max(now, SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                in_flight.fetch_sub(1, SeqCst);
                drop(permit);
                Ok::<(), hullguard_core::AcquireError>(())
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let rejected = futures_join(tasks).await;
    assert_eq!(rejected, 0);
    assert!(peak.load(SeqCst) <= 4);
    let s = check(bh.stats(), 0, 0); // every task dropped its permit
    assert_eq!((s.admitted_total, s.rejected_by_reason.total()), (40, 0));
}

async fn futures_join(
    tasks: Vec<tokio::task::JoinHandle<Result<(), hullguard_core::AcquireError>>>,
) -> usize {
    let mut rejected = 0;
    for t in tasks {
        if t.await.unwrap().is_err() {
            rejected += 1;
        }
    }
    rejected
}
