//! Admission events (docs/design.md §8.2): the steps that build and deliver each event after
//! the state commit it reports, through the bulkhead's
//! [`Emitter`](crate::front::emitter::Emitter).
//!
//! A bulkhead without an observer has no emitter: its calls carry admission id 0, and every
//! step here starts with a test of that id or of `Option<&Emitter>` — no clock read, no event
//! built (`bench/callgrind.sh` pins the plain path).

use crate::{
    engine::CellRecord,
    event::Event,
    front::{
        bulkhead::Bulkhead,
        emitter::{Asked, Emitter},
    },
    reason::Reason,
    sync::Word,
};

/// The observe bits of a tag as the reason observe mode let through (calls first, as
/// `count_observed` counts).
fn bypassed(short: Word) -> Option<Reason> {
    use crate::engine::{OBSERVE_BUDGET, OBSERVE_CALLS};
    if short & OBSERVE_CALLS != 0 {
        Some(Reason::ConcurrencyLimit)
    } else if short & OBSERVE_BUDGET != 0 {
        Some(Reason::BudgetLimit)
    } else {
        None
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Whether admission events are built (an observer that takes them).
    #[inline]
    pub(crate) fn emits_admissions(&self) -> bool {
        self.emitter().is_some_and(Emitter::admissions)
    }

    /// Delivers a breaker transition as an [`Event::StateChange`] (after its commit).
    pub(crate) fn fire(&self, t: crate::policy::breaker::Transition) {
        if let Some(e) = self.emitter() {
            e.deliver(&t.event(e.key()));
        }
    }

    /// The clock for an event's times (0 without a clock).
    fn event_clock(&self) -> u64 {
        self.now_ns()
    }

    /// The clock at a decision's start, read only for an admission with an id.
    #[inline]
    pub(crate) fn decision_start(&self, id: u64) -> Option<u64> {
        (id != 0).then(|| self.event_clock())
    }

    fn revision_now(&self) -> u64 {
        self.engine.revision()
    }

    /// An admission granted: its `ObserveBypass` (if observe mode let it through short) and
    /// its `Admit`. `queued`: the waiter's cell stamps (`Some` after queueing).
    #[cold]
    pub(crate) fn emit_admit(&self, a: Asked, short: Word, queued: Option<CellRecord>) {
        let Some(e) = self.emitter() else { return };
        let end = self.event_clock();
        let revision = self.revision_now();
        if let Some(reason) = bypassed(short) {
            e.deliver(&Event::ObserveBypass {
                key: e.key(),
                id: a.id,
                class: a.class,
                revision,
                reason,
            });
        }
        e.deliver(&Event::Admit {
            key: e.key(),
            id: a.id,
            class: a.class,
            revision,
            weight: a.weight,
            cost: a.cost,
            queued: queued.is_some(),
            decision_ns: a.start_ns.map_or(0, |s| end.saturating_sub(s)),
            wait_ns: queued.map_or(0, |q| q.granted_ns.wrapping_sub(q.enqueued_ns) as u64),
        });
    }

    /// An admission refused with `reason`: at once (`queued` `None`) or after queueing (the
    /// waiter's cell stamps; the wait runs to now).
    #[cold]
    pub(crate) fn emit_reject(&self, a: Asked, reason: Reason, queued: Option<CellRecord>) {
        let Some(e) = self.emitter() else { return };
        let end = self.event_clock();
        e.deliver(&Event::Reject {
            key: e.key(),
            id: a.id,
            class: a.class,
            revision: self.revision_now(),
            reason,
            weight: a.weight,
            cost: a.cost,
            queued: queued.is_some(),
            decision_ns: a.start_ns.map_or(0, |s| end.saturating_sub(s)),
            wait_ns: queued.map_or(0, |q| (end as Word).wrapping_sub(q.enqueued_ns) as u64),
        });
    }

    /// A call returned `weight` permits holding `held` budget units (`used`: its settled
    /// usage at its end; `None` for a partial release).
    #[cold]
    pub(crate) fn emit_release(
        &self,
        id: u64,
        class: u16,
        weight: u64,
        held: u64,
        used: Option<u64>,
        ended: bool,
    ) {
        let Some(e) = self.emitter() else { return };
        e.deliver(&Event::Release {
            key: e.key(),
            id,
            class,
            revision: self.revision_now(),
            weight,
            held,
            used,
            ended,
        });
    }

    /// A streaming call's usage report.
    #[cold]
    pub(crate) fn emit_usage(
        &self,
        id: u64,
        class: u16,
        report: &crate::front::usage::UsageReport,
    ) {
        let Some(e) = self.emitter() else { return };
        e.deliver(&Event::Usage {
            key: e.key(),
            id,
            class,
            revision: self.revision_now(),
            used: report.used,
            held: report.held,
            overrun: report.overrun,
            change: report.change,
            cancel: report.cancel,
        });
    }

    /// A shedding arrival took the place of waiter `victim` (class `victim_class`).
    #[cfg(feature = "alloc")]
    #[cold]
    pub(crate) fn emit_shed(&self, a: Asked, victim: u64, victim_class: u16) {
        let Some(e) = self.emitter() else { return };
        e.deliver(&Event::Shed {
            key: e.key(),
            id: a.id,
            class: a.class,
            revision: self.revision_now(),
            victim,
            victim_class,
        });
    }

    /// The limits changed (after the install).
    pub(crate) fn emit_reconfigure(&self) {
        let Some(e) = self.emitter().filter(|e| e.admissions()) else {
            return;
        };
        let snap = self.engine.snapshot();
        e.deliver(&Event::Reconfigure {
            key: e.key(),
            revision: self.revision_now(),
            limit: snap.limit,
            budget: self.engine.budget_stats().map(|b| b.limit),
            observe: self.engine.observe(),
        });
    }
}
