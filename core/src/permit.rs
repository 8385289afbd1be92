//! RAII permits: dropping one returns its permits (and hands them to the head waiter).

use core::{fmt, ops::Deref};

use crate::bulkhead::Bulkhead;

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
    pub(crate) fn new(bh: B, weight: u64) -> Self {
        Self { bh, weight }
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

    /// Takes the permit apart without releasing it: the handle and the permits held. The
    /// caller must return them ([`Bulkhead::release_units`]) — bindings use this to move a
    /// permit into their own handle type.
    pub fn into_parts(self) -> (B, u64) {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so `bh` is moved out exactly once.
        let bh = unsafe { core::ptr::read(&this.bh) };
        (bh, this.weight)
    }

    /// Keeps the permits out of the bulkhead for good; returns how many.
    pub fn forget(mut self) -> u64 {
        core::mem::take(&mut self.weight)
    }
}

impl<B, const N: usize> Drop for PermitOf<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn drop(&mut self) {
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
            .finish_non_exhaustive()
    }
}
