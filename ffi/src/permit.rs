//! `hg_permit_*`: permits held by one acquire.

use hullguard_core::Outcome;

use crate::{
    boundary::boundary,
    handle::{hg_permit, permit_free, permit_mut},
    status::{hg_outcome, hg_status},
};

fn release(permit: *mut hg_permit, outcome: Outcome) -> hg_status {
    if permit.is_null() {
        return hg_status::HG_STATUS_NULL_PARAMETER;
    }
    // SAFETY: non-null; a live permit the caller does not use elsewhere during the call.
    let p = unsafe { permit_mut(permit) };
    if p.release(outcome) {
        hg_status::HG_STATUS_OK
    } else {
        if let Some(core) = p.weak.upgrade() {
            core.record_double_release();
        }
        hg_status::HG_STATUS_ALREADY_RELEASED
    }
}

/// Returns the permits to their bulkhead (the head waiter gets them), recording the guarded
/// call as a success (DESIGN §4: a plain release is a success; use
/// `hg_permit_release_outcome()` to say otherwise).
///
/// Returns: `HG_STATUS_OK` the first time; `HG_STATUS_ALREADY_RELEASED` afterwards (a no-op,
///   counted in `released_twice_total`, never an extra permit); `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: the permit handle stays valid; free it with `hg_permit_free()`.
/// Thread-safety: a permit must not be used from two threads at once. Lock-free.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release(permit: *mut hg_permit) -> hg_status {
    boundary(|| release(permit, Outcome::Success))
}

/// `hg_permit_release()` recording how the guarded call ended (DESIGN §4 "Outcomes"), for the
/// breaker and the adaptive limit of the permit's bulkhead (on a bulkhead without policies the
/// outcome is checked and otherwise unused).
///
/// Parameters:
///   outcome: an `hg_outcome`: `HG_OUTCOME_SUCCESS`; `HG_OUTCOME_FAILURE` (an error, a 5xx, a
///   call timeout); `HG_OUTCOME_IGNORED` (cancelled: no breaker count, no adaptive sample);
///   `HG_OUTCOME_OVERLOAD` (HTTP 429: a success for the breaker, a failure for the limit).
///
/// Returns: as `hg_permit_release()`, plus `HG_STATUS_INVALID_ARGUMENT` for an unknown outcome
///   (nothing is released). After `hg_permit_call_timed_out()` the outcome was already
///   recorded (failure): this only returns the permits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release_outcome(permit: *mut hg_permit, outcome: u32) -> hg_status {
    boundary(|| {
        // `hg_outcome` numbers are the core's outcome codes (checked below, at compile time).
        match u8::try_from(outcome).ok().and_then(Outcome::from_code) {
            Some(outcome) => release(permit, outcome),
            None => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    })
}

const _: () = {
    assert!(hg_outcome::HG_OUTCOME_SUCCESS as u8 == Outcome::Success as u8);
    assert!(hg_outcome::HG_OUTCOME_FAILURE as u8 == Outcome::Failure as u8);
    assert!(hg_outcome::HG_OUTCOME_IGNORED as u8 == Outcome::Ignored as u8);
    assert!(hg_outcome::HG_OUTCOME_OVERLOAD as u8 == Outcome::Overload as u8);
};

/// The host's own `call_timeout_ms` timer fired for this permit's call (the library arms no
/// timer: DESIGN §4). Counts one `call_timeout` in `hg_stats.rejected[HG_REASON_CALL_TIMEOUT]`
/// and records the call's outcome as a failure, now. The permits stay held until the work
/// really ends: then release the permit as usual — that release records nothing more.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_ALREADY_SETTLED` when this permit's call already timed
///   out (nothing is counted again); `HG_STATUS_ALREADY_RELEASED` for a released permit (too
///   late: nothing is counted); `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: as `hg_permit_release()` (one thread at a time per permit: a timer thread
/// must not race the worker's release of the same permit — serialize them).
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_call_timed_out(permit: *mut hg_permit) -> hg_status {
    boundary(|| {
        if permit.is_null() {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: non-null live permit, not used elsewhere during the call (contract).
        let p = unsafe { permit_mut(permit) };
        let Some(core) = p.held.as_deref() else {
            return hg_status::HG_STATUS_ALREADY_RELEASED;
        };
        // Held with its call ended: only an earlier timeout ends it before the release.
        let Some(call) = p.call.take() else {
            return hg_status::HG_STATUS_ALREADY_SETTLED;
        };
        core.end_call_timed_out(call);
        hg_status::HG_STATUS_OK
    })
}

/// Returns `n` of the held permits now (`1 .. held`); the rest stay held.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for `n` out of range;
///   `HG_STATUS_ALREADY_RELEASED`; `HG_STATUS_NULL_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release_partial(permit: *mut hg_permit, n: u64) -> hg_status {
    boundary(|| {
        if permit.is_null() {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: as `hg_permit_release`.
        let p = unsafe { permit_mut(permit) };
        let Some(core) = p.held.as_ref() else {
            return hg_status::HG_STATUS_ALREADY_RELEASED;
        };
        if n == 0 || n > p.weight {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        }
        p.weight -= n;
        core.release_units(n);
        hg_status::HG_STATUS_OK
    })
}

/// The permits still held (0 once released, or for NULL).
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_weight(permit: *const hg_permit) -> u64 {
    boundary(|| {
        if permit.is_null() {
            return 0;
        }
        // SAFETY: non-null live permit (contract); only read.
        let p = unsafe { permit_mut(permit.cast_mut()) };
        if p.held.is_some() { p.weight } else { 0 }
    })
}

/// Frees a permit, releasing it first if still held (counted in `leaked_total`; its guarded
/// call ends `ignored`, DESIGN §4). NULL is accepted and ignored.
///
/// Memory and lifetimes: after this call `permit` is dangling. Must not be called twice with
/// the same value.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_free(permit: *mut hg_permit) {
    boundary(|| {
        if permit.is_null() {
            return;
        }
        // SAFETY: the caller gives up a live permit (contract).
        let p = unsafe { permit_mut(permit) };
        if let Some(core) = &p.held {
            if p.weight > 0 {
                core.record_leak(p.weight);
            }
        }
        // SAFETY: as above; the drop releases a held permit.
        unsafe { permit_free(permit) };
    })
}
