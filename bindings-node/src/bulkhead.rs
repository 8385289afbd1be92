//! `NativeBulkhead`: the addon's view of one core bulkhead. Numbers in, small integer codes
//! out; the JS facade (`index.js`) turns them into promises, permits and errors. Every
//! admission decision is the core's.

use std::{
    cell::RefCell,
    collections::HashMap,
    sync::{Arc, Weak},
    time::Duration,
};

use hullguard_core::{
    AcquireError, Admission, Bulkhead as CoreBulkhead, CallStart, CancelError, Config, Outcome,
    Reason, Ticket, TicketPoll,
};
use napi::{Error, Result, Status};
use napi_derive::napi;

use crate::{
    clock::{self, VirtualClock},
    resilience::{self, NativeResilience},
    settled,
    stats::{JsSnapshot, JsStats},
};

/// `enqueue` / `pollTicket` code: granted at once.
pub const GRANTED: f64 = -1.0;
/// Code: the ticket is not live (already consumed or cancelled).
pub const STALE: f64 = -2.0;
/// `enqueue` code: granted at once, and breaker state changes wait to be taken (the facade
/// then delivers them; a plain `GRANTED` needs no further native call).
pub const GRANTED_EVENTS: f64 = -3.0;
/// Code base of a rejection: `-(REJECTED_BASE + hg_reason)`.
pub const REJECTED_BASE: f64 = 10.0;

pub(crate) fn rejected(reason: Reason) -> f64 {
    -(REJECTED_BASE + reason.index() as f64)
}

/// `GRANTED`, or `GRANTED_EVENTS` when `call`'s breaker check left state changes to take (only
/// a tracked call can: a plain bulkhead's grant reads no queue).
fn granted(call: &CallStart) -> f64 {
    if call.is_tracked() && resilience::pending() != 0 {
        GRANTED_EVENTS
    } else {
        GRANTED
    }
}

/// A `tryTake` code: 0, or `1 + hg_reason` of the rejection.
fn take_code(r: std::result::Result<(), AcquireError>) -> u32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.reason().map_or(u32::MAX, |r| 1 + r.index() as u32),
    }
}

fn reason_from(code: u32) -> Result<Reason> {
    Reason::ALL
        .get(code as usize)
        .copied()
        .ok_or_else(|| Error::new(Status::InvalidArg, format!("unknown reason {code}")))
}

/// Builds a core config from numbers the facade already validated (checked again here).
pub(crate) fn config(
    max_concurrent: f64,
    max_queue: f64,
    queue_timeout_ms: f64,
    enabled: bool,
    resilience: Option<&NativeResilience>,
) -> Result<Config> {
    let max_concurrent = max_concurrent as u64;
    let c = Config {
        max_concurrent,
        max_queue: max_queue as u64,
        // NaN / negative were rejected by the facade; anything too large for a Duration is
        // "no deadline".
        queue_timeout: resilience::duration_ms(queue_timeout_ms),
        enabled,
        resilience: resilience::resilience(resilience, max_concurrent)?,
    };
    c.validate().map_err(resilience::config_error)?;
    Ok(c)
}

/// One core bulkhead (a handle: a registry's entry stays alive while a handle does, until
/// `dispose()`).
///
/// Guarded calls (DESIGN §4): on a bulkhead with policies every admission begins a call
/// (`begin_call`, the breaker's check) and keeps its `CallStart` here under the facade's call
/// id until the call ends: at release with the caller's outcome, `ignored` when admission is
/// refused, the waiter is cancelled or the permit is reclaimed after GC, `failure` when the
/// facade's call timer fires. An id is ended at most once (it is removed when it ends).
#[napi]
pub struct NativeBulkhead {
    bh: Option<Arc<CoreBulkhead>>,
    /// Still reaches the bulkhead after `dispose()` (to count a double release), without
    /// keeping it alive.
    weak: Weak<CoreBulkhead>,
    /// The calls in flight through this handle (only with policies).
    calls: RefCell<HashMap<u32, CallStart>>,
}

impl NativeBulkhead {
    pub(crate) fn from_arc(bh: Arc<CoreBulkhead>) -> Self {
        Self {
            weak: Arc::downgrade(&bh),
            bh: Some(bh),
            calls: RefCell::new(HashMap::new()),
        }
    }

    fn bh(&self) -> Result<&Arc<CoreBulkhead>> {
        self.bh
            .as_ref()
            .ok_or_else(|| Error::new(Status::GenericFailure, "bulkhead handle disposed"))
    }

    /// After admission of call `id`: keeps a tracked call until it ends when `admitted` (granted
    /// or queued), else ends it `ignored` (step 2 of a guarded call).
    fn admitted(&self, bh: &CoreBulkhead, id: u32, call: CallStart, admitted: bool) {
        if !call.is_tracked() {
            return;
        }
        if admitted {
            self.calls.borrow_mut().insert(id, call);
        } else {
            bh.end_call(call, Outcome::Ignored);
        }
    }

    /// Ends call `id` with `outcome` if it is still in flight.
    fn end(&self, bh: &CoreBulkhead, id: u32, outcome: Outcome) {
        if !bh.has_policies() {
            return;
        }
        let call = self.calls.borrow_mut().remove(&id);
        if let Some(call) = call {
            bh.end_call(call, outcome);
        }
    }
}

#[napi]
impl NativeBulkhead {
    #[napi(constructor)]
    pub fn new(
        max_concurrent: f64,
        max_queue: f64,
        queue_timeout_ms: f64,
        enabled: bool,
        resilience: Option<NativeResilience>,
        emitter: Option<u32>,
        clock: Option<&VirtualClock>,
    ) -> Result<Self> {
        let c = config(
            max_concurrent,
            max_queue,
            queue_timeout_ms,
            enabled,
            resilience.as_ref(),
        )?;
        let bh = CoreBulkhead::with_observer(
            c,
            clock::source(clock),
            resilience::observer(emitter),
            None,
        )
        .map_err(resilience::config_error)?;
        Ok(Self::from_arc(Arc::new(bh)))
    }

    /// Begins call `id` and takes `weight` permits now: 0, or `1 + hg_reason` of the rejection
    /// (the call then ended `ignored`).
    #[napi]
    pub fn try_take(&self, weight: f64, id: u32) -> Result<u32> {
        let bh = self.bh()?;
        Ok(take_code(bh.begin_call().and_then(|call| {
            let r = bh.try_acquire_units(weight as u64);
            self.admitted(bh, id, call, r.is_ok());
            r
        })))
    }

    /// Begins call `id` and admits it at once (`GRANTED`, or `GRANTED_EVENTS` when state
    /// changes wait to be taken), queues it (the ticket, ≥ 0; waiter `id` is reported through
    /// `takeSettled()` when it settles) or rejects it (`-(10 + hg_reason)`, the call ended
    /// `ignored`). `queueTimeoutMs` 0 means "do not queue" (the core decides; the facade arms
    /// the timer otherwise).
    #[napi]
    pub fn enqueue(&self, weight: f64, id: u32, queue_timeout_ms: f64) -> Result<f64> {
        let bh = self.bh()?;
        let mut call = match bh.begin_call() {
            Ok(c) => c,
            Err(e) => return Ok(e.reason().map_or(STALE, rejected)),
        };
        let timeout = if queue_timeout_ms == 0.0 {
            Duration::ZERO
        } else {
            Duration::MAX
        };
        let r = match bh.enqueue_within(weight as u64, timeout, None) {
            Ok(Admission::Granted) => GRANTED,
            Ok(Admission::Queued(t)) => {
                // Register the waiter's waker; the ticket may already have settled.
                match bh.poll_ticket(t, Some(&settled::waker(id))) {
                    Ok(TicketPoll::Pending) => t.to_raw() as f64,
                    Ok(TicketPoll::Granted(_)) => {
                        bh.mark_granted(&mut call);
                        GRANTED
                    }
                    Ok(TicketPoll::Rejected(r)) => rejected(r.reason),
                    Err(_) => STALE,
                }
            }
            Err(e) => e.reason().map_or(STALE, rejected),
        };
        // Granted or queued (a ticket, >= 0): the call goes on.
        self.admitted(bh, id, call, r == GRANTED || r >= 0.0);
        Ok(if r == GRANTED { granted(&call) } else { r })
    }

    /// A settled ticket's outcome: its weight (> 0) when granted, 0 while pending, `STALE`,
    /// or `-(10 + hg_reason)`. Call `id`'s RTT clock restarts at the grant; a rejected call
    /// ends `ignored`.
    #[napi]
    pub fn poll_ticket(&self, ticket: f64, id: u32) -> Result<f64> {
        let bh = self.bh()?;
        Ok(
            match bh.poll_ticket(Ticket::from_raw(ticket as u64), None) {
                Ok(TicketPoll::Pending) => 0.0,
                Ok(TicketPoll::Granted(w)) => {
                    if let Some(call) = self.calls.borrow_mut().get_mut(&id) {
                        bh.mark_granted(call);
                    }
                    w as f64
                }
                Ok(TicketPoll::Rejected(r)) => {
                    self.end(bh, id, Outcome::Ignored);
                    rejected(r.reason)
                }
                Err(_) => STALE,
            },
        )
    }

    /// Cancels a queued ticket with `reason` (`hg_reason`): 0 cancelled (call `id` ended
    /// `ignored`); 1 a grant won (poll it); 2 a rejection won (poll it); 3 stale.
    #[napi]
    pub fn cancel(&self, ticket: f64, reason: u32, id: u32) -> Result<u32> {
        let reason = reason_from(reason)?;
        let bh = self.bh()?;
        Ok(match bh.cancel(Ticket::from_raw(ticket as u64), reason) {
            Ok(()) => {
                self.end(bh, id, Outcome::Ignored);
                0
            }
            Err(CancelError::Granted) => 1,
            Err(CancelError::Rejected(_)) => 2,
            Err(_) => 3,
        })
    }

    /// Returns `weight` permits early (a partial release: the call goes on); yields how many
    /// settled waiters and events wait to be taken.
    #[napi]
    pub fn refund(&self, weight: f64) -> Result<u32> {
        self.bh()?.release_units(weight as u64);
        Ok(settled::pending())
    }

    /// Ends call `id` with `outcome` (0 success, 1 failure, 2 ignored, 3 overload; nothing if
    /// it already ended), then returns its `weight` remaining permits; yields how many settled
    /// waiters and events wait to be taken.
    #[napi]
    pub fn release(&self, weight: f64, id: u32, outcome: u32) -> Result<u32> {
        let bh = self.bh()?;
        self.end(bh, id, resilience::outcome(outcome)?);
        if weight > 0.0 {
            bh.release_units(weight as u64);
        }
        Ok(settled::pending())
    }

    /// The facade's call timer fired: counts `call_timeout` and ends call `id` with `failure`
    /// (its permits stay held until `release`, which then records nothing more).
    #[napi]
    pub fn call_timed_out(&self, id: u32) -> Result<u32> {
        let bh = self.bh()?;
        let call = self.calls.borrow_mut().remove(&id);
        match call {
            Some(call) => bh.end_call_timed_out(call),
            // Already ended (the work settled in the same turn): only the count.
            None => bh.count_call_timeout(),
        }
        Ok(settled::pending())
    }

    /// A permit object was garbage-collected while held: end its call `ignored`, return and
    /// count it.
    #[napi]
    pub fn release_leaked(&self, weight: f64, id: u32) -> Result<u32> {
        let bh = self.bh()?;
        self.end(bh, id, Outcome::Ignored);
        bh.record_leak(weight as u64);
        if weight > 0.0 {
            bh.release_units(weight as u64);
        }
        Ok(settled::pending())
    }

    /// Counts an explicit release of an already released permit (works after `dispose()`).
    #[napi]
    pub fn record_double_release(&self) {
        if let Some(bh) = self.weak.upgrade() {
            bh.record_double_release();
        }
    }

    #[napi]
    pub fn set_limit(&self, limit: f64) -> Result<u32> {
        self.bh()?
            .set_limit(limit as u64)
            .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
        Ok(settled::pending())
    }

    #[napi]
    pub fn close(&self) -> Result<u32> {
        self.bh()?.close();
        Ok(settled::pending())
    }

    /// The stats (a read commits a due open → half-open transition, like any state read).
    #[napi]
    pub fn stats(&self) -> Result<JsStats> {
        Ok(JsStats::from(&self.bh()?.stats()))
    }

    #[napi]
    pub fn snapshot(&self) -> Result<JsSnapshot> {
        Ok(self.bh()?.snapshot().into())
    }

    #[napi]
    pub fn is_idle(&self) -> Result<bool> {
        Ok(self.bh()?.is_idle())
    }

    #[napi(getter)]
    pub fn max_concurrent(&self) -> Result<f64> {
        Ok(self.bh()?.max_concurrent() as f64)
    }

    #[napi(getter)]
    pub fn max_queue(&self) -> Result<f64> {
        Ok(self.bh()?.max_queue() as f64)
    }

    #[napi(getter)]
    pub fn queue_timeout_ms(&self) -> Result<f64> {
        let t = self.bh()?.queue_timeout();
        Ok(if t == Duration::MAX {
            f64::INFINITY
        } else {
            t.as_secs_f64() * 1000.0
        })
    }

    #[napi(getter)]
    pub fn enabled(&self) -> Result<bool> {
        Ok(self.bh()?.enabled())
    }

    #[napi(getter)]
    pub fn limit(&self) -> Result<f64> {
        Ok(self.bh()?.limit() as f64)
    }

    #[napi(getter)]
    pub fn closed(&self) -> Result<bool> {
        Ok(self.bh()?.is_closed())
    }

    /// Drops this handle's reference (a registry may then evict its entry).
    #[napi]
    pub fn dispose(&mut self) {
        self.bh = None;
    }
}
