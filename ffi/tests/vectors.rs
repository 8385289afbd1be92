//! The C runner of the scenario vectors in `tests/vectors/` (docs/design.md, "Scenario vectors"): the same decisions
//! through the C ABI. It mirrors the Rust runner (`tests/tests/vectors.rs`) step for step, but
//! calls only the exported `hg_*` functions (as the crate's `pub extern "C"` items, the very
//! symbols a C program links) — never `hullguard-core`. What is not about the ABI (finding,
//! parsing and schema-checking the files, the override merge, `settles` / `subset` checks, the
//! vectors a runner must fail on) comes from `hullguard_tests::vectors`, shared with the Rust
//! runner.
//!
//! How the steps map onto the ABI:
//! * `acquire` → an `hg_request` (weight, cost, class; its `detail` filled on a refusal, whose
//!   `bound` and `retry_after_ms` the runner checks) through `hg_bulkhead_acquire_async_request`
//!   (a queued acquire settles through its callback, which records into a per-acquire slot) or,
//!   in polling mode, `hg_bulkhead_enqueue_request` (a polling ticket the runner polls with
//!   `hg_ticket_poll`); after every step the runner collects what settled, exactly as the Rust
//!   runner polls its waiters. `try_acquire` → `hg_bulkhead_try_acquire_request`. In a registry
//!   the `hg_registry_*_request` functions (a key's class under a global cap), which hand back
//!   the bulkhead a queued ticket waits in.
//! * `release` (with `used`: `hg_permit_release_usage`) / `release_partial` / `refund` /
//!   `report_usage` / `orphan` → `hg_permit_*` (the runner keeps its own record of each permit's
//!   weight, units, overrun and reported usage, as the Rust runner does); `cancel` →
//!   `hg_ticket_cancel`; `set_limit`, `set_budget`, `set_observe`, `apply_limits` (`hg_limits`),
//!   `would_admit` (`hg_would_admit`; no stats may change), `close`, `drain` (timeout 0),
//!   `stats`, `class_stats`, `key_stats` → their `hg_bulkhead_*` / `hg_registry_*` functions.
//! * `keys` → the ABI has no key listing: a key exists iff `hg_registry_stats` finds it (it
//!   neither creates nor touches an entry), checked over every key the vector names.
//! * Queue deadlines: the async API's timer thread runs on real time, so in async mode the
//!   runner passes `HG_TIMEOUT_INFINITE` for a queued acquire and keeps each deadline on its own
//!   virtual timer (as the Rust runner does); when one passes, it settles the acquire with
//!   `hg_ticket_cancel_reason(.., HG_REASON_TIMEOUT)`, as a host with its own timers would. The
//!   polling API arms no timer but its admission reads the real `timeout_ms` (a rate that
//!   conforms only after the deadline refuses at once): the admission vectors run in polling
//!   mode, the plain and policy vectors in both. A head a rate holds back is ticked
//!   (`hg_bulkhead_rate_tick`) at the time `hg_bulkhead_rate_retry_after_ns` names, before any
//!   later deadline, as the Rust runner's host timer does. Bulkheads and registries are built on
//!   the runner's virtual clock (`hg_bulkhead_new_with_clock`, `hg_bulkhead_new_with_classes`,
//!   `hg_registry_new_with_options`), so `queue_wait_*_ns` figures match.
//! * After every step the runner checks, against its own records, the permits and waiters of
//!   every bulkhead (`vectors::check_held`) and the budget counts with C30
//!   (`vectors::check_budget`); under a global cap each key's class counts
//!   (`hg_registry_key_stats`) and the cap's (`hg_registry_global_stats`).
//! * Classed bulkheads: the vector's `classes` become an `hg_class` array and an
//!   `hg_class_table` (reserve, rates, lending, shed).
//! * Policy vectors (`tests/vectors/policies/`, docs/design.md): `config.resilience` becomes the
//!   appended `hg_config` fields (`adaptive_*`, `breaker_*`, `call_timeout_ms`; an omitted
//!   option stays 0 = the default); a registry override is merged key by key over the defaults
//!   in JSON (as the Rust runner does), then passed as a whole `hg_config` (the ABI merges it
//!   over the defaults again, field by field: nothing changes, it carries their values). `release` /
//!   `record_outcome` with an `outcome` → `hg_permit_release_outcome` (without one:
//!   `hg_permit_release`, a success); `expect_state` → `hg_stats.circuit_state` (a stats read
//!   commits a due lazy transition, as a state read does); `expect_events` → the transitions the
//!   `on_state_change` callback logged (the key's bytes in a registry, NULL outside one).

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    ffi::{CStr, c_char, c_void},
    path::Path,
    ptr,
};

use hullguard::{
    HG_TIMEOUT_INFINITE, HG_UNSET, hg_adaptive_algorithm, hg_bound_name, hg_bulkhead,
    hg_bulkhead_acquire_async_request, hg_bulkhead_apply_limits, hg_bulkhead_class_stats,
    hg_bulkhead_close, hg_bulkhead_drain, hg_bulkhead_enqueue_request, hg_bulkhead_free,
    hg_bulkhead_new_with_classes, hg_bulkhead_new_with_clock, hg_bulkhead_rate_retry_after_ns,
    hg_bulkhead_rate_tick, hg_bulkhead_set_budget, hg_bulkhead_set_limit, hg_bulkhead_set_observe,
    hg_bulkhead_stats, hg_bulkhead_try_acquire_request, hg_bulkhead_would_admit, hg_circuit_state,
    hg_class, hg_class_default, hg_class_stats, hg_class_table, hg_config, hg_config_check,
    hg_config_default, hg_drain_result, hg_hold_change, hg_limits, hg_limits_default, hg_observe,
    hg_outcome, hg_permit, hg_permit_free, hg_permit_orphan, hg_permit_refund, hg_permit_release,
    hg_permit_release_outcome, hg_permit_release_partial, hg_permit_release_usage,
    hg_permit_report_usage, hg_rate, hg_reason, hg_reason_name, hg_registry,
    hg_registry_acquire_async_request, hg_registry_close, hg_registry_enqueue_request,
    hg_registry_free, hg_registry_get, hg_registry_global_stats, hg_registry_key_stats,
    hg_registry_new_with_options, hg_registry_options, hg_registry_override, hg_registry_stats,
    hg_registry_try_acquire_request, hg_registry_would_admit, hg_rejection, hg_request,
    hg_request_default, hg_stats, hg_status, hg_ticket, hg_ticket_cancel, hg_ticket_cancel_reason,
    hg_ticket_poll, hg_usage_report, hg_would_admit, hg_would_admit_decision,
};
use hullguard_tests::vectors;
use serde_json::{Map, Value, json};

/// The C ABI never gives a reason for `HG_STATUS_INVALID_ARGUMENT`; the vectors call it this.
const INVALID: &str = "invalid";

/// A status as the vectors spell it: `granted`, a reason (`hg_reason_name`), or `invalid`.
fn outcome(s: hg_status) -> String {
    match s {
        hg_status::HG_STATUS_OK => "granted".into(),
        hg_status::HG_STATUS_QUEUED => "queued".into(),
        hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID.into(),
        s if (s as u32) >= 2000 => {
            let name = hg_reason_name(s as u32 - 2000);
            assert!(!name.is_null(), "no reason name for status {s:?}");
            // SAFETY: hg_reason_name returns a static NUL-terminated string (or NULL, excluded).
            unsafe { CStr::from_ptr(name) }.to_str().unwrap().into()
        }
        s => panic!("unexpected status {s:?}"),
    }
}

/// Where the callback of one queued acquire records its settlement.
#[derive(Default)]
struct Slot {
    calls: u32,
    status: Option<hg_status>,
    permit: usize,
}

/// The `hg_acquire_callback`: records into the `RefCell<Slot>` passed as `user_data`.
unsafe extern "C" fn on_settle(status: hg_status, permit: *mut hg_permit, user_data: *mut c_void) {
    // SAFETY: `user_data` is the address of a boxed `RefCell<Slot>` that the runner keeps alive
    // until every callback has run (see `Runner::finish`). Callbacks run on this thread.
    let slot = unsafe { &*user_data.cast::<RefCell<Slot>>() };
    let mut s = slot.borrow_mut();
    s.calls += 1;
    s.status = Some(status);
    s.permit = permit as usize;
}

/// An owned `hg_bulkhead*` reference.
struct Bh(*mut hg_bulkhead);

impl Drop for Bh {
    fn drop(&mut self) {
        hg_bulkhead_free(self.0);
    }
}

enum Target {
    Single(Bh),
    Registry(*mut hg_registry),
}

enum State {
    /// Queued: the outside handle of its bulkhead, its ticket and its callback's slot (`None`:
    /// a polling ticket).
    Queued {
        bh: Bh,
        ticket: hg_ticket,
        slot: Option<usize>,
    },
    /// Holds `permit` (released or not: `hg_permit_release` tells).
    Permit {
        permit: *mut hg_permit,
        ticket: Option<hg_ticket>,
    },
    Rejected {
        ticket: Option<hg_ticket>,
    },
}

/// The runner's record of one held permit: permits (the step's weight less what it returned),
/// budget units charged (the step's cost less refunds, plus growth through admission), units
/// held past the budget, and the cumulative usage it reported.
#[derive(Debug, Clone, Copy, Default)]
struct Rec {
    weight: u64,
    cost: u64,
    overrun: u64,
    reported: u64,
}

/// A step the C ABI cannot run faithfully (see the module docs).
struct Unsupported(String);

struct Runner {
    name: String,
    target: Target,
    /// `queue_timeout_ms` by key (`""` for a single bulkhead); `None` = infinite.
    default_timeouts: HashMap<String, Option<u64>>,
    registry_override_timeouts: HashMap<String, Option<u64>>,
    /// Every key the vector names (the universe of `keys`).
    universe: BTreeSet<String>,
    acquires: HashMap<String, State>,
    /// The runner's own records, never read back from the ABI: the key each acquire named and
    /// the weight it asked for, and the permits it holds now (granted, less what it returned).
    key_of: HashMap<String, Option<String>>,
    /// The weight and cost each acquire asked for.
    asked: HashMap<String, (u64, u64)>,
    /// What each held permit holds, by the runner's own rules (as the Rust runner's `Held`).
    rec: HashMap<String, Rec>,
    /// A registry under a global cap (docs/design.md §9.2).
    global: bool,
    /// Queued acquires through the polling API (`hg_*_enqueue_request`, the host's own timers)
    /// rather than the async one (`hg_*_acquire_async_request`, callbacks).
    polling: bool,
    /// Kept alive until every callback has run. Boxed: each slot's address is a callback's
    /// `user_data` and must not move when the vector grows.
    #[allow(clippy::vec_box)]
    slots: Vec<Box<RefCell<Slot>>>,
    /// (deadline ns, sequence) → acquire id: the runner's virtual timer.
    timers: BTreeMap<(u64, u64), String>,
    now_ns: u64,
    /// The virtual clock the single bulkhead reads (boxed: its address is the clock's user data).
    clock: Box<std::sync::atomic::AtomicU64>,
    /// The breaker transitions logged by `on_state_change` (boxed: its address is user data).
    events: Box<EventLog>,
    seq: u64,
}

/// The breaker transitions the `on_state_change` callback logged: `[old, new]`, or
/// `[key, old, new]` in a registry.
type EventLog = std::sync::Mutex<Vec<Value>>;

fn state_name(s: hg_circuit_state) -> &'static str {
    match s {
        hg_circuit_state::HG_CIRCUIT_CLOSED => "closed",
        hg_circuit_state::HG_CIRCUIT_OPEN => "open",
        hg_circuit_state::HG_CIRCUIT_HALF_OPEN => "half_open",
    }
}

/// The `on_state_change` callback: appends to the `EventLog` passed as user data.
unsafe extern "C" fn on_state_change(
    user_data: *mut c_void,
    key: *const c_char,
    key_len: usize,
    old: hg_circuit_state,
    new: hg_circuit_state,
) {
    // SAFETY: `user_data` is the runner's boxed log, alive as long as the bulkheads.
    let log = unsafe { &*user_data.cast::<EventLog>() };
    let e = if key.is_null() {
        assert_eq!(key_len, 0, "key NULL with a length");
        json!([state_name(old), state_name(new)])
    } else {
        // SAFETY: `key_len` bytes at `key` during the call (the callback's contract).
        let k = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), key_len) };
        json!([
            std::str::from_utf8(k).unwrap(),
            state_name(old),
            state_name(new)
        ])
    };
    log.lock().unwrap().push(e);
}

fn request_default() -> hg_request {
    let mut r = std::mem::MaybeUninit::<hg_request>::uninit();
    assert_eq!(hg_request_default(r.as_mut_ptr()), hg_status::HG_STATUS_OK);
    // SAFETY: `hg_request_default` wrote every field.
    unsafe { r.assume_init() }
}

fn default_config() -> hg_config {
    let mut c = std::mem::MaybeUninit::<hg_config>::uninit();
    assert_eq!(hg_config_default(c.as_mut_ptr()), hg_status::HG_STATUS_OK);
    // SAFETY: `hg_config_default` wrote every field.
    unsafe { c.assume_init() }
}

/// `config.resilience` onto the appended policy fields (an omitted option stays 0, the default).
fn resilience(c: &mut hg_config, r: &Value) {
    let u = |x: &Value| x.as_u64().unwrap();
    let u32_ = |x: &Value| u32::try_from(x.as_u64().unwrap()).unwrap();
    if let Some(a) = r.get("adaptive").and_then(Value::as_object) {
        c.adaptive_enabled = true;
        for (k, x) in a {
            match k.as_str() {
                "algorithm" => {
                    c.adaptive_algorithm = match x.as_str().unwrap() {
                        "aimd" => hg_adaptive_algorithm::HG_ADAPTIVE_AIMD,
                        "gradient2" => hg_adaptive_algorithm::HG_ADAPTIVE_GRADIENT2,
                        other => panic!("unknown algorithm {other:?}"),
                    }
                }
                "initial_limit" => c.adaptive_initial_limit = u(x),
                "min_limit" => c.adaptive_min_limit = u(x),
                "max_limit" => c.adaptive_max_limit = u(x),
                "target_latency_ms" => c.adaptive_target_latency_ms = u(x),
                "increase_step" => c.adaptive_increase_step = u(x),
                "decrease_ratio" => c.adaptive_decrease_ratio = x.as_f64().unwrap(),
                "smoothing" => c.adaptive_smoothing = x.as_f64().unwrap(),
                "rtt_tolerance" => c.adaptive_rtt_tolerance = x.as_f64().unwrap(),
                "long_window" => c.adaptive_long_window = u(x),
                "queue_size" => c.adaptive_queue_size = u(x),
                other => panic!("unknown adaptive option {other:?}"),
            }
        }
    }
    if let Some(b) = r.get("breaker").and_then(Value::as_object) {
        c.breaker_enabled = true;
        for (k, x) in b {
            match k.as_str() {
                "failure_threshold" => c.breaker_failure_threshold = u32_(x),
                "error_rate_threshold" => c.breaker_error_rate_threshold = x.as_f64().unwrap(),
                "error_rate_window_ms" => c.breaker_error_rate_window_ms = u(x),
                "error_rate_buckets" => c.breaker_error_rate_buckets = u32_(x),
                "volume_threshold" => c.breaker_volume_threshold = u32_(x),
                "open_duration_ms" => c.breaker_open_duration_ms = u(x),
                "half_open_max_calls" => c.breaker_half_open_max_calls = u32_(x),
                "half_open_timeout_ms" => c.breaker_half_open_timeout_ms = u(x),
                other => panic!("unknown breaker option {other:?}"),
            }
        }
    }
    if let Some(t) = r.get("call_timeout_ms").filter(|t| !t.is_null()) {
        c.call_timeout_ms = u(t);
    }
}

/// An `hg_config` from a vector's config object (defaults: `hg_config_default`), and its
/// queue timeout in ms (`None` = infinite). Its `on_state_change` logs into `events`.
fn config(v: Option<&Value>, events: &EventLog) -> (hg_config, Option<u64>) {
    let mut c = default_config();
    c.on_state_change = Some(on_state_change);
    c.on_state_change_user_data = ptr::from_ref(events).cast_mut().cast();
    let mut timeout = Some(c.queue_timeout_ms);
    if let Some(v) = v.and_then(Value::as_object) {
        for (k, x) in v {
            let u = || {
                x.as_u64()
                    .unwrap_or_else(|| panic!("{k} = {x}: not a count"))
            };
            match k.as_str() {
                "max_concurrent" => c.max_concurrent = u(),
                "max_queue" => c.max_queue = u(),
                "queue_timeout_ms" => match x {
                    Value::String(_) => {
                        c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
                        timeout = None;
                    }
                    t => {
                        c.queue_timeout_ms = t.as_u64().unwrap();
                        timeout = Some(c.queue_timeout_ms);
                    }
                },
                "enabled" => c.enabled = x.as_bool().unwrap(),
                "resilience" => resilience(&mut c, x),
                "budget" => c.budget = u(),
                "max_queued_cost" => c.max_queued_cost = u(),
                "observe" => c.observe = observe_number(x),
                "start_limit" => c.start_limit = u(),
                "max_orphaned" => c.max_orphaned = u(),
                "cancel_on_overrun" => c.cancel_on_overrun = x.as_bool().unwrap(),
                "min_service_time_ms" => c.min_service_time_ms = u(),
                "queue_delay_target_ms" => c.queue_delay_target_ms = u(),
                "queue_delay_interval_ms" => c.queue_delay_interval_ms = u(),
                "adaptive_lifo" => c.adaptive_lifo = x.as_bool().unwrap(),
                "shed_lag_threshold_ms" => c.shed_lag_threshold_ms = u(),
                "shed_cpu_threshold" => c.shed_cpu_threshold = x.as_f64().unwrap(),
                "critical_priority" => c.critical_priority = u() as u32,
                other => panic!("unknown config option {other:?}"),
            }
        }
    }
    let mut bad = ptr::null();
    let s = hg_config_check(&c, &mut bad);
    if s != hg_status::HG_STATUS_OK {
        // SAFETY: a static NUL-terminated field name.
        let field = unsafe { CStr::from_ptr(bad) };
        panic!("config {v:?}: {s:?} ({field:?})");
    }
    (c, timeout)
}

/// An observe mode's C number (`"off"`, `"concurrency"`, `"budget"`, `"all"`).
fn observe_number(x: &Value) -> u32 {
    (match x.as_str().unwrap() {
        "off" => hg_observe::HG_OBSERVE_OFF,
        "concurrency" => hg_observe::HG_OBSERVE_CONCURRENCY,
        "budget" => hg_observe::HG_OBSERVE_BUDGET,
        "all" => hg_observe::HG_OBSERVE_ALL,
        other => panic!("unknown observe mode {other:?}"),
    }) as u32
}

fn observe_name(n: u32) -> &'static str {
    ["off", "concurrency", "budget", "all"][n as usize]
}

/// Counts indexed by `hg_reason`, by name (every reason this library names).
fn by_reason(counts: &[u64; 16]) -> Map<String, Value> {
    (0..16u32)
        .filter(|r| !hg_reason_name(*r).is_null())
        .map(|r| {
            // SAFETY: a static NUL-terminated name (NULL excluded).
            let name = unsafe { CStr::from_ptr(hg_reason_name(r)) };
            (
                name.to_str().unwrap().to_string(),
                json!(counts[r as usize]),
            )
        })
        .collect()
}

fn stats_json(s: &hg_stats) -> Value {
    let rejected = by_reason(&s.rejected);
    json!({
        "revision": s.revision, "orphaned_in_flight": s.orphaned_in_flight,
        "observe": observe_name(s.observe), "observed_by_reason": by_reason(&s.observed),
        "load": s.load_present.then(|| json!({
            "event_loop_lag_ns": s.load_event_loop_lag_ns, "cpu_permille": s.load_cpu_permille,
            "overloaded": u64::from(s.load_overloaded), "shed_total": s.load_shed_total,
        })),
        "budget": s.budget_present.then(|| json!({
            "limit": s.budget_limit, "max_budget": s.budget_max, "in_use": s.budget_in_use,
            "available": s.budget_available, "granted_unclaimed": s.budget_granted_unclaimed,
            "reserved_total": s.budget_reserved_total, "consumed_total": s.budget_consumed_total,
            "refunded_total": s.budget_refunded_total, "overrun_total": s.budget_overrun_total,
            "overrun_held": s.budget_overrun_held, "queued_cost": s.budget_queued_cost,
        })),
        "active": s.active, "queued": s.queued, "granted_unclaimed": s.granted_unclaimed,
        "limit": s.limit, "max_concurrent": s.max_concurrent, "available": s.available,
        "admitted_total": s.admitted_total, "rejected_by_reason": rejected,
        "released_twice_total": s.released_twice_total, "leaked_total": s.leaked_total,
        "ring_free": s.ring_free, "queue_wait_count": s.queue_wait_count,
        "queue_wait_sum_ns": s.queue_wait_sum_ns, "queue_wait_max_ns": s.queue_wait_max_ns,
        "circuit": s.circuit_present.then(|| json!({
            "state": state_name(s.circuit_state), "generation": s.circuit_generation,
            "consecutive_failures": s.circuit_consecutive_failures,
            "window_requests": s.circuit_window_requests,
            "window_failures": s.circuit_window_failures,
        })),
        "adaptive": s.adaptive_present.then(|| json!({
            "algorithm": match s.adaptive_algorithm {
                hg_adaptive_algorithm::HG_ADAPTIVE_AIMD => "aimd",
                hg_adaptive_algorithm::HG_ADAPTIVE_GRADIENT2 => "gradient2",
            },
            "limit": s.adaptive_limit, "min_limit": s.adaptive_min_limit,
            "max_limit": s.adaptive_max_limit, "samples_total": s.adaptive_samples_total,
            "decreases_total": s.adaptive_decreases_total,
        })),
    })
}

/// A vector's rate `{amount, per_ms, burst}` (absent: none).
fn rate_of(r: Option<&Value>) -> hg_rate {
    r.map_or(hg_rate::default(), |r| {
        let n = |k: &str| r[k].as_u64().unwrap();
        hg_rate {
            amount: n("amount"),
            per_ms: n("per_ms"),
            burst: n("burst"),
        }
    })
}

/// The host clock handed to `hg_bulkhead_new_with_clock`: the runner's virtual ns.
unsafe extern "C" fn virtual_now_ns(user_data: *mut c_void) -> u64 {
    // SAFETY: `user_data` is the runner's boxed clock, alive as long as the bulkhead.
    unsafe { &*user_data.cast::<std::sync::atomic::AtomicU64>() }
        .load(std::sync::atomic::Ordering::SeqCst)
}

fn key_bytes(k: &str) -> (*const c_char, usize) {
    (k.as_ptr().cast(), k.len())
}

impl Runner {
    fn new(v: &Value, polling: bool) -> Self {
        let clock = Box::new(std::sync::atomic::AtomicU64::new(0));
        let clock_data = (&raw const *clock).cast_mut().cast::<c_void>();
        let events: Box<EventLog> = Box::default();
        let mut universe = BTreeSet::new();
        let mut default_timeouts = HashMap::new();
        let mut registry_override_timeouts = HashMap::new();
        let global = v.get("registry").and_then(|r| r.get("global")).is_some();
        let target = if let Some(r) = v.get("registry") {
            let (defaults, t) = config(r.get("defaults"), &events);
            default_timeouts.insert(String::new(), t);
            // Overrides are built from the defaults of hg_config_default, as the Rust runner's
            // are from Config::default().
            let overrides: Vec<(String, hg_config)> = r
                .get("overrides")
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, c)| {
                            let merged = vectors::merge(r.get("defaults"), c, 0);
                            let (c, t) = config(Some(&merged), &events);
                            registry_override_timeouts.insert(k.clone(), t);
                            universe.insert(k.clone());
                            (k.clone(), c)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let entries: Vec<hg_registry_override> = overrides
                .iter()
                .map(|(k, c)| {
                    let (key, key_len) = key_bytes(k);
                    hg_registry_override {
                        key,
                        key_len,
                        config: c,
                    }
                })
                .collect();
            let max_keys = r.get("max_keys").and_then(Value::as_u64).unwrap_or(1024);
            let cap = |k: &str| r.get("global").map_or(0, |g| g[k].as_u64().unwrap());
            let options = hg_registry_options {
                struct_size: size_of::<hg_registry_options>() as u32,
                max_keys,
                global_limit: cap("limit"),
                global_max_queue: cap("max_queue"),
                now_ns: Some(virtual_now_ns),
                now_ns_user_data: clock_data,
            };
            let mut reg = ptr::null_mut();
            let s = hg_registry_new_with_options(
                &defaults,
                entries.as_ptr(),
                entries.len(),
                &options,
                &mut reg,
            );
            assert_eq!(s, hg_status::HG_STATUS_OK);
            Target::Registry(reg)
        } else if let Some(t) = v.get("classes") {
            // A classed bulkhead (docs/design.md §4.8): an `hg_class` array and the table.
            let (c, to) = config(v.get("config"), &events);
            default_timeouts.insert(String::new(), to);
            let n = |o: &Value, k: &str| o.get(k).and_then(Value::as_u64);
            let classes: Vec<hg_class> = t["classes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| {
                    let mut c = std::mem::MaybeUninit::<hg_class>::uninit();
                    assert_eq!(hg_class_default(c.as_mut_ptr()), hg_status::HG_STATUS_OK);
                    // SAFETY: written by hg_class_default.
                    let mut c = unsafe { c.assume_init() };
                    c.priority = n(k, "priority").unwrap_or(0) as u32;
                    c.floor = n(k, "floor").unwrap_or(0);
                    c.ceiling = n(k, "ceiling").unwrap_or(HG_UNSET);
                    c.budget_floor = n(k, "budget_floor").unwrap_or(0);
                    c.budget_ceiling = n(k, "budget_ceiling").unwrap_or(HG_UNSET);
                    c.observe = k.get("observe").map_or(0, observe_number);
                    c
                })
                .collect();
            let reserve = t.get("reserve").unwrap_or(&Value::Null);
            let rn = |k: &str| reserve.get(k).and_then(Value::as_u64).unwrap_or(0);
            let rates = t.get("rates").unwrap_or(&Value::Null);
            let table = hg_class_table {
                struct_size: size_of::<hg_class_table>() as u32,
                classes: classes.as_ptr(),
                classes_len: classes.len(),
                lending: u8::from(t.get("lending").and_then(Value::as_bool).unwrap_or(false)),
                shed: u8::from(t.get("shed").and_then(Value::as_bool).unwrap_or(false)),
                reserve_min_priority: rn("min_priority") as u32,
                reserve_permits: rn("permits"),
                reserve_budget: rn("budget"),
                requests: rate_of(rates.get("requests")),
                units: rate_of(rates.get("units")),
            };
            let mut bh = ptr::null_mut();
            assert_eq!(
                hg_bulkhead_new_with_classes(&c, &table, Some(virtual_now_ns), clock_data, &mut bh),
                hg_status::HG_STATUS_OK
            );
            Target::Single(Bh(bh))
        } else {
            let (c, t) = config(v.get("config"), &events);
            default_timeouts.insert(String::new(), t);
            let mut bh = ptr::null_mut();
            assert_eq!(
                hg_bulkhead_new_with_clock(&c, Some(virtual_now_ns), clock_data, &mut bh),
                hg_status::HG_STATUS_OK
            );
            Target::Single(Bh(bh))
        };
        for step in v["steps"].as_array().unwrap() {
            if let Some(k) = step.get("key").and_then(Value::as_str) {
                universe.insert(k.to_string());
            }
            if step["op"] == "keys" {
                for k in step["expect"].as_array().unwrap() {
                    universe.insert(k.as_str().unwrap().to_string());
                }
            }
        }
        Runner {
            name: v["name"].as_str().unwrap().to_string(),
            target,
            default_timeouts,
            registry_override_timeouts,
            universe,
            acquires: HashMap::new(),
            key_of: HashMap::new(),
            asked: HashMap::new(),
            rec: HashMap::new(),
            global,
            polling,
            slots: Vec::new(),
            timers: BTreeMap::new(),
            now_ns: 0,
            clock,
            events,
            seq: 0,
        }
    }

    /// The bulkhead of this vector (a new reference), or of `key` in the registry.
    fn bulkhead(&self, key: Option<&str>) -> Result<Bh, hg_status> {
        match (&self.target, key) {
            (Target::Single(b), None) => Ok(Bh(hullguard::hg_bulkhead_retain(b.0).cast_mut())),
            (Target::Registry(r), Some(k)) => {
                let (kp, kl) = key_bytes(k);
                let mut out = ptr::null_mut();
                match hg_registry_get(*r, kp, kl, &mut out) {
                    hg_status::HG_STATUS_OK => Ok(Bh(out)),
                    s => Err(s),
                }
            }
            _ => panic!(
                "{}: `key` must be given exactly for registry vectors",
                self.name
            ),
        }
    }

    /// The queue timeout of `key`'s bulkhead in ms (`None` = infinite).
    fn queue_timeout(&self, key: Option<&str>) -> Option<u64> {
        if let Some(t) = key.and_then(|k| self.registry_override_timeouts.get(k)) {
            return *t;
        }
        self.default_timeouts[""]
    }

    fn new_slot(&mut self) -> usize {
        self.slots.push(Box::default());
        self.slots.len() - 1
    }

    fn acquire(&mut self, step: &Value, queue: bool) -> String {
        let id = step["id"].as_str().unwrap().to_string();
        let key = step.get("key").and_then(Value::as_str);
        // As the Rust runner: weight and cost unchecked (the core refuses bad ones).
        let weight = step.get("weight").map_or(1, |w| w.as_u64().unwrap_or(0));
        let cost = step
            .get("cost")
            .map_or(0, |c| c.as_u64().unwrap_or(u64::MAX));
        let class = step.get("class").map_or(0, |c| c.as_u64().unwrap() as u32);
        self.key_of.insert(id.clone(), key.map(str::to_string));
        self.asked.insert(id.clone(), (weight, cost));
        let timeout = match step.get("timeout_ms") {
            None => self.queue_timeout(key),
            Some(Value::String(_)) => None,
            Some(t) => Some(t.as_u64().unwrap()),
        };
        let mut detail = hg_rejection {
            struct_size: size_of::<hg_rejection>() as u32,
            ..Default::default()
        };
        let mut req = request_default();
        req.weight = weight;
        req.cost = cost;
        req.class_index = class;
        req.detail = &raw mut detail;
        // An absolute deadline on the virtual clock (docs/design.md §5.9).
        match step.get("deadline_ms") {
            None | Some(Value::String(_)) => {}
            Some(d) => {
                req.has_deadline = 1;
                req.deadline_ns = d.as_u64().unwrap().saturating_mul(1_000_000);
            }
        }
        let mut permit = ptr::null_mut();
        let s = if !queue {
            let s = match (&self.target, key) {
                (Target::Registry(r), Some(k)) => {
                    let (kp, kl) = key_bytes(k);
                    hg_registry_try_acquire_request(*r, kp, kl, &req, &mut permit)
                }
                (Target::Single(b), None) => {
                    hg_bulkhead_try_acquire_request(b.0, &req, &mut permit)
                }
                _ => panic!(
                    "{}: `key` must be given exactly for registry vectors",
                    self.name
                ),
            };
            self.settle_now(id.clone(), s, permit, None);
            s
        } else {
            if self.polling {
                return self.enqueue(step, &id, key, req, timeout, &mut detail);
            }
            // 0: do not queue. Otherwise no real deadline: the runner's virtual timer owns it.
            req.timeout_ms = if timeout == Some(0) {
                0
            } else {
                HG_TIMEOUT_INFINITE
            };
            let slot = self.new_slot();
            let user_data = ptr::from_ref::<RefCell<Slot>>(&*self.slots[slot])
                .cast_mut()
                .cast();
            let mut ticket: hg_ticket = 0;
            let mut queue_bh: *mut hg_bulkhead = ptr::null_mut();
            let s = match (&self.target, key) {
                (Target::Registry(r), Some(k)) => {
                    let (kp, kl) = key_bytes(k);
                    hg_registry_acquire_async_request(
                        *r,
                        kp,
                        kl,
                        &req,
                        Some(on_settle),
                        user_data,
                        &mut permit,
                        &mut queue_bh,
                        &mut ticket,
                    )
                }
                (Target::Single(b), None) => {
                    let s = hg_bulkhead_acquire_async_request(
                        b.0,
                        &req,
                        Some(on_settle),
                        user_data,
                        &mut permit,
                        &mut ticket,
                    );
                    if s == hg_status::HG_STATUS_QUEUED {
                        queue_bh = hullguard::hg_bulkhead_retain(b.0).cast_mut();
                    }
                    s
                }
                _ => panic!(
                    "{}: `key` must be given exactly for registry vectors",
                    self.name
                ),
            };
            if s == hg_status::HG_STATUS_QUEUED {
                assert!(
                    !queue_bh.is_null(),
                    "{}: no queue handle for {id}",
                    self.name
                );
                if let Some(ms) = timeout {
                    self.seq += 1;
                    self.timers
                        .insert((self.now_ns + ms * 1_000_000, self.seq), id.clone());
                }
                let bh = Bh(queue_bh);
                let slot = Some(slot);
                self.acquires
                    .insert(id.clone(), State::Queued { bh, ticket, slot });
            } else {
                assert!(queue_bh.is_null(), "{}: a queue handle for {id}", self.name);
                assert_eq!(
                    self.slots[slot].borrow().calls,
                    0,
                    "{}: callback of {id} ran",
                    self.name
                );
                self.settle_now(id.clone(), s, permit, None);
            }
            s
        };
        self.check_detail(step, &id, s, &detail);
        outcome(s)
    }

    /// The polling path of a queued acquire (`hg_*_enqueue_request`): the request carries its
    /// real timeout (the admission reads it: a rate that conforms only after it refuses at
    /// once); the library arms no timer, the runner's virtual timer settles it.
    fn enqueue(
        &mut self,
        step: &Value,
        id: &str,
        key: Option<&str>,
        mut req: hg_request,
        timeout: Option<u64>,
        detail: &mut hg_rejection,
    ) -> String {
        req.timeout_ms = match step.get("timeout_ms") {
            None => hullguard::HG_TIMEOUT_DEFAULT,
            Some(Value::String(_)) => HG_TIMEOUT_INFINITE,
            Some(t) => t.as_u64().unwrap(),
        };
        req.detail = detail;
        let mut permit = ptr::null_mut();
        let mut ticket: hg_ticket = 0;
        let mut queue_bh: *mut hg_bulkhead = ptr::null_mut();
        let s = match (&self.target, key) {
            (Target::Registry(r), Some(k)) => {
                let (kp, kl) = key_bytes(k);
                hg_registry_enqueue_request(
                    *r,
                    kp,
                    kl,
                    &req,
                    &mut permit,
                    &mut queue_bh,
                    &mut ticket,
                )
            }
            (Target::Single(b), None) => {
                let s = hg_bulkhead_enqueue_request(b.0, &req, &mut permit, &mut ticket);
                if s == hg_status::HG_STATUS_QUEUED {
                    queue_bh = hullguard::hg_bulkhead_retain(b.0).cast_mut();
                }
                s
            }
            _ => panic!(
                "{}: `key` must be given exactly for registry vectors",
                self.name
            ),
        };
        // A deadline caps the wait: the host arms what the library says
        // (`hg_bulkhead_queue_wait_ms`, read before the admission, on the same clock reading).
        let timeout = if req.has_deadline == 0 {
            timeout
        } else {
            let mut ms = 0;
            // The bulkhead the request waits in: the single one, or the key's (a handle from
            // the registry, freed after reading).
            let (b, key_handle) = match (&self.target, key) {
                (Target::Single(b), None) => (b.0.cast_const(), None),
                (Target::Registry(r), Some(k)) => {
                    let (kp, kl) = key_bytes(k);
                    let mut h = ptr::null_mut();
                    assert_eq!(
                        hullguard::hg_registry_get(*r, kp, kl, &mut h),
                        hg_status::HG_STATUS_OK
                    );
                    (h.cast_const(), Some(h))
                }
                _ => panic!(
                    "{}: `key` must be given exactly for registry vectors",
                    self.name
                ),
            };
            assert_eq!(
                hullguard::hg_bulkhead_queue_wait_ms(b, &req, &mut ms),
                hg_status::HG_STATUS_OK
            );
            if let Some(h) = key_handle {
                hullguard::hg_bulkhead_free(h);
            }
            (ms != HG_TIMEOUT_INFINITE).then_some(ms)
        };
        if s == hg_status::HG_STATUS_QUEUED {
            assert!(
                !queue_bh.is_null(),
                "{}: no queue handle for {id}",
                self.name
            );
            if let Some(ms) =
                timeout.filter(|_| req.timeout_ms != HG_TIMEOUT_INFINITE || req.has_deadline != 0)
            {
                self.seq += 1;
                self.timers
                    .insert((self.now_ns + ms * 1_000_000, self.seq), id.to_string());
            }
            let bh = Bh(queue_bh);
            let st = State::Queued {
                bh,
                ticket,
                slot: None,
            };
            self.acquires.insert(id.to_string(), st);
        } else {
            assert!(queue_bh.is_null(), "{}: a queue handle for {id}", self.name);
            self.settle_now(id.to_string(), s, permit, None);
        }
        self.check_detail(step, id, s, detail);
        outcome(s)
    }

    /// A refusal's detail against the step's `bound` and `retry_after_ms`.
    fn check_detail(&self, step: &Value, id: &str, s: hg_status, detail: &hg_rejection) {
        if (s as u32) >= 2000 {
            assert_eq!(
                detail.reason,
                s as u32 - 2000,
                "{}: detail of {id}",
                self.name
            );
            // The constraint that bound, when the step names it (docs/design.md §5.7).
            if let Some(want) = step.get("bound") {
                // SAFETY: a static NUL-terminated name.
                let got = unsafe { CStr::from_ptr(hg_bound_name(detail.bound)) };
                assert_eq!(
                    got.to_str().unwrap(),
                    want.as_str().unwrap(),
                    "{}: the bound of {id}",
                    self.name
                );
            }
            // A rate refusal's time until it conforms (docs/design.md §4.9).
            if let Some(want) = step.get("retry_after_ms") {
                let got =
                    (detail.retry_after_ms != HG_TIMEOUT_INFINITE).then_some(detail.retry_after_ms);
                assert_eq!(got, want.as_u64(), "{}: the retry time of {id}", self.name);
            }
        } else {
            assert_eq!(detail.struct_size as usize, size_of::<hg_rejection>());
            assert!(
                step.get("bound").is_none() && step.get("retry_after_ms").is_none(),
                "{}: {id} has no rejection detail ({s:?})",
                self.name
            );
        }
    }

    fn settle_now(
        &mut self,
        id: String,
        s: hg_status,
        permit: *mut hg_permit,
        t: Option<hg_ticket>,
    ) {
        let st = if s == hg_status::HG_STATUS_OK {
            assert!(!permit.is_null());
            let (weight, cost) = self.asked[&id];
            self.rec.insert(
                id.clone(),
                Rec {
                    weight,
                    cost,
                    ..Rec::default()
                },
            );
            State::Permit { permit, ticket: t }
        } else {
            assert!(permit.is_null() || s == hg_status::HG_STATUS_QUEUED);
            State::Rejected { ticket: t }
        };
        self.acquires.insert(id, st);
    }

    /// Collects the queued acquires whose callback ran (the Rust runner polls their tickets).
    fn collect_settled(&mut self, settled: &mut BTreeMap<String, String>) {
        let ids: Vec<String> = self
            .acquires
            .iter()
            .filter(|(_, st)| matches!(st, State::Queued { .. }))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let Some(State::Queued { bh, slot, ticket }) = self.acquires.get(&id) else {
                unreachable!()
            };
            let (slot, ticket) = (*slot, *ticket);
            let Some(slot) = slot else {
                // A polling ticket: poll it (as the Rust runner polls its waiters).
                let mut permit = ptr::null_mut();
                let status = hg_ticket_poll(bh.0, ticket, &mut permit);
                if status == hg_status::HG_STATUS_QUEUED {
                    continue;
                }
                assert_ne!(status, hg_status::HG_STATUS_ALREADY_SETTLED, "{id}");
                settled.insert(id.clone(), outcome(status));
                self.settle_now(id, status, permit, Some(ticket));
                continue;
            };
            let s = self.slots[slot].borrow();
            let Some(status) = s.status else { continue };
            assert_eq!(
                s.calls, 1,
                "{}: callback of {id} ran {} times",
                self.name, s.calls
            );
            let permit = s.permit as *mut hg_permit;
            drop(s);
            settled.insert(id.clone(), outcome(status));
            // Dropping the Queued state frees its outside handle, as the Rust runner's Held /
            // Rejected states keep none once the permit is released.
            self.settle_now(id, status, permit, Some(ticket));
        }
    }

    /// Moves the virtual clock (the runner's and the bulkhead's host clock).
    fn set_clock(&mut self, ns: u64) {
        self.now_ns = ns;
        self.clock.store(ns, std::sync::atomic::Ordering::SeqCst);
    }

    /// The step would need an ABI piece that does not exist? (None does any more: timers settle
    /// through `hg_ticket_cancel_reason` and the clock is `hg_bulkhead_new_with_clock`'s.)
    fn check_supported(&self, _step: &Value) -> Result<(), Unsupported> {
        Ok(())
    }

    fn stats(&self, key: Option<&str>) -> hg_stats {
        let mut s = hg_stats {
            struct_size: size_of::<hg_stats>() as u32,
            ..Default::default()
        };
        let st = match (&self.target, key) {
            (Target::Single(b), None) => hg_bulkhead_stats(b.0, &mut s),
            (Target::Registry(r), Some(k)) => {
                let (kp, kl) = key_bytes(k);
                hg_registry_stats(*r, kp, kl, &mut s)
            }
            _ => panic!("{}: bad key", self.name),
        };
        assert_eq!(
            st,
            hg_status::HG_STATUS_OK,
            "{}: stats of {key:?}",
            self.name
        );
        s
    }

    /// The keys that exist: those `hg_registry_stats` finds (it neither creates nor touches).
    fn existing_keys(&self) -> Vec<String> {
        let Target::Registry(r) = &self.target else {
            return vec![];
        };
        self.universe
            .iter()
            .filter(|k| {
                let mut s = hg_stats {
                    struct_size: size_of::<hg_stats>() as u32,
                    ..Default::default()
                };
                let (kp, kl) = key_bytes(k);
                match hg_registry_stats(*r, kp, kl, &mut s) {
                    hg_status::HG_STATUS_OK => true,
                    hg_status::HG_STATUS_INVALID_ARGUMENT => false,
                    other => panic!("hg_registry_stats({k}) -> {other:?}"),
                }
            })
            .cloned()
            .collect()
    }

    /// The permit `id` holds (panics if it holds none).
    fn permit_of(&self, ctx: &str, id: &str) -> *mut hg_permit {
        match self.acquires.get(id) {
            Some(State::Permit { permit, .. }) => *permit,
            _ => panic!("{ctx}: {id} holds no permit"),
        }
    }

    /// Every existing key's stats as text (a dry run must change none).
    fn all_stats(&self) -> String {
        match &self.target {
            Target::Single(_) => format!("{:?}", self.stats(None)),
            Target::Registry(_) => {
                let keys = self.existing_keys();
                let all: Vec<String> = keys
                    .iter()
                    .map(|k| format!("{k}: {:?}", self.stats(Some(k))))
                    .collect();
                all.join("\n")
            }
        }
    }

    /// When the host's rate timer is due (virtual ns), if a head is held back by a rate.
    fn rate_due(&self) -> Option<u64> {
        match &self.target {
            Target::Single(b) => {
                let d = hg_bulkhead_rate_retry_after_ns(b.0);
                (d != HG_TIMEOUT_INFINITE).then(|| self.now_ns + d)
            }
            Target::Registry(_) => None,
        }
    }

    fn step(&mut self, i: usize, step: &Value) -> Result<(), Unsupported> {
        let ctx = format!("{} step {i} {step}", self.name);
        self.check_supported(step)?;
        let op = step["op"].as_str().unwrap();
        let key = step.get("key").and_then(Value::as_str);
        let mut settled = BTreeMap::new();
        match op {
            "acquire" | "try_acquire" => {
                let got = self.acquire(step, op == "acquire");
                assert_eq!(got, step["expect"].as_str().unwrap(), "{ctx}");
            }
            "release" | "record_outcome" => {
                let id = step["id"].as_str().unwrap();
                let expect = step.get("expect").and_then(Value::as_bool).unwrap_or(true);
                let permit = self.permit_of(&ctx, id);
                let o = step
                    .get("outcome")
                    .and_then(Value::as_str)
                    .map(|o| match o {
                        "success" => hg_outcome::HG_OUTCOME_SUCCESS,
                        "failure" => hg_outcome::HG_OUTCOME_FAILURE,
                        "ignored" => hg_outcome::HG_OUTCOME_IGNORED,
                        "overload" => hg_outcome::HG_OUTCOME_OVERLOAD,
                        other => panic!("{ctx}: unknown outcome {other:?}"),
                    });
                // Without an outcome or usage: the plain release (a success, docs/design.md);
                // with usage reported, the unused rest is refunded, the excess overrun.
                let status = match (step.get("used").and_then(Value::as_u64), o) {
                    (Some(used), o) => {
                        let o = o.unwrap_or(hg_outcome::HG_OUTCOME_SUCCESS);
                        hg_permit_release_usage(permit, o as u32, used)
                    }
                    (None, None) => hg_permit_release(permit),
                    (None, Some(o)) => hg_permit_release_outcome(permit, o as u32),
                };
                let released = match status {
                    hg_status::HG_STATUS_OK => {
                        let held = self.rec.remove(id);
                        assert!(held.is_some(), "{ctx}: released twice with OK");
                        true
                    }
                    hg_status::HG_STATUS_ALREADY_RELEASED => false,
                    s => panic!("{ctx}: hg_permit_release -> {s:?}"),
                };
                assert_eq!(released, expect, "{ctx}");
            }
            "orphan" => {
                // The call hands its permits back while its work goes on (docs/design.md
                // §5.3): the runner holds none of them from here on (its units stay held).
                let id = step["id"].as_str().unwrap();
                let permit = self.permit_of(&ctx, id);
                let got = match hg_permit_orphan(permit) {
                    hg_status::HG_STATUS_OK => {
                        self.rec.get_mut(id).unwrap().weight = 0;
                        "ok"
                    }
                    hg_status::HG_STATUS_ALREADY_SETTLED => "none",
                    hg_status::HG_STATUS_ORPHAN_LIMIT => "refused",
                    s => panic!("{ctx}: hg_permit_orphan -> {s:?}"),
                };
                assert_eq!(got, step["expect"].as_str().unwrap(), "{ctx}");
            }
            "release_partial" => {
                let id = step["id"].as_str().unwrap();
                let n = step["n"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let permit = self.permit_of(&ctx, id);
                let got = match hg_permit_release_partial(permit, n) {
                    hg_status::HG_STATUS_OK => {
                        // Units return with the last permit (docs/design.md §4.5).
                        let r = self.rec.get_mut(id).unwrap();
                        r.weight -= n;
                        if r.weight == 0 {
                            (r.cost, r.overrun) = (0, 0);
                        }
                        "ok"
                    }
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    s => panic!("{ctx}: hg_permit_release_partial -> {s:?}"),
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "refund" => {
                let id = step["id"].as_str().unwrap();
                let n = step["n"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let permit = self.permit_of(&ctx, id);
                let got = match hg_permit_refund(permit, n) {
                    hg_status::HG_STATUS_OK => {
                        // The part held past the budget goes first (docs/design.md §4.5).
                        let r = self.rec.get_mut(id).unwrap();
                        let over = n.min(r.overrun);
                        (r.overrun, r.cost) = (r.overrun - over, r.cost - (n - over));
                        "ok"
                    }
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    s => panic!("{ctx}: hg_permit_refund -> {s:?}"),
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "report_usage" => {
                let id = step["id"].as_str().unwrap();
                let used = step["used"].as_u64().unwrap();
                let remaining = step.get("remaining").and_then(Value::as_u64).unwrap_or(0);
                let expect = step["expect"].as_str().unwrap();
                let permit = self.permit_of(&ctx, id);
                let mut out = hg_usage_report {
                    struct_size: size_of::<hg_usage_report>() as u32,
                    change: 0,
                    cancel: false,
                    used: 0,
                    held: 0,
                    overrun: 0,
                    by: 0,
                };
                let got = match hg_permit_report_usage(permit, used, remaining, &mut out) {
                    hg_status::HG_STATUS_OK => {
                        let want = step.get("cancel").and_then(Value::as_bool).unwrap_or(false);
                        assert_eq!(out.cancel, want, "{ctx}: cancel");
                        assert_eq!(
                            hullguard::hg_permit_cancel_requested(permit) || out.cancel,
                            hullguard::hg_permit_cancel_requested(permit),
                            "{ctx}"
                        );
                        match out.change {
                            c if c == hg_hold_change::HG_HOLD_UNCHANGED as u32 => "unchanged",
                            c if c == hg_hold_change::HG_HOLD_SHRANK as u32 => "shrank",
                            c if c == hg_hold_change::HG_HOLD_GREW as u32 => "grew",
                            c if c == hg_hold_change::HG_HOLD_OVERRAN as u32 => "overran",
                            c => panic!("{ctx}: unknown change {c}"),
                        }
                    }
                    hg_status::HG_STATUS_USAGE_DECREASED => "decreased",
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    hg_status::HG_STATUS_ALREADY_RELEASED => "released",
                    s => panic!("{ctx}: hg_permit_report_usage -> {s:?}"),
                };
                assert_eq!(got, expect, "{ctx}");
                let r = self.rec.get_mut(id).unwrap();
                if r.weight > 0 {
                    assert_eq!(
                        got == "decreased",
                        used < r.reported,
                        "{ctx}: cumulative usage"
                    );
                }
                // The runner's own record, from the step (as the Rust runner).
                if matches!(got, "unchanged" | "shrank" | "grew" | "overran") && r.weight > 0 {
                    r.reported = used;
                    let (target, held) = (used + remaining, r.cost + r.overrun);
                    if target < held {
                        let over = (held - target).min(r.overrun);
                        (r.overrun, r.cost) = (r.overrun - over, r.cost - (held - target - over));
                    } else if got == "grew" {
                        r.cost += target - held;
                    } else if got == "overran" {
                        r.overrun += target - held;
                    }
                    if let Some(by) = step.get("by").and_then(Value::as_u64) {
                        assert_eq!(by, target.abs_diff(held), "{ctx}: the change");
                        assert_eq!(by, out.by, "{ctx}: hg_usage_report.by");
                    }
                }
            }
            "apply_limits" => {
                let mut l = std::mem::MaybeUninit::<hg_limits>::uninit();
                assert_eq!(hg_limits_default(l.as_mut_ptr()), hg_status::HG_STATUS_OK);
                // SAFETY: written by hg_limits_default.
                let mut l = unsafe { l.assume_init() };
                let mut current = u64::MAX;
                l.current_revision = &raw mut current;
                l.revision = step["revision"].as_u64().unwrap_or(0);
                let n = |k: &str, unset: u64| {
                    step.get(k)
                        .map_or(unset, |x| x.as_u64().unwrap_or(u64::MAX))
                };
                l.limit = n("limit", HG_UNSET);
                l.budget = n("budget", HG_UNSET);
                l.max_queue = n("max_queue", HG_UNSET);
                l.queue_timeout_ms = match step.get("queue_timeout_ms") {
                    None => HG_UNSET,
                    Some(Value::String(_)) => HG_TIMEOUT_INFINITE,
                    Some(t) => t.as_u64().unwrap(),
                };
                if let Some(r) = step.get("reserve") {
                    let rn = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
                    l.has_reserve = 1;
                    l.reserve_permits = rn("permits");
                    l.reserve_budget = rn("budget");
                    l.reserve_min_priority = rn("min_priority") as u32;
                }
                if let Some(r) = step.get("rates") {
                    l.has_rates = 1;
                    l.requests = rate_of(r.get("requests"));
                    l.units = rate_of(r.get("units"));
                }
                let before = self.stats(key);
                let bh = self
                    .bulkhead(key)
                    .unwrap_or_else(|s| panic!("{ctx}: {s:?}"));
                let got = match hg_bulkhead_apply_limits(bh.0, &l) {
                    hg_status::HG_STATUS_OK => {
                        // The runner's record of the default queue timeout (its timers).
                        if let Some(t) = step.get("queue_timeout_ms") {
                            let t = t.as_u64();
                            match key {
                                Some(k) => self.registry_override_timeouts.insert(k.into(), t),
                                None => self.default_timeouts.insert(String::new(), t),
                            };
                        }
                        "ok"
                    }
                    hg_status::HG_STATUS_STALE => {
                        if let Some(c) = step.get("current") {
                            assert_eq!(Some(current), c.as_u64(), "{ctx}: current");
                        }
                        assert_eq!(current, before.revision, "{ctx}: current");
                        "stale"
                    }
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    s => panic!("{ctx}: hg_bulkhead_apply_limits -> {s:?}"),
                };
                drop(bh);
                if got != "ok" {
                    let after = self.stats(key);
                    assert_eq!(
                        (after.revision, after.limit, after.budget_limit),
                        (before.revision, before.limit, before.budget_limit),
                        "{ctx}: a refused apply_limits changes nothing"
                    );
                }
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                assert_eq!(got, expect, "{ctx}");
            }
            "would_admit" => {
                let mut req = request_default();
                req.weight = step.get("weight").map_or(1, |w| w.as_u64().unwrap_or(0));
                req.cost = step
                    .get("cost")
                    .map_or(0, |c| c.as_u64().unwrap_or(u64::MAX));
                req.class_index = step.get("class").map_or(0, |c| c.as_u64().unwrap() as u32);
                req.timeout_ms = match step.get("timeout_ms") {
                    None => hullguard::HG_TIMEOUT_DEFAULT,
                    Some(Value::String(_)) => HG_TIMEOUT_INFINITE,
                    Some(t) => t.as_u64().unwrap(),
                };
                let mut out = hg_would_admit {
                    struct_size: size_of::<hg_would_admit>() as u32,
                    decision: 99,
                    status: 0,
                    position: 0,
                    ahead: 0,
                };
                let before = self.all_stats();
                let s = match (&self.target, key) {
                    (Target::Registry(r), Some(k)) => {
                        let (kp, kl) = key_bytes(k);
                        hg_registry_would_admit(*r, kp, kl, &req, &mut out)
                    }
                    (Target::Single(b), None) => hg_bulkhead_would_admit(b.0, &req, &mut out),
                    _ => panic!("{ctx}: bad key"),
                };
                assert_eq!(s, hg_status::HG_STATUS_OK, "{ctx}");
                assert_eq!(self.all_stats(), before, "{ctx}: a dry run changes nothing");
                use hg_would_admit_decision::*;
                let (name, position) = match out.decision {
                    d if d == HG_WOULD_ADMIT_NOW as u32 => ("admit_now".to_string(), None),
                    d if d == HG_WOULD_QUEUE as u32 => {
                        assert_eq!(out.position, out.ahead + 1, "{ctx}");
                        ("would_queue".to_string(), Some(out.position))
                    }
                    d if d == HG_WOULD_REJECT as u32 => {
                        // SAFETY: a status this library returned is a declared `hg_status`.
                        let st = unsafe { std::mem::transmute::<u32, hg_status>(out.status) };
                        (outcome(st), None)
                    }
                    d => panic!("{ctx}: unknown decision {d}"),
                };
                assert_eq!(name, step["expect"].as_str().unwrap(), "{ctx}");
                if let Some(p) = step.get("position") {
                    assert_eq!(position, p.as_u64(), "{ctx}: position");
                }
            }
            "report_load" => {
                let bh = self
                    .bulkhead(key)
                    .unwrap_or_else(|s| panic!("{ctx}: {s:?}"));
                let lag = step
                    .get("event_loop_lag_ms")
                    .and_then(Value::as_u64)
                    .map_or(-1.0, |ms| ms as f64);
                let cpu = step.get("cpu").and_then(Value::as_f64).unwrap_or(-1.0);
                let s = hullguard::hg_bulkhead_report_load(bh.0, lag, cpu);
                assert_eq!(s, hg_status::HG_STATUS_OK, "{ctx}");
            }
            "set_observe" => {
                let mode = observe_number(&step["mode"]);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let bh = self
                    .bulkhead(key)
                    .unwrap_or_else(|s| panic!("{ctx}: {s:?}"));
                let got = match hg_bulkhead_set_observe(bh.0, mode) {
                    hg_status::HG_STATUS_OK => "ok",
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    s => panic!("{ctx}: hg_bulkhead_set_observe -> {s:?}"),
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "set_budget" => {
                let limit = step["limit"].as_u64().unwrap_or(u64::MAX);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let bh = self
                    .bulkhead(key)
                    .unwrap_or_else(|s| panic!("{ctx}: {s:?}"));
                let got = match hg_bulkhead_set_budget(bh.0, limit) {
                    hg_status::HG_STATUS_OK => "ok",
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    s => panic!("{ctx}: hg_bulkhead_set_budget -> {s:?}"),
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "cancel" => {
                let id = step["id"].as_str().unwrap();
                let expect = step
                    .get("expect")
                    .and_then(Value::as_str)
                    .unwrap_or("cancelled");
                let got = match self.acquires.get(id) {
                    Some(State::Queued { bh, ticket, slot }) => {
                        match (hg_ticket_cancel(bh.0, *ticket), slot) {
                            // A won cancel of a polling ticket settles it here, nothing more
                            // happens (an async ticket's callback has run: collected below).
                            (hg_status::HG_STATUS_OK, None) => {
                                settled.insert(id.to_string(), "aborted".to_string());
                                let ticket = Some(*ticket);
                                self.acquires
                                    .insert(id.to_string(), State::Rejected { ticket });
                                "cancelled"
                            }
                            (hg_status::HG_STATUS_OK, Some(_)) => "cancelled",
                            (hg_status::HG_STATUS_ALREADY_SETTLED, _) => "already_settled",
                            (s, _) => panic!("{ctx}: hg_ticket_cancel -> {s:?}"),
                        }
                    }
                    // Settled before: the Rust runner answers without the core; the C runner
                    // also asks the ABI when it still may (a single bulkhead: no handle to
                    // take from a registry), which must answer "already settled".
                    Some(
                        State::Permit {
                            ticket: Some(t), ..
                        }
                        | State::Rejected { ticket: Some(t) },
                    ) => {
                        if let Target::Single(b) = &self.target {
                            assert_eq!(
                                hg_ticket_cancel(b.0, *t),
                                hg_status::HG_STATUS_ALREADY_SETTLED,
                                "{ctx}"
                            );
                        }
                        "already_settled"
                    }
                    _ => "already_settled",
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "set_limit" => {
                let limit = step["limit"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let bh = self
                    .bulkhead(key)
                    .unwrap_or_else(|s| panic!("{ctx}: {s:?}"));
                let got = match hg_bulkhead_set_limit(bh.0, limit) {
                    hg_status::HG_STATUS_OK => "ok",
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    s => panic!("{ctx}: hg_bulkhead_set_limit -> {s:?}"),
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "close" => match (&self.target, key) {
                (Target::Registry(r), None) => {
                    assert_eq!(hg_registry_close(*r), hg_status::HG_STATUS_OK, "{ctx}");
                }
                _ => {
                    let bh = self
                        .bulkhead(key)
                        .unwrap_or_else(|s| panic!("{ctx}: {s:?}"));
                    assert_eq!(hg_bulkhead_close(bh.0), hg_status::HG_STATUS_OK, "{ctx}");
                }
            },
            "advance_clock" => {
                // Due timers fire in deadline order, each at its own instant: a still-queued
                // acquire is settled `timeout` through the ABI, as a host with its own timers
                // would (a grant that won first leaves the cancel `already settled`). The
                // host's rate timer (docs/design.md §4.9): a head a rate holds back is ticked
                // at its conforming time, before any later queue deadline.
                let to = self.now_ns + step["ms"].as_u64().unwrap() * 1_000_000;
                let mut rounds = 0;
                loop {
                    rounds += 1;
                    assert!(rounds < 100_000, "{ctx}: the clock does not advance");
                    let next = self.timers.first_key_value().map_or(u64::MAX, |(k, _)| k.0);
                    if let Some(at) = self.rate_due().filter(|&at| at <= next.min(to)) {
                        self.set_clock(at.max(self.now_ns));
                        if let Target::Single(b) = &self.target {
                            assert_eq!(hg_bulkhead_rate_tick(b.0), hg_status::HG_STATUS_OK);
                        }
                        self.collect_settled(&mut settled);
                        continue;
                    }
                    let Some(entry) = self.timers.first_entry() else {
                        break;
                    };
                    if entry.key().0 > to {
                        break;
                    }
                    let ((deadline, _), id) = entry.remove_entry();
                    self.set_clock(deadline);
                    self.collect_settled(&mut settled);
                    if let Some(State::Queued { bh, ticket, slot }) = self.acquires.get(&id) {
                        let s = hg_ticket_cancel_reason(
                            bh.0,
                            *ticket,
                            hg_reason::HG_REASON_TIMEOUT as u32,
                        );
                        assert!(
                            matches!(
                                s,
                                hg_status::HG_STATUS_OK | hg_status::HG_STATUS_ALREADY_SETTLED
                            ),
                            "{ctx}: hg_ticket_cancel_reason -> {s:?}"
                        );
                        if (s, slot.is_none()) == (hg_status::HG_STATUS_OK, true) {
                            settled.insert(id.clone(), "timeout".to_string());
                            let ticket = Some(*ticket);
                            self.acquires.insert(id.clone(), State::Rejected { ticket });
                        }
                        self.collect_settled(&mut settled);
                    }
                }
                self.set_clock(to);
            }
            "drain" => {
                let bh = self
                    .bulkhead(key)
                    .unwrap_or_else(|s| panic!("{ctx}: {s:?}"));
                let mut r = hg_drain_result::default();
                assert_eq!(hg_bulkhead_drain(bh.0, 0, &mut r), hg_status::HG_STATUS_OK);
                let got = json!({"drained": r.drained, "active": r.active, "queued": r.queued});
                vectors::subset(&ctx, &step["expect"], &got);
            }
            "stats" => {
                let s = self.stats(key);
                let want = &step["expect"];
                vectors::subset(&ctx, want, &stats_json(&s));
            }
            "class_stats" => {
                let Target::Single(b) = &self.target else {
                    panic!("{ctx}: not a single bulkhead")
                };
                let mut c = hg_class_stats {
                    struct_size: size_of::<hg_class_stats>() as u32,
                    ..Default::default()
                };
                let k = step["class"].as_u64().unwrap() as u32;
                let s = hg_bulkhead_class_stats(b.0, k, &mut c);
                assert_eq!(s, hg_status::HG_STATUS_OK, "{ctx}: no class {k}");
                let got = json!({
                    "in_flight": c.in_flight,
                    "queued": c.queued,
                    "shared_in_use": c.shared_permits_in_use,
                });
                vectors::subset(&ctx, &step["expect"], &got);
            }
            "key_stats" => {
                let c = self
                    .key_stats(key.unwrap())
                    .unwrap_or_else(|| panic!("{ctx}: no key stats (no global cap, or no key)"));
                let got = json!({
                    "in_flight": c.in_flight,
                    "queued": c.queued,
                    "ceiling": c.ceiling,
                    "observed": c.observed,
                });
                vectors::subset(&ctx, &step["expect"], &got);
            }
            "expect_state" => {
                let s = self.stats(key);
                assert!(s.circuit_present, "{ctx}: no breaker");
                assert_eq!(
                    state_name(s.circuit_state),
                    step["state"].as_str().unwrap(),
                    "{ctx}"
                );
            }
            "expect_events" => {
                let got = std::mem::take(&mut *self.events.lock().unwrap());
                assert_eq!(Value::Array(got), step["events"], "{ctx}: events");
            }
            "keys" => {
                assert!(
                    matches!(self.target, Target::Registry(_)),
                    "{ctx}: not a registry"
                );
                assert_eq!(json!(self.existing_keys()), step["expect"], "{ctx}");
            }
            other => panic!("{ctx}: unknown op {other:?}"),
        }
        // Every step runs to quiescence: collect what settled, then compare exactly.
        self.collect_settled(&mut settled);
        let want = vectors::settles(step);
        assert_eq!(
            settled,
            want,
            "{ctx}: settles (at {} ms)",
            self.now_ns / 1_000_000
        );
        self.check_invariants(&ctx);
        Ok(())
    }

    /// Under a global cap, `key`'s own counts (`None`: no such key, or no cap).
    fn key_stats(&self, key: &str) -> Option<hg_class_stats> {
        let Target::Registry(r) = &self.target else {
            return None;
        };
        let mut c = hg_class_stats {
            struct_size: size_of::<hg_class_stats>() as u32,
            ..Default::default()
        };
        let (kp, kl) = key_bytes(key);
        match hg_registry_key_stats(*r, kp, kl, &mut c) {
            hg_status::HG_STATUS_OK => Some(c),
            hg_status::HG_STATUS_INVALID_ARGUMENT => None,
            s => panic!("hg_registry_key_stats -> {s:?}"),
        }
    }

    /// After every step, for every bulkhead: `active` is what the runner holds of it (its own
    /// records), `queued` its pending acquires, no grant is left unclaimed, I2 holds with the
    /// runner's count (`available + held == limit`), and the budget's counts match the units
    /// the runner holds (`vectors::check_budget`), as the Rust runner checks.
    fn check_invariants(&self, ctx: &str) {
        let mut held: BTreeMap<Option<String>, u64> = BTreeMap::new();
        let mut units: BTreeMap<Option<String>, u64> = BTreeMap::new();
        let mut over: BTreeMap<Option<String>, u64> = BTreeMap::new();
        for (id, r) in &self.rec {
            let k = self.key_of[id].clone();
            *held.entry(k.clone()).or_default() += r.weight;
            *units.entry(k.clone()).or_default() += r.cost;
            *over.entry(k).or_default() += r.overrun;
        }
        let mut queued: BTreeMap<Option<String>, u64> = BTreeMap::new();
        let mut queued_cost: BTreeMap<Option<String>, u64> = BTreeMap::new();
        for (id, st) in &self.acquires {
            if let State::Queued { .. } = st {
                let k = self.key_of[id].clone();
                *queued.entry(k.clone()).or_default() += 1;
                *queued_cost.entry(k).or_default() += self.asked[id].1;
            }
        }
        let all: Vec<(Option<String>, hg_stats)> = match &self.target {
            Target::Single(_) => vec![(None, self.stats(None))],
            Target::Registry(r) if self.global => {
                // Under a global cap: each key's class holds what the runner holds of it, and
                // the one admission what all keys hold.
                for k in self.existing_keys() {
                    let c = self.key_stats(&k).unwrap();
                    let key = Some(k);
                    let (h, q) = (
                        held.get(&key).copied().unwrap_or(0),
                        queued.get(&key).copied().unwrap_or(0),
                    );
                    assert_eq!((c.in_flight, c.queued), (h, q), "{ctx}: key {key:?}: {c:?}");
                }
                for m in [
                    &mut held,
                    &mut units,
                    &mut over,
                    &mut queued,
                    &mut queued_cost,
                ] {
                    let sum = m.values().sum();
                    *m = BTreeMap::from([(None, sum)]);
                }
                let mut g = hg_stats {
                    struct_size: size_of::<hg_stats>() as u32,
                    ..Default::default()
                };
                assert_eq!(
                    hg_registry_global_stats(*r, &mut g),
                    hg_status::HG_STATUS_OK
                );
                vec![(None, g)]
            }
            Target::Registry(_) => self
                .existing_keys()
                .into_iter()
                .map(|k| {
                    let s = self.stats(Some(&k));
                    (Some(k), s)
                })
                .collect(),
        };
        for (k, s) in &all {
            let u = units.get(k).copied().unwrap_or(0);
            let o = over.get(k).copied().unwrap_or(0);
            let text = format!("{s:?}");
            if s.budget_present {
                let q = queued_cost.get(k).copied().unwrap_or(0);
                assert_eq!(
                    s.budget_queued_cost, q,
                    "{ctx}: queued_cost of {k:?}: {text}"
                );
            }
            let b = s.budget_present.then_some(vectors::BudgetCounts {
                in_use: s.budget_in_use,
                available: s.budget_available,
                limit: s.budget_limit,
                granted_unclaimed: s.budget_granted_unclaimed,
                reserved_total: s.budget_reserved_total,
                overrun_total: s.budget_overrun_total,
                consumed_total: s.budget_consumed_total,
                refunded_total: s.budget_refunded_total,
                overrun_held: s.budget_overrun_held,
            });
            vectors::check_budget(ctx, k, (u, o), b, &text);
        }
        let all = all
            .into_iter()
            .map(|(k, s)| {
                let c = vectors::Counts {
                    active: s.active,
                    queued: s.queued,
                    granted_unclaimed: s.granted_unclaimed,
                    available: s.available,
                    limit: s.limit,
                };
                (k, c, format!("{s:?}"))
            })
            .collect();
        vectors::check_held(ctx, held, queued, all);
    }

    /// Settles everything and frees every handle, in an order that keeps every slot alive
    /// while a callback can still run: close (queued acquires are rejected `shutdown`), free
    /// the permits (nothing is queued to be granted any more), then the target.
    fn finish(mut self) {
        match &self.target {
            Target::Single(b) => assert_eq!(hg_bulkhead_close(b.0), hg_status::HG_STATUS_OK),
            Target::Registry(r) => assert_eq!(hg_registry_close(*r), hg_status::HG_STATUS_OK),
        }
        let mut settled = BTreeMap::new();
        self.collect_settled(&mut settled);
        for (_, st) in self.acquires.drain() {
            match st {
                State::Permit { permit, .. } => hg_permit_free(permit),
                State::Queued { .. } => panic!("{}: still queued after close", self.name),
                State::Rejected { .. } => {}
            }
        }
        match &self.target {
            Target::Single(_) => {}
            Target::Registry(r) => hg_registry_free(*r),
        }
        // `self.target` (a Single's Bh) is freed on drop, then the slots.
    }
}

/// Runs one vector with async acquires; `Err((step, why))` when it needs an ABI piece that does
/// not exist.
fn run(v: &Value) -> Result<(), (usize, String)> {
    run_in(v, false)
}

/// Runs one vector, its queued acquires async (callbacks) or `polling` (tickets).
fn run_in(v: &Value, polling: bool) -> Result<(), (usize, String)> {
    let mut r = Runner::new(v, polling);
    let mut result = Ok(());
    for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        if let Err(Unsupported(why)) = r.step(i, step) {
            result = Err((i, why));
            break;
        }
    }
    r.finish();
    result
}

/// Validates and runs every vector of `dir` (none if it does not exist); returns
/// (files, run in full, skipped descriptions).
fn run_dir(
    dir: &Path,
    validator: &vectors::Validator,
    names: &mut HashSet<String>,
    polling: bool,
) -> (usize, usize, Vec<String>) {
    let mut skipped = Vec::new();
    let mut full = 0;
    let n = if dir.is_dir() {
        vectors::for_each(dir, validator, names, |v| match run_in(v, polling) {
            Ok(()) => full += 1,
            Err((step, why)) => {
                // Only a vector that moves the clock or asserts `_ns` figures may be skipped.
                let name = v["name"].as_str().unwrap();
                let text = v.to_string();
                assert!(
                    text.contains("advance_clock") || text.contains("_ns\""),
                    "{name}: skipped although it needs no clock: {why}"
                );
                let n = v["steps"].as_array().unwrap().len();
                skipped.push(format!("{name} (steps {step}..{n} of {n} not run): {why}"));
            }
        })
    } else {
        0
    };
    (n, full, skipped)
}

#[test]
fn scenario_vectors_through_the_c_abi() {
    let dir = vectors::dir();
    let validator = vectors::validator();
    let mut names = HashSet::new();
    // The plain vectors, then the policy vectors (names unique across both).
    let (n, full, mut skipped) = run_dir(&dir, &validator, &mut names, false);
    assert!(n >= 25, "only {n} vectors");
    let (pn, pfull, pskipped) = run_dir(&dir.join("policies"), &validator, &mut names, false);
    assert!(pn >= 10, "only {pn} policy vectors");
    skipped.extend(pskipped);
    // The admission vectors (docs/design.md §4.5–4.9, §5, §9.2): budgets, usage, classes,
    // rates, revisioned limits, observe mode, dry runs, a registry's global cap.
    // Through the polling API (the host owns the queue deadlines, which the admission reads:
    // a rate that conforms only after the deadline refuses at once, so the async API, whose
    // deadlines the library's real-time timer thread arms, cannot run them on virtual time).
    let (an, afull, askipped) = run_dir(&dir.join("admission"), &validator, &mut names, true);
    assert!(an >= 99, "only {an} admission vectors");
    skipped.extend(askipped);
    // The deadline vectors (docs/design.md §5.9, §4.10), through the polling API likewise.
    let (dn, dfull, dskipped) = run_dir(&dir.join("deadline"), &validator, &mut names, true);
    assert!(dn >= 11, "only {dn} deadline vectors");
    assert_eq!(dfull, dn, "deadline vectors: {dskipped:?}");
    // And the plain and policy vectors again through the polling API.
    let mut again = HashSet::new();
    for d in [dir.clone(), dir.join("policies")] {
        let (m, mfull, mskipped) = run_dir(&d, &validator, &mut again, true);
        assert_eq!(mfull, m, "polling: {mskipped:?}");
    }
    println!(
        "C ABI vectors: {full} of {n} run in full; policies: {pfull} of {pn}; admission: \
         {afull} of {an}; {} skipped (an ABI gap):",
        skipped.len()
    );
    for s in &skipped {
        println!("  SKIPPED {s}");
    }
    assert!(
        skipped.is_empty(),
        "every vector must run through the C ABI"
    );
    assert_eq!((full, pfull, afull), (n, pn, an));
}

#[test]
fn runner_rejects_unknown_ops_and_wrong_settles() {
    // The runner must be able to fail: a wrong `settles`, an unknown op, a grant that is not
    // reported, and wrong policy expectations (state, events, circuit stats, a missing
    // breaker) all panic.
    let queued_wrong = json!({"name": "q", "config": {"max_concurrent": 1},
        "steps": [{"op": "acquire", "id": "a", "expect": "granted"},
                  {"op": "acquire", "id": "b", "expect": "queued"},
                  {"op": "release", "id": "a"}]});
    let mut must_fail = vectors::must_fail();
    must_fail.push(queued_wrong);
    for v in must_fail {
        let r = std::panic::catch_unwind(|| {
            let _ = run(&v);
        });
        assert!(r.is_err(), "{v}");
    }
    // The admission steps can fail too (both APIs): a wrong bound, wrong budget stats, a
    // refund the core refuses, a wrong reason for a cost above the ceiling, a wrong usage
    // change, a wrong dry run, a wrong class count.
    let budget = json!({"max_concurrent": 2, "budget": 10});
    let granted = json!({"op": "acquire", "id": "a", "cost": 5, "expect": "granted"});
    for steps in [
        json!([{"op": "acquire", "id": "a", "expect": "granted"},
               {"op": "try_acquire", "id": "b", "weight": 2, "expect": "concurrency_limit",
                "bound": "kill_switch"}]),
        json!([granted, {"op": "stats", "expect": {"budget": {"in_use": 4}}}]),
        json!([granted, {"op": "refund", "id": "a", "n": 6}]),
        json!([{"op": "acquire", "id": "a", "cost": 11, "expect": "budget_limit"}]),
        json!([granted, {"op": "release", "id": "a", "used": 2},
               {"op": "stats", "expect": {"budget": {"refunded_total": 2}}}]),
        json!([granted, {"op": "report_usage", "id": "a", "used": 1, "remaining": 9,
                         "expect": "shrank"}]),
        json!([granted, {"op": "would_admit", "cost": 6, "expect": "admit_now"}]),
        json!([{"op": "apply_limits", "revision": 0, "limit": 1}]),
    ] {
        let v = json!({"name": "b", "config": budget, "steps": steps});
        for polling in [false, true] {
            let r = std::panic::catch_unwind(|| {
                let _ = run_in(&v, polling);
            });
            assert!(r.is_err(), "{v}");
        }
    }
    let classes = json!({"name": "c", "config": {"max_concurrent": 2},
        "classes": {"classes": [{"priority": 1}, {}]},
        "steps": [{"op": "try_acquire", "id": "a", "class": 1, "expect": "granted"},
                  {"op": "class_stats", "class": 1, "expect": {"in_flight": 2}}]});
    assert!(std::panic::catch_unwind(|| run_in(&classes, true)).is_err());
}

#[test]
fn policy_steps_with_the_right_expectations_pass() {
    let v = json!({"name": "r", "config": {"max_concurrent": 2,
            "resilience": {"breaker": {"failure_threshold": 2, "open_duration_ms": 100}}},
        "steps": [
        {"op": "acquire", "id": "a", "expect": "granted"},
        {"op": "record_outcome", "id": "a", "outcome": "failure"},
        {"op": "stats", "expect": {"circuit": {"state": "closed", "consecutive_failures": 1}}},
        {"op": "acquire", "id": "b", "expect": "granted"},
        {"op": "release", "id": "b", "outcome": "failure"},
        {"op": "expect_state", "state": "open"},
        {"op": "expect_events", "events": [["closed", "open"]]},
        {"op": "try_acquire", "id": "c", "expect": "circuit_open"},
        {"op": "advance_clock", "ms": 100},
        {"op": "expect_state", "state": "half_open"},
        {"op": "acquire", "id": "p", "expect": "granted"},
        {"op": "release", "id": "p"},
        {"op": "expect_events", "events": [["open", "half_open"], ["half_open", "closed"]]},
        {"op": "stats", "expect": {"rejected_by_reason": {"circuit_open": 1}}}]});
    assert!(run(&v).is_ok());
}

#[test]
fn a_timer_vector_runs_through_the_c_abi() {
    // A queued acquire whose deadline passes settles `timeout` (hg_ticket_cancel_reason).
    let v = json!({"name": "t", "config": {"max_concurrent": 1, "queue_timeout_ms": 100},
        "steps": [{"op": "acquire", "id": "h", "expect": "granted"},
                  {"op": "acquire", "id": "w", "expect": "queued"},
                  {"op": "advance_clock", "ms": 99},
                  {"op": "advance_clock", "ms": 1, "settles": {"w": "timeout"}},
                  {"op": "stats", "expect": {"rejected_by_reason": {"timeout": 1}}}]});
    assert!(run(&v).is_ok());
}
