//! Loom models of leased mode (docs/design.md §16): the lease manager growing the block from 0
//! while a release hands off and a queued waiter waits — the waiter is granted exactly once and
//! never rejected for an empty block; shrinking the block to 0 under a release never revokes
//! and never grants past the block (I1, I2, I5).

use core::task::Poll;

use loom::thread;

use super::{
    loom_budget::{admit, granted, queued},
    loom_bulkhead::{model_at_most, static_bh},
};
use crate::Config;

fn bh() -> loom::sync::Arc<super::loom_bulkhead::Bh> {
    static_bh(Config {
        max_concurrent: 2,
        max_queue: 2,
        budget: Some(4),
        ..Config::DEFAULT
    })
}

#[test]
fn loom_lease_grow_from_empty_grants_the_waiter_once() {
    // The block is 0: W queues (not refused, unlike the kill switch). The lease manager grows
    // the block to 1 while nothing else runs but the waiter's own poll: W is granted once.
    model_at_most(3, || {
        let b = bh();
        b.set_lease(0).unwrap();
        let mut w = queued(admit(&b, 1, 0));
        let grow = {
            let b = b.clone();
            thread::spawn(move || b.set_lease(1).unwrap())
        };
        grow.join().unwrap();
        match w.poll(None) {
            Poll::Ready(Ok(c)) => drop(c),
            other => panic!("waiter not granted by the grown block: {other:?}"),
        }
        let s = b.stats();
        assert_eq!(
            (s.active, s.queued, s.available, s.limit),
            (0, 0, 1, 1),
            "{s}"
        );
    });
}

#[test]
fn loom_lease_shrink_to_empty_vs_release_with_a_waiter() {
    // Block 1: H holds it, W is queued. The lease expires (block 0) while H ends. W is either
    // handed H's permit (the release won; in flight never exceeds the old block) or stays
    // queued — never rejected for the empty block — and the books balance.
    model_at_most(3, || {
        let b = bh();
        b.set_lease(1).unwrap();
        let h = granted(admit(&b, 1, 0));
        let mut w = queued(admit(&b, 1, 0));
        let shrink = {
            let b = b.clone();
            thread::spawn(move || b.set_lease(0).unwrap())
        };
        let rel = thread::spawn(move || drop(h));
        shrink.join().unwrap();
        rel.join().unwrap();
        match w.poll(None) {
            Poll::Ready(Ok(c)) => {
                assert_eq!(b.stats().active, 1);
                drop(c);
            }
            Poll::Ready(Err(e)) => panic!("waiter rejected by an empty block: {e:?}"),
            Poll::Pending => {
                assert_eq!(b.stats().active, 0);
                b.set_lease(1).unwrap();
                match w.poll(None) {
                    Poll::Ready(Ok(c)) => drop(c),
                    other => panic!("waiter not granted after the block grew: {other:?}"),
                }
            }
        }
        let s = b.stats();
        assert_eq!(
            (s.active, s.queued, s.available),
            (0, 0, s.limit as i64),
            "{s}"
        );
    });
}

#[test]
fn loom_lease_demand_bell_is_never_lost() {
    // The lease manager registers its waker and then re-checks the demand count (as its driver
    // does before parking); a refused try races it. Either the driver's re-check sees the
    // short admission, or its waker is woken: it never sleeps through demand.
    use std::task::Wake;

    use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    struct Counting(AtomicUsize);
    impl Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    model_at_most(3, || {
        let b = bh();
        b.set_lease(1).unwrap();
        let held = granted(admit(&b, 1, 0));
        let woken = std::sync::Arc::new(Counting(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(woken.clone());
        let refused = {
            let b = b.clone();
            thread::spawn(move || assert!(b.try_acquire(1).is_err()))
        };
        b.register_lease_demand(&waker);
        let seen = b.lease_shorts();
        refused.join().unwrap();
        assert!(
            seen == 1 || woken.0.load(SeqCst) == 1,
            "demand lost: shorts seen {seen}, wakes {}",
            woken.0.load(SeqCst)
        );
        drop(held);
    });
}

#[test]
fn loom_lease_budget_shrink_to_empty_vs_release_with_a_waiter() {
    // A leased budget (docs/design.md §16.10): block 3 units, H holds 2 of them, W (cost 2) is
    // queued. The budget lease expires (block 0) while H ends. W is either handed H's units
    // (the release won: units in flight never exceed the old block) or stays queued — never
    // rejected for the empty block, its cost is within the budget's ceiling — and the units
    // balance.
    model_at_most(3, || {
        let b = bh();
        b.set_lease(2).unwrap();
        b.set_lease_budget_ceiling(4).unwrap();
        b.set_lease_budget(3).unwrap();
        let h = granted(admit(&b, 1, 2));
        let mut w = queued(admit(&b, 1, 2));
        let shrink = {
            let b = b.clone();
            thread::spawn(move || b.set_lease_budget(0).unwrap())
        };
        let rel = thread::spawn(move || drop(h));
        shrink.join().unwrap();
        rel.join().unwrap();
        let in_use = |b: &super::loom_bulkhead::Bh| b.stats().budget.unwrap().in_use;
        match w.poll(None) {
            Poll::Ready(Ok(c)) => {
                assert_eq!(in_use(&b), 2);
                drop(c);
            }
            Poll::Ready(Err(e)) => panic!("waiter rejected by an empty budget block: {e:?}"),
            Poll::Pending => {
                assert_eq!(in_use(&b), 0);
                b.set_lease_budget(2).unwrap();
                match w.poll(None) {
                    Poll::Ready(Ok(c)) => drop(c),
                    other => panic!("waiter not granted after the block grew: {other:?}"),
                }
            }
        }
        let s = b.stats().budget.unwrap();
        assert_eq!((s.in_use, s.available), (0, s.limit as i64), "{s:?}");
    });
}
