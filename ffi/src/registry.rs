//! `hg_registry_*` and `hg_origin_key`.

use std::{
    ffi::{c_char, c_void},
    sync::Arc,
};

use hullguard_core::{
    Bulkhead as CoreBulkhead, ClockSource, GlobalCap, Registry as CoreRegistry, RegistryConfig,
    config::{OptionId, Value},
    origin_key,
};

use crate::{
    admission::{
        acquire_async, class_stats_of, decided, enqueue, hg_class_stats, hg_rejection, hg_request,
        hg_would_admit, read_request, would_admit_out,
    },
    async_wait::{Callback, hg_acquire_callback},
    boundary::{boundary, non_null, ok_or, try_mut, try_val},
    bulkhead::hg_ticket,
    bulkhead::{c_clock, grant, hg_now_ns_fn},
    config::{hg_config, hg_stats, read_config, wait_timeout, write_stats},
    handle::{
        BulkheadHandle, RegistryHandle, bulkhead_into_raw, hg_bulkhead, hg_permit, hg_registry,
        registry_into_raw, registry_ref, registry_release, registry_retain,
    },
    sized::{self, Plain},
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
    // SAFETY: the caller's contract.
    unsafe {
        new_registry_capped(
            defaults,
            overrides,
            overrides_len,
            max_keys,
            None,
            clock,
            out,
        )
    }
}

/// `new_registry` with an optional global cap.
///
/// # Safety
/// As `new_registry`.
unsafe fn new_registry_capped(
    defaults: *const hg_config,
    overrides: *const hg_registry_override,
    overrides_len: usize,
    max_keys: u64,
    global: Option<GlobalCap>,
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
    if overrides_len != 0 {
        non_null!(overrides);
    }
    // Entry by entry, and never an allocation of the caller's count: a count far past the
    // array is refused at the first entry that is not one, not by the allocator's abort.
    let mut layers = Vec::with_capacity(overrides_len.min(64));
    for i in 0..overrides_len {
        // SAFETY: `overrides_len` readable entries at `overrides` (contract); entry `i` is one.
        let o = unsafe { &*overrides.add(i) };
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
    let mut config =
        try_val!(RegistryConfig::from_partial(&defaults.partial, layers).map_err(invalid));
    config.global = global;
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
        // The registry's own try (a key's class under a global cap).
        grant(r.try_acquire(k, weight).map_err(|e| e.error), out)
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
        let r = r.acquire_blocking(k, weight, wait_timeout(timeout_ms));
        grant(r.map_err(|e| e.error), out)
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

/// Options of `hg_registry_new_with_options()`. Size-versioned; all zeroes (with
/// `struct_size`) but `max_keys` is a registry without a global cap on the system clock.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_registry_options {
    /// `sizeof(hg_registry_options)` as the caller compiled it.
    pub struct_size: u32,
    /// Keys that may exist at once, `1 .. 2^32 - 1` (under a global cap at most 63).
    pub max_keys: u64,
    /// One cap over every key (docs/design.md §9.2), `1 .. HG_MAX_PERMITS`; 0 = none. Under
    /// it every key is a class of one admission, its own `max_concurrent` its ceiling; waiters
    /// of all keys are served oldest first. Read a key's counts with
    /// `hg_registry_key_stats()`, the cap's with `hg_registry_global_stats()`;
    /// `hg_registry_get()` is refused (`HG_STATUS_INVALID_ARGUMENT`: a key has no bulkhead of
    /// its own).
    pub global_limit: u64,
    /// Live waiters across all keys under the global cap, `0 .. HG_MAX_QUEUE`.
    pub global_max_queue: u64,
    /// NULL for the system's monotonic clock, or a host clock (as
    /// `hg_registry_new_with_clock()`).
    pub now_ns: hg_now_ns_fn,
    /// Passed to `now_ns`.
    pub now_ns_user_data: *mut c_void,
}

// SAFETY: repr(C), `struct_size` first, integers, a raw pointer and an `Option<fn>`.
unsafe impl Plain for hg_registry_options {}

/// `hg_registry_new()` with options: a global cap over every key and the host clock.
///
/// Returns: as `hg_registry_new()` (also `HG_STATUS_INVALID_ARGUMENT` for a global cap out of
///   range, more than 63 keys under one, or a bad `struct_size`). Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_new_with_options(
    defaults: *const hg_config,
    overrides: *const hg_registry_override,
    overrides_len: usize,
    options: *const hg_registry_options,
    out: *mut *mut hg_registry,
) -> hg_status {
    boundary(|| {
        non_null!(defaults);
        // SAFETY: contract.
        let o = try_val!(unsafe { sized::read(options, size_of::<hg_registry_options>()) });
        let out = try_mut!(out);
        let global = (o.global_limit != 0).then_some(GlobalCap {
            limit: o.global_limit,
            max_queue: o.global_max_queue,
        });
        let clock = match o.now_ns {
            Some(f) => c_clock(f, o.now_ns_user_data),
            None => ClockSource::default_for_host(),
        };
        // SAFETY: contract of this function.
        unsafe {
            new_registry_capped(
                defaults,
                overrides,
                overrides_len,
                o.max_keys,
                global,
                clock,
                out,
            )
        }
    })
}

/// The registry and key of a call.
///
/// # Safety
/// As the exports' contract (`reg` NULL or live, `key_len` readable bytes).
unsafe fn reg_key<'a>(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
) -> Result<(&'a CoreRegistry, &'a str), hg_status> {
    // SAFETY: per the contract.
    let r = unsafe { self::reg(reg) }?;
    // SAFETY: per the contract.
    let k = unsafe { key_str(key, key_len) }?;
    Ok((r, k))
}

/// `hg_bulkhead_try_acquire_request()` on `key` (created on first use; under a global cap in
/// the key's class, whose index the registry sets: `class_index` is not read).
///
/// Returns: as `hg_bulkhead_try_acquire_request()`, plus `HG_STATUS_KEY_LIMIT`,
///   `HG_STATUS_SHUTDOWN` after close, `HG_STATUS_INVALID_ARGUMENT` for a non-UTF-8 key.
/// Thread-safety: any thread; never waits (a new key takes the registry's key-map lock).
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_try_acquire_request(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    request: *const hg_request,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let (r, k) = try_val!(unsafe { reg_key(reg, key, key_len) });
        // SAFETY: contract.
        let q = try_val!(unsafe { read_request(request) });
        let out = try_mut!(out);
        let d = r.admit(k, &q.request.no_wait(), None);
        match decided(d, q.detail, out) {
            Err(s) => s,
            Ok(_) => unreachable!("a no-wait request never queues"),
        }
    })
}

/// `hg_bulkhead_acquire_async_request()` on `key` (created on first use; under a global cap in
/// the key's class). The key is not evicted while the acquire waits or its permit is held.
///
/// Parameters: queue: receives, on `HG_STATUS_QUEUED`, a new reference to the bulkhead the
///   ticket waits in (the key's, or under a global cap the shared admission): pass it to
///   `hg_ticket_cancel()` / `hg_ticket_cancel_reason()` / `hg_bulkhead_rate_tick()` and free it
///   with `hg_bulkhead_free()` (freeing it never closes anything).
///
/// Returns: as `hg_bulkhead_acquire_async_request()`, plus the key errors of
///   `hg_registry_try_acquire_request()`.
/// Thread-safety: any thread; never blocks.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn hg_registry_acquire_async_request(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    request: *const hg_request,
    callback: hg_acquire_callback,
    user_data: *mut c_void,
    out: *mut *mut hg_permit,
    queue: *mut *mut hg_bulkhead,
    ticket: *mut hg_ticket,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let (r, k) = try_val!(unsafe { reg_key(reg, key, key_len) });
        // SAFETY: contract.
        let q = try_val!(unsafe { read_request(request) });
        let Some(f) = callback else {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        };
        let out = try_mut!(out);
        let queue = try_mut!(queue);
        let ticket = try_mut!(ticket);
        let d = r.admit(k, &q.request, None);
        let cb = Callback { f, user_data };
        acquire_async(d, q.detail, cb, out, ticket, Some(queue))
    })
}

/// `hg_bulkhead_acquire_request()` on `key` (created on first use; under a global cap in the
/// key's class): waits on this thread. The key is not evicted while it waits.
///
/// Returns: as `hg_bulkhead_acquire_request()`, plus the key errors of
///   `hg_registry_try_acquire_request()`.
/// Thread-safety: any thread; blocks the calling thread (never call it from a callback).
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_acquire_request(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    request: *const hg_request,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let (r, k) = try_val!(unsafe { reg_key(reg, key, key_len) });
        // SAFETY: contract.
        let q = try_val!(unsafe { read_request(request) });
        let out = try_mut!(out);
        let waiter = try_val!(decided(r.admit(k, &q.request, None), q.detail, out));
        crate::admission::wait_blocking(waiter, out)
    })
}

/// `hg_bulkhead_enqueue_request()` on `key` (created on first use; under a global cap in the
/// key's class): a permit now, or a polling ticket (the caller owns its timing).
///
/// Parameters: queue: receives, on `HG_STATUS_QUEUED`, a new reference to the bulkhead the
///   ticket waits in, for `hg_ticket_poll()` and the cancel functions (as
///   `hg_registry_acquire_async_request()`); free it with `hg_bulkhead_free()`.
///
/// Returns: as `hg_bulkhead_enqueue_request()`, plus the key errors of
///   `hg_registry_try_acquire_request()`. Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_enqueue_request(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    request: *const hg_request,
    out: *mut *mut hg_permit,
    queue: *mut *mut hg_bulkhead,
    ticket: *mut hg_ticket,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let (r, k) = try_val!(unsafe { reg_key(reg, key, key_len) });
        // SAFETY: contract.
        let q = try_val!(unsafe { read_request(request) });
        let out = try_mut!(out);
        let queue = try_mut!(queue);
        let ticket = try_mut!(ticket);
        let d = r.admit(k, &q.request, None);
        enqueue(d, q.detail, out, ticket, Some(queue))
    })
}

/// The dry run on `key` (docs/design.md §5.6): an existing key answers through its admission;
/// a key that does not exist is neither created nor touched (`HG_STATUS_KEY_LIMIT` /
/// `HG_STATUS_SHUTDOWN` as creating it would be refused, else the answer of the bulkhead it
/// would get).
///
/// Returns: as `hg_bulkhead_would_admit()`, plus `HG_STATUS_INVALID_ARGUMENT` for a non-UTF-8
///   key. Thread-safety: any thread; never waits; changes nothing.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_would_admit(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    request: *const hg_request,
    out: *mut hg_would_admit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let (r, k) = try_val!(unsafe { reg_key(reg, key, key_len) });
        // SAFETY: contract.
        let q = try_val!(unsafe { read_request(request) });
        non_null!(out);
        let detail: *mut hg_rejection = q.detail;
        would_admit_out(r.would_admit(k, &q.request), detail, out)
    })
}

/// Under a global cap, `key`'s own counts (its class in the shared admission: `ceiling` its
/// limit, `in_flight` what it holds, `queued` its waiters, `observed` what its observed limit
/// let through). Does not create the key.
///
/// Returns: `HG_STATUS_OK` with `*out` (set its `struct_size` first);
///   `HG_STATUS_INVALID_ARGUMENT` (no global cap, no such key, a non-UTF-8 key);
///   `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_key_stats(
    reg: *const hg_registry,
    key: *const c_char,
    key_len: usize,
    out: *mut hg_class_stats,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let (r, k) = try_val!(unsafe { reg_key(reg, key, key_len) });
        non_null!(out);
        let Some(c) = r.key_stats(k) else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: writable with its `struct_size` set (contract).
        unsafe { sized::write(out, &class_stats_of(&c, [0, 0])) }
    })
}

/// Under a global cap, the shared admission's stats (`limit` the cap, `active` what all keys
/// hold together), written as `hg_bulkhead_stats()` writes them.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` without a global cap (or a
///   `struct_size` below 4); `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_global_stats(
    reg: *const hg_registry,
    out: *mut hg_stats,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let r = try_val!(unsafe { self::reg(reg) });
        non_null!(out);
        let Some(s) = r.global_stats() else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: non-null, writable for its declared size (contract).
        unsafe { write_stats(out, &s) }
    })
}

/// One key's limits for `hg_registry_apply_limits()`. Size-versioned.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_registry_key_limits {
    /// `sizeof(hg_registry_key_limits)` as the caller compiled it.
    pub struct_size: u32,
    /// The key's bytes (UTF-8, not NUL-terminated; URL-shaped keys are canonicalised).
    pub key: *const c_char,
    pub key_len: usize,
    /// Its limits (`HG_UNSET` fields: the defaults'; `revision` is not read).
    pub limits: *const crate::admission::hg_limits,
}

// SAFETY: repr(C), `struct_size` first, integers and raw pointers.
unsafe impl Plain for hg_registry_key_limits {}

/// Installs revisioned limits for every key of the registry, those that exist and those
/// created later (docs/design.md §9), all or nothing: `defaults` for every key (its `revision`
/// is the update's), each override for its key, and `global` for a global cap (NULL: none).
/// Only the plain fields of `hg_limits` apply (`limit`, `budget`, `max_queue`,
/// `queue_timeout_ms`); a reserve, rates or class ceilings are refused.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_STALE` (`*defaults->current_revision`, if set,
///   receives the registry's revision); `HG_STATUS_INVALID_ARGUMENT` (a value some key cannot
///   take, a bad key, `global` without a global cap, a bad `struct_size`: nothing changed);
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits (growth grants waiters: their callbacks run on this
/// thread).
#[unsafe(no_mangle)]
pub extern "C" fn hg_registry_apply_limits(
    reg: *const hg_registry,
    defaults: *const crate::admission::hg_limits,
    overrides: *const hg_registry_key_limits,
    overrides_len: usize,
    global: *const crate::admission::hg_limits,
) -> hg_status {
    use crate::admission::{current_revision_of, key_limits};
    boundary(|| {
        // SAFETY: contract of this function.
        let r = try_val!(unsafe { self::reg(reg) });
        // SAFETY: contract.
        let (revision, d) = try_val!(unsafe { key_limits(defaults) });
        let mut limits = hullguard_core::RegistryLimits::new(revision);
        limits.defaults = d;
        if !global.is_null() {
            // SAFETY: contract.
            limits.global = Some(try_val!(unsafe { key_limits(global) }).1);
        }
        // SAFETY: `overrides_len` entries of the caller's size (contract).
        let entries = try_val!(unsafe {
            crate::admission::read_array(
                overrides,
                overrides_len,
                size_of::<hg_registry_key_limits>(),
            )
        });
        for e in entries {
            // SAFETY: `key_len` readable bytes (contract).
            let k = try_val!(unsafe { key_str(e.key, e.key_len) });
            // SAFETY: contract.
            let (_, l) = try_val!(unsafe { key_limits(e.limits) });
            limits.overrides.insert(k.to_owned(), l);
        }
        match r.apply_limits(&limits) {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(hullguard_core::RegistryLimitsError::Stale { current }) => {
                // SAFETY: contract.
                let out = unsafe { current_revision_of(defaults) };
                if !out.is_null() {
                    // SAFETY: a non-NULL `current_revision` is writable (its contract).
                    unsafe { out.write_unaligned(current) };
                }
                hg_status::HG_STATUS_STALE
            }
            Err(_) => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    })
}
