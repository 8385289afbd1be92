//! Marshalling between JS values and the core's: argument errors as `TypeError` / `RangeError`,
//! rejections as the facade's `BulkheadError`, durations as milliseconds.
//!
//! Every error is thrown here, in JS terms, and the native method returns the
//! `PendingException` error that napi-rs then leaves in place. A value of the wrong JS type is a
//! `TypeError`; a number out of its range (the core's conversion rule, `config::convert`) a
//! `RangeError`; both messages name the option or argument and show its range.

use std::{
    cell::RefCell,
    fmt::{self, Display},
    mem::ManuallyDrop,
    time::Duration,
};

use hullguard_core::{
    AcquireError, Rejection, RejectionDetail, Snapshot,
    config::{
        convert::{Problem, count_from_f64},
        options::Kind,
    },
};
use napi::{
    Env, Error, JsValue, Result, Status, ValueType,
    bindgen_prelude::{FnArgs, Function, FunctionRef, Unknown},
};
use napi_derive::napi;

/// `{active, queued, limit, available}` at a rejection (the facade adds `key`).
#[napi(object)]
pub struct JsSnapshot {
    pub active: f64,
    pub queued: f64,
    pub limit: f64,
    pub available: f64,
}

impl From<Snapshot> for JsSnapshot {
    fn from(s: Snapshot) -> Self {
        JsSnapshot {
            active: s.active as f64,
            queued: s.queued as f64,
            limit: s.limit as f64,
            available: s.available as f64,
        }
    }
}

/// One dimension's counts at a rejection: `{limit, inUse, available}`.
#[napi(object)]
pub struct JsDimension {
    pub limit: f64,
    pub in_use: f64,
    /// Free (negative after a shrink).
    pub available: f64,
}

/// A classed bulkhead's refusal of one class: its index, the constraint that held it back
/// (`'class'`, `'shared'`, `'reserve'`, `'limit'`, …) and the short dimension.
#[napi(object)]
pub struct JsClassRefusal {
    pub class: u32,
    pub bound: String,
    /// `'permits'` or `'budget'`.
    pub dimension: String,
}

/// A rejection's detail (the core's `RejectionDetail`, docs/design.md §5.7): which constraint
/// bound (`bound`: `'limit'`, `'kill_switch'`, `'budget'`, `'queue'`, `'queued_cost'`, …), per
/// dimension `{limit, inUse, available}` (`budget` absent without a budget), the queue, the
/// revision, a classed refusal's class part, for `rate_limit` the ms until it conforms, and the
/// refusal's HTTP status.
#[napi(object)]
pub struct JsDetail {
    pub reason: String,
    pub bound: String,
    pub calls: JsDimension,
    pub budget: Option<JsDimension>,
    pub queued: f64,
    pub max_queue: f64,
    pub queued_cost: f64,
    pub revision: f64,
    pub class: Option<JsClassRefusal>,
    pub retry_after_ms: Option<f64>,
    /// The HTTP status of this refusal, the core's one table (`RejectionDetail::http_status`:
    /// 429 for `rate_limit`, 503 for every other reason): what the edge admission answers.
    pub http_status: u32,
}

impl From<RejectionDetail> for JsDetail {
    fn from(d: RejectionDetail) -> Self {
        let dim = |x: hullguard_core::reason::DimensionSnapshot| JsDimension {
            limit: x.limit as f64,
            in_use: x.in_use as f64,
            available: x.available as f64,
        };
        JsDetail {
            reason: d.reason.as_str().to_owned(),
            bound: d.bound.as_str().to_owned(),
            calls: dim(d.calls),
            budget: d.budget.map(dim),
            queued: d.queued as f64,
            max_queue: d.max_queue as f64,
            queued_cost: d.queued_cost as f64,
            revision: d.revision as f64,
            class: d.class.map(|c| JsClassRefusal {
                class: c.class.into(),
                bound: c.bound.as_str().to_owned(),
                dimension: if c.dimension == 0 {
                    "permits"
                } else {
                    "budget"
                }
                .to_owned(),
            }),
            retry_after_ms: d.retry_after.map(ms),
            http_status: d.http_status().into(),
        }
    }
}

/// The arguments of `new BulkheadError(reason, snapshot, key, detail)`.
pub(crate) type ErrorArgs = FnArgs<(&'static str, JsSnapshot, Option<String>, JsDetail)>;

/// The facade's `BulkheadError` class, registered by `init`.
type ErrorClass = FunctionRef<ErrorArgs, ()>;

thread_local! {
    /// The facade's `BulkheadError` of this isolate. Never dropped: the reference lives as long
    /// as the isolate (a drop at thread exit would touch an environment that is gone).
    static ERROR_CLASS: RefCell<Option<ManuallyDrop<ErrorClass>>> = const { RefCell::new(None) };
}

/// Registers the facade's `BulkheadError` (see [`crate::init`]).
pub(crate) fn init(class: &Function<ErrorArgs, ()>) -> Result<()> {
    let class = ManuallyDrop::new(class.create_ref()?);
    ERROR_CLASS.with(|c| c.replace(Some(class)));
    Ok(())
}

/// A message written only when it is shown (the happy path formats nothing).
pub(crate) struct Lazy<F>(pub(crate) F);

impl<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result> Display for Lazy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}

/// The error a native method returns once it threw: napi-rs leaves the pending exception.
pub(crate) fn thrown(r: Result<()>) -> Error {
    r.err()
        .unwrap_or_else(|| Error::new(Status::PendingException, "thrown"))
}

/// Throws a `TypeError`.
pub(crate) fn type_error(env: &Env, msg: impl Display) -> Error {
    thrown(env.throw_type_error(&msg.to_string(), None))
}

/// Throws a `RangeError`.
pub(crate) fn range_error(env: &Env, msg: impl Display) -> Error {
    thrown(env.throw_range_error(&msg.to_string(), None))
}

/// The facade's `BulkheadError` for `rejection` by the bulkhead of registry key `key`.
pub(crate) fn bulkhead_error<'e>(
    env: &'e Env,
    rejection: &Rejection,
    key: Option<&str>,
) -> Result<Unknown<'e>> {
    let class = ERROR_CLASS
        .with(|c| c.borrow().as_ref().map(|c| c.borrow_back(env)))
        .ok_or_else(|| Error::from_reason("hullguard: native.init() was not called"))??;
    let args = (
        rejection.reason.as_str(),
        JsSnapshot::from(rejection.snapshot),
        key.map(str::to_owned),
        JsDetail::from(rejection.detail()),
    );
    class.new_instance(args.into())
}

/// Throws the `BulkheadError` of a rejection, or the `RangeError` of an invalid argument (a
/// weight above `maxConcurrent`, a ring that could not be allocated).
pub(crate) fn refused(env: &Env, error: &AcquireError, key: Option<&str>) -> Error {
    error.rejection().map_or_else(
        || match *error {
            // The core's message in the Node spelling (the per-call option names).
            AcquireError::InvalidClass { class, classes } if classes > 0 => range_error(
                env,
                format_args!(
                    "admissionClass must be in 0..={} (the class table), got {class}",
                    classes - 1
                ),
            ),
            AcquireError::InvalidClass { class, .. } => range_error(
                env,
                format_args!("admissionClass must be 0 on a bulkhead without classes, got {class}"),
            ),
            AcquireError::InvalidWeight {
                weight,
                max_concurrent,
            } => range_error(
                env,
                format_args!(
                    "weight must be an integer in 1..={max_concurrent} (maxConcurrent), got {weight}"
                ),
            ),
            _ => range_error(env, error),
        },
        |r| thrown(bulkhead_error(env, r, key).and_then(|e| env.throw(e))),
    )
}

/// A JS value's type for a message (`typeof`, but `null` for null).
pub(crate) fn type_name(v: &Unknown) -> Result<String> {
    Ok(format!("{:?}", v.get_type()?).to_lowercase())
}

/// A JS value as `String(v)` does it (for "got …" in a message).
pub(crate) fn js_string(v: &Unknown) -> Result<String> {
    v.coerce_to_string()?.into_utf8()?.into_owned()
}

/// `v` if it has JS type `want`, else the `TypeError` "`what`, got `typeof v`".
pub(crate) fn expect<'e>(
    env: &Env,
    v: Unknown<'e>,
    want: ValueType,
    what: impl Display,
) -> Result<Unknown<'e>> {
    let got = v.get_type()?;
    (got == want).then_some(v).ok_or_else(|| {
        type_error(
            env,
            format_args!("{what}, got {}", type_name(&v).unwrap_or_default()),
        )
    })
}

/// A number argument (`TypeError` for any other type).
pub(crate) fn number(env: &Env, v: Unknown, what: impl Display) -> Result<f64> {
    expect(env, v, ValueType::Number, what)?
        .coerce_to_number()?
        .get_double()
}

/// A string argument (`TypeError` for any other type).
pub(crate) fn string(env: &Env, v: Unknown, name: &str) -> Result<String> {
    let v = expect(
        env,
        v,
        ValueType::String,
        format_args!("{name} must be a string"),
    )?;
    js_string(&v)
}

/// A count argument that is not an option of the table (`weight`, `n`, `limit`): a safe integer
/// in `1 ..= max`, by the core's rule for JS numbers. `of` says where `max` comes from.
pub(crate) fn count_arg(env: &Env, v: Unknown, name: &str, max: u64, of: &str) -> Result<u64> {
    let what = Lazy(|f: &mut fmt::Formatter<'_>| {
        write!(f, "{name} must be an integer in 1..={max} ({of})")
    });
    let x = number(env, v, &what)?;
    count_from_f64(x, Kind::Count { min: 1, max }).map_err(|_: Problem| {
        range_error(
            env,
            format_args!("{what}, got {}", js_string(&v).unwrap_or_default()),
        )
    })
}

/// A duration in JS milliseconds: `Duration::MAX` ("none") is `Infinity`.
pub(crate) fn ms(d: Duration) -> f64 {
    if d == Duration::MAX {
        f64::INFINITY
    } else {
        d.as_secs_f64() * 1000.0
    }
}
