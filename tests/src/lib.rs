//! Black-box tests of hullguard live in `tests/` of this crate. This library holds only what
//! more than one crate's tests share: [`vectors`], the layer-neutral half of the scenario-vector
//! runners (also a dev-dependency of `hullguard-ffi`, whose runner drives the C ABI), and
//! [`model`], the reference models and their runners (driven by this crate's proptest
//! properties and by the differential fuzz targets in `fuzz/`).

pub mod model;
pub mod vectors;

/// The README's Rust examples, compiled and run as doctests of this crate (`cargo test
/// --workspace` runs them; its other languages are run by `make readme`).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeRustExamples;
