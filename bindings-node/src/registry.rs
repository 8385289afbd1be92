//! `NativeRegistry`: one core bulkhead per key (`hullguard_core::Registry`); handles are
//! `NativeBulkhead`s carrying their key (it goes into their `BulkheadError`s).

use std::{rc::Rc, sync::Arc};

use hullguard_core::{
    Registry as CoreRegistry,
    config::options::{Section, Spelling, find},
    origin_key as core_origin_key,
};
use napi::{
    Env, Result,
    bindgen_prelude::{Object, Unknown},
};
use napi_derive::napi;

use crate::{
    bulkhead::NativeBulkhead,
    clock::{self, VirtualClock},
    marshal::{range_error, refused, string, type_error},
    options, settled, stats,
};

/// One key's metric samples (`key` absent: a global cap's shared admission).
#[napi(object)]
pub struct KeySamples {
    pub key: Option<String>,
    pub samples: Vec<crate::metrics::MetricSample>,
}

/// A registry. Errors as `NativeBulkhead`'s; an override's start with `overrides["key"]: `.
#[napi]
pub struct NativeRegistry {
    reg: Arc<CoreRegistry>,
    /// Whether admission events were asked for (`events: true`).
    events: bool,
    /// Whether it has a global cap (read once: `global_stats()` builds the shared admission's
    /// whole stats, and `get` runs for every call).
    global: bool,
    /// On the test hook's virtual clock (its handles' deadlines are ms on it).
    virtual_clock: bool,
}

#[napi]
impl NativeRegistry {
    /// `new Registry(options)`: `options` as the user gave them (defaults, `maxKeys`,
    /// `overrides`); breaker transitions of every key go to the facade's emitter `emitter`.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        options: Unknown,
        emitter: u32,
        clock: Option<&VirtualClock>,
    ) -> Result<Self> {
        let (config, events) = options::registry(&env, options)?;
        let global = config.global.is_some();
        let observer = Arc::new(settled::Emitter {
            id: emitter,
            events,
        });
        let reg = CoreRegistry::with_observer(config, clock::source(clock), Some(observer))
            .map_err(|e| range_error(&env, node_names(&e.to_string())))?;
        Ok(Self {
            reg: Arc::new(reg),
            events,
            global,
            virtual_clock: clock.is_some(),
        })
    }

    /// A handle on `key`'s bulkhead (created on first use). Throws `BulkheadError`
    /// (`key_limit`, `shutdown`), or a `TypeError` for a key that is not a string.
    #[napi]
    pub fn get(&self, env: &Env, key: Unknown) -> Result<NativeBulkhead> {
        let key = string(env, key, "key")?;
        // Under a global cap the key decides through the registry (its class of the shared
        // admission), whose tickets poll on the shared admission.
        let global = self.global;
        let bh = if global {
            self.reg.admission_of(&key)
        } else {
            self.reg.get(&key)
        };
        let mut nb = bh
            .map(|bh| NativeBulkhead::from_arc(bh, Some(Rc::from(key.as_str()))))
            .map_err(|e| refused(env, &e.error, Some(&e.key)))?;
        if global {
            nb.via = Some(self.reg.clone());
        }
        nb.events = self.events;
        nb.virtual_clock = self.virtual_clock;
        Ok(nb)
    }

    /// Under a global cap, `key`'s own counts (`{inFlight, queued, ceiling, observed, …}`),
    /// else `null`; `null` for a key that does not exist (it is not created).
    #[napi(ts_return_type = "Record<string, unknown> | null")]
    pub fn key_stats<'e>(&self, env: &'e Env, key: Unknown) -> Result<Option<Object<'e>>> {
        let key = string(env, key, "key")?;
        self.reg
            .key_stats(&key)
            .map(|c| crate::gateway::class_stats_object(env, &c))
            .transpose()
    }

    /// Under a global cap, the shared admission's stats (`limit` is the cap); else `null`.
    #[napi(ts_return_type = "Record<string, unknown> | null")]
    pub fn global_stats<'e>(&self, env: &'e Env) -> Result<Option<Object<'e>>> {
        let s = self.reg.global_stats();
        settled::flush(env)?;
        s.map(|s| stats::object(env, &s)).transpose()
    }

    /// What an admission on `key` would decide now, without creating the key (see
    /// `NativeBulkhead.wouldAdmit`, `ambient` too; the registry's default class names: none).
    #[napi]
    pub fn would_admit(
        &self,
        env: &Env,
        key: Unknown,
        options: Unknown,
        ambient: Option<f64>,
    ) -> Result<crate::gateway::JsWouldAdmit> {
        let key = string(env, key, "key")?;
        let ctx = options::RequestCtx {
            max_concurrent: hullguard_core::MAX_PERMITS,
            names: &[],
            virtual_clock: self.virtual_clock,
            ambient_ms: options::ambient(ambient),
        };
        let request = options::acquire(env, options, &ctx, false)?;
        let got = self.reg.would_admit(&key, &request);
        settled::flush(env)?;
        crate::gateway::would_admit_js(env, got, Some(&key))
    }

    /// `{key: stats}` (keys unchanged).
    #[napi(ts_return_type = "Record<string, Record<string, unknown>>")]
    pub fn stats<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let all = self.reg.stats();
        settled::flush(env)?;
        stats::by_key(env, &all)
    }

    /// Every live key's samples of the core's metric table, `[{key, samples}]` in key order,
    /// read from the keys' stats (no key is created or touched). Under a global cap the keys
    /// share one admission: its samples once, without `key`, each key's class named by the key.
    #[napi]
    pub fn metric_samples(&self, env: &Env) -> Result<Vec<KeySamples>> {
        let out = if self.global {
            let mut classes: Vec<(String, hullguard_core::stats::ClassStats)> = self
                .reg
                .keys()
                .into_iter()
                .filter_map(|k| self.reg.key_stats(&k).map(|c| (k, c)))
                .collect();
            classes.sort_by_key(|(_, c)| c.class);
            let names: Vec<(u16, String)> =
                classes.iter().map(|(k, c)| (c.class, k.clone())).collect();
            let name = |i: u16| {
                names
                    .iter()
                    .find(|(c, _)| *c == i)
                    .map_or_else(|| i.to_string(), |(_, k)| k.clone())
            };
            let stats: Vec<_> = classes.into_iter().map(|(_, c)| c).collect();
            self.reg
                .global_stats()
                .map(|g| KeySamples {
                    key: None,
                    samples: crate::metrics::stats_samples(&g, &stats, &name),
                })
                .into_iter()
                .collect()
        } else {
            let none = |i: u16| i.to_string();
            self.reg
                .stats()
                .into_iter()
                .map(|(key, s)| KeySamples {
                    samples: crate::metrics::stats_samples(&s, &[], &none),
                    key: Some(key),
                })
                .collect()
        };
        settled::flush(env)?;
        Ok(out)
    }

    /// The live keys, sorted.
    #[napi]
    pub fn keys(&self) -> Vec<String> {
        let mut k = self.reg.keys();
        k.sort();
        k
    }

    #[napi]
    pub fn close(&self, env: &Env) -> Result<()> {
        self.reg.close();
        settled::flush(env)
    }

    #[napi(getter)]
    pub fn size(&self) -> u32 {
        self.reg.len() as u32
    }

    /// Whether admission events were asked for (`events: true`).
    #[napi(getter)]
    pub fn events(&self) -> bool {
        self.events
    }

    #[napi(getter)]
    pub fn max_keys(&self) -> f64 {
        self.reg.max_keys() as f64
    }
}

/// The canonical origin key of `url` (`scheme://host:port`; docs/design.md §9). Throws a
/// `TypeError` for a non-string or a URL without an origin.
#[napi]
pub fn origin_key(env: &Env, url: Unknown) -> Result<String> {
    let url = string(env, url, "url")?;
    core_origin_key(&url).map_err(|e| type_error(env, e))
}

/// A core message with its option names (`max_keys`, `start_limit`, …: the core's spelling,
/// which the global cap's refusals use in their prose) in the Node spelling (`maxKeys`,
/// `startLimit`); quoted parts (keys) are left as they are.
fn node_names(message: &str) -> String {
    fn spelled(word: &str) -> Option<String> {
        if !word.contains('_') {
            return None;
        }
        let spec = find(Section::Registry, Spelling::Python, word)
            .or_else(|| find(Section::Bulkhead, Spelling::Python, word))?;
        Some(spec.spelled(Spelling::Node).to_string())
    }
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let mut quoted = false;
    for c in message.chars().chain(std::iter::once('\0')) {
        if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        out.push_str(&spelled(&word).unwrap_or_else(|| std::mem::take(&mut word)));
        word.clear();
        if c == '"' {
            quoted = !quoted;
        }
        if c != '\0' {
            out.push(c);
        }
    }
    out
}
