//! One handle's local queue (docs/design.md §14.3): a core [`Bulkhead`] of one permit — the
//! right to be this handle's head, which waits for the host-wide turn — with the handle's
//! `max_queue` and its close flag. Each [`HostBulkhead`](crate::HostBulkhead) handle has its
//! own (closing one handle leaves the process's other handles, worker threads and loops
//! alone); a forked child gets a fresh one with its fresh attachment.

use std::{
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hullguard_core::{Bulkhead, Config};

use crate::{attachment::Attachment, error::HostError};

/// A handle's local queue over its process's attachment.
#[derive(Debug)]
pub(crate) struct LocalQueue {
    /// The process's attachment.
    pub(crate) a: &'static Attachment,
    /// One permit: this handle's head. Its queue holds `max_queue − 1` more.
    pub(crate) gate: Bulkhead,
    /// Waiters this handle may have, its head included (0 = never queue).
    pub(crate) max_queue: u64,
    closed: AtomicBool,
}

impl LocalQueue {
    pub(crate) fn new(
        a: &'static Attachment,
        max_queue: u64,
        queue_timeout: Duration,
    ) -> Result<Self, HostError> {
        let gate = Bulkhead::new(Config {
            max_concurrent: 1,
            max_queue: max_queue.saturating_sub(1),
            queue_timeout,
            ..Config::default()
        })
        .map_err(|e| HostError::Option {
            option: "max_queue",
            message: e.to_string(),
        })?;
        Ok(LocalQueue {
            a,
            gate,
            max_queue,
            closed: AtomicBool::new(false),
        })
    }

    /// Whether this handle was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes this handle: new requests and its waiters get `shutdown`; its head wakes.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.gate.close();
        self.a.ring(self.a.slot);
    }
}

/// An owning reference to a handle's queue that derefs to its gate (what the core's `Waiter`
/// and `Call` hold, so a future or a head outlives the handle safely).
#[derive(Debug, Clone)]
pub(crate) struct GateRef(pub(crate) Arc<LocalQueue>);

impl Deref for GateRef {
    type Target = Bulkhead;

    fn deref(&self) -> &Bulkhead {
        &self.0.gate
    }
}
