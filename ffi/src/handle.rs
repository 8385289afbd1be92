//! Opaque handles and the casts between them and their Rust types (the model is rustls-ffi's
//! `Castable`): `hg_bulkhead` / `hg_registry` are reference-counted (`Arc`), `hg_permit` is a
//! box owned by the caller.

use std::sync::{Arc, Weak};

use hullguard_core::{Bulkhead as CoreBulkhead, OwnedPermit, Registry as CoreRegistry};

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
/// free with `hg_permit_free()` (which releases first if still held). A permit keeps its
/// bulkhead alive, so the bulkhead may be freed first.
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

/// What an `hg_permit*` points to: the core's call (its permits and its guarded call), until
/// it is released, and a weak reference to its bulkhead that counts a release of an already
/// released permit (`released_twice_total`).
pub(crate) struct PermitBox {
    pub(crate) call: Option<OwnedPermit>,
    pub(crate) weak: Weak<CoreBulkhead>,
}

impl PermitBox {
    /// A new `hg_permit*` owning `call`, a call of `bh`.
    pub(crate) fn into_raw(bh: &Arc<CoreBulkhead>, call: OwnedPermit) -> *mut hg_permit {
        Box::into_raw(Box::new(PermitBox {
            call: Some(call),
            weak: Arc::downgrade(bh),
        }))
        .cast()
    }
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

/// Takes a permit box back (to free it).
///
/// # Safety
/// As [`permit_mut`]; the caller gives up the permit.
pub(crate) unsafe fn permit_take(p: *mut hg_permit) -> Box<PermitBox> {
    // SAFETY: `p` came from `Box::into_raw` in `PermitBox::into_raw` (contract).
    unsafe { Box::from_raw(p.cast::<PermitBox>()) }
}
