//! The host-wide bulkhead's table (issue 19; docs/design.md § Benchmarks): `HostBulkhead` beside
//! the local bulkhead and a SysV `SEM_UNDO` semaphore, in one run, three parts:
//!
//! 1. **Uncontended** `try_acquire(1)` + release, one thread, one process, limit 4: the local
//!    `Bulkhead` (+ drop), the `HostBulkhead` (+ `release()`), and a SysV semaphore of value 4
//!    (`semop` −1 with `IPC_NOWAIT | SEM_UNDO`, then +1 with `SEM_UNDO`). `REPS` (default 9, at
//!    least 5) interleaved repetitions whose order alternates; each row prints the median of the
//!    per-repetition ratios and their min–max, as `ratios` does. Targets: host ≤ 3× local,
//!    host ≤ 1× `semop`.
//! 2. **Contended**: 1 (reference), 2 and 8 processes (re-executions of this binary), each
//!    looping try_acquire + release for [`RUN`] on one host bulkhead of limit 4, against the
//!    same on one SysV semaphore of value 4; total ops/s (granted acquire + release pairs) of
//!    each, [`CONTENDED_REPS`] alternating repetitions, and the ratio.
//! 3. **The ledger scan**: the parent's uncontended host acquire + release with N − 1 idle
//!    processes attached (each opened the bulkhead, holds its slot and sleeps) for N = 1, 8, 64:
//!    every admission scans the occupied slots, so this is the curve of its cost.
//!
//! Every child is a re-execution of this binary (`host child …`, never a `fork` of a process
//! with threads), spoken to over pipes: it prints `ready` once set up, starts on a line `go`, and
//! exits when its stdin closes. A guard kills and reaps every child however the parent leaves
//! (return or panic); the segment files live in a temporary directory the run removes; the SysV
//! semaphore is removed (`IPC_RMID`) by its guard.
//!
//! Usage: `cargo run --release -p hullguard-bench --bin host [-- --smoke]` (`REPS=n`).
//! `--smoke` runs every part once at tiny sizes (64-op batches, 50 ms contended runs) through
//! the same code and tables: it proves the driver runs end to end in a few seconds
//! (`bench/smoke.sh`); its numbers mean nothing.
//! `host run <local|host|semop> <n>` runs `n` uncontended ops of one engine (for `perf` or
//! callgrind), `host run host <n> <attached>` with `attached − 1` idle processes beside it.

use hullguard_bench::machine::{
    Background, background_line, cpu_model, median, min_max, repetitions,
};
use std::{
    fmt::Write as _,
    hint::black_box,
    io::{BufRead, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use hullguard_bench::{Limiter, bulkhead};
use hullguard_core::{Bulkhead, Reason};
use hullguard_host::{HostBulkhead, HostOptions};

/// The limit of every engine (host bulkhead, local bulkhead, semaphore value).
const LIMIT: u64 = 4;

/// Attached processes of the scan curve.
const LEVELS: [usize; 3] = [1, 8, 64];

/// Processes of the contended rows (1 is the reference).
const CONTENDED: [usize; 3] = [1, 2, 8];

/// How long each contended run lasts.
const RUN: Duration = Duration::from_secs(1);

/// Repetitions of each contended run (alternating host / semaphore first).
const CONTENDED_REPS: usize = 3;

/// The time one timed batch of the uncontended rows aims at.
const BATCH: Duration = Duration::from_millis(40);

/// `--smoke`: ops per batch, and the length of a contended run.
const SMOKE_OPS: u64 = 64;
const SMOKE_RUN: Duration = Duration::from_millis(50);

/// How long a child may take to report `ready` or its result before the run is abandoned.
const CHILD_TIMEOUT: Duration = Duration::from_secs(30);

// ----- the anchor: a SysV semaphore with SEM_UNDO -----------------------------------------

/// One SysV semaphore (`semget(IPC_PRIVATE)`), acquired and released with `SEM_UNDO` (the
/// kernel's crash-safe counter: a dead holder's −1 is undone at its exit). The creating
/// process's handle removes it (`IPC_RMID`) when dropped.
struct SysvSem {
    id: i32,
    owner: bool,
}

impl SysvSem {
    /// A new private semaphore of value `value`, mode 0600.
    fn create(value: u64) -> std::io::Result<SysvSem> {
        // SAFETY: semget has no memory preconditions; IPC_PRIVATE always makes a new set.
        let id = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
        if id < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sem = SysvSem { id, owner: true };
        // SAFETY: SETVAL on semaphore 0 of our set; the variadic fourth argument (`union semun`)
        // is read as its `int val` member, which an int argument is passed as on Linux.
        let rc = unsafe { libc::semctl(id, 0, libc::SETVAL, value as libc::c_int) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error()); // `sem` removes the set
        }
        Ok(sem)
    }

    /// Another process's handle on semaphore set `id` (never removes it).
    fn attach(id: i32) -> SysvSem {
        SysvSem { id, owner: false }
    }

    fn op(&self, delta: i16, flags: i32) -> bool {
        let mut op = libc::sembuf {
            sem_num: 0,
            sem_op: delta,
            sem_flg: flags as i16,
        };
        // SAFETY: one valid sembuf, count 1.
        let rc = unsafe { libc::semop(self.id, &mut op, 1) };
        if rc == 0 {
            return true;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => false,
            _ => panic!("semop({delta}) on set {}: {e}", self.id),
        }
    }

    /// Takes one unit if one is free (`IPC_NOWAIT | SEM_UNDO`).
    #[inline]
    fn try_acquire(&self) -> bool {
        self.op(-1, libc::IPC_NOWAIT | libc::SEM_UNDO)
    }

    /// Returns one unit (`SEM_UNDO`: the undo adjustment goes back to zero).
    #[inline]
    fn release(&self) {
        assert!(self.op(1, libc::SEM_UNDO), "semop(+1) never waits");
    }
}

/// The set a signal handler removes if the run is interrupted (SIGINT, SIGTERM, SIGHUP):
/// `-1` = none. A SysV set outlives its processes (until reboot), unlike the children, which
/// exit when their stdin closes, and the temporary directory, which is only files.
static SEM_TO_REMOVE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_interrupt(sig: libc::c_int) {
    let id = SEM_TO_REMOVE.swap(-1, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: semctl, signal and raise are async-signal-safe system calls; the handler touches
    // only an atomic. Re-raising with the default action ends the process as the signal would.
    unsafe {
        if id >= 0 {
            libc::semctl(id, 0, libc::IPC_RMID);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Removes `sem` if the run is interrupted by a signal.
fn remove_on_interrupt(sem: &SysvSem) {
    SEM_TO_REMOVE.store(sem.id, std::sync::atomic::Ordering::SeqCst);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that is an `extern "C" fn(c_int)` doing only
        // async-signal-safe work (above).
        unsafe {
            libc::signal(sig, on_interrupt as *const () as libc::sighandler_t);
        }
    }
}

impl Drop for SysvSem {
    fn drop(&mut self) {
        if self.owner {
            let _ = SEM_TO_REMOVE.compare_exchange(
                self.id,
                -1,
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            );
            // SAFETY: IPC_RMID on our own set; no fourth argument is read.
            unsafe {
                libc::semctl(self.id, 0, libc::IPC_RMID);
            }
        }
    }
}

// ----- the engines' loops ----------------------------------------------------------------

/// `n` uncontended try_acquire + release on the host bulkhead.
#[inline(never)]
fn host_cycles(bh: &HostBulkhead, n: u64) -> Duration {
    let t0 = Instant::now();
    for _ in 0..n {
        let permit = black_box(bh).try_acquire(1).expect("a permit is free");
        permit.release().expect("released");
    }
    t0.elapsed()
}

/// `n` uncontended try_acquire + drop on the local bulkhead.
#[inline(never)]
fn local_cycles(bh: &Bulkhead, n: u64) -> Duration {
    let t0 = Instant::now();
    black_box(bh).cycles(n);
    t0.elapsed()
}

/// `n` uncontended −1 / +1 on the semaphore.
#[inline(never)]
fn sem_cycles(sem: &SysvSem, n: u64) -> Duration {
    let t0 = Instant::now();
    for _ in 0..n {
        assert!(black_box(sem).try_acquire(), "a unit is free");
        sem.release();
    }
    t0.elapsed()
}

/// The options of every host bulkhead of the run: limit 4, the segment in `dir`, the default
/// lease timing (a keeper beating every second and probing every 250 ms, as users get it).
fn host_options(dir: &Path) -> HostOptions {
    HostOptions {
        max_concurrent: LIMIT,
        dir: dir.to_path_buf(),
        ..HostOptions::default()
    }
}

// ----- children ----------------------------------------------------------------------------

/// A child: a re-execution of this binary.
struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Kid {
    /// Starts `host child <args>` (its `ready` is read by [`Kids::start`]).
    fn spawn(args: &[String]) -> Kid {
        let exe = std::env::current_exe().expect("this binary's path");
        let mut child = Command::new(exe)
            .arg("child")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a child");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Kid {
            child,
            stdin,
            stdout,
        }
    }

    /// The child's next line (its stdout closing without one is an error: it failed, and said
    /// why on stderr). Called only under [`Kids::watchdog`], which kills a child that neither
    /// answers nor exits within [`CHILD_TIMEOUT`] (its pipe closes and this read ends).
    fn line(&mut self) -> String {
        let mut s = String::new();
        let n = self.stdout.read_line(&mut s).expect("read a child's line");
        assert!(n > 0, "a child exited early (see its message above)");
        s.trim_end().to_string()
    }

    fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("open stdin");
        stdin.write_all(b"go\n").expect("signal a child");
        stdin.flush().expect("signal a child");
    }

    /// CPU time the child (all its threads) has run so far: `/proc/<pid>/schedstat`, ns.
    fn cpu(&self) -> Option<Duration> {
        let pid = self.child.id();
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let mut ns = 0u64;
        for t in tasks.flatten() {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(Duration::from_nanos(ns))
    }
}

/// Every child of the run: each is killed and reaped when this is dropped, whether the parent
/// returns or panics. A watchdog kills them all (so every blocked read ends) if a part takes
/// longer than [`CHILD_TIMEOUT`] to get an answer.
struct Kids {
    kids: Vec<Kid>,
}

impl Kids {
    fn new() -> Self {
        Kids { kids: Vec::new() }
    }

    fn len(&self) -> usize {
        self.kids.len()
    }

    /// Runs `f` while a watchdog thread waits: if `f` has not returned within
    /// [`CHILD_TIMEOUT`], every child listed in `pids` is sent SIGKILL (their pipes close, so
    /// any read of `f` ends with an error instead of hanging).
    fn watchdog<T>(pids: Vec<u32>, f: impl FnOnce() -> T) -> T {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                if rx.recv_timeout(CHILD_TIMEOUT) == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                {
                    eprintln!("host bench: children silent for {CHILD_TIMEOUT:?}: killing them");
                    for pid in pids {
                        // SAFETY: kill has no memory preconditions; these are our children,
                        // not yet reaped (the guard reaps them only after this scope ends).
                        unsafe {
                            libc::kill(pid as libc::pid_t, libc::SIGKILL);
                        }
                    }
                }
            });
            let out = f();
            let _ = tx.send(());
            out
        })
    }

    /// Starts `n` more children with `args`, all at once, and waits until each reports `ready`.
    fn start(&mut self, n: usize, args: &[String]) {
        let first = self.kids.len();
        for _ in 0..n {
            self.kids.push(Kid::spawn(args)); // owned by the guard from here on
        }
        let pids = self.pids();
        Kids::watchdog(pids, || {
            for k in &mut self.kids[first..] {
                let line = k.line();
                assert_eq!(line, "ready", "child {args:?} did not get ready");
            }
        });
    }

    fn pids(&self) -> Vec<u32> {
        self.kids.iter().map(|k| k.child.id()).collect()
    }

    /// Kills and reaps every child (idempotent).
    fn stop_all(&mut self) {
        for mut k in self.kids.drain(..) {
            drop(k.stdin.take());
            let _ = k.child.kill();
            let _ = k.child.wait();
        }
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The temporary directory of the run's segment files, removed with everything in it.
struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory `hullguard-bench-host.<pid>.<nanos>` in the system's temporary
    /// directory; first removes those of earlier runs whose process is gone (a run ended by a
    /// signal leaves its directory behind).
    fn new() -> TempDir {
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
            for e in entries.flatten() {
                let name = e.file_name();
                let pid = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("hullguard-bench-host."))
                    .and_then(|rest| rest.split('.').next())
                    .and_then(|pid| pid.parse::<u32>().ok());
                if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let p = std::env::temp_dir().join(format!(
            "hullguard-bench-host.{}.{nanos}",
            std::process::id()
        ));
        std::fs::create_dir(&p).expect("create the temporary directory");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `host child <role> …`: what a child does.
fn child(args: &[String]) {
    let arg = |i: usize| -> &str { args.get(i).map_or("", String::as_str) };
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    fn wait_line(stdin: &mut std::io::StdinLock<'_>) -> Option<String> {
        let mut s = String::new();
        match stdin.read_line(&mut s) {
            Ok(n) if n > 0 => Some(s.trim_end().to_string()),
            _ => None, // the parent closed our stdin (or died): exit
        }
    }
    match arg(0) {
        // Attach, hold the slot, sleep until stdin closes.
        "idle" => {
            let bh = HostBulkhead::open(arg(2), host_options(Path::new(arg(1))))
                .unwrap_or_else(|e| die(&format!("idle child: open: {e}")));
            writeln!(stdout, "ready").and_then(|_| stdout.flush()).ok();
            while wait_line(&mut stdin).is_some() {}
            drop(bh);
        }
        // Loop try_acquire + release for `ms` after `go`; print "granted refused elapsed_ns".
        "host" | "semop" => {
            let ms: u64 = arg(1).parse().unwrap_or_else(|_| die("bad run length"));
            let run = Duration::from_millis(ms);
            let mut one: Box<dyn FnMut() -> bool> = if arg(0) == "host" {
                let bh = HostBulkhead::open(arg(3), host_options(Path::new(arg(2))))
                    .unwrap_or_else(|e| die(&format!("host child: open: {e}")));
                Box::new(move || match bh.try_acquire(1) {
                    Ok(p) => {
                        p.release().expect("released");
                        true
                    }
                    Err(e) if e.reason() == Some(Reason::ConcurrencyLimit) => false,
                    Err(e) => die(&format!("host child: try_acquire: {e}")),
                })
            } else {
                let sem = SysvSem::attach(arg(2).parse().unwrap_or_else(|_| die("bad set id")));
                Box::new(move || {
                    if sem.try_acquire() {
                        sem.release();
                        true
                    } else {
                        false
                    }
                })
            };
            writeln!(stdout, "ready").and_then(|_| stdout.flush()).ok();
            if wait_line(&mut stdin).as_deref() != Some("go") {
                return;
            }
            let (mut granted, mut refused) = (0u64, 0u64);
            let t0 = Instant::now();
            loop {
                for _ in 0..64 {
                    if one() {
                        granted += 1;
                    } else {
                        refused += 1;
                    }
                }
                if t0.elapsed() >= run {
                    break;
                }
            }
            let ns = t0.elapsed().as_nanos();
            writeln!(stdout, "{granted} {refused} {ns}")
                .and_then(|_| stdout.flush())
                .ok();
        }
        _ => die(&format!("unknown child role {:?}", arg(0))),
    }
}

fn die(msg: &str) -> ! {
    eprintln!("host bench: {msg}");
    std::process::exit(1);
}

// ----- statistics and the machine --------------------------------------------------------

/// Per-repetition ratios `a[i] / b[i]`: the median and the min–max.
fn ratio(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    let (lo, hi) = min_max(&r);
    (median(&r), lo, hi)
}

// ----- the table -------------------------------------------------------------------------

/// An uncontended engine: `n` ops, their time.
type Engine<'a> = Box<dyn Fn(u64) -> Duration + 'a>;

/// Part 3 at one level: the parent's host and local ns/op per repetition, and the idle
/// children's CPU share during the level.
struct Level {
    attached: usize,
    host: Vec<f64>,
    local: Vec<f64>,
    idle_cpu: Option<f64>,
}

/// Part 2 at one process count: total ops/s per repetition and refused shares, each engine.
struct Contended {
    procs: usize,
    host: Vec<f64>,
    sem: Vec<f64>,
    host_refused: Vec<f64>,
    sem_refused: Vec<f64>,
}

/// A row's target: pass when the median ratio is at most `Some(t)`; `None` = reported only.
fn judge(med: f64, target: Option<f64>, misses: &mut usize) -> (String, &'static str) {
    match target {
        Some(t) if med <= t => (format!("≤ {t:.2}"), "pass"),
        Some(t) => {
            *misses += 1;
            (format!("≤ {t:.2}"), "MISS")
        }
        None => ("—".to_string(), "info"),
    }
}

const HEADER_NS: (&str, &str, &str, &str, &str, &str, &str) = (
    "row",
    "anchor",
    "hullguard",
    "anchor",
    "ratio median (min–max)",
    "target",
    "result",
);

fn header(out: &mut String, cols: (&str, &str, &str, &str, &str, &str, &str)) {
    let h = format!(
        "{:<46} {:<15} {:>11} {:>11}  {:<22} {:<8} {}",
        cols.0, cols.1, cols.2, cols.3, cols.4, cols.5, cols.6
    );
    let _ = writeln!(out, "{h}");
    let _ = writeln!(out, "{}", "-".repeat(h.chars().count()));
}

#[allow(clippy::too_many_arguments)]
fn row(
    out: &mut String,
    misses: &mut usize,
    label: &str,
    anchor_label: &str,
    hg: f64,
    anchor: f64,
    (med, lo, hi): (f64, f64, f64),
    target: Option<f64>,
) {
    let (t, result) = judge(med, target, misses);
    let _ = writeln!(
        out,
        "{:<46} {:<15} {:>11.2} {:>11.2}  {:<22} {:<8} {}",
        label,
        anchor_label,
        hg,
        anchor,
        format!("{med:.2} ({lo:.2}–{hi:.2})"),
        t,
        result
    );
}

/// Ops per batch so that one batch of `f` takes about [`BATCH`].
fn calibrate(f: &dyn Fn(u64) -> Duration) -> u64 {
    let probe = 2_000;
    f(probe); // warm-up
    let ns = f(probe).as_nanos().max(1) as f64 / probe as f64;
    ((BATCH.as_nanos() as f64 / ns) as u64).clamp(1_000, 20_000_000)
}

/// ns per op of `f` over `batch` ops.
fn ns_per_op(f: &dyn Fn(u64) -> Duration, batch: u64) -> f64 {
    f(batch).as_secs_f64() * 1e9 / batch as f64
}

/// One contended run: `n` children of `role` (`host` / `semop`) started, told `go` together;
/// returns (granted ops/s summed over the children, refused share of the tries).
fn contended(kids: &mut Kids, n: usize, args: &[String]) -> (f64, f64) {
    assert_eq!(kids.len(), 0);
    kids.start(n, args);
    let pids = kids.pids();
    let results: Vec<(u64, u64, u64)> = Kids::watchdog(pids, || {
        for k in &mut kids.kids {
            k.go();
        }
        kids.kids
            .iter_mut()
            .map(|k| {
                let line = k.line();
                let f: Vec<u64> = line
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                assert_eq!(f.len(), 3, "a child's result line: {line:?}");
                (f[0], f[1], f[2])
            })
            .collect()
    });
    kids.stop_all();
    let ops: f64 = results
        .iter()
        .map(|&(g, _, ns)| g as f64 * 1e9 / ns.max(1) as f64)
        .sum();
    let (granted, refused) = results
        .iter()
        .fold((0u64, 0u64), |(g, r), &(g1, r1, _)| (g + g1, r + r1));
    (ops, refused as f64 / (granted + refused).max(1) as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("child") => child(&args[1..]),
        Some("run") if args.len() == 3 || args.len() == 4 => run_one(&args[1..]),
        Some("--smoke") if args.len() == 1 => table(true),
        None => table(false),
        _ => {
            eprintln!(
                "usage: host [--smoke]   (REPS=n: repetitions, default 9, at least 5)\n       \
                 host run <local|host|semop> <n> [attached]"
            );
            std::process::exit(2);
        }
    }
}

/// `host run <engine> <n> [attached]`: `n` uncontended ops of one engine, for a profiler.
fn run_one(args: &[String]) {
    let n: u64 = args[1].parse().unwrap_or_else(|_| die("bad op count"));
    let attached: usize = args
        .get(2)
        .map_or(Ok(1), |s| s.parse())
        .unwrap_or_else(|_| die("bad attached count"));
    let dir = TempDir::new();
    let mut kids = Kids::new();
    let d = match args[0].as_str() {
        "local" => local_cycles(&bulkhead(LIMIT), n),
        "semop" => sem_cycles(&SysvSem::create(LIMIT).expect("semget"), n),
        "host" => {
            let bh = HostBulkhead::open("run", host_options(&dir.0)).expect("open");
            let dir_s = dir.0.display().to_string();
            kids.start(
                attached.saturating_sub(1),
                &["idle".into(), dir_s, "run".into()],
            );
            host_cycles(&bh, n)
        }
        other => die(&format!("unknown engine {other:?}")),
    };
    println!("{} {n} ops {:?}", args[0], d);
}

fn table(smoke: bool) {
    let reps = repetitions(smoke);
    let contended_reps = if smoke { 1 } else { CONTENDED_REPS };
    let run = if smoke { SMOKE_RUN } else { RUN };
    let started = Instant::now();

    // Declared in this order so that they drop in the reverse: children first, then the
    // semaphore, then the directory.
    let dir = TempDir::new();
    let dir_s = dir.0.display().to_string();
    let sem = SysvSem::create(LIMIT).expect("semget (SysV IPC available?)");
    remove_on_interrupt(&sem);
    let mut kids = Kids::new();

    let local = bulkhead(LIMIT);
    let host = HostBulkhead::open("uncontended", host_options(&dir.0)).expect("open");
    let engines: [Engine<'_>; 3] = [
        Box::new(|n| local_cycles(&local, n)),
        Box::new(|n| host_cycles(&host, n)),
        Box::new(|n| sem_cycles(&sem, n)),
    ];

    // ----- part 1: uncontended -----
    let background = Background::start();
    let batches: Vec<u64> = engines
        .iter()
        .map(|f| if smoke { SMOKE_OPS } else { calibrate(f) })
        .collect();
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); engines.len()];
    for rep in 0..reps {
        let mut order: Vec<usize> = (0..engines.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            ns[i].push(ns_per_op(&*engines[i], batches[i]));
        }
    }
    let bg1 = background.shares();
    let (local_ns, host_ns, sem_ns) = (&ns[0], &ns[1], &ns[2]);

    // ----- part 3 (run before part 2, printed after it): the scan curve. Each level attaches
    // more idle children to part 1's segment (level 1: none) and measures the parent's host
    // op again, interleaved with the local bulkhead as a drift control.
    let mut curve: Vec<Level> = Vec::new();
    for &level in &LEVELS {
        let extra = level - 1 - kids.len();
        kids.start(extra, &["idle".into(), dir_s.clone(), "uncontended".into()]);
        let cpu0: Option<Duration> = kids.kids.iter().map(Kid::cpu).sum();
        let t0 = Instant::now();
        let (mut h, mut l) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            if rep % 2 == 0 {
                h.push(ns_per_op(&*engines[1], batches[1]));
                l.push(ns_per_op(&*engines[0], batches[0]));
            } else {
                l.push(ns_per_op(&*engines[0], batches[0]));
                h.push(ns_per_op(&*engines[1], batches[1]));
            }
        }
        let wall = t0.elapsed();
        let cpu1: Option<Duration> = kids.kids.iter().map(Kid::cpu).sum();
        let idle_share = cpu0
            .zip(cpu1)
            .map(|(a, b)| (b.saturating_sub(a)).as_secs_f64() / wall.as_secs_f64());
        curve.push(Level {
            attached: level,
            host: h,
            local: l,
            idle_cpu: idle_share.filter(|_| level > 1),
        });
    }
    let end = host.stats();
    let (slots, attached_at_end) = (end.slots, end.attached);
    kids.stop_all();

    // ----- part 2: contended -----
    let mut cont: Vec<Contended> = Vec::new();
    let ms = run.as_millis().to_string();
    for &n in &CONTENDED {
        let (mut h, mut s, mut hr, mut sr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for rep in 0..contended_reps {
            // A fresh segment per run: nobody else attached, `n` slots occupied.
            let name = format!("contended-{n}-{rep}");
            let host_args = vec!["host".into(), ms.clone(), dir_s.clone(), name];
            let sem_args = vec!["semop".into(), ms.clone(), sem.id.to_string()];
            let mut one = |args: &[String], ops: &mut Vec<f64>, refused: &mut Vec<f64>| {
                let (o, r) = contended(&mut kids, n, args);
                ops.push(o);
                refused.push(r);
            };
            if rep % 2 == 0 {
                one(&host_args, &mut h, &mut hr);
                one(&sem_args, &mut s, &mut sr);
            } else {
                one(&sem_args, &mut s, &mut sr);
                one(&host_args, &mut h, &mut hr);
            }
        }
        cont.push(Contended {
            procs: n,
            host: h,
            sem: s,
            host_refused: hr,
            sem_refused: sr,
        });
    }

    // ----- the report -----
    let mut out = String::new();
    let mut misses = 0;
    if smoke {
        let _ = writeln!(
            out,
            "SMOKE RUN (--smoke): 1 repetition of {SMOKE_OPS}-op batches, {}-ms contended runs; \
             the numbers below mean nothing",
            SMOKE_RUN.as_millis()
        );
    }
    let _ = writeln!(
        out,
        "hullguard host table — {} ({} logical CPUs), limit {LIMIT}, segment in {}",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::env::temp_dir().display(),
    );
    let _ = writeln!(
        out,
        "1. uncontended, one thread: {reps} interleaved repetitions, alternating order; ns per \
         op, ratio = hullguard host / anchor per repetition"
    );
    let _ = writeln!(out);
    header(&mut out, HEADER_NS);
    let host_label = "host try_acquire(1)+release, 1 attached";
    row(
        &mut out,
        &mut misses,
        host_label,
        "local bulkhead",
        median(host_ns),
        median(local_ns),
        ratio(host_ns, local_ns),
        Some(3.0),
    );
    row(
        &mut out,
        &mut misses,
        host_label,
        "SysV SEM_UNDO",
        median(host_ns),
        median(sem_ns),
        ratio(host_ns, sem_ns),
        Some(1.0),
    );
    row(
        &mut out,
        &mut misses,
        "  local bulkhead (try_acquire(1)+drop)",
        "SysV SEM_UNDO",
        median(local_ns),
        median(sem_ns),
        ratio(local_ns, sem_ns),
        None,
    );

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "2. contended: N processes each looping try_acquire(1)+release for {} ms, limit {LIMIT}, \
         {contended_reps} alternating repetitions; total granted ops/s, ratio = anchor ops/s / \
         host ops/s (time per op, host / anchor)",
        run.as_millis()
    );
    let _ = writeln!(out);
    header(
        &mut out,
        (
            "row",
            "anchor",
            "host op/s",
            "anchor op/s",
            "ratio median (min–max)",
            "target",
            "result",
        ),
    );
    let mut refusals = Vec::new();
    for c in &cont {
        let (med, lo, hi) = ratio(&c.sem, &c.host);
        let label = match c.procs {
            1 => "1 process (reference)".to_string(),
            n => format!("{n} processes"),
        };
        let _ = writeln!(
            out,
            "{:<46} {:<15} {:>11} {:>11}  {:<22} {:<8} info",
            label,
            "SysV SEM_UNDO",
            si(median(&c.host)),
            si(median(&c.sem)),
            format!("{med:.2} ({lo:.2}–{hi:.2})"),
            "—",
        );
        refusals.push(format!(
            "{} proc: host {:.1}%, semop {:.1}%",
            c.procs,
            100.0 * median(&c.host_refused),
            100.0 * median(&c.sem_refused)
        ));
    }
    let _ = writeln!(
        out,
        "tries refused at the limit (median share): {}",
        refusals.join("; ")
    );

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "3. ledger scan: the parent's uncontended host try_acquire(1)+release with N − 1 idle \
         processes attached (each holds a slot; every admission and release scans the occupied \
         slots); {reps} repetitions, interleaved with the local bulkhead"
    );
    let _ = writeln!(out);
    header(&mut out, HEADER_NS);
    let one = &curve[0].host;
    for lv in &curve {
        let n = lv.attached;
        let (h, l) = (&lv.host, &lv.local);
        if n > 1 {
            row(
                &mut out,
                &mut misses,
                &format!("host, {n} attached"),
                "1 attached",
                median(h),
                median(one),
                ratio(h, one),
                None,
            );
        }
        for (anchor, an) in [("local bulkhead", l), ("SysV SEM_UNDO", sem_ns)] {
            row(
                &mut out,
                &mut misses,
                &if n > 1 {
                    format!("  {n} attached")
                } else {
                    format!("host, {n} attached")
                },
                anchor,
                median(h),
                median(an),
                ratio(h, an),
                None,
            );
        }
        if let Some(share) = lv.idle_cpu {
            let _ = writeln!(
                out,
                "  ({} idle processes' keepers (beat, probe) used {:.2}% of one CPU meanwhile)",
                n - 1,
                share * 100.0
            );
        }
    }
    if let [.., lo, hi] = curve.as_slice() {
        let _ = writeln!(
            out,
            "scan slope: {:.2} ns per extra attached process ({} → {})",
            (median(&hi.host) - median(&lo.host)) / (hi.attached - lo.attached) as f64,
            lo.attached,
            hi.attached
        );
    }

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "segment: {slots} slots, {attached_at_end} attached at the end of part 3"
    );
    let _ = writeln!(out, "{}", background_line("part 1", bg1));
    let _ = writeln!(
        out,
        "{misses} target(s) missed; {:.0} s",
        started.elapsed().as_secs_f64()
    );
    print!("{out}");
}

/// `12.3 M`, `456.7 k`.
fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}
