//! The only module that names an atomics backend: loom under `cfg(loom)`, `portable-atomic` with
//! the feature of that name, `core::sync::atomic` otherwise. Everything else imports from here.
//!
//! It also fixes the *word*: the width of the permit counter, tickets and cell stamps. The word is
//! 64 bits where the target has native 64-bit atomics and 32 bits elsewhere (thumbv6m, thumbv7em),
//! so no operation ever falls back to a lock-based 64-bit emulation.

#![allow(clippy::disallowed_types)]

#[cfg(all(loom, feature = "std"))]
pub(crate) use loom::sync::atomic::AtomicBool;
#[cfg(all(loom, target_has_atomic = "64"))]
pub(crate) use loom::sync::atomic::AtomicU64 as AtomicWord;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::Ordering;

#[cfg(all(not(loom), feature = "portable-atomic", feature = "std"))]
pub(crate) use portable_atomic::AtomicBool;
#[cfg(all(not(loom), feature = "portable-atomic", not(target_has_atomic = "64")))]
pub(crate) use portable_atomic::AtomicU32 as AtomicWord;
#[cfg(all(not(loom), feature = "portable-atomic", target_has_atomic = "64"))]
pub(crate) use portable_atomic::AtomicU64 as AtomicWord;
#[cfg(all(not(loom), feature = "portable-atomic"))]
pub(crate) use portable_atomic::Ordering;

#[cfg(all(not(loom), not(feature = "portable-atomic"), feature = "std"))]
pub(crate) use core::sync::atomic::AtomicBool;
#[cfg(all(
    not(loom),
    not(feature = "portable-atomic"),
    not(target_has_atomic = "64")
))]
pub(crate) use core::sync::atomic::AtomicU32 as AtomicWord;
#[cfg(all(not(loom), not(feature = "portable-atomic"), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::AtomicU64 as AtomicWord;
#[cfg(all(not(loom), not(feature = "portable-atomic")))]
pub(crate) use core::sync::atomic::Ordering;

/// The unsigned machine word of the engine (permit counter, tickets, stamps).
#[cfg(target_has_atomic = "64")]
pub(crate) type Word = u64;
/// The unsigned machine word of the engine (permit counter, tickets, stamps).
#[cfg(not(target_has_atomic = "64"))]
pub(crate) type Word = u32;
/// The signed view of [`Word`], used for `available` (negative after a shrink).
#[cfg(target_has_atomic = "64")]
pub(crate) type SWord = i64;
/// The signed view of [`Word`], used for `available` (negative after a shrink).
#[cfg(not(target_has_atomic = "64"))]
pub(crate) type SWord = i32;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(loom))]
pub(crate) use self::cell::UnsafeCell;

#[cfg(not(loom))]
mod cell {
    /// `core::cell::UnsafeCell` with loom's closure API, so the same code runs under both.
    #[derive(Debug, Default)]
    pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(core::cell::UnsafeCell::new(value))
        }

        /// Runs `f` with a mutable raw pointer to the value; the caller upholds exclusivity.
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

/// One turn of a wait for another thread's short, non-blocking step (an `apply_limits` being
/// installed): a spin hint, or under loom a yield so that the model runs the other thread.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(all(not(loom), feature = "std"))]
    std::thread::yield_now();
    #[cfg(all(not(loom), not(feature = "std")))]
    core::hint::spin_loop();
}

#[cfg(all(feature = "std", loom))]
pub(crate) use loom::sync::Mutex;
/// A `std::sync::Mutex` (loom's under `cfg(loom)`), only for the drain-waiter list, never for
/// admission state.
#[cfg(all(feature = "std", not(loom)))]
pub(crate) use std::sync::Mutex;
