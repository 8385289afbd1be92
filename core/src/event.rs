//! The one event stream (docs/design.md §8.2): everything a bulkhead reports as it happens goes
//! through one [`Observer`] as an [`Event`]. Today that is the breaker's state changes; the
//! gateway work adds admissions, rejections, releases, usage reports, reconfigurations and
//! sheds as new variants (the enum is `#[non_exhaustive]`).
//!
//! Events are delivered after the state commit they report, on the thread that committed it,
//! never inside a protocol step. Each binding delivers them through one adapter (Python calls
//! `on_state_change` with the GIL; Node queues them for the JS thread; C calls
//! `on_state_change` / `on_event`).

use crate::circuit::CircuitState;

/// Something that happened to a bulkhead. `key` is the registry key, `None` outside a registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The circuit breaker moved from `old` to `new`; `generation` is the new generation.
    StateChange {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The state before.
        old: CircuitState,
        /// The state after.
        new: CircuitState,
        /// The breaker generation the transition started.
        generation: u64,
    },
}

impl Event<'_> {
    /// The registry key of the bulkhead it happened to, `None` outside a registry.
    pub const fn key(&self) -> Option<&str> {
        match self {
            Event::StateChange { key, .. } => *key,
        }
    }

    /// The event's name as every layer spells it (`"state_change"`).
    pub const fn name(&self) -> &'static str {
        match self {
            Event::StateChange { .. } => "state_change",
        }
    }
}

/// Receives a bulkhead's events. Implement [`on_event`](Self::on_event) for every event, or
/// just [`on_state_change`](Self::on_state_change) for breaker transitions (the default
/// `on_event` forwards them there).
///
/// Called after the state commit, on the thread that committed it; it must not block (it runs
/// inside an admission, a release or a stats read).
pub trait Observer {
    /// A breaker transition, once per transition.
    fn on_state_change(&self, key: Option<&str>, old: CircuitState, new: CircuitState) {
        let _ = (key, old, new);
    }

    /// Any event. The default forwards state changes to
    /// [`on_state_change`](Self::on_state_change) and ignores the rest.
    fn on_event(&self, event: &Event<'_>) {
        match *event {
            Event::StateChange { key, old, new, .. } => self.on_state_change(key, old, new),
        }
    }
}

/// An observer shared by a bulkhead (or every bulkhead of a registry).
#[cfg(feature = "alloc")]
pub type SharedObserver = alloc::sync::Arc<dyn Observer + Send + Sync>;
