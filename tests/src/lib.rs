//! Black-box tests of hullguard live in `tests/` of this crate. This library holds only what
//! more than one crate's tests share: [`vectors`], the layer-neutral half of the scenario-vector
//! runners (also a dev-dependency of `hullguard-ffi`, whose runner drives the C ABI).

pub mod vectors;
