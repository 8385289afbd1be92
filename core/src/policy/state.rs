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
    sync::Word,
};

/// The token of one guarded call, from admission to its end. Plain data (`Copy`); a [`Call`]
/// carries it, and a queued waiter's cell stores it. Inert on a plain bulkhead.
///
/// [`Call`]: crate::Call
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallStart {
    /// The breaker's admission word ([`Admit::word`]), meaningful when `has_admit`. Kept as a
    /// word, not an `Option<Admit>` (whose transition is always taken by then): a smaller
    /// token is cheaper to move on the plain path.
    pub(crate) admit: Word,
    pub(crate) started_ns: u64,
    pub(crate) has_admit: bool,
    pub(crate) tracked: bool,
    /// The admission id (docs/design.md §8.2); 0 on a bulkhead without an observer.
    pub(crate) id: u64,
    /// The admission class (docs/design.md §4.8); 0 on a bulkhead without classes.
    pub(crate) class: u16,
}

/// The token of one guarded call (the name the admission API uses for [`CallStart`]).
pub type CallToken = CallStart;

impl CallStart {
    /// The token of a bulkhead without policies: ending it does nothing.
    pub const NONE: CallStart = CallStart {
        admit: 0,
        started_ns: 0,
        has_admit: false,
        tracked: false,
        id: 0,
        class: 0,
    };

    /// Whether ending the call has anything to record.
    pub const fn is_tracked(&self) -> bool {
        self.tracked
    }

    /// The admission id (docs/design.md §8.2): the id of this admission's events; 0 on a
    /// bulkhead without an observer.
    pub const fn id(&self) -> u64 {
        self.id
    }

    /// The breaker's admission of this call, if it passed a breaker.
    pub(crate) fn breaker_admit(&self) -> Option<Admit> {
        self.has_admit.then(|| Admit::from_word(self.admit))
    }

    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.breaker_admit().is_some_and(|a| a.is_probe())
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
        events: bool,
    ) -> Result<Option<PolicyBox>, PolicyError> {
        if resilience.is_off() && !events {
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

    /// Step 1: the breaker's admission check. `now_ns` is read only when the breaker is not
    /// closed; `started_ns` is the call's start (read by the caller when [`times_calls`]).
    ///
    /// [`times_calls`]: Self::times_calls
    pub(crate) fn begin(
        &self,
        now_ns: impl FnOnce() -> u64,
        started_ns: u64,
        fire: impl Fn(Transition),
    ) -> Result<CallStart, CircuitOpen> {
        let admit = match &self.breaker {
            None => None,
            Some(b) => match b.try_admit_with(now_ns) {
                Ok(mut a) => {
                    a.transition.take().map(&fire);
                    Some(a)
                }
                Err(open) => {
                    open.transition.map(&fire);
                    return Err(CircuitOpen);
                }
            },
        };
        Ok(CallStart {
            admit: admit.map_or(0, |a| a.word()),
            started_ns,
            has_admit: admit.is_some(),
            tracked: true,
            id: 0,
            class: 0,
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
        fire: impl Fn(Transition),
    ) {
        if !call.tracked {
            return;
        }
        if let (Some(b), Some(a)) = (&self.breaker, call.breaker_admit()) {
            b.record(a, outcome, now_ns).map(fire);
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
    pub(crate) fn circuit_state(
        &self,
        now_ns: u64,
        fire: impl Fn(Transition),
    ) -> Option<CircuitState> {
        let b = self.breaker.as_ref()?;
        let (s, t) = b.state(now_ns);
        t.map(fire);
        Some(s)
    }

    /// The breaker's stats at `now_ns` (as [`circuit_state`](Self::circuit_state)).
    pub(crate) fn circuit_stats(
        &self,
        now_ns: u64,
        fire: impl Fn(Transition),
    ) -> Option<CircuitStats> {
        let b = self.breaker.as_ref()?;
        let mut s = b.snapshot(now_ns);
        s.transition.take().map(fire);
        Some(s)
    }

    pub(crate) fn adaptive_stats(&self) -> Option<AdaptiveStats> {
        Some(self.adaptive.as_ref()?.stats())
    }
}
