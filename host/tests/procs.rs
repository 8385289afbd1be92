//! Real-process behaviour tests of the host bulkhead (REACH.md A4 items 4, 5, 6, 9; CASES C26,
//! C28): every "process" here is this test binary re-executed with `HG_HOST_CHILD=<role>`, which
//! runs only the `child` test below (a no-op in the parent run).
//!
//! Every child is killed and waited for when its guard drops, every wait is bounded, every
//! segment lives in a per-test temporary directory that is removed at the end. Timing is only
//! asserted as a lower bound (time that must pass) or at 10x a target.
//!
//! The oracles are separate small files mapped `MAP_SHARED` by every process (not the segment):
//! a shared counter is an exact, instantaneous picture of what the processes say they hold, so
//! the limit is checked on every change rather than by sampling.

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, Write},
    os::{
        fd::AsRawFd,
        unix::fs::{FileExt, OpenOptionsExt, PermissionsExt},
    },
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        Arc, Barrier,
        atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use hullguard_core::Reason;
use hullguard_host::{
    HostBulkhead, HostError, HostOptions, HostValue, OnMismatch,
    layout::{self, LeaseState},
};

// ------------------------------------------------------------------------------------------
// Harness: children, temp dirs, shared oracle files.
// ------------------------------------------------------------------------------------------

/// The environment variable naming a child's role.
const ROLE: &str = "HG_HOST_CHILD";
/// How long any single wait for a child may take before the test fails (generous: the machine
/// may be busy; only a hang trips it).
const PATIENCE: Duration = Duration::from_secs(30);

/// A child process: killed (SIGKILL) and reaped when dropped.
struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts this test binary as a child in role `role` with `envs`.
    fn spawn(role: &str, name: &str, envs: &[(&str, String)]) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
        cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        // Ends at EOF: when the child dies (nobody else holds its stdout).
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest may print "test child ... " on the same line first.
                if let Some(i) = line.find("HG:") {
                    if tx.send(line[i + 3..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        Proc {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines: rx,
        }
    }

    /// The next protocol line, which must start with `prefix`; the rest of it.
    fn expect(&mut self, prefix: &str) -> String {
        let line = self.next_line(PATIENCE);
        let Some(line) = line else {
            panic!(
                "{}: no `{prefix}` line within {PATIENCE:?} (or it exited)",
                self.name
            );
        };
        match line.strip_prefix(prefix) {
            Some(rest) => rest.trim().to_owned(),
            None => panic!("{}: expected `{prefix}`, got `{line}`", self.name),
        }
    }

    fn next_line(&mut self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to child");
        stdin.flush().expect("flush");
    }

    /// Closes stdin (the child's signal to finish) and waits for a clean exit, bounded.
    fn finish(&mut self) {
        self.stdin = None;
        self.wait_exit();
    }

    /// Waits for the child to exit by itself (bounded), asserting success.
    fn wait_exit(&mut self) {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                assert!(status.success(), "{}: exited with {status}", self.name);
                return;
            }
            if Instant::now() >= until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{}: did not exit within {PATIENCE:?}", self.name);
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stdin = None;
        self.kill();
    }
}

/// A per-test temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hg-procs-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn s(&self) -> String {
        self.0.to_str().expect("utf-8 temp dir").to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file mapped `MAP_SHARED` as 64-bit atomic words: the oracle every process shares, or (read
/// only by convention) a segment file a test inspects.
struct Shm {
    ptr: *mut AtomicU64,
    words: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics; it is unmapped only by
// `Drop`, when no reference into it can remain.
unsafe impl Send for Shm {}
// SAFETY: as above.
unsafe impl Sync for Shm {}

impl Shm {
    /// Creates a zeroed file of `words` words and maps it.
    fn create(path: &Path, words: usize) -> Shm {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .expect("create oracle file");
        file.set_len((words * 8) as u64).expect("size oracle");
        Shm::map(&file, words)
    }

    /// Maps an existing file, all of it.
    fn open(path: &Path) -> Shm {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open shared file");
        let words = file.metadata().expect("stat").len() as usize / 8;
        Shm::map(&file, words)
    }

    fn map(file: &File, words: usize) -> Shm {
        assert!(words > 0);
        // SAFETY: a fresh shared mapping of a regular file of at least `words * 8` bytes; the
        // kernel picks the address; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                words * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert!(
            ptr != libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        Shm {
            ptr: ptr.cast(),
            words,
        }
    }

    fn w(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words, "word {i} of {}", self.words);
        // SAFETY: `i` is in bounds of a live, page-aligned mapping of `words` u64 words (unmapped
        // only in Drop); AtomicU64 has u64's size and alignment; every bit pattern is valid and
        // every process accesses the words only through atomics.
        unsafe { &*self.ptr.add(i) }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; `&self` borrows have ended.
        unsafe {
            libc::munmap(self.ptr.cast(), self.words * 8);
        }
    }
}

/// The options every process of a test uses (host-wide ones must agree): fast probes and beats,
/// a lease TTL long enough that a busy machine never expires a live process.
fn opts(dir: &Path, limit: u64) -> HostOptions {
    HostOptions {
        max_concurrent: limit,
        dir: dir.to_path_buf(),
        probe: Duration::from_millis(50),
        beat: Duration::from_millis(50),
        lease_ttl: Duration::from_secs(5),
        slots: 16,
        ..HostOptions::default()
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs env {name}"))
}

fn env_u64(name: &str) -> u64 {
    env(name)
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

/// Options of a child from its environment (`HG_DIR`, `HG_LIMIT`, optional `HG_MAX_QUEUE`,
/// `HG_SLOTS`).
fn child_opts() -> HostOptions {
    let mut o = opts(Path::new(&env("HG_DIR")), env_u64("HG_LIMIT"));
    if let Ok(q) = std::env::var("HG_MAX_QUEUE") {
        o.max_queue = q.parse().expect("HG_MAX_QUEUE");
    }
    if let Ok(s) = std::env::var("HG_SLOTS") {
        o.slots = s.parse().expect("HG_SLOTS");
    }
    o
}

fn child_open() -> HostBulkhead {
    HostBulkhead::open(&env("HG_NAME"), child_opts()).expect("child: open host bulkhead")
}

/// Polls `f` every millisecond until it holds (bounded by `PATIENCE`).
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// The segment file path of `name` in `dir` (what `HostBulkhead::path` reports).
fn segment_path(dir: &Path, name: &str) -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    dir.join(format!("hullguard.{euid}.{name}"))
}

/// A tiny xorshift generator (no dependency; seeded per process and thread).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (u64::from(std::process::id()) << 32)
}

// ------------------------------------------------------------------------------------------
// The child entry point.
// ------------------------------------------------------------------------------------------

/// Not a test by itself: the entry point of every child process (returns at once unless
/// `HG_HOST_CHILD` names a role).
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "c26" => child_c26(),
        "fifo" => child_fifo(),
        "hammer" => child_hammer(),
        "holder" => child_holder(),
        "user" => child_user(),
        other => panic!("unknown child role {other}"),
    }
}

fn stdin_lines() -> impl Iterator<Item = String> {
    std::io::stdin().lines().map_while(Result::ok)
}

/// Prints a protocol line (stdout is line-buffered: one flush per line).
fn say(line: &str) {
    println!("HG:{line}");
}

/// Opens, optionally holds `HG_WEIGHT` permits, says `ready <slot>`, and holds until stdin
/// closes.
fn child_holder() {
    let bh = child_open();
    let weight = std::env::var("HG_WEIGHT").map_or(0, |w| w.parse().expect("HG_WEIGHT"));
    let permit = (weight > 0).then(|| bh.try_acquire(weight).expect("holder: try_acquire"));
    say(&format!("ready {}", bh.slot()));
    for _ in stdin_lines() {}
    drop(permit);
}

/// Opens, takes and returns one permit, says `done`, and exits normally.
fn child_user() {
    let bh = child_open();
    bh.try_acquire(1)
        .expect("user: try_acquire")
        .release()
        .expect("user: release");
    say(&format!("done {}", bh.path().display()));
}

// ------------------------------------------------------------------------------------------
// 1. C26: one limit across processes.
// ------------------------------------------------------------------------------------------

/// C26 oracle words.
mod c26 {
    /// Requests holding a permit now (incremented after the grant, decremented before the
    /// release).
    pub const IN_FLIGHT: usize = 0;
    /// The largest value `IN_FLIGHT` reached.
    pub const MAX: usize = 1;
    /// Requests started and not yet granted (every process).
    pub const WAITING: usize = 2;
    pub const WORDS: usize = 8;
}

/// A C26 worker process: on `go`, runs `HG_N` requests at once (one thread each, started
/// together), each holding its permit `HG_HOLD_MS`; on `stats`, reports its view of the host.
fn child_c26() {
    let bh = Arc::new(child_open());
    let oracle = Arc::new(Shm::open(Path::new(&env("HG_ORACLE"))));
    let n = env_u64("HG_N") as usize;
    let hold = Duration::from_millis(env_u64("HG_HOLD_MS"));
    let limit = env_u64("HG_LIMIT");
    say("ready");
    for line in stdin_lines() {
        match line.trim() {
            "go" => {
                let barrier = Arc::new(Barrier::new(n));
                let threads: Vec<_> = (0..n)
                    .map(|_| {
                        let (bh, oracle, barrier) = (bh.clone(), oracle.clone(), barrier.clone());
                        thread::spawn(move || {
                            oracle.w(c26::WAITING).fetch_add(1, SeqCst);
                            barrier.wait();
                            let permit = bh
                                .acquire_blocking(1, Some(PATIENCE))
                                .expect("c26: acquire");
                            oracle.w(c26::WAITING).fetch_sub(1, SeqCst);
                            let now = oracle.w(c26::IN_FLIGHT).fetch_add(1, SeqCst) + 1;
                            oracle.w(c26::MAX).fetch_max(now, SeqCst);
                            // Hold `hold`, and (so that reaching the limit never depends on the
                            // machine's speed) on until the limit was reached or nobody waits;
                            // bounded, so a host that never admits `limit` fails the
                            // assertion instead of hanging.
                            let since = Instant::now();
                            thread::sleep(hold);
                            while oracle.w(c26::MAX).load(SeqCst) < limit
                                && oracle.w(c26::WAITING).load(SeqCst) > 0
                                && since.elapsed() < Duration::from_secs(10)
                            {
                                thread::sleep(Duration::from_millis(1));
                            }
                            oracle.w(c26::IN_FLIGHT).fetch_sub(1, SeqCst);
                            permit.release().expect("c26: release");
                        })
                    })
                    .collect();
                for t in threads {
                    t.join().expect("c26 worker");
                }
                say("done");
            }
            "stats" => {
                let s = bh.stats();
                say(&format!(
                    "stats {} {} {} {} {} {}",
                    s.stats.limit,
                    s.stats.active,
                    s.stats.queued,
                    s.in_flight,
                    s.attached,
                    s.local_active
                ));
            }
            other => panic!("c26 child: unknown command {other}"),
        }
    }
}

/// Parses a `stats` reply: limit, active, queued, in_flight, attached, local_active.
fn parse_stats(line: &str) -> [u64; 6] {
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().expect("stats number"))
        .collect();
    v.try_into().expect("six stats figures")
}

#[test]
fn host_c26() {
    const LIMIT: u64 = 5;
    const HOLD_MS: u64 = 200;
    let dir = TempDir::new("c26");
    let oracle_path = dir.path().join("oracle");
    let oracle = Shm::create(&oracle_path, c26::WORDS);
    let envs = [
        ("HG_DIR", dir.s()),
        ("HG_NAME", "c26".to_owned()),
        ("HG_LIMIT", LIMIT.to_string()),
        ("HG_ORACLE", oracle_path.to_str().unwrap().to_owned()),
        ("HG_N", "10".to_owned()),
        ("HG_HOLD_MS", HOLD_MS.to_string()),
    ];
    let mut p1 = Proc::spawn("c26", "P1", &envs);
    let mut p2 = Proc::spawn("c26", "P2", &envs);
    p1.expect("ready");
    p2.expect("ready");
    let hold = Duration::from_millis(HOLD_MS);

    // P1 alone (P2 attached and idle): 10 requests reach the host limit, not a per-process one.
    let start = Instant::now();
    p1.send("go");
    p1.expect("done");
    let alone = start.elapsed();
    let max_alone = oracle.w(c26::MAX).load(SeqCst);
    assert_eq!(oracle.w(c26::IN_FLIGHT).load(SeqCst), 0);
    assert_eq!(max_alone, LIMIT, "P1 alone: max in flight");
    // 10 requests of 200 ms, at most 5 at once: two waves at least.
    assert!(alone >= hold * 2, "P1 alone took {alone:?}");

    // Both processes, 10 requests each.
    for w in [c26::IN_FLIGHT, c26::MAX, c26::WAITING] {
        oracle.w(w).store(0, SeqCst);
    }
    let me = HostBulkhead::open("c26", opts(dir.path(), LIMIT)).expect("parent open");
    let start = Instant::now();
    p1.send("go");
    p2.send("go");
    // Sample the host's figures from a third process meanwhile (printed only: a scan of the
    // slots is not one atomic snapshot, so it may see a release and a later grant together).
    let (mut sampled_active, mut sampled_queued) = (0, 0);
    let mut done = 0;
    while done < 2 {
        let s = me.stats();
        sampled_active = sampled_active.max(s.stats.active);
        sampled_queued = sampled_queued.max(s.stats.queued);
        for p in [&mut p1, &mut p2] {
            if let Ok(line) = p.lines.try_recv() {
                assert_eq!(line, "done", "{}", p.name);
                done += 1;
            }
        }
        assert!(start.elapsed() < PATIENCE, "C26 run did not finish");
        thread::sleep(Duration::from_millis(1));
    }
    let both = start.elapsed();
    let max_both = oracle.w(c26::MAX).load(SeqCst);
    assert_eq!(max_both, LIMIT, "two processes: max in flight");
    assert_eq!(oracle.w(c26::IN_FLIGHT).load(SeqCst), 0);
    // 20 requests x 200 ms over at most 5 permits: at least 800 ms must pass.
    assert!(both >= hold * 4, "20 requests took {both:?}");

    // Every process reports the same host-wide figures.
    let mut seen = Vec::new();
    for p in [&mut p1, &mut p2] {
        p.send("stats");
        seen.push((p.name.clone(), parse_stats(&p.expect("stats"))));
    }
    let s = me.stats();
    seen.push((
        "parent".into(),
        [
            s.stats.limit,
            s.stats.active,
            s.stats.queued,
            s.in_flight,
            s.attached,
            s.local_active,
        ],
    ));
    for (who, [limit, active, queued, in_flight, attached, local_active]) in &seen {
        assert_eq!(
            (
                *limit,
                *active,
                *queued,
                *in_flight,
                *attached,
                *local_active
            ),
            (LIMIT, 0, 0, 0, 3, 0),
            "{who}: limit, active, queued, in_flight, attached, local_active"
        );
    }
    assert_eq!(s.stats.admitted_total, 30);
    eprintln!(
        "host_c26: P1 alone {alone:?} (max {max_alone}), P1+P2 {both:?} (target ~800 ms, max \
         {max_both}); sampled from a third process: active <= {sampled_active}, queued <= \
         {sampled_queued}"
    );
    p1.finish();
    p2.finish();
}

// ------------------------------------------------------------------------------------------
// 2. C28: FIFO across processes; a full local queue refuses at once.
// ------------------------------------------------------------------------------------------

/// C28 oracle words.
mod fifo {
    /// The grant sequence (1, 2, ...).
    pub const SEQ: usize = 0;
    /// `GRANT + id`: the sequence number request `id` was granted at.
    pub const GRANT: usize = 1;
    pub const WORDS: usize = 64;
}

/// A C28 worker: `req <id> <hold_ms>` starts a request on a thread of its own (granted: records
/// its place in the grant order, says `granted <id>`, holds, releases; refused: says
/// `rejected <id> <reason> <ms>`). Exits when stdin closes, after every request ended.
fn child_fifo() {
    let bh = Arc::new(child_open());
    let oracle = Arc::new(Shm::open(Path::new(&env("HG_ORACLE"))));
    say("ready");
    let mut threads = Vec::new();
    for line in stdin_lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let ["req", id, hold] = parts[..] else {
            panic!("fifo child: unknown command {line}");
        };
        let id: usize = id.parse().expect("id");
        let hold = Duration::from_millis(hold.parse().expect("hold"));
        let (bh, oracle) = (bh.clone(), oracle.clone());
        threads.push(thread::spawn(move || {
            let start = Instant::now();
            match bh.acquire_blocking(1, Some(PATIENCE)) {
                Ok(permit) => {
                    let seq = oracle.w(fifo::SEQ).fetch_add(1, SeqCst) + 1;
                    oracle.w(fifo::GRANT + id).store(seq, SeqCst);
                    say(&format!("granted {id} {seq}"));
                    thread::sleep(hold);
                    permit.release().expect("fifo: release");
                }
                Err(e) => say(&format!(
                    "rejected {id} {} {}",
                    e.reason().map_or("none", Reason::as_str),
                    start.elapsed().as_millis()
                )),
            }
        }));
    }
    for t in threads {
        t.join().expect("fifo request");
    }
}

#[test]
fn host_c28_fifo() {
    let dir = TempDir::new("fifo");
    let oracle_path = dir.path().join("oracle");
    let oracle = Shm::create(&oracle_path, fifo::WORDS);
    let envs = |max_queue: u64| {
        vec![
            ("HG_DIR", dir.s()),
            ("HG_NAME", "fifo".to_owned()),
            ("HG_LIMIT", "1".to_owned()),
            ("HG_MAX_QUEUE", max_queue.to_string()),
            ("HG_ORACLE", oracle_path.to_str().unwrap().to_owned()),
        ]
    };
    let me = HostBulkhead::open("fifo", opts(dir.path(), 1)).expect("parent open");
    let mut a = Proc::spawn("fifo", "A", &envs(100));
    let mut b = Proc::spawn("fifo", "B", &envs(100));
    a.expect("ready");
    b.expect("ready");

    // The parent holds the only permit; r1 (A), r2 (B), r3 (A), r4 (B) arrive in that order:
    // each is sent only once the previous one's ticket is published (the host's queued count).
    let holder = me.try_acquire(1).expect("holder");
    let queued = || me.stats().stats.queued;
    for id in 1..=4 {
        let p = if id % 2 == 1 { &mut a } else { &mut b };
        p.send(&format!("req {id} 30"));
        wait_until(&format!("r{id} queued"), || queued() == id as u64);
    }
    let released = Instant::now();
    holder.release().expect("holder release");
    let mut granted = HashMap::new();
    while granted.len() < 4 {
        // Whichever process says it first; both are read.
        let mut got = false;
        for p in [&mut a, &mut b] {
            if let Some(line) = p.next_line(Duration::from_millis(5)) {
                let rest = line
                    .strip_prefix("granted ")
                    .unwrap_or_else(|| panic!("{}: {line}", p.name));
                let id: usize = rest.split_whitespace().next().unwrap().parse().unwrap();
                granted.insert(id, released.elapsed());
                got = true;
            }
        }
        assert!(
            got || released.elapsed() < PATIENCE,
            "grants missing: {granted:?}"
        );
    }
    let order: Vec<u64> = (1..=4)
        .map(|id| oracle.w(fifo::GRANT + id).load(SeqCst))
        .collect();
    assert_eq!(
        order,
        [1, 2, 3, 4],
        "grant order of r1..r4 (place each was granted at)"
    );
    eprintln!(
        "host_c28_fifo: granted after the holder's release at {:?}",
        (1..=4).map(|id| granted[&id]).collect::<Vec<_>>()
    );

    // A process with max_queue 2 and two requests waiting refuses a third at once.
    let mut c = Proc::spawn("fifo", "C", &envs(2));
    c.expect("ready");
    wait_until("r1..r4 done", || me.stats().stats.active == 0);
    let holder = me.try_acquire(1).expect("holder again");
    for id in [11, 12] {
        c.send(&format!("req {id} 10"));
        wait_until(&format!("r{id} queued"), || queued() == (id - 10) as u64);
    }
    c.send("req 13 10");
    // Refused at once (while the holder still holds), or queued: fail fast either way.
    let line = loop {
        if let Some(line) = c.next_line(Duration::from_millis(1)) {
            break line;
        }
        assert!(
            queued() < 3,
            "a third waiter was queued in a process of max_queue 2 (host queued = 3)"
        );
    };
    let rest = line
        .strip_prefix("rejected 13 ")
        .unwrap_or_else(|| panic!("C: expected `rejected 13`, got `{line}`"));
    let mut parts = rest.split_whitespace();
    let (reason, ms) = (parts.next().unwrap(), parts.next().unwrap());
    assert_eq!(
        reason, "queue_limit",
        "the third waiter in a process of max_queue 2"
    );
    eprintln!("host_c28_fifo: third waiter refused queue_limit after {ms} ms");
    assert_eq!(queued(), 2, "the refused request left nothing queued");
    holder.release().expect("holder release");
    for id in [11, 12] {
        let line = c.expect("granted");
        assert!(line.starts_with(&id.to_string()), "C granted {line}");
    }
    for p in [&mut a, &mut b, &mut c] {
        p.finish();
    }
    let s = me.stats();
    assert_eq!((s.stats.active, s.stats.queued, s.in_flight), (0, 0, 0));
}

// ------------------------------------------------------------------------------------------
// 3. The hammer: random operations in 4 processes, one SIGKILLed every 200 ms.
// ------------------------------------------------------------------------------------------

/// The hammer's oracle.
///
/// Soundness against SIGKILL: a killed child's permits stay counted by the host until a probe
/// reclaims its slot, and its oracle contribution cannot be decremented by it at all. The check
/// must count exactly contributions the host still counts, at one instant:
///
/// * `FIELDS` is one word holding every child's in-flight weight: 16 bits per child index
///   (low 8: weight, high 8: the incarnation's tag). A child adds its weight after a grant and
///   subtracts it before the release, with one `fetch_add`, whose result is an exact picture of
///   all four at that instant `t0` (per-child words read one by one would not be: a release
///   in one and a grant in another read in between would add up to a false violation).
/// * Each incarnation writes its identity `IDENT + index * 256 + tag` = its host slot and the
///   lease generation it claimed, before its first increment.
/// * The checker counts a field only if, read after `t0`, that slot's lease word is still
///   `Active` with that generation. Reclaim and expiry both move the lease off `Active(g)`
///   before they zero the held words, and a lease never returns to `Active(g)`: so if it is
///   still `Active(g)` after `t0`, the host held every permit of that field at `t0`. A dead,
///   not yet reclaimed child's field is counted (the host still counts it too); a reclaimed
///   one's is not. Anything skipped can only hide a violation, never invent one.
/// * The parent resets a killed child's field (weight 0, tag + 1) only after reaping it, and
///   starts its successor with the new tag.
mod hammer {
    pub const FIELDS: usize = 0;
    pub const STOP: usize = 1;
    pub const VIOLATIONS: usize = 2;
    pub const VIOLATION_SNAPSHOT: usize = 3;
    pub const CHECKS: usize = 4;
    pub const OPS: usize = 5;
    pub const MAX_COUNTED: usize = 6;
    pub const ERRORS: usize = 7;
    pub const ANOMALIES: usize = 8;
    /// Fields skipped because their lease moved on (a killed child's, reclaimed).
    pub const SKIPPED: usize = 9;
    pub const IDENT: usize = 64;
    pub const CHILDREN: usize = 4;
    pub const TAGS: usize = 256;
    pub const WORDS: usize = IDENT + CHILDREN * TAGS;
    pub const THREADS: usize = 2;
    pub const MAX_OPS_PER_THREAD: u64 = 1_000_000;
}

fn field_shift(index: usize) -> u32 {
    16 * index as u32
}

/// The word index of slot `slot`'s lease word in a segment.
fn lease_word(slot: usize) -> usize {
    layout::HEADER_WORDS + slot * layout::SLOT_WORDS + layout::s::LEASE
}

/// Checks the picture `v` of every child's in-flight weight (see [`hammer`]).
fn hammer_check(oracle: &Shm, seg: &Shm, v: u64, limit: u64) {
    let mut sum = 0;
    for j in 0..hammer::CHILDREN {
        let field = (v >> field_shift(j)) & 0xffff;
        let (weight, tag) = (field & 0xff, (field >> 8) as usize);
        if weight == 0 {
            continue;
        }
        let ident = oracle
            .w(hammer::IDENT + j * hammer::TAGS + tag)
            .load(SeqCst);
        let slot = ((ident >> 32) & 0x7fff_ffff) as usize;
        if ident >> 63 == 0 || lease_word(slot) >= seg.words {
            oracle.w(hammer::ANOMALIES).fetch_add(1, SeqCst);
            continue;
        }
        let generation = ident & 0xffff_ffff;
        if seg.w(lease_word(slot)).load(SeqCst) == layout::lease(LeaseState::Active, generation) {
            sum += weight;
        } else {
            oracle.w(hammer::SKIPPED).fetch_add(1, SeqCst);
        }
    }
    oracle.w(hammer::CHECKS).fetch_add(1, SeqCst);
    oracle.w(hammer::MAX_COUNTED).fetch_max(sum, SeqCst);
    if sum > limit {
        oracle.w(hammer::VIOLATIONS).fetch_add(1, SeqCst);
        oracle.w(hammer::VIOLATION_SNAPSHOT).store(v, SeqCst);
    }
}

/// A hammer child: `HG_INDEX`, `HG_TAG`; random operations on two threads until the parent
/// sets `STOP` (bounded by an op count and a time cap).
fn child_hammer() {
    let index = env_u64("HG_INDEX") as usize;
    let tag = env_u64("HG_TAG") as usize;
    let limit = env_u64("HG_LIMIT");
    let oracle = Arc::new(Shm::open(Path::new(&env("HG_ORACLE"))));
    let bh = Arc::new(child_open());
    let seg = Arc::new(Shm::open(bh.path()));
    let slot = bh.slot();
    let lease = seg.w(lease_word(slot)).load(SeqCst);
    let Some((LeaseState::Active, generation)) = layout::decode_lease(lease) else {
        panic!("hammer child: own lease {lease:#x} not active");
    };
    oracle
        .w(hammer::IDENT + index * hammer::TAGS + tag)
        .store(1 << 63 | (slot as u64) << 32 | generation, SeqCst);
    say("ready");
    let unit = 1u64 << field_shift(index);
    let start = Instant::now();
    let threads: Vec<_> = (0..hammer::THREADS)
        .map(|t| {
            let (oracle, bh, seg) = (oracle.clone(), bh.clone(), seg.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(seed() ^ ((t as u64 + 1) * 0x9e37_79b9));
                let mut ops = 0;
                while oracle.w(hammer::STOP).load(SeqCst) == 0
                    && ops < hammer::MAX_OPS_PER_THREAD
                    && start.elapsed() < Duration::from_secs(60)
                {
                    ops += 1;
                    oracle.w(hammer::OPS).fetch_add(1, SeqCst);
                    let weight = 1 + rng.below(3);
                    let result = match rng.below(10) {
                        0..=3 => bh.try_acquire(weight),
                        // Short timeouts: waits that end as cancels, often while queued.
                        _ => bh.acquire_blocking(
                            weight,
                            Some(Duration::from_micros(rng.below(5_000))),
                        ),
                    };
                    let permit = match result {
                        Ok(p) => p,
                        Err(e) => {
                            if !matches!(
                                e.reason(),
                                Some(Reason::ConcurrencyLimit | Reason::Timeout)
                            ) {
                                oracle.w(hammer::ERRORS).fetch_add(1, SeqCst);
                                eprintln!("hammer child {index}: {e}");
                            }
                            continue;
                        }
                    };
                    let delta = weight * unit;
                    let v = oracle.w(hammer::FIELDS).fetch_add(delta, SeqCst) + delta;
                    hammer_check(&oracle, &seg, v, limit);
                    match rng.below(4) {
                        0 => {}
                        1 => thread::yield_now(),
                        _ => thread::sleep(Duration::from_micros(rng.below(2_000))),
                    }
                    oracle.w(hammer::FIELDS).fetch_sub(delta, SeqCst);
                    if rng.below(2) == 0 {
                        if let Err(e) = permit.release() {
                            oracle.w(hammer::ERRORS).fetch_add(1, SeqCst);
                            eprintln!("hammer child {index}: release: {e}");
                        }
                    } else {
                        drop(permit);
                    }
                }
                ops
            })
        })
        .collect();
    let ops: u64 = threads
        .into_iter()
        .map(|t| t.join().expect("hammer thread"))
        .sum();
    say(&format!("done {ops}"));
}

#[test]
fn host_hammer() {
    const LIMIT: u64 = 4;
    const CHAOS: Duration = Duration::from_secs(3);
    let dir = TempDir::new("hammer");
    let oracle_path = dir.path().join("oracle");
    let oracle = Shm::create(&oracle_path, hammer::WORDS);
    let me = HostBulkhead::open("hammer", opts(dir.path(), LIMIT)).expect("parent open");
    let spawn = |index: usize, tag: usize| {
        Proc::spawn(
            "hammer",
            &format!("hammer child {index} tag {tag}"),
            &[
                ("HG_DIR", dir.s()),
                ("HG_NAME", "hammer".to_owned()),
                ("HG_LIMIT", LIMIT.to_string()),
                ("HG_ORACLE", oracle_path.to_str().unwrap().to_owned()),
                ("HG_INDEX", index.to_string()),
                ("HG_TAG", tag.to_string()),
            ],
        )
    };
    let mut tags = [0usize; hammer::CHILDREN];
    let mut procs: Vec<Proc> = (0..hammer::CHILDREN).map(|i| spawn(i, 0)).collect();
    for p in &mut procs {
        p.expect("ready");
    }
    let mut rng = Rng::new(seed());
    let start = Instant::now();
    let mut kills = 0;
    // Chaos for CHAOS; then on (bounded) until some grants were checked, so the test never
    // passes without having checked anything on a very slow machine.
    while start.elapsed() < CHAOS
        || (oracle.w(hammer::CHECKS).load(SeqCst) < 100 && start.elapsed() < PATIENCE)
    {
        thread::sleep(Duration::from_millis(100));
        if start.elapsed() >= CHAOS {
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        let i = rng.below(hammer::CHILDREN as u64) as usize;
        procs[i].kill(); // SIGKILL + waitpid
        kills += 1;
        // Leave its field as it died for two probe periods: the host reclaims its slot
        // meanwhile, and the others' checks must skip the stale field (see `hammer`).
        thread::sleep(Duration::from_millis(100));
        // Then retire the field (weight 0) under the successor's tag.
        let tag = tags[i] + 1;
        assert!(tag < hammer::TAGS, "too many respawns of child {i}");
        tags[i] = tag;
        oracle
            .w(hammer::IDENT + i * hammer::TAGS + tag)
            .store(0, SeqCst);
        let shift = field_shift(i);
        let _ = oracle.w(hammer::FIELDS).fetch_update(SeqCst, SeqCst, |v| {
            Some(v & !(0xffff << shift) | ((tag as u64) << (shift + 8)))
        });
        procs[i] = spawn(i, tag);
    }
    let elapsed = start.elapsed();
    oracle.w(hammer::STOP).store(1, SeqCst);
    for p in &mut procs {
        // A successor spawned at the very end may see STOP before it says ready.
        let line = p.expect("");
        if line == "ready" {
            p.expect("done");
        } else {
            assert!(line.starts_with("done"), "{}: {line}", p.name);
        }
        p.wait_exit();
    }
    let ops = oracle.w(hammer::OPS).load(SeqCst);
    let checks = oracle.w(hammer::CHECKS).load(SeqCst);
    let s = me.stats();
    eprintln!(
        "host_hammer: {ops} ops in {elapsed:?} ({:.0} ops/s over {} processes), {checks} grants \
         checked, max counted in flight {}, {} dead fields skipped, {kills} \
         SIGKILLs; host: reclaimed {} slots ({} permits), admitted {}, orphaned {}",
        ops as f64 / elapsed.as_secs_f64(),
        hammer::CHILDREN,
        oracle.w(hammer::MAX_COUNTED).load(SeqCst),
        oracle.w(hammer::SKIPPED).load(SeqCst),
        s.reclaimed_dead_total,
        s.reclaimed_permits_total,
        s.stats.admitted_total,
        s.stats.orphaned_total,
    );
    assert_eq!(
        oracle.w(hammer::VIOLATIONS).load(SeqCst),
        0,
        "in flight over the limit; last picture {:#018x}",
        oracle.w(hammer::VIOLATION_SNAPSHOT).load(SeqCst)
    );
    assert_eq!(
        oracle.w(hammer::ERRORS).load(SeqCst),
        0,
        "unexpected errors"
    );
    assert_eq!(
        oracle.w(hammer::ANOMALIES).load(SeqCst),
        0,
        "oracle anomalies"
    );
    assert!(checks >= 1, "nothing was granted");
    assert!(oracle.w(hammer::MAX_COUNTED).load(SeqCst) <= LIMIT);
    me.reap();
    let s = me.stats();
    assert_eq!(
        (s.stats.active, s.stats.queued, s.in_flight, s.attached),
        (0, 0, 0, 1),
        "after every child exited: active, queued, in_flight, attached"
    );
    assert!(s.stats.available == LIMIT as i64);
}

// ------------------------------------------------------------------------------------------
// 4. The segment file.
// ------------------------------------------------------------------------------------------

fn user_envs(dir: &TempDir, name: &str, limit: u64) -> Vec<(&'static str, String)> {
    vec![
        ("HG_DIR", dir.s()),
        ("HG_NAME", name.to_owned()),
        ("HG_LIMIT", limit.to_string()),
    ]
}

/// Creates segment `name` from a child that then exits normally.
fn create_by_child(dir: &TempDir, name: &str, limit: u64) -> PathBuf {
    let mut p = Proc::spawn(
        "user",
        &format!("creator of {name}"),
        &user_envs(dir, name, limit),
    );
    let path = PathBuf::from(p.expect("done"));
    p.wait_exit();
    assert_eq!(path, segment_path(dir.path(), name));
    path
}

#[test]
fn host_segment_files() {
    let dir = TempDir::new("segment");
    let d = dir.path();

    // (a) Not a segment: bad magic, named with its path.
    let bad = segment_path(d, "badmagic");
    std::fs::write(&bad, vec![0xab_u8; 8192]).unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = HostBulkhead::open("badmagic", opts(d, 2)).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HostError::Incompatible { .. }), "{e:?}");
    assert!(
        msg.contains(bad.to_str().unwrap()) && msg.contains("magic"),
        "{msg}"
    );

    // (b) Another layout version: refused, naming both versions.
    let v999 = create_by_child(&dir, "v999", 2);
    let f = OpenOptions::new().write(true).open(&v999).unwrap();
    f.write_all_at(&999u32.to_le_bytes(), (layout::h::VERSION * 8) as u64)
        .unwrap();
    drop(f);
    let e = HostBulkhead::open("v999", opts(d, 2)).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HostError::Incompatible { .. }), "{e:?}");
    assert!(
        msg.contains(v999.to_str().unwrap())
            && msg.contains("999")
            && msg.contains(&format!("reads {}", layout::LAYOUT_VERSION)),
        "{msg}"
    );

    // (c) A world-writable segment: refused, naming the mode.
    let ww = create_by_child(&dir, "ww", 2);
    std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = HostBulkhead::open("ww", opts(d, 2)).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HostError::Permission { .. }), "{e:?}");
    assert!(
        msg.contains("666") && msg.contains(ww.to_str().unwrap()),
        "{msg}"
    );

    // (d) Another host-wide setting: refused by default, naming the option and both values;
    // adopted on request.
    create_by_child(&dir, "mm", 3);
    let e = HostBulkhead::open("mm", opts(d, 4)).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            HostError::Mismatch {
                option: "max_concurrent",
                segment: 3,
                requested: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        msg.contains("max_concurrent") && msg.contains(" 3") && msg.contains(" 4"),
        "{msg}"
    );
    let adopt = HostBulkhead::open(
        "mm",
        HostOptions {
            on_mismatch: OnMismatch::Adopt,
            ..opts(d, 4)
        },
    )
    .expect("adopt");
    assert_eq!(adopt.stats().stats.limit, 3);
    let held: Vec<_> = (0..3).map(|_| adopt.try_acquire(1).unwrap()).collect();
    assert_eq!(
        adopt.try_acquire(1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit),
        "the segment's limit (3) applies"
    );
    drop(held);

    // (e) The file outlives every process that used it: one exits normally, one is killed
    // holding a permit; neither removes it, and the next attacher reclaims what was held.
    let survive = create_by_child(&dir, "survive", 2);
    let mut holder = Proc::spawn(
        "holder",
        "holder of survive",
        &[
            user_envs(&dir, "survive", 2),
            vec![("HG_WEIGHT", "2".to_owned())],
        ]
        .concat(),
    );
    holder.expect("ready");
    holder.kill();
    assert!(survive.exists(), "removed after its users exited");
    let again = HostBulkhead::open("survive", opts(d, 2)).expect("reattach");
    let s = again.stats();
    assert_eq!(
        (s.stats.active, s.attached),
        (0, 1),
        "the killed holder reclaimed"
    );
    assert!(s.stats.admitted_total >= 2);
    drop(again);
    assert!(survive.exists(), "removed when a handle dropped");

    // (f) Removed while attached: detected at the next beat (bound: 10 beats).
    let beat = Duration::from_millis(100);
    let o = HostOptions {
        beat,
        lease_ttl: Duration::from_secs(5),
        ..opts(d, 2)
    };
    let gone = HostBulkhead::open("gone", o).expect("open gone");
    gone.try_acquire(1)
        .expect("before removal")
        .release()
        .unwrap();
    std::fs::remove_file(gone.path()).unwrap();
    let removed_at = Instant::now();
    loop {
        match gone.try_acquire(1) {
            Ok(p) => drop(p),
            Err(HostError::Removed { path }) => {
                assert_eq!(path, segment_path(d, "gone"));
                break;
            }
            Err(e) => panic!("after removal: {e}"),
        }
        assert!(
            removed_at.elapsed() <= beat * 10,
            "removal not detected within 10 beats"
        );
        thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "host_segment_files: removal detected after {:?} (beat {beat:?})",
        removed_at.elapsed()
    );

    // (g) Unknown and local-only option names are refused by name.
    let mut o = HostOptions::default();
    for (name, words) in [
        ("bogus", "unknown option `bogus`"),
        ("observe", "`observe` is a local bulkhead's option"),
        (
            "max_queued_cost",
            "`max_queued_cost` is a local bulkhead's option",
        ),
        (
            "maxQueuedCost",
            "`maxQueuedCost` is a local bulkhead's option",
        ),
        ("classes", "`classes` is a local bulkhead's option"),
    ] {
        let e = o.set(name, HostValue::Int(1)).unwrap_err();
        assert!(matches!(e, HostError::Option { .. }), "{name}: {e:?}");
        assert!(e.to_string().contains(words), "{name}: {e}");
    }
    assert_eq!(
        o,
        HostOptions::default(),
        "a refused option changed nothing"
    );

    // (h) Two names, two limits: a child holding all of `ind-a` leaves `ind-b` free.
    let mut holder = Proc::spawn(
        "holder",
        "holder of ind-a",
        &[
            user_envs(&dir, "ind-a", 1),
            vec![("HG_WEIGHT", "1".to_owned())],
        ]
        .concat(),
    );
    holder.expect("ready");
    let a = HostBulkhead::open("ind-a", opts(d, 1)).unwrap();
    let b = HostBulkhead::open("ind-b", opts(d, 1)).unwrap();
    assert_eq!(
        a.try_acquire(1).unwrap_err().reason(),
        Some(Reason::ConcurrencyLimit)
    );
    let pb = b.try_acquire(1).expect("ind-b is free");
    assert_eq!((a.stats().stats.active, b.stats().stats.active), (1, 1));
    assert_eq!((a.stats().attached, b.stats().attached), (2, 1));
    drop(pb);
    holder.finish();
    assert_eq!(a.stats().stats.active, 0);

    // (i) Every slot held by a live process: the next process is refused; one dies, and its
    // slot is taken over.
    let slot_envs = [
        user_envs(&dir, "full", 2),
        vec![("HG_SLOTS", "2".to_owned()), ("HG_WEIGHT", "1".to_owned())],
    ]
    .concat();
    let mut h1 = Proc::spawn("holder", "slot holder 1", &slot_envs);
    h1.expect("ready");
    let mut h2 = Proc::spawn("holder", "slot holder 2", &slot_envs);
    h2.expect("ready");
    let full = HostOptions {
        slots: 2,
        ..opts(d, 2)
    };
    let e = HostBulkhead::open("full", full.clone()).unwrap_err();
    assert!(matches!(e, HostError::NoSlot { slots: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("all 2 slots"), "{e}");
    h1.kill();
    let late = HostBulkhead::open("full", full).expect("a dead holder's slot is reused");
    let s = late.stats();
    assert_eq!(
        (s.attached, s.stats.active),
        (2, 1),
        "h1's permit reclaimed, h2's held"
    );
    h2.finish();
    assert_eq!(late.stats().stats.active, 0);
}
