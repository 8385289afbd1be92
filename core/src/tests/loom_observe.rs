//! Loom model of observe mode's protocol steps (docs/design.md §4.7): the dispatcher granting
//! a queued head through an observed budget races `set_observe` switching back to enforce. The
//! enforced dimension (permits) is never over-charged in any state; the head is either granted
//! under observe mode (counted `budget_limit`, the budget overdrawn) or stays queued under
//! enforcement until its units really return; never lost, never counted twice.

use core::task::Poll;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use loom::thread;

use super::{
    loom_budget::{admit, granted, queued},
    loom_bulkhead::{model_at_most, noop_waker, static_bh},
};
use crate::{Bulkhead, Config, Observe, Reason, Request};

#[test]
fn loom_observe_switch_vs_a_grant_through_the_observed_budget() {
    // Limit 2, budget 10, the budget observed. H1 holds (1, 8), H2 (1, 0); W queued for (1, 5)
    // (no permit). One thread ends H2 (a permit back; the budget still short: W may go through
    // only while the budget is observed); another switches to enforce. Both outcomes are
    // explored (checked after the model).
    static SEEN: [AtomicBool; 2] = [const { AtomicBool::new(false) }; 2];
    model_at_most(3, || {
        let b = static_bh(Config {
            max_concurrent: 2,
            max_queue: 2,
            budget: Some(10),
            observe: Observe::Budget,
            ..Config::DEFAULT
        });
        let h1 = granted(admit(&b, 1, 8));
        let h2 = granted(admit(&b, 1, 0));
        let mut w = queued(admit(&b, 1, 5));
        let rel = thread::spawn(move || drop(h2));
        let switch = {
            let b = b.clone();
            thread::spawn(move || b.set_observe(Observe::Off).unwrap())
        };
        let (calls, _) = b.engine.free_now();
        assert!(calls >= 0, "the enforced permits over-charged: {calls}");
        rel.join().unwrap();
        switch.join().unwrap();
        let s = b.stats();
        let observed = s.observed_by_reason.get(Reason::BudgetLimit);
        let call = match w.poll(None) {
            Poll::Ready(Ok(c)) => {
                // Granted while the budget was observed: counted once, the budget overdrawn.
                assert_eq!((observed, s.budget.unwrap().available), (1, -3), "{s}");
                SEEN[0].store(true, Relaxed);
                drop(h1);
                c
            }
            Poll::Pending => {
                // Enforced first: W waits for its units, and is granted when H1 ends.
                assert_eq!(observed, 0, "{s}");
                SEEN[1].store(true, Relaxed);
                drop(h1);
                match w.poll(None) {
                    Poll::Ready(Ok(c)) => c,
                    other => panic!("not granted once its units returned: {other:?}"),
                }
            }
            Poll::Ready(Err(e)) => panic!("refused after waiting: {e}"),
        };
        assert_eq!(call.cost(), 5);
        drop(call);
        let s = b.stats();
        assert_eq!(
            s.observed_by_reason.get(Reason::BudgetLimit),
            observed,
            "counted twice"
        );
        assert_eq!(
            (s.active, s.available, s.budget.unwrap().available),
            (0, 2, 10)
        );
    });
    let seen = SEEN.each_ref().map(|b| b.load(Relaxed));
    assert_eq!(
        seen,
        [true, true],
        "[granted observed, enforced first] explored"
    );
}

#[test]
fn loom_request_observe_rides_its_cell_to_the_head() {
    // Limit 1, budget 10, the bulkhead enforcing. H holds (1, 10). W queues for (1, 5) with its
    // own calls shadow (the budget short, enforced); P queues behind it for (1, 0), plain. One
    // thread refunds H's budget (W now fits the budget; the calls it shadows are still short);
    // another enqueues P meanwhile. W is granted by whichever pass sees the units, through its
    // own tag, counted once; P still waits for the permit (it shadows nothing), and never
    // passes W (FIFO).
    model_at_most(3, || {
        let b = static_bh(Config {
            max_concurrent: 1,
            max_queue: 2,
            budget: Some(10),
            ..Config::DEFAULT
        });
        let mut h = granted(admit(&b, 1, 10));
        let mut w = queued(Bulkhead::admit_via(
            b.clone(),
            &Request::new(1).cost(5).observe(Observe::Concurrency),
            Some(&noop_waker()),
        ));
        let refund = thread::spawn(move || {
            h.refund(10).unwrap();
            h
        });
        let p = {
            let b = b.clone();
            thread::spawn(move || queued(admit(&b, 1, 0)).into_ticket())
        };
        let h = refund.join().unwrap();
        let p = b.waiter(p.join().unwrap());
        let call = match w.poll(None) {
            Poll::Ready(Ok(c)) => c,
            other => panic!("the request's own shadow was lost in the queue: {other:?}"),
        };
        let s = b.stats();
        assert_eq!(s.observed_by_reason.get(Reason::ConcurrencyLimit), 1, "{s}");
        assert_eq!(
            (s.active, s.queued),
            (2, 1),
            "P still waits for a permit: {s}"
        );
        drop((call, h));
        let mut p = p;
        assert!(matches!(p.poll(None), Poll::Ready(Ok(_))));
    });
}
