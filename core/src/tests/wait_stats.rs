//! Queue-wait statistics (docs/design.md §8.1): `queue_wait_count`, `_sum_ns`, `_max_ns` and
//! the histogram, on an injected clock; C35 (`../shared/cases/CASES.md`) steps 1, 2, 3 and 5
//! as a named case (step 4 is the Python binding's, step 6 the stress test's).

use core::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use crate::{
    Bulkhead, ClockSource, Config, Decision, Reason, Request, WaitHistogram, stats::WAIT_BUCKETS,
};

struct Manual(AtomicU64);
impl crate::Clock for Manual {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

const MS: u64 = 1_000_000;

/// The bucket a wait of `ns` belongs in, found by walking the bounds (not by bit arithmetic).
fn bucket_by_bounds(ns: u64) -> usize {
    (0..WAIT_BUCKETS)
        .find(|&i| WaitHistogram::bound_ns(i).is_none_or(|b| ns < b))
        .unwrap()
}

#[test]
fn c35_queue_waits_are_measured_from_enqueue_to_grant() {
    let clock = Arc::new(Manual(AtomicU64::new(0)));
    let set = |ms: u64| clock.0.store(ms * MS, SeqCst);
    let bh = Bulkhead::with_clock(
        Config {
            max_concurrent: 1,
            max_queue: 10,
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let queued = |bh: &Bulkhead| bh.stats().queued;
    // Step 1: H holds from 0 to 100 ms; W1 enqueues at 10 ms.
    let h = bh.try_acquire(1).unwrap();
    set(10);
    let Decision::Queued(mut w1) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(queued(&bh), 1, "step 5 at 10 ms");
    // Step 2: W2 enqueues at 20 ms with a 50 ms timeout: the host's timer expires it at 70.
    set(20);
    let Decision::Queued(w2) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    assert_eq!(queued(&bh), 2, "step 5 at 20 ms");
    set(70);
    bh.expire(w2.ticket(), Reason::Timeout).unwrap();
    assert_eq!(
        queued(&bh),
        1,
        "step 5 at 70 ms: the timed-out waiter left at once"
    );
    drop(w2);
    let s = bh.stats();
    assert_eq!(
        (s.queue_wait_count, s.queue_wait_sum_ns),
        (0, 0),
        "a timeout is not a wait"
    );
    // H releases at 100 ms: W1 waited exactly 90 ms.
    set(100);
    drop(h);
    assert_eq!(queued(&bh), 0, "step 5 after 100 ms");
    let c1 = match w1.poll(None) {
        core::task::Poll::Ready(Ok(c)) => c,
        other => panic!("{other:?}"),
    };
    let s = bh.stats();
    assert_eq!(
        (s.queue_wait_count, s.queue_wait_sum_ns, s.queue_wait_max_ns),
        (1, 90 * MS, 90 * MS)
    );
    let mut want = [0u64; WAIT_BUCKETS];
    want[bucket_by_bounds(90 * MS)] = 1;
    assert_eq!(s.queue_wait_histogram.0, want);
    assert_eq!(
        s.queue_wait_histogram
            .iter()
            .find(|(_, n)| *n == 1)
            .unwrap()
            .0,
        "134217728",
        "90 ms is below 2^27 ns and at or above 2^26"
    );
    // Step 3: W1 releases at 200 ms; W3 acquires at 300 ms at once: no wait recorded.
    set(200);
    drop(c1);
    set(300);
    let Decision::Granted(c3) = bh.admit(&Request::new(1), None) else {
        panic!()
    };
    set(350);
    drop(c3);
    let s2 = bh.stats();
    assert_eq!(
        (
            s2.queue_wait_count,
            s2.queue_wait_sum_ns,
            s2.queue_wait_histogram
        ),
        (
            s.queue_wait_count,
            s.queue_wait_sum_ns,
            s.queue_wait_histogram
        )
    );
    assert_eq!(s2.queue_wait_histogram.total(), s2.queue_wait_count);
}

#[test]
fn the_histogram_buckets_are_powers_of_two_of_ns() {
    assert_eq!(WaitHistogram::KEYS.len(), WAIT_BUCKETS);
    assert_eq!(
        (WaitHistogram::KEYS[0], WaitHistogram::KEYS[27]),
        ("1024", "inf")
    );
    for (i, k) in WaitHistogram::KEYS.iter().enumerate() {
        match WaitHistogram::bound_ns(i) {
            Some(b) => assert_eq!(k.parse::<u64>().unwrap(), b),
            None => assert_eq!(*k, "inf"),
        }
    }
    for ns in [
        0,
        1,
        1023,
        1024,
        1025,
        2047,
        2048,
        90 * MS,
        (1 << 36) - 1,
        1 << 36,
        u64::MAX,
    ] {
        assert_eq!(
            WaitHistogram::bucket_of(ns),
            bucket_by_bounds(ns),
            "{ns} ns"
        );
    }
}
