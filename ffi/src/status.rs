//! Status codes, reasons and outcomes. Their numbers are ABI (docs/design.md, the C ABI): never
//! renumber or reuse one. Reason names and rejection messages come from the core's reason table
//! (`Reason::info()`); this file only declares the C numbers.

use std::{
    ffi::{CStr, CString, c_char},
    sync::LazyLock,
};

use hullguard_core::{AcquireError, Bound, Reason};

/// The result of every fallible `hg_*` call.
///
/// `HG_STATUS_<REASON> = 2000 + hg_reason`: one rejection status per reason (2011–2015 are
/// reserved for the reasons later versions add: not returned by this version).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_status {
    /// Success (a permit was granted, or the operation was done).
    HG_STATUS_OK = 0,
    /// `hg_bulkhead_acquire_async` / `hg_bulkhead_enqueue` queued the acquire (the callback will
    /// run exactly once; a polling ticket waits for `hg_ticket_poll()`); `hg_ticket_poll()`: still
    /// queued.
    HG_STATUS_QUEUED = 1,
    /// A required pointer argument was NULL.
    HG_STATUS_NULL_PARAMETER = 1000,
    /// A Rust panic was caught at the boundary (a bug in hullguard).
    HG_STATUS_PANIC = 1001,
    /// An argument is out of range (a weight of 0 or above `max_concurrent`, a bad config).
    HG_STATUS_INVALID_ARGUMENT = 1002,
    /// `hg_permit_release` on a permit already released.
    HG_STATUS_ALREADY_RELEASED = 1003,
    /// `hg_ticket_cancel` lost: a grant, timeout or close settled the ticket first.
    HG_STATUS_ALREADY_SETTLED = 1004,
    /// Memory (the waiter ring) could not be allocated.
    HG_STATUS_OUT_OF_MEMORY = 1005,
    /// `hg_bulkhead_apply_limits()`: the revision is not above the one in force (a stale or
    /// repeated update); nothing changed. `hg_limits.current_revision` (if not NULL) receives
    /// the revision in force.
    HG_STATUS_STALE = 1006,
    /// `hg_permit_report_usage()`: `used` is below the usage reported before (it is
    /// cumulative); nothing changed.
    HG_STATUS_USAGE_DECREASED = 1007,
    /// `hg_permit_orphan()`: the permits would pass the bulkhead's `max_orphaned` (0: orphaning
    /// is off); nothing changed.
    HG_STATUS_ORPHAN_LIMIT = 1008,
    /// `hg_host_permit_release()`: the permit's lease was expired (its process stopped or hung
    /// past `lease_ttl_ms`) or reclaimed before this release; its permits were already returned
    /// and nothing was released twice (code `BULKHEAD_STALE_LEASE`). The issue named 1006, taken
    /// by `HG_STATUS_STALE` before: a published number never changes (docs/design.md §14.6).
    HG_STATUS_STALE_LEASE = 1009,
    /// `hg_host_permit_release()`: the permit belongs to another process (acquired by a parent
    /// before `fork()`); nothing was released (code `BULKHEAD_FOREIGN_LEASE`).
    HG_STATUS_FOREIGN_LEASE = 1010,
    /// A host bulkhead's segment file cannot be used: an I/O error, another owner or a
    /// world-writable mode, an incompatible layout or version, a host-wide setting that differs
    /// from the segment's, no free slot, a poisoned or removed segment (`hg_host_last_error()`
    /// says which).
    HG_STATUS_HOST_SEGMENT = 1011,
    /// A fleet bulkhead's call to Redis failed (`hg_fleet_*`): the transport callback reported
    /// that Redis could not be reached, Redis answered an error (a refused `FUNCTION LOAD`, an
    /// ACL), or the reply was not what the hullguard library sends (`hg_fleet_last_error()`
    /// says which). Admissions never return it: a fleet bulkhead that cannot renew its lease
    /// refuses `HG_STATUS_CONCURRENCY_LIMIT` with the bound `HG_BOUND_FLEET_LEASE`.
    HG_STATUS_FLEET_TRANSPORT = 1012,
    /// Rejected `concurrency_limit`.
    HG_STATUS_CONCURRENCY_LIMIT = 2000,
    /// Rejected `queue_limit`.
    HG_STATUS_QUEUE_LIMIT = 2001,
    /// Rejected `key_limit`.
    HG_STATUS_KEY_LIMIT = 2002,
    /// Rejected `timeout`.
    HG_STATUS_TIMEOUT = 2003,
    /// Rejected `aborted` (a cancelled ticket).
    HG_STATUS_ABORTED = 2004,
    /// Rejected `shutdown` (the bulkhead is closed).
    HG_STATUS_SHUTDOWN = 2005,
    /// Rejected `circuit_open`.
    HG_STATUS_CIRCUIT_OPEN = 2006,
    /// Rejected `call_timeout`.
    HG_STATUS_CALL_TIMEOUT = 2007,
    /// Rejected `budget_limit` (the budget, or a class's budget share, refused the cost).
    HG_STATUS_BUDGET_LIMIT = 2008,
    /// Rejected `shed` (a queued waiter evicted from a full queue for a higher-priority
    /// arrival; classes with `shed`).
    HG_STATUS_SHED = 2009,
    /// Rejected `rate_limit` (a class table's rate refused; `hg_rejection.retry_after_ms`
    /// says when it would conform).
    HG_STATUS_RATE_LIMIT = 2010,
}

/// The first rejection status: `HG_STATUS_<REASON> = REJECTED + hg_reason`.
const REJECTED: u32 = hg_status::HG_STATUS_CONCURRENCY_LIMIT as u32;

/// The status of core reason index `i`, `2000 + i`.
const fn rejection(i: usize) -> hg_status {
    // SAFETY: `2000 + i` is a declared `hg_status` for every reason index of the core (checked
    // at compile time below: reading the discriminant of an undeclared value fails const
    // evaluation), and `From<Reason>` only passes such indices.
    unsafe { std::mem::transmute::<u32, hg_status>(REJECTED + i as u32) }
}

/// The hg_reason of core reason index `i`.
const fn reason(i: usize) -> hg_reason {
    // SAFETY: as `rejection`, for `hg_reason`.
    unsafe { std::mem::transmute::<u32, hg_reason>(i as u32) }
}

// Every core reason has a declared `hg_reason` and `hg_status` (adding a reason to the core
// needs no C change while it fits the declared slots; `hg_stats.rejected` has 16).
const _: () = {
    let mut i = 0;
    while i < Reason::COUNT {
        assert!(rejection(i) as u32 == REJECTED + i as u32);
        assert!(reason(i) as usize == i);
        i += 1;
    }
    assert!(Reason::COUNT <= 16);
};

impl From<Reason> for hg_status {
    fn from(r: Reason) -> Self {
        rejection(r.index())
    }
}

impl From<&AcquireError> for hg_status {
    /// The reason's status; `HG_STATUS_INVALID_ARGUMENT` for an argument error (no reason).
    fn from(e: &AcquireError) -> Self {
        e.reason()
            .map_or(hg_status::HG_STATUS_INVALID_ARGUMENT, hg_status::from)
    }
}

/// Why an acquire was rejected: the index of `hg_stats.rejected` and `hg_stats.observed`
/// (11–15 reserved).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_reason {
    HG_REASON_CONCURRENCY_LIMIT = 0,
    HG_REASON_QUEUE_LIMIT = 1,
    HG_REASON_KEY_LIMIT = 2,
    HG_REASON_TIMEOUT = 3,
    HG_REASON_ABORTED = 4,
    HG_REASON_SHUTDOWN = 5,
    HG_REASON_CIRCUIT_OPEN = 6,
    HG_REASON_CALL_TIMEOUT = 7,
    /// A budget refused the cost.
    HG_REASON_BUDGET_LIMIT = 8,
    /// Evicted from a full queue for a higher-priority arrival.
    HG_REASON_SHED = 9,
    /// A rate refused.
    HG_REASON_RATE_LIMIT = 10,
}

/// How a guarded call ended (docs/design.md, "Outcomes").
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_outcome {
    /// The call completed normally.
    HG_OUTCOME_SUCCESS = 0,
    /// The call failed (an error, HTTP 5xx, a transport error, `call_timeout`).
    HG_OUTCOME_FAILURE = 1,
    /// Cancelled, or never started: no breaker count, no adaptive sample.
    HG_OUTCOME_IGNORED = 2,
    /// The upstream said "slow down" (HTTP 429): a success for the breaker, a failure for the
    /// adaptive limit.
    HG_OUTCOME_OVERLOAD = 3,
}

/// A static, NUL-terminated English description of `status`: `"rejected: <reason>"` for a
/// rejection (the core's message), `"unknown status"` for numbers this version does not
/// define.
///
/// Memory and lifetimes: the string is static; never free it. Thread-safety: any thread; never
/// waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_status_message(status: u32) -> *const c_char {
    let message = match status {
        0 => c"ok",
        1 => c"queued: the async callback will run exactly once; a polling ticket waits for hg_ticket_poll",
        1000 => c"a required pointer argument was NULL",
        1001 => c"internal error (a panic was caught)",
        1002 => c"invalid argument",
        1003 => c"the permit was already released",
        1004 => c"the ticket was already settled",
        1005 => c"out of memory",
        1006 => c"stale revision: the limits in force have this revision or a newer one",
        1007 => c"usage is cumulative and must not decrease",
        1008 => c"orphaning refused: the permits would pass max_orphaned",
        1009 => c"stale lease: the permit's lease expired or was reclaimed before this release; its permits were already returned, nothing was released twice",
        1010 => c"foreign lease: the permit belongs to another process (acquired before fork); nothing was released",
        1011 => c"the host bulkhead's segment file cannot be used (I/O, permission, incompatible layout, settings mismatch, no free slot, poisoned or removed): hg_host_last_error() says which",
        1012 => c"a fleet bulkhead's call to Redis failed (unreachable, an error reply, or an unexpected reply): hg_fleet_last_error() says which",
        s if (REJECTED..=hg_status::HG_STATUS_RATE_LIMIT as u32).contains(&s) => {
            Reason::from_index((s - REJECTED) as usize)
                .map_or(c"reserved: not returned by this version", |r| {
                    r.info().c_message
                })
        }
        _ => c"unknown status",
    };
    message.as_ptr()
}

/// The snake_case name of `reason` (`"concurrency_limit"`, ...), as every layer spells it (the
/// core's reason table); NULL for a number this version does not return (the reserved 11–15
/// included).
///
/// Memory and lifetimes: the string is static; never free it. Thread-safety: any thread; never
/// waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_reason_name(reason: u32) -> *const c_char {
    Reason::from_index(reason as usize).map_or(std::ptr::null(), |r| r.info().c_name.as_ptr())
}

/// The library version, e.g. `"0.1.0"`.
///
/// Memory and lifetimes: the string is static; never free it. Thread-safety: any thread; never
/// waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Which constraint refused (docs/design.md §5.7): `hg_rejection.bound` and
/// `hg_rejection.class_bound`. The numbers are the core's `Bound::ALL` order; new bounds are
/// appended (read it as a `uint32_t`; `hg_bound_name()` names any number this library knows).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_bound {
    /// The permit limit (`concurrency_limit`), or older waiters ahead (no barging).
    HG_BOUND_LIMIT = 0,
    /// The kill switch: a limit of 0.
    HG_BOUND_KILL_SWITCH = 1,
    /// The budget (`budget_limit`).
    HG_BOUND_BUDGET = 2,
    /// `max_queue` live waiters (`queue_limit`).
    HG_BOUND_QUEUE = 3,
    /// `max_queued_cost` (`queue_limit`).
    HG_BOUND_QUEUED_COST = 4,
    /// A registry's `max_keys` (`key_limit`).
    HG_BOUND_KEYS = 5,
    /// The queue deadline (`timeout`).
    HG_BOUND_DEADLINE = 6,
    /// The caller cancelled (`aborted`).
    HG_BOUND_CANCELLED = 7,
    /// Closed (`shutdown`).
    HG_BOUND_CLOSED = 8,
    /// The circuit breaker (`circuit_open`).
    HG_BOUND_BREAKER = 9,
    /// The per-call timeout (`call_timeout`).
    HG_BOUND_CALL_TIMEOUT = 10,
    /// Evicted for a higher-priority arrival (`shed`).
    HG_BOUND_SHED = 11,
    /// A class's own ceiling.
    HG_BOUND_CLASS = 12,
    /// The shared units of a classed bulkhead.
    HG_BOUND_SHARED = 13,
    /// Only the priority reserve is left, and the class may not take it.
    HG_BOUND_RESERVE = 14,
    /// A rate (`rate_limit`).
    HG_BOUND_RATE = 15,
    /// An overload signal over its threshold shed a non-critical class (`shed`; see
    /// `hg_bulkhead_report_load`).
    HG_BOUND_OVERLOAD = 16,
    /// A fleet bulkhead's leased block is empty: no lease yet, lost or past its deadline.
    HG_BOUND_FLEET_LEASE = 17,
}

// Every `hg_bound` is the core's bound of that index.
const _: () = {
    let mut i = 0;
    while i < Bound::ALL.len() {
        assert!(Bound::ALL[i].index() == i);
        i += 1;
    }
    assert!(hg_bound::HG_BOUND_RATE as usize == Bound::Rate.index());
    assert!(hg_bound::HG_BOUND_KILL_SWITCH as usize == Bound::KillSwitch.index());
    assert!(hg_bound::HG_BOUND_SHARED as usize == Bound::Shared.index());
    assert!(hg_bound::HG_BOUND_OVERLOAD as usize == Bound::Overload.index());
    assert!(hg_bound::HG_BOUND_FLEET_LEASE as usize == Bound::FleetLease.index());
    assert!(Bound::ALL.len() == 18);
};

/// The snake_case name of `bound` (`"limit"`, `"kill_switch"`, …), as every layer spells it;
/// NULL for a number this version does not know.
///
/// Memory and lifetimes: the string is static; never free it. Thread-safety: any thread; never
/// waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bound_name(bound: u32) -> *const c_char {
    crate::boundary::boundary(|| {
        Bound::from_index(bound as usize).map_or(std::ptr::null(), |b| bound_cstr(b).as_ptr())
    })
}

/// A bound's name as a static C string (the core's `as_str` with a NUL).
fn bound_cstr(b: Bound) -> &'static CStr {
    static NAMES: LazyLock<Vec<CString>> = LazyLock::new(|| {
        Bound::ALL
            .iter()
            .map(|b| CString::new(b.as_str()).unwrap_or_default())
            .collect()
    });
    NAMES.get(b.index()).map_or(c"", |s| s.as_c_str())
}
