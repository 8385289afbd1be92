//! PyO3 binding (built out by the Python binding issue).
//!
//! Placeholder: this crate only reserves its place in the workspace layout
//! (DESIGN.md §1) until its issue lands.
