//! The fleet tests' fixtures: real `redis-server` processes (`hullguard_testkit::redis_server`,
//! re-exported), loading the library, and fleet bulkheads in real processes ([`procs`]: the
//! worker role, the pool and its oracle).

#![allow(dead_code)]

pub mod procs;

pub use hullguard_testkit::redis_server::*;

use std::time::{Duration, Instant};

use hullguard_fleet::redis_transport::{Reconnecting, RedisTransport};

/// A `redis` crate transport to `srv` that reconnects (500 ms timeouts).
pub fn transport(srv: &RedisServer) -> RedisTransport<Reconnecting> {
    let client = redis::Client::open(srv.url()).expect("client");
    RedisTransport::new(Reconnecting::new(client, Duration::from_millis(500)))
}

/// Polls `f` every 5 ms until it holds, for at most `within` (panics with `what`).
pub fn eventually(within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < end, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `FUNCTION LOAD REPLACE <hullguard library>`. On a cluster connection the `redis` crate routes
/// `FUNCTION LOAD` to every primary (and requires every one to succeed).
pub fn load_library(conn: &mut dyn redis::ConnectionLike) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(hullguard_fleet::script::LIBRARY)
        .query(conn)
        .expect("FUNCTION LOAD REPLACE hullguard");
    assert_eq!(name, "hullguard");
}
