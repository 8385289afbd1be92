//! The Rust runner of the scenario vectors in `tests/vectors/` (DESIGN.md §5.1): the same
//! decisions every layer's runner checks. Each vector is validated against
//! `tests/vectors/schema.json`, then run step by step on a virtual clock that this runner owns
//! (queue timers fire on `advance_clock`); after every step the runner collects exactly the
//! acquires that settled and compares them with the step's `settles`.
//!
//! It reads `tests/vectors/*.json` and the policy vectors of `tests/vectors/policies/`
//! (DESIGN §4, §5.1). With policies it drives the three steps of a guarded call exactly as a
//! binding does: `begin_call` before admission, `mark_granted` on a queued grant, `end_call`
//! (`ignored` for a refused or cancelled acquire, the release's outcome otherwise) before the
//! permits return. Breaker events are logged by an [`Observer`] and checked by `expect_events`.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    task::Waker,
    time::Duration,
};

use hullguard_core::{
    AcquireError, Admission, Bulkhead, CallStart, CancelError, Clock, ClockSource, Config, Outcome,
    Reason, Registry, RegistryConfig, Resilience, Stats, Ticket, TicketPoll,
    adaptive::{AdaptiveConfig, Algorithm},
    breaker::{BreakerConfig, CircuitState, Observer},
};
use hullguard_tests::vectors;
use serde_json::{Map, Value, json};

/// The runner's virtual clock (ns).
#[derive(Default)]
struct VirtualClock(AtomicU64);
impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

/// Logs every breaker transition as `[old, new]`, or `[key, old, new]` in a registry.
#[derive(Default)]
struct EventLog(Mutex<Vec<Value>>);
impl Observer for EventLog {
    fn on_state_change(&self, key: Option<&str>, old: CircuitState, new: CircuitState) {
        let e = match key {
            Some(k) => json!([k, old.as_str(), new.as_str()]),
            None => json!([old.as_str(), new.as_str()]),
        };
        self.0.lock().unwrap().push(e);
    }
}

// One per vector: the registry's size does not matter here.
#[allow(clippy::large_enum_variant)]
enum Target {
    Single(Arc<Bulkhead>),
    Registry(Registry),
}

enum State {
    Queued {
        bh: Arc<Bulkhead>,
        ticket: Ticket,
        call: CallStart,
    },
    Held {
        bh: Arc<Bulkhead>,
        weight: u64,
        call: CallStart,
    },
    /// A released handle keeps no outside handle on its bulkhead (it may be evicted).
    Released {
        bh: Weak<Bulkhead>,
    },
    Rejected,
}

struct Runner {
    name: String,
    clock: Arc<VirtualClock>,
    target: Target,
    acquires: HashMap<String, State>,
    /// (deadline ns, sequence) → acquire id.
    timers: BTreeMap<(u64, u64), String>,
    seq: u64,
    events: Arc<EventLog>,
}

fn config(v: Option<&Value>) -> Config {
    let mut c = Config::default();
    let Some(v) = v.and_then(Value::as_object) else {
        return c;
    };
    if let Some(n) = v.get("max_concurrent").and_then(Value::as_u64) {
        c.max_concurrent = n;
    }
    if let Some(n) = v.get("max_queue").and_then(Value::as_u64) {
        c.max_queue = n;
    }
    match v.get("queue_timeout_ms") {
        Some(Value::String(_)) => c.queue_timeout = Duration::MAX,
        Some(t) => c.queue_timeout = Duration::from_millis(t.as_u64().unwrap()),
        None => {}
    }
    if let Some(b) = v.get("enabled").and_then(Value::as_bool) {
        c.enabled = b;
    }
    if let Some(r) = v.get("resilience") {
        c.resilience = resilience(r, c.max_concurrent);
    }
    c
}

fn ms(v: &Value) -> Duration {
    Duration::from_millis(v.as_u64().unwrap())
}

/// `config.resilience` (DESIGN §4 with `…_ms` durations); a missing or null part is off.
fn resilience(v: &Value, max_concurrent: u64) -> Resilience {
    let mut r = Resilience::OFF;
    if let Some(a) = v.get("adaptive").and_then(Value::as_object) {
        let mut c = AdaptiveConfig::for_max_concurrent(max_concurrent);
        for (k, x) in a {
            match k.as_str() {
                "algorithm" => c.algorithm = Algorithm::parse(x.as_str().unwrap()).unwrap(),
                "initial_limit" => c.initial_limit = x.as_u64().unwrap(),
                "min_limit" => c.min_limit = x.as_u64().unwrap(),
                "max_limit" => c.max_limit = x.as_u64().unwrap(),
                "target_latency_ms" => c.target_latency_ns = x.as_u64().unwrap() * 1_000_000,
                "increase_step" => c.increase_step = x.as_u64().unwrap(),
                "decrease_ratio" => c.decrease_ratio = x.as_f64().unwrap(),
                "smoothing" => c.smoothing = x.as_f64().unwrap(),
                "rtt_tolerance" => c.rtt_tolerance = x.as_f64().unwrap(),
                "long_window" => c.long_window = x.as_u64().unwrap(),
                "queue_size" => c.queue_size = x.as_u64().unwrap(),
                other => panic!("unknown adaptive option {other:?}"),
            }
        }
        r.adaptive = Some(c);
    }
    if let Some(b) = v.get("breaker").and_then(Value::as_object) {
        let mut c = BreakerConfig::DEFAULT;
        for (k, x) in b {
            match k.as_str() {
                "failure_threshold" => c.failure_threshold = x.as_u64().unwrap() as u32,
                "error_rate_threshold" => c.error_rate_threshold = x.as_f64().unwrap(),
                "error_rate_window_ms" => c.error_rate_window = ms(x),
                "error_rate_buckets" => c.error_rate_buckets = x.as_u64().unwrap() as u32,
                "volume_threshold" => c.volume_threshold = x.as_u64().unwrap() as u32,
                "open_duration_ms" => c.open_duration = ms(x),
                "half_open_max_calls" => c.half_open_max_calls = x.as_u64().unwrap() as u32,
                "half_open_timeout_ms" => c.half_open_timeout = ms(x),
                other => panic!("unknown breaker option {other:?}"),
            }
        }
        r.breaker = Some(c);
    }
    if let Some(t) = v.get("call_timeout_ms").filter(|t| !t.is_null()) {
        r.call_timeout = Some(ms(t));
    }
    r
}

fn outcome_arg(step: &Value) -> Outcome {
    step.get("outcome").map_or(Outcome::Success, |o| {
        Outcome::parse(o.as_str().unwrap()).unwrap()
    })
}

fn outcome_of(e: &AcquireError) -> &'static str {
    match e.reason() {
        Some(r) => r.as_str(),
        None => "invalid",
    }
}

impl Runner {
    fn new(v: &Value) -> Self {
        let clock = Arc::new(VirtualClock::default());
        let source = ClockSource::Shared(clock.clone());
        let events = Arc::new(EventLog::default());
        let observer: hullguard_core::policy::SharedObserver = events.clone();
        let target = if let Some(r) = v.get("registry") {
            let overrides = r
                .get("overrides")
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, c)| {
                            let merged = vectors::merge(r.get("defaults"), c, 0);
                            (k.clone(), config(Some(&merged)))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let rc = RegistryConfig {
                defaults: config(r.get("defaults")),
                overrides,
                max_keys: r
                    .get("max_keys")
                    .and_then(Value::as_u64)
                    .map_or(1024, |n| n as usize),
            };
            Target::Registry(Registry::with_observer(rc, source, Some(observer)).unwrap())
        } else {
            Target::Single(Arc::new(
                Bulkhead::with_observer(config(v.get("config")), source, Some(observer), None)
                    .unwrap(),
            ))
        };
        Runner {
            name: v["name"].as_str().unwrap().to_string(),
            clock,
            target,
            acquires: HashMap::new(),
            timers: BTreeMap::new(),
            seq: 0,
            events,
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ns() / 1_000_000
    }

    fn bulkhead(&self, key: Option<&str>) -> Result<Arc<Bulkhead>, AcquireError> {
        match (&self.target, key) {
            (Target::Single(b), None) => Ok(b.clone()),
            (Target::Registry(r), Some(k)) => r.get(k).map_err(|e| e.error),
            _ => panic!(
                "{}: `key` must be given exactly for registry vectors",
                self.name
            ),
        }
    }

    fn ctx(&self, i: usize, step: &Value) -> String {
        format!("{} step {i} {step}", self.name)
    }

    fn acquire(&mut self, step: &Value, queue: bool) -> String {
        let id = step["id"].as_str().unwrap().to_string();
        let key = step.get("key").and_then(Value::as_str);
        let weight = step.get("weight").map_or(1, |w| w.as_u64().unwrap_or(0));
        let bh = match self.bulkhead(key) {
            Ok(b) => b,
            Err(e) => {
                self.acquires.insert(id, State::Rejected);
                return outcome_of(&e).to_string();
            }
        };
        let timeout = match step.get("timeout_ms") {
            None => {
                let t = bh.queue_timeout();
                (t != Duration::MAX).then_some(t.as_millis() as u64)
            }
            Some(Value::String(_)) => None,
            Some(t) => Some(t.as_u64().unwrap()),
        };
        // Step 1 of a guarded call, after the argument check (an invalid weight is no call).
        let call = if weight == 0 || weight > bh.max_concurrent() {
            CallStart::NONE
        } else {
            match bh.begin_call() {
                Ok(c) => c,
                Err(e) => {
                    self.acquires.insert(id, State::Rejected);
                    return outcome_of(&e).to_string();
                }
            }
        };
        let result = if !queue || timeout == Some(0) {
            bh.try_acquire_units(weight).map(|()| Admission::Granted)
        } else {
            bh.enqueue(weight, Some(Waker::noop()))
        };
        match result {
            Ok(Admission::Granted) => {
                self.acquires.insert(id, State::Held { bh, weight, call });
                "granted".into()
            }
            Ok(Admission::Queued(ticket)) => {
                if let Some(ms) = timeout {
                    let deadline = self.clock.now_ns() + ms * 1_000_000;
                    self.seq += 1;
                    self.timers.insert((deadline, self.seq), id.clone());
                }
                self.acquires.insert(id, State::Queued { bh, ticket, call });
                "queued".into()
            }
            Err(e) => {
                // Refused admission: the call never started.
                bh.end_call(call, Outcome::Ignored);
                self.acquires.insert(id, State::Rejected);
                outcome_of(&e).to_string()
            }
        }
    }

    /// Polls every queued acquire; returns those that settled.
    fn collect_settled(&mut self, settled: &mut BTreeMap<String, String>) {
        for (id, st) in self.acquires.iter_mut() {
            let State::Queued { bh, ticket, call } = st else {
                continue;
            };
            match bh.poll_ticket(*ticket, None).unwrap() {
                TicketPoll::Pending => {}
                TicketPoll::Granted(w) => {
                    settled.insert(id.clone(), "granted".into());
                    let mut call = *call;
                    bh.mark_granted(&mut call);
                    *st = State::Held {
                        bh: bh.clone(),
                        weight: w,
                        call,
                    };
                }
                TicketPoll::Rejected(r) => {
                    settled.insert(id.clone(), r.reason.as_str().into());
                    bh.end_call(*call, Outcome::Ignored);
                    *st = State::Rejected;
                }
            }
        }
    }

    /// Cancels a queued acquire with `reason`; `true` if the cancel won.
    fn cancel(&mut self, id: &str, reason: Reason, settled: &mut BTreeMap<String, String>) -> bool {
        let Some(State::Queued { bh, ticket, call }) = self.acquires.get(id) else {
            return false;
        };
        match bh.cancel(*ticket, reason) {
            Ok(()) => {
                // Cancelled before the grant: the call never started.
                bh.end_call(*call, Outcome::Ignored);
                settled.insert(id.to_string(), reason.as_str().into());
                self.acquires.insert(id.to_string(), State::Rejected);
                true
            }
            Err(CancelError::Granted | CancelError::Rejected(_)) => false,
            Err(e) => panic!("{}: {e:?} for {id}", self.name),
        }
    }

    fn stats(&self, key: Option<&str>) -> Stats {
        match (&self.target, key) {
            (Target::Single(b), None) => b.stats(),
            (Target::Registry(r), Some(k)) => r.stats()[k],
            _ => panic!("{}: bad key", self.name),
        }
    }

    fn step(&mut self, i: usize, step: &Value) {
        let ctx = self.ctx(i, step);
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
                let released = match self.acquires.remove(id) {
                    Some(State::Held { bh, weight, call }) => {
                        // Step 3: the outcome first, then the permits (DESIGN §4).
                        bh.end_call(call, outcome_arg(step));
                        if weight > 0 {
                            bh.release_units(weight);
                        }
                        let bh = Arc::downgrade(&bh);
                        self.acquires.insert(id.into(), State::Released { bh });
                        true
                    }
                    Some(State::Released { bh }) => {
                        if let Some(b) = bh.upgrade() {
                            b.record_double_release();
                        }
                        self.acquires.insert(id.into(), State::Released { bh });
                        false
                    }
                    _ => panic!("{ctx}: {id} holds no permit"),
                };
                assert_eq!(released, expect, "{ctx}");
            }
            "release_partial" => {
                let id = step["id"].as_str().unwrap();
                let n = step["n"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let Some(State::Held { bh, weight, .. }) = self.acquires.get_mut(id) else {
                    panic!("{ctx}: {id} holds no permit")
                };
                let got = if n == 0 || n > *weight {
                    "invalid"
                } else {
                    *weight -= n;
                    bh.release_units(n);
                    "ok"
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "cancel" => {
                let id = step["id"].as_str().unwrap();
                let expect = step
                    .get("expect")
                    .and_then(Value::as_str)
                    .unwrap_or("cancelled");
                let won = self.cancel(id, Reason::Aborted, &mut settled);
                assert_eq!(
                    if won { "cancelled" } else { "already_settled" },
                    expect,
                    "{ctx}"
                );
            }
            "set_limit" => {
                let limit = step["limit"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let got = match self.bulkhead(key).unwrap().set_limit(limit) {
                    Ok(()) => "ok",
                    Err(_) => "invalid",
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "close" => match (&self.target, key) {
                (Target::Registry(r), None) => r.close(),
                _ => self.bulkhead(key).unwrap().close(),
            },
            "advance_clock" => {
                let to = self.clock.now_ns() + step["ms"].as_u64().unwrap() * 1_000_000;
                while let Some(entry) = self.timers.first_entry() {
                    if entry.key().0 > to {
                        break;
                    }
                    let ((deadline, _), id) = entry.remove_entry();
                    self.clock.0.store(deadline, SeqCst);
                    self.collect_settled(&mut settled);
                    self.cancel(&id, Reason::Timeout, &mut settled);
                }
                self.clock.0.store(to, SeqCst);
            }
            "drain" => {
                let bh = self.bulkhead(key).unwrap();
                let r = bh.drain_blocking(Some(Duration::ZERO));
                let got = json!({"drained": r.drained, "active": r.active, "queued": r.queued});
                vectors::subset(&ctx, &step["expect"], &got);
            }
            "stats" => {
                let s = self.stats(key);
                vectors::subset(&ctx, &step["expect"], &stats_json(&s));
            }
            "expect_state" => {
                let state = self
                    .bulkhead(key)
                    .unwrap()
                    .circuit_state()
                    .unwrap_or_else(|| panic!("{ctx}: no breaker"));
                assert_eq!(state.as_str(), step["state"].as_str().unwrap(), "{ctx}");
            }
            "expect_events" => {
                let got = std::mem::take(&mut *self.events.0.lock().unwrap());
                assert_eq!(Value::Array(got), step["events"], "{ctx}: events");
            }
            "keys" => {
                let Target::Registry(r) = &self.target else {
                    panic!("{ctx}: not a registry")
                };
                let mut keys = r.keys();
                keys.sort();
                assert_eq!(json!(keys), step["expect"], "{ctx}");
            }
            other => panic!("{ctx}: unknown op {other:?}"),
        }
        // Every step runs to quiescence: collect what settled, then compare exactly.
        self.collect_settled(&mut settled);
        let want = vectors::settles(step);
        assert_eq!(settled, want, "{ctx}: settles (at {} ms)", self.now_ms());
        self.check_invariants(&ctx);
    }

    /// I1 and I2 after every step, for every bulkhead.
    fn check_invariants(&self, ctx: &str) {
        let all: Vec<Stats> = match &self.target {
            Target::Single(b) => vec![b.stats()],
            Target::Registry(r) => r.stats().into_values().collect(),
        };
        for s in all {
            assert_eq!(
                s.available + s.active as i64 + s.granted_unclaimed as i64,
                s.limit as i64,
                "{ctx}: I2 {s}"
            );
            assert_eq!(
                s.granted_unclaimed, 0,
                "{ctx}: the runner claims every grant"
            );
        }
    }
}

fn stats_json(s: &Stats) -> Value {
    let rejected: Map<String, Value> = s
        .rejected_by_reason
        .iter()
        .map(|(r, n)| (r.as_str().to_string(), json!(n)))
        .collect();
    json!({
        "active": s.active, "queued": s.queued, "granted_unclaimed": s.granted_unclaimed,
        "limit": s.limit, "max_concurrent": s.max_concurrent, "available": s.available,
        "admitted_total": s.admitted_total, "rejected_by_reason": rejected,
        "released_twice_total": s.released_twice_total, "leaked_total": s.leaked_total,
        "ring_free": s.ring_free, "queue_wait_count": s.queue_wait_count,
        "queue_wait_sum_ns": s.queue_wait_sum_ns, "queue_wait_max_ns": s.queue_wait_max_ns,
        "circuit": s.circuit.map(|c| json!({
            "state": c.state.as_str(), "generation": c.generation,
            "consecutive_failures": c.consecutive_failures,
            "window_requests": c.window_requests, "window_failures": c.window_failures,
        })),
        "adaptive": s.adaptive.map(|a| json!({
            "algorithm": a.algorithm.as_str(), "limit": a.limit, "min_limit": a.min_limit,
            "max_limit": a.max_limit, "samples_total": a.samples_total,
            "decreases_total": a.decreases_total,
        })),
    })
}

fn run(v: &Value) {
    let mut r = Runner::new(v);
    for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        r.step(i, step);
    }
}

#[test]
fn scenario_vectors() {
    let dir = vectors::dir();
    let validator = vectors::validator();
    let mut names = HashSet::new();
    let n = vectors::for_each(&dir, &validator, &mut names, run);
    assert!(n >= 25, "only {n} vectors");
    // The policy vectors (DESIGN §5.1): same schema, names unique across both folders.
    let n = vectors::for_each(&dir.join("policies"), &validator, &mut names, run);
    assert!(n >= 10, "only {n} policy vectors");
}

#[test]
fn runner_rejects_unknown_ops_and_wrong_settles() {
    // The runner must be able to fail: a wrong `settles`, an unknown op and wrong policy
    // expectations (state, events, circuit stats, a fast-fail that does not happen) all panic.
    for v in vectors::must_fail() {
        let r = std::panic::catch_unwind(|| run(&v));
        assert!(r.is_err(), "{v}");
    }
    // And the same policy steps with the right expectations pass, so the failures above are
    // the expectations' (and the schema accepts the shapes).
    let breaker = json!({"max_concurrent": 2,
        "resilience": {"breaker": {"failure_threshold": 2, "open_duration_ms": 100}}});
    let validator = vectors::validator();
    let right = json!({"name": "r", "config": breaker, "steps": [
        {"op": "acquire", "id": "a", "expect": "granted"},
        {"op": "record_outcome", "id": "a", "outcome": "failure"},
        {"op": "stats", "expect": {"circuit": {"state": "closed", "consecutive_failures": 1}}},
        {"op": "acquire", "id": "b", "expect": "granted"},
        {"op": "release", "id": "b", "outcome": "failure"},
        {"op": "expect_state", "state": "open"},
        {"op": "expect_events", "events": [["closed", "open"]]},
        {"op": "try_acquire", "id": "c", "expect": "circuit_open"}]});
    validator.validate(&right).unwrap();
    run(&right);
}
