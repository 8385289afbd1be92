//! Loom models of orphaning (docs/design.md §5.3): the cap's reservation is one CAS, so two
//! calls orphaning at once never pass `max_orphaned`; an orphan's returned permit races a
//! waiter's cancel with exactly one winner, and the gauge empties when the orphan ends.

use loom::thread;

use super::{
    loom_budget::{admit, granted, queued},
    loom_bulkhead::{model_at_most, static_bh},
};
use crate::{Cancelled, Config, Reason};

fn bh(max_concurrent: u64, max_orphaned: u64) -> loom::sync::Arc<super::loom_bulkhead::Bh> {
    static_bh(Config {
        max_concurrent,
        max_queue: 2,
        max_orphaned,
        budget: Some(10),
        ..Config::DEFAULT
    })
}

#[test]
fn loom_orphan_cap_is_never_passed() {
    // Two calls of one permit each orphan at once under max_orphaned 1: exactly one wins.
    model_at_most(3, || {
        let b = bh(2, 1);
        let (mut h1, mut h2) = (granted(admit(&b, 1, 0)), granted(admit(&b, 1, 0)));
        let t = thread::spawn(move || {
            let won = h1.orphan().is_ok();
            (h1, won)
        });
        let won2 = h2.orphan().is_ok();
        let (h1, won1) = t.join().unwrap();
        assert!(won1 ^ won2, "both or neither orphaned: {won1} {won2}");
        let s = b.stats();
        assert_eq!((s.orphaned_in_flight, s.active, s.available), (1, 1, 1));
        drop((h1, h2));
        let s = b.stats();
        assert_eq!((s.orphaned_in_flight, s.active, s.available), (0, 0, 2));
    });
}

#[test]
fn loom_orphan_vs_cancel_of_the_waiter_it_frees() {
    // Limit 1: H holds, W queued. H orphans (its permit goes to W) while W's owner cancels:
    // W ends granted or cancelled, never both; then H's work ends and everything is back.
    model_at_most(3, || {
        let b = bh(1, 1);
        let mut h = granted(admit(&b, 1, 0));
        let w = queued(admit(&b, 1, 0));
        let t = thread::spawn(move || {
            assert!(h.orphan().unwrap());
            h
        });
        let got = match w.cancel(Reason::Aborted) {
            Cancelled::Granted(c) => Some(c),
            Cancelled::Cancelled(_) => None,
            Cancelled::Rejected(r) => panic!("rejected {r:?}"),
        };
        let h = t.join().unwrap();
        let s = b.stats();
        assert_eq!(s.orphaned_in_flight, 1);
        assert_eq!(s.active, u64::from(got.is_some()), "{s}");
        drop(got);
        assert_eq!(
            b.stats().available,
            1,
            "the orphan's permit came back either way"
        );
        drop(h);
        let s = b.stats();
        assert_eq!(
            (s.orphaned_in_flight, s.active, s.queued, s.available),
            (0, 0, 0, 1)
        );
    });
}
