//! [`HostAcquire`]: the asynchronous admission of a host bulkhead (docs/design.md §14.3) — the
//! same steps as the blocking one (a ticket, this process's queue, the global turn), driven by
//! polls instead of a parked thread. It needs no runtime: the core wakes it when it becomes
//! this process's head, and this process's keeper thread wakes it when its doorbell rings and
//! when its queue timeout passes. Dropping it while it waits gives its place up.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use hullguard_core::{Bulkhead, Call, Cancelled, Decision, Reason, Request, Waiter};

use crate::{
    attachment::{Attachment, HeadClaim, HeadTurn},
    error::HostError,
    permit::{HostPermit, Ticket, granted, reject},
    queue::{GateRef, LocalQueue},
};

type GateWaiter = Waiter<GateRef, 0>;
type GateCall = Call<GateRef, 0>;

/// The future of [`HostBulkhead::acquire`](crate::HostBulkhead::acquire): the permit, or the
/// rejection with the local bulkhead's reasons. `Send`, `'static`, cancel-safe (drop it to give
/// the place up; a permit it returned is the caller's).
#[must_use = "a future does nothing unless polled"]
pub struct HostAcquire {
    state: State,
}

enum State {
    Done(Option<Result<HostPermit, HostError>>),
    Queued(Box<Queued>),
}

struct Queued {
    q: Arc<LocalQueue>,
    a: &'static Attachment,
    request: Request,
    start: Instant,
    until: Option<Instant>,
    /// The keeper's registration of this future's waker (its id).
    id: u64,
    phase: Phase,
    /// The published ticket (dropped after `phase`: this process's head moves on, then the
    /// ticket is withdrawn and the global head rung).
    ticket: Option<Ticket>,
}

enum Phase {
    /// Not yet in this process's queue.
    Start,
    /// In this process's queue.
    Gate(GateWaiter),
    /// This process's head: waiting for the global turn.
    Head(GateCall),
    Finished,
}

impl fmt::Debug for HostAcquire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Done(Some(_)) => "ready",
            State::Done(None) => "finished",
            State::Queued(q) => match q.phase {
                Phase::Start => "start",
                Phase::Gate(_) => "queued",
                Phase::Head(_) => "head",
                Phase::Finished => "finished",
            },
        };
        f.debug_struct("HostAcquire")
            .field("state", &state)
            .finish()
    }
}

impl HostAcquire {
    pub(crate) fn done(result: Result<HostPermit, HostError>) -> Self {
        HostAcquire {
            state: State::Done(Some(result)),
        }
    }

    pub(crate) fn queued(q: Arc<LocalQueue>, request: Request, wait: Duration) -> Self {
        let start = Instant::now();
        let a = q.a;
        HostAcquire {
            state: State::Queued(Box::new(Queued {
                q,
                a,
                request,
                start,
                until: start.checked_add(wait),
                id: a.waker_id(),
                phase: Phase::Start,
                ticket: None,
            })),
        }
    }

    /// Whether it settled (a poll returned `Ready`, or it was refused or admitted at once).
    pub fn is_settled(&self) -> bool {
        match &self.state {
            State::Done(_) => true,
            State::Queued(q) => matches!(q.phase, Phase::Finished),
        }
    }
}

impl Queued {
    fn timed_out(&self) -> bool {
        self.until.is_some_and(|t| Instant::now() >= t)
    }

    fn finish(
        &mut self,
        result: Result<HostPermit, HostError>,
    ) -> Poll<Result<HostPermit, HostError>> {
        self.a.unregister(self.id);
        self.phase = Phase::Finished;
        self.ticket = None; // withdrawn: rings the next head
        Poll::Ready(result)
    }

    fn reject(&mut self, reason: Reason) -> Poll<Result<HostPermit, HostError>> {
        let e = reject(self.a, self.q.max_queue, reason);
        self.finish(Err(e))
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<HostPermit, HostError>> {
        if !self.a.is_own() && !matches!(self.phase, Phase::Finished) {
            // Started by the parent before `fork`: its attachment (slot, ticket, local queue)
            // is the parent's, and an admission through it would count a permit in the
            // parent's slot that this process could never release. Refused, touching nothing.
            self.phase = Phase::Finished;
            self.ticket = None; // not withdrawn: the parent's (`Ticket::drop`)
            return Poll::Ready(Err(HostError::Foreign));
        }
        loop {
            match std::mem::replace(&mut self.phase, Phase::Finished) {
                Phase::Finished => {
                    return Poll::Ready(Err(HostError::Option {
                        option: "acquire",
                        message: "the future was polled after it completed".into(),
                    }));
                }
                Phase::Start => {
                    // This handle's FIFO first (a full queue refuses before any ticket), then
                    // a ticket. The keeper's timer bounds the wait; the gate has no deadline.
                    let gate = Request::new(1).queue_timeout(Duration::MAX);
                    let decision =
                        Bulkhead::admit_via(GateRef(self.q.clone()), &gate, Some(cx.waker()));
                    if !matches!(decision, Decision::Rejected(_)) {
                        self.ticket = Some(Ticket::take(self.a));
                    }
                    match decision {
                        Decision::Granted(call) => self.phase = Phase::Head(call),
                        Decision::Queued(w) => self.phase = Phase::Gate(w),
                        Decision::Rejected(e) => {
                            return match e.reason() {
                                Some(r) => self.reject(gate_reason(r)),
                                None => self.finish(Err(e.into())),
                            };
                        }
                    }
                }
                Phase::Gate(mut w) => match Pin::new(&mut w).poll(cx) {
                    Poll::Ready(Ok(call)) => self.phase = Phase::Head(call),
                    Poll::Ready(Err(e)) => {
                        return match e.reason() {
                            Some(r) => self.reject(r),
                            None => self.finish(Err(e.into())),
                        };
                    }
                    Poll::Pending if self.timed_out() => match w.cancel(Reason::Timeout) {
                        Cancelled::Cancelled(_) => return self.reject(Reason::Timeout),
                        Cancelled::Rejected(r) => return self.reject(r.reason),
                        // Granted as it timed out: this process's head now; the deadline
                        // check there refuses it and hands the head on.
                        Cancelled::Granted(call) => self.phase = Phase::Head(call),
                    },
                    Poll::Pending => {
                        let ticket = self.ticket.as_ref().map(|t| t.t);
                        self.a.register(self.id, self.until, ticket, cx.waker());
                        self.phase = Phase::Gate(w);
                        return Poll::Pending;
                    }
                },
                Phase::Head(call) => {
                    let Some(ticket) = self.ticket.as_ref().map(|t| t.t) else {
                        return self.reject(Reason::Timeout); // withdrawn: cannot happen here
                    };
                    let claim = HeadClaim::new(self.request.weight, self.request.cost, ticket);
                    match self.a.head_turn(self.id, self.until, claim, cx.waker()) {
                        Err(e) => return self.finish(Err(e)),
                        Ok(HeadTurn::Granted(generation)) => {
                            self.ticket = None;
                            drop(call);
                            let permit =
                                granted(&self.q, generation, &self.request, Some(self.start));
                            return self.finish(Ok(permit));
                        }
                        Ok(HeadTurn::Expired) => return self.reject(Reason::Timeout),
                        Ok(HeadTurn::Waiting) => {}
                    }
                    if self.q.is_closed() {
                        return self.reject(Reason::Shutdown);
                    }
                    if self.timed_out() {
                        return self.reject(Reason::Timeout);
                    }
                    self.phase = Phase::Head(call);
                    return Poll::Pending;
                }
            }
        }
    }
}

/// The reason of a refusal by a handle's gate (one permit, `max_queue − 1` places): the gate
/// refuses `concurrency_limit` when it has no place at all (`max_queue` 1), which for the
/// handle is a full queue.
pub(crate) fn gate_reason(r: Reason) -> Reason {
    if r == Reason::ConcurrencyLimit {
        Reason::QueueLimit
    } else {
        r
    }
}

impl Future for HostAcquire {
    type Output = Result<HostPermit, HostError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            State::Done(result) => match result.take() {
                Some(r) => Poll::Ready(r),
                None => Poll::Ready(Err(HostError::Option {
                    option: "acquire",
                    message: "the future was polled after it completed".into(),
                })),
            },
            State::Queued(q) => q.poll(cx),
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.a.unregister(self.id);
        // Then the phase (a gate waiter abandons its place; a head's call hands the head on)
        // and the ticket (withdrawn, the next head rung) drop in field order.
    }
}
