//! # hullguard-host
//!
//! One bulkhead for every process on a Linux host (docs/design.md §14): a crash-safe lease
//! ledger in shared memory, over hullguard-core, which queues each process's own waiters.
//! A SIGKILLed holder's permits come back within about one probe period (its liveness lock
//! drops and any process reclaims its slot with one fenced CAS); a stopped or hung one's after
//! the lease TTL (its late releases are refused `stale lease`); a forked child gets its own
//! slot. Design notes: REACH.md Part A in the project's research folder.
//!
//! | layer | module | what |
//! |---|---|---|
//! | L0 | `sync`, [`layout`], [`crash`], [`error`] | the atomics backend; the segment's words; named protocol steps; errors |
//! | L1 | [`segment`] | the protocol over the words: ledger, tickets, doorbells, reclaim, expiry |
//! | L2 | `os`, `file` | OFD locks, futexes, fork; the segment file: create, attach, map |
//! | L3 | [`options`] | the option table |
//! | L4 | `attachment`, `queue`, `permit` | one process's slot, tickets, keeper thread; one handle's local queue; [`HostPermit`], grants, rejections, tickets |
//! | L5 | [`stats`], `bulkhead`, `acquire` | [`HostStats`]; [`HostBulkhead`]; the asynchronous admission [`HostAcquire`] |
//! | L6 | [`inspect`], [`cli`] | segments seen from outside: list, show, reap, remove; the `hullguard host` command |

#![warn(missing_docs, missing_debug_implementations)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

#[cfg(not(all(
    target_os = "linux",
    target_endian = "little",
    target_has_atomic = "64"
)))]
compile_error!("hullguard-host needs Linux (OFD locks, futexes) on a little-endian 64-bit target");

mod sync;

pub mod crash;
pub mod layout;
pub mod segment;

#[cfg(not(loom))]
mod acquire;
#[cfg(not(loom))]
mod attachment;
#[cfg(not(loom))]
mod bulkhead;
#[cfg(not(loom))]
pub mod cli;
#[cfg(not(loom))]
mod file;
#[cfg(not(loom))]
pub mod inspect;
#[cfg(not(loom))]
mod os;
#[cfg(not(loom))]
mod permit;
#[cfg(not(loom))]
mod queue;

pub mod error;
pub mod options;
#[cfg(not(loom))]
pub mod stats;

#[cfg(all(test, loom))]
mod loom_models;

#[cfg(not(loom))]
pub use crate::{
    acquire::HostAcquire, bulkhead::HostBulkhead, permit::HostPermit, stats::HostStats,
};
/// The request type of [`HostBulkhead::admit_blocking`] and [`HostBulkhead::acquire`] (the
/// core's), re-exported so a user needs no second dependency.
pub use hullguard_core::Request;

pub use crate::{
    error::{HostError, LeaseError},
    options::{HOST_OPTIONS, HostOptions, HostValue, OnMismatch},
};

/// This library's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// This library, as a segment's creator tag and error messages name it.
pub const LIBRARY: &str = concat!("hullguard-host ", env!("CARGO_PKG_VERSION"));
