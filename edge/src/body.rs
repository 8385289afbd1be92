//! [`AdmittedBody`]: the response body that holds the request's admission until it ends.

use core::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hullguard_core::{Outcome, OwnedPermit};
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a response through [`AdmissionService`](crate::AdmissionService): the
    /// handler's body with the request's admitted call, or the small JSON body of a refusal.
    ///
    /// The call — its permits, its class's share — is held until the body **ends**: the
    /// inner body yields its last frame (or reports [`is_end_stream`](Body::is_end_stream)),
    /// fails, or is dropped. So a streaming response keeps its permit for as long as it
    /// streams, and a client that disconnects mid-stream (the server drops the body) releases
    /// it at once. The call ends with the outcome of the response's status
    /// ([`Outcome::for_http_status`]: 5xx a failure, 429 overload, anything else a success); a
    /// body error is a failure; a body dropped before its end is a cancellation
    /// ([`Outcome::Ignored`]: the breaker and the adaptive limit count nothing).
    ///
    /// Frames pass through unchanged; `Send` and `Sync` as the inner body is.
    pub struct AdmittedBody<B>
    where
        B: Body,
    {
        #[pin]
        inner: Option<B>,
        refusal: Option<Bytes>,
        call: Option<OwnedPermit>,
        outcome: Outcome,
    }

    impl<B> PinnedDrop for AdmittedBody<B>
    where
        B: Body,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(call) = this.call.take() {
                // A body that never had its end polled (hyper does not poll an empty or
                // exhausted body again) but says it ended was served whole; any other drop is a
                // cancellation.
                if inner_ended(this.inner.as_ref().get_ref()) {
                    call.end(*this.outcome);
                } else {
                    call.end(Outcome::Ignored);
                }
            }
        }
    }
}

/// Whether the inner body has nothing left: it says so, or its exact remaining size is 0 (what
/// hyper stops at for a body of known length).
fn inner_ended<B: Body>(inner: &Option<B>) -> bool {
    inner
        .as_ref()
        .is_some_and(|b| b.is_end_stream() || b.size_hint().exact() == Some(0))
}

impl<B: Body> AdmittedBody<B> {
    /// `inner`, holding `call` until it ends; `outcome` is what a whole body records.
    pub(crate) fn admitted(inner: B, call: OwnedPermit, outcome: Outcome) -> Self {
        AdmittedBody {
            inner: Some(inner),
            refusal: None,
            call: Some(call),
            outcome,
        }
    }

    /// `inner` with its call already ended: a response that has no body on the wire (a
    /// `HEAD` request's, a 1xx / 204 / 304), whose body the server never polls.
    pub(crate) fn ended(inner: B) -> Self {
        AdmittedBody {
            inner: Some(inner),
            refusal: None,
            call: None,
            outcome: Outcome::Ignored,
        }
    }

    /// A refusal's body: one frame of `json`, no call.
    pub(crate) fn refusal(json: Bytes) -> Self {
        AdmittedBody {
            inner: None,
            refusal: Some(json),
            call: None,
            outcome: Outcome::Ignored,
        }
    }

    /// Whether the body still holds its admission (`false` for a refusal's body, and once the
    /// body ended).
    pub fn holds_permit(&self) -> bool {
        self.call.is_some()
    }
}

impl<B> Body for AdmittedBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(this.refusal.take().map(|b| Ok(Frame::data(b.into()))));
        };
        let polled = inner.poll_frame(cx);
        match &polled {
            Poll::Pending => {}
            Poll::Ready(None) => {
                if let Some(call) = this.call.take() {
                    call.end(*this.outcome);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(call) = this.call.take() {
                    call.end(Outcome::Failure);
                }
            }
            Poll::Ready(Some(Ok(_))) => {
                // The last frame: end now (the server may never poll for the end).
                if this.call.is_some() && inner_ended(this.inner.as_ref().get_ref()) {
                    if let Some(call) = this.call.take() {
                        call.end(*this.outcome);
                    }
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(b) => b.is_end_stream(),
            None => self.refusal.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(b) => b.size_hint(),
            None => SizeHint::with_exact(self.refusal.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}

impl<B: Body> core::fmt::Debug for AdmittedBody<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AdmittedBody")
            .field("refusal", &self.refusal)
            .field("holds_permit", &self.call.is_some())
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}
