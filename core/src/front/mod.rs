//! The front ends (docs/design.md §5): the [`Bulkhead`](bulkhead::Bulkhead) type over the
//! engine, the one admission ([`admit`](bulkhead::Bulkhead::admit): a [`Request`](request::Request)
//! in, a [`Decision`](admit::Decision) out) and its handles — [`Call`](call::Call) for granted
//! work, [`Waiter`](waiter::Waiter) for queued work — and what is built on them: the futures,
//! the blocking waits, `drain`, and the guarded `call`.
//!
//! Dependencies point one way: `bulkhead` (the type and the guarded-call steps) ← `call`,
//! `waiter`, `request` ← `admit` ← `acquire`, `blocking`, `drain`, `guarded`, `legacy`;
//! `usage` (streaming settlement's answers) and `orphan` ← `call`; `dry_run` (the read-only twin of `admit`) uses `bulkhead` and `request` only; `emitter`
//! (where events go) ← `bulkhead` ← `events` (the admission events' steps); `class_ceilings` ←
//! `class_table` (a class table's run-time part) ← `apply` (revisioned limits), over `bulkhead`;
//! `load_shed` (overload signals in, `shed` refusals out) over `bulkhead`, used by `admit`,
//! `dry_run` and `reserve`; `lease` (a leased block as the limit) over `bulkhead`.

pub mod acquire;
pub mod admit;
pub mod apply;
#[cfg(feature = "std")]
pub mod blocking;
pub mod bulkhead;
pub mod call;
pub mod class_ceilings;
pub mod class_table;
#[cfg(feature = "std")]
pub mod drain;
pub mod dry_run;
pub(crate) mod emitter;
pub(crate) mod events;
pub mod guarded;
mod lease;
mod legacy;
pub mod load_shed;
pub mod metrics;
pub mod orphan;
pub mod request;
pub(crate) mod reservations;
pub mod reserve;
pub mod usage;
pub mod waiter;
