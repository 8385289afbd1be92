//! `NativeRegistry`: one core bulkhead per key (`hullguard_core::Registry`); handles are
//! `NativeBulkhead`s carrying their key (it goes into their `BulkheadError`s).

use std::{rc::Rc, sync::Arc};

use hullguard_core::{Registry as CoreRegistry, origin_key as core_origin_key};
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

/// A registry. Errors as `NativeBulkhead`'s; an override's start with `overrides["key"]: `.
#[napi]
pub struct NativeRegistry {
    reg: CoreRegistry,
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
        let config = options::registry(&env, options)?;
        let observer = Arc::new(settled::Emitter(emitter));
        let reg = CoreRegistry::with_observer(config, clock::source(clock), Some(observer))
            .map_err(|e| range_error(&env, e))?;
        Ok(Self { reg })
    }

    /// A handle on `key`'s bulkhead (created on first use). Throws `BulkheadError`
    /// (`key_limit`, `shutdown`), or a `TypeError` for a key that is not a string.
    #[napi]
    pub fn get(&self, env: &Env, key: Unknown) -> Result<NativeBulkhead> {
        let key = string(env, key, "key")?;
        self.reg
            .get(&key)
            .map(|bh| NativeBulkhead::from_arc(bh, Some(Rc::from(key.as_str()))))
            .map_err(|e| refused(env, &e.error, Some(&e.key)))
    }

    /// `{key: stats}` (keys unchanged).
    #[napi(ts_return_type = "Record<string, Record<string, unknown>>")]
    pub fn stats<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let all = self.reg.stats();
        settled::flush(env)?;
        stats::by_key(env, &all)
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
