//! The numeric limits every layer shares (docs/design.md §7.1): the largest permit count and
//! queue length, and the default bulkhead size. A leaf module: options, policies and the engine
//! all read it.

/// Largest permit count accepted anywhere (limits, weights, `max_concurrent`).
///
/// 2⁶⁰−1 on targets with 64-bit atomics. On targets with only 32-bit atomics (thumbv6m,
/// thumbv7em) it is 2²⁹−1: the permit word holds a *signed* `available` (it goes negative after
/// a shrink, down to `1 − MAX_PERMITS`) plus two flag bits, and 31 + 2 bits do not fit in 32.
#[cfg(target_has_atomic = "64")]
pub const MAX_PERMITS: u64 = (1 << 60) - 1;
/// Largest permit count accepted anywhere (limits, weights, `max_concurrent`).
///
/// 2²⁹−1 here, because this target has no 64-bit atomics (see the 64-bit docs for why).
#[cfg(not(target_has_atomic = "64"))]
pub const MAX_PERMITS: u64 = (1 << 29) - 1;

/// Largest budget (the second dimension, docs/design.md §4.5): 2⁴⁰−1 units with 64-bit atomics,
/// 2¹⁸−1 with only 32-bit ones. The budget's free units share the permit word with the free
/// permits (one CAS admits both), in a biased field of 42 (20) bits that leaves room for a
/// shrink and for overrun below zero.
#[cfg(target_has_atomic = "64")]
pub const MAX_BUDGET: u64 = (1 << 40) - 1;
/// Largest budget (see the 64-bit docs): 2¹⁸−1 here.
#[cfg(not(target_has_atomic = "64"))]
pub const MAX_BUDGET: u64 = (1 << 18) - 1;

/// Largest `max_concurrent` of a bulkhead with a budget: 2¹⁸−1 with 64-bit atomics, 2⁸−1 with
/// only 32-bit ones. The permits keep the word's top 20 (10) bits, signed; half of that range is
/// left for what may sit below zero — a disabled bulkhead's over-admission plus a shrink.
#[cfg(target_has_atomic = "64")]
pub const MAX_CONCURRENT_WITH_BUDGET: u64 = (1 << 18) - 1;
/// Largest `max_concurrent` of a bulkhead with a budget (see the 64-bit docs): 2⁸−1 here.
#[cfg(not(target_has_atomic = "64"))]
pub const MAX_CONCURRENT_WITH_BUDGET: u64 = (1 << 8) - 1;

/// Largest revision of an [`apply_limits`](crate::Bulkhead::apply_limits) snapshot: 2⁵³−1 with
/// 64-bit atomics (every JavaScript number up to it is exact), 2³¹−1 with only 32-bit ones (the
/// revision shares its word with the "being applied" bit).
#[cfg(target_has_atomic = "64")]
pub const MAX_REVISION: u64 = (1 << 53) - 1;
/// Largest revision (see the 64-bit docs): 2³¹−1 here.
#[cfg(not(target_has_atomic = "64"))]
pub const MAX_REVISION: u64 = (1 << 31) - 1;

/// Largest `max_queue` (2²⁰ live waiters).
pub const MAX_QUEUE: u64 = 1 << 20;

/// Largest `max_reservations` (2¹⁶ slots, allocated once).
pub const MAX_RESERVATIONS: u64 = 1 << 16;

/// The default `max_concurrent` (10): the common HTTP-client bulkhead default.
pub const DEFAULT_MAX_CONCURRENT: u64 = 10;
