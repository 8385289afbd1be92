//! The panic boundary and the pointer checks every export goes through (the model is
//! rustls-ffi's `ffi_panic_boundary!` / `try_ref_from_ptr!`).

use crate::status::hg_status;

/// What an export returns when its body panicked (no panic ever crosses into C).
pub(crate) trait PanicOrDefault {
    fn on_panic() -> Self;
}

impl PanicOrDefault for hg_status {
    fn on_panic() -> Self {
        hg_status::HG_STATUS_PANIC
    }
}

impl PanicOrDefault for () {
    fn on_panic() -> Self {}
}

impl PanicOrDefault for u64 {
    fn on_panic() -> Self {
        0
    }
}

impl PanicOrDefault for bool {
    fn on_panic() -> Self {
        false
    }
}

impl<T> PanicOrDefault for *mut T {
    fn on_panic() -> Self {
        core::ptr::null_mut()
    }
}

impl<T> PanicOrDefault for *const T {
    fn on_panic() -> Self {
        core::ptr::null()
    }
}

/// Runs `f`, turning a panic into the return type's default.
pub(crate) fn boundary<R: PanicOrDefault>(f: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| R::on_panic())
}

/// `HG_STATUS_OK` for `Ok`, else `err` (the status of a core operation that returns nothing).
pub(crate) fn ok_or<T, E>(r: Result<T, E>, err: hg_status) -> hg_status {
    r.map_or(err, |_| hg_status::HG_STATUS_OK)
}

/// `let x = try_mut!(ptr);` — a unique reference, or return `HG_STATUS_NULL_PARAMETER`.
macro_rules! try_mut {
    ($p:expr) => {{
        let p = $p;
        if p.is_null() {
            return $crate::status::hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: non-null; the caller guarantees it points to a live, writable value it
        // does not share during the call (documented per function).
        unsafe { &mut *p }
    }};
}

/// `non_null!(ptr);` — return `HG_STATUS_NULL_PARAMETER` if NULL.
macro_rules! non_null {
    ($p:expr) => {
        if $p.is_null() {
            return $crate::status::hg_status::HG_STATUS_NULL_PARAMETER;
        }
    };
}

/// `let x = try_val!(result);` — the value, or return the `hg_status` error.
macro_rules! try_val {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(s) => return s,
        }
    };
}

pub(crate) use {non_null, try_mut, try_val};
