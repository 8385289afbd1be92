//! The C ABI (`ffi/include/hullguard.h`, docs/design.md §10.3) under ASan: arbitrary
//! `hg_config`, `hg_request`, `hg_limits`, `hg_class`, `hg_class_table`,
//! `hg_registry_options` bytes with every `struct_size` — older (smaller, down to below the
//! `struct_size` field's end), this library's, and newer (a zero or non-zero tail), each in a
//! heap buffer of exactly that many bytes, so one byte read or written past what a C caller
//! declared is an ASan report — and arbitrary call sequences through the exported functions:
//! bulkheads (plain, on a host clock, with classes), permits, polling tickets, the raw pair,
//! limits, observe, rates, load, stats and outputs of every size, registries (keys of
//! arbitrary bytes, overrides, a global cap), origin keys. The harness keeps its handles valid
//! (each freed once, nothing used after its free) and frees everything at the end of an input,
//! so LeakSanitizer sees any handle or callback the library loses. Checked too: no export
//! panics (a panic aborts the fuzzer before the boundary turns it into `HG_STATUS_PANIC`),
//! `hg_config_check` agrees with `hg_bulkhead_new` and names a field, an output is written at
//! most to its declared size with `struct_size` echoed, and a refused call leaves its output
//! alone.
#![no_main]

use std::{
    ffi::{CStr, c_char, c_void},
    mem::{MaybeUninit, offset_of, size_of},
    sync::atomic::{AtomicU64, Ordering::SeqCst},
};

use arbitrary::{Result, Unstructured};
use hullguard::*;
use hullguard_fuzz::{Exact, pick, trace};
use libfuzzer_sys::fuzz_target;

const MS: u64 = 1_000_000;

// ----- callbacks ------------------------------------------------------------------------------

/// The host clock: virtual ns in the `AtomicU64` `user_data` points to.
unsafe extern "C" fn now_ns(user_data: *mut c_void) -> u64 {
    // SAFETY: the harness passes a live `AtomicU64` that outlives every handle.
    unsafe { &*(user_data as *const AtomicU64) }.load(SeqCst)
}

/// Adds one to the `AtomicU64` at `user_data`. NULL is a caller's legal user data — and what a
/// `struct_size` that ends after `on_event` but before `on_event_user_data` reads as — so it
/// counts nothing.
fn count(user_data: *mut c_void) {
    if !user_data.is_null() {
        // SAFETY: the harness passes NULL or a live `AtomicU64`.
        unsafe { &*(user_data as *const AtomicU64) }.fetch_add(1, SeqCst);
    }
}

/// Counts breaker transitions; reads the key bytes it is given (ASan checks them).
unsafe extern "C" fn on_state_change(
    user_data: *mut c_void,
    key: *const c_char,
    key_len: usize,
    _old: hg_circuit_state,
    _new: hg_circuit_state,
) {
    if !key.is_null() {
        // SAFETY: the library passes `key_len` readable bytes.
        let k = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), key_len) };
        std::hint::black_box(k.iter().map(|&b| u64::from(b)).sum::<u64>());
    }
    count(user_data);
}

/// Counts events; reads the whole event and its key (ASan checks them).
unsafe extern "C" fn on_event(user_data: *mut c_void, event: *const hg_event) {
    assert!(!event.is_null(), "an event callback with NULL");
    // SAFETY: the library passes a live event for the call; `struct_size` says how much.
    let size = unsafe { event.cast::<u32>().read_unaligned() } as usize;
    assert!(
        size >= 4 && size <= size_of::<hg_event>(),
        "event struct_size {size}"
    );
    // SAFETY: as above: `size` readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(event.cast::<u8>(), size) };
    std::hint::black_box(bytes.iter().map(|&b| u64::from(b)).sum::<u64>());
    if size >= offset_of!(hg_event, key_len) + size_of::<usize>() {
        // SAFETY: the fields are within `size` bytes of a live event.
        let (key, len) = unsafe { ((*event).key, (*event).key_len) };
        if !key.is_null() {
            // SAFETY: the library passes `len` readable key bytes.
            let k = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), len) };
            std::hint::black_box(k.len());
        }
    }
    count(user_data);
}

// ----- value generators ------------------------------------------------------------------------

fn u8v(u: &mut Unstructured<'_>) -> Result<u8> {
    Ok(match pick(u, &[4, 1])? {
        0 => *u.choose(&[0, 1, 2, 255])?,
        _ => u.arbitrary()?,
    })
}

fn u32v(u: &mut Unstructured<'_>) -> Result<u32> {
    Ok(match pick(u, &[6, 2, 1])? {
        0 => u.int_in_range(0..=6)?,
        1 => *u.choose(&[255, 256, 1_048_575, 1_048_576, u32::MAX, 1 << 31])?,
        _ => u.arbitrary()?,
    })
}

fn u64v(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match pick(u, &[8, 3, 1])? {
        0 => u.int_in_range(0..=12)?,
        1 => *u.choose(&[
            100,
            1000,
            30_000,
            HG_MAX_QUEUE,
            HG_MAX_QUEUE + 1,
            HG_MAX_PERMITS,
            HG_MAX_PERMITS + 1,
            HG_MAX_BUDGET,
            HG_MAX_BUDGET + 1,
            HG_UNSET,
            HG_TIMEOUT_INFINITE,
            (1 << 18) - 1,
            1 << 18,
            (1 << 53) - 1,
            1 << 53,
            u64::from(u32::MAX),
            1 << 62,
        ])?,
        _ => u.arbitrary()?,
    })
}

fn f64v(u: &mut Unstructured<'_>) -> Result<f64> {
    Ok(match pick(u, &[4, 1])? {
        0 => *u.choose(&[
            0.0,
            0.5,
            0.7,
            1.0,
            1.5,
            2.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1024.0,
            1025.0,
            1e-300,
        ])?,
        _ => f64::from_bits(u.arbitrary()?),
    })
}

/// A field of a struct, for mutation: its offset and how it is written.
#[derive(Clone, Copy)]
enum F {
    U8(usize),
    U32(usize),
    U64(usize),
    F64(usize),
    /// `max_queue`-like: kept small mostly (a 2^20-cell ring per input is slow).
    Queue(usize),
}

/// A struct's bytes, edited field by field.
struct Bytes(Vec<u8>);

impl Bytes {
    fn of<T: Copy>(v: &T) -> Bytes {
        // SAFETY: `T` is a plain C struct the library initialised; reading its bytes (padding
        // included: zeroed by the `MaybeUninit::zeroed` it came from) is fine.
        let s = unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) };
        Bytes(s.to_vec())
    }

    fn put(&mut self, off: usize, b: &[u8]) {
        self.0[off..off + b.len()].copy_from_slice(b);
    }

    fn ptr<T>(&mut self, off: usize, p: *const T) {
        self.put(off, &(p as usize).to_ne_bytes());
    }

    fn mutate(&mut self, u: &mut Unstructured<'_>, fields: &[F]) -> Result<()> {
        for _ in 0..u.int_in_range(0..=6)? {
            match *u.choose(fields)? {
                F::U8(o) => self.put(o, &[u8v(u)?]),
                F::U32(o) => self.put(o, &u32v(u)?.to_ne_bytes()),
                F::U64(o) => self.put(o, &u64v(u)?.to_ne_bytes()),
                F::F64(o) => self.put(o, &f64v(u)?.to_ne_bytes()),
                F::Queue(o) => {
                    let q = match pick(u, &[8, 1])? {
                        0 => u.int_in_range(0..=8)?,
                        _ => u64v(u)?,
                    };
                    self.put(o, &q.to_ne_bytes());
                }
            }
        }
        Ok(())
    }

    /// The struct as a C caller of some header version passes it: a buffer of exactly the
    /// declared size (at least the 4 bytes of `struct_size`), `struct_size` set to it; a
    /// bigger one has a zero tail, or sometimes a non-zero byte in it.
    fn sized(&self, u: &mut Unstructured<'_>) -> Result<Exact> {
        let full = self.0.len();
        let (declared, dirty) = match pick(u, &[14, 2, 2, 1])? {
            0 => (full, false),
            1 => (u.int_in_range(0..=full)?, false),
            2 => (full + u.int_in_range(1..=24)?, false),
            _ => (full + u.int_in_range(1..=24)?, true),
        };
        let len = declared.max(4);
        let e = Exact::zeroed(len);
        let n = len.min(full);
        // SAFETY: `n` bytes fit both buffers.
        unsafe { std::ptr::copy_nonoverlapping(self.0.as_ptr(), e.ptr::<u8>(), n) };
        // SAFETY: `len >= 4`.
        unsafe { e.ptr::<u32>().write_unaligned(declared as u32) };
        if dirty {
            let at = u.int_in_range(full..=len - 1)?;
            // SAFETY: `at < len`.
            unsafe { *e.ptr::<u8>().add(at) = u.int_in_range(1..=255)? };
        }
        Ok(e)
    }
}

macro_rules! at {
    ($t:ty, $f:ident) => {
        offset_of!($t, $f)
    };
}

fn config_fields() -> Vec<F> {
    type C = hg_config;
    vec![
        F::U64(at!(C, max_concurrent)),
        F::Queue(at!(C, max_queue)),
        F::U64(at!(C, queue_timeout_ms)),
        F::U8(at!(C, enabled)),
        F::U8(at!(C, adaptive_enabled)),
        F::U32(at!(C, adaptive_algorithm)),
        F::U64(at!(C, adaptive_initial_limit)),
        F::U64(at!(C, adaptive_min_limit)),
        F::U64(at!(C, adaptive_max_limit)),
        F::U64(at!(C, adaptive_target_latency_ms)),
        F::U64(at!(C, adaptive_increase_step)),
        F::F64(at!(C, adaptive_decrease_ratio)),
        F::F64(at!(C, adaptive_smoothing)),
        F::F64(at!(C, adaptive_rtt_tolerance)),
        F::U64(at!(C, adaptive_long_window)),
        F::U64(at!(C, adaptive_queue_size)),
        F::U8(at!(C, breaker_enabled)),
        F::U32(at!(C, breaker_failure_threshold)),
        F::F64(at!(C, breaker_error_rate_threshold)),
        F::U64(at!(C, breaker_error_rate_window_ms)),
        F::U32(at!(C, breaker_error_rate_buckets)),
        F::U32(at!(C, breaker_volume_threshold)),
        F::U64(at!(C, breaker_open_duration_ms)),
        F::U32(at!(C, breaker_half_open_max_calls)),
        F::U64(at!(C, breaker_half_open_timeout_ms)),
        F::U64(at!(C, call_timeout_ms)),
        F::U64(at!(C, budget)),
        F::U64(at!(C, max_queued_cost)),
        F::U32(at!(C, observe)),
        F::U64(at!(C, start_limit)),
        F::U64(at!(C, max_orphaned)),
        F::U8(at!(C, cancel_on_overrun)),
        F::U8(at!(C, reserved)),
        F::U64(at!(C, min_service_time_ms)),
        F::U64(at!(C, queue_delay_target_ms)),
        F::U64(at!(C, queue_delay_interval_ms)),
        F::U8(at!(C, adaptive_lifo)),
        F::U8(at!(C, reserved2) + 3),
        F::U64(at!(C, shed_lag_threshold_ms)),
        F::F64(at!(C, shed_cpu_threshold)),
        F::U32(at!(C, critical_priority)),
        F::U8(at!(C, reserved3)),
    ]
}

/// Everything one input owns, freed at its end.
struct World {
    clock: Box<AtomicU64>,
    events: Box<AtomicU64>,
    /// References to bulkheads (each freed once).
    bulkheads: Vec<*const hg_bulkhead>,
    permits: Vec<*mut hg_permit>,
    /// Polling tickets and the bulkhead (a reference in `bulkheads`) they wait in.
    tickets: Vec<(*const hg_bulkhead, hg_ticket)>,
    /// Raw units the harness holds, per bulkhead.
    units: Vec<(*const hg_bulkhead, u64)>,
    registries: Vec<*const hg_registry>,
    keys: Vec<Vec<u8>>,
    /// Buffers that must outlive a handle (configs are copied; these are for safety).
    keep: Vec<Exact>,
}

impl World {
    fn new() -> World {
        World {
            clock: Box::new(AtomicU64::new(1_000 * MS)),
            events: Box::new(AtomicU64::new(0)),
            bulkheads: Vec::new(),
            permits: Vec::new(),
            tickets: Vec::new(),
            units: Vec::new(),
            registries: Vec::new(),
            keys: vec![b"a".to_vec(), b"https://Example.com/x".to_vec()],
            keep: Vec::new(),
        }
    }

    fn clock_ptr(&self) -> *mut c_void {
        (&*self.clock as *const AtomicU64).cast_mut().cast()
    }

    fn events_ptr(&self) -> *mut c_void {
        (&*self.events as *const AtomicU64).cast_mut().cast()
    }

    /// An `hg_config` as a caller passes it: the defaults with fields changed (or arbitrary
    /// bytes), callbacks set or not, of some declared size.
    fn config(&mut self, u: &mut Unstructured<'_>) -> Result<Exact> {
        let mut c = MaybeUninit::<hg_config>::zeroed();
        assert_eq!(hg_config_default(c.as_mut_ptr()), hg_status::HG_STATUS_OK);
        // SAFETY: filled by `hg_config_default`.
        let c = unsafe { c.assume_init() };
        let mut b = Bytes::of(&c);
        if u.ratio(1, 16)? {
            let raw: Vec<u8> = (0..b.0.len())
                .map(|_| u.arbitrary::<u8>())
                .collect::<Result<_>>()?;
            b.0.copy_from_slice(&raw);
        } else {
            b.mutate(u, &config_fields())?;
        }
        // The pointers are always valid (or NULL): only their presence is fuzzed.
        let sc: hg_state_change_fn = if u.ratio(1, 4)? {
            Some(on_state_change)
        } else {
            None
        };
        let ev: hg_event_fn = if u.ratio(1, 4)? { Some(on_event) } else { None };
        let data = self.events_ptr();
        b.put(
            at!(hg_config, on_state_change),
            &(sc.map_or(0, |f| f as usize)).to_ne_bytes(),
        );
        b.ptr(at!(hg_config, on_state_change_user_data), data);
        b.put(
            at!(hg_config, on_event),
            &(ev.map_or(0, |f| f as usize)).to_ne_bytes(),
        );
        b.ptr(at!(hg_config, on_event_user_data), data);
        b.sized(u)
    }

    /// An `hg_rejection` output of some declared size (or NULL).
    fn rejection(&mut self, u: &mut Unstructured<'_>) -> Result<*mut hg_rejection> {
        if u.ratio(1, 3)? {
            return Ok(std::ptr::null_mut());
        }
        let e = output(u, size_of::<hg_rejection>())?;
        let p = e.ptr();
        self.keep.push(e);
        Ok(p)
    }

    fn request(&mut self, u: &mut Unstructured<'_>) -> Result<Exact> {
        let mut r = MaybeUninit::<hg_request>::zeroed();
        assert_eq!(hg_request_default(r.as_mut_ptr()), hg_status::HG_STATUS_OK);
        // SAFETY: filled by `hg_request_default`.
        let r = unsafe { r.assume_init() };
        let mut b = Bytes::of(&r);
        type R = hg_request;
        b.mutate(
            u,
            &[
                F::U64(at!(R, weight)),
                F::U64(at!(R, weight)),
                F::U64(at!(R, cost)),
                F::U32(at!(R, class_index)),
                F::U32(at!(R, observe)),
                F::U64(at!(R, timeout_ms)),
                F::U64(at!(R, deadline_ns)),
                F::U32(at!(R, has_deadline)),
                F::U32(at!(R, reserved)),
            ],
        )?;
        let d = self.rejection(u)?;
        b.ptr(at!(R, detail), d);
        b.sized(u)
    }

    fn limits(&mut self, u: &mut Unstructured<'_>) -> Result<Exact> {
        let mut l = MaybeUninit::<hg_limits>::zeroed();
        assert_eq!(hg_limits_default(l.as_mut_ptr()), hg_status::HG_STATUS_OK);
        // SAFETY: filled by `hg_limits_default`.
        let l = unsafe { l.assume_init() };
        let mut b = Bytes::of(&l);
        type L = hg_limits;
        let rate = at!(L, requests);
        let units = at!(L, units);
        b.put(at!(L, revision), &u.int_in_range(0u64..=6)?.to_ne_bytes());
        b.mutate(
            u,
            &[
                F::U64(at!(L, revision)),
                F::U64(at!(L, limit)),
                F::U64(at!(L, limit)),
                F::U64(at!(L, budget)),
                F::Queue(at!(L, max_queue)),
                F::U64(at!(L, queue_timeout_ms)),
                F::U8(at!(L, has_reserve)),
                F::U8(at!(L, has_rates)),
                F::U32(at!(L, reserve_min_priority)),
                F::U64(at!(L, reserve_permits)),
                F::U64(at!(L, reserve_budget)),
                F::U64(rate),
                F::U64(rate + 8),
                F::U64(rate + 16),
                F::U64(units),
                F::U64(units + 8),
                F::U64(units + 16),
                F::U32(at!(L, has_queue_delay)),
                F::U32(at!(L, reserved)),
                F::U64(at!(L, queue_delay_target_ms)),
                F::U64(at!(L, queue_delay_interval_ms)),
                F::U32(at!(L, adaptive_lifo)),
                F::U32(at!(L, reserved2)),
            ],
        )?;
        // `current_revision`: NULL or a live u64 (exactly 8 bytes).
        let cur = if u.arbitrary()? {
            let e = Exact::zeroed(8);
            let p = e.ptr::<u64>();
            self.keep.push(e);
            p
        } else {
            std::ptr::null_mut()
        };
        b.ptr(at!(L, current_revision), cur);
        // `classes`: NULL / 0, or an array of size-versioned elements of one stride.
        let (classes, n) = if u.ratio(1, 4)? {
            let n = u.int_in_range(0..=3)?;
            let stride = match pick(u, &[4, 1])? {
                0 => size_of::<hg_class_limits>(),
                _ => u.int_in_range(0..=40)?,
            };
            let e = Exact::zeroed(array_len(n, stride));
            for i in 0..n {
                let mut el = [0u8; size_of::<hg_class_limits>()];
                el[..4].copy_from_slice(&(stride as u32).to_ne_bytes());
                el[4..8].copy_from_slice(&u.int_in_range(0u32..=4)?.to_ne_bytes());
                el[8..16].copy_from_slice(&u64v(u)?.to_ne_bytes());
                el[16..24].copy_from_slice(&u64v(u)?.to_ne_bytes());
                let k = stride.max(4).min(el.len());
                // SAFETY: element `i` has `max(stride, 4)` bytes from its start (`array_len`).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        el.as_ptr(),
                        e.ptr::<u8>().add(element_at(i, stride)),
                        k,
                    )
                };
            }
            let p = if n == 0 && u.arbitrary()? {
                std::ptr::null()
            } else {
                e.ptr::<hg_class_limits>().cast_const()
            };
            self.keep.push(e);
            (p, n)
        } else {
            (std::ptr::null(), 0)
        };
        b.ptr(at!(L, classes), classes);
        b.put(at!(L, classes_len), &n.to_ne_bytes());
        b.sized(u)
    }

    fn class_table(&mut self, u: &mut Unstructured<'_>) -> Result<Exact> {
        let n = match pick(u, &[8, 1])? {
            0 => u.int_in_range(1..=4)?,
            _ => u.int_in_range(0..=66)?,
        };
        let stride = match pick(u, &[8, 1])? {
            0 => size_of::<hg_class>(),
            _ => u.int_in_range(0..=56)?,
        };
        let arr = Exact::zeroed(array_len(n, stride));
        for i in 0..n.min(8) {
            let mut c = MaybeUninit::<hg_class>::zeroed();
            assert_eq!(hg_class_default(c.as_mut_ptr()), hg_status::HG_STATUS_OK);
            // SAFETY: filled by `hg_class_default`.
            let c = unsafe { c.assume_init() };
            let mut b = Bytes::of(&c);
            b.put(0, &(stride as u32).to_ne_bytes());
            type K = hg_class;
            b.mutate(
                u,
                &[
                    F::U32(at!(K, priority)),
                    F::U64(at!(K, floor)),
                    F::U64(at!(K, ceiling)),
                    F::U64(at!(K, budget_floor)),
                    F::U64(at!(K, budget_ceiling)),
                    F::U32(at!(K, observe)),
                    F::U32(at!(K, reserved)),
                ],
            )?;
            let k = stride.max(4).min(b.0.len());
            // SAFETY: element `i` has `max(stride, 4)` bytes from its start (`array_len`);
            // `k` is at most that.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    b.0.as_ptr(),
                    arr.ptr::<u8>().add(element_at(i, stride)),
                    k,
                )
            };
        }
        for i in n.min(8)..n {
            // Elements past the 8th: copies of the first's bytes.
            // SAFETY: both elements lie within the buffer (`array_len`), apart.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    arr.ptr::<u8>(),
                    arr.ptr::<u8>().add(element_at(i, stride)),
                    stride.max(4).min(size_of::<hg_class>()),
                )
            };
        }
        let mut t: hg_class_table = unsafe { MaybeUninit::zeroed().assume_init() };
        t.struct_size = size_of::<hg_class_table>() as u32;
        let mut b = Bytes::of(&t);
        type T = hg_class_table;
        b.mutate(
            u,
            &[
                F::U8(at!(T, lending)),
                F::U8(at!(T, shed)),
                F::U32(at!(T, reserve_min_priority)),
                F::U64(at!(T, reserve_permits)),
                F::U64(at!(T, reserve_budget)),
                F::U64(at!(T, requests)),
                F::U64(at!(T, requests) + 8),
                F::U64(at!(T, requests) + 16),
                F::U64(at!(T, units)),
                F::U64(at!(T, units) + 8),
                F::U64(at!(T, units) + 16),
            ],
        )?;
        let p = if n == 0 && u.arbitrary()? {
            std::ptr::null()
        } else {
            arr.ptr::<hg_class>().cast_const()
        };
        b.ptr(at!(T, classes), p);
        b.put(at!(T, classes_len), &n.to_ne_bytes());
        self.keep.push(arr);
        b.sized(u)
    }

    fn bulkhead(&self, u: &mut Unstructured<'_>) -> Result<Option<*const hg_bulkhead>> {
        if self.bulkheads.is_empty() {
            return Ok(None);
        }
        Ok(Some(*u.choose(&self.bulkheads)?))
    }

    fn key(&mut self, u: &mut Unstructured<'_>) -> Result<Exact> {
        let k: Vec<u8> = match pick(u, &[6, 2, 1])? {
            0 => u.choose(&self.keys)?.clone(),
            1 => u.arbitrary::<&[u8]>()?.iter().take(64).copied().collect(),
            _ => u
                .choose(&[
                    &b"https://a.example:443"[..],
                    b"http://[::1]:8080/x",
                    b"https://",
                    b"\xff\xfe",
                    b"",
                ])?
                .to_vec(),
        };
        if self.keys.len() < 16 && !self.keys.contains(&k) {
            self.keys.push(k.clone());
        }
        Ok(Exact::of(&k))
    }
}

/// Where element `i` of an array of elements that declare `stride` bytes lies: a C caller's
/// elements are at least their 4-byte `struct_size` field apart, whatever they declare (an
/// element that declares less than 4 is still that big), so the library, which steps by the
/// declared size, finds the second one misplaced and refuses the array.
fn element_at(i: usize, stride: usize) -> usize {
    i * stride.max(4)
}

/// The bytes of such an array of `n` elements.
fn array_len(n: usize, stride: usize) -> usize {
    element_at(n, stride).max(1)
}

/// An output struct of `full` bytes as a caller declares it: a buffer of exactly the declared
/// size (at least 4), `struct_size` set, the rest filled with a marker byte.
fn output(u: &mut Unstructured<'_>, full: usize) -> Result<Exact> {
    let declared = match pick(u, &[10, 2, 1])? {
        0 => full,
        1 => u.int_in_range(0..=full)?,
        _ => full + u.int_in_range(1..=16)?,
    };
    let len = declared.max(4);
    let e = Exact::zeroed(len);
    // SAFETY: `len` bytes.
    unsafe { std::ptr::write_bytes(e.ptr::<u8>(), 0xA5, len) };
    // SAFETY: `len >= 4`.
    unsafe { e.ptr::<u32>().write_unaligned(declared as u32) };
    Ok(e)
}

/// Checks an output after a call: refused below 4, else `struct_size` echoes the bytes written
/// (at most the declared size and this library's size) and nothing past them changed.
fn check_output(s: hg_status, e: &Exact, full: usize, what: &str) {
    let bytes = e.bytes();
    let declared = u32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize;
    if s != hg_status::HG_STATUS_OK {
        return;
    }
    assert!(
        bytes.len() >= 4 && declared >= 4,
        "{what}: OK with a struct_size below 4"
    );
    let written = declared;
    assert!(
        written >= 4 && written <= full && written <= bytes.len(),
        "{what}: struct_size {written} after OK (full {full})"
    );
    assert!(
        bytes[written..].iter().all(|&b| b == 0xA5),
        "{what}: bytes past the {written} written changed"
    );
}

fn status_of(s: hg_status) -> hg_status {
    assert_ne!(s, hg_status::HG_STATUS_PANIC, "an export panicked");
    // The status has a message.
    // SAFETY: a static NUL-terminated string (or NULL).
    let m = hg_status_message(s as u32);
    assert!(!m.is_null(), "no message for {s:?}");
    s
}

fn c_str_ok(p: *const c_char) {
    if !p.is_null() {
        // SAFETY: the library returns NULL or a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(p) };
        std::hint::black_box(s.to_bytes().len());
    }
}

/// The fields of a config a crash report needs (read from its bytes, within its size).
fn describe(cfg: &Exact) -> String {
    let b = cfg.bytes();
    let get = |off: usize, n: usize| -> Option<u64> {
        let mut x = [0u8; 8];
        x[..n].copy_from_slice(b.get(off..off + n)?);
        Some(u64::from_ne_bytes(x))
    };
    type C = hg_config;
    let f64_at = |off: usize| get(off, 8).map(f64::from_bits);
    format!(
        "struct_size {} max_concurrent {:?} max_queue {:?} enabled {:?} adaptive_enabled {:?} \
         breaker_enabled {:?} observe {:?} budget {:?} start_limit {:?} queue_delay_target_ms {:?} \
         adaptive_lifo {:?} shed_lag_threshold_ms {:?} shed_cpu_threshold {:?}",
        b.len(),
        get(at!(C, max_concurrent), 8),
        get(at!(C, max_queue), 8),
        get(at!(C, enabled), 1),
        get(at!(C, adaptive_enabled), 1),
        get(at!(C, breaker_enabled), 1),
        get(at!(C, observe), 4),
        get(at!(C, budget), 8),
        get(at!(C, start_limit), 8),
        get(at!(C, queue_delay_target_ms), 8),
        get(at!(C, adaptive_lifo), 1),
        get(at!(C, shed_lag_threshold_ms), 8),
        f64_at(at!(C, shed_cpu_threshold)),
    )
}

// ----- the steps -------------------------------------------------------------------------------

fn new_bulkhead(w: &mut World, u: &mut Unstructured<'_>) -> Result<()> {
    let cfg = w.config(u)?;
    if trace() {
        eprintln!("new bulkhead: {}", describe(&cfg));
    }
    let mut bad: *const c_char = std::ptr::null();
    let check = status_of(hg_config_check(cfg.ptr(), &mut bad));
    if check != hg_status::HG_STATUS_OK {
        c_str_ok(bad);
    }
    let mut out: *mut hg_bulkhead = std::ptr::null_mut();
    let kind = pick(u, &[3, 4, 2])?;
    let s = match kind {
        0 => hg_bulkhead_new(cfg.ptr(), &mut out),
        1 => hg_bulkhead_new_with_clock(cfg.ptr(), Some(now_ns), w.clock_ptr(), &mut out),
        _ => {
            let t = w.class_table(u)?;
            if trace() {
                eprintln!(
                    "class table {:?}; arrays kept: {:?}",
                    t.bytes(),
                    w.keep
                        .iter()
                        .map(|e| (e.ptr::<u8>(), e.len()))
                        .collect::<Vec<_>>()
                );
            }
            let clock: hg_now_ns_fn = if u.arbitrary()? { Some(now_ns) } else { None };
            let s =
                hg_bulkhead_new_with_classes(cfg.ptr(), t.ptr(), clock, w.clock_ptr(), &mut out);
            w.keep.push(t);
            s
        }
    };
    let s = status_of(s);
    if kind < 2 && s != hg_status::HG_STATUS_OUT_OF_MEMORY {
        assert_eq!(
            s == hg_status::HG_STATUS_OK,
            check == hg_status::HG_STATUS_OK,
            "hg_config_check says {check:?}, hg_bulkhead_new {s:?}; config {}",
            describe(&cfg)
        );
    }
    if s == hg_status::HG_STATUS_OK {
        assert!(!out.is_null());
        w.bulkheads.push(out);
    }
    Ok(())
}

fn new_registry(w: &mut World, u: &mut Unstructured<'_>) -> Result<()> {
    let defaults = w.config(u)?;
    let n = u.int_in_range(0..=3)?;
    let mut keys = Vec::new();
    let mut cfgs = Vec::new();
    for _ in 0..n {
        keys.push(w.key(u)?);
        cfgs.push(w.config(u)?);
    }
    let overrides: Vec<hg_registry_override> = keys
        .iter()
        .zip(&cfgs)
        .map(|(k, c)| hg_registry_override {
            key: k.ptr(),
            key_len: k.len(),
            config: c.ptr(),
        })
        .collect();
    let ov = if overrides.is_empty() && u.arbitrary()? {
        std::ptr::null()
    } else {
        overrides.as_ptr()
    };
    let mut out: *mut hg_registry = std::ptr::null_mut();
    let max_keys = match pick(u, &[6, 1])? {
        0 => u.int_in_range(1..=8)?,
        _ => u64v(u)?,
    };
    let s = match pick(u, &[2, 2, 2])? {
        0 => hg_registry_new(defaults.ptr(), ov, overrides.len(), max_keys, &mut out),
        1 => hg_registry_new_with_clock(
            defaults.ptr(),
            ov,
            overrides.len(),
            max_keys,
            Some(now_ns),
            w.clock_ptr(),
            &mut out,
        ),
        _ => {
            let mut o: hg_registry_options = unsafe { MaybeUninit::zeroed().assume_init() };
            o.struct_size = size_of::<hg_registry_options>() as u32;
            let mut b = Bytes::of(&o);
            type O = hg_registry_options;
            b.put(at!(O, max_keys), &max_keys.to_ne_bytes());
            b.mutate(
                u,
                &[
                    F::U64(at!(O, max_keys)),
                    F::U64(at!(O, global_limit)),
                    F::U64(at!(O, global_limit)),
                    F::Queue(at!(O, global_max_queue)),
                ],
            )?;
            let f: hg_now_ns_fn = if u.arbitrary()? { Some(now_ns) } else { None };
            b.put(at!(O, now_ns), &(f.map_or(0, |f| f as usize)).to_ne_bytes());
            b.ptr(at!(O, now_ns_user_data), w.clock_ptr());
            let opts = b.sized(u)?;
            let s = hg_registry_new_with_options(
                defaults.ptr(),
                ov,
                overrides.len(),
                opts.ptr(),
                &mut out,
            );
            w.keep.push(opts);
            s
        }
    };
    if status_of(s) == hg_status::HG_STATUS_OK {
        assert!(!out.is_null());
        w.registries.push(out);
    }
    Ok(())
}

fn take_permit(w: &mut World, s: hg_status, out: *mut hg_permit) {
    if s == hg_status::HG_STATUS_OK {
        assert!(!out.is_null(), "OK without a permit");
        w.permits.push(out);
    }
}

fn bulkhead_step(w: &mut World, u: &mut Unstructured<'_>, bh: *const hg_bulkhead) -> Result<()> {
    let mut out: *mut hg_permit = std::ptr::null_mut();
    match pick(
        u,
        &[6, 4, 3, 3, 2, 2, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    )? {
        0 => {
            let s = status_of(hg_bulkhead_try_acquire(bh, u64v(u)?, &mut out));
            take_permit(w, s, out);
        }
        1 => {
            let r = w.request(u)?;
            let s = status_of(hg_bulkhead_try_acquire_request(bh, r.ptr(), &mut out));
            take_permit(w, s, out);
        }
        2 => {
            let mut t: hg_ticket = 0;
            let s = if u.arbitrary()? {
                status_of(hg_bulkhead_enqueue(bh, u64v(u)?, &mut out, &mut t))
            } else {
                let r = w.request(u)?;
                status_of(hg_bulkhead_enqueue_request(bh, r.ptr(), &mut out, &mut t))
            };
            take_permit(w, s, out);
            if s == hg_status::HG_STATUS_QUEUED {
                w.tickets.push((bh, t));
            }
        }
        3 => {
            // Poll or cancel a ticket (sometimes a forged one, or of another bulkhead).
            if w.tickets.is_empty() || u.ratio(1, 8)? {
                let t: u64 = match pick(u, &[3, 1])? {
                    0 => u.int_in_range(0..=8)?,
                    _ => u.arbitrary()?,
                };
                // A forged ticket that happens to be live and granted: the permit is ours now
                // (the ticket's tracked owner then finds it consumed).
                let s = status_of(hg_ticket_poll(bh, t, &mut out));
                take_permit(w, s, out);
                return Ok(());
            }
            let i = u.choose_index(w.tickets.len())?;
            let (tbh, t) = w.tickets[i];
            match pick(u, &[3, 1, 1])? {
                0 => {
                    let s = status_of(hg_ticket_poll(tbh, t, &mut out));
                    take_permit(w, s, out);
                    if s != hg_status::HG_STATUS_QUEUED {
                        w.tickets.swap_remove(i);
                    }
                }
                1 => {
                    let s = status_of(hg_ticket_cancel(tbh, t));
                    if s == hg_status::HG_STATUS_OK {
                        w.tickets.swap_remove(i);
                    }
                }
                _ => {
                    let reason = match pick(u, &[3, 1])? {
                        0 => u.int_in_range(0..=12)?,
                        _ => u.arbitrary()?,
                    };
                    let s = status_of(hg_ticket_cancel_reason(tbh, t, reason));
                    if s == hg_status::HG_STATUS_OK {
                        w.tickets.swap_remove(i);
                    }
                }
            }
        }
        4 => permit_step(w, u)?,
        5 => permit_step(w, u)?,
        6 => {
            let n = u64v(u)?;
            if status_of(hg_bulkhead_try_acquire_units(bh, n)) == hg_status::HG_STATUS_OK {
                w.units.push((bh, n));
            }
        }
        7 => {
            // Return raw units: ours, or more (refused and counted).
            let mine: Vec<usize> = (0..w.units.len()).filter(|&i| w.units[i].0 == bh).collect();
            if !mine.is_empty() && !u.ratio(1, 4)? {
                let i = *u.choose(&mine)?;
                let (_, n) = w.units.swap_remove(i);
                assert_eq!(
                    status_of(hg_bulkhead_release_units(bh, n)),
                    hg_status::HG_STATUS_OK
                );
            } else {
                // More than the raw units held through every handle (two handles may be one
                // bulkhead: a registry key's, `hg_registry_get` twice).
                let held: u64 = w.units.iter().map(|x| x.1).fold(0, u64::saturating_add);
                let s = status_of(hg_bulkhead_release_units(
                    bh,
                    held.saturating_add(1 + u.int_in_range(0..=3)?),
                ));
                assert_ne!(
                    s,
                    hg_status::HG_STATUS_OK,
                    "a release past the raw units held"
                );
            }
        }
        8 => {
            let _ = status_of(hg_bulkhead_set_limit(bh, u64v(u)?));
        }
        9 => {
            let _ = status_of(hg_bulkhead_set_budget(bh, u64v(u)?));
        }
        10 => {
            let l = w.limits(u)?;
            let _ = status_of(hg_bulkhead_apply_limits(bh, l.ptr()));
        }
        11 => {
            let _ = status_of(hg_bulkhead_set_observe(bh, u32v(u)?));
        }
        12 => {
            let e = output(u, size_of::<hg_stats>())?;
            let s = status_of(hg_bulkhead_stats(bh, e.ptr()));
            check_output(s, &e, size_of::<hg_stats>(), "hg_stats");
        }
        13 => {
            let e = output(u, size_of::<hg_class_stats>())?;
            let s = status_of(hg_bulkhead_class_stats(bh, u32v(u)?, e.ptr()));
            check_output(s, &e, size_of::<hg_class_stats>(), "hg_class_stats");
        }
        14 => {
            let r = w.request(u)?;
            let e = output(u, size_of::<hg_would_admit>())?;
            let s = status_of(hg_bulkhead_would_admit(bh, r.ptr(), e.ptr()));
            check_output(s, &e, size_of::<hg_would_admit>(), "hg_would_admit");
            let mut ms = 0u64;
            let _ = status_of(hg_bulkhead_queue_wait_ms(bh, r.ptr(), &mut ms));
        }
        15 => {
            let _ = status_of(hg_bulkhead_rate_tick(bh));
            let _ = hg_bulkhead_rate_retry_after_ns(bh);
            let _ = status_of(hg_bulkhead_report_load(bh, f64v(u)?, f64v(u)?));
        }
        16 => {
            let _ = hg_bulkhead_call_timeout_ms(bh);
            let _ = hg_bulkhead_call_timeout_within_ms(bh, u64v(u)?);
            // Acquire with no wait (0 ms: never blocks).
            let s = status_of(hg_bulkhead_acquire_timeout(bh, u64v(u)?, 0, &mut out));
            take_permit(w, s, out);
        }
        17 => {
            let ms = match pick(u, &[3, 1])? {
                0 => u.int_in_range(0..=200)?,
                _ => u.int_in_range(0..=100_000)?,
            };
            w.clock.fetch_add(ms * MS, SeqCst);
        }
        18 => {
            let r = hg_bulkhead_retain(bh);
            assert_eq!(r, bh);
            w.bulkheads.push(r);
        }
        _ => {
            if u.arbitrary()? {
                let _ = status_of(hg_bulkhead_close(bh));
            }
            let mut d = hg_drain_result {
                drained: false,
                active: 0,
                queued: 0,
            };
            let _ = status_of(hg_bulkhead_drain(bh, 0, &mut d));
        }
    }
    Ok(())
}

fn permit_step(w: &mut World, u: &mut Unstructured<'_>) -> Result<()> {
    if w.permits.is_empty() {
        return Ok(());
    }
    let i = u.choose_index(w.permits.len())?;
    let p = w.permits[i];
    let outcome = match pick(u, &[4, 1])? {
        0 => u.int_in_range(0..=3)?,
        _ => u.arbitrary()?,
    };
    match pick(u, &[3, 2, 2, 2, 2, 2, 1, 1, 1, 2])? {
        0 => {
            let _ = status_of(hg_permit_release(p));
        }
        1 => {
            let _ = status_of(hg_permit_release_outcome(p, outcome));
        }
        2 => {
            let _ = status_of(hg_permit_release_partial(p, u64v(u)?));
        }
        3 => {
            let _ = status_of(hg_permit_release_usage(p, outcome, u64v(u)?));
        }
        4 => {
            let e = output(u, size_of::<hg_usage_report>())?;
            let s = status_of(hg_permit_report_usage(p, u64v(u)?, u64v(u)?, e.ptr()));
            check_output(s, &e, size_of::<hg_usage_report>(), "hg_usage_report");
        }
        5 => {
            let _ = status_of(hg_permit_refund(p, u64v(u)?));
        }
        6 => {
            let _ = status_of(hg_permit_orphan(p));
        }
        7 => {
            let _ = status_of(hg_permit_call_timed_out(p));
        }
        8 => {
            let _ = (hg_permit_cancel_requested(p), hg_permit_weight(p));
        }
        _ => {
            hg_permit_free(p);
            w.permits.swap_remove(i);
        }
    }
    Ok(())
}

fn registry_step(w: &mut World, u: &mut Unstructured<'_>) -> Result<()> {
    if w.registries.is_empty() {
        return Ok(());
    }
    let reg = *u.choose(&w.registries)?;
    let key = w.key(u)?;
    let (k, n) = (key.ptr::<c_char>().cast_const(), key.len());
    let mut out: *mut hg_permit = std::ptr::null_mut();
    match pick(u, &[3, 3, 2, 2, 1, 1, 1, 1, 1])? {
        0 => {
            let s = status_of(hg_registry_try_acquire(reg, k, n, u64v(u)?, &mut out));
            take_permit(w, s, out);
        }
        1 => {
            let r = w.request(u)?;
            let s = status_of(hg_registry_try_acquire_request(
                reg,
                k,
                n,
                r.ptr(),
                &mut out,
            ));
            take_permit(w, s, out);
        }
        2 => {
            let r = w.request(u)?;
            let mut q: *mut hg_bulkhead = std::ptr::null_mut();
            let mut t: hg_ticket = 0;
            let s = status_of(hg_registry_enqueue_request(
                reg,
                k,
                n,
                r.ptr(),
                &mut out,
                &mut q,
                &mut t,
            ));
            take_permit(w, s, out);
            if s == hg_status::HG_STATUS_QUEUED {
                assert!(!q.is_null(), "queued without its bulkhead");
                w.bulkheads.push(q);
                w.tickets.push((q, t));
            }
        }
        3 => {
            let mut b: *mut hg_bulkhead = std::ptr::null_mut();
            if status_of(hg_registry_get(reg, k, n, &mut b)) == hg_status::HG_STATUS_OK {
                assert!(!b.is_null());
                w.bulkheads.push(b);
            }
        }
        4 => {
            let e = output(u, size_of::<hg_stats>())?;
            let s = status_of(hg_registry_stats(reg, k, n, e.ptr()));
            check_output(s, &e, size_of::<hg_stats>(), "registry hg_stats");
            let e = output(u, size_of::<hg_stats>())?;
            let s = status_of(hg_registry_global_stats(reg, e.ptr()));
            check_output(s, &e, size_of::<hg_stats>(), "global hg_stats");
            let e = output(u, size_of::<hg_class_stats>())?;
            let s = status_of(hg_registry_key_stats(reg, k, n, e.ptr()));
            check_output(s, &e, size_of::<hg_class_stats>(), "key hg_class_stats");
        }
        5 => {
            let r = w.request(u)?;
            let e = output(u, size_of::<hg_would_admit>())?;
            let s = status_of(hg_registry_would_admit(reg, k, n, r.ptr(), e.ptr()));
            check_output(
                s,
                &e,
                size_of::<hg_would_admit>(),
                "registry hg_would_admit",
            );
        }
        6 => {
            let defaults = if u.arbitrary()? {
                Some(w.limits(u)?)
            } else {
                None
            };
            let global = if u.ratio(1, 3)? {
                Some(w.limits(u)?)
            } else {
                None
            };
            let m = u.int_in_range(0..=2)?;
            let mut keys = Vec::new();
            let mut lims = Vec::new();
            for _ in 0..m {
                keys.push(w.key(u)?);
                lims.push(w.limits(u)?);
            }
            let mut arr = Vec::new();
            for (key, l) in keys.iter().zip(&lims) {
                let mut o: hg_registry_key_limits = unsafe { MaybeUninit::zeroed().assume_init() };
                o.struct_size = size_of::<hg_registry_key_limits>() as u32;
                o.key = key.ptr();
                o.key_len = key.len();
                o.limits = l.ptr();
                arr.push(o);
            }
            let ptr_of = |e: &Option<Exact>| {
                e.as_ref()
                    .map_or(std::ptr::null(), |e| e.ptr::<hg_limits>().cast_const())
            };
            let _ = status_of(hg_registry_apply_limits(
                reg,
                ptr_of(&defaults),
                if arr.is_empty() {
                    std::ptr::null()
                } else {
                    arr.as_ptr()
                },
                arr.len(),
                ptr_of(&global),
            ));
        }
        7 => {
            let _ = status_of(hg_registry_close(reg));
        }
        _ => {
            let r = hg_registry_retain(reg);
            assert_eq!(r, reg);
            w.registries.push(r);
        }
    }
    drop(key);
    Ok(())
}

fn misc_step(u: &mut Unstructured<'_>) -> Result<()> {
    let n: u32 = match pick(u, &[3, 1])? {
        0 => u.int_in_range(0..=2100)?,
        _ => u.arbitrary()?,
    };
    c_str_ok(hg_status_message(n));
    c_str_ok(hg_reason_name(n));
    c_str_ok(hg_bound_name(n));
    c_str_ok(hg_version());
    defaults_sized(u)?;
    let url: &[u8] = u.arbitrary()?;
    let url = Exact::of(url);
    let buf_len = u.int_in_range(0..=48)?;
    let buf = Exact::zeroed(buf_len);
    let p = if buf_len == 0 {
        std::ptr::null_mut()
    } else {
        buf.ptr()
    };
    let mut out_len = 0usize;
    let _ = status_of(hg_origin_key(
        url.ptr(),
        url.len(),
        p,
        buf_len,
        &mut out_len,
    ));
    Ok(())
}

/// The `hg_*_default_sized` functions (what the header's `hg_*_default(p)` macros call) on a
/// heap buffer of exactly the size passed, any size: ASan sees a byte written past it; a
/// refused size writes nothing, an accepted one sets `struct_size` to the bytes written.
fn defaults_sized(u: &mut Unstructured<'_>) -> Result<()> {
    fn one<T>(
        u: &mut Unstructured<'_>,
        f: extern "C" fn(*mut T, usize) -> hg_status,
    ) -> Result<()> {
        let full = size_of::<T>();
        let size = match pick(u, &[4, 1])? {
            0 => u.int_in_range(0..=full + 16)?,
            _ => u.arbitrary::<u16>()? as usize,
        };
        let buf = Exact::zeroed(size);
        let p = if u.ratio(1, 32)? {
            std::ptr::null_mut()
        } else {
            buf.ptr::<T>()
        };
        match status_of(f(p, size)) {
            hg_status::HG_STATUS_OK => {
                // SAFETY: accepted: at least the 4 bytes of `struct_size` were written.
                let written = unsafe { buf.ptr::<u32>().read_unaligned() } as usize;
                assert_eq!(written, size.min(full), "struct_size after a default of {size}");
            }
            s => {
                assert!(
                    p.is_null() || s == hg_status::HG_STATUS_INVALID_ARGUMENT,
                    "{s:?} for size {size}"
                );
                // SAFETY: `buf` has `size` readable bytes.
                let untouched = (0..size).all(|i| unsafe { *buf.ptr::<u8>().add(i) } == 0);
                assert!(untouched, "a refused default of size {size} wrote");
            }
        }
        Ok(())
    }
    match u.int_in_range(0..=4)? {
        0 => one(u, hg_config_default_sized),
        1 => one(u, hg_request_default_sized),
        2 => one(u, hg_limits_default_sized),
        3 => one(u, hg_class_default_sized),
        _ => one(u, hg_host_options_default_sized),
    }
}

/// Frees everything the input still owns: tickets cancelled (or their grants taken), permits,
/// bulkhead references, registries.
fn finish(mut w: World) {
    for (bh, t) in std::mem::take(&mut w.tickets) {
        if status_of(hg_ticket_cancel(bh, t)) != hg_status::HG_STATUS_OK {
            let mut out: *mut hg_permit = std::ptr::null_mut();
            let s = status_of(hg_ticket_poll(bh, t, &mut out));
            if s == hg_status::HG_STATUS_OK {
                w.permits.push(out);
            }
        }
    }
    for (bh, n) in std::mem::take(&mut w.units) {
        assert_eq!(
            status_of(hg_bulkhead_release_units(bh, n)),
            hg_status::HG_STATUS_OK
        );
    }
    for p in w.permits.drain(..) {
        hg_permit_free(p);
    }
    for b in w.bulkheads.drain(..) {
        hg_bulkhead_free(b);
    }
    for r in w.registries.drain(..) {
        hg_registry_free(r);
    }
}

fn run(w: &mut World, u: &mut Unstructured<'_>) -> Result<()> {
    if trace() {
        eprintln!("new input");
    }
    new_bulkhead(w, u)?;
    if u.ratio(1, 3)? {
        new_registry(w, u)?;
    }
    for _ in 0..u.int_in_range(0..=64)? {
        match pick(u, &[12, 3, 1, 1, 1])? {
            0 => {
                if let Some(bh) = w.bulkhead(u)? {
                    bulkhead_step(w, u, bh)?;
                }
            }
            1 => registry_step(w, u)?,
            2 => new_bulkhead(w, u)?,
            3 => new_registry(w, u)?,
            _ => misc_step(u)?,
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut w = World::new();
    let _ = run(&mut w, &mut u);
    finish(w);
});
