//! [`AdmissionService`] and its [`ResponseFuture`].

use core::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};
use std::{sync::Arc, time::Instant};

use bytes::Bytes;
use http::{Request, Response};
use hullguard_core::{
    AcquireError, Bulkhead, Cancelled, Deadline, Decision, Outcome, OwnedPermit, Reason,
    Request as Admission, Waiter,
};
use pin_project_lite::pin_project;
use tower::Service;

use crate::{
    body::AdmittedBody, deadline::parse_grpc_timeout, layer::Settings, refusal::refused,
    timer::Sleep,
};

/// The shortest rate tick armed (a tick due sooner fires after this): keeps a queue held by a
/// rate from spinning on a timer of zero.
const MIN_TICK: Duration = Duration::from_millis(1);

/// The [`tower::Service`] of an [`AdmissionLayer`](crate::AdmissionLayer): admits each
/// `http::Request<B>` through the bulkhead, then calls the inner service, whose response body is
/// wrapped in an [`AdmittedBody`] that holds the admission until it ends.
///
/// `poll_ready` is the inner service's. Each `call` admits at once (`Bulkhead::admit_owned`) and
/// moves the readied inner service into the response future (the `Clone`-and-swap idiom of
/// `tower`), so a queued request holds no readiness of the service it is cloned from.
///
/// Thread-safety: the service is `Send`/`Sync` as the inner one is; the bulkhead is lock-free and
/// shared.
pub struct AdmissionService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> AdmissionService<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        AdmissionService { inner, settings }
    }

    /// The bulkhead.
    pub fn bulkhead(&self) -> &Arc<Bulkhead> {
        &self.settings.bh
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone> Clone for AdmissionService<S> {
    fn clone(&self) -> Self {
        AdmissionService {
            inner: self.inner.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for AdmissionService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionService")
            .field("inner", &self.inner)
            .field("settings", &self.settings)
            .finish()
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for AdmissionService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    ResB: http_body::Body,
    ResB::Data: From<Bytes>,
{
    type Response = Response<AdmittedBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let settings = &*self.settings;
        let (mut parts, body) = req.into_parts();
        let mut admission = Admission::new(1);
        if let Some(classify) = &settings.classify {
            admission = admission.class(classify(&parts));
        }
        if let Some(t) = settings.queue_timeout {
            admission = admission.queue_timeout(t);
        }
        if settings.timer.is_none() {
            // Nothing could bound the wait.
            admission = admission.no_wait();
        }
        if let Some(name) = &settings.deadline_header {
            let budget = parts
                .headers
                .get(name)
                .and_then(|v| parse_grpc_timeout(v.as_bytes()));
            if let Some(budget) = budget {
                let deadline = Instant::now()
                    .checked_add(budget)
                    .map_or(Deadline::NONE, Deadline::At);
                admission = admission.deadline(deadline);
                parts.extensions.insert(deadline);
            }
        }
        // A HEAD response has no body on the wire: the server never polls it (ended at the head).
        let head = parts.method == http::Method::HEAD;
        let req = Request::from_parts(parts, body);
        // The readied service goes with this request; `self` keeps a fresh clone.
        let clone = self.inner.clone();
        let mut inner = core::mem::replace(&mut self.inner, clone);
        let state = match settings.bh.admit_owned(&admission, None) {
            Decision::Granted(call) => State::Called {
                future: inner.call(req),
                call: Some(call),
            },
            Decision::Queued(waiter) => {
                let deadline = match (waiter.queue_timeout(), &settings.timer) {
                    (Duration::MAX, _) | (_, None) => None,
                    (t, Some(timer)) => Some(timer.sleep(t)),
                };
                State::Waiting {
                    waiter: Some(waiter),
                    deadline,
                    tick: None,
                    inner: Some(inner),
                    req: Some(req),
                }
            }
            Decision::Rejected(e) => State::Refused { error: Some(e) },
        };
        ResponseFuture {
            state,
            settings: self.settings.clone(),
            head,
        }
    }
}

pin_project! {
    /// The response future of [`AdmissionService`]: waits for the admission if it queued, then
    /// runs the inner service's future. Dropping it releases whatever it holds — a queued
    /// place (cancelled `aborted`) or the call (ended as a cancellation).
    pub struct ResponseFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S, ReqB>,
        settings: Arc<Settings>,
        // The request is a HEAD (its response has no body on the wire).
        head: bool,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        Waiting {
            waiter: Option<Waiter<Arc<Bulkhead>, 0>>,
            // The queue deadline (`None`: none).
            deadline: Option<Sleep>,
            // The rate tick armed while a rate holds the queue back.
            tick: Option<Sleep>,
            inner: Option<S>,
            req: Option<Request<ReqB>>,
        },
        Called {
            #[pin]
            future: S::Future,
            call: Option<OwnedPermit>,
        },
        Refused {
            error: Option<AcquireError>,
        },
    }
}

/// How a wait settled.
enum Settled {
    Granted(OwnedPermit),
    Refused(AcquireError),
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: http_body::Body,
    ResB::Data: From<Bytes>,
{
    type Output = Result<Response<AdmittedBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Waiting {
                    waiter,
                    deadline,
                    tick,
                    inner,
                    req,
                } => {
                    let settled = match poll_wait(waiter, deadline, tick, this.settings, cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(s) => s,
                    };
                    match settled {
                        Settled::Granted(call) => {
                            let (mut inner, req) = match (inner.take(), req.take()) {
                                (Some(i), Some(r)) => (i, r),
                                _ => unreachable!("a waiting state holds its service and request"),
                            };
                            let future = inner.call(req);
                            this.state.set(State::Called {
                                future,
                                call: Some(call),
                            });
                        }
                        Settled::Refused(e) => return Poll::Ready(Ok(refused(e))),
                    }
                }
                StateProj::Called { future, call } => {
                    return match future.poll(cx) {
                        Poll::Pending => Poll::Pending,
                        Poll::Ready(Ok(response)) => {
                            let call = call.take().expect("response future polled after Ready");
                            let status = response.status().as_u16();
                            let outcome = Outcome::for_http_status(status);
                            // No body on the wire (RFC 9110 §6.4.1): the server never polls it,
                            // so the call ends with the head.
                            if *this.head || status < 200 || status == 204 || status == 304 {
                                call.end(outcome);
                                return Poll::Ready(Ok(response.map(AdmittedBody::ended)));
                            }
                            Poll::Ready(Ok(
                                response.map(|body| AdmittedBody::admitted(body, call, outcome))
                            ))
                        }
                        Poll::Ready(Err(e)) => {
                            if let Some(call) = call.take() {
                                call.end(Outcome::Failure);
                            }
                            Poll::Ready(Err(e))
                        }
                    };
                }
                StateProj::Refused { error } => {
                    let error = error.take().expect("response future polled after Ready");
                    return Poll::Ready(Ok(refused(error)));
                }
            }
        }
    }
}

/// Polls a queued admission: its settlement, its queue deadline (the owner's cancel, as
/// `timeout`), and the rate tick while a rate holds the queue back (the core arms no timer:
/// docs/design.md §4.9).
fn poll_wait(
    waiter: &mut Option<Waiter<Arc<Bulkhead>, 0>>,
    deadline: &mut Option<Sleep>,
    tick: &mut Option<Sleep>,
    settings: &Settings,
    cx: &mut Context<'_>,
) -> Poll<Settled> {
    // Each turn either settles, returns `Pending`, or follows a tick that fired (then at least
    // MIN_TICK passes before the next one): bounded.
    for _ in 0..4 {
        let w = waiter.as_mut().expect("response future polled after Ready");
        if let Poll::Ready(r) = w.poll(Some(cx.waker())) {
            *waiter = None;
            return Poll::Ready(match r {
                Ok(call) => Settled::Granted(call),
                Err(e) => Settled::Refused(e),
            });
        }
        if let Some(sleep) = deadline {
            if sleep.as_mut().poll(cx).is_ready() {
                let w = waiter.take().expect("checked above");
                return Poll::Ready(match w.cancel(Reason::Timeout) {
                    Cancelled::Granted(call) => Settled::Granted(call),
                    Cancelled::Cancelled(r) | Cancelled::Rejected(r) => Settled::Refused(r.into()),
                });
            }
        }
        let Some(timer) = &settings.timer else {
            return Poll::Pending;
        };
        if tick.is_none() {
            match settings.bh.rate_retry_after() {
                Some(after) => *tick = Some(timer.sleep(after.max(MIN_TICK))),
                None => return Poll::Pending,
            }
        }
        let sleep = tick.as_mut().expect("armed above");
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        *tick = None;
        settings.bh.rate_tick();
    }
    // Still held after several ticks in one poll: come back on the next wake-up.
    cx.waker().wake_by_ref();
    Poll::Pending
}

impl<S, ReqB> fmt::Debug for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Waiting { .. } => "waiting",
            State::Called { .. } => "called",
            State::Refused { .. } => "refused",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
