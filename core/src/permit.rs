//! RAII permits: dropping one returns its permits (and hands them to the head waiter).

use core::{fmt, ops::Deref};

use crate::{bulkhead::Bulkhead, outcome::Outcome, policy::CallStart};

/// Permits held on a bulkhead reached through `B` (a reference or an `Arc`).
///
/// Use the aliases [`Permit`] (borrowed) and [`OwnedPermit`] (owns an `Arc`, `'static`).
#[must_use = "dropping a permit releases it immediately"]
pub struct PermitOf<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    bh: B,
    weight: u64,
    call: CallStart,
    outcome: Outcome,
}

/// A permit borrowed from a [`Bulkhead`].
pub type Permit<'a, const N: usize = 0> = PermitOf<&'a Bulkhead<N>, N>;

/// A permit that keeps its bulkhead alive (`Send + 'static`, for `tokio::spawn`).
#[cfg(feature = "alloc")]
pub type OwnedPermit<const N: usize = 0> = PermitOf<alloc::sync::Arc<Bulkhead<N>>, N>;

/// Why [`PermitOf::release_partial`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidRelease {
    /// The count asked for.
    pub requested: u64,
    /// The permits held.
    pub held: u64,
}

impl fmt::Display for InvalidRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n must be in 1..={} (permits held), got {}",
            self.held, self.requested
        )
    }
}

impl core::error::Error for InvalidRelease {}

impl<B, const N: usize> PermitOf<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    pub(crate) fn with_call(bh: B, weight: u64, call: CallStart) -> Self {
        Self {
            bh,
            weight,
            call,
            outcome: Outcome::Ignored,
        }
    }

    /// Sets the outcome recorded when this permit is dropped (DESIGN §4 "Outcomes"): on a
    /// bulkhead with policies a permit dropped without one records [`Outcome::Ignored`]. The
    /// guarded-call path ([`Bulkhead::call`]) sets it for you.
    pub fn set_outcome(&mut self, outcome: Outcome) {
        self.outcome = outcome;
    }

    /// The outcome that the drop will record.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Releases now, recording `outcome` (the Rust spelling of a binding's
    /// `release(outcome=…)`).
    pub fn release_with(mut self, outcome: Outcome) {
        self.outcome = outcome;
    }

    /// This permit's guarded-call token (inert on a bulkhead without policies).
    pub fn call(&self) -> CallStart {
        self.call
    }

    /// Permits still held.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// The bulkhead these permits belong to.
    pub fn bulkhead(&self) -> &Bulkhead<N> {
        &self.bh
    }

    /// Returns `n` of the held permits now (a refund once actual usage is known); the rest stay
    /// held. Returning all of them leaves an empty permit whose drop does nothing.
    ///
    /// # Errors
    /// [`InvalidRelease`] for `n == 0` or `n` above the permits held; nothing changes.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 10, ..Config::default() }).unwrap();
    /// let mut p = bh.try_acquire(8).unwrap();
    /// p.release_partial(5).unwrap();
    /// assert_eq!((p.weight(), bh.stats().available), (3, 7));
    /// assert!(p.release_partial(4).is_err());
    /// ```
    pub fn release_partial(&mut self, n: u64) -> Result<(), InvalidRelease> {
        if n == 0 || n > self.weight {
            return Err(InvalidRelease {
                requested: n,
                held: self.weight,
            });
        }
        self.weight -= n;
        self.bh.release_units(n);
        Ok(())
    }

    /// Takes the permit apart without releasing it: the handle, the permits held and the
    /// guarded-call token. The caller must return the permits
    /// ([`Bulkhead::release_units`]) and end the call ([`Bulkhead::end_call`]) — bindings use
    /// this to move a permit into their own handle type.
    pub fn into_parts(self) -> (B, u64, CallStart) {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so `bh` is moved out exactly once.
        let bh = unsafe { core::ptr::read(&this.bh) };
        (bh, this.weight, this.call)
    }

    /// Keeps the permits out of the bulkhead for good; returns how many. The call ends
    /// [`Outcome::Ignored`] now.
    pub fn forget(mut self) -> u64 {
        self.outcome = Outcome::Ignored;
        core::mem::take(&mut self.weight)
    }
}

impl<B, const N: usize> Drop for PermitOf<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn drop(&mut self) {
        // The outcome first (DESIGN §4): the adaptive sample counts this call in flight.
        self.bh.end_call(self.call, self.outcome);
        if self.weight > 0 {
            self.bh.release_units(self.weight);
        }
    }
}

impl<B, const N: usize> fmt::Debug for PermitOf<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("weight", &self.weight)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}
