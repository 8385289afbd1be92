//! The isolation demo (docs/design.md §13): `make demo`.
//!
//! Two real HTTP/1.1 upstreams listen on loopback: a healthy origin that answers in about 5 ms
//! and a degraded origin that answers in 1–2 s. One client sends an open-loop schedule of
//! requests to both. Its total outbound capacity is a shared budget of [`BUDGET`] concurrent
//! requests across all origins: a `tokio::sync::Semaphore(BUDGET)` around the client, the
//! stand-in for a connection pool with a total connection cap (httpx
//! `Limits(max_connections=N)`, Node `maxTotalSockets`). A request that cannot get a slot of the
//! budget within [`POOL_TIMEOUT`] fails with `pool_timeout`, as a pooled client's would.
//!
//! The same schedule runs twice:
//! 1. **without hullguard**: the degraded origin's slow requests take every slot of the shared
//!    budget, and the healthy origin's requests queue behind them;
//! 2. **with hullguard**: a `Registry` with one bulkhead per upstream origin (keyed by the
//!    canonical `origin_key`, the degraded origin configured through `overrides`), acquired
//!    *before* the shared budget. The bulkheads' `max_concurrent` add up to the budget, so the degraded origin can
//!    only ever hold its own slice, and a healthy request never waits behind a degraded one.
//!
//! Then it prints the two runs side by side and each bulkhead's stats, and checks the two
//! properties the demo exists to show (exit code 1 if either fails): the healthy origin's p99
//! latency with hullguard is far below (at most a fifth of) its p99 without, and with hullguard
//! no healthy request waited behind a degraded one for the shared budget.
//!
//! Everything is bounded: only 127.0.0.1, a fixed number of requests per run, and every wait has
//! a deadline. The whole demo takes about 20 s.

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    error::Error,
    net::{Ipv4Addr, SocketAddr},
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hullguard_core::{Config, Reason, Registry, RegistryConfig, Stats, origin_key};
use hyper::{Request, Response, Uri, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};
use tokio::{net::TcpListener, sync::Semaphore, task::JoinSet, time::timeout};

/// The shared budget: concurrent requests the client may have in flight across all origins.
const BUDGET: usize = 8;
/// How long a request waits for a slot of the shared budget before it fails (`pool_timeout`).
const POOL_TIMEOUT: Duration = Duration::from_secs(2);
/// Upper bound on one HTTP exchange once a slot is held (a safety net; never reached here).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long each run keeps sending new requests (then it waits for the last ones to settle).
const LOAD: Duration = Duration::from_secs(8);
/// One healthy request every 10 ms: 100 requests/s, about 0.5 in flight on their own.
const HEALTHY_EVERY: Duration = Duration::from_millis(10);
/// One degraded request every 20 ms: 50 requests/s × 1.5 s = 75 in flight wanted, far above the
/// budget.
const DEGRADED_EVERY: Duration = Duration::from_millis(20);

/// The healthy origin's bulkhead: most of the budget, a deep queue.
fn healthy_config() -> Config {
    Config {
        max_concurrent: 6,
        max_queue: 100,
        queue_timeout: Duration::from_secs(1),
        ..Config::default()
    }
}

/// The degraded origin's bulkhead: a small slice of the budget, a short queue, a short wait.
fn degraded_config() -> Config {
    Config {
        max_concurrent: 2,
        max_queue: 4,
        queue_timeout: Duration::from_millis(100),
        ..Config::default()
    }
}

/// Healthy upstream: about 5 ms per response.
fn healthy_delay(_n: u64) -> Duration {
    Duration::from_millis(5)
}

/// Degraded upstream: 1.0–2.0 s per response (mean 1.5 s), spread deterministically.
fn degraded_delay(n: u64) -> Duration {
    Duration::from_millis(1_000 + (n * 379) % 1_000)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Healthy = 0,
    Degraded = 1,
}

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// 200 OK with its body read.
    Ok,
    /// No slot of the shared budget within [`POOL_TIMEOUT`].
    PoolTimeout,
    /// Rejected by the origin's bulkhead, with its reason.
    Rejected(&'static str),
    /// A non-200 status, a transport error or [`REQUEST_TIMEOUT`].
    HttpError,
}

impl Outcome {
    fn label(self) -> String {
        match self {
            Outcome::Ok => "ok".to_owned(),
            Outcome::PoolTimeout => "pool_timeout (shared budget)".to_owned(),
            Outcome::Rejected(reason) => format!("rejected by bulkhead: {reason}"),
            Outcome::HttpError => "http_error".to_owned(),
        }
    }
}

struct Record {
    origin: Origin,
    outcome: Outcome,
    latency: Duration,
}

/// Live counters, read by the once-a-second progress line.
#[derive(Default)]
struct Live {
    sent: [AtomicU64; 2],
    done: [AtomicU64; 2],
    ok: [AtomicU64; 2],
    /// Requests waiting for a slot of the shared budget right now.
    budget_waiting: AtomicUsize,
    /// Degraded requests holding a slot of the shared budget right now.
    degraded_in_budget: AtomicUsize,
    /// Healthy requests that found the budget full and had to wait for a slot.
    healthy_waited: AtomicU64,
    /// ... of which found at least one degraded request holding a slot.
    healthy_waited_behind_degraded: AtomicU64,
}

/// One bulkhead per upstream origin, in a registry keyed by the canonical origin key.
struct Bulkheads {
    registry: Registry,
    /// `origin_key` of the healthy and the degraded upstream.
    keys: [String; 2],
}

impl Bulkheads {
    fn new(uris: &[Uri; 2]) -> Result<Self, Box<dyn Error>> {
        let keys = [
            origin_key(&uris[0].to_string())?,
            origin_key(&uris[1].to_string())?,
        ];
        let registry = Registry::new(RegistryConfig {
            defaults: healthy_config(),
            overrides: HashMap::from([(keys[1].clone(), degraded_config())]),
            ..RegistryConfig::default()
        })?;
        Ok(Self { registry, keys })
    }

    fn key(&self, origin: Origin) -> &str {
        match origin {
            Origin::Healthy => &self.keys[0],
            Origin::Degraded => &self.keys[1],
        }
    }

    fn stats(&self, origin: Origin) -> Stats {
        self.registry.stats()[self.key(origin)]
    }
}

/// Everything one run shares between its request tasks.
struct Run {
    name: &'static str,
    client: Client<HttpConnector, Empty<Bytes>>,
    uris: [Uri; 2],
    /// The shared budget: the stand-in for the client's connection pool.
    budget: Semaphore,
    bulkheads: Option<Bulkheads>,
    live: Live,
}

/// Marks a degraded request as holding a slot of the shared budget while it lives.
struct HoldsSlot<'a>(&'a AtomicUsize);

impl<'a> HoldsSlot<'a> {
    fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for HoldsSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Starts one upstream on 127.0.0.1 (a free port); it answers every request with 200 after
/// `delay(n)`, `n` counting its requests. It serves until the process exits.
async fn start_upstream(delay: fn(u64) -> Duration) -> Result<SocketAddr, Box<dyn Error>> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let served = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of file descriptors or similar: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            // Best effort: small responses should not wait for Nagle.
            let _ = stream.set_nodelay(true);
            let served = Arc::clone(&served);
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<Incoming>| {
                    let pause = delay(served.fetch_add(1, Ordering::Relaxed));
                    async move {
                        tokio::time::sleep(pause).await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
                    }
                });
                // An error here (the client went away) ends this connection only.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// One HTTP/1.1 GET; `true` when it got a 200 and read the whole body.
async fn exchange(client: &Client<HttpConnector, Empty<Bytes>>, uri: &Uri) -> bool {
    let Ok(request) = Request::get(uri.clone()).body(Empty::<Bytes>::new()) else {
        return false;
    };
    match client.request(request).await {
        Ok(response) => {
            let ok = response.status().is_success();
            response.into_body().collect().await.is_ok() && ok
        }
        Err(_) => false,
    }
}

/// One request as the application makes it: the origin's bulkhead (with hullguard), then a
/// slot of the shared budget, then the HTTP exchange.
async fn guarded_call(run: &Run, origin: Origin) -> Outcome {
    // 1. The origin's own slice (with hullguard only), acquired BEFORE the shared budget so a
    //    request the bulkhead rejects never takes a slot of the budget. Declared first, so it
    //    is released last: the budget slot is back before the next request of this origin
    //    can be admitted.
    let _slice = match &run.bulkheads {
        None => None,
        Some(bulkheads) => {
            // The core arms no timer: the host's sleep future is the queue deadline.
            let key = bulkheads.key(origin);
            let deadline = bulkheads.registry.config_for(key).queue_timeout;
            match bulkheads
                .registry
                .acquire_timeout(key, 1, tokio::time::sleep(deadline))
                .await
            {
                Ok(permit) => Some(permit),
                Err(err) => {
                    return Outcome::Rejected(err.reason().map_or("invalid", Reason::as_str));
                }
            }
        }
    };

    // 2. A slot of the shared budget (the connection pool's cap).
    let live = &run.live;
    let _slot = match run.budget.try_acquire() {
        Ok(slot) => slot,
        Err(_) => {
            if origin == Origin::Healthy {
                live.healthy_waited.fetch_add(1, Ordering::Relaxed);
                if live.degraded_in_budget.load(Ordering::SeqCst) > 0 {
                    live.healthy_waited_behind_degraded
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            live.budget_waiting.fetch_add(1, Ordering::Relaxed);
            let slot = timeout(POOL_TIMEOUT, run.budget.acquire()).await;
            live.budget_waiting.fetch_sub(1, Ordering::Relaxed);
            match slot {
                Ok(Ok(slot)) => slot,
                // Timed out, or the semaphore was closed (never happens here).
                Ok(Err(_)) | Err(_) => return Outcome::PoolTimeout,
            }
        }
    };
    let _holds = (origin == Origin::Degraded).then(|| HoldsSlot::enter(&live.degraded_in_budget));

    // 3. The HTTP exchange.
    match timeout(
        REQUEST_TIMEOUT,
        exchange(&run.client, &run.uris[origin as usize]),
    )
    .await
    {
        Ok(true) => Outcome::Ok,
        Ok(false) | Err(_) => Outcome::HttpError,
    }
}

async fn request(run: Arc<Run>, origin: Origin) -> Record {
    let start = Instant::now();
    let outcome = guarded_call(&run, origin).await;
    let latency = start.elapsed();
    let i = origin as usize;
    if outcome == Outcome::Ok {
        run.live.ok[i].fetch_add(1, Ordering::Relaxed);
    }
    run.live.done[i].fetch_add(1, Ordering::Relaxed);
    Record {
        origin,
        outcome,
        latency,
    }
}

/// The open-loop schedule: (offset from the start, origin), in time order.
fn schedule() -> Vec<(Duration, Origin)> {
    let mut at = Vec::new();
    for (every, origin) in [
        (HEALTHY_EVERY, Origin::Healthy),
        (DEGRADED_EVERY, Origin::Degraded),
    ] {
        let mut t = Duration::ZERO;
        while t < LOAD {
            at.push((t, origin));
            t += every;
        }
    }
    at.sort_by_key(|&(t, origin)| (t, origin as u8));
    at
}

/// Prints one progress line a second until aborted.
async fn progress(run: Arc<Run>, start: tokio::time::Instant) {
    let live = &run.live;
    for second in 1u64.. {
        tokio::time::sleep_until(start + Duration::from_secs(second)).await;
        let get = |a: &[AtomicU64; 2], o: Origin| a[o as usize].load(Ordering::Relaxed);
        let (h, d) = (Origin::Healthy, Origin::Degraded);
        let phase = if Duration::from_secs(second) <= LOAD {
            "sending "
        } else {
            "settling"
        };
        println!(
            "  [{:<17}] {second:>2}s {phase} | healthy {:>3} sent {:>3} done {:>3} ok \
             | degraded {:>3} sent {:>3} done {:>3} ok | budget {}/{BUDGET} in use \
             ({} degraded), {:>3} waiting",
            run.name,
            get(&live.sent, h),
            get(&live.done, h),
            get(&live.ok, h),
            get(&live.sent, d),
            get(&live.done, d),
            get(&live.ok, d),
            BUDGET - run.budget.available_permits(),
            live.degraded_in_budget.load(Ordering::Relaxed),
            live.budget_waiting.load(Ordering::Relaxed),
        );
    }
}

/// Runs the whole schedule once and returns every request's record.
async fn run_schedule(run: Arc<Run>) -> Vec<Record> {
    let start = tokio::time::Instant::now();
    let ticker = tokio::spawn(progress(Arc::clone(&run), start));
    let mut tasks = JoinSet::new();
    for (offset, origin) in schedule() {
        tokio::time::sleep_until(start + offset).await;
        run.live.sent[origin as usize].fetch_add(1, Ordering::Relaxed);
        tasks.spawn(request(Arc::clone(&run), origin));
    }
    let records = tasks.join_all().await;
    ticker.abort();
    records
}

/// What the side-by-side table shows for one run.
struct Summary {
    healthy_total: usize,
    healthy_ok: usize,
    /// p50, p95, p99 over every healthy request, whatever its outcome (the time its caller
    /// waited).
    healthy_pct: [Duration; 3],
    healthy_waited: u64,
    healthy_waited_behind_degraded: u64,
    degraded_total: usize,
    degraded_outcomes: BTreeMap<Outcome, usize>,
    wall: Duration,
}

/// Nearest-rank percentile of a sorted, non-empty slice.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // p/100 × n rounded up: a rank in 1..=n.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summarize(run: &Run, records: &[Record], wall: Duration) -> Summary {
    let mut healthy: Vec<Duration> = records
        .iter()
        .filter(|r| r.origin == Origin::Healthy)
        .map(|r| r.latency)
        .collect();
    healthy.sort_unstable();
    let mut degraded_outcomes = BTreeMap::new();
    for r in records.iter().filter(|r| r.origin == Origin::Degraded) {
        *degraded_outcomes.entry(r.outcome).or_insert(0) += 1;
    }
    Summary {
        healthy_total: healthy.len(),
        healthy_ok: records
            .iter()
            .filter(|r| r.origin == Origin::Healthy && r.outcome == Outcome::Ok)
            .count(),
        healthy_pct: [50.0, 95.0, 99.0].map(|p| percentile(&healthy, p)),
        healthy_waited: run.live.healthy_waited.load(Ordering::Relaxed),
        healthy_waited_behind_degraded: run
            .live
            .healthy_waited_behind_degraded
            .load(Ordering::Relaxed),
        degraded_total: records.len() - healthy.len(),
        degraded_outcomes,
        wall,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn rate(ok: usize, total: usize) -> String {
    if total == 0 {
        return "-".to_owned();
    }
    let pct = ok as f64 * 100.0 / total as f64;
    format!("{pct:.1} % ({ok}/{total})")
}

fn print_table(without: &Summary, with: &Summary) {
    let row = |label: &str, a: String, b: String| println!("  {label:<44} {a:>22} {b:>22}");
    println!();
    println!("== side by side ==");
    row(
        "",
        "without hullguard".to_owned(),
        "with hullguard".to_owned(),
    );
    println!("  healthy origin (~5 ms)");
    row(
        "  requests",
        without.healthy_total.to_string(),
        with.healthy_total.to_string(),
    );
    row(
        "  success rate",
        rate(without.healthy_ok, without.healthy_total),
        rate(with.healthy_ok, with.healthy_total),
    );
    for (i, p) in ["p50", "p95", "p99"].iter().enumerate() {
        row(
            &format!("  {p} latency (all requests)"),
            ms(without.healthy_pct[i]),
            ms(with.healthy_pct[i]),
        );
    }
    row(
        "  waited for the shared budget",
        without.healthy_waited.to_string(),
        with.healthy_waited.to_string(),
    );
    row(
        "  ... behind a degraded request holding a slot",
        without.healthy_waited_behind_degraded.to_string(),
        with.healthy_waited_behind_degraded.to_string(),
    );
    println!("  degraded origin (1-2 s), outcomes");
    row(
        "  requests",
        without.degraded_total.to_string(),
        with.degraded_total.to_string(),
    );
    let mut outcomes: Vec<Outcome> = without
        .degraded_outcomes
        .keys()
        .chain(with.degraded_outcomes.keys())
        .copied()
        .collect();
    outcomes.sort_unstable();
    outcomes.dedup();
    for outcome in outcomes {
        let count = |s: &Summary| s.degraded_outcomes.get(&outcome).copied().unwrap_or(0);
        row(
            &format!("  {}", outcome.label()),
            count(without).to_string(),
            count(with).to_string(),
        );
    }
    row(
        "run time (sending + settling)",
        format!("{:.1} s", without.wall.as_secs_f64()),
        format!("{:.1} s", with.wall.as_secs_f64()),
    );
}

/// The two bulkheads' `stats()` side by side, one schema key a row (docs/design.md §8.1).
fn print_stats(healthy: &Stats, degraded: &Stats) {
    let row = |key: &str, a: String, b: String| println!("  {key:<44} {a:>22} {b:>22}");
    let rows = |key: &str, get: fn(&Stats) -> u64| {
        row(key, get(healthy).to_string(), get(degraded).to_string());
    };
    println!();
    println!("== bulkhead stats (with hullguard, after the run) ==");
    row(
        "",
        "healthy bulkhead".to_owned(),
        "degraded bulkhead".to_owned(),
    );
    rows("max_concurrent", |s| s.max_concurrent);
    rows("limit", |s| s.limit);
    rows("active", |s| s.active);
    rows("queued", |s| s.queued);
    rows("granted_unclaimed", |s| s.granted_unclaimed);
    row(
        "available",
        healthy.available.to_string(),
        degraded.available.to_string(),
    );
    rows("admitted_total", |s| s.admitted_total);
    for (reason, _) in healthy.rejected_by_reason.iter() {
        row(
            &format!("rejected_by_reason.{}", reason.as_str()),
            healthy.rejected_by_reason.get(reason).to_string(),
            degraded.rejected_by_reason.get(reason).to_string(),
        );
    }
    rows("released_twice_total", |s| s.released_twice_total);
    rows("leaked_total", |s| s.leaked_total);
    rows("ring_free", |s| s.ring_free);
    rows("queue_wait_count", |s| s.queue_wait_count);
    let wait = |s: &Stats, ns: u64| {
        if s.queue_wait_count == 0 {
            "-".to_owned()
        } else {
            ms(Duration::from_nanos(ns))
        }
    };
    row(
        "queue wait mean (queue_wait_sum_ns / count)",
        wait(
            healthy,
            healthy.queue_wait_sum_ns / healthy.queue_wait_count.max(1),
        ),
        wait(
            degraded,
            degraded.queue_wait_sum_ns / degraded.queue_wait_count.max(1),
        ),
    );
    row(
        "queue wait max (queue_wait_max_ns)",
        wait(healthy, healthy.queue_wait_max_ns),
        wait(degraded, degraded.queue_wait_max_ns),
    );
}

async fn run_once(
    name: &'static str,
    uris: &[Uri; 2],
    bulkheads: Option<Bulkheads>,
) -> (Arc<Run>, Summary) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let run = Arc::new(Run {
        name,
        // A fresh client per run, so no warm connection carries over from the previous run.
        client: Client::builder(TokioExecutor::new()).build(connector),
        uris: uris.clone(),
        budget: Semaphore::new(BUDGET),
        bulkheads,
        live: Live::default(),
    });
    println!();
    println!("== {name} ==");
    let started = Instant::now();
    let records = run_schedule(Arc::clone(&run)).await;
    let summary = summarize(&run, &records, started.elapsed());
    (run, summary)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    let healthy = start_upstream(healthy_delay).await?;
    let degraded = start_upstream(degraded_delay).await?;
    let uris: [Uri; 2] = [
        format!("http://{healthy}/").parse()?,
        format!("http://{degraded}/").parse()?,
    ];
    let (h, d) = (healthy_config(), degraded_config());
    println!("hullguard isolation demo");
    println!("  healthy upstream  http://{healthy}/  answers in ~5 ms");
    println!("  degraded upstream http://{degraded}/  answers in 1-2 s");
    println!(
        "  load: {:.0} s open loop, a healthy request every {} ms and a degraded one every {} ms",
        LOAD.as_secs_f64(),
        HEALTHY_EVERY.as_millis(),
        DEGRADED_EVERY.as_millis(),
    );
    println!(
        "  shared budget: tokio::sync::Semaphore({BUDGET}) around the client, the stand-in for a \
         connection pool capped at {BUDGET} connections across all origins; pool timeout {} s",
        POOL_TIMEOUT.as_secs(),
    );
    println!(
        "  with hullguard: a Registry with one bulkhead per origin key, acquired before the shared budget: \
         healthy max_concurrent={} max_queue={} queue_timeout={:?}; \
         degraded max_concurrent={} max_queue={} queue_timeout={:?}",
        h.max_concurrent,
        h.max_queue,
        h.queue_timeout,
        d.max_concurrent,
        d.max_queue,
        d.queue_timeout,
    );

    let (_, without) = run_once("without hullguard", &uris, None).await;
    let (run, with) = run_once("with hullguard", &uris, Some(Bulkheads::new(&uris)?)).await;

    print_table(&without, &with);
    if let Some(bulkheads) = &run.bulkheads {
        print_stats(
            &bulkheads.stats(Origin::Healthy),
            &bulkheads.stats(Origin::Degraded),
        );
    }

    println!();
    let p99_ok = with.healthy_pct[2] * 5 <= without.healthy_pct[2];
    // The strict form: with hullguard a healthy request never even finds the shared budget
    // full (the slices add up to the budget), so it cannot wait behind a degraded one.
    let isolated = with.healthy_waited == 0 && with.healthy_waited_behind_degraded == 0;
    println!(
        "check: healthy p99 with hullguard ({}) at most a fifth of without ({}): {}",
        ms(with.healthy_pct[2]),
        ms(without.healthy_pct[2]),
        if p99_ok { "PASS" } else { "FAIL" },
    );
    println!(
        "check: healthy requests that waited behind a degraded one for the shared budget, with \
         hullguard: {} (want 0; waited at all: {}): {}",
        with.healthy_waited_behind_degraded,
        with.healthy_waited,
        if isolated { "PASS" } else { "FAIL" },
    );
    Ok(if p99_ok && isolated {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
