//! A fleet bulkhead's options (docs/design.md §16.5): one table, read by every binding, so a
//! name is parsed, range-checked and refused the same way everywhere. A local bulkhead's option
//! that cannot be fleet-wide (an adaptive limit, policies, observe mode, rates…) is refused by
//! name — never silently ignored. (Admission classes are a structured option each binding
//! parses with its local bulkhead's parser: they partition this process's block, §16.10.)

use std::time::Duration;

use crate::{
    error::FleetError,
    lease::{LeaseConfig, Unreachable},
    pool::{NameError, PoolName},
};

/// A holder label: 1 ..= 64 printable ASCII characters without spaces.
fn check_label(label: &str) -> Result<(), NameError> {
    if crate::pool::is_printable(label, 64) {
        Ok(())
    } else {
        Err(NameError {
            what: "holder label",
            value: label.to_owned(),
        })
    }
}

/// The largest fleet limit.
pub const MAX_FLEET_LIMIT: u64 = 1 << 32;

/// The options of [`FleetBulkhead::open`](crate::FleetBulkhead::open).
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// The pool: every process that opens the same pool on the same Redis shares one limit.
    pub pool: PoolName,
    /// The fleet limit a *new* pool starts with, `1 ..= 2^32` (default 10). Once the pool
    /// exists its limit lives in Redis (`apply_limits` changes it under a revision).
    pub max_concurrent: u64,
    /// The fleet budget (units in flight: tokens, bytes) a *new* budget table starts with,
    /// `1 ..= 2^32`; `None` (default): no budget. Leased like the permits, in a second lease
    /// table of the pool (docs/design.md §16.10); `apply_limits(budget=…)` changes it.
    pub budget: Option<u64>,
    /// This process's waiters, `0 ..= MAX_QUEUE` (default 100; 0 = never queue).
    pub max_queue: u64,
    /// How long a request may wait by default (default 30 s).
    pub queue_timeout: Duration,
    /// The lease's time to live, `100 ms ..= 1 h` (default 10 s): a crashed process's block
    /// returns within it; keep the longest call under it.
    pub lease_ttl: Duration,
    /// The renewal period, `10 ms ..= lease_ttl / 2` (default `lease_ttl / 3`).
    pub beat: Option<Duration>,
    /// Fail closed (default) or keep a local share while Redis is unreachable.
    pub on_unreachable: Unreachable,
    /// Clock-rate allowance, parts per million of the TTL, `0 ..= 100 000` (default 10 000 =
    /// 1 %).
    pub clock_drift_ppm: u64,
    /// A fixed allowance taken off every lease deadline, `0 ..= 1 s` (default 2 ms).
    pub lease_margin: Duration,
    /// The shortest time between two syncs, `1 ms ..= 1 s` (default 5 ms).
    pub min_sync_interval: Duration,
    /// The most holders the pool admits, `1 ..= 100 000` (default 10 000).
    pub max_holders: u64,
    /// The label of this process's holder id, `<label>:<pid>:<random>` (default the hostname;
    /// 1 ..= 64 printable characters without spaces). Only a label: ids are unique per process.
    pub holder: Option<String>,
    /// Replicated durability: `WAIT` for this many replicas after a growth before admitting on
    /// it, `0 ..= 16` (default 0: off).
    pub wait_replicas: u64,
    /// How long that `WAIT` may take, `1 ms ..= 10 s` (default 100 ms).
    pub wait_timeout: Duration,
}

impl FleetConfig {
    /// The defaults for `pool`.
    pub fn new(pool: PoolName) -> Self {
        FleetConfig {
            pool,
            max_concurrent: 10,
            budget: None,
            max_queue: 100,
            queue_timeout: Duration::from_secs(30),
            lease_ttl: Duration::from_secs(10),
            beat: None,
            on_unreachable: Unreachable::FailClosed,
            clock_drift_ppm: 10_000,
            lease_margin: Duration::from_millis(2),
            min_sync_interval: Duration::from_millis(5),
            max_holders: 10_000,
            holder: None,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
        }
    }

    /// The lease manager's settings.
    pub fn lease(&self) -> LeaseConfig {
        LeaseConfig {
            ttl: self.lease_ttl,
            beat: self.beat.unwrap_or(self.lease_ttl / 3),
            drift_ppm: self.clock_drift_ppm,
            margin: self.lease_margin,
            min_sync_interval: self.min_sync_interval,
            on_unreachable: self.on_unreachable,
            default_limit: self.max_concurrent,
            max_holders: self.max_holders,
            wait_replicas: self.wait_replicas,
            wait_timeout: self.wait_timeout,
            max_block: if self.budget.is_some() {
                hullguard_core::MAX_CONCURRENT_WITH_BUDGET
            } else {
                hullguard_core::MAX_PERMITS
            },
        }
    }

    /// The budget's lease manager settings (`None` without a budget): the permits' timing; a
    /// new table starts at `budget`; the local share while Redis is unreachable is the
    /// permits' share of the budget in proportion (`budget × local_share / max_concurrent`,
    /// at least 1 unit).
    pub fn budget_lease(&self) -> Option<LeaseConfig> {
        let budget = self.budget?;
        let mut cfg = self.lease();
        cfg.default_limit = budget;
        cfg.max_block = hullguard_core::MAX_BUDGET;
        if let Unreachable::LocalShare(k) = self.on_unreachable {
            let units = (u128::from(budget) * u128::from(k)
                / u128::from(self.max_concurrent.max(1)))
            .clamp(1, u128::from(MAX_FLEET_LIMIT));
            cfg.on_unreachable = Unreachable::LocalShare(units as u64);
        }
        Some(cfg)
    }

    /// Looks an option up by name: the snake_case name, or Node's camelCase spelling
    /// (`maxConcurrent`, `leaseTtlMs`).
    pub fn find(name: &str) -> Option<&'static FleetOption> {
        FLEET_OPTIONS
            .iter()
            .find(|o| o.name == name || node_name(o) == name)
    }

    /// Sets option `name` (snake_case, or Node's camelCase with `Ms` for durations) from
    /// `value`.
    ///
    /// # Errors
    /// [`FleetError::Option`]: an unknown name (listing the known ones), a local bulkhead's
    /// option that cannot be fleet-wide (named as such), a value of the wrong kind or out of
    /// range (showing the range).
    pub fn set(&mut self, name: &str, value: FleetValue<'_>) -> Result<(), FleetError> {
        let Some(opt) = Self::find(name) else {
            return Err(unknown(name));
        };
        let given = match value {
            FleetValue::Int(n) => n.to_string(),
            FleetValue::Duration(d) => format!("{d:?}"),
            FleetValue::Str(s) => format!("{s:?}"),
        };
        let expected = || FleetError::Option {
            option: opt.name,
            message: format!("{given}: expected {}", range_text(&opt.kind)),
        };
        match (opt.kind, value) {
            (FleetKind::Int { min, max }, FleetValue::Int(v)) if (min..=max).contains(&v) => {
                match opt.name {
                    "max_concurrent" => self.max_concurrent = v,
                    "budget" => self.budget = Some(v),
                    "max_queue" => self.max_queue = v,
                    "clock_drift_ppm" => self.clock_drift_ppm = v,
                    "max_holders" => self.max_holders = v,
                    "wait_replicas" => self.wait_replicas = v,
                    "local_share" => {
                        self.on_unreachable = if v == 0 {
                            Unreachable::FailClosed
                        } else {
                            Unreachable::LocalShare(v)
                        }
                    }
                    _ => return Err(expected()),
                }
            }
            (FleetKind::Duration { min, max }, FleetValue::Duration(d))
                if (min..=max).contains(&d) =>
            {
                match opt.name {
                    "queue_timeout" => self.queue_timeout = d,
                    "lease_ttl" => self.lease_ttl = d,
                    "beat" => self.beat = Some(d),
                    "lease_margin" => self.lease_margin = d,
                    "min_sync_interval" => self.min_sync_interval = d,
                    "wait_timeout" => self.wait_timeout = d,
                    _ => return Err(expected()),
                }
            }
            (FleetKind::Text, FleetValue::Str(s)) => match opt.name {
                "pool" => self.pool = PoolName::new(s)?,
                "holder" => {
                    check_label(s)?;
                    self.holder = Some(s.to_owned());
                }
                _ => return Err(expected()),
            },
            _ => return Err(expected()),
        }
        Ok(())
    }

    /// Checks the options' relations, naming the first bad one.
    ///
    /// # Errors
    /// [`FleetError::Option`].
    pub fn validate(&self) -> Result<(), FleetError> {
        let mut copy = FleetConfig::new(self.pool.clone());
        copy.set("max_concurrent", FleetValue::Int(self.max_concurrent))?;
        if let Some(b) = self.budget {
            copy.set("budget", FleetValue::Int(b))?;
            if self.max_concurrent > hullguard_core::MAX_CONCURRENT_WITH_BUDGET {
                return Err(FleetError::Option {
                    option: "max_concurrent",
                    message: format!(
                        "{}: with a budget at most {} (the permits share the core's word with the units)",
                        self.max_concurrent,
                        hullguard_core::MAX_CONCURRENT_WITH_BUDGET
                    ),
                });
            }
        }
        copy.set("max_queue", FleetValue::Int(self.max_queue))?;
        copy.set("queue_timeout", FleetValue::Duration(self.queue_timeout))?;
        copy.set("lease_ttl", FleetValue::Duration(self.lease_ttl))?;
        copy.set("clock_drift_ppm", FleetValue::Int(self.clock_drift_ppm))?;
        copy.set("lease_margin", FleetValue::Duration(self.lease_margin))?;
        copy.set(
            "min_sync_interval",
            FleetValue::Duration(self.min_sync_interval),
        )?;
        copy.set("max_holders", FleetValue::Int(self.max_holders))?;
        copy.set("wait_replicas", FleetValue::Int(self.wait_replicas))?;
        copy.set("wait_timeout", FleetValue::Duration(self.wait_timeout))?;
        if let Unreachable::LocalShare(k) = self.on_unreachable {
            copy.set("local_share", FleetValue::Int(k))?;
        }
        if let Some(h) = &self.holder {
            check_label(h)?;
        }
        let beat = self.beat.unwrap_or(self.lease_ttl / 3);
        if self.min_sync_interval > beat / 4 {
            return Err(FleetError::Option {
                option: "min_sync_interval",
                message: format!(
                    "{:?}: at most a quarter of the beat ({:?}, from beat {beat:?}), so demand is answered within a beat: lower min_sync_interval or raise beat / lease_ttl",
                    self.min_sync_interval,
                    beat / 4
                ),
            });
        }
        if let Some(b) = self.beat {
            copy.set("beat", FleetValue::Duration(b))?;
            if b > self.lease_ttl / 2 {
                return Err(FleetError::Option {
                    option: "beat",
                    message: format!(
                        "{b:?}: at most half of lease_ttl ({:?}), so one late beat never loses the lease",
                        self.lease_ttl / 2
                    ),
                });
            }
        }
        let lease = self.lease();
        if lease.allowance(self.lease_ttl) * 2 >= self.lease_ttl {
            return Err(FleetError::Option {
                option: "lease_margin",
                message: format!(
                    "{:?}: with the clock-drift allowance it leaves less than half of lease_ttl",
                    self.lease_margin
                ),
            });
        }
        Ok(())
    }
}

/// A value given to [`FleetConfig::set`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FleetValue<'a> {
    /// A count.
    Int(u64),
    /// A duration.
    Duration(Duration),
    /// A string (`pool`, `holder`).
    Str(&'a str),
}

/// The kind of value an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetKind {
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
    /// A string.
    Text,
}

/// One row of the option table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetOption {
    /// The snake_case name (Python, C, Rust); Node spells it camelCase with `Ms` for durations.
    pub name: &'static str,
    /// Its kind and range.
    pub kind: FleetKind,
    /// One line of documentation.
    pub doc: &'static str,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Every option a fleet bulkhead takes.
pub const FLEET_OPTIONS: &[FleetOption] = &[
    FleetOption {
        name: "pool",
        kind: FleetKind::Text,
        doc: "the pool: processes that open the same pool on one Redis share its limit",
    },
    FleetOption {
        name: "max_concurrent",
        kind: FleetKind::Int {
            min: 1,
            max: MAX_FLEET_LIMIT,
        },
        doc: "the fleet limit a new pool starts with (then it lives in Redis)",
    },
    FleetOption {
        name: "budget",
        kind: FleetKind::Int {
            min: 1,
            max: MAX_FLEET_LIMIT,
        },
        doc: "the fleet budget (units in flight) a new pool starts with, leased like the permits (default none)",
    },
    FleetOption {
        name: "max_queue",
        kind: FleetKind::Int {
            min: 0,
            max: hullguard_core::MAX_QUEUE,
        },
        doc: "this process's waiters (0 = never queue)",
    },
    FleetOption {
        name: "queue_timeout",
        kind: FleetKind::Duration {
            min: Duration::ZERO,
            max: Duration::from_secs(365 * 86_400),
        },
        doc: "how long a request may wait by default",
    },
    FleetOption {
        name: "lease_ttl",
        kind: FleetKind::Duration {
            min: ms(100),
            max: Duration::from_secs(3600),
        },
        doc: "a silent process's block returns after this long; keep calls shorter",
    },
    FleetOption {
        name: "beat",
        kind: FleetKind::Duration {
            min: ms(10),
            max: Duration::from_secs(1800),
        },
        doc: "the renewal period (default lease_ttl / 3, at most half of it)",
    },
    FleetOption {
        name: "local_share",
        kind: FleetKind::Int {
            min: 0,
            max: MAX_FLEET_LIMIT,
        },
        doc: "permits admitted on local authority while Redis is unreachable (0 = fail closed)",
    },
    FleetOption {
        name: "clock_drift_ppm",
        kind: FleetKind::Int {
            min: 0,
            max: 100_000,
        },
        doc: "clock-rate allowance taken off each lease, parts per million of the TTL",
    },
    FleetOption {
        name: "lease_margin",
        kind: FleetKind::Duration {
            min: Duration::ZERO,
            max: ms(1000),
        },
        doc: "a fixed allowance taken off each lease deadline",
    },
    FleetOption {
        name: "min_sync_interval",
        kind: FleetKind::Duration {
            min: ms(1),
            max: ms(1000),
        },
        doc: "the shortest time between two syncs",
    },
    FleetOption {
        name: "max_holders",
        kind: FleetKind::Int {
            min: 1,
            max: 100_000,
        },
        doc: "the most processes the pool admits",
    },
    FleetOption {
        name: "wait_replicas",
        kind: FleetKind::Int { min: 0, max: 16 },
        doc: "replicated durability: WAIT for this many replicas before admitting on a growth (0 = off)",
    },
    FleetOption {
        name: "wait_timeout",
        kind: FleetKind::Duration {
            min: ms(1),
            max: Duration::from_secs(10),
        },
        doc: "how long that WAIT may take",
    },
    FleetOption {
        name: "holder",
        kind: FleetKind::Text,
        doc: "the label of this process's holder id, <label>:<pid>:<random> (default the hostname)",
    },
];

/// A local bulkhead's options a fleet bulkhead refuses, and why.
pub const NOT_FLEET_WIDE: &[(&str, &str)] = &[
    (
        "rates",
        "class rates are not fleet-wide: each process would refill its own",
    ),
    (
        "max_queued_cost",
        "not supported by a fleet bulkhead (its queue is bounded by max_queue)",
    ),
    (
        "adaptive",
        "an adaptive limit would move the leased block; set the fleet limit with apply_limits",
    ),
    (
        "resilience",
        "policies are not fleet-wide (use a local bulkhead's breaker per process)",
    ),
    ("breaker", "policies are not fleet-wide"),
    ("observe", "observe mode is not fleet-wide"),
    ("start_limit", "the block is set by the lease"),
    ("enabled", "a fleet bulkhead always enforces its lease"),
];

fn range_text(kind: &FleetKind) -> String {
    match kind {
        FleetKind::Int { min, max } => format!("an integer in {min} ..= {max}"),
        FleetKind::Duration { min, max } => format!("a duration in {min:?} ..= {max:?}"),
        FleetKind::Text => "a string".into(),
    }
}

fn unknown(name: &str) -> FleetError {
    if let Some((option, why)) = NOT_FLEET_WIDE.iter().find(|(n, _)| *n == name) {
        return FleetError::Option {
            option,
            message: format!("not supported by a fleet bulkhead: {why}"),
        };
    }
    let known: Vec<&str> = FLEET_OPTIONS.iter().map(|o| o.name).collect();
    FleetError::Option {
        option: "options",
        message: format!("unknown option {name:?}; the options are {known:?}"),
    }
}

/// Node's spelling of an option (`maxConcurrent`, `leaseTtlMs`).
pub fn node_name(opt: &FleetOption) -> String {
    hullguard_core::config::options::node_spelled(
        opt.name,
        matches!(opt.kind, FleetKind::Duration { .. }),
    )
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> FleetConfig {
        FleetConfig::new(PoolName::new("p").unwrap())
    }

    #[test]
    fn options_are_set_by_name_and_refused_by_name() {
        let mut c = cfg();
        c.set("leaseTtlMs", FleetValue::Duration(ms(900))).unwrap();
        c.set("local_share", FleetValue::Int(2)).unwrap();
        assert_eq!(c.on_unreachable, Unreachable::LocalShare(2));
        let e = c.set("adaptive", FleetValue::Int(5)).unwrap_err();
        assert_eq!(e.option(), Some("adaptive"));
        c.set("budget", FleetValue::Int(5)).unwrap();
        assert_eq!(c.budget, Some(5));
        assert!(c.set("budget", FleetValue::Int(0)).is_err());
        assert!(
            e.to_string().contains("not supported by a fleet bulkhead"),
            "{e}"
        );
        let e = c.set("lease_tt", FleetValue::Int(5)).unwrap_err();
        assert!(e.to_string().contains("unknown option \"lease_tt\""), "{e}");
        let e = c.set("lease_ttl", FleetValue::Duration(ms(5))).unwrap_err();
        assert!(e.to_string().contains("100ms ..= 3600s"), "{e}");
        let e = c.set("pool", FleetValue::Str("a{b}")).unwrap_err();
        assert!(e.to_string().starts_with("pool must be"), "{e}");
    }

    #[test]
    fn relations_are_checked() {
        let mut c = cfg();
        c.beat = Some(Duration::from_secs(6));
        assert_eq!(c.validate().unwrap_err().option(), Some("beat"));
        let mut c = cfg();
        c.lease_ttl = ms(100);
        c.lease_margin = ms(60);
        assert_eq!(c.validate().unwrap_err().option(), Some("lease_margin"));
        assert!(cfg().validate().is_ok());
    }
}
