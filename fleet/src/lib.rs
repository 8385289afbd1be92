//! # hullguard-fleet
//!
//! One limit for a fleet of processes on many hosts, held in Redis (docs/design.md §16): each
//! process leases a *block* of permits under a TTL and admits locally on it, lock-free, at a
//! local bulkhead's speed; one fenced `hg_sync` per beat (and when demand changes) grows,
//! shrinks and renews the block by fair share of the holders' wants (Doorman's block leasing,
//! `../shared/research/REACH.md` Part B).
//!
//! | layer | module | what |
//! |---|---|---|
//! | L0 | [`pool`], [`protocol`], [`script`] | pool names and keys; the library's calls and replies; the Lua library |
//! | L1 | [`lease`] | the lease manager: the holder's state machine, transport-agnostic, in the caller's time |
//! | L2 | [`transport`], `redis_transport` | how a call reaches Redis: a trait, and the `redis` crate's connections |
//! | L3 | [`options`], [`error`], [`stats`] | the options and their table; errors; the stats |
//! | L4 | [`fleet_core`] | [`FleetCore`]: a core bulkhead in leased mode and its lease manager — what every binding drives (step, complete, wait) |
//! | L5 | [`bulkhead`] | [`FleetBulkhead`]: the Rust binding — a driver thread over a [`Transport`] |
//! | L1 | [`cli`] | `hullguard fleet show POOL`: parsing and the report every package prints |

pub mod bulkhead;
pub mod cli;
pub mod error;
pub mod fleet_core;
pub mod lease;
pub mod options;
pub mod pool;
pub mod protocol;
#[cfg(feature = "redis")]
pub mod redis_transport;
pub mod script;
pub mod stats;
pub mod transport;

pub use crate::{
    bulkhead::FleetBulkhead,
    error::FleetError,
    fleet_core::{AppliedLimits, Command, FleetCore, Local, RawReply, Step, check_local_classes},
    lease::{Demand, LeaseConfig, LeaseManager, LeaseState, Unreachable},
    options::FleetConfig,
    pool::{Dimension, PoolName},
    stats::{FleetStats, LeaseStats},
    transport::{Transport, TransportError},
};
pub use hullguard_core::{AcquireError, Call, Decision, Outcome, Reason, Request};
