//! One admission, one object (docs/design.md §5.1): [`Bulkhead::admit`] takes a
//! [`Request`] and answers a [`Decision`] — [`Granted`](Decision::Granted) with a [`Call`],
//! [`Queued`](Decision::Queued) with a [`Waiter`], or [`Rejected`](Decision::Rejected). Every
//! front end and binding admits through here: the futures, the blocking waits, `try_acquire`,
//! and the Python, Node and C layers, which store these handles and nothing else.

use core::{ops::Deref, task::Waker, time::Duration};

use crate::{
    engine::{Admitted, observe_bits},
    front::{
        bulkhead::Bulkhead,
        call::{Call, Permit},
        emitter::Asked,
        request::Request,
        waiter::Waiter,
    },
    outcome::Outcome,
    policy::state::CallStart,
    reason::{AcquireError, Reason},
};

/// What one admission decided.
#[must_use = "a granted call holds permits, a queued waiter holds a place"]
pub enum Decision<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// Admitted at once: the call holds the permits.
    Granted(Call<B, N>),
    /// Queued: poll the waiter until it settles; arm its
    /// [`queue_timeout`](Waiter::queue_timeout).
    Queued(Waiter<B, N>),
    /// Refused (a reason, or an invalid argument); the call, if one began, ended `ignored`.
    Rejected(AcquireError),
}

impl<B, const N: usize> core::fmt::Debug for Decision<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Decision::Granted(c) => f.debug_tuple("Granted").field(c).finish(),
            Decision::Queued(w) => f.debug_tuple("Queued").field(w).finish(),
            Decision::Rejected(e) => f.debug_tuple("Rejected").field(e).finish(),
        }
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Admits `request`: at once, or queued (the waiter's `waker`, if any, is woken when it
    /// settles; with `queue_timeout` zero it never queues), or refused. On a bulkhead with
    /// policies this begins the guarded call: the weight is checked, then the breaker
    /// (`circuit_open`), then admission; a refusal ends the call `ignored`.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use hullguard_core::{Bulkhead, Config, Decision, Outcome, Reason, Request};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, ..Config::default() })?;
    /// let Decision::Granted(call) = bh.admit(&Request::new(1), None) else { panic!() };
    /// let Decision::Queued(mut waiter) = bh.admit(&Request::new(1), None) else { panic!() };
    /// assert_eq!(waiter.queue_timeout(), Duration::from_secs(30)); // the host arms it
    /// call.end(Outcome::Success); // the head waiter is granted
    /// let next = waiter.poll(None); // `Ready(Ok(call))`
    /// assert!(matches!(next, std::task::Poll::Ready(Ok(_))));
    /// let refused = bh.admit(&Request::new(1).no_wait(), None);
    /// assert!(matches!(refused, Decision::Rejected(e) if e.reason() == Some(Reason::ConcurrencyLimit)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn admit(&self, request: &Request, waker: Option<&Waker>) -> Decision<&Self, N> {
        Self::admit_via(self, request, waker)
    }

    /// [`admit`](Self::admit) on an `Arc`: the handles keep the bulkhead alive (`'static`).
    #[cfg(feature = "alloc")]
    pub fn admit_owned(
        self: &alloc::sync::Arc<Self>,
        request: &Request,
        waker: Option<&Waker>,
    ) -> Decision<alloc::sync::Arc<Self>, N> {
        Self::admit_via(self.clone(), request, waker)
    }

    /// [`admit`](Self::admit) through any handle `B` to the bulkhead (a reference, an `Arc`).
    pub fn admit_via<B>(bh: B, request: &Request, waker: Option<&Waker>) -> Decision<B, N>
    where
        B: Deref<Target = Self>,
    {
        if let Err(e) = bh.check_class(request.class, request.observe) {
            return Decision::Rejected(e);
        }
        let (w, c, mut call) = match bh.begin(request.weight, request.cost, request.class) {
            Ok(begun) => begun,
            Err(e) => return Decision::Rejected(e),
        };
        call.class = request.class;
        let start_ns = bh.decision_start(call.id);
        let observe = observe_bits(request.observe);
        // The default timeout's word is tested raw; the `Duration` is built only to queue.
        let no_wait = match request.queue_timeout {
            Some(t) => t.is_zero(),
            None => bh.queue_timeout_is_zero(),
        };
        // A deadline (docs/design.md §5.9): the time left, read only when one is given.
        let left = bh.time_left(&request.deadline);
        let wait = || bh.queue_wait_within(request, left);
        let admitted = if left == Some(Duration::ZERO) {
            // Passed: refused `timeout` now, never queued (C36).
            Err(bh.engine.reject(Reason::Timeout))
        } else if let Some(shed) = bh.load_sheds(request.class, true) {
            // An overload signal sheds this non-critical class (docs/design.md §4.11).
            Err(shed)
        } else if no_wait {
            bh.engine
                .take_observing(w, c, observe, request.class)
                .map(Admitted::Now)
        } else if left.is_some() && wait().is_zero() {
            // Too little left to wait for a grant and still do the work.
            bh.engine
                .take_or_time_out(w, c, observe, request.class)
                .map(Admitted::Now)
        } else {
            bh.engine.enqueue(
                w,
                c,
                waker,
                Self::pack(call),
                observe,
                request.class,
                // Read only for a request a rate holds back (docs/design.md §4.9).
                || u64::try_from(wait().as_nanos()).unwrap_or(u64::MAX),
            )
        };
        if call.id != 0 && admitted.is_ok() {
            // One out-of-line step for the events; the plain path tests the id only. A
            // refusal's event follows the breaker's record below (after every commit).
            bh.emit_decided(call.id, request, start_ns, &admitted);
        }
        match admitted {
            Ok(Admitted::Now(_)) => Decision::Granted(Call::from_parts_with_cost(
                bh,
                request.weight,
                request.cost,
                call,
            )),
            Ok(Admitted::Queued(t)) => {
                let timeout = wait();
                Decision::Queued(Waiter::new(bh, t, timeout))
            }
            Err(rejection) => {
                bh.finish(call, Outcome::Ignored);
                if call.id != 0 {
                    bh.emit_decided(call.id, request, start_ns, &Err(rejection));
                }
                Decision::Rejected(rejection.into())
            }
        }
    }

    /// The event of an admission decided at once (`admit` or `reject`; a queued one has its
    /// events when it settles).
    #[cold]
    #[inline(never)]
    fn emit_decided(
        &self,
        id: u64,
        request: &Request,
        start_ns: Option<u64>,
        admitted: &Result<Admitted, crate::reason::Rejection>,
    ) {
        let asked = Asked {
            id,
            class: request.class,
            weight: request.weight,
            cost: request.cost,
            start_ns,
        };
        match admitted {
            Ok(Admitted::Now(short)) => self.emit_admit(asked, *short, None),
            Ok(Admitted::Queued(t)) => {
                // A shedding arrival that took a lower-priority waiter's place.
                #[cfg(feature = "alloc")]
                if let Some((victim, victim_class)) = self.engine.shed_victim(t.0) {
                    self.emit_shed(asked, victim, victim_class);
                }
                #[cfg(not(feature = "alloc"))]
                let _ = t;
            }
            Err(rejection) => self.emit_reject(asked, rejection.reason, None),
        }
    }

    /// The uncontended step of [`admit`](Self::admit) for a binding's hot path: `Some(call)`
    /// when `admit(&Request::new(weight), _)` would grant at once and nothing else would run —
    /// a bulkhead without policies, an observer or classes, with the permits free and nobody
    /// queued (no barging). `None` otherwise, with nothing counted or changed: the caller then
    /// runs `admit`, which decides (and counts a refusal). Same grant, same stats as `admit`'s
    /// (docs/design.md §5); it skips only the steps a plain bulkhead does not have (the
    /// request's class and observe checks, the events' call id and clock read). Lock-free.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, ..Config::default() })?;
    /// let call = bh.take_now(1).expect("free");
    /// assert!(bh.take_now(1).is_none()); // full: `admit` decides (queue or refuse)
    /// assert_eq!(bh.stats().rejected_by_reason.total(), 0); // nothing counted
    /// drop(call);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn take_now(&self, weight: u64) -> Option<Call<&Self, N>> {
        if self.policies().is_some() || self.engine.is_classed() {
            return None;
        }
        let w = self.engine.check_weight(weight).ok()?;
        self.engine.take_quietly(w)?;
        Some(Call::from_parts(self, weight, CallStart::NONE))
    }

    /// A handle for a queued ticket its caller owns (see [`Waiter::from_ticket`]).
    pub fn waiter(&self, ticket: crate::engine::Ticket) -> Waiter<&Self, N> {
        Waiter::from_ticket(self, ticket)
    }

    /// Takes `weight` permits now as a guarded call, or fails without waiting.
    ///
    /// # Errors
    /// `concurrency_limit` when not admitted at once (including while a waiter is queued: no
    /// barging), `shutdown` after [`close`](Self::close), `circuit_open`,
    /// [`AcquireError::InvalidWeight`] for 0 or a weight above `max_concurrent`.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Reason};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, ..Config::default() }).unwrap();
    /// let held = bh.try_acquire(1).unwrap();
    /// assert_eq!(bh.try_acquire(1).unwrap_err().reason(), Some(Reason::ConcurrencyLimit));
    /// drop(held);
    /// assert!(bh.try_acquire(1).is_ok());
    /// ```
    #[inline]
    pub fn try_acquire(&self, weight: u64) -> Result<Permit<'_, N>, AcquireError> {
        Self::try_via(self, weight)
    }

    /// [`try_acquire`](Self::try_acquire) returning a call that owns an `Arc` of the bulkhead.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    #[cfg(feature = "alloc")]
    pub fn try_acquire_owned(
        self: &alloc::sync::Arc<Self>,
        weight: u64,
    ) -> Result<crate::front::call::OwnedPermit<N>, AcquireError> {
        Self::try_via(self.clone(), weight)
    }

    #[inline]
    fn try_via<B: Deref<Target = Self>>(bh: B, weight: u64) -> Result<Call<B, N>, AcquireError> {
        let w = bh.engine.check_weight(weight)?;
        // Only the token differs between the two paths: the call is built here from constants
        // otherwise, so its drop folds (building it in the out-of-line path cost the
        // uncontended pair 24 instructions in `bench/callgrind.sh`, measured A/B).
        let call = if bh.policies().is_some() {
            bh.try_guarded(weight, w)?
        } else {
            bh.engine.take(w, 0)?;
            CallStart::NONE
        };
        Ok(Call::from_parts(bh, weight, call))
    }

    /// The take of [`try_via`](Self::try_via) on a bulkhead with policies or an observer: the
    /// breaker's check, the take, the events. Out of line: the plain path does not carry it.
    #[inline(never)]
    fn try_guarded(&self, weight: u64, w: crate::sync::Word) -> Result<CallStart, AcquireError> {
        let call = self.start_call()?;
        let asked = Asked {
            id: call.id,
            class: 0,
            weight,
            cost: 0,
            start_ns: self.decision_start(call.id),
        };
        let taken = match self.load_sheds(0, true) {
            Some(shed) => Err(shed),
            None => self.engine.take_observing(w, 0, 0, 0),
        };
        match taken {
            Ok(short) => {
                if call.id != 0 {
                    self.emit_admit(asked, short, None);
                }
                Ok(call)
            }
            Err(rejection) => {
                self.finish(call, Outcome::Ignored);
                if call.id != 0 {
                    self.emit_reject(asked, rejection.reason, None);
                }
                Err(rejection.into())
            }
        }
    }
}
