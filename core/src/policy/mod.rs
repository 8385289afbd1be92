//! Policies around a bulkhead (docs/design.md §6): the circuit breaker and the adaptive limit
//! (standalone, lock-free, allocation-free state machines), the `resilience` options that
//! attach them, and the per-bulkhead policy state that the guarded-call steps drive.
//!
//! | module | what |
//! |---|---|
//! | [`breaker`] | closed / open / half-open + generation in one word, two trip modes |
//! | [`adaptive`] | AIMD and Gradient2 controllers, fed one sample at a time |
//! | [`resilience`] | the `resilience = {adaptive, breaker, call_timeout}` options |
//! | `state` | one bulkhead's policies and the token of one guarded call |

pub mod adaptive;
pub mod breaker;
pub mod resilience;
pub(crate) mod state;

pub use self::state::{CallStart, CallToken};
