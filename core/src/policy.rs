//! The guarded-call path's state on a bulkhead (DESIGN §4): breaker check → admission → call
//! → outcome, recorded to the breaker and the adaptive limit.
//!
//! A bulkhead built with [`Config::resilience`](crate::Config::resilience) carries one
//! `Policies` allocation. Every call goes through three steps, which the Rust futures, the
//! [`Permit`](crate::Permit) and every binding use alike:
//!
//! 1. [`Bulkhead::begin_call`] — the breaker's admission check (`circuit_open`, counted in
//!    `rejected_by_reason`); returns a [`CallStart`] token. Before admission.
//! 2. Admission as usual (`try_acquire`, `enqueue`, …). If it is refused, end the call with
//!    [`Outcome::Ignored`] (a half-open probe gives its slot back). On a *queued* grant call
//!    [`Bulkhead::mark_granted`], so the adaptive sample measures grant → release.
//! 3. [`Bulkhead::end_call`] with the outcome, *before* releasing the permits: the breaker
//!    records it (a stale generation is ignored), the adaptive limit takes a sample and moves
//!    the limit through [`Bulkhead::set_limit`].
//!
//! On a plain bulkhead `begin_call` returns an inert token without reading the clock and
//! `end_call` returns at once. With policies, each step reads the host clock at most once; the
//! `_at` variants take the time from the caller instead (a binding that already read it).
//!
//! State-change events go to the [`Observer`] given at construction, after the commit, on the
//! committing thread.

use core::time::Duration;

use crate::{
    adaptive::{AdaptiveStats, Sample, SharedController},
    breaker::{Admit, Breaker, CircuitState, CircuitStats, Transition},
    bulkhead::Bulkhead,
    outcome::Outcome,
    reason::{AcquireError, Reason},
};

/// An observer shared by a bulkhead (or every bulkhead of a registry).
#[cfg(feature = "alloc")]
pub type SharedObserver = alloc::sync::Arc<dyn crate::breaker::Observer + Send + Sync>;

/// An optional observer that prints as `Some(..)` / `None` in `Debug` output.
#[cfg(feature = "alloc")]
#[derive(Clone, Default)]
pub(crate) struct ObserverField(pub(crate) Option<SharedObserver>);

#[cfg(feature = "alloc")]
impl core::fmt::Debug for ObserverField {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// The token of one guarded call, from [`Bulkhead::begin_call`] to [`Bulkhead::end_call`].
/// Plain data (`Copy`): a binding stores it next to its permit. Inert on a plain bulkhead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallStart {
    admit: Option<Admit>,
    started_ns: u64,
    tracked: bool,
}

impl CallStart {
    /// The token of a bulkhead without policies: `end_call` does nothing with it.
    pub const NONE: CallStart = CallStart {
        admit: None,
        started_ns: 0,
        tracked: false,
    };

    /// Whether `end_call` has anything to record.
    pub const fn is_tracked(&self) -> bool {
        self.tracked
    }

    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.admit.is_some_and(|a| a.is_probe())
    }

    /// When the call started (admission, or the grant after [`Bulkhead::mark_granted`]), in
    /// host-clock ns.
    pub const fn started_ns(&self) -> u64 {
        self.started_ns
    }
}

/// The policy state of one bulkhead.
pub(crate) struct Policies {
    breaker: Option<Breaker>,
    adaptive: Option<SharedController>,
    call_timeout: Option<Duration>,
    #[cfg(feature = "alloc")]
    observer: Option<SharedObserver>,
    #[cfg(feature = "alloc")]
    key: Option<alloc::boxed::Box<str>>,
}

impl core::fmt::Debug for Policies {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Policies")
            .field("breaker", &self.breaker)
            .field("adaptive", &self.adaptive)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

/// Where a bulkhead keeps its policies: a `Box` (never moved, one allocation at construction);
/// without `alloc` an empty type, so `Option<PolicyBox>` is always `None`.
#[cfg(feature = "alloc")]
pub(crate) type PolicyBox = alloc::boxed::Box<Policies>;

/// Without `alloc` there are no policies: this type has no values.
#[cfg(not(feature = "alloc"))]
#[derive(Debug)]
pub(crate) enum PolicyBox {}

#[cfg(not(feature = "alloc"))]
impl core::ops::Deref for PolicyBox {
    type Target = Policies;
    fn deref(&self) -> &Policies {
        match *self {}
    }
}

impl Policies {
    /// Builds the policies `config.resilience` asks for; `None` when it is off.
    #[cfg(feature = "alloc")]
    pub(crate) fn build(
        config: &crate::config::Config,
        observer: Option<SharedObserver>,
        key: Option<&str>,
    ) -> Result<Option<PolicyBox>, crate::config::ConfigError> {
        // `config` was validated by the caller (`Bulkhead::with_observer`).
        let r = &config.resilience;
        if r.is_off() {
            return Ok(None);
        }
        let breaker = match &r.breaker {
            Some(b) => Some(Breaker::new(*b).map_err(crate::config::ConfigError::Breaker)?),
            None => None,
        };
        let adaptive = match &r.adaptive {
            Some(a) => {
                Some(SharedController::new(a).map_err(crate::config::ConfigError::Adaptive)?)
            }
            None => None,
        };
        Ok(Some(alloc::boxed::Box::new(Policies {
            breaker,
            adaptive,
            call_timeout: r.call_timeout,
            observer,
            key: key.map(alloc::boxed::Box::from),
        })))
    }

    /// The limit the adaptive controller starts at (`initial_limit`), if there is one: the
    /// bulkhead must start there too, not at `max_concurrent`.
    pub(crate) fn initial_limit(&self) -> Option<u64> {
        self.adaptive.as_ref().map(SharedController::limit)
    }

    /// The adaptive controller, if attached.
    pub(crate) fn adaptive(&self) -> Option<&SharedController> {
        self.adaptive.as_ref()
    }

    /// Fires a transition at the observer (after its commit).
    fn fire(&self, t: Option<Transition>) {
        #[cfg(feature = "alloc")]
        if let (Some(t), Some(o)) = (t, &self.observer) {
            t.notify(self.key.as_deref(), &**o);
        }
        #[cfg(not(feature = "alloc"))]
        let _ = t;
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Whether this bulkhead has any policy (breaker, adaptive limit or call timeout).
    #[inline]
    pub fn has_policies(&self) -> bool {
        self.policies().is_some()
    }

    /// The configured `call_timeout`, if any. The core arms no timer: the caller (a Rust
    /// `call`, a binding) enforces it and ends the call with [`Outcome::Failure`] on overrun.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.policies().and_then(|p| p.call_timeout)
    }

    /// Step 1 of a guarded call (module docs): the breaker's check, before admission.
    ///
    /// # Errors
    /// [`AcquireError::Rejected`] with [`Reason::CircuitOpen`] (counted) when the breaker is
    /// open, or half-open with every probe slot taken.
    #[inline]
    pub fn begin_call(&self) -> Result<CallStart, AcquireError> {
        match self.policies() {
            None => Ok(CallStart::NONE),
            // The adaptive sample needs the start time; the breaker alone needs the clock only
            // when it is not closed.
            Some(p) if p.adaptive.is_some() => {
                let now = self.now_ns();
                self.begin(p, || now, now)
            }
            Some(p) => self.begin(p, || self.now_ns(), 0),
        }
    }

    /// [`begin_call`](Self::begin_call) at a time the caller read from this bulkhead's clock.
    ///
    /// # Errors
    /// As [`begin_call`](Self::begin_call).
    pub fn begin_call_at(&self, now_ns: u64) -> Result<CallStart, AcquireError> {
        match self.policies() {
            None => Ok(CallStart::NONE),
            Some(p) => self.begin(p, || now_ns, now_ns),
        }
    }

    /// [`begin_call`](Self::begin_call) for an acquire of `weight`: argument errors first (never
    /// counted), then the breaker. What every acquire path calls before admission.
    ///
    /// # Errors
    /// [`AcquireError::InvalidWeight`] (only when policies are attached: a plain bulkhead
    /// leaves the check to admission), then as [`begin_call`](Self::begin_call).
    #[inline]
    pub fn begin_call_for(&self, weight: u64) -> Result<CallStart, AcquireError> {
        if !self.has_policies() {
            return Ok(CallStart::NONE);
        }
        self.check_weight(weight)?;
        self.begin_call()
    }

    /// Step 2's refusal rule: ends `call` `Ignored` if admission refused it (any reason), and
    /// passes the result on. Wrap every admission of a begun call in it.
    ///
    /// # Errors
    /// `r`'s error, unchanged.
    #[inline]
    pub fn end_call_if_refused<T>(
        &self,
        call: CallStart,
        r: Result<T, AcquireError>,
    ) -> Result<T, AcquireError> {
        if r.is_err() {
            self.end_call(call, Outcome::Ignored);
        }
        r
    }

    fn begin(
        &self,
        p: &Policies,
        now_ns: impl FnOnce() -> u64,
        started_ns: u64,
    ) -> Result<CallStart, AcquireError> {
        let admit = match &p.breaker {
            None => None,
            Some(b) => match b.try_admit_with(now_ns) {
                Ok(mut a) => {
                    p.fire(a.transition.take());
                    Some(a)
                }
                Err(open) => {
                    p.fire(open.transition);
                    return Err(self.reject(Reason::CircuitOpen).into());
                }
            },
        };
        Ok(CallStart {
            admit,
            started_ns,
            tracked: true,
        })
    }

    /// For a call granted after queueing: restarts its RTT clock at the grant (one clock read,
    /// only when an adaptive limit is attached).
    pub fn mark_granted(&self, call: &mut CallStart) {
        if call.tracked && self.policies().is_some_and(|p| p.adaptive.is_some()) {
            call.started_ns = self.now_ns();
        }
    }

    /// Step 3 of a guarded call: records `outcome` to the breaker and the adaptive limit. Call
    /// it before releasing the call's permits. Does nothing for an inert token.
    #[inline]
    pub fn end_call(&self, call: CallStart, outcome: Outcome) {
        if call.tracked {
            self.end_call_at(call, outcome, self.now_ns());
        }
    }

    /// The call overran `call_timeout` (the host's timer fired): counts `call_timeout` in
    /// `rejected_by_reason` and ends the call [`Outcome::Failure`] now. The permits stay held
    /// until the work really ends; their release must not end the call again.
    pub fn end_call_timed_out(&self, call: CallStart) {
        self.count_call_timeout();
        self.end_call(call, Outcome::Failure);
    }

    /// [`end_call`](Self::end_call) at a time the caller read from this bulkhead's clock.
    pub fn end_call_at(&self, call: CallStart, outcome: Outcome, now_ns: u64) {
        let Some(p) = self.policies() else { return };
        if !call.tracked {
            return;
        }
        if let (Some(b), Some(a)) = (&p.breaker, call.admit) {
            p.fire(b.record(a, outcome, now_ns));
        }
        if let Some(c) = &p.adaptive {
            let sample = Sample {
                rtt_ns: now_ns.saturating_sub(call.started_ns),
                inflight: self.snapshot().active,
                outcome,
            };
            c.feed(sample, |limit| {
                // In range by construction (`max_limit ≤ max_concurrent`, `min_limit ≥ 1`).
                let _ = self.apply_limit(limit);
            });
        }
    }

    /// The breaker's state now (committing a due lazy transition and firing its event), or
    /// `None` without a breaker.
    pub fn circuit_state(&self) -> Option<CircuitState> {
        let p = self.policies()?;
        let b = p.breaker.as_ref()?;
        let (s, t) = b.state(self.now_ns());
        p.fire(t);
        Some(s)
    }

    pub(crate) fn circuit_stats(&self) -> Option<CircuitStats> {
        let p = self.policies()?;
        let b = p.breaker.as_ref()?;
        let mut s = b.snapshot(self.now_ns());
        p.fire(s.transition.take());
        Some(s)
    }

    pub(crate) fn adaptive_stats(&self) -> Option<AdaptiveStats> {
        Some(self.policies()?.adaptive.as_ref()?.stats())
    }
}
