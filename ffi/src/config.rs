//! `hg_config`, `hg_stats` and `hg_drain_result`. `hg_config` and `hg_stats` begin with
//! `uint32_t struct_size` and only ever grow at the end: a caller built against an older header
//! passes its smaller size and this library reads / writes only that many bytes.
//!
//! An `hg_config` is read as one layer of the core's options (`PartialConfig`): each field sets
//! the option it spells (`OptionSpec::c_name`), ranges and cross-option rules are the core's,
//! and an error names the field through the option table.

use std::{
    ffi::{CStr, c_char, c_void},
    mem::offset_of,
    time::Duration,
};

use hullguard_core::{
    Config, ConfigError, Observe, PartialConfig, Stats,
    adaptive::Algorithm,
    config::{OptionId, Part, Section, Value, convert::duration_from_millis},
};

use crate::{
    event::{CObserver, hg_circuit_state, hg_event_fn, hg_state_change_fn},
    status::hg_status,
};

/// "Use the configured `queue_timeout`" as a per-call timeout; in an `hg_config` duration
/// field, "not set" (the default).
pub const HG_TIMEOUT_DEFAULT: u64 = u64::MAX - 1;
/// No deadline.
pub const HG_TIMEOUT_INFINITE: u64 = u64::MAX;
/// Largest permit count (`hg_config.max_concurrent`, weights): 2^60 - 1.
pub const HG_MAX_PERMITS: u64 = 1_152_921_504_606_846_975;
/// Largest `hg_config.max_queue`: 2^20.
pub const HG_MAX_QUEUE: u64 = 1_048_576;
/// Largest budget (`hg_config.budget`, costs, usage): 2^40 - 1.
pub const HG_MAX_BUDGET: u64 = 1_099_511_627_775;
/// "Not set / leave as it is" in a `uint64_t` field that has no other spare value:
/// `hg_config.start_limit`, the fields of `hg_limits`, the ceilings of `hg_class`. The same
/// number as `HG_TIMEOUT_DEFAULT`.
pub const HG_UNSET: u64 = u64::MAX - 1;
// Literals so that cbindgen can print them; pinned to the core's values here.
const _: () = assert!(HG_MAX_PERMITS == hullguard_core::MAX_PERMITS);
const _: () = assert!(HG_MAX_QUEUE == hullguard_core::MAX_QUEUE);
const _: () = assert!(HG_MAX_BUDGET == hullguard_core::MAX_BUDGET);
const _: () = assert!(HG_UNSET == HG_TIMEOUT_DEFAULT);

/// Observe (shadow) mode: which dimensions are decided and counted but not enforced
/// (docs/design.md §4.7). The numbers are the core's `Observe::CHOICES` order.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_observe {
    /// Every dimension is enforced (the default).
    #[default]
    HG_OBSERVE_OFF = 0,
    /// The permit limit is observed; the budget, if any, is enforced.
    HG_OBSERVE_CONCURRENCY = 1,
    /// The budget is observed; the permit limit is enforced (needs a budget).
    HG_OBSERVE_BUDGET = 2,
    /// Every dimension is observed (the kill switch and close still hold).
    HG_OBSERVE_ALL = 3,
}

/// The core's observe mode of C number `n` (its index in `Observe::CHOICES`).
pub(crate) fn observe_of(n: u32) -> Option<Observe> {
    Observe::CHOICES
        .get(n as usize)
        .and_then(|name| Observe::parse(name))
}

/// The C number of an observe mode (its index in `Observe::CHOICES`).
pub(crate) fn observe_number(o: Observe) -> u32 {
    Observe::CHOICES
        .iter()
        .position(|c| *c == o.as_str())
        .unwrap_or(0) as u32
}

const _: () = assert!(Observe::CHOICES.len() == 4);

/// The adaptive-limit algorithm of `hg_config.adaptive_algorithm` (docs/design.md).
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

impl From<Algorithm> for hg_adaptive_algorithm {
    fn from(a: Algorithm) -> Self {
        match a {
            Algorithm::Gradient2 => hg_adaptive_algorithm::HG_ADAPTIVE_GRADIENT2,
            Algorithm::Aimd => hg_adaptive_algorithm::HG_ADAPTIVE_AIMD,
        }
    }
}

/// Configuration of a bulkhead. Fill it with `hg_config_default()`, then change fields.
///
/// Every field sets one option of docs/design.md (its range is the core's option table; a bad
/// value makes `hg_bulkhead_new()` / `hg_registry_new()` return `HG_STATUS_INVALID_ARGUMENT`,
/// and `hg_config_check()` names the field). Durations are in ms and go through the core's one
/// conversion rule: in every duration field `HG_TIMEOUT_DEFAULT` means "not set" (the default)
/// and a value too large to hold means "none" where the option accepts none.
///
/// Policies: the `adaptive_*`, `breaker_*` and `call_timeout_ms` fields were appended with the
/// policies (after `enabled`). A caller built against an older header passes a `struct_size`
/// that ends before them (below `offsetof(hg_config, on_state_change_user_data) +
/// sizeof(void *)`): its bulkheads have no policies. For every numeric policy field, 0 means
/// "not set": the default named in its comment (in a registry override, the defaults' value;
/// see `hg_registry_new()`).
///
/// Events: `on_event` / `on_event_user_data` were appended after `on_state_change_user_data`;
/// a `struct_size` that ends before them means "no `on_event`".
///
/// Gateway admission (docs/design.md §4.5–4.7): `budget` … `cancel_on_overrun` were appended
/// after `on_event_user_data`; a `struct_size` that ends before `cancel_on_overrun` means none
/// of them is read (no budget, observe off, the start limit `max_concurrent`, no orphaning). In
/// each, 0 (`HG_UNSET` for `start_limit`) means "not set": the default, or in a registry
/// override the defaults' value (so an override cannot switch the defaults' `observe` or
/// `cancel_on_overrun` back off: give such a key no override of them, or a registry without).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_config {
    /// `sizeof(hg_config)` as the caller compiled it (set by `hg_config_default()`).
    pub struct_size: u32,
    /// The ceiling of the limit, `1 .. HG_MAX_PERMITS` (default 10).
    pub max_concurrent: u64,
    /// Live waiters allowed, `0 .. HG_MAX_QUEUE` (default 100; 0 = fail fast).
    pub max_queue: u64,
    /// Default queue deadline in milliseconds (default 30000; 0 = do not queue;
    /// `HG_TIMEOUT_INFINITE` = none; `HG_TIMEOUT_DEFAULT` = the default).
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
    /// AIMD: a success slower than this is a congestion signal, in ms, at most 2^62 ns
    /// (0 = 500).
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
    /// Bounds the work of one guarded call, in ms (0 and `HG_TIMEOUT_DEFAULT` = not set: off,
    /// the default; `HG_TIMEOUT_INFINITE` = off, also in a registry override whose defaults set
    /// one). The library arms no timer: a C host enforces it with its own timer (read it back
    /// with `hg_bulkhead_call_timeout_ms()`) and, on overrun, calls `hg_permit_call_timed_out()`.
    pub call_timeout_ms: u64,
    /// Called on every breaker transition (NULL = none): see `hg_state_change_fn`. In a
    /// registry, the defaults' callback receives every key's events; an override's must be
    /// NULL or the same function with the same user data.
    pub on_state_change: hg_state_change_fn,
    /// Passed to `on_state_change`; must stay valid while the bulkhead or registry lives.
    pub on_state_change_user_data: *mut c_void,
    /// Called on every event (NULL = none): see `hg_event_fn` and `hg_event`. May be set
    /// together with `on_state_change` (both run). In a registry, as `on_state_change`: the
    /// defaults' callback receives every key's events; an override's must be NULL or the same.
    pub on_event: hg_event_fn,
    /// Passed to `on_event`; must stay valid while the bulkhead or registry lives.
    pub on_event_user_data: *mut c_void,
    /// An in-flight ceiling of cost units beside the permits, `1 .. HG_MAX_BUDGET` (0 = none:
    /// every cost must be 0). With a budget, `max_concurrent` is at most 2^18 - 1.
    pub budget: u64,
    /// A bound on the total cost of queued requests, `1 .. HG_MAX_BUDGET` (0 = none:
    /// `max_queue` only). Needs a budget.
    pub max_queued_cost: u64,
    /// An `hg_observe` (default `HG_OBSERVE_OFF`; another number is invalid).
    pub observe: u32,
    /// The limit at construction, `0 .. max_concurrent` (`HG_UNSET` = `max_concurrent`, the
    /// default; 0 = a fail-closed start: the kill switch until `hg_bulkhead_apply_limits()`
    /// raises it).
    pub start_limit: u64,
    /// Permits that calls may hand back while their work goes on (`hg_permit_orphan()`),
    /// `0 .. HG_MAX_PERMITS` (0 = off, the default).
    pub max_orphaned: u64,
    /// A streaming call whose hold must grow past the budget is asked to cancel
    /// (`hg_usage_report.cancel`); default false (the growth is held as overrun). Read as a
    /// byte.
    pub cancel_on_overrun: bool,
    /// Reserved: all 0 (`hg_config_default()` zeroes them). The struct's last 7 bytes, named
    /// so that they are never tail padding — a later field goes after them, never into bytes an
    /// older caller may have left unset (the `adaptive_enabled` lesson) — and refused when not
    /// 0 (a newer caller's setting this library cannot honour).
    pub reserved: [u8; 7],
    /// Deadlines (docs/design.md §5.9): the least time a request's work needs before its
    /// deadline, in ms (0 = none, the default): a queued request with a deadline waits at most
    /// until `deadline − min_service_time_ms` and is refused `HG_STATUS_TIMEOUT` then (or at
    /// once, if it would have to queue with less left).
    pub min_service_time_ms: u64,
    /// Queue-delay shedding, CoDel (docs/design.md §4.10): the acceptable standing queue delay
    /// in ms (0 = off, the default). Needs a clock; the bulkhead then dispatches through the
    /// class lists (a one-class table if it has none).
    pub queue_delay_target_ms: u64,
    /// Queue-delay shedding: the interval in ms (0 = the default, 100).
    pub queue_delay_interval_ms: u64,
    /// Adaptive LIFO: newest waiter first while the oldest has queued past
    /// `queue_delay_target_ms` (needs it); default false. Read as a byte.
    pub adaptive_lifo: bool,
    /// Reserved: all 0, as `reserved`.
    pub reserved2: [u8; 7],
    /// Load shedding (docs/design.md §4.11): while the event-loop lag last reported with
    /// `hg_bulkhead_report_load()` is above this many ms, requests of non-critical classes are
    /// refused `HG_STATUS_SHED` at once (bound `HG_BOUND_OVERLOAD`); 0 = off (the default).
    pub shed_lag_threshold_ms: u64,
    /// Load shedding: as `shed_lag_threshold_ms` for the process's CPU use in cores (1.0 = one
    /// core busy), `0 .. 1024`; 0 = off (the default).
    pub shed_cpu_threshold: f64,
    /// Load shedding: a class of this priority or above is critical — never shed by a load
    /// signal; `0 .. 255`, 1 in `hg_config_default()` (a zeroed struct says 0: every class
    /// critical).
    pub critical_priority: u32,
    /// Reserved: all 0, as `reserved`.
    pub reserved3: [u8; 4],
}

impl hg_config {
    pub(crate) const DEFAULT: hg_config = hg_config {
        struct_size: size_of::<hg_config>() as u32,
        max_concurrent: Config::DEFAULT.max_concurrent,
        max_queue: Config::DEFAULT.max_queue,
        queue_timeout_ms: Config::DEFAULT.queue_timeout.as_millis() as u64,
        enabled: Config::DEFAULT.enabled,
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
        on_event: None,
        on_event_user_data: std::ptr::null_mut(),
        budget: 0,
        max_queued_cost: 0,
        observe: hg_observe::HG_OBSERVE_OFF as u32,
        start_limit: HG_UNSET,
        max_orphaned: 0,
        cancel_on_overrun: false,
        reserved: [0; 7],
        min_service_time_ms: 0,
        queue_delay_target_ms: 0,
        queue_delay_interval_ms: 0,
        adaptive_lifo: false,
        reserved2: [0; 7],
        shed_lag_threshold_ms: 0,
        shed_cpu_threshold: 0.0,
        critical_priority: Config::DEFAULT.critical_priority as u32,
        reserved3: [0; 4],
    };
}

/// The offset of an `hg_config` field.
macro_rules! at {
    ($field:ident) => {
        offset_of!(hg_config, $field)
    };
}

/// The smallest `struct_size` accepted: everything up to and including `enabled`.
const BASE_END: usize = at!(enabled) + 1;

/// The smallest `struct_size` that carries the policy fields (everything up to and including
/// `on_state_change_user_data`). A smaller size (an older header) means "no policies": the
/// fields it does not cover are never read — not even those that lie in the older struct's
/// tail padding (`adaptive_enabled`, `adaptive_algorithm`), which an old caller never set.
const POLICY_FIELDS_END: usize = at!(on_state_change_user_data) + size_of::<*mut c_void>();

/// The smallest `struct_size` that carries the admission fields (`budget` …
/// `cancel_on_overrun`); a smaller one reads none of them.
const ADMISSION_FIELDS_END: usize = at!(cancel_on_overrun) + 1;

/// The end of `reserved`.
const RESERVED_END: usize = at!(reserved) + 7;

/// The smallest `struct_size` that carries the deadline and queue-delay fields
/// (`min_service_time_ms` … `adaptive_lifo`); a smaller one reads none of them.
const DEADLINE_FIELDS_END: usize = at!(adaptive_lifo) + 1;

/// The end of `reserved2`.
const RESERVED2_END: usize = at!(reserved2) + 7;

/// The end of `reserved3` (the end of the struct: no tail padding), and so of the load
/// shedding fields (`shed_lag_threshold_ms` … `critical_priority`), read only whole.
const RESERVED3_END: usize = at!(reserved3) + 4;
const _: () = assert!(RESERVED3_END == size_of::<hg_config>());

/// How one policy field holds its option's value; 0 in any of them means "not set".
#[derive(Clone, Copy)]
enum Field {
    /// A `uint64_t` count at this offset.
    U64(usize),
    /// A `uint32_t` count.
    U32(usize),
    /// A `double`.
    F64(usize),
    /// A `uint64_t` duration in ms.
    Ms(usize),
    /// An `hg_adaptive_algorithm` (always set: `HG_ADAPTIVE_GRADIENT2` is 0).
    Algorithm(usize),
}

use Field::{F64, Ms, U32, U64};

/// The `adaptive_*` fields after `adaptive_enabled`, in struct order (the first bad one is
/// named).
const ADAPTIVE: [(OptionId, Field); 11] = [
    (
        OptionId::AdaptiveAlgorithm,
        Field::Algorithm(at!(adaptive_algorithm)),
    ),
    (
        OptionId::AdaptiveInitialLimit,
        U64(at!(adaptive_initial_limit)),
    ),
    (OptionId::AdaptiveMinLimit, U64(at!(adaptive_min_limit))),
    (OptionId::AdaptiveMaxLimit, U64(at!(adaptive_max_limit))),
    (
        OptionId::AdaptiveTargetLatency,
        Ms(at!(adaptive_target_latency_ms)),
    ),
    (
        OptionId::AdaptiveIncreaseStep,
        U64(at!(adaptive_increase_step)),
    ),
    (
        OptionId::AdaptiveDecreaseRatio,
        F64(at!(adaptive_decrease_ratio)),
    ),
    (OptionId::AdaptiveSmoothing, F64(at!(adaptive_smoothing))),
    (
        OptionId::AdaptiveRttTolerance,
        F64(at!(adaptive_rtt_tolerance)),
    ),
    (OptionId::AdaptiveLongWindow, U64(at!(adaptive_long_window))),
    (OptionId::AdaptiveQueueSize, U64(at!(adaptive_queue_size))),
];

/// The `breaker_*` fields after `breaker_enabled`, in struct order.
const BREAKER: [(OptionId, Field); 8] = [
    (
        OptionId::BreakerFailureThreshold,
        U32(at!(breaker_failure_threshold)),
    ),
    (
        OptionId::BreakerErrorRateThreshold,
        F64(at!(breaker_error_rate_threshold)),
    ),
    (
        OptionId::BreakerErrorRateWindow,
        Ms(at!(breaker_error_rate_window_ms)),
    ),
    (
        OptionId::BreakerErrorRateBuckets,
        U32(at!(breaker_error_rate_buckets)),
    ),
    (
        OptionId::BreakerVolumeThreshold,
        U32(at!(breaker_volume_threshold)),
    ),
    (
        OptionId::BreakerOpenDuration,
        Ms(at!(breaker_open_duration_ms)),
    ),
    (
        OptionId::BreakerHalfOpenMaxCalls,
        U32(at!(breaker_half_open_max_calls)),
    ),
    (
        OptionId::BreakerHalfOpenTimeout,
        Ms(at!(breaker_half_open_timeout_ms)),
    ),
];

/// A duration in ms as option `id`'s value, by the core's one conversion rule (a value too
/// large to hold — `HG_TIMEOUT_INFINITE` among them — is "none" where `id` accepts none, else
/// out of range); `HG_TIMEOUT_DEFAULT` = not set (`None`).
fn millis(id: OptionId, ms: u64) -> Result<Option<Duration>, ConfigError> {
    if ms == HG_TIMEOUT_DEFAULT {
        return Ok(None);
    }
    duration_from_millis(ms as f64, id.spec().kind)
        .map(Some)
        .map_err(|_| ConfigError::Option(id))
}

/// A caller's `hg_config`, copied into a buffer of this library's size: the bytes past what the
/// caller declared are 0, so a field its header does not have reads as 0 ("not set"). Every
/// field is read from its bytes: never a Rust `bool`, enum or fn pointer made from foreign bytes.
struct Bytes([u8; size_of::<hg_config>()]);

impl Bytes {
    fn at<const K: usize>(&self, off: usize) -> [u8; K] {
        self.0[off..off + K].try_into().unwrap_or([0; K])
    }

    fn u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.at(off))
    }

    fn word(&self, off: usize) -> usize {
        usize::from_ne_bytes(self.at(off))
    }

    fn flag(&self, off: usize) -> bool {
        self.0[off] != 0
    }

    /// Policy field `f` of option `id`: `None` when 0 (not set; an algorithm is always set).
    fn policy(&self, id: OptionId, f: Field) -> Result<Option<Value>, ConfigError> {
        let nonzero = |n: u64| (n != 0).then_some(n);
        Ok(match f {
            U64(o) => nonzero(self.u64(o)).map(Value::Count),
            U32(o) => nonzero(u32::from_ne_bytes(self.at(o)).into()).map(Value::Count),
            F64(o) => Some(f64::from_ne_bytes(self.at(o)))
                .filter(|x| *x != 0.0)
                .map(Value::Number),
            Ms(o) => nonzero(self.u64(o))
                .map(|ms| millis(id, ms))
                .transpose()?
                .flatten()
                .map(Value::Duration),
            Field::Algorithm(o) => {
                let algorithm = match u32::from_ne_bytes(self.at(o)) {
                    0 => Algorithm::Gradient2,
                    1 => Algorithm::Aimd,
                    _ => return Err(ConfigError::Option(id)),
                };
                Some(Value::Choice(algorithm.as_str()))
            }
        })
    }

    /// A policy part: on (`Part::On`, then its fields) when its enable byte is set, else off.
    fn part(
        &self,
        p: &mut PartialConfig,
        section: Section,
        enabled: usize,
        fields: &[(OptionId, Field)],
    ) -> Result<(), ConfigError> {
        if !self.flag(enabled) {
            p.set_part(section, Part::Off);
            return Ok(());
        }
        p.set_part(section, Part::On);
        for &(id, f) in fields {
            if let Some(v) = self.policy(id, f)? {
                p.set(id, v)?;
            }
        }
        Ok(())
    }

    /// Every option this config sets, onto `p`, in struct order.
    fn options(&self, p: &mut PartialConfig) -> Result<(), ConfigError> {
        p.set(
            OptionId::MaxConcurrent,
            Value::Count(self.u64(at!(max_concurrent))),
        )?;
        p.set(OptionId::MaxQueue, Value::Count(self.u64(at!(max_queue))))?;
        if let Some(d) = millis(OptionId::QueueTimeout, self.u64(at!(queue_timeout_ms)))? {
            p.set(OptionId::QueueTimeout, Value::Duration(d))?;
        }
        p.set(OptionId::Enabled, Value::Bool(self.flag(at!(enabled))))?;
        self.part(p, Section::Adaptive, at!(adaptive_enabled), &ADAPTIVE)?;
        self.part(p, Section::Breaker, at!(breaker_enabled), &BREAKER)?;
        let call_timeout = Ms(at!(call_timeout_ms));
        if let Some(v) = self.policy(OptionId::CallTimeout, call_timeout)? {
            p.set(OptionId::CallTimeout, v)?;
        }
        Ok(())
    }

    /// The admission options (appended with gateway admission), in struct order: each only
    /// when set (0, `HG_UNSET` for `start_limit`, is "not set").
    fn admission(&self, p: &mut PartialConfig) -> Result<(), ConfigError> {
        for (id, off) in [
            (OptionId::Budget, at!(budget)),
            (OptionId::MaxQueuedCost, at!(max_queued_cost)),
        ] {
            let n = self.u64(off);
            if n != 0 {
                p.set(id, Value::Count(n))?;
            }
        }
        let observe = u32::from_ne_bytes(self.at(at!(observe)));
        if observe != 0 {
            let o = observe_of(observe).ok_or(ConfigError::Option(OptionId::Observe))?;
            p.set(OptionId::Observe, Value::Choice(o.as_str()))?;
        }
        let start = self.u64(at!(start_limit));
        if start != HG_UNSET {
            p.set(OptionId::StartLimit, Value::Count(start))?;
        }
        let orphaned = self.u64(at!(max_orphaned));
        if orphaned != 0 {
            p.set(OptionId::MaxOrphaned, Value::Count(orphaned))?;
        }
        if self.flag(at!(cancel_on_overrun)) {
            p.set(OptionId::CancelOnOverrun, Value::Bool(true))?;
        }
        Ok(())
    }

    /// The deadline and queue-delay fields (docs/design.md §5.9, §4.10): 0 is "not set".
    fn deadline(&self, p: &mut PartialConfig) -> Result<(), ConfigError> {
        for (id, off) in [
            (OptionId::MinServiceTime, at!(min_service_time_ms)),
            (OptionId::QueueDelayTarget, at!(queue_delay_target_ms)),
            (OptionId::QueueDelayInterval, at!(queue_delay_interval_ms)),
        ] {
            let ms = self.u64(off);
            if ms != 0 {
                if let Some(d) = millis(id, ms)? {
                    p.set(id, Value::Duration(d))?;
                }
            }
        }
        if self.flag(at!(adaptive_lifo)) {
            p.set(OptionId::AdaptiveLifo, Value::Bool(true))?;
        }
        Ok(())
    }

    /// The load-shedding fields (docs/design.md §4.11): a threshold of 0 is "not set";
    /// `critical_priority` is always read.
    fn load(&self, p: &mut PartialConfig) -> Result<(), ConfigError> {
        let ms = self.u64(at!(shed_lag_threshold_ms));
        if ms != 0 {
            if let Some(d) = millis(OptionId::ShedLagThreshold, ms)? {
                p.set(OptionId::ShedLagThreshold, Value::Duration(d))?;
            }
        }
        let cpu = f64::from_ne_bytes(self.at(at!(shed_cpu_threshold)));
        if cpu != 0.0 {
            p.set(OptionId::ShedCpuThreshold, Value::Number(cpu))?;
        }
        let critical = u32::from_ne_bytes(self.at(at!(critical_priority)));
        p.set(
            OptionId::CriticalPriority,
            Value::Count(u64::from(critical)),
        )?;
        Ok(())
    }

    /// The two callbacks (each NULL when its bytes are 0).
    fn observer(&self) -> CObserver {
        // SAFETY: a non-zero word is a function pointer of the field's type (the caller's
        // contract); 0 is NULL (`Option<fn>` has the null niche, so the sizes match).
        let (state_change, event) = unsafe {
            (
                std::mem::transmute::<usize, hg_state_change_fn>(self.word(at!(on_state_change))),
                std::mem::transmute::<usize, hg_event_fn>(self.word(at!(on_event))),
            )
        };
        CObserver {
            state_change,
            state_change_data: self.word(at!(on_state_change_user_data)) as *mut c_void,
            event,
            event_data: self.word(at!(on_event_user_data)) as *mut c_void,
        }
    }
}

/// What an `hg_config` says: the options it sets (one layer of the core's options) and its
/// callbacks.
pub(crate) struct ReadConfig {
    pub(crate) partial: PartialConfig,
    pub(crate) observer: CObserver,
}

/// The C name of the first bad field (a static NUL-terminated string).
pub(crate) type BadField = &'static CStr;

/// The C field a core configuration error names: its option's C spelling. (An error without
/// an option — none can come from an `hg_config` — names `struct_size`, the other C-only case.)
pub(crate) fn field_of(e: ConfigError) -> BadField {
    e.option_id().map_or(c"struct_size", |id| id.spec().c_name)
}

impl ReadConfig {
    /// The bulkhead configuration: the core's defaults overlaid with these options, validated.
    pub(crate) fn config(&self) -> Result<Config, BadField> {
        self.partial.to_config().map_err(field_of)
    }
}

/// Reads a caller's `hg_config` of `struct_size` bytes (older, smaller layouts: no policies,
/// no `on_event`), checking every value against the core's option table and naming the first
/// bad field. Cross-option rules are checked by [`ReadConfig::config`] (or the registry merge).
///
/// # Safety
/// `p` points to a readable `hg_config` whose `struct_size` bytes are initialized.
pub(crate) unsafe fn read_config(p: *const hg_config) -> Result<ReadConfig, BadField> {
    // SAFETY: the caller guarantees at least the `struct_size` field is readable.
    let declared = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    if declared < BASE_END {
        return Err(c"struct_size");
    }
    // A size that ends inside a pointer would make a truncated pointer (a callback called
    // through half an address): an older struct always ends at a field boundary. Nor does it
    // end between `on_event` and its user data (appended together: no header ever ended
    // there), which would call the callback with a NULL user data the caller never wrote
    // (found by the `c_abi` fuzz target).
    let word = size_of::<usize>();
    if [at!(on_event), at!(on_event_user_data)]
        .iter()
        .any(|&f| f < declared && declared < f + word)
        || declared == at!(on_event_user_data)
    {
        return Err(c"struct_size");
    }
    let mut partial = PartialConfig::new();
    let mut n = declared.min(size_of::<hg_config>());
    if declared < POLICY_FIELDS_END {
        // An older header: no policies (`resilience` off), nothing read past `enabled`.
        partial.set_part(Section::Resilience, Part::Off);
        n = BASE_END;
    }
    let mut bytes = Bytes([0; size_of::<hg_config>()]);
    // SAFETY: `n` bytes are readable at `p` (at most the caller's declared size), and the
    // buffer has room for `size_of::<hg_config>() >= n` bytes; the regions do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), bytes.0.as_mut_ptr(), n) };
    bytes.options(&mut partial).map_err(field_of)?;
    if declared >= ADMISSION_FIELDS_END {
        bytes.admission(&mut partial).map_err(field_of)?;
    }
    if declared >= RESERVED_END && bytes.0[at!(reserved)..RESERVED_END].iter().any(|b| *b != 0) {
        return Err(c"reserved");
    }
    if declared > RESERVED_END && declared < RESERVED2_END {
        // Inside the deadline group: no header ever ended there (a field would be dropped).
        return Err(c"struct_size");
    }
    if declared >= DEADLINE_FIELDS_END {
        bytes.deadline(&mut partial).map_err(field_of)?;
    }
    if declared >= RESERVED2_END
        && bytes.0[at!(reserved2)..RESERVED2_END]
            .iter()
            .any(|b| *b != 0)
    {
        return Err(c"reserved2");
    }
    if declared > RESERVED2_END && declared < RESERVED3_END {
        // Inside the load-shedding group: no header ever ended there.
        return Err(c"struct_size");
    }
    if declared >= RESERVED3_END {
        bytes.load(&mut partial).map_err(field_of)?;
        if bytes.0[at!(reserved3)..RESERVED3_END]
            .iter()
            .any(|b| *b != 0)
        {
            return Err(c"reserved3");
        }
    }
    Ok(ReadConfig {
        partial,
        observer: bytes.observer(),
    })
}

/// Checks a configuration as `hg_bulkhead_new()` would, without creating anything, and names
/// the first bad field.
///
/// Parameters:
///   config: the configuration (its `struct_size` says how much to read). NULL →
///   `HG_STATUS_NULL_PARAMETER`.
///   bad_field: NULL, or receives the C name of the first bad field (`"max_concurrent"`,
///   `"adaptive_min_limit"`, `"breaker_open_duration_ms"`, `"adaptive_algorithm"`,
///   `"struct_size"`, …: the field's name as the core's option table spells it for C) on
///   `HG_STATUS_INVALID_ARGUMENT`, else NULL. The string is static.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_INVALID_ARGUMENT`; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; touches only `*bad_field`.
#[unsafe(no_mangle)]
pub extern "C" fn hg_config_check(
    config: *const hg_config,
    bad_field: *mut *const c_char,
) -> hg_status {
    crate::boundary::boundary(|| {
        crate::boundary::non_null!(config);
        // SAFETY: non-null `hg_config` (contract).
        let r = unsafe { read_config(config) }.and_then(|c| c.config());
        if !bad_field.is_null() {
            // SAFETY: non-null and writable (contract).
            unsafe { *bad_field = r.err().map_or(std::ptr::null(), CStr::as_ptr) };
        }
        crate::boundary::ok_or(r, hg_status::HG_STATUS_INVALID_ARGUMENT)
    })
}

/// A per-call queue timeout in ms (the `timeout_ms` of the acquire and drain functions), by the
/// core's conversion rule: `HG_TIMEOUT_DEFAULT` → `None` (the configured one);
/// `HG_TIMEOUT_INFINITE` (or a value too large to hold) → `Duration::MAX`, no deadline.
pub(crate) fn wait_timeout(ms: u64) -> Option<Duration> {
    millis(OptionId::QueueTimeout, ms).ok().flatten()
}

/// Fills `*config` with the defaults (10 / 100 / 30000 ms / enabled, no policies, no
/// callbacks, no budget, observe off, `start_limit` `HG_UNSET`, no orphaning) and its
/// `struct_size`.
///
/// Parameters:
///   config: where to write. NULL → `HG_STATUS_NULL_PARAMETER`.
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`.
/// Thread-safety: any thread; touches only `*config`.
///
/// C callers reach it through the header's macro of the same name, which calls
/// `hg_config_default_sized(p, sizeof *p)`: a binary built against an older, smaller header is never
/// written past its struct. This function writes this library's whole struct.
#[unsafe(no_mangle)]
pub extern "C" fn hg_config_default(config: *mut hg_config) -> hg_status {
    hg_config_default_sized(config, size_of::<hg_config>())
}

/// [`hg_config_default`] for a caller's `hg_config` of `size` bytes (what the header's `hg_config_default(p)` macro
/// calls, with `sizeof *p`): writes the first `min(size, sizeof(hg_config))` bytes of the
/// defaults and sets `struct_size` to that many, so a caller built against an older, smaller
/// header is never written past its struct, and one built against a newer header learns which
/// fields this library filled (the rest it must fill itself, or zero).
///
/// Returns: `HG_STATUS_OK`; `HG_STATUS_NULL_PARAMETER`; `HG_STATUS_INVALID_ARGUMENT` for a
/// `size` below the first header's (up to `enabled`) (nothing written).
/// Thread-safety: any thread; touches only the `size` bytes at the pointer.
#[unsafe(no_mangle)]
pub extern "C" fn hg_config_default_sized(config: *mut hg_config, size: usize) -> hg_status {
    crate::boundary::boundary(|| {
        // SAFETY: NULL or `size` writable bytes (contract).
        unsafe { crate::sized::fill(config, size, BASE_END, &hg_config::DEFAULT) }
    })
}

/// The stats of one bulkhead (docs/design.md, "Stats"). Set `struct_size = sizeof(hg_stats)`
/// before calling `hg_bulkhead_stats()`; the library writes only that many bytes.
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
    /// Rejections indexed by `hg_reason` (a reason this version does not return, and 11–15,
    /// stay 0).
    pub rejected: [u64; 16],
    pub released_twice_total: u64,
    pub leaked_total: u64,
    pub ring_free: u64,
    pub queue_wait_count: u64,
    /// Queue waits, enqueue to grant, in ns of the host clock.
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
    /// Appended with gateway admission (absent when an older caller's `struct_size` ends
    /// before them): the revision of the limits in force (`hg_bulkhead_apply_limits()`; 0
    /// before any).
    pub revision: u64,
    /// Permits of orphaned calls whose work goes on (`hg_permit_orphan()`).
    pub orphaned_in_flight: u64,
    /// Calls orphaned so far.
    pub orphaned_total: u64,
    /// The observe mode in force (an `hg_observe`).
    pub observe: u32,
    /// Would-be rejections an observed dimension let through, indexed by `hg_reason`.
    pub observed: [u64; 16],
    /// Panics caught in the event adapter (never crossing into C; docs/design.md §8).
    pub observer_panics: u64,
    /// Whether the bulkhead has a budget; the `budget_*` fields are 0 otherwise.
    pub budget_present: bool,
    /// The budget in force (0 is the kill switch of the budget).
    pub budget_limit: u64,
    /// The configured budget (the ceiling of `budget_limit`).
    pub budget_max: u64,
    /// Units held by claimed grants.
    pub budget_in_use: u64,
    /// Units free now; negative after a shrink.
    pub budget_available: i64,
    /// Units granted to queued waiters not yet claimed.
    pub budget_granted_unclaimed: u64,
    /// Units reserved by admissions so far.
    pub budget_reserved_total: u64,
    /// Units consumed by calls that ended (used).
    pub budget_consumed_total: u64,
    /// Units returned before the end (refunds, shrinking holds, unused rest).
    pub budget_refunded_total: u64,
    /// Units used past the hold (overrun) so far.
    pub budget_overrun_total: u64,
    /// Units held past the budget now (streaming growth that did not fit).
    pub budget_overrun_held: u64,
    /// The total cost of the live waiters.
    pub budget_queued_cost: u64,
    /// Appended with edge shedding and metrics (absent when an older caller's `struct_size`
    /// ends before them): the queue-wait histogram, granted waits per power-of-two bucket of
    /// ns (bucket `i < 27` counts waits below `2^(10+i)` ns; bucket 27 the rest; C35) — the
    /// `hullguard_queue_wait_seconds` metric.
    pub queue_wait_histogram: [u64; 28],
    /// Whether load shedding is on (a threshold set); the `load_*` fields are 0 otherwise.
    pub load_present: bool,
    /// Whether a load signal is over its threshold now (non-critical classes are shed).
    pub load_overloaded: bool,
    /// The last event-loop lag reported, ns.
    pub load_event_loop_lag_ns: u64,
    /// The last CPU use reported, thousandths of a core.
    pub load_cpu_permille: u64,
    /// Requests refused `shed` by a load signal (also in `rejected[HG_REASON_SHED]`).
    pub load_shed_total: u64,
}

impl From<&Stats> for hg_stats {
    fn from(s: &Stats) -> Self {
        // By index: `hg_reason` is the core's reason index (every reason fits: status.rs).
        let mut rejected = [0u64; 16];
        for (reason, n) in s.rejected_by_reason.iter() {
            rejected[reason.index()] = n;
        }
        let mut observed = [0u64; 16];
        for (reason, n) in s.observed_by_reason.iter() {
            observed[reason.index()] = n;
        }
        let c = s.circuit.as_ref();
        let a = s.adaptive.as_ref();
        let b = s.budget.as_ref();
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
            adaptive_algorithm: a.map_or(Default::default(), |a| a.algorithm.into()),
            adaptive_limit: a.map_or(0, |a| a.limit),
            adaptive_min_limit: a.map_or(0, |a| a.min_limit),
            adaptive_max_limit: a.map_or(0, |a| a.max_limit),
            adaptive_samples_total: a.map_or(0, |a| a.samples_total),
            adaptive_decreases_total: a.map_or(0, |a| a.decreases_total),
            adaptive_last_rtt_ns: a.map_or(0, |a| a.last_rtt_ns),
            adaptive_long_rtt_ns: a.map_or(0, |a| a.long_rtt_ns),
            revision: s.revision,
            orphaned_in_flight: s.orphaned_in_flight,
            orphaned_total: s.orphaned_total,
            observe: observe_number(s.observe),
            observed,
            observer_panics: s.observer_panics,
            budget_present: b.is_some(),
            budget_limit: b.map_or(0, |b| b.limit),
            budget_max: b.map_or(0, |b| b.max_budget),
            budget_in_use: b.map_or(0, |b| b.in_use),
            budget_available: b.map_or(0, |b| b.available),
            budget_granted_unclaimed: b.map_or(0, |b| b.granted_unclaimed),
            budget_reserved_total: b.map_or(0, |b| b.reserved_total),
            budget_consumed_total: b.map_or(0, |b| b.consumed_total),
            budget_refunded_total: b.map_or(0, |b| b.refunded_total),
            budget_overrun_total: b.map_or(0, |b| b.overrun_total),
            budget_overrun_held: b.map_or(0, |b| b.overrun_held),
            budget_queued_cost: b.map_or(0, |b| b.queued_cost),
            queue_wait_histogram: s.queue_wait_histogram.0,
            load_present: s.load.is_some(),
            load_overloaded: s.load.is_some_and(|l| l.overloaded != 0),
            load_event_loop_lag_ns: s.load.map_or(0, |l| l.event_loop_lag_ns),
            load_cpu_permille: s.load.map_or(0, |l| l.cpu_permille),
            load_shed_total: s.load.map_or(0, |l| l.shed_total),
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
