//! The only module that names an atomics backend: loom under `cfg(loom)` (the segment is then a
//! boxed word array the model owns), `core::sync::atomic` otherwise (the words live in a shared
//! mapping).

#![allow(clippy::disallowed_types)]

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};
