//! `NativeRegistry`: one core bulkhead per key; handles are `NativeBulkhead`s.

use std::collections::HashMap;

use hullguard_core::{Registry as CoreRegistry, RegistryConfig, origin_key as core_origin_key};
use napi::{Error, Result, Status};
use napi_derive::napi;

use crate::{
    bulkhead::{NativeBulkhead, config},
    clock::{self, VirtualClock},
    resilience::{self, NativeResilience},
    stats::JsStats,
};

/// One key's configuration, as the facade resolved it.
#[napi(object)]
pub struct NativeConfig {
    pub max_concurrent: f64,
    pub max_queue: f64,
    pub queue_timeout_ms: f64,
    pub enabled: bool,
    /// The policies (already merged over the defaults' by the facade).
    pub resilience: Option<NativeResilience>,
}

fn to_core(c: &NativeConfig) -> Result<hullguard_core::Config> {
    config(
        c.max_concurrent,
        c.max_queue,
        c.queue_timeout_ms,
        c.enabled,
        c.resilience.as_ref(),
    )
}

#[napi]
pub struct NativeRegistry {
    reg: CoreRegistry,
}

#[napi]
impl NativeRegistry {
    #[napi(constructor)]
    pub fn new(
        defaults: NativeConfig,
        overrides: HashMap<String, NativeConfig>,
        max_keys: f64,
        emitter: Option<u32>,
        clock: Option<&VirtualClock>,
    ) -> Result<Self> {
        let mut o = HashMap::new();
        for (k, c) in &overrides {
            let c = to_core(c).map_err(|e| {
                Error::new(
                    Status::InvalidArg,
                    format!("overrides[{k:?}]: {}", e.reason),
                )
            })?;
            o.insert(k.clone(), c);
        }
        let reg = CoreRegistry::with_observer(
            RegistryConfig {
                defaults: to_core(&defaults)?,
                overrides: o,
                max_keys: max_keys as usize,
            },
            clock::source(clock),
            resilience::observer(emitter),
        )
        .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
        Ok(Self { reg })
    }

    /// A handle on `key`'s bulkhead (created on first use). Fails with the message
    /// `key_limit` or `shutdown`.
    #[napi]
    pub fn get(&self, key: String) -> Result<NativeBulkhead> {
        self.reg
            .get(&key)
            .map(NativeBulkhead::from_arc)
            .map_err(|e| {
                let reason = e.reason().map_or("invalid", |r| r.as_str());
                Error::new(Status::GenericFailure, reason.to_owned())
            })
    }

    /// `{key: stats}` (keys unchanged).
    #[napi]
    pub fn stats(&self) -> HashMap<String, JsStats> {
        self.reg
            .stats()
            .iter()
            .map(|(k, s)| (k.clone(), JsStats::from(s)))
            .collect()
    }

    #[napi]
    pub fn keys(&self) -> Vec<String> {
        let mut k = self.reg.keys();
        k.sort();
        k
    }

    #[napi]
    pub fn close(&self) -> u32 {
        self.reg.close();
        crate::settled::pending()
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

/// The canonical origin key of `url` (`scheme://host:port`; DESIGN §3.8). Throws a
/// `TypeError`-like error for a URL without one.
#[napi]
pub fn origin_key(url: String) -> Result<String> {
    core_origin_key(&url).map_err(|e| Error::new(Status::InvalidArg, e.to_string()))
}
