//! Real-process crash tests of the host bulkhead (REACH.md A4 items 3, 7, 9; CASES C37, C39,
//! C40): children are this test binary re-executed (`common`), killed with SIGKILL, stopped with
//! SIGSTOP, forked; the parent checks the host-wide ledger recovers, within 10x the target.
//!
//! Settings: probe 50 ms, beat 50 ms, lease TTL 500 ms (1 s where a heartbeating holder must
//! survive: a false expiry then needs a 1 s stall of its keeper thread).

mod common;

use std::{
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::{HostEnv, Orphan, Proc, RawSegment, Spawn, SpawnHost, TempDir, say};
use hullguard_host::{
    HostBulkhead, HostStats,
    layout::{LeaseState, s},
};

const SEC: Duration = Duration::from_secs(1);

/// Not a test: the entry point of every child role (returns at once in the parent).
#[test]
fn child() {
    let Some(role) = common::role() else { return };
    match role.as_str() {
        "holder" => common::holder(),
        "forker" => forker(),
        other => common::die(format!("unknown role {other:?}")),
    }
}

fn holder(env: &HostEnv, label: &str, weight: u64, calls: u64) -> (Proc, usize) {
    let mut p = Spawn::new("holder", label)
        .host(env)
        .env("HG_WEIGHT", weight)
        .env("HG_CALLS", calls)
        .spawn();
    let slot = p.expect("held", 10 * SEC).num(0) as usize;
    (p, slot)
}

/// Samples `available` (limit − Σ permits) straight from the segment's words (a settled
/// double read) every millisecond until stopped — without `stats()`, whose reap would do the probe's work and hide
/// how long the library itself takes. Every sample must lie in `[0, limit]`.
struct Sampler<'a> {
    stop: &'a AtomicBool,
    seen: &'a Mutex<(u64, i64, i64)>,
}

impl Sampler<'_> {
    fn run(&self, raw: &RawSegment, limit: u64) {
        while !self.stop.load(Ordering::Acquire) {
            let Some((_, permits)) = raw.settled_sums() else {
                continue;
            };
            let available = limit as i64 - permits as i64;
            let mut seen = self.seen.lock().unwrap();
            seen.0 += 1;
            seen.1 = seen.1.min(available);
            seen.2 = seen.2.max(available);
            assert!(
                (0..=limit as i64).contains(&available),
                "sample {}: available {available} outside [0, {limit}]",
                seen.0
            );
            drop(seen);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn check_available(st: &HostStats, limit: u64) {
    assert!(
        (0..=limit as i64).contains(&st.stats.available),
        "stats: available {} outside [0, {limit}]: {st:?}",
        st.stats.available
    );
}

/// C37 / A4.3: SIGKILL one holder of two → the parent's waiting acquire is granted within
/// about one probe; the dead holder's call is counted orphaned; the heartbeating one is never
/// touched; `available` stays within [0, 2] on every sample.
#[test]
fn host_kill9() {
    let dir = TempDir::new("kill9");
    let mut env = HostEnv::new(dir.path(), "kill9", 2);
    env.ttl_ms = 1000;
    let (mut p1, s1) = holder(&env, "P1", 1, 1);
    let (mut p2, s2) = holder(&env, "P2", 1, 1);
    let bh = env.open();
    let raw = RawSegment::open(bh.path());
    let st = bh.stats();
    assert_eq!((st.stats.active, st.in_flight, st.attached), (2, 2, 3));
    let stop = AtomicBool::new(false);
    let seen = Mutex::new((0u64, i64::MAX, i64::MIN));
    let sampler = Sampler {
        stop: &stop,
        seen: &seen,
    };
    let (reclaim, held_after) = std::thread::scope(|sc| {
        let sampling = sc.spawn(|| sampler.run(&raw, 2));
        let waiter = sc.spawn(|| {
            let p = bh.acquire_blocking(1, Some(20 * SEC));
            (p, Instant::now())
        });
        // The acquire is queued (its ticket published) before the kill.
        common::poll(10 * SEC, Duration::from_millis(2), || {
            (!raw.tickets().is_empty()).then_some(())
        })
        .expect("the parent's acquire never queued");
        // P2 heartbeats through a whole TTL of waiting before anything dies.
        std::thread::sleep(Duration::from_millis(env.ttl_ms + 200));
        let st = bh.stats();
        check_available(&st, 2);
        assert_eq!(st.reclaimed_expired_total, 0, "a live holder expired");
        let t0 = Instant::now();
        p1.signal(libc::SIGKILL);
        let (permit, granted) = waiter.join().unwrap();
        let permit = permit.unwrap_or_else(|e| panic!("the parent's acquire failed: {e}"));
        let reclaim = granted - t0;
        p1.kill();
        // P2 keeps heartbeating for two more TTLs with the parent holding.
        std::thread::sleep(Duration::from_millis(2 * env.ttl_ms));
        let held_after = bh.stats();
        check_available(&held_after, 2);
        drop(permit);
        stop.store(true, Ordering::Release);
        sampling.join().unwrap();
        (reclaim, held_after)
    });
    println!("host_kill9: reclaimed in {reclaim:?} after SIGKILL (target 0.5 s)");
    assert!(reclaim <= 5 * SEC, "reclaim took {reclaim:?} (> 5 s)");
    assert_eq!(
        held_after.stats.active, 2,
        "P2 + the parent: {held_after:?}"
    );
    assert_eq!(held_after.reclaimed_dead_total, 1, "{held_after:?}");
    assert_eq!(held_after.reclaimed_expired_total, 0, "{held_after:?}");
    assert_eq!(
        held_after.stats.orphaned_total, 1,
        "P1's call: {held_after:?}"
    );
    assert_eq!(held_after.reclaimed_permits_total, 1, "{held_after:?}");
    // P2 was never reclaimed nor expired: its own release counts.
    p2.send("release");
    assert_eq!(p2.expect("released", 10 * SEC).arg(0), "ok");
    let raw = RawSegment::open(bh.path());
    assert_eq!(raw.lease(s2).0, LeaseState::Active);
    assert_ne!(
        raw.lease(s1).0,
        LeaseState::Active,
        "P1's slot still active"
    );
    let st = bh.stats();
    assert_eq!(
        (st.stats.active, st.in_flight, st.stale_releases_total),
        (0, 0, 0)
    );
    check_available(&st, 2);
    let (n, min, max) = *seen.lock().unwrap();
    println!("host_kill9: {n} samples of available, min {min}, max {max}");
    assert!(n > 10, "too few samples ({n})");
    assert_eq!(
        min, 0,
        "P1 + P2, then P2 + the parent, hold the whole limit"
    );
}

/// A4.3 SIGSTOP variant: a stopped holder is expired after about TTL + probe; resumed, its
/// release is stale (changes nothing) and it can acquire again (its lease was re-armed).
#[test]
fn host_sigstop() {
    let dir = TempDir::new("sigstop");
    let env = HostEnv::new(dir.path(), "sigstop", 1);
    let ttl = Duration::from_millis(env.ttl_ms);
    let (mut c, slot) = holder(&env, "C", 1, 1);
    let bh = env.open();
    let raw = RawSegment::open(bh.path());
    // Stop it right after a heartbeat: its last beat is then later than `before`.
    let b0 = raw.beat(slot);
    let mut before = Instant::now();
    common::poll(10 * SEC, Duration::from_millis(1), || {
        let t = Instant::now();
        if raw.beat(slot) != b0 {
            return Some(());
        }
        before = t;
        None
    })
    .expect("the holder never beat");
    c.stop();
    let permit = bh
        .acquire_blocking(1, Some(20 * SEC))
        .unwrap_or_else(|e| panic!("not admitted past a stopped holder: {e}"));
    let took = before.elapsed();
    println!(
        "host_sigstop: admitted {took:?} after the holder's last beat (target TTL + probe = {:?})",
        ttl + Duration::from_millis(env.probe_ms)
    );
    // Only lower bounds where time must pass (half the TTL: an observer's clock reading may
    // precede its read of the beat by a preempted pass); the upper at 10x the target.
    assert!(took >= ttl / 2, "expired after {took:?}, before TTL");
    assert!(took <= 10 * (ttl + Duration::from_millis(env.probe_ms)));
    let st = bh.stats();
    assert_eq!(st.reclaimed_expired_total, 1, "{st:?}");
    assert_eq!(st.reclaimed_dead_total, 0, "{st:?}");
    assert_eq!(st.stats.orphaned_total, 1, "{st:?}");
    assert_eq!(raw.lease(slot).0, LeaseState::Expired);
    assert_eq!(st.stats.active, 1, "the parent's permit only: {st:?}");
    // Resumed: the late release is stale and changes nothing.
    c.cont();
    c.send("release");
    assert_eq!(c.expect("released", 10 * SEC).arg(0), "stale");
    let after = bh.stats();
    assert_eq!(
        after.stats.active, 1,
        "a stale release changed Σ: {after:?}"
    );
    assert_eq!(after.in_flight, 1, "{after:?}");
    assert_eq!(after.stale_releases_total, 1, "{after:?}");
    // Its lease was re-armed: it acquires again once the parent lets go.
    common::poll(10 * SEC, Duration::from_millis(5), || {
        (raw.lease(slot).0 == LeaseState::Active).then_some(())
    })
    .expect("the resumed holder's lease was not re-armed");
    drop(permit);
    c.send("acquire");
    c.expect("held", 10 * SEC);
    let st = bh.stats();
    assert_eq!((st.stats.active, st.local_active), (1, 0), "{st:?}");
    c.send("release");
    assert_eq!(c.expect("released", 10 * SEC).arg(0), "ok");
    let st = bh.stats();
    assert_eq!((st.stats.active, st.in_flight), (0, 0), "{st:?}");
    assert_eq!(st.stats.orphaned_total, 1, "{st:?}");
}

/// Role `forker` (C40): opens the segment, takes 1 permit, says `held <slot>`, then forks. The
/// forked grandchild releases the inherited permit (`gc-foreign <result>`), takes its own
/// (`gc-held <slot> <pid>`), then serves `stats` / `release` / `exit` on stdin; the forker says
/// `forked <pid>` and sleeps, holding its permit, until killed.
fn forker() -> ! {
    let env = HostEnv::from_env();
    let bh = env.open();
    let permit = bh
        .acquire_blocking(1, Some(10 * SEC))
        .unwrap_or_else(|e| common::die(e));
    say(format!("held {}", bh.slot()));
    // SAFETY: fork(2) has no memory-safety preconditions; the child below only uses this
    // thread's state and the library's own after-fork handling (the subject under test), and
    // ends with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        common::die(std::io::Error::last_os_error());
    }
    if pid == 0 {
        grandchild(&bh, permit);
    }
    say(format!("forked {pid}"));
    let _keep = permit;
    loop {
        std::thread::sleep(SEC); // the parent kills it
    }
}

fn grandchild(bh: &HostBulkhead, inherited: hullguard_host::HostPermit) -> ! {
    let exit = |code| -> ! {
        // SAFETY: _exit(2) ends this forked process at once, running nothing of the image
        // inherited from the forker (its test harness, its atexit handlers).
        unsafe { libc::_exit(code) }
    };
    say(format!(
        "gc-foreign {}",
        common::lease_word(inherited.release())
    ));
    let own = match bh.try_acquire(1) {
        Ok(p) => p,
        Err(e) => {
            say(format!("error gc acquire: {e}"));
            exit(1)
        }
    };
    say(format!("gc-held {} {}", bh.slot(), std::process::id()));
    let mut own = Some(own);
    while let Some(cmd) = common::listen() {
        match cmd.as_str() {
            "stats" => {
                let s = bh.stats();
                say(format!(
                    "gc-stats {} {} {}",
                    s.stats.active, s.local_active, s.slot
                ));
            }
            "release" => {
                let r = own
                    .take()
                    .map_or("none", |p| common::lease_word(p.release()));
                say(format!("gc-released {r}"));
            }
            "exit" => exit(0),
            other => {
                say(format!("error gc: unknown command {other:?}"));
                exit(1)
            }
        }
    }
    exit(0)
}

/// C40 / A4.7: a process forked while holding a permit — the child's release of the inherited
/// permit is foreign, its own acquire uses a slot of its own, and the parent's death is
/// reclaimed while the child lives (the inherited liveness descriptor was closed in the child).
#[test]
fn host_fork_preload() {
    common::become_subreaper();
    let dir = TempDir::new("fork");
    let env = HostEnv::new(dir.path(), "fork", 3);
    let bh = env.open();
    let mut f = Spawn::new("forker", "forker").host(&env).spawn();
    let fslot = f.expect("held", 10 * SEC).num(0) as usize;
    let mut gc = Orphan::new(f.expect("forked", 10 * SEC).num(0) as i32);
    assert_eq!(f.expect("gc-foreign", 10 * SEC).arg(0), "foreign");
    let l = f.expect("gc-held", 10 * SEC);
    let gslot = l.num(0) as usize;
    assert_eq!(l.num(1) as i32, gc.pid());
    assert_ne!(gslot, fslot, "the forked child reused its parent's slot");
    assert_ne!(gslot, bh.slot());
    let st = bh.stats();
    assert_eq!(
        (st.stats.active, st.in_flight, st.attached),
        (2, 2, 3),
        "{st:?}"
    );
    assert_eq!(st.foreign_releases_total, 1, "{st:?}");
    // The forker dies while the grandchild lives: its slot must come back.
    let t0 = Instant::now();
    let status = f.kill();
    let (_, took) = common::poll(5 * SEC, Duration::from_millis(5), || {
        let st = bh.stats();
        (st.stats.active == 1 && st.reclaimed_dead_total == 1).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the forker's slot was not reclaimed while its forked child lives (an inherited \
             liveness descriptor?): {:?}",
            bh.stats()
        )
    });
    println!(
        "host_fork_preload: the forker's slot reclaimed {took:?} after SIGKILL ({:?} incl. wait)",
        t0.elapsed()
    );
    assert!(!status.success());
    let raw = RawSegment::open(bh.path());
    assert_eq!(raw.lease(gslot).0, LeaseState::Active);
    assert_ne!(raw.lease(fslot).0, LeaseState::Active);
    f.send("stats");
    let l = f.expect("gc-stats", 10 * SEC);
    assert_eq!((l.num(0), l.num(1), l.num(2) as usize), (1, 1, gslot));
    f.send("release");
    assert_eq!(f.expect("gc-released", 10 * SEC).arg(0), "ok");
    f.send("exit");
    let status = gc.wait(10 * SEC).expect("the grandchild did not exit");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "grandchild status {status:#x}"
    );
    let st = bh.stats();
    assert_eq!((st.stats.active, st.in_flight), (0, 0), "{st:?}");
    assert_eq!(st.stale_releases_total, 0, "{st:?}");
}

/// C39: liveness is the slot's lock, not its pid. A dead holder's slot whose pid and start time
/// name a live process (a reused pid, faked through a raw mapping) is reclaimed all the same —
/// while the dead holder is still an unreaped zombie — and the live process's own slot is never
/// touched.
#[test]
fn host_pid_reuse() {
    let dir = TempDir::new("pidreuse");
    let env = HostEnv::new(dir.path(), "pidreuse", 2);
    let (mut p1, s1) = holder(&env, "P1", 2, 1);
    let (mut p3, s3) = holder(&env, "P3", 1, 0);
    let bh = env.open();
    let raw = RawSegment::open(bh.path());
    let g3 = raw.lease(s3);
    raw.slot_word(s1, s::PID)
        .store(p3.pid() as u64, Ordering::SeqCst);
    raw.slot_word(s1, s::START_TICKS)
        .store(common::start_ticks(p3.pid()), Ordering::SeqCst);
    let t0 = Instant::now();
    p1.signal(libc::SIGKILL);
    let permit = bh
        .acquire_blocking(2, Some(20 * SEC))
        .unwrap_or_else(|e| panic!("a dead holder with a live pid was not reclaimed: {e}"));
    let took = t0.elapsed();
    // Reclaimed while P1 was still a zombie (not yet waited for): C39's step 5.
    common::poll(5 * SEC, Duration::from_millis(1), || {
        (common::proc_state(p1.pid()) == Some('Z')).then_some(())
    })
    .expect("P1 is not a zombie");
    p1.kill();
    println!(
        "host_pid_reuse: the dead holder (its pid word naming live pid {}) reclaimed in {took:?}",
        p3.pid()
    );
    assert!(took <= 5 * SEC, "{took:?}");
    let st: HostStats = bh.stats();
    assert_eq!(st.reclaimed_dead_total, 1, "{st:?}");
    assert_eq!(st.stats.orphaned_total, 1, "{st:?}");
    assert_eq!(raw.lease(s3), g3, "the live process's slot was touched");
    drop(permit);
    p3.send("acquire");
    p3.expect("held", 10 * SEC);
    p3.send("release");
    assert_eq!(p3.expect("released", 10 * SEC).arg(0), "ok");
    assert_eq!(bh.stats().stats.active, 0);
}

/// A4.9: holders SIGKILLed with nobody else attached leave their permits in the file; the next
/// process to open it reclaims them while attaching (before `open` returns: no probe, no
/// `stats()` reap needed).
#[test]
fn host_leftover() {
    let dir = TempDir::new("leftover");
    let env = HostEnv::new(dir.path(), "leftover", 3);
    let (mut a, sa) = holder(&env, "A", 2, 1);
    let (mut b, sb) = holder(&env, "B", 1, 1);
    a.kill();
    b.kill();
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let path = dir.path().join(format!("hullguard.{euid}.{}", env.name));
    let raw = RawSegment::open(&path);
    assert_eq!(raw.sums(), (2, 3), "the leftover is in the file");
    assert_eq!(raw.lease(sa).0, LeaseState::Active);
    assert_eq!(raw.lease(sb).0, LeaseState::Active);
    let t0 = Instant::now();
    let bh = env.open();
    let took = t0.elapsed();
    // Straight from the words, before any stats() (which would reap again).
    assert_eq!(raw.sums(), (0, 0), "open did not reclaim the leftover");
    assert!(raw.tickets().is_empty());
    for slot in [sa, sb] {
        if slot != bh.slot() {
            assert_eq!(raw.lease(slot).0, LeaseState::Free, "slot {slot}");
        }
    }
    println!("host_leftover: open (attach + reclaim of 2 dead slots) took {took:?}");
    let st = bh.stats();
    assert_eq!(
        (st.stats.active, st.in_flight, st.attached),
        (0, 0, 1),
        "{st:?}"
    );
    assert_eq!(st.reclaimed_dead_total, 2, "{st:?}");
    assert_eq!(st.stats.orphaned_total, 2, "{st:?}");
    assert_eq!(st.reclaimed_permits_total, 3, "{st:?}");
    let p = bh.try_acquire(3).expect("the full limit");
    drop(p);
}

/// A process that exits normally with nothing held frees its slot on the way out (not counted
/// as a death); one that exits normally still holding a permit leaves it to the probes, which
/// reclaim it as after a crash.
#[test]
fn host_clean_exit_frees_its_slot() {
    let dir = TempDir::new("clean-exit");
    let env = HostEnv::new(dir.path(), "clean-exit", 2);
    let bh = env.open();
    let (mut a, _) = holder(&env, "A", 1, 1);
    a.send("release");
    a.expect("released", 10 * SEC);
    a.send("exit");
    a.expect_success(10 * SEC);
    let st = bh.stats();
    assert_eq!(
        (st.attached, st.reclaimed_dead_total, st.stats.active),
        (1, 0, 0),
        "{st:?}"
    );
    let (mut b, _) = holder(&env, "B", 1, 1);
    b.send("exit");
    b.expect_success(10 * SEC);
    let st = bh.stats();
    assert_eq!(
        (st.attached, st.reclaimed_dead_total, st.stats.active),
        (1, 1, 0),
        "{st:?}"
    );
    assert_eq!(st.reclaimed_permits_total, 1, "{st:?}");
}

/// C37: per-process metric files kept reporting a dead worker's values. A host bulkhead's
/// metric walk, from any process, counts live holders only: a SIGKILLed holder's permits leave
/// it at once (the walk reads `stats()`, which reaps first).
#[test]
fn host_c37_metrics_count_only_live_holders() {
    use hullguard_core::{Metric, MetricLabels, MetricSink, metrics::HistogramSample};
    struct InFlight(f64);
    impl MetricSink for InFlight {
        fn sample(&mut self, m: &'static Metric, l: MetricLabels, v: f64) {
            if m.name == "hullguard_in_flight" && l.dimension == Some("calls") && l.class.is_none()
            {
                self.0 = v;
            }
        }
        fn histogram(&mut self, _: &'static Metric, _: MetricLabels, _: &HistogramSample) {}
    }
    let in_flight = |bh: &hullguard_host::HostBulkhead| {
        let mut s = InFlight(-1.0);
        bh.metrics(&mut s);
        s.0
    };
    let dir = TempDir::new("c37");
    let env = HostEnv::new(dir.path(), "c37", 4);
    let bh = env.open();
    let (mut a, _) = holder(&env, "A", 2, 1);
    let (mut b, _) = holder(&env, "B", 1, 1);
    assert_eq!(in_flight(&bh), 3.0);
    a.kill();
    assert_eq!(
        in_flight(&bh),
        1.0,
        "the dead holder's permits left the walk at once"
    );
    b.send("release");
    b.expect("released", 10 * SEC);
    assert_eq!(in_flight(&bh), 0.0);
}
