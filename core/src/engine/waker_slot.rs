//! A waker slot tagged with the ticket it belongs to: one per ring cell.
//!
//! The idea is the `AtomicWaker` of futures/embassy (two state bits instead of a lock); the
//! ticket tag is ours: a cell is reused lap after lap, and a dispatcher that granted ticket `t`
//! must never take the waker that the cell's *next* owner (`t + capacity`) registered.
//!
//! ```text
//! `WakerSlot::state`:
//!   0 / HAS      idle: nobody is touching `waker` / `ticket`; HAS: `waker` holds a waker
//!   REGISTERING  the owner is writing its waker
//!   WAKING       the dispatcher is taking the waker out
//!   both         a take arrived while the owner registered: the owner wakes its own waker
//!                when it unlocks, so the wake is never lost
//! ```
//!
//! `HAS` changes only under a claim (REGISTERING or WAKING) and says whether `waker` is `Some`,
//! so an owner done with its cell (`clear`) reads one word and leaves when the slot is empty —
//! the common case, where the dispatcher took the waker to wake it (issue 15's RMW diet: two
//! CAS less a queued grant).
//! Neither side ever waits for the other: a side that finds the other bit set hands the job
//! over (the registerer wakes itself, the taker leaves), so the slot is lock-free.

use core::task::Waker;

use crate::sync::{AtomicWord, Ordering::*, UnsafeCell, Word};

const REGISTERING: Word = 1;
const WAKING: Word = 2;
/// `waker` is `Some` (changed only under a claim).
const HAS: Word = 4;
const CLAIMS: Word = REGISTERING | WAKING;

/// One cell's waker, tagged with its ticket.
#[derive(Debug)]
pub(crate) struct WakerSlot {
    state: AtomicWord,
    /// The ticket `waker` belongs to. Guarded by the state bits.
    ticket: UnsafeCell<Word>,
    /// Guarded by the state bits: written only under `REGISTERING`, taken only under `WAKING`.
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: `ticket` and `waker` are only accessed by the single thread that moved `state` from 0
// to REGISTERING or WAKING (an exclusive claim by CAS / fetch_or), and released with a Release
// RMW that the next claimant's Acquire reads; `Waker` is `Send + Sync`.
unsafe impl Sync for WakerSlot {}
// SAFETY: all fields are `Send` (`Waker` is `Send`).
unsafe impl Send for WakerSlot {}

impl WakerSlot {
    /// Claims an idle slot (state 0 or `HAS`) for `claim`, keeping `HAS`. `Err` when someone
    /// holds a claim. Acquire: pairs with the Release that ended the previous claim.
    #[inline]
    fn claim_idle(&self, claim: Word) -> Result<Word, Word> {
        let mut cur = self.state.load(Relaxed);
        loop {
            if cur & CLAIMS != 0 {
                return Err(cur);
            }
            match self
                .state
                .compare_exchange_weak(cur, cur | claim, Acquire, Relaxed)
            {
                Ok(prev) => return Ok(prev),
                Err(actual) => cur = actual,
            }
        }
    }

    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            state: AtomicWord::new(0),
            ticket: UnsafeCell::new(0),
            waker: UnsafeCell::new(None),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicWord::new(0),
            ticket: UnsafeCell::new(0),
            waker: UnsafeCell::new(None),
        }
    }

    /// The owner of ticket `t` stores `waker` (a clone, unless the stored one already wakes the
    /// same task). If a take races with it, `waker` is woken at once, so the caller's re-check of
    /// the cell can never miss a grant.
    pub(crate) fn register(&self, t: Word, waker: &Waker) {
        // Acquire: pairs with the Release that ended the previous claim (its writes visible).
        match self.claim_idle(REGISTERING) {
            Ok(idle) => {
                // SAFETY: we hold REGISTERING; see the `Sync` impl.
                let old = unsafe {
                    self.ticket.with_mut(|p| {
                        let same_ticket = *p == t;
                        *p = t;
                        same_ticket
                    })
                };
                // SAFETY: as above.
                let replaced = self.waker.with_mut(|p| unsafe {
                    match &*p {
                        Some(w) if old && w.will_wake(waker) => None,
                        _ => (*p).replace(waker.clone()),
                    }
                });
                // AcqRel: Release publishes the waker to the next taker; Acquire (on failure)
                // sees a concurrent taker's claim.
                match self
                    .state
                    .compare_exchange(idle | REGISTERING, HAS, AcqRel, Acquire)
                {
                    Ok(_) => {}
                    Err(_) => {
                        // A take arrived while we registered; it left the waker to us.
                        // SAFETY: we still hold REGISTERING (the taker only set WAKING).
                        let mine = self.waker.with_mut(|p| unsafe { (*p).take() });
                        self.state.store(0, Release);
                        if let Some(w) = mine {
                            w.wake();
                        }
                    }
                }
                // Dropped outside the claim: a waker's drop may run arbitrary code.
                drop(replaced);
            }
            // A take is in progress (or, by misuse, another registration): make the owner poll
            // again rather than risk a lost wake-up.
            Err(_) => waker.wake_by_ref(),
        }
    }

    /// The dispatcher takes ticket `t`'s waker to wake it after the state change is committed.
    /// Returns `None` if the slot holds another ticket's waker, or if the owner is registering
    /// (it then wakes itself).
    pub(crate) fn take(&self, t: Word) -> Option<Waker> {
        // AcqRel: Acquire pairs with the registerer's Release unlock (we see its waker);
        // Release orders our earlier stamp change before the owner's next claim.
        let prev = self.state.fetch_or(WAKING, AcqRel);
        if prev & CLAIMS != 0 {
            return None;
        }
        // SAFETY: we moved the state from idle to WAKING: exclusive access.
        let w = unsafe { self.ticket.with_mut(|p| *p == t) }
            .then(|| {
                // SAFETY: as above.
                self.waker.with_mut(|p| unsafe { (*p).take() })
            })
            .flatten();
        // Release: hands the slot back (empty if we took its waker); a registerer that failed
        // meanwhile woke itself. A store, not an RMW: while WAKING is held nobody else writes
        // the state (a registration or a clear that meets a claim leaves without writing).
        self.state
            .store(if w.is_some() { 0 } else { prev }, Release);
        w
    }

    /// The owner of ticket `t` is done with the cell: drop its waker if the slot is free now.
    /// If a take is in flight the waker is left for it (or for the next registration).
    ///
    /// A late `clear` (its owner was preempted after cancelling, while the cell was swept and
    /// reused) may hold the lock exactly when the dispatcher takes the *next* ticket's waker;
    /// that take then leaves the wake to the lock holder, as it does for a registration. So if
    /// a take arrived meanwhile, this wakes whatever waker the slot holds (at worst a spurious
    /// wake-up, which every owner tolerates).
    pub(crate) fn clear(&self, t: Word) {
        // Empty (the dispatcher took the waker, or none was registered): nothing to drop. Our
        // own registration set HAS before this load, and only a take that emptied the slot
        // clears it.
        if self.state.load(Acquire) & HAS == 0 {
            return;
        }
        let Ok(idle) = self.claim_idle(REGISTERING) else {
            return;
        };
        // SAFETY: we hold REGISTERING.
        let mine = unsafe { self.ticket.with_mut(|p| *p == t) };
        // SAFETY: as above.
        let ours = mine
            .then(|| self.waker.with_mut(|p| unsafe { (*p).take() }))
            .flatten();
        // AcqRel: as in `register`. Failure means a take arrived and left the wake to us.
        // SAFETY: we hold REGISTERING.
        let left = if self.waker.with_mut(|p| unsafe { (*p).is_some() }) {
            HAS
        } else {
            0
        };
        let orphan = match self
            .state
            .compare_exchange(idle | REGISTERING, left, AcqRel, Acquire)
        {
            Ok(_) => None,
            Err(_) => {
                // SAFETY: we still hold REGISTERING (the taker only set WAKING).
                let w = self.waker.with_mut(|p| unsafe { (*p).take() });
                self.state.store(0, Release);
                w
            }
        };
        drop(ours);
        if let Some(w) = orphan {
            w.wake();
        }
    }
}
