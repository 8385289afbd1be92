//! `hg_config`, `hg_stats` and `hg_drain_result`. `hg_config` and `hg_stats` begin with
//! `uint32_t struct_size` and only ever grow at the end: a caller built against an older header
//! passes its smaller size and this library reads / writes only that many bytes.

use std::{mem::offset_of, time::Duration};

use hullguard_core::{Config, Stats};

use crate::status::hg_status;

/// "Use the configured `queue_timeout`" as a per-call timeout.
pub const HG_TIMEOUT_DEFAULT: u64 = u64::MAX - 1;
/// No deadline.
pub const HG_TIMEOUT_INFINITE: u64 = u64::MAX;
/// Largest permit count (`hg_config.max_concurrent`, weights): 2^60 - 1.
pub const HG_MAX_PERMITS: u64 = 1_152_921_504_606_846_975;
/// Largest `hg_config.max_queue`: 2^20.
pub const HG_MAX_QUEUE: u64 = 1_048_576;
// Literals so that cbindgen can print them; pinned to the core's values here.
const _: () = assert!(HG_MAX_PERMITS == hullguard_core::MAX_PERMITS);
const _: () = assert!(HG_MAX_QUEUE == hullguard_core::MAX_QUEUE);

/// Configuration of a bulkhead. Fill it with `hg_config_default()`, then change fields.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_config {
    /// `sizeof(hg_config)` as the caller compiled it (set by `hg_config_default()`).
    pub struct_size: u32,
    /// The ceiling of the limit, `1 .. HG_MAX_PERMITS` (default 10).
    pub max_concurrent: u64,
    /// Live waiters allowed, `0 .. HG_MAX_QUEUE` (default 100; 0 = fail fast).
    pub max_queue: u64,
    /// Default queue deadline in milliseconds (default 30000; `HG_TIMEOUT_INFINITE` = none).
    pub queue_timeout_ms: u64,
    /// `false` admits everything (still counted in the stats).
    pub enabled: bool,
}

impl hg_config {
    pub(crate) const DEFAULT: hg_config = hg_config {
        struct_size: size_of::<hg_config>() as u32,
        max_concurrent: Config::DEFAULT.max_concurrent,
        max_queue: Config::DEFAULT.max_queue,
        queue_timeout_ms: 30_000,
        enabled: true,
    };
}

/// Reads a caller's `hg_config` of `struct_size` bytes (older, smaller layouts get defaults for
/// the fields they lack) and validates it.
///
/// # Safety
/// `p` points to a readable `hg_config` whose `struct_size` bytes are initialized.
pub(crate) unsafe fn read_config(p: *const hg_config) -> Result<Config, hg_status> {
    // SAFETY: the caller guarantees at least the `struct_size` field is readable.
    let declared = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    let ours = size_of::<hg_config>();
    if declared < offset_of!(hg_config, enabled) + 1 {
        return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
    }
    let n = declared.min(ours);
    let mut buf = [0u8; size_of::<hg_config>()];
    // SAFETY: `n` bytes are readable at `p` (the caller's declared size, capped at ours), and
    // `buf` has room for `ours >= n` bytes; the regions do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), buf.as_mut_ptr(), n) };
    let u64_at = |off: usize| u64::from_ne_bytes(buf[off..off + 8].try_into().unwrap_or([0; 8]));
    let timeout_ms = u64_at(offset_of!(hg_config, queue_timeout_ms));
    let c = Config {
        max_concurrent: u64_at(offset_of!(hg_config, max_concurrent)),
        max_queue: u64_at(offset_of!(hg_config, max_queue)),
        queue_timeout: match timeout_ms {
            HG_TIMEOUT_INFINITE => Duration::MAX,
            HG_TIMEOUT_DEFAULT => Config::DEFAULT.queue_timeout,
            ms => Duration::from_millis(ms),
        },
        // Read as a byte: any non-zero value is true (never a Rust `bool` from foreign bytes).
        enabled: buf[offset_of!(hg_config, enabled)] != 0,
        ..Config::DEFAULT
    };
    c.validate()
        .map_err(|_| hg_status::HG_STATUS_INVALID_ARGUMENT)?;
    Ok(c)
}

/// A per-call timeout in ms: `HG_TIMEOUT_DEFAULT` → `None` (the configured one),
/// `HG_TIMEOUT_INFINITE` → no deadline.
pub(crate) fn call_timeout(ms: u64) -> Option<Duration> {
    match ms {
        HG_TIMEOUT_DEFAULT => None,
        HG_TIMEOUT_INFINITE => Some(Duration::MAX),
        ms => Some(Duration::from_millis(ms)),
    }
}

/// Fills `*config` with the defaults (10 / 100 / 30000 ms / enabled) and its `struct_size`.
///
/// Parameters:
///   config: where to write. NULL → `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: touches only `*config`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_config_default(config: *mut hg_config) -> hg_status {
    crate::boundary::boundary(|| {
        let out = crate::boundary::try_mut!(config);
        *out = hg_config::DEFAULT;
        hg_status::HG_STATUS_OK
    })
}

/// The stats of one bulkhead (DESIGN §3.7). Set `struct_size = sizeof(hg_stats)` before
/// calling `hg_bulkhead_stats()`; the library writes only that many bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_stats {
    /// `sizeof(hg_stats)` as the caller compiled it.
    pub struct_size: u32,
    pub active: u64,
    pub queued: u64,
    pub granted_unclaimed: u64,
    pub limit: u64,
    pub max_concurrent: u64,
    /// Permits free now; negative after a shrink.
    pub available: i64,
    pub admitted_total: u64,
    /// Rejections indexed by `hg_reason` (8–15 reserved, 0).
    pub rejected: [u64; 16],
    pub released_twice_total: u64,
    pub leaked_total: u64,
    pub ring_free: u64,
    pub queue_wait_count: u64,
    pub queue_wait_sum_ns: u64,
    pub queue_wait_max_ns: u64,
}

impl From<&Stats> for hg_stats {
    fn from(s: &Stats) -> Self {
        let mut rejected = [0u64; 16];
        rejected[..8].copy_from_slice(&s.rejected_by_reason.0);
        hg_stats {
            struct_size: size_of::<hg_stats>() as u32,
            active: s.active,
            queued: s.queued,
            granted_unclaimed: s.granted_unclaimed,
            limit: s.limit,
            max_concurrent: s.max_concurrent,
            available: s.available,
            admitted_total: s.admitted_total,
            rejected,
            released_twice_total: s.released_twice_total,
            leaked_total: s.leaked_total,
            ring_free: s.ring_free,
            queue_wait_count: s.queue_wait_count,
            queue_wait_sum_ns: s.queue_wait_sum_ns,
            queue_wait_max_ns: s.queue_wait_max_ns,
        }
    }
}

/// Writes `stats` into the caller's `hg_stats` (at most its `struct_size` bytes).
///
/// # Safety
/// `out` points to a writable `hg_stats` whose `struct_size` field is initialized.
pub(crate) unsafe fn write_stats(out: *mut hg_stats, stats: &Stats) -> hg_status {
    // SAFETY: the caller guarantees `struct_size` is readable.
    let declared = unsafe { out.cast::<u32>().read_unaligned() } as usize;
    if declared < size_of::<u32>() {
        return hg_status::HG_STATUS_INVALID_ARGUMENT;
    }
    let mut ours = hg_stats::from(stats);
    let n = declared.min(size_of::<hg_stats>());
    // Echo how many bytes were written: a caller built against a newer, larger struct learns
    // which fields this library filled.
    ours.struct_size = n as u32;
    // SAFETY: `n` bytes fit both the caller's struct (its declared size) and ours.
    unsafe { std::ptr::copy_nonoverlapping((&raw const ours).cast::<u8>(), out.cast::<u8>(), n) };
    hg_status::HG_STATUS_OK
}

/// What `hg_bulkhead_drain()` found.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_drain_result {
    /// Whether the bulkhead became idle before the timeout.
    pub drained: bool,
    pub active: u64,
    pub queued: u64,
}
