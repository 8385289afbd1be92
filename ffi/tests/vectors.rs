//! The C runner of the scenario vectors in `tests/vectors/` (docs/design.md, "Scenario vectors"): the same decisions
//! through the C ABI. It mirrors the Rust runner (`tests/tests/vectors.rs`) step for step, but
//! calls only the exported `hg_*` functions (as the crate's `pub extern "C"` items, the very
//! symbols a C program links) — never `hullguard-core`. What is not about the ABI (finding,
//! parsing and schema-checking the files, the override merge, `settles` / `subset` checks, the
//! vectors a runner must fail on) comes from `hullguard_tests::vectors`, shared with the Rust
//! runner.
//!
//! How the steps map onto the ABI:
//! * `acquire` → `hg_bulkhead_acquire_async` (a queued acquire settles through its callback,
//!   which records into a per-acquire slot; after every step the runner collects the slots of
//!   the queued acquires, exactly as the Rust runner polls their tickets); `timeout_ms: 0` is
//!   passed as 0 (do not queue). `try_acquire` → `hg_bulkhead_try_acquire`. In a registry, the
//!   key's bulkhead comes from `hg_registry_get` (an outside handle while queued, as the Rust
//!   runner's `Arc`).
//! * `release` / `release_partial` → `hg_permit_release` / `hg_permit_release_partial` (a second
//!   release is `HG_STATUS_ALREADY_RELEASED`); `cancel` → `hg_ticket_cancel`; `set_limit`,
//!   `close`, `drain` (timeout 0), `stats` → their `hg_bulkhead_*` / `hg_registry_*` functions.
//! * `keys` → the ABI has no key listing: a key exists iff `hg_registry_stats` finds it (it
//!   neither creates nor touches an entry), checked over every key the vector names.
//! * Queue deadlines: the C timer thread runs on real time, so the runner passes
//!   `HG_TIMEOUT_INFINITE` for a queued acquire and keeps each deadline on its own virtual timer
//!   (as the Rust runner does); when one passes, it settles the acquire with
//!   `hg_ticket_cancel_reason(.., HG_REASON_TIMEOUT)`, as a host with its own timers would. A
//!   single bulkhead is built with `hg_bulkhead_new_with_clock` on the runner's virtual clock, so
//!   `queue_wait_*_ns` figures match; a registry is built with `hg_registry_new_with_clock` on
//!   the same clock.
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
    HG_TIMEOUT_INFINITE, hg_adaptive_algorithm, hg_bulkhead, hg_bulkhead_acquire_async,
    hg_bulkhead_close, hg_bulkhead_drain, hg_bulkhead_free, hg_bulkhead_new_with_clock,
    hg_bulkhead_set_limit, hg_bulkhead_stats, hg_bulkhead_try_acquire, hg_circuit_state, hg_config,
    hg_config_check, hg_config_default, hg_drain_result, hg_outcome, hg_permit, hg_permit_free,
    hg_permit_release, hg_permit_release_outcome, hg_permit_release_partial, hg_reason,
    hg_reason_name, hg_registry, hg_registry_close, hg_registry_free, hg_registry_get,
    hg_registry_new_with_clock, hg_registry_override, hg_registry_stats, hg_stats, hg_status,
    hg_ticket, hg_ticket_cancel, hg_ticket_cancel_reason,
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
    /// Queued: the outside handle of its bulkhead, its ticket and its callback's slot.
    Queued {
        bh: Bh,
        ticket: hg_ticket,
        slot: usize,
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
    weight_of: HashMap<String, u64>,
    held: HashMap<String, u64>,
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
        if let Some(n) = v.get("max_concurrent").and_then(Value::as_u64) {
            c.max_concurrent = n;
        }
        if let Some(n) = v.get("max_queue").and_then(Value::as_u64) {
            c.max_queue = n;
        }
        match v.get("queue_timeout_ms") {
            Some(Value::String(_)) => {
                c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
                timeout = None;
            }
            Some(t) => {
                c.queue_timeout_ms = t.as_u64().unwrap();
                timeout = Some(c.queue_timeout_ms);
            }
            None => {}
        }
        if let Some(b) = v.get("enabled").and_then(Value::as_bool) {
            c.enabled = b;
        }
        if let Some(r) = v.get("resilience") {
            resilience(&mut c, r);
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

fn stats_json(s: &hg_stats) -> Value {
    let rejected: Map<String, Value> = (0..8u32)
        .map(|r| {
            // SAFETY: reasons 0..8 have static names.
            let name = unsafe { CStr::from_ptr(hg_reason_name(r)) };
            (
                name.to_str().unwrap().to_string(),
                json!(s.rejected[r as usize]),
            )
        })
        .collect();
    json!({
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
    fn new(v: &Value) -> Self {
        let clock = Box::new(std::sync::atomic::AtomicU64::new(0));
        let clock_data = (&raw const *clock).cast_mut().cast::<c_void>();
        let events: Box<EventLog> = Box::default();
        let mut universe = BTreeSet::new();
        let mut default_timeouts = HashMap::new();
        let mut registry_override_timeouts = HashMap::new();
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
            let mut reg = ptr::null_mut();
            let s = hg_registry_new_with_clock(
                &defaults,
                entries.as_ptr(),
                entries.len(),
                max_keys,
                Some(virtual_now_ns),
                clock_data,
                &mut reg,
            );
            assert_eq!(s, hg_status::HG_STATUS_OK);
            Target::Registry(reg)
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
            weight_of: HashMap::new(),
            held: HashMap::new(),
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
        let weight = step.get("weight").map_or(1, |w| w.as_u64().unwrap_or(0));
        self.key_of.insert(id.clone(), key.map(str::to_string));
        self.weight_of.insert(id.clone(), weight);
        let bh = match self.bulkhead(key) {
            Ok(b) => b,
            Err(s) => {
                self.acquires.insert(id, State::Rejected { ticket: None });
                return outcome(s);
            }
        };
        let timeout = match step.get("timeout_ms") {
            None => self.queue_timeout(key),
            Some(Value::String(_)) => None,
            Some(t) => Some(t.as_u64().unwrap()),
        };
        let mut permit = ptr::null_mut();
        if !queue {
            let s = hg_bulkhead_try_acquire(bh.0, weight, &mut permit);
            self.settle_now(id, s, permit, None);
            return outcome(s);
        }
        // 0: do not queue. Otherwise no real deadline: the runner's virtual timer owns it.
        let abi_timeout = if timeout == Some(0) {
            0
        } else {
            HG_TIMEOUT_INFINITE
        };
        let slot = self.new_slot();
        let user_data = ptr::from_ref::<RefCell<Slot>>(&*self.slots[slot])
            .cast_mut()
            .cast();
        let mut ticket: hg_ticket = 0;
        let s = hg_bulkhead_acquire_async(
            bh.0,
            weight,
            abi_timeout,
            Some(on_settle),
            user_data,
            &mut permit,
            &mut ticket,
        );
        if s == hg_status::HG_STATUS_QUEUED {
            if let Some(ms) = timeout {
                self.seq += 1;
                self.timers
                    .insert((self.now_ns + ms * 1_000_000, self.seq), id.clone());
            }
            self.acquires.insert(id, State::Queued { bh, ticket, slot });
        } else {
            assert_eq!(
                self.slots[slot].borrow().calls,
                0,
                "{}: callback of {id} ran",
                self.name
            );
            self.settle_now(id, s, permit, None);
        }
        outcome(s)
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
            self.held.insert(id.clone(), self.weight_of[&id]);
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
            let Some(State::Queued { slot, ticket, .. }) = self.acquires.get(&id) else {
                unreachable!()
            };
            let (slot, ticket) = (*slot, *ticket);
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
                let Some(State::Permit { permit, .. }) = self.acquires.get(id) else {
                    panic!("{ctx}: {id} holds no permit")
                };
                // Without an outcome: the plain release (a success, docs/design.md).
                let status = match step.get("outcome").and_then(Value::as_str) {
                    None => hg_permit_release(*permit),
                    Some(o) => {
                        let o = match o {
                            "success" => hg_outcome::HG_OUTCOME_SUCCESS,
                            "failure" => hg_outcome::HG_OUTCOME_FAILURE,
                            "ignored" => hg_outcome::HG_OUTCOME_IGNORED,
                            "overload" => hg_outcome::HG_OUTCOME_OVERLOAD,
                            other => panic!("{ctx}: unknown outcome {other:?}"),
                        };
                        hg_permit_release_outcome(*permit, o as u32)
                    }
                };
                let released = match status {
                    hg_status::HG_STATUS_OK => {
                        let held = self.held.remove(id);
                        assert!(held.is_some(), "{ctx}: released twice with OK");
                        true
                    }
                    hg_status::HG_STATUS_ALREADY_RELEASED => false,
                    s => panic!("{ctx}: hg_permit_release -> {s:?}"),
                };
                assert_eq!(released, expect, "{ctx}");
            }
            "release_partial" => {
                let id = step["id"].as_str().unwrap();
                let n = step["n"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let Some(State::Permit { permit, .. }) = self.acquires.get(id) else {
                    panic!("{ctx}: {id} holds no permit")
                };
                let got = match hg_permit_release_partial(*permit, n) {
                    hg_status::HG_STATUS_OK => {
                        *self.held.get_mut(id).unwrap() -= n;
                        "ok"
                    }
                    hg_status::HG_STATUS_INVALID_ARGUMENT => INVALID,
                    s => panic!("{ctx}: hg_permit_release_partial -> {s:?}"),
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
                    Some(State::Queued { bh, ticket, .. }) => match hg_ticket_cancel(bh.0, *ticket)
                    {
                        hg_status::HG_STATUS_OK => "cancelled",
                        hg_status::HG_STATUS_ALREADY_SETTLED => "already_settled",
                        s => panic!("{ctx}: hg_ticket_cancel -> {s:?}"),
                    },
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
                // would (a grant that won first leaves the cancel `already settled`).
                let to = self.now_ns + step["ms"].as_u64().unwrap() * 1_000_000;
                while let Some(entry) = self.timers.first_entry() {
                    if entry.key().0 > to {
                        break;
                    }
                    let ((deadline, _), id) = entry.remove_entry();
                    self.set_clock(deadline);
                    self.collect_settled(&mut settled);
                    if let Some(State::Queued { bh, ticket, .. }) = self.acquires.get(&id) {
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

    /// After every step, for every bulkhead: `active` is what the runner holds of it (its own
    /// records), `queued` its pending acquires, no grant is left unclaimed, and I2 holds with
    /// the runner's count: `available + held == limit`.
    fn check_invariants(&self, ctx: &str) {
        let mut held: BTreeMap<Option<String>, u64> = BTreeMap::new();
        for (id, w) in &self.held {
            *held.entry(self.key_of[id].clone()).or_default() += w;
        }
        let mut queued: BTreeMap<Option<String>, u64> = BTreeMap::new();
        for (id, st) in &self.acquires {
            if let State::Queued { .. } = st {
                *queued.entry(self.key_of[id].clone()).or_default() += 1;
            }
        }
        let all: Vec<(Option<String>, hg_stats)> = match &self.target {
            Target::Single(_) => vec![(None, self.stats(None))],
            Target::Registry(_) => self
                .existing_keys()
                .into_iter()
                .map(|k| {
                    let s = self.stats(Some(&k));
                    (Some(k), s)
                })
                .collect(),
        };
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

/// Runs one vector; `Err((step, why))` when it needs an ABI piece that does not exist.
fn run(v: &Value) -> Result<(), (usize, String)> {
    let mut r = Runner::new(v);
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
) -> (usize, usize, Vec<String>) {
    let mut skipped = Vec::new();
    let mut full = 0;
    let n = if dir.is_dir() {
        vectors::for_each(dir, validator, names, |v| match run(v) {
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
    let (n, full, mut skipped) = run_dir(&dir, &validator, &mut names);
    assert!(n >= 25, "only {n} vectors");
    let (pn, pfull, pskipped) = run_dir(&dir.join("policies"), &validator, &mut names);
    assert!(pn >= 10, "only {pn} policy vectors");
    skipped.extend(pskipped);
    println!(
        "C ABI vectors: {full} of {n} run in full; policies: {pfull} of {pn}; {} skipped (an ABI gap):",
        skipped.len()
    );
    for s in &skipped {
        println!("  SKIPPED {s}");
    }
    assert!(
        skipped.is_empty(),
        "every vector must run through the C ABI"
    );
    assert_eq!((full, pfull), (n, pn));
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
