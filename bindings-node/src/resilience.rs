//! The `resilience` options (DESIGN §4) as the facade hands them over, and the per-isolate
//! queue of breaker state changes.
//!
//! Options: the facade (`index.js`) checks the keys and the JS types and converts names; here
//! each part becomes the core's `AdaptiveConfig` / `BreakerConfig` over the core defaults, and
//! the core validates the ranges. An error message starts with the option's path in the core's
//! spelling (`resilience.breaker.open_duration: …`); the facade renames it (`openDurationMs`).
//!
//! Events: the core calls its `Observer` on the thread that commits a transition (for a Node
//! bulkhead, inside a native call on the JS thread). The observer only pushes the event to a
//! thread-local queue, like the settled waiter ids (`settled`); the facade takes the events
//! after the native call returned and calls the listeners on the JS thread.

use std::{cell::RefCell, sync::Arc, time::Duration};

use hullguard_core::{
    ConfigError, Outcome, Resilience,
    adaptive::{AdaptiveConfig, Algorithm},
    breaker::{BreakerConfig, CircuitState, Observer},
    policy::SharedObserver,
};
use napi::{Error, Result, Status};
use napi_derive::napi;

/// `resilience.adaptive`; an omitted field takes the core default.
#[napi(object)]
pub struct NativeAdaptive {
    pub algorithm: Option<String>,
    pub initial_limit: Option<f64>,
    pub min_limit: Option<f64>,
    pub max_limit: Option<f64>,
    pub target_latency_ms: Option<f64>,
    pub increase_step: Option<f64>,
    pub decrease_ratio: Option<f64>,
    pub smoothing: Option<f64>,
    pub rtt_tolerance: Option<f64>,
    pub long_window: Option<f64>,
    pub queue_size: Option<f64>,
}

/// `resilience.breaker`; an omitted field takes the core default.
#[napi(object)]
pub struct NativeBreaker {
    pub failure_threshold: Option<f64>,
    pub error_rate_threshold: Option<f64>,
    pub error_rate_window_ms: Option<f64>,
    pub error_rate_buckets: Option<f64>,
    pub volume_threshold: Option<f64>,
    pub open_duration_ms: Option<f64>,
    pub half_open_max_calls: Option<f64>,
    pub half_open_timeout_ms: Option<f64>,
}

/// `resilience`: a part that is omitted is off.
#[napi(object)]
pub struct NativeResilience {
    pub adaptive: Option<NativeAdaptive>,
    pub breaker: Option<NativeBreaker>,
    /// Omitted or `Infinity` = off.
    pub call_timeout_ms: Option<f64>,
}

fn invalid(path: &str, what: &str) -> Error {
    Error::new(Status::InvalidArg, format!("resilience.{path}: {what}"))
}

/// A count option: a non-negative integer (the facade checked it is a safe integer).
fn count(v: Option<f64>, dflt: u64) -> u64 {
    v.map_or(dflt, |v| if v <= 0.0 { 0 } else { v as u64 })
}

/// A `u32` option; anything above `u32::MAX` saturates (and fails the core's range check).
fn count32(v: Option<f64>, dflt: u32) -> u32 {
    v.map_or(dflt, |v| {
        if v <= 0.0 {
            0
        } else {
            v.min(u32::MAX as f64) as u32
        }
    })
}

/// A duration in ms; NaN / negative become zero and too large saturates, so that the core's
/// range check names the option (never a panic across the boundary).
pub(crate) fn duration_ms(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms.max(0.0) / 1000.0).unwrap_or(Duration::MAX)
}

/// An optional duration option in ms (see [`duration_ms`]).
fn duration(v: Option<f64>, dflt: Duration) -> Duration {
    v.map_or(dflt, duration_ms)
}

fn adaptive(a: &NativeAdaptive, max_concurrent: u64) -> Result<AdaptiveConfig> {
    let d = AdaptiveConfig::for_max_concurrent(max_concurrent);
    let algorithm = match &a.algorithm {
        None => d.algorithm,
        Some(s) => Algorithm::parse(s)
            .ok_or_else(|| invalid("adaptive.algorithm", "must be \"gradient2\" or \"aimd\""))?,
    };
    let max_limit = count(a.max_limit, d.max_limit);
    // Not given: 0, the core's "start at max_limit". A given 0 stays out of range (the core
    // names `initial_limit`), as any count below 1 does.
    let initial_limit = match a.initial_limit.map(|v| count(Some(v), 0)) {
        None => 0,
        Some(0) => u64::MAX,
        Some(n) => n,
    };
    let target = duration(
        a.target_latency_ms,
        Duration::from_nanos(d.target_latency_ns),
    );
    Ok(AdaptiveConfig {
        algorithm,
        initial_limit,
        min_limit: count(a.min_limit, d.min_limit),
        max_limit,
        target_latency_ns: u64::try_from(target.as_nanos()).unwrap_or(u64::MAX),
        increase_step: count(a.increase_step, d.increase_step),
        decrease_ratio: a.decrease_ratio.unwrap_or(d.decrease_ratio),
        smoothing: a.smoothing.unwrap_or(d.smoothing),
        rtt_tolerance: a.rtt_tolerance.unwrap_or(d.rtt_tolerance),
        long_window: count(a.long_window, d.long_window),
        queue_size: count(a.queue_size, d.queue_size),
    })
}

fn breaker(b: &NativeBreaker) -> BreakerConfig {
    let d = BreakerConfig::DEFAULT;
    BreakerConfig {
        failure_threshold: count32(b.failure_threshold, d.failure_threshold),
        error_rate_threshold: b.error_rate_threshold.unwrap_or(d.error_rate_threshold),
        error_rate_window: duration(b.error_rate_window_ms, d.error_rate_window),
        error_rate_buckets: count32(b.error_rate_buckets, d.error_rate_buckets),
        volume_threshold: count32(b.volume_threshold, d.volume_threshold),
        open_duration: duration(b.open_duration_ms, d.open_duration),
        half_open_max_calls: count32(b.half_open_max_calls, d.half_open_max_calls),
        half_open_timeout: duration(b.half_open_timeout_ms, d.half_open_timeout),
    }
}

/// The core `Resilience` of `r` for a bulkhead of `max_concurrent`.
pub(crate) fn resilience(r: Option<&NativeResilience>, max_concurrent: u64) -> Result<Resilience> {
    let Some(r) = r else {
        return Ok(Resilience::OFF);
    };
    let call_timeout = match r.call_timeout_ms {
        None => None,
        Some(ms) if ms == f64::INFINITY => None,
        Some(ms) => Some(duration_ms(ms)),
    };
    Ok(Resilience {
        adaptive: r
            .adaptive
            .as_ref()
            .map(|a| adaptive(a, max_concurrent))
            .transpose()?,
        breaker: r.breaker.as_ref().map(breaker),
        call_timeout,
    })
}

/// A core config error as a JS error: `resilience.<part>.<option>: …` for the policy options
/// (the facade renames them), `<option>: …` for the bulkhead's own.
pub(crate) fn config_error(e: ConfigError) -> Error {
    let msg = match e.section() {
        Some("resilience") => format!("resilience.{}: {e}", e.option()),
        Some(part) => format!("resilience.{part}.{}: {e}", e.option()),
        None => format!("{}: {e}", e.option()),
    };
    Error::new(Status::InvalidArg, msg)
}

/// The outcome of the facade's code (`Outcome as u8`: 0 success, 1 failure, 2 ignored,
/// 3 overload).
pub(crate) fn outcome(code: u32) -> Result<Outcome> {
    u8::try_from(code)
        .ok()
        .and_then(Outcome::from_code)
        .ok_or_else(|| Error::new(Status::InvalidArg, format!("unknown outcome {code}")))
}

/// The outcome of an HTTP response by its status, the core's one rule (5xx `'failure'`, 429
/// `'overload'`, anything else `'success'`); used by the fetch and agent integrations.
#[napi]
pub fn outcome_for_http_status(status: u32) -> &'static str {
    Outcome::for_http_status(u16::try_from(status).unwrap_or(u16::MAX)).as_str()
}

// ----- state-change events ------------------------------------------------------------------

/// One breaker transition, for the emitter `emitter` of the facade.
#[napi(object)]
pub struct StateChange {
    pub emitter: u32,
    /// The registry key, or `null` outside a registry.
    pub key: Option<String>,
    pub old: String,
    pub new: String,
}

struct Event {
    emitter: u32,
    key: Option<String>,
    old: CircuitState,
    new: CircuitState,
}

thread_local! {
    static EVENTS: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
}

/// Queues every transition of a bulkhead (or of every key of a registry) for the facade's
/// emitter `emitter`.
struct QueueObserver {
    emitter: u32,
}

impl Observer for QueueObserver {
    fn on_state_change(&self, key: Option<&str>, old: CircuitState, new: CircuitState) {
        EVENTS.with(|e| {
            e.borrow_mut().push(Event {
                emitter: self.emitter,
                key: key.map(str::to_owned),
                old,
                new,
            })
        });
    }
}

/// The observer for emitter `emitter` (0: none).
pub(crate) fn observer(emitter: Option<u32>) -> Option<SharedObserver> {
    match emitter {
        None | Some(0) => None,
        Some(emitter) => Some(Arc::new(QueueObserver { emitter })),
    }
}

/// How many state changes wait to be taken.
pub(crate) fn pending() -> u32 {
    EVENTS.with(|e| e.borrow().len() as u32)
}

/// The state changes since the last call, oldest first.
pub(crate) fn take() -> Vec<StateChange> {
    EVENTS
        .with(|e| std::mem::take(&mut *e.borrow_mut()))
        .into_iter()
        .map(|e| StateChange {
            emitter: e.emitter,
            key: e.key,
            old: e.old.as_str().to_owned(),
            new: e.new.as_str().to_owned(),
        })
        .collect()
}
