//! The fleet tests' fixtures: real `redis-server` processes (`hullguard_testkit::redis_server`,
//! re-exported), loading the library, and fleet bulkheads in real processes ([`procs`]: the
//! worker role, the pool and its oracle).

#![allow(dead_code)]

pub mod procs;

pub use hullguard_testkit::redis_server::*;

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
