//! # hullguard-core
//!
//! A `no_std`, atomics-only bulkhead engine: a permit counter and a fixed-capacity, ticketed
//! waiter ring joined by one non-blocking dispatcher. FIFO handoff with no barging, weighted
//! permits, O(1) cancellation with exactly one winner against a grant, runtime resize, close
//! and drain, policies (circuit breaker, adaptive limit, call timeout), one admission API, one
//! option table, one stats schema and one event stream — the engine under hullguard's C ABI,
//! Python and Node bindings. The contract is `docs/design.md` in the repository.
//!
//! | layer | module | what |
//! |---|---|---|
//! | L0 | `sync`, `run_flag` | the atomics backend (core, `portable-atomic`, loom); a run flag |
//! | L0 | [`limits`], [`clock`], [`deadline`], [`outcome`], [`circuit`], [`observe`], [`load`] | shared limits; the host clock; absolute deadlines; how a call ended; breaker states; observe mode's dimensions; overload signals and their gate |
//! | L1 | [`event`] | the one event stream and its [`Observer`] |
//! | L2 | [`policy`] | [`breaker`], [`adaptive`], [`resilience`]; one bulkhead's policy state and call token |
//! | L3 | [`config`], [`reason`] | options, their table and [`PartialConfig`]; reasons, their table, rejections |
//! | L4 | `engine`, [`stats`], [`metrics`] | permit word, cells and ring (with skips), dispatcher, counters — lock-free; the stats schema and its visitor; the metric table and its walker |
//! | L5 | `front` | [`Bulkhead`], [`admit`](Bulkhead::admit) → [`Decision`]: [`Call`] / [`Waiter`]; its dry run [`would_admit`](Bulkhead::would_admit) → [`WouldAdmit`]; futures, blocking, drain, guarded `call` |
//! | L6 | [`registry`] | one bulkhead per key; the canonical [`origin_key`] (`std`) |
//!
//! A module uses only modules of its own row or above it, and no two modules (nor two files) use
//! each other: `ci/layers.py` checks both in `make test`. This file only declares and re-exports.
//!
//! # Features
//! * `alloc` — runtime-sized rings ([`Bulkhead::new`]), owned handles on `Arc<Bulkhead>`, policies.
//! * `std` (default) — blocking waits, `drain`, the default monotonic clock, the registry.
//! * `portable-atomic` — atomics from `portable-atomic`.
//! * `critical-section` — for targets without CAS (thumbv6m): atomic RMWs become short
//!   critical sections (wait-free on one core, not lock-free).
//!
//! # Example
//! ```
//! use hullguard_core::{Bulkhead, Config, Decision, Outcome, Reason, Request};
//! let bh = Bulkhead::new(Config { max_concurrent: 2, max_queue: 10, ..Config::default() })?;
//! let call = match bh.admit(&Request::new(2), None) {     // weighted
//!     Decision::Granted(call) => call,
//!     other => panic!("{other:?}"),
//! };
//! assert_eq!(bh.try_acquire(1).unwrap_err().reason(), Some(Reason::ConcurrencyLimit));
//! call.end(Outcome::Success);                             // or drop it: RAII release
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

mod engine;
mod front;
mod run_flag;
mod sync;

pub mod circuit;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod event;
pub mod limits;
pub mod load;
pub mod metrics;
pub mod observe;
pub mod outcome;
pub mod policy;
pub mod reason;
#[cfg(feature = "std")]
pub mod registry;
pub mod stats;

#[cfg(test)]
mod tests;

// ----- the modules of earlier releases, at their old paths ---------------------------------

pub use crate::front::{acquire, guarded as call};
#[cfg(feature = "std")]
pub use crate::front::{blocking, drain};
pub use crate::policy::{adaptive, resilience};
#[cfg(feature = "std")]
pub use crate::registry::origin;

/// The circuit breaker (see [`policy::breaker`]); its [`Observer`](event::Observer) lives in
/// [`event`].
pub mod breaker {
    pub use crate::{event::Observer, policy::breaker::*};
}

/// The bulkhead type and the polling API's types (their old home).
pub mod bulkhead {
    pub use crate::{
        engine::{CancelError, OverRelease, StaleTicket, Ticket},
        front::bulkhead::{Admission, Bulkhead, TicketPoll},
    };
}

/// Permits: the older names of [`Call`].
pub mod permit {
    #[cfg(feature = "alloc")]
    pub use crate::front::call::OwnedPermit;
    pub use crate::front::call::{InvalidRelease, Permit, PermitOf};
}

// ----- the crate's vocabulary -------------------------------------------------------------

pub use crate::{
    acquire::{Acquire, AcquireTimeout},
    bulkhead::{Admission, Bulkhead, CancelError, OverRelease, StaleTicket, Ticket, TicketPoll},
    call::CallError,
    clock::{Clock, ClockSource},
    config::{
        Config, ConfigError, MAX_BUDGET, MAX_CONCURRENT_WITH_BUDGET, MAX_PERMITS, MAX_QUEUE,
        PartialConfig, QueueDelay,
    },
    deadline::Deadline,
    event::{Event, EventKind, Observer},
    front::{
        admit::Decision,
        apply::{LimitsError, LimitsSnapshot},
        call::Call,
        class_ceilings::ClassLimits,
        class_table::ClassTableLimits,
        dry_run::WouldAdmit,
        orphan::OrphanError,
        request::Request,
        reserve::{Reservation, ReservationExpired, ReserveError},
        usage::{HoldChange, UsageError, UsageReport},
        waiter::{Cancelled, Waiter},
    },
    limits::MAX_REVISION,
    load::{LoadShedding, LoadSignal, LoadStats},
    metrics::{METRICS, Metric, MetricKind, MetricLabels, MetricSink},
    observe::Observe,
    outcome::Outcome,
    permit::{InvalidRelease, Permit},
    policy::CallStart,
    reason::{
        AcquireError, Bound, ClassRefusal, DimensionSnapshot, Reason, ReasonInfo, Rejection,
        RejectionDetail, Snapshot,
    },
    resilience::Resilience,
    stats::{
        BudgetStats, ClassStats, Nested, RejectedByReason, Stats, StatsVisitor, WaitHistogram,
    },
};
#[cfg(feature = "alloc")]
pub use crate::{
    acquire::{OwnedAcquire, OwnedAcquireTimeout},
    permit::OwnedPermit,
};
#[cfg(feature = "std")]
pub use crate::{
    blocking::block_on,
    drain::DrainResult,
    origin::{OriginKeyError, origin_key},
    registry::{
        KeyedError, Registry, RegistryConfig, RegistryConfigError,
        global::{GlobalCap, MAX_GLOBAL_KEYS},
        limits::{KeyLimits, RegistryLimits, RegistryLimitsError},
    },
};
