//! The canonical origin key (docs/design.md §9): `scheme://host:port`, lowercase, IDNA (punycode)
//! host, IPv6 in brackets, the default port made explicit — `https://api.example.com:443`.
//!
//! This is the one implementation every layer calls (Python `hullguard.origin_key`, Node
//! `originKey`, C `hg_origin_key`); integrations never reimplement it. Parsing follows the
//! WHATWG URL Standard through the `url` crate (the same rules browsers and `fetch` use).

use core::fmt;
use std::{format, string::String};

/// Why a URL has no origin key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OriginKeyError {
    /// Not an absolute URL (the parser's message).
    InvalidUrl(String),
    /// The URL has no host (`file:///x`, `mailto:a@b`).
    NoHost,
    /// The scheme has no default port and the URL names none.
    NoPort,
}

impl fmt::Display for OriginKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OriginKeyError::InvalidUrl(m) => write!(f, "url is not an absolute URL: {m}"),
            OriginKeyError::NoHost => f.write_str("url has no host"),
            OriginKeyError::NoPort => {
                f.write_str("url names no port and its scheme has no default port")
            }
        }
    }
}

impl core::error::Error for OriginKeyError {}

/// The canonical origin key of `url`.
///
/// # Errors
/// [`OriginKeyError`] for a relative or malformed URL, a URL without a host, or a scheme with
/// no default port and no explicit one.
///
/// # Examples
/// ```
/// use hullguard_core::origin_key;
/// assert_eq!(origin_key("HTTPS://API.Example.com/v1?q=1").unwrap(), "https://api.example.com:443");
/// assert_eq!(origin_key("http://[::1]:8080/").unwrap(), "http://[::1]:8080");
/// assert_eq!(origin_key("https://bücher.example/").unwrap(), "https://xn--bcher-kva.example:443");
/// assert!(origin_key("/relative/path").is_err());
/// ```
pub fn origin_key(url: &str) -> Result<String, OriginKeyError> {
    let parsed =
        url::Url::parse(url.trim()).map_err(|e| OriginKeyError::InvalidUrl(format!("{e}")))?;
    // `host_str` is lowercase and IDNA-encoded for special schemes, and bracketed for IPv6.
    let host = parsed.host_str().ok_or(OriginKeyError::NoHost)?;
    if host.is_empty() {
        return Err(OriginKeyError::NoHost);
    }
    let port = parsed
        .port_or_known_default()
        .ok_or(OriginKeyError::NoPort)?;
    Ok(format!(
        "{}://{}:{}",
        parsed.scheme(),
        host.to_ascii_lowercase(),
        port
    ))
}
