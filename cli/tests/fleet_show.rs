//! `hullguard fleet show POOL` against a real `redis-server`: a pool with two holders, its
//! JSON form, a missing pool, and bad usage.

use std::{process::Command, time::Duration};

use hullguard_fleet::{
    FleetBulkhead, FleetConfig, PoolName,
    redis_transport::{Reconnecting, RedisTransport},
};
use hullguard_testkit::redis_server::RedisServer;

fn hullguard(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hullguard"))
        .args(args)
        .env_remove("HULLGUARD_REDIS_URL")
        .output()
        .expect("run hullguard");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fleet_show_prints_the_pool_and_its_holders() {
    let Some(srv) = RedisServer::start() else {
        return;
    };
    let open = || {
        let client = redis::Client::open(srv.url()).unwrap();
        let mut cfg = FleetConfig::new(PoolName::new("shown").unwrap());
        cfg.max_concurrent = 8;
        cfg.budget = Some(500);
        let t = RedisTransport::new(Reconnecting::new(client, Duration::from_secs(2)));
        FleetBulkhead::open(t, cfg).unwrap()
    };
    let (a, b) = (open(), open());
    let pa = a
        .acquire_blocking(1, Some(Duration::from_secs(10)))
        .unwrap();
    let pb = b
        .acquire_blocking(1, Some(Duration::from_secs(10)))
        .unwrap();
    let (status, out, err) = hullguard(&["fleet", "show", "shown", "--redis", &srv.url()]);
    assert_eq!(status, 0, "{err}");
    assert!(
        out.starts_with("pool shown: limit 8 (rev 0), used "),
        "{out}"
    );
    assert!(out.contains("2 holders"), "{out}");
    assert!(
        out.contains(a.holder()) && out.contains(b.holder()),
        "{out}"
    );
    let (status, json, _) = hullguard(&["fleet", "show", "shown", "--json", "--redis", &srv.url()]);
    assert_eq!(status, 0);
    assert!(
        json.contains("\"dimension\":\"permits\",\"exists\":true,\"limit\":8"),
        "{json}"
    );
    // The budget's table: both holders lease units too (once each has synced it).
    let mut budget = String::new();
    for _ in 0..1000 {
        let (status, out, err) =
            hullguard(&["fleet", "show", "shown", "--budget", "--redis", &srv.url()]);
        assert_eq!(status, 0, "{err}");
        budget = out;
        if budget.contains("2 holders") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        budget.starts_with("budget of pool shown: budget 500 (rev 0)")
            && budget.contains("2 holders"),
        "{budget}"
    );
    let (status, none, _) = hullguard(&["fleet", "show", "other", "--redis", &srv.url()]);
    assert_eq!(status, 0);
    assert!(none.contains("no such pool"), "{none}");
    drop((pa, pb));
}

#[test]
fn bad_usage_and_unreachable_redis_are_clear() {
    let (status, _, err) = hullguard(&["fleet", "show"]);
    assert_eq!(status, 2);
    assert!(
        err.contains("expected: fleet show POOL") && err.contains("usage: hullguard fleet show"),
        "{err}"
    );
    let (status, _, err) = hullguard(&["fleet", "show", "p", "--redis", "redis://127.0.0.1:1/"]);
    assert_eq!(status, 1);
    assert!(err.starts_with("hullguard: redis unreachable"), "{err}");
}
