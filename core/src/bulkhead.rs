//! The bulkhead: a [`PermitWord`] plus a [`WaiterRing`], joined by one dispatcher.
//!
//! # Implementation details
//!
//! * **Fast path.** `try_acquire` is one CAS on the permit word; it fails while the `WAITERS`
//!   flag is set, so nobody barges past a queued waiter (I6). `release` is one `fetch_add`; only
//!   when the previous state had `WAITERS` does it run the dispatcher.
//! * **Queueing.** An acquire that cannot be admitted reserves a live-waiter place, claims the
//!   next ticket, writes its weight and waker into the cell, publishes `WAITING`, sets `WAITERS`
//!   and runs the dispatcher.
//! * **Dispatcher** ([`DispatchFlag`]). Every state change that might enable a grant (release,
//!   publish, cancel, resize, close) asks for a pass; one thread at a time runs passes, the
//!   others leave a "pending" mark and return. A pass walks the ring from the head: it sweeps
//!   cancelled cells, rejects waiters after `close()` (`shutdown`) or whose weight exceeds the
//!   limit (`concurrency_limit`), and otherwise reserves the head's weight from the permit word
//!   and moves the cell `WAITING → GRANTED` by CAS. If that CAS loses to a cancel, the permits
//!   go back and the pass goes on, so a grant and a cancel have exactly one winner and the loser
//!   never strands a permit (I7; failsafe#393). The head blocks lighter waiters behind it
//!   (strict FIFO, documented head-of-line behaviour, as in tokio).
//! * **Wake-ups** happen after the pass commits, outside every protocol step.
//! * **Owners.** A ticket has one owner (a future, a blocking caller, a binding's waiter). The
//!   owner consumes `GRANTED` / rejected cells; only the dispatcher frees cancelled cells.
//!
//! # Memory ordering
//!
//! Releasing permits is a `Release` operation and every successful acquire is an `Acquire`
//! operation on the same word (a queued grant is ordered through the cell stamp), so writes
//! made before a release are visible to whoever acquires those permits next. A failed
//! `try_acquire` behaves like an `Acquire` load. The wake-up of a queued waiter happens after
//! the grant is committed, not atomically with it.

use core::{task::Waker, time::Duration};

use crossbeam_utils::CachePadded;

use crate::{
    cell::{Kind, Stamp},
    clock::ClockSource,
    config::{Config, ConfigError},
    dispatch::{DispatchFlag, WakeBatch},
    permit::PermitOf,
    permit_word::{CLOSED, PermitWord, Reserve, TakeError, WAITERS, available},
    policy::{Policies, PolicyBox},
    reason::{AcquireError, Reason, Rejection, Snapshot},
    ring::{ClaimError, WaiterRing},
    stats::{Counters, Stats},
    sync::{AtomicWord, Ordering::*, SWord, Word},
};

/// The handle of one queued acquire (see [`Bulkhead::enqueue`]).
///
/// A ticket has exactly one owner, which polls it to a settlement or cancels it. Polling or
/// cancelling a ticket that is already settled and consumed is reported, never acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub(crate) Word);

impl Ticket {
    /// The ticket as a plain integer (for FFI).
    pub const fn to_raw(self) -> u64 {
        self.0 as u64
    }

    /// Rebuilds a ticket from [`to_raw`](Self::to_raw).
    pub const fn from_raw(raw: u64) -> Self {
        Ticket(raw as Word)
    }
}

/// What [`Bulkhead::enqueue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a granted admission holds permits that must be released"]
pub enum Admission {
    /// Admitted at once: the caller holds the permits and must release them.
    Granted,
    /// Queued: poll or cancel the ticket.
    Queued(Ticket),
}

/// The state of a ticket, from [`Bulkhead::poll_ticket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a granted ticket holds permits that must be released"]
pub enum TicketPoll {
    /// Still queued; the waker (if given) will be woken when it settles.
    Pending,
    /// Granted `weight` permits, now held by the caller (the ticket is consumed).
    Granted(u64),
    /// Rejected (the ticket is consumed).
    Rejected(Rejection),
}

/// Why [`Bulkhead::cancel`] did not cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelError {
    /// A grant won the race: poll the ticket to take the permits (then release or use them).
    Granted,
    /// The waiter was already rejected with this reason: poll the ticket to consume it.
    Rejected(Reason),
    /// The ticket is not live: already cancelled or consumed.
    Stale,
}

/// The ticket is not live (already consumed or cancelled, or never issued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleTicket;

/// A raw release would return more permits than the limit allows (no handle to detect a
/// double release, so the count itself is checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverRelease;

/// A bulkhead: a bounded pool of permits with a fixed-capacity FIFO waiter queue.
///
/// `N > 0` stores the ring inline (a `static` bulkhead, no allocator: [`Bulkhead::new_static`]);
/// `N == 0` (the default) allocates it once at construction ([`Bulkhead::new`], feature `alloc`).
///
/// # Examples
/// ```
/// use hullguard_core::{Bulkhead, Config, Reason};
/// let bh = Bulkhead::new(Config { max_concurrent: 2, max_queue: 0, ..Config::default() })?;
/// let a = bh.try_acquire(1)?;
/// let b = bh.try_acquire(1)?;
/// assert_eq!(bh.try_acquire(1).unwrap_err().reason(), Some(Reason::ConcurrencyLimit));
/// drop((a, b));
/// assert_eq!(bh.stats().available, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Progress
/// `try_acquire`, `release`, `cancel`, `set_limit` and `close` never wait for another thread
/// (lock-free where the target has CAS); they are not wait-free, since one call may perform
/// grants for others. Grants may be delayed by a preempted thread that is performing them.
#[derive(Debug)]
pub struct Bulkhead<const N: usize = 0> {
    permits: CachePadded<PermitWord>,
    dispatch: CachePadded<DispatchFlag>,
    ring: WaiterRing<N>,
    limit: AtomicWord,
    counters: Counters,
    max_concurrent: Word,
    queue_timeout: Duration,
    enabled: bool,
    clock: ClockSource,
    policies: Option<PolicyBox>,
    #[cfg(feature = "std")]
    pub(crate) idle: crate::drain::IdleWaiters,
}

#[cfg(feature = "alloc")]
impl Bulkhead<0> {
    /// A bulkhead whose ring ([`Config::ring_capacity`] cells) is allocated once,
    /// fallibly, here. Uses the host's monotonic clock under `std`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the bad option; [`ConfigError::MaxQueue`] also when the ring
    /// cannot be allocated.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        Self::with_clock(config, ClockSource::default_for_host())
    }

    /// [`new`](Self::new) with an explicit time source (a test's virtual clock, say).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_clock(config: Config, clock: ClockSource) -> Result<Self, ConfigError> {
        Self::with_observer(config, clock, None, None)
    }

    /// [`with_clock`](Self::with_clock) plus where breaker state changes go: `observer` is
    /// called after each commit with `key` (a registry passes the entry's key; `None` outside
    /// one). See [`policy`](crate::policy).
    ///
    /// # Errors
    /// As [`new`](Self::new), plus the `resilience` errors of [`Config::validate`].
    pub fn with_observer(
        config: Config,
        clock: ClockSource,
        observer: Option<crate::policy::SharedObserver>,
        key: Option<&str>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let policies = Policies::build(&config, observer, key)?;
        let ring = if config.max_queue == 0 {
            WaiterRing::new_inline(0)
        } else {
            WaiterRing::new_heap(config.max_queue as Word, config.ring_capacity())?
        };
        let initial_limit = policies.as_deref().and_then(Policies::initial_limit);
        let mut bh = Self::from_parts(config, ring, clock);
        bh.policies = policies;
        if let Some(limit) = initial_limit {
            // The adaptive limit starts at `initial_limit` (≤ max_limit ≤ max_concurrent).
            bh.apply_limit(limit)?;
        }
        Ok(bh)
    }
}

impl<const N: usize> Bulkhead<N> {
    /// A bulkhead with an inline ring of `N` cells for a `static` item (`max_queue ≤ N`, `N` a
    /// power of two, or 0 for fail-fast). A bad configuration is a *compile-time* error in a
    /// `static`; use [`try_new_static`](Self::try_new_static) to get the error as a value.
    ///
    /// # Panics
    /// When the configuration is invalid (at compile time in a `const` or `static`).
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// static DB: Bulkhead<8> =
    ///     Bulkhead::new_static(Config { max_concurrent: 4, max_queue: 8, ..Config::DEFAULT });
    /// let p = DB.try_acquire(1).unwrap();
    /// assert_eq!(DB.stats().active, 1);
    /// drop(p);
    /// ```
    #[cfg(not(loom))]
    pub const fn new_static(config: Config) -> Self {
        if config.validate_base().is_err()
            || !config.resilience.is_off()
            || config.max_queue > N as u64
        {
            panic!("invalid hullguard Config for Bulkhead::new_static");
        }
        Self::inline(config)
    }

    /// [`new_static`](Self::new_static) returning the configuration error.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the bad option ([`ConfigError::MaxQueue`] if `max_queue > N`).
    #[cfg(not(loom))]
    pub const fn try_new_static(config: Config) -> Result<Self, ConfigError> {
        if let Err(e) = config.validate_base() {
            return Err(e);
        }
        if !config.resilience.is_off() {
            return Err(ConfigError::Resilience);
        }
        if config.max_queue > N as u64 {
            return Err(ConfigError::MaxQueue);
        }
        Ok(Self::inline(config))
    }

    #[cfg(not(loom))]
    const fn inline(config: Config) -> Self {
        Self {
            permits: CachePadded::new(PermitWord::new(config.max_concurrent_word())),
            dispatch: CachePadded::new(DispatchFlag::new()),
            ring: WaiterRing::new_inline(config.max_queue as Word),
            limit: AtomicWord::new(config.max_concurrent_word()),
            counters: Counters::new(),
            max_concurrent: config.max_concurrent_word(),
            queue_timeout: config.queue_timeout,
            enabled: config.enabled,
            clock: ClockSource::None,
            policies: None,
            #[cfg(feature = "std")]
            idle: crate::drain::IdleWaiters::new(),
        }
    }

    /// A bulkhead with an inline ring of `N` cells (loom build: not `const`).
    #[cfg(loom)]
    pub fn try_new_static(config: Config) -> Result<Self, ConfigError> {
        config.validate_base()?;
        if config.max_queue > N as u64 {
            return Err(ConfigError::MaxQueue);
        }
        Ok(Self::from_parts(
            config,
            WaiterRing::new_inline(config.max_queue as Word),
            ClockSource::None,
        ))
    }

    #[cfg(any(feature = "alloc", loom))]
    fn from_parts(config: Config, ring: WaiterRing<N>, clock: ClockSource) -> Self {
        Self {
            permits: CachePadded::new(PermitWord::new(config.max_concurrent_word())),
            dispatch: CachePadded::new(DispatchFlag::new()),
            ring,
            limit: AtomicWord::new(config.max_concurrent_word()),
            counters: Counters::new(),
            max_concurrent: config.max_concurrent_word(),
            queue_timeout: config.queue_timeout,
            enabled: config.enabled,
            clock,
            policies: None,
            #[cfg(feature = "std")]
            idle: crate::drain::IdleWaiters::new(),
        }
    }

    /// The policy state, if `resilience` configured any.
    #[inline]
    pub(crate) fn policies(&self) -> Option<&Policies> {
        self.policies.as_deref()
    }

    // ----- configuration views -------------------------------------------------------------

    /// The ceiling of the limit.
    pub fn max_concurrent(&self) -> u64 {
        self.max_concurrent as u64
    }

    /// The current limit.
    pub fn limit(&self) -> u64 {
        self.limit.load(Acquire) as u64
    }

    /// The maximum number of live waiters.
    pub fn max_queue(&self) -> u64 {
        self.ring.max_queue() as u64
    }

    /// The default queue deadline (`Duration::MAX` = none).
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }

    /// Whether admission is enforced.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether [`close`](Self::close) ran.
    pub fn is_closed(&self) -> bool {
        self.permits.load() & CLOSED != 0
    }

    /// The host clock this bulkhead reads (ns).
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    // ----- admission -----------------------------------------------------------------------

    /// Validates a weight: `1 ..= max_concurrent`.
    #[inline]
    pub(crate) fn check_weight(&self, weight: u64) -> Result<Word, AcquireError> {
        if weight == 0 || weight > self.max_concurrent as u64 {
            return Err(AcquireError::InvalidWeight {
                weight,
                max_concurrent: self.max_concurrent as u64,
            });
        }
        Ok(weight as Word)
    }

    /// Counts one rejection in `rejected_by_reason`.
    #[inline]
    pub(crate) fn count_rejection(&self, reason: Reason) {
        self.counters.reject(reason);
    }

    /// Counts and builds a rejection.
    pub(crate) fn reject(&self, reason: Reason) -> Rejection {
        self.count_rejection(reason);
        Rejection {
            reason,
            snapshot: self.snapshot(),
        }
    }

    #[inline]
    fn admit_now(&self, w: Word) -> Result<(), TakeError> {
        let r = if !self.enabled {
            self.permits.take_unbounded(w)
        } else if self.ring.is_empty() {
            self.permits.try_take(w)
        } else if self.is_closed() {
            Err(TakeError::Closed)
        } else {
            // A waiter is queued: no barging (I6), whatever the `WAITERS` flag says now.
            Err(TakeError::Busy)
        };
        if r.is_ok() {
            self.counters.admitted.add(1);
        }
        r
    }

    /// Takes `weight` permits now, or fails without waiting.
    ///
    /// # Errors
    /// `concurrency_limit` when not admitted at once (including while a waiter is queued: no
    /// barging), `shutdown` after [`close`](Self::close), [`AcquireError::InvalidWeight`] for 0
    /// or a weight above `max_concurrent`.
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
    pub fn try_acquire(&self, weight: u64) -> Result<crate::Permit<'_, N>, AcquireError> {
        let call = self.guarded_try(weight)?;
        Ok(PermitOf::with_call(self, weight, call))
    }

    /// `try_acquire_units` inside the guarded-call steps (policy docs): weight checked first,
    /// then the breaker, then admission; a refused admission ends the call `Ignored`.
    #[inline]
    fn guarded_try(&self, weight: u64) -> Result<crate::policy::CallStart, AcquireError> {
        if !self.has_policies() {
            // The plain fast path: nothing to begin or end.
            return self
                .try_acquire_units(weight)
                .map(|()| crate::policy::CallStart::NONE);
        }
        let call = self.begin_call_for(weight)?;
        self.end_call_if_refused(call, self.try_acquire_units(weight))
            .map(|()| call)
    }

    /// [`try_acquire`](Self::try_acquire) without a handle: on `Ok` the caller holds `weight`
    /// permits and must return them with [`release_units`](Self::release_units).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    #[inline]
    pub fn try_acquire_units(&self, weight: u64) -> Result<(), AcquireError> {
        let w = self.check_weight(weight)?;
        match self.admit_now(w) {
            Ok(()) => Ok(()),
            Err(TakeError::Closed) => Err(self.reject(Reason::Shutdown).into()),
            Err(TakeError::Busy) => Err(self.reject(Reason::ConcurrencyLimit).into()),
        }
    }

    /// The polling API: admits at once, or queues and returns a [`Ticket`], or rejects.
    ///
    /// `waker` (if any) is woken once the ticket settles; poll it with
    /// [`poll_ticket`](Self::poll_ticket), or give it up with [`cancel`](Self::cancel).
    ///
    /// # Errors
    /// `shutdown`; `concurrency_limit` when the bulkhead fails fast (`max_queue == 0`,
    /// `enabled == false`) or the weight is above the current limit; `queue_limit` when
    /// `max_queue` waiters are live or no ring cell is free; invalid weight.
    pub fn enqueue(&self, weight: u64, waker: Option<&Waker>) -> Result<Admission, AcquireError> {
        let w = self.check_weight(weight)?;
        match self.admit_now(w) {
            Ok(()) => return Ok(Admission::Granted),
            Err(TakeError::Closed) => return Err(self.reject(Reason::Shutdown).into()),
            Err(TakeError::Busy) => {}
        }
        if !self.enabled || self.ring.max_queue() == 0 || w > self.limit.load(Acquire) {
            return Err(self.reject(Reason::ConcurrencyLimit).into());
        }
        let t = match self.ring.claim() {
            Ok(t) => t,
            Err(ClaimError::QueueLimit) => return Err(self.reject(Reason::QueueLimit).into()),
            Err(ClaimError::RingFull) => {
                // The tail skipped a lap of taken cells: let the head follow it past them.
                self.run_dispatcher();
                return Err(self.reject(Reason::QueueLimit).into());
            }
        };
        let cell = self.ring.cell(t);
        // Relaxed: published by the Release CAS of `publish` below.
        cell.weight.store(w, Relaxed);
        cell.enqueued_ns.store(self.clock.now_ns() as Word, Relaxed);
        if let Some(waker) = waker {
            cell.waker.register(t, waker);
        }
        // Release: the dispatcher's Acquire load of the stamp sees weight, time and waker.
        self.ring.publish(t);
        // From here on the fast path fails (I6); the dispatcher decides.
        self.permits.set_waiters();
        self.run_dispatcher();
        Ok(Admission::Queued(Ticket(t)))
    }

    /// [`enqueue`](Self::enqueue) with a queue timeout: `Duration::ZERO` means "do not queue"
    /// (`concurrency_limit` if not admitted at once, DESIGN §3.4), anything else may queue (the
    /// host arms the deadline). The one place every binding takes this decision from.
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue) / [`try_acquire`](Self::try_acquire).
    pub fn enqueue_within(
        &self,
        weight: u64,
        timeout: Duration,
        waker: Option<&Waker>,
    ) -> Result<Admission, AcquireError> {
        if timeout.is_zero() {
            self.try_acquire_units(weight).map(|()| Admission::Granted)
        } else {
            self.enqueue(weight, waker)
        }
    }

    /// Polls a ticket. On `Granted` / `Rejected` the ticket is consumed; `waker` replaces the
    /// registered waker while it is pending.
    ///
    /// # Errors
    /// [`StaleTicket`] for a ticket that is not live (already consumed or cancelled).
    pub fn poll_ticket(
        &self,
        ticket: Ticket,
        waker: Option<&Waker>,
    ) -> Result<TicketPoll, StaleTicket> {
        let t = ticket.0;
        let (cell, mut s) = self.ring.stamp_of(t).ok_or(StaleTicket)?;
        if matches!(s.kind(), Kind::Waiting | Kind::Claimed) {
            let Some(waker) = waker else {
                return Ok(TicketPoll::Pending);
            };
            cell.waker.register(t, waker);
            // Re-check after registering: a settlement committed before our registration is
            // seen here (its take of the slot happened-before our claim of it).
            s = match self.ring.stamp_of(t) {
                Some((_, s)) => s,
                None => return Err(StaleTicket),
            };
            if matches!(s.kind(), Kind::Waiting | Kind::Claimed) {
                return Ok(TicketPoll::Pending);
            }
        }
        match s.kind() {
            Kind::Granted => {
                let w = cell.weight.load(Relaxed);
                cell.waker.clear(t);
                self.ring.free(cell, s).map_err(|_| StaleTicket)?;
                self.counters.unclaimed.fetch_sub(w, AcqRel);
                Ok(TicketPoll::Granted(w as u64))
            }
            Kind::Rejected(reason) => {
                cell.waker.clear(t);
                self.ring.free(cell, s).map_err(|_| StaleTicket)?;
                self.notify_idle();
                // Counted when it was rejected.
                Ok(TicketPoll::Rejected(Rejection {
                    reason,
                    snapshot: self.snapshot(),
                }))
            }
            Kind::Free | Kind::Waiting | Kind::Claimed => Err(StaleTicket),
        }
    }

    /// Cancels a queued ticket with `reason` (`aborted` for a caller's cancel, `timeout` for a
    /// host timer). O(1): the cell becomes a tombstone that the dispatcher sweeps; cancelling the
    /// head passes the turn on at once (I4).
    ///
    /// # Errors
    /// [`CancelError::Granted`] / [`CancelError::Rejected`] when the waiter settled first (the
    /// owner must still poll the ticket to consume it), [`CancelError::Stale`] for a ticket that
    /// is not live.
    pub fn cancel(&self, ticket: Ticket, reason: Reason) -> Result<(), CancelError> {
        let t = ticket.0;
        let (cell, s) = self.ring.stamp_of(t).ok_or(CancelError::Stale)?;
        match s.kind() {
            Kind::Waiting => match self.ring.free(cell, s) {
                Ok(_) => {
                    // One winner against the dispatcher's WAITING → GRANTED CAS: the cell is
                    // free at once (no tombstone); the dispatcher skips the ticket.
                    self.ring.cancelled_live();
                    self.counters.reject(reason);
                    cell.waker.clear(t);
                    self.run_dispatcher();
                    self.notify_idle();
                    Ok(())
                }
                Err(now) => Err(Self::cancel_lost(now)),
            },
            Kind::Granted => Err(CancelError::Granted),
            Kind::Rejected(r) => Err(CancelError::Rejected(r)),
            Kind::Free | Kind::Claimed => Err(CancelError::Stale),
        }
    }

    /// Settles a queued ticket as rejected with `reason` on behalf of its owner (a host timer
    /// that fired: `timeout`), and wakes the owner, whose next poll takes the rejection.
    ///
    /// # Errors
    /// As [`cancel`](Self::cancel): the waiter settled first, or the ticket is not live.
    pub fn expire(&self, ticket: Ticket, reason: Reason) -> Result<(), CancelError> {
        let t = ticket.0;
        let (cell, s) = self.ring.stamp_of(t).ok_or(CancelError::Stale)?;
        match s.kind() {
            Kind::Waiting => match self.ring.settle(cell, s, Kind::Rejected(reason)) {
                Ok(()) => {
                    self.counters.reject(reason);
                    let waker = cell.waker.take(t);
                    self.run_dispatcher();
                    self.notify_idle();
                    if let Some(w) = waker {
                        w.wake();
                    }
                    Ok(())
                }
                Err(now) => Err(Self::cancel_lost(now)),
            },
            Kind::Granted => Err(CancelError::Granted),
            Kind::Rejected(r) => Err(CancelError::Rejected(r)),
            Kind::Free | Kind::Claimed => Err(CancelError::Stale),
        }
    }

    /// Why a cancel or expiry lost its CAS: the stamp that won.
    fn cancel_lost(now: crate::cell::Stamp) -> CancelError {
        match now.kind() {
            Kind::Granted => CancelError::Granted,
            Kind::Rejected(r) => CancelError::Rejected(r),
            _ => CancelError::Stale,
        }
    }

    /// The owner gives a ticket up (a dropped future, a finalized handle): cancels it as
    /// `aborted`, or, if it settled first, consumes it and passes granted permits on.
    pub fn abandon(&self, ticket: Ticket) {
        match self.cancel(ticket, Reason::Aborted) {
            Ok(()) | Err(CancelError::Stale) => {}
            Err(CancelError::Granted | CancelError::Rejected(_)) => {
                if let Ok(TicketPoll::Granted(w)) = self.poll_ticket(ticket, None) {
                    self.release_units(w);
                }
            }
        }
    }

    /// Returns `weight` permits taken by [`try_acquire_units`](Self::try_acquire_units),
    /// [`enqueue`](Self::enqueue) or a granted ticket. Hands them to the head waiter if any.
    ///
    /// The caller guarantees it holds them (the handle types do); for untrusted callers use
    /// [`release_units_checked`](Self::release_units_checked).
    #[inline]
    pub fn release_units(&self, weight: u64) {
        let prev = self.permits.give(weight as Word);
        if prev & WAITERS != 0 {
            self.run_dispatcher();
        }
        self.notify_idle();
    }

    /// Returns permits without a handle, refusing any return that would lift `available` above
    /// the limit (the raw C pair cannot detect a double release otherwise).
    ///
    /// # Errors
    /// [`OverRelease`]: the return was refused; nothing changed.
    pub fn release_units_checked(&self, weight: u64) -> Result<(), OverRelease> {
        if weight == 0 || weight > self.max_concurrent as u64 {
            return Err(OverRelease);
        }
        let limit = self.limit.load(Acquire);
        let prev = self
            .permits
            .give_checked(weight as Word, limit)
            .ok_or(OverRelease)?;
        if prev & WAITERS != 0 {
            self.run_dispatcher();
        }
        self.notify_idle();
        Ok(())
    }

    /// Counts an explicit release of an already released handle (I9: a no-op, reported).
    pub fn record_double_release(&self) {
        self.counters.released_twice.fetch_add(1, Relaxed);
    }

    /// Counts `weight` permits returned because a binding handle was destroyed while held.
    pub fn record_leak(&self, weight: u64) {
        self.counters.leaked.fetch_add(weight as Word, Relaxed);
    }

    // ----- runtime change ------------------------------------------------------------------

    /// Changes the limit, `1 ..= max_concurrent`. Never blocks, never revokes: growing hands the
    /// new permits to waiters; shrinking lets `available` go negative until releases pay it
    /// back, and rejects queued waiters heavier than the new limit (`concurrency_limit`).
    ///
    /// # Errors
    /// [`ConfigError::Limit`] outside `1 ..= max_concurrent`.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 4, ..Config::default() }).unwrap();
    /// let held = bh.try_acquire(3).unwrap();
    /// bh.set_limit(1).unwrap();
    /// assert_eq!(bh.stats().available, -2);
    /// drop(held);
    /// assert_eq!(bh.stats().available, 1);
    /// ```
    pub fn set_limit(&self, limit: u64) -> Result<(), ConfigError> {
        self.apply_limit(limit)?;
        if let Some(a) = self.policies().and_then(|p| p.adaptive()) {
            // An adaptive limit restarts from the hand-set value (README "Resilience policies").
            a.reseed(limit, |l| {
                let _ = self.apply_limit(l);
            });
        }
        Ok(())
    }

    /// `set_limit` without telling an adaptive controller (the controller's own updates).
    pub(crate) fn apply_limit(&self, limit: u64) -> Result<(), ConfigError> {
        if limit == 0 || limit > self.max_concurrent as u64 {
            return Err(ConfigError::Limit);
        }
        let new = limit as Word;
        let mut old = self.limit.load(Acquire);
        loop {
            if new == old {
                return Ok(());
            }
            if new < old {
                // Shrink: take the permits out first, then publish the lower limit, so that
                // `limit − available` never under-reports the work in flight.
                let delta = (old - new) as SWord;
                self.permits.adjust(-delta);
                match self.limit.compare_exchange(old, new, AcqRel, Acquire) {
                    Ok(_) => break,
                    Err(actual) => {
                        self.permits.adjust(delta);
                        old = actual;
                    }
                }
            } else {
                match self.limit.compare_exchange(old, new, AcqRel, Acquire) {
                    Ok(_) => {
                        self.permits.adjust((new - old) as SWord);
                        break;
                    }
                    Err(actual) => old = actual,
                }
            }
        }
        self.run_dispatcher();
        self.notify_idle();
        Ok(())
    }

    /// Stops admission for good: new acquires are rejected `shutdown`, queued waiters are
    /// rejected `shutdown` at once (I8) — by this call, or by the dispatcher pass another thread
    /// is running at that moment; a grant that pass had already decided before the close
    /// completes as a grant. Work in flight completes and releases normally. Idempotent.
    pub fn close(&self) {
        let prev = self.permits.close();
        if prev & CLOSED == 0 {
            self.run_dispatcher();
        }
        self.notify_idle();
    }

    // ----- observation ---------------------------------------------------------------------

    /// `{active, queued, limit, available}` now.
    pub fn snapshot(&self) -> Snapshot {
        let s = self.permits.load();
        let limit = self.limit.load(Acquire);
        let unclaimed = self.counters.unclaimed.load(Acquire);
        let avail = available(s) as i64;
        let active = (limit as i64) - avail - (unclaimed as i64);
        Snapshot {
            active: active.max(0) as u64,
            queued: self.ring.live() as u64,
            limit: limit as u64,
            available: avail,
        }
    }

    /// The stats of DESIGN §3.7.
    pub fn stats(&self) -> Stats {
        let snap = self.snapshot();
        let c = &self.counters;
        Stats {
            active: snap.active,
            queued: snap.queued,
            granted_unclaimed: c.unclaimed.load(Acquire) as u64,
            limit: snap.limit,
            max_concurrent: self.max_concurrent as u64,
            available: snap.available,
            admitted_total: c.admitted_total(),
            rejected_by_reason: c.rejected(),
            released_twice_total: c.released_twice.load(Relaxed) as u64,
            leaked_total: c.leaked.load(Relaxed) as u64,
            ring_free: self.ring.free_cells() as u64,
            queue_wait_count: c.wait_count.load(Relaxed) as u64,
            queue_wait_sum_ns: c.wait_sum_ns.load(Relaxed) as u64,
            queue_wait_max_ns: c.wait_max_ns.load(Relaxed) as u64,
            adaptive: self.adaptive_stats(),
            circuit: self.circuit_stats(),
        }
    }

    /// `active == 0 && queued == 0 && granted_unclaimed == 0` (what `drain` waits for).
    pub fn is_idle(&self) -> bool {
        let snap = self.snapshot();
        snap.active == 0 && snap.queued == 0 && self.counters.unclaimed.load(Acquire) == 0
    }

    #[inline]
    fn notify_idle(&self) {
        #[cfg(feature = "std")]
        self.idle.notify();
    }

    // ----- the dispatcher ------------------------------------------------------------------

    /// Asks for a dispatcher pass; runs it here unless another thread is running one.
    fn run_dispatcher(&self) {
        if !self.dispatch.enter() {
            return;
        }
        let mut batch = WakeBatch::new();
        let mut first = true;
        loop {
            if !first {
                self.dispatch.begin_pass();
            }
            first = false;
            let full = self.pass(&mut batch);
            let leave = !full && self.dispatch.try_leave();
            // State is committed; wake outside every protocol step.
            batch.wake_all();
            if leave {
                return;
            }
        }
    }

    /// One pass from the head. Returns `true` if it stopped because the wake batch is full.
    fn pass(&self, batch: &mut WakeBatch) -> bool {
        let mut h = self.ring.head();
        loop {
            if h == self.ring.tail() {
                // Empty: let `release` skip the dispatcher again, then re-check for an
                // enqueuer that claimed meanwhile (it may have set WAITERS just before our
                // clear). The fast path does not rely on the flag alone: it also checks that
                // the ring is empty, so clearing here never lets anyone barge (I6).
                self.permits.clear_waiters();
                if h == self.ring.tail() {
                    return false;
                }
                continue;
            }
            let cell = self.ring.cell(h);
            // Acquire: pairs with the Release of the publish (weight, time, waker visible).
            let s = Stamp(cell.stamp.load(Acquire));
            if s.identity() != self.ring.lap(h) || !s.kind().is_occupied() {
                // Not ticket `h`'s: it was cancelled (its cell freed, maybe reused since) or
                // skipped by the tail (the cell holds an older occupant, or what came after it).
                h = self.ring.advance_head(h);
                continue;
            }
            match s.kind() {
                // Claimed, not yet published: its enqueuer dispatches after publishing.
                Kind::Claimed => return false,
                Kind::Waiting => {
                    let w = cell.weight.load(Relaxed);
                    let verdict = if self.permits.load() & CLOSED != 0 {
                        Some(Reason::Shutdown)
                    } else if w > self.limit.load(Acquire) {
                        Some(Reason::ConcurrencyLimit)
                    } else {
                        None
                    };
                    if let Some(reason) = verdict {
                        if self.ring.settle(cell, s, Kind::Rejected(reason)).is_ok() {
                            self.counters.reject(reason);
                            batch.push(cell.waker.take(h));
                            h = self.ring.advance_head(h);
                            if batch.is_full() {
                                return true;
                            }
                        }
                        // else: lost to the owner's cancel or a timer; the next turn sees it.
                        continue;
                    }
                    match self.permits.reserve_for_head(w) {
                        Reserve::Reserved => {}
                        // WAITERS is set in the state that showed the shortage: the next
                        // release dispatches again.
                        Reserve::Blocked => return false,
                        // Closed since the check above: reject on the next turn.
                        Reserve::Closed => continue,
                    }
                    // Count the reserved permits as unclaimed *before* the grant is visible:
                    // the owner may consume it (and subtract) the moment the CAS lands.
                    self.counters.unclaimed.fetch_add(w, AcqRel);
                    if self.ring.settle(cell, s, Kind::Granted).is_ok() {
                        self.counters.record_queued_grant();
                        if self.clock.is_some() {
                            let waited = (self.clock.now_ns() as Word)
                                .wrapping_sub(cell.enqueued_ns.load(Relaxed));
                            self.counters.record_wait(waited);
                        }
                        batch.push(cell.waker.take(h));
                        h = self.ring.advance_head(h);
                        if batch.is_full() {
                            return true;
                        }
                    } else {
                        // The owner cancelled (or a timer expired it) first: the permits go
                        // back (we are the dispatcher, so no new pass is needed) and the next
                        // turn sees the ticket gone or settled.
                        self.counters.unclaimed.fetch_sub(w, AcqRel);
                        self.permits.give(w);
                    }
                }
                // Expired by a third party (`expire`) while queued: settled, waiting for its
                // owner to take the rejection. The turn passes on.
                Kind::Rejected(_) => h = self.ring.advance_head(h),
                // Only this dispatcher grants, and it moves the head past what it grants.
                Kind::Granted | Kind::Free => {
                    debug_assert!(false, "granted cell at the head");
                    h = self.ring.advance_head(h);
                }
            }
        }
    }
}

// SAFETY: every field is Sync except the waker slots' `UnsafeCell`s, which are guarded by their
// state bits (see `WakerSlot`).
unsafe impl<const N: usize> Sync for Bulkhead<N> {}
// SAFETY: as above; nothing is tied to a thread.
unsafe impl<const N: usize> Send for Bulkhead<N> {}

#[cfg(feature = "alloc")]
impl<const N: usize> Bulkhead<N> {
    /// [`try_acquire`](Self::try_acquire) returning a permit that owns an `Arc` of the bulkhead.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    pub fn try_acquire_owned(
        self: &alloc::sync::Arc<Self>,
        weight: u64,
    ) -> Result<crate::OwnedPermit<N>, AcquireError> {
        let call = self.guarded_try(weight)?;
        Ok(PermitOf::with_call(self.clone(), weight, call))
    }
}
