//! Loom models of the waker slot (`engine::waker_slot`, docs/design.md §4.3) with wakers that
//! count: a wake is never lost (a registration racing a take wakes itself, and a grant made
//! before the registration is seen by the owner's re-check), a waker is never leaked or dropped
//! twice (its reference count is back to one once the slot is dropped), and the owner's `clear` after a grant
//! — one load when the dispatcher took the waker — drops exactly what is left.

use std::{sync::Arc, task::Wake};

use loom::{
    sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst},
    thread,
};

use crate::engine::waker_slot::WakerSlot;

struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn counting() -> (Arc<Counting>, std::task::Waker) {
    let c = Arc::new(Counting(AtomicUsize::new(0)));
    let w = std::task::Waker::from(c.clone());
    (c, w)
}

/// The dispatcher's side: commits ticket `t`'s grant (`granted`), then takes and wakes its
/// waker, as a pass does.
fn dispatcher(
    slot: &Arc<WakerSlot>,
    granted: &Arc<AtomicBool>,
    t: crate::sync::Word,
) -> thread::JoinHandle<()> {
    let (slot, granted) = (slot.clone(), granted.clone());
    thread::spawn(move || {
        granted.store(true, SeqCst);
        if let Some(w) = slot.take(t) {
            w.wake();
        }
    })
}

#[test]
fn loom_waker_slot_take_vs_clear_after_the_grant() {
    // The owner saw its grant and clears while the dispatcher takes: exactly one of them
    // ends up with the waker (woken at most once), none is leaked.
    loom::model(|| {
        let slot = Arc::new(WakerSlot::new());
        let (count, waker) = counting();
        slot.register(1, &waker);
        drop(waker);
        let d = dispatcher(&slot, &Arc::new(AtomicBool::new(false)), 1);
        slot.clear(1);
        d.join().unwrap();
        assert!(count.0.load(SeqCst) <= 1);
        // One of them took it: the slot holds nothing of the finished ticket.
        assert_eq!(
            Arc::strong_count(&count),
            1,
            "the finished ticket's waker stayed"
        );
        drop(slot);
    });
}

#[test]
fn loom_waker_slot_register_vs_take_never_loses_the_wake() {
    // The grant (a flag here, the cell's stamp in the engine) is committed before the take;
    // the owner registers, then re-checks it. It sees the grant or is woken.
    loom::model(|| {
        let slot = Arc::new(WakerSlot::new());
        let granted = Arc::new(AtomicBool::new(false));
        let (count, waker) = counting();
        let d = dispatcher(&slot, &granted, 1);
        slot.register(1, &waker);
        let saw = granted.load(SeqCst);
        d.join().unwrap();
        assert!(saw || count.0.load(SeqCst) >= 1, "lost wake-up");
        slot.clear(1);
        drop(waker);
        assert_eq!(
            Arc::strong_count(&count),
            1,
            "the finished ticket's waker stayed"
        );
        drop(slot);
    });
}

#[test]
fn loom_waker_slot_late_clear_vs_the_next_owner() {
    // A late clear of ticket 1 (its cell already reused) races the next owner's registration
    // (ticket 2) and the dispatcher's take of ticket 2: ticket 1's waker is dropped, ticket 2's
    // owner sees its grant or is woken, and nothing leaks.
    loom::model(|| {
        let slot = Arc::new(WakerSlot::new());
        let (first, w1) = counting();
        slot.register(1, &w1);
        drop(w1);
        let granted = Arc::new(AtomicBool::new(false));
        let (second, w2) = counting();
        let d = dispatcher(&slot, &granted, 2);
        let late = {
            let slot = slot.clone();
            thread::spawn(move || slot.clear(1))
        };
        slot.register(2, &w2);
        let saw = granted.load(SeqCst);
        d.join().unwrap();
        late.join().unwrap();
        assert!(
            saw || second.0.load(SeqCst) >= 1,
            "lost wake-up of the next owner"
        );
        slot.clear(2);
        // A finished ticket's waker may linger until the cell's next registration replaces it
        // or the slot is dropped (bounded: one per cell); dropping the slot shows any leak.
        drop((w2, slot));
        assert_eq!(Arc::strong_count(&first), 1, "ticket 1's waker leaked");
        assert_eq!(Arc::strong_count(&second), 1, "ticket 2's waker leaked");
    });
}
