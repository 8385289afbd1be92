//! `hg_bulkhead_*`: one bulkhead through the C ABI.

use std::{ffi::c_void, sync::Arc, time::Duration};

use hullguard_core::{
    AcquireError, Admission, Bulkhead as CoreBulkhead, CallStart, ClockSource, OwnedPermit, Reason,
    Ticket,
};

use crate::{
    async_wait::{self, Registered, hg_acquire_callback},
    boundary::{boundary, non_null, try_mut},
    config::{
        HG_TIMEOUT_INFINITE, StateChange, call_timeout, hg_config, hg_drain_result, hg_stats,
        read_config, write_stats,
    },
    handle::{
        BulkheadHandle, PermitBox, bulkhead_into_raw, bulkhead_ref, bulkhead_release,
        bulkhead_retain, hg_bulkhead, hg_permit,
    },
    status::{hg_reason, hg_status},
};

/// A queued acquire's handle, for `hg_ticket_cancel()`.
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
/// Thread-safety: the bulkhead may be used from any number of threads at once.
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

/// Reads `config` and builds a bulkhead on `clock` with its state-change callback.
///
/// # Safety
/// `config` is non-null and points to an `hg_config` (the exports' contract).
unsafe fn new_bulkhead(
    config: *const hg_config,
    clock: ClockSource,
    out: &mut *mut hg_bulkhead,
) -> hg_status {
    // SAFETY: per the contract.
    let c = match unsafe { read_config(config) } {
        Ok(c) => c,
        Err(_) => return hg_status::HG_STATUS_INVALID_ARGUMENT,
    };
    let observer = c.on_state_change.map(StateChange::shared);
    match CoreBulkhead::with_observer(c.config, clock, observer, None) {
        Ok(core) => {
            *out = bulkhead_into_raw(BulkheadHandle {
                core: Arc::new(core),
                owned: true,
            });
            hg_status::HG_STATUS_OK
        }
        Err(hullguard_core::ConfigError::MaxQueue) => hg_status::HG_STATUS_OUT_OF_MEMORY,
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

/// `hg_bulkhead_new()` with the host's clock (the `queue_wait_*` stats use it; default: the
/// system's monotonic clock). Tests use it to run on virtual time.
///
/// Parameters:
///   now_ns: required; must be callable from any thread, must not block, must never go back.
///   user_data: passed to `now_ns`; must stay valid until the bulkhead and its permits are gone.
///
/// Returns: as `hg_bulkhead_new()`.
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
/// reference twice is undefined behaviour (as in rustls-ffi).
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_free(bh: *const hg_bulkhead) {
    boundary(|| {
        if !bh.is_null() {
            // SAFETY: the caller gives up a live reference (contract).
            unsafe { bulkhead_release(bh) };
        }
    })
}

/// Hands a granted permit to the caller.
fn grant(permit: PermitBox, out: &mut *mut hg_permit) -> hg_status {
    *out = permit.into_raw();
    hg_status::HG_STATUS_OK
}

/// A core acquire's result (an owned permit carrying its call) as a status and `*out`.
pub(crate) fn grant_owned(
    r: Result<OwnedPermit, AcquireError>,
    out: &mut *mut hg_permit,
) -> hg_status {
    match r {
        Ok(p) => grant(PermitBox::from_owned(p), out),
        Err(e) => (&e).into(),
    }
}

/// A queued acquire that settled (its call concluded) as a status and `*out`.
fn deliver(r: Result<*mut hg_permit, Reason>, out: &mut *mut hg_permit) -> hg_status {
    let (status, permit) = async_wait::status_of(r);
    if status == hg_status::HG_STATUS_OK {
        *out = permit;
    }
    status
}

/// Steps 1–2 of a guarded call (DESIGN §4) around `admit`, for the acquire paths whose
/// admission the core does not wrap: the core's `begin_call_for` (a bad weight is
/// `HG_STATUS_INVALID_ARGUMENT` — never counted, never a probe — even while the circuit is
/// open, as in `hg_bulkhead_try_acquire()`; then the breaker's check), then `admit`; a refused
/// admission ends the call `ignored`. On a plain bulkhead the call is inert and free.
fn guarded(
    core: &CoreBulkhead,
    weight: u64,
    admit: impl FnOnce() -> Result<Admission, AcquireError>,
) -> Result<(Admission, CallStart), hg_status> {
    let call = core
        .begin_call_for(weight)
        .map_err(|e| hg_status::from(&e))?;
    core.end_call_if_refused(call, admit())
        .map(|a| (a, call))
        .map_err(|e| hg_status::from(&e))
}

/// Takes `weight` permits now, or fails without waiting.
///
/// Parameters:
///   bh: the bulkhead. weight: `1 .. max_concurrent`. out: receives the permit on `HG_STATUS_OK`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_CONCURRENCY_LIMIT` when not admitted at once (also while
///   waiters are queued: no barging); `HG_STATUS_SHUTDOWN` after close;
///   `HG_STATUS_INVALID_ARGUMENT` for a bad weight; `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: the caller owns `*out` (release it, then `hg_permit_free()`).
/// Thread-safety: any thread. Lock-free.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_try_acquire(
    bh: *const hg_bulkhead,
    weight: u64,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let out = try_mut!(out);
        // The core's guarded try: weight, breaker check, admission (a refusal ends the call
        // `ignored`).
        grant_owned(core.try_acquire_owned(weight), out)
    })
}

/// Waits on this thread for `weight` permits.
///
/// Parameters:
///   timeout_ms: `HG_TIMEOUT_DEFAULT` uses the configured `queue_timeout_ms`;
///   `HG_TIMEOUT_INFINITE` waits without a deadline; 0 does not queue.
///
/// Returns: `HG_STATUS_OK` with `*out`; `HG_STATUS_TIMEOUT`; `HG_STATUS_QUEUE_LIMIT`;
///   `HG_STATUS_CONCURRENCY_LIMIT`; `HG_STATUS_SHUTDOWN`; `HG_STATUS_INVALID_ARGUMENT`;
///   `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: blocks the calling thread (park/unpark); never call it from an
/// `hg_acquire_callback`.
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
        // The core's guarded wait: weight, breaker check, admission, and the call's end
        // `ignored` on a refusal.
        grant_owned(
            core.acquire_blocking_owned(weight, call_timeout(timeout_ms)),
            out,
        )
    })
}

/// Acquires without blocking: a permit now, or a queued ticket whose callback runs exactly once.
///
/// Parameters:
///   timeout_ms: as `hg_bulkhead_acquire_timeout()`; the deadline is armed on an internal
///   timer thread started on first use. callback: required. user_data: passed back to it.
///   out: receives the permit on `HG_STATUS_OK`. ticket: receives the ticket on
///   `HG_STATUS_QUEUED`.
///
/// Returns: `HG_STATUS_OK` with `*out` when a permit was free (the callback never runs);
///   `HG_STATUS_QUEUED` with `*ticket` (the callback then runs exactly once, with
///   `HG_STATUS_OK` and a permit on a grant, or the rejection status and NULL — timeout,
///   cancel (`HG_STATUS_ABORTED`), close, resize); a rejection status when neither (the
///   callback never runs); `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT`.
///
/// The callback runs on the thread that settled the ticket: a releasing thread, the caller of
/// `hg_bulkhead_close()` / `hg_bulkhead_set_limit()`, the timer thread, or the caller of
/// `hg_ticket_cancel()` before that call returns. It may call any non-blocking `hg_*`
/// function; it must not block and must not free the owning bulkhead.
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
        let Some(callback) = callback else {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        };
        let out = try_mut!(out);
        let ticket = try_mut!(ticket);
        let timeout = call_timeout(timeout_ms).unwrap_or(core.queue_timeout());
        let (admission, call) =
            match guarded(core, weight, || core.enqueue_within(weight, timeout, None)) {
                Ok(a) => a,
                Err(s) => return s,
            };
        match admission {
            Admission::Granted => grant(PermitBox::new(core.clone(), weight, call), out),
            Admission::Queued(t) => {
                match async_wait::register(core, t, call, callback, user_data, timeout) {
                    Registered::Queued => {
                        *ticket = t.to_raw();
                        hg_status::HG_STATUS_QUEUED
                    }
                    Registered::Settled(r) => deliver(r, out),
                }
            }
        }
    })
}

/// The polling API (for cooperative schedulers): takes `weight` permits now, or queues and
/// returns a ticket to poll with `hg_ticket_poll()` — no callback, no thread, no timer.
///
/// Returns: `HG_STATUS_OK` with `*out`; `HG_STATUS_QUEUED` with `*ticket` (poll it, or give it
///   up with `hg_ticket_cancel()` / `hg_ticket_cancel_reason()`, which then return
///   `HG_STATUS_OK` and nothing more happens); a rejection status; `HG_STATUS_NULL_PARAMETER`;
///   `HG_STATUS_INVALID_ARGUMENT`. A queued ticket has no deadline: the caller owns its timing.
///
/// Thread-safety: any thread; a ticket must be polled by one thread at a time.
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
        let (admission, call) = match guarded(core, weight, || core.enqueue(weight, None)) {
            Ok(a) => a,
            Err(s) => return s,
        };
        match admission {
            Admission::Granted => grant(PermitBox::new(core.clone(), weight, call), out),
            Admission::Queued(t) => {
                async_wait::track(core, t, call);
                *ticket = t.to_raw();
                hg_status::HG_STATUS_QUEUED
            }
        }
    })
}

/// Polls a ticket from `hg_bulkhead_enqueue()`.
///
/// Returns: `HG_STATUS_QUEUED` while it waits; `HG_STATUS_OK` with `*out` once granted (the
///   ticket is then consumed); the rejection status once rejected (consumed);
///   `HG_STATUS_ALREADY_SETTLED` for a ticket that is not live (consumed or cancelled);
///   `HG_STATUS_NULL_PARAMETER`.
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
        let t = Ticket::from_raw(ticket);
        match core.poll_ticket(t, None).map(async_wait::settled) {
            Ok(None) => hg_status::HG_STATUS_QUEUED,
            Ok(Some(s)) => deliver(async_wait::polled(core, t, s), out),
            Err(_) => hg_status::HG_STATUS_ALREADY_SETTLED,
        }
    })
}

/// Cancels a queued `hg_bulkhead_acquire_async` with a reason: `HG_REASON_ABORTED` for a
/// caller's cancel (what `hg_ticket_cancel()` does), `HG_REASON_TIMEOUT` for a host that runs
/// its own timers (the callback then gets `HG_STATUS_TIMEOUT` and the stats count a timeout).
///
/// Returns: as `hg_ticket_cancel()`, plus `HG_STATUS_INVALID_ARGUMENT` for a reason other than
///   `HG_REASON_ABORTED` / `HG_REASON_TIMEOUT`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_ticket_cancel_reason(
    bh: *const hg_bulkhead,
    ticket: hg_ticket,
    reason: u32,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let reason = match reason {
            r if r == hg_reason::HG_REASON_ABORTED as u32 => Reason::Aborted,
            r if r == hg_reason::HG_REASON_TIMEOUT as u32 => Reason::Timeout,
            _ => return hg_status::HG_STATUS_INVALID_ARGUMENT,
        };
        cancel_with(core, ticket, reason)
    })
}

/// The outcome of a cancel, for both cancel entry points.
fn cancel_with(core: &Arc<CoreBulkhead>, ticket: hg_ticket, reason: Reason) -> hg_status {
    if async_wait::cancel(core, Ticket::from_raw(ticket), reason) {
        hg_status::HG_STATUS_OK
    } else {
        hg_status::HG_STATUS_ALREADY_SETTLED
    }
}

/// Cancels a queued `hg_bulkhead_acquire_async`.
///
/// Returns: `HG_STATUS_OK` when the cancel won (the callback has already run, with
///   `HG_STATUS_ABORTED`, before this returns); `HG_STATUS_ALREADY_SETTLED` when a grant,
///   timeout or close won (its callback runs, or has run, with that outcome);
///   `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: any thread, including from a callback. Lock-free in the core (O(1)).
#[unsafe(no_mangle)]
pub extern "C" fn hg_ticket_cancel(bh: *const hg_bulkhead, ticket: hg_ticket) -> hg_status {
    boundary(|| cancel_with(try_core!(bh), ticket, Reason::Aborted))
}

/// Changes the limit (`1 .. max_concurrent`). Never blocks, never revokes: growing grants
/// queued waiters; shrinking lets `available` go negative and rejects queued waiters heavier
/// than the new limit (`HG_STATUS_CONCURRENCY_LIMIT` through their callbacks).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT`; `HG_STATUS_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_set_limit(bh: *const hg_bulkhead, limit: u64) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        match core.set_limit(limit) {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(_) => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    })
}

/// Stops admission for good: queued waiters are rejected `HG_STATUS_SHUTDOWN` at once (their
/// callbacks run on this thread); in-flight permits release normally. Idempotent.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_close(bh: *const hg_bulkhead) -> hg_status {
    boundary(|| {
        try_core!(bh).close();
        hg_status::HG_STATUS_OK
    })
}

/// Waits (without closing) until the bulkhead is idle or `timeout_ms` passes
/// (`HG_TIMEOUT_INFINITE` / `HG_TIMEOUT_DEFAULT`: until idle; 0: report at once).
///
/// Returns: `HG_STATUS_OK` with `*out` filled (`drained` says which); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: blocks the calling thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_drain(
    bh: *const hg_bulkhead,
    timeout_ms: u64,
    out: *mut hg_drain_result,
) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        let out = try_mut!(out);
        let timeout = call_timeout(timeout_ms).filter(|t| *t != Duration::MAX);
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
/// `hg_bulkhead_release_units()`. No double-release detection beyond refusing a return that
/// would lift `available` above the limit.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_try_acquire_units(bh: *const hg_bulkhead, weight: u64) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        match core.try_acquire_units(weight) {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(e) => (&e).into(),
        }
    })
}

/// Returns `weight` permits taken with `hg_bulkhead_try_acquire_units()`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` when the return would lift
///   `available` above the limit (nothing changes); `HG_STATUS_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_release_units(bh: *const hg_bulkhead, weight: u64) -> hg_status {
    boundary(|| {
        let core = try_core!(bh);
        match core.release_units_checked(weight) {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(_) => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    })
}

/// The bulkhead's `call_timeout_ms` (`HG_TIMEOUT_INFINITE` when off, or for NULL). The library
/// arms no timer for it (DESIGN §4): a C host that wants it arms its own timer per call and, on
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
