//! `hg_registry_*` and `hg_origin_key`.

use std::{
    ffi::{c_char, c_void},
    sync::Arc,
};

use hullguard_core::{
    Bulkhead as CoreBulkhead, ClockSource, Registry as CoreRegistry, RegistryConfig,
    config::{OptionId, Value},
    origin_key,
};

use crate::{
    boundary::{boundary, non_null, ok_or, try_mut, try_val},
    bulkhead::{c_clock, grant, hg_now_ns_fn},
    config::{hg_config, hg_stats, read_config, wait_timeout, write_stats},
    handle::{
        BulkheadHandle, RegistryHandle, bulkhead_into_raw, hg_bulkhead, hg_permit, hg_registry,
        registry_into_raw, registry_ref, registry_release, registry_retain,
    },
    status::hg_status,
};

/// One per-key configuration for `hg_registry_new()`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_registry_override {
    /// The key's bytes (UTF-8; not NUL-terminated), `key_len` long.
    pub key: *const c_char,
    pub key_len: usize,
    /// Its configuration (from `hg_config_default()`, then edited).
    pub config: *const hg_config,
}

/// # Safety
/// `p` is NULL or points to `len` readable bytes.
unsafe fn key_str<'a>(p: *const c_char, len: usize) -> Result<&'a str, hg_status> {
    if p.is_null() {
        return Err(hg_status::HG_STATUS_NULL_PARAMETER);
    }
    // SAFETY: `len` readable bytes at `p` (contract).
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|_| hg_status::HG_STATUS_INVALID_ARGUMENT)
}

/// # Safety
/// `reg` is NULL or a live `hg_registry*`.
unsafe fn reg<'a>(reg: *const hg_registry) -> Result<&'a CoreRegistry, hg_status> {
    if reg.is_null() {
        return Err(hg_status::HG_STATUS_NULL_PARAMETER);
    }
    // SAFETY: per the contract.
    Ok(&unsafe { registry_ref(reg) }.reg)
}

/// Creates a registry: one bulkhead per key, created on first use from `defaults` or the key's
/// override; at `max_keys` a new key evicts the least recently used idle entry with no outside
/// handle, or is rejected `HG_STATUS_KEY_LIMIT`.
///
/// Parameters:
///   defaults: required. overrides: `overrides_len` entries (NULL if 0). max_keys:
///   `1 .. 2^32 - 1`. out: receives the registry.
///
/// Overrides (docs/design.md, "one merge rule"): each override is merged over `defaults` field
///   by field, by the core's merge. Every field an override sets wins: the base fields
///   (`max_concurrent`, `max_queue`, `queue_timeout_ms` unless `HG_TIMEOUT_DEFAULT`,
///   `enabled`), the part switches `adaptive_enabled` / `breaker_enabled` (false turns the part
///   off for that key), `adaptive_algorithm` of an enabled part, and every non-zero policy field;
///   a policy field left 0 (or a duration left `HG_TIMEOUT_DEFAULT`) takes the defaults' value
///   (the default when they leave it 0 too). So an override that sets every field wins entirely,
///   and one started as a copy of `defaults` (the recommended way) gets exactly what it says;
///   `call_timeout_ms = HG_TIMEOUT_INFINITE` turns the defaults' call timeout off for that key.
///   URL-shaped override keys (`scheme://…`) are canonicalised like `hg_origin_key()` (so
///   `"https://Api.example"` is the key `"https://api.example:443"`); other keys are bytes.
///   The defaults' `on_state_change` / `on_event` receive every key's events with the key's
///   bytes; an override's callbacks must each be NULL or the defaults' (same function and user
///   data).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (a bad config — `hg_config_check()`
///   names the field —, a non-UTF-8 key, a URL-shaped key without an origin, two overrides of
///   the same key, `max_keys` out of range, an override with other callbacks);
///   `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: reference-counted like `hg_bulkhead`; freeing the last reference
/// closes every bulkhead in it. Thread-safety: any thread; the registry may be used from any
/// number of threads at once.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_new(
    defaults: *const hg_config,
    overrides: *const hg_registry_override,
    overrides_len: usize,
    max_keys: u64,
    out: *mut *mut hg_registry,
) -> hg_status {
    boundary(|| {
        non_null!(defaults);
        let out = try_mut!(out);
        // SAFETY: contract of this function.
        unsafe {
            new_registry(
                defaults,
                overrides,
                overrides_len,
                max_keys,
                ClockSource::default_for_host(),
                out,
            )
        }
    })
}

/// `hg_registry_new()` whose bulkheads all read the host's clock (as
/// `hg_bulkhead_new_with_clock()`): the `_ns` stats, the breaker's open duration and the adaptive
/// limit's RTTs use it. Tests use it to run on virtual time.
///
/// Parameters:
///   now_ns: required; callable from any thread, never blocks, never goes back.
///   user_data: passed to `now_ns`; must stay valid until the registry, its bulkhead handles
///   and its permits are gone.
///
/// Returns: as `hg_registry_new()`. Thread-safety: as `hg_registry_new()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_new_with_clock(
    defaults: *const hg_config,
    overrides: *const hg_registry_override,
    overrides_len: usize,
    max_keys: u64,
    now_ns: hg_now_ns_fn,
    user_data: *mut c_void,
    out: *mut *mut hg_registry,
) -> hg_status {
    boundary(|| {
        non_null!(defaults);
        let Some(f) = now_ns else {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        };
        let out = try_mut!(out);
        // SAFETY: contract of this function.
        unsafe {
            new_registry(
                defaults,
                overrides,
                overrides_len,
                max_keys,
                c_clock(f, user_data),
                out,
            )
        }
    })
}

/// # Safety
/// `defaults` is non-null; the rest as `hg_registry_new()`'s contract.
unsafe fn new_registry(
    defaults: *const hg_config,
    overrides: *const hg_registry_override,
    overrides_len: usize,
    max_keys: u64,
    clock: ClockSource,
    out: &mut *mut hg_registry,
) -> hg_status {
    fn invalid<E>(_: E) -> hg_status {
        hg_status::HG_STATUS_INVALID_ARGUMENT
    }
    // SAFETY: non-null `hg_config` (contract).
    let mut defaults = try_val!(unsafe { read_config(defaults) }.map_err(invalid));
    try_val!(
        defaults
            .partial
            .set(OptionId::MaxKeys, Value::Count(max_keys))
            .map_err(invalid)
    );
    let entries: &[hg_registry_override] = match overrides_len {
        0 => &[],
        n => {
            non_null!(overrides);
            // SAFETY: `overrides_len` readable entries at `overrides` (contract).
            unsafe { std::slice::from_raw_parts(overrides, n) }
        }
    };
    let mut layers = Vec::with_capacity(entries.len());
    for o in entries {
        // SAFETY: each entry's key points to `key_len` bytes (contract).
        let k = try_val!(unsafe { key_str(o.key, o.key_len) });
        non_null!(o.config);
        // SAFETY: non-null `hg_config` (contract).
        let c = try_val!(unsafe { read_config(o.config) }.map_err(invalid));
        if !c.observer.fits(&defaults.observer) {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        }
        layers.push((k.to_owned(), c.partial));
    }
    let config = try_val!(RegistryConfig::from_partial(&defaults.partial, layers).map_err(invalid));
    let r = CoreRegistry::with_observer(config, clock, defaults.observer.shared());
    let r = r.map(|reg| *out = registry_into_raw(RegistryHandle { reg }));
    ok_or(r, hg_status::HG_STATUS_INVALID_ARGUMENT)
}

/// Adds a reference to `reg` and returns it (NULL in, NULL out).
///
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_retain(reg: *const hg_registry) -> *const hg_registry {
    boundary(|| {
        if !reg.is_null() {
            // SAFETY: a live handle (contract).
            unsafe { registry_retain(reg) };
        }
        reg
    })
}

/// Drops one reference to `reg`. NULL is accepted and ignored. Freeing twice is undefined
/// behaviour. Freeing the last reference closes every bulkhead in it (pending callbacks run on
/// this thread). Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_free(reg: *const hg_registry) {
    boundary(|| {
        if !reg.is_null() {
            // SAFETY: the caller gives up a live reference (contract).
            unsafe { registry_release(reg) };
        }
    })
}

/// A handle on `key`'s bulkhead (created on first use), usable with every `hg_bulkhead_*`
/// function. While the handle lives the entry is never evicted; freeing it does not close the
/// bulkhead.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_KEY_LIMIT`; `HG_STATUS_SHUTDOWN` after close;
///   `HG_STATUS_INVALID_ARGUMENT` (non-UTF-8 key); `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: free the handle with `hg_bulkhead_free()`.
/// Thread-safety: any thread; a new key takes the registry's key-map lock.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_get(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    out: *mut *mut hg_bulkhead,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let r = try_val!(unsafe { self::reg(reg) });
        // SAFETY: `key_len` readable bytes (contract).
        let k = try_val!(unsafe { key_str(key, key_len) });
        let out = try_mut!(out);
        let core = try_val!(entry(r, k));
        *out = bulkhead_into_raw(BulkheadHandle { core, owned: false });
        hg_status::HG_STATUS_OK
    })
}

/// `key`'s bulkhead, created on first use (an outside handle while it lives), or the status of
/// why not.
fn entry(r: &CoreRegistry, key: &str) -> Result<Arc<CoreBulkhead>, hg_status> {
    r.get(key).map_err(|e| (&e.error).into())
}

/// Takes `weight` permits of `key`'s bulkhead now, or fails without waiting. The permit keeps
/// the entry alive only while it is held.
///
/// Returns: as `hg_bulkhead_try_acquire()`, plus `HG_STATUS_KEY_LIMIT`; `HG_STATUS_SHUTDOWN`
///   after close; `HG_STATUS_INVALID_ARGUMENT` for a non-UTF-8 key.
/// Thread-safety: any thread; never waits (a new key takes the registry's key-map lock).
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_try_acquire(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    weight: u64,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let r = try_val!(unsafe { self::reg(reg) });
        // SAFETY: `key_len` readable bytes (contract).
        let k = try_val!(unsafe { key_str(key, key_len) });
        let out = try_mut!(out);
        let bh = try_val!(entry(r, k));
        grant(bh.try_acquire_owned(weight), out)
    })
}

/// Waits on this thread for `weight` permits of `key`'s bulkhead (`timeout_ms` in ms as
/// `hg_bulkhead_acquire_timeout()`).
///
/// Returns: as `hg_bulkhead_acquire_timeout()`, plus the key errors of
///   `hg_registry_try_acquire()`.
/// Thread-safety: any thread; blocks the calling thread up to `timeout_ms` (never call it from
/// a callback).
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_acquire_timeout(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    weight: u64,
    timeout_ms: u64,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let r = try_val!(unsafe { self::reg(reg) });
        // SAFETY: `key_len` readable bytes (contract).
        let k = try_val!(unsafe { key_str(key, key_len) });
        let out = try_mut!(out);
        let bh = try_val!(entry(r, k));
        grant(
            bh.acquire_blocking_owned(weight, wait_timeout(timeout_ms)),
            out,
        )
    })
}

/// The stats of `key`'s bulkhead (it is not created: `HG_STATUS_INVALID_ARGUMENT` if absent),
/// written as `hg_bulkhead_stats()` writes them.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (no such key, a non-UTF-8 key, a
///   `struct_size` below 4); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; reads every key's stats (a read may commit a due breaker
/// transition and run the event callbacks on this thread, while it holds no registry lock).
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_stats(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    out: *mut hg_stats,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let r = try_val!(unsafe { self::reg(reg) });
        // SAFETY: `key_len` readable bytes (contract).
        let k = try_val!(unsafe { key_str(key, key_len) });
        non_null!(out);
        let all = r.stats();
        let Some(s) = all.get(k) else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: non-null, writable for its declared size (contract).
        unsafe { write_stats(out, s) }
    })
}

/// Closes every bulkhead of the registry (and those created later): as `hg_bulkhead_close()`
/// for each. Idempotent.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_close(reg: *const hg_registry) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        try_val!(unsafe { self::reg(reg) }).close();
        hg_status::HG_STATUS_OK
    })
}

/// The canonical origin key of a URL (`scheme://host:port`, docs/design.md "Registry"), written into `buf`
/// with a terminating NUL.
///
/// Parameters:
///   url, url_len: the URL's bytes (UTF-8, not NUL-terminated). buf, buf_len: where to write.
///   out_len: receives the key's length without the NUL (also when `buf` is too small).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a URL without an origin key or a
///   `buf` too small (then `*out_len` says how much is needed, plus 1 for the NUL; pass
///   `buf` NULL and `buf_len` 0 to ask for the size first);
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; touches only `buf` and `*out_len`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_origin_key(
    url: *const c_char,
    url_len: usize,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    boundary(|| {
        // SAFETY: `url_len` readable bytes (contract).
        let u = try_val!(unsafe { key_str(url, url_len) });
        let out_len = try_mut!(out_len);
        // `buf` NULL with `buf_len` 0 asks for the size only.
        if buf.is_null() && buf_len != 0 {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        let Ok(k) = origin_key(u) else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        *out_len = k.len();
        if k.len() + 1 > buf_len {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        }
        // SAFETY: `buf` has `buf_len >= k.len() + 1` writable bytes (contract + check).
        unsafe {
            std::ptr::copy_nonoverlapping(k.as_ptr(), buf.cast::<u8>(), k.len());
            *buf.add(k.len()) = 0;
        }
        hg_status::HG_STATUS_OK
    })
}
