//! Loom model of the reservation table's protocol step (docs/design.md §5.8): a commit races
//! the sweep of its expired slot and a new reservation that may reuse the slot. Exactly one of
//! commit and sweep takes the reservation; its units return exactly once; the reuse never
//! disturbs the old handle.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use loom::{sync::Arc, thread};

use crate::Reservation;

use super::loom_bulkhead::model_at_most;
use crate::{Bulkhead, ClockSource, Config, Request};

#[test]
fn loom_reservation_commit_vs_expiry_settles_once() {
    static SEEN: [AtomicBool; 2] = [const { AtomicBool::new(false) }; 2];
    model_at_most(3, || {
        // No clock: now is 0, so a TTL of 0 is due at once.
        let b = Arc::new(
            Bulkhead::with_clock(
                Config {
                    max_concurrent: 2,
                    max_queue: 0,
                    max_reservations: 1,
                    ..Config::DEFAULT
                },
                ClockSource::None,
            )
            .unwrap(),
        );
        let r: Reservation<Arc<Bulkhead>, 0> =
            Bulkhead::reserve_via(b.clone(), &Request::new(1), core::time::Duration::ZERO).unwrap();
        let sweeper = {
            let b = b.clone();
            thread::spawn(move || {
                let n = b.expire_reservations();
                // The slot may be reused at once by a new reservation (kept, then dropped).
                let again = b.reserve(&Request::new(1), core::time::Duration::MAX).ok();
                drop(again);
                n
            })
        };
        let committed = r.commit().ok().map(drop).is_some();
        let expired = sweeper.join().unwrap();
        assert_eq!(u64::from(committed) + expired, 1, "taken exactly once");
        let s = b.stats();
        assert_eq!(
            (s.active, s.available, s.reservations_held),
            (0, 2, 0),
            "{s}"
        );
        assert_eq!(s.reservations_expired_total, expired);
        SEEN[usize::from(committed)].store(true, Relaxed);
    });
    let seen = SEEN.each_ref().map(|b| b.load(Relaxed));
    assert_eq!(seen, [true, true], "[expired, committed] explored");
}
