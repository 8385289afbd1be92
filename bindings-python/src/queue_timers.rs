//! Queue deadlines on one loop timer (docs/design.md §10.1): every queued waiter of every
//! bulkhead on an event loop shares one `loop.call_at` handle, armed for the earliest deadline
//! and re-armed when it fires — instead of one `call_later` timer (and its cancel) per waiter.
//!
//! asyncio loops are bound to a thread, so the deadlines live in a thread-local, for the loop
//! running on that thread. A deadline is `(loop.time() at enqueue + queue timeout, bulkhead,
//! ticket)`; when it passes, the timer asks the core to expire the ticket (`Bulkhead::expire`,
//! which settles it `timeout` and wakes its owner, or answers stale for a ticket that settled
//! first — so entries are never removed early, only dropped when due or when the heap is
//! compacted). Compaction keeps memory in the order of the live waiters: when the heap has grown
//! past twice what the last compaction kept, plus 64, the settled deadlines are dropped (a
//! ticket is live while the core still shows it queued; `Bulkhead::is_queued`, one load). No
//! admission decision is made here.

use std::{
    cell::RefCell,
    cmp::{Ordering, Reverse},
    collections::BinaryHeap,
    sync::{Arc, Weak},
    time::Duration,
};

use hullguard_core::{Bulkhead as CoreBulkhead, Reason, Ticket};
use pyo3::{intern, prelude::*, types::PyCFunction};

/// One queued waiter's deadline.
struct Deadline {
    /// `loop.time()` seconds.
    at: f64,
    /// Arrival order (ties).
    seq: u64,
    /// Weak: a pending deadline must not keep a registry key's bulkhead alive (a granted
    /// waiter's entry stays until it is due or compacted; a strong reference would block the
    /// key's eviction until then). A bulkhead that is gone has no waiter left to expire.
    bh: Weak<CoreBulkhead>,
    ticket: Ticket,
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Deadline {}
impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.total_cmp(&other.at).then(self.seq.cmp(&other.seq))
    }
}

/// The deadlines of the waiters queued from this thread's running loop.
struct LoopTimers {
    event_loop: Py<PyAny>,
    heap: BinaryHeap<Reverse<Deadline>>,
    /// How many deadlines the last compaction kept (the next runs past twice that, plus 64).
    kept: usize,
    seq: u64,
    /// The armed `TimerHandle` and the deadline it fires at.
    armed: Option<(Py<PyAny>, f64)>,
}

thread_local! {
    static TIMERS: RefCell<Option<LoopTimers>> = const { RefCell::new(None) };
}

/// Schedules waiter `ticket` of `bh` to be expired `timeout` after now on `event_loop` (which
/// runs on this thread). A timeout of `Duration::MAX` has no deadline.
pub(crate) fn schedule(
    py: Python<'_>,
    event_loop: &Bound<'_, PyAny>,
    bh: &Arc<CoreBulkhead>,
    ticket: Ticket,
    timeout: Duration,
) -> PyResult<()> {
    if timeout == Duration::MAX {
        return Ok(());
    }
    let now: f64 = event_loop.call_method0(intern!(py, "time"))?.extract()?;
    let at = now + timeout.as_secs_f64();
    TIMERS.with(|cell| {
        let mut slot = cell.borrow_mut();
        // A new loop on this thread (`asyncio.run` again): the old one's deadlines went with it.
        if slot
            .as_ref()
            .is_none_or(|t| !t.event_loop.bind(py).is(event_loop))
        {
            if let Some(old) = slot.take() {
                if let Some((h, _)) = old.armed {
                    drop(h.bind(py).call_method0(intern!(py, "cancel")));
                }
            }
            *slot = Some(LoopTimers {
                event_loop: event_loop.clone().unbind(),
                heap: BinaryHeap::new(),
                kept: 0,
                seq: 0,
                armed: None,
            });
        }
        let t = slot.as_mut().expect("set above");
        t.seq += 1;
        t.heap.push(Reverse(Deadline {
            at,
            seq: t.seq,
            bh: Arc::downgrade(bh),
            ticket,
        }));
        if t.heap.len() > 2 * t.kept + 64 {
            // Amortized O(1): a compaction at most once per doubling of what it kept.
            t.heap
                .retain(|Reverse(d)| d.bh.upgrade().is_some_and(|bh| bh.is_queued(d.ticket)));
            t.kept = t.heap.len();
        }
        arm(py, t)
    })
}

/// Arms (or re-arms earlier) the loop timer for the earliest deadline.
fn arm(py: Python<'_>, t: &mut LoopTimers) -> PyResult<()> {
    let Some(Reverse(first)) = t.heap.peek() else {
        return Ok(());
    };
    let at = first.at;
    if t.armed
        .as_ref()
        .is_some_and(|(_, armed_at)| *armed_at <= at)
    {
        return Ok(());
    }
    if let Some((h, _)) = t.armed.take() {
        drop(h.bind(py).call_method0(intern!(py, "cancel")));
    }
    let fire = PyCFunction::new_closure(py, None, None, move |args, _kwargs| -> PyResult<()> {
        fire(args.py(), at)
    })?;
    let handle = t
        .event_loop
        .bind(py)
        .call_method1(intern!(py, "call_at"), (at, fire))?;
    t.armed = Some((handle.unbind(), at));
    Ok(())
}

/// The loop timer armed for `armed_at` fired: expires every waiter whose deadline passed — by
/// the loop's clock, or up to the deadline this timer was armed for, as its own timer would
/// have — (a settled one answers stale and is left alone), then re-arms for the next deadline.
fn fire(py: Python<'_>, armed_at: f64) -> PyResult<()> {
    // The due deadlines are taken out first: `expire` wakes their owners, whose code must not
    // meet this thread-local borrowed.
    let due = TIMERS.with(|cell| -> PyResult<Vec<Deadline>> {
        let mut slot = cell.borrow_mut();
        let Some(t) = slot.as_mut() else {
            return Ok(Vec::new());
        };
        // A stale handle (re-armed earlier since) leaves the armed one in place.
        if t.armed.as_ref().is_some_and(|(_, at)| *at == armed_at) {
            t.armed = None;
        }
        let now: f64 = t
            .event_loop
            .bind(py)
            .call_method0(intern!(py, "time"))?
            .extract()?;
        let due_by = now.max(armed_at);
        let mut due = Vec::new();
        while t.heap.peek().is_some_and(|Reverse(d)| d.at <= due_by) {
            let Reverse(d) = t.heap.pop().expect("peeked");
            due.push(d);
        }
        Ok(due)
    })?;
    for d in due {
        if let Some(bh) = d.bh.upgrade() {
            let _settled_first = bh.expire(d.ticket, Reason::Timeout);
        }
    }
    TIMERS.with(|cell| match cell.borrow_mut().as_mut() {
        Some(t) => arm(py, t),
        None => Ok(()),
    })
}
