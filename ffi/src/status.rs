//! Status codes, reasons and outcomes. Their numbers are ABI (DESIGN §5 C): never renumber or
//! reuse one.

use std::ffi::c_char;

use hullguard_core::Reason;

/// The result of every fallible `hg_*` call.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_status {
    /// Success (a permit was granted, or the operation was done).
    HG_STATUS_OK = 0,
    /// `hg_bulkhead_acquire_async` queued the acquire; its callback will run exactly once.
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
}

impl From<Reason> for hg_status {
    fn from(r: Reason) -> Self {
        match r {
            Reason::ConcurrencyLimit => hg_status::HG_STATUS_CONCURRENCY_LIMIT,
            Reason::QueueLimit => hg_status::HG_STATUS_QUEUE_LIMIT,
            Reason::KeyLimit => hg_status::HG_STATUS_KEY_LIMIT,
            Reason::Timeout => hg_status::HG_STATUS_TIMEOUT,
            Reason::Aborted => hg_status::HG_STATUS_ABORTED,
            Reason::Shutdown => hg_status::HG_STATUS_SHUTDOWN,
            Reason::CircuitOpen => hg_status::HG_STATUS_CIRCUIT_OPEN,
            Reason::CallTimeout => hg_status::HG_STATUS_CALL_TIMEOUT,
            _ => hg_status::HG_STATUS_INVALID_ARGUMENT,
        }
    }
}

impl From<&hullguard_core::AcquireError> for hg_status {
    fn from(e: &hullguard_core::AcquireError) -> Self {
        e.reason()
            .map_or(hg_status::HG_STATUS_INVALID_ARGUMENT, hg_status::from)
    }
}

/// Why an acquire was rejected: the index of `hg_stats.rejected` (8–15 reserved).
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
}

/// How a guarded call ended (DESIGN §4 "Outcomes").
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

/// A NUL-terminated static string.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<c_char>()
    };
}

/// A static, NUL-terminated English description of `status` ("unknown status" for numbers
/// this version does not define).
///
/// Memory and lifetimes: the string is static; never free it. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn hg_status_message(status: u32) -> *const c_char {
    match status {
        0 => cstr!("ok"),
        1 => cstr!("queued: the callback will run exactly once"),
        1000 => cstr!("a required pointer argument was NULL"),
        1001 => cstr!("internal error (a panic was caught)"),
        1002 => cstr!("invalid argument"),
        1003 => cstr!("the permit was already released"),
        1004 => cstr!("the ticket was already settled"),
        1005 => cstr!("out of memory"),
        2000 => cstr!("rejected: concurrency_limit"),
        2001 => cstr!("rejected: queue_limit"),
        2002 => cstr!("rejected: key_limit"),
        2003 => cstr!("rejected: timeout"),
        2004 => cstr!("rejected: aborted"),
        2005 => cstr!("rejected: shutdown"),
        2006 => cstr!("rejected: circuit_open"),
        2007 => cstr!("rejected: call_timeout"),
        _ => cstr!("unknown status"),
    }
}

/// The snake_case name of `reason` (`"concurrency_limit"`, ...), as every layer spells it; NULL
/// for a number this version does not define.
///
/// Memory and lifetimes: the string is static; never free it. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn hg_reason_name(reason: u32) -> *const c_char {
    match reason {
        0 => cstr!("concurrency_limit"),
        1 => cstr!("queue_limit"),
        2 => cstr!("key_limit"),
        3 => cstr!("timeout"),
        4 => cstr!("aborted"),
        5 => cstr!("shutdown"),
        6 => cstr!("circuit_open"),
        7 => cstr!("call_timeout"),
        _ => std::ptr::null(),
    }
}

/// The library version, e.g. `"0.1.0"`.
///
/// Memory and lifetimes: the string is static; never free it. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn hg_version() -> *const c_char {
    cstr!(env!("CARGO_PKG_VERSION"))
}
