//! Opaque handles and the casts between them and their Rust types (the model is rustls-ffi's
//! `Castable`): `hg_bulkhead` / `hg_registry` are reference-counted (`Arc`), `hg_permit` is a
//! box owned by the caller.

use std::{
    cell::RefCell,
    mem::MaybeUninit,
    sync::{Arc, Weak},
};

use hullguard_core::{Bulkhead as CoreBulkhead, OwnedPermit, Registry as CoreRegistry};

use crate::status::hg_status;

/// A bulkhead: a bounded pool of permits plus a fixed-capacity waiter queue. Reference-counted:
/// `hg_bulkhead_retain()` adds a reference, `hg_bulkhead_free()` drops one. Thread-safe.
pub struct hg_bulkhead {
    _private: [u8; 0],
}

/// A registry of bulkheads, one per key. Reference-counted like `hg_bulkhead`. Thread-safe.
pub struct hg_registry {
    _private: [u8; 0],
}

/// Permits held by one acquire. Owned by the caller: release with `hg_permit_release*()`,
/// free with `hg_permit_free()` (which releases first if still held). A held permit keeps its
/// bulkhead alive, so the bulkhead may be freed first; a released one keeps a standalone
/// bulkhead's memory until it is freed (a registry key's only weakly: it never pins the key).
pub struct hg_permit {
    _private: [u8; 0],
}

/// What an `hg_bulkhead*` points to.
pub(crate) struct BulkheadHandle {
    pub(crate) core: Arc<CoreBulkhead>,
    /// A standalone bulkhead is closed when its last handle is freed (pending async waits are
    /// then rejected `HG_STATUS_SHUTDOWN`, so no callback is lost); a registry's is not.
    pub(crate) owned: bool,
}

impl Drop for BulkheadHandle {
    fn drop(&mut self) {
        if self.owned {
            self.core.close();
        }
    }
}

/// What an `hg_registry*` points to.
pub(crate) struct RegistryHandle {
    pub(crate) reg: CoreRegistry,
}

impl Drop for RegistryHandle {
    fn drop(&mut self) {
        self.reg.close();
    }
}

/// What an `hg_permit*` points to: the core's call (its permits and its guarded call) until it
/// is released, then a reference to its bulkhead that counts a release of an already released
/// permit (`released_twice_total`).
pub(crate) struct PermitBox {
    pub(crate) call: Option<OwnedPermit>,
    pub(crate) released: Option<Released>,
    /// The permit came through a standalone bulkhead's own handle (`hg_bulkhead_new`; set by
    /// [`pin_on`]): at the release it keeps the call's strong reference (see [`Released`]).
    pub(crate) pinned: bool,
}

/// The bulkhead reference a released permit keeps until it is freed.
///
/// * `Pinned`: the call's own strong reference, kept — the release then touches no reference
///   count, and the free drops it (one shared-counter RMW a permit: the acquire's clone and
///   this drop; the weak reference cost two more). For standalone bulkheads, whose lifetime
///   nothing else observes.
/// * `Unpinned`: a weak reference, taken at the release — a released, unfreed permit must not
///   pin a registry key against eviction (docs/design.md §7, the cross-layer vector
///   `registry_key_limit_and_lru_eviction`).
pub(crate) enum Released {
    Pinned(Arc<CoreBulkhead>),
    Unpinned(Weak<CoreBulkhead>),
}

impl Released {
    /// The bulkhead, if it still lives.
    pub(crate) fn bulkhead(&self) -> Option<Arc<CoreBulkhead>> {
        match self {
            Released::Pinned(bh) => Some(bh.clone()),
            Released::Unpinned(w) => w.upgrade(),
        }
    }
}

/// Permit boxes freed on this thread, kept for its next acquires: an acquire + release + free
/// then costs no `malloc`/`free` pair (they were about 130 of the handle API's 470
/// instructions). At most [`SPARE_BOXES`] per thread; the rest go back to the allocator, and
/// a thread's spares when it exits.
// The boxes are the point: each is a permit's allocation, kept to be handed out again.
#[allow(clippy::vec_box)]
struct SpareBoxes(Vec<Box<MaybeUninit<PermitBox>>>);

const SPARE_BOXES: usize = 32;

thread_local! {
    static SPARE: RefCell<SpareBoxes> = const { RefCell::new(SpareBoxes(Vec::new())) };
}

impl PermitBox {
    /// A new, unpinned `hg_permit*` owning `call` (in a spare box of this thread's, or a new
    /// one).
    pub(crate) fn into_raw(call: OwnedPermit) -> *mut hg_permit {
        let value = PermitBox {
            call: Some(call),
            released: None,
            pinned: false,
        };
        // `try_with`: a thread being torn down has no spares (and allocates).
        let spare = SPARE
            .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.0.pop()))
            .ok()
            .flatten();
        let filled: Box<PermitBox> = match spare {
            Some(mut b) => {
                b.write(value);
                // SAFETY: written just above.
                unsafe { b.assume_init() }
            }
            None => Box::new(value),
        };
        Box::into_raw(filled).cast()
    }
}

/// Frees a permit box: its value is dropped here, its allocation kept for this thread's next
/// acquire (up to [`SPARE_BOXES`]) or returned to the allocator.
///
/// # Safety
/// `p` is non-null, came from `PermitBox::into_raw` and is not freed; the caller gives up the
/// permit.
pub(crate) unsafe fn permit_free_box(p: *mut hg_permit) -> Option<OwnedPermit> {
    // SAFETY: `p` came from `Box::into_raw` of a `Box<PermitBox>` (contract); the value is
    // moved out once and the allocation reused as uninitialised.
    let b: Box<MaybeUninit<PermitBox>> = unsafe { Box::from_raw(p.cast()) };
    // SAFETY: initialised since `into_raw`; read exactly once. (Moving it out measured
    // cheaper than dropping it in place: 396 against 415 instructions a permit.)
    let value = unsafe { b.assume_init_read() };
    let kept = SPARE.try_with(|s| match s.try_borrow_mut() {
        Ok(mut s) if s.0.len() < SPARE_BOXES => {
            s.0.push(b);
            None
        }
        _ => Some(b),
    });
    // Not kept (a full cache, a thread being torn down): the allocation goes back now.
    drop(kept);
    let PermitBox { call, released, .. } = value;
    drop(released);
    call
}

/// After a synchronous acquire through the handle `bh` answered `status`: the new permit in
/// `*out` is pinned if `bh` is a standalone bulkhead's own handle (see [`Released`]). Returns
/// `status`. (A permit handed to an async callback stays unpinned: the callback knows no
/// handle.)
///
/// # Safety
/// `bh` is a live handle (as [`bulkhead_ref`]); on `HG_STATUS_OK`, `*out` is the permit the
/// acquire just made.
pub(crate) unsafe fn pin_on(
    bh: *const hg_bulkhead,
    status: hg_status,
    out: &*mut hg_permit,
) -> hg_status {
    if status == hg_status::HG_STATUS_OK {
        // SAFETY: contract.
        if unsafe { bulkhead_ref(bh) }.owned {
            // SAFETY: contract: a live permit nobody else uses yet.
            unsafe { permit_mut(*out) }.pinned = true;
        }
    }
    status
}

pub(crate) fn bulkhead_into_raw(h: BulkheadHandle) -> *mut hg_bulkhead {
    Arc::into_raw(Arc::new(h)).cast_mut().cast()
}

pub(crate) fn registry_into_raw(h: RegistryHandle) -> *mut hg_registry {
    Arc::into_raw(Arc::new(h)).cast_mut().cast()
}

/// # Safety
/// `p` is non-null and came from `bulkhead_into_raw` (or a retain) and is not freed.
pub(crate) unsafe fn bulkhead_ref<'a>(p: *const hg_bulkhead) -> &'a BulkheadHandle {
    // SAFETY: per the contract, `p` is a live `Arc<BulkheadHandle>` pointer.
    unsafe { &*p.cast::<BulkheadHandle>() }
}

/// # Safety
/// As [`bulkhead_ref`], for registries.
pub(crate) unsafe fn registry_ref<'a>(p: *const hg_registry) -> &'a RegistryHandle {
    // SAFETY: per the contract, `p` is a live `Arc<RegistryHandle>` pointer.
    unsafe { &*p.cast::<RegistryHandle>() }
}

/// # Safety
/// `p` is non-null, came from `PermitBox::into_raw` and is not freed; no other reference to it
/// is used during the call.
pub(crate) unsafe fn permit_mut<'a>(p: *mut hg_permit) -> &'a mut PermitBox {
    // SAFETY: per the contract.
    unsafe { &mut *p.cast::<PermitBox>() }
}

/// Adds a reference to a bulkhead handle.
///
/// # Safety
/// As [`bulkhead_ref`].
pub(crate) unsafe fn bulkhead_retain(p: *const hg_bulkhead) {
    // SAFETY: `p` is a live pointer from `Arc::into_raw` (contract).
    unsafe { Arc::increment_strong_count(p.cast::<BulkheadHandle>()) }
}

/// Drops a reference to a bulkhead handle.
///
/// # Safety
/// As [`bulkhead_ref`]; the caller gives up this reference.
pub(crate) unsafe fn bulkhead_release(p: *const hg_bulkhead) {
    // SAFETY: `p` is a live pointer from `Arc::into_raw` whose reference the caller owns.
    drop(unsafe { Arc::from_raw(p.cast::<BulkheadHandle>()) })
}

/// # Safety
/// As [`registry_ref`].
pub(crate) unsafe fn registry_retain(p: *const hg_registry) {
    // SAFETY: as `bulkhead_retain`.
    unsafe { Arc::increment_strong_count(p.cast::<RegistryHandle>()) }
}

/// # Safety
/// As [`registry_ref`]; the caller gives up this reference.
pub(crate) unsafe fn registry_release(p: *const hg_registry) {
    // SAFETY: as `bulkhead_release`.
    drop(unsafe { Arc::from_raw(p.cast::<RegistryHandle>()) })
}
