//! A registry of independent bulkheads, one per key (feature `std`): one per origin, per
//! database, per LLM provider.
//!
//! Bulkheads are created on first use from `defaults` (or the key's entry in `overrides`).
//! The key map sits behind a `std::sync::RwLock`: looking a key up takes the read lock, a new
//! key the write lock. **Admission inside each bulkhead stays lock-free**; the lock only guards
//! the map. At `max_keys`, a new key evicts the least recently used entry that is idle
//! (`active == 0`, `queued == 0`, no unclaimed grant) and has no outside handle alive (no
//! `Arc` from [`Registry::get`], no permit, no pending acquire); with nothing evictable the new
//! key is rejected `key_limit`.
//!
//! Keys are opaque strings compared byte for byte; for URLs use [`origin_key`](crate::origin_key)
//! so that every integration agrees on one key per origin.

use core::{fmt, future::Future, time::Duration};
use std::{
    boxed::Box,
    collections::{BTreeMap, HashMap},
    format,
    string::{String, ToString},
    sync::{Arc, Mutex, RwLock},
    vec::Vec,
};

pub mod global;
pub mod limits;
pub mod origin;

use crate::{
    clock::ClockSource,
    config::{Config, ConfigError, OptionId, PartialConfig},
    event::SharedObserver,
    front::{bulkhead::Bulkhead, call::OwnedPermit, dry_run::WouldAdmit, request::Request},
    reason::{AcquireError, Reason, Rejection, Snapshot},
    registry::{
        global::{Global, GlobalCap},
        limits::{RegistryLimits, RegistryLimitsError},
    },
    stats::Stats,
    sync::{AtomicBool, AtomicWord, Ordering::*},
};

/// An optional observer that prints as `Some(..)` / `None` in `Debug` output.
#[derive(Clone, Default)]
struct ObserverField(Option<SharedObserver>);

impl fmt::Debug for ObserverField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// Configuration of a [`Registry`].
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryConfig {
    /// The configuration of every key without an override.
    pub defaults: Config,
    /// Per-key configurations (keys exactly as they will be looked up).
    pub overrides: HashMap<String, Config>,
    /// How many keys may exist at once (default 1024; at most
    /// [`MAX_GLOBAL_KEYS`](global::MAX_GLOBAL_KEYS) under a global cap).
    pub max_keys: usize,
    /// One cap over every key (docs/design.md §9.2): keys become classes of one admission, each
    /// with its own `max_concurrent` as its ceiling. `None` (the default): independent keys.
    pub global: Option<GlobalCap>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            defaults: Config::DEFAULT,
            overrides: HashMap::new(),
            max_keys: 1024,
            global: None,
        }
    }
}

impl RegistryConfig {
    /// The configuration of a registry from options as a layer passes them (docs/design.md
    /// §7.2): `defaults` (which may carry `max_keys`) and one [`PartialConfig`] per override
    /// key, each merged key by key over the defaults. URL-shaped keys (`scheme://…`) are
    /// canonicalised with [`origin_key`](crate::origin_key), so `"https://Slow.example"` and
    /// `"https://slow.example:443/"` name the same key.
    ///
    /// # Errors
    /// [`RegistryConfigError`] naming the option and, for an override, its key: a bad value, a
    /// URL-shaped key that is no valid origin, or two keys with the same canonical form.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{RegistryConfig, config::{OptionId, PartialConfig, Value}};
    /// let mut defaults = PartialConfig::new();
    /// defaults.set(OptionId::MaxConcurrent, Value::Count(8))?;
    /// let mut slow = PartialConfig::new();
    /// slow.set(OptionId::MaxQueue, Value::Count(0))?;
    /// let c = RegistryConfig::from_partial(&defaults, [("https://Slow.example/v1".to_string(), slow)])?;
    /// let o = &c.overrides["https://slow.example:443"];
    /// assert_eq!((o.max_concurrent, o.max_queue), (8, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_partial(
        defaults: &PartialConfig,
        overrides: impl IntoIterator<Item = (String, PartialConfig)>,
    ) -> Result<Self, RegistryConfigError> {
        let top = |e: ConfigError| RegistryConfigError {
            key: None,
            option: e.option(),
            error: Some(e),
            detail: None,
        };
        let base = defaults.to_config().map_err(top)?;
        let mut out = HashMap::new();
        for (key, o) in overrides {
            let canonical = canonical_key(&key)?;
            let c = o
                .merged_over(defaults)
                .to_config()
                .map_err(|e| RegistryConfigError {
                    key: Some(key.clone()),
                    option: e.option(),
                    error: Some(e),
                    detail: None,
                })?;
            if out.insert(canonical.clone(), c).is_some() {
                return Err(RegistryConfigError {
                    key: Some(key),
                    option: "overrides",
                    error: None,
                    detail: Some(format!(
                        "names the same key as another override: {canonical:?}"
                    )),
                });
            }
        }
        let max_keys = defaults.max_keys().unwrap_or(1024);
        Ok(RegistryConfig {
            defaults: base,
            overrides: out,
            max_keys: usize::try_from(max_keys).unwrap_or(usize::MAX),
            global: None,
        })
    }
}

/// A registry key as it is stored: URL-shaped keys (`scheme://…`) through
/// [`origin_key`](crate::origin_key), others unchanged (opaque, compared byte for byte).
///
/// # Errors
/// A URL-shaped key that has no origin.
pub fn canonical_key(key: &str) -> Result<String, RegistryConfigError> {
    if !key.contains("://") {
        return Ok(key.to_string());
    }
    origin::origin_key(key).map_err(|e| RegistryConfigError {
        key: Some(key.to_string()),
        option: "overrides",
        error: None,
        detail: Some(format!(
            "a URL-shaped key must be an origin ({e}); use origin_key(url) or a plain name"
        )),
    })
}

/// A configuration error, naming the option (and the override key, if it is in one).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistryConfigError {
    /// The override key whose configuration is bad; `None` for `defaults` / `max_keys`.
    pub key: Option<String>,
    /// The bad option: `"max_keys"`, `"overrides"` (a bad key), or a [`ConfigError`]'s option.
    pub option: &'static str,
    /// The option's error, when it is one.
    pub error: Option<ConfigError>,
    /// What is wrong with an override key.
    pub detail: Option<String>,
}

impl RegistryConfigError {
    fn option_error(key: Option<String>, e: ConfigError) -> Self {
        RegistryConfigError {
            key,
            option: e.option(),
            error: Some(e),
            detail: None,
        }
    }
}

impl fmt::Display for RegistryConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(k) = &self.key {
            write!(f, "overrides[{k:?}]: ")?;
        }
        match (&self.error, &self.detail) {
            (Some(e), _) => write!(f, "{e}"),
            (None, Some(d)) => f.write_str(d),
            (None, None) => {
                let o = OptionId::MaxKeys.spec();
                write!(
                    f,
                    "{} must be {}",
                    o.name,
                    o.range(crate::config::Spelling::Python)
                )
            }
        }
    }
}

impl core::error::Error for RegistryConfigError {}

/// An acquire through a registry failed; carries the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedError {
    /// The key asked for.
    pub key: alloc::boxed::Box<str>,
    /// What went wrong.
    pub error: AcquireError,
}

impl KeyedError {
    /// The admission reason, `None` for an invalid argument.
    pub fn reason(&self) -> Option<Reason> {
        self.error.reason()
    }
}

impl fmt::Display for KeyedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (key {:?})", self.error, self.key)
    }
}

impl core::error::Error for KeyedError {}

#[derive(Debug)]
struct Entry {
    /// The key's bulkhead, or under a global cap the shared admission.
    bh: Arc<Bulkhead>,
    /// Under a global cap: the key's class in the shared admission (else 0).
    class: u16,
    /// Under a global cap: cloned by every acquire of the key while it runs, so the key (and
    /// its class) is not evicted and reused under it (else unused: the bulkhead's own `Arc`
    /// count is the handle).
    handle: Arc<()>,
    /// LRU stamp from `Registry::tick`.
    last_used: AtomicWord,
}

impl Entry {
    /// Whether nothing holds, waits in or reaches this key (it may be evicted).
    fn evictable(&self, global: Option<&Global>) -> bool {
        match global {
            Some(g) => Arc::strong_count(&self.handle) == 1 && g.is_idle(self.class),
            None => Arc::strong_count(&self.bh) == 1 && self.bh.is_idle(),
        }
    }
}

/// A key's admission as an acquire uses it: the bulkhead, the class, and the handle held
/// while the acquire runs.
type Lookup = (Arc<Bulkhead>, u16, Arc<()>);

/// Independent bulkheads per key. See the module docs.
///
/// # Examples
/// ```
/// use hullguard_core::{origin_key, Config, Reason, Registry, RegistryConfig};
/// let reg = Registry::new(RegistryConfig {
///     defaults: Config { max_concurrent: 1, max_queue: 0, ..Config::default() },
///     ..RegistryConfig::default()
/// })?;
/// let slow = origin_key("https://slow.example/")?;
/// let fast = origin_key("https://fast.example/")?;
/// let _p = reg.try_acquire(&slow, 1)?;
/// // The slow origin is full; the fast one is untouched.
/// assert_eq!(reg.try_acquire(&slow, 1).unwrap_err().reason(), Some(Reason::ConcurrencyLimit));
/// assert!(reg.try_acquire(&fast, 1).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Registry {
    map: RwLock<HashMap<Box<str>, Entry>>,
    defaults: Config,
    overrides: HashMap<String, Config>,
    max_keys: usize,
    clock: ClockSource,
    observer: ObserverField,
    tick: AtomicWord,
    key_limit_rejections: AtomicWord,
    closed: AtomicBool,
    /// The limits of the last `apply_limits`, which keys created later are built with (read
    /// and written under the map's write lock).
    limits: Mutex<Option<RegistryLimits>>,
    /// The revision whose limits every key enforces (published after the last key's install).
    revision: AtomicWord,
    /// The shared admission under a global cap.
    global: Option<Global>,
}

impl Registry {
    /// A registry using the host's monotonic clock.
    ///
    /// # Errors
    /// [`RegistryConfigError`] naming the bad option (and override key).
    pub fn new(config: RegistryConfig) -> Result<Self, RegistryConfigError> {
        Self::with_clock(config, ClockSource::default_for_host())
    }

    /// A registry whose bulkheads all read `clock`.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_clock(
        config: RegistryConfig,
        clock: ClockSource,
    ) -> Result<Self, RegistryConfigError> {
        Self::with_observer(config, clock, None)
    }

    /// [`with_clock`](Self::with_clock) plus an observer of every key's breaker: state changes
    /// arrive as `on_state_change(Some(key), old, new)` after each commit.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_observer(
        config: RegistryConfig,
        clock: ClockSource,
        observer: Option<SharedObserver>,
    ) -> Result<Self, RegistryConfigError> {
        // The option table's range (1 ..= 2^32 - 1), also for a `RegistryConfig` built by hand.
        let max_keys = i128::try_from(config.max_keys).unwrap_or(i128::MAX);
        if crate::config::convert::count_in(max_keys, OptionId::MaxKeys.spec().kind).is_err() {
            return Err(RegistryConfigError {
                key: None,
                option: "max_keys",
                error: None,
                detail: None,
            });
        }
        config
            .defaults
            .validate()
            .map_err(|e| RegistryConfigError::option_error(None, e))?;
        for (k, c) in &config.overrides {
            c.validate()
                .map_err(|e| RegistryConfigError::option_error(Some(k.clone()), e))?;
        }
        let global = match config.global {
            Some(cap) => Some(
                Global::build(
                    cap,
                    (&config.defaults, &config.overrides, config.max_keys),
                    clock.clone(),
                    observer.clone(),
                )
                .map_err(|r| RegistryConfigError {
                    key: r.key,
                    option: r.option,
                    error: None,
                    detail: Some(r.detail),
                })?,
            ),
            None => None,
        };
        Ok(Self {
            map: RwLock::new(HashMap::new()),
            defaults: config.defaults,
            overrides: config.overrides,
            max_keys: config.max_keys,
            clock,
            observer: ObserverField(observer),
            tick: AtomicWord::new(0),
            key_limit_rejections: AtomicWord::new(0),
            closed: AtomicBool::new(false),
            limits: Mutex::new(None),
            revision: AtomicWord::new(0),
            global,
        })
    }

    /// The configuration a key gets.
    pub fn config_for(&self, key: &str) -> Config {
        self.overrides.get(key).copied().unwrap_or(self.defaults)
    }

    /// How many keys exist now.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no key exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `max_keys`.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// New keys rejected `key_limit` so far.
    pub fn key_limit_rejections(&self) -> u64 {
        self.key_limit_rejections.load(Relaxed) as u64
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Box<str>, Entry>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self, e: &Entry) {
        e.last_used.store(self.tick.fetch_add(1, Relaxed), Relaxed);
    }

    fn key_error(&self, key: &str, reason: Reason) -> KeyedError {
        // The snapshot describes the bulkhead the key would get (its start limit and the
        // stored limits included).
        let fresh = match &self.global {
            Some(g) => Ok(g.bh.snapshot()),
            None => self.fresh(key).map(|bh| bh.snapshot()),
        };
        let snapshot = match fresh {
            Ok(s) => s,
            Err(_) => {
                let c = self.config_for(key);
                Snapshot {
                    limit: c.max_concurrent,
                    available: c.max_concurrent as i64,
                    max_queue: c.max_queue,
                    ..Snapshot::default()
                }
            }
        };
        KeyedError {
            key: key.into(),
            error: AcquireError::Rejected(Rejection::new(reason, snapshot)),
        }
    }

    /// The bulkhead of `key`, created on first use. The returned `Arc` is an *outside handle*:
    /// while it lives, the entry is never evicted.
    ///
    /// # Errors
    /// `key_limit` when `max_keys` keys exist and none is evictable; `shutdown` after
    /// [`close`](Self::close) for a key that does not exist yet. Under a global cap a key has
    /// no bulkhead of its own: [`AcquireError::Config`] with
    /// [`ClassError::Keyed`](crate::config::classes::ClassError::Keyed) (use the acquire
    /// methods, [`key_stats`](Self::key_stats) and [`global_stats`](Self::global_stats)).
    pub fn get(&self, key: &str) -> Result<Arc<Bulkhead>, KeyedError> {
        if self.global.is_some() {
            return Err(KeyedError {
                key: key.into(),
                error: AcquireError::Config(ConfigError::Class(
                    crate::config::classes::ClassError::Keyed,
                )),
            });
        }
        self.lookup(key).map(|(bh, ..)| bh)
    }

    /// The bulkhead that decides `key`'s admissions (created on first use): the key's own, or
    /// under a global cap the shared admission (docs/design.md §9.2) — whose class for `key`
    /// only [`admit`](Self::admit) and [`would_admit`](Self::would_admit) supply, so admit
    /// through those, never on this bulkhead directly. For a binding that polls and expires its
    /// queued tickets on the deciding bulkhead (`Waiter::from_ticket`, `Bulkhead::expire`).
    /// Unlike [`get`](Self::get) it works under a global cap; there the returned `Arc` does not
    /// keep the key from eviction (a held call or a waiter of the key does).
    ///
    /// # Errors
    /// `key_limit`, `shutdown` as [`get`](Self::get).
    pub fn admission_of(&self, key: &str) -> Result<Arc<Bulkhead>, KeyedError> {
        self.lookup(key).map(|(bh, ..)| bh)
    }

    /// The admission of `key` (created on first use): its bulkhead, or the shared admission
    /// and its class under a global cap; and the handle that keeps it from eviction.
    fn lookup(&self, key: &str) -> Result<Lookup, KeyedError> {
        if let Some(e) = self.read().get(key) {
            self.touch(e);
            return Ok((e.bh.clone(), e.class, e.handle.clone()));
        }
        self.insert(key)
    }

    fn insert(&self, key: &str) -> Result<Lookup, KeyedError> {
        if self.closed.load(Acquire) {
            return Err(self.key_error(key, Reason::Shutdown));
        }
        if let Some(g) = &self.global {
            return self.insert_keyed(g, key);
        }
        // Built outside the lock (it allocates the ring).
        let bh = Bulkhead::with_observer(
            self.config_for(key),
            self.clock.clone(),
            self.observer.0.clone(),
            Some(key),
        )
        .map(Arc::new)
        .map_err(|e| KeyedError {
            key: key.into(),
            error: AcquireError::Config(e),
        })?;
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.get(key) {
            // Another thread created it meanwhile.
            self.touch(e);
            return Ok((e.bh.clone(), e.class, e.handle.clone()));
        }
        if map.len() >= self.max_keys && !self.evict(&mut map) {
            drop(map);
            self.key_limit_rejections.fetch_add(1, Relaxed);
            return Err(self.key_error(key, Reason::KeyLimit));
        }
        if self.closed.load(Acquire) {
            bh.close();
        }
        // Keys created after an `apply_limits` are built with its limits (C33 step 4): read
        // under the map's write lock, which `apply_limits` holds while it stores them. The new
        // bulkhead has no waiter, so no waker runs under the lock.
        self.apply_stored(&bh, key);
        let entry = Entry {
            bh: bh.clone(),
            class: 0,
            handle: Arc::new(()),
            last_used: AtomicWord::new(self.tick.fetch_add(1, Relaxed)),
        };
        let handle = entry.handle.clone();
        map.insert(key.into(), entry);
        Ok((bh, 0, handle))
    }

    /// Removes the least recently used evictable key; `false` if none is.
    fn evict(&self, map: &mut HashMap<Box<str>, Entry>) -> bool {
        let victim = map
            .iter()
            .filter(|(_, e)| e.evictable(self.global.as_ref()))
            .min_by_key(|(_, e)| e.last_used.load(Relaxed))
            .map(|(k, _)| k.clone());
        victim.is_some_and(|k| map.remove(&k).is_some())
    }

    /// The limit `key` gets under a global cap: the stored limits' (of the last
    /// `apply_limits`), else its configuration's `max_concurrent`.
    fn key_limit(&self, key: &str) -> u64 {
        let stored = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        stored
            .as_ref()
            .and_then(|l| l.snapshot_for(key).limit)
            .unwrap_or(self.config_for(key).max_concurrent)
    }

    /// A new key under the global cap `g`: a free class (evicting an idle key if needed) with
    /// the key's limit as its ceiling, assigned under the map's write lock.
    fn insert_keyed(&self, g: &Global, key: &str) -> Result<Lookup, KeyedError> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.get(key) {
            self.touch(e);
            return Ok((e.bh.clone(), e.class, e.handle.clone()));
        }
        if map.len() >= self.max_keys && !self.evict(&mut map) {
            drop(map);
            self.key_limit_rejections.fetch_add(1, Relaxed);
            return Err(self.key_error(key, Reason::KeyLimit));
        }
        let class = g
            .free_class(map.values().map(|e| e.class))
            .expect("fewer keys than classes");
        // The class is idle (never used, or its key was evicted idle): no pass is needed.
        g.assign(
            class,
            key,
            self.key_limit(key),
            self.config_for(key).observe,
        );
        let entry = Entry {
            bh: g.bh.clone(),
            class,
            handle: Arc::new(()),
            last_used: AtomicWord::new(self.tick.fetch_add(1, Relaxed)),
        };
        let handle = entry.handle.clone();
        map.insert(key.into(), entry);
        Ok((g.bh.clone(), class, handle))
    }

    fn keyed<T>(key: &str, r: Result<T, AcquireError>) -> Result<T, KeyedError> {
        r.map_err(|error| KeyedError {
            key: key.into(),
            error,
        })
    }

    /// What an admission of `request` on `key` would decide now (docs/design.md §5.6), without
    /// creating the key: an existing key answers through its bulkhead's
    /// [`would_admit`](Bulkhead::would_admit); a key that does not exist yet is refused as
    /// `get` would refuse it (`shutdown` after [`close`](Self::close), `key_limit` when
    /// `max_keys` keys exist and none is evictable), else asked of the bulkhead it would get
    /// (its configuration with the registry's stored limits: a `start_limit` of 0 refuses, a
    /// raised ceiling admits a heavier weight), built and dropped. Counts nothing.
    pub fn would_admit(&self, key: &str, request: &Request) -> WouldAdmit {
        let reject = |reason| WouldAdmit::Reject(self.key_error(key, reason).error);
        let existing = {
            let map = self.read();
            if let Some(e) = map.get(key) {
                // The handle keeps the key (and under a cap its class) from eviction meanwhile.
                Some((e.bh.clone(), e.class, e.handle.clone()))
            } else {
                if self.closed.load(Acquire) {
                    return reject(Reason::Shutdown);
                }
                let evictable = || map.values().any(|e| e.evictable(self.global.as_ref()));
                if map.len() >= self.max_keys && !evictable() {
                    return reject(Reason::KeyLimit);
                }
                None
            }
        };
        // Asked after the map's lock is dropped: a classed bulkhead's dry run may run a
        // dispatcher pass owed to others, whose wakers must never run under this lock.
        if let Some((bh, class, _handle)) = existing {
            return match self.global {
                Some(_) => bh.would_admit(&request.class(class)),
                None => bh.would_admit(request),
            };
        }
        {}
        if let Some(g) = &self.global {
            // A new key gets an idle class with its limit as the ceiling: the spare class
            // (idle, ceiling `MAX_PERMITS`) decides the rest exactly — unless the key observes
            // its own limit, which then holds nothing back.
            if request.weight > self.key_limit(key) && !self.config_for(key).observe.concurrency() {
                return reject(Reason::ConcurrencyLimit);
            }
            return g.bh.would_admit(&request.class(global::SPARE));
        }
        // Asked of the bulkhead the key would get — its configuration (`start_limit`, observe
        // mode, …) with the registry's stored limits applied — so the dry run and the real
        // admission share one decision function (a review found `start_limit` and stored limits
        // ignored here). Built, asked and dropped: a rare path, nothing is counted or kept.
        match self.fresh(key) {
            Ok(bh) => bh.would_admit(request),
            Err(e) => WouldAdmit::Reject(AcquireError::Config(e)),
        }
    }

    /// A bulkhead as `key` would be created now (its configuration, the stored limits applied),
    /// not in the map.
    fn fresh(&self, key: &str) -> Result<Bulkhead, ConfigError> {
        let bh = Bulkhead::with_observer(self.config_for(key), self.clock.clone(), None, None)?;
        self.apply_stored(&bh, key);
        Ok(bh)
    }

    /// Installs the stored limits (of the last `apply_limits`, if any) on `key`'s fresh
    /// bulkhead. They were validated for every configuration when applied, so this cannot fail.
    fn apply_stored(&self, bh: &Bulkhead, key: &str) {
        let stored = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = stored.as_ref() {
            let r = bh.apply_limits(&l.snapshot_for(key));
            debug_assert!(r.is_ok(), "{r:?}");
        }
    }

    /// [`Bulkhead::admit`] for `key` (created on first use; docs/design.md §5): the whole
    /// request — weight, cost, observe, queue timeout, no-wait — decided by the key's bulkhead,
    /// or under a global cap by the shared admission in the key's class (the request's own
    /// `class` is replaced by the key's). The key cannot be evicted while the decision is made,
    /// nor afterwards while the returned call holds or the waiter waits (both count in the
    /// key's class or bulkhead). A key that cannot be created (`key_limit`, `shutdown`) is
    /// `Decision::Rejected` with that error. For a host that polls waiters itself (a binding).
    pub fn admit(
        &self,
        key: &str,
        request: &Request,
        waker: Option<&core::task::Waker>,
    ) -> crate::Decision<Arc<Bulkhead>, 0> {
        let (bh, class, _handle) = match self.lookup(key) {
            Ok(found) => found,
            Err(e) => return crate::Decision::Rejected(e.error),
        };
        match self.global {
            Some(_) => bh.admit_owned(&request.class(class), waker),
            None => bh.admit_owned(request, waker),
        }
    }

    /// Takes `weight` permits of `key`'s bulkhead now, or fails without waiting. The permit
    /// keeps the entry alive only while it is held.
    ///
    /// # Errors
    /// As [`Bulkhead::try_acquire`], plus `key_limit`.
    pub fn try_acquire(&self, key: &str, weight: u64) -> Result<OwnedPermit, KeyedError> {
        let (bh, class, _handle) = self.lookup(key)?;
        if self.global.is_none() {
            return Self::keyed(key, bh.try_acquire_owned(weight));
        }
        let r = Request::new(weight).class(class).no_wait();
        Self::keyed(
            key,
            match bh.admit_owned(&r, None) {
                crate::Decision::Granted(call) => Ok(call),
                crate::Decision::Rejected(e) => Err(e),
                crate::Decision::Queued(_) => unreachable!("a no-wait request never queues"),
            },
        )
    }

    /// Waits for `weight` permits of `key`'s bulkhead (no deadline of its own).
    ///
    /// # Errors
    /// As [`Bulkhead::acquire`], plus `key_limit`.
    pub fn acquire(
        &self,
        key: &str,
        weight: u64,
    ) -> impl Future<Output = Result<OwnedPermit, KeyedError>> + Send + 'static {
        let key = key.to_string();
        let found = self.lookup(&key);
        async move {
            // The handle lives until the acquire ends: the key is not evicted under it.
            let (bh, class, _handle) = found?;
            let r = crate::front::acquire::AcquireOf::in_class(bh, weight, class).await;
            Self::keyed(&key, r)
        }
    }

    /// [`acquire`](Self::acquire) that settles `timeout` when `sleep` finishes first.
    ///
    /// # Errors
    /// As [`Bulkhead::acquire_timeout`], plus `key_limit`.
    pub fn acquire_timeout<S: Future + Send + 'static>(
        &self,
        key: &str,
        weight: u64,
        sleep: S,
    ) -> impl Future<Output = Result<OwnedPermit, KeyedError>> + Send + 'static {
        let key = key.to_string();
        let found = self.lookup(&key);
        async move {
            let (bh, class, _handle) = found?;
            let r =
                crate::front::acquire::AcquireTimeoutOf::in_class(bh, weight, class, sleep).await;
            Self::keyed(&key, r)
        }
    }

    /// [`Bulkhead::acquire_blocking`] on `key`'s bulkhead.
    ///
    /// # Errors
    /// As [`Bulkhead::acquire_blocking`], plus `key_limit`.
    pub fn acquire_blocking(
        &self,
        key: &str,
        weight: u64,
        timeout: Option<Duration>,
    ) -> Result<OwnedPermit, KeyedError> {
        let (bh, class, _handle) = self.lookup(key)?;
        Self::keyed(key, Bulkhead::blocking_via(bh, weight, class, timeout))
    }

    /// The stats of every key, `{key: stats}` in key order. Under a global cap every key maps
    /// to the shared admission's stats (a key has no bulkhead of its own): read a key's own
    /// counts with [`key_stats`](Self::key_stats).
    pub fn stats(&self) -> BTreeMap<String, Stats> {
        // The lock is dropped before any stats read: a read may commit a breaker transition
        // and call the observer, which may use this registry.
        let entries: Vec<(String, Arc<Bulkhead>)> = self
            .read()
            .iter()
            .map(|(k, e)| (k.to_string(), e.bh.clone()))
            .collect();
        entries.into_iter().map(|(k, bh)| (k, bh.stats())).collect()
    }

    /// Under a global cap, `key`'s own counts (its class in the shared admission: `ceiling` is
    /// its limit, `in_flight` what it holds, `queued` its waiters); `None` for a key that does
    /// not exist, or without a global cap (read [`stats`](Self::stats)). Does not create the
    /// key.
    pub fn key_stats(&self, key: &str) -> Option<crate::stats::ClassStats> {
        let g = self.global.as_ref()?;
        let class = self.read().get(key)?.class;
        g.bh.class_stats(class)
    }

    /// Under a global cap, the shared admission's stats (`limit` is the cap, `active` what all
    /// keys hold together); `None` without one.
    pub fn global_stats(&self) -> Option<Stats> {
        self.global.as_ref().map(|g| g.bh.stats())
    }

    /// The keys that exist now.
    pub fn keys(&self) -> Vec<String> {
        self.read().keys().map(|k| k.to_string()).collect()
    }

    /// Closes every bulkhead (their waiters are rejected `shutdown`); a key asked for afterwards
    /// is refused `shutdown` (a bulkhead created by a racing `get` is closed before it is
    /// returned).
    pub fn close(&self) {
        self.closed.store(true, Release);
        // As in `stats`: the lock is dropped first, since closing wakes waiters, whose wake-ups
        // (a C callback, say) may use this registry.
        if let Some(g) = &self.global {
            g.bh.close();
            return;
        }
        let all: Vec<Arc<Bulkhead>> = self.read().values().map(|e| e.bh.clone()).collect();
        for bh in all {
            bh.close();
        }
    }

    /// The revision whose limits every key enforces: 0 until the first
    /// [`apply_limits`](Self::apply_limits) returned.
    pub fn revision(&self) -> u64 {
        // Acquire: pairs with the Release store after the last key's install.
        self.revision.load(Acquire) as u64
    }

    /// Installs `limits` for every key, those that exist and those created later
    /// (docs/design.md §9), all or nothing: validated first — the revision above the
    /// registry's, every override key canonical, and every existing key's bulkhead and every
    /// configuration (the defaults' and each override's) able to take its snapshot — then
    /// stored for new keys and installed on each existing key with that key's
    /// [`Bulkhead::apply_limits`] (shrinks first, growth grants waiters, a limit above a
    /// key's `max_concurrent` raises its ceiling). Existing keys are installed outside the
    /// map's lock (their wakers may use this registry); [`revision`](Self::revision) reports
    /// the new revision once every key enforces it. No lock is held while keys install (a
    /// grant runs wakers, which may call this registry, even `apply_limits`); concurrent calls
    /// are ordered by the revision check under the map's lock, and each key keeps the highest
    /// revision it was given, as does [`revision`](Self::revision); a key's own
    /// `apply_limits` with a higher revision in between keeps that key's newer limits.
    ///
    /// # Errors
    /// [`RegistryLimitsError`]; nothing changes.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Config, KeyLimits, Registry, RegistryConfig, RegistryLimits};
    /// let reg = Registry::new(RegistryConfig {
    ///     defaults: Config { max_concurrent: 30, max_queue: 0, ..Config::default() },
    ///     ..RegistryConfig::default()
    /// })?;
    /// reg.get("k1")?; // exists before the update
    /// let mut l = RegistryLimits::new(1);
    /// l.defaults = KeyLimits { limit: Some(150), ..KeyLimits::default() }; // above max_concurrent
    /// reg.apply_limits(&l)?;
    /// assert_eq!(reg.get("k1")?.stats().limit, 150);
    /// assert_eq!(reg.get("k2")?.stats().limit, 150); // created after it: the same
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply_limits(&self, limits: &RegistryLimits) -> Result<(), RegistryLimitsError> {
        for k in limits.overrides.keys() {
            if canonical_key(k).ok().as_deref() != Some(k.as_str()) {
                return Err(RegistryLimitsError::Key(k.clone()));
            }
        }
        match &self.global {
            Some(g) => return self.apply_global(g, limits),
            None if limits.global.is_some() => return Err(RegistryLimitsError::NoGlobal),
            None => {}
        }
        let existing: Vec<(String, Arc<Bulkhead>)> = {
            let map = self.map.write().unwrap_or_else(|e| e.into_inner());
            let mut stored = self.limits.lock().unwrap_or_else(|e| e.into_inner());
            let current = stored.as_ref().map_or(0, |l| l.revision);
            if limits.revision <= current && limits.revision != 0 {
                return Err(RegistryLimitsError::Stale { current });
            }
            let keyed = |key: Option<&str>, error| RegistryLimitsError::Limits {
                key: key.map(str::to_string),
                error,
            };
            // Keys not created yet: the defaults' configuration and each override's.
            let default_key = "";
            RegistryLimits::check_config(&self.defaults, &limits.snapshot_for(default_key))
                .map_err(|e| keyed(None, e))?;
            for (k, c) in &self.overrides {
                RegistryLimits::check_config(c, &limits.snapshot_for(k))
                    .map_err(|e| keyed(Some(k), e))?;
            }
            // Keys the limits override that do not exist yet: built from their own
            // configuration later (a review found these unchecked).
            for k in limits.overrides.keys() {
                if !map.contains_key(k.as_str()) {
                    RegistryLimits::check_config(&self.config_for(k), &limits.snapshot_for(k))
                        .map_err(|e| keyed(Some(k), e))?;
                }
            }
            for (k, e) in map.iter() {
                e.bh.check_limits(&limits.snapshot_for(k))
                    .map_err(|err| keyed(Some(k), err))?;
            }
            *stored = Some(limits.clone());
            map.iter()
                .map(|(k, e)| (k.to_string(), e.bh.clone()))
                .collect()
        };
        for (key, bh) in &existing {
            // Validated above; only a key's own newer apply in between can refuse (it wins).
            let _ = bh.apply_limits(&limits.snapshot_for(key));
        }
        // Release: a reader that sees the revision sees every key's install. `fetch_max`: two
        // applies may install at once (each key keeps the higher revision); the registry's
        // revision never goes back.
        self.revision
            .fetch_max(limits.revision as crate::sync::Word, Release);
        Ok(())
    }

    /// [`apply_limits`](Self::apply_limits) under a global cap: validated whole (the revision,
    /// every key entry naming only a `limit`, the shared admission taking `global`), then,
    /// under the map's lock and so in revision order, every existing key's new limit stored as
    /// its class's ceiling and the limits stored for new keys; then the shared admission's
    /// `apply_limits` (the cap; it records the revision, and a newer revision installed in
    /// between wins) and one pass that grants whatever the raises let go.
    fn apply_global(&self, g: &Global, limits: &RegistryLimits) -> Result<(), RegistryLimitsError> {
        limits.check_keyed()?;
        let snapshot = limits.global_snapshot();
        {
            let map = self.map.write().unwrap_or_else(|e| e.into_inner());
            let mut stored = self.limits.lock().unwrap_or_else(|e| e.into_inner());
            let current = stored.as_ref().map_or(0, |l| l.revision);
            if limits.revision <= current && limits.revision != 0 {
                return Err(RegistryLimitsError::Stale { current });
            }
            g.bh.check_limits(&snapshot)
                .map_err(RegistryLimitsError::Global)?;
            for (k, e) in map.iter() {
                if let Some(l) = limits.snapshot_for(k).limit {
                    g.set_ceiling(e.class, l);
                }
            }
            *stored = Some(limits.clone());
        }
        // Validated above; only a newer revision installed in between refuses (it wins).
        let _ = g.bh.apply_limits(&snapshot);
        g.bh.rate_tick();
        self.revision
            .fetch_max(limits.revision as crate::sync::Word, Release);
        Ok(())
    }

    /// Changes the limit of `key`'s bulkhead (creating it if needed).
    ///
    /// # Errors
    /// `key_limit`, or [`AcquireError::Config`] naming `limit` when it is out of range.
    pub fn set_limit(&self, key: &str, limit: u64) -> Result<(), KeyedError> {
        let (bh, class, _handle) = self.lookup(key)?;
        if self.global.is_some() {
            // The key's class's ceiling (a raise grants its waiters before this returns).
            return bh
                .set_class_ceiling(class, Some(limit), None)
                .map_err(|e| KeyedError {
                    key: key.into(),
                    error: AcquireError::Config(e),
                });
        }
        bh.set_limit(limit).map_err(|e: ConfigError| KeyedError {
            key: key.into(),
            error: AcquireError::Config(e),
        })
    }
}
