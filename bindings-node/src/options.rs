//! Options as users pass them, parsed by walking the core's option table
//! (`hullguard_core::config::options`, docs/design.md §7) in the Node spelling: camelCase names,
//! durations `…Ms` in milliseconds (`Infinity` for "none" where the option has one), counts as
//! safe integers, `null` by the core's null rule (`config::options`, "Null values"; not given,
//! except a part and `callTimeoutMs`: off). The only keys known here by name are the structural ones —
//! `resilience` (whose keys are the parts `adaptive`, `breaker` and the option `callTimeoutMs`)
//! and a registry's `overrides` — and the per-call arguments that are no options of a bulkhead
//! (`weight`, `signal`, `outcome`, drain's `timeoutMs`).
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
    Config, ConfigError, Outcome, RegistryConfig, RegistryConfigError, Request,
    config::{
        Part, PartialConfig, Value,
        convert::{count_from_f64, duration_from_millis},
        options::{Kind, OptionId, OptionSpec, Section, Spelling, find, find_part, known_names},
    },
};
use napi::{
    Env, Error, JsValue, Result, ValueType,
    bindgen_prelude::{JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Unknown},
};

use crate::marshal::{
    Lazy, count_arg, expect, js_string, number, range_error, type_error, type_name,
};

const NODE: Spelling = Spelling::Node;

type Entries<'e> = Vec<(String, Unknown<'e>)>;

/// The own string keys of an options object whose value is not `undefined`, with their
/// values. `undefined` is an empty object; anything else that is not an object is the
/// `TypeError` "`what`, got …".
fn entries<'e>(env: &Env, v: Unknown<'e>, what: impl Display) -> Result<Entries<'e>> {
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

/// The configuration of `new Bulkhead(options)`.
pub(crate) fn bulkhead(env: &Env, opts: Unknown) -> Result<Config> {
    let mut p = PartialConfig::new();
    let top = entries(env, opts, "options must be an object")?;
    walk(env, &top, Section::Bulkhead, "", "", &mut p)?;
    p.to_config().map_err(|e| range_error(env, e.spelled(NODE)))
}

/// The configuration of `new Registry(options)`: its defaults (with `maxKeys`) and one partial
/// configuration per `overrides` key, which the core merges key by key over the defaults (and
/// whose URL-shaped keys it canonicalises with `origin_key`).
pub(crate) fn registry(env: &Env, opts: Unknown) -> Result<RegistryConfig> {
    let top = entries(env, opts, "options must be an object")?;
    let mut defaults = PartialConfig::new();
    walk(env, &top, Section::Registry, "", "", &mut defaults)?;
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
    RegistryConfig::from_partial(&defaults, overrides).map_err(|e| registry_error(env, e))
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
fn not_null(v: Unknown) -> Result<Option<Unknown>> {
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

/// `acquire()` / `run()` options: `{weight, signal, queueTimeoutMs}`. `signal` is the facade's;
/// `queueTimeoutMs` `null` (like `undefined`) is the bulkhead's own.
pub(crate) fn acquire(env: &Env, opts: Unknown, max_concurrent: u64) -> Result<Request> {
    let mut r = Request::new(1);
    let timeout = OptionId::QueueTimeout.spec().spelled(NODE);
    for (key, v) in entries(env, opts, "options must be an object")? {
        match key.as_str() {
            // `null`: not given (the core's null rule), one permit.
            "weight" => {
                if let Some(v) = not_null(v)? {
                    r.weight = count_arg(env, v, "weight", max_concurrent, "maxConcurrent")?;
                }
            }
            "signal" => {}
            k if timeout.is(k) => {
                let given = not_null(v)?;
                r.queue_timeout = given.map(|v| deadline(env, v, timeout)).transpose()?;
            }
            k => {
                return Err(unknown(
                    env,
                    "",
                    k,
                    format_args!("\"weight\", \"signal\", \"{timeout}\""),
                ));
            }
        }
    }
    Ok(r)
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

/// `tryAcquire()` options: `{weight}`.
pub(crate) fn try_acquire(env: &Env, opts: Unknown, max_concurrent: u64) -> Result<u64> {
    let given = only(env, opts, "weight")?
        .map(not_null)
        .transpose()?
        .flatten();
    given.map_or(Ok(1), |v| {
        count_arg(env, v, "weight", max_concurrent, "maxConcurrent")
    })
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
