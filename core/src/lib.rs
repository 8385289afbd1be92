//! # hullguard-core
//!
//! A `no_std`, atomics-only bulkhead engine: a permit counter and a fixed-capacity, ticketed
//! waiter ring joined by one non-blocking dispatcher. FIFO handoff with no barging, weighted
//! permits, O(1) cancellation with exactly one winner against a grant, runtime resize, close
//! and drain, one stats schema — the engine under hullguard's C ABI, Python and Node bindings.
//!
//! | layer | module | what |
//! |---|---|---|
//! | L0 | `sync` | the one place that names an atomics backend (core, `portable-atomic`, loom) |
//! | L1 | `permit_word` | the packed permit word: signed `available` + `CLOSED` / `WAITERS` |
//! | L1 | `cell`, `waker_slot`, `ring` | waiter cells with ticket stamps; the fixed ring |
//! | L1 | `dispatch` | the "dispatching" / "work pending" flags and the wake batch |
//! | L2 | [`bulkhead`] | [`Bulkhead`]: admission, queueing, handoff, cancel, resize, close |
//! | L2 | [`permit`], [`acquire`] | RAII permits; runtime-agnostic acquire futures |
//! | L2 | [`breaker`] | [`Breaker`](breaker::Breaker): lock-free circuit breaker on the host clock |
//! | L2 | [`policy`], [`call`] | the guarded-call path: breaker → admission → call → outcome |
//! | — | [`resilience`], [`outcome`] | the `resilience` options; how a call ended |
//! | L2 | [`blocking`], [`drain`] | thread waits and `drain` (feature `std`) |
//! | L3 | [`registry`], [`origin`] | one bulkhead per key; the canonical origin key (`std`) |
//! | — | [`config`], [`reason`], [`stats`], [`clock`] | options, reasons and errors, stats, host clock |
//! | — | [`adaptive`] | AIMD and Gradient2 limit controllers, fed one sample at a time |
//!
//! # Features
//! * `alloc` — runtime-sized rings ([`Bulkhead::new`]), owned permits on `Arc<Bulkhead>`.
//! * `std` (default) — blocking waits, `drain`, the default monotonic clock.
//! * `portable-atomic` — atomics from `portable-atomic`.
//! * `critical-section` — for targets without CAS (thumbv6m): atomic RMWs become short
//!   critical sections (wait-free on one core, not lock-free).
//!
//! # Example
//! ```
//! use hullguard_core::{Bulkhead, Config, Reason};
//! let bh = Bulkhead::new(Config { max_concurrent: 2, max_queue: 10, ..Config::default() })?;
//! let p = bh.try_acquire(2)?;                       // weighted
//! assert_eq!(bh.try_acquire(1).unwrap_err().reason(), Some(Reason::ConcurrencyLimit));
//! drop(p);                                          // RAII release
//! assert_eq!(bh.stats().available, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    clippy::std_instead_of_core
)]
#![doc(test(attr(deny(warnings))))]
// The engine's word is `u64` or `u32` by target (see `sync`): a cast that is a no-op on one
// target is a real conversion on the other.
#![allow(clippy::unnecessary_cast)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

mod cell;
mod dispatch;
mod permit_word;
mod ring;
mod sync;
mod waker_slot;

pub mod acquire;
pub mod adaptive;
#[cfg(feature = "std")]
pub mod blocking;
pub mod breaker;
pub mod bulkhead;
pub mod call;
pub mod clock;
pub mod config;
#[cfg(feature = "std")]
pub mod drain;
#[cfg(feature = "std")]
pub mod origin;
pub mod outcome;
pub mod permit;
pub mod policy;
pub mod reason;
#[cfg(feature = "std")]
pub mod registry;
pub mod resilience;
pub mod stats;

#[cfg(test)]
mod tests;

#[cfg(feature = "alloc")]
pub use crate::{acquire::OwnedAcquire, acquire::OwnedAcquireTimeout, permit::OwnedPermit};
pub use crate::{
    acquire::{Acquire, AcquireTimeout},
    bulkhead::{Admission, Bulkhead, CancelError, OverRelease, StaleTicket, Ticket, TicketPoll},
    call::CallError,
    clock::{Clock, ClockSource},
    config::{Config, ConfigError, MAX_PERMITS, MAX_QUEUE},
    outcome::Outcome,
    permit::{InvalidRelease, Permit},
    policy::CallStart,
    reason::{AcquireError, Reason, Rejection, Snapshot},
    resilience::Resilience,
    stats::{RejectedByReason, Stats},
};
#[cfg(feature = "std")]
pub use crate::{
    blocking::block_on,
    drain::DrainResult,
    origin::{OriginKeyError, origin_key},
    registry::{KeyedError, Registry, RegistryConfig, RegistryConfigError},
};
