//! [`AdmissionLayer`]: the layer and its settings.

use core::{fmt, time::Duration};
use std::sync::Arc;

use http::{HeaderName, request::Parts};
use hullguard_core::Bulkhead;
use tower::Layer;

use crate::{service::AdmissionService, timer::Timer};

/// A request's class from its head (see [`AdmissionLayer::classify`]).
pub(crate) type Classifier = Arc<dyn Fn(&Parts) -> u16 + Send + Sync>;

/// What every service of one layer shares (read-only).
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) bh: Arc<Bulkhead>,
    pub(crate) classify: Option<Classifier>,
    pub(crate) deadline_header: Option<HeaderName>,
    pub(crate) queue_timeout: Option<Duration>,
    pub(crate) timer: Option<Arc<dyn Timer>>,
}

/// A [`tower::Layer`] that admits every incoming request through one [`Bulkhead`] before the
/// inner service sees it (docs/design.md §4.11): axum's `Router::layer`, hyper with
/// `tower::ServiceBuilder`, or any `tower::Service<http::Request<B>>` whose response is an
/// `http::Response`.
///
/// Per request, [`AdmissionService`] asks the core with a one-permit
/// [`Request`](hullguard_core::Request) of the class the [classifier](Self::classify) picks
/// (0 without one), the budget of the [deadline header](Self::deadline_header), and the
/// [queue timeout](Self::queue_timeout):
/// * **granted** — the inner service runs; the call is held until the response **body** ends
///   ([`AdmittedBody`](crate::AdmittedBody)), then ends with the status's outcome (5xx a
///   failure, 429 overload, else a success), or as a cancellation if the client went away;
/// * **queued** — the request waits (the inner service is not called yet) for a grant, at most
///   its queue timeout capped by its deadline; a client that disconnects gives its place up;
/// * **refused** — the inner service never runs: `503` (`429` for `rate_limit`) with
///   `{"reason": …, "bound": …}` as JSON, and `Retry-After` only when the core has an honest
///   estimate (a rate's conformance time, rounded up to whole seconds).
///
/// **Overload.** Load shedding is the core's (docs/design.md §4.11): build the bulkhead with
/// `shed_lag_threshold` and/or `shed_cpu_threshold` and a `critical_priority`, report readings
/// with `Bulkhead::report_load` — the event-loop lag with [`spawn_lag_probe`](crate::spawn_lag_probe)
/// (feature `tokio`), the process's CPU use from your own sampler (this crate measures none) —
/// and non-critical classes are refused `shed` (bound `overload`, a 503 without `Retry-After`)
/// while critical ones pass as long as capacity is left.
///
/// Each request takes one permit (weight 1, cost 0). Cloning a layer is cheap (a few `Arc`s);
/// every service it makes shares the bulkhead. The layer, its services and their futures are
/// `Send` (and the layer and services `Sync`) as the inner service is: the bulkhead is
/// lock-free, and the classifier and the timer are `Send + Sync`.
///
/// # Examples
/// ```
/// use std::{sync::Arc, time::Duration};
/// use axum::{Router, routing::get};
/// use hullguard_core::{Bulkhead, Config};
/// use hullguard_tower::AdmissionLayer;
///
/// let bh = Arc::new(Bulkhead::new(Config { max_concurrent: 64, ..Config::default() })?);
/// let _app: Router = Router::new().route("/", get(|| async { "hello" })).layer(
///     AdmissionLayer::new(bh.clone())
///         .deadline_header("grpc-timeout")
///         .queue_timeout(Duration::from_millis(100)),
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct AdmissionLayer {
    settings: Settings,
}

impl AdmissionLayer {
    /// A layer admitting through `bh`: class 0 for every request, no deadline header, the
    /// bulkhead's own `queue_timeout`, and (feature `tokio`) tokio's timer. Without a timer
    /// (no `tokio` feature and no [`timer`](Self::timer)) a request never queues: admitted at
    /// once or refused.
    pub fn new(bh: Arc<Bulkhead>) -> Self {
        AdmissionLayer {
            settings: Settings {
                bh,
                classify: None,
                deadline_header: None,
                queue_timeout: None,
                #[cfg(feature = "tokio")]
                timer: Some(Arc::new(crate::timer::TokioTimer)),
                #[cfg(not(feature = "tokio"))]
                timer: None,
            },
        }
    }

    /// Classifies each request from its head: `f` returns the admission class, an index into
    /// the bulkhead's class table (`0 .. bh.class_count()`; with no table only 0). An index
    /// outside the table is a set-up bug: the request is answered `500` with
    /// `{"reason": "invalid", "argument": "class"}` and never reaches the inner service.
    /// Ready-made: [`classify::by_header`](crate::classify::by_header),
    /// [`classify::by_path_prefix`](crate::classify::by_path_prefix).
    ///
    /// `f` runs on the server's task for every request, before admission: keep it cheap.
    ///
    /// # Examples
    /// ```
    /// # use std::sync::Arc;
    /// # use hullguard_core::{Bulkhead, Config};
    /// # let bh = Arc::new(Bulkhead::new(Config::default()).unwrap());
    /// use hullguard_tower::AdmissionLayer;
    /// // Class 1 for writes, 0 for reads.
    /// let _layer = AdmissionLayer::new(bh)
    ///     .classify(|parts: &http::request::Parts| u16::from(parts.method != http::Method::GET));
    /// ```
    #[must_use]
    pub fn classify<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> u16 + Send + Sync + 'static,
    {
        self.settings.classify = Some(Arc::new(f));
        self
    }

    /// Reads each request's budget from header `name` in the `grpc-timeout` format
    /// ([`parse_grpc_timeout`](crate::parse_grpc_timeout): `1500m`, `2S`, …) and admits it
    /// with the deadline `now + budget` ([`Deadline::At`](hullguard_core::Deadline::At)): a
    /// budget of zero is refused `timeout` at once (a 503, bound `deadline`), a queued request
    /// waits at most until its deadline less the bulkhead's `min_service_time`, and one that
    /// could not wait that long is refused `timeout` unless admitted at once. The deadline is
    /// also put in the request's extensions (`req.extensions().get::<Deadline>()`) for the
    /// handler to bound its own work and to propagate (`grpc_timeout(time_left)`). A missing or
    /// malformed header is no deadline.
    ///
    /// # Panics
    /// When `name` is not a valid header name.
    #[must_use]
    pub fn deadline_header(mut self, name: &str) -> Self {
        let name = HeaderName::from_bytes(name.as_bytes())
            .unwrap_or_else(|e| panic!("deadline_header: {name:?} is not a header name: {e}"));
        self.settings.deadline_header = Some(name);
        self
    }

    /// How long a request may wait in the bulkhead's queue: `Duration::ZERO` never queues (a
    /// request not admitted at once is refused `concurrency_limit`), `Duration::MAX` waits
    /// without a deadline of its own. The bulkhead's `queue_timeout` when not set. It bounds
    /// the wait only, never the handler's work.
    #[must_use]
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.settings.queue_timeout = Some(timeout);
        self
    }

    /// The timer queued requests wait with (see [`Timer`]); tokio's by default (feature
    /// `tokio`).
    #[must_use]
    pub fn timer(mut self, timer: impl Timer) -> Self {
        self.settings.timer = Some(Arc::new(timer));
        self
    }

    /// The bulkhead.
    pub fn bulkhead(&self) -> &Arc<Bulkhead> {
        &self.settings.bh
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = AdmissionService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AdmissionService::new(inner, Arc::new(self.settings.clone()))
    }
}

impl fmt::Debug for AdmissionLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionLayer")
            .field("bulkhead", &self.bh)
            .field("classify", &self.classify.is_some())
            .field("deadline_header", &self.deadline_header)
            .field("queue_timeout", &self.queue_timeout)
            .field("timer", &self.timer.is_some())
            .finish()
    }
}
