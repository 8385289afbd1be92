//! The host bulkhead's part of the child-process harness (the generic part is
//! `hullguard_testkit::child`, re-exported here): the settings children open the segment with,
//! a raw view of the segment, and the shared `holder` role.

#![allow(dead_code)] // each test file uses a part

use std::{
    path::{Path, PathBuf},
    sync::{Mutex, atomic::Ordering},
    time::Duration,
};

pub use hullguard_testkit::child::*;

/// [`Spawn`] with the host-bulkhead settings in env.
pub trait SpawnHost {
    /// The host-bulkhead settings.
    fn host(self, host: &HostEnv) -> Spawn;
}

impl SpawnHost for Spawn {
    fn host(mut self, host: &HostEnv) -> Spawn {
        for (k, v) in host.pairs() {
            self = self.env(k, v);
        }
        self
    }
}

/// The host-bulkhead settings a parent hands its children in env, so that every process opens
/// the same segment with the same host-wide options.
#[derive(Debug, Clone)]
pub struct HostEnv {
    /// The directory of the segment.
    pub dir: PathBuf,
    /// The segment name.
    pub name: String,
    /// `max_concurrent`.
    pub limit: u64,
    /// The budget, 0 = none.
    pub budget: u64,
    /// Probe period, ms.
    pub probe_ms: u64,
    /// Heartbeat period, ms.
    pub beat_ms: u64,
    /// Lease TTL, ms.
    pub ttl_ms: u64,
}

impl HostEnv {
    /// Short lease settings (probe 50 ms, beat 50 ms, TTL 500 ms), no budget.
    pub fn new(dir: &Path, name: &str, limit: u64) -> HostEnv {
        HostEnv {
            dir: dir.to_path_buf(),
            name: name.to_owned(),
            limit,
            budget: 0,
            probe_ms: 50,
            beat_ms: 50,
            ttl_ms: 500,
        }
    }

    /// The options every process opens the segment with.
    pub fn options(&self) -> hullguard_host::HostOptions {
        hullguard_host::HostOptions {
            max_concurrent: self.limit,
            budget: (self.budget > 0).then_some(self.budget),
            probe: Duration::from_millis(self.probe_ms),
            beat: Duration::from_millis(self.beat_ms),
            lease_ttl: Duration::from_millis(self.ttl_ms),
            queue_timeout: Duration::from_secs(10),
            dir: self.dir.clone(),
            ..hullguard_host::HostOptions::default()
        }
    }

    /// Opens the segment (panics with the error).
    pub fn open(&self) -> hullguard_host::HostBulkhead {
        hullguard_host::HostBulkhead::open(&self.name, self.options())
            .unwrap_or_else(|e| panic!("open {}: {e}", self.name))
    }

    /// As env pairs for [`Spawn::host`].
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HG_DIR", self.dir.display().to_string()),
            ("HG_NAME", self.name.clone()),
            ("HG_LIMIT", self.limit.to_string()),
            ("HG_BUDGET", self.budget.to_string()),
            ("HG_PROBE_MS", self.probe_ms.to_string()),
            ("HG_BEAT_MS", self.beat_ms.to_string()),
            ("HG_TTL_MS", self.ttl_ms.to_string()),
        ]
    }

    /// In a child: the settings its parent passed.
    pub fn from_env() -> HostEnv {
        HostEnv {
            dir: PathBuf::from(env_str("HG_DIR")),
            name: env_str("HG_NAME"),
            limit: env_u64("HG_LIMIT"),
            budget: env_u64_or("HG_BUDGET", 0),
            probe_ms: env_u64("HG_PROBE_MS"),
            beat_ms: env_u64("HG_BEAT_MS"),
            ttl_ms: env_u64("HG_TTL_MS"),
        }
    }
}

/// A raw, shared view of a segment file's words (the test's own mapping, independent of the
/// library's): to read what the library does not report, and to fake what a test needs (a
/// reused pid).
#[derive(Debug)]
pub struct RawSegment {
    ptr: *mut std::sync::atomic::AtomicU64,
    words: usize,
    _file: std::fs::File,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for RawSegment {}
// SAFETY: as above.
unsafe impl Sync for RawSegment {}

impl RawSegment {
    /// Maps the segment file at `path`.
    pub fn open(path: &Path) -> RawSegment {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let bytes = file.metadata().expect("metadata").len() as usize;
        assert!(
            bytes >= hullguard_host::layout::HEADER_WORDS * 8,
            "short segment"
        );
        // SAFETY: a fresh shared mapping of the whole file; the kernel picks the address; the
        // result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(
            ptr,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        RawSegment {
            ptr: ptr.cast(),
            words: bytes / 8,
            _file: file,
        }
    }

    /// The words.
    pub fn words(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: `ptr` is a live, page-aligned shared mapping of `words * 8` bytes, unmapped
        // only in drop; AtomicU64 has u64's size and alignment and every bit pattern is valid.
        unsafe { std::slice::from_raw_parts(self.ptr, self.words) }
    }

    /// Header word `i`.
    pub fn header(&self, i: usize) -> u64 {
        self.words()[i].load(Ordering::SeqCst)
    }

    /// Word `word` of slot `slot`.
    pub fn slot_word(&self, slot: usize, word: usize) -> &std::sync::atomic::AtomicU64 {
        use hullguard_host::layout::{HEADER_WORDS, SLOT_WORDS};
        &self.words()[HEADER_WORDS + slot * SLOT_WORDS + word]
    }

    /// Slot count.
    pub fn n_slots(&self) -> usize {
        (self.header(hullguard_host::layout::h::GEOMETRY) >> 32) as usize
    }

    /// The high-water mark: slots `[0, hwm)` may be occupied.
    pub fn hwm(&self) -> usize {
        (self.header(hullguard_host::layout::h::HWM) as usize).min(self.n_slots())
    }

    /// Slot `slot`'s lease (state, generation).
    pub fn lease(&self, slot: usize) -> (hullguard_host::layout::LeaseState, u64) {
        use hullguard_host::layout::{decode_lease, s};
        decode_lease(self.slot_word(slot, s::LEASE).load(Ordering::SeqCst))
            .unwrap_or_else(|| panic!("slot {slot}: the lease word does not decode"))
    }

    /// Slot `slot`'s (calls, permits).
    pub fn held(&self, slot: usize) -> (u64, u64) {
        use hullguard_host::layout::{decode_held, s};
        let (_, calls, permits) = decode_held(self.slot_word(slot, s::HELD).load(Ordering::SeqCst));
        (calls, permits)
    }

    /// Σ (calls, permits) over `[0, hwm)`.
    pub fn sums(&self) -> (u64, u64) {
        (0..self.hwm()).fold((0, 0), |(c, p), i| {
            let (ci, pi) = self.held(i);
            (c + ci, p + pi)
        })
    }

    /// Σ (calls, permits) at one instant: the held words read until two passes in a row agree
    /// (a single pass reads slots at different instants and may count a permit in two slots
    /// as it moves — reclaimed from one, admitted in another). `None` if they never settle.
    pub fn settled_sums(&self) -> Option<(u64, u64)> {
        use hullguard_host::layout::{decode_held, s};
        let pass = || -> Vec<u64> {
            (0..self.hwm())
                .map(|i| self.slot_word(i, s::HELD).load(Ordering::SeqCst))
                .collect()
        };
        let mut last = pass();
        for _ in 0..1000 {
            let now = pass();
            if now == last {
                return Some(now.iter().fold((0, 0), |(c, p), &w| {
                    let (_, calls, permits) = decode_held(w);
                    (c + calls, p + permits)
                }));
            }
            last = now;
        }
        None
    }

    /// The slots with a published head ticket.
    pub fn tickets(&self) -> Vec<usize> {
        use hullguard_host::layout::{NO_TICKET, s};
        (0..self.hwm())
            .filter(|&i| self.slot_word(i, s::HEAD).load(Ordering::SeqCst) != NO_TICKET)
            .collect()
    }

    /// Slot `slot`'s heartbeat counter.
    pub fn beat(&self, slot: usize) -> u64 {
        self.slot_word(slot, hullguard_host::layout::s::BEAT)
            .load(Ordering::SeqCst)
    }
}

impl Drop for RawSegment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once; `words()` borrows end with `self`.
        unsafe {
            libc::munmap(self.ptr.cast(), self.words * 8);
        }
    }
}
/// What a release came to, as one word: `ok`, `stale`, `foreign`, `already`.
pub fn lease_word(r: Result<(), hullguard_host::LeaseError>) -> &'static str {
    use hullguard_host::LeaseError;
    match r {
        Ok(()) => "ok",
        Err(LeaseError::Stale) => "stale",
        Err(LeaseError::Foreign) => "foreign",
        Err(LeaseError::AlreadyReleased) => "already",
    }
}

/// Role `holder`: opens the segment [`HostEnv::from_env`] names, takes `HG_CALLS` (default 1)
/// calls of `HG_WEIGHT` (default 1) permits, says `held <slot> <pid>`, then serves commands
/// until `exit` or EOF (and exits without releasing anything):
/// * `release` — releases its newest permit: `released ok|stale|foreign|already`;
/// * `acquire` — one more call (waits up to 10 s): `held <slot> <pid>`;
/// * `queue` — a thread queues for 1 permit (waits up to 60 s): `queueing` at once, `granted`
///   when admitted (the permit is then held like the others);
/// * `stats` — `stats <active> <in_flight> <queued> <local_active> <slot>` (host-wide figures);
/// * `exit` — exits 0.
pub fn holder() -> ! {
    use hullguard_host::{HostBulkhead, HostPermit};
    let env = HostEnv::from_env();
    let weight = env_u64_or("HG_WEIGHT", 1);
    let calls = env_u64_or("HG_CALLS", 1);
    let bh: &'static HostBulkhead = Box::leak(Box::new(env.open()));
    let held: &'static Mutex<Vec<HostPermit>> = Box::leak(Box::new(Mutex::new(Vec::new())));
    let hold = |p| held.lock().unwrap_or_else(|p| p.into_inner()).push(p);
    let pid = std::process::id();
    for _ in 0..calls {
        match bh.acquire_blocking(weight, Some(Duration::from_secs(10))) {
            Ok(p) => hold(p),
            Err(e) => die(format!("acquire {weight}: {e}")),
        }
    }
    say(format!("held {} {pid}", bh.slot()));
    while let Some(cmd) = listen() {
        match cmd.as_str() {
            "release" => {
                let p = held.lock().unwrap_or_else(|p| p.into_inner()).pop();
                match p {
                    Some(p) => say(format!("released {}", lease_word(p.release()))),
                    None => die("release: nothing held"),
                }
            }
            "acquire" => match bh.acquire_blocking(weight, Some(Duration::from_secs(10))) {
                Ok(p) => {
                    hold(p);
                    say(format!("held {} {pid}", bh.slot()));
                }
                Err(e) => die(format!("acquire {weight}: {e}")),
            },
            "queue" => {
                std::thread::spawn(move || {
                    match bh.acquire_blocking(1, Some(Duration::from_secs(60))) {
                        Ok(p) => {
                            hold(p);
                            say("granted");
                        }
                        Err(e) => say(format!("refused {e}")),
                    }
                });
                say("queueing");
            }
            "stats" => {
                let s = bh.stats();
                say(format!(
                    "stats {} {} {} {} {}",
                    s.stats.active, s.in_flight, s.stats.queued, s.local_active, s.slot
                ));
            }
            "exit" => std::process::exit(0),
            other => die(format!("unknown command {other:?}")),
        }
    }
    std::process::exit(0)
}
