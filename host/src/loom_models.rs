//! Loom models of the host protocol (docs/design.md §14.8): filled in below.
