//! Ready-made classifiers for [`AdmissionLayer::classify`](crate::AdmissionLayer::classify):
//! a request's admission class from a header's value or from its path.
//!
//! A class is an index into the bulkhead's class table (`0 .. bh.class_count()`,
//! docs/design.md §4.8); the tables here map names onto those indices, as the Python and Node
//! bindings map their class names. A classifier runs once per request, before admission, on the
//! request's head ([`http::request::Parts`]); it must be cheap and must not block.

use http::{HeaderName, request::Parts};

/// Classifies by the value of header `name`: the index `table` maps the value to (an exact,
/// case-sensitive match of the whole value), `default` when the header is missing, repeated
/// (its first value is read), not UTF-8, or not in the table.
///
/// # Panics
/// When `name` is not a valid header name.
///
/// # Examples
/// ```
/// use hullguard_tower::classify::by_header;
/// let classify = by_header("x-priority", [("batch", 0), ("interactive", 1)], 0);
/// let (parts, ()) = http::Request::get("/")
///     .header("x-priority", "interactive")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert_eq!(classify(&parts), 1);
/// let (parts, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert_eq!(classify(&parts), 0);
/// ```
pub fn by_header<'a>(
    name: &str,
    table: impl IntoIterator<Item = (&'a str, u16)>,
    default: u16,
) -> impl Fn(&Parts) -> u16 + Send + Sync + 'static {
    let name = HeaderName::from_bytes(name.as_bytes())
        .unwrap_or_else(|e| panic!("by_header: {name:?} is not a header name: {e}"));
    let table: Vec<(Box<[u8]>, u16)> = table
        .into_iter()
        .map(|(value, class)| (Box::from(value.as_bytes()), class))
        .collect();
    move |parts: &Parts| {
        parts
            .headers
            .get(&name)
            .and_then(|v| table.iter().find(|(k, _)| **k == *v.as_bytes()))
            .map_or(default, |&(_, class)| class)
    }
}

/// Classifies by the request's path: the index of the **longest** prefix in `table` that the
/// path starts with on a segment boundary (`"/admin"` matches `/admin` and `/admin/users`, not
/// `/administrator`; a prefix ending in `/` matches whatever follows), `default` when none does.
///
/// # Examples
/// ```
/// use hullguard_tower::classify::by_path_prefix;
/// let classify = by_path_prefix([("/api", 0), ("/api/checkout", 1), ("/health", 2)], 0);
/// let class = |path: &str| classify(&http::Request::get(path).body(()).unwrap().into_parts().0);
/// assert_eq!(class("/api/checkout/42"), 1);
/// assert_eq!(class("/api/search"), 0);
/// assert_eq!(class("/healthz"), 0); // not on a segment boundary
/// assert_eq!(class("/health"), 2);
/// ```
pub fn by_path_prefix<'a>(
    table: impl IntoIterator<Item = (&'a str, u16)>,
    default: u16,
) -> impl Fn(&Parts) -> u16 + Send + Sync + 'static {
    let mut table: Vec<(Box<str>, u16)> = table
        .into_iter()
        .map(|(prefix, class)| (Box::from(prefix), class))
        .collect();
    // Longest first: the first match is the longest.
    table.sort_by_key(|(prefix, _)| core::cmp::Reverse(prefix.len()));
    move |parts: &Parts| {
        let path = parts.uri.path();
        table
            .iter()
            .find(|(prefix, _)| on_boundary(path, prefix))
            .map_or(default, |&(_, class)| class)
    }
}

/// Whether `path` starts with `prefix` on a segment boundary.
fn on_boundary(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(path: &str, header: Option<&str>) -> Parts {
        let mut b = http::Request::get(path);
        if let Some(v) = header {
            b = b.header("X-Class", v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn header_values_map_exactly() {
        let c = by_header("X-Class", [("critical", 1), ("batch", 2)], 0);
        assert_eq!(c(&parts("/", Some("critical"))), 1);
        assert_eq!(c(&parts("/", Some("batch"))), 2);
        assert_eq!(c(&parts("/", Some("Critical"))), 0);
        assert_eq!(c(&parts("/", Some("critical "))), 0);
        assert_eq!(c(&parts("/", None)), 0);
    }

    #[test]
    fn longest_prefix_on_a_segment_boundary_wins() {
        let c = by_path_prefix([("/", 9), ("/a", 1), ("/a/b", 2), ("/c/", 3)], 0);
        assert_eq!(c(&parts("/a", None)), 1);
        assert_eq!(c(&parts("/a/", None)), 1);
        assert_eq!(c(&parts("/a/b/c", None)), 2);
        assert_eq!(c(&parts("/a/bc", None)), 1);
        assert_eq!(c(&parts("/ab", None)), 9);
        assert_eq!(c(&parts("/c/x", None)), 3);
        assert_eq!(c(&parts("/c", None)), 9);
        let none = by_path_prefix([("/a", 1)], 7);
        assert_eq!(none(&parts("/b", None)), 7);
    }

    #[test]
    #[should_panic(expected = "is not a header name")]
    fn a_bad_header_name_panics_when_built() {
        let _ = by_header("bad name", [], 0);
    }
}
