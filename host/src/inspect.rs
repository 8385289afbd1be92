//! Segments seen from outside (docs/design.md §14.1): list, show, reap and remove them without
//! attaching (no slot is claimed). The `hullguard host` command (shipped with the Python and
//! Node packages, [`cli`](crate::cli)) and a gunicorn master's `child_exit` hook use it.

use std::{
    fmt::Write as _,
    os::fd::AsFd,
    path::{Path, PathBuf},
    sync::atomic::Ordering,
};

use crate::{
    attachment::{Probe, probe_slot},
    error::HostError,
    file,
    layout::{self, LeaseState, NO_TICKET, h, s},
    segment::{Segment, SegmentConfig},
};

/// One slot, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// Its index.
    pub index: usize,
    /// `"free"`, `"active"`, `"reclaiming"`, `"expired"`.
    pub state: &'static str,
    /// Whether its owner's liveness lock is held (`false` for a free slot).
    pub alive: bool,
    /// The lease generation.
    pub generation: u64,
    /// The owner's pid, in its own pid namespace.
    pub pid: u64,
    /// The inode of the owner's pid namespace.
    pub pidns: u64,
    /// The owner's library tag (`"py"`, `"node"`, `"rust"`, `"c"`).
    pub library: String,
    /// Calls in flight.
    pub calls: u64,
    /// Permits held.
    pub permits: u64,
    /// Budget units held.
    pub cost: u64,
    /// Waiters queued in the owner.
    pub queued: u64,
    /// The owner's smallest waiting ticket.
    pub head_ticket: Option<u64>,
    /// The heartbeat counter.
    pub beat: u64,
    /// When the owner attached, ms since the Unix epoch.
    pub attached_ms: u64,
}

/// A segment, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The file.
    pub path: PathBuf,
    /// The name (the file name without `hullguard.<euid>.`).
    pub name: String,
    /// The host-wide configuration.
    pub config: SegmentConfig,
    /// Who created it (`"py 0.1.0"`).
    pub creator: String,
    /// Its slot count.
    pub slots: usize,
    /// Slots ever claimed (`hwm`).
    pub hwm: usize,
    /// Whether it was marked poisoned.
    pub poisoned: bool,
    /// The occupied slots.
    pub occupied: Vec<SlotInfo>,
    /// Header counters: (name, value).
    pub counters: Vec<(&'static str, u64)>,
}

impl SegmentInfo {
    /// Processes attached now (live, active slots).
    pub fn attached(&self) -> usize {
        self.occupied
            .iter()
            .filter(|s| s.alive && s.state == "active")
            .count()
    }

    /// Permits held, calls in flight, budget units held by live processes (what `stats()`
    /// and the metrics report: C37).
    pub fn held(&self) -> (u64, u64, u64) {
        self.sum(true)
    }

    /// The same, still in the slots of dead processes (reclaimed at the next probe or reap).
    pub fn held_by_dead(&self) -> (u64, u64, u64) {
        self.sum(false)
    }

    fn sum(&self, alive: bool) -> (u64, u64, u64) {
        self.occupied
            .iter()
            .filter(|s| s.alive == alive)
            .fold((0, 0, 0), |(p, c, u), s| {
                (p + s.permits, c + s.calls, u + s.cost)
            })
    }
}

fn lossy(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The segment files of this user in `dir`, by name.
///
/// # Errors
/// [`HostError::Io`] if `dir` cannot be read.
pub fn list(dir: &Path) -> Result<Vec<String>, HostError> {
    let prefix = file::path_of(Path::new(""), "")
        .to_string_lossy()
        .into_owned();
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|source| HostError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(rest) = name.strip_prefix(&prefix) {
            if !rest.is_empty() {
                out.push(rest.to_owned());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads segment `name` in `dir`, probing every occupied slot's liveness; with `reap`, dead
/// slots are reclaimed on the way (as any attached process would within a probe period).
///
/// # Errors
/// As attaching: [`HostError::Io`] (`NotFound` if there is none), [`HostError::Permission`],
/// [`HostError::Incompatible`].
pub fn show(dir: &Path, name: &str, reap: bool) -> Result<(SegmentInfo, usize), HostError> {
    file::check_name(name)?;
    let path = file::path_of(dir, name);
    let opened = file::attach(&path)?;
    let seg = Segment::new(opened.mapping.words()).map_err(|e| HostError::Incompatible {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let fd = opened.file.as_fd();
    let mut reaped = 0;
    let mut occupied = Vec::new();
    for i in 0..seg.hwm() {
        let alive = if reap {
            match probe_slot(seg, fd, i) {
                Probe::Reclaimed => {
                    reaped += 1;
                    false
                }
                Probe::Free => false,
                Probe::Alive(..) => true,
            }
        } else {
            match crate::os::try_lock_byte(fd, layout::lock_byte(i)) {
                Ok(true) => {
                    let _ = crate::os::unlock_byte(fd, layout::lock_byte(i));
                    false
                }
                _ => true,
            }
        };
        let Ok((state, generation)) = seg.lease_of(i) else {
            continue;
        };
        if state == LeaseState::Free {
            continue;
        }
        let w = |k: usize| seg.slot_word(i, k).load(Ordering::SeqCst);
        let (_, calls, permits) = layout::decode_held(w(s::HELD));
        let (_, cost) = layout::decode_cost(w(s::COST));
        occupied.push(SlotInfo {
            index: i,
            state: match state {
                LeaseState::Free => "free",
                LeaseState::Active => "active",
                LeaseState::Reclaiming => "reclaiming",
                LeaseState::Expired => "expired",
            },
            alive,
            generation,
            pid: w(s::PID),
            pidns: w(s::PIDNS),
            library: lossy(&w(s::LIB).to_le_bytes()),
            calls,
            permits,
            cost,
            queued: w(s::QUEUED),
            head_ticket: Some(w(s::HEAD)).filter(|&t| t != NO_TICKET),
            beat: w(s::BEAT),
            attached_ms: w(s::ATTACHED_MS),
        });
    }
    if reaped > 0 {
        // Wake whoever holds the smallest ticket now: the reclaimed permits may be its turn.
        let scan = seg.scan();
        if scan.has_waiters() {
            crate::os::futex_wake(seg.ring(scan.min_slot));
        }
    }
    let c = |k: usize| seg.header(k).load(Ordering::Relaxed);
    let info = SegmentInfo {
        path,
        name: name.to_owned(),
        config: seg.config(),
        creator: lossy(&seg.creator().0),
        slots: seg.n_slots(),
        hwm: seg.hwm(),
        poisoned: seg.poisoned(),
        occupied,
        counters: vec![
            ("admitted_total", seg.admitted_total()),
            ("reclaimed_dead_total", c(h::RECLAIMED_DEAD)),
            ("reclaimed_expired_total", c(h::RECLAIMED_EXPIRED)),
            ("reclaimed_permits_total", c(h::RECLAIMED_PERMITS)),
            ("orphaned_total", c(h::ORPHANED)),
            ("stale_releases_total", c(h::STALE_RELEASES)),
            ("foreign_releases_total", c(h::FOREIGN_RELEASES)),
        ],
    };
    Ok((info, reaped))
}

/// Reclaims every dead slot of segment `name` without attaching: a gunicorn master's
/// `child_exit` hook, a Node `cluster` primary's `exit` handler. Returns the slots reclaimed.
///
/// # Errors
/// As [`show`].
pub fn reap(dir: &Path, name: &str) -> Result<usize, HostError> {
    show(dir, name, true).map(|(_, n)| n)
}

/// Removes segment `name`'s file. Refused while a live process is attached, unless `force`
/// (an attached process notices at its next beat and refuses from then on: it would hold a
/// limit of its own).
///
/// # Errors
/// [`HostError::Io`]; [`HostError::Option`] (option `force`) naming the live processes.
pub fn remove(dir: &Path, name: &str, force: bool) -> Result<(), HostError> {
    let (info, _) = show(dir, name, true)?;
    let live: Vec<String> = info
        .occupied
        .iter()
        .filter(|s| s.alive)
        .map(|s| format!("pid {} (slot {})", s.pid, s.index))
        .collect();
    if !live.is_empty() && !force {
        return Err(HostError::InUse {
            path: info.path.clone(),
            holders: live.join(", "),
        });
    }
    std::fs::remove_file(&info.path).map_err(|source| HostError::Io {
        path: info.path.clone(),
        source,
    })
}

/// `show`'s text.
pub fn render(info: &SegmentInfo) -> String {
    let mut out = String::new();
    let (permits, calls, cost) = info.held();
    let c = &info.config;
    let _ = writeln!(out, "{}  ({})", info.name, info.path.display());
    let (_, dead_calls, _) = info.held_by_dead();
    let _ = writeln!(
        out,
        "  limit {}  budget {}  in flight {} calls / {} permits{}{}  attached {}  slots used {} of {}",
        c.max_concurrent,
        if c.budget == 0 {
            "none".into()
        } else {
            c.budget.to_string()
        },
        calls,
        permits,
        if c.budget == 0 {
            String::new()
        } else {
            format!(" / {cost} units")
        },
        if dead_calls == 0 {
            String::new()
        } else {
            format!(
                " (+{dead_calls} calls in dead processes' slots: reclaimed at the next probe or `reap`)"
            )
        },
        info.attached(),
        info.hwm,
        info.slots
    );
    let _ = writeln!(
        out,
        "  lease ttl {} ms  beat {} ms  probe {} ms  created by {}{}",
        c.lease_ttl_ms,
        c.beat_ms,
        c.probe_ms,
        info.creator,
        if info.poisoned { "  POISONED" } else { "" }
    );
    let counters: Vec<String> = info
        .counters
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(out, "  {}", counters.join("  "));
    if !info.occupied.is_empty() {
        let _ = writeln!(
            out,
            "  {:>4}  {:<10}  {:<5}  {:>8}  {:<5}  {:>6}  {:>7}  {:>6}  {:>6}",
            "slot", "state", "alive", "pid", "lib", "calls", "permits", "queued", "beat"
        );
        for s in &info.occupied {
            let _ = writeln!(
                out,
                "  {:>4}  {:<10}  {:<5}  {:>8}  {:<5}  {:>6}  {:>7}  {:>6}  {:>6}",
                s.index, s.state, s.alive, s.pid, s.library, s.calls, s.permits, s.queued, s.beat
            );
        }
    }
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `show`'s JSON (one object; keys as in [`SegmentInfo`] and [`SlotInfo`]).
pub fn render_json(info: &SegmentInfo) -> String {
    let c = &info.config;
    let (permits, calls, cost) = info.held();
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\"name\":{},\"path\":{},\"max_concurrent\":{},\"budget\":{},\"lease_ttl_ms\":{},\"beat_ms\":{},\"probe_ms\":{},\"creator\":{},\"slots\":{},\"hwm\":{},\"poisoned\":{},\"attached\":{},\"in_flight\":{},\"active\":{},\"cost_in_use\":{},\"in_flight_in_dead_slots\":{}",
        json_str(&info.name),
        json_str(&info.path.to_string_lossy()),
        c.max_concurrent,
        c.budget,
        c.lease_ttl_ms,
        c.beat_ms,
        c.probe_ms,
        json_str(&info.creator),
        info.slots,
        info.hwm,
        info.poisoned,
        info.attached(),
        calls,
        permits,
        cost,
        info.held_by_dead().1
    );
    for (k, v) in &info.counters {
        let _ = write!(out, ",\"{k}\":{v}");
    }
    out.push_str(",\"occupied\":[");
    for (n, s) in info.occupied.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"slot\":{},\"state\":\"{}\",\"alive\":{},\"generation\":{},\"pid\":{},\"pidns\":{},\"library\":{},\"calls\":{},\"permits\":{},\"cost\":{},\"queued\":{},\"head_ticket\":{},\"beat\":{},\"attached_ms\":{}}}",
            s.index,
            s.state,
            s.alive,
            s.generation,
            s.pid,
            s.pidns,
            json_str(&s.library),
            s.calls,
            s.permits,
            s.cost,
            s.queued,
            s.head_ticket.map_or("null".into(), |t| t.to_string()),
            s.beat,
            s.attached_ms
        );
    }
    out.push_str("]}");
    out
}
