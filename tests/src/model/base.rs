//! The base model (docs/design.md §4): random operation sequences run on a real [`Bulkhead`]
//! (single-threaded, through its public API, on a virtual clock) and on a small *sequential*
//! reference model. After every step the decisions, the ticket numbers, the order in which the
//! dispatcher settles waiters (observed through their wakers) and the *whole* stats object must
//! match exactly, and I1–I9 are checked. The end of every case releases and cancels everything
//! and checks I5.
//!
//! The model is written from the contract (docs/design.md §4) and kept deliberately naive: a
//! FIFO list of live waiters, the settled-but-unconsumed tickets, the ring's cells with the
//! ticket that occupies each (a live waiter or an unconsumed result; a cancelled waiter frees its
//! cell at once), a tail that skips occupied cells, a refusal only when every cell is taken,
//! and one `dispatch` that runs to quiescence after every operation. Cases run on a
//! runtime-sized ring and on small static rings (2, 4, 8 cells), so the tail laps the ring and
//! skips live and settled occupants within a case.
//!
//! The property issue 12 asks for is checked after every enqueue: an arrival is refused
//! `queue_limit` only while `max_queue` waiters are live, or when every cell is taken (live
//! waiters plus results their owners have not taken); on a runtime-sized ring, whose cells
//! outnumber `max_queue` by at least 64, never while fewer than `max_queue` are live.
//!
//! [`run`] takes any [`Op`] sequence, but the configuration must be one the callers generate:
//! `max_concurrent` 1..=6 (weights up to 7 are the invalid ones), a static ring only of 2, 4
//! or 8 cells and then `max_queue` at most its cells.

use std::{
    collections::{BTreeMap, HashSet, VecDeque},
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering::SeqCst},
    },
    task::{Context, Poll, Wake, Waker},
    time::Duration,
};

use hullguard_core::{
    AcquireError, Admission, Bulkhead, CancelError, Clock, ClockSource, Config, ConfigError,
    InvalidRelease, OverRelease, Permit, Reason, RejectedByReason, Rejection, Request, Snapshot,
    Stats, Ticket, TicketPoll, WaitHistogram, WouldAdmit, drain::DrainResult,
};

use super::{Mismatch, ensure, ensure_eq};

const MS: u64 = 1_000_000;

// ----- the reference model -------------------------------------------------------------------

/// A live waiter.
#[derive(Debug, Clone, Copy)]
struct Entry {
    ticket: u64,
    weight: u64,
    enqueued_ns: u64,
}

/// How a queued acquire settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    Granted(u64),
    Rejected(Reason),
}

/// What an acquire call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acq {
    Granted,
    Queued(u64),
    Invalid,
    Rejected(Reason),
}

/// What `poll_ticket` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PollR {
    Pending,
    Granted(u64),
    Rejected(Reason),
    Stale,
}

/// What `cancel` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelR {
    Ok,
    Granted,
    Rejected(Reason),
    Stale,
}

#[derive(Debug)]
struct Model {
    max_concurrent: u64,
    max_queue: u64,
    enabled: bool,
    /// Whether the engine has a clock (static bulkheads have none: no `queue_wait_*`).
    clocked: bool,
    cap: u64,
    /// The ticket occupying each cell (a live waiter or an unconsumed result).
    cells: Vec<Option<u64>>,
    limit: u64,
    available: i64,
    closed: bool,
    /// Live waiters from the head.
    list: VecDeque<Entry>,
    /// Settled tickets whose owner has not consumed them (they keep their cell).
    settled: BTreeMap<u64, Settled>,
    /// The next ticket.
    tail: u64,
    /// Permits held by claimed grants.
    active: u64,
    unclaimed: u64,
    admitted: u64,
    /// Refused checked raw releases (`released_twice_total`).
    released_twice: u64,
    rejected: [u64; Reason::COUNT],
    wait_count: u64,
    wait_sum_ns: u64,
    wait_max_ns: u64,
    /// Waits per histogram bucket, placed by walking the bucket bounds.
    wait_buckets: [u64; hullguard_core::stats::WAIT_BUCKETS],
    now_ns: u64,
    /// Settlements not yet compared with the engine's wake-ups: `(ticket, outcome, by the
    /// dispatcher)`; an expiry is not the dispatcher's and is exempt from the FIFO check.
    events: Vec<(u64, Settled, bool)>,
}

impl Model {
    fn new(c: &Config, ring: Ring) -> Self {
        let cap = match ring {
            Ring::Runtime if c.max_queue == 0 => 0,
            Ring::Runtime => c.ring_capacity() as u64,
            Ring::Static(n) => n as u64,
        };
        Self {
            max_concurrent: c.max_concurrent,
            max_queue: c.max_queue,
            enabled: c.enabled,
            clocked: ring == Ring::Runtime,
            cap,
            cells: vec![None; cap as usize],
            limit: c.max_concurrent,
            available: c.max_concurrent as i64,
            closed: false,
            list: VecDeque::new(),
            settled: BTreeMap::new(),
            tail: 0,
            active: 0,
            unclaimed: 0,
            released_twice: 0,
            admitted: 0,
            rejected: [0; Reason::COUNT],
            wait_count: 0,
            wait_sum_ns: 0,
            wait_max_ns: 0,
            wait_buckets: [0; hullguard_core::stats::WAIT_BUCKETS],
            now_ns: 0,
            events: Vec::new(),
        }
    }

    fn live(&self) -> u64 {
        self.list.len() as u64
    }

    fn occupied(&self) -> u64 {
        self.cells.iter().filter(|c| c.is_some()).count() as u64
    }

    fn cell_of(&self, ticket: u64) -> usize {
        (ticket % self.cap) as usize
    }

    fn free_cell(&mut self, ticket: u64) {
        let i = self.cell_of(ticket);
        assert_eq!(
            self.cells[i],
            Some(ticket),
            "model: freeing another ticket's cell"
        );
        self.cells[i] = None;
    }

    fn reject(&mut self, reason: Reason) -> Acq {
        self.rejected[reason.index()] += 1;
        Acq::Rejected(reason)
    }

    /// `Ok` = admitted now; `Err(None)` = busy (not counted yet); `Err(Some(r))` = rejected.
    fn admit_now(&mut self, w: u64) -> Result<(), Option<Reason>> {
        if self.closed {
            return Err(Some(Reason::Shutdown));
        }
        // The list is empty or starts with a live waiter after every dispatch: no barging.
        if self.enabled && (!self.list.is_empty() || self.available < w as i64) {
            return Err(None);
        }
        self.available -= w as i64;
        self.active += w;
        self.admitted += 1;
        Ok(())
    }

    fn try_acquire(&mut self, w: u64) -> Acq {
        if w == 0 || w > self.max_concurrent {
            return Acq::Invalid;
        }
        match self.admit_now(w) {
            Ok(()) => Acq::Granted,
            Err(r) => self.reject(r.unwrap_or(Reason::ConcurrencyLimit)),
        }
    }

    fn enqueue(&mut self, w: u64) -> Acq {
        if w == 0 || w > self.max_concurrent {
            return Acq::Invalid;
        }
        match self.admit_now(w) {
            Ok(()) => return Acq::Granted,
            Err(Some(r)) => return self.reject(r),
            Err(None) => {}
        }
        if !self.enabled || self.max_queue == 0 || w > self.limit {
            return self.reject(Reason::ConcurrencyLimit);
        }
        if self.live() >= self.max_queue {
            return self.reject(Reason::QueueLimit);
        }
        // Refused only when every cell is taken; otherwise the tail skips occupied cells
        // (relabelling their occupants) up to a free one.
        if self.occupied() == self.cap {
            return self.reject(Reason::QueueLimit);
        }
        while self.cells[self.cell_of(self.tail)].is_some() {
            self.tail += 1;
        }
        let ticket = self.tail;
        self.tail += 1;
        let i = self.cell_of(ticket);
        self.cells[i] = Some(ticket);
        self.list.push_back(Entry {
            ticket,
            weight: w,
            enqueued_ns: self.now_ns,
        });
        self.dispatch();
        Acq::Queued(ticket)
    }

    /// Runs to quiescence from the head.
    fn dispatch(&mut self) {
        while let Some(e) = self.list.front().copied() {
            let outcome = if self.closed {
                Settled::Rejected(Reason::Shutdown)
            } else if e.weight > self.limit {
                Settled::Rejected(Reason::ConcurrencyLimit)
            } else if self.available >= e.weight as i64 {
                Settled::Granted(e.weight)
            } else {
                break;
            };
            self.list.pop_front();
            match outcome {
                Settled::Granted(w) => {
                    self.available -= w as i64;
                    self.unclaimed += w;
                    self.admitted += 1;
                    if self.clocked {
                        let waited = self.now_ns - e.enqueued_ns;
                        self.wait_count += 1;
                        self.wait_sum_ns += waited;
                        self.wait_max_ns = self.wait_max_ns.max(waited);
                        let i = (0..hullguard_core::stats::WAIT_BUCKETS)
                            .find(|&i| WaitHistogram::bound_ns(i).is_none_or(|b| waited < b))
                            .unwrap();
                        self.wait_buckets[i] += 1;
                    }
                }
                Settled::Rejected(r) => self.rejected[r.index()] += 1,
            }
            self.settled.insert(e.ticket, outcome);
            self.events.push((e.ticket, outcome, true));
        }
    }

    fn is_waiting(&self, t: u64) -> bool {
        self.list.iter().any(|e| e.ticket == t)
    }

    fn poll(&mut self, t: u64) -> PollR {
        if self.is_waiting(t) {
            return PollR::Pending;
        }
        match self.settled.remove(&t) {
            Some(Settled::Granted(w)) => {
                self.free_cell(t);
                self.unclaimed -= w;
                self.active += w;
                PollR::Granted(w)
            }
            Some(Settled::Rejected(r)) => {
                self.free_cell(t);
                PollR::Rejected(r)
            }
            None => PollR::Stale,
        }
    }

    /// What a cancel or expiry of a ticket that is not waiting answers.
    fn not_waiting(&self, t: u64) -> CancelR {
        match self.settled.get(&t) {
            Some(Settled::Granted(_)) => CancelR::Granted,
            Some(Settled::Rejected(r)) => CancelR::Rejected(*r),
            None => CancelR::Stale,
        }
    }

    /// The owner's cancel: the cell is free at once.
    fn cancel(&mut self, t: u64, reason: Reason) -> CancelR {
        let Some(i) = self.list.iter().position(|e| e.ticket == t) else {
            return self.not_waiting(t);
        };
        self.list.remove(i);
        self.free_cell(t);
        self.rejected[reason.index()] += 1;
        self.dispatch();
        CancelR::Ok
    }

    /// A host timer expires the ticket: it settles rejected (keeping its cell until the owner
    /// polls), the turn passes on, and the owner is woken.
    fn expire(&mut self, t: u64, reason: Reason) -> CancelR {
        let Some(i) = self.list.iter().position(|e| e.ticket == t) else {
            return self.not_waiting(t);
        };
        self.list.remove(i);
        self.rejected[reason.index()] += 1;
        self.settled.insert(t, Settled::Rejected(reason));
        self.dispatch();
        self.events.push((t, Settled::Rejected(reason), false));
        CancelR::Ok
    }

    fn abandon(&mut self, t: u64) {
        if let CancelR::Granted | CancelR::Rejected(_) = self.cancel(t, Reason::Aborted) {
            if let PollR::Granted(w) = self.poll(t) {
                self.release(w);
            }
        }
    }

    fn release(&mut self, w: u64) {
        self.available += w as i64;
        self.active -= w;
        self.dispatch();
    }

    /// The checked raw release of `w` permits while `loose` are out without a handle (the
    /// test's own handle-free holds): refused beyond them, and counted unless `w` is an
    /// argument error.
    fn release_checked(&mut self, w: u64, loose: u64) -> bool {
        if w == 0 || w > self.max_concurrent {
            return false;
        }
        if w > loose {
            self.released_twice += 1;
            return false;
        }
        self.release(w);
        true
    }

    fn set_limit(&mut self, n: u64) -> bool {
        if n == 0 || n > self.max_concurrent {
            return false;
        }
        self.available += n as i64 - self.limit as i64;
        self.limit = n;
        self.dispatch();
        true
    }

    fn close(&mut self) {
        self.closed = true;
        self.dispatch();
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            active: self.active,
            queued: self.live(),
            limit: self.limit,
            available: self.available,
            revision: 0,
            max_queue: self.max_queue,
            queued_cost: 0,
            budget: None,
        }
    }

    /// The model's stats. Fields the model does not know (added to the schema later) are
    /// copied from `real`, so they are not compared.
    fn stats(&self, real: &Stats) -> Stats {
        let occupied = self.occupied();
        let mut s = *real;
        s.active = self.active;
        s.queued = self.live();
        s.granted_unclaimed = self.unclaimed;
        s.limit = self.limit;
        s.max_concurrent = self.max_concurrent;
        s.available = self.available;
        s.admitted_total = self.admitted;
        s.rejected_by_reason = RejectedByReason(self.rejected);
        s.released_twice_total = self.released_twice;
        s.leaked_total = 0;
        s.ring_free = self.cap - occupied;
        s.queue_wait_count = self.wait_count;
        s.queue_wait_sum_ns = self.wait_sum_ns;
        s.queue_wait_max_ns = self.wait_max_ns;
        s.queue_wait_histogram = WaitHistogram(self.wait_buckets);
        s
    }
}

// ----- operations ----------------------------------------------------------------------------

/// One step. Indices pick among what the test currently owns (modulo its length; a step with
/// nothing to pick is a no-op), so shrinking keeps sequences meaningful.
#[derive(Debug, Clone)]
pub enum Op {
    /// `try_acquire_units(w)`; the test holds the units.
    TryAcquire(u64),
    /// `try_acquire(w)`: an RAII permit.
    TryAcquirePermit(u64),
    /// `enqueue(w)` with a per-ticket deadline on the virtual clock (`None`: no deadline),
    /// enforced by the owner itself (`cancel(timeout)`, as a Rust `acquire_timeout` does) or by
    /// a host timer (`expire(timeout)`, as the bindings' timers do).
    Enqueue {
        w: u64,
        timeout_ms: Option<u64>,
        host_timer: bool,
    },
    Poll(usize),
    Cancel(usize, Reason),
    /// `expire(reason)` by a third party; the owner polls the rejection later.
    Expire(usize, Reason),
    Abandon(usize),
    /// `release_units` of a handle-free hold.
    Release(usize),
    /// `release_units_checked` of a handle-free hold (accepted).
    ReleaseChecked(usize),
    /// `release_units_checked` of `limit − available + 1 + extra` permits: always refused (I9).
    OverRelease(u64),
    /// `release_partial(n)` on a permit; refused when `n == 0 || n > held` (I9).
    ReleasePartial(usize, u64),
    DropPermit(usize),
    SetLimit(u64),
    Close,
    /// Advances the virtual clock; due deadlines cancel their tickets as `timeout`.
    AdvanceClock(u64),
    /// Polls (or cancels) a consumed or cancelled ticket: `StaleTicket` (I3).
    Stale {
        idx: usize,
        cancel: bool,
    },
    /// Polls (or cancels) a ticket that was never issued.
    Forged {
        ahead: u64,
        cancel: bool,
    },
    /// `drain_blocking(0)`: reports at once whether the bulkhead is idle, and its counts. With
    /// `wait`, a `drain` future kept across the steps that follow instead: pending while
    /// anything is held, queued or granted unclaimed; woken and ready on the step that makes
    /// the bulkhead idle.
    Drain {
        wait: bool,
    },
}

/// Where the engine's ring lives: runtime-sized (`Bulkhead::with_clock`), or a small static
/// ring of `N` cells (`Bulkhead::<N>::try_new_static`, no clock) that a case laps many times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    Runtime,
    Static(usize),
}

// ----- the harness ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct VClock(AtomicU64);

impl Clock for VClock {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

/// Logs its slot (one per `enqueue` call) when woken: the dispatcher's settlement order.
struct SlotWaker {
    slot: usize,
    log: Arc<Mutex<Vec<usize>>>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.log.lock().unwrap().push(self.slot);
    }
}

/// A ticket the test owns (queued, or settled and not yet consumed).
#[derive(Debug, Clone, Copy)]
struct Owned {
    ticket: u64,
    weight: u64,
    deadline_ns: Option<u64>,
    /// The deadline is a host timer's (`expire`), not the owner's own (`cancel`).
    host_timer: bool,
}

/// What a case reached (for `generator_reaches_every_path` in `tests/tests/model.rs`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Coverage {
    pub queue_limit_live: bool,
    pub queue_limit_ring_full: bool,
    pub skipped_live_cell: bool,
    pub skipped_settled_cell: bool,
    pub expire_won: bool,
    pub dispatcher_grant: bool,
    pub dispatcher_shutdown: bool,
    pub dispatcher_limit: bool,
    pub timeout_won: bool,
    pub timeout_lost: bool,
    pub cancel_lost_to_grant: bool,
    pub invalid_weight: bool,
    pub negative_available: bool,
    pub partial_refused: bool,
    pub over_release_refused: bool,
    pub disabled_over_limit: bool,
    /// A drain reported the bulkhead idle at once, and a kept one was woken by the step that
    /// made it idle.
    pub drain_idle: bool,
    pub drain_woken: bool,
}

impl Coverage {
    pub fn merge(&mut self, o: Coverage) {
        macro_rules! or {
            ($($f:ident),*) => { $(self.$f |= o.$f;)* };
        }
        or!(
            queue_limit_live,
            queue_limit_ring_full,
            skipped_live_cell,
            skipped_settled_cell,
            expire_won,
            dispatcher_grant,
            dispatcher_shutdown,
            dispatcher_limit,
            timeout_won,
            timeout_lost,
            cancel_lost_to_grant,
            invalid_weight,
            negative_available,
            partial_refused,
            over_release_refused,
            disabled_over_limit,
            drain_idle,
            drain_woken
        );
    }
}

struct Harness<'a, const N: usize> {
    bh: &'a Bulkhead<N>,
    clock: &'a VClock,
    m: Model,
    /// Handle-free holds (weights).
    holds: Vec<u64>,
    permits: Vec<Permit<'a, N>>,
    /// Owned tickets in ticket order.
    owned: Vec<Owned>,
    /// Consumed or cancelled tickets.
    dead: Vec<u64>,
    /// Tickets cancelled successfully (any reason): never granted later (I7).
    cancelled: HashSet<u64>,
    log: Arc<Mutex<Vec<usize>>>,
    /// Slot → ticket (`u64::MAX` when that enqueue did not queue).
    slots: Vec<u64>,
    /// Every ticket the dispatcher settled so far (each at most once, I3).
    settled_once: HashSet<u64>,
    last_settled: Option<u64>,
    admitted_at_close: Option<u64>,
    /// A kept `drain` future, its waker's flag, and whether it was polled pending before.
    drain: Option<KeptDrain<'a>>,
    cov: Coverage,
}

/// A `drain` future the harness keeps across steps ([`Op::Drain`] with `wait`).
struct KeptDrain<'a> {
    fut: Pin<Box<dyn Future<Output = DrainResult> + 'a>>,
    woken: Arc<Flag>,
    pending: bool,
}

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

fn acq_of_err(e: AcquireError) -> (Acq, Option<Snapshot>) {
    match e {
        AcquireError::Rejected(Rejection {
            reason, snapshot, ..
        }) => (Acq::Rejected(reason), Some(snapshot)),
        AcquireError::InvalidWeight { .. } => (Acq::Invalid, None),
        other => panic!("unexpected acquire error {other:?}"),
    }
}

fn cancel_of(r: Result<(), CancelError>) -> CancelR {
    match r {
        Ok(()) => CancelR::Ok,
        Err(CancelError::Granted) => CancelR::Granted,
        Err(CancelError::Rejected(reason)) => CancelR::Rejected(reason),
        Err(CancelError::Stale) => CancelR::Stale,
        Err(other) => panic!("unexpected cancel error {other:?}"),
    }
}

impl<'a, const N: usize> Harness<'a, N> {
    fn new(bh: &'a Bulkhead<N>, clock: &'a VClock, cfg: &Config, ring: Ring) -> Self {
        Self {
            bh,
            clock,
            m: Model::new(cfg, ring),
            holds: Vec::new(),
            permits: Vec::new(),
            owned: Vec::new(),
            dead: Vec::new(),
            cancelled: HashSet::new(),
            log: Arc::new(Mutex::new(Vec::new())),
            slots: Vec::new(),
            settled_once: HashSet::new(),
            last_settled: None,
            admitted_at_close: None,
            drain: None,
            cov: Coverage::default(),
        }
    }

    /// Whether the model is idle: nothing held, queued or granted unclaimed.
    fn idle(&self) -> bool {
        self.m.active == 0 && self.m.live() == 0 && self.m.unclaimed == 0
    }

    /// Polls the kept drain, if any: ready exactly when the model is idle, and — once it was
    /// pending — only after the step that made it idle woke it.
    fn poll_drain(&mut self) -> Result<(), Mismatch> {
        let idle = self.idle();
        let Some(d) = self.drain.as_mut() else {
            return Ok(());
        };
        let woken = d.woken.0.swap(false, SeqCst);
        let waker = Waker::from(d.woken.clone());
        match d.fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(r) => {
                ensure!(
                    idle,
                    "a drain was ready while the model is not idle: {:?}",
                    r
                );
                ensure!(
                    r.drained && r.active == 0 && r.queued == 0,
                    "drain result {:?}",
                    r
                );
                ensure!(
                    woken || !d.pending,
                    "a pending drain became ready without being woken (a lost wake-up)"
                );
                if d.pending {
                    self.cov.drain_woken = true;
                }
                self.drain = None;
            }
            Poll::Pending => {
                ensure!(!idle, "the model is idle but the drain is pending");
                d.pending = true;
            }
        }
        Ok(())
    }

    /// Compares an acquire's answer (and its rejection snapshot) with the model's.
    fn check_acq(&mut self, real: (Acq, Option<Snapshot>), model: Acq) -> Result<(), Mismatch> {
        ensure_eq!(real.0, model, "acquire answer");
        if let Some(snap) = real.1 {
            ensure_eq!(snap, self.m.snapshot(), "rejection snapshot");
        }
        match model {
            Acq::Invalid => self.cov.invalid_weight = true,
            Acq::Rejected(Reason::QueueLimit) => {
                // Issue 12: never `queue_limit` while fewer than `max_queue` are live, unless
                // every cell is taken (by results the test has not polled yet).
                if self.m.live() < self.m.max_queue {
                    ensure_eq!(
                        self.m.occupied(),
                        self.m.cap,
                        "queue_limit with {} live of {} and a free cell",
                        self.m.live(),
                        self.m.max_queue
                    );
                    ensure!(
                        !self.m.clocked,
                        "a runtime-sized ring refused queue_limit below max_queue"
                    );
                    self.cov.queue_limit_ring_full = true;
                } else {
                    self.cov.queue_limit_live = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn poll(&mut self, i: usize) -> Result<(), Mismatch> {
        let o = self.owned[i];
        let real = match self.bh.poll_ticket(Ticket::from_raw(o.ticket), None) {
            Ok(TicketPoll::Pending) => (PollR::Pending, None),
            Ok(TicketPoll::Granted(w)) => (PollR::Granted(w), None),
            Ok(TicketPoll::Rejected(r)) => (PollR::Rejected(r.reason), Some(r.snapshot)),
            Err(_) => (PollR::Stale, None),
        };
        let model = self.m.poll(o.ticket);
        ensure_eq!(real.0, model, "poll of ticket {}", o.ticket);
        if let Some(snap) = real.1 {
            ensure_eq!(snap, self.m.snapshot(), "rejection snapshot");
        }
        match model {
            PollR::Pending => {}
            PollR::Granted(w) => {
                ensure_eq!(w, o.weight, "granted weight");
                self.holds.push(w);
                self.retire(i);
            }
            PollR::Rejected(_) => self.retire(i),
            PollR::Stale => ensure!(false, "an owned ticket is stale"),
        }
        Ok(())
    }

    fn retire(&mut self, i: usize) {
        let o = self.owned.remove(i);
        self.dead.push(o.ticket);
    }

    /// Cancels owned ticket `i`; returns the model's answer.
    fn cancel(&mut self, i: usize, reason: Reason) -> Result<CancelR, Mismatch> {
        let t = self.owned[i].ticket;
        let real = cancel_of(self.bh.cancel(Ticket::from_raw(t), reason));
        let model = self.m.cancel(t, reason);
        ensure_eq!(real, model, "cancel of ticket {} ({:?})", t, reason);
        match model {
            CancelR::Ok => {
                self.cancelled.insert(t);
                self.retire(i);
            }
            CancelR::Granted => self.cov.cancel_lost_to_grant = true,
            CancelR::Rejected(_) => {}
            CancelR::Stale => ensure!(false, "an owned ticket is stale"),
        }
        Ok(model)
    }

    /// Expires owned ticket `i` on behalf of its owner (a host timer); the owner keeps it
    /// and polls the rejection later.
    fn expire(&mut self, i: usize, reason: Reason) -> Result<CancelR, Mismatch> {
        let t = self.owned[i].ticket;
        let real = cancel_of(self.bh.expire(Ticket::from_raw(t), reason));
        let model = self.m.expire(t, reason);
        ensure_eq!(real, model, "expire of ticket {} ({:?})", t, reason);
        match model {
            CancelR::Ok => self.cov.expire_won = true,
            CancelR::Granted => self.cov.cancel_lost_to_grant = true,
            CancelR::Rejected(_) => {}
            CancelR::Stale => ensure!(false, "an owned ticket is stale"),
        }
        Ok(model)
    }

    /// The dry run of an admission of `w` (queueing or not), taken before the real one: it
    /// must not move the stats, and it must predict the real decision (docs/design.md §5.6).
    fn dry(&self, w: u64, queue: bool) -> Result<Acq, Mismatch> {
        let req = Request::new(w);
        let req = if queue {
            req.queue_timeout(Duration::MAX)
        } else {
            req.no_wait()
        };
        let before = self.bh.stats();
        let dry = self.bh.would_admit(&req);
        ensure_eq!(self.bh.stats(), before, "the dry run changed the stats");
        Ok(match dry {
            WouldAdmit::AdmitNow => Acq::Granted,
            WouldAdmit::WouldQueue { ahead, .. } => {
                ensure_eq!(ahead, before.queued, "waiters ahead");
                Acq::Queued(0)
            }
            WouldAdmit::Reject(e) => acq_of_err(e).0,
        })
    }

    fn step(&mut self, op: &Op) -> Result<(), Mismatch> {
        let dry = match *op {
            Op::TryAcquire(w) | Op::TryAcquirePermit(w) => Some(self.dry(w, false)?),
            Op::Enqueue { w, .. } => Some(self.dry(w, true)?),
            _ => None,
        };
        let predicted = |real: Acq| -> Result<(), Mismatch> {
            let real = match real {
                Acq::Queued(_) => Acq::Queued(0),
                r => r,
            };
            ensure_eq!(dry, Some(real), "dry run vs admission");
            Ok(())
        };
        match *op {
            Op::TryAcquire(w) => {
                let real = match self.bh.try_acquire_units(w) {
                    Ok(()) => (Acq::Granted, None),
                    Err(e) => acq_of_err(e),
                };
                let model = self.m.try_acquire(w);
                self.check_acq(real, model)?;
                predicted(model)?;
                if model == Acq::Granted {
                    self.holds.push(w);
                }
            }
            Op::TryAcquirePermit(w) => {
                let (real, permit) = match self.bh.try_acquire(w) {
                    Ok(p) => ((Acq::Granted, None), Some(p)),
                    Err(e) => (acq_of_err(e), None),
                };
                let model = self.m.try_acquire(w);
                self.check_acq(real, model)?;
                predicted(model)?;
                if let Some(p) = permit {
                    ensure_eq!(p.weight(), w);
                    self.permits.push(p);
                }
            }
            Op::Enqueue {
                w,
                timeout_ms,
                host_timer,
            } => {
                if self.m.cap > 0 {
                    match self.m.cells[self.m.cell_of(self.m.tail)] {
                        Some(t) if self.m.is_waiting(t) => self.cov.skipped_live_cell = true,
                        Some(_) => self.cov.skipped_settled_cell = true,
                        None => {}
                    }
                }
                let slot = self.slots.len();
                self.slots.push(u64::MAX);
                let waker = Waker::from(Arc::new(SlotWaker {
                    slot,
                    log: self.log.clone(),
                }));
                let real = match self.bh.enqueue(w, Some(&waker)) {
                    Ok(Admission::Granted) => (Acq::Granted, None),
                    Ok(Admission::Queued(t)) => (Acq::Queued(t.to_raw()), None),
                    Err(e) => acq_of_err(e),
                };
                let model = self.m.enqueue(w);
                self.check_acq(real, model)?;
                predicted(model)?;
                match model {
                    Acq::Granted => self.holds.push(w),
                    Acq::Queued(t) => {
                        self.slots[slot] = t;
                        self.owned.push(Owned {
                            ticket: t,
                            weight: w,
                            deadline_ns: timeout_ms.map(|ms| self.m.now_ns + ms * MS),
                            host_timer,
                        });
                    }
                    Acq::Invalid | Acq::Rejected(_) => {}
                }
            }
            Op::Poll(i) => {
                if !self.owned.is_empty() {
                    self.poll(i % self.owned.len())?;
                }
            }
            Op::Cancel(i, reason) => {
                if !self.owned.is_empty() {
                    self.cancel(i % self.owned.len(), reason)?;
                }
            }
            Op::Expire(i, reason) => {
                if !self.owned.is_empty() {
                    self.expire(i % self.owned.len(), reason)?;
                }
            }
            Op::Abandon(i) => {
                if !self.owned.is_empty() {
                    let o = self.owned[i % self.owned.len()];
                    self.bh.abandon(Ticket::from_raw(o.ticket));
                    if self.m.list.iter().any(|e| e.ticket == o.ticket) {
                        self.cancelled.insert(o.ticket);
                    }
                    self.m.abandon(o.ticket);
                    self.retire(i % self.owned.len());
                }
            }
            Op::Release(i) => {
                if !self.holds.is_empty() {
                    let w = self.holds.swap_remove(i % self.holds.len());
                    self.bh.release_units(w);
                    self.m.release(w);
                }
            }
            Op::ReleaseChecked(i) => {
                if !self.holds.is_empty() {
                    let loose = self.holds.iter().sum();
                    let w = self.holds.swap_remove(i % self.holds.len());
                    let real = self.bh.release_units_checked(w);
                    let model = self.m.release_checked(w, loose);
                    ensure!(model, "the model refused a held release");
                    ensure_eq!(real, Ok(()), "checked release of {} held permits", w);
                }
            }
            Op::OverRelease(extra) => {
                // One more than the test's handle-free holds (its permits' units and unclaimed
                // grants are not the raw pair's to return) is refused and counted.
                let loose: u64 = self.holds.iter().sum();
                let n = loose + 1 + extra;
                let before = self.bh.stats();
                let real = self.bh.release_units_checked(n);
                let model = self.m.release_checked(n, loose);
                ensure!(!model);
                ensure_eq!(real, Err(OverRelease), "over-release of {} refused (I9)", n);
                let mut after = self.bh.stats();
                let counted = u64::from(n <= self.m.max_concurrent);
                ensure_eq!(
                    after.released_twice_total,
                    before.released_twice_total + counted
                );
                after.released_twice_total = before.released_twice_total;
                ensure_eq!(after, before, "a refused release changed nothing else");
                self.cov.over_release_refused = true;
            }
            Op::ReleasePartial(i, n) => {
                if !self.permits.is_empty() {
                    let k = i % self.permits.len();
                    let held = self.permits[k].weight();
                    let before = self.bh.stats();
                    let real = self.permits[k].release_partial(n);
                    if n == 0 || n > held {
                        ensure_eq!(
                            real,
                            Err(InvalidRelease { requested: n, held }),
                            "release_partial refused (I9)"
                        );
                        ensure_eq!(self.permits[k].weight(), held);
                        ensure_eq!(self.bh.stats(), before, "a refused release changed nothing");
                        self.cov.partial_refused = true;
                    } else {
                        ensure_eq!(real, Ok(()));
                        ensure_eq!(self.permits[k].weight(), held - n);
                        self.m.release(n);
                    }
                }
            }
            Op::DropPermit(i) => {
                if !self.permits.is_empty() {
                    let p = self.permits.swap_remove(i % self.permits.len());
                    let w = p.weight();
                    drop(p);
                    if w > 0 {
                        self.m.release(w);
                    }
                }
            }
            Op::SetLimit(n) => {
                let real = self.bh.set_limit(n);
                let model = self.m.set_limit(n);
                ensure_eq!(real.is_ok(), model, "set_limit({})", n);
                if let Err(e) = real {
                    ensure_eq!(e, ConfigError::Limit);
                }
            }
            Op::Close => {
                self.bh.close();
                self.m.close();
            }
            Op::AdvanceClock(ms) => {
                self.clock.0.fetch_add(ms * MS, SeqCst);
                self.m.now_ns += ms * MS;
                let now = self.m.now_ns;
                // Due deadlines, in ticket order; a ticket that settled first keeps its
                // outcome for a later poll and loses its deadline.
                let mut i = 0;
                while i < self.owned.len() {
                    match self.owned[i].deadline_ns {
                        Some(d) if d <= now && self.owned[i].host_timer => {
                            // The host timer settles it; the owner polls the rejection later.
                            match self.expire(i, Reason::Timeout)? {
                                CancelR::Ok => self.cov.timeout_won = true,
                                _ => self.cov.timeout_lost = true,
                            }
                            self.owned[i].deadline_ns = None;
                            i += 1;
                        }
                        Some(d) if d <= now => match self.cancel(i, Reason::Timeout)? {
                            CancelR::Ok => self.cov.timeout_won = true,
                            _ => {
                                self.cov.timeout_lost = true;
                                self.owned[i].deadline_ns = None;
                                i += 1;
                            }
                        },
                        _ => i += 1,
                    }
                }
            }
            Op::Stale { idx, cancel } => {
                if !self.dead.is_empty() {
                    let t = self.dead[idx % self.dead.len()];
                    self.check_stale(t, cancel)?;
                }
            }
            Op::Forged { ahead, cancel } => {
                let t = self.m.tail + ahead;
                self.check_stale(t, cancel)?;
            }
            Op::Drain { wait: true } => {
                if self.drain.is_none() {
                    self.drain = Some(KeptDrain {
                        fut: Box::pin(self.bh.drain(None::<core::future::Pending<()>>)),
                        woken: Arc::new(Flag::default()),
                        pending: false,
                    });
                }
            }
            Op::Drain { wait: false } => {
                let before = self.bh.stats();
                let r = self.bh.drain_blocking(Some(Duration::ZERO));
                ensure_eq!(r.drained, self.idle(), "drain(0) of {}", before);
                ensure_eq!(
                    (r.active, r.queued),
                    (self.m.active, self.m.live()),
                    "drain(0)"
                );
                ensure_eq!(self.bh.stats(), before, "a drain changed the stats");
                if r.drained {
                    self.cov.drain_idle = true;
                }
            }
        }
        Ok(())
    }

    /// A ticket that is not live: `StaleTicket` / `CancelError::Stale`, and nothing changes.
    fn check_stale(&mut self, t: u64, cancel: bool) -> Result<(), Mismatch> {
        let before = self.bh.stats();
        if cancel {
            let real = cancel_of(self.bh.cancel(Ticket::from_raw(t), Reason::Aborted));
            ensure_eq!(real, CancelR::Stale, "cancel of dead ticket {}", t);
            ensure_eq!(self.m.cancel(t, Reason::Aborted), CancelR::Stale);
        } else {
            let real = self.bh.poll_ticket(Ticket::from_raw(t), None);
            ensure!(real.is_err(), "poll of dead ticket {}: {:?}", t, real);
            ensure_eq!(self.m.poll(t), PollR::Stale);
        }
        ensure_eq!(self.bh.stats(), before, "a stale ticket changed the stats");
        Ok(())
    }

    /// Everything that must hold after every step.
    fn check(&mut self, admitted_before: u64) -> Result<(), Mismatch> {
        // The dispatcher's settlements, in order, exactly as the model made them (I3, I6, I7).
        let woken: Vec<u64> = self
            .log
            .lock()
            .unwrap()
            .drain(..)
            .map(|slot| self.slots[slot])
            .collect();
        let events = std::mem::take(&mut self.m.events);
        let expected: Vec<u64> = events.iter().map(|e| e.0).collect();
        ensure_eq!(&woken, &expected, "settlement order (wake-ups) vs model");
        for (t, outcome, by_dispatcher) in events {
            ensure!(
                self.settled_once.insert(t),
                "I3: ticket {} settled twice",
                t
            );
            ensure!(
                !self.cancelled.contains(&t),
                "I7: cancelled ticket {} settled",
                t
            );
            if !by_dispatcher {
                continue;
            }
            // I6: the dispatcher settles in ticket order.
            ensure!(
                self.last_settled.is_none_or(|l| t > l),
                "I6: ticket {} settled after {:?}",
                t,
                self.last_settled
            );
            self.last_settled = Some(t);
            match outcome {
                Settled::Granted(_) => self.cov.dispatcher_grant = true,
                Settled::Rejected(Reason::Shutdown) => self.cov.dispatcher_shutdown = true,
                Settled::Rejected(_) => self.cov.dispatcher_limit = true,
            }
        }

        // The whole stats object.
        let s = self.bh.stats();
        ensure_eq!(s, self.m.stats(&s), "stats vs model");
        ensure_eq!(s.active, self.held(), "active vs permits the test holds");

        // I2 conservation.
        ensure_eq!(
            s.available + s.active as i64 + s.granted_unclaimed as i64,
            s.limit as i64,
            "I2: {}",
            s
        );
        // I1 bounded (enabled only): an admission never leaves the word overdrawn, and with
        // no shrink overhang everything out fits in the limit.
        if self.m.enabled {
            if s.admitted_total > admitted_before {
                ensure!(s.available >= 0, "I1: admitted while over the limit: {}", s);
            }
            if s.available >= 0 {
                ensure!(s.active + s.granted_unclaimed <= s.limit, "I1: {}", s);
            }
        } else if s.available < 0 {
            self.cov.disabled_over_limit = true;
        }
        if self.m.enabled && s.available < 0 {
            self.cov.negative_available = true;
        }
        // I4: the head waiter does not fit (after dispatch it is never a tombstone).
        if let Some(head) = self.m.list.front() {
            ensure!(
                !self.m.closed && head.weight <= self.m.limit,
                "a waiter survived close or a shrink"
            );
            ensure!(
                head.weight as i64 > s.available,
                "I4: head ticket {} (weight {}) fits in available {}",
                head.ticket,
                head.weight,
                s.available
            );
        }
        // Every ticket the model holds as queued is pending in the engine too.
        for o in &self.owned {
            if self.m.is_waiting(o.ticket) {
                let real = self.bh.poll_ticket(Ticket::from_raw(o.ticket), None);
                ensure_eq!(real, Ok(TicketPoll::Pending), "ticket {} pending", o.ticket);
            }
        }
        // I8: no admission after close.
        if self.m.closed {
            let at = *self.admitted_at_close.get_or_insert(admitted_before);
            ensure_eq!(s.admitted_total, at, "I8: admission after close");
        }
        ensure_eq!(self.bh.is_closed(), self.m.closed);
        ensure_eq!(self.bh.limit(), self.m.limit);
        ensure_eq!(
            self.bh.is_idle(),
            s.active == 0 && s.queued == 0 && s.granted_unclaimed == 0
        );
        self.poll_drain()
    }

    fn held(&self) -> u64 {
        self.holds.iter().sum::<u64>() + self.permits.iter().map(|p| p.weight()).sum::<u64>()
    }

    /// Cancels or abandons every owned ticket, consumes what settled, releases everything,
    /// then checks I5 and that every dead ticket stays dead (I3).
    fn finish(&mut self) -> Result<(), Mismatch> {
        let mut k = 0u64;
        while !self.owned.is_empty() {
            let admitted = self.bh.stats().admitted_total;
            k += 1;
            if k % 3 == 0 {
                let o = self.owned[0];
                self.bh.abandon(Ticket::from_raw(o.ticket));
                if self.m.list.iter().any(|e| e.ticket == o.ticket) {
                    self.cancelled.insert(o.ticket);
                }
                self.m.abandon(o.ticket);
                self.retire(0);
            } else if let CancelR::Granted | CancelR::Rejected(_) =
                self.cancel(0, Reason::Aborted)?
            {
                self.poll(0)?;
            }
            self.check(admitted)?;
        }
        while let Some(w) = self.holds.pop() {
            let admitted = self.bh.stats().admitted_total;
            self.bh.release_units(w);
            self.m.release(w);
            self.check(admitted)?;
        }
        while let Some(p) = self.permits.pop() {
            let admitted = self.bh.stats().admitted_total;
            let w = p.weight();
            drop(p);
            if w > 0 {
                self.m.release(w);
            }
            self.check(admitted)?;
        }
        // A kept drain ended with the last release (`check` polled it then).
        ensure!(
            self.drain.is_none(),
            "a drain is still pending on an idle bulkhead"
        );
        // I5 quiescence.
        let s = self.bh.stats();
        ensure_eq!(s.available, s.limit as i64, "I5: {}", s);
        ensure_eq!(s.queued, 0, "I5: {}", s);
        ensure_eq!(s.granted_unclaimed, 0, "I5: {}", s);
        ensure_eq!(s.active, 0, "I5: {}", s);
        ensure_eq!(
            s.ring_free,
            self.m.cap,
            "every ring cell is free again: {}",
            s
        );
        ensure!(self.bh.is_idle());
        for t in self.dead.clone() {
            self.check_stale(t, false)?;
            self.check_stale(t, true)?;
        }
        // The fast path works again (no stuck WAITERS flag), or says shutdown.
        let w = s.limit;
        match self.bh.try_acquire(w) {
            Ok(p) => {
                ensure!(!self.m.closed, "admitted after close");
                drop(p);
            }
            Err(e) => {
                ensure!(
                    self.m.closed,
                    "quiescent bulkhead refused its limit: {:?}",
                    e
                );
                ensure_eq!(e.reason(), Some(Reason::Shutdown));
            }
        }
        Ok(())
    }
}

/// Runs one case. Returns what it reached.
pub fn run(cfg: Config, ring: Ring, ops: &[Op]) -> Result<Coverage, Mismatch> {
    let clock = Arc::new(VClock::default());
    match ring {
        Ring::Runtime => {
            let bh = Bulkhead::with_clock(cfg, ClockSource::Shared(clock.clone())).unwrap();
            run_on(&bh, &clock, cfg, ring, ops)
        }
        Ring::Static(2) => run_on(
            &Bulkhead::<2>::try_new_static(cfg).unwrap(),
            &clock,
            cfg,
            ring,
            ops,
        ),
        Ring::Static(4) => run_on(
            &Bulkhead::<4>::try_new_static(cfg).unwrap(),
            &clock,
            cfg,
            ring,
            ops,
        ),
        Ring::Static(8) => run_on(
            &Bulkhead::<8>::try_new_static(cfg).unwrap(),
            &clock,
            cfg,
            ring,
            ops,
        ),
        Ring::Static(n) => panic!("no static ring of {n} cells in this test"),
    }
}

fn run_on<const N: usize>(
    bh: &Bulkhead<N>,
    clock: &VClock,
    cfg: Config,
    ring: Ring,
    ops: &[Op],
) -> Result<Coverage, Mismatch> {
    let mut h = Harness::new(bh, clock, &cfg, ring);
    h.check(0)?;
    for (i, op) in ops.iter().enumerate() {
        let admitted = bh.stats().admitted_total;
        h.step(op)
            .and_then(|()| h.check(admitted))
            .map_err(|e| Mismatch(format!("step {i} {op:?}: {e}")))?;
    }
    h.finish().map_err(|e| Mismatch(format!("finish: {e}")))?;
    Ok(h.cov)
}
