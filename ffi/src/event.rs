//! Events through the C ABI: the two callbacks of `hg_config` (`on_state_change`, the breaker's
//! transitions with fixed arguments, and `on_event`, every event as a size-versioned
//! `hg_event`), delivered by one adapter of the core's `Observer::on_event` (docs/design.md,
//! "one event stream").

use std::{
    ffi::{c_char, c_void},
    sync::Arc,
};

use hullguard_core::{
    Event, EventKind, HoldChange, Observer, breaker::CircuitState, event::SharedObserver,
};

use crate::config::observe_number;

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
    /// An admission was granted (`id`, `class_index`, `revision`, `weight`, `cost`, `queued`,
    /// `decision_ns`, `wait_ns`).
    HG_EVENT_ADMIT = 1,
    /// An admission was refused, at once or after queueing (`reason`, `id`, `class_index`,
    /// `revision`, `weight`, `cost` asked for, `queued`, `decision_ns`, `wait_ns`).
    HG_EVENT_REJECT = 2,
    /// Observe mode let an admission through that enforcing would have refused with `reason`
    /// (`id`, `class_index`, `revision`); its `HG_EVENT_ADMIT` follows.
    HG_EVENT_OBSERVE_BYPASS = 3,
    /// A call returned permits or units (`weight` returned now, `held` units held before,
    /// `used` if `used_present`, `ended`).
    HG_EVENT_RELEASE = 4,
    /// A usage report (`used`, `held`, `overrun`, `change` / `change_by`, `cancel`).
    HG_EVENT_USAGE = 5,
    /// The limits changed (`revision`, `limit`, `budget` if `budget_present`, `observe`).
    HG_EVENT_RECONFIGURE = 6,
    /// An arrival took a full queue's place of a lower-priority waiter (`id`, `class_index`
    /// of the arrival; `victim`, `victim_class`).
    HG_EVENT_SHED = 7,
}

// The kinds are the core's `EventKind` numbers.
const _: () = {
    assert!(hg_event_kind::HG_EVENT_ADMIT as u32 == EventKind::Admit as u32);
    assert!(hg_event_kind::HG_EVENT_REJECT as u32 == EventKind::Reject as u32);
    assert!(hg_event_kind::HG_EVENT_OBSERVE_BYPASS as u32 == EventKind::ObserveBypass as u32);
    assert!(hg_event_kind::HG_EVENT_RELEASE as u32 == EventKind::Release as u32);
    assert!(hg_event_kind::HG_EVENT_USAGE as u32 == EventKind::Usage as u32);
    assert!(hg_event_kind::HG_EVENT_RECONFIGURE as u32 == EventKind::Reconfigure as u32);
    assert!(hg_event_kind::HG_EVENT_SHED as u32 == EventKind::Shed as u32);
    assert!(EventKind::ALL.len() == 8);
};

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
    /// Appended with the admission events (issue 16; absent for a `struct_size` that ends
    /// before them). The admission id (0 for `HG_EVENT_STATE_CHANGE` / `HG_EVENT_RECONFIGURE`).
    pub id: u64,
    /// The admission class (0 without classes; a registry key's class under a global cap).
    pub class_index: u32,
    /// `HG_EVENT_REJECT` / `HG_EVENT_OBSERVE_BYPASS`: the `hg_reason`.
    pub reason: u32,
    /// The revision of the limits in force.
    pub revision: u64,
    /// `ADMIT`: permits granted; `REJECT`: asked for; `RELEASE`: returned by this step.
    pub weight: u64,
    /// `ADMIT`: budget units granted; `REJECT`: asked for.
    pub cost: u64,
    /// `ADMIT` / `REJECT`: whether it waited in the queue first.
    pub queued: bool,
    /// `ADMIT` / `REJECT`: the core's work in the deciding call, ns.
    pub decision_ns: u64,
    /// `ADMIT` / `REJECT`: time queued, ns (0 if it never queued).
    pub wait_ns: u64,
    /// `RELEASE`: units held before this step; `USAGE`: units held now.
    pub held: u64,
    /// `RELEASE`: units used in all (when `used_present`); `USAGE`: cumulative units used.
    pub used: u64,
    /// `RELEASE`: whether `used` is given (the call ended with a usage or a plain end).
    pub used_present: bool,
    /// `RELEASE`: whether the call ended with this step.
    pub ended: bool,
    /// `USAGE`: the part of `held` past the budget.
    pub overrun: u64,
    /// `USAGE`: an `hg_hold_change`, and by how many units (`change_by`).
    pub change: u32,
    pub change_by: u64,
    /// `USAGE`: the host is asked to cancel the call's work.
    pub cancel: bool,
    /// `SHED`: the evicted waiter's admission id and class.
    pub victim: u64,
    pub victim_class: u32,
    /// `RECONFIGURE`: the limit now.
    pub limit: u64,
    /// `RECONFIGURE`: the budget now (when `budget_present`).
    pub budget: u64,
    pub budget_present: bool,
    /// `RECONFIGURE`: the observe mode now (an `hg_observe`).
    pub observe: u32,
}

impl hg_event {
    /// An event of `kind` with every field 0 / NULL but the size and the key.
    fn new(kind: EventKind, key: Option<&str>) -> Self {
        let (key, key_len) = key.map_or((std::ptr::null(), 0), |k| (k.as_ptr().cast(), k.len()));
        hg_event {
            struct_size: size_of::<hg_event>() as u32,
            kind: kind as u32,
            key,
            key_len,
            old_state: hg_circuit_state::HG_CIRCUIT_CLOSED,
            new_state: hg_circuit_state::HG_CIRCUIT_CLOSED,
            generation: 0,
            id: 0,
            class_index: 0,
            reason: 0,
            revision: 0,
            weight: 0,
            cost: 0,
            queued: false,
            decision_ns: 0,
            wait_ns: 0,
            held: 0,
            used: 0,
            used_present: false,
            ended: false,
            overrun: 0,
            change: 0,
            change_by: 0,
            cancel: false,
            victim: 0,
            victim_class: 0,
            limit: 0,
            budget: 0,
            budget_present: false,
            observe: 0,
        }
    }

    /// The core's event as C's.
    fn of(event: &Event<'_>) -> Self {
        let mut e = hg_event::new(event.kind(), event.key());
        e.class_index = event.class().map_or(0, u32::from);
        match *event {
            Event::StateChange {
                old,
                new,
                generation,
                ..
            } => {
                e.old_state = old.into();
                e.new_state = new.into();
                e.generation = generation;
            }
            Event::Admit {
                id,
                revision,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => {
                (e.id, e.revision, e.weight, e.cost) = (id, revision, weight, cost);
                (e.queued, e.decision_ns, e.wait_ns) = (queued, decision_ns, wait_ns);
            }
            Event::Reject {
                id,
                revision,
                reason,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => {
                (e.id, e.revision, e.weight, e.cost) = (id, revision, weight, cost);
                e.reason = reason.index() as u32;
                (e.queued, e.decision_ns, e.wait_ns) = (queued, decision_ns, wait_ns);
            }
            Event::ObserveBypass {
                id,
                revision,
                reason,
                ..
            } => {
                (e.id, e.revision, e.reason) = (id, revision, reason.index() as u32);
            }
            Event::Release {
                id,
                revision,
                weight,
                held,
                used,
                ended,
                ..
            } => {
                (e.id, e.revision, e.weight, e.held) = (id, revision, weight, held);
                (e.used, e.used_present, e.ended) = (used.unwrap_or(0), used.is_some(), ended);
            }
            Event::Usage {
                id,
                revision,
                used,
                held,
                overrun,
                change,
                cancel,
                ..
            } => {
                (e.id, e.revision, e.used, e.held) = (id, revision, used, held);
                (e.overrun, e.cancel) = (overrun, cancel);
                (e.change, e.change_by) = match change {
                    HoldChange::Unchanged => (0, 0),
                    HoldChange::Shrank(n) => (1, n),
                    HoldChange::Grew(n) => (2, n),
                    HoldChange::Overran(n) => (3, n),
                };
            }
            Event::Shed {
                id,
                revision,
                victim,
                victim_class,
                ..
            } => {
                (e.id, e.revision, e.victim) = (id, revision, victim);
                e.victim_class = victim_class.into();
            }
            Event::Reconfigure {
                revision,
                limit,
                budget,
                observe,
                ..
            } => {
                (e.revision, e.limit) = (revision, limit);
                (e.budget, e.budget_present) = (budget.unwrap_or(0), budget.is_some());
                e.observe = observe_number(observe);
            }
            // A kind this version cannot express: only its kind and key.
            _ => {}
        }
        e
    }
}

/// An event callback (`hg_config.on_event`): called once per event — every `hg_event_kind`:
/// breaker transitions and the admission events (admit, reject, observe bypass, release, usage,
/// reconfigure, shed) — after the state commit it reports, on the thread that committed it,
/// with `on_event_user_data` and the event (valid only during the call; copy what you keep).
/// Where it runs and what is safe inside it: as `hg_state_change_fn`. When both callbacks are
/// set, `on_state_change` runs first, then `on_event`, for the same transition. Setting it
/// turns the admission events on for the bulkhead (each admission gets an id and its timings
/// are measured); with `on_event` NULL none of that work is done.
///
/// It must not unwind (no C++ exception, no `longjmp` out of it): that is undefined behaviour
/// (out of contract). A panic inside the library's own adapter never crosses into C: it is
/// caught and counted in `hg_stats.observer_panics`, and the admission goes on.
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
    /// The admission events only when `on_event` is set: a bulkhead with only
    /// `on_state_change` (or no callback at all: then there is no observer) keeps its plain
    /// path plain — no admission id, no clock read, no event built.
    fn admission_events(&self) -> bool {
        self.event.is_some()
    }

    fn on_event(&self, event: &Event<'_>) {
        if let Event::StateChange { key, old, new, .. } = *event
            && let Some(f) = self.state_change
        {
            let (key, key_len) =
                key.map_or((std::ptr::null(), 0), |k| (k.as_ptr().cast(), k.len()));
            // SAFETY: the caller's function and user data (contract of `on_state_change`); `key`
            // is valid for `key_len` bytes during the call.
            unsafe { f(self.state_change_data, key, key_len, old.into(), new.into()) }
        }
        if let Some(f) = self.event {
            let e = hg_event::of(event);
            // SAFETY: the caller's function and user data (contract of `on_event`); `e` and the
            // key bytes it points to live during the call. A callback that unwinds is out of
            // contract (`hg_event_fn`); a panic of this adapter is caught by the core's
            // emitter and counted in `hg_stats.observer_panics`.
            unsafe { f(self.event_data, &e) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn ignore(_: *mut c_void, _: *const hg_event) {}

    #[test]
    fn admission_events_only_with_on_event() {
        let none = CObserver {
            state_change: None,
            state_change_data: std::ptr::null_mut(),
            event: None,
            event_data: std::ptr::null_mut(),
        };
        // No callback at all: no observer, so no event work (the plain path).
        assert!(none.shared().is_none());
        let with = CObserver {
            event: Some(ignore),
            ..none
        };
        assert!(with.admission_events());
        assert!(!none.admission_events());
    }

    #[test]
    fn every_event_kind_is_expressed() {
        let e = hg_event::of(&Event::Shed {
            key: Some("k"),
            id: 3,
            class: 2,
            revision: 4,
            victim: 1,
            victim_class: 0,
        });
        assert_eq!(e.kind, hg_event_kind::HG_EVENT_SHED as u32);
        assert_eq!((e.id, e.class_index, e.revision, e.victim), (3, 2, 4, 1));
        assert_eq!(e.key_len, 1);
        let e = hg_event::of(&Event::Reconfigure {
            key: None,
            revision: 9,
            limit: 5,
            budget: None,
            observe: hullguard_core::Observe::Budget,
        });
        assert_eq!(
            (e.kind, e.limit, e.budget_present, e.observe),
            (6, 5, false, 2)
        );
        assert!(e.key.is_null());
    }
}
