//! `hg_fleet_*`: the fleet bulkhead (crate hullguard-fleet, docs/design.md §16) through the C
//! ABI — one limit shared by every process that opens the same pool on one Redis, each process
//! admitting locally on a block it leases under a TTL.
//!
//! **The transport is the caller's.** A C program already has its Redis client (hiredis,
//! hiredis-cluster, redis-plus-plus, its own on its own event loop): its connection, TLS, auth,
//! Sentinel, Cluster routing and timeouts stay its configuration, and this library links no
//! Redis client (no second client to configure, no version of hiredis pinned by
//! `libhullguard`, nothing new in `pkg-config --static --libs`). The caller hands
//! `hg_fleet_bulkhead_open()` one callback (`hg_fleet_transport.call`) that runs a command given
//! as an argv — the shape of `redisCommandArgv` — and fills an `hg_fleet_reply` through four
//! setters (an integer, a string, an array of those, an error), so the reply needs no struct
//! layout or ownership rule of its own; everything else — the library load, the `FCALL`s and
//! their arguments, the replies' decoding, the lease — is hullguard's (the crate's
//! `FleetCore`). The calls of one fleet bulkhead are serialised, so one connection that is not
//! thread-safe (a `redisContext`) serves it.
//!
//! **Admissions are a local bulkhead's.** `FleetCore` builds a core bulkhead in leased mode; it
//! is handed out as an ordinary `hg_bulkhead*` (`hg_fleet_bulkhead_bulkhead()`, the handle a
//! registry key gets: freeing it does not close), so every `hg_bulkhead_*` admission function
//! works on it unchanged and never touches the network. The lease's block, its deadline and the
//! demand bell live in the core.
//!
//! **The budget, classes and events are a local bulkhead's too.** With the `budget` option
//! the fleet also leases a budget (units in flight: tokens, bytes) exactly like the permits, in
//! a second lease table of the pool: the local bulkhead's budget is this process's block of the
//! fleet budget, and a request's `cost` (`hg_request.cost`) is admitted on it. Admission
//! classes (`hg_fleet_options_set_classes()`, an `hg_class_table`) partition this process's
//! block, not the fleet's limit; events (`hg_fleet_options_set_on_event()`) are the local
//! bulkhead's, as `hg_config.on_event` delivers them. The per-dimension calls
//! (`hg_fleet_bulkhead_stats_of()`, `_apply_limits_of()`, `_pool_stats_of()`,
//! `_lease_error_of()`) take an `hg_fleet_dimension`.
//!
//! **What is here** is the driver loop of the crate's binding contract (step → send through the
//! callback → complete / fail; wait; closed → release), on one native thread per fleet bulkhead
//! (`hullguard-fleet:<pool>`); the options, read by name through the crate's table
//! (`FleetConfig::set`: names, ranges and the refusal of a local bulkhead's options are the
//! crate's); C layout; and the per-thread message of the last failure
//! (`hg_fleet_last_error()`).

use std::{
    cell::RefCell,
    ffi::{CStr, CString, c_char, c_int, c_void},
    sync::{Arc, LazyLock, Mutex, MutexGuard},
    thread::{JoinHandle, ThreadId},
    time::Duration,
};

use hullguard_core::LimitsSnapshot;
use hullguard_fleet::{
    AppliedLimits, Dimension, FleetConfig, FleetCore, FleetError, LeaseState, Local, PoolName,
    RawReply, Step,
    fleet_core::Command,
    options::{FleetKind, FleetValue},
    pool::Keys,
    protocol::{FN_VERSION, Field, SetLimitReply},
    script::{LIB_VERSION, LIBRARY},
    stats::LeaseStats,
    transport::{TransportError, TransportErrorKind},
};

use crate::{
    admission::{OwnedClassTable, hg_class_table},
    boundary::boundary,
    event::{CObserver, hg_event_fn},
    handle::{BulkheadHandle, bulkhead_into_raw, hg_bulkhead},
    sized::{self, Output, Plain, write_str},
    status::hg_status,
};

// ----- handles and structs ---------------------------------------------------------------

/// A fleet bulkhead's options, set by name (`hg_fleet_options_new()`,
/// `hg_fleet_options_set_int()`, `hg_fleet_options_set_str()`), plus what stays local: the
/// admission classes (`hg_fleet_options_set_classes()`) and the event callback
/// (`hg_fleet_options_set_on_event()`); freed with `hg_fleet_options_free()`.
/// `hg_fleet_bulkhead_open()` copies them. Not thread-safe: set them from one thread at a
/// time.
pub struct hg_fleet_options {
    _private: [u8; 0],
}

/// A fleet bulkhead: its local bulkhead (`hg_fleet_bulkhead_bulkhead()`) and the thread that
/// keeps its lease. Owned by the caller: `hg_fleet_bulkhead_close()` releases the lease,
/// `hg_fleet_bulkhead_free()` closes if need be and frees. Thread-safe (but a free must not
/// race any other call on the same handle).
pub struct hg_fleet_bulkhead {
    _private: [u8; 0],
}

/// The reply of one transport call, filled by the callback with `hg_fleet_reply_integer()`,
/// `hg_fleet_reply_string()`, `hg_fleet_reply_array()` and `hg_fleet_reply_error()`. Valid only
/// during the callback that received it; the library owns it.
pub struct hg_fleet_reply {
    _private: [u8; 0],
}

/// Runs one Redis command on the caller's client (see `hg_fleet_transport`).
///
/// Parameters:
///   ctx: `hg_fleet_transport.ctx`.
///   argv, argv_len, argc: the command, `argc` arguments, each `argv_len[i]` bytes (also
///   NUL-terminated: `argv[i][argv_len[i]] == 0`) — the shape of hiredis'
///   `redisCommandArgv(c, argc, argv, argv_len)`. Valid during the call only.
///   reply: fill it (see `hg_fleet_reply`).
///
/// Returns: 0 when Redis answered: the reply is filled with its answer (an integer, a string,
///   an array of those, or Redis' error reply with `hg_fleet_reply_error()`). Any other value
///   when Redis could not be reached (connection refused or lost, a timeout): the call failed;
///   `hg_fleet_reply_error()` may say why (the text goes to the stats' lease error and to
///   `hg_fleet_last_error()`).
pub type hg_fleet_call_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        argv: *const *const c_char,
        argv_len: *const usize,
        argc: usize,
        reply: *mut hg_fleet_reply,
    ) -> c_int,
>;

/// Gives `ctx` back to its owner when the fleet bulkhead no longer needs it.
pub type hg_fleet_release_fn = Option<unsafe extern "C" fn(ctx: *mut c_void)>;

/// How a fleet bulkhead reaches Redis: a callback over the caller's own client.
///
/// The callback runs on the fleet bulkhead's own thread (`hullguard-fleet:<pool>`, which keeps
/// the leases), and also on the threads that call `hg_fleet_bulkhead_open()` (the library
/// load), `hg_fleet_bulkhead_apply_limits()` (and `_of()`), `hg_fleet_bulkhead_pool_stats()`
/// (and `_of()`), `hg_fleet_bulkhead_close()` and `hg_fleet_bulkhead_free()` (the releases) —
/// never two at once: the library serialises the calls of one fleet bulkhead, so one
/// connection that is not thread-safe (a `redisContext`) serves it. With the `wait_replicas`
/// option, send every call of a fleet bulkhead on one connection: `WAIT` counts the writes of
/// its own connection. Give the client a timeout (hiredis: `redisSetTimeout`): a call that
/// hangs holds up renewals (the lease then runs out and admissions fail closed, which is safe)
/// and a close. The callback must not unwind, and must not call
/// `hg_fleet_bulkhead_apply_limits()`, `_pool_stats()` (nor their `_of()` forms), `_close()` or
/// `_free()` of its own fleet bulkhead (refused `HG_STATUS_INVALID_ARGUMENT`: they would wait
/// for it).
///
/// Size-versioned: `struct_size = sizeof(hg_fleet_transport)`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_fleet_transport {
    /// `sizeof(hg_fleet_transport)` as the caller compiled it.
    pub struct_size: u32,
    /// Passed to `call` and `release`.
    pub ctx: *mut c_void,
    /// Required.
    pub call: hg_fleet_call_fn,
    /// NULL, or called once with `ctx` when the fleet bulkhead is done with it (at
    /// `hg_fleet_bulkhead_free()`). Not called when `hg_fleet_bulkhead_open()` fails: `ctx` is
    /// then still the caller's.
    pub release: hg_fleet_release_fn,
}

// SAFETY: repr(C), `struct_size` first, a raw pointer and `Option<extern "C" fn>`s.
unsafe impl Plain for hg_fleet_transport {}

/// The whole `hg_fleet_transport` is required (a size that ends inside a pointer is a made-up
/// pointer).
const TRANSPORT_MIN: usize = size_of::<hg_fleet_transport>();

/// A lease's state (`hg_fleet_stats.state`), as every layer names it (`"idle"`, `"leased"`,
/// …). Read it as a `uint32_t`: new states are appended.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_fleet_lease_state {
    /// No lease asked for yet, or closed (or the last grant came back too late and was given
    /// back).
    HG_FLEET_LEASE_IDLE = 0,
    /// A valid lease.
    HG_FLEET_LEASE_LEASED = 1,
    /// Redis answered that the lease is gone (expired and reaped, or fenced): a new one is on
    /// its way.
    HG_FLEET_LEASE_LOST = 2,
    /// The lease's deadline passed with no renewal (Redis unreachable or slow): nothing is
    /// admitted (in flight runs on), unless `local_share` is set.
    HG_FLEET_LEASE_EXPIRED = 3,
    /// The pool already has `max_holders` holders.
    HG_FLEET_LEASE_FULL = 4,
}

impl From<LeaseState> for hg_fleet_lease_state {
    fn from(s: LeaseState) -> Self {
        match s {
            LeaseState::Idle => hg_fleet_lease_state::HG_FLEET_LEASE_IDLE,
            LeaseState::Leased => hg_fleet_lease_state::HG_FLEET_LEASE_LEASED,
            LeaseState::Lost => hg_fleet_lease_state::HG_FLEET_LEASE_LOST,
            LeaseState::Expired => hg_fleet_lease_state::HG_FLEET_LEASE_EXPIRED,
            LeaseState::Full => hg_fleet_lease_state::HG_FLEET_LEASE_FULL,
        }
    }
}

/// What a fleet bulkhead leases (`hg_fleet_bulkhead_stats_of()`, `_apply_limits_of()`,
/// `_pool_stats_of()`, `_lease_error_of()`): each dimension is leased from its own lease table
/// of the pool (same hash tag), under its own revision. Pass it as a `uint32_t`: a number this
/// library does not know is refused `HG_STATUS_INVALID_ARGUMENT`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_fleet_dimension {
    /// The permits (calls in flight): the fleet limit, `max_concurrent` for a new pool. Every
    /// fleet bulkhead has it.
    HG_FLEET_DIMENSION_PERMITS = 0,
    /// The fleet budget's units (tokens, bytes in flight: a request's `cost`), `budget` for a
    /// new pool. Only a fleet bulkhead opened with the `budget` option has it.
    HG_FLEET_DIMENSION_BUDGET = 1,
}

/// One lease as this process sees it (`hg_fleet_bulkhead_stats()`: the permits';
/// `hg_fleet_bulkhead_stats_of()`: either dimension's — the budget's has the same fields in
/// units: `held`, `share`, `local_limit` are units of this process's budget block,
/// `fleet_limit` is the fleet budget, `unleased_in_flight` units): the `lease` (and
/// `budget_lease`) section of the other bindings' stats. The local figures (active, queued,
/// the limit and budget the blocks set, rejections by reason) are the local bulkhead's:
/// `hg_bulkhead_stats()` on `hg_fleet_bulkhead_bulkhead()`. The strings are read apart:
/// `hg_fleet_bulkhead_holder()`, `hg_fleet_bulkhead_lease_error_of()`. Output only: set
/// `struct_size = sizeof(hg_fleet_stats)` first; the library writes at most that many bytes
/// and stores back how many it wrote.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_fleet_stats {
    /// `sizeof(hg_fleet_stats)` as the caller compiled it; on return, the bytes written.
    pub struct_size: u32,
    /// An `hg_fleet_lease_state`.
    pub state: u32,
    /// The lease's generation (its fencing token; 0 without one).
    pub generation: u64,
    /// The block Redis counts for this process.
    pub held: u64,
    /// This process's share: the block it converges to (its fair share under contention).
    pub share: u64,
    /// The block the local bulkhead admits on now (0 without a valid lease, or `local_share`
    /// while Redis is unreachable in that mode).
    pub local_limit: u64,
    /// The fleet limit (0 before the first reply).
    pub fleet_limit: u64,
    /// Permits held across the fleet, at the last reply.
    pub fleet_used: u64,
    /// Processes holding leases in the pool, at the last reply.
    pub holders: u64,
    /// The pool state's epoch (Redis µs at its creation): it changes when Redis loses its state.
    pub epoch: u64,
    /// The fleet limit's revision.
    pub rev: u64,
    /// Time left on the lease in ms, rounded down; `HG_TIMEOUT_INFINITE` without a lease.
    pub lease_left_ms: u64,
    /// Permits in flight here that no valid lease covers (after a loss or an expiry they run
    /// to completion; the fleet may be over its limit by at most these).
    pub unleased_in_flight: u64,
    /// Syncs answered.
    pub syncs_total: u64,
    /// Calls that failed (unreachable, error replies, unexpected replies).
    pub errors_total: u64,
    /// Answers that the lease was gone.
    pub losses_total: u64,
    /// Deadlines passed with no renewal.
    pub expiries_total: u64,
    /// Grants that came back too late to use and were given back.
    pub late_grants_total: u64,
    /// Releases Redis fenced (the lease had already expired or been replaced).
    pub releases_fenced_total: u64,
    /// Changes of the pool's epoch seen (Redis lost its state: a restart, a failover,
    /// `FLUSHALL`).
    pub epoch_changes_total: u64,
    /// Growths `WAIT` did not see on `wait_replicas` replicas in time (left unused until the
    /// next sync).
    pub unreplicated_total: u64,
    /// Whether the pool is learning (after a state loss: blocks do not grow for a TTL).
    pub learning: bool,
    /// Whether Redis failed to answer since the last successful sync.
    pub unreachable: bool,
    /// Whether there is a lease error (`hg_fleet_bulkhead_lease_error_of()`): the last error,
    /// until a sync succeeds.
    pub has_lease_error: bool,
}

// SAFETY: repr(C), `struct_size` first.
unsafe impl Output for hg_fleet_stats {}

/// Saturating ms of a duration.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX - 2)
}

impl From<&LeaseStats> for hg_fleet_stats {
    fn from(l: &LeaseStats) -> Self {
        let c = &l.counters;
        hg_fleet_stats {
            struct_size: size_of::<hg_fleet_stats>() as u32,
            state: hg_fleet_lease_state::from(l.state) as u32,
            generation: l.generation,
            held: l.held,
            share: l.share,
            local_limit: l.local_limit,
            fleet_limit: l.fleet_limit,
            fleet_used: l.fleet_used,
            holders: l.holders,
            epoch: l.epoch,
            rev: l.rev,
            lease_left_ms: l.lease_left.map_or(crate::config::HG_TIMEOUT_INFINITE, ms),
            unleased_in_flight: l.unleased_in_flight,
            syncs_total: c.syncs_total,
            errors_total: c.errors_total,
            losses_total: c.losses_total,
            expiries_total: c.expiries_total,
            late_grants_total: c.late_grants_total,
            releases_fenced_total: c.releases_fenced_total,
            epoch_changes_total: c.epoch_changes_total,
            unreplicated_total: c.unreplicated_total,
            learning: l.learning,
            unreachable: l.unreachable,
            has_lease_error: l.last_error.is_some(),
        }
    }
}

/// One lease table of the pool as Redis holds it (`hg_fleet_bulkhead_pool_stats()`: the
/// permits'; `hg_fleet_bulkhead_pool_stats_of()`: either dimension's — the budget's figures are
/// units, `limit` the fleet budget; one read-only call). Output only: set
/// `struct_size = sizeof(hg_fleet_pool_stats)` first.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_fleet_pool_stats {
    /// `sizeof(hg_fleet_pool_stats)` as the caller compiled it; on return, the bytes written.
    pub struct_size: u32,
    /// Whether the pool exists (`limit` is 0 otherwise).
    pub exists: bool,
    /// Whether this process holds a lease in it (`self_*` are 0 otherwise).
    pub self_present: bool,
    /// Redis' clock (ms) when read.
    pub now_ms: u64,
    /// The fleet limit.
    pub limit: u64,
    /// Permits held across the pool.
    pub used: u64,
    /// The pool state's epoch (Redis µs at its creation).
    pub epoch: u64,
    /// The last generation handed out.
    pub fence: u64,
    /// The limit's revision.
    pub rev: u64,
    /// Redis ms until which the pool learns (0: not learning since creation).
    pub learn_until_ms: u64,
    /// The sum of the holders' wants.
    pub want_sum: u64,
    /// Processes holding leases.
    pub holders: u64,
    /// This process's block, as Redis counts it.
    pub self_held: u64,
    /// This process's lease generation, as Redis has it.
    pub self_generation: u64,
    /// Redis ms at which this process's lease expires.
    pub self_expires_ms: u64,
}

// SAFETY: repr(C), `struct_size` first.
unsafe impl Output for hg_fleet_pool_stats {}

// ----- the message of the last failure ----------------------------------------------------

thread_local! {
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records `message` (prefixed with `function`) as this thread's last failure; returns
/// `status`.
fn fail(status: hg_status, function: &str, message: impl std::fmt::Display) -> hg_status {
    let text = format!("{function}: {message}");
    // `try_with` / `try_borrow_mut`: never a panic (a thread being torn down keeps no message).
    let _ = LAST.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = Some(text);
        }
    });
    status
}

/// The status of a fleet error, recorded as the last failure.
fn failed(function: &str, e: &FleetError) -> hg_status {
    let status = match e {
        FleetError::Option { .. } | FleetError::Name(_) | FleetError::Config(_) => {
            hg_status::HG_STATUS_INVALID_ARGUMENT
        }
        FleetError::Transport(_) => hg_status::HG_STATUS_FLEET_TRANSPORT,
        FleetError::Acquire(a) => a.into(),
        FleetError::Closed => hg_status::HG_STATUS_SHUTDOWN,
        _ => hg_status::HG_STATUS_INVALID_ARGUMENT,
    };
    fail(status, function, e)
}

/// A NULL `parameter` of `function`.
fn null(function: &str, parameter: &str) -> hg_status {
    fail(
        hg_status::HG_STATUS_NULL_PARAMETER,
        function,
        format_args!("`{parameter}` is NULL"),
    )
}

/// A bad argument of `function`.
fn invalid(function: &str, text: impl std::fmt::Display) -> hg_status {
    fail(hg_status::HG_STATUS_INVALID_ARGUMENT, function, text)
}

/// `need!(F, ptr, "ptr")`: return `HG_STATUS_NULL_PARAMETER`, naming the parameter, if NULL.
macro_rules! need {
    ($f:expr, $p:expr, $name:literal) => {
        if $p.is_null() {
            return null($f, $name);
        }
    };
}

/// The panic boundary of a fleet export: a caught panic is also the last failure.
fn guard(function: &'static str, body: impl FnOnce() -> hg_status) -> hg_status {
    let status = boundary(body);
    if status == hg_status::HG_STATUS_PANIC {
        fail(status, function, "internal error (a panic was caught)")
    } else {
        status
    }
}

/// A NUL-terminated UTF-8 argument.
///
/// # Safety
/// `p` is non-null and NUL-terminated.
unsafe fn text<'a>(function: &str, what: &str, p: *const c_char) -> Result<&'a str, hg_status> {
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| invalid(function, format_args!("`{what}` is not UTF-8")))
}

/// The message of the last `hg_fleet_*` call of this thread that did not return `HG_STATUS_OK`
/// (a successful call leaves it as it is: read it right after the failure), written into `buf`
/// with a terminating NUL: the function, then which argument was NULL or bad, the option and
/// its range (the fleet crate's option table: `"hg_fleet_options_set_int: adaptive: not
/// supported by a fleet bulkhead: …"`), or what Redis or the transport answered. An empty
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
pub extern "C" fn hg_fleet_last_error(
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    boundary(|| {
        if out_len.is_null() || (buf.is_null() && buf_len != 0) {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        let message = LAST
            .try_with(|l| l.try_borrow().ok().and_then(|l| l.clone()))
            .ok()
            .flatten()
            .unwrap_or_default();
        // SAFETY: `out_len` is non-null and writable, `buf` NULL (with 0) or `buf_len` bytes
        // (contract).
        unsafe { write_str(message.as_bytes(), buf, buf_len, &mut *out_len) }
    })
}

/// The hullguard Functions library (Lua, `#!lua name=hullguard`), NUL-terminated; `*len`
/// (if not NULL) receives its length. `hg_fleet_bulkhead_open()` loads it itself (`FUNCTION
/// LOAD REPLACE` when `FCALL_RO hg_version` is missing or differs); this is for a deployment
/// whose ACL lets clients run `FCALL` but not `FUNCTION LOAD`: an operator loads it once, and
/// the clients then find it.
///
/// Memory and lifetimes: static; never free it. Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_library(len: *mut usize) -> *const c_char {
    static SOURCE: LazyLock<CString> = LazyLock::new(|| CString::new(LIBRARY).unwrap_or_default());
    boundary(|| {
        if !len.is_null() {
            // SAFETY: non-null and writable (contract).
            unsafe { *len = SOURCE.as_bytes().len() };
        }
        SOURCE.as_ptr()
    })
}

/// The library's version (`FCALL_RO hg_version` answers it).
pub const HG_FLEET_LIBRARY_VERSION: i64 = 3;
const _: () = assert!(HG_FLEET_LIBRARY_VERSION == LIB_VERSION);

// ----- options -----------------------------------------------------------------------------

/// What an `hg_fleet_options*` points to: the options by name, and what stays local.
struct Options {
    config: FleetConfig,
    /// `hg_fleet_options_set_classes()`'s table, converted (and copied) when set.
    classes: Option<OwnedClassTable>,
    /// `hg_fleet_options_set_on_event()`'s callback (`event` NULL: none).
    events: CObserver,
}

/// # Safety
/// `p` is non-null and a live `hg_fleet_options*` not used elsewhere during the call.
unsafe fn options_mut<'a>(p: *mut hg_fleet_options) -> &'a mut Options {
    // SAFETY: per the contract, a live `Box<Options>` pointer.
    unsafe { &mut *p.cast::<Options>() }
}

/// What the options of a local bulkhead that C sets with a function of its own are called by
/// name, and the function: a helpful refusal instead of the table's "unknown option".
const SET_APART: &[(&str, &str)] = &[
    ("classes", "hg_fleet_options_set_classes()"),
    ("on_event", "hg_fleet_options_set_on_event()"),
];

/// `name` if C sets it with a function of its own: the refusal that names the function.
fn set_apart(function: &str, name: &str) -> Option<hg_status> {
    SET_APART.iter().find(|(n, _)| *n == name).map(|(n, f)| {
        invalid(
            function,
            format_args!("{n}: not an option set by name: set it with {f}"),
        )
    })
}

/// New options for the pool `pool`, with the defaults (a new pool's fleet limit 10, 100
/// waiters, a queue timeout of 30000 ms, a lease TTL of 10000 ms renewed every third of it,
/// fail closed while Redis is unreachable).
///
/// Parameters:
///   pool: NUL-terminated, 1 to 64 characters of `A-Z a-z 0-9 _ . : -`: every process that
///   opens the same pool on the same Redis shares its limit.
///   out: receives the options (set only on `HG_STATUS_OK`).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a bad pool name
///   (`hg_fleet_last_error()` says the allowed form); `HG_STATUS_NULL_PARAMETER`.
/// Memory and lifetimes: free them with `hg_fleet_options_free()`.
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_options_new(
    pool: *const c_char,
    out: *mut *mut hg_fleet_options,
) -> hg_status {
    const F: &str = "hg_fleet_options_new";
    guard(F, || {
        need!(F, pool, "pool");
        need!(F, out, "out");
        // SAFETY: a NUL-terminated string (contract).
        let pool = match unsafe { text(F, "pool", pool) } {
            Ok(p) => p,
            Err(s) => return s,
        };
        match PoolName::new(pool) {
            Ok(pool) => {
                let options = Box::new(Options {
                    config: FleetConfig::new(pool),
                    classes: None,
                    events: CObserver {
                        state_change: None,
                        state_change_data: std::ptr::null_mut(),
                        event: None,
                        event_data: std::ptr::null_mut(),
                    },
                });
                // SAFETY: non-null and writable (contract).
                unsafe { *out = Box::into_raw(options).cast() };
                hg_status::HG_STATUS_OK
            }
            Err(e) => failed(F, &FleetError::Name(e)),
        }
    })
}

/// Sets the option `name` to `value`: a count (`max_concurrent`, `budget`, `max_queue`,
/// `local_share`, `clock_drift_ppm`, `max_holders`, `wait_replicas`, …) or a duration in ms
/// (`queue_timeout`, `lease_ttl`, `beat`, `lease_margin`, `min_sync_interval`, `wait_timeout`,
/// …: the table says which). The names, ranges and rules are the fleet crate's option table
/// (docs/design.md §16.5), as in every binding; the relations between options (`beat` at most
/// half of `lease_ttl`, …) are checked by `hg_fleet_bulkhead_open()`.
///
/// `budget` (units in flight: tokens, bytes; `1 .. 2^32`; default none) gives the fleet
/// bulkhead a fleet budget, leased like the permits: the budget a new pool starts with (then it
/// lives in Redis: `hg_fleet_bulkhead_apply_limits_of()` with `HG_FLEET_DIMENSION_BUDGET`
/// changes it). A request's `cost` within this process's block is admitted at once; above the
/// block but within the fleet budget it waits (queues) for the block to grow; above the fleet
/// budget it is refused `HG_STATUS_BUDGET_LIMIT`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for an unknown name (the message lists
///   the known ones), a local bulkhead's option that cannot be fleet-wide (`rates`,
///   `adaptive`, `breaker`, `observe`, …: named as such, with why), `classes` or `on_event`
///   (the message names the function that sets it), a string option, or a value out of range
///   (the range shown; `budget` 0 included) — `hg_fleet_last_error()` has the message, nothing
///   changed; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: one thread at a time per options object.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_options_set_int(
    opts: *mut hg_fleet_options,
    name: *const c_char,
    value: u64,
) -> hg_status {
    const F: &str = "hg_fleet_options_set_int";
    guard(F, || {
        need!(F, opts, "opts");
        need!(F, name, "name");
        // SAFETY: a NUL-terminated string (contract).
        let name = match unsafe { text(F, "name", name) } {
            Ok(n) => n,
            Err(s) => return s,
        };
        if let Some(s) = set_apart(F, name) {
            return s;
        }
        // The table says whether the number is a count or a duration (in ms, in C); an unknown
        // name goes to the table as well, which refuses it in its own words.
        let duration =
            FleetConfig::find(name).is_some_and(|o| matches!(o.kind, FleetKind::Duration { .. }));
        let value = if duration {
            FleetValue::Duration(Duration::from_millis(value))
        } else {
            FleetValue::Int(value)
        };
        // SAFETY: a live options object (contract).
        let config = &mut unsafe { options_mut(opts) }.config;
        match config.set(name, value) {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(e) => failed(F, &e),
        }
    })
}

/// Sets the string option `name` (`pool`, `holder`: this process's holder id, 1 to 128
/// printable characters without spaces; default `<hostname>:<pid>:<random hex>`).
///
/// Returns: as `hg_fleet_options_set_int()` (a count or duration option is refused as a
///   string: the message says what it takes).
/// Thread-safety: one thread at a time per options object.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_options_set_str(
    opts: *mut hg_fleet_options,
    name: *const c_char,
    value: *const c_char,
) -> hg_status {
    const F: &str = "hg_fleet_options_set_str";
    guard(F, || {
        need!(F, opts, "opts");
        need!(F, name, "name");
        need!(F, value, "value");
        // SAFETY: NUL-terminated strings (contract).
        let (name, value) = match unsafe { (text(F, "name", name), text(F, "value", value)) } {
            (Ok(n), Ok(v)) => (n, v),
            (Err(s), _) | (_, Err(s)) => return s,
        };
        if let Some(s) = set_apart(F, name) {
            return s;
        }
        // SAFETY: a live options object (contract).
        let config = &mut unsafe { options_mut(opts) }.config;
        match config.set(name, FleetValue::Str(value)) {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(e) => failed(F, &e),
        }
    })
}

/// Sets the admission classes (docs/design.md §4.8, §16.10): the classes of `table` (a request
/// names one by `hg_request.class_index`), the priority reserve, lending and shedding, as for
/// `hg_bulkhead_new_with_classes()`. They partition **this process's block**, not the fleet's
/// limit: floors, ceilings, the reserve and priorities apply inside the local block (and the
/// local budget block, for the budget floors and ceilings); while the block is below the
/// floors, they are taken first-come up to the block. The table is converted and copied now
/// (`table` and its `classes` array may be freed on return); replaces a table set before. The
/// core checks the table against the options at `hg_fleet_bulkhead_open()` (a floor above its
/// class's ceiling, budget floors or ceilings without a `budget`, …: in its words); a block
/// below the floors is not an error (the block is the lease's).
///
/// Parameters:
///   opts: from `hg_fleet_options_new()`.
///   table: required (its `struct_size = sizeof(hg_class_table)`, each class's from
///   `hg_class_default()`). Its `requests` and `units` rates must be off (`amount` 0): a rate
///   is not fleet-wide (each process would refill its own). Floors need `lending` set: the
///   block can stay below them under contention, and without lending the classes without a
///   floor would get nothing while the floors sit idle.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a bad table — its
///   `struct_size`, 0 or more than 64 classes, a bad class (a priority above 255, an unknown
///   `observe`, a set `reserved`, a bad `struct_size` or array stride), a reserve priority above
///   255, a rate, floors without `lending` — (`hg_fleet_last_error()` names the field;
///   nothing changed);
///   `HG_STATUS_NULL_PARAMETER` (`opts`, `table`, or `table->classes` with a `classes_len`
///   above 0).
/// Thread-safety: one thread at a time per options object.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_options_set_classes(
    opts: *mut hg_fleet_options,
    table: *const hg_class_table,
) -> hg_status {
    const F: &str = "hg_fleet_options_set_classes";
    guard(F, || {
        need!(F, opts, "opts");
        need!(F, table, "table");
        // SAFETY: a readable `hg_class_table` of its declared size (contract).
        let t = match unsafe { sized::read(table, size_of::<hg_class_table>()) } {
            Ok(t) => t,
            Err(s) => {
                return fail(
                    s,
                    F,
                    format_args!(
                        "`table->struct_size` must be sizeof(hg_class_table) = {} (or a newer \
                         one's, with only zeroes past this library's fields)",
                        size_of::<hg_class_table>()
                    ),
                );
            }
        };
        if t.classes_len == 0 || t.classes_len > hullguard_core::config::MAX_CLASSES {
            return invalid(
                F,
                format_args!(
                    "`table->classes_len` {} is not in 1 ..= {}",
                    t.classes_len,
                    hullguard_core::config::MAX_CLASSES
                ),
            );
        }
        if t.classes.is_null() {
            return null(F, "table->classes");
        }
        // SAFETY: `t.classes` has `t.classes_len` elements (the table's contract).
        let classes = match unsafe { OwnedClassTable::of(&t) } {
            Ok(c) => c,
            Err(s) => {
                return fail(
                    s,
                    F,
                    "`table->classes`: a bad class (a priority above 255, an unknown observe, \
                     a set reserved field, or a struct_size that is not sizeof(hg_class) or \
                     differs between elements), or `table->reserve_min_priority` above 255",
                );
            }
        };
        // What cannot be local to a process's block (rates; floors without lending): the
        // fleet crate's one rule, checked here so the error names the table at once.
        if let Err(hullguard_fleet::FleetError::Option { option, message }) =
            hullguard_fleet::check_local_classes(&classes.table())
        {
            return invalid(F, format_args!("`table`: {option}: {message}"));
        }
        // SAFETY: a live options object (contract).
        unsafe { options_mut(opts) }.classes = Some(classes);
        hg_status::HG_STATUS_OK
    })
}

/// Sets the event callback: the local bulkhead's events — every admission (admit, reject,
/// release, usage, shed) with its admission id, class, weight, cost and timings, and each
/// reconfiguration (the lease moving the block: `HG_EVENT_RECONFIGURE` with the new limit and
/// budget) — as `hg_config.on_event` delivers them (see `hg_event_fn`: where it runs, what is
/// safe inside it; `key` is NULL). The lease's own thread runs it too (for reconfigurations).
/// NULL turns events off (the default: then no admission does any event work). Replaces a
/// callback set before.
///
/// Parameters:
///   opts: from `hg_fleet_options_new()`.
///   on_event: NULL, or the callback. user_data: passed to it; must stay valid while the
///   fleet bulkhead (and any handle from `hg_fleet_bulkhead_bulkhead()`) lives.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER` (`opts`).
/// Thread-safety: one thread at a time per options object.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_options_set_on_event(
    opts: *mut hg_fleet_options,
    on_event: hg_event_fn,
    user_data: *mut c_void,
) -> hg_status {
    const F: &str = "hg_fleet_options_set_on_event";
    guard(F, || {
        need!(F, opts, "opts");
        // SAFETY: a live options object (contract).
        let o = unsafe { options_mut(opts) };
        o.events.event = on_event;
        o.events.event_data = if on_event.is_some() {
            user_data
        } else {
            std::ptr::null_mut()
        };
        hg_status::HG_STATUS_OK
    })
}

/// Frees options. NULL is accepted and ignored.
///
/// Memory and lifetimes: after this call `opts` is dangling; fleet bulkheads opened with them
/// keep their own copy. Thread-safety: not while another call uses `opts`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_options_free(opts: *mut hg_fleet_options) {
    boundary(|| {
        if !opts.is_null() {
            // SAFETY: a live `Box<Options>` pointer the caller gives up (contract).
            drop(unsafe { Box::from_raw(opts.cast::<Options>()) });
        }
    })
}

// ----- the reply -----------------------------------------------------------------------------

/// One reply value.
#[derive(Debug)]
enum Value {
    Int(i64),
    Text(String),
    Array(Vec<Field>),
}

/// What an `hg_fleet_reply*` points to during a callback.
#[derive(Debug, Default)]
struct ReplyBuf {
    value: Option<Value>,
    error: Option<String>,
    /// The first misuse of the reply functions (the reply is then refused as a whole).
    misuse: Option<&'static str>,
}

impl ReplyBuf {
    fn misused(&mut self, what: &'static str) -> hg_status {
        self.misuse.get_or_insert(what);
        hg_status::HG_STATUS_INVALID_ARGUMENT
    }

    /// Sets a scalar, or appends it to an array.
    fn put(&mut self, field: Field) -> hg_status {
        match &mut self.value {
            None => {
                self.value = Some(match field {
                    Field::Int(n) => Value::Int(n),
                    Field::Text(s) => Value::Text(s),
                });
                hg_status::HG_STATUS_OK
            }
            Some(Value::Array(items)) => {
                items.push(field);
                hg_status::HG_STATUS_OK
            }
            Some(_) => self.misused("a second value for a scalar reply"),
        }
    }
}

/// # Safety
/// `reply` is non-null and the `hg_fleet_reply*` of a running callback.
unsafe fn reply_mut<'a>(reply: *mut hg_fleet_reply) -> &'a mut ReplyBuf {
    // SAFETY: per the contract, a live `ReplyBuf` owned by the library during the callback.
    unsafe { &mut *reply.cast::<ReplyBuf>() }
}

/// `len` bytes at `p` as text (lossy UTF-8).
///
/// # Safety
/// `p` is NULL with `len` 0, or has `len` readable bytes.
unsafe fn bytes_text(p: *const c_char, len: usize) -> Option<String> {
    if len == 0 {
        return Some(String::new());
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    Some(String::from_utf8_lossy(b).into_owned())
}

/// The reply is an integer (Redis `:n`), or, after `hg_fleet_reply_array()`, appends one.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` when the reply already holds a scalar
///   (the reply is then refused as a whole: the call counts as failed); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: only from the callback that received `reply`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_reply_integer(reply: *mut hg_fleet_reply, value: i64) -> hg_status {
    boundary(|| {
        if reply.is_null() {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: the reply of the running callback (contract).
        unsafe { reply_mut(reply) }.put(Field::Int(value))
    })
}

/// The reply is a string of `len` bytes (a bulk or status reply: `FUNCTION LOAD` answers the
/// library's name; an integer sent as a string is read as one), or, after
/// `hg_fleet_reply_array()`, appends one (`hg_stats` answers holder ids). The bytes are copied.
///
/// Returns: as `hg_fleet_reply_integer()`; `HG_STATUS_NULL_PARAMETER` also for `s` NULL with a
///   `len` above 0.
/// Thread-safety: only from the callback that received `reply`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_reply_string(
    reply: *mut hg_fleet_reply,
    s: *const c_char,
    len: usize,
) -> hg_status {
    boundary(|| {
        if reply.is_null() {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: the reply of the running callback (contract).
        let r = unsafe { reply_mut(reply) };
        // SAFETY: `s` has `len` readable bytes, or is NULL with 0 (contract; checked).
        match unsafe { bytes_text(s, len) } {
            Some(t) => r.put(Field::Text(t)),
            None => {
                r.misused("a NULL string");
                hg_status::HG_STATUS_NULL_PARAMETER
            }
        }
    })
}

/// The reply is an array (Redis `*n`): the following `hg_fleet_reply_integer()` /
/// `hg_fleet_reply_string()` calls append its elements, in order. The library's replies are
/// flat: an array inside an array is refused.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` when the reply already holds a value
///   (the reply is then refused as a whole); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: only from the callback that received `reply`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_reply_array(reply: *mut hg_fleet_reply) -> hg_status {
    boundary(|| {
        if reply.is_null() {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: the reply of the running callback (contract).
        let r = unsafe { reply_mut(reply) };
        if r.value.is_some() {
            return r.misused("an array inside a reply that already holds a value");
        }
        r.value = Some(Value::Array(Vec::new()));
        hg_status::HG_STATUS_OK
    })
}

/// The reply is Redis' error reply `msg` (`len` bytes, copied: `"ERR Function not found"`, a
/// `NOPERM`, …) when the callback returns 0; when it returns another value, `msg` says why the
/// call failed (`"Connection refused"`). Replaces any value set before.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER` (`reply`, or `msg` NULL with a `len`
///   above 0).
/// Thread-safety: only from the callback that received `reply`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_reply_error(
    reply: *mut hg_fleet_reply,
    msg: *const c_char,
    len: usize,
) -> hg_status {
    boundary(|| {
        if reply.is_null() {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        }
        // SAFETY: the reply of the running callback (contract).
        let r = unsafe { reply_mut(reply) };
        // SAFETY: `msg` has `len` readable bytes, or is NULL with 0 (contract; checked).
        let Some(t) = (unsafe { bytes_text(msg, len) }) else {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        };
        r.error = Some(if t.is_empty() { "error".into() } else { t });
        hg_status::HG_STATUS_OK
    })
}

// ----- the transport -----------------------------------------------------------------------

type CallFn = unsafe extern "C" fn(
    *mut c_void,
    *const *const c_char,
    *const usize,
    usize,
    *mut hg_fleet_reply,
) -> c_int;

/// The caller's transport, behind the fleet bulkhead's lock (one call at a time).
struct Conn {
    ctx: *mut c_void,
    call: CallFn,
    /// Called once, when the last owner drops it (disarmed when the open fails).
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    /// The library was found or loaded.
    ready: bool,
}

// SAFETY: `hg_fleet_transport`'s contract: `call` and `release` may be called from any thread
// with `ctx`, one call at a time (the lock around `Conn` sees to that).
unsafe impl Send for Conn {}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            // SAFETY: the caller's function and context, once (contract).
            unsafe { release(self.ctx) };
        }
    }
}

fn io(message: String) -> TransportError {
    TransportError {
        kind: TransportErrorKind::Io,
        message,
    }
}

/// Redis' error text for a function the server does not have (the library was lost: a restart
/// without persistence, `FUNCTION FLUSH`, a failover to a replica without it).
fn missing_function(message: &str) -> bool {
    message.contains("Function not found") || message.contains("function not found")
}

fn int_of(f: &Field) -> Result<i64, TransportError> {
    match f {
        Field::Int(n) => Ok(*n),
        Field::Text(s) => s
            .parse()
            .map_err(|_| TransportError::protocol(format!("not an integer: {s:?}"))),
    }
}

impl Conn {
    /// One command through the callback.
    fn raw(&mut self, args: &[&str]) -> Result<Value, TransportError> {
        let owned = args
            .iter()
            .map(|a| CString::new(*a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| TransportError::protocol("an argument holds a NUL byte"))?;
        let argv: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let lens: Vec<usize> = owned.iter().map(|c| c.as_bytes().len()).collect();
        let mut reply = ReplyBuf::default();
        // SAFETY: the caller's callback and context (contract); `argv` / `lens` hold `argc`
        // NUL-terminated strings and their lengths, and `reply` a live `ReplyBuf`, all valid
        // for the call.
        let rc = unsafe {
            (self.call)(
                self.ctx,
                argv.as_ptr(),
                lens.as_ptr(),
                argv.len(),
                (&raw mut reply).cast(),
            )
        };
        if rc != 0 {
            return Err(io(reply.error.unwrap_or_else(|| {
                format!("the transport callback returned {rc}")
            })));
        }
        if let Some(what) = reply.misuse {
            return Err(TransportError::protocol(format!(
                "the transport callback filled the reply wrongly: {what}"
            )));
        }
        if let Some(message) = reply.error {
            return Err(TransportError {
                kind: TransportErrorKind::Server,
                message,
            });
        }
        reply.value.ok_or_else(|| {
            TransportError::protocol("the transport callback returned 0 without a reply")
        })
    }

    /// Makes sure the library of `LIB_VERSION` is loaded where `keys` live.
    fn ensure_library(&mut self, keys: &Keys) -> Result<(), TransportError> {
        if self.ready {
            return Ok(());
        }
        match self.raw(&["FCALL_RO", FN_VERSION, "1", &keys.0[0]]) {
            // An integer, or a client's string for one.
            Ok(Value::Int(LIB_VERSION)) => {}
            Ok(Value::Text(v)) if v.parse() == Ok(LIB_VERSION) => {}
            Err(e) if e.kind == TransportErrorKind::Io => return Err(e),
            _ => {
                self.raw(&["FUNCTION", "LOAD", "REPLACE", LIBRARY])?;
            }
        }
        self.ready = true;
        Ok(())
    }

    /// `command` as the crate spells it (`FCALL function 6 keys… argv…`, or `WAIT replicas
    /// timeout_ms`), loading the library again (and retrying once) if the server lost it.
    fn run(&mut self, command: &Command) -> Result<Value, TransportError> {
        let keys = &command.keys;
        self.ensure_library(keys)?;
        let args = command.args();
        let fcall = args.first().is_some_and(|a| a == "FCALL");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match self.raw(&args) {
            Err(e)
                if fcall
                    && e.kind == TransportErrorKind::Server
                    && missing_function(&e.message) =>
            {
                self.ready = false;
                self.ensure_library(keys)?;
                self.raw(&args)
            }
            other => other,
        }
    }
}

type Shared = Arc<Mutex<Conn>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sends `command` and reads its reply as the core takes it.
fn send(conn: &Shared, command: &Command) -> Result<RawReply, TransportError> {
    let v = lock(conn).run(command)?;
    Ok(match v {
        Value::Int(n) => RawReply::Int(n),
        Value::Text(s) => RawReply::Int(int_of(&Field::Text(s))?),
        Value::Array(items) => RawReply::Ints(items.iter().map(int_of).collect::<Result<_, _>>()?),
    })
}

/// The driver loop (the binding contract's, as the crate's `FleetBulkhead`).
fn drive(core: &FleetCore, conn: &Shared) {
    loop {
        match core.step() {
            Step::Send(command) => match send(conn, &command) {
                Ok(reply) => core.complete(reply),
                Err(e) => core.fail(&e.to_string()),
            },
            Step::Wait(d) => core.wait(d),
            Step::Closed => return,
        }
    }
}

// ----- the fleet bulkhead ------------------------------------------------------------------

/// What an `hg_fleet_bulkhead*` points to.
struct Fleet {
    core: Arc<FleetCore>,
    conn: Shared,
    driver: Mutex<Option<JoinHandle<()>>>,
    driver_id: ThreadId,
}

impl Fleet {
    /// Whether the calling thread is the driver (a call from inside the transport callback).
    fn on_driver(&self) -> bool {
        std::thread::current().id() == self.driver_id
    }

    /// Stops the driver and sends the releases (one per lease: the permits', then the
    /// budget's; each once): the first failure is returned after every release was tried.
    /// Idempotent.
    fn close(&self) -> Result<(), TransportError> {
        self.core.close();
        let mut driver = lock(&self.driver);
        if let Some(d) = driver.take() {
            let _ = d.join();
        }
        let mut first_error = None;
        // Finite: each lease hands out its release (or last sync) once.
        while let Some(command) = self.core.release_command() {
            match send(&self.conn, &command) {
                Ok(reply) => self.core.released(&reply),
                Err(e) => {
                    self.core.fail(&e.to_string());
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Sends `snapshot`'s commands (the limit's, then the budget's), then hands the replies
    /// to the core.
    fn apply(&self, snapshot: &LimitsSnapshot) -> Result<AppliedLimits, FleetError> {
        let commands = self.core.apply_limits(snapshot)?;
        let mut replies = Vec::with_capacity(commands.len());
        for command in &commands {
            replies.push(send(&self.conn, command).map_err(FleetError::Transport)?);
        }
        self.core.limits_applied(snapshot, &replies)
    }
}

/// # Safety
/// `p` is non-null and a live `hg_fleet_bulkhead*` (from `hg_fleet_bulkhead_open()`, not freed).
unsafe fn fleet_ref<'a>(p: *const hg_fleet_bulkhead) -> &'a Fleet {
    // SAFETY: per the contract, a live `Box<Fleet>` pointer.
    unsafe { &*p.cast::<Fleet>() }
}

/// `let fb = try_fleet!(F, fb);` — the fleet bulkhead, or `HG_STATUS_NULL_PARAMETER` naming it.
macro_rules! try_fleet {
    ($f:expr, $fb:expr) => {{
        need!($f, $fb, "fb");
        // SAFETY: non-null; every export documents that `fb` is NULL or a live handle.
        unsafe { fleet_ref($fb) }
    }};
}

/// Refuses a call that would wait for the transport from inside its own callback.
macro_rules! not_on_driver {
    ($f:expr, $fleet:expr) => {
        if $fleet.on_driver() {
            return invalid(
                $f,
                "called from the fleet bulkhead's own transport callback (it would wait for itself)",
            );
        }
    };
}

/// Opens a fleet bulkhead on `transport` with `opts`: loads the hullguard library if Redis
/// does not have it (`FCALL_RO hg_version`, then `FUNCTION LOAD REPLACE` when it is missing or
/// differs: one round trip when it is there), then starts the thread that keeps the lease
/// (`hullguard-fleet:<pool>`), which asks for the first block at once. Until it arrives,
/// acquires queue (or a try is refused `HG_STATUS_CONCURRENCY_LIMIT` with the bound
/// `HG_BOUND_FLEET_LEASE`). With the `budget` option it leases the fleet budget too (on the
/// same thread, from a second lease table of the pool); with `hg_fleet_options_set_classes()`
/// the local bulkhead is classed; with `hg_fleet_options_set_on_event()` it emits events.
///
/// Parameters:
///   opts: from `hg_fleet_options_new()` (copied, with its class table: free them whenever).
///   transport: the callback over the caller's Redis client (see `hg_fleet_transport`); its
///   `struct_size` must be `sizeof(hg_fleet_transport)`.
///   out: receives the fleet bulkhead (set only on `HG_STATUS_OK`).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for options whose relations do not hold
///   (`beat` above half of `lease_ttl`, …), a class table the core refuses with these options
///   (a floor above its class's ceiling, budget floors without a `budget`, …: in its words),
///   or a bad `transport->struct_size` — all checked before the transport is called;
///   `HG_STATUS_FLEET_TRANSPORT` when Redis cannot be reached or refuses the library
///   (`hg_fleet_last_error()` has what the callback or Redis said); `HG_STATUS_OUT_OF_MEMORY`
///   when the thread cannot be started; `HG_STATUS_NULL_PARAMETER` (also for a NULL `call`).
///
/// Memory and lifetimes: the caller owns `*out`: close it with `hg_fleet_bulkhead_close()`,
/// free it with `hg_fleet_bulkhead_free()`. On `HG_STATUS_OK` the fleet bulkhead owns
/// `transport->ctx` until its free (then `release` is called, if set); on failure it keeps
/// nothing and calls no `release`.
///
/// Thread-safety: any thread; blocks for the library's load (the callback runs on this
/// thread); the fleet bulkhead's own thread then calls the callback (see
/// `hg_fleet_transport`).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_open(
    opts: *const hg_fleet_options,
    transport: *const hg_fleet_transport,
    out: *mut *mut hg_fleet_bulkhead,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_open";
    guard(F, || {
        need!(F, opts, "opts");
        need!(F, transport, "transport");
        need!(F, out, "out");
        // SAFETY: a live options object (contract); only read.
        let options = unsafe { &*opts.cast::<Options>() };
        // SAFETY: a readable `hg_fleet_transport` of its declared size (contract).
        let t = match unsafe { sized::read(transport, TRANSPORT_MIN) } {
            Ok(t) => t,
            Err(s) => {
                return fail(
                    s,
                    F,
                    format_args!(
                        "`transport->struct_size` must be sizeof(hg_fleet_transport) = {TRANSPORT_MIN} \
                         (or a newer one's, with only zeroes past this library's fields)"
                    ),
                );
            }
        };
        let Some(call) = t.call else {
            return null(F, "transport->call");
        };
        let table = options.classes.as_ref().map(OwnedClassTable::table);
        let local = Local {
            classes: table.as_ref(),
            observer: options.events.shared(),
        };
        let core = match FleetCore::with_local(&options.config, None, local) {
            Ok(c) => Arc::new(c),
            Err(e) => return failed(F, &e),
        };
        let mut conn = Conn {
            ctx: t.ctx,
            call,
            release: None,
            ready: false,
        };
        if let Err(e) = conn.ensure_library(core.keys()) {
            return failed(F, &FleetError::Transport(e));
        }
        conn.release = t.release;
        let conn: Shared = Arc::new(Mutex::new(conn));
        let spawned = {
            let (core, conn) = (Arc::clone(&core), Arc::clone(&conn));
            std::thread::Builder::new()
                .name(format!("hullguard-fleet:{}", core.pool()))
                .spawn(move || drive(&core, &conn))
        };
        let driver = match spawned {
            Ok(d) => d,
            Err(e) => {
                // Not started: the context is still the caller's.
                lock(&conn).release = None;
                return fail(
                    hg_status::HG_STATUS_OUT_OF_MEMORY,
                    F,
                    format_args!("cannot start the lease thread: {e}"),
                );
            }
        };
        let fleet = Box::new(Fleet {
            core,
            conn,
            driver_id: driver.thread().id(),
            driver: Mutex::new(Some(driver)),
        });
        // SAFETY: non-null and writable (contract).
        unsafe { *out = Box::into_raw(fleet).cast() };
        hg_status::HG_STATUS_OK
    })
}

/// A handle on the fleet bulkhead's local bulkhead, for every `hg_bulkhead_*` admission
/// function (`hg_bulkhead_try_acquire()`, `_acquire_timeout()`, `_acquire_async()`,
/// `_enqueue()`, the `_request` forms with their `hg_rejection` detail, `hg_bulkhead_stats()`,
/// `_drain()`, …): admissions are local and never touch the network. While the block has room
/// an acquire is a local acquire plus one clock read (the lease's deadline); when it is short
/// the request queues (FIFO in this process) and the lease's thread is woken to ask for more;
/// with no valid lease a try is refused `HG_STATUS_CONCURRENCY_LIMIT` with the bound
/// `HG_BOUND_FLEET_LEASE`.
///
/// With a fleet budget (the `budget` option), an `hg_request`'s `cost` is admitted on this
/// process's budget block the same way: granted when the block has room; above it but within
/// the fleet budget it waits for the block to grow (a try, or `timeout_ms` 0, is refused
/// `HG_STATUS_BUDGET_LIMIT`, with the bound `HG_BOUND_FLEET_LEASE` while the block is 0); above
/// the fleet budget it is refused `HG_STATUS_BUDGET_LIMIT` at once. With classes
/// (`hg_fleet_options_set_classes()`), `hg_request.class_index` names the class: priorities,
/// floors and ceilings apply inside the local block (`hg_bulkhead_class_stats()` reads them).
///
/// Its limit and budget are the leases': `hg_bulkhead_set_limit()`, `hg_bulkhead_set_budget()`,
/// `hg_bulkhead_apply_limits()` and `hg_bulkhead_set_observe()` refuse it
/// (`HG_STATUS_INVALID_ARGUMENT`; set the fleet limit and budget with
/// `hg_fleet_bulkhead_apply_limits_of()`). `hg_bulkhead_close()` on it stops admissions only:
/// `hg_fleet_bulkhead_close()` also stops the lease's thread and gives the blocks back.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`.
/// Memory and lifetimes: the caller owns one reference: free it with `hg_bulkhead_free()`
/// (which does not close anything). It may outlive the fleet bulkhead: after
/// `hg_fleet_bulkhead_close()` its acquires are refused `HG_STATUS_SHUTDOWN`.
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_bulkhead(
    fb: *const hg_fleet_bulkhead,
    out: *mut *mut hg_bulkhead,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_bulkhead";
    guard(F, || {
        let fleet = try_fleet!(F, fb);
        need!(F, out, "out");
        let handle = bulkhead_into_raw(BulkheadHandle {
            core: Arc::clone(fleet.core.bulkhead()),
            owned: false,
        });
        // SAFETY: non-null and writable (contract).
        unsafe { *out = handle };
        hg_status::HG_STATUS_OK
    })
}

/// Fills `*out` with the permits' lease as this process sees it: `hg_fleet_bulkhead_stats_of()`
/// with `HG_FLEET_DIMENSION_PERMITS`.
///
/// Returns: as `hg_fleet_bulkhead_stats_of()`.
/// Thread-safety: any thread; never waits for Redis (takes the lease's lock for a moment).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_stats(
    fb: *const hg_fleet_bulkhead,
    out: *mut hg_fleet_stats,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_stats";
    guard(F, || stats_of(F, fb, PERMITS, out))
}

/// Fills `*out` with one dimension's lease as this process sees it (see `hg_fleet_stats`; the
/// budget's in units; at most `out->struct_size` bytes: set it to `sizeof(hg_fleet_stats)`
/// first; on return it says how many bytes were written).
///
/// Parameters:
///   dimension: an `hg_fleet_dimension` (`HG_FLEET_DIMENSION_BUDGET` only on a fleet
///   bulkhead opened with the `budget` option).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a `struct_size` below 4, an
///   unknown `dimension`, or the budget of a fleet bulkhead without one
///   (`hg_fleet_last_error()` names it); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits for Redis (takes the lease's lock for a moment).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_stats_of(
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    out: *mut hg_fleet_stats,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_stats_of";
    guard(F, || stats_of(F, fb, dimension, out))
}

/// `hg_fleet_bulkhead_stats_of()` for `function`.
fn stats_of(
    function: &str,
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    out: *mut hg_fleet_stats,
) -> hg_status {
    let fleet = try_fleet!(function, fb);
    need!(function, out, "out");
    let dimension = match leased_dimension(function, fleet, dimension) {
        Ok(d) => d,
        Err(s) => return s,
    };
    // SAFETY: non-null, its `struct_size` set (contract).
    if unsafe { sized::writable(out) }.is_err() {
        return invalid(function, "`out->struct_size` is below 4");
    }
    let v = match lease_of(fleet, dimension) {
        Some(l) => hg_fleet_stats::from(&l),
        None => return no_budget(function),
    };
    // SAFETY: as above.
    unsafe { sized::write(out, &v) }
}

const PERMITS: u32 = hg_fleet_dimension::HG_FLEET_DIMENSION_PERMITS as u32;
const BUDGET: u32 = hg_fleet_dimension::HG_FLEET_DIMENSION_BUDGET as u32;

/// A caller's `hg_fleet_dimension`.
fn dimension_of(function: &str, n: u32) -> Result<Dimension, hg_status> {
    match n {
        PERMITS => Ok(Dimension::Permits),
        BUDGET => Ok(Dimension::Budget),
        _ => Err(invalid(
            function,
            format_args!("`dimension` {n} is not an hg_fleet_dimension (0 permits, 1 budget)"),
        )),
    }
}

/// A caller's `hg_fleet_dimension` that this fleet bulkhead leases.
fn leased_dimension(function: &str, fleet: &Fleet, n: u32) -> Result<Dimension, hg_status> {
    match dimension_of(function, n)? {
        Dimension::Budget if !fleet.core.has_budget() => Err(no_budget(function)),
        d => Ok(d),
    }
}

/// The budget of a fleet bulkhead opened without one.
fn no_budget(function: &str) -> hg_status {
    invalid(
        function,
        "budget: this fleet bulkhead has no fleet budget (set the `budget` option before \
         hg_fleet_bulkhead_open())",
    )
}

/// One lease's stats now (`None`: the budget of a fleet bulkhead without one).
fn lease_of(fleet: &Fleet, dimension: Dimension) -> Option<LeaseStats> {
    let s = fleet.core.stats();
    match dimension {
        Dimension::Permits => Some(s.lease),
        Dimension::Budget => s.budget_lease,
    }
}

/// Writes `s` into the caller's buffer, naming `F` on a buffer too small.
///
/// # Safety
/// As `write_str`: `buf` NULL with 0 or `buf_len` writable bytes; `out_len` non-null.
unsafe fn string_out(
    function: &str,
    s: &str,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    // SAFETY: per the contract.
    let status = unsafe { write_str(s.as_bytes(), buf, buf_len, &mut *out_len) };
    if status != hg_status::HG_STATUS_OK {
        return invalid(
            function,
            format_args!("`buf_len` {buf_len} is below {}", s.len() + 1),
        );
    }
    status
}

/// This process's holder id in the pool, `<label>:<pid>:<random hex>` (the label is the
/// hostname, or `hg_fleet_options_set_str(opts, "holder", …)`), written into `buf` with a
/// terminating NUL (as
/// `hg_fleet_last_error()`: pass `buf` NULL and `buf_len` 0 to ask for the size).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` for a `buf` too small (`*out_len`
///   says how much is needed, plus 1); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_holder(
    fb: *const hg_fleet_bulkhead,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_holder";
    guard(F, || {
        let fleet = try_fleet!(F, fb);
        need!(F, out_len, "out_len");
        if buf.is_null() && buf_len != 0 {
            return null(F, "buf");
        }
        // SAFETY: checked above; the buffer per the contract.
        unsafe { string_out(F, fleet.core.holder(), buf, buf_len, out_len) }
    })
}

/// The permits' lease's last error: `hg_fleet_bulkhead_lease_error_of()` with
/// `HG_FLEET_DIMENSION_PERMITS`.
///
/// Returns: as `hg_fleet_bulkhead_holder()`.
/// Thread-safety: any thread (takes the lease's lock for a moment).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_lease_error(
    fb: *const hg_fleet_bulkhead,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_lease_error";
    guard(F, || lease_error_of(F, fb, PERMITS, buf, buf_len, out_len))
}

/// One dimension's lease's last error (what the transport or Redis said), kept until a sync
/// of that lease succeeds; an empty string when there is none (`hg_fleet_stats.has_lease_error`
/// of `hg_fleet_bulkhead_stats_of()`). Written as `hg_fleet_bulkhead_holder()`.
///
/// Parameters:
///   dimension: an `hg_fleet_dimension` (`HG_FLEET_DIMENSION_BUDGET` only with a budget).
///
/// Returns: as `hg_fleet_bulkhead_holder()`, and `HG_STATUS_INVALID_ARGUMENT` for an unknown
///   `dimension` or the budget of a fleet bulkhead without one.
/// Thread-safety: any thread (takes the lease's lock for a moment).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_lease_error_of(
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_lease_error_of";
    guard(F, || {
        lease_error_of(F, fb, dimension, buf, buf_len, out_len)
    })
}

/// `hg_fleet_bulkhead_lease_error_of()` for `function`.
fn lease_error_of(
    function: &str,
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> hg_status {
    let fleet = try_fleet!(function, fb);
    need!(function, out_len, "out_len");
    if buf.is_null() && buf_len != 0 {
        return null(function, "buf");
    }
    let dimension = match leased_dimension(function, fleet, dimension) {
        Ok(d) => d,
        Err(s) => return s,
    };
    let Some(lease) = lease_of(fleet, dimension) else {
        return no_budget(function);
    };
    let error = lease.last_error.unwrap_or_default();
    // SAFETY: checked above; the buffer per the contract.
    unsafe { string_out(function, &error, buf, buf_len, out_len) }
}

/// Sets the fleet limit in Redis under `revision`: `hg_fleet_bulkhead_apply_limits_of()` with
/// `HG_FLEET_DIMENSION_PERMITS` (`limit`: `0 .. 2^32`).
///
/// Returns: as `hg_fleet_bulkhead_apply_limits_of()`.
/// Thread-safety: any thread but the callback's; waits for the transport (one call).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_apply_limits(
    fb: *const hg_fleet_bulkhead,
    revision: u64,
    limit: u64,
    rev_in_force: *mut u64,
    limit_in_force: *mut u64,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_apply_limits";
    guard(F, || {
        apply_limits_of(
            F,
            fb,
            PERMITS,
            revision,
            limit,
            rev_in_force,
            limit_in_force,
        )
    })
}

/// Sets one dimension's fleet limit in Redis under `revision` — the fleet limit
/// (`HG_FLEET_DIMENSION_PERMITS`) or the fleet budget (`HG_FLEET_DIMENSION_BUDGET`) — with one
/// call through the transport, on this thread: applied only if `revision` is above the
/// revision in force in that dimension's lease table (each dimension keeps its own), so a
/// delayed or repeated update never undoes a newer one. Lowering never revokes: holders shrink
/// to their shares at their next syncs (a cost waiting above a lowered fleet budget is refused
/// `HG_STATUS_BUDGET_LIMIT`); raising lets them grow. Applied here, it is set again if Redis
/// loses the pool's state.
///
/// Parameters:
///   dimension: an `hg_fleet_dimension`.
///   revision: `1 .. 2^53 - 1`.
///   limit: the fleet limit, `0 .. 2^32` (0: nothing admitted fleet-wide), or the fleet
///   budget in units, `1 .. 2^32`.
///   rev_in_force, limit_in_force: NULL, or receive the revision and the value in force in that
///   dimension after the call (on `HG_STATUS_OK` and `HG_STATUS_STALE`).
///
/// Returns: `HG_STATUS_OK` (applied); `HG_STATUS_STALE` (a revision as new or newer is in
///   force: nothing changed); `HG_STATUS_INVALID_ARGUMENT` for an unknown `dimension`, a
///   `revision` or `limit` out of range, the budget of a fleet bulkhead opened without one
///   (`hg_fleet_last_error()` names which: `revision`, `limit`, `budget`), or a call from the
///   transport callback — nothing is sent; `HG_STATUS_FLEET_TRANSPORT`;
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread but the callback's; waits for the transport (one call).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_apply_limits_of(
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    revision: u64,
    limit: u64,
    rev_in_force: *mut u64,
    limit_in_force: *mut u64,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_apply_limits_of";
    guard(F, || {
        apply_limits_of(
            F,
            fb,
            dimension,
            revision,
            limit,
            rev_in_force,
            limit_in_force,
        )
    })
}

/// `hg_fleet_bulkhead_apply_limits_of()` for `function`.
fn apply_limits_of(
    function: &str,
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    revision: u64,
    limit: u64,
    rev_in_force: *mut u64,
    limit_in_force: *mut u64,
) -> hg_status {
    let fleet = try_fleet!(function, fb);
    not_on_driver!(function, fleet);
    let dimension = match dimension_of(function, dimension) {
        Ok(d) => d,
        Err(s) => return s,
    };
    let mut snapshot = LimitsSnapshot::new(revision);
    match dimension {
        Dimension::Permits => snapshot.limit = Some(limit),
        Dimension::Budget => snapshot.budget = Some(limit),
    }
    // The crate names a bad value (and a budget without one) before anything is sent.
    let applied = match fleet.apply(&snapshot) {
        Ok(a) => a,
        Err(e) => return failed(function, &e),
    };
    let reply = match dimension {
        Dimension::Permits => applied.limit,
        Dimension::Budget => applied.budget,
    };
    let Some(SetLimitReply {
        applied,
        rev,
        limit: in_force,
    }) = reply
    else {
        return fail(
            hg_status::HG_STATUS_FLEET_TRANSPORT,
            function,
            "hg_set_limit: no reply for the dimension set",
        );
    };
    for (p, v) in [(rev_in_force, rev), (limit_in_force, in_force)] {
        if !p.is_null() {
            // SAFETY: a non-NULL out-parameter is writable (contract).
            unsafe { p.write_unaligned(v) };
        }
    }
    if applied {
        hg_status::HG_STATUS_OK
    } else {
        fail(
            hg_status::HG_STATUS_STALE,
            function,
            format_args!(
                "revision {revision} is not above the one in force ({rev}, {} {in_force})",
                match dimension {
                    Dimension::Permits => "limit",
                    Dimension::Budget => "budget",
                }
            ),
        )
    }
}

/// Reads the pool's permits as Redis holds them: `hg_fleet_bulkhead_pool_stats_of()` with
/// `HG_FLEET_DIMENSION_PERMITS`.
///
/// Returns: as `hg_fleet_bulkhead_pool_stats_of()`.
/// Thread-safety: any thread but the callback's; waits for the transport (one call).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_pool_stats(
    fb: *const hg_fleet_bulkhead,
    out: *mut hg_fleet_pool_stats,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_pool_stats";
    guard(F, || pool_stats_of(F, fb, PERMITS, out))
}

/// Reads one dimension's lease table of the pool as Redis holds it (`hg_stats`, one read-only
/// call on this thread) into `*out` (see `hg_fleet_pool_stats`, whose figures are units for the
/// budget: `limit` is the fleet budget; set `out->struct_size` first).
///
/// Parameters:
///   dimension: an `hg_fleet_dimension` (`HG_FLEET_DIMENSION_BUDGET` only with a budget).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_FLEET_TRANSPORT`; `HG_STATUS_INVALID_ARGUMENT` for a
///   `struct_size` below 4, an unknown `dimension`, the budget of a fleet bulkhead without one,
///   or a call from the transport callback — nothing is sent; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread but the callback's; waits for the transport (one call).
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_pool_stats_of(
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    out: *mut hg_fleet_pool_stats,
) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_pool_stats_of";
    guard(F, || pool_stats_of(F, fb, dimension, out))
}

/// `hg_fleet_bulkhead_pool_stats_of()` for `function`.
fn pool_stats_of(
    function: &str,
    fb: *const hg_fleet_bulkhead,
    dimension: u32,
    out: *mut hg_fleet_pool_stats,
) -> hg_status {
    let fleet = try_fleet!(function, fb);
    need!(function, out, "out");
    not_on_driver!(function, fleet);
    let dimension = match leased_dimension(function, fleet, dimension) {
        Ok(d) => d,
        Err(s) => return s,
    };
    // SAFETY: non-null, its `struct_size` set (contract).
    if unsafe { sized::writable(out) }.is_err() {
        return invalid(function, "`out->struct_size` is below 4");
    }
    let command = fleet.core.pool_stats_command_of(dimension);
    let fields = match lock(&fleet.conn).run(&command) {
        Ok(Value::Array(fields)) => fields,
        Ok(other) => {
            return failed(
                function,
                &FleetError::Transport(TransportError::protocol(format!(
                    "hg_stats answered {other:?}"
                ))),
            );
        }
        Err(e) => return failed(function, &FleetError::Transport(e)),
    };
    let p = match FleetCore::decode_pool_stats(&fields) {
        Ok(p) => p,
        Err(e) => return failed(function, &e),
    };
    let me = p.holders.iter().find(|h| h.holder == fleet.core.holder());
    let v = hg_fleet_pool_stats {
        struct_size: size_of::<hg_fleet_pool_stats>() as u32,
        exists: p.limit.is_some(),
        self_present: me.is_some(),
        now_ms: p.now_ms,
        limit: p.limit.unwrap_or(0),
        used: p.used,
        epoch: p.epoch,
        fence: p.fence,
        rev: p.rev,
        learn_until_ms: p.learn_until_ms,
        want_sum: p.want_sum,
        holders: p.holders.len() as u64,
        self_held: me.map_or(0, |h| h.held),
        self_generation: me.map_or(0, |h| h.generation),
        self_expires_ms: me.map_or(0, |h| h.expires_ms),
    };
    // SAFETY: as above.
    unsafe { sized::write(out, &v) }
}

/// Closes: the local bulkhead's queued acquires are refused `HG_STATUS_SHUTDOWN` and new ones
/// too (permits in flight finish and release normally), the lease's thread stops (joined), and
/// each block is given back to its lease table — the permits', then the budget's, if any
/// (`hg_release`, fenced: a lease that expired meanwhile frees nothing; with calls still in
/// flight, a last sync shrinks the block to them instead and the lease runs out by its TTL) —
/// through the transport on this thread. Idempotent: a later call returns `HG_STATUS_OK` and
/// sends nothing.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_FLEET_TRANSPORT` when a release could not be sent (every
///   release is tried; closed all the same: a block not given back returns to the pool when
///   its TTL passes; `hg_fleet_last_error()` has the first failure);
///   `HG_STATUS_INVALID_ARGUMENT` from the transport callback; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread but the callback's; waits for the lease's thread's current call
/// and for the releases.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_close(fb: *const hg_fleet_bulkhead) -> hg_status {
    const F: &str = "hg_fleet_bulkhead_close";
    guard(F, || {
        let fleet = try_fleet!(F, fb);
        not_on_driver!(F, fleet);
        match fleet.close() {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(e) => failed(F, &FleetError::Transport(e)),
        }
    })
}

/// Closes (as `hg_fleet_bulkhead_close()`, if not closed yet: its status is not reported) and
/// frees the fleet bulkhead, then calls the transport's `release` with its `ctx`. NULL is
/// accepted and ignored. Handles from `hg_fleet_bulkhead_bulkhead()` and permits stay valid
/// (refused `HG_STATUS_SHUTDOWN` / releasing normally).
///
/// Memory and lifetimes: after this call `fb` is dangling; it must not race another call on
/// `fb`. Called from the transport callback (do not), it closes without waiting: the release
/// is not sent (the blocks return when their TTL passes) and `release` runs when the callback
/// has returned.
/// Thread-safety: see above.
#[unsafe(no_mangle)]
pub extern "C" fn hg_fleet_bulkhead_free(fb: *mut hg_fleet_bulkhead) {
    boundary(|| {
        if fb.is_null() {
            return;
        }
        // SAFETY: a live `Box<Fleet>` pointer the caller gives up (contract).
        let fleet = unsafe { Box::from_raw(fb.cast::<Fleet>()) };
        if fleet.on_driver() {
            // The driver holds the transport and its own references: it stops after this
            // callback, and the last reference drops the transport (its `release`).
            fleet.core.close();
            return;
        }
        let _ = fleet.close();
        // Dropping `fleet` drops the last reference to the transport: its `release` runs.
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hullguard_fleet::options::FLEET_OPTIONS;

    fn message() -> String {
        let mut len = 0usize;
        let _ = hg_fleet_last_error(std::ptr::null_mut(), 0, &mut len);
        let mut buf = vec![0u8; len + 1];
        assert_eq!(
            hg_fleet_last_error(buf.as_mut_ptr().cast(), buf.len(), &mut len),
            hg_status::HG_STATUS_OK
        );
        buf.truncate(len);
        String::from_utf8(buf).unwrap()
    }

    /// Every option of the fleet table can be set through the C setters, at its smallest value
    /// (a duration in ms): a row of a kind C cannot express fails here, not in a user's build.
    #[test]
    fn every_option_of_the_table_is_settable_from_c() {
        let mut opts = std::ptr::null_mut();
        assert_eq!(
            hg_fleet_options_new(c"c-unit".as_ptr(), &mut opts),
            hg_status::HG_STATUS_OK
        );
        for o in FLEET_OPTIONS {
            let name = CString::new(o.name).unwrap();
            let status = match o.kind {
                FleetKind::Int { min, .. } => hg_fleet_options_set_int(opts, name.as_ptr(), min),
                FleetKind::Duration { min, .. } => {
                    // The smallest whole ms in range (`beat` is checked against the TTL at open).
                    let ms = u64::try_from(min.as_nanos().div_ceil(1_000_000)).unwrap();
                    hg_fleet_options_set_int(opts, name.as_ptr(), ms)
                }
                FleetKind::Text => {
                    hg_fleet_options_set_str(opts, name.as_ptr(), c"c-unit.2".as_ptr())
                }
            };
            assert_eq!(status, hg_status::HG_STATUS_OK, "{}: {}", o.name, message());
        }
        hg_fleet_options_free(opts);
    }

    /// The dimension numbers are C's (`hg_fleet_dimension`); another number is refused by
    /// name.
    #[test]
    fn dimension_numbers_are_checked() {
        assert_eq!(dimension_of("t", 0).ok(), Some(Dimension::Permits));
        assert_eq!(dimension_of("t", 1).ok(), Some(Dimension::Budget));
        assert_eq!(
            dimension_of("t", 2).err(),
            Some(hg_status::HG_STATUS_INVALID_ARGUMENT)
        );
        assert!(message().contains("`dimension` 2 is not an hg_fleet_dimension"));
    }

    /// Classes and events are set with their own functions: their names point there.
    #[test]
    fn classes_and_on_event_by_name_name_their_setters() {
        let mut opts = std::ptr::null_mut();
        assert_eq!(
            hg_fleet_options_new(c"c-unit".as_ptr(), &mut opts),
            hg_status::HG_STATUS_OK
        );
        assert_eq!(
            hg_fleet_options_set_int(opts, c"classes".as_ptr(), 1),
            hg_status::HG_STATUS_INVALID_ARGUMENT
        );
        assert!(
            message().contains("hg_fleet_options_set_classes()"),
            "{}",
            message()
        );
        assert_eq!(
            hg_fleet_options_set_str(opts, c"on_event".as_ptr(), c"x".as_ptr()),
            hg_status::HG_STATUS_INVALID_ARGUMENT
        );
        assert!(
            message().contains("hg_fleet_options_set_on_event()"),
            "{}",
            message()
        );
        hg_fleet_options_free(opts);
    }

    #[test]
    fn lease_state_numbers_follow_the_crate_order() {
        for (i, s) in [
            LeaseState::Idle,
            LeaseState::Leased,
            LeaseState::Lost,
            LeaseState::Expired,
            LeaseState::Full,
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(hg_fleet_lease_state::from(s) as usize, i, "{}", s.as_str());
        }
    }

    /// The reply setters record a misuse, so the call is refused as a whole.
    #[test]
    fn a_misused_reply_is_refused() {
        let mut r = ReplyBuf::default();
        let p: *mut hg_fleet_reply = (&raw mut r).cast();
        assert_eq!(hg_fleet_reply_array(p), hg_status::HG_STATUS_OK);
        assert_eq!(hg_fleet_reply_integer(p, 7), hg_status::HG_STATUS_OK);
        assert_eq!(
            hg_fleet_reply_string(p, c"8".as_ptr(), 1),
            hg_status::HG_STATUS_OK
        );
        assert_eq!(
            hg_fleet_reply_array(p),
            hg_status::HG_STATUS_INVALID_ARGUMENT
        );
        assert_eq!(
            hg_fleet_reply_string(p, std::ptr::null(), 2),
            hg_status::HG_STATUS_NULL_PARAMETER
        );
        assert!(r.misuse.is_some());
        let Some(Value::Array(items)) = &r.value else {
            panic!("{:?}", r.value)
        };
        let ints: Vec<i64> = items.iter().map(|f| int_of(f).unwrap()).collect();
        assert_eq!(ints, [7, 8]);
    }
}
