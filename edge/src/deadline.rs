//! The deadline header: a `grpc-timeout` value in, the request's budget out
//! (docs/design.md §5.9). The parser is the core's, one rule for every edge adapter.

pub use hullguard_core::deadline::parse_grpc_timeout;
