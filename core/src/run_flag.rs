//! A run flag: lets one thread at a time do some work on behalf of everyone, without making
//! anyone wait — the "dispatching" and "work pending" flags of docs/design.md §4.3. The engine's
//! dispatcher and the adaptive controller's sample feed use it.
//!
//! Every caller with work calls [`RunFlag::enter`]. Whoever finds the flag taken only leaves
//! `PENDING` behind and returns at once; the runner clears `PENDING` before each pass and
//! re-checks it before it leaves, so no request is lost and no caller ever waits. A preempted
//! runner delays the work (documented), never other callers.

use crate::sync::{AtomicWord, Ordering::*, Word};

const RUNNING: Word = 1;
const PENDING: Word = 2;

/// The runner's two flags.
#[derive(Debug)]
pub(crate) struct RunFlag {
    state: AtomicWord,
}

impl RunFlag {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            state: AtomicWord::new(0),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicWord::new(0),
        }
    }

    /// Announces work. Returns `true` if the caller became the runner: it then runs a first
    /// pass at once (no [`begin_pass`](Self::begin_pass) needed) and calls
    /// [`try_leave`](Self::try_leave) / `begin_pass` after each.
    ///
    /// One RMW in the common cases: idle → `RUNNING`, or running → `RUNNING | PENDING`. The
    /// state "`PENDING` without `RUNNING`" never exists, so a request is never left unserved.
    #[inline]
    pub(crate) fn enter(&self) -> bool {
        let mut cur = self.state.load(Relaxed);
        loop {
            if cur & RUNNING == 0 {
                // Idle: become the runner. AcqRel: Acquire makes us see the previous runner's
                // writes and every requester's (their RMWs form one release sequence on this
                // word); Release is irrelevant here but keeps the pairing symmetric.
                match self
                    .state
                    .compare_exchange_weak(cur, RUNNING, AcqRel, Relaxed)
                {
                    Ok(_) => return true,
                    Err(actual) => cur = actual,
                }
            } else {
                // Running: leave work behind. Always an RMW, even when PENDING is already set:
                // the runner's next `begin_pass` / `try_leave` must synchronize with *our*
                // Release, or it could miss the state change we made before calling this.
                let prev = self.state.fetch_or(PENDING, AcqRel);
                if prev & RUNNING != 0 {
                    return false;
                }
                // The runner left in between: PENDING is set with nobody running; take over.
                cur = prev | PENDING;
            }
        }
    }

    /// Becomes the runner only if nobody is running (one CAS); leaves nothing behind when it
    /// fails. For callers with a cheaper path when uncontended (they must then announce their
    /// work through [`enter`](Self::enter)).
    pub(crate) fn try_enter_idle(&self) -> bool {
        // AcqRel: as in `enter`.
        self.state
            .compare_exchange(0, RUNNING, AcqRel, Relaxed)
            .is_ok()
    }

    /// Runner: gives the flag up whatever is pending (a classed bulkhead's dispatcher, before
    /// it wakes: docs/design.md §4.8). The caller then enters again if work may be left, so a
    /// request pending now is served by it or by whoever entered first.
    #[cfg(feature = "alloc")]
    pub(crate) fn leave(&self) {
        self.state.swap(0, AcqRel);
    }

    /// Runner, before a second or later pass: clears `PENDING`; requests made after this are
    /// seen by a later pass.
    pub(crate) fn begin_pass(&self) {
        // AcqRel RMW (not a store): it reads every requester's Release CAS, so this pass sees
        // their state changes.
        self.state.swap(RUNNING, AcqRel);
    }

    /// Runner: leaves if nothing is pending. `false` means a request arrived during the pass:
    /// run another.
    pub(crate) fn try_leave(&self) -> bool {
        self.state
            .compare_exchange(RUNNING, 0, AcqRel, Acquire)
            .is_ok()
    }
}
