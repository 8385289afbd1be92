//! Options and arguments as Python passes them, read by walking the core's option table
//! (`hullguard_core::config::options`, docs/design.md §7): names in `Spelling::Python`
//! (snake_case), durations in float seconds (`math.inf` = none), counts as `int`, `None` by
//! the core's null rule (not given; off for a part and `call_timeout`). Values are
//! converted by the core's one rule (`config::convert`) into a [`PartialConfig`], which the
//! core validates and merges. This module knows the structural keys only: `resilience` and
//! its parts (`find_part`); a registry's `overrides` is read by `registry`.
//!
//! Errors name the argument with its full path: a `TypeError` for a value of the wrong type, a
//! `ValueError` for one out of range (with the range from the table), for an unknown key
//! (listing the known ones; an unknown keyword argument is a `TypeError`, as Python's own), or
//! for a configuration the core refuses (`ConfigError::spelled(Spelling::Python)`).

use std::{fmt::Display, time::Duration};

use hullguard_core::{
    ConfigError,
    config::{
        OptionId, Part, PartialConfig, Section, Spelling, Value,
        convert::{self, Problem},
        options::{self, Kind, OptionSpec, RangeText},
    },
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    pybacked::PyBackedStr,
    types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple},
};

const PY: Spelling = Spelling::Python;

/// How an unknown key is refused: `PyTypeError::new_err` for keyword arguments (as Python
/// refuses them), `PyValueError::new_err` for the keys of a dict.
pub(crate) type Unknown = fn(String) -> PyErr;

pub(crate) fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A core configuration error (the option's path and range) as a `ValueError`.
pub(crate) fn config_err(e: ConfigError) -> PyErr {
    PyValueError::new_err(e.spelled(PY).to_string())
}

/// The core's wording of a range of `kind`. `OptionSpec::range` is the table's one renderer;
/// an argument that is no option (`weight`, `limit`, `n`) borrows a row with its own kind.
fn range_of(kind: Kind) -> RangeText {
    OptionSpec {
        kind,
        ..*OptionId::MaxConcurrent.spec()
    }
    .range(PY)
}

fn out_of_range(what: impl Display, v: &Bound<'_, PyAny>, problem: Problem) -> PyErr {
    let got = v.repr().map_or_else(|_| "?".into(), |r| r.to_string());
    PyValueError::new_err(format!("{what}; got {got} ({problem})"))
}

/// A Python number as `f64`; an `int` too large for a float is ±infinity (then "none" or out
/// of range, by the option's rule).
fn float(v: &Bound<'_, PyAny>) -> PyResult<f64> {
    let huge = || {
        Ok(if v.lt(0)? {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    };
    v.extract::<f64>().or_else(|_| huge())
}

fn is_int(v: &Bound<'_, PyAny>) -> bool {
    v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>()
}

fn is_number(v: &Bound<'_, PyAny>) -> bool {
    is_int(v) || v.is_instance_of::<PyFloat>()
}

fn wrong_type(kind: Kind, v: &Bound<'_, PyAny>, name: &dyn Display) -> PyErr {
    let (range, t) = (range_of(kind), type_name(v));
    PyTypeError::new_err(format!("{name} must be {range}, not {t}"))
}

fn refused(kind: Kind, v: &Bound<'_, PyAny>, name: &dyn Display) -> impl Fn(Problem) -> PyErr {
    move |p| out_of_range(format_args!("{name} must be {}", range_of(kind)), v, p)
}

/// `v` as a count of kind `kind` (an `int`, never a `bool`), called `name` in errors.
fn count(kind: Kind, v: &Bound<'_, PyAny>, name: &dyn Display) -> PyResult<u64> {
    if !is_int(v) {
        return Err(wrong_type(kind, v, name));
    }
    // Beyond i128 it is out of range either way.
    convert::count_in(v.extract().unwrap_or(i128::MAX), kind).map_err(refused(kind, v, name))
}

/// `v` as a duration of kind `kind` in float seconds, called `name` in errors.
fn duration(kind: Kind, v: &Bound<'_, PyAny>, name: &dyn Display) -> PyResult<Duration> {
    if !is_number(v) {
        return Err(wrong_type(kind, v, name));
    }
    convert::duration_from_secs(float(v)?, kind).map_err(refused(kind, v, name))
}

/// `v` as a value of an option of kind `kind`, called `name` in errors.
pub(crate) fn value(kind: Kind, v: &Bound<'_, PyAny>, name: &dyn Display) -> PyResult<Value> {
    match kind {
        Kind::Count { .. } => count(kind, v, name).map(Value::Count),
        Kind::Duration { .. } => duration(kind, v, name).map(Value::Duration),
        Kind::Number { .. } if is_number(v) => float(v).map(Value::Number),
        Kind::Bool if v.is_instance_of::<PyBool>() => v.is_truthy().map(Value::Bool),
        Kind::Choice(choices) if v.is_instance_of::<PyString>() => {
            let s = v.extract::<PyBackedStr>()?;
            let found = choices.iter().find(|c| **c == &*s);
            found
                .map(|c| Value::Choice(c))
                .ok_or_else(|| refused(kind, v, name)(Problem::OutOfRange))
        }
        _ => Err(wrong_type(kind, v, name)),
    }
}

/// An integer argument (`weight`, `limit`, `n`) in `min..=max`.
pub(crate) fn count_arg(v: &Bound<'_, PyAny>, name: &str, min: u64, max: u64) -> PyResult<u64> {
    count(Kind::Count { min, max }, v, &name)
}

/// A `timeout` argument in seconds by the rule of `queue_timeout` (0 = do not queue,
/// `math.inf` = no deadline; a positive value below 1 ns is refused). `None` → `None`: not
/// given, the bulkhead's `queue_timeout` (the core's null rule).
pub(crate) fn timeout_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    named_timeout_arg(v, "timeout")
}

/// [`timeout_arg`] for an argument called `name` (`apply_limits`' `queue_timeout`).
pub(crate) fn named_timeout_arg(
    v: Option<&Bound<'_, PyAny>>,
    name: &str,
) -> PyResult<Option<Duration>> {
    let kind = OptionId::QueueTimeout.spec().kind;
    v.filter(|v| !v.is_none())
        .map(|v| duration(kind, v, &name))
        .transpose()
}

/// `Bulkhead(...)` / `Registry(...)`'s arguments as one dict: the positional ones are the
/// bulkhead's positional options in table order (`options::positional`: `max_concurrent`,
/// `max_queue`, `queue_timeout`, `enabled`); the keyword ones as given.
pub(crate) fn arguments<'py>(
    what: &str,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let py = args.py();
    let d = kwargs.map_or_else(|| Ok(PyDict::new(py)), |k| k.copy())?;
    let most = options::positional().count();
    if args.len() > most {
        let n = args.len();
        let msg = format!("{what}() takes at most {most} positional arguments ({n} given)");
        return Err(PyTypeError::new_err(msg));
    }
    for (spec, v) in options::positional().zip(args.iter()) {
        if d.contains(spec.name)? {
            let msg = format!("{what}() got multiple values for argument {:?}", spec.name);
            return Err(PyTypeError::new_err(msg));
        }
        d.set_item(spec.name, v)?;
    }
    Ok(d)
}

/// Removes and returns the non-option argument `name` (`on_state_change`, `_clock`,
/// `overrides`) from `d`; `None` when absent or `None`.
pub(crate) fn take<'py>(d: &Bound<'py, PyDict>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    let v = d.get_item(name)?;
    if v.is_some() {
        d.del_item(name)?;
    }
    Ok(v.filter(|v| !v.is_none()))
}

/// Reads one object of options of `section` (`Section::Bulkhead`: a bulkhead or an override;
/// `Section::Registry`: a registry's, `max_keys` besides). `prefix` starts every message (an
/// override's `overrides["key"]: `). `None` follows the core's rule (`config::options`,
/// "Null values"; docs/design.md §7.2): "not given" (the default, or in an override the
/// defaults' value), except `call_timeout=None`, `resilience=None` and a part set to `None`,
/// which turn it off (also over defaults that set it). "No deadline" is `math.inf`, never
/// `None`.
pub(crate) fn parse(
    d: &Bound<'_, PyDict>,
    section: Section,
    prefix: &str,
    unknown: Unknown,
) -> PyResult<PartialConfig> {
    let mut p = PartialConfig::new();
    walk(&mut p, d, section, prefix, unknown)?;
    Ok(p)
}

fn walk(
    p: &mut PartialConfig,
    d: &Bound<'_, PyDict>,
    section: Section,
    prefix: &str,
    unknown: Unknown,
) -> PyResult<()> {
    let at = section.path();
    let sep = if at.is_empty() { "" } else { ": " };
    let sections = if section == Section::Registry {
        [Section::Bulkhead, Section::Registry]
    } else {
        [section, section]
    };
    for (k, v) in d.iter() {
        let key: PyBackedStr = k.extract().map_err(|_| {
            PyTypeError::new_err(format!("{prefix}{at}{sep}option names must be str"))
        })?;
        // The structural keys: `resilience` at the top level, its parts inside it.
        let nested = options::find_part(&key)
            .filter(|_| section == Section::Resilience)
            .or((at.is_empty() && *key == *"resilience").then_some(Section::Resilience));
        if let Some(part) = nested {
            nest(p, &v, part, prefix)?;
            continue;
        }
        let found = sections.iter().find_map(|s| options::find(*s, PY, &key));
        let spec = found.ok_or_else(|| {
            let known = options::known_names(section, PY);
            unknown(format!(
                "{prefix}{at}{sep}unknown option {:?} (known: {known})",
                &*key
            ))
        })?;
        if v.is_none() {
            // The core's rule: not given, except `call_timeout` (off).
            p.set_null(spec.id);
            continue;
        }
        let name = format!("{prefix}{}", spec.path(PY));
        let value = value(spec.kind, &v, &name)?;
        p.set(spec.id, value).map_err(|e| {
            let what = format_args!("{prefix}{}", e.spelled(PY));
            out_of_range(what, &v, Problem::OutOfRange)
        })?;
    }
    Ok(())
}

/// `resilience` or one of its parts: a dict (even `{}`) turns it on, `None` off (the core's
/// rule, `PartialConfig::set_null_part`).
fn nest(p: &mut PartialConfig, v: &Bound<'_, PyAny>, part: Section, prefix: &str) -> PyResult<()> {
    if v.is_none() {
        p.set_null_part(part);
        return Ok(());
    }
    let d = v.cast::<PyDict>().map_err(|_| {
        let (at, t) = (part.path(), type_name(v));
        PyTypeError::new_err(format!("{prefix}{at} must be a dict or None, not {t}"))
    })?;
    p.set_part(part, Part::On);
    walk(p, d, part, prefix, PyValueError::new_err)
}
