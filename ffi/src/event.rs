//! Events through the C ABI: the two callbacks of `hg_config` (`on_state_change`, the breaker's
//! transitions with fixed arguments, and `on_event`, every event as a size-versioned
//! `hg_event`), delivered by one adapter of the core's `Observer::on_event` (docs/design.md,
//! "one event stream").

use std::{
    ffi::{c_char, c_void},
    sync::Arc,
};

use hullguard_core::{Event, Observer, breaker::CircuitState, event::SharedObserver};

/// A circuit breaker's state (docs/design.md: `"closed"`, `"open"`, `"half_open"`).
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

/// A breaker state-change callback (`hg_config.on_state_change`, docs/design.md "State-change
/// events"): called once per transition, after the state commit, on the thread that committed
/// it — inside an admission (`hg_bulkhead_try_acquire`, `…_acquire_async`, `…_enqueue`, …), a
/// release (`hg_permit_release*`, `hg_permit_free`, `hg_permit_call_timed_out`) or a stats read
/// (`hg_bulkhead_stats`, `hg_registry_stats`), since `open` becomes `half_open` lazily when one
/// of those finds `breaker_open_duration_ms` passed.
///
/// `key` / `key_len`: the registry key's bytes (UTF-8, not NUL-terminated, valid only during
/// the call), or NULL / 0 outside a registry. `user_data`: `on_state_change_user_data`.
///
/// What is safe inside it: it must be quick and must not block (it runs inside the caller's
/// acquire or release). Logging, posting to a queue, setting a flag, reading the stats of a
/// standalone bulkhead (`hg_bulkhead_stats`, which may re-enter this callback for a further lazy
/// transition) are safe. It must not free the bulkhead or registry it belongs to, must not call
/// a blocking function (`hg_bulkhead_acquire_timeout`, `hg_bulkhead_drain`), and must not call
/// any `hg_registry_*` function of its registry (the registry does not promise which of its
/// own locks a callback may run under). Acquiring or releasing permits of the same bulkhead
/// from it is allowed but re-entrant (those steps may fire further transitions); prefer deferring such work to
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

/// What an `hg_event` reports (`hg_event.kind`). New kinds are appended; a callback ignores a
/// kind it does not know.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
pub enum hg_event_kind {
    /// The circuit breaker moved from `old_state` to `new_state` (`generation` is the new
    /// generation): the transition `on_state_change` also reports.
    HG_EVENT_STATE_CHANGE = 0,
}

/// One event, as `hg_config.on_event` receives it (docs/design.md "one event stream").
///
/// Size-versioned: it begins with `uint32_t struct_size` (`sizeof(hg_event)` as this library
/// built it) and only ever grows at the end; a caller built against an older header reads only
/// the fields it knows, a newer one checks `struct_size` before reading a field this library
/// may not have. Fields that do not apply to `kind` are 0 / NULL.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hg_event {
    /// `sizeof(hg_event)` of this library.
    pub struct_size: u32,
    /// An `hg_event_kind` (a `uint32_t`, so that a kind added later is never an invalid enum
    /// value for an older caller).
    pub kind: u32,
    /// The registry key's bytes (UTF-8, not NUL-terminated, valid only during the call), or
    /// NULL outside a registry.
    pub key: *const c_char,
    /// The key's length in bytes (0 outside a registry).
    pub key_len: usize,
    /// `HG_EVENT_STATE_CHANGE`: the state before.
    pub old_state: hg_circuit_state,
    /// `HG_EVENT_STATE_CHANGE`: the state after.
    pub new_state: hg_circuit_state,
    /// `HG_EVENT_STATE_CHANGE`: the breaker generation the transition started.
    pub generation: u64,
}

/// An event callback (`hg_config.on_event`): called once per event, after the state commit it
/// reports, on the thread that committed it, with `on_event_user_data` and the event (valid
/// only during the call; copy what you keep). Where it runs and what is safe inside it: as
/// `hg_state_change_fn`. When both callbacks are set, `on_state_change` runs first, then
/// `on_event`, for the same transition.
pub type hg_event_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, event: *const hg_event)>;

/// The callbacks of one `hg_config` (each NULL or a function with its user data): the one
/// adapter of the core's event stream.
#[derive(Clone, Copy)]
pub(crate) struct CObserver {
    pub(crate) state_change: hg_state_change_fn,
    pub(crate) state_change_data: *mut c_void,
    pub(crate) event: hg_event_fn,
    pub(crate) event_data: *mut c_void,
}

// SAFETY: the contract of `hg_config.on_state_change` / `on_event` makes each function callable
// from any thread with its user data.
unsafe impl Send for CObserver {}
// SAFETY: as above.
unsafe impl Sync for CObserver {}

impl CObserver {
    /// Each callback as (function address, user data); address 0 = NULL.
    fn words(&self) -> [(usize, usize); 2] {
        [
            (
                self.state_change.map_or(0, |f| f as usize),
                self.state_change_data as usize,
            ),
            (
                self.event.map_or(0, |f| f as usize),
                self.event_data as usize,
            ),
        ]
    }

    /// Whether each callback of this (a registry override's) is NULL or the same function with
    /// the same user data as `base`'s (the defaults').
    pub(crate) fn fits(&self, base: &CObserver) -> bool {
        self.words()
            .into_iter()
            .zip(base.words())
            .all(|(mine, theirs)| mine.0 == 0 || mine == theirs)
    }

    /// The core observer, or `None` when neither callback is set (no event work at all).
    pub(crate) fn shared(self) -> Option<SharedObserver> {
        let any = self.state_change.is_some() || self.event.is_some();
        any.then(|| Arc::new(self) as SharedObserver)
    }
}

impl Observer for CObserver {
    /// Breaker transitions only, until the C ABI delivers admission events (issue 16): the
    /// plain path stays plain.
    fn admission_events(&self) -> bool {
        false
    }

    fn on_event(&self, event: &Event<'_>) {
        // Today the stream has one kind; a kind this version cannot express in C is skipped.
        let Event::StateChange {
            key,
            old,
            new,
            generation,
        } = *event
        else {
            return;
        };
        let (key, key_len) = key.map_or((std::ptr::null(), 0), |k| (k.as_ptr().cast(), k.len()));
        if let Some(f) = self.state_change {
            // SAFETY: the caller's function and user data (contract of `on_state_change`); `key`
            // is valid for `key_len` bytes during the call.
            unsafe { f(self.state_change_data, key, key_len, old.into(), new.into()) }
        }
        if let Some(f) = self.event {
            let e = hg_event {
                struct_size: size_of::<hg_event>() as u32,
                kind: hg_event_kind::HG_EVENT_STATE_CHANGE as u32,
                key,
                key_len,
                old_state: old.into(),
                new_state: new.into(),
                generation,
            };
            // SAFETY: the caller's function and user data (contract of `on_event`); `e` and the
            // key bytes it points to live during the call.
            unsafe { f(self.event_data, &e) }
        }
    }
}
