//! The budget (docs/design.md §4.5) against a sequential reference model: single-thread
//! sequences of admissions with weights and costs (at once or queueing), polls, cancels, refunds,
//! streaming usage reports (shrinks, growth through admission, overrun), settlements with usage,
//! observe mode switched per dimension and shadowed per request (docs/design.md §4.7),
//! reservations reserved, committed and aborted (§5.8), and runtime changes of the budget and
//! the limit run on a real bulkhead and on a deliberately naive model (a FIFO of waiters, free
//! counts, one dispatch to quiescence per operation). After every step every decision and the
//! whole stats object — both dimensions, every counter — must match, and I2 holds per
//! dimension against what the test itself holds.
//!
//! [`run`] takes any [`Op`] sequence: indices are taken modulo what the test holds, and
//! weights, costs and limits outside the generators' ranges are answered by the model too
//! (`SetBudget` and `SetLimit` must stay within `0..=BUDGET` and `1..=MAX_CONCURRENT`).

use std::{collections::VecDeque, task::Poll, time::Duration};

use hullguard_core::{
    AcquireError, Bulkhead, Call, Cancelled, Config, Decision, HoldChange, Observe, Outcome,
    Reason, Request, Reservation, ReserveError, UsageError, Waiter, WouldAdmit,
};

use super::{Mismatch, ensure_eq};

pub const MAX_CONCURRENT: u64 = 3;
pub const MAX_QUEUE: u64 = 2;
pub const BUDGET: u64 = 12;
/// `max_reservations`: small, so `Full` happens.
pub const MAX_RESERVATIONS: u64 = 2;
/// `max_queued_cost`: below the largest cost (12), so it bites often — a costly request that
/// must queue, or two queued costs.
pub const MAX_QUEUED_COST: u64 = 10;

#[derive(Debug, Clone)]
pub enum Op {
    Admit {
        weight: u64,
        cost: u64,
        wait: bool,
        /// The request's own observe (docs/design.md §4.7, "Per request"): (permits, budget).
        observe: (bool, bool),
    },
    /// `reserve(request, no TTL)` (docs/design.md §5.8).
    Reserve {
        weight: u64,
        cost: u64,
    },
    Commit(usize),
    Abort(usize),
    Poll(usize),
    Cancel(usize),
    Refund(usize, u64),
    ReleasePartial(usize, u64),
    End(usize, Option<u64>),
    /// `report_usage(used, remaining)` on a call.
    Report(usize, u64, u64),
    SetBudget(u64),
    SetLimit(u64),
    /// `set_observe`: (permits observed, budget observed).
    SetObserve(bool, bool),
}

/// What a decision looked like, on either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Granted,
    Queued,
    Rejected(Reason),
    Invalid,
    Pending,
    /// `ReserveError::Full`.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MState {
    Waiting,
    Granted,
    Rejected(Reason),
}

/// The naive model.
#[derive(Debug, Default)]
struct Model {
    limit: u64,
    budget: u64,
    /// Held by claimed calls, in the test's call order.
    calls: Vec<MCall>,
    /// Held by reservations, in the test's reservation order.
    reservations: Vec<MCall>,
    /// Each waiter's own observe (by the test's waiter order).
    wobserve: Vec<(bool, bool)>,
    /// Every waiter ever queued (index = the test's waiter order), and the live FIFO.
    waiters: Vec<(u64, u64, MState)>,
    fifo: VecDeque<usize>,
    admitted: u64,
    rejected: [u64; Reason::COUNT],
    reserved: u64,
    consumed: u64,
    refunded: u64,
    overrun: u64,
    /// Observe mode: (permits observed, budget observed), and what it let through by reason.
    observe: (bool, bool),
    observed: [u64; Reason::COUNT],
    /// Refusals by `max_queued_cost` (the generator's coverage).
    cost_bound_hits: u64,
}

/// One claimed call of the model: permits, units charged to the budget, units held past it
/// (overrun), the cumulative usage reported.
#[derive(Debug, Default, Clone, Copy)]
struct MCall {
    w: u64,
    c: u64,
    o: u64,
    rep: u64,
}

impl Model {
    /// Permits and charged units held by claimed calls.
    fn held(&self) -> (u64, u64) {
        self.calls
            .iter()
            .chain(&self.reservations)
            .fold((0, 0), |(w, c), k| (w + k.w, c + k.c))
    }

    /// The total cost of the live waiters.
    fn queued_cost(&self) -> u64 {
        self.fifo.iter().map(|&i| self.waiters[i].1).sum()
    }

    fn overrun_held(&self) -> u64 {
        self.calls.iter().map(|k| k.o).sum()
    }

    /// Shrinks call `k`'s hold by `n`: the overrun part first, then the charge (refunded).
    fn shrink(&mut self, k: usize, n: u64) {
        let call = &mut self.calls[k];
        let over = n.min(call.o);
        call.o -= over;
        call.c -= n - over;
        self.refunded += n;
        self.dispatch();
    }

    /// `report_usage(used, remaining)` on call `k`, by the rules of docs/design.md §4.5.
    fn report(&mut self, k: usize, used: u64, remaining: u64) -> Result<HoldChange, UsageError> {
        let call = self.calls[k];
        if call.w == 0 {
            return Err(UsageError::Released);
        }
        if used < call.rep {
            return Err(UsageError::Decreased {
                previous: call.rep,
                got: used,
            });
        }
        self.calls[k].rep = used;
        let (target, held) = (used + remaining, call.c + call.o);
        if target < held {
            self.shrink(k, held - target);
            return Ok(HoldChange::Shrank(held - target));
        }
        let d = target - held;
        if d == 0 {
            return Ok(HoldChange::Unchanged);
        }
        let free = self.free();
        // Growth asks no permit (overdrawn permits do not stop it) and takes nothing while
        // anyone waits (an observed budget lets it through); otherwise it is held past it.
        if self.fifo.is_empty() && self.fits(0, d, free, self.observe) {
            self.note_observed(0, d, free);
            self.calls[k].c += d;
            self.reserved += d;
            Ok(HoldChange::Grew(d))
        } else {
            self.calls[k].o += d;
            self.overrun += d;
            Ok(HoldChange::Overran(d))
        }
    }

    fn unclaimed(&self) -> (u64, u64) {
        self.waiters
            .iter()
            .filter(|w| w.2 == MState::Granted)
            .fold((0, 0), |(a, b), w| (a + w.0, b + w.1))
    }

    fn free(&self) -> (i64, i64) {
        let (hw, hc) = self.held();
        let (uw, uc) = self.unclaimed();
        (
            self.limit as i64 - (hw + uw) as i64,
            self.budget as i64 - (hc + uc) as i64,
        )
    }

    /// Counts an admission observe mode let through when `w` permits and `c` units were asked
    /// with `(fw, fc)` free: the permits' reason first, as the enforced decision.
    fn note_observed(&mut self, w: u64, c: u64, (fw, fc): (i64, i64)) {
        if w > 0 && fw < w as i64 {
            self.observed[Reason::ConcurrencyLimit.index()] += 1;
        } else if c > 0 && fc < c as i64 {
            self.observed[Reason::BudgetLimit.index()] += 1;
        }
    }

    /// Whether `w` permits and `c` units fit `(fw, fc)` with the observed dimensions let
    /// through.
    fn fits(&self, w: u64, c: u64, (fw, fc): (i64, i64), (oc, ob): (bool, bool)) -> bool {
        // No permits asked (a growth): nothing asked of the permits, even overdrawn ones.
        (w == 0 || fw >= w as i64 || oc) && (c == 0 || fc >= c as i64 || ob)
    }

    /// The bulkhead's observe mode with a request's own added.
    fn observing(&self, (rc, rb): (bool, bool)) -> (bool, bool) {
        (self.observe.0 || rc, self.observe.1 || rb)
    }

    fn reject(&mut self, r: Reason) -> Seen {
        self.rejected[r.index()] += 1;
        Seen::Rejected(r)
    }

    /// The dispatcher to quiescence: from the head, refuse what can never fit the current
    /// ceilings, grant what fits, stop at the first that does not.
    fn dispatch(&mut self) {
        while let Some(&i) = self.fifo.front() {
            let (w, c, _) = self.waiters[i];
            // The head keeps its own observe (its bits ride in its cell).
            let obs = self.observing(self.wobserve[i]);
            let verdict = if w > self.limit && !obs.0 {
                Some(Reason::ConcurrencyLimit)
            } else if c > self.budget && !obs.1 {
                Some(Reason::BudgetLimit)
            } else {
                None
            };
            if let Some(r) = verdict {
                self.rejected[r.index()] += 1;
                self.waiters[i].2 = MState::Rejected(r);
                self.fifo.pop_front();
                continue;
            }
            let free = self.free();
            // A cost of 0 asks nothing of the budget, even when it is overdrawn.
            if !self.fits(w, c, free, obs) {
                return;
            }
            self.note_observed(w, c, free);
            self.waiters[i].2 = MState::Granted;
            self.admitted += 1;
            self.reserved += c;
            self.fifo.pop_front();
        }
    }

    fn admit(&mut self, weight: u64, cost: u64, wait: bool, observe: (bool, bool)) -> Seen {
        if weight == 0 || weight > MAX_CONCURRENT || cost > BUDGET {
            return Seen::Invalid;
        }
        let (fw, fc) = self.free();
        let (oc, ob) = self.observing(observe);
        let short = if !self.fifo.is_empty() || (fw < weight as i64 && !oc) {
            Reason::ConcurrencyLimit
        } else if cost > 0 && fc < cost as i64 && !ob {
            Reason::BudgetLimit
        } else {
            self.note_observed(weight, cost, (fw, fc));
            self.calls.push(MCall {
                w: weight,
                c: cost,
                ..MCall::default()
            });
            self.admitted += 1;
            self.reserved += cost;
            return Seen::Granted;
        };
        if !wait {
            return self.reject(short);
        }
        if weight > self.limit && !oc {
            return self.reject(Reason::ConcurrencyLimit);
        }
        if cost > self.budget && !ob {
            return self.reject(Reason::BudgetLimit);
        }
        if self.fifo.len() as u64 >= MAX_QUEUE {
            return self.reject(Reason::QueueLimit);
        }
        if self.queued_cost() + cost > MAX_QUEUED_COST {
            self.cost_bound_hits += 1;
            return self.reject(Reason::QueueLimit);
        }
        self.waiters.push((weight, cost, MState::Waiting));
        self.wobserve.push(observe);
        self.fifo.push_back(self.waiters.len() - 1);
        self.dispatch();
        Seen::Queued
    }

    /// Polls waiter `i`: its grant becomes a call (pushed last), or its rejection is consumed.
    fn poll(&mut self, i: usize) -> Seen {
        match self.waiters[i].2 {
            MState::Waiting => Seen::Pending,
            MState::Granted => {
                let (w, c, _) = self.waiters[i];
                self.calls.push(MCall {
                    w,
                    c,
                    ..MCall::default()
                });
                self.waiters[i].2 = MState::Rejected(Reason::Aborted); // consumed
                Seen::Granted
            }
            MState::Rejected(r) => Seen::Rejected(r),
        }
    }

    fn cancel(&mut self, i: usize) -> Seen {
        match self.waiters[i].2 {
            MState::Waiting => {
                self.fifo.retain(|&j| j != i);
                self.waiters[i].2 = MState::Rejected(Reason::Aborted);
                self.rejected[Reason::Aborted.index()] += 1;
                self.dispatch();
                Seen::Rejected(Reason::Aborted)
            }
            MState::Granted => self.poll(i),
            MState::Rejected(r) => Seen::Rejected(r),
        }
    }

    /// `reserve`: a free slot first (`Full`), then the admission with no wait; a grant is held
    /// as a reservation.
    fn reserve(&mut self, weight: u64, cost: u64) -> Seen {
        if self.reservations.len() as u64 >= MAX_RESERVATIONS {
            return Seen::Full;
        }
        let got = self.admit(weight, cost, false, (false, false));
        if got == Seen::Granted {
            let call = self.calls.pop().expect("just granted");
            self.reservations.push(call);
        }
        got
    }

    /// `abort`: everything back, the units counted refunded.
    fn abort(&mut self, k: usize) {
        let call = self.reservations.remove(k);
        self.consumed += 0;
        self.refunded += call.c + call.o;
        self.dispatch();
    }

    fn end(&mut self, k: usize, used: Option<u64>) {
        let call = self.calls.remove(k);
        let c = call.c + call.o;
        // A final usage below a report is raised to it; no usage: the whole hold.
        let used = used.map_or(c, |u| u.max(call.rep));
        self.consumed += used;
        if used < c {
            self.refunded += c - used;
        } else {
            self.overrun += used - c;
        }
        self.dispatch();
    }
}

/// The real side: live waiters (by the test's waiter order) and calls (in the model's order).
struct Real<'a> {
    bh: &'a Bulkhead,
    waiters: Vec<Option<Waiter<&'a Bulkhead, 0>>>,
    calls: Vec<Call<&'a Bulkhead, 0>>,
    reservations: Vec<Reservation<&'a Bulkhead, 0>>,
}

fn seen(e: &AcquireError) -> Seen {
    e.reason().map_or(Seen::Invalid, Seen::Rejected)
}

fn check(m: &Model, bh: &Bulkhead, step: usize) -> Result<(), Mismatch> {
    let s = bh.stats();
    let b = s.budget.expect("a budget");
    let (hw, hc) = m.held();
    let (uw, uc) = m.unclaimed();
    let (fw, fc) = m.free();
    let live = m.fifo.len() as u64;
    ensure_eq!(
        (
            s.active,
            s.queued,
            s.granted_unclaimed,
            s.available,
            s.limit
        ),
        (hw, live, uw, fw, m.limit),
        "permits at step {}: {}",
        step,
        s
    );
    ensure_eq!(
        (b.in_use, b.granted_unclaimed, b.available, b.limit),
        (hc, uc, fc, m.budget),
        "budget at step {}: {:?}",
        step,
        b
    );
    ensure_eq!(
        (
            b.reserved_total,
            b.consumed_total,
            b.refunded_total,
            b.overrun_total
        ),
        (m.reserved, m.consumed, m.refunded, m.overrun),
        "budget counters at step {}",
        step
    );
    ensure_eq!(
        b.queued_cost,
        m.queued_cost(),
        "queued cost at step {}",
        step
    );
    ensure_eq!(
        b.overrun_held,
        m.overrun_held(),
        "overrun held at step {}",
        step
    );
    ensure_eq!(s.admitted_total, m.admitted, "admitted at step {}", step);
    ensure_eq!(
        s.observed_by_reason.0,
        m.observed,
        "observed at step {}",
        step
    );
    ensure_eq!(
        s.observe,
        Observe::of(m.observe.0, m.observe.1),
        "mode at step {}",
        step
    );
    ensure_eq!(
        s.rejected_by_reason.0,
        m.rejected,
        "rejected at step {}",
        step
    );
    // The settlement identity (C30) and I2 for both dimensions, against what the test holds.
    ensure_eq!(
        b.reserved_total + b.overrun_total,
        b.consumed_total + b.refunded_total + b.in_use + b.granted_unclaimed + b.overrun_held
    );
    ensure_eq!(s.available + (hw + uw) as i64, s.limit as i64);
    ensure_eq!(b.available + (hc + uc) as i64, b.limit as i64);
    Ok(())
}

/// How often each kind of decision happened in a run (the generator's coverage).
#[derive(Debug, Default, Clone, Copy)]
pub struct Coverage {
    pub granted: u64,
    pub queued: u64,
    pub concurrency_limit: u64,
    pub budget_limit: u64,
    pub queue_limit: u64,
    pub refunds: u64,
    pub observe_switches: u64,
    pub cost_bound: u64,
    /// Admissions observe mode let through (counted in `observed_by_reason`).
    pub observed: u64,
    /// Reservations granted.
    pub reserved: u64,
    /// Reports that shrank, grew through admission, and overran.
    pub shrank: u64,
    pub grew: u64,
    pub overran: u64,
}

impl Coverage {
    fn note(&mut self, s: Seen) {
        match s {
            Seen::Granted => self.granted += 1,
            Seen::Queued => self.queued += 1,
            Seen::Rejected(Reason::ConcurrencyLimit) => self.concurrency_limit += 1,
            Seen::Rejected(Reason::BudgetLimit) => self.budget_limit += 1,
            Seen::Rejected(Reason::QueueLimit) => self.queue_limit += 1,
            _ => {}
        }
    }
}

pub fn run(ops: &[Op]) -> Result<Coverage, Mismatch> {
    let mut cov = Coverage::default();
    let bh = Bulkhead::new(Config {
        max_concurrent: MAX_CONCURRENT,
        max_queue: MAX_QUEUE,
        budget: Some(BUDGET),
        max_queued_cost: Some(MAX_QUEUED_COST),
        max_reservations: MAX_RESERVATIONS,
        queue_timeout: Duration::MAX,
        ..Config::default()
    })
    .unwrap();
    let mut m = Model {
        limit: MAX_CONCURRENT,
        budget: BUDGET,
        ..Model::default()
    };
    let mut r = Real {
        bh: &bh,
        waiters: Vec::new(),
        calls: Vec::new(),
        reservations: Vec::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Admit {
                weight,
                cost,
                wait,
                observe,
            } => {
                let req = Request::new(weight)
                    .cost(cost)
                    .observe(Observe::of(observe.0, observe.1));
                let req = if wait { req } else { req.no_wait() };
                // The dry run first: read-only (the stats do not move) and exactly what the
                // admission below decides (one check order, docs/design.md §5.6).
                let before = r.bh.stats();
                let dry = r.bh.would_admit(&req);
                ensure_eq!(
                    r.bh.stats(),
                    before,
                    "the dry run changed the stats at step {}",
                    step
                );
                let got = match r.bh.admit(&req, None) {
                    Decision::Granted(c) => {
                        r.calls.push(c);
                        Seen::Granted
                    }
                    Decision::Queued(w) => {
                        r.waiters.push(Some(w));
                        Seen::Queued
                    }
                    Decision::Rejected(e) => seen(&e),
                };
                ensure_eq!(
                    got,
                    m.admit(weight, cost, wait, observe),
                    "admit at step {}",
                    step
                );
                let predicted = match dry {
                    WouldAdmit::AdmitNow => Seen::Granted,
                    WouldAdmit::WouldQueue { position, ahead } => {
                        ensure_eq!((position, ahead), (before.queued + 1, before.queued));
                        Seen::Queued
                    }
                    WouldAdmit::Reject(e) => seen(&e),
                };
                ensure_eq!(predicted, got, "dry run vs admission at step {}", step);
                cov.note(got);
            }
            Op::Poll(i) | Op::Cancel(i) if !r.waiters.is_empty() => {
                let i = i % r.waiters.len();
                let want = if matches!(op, Op::Poll(_)) {
                    m.poll(i)
                } else {
                    m.cancel(i)
                };
                let got = match r.waiters[i].take() {
                    None => Seen::Rejected(Reason::Aborted), // consumed before, as the model says
                    Some(mut w) if matches!(op, Op::Poll(_)) => match w.poll(None) {
                        Poll::Pending => {
                            r.waiters[i] = Some(w);
                            Seen::Pending
                        }
                        Poll::Ready(Ok(c)) => {
                            r.calls.push(c);
                            Seen::Granted
                        }
                        Poll::Ready(Err(e)) => seen(&e),
                    },
                    Some(w) => match w.cancel(Reason::Aborted) {
                        Cancelled::Cancelled(rj) | Cancelled::Rejected(rj) => {
                            Seen::Rejected(rj.reason)
                        }
                        Cancelled::Granted(c) => {
                            r.calls.push(c);
                            Seen::Granted
                        }
                    },
                };
                // A consumed waiter answers `aborted` on both sides (the test's own record).
                ensure_eq!(got, want, "{:?} at step {}", op, step);
                cov.note(got);
                if let Seen::Rejected(_) = got {
                    m.waiters[i].2 = MState::Rejected(Reason::Aborted);
                }
            }
            Op::Refund(k, n) if !r.calls.is_empty() => {
                let k = k % r.calls.len();
                let ok = r.calls[k].refund(n).is_ok();
                let held = m.calls[k].c + m.calls[k].o;
                ensure_eq!(ok, n >= 1 && n <= held, "refund at step {}", step);
                if ok {
                    cov.refunds += 1;
                    m.shrink(k, n);
                }
            }
            Op::ReleasePartial(k, n) if !r.calls.is_empty() => {
                let k = k % r.calls.len();
                let ok = r.calls[k].release_partial(n).is_ok();
                let MCall { w, c, o, .. } = m.calls[k];
                ensure_eq!(ok, n >= 1 && n <= w, "release_partial at step {}", step);
                if ok {
                    // The last permit takes the units with it (refunded).
                    m.calls[k].w -= n;
                    if n == w {
                        m.calls[k].c = 0;
                        m.calls[k].o = 0;
                        m.refunded += c + o;
                    }
                    m.dispatch();
                }
            }
            Op::End(k, used) if !r.calls.is_empty() => {
                let k = k % r.calls.len();
                let call = r.calls.remove(k);
                match used {
                    Some(u) => call.end_with_usage(Outcome::Success, u),
                    None => drop(call),
                }
                m.end(k, used);
            }
            Op::Report(k, used, remaining) if !r.calls.is_empty() => {
                let k = k % r.calls.len();
                let got = r.calls[k].report_usage(used, remaining).map(|u| u.change);
                ensure_eq!(got, m.report(k, used, remaining), "report at step {}", step);
                match got {
                    Ok(HoldChange::Shrank(_)) => cov.shrank += 1,
                    Ok(HoldChange::Grew(_)) => cov.grew += 1,
                    Ok(HoldChange::Overran(_)) => cov.overran += 1,
                    _ => {}
                }
                let (call, mc) = (&r.calls[k], m.calls[k]);
                ensure_eq!(
                    (call.cost(), call.overrun()),
                    (mc.c + mc.o, mc.o),
                    "the call's hold at step {}",
                    step
                );
            }
            Op::Reserve { weight, cost } => {
                let got = match r
                    .bh
                    .reserve(&Request::new(weight).cost(cost), Duration::MAX)
                {
                    Ok(res) => {
                        r.reservations.push(res);
                        Seen::Granted
                    }
                    Err(ReserveError::Full { .. }) => Seen::Full,
                    Err(ReserveError::Rejected(e)) => seen(&e),
                };
                ensure_eq!(got, m.reserve(weight, cost), "reserve at step {}", step);
                if got == Seen::Granted {
                    cov.reserved += 1;
                }
            }
            Op::Commit(k) if !r.reservations.is_empty() => {
                let k = k % r.reservations.len();
                let call = r
                    .reservations
                    .remove(k)
                    .commit()
                    .expect("no TTL: never expires");
                r.calls.push(call);
                let mc = m.reservations.remove(k);
                m.calls.push(mc);
            }
            Op::Abort(k) if !r.reservations.is_empty() => {
                let k = k % r.reservations.len();
                r.reservations.remove(k).abort();
                m.abort(k);
            }
            Op::SetBudget(b) => {
                r.bh.set_budget(b).unwrap();
                m.budget = b;
                m.dispatch();
            }
            Op::SetLimit(l) => {
                r.bh.set_limit(l).unwrap();
                m.limit = l;
                m.dispatch();
            }
            Op::SetObserve(c, b) => {
                r.bh.set_observe(Observe::of(c, b)).unwrap();
                m.observe = (c, b);
                m.dispatch();
                cov.observe_switches += 1;
            }
            _ => {}
        }
        check(&m, &bh, step)?;
    }
    cov.observed = m.observed.iter().sum();
    cov.cost_bound = m.cost_bound_hits;
    // Everything ends: the bulkhead is idle (I5) and the books balance.
    for w in r.waiters.iter_mut().filter_map(Option::take) {
        if let Cancelled::Granted(c) = w.cancel(Reason::Aborted) {
            drop(c);
        }
    }
    r.calls.clear();
    r.reservations.clear();
    let s = bh.stats();
    let b = s.budget.unwrap();
    ensure_eq!((s.active, s.queued, s.granted_unclaimed), (0, 0, 0));
    ensure_eq!((b.in_use, b.granted_unclaimed), (0, 0));
    ensure_eq!(b.available, b.limit as i64);
    ensure_eq!(
        b.reserved_total + b.overrun_total,
        b.consumed_total + b.refunded_total
    );
    Ok(cov)
}
