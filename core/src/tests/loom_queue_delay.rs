//! Loom models of queue-delay shedding and adaptive LIFO (docs/design.md §4.10): a shed or an
//! out-of-order (newest-first) grant by the dispatcher races the waiter's own cancel through
//! the same settle CAS, so exactly one wins, the count of what won is right, and nothing is
//! left held or queued.

use core::{
    sync::atomic::{AtomicU64, Ordering::SeqCst},
    task::Poll,
    time::Duration,
};

use loom::{sync::Arc, thread};

use super::loom_bulkhead::{model_at_most, noop_waker};
use crate::{Bulkhead, Call, Cancelled, ClockSource, Config, Decision, Reason, Request, Waiter};

/// A clock that moves 1 s at every read (outside the model: plain data per execution).
struct Stepping(AtomicU64);
impl crate::Clock for Stepping {
    fn now_ns(&self) -> u64 {
        self.0.fetch_add(1_000_000_000, SeqCst)
    }
}

/// Limit 1, CoDel with a 1 ms target and `interval`, `lifo`, on a stepping clock.
fn bulkhead(interval: Duration, lifo: bool) -> Arc<Bulkhead> {
    Arc::new(
        Bulkhead::with_clock(
            Config {
                max_concurrent: 1,
                max_queue: 4,
                queue_timeout: Duration::MAX,
                queue_delay_target: Duration::from_millis(1),
                queue_delay_interval: interval,
                adaptive_lifo: lifo,
                ..Config::DEFAULT
            },
            ClockSource::Shared(std::sync::Arc::new(Stepping(AtomicU64::new(1)))),
        )
        .unwrap(),
    )
}

fn granted(d: Decision<Arc<Bulkhead>, 0>) -> Call<Arc<Bulkhead>, 0> {
    match d {
        Decision::Granted(c) => c,
        other => panic!("{other:?}"),
    }
}

fn queued(b: &Arc<Bulkhead>) -> Waiter<Arc<Bulkhead>, 0> {
    match Bulkhead::admit_via(b.clone(), &Request::new(1), Some(&noop_waker())) {
        Decision::Queued(w) => w,
        other => panic!("{other:?}"),
    }
}

fn quiescent(b: &Bulkhead) {
    let s = b.stats();
    assert_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0), "{s}");
    assert_eq!(s.available, s.limit as i64, "{s}");
}

#[test]
fn loom_codel_shed_vs_the_waiters_cancel_settles_once() {
    // H holds; W1, W2 wait. H's release grants W1 (the first sojourn above target starts the
    // interval of 1 ms; the clock has moved on by a second at the next read). W1's release then
    // sheds W2 while W2's owner cancels it: exactly one wins — `shed` counted or `aborted`.
    model_at_most(3, || {
        let b = bulkhead(Duration::from_millis(1), false);
        let h = granted(Bulkhead::admit_via(b.clone(), &Request::new(1), None));
        let mut w1 = queued(&b);
        let w2 = queued(&b);
        drop(h);
        let c1 = match w1.poll(None) {
            Poll::Ready(Ok(c)) => c,
            other => panic!("W1 not granted: {other:?}"),
        };
        let t = thread::spawn(move || drop(c1));
        let shed_first = match w2.cancel(Reason::Aborted) {
            Cancelled::Cancelled(_) => false,
            Cancelled::Rejected(r) => {
                assert_eq!(r.reason, Reason::Shed);
                true
            }
            Cancelled::Granted(c) => panic!("granted past a standing queue: {c:?}"),
        };
        t.join().unwrap();
        let r = b.stats().rejected_by_reason;
        assert_eq!(r.get(Reason::Shed), u64::from(shed_first));
        assert_eq!(r.get(Reason::Aborted), u64::from(!shed_first));
        quiescent(&b);
    });
}

#[test]
fn loom_lifo_grant_of_the_newest_vs_its_cancel_settles_once() {
    // H holds; W1 then W2 wait, long past the target (LIFO), the interval an hour (no shed).
    // H's release grants the newest, W2, while W2's owner cancels: if the cancel wins, the
    // pass grants W1 instead; never both, never neither, never a shed.
    model_at_most(3, || {
        let b = bulkhead(Duration::from_secs(3600), true);
        let h = granted(Bulkhead::admit_via(b.clone(), &Request::new(1), None));
        let mut w1 = queued(&b);
        let w2 = queued(&b);
        let t = thread::spawn(move || drop(h));
        let got2 = match w2.cancel(Reason::Aborted) {
            Cancelled::Granted(c) => Some(c),
            Cancelled::Cancelled(_) => None,
            Cancelled::Rejected(r) => panic!("rejected {r:?}"),
        };
        t.join().unwrap();
        let got1 = match w1.poll(None) {
            Poll::Ready(Ok(c)) => Some(c),
            Poll::Pending => None,
            Poll::Ready(Err(e)) => panic!("W1 refused {e}"),
        };
        assert!(got1.is_some() != got2.is_some(), "exactly one granted");
        assert_eq!(b.stats().rejected_by_reason.get(Reason::Shed), 0);
        let had2 = got2.is_some();
        drop((got1, got2));
        if had2 {
            // W1 is granted by W2's release.
            match w1.poll(None) {
                Poll::Ready(Ok(c)) => drop(c),
                other => panic!("W1 stranded: {other:?}"),
            }
        } else {
            drop(w1);
        }
        quiescent(&b);
    });
}

#[test]
fn loom_codel_with_lifo_sheds_the_oldest_vs_its_cancel() {
    // LIFO on: H's release grants W3 (the newest) while CoDel judges W1 (the oldest) and starts
    // its interval. W3's release then sheds W1 — the oldest, not the pick — while W1's owner
    // cancels it: exactly one wins, W1 is never granted, and W2 settles either way.
    model_at_most(3, || {
        let b = bulkhead(Duration::from_millis(1), true);
        let h = granted(Bulkhead::admit_via(b.clone(), &Request::new(1), None));
        let w1 = queued(&b);
        let mut w2 = queued(&b);
        let mut w3 = queued(&b);
        drop(h);
        let c3 = match w3.poll(None) {
            Poll::Ready(Ok(c)) => c,
            other => panic!("W3 (the newest) not granted: {other:?}"),
        };
        let t = thread::spawn(move || drop(c3));
        let shed_first = match w1.cancel(Reason::Aborted) {
            Cancelled::Cancelled(_) => false,
            Cancelled::Rejected(r) => {
                assert_eq!(r.reason, Reason::Shed);
                true
            }
            Cancelled::Granted(c) => panic!("the oldest granted under LIFO: {c:?}"),
        };
        t.join().unwrap();
        // W2 is settled either way: granted, or shed too (the stepping clock makes the next
        // shed due at once).
        let w2_shed = match w2.poll(None) {
            Poll::Ready(Ok(c)) => {
                drop(c);
                false
            }
            Poll::Ready(Err(e)) if e.reason() == Some(Reason::Shed) => true,
            other => panic!("W2 left waiting: {other:?}"),
        };
        let r = b.stats().rejected_by_reason;
        assert_eq!(
            r.get(Reason::Shed),
            u64::from(shed_first) + u64::from(w2_shed)
        );
        assert_eq!(r.get(Reason::Aborted), u64::from(!shed_first));
        quiescent(&b);
    });
}
