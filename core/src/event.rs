//! The one event stream (docs/design.md §8.2): everything a bulkhead reports as it happens goes
//! through one [`Observer`] as an [`Event`] — breaker transitions, and the admission events of
//! the gateway work (admit, reject, release, usage report, reconfigure, observe bypass, shed; the
//! enum is `#[non_exhaustive]`).
//!
//! Events are delivered after the state commit they report, on the thread that committed it,
//! never inside a protocol step. A bulkhead without an observer builds no event and reads no
//! clock for one (`bench/callgrind.sh` pins the plain path). Each binding delivers them through
//! one adapter (Python calls `on_state_change` with the GIL; Node queues them for the JS
//! thread; C calls `on_state_change` / `on_event`).
//!
//! Every admission has an **admission id**: a `u64` from the bulkhead's own counter (1, 2, 3 …
//! in the order the decisions began; no RNG), carried by its waiter and its call, so the
//! events of one request (`Admit` or `Reject`, then `Usage` reports and `Release`) can be joined.
//! On a 32-bit target the id of a *queued* admission wraps at 2²⁹ (it lives in a ring cell's
//! word). Ids are assigned only on a bulkhead with an observer; elsewhere they are 0.

use crate::{circuit::CircuitState, observe::Observe, reason::Reason};

/// Something that happened to a bulkhead. `key` is the registry key, `None` outside a registry.
///
/// Times: `decision_ns` is the core's own work in the call that produced the event (two reads
/// of the bulkhead's clock around it, so the clock's resolution bounds it); `wait_ns` is the
/// time queued, enqueue → grant (or → the rejection or cancel), on the same clock; 0 for an
/// admission that never queued. Both are 0 on a bulkhead without a clock.
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
    /// An admission was granted: at once (`queued` false) or after waiting its turn.
    Admit {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The admission id.
        id: u64,
        /// The admission class (0 on a bulkhead without classes; docs/design.md §4.8).
        class: u16,
        /// The revision of the limits in force when the event was built.
        revision: u64,
        /// Permits granted.
        weight: u64,
        /// Budget units granted.
        cost: u64,
        /// Whether it waited in the queue first.
        queued: bool,
        /// The core's work in the deciding call, ns.
        decision_ns: u64,
        /// Time queued, ns (0 if it never queued).
        wait_ns: u64,
    },
    /// An admission was refused — at once, or after queueing (a timeout, a cancel, a shrink
    /// below the request, a close).
    Reject {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The admission id.
        id: u64,
        /// The admission class (0 on a bulkhead without classes; docs/design.md §4.8).
        class: u16,
        /// The revision in force.
        revision: u64,
        /// Why.
        reason: Reason,
        /// Permits asked for.
        weight: u64,
        /// Budget units asked for.
        cost: u64,
        /// Whether it had queued.
        queued: bool,
        /// The core's work in the deciding call, ns.
        decision_ns: u64,
        /// Time queued, ns (0 if it never queued).
        wait_ns: u64,
    },
    /// Observe (shadow) mode let an admission through that enforcing would have refused
    /// with `reason` (docs/design.md §4.7); its `Admit` follows.
    ObserveBypass {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The admission id.
        id: u64,
        /// The admission class (0 on a bulkhead without classes; docs/design.md §4.8).
        class: u16,
        /// The revision in force.
        revision: u64,
        /// What enforcing would have answered (`concurrency_limit` or `budget_limit`).
        reason: Reason,
    },
    /// A call returned permits or budget units: its end (`ended` true) or a partial release.
    Release {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The admission id.
        id: u64,
        /// The admission class (0 on a bulkhead without classes; docs/design.md §4.8).
        class: u16,
        /// The revision in force.
        revision: u64,
        /// Permits returned by this step.
        weight: u64,
        /// Budget units the call held before this step (charged plus overrun).
        held: u64,
        /// Units the call used in all, when it ended with a usage (`end_with_usage`, or the
        /// whole hold at a plain end); `None` for a partial release.
        used: Option<u64>,
        /// Whether the call ended with this step.
        ended: bool,
    },
    /// A streaming call reported its usage ([`Call::report_usage`](crate::Call::report_usage)).
    Usage {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The admission id.
        id: u64,
        /// The admission class (0 on a bulkhead without classes; docs/design.md §4.8).
        class: u16,
        /// The revision in force.
        revision: u64,
        /// Cumulative units used.
        used: u64,
        /// Units held now.
        held: u64,
        /// The part of `held` past the budget.
        overrun: u64,
        /// What the report did to the hold.
        change: HoldChange,
        /// The report asks the host to cancel the call's work (`cancel_on_overrun`).
        cancel: bool,
    },
    /// An arrival at a full queue of a shedding classed bulkhead (docs/design.md §4.8) took the
    /// place of a waiter of a lower priority, which is refused `shed` (its owner's `Reject`
    /// follows when it learns of it). Delivered on the arrival's thread, after the pass that
    /// evicted the victim made the arrival a waiter.
    Shed {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The arrival's admission id.
        id: u64,
        /// The arrival's class.
        class: u16,
        /// The revision in force.
        revision: u64,
        /// The victim's admission id (0 for a waiter queued through the raw polling API).
        victim: u64,
        /// The victim's class.
        victim_class: u16,
    },
    /// The limits changed: `apply_limits`, `set_limit`, `set_observe`, a kill switch.
    Reconfigure {
        /// The registry key, or `None`.
        key: Option<&'a str>,
        /// The revision now in force (unchanged by `set_limit` and `set_observe`).
        revision: u64,
        /// The call limit now.
        limit: u64,
        /// The budget now (`None`: no budget).
        budget: Option<u64>,
        /// The observe mode now.
        observe: Observe,
    },
}

/// How one [`report_usage`](crate::Call::report_usage) changed the call's hold (defined
/// here, beside the [`Event::Usage`] that carries it; `hullguard_core::HoldChange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldChange {
    /// The hold already matched the report.
    Unchanged,
    /// The hold shrank by this many units (returned at once; the part held past the budget
    /// goes first).
    Shrank(u64),
    /// The hold grew by this many units, taken from the budget through admission.
    Grew(u64),
    /// The hold grew by this many units that did not fit (or a waiter was queued: no barging):
    /// held past the budget, counted in `overrun_total` and the `overrun_held` gauge. A host
    /// that must not run over the budget cancels the call's work on this answer.
    Overran(u64),
}

/// The kind of an [`Event`], for filtering and for the bindings' numeric codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// [`Event::StateChange`].
    StateChange = 0,
    /// [`Event::Admit`].
    Admit = 1,
    /// [`Event::Reject`].
    Reject = 2,
    /// [`Event::ObserveBypass`].
    ObserveBypass = 3,
    /// [`Event::Release`].
    Release = 4,
    /// [`Event::Usage`].
    Usage = 5,
    /// [`Event::Reconfigure`].
    Reconfigure = 6,
    /// [`Event::Shed`].
    Shed = 7,
}

impl EventKind {
    /// Every kind, in code order.
    pub const ALL: [EventKind; 8] = [
        EventKind::StateChange,
        EventKind::Admit,
        EventKind::Reject,
        EventKind::ObserveBypass,
        EventKind::Release,
        EventKind::Usage,
        EventKind::Reconfigure,
        EventKind::Shed,
    ];

    /// The name every layer spells (`"admit"`, `"observe_bypass"`).
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::StateChange => "state_change",
            EventKind::Admit => "admit",
            EventKind::Reject => "reject",
            EventKind::ObserveBypass => "observe_bypass",
            EventKind::Release => "release",
            EventKind::Usage => "usage",
            EventKind::Reconfigure => "reconfigure",
            EventKind::Shed => "shed",
        }
    }
}

impl Event<'_> {
    /// The registry key of the bulkhead it happened to, `None` outside a registry.
    pub const fn key(&self) -> Option<&str> {
        match self {
            Event::StateChange { key, .. }
            | Event::Admit { key, .. }
            | Event::Reject { key, .. }
            | Event::ObserveBypass { key, .. }
            | Event::Release { key, .. }
            | Event::Usage { key, .. }
            | Event::Shed { key, .. }
            | Event::Reconfigure { key, .. } => *key,
        }
    }

    /// The event's kind.
    pub const fn kind(&self) -> EventKind {
        match self {
            Event::StateChange { .. } => EventKind::StateChange,
            Event::Admit { .. } => EventKind::Admit,
            Event::Reject { .. } => EventKind::Reject,
            Event::ObserveBypass { .. } => EventKind::ObserveBypass,
            Event::Release { .. } => EventKind::Release,
            Event::Usage { .. } => EventKind::Usage,
            Event::Reconfigure { .. } => EventKind::Reconfigure,
            Event::Shed { .. } => EventKind::Shed,
        }
    }

    /// The event's name as every layer spells it (`"state_change"`, `"admit"` …).
    pub const fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The admission class of an admission's event (`None` for a state change or a
    /// reconfiguration).
    pub const fn class(&self) -> Option<u16> {
        match self {
            Event::Admit { class, .. }
            | Event::Reject { class, .. }
            | Event::ObserveBypass { class, .. }
            | Event::Release { class, .. }
            | Event::Usage { class, .. }
            | Event::Shed { class, .. } => Some(*class),
            Event::StateChange { .. } | Event::Reconfigure { .. } => None,
        }
    }

    /// The same event reported for registry key `key` (a registry under a global cap names
    /// each key's events, docs/design.md §9.2).
    pub const fn with_key<'b>(self, key: Option<&'b str>) -> Event<'b> {
        match self {
            Event::StateChange {
                old,
                new,
                generation,
                ..
            } => Event::StateChange {
                key,
                old,
                new,
                generation,
            },
            Event::Admit {
                id,
                class,
                revision,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => Event::Admit {
                key,
                id,
                class,
                revision,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
            },
            Event::Reject {
                id,
                class,
                revision,
                reason,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => Event::Reject {
                key,
                id,
                class,
                revision,
                reason,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
            },
            Event::ObserveBypass {
                id,
                class,
                revision,
                reason,
                ..
            } => Event::ObserveBypass {
                key,
                id,
                class,
                revision,
                reason,
            },
            Event::Release {
                id,
                class,
                revision,
                weight,
                held,
                used,
                ended,
                ..
            } => Event::Release {
                key,
                id,
                class,
                revision,
                weight,
                held,
                used,
                ended,
            },
            Event::Usage {
                id,
                class,
                revision,
                used,
                held,
                overrun,
                change,
                cancel,
                ..
            } => Event::Usage {
                key,
                id,
                class,
                revision,
                used,
                held,
                overrun,
                change,
                cancel,
            },
            Event::Shed {
                id,
                class,
                revision,
                victim,
                victim_class,
                ..
            } => Event::Shed {
                key,
                id,
                class,
                revision,
                victim,
                victim_class,
            },
            Event::Reconfigure {
                revision,
                limit,
                budget,
                observe,
                ..
            } => Event::Reconfigure {
                key,
                revision,
                limit,
                budget,
                observe,
            },
        }
    }

    /// The admission id of an admission's event (`None` for a state change or a
    /// reconfiguration).
    pub const fn id(&self) -> Option<u64> {
        match self {
            Event::Admit { id, .. }
            | Event::Reject { id, .. }
            | Event::ObserveBypass { id, .. }
            | Event::Release { id, .. }
            | Event::Usage { id, .. }
            | Event::Shed { id, .. } => Some(*id),
            Event::StateChange { .. } | Event::Reconfigure { .. } => None,
        }
    }
}

/// Receives a bulkhead's events. Implement [`on_event`](Self::on_event) for every event, or
/// just [`on_state_change`](Self::on_state_change) for breaker transitions (the default
/// `on_event` forwards them there and ignores the rest).
///
/// Called after the state commit, on the thread that committed it; it must not block (it runs
/// inside an admission, a release or a stats read). Under `std`, a panic in it is caught and
/// counted in `stats().observer_panics`; the admission, release or report that fired it goes
/// on as if the observer had returned (without `std` a panic is the host's panic handler's).
pub trait Observer {
    /// A breaker transition, once per transition.
    fn on_state_change(&self, key: Option<&str>, old: CircuitState, new: CircuitState) {
        let _ = (key, old, new);
    }

    /// Any event. The default forwards state changes to
    /// [`on_state_change`](Self::on_state_change) and ignores the rest.
    fn on_event(&self, event: &Event<'_>) {
        if let Event::StateChange { key, old, new, .. } = *event {
            self.on_state_change(key, old, new);
        }
    }

    /// Whether this observer takes the admission events (every kind but
    /// [`StateChange`](Event::StateChange)). Asked once, at construction. `false`: only state
    /// changes are delivered, no admission id is assigned and the bulkhead's plain path stays
    /// plain (no clock read, no event built) — for an observer of breaker transitions only,
    /// such as a binding's adapter. Default `true`.
    fn admission_events(&self) -> bool {
        true
    }
}

impl crate::policy::breaker::Transition {
    /// Delivers this transition to `observer` as an [`Event::StateChange`].
    pub fn notify<O: Observer + ?Sized>(self, key: Option<&str>, observer: &O) {
        observer.on_event(&self.event(key));
    }

    /// This transition as an [`Event::StateChange`] of the bulkhead under `key`.
    pub const fn event(self, key: Option<&str>) -> Event<'_> {
        Event::StateChange {
            key,
            old: self.old,
            new: self.new,
            generation: self.generation,
        }
    }
}

/// An observer shared by a bulkhead (or every bulkhead of a registry).
#[cfg(feature = "alloc")]
pub type SharedObserver = alloc::sync::Arc<dyn Observer + Send + Sync>;
