//! [`Call`]: the handle of one granted admission (docs/design.md §5.3) — the permits it holds
//! and the state of its guarded call (breaker generation, start time, outcome, call timeout).
//! It ends exactly once: [`end`](Call::end) with an outcome, a drop (its set outcome,
//! `ignored` by default), or [`forget`](Call::forget). [`timed_out`](Call::timed_out) records
//! a `call_timeout` overrun at once and leaves only the permits for the end.

use core::{fmt, ops::Deref, time::Duration};

use crate::{
    front::{
        bulkhead::Bulkhead,
        orphan::OrphanError,
        usage::{HoldChange, UsageError, UsageReport},
    },
    outcome::Outcome,
    policy::state::CallStart,
};

/// A granted admission on a bulkhead reached through `B` (a reference or an `Arc`).
///
/// Use the aliases [`Permit`] (borrowed) and [`OwnedPermit`] (owns an `Arc`, `'static`);
/// `PermitOf` is the older name of this type.
#[must_use = "dropping a call releases its permits immediately"]
pub struct Call<B, const N: usize>
where
    B: Deref<Target = Bulkhead<N>>,
{
    bh: B,
    weight: u64,
    /// Budget units held and charged to the budget (0 without a budget).
    cost: u64,
    /// Budget units held past the budget: streaming growth that did not fit (never charged).
    overrun: u64,
    /// The cumulative usage reported so far (`report_usage`).
    reported: u64,
    /// The revision of the limits in force when the call was granted (docs/design.md §4.6).
    revision: u64,
    call: CallStart,
    outcome: Outcome,
    /// The call's outcome is recorded (a `call_timeout` overrun); only the permits are left.
    ended: bool,
    /// The call handed its `weight` permits back while its work goes on ([`orphan`](Self::orphan)):
    /// they count in `orphaned_in_flight` until it ends.
    orphaned: bool,
    /// A usage report overran on a bulkhead with `cancel_on_overrun`: the host should cancel
    /// the work.
    cancel_requested: bool,
}

/// The older name of [`Call`].
pub type PermitOf<B, const N: usize> = Call<B, N>;

/// A call borrowed from a [`Bulkhead`].
pub type Permit<'a, const N: usize = 0> = Call<&'a Bulkhead<N>, N>;

/// A call that keeps its bulkhead alive (`Send + 'static`, for `tokio::spawn`).
#[cfg(feature = "alloc")]
pub type OwnedPermit<const N: usize = 0> = Call<alloc::sync::Arc<Bulkhead<N>>, N>;

/// Why [`Call::release_partial`] refused.
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

impl<B, const N: usize> Call<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    /// A call holding `weight` permits of `bh` with the guarded-call token `call`: the inverse
    /// of [`into_parts`](Self::into_parts), for a binding that moved a call into its own handle
    /// and back. The caller must really hold the permits and own the token.
    #[inline]
    pub fn from_parts(bh: B, weight: u64, call: CallStart) -> Self {
        Self::from_parts_with_cost(bh, weight, 0, call)
    }

    /// [`from_parts`](Self::from_parts) for a call that also holds `cost` budget units: the
    /// inverse of [`into_parts_with_cost`](Self::into_parts_with_cost).
    #[inline]
    pub fn from_parts_with_cost(bh: B, weight: u64, cost: u64, call: CallStart) -> Self {
        Self {
            revision: bh.engine.revision(),
            bh,
            weight,
            cost,
            overrun: 0,
            reported: 0,
            call,
            outcome: Outcome::Ignored,
            ended: false,
            orphaned: false,
            cancel_requested: false,
        }
    }

    /// Sets the outcome recorded when this call ends by a drop (docs/design.md §6.2): a call
    /// dropped without one records [`Outcome::Ignored`].
    pub fn set_outcome(&mut self, outcome: Outcome) {
        self.outcome = outcome;
    }

    /// The outcome that the drop will record.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Ends the call now with `outcome` and releases its permits (a binding's
    /// `release(outcome=…)`). After [`timed_out`](Self::timed_out) the outcome was recorded
    /// already; this only releases.
    pub fn end(mut self, outcome: Outcome) {
        self.outcome = outcome;
    }

    /// [`end`](Self::end), handing back the handle the call held (a binding that keeps it to
    /// count a second release: no second reference per call).
    ///
    /// # Examples
    /// ```
    /// use std::sync::Arc;
    /// use hullguard_core::{Bulkhead, Config, Outcome};
    /// let bh = Arc::new(Bulkhead::new(Config::default())?);
    /// let call = bh.try_acquire_owned(1)?;
    /// let back: Arc<Bulkhead> = call.end_into_handle(Outcome::Success);
    /// assert_eq!((back.stats().active, Arc::strong_count(&back)), (0, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn end_into_handle(mut self, outcome: Outcome) -> B {
        self.outcome = outcome;
        self.end_now(None);
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so `bh` is moved out exactly once;
        // the call ended above (its drop would only have ended it).
        unsafe { core::ptr::read(&this.bh) }
    }

    /// Releases now, recording `outcome` (the older name of [`end`](Self::end)).
    pub fn release_with(self, outcome: Outcome) {
        self.end(outcome);
    }

    /// The host's timer for the bulkhead's `call_timeout` fired: counts one `call_timeout` in
    /// `rejected_by_reason` and ends the call as a [`Outcome::Failure`] now. The permits stay
    /// held until the work really ends (then drop or [`end`](Self::end) the call: nothing more
    /// is recorded). Returns `false`, doing nothing, if the call's outcome was recorded
    /// already (a second report).
    pub fn timed_out(&mut self) -> bool {
        if self.ended {
            return false;
        }
        self.ended = true;
        self.bh.count_call_timeout_now();
        let call = core::mem::take(&mut self.call);
        // The token is spent; the admission id stays for the release's event (`ended` routes
        // the end through `end_tracked`).
        self.call.id = call.id;
        self.bh.finish(call, Outcome::Failure);
        true
    }

    /// Whether the call's outcome is recorded already (after [`timed_out`](Self::timed_out)).
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The bulkhead's `call_timeout`: how long the host lets the work run before it reports
    /// [`timed_out`](Self::timed_out) (`None`: no limit).
    pub fn call_timeout(&self) -> Option<Duration> {
        self.bh.call_timeout()
    }

    /// The same call recording `revision` as the one it was granted under (a committed
    /// reservation keeps the revision of its reserve).
    pub(crate) fn at_revision(mut self, revision: u64) -> Self {
        self.revision = revision;
        self
    }

    /// The revision of the limits in force when this call was granted (docs/design.md §4.6;
    /// 0 before the first `apply_limits`). A committed reservation keeps its reserve's; a queued
    /// call records the revision when its owner took the grant; a call rebuilt with
    /// [`from_parts`](Self::from_parts) records the revision in force at the rebuild.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// This call's guarded-call token (inert on a bulkhead without policies).
    pub fn call(&self) -> CallStart {
        self.call
    }

    /// Permits still held (0 once [`orphan`](Self::orphan)ed).
    pub fn weight(&self) -> u64 {
        if self.orphaned { 0 } else { self.weight }
    }

    /// Hands the call's permits back now while its work goes on (docs/design.md §5.3): a
    /// call past its deadline whose upstream request cannot be recalled. The permits return
    /// at once (waking waiters) and count in `orphaned_in_flight` until the call ends; its
    /// budget units, usage reports and outcome stay with it. Bounded by the bulkhead's
    /// `max_orphaned` (reserved in one CAS, never passed), so the work in flight exceeds the
    /// limit by at most that much. Returns `Ok(true)` the first time, `Ok(false)` when there is
    /// nothing to orphan (orphaned already, or no permits left).
    ///
    /// # Errors
    /// [`OrphanError`] when the permits would pass `max_orphaned` (0 by default: orphaning is
    /// off); nothing changes.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, max_orphaned: 1, ..Config::default() })?;
    /// let mut slow = bh.try_acquire(1)?;
    /// assert!(slow.orphan()?); // past its deadline: the slot goes back, the work goes on
    /// let next = bh.try_acquire(1)?; // served
    /// assert_eq!((bh.stats().active, bh.stats().orphaned_in_flight), (1, 1));
    /// drop(slow); // the orphaned work ended
    /// assert_eq!(bh.stats().orphaned_in_flight, 0);
    /// # drop(next);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn orphan(&mut self) -> Result<bool, OrphanError> {
        if self.orphaned || self.weight == 0 {
            return Ok(false);
        }
        self.bh.orphan_permits(self.weight, self.call.class)?;
        self.orphaned = true;
        Ok(true)
    }

    /// Whether a usage report asked the host to cancel this call's work (it overran the
    /// budget on a bulkhead with `cancel_on_overrun`; docs/design.md §4.5). Sticky.
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested
    }

    /// Whether the call was [`orphan`](Self::orphan)ed.
    pub fn is_orphaned(&self) -> bool {
        self.orphaned
    }

    /// An orphaned call leaves the gauge (its permits went back when it was orphaned); the
    /// call then holds no permits.
    fn end_orphan(&mut self) {
        if core::mem::take(&mut self.orphaned) {
            self.bh.orphan_ended(core::mem::take(&mut self.weight));
        }
    }

    /// Budget units still held (docs/design.md §4.5), with the part held past the budget
    /// ([`overrun`](Self::overrun)).
    pub fn cost(&self) -> u64 {
        self.cost + self.overrun
    }

    /// The part of the hold past the budget: streaming growth that did not fit.
    pub fn overrun(&self) -> u64 {
        self.overrun
    }

    /// The cumulative usage reported so far through [`report_usage`](Self::report_usage).
    pub fn reported(&self) -> u64 {
        self.reported
    }

    /// Returns `n` of the held budget units now — a refund once the real cost is known, or a
    /// stream's hold shrinking — and wakes whoever now fits; counted in `refunded_total`.
    ///
    /// # Errors
    /// [`InvalidRelease`] for `n == 0` or `n` above the units held; nothing changes.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Decision, Request};
    /// let bh = Bulkhead::new(Config { budget: Some(1000), ..Config::default() }).unwrap();
    /// let Decision::Granted(mut call) = bh.admit(&Request::new(1).cost(800), None) else { panic!() };
    /// call.refund(300).unwrap();
    /// assert_eq!((call.cost(), bh.stats().budget.unwrap().available), (500, 500));
    /// ```
    pub fn refund(&mut self, n: u64) -> Result<(), InvalidRelease> {
        let mut held = self.cost();
        take_part(&mut held, n)?;
        self.shrink_hold(n);
        Ok(())
    }

    /// Returns `n` (`1 ..= cost()`) units of the hold, counted refunded: the part held past
    /// the budget first (it returns nothing to the budget), then charged units, which return at
    /// once and wake whoever now fits.
    fn shrink_hold(&mut self, n: u64) {
        let over = n.min(self.overrun);
        if over != 0 {
            self.overrun -= over;
            self.bh.budget_settled(over, 0);
            self.bh.overrun_returned(over);
        }
        if n > over {
            self.cost -= n - over;
            self.bh.return_unused(n - over, self.call.class);
        }
    }

    /// Reports a streaming call's usage (docs/design.md §4.5, "Streaming holds"): `used`
    /// units so far (cumulative: never below an earlier report) and `remaining` units it may
    /// still use. The hold becomes `used + remaining`: a shrink returns units at once and
    /// wakes whoever now fits; a growth goes through admission — taken if it fits and nobody is
    /// queued ([`HoldChange::Grew`]), otherwise held past the budget as overrun
    /// ([`HoldChange::Overran`], counted in `overrun_total` and `overrun_held`; the budget is
    /// never taken from anyone else). The call's end settles against the last report unless it
    /// reports a final usage ([`end_with_usage`](Self::end_with_usage)). On a bulkhead without
    /// a budget only `used` is recorded (the hold stays 0). Never blocks.
    ///
    /// # Errors
    /// [`UsageError`] — `used` below an earlier report, `used + remaining` above
    /// [`MAX_BUDGET`](crate::MAX_BUDGET), or a call that returned all its permits; nothing
    /// changes.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Decision, HoldChange, Request};
    /// let bh = Bulkhead::new(Config { budget: Some(1000), ..Config::default() }).unwrap();
    /// let Decision::Granted(mut call) = bh.admit(&Request::new(1).cost(800), None) else { panic!() };
    /// // 100 tokens in, at most 300 more expected: the hold shrinks to 400.
    /// assert_eq!(call.report_usage(100, 300).unwrap().change, HoldChange::Shrank(400));
    /// // The stream runs long: 500 more fit the budget, and are taken.
    /// assert_eq!(call.report_usage(600, 300).unwrap().change, HoldChange::Grew(500));
    /// assert_eq!(bh.stats().budget.unwrap().available, 100);
    /// ```
    pub fn report_usage(&mut self, used: u64, remaining: u64) -> Result<UsageReport, UsageError> {
        if self.weight == 0 {
            return Err(UsageError::Released);
        }
        if used < self.reported {
            return Err(UsageError::Decreased {
                previous: self.reported,
                got: used,
            });
        }
        let target = used
            .checked_add(remaining)
            .filter(|&t| t <= crate::limits::MAX_BUDGET)
            .ok_or(UsageError::TooLarge { used, remaining })?;
        self.reported = used;
        if !self.bh.has_budget() {
            return Ok(UsageReport {
                used,
                held: 0,
                overrun: 0,
                change: HoldChange::Unchanged,
                cancel: false,
            });
        }
        let held = self.cost();
        let change = if target < held {
            self.shrink_hold(held - target);
            HoldChange::Shrank(held - target)
        } else if target > held {
            let d = target - held;
            if self.bh.grow_hold(d) {
                self.cost += d;
                HoldChange::Grew(d)
            } else {
                self.overrun += d;
                HoldChange::Overran(d)
            }
        } else {
            HoldChange::Unchanged
        };
        let cancel = matches!(change, HoldChange::Overran(_)) && self.bh.cancels_on_overrun();
        self.cancel_requested |= cancel;
        let report = UsageReport {
            used,
            held: target,
            overrun: self.overrun,
            change,
            cancel,
        };
        if self.call.id != 0 {
            self.bh.emit_usage(self.call.id, self.call.class, &report);
        }
        Ok(report)
    }

    /// Ends the call now with `outcome`, reporting that it `used` budget units in all (at least
    /// its last [`report_usage`](Self::report_usage): a lower figure is raised to it): the
    /// unused rest of its hold is refunded, use beyond it is counted as overrun (a call ended
    /// any other way used its whole hold). Releases everything.
    pub fn end_with_usage(mut self, outcome: Outcome, used: u64) {
        self.outcome = outcome;
        self.end_now(Some(used.max(self.reported)));
    }

    /// Records the outcome (unless recorded already), settles the budget hold against `used`
    /// (`None`: the whole hold) and returns permits and units in one step. Leaves an empty,
    /// ended call, whose drop does nothing more.
    #[inline]
    fn end_now(&mut self, used: Option<u64>) {
        // A tracked call (policies or an observer) or one whose outcome `timed_out` recorded
        // ends out of line; the plain path tests two flags.
        if self.call.tracked | self.ended | (self.call.id != 0) {
            return self.end_tracked(used);
        }
        self.settle_and_release(used);
    }

    /// [`end_now`](Self::end_now) of a tracked call: the outcome first (docs/design.md §6.2:
    /// the adaptive sample counts this call in flight), then the settlement, then the
    /// `release` event.
    #[inline(never)]
    fn end_tracked(&mut self, used: Option<u64>) {
        if !self.ended {
            self.ended = true;
            self.bh.finish(self.call, self.outcome);
        }
        let (w, held) = (self.weight, self.cost());
        let used = self.settle_and_release(used);
        if self.call.id != 0 {
            let id = core::mem::take(&mut self.call.id);
            self.bh
                .emit_release(id, self.call.class, w, held, Some(used), true);
        }
    }

    /// Settles the hold against `used` (`None`: the whole hold) and returns permits and units
    /// in one step; returns the usage settled.
    #[inline]
    fn settle_and_release(&mut self, used: Option<u64>) -> u64 {
        self.end_orphan();
        let (w, c, o) = (
            core::mem::take(&mut self.weight),
            core::mem::take(&mut self.cost),
            core::mem::take(&mut self.overrun),
        );
        // A call that held no units still reports what it used (as overrun): consumption is
        // never dropped for a hold of 0 (async-bulkhead-llm's `totalConsumed` bug).
        let used = used.unwrap_or(c + o);
        if c + o > 0 || used > 0 {
            self.bh.budget_settled(c + o, used);
            self.bh.overrun_returned(o);
        }
        if w > 0 || c > 0 {
            // Both in one RMW of the permit word: nobody sees one returned without the other.
            self.bh.release_held(w, c, self.call.class);
        }
        used
    }

    /// The bulkhead these permits belong to.
    pub fn bulkhead(&self) -> &Bulkhead<N> {
        &self.bh
    }

    /// The handle through which this call reaches its bulkhead (the `Arc` of an
    /// [`OwnedPermit`], e.g. to keep a weak reference after the call ends).
    pub fn handle(&self) -> &B {
        &self.bh
    }

    /// Returns `n` of the held permits now (a refund once actual usage is known); the rest stay
    /// held. Returning all of them leaves an empty call whose end only records the outcome; its
    /// budget units, if any, return with the last permit (counted refunded): units are held
    /// only together with a permit, so an idle bulkhead never holds any.
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
        if self.orphaned {
            return Err(InvalidRelease {
                requested: n,
                held: 0,
            });
        }
        take_part(&mut self.weight, n)?;
        let held = self.cost();
        let c = if self.weight == 0 {
            let (c, o) = (
                core::mem::take(&mut self.cost),
                core::mem::take(&mut self.overrun),
            );
            self.bh.budget_settled(c + o, 0);
            self.bh.overrun_returned(o);
            c
        } else {
            0
        };
        self.bh.release_held(n, c, self.call.class);
        if self.call.id != 0 {
            self.bh
                .emit_release(self.call.id, self.call.class, n, held, None, false);
        }
        Ok(())
    }

    /// The binding handle that held this call was destroyed while it still held permits (a
    /// Python `Permit` finalized, a Node permit collected, `hg_permit_free`): counts the
    /// permits in `leaked_total`, ends the call `ignored` and releases.
    pub fn reclaim(mut self) {
        self.outcome = Outcome::Ignored;
        if self.weight > 0 && !self.orphaned {
            self.bh.record_leak(self.weight);
        }
    }

    /// Takes the call apart without ending it: the handle, the permits held and the token
    /// (inert once [`timed_out`](Self::timed_out) recorded the outcome). Rebuild it with
    /// [`from_parts`](Self::from_parts).
    ///
    /// Budget units the call holds return first (counted refunded): a call with a cost keeps
    /// them through [`into_parts_with_cost`](Self::into_parts_with_cost).
    pub fn into_parts(mut self) -> (B, u64, CallStart) {
        let held = self.cost();
        if held > 0 {
            self.shrink_hold(held);
        }
        let (bh, weight, _, call) = self.into_parts_with_cost();
        (bh, weight, call)
    }

    /// Takes the call apart without ending it, budget units included: the handle, the
    /// permits, the units charged to the budget and the token. Rebuild it with
    /// [`from_parts_with_cost`](Self::from_parts_with_cost). The part of the hold past the
    /// budget returns first (counted refunded) and the reported usage is forgotten: the
    /// rebuilt call starts its reports afresh. An orphaned call's orphan ends here (the parts
    /// hold no permits).
    pub fn into_parts_with_cost(mut self) -> (B, u64, u64, CallStart) {
        self.end_orphan();
        if self.overrun > 0 {
            self.shrink_hold(self.overrun);
        }
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so `bh` is moved out exactly once.
        let bh = unsafe { core::ptr::read(&this.bh) };
        (bh, this.weight, this.cost, this.call)
    }

    /// Hands the permits over without a handle; returns how many. The call ends
    /// [`Outcome::Ignored`] now; the caller returns the permits with
    /// [`Bulkhead::release_units`] (or keeps them out for good). Budget units it holds
    /// return now (the handle-free pair holds permits only), counted refunded.
    pub fn forget(mut self) -> u64 {
        self.outcome = Outcome::Ignored;
        let held = self.cost();
        if held > 0 {
            self.shrink_hold(held);
        }
        self.end_orphan();
        let w = core::mem::take(&mut self.weight);
        // On a classed bulkhead the permits stay in the call's class (docs/design.md §4.8):
        // return them with `release_units_of(w, class)`.
        self.bh.engine.lend(w as crate::sync::Word);
        w
    }
}

/// Takes `n` (`1 ..= *held`) out of a held count, or refuses leaving it unchanged.
fn take_part(held: &mut u64, n: u64) -> Result<(), InvalidRelease> {
    if n == 0 || n > *held {
        return Err(InvalidRelease {
            requested: n,
            held: *held,
        });
    }
    *held -= n;
    Ok(())
}

impl<B, const N: usize> Drop for Call<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    #[inline]
    fn drop(&mut self) {
        // Ended without reported usage: the whole hold was used.
        self.end_now(None);
    }
}

impl<B, const N: usize> fmt::Debug for Call<B, N>
where
    B: Deref<Target = Bulkhead<N>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("weight", &self.weight)
            .field("cost", &self.cost)
            .field("overrun", &self.overrun)
            .field("reported", &self.reported)
            .field("outcome", &self.outcome)
            .field("ended", &self.ended)
            .field("orphaned", &self.orphaned)
            .finish_non_exhaustive()
    }
}
