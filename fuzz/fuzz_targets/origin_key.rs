//! `origin_key` (docs/design.md §9) on arbitrary bytes: never a panic; idempotent
//! (`origin_key(origin_key(x)) == origin_key(x)` for every accepted `x`); the result is its
//! documented shape (`scheme://host:port`, lowercase, no whitespace); the registry's
//! `canonical_key` agrees with it and is idempotent too; and the C ABI's `hg_origin_key` (the
//! URL's bytes not NUL-terminated, into a buffer of an arbitrary exact size) answers the same
//! key, the same length, a refusal for invalid UTF-8, and never writes past the buffer.
#![no_main]

use std::ffi::c_char;

use hullguard::{hg_origin_key, hg_status};
use hullguard_core::{origin_key, registry::canonical_key};
use hullguard_fuzz::Exact;
use libfuzzer_sys::fuzz_target;

/// `hg_origin_key` on `url` into a buffer of exactly `buf_len` bytes (NULL when 0).
fn c_origin_key(url: &[u8], buf_len: usize) -> (hg_status, usize, Vec<u8>) {
    let u = Exact::of(url);
    let buf = Exact::zeroed(buf_len);
    let p = if buf_len == 0 {
        std::ptr::null_mut()
    } else {
        buf.ptr::<c_char>()
    };
    let mut out_len = usize::MAX;
    let s = hg_origin_key(u.ptr(), url.len(), p, buf_len, &mut out_len);
    (s, out_len, buf.bytes().to_vec())
}

fuzz_target!(|data: &[u8]| {
    let Some((&size, url)) = data.split_first() else {
        return;
    };
    let text = std::str::from_utf8(url);
    let key = text.ok().map(origin_key);
    if let Some(Ok(k)) = &key {
        assert_eq!(origin_key(k).as_ref(), Ok(k), "not idempotent for {url:?}");
        let (scheme, rest) = k.split_once("://").expect("scheme://");
        let (host, port) = rest.rsplit_once(':').expect("host:port");
        assert!(!scheme.is_empty() && !host.is_empty(), "{k:?}");
        assert!(port.parse::<u16>().is_ok(), "port of {k:?}");
        assert!(
            !k.bytes()
                .any(|b| b.is_ascii_uppercase() || b.is_ascii_whitespace()),
            "{k:?} is not lowercase without whitespace"
        );
        assert_eq!(canonical_key(k).as_ref(), Ok(k));
    }
    if let Ok(t) = text {
        match canonical_key(t) {
            Ok(c) => assert_eq!(canonical_key(&c), Ok(c.clone()), "canonical_key of {t:?}"),
            Err(_) => assert!(t.contains("://") && matches!(key, Some(Err(_)))),
        }
    }

    // The C ABI: a buffer of 0 ..= 63 bytes (sizes around the key's length are the edges).
    let buf_len = usize::from(size % 64);
    let (s, out_len, buf) = c_origin_key(url, buf_len);
    match &key {
        None => assert_eq!(s, hg_status::HG_STATUS_INVALID_ARGUMENT, "invalid UTF-8"),
        Some(Err(_)) => assert_eq!(s, hg_status::HG_STATUS_INVALID_ARGUMENT),
        Some(Ok(k)) => {
            assert_eq!(out_len, k.len(), "out_len");
            if k.len() < buf_len {
                assert_eq!(s, hg_status::HG_STATUS_OK);
                assert_eq!(&buf[..k.len()], k.as_bytes());
                assert_eq!(buf[k.len()], 0, "NUL-terminated");
            } else {
                assert_eq!(
                    s,
                    hg_status::HG_STATUS_INVALID_ARGUMENT,
                    "too small a buffer"
                );
                assert!(
                    buf.iter().all(|&b| b == 0),
                    "a refused call wrote the buffer"
                );
            }
        }
    }
});
