//! Runnable demos of hullguard.
//!
//! This library is empty on purpose: the crate exists for its examples. `make demo` runs
//! `examples/isolation_demo.rs` (`cargo run --release -p hullguard-examples --example
//! isolation_demo`): two real HTTP upstreams on loopback, one healthy and one degraded, behind
//! a shared budget of concurrent requests, first without and then with one hullguard
//! `Bulkhead` per upstream origin.

/// The README's Rust code blocks, compiled by `cargo test --doc` so they keep matching the API.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
