//! C ABI over hullguard-core (built out by the C ABI issue).
//!
//! Placeholder: this crate only reserves its place in the workspace layout
//! (DESIGN.md §1) until its issue lands.
