//! White-box unit tests of the bulkhead protocol, single-threaded and deterministic.

use core::{
    sync::atomic::{AtomicUsize, Ordering},
    task::{Context, Poll, Waker},
    time::Duration,
};
use std::{boxed::Box, sync::Arc, task::Wake, vec::Vec};

use crate::{
    AcquireError, Admission, Bulkhead, CancelError, Config, ConfigError, MAX_PERMITS, MAX_QUEUE,
    Reason, StaleTicket, TicketPoll,
};

/// Counts wake-ups.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<CountingWaker>, Waker) {
    let c = Arc::new(CountingWaker::default());
    (c.clone(), Waker::from(c))
}

/// The ring capacity of a runtime-sized bulkhead with `max_queue`.
fn cap(max_queue: u64) -> u64 {
    Config {
        max_queue,
        ..Config::default()
    }
    .ring_capacity() as u64
}

fn bh(max_concurrent: u64, max_queue: u64) -> Bulkhead {
    Bulkhead::new(Config {
        max_concurrent,
        max_queue,
        ..Config::default()
    })
    .unwrap()
}

fn queued<const N: usize>(b: &Bulkhead<N>, w: u64, waker: &Waker) -> crate::Ticket {
    match b.enqueue(w, Some(waker)).unwrap() {
        Admission::Queued(t) => t,
        Admission::Granted => panic!("expected to queue"),
    }
}

/// I2 at a quiescent point, against what the test itself knows: `held`, the permits it holds
/// (guards and raw units it was granted, less what it gave back), and `unclaimed`, the weights
/// of its waiters that were granted and not yet polled for their permits.
fn assert_conserved<const N: usize>(b: &Bulkhead<N>, held: u64, unclaimed: u64) {
    let s = b.stats();
    assert_eq!(s.active, held, "active vs permits the test holds: {s}");
    assert_eq!(
        s.granted_unclaimed, unclaimed,
        "granted_unclaimed vs the grants the test has not claimed: {s}"
    );
    assert_eq!(
        s.available + held as i64 + unclaimed as i64,
        s.limit as i64,
        "I2 violated with the test's counts ({held} held, {unclaimed} unclaimed): {s}"
    );
}

#[test]
fn smoke() {
    let b = bh(2, 4);
    let p = b.try_acquire(1).unwrap();
    assert_eq!(b.stats().active, 1);
    drop(p);
    let s = b.stats();
    assert_eq!((s.active, s.available, s.admitted_total), (0, 2, 1));
}

#[test]
fn config_errors_name_the_option() {
    let e = Bulkhead::new(Config {
        max_concurrent: 0,
        ..Config::default()
    })
    .unwrap_err();
    assert_eq!(
        (e, e.option()),
        (ConfigError::MaxConcurrent, "max_concurrent")
    );
    let e = Bulkhead::new(Config {
        max_concurrent: MAX_PERMITS + 1,
        ..Config::default()
    });
    assert_eq!(e.unwrap_err(), ConfigError::MaxConcurrent);
    let e = Bulkhead::new(Config {
        max_queue: MAX_QUEUE + 1,
        ..Config::default()
    });
    assert_eq!(e.unwrap_err().option(), "max_queue");
    // The documented maximum itself is accepted (C08's off-by-one).
    let b = Bulkhead::new(Config {
        max_concurrent: MAX_PERMITS,
        max_queue: 0,
        ..Config::default()
    })
    .unwrap();
    let p = b.try_acquire(MAX_PERMITS).unwrap();
    assert_eq!(b.stats().available, 0);
    drop(p);
    assert_eq!(b.stats().available, MAX_PERMITS as i64);
    let s = Bulkhead::<4>::try_new_static(Config {
        max_queue: 5,
        ..Config::DEFAULT
    });
    assert_eq!(s.unwrap_err(), ConfigError::MaxQueue);
}

#[test]
fn invalid_weight_is_not_counted() {
    let b = bh(3, 4);
    assert_eq!(
        b.try_acquire(0).unwrap_err(),
        AcquireError::InvalidWeight {
            weight: 0,
            max_concurrent: 3
        }
    );
    assert_eq!(
        b.try_acquire(4).unwrap_err().invalid_argument(),
        Some("weight")
    );
    assert_eq!(b.stats().rejected_by_reason.total(), 0);
}

#[test]
fn fifo_handoff_and_no_barging() {
    let b = bh(1, 4);
    let (c1, w1) = counting();
    let (_c2, w2) = counting();
    let held = b.try_acquire(1).unwrap();
    let t1 = queued(&b, 1, &w1);
    let t2 = queued(&b, 1, &w2);
    assert_eq!(b.stats().queued, 2);
    drop(held);
    // Handed to the head waiter, not to the counter: no barging (I6).
    assert_eq!(c1.0.load(Ordering::SeqCst), 1);
    assert_eq!(b.stats().granted_unclaimed, 1);
    assert_eq!(
        b.try_acquire(1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    assert_conserved(&b, 0, 1); // `held` dropped; its permit is t1's, unclaimed
    assert_eq!(b.poll_ticket(t1, None), Ok(TicketPoll::Granted(1)));
    assert_eq!(b.poll_ticket(t1, None), Err(StaleTicket));
    assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Pending));
    b.release_units(1);
    assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Granted(1)));
    b.release_units(1);
    let s = b.stats();
    assert_eq!(
        (s.available, s.queued, s.granted_unclaimed, s.admitted_total),
        (1, 0, 0, 3)
    );
    assert!(b.try_acquire(1).is_ok());
}

#[test]
fn weighted_head_of_line_blocks_lighter_waiters() {
    let b = bh(10, 4);
    let (_c, w) = counting();
    let h = b.try_acquire(8).unwrap();
    let t1 = queued(&b, 5, &w);
    let t2 = queued(&b, 2, &w);
    assert_eq!(
        b.poll_ticket(t2, None),
        Ok(TicketPoll::Pending),
        "2 are free but W1 is first"
    );
    drop(h);
    assert_eq!(b.poll_ticket(t1, None), Ok(TicketPoll::Granted(5)));
    assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Granted(2)));
    b.release_units(7);
    assert_eq!(b.stats().available, 10);
}

#[test]
fn cancel_head_passes_the_turn() {
    let b = bh(10, 10);
    let (_c, w) = counting();
    let (c2, w2) = counting();
    let h = b.try_acquire(8).unwrap();
    let t1 = queued(&b, 5, &w);
    let t2 = queued(&b, 2, &w2);
    assert_eq!(b.cancel(t1, Reason::Aborted), Ok(()));
    assert_eq!(c2.0.load(Ordering::SeqCst), 1);
    assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Granted(2)));
    let s = b.stats();
    assert_eq!((s.active, s.available, s.queued), (10, 0, 0));
    assert_eq!(s.rejected_by_reason.get(Reason::Aborted), 1);
    drop(h);
    b.release_units(2);
    assert_eq!(b.stats().available, 10);
    assert_eq!(b.cancel(t1, Reason::Aborted), Err(CancelError::Stale));
}

#[test]
fn cancel_after_grant_loses_and_permits_pass_on() {
    let b = bh(1, 4);
    let (_c, w) = counting();
    let held = b.try_acquire(1).unwrap();
    let t1 = queued(&b, 1, &w);
    let t2 = queued(&b, 1, &w);
    drop(held);
    assert_eq!(b.cancel(t1, Reason::Timeout), Err(CancelError::Granted));
    // The owner gives it up: the permit passes to t2 (I7).
    b.abandon(t1);
    assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Granted(1)));
    b.release_units(1);
    let s = b.stats();
    assert_eq!((s.available, s.queued, s.granted_unclaimed), (1, 0, 0));
    assert_eq!(s.rejected_by_reason.get(Reason::Timeout), 0);
}

#[test]
fn queue_limit_and_ring_reuse() {
    let b = bh(1, 2);
    let (_c, w) = counting();
    let held = b.try_acquire(1).unwrap();
    let t1 = queued(&b, 1, &w);
    let t2 = queued(&b, 1, &w);
    let e = b.enqueue(1, Some(&w)).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::QueueLimit));
    b.cancel(t1, Reason::Aborted).unwrap();
    let t3 = queued(&b, 1, &w);
    drop(held);
    assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Granted(1)));
    // Many laps through a 4-cell ring.
    b.release_units(1);
    assert_eq!(b.poll_ticket(t3, None), Ok(TicketPoll::Granted(1)));
    for _ in 0..100 {
        let t = queued(&b, 1, &w);
        b.release_units(1);
        assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
    }
    b.release_units(1);
    let s = b.stats();
    assert_eq!((s.available, s.queued, s.ring_free), (1, 0, cap(2)));
}

#[test]
fn fail_fast_and_weight_above_limit() {
    let b = bh(4, 0);
    let p = b.try_acquire(4).unwrap();
    assert_eq!(
        b.enqueue(1, None).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    drop(p);
    let b = bh(4, 4);
    b.set_limit(2).unwrap();
    assert_eq!(
        b.enqueue(3, None).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
}

#[test]
fn resize_up_hands_permits_to_waiters() {
    let b = bh(4, 4);
    let (c, w) = counting();
    b.set_limit(2).unwrap();
    let held = b.try_acquire(1).unwrap();
    let t1 = queued(&b, 2, &w);
    assert_eq!(b.poll_ticket(t1, None), Ok(TicketPoll::Pending));
    b.set_limit(3).unwrap();
    assert_eq!(c.0.load(Ordering::SeqCst), 1);
    assert_eq!(b.poll_ticket(t1, None), Ok(TicketPoll::Granted(2)));
    assert_conserved(&b, 1 + 2, 0); // `held`, t1's claimed units
    drop(held);
    b.release_units(2);
    assert_eq!(b.stats().available, 3);
}

#[test]
fn resize_down_rejects_heavier_waiters_and_never_revokes() {
    let b = bh(10, 4);
    let (_c, w) = counting();
    let held = b.try_acquire(10).unwrap();
    let t1 = queued(&b, 6, &w);
    let t2 = queued(&b, 1, &w);
    b.set_limit(5).unwrap();
    match b.poll_ticket(t1, None) {
        Ok(TicketPoll::Rejected(r)) => assert_eq!(r.reason, Reason::ConcurrencyLimit),
        other => panic!("{other:?}"),
    }
    let s = b.stats();
    assert_eq!((s.active, s.available, s.limit, s.queued), (10, -5, 5, 1));
    drop(held);
    assert_eq!(b.poll_ticket(t2, None), Ok(TicketPoll::Granted(1)));
    b.release_units(1);
    assert_eq!(b.stats().available, 5);
    assert_eq!(b.set_limit(0), Err(ConfigError::Limit));
    assert_eq!(b.set_limit(11), Err(ConfigError::Limit));
}

#[test]
fn close_rejects_waiters_and_new_admissions() {
    let b = bh(1, 4);
    let (c, w) = counting();
    let held = b.try_acquire(1).unwrap();
    let t1 = queued(&b, 1, &w);
    b.close();
    assert_eq!(c.0.load(Ordering::SeqCst), 1);
    match b.poll_ticket(t1, None) {
        Ok(TicketPoll::Rejected(r)) => assert_eq!(r.reason, Reason::Shutdown),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        b.try_acquire(1).unwrap_err().reason(),
        Some(Reason::Shutdown)
    );
    assert_eq!(
        b.enqueue(1, None).unwrap_err().reason(),
        Some(Reason::Shutdown)
    );
    drop(held);
    let s = b.stats();
    assert_eq!((s.available, s.queued, s.active), (1, 0, 0));
    assert_eq!(s.rejected_by_reason.get(Reason::Shutdown), 3);
    b.close();
    assert!(b.is_closed());
}

#[test]
fn disabled_admits_everything_and_counts_it() {
    let b = Bulkhead::new(Config {
        max_concurrent: 1,
        enabled: false,
        ..Config::default()
    })
    .unwrap();
    let ps: Vec<_> = (0..5).map(|_| b.try_acquire(1).unwrap()).collect();
    let s = b.stats();
    assert_eq!((s.active, s.available, s.admitted_total), (5, -4, 5));
    drop(ps);
    assert_eq!(b.stats().available, 1);
}

#[test]
fn release_partial_and_forget() {
    let b = bh(10, 4);
    let (_c, w) = counting();
    let mut p = b.try_acquire(8).unwrap();
    let t = queued(&b, 4, &w);
    p.release_partial(2).unwrap();
    assert_conserved(&b, 8 - 2, 4); // p's 6 left; the refund went to t, unclaimed
    assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(4)));
    assert_eq!(p.release_partial(0).unwrap_err().held, 6);
    assert_eq!(p.forget(), 6);
    assert_conserved(&b, 6 + 4, 0); // the forgotten 6 stay out, t's 4 claimed
    b.release_units(4);
    assert_conserved(&b, 6, 0);
    assert_eq!(b.stats().available, 4);
}

#[test]
fn checked_raw_release_refuses_to_mint() {
    let b = bh(2, 0);
    b.try_acquire_units(1).unwrap();
    assert!(b.release_units_checked(1).is_ok());
    assert!(b.release_units_checked(1).is_err());
    assert_eq!(b.stats().available, 2);
}

#[test]
fn future_polls_and_drop_cancels() {
    let b = bh(1, 4);
    let (c, w) = counting();
    let mut cx = Context::from_waker(&w);
    let held = b.try_acquire(1).unwrap();
    let mut a1 = Box::pin(b.acquire(1));
    let mut a2 = Box::pin(b.acquire(1));
    assert!(a1.as_mut().poll(&mut cx).is_pending());
    assert!(a2.as_mut().poll(&mut cx).is_pending());
    drop(held);
    assert_eq!(c.0.load(Ordering::SeqCst), 1);
    // A1 holds an unclaimed grant; dropping it passes the permit to A2 (C01).
    assert_conserved(&b, 0, 1);
    drop(a1);
    let Poll::Ready(Ok(p)) = a2.as_mut().poll(&mut cx) else {
        panic!("A2 not granted")
    };
    drop(p);
    let s = b.stats();
    assert_eq!((s.available, s.queued, s.granted_unclaimed), (1, 0, 0));
}

#[test]
fn timeout_future_settles_timeout() {
    let b = bh(1, 4);
    let (_c, w) = counting();
    let mut cx = Context::from_waker(&w);
    let held = b.try_acquire(1).unwrap();
    let mut a = Box::pin(b.acquire_timeout(1, core::future::ready(())));
    let Poll::Ready(Err(e)) = a.as_mut().poll(&mut cx) else {
        panic!()
    };
    assert_eq!(e.reason(), Some(Reason::Timeout));
    drop(a);
    drop(held);
    let s = b.stats();
    assert_eq!((s.available, s.queued, s.ring_free), (1, 0, cap(4)));
    assert_eq!(s.rejected_by_reason.get(Reason::Timeout), 1);
}

#[test]
fn blocking_acquire_times_out_and_drain_reports() {
    let b = bh(1, 4);
    let held = b.acquire_blocking(1, None).unwrap();
    let e = b
        .acquire_blocking(1, Some(Duration::from_millis(1)))
        .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Timeout));
    let e = b.acquire_blocking(1, Some(Duration::ZERO)).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
    assert!(!b.drain_blocking(Some(Duration::ZERO)).drained);
    drop(held);
    assert!(b.drain_blocking(Some(Duration::ZERO)).drained);
}

#[test]
fn queue_wait_stats_use_the_host_clock() {
    struct Fixed(AtomicUsize);
    impl crate::Clock for Fixed {
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::SeqCst) as u64
        }
    }
    let clock = Arc::new(Fixed(AtomicUsize::new(1_000)));
    let b = Bulkhead::with_clock(
        Config {
            max_concurrent: 1,
            ..Config::default()
        },
        crate::ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let (_c, w) = counting();
    let held = b.try_acquire(1).unwrap();
    let t = queued(&b, 1, &w);
    clock.0.store(51_000, Ordering::SeqCst);
    drop(held);
    assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
    let s = b.stats();
    assert_eq!(
        (s.queue_wait_count, s.queue_wait_sum_ns, s.queue_wait_max_ns),
        (1, 50_000, 50_000)
    );
    b.release_units(1);
}

#[test]
fn static_bulkhead_queues_in_its_inline_ring() {
    static B: Bulkhead<4> = Bulkhead::new_static(Config {
        max_concurrent: 1,
        max_queue: 4,
        ..Config::DEFAULT
    });
    let (_c, w) = counting();
    B.try_acquire_units(1).unwrap();
    let t = match B.enqueue(1, Some(&w)).unwrap() {
        Admission::Queued(t) => t,
        Admission::Granted => panic!(),
    };
    B.release_units(1);
    assert_eq!(B.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
    B.release_units(1);
    assert_eq!(B.stats().available, 1);
}

#[test]
fn forged_tickets_are_stale_never_a_panic() {
    let b = bh(1, 0);
    assert_eq!(
        b.poll_ticket(crate::Ticket::from_raw(7), None),
        Err(StaleTicket)
    );
    assert_eq!(
        b.cancel(crate::Ticket::from_raw(7), Reason::Aborted),
        Err(CancelError::Stale)
    );
    let b = bh(1, 4);
    for raw in [0, 1, 5, 1 << 40, u64::MAX] {
        let t = crate::Ticket::from_raw(raw);
        assert_eq!(b.poll_ticket(t, None), Err(StaleTicket));
        assert_eq!(b.cancel(t, Reason::Aborted), Err(CancelError::Stale));
    }
    assert_eq!(b.stats().rejected_by_reason.total(), 0);
}

/// Issue 12's reproduction: cancelled and timed-out waiters keep no ring cell, so one waiter
/// queued behind a held permit and any number of enqueue + timeout cycles never make an arrival
/// `queue_limit` while fewer than `max_queue` waiters are live.
#[test]
fn timed_out_waiters_never_fill_the_queue() {
    for max_queue in [1u64, 2, 4, 7] {
        let b = Bulkhead::<8>::try_new_static(Config {
            max_concurrent: 1,
            max_queue,
            ..Config::DEFAULT
        })
        .unwrap();
        let (_c, w) = counting();
        let held = b.try_acquire(1).unwrap();
        let head = if max_queue > 1 {
            Some(match b.enqueue(1, Some(&w)).unwrap() {
                Admission::Queued(t) => t,
                Admission::Granted => panic!(),
            })
        } else {
            None
        };
        // Under Miri 24 cycles (the 8-cell ring wraps 3 times; 8.4 s there at 64).
        for i in 0..if cfg!(miri) { 24 } else { 64 } {
            match b.enqueue(1, Some(&w)) {
                // A host timer expires it (the owner then takes the rejection), or the
                // owner's own deadline cancels it.
                Ok(Admission::Queued(t)) if i % 2 == 0 => {
                    b.expire(t, Reason::Timeout).unwrap();
                    let r = b.poll_ticket(t, None).unwrap();
                    assert!(matches!(r, TicketPoll::Rejected(r) if r.reason == Reason::Timeout));
                }
                Ok(Admission::Queued(t)) => b.cancel(t, Reason::Timeout).unwrap(),
                other => panic!(
                    "cycle {i}, max_queue {max_queue}: {other:?} ({})",
                    b.stats()
                ),
            }
            assert_eq!(b.stats().queued, u64::from(head.is_some()));
        }
        drop(held);
        if let Some(t) = head {
            assert_eq!(b.poll_ticket(t, None), Ok(TicketPoll::Granted(1)));
            b.release_units(1);
        }
        let s = b.stats();
        assert_eq!((s.available, s.queued, s.granted_unclaimed), (1, 0, 0));
    }
}

/// Issue 12's second reproduction: one granted-but-unclaimed waiter (its owner not run yet)
/// never makes an empty queue answer `queue_limit`.
#[test]
fn unclaimed_grant_never_fills_the_queue() {
    let b = Bulkhead::<2>::try_new_static(Config {
        max_concurrent: 1,
        max_queue: 1,
        ..Config::DEFAULT
    })
    .unwrap();
    let (_c, w) = counting();
    let held = b.try_acquire(1).unwrap();
    let t1 = queued(&b, 1, &w);
    drop(held); // granted to t1, not claimed yet
    assert_eq!(b.stats().granted_unclaimed, 1);
    for _ in 0..10 {
        // The ring is 2 cells, one holds t1's unclaimed grant: every arrival still queues.
        let t = queued(&b, 1, &w);
        assert_eq!(b.stats().queued, 1);
        assert_conserved(&b, 0, 1); // `held` dropped; its permit is t1's, unclaimed
        b.cancel(t, Reason::Aborted).unwrap();
    }
    assert_eq!(b.poll_ticket(t1, None), Ok(TicketPoll::Granted(1)));
    b.release_units(1);
    assert_eq!(b.stats().available, 1);
}
