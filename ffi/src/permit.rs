//! `hg_permit_*`: permits held by one acquire.

use crate::{
    boundary::boundary,
    handle::{hg_permit, permit_free, permit_mut},
    status::{hg_outcome, hg_status},
};

fn release(permit: *mut hg_permit) -> hg_status {
    if permit.is_null() {
        return hg_status::HG_STATUS_NULL_PARAMETER;
    }
    // SAFETY: non-null; a live permit the caller does not use elsewhere during the call.
    let p = unsafe { permit_mut(permit) };
    if p.release() {
        hg_status::HG_STATUS_OK
    } else {
        if let Some(core) = p.weak.upgrade() {
            core.record_double_release();
        }
        hg_status::HG_STATUS_ALREADY_RELEASED
    }
}

/// Returns the permits to their bulkhead (the head waiter gets them).
///
/// Returns: `HG_STATUS_OK` the first time; `HG_STATUS_ALREADY_RELEASED` afterwards (a no-op,
///   counted in `released_twice_total`, never an extra permit); `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: the permit handle stays valid; free it with `hg_permit_free()`.
/// Thread-safety: a permit must not be used from two threads at once. Lock-free.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release(permit: *mut hg_permit) -> hg_status {
    boundary(|| release(permit))
}

/// `hg_permit_release()` recording how the guarded call ended (DESIGN §4 outcomes; recorded
/// by the policies once a breaker or adaptive limit is attached).
///
/// Returns: as `hg_permit_release()`, plus `HG_STATUS_INVALID_ARGUMENT` for an unknown outcome.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release_outcome(permit: *mut hg_permit, outcome: u32) -> hg_status {
    boundary(|| {
        let known = [
            hg_outcome::HG_OUTCOME_SUCCESS,
            hg_outcome::HG_OUTCOME_FAILURE,
            hg_outcome::HG_OUTCOME_IGNORED,
        ];
        if !known.iter().any(|o| *o as u32 == outcome) {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        }
        release(permit)
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

/// Frees a permit, releasing it first if still held (counted in `leaked_total`). NULL is
/// accepted and ignored.
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
