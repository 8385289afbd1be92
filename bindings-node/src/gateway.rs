//! Gateway admission on `NativeBulkhead` and `NativeCall` (docs/design.md §4.5–4.9, §5.6,
//! §5.7): revisioned `applyLimits`, the dry run `wouldAdmit`, the budget and observe mode at run
//! time, class stats and the host's rate timer; a call's settlement (`refund`, `reportUsage`,
//! `orphan`). Marshalling only: every decision is the core's.
//!
//! Units: counts are safe-integer numbers, durations ms. Errors: a bad argument is a
//! `TypeError` / `RangeError` naming it; a value the core refuses a `RangeError` with the
//! core's message.

use hullguard_core::{
    Call, CallStart, ClassStats, ClassTableLimits, LimitsError, OrphanError, UsageError,
    UsageReport, WouldAdmit, config::Spelling,
};
use napi::{
    Env, Result,
    bindgen_prelude::{Object, Unknown},
};
use napi_derive::napi;

use crate::{
    bulkhead::{NativeBulkhead, NativeCall},
    marshal::{self, JsDetail, count_arg, ms, range_error, refused},
    options, settled,
};

/// What `wouldAdmit` found: `decision` is `'admit_now'`, `'would_queue'` (with `position`,
/// 1 = next) or the reason it would be refused (with `detail`).
#[napi(object)]
pub struct JsWouldAdmit {
    pub decision: String,
    pub position: Option<f64>,
    pub detail: Option<JsDetail>,
}

/// `WouldAdmit` as JS; an invalid request throws its `RangeError`.
pub(crate) fn would_admit_js(env: &Env, w: WouldAdmit, key: Option<&str>) -> Result<JsWouldAdmit> {
    Ok(match w {
        WouldAdmit::AdmitNow => JsWouldAdmit {
            decision: "admit_now".to_owned(),
            position: None,
            detail: None,
        },
        WouldAdmit::WouldQueue { position, .. } => JsWouldAdmit {
            decision: "would_queue".to_owned(),
            position: Some(position as f64),
            detail: None,
        },
        WouldAdmit::Reject(e) => match e.rejection() {
            Some(r) => JsWouldAdmit {
                decision: r.reason.as_str().to_owned(),
                position: None,
                detail: Some(JsDetail::from(r.detail())),
            },
            None => return Err(refused(env, &e, key)),
        },
    })
}

/// One class's counts as an object (`{class, priority, floor, ceiling, inFlight, budgetFloor,
/// budgetCeiling, budgetInUse, queued, observe, observed}`).
pub(crate) fn class_stats_object<'e>(env: &'e Env, c: &ClassStats) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set("class", u32::from(c.class))?;
    o.set("priority", u32::from(c.priority))?;
    o.set("floor", c.floor as f64)?;
    o.set("ceiling", c.ceiling as f64)?;
    o.set("inFlight", c.in_flight as f64)?;
    o.set("budgetFloor", c.budget_floor as f64)?;
    o.set("budgetCeiling", c.budget_ceiling as f64)?;
    o.set("budgetInUse", c.budget_in_use as f64)?;
    o.set("queued", c.queued as f64)?;
    o.set("observe", c.observe.as_str())?;
    o.set("observed", c.observed as f64)?;
    Ok(o)
}

/// What `reportUsage` did: `change` (`'unchanged' | 'shrank' | 'grew' | 'overran'`), `by`
/// (units), `cancel` (the host is asked to cancel the call's work), and the hold now.
#[napi(object)]
pub struct JsUsageReport {
    pub change: String,
    pub by: f64,
    pub cancel: bool,
    pub used: f64,
    pub held: f64,
    pub overrun: f64,
}

#[napi]
impl NativeBulkhead {
    /// `applyLimits(limits)` (see `options::limits`): `null` when applied, the revision in force
    /// when `revision` is stale (nothing changed). Throws `RangeError` for a value the core
    /// refuses (nothing changed), `TypeError` for a bad or unknown option.
    #[napi]
    pub fn apply_limits(&self, env: &Env, limits: Unknown) -> Result<Option<f64>> {
        let (snap, reserve, rates) = options::limits(env, limits)?;
        let t = ClassTableLimits {
            reserve,
            rates,
            ..ClassTableLimits::NONE
        };
        let r = self
            .own(env, "applyLimits")?
            .apply_limits_with_table(&snap, &t);
        settled::flush(env)?;
        match r {
            Ok(()) => Ok(None),
            Err(LimitsError::Stale { current }) => Ok(Some(current as f64)),
            // An option's refusal in the Node spelling (`adaptiveLifo needs a
            // queueDelayTargetMs above 0`).
            Err(LimitsError::Config(c)) => Err(range_error(env, c.spelled(Spelling::Node))),
            Err(e) => Err(range_error(env, e)),
        }
    }

    /// `wouldAdmit(options)` (the `acquire` options; `ambient` the ambient deadline, ms): what
    /// an admission would decide now, counting nothing (a passed deadline, or one too close
    /// to wait for: `timeout`).
    #[napi]
    pub fn would_admit(
        &self,
        env: &Env,
        options: Unknown,
        ambient: Option<f64>,
    ) -> Result<JsWouldAdmit> {
        let ctx = self.ctx(ambient)?;
        let request = options::acquire(env, options, &ctx, false)?;
        let got = match (&self.via, &self.key) {
            (Some(reg), Some(key)) => reg.would_admit(key, &request),
            _ => self.bh()?.would_admit(&request),
        };
        settled::flush(env)?;
        would_admit_js(env, got, self.key.as_deref())
    }

    /// `setBudget(n)`: the budget's new limit (the core's range; a bulkhead without a budget
    /// refuses).
    #[napi]
    pub fn set_budget(&self, env: &Env, limit: Unknown) -> Result<()> {
        let n = options::count0(env, limit, "budget", hullguard_core::MAX_BUDGET)?;
        let r = self.own(env, "setBudget")?.set_budget(n);
        settled::flush(env)?;
        r.map_err(|e| range_error(env, e.spelled(Spelling::Node)))
    }

    /// `setObserve(mode)`: `'off' | 'concurrency' | 'budget' | 'all'`.
    #[napi]
    pub fn set_observe(&self, env: &Env, mode: Unknown) -> Result<()> {
        let mode = options::observe_arg(env, mode, "mode")?;
        let r = self.own(env, "setObserve")?.set_observe(mode);
        settled::flush(env)?;
        r.map_err(|e| range_error(env, e.spelled(Spelling::Node)))
    }

    /// `classStats(nameOrIndex)`: one class's counts (see `class_stats_object`). Throws a
    /// `RangeError` for a class this bulkhead does not have.
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn class_stats<'e>(&self, env: &'e Env, class: Unknown) -> Result<Object<'e>> {
        let k = options::class_arg(env, class, &self.names)?;
        let bh = self.bh()?;
        let c = bh.class_stats(k).ok_or_else(|| {
            range_error(
                env,
                format_args!("no class {k} (this bulkhead has {})", bh.class_count()),
            )
        })?;
        class_stats_object(env, &c)
    }

    /// The shared units held beyond the floors, `[permits, budget units]`; `null` without
    /// classes.
    #[napi]
    pub fn class_shared_in_use(&self) -> Result<Option<Vec<f64>>> {
        let s = self.bh()?.class_shared_in_use();
        Ok(s.map(|[p, b]| vec![p as f64, b as f64]))
    }

    /// The class names (index = class; `null` for an unnamed one).
    #[napi(getter)]
    pub fn class_names(&self) -> Vec<Option<String>> {
        self.names.to_vec()
    }

    /// Whether admission events were asked for at construction (`events: true`).
    #[napi(getter)]
    pub fn events(&self) -> bool {
        self.events
    }

    /// `reportUsage(used, remaining)` of a plain bulkhead's call of `weight` permits (no
    /// budget: the core records the usage and holds nothing); see `NativeCall.reportUsage`.
    #[napi]
    pub fn report_usage_plain(
        &self,
        env: &Env,
        weight: f64,
        used: Unknown,
        remaining: Option<Unknown>,
    ) -> Result<JsUsageReport> {
        let (used, remaining) = usage_args(env, used, remaining)?;
        let mut call = Call::from_parts(&**self.bh()?, weight as u64, CallStart::NONE);
        let r = call.report_usage(used, remaining);
        let _ = call.into_parts();
        settled::flush(env)?;
        usage_js(env, r)
    }

    /// ms until the earliest waiter held back by a rate conforms (0: due now), `null` when none
    /// is: the host's rate timer then calls `rateTick()`.
    #[napi(getter)]
    pub fn rate_retry_after_ms(&self) -> Result<Option<f64>> {
        Ok(self.bh()?.rate_retry_after().map(ms))
    }

    /// The host's rate timer fired: grants the waiters that conform now.
    #[napi]
    pub fn rate_tick(&self, env: &Env) -> Result<()> {
        self.bh()?.rate_tick();
        settled::flush(env)
    }
}

#[napi]
impl NativeCall {
    /// Returns `n` budget units now (the part held past the budget first): a safe integer in
    /// `1 ..= held units`; the core refuses more than the call holds (`RangeError`).
    #[napi]
    pub fn refund(&self, env: &Env, n: Unknown) -> Result<()> {
        let n = count_arg(env, n, "n", hullguard_core::MAX_BUDGET, "MAX_BUDGET")?;
        let r = self.call.borrow_mut().as_mut().map(|c| c.refund(n));
        settled::flush(env)?;
        match r {
            // The core's `InvalidRelease` speaks of permits: these are budget units.
            Some(r) => r.map_err(|e| {
                range_error(
                    env,
                    format_args!(
                        "n must be in 1..={} (budget units held), got {}",
                        e.held, e.requested
                    ),
                )
            }),
            None => Err(range_error(env, "permit already released")),
        }
    }

    /// `reportUsage(used, remaining)`: the cumulative units used and the units still expected;
    /// the hold becomes `used + remaining` (grown through admission, else held past the
    /// budget). Throws `RangeError` for a usage below an earlier report, too large, or after
    /// the permits returned.
    #[napi]
    pub fn report_usage(
        &self,
        env: &Env,
        used: Unknown,
        remaining: Option<Unknown>,
    ) -> Result<JsUsageReport> {
        let (used, remaining) = usage_args(env, used, remaining)?;
        let r = self
            .call
            .borrow_mut()
            .as_mut()
            .map(|c| c.report_usage(used, remaining));
        settled::flush(env)?;
        usage_js(env, r.unwrap_or(Err(UsageError::Released)))
    }

    /// Hands the permits back while the work goes on (its units stay held until it ends):
    /// `true` if it did, `false` if it held none. Throws `RangeError` when the core refuses
    /// (`maxOrphaned` reached).
    #[napi]
    pub fn orphan(&self, env: &Env) -> Result<bool> {
        let r = self.call.borrow_mut().as_mut().map(|c| c.orphan());
        settled::flush(env)?;
        match r {
            Some(Ok(b)) => Ok(b),
            Some(Err(e)) => Err(orphan_error(env, e)),
            None => Ok(false),
        }
    }

    /// Whether the core asked the host to cancel this call's work (`cancelOnOverrun`).
    #[napi(getter)]
    pub fn cancel_requested(&self) -> bool {
        self.call
            .borrow()
            .as_ref()
            .is_some_and(|c| c.cancel_requested())
    }

    /// The revision of the limits the call was admitted under.
    #[napi(getter)]
    pub fn revision(&self) -> f64 {
        self.call.borrow().as_ref().map_or(0, |c| c.revision()) as f64
    }

    /// Budget units charged now (0 once ended).
    #[napi(getter)]
    pub fn cost(&self) -> f64 {
        self.call.borrow().as_ref().map_or(0, |c| c.cost()) as f64
    }

    /// Units held past the budget now.
    #[napi(getter)]
    pub fn overrun(&self) -> f64 {
        self.call.borrow().as_ref().map_or(0, |c| c.overrun()) as f64
    }
}

/// `reportUsage`'s arguments: `used`, and `remaining` (`undefined`: 0); any safe integer >= 0
/// (the core judges the sum).
fn usage_args(env: &Env, used: Unknown, remaining: Option<Unknown>) -> Result<(u64, u64)> {
    let used = options::count0(env, used, "used", u64::MAX >> 11)?;
    let remaining = match remaining {
        Some(r) if r.get_type()? != napi::ValueType::Undefined => {
            options::count0(env, r, "remaining", u64::MAX >> 11)?
        }
        _ => 0,
    };
    Ok((used, remaining))
}

/// A usage report's answer as JS, or its `RangeError`.
fn usage_js(env: &Env, r: std::result::Result<UsageReport, UsageError>) -> Result<JsUsageReport> {
    let r = r.map_err(|e| usage_error(env, e))?;
    let (change, by) = settled::hold_change(r.change);
    Ok(JsUsageReport {
        change: change.to_owned(),
        by: by as f64,
        cancel: r.cancel,
        used: r.used as f64,
        held: r.held as f64,
        overrun: r.overrun as f64,
    })
}

/// A refused usage report: a `RangeError` whose `code` names the core's reason
/// (`'ERR_USAGE_DECREASED'`, `'ERR_USAGE_TOO_LARGE'`, `'ERR_USAGE_RELEASED'`).
fn usage_error(env: &Env, e: UsageError) -> napi::Error {
    let code = match e {
        UsageError::Decreased { .. } => "ERR_USAGE_DECREASED",
        UsageError::TooLarge { .. } => "ERR_USAGE_TOO_LARGE",
        _ => "ERR_USAGE_RELEASED",
    };
    marshal::thrown(env.throw_range_error(&e.to_string(), Some(code)))
}

fn orphan_error(env: &Env, e: OrphanError) -> napi::Error {
    range_error(env, e)
}
