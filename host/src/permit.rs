//! [`HostPermit`] and what makes one (docs/design.md §14.3): a grant counted and a rejection
//! with the host's snapshot, and the published ticket of a waiting request.

use std::{sync::atomic::Ordering, time::Instant};

use hullguard_core::{
    AcquireError, DimensionSnapshot, Reason, Rejection, Request, Snapshot, WaitHistogram,
};

use crate::{
    attachment::Attachment,
    error::{HostError, LeaseError},
    layout::{h, s},
    queue::LocalQueue,
};

/// Counts a grant and makes its permit (chain-waking the next head after a queued one).
#[inline]
pub(crate) fn granted(
    q: &LocalQueue,
    generation: u64,
    request: &Request,
    queued_since: Option<Instant>,
) -> HostPermit {
    let a = q.a;
    let seg = a.seg();
    seg.slot_word(a.slot, s::ADMITTED)
        .fetch_add(1, Ordering::Relaxed);
    if let Some(since) = queued_since {
        let ns = since.elapsed().as_nanos() as u64;
        seg.count(h::QUEUE_WAIT_COUNT, 1);
        seg.count(h::QUEUE_WAIT_SUM_NS, ns);
        seg.header(h::QUEUE_WAIT_MAX_NS)
            .fetch_max(ns, Ordering::Relaxed);
        seg.count(h::QUEUE_WAIT_HISTOGRAM + WaitHistogram::bucket_of(ns), 1);
        // Capacity may remain for the next head (a chain wake).
        a.ring_head();
    }
    HostPermit {
        a,
        generation,
        weight: request.weight,
        cost: request.cost,
        done: false,
    }
}

/// A rejection with the host's figures, counted.
pub(crate) fn reject(a: &Attachment, max_queue: u64, reason: Reason) -> HostError {
    a.count_rejection(reason);
    let scan = a.seg().scan();
    let c = a.seg().config();
    HostError::Acquire(AcquireError::Rejected(Rejection::new(
        reason,
        Snapshot {
            active: scan.permits,
            queued: scan.queued,
            limit: c.max_concurrent,
            available: c.max_concurrent as i64 - scan.permits as i64,
            revision: 0,
            max_queue,
            queued_cost: 0,
            budget: (c.budget > 0).then(|| DimensionSnapshot {
                limit: c.budget,
                in_use: scan.cost,
                available: c.budget as i64 - scan.cost as i64,
            }),
        },
    )))
}

/// A published ticket: withdrawn (and the next head rung) however the wait ends.
pub(crate) struct Ticket {
    a: &'static Attachment,
    /// The ticket.
    pub(crate) t: u64,
}

impl Ticket {
    pub(crate) fn take(a: &'static Attachment) -> Ticket {
        Ticket { a, t: a.enqueue() }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // A ticket inherited across `fork` is the parent's: withdrawing it here would rewrite
        // the parent's published head and queue count in the shared segment.
        if self.a.is_own() {
            self.a.dequeue(self.t);
        }
    }
}

/// Permits held on a [`HostBulkhead`]: released by [`release`](Self::release) or on drop.
///
/// It carries its lease's generation: a release after the lease was expired (the process was
/// stopped past the TTL) is refused [`LeaseError::Stale`] and changes nothing; one in a
/// forked child is refused [`LeaseError::Foreign`].
#[derive(Debug)]
#[must_use = "dropping a permit releases it at once"]
pub struct HostPermit {
    pub(crate) a: &'static Attachment,
    pub(crate) generation: u64,
    pub(crate) weight: u64,
    pub(crate) cost: u64,
    pub(crate) done: bool,
}

impl HostPermit {
    /// Permits held.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// Budget units held.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Releases the permits.
    ///
    /// # Errors
    /// [`LeaseError::Stale`]: the lease expired or was reclaimed first (the permits were already
    /// returned; nothing is released twice). [`LeaseError::Foreign`]: acquired by a parent
    /// process before `fork`.
    pub fn release(mut self) -> Result<(), LeaseError> {
        self.release_once()
    }

    /// Releases by reference (for bindings that hold the permit in a cell):
    /// [`LeaseError::AlreadyReleased`] the second time.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub fn release_in_place(&mut self) -> Result<(), LeaseError> {
        self.release_once()
    }

    /// Whether it was released.
    pub fn is_released(&self) -> bool {
        self.done
    }

    #[inline]
    fn release_once(&mut self) -> Result<(), LeaseError> {
        if self.done {
            return Err(LeaseError::AlreadyReleased);
        }
        self.done = true;
        let a = self.a;
        if !a.is_own() {
            a.seg().count(h::FOREIGN_RELEASES, 1);
            return Err(LeaseError::Foreign);
        }
        let seg = a.seg();
        match seg.release(a.slot, self.generation, self.weight, self.cost) {
            Ok(()) => {
                a.ring_head();
                Ok(())
            }
            Err(_) => {
                seg.count(h::STALE_RELEASES, 1);
                Err(LeaseError::Stale)
            }
        }
    }
}

impl Drop for HostPermit {
    fn drop(&mut self) {
        if !self.done && self.a.is_own() {
            let _ = self.release_once();
        }
    }
}
