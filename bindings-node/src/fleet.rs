//! `NativeFleet`: one fleet bulkhead's state (`hullguard_fleet::FleetCore`, docs/design.md §16)
//! for the facade's `FleetBulkhead` (fleet.js): marshalling only. The lease, its deadline, the
//! block and every admission decision are the crate's and the core's; the options are read by
//! the crate's table (`FLEET_OPTIONS`, `FleetConfig::set` / `validate`); admissions go through
//! the local bulkhead's own handle (`NativeBulkhead::from_arc` over `FleetCore::bulkhead()`), so
//! a fleet bulkhead admits, queues, refuses and counts exactly as a local one.
//!
//! With `budget` the crate leases a second dimension, the fleet budget's units, in a second
//! lease table of the pool: the local core's budget is this process's block of it (a cost above
//! the block waits for it to grow; above the fleet budget it is refused `budget_limit`). What
//! stays local (docs/design.md §16.10) is built exactly as a local `Bulkhead`'s: the class
//! table (`classes`, `reserve`, `lending`, `shed`) and `events` are read by the local
//! bulkhead's own parser (`options::bulkhead`) and handed to `FleetCore::with_local` with the
//! same observer (`settled::Emitter`), so classes partition this process's block and the
//! admission events reach the facade's emitter as a local bulkhead's do.
//!
//! The driver loop is the facade's (an async loop on the JS thread, with the user's Redis
//! client): `step()` says what to send (the whole command as strings) or how long to park;
//! `complete(reply)` / `fail(message)` hand the outcome back. Waiting never blocks the thread:
//! on a park `step()` registers the **bell** — a waker of the isolate's settled queue under a
//! facade id — with `FleetCore::register_demand`, and the facade arms an unref'd timer. Why not
//! `FleetCore::wait` on the libuv pool (an `AsyncTask`), nor a threadsafe function: the bell is
//! only ever rung by an admission that finds the block short, and every admission on a Node
//! bulkhead runs on its isolate's thread inside a native call that ends with a flush of the
//! settled queue (`settled`). So the ring reaches the facade at the end of that very call, as a
//! queued waiter's grant does — no pool thread held for a whole beat (4 by default, shared with
//! fs, dns and crypto), no threadsafe function, nothing that keeps the process alive, and no
//! cross-thread wake to reason about. `FleetCore::wait`'s rule against spinning is kept here:
//! a park that the bell ended starts a quiet period of `minSyncIntervalMs` during which only
//! the timer (or close) ends a park (`rung`), and a refusal between the step's poll and the
//! bell's registration (only possible inside that flush) ends the park at once.
//!
//! Units: counts are numbers, durations ms. Thread-safety: the object belongs to its isolate.

use std::{cell::Cell, fmt::Display, sync::Arc, task::Waker, time::Duration};

use hullguard_core::{
    LimitsSnapshot,
    config::{
        Spelling,
        class_options::{self, ClassSection, TABLE_KEYS},
        convert::count_from_f64,
    },
};
use hullguard_fleet::{
    Dimension, FleetConfig, FleetCore, FleetError, LeaseStats, Local, PoolName, RawReply, Step,
    cli,
    options::{FLEET_OPTIONS, FleetKind, FleetOption, FleetValue, NOT_FLEET_WIDE, node_name},
    protocol::{FN_STATS, FN_VERSION, Field, PoolStats, SetLimitReply},
    script::{LIB_VERSION, LIBRARY, eval_source},
};
use napi::{
    Env, Error, JsValue, Result, ValueType,
    bindgen_prelude::{FromNapiValue, JsObjectValue, Null, Object, Unknown},
};
use napi_derive::napi;

use crate::{
    bulkhead::NativeBulkhead,
    marshal::{number, range_error, string, type_error, type_name},
    options, settled, stats,
};

// ----- options --------------------------------------------------------------------------------

/// `camelCase` → `snake_case` (a Node key looked up in the crate's `NOT_FLEET_WIDE`).
fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a local bulkhead's option `key` (Node spelling) is refused by the crate as one that
/// cannot be fleet-wide (`NOT_FLEET_WIDE`: `rates`, `resilience`, `startLimit` …), and why.
fn not_fleet_wide(key: &str) -> Option<&'static str> {
    let snake = snake(key);
    let base = snake.strip_suffix("_ms").unwrap_or(&snake);
    NOT_FLEET_WIDE
        .iter()
        .find(|(n, _)| *n == snake || *n == base)
        .map(|(_, why)| *why)
}

/// Whether `key` is one of what stays local (docs/design.md §16.10), read by the local
/// bulkhead's parser (`options::bulkhead`): `events`, and the class table's keys (the core's
/// `TABLE_KEYS` and table options: `classes`, `reserve`, `lending`, `shed`) that the crate does
/// not refuse (`rates` is: each process would refill its own).
fn is_local_key(key: &str) -> bool {
    let table = TABLE_KEYS.contains(&key)
        || class_options::find(ClassSection::Table, Spelling::Node, key).is_some();
    (key == "events" || table) && not_fleet_wide(key).is_none()
}

/// The option list of the "unknown option" message, in the Node spelling: the crate's table,
/// then what stays local.
fn known() -> String {
    let table_options = class_options::options_in(ClassSection::Table)
        .map(|o| o.spelled(Spelling::Node).to_string());
    let local = TABLE_KEYS
        .iter()
        .map(|k| (*k).to_owned())
        .chain(table_options)
        .chain(["events".to_owned()])
        .filter(|k| is_local_key(k));
    let names: Vec<String> = FLEET_OPTIONS
        .iter()
        .map(node_name)
        .chain(local)
        .map(|n| format!("{n:?}"))
        .collect();
    names.join(", ")
}

/// A key that is no row of the table (in the Node spelling): a `TypeError` naming it — spelled
/// the snake_case way, a local bulkhead's option that cannot be fleet-wide (the crate's reason),
/// or unknown (listing the known ones).
fn refused_key(env: &Env, key: &str) -> Error {
    if let Some(row) = FLEET_OPTIONS.iter().find(|o| o.name == key) {
        return type_error(
            env,
            format_args!(
                "option {key:?} is spelled {:?} in Node (durations in ms)",
                node_name(row)
            ),
        );
    }
    if let Some(why) = not_fleet_wide(key) {
        return type_error(
            env,
            format_args!("option {key:?} is not supported by a fleet bulkhead: {why}"),
        );
    }
    type_error(
        env,
        format_args!("unknown option {key:?} (known: {})", known()),
    )
}

/// The crate's option names in its messages, spelled the Node way (`lease_ttl` → `leaseTtlMs`,
/// `apply_limits` → `applyLimits`, `budget=…` → `{budget: …}`).
fn node_spelled(message: &str) -> String {
    let mut rows: Vec<&FleetOption> = FLEET_OPTIONS
        .iter()
        .filter(|o| o.name.contains('_'))
        .collect();
    rows.sort_by_key(|o| std::cmp::Reverse(o.name.len()));
    rows.iter()
        .fold(message.to_owned(), |m, o| m.replace(o.name, &node_name(o)))
        .replace("apply_limits", "applyLimits")
        .replace("budget=…", "{budget: …}")
}

/// A crate error as JS throws it: a bad option or name a `RangeError` in the Node spelling
/// (a class table the configuration does not allow too, in the core's Node spelling),
/// anything else an `Error`.
fn fleet_error(env: &Env, e: FleetError) -> Error {
    match &e {
        FleetError::Option { option, message } => {
            let name = FLEET_OPTIONS
                .iter()
                .find(|o| o.name == *option)
                .map_or_else(|| (*option).to_owned(), node_name);
            range_error(env, format_args!("{name}: {}", node_spelled(message)))
        }
        FleetError::Config(c) => range_error(env, c.spelled(Spelling::Node)),
        FleetError::Name(_) => range_error(env, &e),
        _ => Error::from_reason(e.to_string()),
    }
}

/// A duration in ms for `key`, within the row's range.
fn millis(env: &Env, v: Unknown, key: &str, min: Duration, max: Duration) -> Result<Duration> {
    let range = || {
        format!(
            "{key} must be a duration in ms in {} ..= {}",
            min.as_millis(),
            max.as_millis()
        )
    };
    let x = number(env, v, range())?;
    Duration::try_from_secs_f64(x / 1000.0)
        .ok()
        .filter(|d| (min..=max).contains(d))
        .ok_or_else(|| range_error(env, format_args!("{}, got {x}", range())))
}

/// A count for `key`: a safe integer within the row's range.
fn int(env: &Env, v: Unknown, key: &str, min: u64, max: u64) -> Result<u64> {
    let range = || format!("{key} must be an integer in {min} ..= {max}");
    let x = number(env, v, range())?;
    count_from_f64(x, hullguard_core::config::options::Kind::Count { min, max })
        .map_err(|_| range_error(env, format_args!("{}, got {x}", range())))
}

/// `new FleetBulkhead(client, options)`'s options, split the crate's way (docs/design.md
/// §16.10): the fleet's, read by the crate's table (`FLEET_OPTIONS`) — `pool` (required) and
/// every other key by its row (Node's spelling: `maxConcurrent`, `budget`, `leaseTtlMs` …),
/// range-checked by its kind, set with `FleetConfig::set` (its camelCase lookup), then
/// `validate()` (the relations: `beatMs` at most half of `leaseTtlMs`, …); and what stays local
/// — `classes`, `reserve`, `lending`, `shed`, `events` — handed, as an object of those keys
/// only, to the local `Bulkhead`'s parser (`options::bulkhead`: its class table and `events`;
/// its errors are a local bulkhead's, `classes[1].priority must be …`). An unknown key, a
/// snake_case spelling, or a local bulkhead's option that cannot be fleet-wide (`rates`,
/// `resilience`, `adaptive`, `startLimit` …) is a `TypeError` naming it; a value of the wrong
/// type a `TypeError`; out of range, a bad pool or holder a `RangeError`. `undefined` /
/// `null`: not given.
fn fleet_options(env: &Env, opts: Unknown) -> Result<(FleetConfig, options::BulkheadOptions)> {
    let mut pool = None;
    let mut rest = Vec::new();
    let mut local = Object::new(env)?;
    for (key, v) in options::entries(env, opts, "options must be an object")? {
        if is_local_key(&key) {
            local.set(key.as_str(), v)?;
            continue;
        }
        let Some(v) = options::not_null(v)? else {
            if FLEET_OPTIONS.iter().any(|o| node_name(o) == key) {
                continue;
            }
            return Err(refused_key(env, &key));
        };
        if key == "pool" {
            pool = Some(string(env, v, "pool")?);
        } else {
            rest.push((key, v));
        }
    }
    let pool = pool.ok_or_else(|| {
        type_error(
            env,
            "pool is required: the name every process sharing the limit opens (1..=64 of [A-Za-z0-9_.:-])",
        )
    })?;
    let mut cfg = FleetConfig::new(PoolName::new(&pool).map_err(|e| range_error(env, e))?);
    for (key, v) in rest {
        let Some(row) = FLEET_OPTIONS.iter().find(|o| node_name(o) == key) else {
            return Err(refused_key(env, &key));
        };
        let text;
        let value = match row.kind {
            FleetKind::Int { min, max } => FleetValue::Int(int(env, v, &key, min, max)?),
            FleetKind::Duration { min, max } => {
                FleetValue::Duration(millis(env, v, &key, min, max)?)
            }
            FleetKind::Text => {
                text = string(env, v, &key)?;
                FleetValue::Str(&text)
            }
        };
        cfg.set(&key, value).map_err(|e| fleet_error(env, e))?;
    }
    cfg.validate().map_err(|e| fleet_error(env, e))?;
    // What stays local, by the local bulkhead's parser (its configuration part is empty and
    // unused: the crate builds the local core's from the fleet's options).
    let local = options::bulkhead(env, local.to_unknown())?;
    Ok((cfg, local))
}

// ----- replies --------------------------------------------------------------------------------

/// One integer of a reply: a number, or a numeric string (a client that decodes integers as
/// strings).
fn reply_int(v: &Unknown) -> Result<Option<i64>> {
    Ok(match v.get_type()? {
        ValueType::Number => {
            let x = v.coerce_to_number()?.get_double()?;
            (x.fract() == 0.0 && x.abs() < 9.007_199_254_740_992e15).then_some(x as i64)
        }
        ValueType::String => crate::marshal::js_string(v)?.trim().parse().ok(),
        _ => None,
    })
}

/// A reply as the client resolved it: an integer, or an array of them; else what it was.
fn raw_reply(v: &Unknown) -> Result<std::result::Result<RawReply, String>> {
    if let Some(n) = reply_int(v)? {
        return Ok(Ok(RawReply::Int(n)));
    }
    if v.is_array()? {
        let a = v.coerce_to_object()?;
        let n = a.get_array_length()?;
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            let x: Unknown = a.get_element(i)?;
            match reply_int(&x)? {
                Some(n) => out.push(n),
                None => {
                    return Ok(Err(format!(
                        "redis protocol: element {i} of the reply is a {}, not an integer",
                        type_name(&x)?
                    )));
                }
            }
        }
        return Ok(Ok(RawReply::Ints(out)));
    }
    Ok(Err(format!(
        "redis protocol: the reply is a {}, not an integer or an array",
        type_name(v)?
    )))
}

/// A reply of mixed integers and strings (`hg_stats`); Buffers are read as UTF-8 strings.
fn fields(env: &Env, v: &Unknown) -> Result<Vec<Field>> {
    if !v.is_array()? {
        return Err(Error::from_reason(format!(
            "redis protocol: hg_stats answered a {}",
            type_name(v)?
        )));
    }
    let a = v.coerce_to_object()?;
    let n = a.get_array_length()?;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let x: Unknown = a.get_element(i)?;
        let field = match x.get_type()? {
            ValueType::Number => Field::Int(reply_int(&x)?.unwrap_or_default()),
            ValueType::String => Field::Text(crate::marshal::js_string(&x)?),
            _ if x.is_buffer()? => {
                let b = <napi::bindgen_prelude::Buffer as FromNapiValue>::from_unknown(x)?;
                Field::Text(String::from_utf8_lossy(&b).into_owned())
            }
            _ => {
                return Err(type_error(
                    env,
                    format_args!("redis protocol: hg_stats field {i} is a {}", type_name(&x)?),
                ));
            }
        };
        out.push(field);
    }
    Ok(out)
}

// ----- the object -----------------------------------------------------------------------------

/// What the driver does next: send `args` (the whole command) and hand its outcome to
/// `complete` / `fail`; or park for at most `waitMs` (0: step again now). `null` from `step()`:
/// closed, stop.
#[napi(object)]
pub struct FleetStep {
    pub args: Option<Vec<String>>,
    pub wait_ms: Option<f64>,
}

/// The library's commands for this pool: `check` (`FCALL_RO hg_version 1 <key>`, which answers
/// `version` when the library is loaded), `load` (`FUNCTION LOAD REPLACE <source>`), and for a
/// server whose ACL refuses `FUNCTION` (`NOPERM`), `loadScript` (`SCRIPT LOAD <the library as
/// one EVAL script>`, whose reply is the SHA1 to give `useScript`).
#[napi(object)]
pub struct FleetLibrary {
    pub check: Vec<String>,
    pub load: Vec<String>,
    pub load_script: Vec<String>,
    pub version: f64,
}

/// `applyLimits()`'s commands (validated) and what they set: one `hg_set_limit` per value
/// given, the limit's first, then the budget's (each lease table keeps its own revision). Send
/// each in order, then hand the replies, in the same order, to `limitsApplied` with
/// `revision`, `limit` and `budget`.
#[napi(object)]
pub struct FleetLimitsCommand {
    pub commands: Vec<Vec<String>>,
    pub revision: f64,
    /// The fleet limit to set (`undefined`: not given).
    pub limit: Option<f64>,
    /// The fleet budget to set, units (`undefined`: not given).
    pub budget: Option<f64>,
}

/// `applyLimits()`' result: `applied` whether every value given was installed (false: a
/// revision as new or newer is in force in its lease table); `revision` the revision in force
/// (the limit's table's, or the budget's when only `budget` was given); `limit` / `budget` the
/// fleet limit / fleet budget in force (`undefined` when not given: the facade answers `null`).
#[napi(object)]
pub struct FleetLimitsResult {
    pub applied: bool,
    pub revision: f64,
    pub limit: Option<f64>,
    pub budget: Option<f64>,
}

/// One fleet bulkhead (see the module docs).
#[napi]
pub struct NativeFleet {
    core: Arc<FleetCore>,
    bell: Waker,
    /// Until when (the core's clock, ns) a park ignores the bell.
    quiet_until: Cell<u64>,
    min_interval: Duration,
    ttl: Duration,
    /// The library's EVAL script's SHA1 once `FUNCTION` was refused (`useScript`).
    script: std::cell::RefCell<Option<String>>,
    /// The class names of its class table (index = class; empty without classes).
    names: std::rc::Rc<[Option<String>]>,
    /// Whether admission events were asked for (`events: true`).
    events: bool,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A park's length in whole ms, rounded up (a timer never fires before the time it was asked
/// for), at least 1.
fn park_ms(d: Duration) -> f64 {
    (d.as_nanos().div_ceil(1_000_000).max(1)) as f64
}

fn message(e: impl Display) -> String {
    e.to_string()
}

#[napi]
impl NativeFleet {
    /// `new FleetBulkhead(client, options)`: the options (see `fleet_options`); `bell` is the
    /// facade id the bell reports (one of its own, held for the bulkhead's life); `emitter` the
    /// facade emitter the local core's events go to (a local `Bulkhead`'s `emitter`: admission
    /// events with `events: true`). Throws `TypeError` / `RangeError` naming a bad option (a
    /// class table the options do not allow: the core's `RangeError`).
    #[napi(constructor)]
    pub fn new(env: Env, options: Unknown, bell: u32, emitter: u32) -> Result<Self> {
        let (cfg, mut local) = fleet_options(&env, options)?;
        let observer = Arc::new(settled::Emitter {
            id: emitter,
            events: local.events,
        });
        let (core, names) = match local.table.as_mut() {
            None => (
                FleetCore::with_local(
                    &cfg,
                    None,
                    Local {
                        classes: None,
                        observer: Some(observer),
                    },
                ),
                Vec::new(),
            ),
            Some(b) => {
                let names = (0..b.len())
                    .map(|i| b.name_of(i as u16).map(str::to_owned))
                    .collect();
                let t = b.table();
                let core = FleetCore::with_local(
                    &cfg,
                    None,
                    Local {
                        classes: Some(&t),
                        observer: Some(observer),
                    },
                );
                (core, names)
            }
        };
        let core = core.map_err(|e| fleet_error(&env, e))?;
        Ok(NativeFleet {
            core: Arc::new(core),
            bell: settled::waker_of(bell),
            quiet_until: Cell::new(0),
            min_interval: cfg.min_sync_interval,
            ttl: cfg.lease_ttl,
            script: std::cell::RefCell::new(None),
            names: std::rc::Rc::from(names),
            events: local.events,
        })
    }

    /// A handle on the local bulkhead the lease sets the limit (and the budget) of: every
    /// admission goes there, by class name or index as on a local classed bulkhead.
    #[napi]
    pub fn bulkhead(&self) -> NativeBulkhead {
        let mut nb = NativeBulkhead::from_arc(Arc::clone(self.core.bulkhead()), None);
        nb.names = std::rc::Rc::clone(&self.names);
        nb.events = self.events;
        nb
    }

    /// The driver's next step (see `FleetStep`); on a park the bell is registered unless in a
    /// quiet period (then the park is at most what is left of it).
    #[napi]
    pub fn step(&self, env: &Env) -> Result<Option<FleetStep>> {
        let step = self.core.step();
        let bh = self.core.bulkhead();
        let shorts = self.core.shorts_total();
        let out = match step {
            Step::Closed => None,
            Step::Send(command) => Some(FleetStep {
                args: Some(command.args()),
                wait_ms: None,
            }),
            Step::Wait(d) => {
                let quiet = self.quiet_until.get().saturating_sub(bh.now_ns());
                let d = if quiet > 0 {
                    d.min(Duration::from_nanos(quiet))
                } else {
                    self.core.register_demand(&self.bell);
                    d
                };
                Some(FleetStep {
                    args: None,
                    wait_ms: Some(park_ms(d)),
                })
            }
        };
        // What the step installed may have granted or refused waiters.
        settled::flush(env)?;
        Ok(match out {
            // A refusal during that flush, before the park: step again, quietly.
            Some(FleetStep {
                wait_ms: Some(_), ..
            }) if self.core.shorts_total() != shorts => {
                self.rung();
                Some(FleetStep {
                    args: None,
                    wait_ms: Some(0.0),
                })
            }
            out => out,
        })
    }

    /// The bell ended a park: a quiet period of `minSyncIntervalMs` starts.
    #[napi]
    pub fn rung(&self) {
        let now = self.core.bulkhead().now_ns();
        self.quiet_until
            .set(now.saturating_add(ns(self.min_interval)));
    }

    /// The reply to the command `step()` returned, as the client resolved it (a number or an
    /// array of numbers; anything else is counted as an error).
    #[napi]
    pub fn complete(&self, env: &Env, reply: Unknown) -> Result<()> {
        match raw_reply(&reply)? {
            Ok(r) => self.core.complete(r),
            Err(e) => self.core.fail(&e),
        }
        settled::flush(env)
    }

    /// The command `step()` returned failed (the client's error, or no reply in time).
    #[napi]
    pub fn fail(&self, env: &Env, message: String) -> Result<()> {
        self.core.fail(&message);
        settled::flush(env)
    }

    /// Closes: queued waiters are refused `shutdown` (calls in flight finish), the next step is
    /// `null`. Idempotent.
    #[napi]
    pub fn close(&self, env: &Env) -> Result<()> {
        self.core.close();
        settled::flush(env)
    }

    /// After `close()`, once the driver stopped: the next release to send, or `null` once
    /// there is none. Each lease's release is handed out once (the permits', then the
    /// budget's): send it, hand its outcome to `released` / `fail`, and ask again.
    #[napi]
    pub fn release_command(&self, env: &Env) -> Result<Option<Vec<String>>> {
        let c = self.core.release_command();
        settled::flush(env)?;
        Ok(c.map(|c| c.args()))
    }

    /// The last release's reply (a fenced one is counted in `releasesFencedTotal`).
    #[napi]
    pub fn released(&self, reply: Unknown) -> Result<()> {
        if let Ok(r) = raw_reply(&reply)? {
            self.core.released(&r);
        }
        Ok(())
    }

    /// The library's commands (see `FleetLibrary`).
    #[napi]
    pub fn library(&self) -> FleetLibrary {
        FleetLibrary {
            check: vec![
                "FCALL_RO".into(),
                FN_VERSION.into(),
                "1".into(),
                self.core.keys().0[0].clone(),
            ],
            load: vec![
                "FUNCTION".into(),
                "LOAD".into(),
                "REPLACE".into(),
                LIBRARY.into(),
            ],
            load_script: vec!["SCRIPT".into(), "LOAD".into(), eval_source()],
            version: LIB_VERSION as f64,
        }
    }

    /// From now on the library runs as one script (`EVALSHA sha`): the server's ACL refuses
    /// `FUNCTION` (the `redis` crate transport's fallback).
    #[napi]
    pub fn use_script(&self, sha: String) {
        self.script.replace(Some(sha));
    }

    /// `args` as this bulkhead sends them: an `FCALL` / `FCALL_RO` of the library as
    /// `EVALSHA <sha> <numkeys> <keys…> <function> <argv…>` once `useScript` was called (the
    /// script dispatches on its first argument), anything else unchanged.
    #[napi]
    pub fn wire(&self, args: Vec<String>) -> Vec<String> {
        let script = self.script.borrow();
        let (Some(sha), Some(cmd)) = (script.as_ref(), args.first()) else {
            return args;
        };
        if !matches!(cmd.as_str(), "FCALL" | "FCALL_RO") || args.len() < 3 {
            return args;
        }
        let numkeys: usize = args[2].parse().unwrap_or(0);
        let keys_end = (3 + numkeys).min(args.len());
        let mut out = Vec::with_capacity(args.len() + 1);
        out.extend(["EVALSHA".to_owned(), sha.clone(), args[2].clone()]);
        out.extend(args[3..keys_end].iter().cloned());
        out.push(args[1].clone());
        out.extend(args[keys_end..].iter().cloned());
        out
    }

    /// Whether the library runs as a script (`useScript`).
    #[napi(getter)]
    pub fn scripted(&self) -> bool {
        self.script.borrow().is_some()
    }

    /// `applyLimits({revision, limit, budget})`'s commands (see `FleetLimitsCommand`), read by
    /// the local bulkhead's parser (`options::limits`) and validated by the crate: only `limit`
    /// (0 ..= 2^32) and `budget` (1 ..= 2^32, a fleet bulkhead opened with `budget` only) may
    /// be set, at least one of them; `revision` 1 ..= 2^53 − 1. A `TypeError` naming `budget`
    /// without a fleet budget, the other fields (`maxQueue`, `queueTimeoutMs`, `queueDelay`:
    /// `limits`; `reserve`, `rates` by name), neither value (`limit`); a `RangeError` naming a
    /// value out of range.
    #[napi]
    pub fn apply_limits_command(&self, env: &Env, limits: Unknown) -> Result<FleetLimitsCommand> {
        let (snap, reserve, rates) = options::limits(env, limits)?;
        if reserve.is_some() || rates.is_some() {
            let (what, why) = if reserve.is_some() {
                (
                    "reserve",
                    "the class table is this process's, set when the bulkhead is built",
                )
            } else {
                ("rates", not_fleet_wide("rates").unwrap_or_default())
            };
            return Err(type_error(
                env,
                format_args!(
                    "{what}: not supported by a fleet bulkhead ({why}); applyLimits sets the \
                     fleet limit and budget: {{revision, limit, budget}}"
                ),
            ));
        }
        let commands = self.core.apply_limits(&snap).map_err(|e| match &e {
            // What the call cannot set (not a value out of range): a TypeError.
            FleetError::Option { option, message }
                if (*option == "budget" && !self.core.has_budget())
                    || *option == "limits"
                    || (*option == "limit" && snap.limit.is_none()) =>
            {
                type_error(env, format_args!("{option}: {}", node_spelled(message)))
            }
            _ => fleet_error(env, e),
        })?;
        Ok(FleetLimitsCommand {
            commands: commands.iter().map(|c| c.args()).collect(),
            revision: snap.revision as f64,
            limit: snap.limit.map(|l| l as f64),
            budget: snap.budget.map(|b| b as f64),
        })
    }

    /// The replies to `applyLimitsCommand`'s commands, in their order (an array), for its
    /// `revision`, `limit` and `budget`: the result (see `FleetLimitsResult`), each value
    /// remembered when applied (set again if the pool loses its state). Throws an `Error` for
    /// a reply of another shape or count.
    #[napi]
    pub fn limits_applied(
        &self,
        revision: f64,
        limit: Option<f64>,
        budget: Option<f64>,
        replies: Unknown,
    ) -> Result<FleetLimitsResult> {
        let mut raw = Vec::new();
        if replies.is_array()? {
            let a = replies.coerce_to_object()?;
            for i in 0..a.get_array_length()? {
                let x: Unknown = a.get_element(i)?;
                raw.push(raw_reply(&x)?.map_err(Error::from_reason)?);
            }
        }
        let mut snap = LimitsSnapshot::new(revision as u64);
        snap.limit = limit.map(|l| l as u64);
        snap.budget = budget.map(|b| b as u64);
        let r = self
            .core
            .limits_applied(&snap, &raw)
            .map_err(|e| Error::from_reason(message(e)))?;
        // The revision in force: the limit's table's, else the budget's.
        let rev = |x: Option<SetLimitReply>| x.map(|x| x.rev as f64);
        Ok(FleetLimitsResult {
            applied: r.applied(),
            revision: rev(r.limit).or(rev(r.budget)).unwrap_or(revision),
            limit: r.limit.map(|x| x.limit as f64),
            budget: r.budget.map(|x| x.limit as f64),
        })
    }

    /// The read-only command that reads the pool's lease table of `dimension` (`hg_stats`):
    /// `'permits'` (default) or `'budget'` (a `TypeError` without a fleet budget, or for
    /// another name).
    #[napi]
    pub fn pool_stats_command(&self, env: &Env, dimension: Option<String>) -> Result<Vec<String>> {
        let d = match dimension.as_deref() {
            None | Some("permits") => Dimension::Permits,
            Some("budget") if self.core.has_budget() => Dimension::Budget,
            Some("budget") => {
                return Err(type_error(
                    env,
                    "dimension: 'budget' needs a fleet budget (open the bulkhead with {budget: …})",
                ));
            }
            Some(other) => {
                return Err(type_error(
                    env,
                    format_args!("dimension must be 'permits' or 'budget', got {other:?}"),
                ));
            }
        };
        Ok(self.core.pool_stats_command_of(d).args())
    }

    /// `hg_stats`' reply as `{nowMs, limit, used, epoch, fence, rev, learnUntilMs, wantSum,
    /// holders: [{holder, generation, held, want, expiresMs}]}` (server ms; `limit` `null` when
    /// the pool does not exist).
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn decode_pool_stats<'e>(&self, env: &'e Env, reply: Unknown) -> Result<Object<'e>> {
        let f = fields(env, &reply)?;
        let s: PoolStats =
            FleetCore::decode_pool_stats(&f).map_err(|e| Error::from_reason(message(e)))?;
        let mut out = Object::new(env)?;
        out.set("nowMs", s.now_ms as f64)?;
        match s.limit {
            Some(l) => out.set("limit", l as f64)?,
            None => out.set("limit", Null)?,
        }
        for (k, v) in [
            ("used", s.used),
            ("epoch", s.epoch),
            ("fence", s.fence),
            ("rev", s.rev),
            ("learnUntilMs", s.learn_until_ms),
            ("wantSum", s.want_sum),
        ] {
            out.set(k, v as f64)?;
        }
        let mut holders = env.create_array(s.holders.len() as u32)?;
        for (i, h) in s.holders.iter().enumerate() {
            let mut o = Object::new(env)?;
            o.set("holder", h.holder.as_str())?;
            o.set("generation", h.generation as f64)?;
            o.set("held", h.held as f64)?;
            o.set("want", h.want as f64)?;
            o.set("expiresMs", h.expires_ms as f64)?;
            holders.set(i as u32, o)?;
        }
        out.set("holders", holders)?;
        Ok(out)
    }

    /// The local bulkhead's stats object plus `lease` and `budgetLease` (the budget's lease,
    /// the same fields in units; `null` without a fleet budget): see index.d.ts
    /// `FleetLeaseStats`.
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn stats<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let s = self.core.stats();
        settled::flush(env)?;
        let mut out = stats::object(env, &s.stats)?;
        out.set("lease", lease_object(env, &s.lease)?)?;
        match &s.budget_lease {
            Some(b) => out.set("budgetLease", lease_object(env, b)?)?,
            None => out.set("budgetLease", Null)?,
        }
        Ok(out)
    }

    /// The pool's name.
    #[napi(getter)]
    pub fn pool(&self) -> String {
        self.core.pool().as_str().to_owned()
    }

    /// This process's holder id.
    #[napi(getter)]
    pub fn holder(&self) -> String {
        self.core.holder().to_owned()
    }

    /// The key every command of the pool is about (its keys share one hash tag): a cluster
    /// client routes a command without keys (`WAIT`) by it.
    #[napi(getter)]
    pub fn route_key(&self) -> String {
        self.core.keys().0[0].clone()
    }

    /// The lease's time to live, ms.
    #[napi(getter)]
    pub fn lease_ttl_ms(&self) -> f64 {
        crate::marshal::ms(self.ttl)
    }

    /// Whether callers are queued for the block (the driver then keeps the process alive: what
    /// grants them is its next sync).
    #[napi(getter)]
    pub fn waiting(&self) -> bool {
        self.core.bulkhead().snapshot().queued > 0
    }

    /// Whether `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.core.is_closed()
    }
}

/// One lease's stats as `FleetLeaseStats` (counts as numbers, times ms).
fn lease_object<'e>(env: &'e Env, l: &LeaseStats) -> Result<Object<'e>> {
    let mut o = Object::new(env)?;
    o.set("pool", l.pool.as_str())?;
    o.set("holder", l.holder.as_str())?;
    o.set("state", l.state.as_str())?;
    let c = &l.counters;
    for (k, v) in [
        ("generation", l.generation),
        ("held", l.held),
        ("share", l.share),
        ("localLimit", l.local_limit),
        ("fleetLimit", l.fleet_limit),
        ("fleetUsed", l.fleet_used),
        ("holders", l.holders),
        ("epoch", l.epoch),
        ("rev", l.rev),
    ] {
        o.set(k, v as f64)?;
    }
    o.set("learning", l.learning)?;
    match l.lease_left {
        Some(d) => o.set("leaseLeftMs", crate::marshal::ms(d))?,
        None => o.set("leaseLeftMs", Null)?,
    }
    o.set("unreachable", l.unreachable)?;
    match &l.last_error {
        Some(e) => o.set("lastError", e.as_str())?,
        None => o.set("lastError", Null)?,
    }
    for (k, v) in [
        ("unleasedInFlight", l.unleased_in_flight),
        ("syncsTotal", c.syncs_total),
        ("errorsTotal", c.errors_total),
        ("lossesTotal", c.losses_total),
        ("expiriesTotal", c.expiries_total),
        ("lateGrantsTotal", c.late_grants_total),
        ("releasesFencedTotal", c.releases_fenced_total),
        ("epochChangesTotal", c.epoch_changes_total),
        ("unreplicatedTotal", c.unreplicated_total),
    ] {
        o.set(k, v as f64)?;
    }
    Ok(o)
}

// ----- the `hullguard fleet show` command -----------------------------------------------------

/// What `fleetCli` returns: the exit status and the text to print; after a parse without a
/// reply (status 0), what to read and where (`redis`, `command`, `library`, `evalCommand`).
#[napi(object)]
pub struct FleetCliOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    /// The Redis URL (`--redis`, else `defaultRedis`, else the crate's default).
    pub redis: Option<String>,
    /// `FCALL_RO hg_stats 6 <keys…>`.
    pub command: Option<Vec<String>>,
    /// The same read as one `EVAL` of the library's script (an ACL that refuses `FUNCTION`).
    pub eval_command: Option<Vec<String>>,
    /// The library's check and load (`FCALL_RO hg_version`, `FUNCTION LOAD REPLACE`).
    pub library: Option<FleetLibrary>,
}

/// `hullguard fleet show POOL [--redis URL] [--json]` (`bin/hullguard.js`; `args` without the
/// program name), parsed and rendered by the fleet crate (`hullguard_fleet::cli`), in two calls
/// around the read, which the script makes with ioredis or node-redis: without `reply`, status
/// 2 and the usage error, or status 0 and what to read; with `hg_stats`' reply, status 0 and
/// the report, or status 1 when the reply is not `hg_stats`'.
#[napi]
pub fn fleet_cli(
    env: &Env,
    args: Vec<String>,
    default_redis: Option<String>,
    reply: Option<Unknown>,
) -> Result<FleetCliOutput> {
    let out = |status, stdout, stderr| FleetCliOutput {
        status,
        stdout,
        stderr,
        redis: None,
        command: None,
        eval_command: None,
        library: None,
    };
    let show = match cli::parse(&args, default_redis) {
        Ok(s) => s,
        Err(e) => {
            return Ok(out(
                2,
                String::new(),
                format!("hullguard: {e}\n{}", cli::USAGE),
            ));
        }
    };
    let Some(reply) = reply else {
        let keys = show.pool.keys();
        let mut command = vec!["FCALL_RO".to_owned(), FN_STATS.to_owned(), "6".to_owned()];
        command.extend(keys.iter().map(str::to_owned));
        let mut eval_command = vec!["EVAL".to_owned(), eval_source(), "6".to_owned()];
        eval_command.extend(keys.iter().map(str::to_owned));
        eval_command.push(FN_STATS.to_owned());
        return Ok(FleetCliOutput {
            redis: Some(show.redis),
            command: Some(command),
            eval_command: Some(eval_command),
            library: Some(FleetLibrary {
                check: vec![
                    "FCALL_RO".into(),
                    FN_VERSION.into(),
                    "1".into(),
                    keys.0[0].clone(),
                ],
                load: vec![
                    "FUNCTION".into(),
                    "LOAD".into(),
                    "REPLACE".into(),
                    LIBRARY.into(),
                ],
                load_script: vec!["SCRIPT".into(), "LOAD".into(), eval_source()],
                version: LIB_VERSION as f64,
            }),
            ..out(0, String::new(), String::new())
        });
    };
    // A reply that is not an array of numbers and strings throws (as `decodePoolStats`).
    let f = fields(env, &reply)?;
    Ok(match FleetCore::decode_pool_stats(&f) {
        Ok(stats) => out(0, cli::render(&show.pool, &stats, show.json), String::new()),
        Err(e) => out(1, String::new(), format!("hullguard: {}\n", message(e))),
    })
}
