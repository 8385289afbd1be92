//! Registry and origin-key unit tests.

use std::{collections::HashMap, string::ToString, vec::Vec};

use crate::{
    Config, Reason, Registry, RegistryConfig,
    origin::{OriginKeyError, origin_key},
};

fn reg(max_keys: usize) -> Registry {
    Registry::new(RegistryConfig {
        defaults: Config {
            max_concurrent: 2,
            max_queue: 2,
            ..Config::default()
        },
        overrides: HashMap::from([(
            "big".to_string(),
            Config {
                max_concurrent: 7,
                ..Config::default()
            },
        )]),
        max_keys,
        global: None,
    })
    .unwrap()
}

#[test]
fn smoke_keys_are_independent() {
    let r = reg(8);
    let a = r.try_acquire("a", 2).unwrap();
    assert_eq!(
        r.try_acquire("a", 1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let b = r.try_acquire("b", 2).unwrap();
    let stats = r.stats();
    assert_eq!(stats.keys().cloned().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(stats["a"].active, 2);
    drop((a, b));
    assert_eq!(r.stats()["a"].available, 2);
}

#[test]
fn overrides_apply_per_key() {
    let r = reg(8);
    assert_eq!(r.get("big").unwrap().max_concurrent(), 7);
    assert_eq!(r.get("small").unwrap().max_concurrent(), 2);
}

#[test]
fn lru_eviction_of_idle_entries_only() {
    let r = reg(2);
    drop(r.try_acquire("a", 1).unwrap());
    drop(r.try_acquire("b", 1).unwrap());
    drop(r.try_acquire("a", 1).unwrap()); // a is now more recent than b
    drop(r.try_acquire("c", 1).unwrap()); // evicts b, the least recently used idle entry
    let mut keys = r.keys();
    keys.sort();
    assert_eq!(keys, ["a", "c"]);
}

#[test]
fn busy_or_handled_entries_are_not_evicted() {
    let r = reg(2);
    let held = r.try_acquire("a", 1).unwrap(); // active
    let handle = r.get("b").unwrap(); // outside handle
    let e = r.try_acquire("c", 1).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::KeyLimit));
    assert_eq!(&*e.key, "c");
    assert_eq!(r.key_limit_rejections(), 1);
    drop(handle);
    assert!(r.try_acquire("c", 1).is_ok()); // b is idle with no handle now
    drop(held);
}

#[test]
fn close_rejects_everywhere() {
    let r = reg(4);
    let _ = r.get("a").unwrap();
    r.close();
    assert_eq!(
        r.try_acquire("a", 1).unwrap_err().reason(),
        Some(Reason::Shutdown)
    );
    assert_eq!(
        r.try_acquire("new", 1).unwrap_err().reason(),
        Some(Reason::Shutdown)
    );
}

#[test]
fn bad_registry_config_names_the_option() {
    let e = Registry::new(RegistryConfig {
        max_keys: 0,
        ..RegistryConfig::default()
    })
    .unwrap_err();
    assert_eq!(e.option, "max_keys");
    // The table's range holds for a hand-built config too: 1 ..= 2^32 - 1.
    for (max_keys, ok) in [
        (1, true),
        (u32::MAX as usize, true),
        (u32::MAX as usize + 1, false),
    ] {
        let r = Registry::new(RegistryConfig {
            max_keys,
            ..RegistryConfig::default()
        });
        assert_eq!(r.is_ok(), ok, "max_keys {max_keys}");
        if let Err(e) = r {
            assert_eq!(e.option, "max_keys");
        }
    }
    let e = Registry::new(RegistryConfig {
        overrides: HashMap::from([(
            "k".to_string(),
            Config {
                max_concurrent: 0,
                ..Config::default()
            },
        )]),
        ..RegistryConfig::default()
    })
    .unwrap_err();
    assert_eq!((e.key.as_deref(), e.option), (Some("k"), "max_concurrent"));
    let r = reg(2);
    let e = r.set_limit("a", 0).unwrap_err();
    assert_eq!(e.error.invalid_argument(), Some("limit"));
}

#[test]
fn origin_key_is_canonical() {
    let cases = [
        ("https://api.example.com", "https://api.example.com:443"),
        (
            "HTTPS://API.EXAMPLE.COM/v1/x?y#z",
            "https://api.example.com:443",
        ),
        (
            "https://api.example.com:443/",
            "https://api.example.com:443",
        ),
        ("http://api.example.com", "http://api.example.com:80"),
        (
            "http://user:pw@api.example.com:8080/p",
            "http://api.example.com:8080",
        ),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("http://[::1]/", "http://[::1]:80"),
        ("http://[0:0:0:0:0:0:0:1]:81/", "http://[::1]:81"),
        (
            "https://Bücher.Example/",
            "https://xn--bcher-kva.example:443",
        ),
        ("ws://chat.example/", "ws://chat.example:80"),
        ("  https://a.example/  ", "https://a.example:443"),
    ];
    for (url, key) in cases {
        assert_eq!(origin_key(url).as_deref(), Ok(key), "{url}");
    }
    assert!(matches!(
        origin_key("example.com/x"),
        Err(OriginKeyError::InvalidUrl(_))
    ));
    assert_eq!(origin_key("mailto:a@b.c"), Err(OriginKeyError::NoHost));
    assert_eq!(origin_key("foo://host/x"), Err(OriginKeyError::NoPort));
    assert_eq!(
        origin_key("foo://host:12/x").as_deref(),
        Ok("foo://host:12")
    );
}

/// A registry's dry run (docs/design.md §5.6) never creates a key and predicts what the real
/// acquire then does: through an existing key's bulkhead, or for a key not created yet by the
/// registry's own refusals (`key_limit`, `shutdown`) and the argument rules of its config.
#[test]
fn would_admit_predicts_without_creating_keys() {
    use crate::{Request, WouldAdmit};
    let r = reg(2);
    assert_eq!(r.would_admit("a", &Request::new(2)), WouldAdmit::AdmitNow);
    assert!(r.keys().is_empty(), "a dry run creates no key");
    let w = r.would_admit("a", &Request::new(3));
    assert!(matches!(
        w,
        WouldAdmit::Reject(crate::AcquireError::InvalidWeight {
            max_concurrent: 2,
            ..
        })
    ));
    assert_eq!(
        r.would_admit("big", &Request::new(7)),
        WouldAdmit::AdmitNow,
        "the override's config"
    );
    let w = r.would_admit("a", &Request::new(1).cost(1));
    assert!(matches!(
        w,
        WouldAdmit::Reject(crate::AcquireError::InvalidCost { max_budget: 0, .. })
    ));
    let a = r.try_acquire("a", 2).unwrap();
    let w = r.would_admit("a", &Request::new(1).no_wait());
    assert_eq!(w.reason(), Some(Reason::ConcurrencyLimit));
    assert_eq!(
        r.try_acquire("a", 1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let b = r.try_acquire("b", 1).unwrap();
    // Two keys, both held: a third is refused key_limit, predicted and real.
    assert_eq!(
        r.would_admit("c", &Request::new(1)).reason(),
        Some(Reason::KeyLimit)
    );
    assert_eq!(
        r.try_acquire("c", 1).unwrap_err().reason(),
        Some(Reason::KeyLimit)
    );
    drop(b); // "b" is idle and unreferenced: evictable, so "c" would be created
    assert_eq!(r.would_admit("c", &Request::new(1)), WouldAdmit::AdmitNow);
    assert_eq!(r.key_limit_rejections(), 1, "the dry run counted nothing");
    r.close();
    assert_eq!(
        r.would_admit("d", &Request::new(1)).reason(),
        Some(Reason::Shutdown)
    );
    assert_eq!(
        r.would_admit("a", &Request::new(1)).reason(),
        Some(Reason::Shutdown)
    );
    drop(a);
}
