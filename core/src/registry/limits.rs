//! Revisioned limits for a whole registry (docs/design.md §9): what
//! [`Registry::apply_limits`](crate::Registry::apply_limits) installs — per-key limits from
//! `defaults` and `overrides` under one revision, for the keys that exist and those created
//! later — and why it refuses. Scality's token buckets copied their limit at creation and never
//! saw a change (C33 step 4); here a key created after an update is built with it.

use core::fmt;
use std::{collections::BTreeMap, string::String};

use crate::{config::Config, front::apply::LimitsError, front::apply::LimitsSnapshot};

/// The limits one key gets from a [`RegistryLimits`]. A field left `None` keeps the key's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyLimits {
    /// The permit limit (0: the kill switch; above the key's `max_concurrent`: a higher
    /// ceiling), as in [`LimitsSnapshot::limit`].
    pub limit: Option<u64>,
    /// The budget ceiling, as in [`LimitsSnapshot::budget`].
    pub budget: Option<u64>,
    /// The bound on live waiters, as in [`LimitsSnapshot::max_queue`].
    pub max_queue: Option<u64>,
    /// The default queue timeout, as in [`LimitsSnapshot::queue_timeout`].
    pub queue_timeout: Option<core::time::Duration>,
}

/// A control-plane revision for a registry: `defaults` for every key, `overrides` per key
/// (canonical keys, as the registry's own; a field an override leaves `None` comes from
/// `defaults`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistryLimits {
    /// `1 ..= MAX_REVISION`, above the registry's revision in force.
    pub revision: u64,
    /// The limits of every key without an override.
    pub defaults: KeyLimits,
    /// Per-key limits.
    pub overrides: BTreeMap<String, KeyLimits>,
    /// The cap over all keys, for a registry built with a global cap (docs/design.md §9.2):
    /// its `limit` (0: the kill switch for every key), `budget`, `max_queue` (up to the
    /// construction-time `global.max_queue`) and `queue_timeout`. Under a global cap a key's
    /// own `defaults` / `overrides` entry takes only `limit` (its class's ceiling).
    pub global: Option<KeyLimits>,
}

impl RegistryLimits {
    /// A revision that changes nothing yet.
    pub fn new(revision: u64) -> Self {
        RegistryLimits {
            revision,
            ..RegistryLimits::default()
        }
    }

    /// The snapshot `key` gets: its override's fields, else the defaults'.
    pub fn snapshot_for(&self, key: &str) -> LimitsSnapshot {
        let o = self.overrides.get(key);
        LimitsSnapshot {
            revision: self.revision,
            limit: o.and_then(|o| o.limit).or(self.defaults.limit),
            budget: o.and_then(|o| o.budget).or(self.defaults.budget),
            max_queue: o.and_then(|o| o.max_queue).or(self.defaults.max_queue),
            queue_timeout: o
                .and_then(|o| o.queue_timeout)
                .or(self.defaults.queue_timeout),
            queue_delay: None,
        }
    }

    /// The shared admission's snapshot under a global cap: the revision and `global`'s fields.
    pub(crate) fn global_snapshot(&self) -> LimitsSnapshot {
        let g = self.global.unwrap_or_default();
        LimitsSnapshot {
            revision: self.revision,
            limit: g.limit,
            budget: g.budget,
            max_queue: g.max_queue,
            queue_timeout: g.queue_timeout,
            queue_delay: None,
        }
    }

    /// Under a global cap: every key entry (the defaults and each override) names only a
    /// `limit`, within `0 ..= MAX_PERMITS`.
    pub(crate) fn check_keyed(&self) -> Result<(), RegistryLimitsError> {
        let entries = core::iter::once((None, &self.defaults))
            .chain(self.overrides.iter().map(|(k, l)| (Some(k), l)));
        for (key, l) in entries {
            let field = if l.budget.is_some() {
                "budget"
            } else if l.max_queue.is_some() {
                "max_queue"
            } else if l.queue_timeout.is_some() {
                "queue_timeout"
            } else {
                if l.limit.is_some_and(|v| v > crate::MAX_PERMITS) {
                    return Err(RegistryLimitsError::Limits {
                        key: key.cloned(),
                        error: LimitsError::Limit {
                            max: crate::MAX_PERMITS,
                        },
                    });
                }
                continue;
            };
            return Err(RegistryLimitsError::PerKey {
                key: key.cloned(),
                field,
            });
        }
        Ok(())
    }

    /// Whether a key built from `config` would take `snapshot` (a future key's check).
    pub(crate) fn check_config(
        config: &Config,
        snapshot: &LimitsSnapshot,
    ) -> Result<(), LimitsError> {
        snapshot.check(
            config.budget.is_some(),
            config.resilience.adaptive.is_some(),
            config.budget,
            config.max_queue,
            0,
        )
    }
}

/// Why [`Registry::apply_limits`](crate::Registry::apply_limits) installed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryLimitsError {
    /// The revision is not above the registry's revision in force.
    Stale {
        /// The revision in force.
        current: u64,
    },
    /// An override names a key that is not canonical (see `canonical_key`).
    Key(String),
    /// `global` limits for a registry built without a global cap.
    NoGlobal,
    /// Under a global cap a key's limits take only `limit`: `field` was given for `key`
    /// (`None`: the defaults).
    PerKey {
        /// The key, or `None` for the defaults.
        key: Option<String>,
        /// The field given: `"budget"`, `"max_queue"` or `"queue_timeout"`.
        field: &'static str,
    },
    /// The shared admission refused the `global` limits.
    Global(LimitsError),
    /// The limits refused for one key — an existing key, or the defaults' or an override's
    /// configuration (`key: None`: the defaults, for keys not created yet).
    Limits {
        /// The key, or `None` for the defaults.
        key: Option<String>,
        /// What its bulkhead refused.
        error: LimitsError,
    },
}

impl fmt::Display for RegistryLimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stale { current } => write!(
                f,
                "revision must be above the registry's revision in force ({current}); nothing was applied"
            ),
            Self::Key(k) => write!(
                f,
                "override key {k:?} is not a canonical registry key; nothing was applied"
            ),
            Self::NoGlobal => f.write_str(
                "global limits need a registry built with a global cap (RegistryConfig::global); \
                 nothing was applied",
            ),
            Self::PerKey { key, field } => {
                match key {
                    Some(k) => write!(f, "key {k:?}: ")?,
                    None => f.write_str("defaults: ")?,
                }
                write!(
                    f,
                    "under a global cap a key takes only `limit`; `{field}` belongs in `global`; \
                     nothing was applied"
                )
            }
            Self::Global(error) => write!(f, "global: {error}; nothing was applied"),
            Self::Limits {
                key: Some(k),
                error,
            } => {
                write!(f, "key {k:?}: {error}; nothing was applied")
            }
            Self::Limits { key: None, error } => {
                write!(f, "defaults: {error}; nothing was applied")
            }
        }
    }
}

impl core::error::Error for RegistryLimitsError {}
