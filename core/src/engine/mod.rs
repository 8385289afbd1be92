//! The engine (docs/design.md §4): a [`PermitWord`](permit_word::PermitWord) plus a
//! [`WaiterRing`](ring::WaiterRing), joined by one non-blocking dispatcher. Everything here is
//! lock-free atomics with no policy, no handle type and no allocation after construction; the
//! front ends ([`crate::front`]) wrap it with the guarded-call steps and RAII handles.
//!
//! # Implementation details
//!
//! * **Fast path.** Taking permits is one CAS on the permit word; it fails while the `WAITERS`
//!   flag is set or a ticket lies between head and tail, so nobody barges past a queued waiter
//!   (I6). A release is one `fetch_add`; only when the previous state had `WAITERS` does it
//!   run the dispatcher.
//! * **Queueing.** An acquire that cannot be admitted reserves a live-waiter place and a cell,
//!   claims the next ticket (skipping cells whose occupant stays, see [`cell`]), writes its
//!   weight, call and waker into the cell, publishes `WAITING`, sets `WAITERS` and runs the
//!   dispatcher.
//! * **Dispatcher** ([`RunFlag`](crate::run_flag::RunFlag)). Every state change that might
//!   enable a grant (release, publish, cancel, expiry, resize, close) asks for a pass; one thread
//!   at a time runs passes, the others leave a "pending" mark and return. A pass walks the ring
//!   from the head: it passes tickets that are gone (cancelled, skipped) or expired, rejects
//!   waiters after `close()` (`shutdown`) or whose weight exceeds the limit
//!   (`concurrency_limit`), and otherwise reserves the head's weight from the permit word and
//!   moves the cell `WAITING → GRANTED` by CAS. If that CAS loses to a cancel, the permits go
//!   back and the pass goes on, so a grant and a cancel have exactly one winner and the loser
//!   never strands a permit (I7; failsafe#393). The head blocks lighter waiters behind it
//!   (strict FIFO, documented head-of-line behaviour, as in tokio).
//! * **Wake-ups** happen after the pass commits, outside every protocol step.
//! * **Owners.** A ticket has one owner (a future, a blocking caller, a binding's waiter). The
//!   owner consumes `GRANTED` / `REJECTED` cells; a cancel by the owner frees its cell at once.
//!
//! # Memory ordering
//!
//! Releasing permits is a `Release` operation and every successful acquire is an `Acquire`
//! operation on the same word (a queued grant is ordered through the cell stamp), so writes
//! made before a release are visible to whoever acquires those permits next. A failed
//! take behaves like an `Acquire` load. The wake-up of a queued waiter happens after the grant
//! is committed, not atomically with it.

pub(crate) mod budget;
pub(crate) mod cell;
#[cfg(feature = "alloc")]
pub(crate) mod classed;
#[cfg(feature = "alloc")]
pub(crate) mod classes;
pub(crate) mod counters;
pub(crate) mod dispatch;
#[cfg(feature = "std")]
pub(crate) mod idle;
#[cfg(all(feature = "std", target_has_atomic = "64"))]
pub(crate) mod lease_gate;
pub(crate) mod permit_word;
#[cfg(feature = "alloc")]
pub(crate) mod queue_delay;
pub(crate) mod ring;
pub(crate) mod waker_slot;

use core::task::Waker;

use crossbeam_utils::CachePadded;

use self::{
    budget::BudgetBook,
    cell::{COST_OBSERVE_SHIFT, Kind, Stamp, cost_of, observe_of},
    counters::{Counters, Lane},
    dispatch::WakeBatch,
    permit_word::{CLOSED, PermitWord, Reserve, TakeError, WAITERS},
    ring::{ClaimError, WaiterRing},
};
use crate::{
    clock::ClockSource,
    config::{Config, ConfigError},
    observe::Observe,
    reason::{AcquireError, Reason, Rejection, Snapshot},
    run_flag::RunFlag,
    sync::{AtomicWord, Ordering::*, SWord, Word},
};

/// The handle of one queued acquire (see [`Bulkhead::enqueue`](crate::Bulkhead::enqueue)).
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

/// Why a cancel (or an expiry) did not settle the ticket.
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

/// A checked raw release would return more permits than are out without a handle (the raw
/// pair has no handle to detect a double release, so the engine's ledger of handle-free
/// permits is checked instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverRelease;

/// The guarded call a queued waiter carries in its cell: the breaker word it was admitted with
/// and two flags (see [`crate::policy::state::CallToken`]), and its tag — the admission id
/// (0 on a bulkhead without an observer). Plain data, three words. The request's own observed
/// dimensions travel beside it (`enqueue`'s `observe`) and ride in the cell's cost word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CallWord {
    pub(crate) admit: Word,
    pub(crate) flags: Word,
    pub(crate) tag: Word,
}

/// What a settled (or cancelled) waiter's cell held: its [`CallWord`] and — read only when the
/// caller asks (a bulkhead with an observer) — what it asked for and its clock stamps
/// (enqueue; the grant, 0 if not granted), for the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CellRecord {
    pub(crate) call: CallWord,
    pub(crate) weight: Word,
    pub(crate) cost: Word,
    pub(crate) enqueued_ns: Word,
    pub(crate) granted_ns: Word,
    /// The dimensions observe mode let the grant through short (0 if not granted).
    pub(crate) bypass: Word,
    /// The waiter's class (0 on a bulkhead without classes).
    pub(crate) class: u16,
}

pub(crate) use permit_word::{OBSERVE_BUDGET, OBSERVE_CALLS};

/// A request's own observed dimensions (the `mode` word's bits).
pub(crate) const TAG_OBSERVE: Word = OBSERVE_CALLS | OBSERVE_BUDGET;
const _: () = assert!(TAG_OBSERVE == cell::COST_OBSERVE_MASK);

impl CellRecord {
    /// Reads what a settled or live cell holds for its waiter (Relaxed: ordered by the
    /// Acquire of the stamp the caller read); the rest only when `detail`.
    #[inline]
    fn of_cell(cell: &crate::engine::cell::Cell, detail: bool) -> CellRecord {
        let packed = cell.weight.load(Relaxed);
        let call = CallWord {
            admit: cell.call.load(Relaxed),
            flags: packed >> CALL_FLAGS_SHIFT,
            tag: cell.tag.load(Relaxed),
        };
        if !detail {
            return CellRecord {
                call,
                ..CellRecord::default()
            };
        }
        CellRecord {
            call,
            weight: packed & WEIGHT_MASK,
            cost: cost_of(cell.cost.load(Relaxed)),
            enqueued_ns: cell.enqueued_ns.load(Relaxed),
            granted_ns: cell.granted_ns.load(Relaxed),
            bypass: cell.bypass.load(Relaxed),
            class: 0,
        }
    }
}

/// Flags of a [`CallWord`] live in the top bits of the cell's weight word (a weight is at most
/// `MAX_PERMITS`, which leaves them free on every target).
const CALL_FLAGS_SHIFT: u32 = Word::BITS - 2;
const WEIGHT_MASK: Word = (1 << CALL_FLAGS_SHIFT) - 1;
const _: () = assert!(crate::limits::MAX_PERMITS as Word <= WEIGHT_MASK);

/// What the engine did with an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// The caller holds the permits; observe mode let these dimensions through short
    /// (`TAG_OBSERVE` bits, 0 when enforced).
    Now(Word),
    /// Queued under this ticket.
    Queued(Ticket),
}

/// What an admission would do now ([`Engine::would_admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DryAdmit {
    /// Granted at once.
    Now,
    /// Queued behind `ahead` live waiters.
    Queue { ahead: u64 },
}

/// `Engine::mode`: `enabled = false`.
const MODE_DISABLED: Word = 1;
/// The mode bit of a classed bulkhead: every decision goes through the dispatcher
/// (docs/design.md §4.8).
const MODE_CLASSED: Word = 1 << 3;
/// The mode bit of a leased bulkhead (docs/design.md §16): the limit is a block leased from
/// elsewhere; a limit of 0 is an empty block, not the kill switch (waiters wait for it to grow;
/// only a weight above the ceiling never fits); admissions check the lease's deadline and ring
/// its demand bell when the block is short. Set once, never cleared.
const MODE_LEASED: Word = 1 << 4;

/// The mode word of a bulkhead (`enabled = false` wins over observe mode).
const fn mode_of(enabled: bool, observe: Observe) -> Word {
    if !enabled {
        MODE_DISABLED
    } else {
        observe_bits(observe)
    }
}

pub(crate) const fn observe_bits(observe: Observe) -> Word {
    (if observe.concurrency() {
        OBSERVE_CALLS
    } else {
        0
    }) | (if observe.budget() { OBSERVE_BUDGET } else { 0 })
}

const fn reason_of(e: TakeError) -> Reason {
    match e {
        TakeError::Closed => Reason::Shutdown,
        TakeError::Busy => Reason::ConcurrencyLimit,
        TakeError::Budget => Reason::BudgetLimit,
        TakeError::Rate => Reason::RateLimit,
    }
}

/// A ticket's state, from [`Engine::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Polled {
    /// Still queued.
    Pending,
    /// Granted `weight` permits and `cost` budget units, now held by the caller (the ticket
    /// is consumed).
    Granted {
        weight: u64,
        cost: u64,
        call: CellRecord,
    },
    /// Rejected (the ticket is consumed).
    Rejected {
        rejection: Rejection,
        call: CellRecord,
    },
}

/// The lock-free engine of one bulkhead. See the module docs.
#[derive(Debug)]
pub(crate) struct Engine<const N: usize> {
    permits: CachePadded<PermitWord>,
    dispatch: CachePadded<RunFlag>,
    ring: WaiterRing<N>,
    limit: AtomicWord,
    /// Permits out without a handle: handed out by the raw pair and the polling API (or a
    /// forgotten call), not yet returned. Only the checked raw release reads it.
    loose: AtomicWord,
    pub(crate) counters: Counters,
    /// The budget's ceiling and settlement counters (its free units are in `permits`).
    pub(crate) budget: BudgetBook,
    /// The revision of the limits in force, shifted left by one; bit 0 set while an
    /// `apply_limits` installs the next one (docs/design.md §4.6).
    revision: AtomicWord,
    /// The ceiling of the limit: `max_concurrent` at construction, raised (never lowered) by
    /// an `apply_limits` above it (docs/design.md §4.6). Also the largest valid weight.
    max_concurrent: AtomicWord,
    /// `max_orphaned`: the permits orphaned calls may hold outside `active` at once.
    max_orphaned: Word,
    /// A leased budget's ceiling: the largest cost that may wait (the fleet budget; a leased
    /// budget's block grows back, so only this refuses a cost outright). `Word::MAX`: none.
    lease_budget_ceiling: AtomicWord,
    /// Leased mode's deadline and demand bell (docs/design.md §16; the mode itself is
    /// [`MODE_LEASED`]).
    #[cfg(all(feature = "std", target_has_atomic = "64"))]
    pub(crate) lease: lease_gate::LeaseGate,
    enabled: bool,
    /// How admissions are decided: 0 enforces every dimension (the fast path's one check);
    /// otherwise [`MODE_DISABLED`] (`enabled = false`) or observe mode's bits
    /// ([`OBSERVE_CALLS`], [`OBSERVE_BUDGET`], docs/design.md §4.7), decided out of line.
    mode: AtomicWord,
    clock: ClockSource,
    #[cfg(feature = "std")]
    pub(crate) idle: idle::IdleWaiters,
    /// The class book of a classed bulkhead (docs/design.md §4.8).
    #[cfg(feature = "alloc")]
    classes: Option<alloc::boxed::Box<classes::ClassBook>>,
}

impl<const N: usize> Engine<N> {
    /// An engine over `ring` for `config` (validated).
    #[cfg(not(loom))]
    pub(crate) const fn new(config: &Config, ring: WaiterRing<N>, clock: ClockSource) -> Self {
        let (mc, start) = (config.max_concurrent as Word, config.start() as Word);
        let (budget, enabled) = (config.budget, config.enabled);
        let (observe, max_orphaned) = (config.observe, config.max_orphaned);
        let units = match budget {
            Some(b) => Some(b as Word),
            None => None,
        };
        Self {
            permits: CachePadded::new(PermitWord::new(start, units)),
            dispatch: CachePadded::new(RunFlag::new()),
            ring,
            limit: AtomicWord::new(start),
            loose: AtomicWord::new(0),
            counters: Counters::new(),
            budget: BudgetBook::new(budget),
            revision: AtomicWord::new(0),
            max_concurrent: AtomicWord::new(mc),
            max_orphaned: max_orphaned as Word,
            lease_budget_ceiling: AtomicWord::new(Word::MAX),
            #[cfg(all(feature = "std", target_has_atomic = "64"))]
            lease: lease_gate::LeaseGate::new(),
            enabled,
            mode: AtomicWord::new(mode_of(enabled, observe)),
            clock,
            #[cfg(feature = "std")]
            idle: idle::IdleWaiters::new(),
            #[cfg(feature = "alloc")]
            classes: None,
        }
    }

    /// An engine over `ring` (loom build: not `const`).
    #[cfg(loom)]
    pub(crate) fn new(config: &Config, ring: WaiterRing<N>, clock: ClockSource) -> Self {
        let (mc, start) = (config.max_concurrent as Word, config.start() as Word);
        let (budget, enabled) = (config.budget, config.enabled);
        let (observe, max_orphaned) = (config.observe, config.max_orphaned);
        let units = budget.map(|b| b as Word);
        Self {
            permits: CachePadded::new(PermitWord::new(start, units)),
            dispatch: CachePadded::new(RunFlag::new()),
            ring,
            limit: AtomicWord::new(start),
            loose: AtomicWord::new(0),
            counters: Counters::new(),
            budget: BudgetBook::new(budget),
            revision: AtomicWord::new(0),
            max_concurrent: AtomicWord::new(mc),
            max_orphaned: max_orphaned as Word,
            lease_budget_ceiling: AtomicWord::new(Word::MAX),
            #[cfg(all(feature = "std", target_has_atomic = "64"))]
            lease: lease_gate::LeaseGate::new(),
            enabled,
            mode: AtomicWord::new(mode_of(enabled, observe)),
            clock,
            #[cfg(feature = "std")]
            idle: idle::IdleWaiters::new(),
            #[cfg(feature = "alloc")]
            classes: None,
        }
    }

    /// The same engine with classes (docs/design.md §4.8): every decision goes through the
    /// dispatcher from now on.
    #[cfg(feature = "alloc")]
    pub(crate) fn with_classes(mut self, book: alloc::boxed::Box<classes::ClassBook>) -> Self {
        self.classes = Some(book);
        // Relaxed: not shared yet.
        self.mode.fetch_or(MODE_CLASSED, Relaxed);
        // For good: every release runs the classed release step (see `release`).
        self.permits.set_waiters();
        self
    }

    // ----- views -----------------------------------------------------------------------------

    pub(crate) fn max_concurrent(&self) -> u64 {
        // Relaxed: a bound that only rises; a weight checked against the old one was valid
        // then (the permit word's fields hold any weight up to the largest ceiling).
        self.max_concurrent.load(Relaxed) as u64
    }

    /// Whether the limit is a leased block (docs/design.md §16).
    pub(crate) fn is_leased(&self) -> bool {
        // Relaxed: set once, before the lease's first resize publishes anything it guards.
        self.mode.load(Relaxed) & MODE_LEASED != 0
    }

    /// Whether a leased bulkhead's lease admits nothing now: its block is 0 or past its
    /// deadline (a refusal's bound is then `fleet_lease`).
    fn lease_refuses(&self) -> bool {
        if !self.is_leased() {
            return false;
        }
        #[cfg(all(feature = "std", target_has_atomic = "64"))]
        if !self.lease.admits(self.clock.now_ns()) {
            return true;
        }
        self.limit.load(Acquire) == 0
    }

    /// Switches to leased mode for good (docs/design.md §16).
    pub(crate) fn set_leased(&self) {
        // SeqCst: ordered with the permit word's RMWs like `set_observe`; the resize that
        // follows publishes the new limit.
        self.mode.fetch_or(MODE_LEASED, SeqCst);
    }

    /// Sets a leased bulkhead's deadline; a later one runs a dispatcher pass (waiters the
    /// expired block held back may now be granted).
    #[cfg(all(feature = "std", target_has_atomic = "64"))]
    pub(crate) fn set_lease_until(&self, until_ns: u64) {
        let later = until_ns > self.lease.until();
        self.lease.set_until(until_ns);
        if later {
            self.run_dispatcher();
        }
    }

    /// Sets a leased bulkhead's ceiling (the largest weight that may wait: the fleet limit) up
    /// or down; a pass rejects the waiters above a lower one (`concurrency_limit`).
    pub(crate) fn set_lease_ceiling(&self, ceiling: u64) {
        // Relaxed: see `max_concurrent`; the pass below reads it.
        self.max_concurrent.store(ceiling as Word, Relaxed);
        self.run_dispatcher();
    }

    /// Sets a leased budget's ceiling (the largest cost that may wait: the fleet budget) up or
    /// down; a pass rejects the waiters above a lower one (`budget_limit`).
    pub(crate) fn set_lease_budget_ceiling(&self, units: u64) {
        // Relaxed: a setting; the pass below reads it.
        self.lease_budget_ceiling.store(units as Word, Relaxed);
        self.run_dispatcher();
    }

    /// A leased budget's ceiling (`Word::MAX`: none).
    pub(crate) fn lease_budget_ceiling(&self) -> Word {
        // Relaxed: a setting, read by the checks it bounds.
        self.lease_budget_ceiling.load(Relaxed)
    }

    /// Raises the ceiling to `limit` if it is higher (validated by `LimitsSnapshot::check`).
    pub(crate) fn raise_ceiling(&self, limit: u64) {
        // Relaxed: see `max_concurrent`; the limit's own resize publishes the permits.
        self.max_concurrent.fetch_max(limit as Word, Relaxed);
    }

    pub(crate) fn limit(&self) -> u64 {
        // Acquire: pairs with the AcqRel CAS of `apply_limit`.
        self.limit.load(Acquire) as u64
    }

    pub(crate) fn max_orphaned(&self) -> u64 {
        self.max_orphaned as u64
    }

    pub(crate) fn max_queue(&self) -> u64 {
        self.ring.max_queue() as u64
    }

    /// `max_queue` at construction (the most `set_max_queue` may set).
    pub(crate) fn max_queue_ceiling(&self) -> u64 {
        self.ring.max_queue_ceiling() as u64
    }

    /// Sets the bound on live waiters (`0 ..= max_queue_ceiling`, checked by the caller).
    pub(crate) fn set_max_queue(&self, n: u64) {
        self.ring.set_max_queue(n as Word);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the bulkhead has a budget (a second dimension).
    pub(crate) fn has_budget(&self) -> bool {
        self.permits.has_budget()
    }

    /// The budget's ceiling it was built with (0 without a budget).
    pub(crate) fn max_budget(&self) -> u64 {
        self.budget.max as u64
    }

    /// The budget's current ceiling (0 without a budget).
    pub(crate) fn budget_limit(&self) -> u64 {
        // Acquire: pairs with the resize CAS of `apply_budget`.
        self.budget.limit.load(Acquire) as u64
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.permits.load() & CLOSED != 0
    }

    /// Whether this engine reads a clock.
    pub(crate) fn has_clock(&self) -> bool {
        self.clock.is_some()
    }

    /// The host clock now (ns; 0 without a clock).
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub(crate) fn ring_free(&self) -> u64 {
        self.ring.free_cells() as u64
    }

    // ----- admission -------------------------------------------------------------------------

    /// Validates a weight: `1 ..= max_concurrent`.
    #[inline]
    pub(crate) fn check_weight(&self, weight: u64) -> Result<Word, AcquireError> {
        match crate::reason::check_weight(weight, self.max_concurrent()) {
            Ok(w) => Ok(w as Word),
            Err(e) => Err(e),
        }
    }

    /// Validates a cost: `0 ..= max_budget` (only 0 without a budget).
    #[inline]
    pub(crate) fn check_cost(&self, cost: u64) -> Result<Word, AcquireError> {
        match crate::reason::check_cost(cost, self.budget.max as u64) {
            Ok(c) => Ok(c as Word),
            Err(e) => Err(e),
        }
    }

    /// Counts and builds a rejection.
    pub(crate) fn reject(&self, reason: Reason) -> Rejection {
        self.counters.reject(reason);
        self.rejection(reason)
    }

    /// Builds a rejection without counting it (a dry run's answer).
    pub(crate) fn rejection(&self, reason: Reason) -> Rejection {
        Rejection {
            class: None,
            leased: self.lease_refuses()
                || (reason == Reason::BudgetLimit
                    && self.is_leased()
                    && self.budget.limit.load(Acquire) == 0),
            retry_after_ns: 0,
            reason,
            snapshot: self.snapshot(),
        }
    }

    /// The first step of every admission: take now, or say why not. `TAKE` false: the same
    /// checks in the same order, read-only (a dry run, [`would_admit`](Self::would_admit)).
    /// `#[inline]`, not `inline(always)`: forcing it cost the uncontended pair 21 instructions
    /// (89 → 110 Ir in `bench/callgrind.sh`, measured A/B; the inliner's later choices differ).
    ///
    /// `observe` is the request's own observed dimensions (`TAG_OBSERVE` bits, 0 for none),
    /// added to the bulkhead's mode. `Ok` carries the dimensions observe mode let through
    /// short (0 on the enforcing path).
    #[inline]
    fn now_or_short<const TAKE: bool>(
        &self,
        w: Word,
        c: Word,
        observe: Word,
        class: u16,
    ) -> Result<Word, TakeError> {
        // Relaxed: the mode only selects the path; a decision racing `set_observe` is ordered
        // before it.
        let mode = self.mode.load(Relaxed) | observe;
        if mode != 0 {
            if mode == MODE_LEASED {
                // A leased bulkhead's own path (its every admission): not the cold one.
                self.leased_take::<TAKE>(w, c, mode, class)
            } else {
                self.moded_take::<TAKE>(w, c, mode, class)
            }
        } else if self.ring.is_empty() {
            if TAKE {
                self.permits.try_take(w, c).map(|()| 0)
            } else {
                self.permits.would_take(w, c).map(|()| 0)
            }
        } else if self.is_closed() {
            Err(TakeError::Closed)
        } else {
            // A waiter is queued: no barging (I6), whatever the `WAITERS` flag says now.
            Err(TakeError::Busy)
        }
    }

    /// `now_or_short` of a disabled bulkhead or one in observe mode. Disabled: everything is
    /// admitted (down to the signed fields' floors). Observe mode (docs/design.md §4.7): the
    /// fast path's checks in its order with the observed dimensions let through when short
    /// (counted in `observed_by_reason` when `TAKE`), the enforced ones checked as ever (C32).
    /// The kill switch holds in both (§4.6). Out of line and cold: the enforcing fast path
    /// does not carry it.
    #[cold]
    #[inline(never)]
    fn moded_take<const TAKE: bool>(
        &self,
        w: Word,
        c: Word,
        mode: Word,
        class: u16,
    ) -> Result<Word, TakeError> {
        if mode & MODE_LEASED != 0 {
            return self.leased_take::<TAKE>(w, c, mode, class);
        }
        self.unleased_take::<TAKE>(w, c, mode, class)
    }

    /// The enforcing decision of a bulkhead with no mode bits (the fast path's), for a leased
    /// bulkhead within its deadline. (A limit of 0 has no permits: `Busy`, as the kill switch's
    /// path says it.)
    #[cfg(all(feature = "std", target_has_atomic = "64"))]
    #[inline]
    fn plain_take<const TAKE: bool>(&self, w: Word, c: Word) -> Result<Word, TakeError> {
        if self.ring.is_empty() {
            if TAKE {
                self.permits.try_take(w, c).map(|()| 0)
            } else {
                self.permits.would_take(w, c).map(|()| 0)
            }
        } else if self.is_closed() {
            Err(TakeError::Closed)
        } else {
            Err(TakeError::Busy)
        }
    }

    /// `moded_take` of a leased bulkhead (docs/design.md §16): past the lease's deadline the
    /// block admits nothing; a take the block turns away rings the lease's demand bell.
    #[inline]
    fn leased_take<const TAKE: bool>(
        &self,
        w: Word,
        c: Word,
        mode: Word,
        class: u16,
    ) -> Result<Word, TakeError> {
        // A leased block is never observed: observe mode (the bulkhead's or a request's) must
        // not admit past a block other processes count on — the permits' or the budget's.
        let mode = mode & !(OBSERVE_CALLS | OBSERVE_BUDGET);
        #[cfg(all(feature = "std", target_has_atomic = "64"))]
        let r = if self.lease.admits(self.clock.now_ns_at_most()) {
            if mode == MODE_LEASED {
                self.plain_take::<TAKE>(w, c)
            } else {
                self.unleased_take::<TAKE>(w, c, mode, class)
            }
        } else if self.is_closed() {
            Err(TakeError::Closed)
        } else {
            Err(TakeError::Busy)
        };
        #[cfg(not(all(feature = "std", target_has_atomic = "64")))]
        let r = self.unleased_take::<TAKE>(w, c, mode, class);
        #[cfg(all(feature = "std", target_has_atomic = "64"))]
        if TAKE && matches!(r, Err(TakeError::Busy | TakeError::Budget)) {
            self.lease.short(w, c, r == Err(TakeError::Budget));
        }
        r
    }

    /// `moded_take`'s decision for the disabled, observe and classed modes (and a leased
    /// bulkhead within its deadline).
    #[inline]
    fn unleased_take<const TAKE: bool>(
        &self,
        w: Word,
        c: Word,
        mode: Word,
        class: u16,
    ) -> Result<Word, TakeError> {
        #[cfg(feature = "alloc")]
        if mode & MODE_CLASSED != 0 {
            return self.classed_take::<TAKE>(w, c, class);
        }
        let _ = class;
        if self.limit.load(Relaxed) == 0 {
            return Err(TakeError::Busy);
        }
        if mode & MODE_DISABLED != 0 {
            return if TAKE {
                self.permits.take_unbounded(w, c).map(|()| 0)
            } else {
                self.permits.would_take_unbounded(w, c).map(|()| 0)
            };
        }
        if !self.ring.is_empty() {
            // As the fast path: no barging past a queued waiter.
            return Err(if self.is_closed() {
                TakeError::Closed
            } else {
                TakeError::Busy
            });
        }
        if TAKE {
            let short = self.permits.try_take_observed(w, c, mode)?;
            self.count_observed(short);
            Ok(short)
        } else {
            self.permits.would_take_observed(w, c, mode)
        }
    }

    /// Counts an admission observe mode let through with the dimensions `short` short (if
    /// any), under the reason the enforced decision would have given (permits first).
    fn count_observed(&self, short: Word) {
        if short & OBSERVE_CALLS != 0 {
            self.counters.observe(Reason::ConcurrencyLimit);
        } else if short & OBSERVE_BUDGET != 0 {
            self.counters.observe(Reason::BudgetLimit);
        }
    }

    /// The dimensions observe mode lets through now.
    pub(crate) fn observe(&self) -> Observe {
        // Relaxed: a setting, read for stats.
        let m = self.mode.load(Relaxed);
        if m & MODE_DISABLED != 0 {
            Observe::Off
        } else {
            Observe::of(m & OBSERVE_CALLS != 0, m & OBSERVE_BUDGET != 0)
        }
    }

    /// Switches observe mode to `observe` (validated: `Budget` only with a budget), then runs
    /// a dispatcher pass: a waiter queued for a dimension now observed is granted. Enforcing
    /// again never revokes: observed holders beyond the limit leave by attrition, as after a
    /// shrink. A disabled bulkhead stays disabled.
    pub(crate) fn set_observe(&self, observe: Observe) {
        // SeqCst: ordered with the permit word's RMWs, so the pass below sees the new mode.
        let _ = self.mode.fetch_update(SeqCst, SeqCst, |m| {
            Some(if m & MODE_DISABLED != 0 {
                m
            } else {
                // Only the observe bits change: a classed bulkhead stays classed (dropping
                // `MODE_CLASSED` sent a classed bulkhead's admissions down the plain path,
                // which refused every one: a review of the Python binding found it).
                (m & !(OBSERVE_CALLS | OBSERVE_BUDGET)) | observe_bits(observe)
            })
        });
        self.run_dispatcher();
    }

    #[inline]
    fn admit_now(&self, w: Word, c: Word, observe: Word, class: u16) -> Result<Word, TakeError> {
        let r = self.now_or_short::<true>(w, c, observe, class);
        if r.is_ok() {
            self.counters
                .admitted
                .add_pair(Lane::Admitted, 1, Lane::Reserved, c);
        }
        r
    }

    /// Takes `w` permits and `c` budget units (validated) now, or refuses without waiting
    /// (`concurrency_limit`, `budget_limit`, `shutdown`; counted).
    #[inline]
    pub(crate) fn take(&self, w: Word, c: Word) -> Result<(), Rejection> {
        match self.admit_now(w, c, 0, 0) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.refuse(e)),
        }
    }

    /// [`take`](Self::take) of a request whose deadline leaves it no time to wait
    /// (docs/design.md §5.9): admitted now, or refused `timeout` (counted; `shutdown` after
    /// close) whatever held it back.
    pub(crate) fn take_or_time_out(
        &self,
        w: Word,
        c: Word,
        observe: Word,
        class: u16,
    ) -> Result<Word, Rejection> {
        self.admit_now(w, c, observe, class).map_err(|e| match e {
            TakeError::Closed => self.refuse(e),
            _ => self.reject(Reason::Timeout),
        })
    }

    /// The clock the engine reads.
    #[inline]
    pub(crate) fn clock(&self) -> &ClockSource {
        &self.clock
    }

    /// [`take`](Self::take) that refuses without counting (`None`): the caller then runs the
    /// counting admission, which decides (`Bulkhead::take_now`).
    #[inline]
    pub(crate) fn take_quietly(&self, w: Word) -> Option<()> {
        self.admit_now(w, 0, 0, 0).ok().map(drop)
    }

    /// Whether the bulkhead has classes (its admissions go through the class lists).
    #[inline]
    pub(crate) fn is_classed(&self) -> bool {
        #[cfg(feature = "alloc")]
        return self.classes().is_some();
        #[cfg(not(feature = "alloc"))]
        return false;
    }

    /// [`take`](Self::take) of a request with its own observed dimensions (`observe`,
    /// `TAG_OBSERVE` bits); `Ok` carries the dimensions observe mode let through short.
    #[inline]
    /// `class`: the request's class on a classed bulkhead (validated; 0 otherwise).
    pub(crate) fn take_observing(
        &self,
        w: Word,
        c: Word,
        observe: Word,
        class: u16,
    ) -> Result<Word, Rejection> {
        self.admit_now(w, c, observe, class).map_err(|e| {
            #[allow(unused_mut)]
            let mut r = self.refuse(e);
            #[cfg(feature = "alloc")]
            {
                self.name_class(&mut r, w, c, class);
                self.count_class_refusal(w, c, class);
            }
            r
        })
    }

    /// Counts and builds the rejection of a failed take.
    fn refuse(&self, e: TakeError) -> Rejection {
        self.reject(reason_of(e))
    }

    /// Why a request that was not admitted at once (`short`: the dimension that was short)
    /// may not queue, if it may not: the bulkhead fails fast (`max_queue == 0`,
    /// `enabled == false`: the short dimension's reason), the weight is above the current
    /// limit (`concurrency_limit`), the cost above the current budget (`budget_limit`). The
    /// queue's own bound (`queue_limit`) comes after these. One rule for
    /// [`enqueue`](Self::enqueue) and [`would_admit`](Self::would_admit).
    #[inline]
    fn queue_refusal(
        &self,
        w: Word,
        c: Word,
        observe: Word,
        short: TakeError,
        class: u16,
    ) -> Option<Reason> {
        if !self.enabled || self.ring.max_queue() == 0 {
            return Some(reason_of(short));
        }
        #[cfg(feature = "alloc")]
        if let Some(book) = self.classes() {
            return self.classed_never_fits(book, w, c, class);
        }
        let _ = class;
        self.never_fits(w, c, observe)
    }

    /// Why `w` permits and `c` units cannot be granted under the current limits however many
    /// are returned, if so: the weight above the limit (`concurrency_limit`; every weight under
    /// the kill switch), the cost above the budget (`budget_limit`). The rule of
    /// [`queue_refusal`](Self::queue_refusal) and of the dispatcher's head check.
    /// An observed dimension never refuses (observe mode, docs/design.md §4.7) except the
    /// kill switch's limit 0.
    #[inline]
    ///
    /// `observe`: the request's own observed dimensions (`TAG_OBSERVE` bits), added to the
    /// bulkhead's mode.
    fn never_fits(&self, w: Word, c: Word, observe: Word) -> Option<Reason> {
        // A leased block (permits or budget) is never observed: other processes count on it.
        // One read of the mode (Relaxed: as in `now_or_short`) decides both.
        let mode = self.mode.load(Relaxed);
        let leased = mode & MODE_LEASED != 0;
        let observed = |bit: Word| !leased && (mode | observe) & bit != 0;
        let limit = self.limit.load(Acquire);
        let refused = if leased {
            // An empty or short block grows back: only the ceiling refuses (never observed).
            w > self.max_concurrent.load(Relaxed)
        } else {
            w > limit && (limit == 0 || !observed(OBSERVE_CALLS))
        };
        let budget_ceiling = if leased {
            // A leased budget's block grows back too: only its ceiling refuses.
            self.lease_budget_ceiling()
        } else {
            self.budget.limit.load(Acquire)
        };
        if refused {
            Some(Reason::ConcurrencyLimit)
        } else if c > budget_ceiling && !observed(OBSERVE_BUDGET) {
            Some(Reason::BudgetLimit)
        } else {
            None
        }
    }

    /// What admitting `w` permits and `c` units (validated) would do now — the checks of
    /// [`enqueue`](Self::enqueue) (or of [`take`](Self::take) when `queue` is false) in the
    /// same order, read-only: nothing is taken, queued or counted. The answer is a snapshot,
    /// stale as soon as it returns under concurrency (docs/design.md §5.6).
    pub(crate) fn would_admit(
        &self,
        w: Word,
        c: Word,
        observe: Word,
        queue: bool,
        class: u16,
        patience_ns: u64,
    ) -> Result<DryAdmit, Reason> {
        let short = match self.now_or_short::<false>(w, c, observe, class) {
            Ok(_) => return Ok(DryAdmit::Now),
            Err(TakeError::Closed) => return Err(Reason::Shutdown),
            Err(e) => e,
        };
        if !queue {
            return Err(reason_of(short));
        }
        if let Some(r) = self.queue_refusal(w, c, observe, short, class) {
            return Err(r);
        }
        #[cfg(feature = "alloc")]
        if short == TakeError::Rate && self.rate_wait_ns(c).is_some_and(|n| n > patience_ns) {
            return Err(Reason::RateLimit);
        }
        #[cfg(not(feature = "alloc"))]
        let _ = patience_ns;
        if self.ring.live() >= self.ring.max_queue()
            || self.ring.free_cells() == 0
            || !self.ring.cost_fits(c)
        {
            // A shedding classed bulkhead lets an arrival at a full queue in when a waiter of a
            // lower priority can give its place up (docs/design.md §4.8).
            #[cfg(feature = "alloc")]
            let sheds = self.ring.free_cells() != 0
                && self
                    .classes()
                    .is_some_and(|b| b.shed && b.has_victim_below(class));
            #[cfg(not(feature = "alloc"))]
            let sheds = false;
            if !sheds {
                return Err(Reason::QueueLimit);
            }
        }
        #[cfg(feature = "alloc")]
        let ahead = match self.classes() {
            // The waiters the dispatch order serves before it (docs/design.md §5.6).
            Some(book) => book.ahead_of(class),
            None => self.ring.live(),
        };
        #[cfg(not(feature = "alloc"))]
        let ahead = self.ring.live();
        Ok(DryAdmit::Queue {
            ahead: ahead as u64,
        })
    }

    /// Admits `w` permits and `c` budget units (validated) at once, or queues a waiter
    /// carrying `call` (its `waker`, if any, woken when it settles), or refuses (counted):
    /// `shutdown`; when the bulkhead fails fast (`max_queue == 0`, `enabled == false`) the
    /// dimension that was short (`concurrency_limit`, `budget_limit`); `concurrency_limit` when
    /// the weight is above the current limit, `budget_limit` when the cost is above the
    /// current budget; `queue_limit` when `max_queue` waiters are live; on a bulkhead with
    /// rates, `rate_limit` when the request does not conform now and could not before
    /// `patience_ns()` (its queue timeout, computed only then) even with nobody ahead of it (docs/design.md §4.9).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn enqueue(
        &self,
        w: Word,
        c: Word,
        waker: Option<&Waker>,
        call: CallWord,
        observe: Word,
        class: u16,
        patience_ns: impl FnOnce() -> u64,
    ) -> Result<Admitted, Rejection> {
        #[cfg(feature = "alloc")]
        if self.classes().is_some() {
            return self
                .enqueue_in(w, c, waker, call, observe, class, patience_ns)
                .map_err(|mut r| {
                    self.name_class(&mut r, w, c, class);
                    self.count_class_refusal(w, c, class);
                    r
                });
        }
        self.enqueue_in(w, c, waker, call, observe, class, patience_ns)
    }

    /// [`enqueue`](Self::enqueue)'s steps.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn enqueue_in(
        &self,
        w: Word,
        c: Word,
        waker: Option<&Waker>,
        call: CallWord,
        observe: Word,
        class: u16,
        patience_ns: impl FnOnce() -> u64,
    ) -> Result<Admitted, Rejection> {
        let short = match self.admit_now(w, c, observe, class) {
            Ok(short) => return Ok(Admitted::Now(short)),
            Err(TakeError::Closed) => return Err(self.reject(Reason::Shutdown)),
            Err(e) => e,
        };
        if let Some(r) = self.queue_refusal(w, c, observe, short, class) {
            return Err(self.reject(r));
        }
        #[cfg(feature = "alloc")]
        if short == TakeError::Rate && self.rate_wait_ns(c).is_some_and(|n| n > patience_ns()) {
            // Its deadline passes before it could conform: refused now, its place never taken.
            return Err(self.reject(Reason::RateLimit));
        }
        #[cfg(not(feature = "alloc"))]
        let _ = patience_ns;
        let t = match self.ring.claim(c) {
            Ok(t) => t,
            #[cfg(feature = "alloc")]
            Err(ClaimError::QueueLimit) if self.classes().is_some_and(|b| b.shed) => {
                let cost = c | observe << COST_OBSERVE_SHIFT;
                return self.classed_shed(w, cost, waker, call, class);
            }
            Err(ClaimError::QueueLimit) => return Err(self.reject(Reason::QueueLimit)),
            Err(ClaimError::RingFull) => {
                // The tail may have skipped cells: let the head follow it past them.
                self.run_dispatcher();
                return Err(self.reject(Reason::QueueLimit));
            }
        };
        self.write_cell(t, w, c | observe << COST_OBSERVE_SHIFT, waker, call);
        #[cfg(feature = "alloc")]
        self.classed_enqueued(t, class);
        // Release: the dispatcher's Acquire load of the stamp sees weight, call, time, waker.
        let stopped_here = self.ring.publish(t);
        // From here on the fast path fails (I6); the dispatcher decides.
        let queued_behind = self.permits.set_waiters() & WAITERS != 0;
        // The RMW diet (issue 15): behind an earlier waiter, with no pass stopped at our cell,
        // our own pass would stop before it. `WAITERS` was set, so the release, cancel,
        // expiry, close or resize that changes that runs a pass, which reaches our published
        // cell (or marked it while claimed, which we saw: `publish`). A classed bulkhead's
        // dispatcher does not mark: it always passes here.
        #[cfg(feature = "alloc")]
        let classed = self.classes().is_some();
        #[cfg(not(feature = "alloc"))]
        let classed = false;
        if stopped_here || !queued_behind || classed {
            self.run_dispatcher();
        }
        Ok(Admitted::Queued(Ticket(t)))
    }

    /// The enqueuer writes ticket `t`'s claimed cell (before its publish).
    #[inline]
    pub(crate) fn write_cell(
        &self,
        t: Word,
        w: Word,
        cost_word: Word,
        waker: Option<&core::task::Waker>,
        call: CallWord,
    ) {
        let cell = self.ring.cell(t);
        // Relaxed: published by the Release CAS of `publish`.
        cell.weight
            .store(w | call.flags << CALL_FLAGS_SHIFT, Relaxed);
        cell.cost.store(cost_word, Relaxed);
        cell.call.store(call.admit, Relaxed);
        cell.tag.store(call.tag, Relaxed);
        cell.enqueued_ns.store(self.clock.now_ns() as Word, Relaxed);
        if let Some(waker) = waker {
            cell.waker.register(t, waker);
        }
    }

    /// Polls a ticket. On `Granted` / `Rejected` the ticket is consumed; `waker` replaces the
    /// registered waker while it is pending.
    /// `detail`: also read what the waiter asked for and its clock stamps (for events).
    #[inline]
    pub(crate) fn poll(
        &self,
        ticket: Ticket,
        waker: Option<&Waker>,
        detail: bool,
    ) -> Result<Polled, StaleTicket> {
        self.poll_as(ticket, waker, detail, false)
    }

    /// [`poll`](Self::poll); `nowait_owner`: the caller is the enqueuer of a classed no-wait or
    /// shedding cell, which nobody else may poll, cancel or expire (a forged ticket would
    /// take its decision: it is stale to everyone else).
    pub(crate) fn poll_as(
        &self,
        ticket: Ticket,
        waker: Option<&Waker>,
        detail: bool,
        nowait_owner: bool,
    ) -> Result<Polled, StaleTicket> {
        let t = ticket.0;
        let (cell, mut s) = self.ring.stamp_of(t).ok_or(StaleTicket)?;
        // Relaxed: ordered by the stamp's Acquire.
        if !nowait_owner && cell::is_nowait(cell.cost.load(Relaxed)) {
            return Err(StaleTicket);
        }
        if matches!(s.kind(), Kind::Waiting | Kind::Claimed) {
            let Some(waker) = waker else {
                return Ok(Polled::Pending);
            };
            cell.waker.register(t, waker);
            // Re-check after registering: a settlement committed before our registration is
            // seen here (its take of the slot happened-before our claim of it).
            s = match self.ring.stamp_of(t) {
                Some((_, s)) => s,
                None => return Err(StaleTicket),
            };
            if matches!(s.kind(), Kind::Waiting | Kind::Claimed) {
                return Ok(Polled::Pending);
            }
        }
        // Relaxed: ordered by the Acquire of the stamp that showed the settlement.
        let mut call = CellRecord::of_cell(cell, detail);
        #[cfg(feature = "alloc")]
        if let Some(book) = self.classes() {
            call.class = book.cell_class(self.ring.index(t));
        }
        let w = cell.weight.load(Relaxed) & WEIGHT_MASK;
        let c = cost_of(cell.cost.load(Relaxed));
        match s.kind() {
            Kind::Granted => {
                cell.waker.clear(t);
                self.ring.free(cell, s).map_err(|_| StaleTicket)?;
                // AcqRel: the permits move from unclaimed to held (I2 at quiescent points).
                self.counters.unclaimed.fetch_sub(w, AcqRel);
                if c != 0 {
                    self.budget.unclaimed.fetch_sub(c, AcqRel);
                }
                Ok(Polled::Granted {
                    weight: w as u64,
                    cost: c as u64,
                    call,
                })
            }
            Kind::Rejected(reason) => {
                call.granted_ns = 0;
                call.bypass = 0;
                cell.waker.clear(t);
                self.ring.free(cell, s).map_err(|_| StaleTicket)?;
                self.notify_idle();
                // Counted when it was rejected.
                Ok(Polled::Rejected {
                    rejection: self.rejection(reason),
                    call,
                })
            }
            Kind::Free | Kind::Waiting | Kind::Claimed => Err(StaleTicket),
        }
    }

    /// The owner cancels its queued ticket with `reason` (counted): O(1), the cell is free at
    /// once and the dispatcher skips the ticket; cancelling the head passes the turn on (I4).
    /// Returns the call the waiter carried (the caller ends it `ignored`).
    /// `detail`: as [`poll`](Self::poll)'s.
    pub(crate) fn cancel(
        &self,
        ticket: Ticket,
        reason: Reason,
        detail: bool,
    ) -> Result<CellRecord, CancelError> {
        let t = ticket.0;
        let (cell, s) = self.ring.stamp_of(t).ok_or(CancelError::Stale)?;
        // A classed no-wait or shedding cell is its enqueuer's alone (see `poll_as`).
        // Relaxed: ordered by the stamp's Acquire.
        if cell::is_nowait(cell.cost.load(Relaxed)) {
            return Err(CancelError::Stale);
        }
        match s.kind() {
            Kind::Waiting => {
                // Relaxed: the owner wrote these itself before publishing.
                #[allow(unused_mut)]
                let mut call = CellRecord {
                    granted_ns: 0,
                    bypass: 0,
                    ..CellRecord::of_cell(cell, detail)
                };
                #[cfg(feature = "alloc")]
                if let Some(book) = self.classes() {
                    call.class = book.cell_class(self.ring.index(t));
                }
                // Read before the free: once freed, the next lap's enqueuer may rewrite it (a
                // review found `queued_cost` drifting when it was read after).
                let word = cell.cost.load(Relaxed);
                match self.ring.cancel_free(cell, s, word) {
                    Ok(_) => {
                        // One winner against the dispatcher's WAITING → GRANTED CAS.
                        #[cfg(feature = "alloc")]
                        if let Some(book) = self.classes() {
                            book.left(book.rank(call.class), true);
                        }
                        self.counters.reject(reason);
                        cell.waker.clear(t);
                        self.run_dispatcher();
                        self.notify_idle();
                        Ok(call)
                    }
                    Err(now) => Err(cancel_lost(now)),
                }
            }
            Kind::Granted => Err(CancelError::Granted),
            Kind::Rejected(r) => Err(CancelError::Rejected(r)),
            Kind::Free | Kind::Claimed => Err(CancelError::Stale),
        }
    }

    /// Whether ticket `t` is a live waiter (its cell shows it waiting).
    pub(crate) fn is_queued(&self, ticket: Ticket) -> bool {
        matches!(self.ring.stamp_of(ticket.0), Some((_, s)) if s.kind() == Kind::Waiting)
    }

    /// Settles a queued ticket as rejected with `reason` (counted) on behalf of its owner (a
    /// host timer that fired), and wakes the owner, whose next poll takes the rejection.
    pub(crate) fn expire(&self, ticket: Ticket, reason: Reason) -> Result<(), CancelError> {
        let t = ticket.0;
        let (cell, s) = self.ring.stamp_of(t).ok_or(CancelError::Stale)?;
        // A classed no-wait or shedding cell is its enqueuer's alone (see `poll_as`).
        // Relaxed: ordered by the stamp's Acquire.
        if cell::is_nowait(cell.cost.load(Relaxed)) {
            return Err(CancelError::Stale);
        }
        // The class before the settle: once settled and polled, the cell may be reused.
        #[cfg(feature = "alloc")]
        let rank = self.rank_of_ticket(t);
        match s.kind() {
            Kind::Waiting => match self.ring.settle(cell, s, Kind::Rejected(reason)) {
                Ok(()) => {
                    self.counters.reject(reason);
                    #[cfg(feature = "alloc")]
                    self.classed_left(rank);
                    let waker = cell.waker.take(t);
                    // The head may stand on it: pass the turn on.
                    self.run_dispatcher();
                    self.notify_idle();
                    if let Some(w) = waker {
                        w.wake();
                    }
                    Ok(())
                }
                Err(now) => Err(cancel_lost(now)),
            },
            Kind::Granted => Err(CancelError::Granted),
            Kind::Rejected(r) => Err(CancelError::Rejected(r)),
            Kind::Free | Kind::Claimed => Err(CancelError::Stale),
        }
    }

    /// Returns `w` permits and `c` units of class `class` (0 on a plain bulkhead); hands them
    /// to the head waiter if any. The caller holds them.
    ///
    /// A classed bulkhead keeps `WAITERS` set for good (docs/design.md §4.8), so its releases
    /// always take the out-of-line step, which returns the class's units *before* it runs the
    /// dispatcher: a pass in between sees the class fuller than it is (conservative), and the
    /// pass this release runs or leaves pending sees it right. The plain path carries no test.
    #[inline]
    pub(crate) fn release(&self, w: Word, c: Word, class: u16) {
        let prev = self.permits.give(w, c);
        if prev & WAITERS != 0 {
            self.released_to_waiters(w, c, class);
        }
        self.notify_idle();
    }

    /// The release step that may grant: the class's units, then a dispatcher pass (itself
    /// out of line).
    #[inline]
    fn released_to_waiters(&self, w: Word, c: Word, class: u16) {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.classes() {
            book.give(book.rank(class), [w, c]);
            if !book.has_pending() {
                // Nobody to hand the units to: a waiter or no-wait cell that comes later
                // runs its own pass, which sees them (`ClassBook::entered`).
                return;
            }
        }
        let _ = (w, c, class);
        self.run_dispatcher();
    }

    /// `w` permits leave without a handle (the raw pair, a polled grant, a forgotten call).
    pub(crate) fn lend(&self, w: Word) {
        // Release, paired with the Acquire of `release_checked`'s successful decrement: a
        // return that finds this entry happens after the take that backs it, also for a racing
        // caller that never received the permits (the honest caller is ordered by its own
        // hand-over anyway).
        self.loose.fetch_add(w, Release);
    }

    /// `w` handle-free permits come back from a trusted caller (`release_units`). Saturates:
    /// a trusted over-return cannot make the ledger wrap and accept anything later.
    pub(crate) fn unlend(&self, w: Word) {
        let _ = self
            .loose
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(w)));
    }

    /// Returns `weight` handle-free permits, refusing (and counting in `released_twice_total`)
    /// any return of more than are out without a handle — a double release, or units that
    /// were never handed out (permits of a handle are not the raw pair's to return). So a
    /// checked return never lifts `available` above the limit.
    /// A weight of 0 or above `max_concurrent` is an argument error: refused, not counted.
    pub(crate) fn release_checked(&self, weight: u64) -> Result<(), OverRelease> {
        if weight == 0 || weight > self.max_concurrent() {
            return Err(OverRelease);
        }
        let w = weight as Word;
        // Acquire on success: see `lend`. A refusal publishes and reads nothing.
        let taken = self
            .loose
            .fetch_update(AcqRel, Relaxed, |n| n.checked_sub(w));
        if taken.is_err() {
            self.counters.record_double_release();
            return Err(OverRelease);
        }
        // Handle-free permits are class 0's.
        self.release(w, 0, 0);
        Ok(())
    }

    // ----- runtime change --------------------------------------------------------------------

    /// The revision of the limits in force (0 until the first `apply_limits`).
    pub(crate) fn revision(&self) -> u64 {
        // Acquire: pairs with the Release store of `end_apply`: a reader that sees a revision
        // sees its limits installed (what is reported is enforced, C33).
        (self.revision.load(Acquire) >> 1) as u64
    }

    /// Takes the right to install `revision` (`1 ..= MAX_REVISION`, checked by the caller):
    /// waits while another install runs (a few non-blocking steps), then refuses a revision not
    /// above the one in force with that one (`Err(current)`). Appliers are serialized so that
    /// the highest revision's limits are the ones left installed; admissions never wait here.
    pub(crate) fn begin_apply(&self, revision: u64) -> Result<(), u64> {
        // Acquire: as in `revision`.
        let mut r = self.revision.load(Acquire);
        loop {
            let current = (r >> 1) as u64;
            // Stale against the revision in force: refused at once, even while an install
            // runs (the one running is newer still, or it is this revision's own retry).
            if revision <= current {
                return Err(current);
            }
            if r & 1 != 0 {
                crate::sync::spin_wait();
                r = self.revision.load(Acquire);
                continue;
            }
            // Acquire: the previous install's limits are visible to this one.
            match self
                .revision
                .compare_exchange_weak(r, r | 1, Acquire, Acquire)
            {
                Ok(_) => return Ok(()),
                Err(actual) => r = actual,
            }
        }
    }

    /// Publishes `revision` (taken by `begin_apply`) once its limits are installed.
    pub(crate) fn end_apply(&self, revision: u64) {
        // Release: the installed limits happen-before any read of this revision.
        self.revision.store((revision as Word) << 1, Release);
    }

    /// Gives the install right back without publishing (an install that unwound: a waker
    /// panicked in its dispatcher pass): the revision in force stays what it was, and later
    /// applies are not left waiting on the bit.
    pub(crate) fn abandon_apply(&self) {
        // Release: what was installed before the unwind is visible to the next applier.
        self.revision.fetch_and(!1, Release);
    }

    /// Changes the limit, `1 ..= max_concurrent`; never blocks, never revokes.
    pub(crate) fn apply_limit(&self, limit: u64) -> Result<(), ConfigError> {
        if limit == 0 {
            return Err(ConfigError::Limit);
        }
        self.resize_limit(limit)
    }

    /// Changes the limit, `0 ..= max_concurrent` (0: the kill switch — nothing is admitted
    /// and the dispatcher rejects the queued waiters, `concurrency_limit`, until a raise).
    pub(crate) fn resize_limit(&self, limit: u64) -> Result<(), ConfigError> {
        if limit > self.max_concurrent() {
            return Err(ConfigError::Limit);
        }
        let new = limit as Word;
        // Acquire: pairs with the AcqRel CAS below of a concurrent resize.
        let mut old = self.limit.load(Acquire);
        loop {
            if new == old {
                return Ok(());
            }
            if new < old {
                // Shrink: take the permits out first, then publish the lower limit, so that
                // `limit − available` never under-reports the work in flight.
                let delta = (old - new) as SWord;
                self.permits.adjust(-delta, 0);
                // AcqRel: one winner among concurrent resizes; the loser undoes its delta.
                match self.limit.compare_exchange(old, new, AcqRel, Acquire) {
                    Ok(_) => break,
                    Err(actual) => {
                        self.permits.adjust(delta, 0);
                        old = actual;
                    }
                }
            } else {
                // AcqRel: as above; the permits are added only by the winner.
                match self.limit.compare_exchange(old, new, AcqRel, Acquire) {
                    Ok(_) => {
                        self.permits.adjust((new - old) as SWord, 0);
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

    /// Changes the budget's ceiling, `0 ..= max_budget`; never blocks, never revokes: growing
    /// grants waiters that now fit, shrinking lets the free units go negative until releases
    /// pay it back, and rejects queued waiters whose cost is above the new ceiling
    /// (`budget_limit`). 0 admits only cost-0 requests.
    pub(crate) fn apply_budget(&self, limit: u64) -> Result<(), ConfigError> {
        if !self.has_budget() || limit > self.budget.max as u64 {
            return Err(ConfigError::BudgetLimit);
        }
        let new = limit as Word;
        // Acquire: pairs with the AcqRel CAS below of a concurrent resize.
        let mut old = self.budget.limit.load(Acquire);
        loop {
            if new == old {
                return Ok(());
            }
            if new < old {
                // Shrink: take the units out first, then publish the lower ceiling (as
                // `apply_limit` does), so `limit − available` never under-reports use.
                let delta = (old - new) as SWord;
                self.permits.adjust(0, -delta);
                // AcqRel: one winner among concurrent resizes; the loser undoes its delta.
                match self
                    .budget
                    .limit
                    .compare_exchange(old, new, AcqRel, Acquire)
                {
                    Ok(_) => break,
                    Err(actual) => {
                        self.permits.adjust(0, delta);
                        old = actual;
                    }
                }
            } else {
                // AcqRel: as above; the units are added only by the winner.
                match self
                    .budget
                    .limit
                    .compare_exchange(old, new, AcqRel, Acquire)
                {
                    Ok(_) => {
                        self.permits.adjust(0, (new - old) as SWord);
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

    /// Stops admission for good (I8); idempotent.
    pub(crate) fn close(&self) {
        let prev = self.permits.close();
        if prev & CLOSED == 0 {
            self.run_dispatcher();
        }
        self.notify_idle();
    }

    // ----- observation -----------------------------------------------------------------------

    /// `{active, queued, limit, available}` now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let s = self.permits.load();
        // Acquire: pairs with the resize CAS and the grant bookkeeping.
        let limit = self.limit.load(Acquire);
        let unclaimed = self.counters.unclaimed.load(Acquire);
        let avail = self.permits.calls(s) as i64;
        let active = (limit as i64) - avail - (unclaimed as i64);
        let budget = self.has_budget().then(|| {
            // Acquire: as above.
            let b_limit = self.budget.limit.load(Acquire);
            let b_avail = self.permits.budget(s) as i64;
            let b_unclaimed = self.budget.unclaimed.load(Acquire) as i64;
            crate::reason::DimensionSnapshot {
                limit: b_limit as u64,
                in_use: (b_limit as i64 - b_avail - b_unclaimed).max(0) as u64,
                available: b_avail,
            }
        });
        Snapshot {
            active: active.max(0) as u64,
            queued: self.ring.live() as u64,
            limit: limit as u64,
            available: avail,
            revision: self.revision(),
            max_queue: self.ring.max_queue() as u64,
            queued_cost: self.ring.queued_cost() as u64,
            budget,
        }
    }

    /// Counts a settlement of a hold of `held` budget units against `used` (docs/design.md
    /// §4.5): the unused rest refunded, use beyond the hold as overrun, `used` consumed.
    #[inline]
    pub(crate) fn budget_settled(&self, held: Word, used: Word) {
        self.budget.settled(held, used);
        if used != 0 {
            self.counters.admitted.add(Lane::Consumed, used);
        }
    }

    /// A live hold asks for `c` more units (`c > 0`, validated): taken now if they fit, nobody
    /// is queued (no barging, I6) and the bulkhead is open — counted in `reserved_total` — or
    /// held past the budget: counted in `overrun_total` and the `overrun_held` gauge (never
    /// taken from the permit word, so nobody else is refused for it). Returns whether they were
    /// taken (docs/design.md §4.5, "Streaming holds").
    pub(crate) fn grow_hold(&self, c: Word) -> bool {
        // Not through `now_or_short`: a growth asks no permit, so an overdrawn permit count (a
        // limit shrunk below `active`) must not refuse it; the kill switch does, explicitly.
        // Relaxed / Acquire: as in `now_or_short` and `never_fits`.
        let mode = self.mode.load(Relaxed);
        // A classed bulkhead decides only in its dispatcher: growth is overrun there.
        let taken = mode & MODE_CLASSED == 0
            && self.limit.load(Acquire) != 0
            && self.ring.is_empty()
            && if mode & MODE_DISABLED != 0 {
                self.permits.take_unbounded(0, c).is_ok()
            } else {
                self.permits
                    .try_take_observed(0, c, mode)
                    .map(|short| self.count_observed(short))
                    .is_ok()
            };
        if taken {
            self.counters.admitted.add(Lane::Reserved, c);
        } else {
            self.budget.overran(c);
        }
        taken
    }

    /// `c` units of a hold's overrun part left it (see [`grow_hold`](Self::grow_hold)).
    #[inline]
    pub(crate) fn overrun_returned(&self, c: Word) {
        self.budget.overrun_returned(c);
    }

    /// The free permits and free budget units of one load of the permit word (a model's
    /// observer checks that no state ever shows one dimension charged without the other).
    #[cfg(loom)]
    pub(crate) fn free_now(&self) -> (SWord, SWord) {
        let s = self.permits.load();
        (self.permits.calls(s), self.permits.budget(s))
    }

    /// The budget's block of the stats, `None` without a budget. Read from one load of the
    /// permit word, so `available` and the permits' `available` of the same moment agree.
    pub(crate) fn budget_stats(&self) -> Option<crate::stats::BudgetStats> {
        if !self.has_budget() {
            return None;
        }
        let b = &self.budget;
        let s = self.permits.load();
        // Acquire: pairs with the resize CAS and the grant bookkeeping.
        let limit = b.limit.load(Acquire);
        let unclaimed = b.unclaimed.load(Acquire);
        let avail = self.permits.budget(s) as i64;
        let in_use = (limit as i64) - avail - (unclaimed as i64);
        // Relaxed: statistics.
        Some(crate::stats::BudgetStats {
            limit: limit as u64,
            max_budget: b.max as u64,
            in_use: in_use.max(0) as u64,
            available: avail,
            granted_unclaimed: unclaimed as u64,
            reserved_total: self
                .counters
                .admitted
                .sum(Lane::Reserved)
                .wrapping_add(b.reserved_queued.load(Relaxed) as u64),
            consumed_total: self.counters.admitted.sum(Lane::Consumed),
            refunded_total: b.refunded_total.load(Relaxed) as u64,
            overrun_total: b.overrun_total.load(Relaxed) as u64,
            overrun_held: b.overrun_held.load(Relaxed) as u64,
            queued_cost: self.ring.queued_cost() as u64,
        })
    }

    /// `active == 0 && queued == 0 && granted_unclaimed == 0 && orphaned_in_flight == 0`
    /// (what `drain` waits for).
    pub(crate) fn is_idle(&self) -> bool {
        let snap = self.snapshot();
        // Acquire: as in `snapshot`.
        snap.active == 0
            && snap.queued == 0
            && self.counters.unclaimed.load(Acquire) == 0
            && self.counters.orphaned_now() == 0
    }

    /// A call hands its `w` permits back while its work goes on (orphaning, docs/design.md
    /// §5.3): `w` of `max_orphaned` is reserved in one CAS that never passes the cap, then the
    /// permits return as a release (waking waiters). `Err` with the permits orphaned now when
    /// the cap would be passed (nothing changes).
    pub(crate) fn orphan(&self, w: Word, class: u16) -> Result<(), u64> {
        if !ring::reserve_n(&self.counters.orphaned, w, self.max_orphaned) {
            return Err(self.counters.orphaned_now());
        }
        // Relaxed: a statistic.
        self.counters.orphaned_total.fetch_add(w, Relaxed);
        self.release(w, 0, class);
        Ok(())
    }

    /// An orphaned call of `w` permits ended: it leaves the gauge (and `drain` may finish).
    pub(crate) fn orphan_ended(&self, w: Word) {
        // SeqCst: ordered with the drain-waiter count, as a release's `give`.
        self.counters.orphaned.fetch_sub(w, SeqCst);
        self.notify_idle();
    }

    #[inline]
    fn notify_idle(&self) {
        #[cfg(feature = "std")]
        self.idle.notify();
    }

    // ----- the dispatcher --------------------------------------------------------------------

    /// Asks for a dispatcher pass; runs it here unless another thread is running one. Out of
    /// line: the release fast path inlines to one `lock xadd` and two tests.
    #[inline(never)]
    fn run_dispatcher(&self) {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.classes() {
            return self.run_classed(book);
        }
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
            // Acquire: pairs with the Release of the publish (weight, call, time, waker).
            let s = Stamp(cell.stamp.load(Acquire));
            if s.identity() != self.ring.lap(h) || !s.kind().is_occupied() {
                // Not ticket `h`'s: it was cancelled (its cell freed, maybe reused since) or
                // skipped by the tail (the cell holds an older occupant, or what came after it).
                h = self.ring.advance_head(h);
                continue;
            }
            match s.kind() {
                // Claimed, not yet published: its enqueuer dispatches after publishing, told
                // by the mark (`WaiterRing::publish`); a lost mark CAS looks again.
                Kind::Claimed => {
                    if s.is_marked() || self.ring.mark_claimed(cell, s).is_ok() {
                        return false;
                    }
                }
                Kind::Waiting => {
                    let w = cell.weight.load(Relaxed) & WEIGHT_MASK;
                    let cw = cell.cost.load(Relaxed);
                    let c = cost_of(cw);
                    // The request's own observed dimensions ride in its cost word.
                    let own = observe_of(cw);
                    // Never fits: only after a shrink of a limit below the waiter's weight or
                    // cost (checked at enqueue: never a refusal after waiting otherwise).
                    let verdict = if self.permits.load() & CLOSED != 0 {
                        Some(Reason::Shutdown)
                    } else {
                        self.never_fits(w, c, own)
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
                    // A leased block past its deadline grants nobody, not even by handoff: the
                    // permits stay free until the lease manager renews (and installing the
                    // later deadline dispatches again) or shrinks the block.
                    #[cfg(all(feature = "std", target_has_atomic = "64"))]
                    if self.is_leased() && !self.lease.admits(self.clock.now_ns_at_most()) {
                        return false;
                    }
                    // Relaxed: as in `now_or_short`; the mode only selects the check. A leased
                    // block is never observed (see `leased_take`).
                    let mut observed = (self.mode.load(Relaxed) | own) & TAG_OBSERVE;
                    if self.is_leased() {
                        observed &= !(OBSERVE_CALLS | OBSERVE_BUDGET);
                    }
                    let mut short = 0;
                    let reserved = if observed == 0 {
                        self.permits.reserve_for_head(w, c)
                    } else {
                        self.permits
                            .reserve_for_head_observed(w, c, observed, &mut short)
                    };
                    match reserved {
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
                    if c != 0 {
                        self.budget.unclaimed.fetch_add(c, AcqRel);
                    }
                    // The grant's time goes into the cell before the grant is visible: only
                    // this dispatcher writes `granted_ns`, and its owner reads it after the
                    // Acquire that shows GRANTED (a lost settle leaves a value nobody reads).
                    let now = if self.clock.is_some() {
                        let now = self.clock.now_ns() as Word;
                        cell.granted_ns.store(now, Relaxed);
                        now
                    } else {
                        0
                    };
                    // Dispatcher-only too, published by the same settle.
                    cell.bypass.store(short, Relaxed);
                    if self.ring.settle(cell, s, Kind::Granted).is_ok() {
                        // Counted only once the grant is the waiter's (a cancel may win).
                        self.count_observed(short);
                        self.counters.record_queued_grant();
                        self.budget.reserved_by_dispatcher(c);
                        if self.clock.is_some() {
                            let waited = now.wrapping_sub(cell.enqueued_ns.load(Relaxed));
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
                        if c != 0 {
                            self.budget.unclaimed.fetch_sub(c, AcqRel);
                        }
                        self.permits.give(w, c);
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

/// Why a cancel or expiry lost its CAS: the stamp that won.
fn cancel_lost(now: Stamp) -> CancelError {
    match now.kind() {
        Kind::Granted => CancelError::Granted,
        Kind::Rejected(r) => CancelError::Rejected(r),
        _ => CancelError::Stale,
    }
}

// The engine is shared by reference between threads: every field is `Sync` (the waker slots'
// `UnsafeCell`s are guarded by their state bits, see `waker_slot`). Checked, not asserted.
const _: () = {
    const fn sync_and_send<T: Sync + Send>() {}
    sync_and_send::<Engine<0>>();
    sync_and_send::<Engine<8>>();
};
