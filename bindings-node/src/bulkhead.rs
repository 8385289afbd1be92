//! `NativeBulkhead`: the addon's view of one core bulkhead. Numbers in, small integer codes
//! out; the JS facade (`index.js`) turns them into promises, permits and errors. Every
//! admission decision is the core's.

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use hullguard_core::{
    Admission, Bulkhead as CoreBulkhead, CancelError, Config, Reason, Ticket, TicketPoll,
};
use napi::{Error, Result, Status};
use napi_derive::napi;

use crate::{
    clock::{self, VirtualClock},
    settled,
    stats::{JsSnapshot, JsStats},
};

/// `enqueue` / `pollTicket` code: granted at once.
pub const GRANTED: f64 = -1.0;
/// Code: the ticket is not live (already consumed or cancelled).
pub const STALE: f64 = -2.0;
/// Code base of a rejection: `-(REJECTED_BASE + hg_reason)`.
pub const REJECTED_BASE: f64 = 10.0;

pub(crate) fn rejected(reason: Reason) -> f64 {
    -(REJECTED_BASE + reason.index() as f64)
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
) -> Result<Config> {
    let c = Config {
        max_concurrent: max_concurrent as u64,
        max_queue: max_queue as u64,
        // NaN / negative were rejected by the facade; anything too large for a Duration is
        // "no deadline" (never a panic across the boundary).
        queue_timeout: Duration::try_from_secs_f64(queue_timeout_ms.max(0.0) / 1000.0)
            .unwrap_or(Duration::MAX),
        enabled,
        ..Config::DEFAULT
    };
    c.validate()
        .map_err(|e| Error::new(Status::InvalidArg, format!("{}: {e}", e.option())))?;
    Ok(c)
}

/// One core bulkhead (a handle: a registry's entry stays alive while a handle does, until
/// `dispose()`).
#[napi]
pub struct NativeBulkhead {
    bh: Option<Arc<CoreBulkhead>>,
    /// Still reaches the bulkhead after `dispose()` (to count a double release), without
    /// keeping it alive.
    weak: Weak<CoreBulkhead>,
}

impl NativeBulkhead {
    pub(crate) fn from_arc(bh: Arc<CoreBulkhead>) -> Self {
        Self {
            weak: Arc::downgrade(&bh),
            bh: Some(bh),
        }
    }

    fn bh(&self) -> Result<&Arc<CoreBulkhead>> {
        self.bh
            .as_ref()
            .ok_or_else(|| Error::new(Status::GenericFailure, "bulkhead handle disposed"))
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
        clock: Option<&VirtualClock>,
    ) -> Result<Self> {
        let c = config(max_concurrent, max_queue, queue_timeout_ms, enabled)?;
        let bh = CoreBulkhead::with_clock(c, clock::source(clock))
            .map_err(|e| Error::new(Status::InvalidArg, format!("{}: {e}", e.option())))?;
        Ok(Self::from_arc(Arc::new(bh)))
    }

    /// Takes `weight` permits now: 0, or `1 + hg_reason` of the rejection.
    #[napi]
    pub fn try_take(&self, weight: f64) -> Result<u32> {
        Ok(match self.bh()?.try_acquire_units(weight as u64) {
            Ok(()) => 0,
            Err(e) => e.reason().map_or(u32::MAX, |r| 1 + r.index() as u32),
        })
    }

    /// Admits at once (`GRANTED`), queues (the ticket, ≥ 0; waiter `id` is reported through
    /// `takeSettled()` when it settles) or rejects (`-(10 + hg_reason)`). `queueTimeoutMs` 0
    /// means "do not queue" (the core decides; the facade arms the timer otherwise).
    #[napi]
    pub fn enqueue(&self, weight: f64, id: u32, queue_timeout_ms: f64) -> Result<f64> {
        let bh = self.bh()?;
        let timeout = if queue_timeout_ms == 0.0 {
            Duration::ZERO
        } else {
            Duration::MAX
        };
        Ok(match bh.enqueue_within(weight as u64, timeout, None) {
            Ok(Admission::Granted) => GRANTED,
            Ok(Admission::Queued(t)) => {
                // Register the waiter's waker; the ticket may already have settled.
                match bh.poll_ticket(t, Some(&settled::waker(id))) {
                    Ok(TicketPoll::Pending) => t.to_raw() as f64,
                    Ok(TicketPoll::Granted(_)) => GRANTED,
                    Ok(TicketPoll::Rejected(r)) => rejected(r.reason),
                    Err(_) => STALE,
                }
            }
            Err(e) => e.reason().map_or(STALE, rejected),
        })
    }

    /// A settled ticket's outcome: its weight (> 0) when granted, 0 while pending, `STALE`,
    /// or `-(10 + hg_reason)`.
    #[napi]
    pub fn poll_ticket(&self, ticket: f64) -> Result<f64> {
        Ok(
            match self
                .bh()?
                .poll_ticket(Ticket::from_raw(ticket as u64), None)
            {
                Ok(TicketPoll::Pending) => 0.0,
                Ok(TicketPoll::Granted(w)) => w as f64,
                Ok(TicketPoll::Rejected(r)) => rejected(r.reason),
                Err(_) => STALE,
            },
        )
    }

    /// Cancels a queued ticket with `reason` (`hg_reason`): 0 cancelled; 1 a grant won (poll
    /// it); 2 a rejection won (poll it); 3 stale.
    #[napi]
    pub fn cancel(&self, ticket: f64, reason: u32) -> Result<u32> {
        let reason = reason_from(reason)?;
        Ok(
            match self.bh()?.cancel(Ticket::from_raw(ticket as u64), reason) {
                Ok(()) => 0,
                Err(CancelError::Granted) => 1,
                Err(CancelError::Rejected(_)) => 2,
                Err(_) => 3,
            },
        )
    }

    /// Returns permits; yields how many settled waiters wait to be taken.
    #[napi]
    pub fn release(&self, weight: f64) -> Result<u32> {
        self.bh()?.release_units(weight as u64);
        Ok(settled::pending())
    }

    /// A permit object was garbage-collected while held: return and count it.
    #[napi]
    pub fn release_leaked(&self, weight: f64) -> Result<u32> {
        let bh = self.bh()?;
        bh.record_leak(weight as u64);
        bh.release_units(weight as u64);
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
