//! A child-process harness for tests that need real processes (the host bulkhead's crash
//! and process tests, the fleet bulkhead's process tests), shared so each crate does not keep
//! its own copy.
//!
//! A child is the calling test binary re-executed as `<exe> child --exact --nocapture
//! --test-threads=1`, with env `HG_HOST_CHILD=<role>`: every test file that uses this module has
//! a `#[test] fn child()` that returns at once unless [`role`] names a role, and then runs it.
//! Roles read their parameters from env ([`env_u64`], [`env_str`]) and talk to the parent over
//! stdout lines `HG:<word> <args…>` ([`say`]); they read commands from stdin ([`listen`]; EOF =
//! the parent is gone).
//!
//! Parent side: [`Spawn`] starts a role, [`Proc`] expects its lines with a timeout, sends it
//! commands, signals it (SIGKILL, SIGSTOP, SIGCONT) and waits for it; dropping a [`Proc`] kills
//! and reaps it. [`Orphan`] does the same for a process that is not this one's child (a
//! grandchild after a fork). [`TempDir`] is a per-test directory removed on drop.
//!
//! Every wait here is bounded; a failed expectation panics with everything the child said on
//! stdout and stderr.

use std::{
    collections::VecDeque,
    io::{BufRead, BufReader, Write},
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, Receiver, RecvTimeoutError},
    },
    time::{Duration, Instant},
};

/// The env variable that names a child's role.
pub const ROLE_ENV: &str = "HG_HOST_CHILD";
/// The prefix of a protocol line on a child's stdout.
pub const PREFIX: &str = "HG:";

// ---------------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------------

/// The role this process runs as, if it is a child (`None` in the parent: `fn child` returns).
/// A child also arranges to die with the thread that spawned it (`PR_SET_PDEATHSIG`) and to
/// dump no core when it aborts on purpose.
pub fn role() -> Option<String> {
    let role = std::env::var(ROLE_ENV).ok().filter(|r| !r.is_empty())?;
    // SAFETY: prctl(PR_SET_PDEATHSIG) and setrlimit with a valid, initialised rlimit have no
    // memory-safety preconditions; they only change this process's own attributes.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
    }
    // The parent may have died before the death signal was armed.
    if let Ok(parent) = std::env::var("HG_PARENT_PID") {
        // SAFETY: getppid has no preconditions.
        if parent.parse::<i32>().ok() != Some(unsafe { libc::getppid() }) {
            std::process::exit(3);
        }
    }
    Some(role)
}

/// Sends one protocol line to the parent (`HG:<line>`), flushed at once.
pub fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    // A leading newline: libtest may have written "test child ... " without one.
    let _ = writeln!(out, "\n{PREFIX}{}", line.as_ref());
    let _ = out.flush();
}

/// The next command from the parent (one stdin line, trimmed); `None` at EOF (the parent closed
/// the pipe or died).
pub fn listen() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_owned()),
    }
}

/// Blocks until the parent closes stdin (or dies), then exits the process at once (no
/// destructors: what the role holds stays held until the process is gone).
pub fn park() -> ! {
    while listen().is_some() {}
    std::process::exit(0)
}

/// An env parameter as a number (panics naming it if absent or malformed).
pub fn env_u64(name: &str) -> u64 {
    let v = env_str(name);
    v.parse()
        .unwrap_or_else(|_| panic!("child env {name}={v:?} is not a number"))
}

/// An env parameter as a number, or `default` if absent.
pub fn env_u64_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("child env {name}={v:?} is not a number"))
        })
        .unwrap_or(default)
}

/// An env parameter (panics naming it if absent).
pub fn env_str(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child env {name} is not set"))
}

// ---------------------------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------------------------

/// A role to start.
#[derive(Debug)]
pub struct Spawn {
    label: String,
    role: String,
    env: Vec<(String, String)>,
}

impl Spawn {
    /// Role `role`; `label` names the child in failure messages.
    pub fn new(role: &str, label: &str) -> Spawn {
        Spawn {
            label: label.to_owned(),
            role: role.to_owned(),
            env: Vec::new(),
        }
    }

    /// One env parameter.
    pub fn env(mut self, key: &str, value: impl ToString) -> Spawn {
        self.env.push((key.to_owned(), value.to_string()));
        self
    }

    /// Starts it: `<this test binary> child --exact --nocapture --test-threads=1`.
    pub fn spawn(self) -> Proc {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new(exe);
        cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, &self.role)
            .env("HG_PARENT_PID", std::process::id().to_string())
            .env_remove("HG_CRASH_AT") // only where a test sets it
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.label));
        let pid = child.id() as i32;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(String::new()));
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    push(&log, "out", &line);
                    if let Some(i) = line.find(PREFIX)
                        && tx.send(line[i + PREFIX.len()..].trim().to_owned()).is_err()
                    {
                        break;
                    }
                }
            });
        }
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut err = BufReader::new(stderr);
                let mut buf = Vec::new();
                while let Ok(n) = err.read_until(b'\n', &mut buf) {
                    if n == 0 {
                        break;
                    }
                    push(&log, "err", String::from_utf8_lossy(&buf).trim_end());
                    buf.clear();
                }
            });
        }
        Proc {
            label: self.label,
            child: Some(child),
            pid,
            stdin,
            rx,
            backlog: VecDeque::new(),
            log,
            status: None,
        }
    }
}

fn push(log: &Mutex<String>, stream: &str, line: &str) {
    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
    if log.len() < 64 * 1024 {
        log.push_str(stream);
        log.push_str("| ");
        log.push_str(line);
        log.push('\n');
    }
}

/// A protocol line: its first word and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The first word.
    pub word: String,
    /// The other words.
    pub args: Vec<String>,
}

impl Line {
    fn parse(text: &str) -> Line {
        let mut it = text.split_whitespace().map(str::to_owned);
        Line {
            word: it.next().unwrap_or_default(),
            args: it.collect(),
        }
    }

    /// Argument `i` as a number (panics if absent or malformed).
    pub fn num(&self, i: usize) -> u64 {
        self.args
            .get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("line {self:?}: argument {i} is not a number"))
    }

    /// Argument `i` (empty if absent).
    pub fn arg(&self, i: usize) -> &str {
        self.args.get(i).map_or("", String::as_str)
    }
}

/// A running child: killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct Proc {
    label: String,
    child: Option<Child>,
    pid: i32,
    stdin: Option<ChildStdin>,
    rx: Receiver<String>,
    backlog: VecDeque<String>,
    log: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Everything it wrote so far (stdout and stderr, tagged).
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn fail(&self, what: &str) -> ! {
        // Give the reader threads a moment to collect the last words of a dying child.
        std::thread::sleep(Duration::from_millis(50));
        panic!(
            "child {} (pid {}): {what}\n--- its output ---\n{}---",
            self.label,
            self.pid,
            self.log()
        )
    }

    /// The next protocol line of any word, waiting at most `timeout` (`None` if none came; panics
    /// if the child's stdout closed — it exited or was killed).
    pub fn next_line(&mut self, timeout: Duration) -> Option<Line> {
        if let Some(l) = self.backlog.pop_front() {
            return Some(Line::parse(&l));
        }
        match self.rx.recv_timeout(timeout) {
            Ok(l) => Some(Line::parse(&l)),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.fail("its stdout closed while a line was expected")
            }
        }
    }

    /// The next line whose first word is `word`, waiting at most `timeout`. Lines of other words
    /// that come first are kept for later calls, except `error`/`fail` lines, which fail the
    /// test at once; panics on timeout or if the child's stdout closes.
    pub fn expect(&mut self, word: &str, timeout: Duration) -> Line {
        if let Some(i) = self
            .backlog
            .iter()
            .position(|l| Line::parse(l).word == word)
        {
            let l = self.backlog.remove(i).unwrap_or_default();
            return Line::parse(&l);
        }
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    let line = Line::parse(&l);
                    if line.word == word {
                        return line;
                    }
                    if line.word == "error" || line.word == "fail" {
                        self.fail(&format!("said {l:?} while {word:?} was expected"));
                    }
                    self.backlog.push_back(l);
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("no {word:?} line within {timeout:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("its stdout closed while {word:?} was expected"))
                }
            }
        }
    }

    /// Sends one command line.
    pub fn send(&mut self, cmd: &str) {
        let ok = match self.stdin.as_mut() {
            Some(w) => writeln!(w, "{cmd}").and_then(|()| w.flush()).is_ok(),
            None => false,
        };
        if !ok {
            self.fail(&format!("could not send {cmd:?} (stdin closed)"));
        }
    }

    /// Closes its stdin (a role in [`park`] or [`listen`] then exits).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `sig` (panics if the process is gone).
    pub fn signal(&self, sig: i32) {
        if self.status.is_some() {
            panic!(
                "child {} already reaped: cannot send signal {sig}",
                self.label
            );
        }
        signal(self.pid, sig).unwrap_or_else(|e| panic!("kill({}, {sig}): {e}", self.pid));
    }

    /// SIGSTOP.
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT.
    pub fn cont(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGKILL, then waits for it (bounded: a SIGKILLed process always goes); its status.
    pub fn kill(&mut self) -> ExitStatus {
        if self.status.is_none() {
            let _ = signal(self.pid, libc::SIGKILL);
        }
        self.wait(Duration::from_secs(30))
            .unwrap_or_else(|| self.fail("still alive 30 s after SIGKILL"))
    }

    /// Waits up to `timeout` for it to exit; its status, or `None` if it still runs.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.status {
            return Some(s);
        }
        let until = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            match child.try_wait() {
                Ok(Some(s)) => {
                    self.status = Some(s);
                    return Some(s);
                }
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
                Ok(None) => return None,
                Err(e) => panic!("wait {}: {e}", self.label),
            }
        }
    }

    /// Waits up to `timeout` for it to exit and asserts it died of `sig`.
    pub fn expect_signal(&mut self, sig: i32, timeout: Duration) {
        match self.wait(timeout) {
            Some(s) if s.signal() == Some(sig) => {}
            Some(s) => self.fail(&format!("exited with {s:?}, expected signal {sig}")),
            None => self.fail(&format!("did not die of signal {sig} within {timeout:?}")),
        }
    }

    /// Waits up to `timeout` for a clean exit (status 0).
    pub fn expect_success(&mut self, timeout: Duration) {
        match self.wait(timeout) {
            Some(s) if s.success() => {}
            Some(s) => self.fail(&format!("exited with {s:?}, expected success")),
            None => self.fail(&format!("did not exit within {timeout:?}")),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stdin = None;
        if self.status.is_none() {
            let _ = signal(self.pid, libc::SIGKILL); // a stopped process dies of it too
            if let Some(child) = self.child.as_mut() {
                let _ = child.wait();
            }
        }
    }
}

/// `kill(pid, sig)`.
pub fn signal(pid: i32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`): a
/// grandchild whose parent dies becomes this process's child, so an [`Orphan`] can wait for it.
/// Process-wide and harmless for the other tests (they reap their own children by pid).
pub fn become_subreaper() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) only changes this process's attribute.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    assert_eq!(
        rc,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
}

/// A descendant that is not (yet) this process's child — a grandchild forked by a child. Killed
/// on drop; reaped by pid once it is this process's child (see [`become_subreaper`]).
#[derive(Debug)]
pub struct Orphan {
    pid: i32,
    reaped: Option<i32>,
}

impl Orphan {
    /// Tracks `pid`.
    pub fn new(pid: i32) -> Orphan {
        Orphan { pid, reaped: None }
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Waits up to `timeout` for it to exit and be reparented and reaped here; its raw wait
    /// status, or `None`.
    pub fn wait(&mut self, timeout: Duration) -> Option<i32> {
        if self.reaped.is_some() {
            return self.reaped;
        }
        let until = Instant::now() + timeout;
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid out-pointer; WNOHANG never blocks.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if rc == self.pid {
                self.reaped = Some(status);
                return self.reaped;
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            let _ = signal(self.pid, libc::SIGKILL);
            let _ = self.wait(Duration::from_secs(5));
        }
    }
}

/// A per-test directory under the system temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh, unique directory `hg-<tag>-<pid>-<n>-<ns>`.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "hg-{tag}-{}-{}-{ns:x}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        TempDir { path }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Polls `f` every `every` until it returns `Some`, at most `timeout`; the value and the time it
/// took, or `None`.
pub fn poll<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<(T, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some((v, start.elapsed()));
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// A process's state letter (`/proc/<pid>/stat` field 3: `R`, `S`, `T` stopped, `Z` zombie…),
/// `None` if it is gone.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .and_then(|f| f.chars().next())
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), 0 if
/// unreadable.
pub fn start_ticks(pid: i32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().nth(19))
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// Reports an error to the parent (`HG:error …`) and exits 1.
pub fn die(what: impl std::fmt::Display) -> ! {
    say(format!("error {what}"));
    std::process::exit(1)
}
