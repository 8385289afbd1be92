//! The Rust runner of the scenario vectors in `tests/vectors/` (docs/design.md §11): the same
//! decisions every layer's runner checks. Each vector is validated against
//! `tests/vectors/schema.json`, then run step by step on a virtual clock that this runner owns
//! (queue timers fire on `advance_clock`); after every step the runner collects exactly the
//! acquires that settled and compares them with the step's `settles`.
//!
//! It reads `tests/vectors/*.json` and the policy vectors of `tests/vectors/policies/`
//! (docs/design.md §6, §11). With policies it drives the three steps of a guarded call exactly as a
//! binding does: `begin_call` before admission, `mark_granted` on a queued grant, `end_call`
//! (`ignored` for a refused or cancelled acquire, the release's outcome otherwise) before the
//! permits return. Breaker events are logged by an [`Observer`] and checked by `expect_events`.
//!
//! Options are read through the core's option table (`config::options`, the vector spelling)
//! into `PartialConfig`s, and registry overrides are merged over the defaults by the core
//! (`RegistryConfig::from_partial`); unknown keys fail the run. After every step the stats of
//! every bulkhead are checked against the permits the runner itself holds (see
//! `check_invariants`).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    task::{Poll, Waker},
    time::Duration,
};

use hullguard_core::{
    AcquireError, Bulkhead, Call, Cancelled, ClassTableLimits, Clock, ClockSource, Config,
    Deadline, Decision, HoldChange, LimitsError, LimitsSnapshot, LoadSignal, Observe, Outcome,
    Reason, Registry, RegistryConfig, Request, Stats, UsageError, Waiter, WouldAdmit,
    breaker::{CircuitState, Observer},
    config::{ClassSpec, ClassTable, PriorityReserve, Rate, Rates},
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
        /// The registry key the acquire named (`None` for a single bulkhead).
        key: Option<String>,
        waiter: Waiter<Arc<Bulkhead>, 0>,
    },
    /// The runner holds `weight` permits of `key`'s bulkhead: its own record of what it asked
    /// for (the step's weight) less what it released — never read back from the core's call.
    Held {
        key: Option<String>,
        weight: u64,
        /// Budget units charged, by the same rule: the step's cost less what was refunded,
        /// plus what `report_usage` grew through admission.
        cost: u64,
        /// Units held past the budget: `report_usage` growth the step expected to overrun.
        overrun: u64,
        /// The cumulative usage the runner reported.
        reported: u64,
        call: Call<Arc<Bulkhead>, 0>,
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
    /// The weight and cost each acquire asked for (the runner's own record of what a grant
    /// holds).
    weights: HashMap<String, (u64, u64)>,
    /// (deadline ns, sequence) → acquire id.
    timers: BTreeMap<(u64, u64), String>,
    seq: u64,
    events: Arc<EventLog>,
}

/// A single bulkhead's `config` (absent: the defaults), read by the library's parser
/// ([`vectors::config`]: the core's option table in the vector spelling). Panics naming the
/// option on an unknown key or a bad value.
fn config(ctx: &str, v: Option<&Value>) -> Config {
    vectors::config(v).unwrap_or_else(|e| panic!("{ctx}: config: {e}"))
}

/// A vector's `registry` ([`vectors::registry_config`]). Panics as [`config`].
fn registry_config(ctx: &str, r: &Value) -> RegistryConfig {
    vectors::registry_config(r).unwrap_or_else(|e| panic!("{ctx}: registry: {e}"))
}

/// A step's request as a binding builds it: weight and cost unchecked (the core refuses a
/// weight of 0 or above `max_concurrent`, a cost above the budget's ceiling or without a
/// budget), the per-call timeout if the step gives one (`queue` false: do not queue).
fn request_of(step: &Value, queue: bool) -> Request {
    let weight = step.get("weight").map_or(1, |w| w.as_u64().unwrap_or(0));
    let cost = step
        .get("cost")
        .map_or(0, |c| c.as_u64().unwrap_or(u64::MAX));
    let class = step.get("class").map_or(0, |c| c.as_u64().unwrap() as u16);
    // An absolute deadline on the runner's virtual clock (ms from 0), or "infinite" (none).
    let deadline = match step.get("deadline_ms") {
        None | Some(Value::String(_)) => Deadline::NONE,
        Some(d) => Deadline::Ns(d.as_u64().unwrap().saturating_mul(1_000_000)),
    };
    let request = Request::new(weight)
        .cost(cost)
        .class(class)
        .deadline(deadline);
    match step.get("timeout_ms") {
        _ if !queue => request.no_wait(),
        None => request,
        Some(Value::String(_)) => request.queue_timeout(Duration::MAX),
        Some(t) => request.queue_timeout(Duration::from_millis(t.as_u64().unwrap())),
    }
}

/// A class table's reserve: `{permits, budget, min_priority}` (each 0 when omitted).
fn reserve_of(r: &Value) -> PriorityReserve {
    let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    PriorityReserve {
        permits: n("permits"),
        budget: n("budget"),
        min_priority: n("min_priority") as u8,
    }
}

/// A class table's rates (docs/design.md §4.9): `{requests, units}`, each `{amount, per_ms,
/// burst}` or omitted.
fn rates_of(r: &Value) -> Rates {
    let rate = |k: &str| {
        r.get(k).map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            Rate {
                amount: n("amount"),
                per: Duration::from_millis(n("per_ms")),
                burst: n("burst"),
            }
        })
    };
    Rates {
        requests: rate("requests"),
        units: rate("units"),
    }
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
        let observer: hullguard_core::event::SharedObserver = events.clone();
        let name = v["name"].as_str().unwrap();
        let target = if let Some(r) = v.get("registry") {
            let rc = registry_config(name, r);
            Target::Registry(Registry::with_observer(rc, source, Some(observer)).unwrap())
        } else if let Some(t) = v.get("classes") {
            // A classed bulkhead (docs/design.md §4.8).
            let c = config(name, v.get("config"));
            let n = |o: &Value, k: &str| o.get(k).and_then(Value::as_u64);
            let specs: Vec<ClassSpec> = t["classes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| ClassSpec {
                    priority: n(k, "priority").unwrap_or(0) as u8,
                    floor: n(k, "floor").unwrap_or(0),
                    ceiling: n(k, "ceiling"),
                    budget_floor: n(k, "budget_floor").unwrap_or(0),
                    budget_ceiling: n(k, "budget_ceiling"),
                    observe: k.get("observe").map_or(Observe::Off, |o| {
                        Observe::parse(o.as_str().unwrap()).unwrap()
                    }),
                })
                .collect();
            let table = ClassTable {
                reserve: reserve_of(t.get("reserve").unwrap_or(&Value::Null)),
                lending: t.get("lending").and_then(Value::as_bool).unwrap_or(false),
                shed: t.get("shed").and_then(Value::as_bool).unwrap_or(false),
                rates: rates_of(t.get("rates").unwrap_or(&Value::Null)),
                ..ClassTable::new(&specs)
            };
            Target::Single(Arc::new(
                Bulkhead::with_classes_and_observer(c, &table, source, Some(observer))
                    .unwrap_or_else(|e| panic!("{name}: {e}")),
            ))
        } else {
            let c = config(name, v.get("config"));
            Target::Single(Arc::new(
                Bulkhead::with_observer(c, source, Some(observer), None).unwrap(),
            ))
        };
        Runner {
            name: name.to_string(),
            clock,
            target,
            acquires: HashMap::new(),
            weights: HashMap::new(),
            timers: BTreeMap::new(),
            seq: 0,
            events,
        }
    }

    /// When the host's rate timer is due (host clock ns), if a head is held back by a rate.
    fn rate_due(&self) -> Option<u64> {
        match &self.target {
            Target::Single(b) => b
                .rate_retry_after()
                .map(|d| self.clock.now_ns() + d.as_nanos() as u64),
            Target::Registry(_) => None,
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
        let request = request_of(step, queue);
        let (weight, cost) = (request.weight, request.cost);
        self.weights.insert(id.clone(), (weight, cost));
        // A registry decides through `Registry::admit` (a key's class under a global cap).
        let decision = match (&self.target, key) {
            (Target::Registry(r), Some(k)) => r.admit(k, &request, Some(Waker::noop())),
            _ => match self.bulkhead(key) {
                Ok(b) => b.admit_owned(&request, Some(Waker::noop())),
                Err(e) => {
                    self.acquires.insert(id, State::Rejected);
                    return outcome_of(&e).to_string();
                }
            },
        };
        let key = key.map(str::to_string);
        match decision {
            Decision::Granted(call) => {
                let held = State::Held {
                    key,
                    weight,
                    cost,
                    overrun: 0,
                    reported: 0,
                    call,
                };
                self.acquires.insert(id, held);
                "granted".into()
            }
            Decision::Queued(waiter) => {
                // The host arms the waiter's queue timer (the runner's virtual timers).
                let t = waiter.queue_timeout();
                if t != Duration::MAX {
                    let deadline = self.clock.now_ns() + t.as_nanos() as u64;
                    self.seq += 1;
                    self.timers.insert((deadline, self.seq), id.clone());
                }
                self.acquires.insert(id, State::Queued { key, waiter });
                "queued".into()
            }
            Decision::Rejected(e) => {
                // Refused admission: the core ended the call `ignored`.
                self.acquires.insert(id.clone(), State::Rejected);
                // The constraint that bound, when the step names it (docs/design.md §5.7).
                if let (Some(want), AcquireError::Rejected(r)) = (step.get("bound"), &e) {
                    assert_eq!(
                        r.detail().bound.as_str(),
                        want.as_str().unwrap(),
                        "{}: the bound of {id}",
                        self.name
                    );
                }
                // A rate refusal's time until it conforms (docs/design.md §4.9).
                if let Some(want) = step.get("retry_after_ms") {
                    let AcquireError::Rejected(r) = &e else {
                        panic!("{}: {id} has no retry time: {e}", self.name)
                    };
                    assert_eq!(
                        r.detail().retry_after.map(|d| d.as_millis() as u64),
                        want.as_u64(),
                        "{}: the retry time of {id}",
                        self.name
                    );
                }
                outcome_of(&e).to_string()
            }
        }
    }

    /// Polls every queued acquire; returns those that settled.
    fn collect_settled(&mut self, settled: &mut BTreeMap<String, String>) {
        for (id, st) in self.acquires.iter_mut() {
            let State::Queued { key, waiter } = st else {
                continue;
            };
            let next = match waiter.poll(None) {
                Poll::Pending => continue,
                Poll::Ready(Ok(call)) => {
                    settled.insert(id.clone(), "granted".into());
                    let (weight, cost) = self.weights[id];
                    State::Held {
                        key: key.take(),
                        weight,
                        cost,
                        overrun: 0,
                        reported: 0,
                        call,
                    }
                }
                Poll::Ready(Err(e)) => {
                    settled.insert(id.clone(), outcome_of(&e).into());
                    State::Rejected
                }
            };
            *st = next;
        }
    }

    /// Cancels a queued acquire with `reason` (the owner's cancel, or its timer); `true` if the
    /// cancel won. A settlement that won the race is recorded as it would have been polled.
    fn cancel(&mut self, id: &str, reason: Reason, settled: &mut BTreeMap<String, String>) -> bool {
        let Some(State::Queued { .. }) = self.acquires.get(id) else {
            return false;
        };
        let Some(State::Queued { key, waiter }) = self.acquires.remove(id) else {
            unreachable!()
        };
        let (next, won) = match waiter.cancel(reason) {
            Cancelled::Cancelled(_) => {
                settled.insert(id.to_string(), reason.as_str().into());
                (State::Rejected, true)
            }
            Cancelled::Granted(call) => {
                settled.insert(id.to_string(), "granted".into());
                let (weight, cost) = self.weights[id];
                let held = State::Held {
                    key,
                    weight,
                    cost,
                    overrun: 0,
                    reported: 0,
                    call,
                };
                (held, false)
            }
            Cancelled::Rejected(r) => {
                settled.insert(id.to_string(), r.reason.as_str().into());
                (State::Rejected, false)
            }
        };
        self.acquires.insert(id.to_string(), next);
        won
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
                    Some(State::Held { call, .. }) => {
                        // The core's call records the outcome, then returns the permits
                        // (docs/design.md §6).
                        let bh = Arc::downgrade(call.handle());
                        match step.get("used").and_then(Value::as_u64) {
                            // Usage reported: the unused rest refunded, the excess overrun.
                            Some(used) => call.end_with_usage(outcome_arg(step), used),
                            None => call.end(outcome_arg(step)),
                        }
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
            "orphan" => {
                // The call hands its permits back while its work goes on (docs/design.md
                // §5.3): the runner holds none of them from here on (its units stay held).
                let id = step["id"].as_str().unwrap();
                let Some(State::Held { weight, call, .. }) = self.acquires.get_mut(id) else {
                    panic!("{ctx}: {id} holds no permit")
                };
                let got = match call.orphan() {
                    Ok(true) => {
                        *weight = 0;
                        "ok"
                    }
                    Ok(false) => "none",
                    Err(_) => "refused",
                };
                assert_eq!(got, step["expect"].as_str().unwrap(), "{ctx}");
            }
            "release_partial" => {
                let id = step["id"].as_str().unwrap();
                let n = step["n"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let Some(State::Held {
                    weight,
                    cost,
                    overrun,
                    call,
                    ..
                }) = self.acquires.get_mut(id)
                else {
                    panic!("{ctx}: {id} holds no permit")
                };
                // The core refuses 0 and more than the call holds; the runner's own count
                // changes only when it accepted the return. Units return with the last permit
                // (docs/design.md §4.5).
                let got = match call.release_partial(n) {
                    Ok(()) => {
                        *weight -= n;
                        if *weight == 0 {
                            (*cost, *overrun) = (0, 0);
                        }
                        "ok"
                    }
                    Err(_) => "invalid",
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "apply_limits" => {
                let mut snap = LimitsSnapshot::new(step["revision"].as_u64().unwrap_or(0));
                snap.limit = step.get("limit").map(|l| l.as_u64().unwrap_or(u64::MAX));
                snap.budget = step.get("budget").map(|b| b.as_u64().unwrap_or(u64::MAX));
                snap.max_queue = step
                    .get("max_queue")
                    .map(|q| q.as_u64().unwrap_or(u64::MAX));
                snap.queue_timeout = step.get("queue_timeout_ms").map(|t| match t {
                    Value::String(_) => Duration::MAX,
                    t => Duration::from_millis(t.as_u64().unwrap()),
                });
                let before = self.stats(key);
                // A class table's run-time part (docs/design.md §4.8, §4.9).
                let table = ClassTableLimits {
                    reserve: step.get("reserve").map(reserve_of),
                    rates: step.get("rates").map(rates_of),
                    ..ClassTableLimits::NONE
                };
                let applied = self
                    .bulkhead(key)
                    .unwrap()
                    .apply_limits_with_table(&snap, &table);
                let got = match applied {
                    Ok(()) => "ok",
                    Err(LimitsError::Stale { current }) => {
                        if let Some(c) = step.get("current") {
                            assert_eq!(Some(current), c.as_u64(), "{ctx}: current");
                        }
                        "stale"
                    }
                    Err(_) => "invalid",
                };
                if got != "ok" {
                    let after = self.stats(key);
                    assert_eq!(
                        (after.revision, after.limit, after.budget.map(|b| b.limit)),
                        (
                            before.revision,
                            before.limit,
                            before.budget.map(|b| b.limit)
                        ),
                        "{ctx}: a refused apply_limits changes nothing"
                    );
                }
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                assert_eq!(got, expect, "{ctx}");
            }
            "would_admit" => {
                // In a registry through the registry: a dry run never creates the key.
                let request = request_of(step, true);
                let got = match (&self.target, key) {
                    (Target::Registry(r), Some(k)) => {
                        let before = r.stats();
                        let got = r.would_admit(k, &request);
                        assert_eq!(r.stats(), before, "{ctx}: a dry run changes nothing");
                        got
                    }
                    _ => {
                        let bh = self.bulkhead(key).unwrap();
                        let before = bh.stats();
                        let got = bh.would_admit(&request);
                        assert_eq!(bh.stats(), before, "{ctx}: a dry run changes nothing");
                        got
                    }
                };
                let (name, position) = match got {
                    WouldAdmit::AdmitNow => ("admit_now", None),
                    WouldAdmit::WouldQueue { position, ahead } => {
                        assert_eq!(position, ahead + 1, "{ctx}");
                        ("would_queue", Some(position))
                    }
                    WouldAdmit::Reject(e) => (outcome_of(&e), None),
                };
                assert_eq!(name, step["expect"].as_str().unwrap(), "{ctx}");
                if let Some(p) = step.get("position") {
                    assert_eq!(position, p.as_u64(), "{ctx}: position");
                }
            }
            "refund" => {
                let id = step["id"].as_str().unwrap();
                let n = step["n"].as_u64().unwrap_or(0);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let Some(State::Held {
                    cost,
                    overrun,
                    call,
                    ..
                }) = self.acquires.get_mut(id)
                else {
                    panic!("{ctx}: {id} holds no permit")
                };
                let got = match call.refund(n) {
                    Ok(()) => {
                        // The part held past the budget goes first (docs/design.md §4.5).
                        let over = n.min(*overrun);
                        (*overrun, *cost) = (*overrun - over, *cost - (n - over));
                        "ok"
                    }
                    Err(_) => "invalid",
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "report_usage" => {
                let id = step["id"].as_str().unwrap();
                let used = step["used"].as_u64().unwrap();
                let remaining = step.get("remaining").and_then(Value::as_u64).unwrap_or(0);
                let expect = step["expect"].as_str().unwrap();
                let Some(State::Held {
                    weight,
                    cost,
                    overrun,
                    reported,
                    call,
                    ..
                }) = self.acquires.get_mut(id)
                else {
                    panic!("{ctx}: {id} holds no permit")
                };
                let got = match call.report_usage(used, remaining) {
                    Ok(r) => {
                        // `cancel` (default false): whether the host is asked to cancel.
                        let want = step.get("cancel").and_then(Value::as_bool).unwrap_or(false);
                        assert_eq!(r.cancel, want, "{ctx}: cancel");
                        assert_eq!(
                            call.cancel_requested() || r.cancel,
                            call.cancel_requested(),
                            "{ctx}"
                        );
                        match r.change {
                            HoldChange::Unchanged => "unchanged",
                            HoldChange::Shrank(_) => "shrank",
                            HoldChange::Grew(_) => "grew",
                            HoldChange::Overran(_) => "overran",
                        }
                    }
                    Err(UsageError::Decreased { .. }) => "decreased",
                    Err(UsageError::TooLarge { .. }) => "invalid",
                    Err(UsageError::Released) => "released",
                };
                assert_eq!(got, expect, "{ctx}");
                if *weight > 0 {
                    assert_eq!(
                        got == "decreased",
                        used < *reported,
                        "{ctx}: cumulative usage"
                    );
                }
                // The runner's own record, from the step: the hold becomes used + remaining;
                // a shrink takes the part past the budget first; a growth is charged or held
                // past the budget as the step expects.
                if matches!(got, "unchanged" | "shrank" | "grew" | "overran") && *weight > 0 {
                    *reported = used;
                    let (target, held) = (used + remaining, *cost + *overrun);
                    if target < held {
                        let over = (held - target).min(*overrun);
                        (*overrun, *cost) = (*overrun - over, *cost - (held - target - over));
                    } else if got == "grew" {
                        *cost += target - held;
                    } else if got == "overran" {
                        *overrun += target - held;
                    }
                    if let Some(by) = step.get("by").and_then(Value::as_u64) {
                        assert_eq!(by, target.abs_diff(held), "{ctx}: the change");
                    }
                }
            }
            "report_load" => {
                let bh = self.bulkhead(key).unwrap();
                if let Some(ms) = step.get("event_loop_lag_ms").and_then(Value::as_u64) {
                    bh.report_load(LoadSignal::EventLoopLag(Duration::from_millis(ms)));
                }
                if let Some(cpu) = step.get("cpu").and_then(Value::as_f64) {
                    bh.report_load(LoadSignal::Cpu(cpu));
                }
            }
            "set_observe" => {
                let mode = step["mode"].as_str().unwrap();
                let mode = Observe::parse(mode).unwrap_or_else(|| panic!("{ctx}: mode {mode}"));
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let got = match self.bulkhead(key).unwrap().set_observe(mode) {
                    Ok(()) => "ok",
                    Err(_) => "invalid",
                };
                assert_eq!(got, expect, "{ctx}");
            }
            "set_budget" => {
                let limit = step["limit"].as_u64().unwrap_or(u64::MAX);
                let expect = step.get("expect").and_then(Value::as_str).unwrap_or("ok");
                let got = match self.bulkhead(key).unwrap().set_budget(limit) {
                    Ok(()) => "ok",
                    Err(_) => "invalid",
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
                loop {
                    let next = self.timers.first_key_value().map_or(u64::MAX, |(k, _)| k.0);
                    // The host's rate timer (docs/design.md §4.9): a head a rate holds back is
                    // ticked at its conforming time, before any later queue deadline.
                    if let Some(at) = self.rate_due().filter(|&at| at <= next.min(to)) {
                        self.clock.0.store(at.max(self.clock.now_ns()), SeqCst);
                        if let Target::Single(b) = &self.target {
                            b.rate_tick();
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
            "class_stats" => {
                let bh = self.bulkhead(None).unwrap();
                let k = step["class"].as_u64().unwrap() as u16;
                let c = bh
                    .class_stats(k)
                    .unwrap_or_else(|| panic!("{ctx}: no class {k}"));
                let got = json!({
                    "in_flight": c.in_flight,
                    "queued": c.queued,
                    "shared_in_use": bh.class_shared_in_use().unwrap()[0],
                });
                vectors::subset(&ctx, &step["expect"], &got);
            }
            "key_stats" => {
                let Target::Registry(r) = &self.target else {
                    panic!("{ctx}: not a registry")
                };
                let c = r
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

    /// After every step, for every bulkhead: `active` is exactly what the runner holds of it
    /// (the weights of its `Held` acquires of that key, from its own records), no grant is left
    /// unclaimed (the runner has just polled every queued acquire, and each that was granted
    /// became `Held`), `queued` is the runner's pending acquires, and I2 holds with the
    /// runner's count: `available + held == limit`.
    fn check_invariants(&self, ctx: &str) {
        let mut held: BTreeMap<Option<String>, u64> = BTreeMap::new();
        let mut units: BTreeMap<Option<String>, u64> = BTreeMap::new();
        let mut over: BTreeMap<Option<String>, u64> = BTreeMap::new();
        let mut queued: BTreeMap<Option<String>, u64> = BTreeMap::new();
        let mut queued_cost: BTreeMap<Option<String>, u64> = BTreeMap::new();
        for (id, st) in &self.acquires {
            match st {
                State::Held {
                    key,
                    weight,
                    cost,
                    overrun,
                    ..
                } => {
                    *held.entry(key.clone()).or_default() += weight;
                    *units.entry(key.clone()).or_default() += cost;
                    *over.entry(key.clone()).or_default() += overrun;
                }
                State::Queued { key, .. } => {
                    *queued.entry(key.clone()).or_default() += 1;
                    *queued_cost.entry(key.clone()).or_default() += self.weights[id].1;
                }
                State::Released { .. } | State::Rejected => {}
            }
        }
        let all: Vec<(Option<String>, Stats)> = match &self.target {
            Target::Single(b) => vec![(None, b.stats())],
            Target::Registry(r) => match r.global_stats() {
                // Under a global cap (docs/design.md §9.2): each key's class holds what the
                // runner holds of it, and the one admission holds what all keys hold.
                Some(g) => {
                    for k in r.keys() {
                        let c = r.key_stats(&k).unwrap();
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
                    vec![(None, g)]
                }
                None => r.stats().into_iter().map(|(k, s)| (Some(k), s)).collect(),
            },
        };
        for (k, s) in &all {
            let u = units.get(k).copied().unwrap_or(0);
            let o = over.get(k).copied().unwrap_or(0);
            if let Some(b) = &s.budget {
                // The queued cost is the costs the runner has queued (its own record).
                let q = queued_cost.get(k).copied().unwrap_or(0);
                assert_eq!(b.queued_cost, q, "{ctx}: queued_cost of {k:?}: {s}");
            }
            let b = s.budget.map(|b| vectors::BudgetCounts {
                in_use: b.in_use,
                available: b.available,
                limit: b.limit,
                granted_unclaimed: b.granted_unclaimed,
                reserved_total: b.reserved_total,
                overrun_total: b.overrun_total,
                consumed_total: b.consumed_total,
                refunded_total: b.refunded_total,
                overrun_held: b.overrun_held,
            });
            vectors::check_budget(ctx, k, (u, o), b, &s.to_string());
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
                (k, c, s.to_string())
            })
            .collect();
        vectors::check_held(ctx, held, queued, all);
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
        "revision": s.revision,
        "orphaned_in_flight": s.orphaned_in_flight,
        "observe": s.observe.as_str(),
        "observed_by_reason": s.observed_by_reason.iter()
            .map(|(r, n)| (r.as_str().to_string(), json!(n)))
            .collect::<Map<String, Value>>(),
        "circuit": s.circuit.map(|c| json!({
            "state": c.state.as_str(), "generation": c.generation,
            "consecutive_failures": c.consecutive_failures,
            "window_requests": c.window_requests, "window_failures": c.window_failures,
        })),
        "budget": s.budget.map(|b| json!({
            "limit": b.limit, "max_budget": b.max_budget, "in_use": b.in_use,
            "available": b.available, "granted_unclaimed": b.granted_unclaimed,
            "reserved_total": b.reserved_total, "consumed_total": b.consumed_total,
            "refunded_total": b.refunded_total, "overrun_total": b.overrun_total,
            "overrun_held": b.overrun_held, "queued_cost": b.queued_cost,
        })),
        "adaptive": s.adaptive.map(|a| json!({
            "algorithm": a.algorithm.as_str(), "limit": a.limit, "min_limit": a.min_limit,
            "max_limit": a.max_limit, "samples_total": a.samples_total,
            "decreases_total": a.decreases_total,
        })),
        "load": s.load.map(|l| json!({
            "event_loop_lag_ns": l.event_loop_lag_ns, "cpu_permille": l.cpu_permille,
            "overloaded": l.overloaded, "shed_total": l.shed_total,
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
    // The policy vectors (docs/design.md §11): same schema, names unique across both folders.
    let n = vectors::for_each(&dir.join("policies"), &validator, &mut names, run);
    assert!(n >= 10, "only {n} policy vectors");
    // The admission vectors (docs/design.md §4.5, §4.8, §11): the budget dimension and classes
    // (`classes_*`, with a class table and `class_stats`); every layer's runner runs them
    // (Python, Node and the C ABI too, since issue 16).
    let n = vectors::for_each(&dir.join("admission"), &validator, &mut names, run);
    assert!(n >= 88, "only {n} admission vectors");
    // The deadline vectors (docs/design.md §5.9, §4.10): deadlines, early refusal, CoDel and
    // adaptive LIFO.
    let n = vectors::for_each(&dir.join("deadline"), &validator, &mut names, run);
    assert!(n >= 8, "only {n} deadline vectors");
}

#[test]
fn runner_rejects_unknown_ops_and_wrong_settles() {
    // The runner must be able to fail: a wrong `settles`, an unknown op and wrong policy
    // expectations (state, events, circuit stats, a fast-fail that does not happen) all panic.
    for v in vectors::must_fail() {
        let r = std::panic::catch_unwind(|| run(&v));
        assert!(r.is_err(), "{v}");
    }
    // A wrong `bound` (this runner checks a rejection's detail; docs/design.md §5.7).
    let wrong_bound = json!({"name": "b", "config": {"max_concurrent": 1, "max_queue": 0},
        "steps": [{"op": "acquire", "id": "a", "expect": "granted"},
                  {"op": "acquire", "id": "b", "expect": "concurrency_limit", "bound": "kill_switch"}]});
    assert!(std::panic::catch_unwind(|| run(&wrong_bound)).is_err());
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

    // The budget steps can fail too: wrong budget stats, a refund the core refuses, a wrong
    // reason for a cost above the ceiling (invalid, not budget_limit).
    let budget = json!({"max_concurrent": 2, "budget": 10});
    let granted = json!({"op": "acquire", "id": "a", "cost": 5, "expect": "granted"});
    for steps in [
        json!([granted, {"op": "stats", "expect": {"budget": {"in_use": 4}}}]),
        json!([granted, {"op": "refund", "id": "a", "n": 6}]),
        json!([{"op": "acquire", "id": "a", "cost": 11, "expect": "budget_limit"}]),
        json!([granted, {"op": "release", "id": "a", "used": 2},
               {"op": "stats", "expect": {"budget": {"refunded_total": 2}}}]),
    ] {
        let v = json!({"name": "b", "config": budget, "steps": steps});
        validator.validate(&v).unwrap();
        assert!(std::panic::catch_unwind(|| run(&v)).is_err(), "{v}");
    }
}

#[test]
fn options_go_through_the_core_table_and_merge() {
    use std::time::Duration;

    use hullguard_core::breaker::BreakerConfig;
    let r = json!({"max_keys": 7,
        "defaults": {"max_concurrent": 2, "queue_timeout_ms": "infinite",
            "resilience": {"breaker": {"failure_threshold": 3, "open_duration_ms": 100},
                           "call_timeout_ms": 2000}},
        "overrides": {
            "fragile": {"resilience": {"breaker": {"failure_threshold": 1}}},
            "plain": {"max_queue": 0, "resilience": {"breaker": null, "call_timeout_ms": null}},
            "nulls": {"max_concurrent": null, "queue_timeout_ms": null,
                      "resilience": {"breaker": {"failure_threshold": null}}},
            "https://Slow.example/v1": {"max_concurrent": 5, "queue_timeout_ms": 0}}});
    let c = registry_config("t", &r);
    let breaker = BreakerConfig {
        failure_threshold: 3,
        open_duration: Duration::from_millis(100),
        ..BreakerConfig::DEFAULT
    };
    let mut d = Config {
        max_concurrent: 2,
        queue_timeout: Duration::MAX,
        ..Config::DEFAULT
    };
    d.resilience.breaker = Some(breaker);
    d.resilience.call_timeout = Some(Duration::from_secs(2));
    assert_eq!((c.defaults, c.max_keys), (d, 7));
    // Merged key by key over the defaults, by the core.
    let mut fragile = d;
    fragile.resilience.breaker = Some(BreakerConfig {
        failure_threshold: 1,
        ..breaker
    });
    assert_eq!(c.overrides["fragile"], fragile);
    let mut plain = d;
    plain.max_queue = 0;
    plain.resilience.breaker = None;
    plain.resilience.call_timeout = None;
    assert_eq!(c.overrides["plain"], plain);
    // The core's null rule: a null option is not given (inherited; never "no deadline").
    assert_eq!(c.overrides["nulls"], d);
    let top = json!({"queue_timeout_ms": null, "max_queue": null,
                     "resilience": {"adaptive": null, "call_timeout_ms": null}});
    assert_eq!(
        config("t", Some(&top)),
        Config::DEFAULT,
        "null queue timeout is 30 s"
    );
    let slow = Config {
        max_concurrent: 5,
        queue_timeout: Duration::ZERO,
        ..d
    };
    assert_eq!(
        c.overrides["https://slow.example:443"], slow,
        "a canonical key"
    );
    // A part given as an object is on with its defaults; adaptive follows max_concurrent.
    let c = config(
        "t",
        Some(&json!({"max_concurrent": 4, "resilience": {"adaptive": {}, "breaker": {}}})),
    );
    assert_eq!(c.resilience.adaptive.unwrap().max_limit, 4);
    assert_eq!(c.resilience.breaker, Some(BreakerConfig::DEFAULT));
    assert_eq!(config("t", None), Config::DEFAULT);
    // The budget: a bulkhead option like the others, inherited and overridden key by key.
    let b = registry_config(
        "t",
        &json!({"defaults": {"budget": 100}, "overrides": {"k": {"budget": 5}, "n": {"budget": null}}}),
    );
    assert_eq!(b.defaults.budget, Some(100));
    assert_eq!(b.overrides["k"].budget, Some(5));
    assert_eq!(b.overrides["n"].budget, Some(100), "null: inherited");

    // Unknown keys and bad values fail loudly, at every level.
    let bad_configs = [
        json!({"max_concurent": 1}),
        json!({"open_duration_ms": 1}),
        json!({"max_keys": 1}),
        json!({"resilience": {"adaptiv": {}}}),
        json!({"resilience": {"call_timeout": 5}}),
        json!({"resilience": {"breaker": {"open_duration": 5}}}),
        json!({"resilience": {"breaker": {"min_limit": 5}}}),
        json!({"resilience": {"adaptive": {"failure_threshold": 5}}}),
        json!({"resilience": {"breaker": 3}}),
        json!({"max_concurrent": 0}),
        json!({"max_concurrent": 1.5}),
        json!({"max_concurrent": "1"}),
        json!({"enabled": 1}),
        json!({"queue_timeout_ms": "forever"}),
        json!({"resilience": {"breaker": {"open_duration_ms": 0}}}),
        json!({"resilience": {"breaker": {"open_duration_ms": "infinite"}}}),
        json!({"resilience": {"adaptive": {"algorithm": "vegas"}}}),
        json!({"max_concurrent": 2, "resilience": {"adaptive": {"max_limit": 3}}}),
        json!({"budget": 0}),
        json!({"budget": "10"}),
        json!({"max_concurrent": 300_000, "budget": 10}),
    ];
    for v in &bad_configs {
        let r = std::panic::catch_unwind(|| config("t", Some(v)));
        assert!(r.is_err(), "config {v} was accepted");
        let r = std::panic::catch_unwind(|| registry_config("t", &json!({"defaults": v})));
        assert!(r.is_err(), "defaults {v} were accepted");
        let r = std::panic::catch_unwind(|| registry_config("t", &json!({"overrides": {"k": v}})));
        assert!(r.is_err(), "override {v} was accepted");
    }
    for r in [
        json!({"max_key": 1}),
        json!({"max_keys": 0}),
        json!({"overrides": {"https://": {}}}),
    ] {
        let got = std::panic::catch_unwind(|| registry_config("t", &r));
        assert!(got.is_err(), "registry {r} was accepted");
    }
    // And the runner fails on them (before any step).
    let v = json!({"name": "x", "config": {"max_concurent": 1},
        "steps": [{"op": "stats", "expect": {}}]});
    assert!(std::panic::catch_unwind(|| run(&v)).is_err());
}
