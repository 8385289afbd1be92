//! Admission classes (docs/design.md §4.8) against a sequential reference model: class tables
//! (1–4 classes, floors, ceilings, tied priorities, a priority reserve, lending, shedding, a
//! requests rate) and single-thread sequences of admissions (at once or queueing, any class and
//! weight), releases, cancels, limit changes (growth, shrink, the kill switch) and rate ticks
//! run on a real classed bulkhead and on a deliberately naive model: per-class FIFO queues and
//! counts, and one dispatch to quiescence per operation that scans the ranks in the documented
//! order (a head wholly inside its class's floor first; else, of the highest priority, the
//! oldest head not held back by its own ceiling (FIFO across classes of one priority), if the
//! shared rest — and for a priority ≥ `min_priority` the reserve — has room; nobody of a lower
//! rank takes shared units past a higher head that is short). After every step every decision,
//! every grant, every class's hold and queue and the shared units must match, and the partition
//! holds: Σ holds = active, each hold ≤ its ceiling, the shared units ≤ limit − Σ floors (the
//! units of the low ranks ≤ limit − Σ floors − reserve).
//!
//! [`run`] panics at the first difference. The table must be one the callers generate: 1–4
//! classes, `floor ≤ ceiling ≤ MAX_CONCURRENT`, `budget_floor ≤ budget_ceiling ≤ BUDGET`, Σ
//! floors + reserve within the limit and the budget in each dimension, a rate of 1–4 requests
//! per 100 ms with a burst of 1–3; admissions ask 1–3 permits and 0–5 units.

use std::{
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    task::Poll,
    time::Duration,
};

use hullguard_core::{
    Bulkhead, Call, Cancelled, Clock, ClockSource, Config, Decision, LimitsSnapshot, Reason,
    Request, Waiter, WouldAdmit,
    config::{ClassSpec, ClassTable, PriorityReserve, Rate, Rates},
};

pub const MAX_CONCURRENT: u64 = 6;
pub const MAX_QUEUE: u64 = 3;
/// The budget (units) every table has: the second dimension (docs/design.md §4.5, §4.8).
pub const BUDGET: u64 = 8;

#[derive(Debug, Clone)]
pub enum Op {
    Admit {
        class: u16,
        weight: u64,
        cost: u64,
        wait: bool,
    },
    /// Releases the held call at this index (mod the number held).
    Release(usize),
    /// Cancels the queued waiter at this index (mod the number queued).
    Cancel(usize),
    /// `apply_limits` with this limit (refused below the floors plus the reserve, except 0).
    Limit(u64),
    /// `apply_limits` with this budget (likewise for the budget floors and reserve).
    Budget(u64),
    /// The virtual clock moves on this many ms, then the host's rate timer runs a pass
    /// (`rate_tick`).
    Tick(u64),
}

#[derive(Debug, Clone)]
pub struct Table {
    pub classes: Vec<ClassSpec>,
    pub reserve: PriorityReserve,
    pub lending: bool,
    pub shed: bool,
    /// A requests rate: (per 100 ms, burst), or none.
    pub rate: Option<(u64, u64)>,
}

impl Table {
    /// This table with Σ floors + reserve within the model's limit and budget, in each
    /// dimension (floors lowered, first class first): what the proptest generator and the
    /// fuzz target hand the runner.
    pub fn fit(mut self) -> Self {
        let (permits, budget) = (self.reserve.permits, self.reserve.budget);
        while self.classes.iter().map(|c| c.floor).sum::<u64>() + permits > MAX_CONCURRENT {
            let c = self.classes.iter_mut().find(|c| c.floor > 0).unwrap();
            c.floor -= 1;
        }
        while self.classes.iter().map(|c| c.budget_floor).sum::<u64>() + budget > BUDGET {
            let c = self
                .classes
                .iter_mut()
                .find(|c| c.budget_floor > 0)
                .unwrap();
            c.budget_floor -= 1;
        }
        self
    }
}

/// How a head stands (the model's own copy of the rule); `Ceiling` and `Pool` name the
/// dimension that held it back (0 the permits, 1 the budget).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Verdict {
    Floor,
    Shared,
    Ceiling(usize),
    Pool(usize),
}

impl Verdict {
    /// The reason a no-wait request with this verdict is refused (a barger that would fit:
    /// `concurrency_limit`).
    fn reason(self) -> Reason {
        match self {
            Verdict::Ceiling(1) | Verdict::Pool(1) => Reason::BudgetLimit,
            _ => Reason::ConcurrencyLimit,
        }
    }
}

struct Model {
    /// The permit limit and the budget.
    limit: u64,
    budget: u64,
    spec: Vec<ClassSpec>,
    reserve: PriorityReserve,
    lending: bool,
    shed: bool,
    /// The requests rate's GCRA (emission interval, tolerance, TAT, all in ns) and the clock.
    gcra: Option<(u64, u64, u64)>,
    now: u64,
    /// Class indices by rank: priority descending, ties by index.
    order: Vec<usize>,
    /// Per class: [permits, units] held.
    held: Vec<[u64; 2]>,
    /// Per class: (waiter id, [weight, cost]).
    queues: Vec<VecDeque<(u64, [u64; 2])>>,
    /// Waiters the model refused, with the reason.
    refusals: std::collections::HashMap<u64, Reason>,
    /// Per class: requests its observed ceilings would have refused.
    observed: Vec<u64>,
}

impl Model {
    fn new(t: &Table) -> Self {
        let mut order: Vec<usize> = (0..t.classes.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(t.classes[i].priority));
        Model {
            limit: MAX_CONCURRENT,
            budget: BUDGET,
            spec: t.classes.clone(),
            reserve: t.reserve,
            lending: t.lending,
            shed: t.shed,
            gcra: t.rate.map(|(n, b)| (100 * MS / n, 100 * MS / n * b, 0)),
            now: START,
            order,
            held: vec![[0, 0]; t.classes.len()],
            queues: vec![VecDeque::new(); t.classes.len()],
            refusals: Default::default(),
            observed: vec![0; t.classes.len()],
        }
    }

    fn limits(&self) -> [u64; 2] {
        [self.limit, self.budget]
    }

    fn floor(&self, c: usize, d: usize) -> u64 {
        [self.spec[c].floor, self.spec[c].budget_floor][d]
    }

    fn ceiling(&self, c: usize, d: usize) -> u64 {
        [
            self.spec[c].ceiling.unwrap_or(MAX_CONCURRENT),
            self.spec[c].budget_ceiling.unwrap_or(BUDGET),
        ][d]
    }

    /// Whether class `c` observes its ceiling of dimension `d` (counted, not held back).
    fn observes(&self, c: usize, d: usize) -> bool {
        let o = self.spec[c].observe;
        if d == 0 { o.concurrency() } else { o.budget() }
    }

    /// Whether class `c` asking `n` is past an observed ceiling now.
    fn past_observed(&self, c: usize, n: [u64; 2]) -> bool {
        (0..2)
            .any(|d| n[d] > 0 && self.observes(c, d) && self.held[c][d] + n[d] > self.ceiling(c, d))
    }

    fn floors(&self, d: usize) -> u64 {
        (0..self.spec.len()).map(|c| self.floor(c, d)).sum()
    }

    fn reserve(&self, d: usize) -> u64 {
        [self.reserve.permits, self.reserve.budget][d]
    }

    fn shared(&self, d: usize) -> u64 {
        (0..self.spec.len())
            .map(|c| self.held[c][d].saturating_sub(self.floor(c, d)))
            .sum()
    }

    fn total(&self, d: usize) -> u64 {
        self.held.iter().map(|h| h[d]).sum()
    }

    /// Class `c` asking `n` = [permits, units]: each dimension's ceiling first, then wholly
    /// inside the untouched floors, else each dimension's need beyond its floor against the
    /// shared units (the reserve for a high priority; with lending, idle floors).
    fn verdict(&self, c: usize, n: [u64; 2]) -> Verdict {
        let mut need = [0; 2];
        for d in 0..2 {
            let (h, f) = (self.held[c][d], self.floor(c, d));
            if h + n[d] > self.ceiling(c, d) && !self.observes(c, d) {
                return Verdict::Ceiling(d);
            }
            need[d] = (h + n[d]).saturating_sub(f) - h.saturating_sub(f);
        }
        // With lending, a class that may not take the reserve takes its floor only while the
        // classes that may not take it, with every floor part, hold at most `limit − reserve`
        // with it (its floor may be lent out: taking it back before the reclaim would eat the
        // reserve).
        for d in 0..2 {
            let low = self.spec[c].priority < self.reserve.min_priority;
            if need[d] == 0 && n[d] > 0 && self.lending && low && self.reserve(d) > 0 {
                // The holds of the classes the reserve is not for, and every floor part.
                let held: u64 = (0..self.spec.len())
                    .map(|k| {
                        if self.spec[k].priority < self.reserve.min_priority {
                            self.held[k][d]
                        } else {
                            self.held[k][d].min(self.floor(k, d))
                        }
                    })
                    .sum();
                if held + n[d] > self.limits()[d].saturating_sub(self.reserve(d)) {
                    return Verdict::Pool(d);
                }
            }
        }
        if need == [0, 0] {
            return Verdict::Floor;
        }
        for d in 0..2 {
            if need[d] == 0 {
                continue;
            }
            let (h, f) = (self.held[c][d], self.floor(c, d));
            let reserve = if self.spec[c].priority >= self.reserve.min_priority {
                0
            } else {
                self.reserve(d)
            };
            let mut cap = self.limits()[d].saturating_sub(self.floors(d) + reserve);
            if self.lending {
                // The other classes' idle floor units, once this take has filled its own floor.
                let used: u64 = (0..self.spec.len())
                    .map(|k| self.held[k][d].min(self.floor(k, d)))
                    .sum();
                cap += self
                    .floors(d)
                    .saturating_sub(used + n[d].min(f.saturating_sub(h)));
            }
            if self.shared(d) + need[d] > cap {
                return Verdict::Pool(d);
            }
        }
        Verdict::Shared
    }

    /// Why `n` can never be granted now: above the limit or the budget (the engine's
    /// `never_fits`, permits first), else above the class's ceilings.
    fn never_fits(&self, c: usize, n: [u64; 2]) -> Option<Reason> {
        if n[0] > self.limit {
            Some(Reason::ConcurrencyLimit)
        } else if n[1] > self.budget {
            Some(Reason::BudgetLimit)
        } else if n[0] > self.ceiling(c, 0) && !self.observes(c, 0) {
            Some(Reason::ConcurrencyLimit)
        } else if n[1] > self.ceiling(c, 1) && !self.observes(c, 1) {
            Some(Reason::BudgetLimit)
        } else {
            None
        }
    }

    /// One dispatch to quiescence: the granted waiter ids (the refused ones are recorded in
    /// `refusals` with their reasons).
    fn dispatch(&mut self) -> Vec<u64> {
        let mut granted = vec![];
        // Classes whose floor head the limit itself held back: other floor heads may still
        // take their own floors, nobody takes shared units past it.
        let mut over_limit = vec![false; self.spec.len()];
        loop {
            let mut pick = None;
            let mut pool_blocked = over_limit.iter().any(|&b| b);
            // Per priority, the oldest head wanting shared units: (priority, class, id, fits).
            let mut group: Option<(u8, usize, u64, bool)> = None;
            let close = |g: Option<(u8, usize, u64, bool)>,
                         pick: &mut Option<(usize, bool)>,
                         pool_blocked: &mut bool| {
                match g {
                    Some((_, c, _, true)) if !*pool_blocked && pick.is_none() => {
                        *pick = Some((c, false))
                    }
                    Some((_, _, _, false)) => *pool_blocked = true,
                    _ => {}
                }
            };
            for &c in &self.order.clone() {
                if over_limit[c] {
                    continue;
                }
                // Heads that can never fit now are refused as the pass meets them.
                while let Some(&(id, w)) = self.queues[c].front() {
                    let Some(r) = self.never_fits(c, w) else {
                        break;
                    };
                    self.queues[c].pop_front();
                    self.refusals.insert(id, r);
                }
                let Some(&(id, w)) = self.queues[c].front() else {
                    continue;
                };
                let fits = match self.verdict(c, w) {
                    Verdict::Floor => {
                        pick = Some((c, true));
                        group = None;
                        break;
                    }
                    Verdict::Shared => true,
                    Verdict::Pool(_) => false,
                    Verdict::Ceiling(_) => continue,
                };
                let p = self.spec[c].priority;
                match group {
                    Some((gp, _, gid, _)) if gp == p && gid < id => {}
                    Some((gp, ..)) if gp == p => group = Some((p, c, id, fits)),
                    _ => {
                        close(group.take(), &mut pick, &mut pool_blocked);
                        group = Some((p, c, id, fits));
                    }
                }
            }
            close(group, &mut pick, &mut pool_blocked);
            let Some((c, floor)) = pick else {
                return granted;
            };
            // The limit itself comes last (after a shrink, holders above it leave by
            // attrition; with lending, floors may be lent out).
            let w = self.queues[c].front().unwrap().1;
            // The rate first: one request, charged only when granted.
            let rated = self.gcra.map(|(t, tau, tat)| {
                let new = tat.max(self.now) + t;
                (new - self.now <= tau, new)
            });
            if let Some((false, _)) = rated {
                // A rate-held head stops the pass, floors included (no barging past it).
                return granted;
            }
            // A cost of 0 asks nothing of the budget, even an overdrawn one (docs/design.md §4.5).
            if self.total(0) + w[0] > self.limit
                || (w[1] != 0 && self.total(1) + w[1] > self.budget)
            {
                if floor {
                    over_limit[c] = true;
                    continue;
                }
                return granted;
            }
            let (id, w) = self.queues[c].pop_front().unwrap();
            if self.past_observed(c, w) {
                self.observed[c] += 1;
            }
            self.held[c][0] += w[0];
            self.held[c][1] += w[1];
            if let (Some(g), Some((true, new))) = (self.gcra.as_mut(), rated) {
                g.2 = new;
            }
            granted.push(id);
        }
    }

    /// The shed victim for an arrival of class `c` (taken off its queue), if shedding is on
    /// and anyone of a lower priority waits: the youngest of the lowest priority (ties: the
    /// lowest rank, as the engine scans).
    fn victim(&mut self, c: usize) -> Option<u64> {
        if !self.shed {
            return None;
        }
        let p = self.spec[c].priority;
        for &k in self.order.clone().iter().rev() {
            if self.spec[k].priority >= p {
                return None;
            }
            if let Some((id, _)) = self.queues[k].pop_back() {
                return Some(id);
            }
        }
        None
    }

    fn queued(&self) -> u64 {
        self.queues.iter().map(|q| q.len() as u64).sum()
    }
}

type Bh = Bulkhead<0>;

const MS: u64 = 1_000_000;
/// The virtual clock's start (1 s: the GCRA's TAT starts at 0, in the past).
const START: u64 = 1_000 * MS;

#[derive(Default)]
struct VClock(AtomicU64);
impl Clock for VClock {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

pub fn run(t: &Table, ops: &[Op]) {
    let clock = Arc::new(VClock(AtomicU64::new(START)));
    let bh = Bh::with_classes(
        Config {
            max_concurrent: MAX_CONCURRENT,
            max_queue: MAX_QUEUE,
            budget: Some(BUDGET),
            ..Config::DEFAULT
        },
        &ClassTable {
            lending: t.lending,
            shed: t.shed,
            rates: Rates {
                requests: t.rate.map(|(amount, burst)| Rate {
                    amount,
                    per: Duration::from_millis(100),
                    burst,
                }),
                units: None,
            },
            classes: &t.classes,
            reserve: t.reserve,
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let mut m = Model::new(t);
    let _ = &clock;
    let n = t.classes.len() as u16;
    let mut held: Vec<(usize, Call<&Bh, 0>)> = vec![];
    let mut waiting: Vec<(u64, usize, Waiter<&Bh, 0>)> = vec![];
    let mut next_id = 0u64;
    // The waiters the model shed (their engine waiters must be refused `shed`).
    let mut shed_ids: Vec<u64> = vec![];
    let mut revision = 0u64;
    // The shared units and the low ranks' shared units after the previous step.
    let mut prev = [(0u64, 0u64, 0u64); 2];
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Admit {
                class,
                weight,
                cost,
                wait,
            } => {
                let r = Request::new(weight).cost(cost).class(class);
                let r = if wait { r } else { r.no_wait() };
                // The dry run first: it must answer what the admission then does, and change
                // nothing the stats show.
                let before = bh.stats();
                let dry = bh.would_admit(&r);
                assert_eq!(
                    bh.stats(),
                    before,
                    "step {step}: the dry run changed the stats"
                );
                let d = bh.admit(&r, None);
                if class >= n {
                    assert!(
                        matches!(d, Decision::Rejected(e) if e.reason().is_none()),
                        "step {step}"
                    );
                    assert!(
                        matches!(dry, WouldAdmit::Reject(e) if e.reason().is_none()),
                        "step {step}"
                    );
                    continue;
                }
                let p = t.classes[class as usize].priority;
                let ahead: u64 = (0..t.classes.len())
                    .filter(|&k| t.classes[k].priority >= p)
                    .map(|k| m.queues[k].len() as u64)
                    .sum();
                let c = class as usize;
                // The model: the no-wait step (appended behind its class's queue, then one
                // dispatch), then the queue's own rules.
                let id = next_id;
                next_id += 1;
                let ask = [weight, cost];
                let expect = if let Some(r) = m.never_fits(c, ask) {
                    Err(r)
                } else {
                    m.queues[c].push_back((id, ask));
                    let g = m.dispatch();
                    if g.contains(&id) {
                        Ok(true)
                    } else {
                        m.queues[c].pop_back();
                        if !wait {
                            // The rate's refusal, if it is the rate that does not conform.
                            let rated = m
                                .gcra
                                .is_some_and(|(t, tau, tat)| tat.max(m.now) + t - m.now > tau);
                            Err(if rated {
                                Reason::RateLimit
                            } else {
                                m.verdict(c, ask).reason()
                            })
                        } else if m.queued() >= MAX_QUEUE {
                            // Shedding: the youngest waiter of the lowest priority below the
                            // arrival's gives its place up.
                            match m.victim(c) {
                                Some(v) => {
                                    shed_ids.push(v);
                                    m.queues[c].push_back((id, ask));
                                    let _ = m.dispatch();
                                    Ok(false)
                                }
                                None => Err(Reason::QueueLimit),
                            }
                        } else {
                            m.queues[c].push_back((id, ask));
                            Ok(false)
                        }
                    }
                };
                if expect.is_err() && m.past_observed(c, ask) {
                    // Refused for good, and its own ceiling would have refused it too.
                    m.observed[c] += 1;
                }
                match (&d, &dry) {
                    (Decision::Granted(_), WouldAdmit::AdmitNow) => {}
                    (Decision::Queued(_), WouldAdmit::WouldQueue { ahead: a, position }) => {
                        assert_eq!((*a, *position), (ahead, ahead + 1), "step {step} {op:?}")
                    }
                    (Decision::Rejected(e), WouldAdmit::Reject(x)) => {
                        assert_eq!(e.reason(), x.reason(), "step {step} {op:?}")
                    }
                    (d, x) => panic!("step {step} {op:?}: admitted {d:?}, the dry run said {x:?}"),
                }
                match (d, expect) {
                    (Decision::Granted(call), Ok(true)) => held.push((c, call)),
                    (Decision::Queued(w), Ok(false)) => waiting.push((id, c, w)),
                    (Decision::Rejected(e), Err(r)) => {
                        assert_eq!(e.reason(), Some(r), "step {step} {op:?}")
                    }
                    (d, e) => panic!("step {step} {op:?}: engine {d:?}, model {e:?}"),
                }
            }
            Op::Release(i) => {
                if held.is_empty() {
                    continue;
                }
                let (c, call) = held.swap_remove(i % held.len());
                m.held[c][0] -= call.weight();
                m.held[c][1] -= call.cost();
                drop(call);
                let _ = m.dispatch();
            }
            Op::Cancel(i) => {
                if waiting.is_empty() {
                    continue;
                }
                let (id, c, w) = waiting.swap_remove(i % waiting.len());
                match w.cancel(Reason::Aborted) {
                    Cancelled::Cancelled(_) => {
                        let q = &mut m.queues[c];
                        let at = q
                            .iter()
                            .position(|&(x, _)| x == id)
                            .expect("queued in the model");
                        q.remove(at);
                        let _ = m.dispatch();
                    }
                    other => {
                        panic!("step {step}: a waiter the model holds queued settled: {other:?}")
                    }
                }
            }
            Op::Tick(ms) => {
                clock.0.fetch_add(ms * MS, SeqCst);
                m.now += ms * MS;
                bh.rate_tick();
                let _ = m.dispatch();
            }
            Op::Limit(v) | Op::Budget(v) => {
                // One dimension's new limit: refused below its floors plus the reserve, but 0.
                let d = usize::from(matches!(op, Op::Budget(_)));
                let snap = LimitsSnapshot::new(revision + 1);
                let snap = if d == 0 {
                    snap.limit(v)
                } else {
                    snap.budget(v)
                };
                let r = bh.apply_limits(&snap);
                let allowed = v == 0 || v >= m.floors(d) + m.reserve(d);
                assert_eq!(r.is_ok(), allowed, "step {step} {op:?}: {r:?}");
                if allowed {
                    revision += 1;
                    if d == 0 {
                        m.limit = v;
                    } else {
                        m.budget = v;
                    }
                    let _ = m.dispatch();
                }
            }
        }
        // Every waiter the model granted or refused is settled so on the engine, and no other.
        let mut still = vec![];
        for (id, c, mut w) in waiting.drain(..) {
            let in_model = m.queues[c].iter().any(|&(x, _)| x == id);
            match w.poll(None) {
                Poll::Pending => {
                    assert!(
                        in_model,
                        "step {step}: waiter {id} pending, the model settled it"
                    );
                    still.push((id, c, w));
                }
                Poll::Ready(Ok(call)) => {
                    assert!(
                        !in_model,
                        "step {step}: waiter {id} granted, the model queues it"
                    );
                    held.push((c, call));
                }
                Poll::Ready(Err(e)) => {
                    assert!(
                        !in_model,
                        "step {step}: waiter {id} refused ({e}), the model queues it"
                    );
                    let want = if shed_ids.contains(&id) {
                        Reason::Shed
                    } else {
                        m.refusals[&id]
                    };
                    assert_eq!(e.reason(), Some(want), "step {step}: waiter {id}");
                }
            }
        }
        waiting = still;
        // The model's holds are the test's.
        for c in 0..t.classes.len() {
            let ours = held
                .iter()
                .filter(|(k, _)| *k == c)
                .fold([0, 0], |a, (_, x)| [a[0] + x.weight(), a[1] + x.cost()]);
            assert_eq!(m.held[c], ours, "step {step}: class {c} hold");
            let cs = bh.class_stats(c as u16).unwrap();
            assert_eq!(
                (cs.in_flight, cs.budget_in_use, cs.queued, cs.observed),
                (ours[0], ours[1], m.queues[c].len() as u64, m.observed[c]),
                "step {step}: class {c}"
            );
            assert!(
                (cs.in_flight <= cs.ceiling || m.observes(c, 0))
                    && (cs.budget_in_use <= cs.budget_ceiling || m.observes(c, 1))
            );
        }
        let s = bh.stats();
        assert_eq!(
            (s.active, s.budget.unwrap().in_use, s.queued),
            (m.total(0), m.total(1), m.queued()),
            "step {step}: {s}"
        );
        assert_eq!(
            bh.class_shared_in_use().unwrap(),
            [m.shared(0), m.shared(1)],
            "step {step}"
        );
        // The partition, per dimension: the shared units fit the limit less the floors, and
        // the low ranks' fit that less the reserve — or, after a shrink left holders above it
        // (attrition), they never grow until they fit again.
        for (d, pr) in prev.iter_mut().enumerate() {
            let low: u64 = (0..t.classes.len())
                .filter(|&c| t.classes[c].priority < t.reserve.min_priority)
                .map(|c| m.held[c][d].saturating_sub(m.floor(c, d)))
                .sum();
            let cap = m.limits()[d].saturating_sub(m.floors(d));
            let mut low_cap = cap.saturating_sub(m.reserve(d));
            if t.lending {
                // Borrowed idle floor units count beyond their borrowers' floors.
                let used: u64 = (0..t.classes.len())
                    .map(|k| m.held[k][d].min(m.floor(k, d)))
                    .sum();
                low_cap += m.floors(d).saturating_sub(used);
            }
            let (p_shared, p_low, p_total) = *pr;
            // With lending the shared units may pass it by design (borrowed idle floors); the
            // limit still holds every unit.
            assert!(
                m.shared(d) <= cap || m.shared(d) <= p_shared || t.lending,
                "step {step}: the shared units of dimension {d} grew past the limit less the floors"
            );
            assert!(
                m.total(d) <= m.limits()[d] || m.total(d) <= p_total,
                "step {step}: the holds of dimension {d} grew past the limit"
            );
            assert!(
                low <= low_cap || low <= p_low,
                "step {step}: the low ranks grew into the reserve of dimension {d}"
            );
            *pr = (m.shared(d), low, m.total(d));
        }
    }
    drop(waiting);
    drop(held);
    let s = bh.stats();
    assert_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0), "{s}");
    assert_eq!(bh.class_shared_in_use(), Some([0, 0]));
    assert_eq!(s.budget.unwrap().in_use, 0, "{s}");
}
