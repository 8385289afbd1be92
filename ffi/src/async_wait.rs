//! `hg_bulkhead_acquire_async`: queued acquires that settle through a C callback, and the timer
//! thread that arms their deadlines (the core owns no clock and no timer).
//!
//! The `Waker` registered with the ticket (a [`CWake`]) owns the callback and its user data.
//! Whoever settles the ticket — a grant, a close, a resize, or a third party's
//! `Bulkhead::expire` (the timer thread, `hg_ticket_cancel`) — wakes it; the waker polls its
//! ticket through the core's `Waiter` and, once it settled, runs the callback exactly once with
//! the permit (a core `Call`) or the rejection. The call state travels in the ring cell.
//!
//! A cancel needs more than a wake. Its contract (docs/design.md § C ABI; C callers free the
//! user data right after a won cancel): `HG_STATUS_OK` when the cancel won — the callback has
//! already run, with `HG_STATUS_ABORTED` (`HG_STATUS_TIMEOUT` for `hg_ticket_cancel_reason`
//! with the timeout reason), on the cancelling thread, before it returns;
//! `HG_STATUS_ALREADY_SETTLED` when a grant, timeout or close won (its callback runs, or has
//! run, with that outcome). The expiry's wake cannot promise the first: another thread may hold
//! the waker's running loop at that moment (re-registering after a spurious wake-up) and would
//! deliver, possibly after the cancel returned. So [`cancel`] finds the ticket's waker in a side
//! table ([`ASYNC`]) and marks it `cancelling` around its expiry; while marked, a runner that
//! polls a *rejection* leaves it with the waker (`deferred`) and the canceller delivers it. A
//! grant is never deferred (it cannot be the cancel's outcome; its runner delivers it at once).
//!
//! Async tickets carry [`ASYNC_TAG`] (the top bit) in the `hg_ticket` the caller sees, so the
//! cancel functions tell them from polling tickets (`hg_bulkhead_enqueue`).

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap},
    ffi::c_void,
    sync::{
        Arc, Condvar, LazyLock, Mutex, MutexGuard, Weak,
        atomic::{AtomicU8, Ordering::*},
    },
    task::{Poll, Wake, Waker},
    time::{Duration, Instant},
};

use hullguard_core::{AcquireError, Bulkhead as CoreBulkhead, OwnedPermit, Reason, Ticket, Waiter};

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

/// The tag bit of an async ticket in the `hg_ticket` the caller sees (the core's tickets never
/// reach it: they count admissions from 0).
pub(crate) const ASYNC_TAG: u64 = 1 << 63;

/// A caller's `hg_ticket`: the core ticket, and whether it is an async one.
pub(crate) fn untag(ticket: u64) -> (Ticket, bool) {
    (
        Ticket::from_raw(ticket & !ASYNC_TAG),
        ticket & ASYNC_TAG != 0,
    )
}

/// A C callback and its user data.
pub(crate) struct Callback {
    pub(crate) f: unsafe extern "C" fn(hg_status, *mut hg_permit, *mut c_void),
    pub(crate) user_data: *mut c_void,
}

// SAFETY: the user data is the caller's, handed back to its callback exactly once; the C
// contract of `hg_bulkhead_acquire_async` makes it usable from the settling thread.
unsafe impl Send for Callback {}

impl Callback {
    /// Runs the callback with settlement `s` of a ticket of `bh`.
    fn deliver(self, bh: Arc<CoreBulkhead>, s: Settled) {
        let (status, permit) = status_of(s);
        drop(bh);
        self.call(status, permit);
    }

    /// Runs the callback with these arguments.
    fn call(self, status: hg_status, permit: *mut hg_permit) {
        // SAFETY: the function pointer and user data came from the caller of
        // `hg_bulkhead_acquire_async`, whose contract this is; it runs exactly once (whoever
        // calls this took the callback, by value, out of its waker's lock).
        unsafe { (self.f)(status, permit, self.user_data) }
    }
}

/// How a queued acquire settled: the core's call, or why not.
pub(crate) type Settled = Result<OwnedPermit, AcquireError>;

/// A settlement as the callback's arguments: `HG_STATUS_OK` and a new permit, or the
/// rejection's status and NULL.
pub(crate) fn status_of(s: Settled) -> (hg_status, *mut hg_permit) {
    match s {
        Ok(call) => (hg_status::HG_STATUS_OK, PermitBox::into_raw(call)),
        Err(e) => ((&e).into(), std::ptr::null_mut()),
    }
}

// ----- the side table --------------------------------------------------------------------------

/// A table key: the core bulkhead's address and the core ticket.
type Key = (usize, u64);

/// The waker of every async ticket whose callback is not taken yet, by [`Key`]: how a cancel
/// finds the [`CWake`] of the ticket it expires (see [`cancel`]).
///
/// Marshalling state only: no admission decision lives here (the core's cell says whether a
/// ticket waits, was granted or rejected). An entry is added when the acquire queues, before
/// the waker's first registration (so before any settlement can reach the waker), and removed
/// by whoever takes the callback — the admission that returns the settlement itself, the
/// runner that delivers it, or a canceller — so it is at most one entry per pending async
/// acquire. A key is never reused while its entry lives: the waker's `Weak` keeps the
/// bulkhead's allocation (its address), and a bulkhead does not reissue a ticket number.
///
/// A `BTreeMap`: built at compile time, O(log n), and its nodes are referenced from their start,
/// so a leak checker (valgrind, tests/c/run.sh) sees what is still pending at exit as reachable.
static ASYNC: Mutex<BTreeMap<Key, Arc<CWake>>> = Mutex::new(BTreeMap::new());

fn table() -> MutexGuard<'static, BTreeMap<Key, Arc<CWake>>> {
    ASYNC.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(bh: *const CoreBulkhead, ticket: Ticket) -> Key {
    (bh as usize, ticket.to_raw())
}

// ----- the waker -------------------------------------------------------------------------------

/// The waker of one async ticket: owns its callback until it runs.
///
/// A wake can also mean "poll again": the core asks an owner to re-poll when its waker
/// registration collided with a concurrent take or clear of the same cell (for the cell's
/// previous ticket, say) and was not stored. A future would re-poll with its waker; this waker
/// does the same: while the ticket is pending it registers itself again. That may collide and
/// wake this same waker again, re-entrantly or from another thread; `run` makes such a wake
/// only leave a note, and the one running loop goes round again, so this never recurses and
/// never drops a wake. (The note is per waker: a callback run from one waker may release a
/// permit whose grant wakes *another* waker on the same thread, which must run.) Only the
/// running loop polls the ticket, and it polls no more once the callback is taken or a
/// rejection is deferred, so the ticket is consumed once (a won cancel consumes it itself, see
/// [`cancel`]: a runner that polls it concurrently finds it gone, which holds no permit).
pub(crate) struct CWake {
    bh: Weak<CoreBulkhead>,
    ticket: Ticket,
    /// `IDLE`, `RUNNING`, or `RUNNING | AGAIN`.
    run: AtomicU8,
    state: Mutex<State>,
}

/// What a [`CWake`]'s lock guards.
struct State {
    /// The callback until it is taken (by the runner that delivers, a canceller, or the
    /// admission that returns the settlement itself).
    callback: Option<Callback>,
    /// How many cancels of this ticket are between their two lock sections ([`cancel`]); while
    /// non-zero, runners defer rejections. A count: two threads may cancel one ticket at once.
    cancelling: u32,
    /// A rejection a runner polled while cancels were in flight, for the canceller that won
    /// (or, if none did, the last one out) to deliver. A rejection only: a grant is never
    /// deferred.
    deferred: Option<AcquireError>,
}

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const AGAIN: u8 = 2;

impl CWake {
    /// The waker of freshly queued `ticket`, held by the admitting thread (`RUNNING`: wakes
    /// that arrive before [`admit`](Self::admit) finishes only leave a note), listed in the
    /// side table.
    pub(crate) fn new(bh: &Arc<CoreBulkhead>, ticket: Ticket, callback: Callback) -> Arc<Self> {
        let wake = Arc::new(CWake {
            bh: Arc::downgrade(bh),
            ticket,
            run: AtomicU8::new(RUNNING),
            state: Mutex::new(State {
                callback: Some(callback),
                cancelling: 0,
                deferred: None,
            }),
        });
        // Keys are unique: nothing is replaced (were it, it would drop outside the lock).
        let replaced = table().insert(key(Arc::as_ptr(bh), ticket), wake.clone());
        drop(replaced);
        wake
    }

    /// The admitting thread's first rounds: registers this waker with the ticket. `Some` if the
    /// ticket settled meanwhile (the admission returns it; the callback never runs); `None` if
    /// it is pending (the callback will run exactly once).
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Settled> {
        self.rounds().map(|(_callback, _, s)| s)
    }

    /// Rounds while this thread holds `RUNNING`, until one leaves the ticket pending with no
    /// note, or it settles: then the callback is taken (so no later round polls) and returned
    /// with the bulkhead and the settlement — unless a canceller gets them (a deferred
    /// rejection, or a callback it already took) — and `RUNNING` is released.
    fn rounds(self: &Arc<Self>) -> Option<(Callback, Arc<CoreBulkhead>, Settled)> {
        loop {
            // Clear the note: wakes from here on ask for another round.
            self.run.store(RUNNING, Release);
            if let Some((bh, s)) = self.round() {
                let taken = self.settle(s);
                self.run.store(IDLE, Release);
                return taken.map(|(cb, s)| (cb, bh, s));
            }
            // Leave, unless a wake arrived during the round.
            if self
                .run
                .compare_exchange(RUNNING, IDLE, AcqRel, Acquire)
                .is_ok()
            {
                return None;
            }
            // A registration collided with a peer's take or clear (a few instructions): let
            // it finish, then go round again.
            std::thread::yield_now();
        }
    }

    /// One poll of the ticket with this waker (re-registering it while pending); nothing once
    /// the callback was taken or a rejection deferred.
    fn round(self: &Arc<Self>) -> Option<(Arc<CoreBulkhead>, Settled)> {
        {
            let st = self.lock();
            if st.callback.is_none() || st.deferred.is_some() {
                return None;
            }
        }
        // The bulkhead outlives its queued tickets (freeing it closes it, which settles them).
        let bh = self.bh.upgrade()?;
        let mut waiter = Waiter::from_ticket(bh.clone(), self.ticket);
        if let Poll::Ready(s) = waiter.poll(Some(&Waker::from(self.clone()))) {
            return Some((bh, s));
        }
        // Still queued: only the raw ticket stays, in this waker.
        let _ = waiter.into_ticket();
        None
    }

    /// The runner's rule for settlement `s`: a rejection polled while a cancel is in flight is
    /// deferred to the canceller; otherwise the callback is taken (and unlisted) to deliver
    /// `s`. `None` when there is nothing to deliver here: deferred, or the callback is gone (a
    /// won cancel took it, so `s` is a rejection, or the ticket's absence).
    fn settle(&self, s: Settled) -> Option<(Callback, Settled)> {
        let mut st = self.lock();
        let s = match s {
            Err(e) if st.cancelling > 0 => {
                st.deferred = Some(e);
                return None;
            }
            s => s,
        };
        let cb = st.callback.take();
        drop(st);
        match cb {
            Some(cb) => {
                self.unlist();
                Some((cb, s))
            }
            // Never a grant (see above); one would be released on drop, outside the lock.
            None => None,
        }
    }

    /// Removes this waker's entry from the side table (its callback was taken).
    fn unlist(&self) {
        let k = key(self.bh.as_ptr(), self.ticket);
        let mut t = table();
        let mine = t
            .get(&k)
            .is_some_and(|w| std::ptr::eq(Arc::as_ptr(w), self));
        let entry = mine.then(|| t.remove(&k));
        drop(t);
        drop(entry); // outside the table's lock
    }

    /// Its ticket (the core's, untagged).
    pub(crate) fn ticket(&self) -> Ticket {
        self.ticket
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for CWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Become the one running loop, or leave a note for it.
        if self.run.fetch_or(RUNNING | AGAIN, AcqRel) & RUNNING != 0 {
            return;
        }
        // Settled: deliver (a callback is taken once, under the lock; a call without one is
        // dropped, never stranded).
        if let Some((cb, bh, s)) = self.rounds() {
            cb.deliver(bh, s);
        }
    }
}

// ----- cancel ----------------------------------------------------------------------------------

/// `hg_ticket_cancel*` of async ticket `t` of `core`: expires it with `reason` and, if that
/// won, runs its callback with the reason's status on this thread before returning
/// `HG_STATUS_OK`; `HG_STATUS_ALREADY_SETTLED` if a grant, a timeout, a close or a resize won
/// (or the callback was already taken), whose runner delivers it — or this canceller, when
/// the runner deferred it here.
///
/// The steps: find the waker (not listed: its callback is taken, settled); mark it
/// `cancelling`; expire (the core's one winner against grants and other expiries; its wake may
/// run a runner, even on this thread, which then defers the rejection it polls); then
/// [`cancelled`](CWake::cancelled) unmarks and delivers what is this cancel's to deliver.
pub(crate) fn cancel(core: &Arc<CoreBulkhead>, t: Ticket, reason: Reason) -> hg_status {
    let Some(wake) = table().get(&key(Arc::as_ptr(core), t)).cloned() else {
        return hg_status::HG_STATUS_ALREADY_SETTLED;
    };
    wake.lock().cancelling += 1;
    // Unmarked below whatever happens (a panic here is re-raised after the delivery).
    let expired = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| core.expire(t, reason)));
    let won = matches!(expired, Ok(Ok(())));
    wake.cancelled(core, won, reason);
    if let Err(panic) = expired {
        std::panic::resume_unwind(panic);
    }
    if won {
        hg_status::HG_STATUS_OK
    } else {
        hg_status::HG_STATUS_ALREADY_SETTLED
    }
}

impl CWake {
    /// A cancel's last step, after its expiry (`won`: it settled the ticket with `reason`):
    /// unmarks, then, if the cancel won, or a rejection was deferred and no other cancel is in
    /// flight, takes the callback and delivers on this thread — the deferred rejection (its
    /// runner consumed the ticket) or, if none yet, `reason`'s status after consuming the
    /// ticket here. A runner that polls later finds the callback gone and delivers nothing. A
    /// won expiry gave the waiter no permit, so nothing can leak.
    fn cancelled(&self, core: &Arc<CoreBulkhead>, won: bool, reason: Reason) {
        let (cb, deferred) = {
            let mut st = self.lock();
            st.cancelling -= 1;
            if won || (st.cancelling == 0 && st.deferred.is_some()) {
                (st.callback.take(), st.deferred.take())
            } else {
                (None, None)
            }
        };
        let Some(cb) = cb else { return };
        self.unlist();
        let status = match deferred {
            Some(e) => (&e).into(),
            None => {
                consume(core, self.ticket);
                reason.into()
            }
        };
        cb.call(status, std::ptr::null_mut());
    }
}

/// Consumes ticket `t`, which a won cancel settled as rejected: frees its cell and ends its
/// guarded call `ignored`. (A runner polling it at the same moment may take it first: then
/// this poll finds it gone, which settles as `aborted` and holds nothing.)
fn consume(core: &Arc<CoreBulkhead>, t: Ticket) {
    let mut waiter = Waiter::from_ticket(core.clone(), t);
    match waiter.poll(None) {
        // A rejection (a grant cannot follow a won expiry; were it one, its drop releases it).
        Poll::Ready(s) => drop(s),
        Poll::Pending => {
            let _ = waiter.into_ticket();
        }
    }
}

// ----- the timer thread ------------------------------------------------------------------------

struct Deadline {
    at: Instant,
    bh: Weak<CoreBulkhead>,
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

/// One process-wide thread, started on first use, that expires queued async tickets as
/// `timeout` when their deadline passes (`Bulkhead::expire`: the ticket's waker then runs the
/// callback with `HG_STATUS_TIMEOUT`). Settled tickets' deadlines are dropped lazily (their
/// expiry finds them settled).
struct Timer {
    heap: Mutex<BinaryHeap<Reverse<Deadline>>>,
    wake: Condvar,
}

/// How long the timer thread sleeps with no deadline armed (an arm wakes it earlier).
const IDLE_WAIT: Duration = Duration::from_secs(3600);

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

/// Arms the deadline of queued async `ticket` of `bh`, `timeout` from now (`Duration::MAX`:
/// none, nothing is armed).
pub(crate) fn arm(bh: &Arc<CoreBulkhead>, ticket: Ticket, timeout: Duration) {
    if timeout != Duration::MAX {
        TIMER.arm(bh, ticket, timeout);
    }
}

impl Timer {
    fn arm(&self, bh: &Arc<CoreBulkhead>, ticket: Ticket, timeout: Duration) {
        let at = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        let earliest = heap.peek().is_none_or(|Reverse(d)| at < d.at);
        heap.push(Reverse(Deadline {
            at,
            bh: Arc::downgrade(bh),
            ticket,
        }));
        drop(heap);
        if earliest {
            self.wake.notify_one();
        }
    }

    /// Expires what is due — outside the lock: an expiry's wake runs the callback, which may
    /// arm another deadline — then sleeps until the next deadline, or until an earlier one is
    /// armed.
    fn run(&self) {
        loop {
            let now = Instant::now();
            let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
            let mut due = Vec::new();
            while heap.peek().is_some_and(|Reverse(d)| d.at <= now) {
                due.extend(heap.pop());
            }
            if due.is_empty() {
                let wait = heap.peek().map_or(IDLE_WAIT, |Reverse(d)| d.at - now);
                drop(self.wake.wait_timeout(heap, wait));
                continue;
            }
            drop(heap);
            for Reverse(d) in due {
                // A ticket that settled first is left alone (its expiry finds it settled).
                if let Some(bh) = d.bh.upgrade() {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        bh.expire(d.ticket, Reason::Timeout)
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The cancel rule with the races made deterministic: a "runner on another thread" is this
    //! thread holding `RUNNING` (as a thread mid re-registration does), and a settlement that
    //! races a cancel is put between the cancel's two steps by hand.

    use std::{
        ptr,
        sync::atomic::{AtomicPtr, AtomicU32},
        thread::{self, ThreadId},
    };

    use super::*;
    use crate::{
        bulkhead::{
            hg_bulkhead_acquire_async, hg_bulkhead_free, hg_bulkhead_new, hg_bulkhead_stats,
            hg_bulkhead_try_acquire, hg_ticket, hg_ticket_cancel,
        },
        config::{HG_TIMEOUT_INFINITE, hg_config, hg_config_default, hg_stats},
        handle::{bulkhead_ref, hg_bulkhead},
        permit::{hg_permit_free, hg_permit_release},
    };

    /// What a callback saw.
    #[derive(Default)]
    struct Record {
        calls: AtomicU32,
        status: AtomicU32,
        permit: AtomicPtr<hg_permit>,
        thread: Mutex<Option<ThreadId>>,
    }

    impl Record {
        fn calls(&self) -> u32 {
            self.calls.load(SeqCst)
        }
        fn status(&self) -> u32 {
            self.status.load(SeqCst)
        }
        fn on_this_thread(&self) -> bool {
            *self.thread.lock().unwrap() == Some(thread::current().id())
        }
    }

    unsafe extern "C" fn record(status: hg_status, permit: *mut hg_permit, user_data: *mut c_void) {
        // SAFETY: every test passes a `Record` that outlives the bulkhead.
        let r = unsafe { &*user_data.cast::<Record>() };
        r.status.store(status as u32, SeqCst);
        r.permit.store(permit, SeqCst);
        *r.thread.lock().unwrap() = Some(thread::current().id());
        r.calls.fetch_add(1, SeqCst);
    }

    /// A bulkhead of limit 1 whose permit is held (returned), so acquires queue.
    fn busy() -> (*mut hg_bulkhead, *mut hg_permit) {
        let mut c = std::mem::MaybeUninit::<hg_config>::uninit();
        assert_eq!(hg_config_default(c.as_mut_ptr()), hg_status::HG_STATUS_OK);
        // SAFETY: initialised by `hg_config_default`.
        let mut c = unsafe { c.assume_init() };
        c.max_concurrent = 1;
        c.max_queue = 4;
        c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
        let mut bh = ptr::null_mut();
        assert_eq!(hg_bulkhead_new(&c, &mut bh), hg_status::HG_STATUS_OK);
        let mut held = ptr::null_mut();
        assert_eq!(
            hg_bulkhead_try_acquire(bh, 1, &mut held),
            hg_status::HG_STATUS_OK
        );
        (bh, held)
    }

    /// Queues an async acquire recording into `r`: its tagged ticket and its waker.
    fn queue(bh: *mut hg_bulkhead, r: &Record) -> (hg_ticket, Arc<CWake>) {
        let (mut out, mut t) = (ptr::null_mut(), 0);
        let ud = ptr::from_ref(r).cast_mut().cast();
        let s = hg_bulkhead_acquire_async(
            bh,
            1,
            HG_TIMEOUT_INFINITE,
            Some(record),
            ud,
            &mut out,
            &mut t,
        );
        assert_eq!(s, hg_status::HG_STATUS_QUEUED);
        let wake = table()
            .get(&key(Arc::as_ptr(core(bh)), untag(t).0))
            .cloned();
        (t, wake.expect("a queued async ticket is listed"))
    }

    fn core<'a>(bh: *mut hg_bulkhead) -> &'a Arc<CoreBulkhead> {
        // SAFETY: a live handle from `busy`.
        &unsafe { bulkhead_ref(bh) }.core
    }

    fn listed(w: &Arc<CWake>) -> bool {
        table().contains_key(&key(w.bh.as_ptr(), w.ticket))
    }

    fn stats(bh: *mut hg_bulkhead) -> hg_stats {
        // SAFETY: zeroed is a valid `hg_stats` (integers, bools, a C enum whose 0 is a value).
        let mut s: hg_stats = unsafe { std::mem::zeroed() };
        s.struct_size = size_of::<hg_stats>() as u32;
        assert_eq!(hg_bulkhead_stats(bh, &mut s), hg_status::HG_STATUS_OK);
        s
    }

    fn done(bh: *mut hg_bulkhead, held: *mut hg_permit) {
        assert_eq!(hg_permit_release(held), hg_status::HG_STATUS_OK);
        hg_permit_free(held);
        let s = stats(bh);
        assert_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0));
        assert_eq!(s.available, 1);
        hg_bulkhead_free(bh);
    }

    const ABORTED: u32 = hg_status::HG_STATUS_ABORTED as u32;
    const TIMEOUT: u32 = hg_status::HG_STATUS_TIMEOUT as u32;

    #[test]
    fn a_won_cancel_delivers_while_another_thread_holds_the_running_loop() {
        let (bh, held) = busy();
        let r = Record::default();
        let (t, wake) = queue(bh, &r);

        // The regression: a bare expiry (the old cancel) only leaves a note for the loop's
        // holder, which runs the callback — after the cancel returned.
        let old = Record::default();
        let (t_old, wake_old) = queue(bh, &old);
        wake_old.run.store(RUNNING, SeqCst);
        assert!(core(bh).expire(untag(t_old).0, Reason::Aborted).is_ok());
        assert_eq!(old.calls(), 0);
        let (cb, b, s) = wake_old.rounds().expect("the holder delivers");
        cb.deliver(b, s);
        assert_eq!((old.calls(), old.status()), (1, ABORTED));

        // The cancel: the callback has run, here, before it returns.
        wake.run.store(RUNNING, SeqCst);
        assert_eq!(hg_ticket_cancel(bh, t), hg_status::HG_STATUS_OK);
        assert_eq!((r.calls(), r.status()), (1, ABORTED));
        assert!(r.on_this_thread() && r.permit.load(SeqCst).is_null());
        assert!(!listed(&wake));
        // The holder's next round finds nothing to deliver (the ticket is consumed).
        assert!(wake.rounds().is_none());
        assert_eq!(wake.run.load(SeqCst), IDLE);
        assert_eq!(r.calls(), 1);
        assert_eq!(
            hg_ticket_cancel(bh, t),
            hg_status::HG_STATUS_ALREADY_SETTLED
        );
        assert_eq!(stats(bh).rejected[Reason::Aborted.index()], 2);
        done(bh, held);
    }

    #[test]
    fn a_timeout_that_beats_the_cancel_is_delivered_once_by_the_canceller() {
        let (bh, held) = busy();
        let r = Record::default();
        let (t, wake) = queue(bh, &r);
        let t = untag(t).0;
        wake.lock().cancelling += 1; // a cancel in flight ...
        // ... when the timer thread's expiry wins: its wake runs the loop here, which defers.
        assert!(core(bh).expire(t, Reason::Timeout).is_ok());
        assert_eq!(r.calls(), 0);
        assert!(wake.lock().deferred.is_some());
        assert!(wake.rounds().is_none()); // a later wake polls no more
        // The cancel's own expiry loses; its last step delivers the timeout, here.
        assert!(core(bh).expire(t, Reason::Aborted).is_err());
        wake.cancelled(core(bh), false, Reason::Aborted);
        assert_eq!((r.calls(), r.status()), (1, TIMEOUT));
        assert!(r.on_this_thread() && !listed(&wake));
        let s = stats(bh);
        assert_eq!(s.rejected[Reason::Timeout.index()], 1);
        assert_eq!(s.rejected[Reason::Aborted.index()], 0);
        done(bh, held);
    }

    #[test]
    fn a_grant_during_a_cancel_is_delivered_at_once_never_deferred() {
        let (bh, held) = busy();
        let r = Record::default();
        let (t, wake) = queue(bh, &r);
        wake.lock().cancelling += 1;
        // The release grants the ticket: its runner (here) delivers, cancel or not.
        assert_eq!(hg_permit_release(held), hg_status::HG_STATUS_OK);
        hg_permit_free(held);
        assert_eq!((r.calls(), r.status()), (1, hg_status::HG_STATUS_OK as u32));
        assert!(!listed(&wake));
        assert!(core(bh).expire(untag(t).0, Reason::Aborted).is_err());
        wake.cancelled(core(bh), false, Reason::Aborted);
        assert_eq!(r.calls(), 1);
        // The granted permit is the callback's: it holds the bulkhead's only permit.
        let s = stats(bh);
        assert_eq!((s.active, s.available), (1, 0));
        let p = r.permit.load(SeqCst);
        assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_OK);
        hg_permit_free(p);
        let s = stats(bh);
        assert_eq!((s.active, s.queued, s.available), (0, 0, 1));
        hg_bulkhead_free(bh);
    }

    #[test]
    fn of_two_cancels_of_one_ticket_the_winner_delivers() {
        let (bh, held) = busy();
        let r = Record::default();
        let (t, wake) = queue(bh, &r);
        let t = untag(t).0;
        wake.lock().cancelling += 2;
        assert!(core(bh).expire(t, Reason::Aborted).is_ok()); // the first cancel wins ...
        assert!(core(bh).expire(t, Reason::Aborted).is_err()); // ... the second loses
        // The loser's last step comes first: the winner is still in, so it leaves it.
        wake.cancelled(core(bh), false, Reason::Aborted);
        assert_eq!(r.calls(), 0);
        wake.cancelled(core(bh), true, Reason::Aborted);
        assert_eq!((r.calls(), r.status()), (1, ABORTED));
        assert!(r.on_this_thread() && !listed(&wake));
        done(bh, held);
    }

    #[test]
    fn a_close_settles_every_listed_ticket_through_its_callback() {
        let (bh, held) = busy();
        let (a, b) = (Record::default(), Record::default());
        let ((_, wa), (_, wb)) = (queue(bh, &a), queue(bh, &b));
        assert_eq!(
            crate::bulkhead::hg_bulkhead_close(bh),
            hg_status::HG_STATUS_OK
        );
        let shutdown = hg_status::HG_STATUS_SHUTDOWN as u32;
        assert_eq!(
            (a.calls(), a.status(), b.calls(), b.status()),
            (1, shutdown, 1, shutdown)
        );
        assert!(!listed(&wa) && !listed(&wb));
        done(bh, held);
    }
}
