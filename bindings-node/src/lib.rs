//! The napi-rs addon `hullguard` (native part): marshalling on the core's admission API
//! (docs/design.md §5). The public API is the hand-written facade `index.js` / `index.mjs` /
//! `index.d.ts`, which only plumbs Promises, AbortSignal, timers and garbage collection.
//!
//! | module | what |
//! |---|---|
//! | `bulkhead` | `NativeBulkhead` (admission, release, stats, drain), `NativeCall`, `NativeDrain` |
//! | `host` | `NativeHostBulkhead`, `NativeHostPermit` (one limit per host, Linux only), `hostPoll` / `hostCancel` of pending acquires, `reapHost`, `hostCli` |
//! | `fleet` | `NativeFleet`: a fleet bulkhead's lease (`hullguard_fleet::FleetCore`) for the facade's driver loop over the user's Redis client; its admissions are a `NativeBulkhead`'s |
//! | `fast` | the hot entry points on a handle's slot (`fastTake`, `fastGive`, `fastPoll`, `fastExpire`) |
//! | `registry` | `NativeRegistry`, `originKey` |
//! | `options` | users' option objects → `PartialConfig` / `Request`, by the core's option table |
//! | `settled` | the per-isolate queue of settled waiters / drains and breaker events |
//! | `marshal` | `TypeError` / `RangeError` / `BulkheadError`, ms |
//! | `metrics` | the core's metric table and a bulkhead's samples (`metricTable`, `metricSamples`) |
//! | `stats`, `clock` | the stats object (one `StatsVisitor`); the virtual clock of the test hook, deadlines' ms → the core's ns |
//!
//! Thread-safety: every object belongs to the isolate (thread) that made it.

// napi-derive registers exports only outside `cfg(test)`; the test build sees them unused.
#![cfg_attr(test, allow(dead_code))]

mod bulkhead;
mod clock;
mod fast;
mod fleet;
mod gateway;
#[cfg(target_os = "linux")]
mod host;
mod marshal;
mod metrics;
mod options;
mod registry;
mod settled;
mod stats;

use hullguard_core::{Outcome, Reason};
use napi::{
    Env, Result,
    bindgen_prelude::{Float64Array, FnArgs, Function, Object, Uint32Array},
};
use napi_derive::napi;

use crate::{
    marshal::{JsDetail, JsSnapshot},
    settled::NativeEvent,
};

/// Largest permit count: `min(core MAX_PERMITS, Number.MAX_SAFE_INTEGER)`.
#[napi]
pub const MAX_PERMITS: f64 = if hullguard_core::MAX_PERMITS < (1u64 << 53) - 1 {
    hullguard_core::MAX_PERMITS as f64
} else {
    ((1u64 << 53) - 1) as f64
};

/// Largest `maxQueue`.
#[napi]
pub const MAX_QUEUE: f64 = hullguard_core::MAX_QUEUE as f64;

/// Registers the facade with this isolate, once, at load: `onSettled(ids, events)` receives
/// what a native call settled (the ids of queued waiters and drains, breaker transitions) at
/// its end; `BulkheadError` is the class the addon throws rejections as; `scratch` (2 numbers)
/// and `settledIds` (at least 1) are the arrays the hot entry points report through (`fast`).
/// The deadlines' clock offset is calibrated by the facade (`clock::host_clock_ns`).
// napi-derive reads the argument types literally (for native.d.ts): no type aliases here.
#[allow(clippy::type_complexity)]
#[napi]
pub fn init(
    on_settled: Function<FnArgs<(Vec<u32>, Vec<NativeEvent>)>, ()>,
    bulkhead_error: Function<FnArgs<(&'static str, JsSnapshot, Option<String>, JsDetail)>, ()>,
    scratch: Float64Array,
    settled_ids: Uint32Array,
) -> Result<()> {
    fast::init(scratch, settled_ids)?;
    settled::init(&on_settled)?;
    marshal::init(&bulkhead_error)
}

/// One row of the core's reason table.
#[napi(object)]
pub struct ReasonRow {
    /// The snake_case name of every layer (`'queue_limit'`).
    pub name: String,
    /// The error code (`'BULKHEAD_FULL'`).
    pub code: String,
    pub retryable: bool,
    /// Always `'resilience'`.
    pub category: String,
}

/// The admission reasons, in `hg_reason` order (the core's table).
#[napi]
pub fn reasons() -> Vec<ReasonRow> {
    Reason::ALL
        .iter()
        .map(|r| {
            let i = r.info();
            ReasonRow {
                name: i.name.to_owned(),
                code: i.code.to_owned(),
                retryable: i.retryable,
                category: i.category.to_owned(),
            }
        })
        .collect()
}

/// The outcomes with their codes (`Outcome as u8`): `{success: 0, failure: 1, …}`.
#[napi(ts_return_type = "Record<string, number>")]
pub fn outcomes(env: &Env) -> Result<Object<'_>> {
    let mut out = Object::new(env)?;
    for o in (0u8..).map_while(Outcome::from_code) {
        out.set(o.as_str(), o as u32)?;
    }
    Ok(out)
}

/// The outcome of an HTTP response by its status, the core's one rule (5xx `'failure'`, 429
/// `'overload'`, anything else `'success'`); used by the fetch and agent integrations.
/// `ms` (a time left) as a `grpc-timeout` header value, by the core's one rule
/// (`hullguard_core::deadline::grpc_timeout`): at most 8 digits and a unit, rounded down; 0, a
/// negative or NaN time is `"0n"`, an infinite one `"99999999H"`.
#[napi]
pub fn grpc_timeout(ms: f64) -> String {
    let left = if ms > 0.0 {
        std::time::Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(std::time::Duration::MAX)
    } else {
        std::time::Duration::ZERO
    };
    hullguard_core::deadline::grpc_timeout(left)
        .as_str()
        .to_owned()
}

/// A `grpc-timeout` header value as ms (`"1500m"` → 1500), by the core's one parser
/// (`hullguard_core::deadline::parse_grpc_timeout`: 1 to 8 digits and a unit); `undefined`
/// for a malformed one (no budget, as gRPC servers treat it).
#[napi]
pub fn parse_grpc_timeout(value: String) -> Option<f64> {
    hullguard_core::deadline::parse_grpc_timeout(value.as_bytes()).map(|d| d.as_secs_f64() * 1e3)
}

#[napi]
pub fn outcome_for_http_status(status: u32) -> &'static str {
    Outcome::for_http_status(u16::try_from(status).unwrap_or(u16::MAX)).as_str()
}

/// How many settled ids and events wait to be delivered (0 between native calls; for tests).
#[napi]
pub fn settled_pending() -> u32 {
    settled::pending()
}
