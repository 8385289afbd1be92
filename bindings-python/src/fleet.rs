//! `FleetBulkhead`: one limit shared by every process that opens the same pool on one Redis
//! (docs/design.md §16), the Python face of `hullguard_fleet::FleetCore`. Marshalling only:
//! the options go through the fleet crate's table (`FleetConfig::set`; `budget` too: a second
//! leased dimension), what stays local — the class table and the observer of `events=True` —
//! is read by the local `Bulkhead`'s own parsers (`gateway::class_table`,
//! `PyObserver::from_args`) and handed to `FleetCore::with_local`, the leases are the crate's,
//! admissions are the local `Bulkhead` pyclass's over `FleetCore::bulkhead()`'s `Arc` (nothing
//! of admission is re-implemented here), and the I/O is the user's redis-py client, driven
//! from Python (`python/hullguard/fleet.py`).
//!
//! Two classes:
//!
//! * `_FleetCore` — what the Python driver loop drives: `step` / `complete` / `fail` / `wait`
//!   (the crate's driver steps, commands as redis-py `execute_command` arguments), `arm` (the
//!   asyncio driver's park: the demand bell wakes it through `loop.call_soon_threadsafe`),
//!   `close`, the releases (one per lease), `apply_limits` and `pool_stats` commands and their
//!   replies. The driver holds this object, never the public one, so dropping a fleet
//!   bulkhead closes it.
//! * `_FleetBulkhead` — the public object's native base (`hullguard.FleetBulkhead` subclasses
//!   it in Python to add the driver): the admission methods, forwarded natively to the local
//!   `Bulkhead` (no Python frame in between: admissions stay at a local bulkhead's speed), the
//!   events (`on` / `off` / `events()`), and `stats()` with the `lease` and `budget_lease`
//!   sections.
//!
//! Every call into `FleetCore` that takes its lease lock (`step`, `complete`, `fail`, `stats`,
//! the release and limit replies) is made with the interpreter released: a demand wake-up or a
//! grant to a queued waiter may run inside it and attach to the interpreter, so no thread may
//! hold the interpreter while it waits for that lock.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Wake, Waker},
    time::Duration,
};

use hullguard_core::LimitsSnapshot;
use hullguard_core::{config::class_options::ClassTableBuilder, event::SharedObserver};
use hullguard_fleet::{
    Dimension, FleetConfig, FleetCore, FleetError, FleetStats, LeaseStats, Local, PoolName,
    RawReply, Step, cli,
    options::{FLEET_OPTIONS, FleetKind, FleetOption, FleetValue, NOT_FLEET_WIDE, node_name},
    protocol::{FN_STATS, FN_VERSION, Field, PoolStats},
    script::{LIB_VERSION, LIBRARY, eval_source},
};
use pyo3::{
    exceptions::{PyRuntimeError, PyTypeError, PyValueError},
    intern,
    prelude::*,
    types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple},
};

use crate::{
    awaitable::{AcquireContext, DrainAwaitable},
    bulkhead::{Bulkhead, seconds},
    errors::acquire_err,
    events::PyObserver,
    gateway,
    options::{self, config_err, count_arg, named_timeout_arg, type_name},
    permit::Permit,
    stats::stats_dict,
};

/// The longest single park (a spurious wake-up only steps again): keeps `call_later` and the
/// condition variable's timeout finite when the lease manager waits "forever" (closed, or a
/// request out).
const MAX_PARK: Duration = Duration::from_secs(3600);

/// Registers the fleet classes and constants on `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FleetDriver>()?;
    m.add_class::<FleetBulkhead>()?;
    m.add_function(wrap_pyfunction!(fleet_cli, m)?)?;
    m.add("_FLEET_LIBRARY", LIBRARY)?;
    m.add("_FLEET_LIB_VERSION", LIB_VERSION)?;
    m.add("_FLEET_EVAL_SOURCE", eval_source())?;
    let names: Vec<&str> = FLEET_OPTIONS.iter().map(|o| o.name).collect();
    m.add("FLEET_OPTIONS", names)?;
    Ok(())
}

// ----- errors ----------------------------------------------------------------------------------

/// A `FleetError` as Python raises it: a bad option, name or limit as `ValueError` (the
/// crate's message names it and shows the range), a rejection as the local bulkhead's
/// exception, an unexpected reply as `RuntimeError`.
fn fleet_err(py: Python<'_>, e: FleetError) -> PyErr {
    match e {
        FleetError::Option { .. } | FleetError::Name(_) => PyValueError::new_err(e.to_string()),
        // The local core's words, spelled as the local `Bulkhead`'s (a class table it refuses).
        FleetError::Config(c) => config_err(c),
        FleetError::Acquire(a) => acquire_err(py, &a, None),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// A request's own observe mode would let it through past the leased block (decided and
/// counted, not enforced): a fleet bulkhead refuses it by name, as it refuses the option.
fn no_observe(observe: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let Some(v) = observe.filter(|v| !v.is_none()) else {
        return Ok(());
    };
    if v.cast::<PyString>()
        .is_ok_and(|s| s.to_cow().is_ok_and(|c| c == "off"))
    {
        return Ok(());
    }
    let why = NOT_FLEET_WIDE
        .iter()
        .find(|(n, _)| *n == "observe")
        .map_or("observe mode is not fleet-wide", |(_, why)| why);
    Err(PyValueError::new_err(format!(
        "observe: not supported by a fleet bulkhead: {why} (a request in observe mode would \
         pass the leased block)"
    )))
}

// ----- options ---------------------------------------------------------------------------------

/// An option's range in Python's units (durations in seconds), from the crate's table.
fn range_text(opt: &FleetOption) -> String {
    match opt.kind {
        FleetKind::Int { min, max } => format!("an integer in {min} ..= {max}"),
        FleetKind::Duration { min, max } => format!(
            "a number of seconds in {} ..= {}",
            min.as_secs_f64(),
            max.as_secs_f64()
        ),
        FleetKind::Text => "a str".to_owned(),
    }
}

fn bad_value(opt: &FleetOption, v: &Bound<'_, PyAny>) -> PyErr {
    let got = v.repr().map_or_else(|_| "?".into(), |r| r.to_string());
    PyValueError::new_err(format!(
        "FleetBulkhead(): {} must be {}, got {got}",
        opt.name,
        range_text(opt)
    ))
}

fn wrong_type(opt: &FleetOption, v: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "FleetBulkhead(): {} must be {}, not {}",
        opt.name,
        range_text(opt),
        type_name(v)
    ))
}

/// Sets `opt` on `config` from the Python value `v`, by the crate's table (`FleetConfig::set`
/// range-checks it).
fn set_option(config: &mut FleetConfig, opt: &FleetOption, v: &Bound<'_, PyAny>) -> PyResult<()> {
    let is_int = v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>();
    let text;
    let value = match opt.kind {
        FleetKind::Int { .. } => {
            if !is_int {
                return Err(wrong_type(opt, v));
            }
            // Negative or beyond u64: out of range either way.
            let n: u64 = v.extract().map_err(|_| bad_value(opt, v))?;
            FleetValue::Int(n)
        }
        FleetKind::Duration { .. } => {
            if !is_int && !v.is_instance_of::<PyFloat>() {
                return Err(wrong_type(opt, v));
            }
            let secs: f64 = v.extract().unwrap_or(f64::INFINITY);
            let d = Duration::try_from_secs_f64(secs).map_err(|_| bad_value(opt, v))?;
            FleetValue::Duration(d)
        }
        FleetKind::Text => {
            text = v
                .cast::<PyString>()
                .map_err(|_| wrong_type(opt, v))?
                .to_string();
            FleetValue::Str(&text)
        }
    };
    config.set(opt.name, value).map_err(|e| match opt.kind {
        // A pool name or holder id: the crate's message says what is allowed.
        FleetKind::Text => PyValueError::new_err(format!("FleetBulkhead(): {e}")),
        _ => bad_value(opt, v),
    })
}

/// The crate's refusal of option `key` (unknown, listing the known ones; or a local bulkhead's
/// option that cannot be fleet-wide, with why) as a `TypeError` naming it.
fn refused(config: &FleetConfig, key: &str) -> PyErr {
    let e = config.clone().set(key, FleetValue::Int(0)).err();
    let msg = e.map_or_else(|| format!("unknown option `{key}`"), |e| e.to_string());
    PyTypeError::new_err(format!("FleetBulkhead(): {msg}"))
}

/// What a fleet bulkhead keeps local (`hullguard_fleet::Local`), read as the local `Bulkhead`
/// reads it: the class table (`classes`, `reserve`, `lending`, `shed`: `gateway::class_table`,
/// the one parser) and the observer (`events`: `PyObserver::from_args`).
struct LocalArgs {
    table: Option<ClassTableBuilder>,
    observer: Arc<PyObserver>,
}

/// `FleetBulkhead(redis_client, pool, **options)`'s pool and options as a `FleetConfig` (each
/// fleet option through the crate's table) and what stays local. An unknown name, or a local
/// bulkhead's option a fleet bulkhead does not support (`rates`, `on_state_change`: there is no
/// breaker), is a `TypeError` naming it (the crate's message); `None` is "not given". `options`
/// is consumed (the local arguments are taken out of it).
fn fleet_config(
    pool: &Bound<'_, PyAny>,
    options: &Bound<'_, PyDict>,
) -> PyResult<(FleetConfig, LocalArgs)> {
    let pool = pool.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "FleetBulkhead(): pool must be a str, not {}",
            type_name(pool)
        ))
    })?;
    let name = PoolName::new(&pool.to_string())
        .map_err(|e| PyValueError::new_err(format!("FleetBulkhead(): {e}")))?;
    let mut config = FleetConfig::new(name);
    // Refused before the class table is read (its parser would take `rates`): class rates
    // would refill per process.
    if options.contains("rates")? {
        return Err(refused(&config, "rates"));
    }
    if options.contains("on_state_change")? {
        let why = NOT_FLEET_WIDE
            .iter()
            .find(|(n, _)| *n == "breaker")
            .map_or("policies are not fleet-wide", |(_, why)| why);
        return Err(PyTypeError::new_err(format!(
            "FleetBulkhead(): on_state_change: not supported by a fleet bulkhead: it has no \
             breaker ({why})"
        )));
    }
    let events = options::take(options, "events")?;
    let observer =
        PyObserver::from_args(None, events.as_ref()).map_err(|e| prefixed(options.py(), e))?;
    let table = gateway::class_table(options).map_err(|e| prefixed(options.py(), e))?;
    for (k, v) in options.iter() {
        let key: String = k
            .extract()
            .map_err(|_| PyTypeError::new_err("FleetBulkhead(): option names must be str"))?;
        let Some(opt) = FLEET_OPTIONS
            .iter()
            .find(|o| o.name == key && o.name != "pool")
        else {
            if let Some(o) = FLEET_OPTIONS.iter().find(|o| node_name(o) == key) {
                return Err(PyTypeError::new_err(format!(
                    "FleetBulkhead(): option `{key}` is spelled `{}` in Python (durations in seconds)",
                    o.name
                )));
            }
            return Err(refused(&config, &key));
        };
        if !v.is_none() {
            set_option(&mut config, opt, &v)?;
        }
    }
    config
        .validate()
        .map_err(|e| PyValueError::new_err(format!("FleetBulkhead(): {e}")))?;
    Ok((config, LocalArgs { table, observer }))
}

/// The local parsers' error with `FleetBulkhead(): ` before its message (same type).
fn prefixed(py: Python<'_>, e: PyErr) -> PyErr {
    let msg = e.value(py).to_string();
    if e.is_instance_of::<PyTypeError>(py) {
        PyTypeError::new_err(format!("FleetBulkhead(): {msg}"))
    } else if e.is_instance_of::<PyValueError>(py) {
        PyValueError::new_err(format!("FleetBulkhead(): {msg}"))
    } else {
        e
    }
}

// ----- replies ---------------------------------------------------------------------------------

fn is_int(v: &Bound<'_, PyAny>) -> bool {
    v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>()
}

fn unexpected(v: &Bound<'_, PyAny>) -> String {
    let r = v.repr().map_or_else(|_| "?".into(), |r| r.to_string());
    format!("unexpected reply from the hullguard library: {r}")
}

/// A redis-py reply (an `int`, or a list of `int`s) as the crate's `RawReply`.
fn raw_reply(v: &Bound<'_, PyAny>) -> Result<RawReply, String> {
    if is_int(v) {
        return v.extract().map(RawReply::Int).map_err(|_| unexpected(v));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for item in v.try_iter().map_err(|_| unexpected(v))? {
            let item = item.map_err(|_| unexpected(v))?;
            if !is_int(&item) {
                return Err(unexpected(v));
            }
            out.push(item.extract().map_err(|_| unexpected(v))?);
        }
        return Ok(RawReply::Ints(out));
    }
    Err(unexpected(v))
}

/// `hg_stats`' reply (integers, and holder ids as `bytes` or `str`) as the crate's fields.
fn fields(v: &Bound<'_, PyAny>) -> PyResult<Vec<Field>> {
    let bad = || PyRuntimeError::new_err(unexpected(v));
    if !(v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>()) {
        return Err(bad());
    }
    let mut out = Vec::new();
    for item in v.try_iter()? {
        let item = item?;
        out.push(if is_int(&item) {
            Field::Int(item.extract().map_err(|_| bad())?)
        } else if let Ok(b) = item.cast::<PyBytes>() {
            Field::Text(String::from_utf8_lossy(b.as_bytes()).into_owned())
        } else if let Ok(s) = item.cast::<PyString>() {
            Field::Text(s.to_string())
        } else {
            return Err(bad());
        });
    }
    Ok(out)
}

fn pool_stats_dict<'py>(py: Python<'py>, s: &PoolStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("now_ms", s.now_ms)?;
    d.set_item("limit", s.limit)?;
    d.set_item("used", s.used)?;
    d.set_item("epoch", s.epoch)?;
    d.set_item("fence", s.fence)?;
    d.set_item("rev", s.rev)?;
    d.set_item("learn_until_ms", s.learn_until_ms)?;
    d.set_item("want_sum", s.want_sum)?;
    let holders = PyList::empty(py);
    for h in &s.holders {
        let hd = PyDict::new(py);
        hd.set_item("holder", &h.holder)?;
        hd.set_item("generation", h.generation)?;
        hd.set_item("held", h.held)?;
        hd.set_item("want", h.want)?;
        hd.set_item("expires_ms", h.expires_ms)?;
        holders.append(hd)?;
    }
    d.set_item("holders", holders)?;
    Ok(d)
}

/// One lease table's stats (the permits', or the budget's in units) as a dict.
fn lease_dict<'py>(py: Python<'py>, l: &LeaseStats) -> PyResult<Bound<'py, PyDict>> {
    let lease = PyDict::new(py);
    lease.set_item("pool", &l.pool)?;
    lease.set_item("holder", &l.holder)?;
    lease.set_item("state", l.state.as_str())?;
    lease.set_item("generation", l.generation)?;
    lease.set_item("held", l.held)?;
    lease.set_item("share", l.share)?;
    lease.set_item("local_limit", l.local_limit)?;
    lease.set_item("fleet_limit", l.fleet_limit)?;
    lease.set_item("fleet_used", l.fleet_used)?;
    lease.set_item("holders", l.holders)?;
    lease.set_item("epoch", l.epoch)?;
    lease.set_item("rev", l.rev)?;
    lease.set_item("learning", l.learning)?;
    lease.set_item("lease_left", l.lease_left.map(seconds))?;
    lease.set_item("unreachable", l.unreachable)?;
    lease.set_item("last_error", l.last_error.as_deref())?;
    lease.set_item("unleased_in_flight", l.unleased_in_flight)?;
    let c = &l.counters;
    lease.set_item("syncs_total", c.syncs_total)?;
    lease.set_item("errors_total", c.errors_total)?;
    lease.set_item("losses_total", c.losses_total)?;
    lease.set_item("expiries_total", c.expiries_total)?;
    lease.set_item("late_grants_total", c.late_grants_total)?;
    lease.set_item("releases_fenced_total", c.releases_fenced_total)?;
    lease.set_item("epoch_changes_total", c.epoch_changes_total)?;
    Ok(lease)
}

fn fleet_stats_dict<'py>(py: Python<'py>, s: &FleetStats) -> PyResult<Bound<'py, PyDict>> {
    let d = stats_dict(py, &s.stats)?;
    d.set_item("lease", lease_dict(py, &s.lease)?)?;
    let budget = s
        .budget_lease
        .as_ref()
        .map(|b| lease_dict(py, b))
        .transpose()?;
    d.set_item("budget_lease", budget)?;
    Ok(d)
}

// ----- the asyncio driver's wake-up ------------------------------------------------------------

/// Wakes an asyncio driver parked on its loop: `loop.call_soon_threadsafe(callback)`. Woken by
/// the demand bell from the thread of the admission the block turned away (or by `close`).
struct LoopWake {
    event_loop: Py<PyAny>,
    callback: Py<PyAny>,
}

impl Wake for LoopWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Not while the interpreter is finalizing (`None`): the driver is gone with its loop.
        Python::try_attach(|py| {
            let r = self.event_loop.bind(py).call_method1(
                intern!(py, "call_soon_threadsafe"),
                (self.callback.bind(py),),
            );
            // A closed loop has no driver to wake.
            drop(r);
        });
    }
}

// ----- _FleetCore ------------------------------------------------------------------------------

/// The lease's driver handle (`hullguard.fleet`'s loops drive it; not public API).
#[pyclass(module = "hullguard._native", name = "_FleetCore", frozen)]
pub(crate) struct FleetDriver {
    core: Arc<FleetCore>,
    /// The core's short-admission count of both blocks (`FleetCore::shorts_total`) read just before the
    /// last `step` (at most what that step saw): demand after it is new (`arm`).
    stepped_shorts: AtomicU64,
    /// The asyncio driver's waker while it is parked: `close` wakes it.
    parked: Mutex<Option<Waker>>,
    min_sync_interval: Duration,
    lease_ttl: Duration,
}

impl FleetDriver {
    /// Wakes a parked asyncio driver (it steps, then parks again with a new waker).
    fn wake_parked(&self) {
        let parked = self
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(w) = parked {
            w.wake();
        }
    }

    /// `apply_limits`' revision, limit and budget (`None`: not given) as the core's snapshot.
    fn snapshot(
        revision: &Bound<'_, PyAny>,
        limit: Option<&Bound<'_, PyAny>>,
        budget: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<LimitsSnapshot> {
        let count = |v: Option<&Bound<'_, PyAny>>, name: &str| {
            v.filter(|v| !v.is_none())
                .map(|v| count_arg(v, name, 0, u64::MAX))
                .transpose()
        };
        // The fleet's ranges are the crate's to check (`FleetCore::apply_limits`).
        let mut snap = LimitsSnapshot::new(count_arg(revision, "revision", 0, u64::MAX)?);
        snap.limit = count(limit, "limit")?;
        snap.budget = count(budget, "budget")?;
        Ok(snap)
    }
}

#[pymethods]
impl FleetDriver {
    /// The driver's next step: `("send", args)` — send `args` with the client's
    /// `execute_command(*args)`, then `complete(reply)` or `fail(message)`; `("wait",
    /// seconds)` — park at most that long (`wait`, or `arm` on an event loop), then step;
    /// `("closed", None)` — stop, then send `release_command()`.
    fn step<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let shorts = self.core.shorts_total();
        let step = py.detach(|| self.core.step());
        self.stepped_shorts.store(shorts, Ordering::Release);
        let (kind, value) = match step {
            Step::Send(cmd) => ("send", cmd.args().into_pyobject(py)?.into_any()),
            Step::Wait(d) => (
                "wait",
                seconds(d.min(MAX_PARK)).into_pyobject(py)?.into_any(),
            ),
            Step::Closed => ("closed", py.None().into_bound(py)),
        };
        PyTuple::new(py, [PyString::new(py, kind).into_any(), value])
    }

    /// The reply to the command `step` returned (an `int` or a list of `int`s; anything else
    /// counts as a failed call).
    fn complete(&self, py: Python<'_>, reply: &Bound<'_, PyAny>) {
        match raw_reply(reply) {
            Ok(r) => py.detach(|| self.core.complete(r)),
            Err(e) => py.detach(|| self.core.fail(&e)),
        }
    }

    /// The command `step` returned failed (Redis unreachable, an error reply): `message` is
    /// kept as the lease's `last_error`; the next sync backs off.
    fn fail(&self, py: Python<'_>, message: &str) {
        py.detach(|| self.core.fail(message));
    }

    /// Parks this thread (interpreter released) for at most `seconds`, or until an admission
    /// finds the block short (at most once per `min_sync_interval`), or `close`.
    fn wait(&self, py: Python<'_>, seconds: f64) {
        let d = Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(MAX_PARK);
        py.detach(|| self.core.wait(d.min(MAX_PARK)));
    }

    /// The asyncio driver's park: `callback` will be called on `event_loop` (through
    /// `call_soon_threadsafe`) by `close`, and — when `demand` — by the next admission the block
    /// turns away. Returns `True` when the driver should step at once (closed, or an admission
    /// was turned away since the last `step`: its wake-up may have gone to an older waker).
    fn arm(&self, event_loop: Py<PyAny>, callback: Py<PyAny>, demand: bool) -> bool {
        if self.core.is_closed() {
            return true;
        }
        let waker = Waker::from(Arc::new(LoopWake {
            event_loop,
            callback,
        }));
        *self.parked.lock().unwrap_or_else(|p| p.into_inner()) = Some(waker.clone());
        // Closed before the waker was in place: `close` did not see it.
        if self.core.is_closed() {
            return true;
        }
        if !demand {
            return false;
        }
        // Registered before this check: a refusal after it wakes the waker.
        self.core.register_demand(&waker);
        self.core.shorts_total() != self.stepped_shorts.load(Ordering::Acquire)
    }

    /// Closes the fleet bulkhead: queued waiters are refused `shutdown`, calls in flight finish,
    /// the driver's next step is `("closed", None)` (a parked driver is woken). Idempotent.
    fn close(&self) {
        self.core.close();
        let parked = self.parked.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = parked {
            w.wake();
        }
    }

    /// In a forked child: the copy admits on the parent's lease and has no driver, so its local
    /// bulkhead is closed (waiters and new requests refused `shutdown`). Lock-free: a lock the
    /// parent's driver thread held at the fork would never be released in the child.
    fn _abandon(&self) {
        self.core.bulkhead().close();
    }

    /// After `close`, once the driver has stopped: the next release to send (fenced; or, with
    /// calls in flight, a last sync), or `None` once every lease has had its own; hand its
    /// reply to `released` (or the client's error to `fail`), then ask again — a fleet
    /// bulkhead with a budget has two leases, the permits' and the budget's.
    fn release_command(&self, py: Python<'_>) -> Option<Vec<String>> {
        let cmd = py.detach(|| self.core.release_command());
        cmd.map(|c| c.args())
    }

    /// The reply of `release_command`'s release (a fenced one is counted).
    fn released(&self, py: Python<'_>, reply: &Bound<'_, PyAny>) {
        if let Ok(r) = raw_reply(reply) {
            py.detach(|| self.core.released(&r));
        }
    }

    /// The commands that set the fleet limit and / or the fleet budget under `revision`
    /// (validated: at least one of `limit` (`0 ..= 2**32`) and `budget` (`1 ..= 2**32`, only on
    /// a fleet bulkhead opened with one); `revision` `1 ..= 2**53 - 1`; every other limit is
    /// refused by name), the limit's first: send each, then hand the replies, in order, to
    /// `limits_applied`.
    #[pyo3(signature = (revision, limit=None, budget=None, max_queue=None, queue_timeout=None))]
    fn apply_limits_commands(
        &self,
        py: Python<'_>,
        revision: &Bound<'_, PyAny>,
        limit: Option<&Bound<'_, PyAny>>,
        budget: Option<&Bound<'_, PyAny>>,
        max_queue: Option<&Bound<'_, PyAny>>,
        queue_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Vec<String>>> {
        let mut snap = Self::snapshot(revision, limit, budget)?;
        let given = |v: Option<&Bound<'_, PyAny>>| v.is_some_and(|v| !v.is_none());
        snap.max_queue = given(max_queue).then_some(0);
        snap.queue_timeout = named_timeout_arg(queue_timeout, "queue_timeout")?;
        let commands = self
            .core
            .apply_limits(&snap)
            .map_err(|e| fleet_err(py, e))?;
        Ok(commands.iter().map(|c| c.args()).collect())
    }

    /// The replies to `apply_limits_commands(revision, limit, budget)`'s commands, in their
    /// order: `{"applied", "revision", "limit", "budget"}` — `applied` when every one given
    /// was installed (`False` when Redis had this revision or a newer one); `revision` and
    /// `limit` those in force of the fleet limit (when given, else `revision` is the budget's
    /// and `limit` `None`); `budget` the fleet budget in force (`None` when not given).
    fn limits_applied<'py>(
        &self,
        py: Python<'py>,
        revision: &Bound<'_, PyAny>,
        limit: Option<&Bound<'_, PyAny>>,
        budget: Option<&Bound<'_, PyAny>>,
        replies: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let snap = Self::snapshot(revision, limit, budget)?;
        let mut raw = Vec::new();
        for reply in replies.try_iter()? {
            raw.push(raw_reply(&reply?).map_err(PyRuntimeError::new_err)?);
        }
        let r = py
            .detach(|| self.core.limits_applied(&snap, &raw))
            .map_err(|e| fleet_err(py, e))?;
        // The core rang its own bell (a sync driver's `wait`); an asyncio driver parks on its
        // loop: wake it too, so it syncs under the new limits now rather than at its beat.
        self.wake_parked();
        let d = PyDict::new(py);
        d.set_item("applied", r.applied())?;
        d.set_item("revision", r.limit.or(r.budget).map(|x| x.rev))?;
        d.set_item("limit", r.limit.map(|x| x.limit))?;
        d.set_item("budget", r.budget.map(|x| x.limit))?;
        Ok(d)
    }

    /// The read-only command that reads the pool (`hg_stats`): its permits' lease table, or
    /// with `dimension="budget"` its budget's (`ValueError` naming `dimension` for another
    /// value, or `"budget"` on a fleet bulkhead without one).
    #[pyo3(signature = (dimension=None))]
    fn pool_stats_command(&self, dimension: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
        let d = match dimension.filter(|v| !v.is_none()) {
            None => Dimension::Permits,
            Some(v) => {
                let s = v.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "dimension must be \"permits\" or \"budget\", not {}",
                        type_name(v)
                    ))
                })?;
                match &*s.to_cow()? {
                    "permits" => Dimension::Permits,
                    "budget" if self.core.has_budget() => Dimension::Budget,
                    "budget" => {
                        return Err(PyValueError::new_err(
                            "dimension: this fleet bulkhead has no fleet budget (open it with \
                             budget=…)",
                        ));
                    }
                    other => {
                        return Err(PyValueError::new_err(format!(
                            "dimension must be \"permits\" or \"budget\", got {other:?}"
                        )));
                    }
                }
            }
        };
        Ok(self.core.pool_stats_command_of(d).args())
    }

    /// `hg_stats`' reply as a dict (see `FleetBulkhead.pool_stats`).
    #[staticmethod]
    fn decode_pool_stats<'py>(
        py: Python<'py>,
        reply: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = FleetCore::decode_pool_stats(&fields(reply)?).map_err(|e| fleet_err(py, e))?;
        pool_stats_dict(py, &s)
    }

    /// `FCALL_RO hg_version 1 <the pool's first key>`: the library's version (`_FLEET_LIB_VERSION`
    /// when it is loaded).
    fn version_command(&self) -> Vec<String> {
        let key = self.core.keys().0[0].clone();
        vec!["FCALL_RO".into(), FN_VERSION.into(), "1".into(), key]
    }

    /// The shortest time between two syncs, seconds.
    #[getter]
    fn min_sync_interval(&self) -> f64 {
        self.min_sync_interval.as_secs_f64()
    }

    /// The lease's time to live, seconds.
    #[getter]
    fn lease_ttl(&self) -> f64 {
        self.lease_ttl.as_secs_f64()
    }

    #[getter]
    fn pool(&self) -> String {
        self.core.pool().as_str().to_owned()
    }

    #[getter]
    fn holder(&self) -> String {
        self.core.holder().to_owned()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.core.is_closed() || self.core.bulkhead().is_closed()
    }
}

// ----- _FleetBulkhead --------------------------------------------------------------------------

/// The native base of `hullguard.FleetBulkhead` (see `python/hullguard/fleet.py` for the class
/// documentation): the admission methods of the local `Bulkhead` over the fleet core's
/// bulkhead (its classes partition this process's block), its events, and the stats.
#[pyclass(
    module = "hullguard._native",
    name = "_FleetBulkhead",
    subclass,
    frozen
)]
pub(crate) struct FleetBulkhead {
    driver: Py<FleetDriver>,
    bh: Py<Bulkhead>,
    /// The local core's observer (`events=True`: the admission events reach `on` listeners).
    observer: Arc<PyObserver>,
}

impl FleetBulkhead {
    fn core(&self) -> &Arc<FleetCore> {
        &self.driver.get().core
    }
}

#[pymethods]
impl FleetBulkhead {
    /// `_FleetBulkhead(pool, **options)`: the options by the fleet crate's table (see
    /// `hullguard.FleetBulkhead`); the class table (`classes`, `reserve`, `lending`, `shed`)
    /// and `events` as the local `Bulkhead` reads them, handed to the fleet core as what stays
    /// local (`hullguard_fleet::Local`). The lease is idle (admissions queue or are refused
    /// `fleet_lease`) until a driver syncs.
    #[new]
    #[pyo3(signature = (pool, **options))]
    fn new(pool: &Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let py = pool.py();
        let options = options.map_or_else(|| Ok(PyDict::new(py)), |o| o.copy())?;
        let (config, LocalArgs { table, observer }) = fleet_config(pool, &options)?;
        let shared: SharedObserver = observer.clone();
        let (core, names) = match table {
            Some(mut b) => {
                let names = gateway::names_of(&b);
                let t = b.table();
                let local = Local {
                    classes: Some(&t),
                    observer: Some(shared),
                };
                (FleetCore::with_local(&config, None, local), names)
            }
            None => {
                let local = Local {
                    classes: None,
                    observer: Some(shared),
                };
                (FleetCore::with_local(&config, None, local), Arc::from([]))
            }
        };
        let core = Arc::new(core.map_err(|e| prefixed(py, fleet_err(py, e)))?);
        observer.set_names(names.clone());
        let bh = Bulkhead::wrap_with(
            py,
            core.bulkhead().clone(),
            None,
            names,
            Some(observer.clone()),
        )?;
        let bh = Py::new(py, bh)?;
        let driver = Py::new(
            py,
            FleetDriver {
                core,
                stepped_shorts: AtomicU64::new(0),
                parked: Mutex::new(None),
                min_sync_interval: config.min_sync_interval,
                lease_ttl: config.lease_ttl,
            },
        )?;
        Ok(Self {
            driver,
            bh,
            observer,
        })
    }

    /// Waits for `weight` permits of this process's leased block and `cost` units of its
    /// budget block (a fleet bulkhead opened with `budget=`), in `admission_class` (a class
    /// name or index of one opened with `classes=`), at most `timeout` seconds queued (`None`:
    /// `queue_timeout`; `math.inf`: no deadline; 0: do not queue), by `deadline` (absolute
    /// seconds on the `time.monotonic()` scale): `await fleet.acquire()` gives a `Permit`,
    /// `async with fleet.acquire():` releases it at the exit. A request a block cannot take
    /// now — a weight, or a cost up to the fleet budget — queues and wakes the driver to ask
    /// Redis for more. Raises when awaited, as `Bulkhead.acquire`: `BulkheadFullError`
    /// (`concurrency_limit`, `.detail["bound"] == "fleet_lease"` without a valid lease and
    /// `timeout=0`; `budget_limit` for a cost above the fleet budget, or with the bound
    /// `"fleet_lease"` while the budget block is empty and `timeout=0`; `queue_limit`),
    /// `BulkheadQueueTimeoutError`, `BulkheadClosedError`; here: `TypeError` / `ValueError` for
    /// a bad argument (`observe` other than `"off"`: a request in observe mode would pass the
    /// block; a class this fleet bulkhead does not have).
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        no_observe(observe)?;
        let bh = self.bh.get();
        bh.acquire(
            py,
            weight,
            timeout,
            cost,
            admission_class,
            observe,
            deadline,
        )
    }

    /// `acquire` that never raises a refusal: `await fleet.admit()` gives an `Admission` (as
    /// `Bulkhead.admit`).
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireContext> {
        no_observe(observe)?;
        let bh = self.bh.get();
        bh.admit(
            py,
            weight,
            timeout,
            cost,
            admission_class,
            observe,
            deadline,
        )
    }

    /// `acquire` on this thread (interpreter released) until admitted, at most `timeout`
    /// seconds queued: a `Permit` (`with fleet.acquire_sync(timeout=2.0):`). Raises the refusal
    /// (as `acquire`), or a signal handler's exception (Ctrl-C within 100 ms).
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_sync(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        no_observe(observe)?;
        let bh = self.bh.get();
        bh.acquire_sync(
            py,
            weight,
            timeout,
            cost,
            admission_class,
            observe,
            deadline,
        )
    }

    /// `acquire_sync` that never raises a refusal: an `Admission`.
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn admit_sync(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_observe(observe)?;
        let bh = self.bh.get();
        bh.admit_sync(
            py,
            weight,
            timeout,
            cost,
            admission_class,
            observe,
            deadline,
        )
    }

    /// Permits now, or `None` (`concurrency_limit`: the block is full, a waiter is queued, or
    /// there is no valid lease — before the first block, or Redis unreachable past the
    /// deadline). Never waits, never touches the network. Other refusals raise
    /// (`BulkheadFullError` with the reason `budget_limit` for a `cost` the budget block
    /// cannot take now — bound `"fleet_lease"` while it is empty —
    /// `BulkheadClosedError`, `BulkheadQueueTimeoutError` for a `deadline` that has passed).
    #[pyo3(signature = (weight=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Permit>> {
        no_observe(observe)?;
        let bh = self.bh.get();
        bh.try_acquire(py, weight, cost, admission_class, observe, deadline)
    }

    /// `try_acquire` that never raises a refusal: an `Admission` (`ok=False` with its
    /// `detail`, `bound` `"fleet_lease"` without a valid lease).
    #[pyo3(signature = (weight=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    fn try_admit(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_observe(observe)?;
        let bh = self.bh.get();
        bh.try_admit(py, weight, cost, admission_class, observe, deadline)
    }

    /// The dry run (as `Bulkhead.would_admit`): what `acquire` would answer now, committing
    /// nothing.
    #[pyo3(signature = (weight=None, timeout=None, *, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn would_admit(
        &self,
        py: Python<'_>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_observe(observe)?;
        let bh = self.bh.get();
        bh.would_admit(
            py,
            weight,
            timeout,
            cost,
            admission_class,
            observe,
            deadline,
        )
    }

    /// `Bulkhead.guard` on the leased block: `@fleet.guard` or `@fleet.guard(weight=2,
    /// timeout=1.0)`.
    #[pyo3(signature = (r#fn=None, *, weight=None, timeout=None, cost=None, admission_class=None, observe=None, deadline=None))]
    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        py: Python<'_>,
        r#fn: Option<&Bound<'_, PyAny>>,
        weight: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        admission_class: Option<&Bound<'_, PyAny>>,
        observe: Option<&Bound<'_, PyAny>>,
        deadline: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        no_observe(observe)?;
        let bh = self.bh.bind(py);
        Bulkhead::guard(
            bh,
            r#fn,
            weight,
            timeout,
            cost,
            admission_class,
            observe,
            deadline,
        )
    }

    /// `Bulkhead.drain`: waits (without closing) until this process holds no permit and has no
    /// waiter, or `timeout` seconds pass.
    #[pyo3(signature = (timeout=None))]
    fn drain(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<DrainAwaitable> {
        self.bh.get().drain(timeout)
    }

    /// `Bulkhead.drain_sync`: `drain` on this thread (interpreter released).
    #[pyo3(signature = (timeout=None))]
    fn drain_sync<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.bh.get().drain_sync(py, timeout)
    }

    /// The local bulkhead's stats (as `Bulkhead.stats()`: `limit` is the block admitted on
    /// now; with a budget, `budget["limit"]` is the budget block) plus `lease`: `pool`,
    /// `holder`, `state` (`"idle"`, `"leased"`, `"lost"`, `"expired"`, `"full"`),
    /// `generation`, `held`, `share`, `local_limit`, `fleet_limit`, `fleet_used`, `holders`,
    /// `epoch` (server µs at the state's creation), `rev`, `learning`, `lease_left` (seconds,
    /// `None` without a lease), `unreachable`, `last_error` (`None` once a sync succeeds),
    /// `unleased_in_flight`, and the counters `syncs_total`, `errors_total`, `losses_total`,
    /// `expiries_total`, `late_grants_total`, `releases_fenced_total`, `epoch_changes_total`;
    /// and `budget_lease`: the budget's lease, the same keys in units (`fleet_limit` is the
    /// fleet budget), or `None` without a budget.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let core = self.core();
        let s = py.detach(|| core.stats());
        fleet_stats_dict(py, &s)
    }

    /// The local bulkhead's samples of the core's metric table (for the exporters).
    fn _metric_samples<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        crate::metrics::bulkhead_samples(py, self.core().bulkhead(), &self.bh.get().names)
    }

    /// One class's counts in this process's block (as `Bulkhead.class_stats`: `{"class",
    /// "name", "priority", "floor", "ceiling", "in_flight", "budget_floor", "budget_ceiling",
    /// "budget_in_use", "queued", "observe", "observed"}`). `ValueError` for a class it does
    /// not have.
    fn class_stats<'py>(
        &self,
        py: Python<'py>,
        admission_class: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.bh
            .bind(py)
            .call_method1(intern!(py, "class_stats"), (admission_class,))
    }

    /// The class names, by index (`None` for an unnamed class); `()` without classes.
    #[getter]
    fn classes(&self) -> Vec<Option<String>> {
        self.bh.get().names.to_vec()
    }

    /// Calls `callback(event)` for every event `name` of this process's admissions, as
    /// `Bulkhead.on` (`"admit"`, `"reject"`, `"release"`, `"usage"`, `"reconfigure"`,
    /// `"shed"`, `"observe_bypass"` need `FleetBulkhead(events=True)`, else `ValueError`;
    /// `"state_change"` never fires: a fleet bulkhead has no breaker). The events are the
    /// local core's: a block resized by the lease is no event. A callback runs on the thread
    /// that committed the event (an admission's, or the driver's when a grant reaches a
    /// queued waiter), with the GIL; its exception goes to `sys.unraisablehook` and is counted
    /// in `listener_errors`. It must not block.
    fn on(&self, event: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        self.observer.on(event, callback)
    }

    /// Removes one registration of `callback` for `event`; whether there was one.
    fn off(&self, event: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.observer.off(event, callback)
    }

    /// An async iterator of this process's admission events (as `Bulkhead.events`: `async
    /// for e in fleet.events("admit"): …`, buffered up to `maxsize`, dropped and counted when
    /// full).
    #[pyo3(signature = (*kinds, maxsize=None))]
    fn events<'py>(
        slf: &Bound<'py, Self>,
        kinds: &Bound<'py, PyTuple>,
        maxsize: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let stream = py.import("hullguard._events")?.getattr("EventStream")?;
        let kw = PyDict::new(py);
        if let Some(m) = maxsize {
            kw.set_item("maxsize", m)?;
        }
        stream.call((slf, kinds), Some(&kw))
    }

    /// Event callbacks that raised so far.
    #[getter]
    fn listener_errors(&self) -> u64 {
        self.observer.errors()
    }

    /// The local `Bulkhead` the fleet admits on, with this fleet bulkhead's classes and
    /// listeners (its limit and budget are the leased blocks: its `set_limit`, `set_budget`
    /// and `apply_limits` raise `ValueError`; the fleet bulkhead's `apply_limits` sets the
    /// fleet's). Pass it where a `hullguard.Bulkhead` is expected
    /// (`hullguard.asgi.AdmissionMiddleware`).
    #[getter]
    fn bulkhead(&self, py: Python<'_>) -> Py<Bulkhead> {
        self.bh.clone_ref(py)
    }

    /// The lease's driver handle (used by `hullguard.fleet`).
    #[getter]
    fn _core(&self, py: Python<'_>) -> Py<FleetDriver> {
        self.driver.clone_ref(py)
    }

    /// The pool.
    #[getter]
    fn pool(&self) -> String {
        self.core().pool().as_str().to_owned()
    }

    /// This process's holder id (`<hostname>:<pid>:<random hex>` unless `holder=` set it).
    #[getter]
    fn holder(&self) -> String {
        self.core().holder().to_owned()
    }

    /// The block this process admits on now (0 without a valid lease).
    #[getter]
    fn limit(&self) -> u64 {
        self.core().bulkhead().limit()
    }

    /// This process's queue places.
    #[getter]
    fn max_queue(&self) -> u64 {
        self.core().bulkhead().max_queue()
    }

    /// This process's default queue timeout, seconds.
    #[getter]
    fn queue_timeout(&self) -> f64 {
        seconds(self.core().bulkhead().queue_timeout())
    }

    /// The lease's time to live, seconds.
    #[getter]
    fn lease_ttl(&self) -> f64 {
        self.driver.get().lease_ttl.as_secs_f64()
    }

    /// Whether `close()` was called (or this is a forked child's copy).
    #[getter]
    fn closed(&self) -> bool {
        self.core().is_closed() || self.core().bulkhead().is_closed()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let me = slf.get();
        let core = me.core();
        let s = py.detach(|| core.stats());
        let name = slf.get_type().name()?;
        Ok(format!(
            "<{name} pool={:?} holder={:?} state={} held={} limit={} active={} queued={}>",
            s.lease.pool,
            s.lease.holder,
            s.lease.state.as_str(),
            s.lease.held,
            s.stats.limit,
            s.stats.active,
            s.stats.queued
        ))
    }
}

// ----- the `hullguard fleet show` command ------------------------------------------------------

/// `hullguard fleet show POOL [--redis URL] [--json]` (`hullguard.host.main`; `args` without
/// the program name), parsed and rendered by the fleet crate (`hullguard_fleet::cli`), in two
/// calls around the read, which Python makes with redis-py:
///
/// * without `reply`: `(2, "", <message and usage>, None)` for bad usage, else
///   `(0, "", "", plan)` with `plan = {"pool", "redis" (the URL: `--redis`, else
///   `default_redis`, else the crate's default), "json", "check" (`FCALL_RO hg_version 1
///   <key>`), "command" (`FCALL_RO hg_stats 6 <keys…>`)}`;
/// * with `hg_stats`' reply: `(0, <the report>, "", None)`, or `(1, "", <message>, None)` when
///   the reply is not `hg_stats`'.
#[pyfunction(name = "_fleet_cli")]
#[pyo3(signature = (args, default_redis=None, reply=None))]
fn fleet_cli<'py>(
    py: Python<'py>,
    args: Vec<String>,
    default_redis: Option<String>,
    reply: Option<&Bound<'py, PyAny>>,
) -> PyResult<(i32, String, String, Option<Bound<'py, PyDict>>)> {
    let show = match cli::parse(&args, default_redis) {
        Ok(s) => s,
        Err(e) => {
            return Ok((
                2,
                String::new(),
                format!("hullguard: {e}\n{}", cli::USAGE),
                None,
            ));
        }
    };
    let Some(reply) = reply else {
        let keys = show.pool.keys();
        let mut command = vec!["FCALL_RO".to_owned(), FN_STATS.to_owned(), "6".to_owned()];
        command.extend(keys.iter().map(str::to_owned));
        let check = vec![
            "FCALL_RO".to_owned(),
            FN_VERSION.to_owned(),
            "1".to_owned(),
            keys.0[0].clone(),
        ];
        let plan = PyDict::new(py);
        plan.set_item("pool", show.pool.as_str())?;
        plan.set_item("redis", &show.redis)?;
        plan.set_item("json", show.json)?;
        plan.set_item("check", check)?;
        plan.set_item("command", command)?;
        return Ok((0, String::new(), String::new(), Some(plan)));
    };
    let decoded = fields(reply).and_then(|f| {
        FleetCore::decode_pool_stats(&f).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    });
    Ok(match decoded {
        Ok(stats) => (
            0,
            cli::render(&show.pool, &stats, show.json),
            String::new(),
            None,
        ),
        Err(e) => (
            1,
            String::new(),
            format!("hullguard: {}\n", e.value(py)),
            None,
        ),
    })
}
