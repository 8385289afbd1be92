//! `NativeBulkhead` (one core bulkhead), `NativeCall` (a granted call of a bulkhead with
//! policies) and `NativeDrain` (a pending drain): marshalling only. Every admission, outcome,
//! timeout and drain decision is the core's (`Bulkhead::admit_owned`, `Call`, `Waiter`,
//! `drain_owned`; docs/design.md §5).
//!
//! A granted call reaches JS as its weight (a number) on a plain bulkhead — ending it is only
//! returning the permits — and as a `NativeCall` that owns the core `Call` on a bulkhead with
//! policies. A queued call reaches JS as `{id, ticket, timeoutMs}`: the facade keeps the
//! ticket, arms the deadline, and on a wake of `id` polls the ticket through
//! `Waiter::from_ticket`; its timers and abort signals settle it with `expire`.
//!
//! Units: weights and counts are safe-integer numbers, durations ms (`Infinity` = none).
//! Thread-safety: these objects live on their isolate's thread; the core bulkhead they share
//! is `Sync`.

use std::{
    cell::RefCell,
    future::{Future, Pending},
    pin::Pin,
    rc::Rc,
    sync::{Arc, Weak},
    task::{Context, Poll, Waker},
    time::Duration,
};

use hullguard_core::{
    AcquireError, Bulkhead as CoreBulkhead, Call, CallStart, Cancelled, Decision, DrainResult,
    OwnedPermit, Reason, Registry as CoreRegistry, Rejection, Request, Ticket, Waiter,
    config::Spelling, drain::DrainOf,
};
use napi::{
    Env, Error, Result, Status,
    bindgen_prelude::{Either, Object, Unknown},
};
use napi_derive::napi;

use crate::{
    clock::{self, VirtualClock},
    fast,
    marshal::{self, count_arg, ms, range_error, refused, string, type_error},
    options, settled, stats,
};

/// A granted call as JS holds it: the weight (plain bulkhead) or the `NativeCall`. (The
/// exported signatures spell it out: napi-derive writes native.d.ts from them literally.)
type Granted = Either<f64, NativeCall>;

/// A call that queued: poll `ticket` when `id` is reported settled; arm `timeoutMs`.
#[napi(object)]
pub struct Queued {
    pub id: u32,
    pub ticket: f64,
    /// The deadline to arm, ms (`Infinity`: none).
    pub timeout_ms: f64,
}

/// What `drain()` found.
#[napi(object)]
pub struct DrainReport {
    pub drained: bool,
    pub active: f64,
    pub queued: f64,
}

fn report(r: DrainResult) -> DrainReport {
    DrainReport {
        drained: r.drained,
        active: r.active as f64,
        queued: r.queued as f64,
    }
}

/// One core bulkhead (a handle: a registry's entry stays alive while a handle does, until
/// `dispose()`). Errors: options and arguments throw `TypeError` / `RangeError`, rejections
/// the facade's `BulkheadError` (with this handle's registry key).
#[napi]
pub struct NativeBulkhead {
    pub(crate) bh: Option<Arc<CoreBulkhead>>,
    /// Still reaches the bulkhead after `dispose()` (to count a double release), without
    /// keeping it alive.
    weak: Weak<CoreBulkhead>,
    pub(crate) key: Option<Rc<str>>,
    /// This handle's slot for the hot entry points (`fast`), freed with the handle.
    slot: f64,
    /// The class names of its class table (index = class; empty without classes).
    pub(crate) names: Rc<[Option<String>]>,
    /// Under a registry's global cap: the registry, whose `admit` supplies the key's class
    /// (the bulkhead is the shared admission).
    pub(crate) via: Option<Arc<CoreRegistry>>,
    /// Whether admission events were asked for (`events: true`).
    pub(crate) events: bool,
    /// On the test hook's virtual clock: deadlines are ms on it (else on `performance.now()`'s
    /// scale, `clock::deadline_of`).
    pub(crate) virtual_clock: bool,
}

impl Drop for NativeBulkhead {
    fn drop(&mut self) {
        fast::free(self.slot);
    }
}

impl NativeBulkhead {
    pub(crate) fn from_arc(bh: Arc<CoreBulkhead>, key: Option<Rc<str>>) -> Self {
        Self {
            weak: Arc::downgrade(&bh),
            slot: fast::register(&bh, key.as_ref()),
            bh: Some(bh),
            key,
            names: Rc::from(Vec::new()),
            via: None,
            events: false,
            virtual_clock: false,
        }
    }

    pub(crate) fn bh(&self) -> Result<&Arc<CoreBulkhead>> {
        self.bh
            .as_ref()
            .ok_or_else(|| Error::new(Status::GenericFailure, "bulkhead handle disposed"))
    }

    pub(crate) fn granted(&self, call: OwnedPermit) -> Granted {
        if !plain(call.bulkhead()) {
            Either::B(NativeCall {
                call: RefCell::new(Some(call)),
                key: self.key.clone(),
            })
        } else {
            // A plain bulkhead's call token is inert: the weight is all there is.
            Either::A(call.into_parts().1 as f64)
        }
    }

    pub(crate) fn refused(&self, env: &Env, e: &AcquireError) -> Error {
        refused(env, e, self.key.as_deref())
    }

    /// The bulkhead, for `what` (a method that changes the whole bulkhead): under a registry's
    /// global cap a key has no bulkhead of its own (the core's `Registry::get` refuses it):
    /// its handle is the shared admission, which `what` would change for every key — a
    /// `TypeError` naming `what`.
    pub(crate) fn own(&self, env: &Env, what: &str) -> Result<&Arc<CoreBulkhead>> {
        match (&self.via, &self.key) {
            (Some(_), Some(key)) => Err(type_error(
                env,
                format_args!(
                    "{what}: key {key:?} of a registry with a global cap has no bulkhead of its own \
                 ({what} would change the shared admission of every key; setLimit sets the \
                 key's own limit)"
                ),
            )),
            _ => self.bh(),
        }
    }

    /// How requests on this handle are read; `ambient`: the facade's ambient deadline (ms,
    /// `withDeadline`), if one is in effect.
    pub(crate) fn ctx(&self, ambient: Option<f64>) -> Result<options::RequestCtx<'_>> {
        Ok(options::RequestCtx {
            max_concurrent: self.bh()?.max_concurrent(),
            names: &self.names,
            virtual_clock: self.virtual_clock,
            ambient_ms: options::ambient(ambient),
        })
    }

    /// The core's decision on `request`: the bulkhead's, or under a global cap the registry's
    /// (the key's class).
    pub(crate) fn decide(&self, request: &Request) -> Result<Decision<Arc<CoreBulkhead>, 0>> {
        Ok(match (&self.via, &self.key) {
            (Some(reg), Some(key)) => reg.admit(key, request, None),
            _ => self.bh()?.admit_owned(request, None),
        })
    }

    /// Polls a queued waiter: its grant, or `None` while it is queued (the handle then gives
    /// up only itself, not the place: the facade keeps the ticket).
    fn poll(
        &self,
        mut w: Waiter<Arc<CoreBulkhead>, 0>,
        waker: Option<&Waker>,
    ) -> std::result::Result<Option<Granted>, AcquireError> {
        match w.poll(waker) {
            Poll::Pending => {
                let _ = w.into_ticket();
                Ok(None)
            }
            Poll::Ready(r) => r.map(|call| Some(self.granted(call))),
        }
    }

    /// A queued waiter, with the waker of a fresh id registered (it may have settled first).
    pub(crate) fn queued(
        &self,
        w: Waiter<Arc<CoreBulkhead>, 0>,
    ) -> std::result::Result<Either<Granted, Queued>, AcquireError> {
        let (id, waker) = settled::waker();
        let queued = Queued {
            id,
            ticket: w.ticket().to_raw() as f64,
            timeout_ms: ms(w.queue_timeout()),
        };
        let polled = self.poll(w, Some(&waker))?;
        Ok(polled.map_or(Either::B(queued), Either::A))
    }
}

#[napi]
impl NativeBulkhead {
    /// `new Bulkhead(options)`: `options` as the user gave them (see `options`); breaker
    /// transitions go to the facade's emitter `emitter`; `clock` is the test hook.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        options: Unknown,
        emitter: u32,
        clock: Option<&VirtualClock>,
    ) -> Result<Self> {
        let o = options::bulkhead(&env, options)?;
        let observer = Arc::new(settled::Emitter {
            id: emitter,
            events: o.events,
        });
        let source = clock::source(clock);
        let (bh, names) = match o.table {
            None => (
                CoreBulkhead::with_observer(o.config, source, Some(observer), None),
                Vec::new(),
            ),
            Some(mut b) => {
                let names = (0..b.len())
                    .map(|i| b.name_of(i as u16).map(str::to_owned))
                    .collect();
                let t = b.table();
                let bh =
                    CoreBulkhead::with_classes_and_observer(o.config, &t, source, Some(observer));
                (bh, names)
            }
        };
        let bh = bh.map_err(|e| range_error(&env, e.spelled(Spelling::Node)))?;
        let mut nb = Self::from_arc(Arc::new(bh), None);
        nb.names = Rc::from(names);
        nb.events = o.events;
        nb.virtual_clock = clock.is_some();
        Ok(nb)
    }

    /// Admits one `acquire()` / `run()` (`options`: `{weight, cost, admissionClass, observe,
    /// signal, queueTimeoutMs, deadline}`, and `getUsage` when `run`): the granted call, or
    /// `Queued` (its `timeoutMs` the core's capped wait, `Waiter::queue_timeout`). `ambient`:
    /// the ambient deadline (ms, `withDeadline`), min'd with `deadline`. Throws
    /// `BulkheadError` when refused (the call ended `ignored`; a passed deadline `timeout`),
    /// `TypeError` / `RangeError` for a bad option.
    #[napi]
    pub fn enqueue(
        &self,
        env: &Env,
        options: Unknown,
        run: Option<bool>,
        ambient: Option<f64>,
    ) -> Result<Either<Either<f64, NativeCall>, Queued>> {
        let ctx = self.ctx(ambient)?;
        let request = options::acquire(env, options, &ctx, run == Some(true))?;
        let decision = self.decide(&request)?;
        // Transitions the breaker's check committed, before a waker is registered (a grant
        // during the flush is then seen by the waiter's first poll, never lost).
        settled::flush(env)?;
        let admitted = match decision {
            Decision::Granted(call) => Ok(Either::A(self.granted(call))),
            Decision::Queued(w) => self.queued(w),
            Decision::Rejected(e) => Err(e),
        };
        admitted.map_err(|e| self.refused(env, &e))
    }

    /// `tryAcquire()` (`options`: `{weight, cost, admissionClass, observe, deadline}`; `ambient`
    /// as `enqueue`'s): the granted call, or `null` when not admitted at once
    /// (`concurrency_limit`, counted). Throws `BulkheadError` for any other reason (a passed
    /// deadline: `timeout`); with `throwAll`, for `concurrency_limit` too.
    #[napi]
    pub fn try_take(
        &self,
        env: &Env,
        options: Unknown,
        throw_all: Option<bool>,
        ambient: Option<f64>,
    ) -> Result<Option<Either<f64, NativeCall>>> {
        let ctx = self.ctx(ambient)?;
        let request = options::try_acquire(env, options, &ctx)?;
        let r = match self.decide(&request)? {
            Decision::Granted(call) => Ok(call),
            Decision::Rejected(e) => Err(e),
            // A no-wait request never queues (if it did, it would give its place back).
            Decision::Queued(w) => match w.cancel(Reason::ConcurrencyLimit) {
                Cancelled::Granted(call) => Ok(call),
                Cancelled::Cancelled(r) | Cancelled::Rejected(r) => Err(AcquireError::Rejected(r)),
            },
        };
        settled::flush(env)?;
        match r {
            Ok(call) => Ok(Some(self.granted(call))),
            Err(e) if e.reason() == Some(Reason::ConcurrencyLimit) && throw_all != Some(true) => {
                Ok(None)
            }
            Err(e) => Err(self.refused(env, &e)),
        }
    }

    /// An `acquire()` / `run()` whose signal was aborted before it asked: checks `options`
    /// (throws like `enqueue`) and counts one `aborted`, so that every call shows in the stats.
    #[napi]
    pub fn aborted_before_admission(
        &self,
        env: &Env,
        options: Unknown,
        run: Option<bool>,
    ) -> Result<()> {
        options::acquire(env, options, &self.ctx(None)?, run == Some(true))?;
        self.bh()?.aborted_before_admission();
        Ok(())
    }

    /// A queued ticket after its id was reported: the granted call, `null` while still queued;
    /// throws the `BulkheadError` of its rejection (`aborted` after `expire(t, 'aborted')`).
    #[napi]
    pub fn poll_ticket(&self, env: &Env, ticket: f64) -> Result<Option<Either<f64, NativeCall>>> {
        let bh = self.bh()?;
        let polled = self.poll(
            Waiter::from_ticket(bh.clone(), Ticket::from_raw(ticket as u64)),
            None,
        );
        settled::flush(env)?;
        polled.map_err(|e| self.refused(env, &e))
    }

    /// A host timer (`'timeout'`) or abort signal (`'aborted'`) settles a queued ticket for its
    /// owner, whose id is then reported (a ticket that settled first is left as it is).
    #[napi]
    pub fn expire(&self, env: &Env, ticket: f64, reason: Unknown) -> Result<()> {
        let name = string(env, reason, "reason")?;
        let reason = Reason::from_name(&name)
            .ok_or_else(|| type_error(env, format_args!("unknown reason {name:?}")))?;
        // A lost race (granted or rejected first) is reported through the settled queue.
        let _ = self.bh()?.expire(Ticket::from_raw(ticket as u64), reason);
        settled::flush(env)
    }

    /// Ends a plain bulkhead's call of `weight` permits (`outcome` is checked: `undefined`, an
    /// outcome name or `{outcome}`; a plain bulkhead records none).
    #[napi]
    pub fn release(&self, env: &Env, weight: f64, outcome: Unknown) -> Result<()> {
        let (outcome, usage) = options::release(env, outcome)?;
        // The call rebuilt from its parts ends (a plain bulkhead's token is inert).
        let call = Call::from_parts(&**self.bh()?, weight as u64, CallStart::NONE);
        match usage {
            Some(used) => call.end_with_usage(outcome, used),
            None => drop(call),
        }
        settled::flush(env)
    }

    /// Returns `n` of the `held` permits of a plain bulkhead's call (the core's rule); returns
    /// the permits still held.
    #[napi]
    pub fn release_partial(&self, env: &Env, held: f64, n: Unknown) -> Result<f64> {
        let bh = self.bh()?;
        let n = count_arg(env, n, "n", held as u64, "permits held")?;
        let mut call = Call::from_parts(&**bh, held as u64, CallStart::NONE);
        let refunded = call.release_partial(n);
        let left = call.into_parts().1;
        settled::flush(env)?;
        refunded.map_err(|e| range_error(env, e))?;
        Ok(left as f64)
    }

    /// A plain bulkhead's `Permit` was garbage-collected holding `weight` permits: they return,
    /// counted in `leakedTotal`.
    #[napi]
    pub fn reclaim(&self, env: &Env, weight: f64) -> Result<()> {
        Call::from_parts(&**self.bh()?, weight as u64, CallStart::NONE).reclaim();
        settled::flush(env)
    }

    /// Counts an explicit release of an already released permit (works after `dispose()`).
    #[napi]
    pub fn record_double_release(&self) {
        if let Some(bh) = self.weak.upgrade() {
            bh.record_double_release();
        }
    }

    /// `setLimit(limit)`: a safe integer in `1 ..= maxConcurrent`.
    #[napi]
    pub fn set_limit(&self, env: &Env, limit: Unknown) -> Result<()> {
        let bh = self.bh()?;
        let limit = count_arg(env, limit, "limit", bh.max_concurrent(), "maxConcurrent")?;
        // Under a global cap: the key's own limit (its class's ceiling), by the registry.
        if let (Some(reg), Some(key)) = (&self.via, &self.key) {
            let set = reg.set_limit(key, limit);
            settled::flush(env)?;
            return set.map_err(|e| refused(env, &e.error, Some(&e.key)));
        }
        let set = bh.set_limit(limit);
        settled::flush(env)?;
        set.map_err(|e| range_error(env, e.spelled(Spelling::Node)))
    }

    #[napi]
    pub fn close(&self, env: &Env) -> Result<()> {
        self.own(env, "close")?;
        self.bh()?.close();
        settled::flush(env)
    }

    /// The stats object (a read commits a due open → half-open transition, like any state
    /// read).
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn stats<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let s = self.bh()?.stats();
        settled::flush(env)?;
        stats::object(env, &s)
    }

    /// `reportLoad({eventLoopLagMs, cpu})`: the process's overload signals to the core's gate
    /// (docs/design.md §4.11; `options::load` checks both before either is reported).
    #[napi(ts_args_type = "reading: { eventLoopLagMs?: number | null; cpu?: number | null }")]
    pub fn report_load(&self, env: &Env, reading: Unknown) -> Result<()> {
        let signals = options::load(env, reading)?;
        let bh = self.bh()?;
        for s in signals {
            bh.report_load(s);
        }
        settled::flush(env)
    }

    /// This bulkhead's samples of the core's metric table (`metrics::MetricSample`; class
    /// indices named by its class names).
    #[napi]
    pub fn metric_samples(&self, env: &Env) -> Result<Vec<crate::metrics::MetricSample>> {
        let out = crate::metrics::bulkhead_samples(self.bh()?, &self.names);
        settled::flush(env)?;
        Ok(out)
    }

    /// `drain()` (`options`: `{timeoutMs}`): the report when idle now (or `timeoutMs` is 0),
    /// else a `NativeDrain` whose id is reported when it may be done.
    #[napi]
    pub fn drain(&self, env: &Env, options: Unknown) -> Result<Either<DrainReport, NativeDrain>> {
        let bh = self.bh()?;
        let timeout = options::drain(env, options)?;
        let (id, waker) = settled::waker();
        let d = NativeDrain {
            id,
            timeout_ms: ms(timeout),
            bh: bh.clone(),
            waker,
            fut: RefCell::new(Some(bh.clone().drain_owned(None::<Pending<()>>))),
        };
        // Done now, or (timeout 0) reported now; else pending.
        let now = d.poll().or_else(|| timeout.is_zero().then(|| d.give_up()));
        Ok(now.map_or(Either::B(d), Either::A))
    }

    #[napi(getter)]
    pub fn max_concurrent(&self) -> Result<f64> {
        Ok(self.bh()?.max_concurrent() as f64)
    }

    #[napi(getter)]
    pub fn max_queue(&self) -> Result<f64> {
        Ok(self.bh()?.max_queue() as f64)
    }

    /// The default queue deadline, ms (`Infinity`: none).
    #[napi(getter)]
    pub fn queue_timeout_ms(&self) -> Result<f64> {
        Ok(ms(self.bh()?.queue_timeout()))
    }

    /// The call timeout the facade arms for `run()`, ms (`Infinity`: none).
    #[napi(getter)]
    pub fn call_timeout_ms(&self) -> Result<f64> {
        Ok(ms(self.bh()?.call_timeout().unwrap_or(Duration::MAX)))
    }

    /// The call timeout to arm for a `run()` granted now whose request has the absolute
    /// `deadline` (ms, this handle's deadline scale): the core's `call_timeout_within` — the
    /// configured call timeout capped by the time left (0 once it has passed); ms, `Infinity`
    /// when neither bounds the work. `deadline` is a number the facade checked.
    #[napi]
    pub fn call_timeout_within_ms(&self, deadline: f64) -> Result<f64> {
        let d = clock::deadline_of(deadline, self.virtual_clock);
        Ok(ms(self
            .bh()?
            .call_timeout_within(&d)
            .unwrap_or(Duration::MAX)))
    }

    /// The facade's call timer of a plain bulkhead's `run()` fired (a deadline capped the
    /// work, `callTimeoutWithinMs`): the core's call-timeout rule on its call of `weight`
    /// permits (`call_timeout` counted; the permits stay held until the facade releases them).
    /// Returns the `BulkheadError` to reject with.
    #[napi(ts_return_type = "Error")]
    pub fn timed_out_plain<'e>(&self, env: &'e Env, weight: f64) -> Result<Unknown<'e>> {
        let bh = self.bh()?;
        let mut call = Call::from_parts(&**bh, weight as u64, CallStart::NONE);
        call.timed_out();
        // The permits stay out: the facade's release returns them.
        let _ = call.into_parts();
        let snapshot = bh.snapshot();
        settled::flush(env)?;
        let r = Rejection::new(Reason::CallTimeout, snapshot);
        marshal::bulkhead_error(env, &r, self.key.as_deref())
    }

    #[napi(getter)]
    pub fn enabled(&self) -> Result<bool> {
        Ok(self.bh()?.enabled())
    }

    #[napi(getter)]
    pub fn limit(&self) -> Result<f64> {
        Ok(self.bh()?.limit() as f64)
    }

    #[napi(getter)]
    pub fn closed(&self) -> Result<bool> {
        Ok(self.bh()?.is_closed())
    }

    /// Drops this handle's reference (a registry may then evict its entry).
    #[napi]
    pub fn dispose(&mut self) {
        self.bh = None;
        fast::free(self.slot);
    }

    /// This handle's slot for the hot entry points (`fastTake`, …), or negative when they do
    /// not serve it (a bulkhead whose granted calls are `NativeCall`s, see [`plain`]): `-2` for
    /// a classed bulkhead (the facade then runs the host's rate timer), else `-1`. One getter,
    /// so that a registry's per-call handle asks once.
    #[napi(getter)]
    pub fn fast_slot(&self) -> Result<f64> {
        let bh = self.bh()?;
        Ok(if bh.class_count() > 0 {
            -2.0
        } else if !plain(bh) {
            -1.0
        } else {
            self.slot
        })
    }
}

/// Whether a bulkhead's granted call is only its weight: no policies, events or
/// reservations, no budget (a call's cost), no classes (a call's class), no orphaning (a
/// call's orphaned state).
pub(crate) fn plain(bh: &CoreBulkhead) -> bool {
    !bh.has_policies() && !bh.has_budget() && bh.class_count() == 0 && bh.max_orphaned() == 0
}

/// One granted call of a bulkhead with policies: owns the core `Call` — its permits and the
/// state of its guarded call — until it ends (once: later calls do nothing). Made only by
/// `NativeBulkhead` (no JS constructor).
#[napi]
pub struct NativeCall {
    pub(crate) call: RefCell<Option<OwnedPermit>>,
    pub(crate) key: Option<Rc<str>>,
}

#[napi]
impl NativeCall {
    /// Ends the call with `outcome` (`undefined` = `'success'`, an outcome name, or
    /// `{outcome}`; an unknown one is a `TypeError` and the call goes on) and releases it.
    /// After `timedOut()` the outcome was recorded already: this only releases.
    #[napi]
    pub fn release(&self, env: &Env, outcome: Unknown) -> Result<()> {
        let (outcome, usage) = options::release(env, outcome)?;
        let call = self.call.take();
        match (call, usage) {
            (Some(call), Some(used)) => call.end_with_usage(outcome, used),
            (Some(call), None) => call.end(outcome),
            (None, _) => {}
        }
        settled::flush(env)
    }

    /// The facade's call timer fired: the core's call-timeout rule (`call_timeout` counted, a
    /// failure recorded now, the permits held until `release`). Returns the `BulkheadError`
    /// to reject with, or `null` if the call already ended or was reported.
    #[napi(ts_return_type = "Error | null")]
    pub fn timed_out<'e>(&self, env: &'e Env) -> Result<Option<Unknown<'e>>> {
        let snapshot = self.call.borrow_mut().as_mut().and_then(|c| {
            let reported = c.timed_out();
            reported.then(|| c.bulkhead().snapshot())
        });
        settled::flush(env)?;
        snapshot
            .map(|snapshot| {
                let r = Rejection::new(Reason::CallTimeout, snapshot);
                marshal::bulkhead_error(env, &r, self.key.as_deref())
            })
            .transpose()
    }

    /// Returns `n` of the held permits now (a safe integer in `1 ..= weight`); the call goes on.
    #[napi]
    pub fn release_partial(&self, env: &Env, n: Unknown) -> Result<()> {
        let held = self.weight();
        let n = count_arg(env, n, "n", held as u64, "permits held")?;
        let refunded = self
            .call
            .borrow_mut()
            .as_mut()
            .map(|c| c.release_partial(n));
        settled::flush(env)?;
        refunded.transpose().map_err(|e| range_error(env, e))?;
        Ok(())
    }

    /// The `Permit` holding this call was garbage-collected: the core's reclaim rule (counted
    /// in `leakedTotal`, ended `ignored`, released).
    #[napi]
    pub fn reclaim(&self, env: &Env) -> Result<()> {
        let call = self.call.take();
        if let Some(call) = call {
            call.reclaim();
        }
        settled::flush(env)
    }

    /// The permits still held (0 once ended).
    #[napi(getter)]
    pub fn weight(&self) -> f64 {
        self.call.borrow().as_ref().map_or(0, Call::weight) as f64
    }
}

/// A pending drain: the core's drain future, polled with a waker that reports `id`.
#[napi]
pub struct NativeDrain {
    #[napi(readonly)]
    pub id: u32,
    /// The timeout to arm, ms (`Infinity`: none).
    #[napi(readonly)]
    pub timeout_ms: f64,
    bh: Arc<CoreBulkhead>,
    waker: Waker,
    fut: RefCell<Option<DrainOf<Arc<CoreBulkhead>, Pending<()>, 0>>>,
}

#[napi]
impl NativeDrain {
    /// The report once idle, else `null` (polled again when `id` is reported).
    #[napi]
    pub fn poll(&self) -> Option<DrainReport> {
        let mut fut = self.fut.borrow_mut();
        let polled = Pin::new(fut.as_mut()?).poll(&mut Context::from_waker(&self.waker));
        let Poll::Ready(r) = polled else {
            return None;
        };
        // A finished drain stops watching the bulkhead.
        *fut = None;
        Some(report(r))
    }

    /// The timeout passed: the report now (`drained: false`), and the drain stops.
    #[napi]
    pub fn give_up(&self) -> DrainReport {
        self.fut.borrow_mut().take();
        report(self.bh.drain_result(false))
    }
}
