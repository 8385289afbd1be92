//! Loom models of revisioned limits (docs/design.md §4.6, §11): two concurrent `apply_limits`
//! leave the highest revision with its own limits installed (C33: a delayed older update never
//! wins, and a reader that sees a revision sees its limits); the kill switch racing a release
//! with a waiter settles the waiter exactly once and the books balance (I2, I5, I7).

use core::task::Poll;
use std::vec::Vec;

use loom::{sync::Arc, thread};

use super::{
    loom_budget::{admit, granted, queued},
    loom_bulkhead::{Bh, model_at_most, static_bh},
};
use crate::{Bulkhead, Config, Decision, LimitsSnapshot, Reason, Request};

fn bh(max_concurrent: u64, budget: u64) -> Arc<Bh> {
    static_bh(Config {
        max_concurrent,
        max_queue: 2,
        budget: Some(budget),
        ..Config::DEFAULT
    })
}

#[test]
fn loom_apply_two_revisions_highest_wins() {
    // Revisions 1 (limit 1, budget 2) and 2 (limit 3, budget 6) race; a third thread holds one
    // permit and releases it. Whatever the order: revision 2 with its limits is in force, and
    // when a racing reader sees revision 2 it also sees limit 3 (installed before published).
    model_at_most(3, || {
        let b = bh(3, 6);
        let held = granted(admit(&b, 1, 0));
        let ts: Vec<_> = [(1u64, 1u64, 2u64), (2, 3, 6)]
            .into_iter()
            .map(|(rev, limit, budget)| {
                let b = b.clone();
                thread::spawn(move || {
                    let s = LimitsSnapshot::new(rev).limit(limit).budget(budget);
                    let _ = b.apply_limits(&s);
                    if b.revision() == 2 {
                        assert_eq!(b.stats().limit, 3, "revision 2 reported before enforced");
                    }
                })
            })
            .collect();
        drop(held);
        for t in ts {
            t.join().unwrap();
        }
        let s = b.stats();
        assert_eq!((s.revision, s.limit, s.budget.unwrap().limit), (2, 3, 6));
        assert_eq!((s.active, s.available), (0, 3), "{s}");
    });
}

#[test]
fn loom_kill_switch_vs_release_with_a_waiter() {
    // Limit 1: H holds it, W is queued. One thread applies the kill switch (limit 0) while
    // another ends H. W settles exactly once: granted (H's release handed it the permit first;
    // a shrink never revokes) or rejected `concurrency_limit` by the kill switch — never left
    // pending. Once all is returned, available == limit == 0.
    model_at_most(3, || {
        let b = bh(1, 4);
        let h = granted(admit(&b, 1, 0));
        let mut w = queued(admit(&b, 1, 0));
        let kill = {
            let b = b.clone();
            thread::spawn(move || b.apply_limits(&LimitsSnapshot::new(1).limit(0)).unwrap())
        };
        let rel = thread::spawn(move || drop(h));
        kill.join().unwrap();
        rel.join().unwrap();
        match w.poll(None) {
            Poll::Ready(Ok(c)) => drop(c),
            Poll::Ready(Err(e)) => assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit)),
            Poll::Pending => panic!("waiter left pending by the kill switch"),
        }
        let s = b.stats();
        assert_eq!(
            (s.limit, s.available, s.active, s.queued),
            (0, 0, 0, 0),
            "{s}"
        );
        assert_eq!(s.granted_unclaimed, 0, "{s}");
    });
}

#[test]
fn loom_apply_never_more_permissive_than_both() {
    // Old limits: limit 2, budget 5; revision 1: limit 1, budget 10 (one dimension shrinks,
    // the other grows). A request of (2 permits, 8 units) fits neither: under the old limits
    // 8 > 5 units, under the new 2 > 1 permits. Racing the install, it must be refused in every
    // interleaving — installing the growth first would admit it for a moment.
    model_at_most(3, || {
        let b = bh(2, 10);
        b.set_budget(5).unwrap();
        let t = {
            let b = b.clone();
            thread::spawn(move || {
                b.apply_limits(&LimitsSnapshot::new(1).limit(1).budget(10))
                    .unwrap()
            })
        };
        let got = Bulkhead::admit_via(b.clone(), &Request::new(2).cost(8).no_wait(), None);
        assert!(
            matches!(got, Decision::Rejected(_)),
            "admitted under a mix of the two revisions: {got:?}"
        );
        t.join().unwrap();
        let s = b.stats();
        assert_eq!((s.revision, s.limit, s.budget.unwrap().limit), (1, 1, 10));
    });
}

#[test]
fn loom_apply_growth_vs_release_grants_the_waiter_once() {
    // Limit 1: H holds it, W waits. One thread applies limit 2 (growth grants waiters in the
    // same call) while another ends H: W is granted exactly once — by the growth's pass or by
    // the release's, never by both and never left pending — and the books balance at limit 2.
    model_at_most(3, || {
        let b = bh(2, 4);
        b.apply_limits(&LimitsSnapshot::new(1).limit(1)).unwrap();
        let h = granted(admit(&b, 1, 0));
        let mut w = queued(admit(&b, 1, 0));
        let grow = {
            let b = b.clone();
            thread::spawn(move || b.apply_limits(&LimitsSnapshot::new(2).limit(2)).unwrap())
        };
        let rel = thread::spawn(move || drop(h));
        grow.join().unwrap();
        rel.join().unwrap();
        let c = match w.poll(None) {
            Poll::Ready(Ok(c)) => c,
            other => panic!("the waiter was not granted: {other:?}"),
        };
        let s = b.stats();
        assert_eq!(
            (s.limit, s.active, s.available, s.queued),
            (2, 1, 1, 0),
            "{s}"
        );
        drop(c);
        let s = b.stats();
        assert_eq!((s.available, s.granted_unclaimed), (2, 0), "{s}");
    });
}
