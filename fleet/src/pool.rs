//! A pool's name and its keys (docs/design.md §16.2). Every key of one pool shares the hash tag
//! `{hg:<pool>}`, so a Redis Cluster keeps them in one slot and one function call touches them
//! all.

use core::fmt;

/// The longest pool name.
pub const MAX_POOL_LEN: usize = 64;

/// The longest holder id.
pub const MAX_HOLDER_LEN: usize = 128;

/// A validated pool name: 1 ..= 64 characters of `[A-Za-z0-9_.:-]` (no braces, so the hash tag
/// is exactly the pool).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolName(String);

/// Why a pool name or a holder id was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError {
    /// `"pool"`, `"holder"` or `"holder label"`.
    pub what: &'static str,
    /// The refused text.
    pub value: String,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.what {
            "pool" => write!(
                f,
                "pool must be 1..={MAX_POOL_LEN} characters of [A-Za-z0-9_.:-], got {:?}",
                self.value
            ),
            "holder label" => write!(
                f,
                "holder must be 1..=64 printable ASCII characters without spaces (a label: the id adds :<pid>:<random>), got {:?}",
                self.value
            ),
            _ => write!(
                f,
                "holder must be 1..={MAX_HOLDER_LEN} printable ASCII characters without spaces, got {:?}",
                self.value
            ),
        }
    }
}

impl std::error::Error for NameError {}

impl PoolName {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`NameError`] naming `pool` and the allowed form.
    pub fn new(name: &str) -> Result<Self, NameError> {
        let ok = !name.is_empty()
            && name.len() <= MAX_POOL_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if ok {
            Ok(PoolName(name.to_owned()))
        } else {
            Err(NameError {
                what: "pool",
                value: name.to_owned(),
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The pool's six keys of its permits, in the order every function of the library takes
    /// them.
    pub fn keys(&self) -> Keys {
        self.keys_of(Dimension::Permits)
    }

    /// The six keys of one dimension: the permits' (`{hg:<pool>}:cfg`, …) or the budget's
    /// (`{hg:<pool>}:budget:cfg`, …) — one hash tag, one cluster slot for both.
    pub fn keys_of(&self, dimension: Dimension) -> Keys {
        let tag = format!("{{hg:{}}}:{}", self.0, dimension.infix());
        Keys(KEY_SUFFIXES.map(|s| format!("{tag}{s}")))
    }
}

impl fmt::Display for PoolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a lease table of a pool counts (docs/design.md §16.10): its permits, or the units of
/// its fleet budget — two independent lease tables under one hash tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// Permits (calls in flight).
    Permits,
    /// Budget units (tokens, bytes in flight).
    Budget,
}

impl Dimension {
    /// The keys' infix: `""` or `"budget:"`.
    pub const fn infix(self) -> &'static str {
        match self {
            Dimension::Permits => "",
            Dimension::Budget => "budget:",
        }
    }

    /// `"permits"` or `"budget"`.
    pub const fn name(self) -> &'static str {
        match self {
            Dimension::Permits => "permits",
            Dimension::Budget => "budget",
        }
    }
}

/// The keys' suffixes: `cfg` (HASH: limit, epoch, fence, base, used, want_sum, learn_until,
/// rev), `held`, `gen`, `want`, `served` (HASH holder → count / fencing token / want / ms of
/// its last grow), `exp` (ZSET holder → server ms of expiry).
pub const KEY_SUFFIXES: [&str; 6] = ["cfg", "held", "gen", "exp", "want", "served"];

/// A pool's six keys (`{hg:<pool>}:cfg`, …), in library order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys(pub [String; 6]);

impl Keys {
    /// The keys as string slices.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

/// Whether `s` is 1 ..= `max` printable ASCII characters without spaces (holder ids, labels).
pub fn is_printable(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Validates a holder id: 1 ..= 128 printable ASCII characters without spaces.
///
/// # Errors
/// [`NameError`] naming `holder`.
pub fn check_holder(id: &str) -> Result<(), NameError> {
    if is_printable(id, MAX_HOLDER_LEN) {
        Ok(())
    } else {
        Err(NameError {
            what: "holder",
            value: id.to_owned(),
        })
    }
}

/// A fresh holder id for this process: `<label>:<pid>:<16 hex digits>`, the label the
/// hostname by default (the random part from the standard library's per-process hash seed and
/// the clock: unique per process and per call, not secret). A user's `holder` option is only
/// the label: two processes can never share an id (a shared id would let one's new lease drop
/// the other's live block).
pub fn new_holder_id(label: Option<&str>) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| is_printable(s, usize::MAX))
        .unwrap_or_else(|| "host".to_owned());
    let host: String = label.map_or(host, str::to_owned).chars().take(64).collect();
    format!("{host}:{}:{:016x}", std::process::id(), h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = PoolName::new("llm.openai").unwrap().keys();
        assert_eq!(k.0[0], "{hg:llm.openai}:cfg");
        assert!(k.iter().all(|s| s.starts_with("{hg:llm.openai}:")));
        let b = PoolName::new("llm.openai")
            .unwrap()
            .keys_of(Dimension::Budget);
        assert_eq!(b.0[5], "{hg:llm.openai}:budget:served");
    }

    #[test]
    fn bad_names_are_refused_by_name() {
        for bad in ["", "a b", "a{b}", &"x".repeat(65)] {
            let e = PoolName::new(bad).unwrap_err();
            assert!(e.to_string().starts_with("pool must be 1..=64"), "{e}");
        }
        assert!(check_holder("h 1").is_err());
        let id = new_holder_id(None);
        assert!(check_holder(&id).is_ok(), "{id}");
        assert_ne!(id, new_holder_id(None));
        assert!(new_holder_id(Some("api")).starts_with(&format!("api:{}:", std::process::id())));
    }
}
