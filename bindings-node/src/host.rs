//! `NativeHostBulkhead` (one limit per host, `hullguard_host::HostBulkhead`; Linux only) and
//! `NativeHostPermit`: marshalling only. Every admission, queue, timeout, reclaim and lease
//! decision is the crate's; the options are read by its table (`HostOptions::find` / `set` /
//! `validate`), the per-call arguments by the local bulkhead's parser (`options::acquire`), and
//! its rejections thrown as the local bulkhead's (`marshal::refused`: the same `BulkheadError`s).
//!
//! Asynchronous admission: `acquire()` polls the crate's `HostAcquire` future once; a pending
//! one stays in this isolate's table under an id, polled again when its waker fires. The crate
//! wakes it from any thread (its keeper thread: the doorbell, the deadline; another thread of
//! the process handing the local queue on), so the waker only schedules a call of the facade's
//! `onHostWake(id)` on the isolate's thread through a threadsafe function (coalesced: one
//! scheduled call per id at a time), and the facade then calls `hostPoll(id)`. `hostCancel(id)`
//! drops the future (the crate's cancellation: its place in the queue is given up). While any
//! acquire of the isolate is pending the threadsafe function is referenced — what grants it
//! comes from outside the process, as a socket's data does — and unreferenced when none is.
//! At the isolate's teardown (a worker thread ending) the pending futures are dropped, so no
//! ticket of a dead isolate holds the host's queue.
//!
//! Units: counts are numbers, durations ms. Thread-safety: the objects belong to their isolate;
//! the crate's handle is `Send + Sync` and its attachment is process-wide (every worker thread of
//! the process shares the process's slot; each has handles of its own).

use std::{
    cell::RefCell,
    collections::HashMap,
    future::Future,
    mem::ManuallyDrop,
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
    time::Duration,
};

use hullguard_core::{
    MAX_PERMITS, Reason, Request,
    config::{convert::count_from_f64, options::Kind},
};
use hullguard_host::{
    HostAcquire, HostBulkhead, HostError, HostOptions, HostPermit, HostStats, HostValue,
    LeaseError,
    options::{HostKind, node_name},
};
use napi::{
    Env, Error, Result, Status,
    bindgen_prelude::{Either, Function, Object, Unknown},
    threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode},
};
use napi_derive::napi;

use crate::{
    bulkhead::DrainReport,
    marshal::{ms, number, range_error, refused, string, thrown, type_error},
    options::{self, RequestCtx},
    stats,
};

// ----- errors ---------------------------------------------------------------------------------

/// Throws `e`: a rejection as the local bulkhead's (`BulkheadError`, or the `RangeError` of an
/// invalid weight / cost / class / observe), an option as a `RangeError` (the crate's message),
/// anything about the segment file as an `Error` with `code` `'HOST_SEGMENT'`, `kind` (`'io'`,
/// `'permission'`, `'incompatible'`, `'mismatch'`, `'no_slot'`, `'poisoned'`, `'removed'`,
/// `'in_use'`: the crate's `HostError::kind`), `path` and, for a failed system call, `errno`.
fn host_error(env: &Env, e: HostError) -> Error {
    match &e {
        HostError::Acquire(a) => return refused(env, a, None),
        HostError::Option { .. } => return range_error(env, &e),
        _ => {}
    }
    let (kind, path, errno) = (e.kind().unwrap_or("other"), e.path(), e.errno());
    let made = env.create_error(Error::from_reason(e.to_string()));
    let thrown_now = made.and_then(|mut err| {
        err.set("code", "HOST_SEGMENT")?;
        err.set("kind", kind)?;
        err.set("path", path.map(|p| p.to_string_lossy().into_owned()))?;
        err.set("errno", errno)?;
        env.throw(err)
    });
    thrown(thrown_now)
}

// ----- options --------------------------------------------------------------------------------

/// A count option's value: a safe integer ≥ 0 (the crate checks its range).
fn int(env: &Env, v: Unknown, key: &str) -> Result<u64> {
    let what = format!("{key} must be an integer");
    let x = number(env, v, &what)?;
    count_from_f64(
        x,
        Kind::Count {
            min: 0,
            max: u64::MAX,
        },
    )
    .map_err(|_| range_error(env, format_args!("{what}, got {x}")))
}

/// A duration option's value: ms, a number ≥ 0 (`Infinity` is longer than any range: the crate
/// refuses it naming the range).
fn millis(env: &Env, v: Unknown, key: &str) -> Result<Duration> {
    let what = format!("{key} must be a duration in ms (a number >= 0)");
    let x = number(env, v, &what)?;
    if x == f64::INFINITY {
        return Ok(Duration::MAX);
    }
    Duration::try_from_secs_f64(x / 1000.0)
        .map_err(|_| range_error(env, format_args!("{what}, got {x}")))
}

/// `new HostBulkhead(name, options)`'s options, by the crate's table: each key looked up with
/// `HostOptions::find` (Node's spelling `maxConcurrent`, `leaseTtlMs` …), its value converted by
/// the row's kind and set with `HostOptions::set` (which range-checks it), then `validate()`.
/// An unknown key, or a local bulkhead's option a host bulkhead does not take (`classes`,
/// `resilience`, …), is a `TypeError` with the crate's message naming it; a value of the wrong
/// type a `TypeError`; out of range a `RangeError`. `undefined` / `null`: not given.
fn host_options(env: &Env, opts: Unknown) -> Result<HostOptions> {
    let mut o = HostOptions {
        library: "node",
        ..HostOptions::default()
    };
    for (key, v) in options::entries(env, opts, "options must be an object")? {
        let Some(row) = HostOptions::find(&key) else {
            // The crate's refusal by name (unknown, or a local bulkhead's option), whatever
            // the value (`null` too, as the local bulkhead's options).
            let refusal = o.set(&key, HostValue::Int(0)).err();
            let message =
                refusal.map_or_else(|| format!("unknown option {key:?}"), |e| e.to_string());
            return Err(type_error(env, message));
        };
        // `find` also knows the snake_case names, which Node must not take: `queue_timeout: 30`
        // would be read as 30 ms, and `{maxConcurrent, max_concurrent}` would silently pick one.
        let spelled = node_name(row);
        if spelled != key {
            return Err(type_error(
                env,
                format_args!("option {key:?} is spelled {spelled:?} in Node (durations in ms)"),
            ));
        }
        let Some(v) = options::not_null(v)? else {
            continue;
        };
        let text;
        let value = match row.kind {
            HostKind::Int { .. } => HostValue::Int(int(env, v, &key)?),
            HostKind::Duration { .. } => HostValue::Duration(millis(env, v, &key)?),
            HostKind::Path | HostKind::Choice(_) => {
                text = string(env, v, &key)?;
                HostValue::Str(&text)
            }
        };
        o.set(&key, value).map_err(|e| range_error(env, e))?;
    }
    o.validate().map_err(|e| range_error(env, e))?;
    Ok(o)
}

/// How per-call arguments are read: the local bulkhead's parser, on the `performance.now()`
/// scale; the weight's ceiling is the segment's (the crate refuses a weight above it, with the
/// local bulkhead's message), so the parser takes any safe integer here.
fn ctx(ambient: Option<f64>) -> RequestCtx<'static> {
    RequestCtx {
        max_concurrent: MAX_PERMITS,
        names: &[],
        virtual_clock: false,
        ambient_ms: options::ambient(ambient),
    }
}

// ----- the isolate's pending acquires ---------------------------------------------------------

/// The facade's `onHostWake(id)`, callable from any thread; weak (unreferenced) when made.
type OnWake = ThreadsafeFunction<u32, (), u32, Status, false, true>;

/// One pending `acquire()`: the crate's future and the waker it is polled with.
struct Pending {
    fut: HostAcquire,
    waker: Waker,
    wake: Arc<WakeId>,
}

/// Schedules `onHostWake(id)` on the isolate's thread, once until the next poll.
struct WakeId {
    id: u32,
    scheduled: AtomicBool,
    on_wake: Arc<OnWake>,
}

impl Wake for WakeId {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            // Closing (the isolate is ending): nobody is left to poll.
            let _ = self
                .on_wake
                .call(self.id, ThreadsafeFunctionCallMode::NonBlocking);
        }
    }
}

struct Isolate {
    /// Never dropped here (the environment finalises it): a drop at thread exit would touch an
    /// environment that is gone.
    on_wake: ManuallyDrop<Arc<OnWake>>,
    pending: HashMap<u32, Pending>,
    last_id: u32,
    /// Whether the threadsafe function is referenced (some acquire is pending).
    referenced: bool,
}

thread_local! {
    static ISOLATE: RefCell<Option<Isolate>> = const { RefCell::new(None) };
}

/// Registers the facade's `onHostWake(id)` with this isolate, once, at load (see the header).
/// A facade loaded again in the same isolate registers its own: acquires started from then on
/// report to it, those already pending still to the one that started them.
#[napi]
pub fn host_init(env: Env, on_wake: Function<u32, ()>) -> Result<()> {
    let tsfn = on_wake
        .build_threadsafe_function::<u32>()
        .weak::<true>()
        .build()?;
    let on_wake = ManuallyDrop::new(Arc::new(tsfn));
    let again = ISOLATE.with(|i| {
        let mut i = i.borrow_mut();
        match i.as_mut() {
            Some(i) => {
                let old = std::mem::replace(&mut i.on_wake, on_wake);
                let was = std::mem::replace(&mut i.referenced, false);
                Some((was && !old.aborted()).then(|| old.raw()))
            }
            None => {
                *i = Some(Isolate {
                    on_wake,
                    pending: HashMap::new(),
                    last_id: 0,
                    referenced: false,
                });
                None
            }
        }
    });
    match again {
        Some(old) => {
            if let Some(raw) = old {
                // SAFETY: the previous facade's live threadsafe function (not aborted), on this
                // isolate's thread with its env; it is never released, only unreferenced here.
                napi::check_status!(unsafe {
                    napi::sys::napi_unref_threadsafe_function(env.raw(), raw)
                })?;
            }
            sync_ref(&env)
        }
        // The isolate ends (a worker thread exits): its pending acquires give their places up.
        None => env
            .add_env_cleanup_hook((), |()| {
                let pending = ISOLATE.with(|i| {
                    i.borrow_mut()
                        .as_mut()
                        .map(|i| std::mem::take(&mut i.pending))
                });
                drop(pending);
            })
            .map(drop),
    }
}

/// References the threadsafe function while an acquire is pending, and only then.
fn sync_ref(env: &Env) -> Result<()> {
    let change = ISOLATE.with(|i| {
        let mut i = i.borrow_mut();
        let i = i.as_mut()?;
        let want = !i.pending.is_empty();
        (want != i.referenced && !i.on_wake.aborted()).then(|| {
            i.referenced = want;
            (want, i.on_wake.raw())
        })
    });
    let Some((want, raw)) = change else {
        return Ok(());
    };
    // SAFETY: `raw` is this isolate's live threadsafe function (not aborted: checked above),
    // called on its own thread with its own env.
    let status = unsafe {
        if want {
            napi::sys::napi_ref_threadsafe_function(env.raw(), raw)
        } else {
            napi::sys::napi_unref_threadsafe_function(env.raw(), raw)
        }
    };
    napi::check_status!(status)
}

/// The crate's future polled once with its waker.
fn poll_once(p: &mut Pending) -> Poll<std::result::Result<HostPermit, HostError>> {
    p.wake.scheduled.store(false, Ordering::Release);
    Pin::new(&mut p.fut).poll(&mut Context::from_waker(&p.waker))
}

/// Starts `fut`: the permit or the rejection when it settles at once, else its id.
fn start(env: &Env, fut: HostAcquire) -> Result<Either<NativeHostPermit, u32>> {
    let made = ISOLATE.with(|i| {
        let mut i = i.borrow_mut();
        let i = i.as_mut()?;
        i.last_id = i.last_id.wrapping_add(1);
        Some((i.last_id, Arc::clone(&i.on_wake)))
    });
    let (id, on_wake) =
        made.ok_or_else(|| Error::from_reason("hullguard: native.hostInit() was not called"))?;
    let wake = Arc::new(WakeId {
        id,
        scheduled: AtomicBool::new(false),
        on_wake,
    });
    let mut p = Pending {
        fut,
        waker: Waker::from(wake.clone()),
        wake,
    };
    match poll_once(&mut p) {
        Poll::Ready(r) => settled(env, r).map(Either::A),
        Poll::Pending => {
            ISOLATE.with(|i| i.borrow_mut().as_mut().map(|i| i.pending.insert(id, p)));
            sync_ref(env)?;
            Ok(Either::B(id))
        }
    }
}

fn settled(env: &Env, r: std::result::Result<HostPermit, HostError>) -> Result<NativeHostPermit> {
    r.map(NativeHostPermit::of).map_err(|e| host_error(env, e))
}

/// A pending acquire after its id was reported (`onHostWake`): the permit, `null` while it
/// waits (or for an id that is no longer pending); throws its rejection (`BulkheadError`:
/// `timeout`, `shutdown`, …).
#[napi]
pub fn host_poll(env: &Env, id: u32) -> Result<Option<NativeHostPermit>> {
    // Out of the table while it is polled (what the poll runs must not find it borrowed).
    let taken = ISOLATE.with(|i| i.borrow_mut().as_mut().and_then(|i| i.pending.remove(&id)));
    let Some(mut p) = taken else {
        return Ok(None);
    };
    match poll_once(&mut p) {
        Poll::Pending => {
            ISOLATE.with(|i| i.borrow_mut().as_mut().map(|i| i.pending.insert(id, p)));
            Ok(None)
        }
        Poll::Ready(r) => {
            drop(p);
            sync_ref(env)?;
            settled(env, r).map(Some)
        }
    }
}

/// Cancels a pending acquire (its signal aborted): the future is dropped, its place given up
/// (an id that already settled is left alone).
#[napi]
pub fn host_cancel(env: &Env, id: u32) -> Result<()> {
    let taken = ISOLATE.with(|i| i.borrow_mut().as_mut().and_then(|i| i.pending.remove(&id)));
    drop(taken);
    sync_ref(env)
}

/// How many acquires of this isolate are pending (for tests).
#[napi]
pub fn host_pending() -> u32 {
    ISOLATE.with(|i| i.borrow().as_ref().map_or(0, |i| i.pending.len() as u32))
}

// ----- the bulkhead ---------------------------------------------------------------------------

/// One handle on a host bulkhead (its own per isolate; the attachment is the process's).
#[napi]
pub struct NativeHostBulkhead {
    bh: HostBulkhead,
}

#[napi]
impl NativeHostBulkhead {
    /// `new HostBulkhead(name, options)`: opens (creating if absent) the segment and attaches
    /// this process. Throws `TypeError` / `RangeError` for the name or an option, an `Error`
    /// with `code` `'HOST_SEGMENT'` for the file (permission, incompatible, mismatch, no slot).
    #[napi(constructor)]
    pub fn new(env: Env, name: Unknown, options: Unknown) -> Result<Self> {
        let name = string(&env, name, "name")?;
        let o = host_options(&env, options)?;
        let bh = HostBulkhead::open(&name, o).map_err(|e| host_error(&env, e))?;
        Ok(NativeHostBulkhead { bh })
    }

    /// `tryAcquire(options)` (`{weight, cost, deadline}`; `ambient`: the ambient deadline, ms):
    /// the permit, or `null` when not admitted at once (`concurrency_limit`); any other refusal
    /// throws its `BulkheadError` (`budget_limit`, `timeout`, `shutdown`).
    #[napi]
    pub fn try_take(
        &self,
        env: &Env,
        options: Unknown,
        ambient: Option<f64>,
    ) -> Result<Option<NativeHostPermit>> {
        let request = options::try_acquire(env, options, &ctx(ambient))?;
        // A request that does not queue: decided at once, never blocks.
        match self.bh.admit_blocking(&request) {
            Ok(p) => Ok(Some(NativeHostPermit::of(p))),
            Err(e) if e.reason() == Some(Reason::ConcurrencyLimit) => Ok(None),
            Err(e) => Err(host_error(env, e)),
        }
    }

    /// `acquire(options)` (`{weight, cost, queueTimeoutMs, deadline, signal}`; `signal` is the
    /// facade's): the permit when admitted at once, else the id of the pending acquire (see
    /// `hostPoll`). Throws the rejection, or a `TypeError` / `RangeError` for an argument.
    #[napi]
    pub fn acquire(
        &self,
        env: &Env,
        options: Unknown,
        ambient: Option<f64>,
    ) -> Result<Either<NativeHostPermit, u32>> {
        let request: Request = options::acquire(env, options, &ctx(ambient), false)?;
        start(env, self.bh.acquire(request))
    }

    /// Checks `acquire()` options without admitting (a call whose signal was already aborted).
    #[napi]
    pub fn check_acquire(&self, env: &Env, options: Unknown) -> Result<()> {
        options::acquire(env, options, &ctx(None), false).map(drop)
    }

    /// The host's figures in the local bulkhead's stats object (the same walk of the core's
    /// schema), plus the ledger's own: `inFlight`, `attached`, `slots`, `reclaimedDeadTotal`,
    /// `reclaimedExpiredTotal`, `reclaimedPermitsTotal`, `staleReleasesTotal`,
    /// `foreignReleasesTotal`, `localInFlight`, `localActive`, `localQueued`, `slot`, `path`.
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn stats<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let s: HostStats = self.bh.stats();
        let mut out = stats::object(env, &s.stats)?;
        for (key, value) in [
            ("inFlight", s.in_flight),
            ("attached", s.attached),
            ("slots", s.slots),
            ("reclaimedDeadTotal", s.reclaimed_dead_total),
            ("reclaimedExpiredTotal", s.reclaimed_expired_total),
            ("reclaimedPermitsTotal", s.reclaimed_permits_total),
            ("staleReleasesTotal", s.stale_releases_total),
            ("foreignReleasesTotal", s.foreign_releases_total),
            ("localInFlight", s.local_in_flight),
            ("localActive", s.local_active),
            ("localQueued", s.local_queued),
            ("slot", s.slot),
        ] {
            out.set(key, value as f64)?;
        }
        out.set("path", s.path.to_string_lossy().as_ref())?;
        Ok(out)
    }

    /// The host's samples of the core's metric table (docs/design.md §8.3) for
    /// `hullguard/metrics`: the host's figures, the same from any process, counting live holders
    /// only (dead ones are reaped first: C37).
    #[napi]
    pub fn metric_samples(&self) -> Vec<crate::metrics::MetricSample> {
        let s = self.bh.stats();
        crate::metrics::stats_samples(&s.stats, &[], &|c| c.to_string())
    }

    /// Probes every other process now and reclaims the dead: the slots reclaimed or expired.
    #[napi]
    pub fn reap(&self) -> u32 {
        self.bh.reap() as u32
    }

    /// Closes this handle: its new requests are refused `shutdown`, its waiters rejected
    /// `shutdown`; held permits stay valid. Other handles and processes are not affected.
    #[napi]
    pub fn close(&self) {
        self.bh.close();
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.bh.is_closed()
    }

    /// Whether this process holds no permit and has no waiter now.
    #[napi]
    pub fn drain_now(&self) -> bool {
        self.bh.drain_blocking(Duration::ZERO)
    }

    /// What `drain()` reports: `drained`, and this process's permits held and waiters now.
    #[napi]
    pub fn drain_report(&self, drained: bool) -> DrainReport {
        let s = self.bh.stats();
        DrainReport {
            drained,
            active: s.local_active as f64,
            queued: s.local_queued as f64,
        }
    }

    /// `drain()`'s options (`{timeoutMs}`) as ms (`Infinity`: until idle).
    #[napi]
    pub fn drain_timeout_ms(&self, env: &Env, options: Unknown) -> Result<f64> {
        options::drain(env, options).map(ms)
    }

    #[napi(getter)]
    pub fn name(&self) -> String {
        self.bh.name().to_owned()
    }

    /// The segment file.
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.bh.path().to_string_lossy().into_owned()
    }

    /// This process's slot.
    #[napi(getter)]
    pub fn slot(&self) -> u32 {
        self.bh.slot() as u32
    }
}

// ----- permits --------------------------------------------------------------------------------

/// Why a release did not count: `code` (`'BULKHEAD_STALE_LEASE'`, `'BULKHEAD_FOREIGN_LEASE'`,
/// `'BULKHEAD_ALREADY_RELEASED'`) and the crate's message.
#[napi(object)]
pub struct LeaseRefusal {
    pub code: String,
    pub message: String,
}

/// Permits held on a host bulkhead: released by `release()`, or when collected.
#[napi]
pub struct NativeHostPermit {
    permit: HostPermit,
}

impl NativeHostPermit {
    fn of(permit: HostPermit) -> Self {
        NativeHostPermit { permit }
    }
}

#[napi]
impl NativeHostPermit {
    /// Releases: `null` when it did, else why not (see `LeaseRefusal`).
    #[napi]
    pub fn release(&mut self) -> Option<LeaseRefusal> {
        self.permit
            .release_in_place()
            .err()
            .map(|e: LeaseError| LeaseRefusal {
                code: e.code().to_owned(),
                message: e.to_string(),
            })
    }

    /// Permits held (0 once released).
    #[napi(getter)]
    pub fn weight(&self) -> f64 {
        if self.permit.is_released() {
            0.0
        } else {
            self.permit.weight() as f64
        }
    }

    /// Budget units held (0 once released).
    #[napi(getter)]
    pub fn cost(&self) -> f64 {
        if self.permit.is_released() {
            0.0
        } else {
            self.permit.cost() as f64
        }
    }

    #[napi(getter)]
    pub fn released(&self) -> bool {
        self.permit.is_released()
    }
}

// ----- without attaching ----------------------------------------------------------------------

/// `reapHost(name, {dir})`: reclaims the slots of the dead processes of segment `name` without
/// attaching (a `cluster` primary's `exit` handler); the slots reclaimed. Throws like the
/// constructor (`HOST_SEGMENT` when there is no such segment).
#[napi(ts_args_type = "name: string, options?: { dir?: string | null }")]
pub fn reap_host(env: &Env, name: Unknown, options: Unknown) -> Result<u32> {
    let name = string(env, name, "name")?;
    let mut dir = HostOptions::default().dir;
    for (key, v) in options::entries(env, options, "options must be an object")? {
        let Some(v) = options::not_null(v)? else {
            continue;
        };
        if key != "dir" {
            return Err(type_error(
                env,
                format_args!("unknown option {key:?} (known: \"dir\")"),
            ));
        }
        dir = PathBuf::from(string(env, v, "dir")?);
    }
    hullguard_host::inspect::reap(&dir, &name)
        .map(|n| n as u32)
        .map_err(|e| host_error(env, e))
}

/// What `hullguard host …` printed, and its exit status.
#[napi(object)]
pub struct HostCliOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The `hullguard host ls | show | reap | rm` command (`bin/hullguard.js`): `args` without the
/// program name (`['host', 'ls']`).
#[napi]
pub fn host_cli(args: Vec<String>) -> HostCliOutput {
    let out = hullguard_host::cli::run(&args);
    HostCliOutput {
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
    }
}
