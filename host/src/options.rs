//! A host bulkhead's options (docs/design.md §14.5): one table, read by every binding, so a
//! name is parsed, range-checked and refused the same way everywhere. A local bulkhead's option
//! that a host bulkhead does not support (classes, policies, observe mode, shedding, rates…) is
//! refused by name — never silently ignored.

use std::{path::PathBuf, time::Duration};

use hullguard_core::config::options::{self as core_options, Section, Spelling};

use crate::{error::HostError, layout};

/// What to do when the segment exists with other host-wide settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnMismatch {
    /// Refuse to attach, naming the option and both values (the default: two deploys that
    /// disagree about a limit must not share it in silence).
    #[default]
    Error,
    /// Attach and use the segment's settings.
    Adopt,
}

/// The options of [`HostBulkhead::open`](crate::HostBulkhead::open).
///
/// `max_concurrent`, `budget`, `lease_ttl`, `beat` and `probe` are host-wide: written into the
/// segment by its creator, checked by every later attacher (see [`OnMismatch`]). `max_queue` and
/// `queue_timeout` are this process's: each process queues its own waiters (FIFO across
/// processes by ticket).
#[derive(Debug, Clone, PartialEq)]
pub struct HostOptions {
    /// Permits the whole host may hold at once, `1 ..= 1_048_575` (default 10).
    pub max_concurrent: u64,
    /// This process's waiters, `0 ..= 2^20` (default 100; 0 = never queue).
    pub max_queue: u64,
    /// How long a request may wait by default (default 30 s).
    pub queue_timeout: Duration,
    /// The host-wide budget (tokens, bytes; the second dimension), `1 ..= 2^40 − 1`; `None` =
    /// no budget.
    pub budget: Option<u64>,
    /// A process whose heartbeat has not moved for this long is expired: its permits return
    /// and its later releases are stale (default 10 s, `100 ms ..= 1 h`, at least 3 beats).
    pub lease_ttl: Duration,
    /// The heartbeat period (default 1 s, `10 ms ..= 10 min`).
    pub beat: Duration,
    /// How often each process probes the others' liveness locks: a killed process's permits
    /// return within about this long (default 250 ms, `10 ms ..= 1 min`).
    pub probe: Duration,
    /// Slots (processes attached at once) of a new segment, `1 ..= 4096` (default 256).
    pub slots: u32,
    /// The directory of the segment file (default `/dev/shm`; a volume shared between
    /// containers works).
    pub dir: PathBuf,
    /// The mode of a new segment file, `0 ..= 0o777`, never world-writable (default `0o600`).
    pub mode: u32,
    /// What to do when the segment exists with other host-wide settings.
    pub on_mismatch: OnMismatch,
    /// Who creates and attaches (written into the segment; shown by `hullguard host show`):
    /// `"rust"`, `"py"`, `"node"`, `"c"`.
    pub library: &'static str,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            max_concurrent: hullguard_core::Config::DEFAULT.max_concurrent,
            max_queue: 100,
            queue_timeout: Duration::from_secs(30),
            budget: None,
            lease_ttl: Duration::from_secs(10),
            beat: Duration::from_secs(1),
            probe: Duration::from_millis(250),
            slots: layout::DEFAULT_SLOTS,
            dir: PathBuf::from("/dev/shm"),
            mode: 0o600,
            on_mismatch: OnMismatch::Error,
            library: "rust",
        }
    }
}

/// A value given to [`HostOptions::set`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostValue<'a> {
    /// A count (or a mode).
    Int(u64),
    /// A duration.
    Duration(Duration),
    /// A string (`dir`, `on_mismatch`).
    Str(&'a str),
}

/// The kind of value an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// An integer in `min ..= max`.
    Int {
        /// Smallest.
        min: u64,
        /// Largest.
        max: u64,
    },
    /// A duration in `min ..= max`.
    Duration {
        /// Shortest.
        min: Duration,
        /// Longest.
        max: Duration,
    },
    /// A path.
    Path,
    /// One of the listed words.
    Choice(&'static [&'static str]),
}

/// One row of the option table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostOption {
    /// The snake_case name (Python, C, Rust); Node spells it camelCase with `Ms` for durations.
    pub name: &'static str,
    /// Its kind and range.
    pub kind: HostKind,
    /// One line of documentation.
    pub doc: &'static str,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Every option a host bulkhead takes.
pub const HOST_OPTIONS: &[HostOption] = &[
    HostOption {
        name: "max_concurrent",
        kind: HostKind::Int {
            min: 1,
            max: layout::MAX_HOST_PERMITS,
        },
        doc: "permits the whole host may hold at once",
    },
    HostOption {
        name: "max_queue",
        kind: HostKind::Int {
            min: 0,
            max: hullguard_core::MAX_QUEUE,
        },
        doc: "this process's waiters (0 = never queue)",
    },
    HostOption {
        name: "queue_timeout",
        kind: HostKind::Duration {
            min: Duration::ZERO,
            max: Duration::from_secs(365 * 86_400),
        },
        doc: "how long a request may wait by default",
    },
    HostOption {
        name: "budget",
        kind: HostKind::Int {
            min: 1,
            max: layout::MAX_HOST_BUDGET,
        },
        doc: "the host-wide budget (second dimension)",
    },
    HostOption {
        name: "lease_ttl",
        kind: HostKind::Duration {
            min: ms(100),
            max: Duration::from_secs(3600),
        },
        doc: "a silent process's lease expires after this long",
    },
    HostOption {
        name: "beat",
        kind: HostKind::Duration {
            min: ms(10),
            max: Duration::from_secs(600),
        },
        doc: "the heartbeat period",
    },
    HostOption {
        name: "probe",
        kind: HostKind::Duration {
            min: ms(10),
            max: Duration::from_secs(60),
        },
        doc: "how often the others' liveness is probed",
    },
    HostOption {
        name: "slots",
        kind: HostKind::Int {
            min: 1,
            max: layout::MAX_SLOTS as u64,
        },
        doc: "processes that may attach at once (a new segment)",
    },
    HostOption {
        name: "dir",
        kind: HostKind::Path,
        doc: "the directory of the segment file",
    },
    HostOption {
        name: "mode",
        kind: HostKind::Int { min: 0, max: 0o777 },
        doc: "the mode of a new segment file",
    },
    HostOption {
        name: "on_mismatch",
        kind: HostKind::Choice(&["error", "adopt"]),
        doc: "an existing segment with other settings: refuse or adopt",
    },
];

/// Names a local bulkhead takes that a host bulkhead refuses (besides the core option table's).
const UNSUPPORTED_EXTRA: &[&str] = &["resilience", "classes", "adaptive", "breaker", "enabled"];

fn range_text(kind: &HostKind) -> String {
    match kind {
        HostKind::Int { min, max } => format!("an integer in {min} ..= {max}"),
        HostKind::Duration { min, max } => format!("a duration in {min:?} ..= {max:?}"),
        HostKind::Path => "a directory path".into(),
        HostKind::Choice(words) => format!("one of {words:?}"),
    }
}

impl HostOptions {
    /// Looks an option up by name: the snake_case name, or Node's camelCase spelling
    /// (`maxConcurrent`, `leaseTtlMs`).
    pub fn find(name: &str) -> Option<&'static HostOption> {
        HOST_OPTIONS
            .iter()
            .find(|o| o.name == name || node_name(o) == name)
    }

    /// Sets option `name` to `value`, checking its range.
    ///
    /// # Errors
    /// [`HostError::Option`]: an unknown name (listing the known ones), a local bulkhead's
    /// option a host bulkhead does not support (named as such), a value of the wrong kind or
    /// out of range (showing the range).
    pub fn set(&mut self, name: &str, value: HostValue<'_>) -> Result<(), HostError> {
        let Some(opt) = Self::find(name) else {
            return Err(unknown(name));
        };
        let bad = |message: String| HostError::Option {
            option: opt.name,
            message,
        };
        let expected = || bad(format!("{value:?}: expected {}", range_text(&opt.kind)));
        match (opt.kind, value) {
            (HostKind::Int { min, max }, HostValue::Int(v)) => {
                if v < min || v > max {
                    return Err(expected());
                }
                match opt.name {
                    "max_concurrent" => self.max_concurrent = v,
                    "max_queue" => self.max_queue = v,
                    "budget" => self.budget = Some(v),
                    "slots" => self.slots = v as u32,
                    "mode" => self.mode = v as u32,
                    _ => return Err(expected()),
                }
            }
            (HostKind::Duration { min, max }, HostValue::Duration(d)) => {
                if d < min || d > max {
                    return Err(expected());
                }
                match opt.name {
                    "queue_timeout" => self.queue_timeout = d,
                    "lease_ttl" => self.lease_ttl = d,
                    "beat" => self.beat = d,
                    "probe" => self.probe = d,
                    _ => return Err(expected()),
                }
            }
            (HostKind::Path, HostValue::Str(s)) if !s.is_empty() => self.dir = PathBuf::from(s),
            (HostKind::Choice(_), HostValue::Str(s)) => {
                self.on_mismatch = match s {
                    "error" => OnMismatch::Error,
                    "adopt" => OnMismatch::Adopt,
                    _ => return Err(expected()),
                }
            }
            _ => return Err(expected()),
        }
        Ok(())
    }

    /// Checks every option and their relations, naming the first bad one.
    ///
    /// # Errors
    /// [`HostError::Option`].
    pub fn validate(&self) -> Result<(), HostError> {
        let mut copy = HostOptions::default();
        copy.set("max_concurrent", HostValue::Int(self.max_concurrent))?;
        copy.set("max_queue", HostValue::Int(self.max_queue))?;
        copy.set("queue_timeout", HostValue::Duration(self.queue_timeout))?;
        if let Some(b) = self.budget {
            copy.set("budget", HostValue::Int(b))?;
        }
        copy.set("lease_ttl", HostValue::Duration(self.lease_ttl))?;
        copy.set("beat", HostValue::Duration(self.beat))?;
        copy.set("probe", HostValue::Duration(self.probe))?;
        copy.set("slots", HostValue::Int(self.slots as u64))?;
        copy.set("mode", HostValue::Int(self.mode as u64))?;
        if self.mode & 0o002 != 0 {
            return Err(HostError::Option {
                option: "mode",
                message: format!("{:o}: a segment file may not be world-writable", self.mode),
            });
        }
        if self.lease_ttl < self.beat * 3 {
            return Err(HostError::Option {
                option: "lease_ttl",
                message: format!(
                    "{:?}: at least 3 beats ({:?}), so a busy process is never expired by one late beat",
                    self.lease_ttl,
                    self.beat * 3
                ),
            });
        }
        Ok(())
    }
}

/// Node's spelling of an option (`maxConcurrent`, `leaseTtlMs`).
pub fn node_name(opt: &HostOption) -> String {
    hullguard_core::config::options::node_spelled(
        opt.name,
        matches!(opt.kind, HostKind::Duration { .. }),
    )
    .to_string()
}

fn unknown(name: &str) -> HostError {
    let local = [Spelling::Python, Spelling::Node]
        .iter()
        .any(|&sp| core_options::find(Section::Bulkhead, sp, name).is_some())
        || UNSUPPORTED_EXTRA.contains(&name);
    let known: Vec<&str> = HOST_OPTIONS.iter().map(|o| o.name).collect();
    HostError::Option {
        option: "options",
        message: if local {
            format!(
                "`{name}` is a local bulkhead's option that a host bulkhead does not support (it takes: {})",
                known.join(", ")
            )
        } else {
            format!("unknown option `{name}` (known: {})", known.join(", "))
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_parsed_and_refused_by_name() {
        let mut o = HostOptions::default();
        o.set("max_concurrent", HostValue::Int(5)).unwrap();
        o.set("leaseTtlMs", HostValue::Duration(Duration::from_secs(2)))
            .unwrap();
        assert_eq!((o.max_concurrent, o.lease_ttl), (5, Duration::from_secs(2)));
        let e = o
            .set("max_concurrent", HostValue::Int(0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("max_concurrent") && e.contains("1 ..= 1048575"),
            "{e}"
        );
        let e = o.set("classes", HostValue::Int(1)).unwrap_err().to_string();
        assert!(e.contains("does not support"), "{e}");
        let e = o
            .set("shed_lag_threshold", HostValue::Int(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not support"), "{e}");
        let e = o.set("bogus", HostValue::Int(1)).unwrap_err().to_string();
        assert!(e.contains("unknown option `bogus`"), "{e}");
        o.set("mode", HostValue::Int(0o666)).unwrap();
        assert!(
            o.validate()
                .unwrap_err()
                .to_string()
                .contains("world-writable")
        );
    }
}
