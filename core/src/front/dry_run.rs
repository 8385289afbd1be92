//! The dry run (docs/design.md §5.6): [`Bulkhead::would_admit`] answers what
//! [`admit`](Bulkhead::admit) would decide for a [`Request`] now — through the same checks in
//! the same order (the arguments, the breaker, then the engine's
//! `Engine::would_admit`, which shares its check functions with
//! the real admission) — without taking, queueing, committing or counting anything.
//!
//! async-bulkhead-llm's dry run and its acquire disagree (its `would_admit` answers `shutdown`
//! where the real call answers `budget_limit`, ANCHORS-ADMISSION §4): here one set of
//! functions decides both, and a property test replays random operations comparing every
//! dry run with the real admission that follows it.

use crate::{
    engine::DryAdmit,
    front::{bulkhead::Bulkhead, request::Request},
    reason::{AcquireError, Reason},
};

/// What [`Bulkhead::would_admit`] predicts. A snapshot: under concurrency it is stale as soon
/// as it returns (another caller may take the permits first), so it is advice, never a hold —
/// single-threaded, the next `admit` of the same request decides exactly this.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WouldAdmit {
    /// Granted at once.
    AdmitNow,
    /// Queued: `ahead` live waiters are in front of it, so it would be the `position`-th
    /// (`ahead + 1`, 1-based) in the FIFO.
    WouldQueue {
        /// Its place in the queue, 1-based.
        position: u64,
        /// Live waiters ahead of it.
        ahead: u64,
    },
    /// Refused, with the error the real admission would return (its reason — or an invalid
    /// argument — and the counters now; not counted).
    Reject(AcquireError),
}

impl WouldAdmit {
    /// The reason of a [`Reject`](Self::Reject) (`None` for an invalid argument, and for an
    /// admission).
    pub fn reason(&self) -> Option<Reason> {
        match self {
            WouldAdmit::Reject(e) => e.reason(),
            _ => None,
        }
    }
}

impl<const N: usize> Bulkhead<N> {
    /// What [`admit`](Self::admit) of `request` would decide now, without doing it: nothing
    /// is taken, queued, committed (the breaker's lazy transitions and probe slots included)
    /// or counted. Thread-safe; see [`WouldAdmit`] for how far the answer holds.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Decision, Reason, Request, WouldAdmit};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, budget: Some(100), ..Config::default() })?;
    /// assert_eq!(bh.would_admit(&Request::new(1).cost(60)), WouldAdmit::AdmitNow);
    /// let Decision::Granted(_held) = bh.admit(&Request::new(1).cost(60), None) else { panic!() };
    /// let w = bh.would_admit(&Request::new(1).cost(60));
    /// assert_eq!(w, WouldAdmit::WouldQueue { position: 1, ahead: 0 });
    /// let w = bh.would_admit(&Request::new(1).cost(60).no_wait());
    /// assert_eq!(w.reason(), Some(Reason::ConcurrencyLimit));
    /// assert_eq!(bh.stats().rejected_by_reason.get(Reason::ConcurrencyLimit), 0); // not counted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn would_admit(&self, request: &Request) -> WouldAdmit {
        // As the admission would: expired reservations return their units first.
        self.expire_reservations();
        let (w, c) = match self
            .check_request(request.weight, request.cost)
            .and_then(|wc| {
                self.check_class(request.class, request.observe)
                    .map(|()| wc)
            }) {
            Ok(wc) => wc,
            Err(e) => return WouldAdmit::Reject(e),
        };
        if let Some(p) = self.policies() {
            if !p.would_begin(|| self.now_ns()) {
                return self.would_reject(Reason::CircuitOpen);
            }
        }
        // A deadline as the admission reads it (docs/design.md §5.9).
        let left = self.time_left(&request.deadline);
        if left == Some(core::time::Duration::ZERO) {
            return self.would_reject(Reason::Timeout);
        }
        if let Some(shed) = self.load_sheds(request.class, false) {
            return WouldAdmit::Reject(AcquireError::Rejected(shed));
        }
        let asked = request.queue_timeout.unwrap_or(self.queue_timeout());
        let timeout = self.queue_wait_within(request, left);
        let queue = !timeout.is_zero();
        match self.engine.would_admit(
            w,
            c,
            crate::engine::observe_bits(request.observe),
            queue,
            request.class,
            u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
        ) {
            Ok(DryAdmit::Now) => WouldAdmit::AdmitNow,
            Ok(DryAdmit::Queue { ahead }) => WouldAdmit::WouldQueue {
                position: ahead + 1,
                ahead,
            },
            // A deadline too close to wait for: the admission refuses `timeout`.
            Err(r) if !asked.is_zero() && !queue && r != Reason::Shutdown => {
                self.would_reject(Reason::Timeout)
            }
            Err(reason) => {
                #[allow(unused_mut)]
                let mut r = self.engine.rejection(reason);
                // A classed refusal names its class and bound, as the admission's does.
                #[cfg(feature = "alloc")]
                self.engine.name_class(&mut r, w, c, request.class);
                WouldAdmit::Reject(AcquireError::Rejected(r))
            }
        }
    }

    fn would_reject(&self, reason: Reason) -> WouldAdmit {
        WouldAdmit::Reject(AcquireError::Rejected(self.engine.rejection(reason)))
    }
}
