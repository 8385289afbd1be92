//! The Rust runner of the scenario vectors in `tests/vectors/` (DESIGN.md §5.1): the same
//! decisions every layer's runner checks. Each vector is validated against
//! `tests/vectors/schema.json`, then run step by step on a virtual clock that this runner owns
//! (queue timers fire on `advance_clock`); after every step the runner collects exactly the
//! acquires that settled and compares them with the step's `settles`.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    path::{Path, PathBuf},
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    task::Waker,
    time::Duration,
};

use hullguard_core::{
    AcquireError, Admission, Bulkhead, CancelError, Clock, ClockSource, Config, Reason, Registry,
    RegistryConfig, Stats, Ticket, TicketPoll,
};
use serde_json::{Map, Value, json};

/// The runner's virtual clock (ns).
#[derive(Default)]
struct VirtualClock(AtomicU64);
impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

enum Target {
    Single(Arc<Bulkhead>),
    Registry(Registry),
}

enum State {
    Queued {
        bh: Arc<Bulkhead>,
        ticket: Ticket,
    },
    Held {
        bh: Arc<Bulkhead>,
        weight: u64,
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
    c
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
        let target = if let Some(r) = v.get("registry") {
            let overrides = r
                .get("overrides")
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, c)| (k.clone(), config(Some(c))))
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
            Target::Registry(Registry::with_clock(rc, source).unwrap())
        } else {
            Target::Single(Arc::new(
                Bulkhead::with_clock(config(v.get("config")), source).unwrap(),
            ))
        };
        Runner {
            name: v["name"].as_str().unwrap().to_string(),
            clock,
            target,
            acquires: HashMap::new(),
            timers: BTreeMap::new(),
            seq: 0,
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
        let result = if !queue || timeout == Some(0) {
            bh.try_acquire_units(weight).map(|()| Admission::Granted)
        } else {
            bh.enqueue(weight, Some(Waker::noop()))
        };
        match result {
            Ok(Admission::Granted) => {
                self.acquires.insert(id, State::Held { bh, weight });
                "granted".into()
            }
            Ok(Admission::Queued(ticket)) => {
                if let Some(ms) = timeout {
                    let deadline = self.clock.now_ns() + ms * 1_000_000;
                    self.seq += 1;
                    self.timers.insert((deadline, self.seq), id.clone());
                }
                self.acquires.insert(id, State::Queued { bh, ticket });
                "queued".into()
            }
            Err(e) => {
                self.acquires.insert(id, State::Rejected);
                outcome_of(&e).to_string()
            }
        }
    }

    /// Polls every queued acquire; returns those that settled.
    fn collect_settled(&mut self, settled: &mut BTreeMap<String, String>) {
        for (id, st) in self.acquires.iter_mut() {
            let State::Queued { bh, ticket } = st else {
                continue;
            };
            match bh.poll_ticket(*ticket, None).unwrap() {
                TicketPoll::Pending => {}
                TicketPoll::Granted(w) => {
                    settled.insert(id.clone(), "granted".into());
                    *st = State::Held {
                        bh: bh.clone(),
                        weight: w,
                    };
                }
                TicketPoll::Rejected(r) => {
                    settled.insert(id.clone(), r.reason.as_str().into());
                    *st = State::Rejected;
                }
            }
        }
    }

    /// Cancels a queued acquire with `reason`; `true` if the cancel won.
    fn cancel(&mut self, id: &str, reason: Reason, settled: &mut BTreeMap<String, String>) -> bool {
        let Some(State::Queued { bh, ticket }) = self.acquires.get(id) else {
            return false;
        };
        match bh.cancel(*ticket, reason) {
            Ok(()) => {
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
            "release" => {
                let id = step["id"].as_str().unwrap();
                let expect = step.get("expect").and_then(Value::as_bool).unwrap_or(true);
                let released = match self.acquires.remove(id) {
                    Some(State::Held { bh, weight }) => {
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
                let Some(State::Held { bh, weight }) = self.acquires.get_mut(id) else {
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
                subset(&ctx, &step["expect"], &got);
            }
            "stats" => {
                let s = self.stats(key);
                subset(&ctx, &step["expect"], &stats_json(&s));
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
        let want: BTreeMap<String, String> = step
            .get("settles")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect()
            })
            .unwrap_or_default();
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
    })
}

/// Every key of `want` (recursively for objects) equals `got`'s.
fn subset(ctx: &str, want: &Value, got: &Value) {
    match want {
        Value::Object(m) => {
            for (k, v) in m {
                let g = got
                    .get(k)
                    .unwrap_or_else(|| panic!("{ctx}: no field {k} in {got}"));
                subset(&format!("{ctx}.{k}"), v, g);
            }
        }
        _ => assert_eq!(want, got, "{ctx}"),
    }
}

fn vector_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.ends_with("schema.json"))
        .collect();
    files.sort();
    files
}

#[test]
fn scenario_vectors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors");
    let schema: Value = serde_json::from_str(&fs::read_to_string(dir.join("schema.json")).unwrap())
        .expect("schema.json parses");
    let validator = jsonschema::validator_for(&schema).expect("schema.json is a valid schema");
    let files = vector_files(&dir);
    assert!(files.len() >= 25, "only {} vectors", files.len());
    let mut names = std::collections::HashSet::new();
    for f in files {
        let v: Value = serde_json::from_str(&fs::read_to_string(&f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if let Err(e) = validator.validate(&v) {
            panic!("{}: does not match schema.json: {e}", f.display());
        }
        let name = v["name"].as_str().unwrap().to_string();
        assert_eq!(
            f.file_stem().unwrap().to_str().unwrap(),
            name,
            "file name = vector name"
        );
        assert!(names.insert(name));
        let mut r = Runner::new(&v);
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            r.step(i, step);
        }
    }
}

#[test]
fn runner_rejects_unknown_ops_and_wrong_settles() {
    // The runner must be able to fail: a wrong `settles` and an unknown op both panic.
    let wrong = json!({"name": "w", "config": {"max_concurrent": 1},
        "steps": [{"op": "acquire", "id": "a", "expect": "granted"},
                  {"op": "release", "id": "a", "settles": {"a": "granted"}}]});
    let unknown = json!({"name": "u", "steps": [{"op": "frobnicate"}]});
    for v in [wrong, unknown] {
        let r = std::panic::catch_unwind(|| {
            let mut r = Runner::new(&v);
            for (i, s) in v["steps"].as_array().unwrap().iter().enumerate() {
                r.step(i, s);
            }
        });
        assert!(r.is_err(), "{v}");
    }
}
