//! Gateway admission through the C ABI (docs/design.md §4.5–4.9, §5): requests with a cost, a
//! class, an observe mode and a timeout (`hg_request`), rejection detail (`hg_rejection`), the
//! dry run (`hg_would_admit`), settlement and streaming usage (`hg_permit_release_usage`,
//! `hg_permit_report_usage`, `hg_permit_refund`, `hg_permit_orphan`), revisioned limits
//! (`hg_limits`), the budget and observe switches, classed bulkheads (`hg_class`,
//! `hg_class_table`, `hg_class_stats`) and the host's rate timer.
//!
//! Marshalling only: every decision, range and rule is the core's; this file copies C structs
//! (size-versioned, `sized`) into core values and core answers into C structs.

use std::{
    ffi::c_void,
    sync::Arc,
    time::{Duration, Instant},
};

use hullguard_core::{
    AcquireError, Bulkhead as CoreBulkhead, ClassLimits, ClassTableLimits, ClockSource,
    ConfigError, Deadline, Decision, HoldChange, LimitsError, LimitsSnapshot, Outcome, Request,
    UsageError, WouldAdmit,
    config::{ClassSpec, ClassTable, MAX_CLASSES, PriorityReserve, Rate, Rates},
    stats::ClassStats,
};

use crate::{
    async_wait::{self, ASYNC_TAG, CWake, Callback, hg_acquire_callback},
    boundary::{boundary, non_null, ok_or, try_mut, try_val},
    bulkhead::{c_clock, grant, hg_now_ns_fn, hg_ticket},
    config::{HG_TIMEOUT_INFINITE, HG_UNSET, hg_config, observe_number, observe_of, read_config},
    handle::{
        BulkheadHandle, PermitBox, bulkhead_into_raw, bulkhead_ref, hg_bulkhead, hg_permit,
        permit_mut, pin_on,
    },
    sized::{self, Output, Plain},
    status::hg_status,
};

// ----- structs ---------------------------------------------------------------------------------

/// One rate of a class table (docs/design.md §4.9): `amount` units per `per_ms`, at most
/// `burst` at once after an idle spell. `amount` 0 = no such rate.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_rate {
    /// Units per interval, `1 ..` (0 = no rate: `per_ms` and `burst` are not read).
    pub amount: u64,
    /// The interval in ms, `1 .. 2^32 - 1` seconds' worth.
    pub per_ms: u64,
    /// The most units at once, `1 ..`.
    pub burst: u64,
}

/// One admission request (docs/design.md §5): fill it with `hg_request_default()`, then change
/// fields. Size-versioned (`struct_size` first; later fields are appended).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_request {
    /// `sizeof(hg_request)` as the caller compiled it (set by `hg_request_default()`).
    pub struct_size: u32,
    /// Permits, `1 .. max_concurrent` (default 1).
    pub weight: u64,
    /// Budget units, `0 .. the budget` (default 0; a cost above 0 needs a budget).
    pub cost: u64,
    /// The admission class, `0 .. classes - 1` of a classed bulkhead (default 0).
    pub class_index: u32,
    /// This call's own observe mode, an `hg_observe` (default `HG_OBSERVE_OFF`: the
    /// bulkhead's mode).
    pub observe: u32,
    /// Queue deadline in ms: `HG_TIMEOUT_DEFAULT` (the default) uses the configured
    /// `queue_timeout_ms`, `HG_TIMEOUT_INFINITE` waits without one, 0 does not queue. The
    /// try-acquire functions never queue, whatever it says.
    pub timeout_ms: u64,
    /// NULL, or where a refusal decided by the call writes its detail (its `struct_size` set
    /// first: one below 4 is refused `HG_STATUS_INVALID_ARGUMENT` before the admission). A
    /// later settlement of a queued acquire (timeout, shed, close) is reported by status only.
    /// A `struct_size` that ends inside this field (neither before nor after it) is refused.
    pub detail: *mut hg_rejection,
    /// The request's absolute deadline in ns (docs/design.md §5.9), read when `has_deadline`
    /// is 1: `CLOCK_MONOTONIC` (`clock_gettime`) for a bulkhead on the host clock, the
    /// bulkhead's own `now_ns` clock otherwise; `HG_DEADLINE_NONE` (`UINT64_MAX`) is none. A
    /// deadline that has passed (or is now) is refused `HG_STATUS_TIMEOUT` at once, with no
    /// ticket — never an argument error; a queued request waits at most until the deadline
    /// (less the bulkhead's `min_service_time_ms`), whatever `timeout_ms` says.
    pub deadline_ns: u64,
    /// 0 (the default, and an older caller's zero tail): no deadline; 1: `deadline_ns` is one;
    /// any other value is refused `HG_STATUS_INVALID_ARGUMENT`.
    pub has_deadline: u32,
    /// Reserved: 0.
    pub reserved: u32,
}

/// `deadline_ns` meaning none.
pub const HG_DEADLINE_NONE: u64 = u64::MAX;

/// `hg_request` up to and including `timeout_ms`: the smallest `struct_size` accepted.
const REQUEST_MIN: usize = std::mem::offset_of!(hg_request, timeout_ms) + size_of::<u64>();

/// A refusal's detail (docs/design.md §5.7): which constraint bound, and the counts at the
/// moment of the refusal (stale as soon as it returns under concurrency). Output only: set
/// `struct_size = sizeof(hg_rejection)` first; the library writes at most that many bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_rejection {
    /// On return: the bytes written.
    pub struct_size: u32,
    /// The `hg_reason`.
    pub reason: u32,
    /// The `hg_bound` that refused.
    pub bound: u32,
    /// Whether a class of a classed bulkhead was refused (`class_*` are 0 otherwise).
    pub class_present: bool,
    /// The class.
    pub class_index: u32,
    /// The `hg_bound` that held the class back (`HG_BOUND_CLASS`, `HG_BOUND_SHARED`,
    /// `HG_BOUND_RESERVE`, `HG_BOUND_LIMIT`, or a queue bound).
    pub class_bound: u32,
    /// The dimension that was short: 0 the permits, 1 the budget.
    pub class_dimension: u32,
    /// `rate_limit`: ms until the request would conform (rounded down);
    /// `HG_TIMEOUT_INFINITE` for other reasons and for a request above a rate's burst.
    pub retry_after_ms: u64,
    /// The same in ns of the bulkhead's clock (`HG_TIMEOUT_INFINITE`: none).
    pub retry_after_ns: u64,
    /// The permits: the limit in force, held, free (negative after a shrink).
    pub calls_limit: u64,
    pub calls_in_use: u64,
    pub calls_available: i64,
    /// Whether the bulkhead has a budget (`budget_*` are 0 otherwise).
    pub budget_present: bool,
    pub budget_limit: u64,
    pub budget_in_use: u64,
    pub budget_available: i64,
    /// Live waiters, `max_queue`, and the total cost of the waiters.
    pub queued: u64,
    pub max_queue: u64,
    pub queued_cost: u64,
    /// The revision of the limits in force.
    pub revision: u64,
}

/// What `hg_bulkhead_would_admit()` predicts (`hg_would_admit.decision`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_would_admit_decision {
    /// Granted at once.
    HG_WOULD_ADMIT_NOW = 0,
    /// Queued at `position` (`ahead` live waiters in front).
    HG_WOULD_QUEUE = 1,
    /// Refused with `status`.
    HG_WOULD_REJECT = 2,
}

/// A dry run's answer. Output only: set `struct_size` first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_would_admit {
    /// On return: the bytes written.
    pub struct_size: u32,
    /// An `hg_would_admit_decision`.
    pub decision: u32,
    /// `HG_STATUS_OK` (admit now), `HG_STATUS_QUEUED`, or the refusal's status (a reason's,
    /// or `HG_STATUS_INVALID_ARGUMENT` for a request the admission would refuse as invalid).
    pub status: u32,
    /// `HG_WOULD_QUEUE`: its place in the queue, from 1 (0 otherwise).
    pub position: u64,
    /// `HG_WOULD_QUEUE`: live waiters ahead of it (`position - 1`).
    pub ahead: u64,
}

/// How a usage report changed a call's budget hold (`hg_usage_report.change`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_hold_change {
    /// The hold stays (also: a bulkhead without a budget).
    HG_HOLD_UNCHANGED = 0,
    /// Units returned (`by` of them), waking whoever fits.
    HG_HOLD_SHRANK = 1,
    /// More units taken through admission (`by`).
    HG_HOLD_GREW = 2,
    /// The growth did not fit: held past the budget (`by`), taking from nobody.
    HG_HOLD_OVERRAN = 3,
}

/// What `hg_permit_report_usage()` did. Output only: set `struct_size` first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_usage_report {
    /// On return: the bytes written.
    pub struct_size: u32,
    /// An `hg_hold_change`.
    pub change: u32,
    /// Whether the host is asked to cancel the call's work (`cancel_on_overrun`); sticky
    /// (`hg_permit_cancel_requested()`).
    pub cancel: bool,
    /// The cumulative usage reported.
    pub used: u64,
    /// The hold now: `used + remaining`.
    pub held: u64,
    /// The part of the hold past the budget.
    pub overrun: u64,
    /// How many units the hold changed by.
    pub by: u64,
}

/// Revisioned run-time limits (docs/design.md §4.6): fill with `hg_limits_default()` (every
/// field `HG_UNSET`: left as it is), set `revision` and what changes. Size-versioned (the
/// fields from `current_revision` on are optional: an older struct reads them as NULL / 0; a
/// `struct_size` that ends inside one of them is refused).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_limits {
    /// `sizeof(hg_limits)` as the caller compiled it.
    pub struct_size: u32,
    /// Must be above the revision in force, `1 .. 2^53 - 1`.
    pub revision: u64,
    /// The limit, `0 .. max_concurrent` (0 = the kill switch; `HG_UNSET` = as it is).
    pub limit: u64,
    /// The budget, `0 .. the configured budget` (`HG_UNSET` = as it is; needs a budget).
    pub budget: u64,
    /// `max_queue`, `0 .. the configured max_queue` (`HG_UNSET` = as it is).
    pub max_queue: u64,
    /// The default queue deadline in ms (`HG_TIMEOUT_INFINITE` = none; `HG_UNSET` (=
    /// `HG_TIMEOUT_DEFAULT`) = as it is).
    pub queue_timeout_ms: u64,
    /// Non-zero: replace a classed bulkhead's priority reserve with the `reserve_*` fields.
    pub has_reserve: u8,
    /// Non-zero: replace a classed bulkhead's rates with `requests` and `units`.
    pub has_rates: u8,
    /// The reserve's lowest priority, `0 .. 255`.
    pub reserve_min_priority: u32,
    /// Permits of the reserve.
    pub reserve_permits: u64,
    /// Budget units of the reserve.
    pub reserve_budget: u64,
    /// The request rate (`amount` 0: none).
    pub requests: hg_rate,
    /// The unit rate (`amount` 0: none; needs a budget).
    pub units: hg_rate,
    /// NULL, or receives the revision in force on `HG_STATUS_STALE`.
    pub current_revision: *mut u64,
    /// A classed bulkhead's class ceilings to change (`classes_len` size-versioned elements;
    /// NULL / 0: none).
    pub classes: *const hg_class_limits,
    pub classes_len: usize,
    /// Non-zero: replace the queue-delay options (docs/design.md §4.10) with the three below —
    /// only on a bulkhead built with `queue_delay_target_ms` or classes.
    pub has_queue_delay: u32,
    /// Reserved: 0.
    pub reserved: u32,
    /// The queue-delay target in ms (0: shedding and LIFO off).
    pub queue_delay_target_ms: u64,
    /// The interval in ms (0: the default, 100).
    pub queue_delay_interval_ms: u64,
    /// Adaptive LIFO: 0 or 1 (needs a target).
    pub adaptive_lifo: u32,
    /// Reserved: 0.
    pub reserved2: u32,
}

/// One class's ceilings for `hg_limits.classes` (docs/design.md §4.8). Size-versioned; in an
/// array every element has the same `struct_size` (the array's stride).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_class_limits {
    /// `sizeof(hg_class_limits)` as the caller compiled it.
    pub struct_size: u32,
    /// The class.
    pub class_index: u32,
    /// Its permit ceiling, `floor .. HG_MAX_PERMITS` (`HG_UNSET`: as it is).
    pub ceiling: u64,
    /// Its budget ceiling, `budget_floor .. HG_MAX_BUDGET` (`HG_UNSET`: as it is).
    pub budget_ceiling: u64,
}

/// `hg_limits` up to `units`: the smallest `struct_size` accepted.
const LIMITS_MIN: usize = std::mem::offset_of!(hg_limits, current_revision);

/// One admission class (docs/design.md §4.8): fill with `hg_class_default()`. Size-versioned;
/// in an array every element has the same `struct_size` (the array's stride).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_class {
    /// `sizeof(hg_class)` as the caller compiled it.
    pub struct_size: u32,
    /// `0 .. 255`: served first for the shared units when higher (FIFO within one).
    pub priority: u32,
    /// Permits protected for this class.
    pub floor: u64,
    /// The most permits it may hold (`HG_UNSET`: the limit).
    pub ceiling: u64,
    /// Budget units protected for it.
    pub budget_floor: u64,
    /// The most budget units it may hold (`HG_UNSET`: the budget).
    pub budget_ceiling: u64,
    /// Its own ceilings observed, not enforced: an `hg_observe`.
    pub observe: u32,
    /// Reserved: 0. (The struct's last 4 bytes, named so that they are never tail padding: a
    /// later version's field here, set by a newer caller, is refused by this library instead
    /// of ignored.)
    pub reserved: u32,
}

/// A class table for `hg_bulkhead_new_with_classes()`: the classes, the priority reserve, the
/// rates, lending and shedding (docs/design.md §4.8, §4.9). Size-versioned; all zeroes (with
/// `struct_size` and `classes`) is a table with no reserve, rates, lending or shedding.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_class_table {
    /// `sizeof(hg_class_table)` as the caller compiled it.
    pub struct_size: u32,
    /// `classes_len` classes (1 .. 64); class `i` is `hg_request.class_index` `i`.
    pub classes: *const hg_class,
    pub classes_len: usize,
    /// Non-zero: idle floor units are lent to other classes, reclaimed first.
    pub lending: u8,
    /// Non-zero: a full queue evicts its youngest lowest-priority waiter for a higher arrival
    /// (`HG_STATUS_SHED` through its callback).
    pub shed: u8,
    /// The reserve's lowest priority, `0 .. 255`.
    pub reserve_min_priority: u32,
    /// Permits kept for classes of priority `>= reserve_min_priority`.
    pub reserve_permits: u64,
    /// Budget units kept for them.
    pub reserve_budget: u64,
    /// The request rate (`amount` 0: none).
    pub requests: hg_rate,
    /// The unit rate (`amount` 0: none; needs a budget).
    pub units: hg_rate,
}

/// One class's counts (`hg_bulkhead_class_stats()`), or a registry key's under a global cap
/// (`hg_registry_key_stats()`). Output only: set `struct_size` first.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hg_class_stats {
    /// On return: the bytes written.
    pub struct_size: u32,
    pub class_index: u32,
    pub priority: u32,
    /// An `hg_observe`.
    pub observe: u32,
    pub floor: u64,
    /// Its permit ceiling (a registry key: its own limit).
    pub ceiling: u64,
    /// Permits it holds.
    pub in_flight: u64,
    pub budget_floor: u64,
    pub budget_ceiling: u64,
    pub budget_in_use: u64,
    /// Its live waiters.
    pub queued: u64,
    /// Would-be refusals its observed ceilings let through.
    pub observed: u64,
    /// The bulkhead's shared units held beyond the floors, all classes together: permits and
    /// budget units (0 for a registry key).
    pub shared_permits_in_use: u64,
    pub shared_budget_in_use: u64,
}

// SAFETY: repr(C), `struct_size` first, integers and raw pointers only.
unsafe impl Plain for hg_request {}
// SAFETY: as above.
unsafe impl Plain for hg_limits {}
// SAFETY: as above.
unsafe impl Plain for hg_class {}
// SAFETY: as above.
unsafe impl Plain for hg_class_table {}
// SAFETY: as above.
unsafe impl Plain for hg_class_limits {}
// SAFETY: repr(C), `struct_size` first; written to C only.
unsafe impl Output for hg_rejection {}
// SAFETY: as above.
unsafe impl Output for hg_would_admit {}
// SAFETY: as above.
unsafe impl Output for hg_usage_report {}
// SAFETY: as above.
unsafe impl Output for hg_class_stats {}

// ----- reading requests and writing refusals ----------------------------------------------------

/// The bytes of field `$f` (of type `$ft`) of `$t`: a declared size may not end inside it
/// ([`sized::read_whole`]).
macro_rules! field {
    ($t:ty, $f:ident, $ft:ty) => {{
        let at = std::mem::offset_of!($t, $f);
        at..at + size_of::<$ft>()
    }};
}

/// Reads an `hg_limits`: at least up to `units`; a declared size may not end inside its
/// pointer fields or count.
///
/// # Safety
/// `p` is NULL or a readable `hg_limits` of its declared size.
unsafe fn read_limits(p: *const hg_limits) -> Result<hg_limits, hg_status> {
    let whole = [
        field!(hg_limits, current_revision, *mut u64),
        field!(hg_limits, classes, *const hg_class_limits),
        field!(hg_limits, classes_len, usize),
        field!(hg_limits, has_queue_delay, u32),
        field!(hg_limits, queue_delay_target_ms, u64),
        field!(hg_limits, queue_delay_interval_ms, u64),
        field!(hg_limits, reserved, u32),
        field!(hg_limits, adaptive_lifo, u32),
        field!(hg_limits, reserved2, u32),
    ];
    // SAFETY: per the contract.
    unsafe { sized::read_whole(p, LIMITS_MIN, &whole) }
}

/// A caller's request as the core's, and its detail pointer.
pub(crate) struct ReadRequest {
    pub(crate) request: Request,
    pub(crate) detail: *mut hg_rejection,
}

/// Reads an `hg_request` (NULL, a too-small size, a non-zero unknown tail, a class index above
/// 65535 or an unknown observe mode are refused; every other range is the core's).
///
/// # Safety
/// `p` is NULL or points to a readable `hg_request` of its declared size.
pub(crate) unsafe fn read_request(p: *const hg_request) -> Result<ReadRequest, hg_status> {
    // SAFETY: per the contract.
    let r = unsafe {
        sized::read_whole(
            p,
            REQUEST_MIN,
            &[
                field!(hg_request, detail, *mut hg_rejection),
                field!(hg_request, deadline_ns, u64),
                field!(hg_request, has_deadline, u32),
                field!(hg_request, reserved, u32),
            ],
        )
    }?;
    let deadline = match (r.has_deadline, r.reserved) {
        (0, 0) => Deadline::NONE,
        (1, 0) => Deadline::Ns(r.deadline_ns),
        _ => return Err(hg_status::HG_STATUS_INVALID_ARGUMENT),
    };
    if !r.detail.is_null() {
        // A detail that cannot be written is a bad argument, refused before the admission (a
        // refusal would otherwise be counted with its detail silently lost).
        // SAFETY: a non-NULL detail is an `hg_rejection` with its `struct_size` set (contract).
        unsafe { sized::writable(r.detail) }?;
    }
    let class = u16::try_from(r.class_index).map_err(|_| hg_status::HG_STATUS_INVALID_ARGUMENT)?;
    let observe = observe_of(r.observe).ok_or(hg_status::HG_STATUS_INVALID_ARGUMENT)?;
    let mut request = Request::new(r.weight)
        .cost(r.cost)
        .class(class)
        .observe(observe)
        .deadline(deadline);
    request.queue_timeout = crate::config::wait_timeout(r.timeout_ms);
    Ok(ReadRequest {
        request,
        detail: r.detail,
    })
}

/// A duration as ms / ns fields (`HG_TIMEOUT_INFINITE`: none).
fn ms_ns(d: Option<Duration>) -> (u64, u64) {
    d.map_or((HG_TIMEOUT_INFINITE, HG_TIMEOUT_INFINITE), |d| {
        (
            u64::try_from(d.as_millis()).unwrap_or(HG_TIMEOUT_INFINITE - 2),
            u64::try_from(d.as_nanos()).unwrap_or(HG_TIMEOUT_INFINITE - 2),
        )
    })
}

/// The status of refusal `e`, writing its detail into `*detail` when `detail` is not NULL and
/// the refusal has a reason (an argument error has no detail).
pub(crate) fn refused(e: &AcquireError, detail: *mut hg_rejection) -> hg_status {
    if let (false, AcquireError::Rejected(r)) = (detail.is_null(), e) {
        let d = r.detail();
        let c = d.class;
        let b = d.budget;
        let (retry_after_ms, retry_after_ns) = ms_ns(d.retry_after);
        let v = hg_rejection {
            struct_size: 0,
            reason: d.reason.index() as u32,
            bound: d.bound.index() as u32,
            class_present: c.is_some(),
            class_index: c.map_or(0, |c| c.class.into()),
            class_bound: c.map_or(0, |c| c.bound.index() as u32),
            class_dimension: c.map_or(0, |c| c.dimension.into()),
            retry_after_ms,
            retry_after_ns,
            calls_limit: d.calls.limit,
            calls_in_use: d.calls.in_use,
            calls_available: d.calls.available,
            budget_present: b.is_some(),
            budget_limit: b.map_or(0, |b| b.limit),
            budget_in_use: b.map_or(0, |b| b.in_use),
            budget_available: b.map_or(0, |b| b.available),
            queued: d.queued,
            max_queue: d.max_queue,
            queued_cost: d.queued_cost,
            revision: d.revision,
        };
        // SAFETY: a non-NULL detail is a writable `hg_rejection` with its `struct_size` set
        // (the contract of `hg_request.detail`). A bad size leaves it unwritten.
        let _ = unsafe { sized::write(detail, &v) };
    }
    e.into()
}

/// A decision's immediate answer: a grant (`*out`), a refusal (its status, with detail), or
/// the queued waiter.
pub(crate) fn decided(
    d: Decision<Arc<CoreBulkhead>, 0>,
    detail: *mut hg_rejection,
    out: &mut *mut hg_permit,
) -> Result<hullguard_core::Waiter<Arc<CoreBulkhead>, 0>, hg_status> {
    match d {
        Decision::Queued(w) => Ok(w),
        Decision::Granted(call) => Err(grant(Ok(call), out)),
        Decision::Rejected(e) => Err(refused(&e, detail)),
    }
}

/// The async path of a decision (`hg_*_acquire_async_request`): a grant or a refusal now, or a
/// queued ticket whose callback runs exactly once (see `hg_bulkhead_acquire_async()`). On
/// `HG_STATUS_QUEUED`, `queue` (if given) receives a new reference to the bulkhead the ticket
/// waits in, for the ticket functions.
pub(crate) fn acquire_async(
    d: Decision<Arc<CoreBulkhead>, 0>,
    detail: *mut hg_rejection,
    callback: Callback,
    out: &mut *mut hg_permit,
    ticket: &mut hg_ticket,
    queue: Option<&mut *mut hg_bulkhead>,
) -> hg_status {
    let waiter = try_val!(decided(d, detail, out));
    let core = waiter.handle().clone();
    let timeout = waiter.queue_timeout();
    // The waker owns the callback from here on; its first registration is this thread's.
    let wake = CWake::new(&core, waiter.into_ticket(), callback);
    if let Some(settled) = wake.admit() {
        return grant(settled, out);
    }
    async_wait::arm(&core, wake.ticket(), timeout);
    *ticket = wake.ticket().to_raw() | ASYNC_TAG;
    if let Some(q) = queue {
        *q = bulkhead_into_raw(BulkheadHandle { core, owned: false });
    }
    hg_status::HG_STATUS_QUEUED
}

/// The polling path of a decision (`hg_*_enqueue_request`): a grant or a refusal now, or a
/// queued ticket (and, if asked, a new reference to the bulkhead it waits in).
pub(crate) fn enqueue(
    d: Decision<Arc<CoreBulkhead>, 0>,
    detail: *mut hg_rejection,
    out: &mut *mut hg_permit,
    ticket: &mut hg_ticket,
    queue: Option<&mut *mut hg_bulkhead>,
) -> hg_status {
    let waiter = try_val!(decided(d, detail, out));
    if let Some(q) = queue {
        let core = waiter.handle().clone();
        *q = bulkhead_into_raw(BulkheadHandle { core, owned: false });
    }
    *ticket = waiter.into_ticket().to_raw();
    hg_status::HG_STATUS_QUEUED
}

/// Writes a dry run's answer.
pub(crate) fn would_admit_out(
    w: WouldAdmit,
    detail: *mut hg_rejection,
    out: *mut hg_would_admit,
) -> hg_status {
    use hg_would_admit_decision::*;
    // An `out` that cannot be written is refused before the detail is: an error writes nothing.
    // SAFETY: `out` is NULL or a writable `hg_would_admit` with its `struct_size` set (contract).
    try_val!(unsafe { sized::writable(out) });
    let (decision, status, position, ahead) = match w {
        WouldAdmit::AdmitNow => (HG_WOULD_ADMIT_NOW, hg_status::HG_STATUS_OK, 0, 0),
        WouldAdmit::WouldQueue { position, ahead } => {
            (HG_WOULD_QUEUE, hg_status::HG_STATUS_QUEUED, position, ahead)
        }
        WouldAdmit::Reject(e) => (HG_WOULD_REJECT, refused(&e, detail), 0, 0),
    };
    let v = hg_would_admit {
        struct_size: 0,
        decision: decision as u32,
        status: status as u32,
        position,
        ahead,
    };
    // SAFETY: `out` is a writable `hg_would_admit` with its `struct_size` set (contract).
    unsafe { sized::write(out, &v) }
}

// ----- bulkhead functions ----------------------------------------------------------------------

/// # Safety
/// `bh` is NULL or a live `hg_bulkhead*`.
unsafe fn core_of<'a>(bh: *const hg_bulkhead) -> Result<&'a Arc<CoreBulkhead>, hg_status> {
    if bh.is_null() {
        return Err(hg_status::HG_STATUS_NULL_PARAMETER);
    }
    // SAFETY: per the contract.
    Ok(&unsafe { bulkhead_ref(bh) }.core)
}

/// Fills `*request` with the defaults (weight 1, cost 0, class 0, `HG_OBSERVE_OFF`,
/// `HG_TIMEOUT_DEFAULT`, no detail, no deadline) and its `struct_size`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread.
///
/// C callers reach it through the header's macro of the same name, which calls
/// `hg_request_default_sized(p, sizeof *p)`: a binary built against an older, smaller header is never
/// written past its struct. This function writes this library's whole struct.
#[unsafe(no_mangle)]
pub extern "C" fn hg_request_default(request: *mut hg_request) -> hg_status {
    hg_request_default_sized(request, size_of::<hg_request>())
}

/// [`hg_request_default`] for a caller's `hg_request` of `size` bytes (what the header's `hg_request_default(p)` macro
/// calls, with `sizeof *p`): writes the first `min(size, sizeof(hg_request))` bytes of the
/// defaults and sets `struct_size` to that many, so a caller built against an older, smaller
/// header is never written past its struct, and one built against a newer header learns which
/// fields this library filled (the rest it must fill itself, or zero).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT` for a
/// `size` below the first header's (up to `timeout_ms`) (nothing written).
/// Thread-safety: any thread; touches only the `size` bytes at the pointer.
#[unsafe(no_mangle)]
pub extern "C" fn hg_request_default_sized(request: *mut hg_request, size: usize) -> hg_status {
    const DEFAULT: hg_request = hg_request {
        struct_size: size_of::<hg_request>() as u32,
        weight: 1,
        cost: 0,
        class_index: 0,
        observe: 0,
        timeout_ms: crate::config::HG_TIMEOUT_DEFAULT,
        detail: std::ptr::null_mut(),
        deadline_ns: HG_DEADLINE_NONE,
        has_deadline: 0,
        reserved: 0,
    };
    boundary(|| {
        // SAFETY: NULL or `size` writable bytes (contract).
        unsafe { sized::fill(request, size, REQUEST_MIN, &DEFAULT) }
    })
}

/// Admits `request` now or refuses it, without waiting (its `timeout_ms` is not read): the
/// core's admission — weight, class, cost, breaker, rates, budget, the queue's order.
///
/// Parameters:
///   request: from `hg_request_default()`, then edited. out: receives the permit on
///   `HG_STATUS_OK`.
///
/// Returns: `HG_STATUS_OK` with `*out`; a rejection status (`HG_STATUS_CONCURRENCY_LIMIT`,
///   `HG_STATUS_BUDGET_LIMIT`, `HG_STATUS_RATE_LIMIT`, `HG_STATUS_CIRCUIT_OPEN`,
///   `HG_STATUS_SHUTDOWN`, …; `request->detail` filled); `HG_STATUS_INVALID_ARGUMENT` (a
///   weight of 0 or above `max_concurrent`, a cost without a budget or above it, an unknown
///   class, a bad `struct_size`); `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes: the caller owns `*out`. Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_try_acquire_request(
    bh: *const hg_bulkhead,
    request: *const hg_request,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        // SAFETY: contract.
        let r = try_val!(unsafe { read_request(request) });
        let out = try_mut!(out);
        let d = core.admit_owned(&r.request.no_wait(), None);
        let status = match decided(d, r.detail, out) {
            Err(s) => s,
            Ok(_) => unreachable!("a no-wait request never queues"),
        };
        // SAFETY: `bh` is live (contract); on OK `*out` is the new permit.
        unsafe { pin_on(bh, status, out) }
    })
}

/// Waits on this thread for `request` (its `timeout_ms`: `HG_TIMEOUT_DEFAULT` the configured
/// one, `HG_TIMEOUT_INFINITE` none, 0 do not queue). A waiter held back by a rate is granted
/// when it conforms (this thread keeps the rate's time).
///
/// Returns: as `hg_bulkhead_try_acquire_request()`, plus `HG_STATUS_TIMEOUT`,
///   `HG_STATUS_QUEUE_LIMIT`, `HG_STATUS_SHED` (a settlement after the wait has no detail).
/// Thread-safety: any thread; blocks the calling thread (never call it from a callback).
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_acquire_request(
    bh: *const hg_bulkhead,
    request: *const hg_request,
    out: *mut *mut hg_permit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        // SAFETY: contract.
        let r = try_val!(unsafe { read_request(request) });
        let out = try_mut!(out);
        let status = match decided(core.admit_owned(&r.request, None), r.detail, out) {
            Ok(waiter) => wait_blocking(waiter, out),
            Err(status) => status,
        };
        // SAFETY: `bh` is live (contract); on OK `*out` is the new permit.
        unsafe { pin_on(bh, status, out) }
    })
}

/// `request` without blocking: a permit now, or a queued ticket whose callback runs exactly
/// once — as `hg_bulkhead_acquire_async()` (same callback contract, same cancel functions;
/// the deadline is armed on the library's timer thread).
///
/// A waiter held back by a class table's rate is granted when a release, a reconfiguration or
/// the host's `hg_bulkhead_rate_tick()` finds it conforming: a host with rates arms a timer for
/// `hg_bulkhead_rate_retry_after_ns()` (the library arms none for rates).
///
/// Returns: as `hg_bulkhead_acquire_async()`, plus the refusals of
///   `hg_bulkhead_try_acquire_request()` (with detail).
/// Thread-safety: any thread; never blocks.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_acquire_async_request(
    bh: *const hg_bulkhead,
    request: *const hg_request,
    callback: hg_acquire_callback,
    user_data: *mut c_void,
    out: *mut *mut hg_permit,
    ticket: *mut hg_ticket,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        // SAFETY: contract.
        let r = try_val!(unsafe { read_request(request) });
        let Some(f) = callback else {
            return hg_status::HG_STATUS_NULL_PARAMETER;
        };
        let out = try_mut!(out);
        let ticket = try_mut!(ticket);
        let d = core.admit_owned(&r.request, None);
        acquire_async(d, r.detail, Callback { f, user_data }, out, ticket, None)
    })
}

/// The polling API with a request (as `hg_bulkhead_enqueue()`): a permit now, or a ticket to
/// poll with `hg_ticket_poll()` — no callback, no thread, no timer. The library arms no
/// deadline: the caller owns the ticket's timing and enforces `timeout_ms` itself with
/// `hg_ticket_cancel_reason(…, HG_REASON_TIMEOUT)`. The admission still reads `timeout_ms`:
/// 0 does not queue, and a request held back by a rate whose conforming time lies past the
/// deadline is refused `HG_STATUS_RATE_LIMIT` at once. A host with rates calls
/// `hg_bulkhead_rate_tick()` when `hg_bulkhead_rate_retry_after_ns()` comes due.
///
/// Returns: as `hg_bulkhead_enqueue()`, plus the refusals of
///   `hg_bulkhead_try_acquire_request()` (with detail).
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_enqueue_request(
    bh: *const hg_bulkhead,
    request: *const hg_request,
    out: *mut *mut hg_permit,
    ticket: *mut hg_ticket,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        // SAFETY: contract.
        let r = try_val!(unsafe { read_request(request) });
        let out = try_mut!(out);
        let ticket = try_mut!(ticket);
        let d = core.admit_owned(&r.request, None);
        enqueue(d, r.detail, out, ticket, None)
    })
}

/// The dry run (docs/design.md §5.6): what an acquire of `request` would decide now, by the
/// same check order, without counting, queueing or granting anything.
///
/// Parameters:
///   request: as for an acquire (its `detail`, if set, is filled for a predicted refusal).
///   out: receives the prediction (set its `struct_size` first).
///
/// Returns: `HG_STATUS_OK` with `*out` (the prediction's own status is in `out->status`);
///   `HG_STATUS_INVALID_ARGUMENT` for a bad `struct_size`, class index or observe number;
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits; changes nothing.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_would_admit(
    bh: *const hg_bulkhead,
    request: *const hg_request,
    out: *mut hg_would_admit,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        // SAFETY: contract.
        let r = try_val!(unsafe { read_request(request) });
        non_null!(out);
        would_admit_out(core.would_admit(&r.request), r.detail, out)
    })
}

/// How long `request`, queued now, may wait (docs/design.md §5.9): its `timeout_ms` (or the
/// configured `queue_timeout_ms`) capped by the time left until its deadline less the
/// bulkhead's `min_service_time_ms`. What a host of the polling API
/// (`hg_bulkhead_enqueue_request()`) arms for the ticket; the async and blocking APIs arm it
/// themselves.
///
/// Parameters: out_ms: receives the wait in ms, rounded up (`HG_TIMEOUT_INFINITE`: no bound; 0:
/// it would not queue).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (a bad request); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_queue_wait_ms(
    bh: *const hg_bulkhead,
    request: *const hg_request,
    out_ms: *mut u64,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        // SAFETY: contract.
        let r = try_val!(unsafe { read_request(request) });
        let out = try_mut!(out_ms);
        let d = core.queue_wait(&r.request);
        *out = if d == Duration::MAX {
            HG_TIMEOUT_INFINITE
        } else {
            // Rounded up: a wait under a millisecond is not "0, would not queue".
            u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(HG_TIMEOUT_INFINITE - 2)
        };
        hg_status::HG_STATUS_OK
    })
}

/// Waits on this thread for a queued waiter until its queue timeout (the blocking acquires).
pub(crate) fn wait_blocking(
    waiter: hullguard_core::Waiter<Arc<CoreBulkhead>, 0>,
    out: &mut *mut hg_permit,
) -> hg_status {
    let t = waiter.queue_timeout();
    let deadline = (t != Duration::MAX)
        .then(|| Instant::now().checked_add(t))
        .flatten();
    grant(waiter.wait_blocking(deadline), out)
}

/// A rate given in C, as the core's (`amount` 0: none).
fn rate(r: &hg_rate) -> Option<Rate> {
    (r.amount != 0).then(|| Rate {
        amount: r.amount,
        per: Duration::from_millis(r.per_ms),
        burst: r.burst,
    })
}

/// A priority in C (`0 .. 255`).
fn priority(p: u32) -> Result<u8, hg_status> {
    u8::try_from(p).map_err(|_| hg_status::HG_STATUS_INVALID_ARGUMENT)
}

/// An `HG_UNSET`-able field.
fn unset(v: u64) -> Option<u64> {
    (v != HG_UNSET).then_some(v)
}

/// Fills `*limits` with "change nothing" (`revision` 0, every field `HG_UNSET`, no reserve,
/// no rates, no `current_revision`) and its `struct_size`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread.
///
/// C callers reach it through the header's macro of the same name, which calls
/// `hg_limits_default_sized(p, sizeof *p)`: a binary built against an older, smaller header is never
/// written past its struct. This function writes this library's whole struct.
#[unsafe(no_mangle)]
pub extern "C" fn hg_limits_default(limits: *mut hg_limits) -> hg_status {
    hg_limits_default_sized(limits, size_of::<hg_limits>())
}

/// [`hg_limits_default`] for a caller's `hg_limits` of `size` bytes (what the header's `hg_limits_default(p)` macro
/// calls, with `sizeof *p`): writes the first `min(size, sizeof(hg_limits))` bytes of the
/// defaults and sets `struct_size` to that many, so a caller built against an older, smaller
/// header is never written past its struct, and one built against a newer header learns which
/// fields this library filled (the rest it must fill itself, or zero).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT` for a
/// `size` below the first header's (up to `units`) (nothing written).
/// Thread-safety: any thread; touches only the `size` bytes at the pointer.
#[unsafe(no_mangle)]
pub extern "C" fn hg_limits_default_sized(limits: *mut hg_limits, size: usize) -> hg_status {
    let default = hg_limits {
        struct_size: size_of::<hg_limits>() as u32,
        revision: 0,
        limit: HG_UNSET,
        budget: HG_UNSET,
        max_queue: HG_UNSET,
        queue_timeout_ms: HG_UNSET,
        has_reserve: 0,
        has_rates: 0,
        reserve_min_priority: 0,
        reserve_permits: 0,
        reserve_budget: 0,
        requests: hg_rate::default(),
        units: hg_rate::default(),
        current_revision: std::ptr::null_mut(),
        classes: std::ptr::null(),
        classes_len: 0,
        has_queue_delay: 0,
        reserved: 0,
        queue_delay_target_ms: 0,
        queue_delay_interval_ms: 0,
        adaptive_lifo: 0,
        reserved2: 0,
    };
    boundary(|| {
        // SAFETY: NULL or `size` writable bytes (contract).
        unsafe { sized::fill(limits, size, LIMITS_MIN, &default) }
    })
}

/// Installs revisioned limits (docs/design.md §4.6): validated whole, then installed at once,
/// only if `limits->revision` is above the revision in force (a delayed update never undoes a
/// newer one). A limit of 0 is the kill switch (reversible, unlike close). Growth grants queued
/// waiters in this call (their callbacks run on this thread); a shrink never revokes (holders
/// keep their permits) but rejects queued waiters that can no longer fit.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_STALE` (nothing changed; `*limits->current_revision`
///   receives the revision in force); `HG_STATUS_INVALID_ARGUMENT` (a value out of range, a
///   budget on a bulkhead without one, a reserve or rates on one without classes, a partition
///   that no longer fits the floors, a bad `struct_size`, a fleet bulkhead's handle — its limit
///   is the lease's, set with `hg_fleet_bulkhead_apply_limits()`: nothing changed);
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_apply_limits(
    bh: *const hg_bulkhead,
    limits: *const hg_limits,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        // SAFETY: contract.
        let l = try_val!(unsafe { read_limits(limits) });
        let mut snap = LimitsSnapshot::new(l.revision);
        snap.limit = unset(l.limit);
        snap.budget = unset(l.budget);
        snap.max_queue = unset(l.max_queue);
        snap.queue_timeout = crate::config::wait_timeout(l.queue_timeout_ms);
        snap.queue_delay = try_val!(queue_delay_of(&l));
        let reserve = if l.has_reserve != 0 {
            Some(PriorityReserve {
                permits: l.reserve_permits,
                budget: l.reserve_budget,
                min_priority: try_val!(priority(l.reserve_min_priority)),
            })
        } else {
            None
        };
        let rates = (l.has_rates != 0).then(|| Rates {
            requests: rate(&l.requests),
            units: rate(&l.units),
        });
        // SAFETY: the array per the contract of `hg_limits`.
        let classes = try_val!(unsafe { class_limits(&l) });
        let table = ClassTableLimits {
            classes: &classes,
            reserve,
            rates,
        };
        match core.apply_limits_with_table(&snap, &table) {
            Ok(()) => hg_status::HG_STATUS_OK,
            Err(LimitsError::Stale { current }) => {
                if !l.current_revision.is_null() {
                    // SAFETY: a non-NULL `current_revision` is writable (its contract).
                    unsafe { l.current_revision.write_unaligned(current) };
                }
                hg_status::HG_STATUS_STALE
            }
            Err(_) => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    })
}

/// Sets the budget in force, `0 .. the configured budget` (0: the budget's kill switch): growth
/// grants waiters (callbacks on this thread), a shrink is by attrition (holders keep their
/// units) and rejects queued waiters that can no longer fit.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (out of range, no budget, or a fleet
///   bulkhead's handle — its budget is the lease's, set with
///   `hg_fleet_bulkhead_apply_limits_of()`: nothing changed); `HG_STATUS_NULL_PARAMETER`.
///   Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_set_budget(bh: *const hg_bulkhead, budget: u64) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        ok_or(
            core.set_budget(budget),
            hg_status::HG_STATUS_INVALID_ARGUMENT,
        )
    })
}

/// Switches observe (shadow) mode, an `hg_observe` (docs/design.md §4.7): an observed dimension
/// is decided and counted (`hg_stats.observed`) but lets the call through; switching back to
/// enforcing refuses newcomers and preempts nobody; switching to observing grants the waiters
/// of that dimension (callbacks on this thread).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (an unknown number,
///   `HG_OBSERVE_BUDGET` without a budget, or a fleet bulkhead's handle: a lease is always
///   enforced); `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_set_observe(bh: *const hg_bulkhead, observe: u32) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        let Some(o) = observe_of(observe) else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        ok_or(core.set_observe(o), hg_status::HG_STATUS_INVALID_ARGUMENT)
    })
}

/// Fills `*class` with the defaults (priority 0, no floors, no ceilings: `HG_UNSET`, observe
/// off) and its `struct_size`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread.
///
/// C callers reach it through the header's macro of the same name, which calls
/// `hg_class_default_sized(p, sizeof *p)`: a binary built against an older, smaller header is never
/// written past its struct. This function writes this library's whole struct.
#[unsafe(no_mangle)]
pub extern "C" fn hg_class_default(class: *mut hg_class) -> hg_status {
    hg_class_default_sized(class, size_of::<hg_class>())
}

/// [`hg_class_default`] for a caller's `hg_class` of `size` bytes (what the header's `hg_class_default(p)` macro
/// calls, with `sizeof *p`): writes the first `min(size, sizeof(hg_class))` bytes of the
/// defaults and sets `struct_size` to that many, so a caller built against an older, smaller
/// header is never written past its struct, and one built against a newer header learns which
/// fields this library filled (the rest it must fill itself, or zero).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT` for a
/// `size` below `sizeof(hg_class)` (its first version) (nothing written).
/// Thread-safety: any thread; touches only the `size` bytes at the pointer.
#[unsafe(no_mangle)]
pub extern "C" fn hg_class_default_sized(class: *mut hg_class, size: usize) -> hg_status {
    const DEFAULT: hg_class = hg_class {
        struct_size: size_of::<hg_class>() as u32,
        priority: 0,
        floor: 0,
        ceiling: HG_UNSET,
        budget_floor: 0,
        budget_ceiling: HG_UNSET,
        observe: 0,
        reserved: 0,
    };
    boundary(|| {
        // SAFETY: NULL or `size` writable bytes (contract).
        unsafe { sized::fill(class, size, size_of::<hg_class>(), &DEFAULT) }
    })
}

/// Reads a caller's array of `len` size-versioned `T`s (the stride is the first element's
/// `struct_size`; every element must declare the same).
///
/// # Safety
/// `p` is NULL (only with `len` 0) or points to `len` elements of the caller's `T`.
pub(crate) unsafe fn read_array<T: Plain>(
    p: *const T,
    len: usize,
    min: usize,
) -> Result<Vec<T>, hg_status> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(hg_status::HG_STATUS_NULL_PARAMETER);
    }
    // SAFETY: the first element's `struct_size` is readable (contract).
    let stride = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    if stride < min {
        return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
    }
    // Never an allocation of the caller's count: the loop stops at the first element that is
    // not one (a count far past the array is refused there, not by the allocator's abort).
    let mut out = Vec::with_capacity(len.min(MAX_CLASSES));
    for i in 0..len {
        // SAFETY: element `i` lies `i * stride` bytes in (the array's stride).
        let e = unsafe { p.cast::<u8>().add(i * stride) }.cast::<T>();
        // SAFETY: a readable `T` of its declared size (contract).
        let declared = unsafe { e.cast::<u32>().read_unaligned() } as usize;
        if declared != stride {
            return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
        }
        // SAFETY: as above.
        out.push(unsafe { sized::read(e, min) }?);
    }
    Ok(out)
}

/// The class ceilings of an `hg_limits`, as the core's.
///
/// # Safety
/// `l.classes` per the contract of `hg_limits`.
unsafe fn class_limits(l: &hg_limits) -> Result<Vec<ClassLimits>, hg_status> {
    // SAFETY: per the contract.
    let raw = unsafe { read_array(l.classes, l.classes_len, size_of::<hg_class_limits>()) }?;
    raw.iter()
        .map(|c| {
            Ok(ClassLimits {
                class: u16::try_from(c.class_index)
                    .map_err(|_| hg_status::HG_STATUS_INVALID_ARGUMENT)?,
                ceiling: unset(c.ceiling),
                budget_ceiling: unset(c.budget_ceiling),
            })
        })
        .collect()
}

/// The classes of a table as the core's (an array of size-versioned `hg_class`es).
///
/// # Safety
/// `t.classes` points to `t.classes_len` elements of the caller's `hg_class`.
unsafe fn class_specs(t: &hg_class_table) -> Result<Vec<ClassSpec>, hg_status> {
    if t.classes_len == 0 || t.classes_len > MAX_CLASSES {
        return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
    }
    // SAFETY: per the contract.
    let raw = unsafe { read_array(t.classes, t.classes_len, size_of::<hg_class>()) }?;
    raw.iter()
        .map(|c| {
            if c.reserved != 0 {
                return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
            }
            Ok(ClassSpec {
                priority: priority(c.priority)?,
                floor: c.floor,
                ceiling: unset(c.ceiling),
                budget_floor: c.budget_floor,
                budget_ceiling: unset(c.budget_ceiling),
                observe: observe_of(c.observe).ok_or(hg_status::HG_STATUS_INVALID_ARGUMENT)?,
            })
        })
        .collect()
}

/// A caller's `hg_class_table` as the core's, owning its classes (`table()` lends the core's
/// `ClassTable`): the one conversion of a class table, for `hg_bulkhead_new_with_classes()`
/// and the fleet bulkhead's `hg_fleet_options_set_classes()` (which keeps it until the open).
#[derive(Debug, Clone)]
pub(crate) struct OwnedClassTable {
    specs: Vec<ClassSpec>,
    reserve: PriorityReserve,
    lending: bool,
    shed: bool,
    pub(crate) rates: Rates,
}

impl OwnedClassTable {
    /// Converts `t` (its classes, then the reserve's priority; every other check is the
    /// core's, when the table is used).
    ///
    /// # Safety
    /// `t.classes` points to `t.classes_len` elements of the caller's `hg_class`.
    pub(crate) unsafe fn of(t: &hg_class_table) -> Result<Self, hg_status> {
        // SAFETY: per the contract.
        let specs = unsafe { class_specs(t) }?;
        Ok(OwnedClassTable {
            reserve: PriorityReserve {
                permits: t.reserve_permits,
                budget: t.reserve_budget,
                min_priority: priority(t.reserve_min_priority)?,
            },
            lending: t.lending != 0,
            shed: t.shed != 0,
            rates: Rates {
                requests: rate(&t.requests),
                units: rate(&t.units),
            },
            specs,
        })
    }

    /// The core's table.
    pub(crate) fn table(&self) -> ClassTable<'_> {
        ClassTable {
            reserve: self.reserve,
            lending: self.lending,
            shed: self.shed,
            rates: self.rates,
            ..ClassTable::new(&self.specs)
        }
    }
}

/// Creates a classed bulkhead (docs/design.md §4.8, §4.9): `config` as for `hg_bulkhead_new()`,
/// and a class table — its classes (a request names one by `class_index`), the priority
/// reserve, the rates, lending and shedding. The core validates the partition (the floors and
/// the reserve fit the limit and the budget, ceilings fit, rates need what they charge).
///
/// Parameters:
///   config, table: required (their `struct_size` set). now_ns: NULL for the system's
///   monotonic clock, or a host clock as for `hg_bulkhead_new_with_clock()` (with
///   `user_data`). out: receives the bulkhead.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (a bad config or class table: 0 or
///   more than 64 classes, a priority above 255, a floor or reserve that does not fit, a bad
///   `struct_size` or array stride); `HG_STATUS_OUT_OF_MEMORY`; `HG_STATUS_NULL_PARAMETER`.
///
/// Memory and lifetimes, thread-safety: as `hg_bulkhead_new()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_new_with_classes(
    config: *const hg_config,
    table: *const hg_class_table,
    now_ns: hg_now_ns_fn,
    user_data: *mut c_void,
    out: *mut *mut hg_bulkhead,
) -> hg_status {
    boundary(|| {
        non_null!(config);
        // SAFETY: contract.
        let t = try_val!(unsafe { sized::read(table, size_of::<hg_class_table>()) });
        let out = try_mut!(out);
        // SAFETY: `config` is non-null and points to an `hg_config` (contract).
        let Ok((config, c)) = unsafe { read_config(config) }.and_then(|c| Ok((c.config()?, c)))
        else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: the table's classes per its contract.
        let table = try_val!(unsafe { OwnedClassTable::of(&t) });
        let clock = match now_ns {
            Some(f) => c_clock(f, user_data),
            None => ClockSource::default_for_host(),
        };
        match CoreBulkhead::with_classes_and_observer(
            config,
            &table.table(),
            clock,
            c.observer.shared(),
        ) {
            Ok(core) => {
                *out = bulkhead_into_raw(BulkheadHandle {
                    core: Arc::new(core),
                    owned: true,
                });
                hg_status::HG_STATUS_OK
            }
            Err(ConfigError::MaxQueue) => hg_status::HG_STATUS_OUT_OF_MEMORY,
            Err(_) => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    })
}

/// A core class's counts as C's.
pub(crate) fn class_stats_of(c: &ClassStats, shared: [u64; 2]) -> hg_class_stats {
    hg_class_stats {
        struct_size: 0,
        class_index: c.class.into(),
        priority: c.priority.into(),
        observe: observe_number(c.observe),
        floor: c.floor,
        ceiling: c.ceiling,
        in_flight: c.in_flight,
        budget_floor: c.budget_floor,
        budget_ceiling: c.budget_ceiling,
        budget_in_use: c.budget_in_use,
        queued: c.queued,
        observed: c.observed,
        shared_permits_in_use: shared[0],
        shared_budget_in_use: shared[1],
    }
}

/// Class `class_index`'s floors, ceilings, holds and waiters now.
///
/// Returns: `HG_STATUS_OK` with `*out` (set its `struct_size` first);
///   `HG_STATUS_INVALID_ARGUMENT` for a class the bulkhead does not have (or a bulkhead without
///   classes); `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_class_stats(
    bh: *const hg_bulkhead,
    class_index: u32,
    out: *mut hg_class_stats,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        non_null!(out);
        let Some(c) = u16::try_from(class_index)
            .ok()
            .and_then(|k| core.class_stats(k))
        else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        let shared = core.class_shared_in_use().unwrap_or([0, 0]);
        // SAFETY: writable with its `struct_size` set (contract).
        unsafe { sized::write(out, &class_stats_of(&c, shared)) }
    })
}

/// How long, in ns of the bulkhead's clock, until the earliest waiter held back by a rate
/// conforms (0: due now); `HG_TIMEOUT_INFINITE` when none is (no rates, no such waiter, or
/// NULL). A host with rates arms a timer for it, then calls `hg_bulkhead_rate_tick()`.
///
/// Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_rate_retry_after_ns(bh: *const hg_bulkhead) -> u64 {
    boundary(|| {
        // SAFETY: NULL or a live handle (contract).
        let Ok(core) = (unsafe { core_of(bh) }) else {
            return HG_TIMEOUT_INFINITE;
        };
        core.rate_retry_after().map_or(HG_TIMEOUT_INFINITE, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(HG_TIMEOUT_INFINITE - 2)
        })
    })
}

/// The host's rate timer fired: grants the waiters that conform now (their callbacks run on
/// this thread). A no-op without classes.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_rate_tick(bh: *const hg_bulkhead) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        try_val!(unsafe { core_of(bh) }).rate_tick();
        hg_status::HG_STATUS_OK
    })
}

// ----- permits ---------------------------------------------------------------------------------

/// The call a non-NULL permit still holds.
///
/// # Safety
/// `p` is NULL or a live permit not used elsewhere during the call.
unsafe fn held<'a>(p: *mut hg_permit) -> Result<&'a mut hullguard_core::OwnedPermit, hg_status> {
    if p.is_null() {
        return Err(hg_status::HG_STATUS_NULL_PARAMETER);
    }
    // SAFETY: per the contract.
    let b: &mut PermitBox = unsafe { permit_mut(p) };
    b.call.as_mut().ok_or(hg_status::HG_STATUS_ALREADY_RELEASED)
}

/// `hg_permit_release_outcome()` reporting that the call `used` budget units in all (at least
/// its last `hg_permit_report_usage()`): the unused rest of its hold is refunded
/// (`budget_refunded_total`), use beyond it counted as overrun (docs/design.md §4.5). On a
/// bulkhead without a budget `used` is only recorded.
///
/// Returns: as `hg_permit_release_outcome()`. Thread-safety: as `hg_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_release_usage(
    permit: *mut hg_permit,
    outcome: u32,
    used: u64,
) -> hg_status {
    boundary(|| {
        let Some(outcome) = u8::try_from(outcome).ok().and_then(Outcome::from_code) else {
            return hg_status::HG_STATUS_INVALID_ARGUMENT;
        };
        non_null!(permit);
        // SAFETY: a live permit (contract).
        let p = unsafe { permit_mut(permit) };
        crate::permit::release_with(p, |call| {
            let bh = call.handle().clone();
            call.end_with_usage(outcome, used);
            bh
        })
    })
}

/// Reports a streaming call's cumulative usage: `used` units so far and at most `remaining`
/// more expected, so its budget hold becomes `used + remaining` (docs/design.md §4.5). A
/// shrink returns units at once (waking whoever fits); a growth goes through admission (never
/// past a queued waiter) and what does not fit is held past the budget as overrun (on a
/// bulkhead with `cancel_on_overrun` the host is asked to cancel).
///
/// Parameters: out: NULL, or receives what changed (set its `struct_size` first).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_USAGE_DECREASED` (`used` below the last report);
///   `HG_STATUS_INVALID_ARGUMENT` (`used + remaining` above `HG_MAX_BUDGET`, or an `out` whose
///   `struct_size` is below 4);
///   `HG_STATUS_ALREADY_RELEASED` (released, or every permit returned); nothing changes on an
///   error. `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: as `hg_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_report_usage(
    permit: *mut hg_permit,
    used: u64,
    remaining: u64,
    out: *mut hg_usage_report,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let call = try_val!(unsafe { held(permit) });
        if !out.is_null() {
            // An `out` that cannot be written is refused before the report: nothing changes on
            // an error.
            // SAFETY: writable with its `struct_size` set (contract).
            try_val!(unsafe { sized::writable(out) });
        }
        let r = match call.report_usage(used, remaining) {
            Ok(r) => r,
            Err(UsageError::Decreased { .. }) => return hg_status::HG_STATUS_USAGE_DECREASED,
            Err(UsageError::TooLarge { .. }) => return hg_status::HG_STATUS_INVALID_ARGUMENT,
            Err(UsageError::Released) => return hg_status::HG_STATUS_ALREADY_RELEASED,
        };
        if out.is_null() {
            return hg_status::HG_STATUS_OK;
        }
        let (change, by) = match r.change {
            HoldChange::Unchanged => (hg_hold_change::HG_HOLD_UNCHANGED, 0),
            HoldChange::Shrank(n) => (hg_hold_change::HG_HOLD_SHRANK, n),
            HoldChange::Grew(n) => (hg_hold_change::HG_HOLD_GREW, n),
            HoldChange::Overran(n) => (hg_hold_change::HG_HOLD_OVERRAN, n),
        };
        let v = hg_usage_report {
            struct_size: 0,
            change: change as u32,
            cancel: r.cancel,
            used: r.used,
            held: r.held,
            overrun: r.overrun,
            by,
        };
        // SAFETY: writable with its `struct_size` set (contract).
        unsafe { sized::write(out, &v) }
    })
}

/// Whether a usage report asked the host to cancel this call's work (sticky); false for a
/// released permit or NULL. Thread-safety: as `hg_permit_release()`; only reads.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_cancel_requested(permit: *const hg_permit) -> bool {
    boundary(|| {
        // SAFETY: NULL or a live permit (contract); only read.
        let p = unsafe { permit.cast::<PermitBox>().as_ref() };
        p.and_then(|p| p.call.as_ref())
            .is_some_and(|c| c.cancel_requested())
    })
}

/// Returns `n` of the held budget units now (`1 .. held`; the part held past the budget goes
/// first), waking whoever fits; counted in `budget_refunded_total`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT` (`n` 0 or above the units held:
///   nothing changes); `HG_STATUS_ALREADY_RELEASED`; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: as `hg_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_refund(permit: *mut hg_permit, n: u64) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let call = try_val!(unsafe { held(permit) });
        ok_or(call.refund(n), hg_status::HG_STATUS_INVALID_ARGUMENT)
    })
}

/// Hands the call's permits back now while its work goes on (docs/design.md §5.3: a call past
/// its deadline whose upstream request cannot be recalled): they return at once (waking
/// waiters) and count in `hg_stats.orphaned_in_flight` until the permit is released; its budget
/// units, usage reports and outcome stay with it. Bounded by the bulkhead's `max_orphaned`.
///
/// Returns: `HG_STATUS_OK` when orphaned now; `HG_STATUS_ALREADY_SETTLED` when there is nothing
///   to orphan (orphaned already, or no permits left); `HG_STATUS_ORPHAN_LIMIT` (past
///   `max_orphaned`, 0 by default: nothing changes); `HG_STATUS_ALREADY_RELEASED`;
///   `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: as `hg_permit_release()`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_permit_orphan(permit: *mut hg_permit) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let call = try_val!(unsafe { held(permit) });
        match call.orphan() {
            Ok(true) => hg_status::HG_STATUS_OK,
            Ok(false) => hg_status::HG_STATUS_ALREADY_SETTLED,
            Err(_) => hg_status::HG_STATUS_ORPHAN_LIMIT,
        }
    })
}

/// An `hg_limits`'s queue-delay options, if it sets them (a bad value, a set reserved field:
/// `HG_STATUS_INVALID_ARGUMENT`; ranges and the rule that LIFO needs a target are the core's).
fn queue_delay_of(l: &hg_limits) -> Result<Option<hullguard_core::QueueDelay>, hg_status> {
    if l.reserved != 0 || l.reserved2 != 0 || l.adaptive_lifo > 1 {
        return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
    }
    if l.has_queue_delay == 0 {
        return Ok(None);
    }
    let ms = |id: hullguard_core::config::OptionId, v: u64| -> Result<Duration, hg_status> {
        let d = hullguard_core::config::convert::duration_from_millis(v as f64, id.spec().kind);
        d.map_err(|_| hg_status::HG_STATUS_INVALID_ARGUMENT)
    };
    use hullguard_core::config::OptionId as O;
    let default = hullguard_core::Config::DEFAULT.queue_delay();
    Ok(Some(hullguard_core::QueueDelay {
        target: ms(O::QueueDelayTarget, l.queue_delay_target_ms)?,
        interval: match l.queue_delay_interval_ms {
            0 => default.interval,
            v => ms(O::QueueDelayInterval, v)?,
        },
        lifo: l.adaptive_lifo == 1,
    }))
}

/// An `hg_limits` as a registry key's limits (docs/design.md §9): the class-table parts
/// (reserve, rates, class ceilings) are refused, a registry key has no class table.
///
/// # Safety
/// `p` is NULL or a readable `hg_limits` of its declared size.
pub(crate) unsafe fn key_limits(
    p: *const hg_limits,
) -> Result<(u64, hullguard_core::KeyLimits), hg_status> {
    // SAFETY: per the contract.
    let l = unsafe { read_limits(p) }?;
    if l.has_reserve != 0 || l.has_rates != 0 || l.classes_len != 0 || l.has_queue_delay != 0 {
        return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
    }
    let k = hullguard_core::KeyLimits {
        limit: unset(l.limit),
        budget: unset(l.budget),
        max_queue: unset(l.max_queue),
        queue_timeout: crate::config::wait_timeout(l.queue_timeout_ms),
    };
    Ok((l.revision, k))
}

/// Where an `hg_limits` wants the revision in force on a stale refusal (NULL if nowhere).
///
/// # Safety
/// As [`key_limits`].
pub(crate) unsafe fn current_revision_of(p: *const hg_limits) -> *mut u64 {
    // SAFETY: per the contract.
    unsafe { read_limits(p) }.map_or(std::ptr::null_mut(), |l| l.current_revision)
}

/// Records an overload signal's reading (docs/design.md §4.11): while a reading is above its
/// threshold (`hg_config.shed_lag_threshold_ms`, `shed_cpu_threshold`), requests of classes
/// below `critical_priority` are refused `HG_STATUS_SHED` at once (bound `HG_BOUND_OVERLOAD`).
/// The host measures — its event loop's lag, its CPU time over wall time — and reports as often
/// as it likes; the last reading of each signal stands.
///
/// Parameters:
///   event_loop_lag_ms: the loop's lag in ms (NaN or negative: leave the lag as it is).
///   cpu: the process's CPU use in cores, 1.0 = one core busy (NaN or negative: leave it).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`. Thread-safety: any thread; never waits.
#[unsafe(no_mangle)]
pub extern "C" fn hg_bulkhead_report_load(
    bh: *const hg_bulkhead,
    event_loop_lag_ms: f64,
    cpu: f64,
) -> hg_status {
    boundary(|| {
        // SAFETY: contract of this function.
        let core = try_val!(unsafe { core_of(bh) });
        if event_loop_lag_ms >= 0.0 {
            let lag = Duration::try_from_secs_f64(event_loop_lag_ms / 1e3).unwrap_or(Duration::MAX);
            core.report_load(hullguard_core::LoadSignal::EventLoopLag(lag));
        }
        if cpu >= 0.0 {
            core.report_load(hullguard_core::LoadSignal::Cpu(cpu));
        }
        hg_status::HG_STATUS_OK
    })
}
