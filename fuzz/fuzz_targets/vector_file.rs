//! The scenario-vector file parser (docs/design.md §11): arbitrary bytes read as a vector file
//! exactly as the Rust runners read one (`serde_json`, then `tests/vectors/schema.json`), and
//! its options through the core's option table in the vector spelling
//! (`hullguard_tests::vectors::{config, registry_config}`, the runners' own parser). Never a
//! panic — a bad file is an error naming what is wrong — and whatever the parser accepts the
//! core builds: a `config` it reads is a `Bulkhead`, a `registry` a `Registry`; a registry
//! override merged over its defaults (`vectors::merge`, the JSON-level merge of the C and Node
//! runners) parses as the core's key-by-key merge does; for a file the schema accepts, every
//! step's `settles` reads. Seeds: `tests/vectors/**/*.json`.
#![no_main]

use std::sync::OnceLock;

use hullguard_core::{Bulkhead, Config, Registry};
use hullguard_tests::vectors::{self, Validator};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The largest `max_queue` the target builds a bulkhead for (a ring of up to 2^20 cells per
/// input would make it slow; the option table's range is checked either way).
const BUILD_QUEUE: u64 = 4096;

fn validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    V.get_or_init(vectors::validator)
}

fn builds(c: &Config) {
    if c.max_queue <= BUILD_QUEUE {
        match Bulkhead::new(*c) {
            Err(e) => panic!("the parser accepted a config the core refuses ({e}): {c:?}"),
            Ok(_) => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let valid = validator().validate(&v).is_ok();
    // The runners parse the options of a valid file; the parser must hold on any JSON.
    if let Some(c) = v.get("config")
        && let Ok(c) = vectors::config(Some(c))
    {
        builds(&c);
    }
    if let Some(r) = v.get("registry")
        && let Ok(rc) = vectors::registry_config(r)
    {
        builds(&rc.defaults);
        for c in rc.overrides.values() {
            builds(c);
        }
        let small = std::iter::once(&rc.defaults)
            .chain(rc.overrides.values())
            .all(|c| c.max_queue <= BUILD_QUEUE);
        if small && rc.max_keys <= 1 << 16 {
            // Under a global cap the registry checks the keys' options against it (no
            // breaker per key, …): an error there is the core's answer, not the parser's.
            match Registry::new(rc.clone()) {
                Err(e) if rc.global.is_none() => {
                    panic!("the parser accepted a registry the core refuses ({e}): {rc:?}")
                }
                Err(e) => {
                    let _ = e.to_string();
                }
                Ok(_) => {}
            }
        }
        // The JSON-level merge (the C and Node runners') parses like the core's.
        if let Some(Value::Object(over)) = r.get("overrides") {
            let canonical: Vec<_> = over
                .keys()
                .map(|k| hullguard_core::registry::canonical_key(k).ok())
                .collect();
            for (i, (key, o)) in over.iter().enumerate() {
                // Two spellings of one origin: the core keeps one of them.
                let Some(k) = &canonical[i] else {
                    continue;
                };
                if canonical.iter().filter(|c| c.as_ref() == Some(k)).count() > 1 {
                    continue;
                }
                let merged = vectors::merge(r.get("defaults"), o, 0);
                let Some(core) = rc.overrides.get(k) else {
                    continue;
                };
                match vectors::config(Some(&merged)) {
                    Ok(c) => assert_eq!(&c, core, "the JSON merge of override {key:?}"),
                    Err(e) => panic!("the core merged override {key:?}, the JSON merge: {e}"),
                }
            }
        }
    }
    if valid && let Some(Value::Array(steps)) = v.get("steps") {
        for s in steps {
            let _ = vectors::settles(s);
        }
    }
});
