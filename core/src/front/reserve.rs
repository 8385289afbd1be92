//! Two-phase admission (docs/design.md §5.8): [`Bulkhead::reserve`] admits a request at once
//! and parks its permits, budget units and guarded-call token in the bulkhead's reservation
//! table under a TTL; the returned [`Reservation`] is then [`commit`](Reservation::commit)ted
//! (a [`Call`], as if `admit` had granted it) or [`abort`](Reservation::abort)ed (everything
//! returns, counted refunded). A gateway takes an external lease between the two without
//! racing the admission: the capacity is held, not re-decided.
//!
//! An unclaimed reservation **expires** at its deadline: the first admission, reservation,
//! stats read or [`Bulkhead::expire_reservations`] at or after it returns its units (counted in
//! `reservations_expired_total`), and a later commit answers [`ReservationExpired`]. The core
//! arms no timer: a host that must return the units at the deadline itself, with no traffic,
//! calls `expire_reservations` from its timer.

use core::{fmt, ops::Deref, time::Duration};

use crate::{
    front::{
        admit::Decision,
        bulkhead::Bulkhead,
        call::Call,
        request::Request,
        reservations::{Claim, Held},
    },
    outcome::Outcome,
    reason::AcquireError,
};

/// Why [`Bulkhead::reserve`] refused; nothing is held.
#[derive(Debug, Clone, PartialEq)]
pub enum ReserveError {
    /// The admission refused (a reason, or an invalid argument), as `admit` with no wait would.
    Rejected(AcquireError),
    /// Every reservation slot is held: `max_reservations` (0: reservations are off).
    Full {
        /// The bulkhead's `max_reservations`.
        max_reservations: u64,
    },
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected(e) => e.fmt(f),
            Self::Full {
                max_reservations: 0,
            } => f.write_str("max_reservations is 0: reservations are off for this bulkhead"),
            Self::Full { max_reservations } => write!(
                f,
                "all {max_reservations} reservations (max_reservations) are held"
            ),
        }
    }
}

impl core::error::Error for ReserveError {}

impl From<AcquireError> for ReserveError {
    fn from(e: AcquireError) -> Self {
        Self::Rejected(e)
    }
}

/// A commit came after the reservation's TTL: its units had returned already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationExpired;

impl fmt::Display for ReservationExpired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the reservation expired (its ttl passed) before the commit")
    }
}

impl core::error::Error for ReservationExpired {}

/// A reserved admission on a bulkhead reached through `B`: its units are held until
/// [`commit`](Self::commit), [`abort`](Self::abort), a drop (an abort) or its deadline.
#[must_use = "dropping a reservation aborts it"]
pub struct Reservation<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    bh: Option<B>,
    claim: Claim,
    weight: u64,
    cost: u64,
    deadline_ns: u64,
}

impl<B, const N: usize> Reservation<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// Permits held.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// Budget units held.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The deadline on the bulkhead's clock, ns (`u64::MAX`: none).
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }

    /// Turns the reservation into a [`Call`] holding its units (the guarded call's RTT starts
    /// now).
    ///
    /// # Errors
    /// [`ReservationExpired`] when its deadline passed first (the units had returned; nothing
    /// is held). A commit exactly at the deadline that wins the slot still commits.
    pub fn commit(mut self) -> Result<Call<B, N>, ReservationExpired> {
        let bh = self.bh.take().expect("a live reservation has its bulkhead");
        let table = bh.reservations().expect("a reservation has a table");
        match table.take(self.claim) {
            Some(h) => {
                let call = bh.granted_after_queueing(Bulkhead::<N>::unpack(h.call));
                Ok(Call::from_parts_with_cost(bh, h.weight, h.cost, call).at_revision(h.revision))
            }
            None => Err(ReservationExpired),
        }
    }

    /// Returns everything now (budget units counted refunded; the call ends `ignored`).
    /// Nothing happens if it expired first.
    pub fn abort(mut self) {
        self.abort_now();
    }

    fn abort_now(&mut self) {
        if let Some(bh) = self.bh.take() {
            if let Some(h) = bh.reservations().and_then(|t| t.take(self.claim)) {
                Bulkhead::<N>::end_reserved(&bh, h);
            }
        }
    }
}

impl<B, const N: usize> Drop for Reservation<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn drop(&mut self) {
        self.abort_now();
    }
}

impl<B, const N: usize> fmt::Debug for Reservation<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("weight", &self.weight)
            .field("cost", &self.cost)
            .field("deadline_ns", &self.deadline_ns)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> Bulkhead<N> {
    /// Reserves `request` for at most `ttl` (docs/design.md §5.8): admitted at once or
    /// refused — never queued — with the same checks and counting as
    /// [`admit`](Self::admit) (an `admit` event with an observer); the units are held until
    /// the reservation is committed, aborted, dropped or expires (`Duration::MAX`: no TTL).
    /// Expired reservations are swept first, so their units are free for this one.
    ///
    /// # Errors
    /// [`ReserveError::Rejected`] as `admit` with no wait; [`ReserveError::Full`] when
    /// `max_reservations` are held (0, the default: reservations are off).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use hullguard_core::{Bulkhead, Config, Request};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, max_reservations: 4, ..Config::default() })?;
    /// let r = bh.reserve(&Request::new(1), Duration::from_secs(5))?;
    /// assert!(bh.try_acquire(1).is_err()); // held while the gateway takes its lease
    /// let call = r.commit()?; // the lease came through: run it
    /// drop(call);
    /// assert!(bh.try_acquire(1).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve(
        &self,
        request: &Request,
        ttl: Duration,
    ) -> Result<Reservation<&Self, N>, ReserveError> {
        Self::reserve_via(self, request, ttl)
    }

    /// [`reserve`](Self::reserve) on an `Arc`: the reservation keeps the bulkhead alive.
    ///
    /// # Errors
    /// As [`reserve`](Self::reserve).
    #[cfg(feature = "alloc")]
    pub fn reserve_owned(
        self: &alloc::sync::Arc<Self>,
        request: &Request,
        ttl: Duration,
    ) -> Result<Reservation<alloc::sync::Arc<Self>, N>, ReserveError> {
        Self::reserve_via(self.clone(), request, ttl)
    }

    /// [`reserve`](Self::reserve) through any handle `B` to the bulkhead.
    ///
    /// # Errors
    /// As [`reserve`](Self::reserve).
    pub fn reserve_via<B>(
        bh: B,
        request: &Request,
        ttl: Duration,
    ) -> Result<Reservation<B, N>, ReserveError>
    where
        B: Deref<Target = Self>,
    {
        let Some(table) = bh.reservations() else {
            return Err(ReserveError::Full {
                max_reservations: 0,
            });
        };
        let Some(claim) = table.claim() else {
            return Err(ReserveError::Full {
                max_reservations: table.capacity() as u64,
            });
        };
        let call = match Self::admit_via(&*bh, &request.no_wait(), None) {
            Decision::Granted(call) => call,
            Decision::Rejected(e) => {
                table.unclaim(claim);
                return Err(e.into());
            }
            Decision::Queued(_) => unreachable!("a request with no wait never queues"),
        };
        let revision = call.revision();
        let (_, weight, cost, token) = call.into_parts_with_cost();
        let deadline_ns = if ttl == Duration::MAX {
            u64::MAX
        } else {
            let ttl_ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
            bh.now_ns().saturating_add(ttl_ns)
        };
        table.publish(
            claim,
            Held {
                weight,
                cost,
                call: Self::pack(token),
                deadline_ns,
                revision,
            },
        );
        Ok(Reservation {
            bh: Some(bh),
            claim,
            weight,
            cost,
            deadline_ns,
        })
    }

    /// Returns the units of every reservation whose deadline passed (counted in
    /// `reservations_expired_total`); returns how many. Admissions, reservations and stats
    /// reads do this on their own; a host calls it from a timer to return units with no
    /// traffic. Without a clock, deadlines never pass (only `Duration::MAX` means none then).
    pub fn expire_reservations(&self) -> u64 {
        let Some(table) = self.reservations() else {
            return 0;
        };
        let now = self.now_ns();
        table.sweep(now, |h| self.end_reserved(h))
    }

    /// Ends what a reservation held: its call ends `ignored`, every unit returns (budget
    /// units counted refunded).
    fn end_reserved(&self, h: Held) {
        let call = Call::from_parts_with_cost(self, h.weight, h.cost, Self::unpack(h.call));
        call.end_with_usage(Outcome::Ignored, 0);
    }
}
