//! `hg_host_*`: the host bulkhead (crate hullguard-host, docs/design.md §14) through the C ABI —
//! one limit shared by every process on a Linux host that opens the same name.
//!
//! Marshalling only. Options are read into `HostOptions` through its by-name table
//! (`HostOptions::set` / `validate`: the ranges and their messages are the host crate's);
//! rejections are the core's `AcquireError`, given the same statuses as a local bulkhead's
//! (`hg_status::from`, `admission::refused`); the rest is C layout and the per-thread message
//! of the last failure (`hg_host_last_error()`).

use std::{
    cell::RefCell,
    ffi::{CStr, OsStr, c_char},
    fmt,
    mem::offset_of,
    os::unix::ffi::OsStrExt,
    sync::Arc,
    time::Duration,
};

use hullguard_host::{
    HostBulkhead, HostError, HostOptions, HostPermit, HostStats, HostValue, LeaseError,
    options::HostKind,
};

use crate::{
    admission::{hg_request, read_request, refused},
    boundary::boundary,
    config::{HG_TIMEOUT_DEFAULT, hg_drain_result, hg_stats, wait_timeout},
    sized::{self, Output, Plain, write_str},
    status::hg_status,
};

/// A host bulkhead: one limit for every process on this host that opens the same name (a
/// segment file in `/dev/shm` or `hg_host_options.dir`). Reference-counted like `hg_bulkhead`:
/// `hg_host_bulkhead_retain()` adds a reference, `hg_host_bulkhead_free()` drops one.
/// Thread-safe. After `fork()` a handle inherited by the child attaches the child on first use
/// (a slot of its own).
pub struct hg_host_bulkhead {
    _private: [u8; 0],
}

/// Permits held on a host bulkhead by one acquire. Owned by the caller: release with
/// `hg_host_permit_release()`, free with `hg_host_permit_free()` (which releases first if
/// still held). It does not keep its `hg_host_bulkhead` alive and needs none: the bulkhead may
/// be freed first.
pub struct hg_host_permit {
    _private: [u8; 0],
}

/// `hg_host_options.on_mismatch`: what `hg_host_bulkhead_open()` does when the segment exists
/// with other host-wide settings (`max_concurrent`, `budget`, `lease_ttl_ms`, `beat_ms`,
/// `probe_ms`). The numbers are the order of the host crate's option table.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_host_on_mismatch {
    /// Refuse (`HG_STATUS_HOST_SEGMENT`; `hg_host_last_error()` names the option and both
    /// values). The default.
    HG_HOST_ON_MISMATCH_ERROR = 0,
    /// Attach and use the segment's settings.
    HG_HOST_ON_MISMATCH_ADOPT = 1,
}

/// Options of `hg_host_bulkhead_open()`. Fill it with `hg_host_options_default()`, then change
/// fields. Size-versioned: `struct_size` first; a newer caller's larger struct is accepted only
/// when every byte past this library's struct is 0.
///
/// Every value is checked by the host crate's option table (a bad one is refused
/// `HG_STATUS_INVALID_ARGUMENT`, and `hg_host_last_error()` names the option and its range).
/// `max_concurrent`, `budget`, `lease_ttl_ms`, `beat_ms` and `probe_ms` are host-wide: written
/// into the segment by the process that creates it and compared by every later one (see
/// `on_mismatch`); `max_queue` and `queue_timeout_ms` are this process's own. In every `_ms`
/// field, `HG_TIMEOUT_DEFAULT` means "the default".
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_host_options {
    /// `sizeof(hg_host_options)` as the caller compiled it (set by `hg_host_options_default()`).
    pub struct_size: u32,
    /// Permits the whole host may hold at once, `1 .. 1048575` (default 10).
    pub max_concurrent: u64,
    /// This process's waiters, `0 .. HG_MAX_QUEUE` (default 100; 0 = never queue).
    pub max_queue: u64,
    /// How long an acquire may wait by default, in ms, at most 365 days (default 30000; 0 = do
    /// not queue).
    pub queue_timeout_ms: u64,
    /// The host-wide budget (the second dimension, see `hg_host_bulkhead_acquire_request()`),
    /// `1 .. HG_MAX_BUDGET`; 0 = none (the default).
    pub budget: u64,
    /// A process whose heartbeat has not moved for this long is expired: its permits return and
    /// its later releases are `HG_STATUS_STALE_LEASE` (default 10000, `100 .. 3600000`, at least
    /// 3 beats).
    pub lease_ttl_ms: u64,
    /// The heartbeat period (default 1000, `10 .. 600000`).
    pub beat_ms: u64,
    /// How often each process probes the others' liveness: a killed process's permits return
    /// within about this long (default 250, `10 .. 60000`).
    pub probe_ms: u64,
    /// Slots (processes attached at once) of a new segment, `1 .. 4096` (default 256).
    pub slots: u32,
    /// The mode of a new segment file, `0 .. 0777`, never world-writable (default 0600).
    pub mode: u32,
    /// The directory of the segment file: NULL = `/dev/shm` (the default); a volume shared
    /// between containers works. Read during `hg_host_bulkhead_open()` only.
    pub dir: *const c_char,
    /// An `hg_host_on_mismatch` (default `HG_HOST_ON_MISMATCH_ERROR`; another number is
    /// refused).
    pub on_mismatch: u32,
    /// Reserved for growth: all 0 (`hg_host_options_default()` zeroes them), refused when not
    /// (a newer caller's setting this library cannot honour). Also keeps the struct free of
    /// tail padding.
    pub reserved: [u32; 9],
}

// SAFETY: repr(C), `struct_size` first, integers and a raw pointer only.
unsafe impl Plain for hg_host_options {}

// No tail padding: `reserved` ends the struct (see `sized`).
const _: () = assert!(offset_of!(hg_host_options, reserved) + 36 == size_of::<hg_host_options>());

/// The stats of a host bulkhead, read from this process (`hg_host_bulkhead_stats()`): the host's
/// figures in the local bulkhead's schema (`hg_stats`' names), then the lease ledger's own. Set
/// `struct_size = sizeof(hg_host_stats)` first; the library writes at most that many bytes and
/// stores back how many it wrote.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_host_stats {
    /// `sizeof(hg_host_stats)` as the caller compiled it; on return, the bytes written.
    pub struct_size: u32,
    /// Permits held by every process.
    pub active: u64,
    /// Waiters of every process.
    pub queued: u64,
    /// The host-wide limit (`max_concurrent` of the segment).
    pub limit: u64,
    /// Permits free on the host now.
    pub available: i64,
    /// Acquires admitted on the host.
    pub admitted_total: u64,
    /// Rejections on the host, indexed by `hg_reason` (as `hg_stats.rejected`).
    pub rejected: [u64; 16],
    /// Calls in flight when their lease was reclaimed or expired.
    pub orphaned_total: u64,
    /// Queued acquires granted on the host.
    pub queue_wait_count: u64,
    /// Their waits, enqueue to grant, in ns.
    pub queue_wait_sum_ns: u64,
    pub queue_wait_max_ns: u64,
    /// Whether the segment has a budget; the `budget_*` fields are 0 otherwise.
    pub budget_present: bool,
    /// The host-wide budget.
    pub budget_limit: u64,
    /// Budget units held by every process.
    pub budget_in_use: u64,
    /// Budget units free now.
    pub budget_available: i64,
    /// Calls (acquires) in flight on the host.
    pub in_flight: u64,
    /// Processes attached now (live slots).
    pub attached: u64,
    /// The segment's slot count.
    pub slots: u64,
    /// Slots reclaimed from dead processes.
    pub reclaimed_dead_total: u64,
    /// Slots expired (their process stopped or hung past `lease_ttl_ms`).
    pub reclaimed_expired_total: u64,
    /// Permits those reclaims and expiries returned.
    pub reclaimed_permits_total: u64,
    /// Releases refused `HG_STATUS_STALE_LEASE`.
    pub stale_releases_total: u64,
    /// Releases refused `HG_STATUS_FOREIGN_LEASE`.
    pub foreign_releases_total: u64,
    /// This process's calls in flight.
    pub local_in_flight: u64,
    /// This process's permits held.
    pub local_active: u64,
    /// This process's waiters.
    pub local_queued: u64,
    /// This process's slot.
    pub slot: u64,
}

// SAFETY: repr(C), `struct_size` first.
unsafe impl Output for hg_host_stats {}

impl From<&HostStats> for hg_host_stats {
    fn from(h: &HostStats) -> Self {
        // The schema the local bulkhead's stats use (the reason indices included).
        let s = hg_stats::from(&h.stats);
        hg_host_stats {
            struct_size: size_of::<hg_host_stats>() as u32,
            active: s.active,
            queued: s.queued,
            limit: s.limit,
            available: s.available,
            admitted_total: s.admitted_total,
            rejected: s.rejected,
            orphaned_total: s.orphaned_total,
            queue_wait_count: s.queue_wait_count,
            queue_wait_sum_ns: s.queue_wait_sum_ns,
            queue_wait_max_ns: s.queue_wait_max_ns,
            budget_present: s.budget_present,
            budget_limit: s.budget_limit,
            budget_in_use: s.budget_in_use,
            budget_available: s.budget_available,
            in_flight: h.in_flight,
            attached: h.attached,
            slots: h.slots,
            reclaimed_dead_total: h.reclaimed_dead_total,
            reclaimed_expired_total: h.reclaimed_expired_total,
            reclaimed_permits_total: h.reclaimed_permits_total,
            stale_releases_total: h.stale_releases_total,
            foreign_releases_total: h.foreign_releases_total,
            local_in_flight: h.local_in_flight,
            local_active: h.local_active,
            local_queued: h.local_queued,
            slot: h.slot,
        }
    }
}

// ----- the message of the last failure ----------------------------------------------------

/// Why the last `hg_host_*` call of this thread failed (rendered only when asked for).
enum Failure {
    Host(HostError),
    Lease(LeaseError),
    Null {
        function: &'static str,
        parameter: &'static str,
    },
    Text {
        function: &'static str,
        text: String,
    },
    Panic(&'static str),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Host(e) => fmt::Display::fmt(e, f),
            Failure::Lease(e) => fmt::Display::fmt(e, f),
            Failure::Null {
                function,
                parameter,
            } => write!(f, "{function}: `{parameter}` is NULL"),
            Failure::Text { function, text } => write!(f, "{function}: {text}"),
            Failure::Panic(function) => {
                write!(f, "{function}: internal error (a panic was caught)")
            }
        }
    }
}

thread_local! {
    static LAST: RefCell<Option<Failure>> = const { RefCell::new(None) };
}

/// Records `why` as this thread's last failure; returns `status`.
fn fail(status: hg_status, why: Failure) -> hg_status {
    // `try_with` / `try_borrow_mut`: never a panic (a thread being torn down keeps no message).
    let _ = LAST.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = Some(why);
        }
    });
    status
}

/// The status of a host error (a rejection: the local bulkhead's status for its reason),
/// recording it as the last failure.
fn host_failed(e: HostError) -> hg_status {
    let status = match &e {
        HostError::Option { .. } => hg_status::HG_STATUS_INVALID_ARGUMENT,
        HostError::Acquire(a) => a.into(),
        _ => hg_status::HG_STATUS_HOST_SEGMENT,
    };
    fail(status, Failure::Host(e))
}

/// A NULL `parameter` of `function`.
fn null(function: &'static str, parameter: &'static str) -> hg_status {
    fail(
        hg_status::HG_STATUS_NULL_PARAMETER,
        Failure::Null {
            function,
            parameter,
        },
    )
}

/// A bad argument of `function`, described by `text`.
fn invalid(function: &'static str, text: String) -> hg_status {
    fail(
        hg_status::HG_STATUS_INVALID_ARGUMENT,
        Failure::Text { function, text },
    )
}

/// `need!(F, ptr, "ptr")`: return `HG_STATUS_NULL_PARAMETER`, naming the parameter, if NULL.
macro_rules! need {
    ($f:expr, $p:expr, $name:literal) => {
        if $p.is_null() {
            return null($f, $name);
        }
    };
}

/// The panic boundary of a host export: a caught panic is also the last failure.
fn guard(function: &'static str, body: impl FnOnce() -> hg_status) -> hg_status {
    let status = boundary(body);
    if status == hg_status::HG_STATUS_PANIC {
        fail(status, Failure::Panic(function))
    } else {
        status
    }
}

/// The message of the last `hg_host_*` call of this thread that did not return `HG_STATUS_OK`
/// (a successful call leaves it as it is: read it right after the failure), written into `buf`
/// with a terminating NUL: which argument was NULL or out of range (the option and its range),
/// which file could not be used and why (permission, incompatible layout naming both
/// libraries, a setting that differs from the segment's naming both values, no free slot,
/// poisoned, removed), the rejection with the host's counts, or the lease error. An empty
/// string when this thread has had no failure.
///
/// Parameters:
///   buf, buf_len: where to write. out_len: receives the message's length without the NUL
///   (also when `buf` is too small).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a `buf` too small (then
///   `*out_len` says how much is needed, plus 1 for the NUL; pass `buf` NULL and `buf_len` 0 to
///   ask for the size first); `HG_STATUS_NULL_PARAMETER`. It never changes the message.
/// Thread-safety: any thread; reads this thread's message only.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_last_error(
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    boundary(|| {
        if out_len.is_null() || (buf.is_null() && buf_len != 0) {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        let message = LAST
            .try_with(|l| {
                l.try_borrow()
                    .ok()
                    .and_then(|l| l.as_ref().map(ToString::to_string))
            })
            .ok()
            .flatten()
            .unwrap_or_default();
        // SAFETY: `out_len` is non-null and writable, `buf` NULL (with 0) or `buf_len` bytes
        // (contract).
        unsafe { write_str(message.as_bytes(), buf, buf_len, &mut *out_len) }
    })
}

// ----- options ---------------------------------------------------------------------------

/// Fills `*opts` with the defaults (10 permits, 100 waiters, 30000 ms, no budget, lease
/// 10000 / beat 1000 / probe 250 ms, 256 slots, mode 0600, `/dev/shm`,
/// `HG_HOST_ON_MISMATCH_ERROR`) and its `struct_size`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; touches only `*opts`.
///
/// C callers reach it through the header's macro of the same name, which calls
/// `hg_host_options_default_sized(p, sizeof *p)`: a binary built against an older, smaller
/// header is never written past its struct. This function writes this library's whole struct.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_options_default(opts: *mut hg_host_options) -> hg_status {
    hg_host_options_default_sized(opts, size_of::<hg_host_options>())
}

/// [`hg_host_options_default`] for a caller's `hg_host_options` of `size` bytes (what the
/// header's `hg_host_options_default(p)` macro calls, with `sizeof *p`): writes the first
/// `min(size, sizeof(hg_host_options))` bytes of the defaults and sets `struct_size` to that
/// many, so a caller built against an older, smaller header is never written past its struct.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT` for a
/// `size` below `sizeof(hg_host_options)` of this first version (nothing written).
/// Thread-safety: any thread; touches only the `size` bytes at `opts`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_options_default_sized(
    opts: *mut hg_host_options,
    size: usize,
) -> hg_status {
    // Named as the caller wrote it (the header's macro calls this function).
    const F: &str = "hg_host_options_default";
    guard(F, || {
        need!(F, opts, "opts");
        let d = HostOptions::default();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(HG_TIMEOUT_DEFAULT - 1);
        let v = hg_host_options {
            struct_size: size_of::<hg_host_options>() as u32,
            max_concurrent: d.max_concurrent,
            max_queue: d.max_queue,
            queue_timeout_ms: ms(d.queue_timeout),
            budget: d.budget.unwrap_or(0),
            lease_ttl_ms: ms(d.lease_ttl),
            beat_ms: ms(d.beat),
            probe_ms: ms(d.probe),
            slots: d.slots,
            mode: d.mode,
            dir: std::ptr::null(),
            on_mismatch: hg_host_on_mismatch::HG_HOST_ON_MISMATCH_ERROR as u32,
            reserved: [0; 9],
        };
        // SAFETY: `size` writable bytes at `opts` (contract).
        let s = unsafe { crate::sized::fill(opts, size, size_of::<hg_host_options>(), &v) };
        if s != hg_status::HG_STATUS_OK {
            return invalid(
                F,
                format!(
                    "size {size} is below sizeof(hg_host_options) = {}",
                    size_of::<hg_host_options>()
                ),
            );
        }
        hg_status::HG_STATUS_OK
    })
}

/// The words of the `on_mismatch` option (the host crate's table: its order is
/// `hg_host_on_mismatch`).
fn on_mismatch_words() -> &'static [&'static str] {
    match HostOptions::find("on_mismatch").map(|o| o.kind) {
        Some(HostKind::Choice(words)) => words,
        _ => &[],
    }
}

/// Reads a caller's `hg_host_options` into the host crate's options, each value through
/// `HostOptions::set` (its ranges, its messages), then `validate` (the relations).
///
/// # Safety
/// `p` is non-null and points to a readable `hg_host_options` of its declared size, whose
/// `dir` is NULL or a NUL-terminated string.
unsafe fn read_options(
    function: &'static str,
    p: *const hg_host_options,
) -> Result<HostOptions, hg_status> {
    // The whole first version is required (so a size never ends inside `dir`).
    // SAFETY: per the contract.
    let r = unsafe { sized::read(p, size_of::<hg_host_options>()) }.map_err(|s| {
        invalid(
            function,
            format!(
                "`opts->struct_size` is below sizeof(hg_host_options) = {} (fill it with \
                 hg_host_options_default()), or the struct is a newer one with a field this \
                 library does not know set (status {})",
                size_of::<hg_host_options>(),
                s as u32
            ),
        )
    })?;
    let mut o = HostOptions {
        library: "c",
        ..HostOptions::default()
    };
    let set =
        |o: &mut HostOptions, name: &str, v: HostValue<'_>| o.set(name, v).map_err(host_failed);
    set(&mut o, "max_concurrent", HostValue::Int(r.max_concurrent))?;
    set(&mut o, "max_queue", HostValue::Int(r.max_queue))?;
    for (name, ms) in [
        ("queue_timeout", r.queue_timeout_ms),
        ("lease_ttl", r.lease_ttl_ms),
        ("beat", r.beat_ms),
        ("probe", r.probe_ms),
    ] {
        if ms != HG_TIMEOUT_DEFAULT {
            set(&mut o, name, HostValue::Duration(Duration::from_millis(ms)))?;
        }
    }
    if r.budget != 0 {
        set(&mut o, "budget", HostValue::Int(r.budget))?;
    }
    set(&mut o, "slots", HostValue::Int(r.slots.into()))?;
    set(&mut o, "mode", HostValue::Int(r.mode.into()))?;
    if !r.dir.is_null() {
        // SAFETY: a non-NULL `dir` is a NUL-terminated string (contract).
        let dir = unsafe { CStr::from_ptr(r.dir) };
        match dir.to_str() {
            Ok(s) => set(&mut o, "dir", HostValue::Str(s))?,
            // A Linux path is bytes: one that is not UTF-8 is still a path.
            Err(_) => o.dir = OsStr::from_bytes(dir.to_bytes()).into(),
        }
    }
    let words = on_mismatch_words();
    match words.get(r.on_mismatch as usize) {
        Some(word) => set(&mut o, "on_mismatch", HostValue::Str(word))?,
        None => {
            let allowed: Vec<String> = words
                .iter()
                .enumerate()
                .map(|(i, w)| format!("{i} ({w})"))
                .collect();
            return Err(host_failed(HostError::Option {
                option: "on_mismatch",
                message: format!(
                    "{}: expected an hg_host_on_mismatch, one of {}",
                    r.on_mismatch,
                    allowed.join(", ")
                ),
            }));
        }
    }
    if let Some(i) = r.reserved.iter().position(|w| *w != 0) {
        return Err(invalid(
            function,
            format!(
                "`opts->reserved[{i}]` is {}: reserved words must be 0 (a setting of a newer \
                 library this one cannot honour)",
                r.reserved[i]
            ),
        ));
    }
    o.validate().map_err(host_failed)?;
    Ok(o)
}

/// Checks options as `hg_host_bulkhead_open()` would, without opening anything.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (`hg_host_last_error()` names the
///   option and its range: `"host bulkhead option `mode`: 666: a segment file may not be
///   world-writable"`); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; touches nothing but this thread's last message.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_options_check(opts: *const hg_host_options) -> hg_status {
    const F: &str = "hg_host_options_check";
    guard(F, || {
        need!(F, opts, "opts");
        // SAFETY: non-null; a readable `hg_host_options` (contract).
        match unsafe { read_options(F, opts) } {
            Ok(_) => hg_status::HG_STATUS_OK,
            Err(s) => s,
        }
    })
}

// ----- the bulkhead ----------------------------------------------------------------------

/// # Safety
/// `bh` is non-null and a live `hg_host_bulkhead*` (from `hg_host_bulkhead_open()` or a retain,
/// not freed).
unsafe fn host_ref<'a>(bh: *const hg_host_bulkhead) -> &'a HostBulkhead {
    // SAFETY: per the contract, a live `Arc<HostBulkhead>` pointer.
    unsafe { &*bh.cast::<HostBulkhead>() }
}

/// `let bh = try_host!(F, bh);` — the bulkhead, or `HG_STATUS_NULL_PARAMETER` naming `bh`.
macro_rules! try_host {
    ($f:expr, $bh:expr) => {{
        need!($f, $bh, "bh");
        // SAFETY: non-null; every export documents that `bh` is NULL or a live handle.
        unsafe { host_ref($bh) }
    }};
}

/// Opens (creating it if absent: atomically, never half-initialised) the host bulkhead `name`
/// and attaches this process (a slot of its own; the segment file is
/// `<dir>/hullguard.<euid>.<name>`, never removed automatically).
///
/// Parameters:
///   name: NUL-terminated, 1 to 200 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`.
///   opts: from `hg_host_options_default()`, then edited (see `hg_host_options`).
///   out: receives the new handle (set only on `HG_STATUS_OK`).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT` for a bad
///   name or option (`hg_host_last_error()` names it and its range); `HG_STATUS_HOST_SEGMENT`
///   when the segment file cannot be used: an I/O error, another owner or a world-writable
///   mode, an incompatible layout or version (naming both libraries), a host-wide setting
///   that differs from the segment's (with `HG_HOST_ON_MISMATCH_ERROR`), every slot held by a
///   live process, a poisoned segment — `hg_host_last_error()` says which.
///
/// Memory and lifetimes: the caller owns one reference; drop it with `hg_host_bulkhead_free()`.
/// The attachment is process-wide and lives as long as the process (docs/design.md §14.3):
/// every handle of this process on the same file shares it (its slot, its queue, its close),
/// and this process's slot is freed by its exit, never by a free. `opts` (and `opts->dir`) are
/// not kept.
///
/// Thread-safety: any thread. Creates the file, maps it and starts this process's keeper
/// thread (`hullguard-host`) on the first open of a file.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_open(
    name: *const c_char,
    opts: *const hg_host_options,
    out: *mut *mut hg_host_bulkhead,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_open";
    guard(F, || {
        need!(F, name, "name");
        need!(F, opts, "opts");
        need!(F, out, "out");
        // SAFETY: a NUL-terminated string (contract).
        let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
            return invalid(F, "`name` is not UTF-8".into());
        };
        // SAFETY: non-null; a readable `hg_host_options` (contract).
        let options = match unsafe { read_options(F, opts) } {
            Ok(o) => o,
            Err(s) => return s,
        };
        match HostBulkhead::open(name, options) {
            Ok(bh) => {
                // SAFETY: non-null and writable (contract).
                unsafe { *out = Arc::into_raw(Arc::new(bh)).cast_mut().cast() };
                hg_status::HG_STATUS_OK
            }
            Err(e) => host_failed(e),
        }
    })
}

/// Adds a reference to `bh` and returns it (NULL in, NULL out).
///
/// Memory and lifetimes: each reference is dropped by one `hg_host_bulkhead_free()`.
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_retain(bh: *const hg_host_bulkhead) -> *const hg_host_bulkhead {
    boundary(|| {
        if !bh.is_null() {
            // SAFETY: a live pointer from `Arc::into_raw` (contract).
            unsafe { Arc::increment_strong_count(bh.cast::<HostBulkhead>()) };
        }
        bh
    })
}

/// Drops one reference to `bh`. NULL is accepted and ignored.
///
/// Unlike `hg_bulkhead_free()`, freeing the last reference does not close: closing is this
/// process's (every handle on the file shares it), so it is only ever explicit
/// (`hg_host_bulkhead_close()`). Permits keep working and release normally; this process keeps
/// its slot until it exits.
///
/// Memory and lifetimes: after this call the caller's `bh` is dangling; freeing the same
/// reference twice is undefined behaviour. Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_free(bh: *const hg_host_bulkhead) {
    boundary(|| {
        if !bh.is_null() {
            // SAFETY: a live pointer from `Arc::into_raw` whose reference the caller gives up.
            drop(unsafe { Arc::from_raw(bh.cast::<HostBulkhead>()) });
        }
    })
}

/// A host acquire's result as a status and `*out` (a new permit).
fn permit_out(r: Result<HostPermit, HostError>, out: *mut *mut hg_host_permit) -> hg_status {
    match r {
        Ok(p) => {
            // SAFETY: `out` is non-null and writable (checked by every caller; contract).
            unsafe { *out = Box::into_raw(Box::new(p)).cast() };
            hg_status::HG_STATUS_OK
        }
        Err(e) => host_failed(e),
    }
}

/// Takes `weight` permits of the host now, or fails without waiting (never queues; FIFO across
/// processes: refused while any process has waiters, no barging).
///
/// Parameters:
///   bh: the bulkhead. weight: `1 .. max_concurrent`. out: receives the permit on
///   `HG_STATUS_OK`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_CONCURRENCY_LIMIT` when not admitted at once;
///   `HG_STATUS_SHUTDOWN` after `hg_host_bulkhead_close()`; `HG_STATUS_INVALID_ARGUMENT` for a
///   bad weight; `HG_STATUS_HOST_SEGMENT` for a poisoned or removed segment, or a forked child
///   that could not attach; `HG_STATUS_NULL_PARAMETER`. `hg_host_last_error()` has the detail
///   of any failure (a rejection with the host's counts).
///
/// Memory and lifetimes: the caller owns `*out` (release it, then `hg_host_permit_free()`).
/// Thread-safety: any thread; never waits for permits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_try_acquire(
    bh: *const hg_host_bulkhead,
    weight: u64,
    out: *mut *mut hg_host_permit,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_try_acquire";
    guard(F, || {
        let bh = try_host!(F, bh);
        need!(F, out, "out");
        permit_out(bh.try_acquire(weight), out)
    })
}

/// Waits on this thread for `weight` permits of the host, in FIFO order across every process.
///
/// Parameters:
///   timeout_ms: `HG_TIMEOUT_DEFAULT` uses `queue_timeout_ms`; `HG_TIMEOUT_INFINITE` waits
///   without a deadline; 0 does not queue.
///
/// Returns: `HG_STATUS_OK` with `*out`; `HG_STATUS_TIMEOUT`; `HG_STATUS_QUEUE_LIMIT` (this
///   process's `max_queue` waiters already wait); `HG_STATUS_CONCURRENCY_LIMIT` (0 ms, not
///   admitted); `HG_STATUS_SHUTDOWN` (closed, also while waiting); `HG_STATUS_INVALID_ARGUMENT`;
///   `HG_STATUS_HOST_SEGMENT`; `HG_STATUS_NULL_PARAMETER`.
///
/// Thread-safety: any thread; blocks the calling thread (a futex on this process's doorbell)
/// up to `timeout_ms`. A permit a killed process held comes back within about one `probe_ms`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_acquire(
    bh: *const hg_host_bulkhead,
    weight: u64,
    timeout_ms: u64,
    out: *mut *mut hg_host_permit,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_acquire";
    guard(F, || {
        let bh = try_host!(F, bh);
        need!(F, out, "out");
        permit_out(bh.acquire_blocking(weight, wait_timeout(timeout_ms)), out)
    })
}

/// `hg_host_bulkhead_acquire()` of an `hg_request`: its `weight`, `cost` (budget units, with a
/// budget), `timeout_ms` and deadline (`has_deadline` / `deadline_ns`, on `CLOCK_MONOTONIC`);
/// a refusal's detail goes to `detail` as for a local bulkhead. A host bulkhead has no classes
/// and no observe mode: a `class_index` or `observe` other than 0 is refused
/// `HG_STATUS_INVALID_ARGUMENT`.
///
/// Returns: as `hg_host_bulkhead_acquire()`, plus `HG_STATUS_BUDGET_LIMIT`.
/// Thread-safety: as `hg_host_bulkhead_acquire()` (blocks up to its timeout or deadline).
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_acquire_request(
    bh: *const hg_host_bulkhead,
    request: *const hg_request,
    out: *mut *mut hg_host_permit,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_acquire_request";
    guard(F, || {
        let bh = try_host!(F, bh);
        need!(F, request, "request");
        need!(F, out, "out");
        // SAFETY: a readable `hg_request` of its declared size (contract).
        let r = match unsafe { read_request(request) } {
            Ok(r) => r,
            Err(s) => {
                return fail(
                    s,
                    Failure::Text {
                        function: F,
                        text: "`request` is not a valid hg_request (its struct_size, \
                               has_deadline, reserved, class_index or observe, or its detail's \
                               struct_size)"
                            .into(),
                    },
                );
            }
        };
        match bh.admit_blocking(&r.request) {
            Ok(p) => permit_out(Ok(p), out),
            Err(HostError::Acquire(e)) => {
                let status = refused(&e, r.detail);
                fail(status, Failure::Host(HostError::Acquire(e)))
            }
            Err(e) => host_failed(e),
        }
    })
}

/// Closes this process's use of the host bulkhead: its new acquires and its waiters get
/// `HG_STATUS_SHUTDOWN`; held permits stay valid and release normally; other processes are
/// not affected. Process-wide: every handle of this process on the same file is closed, for
/// the life of the process. Idempotent.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_close(bh: *const hg_host_bulkhead) -> hg_status {
    const F: &str = "hg_host_bulkhead_close";
    guard(F, || {
        try_host!(F, bh).close();
        hg_status::HG_STATUS_OK
    })
}

/// Waits until this process holds no permit of this bulkhead and has no waiter, or `timeout_ms`
/// passes (`HG_TIMEOUT_INFINITE` / `HG_TIMEOUT_DEFAULT`: until then; 0: report at once). Call
/// `hg_host_bulkhead_close()` first to stop new work. Other processes are not waited for.
///
/// Returns: `HG_STATUS_OK` with `*out` filled (`drained` says which; `active` / `queued` are
///   this process's permits and waiters at the end); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; blocks the calling thread up to `timeout_ms`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_drain(
    bh: *const hg_host_bulkhead,
    timeout_ms: u64,
    out: *mut hg_drain_result,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_drain";
    guard(F, || {
        let bh = try_host!(F, bh);
        need!(F, out, "out");
        // In steps of at most an hour (the host crate adds the timeout to `Instant::now()`).
        const STEP: Duration = Duration::from_secs(3600);
        let mut left = wait_timeout(timeout_ms).unwrap_or(Duration::MAX);
        let drained = loop {
            let step = left.min(STEP);
            if bh.drain_blocking(step) {
                break true;
            }
            if left != Duration::MAX {
                left -= step;
                if left.is_zero() {
                    break false;
                }
            }
        };
        let s = bh.stats();
        // SAFETY: non-null and writable (contract).
        unsafe {
            out.write(hg_drain_result {
                drained,
                active: s.local_active,
                queued: s.local_queued,
            })
        };
        hg_status::HG_STATUS_OK
    })
}

/// Fills `*out` with the host's figures, read from this process (at most `out->struct_size`
/// bytes; set it to `sizeof(hg_host_stats)` first; on return it says how many bytes were
/// written). Dead processes are reaped first, so the figures count live holders only.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a `struct_size` below 4;
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits for permits (the reap may take the segment's
/// liveness locks for a moment).
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_stats(
    bh: *const hg_host_bulkhead,
    out: *mut hg_host_stats,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_stats";
    guard(F, || {
        let bh = try_host!(F, bh);
        need!(F, out, "out");
        // SAFETY: non-null, its `struct_size` set (contract).
        if unsafe { sized::writable(out) }.is_err() {
            return invalid(F, "`out->struct_size` is below 4".into());
        }
        let v = hg_host_stats::from(&bh.stats());
        // SAFETY: as above.
        unsafe { sized::write(out, &v) }
    })
}

/// Probes every other process's liveness now and reclaims the dead (a supervisor's child-exit
/// handler calls this; the keeper thread does it every `probe_ms` anyway).
///
/// Parameters:
///   reclaimed: NULL, or receives the slots reclaimed or expired by this call.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER` (for `bh`).
/// Thread-safety: any thread; takes the segment's liveness locks for a moment.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_reap(
    bh: *const hg_host_bulkhead,
    reclaimed: *mut u64,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_reap";
    guard(F, || {
        let n = try_host!(F, bh).reap() as u64;
        if !reclaimed.is_null() {
            // SAFETY: non-null and writable (contract).
            unsafe { *reclaimed = n };
        }
        hg_status::HG_STATUS_OK
    })
}

/// The path of the segment file, written into `buf` with a terminating NUL (as
/// `hg_origin_key()`).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a `buf` too small (`*out_len`
///   says how much is needed, plus 1; pass `buf` NULL and `buf_len` 0 to ask first);
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_bulkhead_path(
    bh: *const hg_host_bulkhead,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    const F: &str = "hg_host_bulkhead_path";
    guard(F, || {
        let bh = try_host!(F, bh);
        need!(F, out_len, "out_len");
        if buf.is_null() && buf_len != 0 {
            return null(F, "buf");
        }
        let path = bh.path().as_os_str().as_bytes().to_vec();
        // SAFETY: `out_len` non-null and writable; `buf` NULL with 0, or `buf_len` bytes.
        let s = unsafe { write_str(&path, buf, buf_len, &mut *out_len) };
        if s != hg_status::HG_STATUS_OK {
            return invalid(
                F,
                format!("`buf_len` {buf_len} is below {}", path.len() + 1),
            );
        }
        s
    })
}

// ----- permits ---------------------------------------------------------------------------

/// # Safety
/// `p` is non-null, came from `permit_out` and is not freed; no other reference to it is used
/// during the call.
unsafe fn permit_mut<'a>(p: *mut hg_host_permit) -> &'a mut HostPermit {
    // SAFETY: per the contract, a live `Box<HostPermit>` pointer.
    unsafe { &mut *p.cast::<HostPermit>() }
}

/// Returns the permits to the host (the next waiter, in any process, gets them).
///
/// Returns: `HG_STATUS_OK` the first time; `HG_STATUS_STALE_LEASE` when this process's lease
///   was expired first (it stopped or hung past `lease_ttl_ms`): its permits were already
///   returned, nothing is released twice (counted in `stale_releases_total`);
///   `HG_STATUS_FOREIGN_LEASE` for a permit acquired by another process — a parent, before
///   `fork()` — nothing is released (counted in `foreign_releases_total`);
///   `HG_STATUS_ALREADY_RELEASED` afterwards (any of the three settles the permit);
///   `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: as `hg_permit_release()`: the handle stays valid whatever the status;
/// free it with `hg_host_permit_free()`.
/// Thread-safety: a permit must not be used from two threads at once. Never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_permit_release(permit: *mut hg_host_permit) -> hg_status {
    const F: &str = "hg_host_permit_release";
    guard(F, || {
        need!(F, permit, "permit");
        // SAFETY: non-null, a live permit not used elsewhere during the call (contract).
        let p = unsafe { permit_mut(permit) };
        match p.release_in_place() {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(e) => {
                let status = match e {
                    LeaseError::Stale => hg_status::HG_STATUS_STALE_LEASE,
                    LeaseError::Foreign => hg_status::HG_STATUS_FOREIGN_LEASE,
                    LeaseError::AlreadyReleased => hg_status::HG_STATUS_ALREADY_RELEASED,
                };
                fail(status, Failure::Lease(e))
            }
        }
    })
}

/// The permits still held (0 once released, or for NULL).
///
/// Thread-safety: as `hg_host_permit_release()`; only reads.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_permit_weight(permit: *const hg_host_permit) -> u64 {
    boundary(|| {
        // SAFETY: NULL or a live permit (contract); only read.
        let p = unsafe { permit.cast::<HostPermit>().as_ref() };
        p.filter(|p| !p.is_released()).map_or(0, HostPermit::weight)
    })
}

/// Frees a permit. One still held is released first (its status is not reported: call
/// `hg_host_permit_release()` first to see it); in a forked child, a parent's permit is only
/// freed (its permits are the parent's). NULL is accepted and ignored.
///
/// Memory and lifetimes: after this call `permit` is dangling. Must not be called twice with
/// the same value. Thread-safety: as `hg_host_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_host_permit_free(permit: *mut hg_host_permit) {
    boundary(|| {
        if !permit.is_null() {
            // SAFETY: a live `Box<HostPermit>` pointer the caller gives up (contract); its drop
            // releases it if still held.
            drop(unsafe { Box::from_raw(permit.cast::<HostPermit>()) });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_mismatch_numbers_are_the_option_tables_order() {
        assert_eq!(on_mismatch_words(), ["error", "adopt"]);
        assert_eq!(hg_host_on_mismatch::HG_HOST_ON_MISMATCH_ADOPT as usize, 1);
    }

    fn message() -> String {
        let mut len = 0usize;
        // A size query: `buf` NULL, `buf_len` 0 (too small for anything, even "").
        assert_eq!(
            hg_host_last_error(std::ptr::null_mut(), 0, &mut len),
            hg_status::HG_STATUS_INVALID_ARGUMENT
        );
        let mut buf = vec![0u8; len + 1];
        assert_eq!(
            hg_host_last_error(buf.as_mut_ptr().cast(), buf.len(), &mut len),
            hg_status::HG_STATUS_OK
        );
        buf.truncate(len);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn options_are_checked_by_the_host_table() {
        let mut o = std::mem::MaybeUninit::<hg_host_options>::uninit();
        assert_eq!(
            hg_host_options_default(o.as_mut_ptr()),
            hg_status::HG_STATUS_OK
        );
        // SAFETY: written just above.
        let d = unsafe { o.assume_init() };
        assert_eq!(hg_host_options_check(&d), hg_status::HG_STATUS_OK);
        for (edit, want) in [
            (
                hg_host_options {
                    on_mismatch: 7,
                    ..d
                },
                "on_mismatch",
            ),
            (hg_host_options { mode: 0o666, ..d }, "world-writable"),
            (
                hg_host_options {
                    max_concurrent: 0,
                    ..d
                },
                "1 ..= 1048575",
            ),
            (hg_host_options { probe_ms: 1, ..d }, "probe"),
            (
                hg_host_options {
                    reserved: [0, 0, 1, 0, 0, 0, 0, 0, 0],
                    ..d
                },
                "reserved[2]",
            ),
            (
                hg_host_options {
                    struct_size: 8,
                    ..d
                },
                "struct_size",
            ),
        ] {
            assert_eq!(
                hg_host_options_check(&edit),
                hg_status::HG_STATUS_INVALID_ARGUMENT
            );
            let m = message();
            assert!(m.contains(want), "{m}");
        }
        assert_eq!(
            hg_host_options_check(std::ptr::null()),
            hg_status::HG_STATUS_NULL_PARAMETER
        );
        assert_eq!(message(), "hg_host_options_check: `opts` is NULL");
    }
}
