//! Loom models of the budget's protocol steps (docs/design.md §4.5, §11): a grant takes permits
//! and budget units in one CAS, so no state of the permit word ever shows one dimension charged
//! without the other (C29); a refund wakes the head waiter that now fits (I4); a cancel and a
//! refund-driven grant have one winner (I7); a shrink of the budget below a waiter's cost
//! refuses it, racing a release, and the books balance (I2 for both dimensions, I5); a streaming
//! hold's growth never barges past a waiter being granted, nor over-charges the budget.

use core::task::Poll;
use std::vec::Vec;

use loom::{sync::Arc, thread};

use super::loom_bulkhead::{Bh, model_at_most, noop_waker, static_bh};
use crate::{Bulkhead, Call, Cancelled, Config, Decision, Reason, Request, Waiter};

fn bh(max_concurrent: u64, budget: u64, max_queue: u64) -> Arc<Bh> {
    static_bh(Config {
        max_concurrent,
        max_queue,
        budget: Some(budget),
        ..Config::DEFAULT
    })
}

pub(super) fn granted(d: Decision<Arc<Bh>, 4>) -> Call<Arc<Bh>, 4> {
    match d {
        Decision::Granted(c) => c,
        other => panic!("expected a grant, got {other:?}"),
    }
}

pub(super) fn queued(d: Decision<Arc<Bh>, 4>) -> Waiter<Arc<Bh>, 4> {
    match d {
        Decision::Queued(w) => w,
        other => panic!("expected to queue, got {other:?}"),
    }
}

pub(super) fn admit(b: &Arc<Bh>, weight: u64, cost: u64) -> Decision<Arc<Bh>, 4> {
    Bulkhead::admit_via(
        b.clone(),
        &Request::new(weight).cost(cost),
        Some(&noop_waker()),
    )
}

/// I5 and I2 for both dimensions at the end of a model.
fn assert_quiescent(b: &Bh) {
    let s = b.stats();
    assert_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0), "{s}");
    assert_eq!(s.available, s.limit as i64, "{s}");
    let bs = s.budget.unwrap();
    assert_eq!((bs.in_use, bs.granted_unclaimed), (0, 0), "{bs:?}");
    assert_eq!(bs.available, bs.limit as i64, "{bs:?}");
    assert_eq!(
        bs.reserved_total + bs.overrun_total,
        bs.consumed_total + bs.refunded_total,
        "settlement identity: {bs:?}"
    );
}

#[test]
fn loom_budget_grant_is_never_half_charged() {
    // Limit 2, budget 10. H holds (1 permit, 8 units). W asks (1, 5): it queues (8 + 5 > 10).
    // A second thread refunds 4 of H's units (H holds 4: W now fits and is granted) and then
    // ends H. The main thread samples the permit word: every state it sees is one of the
    // charged pairs (permits taken, units taken) that some moment of the model really has —
    // never a permit taken without its units or the reverse.
    model_at_most(3, || {
        let b = bh(2, 10, 2);
        let h = granted(admit(&b, 1, 8));
        let enq = {
            let b = b.clone();
            thread::spawn(move || match admit(&b, 1, 5) {
                Decision::Queued(w) => Ok(w),
                Decision::Granted(c) => Err(c),
                Decision::Rejected(e) => panic!("{e}"),
            })
        };
        let rel = thread::spawn(move || {
            let mut h = h;
            h.refund(4).unwrap();
            drop(h);
        });
        let allowed = [(0, 0), (1, 8), (1, 4), (1, 5), (2, 9)];
        for _ in 0..2 {
            let (calls, units) = b.engine.free_now();
            let taken = (2 - calls, 10 - units);
            assert!(allowed.contains(&taken), "half-charged state {taken:?}");
        }
        let w = enq.join().unwrap();
        rel.join().unwrap();
        // I4: H's units came back, so W (the head) holds its grant; never refused after waiting.
        let call = match w {
            Ok(mut w) => match w.poll(None) {
                Poll::Ready(Ok(c)) => c,
                other => panic!("head not granted once it fit: {other:?}"),
            },
            Err(c) => c,
        };
        assert_eq!((call.weight(), call.cost()), (1, 5));
        drop(call);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_budget_cancel_vs_refund_grant() {
    // H holds (1, 10) of budget 10; W queued for (1, 6). H's refund of 6 races W's owner
    // cancelling: exactly one wins — W granted (the owner then holds it) or W cancelled (its
    // place free, no units taken) — and the books balance either way (I7).
    model_at_most(3, || {
        let b = bh(2, 10, 2);
        let mut h = granted(admit(&b, 1, 10));
        let w = queued(admit(&b, 1, 6));
        let refund = thread::spawn(move || {
            h.refund(6).unwrap();
            h
        });
        let outcome = w.cancel(Reason::Aborted);
        let h = refund.join().unwrap();
        match outcome {
            Cancelled::Granted(c) => {
                assert_eq!(c.cost(), 6);
                drop(c);
            }
            Cancelled::Cancelled(r) => assert_eq!(r.reason, Reason::Aborted),
            Cancelled::Rejected(r) => panic!("rejected {r:?}"),
        }
        drop(h);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_budget_shrink_vs_release_with_a_waiter() {
    // Budget 10: H holds (1, 6); W queued for (1, 8). One thread shrinks the budget to 7 while
    // another ends H. W can never be granted under the new ceiling (8 > 7): whatever the order,
    // it settles refused `budget_limit` or — if H's release granted it first under the old
    // ceiling — granted (a shrink never revokes), never left pending; the books balance.
    model_at_most(3, || {
        let b = bh(2, 10, 2);
        let h = granted(admit(&b, 1, 6));
        let mut w = queued(admit(&b, 1, 8));
        let shrink = {
            let b = b.clone();
            thread::spawn(move || b.set_budget(7).unwrap())
        };
        let rel = thread::spawn(move || drop(h));
        shrink.join().unwrap();
        rel.join().unwrap();
        let mut held = Vec::new();
        match w.poll(None) {
            Poll::Ready(Ok(c)) => held.push(c),
            Poll::Ready(Err(e)) => assert_eq!(e.reason(), Some(Reason::BudgetLimit)),
            Poll::Pending => panic!("waiter left pending after the shrink and the release"),
        }
        drop(held);
        let s = b.stats().budget.unwrap();
        assert_eq!((s.limit, s.available), (7, 7));
        assert_quiescent(&b);
    });
}

#[test]
fn loom_budget_growth_vs_a_release_granting_a_waiter() {
    // Budget 10: H1 holds (1, 6), H2 (1, 3); W queued for (1, 3). H1's stream reports a growth
    // of 1 while H2 ends (which grants W). The growth never barges: while W waits it overruns
    // (held past the budget, charged to nobody); once W is granted it is taken if it fits.
    // Either way W is granted, the budget is never over-charged (available >= 0), and the
    // books balance with the overrun held (C30), then at the end without it. Both orders are
    // explored (checked after the model).
    static SEEN: [std::sync::atomic::AtomicBool; 2] =
        [const { std::sync::atomic::AtomicBool::new(false) }; 2];
    model_at_most(3, || {
        let b = bh(4, 10, 2);
        let mut h1 = granted(admit(&b, 1, 6));
        let h2 = granted(admit(&b, 1, 3));
        let mut w = queued(admit(&b, 1, 3));
        let grow = thread::spawn(move || {
            let r = h1.report_usage(5, 2).unwrap();
            (h1, r.change)
        });
        let rel = thread::spawn(move || drop(h2));
        let (h1, change) = grow.join().unwrap();
        rel.join().unwrap();
        let c = match w.poll(None) {
            Poll::Ready(Ok(c)) => c,
            other => panic!("the waiter was not granted: {other:?}"),
        };
        let s = b.stats().budget.unwrap();
        let i = match change {
            crate::HoldChange::Grew(1) => {
                assert_eq!((s.available, s.overrun_held), (0, 0));
                0
            }
            crate::HoldChange::Overran(1) => {
                assert_eq!((s.available, s.overrun_held), (1, 1));
                1
            }
            other => panic!("{other:?}"),
        };
        SEEN[i].store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            s.reserved_total + s.overrun_total,
            s.consumed_total + s.refunded_total + s.in_use + s.overrun_held,
            "{s:?}"
        );
        drop((h1, c));
        assert_quiescent(&b);
    });
    let seen = SEEN
        .each_ref()
        .map(|b| b.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(seen, [true, true], "[grew, overran] explored");
}

#[test]
fn loom_budget_queued_cost_bound_is_never_passed() {
    // Budget 10 held whole by H; max_queued_cost 10. Two threads queue (1, 6) at once: the
    // reservation of the queued cost is one CAS, so exactly one queues and the other is
    // refused queue_limit (6 + 6 > 10) in every interleaving; then H ends and the queued one
    // is granted, its cost leaving the total.
    model_at_most(3, || {
        let b = static_bh(Config {
            max_concurrent: 4,
            max_queue: 2,
            budget: Some(10),
            max_queued_cost: Some(10),
            ..Config::DEFAULT
        });
        let h = granted(admit(&b, 1, 10));
        let spawn = || {
            let b = b.clone();
            thread::spawn(move || match admit(&b, 1, 6) {
                Decision::Queued(w) => Some(w),
                Decision::Rejected(e) => {
                    assert_eq!(e.reason(), Some(Reason::QueueLimit));
                    None
                }
                Decision::Granted(c) => panic!("granted {c:?} with the budget held"),
            })
        };
        let (t1, t2) = (spawn(), spawn());
        let mut waiters: Vec<_> = [t1.join().unwrap(), t2.join().unwrap()]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(waiters.len(), 1, "the bound was passed or nobody queued");
        assert_eq!(b.stats().budget.unwrap().queued_cost, 6);
        drop(h);
        let mut w = waiters.pop().unwrap();
        let c = match w.poll(None) {
            Poll::Ready(Ok(c)) => c,
            other => panic!("not granted: {other:?}"),
        };
        assert_eq!(b.stats().budget.unwrap().queued_cost, 0);
        drop(c);
        assert_quiescent(&b);
    });
}
