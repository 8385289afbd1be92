//! `stats()` as a JS object: DESIGN §3.7 names in camelCase; the keys of `rejectedByReason`
//! stay exactly the reason strings.

use hullguard_core::{Snapshot, Stats, adaptive::AdaptiveStats, breaker::CircuitStats};
use napi_derive::napi;

/// Rejections per reason (keys are the reason strings of every layer).
#[napi(object)]
pub struct RejectedByReason {
    #[napi(js_name = "concurrency_limit")]
    pub concurrency_limit: f64,
    #[napi(js_name = "queue_limit")]
    pub queue_limit: f64,
    #[napi(js_name = "key_limit")]
    pub key_limit: f64,
    #[napi(js_name = "timeout")]
    pub timeout: f64,
    #[napi(js_name = "aborted")]
    pub aborted: f64,
    #[napi(js_name = "shutdown")]
    pub shutdown: f64,
    #[napi(js_name = "circuit_open")]
    pub circuit_open: f64,
    #[napi(js_name = "call_timeout")]
    pub call_timeout: f64,
}

/// The stats of one bulkhead.
#[napi(object)]
pub struct JsStats {
    pub active: f64,
    pub queued: f64,
    pub granted_unclaimed: f64,
    pub limit: f64,
    pub max_concurrent: f64,
    pub available: f64,
    pub admitted_total: f64,
    pub rejected_by_reason: RejectedByReason,
    pub released_twice_total: f64,
    pub leaked_total: f64,
    pub ring_free: f64,
    pub queue_wait_count: f64,
    pub queue_wait_sum_ns: f64,
    pub queue_wait_max_ns: f64,
    /// `null` unless an adaptive limit is attached.
    pub adaptive: Option<JsAdaptiveStats>,
    /// `null` unless a circuit breaker is attached.
    pub circuit: Option<JsCircuitStats>,
}

/// The adaptive limit's state (`algorithm` is `"aimd"` or `"gradient2"`).
#[napi(object)]
pub struct JsAdaptiveStats {
    pub algorithm: String,
    pub limit: f64,
    pub min_limit: f64,
    pub max_limit: f64,
    pub samples_total: f64,
    pub decreases_total: f64,
    pub last_rtt_ns: f64,
    pub long_rtt_ns: f64,
}

impl From<&AdaptiveStats> for JsAdaptiveStats {
    fn from(a: &AdaptiveStats) -> Self {
        JsAdaptiveStats {
            algorithm: a.algorithm.as_str().to_owned(),
            limit: a.limit as f64,
            min_limit: a.min_limit as f64,
            max_limit: a.max_limit as f64,
            samples_total: a.samples_total as f64,
            decreases_total: a.decreases_total as f64,
            last_rtt_ns: a.last_rtt_ns as f64,
            long_rtt_ns: a.long_rtt_ns as f64,
        }
    }
}

/// The breaker's state and counters (`state` is `"closed"`, `"open"` or `"half_open"`).
#[napi(object)]
pub struct JsCircuitStats {
    pub state: String,
    pub generation: f64,
    pub consecutive_failures: f64,
    pub window_requests: f64,
    pub window_failures: f64,
    pub opened_at_ns: f64,
}

impl From<&CircuitStats> for JsCircuitStats {
    fn from(c: &CircuitStats) -> Self {
        JsCircuitStats {
            state: c.state.as_str().to_owned(),
            generation: c.generation as f64,
            consecutive_failures: c.consecutive_failures as f64,
            window_requests: c.window_requests as f64,
            window_failures: c.window_failures as f64,
            opened_at_ns: c.opened_at_ns as f64,
        }
    }
}

impl From<&Stats> for JsStats {
    fn from(s: &Stats) -> Self {
        let r = |i: usize| s.rejected_by_reason.0[i] as f64;
        JsStats {
            active: s.active as f64,
            queued: s.queued as f64,
            granted_unclaimed: s.granted_unclaimed as f64,
            limit: s.limit as f64,
            max_concurrent: s.max_concurrent as f64,
            available: s.available as f64,
            admitted_total: s.admitted_total as f64,
            rejected_by_reason: RejectedByReason {
                concurrency_limit: r(0),
                queue_limit: r(1),
                key_limit: r(2),
                timeout: r(3),
                aborted: r(4),
                shutdown: r(5),
                circuit_open: r(6),
                call_timeout: r(7),
            },
            released_twice_total: s.released_twice_total as f64,
            leaked_total: s.leaked_total as f64,
            ring_free: s.ring_free as f64,
            queue_wait_count: s.queue_wait_count as f64,
            queue_wait_sum_ns: s.queue_wait_sum_ns as f64,
            queue_wait_max_ns: s.queue_wait_max_ns as f64,
            adaptive: s.adaptive.as_ref().map(JsAdaptiveStats::from),
            circuit: s.circuit.as_ref().map(JsCircuitStats::from),
        }
    }
}

/// `{active, queued, limit, available}` at a rejection.
#[napi(object)]
pub struct JsSnapshot {
    pub active: f64,
    pub queued: f64,
    pub limit: f64,
    pub available: f64,
}

impl From<Snapshot> for JsSnapshot {
    fn from(s: Snapshot) -> Self {
        JsSnapshot {
            active: s.active as f64,
            queued: s.queued as f64,
            limit: s.limit as f64,
            available: s.available as f64,
        }
    }
}
