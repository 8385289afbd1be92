//! Black-box tests of hullguard live in `tests/` of this crate; this library is empty.
