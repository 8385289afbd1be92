//! Orphaning (docs/design.md §5.3): why [`Call::orphan`](crate::Call::orphan) refused.
//!
//! A call past its deadline whose work cannot be stopped (an upstream request already sent)
//! may hand its permits back so that the bulkhead serves others, while its budget units, its
//! outcome and its end stay with the call. Such calls are counted in `orphaned_in_flight` under
//! their own cap (`max_orphaned`), outside `active`: the work in flight may exceed the limit by
//! at most that cap — async-bulkhead-llm's `abandonBorrowedConcurrency` has no cap at all
//! (`../shared/research/ANCHORS-ADMISSION.md` §1.4).

use core::fmt;

/// Why [`Call::orphan`](crate::Call::orphan) refused; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanError {
    /// The call's permits.
    pub weight: u64,
    /// Permits orphaned now.
    pub in_flight: u64,
    /// The bulkhead's `max_orphaned` (0: orphaning is off).
    pub max: u64,
}

impl fmt::Display for OrphanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.max == 0 {
            f.write_str("orphaning is off on this bulkhead (max_orphaned is 0)")
        } else {
            write!(
                f,
                "max_orphaned is {}: {} orphaned permits in flight, {} more do not fit",
                self.max, self.in_flight, self.weight
            )
        }
    }
}

impl core::error::Error for OrphanError {}
