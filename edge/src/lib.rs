// The crate's docs are its README: its example runs as this crate's doc test (it uses the lag
// probe: feature `tokio`, on by default); the repository README's "Edge shedding" block is the
// same code, checked by `tests/readme.rs`.
#![cfg_attr(feature = "tokio", doc = include_str!("../README.md"))]
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]
#![doc(test(attr(deny(warnings))))]

mod body;
pub mod classify;
mod deadline;
mod layer;
#[cfg(feature = "tokio")]
mod probe;
mod refusal;
mod service;
mod timer;

pub use crate::{
    body::AdmittedBody,
    deadline::parse_grpc_timeout,
    layer::AdmissionLayer,
    service::{AdmissionService, ResponseFuture},
    timer::{Sleep, Timer},
};
#[cfg(feature = "tokio")]
pub use crate::{
    probe::{LagProbe, spawn_lag_probe},
    timer::TokioTimer,
};
