//! What the Rust-side runners of the scenario vectors share (docs/design.md §11): finding, parsing
//! and schema-checking the JSON files, the registry-override merge, and the layer-neutral
//! checks. The core runner (`tests/tests/vectors.rs`) and the C ABI runner
//! (`ffi/tests/vectors.rs`) keep only what drives their own layer.

use std::{
    collections::{BTreeMap, HashSet},
    fs,
    path::{Path, PathBuf},
};

use hullguard_core::{
    Config, GlobalCap, RegistryConfig,
    config::{
        OptionSpec, Part, PartialConfig, Section, Spelling, Value as OptionValue, convert,
        options::{self, Kind},
    },
};
pub use jsonschema::Validator;
use serde_json::{Map, Value, json};

/// `tests/vectors/`: the plain vectors, `policies/` below it, and `schema.json`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

/// The validator of `tests/vectors/schema.json`.
pub fn validator() -> Validator {
    let schema: Value =
        serde_json::from_str(&fs::read_to_string(dir().join("schema.json")).unwrap())
            .expect("schema.json parses");
    jsonschema::validator_for(&schema).expect("schema.json is a valid schema")
}

/// The vector files of `dir`, sorted (`schema.json` excluded).
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.ends_with("schema.json"))
        .collect();
    files.sort();
    files
}

/// Parses and validates every vector of `dir` in file order and hands each to `run`; checks
/// that each file is named after its vector and that names are unique across every `dir`
/// passed with the same `names`. Returns how many vectors there were.
pub fn for_each(
    dir: &Path,
    validator: &Validator,
    names: &mut HashSet<String>,
    mut run: impl FnMut(&Value),
) -> usize {
    let files = files(dir);
    for f in &files {
        let v: Value = serde_json::from_str(&fs::read_to_string(f).unwrap())
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
        assert!(names.insert(name), "{}: duplicate name", f.display());
        run(&v);
    }
    files.len()
}

/// One JSON object of options (`config`, `registry.defaults`, one of `registry.overrides`) as
/// the core's [`PartialConfig`]: every key is looked up in the core's option table in the
/// vector spelling (the Python names, durations as integer `…_ms`), every value converted by the
/// core's rules (`convert`). `resilience` holds the parts `adaptive` / `breaker` (an object
/// turns the part on, `null` turns it off) and `call_timeout_ms`. A `null` follows the core's
/// rule (`PartialConfig::set_null`).
///
/// # Errors
/// An unknown key (listing the known ones) or a bad value, naming the option and its range.
pub fn partial(v: &Value) -> Result<PartialConfig, String> {
    let mut p = PartialConfig::new();
    set_options(&mut p, Section::Bulkhead, object("", v)?)?;
    Ok(p)
}

fn object<'a>(path: &str, v: &'a Value) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("options {path:?} must be an object, not {v}"))
}

/// The keys of one object of `section` into `p`.
fn set_options(
    p: &mut PartialConfig,
    section: Section,
    obj: &Map<String, Value>,
) -> Result<(), String> {
    let path = section.path();
    for (k, x) in obj {
        if section == Section::Bulkhead && k == "resilience" {
            match x {
                Value::Null => p.set_null_part(Section::Resilience),
                _ => {
                    let r = object("resilience", x)?;
                    set_options(p, Section::Resilience, r)?;
                }
            }
            continue;
        }
        let part = options::find_part(k).filter(|_| section == Section::Resilience);
        if let Some(part) = part {
            match x {
                Value::Null => p.set_null_part(part),
                _ => {
                    let o = object(part.path(), x)?;
                    p.set_part(part, Part::On);
                    set_options(p, part, o)?;
                }
            }
            continue;
        }
        let Some(spec) = options::find(section, Spelling::Vector, k) else {
            return Err(format!(
                "unknown option {k:?} in {:?}; known: {}",
                if path.is_empty() { "config" } else { path },
                options::known_names(section, Spelling::Vector)
            ));
        };
        if x.is_null() {
            // The core's null rule: not given, except `call_timeout_ms` (off).
            p.set_null(spec.id);
        } else {
            set_option(p, spec, x)?;
        }
    }
    Ok(())
}

/// One option's JSON value, converted by the core's rules and checked by `PartialConfig::set`.
fn set_option(p: &mut PartialConfig, spec: &'static OptionSpec, x: &Value) -> Result<(), String> {
    let path = spec.path(Spelling::Vector);
    let bad = |why: &dyn std::fmt::Display| {
        format!(
            "{path} = {x}: {why} (want {})",
            spec.range(Spelling::Vector)
        )
    };
    let value = match spec.kind {
        Kind::Count { .. } => {
            let n = match (x.as_u64(), x.as_i64(), x.as_f64()) {
                (Some(n), _, _) => convert::count_in(i128::from(n), spec.kind),
                (None, Some(n), _) => convert::count_in(i128::from(n), spec.kind),
                (None, None, Some(f)) => convert::count_from_f64(f, spec.kind),
                _ => return Err(bad(&"not a number")),
            };
            OptionValue::Count(n.map_err(|e| bad(&e))?)
        }
        Kind::Duration { .. } => {
            // Integer ms; "infinite" is "none", which the core refuses for the options
            // without one (a null never reaches here: `set_options`).
            let ms = match x {
                Value::String(s) if s == "infinite" => f64::INFINITY,
                _ => x.as_f64().ok_or_else(|| bad(&"not a number"))?,
            };
            let d = convert::duration_from_millis(ms, spec.kind);
            OptionValue::Duration(d.map_err(|e| bad(&e))?)
        }
        Kind::Number { .. } => OptionValue::Number(x.as_f64().ok_or_else(|| bad(&"not a number"))?),
        Kind::Bool => OptionValue::Bool(x.as_bool().ok_or_else(|| bad(&"not a bool"))?),
        Kind::Choice(choices) => {
            let s = x.as_str().ok_or_else(|| bad(&"not a string"))?;
            let c = choices.iter().find(|c| **c == s);
            OptionValue::Choice(c.ok_or_else(|| bad(&"not a choice"))?)
        }
    };
    p.set(spec.id, value).map_err(|e| bad(&e))
}

/// A single bulkhead's `config` (absent: the defaults): [`partial`], then the core's
/// cross-option rules (`PartialConfig::to_config`).
///
/// # Errors
/// As [`partial`]; a configuration the core refuses.
pub fn config(v: Option<&Value>) -> Result<Config, String> {
    let p = match v {
        Some(v) => partial(v)?,
        None => PartialConfig::new(),
    };
    p.to_config().map_err(|e| e.to_string())
}

/// A vector's `registry`: `defaults` (with the registry's own `max_keys`) and one
/// [`PartialConfig`] per override, merged over the defaults by the core
/// (`RegistryConfig::from_partial`), and the `global` cap (docs/design.md §9.2).
///
/// # Errors
/// As [`partial`], naming `defaults` or the override's key; an unknown registry option; a
/// registry the core refuses; a `global` without integer `limit` and `max_queue`.
pub fn registry_config(r: &Value) -> Result<RegistryConfig, String> {
    let r = object("registry", r)?;
    let mut defaults = match r.get("defaults") {
        Some(d) => partial(d).map_err(|e| format!("defaults: {e}"))?,
        None => PartialConfig::new(),
    };
    let mut overrides = Vec::new();
    for (k, x) in r {
        match k.as_str() {
            "defaults" | "global" => {}
            "overrides" => {
                for (key, o) in object("overrides", x)? {
                    let p = partial(o).map_err(|e| format!("override {key:?}: {e}"))?;
                    overrides.push((key.clone(), p));
                }
            }
            other => {
                let Some(spec) = options::find(Section::Registry, Spelling::Vector, other) else {
                    let own: Vec<String> = options::options_in(Section::Registry)
                        .map(|o| format!("{:?}", o.spelled(Spelling::Vector).to_string()))
                        .collect();
                    return Err(format!(
                        "unknown registry option {other:?}; known: \"defaults\", \"overrides\", {}",
                        own.join(", ")
                    ));
                };
                set_option(&mut defaults, spec, x)?;
            }
        }
    }
    let mut rc = RegistryConfig::from_partial(&defaults, overrides).map_err(|e| e.to_string())?;
    // One cap over every key (docs/design.md §9.2).
    rc.global = match r.get("global") {
        None => None,
        Some(g) => {
            let n = |k: &str| {
                g.get(k)
                    .and_then(Value::as_u64)
                    .ok_or_else(|| format!("global.{k} must be a non-negative integer, not {g}"))
            };
            Some(GlobalCap {
                limit: n("limit")?,
                max_queue: n("max_queue")?,
            })
        }
    };
    Ok(rc)
}

/// A registry override merged key by key over the defaults (docs/design.md §7): top-level
/// keys replace; `resilience` and its `adaptive` / `breaker` objects merge one level deeper.
/// A `null` follows the core's null rule (docs/design.md §7.2): not given (the defaults' value
/// stays), except `resilience`, a part and `call_timeout_ms`, which it turns off. Call it with
/// `depth` 0.
pub fn merge(defaults: Option<&Value>, over: &Value, depth: usize) -> Value {
    let (Some(Value::Object(d)), Value::Object(o)) = (defaults, over) else {
        return over.clone();
    };
    let mut m = d.clone();
    for (k, v) in o {
        let switch = matches!(
            k.as_str(),
            "resilience" | "adaptive" | "breaker" | "call_timeout_ms"
        );
        if v.is_null() && !switch {
            continue;
        }
        let deeper = match depth {
            0 => k == "resilience",
            1 => k == "adaptive" || k == "breaker",
            _ => false,
        };
        let merged = if deeper {
            merge(d.get(k), v, depth + 1)
        } else {
            v.clone()
        };
        m.insert(k.clone(), merged);
    }
    Value::Object(m)
}

/// A step's `settles`: acquire id → how it settled (empty when omitted).
pub fn settles(step: &Value) -> BTreeMap<String, String> {
    step.get("settles")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Every key of `want` (recursively for objects) equals `got`'s.
pub fn subset(ctx: &str, want: &Value, got: &Value) {
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

/// Vectors every runner must fail on, so it can fail at all: a wrong `settles`, an unknown op,
/// and wrong policy expectations (state, events, circuit stats, a fast-fail that does not
/// happen, a breaker that is not there).
pub fn must_fail() -> Vec<Value> {
    let wrong = json!({"name": "w", "config": {"max_concurrent": 1},
        "steps": [{"op": "acquire", "id": "a", "expect": "granted"},
                  {"op": "release", "id": "a", "settles": {"a": "granted"}}]});
    let unknown = json!({"name": "u", "steps": [{"op": "frobnicate"}]});
    let breaker = json!({"max_concurrent": 2,
        "resilience": {"breaker": {"failure_threshold": 2, "open_duration_ms": 100}}});
    let trip_once = |then: Value| {
        json!({"name": "p", "config": breaker, "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "record_outcome", "id": "a", "outcome": "failure"},
            then]})
    };
    let wrong_state = trip_once(json!({"op": "expect_state", "state": "open"}));
    let wrong_events = trip_once(json!({"op": "expect_events", "events": [["closed", "open"]]}));
    let wrong_fast_fail =
        trip_once(json!({"op": "try_acquire", "id": "b", "expect": "circuit_open"}));
    let wrong_circuit =
        trip_once(json!({"op": "stats", "expect": {"circuit": {"consecutive_failures": 0}}}));
    let no_breaker = json!({"name": "n", "config": {"max_concurrent": 1},
        "steps": [{"op": "stats", "expect": {"circuit": {"state": "closed"}}}]});
    vec![
        wrong,
        unknown,
        wrong_state,
        wrong_events,
        wrong_fast_fail,
        wrong_circuit,
        no_breaker,
    ]
}

/// One bulkhead's counts as a runner reads them from its layer's stats.
pub struct Counts {
    pub active: u64,
    pub queued: u64,
    pub granted_unclaimed: u64,
    pub available: i64,
    pub limit: u64,
}

/// The check every Rust-side runner makes after each step, against its *own* records: for
/// every bulkhead (`all`: key, counts, the stats as text for messages) `active` is what the
/// runner holds of it, `queued` its pending acquires, no grant is left unclaimed, and I2 holds
/// with the runner's count (`available + held == limit`); no permit or waiter sits in a bulkhead
/// missing from the stats.
pub fn check_held(
    ctx: &str,
    mut held: BTreeMap<Option<String>, u64>,
    mut queued: BTreeMap<Option<String>, u64>,
    all: Vec<(Option<String>, Counts, String)>,
) {
    for (key, s, text) in all {
        let h = held.remove(&key).unwrap_or(0);
        let q = queued.remove(&key).unwrap_or(0);
        assert_eq!(
            s.active, h,
            "{ctx}: active of {key:?} vs the {h} permits held: {text}"
        );
        assert_eq!(
            s.queued, q,
            "{ctx}: queued of {key:?} vs the {q} pending: {text}"
        );
        assert_eq!(
            s.granted_unclaimed, 0,
            "{ctx}: the runner claims every grant: {text}"
        );
        assert_eq!(
            s.available + h as i64,
            s.limit as i64,
            "{ctx}: I2 with the runner's count ({h} held) for {key:?}: {text}"
        );
    }
    held.retain(|_, w| *w > 0);
    assert!(
        held.is_empty() && queued.is_empty(),
        "{ctx}: held {held:?} / queued {queued:?} in bulkheads missing from the stats"
    );
}

/// One bulkhead's budget counts as a runner reads them from its layer's stats
/// (docs/design.md §4.5).
pub struct BudgetCounts {
    pub in_use: u64,
    pub available: i64,
    pub limit: u64,
    pub granted_unclaimed: u64,
    pub reserved_total: u64,
    pub overrun_total: u64,
    pub consumed_total: u64,
    pub refunded_total: u64,
    pub overrun_held: u64,
}

/// The budget check every Rust-side runner makes after each step, against its own record of
/// the units it holds of `key`'s bulkhead (`(units, over)`: each grant's cost less what it
/// refunded, and what its usage reports held past the budget): `in_use` and `overrun_held` are
/// those, no units are left unclaimed, the budget's I2 holds with the runner's count
/// (`available + units == limit`), and the settlement identity holds exactly (C30:
/// `reserved + overrun_total == consumed + refunded + in_use + overrun_held`). A bulkhead
/// without a budget holds no units.
pub fn check_budget(
    ctx: &str,
    key: &Option<String>,
    (units, over): (u64, u64),
    budget: Option<BudgetCounts>,
    text: &str,
) {
    let Some(b) = budget else {
        assert_eq!(
            (units, over),
            (0, 0),
            "{ctx}: {key:?} has no budget but the runner holds {units} (+{over}) units"
        );
        return;
    };
    assert_eq!(
        b.overrun_held, over,
        "{ctx}: overrun_held of {key:?} vs the {over} units held past the budget: {text}"
    );
    assert_eq!(
        b.in_use, units,
        "{ctx}: budget in_use of {key:?} vs the {units} units held: {text}"
    );
    assert_eq!(b.granted_unclaimed, 0, "{ctx}: unclaimed units: {text}");
    assert_eq!(
        b.available + units as i64,
        b.limit as i64,
        "{ctx}: the budget's I2 with the runner's count ({units} held) for {key:?}: {text}"
    );
    assert_eq!(
        b.reserved_total + b.overrun_total,
        b.consumed_total + b.refunded_total + b.in_use + b.overrun_held,
        "{ctx}: C30 settlement identity for {key:?}: {text}"
    );
}
