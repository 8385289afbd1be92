//! The napi-rs addon `hullguard` (native part). The public API is the hand-written facade
//! `index.js` / `index.mjs` / `index.d.ts`, which turns these small integer codes into
//! promises, permits and `BulkheadError`s.
//!
//! | module | what |
//! |---|---|
//! | `bulkhead` | `NativeBulkhead`: tryTake / enqueue / pollTicket / cancel / release / stats |
//! | `registry` | `NativeRegistry`, `originKey` |
//! | `settled` | the per-isolate queue of settled waiter ids (no threadsafe function needed) |
//! | `resilience` | the `resilience` options; the per-isolate queue of breaker state changes |
//! | `stats`, `clock` | the stats object; the virtual clock of the test hook |

// napi-derive registers exports only outside `cfg(test)`; the test build sees them unused.
#![cfg_attr(test, allow(dead_code))]

mod bulkhead;
mod clock;
mod registry;
mod resilience;
mod settled;
mod stats;

use napi_derive::napi;

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

/// The settled waiter ids since the last call, oldest first.
#[napi]
pub fn take_settled() -> Vec<u32> {
    settled::take()
}

/// How many settled waiter ids and state-change events wait to be taken.
#[napi]
pub fn settled_pending() -> u32 {
    settled::pending()
}

/// The breaker state changes since the last call, oldest first.
#[napi]
pub fn take_events() -> Vec<resilience::StateChange> {
    resilience::take()
}

/// How many breaker state changes wait to be taken.
#[napi]
pub fn events_pending() -> u32 {
    resilience::pending()
}
