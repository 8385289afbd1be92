//! A registry's global cap (docs/design.md §9.2): every key a class of one classed admission,
//! so a key's own limit (its class's ceiling) and the cap over all keys (the admission's limit)
//! are decided in one step, FIFO across keys — never a nested acquire of a global bulkhead and
//! then a key's (which holds a global unit while it waits for its key, or lets a key's waiter
//! pass an older one of another key).
//!
//! Class 0 is the registry's spare class: never given to a key, always idle, ceiling
//! `MAX_PERMITS`; a dry run for a key that does not exist yet asks it. Keys get classes
//! `1 ..= max_keys`, a class at a time, and give it back when evicted (only while idle).

use std::{
    boxed::Box,
    collections::HashMap,
    format,
    string::{String, ToString},
    sync::{Arc, RwLock},
    vec::Vec,
};

use crate::{
    clock::ClockSource,
    config::{
        Config,
        classes::{ClassSpec, ClassTable, MAX_CLASSES},
    },
    event::{Event, Observer, SharedObserver},
    front::bulkhead::Bulkhead,
};

/// The cap over every key of a registry (docs/design.md §9.2): at most `limit` permits held
/// by all keys together and `max_queue` waiters across them; each key keeps its own
/// `max_concurrent` (its class's ceiling, which may be above `limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalCap {
    /// Permits all keys together may hold, `1 ..= MAX_PERMITS` (raised, shrunk or set to 0,
    /// the kill switch, by `Registry::apply_limits`' `global`).
    pub limit: u64,
    /// Live waiters across all keys, `0 ..= MAX_QUEUE` (the ring is sized by it).
    pub max_queue: u64,
}

/// The most keys a registry under a global cap may hold: one class each, plus the spare.
pub const MAX_GLOBAL_KEYS: usize = MAX_CLASSES - 1;

/// The spare class (see the module docs).
pub(crate) const SPARE: u16 = 0;

/// The shared admission of a registry under a global cap.
#[derive(Debug)]
pub(crate) struct Global {
    pub(crate) bh: Arc<Bulkhead>,
    classes: usize,
    /// Each class's key, for the events (`None` without an observer).
    names: Option<Arc<Names>>,
}

/// The key of each class, written when a class is given to a key (under the registry's map
/// lock) and read by [`Naming`] for every event of that class.
struct Names(Box<[RwLock<Option<Arc<str>>>]>);

impl core::fmt::Debug for Names {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Names(..)")
    }
}

/// The user's observer under a global cap: every admission event is delivered with the key
/// whose class it happened in (a key's class cannot be reused while one of its calls or
/// waiters lives, so the name is the key's). Reconfigurations and state changes are the
/// shared admission's (`key` `None`).
struct Naming {
    inner: SharedObserver,
    names: Arc<Names>,
}

impl Observer for Naming {
    fn on_event(&self, event: &Event<'_>) {
        match event.class().and_then(|c| self.names.0.get(usize::from(c))) {
            Some(slot) => {
                let name = slot.read().unwrap_or_else(|e| e.into_inner());
                self.inner.on_event(&event.with_key(name.as_deref()));
            }
            None => self.inner.on_event(event),
        }
    }

    fn admission_events(&self) -> bool {
        self.inner.admission_events()
    }
}

/// Why a registry's configuration cannot take a global cap: the override key (if one), the
/// option, and what is wrong (the registry makes its `RegistryConfigError` of it).
pub(crate) struct Refused {
    pub(crate) key: Option<String>,
    pub(crate) option: &'static str,
    pub(crate) detail: String,
}

fn bad(key: Option<&str>, option: &'static str, detail: String) -> Refused {
    Refused {
        key: key.map(str::to_string),
        option,
        detail,
    }
}

impl Global {
    /// The admission of `config` under `cap`. Refused by name: more keys than
    /// [`MAX_GLOBAL_KEYS`]; per-key options a class cannot carry (a key takes only its own
    /// `max_concurrent`: an override differing from the defaults in anything else); options of
    /// the defaults that would silently become global (`breaker`, `start_limit`), and what a
    /// classed bulkhead refuses (`enabled = false`, `adaptive`, `max_reservations`). A key's
    /// `observe` observes its own limit (its class's ceiling) under the enforced cap.
    pub(crate) fn build(
        cap: GlobalCap,
        (defaults, overrides, max_keys): (&Config, &HashMap<String, Config>, usize),
        clock: ClockSource,
        observer: Option<SharedObserver>,
    ) -> Result<Self, Refused> {
        if max_keys > MAX_GLOBAL_KEYS {
            return Err(bad(
                None,
                "max_keys",
                format!(
                    "max_keys must be 1..={MAX_GLOBAL_KEYS} under a global cap (each key is a \
                     class of one admission), got {max_keys}"
                ),
            ));
        }
        let d = defaults;
        if d.resilience.breaker.is_some() {
            return Err(bad(
                None,
                "breaker",
                "a breaker per key is not supported under a global cap yet (it would be one \
                 breaker for all keys); build the registry without `global`"
                    .into(),
            ));
        }
        if d.start_limit.is_some() {
            return Err(bad(
                None,
                "start_limit",
                "start_limit is not supported under a global cap; start with global.limit 0 \
                 (the kill switch) instead"
                    .into(),
            ));
        }
        for (k, o) in overrides {
            let own = Config {
                max_concurrent: d.max_concurrent,
                observe: d.observe,
                ..*o
            };
            if own != *d {
                return Err(bad(
                    Some(k),
                    "overrides",
                    format!(
                        "under a global cap a key takes only its own max_concurrent and observe; \
                         every other option comes from the defaults (key {k:?} differs)"
                    ),
                ));
            }
        }
        let classes = max_keys + 1;
        let specs: Vec<ClassSpec> = (0..classes).map(|_| ClassSpec::DEFAULT).collect();
        let names = observer
            .as_ref()
            .map(|_| Arc::new(Names((0..classes).map(|_| RwLock::new(None)).collect())));
        let observer = observer.map(|inner| -> SharedObserver {
            Arc::new(Naming {
                inner,
                names: names.clone().expect("built with the observer"),
            })
        });
        // A key's `observe` is its class's: it observes the key's own limit (its ceiling); the
        // cap over all keys stays enforced (C32 step 3).
        let shared = Config {
            max_concurrent: cap.limit,
            max_queue: cap.max_queue,
            observe: crate::observe::Observe::Off,
            ..*d
        };
        let bh =
            Bulkhead::with_classes_and_observer(shared, &ClassTable::new(&specs), clock, observer)
                .map_err(|e| {
                    // `global.limit` and `global.max_queue` are the shared admission's
                    // `max_concurrent` and `max_queue`: named as the user wrote them.
                    let option = match e.option() {
                        "max_concurrent" => "global.limit",
                        "max_queue" => "global.max_queue",
                        o => o,
                    };
                    bad(None, option, format!("global: {e}"))
                })?;
        // Nobody waits yet: a store, no pass and no `reconfigure` event.
        bh.store_class_ceiling(SPARE, crate::MAX_PERMITS);
        Ok(Global {
            bh: Arc::new(bh),
            classes,
            names,
        })
    }

    /// A class no key in `used` has (`None`: all are taken).
    pub(crate) fn free_class(&self, used: impl Iterator<Item = u16>) -> Option<u16> {
        let mut taken = [false; MAX_CLASSES];
        for c in used {
            taken[c as usize] = true;
        }
        (1..self.classes as u16).find(|&c| !taken[c as usize])
    }

    /// Gives class `class` to `key`, whose own limit is `limit`, observed per `observe` (the
    /// class is idle: nobody waits in it, so no pass is needed and no waker runs under the
    /// registry's lock).
    pub(crate) fn assign(&self, class: u16, key: &str, limit: u64, observe: crate::Observe) {
        if let Some(n) = &self.names {
            *n.0[usize::from(class)]
                .write()
                .unwrap_or_else(|e| e.into_inner()) = Some(key.into());
        }
        self.bh.store_class_ceiling(class, limit);
        self.bh.store_class_observe(class, observe);
    }

    /// Sets class `class`'s ceiling to a key's new limit (the key keeps its class).
    pub(crate) fn set_ceiling(&self, class: u16, limit: u64) {
        self.bh.store_class_ceiling(class, limit);
    }

    /// Whether class `class` holds nothing and has no waiter.
    pub(crate) fn is_idle(&self, class: u16) -> bool {
        self.bh
            .class_stats(class)
            .is_some_and(|s| s.in_flight == 0 && s.queued == 0 && s.budget_in_use == 0)
    }
}
