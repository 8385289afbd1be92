//! `hg_permit_*`: permits held by one acquire. Each `hg_permit` holds the core's `Call`: its
//! permits and its guarded call, ended exactly once by the core (docs/design.md, "Call").

use std::sync::Arc;

use hullguard_core::{Outcome, OwnedPermit};

use crate::{
    boundary::{boundary, ok_or, try_val},
    handle::{PermitBox, Released, hg_permit, permit_free_box, permit_mut},
    status::{hg_outcome, hg_status},
};

/// The permit box behind a non-null `hg_permit*`, or `HG_STATUS_NULL_PARAMETER`.
macro_rules! try_permit {
    ($p:expr) => {{
        let p = $p;
        if p.is_null() {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: non-null; a live permit the caller does not use elsewhere during the call
        // (the contract of every `hg_permit_*` function).
        unsafe { permit_mut(p) }
    }};
}

/// The call a permit still holds, or `HG_STATUS_ALREADY_RELEASED`.
fn held(p: &mut PermitBox) -> Result<&mut OwnedPermit, hg_status> {
    p.call.as_mut().ok_or(hg_status::HG_STATUS_ALREADY_RELEASED)
}

/// Ends the call with `outcome` (it releases the permits), or reports a second release.
fn release(p: &mut PermitBox, outcome: Outcome) -> hg_status {
    release_with(p, |call| call.end_into_handle(outcome))
}

/// Ends the call with `end` (which releases the permits and returns the call's bulkhead), or
/// reports a second release.
pub(crate) fn release_with(
    p: &mut PermitBox,
    end: impl FnOnce(OwnedPermit) -> Arc<hullguard_core::Bulkhead>,
) -> hg_status {
    if let Some(call) = p.call.take() {
        // A reference to the call's bulkhead stays with the permit, to count a second release:
        // the call's own (pinned) or a weak one (see `Released`).
        let bh = end(call);
        p.released = Some(if p.pinned {
            Released::Pinned(bh)
        } else {
            Released::Unpinned(Arc::downgrade(&bh))
        });
        return hg_status::HG_STATUS_OK;
    }
    if let Some(core) = p.released.as_ref().and_then(Released::bulkhead) {
        core.record_double_release();
    }
    hg_status::HG_STATUS_ALREADY_RELEASED
}

/// Returns the permits to their bulkhead (the head waiter gets them), recording the guarded
/// call as a success (docs/design.md: a plain release is a success; use
/// `hg_permit_release_outcome()` to say otherwise).
///
/// Returns: `HG_STATUS_OK` the first time; `HG_STATUS_ALREADY_RELEASED` afterwards (a no-op,
///   counted in `released_twice_total`, never an extra permit); `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: the permit handle stays valid; free it with `hg_permit_free()`.
/// Thread-safety: a permit must not be used from two threads at once (different permits may).
/// Lock-free; never waits (a grant to the head waiter may run its callback on this thread).
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release(permit: *mut hg_permit) -> hg_status {
    boundary(|| release(try_permit!(permit), Outcome::Success))
}

/// `hg_permit_release()` recording how the guarded call ended (docs/design.md "Outcomes"), for
/// the breaker and the adaptive limit of the permit's bulkhead (on a bulkhead without policies
/// the outcome is checked and otherwise unused).
///
/// Parameters:
///   outcome: an `hg_outcome`: `HG_OUTCOME_SUCCESS`; `HG_OUTCOME_FAILURE` (an error, a 5xx, a
///   call timeout); `HG_OUTCOME_IGNORED` (cancelled: no breaker count, no adaptive sample);
///   `HG_OUTCOME_OVERLOAD` (HTTP 429: a success for the breaker, a failure for the limit).
///
/// Returns: as `hg_permit_release()`, plus `HG_STATUS_INVALID_ARGUMENT` for an unknown outcome
///   (nothing is released). After `hg_permit_call_timed_out()` the outcome was already
///   recorded (failure): this only returns the permits.
/// Thread-safety: as `hg_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release_outcome(permit: *mut hg_permit, outcome: u32) -> hg_status {
    boundary(|| {
        // `hg_outcome` numbers are the core's outcome codes (checked below, at compile time).
        let Some(outcome) = u8::try_from(outcome).ok().and_then(Outcome::from_code) else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        release(try_permit!(permit), outcome)
    })
}

const _: () = {
    assert!(hg_outcome::HG_OUTCOME_SUCCESS as u8 == Outcome::Success as u8);
    assert!(hg_outcome::HG_OUTCOME_FAILURE as u8 == Outcome::Failure as u8);
    assert!(hg_outcome::HG_OUTCOME_IGNORED as u8 == Outcome::Ignored as u8);
    assert!(hg_outcome::HG_OUTCOME_OVERLOAD as u8 == Outcome::Overload as u8);
};

/// The host's own `call_timeout_ms` timer fired for this permit's call (the library arms no
/// timer: docs/design.md "call timeout"). The core counts one `call_timeout` in
/// `hg_stats.rejected[HG_REASON_CALL_TIMEOUT]` and records the call's outcome as a failure,
/// now. The permits stay held until the work really ends: then release the permit as usual —
/// that release records nothing more.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_ALREADY_SETTLED` when this permit's call already timed
///   out (nothing is counted again); `HG_STATUS_ALREADY_RELEASED` for a released permit (too
///   late: nothing is counted); `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: as `hg_permit_release()` (one thread at a time per permit: a timer thread
/// must not race the worker's release of the same permit — serialize them). Never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_call_timed_out(permit: *mut hg_permit) -> hg_status {
    boundary(|| {
        let call = try_val!(held(try_permit!(permit)));
        // The core's call-timeout step; `false`: it was reported already.
        if call.timed_out() {
            hg_status::HG_STATUS_OK
        } else {
            hg_status::HG_STATUS_ALREADY_SETTLED
        }
    })
}

/// Returns `n` of the held permits now (`1 .. held`, a refund once actual usage is known); the
/// rest stay held and the guarded call goes on.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for `n` out of range (nothing
///   changes); `HG_STATUS_ALREADY_RELEASED`; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: as `hg_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release_partial(permit: *mut hg_permit, n: u64) -> hg_status {
    boundary(|| {
        let call = try_val!(held(try_permit!(permit)));
        ok_or(
            call.release_partial(n),
            hg_status::HG_STATUS_INVALID_ARGUMENT,
        )
    })
}

/// The permits still held (0 once released, or for NULL).
///
/// Thread-safety: as `hg_permit_release()`; only reads.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_weight(permit: *const hg_permit) -> u64 {
    boundary(|| {
        // SAFETY: NULL or a live permit (contract); only read.
        let p = unsafe { permit.cast::<PermitBox>().as_ref() };
        p.and_then(|p| p.call.as_ref()).map_or(0, |c| c.weight())
    })
}

/// Frees a permit. One still held is reclaimed by the core first: its permits are counted in
/// `leaked_total` and returned, and its guarded call ends `ignored` (docs/design.md). NULL is
/// accepted and ignored.
///
/// Memory and lifetimes: after this call `permit` is dangling. Must not be called twice with
/// the same value. Thread-safety: as `hg_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_free(permit: *mut hg_permit) {
    boundary(|| {
        if permit.is_null() {
            return;
        }
        // SAFETY: the caller gives up a live permit (contract).
        if let Some(call) = unsafe { permit_free_box(permit) } {
            call.reclaim();
        }
    })
}
