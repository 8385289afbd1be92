//! The `hullguard` Redis Functions library (`fleet/lua/hullguard.lua`) against a real
//! `redis-server`: the protocol contract's scenarios, a seeded random walk checking the
//! invariants after every call, and a 3-node Redis Cluster.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{RedisCluster, RedisServer, load_library};
use hullguard_fleet::script::LIB_VERSION;
use redis::{ConnectionLike, Value};

const OK: i64 = 1;
const LOST: i64 = 0;
const FULL: i64 = 2;
const MAX_SAFE: i64 = (1 << 53) - 1;

/// The 6 keys of one pool, in the contract's order.
struct Pool {
    keys: [String; 6],
}

impl Pool {
    fn new(name: &str) -> Self {
        let tag = format!("{{hg:{name}}}");
        let k = |s: &str| format!("{tag}:{s}");
        Self {
            keys: [
                k("cfg"),
                k("held"),
                k("gen"),
                k("exp"),
                k("want"),
                k("served"),
            ],
        }
    }
    fn cfg(&self) -> &str {
        &self.keys[0]
    }
}

/// `hg_sync` arguments after the holder.
#[derive(Clone, Copy, Debug)]
struct Args {
    generation: i64,
    want: i64,
    busy: i64,
    has: i64,
    ttl_ms: i64,
    default_limit: i64,
    learn_ms: i64,
    max_holders: i64,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            generation: 0,
            want: 0,
            busy: 0,
            has: 0,
            ttl_ms: 5_000,
            default_limit: 10,
            learn_ms: 5_000,
            max_holders: 1_000,
        }
    }
}

impl Args {
    fn new() -> Self {
        Self::default()
    }
    fn generation(self, generation: i64) -> Self {
        Self { generation, ..self }
    }
    fn want(self, want: i64) -> Self {
        Self { want, ..self }
    }
    fn busy(self, busy: i64) -> Self {
        Self { busy, ..self }
    }
    fn has(self, has: i64) -> Self {
        Self { has, ..self }
    }
    fn ttl_ms(self, ttl_ms: i64) -> Self {
        Self { ttl_ms, ..self }
    }
    fn default_limit(self, default_limit: i64) -> Self {
        Self {
            default_limit,
            ..self
        }
    }
    fn learn_ms(self, learn_ms: i64) -> Self {
        Self { learn_ms, ..self }
    }
    fn max_holders(self, max_holders: i64) -> Self {
        Self {
            max_holders,
            ..self
        }
    }
}

/// `hg_sync`'s reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reply {
    status: i64,
    generation: i64,
    held: i64,
    target: i64,
    limit: i64,
    ttl_ms: i64,
    epoch: i64,
    rev: i64,
    holders: i64,
    learning: i64,
    used: i64,
}

fn fcall(name: &str, pool: &Pool) -> redis::Cmd {
    let mut c = redis::cmd("FCALL");
    c.arg(name).arg(6).arg(&pool.keys[..]);
    c
}

fn try_sync(
    conn: &mut dyn ConnectionLike,
    pool: &Pool,
    holder: &str,
    a: Args,
) -> redis::RedisResult<Reply> {
    let v: Vec<i64> = fcall("hg_sync", pool)
        .arg(holder)
        .arg(a.generation)
        .arg(a.want)
        .arg(a.busy)
        .arg(a.has)
        .arg(a.ttl_ms)
        .arg(a.default_limit)
        .arg(a.learn_ms)
        .arg(a.max_holders)
        .query(conn)?;
    assert_eq!(v.len(), 11, "hg_sync reply: {v:?}");
    Ok(Reply {
        status: v[0],
        generation: v[1],
        held: v[2],
        target: v[3],
        limit: v[4],
        ttl_ms: v[5],
        epoch: v[6],
        rev: v[7],
        holders: v[8],
        learning: v[9],
        used: v[10],
    })
}

fn sync(conn: &mut dyn ConnectionLike, pool: &Pool, holder: &str, a: Args) -> Reply {
    let r = try_sync(conn, pool, holder, a).expect("hg_sync");
    assert_eq!(r.ttl_ms, a.ttl_ms, "ttl echoed");
    if r.status != OK {
        assert_eq!(
            (r.generation, r.held, r.target),
            (0, 0, 0),
            "LOST/FULL reply: {r:?}"
        );
    }
    r
}

fn release(conn: &mut dyn ConnectionLike, pool: &Pool, holder: &str, generation: i64) -> i64 {
    fcall("hg_release", pool)
        .arg(holder)
        .arg(generation)
        .query(conn)
        .expect("hg_release")
}

fn set_limit(conn: &mut dyn ConnectionLike, pool: &Pool, limit: i64, rev: i64) -> [i64; 3] {
    let v: Vec<i64> = fcall("hg_set_limit", pool)
        .arg(limit)
        .arg(rev)
        .arg(10)
        .query(conn)
        .expect("hg_set_limit");
    v.try_into().expect("hg_set_limit reply has 3 integers")
}

/// `hg_stats`, decoded: the 9 header integers and `(holder, gen, held, want, exp)` rows.
fn stats(conn: &mut dyn ConnectionLike, pool: &Pool) -> ([i64; 9], Vec<(String, [i64; 4])>) {
    let v: Vec<Value> = redis::cmd("FCALL_RO")
        .arg("hg_stats")
        .arg(6)
        .arg(&pool.keys[..])
        .query(conn)
        .expect("hg_stats");
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("hg_stats: expected an integer, got {other:?}"),
    };
    assert!(v.len() >= 9, "hg_stats header: {v:?}");
    let head: [i64; 9] = std::array::from_fn(|i| int(&v[i]));
    let n = usize::try_from(head[8]).expect("n >= 0");
    assert_eq!(v.len(), 9 + 5 * n, "hg_stats length for n = {n}");
    let rows = v[9..]
        .chunks(5)
        .map(|c| {
            let Value::BulkString(h) = &c[0] else {
                panic!("hg_stats: holder is a string, got {:?}", c[0])
            };
            let h = String::from_utf8(h.clone()).expect("utf-8 holder");
            (h, [int(&c[1]), int(&c[2]), int(&c[3]), int(&c[4])])
        })
        .collect();
    (head, rows)
}

fn hgetall(conn: &mut dyn ConnectionLike, key: &str) -> BTreeMap<String, i64> {
    redis::cmd("HGETALL").arg(key).query(conn).expect("HGETALL")
}

fn cfg_field(conn: &mut dyn ConnectionLike, pool: &Pool, field: &str) -> Option<i64> {
    redis::cmd("HGET")
        .arg(pool.cfg())
        .arg(field)
        .query(conn)
        .expect("HGET cfg")
}

/// `FLUSHALL`, then 2 ms: the next pool state starts in a later server ms than the lost one
/// (its fence base, epoch * 1000, must be above every generation the lost state handed out).
fn flushall(conn: &mut dyn ConnectionLike) {
    redis::cmd("FLUSHALL").exec(conn).expect("FLUSHALL");
    sleep(Duration::from_millis(2));
}

/// A server with the library loaded, and a connection to it; `None` when skipped.
fn server() -> Option<(RedisServer, redis::Connection)> {
    let srv = RedisServer::start()?;
    let mut conn = srv.conn();
    load_library(&mut conn);
    Some((srv, conn))
}

#[test]
fn version_answers_lib_version() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let v: i64 = redis::cmd("FCALL_RO")
        .arg("hg_version")
        .arg(0)
        .query(&mut conn)
        .expect("FCALL_RO hg_version 0");
    assert_eq!(v, LIB_VERSION);
    // Loading again (REPLACE) is idempotent.
    load_library(&mut conn);
    let v: i64 = redis::cmd("FCALL")
        .arg("hg_version")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(v, LIB_VERSION);
}

/// REACH B3's run, on the contract: fair share on limit 10, stale gen, reap after TTL, fenced
/// release.
#[test]
fn fair_share_lost_reap_and_fenced_release() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("b3");
    let c = &mut conn;
    let short = Args::new().ttl_ms(300).learn_ms(300);

    // A wants 6 of 10: everything fits, it gets 6. A's lease is short (300 ms).
    let a = sync(c, &p, "A", short.want(6));
    let a_sent = Instant::now();
    assert_eq!((a.status, a.held, a.target, a.limit), (OK, 6, 6, 10));
    assert_eq!((a.learning, a.holders, a.used, a.rev), (0, 1, 6, 0));
    assert!(a.generation > 0);
    // B wants 6: 12 > 10, fair share 5 each; B gets the 4 that are free.
    let b = sync(c, &p, "B", Args::new().want(6));
    assert_eq!(
        (b.status, b.held, b.target, b.used, b.holders),
        (OK, 4, 5, 10, 2)
    );
    assert_eq!(b.generation, a.generation + 1, "gens come from one fence");
    assert_eq!(b.epoch, a.epoch);
    // The stored fence is an integer (HINCRBY-able); the epoch and the base are the server's µs.
    assert_eq!(cfg_field(c, &p, "base"), Some(a.epoch));
    assert_eq!(cfg_field(c, &p, "fence"), Some(b.generation));

    // A renews: target 5, it shrinks at once; B renews and grows into the freed permit.
    let a2 = sync(c, &p, "A", short.generation(a.generation).want(6));
    assert_eq!(
        (a2.status, a2.generation, a2.held, a2.target, a2.used),
        (OK, a.generation, 5, 5, 9)
    );
    let b2 = sync(c, &p, "B", Args::new().generation(b.generation).want(6));
    assert_eq!((b2.held, b2.target, b2.used), (5, 5, 10));

    // A stale (or foreign) generation is LOST and changes nothing.
    let lost = sync(c, &p, "A", short.generation(a.generation + 1).want(6));
    assert_eq!((lost.status, lost.used, lost.holders), (LOST, 10, 2));
    assert_eq!(hgetall(c, &p.keys[1]).get("A"), Some(&5));

    // Within A's TTL its lease is still there (checked only if we were not descheduled).
    let b3 = sync(c, &p, "B", Args::new().generation(b.generation).want(9));
    if a_sent.elapsed() < Duration::from_millis(250) {
        assert_eq!((b3.holders, b3.held), (2, 5), "A not reaped before its TTL");
    }
    // A goes silent. After its TTL (300 ms, slept with margin) B's sync reaps it: B, alone with
    // want 9, grows to 9.
    sleep(Duration::from_millis(450));
    let b4 = sync(c, &p, "B", Args::new().generation(b.generation).want(9));
    assert_eq!(
        (b4.status, b4.held, b4.target, b4.used, b4.holders),
        (OK, 9, 9, 9, 1)
    );
    assert_eq!(cfg_field(c, &p, "want_sum"), Some(9));
    // A's late sync with its old gen: LOST (its record is gone, its gen is of this state).
    let late = sync(c, &p, "A", short.generation(a.generation).want(6));
    assert_eq!(late.status, LOST);

    // Fenced release: a stale generation frees nothing (-1), nor does a holder without a record.
    assert_eq!(release(c, &p, "B", b.generation + 100), -1);
    assert_eq!(release(c, &p, "A", a.generation), -1);
    assert_eq!(cfg_field(c, &p, "used"), Some(9));
    // The right generation frees the block and every record.
    assert_eq!(release(c, &p, "B", b.generation), 9);
    assert_eq!(cfg_field(c, &p, "used"), Some(0));
    assert_eq!(cfg_field(c, &p, "want_sum"), Some(0));
    for key in &p.keys[1..] {
        let n: i64 = redis::cmd("EXISTS").arg(key).query(c).unwrap();
        assert_eq!(n, 0, "{key} empty after the last release");
    }
    // Releasing twice is fenced too.
    assert_eq!(release(c, &p, "B", b.generation), -1);
}

#[test]
fn set_limit_is_revisioned_and_lowering_never_revokes() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("limits");
    let c = &mut conn;
    let a = sync(c, &p, "A", Args::new().want(5));
    let b = sync(c, &p, "B", Args::new().want(5));
    assert_eq!((a.held, b.held, b.used), (5, 5, 10));

    // rev 2 applies; an older or equal rev is refused and reports what is in force.
    assert_eq!(set_limit(c, &p, 4, 2), [1, 2, 4]);
    assert_eq!(set_limit(c, &p, 8, 1), [0, 2, 4]);
    assert_eq!(set_limit(c, &p, 8, 2), [0, 2, 4]);
    // Nothing is revoked by the lowering itself.
    assert_eq!(cfg_field(c, &p, "used"), Some(10));

    // A has 3 in flight: its target is 2 (fair share of 4) but busy permits are kept.
    let a2 = sync(
        c,
        &p,
        "A",
        Args::new().generation(a.generation).want(5).busy(3),
    );
    assert_eq!(
        (a2.held, a2.target, a2.limit, a2.rev, a2.used),
        (3, 2, 4, 2, 8)
    );
    let b2 = sync(c, &p, "B", Args::new().generation(b.generation).want(5));
    assert_eq!((b2.held, b2.target, b2.used), (2, 2, 5));
    // A's work finished: it syncs down to its share; the lower limit is reached.
    let a3 = sync(c, &p, "A", Args::new().generation(a.generation).want(5));
    assert_eq!((a3.held, a3.used), (2, 4));
    // Nobody grows past it any more.
    let b3 = sync(
        c,
        &p,
        "B",
        Args::new().generation(b.generation).want(5).busy(1),
    );
    assert_eq!((b3.held, b3.used), (2, 4));

    // Raising the limit lets both grow again.
    assert_eq!(set_limit(c, &p, 10, 3), [1, 3, 10]);
    let a4 = sync(c, &p, "A", Args::new().generation(a.generation).want(5));
    assert_eq!((a4.held, a4.used, a4.rev), (5, 7, 3));

    // On a missing pool set_limit creates the state (no learning) and applies.
    let q = Pool::new("fresh");
    assert_eq!(set_limit(c, &q, 7, 1), [1, 1, 7]);
    assert_eq!(cfg_field(c, &q, "learn_until"), Some(0));
    let n = sync(c, &q, "N", Args::new().want(9));
    assert_eq!((n.held, n.limit, n.learning), (7, 7, 0));
}

#[test]
fn learning_after_flushall() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("learn");
    let c = &mut conn;
    let learn = Args::new().learn_ms(300);
    let a = sync(c, &p, "A", learn.want(4));
    let b = sync(c, &p, "B", learn.want(4));
    let d = sync(c, &p, "D", learn.want(1));
    assert_eq!((a.held, b.held, d.held), (4, 4, 1));

    flushall(c);
    load_library(c); // FLUSHALL keeps functions; loading again is harmless

    // B reports has=4 with its old gen: the state is lost, so it is re-admitted with 4, keeps
    // its gen, and the pool learns (a new epoch).
    let b2 = sync(c, &p, "B", learn.generation(b.generation).want(4).has(4));
    let learn_start = Instant::now();
    assert_eq!(
        (b2.status, b2.generation, b2.held, b2.learning, b2.used),
        (OK, b.generation, 4, 1, 4)
    );
    assert!(b2.epoch > b.epoch, "a new epoch");
    assert!(cfg_field(c, &p, "base").unwrap() > b.generation);
    // A brand-new holder gets nothing while learning, whatever it wants.
    let n = sync(c, &p, "N", learn.want(2));
    assert_eq!((n.status, n.held, n.target, n.learning), (OK, 0, 2, 1));
    assert!(n.generation > b.generation);
    // A, too, is handed back what it has.
    let a2 = sync(c, &p, "A", learn.generation(a.generation).want(4).has(4));
    assert_eq!(
        (a2.status, a2.generation, a2.held, a2.used),
        (OK, a.generation, 4, 8)
    );
    // No grow while learning, not even for a re-admitted holder.
    let a3 = sync(c, &p, "A", learn.generation(a.generation).want(6).has(4));
    assert_eq!((a3.held, a3.learning), (4, 1));

    // Learning lasts learn_ms (300 ms): afterwards N gets its grant.
    sleep(Duration::from_millis(450));
    assert!(learn_start.elapsed() >= Duration::from_millis(300));
    let n2 = sync(c, &p, "N", learn.generation(n.generation).want(2));
    assert_eq!((n2.status, n2.held, n2.learning, n2.used), (OK, 2, 0, 10));
    // D was silent through the learning period: its old generation is LOST now.
    let d2 = sync(c, &p, "D", learn.generation(d.generation).want(1).has(1));
    assert_eq!(d2.status, LOST);

    // A generation-0 creator after a loss starts without learning; an old holder reporting within
    // learn_ms of the new epoch is still re-admitted, and turns learning on.
    flushall(c);
    let e = sync(c, &p, "E", learn.want(3));
    assert_eq!((e.status, e.held, e.learning), (OK, 3, 0));
    let b3 = sync(c, &p, "B", learn.generation(b.generation).want(4).has(4));
    assert_eq!(
        (b3.status, b3.generation, b3.held, b3.learning),
        (OK, b.generation, 4, 1)
    );
    assert_eq!(cfg_field(c, &p, "learn_until"), Some(b3.epoch / 1000 + 300));
    // Re-admission is capped by the free permits: 3 + 4 used, F reports 5, gets 3.
    let f = sync(c, &p, "F", learn.generation(12345).want(5).has(5));
    assert_eq!((f.status, f.held, f.used), (OK, 3, 10));
}

#[test]
fn learning_after_kill9_and_restart() {
    let Some((mut srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("crash");
    let port = srv.port();
    let a = sync(&mut conn, &p, "A", Args::new().want(4));
    let b = sync(&mut conn, &p, "B", Args::new().want(4));
    assert_eq!((a.held, b.held), (4, 4));
    drop(conn);

    srv.kill9();
    srv.restart();
    assert_eq!(srv.port(), port, "same port");
    let mut conn = srv.conn();
    // Nothing survived: neither the pool nor the library (no persistence).
    let gone = try_sync(&mut conn, &p, "B", Args::new().generation(b.generation));
    assert!(gone.is_err(), "the library is gone after kill -9: {gone:?}");
    load_library(&mut conn);
    assert_eq!(cfg_field(&mut conn, &p, "limit"), None);

    let c = &mut conn;
    let b2 = sync(
        c,
        &p,
        "B",
        Args::new().generation(b.generation).want(4).has(4),
    );
    assert_eq!(
        (b2.status, b2.generation, b2.held, b2.learning, b2.used),
        (OK, b.generation, 4, 1, 4)
    );
    assert!(b2.epoch >= a.epoch);
    let n = sync(c, &p, "N", Args::new().want(2));
    assert_eq!((n.status, n.held, n.learning), (OK, 0, 1));
    let a2 = sync(
        c,
        &p,
        "A",
        Args::new().generation(a.generation).want(4).has(4),
    );
    assert_eq!(
        (a2.status, a2.generation, a2.held, a2.used),
        (OK, a.generation, 4, 8)
    );
}

#[test]
fn full_at_max_holders() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("full");
    let c = &mut conn;
    let two = Args::new().want(1).max_holders(2);
    let a = sync(c, &p, "A", two);
    let b = sync(c, &p, "B", two);
    assert_eq!((a.status, b.status, b.holders), (OK, OK, 2));
    let fence = cfg_field(c, &p, "fence");
    // A third holder is refused; nothing changes (no record, no generation taken from the fence).
    let full = sync(c, &p, "C", two);
    assert_eq!((full.status, full.holders, full.used), (FULL, 2, 2));
    assert_eq!(cfg_field(c, &p, "fence"), fence);
    assert!(!hgetall(c, &p.keys[2]).contains_key("C"));
    // A holder's own re-lease (generation 0) replaces its record: not FULL.
    let a2 = sync(c, &p, "A", two);
    assert_eq!((a2.status, a2.holders, a2.used), (OK, 2, 2));
    assert!(a2.generation > b.generation);
    assert_eq!(
        release(c, &p, "A", a.generation),
        -1,
        "the old lease is fenced"
    );
    // Once B leaves there is room for C.
    assert_eq!(release(c, &p, "B", b.generation), 1);
    let c2 = sync(c, &p, "C", two);
    assert_eq!((c2.status, c2.held, c2.holders), (OK, 1, 2));
}

/// Limit 2, 3 holders wanting 5 each, nothing in flight: the fair share is 0 with a remainder of
/// 2, handed to the holders served longest ago, so over a few rounds each one gets a permit.
#[test]
fn remainder_rotates() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("rot");
    let c = &mut conn;
    let args = Args::new().want(5).default_limit(2);
    let names = ["A", "B", "C"];
    let mut gens = [0i64; 3];
    let mut rounds_held = [0u32; 3];
    let rounds = 12;
    // Round 0: they join one by one (A, alone at first, takes both permits).
    for round in 0..=rounds {
        for (i, h) in names.iter().enumerate() {
            // Grants in distinct server milliseconds, so `served` orders them.
            std::thread::sleep(Duration::from_millis(2));
            let a = args.generation(gens[i]);
            let r = sync(c, &p, h, a);
            assert_eq!(r.status, OK);
            gens[i] = r.generation;
            assert!(r.held <= r.target, "no busy: held <= target ({r:?})");
            assert!(r.used <= 2, "round {round}: {r:?}");
            if round > 0 {
                // All three want 5: the share is 0, the remainder 2 goes to two of them.
                assert!(r.target <= 1, "round {round} {h}: {r:?}");
                rounds_held[i] += u32::from(r.held > 0);
            }
        }
        let held: i64 = hgetall(c, &p.keys[1]).values().sum();
        assert!(held <= 2);
    }
    // Round-robin: the two extra permits move on; nobody keeps one for good, nobody starves.
    for (i, n) in rounds_held.iter().enumerate() {
        assert!(
            (3..rounds).contains(n),
            "{} held a permit in {n} of {rounds} rounds: {rounds_held:?}",
            names[i]
        );
    }
}

fn expect_err(r: redis::RedisResult<Value>, detail: &str) {
    let e = r.expect_err(detail);
    assert_eq!(e.code(), Some("ERR"), "{e}");
    assert_eq!(e.detail(), Some(detail), "{e}");
}

#[test]
fn bad_arguments_name_the_argument() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("bad");
    let c = &mut conn;
    let base = ["A", "0", "1", "0", "0", "1000", "10", "1000", "100"];
    let n53 = "9007199254740991";
    let cases: &[(usize, &str, &str)] = &[
        (1, "-1", "gen must be an integer in 0..=9007199254740991"),
        (
            1,
            "9007199254740992",
            "gen must be an integer in 0..=9007199254740991",
        ),
        (1, "x", "gen must be an integer in 0..=9007199254740991"),
        (1, "1.5", "gen must be an integer in 0..=9007199254740991"),
        (1, "", "gen must be an integer in 0..=9007199254740991"),
        (2, "4294967297", "want must be an integer in 0..=4294967296"),
        (3, "-1", "busy must be an integer in 0..=4294967296"),
        (4, "1e3", "has must be an integer in 0..=4294967296"),
        (5, "0", "ttl_ms must be an integer in 1..=3600000"),
        (5, "3600001", "ttl_ms must be an integer in 1..=3600000"),
        (
            6,
            "4294967297",
            "default_limit must be an integer in 0..=4294967296",
        ),
        (7, "-5", "learn_ms must be an integer in 0..=3600000"),
        (8, "0", "max_holders must be an integer in 1..=100000"),
        (8, "100001", "max_holders must be an integer in 1..=100000"),
    ];
    for &(i, bad, msg) in cases {
        let mut args = base;
        args[i] = bad;
        let r = fcall("hg_sync", &p).arg(&args[..]).query(c);
        expect_err(r, &format!("hullguard: {msg}"));
    }
    // The largest values are accepted.
    let mut args = base;
    args[1] = n53;
    let r: Vec<i64> = fcall("hg_sync", &p).arg(&args[..]).query(c).unwrap();
    assert_eq!(r[0], LOST, "a generation this state never issued");
    redis::cmd("DEL").arg(p.cfg()).exec(c).unwrap();

    // Holder ids: 1..=128 printable characters, no spaces.
    let long = "h".repeat(129);
    for h in ["", "a b", long.as_str(), "tab\there"] {
        let mut args = base;
        args[0] = h;
        let r = fcall("hg_sync", &p).arg(&args[..]).query(c);
        expect_err(
            r,
            "hullguard: holder must be 1..=128 printable ASCII characters without spaces",
        );
    }
    let r = fcall("hg_sync", &p).arg(&base[..8]).query(c);
    expect_err(r, "hullguard: hg_sync takes 9 arguments, got 8");

    // The other functions.
    let r = fcall("hg_release", &p).arg("A").arg("-1").query(c);
    expect_err(
        r,
        "hullguard: gen must be an integer in 0..=9007199254740991",
    );
    let r = fcall("hg_set_limit", &p)
        .arg(&["4294967297", "1", "10"][..])
        .query(c);
    expect_err(r, "hullguard: limit must be an integer in 0..=4294967296");
    let r = fcall("hg_set_limit", &p)
        .arg(&["5", "0", "10"][..])
        .query(c);
    expect_err(
        r,
        &format!("hullguard: rev must be an integer in 1..={n53}"),
    );
    let r = fcall("hg_set_limit", &p).arg(&["5", "1", "x"][..]).query(c);
    expect_err(
        r,
        "hullguard: default_limit must be an integer in 0..=4294967296",
    );

    // Keys: exactly the 6 keys of one pool.
    let keys_msg = "hullguard: keys must be the 6 keys {hg:<pool>}:[budget:]cfg,held,gen,exp,want,served \
                    (pool: 1..=64 of [A-Za-z0-9_.:-])";
    let r = redis::cmd("FCALL")
        .arg("hg_sync")
        .arg(5)
        .arg(&p.keys[..5])
        .arg(&base[..])
        .query(c);
    expect_err(r, keys_msg);
    let mut swapped = Pool::new("bad");
    swapped.keys.swap(1, 2);
    expect_err(fcall("hg_sync", &swapped).arg(&base[..]).query(c), keys_msg);
    let mixed = Pool {
        keys: std::array::from_fn(|i| {
            if i == 3 {
                "{hg:other}:exp".to_owned()
            } else {
                p.keys[i].clone()
            }
        }),
    };
    expect_err(fcall("hg_sync", &mixed).arg(&base[..]).query(c), keys_msg);
    // A budget table's keys are one dimension too: not mixed with the permits', and only the
    // `budget:` infix.
    let budget_keys = |infix: &str, odd: usize| Pool {
        keys: std::array::from_fn(|i| {
            let k = &p.keys[i];
            let at = k.find("}:").unwrap() + 2;
            if i == odd {
                k.clone()
            } else {
                format!("{}{infix}{}", &k[..at], &k[at..])
            }
        }),
    };
    expect_err(
        fcall("hg_sync", &budget_keys("budget:", 4))
            .arg(&base[..])
            .query(c),
        keys_msg,
    );
    expect_err(
        fcall("hg_sync", &budget_keys("tokens:", 99))
            .arg(&base[..])
            .query(c),
        keys_msg,
    );
    let ok_r: Vec<i64> = fcall("hg_sync", &budget_keys("budget:", 99))
        .arg(&base[..])
        .query(c)
        .unwrap();
    assert_eq!(ok_r[0], OK, "the budget table's keys");
    for name in ["", "a b", "x/y", &"p".repeat(65)] {
        let q = Pool::new(name);
        expect_err(fcall("hg_sync", &q).arg(&base[..]).query(c), keys_msg);
    }
    let ok = Pool::new(&"p".repeat(64));
    let ok_r: Vec<i64> = fcall("hg_sync", &ok).arg(&base[..]).query(c).unwrap();
    assert_eq!(ok_r[0], OK);
    let ok = Pool::new("Aa0_.:-");
    let ok_r: Vec<i64> = fcall("hg_sync", &ok).arg(&base[..]).query(c).unwrap();
    assert_eq!(ok_r[0], OK);

    // A refused call wrote nothing.
    let n: i64 = redis::cmd("EXISTS").arg(p.cfg()).query(c).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn stats_shape_and_read_only_flags() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    let p = Pool::new("stats");
    let c = &mut conn;
    let (head, rows) = stats(c, &p);
    assert!(head[0] > 1_600_000_000_000, "now is server ms");
    assert_eq!(&head[1..], &[-1, 0, 0, 0, 0, 0, 0, 0]);
    assert!(rows.is_empty());
    let n: i64 = redis::cmd("EXISTS").arg(p.cfg()).query(c).unwrap();
    assert_eq!(n, 0, "hg_stats writes nothing");

    let a = sync(c, &p, "A", Args::new().want(3));
    let b = sync(c, &p, "B", Args::new().want(2).busy(0).ttl_ms(1_000));
    assert_eq!(set_limit(c, &p, 12, 4), [1, 4, 12]);
    let (head, rows) = stats(c, &p);
    let [
        now,
        limit,
        used,
        epoch,
        fence,
        rev,
        learn_until,
        want_sum,
        n,
    ] = head;
    assert!(now >= epoch / 1000, "now is ms, the epoch µs");
    assert_eq!(
        (limit, used, epoch, fence, rev),
        (12, 5, a.epoch, b.generation, 4)
    );
    assert_eq!((learn_until, want_sum, n), (0, 5, 2));
    let rows: BTreeMap<String, [i64; 4]> = rows.into_iter().collect();
    let ra = rows["A"];
    let rb = rows["B"];
    assert_eq!(&ra[..3], &[a.generation, 3, 3]);
    assert_eq!(&rb[..3], &[b.generation, 2, 2]);
    assert!(ra[3] >= a.epoch / 1000 + 5_000, "exp = server ms + ttl");
    assert!(rb[3] >= a.epoch / 1000 + 1_000 && rb[3] < ra[3] + 1_000);

    // The write functions refuse FCALL_RO; the read-only ones work with it.
    let r: redis::RedisResult<Value> = redis::cmd("FCALL_RO")
        .arg("hg_sync")
        .arg(6)
        .arg(&p.keys[..])
        .arg(&["A", "0", "1", "0", "0", "1000", "10", "1000", "100"][..])
        .query(c);
    assert!(r.is_err(), "hg_sync is not read-only");
    let r: redis::RedisResult<Value> = redis::cmd("FCALL_RO")
        .arg("hg_release")
        .arg(6)
        .arg(&p.keys[..])
        .arg(&["A", "1"][..])
        .query(c);
    assert!(r.is_err(), "hg_release is not read-only");
}

/// xorshift64*: a fixed-seed generator for the random walk.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> i64 {
        i64::try_from(self.next() % n).unwrap()
    }
}

#[derive(Clone, Copy, Debug)]
struct Lease {
    generation: i64,
    held: i64,
    sent: Instant,
    ttl_ms: i64,
}

#[derive(Default, Debug)]
struct Counts {
    ok: u32,
    lost: u32,
    full: u32,
    learning: u32,
    reaped: u32,
    fenced: u32,
    grew: u32,
}

/// The pool as stored, read straight from the hashes.
struct Snapshot {
    cfg: BTreeMap<String, i64>,
    held: BTreeMap<String, i64>,
    generation: BTreeMap<String, i64>,
    want: BTreeMap<String, i64>,
    exp: BTreeMap<String, i64>,
    served: BTreeMap<String, i64>,
}

impl Snapshot {
    fn read(c: &mut dyn ConnectionLike, p: &Pool) -> Self {
        let exp: Vec<(String, i64)> = redis::cmd("ZRANGE")
            .arg(&p.keys[3])
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(c)
            .unwrap();
        Self {
            cfg: hgetall(c, &p.keys[0]),
            held: hgetall(c, &p.keys[1]),
            generation: hgetall(c, &p.keys[2]),
            want: hgetall(c, &p.keys[4]),
            exp: exp.into_iter().collect(),
            served: hgetall(c, &p.keys[5]),
        }
    }
    fn used(&self) -> i64 {
        self.cfg.get("used").copied().unwrap_or(0)
    }
    fn limit(&self) -> i64 {
        self.cfg.get("limit").copied().unwrap_or(0)
    }

    /// The contract's invariants on stored state; `used_before` is `used` before the call.
    fn check(&self, used_before: i64, max_holders: i64, at: &str) {
        let names = |m: &BTreeMap<String, i64>| m.keys().cloned().collect::<BTreeSet<_>>();
        if self.cfg.is_empty() {
            assert!(
                self.generation.is_empty() && self.held.is_empty(),
                "{at}: records without cfg"
            );
            return;
        }
        let used = self.used();
        assert!(used >= 0, "{at}: used {used} < 0");
        assert_eq!(
            self.held.values().sum::<i64>(),
            used,
            "{at}: Σ held != used"
        );
        assert_eq!(
            self.want.values().sum::<i64>(),
            self.cfg["want_sum"],
            "{at}: Σ want != want_sum"
        );
        assert!(
            used <= self.limit().max(used_before),
            "{at}: a grow took used to {used} over limit {} (was {used_before})",
            self.limit()
        );
        let holders = names(&self.generation);
        assert_eq!(names(&self.held), holders, "{at}: held/generation records");
        assert_eq!(names(&self.want), holders, "{at}: want/generation records");
        assert_eq!(names(&self.exp), holders, "{at}: exp/generation records");
        assert!(
            names(&self.served).is_subset(&holders),
            "{at}: stray served"
        );
        assert!(self.held.values().all(|&h| h >= 0), "{at}: negative held");
        assert!(
            self.generation.len() as i64 <= max_holders,
            "{at}: over max_holders"
        );
        assert!(
            self.cfg["fence"] >= self.cfg["base"],
            "{at}: fence below base"
        );
    }
}

/// 8 holders doing random syncs (right, garbage and zero gens), releases (right and stale),
/// limit changes, sleeps and FLUSHALLs; the invariants are checked after every call.
#[test]
fn invariants_hold_under_random_ops() {
    let Some((_srv, mut conn)) = server() else {
        return;
    };
    const SEEDS: [u64; 4] = [1, 2, 0xDECA_FBAD, 0x1234_5678_9ABC_DEF0];
    const OPS: usize = 300;
    const MAX_HOLDERS: i64 = 6;
    // Short leases, so that holders expire and learning periods (learn_ms = ttl) end within
    // the walk.
    const TTLS: [i64; 8] = [3, 8, 15, 30, 45, 60, 80, 120];
    let c = &mut conn;
    let mut total = Counts::default();
    for seed in SEEDS {
        let p = Pool::new(&format!("rand{seed:x}"));
        let mut rng = Rng(seed);
        let holders: Vec<String> = (0..8)
            .map(|i| format!("10.0.0.{i}:{}:{seed:x}", 100 + i))
            .collect();
        let mut leases: Vec<Option<Lease>> = vec![None; 8];
        let mut rev = 0i64;
        let mut flushed = Instant::now();
        let mut counts = Counts::default();
        for step in 0..OPS {
            let i = rng.below(8) as usize;
            let h = holders[i].as_str();
            let before = Snapshot::read(c, &p);
            let used_before = before.used();
            let op = rng.below(100);
            let at = format!("seed {seed:#x} step {step} op {op} holder {h}");
            match op {
                // Sync with the generation this holder was given (0 when idle); sometimes re-lease
                // (generation 0 while leased) or send a garbage generation.
                0..=69 => {
                    let lease = leases[i];
                    let garbage = op >= 62;
                    let generation = match op {
                        60..=61 => 0,
                        62..=63 => lease.map_or(1, |l| l.generation + 1),
                        64..=65 => MAX_SAFE,
                        // Below this state's base: taken for a lease of a lost state.
                        66 => 1 + rng.below(1 << 40),
                        // Not issued yet.
                        _ if garbage => {
                            before.cfg.get("fence").copied().unwrap_or(0) + 1 + rng.below(100)
                        }
                        _ => lease.map_or(0, |l| l.generation),
                    };
                    let held = lease.map_or(0, |l| l.held);
                    let busy = if rng.below(5) == 0 {
                        rng.below(4)
                    } else {
                        rng.below(held as u64 + 1)
                    };
                    let has = if garbage { rng.below(8) } else { held };
                    let a = Args {
                        generation,
                        want: rng.below(9),
                        busy,
                        has,
                        ttl_ms: TTLS[i],
                        default_limit: 10,
                        learn_ms: TTLS[i],
                        max_holders: MAX_HOLDERS,
                    };
                    let sent = Instant::now();
                    let r = sync(c, &p, h, a);
                    let after = Snapshot::read(c, &p);
                    after.check(used_before, MAX_HOLDERS, &at);
                    if after.generation.len() < before.generation.len() {
                        counts.reaped += 1;
                    }
                    match r.status {
                        OK => {
                            counts.ok += 1;
                            counts.learning += u32::try_from(r.learning).unwrap();
                            if r.learning == 0 && r.held > before.held.get(h).copied().unwrap_or(0)
                            {
                                counts.grew += 1;
                            }
                            assert_eq!(after.held.get(h), Some(&r.held), "{at}: held stored");
                            assert_eq!(
                                after.generation.get(h),
                                Some(&r.generation),
                                "{at}: generation stored"
                            );
                            assert!(
                                r.held <= a.want.max(a.busy),
                                "{at}: held > max(want, busy): {r:?}"
                            );
                            assert!(r.target <= a.want, "{at}: target > want: {r:?}");
                            if after.cfg["want_sum"] <= r.limit {
                                assert_eq!(r.target, a.want, "{at}: no contention, target = want");
                            }
                            assert_eq!((r.used, r.limit), (after.used(), after.limit()), "{at}");
                            assert_eq!(r.holders, after.generation.len() as i64, "{at}");
                            if r.learning == 1 && generation == 0 {
                                assert_eq!(r.held, 0, "{at}: a new holder grows while learning");
                            }
                            if generation != 0 {
                                assert_eq!(
                                    r.generation, generation,
                                    "{at}: a renewal keeps its generation"
                                );
                            }
                            leases[i] = Some(Lease {
                                generation: r.generation,
                                held: r.held,
                                sent,
                                ttl_ms: a.ttl_ms,
                            });
                        }
                        LOST => {
                            counts.lost += 1;
                            // A holder within its TTL with its right gen is never LOST. Server
                            // time is whole ms: allow 1 ms, and only judge when our own timing
                            // proves the lease was still live when the call ran.
                            if let Some(l) = lease.filter(|l| l.generation == generation) {
                                let live = l.sent.elapsed() + Duration::from_millis(1)
                                    < Duration::from_millis(l.ttl_ms as u64);
                                assert!(
                                    !live,
                                    "{at}: LOST within TTL with the right generation ({l:?})"
                                );
                            }
                            assert_eq!(after.used(), used_before.min(after.used()), "{at}");
                            if !garbage {
                                leases[i] = None;
                            }
                        }
                        FULL => {
                            counts.full += 1;
                            assert!(r.holders >= MAX_HOLDERS, "{at}: FULL with room: {r:?}");
                            assert!(
                                !after.generation.contains_key(h),
                                "{at}: FULL left a record"
                            );
                            if !garbage {
                                leases[i] = None;
                            }
                        }
                        s => panic!("{at}: status {s}"),
                    }
                }
                // Release with the right generation: frees what is held, or -1 once reaped.
                70..=81 => {
                    let generation = leases[i].map_or(1, |l| l.generation);
                    let stored = before.held.get(h).copied();
                    let freed = release(c, &p, h, generation);
                    let after = Snapshot::read(c, &p);
                    after.check(used_before, MAX_HOLDERS, &at);
                    if before.generation.get(h) == Some(&generation) {
                        assert_eq!(Some(freed), stored, "{at}: release frees what is held");
                        assert_eq!(after.used(), used_before - freed, "{at}");
                    } else {
                        assert_eq!(freed, -1, "{at}: release without a record");
                        counts.fenced += 1;
                        // Never fenced while the lease is live (and its state not lost).
                        if let Some(l) = leases[i].filter(|l| l.sent > flushed) {
                            let live = l.sent.elapsed() + Duration::from_millis(1)
                                < Duration::from_millis(l.ttl_ms as u64);
                            assert!(!live, "{at}: release fenced within TTL ({l:?})");
                        }
                    }
                    assert!(!after.generation.contains_key(h) || freed == -1, "{at}");
                    leases[i] = None;
                }
                // A stale release: fenced, frees nothing.
                82..=86 => {
                    let generation = leases[i].map_or(1, |l| l.generation) + 1 + rng.below(5);
                    let freed = release(c, &p, h, generation);
                    let after = Snapshot::read(c, &p);
                    after.check(used_before, MAX_HOLDERS, &at);
                    if before.generation.get(h) != Some(&generation) {
                        assert_eq!(freed, -1, "{at}: stale release");
                        assert_eq!(after.held, before.held, "{at}: stale release freed");
                        counts.fenced += 1;
                    }
                }
                // A revisioned limit change (sometimes with a stale rev).
                87..=91 | 93 => {
                    let limit = rng.below(13);
                    let r = if rng.below(4) == 0 { rev } else { rev + 1 };
                    let cur = before.cfg.get("rev").copied().unwrap_or(0);
                    let res = set_limit(c, &p, limit, r.max(1));
                    let after = Snapshot::read(c, &p);
                    after.check(used_before, MAX_HOLDERS, &at);
                    if r.max(1) > cur {
                        assert_eq!(res, [1, r.max(1), limit], "{at}");
                        rev = r.max(1);
                    } else {
                        assert_eq!(res[0], 0, "{at}: a stale rev applied");
                        assert_eq!(after.limit(), before.limit(), "{at}");
                    }
                    assert_eq!(after.used(), used_before, "{at}: set_limit revokes nothing");
                }
                // State loss. The holders keep their leases (they do not know).
                92 => {
                    flushall(c);
                    flushed = Instant::now();
                    rev = 0;
                }
                _ => sleep(Duration::from_millis(rng.below(15) as u64)),
            }
        }
        eprintln!("seed {seed:#x}: {counts:?}");
        total.ok += counts.ok;
        total.lost += counts.lost;
        total.full += counts.full;
        total.learning += counts.learning;
        total.reaped += counts.reaped;
        total.fenced += counts.fenced;
        total.grew += counts.grew;
    }
    // The walk reached every branch.
    assert!(
        total.ok > 0 && total.lost > 0 && total.full > 0,
        "{total:?}"
    );
    assert!(
        total.learning > 0 && total.reaped > 0 && total.fenced > 0 && total.grew > 0,
        "{total:?}"
    );
}

/// `CLUSTER SLOTS` → (first slot, last slot, primary port).
fn slot_ranges(c: &mut dyn ConnectionLike) -> Vec<(i64, i64, u16)> {
    let v: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query(c).unwrap();
    v.iter()
        .map(|r| {
            let Value::Array(r) = r else { panic!("{r:?}") };
            let (Value::Int(lo), Value::Int(hi), Value::Array(primary)) = (&r[0], &r[1], &r[2])
            else {
                panic!("CLUSTER SLOTS entry {r:?}")
            };
            let Value::Int(port) = primary[1] else {
                panic!("{primary:?}")
            };
            (*lo, *hi, u16::try_from(port).unwrap())
        })
        .collect()
}

#[test]
fn cluster_pools_on_different_nodes() {
    let Some(cluster) = RedisCluster::start(3) else {
        return;
    };
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let mut cc = client.get_connection().expect("cluster connection");
    // FUNCTION LOAD through the cluster connection: the crate routes it to every primary.
    load_library(&mut cc);
    for node in cluster.nodes() {
        let v: i64 = redis::cmd("FCALL_RO")
            .arg("hg_version")
            .arg(0)
            .query(&mut node.conn())
            .expect("library loaded on every primary");
        assert_eq!(v, LIB_VERSION, "node {}", node.port());
    }
    let v: i64 = redis::cmd("FCALL_RO")
        .arg("hg_version")
        .arg(0)
        .query(&mut cc)
        .unwrap();
    assert_eq!(v, LIB_VERSION);

    // Two pools whose tags hash to slots served by different primaries.
    let mut first = cluster.nodes()[0].conn();
    let ranges = slot_ranges(&mut first);
    let owner = |c: &mut redis::Connection, name: &str| -> u16 {
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(Pool::new(name).cfg())
            .query(c)
            .unwrap();
        ranges
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .expect("every slot is served")
            .2
    };
    let p1 = "orders";
    let n1 = owner(&mut first, p1);
    let p2 = (0..100)
        .map(|i| format!("pool{i}"))
        .find(|n| owner(&mut first, n) != n1)
        .expect("a pool on another node");
    let n2 = owner(&mut first, &p2);
    assert_ne!(n1, n2);

    for (name, port) in [(p1, n1), (p2.as_str(), n2)] {
        let p = Pool::new(name);
        let a = sync(&mut cc, &p, "A", Args::new().want(6));
        let b = sync(&mut cc, &p, "B", Args::new().want(6));
        assert_eq!(
            (a.status, a.held, b.status, b.held, b.target),
            (OK, 6, OK, 4, 5)
        );
        let a2 = sync(
            &mut cc,
            &p,
            "A",
            Args::new().generation(a.generation).want(6),
        );
        assert_eq!((a2.held, a2.used), (5, 9));
        let (head, rows) = stats(&mut cc, &p);
        assert_eq!((head[1], head[2], rows.len()), (10, 9, 2));
        assert_eq!(release(&mut cc, &p, "B", b.generation + 1), -1);
        assert_eq!(release(&mut cc, &p, "B", b.generation), 4);
        // The pool's keys live on the primary that owns its slot, and only there.
        for node in cluster.nodes() {
            let mut nc = node.conn();
            let n: i64 = redis::cmd("DBSIZE").query(&mut nc).unwrap();
            let has: bool = redis::cmd("EXISTS")
                .arg(p.cfg())
                .query(&mut nc)
                .or_else(|e| {
                    if e.code() == Some("MOVED") {
                        Ok(false)
                    } else {
                        Err(e)
                    }
                })
                .unwrap();
            assert_eq!(
                has,
                node.port() == port,
                "pool {name} on node {}",
                node.port()
            );
            if node.port() != port && node.port() != n1 && node.port() != n2 {
                assert_eq!(n, 0, "the third node holds nothing");
            }
        }
    }
}
