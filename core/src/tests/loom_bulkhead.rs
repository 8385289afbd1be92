//! Loom models of every protocol step (compiled only with `RUSTFLAGS="--cfg loom"`; run by
//! `ci/loom.sh` with a bounded preemption count). Each model asserts the invariants of
//! docs/design.md §3 that apply at its end: conservation (I2), settle-once (I3), no idle capacity
//! (I4), quiescence (I5), FIFO (I6), one winner for cancel vs grant (I7), close (I8).

use core::task::{Context, Poll, Waker};
use std::{boxed::Box, sync::Arc as StdArc, task::Wake};

use loom::{
    future::block_on,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering::SeqCst},
    },
    thread,
};

use crate::{Admission, Bulkhead, CancelError, Config, Reason, Ticket, TicketPoll};

pub(super) type Bh = Bulkhead<4>;

fn bh(max_concurrent: u64, max_queue: u64) -> Arc<Bh> {
    static_bh(Config {
        max_concurrent,
        max_queue,
        ..Config::DEFAULT
    })
}

/// A shared static-ring bulkhead of `config` (4 cells).
pub(super) fn static_bh(config: Config) -> Arc<Bh> {
    Arc::new(Bh::try_new_static(config).unwrap())
}

/// A waker that only counts (the polling API's owner polls after the model joins).
struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: StdArc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}
pub(super) fn noop_waker() -> Waker {
    Waker::from(StdArc::new(Count(AtomicUsize::new(0))))
}

fn enqueue(b: &Bh, w: u64) -> Ticket {
    match b.enqueue(w, Some(&noop_waker())).unwrap() {
        Admission::Queued(t) => t,
        Admission::Granted => panic!("expected to queue"),
    }
}

/// I5 + I2 at the end of a model.
fn assert_quiescent(b: &Bh) {
    let s = b.stats();
    assert_eq!(s.available, s.limit as i64, "I5 available: {s}");
    assert_eq!(
        (s.queued, s.granted_unclaimed, s.active),
        (0, 0, 0),
        "I5: {s}"
    );
}

#[test]
fn loom_acquire_release() {
    loom::model(|| {
        let b = bh(1, 2);
        let ts: std::vec::Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || {
                    let p = block_on(b.acquire(1)).unwrap();
                    // I1: never more than the limit in flight.
                    assert!(b.stats().active <= 1);
                    drop(p);
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_quiescent(&b);
        assert_eq!(b.stats().admitted_total, 2);
    });
}

#[test]
fn loom_checked_raw_release_never_mints() {
    // The raw pair's ledger under a race: one thread takes a unit and returns it (checked),
    // another returns a unit it never took while a handle's permit is held. Units are
    // fungible, so either return may be the one refused; but exactly one is accepted, the
    // other is counted, and `available` never rises above the limit (issue 13 bug 3).
    loom::model(|| {
        let b = bh(2, 0);
        let call = b.try_acquire(1).unwrap();
        let raw = {
            let b = b.clone();
            thread::spawn(move || {
                b.try_acquire_units(1).unwrap();
                b.release_units_checked(1).is_ok()
            })
        };
        let bogus = b.release_units_checked(1).is_ok();
        let s = b.stats();
        assert!(s.available <= s.limit as i64, "minted: {s}");
        let raw_ok = raw.join().unwrap();
        assert!(
            raw_ok ^ bogus,
            "exactly one return accepted ({raw_ok}, {bogus})"
        );
        assert_eq!(b.stats().released_twice_total, 1);
        // Whichever return was accepted gave the raw unit back: nothing is out without a handle.
        assert!(b.release_units_checked(1).is_err());
        drop(call);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_try_acquire_vs_release_no_barging() {
    // A queued waiter exists; a release races a try_acquire: the try_acquire must fail
    // (the permit is the waiter's), I6.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        let barged = b.try_acquire_units(1).is_ok();
        rel.join().unwrap();
        assert!(!barged, "try_acquire barged past a queued waiter");
        assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
        b.release_units(1);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_enqueue_vs_release_no_lost_grant() {
    // The WAITERS flag race: an enqueue publishing while the only holder releases. The waiter
    // must be granted (I4), never left queued with a free permit.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        let outcome = b.enqueue(1, Some(&noop_waker())).unwrap();
        rel.join().unwrap();
        match outcome {
            Admission::Granted => {}
            Admission::Queued(t) => {
                assert_eq!(
                    b.poll_ticket(t, None),
                    Ok(TicketPoll::Granted(1)),
                    "I4: lost grant"
                );
            }
        }
        b.release_units(1);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_handoff_to_queued_waiter() {
    loom::model(|| {
        let b = bh(1, 2);
        let held = b.try_acquire_units(1);
        assert!(held.is_ok());
        let w = {
            let b = b.clone();
            thread::spawn(move || {
                let p = block_on(b.acquire(1)).unwrap();
                drop(p);
            })
        };
        b.release_units(1);
        w.join().unwrap();
        assert_quiescent(&b);
    });
}

#[test]
fn loom_cancel_vs_grant() {
    // I7: a release (grant) races the owner's cancel. Exactly one wins; if the grant won, the
    // owner passes the permit on (abandon), and nothing is lost either way.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        let cancelled = b.cancel(t, Reason::Aborted);
        match cancelled {
            Ok(()) => {}
            Err(CancelError::Granted) => {
                assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
                b.release_units(1);
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        rel.join().unwrap();
        // Settle once (I3): the ticket is consumed whichever way it went.
        assert!(b.poll_ticket(t, None).is_err());
        assert_quiescent(&b);
        let aborted = b.stats().rejected_by_reason.get(Reason::Aborted);
        assert_eq!(aborted, u64::from(cancelled.is_ok()));
    });
}

#[test]
fn loom_timeout_vs_grant() {
    // The host timer fires (cancel with `timeout`) while a release grants; the owner, a
    // future, then polls. A timed-out waiter is never handed a permit later (I7).
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let w = noop_waker();
        let mut cx = Context::from_waker(&w);
        let mut fut = Box::pin(b.acquire(1));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        let t = fut.ticket().unwrap();
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        let timer = {
            let b = b.clone();
            thread::spawn(move || b.cancel(t, Reason::Timeout).is_ok())
        };
        rel.join().unwrap();
        let timed_out = timer.join().unwrap();
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(p)) => {
                assert!(!timed_out, "a timed-out waiter was handed a permit");
                drop(p);
            }
            Poll::Ready(Err(_)) | Poll::Pending => assert!(timed_out),
        }
        drop(fut);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_cancel_head_passes_the_turn() {
    // C02 / embassy#6964: a heavy head is cancelled while a lighter waiter sits behind it with
    // enough free permits; concurrently another holder releases. The light waiter is granted.
    loom::model(|| {
        let b = bh(10, 4);
        b.try_acquire_units(8).unwrap();
        let w1 = enqueue(&b, 5);
        let w2 = enqueue(&b, 2);
        let canceller = {
            let b = b.clone();
            thread::spawn(move || b.cancel(w1, Reason::Aborted).unwrap())
        };
        let s = b.enqueue(1, None);
        canceller.join().unwrap();
        assert_eq!(
            b.poll_ticket(w2, None),
            Ok(TicketPoll::Granted(2)),
            "I4 after cancel"
        );
        match s.unwrap() {
            Admission::Queued(t3) => {
                b.release_units(2);
                assert_eq!(b.poll_ticket(t3, None), Ok(TicketPoll::Granted(1)));
                b.release_units(1);
            }
            Admission::Granted => panic!("barged past queued waiters"),
        }
        b.release_units(8);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_close_with_waiters() {
    // I8 + I3: close races a release; the waiter settles exactly once (granted before the
    // close, or shutdown), nothing is admitted after close, and the books balance.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let closer = {
            let b = b.clone();
            thread::spawn(move || b.close())
        };
        b.release_units(1);
        closer.join().unwrap();
        match b.poll_ticket(t, None) {
            Ok(TicketPoll::Granted(1)) => b.release_units(1),
            Ok(TicketPoll::Rejected(r)) => assert_eq!(r.reason, Reason::Shutdown),
            other => panic!("waiter not settled after close: {other:?}"),
        }
        assert!(b.try_acquire_units(1).is_err());
        assert_quiescent(&b);
    });
}

#[test]
fn loom_resize_with_waiters() {
    // set_limit up and down races a release with a waiter queued: conservation (I2) and no
    // idle capacity (I4) at the end.
    loom::model(|| {
        let b = bh(3, 2);
        b.set_limit(1).unwrap();
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let resizer = {
            let b = b.clone();
            thread::spawn(move || {
                b.set_limit(2).unwrap();
                b.set_limit(1).unwrap();
            })
        };
        b.release_units(1);
        resizer.join().unwrap();
        // Limit is 1 and nothing else is held: the waiter must have been granted.
        assert_eq!(
            b.poll_ticket(t, None),
            Ok(TicketPoll::Granted(1)),
            "I4 after resize"
        );
        let s = b.stats();
        assert_eq!(s.available + s.active as i64, s.limit as i64, "I2: {s}");
        b.release_units(1);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_weighted_head_of_line_fifo() {
    // Two releases race; the heavy head must be granted before the light waiter behind it (I6).
    loom::model(|| {
        let b = bh(4, 4);
        b.try_acquire_units(2).unwrap();
        b.try_acquire_units(2).unwrap();
        let heavy = enqueue(&b, 3);
        let light = enqueue(&b, 1);
        let r1 = {
            let b = b.clone();
            thread::spawn(move || b.release_units(2))
        };
        b.release_units(2);
        r1.join().unwrap();
        assert_eq!(b.poll_ticket(heavy, None), Ok(TicketPoll::Granted(3)));
        assert_eq!(b.poll_ticket(light, None), Ok(TicketPoll::Granted(1)));
        b.release_units(4);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_drop_queued_future_vs_release() {
    // C01 in a race: the owner drops its queued future while the holder releases; the permit
    // is never stranded in the dropped waiter.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let w = noop_waker();
        let mut cx = Context::from_waker(&w);
        let mut fut = Box::pin(b.acquire(1));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        drop(fut);
        rel.join().unwrap();
        assert_quiescent(&b);
    });
}

#[test]
fn loom_close_vs_publishing_enqueue() {
    // I8: an enqueuer publishing its cell while close() sweeps. The waiter is rejected
    // `shutdown` (at enqueue or once queued); it is never left pending after close.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let closer = {
            let b = b.clone();
            thread::spawn(move || b.close())
        };
        let r = b.enqueue(1, Some(&noop_waker()));
        closer.join().unwrap();
        match r {
            Err(e) => assert_eq!(e.reason(), Some(Reason::Shutdown)),
            Ok(Admission::Queued(t)) => match b.poll_ticket(t, None) {
                Ok(TicketPoll::Rejected(rj)) => assert_eq!(rj.reason, Reason::Shutdown),
                other => panic!("waiter not rejected after close: {other:?}"),
            },
            Ok(Admission::Granted) => panic!("admitted with no free permit"),
        }
        b.release_units(1);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_enqueue_behind_a_waiter_vs_a_release_that_reaches_it() {
    // The RMW diet (issue 15): an enqueuer behind a queued waiter skips its own pass. Here the
    // holder's release frees room for the head *and* the newcomer: a pass that meets the
    // newcomer's cell still claimed marks it, and the newcomer, told by its publish, passes
    // itself. Both end granted; never a waiter pending beside a free permit (I4).
    loom::model(|| {
        let b = bh(2, 2);
        b.try_acquire_units(2).unwrap();
        let head = enqueue(&b, 1);
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(2))
        };
        let second = b.enqueue(1, Some(&noop_waker())).unwrap();
        rel.join().unwrap();
        assert_eq!(b.poll_ticket(head, None), Ok(TicketPoll::Granted(1)));
        match second {
            Admission::Granted => {}
            Admission::Queued(t) => assert_eq!(
                b.poll_ticket(t, None),
                Ok(TicketPoll::Granted(1)),
                "I4: the newcomer left queued beside a free permit"
            ),
        }
        b.release_units(2);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_close_vs_an_enqueue_behind_a_waiter() {
    // I8 with the skip: close() sweeps while a newcomer publishes behind a queued waiter (so
    // it may skip its own pass). Both are rejected `shutdown`; none is left pending.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let head = enqueue(&b, 1);
        let closer = {
            let b = b.clone();
            thread::spawn(move || b.close())
        };
        let r = b.enqueue(1, Some(&noop_waker()));
        closer.join().unwrap();
        match b.poll_ticket(head, None) {
            Ok(TicketPoll::Rejected(rj)) => assert_eq!(rj.reason, Reason::Shutdown),
            other => panic!("head not rejected after close: {other:?}"),
        }
        match r {
            Err(e) => assert_eq!(e.reason(), Some(Reason::Shutdown)),
            Ok(Admission::Queued(t)) => match b.poll_ticket(t, None) {
                Ok(TicketPoll::Rejected(rj)) => assert_eq!(rj.reason, Reason::Shutdown),
                other => panic!("newcomer not rejected after close: {other:?}"),
            },
            Ok(Admission::Granted) => panic!("admitted with no free permit"),
        }
        b.release_units(1);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_cancel_enqueue_release_three_way() {
    // Three parties: the head waiter is cancelled while a new waiter enqueues behind it and the
    // holder releases. Exactly one waiter ends up with the permit, the other settles, and the
    // books balance (I2, I3, I4, I7). A bound of 3 (28 s); 4 is `make loom-deep` (264 s).
    model_at_most(3, || {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let head = enqueue(&b, 1);
        let enq = {
            let b = b.clone();
            thread::spawn(move || b.enqueue(1, Some(&noop_waker())).unwrap())
        };
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        let head_cancelled = b.cancel(head, Reason::Aborted);
        let second = enq.join().unwrap();
        rel.join().unwrap();
        let mut granted = 0;
        if head_cancelled == Err(CancelError::Granted) {
            assert_eq!(b.poll_ticket(head, None), Ok(TicketPoll::Granted(1)));
            granted += 1;
        }
        match second {
            Admission::Granted => granted += 1,
            Admission::Queued(t) => match b.poll_ticket(t, None) {
                Ok(TicketPoll::Granted(1)) => granted += 1,
                Ok(TicketPoll::Pending) => {
                    assert_eq!(granted, 1, "I4: permit idle while a waiter is queued");
                    b.release_units(1);
                    granted = 0;
                    assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
                    granted += 1;
                }
                other => panic!("{other:?}"),
            },
        }
        assert_eq!(granted, 1, "exactly one holder of the single permit");
        b.release_units(1);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_dispatcher_clear_vs_enqueue_no_barging() {
    // Found by the stress test: a dispatcher pass on an empty ring (here set_limit's) clears
    // WAITERS while an enqueue publishes and returns Queued; the same thread's try_acquire must
    // still fail (I6). The fast path checks the ring itself, not only the flag.
    loom::model(|| {
        let b = bh(4, 2);
        b.try_acquire_units(2).unwrap();
        let d = {
            let b = b.clone();
            thread::spawn(move || b.set_limit(3).unwrap())
        };
        let t = enqueue(&b, 3);
        let barged = b.try_acquire_units(1).is_ok();
        d.join().unwrap();
        assert!(!barged, "I6: try_acquire barged past a queued waiter");
        b.cancel(t, Reason::Aborted).unwrap();
        b.release_units(2);
        assert_quiescent(&b);
    });
}

#[test]
fn loom_no_grant_decided_after_close() {
    // I8: a release races close(). The waiter settles exactly once; if it was granted, that
    // grant's reservation preceded the close (the release's pass began before it), so a
    // release that *starts* after close() returned can never grant it.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let closer = {
            let b = b.clone();
            thread::spawn(move || b.close())
        };
        closer.join().unwrap();
        let r = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        r.join().unwrap();
        match b.poll_ticket(t, None) {
            Ok(TicketPoll::Rejected(rj)) => assert_eq!(rj.reason, Reason::Shutdown),
            other => panic!("I8: after close() the waiter must be rejected, got {other:?}"),
        }
        assert_quiescent(&b);
    });
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let r = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        b.close();
        r.join().unwrap();
        // Settled exactly once, either way; nothing lost.
        match b.poll_ticket(t, None) {
            Ok(TicketPoll::Granted(w)) => b.release_units(w),
            Ok(TicketPoll::Rejected(rj)) => assert_eq!(rj.reason, Reason::Shutdown),
            other => panic!("waiter not settled: {other:?}"),
        }
        assert!(b.try_acquire_units(1).is_err());
        assert_quiescent(&b);
    });
}

// ----- the ring fix (issue 12): skips, cells freed at cancel, expiry ------------------------

/// A 2-cell ring with a parked head: the permit is held, W0 (ticket 0, cell 0) waits, and
/// ticket 1 was cancelled (cell 1 free, claimable on lap 1). The next arrival's ticket 2 needs
/// cell 0 on lap 1, which W0 still holds: it must skip it and claim ticket 3 (cell 1).
fn parked_head() -> (Arc<Bulkhead<2>>, Ticket) {
    let b = Arc::new(
        Bulkhead::<2>::try_new_static(Config {
            max_concurrent: 1,
            max_queue: 2,
            ..Config::DEFAULT
        })
        .unwrap(),
    );
    b.try_acquire_units(1).unwrap();
    let w0 = match b.enqueue(1, Some(&noop_waker())).unwrap() {
        Admission::Queued(t) => t,
        Admission::Granted => panic!("the permit is held"),
    };
    let w1 = match b.enqueue(1, Some(&noop_waker())).unwrap() {
        Admission::Queued(t) => t,
        Admission::Granted => panic!("the permit is held"),
    };
    b.cancel(w1, Reason::Aborted).unwrap();
    (b, w0)
}

fn assert_quiescent_n<const N: usize>(b: &Bulkhead<N>) {
    let s = b.stats();
    assert_eq!(s.available, s.limit as i64, "I5 available: {s}");
    assert_eq!(
        (s.queued, s.granted_unclaimed, s.active),
        (0, 0, 0),
        "I5: {s}"
    );
    assert_eq!(s.ring_free, N as u64, "every cell free: {s}");
}

#[test]
fn loom_skip_vs_cancel_of_the_skipped_head() {
    // The arrival relabels W0's cell (a skip) while W0's owner cancels it: the cancel must win
    // or lose cleanly against the relabel (it retries on a relabel, never misses its own
    // cell), the arrival is queued — never refused while live < max_queue — and after the
    // release it is granted, FIFO.
    loom::model(|| {
        let (b, w0) = parked_head();
        let canceller = {
            let b = b.clone();
            thread::spawn(move || b.cancel(w0, Reason::Aborted))
        };
        let arrival = b.enqueue(1, Some(&noop_waker()));
        assert_eq!(
            canceller.join().unwrap(),
            Ok(()),
            "the owner's cancel of a waiter"
        );
        let t = match arrival {
            Ok(Admission::Queued(t)) => t,
            other => panic!("arrival with 1 live of 2: {other:?}"),
        };
        b.release_units(1);
        assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
        b.release_units(1);
        assert_quiescent_n(&b);
    });
}

#[test]
fn loom_skip_vs_grant_of_the_skipped_head() {
    // The release grants W0 while the arrival skips its cell: the grant CAS retries over the
    // relabel, W0 is granted exactly once, and the arrival is granted after W0 releases.
    loom::model(|| {
        let (b, w0) = parked_head();
        let releaser = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        let arrival = b.enqueue(1, Some(&noop_waker()));
        releaser.join().unwrap();
        let t = match arrival {
            Ok(Admission::Queued(t)) => t,
            other => panic!("arrival behind a granted head: {other:?}"),
        };
        assert_eq!(
            b.poll_ticket(w0, None),
            Ok(TicketPoll::Granted(1)),
            "W0 first"
        );
        assert_eq!(
            b.poll_ticket(t, None),
            Ok(TicketPoll::Pending),
            "FIFO: W0 holds it"
        );
        b.release_units(1);
        assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
        b.release_units(1);
        assert_quiescent_n(&b);
    });
}

#[test]
fn loom_two_arrivals_wrap_past_a_parked_head() {
    // Two arrivals race over the wrapped ring (one must skip W0's cell, the other may find
    // it skipped already and help the tail): with W0 they make 3 live of 3, so both queue, on
    // distinct tickets, and are granted in ticket order.
    loom::model(|| {
        let b = Arc::new(
            Bulkhead::<4>::try_new_static(Config {
                max_concurrent: 1,
                max_queue: 3,
                ..Config::DEFAULT
            })
            .unwrap(),
        );
        b.try_acquire_units(1).unwrap();
        let w0 = enqueue4(&b);
        for _ in 0..3 {
            let t = enqueue4(&b);
            b.cancel(t, Reason::Aborted).unwrap();
        }
        // tail = 4: ticket 4 needs cell 0 (W0's).
        let other = {
            let b = b.clone();
            thread::spawn(move || b.enqueue(1, Some(&noop_waker())))
        };
        let mine = b.enqueue(1, Some(&noop_waker()));
        let theirs = other.join().unwrap();
        let (Ok(Admission::Queued(a)), Ok(Admission::Queued(c))) = (mine, theirs) else {
            panic!("both arrivals queue (3 live of 3)");
        };
        assert_ne!(a, c);
        let (first, second) = if a.to_raw() < c.to_raw() {
            (a, c)
        } else {
            (c, a)
        };
        assert!(first.to_raw() >= 5, "ticket 4 (W0's cell) was skipped");
        b.release_units(1);
        assert_eq!(b.poll_ticket(w0, None), Ok(TicketPoll::Granted(1)));
        b.release_units(1);
        assert_eq!(b.poll_ticket(first, None), Ok(TicketPoll::Granted(1)));
        b.release_units(1);
        assert_eq!(b.poll_ticket(second, None), Ok(TicketPoll::Granted(1)));
        b.release_units(1);
        assert_quiescent_n(&b);
    });
}

fn enqueue4(b: &Bulkhead<4>) -> Ticket {
    match b.enqueue(1, Some(&noop_waker())).unwrap() {
        Admission::Queued(t) => t,
        Admission::Granted => panic!("expected to queue"),
    }
}

#[test]
fn loom_expire_vs_grant() {
    // A host timer expires the waiter (a settlement on the owner's behalf) while a release
    // grants it: exactly one wins; the owner's poll takes that result; `live` and the stats
    // count it exactly once; the cell is free again after the poll.
    loom::model(|| {
        let b = bh(1, 2);
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let timer = {
            let b = b.clone();
            thread::spawn(move || b.expire(t, Reason::Timeout))
        };
        b.release_units(1);
        let expired = timer.join().unwrap();
        match (expired, b.poll_ticket(t, None)) {
            (Ok(()), Ok(TicketPoll::Rejected(r))) => {
                assert_eq!(r.reason, Reason::Timeout);
                assert_eq!(b.stats().rejected_by_reason.get(Reason::Timeout), 1);
            }
            (Err(CancelError::Granted), Ok(TicketPoll::Granted(1))) => {
                assert_eq!(b.stats().rejected_by_reason.get(Reason::Timeout), 0);
                b.release_units(1);
            }
            other => panic!("expire vs grant settled as {other:?}"),
        }
        assert_eq!(b.stats().queued, 0, "live counted out exactly once");
        assert!(b.poll_ticket(t, None).is_err(), "I3: consumed once");
        assert_quiescent(&b);
    });
}

#[test]
fn loom_settled_owner_requeues_before_the_settler_finishes() {
    // The owner sees its grant (its cancel loses) and queues again at once, while the
    // dispatcher that granted it may still be mid-step: the new arrival must be queued (1
    // live of 1), never refused `queue_limit` for the old waiter's stale count.
    loom::model(|| {
        let b = bh(1, 1);
        b.try_acquire_units(1).unwrap();
        let t = enqueue(&b, 1);
        let rel = {
            let b = b.clone();
            thread::spawn(move || b.release_units(1))
        };
        loop {
            match b.cancel(t, Reason::Aborted) {
                Ok(()) => break,
                Err(CancelError::Granted) => {
                    assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
                    // Queue again behind our own permit: must not be refused.
                    match b.enqueue(1, Some(&noop_waker())) {
                        Ok(Admission::Queued(t2)) => {
                            b.release_units(1);
                            rel.join().unwrap();
                            assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Granted(1)));
                            b.release_units(1);
                            assert_quiescent(&b);
                            return;
                        }
                        other => panic!("re-enqueue after a grant: {other:?}"),
                    }
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        rel.join().unwrap();
        assert_quiescent(&b);
    });
}

/// Runs a model with three threads at a preemption bound of at most 2 (docs/design.md §11: 3
/// for two-thread models, 2 for three): a bound of 4 takes hours on this one.
fn model3<F: Fn() + Sync + Send + 'static>(f: F) {
    model_at_most(2, f);
}

/// Runs a model at `LOOM_MAX_PREEMPTIONS` capped at `cap` (docs/design.md §11), or at
/// `cap + 1` when `LOOM_DEEP=1` (`make loom-deep`, outside `make test`).
pub(super) fn model_at_most<F: Fn() + Sync + Send + 'static>(cap: usize, f: F) {
    let deep = std::env::var("LOOM_DEEP").is_ok_and(|v| v == "1");
    let cap = cap + usize::from(deep);
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(cap, |p| p.min(cap)));
    b.check(f);
}

#[test]
fn loom_stale_claimer_never_takes_a_skipped_ticket() {
    // Arrival A may read `tail` = 4 and stall while arrival B skips ticket 4 (W0's cell) and
    // W0's owner cancels, freeing that cell. The free must be labelled past the skipped lap
    // (the skip relabelled W0 first), so A can never claim ticket 4 after the tail — and
    // maybe the head — passed it: such a waiter would never be granted. All three settle:
    // A and B are granted, in ticket order.
    model3(|| {
        let b = Arc::new(
            Bulkhead::<4>::try_new_static(Config {
                max_concurrent: 1,
                max_queue: 3,
                ..Config::DEFAULT
            })
            .unwrap(),
        );
        b.try_acquire_units(1).unwrap();
        let w0 = enqueue4(&b);
        for _ in 0..3 {
            let t = enqueue4(&b);
            b.cancel(t, Reason::Aborted).unwrap();
        }
        let other = {
            let b = b.clone();
            thread::spawn(move || b.enqueue(1, Some(&noop_waker())))
        };
        let canceller = {
            let b = b.clone();
            thread::spawn(move || b.cancel(w0, Reason::Aborted).unwrap())
        };
        let mine = b.enqueue(1, Some(&noop_waker()));
        let theirs = other.join().unwrap();
        canceller.join().unwrap();
        let (Ok(Admission::Queued(x)), Ok(Admission::Queued(y))) = (mine, theirs) else {
            panic!("both arrivals queue");
        };
        let (first, second) = if x.to_raw() < y.to_raw() {
            (x, y)
        } else {
            (y, x)
        };
        b.release_units(1);
        assert_eq!(
            b.poll_ticket(first, None),
            Ok(TicketPoll::Granted(1)),
            "no orphan"
        );
        b.release_units(1);
        assert_eq!(
            b.poll_ticket(second, None),
            Ok(TicketPoll::Granted(1)),
            "no orphan"
        );
        b.release_units(1);
        assert_quiescent_n(&b);
    });
}
