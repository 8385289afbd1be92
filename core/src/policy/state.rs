//! One bulkhead's policy state and the token of one guarded call (docs/design.md §6.3).
//!
//! A bulkhead built with [`Config::resilience`](crate::Config::resilience) carries one
//! [`Policies`] allocation. Every guarded call goes through three steps, which the front ends
//! run for every handle type alike ([`Call`](crate::Call), [`Waiter`](crate::Waiter), the
//! futures, the blocking waits): [`Policies::begin`] before admission (the breaker's check;
//! `circuit_open`), admission as usual, and [`Policies::end`] with the outcome before the permits
//! return (the breaker records it, a stale generation is ignored; the adaptive limit takes a
//! sample and moves the limit). A refused or abandoned admission ends the call `ignored`.
//!
//! Nothing here knows the bulkhead: the caller hands in the time, the calls in flight and how
//! to apply a new limit.

use core::time::Duration;

use crate::{
    outcome::Outcome,
    policy::{
        adaptive::{AdaptiveStats, Sample, SharedController},
        breaker::{Admit, Breaker, CircuitState, CircuitStats, Transition},
    },
};

/// The token of one guarded call, from admission to its end. Plain data (`Copy`); a [`Call`]
/// carries it, and a queued waiter's cell stores it. Inert on a plain bulkhead.
///
/// [`Call`]: crate::Call
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallStart {
    pub(crate) admit: Option<Admit>,
    pub(crate) started_ns: u64,
    pub(crate) tracked: bool,
}

/// The token of one guarded call (the name the admission API uses for [`CallStart`]).
pub type CallToken = CallStart;

impl CallStart {
    /// The token of a bulkhead without policies: ending it does nothing.
    pub const NONE: CallStart = CallStart {
        admit: None,
        started_ns: 0,
        tracked: false,
    };

    /// Whether ending the call has anything to record.
    pub const fn is_tracked(&self) -> bool {
        self.tracked
    }

    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.admit.is_some_and(|a| a.is_probe())
    }

    /// When the call started (admission, or the grant for a call that queued), in host-clock ns.
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
    observer: Option<crate::event::SharedObserver>,
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

/// A policy whose configuration its constructor refused (the config layer turns it into a
/// [`ConfigError`](crate::ConfigError)).
#[derive(Debug, Clone, Copy, PartialEq)]
// Built only where policies can be (the `alloc` feature); the firmware builds name it only.
#[cfg_attr(not(feature = "alloc"), allow(dead_code))]
pub(crate) enum PolicyError {
    Breaker(crate::policy::breaker::BreakerConfigError),
    Adaptive(crate::policy::adaptive::AdaptiveConfigError),
}

/// The breaker refused the call (`circuit_open`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CircuitOpen;

impl Policies {
    /// Builds the policies `resilience` asks for (validated by the caller); `None` when it is
    /// off.
    #[cfg(feature = "alloc")]
    pub(crate) fn build(
        resilience: &crate::policy::resilience::Resilience,
        observer: Option<crate::event::SharedObserver>,
        key: Option<&str>,
    ) -> Result<Option<PolicyBox>, PolicyError> {
        if resilience.is_off() {
            return Ok(None);
        }
        let breaker = match &resilience.breaker {
            Some(b) => Some(Breaker::new(*b).map_err(PolicyError::Breaker)?),
            None => None,
        };
        let adaptive = match &resilience.adaptive {
            Some(a) => Some(SharedController::new(a).map_err(PolicyError::Adaptive)?),
            None => None,
        };
        Ok(Some(alloc::boxed::Box::new(Policies {
            breaker,
            adaptive,
            call_timeout: resilience.call_timeout,
            observer,
            key: key.map(alloc::boxed::Box::from),
        })))
    }

    /// The limit the adaptive controller starts at, if there is one.
    #[cfg(feature = "alloc")]
    pub(crate) fn initial_limit(&self) -> Option<u64> {
        self.adaptive.as_ref().map(SharedController::limit)
    }

    /// The adaptive controller, if attached.
    pub(crate) fn adaptive(&self) -> Option<&SharedController> {
        self.adaptive.as_ref()
    }

    /// The configured `call_timeout`.
    pub(crate) fn call_timeout(&self) -> Option<Duration> {
        self.call_timeout
    }

    /// Whether the start time of a call is needed (an adaptive limit measures its RTT).
    pub(crate) fn times_calls(&self) -> bool {
        self.adaptive.is_some()
    }

    /// Delivers a transition to the observer (after its commit).
    fn fire(&self, t: Option<Transition>) {
        #[cfg(feature = "alloc")]
        if let (Some(t), Some(o)) = (t, &self.observer) {
            t.notify(self.key.as_deref(), &**o);
        }
        #[cfg(not(feature = "alloc"))]
        let _ = t;
    }

    /// Step 1: the breaker's admission check. `now_ns` is read only when the breaker is not
    /// closed; `started_ns` is the call's start (read by the caller when [`times_calls`]).
    ///
    /// [`times_calls`]: Self::times_calls
    pub(crate) fn begin(
        &self,
        now_ns: impl FnOnce() -> u64,
        started_ns: u64,
    ) -> Result<CallStart, CircuitOpen> {
        let admit = match &self.breaker {
            None => None,
            Some(b) => match b.try_admit_with(now_ns) {
                Ok(mut a) => {
                    self.fire(a.transition.take());
                    Some(a)
                }
                Err(open) => {
                    self.fire(open.transition);
                    return Err(CircuitOpen);
                }
            },
        };
        Ok(CallStart {
            admit,
            started_ns,
            tracked: true,
        })
    }

    /// Whether [`begin`](Self::begin) would pass the breaker now (a dry run: nothing is
    /// committed or fired). `true` without a breaker.
    pub(crate) fn would_begin(&self, now_ns: impl FnOnce() -> u64) -> bool {
        match &self.breaker {
            None => true,
            Some(b) => b.would_admit_with(now_ns),
        }
    }

    /// Step 3: records `outcome` at `now_ns` to the breaker and the adaptive limit (`inflight`:
    /// the calls in flight, itself included); `apply` moves the bulkhead's limit.
    pub(crate) fn end(
        &self,
        call: CallStart,
        outcome: Outcome,
        now_ns: u64,
        inflight: impl FnOnce() -> u64,
        apply: impl Fn(u64),
    ) {
        if !call.tracked {
            return;
        }
        if let (Some(b), Some(a)) = (&self.breaker, call.admit) {
            self.fire(b.record(a, outcome, now_ns));
        }
        if let Some(c) = &self.adaptive {
            let sample = Sample {
                rtt_ns: now_ns.saturating_sub(call.started_ns),
                inflight: inflight(),
                outcome,
            };
            c.feed(sample, apply);
        }
    }

    /// The breaker's state at `now_ns` (committing a due lazy transition and firing its event).
    pub(crate) fn circuit_state(&self, now_ns: u64) -> Option<CircuitState> {
        let b = self.breaker.as_ref()?;
        let (s, t) = b.state(now_ns);
        self.fire(t);
        Some(s)
    }

    /// The breaker's stats at `now_ns` (as [`circuit_state`](Self::circuit_state)).
    pub(crate) fn circuit_stats(&self, now_ns: u64) -> Option<CircuitStats> {
        let b = self.breaker.as_ref()?;
        let mut s = b.snapshot(now_ns);
        self.fire(s.transition.take());
        Some(s)
    }

    pub(crate) fn adaptive_stats(&self) -> Option<AdaptiveStats> {
        Some(self.adaptive.as_ref()?.stats())
    }
}
