//! `hg_bulkhead_acquire_async`: queued acquires that settle through a C callback, and the timer
//! thread that arms their deadlines (the core owns no clock and no timer).
//!
//! Each queued acquire has one entry in `PENDING`, keyed by (bulkhead, ticket). Whoever settles
//! the ticket — the core's grant (through the `Waker` below), `hg_ticket_cancel`, the timer, a
//! close or a resize — takes the entry out, concludes the acquire's guarded call (DESIGN §4: a
//! grant marks it granted and moves it into the permit; a rejection ends it `ignored`) and runs
//! the callback, outside every lock. The core's one-winner CAS per ticket makes "exactly once"
//! hold; taking the entry is bookkeeping. Polling tickets (`hg_bulkhead_enqueue`) of a bulkhead
//! with policies keep their call in the same table, without a callback.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap},
    ffi::c_void,
    sync::{
        Arc, Condvar, LazyLock, Mutex, MutexGuard, Weak,
        atomic::{AtomicU8, Ordering::*},
    },
    task::{Wake, Waker},
    time::{Duration, Instant},
};

use hullguard_core::{Bulkhead as CoreBulkhead, CallStart, Outcome, Reason, Ticket, TicketPoll};

use crate::{
    handle::{PermitBox, hg_permit},
    status::hg_status,
};

/// The callback of a queued `hg_bulkhead_acquire_async`: runs exactly once, with
/// `HG_STATUS_OK` and a permit (now owned by the callee) on a grant, otherwise the rejection
/// status and NULL. It runs on the thread that settled the ticket and must not block or free
/// the owning bulkhead; it may call any non-blocking `hg_*` function, including releasing its
/// permit. `user_data` is passed back untouched (the callback releases it).
pub type hg_acquire_callback =
    Option<unsafe extern "C" fn(status: hg_status, permit: *mut hg_permit, user_data: *mut c_void)>;

struct Callback {
    f: unsafe extern "C" fn(hg_status, *mut hg_permit, *mut c_void),
    user_data: *mut c_void,
}

// SAFETY: the user data is the caller's, handed back to its callback exactly once; the C
// contract of `hg_bulkhead_acquire_async` makes it usable from the settling thread.
unsafe impl Send for Callback {}

/// The state of one queued acquire: its guarded call (DESIGN §4) and, for
/// `hg_bulkhead_acquire_async`, its callback. A polling ticket (`hg_bulkhead_enqueue`) has an
/// entry only when its bulkhead has policies.
struct Waiter {
    /// Keeps the bulkhead's allocation (not the bulkhead) alive while the entry exists, so its
    /// address — half of the key — cannot be reused by another bulkhead meanwhile.
    _core: Weak<CoreBulkhead>,
    /// Begun before admission; ended exactly once by whoever takes this entry.
    call: CallStart,
    cb: Option<Callback>,
}

type Key = (usize, u64);

static PENDING: LazyLock<Mutex<HashMap<Key, Waiter>>> = LazyLock::new(Default::default);

fn pending() -> MutexGuard<'static, HashMap<Key, Waiter>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(core: &Arc<CoreBulkhead>, t: Ticket) -> Key {
    (Arc::as_ptr(core) as usize, t.to_raw())
}

fn take(core: &Arc<CoreBulkhead>, t: Ticket) -> Option<Waiter> {
    pending().remove(&key(core, t))
}

/// How a queued acquire settled: the granted weight, or the rejection's reason.
pub(crate) type Settled = Result<u64, Reason>;

/// A ticket poll as a settlement (`None` while pending).
pub(crate) fn settled(p: TicketPoll) -> Option<Settled> {
    match p {
        TicketPoll::Pending => None,
        TicketPoll::Granted(w) => Some(Ok(w)),
        TicketPoll::Rejected(r) => Some(Err(r.reason)),
    }
}

/// Ends the guarded-call steps of a queued acquire that settled (DESIGN §4): a grant becomes a
/// permit whose call restarts its RTT clock at the grant; a rejection ends the call `ignored`.
fn conclude(
    core: &Arc<CoreBulkhead>,
    mut call: CallStart,
    s: Settled,
) -> Result<*mut hg_permit, Reason> {
    match s {
        Ok(w) => {
            core.mark_granted(&mut call);
            Ok(PermitBox::new(core.clone(), w, call).into_raw())
        }
        Err(r) => {
            core.end_call(call, Outcome::Ignored);
            Err(r)
        }
    }
}

/// A concluded acquire as the callback's arguments: `HG_STATUS_OK` and the permit, or the
/// reason's status and NULL.
pub(crate) fn status_of(r: Result<*mut hg_permit, Reason>) -> (hg_status, *mut hg_permit) {
    match r {
        Ok(permit) => (hg_status::HG_STATUS_OK, permit),
        Err(reason) => (reason.into(), std::ptr::null_mut()),
    }
}

/// Concludes `(core, t)` and runs its callback if it is still pending (outside the lock).
fn fire(core: &Arc<CoreBulkhead>, t: Ticket, s: Settled) {
    let w = take(core, t);
    let r = conclude(core, w.as_ref().map_or(CallStart::NONE, |w| w.call), s);
    match (w.and_then(|w| w.cb), r) {
        (Some(cb), r) => {
            let (status, permit) = status_of(r);
            // SAFETY: the function pointer and user data came from the caller of
            // `hg_bulkhead_acquire_async`, whose contract this is.
            unsafe { (cb.f)(status, permit, cb.user_data) }
        }
        // Nobody waits for it any more: never strand a permit.
        // SAFETY: `permit` was created just now by `conclude` and is owned here.
        (None, Ok(permit)) => unsafe { crate::handle::permit_free(permit) },
        (None, Err(_)) => {}
    }
}

/// Consumes a settled ticket and runs its callback. Returns `true` if it is still pending.
fn settle(core: &Arc<CoreBulkhead>, t: Ticket) -> bool {
    match core.poll_ticket(t, None).map(settled) {
        Ok(Some(s)) => {
            fire(core, t, s);
            false
        }
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Keeps the call of a freshly queued polling ticket (`hg_bulkhead_enqueue`) until it settles.
/// Nothing is stored for an inert call (a bulkhead without policies).
pub(crate) fn track(core: &Arc<CoreBulkhead>, t: Ticket, call: CallStart) {
    if call.is_tracked() {
        pending().insert(
            key(core, t),
            Waiter {
                _core: Arc::downgrade(core),
                call,
                cb: None,
            },
        );
    }
}

/// `hg_ticket_poll` consumed ticket `t` (settled `s`): concludes the call `track` kept (none,
/// and no lock taken, for a bulkhead without policies).
pub(crate) fn polled(
    core: &Arc<CoreBulkhead>,
    t: Ticket,
    s: Settled,
) -> Result<*mut hg_permit, Reason> {
    let call = if core.has_policies() {
        take(core, t).map_or(CallStart::NONE, |w| w.call)
    } else {
        CallStart::NONE
    };
    conclude(core, call, s)
}

/// The core wakes this when the ticket settles (on the settling thread, after the commit).
///
/// A wake can also mean "poll again": the core asks an owner to re-poll when its waker
/// registration collided with a concurrent take or clear of the same cell (for the cell's
/// previous ticket, say) and was not stored. A future would re-poll with its waker; this waker
/// does the same: if the ticket is still pending it registers itself again. That may collide
/// and wake this same waker again, re-entrantly or from another thread; `run` makes such a wake
/// only leave a note, and the one running loop goes round again, so this never recurses and
/// never drops a wake. (The note is per waker: a callback run from one waker may release a
/// permit whose grant wakes *another* waker on the same thread, which must run.)
struct CWake {
    core: Weak<CoreBulkhead>,
    ticket: Ticket,
    /// `IDLE`, `RUNNING`, or `RUNNING | AGAIN`.
    run: AtomicU8,
}

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const AGAIN: u8 = 2;

impl Wake for CWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Become the one running loop, or leave a note for it.
        if self.run.fetch_or(RUNNING | AGAIN, AcqRel) & RUNNING != 0 {
            return;
        }
        let Some(core) = self.core.upgrade() else {
            self.run.store(IDLE, Release);
            return;
        };
        loop {
            // Clear the note: wakes from here on ask for another round.
            self.run.store(RUNNING, Release);
            if settle(&core, self.ticket) {
                // Still pending: make sure our waker is registered for the grant. If the ticket
                // settled meanwhile, nobody else will take it: go round again.
                let waker = Waker::from(self.clone());
                if !matches!(
                    core.poll_ticket(self.ticket, Some(&waker)),
                    Ok(TicketPoll::Pending)
                ) {
                    continue;
                }
            }
            // Leave, unless a wake arrived during the round.
            if self
                .run
                .compare_exchange(RUNNING, IDLE, AcqRel, Acquire)
                .is_ok()
            {
                return;
            }
            // A registration collided with a peer's take or clear (a few instructions): let
            // it finish, then go round again.
            std::thread::yield_now();
        }
    }
}

/// What `register` found.
pub(crate) enum Registered {
    /// Pending: the callback will run exactly once.
    Queued,
    /// It settled before the waker was in place (no callback will run): the permit (its call
    /// concluded), or the rejection.
    Settled(Result<*mut hg_permit, Reason>),
}

/// Registers the callback, the call and the waker of a freshly queued ticket, and arms its
/// deadline.
pub(crate) fn register(
    core: &Arc<CoreBulkhead>,
    t: Ticket,
    call: CallStart,
    f: unsafe extern "C" fn(hg_status, *mut hg_permit, *mut c_void),
    user_data: *mut c_void,
    timeout: Duration,
) -> Registered {
    pending().insert(
        key(core, t),
        Waiter {
            _core: Arc::downgrade(core),
            call,
            cb: Some(Callback { f, user_data }),
        },
    );
    let waker = Waker::from(Arc::new(CWake {
        core: Arc::downgrade(core),
        ticket: t,
        run: AtomicU8::new(IDLE),
    }));
    let early = match core.poll_ticket(t, Some(&waker)) {
        Ok(p) => settled(p),
        // Stale: our own waker (woken during registration, on another thread) already took
        // the outcome and owns the callback. Report it as queued: the callback runs (or ran)
        // exactly once, and nothing is settled twice.
        Err(_) => None,
    };
    if let Some(s) = early {
        // This thread consumed the ticket, so the entry is still ours: drop it (no callback).
        take(core, t);
        return Registered::Settled(conclude(core, call, s));
    }
    if timeout != Duration::MAX {
        timer().arm(core, t, timeout);
    }
    Registered::Queued
}

/// `hg_ticket_cancel`: `true` if the cancel won (the callback ran with the reason's status; a
/// polling ticket's call ended `ignored`).
pub(crate) fn cancel(core: &Arc<CoreBulkhead>, t: Ticket, reason: Reason) -> bool {
    if core.cancel(t, reason).is_ok() {
        fire(core, t, Err(reason));
        true
    } else {
        false
    }
}

// ----- the timer thread ------------------------------------------------------------------------

struct Deadline {
    at: Instant,
    core: Weak<CoreBulkhead>,
    ticket: Ticket,
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Deadline {}
impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

/// One process-wide thread, started on first use, that cancels queued tickets as `timeout`
/// when their deadline passes. Settled tickets' deadlines are dropped lazily (their cancel
/// finds them stale).
struct Timer {
    heap: Mutex<BinaryHeap<Reverse<Deadline>>>,
    wake: Condvar,
}

static TIMER: LazyLock<Arc<Timer>> = LazyLock::new(|| {
    let t = Arc::new(Timer {
        heap: Mutex::new(BinaryHeap::new()),
        wake: Condvar::new(),
    });
    let worker = t.clone();
    std::thread::Builder::new()
        .name("hullguard-timer".into())
        .spawn(move || worker.run())
        .expect("spawn the hullguard timer thread");
    t
});

fn timer() -> &'static Timer {
    &TIMER
}

impl Timer {
    fn arm(&self, core: &Arc<CoreBulkhead>, ticket: Ticket, timeout: Duration) {
        let at = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        let earliest = heap.peek().is_none_or(|Reverse(d)| at < d.at);
        heap.push(Reverse(Deadline {
            at,
            core: Arc::downgrade(core),
            ticket,
        }));
        drop(heap);
        if earliest {
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            match heap.peek() {
                None => {
                    heap = self.wake.wait(heap).unwrap_or_else(|e| e.into_inner());
                }
                Some(Reverse(d)) if d.at > now => {
                    let wait = d.at - now;
                    heap = self
                        .wake
                        .wait_timeout(heap, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                Some(_) => {
                    let Some(Reverse(d)) = heap.pop() else {
                        continue;
                    };
                    drop(heap);
                    if let Some(core) = d.core.upgrade() {
                        // Outside the lock: the callback may arm another deadline.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            cancel(&core, d.ticket, Reason::Timeout)
                        }));
                    }
                    heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }
}
