use hullguard_core::Reason;
use hullguard_host::{HostBulkhead, HostOptions};
use std::time::Duration;

fn opts(dir: &std::path::Path, n: u64) -> HostOptions {
    HostOptions {
        max_concurrent: n,
        dir: dir.to_path_buf(),
        ..HostOptions::default()
    }
}

#[test]
fn one_process_limit_and_queue() {
    let dir = std::env::temp_dir().join(format!("hg-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bh = HostBulkhead::open("smoke", opts(&dir, 2)).unwrap();
    let p1 = bh.try_acquire(1).unwrap();
    let p2 = bh.try_acquire(1).unwrap();
    assert_eq!(
        bh.try_acquire(1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let e = bh
        .acquire_blocking(1, Some(Duration::from_millis(20)))
        .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Timeout), "{e}");
    let s = bh.stats();
    assert_eq!((s.stats.active, s.in_flight, s.attached), (2, 2, 1));
    std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            bh.acquire_blocking(1, Some(Duration::from_secs(5)))
                .map(|p| p.release())
        });
        std::thread::sleep(Duration::from_millis(50));
        p1.release().unwrap();
        assert!(h.join().unwrap().unwrap().is_ok());
    });
    drop(p2);
    assert_eq!(bh.stats().stats.active, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn async_acquire_waits_times_out_and_cancels() {
    use hullguard_core::{Request, block_on};
    let dir = std::env::temp_dir().join(format!("hg-smoke-async-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bh = HostBulkhead::open("smoke-async", opts(&dir, 1)).unwrap();
    let held = bh.try_acquire(1).unwrap();
    // Times out (the keeper's timer wakes it).
    let t0 = std::time::Instant::now();
    let e =
        block_on(bh.acquire(Request::new(1).queue_timeout(Duration::from_millis(50)))).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Timeout), "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(50));
    // A dropped (cancelled) future gives its place up: nothing stays queued.
    drop(bh.acquire(Request::new(1)));
    assert_eq!(bh.stats().stats.queued, 0);
    // Granted when the holder releases (the doorbell wakes it through the keeper).
    std::thread::scope(|sc| {
        let h = sc
            .spawn(|| block_on(bh.acquire(Request::new(1).queue_timeout(Duration::from_secs(10)))));
        std::thread::sleep(Duration::from_millis(50));
        held.release().unwrap();
        let p = h.join().unwrap().unwrap();
        assert_eq!(bh.stats().stats.active, 1);
        drop(p);
    });
    assert_eq!(bh.stats().stats.active, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_host_command_lists_shows_and_removes() {
    use hullguard_host::cli::run;
    let dir = std::env::temp_dir().join(format!("hg-smoke-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let args = |a: &[&str]| {
        a.iter()
            .map(|s| s.to_string())
            .chain(["--dir".into(), d.clone()])
            .collect::<Vec<_>>()
    };
    let bh = HostBulkhead::open("cli-db", opts(&dir, 3)).unwrap();
    let p = bh.try_acquire(2).unwrap();
    let ls = run(&args(&["host", "ls"]));
    assert_eq!(ls.status, 0, "{ls:?}");
    assert!(ls.stdout.contains("cli-db"), "{}", ls.stdout);
    let show = run(&args(&["host", "show", "cli-db", "--json"]));
    assert_eq!(show.status, 0, "{show:?}");
    assert!(
        show.stdout.contains("\"max_concurrent\":3") && show.stdout.contains("\"active\":2"),
        "{}",
        show.stdout
    );
    let text = run(&args(&["host", "show", "cli-db"]));
    assert!(
        text.stdout.contains("limit 3") && text.stdout.contains("active"),
        "{}",
        text.stdout
    );
    // Refused while this (live) process is attached.
    let rm = run(&args(&["host", "rm", "cli-db"]));
    assert_eq!(rm.status, 1, "{rm:?}");
    assert!(rm.stderr.contains("in use by pid"), "{}", rm.stderr);
    assert_eq!(run(&args(&["host", "frobnicate"])).status, 2);
    let rm = run(&args(&["host", "rm", "cli-db", "--force"]));
    assert_eq!(rm.status, 0, "{rm:?}");
    drop(p);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The host's handoff: a head whose task is not polled (a blocked event loop) is admitted by
/// its process's keeper when its turn comes — the grant waits for the future, and a dropped
/// future releases it — and its ticket is withdrawn when its deadline passes, so a stuck task
/// never holds the host's FIFO past its deadline (review found the stall).
#[test]
fn an_unpolled_head_is_admitted_by_the_keeper_and_withdrawn_at_its_deadline() {
    use hullguard_core::Request;
    use std::{
        future::Future,
        pin::pin,
        task::{Context, Poll, Waker},
        time::Instant,
    };
    let dir = std::env::temp_dir().join(format!("hg-smoke-handoff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = HostOptions {
        probe: Duration::from_millis(20),
        beat: Duration::from_millis(20),
        lease_ttl: Duration::from_millis(200),
        ..opts(&dir, 1)
    };
    let bh = HostBulkhead::open("handoff", o.clone()).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let until = |what: &str, cond: &dyn Fn() -> bool| {
        let t0 = Instant::now();
        while !cond() {
            assert!(t0.elapsed() < Duration::from_secs(5), "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };

    // 1. Granted on its behalf while nobody polls it; the next poll takes the grant.
    let held = bh.try_acquire(1).unwrap();
    let mut fut = pin!(bh.acquire(Request::new(1).queue_timeout(Duration::from_secs(30))));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    held.release().unwrap();
    until("the keeper admits the unpolled head", &|| {
        bh.stats().stats.active == 1
    });
    let Poll::Ready(Ok(p)) = fut.as_mut().poll(&mut cx) else {
        panic!("the grant waits for the poll")
    };
    drop(p);
    assert_eq!(bh.stats().stats.active, 0);

    // 2. A keeper's grant nobody takes is released when the future is dropped.
    let held = bh.try_acquire(1).unwrap();
    {
        let mut fut = pin!(bh.acquire(Request::new(1).queue_timeout(Duration::from_secs(30))));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        held.release().unwrap();
        until("the keeper admits the unpolled head", &|| {
            bh.stats().stats.active == 1
        });
    }
    assert_eq!(
        bh.stats().stats.active,
        0,
        "the dropped future's grant was released"
    );

    // 3. Past its deadline, an unpolled head's ticket is withdrawn: another handle admits.
    let held = bh.try_acquire(1).unwrap();
    let mut fut = pin!(bh.acquire(Request::new(1).queue_timeout(Duration::from_millis(100))));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    let other = HostBulkhead::open("handoff", o).unwrap();
    until("the deadline withdraws the ticket", &|| {
        other.stats().stats.queued == 0
    });
    held.release().unwrap();
    let p = other.try_acquire(1).expect("no stuck ticket ahead of it");
    drop(p);
    let Poll::Ready(Err(e)) = fut.as_mut().poll(&mut cx) else {
        panic!("timed out")
    };
    assert_eq!(e.reason(), Some(Reason::Timeout), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
