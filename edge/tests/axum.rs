//! `AdmissionLayer` in front of a real axum server on 127.0.0.1 (a free port per test), driven
//! by a real hyper client (one HTTP/1.1 connection per request, so a test controls exactly
//! which connection it drops). Overload signals are injected with `Bulkhead::report_load`; every
//! wait is bounded by [`WAIT`] (far above what any step needs: a busy 2-core machine passes).
//! They use the `tokio` feature (the default): its timer and its lag probe.
#![cfg(feature = "tokio")]

use std::{
    convert::Infallible,
    net::{Ipv4Addr, SocketAddr},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::{Router, body::Body, extract::Request, http::StatusCode, routing};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hullguard_core::{
    Bulkhead, ClockSource, Config, Deadline, LoadSignal, Reason, Resilience,
    breaker::BreakerConfig,
    config::{ClassSpec, ClassTable, Rate, Rates},
};
use hullguard_tower::{AdmissionLayer, classify::by_header, spawn_lag_probe};
use hyper::{body::Incoming, client::conn::http1};
use hyper_util::rt::TokioIo;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

/// The bound on every wait of these tests.
const WAIT: Duration = Duration::from_secs(10);

// ----- the server ------------------------------------------------------------------------------

/// A response body fed by the test, chunk by chunk, until the sender is dropped.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}

/// What the handlers tell the test: a streaming response's sender, a hanging handler's start.
struct Handlers {
    streams: mpsc::UnboundedReceiver<mpsc::Sender<Bytes>>,
    started: mpsc::UnboundedReceiver<()>,
}

/// The routes: `/` answers "ok"; `/stream` streams what the test sends until it drops the
/// sender; `/hang` never answers; `/fail` is a 500; `/deadline` says whether the layer put a
/// `Deadline` in the request's extensions.
fn app(layer: AdmissionLayer) -> (Router, Handlers) {
    let (stream_tx, streams) = mpsc::unbounded_channel();
    let (started_tx, started) = mpsc::unbounded_channel();
    let router = Router::new()
        .route("/", routing::get(|| async { "ok" }))
        .route(
            "/stream",
            routing::get(move || {
                let stream_tx = stream_tx.clone();
                async move {
                    let (tx, rx) = mpsc::channel(4);
                    stream_tx.send(tx).expect("the test is listening");
                    Body::new(ChannelBody(rx))
                }
            }),
        )
        .route(
            "/hang",
            routing::get(move || {
                let _ = started_tx.send(());
                std::future::pending::<&'static str>()
            }),
        )
        .route(
            "/fail",
            routing::get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route(
            "/deadline",
            routing::get(|req: Request| async move {
                if req.extensions().get::<Deadline>().is_some() {
                    "deadline"
                } else {
                    "none"
                }
            }),
        )
        .layer(layer);
    (router, Handlers { streams, started })
}

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

async fn serve(router: Router) -> Server {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Server { addr, stop, task }
}

impl Server {
    /// Stops accepting, lets the open connections finish (bounded), then stops the task.
    async fn stop(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        if tokio::time::timeout(WAIT, &mut task).await.is_err() {
            task.abort();
        }
    }
}

// ----- the client ------------------------------------------------------------------------------

/// One HTTP/1.1 connection; dropping it (or aborting its task) closes the socket.
struct Conn {
    send: http1::SendRequest<Empty<Bytes>>,
    task: JoinHandle<()>,
}

async fn connect(addr: SocketAddr) -> Conn {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    Conn { send, task }
}

impl Conn {
    /// Sends `GET path` with `headers`; resolves to the response head (its body still open).
    async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> http::Response<Incoming> {
        let mut req = http::Request::get(format!("http://127.0.0.1{path}"));
        for &(k, v) in headers {
            req = req.header(k, v);
        }
        let req = req.body(Empty::new()).unwrap();
        tokio::time::timeout(WAIT, self.send.send_request(req))
            .await
            .expect("a response within WAIT")
            .unwrap()
    }

    /// Closes the connection now (the client went away).
    fn drop_now(self) {}
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A whole response.
#[derive(Debug)]
struct Reply {
    status: u16,
    retry_after: Option<String>,
    content_type: Option<String>,
    body: String,
}

/// `GET path` on a fresh connection, read to the end.
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut conn = connect(addr).await;
    let res = conn.get(path, headers).await;
    let header = |name| {
        res.headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let (status, retry_after, content_type) = (
        res.status().as_u16(),
        header(http::header::RETRY_AFTER),
        header(http::header::CONTENT_TYPE),
    );
    let body = tokio::time::timeout(WAIT, res.into_body().collect())
        .await
        .expect("the body within WAIT")
        .unwrap()
        .to_bytes();
    Reply {
        status,
        retry_after,
        content_type,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// Waits (bounded by [`WAIT`]) until `cond` holds.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The JSON body of a refusal.
fn refusal(reason: &str, bound: &str) -> String {
    format!(r#"{{"reason":"{reason}","bound":"{bound}"}}"#)
}

/// The status the core gives a refusal of `reason` (its `RejectionDetail::http_status`, through
/// the layer).
fn assert_refused(reply: &Reply, status: u16, reason: &str, bound: &str) {
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (status, refusal(reason, bound).as_str()),
        "{reply:?}"
    );
    assert_eq!(reply.content_type.as_deref(), Some("application/json"));
}

fn plain(config: Config) -> Arc<Bulkhead> {
    Arc::new(Bulkhead::new(config).unwrap())
}

// ----- the tests -------------------------------------------------------------------------------

/// A streaming response keeps its permit while it streams; the limit refuses others with a
/// 503 (no queueing with a queue timeout of zero, no `Retry-After`); the permit returns when
/// the body ends.
#[tokio::test]
async fn a_streaming_body_keeps_its_permit_until_it_ends() {
    let bh = plain(Config {
        max_concurrent: 1,
        ..Config::default()
    });
    let (router, mut handlers) = app(AdmissionLayer::new(bh.clone()).queue_timeout(Duration::ZERO));
    let server = serve(router).await;

    let mut conn = connect(server.addr).await;
    let res = conn.get("/stream", &[]).await;
    assert_eq!(res.status(), 200);
    let tx = handlers.streams.recv().await.unwrap();
    let mut body = res.into_body();
    assert_eq!(bh.stats().active, 1, "the head is out, the body is not");

    let refused = get(server.addr, "/", &[]).await;
    assert_refused(&refused, 503, "concurrency_limit", "limit");
    assert_eq!(refused.retry_after, None);

    tx.send(Bytes::from_static(b"a")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "a");
    assert_eq!(bh.stats().active, 1, "still streaming");

    drop(tx);
    assert!(body.frame().await.is_none(), "the body ended");
    wait_until("the permit is back", || bh.stats().active == 0).await;
    assert_eq!(get(server.addr, "/", &[]).await.body, "ok");
    let stats = bh.stats();
    assert_eq!(
        (
            stats.rejected_by_reason.get(Reason::ConcurrencyLimit),
            stats.active
        ),
        (1, 0)
    );
    drop(conn);
    server.stop().await;
}

/// A client that goes away releases what its request held: mid-body (the server drops the
/// body), before the response head (the server drops the handler's future), and while queued
/// (the waiter gives its place up).
#[tokio::test]
async fn a_client_that_disconnects_releases_its_permit() {
    let bh = plain(Config {
        max_concurrent: 1,
        ..Config::default()
    });
    let (router, mut handlers) = app(AdmissionLayer::new(bh.clone()).queue_timeout(WAIT * 3));
    let server = serve(router).await;

    // Mid-body.
    let mut conn = connect(server.addr).await;
    let res = conn.get("/stream", &[]).await;
    let tx = handlers.streams.recv().await.unwrap();
    assert_eq!(bh.stats().active, 1);
    drop(res);
    conn.drop_now();
    wait_until("the body is dropped", || tx.is_closed()).await;
    wait_until("the permit is back", || bh.stats().active == 0).await;

    // Before the response head, and a queued request behind it.
    let mut conn = connect(server.addr).await;
    let hang = tokio::spawn(async move {
        let _ = conn.get("/hang", &[]).await;
    });
    handlers.started.recv().await.unwrap();
    assert_eq!(bh.stats().active, 1);
    let mut queued = connect(server.addr).await;
    let waiting = tokio::spawn(async move {
        let _ = queued.get("/", &[]).await;
    });
    wait_until("the second request queues", || bh.stats().queued == 1).await;
    // The queued client leaves: its place is given up, the permit stays held.
    waiting.abort();
    let _ = waiting.await;
    wait_until("the waiter is gone", || bh.stats().queued == 0).await;
    assert_eq!(bh.stats().active, 1);
    // The hanging client leaves: the handler's future is dropped with the call.
    hang.abort();
    let _ = hang.await;
    wait_until("the permit is back", || bh.stats().active == 0).await;

    let stats = bh.stats();
    assert_eq!(stats.rejected_by_reason.get(Reason::Aborted), 1);
    assert_eq!(get(server.addr, "/", &[]).await.body, "ok");
    server.stop().await;
}

/// A queued request is served when the holder's body ends; with a short queue timeout it is
/// refused `timeout` instead.
#[tokio::test]
async fn a_queued_request_waits_for_the_permit_or_its_queue_timeout() {
    let bh = plain(Config {
        max_concurrent: 1,
        ..Config::default()
    });
    let (router, mut handlers) = app(AdmissionLayer::new(bh.clone()).queue_timeout(WAIT * 3));
    let server = serve(router).await;

    let mut conn = connect(server.addr).await;
    let res = conn.get("/stream", &[]).await;
    let tx = handlers.streams.recv().await.unwrap();
    let addr = server.addr;
    let waiting = tokio::spawn(async move { get(addr, "/", &[]).await });
    wait_until("the second request queues", || bh.stats().queued == 1).await;
    drop(tx);
    res.into_body().collect().await.unwrap();
    let served = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!((served.status, served.body.as_str()), (200, "ok"));
    conn.drop_now();
    server.stop().await;

    let (router, mut handlers) =
        app(AdmissionLayer::new(bh.clone()).queue_timeout(Duration::from_millis(50)));
    let server = serve(router).await;
    let mut conn = connect(server.addr).await;
    let res = conn.get("/stream", &[]).await;
    let tx = handlers.streams.recv().await.unwrap();
    let refused = get(server.addr, "/", &[]).await;
    assert_refused(&refused, 503, "timeout", "deadline");
    assert_eq!(refused.retry_after, None);
    drop((tx, res));
    conn.drop_now();
    wait_until("the permit is back", || bh.stats().active == 0).await;
    server.stop().await;
}

/// Under an overload signal over its threshold, a non-critical class is shed at once (503,
/// bound `overload`, no `Retry-After`) while a critical class passes while capacity is left;
/// under the threshold both pass.
#[tokio::test]
async fn overload_sheds_non_critical_classes_and_lets_critical_ones_through() {
    let classes = [
        ClassSpec {
            priority: 0,
            ..ClassSpec::DEFAULT
        },
        ClassSpec {
            priority: 5,
            ..ClassSpec::DEFAULT
        },
    ];
    let bh = Arc::new(
        Bulkhead::with_classes(
            Config {
                max_concurrent: 1,
                shed_cpu_threshold: 0.85,
                shed_lag_threshold: Duration::from_millis(50),
                critical_priority: 5,
                ..Config::default()
            },
            &ClassTable::new(&classes),
            ClockSource::default_for_host(),
        )
        .unwrap(),
    );
    let layer = AdmissionLayer::new(bh.clone())
        .classify(by_header("x-class", [("batch", 0), ("critical", 1)], 0))
        .queue_timeout(Duration::ZERO);
    let (router, mut handlers) = app(layer);
    let server = serve(router).await;
    let batch = [("x-class", "batch")];
    let critical = [("x-class", "critical")];

    bh.report_load(LoadSignal::Cpu(0.5));
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_millis(10)));
    assert_eq!(get(server.addr, "/", &batch).await.body, "ok");
    assert_eq!(get(server.addr, "/", &critical).await.body, "ok");

    bh.report_load(LoadSignal::Cpu(0.95));
    let shed = get(server.addr, "/", &batch).await;
    assert_refused(&shed, 503, "shed", "overload");
    assert_eq!(shed.retry_after, None);
    assert_eq!(get(server.addr, "/", &critical).await.body, "ok");

    // Critical traffic passes while capacity is left; then the limit applies as always.
    let mut conn = connect(server.addr).await;
    let res = conn.get("/stream", &critical).await;
    let tx = handlers.streams.recv().await.unwrap();
    let full = get(server.addr, "/", &critical).await;
    // (A classed bulkhead names the class's own bound: its ceiling, here the limit.)
    assert_refused(&full, 503, "concurrency_limit", "class");
    drop((tx, res));
    conn.drop_now();
    wait_until("the permit is back", || bh.stats().active == 0).await;

    // The lag signal sheds as the CPU one does; both under their thresholds, nothing is shed.
    bh.report_load(LoadSignal::Cpu(0.5));
    assert_eq!(get(server.addr, "/", &batch).await.body, "ok");
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_millis(80)));
    assert_refused(
        &get(server.addr, "/", &batch).await,
        503,
        "shed",
        "overload",
    );
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_millis(10)));
    assert_eq!(get(server.addr, "/", &batch).await.body, "ok");

    let stats = bh.stats();
    let load = stats.load.expect("a threshold is set");
    assert_eq!((load.shed_total, load.overloaded), (2, 0));
    assert_eq!(stats.rejected_by_reason.get(Reason::Shed), 2);
    server.stop().await;
}

/// A rate limit's refusal is a 429 with `Retry-After`: the time until the request would
/// conform, rounded up to whole seconds.
#[tokio::test]
async fn a_rate_limited_refusal_carries_retry_after() {
    let one = [ClassSpec::DEFAULT];
    let table = ClassTable {
        rates: Rates {
            requests: Some(Rate {
                amount: 1,
                per: Duration::from_secs(10),
                burst: 1,
            }),
            units: None,
        },
        ..ClassTable::new(&one)
    };
    let bh = Arc::new(
        Bulkhead::with_classes(
            Config {
                max_concurrent: 4,
                ..Config::default()
            },
            &table,
            ClockSource::default_for_host(),
        )
        .unwrap(),
    );
    let (router, _handlers) = app(AdmissionLayer::new(bh.clone()).queue_timeout(Duration::ZERO));
    let server = serve(router).await;
    assert_eq!(get(server.addr, "/", &[]).await.body, "ok");
    let limited = get(server.addr, "/", &[]).await;
    assert_refused(&limited, 429, "rate_limit", "rate");
    let after: u64 = limited.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=10).contains(&after), "Retry-After {after}");

    // A request that may queue but could not conform within its queue timeout is refused at
    // once, with the same estimate.
    server.stop().await;
    let (router, _handlers) =
        app(AdmissionLayer::new(bh.clone()).queue_timeout(Duration::from_millis(100)));
    let server = serve(router).await;
    let limited = get(server.addr, "/", &[]).await;
    assert_refused(&limited, 429, "rate_limit", "rate");
    assert!(limited.retry_after.is_some());
    assert_eq!(bh.stats().queued, 0);
    server.stop().await;
}

/// A request a rate holds back in the queue is granted when it conforms: the layer arms the
/// rate's tick (the core arms no timer).
#[tokio::test]
async fn a_request_queued_behind_a_rate_is_granted_by_the_tick() {
    let one = [ClassSpec::DEFAULT];
    let per = Duration::from_millis(300);
    let table = ClassTable {
        rates: Rates {
            requests: Some(Rate {
                amount: 1,
                per,
                burst: 1,
            }),
            units: None,
        },
        ..ClassTable::new(&one)
    };
    let bh = Arc::new(
        Bulkhead::with_classes(
            Config {
                max_concurrent: 4,
                ..Config::default()
            },
            &table,
            ClockSource::default_for_host(),
        )
        .unwrap(),
    );
    let (router, _handlers) = app(AdmissionLayer::new(bh.clone()).queue_timeout(WAIT * 3));
    let server = serve(router).await;
    let start = Instant::now();
    assert_eq!(get(server.addr, "/", &[]).await.body, "ok");
    let second = get(server.addr, "/", &[]).await;
    assert_eq!((second.status, second.body.as_str()), (200, "ok"));
    // Served once the rate allowed it, well before the queue timeout.
    let took = start.elapsed();
    assert!(took >= per - Duration::from_millis(50), "{took:?}");
    assert!(took < WAIT, "{took:?}");
    let stats = bh.stats();
    assert_eq!((stats.admitted_total, stats.queue_wait_count), (2, 1));
    server.stop().await;
}

/// The deadline header becomes the request's budget: zero is refused `timeout` at once, a
/// budget too small to wait for a grant and still do the work is refused `timeout` at once, a
/// queued request waits at most until its deadline, and the handler sees the deadline.
#[tokio::test]
async fn the_grpc_timeout_header_is_the_requests_budget() {
    let bh = plain(Config {
        max_concurrent: 1,
        min_service_time: Duration::from_millis(50),
        ..Config::default()
    });
    let layer = AdmissionLayer::new(bh.clone())
        .deadline_header("grpc-timeout")
        .queue_timeout(WAIT * 3);
    let (router, mut handlers) = app(layer);
    let server = serve(router).await;
    let timeout_status = 503;

    let zero = get(server.addr, "/deadline", &[("grpc-timeout", "0n")]).await;
    assert_refused(&zero, timeout_status, "timeout", "deadline");
    assert_eq!(zero.retry_after, None);
    let ok = get(server.addr, "/deadline", &[("grpc-timeout", "5S")]).await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "deadline"));
    for malformed in ["", "5", "1.5S", "soon"] {
        let none = get(server.addr, "/deadline", &[("grpc-timeout", malformed)]).await;
        assert_eq!(
            (none.status, none.body.as_str()),
            (200, "none"),
            "{malformed:?}"
        );
    }

    let mut conn = connect(server.addr).await;
    let res = conn.get("/stream", &[]).await;
    let tx = handlers.streams.recv().await.unwrap();
    // 20 ms left, 50 ms needed for the work: no wait is worth it.
    let tiny = get(server.addr, "/", &[("grpc-timeout", "20m")]).await;
    assert_refused(&tiny, timeout_status, "timeout", "deadline");
    // 300 ms left: queued (the queue timeout is far longer), refused when only the work's
    // 50 ms are left.
    let start = Instant::now();
    let short = get(server.addr, "/", &[("grpc-timeout", "300m")]).await;
    assert_refused(&short, timeout_status, "timeout", "deadline");
    assert!(start.elapsed() < WAIT, "{:?}", start.elapsed());
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
    drop((tx, res));
    conn.drop_now();
    wait_until("the permit is back", || bh.stats().active == 0).await;
    assert_eq!(bh.stats().rejected_by_reason.get(Reason::Timeout), 3);
    server.stop().await;
}

/// The call ends with the status's outcome: 5xx responses are failures (here they open a
/// breaker, whose refusal is a 503 like any other).
#[tokio::test]
async fn server_errors_are_failures_for_the_breaker() {
    let bh = plain(Config {
        max_concurrent: 4,
        resilience: Resilience {
            breaker: Some(BreakerConfig {
                failure_threshold: 2,
                ..BreakerConfig::DEFAULT
            }),
            ..Resilience::OFF
        },
        ..Config::default()
    });
    let (router, _handlers) = app(AdmissionLayer::new(bh.clone()));
    let server = serve(router).await;
    assert_eq!(get(server.addr, "/nowhere", &[]).await.status, 404);
    assert_eq!(get(server.addr, "/fail", &[]).await.status, 500);
    assert_eq!(get(server.addr, "/fail", &[]).await.status, 500);
    let open = get(server.addr, "/", &[]).await;
    assert_refused(&open, 503, "circuit_open", "breaker");
    server.stop().await;
}

/// A response without a body on the wire — a `HEAD` request's, a 204 — ends its call with the
/// head (the server never polls such a body): a HEAD 500 counts for the breaker and its permit
/// comes back (review: it ended `ignored` when the connection went, and never counted).
#[tokio::test]
async fn bodiless_responses_end_their_call_with_the_head() {
    let bh = plain(Config {
        max_concurrent: 4,
        resilience: Resilience {
            breaker: Some(BreakerConfig {
                failure_threshold: 1,
                ..BreakerConfig::DEFAULT
            }),
            ..Resilience::OFF
        },
        ..Config::default()
    });
    let (router, _handlers) = app(AdmissionLayer::new(bh.clone()));
    let server = serve(router).await;
    let mut conn = connect(server.addr).await;
    let req = http::Request::head("http://127.0.0.1/fail")
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(WAIT, conn.send.send_request(req))
        .await
        .expect("a response within WAIT")
        .unwrap();
    assert_eq!(res.status(), 500);
    // The connection stays open (keep-alive): only the head ended the call.
    wait_until("the HEAD's call ended", || bh.stats().active == 0).await;
    assert_eq!(
        bh.stats().circuit.map(|c| c.state),
        Some(hullguard_core::breaker::CircuitState::Open)
    );
    drop(res);
    conn.drop_now();
    server.stop().await;
}

/// A classifier that names a class the bulkhead does not have is a set-up bug: a 500, and the
/// handler never runs.
#[tokio::test]
async fn a_class_outside_the_table_is_a_server_error() {
    let bh = plain(Config::default());
    let (router, _handlers) = app(AdmissionLayer::new(bh.clone()).classify(|_| 7));
    let server = serve(router).await;
    let reply = get(server.addr, "/", &[]).await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (500, r#"{"reason":"invalid","argument":"class"}"#)
    );
    assert_eq!(bh.stats().admitted_total, 0);
    server.stop().await;
}

/// The lag probe reports how late the runtime ran its timer: the only worker blocked for
/// 500 ms reads as at least 250 ms of lag (over a 100 ms threshold: overloaded), the next
/// readings on a free worker are back under it, and a dropped probe reports 0 once, then
/// nothing more.
#[tokio::test(flavor = "current_thread")]
async fn the_lag_probe_reports_a_blocked_runtime() {
    let bh = plain(Config {
        shed_lag_threshold: Duration::from_millis(100),
        ..Config::default()
    });
    let interval = Duration::from_millis(250);
    let probe = spawn_lag_probe(bh.clone(), interval);
    // The probe has run and sleeps again: whenever its sleep began, it ends at most one
    // interval into the block, and it wakes after the block.
    tokio::time::sleep(interval + Duration::from_millis(50)).await;
    std::thread::sleep(Duration::from_millis(500));
    // The next reading is one interval away: look well within it.
    wait_until("the probe reports the block", || {
        bh.stats().load.unwrap().overloaded == 1
    })
    .await;
    let lag = bh.stats().load.unwrap().event_loop_lag_ns;
    assert!(lag >= 250_000_000, "lag {lag} ns");
    wait_until("a reading under the threshold", || {
        bh.stats().load.unwrap().overloaded == 0
    })
    .await;

    // Stopped over the threshold: the drop reports 0, so no stale overload outlives it.
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_secs(1)));
    assert_eq!(bh.stats().load.unwrap().overloaded, 1);
    drop(probe);
    let load = bh.stats().load.unwrap();
    assert_eq!((load.event_loop_lag_ns, load.overloaded), (0, 0));
    // And it reports nothing more.
    bh.report_load(LoadSignal::EventLoopLag(Duration::from_secs(1)));
    tokio::time::sleep(interval * 2).await;
    assert_eq!(bh.stats().load.unwrap().event_loop_lag_ns, 1_000_000_000);
}

/// The layer on a plain hyper server (no axum): `tower::Layer` over a `tower::Service`,
/// served through `hyper_util::service::TowerToHyperService`.
#[tokio::test]
async fn a_plain_hyper_server_works_too() {
    use http_body_util::Full;
    use hyper_util::service::TowerToHyperService;
    use tower::Layer;

    let bh = plain(Config {
        max_concurrent: 1,
        ..Config::default()
    });
    let svc = AdmissionLayer::new(bh.clone()).layer(tower::service_fn(
        |_req: http::Request<Incoming>| async {
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"hi"))))
        },
    ));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = TowerToHyperService::new(svc.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    let reply = get(addr, "/", &[]).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "hi"));
    wait_until("the permit is back", || bh.stats().active == 0).await;
    assert_eq!(bh.stats().admitted_total, 1);
    bh.close();
    assert_refused(&get(addr, "/", &[]).await, 503, "shutdown", "closed");
    server.abort();
    let _ = server.await;
}
