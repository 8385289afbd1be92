//! `NativeFleet`: one fleet bulkhead's state (`hullguard_fleet::FleetCore`, docs/design.md §16)
//! for the facade's `FleetBulkhead` (fleet.js): marshalling only. The lease, its deadline, the
//! block and every admission decision are the crate's and the core's; the options are read by
//! the crate's table (`FLEET_OPTIONS`, `FleetConfig::set` / `validate`); admissions go through
//! the local bulkhead's own handle (`NativeBulkhead::from_arc` over `FleetCore::bulkhead()`), so
//! a fleet bulkhead admits, queues, refuses and counts exactly as a local one.
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

use hullguard_core::{LimitsSnapshot, config::convert::count_from_f64};
use hullguard_fleet::{
    FleetConfig, FleetCore, FleetError, PoolName, RawReply, Step, cli,
    options::{FLEET_OPTIONS, FleetKind, FleetOption, FleetValue, NOT_FLEET_WIDE, node_name},
    protocol::{FN_STATS, FN_VERSION, Field, PoolStats},
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

/// The option list of the "unknown option" message, in the Node spelling.
fn known() -> String {
    let names: Vec<String> = FLEET_OPTIONS
        .iter()
        .map(|o| format!("{:?}", node_name(o)))
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
    let snake = snake(key);
    let base = snake.strip_suffix("_ms").unwrap_or(&snake);
    if let Some((_, why)) = NOT_FLEET_WIDE
        .iter()
        .find(|(n, _)| *n == snake || *n == base)
    {
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

/// The crate's option names in its messages, spelled the Node way (`lease_ttl` → `leaseTtlMs`).
fn node_spelled(message: &str) -> String {
    let mut rows: Vec<&FleetOption> = FLEET_OPTIONS
        .iter()
        .filter(|o| o.name.contains('_'))
        .collect();
    rows.sort_by_key(|o| std::cmp::Reverse(o.name.len()));
    rows.iter()
        .fold(message.to_owned(), |m, o| m.replace(o.name, &node_name(o)))
}

/// A crate error as JS throws it: a bad option or name a `RangeError` in the Node spelling,
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
        FleetError::Name(_) | FleetError::Config(_) => range_error(env, &e),
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

/// `new FleetBulkhead(client, options)`'s options, by the crate's table: `pool` (required) and
/// every other key by its row (Node's spelling: `maxConcurrent`, `leaseTtlMs` …), range-checked
/// by its kind, set with `FleetConfig::set`, then `validate()` (the relations: `beatMs` at most
/// half of `leaseTtlMs`, …). An unknown key, a snake_case spelling, or a local bulkhead's option
/// that cannot be fleet-wide (`budget`, `classes`, `resilience` …) is a `TypeError` naming it; a
/// value of the wrong type a `TypeError`; out of range, a bad pool or holder a `RangeError`.
/// `undefined` / `null`: not given.
fn fleet_options(env: &Env, opts: Unknown) -> Result<FleetConfig> {
    let mut pool = None;
    let mut rest = Vec::new();
    for (key, v) in options::entries(env, opts, "options must be an object")? {
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
        cfg.set(row.name, value).map_err(|e| fleet_error(env, e))?;
    }
    cfg.validate().map_err(|e| fleet_error(env, e))?;
    Ok(cfg)
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

/// `applyLimits()`'s command (validated) and what it sets.
#[napi(object)]
pub struct FleetLimitsCommand {
    pub args: Vec<String>,
    pub revision: f64,
    pub limit: f64,
}

/// `applyLimits()`' result: whether this revision was installed (false: one as new or newer is
/// in force) and the revision and limit in force.
#[napi(object)]
pub struct FleetLimitsResult {
    pub applied: bool,
    pub revision: f64,
    pub limit: f64,
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
    /// facade id the bell reports (one of its own, held for the bulkhead's life).
    #[napi(constructor)]
    pub fn new(env: Env, options: Unknown, bell: u32) -> Result<Self> {
        let cfg = fleet_options(&env, options)?;
        let core = FleetCore::new(&cfg, None).map_err(|e| fleet_error(&env, e))?;
        Ok(NativeFleet {
            core: Arc::new(core),
            bell: settled::waker_of(bell),
            quiet_until: Cell::new(0),
            min_interval: cfg.min_sync_interval,
            ttl: cfg.lease_ttl,
            script: std::cell::RefCell::new(None),
        })
    }

    /// A handle on the local bulkhead the lease sets the limit of: every admission goes there.
    #[napi]
    pub fn bulkhead(&self) -> NativeBulkhead {
        NativeBulkhead::from_arc(Arc::clone(self.core.bulkhead()), None)
    }

    /// The driver's next step (see `FleetStep`); on a park the bell is registered unless in a
    /// quiet period (then the park is at most what is left of it).
    #[napi]
    pub fn step(&self, env: &Env) -> Result<Option<FleetStep>> {
        let step = self.core.step();
        let bh = self.core.bulkhead();
        let shorts = bh.lease_shorts();
        let out = match step {
            Step::Closed => None,
            Step::Send(command) => Some(FleetStep {
                args: Some(command.args(self.core.keys())),
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
            }) if bh.lease_shorts() > shorts => {
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

    /// After `close()`, once the driver stopped: the release of the lease to send (once), or
    /// `null`.
    #[napi]
    pub fn release_command(&self, env: &Env) -> Result<Option<Vec<String>>> {
        let c = self.core.release_command();
        settled::flush(env)?;
        Ok(c.map(|c| c.args(self.core.keys())))
    }

    /// The release's reply (a fenced one is counted in `releasesFencedTotal`).
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

    /// `applyLimits({revision, limit})`'s command, validated by the local bulkhead's parser and
    /// the crate (only `limit` may be set: `budget`, `maxQueue`, `queueTimeoutMs`, `queueDelay`,
    /// `reserve`, `rates` are refused by name; `revision` 1 ..= 2^53 − 1, `limit` 0 ..= 2^32).
    #[napi]
    pub fn apply_limits_command(&self, env: &Env, limits: Unknown) -> Result<FleetLimitsCommand> {
        let (snap, reserve, rates) = options::limits(env, limits)?;
        if reserve.is_some() || rates.is_some() {
            let what = if reserve.is_some() {
                "reserve"
            } else {
                "rates"
            };
            return Err(type_error(
                env,
                format_args!(
                    "{what}: not supported by a fleet bulkhead (classes are not fleet-wide); \
                     applyLimits sets the fleet limit: {{revision, limit}}"
                ),
            ));
        }
        let command = self.core.apply_limits(&snap).map_err(|e| match &e {
            FleetError::Option { option, message }
                if matches!(*option, "budget" | "limits") || snap.limit.is_none() =>
            {
                type_error(env, format_args!("{option}: {}", node_spelled(message)))
            }
            _ => fleet_error(env, e),
        })?;
        Ok(FleetLimitsCommand {
            args: command.args(self.core.keys()),
            revision: snap.revision as f64,
            limit: snap.limit.unwrap_or_default() as f64,
        })
    }

    /// `hg_set_limit`'s reply for `applyLimitsCommand`'s `revision` and `limit`: the result,
    /// remembered when applied (set again if the pool loses its state).
    #[napi]
    pub fn limit_applied(
        &self,
        revision: f64,
        limit: f64,
        reply: Unknown,
    ) -> Result<FleetLimitsResult> {
        let raw = raw_reply(&reply)?.map_err(Error::from_reason)?;
        let snap = LimitsSnapshot::new(revision as u64).limit(limit as u64);
        let r = self
            .core
            .limit_applied(&snap, &raw)
            .map_err(|e| Error::from_reason(message(e)))?;
        Ok(FleetLimitsResult {
            applied: r.applied,
            revision: r.rev as f64,
            limit: r.limit as f64,
        })
    }

    /// The read-only command that reads the pool (`hg_stats`).
    #[napi]
    pub fn pool_stats_command(&self) -> Vec<String> {
        self.core.pool_stats_command().args(self.core.keys())
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

    /// The local bulkhead's stats object plus `lease` (see index.d.ts `FleetLeaseStats`).
    #[napi(ts_return_type = "Record<string, unknown>")]
    pub fn stats<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let s = self.core.stats();
        settled::flush(env)?;
        let mut out = stats::object(env, &s.stats)?;
        let l = s.lease;
        let mut o = Object::new(env)?;
        o.set("pool", l.pool.as_str())?;
        o.set("holder", l.holder.as_str())?;
        o.set("state", l.state.as_str())?;
        let c = l.counters;
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
        out.set("lease", o)?;
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
