//! `hg_config`, `hg_stats` and `hg_drain_result`. `hg_config` and `hg_stats` begin with
//! `uint32_t struct_size` and only ever grow at the end: a caller built against an older header
//! passes its smaller size and this library reads / writes only that many bytes.

use std::{
    ffi::{CStr, c_char, c_void},
    mem::offset_of,
    sync::Arc,
    time::Duration,
};

use hullguard_core::{
    Config, ConfigError, Resilience, Stats,
    adaptive::{AdaptiveConfig, Algorithm},
    breaker::{BreakerConfig, CircuitState, Observer},
    policy::SharedObserver,
};

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

/// The adaptive-limit algorithm of `hg_config.adaptive_algorithm` (DESIGN §4).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_adaptive_algorithm {
    /// Netflix Gradient2 with hullguard's fixes (the recommended one, the default).
    #[default]
    HG_ADAPTIVE_GRADIENT2 = 0,
    /// Additive increase / multiplicative decrease against `adaptive_target_latency_ms`.
    HG_ADAPTIVE_AIMD = 1,
}

/// A circuit breaker's state (DESIGN §3.7: `"closed"`, `"open"`, `"half_open"`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_circuit_state {
    /// Calls pass; outcomes are counted.
    #[default]
    HG_CIRCUIT_CLOSED = 0,
    /// Calls fail fast with `HG_STATUS_CIRCUIT_OPEN`.
    HG_CIRCUIT_OPEN = 1,
    /// Up to `breaker_half_open_max_calls` probes pass; one success closes, one failure
    /// re-opens.
    HG_CIRCUIT_HALF_OPEN = 2,
}

impl From<CircuitState> for hg_circuit_state {
    fn from(s: CircuitState) -> Self {
        match s {
            CircuitState::Closed => hg_circuit_state::HG_CIRCUIT_CLOSED,
            CircuitState::Open => hg_circuit_state::HG_CIRCUIT_OPEN,
            CircuitState::HalfOpen => hg_circuit_state::HG_CIRCUIT_HALF_OPEN,
        }
    }
}

/// A breaker state-change callback (`hg_config.on_state_change`, DESIGN §4 "State-change
/// events"): called once per transition, after the state commit, on the thread
/// that committed it — inside an admission (`hg_bulkhead_try_acquire`, `…_acquire_async`,
/// `…_enqueue`, …), a release (`hg_permit_release*`, `hg_permit_free`,
/// `hg_permit_call_timed_out`) or a stats read (`hg_bulkhead_stats`, `hg_registry_stats`), since `open` becomes `half_open` lazily when one of those finds
/// `breaker_open_duration_ms` passed.
///
/// `key` / `key_len`: the registry key's bytes (UTF-8, not NUL-terminated, valid only during
/// the call), or NULL / 0 outside a registry. `user_data`: `on_state_change_user_data`.
///
/// What is safe inside it: it must be quick and must not block (it runs inside the caller's
/// acquire or release). Logging, posting to a queue, setting a flag, reading the stats of a
/// standalone bulkhead (`hg_bulkhead_stats`, which may re-enter this callback for a further lazy
/// transition) are safe. It must not free the bulkhead or registry it belongs to, must not call
/// a blocking function (`hg_bulkhead_acquire_timeout`, `hg_bulkhead_drain`), and must not call
/// any `hg_registry_*` function of its registry (it may run while `hg_registry_stats` holds the
/// registry's key map). Acquiring or releasing permits of the same bulkhead from it is allowed
/// but re-entrant (those steps may fire further transitions); prefer deferring such work to
/// the host's own thread. It must not unwind (no C++ exception, no longjmp) out of the call.
pub type hg_state_change_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        key: *const c_char,
        key_len: usize,
        old_state: hg_circuit_state,
        new_state: hg_circuit_state,
    ),
>;

/// Configuration of a bulkhead. Fill it with `hg_config_default()`, then change fields.
///
/// Policies (DESIGN §4): the `adaptive_*`, `breaker_*` and `call_timeout_ms` fields were appended
/// with the policies (after `enabled`). A caller built against an older header passes a `struct_size` that ends before them
/// (below `offsetof(hg_config, on_state_change_user_data) + sizeof(void *)`): its bulkheads have
/// no policies. For every numeric policy field, 0 means the DESIGN §4 default named in its
/// comment. A bad value makes `hg_bulkhead_new()` / `hg_registry_new()` return
/// `HG_STATUS_INVALID_ARGUMENT`; `hg_config_check()` names the field.
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
    /// Attach an adaptive limit (default false; when false the other `adaptive_*` fields are
    /// not read). Read as a byte: any non-zero value is true.
    pub adaptive_enabled: bool,
    /// `HG_ADAPTIVE_GRADIENT2` (default) or `HG_ADAPTIVE_AIMD`; another number is invalid.
    pub adaptive_algorithm: hg_adaptive_algorithm,
    /// The starting limit, `adaptive_min_limit .. adaptive_max_limit` (0 = `adaptive_max_limit`).
    pub adaptive_initial_limit: u64,
    /// The floor, `1 .. adaptive_max_limit` (0 = 1).
    pub adaptive_min_limit: u64,
    /// The ceiling, `1 .. max_concurrent` (0 = `max_concurrent`).
    pub adaptive_max_limit: u64,
    /// AIMD: a success slower than this is a congestion signal, in ms (0 = 500).
    pub adaptive_target_latency_ms: u64,
    /// AIMD: the additive increase, `1 .. HG_MAX_PERMITS` (0 = 1).
    pub adaptive_increase_step: u64,
    /// The multiplicative back-off, in `(0, 1)` (0 = 0.7; NaN is invalid).
    pub adaptive_decrease_ratio: f64,
    /// Gradient2: weight of the new estimate, in `(0, 1]` (0 = 0.2).
    pub adaptive_smoothing: f64,
    /// Gradient2: RTT growth tolerated before shrinking, finite and `>= 1` (0 = 1.5).
    pub adaptive_rtt_tolerance: f64,
    /// Gradient2: samples in the long-term RTT average, `1 .. 2^32` (0 = 600).
    pub adaptive_long_window: u64,
    /// Gradient2: headroom added while no queueing is seen, `1 .. HG_MAX_PERMITS` (0 = 4; a
    /// headroom of 0 cannot be expressed through the C ABI).
    pub adaptive_queue_size: u64,
    /// Attach a circuit breaker (default false; when false the other `breaker_*` fields are not
    /// read). Read as a byte: any non-zero value is true.
    pub breaker_enabled: bool,
    /// Consecutive failures that open it, `1 .. 1048575` (0 = 5).
    pub breaker_failure_threshold: u32,
    /// Failure fraction over the window that opens it, in `(0, 1]` (0 = 0.5).
    pub breaker_error_rate_threshold: f64,
    /// The rolling window of the error rate, in ms (0 = 10000). Every breaker duration must be
    /// at most 2^62 ns (about 146 years), and the window at least one ns per bucket.
    pub breaker_error_rate_window_ms: u64,
    /// Buckets of the window, `1 .. 32` (0 = 10).
    pub breaker_error_rate_buckets: u32,
    /// Calls in the window before the error rate counts, `1 .. 1048575` (0 = 20).
    pub breaker_volume_threshold: u32,
    /// Time open before half-open, in ms (0 = 30000).
    pub breaker_open_duration_ms: u64,
    /// Probes admitted while half-open, `1 .. 255` (0 = 1).
    pub breaker_half_open_max_calls: u32,
    /// A probe that has not reported within this many ms counts as a failure (0 = 30000).
    pub breaker_half_open_timeout_ms: u64,
    /// Bounds the work of one guarded call, in ms (0, `HG_TIMEOUT_INFINITE` or
    /// `HG_TIMEOUT_DEFAULT` = off, the default). The library arms no timer: a C host enforces it
    /// with its own timer (read it back with `hg_bulkhead_call_timeout_ms()`) and, on overrun,
    /// calls `hg_permit_call_timed_out()`.
    pub call_timeout_ms: u64,
    /// Called on every breaker transition (NULL = none): see `hg_state_change_fn`. In a
    /// registry, the defaults' callback receives every key's events; an override's must be
    /// NULL or the same function with the same user data.
    pub on_state_change: hg_state_change_fn,
    /// Passed to `on_state_change`; must stay valid while the bulkhead or registry lives.
    pub on_state_change_user_data: *mut c_void,
}

impl hg_config {
    pub(crate) const DEFAULT: hg_config = hg_config {
        struct_size: size_of::<hg_config>() as u32,
        max_concurrent: Config::DEFAULT.max_concurrent,
        max_queue: Config::DEFAULT.max_queue,
        queue_timeout_ms: 30_000,
        enabled: true,
        adaptive_enabled: false,
        adaptive_algorithm: hg_adaptive_algorithm::HG_ADAPTIVE_GRADIENT2,
        adaptive_initial_limit: 0,
        adaptive_min_limit: 0,
        adaptive_max_limit: 0,
        adaptive_target_latency_ms: 0,
        adaptive_increase_step: 0,
        adaptive_decrease_ratio: 0.0,
        adaptive_smoothing: 0.0,
        adaptive_rtt_tolerance: 0.0,
        adaptive_long_window: 0,
        adaptive_queue_size: 0,
        breaker_enabled: false,
        breaker_failure_threshold: 0,
        breaker_error_rate_threshold: 0.0,
        breaker_error_rate_window_ms: 0,
        breaker_error_rate_buckets: 0,
        breaker_volume_threshold: 0,
        breaker_open_duration_ms: 0,
        breaker_half_open_max_calls: 0,
        breaker_half_open_timeout_ms: 0,
        call_timeout_ms: 0,
        on_state_change: None,
        on_state_change_user_data: std::ptr::null_mut(),
    };
}

/// The smallest `struct_size` that carries the policy fields (everything up to and including
/// `on_state_change_user_data`). A smaller size (an older header) means "no policies": the
/// fields it does not cover are never read — not even those that lie in the older struct's
/// tail padding (`adaptive_enabled`, `adaptive_algorithm`), which an old caller never set.
const POLICY_FIELDS_END: usize =
    offset_of!(hg_config, on_state_change_user_data) + size_of::<*mut c_void>();

/// A state-change callback and its user data, as read from an `hg_config`.
#[derive(Clone, Copy)]
pub(crate) struct StateChange {
    pub(crate) f:
        unsafe extern "C" fn(*mut c_void, *const c_char, usize, hg_circuit_state, hg_circuit_state),
    pub(crate) user_data: *mut c_void,
}

// SAFETY: the contract of `hg_config.on_state_change` makes the function callable from any
// thread with its user data.
unsafe impl Send for StateChange {}
// SAFETY: as above.
unsafe impl Sync for StateChange {}

impl Observer for StateChange {
    fn on_state_change(&self, key: Option<&str>, old: CircuitState, new: CircuitState) {
        let (k, len) = key.map_or((std::ptr::null(), 0), |k| (k.as_ptr().cast(), k.len()));
        // SAFETY: the caller's function and user data (contract of `on_state_change`); `k` is
        // valid for `len` bytes during the call.
        unsafe { (self.f)(self.user_data, k, len, old.into(), new.into()) }
    }
}

impl StateChange {
    /// The same function (by address, as the caller passed it) and the same user data.
    pub(crate) fn same(&self, other: &StateChange) -> bool {
        self.f as usize == other.f as usize && self.user_data == other.user_data
    }

    pub(crate) fn shared(self) -> SharedObserver {
        Arc::new(self)
    }
}

/// A configuration read from C: the core's `Config` and the state-change callback, if any.
pub(crate) struct ReadConfig {
    pub(crate) config: Config,
    pub(crate) on_state_change: Option<StateChange>,
}

/// The C name of the first bad field (a static NUL-terminated string).
pub(crate) type BadField = &'static CStr;

/// The C field that a core configuration error names.
fn field_of(e: &ConfigError) -> BadField {
    use hullguard_core::{adaptive::AdaptiveConfigError as A, breaker::BreakerConfigError as B};
    match e {
        ConfigError::MaxConcurrent => c"max_concurrent",
        ConfigError::MaxQueue => c"max_queue",
        ConfigError::Adaptive(a) => match a {
            A::MaxLimit => c"adaptive_max_limit",
            A::MinLimit => c"adaptive_min_limit",
            A::InitialLimit => c"adaptive_initial_limit",
            A::TargetLatency => c"adaptive_target_latency_ms",
            A::IncreaseStep => c"adaptive_increase_step",
            A::DecreaseRatio => c"adaptive_decrease_ratio",
            A::Smoothing => c"adaptive_smoothing",
            A::RttTolerance => c"adaptive_rtt_tolerance",
            A::LongWindow => c"adaptive_long_window",
            A::QueueSize => c"adaptive_queue_size",
            _ => c"adaptive",
        },
        ConfigError::Breaker(b) => match b {
            B::FailureThreshold => c"breaker_failure_threshold",
            B::ErrorRateThreshold => c"breaker_error_rate_threshold",
            B::ErrorRateWindow => c"breaker_error_rate_window_ms",
            B::ErrorRateBuckets => c"breaker_error_rate_buckets",
            B::VolumeThreshold => c"breaker_volume_threshold",
            B::OpenDuration => c"breaker_open_duration_ms",
            B::HalfOpenMaxCalls => c"breaker_half_open_max_calls",
            B::HalfOpenTimeout => c"breaker_half_open_timeout_ms",
            _ => c"breaker",
        },
        ConfigError::CallTimeout => c"call_timeout_ms",
        _ => c"struct_size",
    }
}

/// A numeric policy field as read: 0 (the C default) means `d`, the DESIGN §4 default.
fn or<T: PartialEq + Default>(v: T, d: T) -> T {
    if v == T::default() { d } else { v }
}

/// Reads a caller's `hg_config` of `struct_size` bytes (older, smaller layouts get defaults for
/// the fields they lack: no policies) and validates it, naming the first bad field.
///
/// # Safety
/// `p` points to a readable `hg_config` whose `struct_size` bytes are initialized.
pub(crate) unsafe fn read_config(p: *const hg_config) -> Result<ReadConfig, BadField> {
    // SAFETY: the caller guarantees at least the `struct_size` field is readable.
    let declared = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    let ours = size_of::<hg_config>();
    if declared < offset_of!(hg_config, enabled) + 1 {
        return Err(c"struct_size");
    }
    let n = declared.min(ours);
    let mut buf = [0u8; size_of::<hg_config>()];
    // SAFETY: `n` bytes are readable at `p` (the caller's declared size, capped at ours), and
    // `buf` has room for `ours >= n` bytes; the regions do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), buf.as_mut_ptr(), n) };
    // Every field is read from its bytes: never a Rust `bool`, enum or fn pointer made from
    // foreign bytes.
    fn at<const K: usize>(buf: &[u8], off: usize) -> [u8; K] {
        buf[off..off + K].try_into().unwrap_or([0; K])
    }
    let u64_at = |off: usize| u64::from_ne_bytes(at(&buf, off));
    let f64_at = |off: usize| f64::from_ne_bytes(at(&buf, off));
    let u32_at = |off: usize| u32::from_ne_bytes(at(&buf, off));
    let usize_at = |off: usize| usize::from_ne_bytes(at(&buf, off));
    let byte_at = |off: usize| buf[off] != 0;
    let timeout_ms = u64_at(offset_of!(hg_config, queue_timeout_ms));
    let mut c = Config {
        max_concurrent: u64_at(offset_of!(hg_config, max_concurrent)),
        max_queue: u64_at(offset_of!(hg_config, max_queue)),
        queue_timeout: match timeout_ms {
            HG_TIMEOUT_INFINITE => Duration::MAX,
            HG_TIMEOUT_DEFAULT => Config::DEFAULT.queue_timeout,
            ms => Duration::from_millis(ms),
        },
        enabled: byte_at(offset_of!(hg_config, enabled)),
        ..Config::DEFAULT
    };
    let mut on_state_change = None;
    if declared >= POLICY_FIELDS_END {
        let ms = Duration::from_millis;
        let adaptive = if byte_at(offset_of!(hg_config, adaptive_enabled)) {
            let d = AdaptiveConfig::for_max_concurrent(c.max_concurrent);
            let algorithm = match u32_at(offset_of!(hg_config, adaptive_algorithm)) {
                0 => Algorithm::Gradient2,
                1 => Algorithm::Aimd,
                _ => return Err(c"adaptive_algorithm"),
            };
            let max_limit = or(
                u64_at(offset_of!(hg_config, adaptive_max_limit)),
                d.max_limit,
            );
            Some(AdaptiveConfig {
                algorithm,
                // 0 is the core's own "start at max_limit".
                initial_limit: u64_at(offset_of!(hg_config, adaptive_initial_limit)),
                min_limit: or(
                    u64_at(offset_of!(hg_config, adaptive_min_limit)),
                    d.min_limit,
                ),
                max_limit,
                target_latency_ns: or(
                    u64_at(offset_of!(hg_config, adaptive_target_latency_ms))
                        .saturating_mul(1_000_000),
                    d.target_latency_ns,
                ),
                increase_step: or(
                    u64_at(offset_of!(hg_config, adaptive_increase_step)),
                    d.increase_step,
                ),
                decrease_ratio: or(
                    f64_at(offset_of!(hg_config, adaptive_decrease_ratio)),
                    d.decrease_ratio,
                ),
                smoothing: or(
                    f64_at(offset_of!(hg_config, adaptive_smoothing)),
                    d.smoothing,
                ),
                rtt_tolerance: or(
                    f64_at(offset_of!(hg_config, adaptive_rtt_tolerance)),
                    d.rtt_tolerance,
                ),
                long_window: or(
                    u64_at(offset_of!(hg_config, adaptive_long_window)),
                    d.long_window,
                ),
                queue_size: or(
                    u64_at(offset_of!(hg_config, adaptive_queue_size)),
                    d.queue_size,
                ),
            })
        } else {
            None
        };
        let breaker = if byte_at(offset_of!(hg_config, breaker_enabled)) {
            let d = BreakerConfig::DEFAULT;
            Some(BreakerConfig {
                failure_threshold: or(
                    u32_at(offset_of!(hg_config, breaker_failure_threshold)),
                    d.failure_threshold,
                ),
                error_rate_threshold: or(
                    f64_at(offset_of!(hg_config, breaker_error_rate_threshold)),
                    d.error_rate_threshold,
                ),
                error_rate_window: or(
                    ms(u64_at(offset_of!(hg_config, breaker_error_rate_window_ms))),
                    d.error_rate_window,
                ),
                error_rate_buckets: or(
                    u32_at(offset_of!(hg_config, breaker_error_rate_buckets)),
                    d.error_rate_buckets,
                ),
                volume_threshold: or(
                    u32_at(offset_of!(hg_config, breaker_volume_threshold)),
                    d.volume_threshold,
                ),
                open_duration: or(
                    ms(u64_at(offset_of!(hg_config, breaker_open_duration_ms))),
                    d.open_duration,
                ),
                half_open_max_calls: or(
                    u32_at(offset_of!(hg_config, breaker_half_open_max_calls)),
                    d.half_open_max_calls,
                ),
                half_open_timeout: or(
                    ms(u64_at(offset_of!(hg_config, breaker_half_open_timeout_ms))),
                    d.half_open_timeout,
                ),
            })
        } else {
            None
        };
        let call_timeout = match u64_at(offset_of!(hg_config, call_timeout_ms)) {
            0 | HG_TIMEOUT_INFINITE | HG_TIMEOUT_DEFAULT => None,
            ms => Some(Duration::from_millis(ms)),
        };
        c.resilience = Resilience {
            adaptive,
            breaker,
            call_timeout,
        };
        let f = usize_at(offset_of!(hg_config, on_state_change));
        if f != 0 {
            // SAFETY: a non-zero `hg_state_change_fn` is a function pointer of this type (the
            // caller's contract); `Option<fn>` has the null niche, so the sizes match.
            let f: hg_state_change_fn = unsafe { std::mem::transmute::<usize, _>(f) };
            on_state_change = f.map(|f| StateChange {
                f,
                user_data: usize_at(offset_of!(hg_config, on_state_change_user_data))
                    as *mut c_void,
            });
        }
    }
    c.validate().map_err(|e| field_of(&e))?;
    Ok(ReadConfig {
        config: c,
        on_state_change,
    })
}

/// Checks a configuration as `hg_bulkhead_new()` would, without creating anything, and names
/// the first bad field.
///
/// Parameters:
///   config: the configuration (its `struct_size` says how much to read). NULL →
///   `HG_STATUS_NULL_PARAMETER`.
///   bad_field: NULL, or receives the C name of the first bad field (`"max_concurrent"`,
///   `"adaptive_min_limit"`, `"breaker_open_duration_ms"`, `"call_timeout_ms"`,
///   `"struct_size"`, …) on `HG_STATUS_INVALID_ARGUMENT`, else NULL. The string is static.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT`; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: touches only `*bad_field`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_config_check(
    config: *const hg_config,
    bad_field: *mut *const c_char,
) -> hg_status {
    crate::boundary::boundary(|| {
        crate::boundary::non_null!(config);
        // SAFETY: non-null `hg_config` (contract).
        let r = unsafe { read_config(config) };
        let (status, field) = match r {
            Ok(_) => (hg_status::HG_STATUS_OK, std::ptr::null()),
            Err(f) => (hg_status::HG_STATUS_INVALID_ARGUMENT, f.as_ptr()),
        };
        if !bad_field.is_null() {
            // SAFETY: non-null and writable (contract).
            unsafe { *bad_field = field };
        }
        status
    })
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
    /// Appended with the policies (absent when an older caller's `struct_size` ends before them): whether
    /// a circuit breaker is attached; the `circuit_*` fields are 0 otherwise.
    pub circuit_present: bool,
    /// The breaker's state (after any due lazy `open` → `half_open` this read committed).
    pub circuit_state: hg_circuit_state,
    /// The breaker's generation (incremented by every transition).
    pub circuit_generation: u64,
    /// Consecutive failures in the current closed generation.
    pub circuit_consecutive_failures: u64,
    /// Calls (successes + failures) in the rolling window of the current closed period.
    pub circuit_window_requests: u64,
    /// Failures in that window.
    pub circuit_window_failures: u64,
    /// When the breaker last opened, host-clock ns (0 if never).
    pub circuit_opened_at_ns: u64,
    /// Whether an adaptive limit is attached; the `adaptive_*` fields are 0 otherwise.
    pub adaptive_present: bool,
    /// Its algorithm.
    pub adaptive_algorithm: hg_adaptive_algorithm,
    /// The limit the controller last applied.
    pub adaptive_limit: u64,
    pub adaptive_min_limit: u64,
    pub adaptive_max_limit: u64,
    /// Samples fed (successes and failures; ignored outcomes are not samples).
    pub adaptive_samples_total: u64,
    /// Samples that lowered the limit.
    pub adaptive_decreases_total: u64,
    /// The RTT of the last success fed, ns (0 before any).
    pub adaptive_last_rtt_ns: u64,
    /// Gradient2's long-term RTT average, ns (0 for AIMD or before any success).
    pub adaptive_long_rtt_ns: u64,
}

impl From<&Stats> for hg_stats {
    fn from(s: &Stats) -> Self {
        let mut rejected = [0u64; 16];
        rejected[..8].copy_from_slice(&s.rejected_by_reason.0);
        let c = s.circuit.as_ref();
        let a = s.adaptive.as_ref();
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
            circuit_present: c.is_some(),
            circuit_state: c.map_or(hg_circuit_state::HG_CIRCUIT_CLOSED, |c| c.state.into()),
            circuit_generation: c.map_or(0, |c| c.generation),
            circuit_consecutive_failures: c.map_or(0, |c| c.consecutive_failures),
            circuit_window_requests: c.map_or(0, |c| c.window_requests),
            circuit_window_failures: c.map_or(0, |c| c.window_failures),
            circuit_opened_at_ns: c.map_or(0, |c| c.opened_at_ns),
            adaptive_present: a.is_some(),
            adaptive_algorithm: match a.map(|a| a.algorithm) {
                Some(Algorithm::Aimd) => hg_adaptive_algorithm::HG_ADAPTIVE_AIMD,
                _ => hg_adaptive_algorithm::HG_ADAPTIVE_GRADIENT2,
            },
            adaptive_limit: a.map_or(0, |a| a.limit),
            adaptive_min_limit: a.map_or(0, |a| a.min_limit),
            adaptive_max_limit: a.map_or(0, |a| a.max_limit),
            adaptive_samples_total: a.map_or(0, |a| a.samples_total),
            adaptive_decreases_total: a.map_or(0, |a| a.decreases_total),
            adaptive_last_rtt_ns: a.map_or(0, |a| a.last_rtt_ns),
            adaptive_long_rtt_ns: a.map_or(0, |a| a.long_rtt_ns),
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
