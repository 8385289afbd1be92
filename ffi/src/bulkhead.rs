//! `hg_bulkhead_*`: one bulkhead through the C ABI.

use std::{ffi::c_void, sync::Arc, task::Poll, time::Duration};

use hullguard_core::{
    AcquireError, Bulkhead as CoreBulkhead, ClockSource, ConfigError, Decision, OwnedPermit,
    Reason, Request, Waiter,
};

use crate::{
    async_wait::{self, Callback, hg_acquire_callback, status_of, untag},
    boundary::{boundary, non_null, ok_or, try_mut, try_val},
    config::{
        HG_TIMEOUT_INFINITE, hg_config, hg_drain_result, hg_stats, read_config, wait_timeout,
        write_stats,
    },
    handle::{
        BulkheadHandle, bulkhead_into_raw, bulkhead_ref, bulkhead_release, bulkhead_retain,
        hg_bulkhead, hg_permit, pin_on,
    },
    status::hg_status,
};

/// A queued acquire's handle, for `hg_ticket_poll()` / `hg_ticket_cancel()`.
///
/// Tickets are opaque: pass back exactly the value an acquire returned, to the bulkhead that
/// returned it. (A ticket from `hg_bulkhead_acquire_async` has its top bit set, one from
/// `hg_bulkhead_enqueue` does not: that is how the cancel functions tell them apart.)
pub type hg_ticket = u64;

/// # Safety
/// `bh` is NULL or a live `hg_bulkhead*`.
unsafe fn core<'a>(bh: *const hg_bulkhead) -> Option<&'a Arc<CoreBulkhead>> {
    // SAFETY: per the contract.
    (!bh.is_null()).then(|| &unsafe { bulkhead_ref(bh) }.core)
}

macro_rules! try_core {
    ($bh:expr) => {
        // SAFETY: every export documents that `bh` is NULL or a live handle.
        match unsafe { core($bh) } {
            Some(c) => c,
            None => return hg_status::HG_STATUS_NULL_PARAMETER,
        }
    };
}

/// Creates a bulkhead.
///
/// Parameters:
///   config: from `hg_config_default()`, then edited; its `struct_size` says how much to read.
///   out: receives the new bulkhead (set only on `HG_STATUS_OK`).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT` for an
///   out-of-range option (`max_concurrent` 0 or above `HG_MAX_PERMITS`, `max_queue` above
///   `HG_MAX_QUEUE`, a policy field out of its range, an unknown `adaptive_algorithm`,
///   `adaptive_max_limit` above `max_concurrent`; `hg_config_check()` names the field) or a
///   `struct_size` too small; `HG_STATUS_OUT_OF_MEMORY` when the waiter ring cannot be
///   allocated.
///
/// Memory and lifetimes: the caller owns one reference; free it with `hg_bulkhead_free()`.
/// Freeing the last reference closes the bulkhead (pending async acquires are rejected
/// `HG_STATUS_SHUTDOWN`); permits keep working and release normally.
///
/// Thread-safety: any thread; the bulkhead may be used from any number of threads at once.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_new(
    config: *const hg_config,
    out: *mut *mut hg_bulkhead,
) -> hg_status {
    boundary(|| {
        non_null!(config);
        let out = try_mut!(out);
        // SAFETY: `config` is non-null and points to an `hg_config` (contract).
        unsafe { new_bulkhead(config, ClockSource::default_for_host(), out) }
    })
}

/// Reads `config` and builds a bulkhead on `clock` with its callbacks.
///
/// # Safety
/// `config` is non-null and points to an `hg_config` (the exports' contract).
unsafe fn new_bulkhead(
    config: *const hg_config,
    clock: ClockSource,
    out: &mut *mut hg_bulkhead,
) -> hg_status {
    // SAFETY: per the contract.
    let Ok((config, c)) = unsafe { read_config(config) }.and_then(|c| Ok((c.config()?, c))) else {
        return hg_status::HG_STATUS_INVALID_ARGUMENT;
    };
    match CoreBulkhead::with_observer(config, clock, c.observer.shared(), None) {
        Ok(core) => {
            *out = bulkhead_into_raw(BulkheadHandle {
                core: Arc::new(core),
                owned: true,
            });
            hg_status::HG_STATUS_OK
        }
        // The configuration was validated: only the ring's allocation can fail now.
        Err(ConfigError::MaxQueue) => hg_status::HG_STATUS_OUT_OF_MEMORY,
        Err(_) => hg_status::HG_STATUS_INVALID_ARGUMENT,
    }
}

/// A host clock: returns monotonic nanoseconds from an arbitrary origin (it must never go
/// backwards). Called from any thread that uses the bulkhead.
pub type hg_now_ns_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> u64>;

struct CClock {
    f: unsafe extern "C" fn(*mut c_void) -> u64,
    user_data: *mut c_void,
}

// SAFETY: the contract of `hg_bulkhead_new_with_clock` makes the clock callable from any
// thread with its user data.
unsafe impl Send for CClock {}
// SAFETY: as above.
unsafe impl Sync for CClock {}

impl hullguard_core::Clock for CClock {
    fn now_ns(&self) -> u64 {
        // SAFETY: the caller's function and data, per the contract.
        unsafe { (self.f)(self.user_data) }
    }
}

/// `hg_bulkhead_new()` with the host's clock (the `queue_wait_*` stats, the breaker's open
/// duration and the adaptive limit's RTTs use it; default: the system's monotonic clock). Tests
/// use it to run on virtual time.
///
/// Parameters:
///   now_ns: required; must be callable from any thread, must not block, must never go back.
///   user_data: passed to `now_ns`; must stay valid until the bulkhead and its permits are gone.
///
/// Returns: as `hg_bulkhead_new()`. Thread-safety: as `hg_bulkhead_new()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_new_with_clock(
    config: *const hg_config,
    now_ns: hg_now_ns_fn,
    user_data: *mut c_void,
    out: *mut *mut hg_bulkhead,
) -> hg_status {
    boundary(|| {
        non_null!(config);
        let Some(f) = now_ns else {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        };
        let out = try_mut!(out);
        // SAFETY: `config` is non-null and points to an `hg_config` (contract).
        unsafe { new_bulkhead(config, c_clock(f, user_data), out) }
    })
}

/// A host clock as the core's clock source.
pub(crate) fn c_clock(
    f: unsafe extern "C" fn(*mut c_void) -> u64,
    user_data: *mut c_void,
) -> ClockSource {
    ClockSource::Shared(Arc::new(CClock { f, user_data }))
}

/// Adds a reference to `bh` and returns it (NULL in, NULL out).
///
/// Memory and lifetimes: each reference is dropped by one `hg_bulkhead_free()`.
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_retain(bh: *const hg_bulkhead) -> *const hg_bulkhead {
    boundary(|| {
        if !bh.is_null() {
            // SAFETY: `bh` is a live handle (contract).
            unsafe { bulkhead_retain(bh) };
        }
        bh
    })
}

/// Drops one reference to `bh`. NULL is accepted and ignored.
///
/// Memory and lifetimes: after this call the caller's `bh` is dangling. Freeing the same
/// reference twice is undefined behaviour (as in rustls-ffi). Freeing the last reference of a
/// standalone bulkhead closes it (see `hg_bulkhead_new()`; pending callbacks run on this thread).
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_free(bh: *const hg_bulkhead) {
    boundary(|| {
        if !bh.is_null() {
            // SAFETY: the caller gives up a live reference (contract).
            unsafe { bulkhead_release(bh) };
        }
    })
}

/// A core acquire's result as a status and `*out` (a new permit holding the call).
pub(crate) fn grant(r: Result<OwnedPermit, AcquireError>, out: &mut *mut hg_permit) -> hg_status {
    let (status, permit) = status_of(r);
    if status == hg_status::HG_STATUS_OK {
        *out = permit;
    }
    status
}

/// Takes `weight` permits now, or fails without waiting (the core's guarded try: weight, then
/// the breaker, then admission).
///
/// Parameters:
///   bh: the bulkhead. weight: `1 .. max_concurrent`. out: receives the permit on `HG_STATUS_OK`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_CONCURRENCY_LIMIT` when not admitted at once (also while
///   waiters are queued: no barging); `HG_STATUS_CIRCUIT_OPEN`; `HG_STATUS_SHUTDOWN` after
///   close; `HG_STATUS_INVALID_ARGUMENT` for a bad weight (never counted, even while the circuit
///   is open); `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: the caller owns `*out` (release it, then `hg_permit_free()`).
/// Thread-safety: any thread. Lock-free; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_try_acquire(
    bh: *const hg_bulkhead,
    weight: u64,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let out = try_mut!(out);
        let status = grant(core.try_acquire_owned(weight), out);
        // SAFETY: `bh` is live (contract); on OK `*out` is the new permit.
        unsafe { pin_on(bh, status, out) }
    })
}

/// Waits on this thread for `weight` permits (the core's blocking acquire).
///
/// Parameters:
///   timeout_ms: `HG_TIMEOUT_DEFAULT` uses the configured `queue_timeout_ms`;
///   `HG_TIMEOUT_INFINITE` waits without a deadline; 0 does not queue.
///
/// Returns: `HG_STATUS_OK` with `*out`; `HG_STATUS_TIMEOUT`; `HG_STATUS_QUEUE_LIMIT`;
///   `HG_STATUS_CONCURRENCY_LIMIT`; `HG_STATUS_CIRCUIT_OPEN`; `HG_STATUS_SHUTDOWN`;
///   `HG_STATUS_INVALID_ARGUMENT`; `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: any thread; blocks the calling thread (park/unpark) up to `timeout_ms`; never
/// call it from an `hg_acquire_callback` or an event callback.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_acquire_timeout(
    bh: *const hg_bulkhead,
    weight: u64,
    timeout_ms: u64,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let out = try_mut!(out);
        let r = core.acquire_blocking_owned(weight, wait_timeout(timeout_ms));
        let status = grant(r, out);
        // SAFETY: `bh` is live (contract); on OK `*out` is the new permit.
        unsafe { pin_on(bh, status, out) }
    })
}

/// Admits `request`: a grant (a new permit in `*out`) or a rejection is the returned status;
/// `Ok` is the queued waiter.
fn admit(
    core: &Arc<CoreBulkhead>,
    request: &Request,
    out: &mut *mut hg_permit,
) -> Result<Waiter<Arc<CoreBulkhead>, 0>, hg_status> {
    match core.admit_owned(request, None) {
        Decision::Queued(w) => Ok(w),
        Decision::Granted(call) => Err(grant(Ok(call), out)),
        Decision::Rejected(e) => Err((&e).into()),
    }
}

/// The request of an acquire of `weight` with a per-call `timeout_ms`.
fn request(weight: u64, timeout_ms: u64) -> Request {
    let mut r = Request::new(weight);
    r.queue_timeout = wait_timeout(timeout_ms);
    r
}

/// Acquires without blocking: a permit now, or a queued ticket whose callback runs exactly once.
///
/// Parameters:
///   timeout_ms: as `hg_bulkhead_acquire_timeout()`; the deadline is armed on an internal
///   timer thread started on first use. callback: required. user_data: passed back to it.
///   out: receives the permit on `HG_STATUS_OK`. ticket: receives the ticket on
///   `HG_STATUS_QUEUED` (opaque: see `hg_ticket`).
///
/// Returns: `HG_STATUS_OK` with `*out` when a permit was free (the callback never runs);
///   `HG_STATUS_QUEUED` with `*ticket` (the callback then runs exactly once, with
///   `HG_STATUS_OK` and a permit on a grant, or the rejection status and NULL — timeout,
///   cancel (`HG_STATUS_ABORTED`), close, resize); a rejection status when neither (the
///   callback never runs); `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT`.
///
/// The callback runs on the thread that settled the ticket: a releasing thread, the caller of
/// `hg_bulkhead_close()` / `hg_bulkhead_set_limit()`, the timer thread, or the caller of
/// `hg_ticket_cancel()` (see there). It may run before this function returns (on another
/// thread). It may call any non-blocking `hg_*` function; it must not block and must not free
/// the owning bulkhead.
///
/// Thread-safety: any thread; never blocks.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_acquire_async(
    bh: *const hg_bulkhead,
    weight: u64,
    timeout_ms: u64,
    callback: hg_acquire_callback,
    user_data: *mut c_void,
    out: *mut *mut hg_permit,
    ticket: *mut hg_ticket,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let Some(f) = callback else {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        };
        let out = try_mut!(out);
        let ticket = try_mut!(ticket);
        let d = core.admit_owned(&request(weight, timeout_ms), None);
        let callback = Callback { f, user_data };
        crate::admission::acquire_async(d, std::ptr::null_mut(), callback, out, ticket, None)
    })
}

/// The polling API (for cooperative schedulers): takes `weight` permits now, or queues and
/// returns a ticket to poll with `hg_ticket_poll()` — no callback, no thread, no timer.
///
/// Returns: `HG_STATUS_OK` with `*out`; `HG_STATUS_QUEUED` with `*ticket` (poll it, or give it
///   up with `hg_ticket_cancel()` / `hg_ticket_cancel_reason()`, which then return
///   `HG_STATUS_OK` and nothing more happens); a rejection status; `HG_STATUS_NULL_PARAMETER`;
///   `HG_STATUS_INVALID_ARGUMENT`. A queued ticket has no deadline (whatever `queue_timeout_ms`
///   says): the caller owns its timing. Its guarded call waits in the ticket's queue cell.
///
/// Thread-safety: any thread; a ticket must be polled by one thread at a time. Never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_enqueue(
    bh: *const hg_bulkhead,
    weight: u64,
    out: *mut *mut hg_permit,
    ticket: *mut hg_ticket,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let out = try_mut!(out);
        let ticket = try_mut!(ticket);
        let waiter = try_val!(admit(core, &request(weight, HG_TIMEOUT_INFINITE), out));
        *ticket = waiter.into_ticket().to_raw();
        hg_status::HG_STATUS_QUEUED
    })
}

/// Polls a ticket from `hg_bulkhead_enqueue()`.
///
/// Returns: `HG_STATUS_QUEUED` while it waits; `HG_STATUS_OK` with `*out` once granted (the
///   ticket is then consumed); the rejection status once rejected (consumed: `HG_STATUS_SHUTDOWN`
///   after a close, `HG_STATUS_CONCURRENCY_LIMIT` after a shrink);
///   `HG_STATUS_ALREADY_SETTLED` for a ticket that is not live (consumed or cancelled);
///   `HG_STATUS_INVALID_ARGUMENT` for a ticket of `hg_bulkhead_acquire_async()` (its callback
///   delivers it); `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: any thread, one at a time per ticket. Lock-free, never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_ticket_poll(
    bh: *const hg_bulkhead,
    ticket: hg_ticket,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let out = try_mut!(out);
        let (t, is_async) = untag(ticket);
        if is_async {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        }
        let mut waiter = Waiter::from_ticket(core.clone(), t);
        let Poll::Ready(r) = waiter.poll(None) else {
            // Still queued: only the raw ticket stays, the caller's.
            let _ = waiter.into_ticket();
            return hg_status::HG_STATUS_QUEUED;
        };
        // Nobody settles a polling ticket `aborted` (its owner's cancel frees it at once): that
        // answer is the core's for a ticket that is not live.
        if r.as_ref().err().and_then(AcquireError::reason) == Some(Reason::Aborted) {
            return hg_status::HG_STATUS_ALREADY_SETTLED;
        }
        let status = grant(r, out);
        // SAFETY: `bh` is live (contract); on OK `*out` is the new permit.
        unsafe { pin_on(bh, status, out) }
    })
}

/// Cancels a queued acquire with a reason: `HG_REASON_ABORTED` for a caller's cancel (what
/// `hg_ticket_cancel()` does), `HG_REASON_TIMEOUT` for a host that runs its own timers (an async
/// acquire's callback then gets `HG_STATUS_TIMEOUT`; the stats count a timeout either way).
///
/// Returns: as `hg_ticket_cancel()`, with `HG_STATUS_TIMEOUT` in place of `HG_STATUS_ABORTED`
///   for `HG_REASON_TIMEOUT` (on `HG_STATUS_OK` an async acquire's callback has already run
///   with it, on this thread, before this returns); `HG_STATUS_INVALID_ARGUMENT` for a reason
///   other than `HG_REASON_ABORTED` / `HG_REASON_TIMEOUT`.
/// Thread-safety: as `hg_ticket_cancel()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_ticket_cancel_reason(
    bh: *const hg_bulkhead,
    ticket: hg_ticket,
    reason: u32,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        match Reason::from_index(reason as usize) {
            Some(r @ (Reason::Aborted | Reason::Timeout)) => cancel_with(core, ticket, r),
            _ => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    })
}

/// Both cancel entry points. An async ticket is expired for its owner, and a won expiry's
/// callback is run here, before the return, with the reason's status (`async_wait::cancel`:
/// the side table of async tickets and its deferral rule; docs/design.md § C ABI). A polling
/// ticket is the owner's own cancel (its place is freed at once, nothing more happens).
fn cancel_with(core: &Arc<CoreBulkhead>, ticket: hg_ticket, reason: Reason) -> hg_status {
    let (t, is_async) = untag(ticket);
    if is_async {
        return async_wait::cancel(core, t, reason);
    }
    core.cancel(t, reason)
        .map_or(hg_status::HG_STATUS_ALREADY_SETTLED, |()| {
            hg_status::HG_STATUS_OK
        })
}

/// Cancels a queued acquire (`HG_REASON_ABORTED`).
///
/// Returns: `HG_STATUS_OK` when the cancel won; `HG_STATUS_ALREADY_SETTLED` when a grant,
///   timeout or close won (an async acquire's callback runs, or has run, with that outcome; a
///   polling ticket must still be polled to take it), or for a ticket that is not live;
///   `HG_STATUS_NULL_PARAMETER`.
///
///   An async ticket (`hg_bulkhead_acquire_async()`) whose cancel won: its callback has
///   already run, exactly once, with `HG_STATUS_ABORTED` and NULL, on this thread, before this
///   returns — so the caller may free the callback's user data right after an `HG_STATUS_OK`
///   (docs/design.md § C ABI). After `HG_STATUS_ALREADY_SETTLED` the callback may still be
///   running on another thread (or about to): free the user data from the callback. A polling
///   ticket (`hg_bulkhead_enqueue()`): its place is free at once, nothing more happens (a later
///   poll returns `HG_STATUS_ALREADY_SETTLED`).
///
/// Thread-safety: any thread, including from a callback (of its own ticket: already settled).
///   Lock-free in the core (O(1)); an async ticket's cancel also takes two short internal locks
///   (the library's table of pending async tickets, the ticket's own state), never held across
///   a callback.
#[unsafe(no_mangle)]
pub extern "C" fn hg_ticket_cancel(bh: *const hg_bulkhead, ticket: hg_ticket) -> hg_status {
    boundary(|| cancel_with(try_core!(bh), ticket, Reason::Aborted))
}

/// Changes the limit (`1 .. max_concurrent`). Never blocks, never revokes: growing grants
/// queued waiters; shrinking lets `available` go negative and rejects queued waiters heavier
/// than the new limit (`HG_STATUS_CONCURRENCY_LIMIT` through their callbacks, which run on
/// this thread). An adaptive limit restarts from the hand-set value.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a limit out of range, or a fleet
///   bulkhead's handle (its limit is the lease's: `hg_fleet_bulkhead_apply_limits()` sets the
///   fleet limit) — nothing changes; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_set_limit(bh: *const hg_bulkhead, limit: u64) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        ok_or(core.set_limit(limit), hg_status::HG_STATUS_INVALID_ARGUMENT)
    })
}

/// Stops admission for good: queued waiters are rejected `HG_STATUS_SHUTDOWN` at once (their
/// callbacks run on this thread); in-flight permits release normally. Idempotent.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_close(bh: *const hg_bulkhead) -> hg_status {
    boundary(|| {
        try_core!(bh).close();
        hg_status::HG_STATUS_OK
    })
}

/// Waits (without closing) until the bulkhead is idle (no permit held, nothing queued, no grant
/// unclaimed) or `timeout_ms` passes (`HG_TIMEOUT_INFINITE` / `HG_TIMEOUT_DEFAULT`: until idle;
/// 0: report at once).
///
/// Returns: `HG_STATUS_OK` with `*out` filled (`drained` says which); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; blocks the calling thread up to `timeout_ms` (never call it from
/// a callback).
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_drain(
    bh: *const hg_bulkhead,
    timeout_ms: u64,
    out: *mut hg_drain_result,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let out = try_mut!(out);
        let timeout = wait_timeout(timeout_ms).filter(|t| *t != Duration::MAX);
        let r = core.drain_blocking(timeout);
        *out = hg_drain_result {
            drained: r.drained,
            active: r.active,
            queued: r.queued,
        };
        hg_status::HG_STATUS_OK
    })
}

/// Fills `*out` (at most `out->struct_size` bytes; set it to `sizeof(hg_stats)` first). On
/// return `out->struct_size` says how many bytes were written (older libraries write less).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a `struct_size` below 4;
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits. A read may commit a due breaker transition (and run
/// the event callbacks on this thread).
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_stats(bh: *const hg_bulkhead, out: *mut hg_stats) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        non_null!(out);
        // SAFETY: `out` is non-null and writable for its declared size (contract).
        unsafe { write_stats(out, &core.stats()) }
    })
}

/// The raw pair, for firmware: takes `weight` permits without a handle.
///
/// Policy-free: this pair never runs the guarded-call steps (no breaker check, no
/// `HG_STATUS_CIRCUIT_OPEN`, no outcome, no adaptive sample) even on a bulkhead with policies;
/// use the permit API (`hg_bulkhead_try_acquire()`, …) for guarded calls.
///
/// Returns: as `hg_bulkhead_try_acquire()`. On `HG_STATUS_OK` return them with
/// `hg_bulkhead_release_units()`; the bulkhead counts the units this pair has out.
/// Thread-safety: any thread. Lock-free; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_try_acquire_units(bh: *const hg_bulkhead, weight: u64) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let r = core.try_acquire_units(weight);
        r.map_or_else(|e| (&e).into(), |()| hg_status::HG_STATUS_OK)
    })
}

/// Returns `weight` permits taken with `hg_bulkhead_try_acquire_units()`.
///
/// The bulkhead counts the units the raw pair has out; a return of more than that — a double
/// release, units never taken, or the units of a `hg_permit` (return those with
/// `hg_permit_release()`) — is refused and counted in `hg_stats.released_twice_total`, so
/// `available` never rises above the limit.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for such a return (nothing changes
///   but the count) and for a `weight` of 0 or above `max_concurrent` (not counted);
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread. Lock-free; never waits (a grant may run a callback here).
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_release_units(bh: *const hg_bulkhead, weight: u64) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let r = core.release_units_checked(weight);
        ok_or(r, hg_status::HG_STATUS_INVALID_ARGUMENT)
    })
}

/// What to arm for the work of a call of a request with the absolute deadline `deadline_ns`
/// (as `hg_request.deadline_ns`; `HG_DEADLINE_NONE`: none): the bulkhead's `call_timeout_ms`
/// capped by the time left until the deadline, in ms rounded up (docs/design.md §5.9);
/// `HG_TIMEOUT_INFINITE` when neither bounds it, or for NULL; 0 once the deadline has passed.
///
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_call_timeout_within_ms(
    bh: *const hg_bulkhead,
    deadline_ns: u64,
) -> u64 {
    boundary(|| {
        // SAFETY: NULL or a live handle (contract).
        let Some(core) = (unsafe { core(bh) }) else {
            return HG_TIMEOUT_INFINITE;
        };
        core.call_timeout_within(&hullguard_core::Deadline::Ns(deadline_ns))
            .map_or(HG_TIMEOUT_INFINITE, |d| {
                // Rounded up: under a millisecond left is 1, not "passed" (0).
                u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(HG_TIMEOUT_INFINITE - 2)
            })
    })
}

/// The bulkhead's `call_timeout_ms` (`HG_TIMEOUT_INFINITE` when off, or for NULL). The library
/// arms no timer for it (docs/design.md "call timeout"): a C host that wants it arms its own timer per call and, on
/// overrun, calls `hg_permit_call_timed_out()` (then releases the permit when the work really
/// ends).
///
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_call_timeout_ms(bh: *const hg_bulkhead) -> u64 {
    boundary(|| {
        // SAFETY: NULL or a live handle (contract).
        let Some(core) = (unsafe { core(bh) }) else {
            return HG_TIMEOUT_INFINITE;
        };
        core.call_timeout().map_or(HG_TIMEOUT_INFINITE, |d| {
            u64::try_from(d.as_millis()).unwrap_or(HG_TIMEOUT_INFINITE - 2)
        })
    })
}
