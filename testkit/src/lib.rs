//! # hullguard-testkit
//!
//! Test support shared by hullguard's crates (never shipped):
//!
//! | module | what |
//! |---|---|
//! | [`child`] | re-executing a test binary as a child role, talking to it, signalling and reaping it |
//! | [`redis_server`] | real `redis-server` processes (one node, or a cluster) on free loopback ports |

pub mod child;
pub mod redis_server;
