//! Options as users pass them, parsed by walking the core's option table
//! (`hullguard_core::config::options`, docs/design.md §7) in the Node spelling: camelCase names,
//! durations `…Ms` in milliseconds (`Infinity` for "none" where the option has one), counts as
//! safe integers, `null` by the core's null rule (`config::options`, "Null values"; not given,
//! except a part and `callTimeoutMs`: off). The only keys known here by name are the structural ones —
//! `resilience` (whose keys are the parts `adaptive`, `breaker` and the option `callTimeoutMs`)
//! and a registry's `overrides` — and the per-call arguments that are no options of a bulkhead
//! (`weight`, `signal`, `deadline`, `outcome`, drain's `timeoutMs`, `applyLimits`'
//! `queueDelay`).
//!
//! Errors: an unknown key or a value of the wrong type is a `TypeError` naming the key (an
//! unknown one lists the known names); a value out of range is a `RangeError` with the core's
//! message in the Node spelling (`resilience.breaker.openDurationMs must be …, got 0`); an
//! override's errors start with `overrides["key"]: `. A key whose value is `undefined` is not
//! set. Keys are the object's own string-keyed properties (inherited and symbol keys are
//! ignored).

use std::{
    fmt::{self, Display},
    time::Duration,
};

use hullguard_core::{
    Config, ConfigError, GlobalCap, LimitsSnapshot, MAX_BUDGET, MAX_PERMITS, MAX_QUEUE, Observe,
    Outcome, QueueDelay, RegistryConfig, RegistryConfigError, Request,
    config::{
        Part, PartialConfig, PriorityReserve, Rates, Value,
        class_options::{
            self, ClassOptionSpec, ClassSection, ClassTableBuilder, RATE_KEYS, TABLE_KEYS,
        },
        convert::{count_from_f64, duration_from_millis},
        options::{Kind, OptionId, OptionSpec, Section, Spelling, find, find_part, known_names},
    },
};
use napi::{
    Env, Error, JsValue, Result, ValueType,
    bindgen_prelude::{JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Unknown},
};

use crate::{
    clock,
    marshal::{
        Lazy, count_arg, expect, js_string, number, range_error, string, type_error, type_name,
    },
};

const NODE: Spelling = Spelling::Node;

type Entries<'e> = Vec<(String, Unknown<'e>)>;

/// The own string keys of an options object whose value is not `undefined`, with their
/// values. `undefined` is an empty object; anything else that is not an object is the
/// `TypeError` "`what`, got …".
pub(crate) fn entries<'e>(env: &Env, v: Unknown<'e>, what: impl Display) -> Result<Entries<'e>> {
    if v.get_type()? == ValueType::Undefined {
        return Ok(Vec::new());
    }
    let o = expect(env, v, ValueType::Object, what)?.coerce_to_object()?;
    let names = o.get_all_property_names(
        KeyCollectionMode::OwnOnly,
        KeyFilter::SkipSymbols,
        KeyConversion::NumbersToStrings,
    )?;
    let mut out = Vec::new();
    for i in 0..names.get_array_length()? {
        let key: Unknown = names.get_element(i)?;
        let value: Unknown = o.get_property(key)?;
        let given = value.get_type()? != ValueType::Undefined;
        out.extend(
            given
                .then(|| js_string(&key))
                .transpose()?
                .map(|k| (k, value)),
        );
    }
    Ok(out)
}

fn unknown(env: &Env, at: &str, key: &str, known: impl Display) -> Error {
    type_error(
        env,
        format_args!("{at}unknown option {key:?} (known: {known})"),
    )
}

// ----- construction options -------------------------------------------------------------------

/// What `new Bulkhead(options)` takes: the core's configuration, the class table when any of
/// its keys is given (`classes`, `reserve`, `rates`, `lending`, `shed`: walked by the core's
/// class-option table, `config::class_options`), and `events` (admission events wanted).
pub(crate) struct BulkheadOptions {
    pub config: Config,
    pub table: Option<ClassTableBuilder>,
    pub events: bool,
}

/// The keys a `Bulkhead`'s options take besides the core's option table, for the "unknown
/// option" message.
const BULKHEAD_EXTRA: &str =
    ", \"classes\", \"reserve\", \"rates\", \"lending\", \"shed\", \"events\"";

/// The configuration of `new Bulkhead(options)`.
pub(crate) fn bulkhead(env: &Env, opts: Unknown) -> Result<BulkheadOptions> {
    let mut p = PartialConfig::new();
    let top = entries(env, opts, "options must be an object")?;
    let mut table: Option<ClassTableBuilder> = None;
    let mut events = false;
    let mut rest = Vec::new();
    for (key, v) in top {
        if key == "events" {
            if let Some(v) = not_null(v)? {
                let b = expect(env, v, ValueType::Boolean, "events must be a boolean")?;
                events = b.coerce_to_bool()?;
            }
        } else if is_table_key(&key) {
            if let Some(v) = not_null(v)? {
                table_option(
                    env,
                    table.get_or_insert_with(ClassTableBuilder::new),
                    &key,
                    v,
                )?;
            }
        } else {
            rest.push((key, v));
        }
    }
    walk_with(
        env,
        &rest,
        Section::Bulkhead,
        "",
        "",
        BULKHEAD_EXTRA,
        &mut p,
    )?;
    let config = p
        .to_config()
        .map_err(|e| range_error(env, e.spelled(NODE)))?;
    Ok(BulkheadOptions {
        config,
        table,
        events,
    })
}

/// Whether `key` belongs to the class table (its structural keys or its own flags).
fn is_table_key(key: &str) -> bool {
    TABLE_KEYS.contains(&key) || class_options::find(ClassSection::Table, NODE, key).is_some()
}

/// One class-table key of the bulkhead's options into `b`.
fn table_option(env: &Env, b: &mut ClassTableBuilder, key: &str, v: Unknown) -> Result<()> {
    match key {
        "classes" => {
            let what = "classes must be an array of class objects";
            let v = expect(env, v, ValueType::Object, what)?;
            if !v.is_array()? {
                return Err(type_error(env, format_args!("{what}, got object")));
            }
            let arr = v.coerce_to_object()?;
            for i in 0..arr.get_array_length()? {
                let c: Unknown = arr.get_element(i)?;
                let at = format!("classes[{i}].");
                let given = entries(env, c, format_args!("classes[{i}] must be an object"))?;
                let i = i as usize;
                b.ensure_class(i).map_err(|e| range_error(env, e))?;
                for (k, x) in given {
                    let Some(x) = not_null(x)? else { continue };
                    if k == "name" {
                        let name = string(env, x, &format!("{at}name"))?;
                        b.set_name(i, &name).map_err(|e| range_error(env, e))?;
                        continue;
                    }
                    let label = format!("classes[{i}]: ");
                    let spec = class_spec(env, ClassSection::Class, &k, &label)?;
                    let value = class_value(env, spec, x, &at)?;
                    b.set(i, spec.id, value).map_err(|e| range_error(env, e))?;
                }
            }
            Ok(())
        }
        "reserve" => {
            for (k, x) in entries(env, v, "reserve must be an object")? {
                let Some(x) = not_null(x)? else { continue };
                let spec = class_spec(env, ClassSection::Reserve, &k, "reserve: ")?;
                let value = class_value(env, spec, x, "reserve.")?;
                b.set_table(spec.id, value)
                    .map_err(|e| range_error(env, e))?;
            }
            Ok(())
        }
        "rates" => {
            for (rate, r) in entries(env, v, "rates must be an object")? {
                if !RATE_KEYS.contains(&rate.as_str()) {
                    return Err(unknown(env, "rates: ", &rate, "\"requests\", \"units\""));
                }
                let Some(r) = not_null(r)? else { continue };
                let at = format!("rates.{rate}.");
                let given = entries(env, r, format_args!("rates.{rate} must be an object"))?;
                for (k, x) in given {
                    let Some(x) = not_null(x)? else { continue };
                    let label = format!("rates.{rate}: ");
                    let spec = class_spec(env, ClassSection::Rate, &k, &label)?;
                    let value = class_value(env, spec, x, &at)?;
                    b.set_rate(&rate, spec.id, value)
                        .map_err(|e| range_error(env, e))?;
                }
            }
            Ok(())
        }
        _ => {
            let spec = class_spec(env, ClassSection::Table, key, "")?;
            let value = class_value(env, spec, v, "")?;
            b.set_table(spec.id, value).map_err(|e| range_error(env, e))
        }
    }
}

/// The class-table option `key` of `section` (an unknown one is a `TypeError` listing the
/// known names).
fn class_spec(
    env: &Env,
    section: ClassSection,
    key: &str,
    at: &str,
) -> Result<&'static ClassOptionSpec> {
    class_options::find(section, NODE, key).ok_or_else(|| {
        let known = class_options::known_names(section, NODE);
        unknown(env, at, key, known)
    })
}

/// One class-table option's value, converted by its kind with the core's rules.
fn class_value(env: &Env, spec: &ClassOptionSpec, v: Unknown, at: &str) -> Result<Value> {
    let name = spec.spelled(NODE);
    let what =
        Lazy(|f: &mut fmt::Formatter<'_>| write!(f, "{at}{name} must be {}", spec.range(NODE)));
    let x = || v.coerce_to_number()?.get_double();
    let value = match (spec.kind, v.get_type()?) {
        (Kind::Count { .. }, ValueType::Number) => {
            count_from_f64(x()?, spec.kind).ok().map(Value::Count)
        }
        (Kind::Duration { .. }, ValueType::Number) => duration_from_millis(x()?, spec.kind)
            .ok()
            .map(Value::Duration),
        (Kind::Number { .. }, ValueType::Number) => Some(Value::Number(x()?)),
        (Kind::Bool, ValueType::Boolean) => Some(Value::Bool(v.coerce_to_bool()?)),
        (Kind::Choice(choices), ValueType::String) => {
            let s = js_string(&v)?;
            choices.iter().find(|c| **c == s).map(|c| Value::Choice(c))
        }
        _ => {
            return Err(type_error(
                env,
                format_args!("{what}, got {}", type_name(&v)?),
            ));
        }
    };
    value.ok_or_else(|| {
        range_error(
            env,
            format_args!("{what}, got {}", js_string(&v).unwrap_or_default()),
        )
    })
}

/// The configuration of `new Registry(options)`: its defaults (with `maxKeys`) and one partial
/// configuration per `overrides` key, which the core merges key by key over the defaults (and
/// whose URL-shaped keys it canonicalises with `origin_key`).
pub(crate) fn registry(env: &Env, opts: Unknown) -> Result<(RegistryConfig, bool)> {
    let mut top = entries(env, opts, "options must be an object")?;
    // `events: true`: admission events of every key.
    let mut events = false;
    if let Some(i) = top.iter().position(|(k, _)| k == "events") {
        let (_, v) = top.remove(i);
        if let Some(v) = not_null(v)? {
            let b = expect(env, v, ValueType::Boolean, "events must be a boolean")?;
            events = b.coerce_to_bool()?;
        }
    }
    // `global: {limit, maxQueue}`: one cap over every key (docs/design.md §9.2).
    let mut global = None;
    if let Some(i) = top.iter().position(|(k, _)| k == "global") {
        let (_, g) = top.remove(i);
        if let Some(g) = not_null(g)? {
            let mut cap = GlobalCap {
                limit: 0,
                max_queue: 0,
            };
            let mut limit = None;
            for (k, x) in entries(env, g, "global must be an object")? {
                match k.as_str() {
                    "limit" => {
                        limit = Some(count_arg(
                            env,
                            x,
                            "global.limit",
                            MAX_PERMITS,
                            "MAX_PERMITS",
                        )?)
                    }
                    "maxQueue" => cap.max_queue = count0(env, x, "global.maxQueue", MAX_QUEUE)?,
                    _ => return Err(unknown(env, "global: ", &k, "\"limit\", \"maxQueue\"")),
                }
            }
            cap.limit = limit.ok_or_else(|| type_error(env, "global.limit is required"))?;
            global = Some(cap);
        }
    }
    let mut defaults = PartialConfig::new();
    walk_with(
        env,
        &top,
        Section::Registry,
        "",
        "",
        ", \"overrides\", \"global\", \"events\"",
        &mut defaults,
    )?;
    let mut overrides = Vec::new();
    // `null` (the core's null rule): no overrides, or an override that sets nothing.
    let given = top.iter().filter(|(k, _)| k == "overrides");
    for given in given.filter_map(|(_, v)| not_null(*v).transpose()) {
        for (key, o) in entries(env, given?, "overrides must be an object")? {
            let at = format!("overrides[{key:?}]: ");
            let mut p = PartialConfig::new();
            let o = match not_null(o)? {
                Some(o) => entries(env, o, format_args!("{at}options must be an object"))?,
                None => Vec::new(),
            };
            walk(env, &o, Section::Bulkhead, &at, "", &mut p)?;
            overrides.push((key, p));
        }
    }
    let mut rc =
        RegistryConfig::from_partial(&defaults, overrides).map_err(|e| registry_error(env, e))?;
    rc.global = global;
    Ok((rc, events))
}

fn registry_error(env: &Env, e: RegistryConfigError) -> Error {
    // A value out of range; else a bad override key (no origin, or the canonical form of
    // another one), which the core's message names.
    e.error.map_or_else(
        || type_error(env, &e),
        |c| {
            let at = e.key.as_ref().map(|k| format!("overrides[{k:?}]: "));
            range_error(
                env,
                format_args!("{}{}", at.unwrap_or_default(), c.spelled(NODE)),
            )
        },
    )
}

/// `v`, or `None` for `null`.
pub(crate) fn not_null(v: Unknown) -> Result<Option<Unknown>> {
    Ok((v.get_type()? != ValueType::Null).then_some(v))
}

/// Sets every key of one object of `section`. `at` starts every message of an override;
/// `label` the "unknown option" message inside `resilience` (`"resilience.breaker: "`).
fn walk(
    env: &Env,
    given: &Entries,
    section: Section,
    at: &str,
    label: &str,
    p: &mut PartialConfig,
) -> Result<()> {
    walk_with(env, given, section, at, label, "", p)
}

/// [`walk`], with `extra` appended to the known names of an "unknown option" message (the
/// keys the caller took out before walking).
fn walk_with(
    env: &Env,
    given: &Entries,
    section: Section,
    at: &str,
    label: &str,
    extra: &str,
    p: &mut PartialConfig,
) -> Result<()> {
    for (key, v) in given {
        // A registry's own object also holds the bulkhead options (its defaults).
        let defaults =
            || find(Section::Bulkhead, NODE, key).filter(|_| section == Section::Registry);
        if let Some(spec) = find(section, NODE, key).or_else(defaults) {
            match not_null(*v)? {
                Some(v) => set(env, spec, v, at, p)?,
                // The core's rule: not given, except `callTimeoutMs` (off).
                None => p.set_null(spec.id),
            }
        } else if let Some(part) = part_of(section, key) {
            // `null` turns the part off (the core's rule); an object, even `{}`, turns it on.
            let what = format!("{at}{} must be an object or null", part.path());
            let Some(o) = not_null(*v)? else {
                p.set_null_part(part);
                continue;
            };
            let inner = entries(env, o, what)?;
            p.set_part(part, Part::On);
            let label = format!("{}: ", part.path());
            walk(env, &inner, part, at, &label, p)?;
        } else if !(section == Section::Registry && key == "overrides") {
            let known = known_names(section, NODE);
            let known = format_args!("{known}{extra}");
            return Err(unknown(env, &format!("{at}{label}"), key, known));
        }
    }
    Ok(())
}

/// The part a structural key opens: `resilience` at the top, `adaptive` / `breaker` inside it.
fn part_of(section: Section, key: &str) -> Option<Section> {
    match section {
        Section::Resilience => find_part(key),
        Section::Bulkhead | Section::Registry => {
            (key == "resilience").then_some(Section::Resilience)
        }
        _ => None,
    }
}

/// Converts `v` by the option's kind, with the core's rules, and sets it.
fn set(
    env: &Env,
    spec: &'static OptionSpec,
    v: Unknown,
    at: &str,
    p: &mut PartialConfig,
) -> Result<()> {
    let what = Lazy(|f: &mut fmt::Formatter<'_>| {
        write!(f, "{at}{}", ConfigError::Option(spec.id).spelled(NODE))
    });
    let x = || v.coerce_to_number()?.get_double();
    let value = match (spec.kind, v.get_type()?) {
        (Kind::Count { .. }, ValueType::Number) => {
            count_from_f64(x()?, spec.kind).ok().map(Value::Count)
        }
        (Kind::Duration { .. }, ValueType::Number) => duration_from_millis(x()?, spec.kind)
            .ok()
            .map(Value::Duration),
        (Kind::Number { .. }, ValueType::Number) => Some(Value::Number(x()?)),
        (Kind::Bool, ValueType::Boolean) => Some(Value::Bool(v.coerce_to_bool()?)),
        (Kind::Choice(choices), ValueType::String) => {
            let s = js_string(&v)?;
            choices.iter().find(|c| **c == s).map(|c| Value::Choice(c))
        }
        _ => {
            return Err(type_error(
                env,
                format_args!("{what}, got {}", type_name(&v)?),
            ));
        }
    };
    let out_of_range = || {
        range_error(
            env,
            format_args!("{what}, got {}", js_string(&v).unwrap_or_default()),
        )
    };
    p.set(spec.id, value.ok_or_else(out_of_range)?)
        .map_err(|_| out_of_range())
}

// ----- per-call arguments ---------------------------------------------------------------------

/// A deadline argument in ms, by the rule (and with the range) of the option `queueTimeoutMs`:
/// 0 allowed, `Infinity` for none.
fn deadline(env: &Env, v: Unknown, name: impl Display) -> Result<Duration> {
    let spec = OptionId::QueueTimeout.spec();
    let what = Lazy(|f: &mut fmt::Formatter<'_>| write!(f, "{name} must be {}", spec.range(NODE)));
    duration_from_millis(number(env, v, &what)?, spec.kind).map_err(|_| {
        range_error(
            env,
            format_args!("{what}, got {}", js_string(&v).unwrap_or_default()),
        )
    })
}

/// A request's absolute `deadline` in ms (docs/design.md §5.9; the scale is `clock`'s): a
/// number; `Infinity` is none (so is anything at or past 2^63 ns, `clock::deadline_of`); a
/// passed one is no argument error (the core refuses it `timeout`). NaN and `-Infinity` are a
/// `RangeError`, a non-number a `TypeError`, both naming `name`.
pub(crate) fn deadline_ms(env: &Env, v: Unknown, name: &str) -> Result<f64> {
    let what = Lazy(|f: &mut fmt::Formatter<'_>| {
        write!(
            f,
            "{name} must be an absolute time in ms on the performance.now() scale \
             (a number > -Infinity; Infinity: none)"
        )
    });
    let x = number(env, v, &what)?;
    if x.is_nan() || x == f64::NEG_INFINITY {
        return Err(range_error(env, format_args!("{what}, got {x}")));
    }
    Ok(x)
}

/// How a bulkhead reads a request: `maxConcurrent` (to check its weight), the class names of
/// its class table (index = the core's class index), the scale of its deadlines (the test
/// hook's virtual clock, or `performance.now()`'s) and the ambient deadline in effect
/// (`withDeadline`, ms; `Infinity`: none), which an explicit `deadline` is min'd with.
pub(crate) struct RequestCtx<'a> {
    pub max_concurrent: u64,
    pub names: &'a [Option<String>],
    pub virtual_clock: bool,
    pub ambient_ms: f64,
}

/// The ambient deadline argument of a native admission method (`undefined`: none).
pub(crate) fn ambient(ms: Option<f64>) -> f64 {
    // The facade passes only a checked number: NaN cannot reach here, but is none if it did.
    ms.filter(|m| !m.is_nan()).unwrap_or(f64::INFINITY)
}

/// The per-call keys of `acquire()` / `wouldAdmit()`, for "unknown option".
const ACQUIRE_KEYS: &str = "\"weight\", \"cost\", \"admissionClass\", \"observe\", \"signal\", \"queueTimeoutMs\", \"deadline\"";
/// The per-call keys of `run()`: `acquire()`'s and `getUsage`.
const RUN_KEYS: &str = "\"weight\", \"cost\", \"admissionClass\", \"observe\", \"signal\", \"queueTimeoutMs\", \"deadline\", \"getUsage\"";
/// The per-call keys of `tryAcquire()` (it never queues).
const TRY_KEYS: &str = "\"weight\", \"cost\", \"admissionClass\", \"observe\", \"deadline\"";

/// Which call's options a request is read from (they differ in the keys they take).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// `tryAcquire()`: no `signal`, `queueTimeoutMs` or `getUsage`.
    Try,
    /// `acquire()` / `admit()` / `wouldAdmit()`: no `getUsage` (only `run()` settles with it).
    Acquire,
    /// `run()`.
    Run,
}

/// `acquire()` options (`run`: `run()`'s, which take `getUsage` too): `{weight, cost,
/// admissionClass, observe, signal, queueTimeoutMs, deadline}` (`signal` and `getUsage` are
/// the facade's). `null` (like `undefined`) is not given: one permit, no cost, class 0, the
/// bulkhead's own timeout, the ambient deadline (or none).
pub(crate) fn acquire(env: &Env, opts: Unknown, ctx: &RequestCtx, run: bool) -> Result<Request> {
    let keys = if run { Keys::Run } else { Keys::Acquire };
    request(env, opts, ctx, keys)
}

/// `tryAcquire()` options: `{weight, cost, admissionClass, observe, deadline}`; a request that
/// does not queue (a passed deadline makes its refusal `timeout`).
pub(crate) fn try_acquire(env: &Env, opts: Unknown, ctx: &RequestCtx) -> Result<Request> {
    request(env, opts, ctx, Keys::Try).map(Request::no_wait)
}

fn request(env: &Env, opts: Unknown, ctx: &RequestCtx, keys: Keys) -> Result<Request> {
    let mut r = Request::new(1);
    let timeout = OptionId::QueueTimeout.spec().spelled(NODE);
    let queue = keys != Keys::Try;
    let mut deadline_at = ctx.ambient_ms;
    for (key, v) in entries(env, opts, "options must be an object")? {
        let given = not_null(v)?;
        match key.as_str() {
            // An explicit deadline is min'd with the ambient one (a budget is never extended).
            "deadline" => {
                if let Some(v) = given {
                    deadline_at = deadline_at.min(deadline_ms(env, v, "deadline")?);
                }
            }
            "weight" => {
                if let Some(v) = given {
                    let max = ctx.max_concurrent;
                    r.weight = count_arg(env, v, "weight", max, "maxConcurrent")?;
                }
            }
            // The core judges the cost against the budget (`invalid` above its ceiling).
            "cost" => {
                if let Some(v) = given {
                    r.cost = count0(env, v, "cost", MAX_BUDGET)?;
                }
            }
            "admissionClass" => {
                if let Some(v) = given {
                    r.class = class_arg(env, v, ctx.names)?;
                }
            }
            "observe" => {
                if let Some(v) = given {
                    r.observe = observe_arg(env, v, "observe")?;
                }
            }
            "signal" if queue => {}
            "getUsage" if keys == Keys::Run => {}
            k if queue && timeout.is(k) => {
                r.queue_timeout = given.map(|v| deadline(env, v, timeout)).transpose()?;
            }
            k => {
                let known = match keys {
                    Keys::Try => TRY_KEYS,
                    Keys::Acquire => ACQUIRE_KEYS,
                    Keys::Run => RUN_KEYS,
                };
                return Err(unknown(env, "", k, known));
            }
        }
    }
    if deadline_at != f64::INFINITY {
        r.deadline = clock::deadline_of(deadline_at, ctx.virtual_clock);
    }
    Ok(r)
}

/// A count that may be 0 (`cost`, `usage`, `remaining`): a safe integer in `0 ..= max`.
pub(crate) fn count0(env: &Env, v: Unknown, name: &str, max: u64) -> Result<u64> {
    let what =
        Lazy(|f: &mut fmt::Formatter<'_>| write!(f, "{name} must be an integer in 0..={max}"));
    let x = number(env, v, &what)?;
    count_from_f64(x, Kind::Count { min: 0, max }).map_err(|_| {
        range_error(
            env,
            format_args!("{what}, got {}", js_string(&v).unwrap_or_default()),
        )
    })
}

/// An admission class: a name of the class table, or an index (the core refuses one the
/// bulkhead does not have).
pub(crate) fn class_arg(env: &Env, v: Unknown, names: &[Option<String>]) -> Result<u16> {
    let known = || {
        let n: Vec<String> = names.iter().flatten().map(|n| format!("{n:?}")).collect();
        if n.is_empty() {
            "none".to_owned()
        } else {
            n.join(", ")
        }
    };
    match v.get_type()? {
        ValueType::String => {
            let s = js_string(&v)?;
            let i = names.iter().position(|n| n.as_deref() == Some(s.as_str()));
            i.map(|i| i as u16).ok_or_else(|| {
                range_error(
                    env,
                    format_args!(
                        "admissionClass must be a class name ({}) or index, got {s:?}",
                        known()
                    ),
                )
            })
        }
        ValueType::Number => {
            let x = v.coerce_to_number()?.get_double()?;
            let n = count_from_f64(
                x,
                Kind::Count {
                    min: 0,
                    max: u64::from(u16::MAX),
                },
            );
            n.map(|n| n as u16).map_err(|_| {
                range_error(
                    env,
                    format_args!(
                        "admissionClass must be a class index in 0..={}, got {x}",
                        u16::MAX
                    ),
                )
            })
        }
        _ => Err(type_error(
            env,
            format_args!(
                "admissionClass must be a class name ({}) or index, got {}",
                known(),
                type_name(&v)?
            ),
        )),
    }
}

/// An observe mode: `'off' | 'concurrency' | 'budget' | 'all'`.
pub(crate) fn observe_arg(env: &Env, v: Unknown, name: &str) -> Result<Observe> {
    let what = Lazy(|f: &mut fmt::Formatter<'_>| {
        let c: Vec<String> = Observe::CHOICES.iter().map(|c| format!("'{c}'")).collect();
        write!(f, "{name} must be one of {}", c.join(", "))
    });
    let s = js_string(&expect(env, v, ValueType::String, &what)?)?;
    Observe::parse(&s).ok_or_else(|| range_error(env, format_args!("{what}, got {s:?}")))
}

/// `applyLimits(options)`: `{revision, limit, budget, maxQueue, queueTimeoutMs, reserve,
/// rates, queueDelay}` as the core's snapshot (`revision` required) and the class table's
/// run-time part (`reserve`, `rates`: the class-option table's). The core judges every value.
pub(crate) fn limits(
    env: &Env,
    opts: Unknown,
) -> Result<(LimitsSnapshot, Option<PriorityReserve>, Option<Rates>)> {
    let mut snap = LimitsSnapshot::new(0);
    let mut revision = None;
    let (mut reserve, mut rates) = (None, None);
    let big = u64::MAX >> 11; // any safe integer: the core names what is out of range
    for (key, v) in entries(env, opts, "options must be an object")? {
        let Some(v) = not_null(v)? else { continue };
        match key.as_str() {
            "revision" => revision = Some(count0(env, v, "revision", big)?),
            "limit" => snap.limit = Some(count0(env, v, "limit", big)?),
            "budget" => snap.budget = Some(count0(env, v, "budget", big)?),
            "maxQueue" => snap.max_queue = Some(count0(env, v, "maxQueue", big)?),
            "queueTimeoutMs" => snap.queue_timeout = Some(deadline(env, v, "queueTimeoutMs")?),
            "reserve" => {
                let mut b = ClassTableBuilder::new();
                table_option(env, &mut b, &key, v)?;
                reserve = Some(b.reserve());
            }
            "rates" => {
                let mut b = ClassTableBuilder::new();
                table_option(env, &mut b, &key, v)?;
                rates = Some(b.rates());
            }
            "queueDelay" => snap.queue_delay = Some(queue_delay(env, v)?),
            k => {
                return Err(unknown(
                    env,
                    "",
                    k,
                    "\"revision\", \"limit\", \"budget\", \"maxQueue\", \"queueTimeoutMs\", \"reserve\", \"rates\", \"queueDelay\"",
                ));
            }
        }
    }
    snap.revision =
        revision.ok_or_else(|| type_error(env, "revision is required (an integer >= 0)"))?;
    Ok((snap, reserve, rates))
}

/// `applyLimits`' `queueDelay: {targetMs, intervalMs, lifo}` (docs/design.md §4.10): the three
/// queue-delay dispatch options, replaced together. `targetMs` is required (0 turns shedding
/// and LIFO off); `intervalMs` defaults to the option's default (100 ms), `lifo` to false.
/// Each value by its option row's range (`queueDelayTargetMs`, …); an unknown key is a
/// `TypeError` naming it. The core judges the combination (LIFO needs a target; a bulkhead
/// built without a target or classes refuses).
fn queue_delay(env: &Env, v: Unknown) -> Result<QueueDelay> {
    let mut q = Config::DEFAULT.queue_delay();
    q.lifo = false;
    let mut target = None;
    let ms = |id: OptionId, name: &str, x: Unknown| -> Result<std::time::Duration> {
        let spec = id.spec();
        let what = Lazy(|f: &mut fmt::Formatter<'_>| {
            write!(f, "queueDelay.{name} must be {}", spec.range(NODE))
        });
        duration_from_millis(number(env, x, &what)?, spec.kind).map_err(|_| {
            range_error(
                env,
                format_args!("{what}, got {}", js_string(&x).unwrap_or_default()),
            )
        })
    };
    for (k, x) in entries(
        env,
        v,
        "queueDelay must be an object {targetMs, intervalMs, lifo}",
    )? {
        let Some(x) = not_null(x)? else { continue };
        match k.as_str() {
            "targetMs" => target = Some(ms(OptionId::QueueDelayTarget, "targetMs", x)?),
            "intervalMs" => q.interval = ms(OptionId::QueueDelayInterval, "intervalMs", x)?,
            "lifo" => {
                let b = expect(
                    env,
                    x,
                    ValueType::Boolean,
                    "queueDelay.lifo must be a boolean",
                )?;
                q.lifo = b.coerce_to_bool()?;
            }
            _ => {
                return Err(unknown(
                    env,
                    "queueDelay: ",
                    &k,
                    "\"targetMs\", \"intervalMs\", \"lifo\"",
                ));
            }
        }
    }
    q.target = target.ok_or_else(|| {
        type_error(
            env,
            "queueDelay.targetMs is required (ms; 0 turns shedding and LIFO off)",
        )
    })?;
    Ok(q)
}

/// `release()` options: `undefined`, an outcome name, or `{outcome, usage}` (`usage`: the
/// budget units the call used in all; the core refunds the rest).
pub(crate) fn release(env: &Env, v: Unknown) -> Result<(Outcome, Option<u64>)> {
    if matches!(v.get_type()?, ValueType::String | ValueType::Undefined) {
        return Ok((outcome(env, v)?, None));
    }
    let mut out = (Outcome::Success, None);
    for (key, x) in entries(env, v, "options must be an object")? {
        match key.as_str() {
            "outcome" => out.0 = outcome(env, x)?,
            "usage" => {
                out.1 = not_null(x)?
                    .map(|x| count0(env, x, "usage", MAX_BUDGET))
                    .transpose()?
            }
            k => return Err(unknown(env, "", k, "\"outcome\", \"usage\"")),
        }
    }
    Ok(out)
}

/// The value of the one key an options object may have, if given.
fn only<'e>(env: &Env, opts: Unknown<'e>, name: &str) -> Result<Option<Unknown<'e>>> {
    let mut value = None;
    for (key, v) in entries(env, opts, "options must be an object")? {
        if key != name {
            return Err(unknown(env, "", &key, format_args!("{name:?}")));
        }
        value = Some(v);
    }
    Ok(value)
}

/// `drain()` options: `{timeoutMs}`; `undefined`, `null` or `Infinity` wait until idle.
pub(crate) fn drain(env: &Env, opts: Unknown) -> Result<Duration> {
    let given = only(env, opts, "timeoutMs")?.map(not_null).transpose()?;
    given
        .flatten()
        .map_or(Ok(Duration::MAX), |v| deadline(env, v, "timeoutMs"))
}

/// The outcome of a release: `undefined` (`'success'`), an outcome name (the facade's `run()`)
/// or `{outcome}` (`permit.release(options)`); an unknown name is a `TypeError`.
pub(crate) fn outcome(env: &Env, v: Unknown) -> Result<Outcome> {
    let name = if v.get_type()? == ValueType::String {
        Some(v)
    } else {
        only(env, v, "outcome")?
    };
    let Some(name) = name else {
        return Ok(Outcome::Success);
    };
    let what = Lazy(|f: &mut fmt::Formatter<'_>| {
        let names: Vec<String> = (0u8..)
            .map_while(Outcome::from_code)
            .map(|o| format!("'{}'", o.as_str()))
            .collect();
        write!(f, "outcome must be one of {}", names.join(", "))
    });
    let s = js_string(&expect(env, name, ValueType::String, &what)?)?;
    Outcome::parse(&s).ok_or_else(|| type_error(env, format_args!("{what}, got {s:?}")))
}

/// `reportLoad({eventLoopLagMs, cpu})`: the readings as the core's signals, both checked before
/// either is reported (a bad field reports nothing). A reading is a number ≥ 0 (`eventLoopLagMs`
/// in ms, `cpu` in cores); `null` / `undefined` is not given; a non-number is a `TypeError`,
/// NaN or a negative number a `RangeError`, an unknown key a `TypeError` naming it, and an
/// object with neither reading a `TypeError`.
pub(crate) fn load(env: &Env, v: Unknown) -> Result<Vec<hullguard_core::load::LoadSignal>> {
    use hullguard_core::load::LoadSignal;
    let reading = |x: Unknown, name: &str, what: &str| -> Result<f64> {
        let n = number(
            env,
            x,
            format_args!("{name} must be {what} (a number >= 0)"),
        )?;
        if n.is_nan() || n < 0.0 {
            return Err(range_error(
                env,
                format_args!("{name} must be {what} (a number >= 0), got {n}"),
            ));
        }
        Ok(n)
    };
    let mut out = Vec::with_capacity(2);
    for (k, x) in entries(env, v, "reportLoad needs an object {eventLoopLagMs, cpu}")? {
        let Some(x) = not_null(x)? else { continue };
        match k.as_str() {
            "eventLoopLagMs" => {
                let ms = reading(x, "eventLoopLagMs", "an event-loop lag in ms")?;
                let d = Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::MAX);
                out.push(LoadSignal::EventLoopLag(d));
            }
            "cpu" => out.push(LoadSignal::Cpu(reading(x, "cpu", "a CPU use in cores")?)),
            _ => {
                return Err(unknown(
                    env,
                    "reportLoad: ",
                    &k,
                    "\"eventLoopLagMs\", \"cpu\"",
                ));
            }
        }
    }
    if out.is_empty() {
        return Err(type_error(
            env,
            "reportLoad needs eventLoopLagMs (ms) and/or cpu (cores)",
        ));
    }
    Ok(out)
}
