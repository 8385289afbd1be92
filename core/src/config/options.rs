//! The option table (docs/design.md §7.1): every option of a bulkhead, a registry and their
//! policies, once — name, section, kind, unit, range, default — and the rule each layer uses to
//! spell it. Bindings walk [`OPTIONS`] to parse what users pass (refusing unknown names with the
//! list of known ones) instead of keeping their own copies; errors render the path and range
//! from here.
//!
//! | layer | spelling of `resilience.breaker.open_duration` | durations |
//! |---|---|---|
//! | Rust | `BreakerConfig::open_duration` | `Duration` |
//! | Python | `resilience={"breaker": {"open_duration": …}}` | float seconds (`math.inf`: none) |
//! | Node | `resilience: {breaker: {openDurationMs: …}}` | ms (`Infinity`: none) |
//! | C | `hg_config.breaker_open_duration_ms` | ms (`HG_TIMEOUT_INFINITE`: none) |
//! | vectors | `"resilience": {"breaker": {"open_duration_ms": …}}` | integer ms (`"infinite"`: none) |
//!
//! # Null values
//!
//! One rule for a null value in every layer (docs/design.md §7.2) — Python `None`, JavaScript
//! `null`, JSON `null` (in JavaScript a key whose value is `undefined` is an omitted key, as
//! object spread treats it):
//!
//! * A null value means **not given**: the default, or in a registry override the value
//!   inherited from the registry's defaults ([`NullMeans::NotGiven`]).
//! * Exception: a **policy part** (`resilience.adaptive`, `resilience.breaker`) or
//!   **`call_timeout`** set to null is **off** ([`NullMeans::Off`]; [`Section::null_means`],
//!   [`OptionId::null_means`]) — the founding contract's "a part that is omitted or None/null
//!   is off". At the top level "not given" and "off" coincide (both default to off); in an
//!   override, null turns off what the defaults turned on. `resilience` itself set to null is
//!   off too: every part and `call_timeout`.
//! * "No deadline" is never spelled null but always as infinity: Python `math.inf`, Node
//!   `Infinity`, JSON `"infinite"`, C `HG_TIMEOUT_INFINITE`. So `queue_timeout` null is the
//!   default (30 s), not "no deadline".
//! * A per-call queue timeout follows the same rule: null or omitted is the bulkhead's
//!   `queue_timeout`.
//!
//! C has no null: `HG_TIMEOUT_DEFAULT` in a duration field (and 0 in a policy field) is the
//! "not given" of this rule, `HG_TIMEOUT_INFINITE` the "none". A layer applies a null with
//! [`PartialConfig::set_null`](super::PartialConfig::set_null) (an option) and
//! [`PartialConfig::set_null_part`](super::PartialConfig::set_null_part) (`resilience` or a
//! part), never with a rule of its own.

use core::{fmt, time::Duration};

use crate::{
    limits::{MAX_BUDGET, MAX_PERMITS, MAX_QUEUE},
    policy::breaker::{MAX_BUCKETS, MAX_DURATION, MAX_HALF_OPEN_CALLS, MAX_THRESHOLD},
};

/// The largest `shed_cpu_threshold`: cores of one process.
pub const MAX_CPU: f64 = 1024.0;

/// Which object an option belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Section {
    /// A bulkhead's own options (`max_concurrent`, …).
    Bulkhead,
    /// A registry's own options (`max_keys`).
    Registry,
    /// `resilience.adaptive`.
    Adaptive,
    /// `resilience.breaker`.
    Breaker,
    /// `resilience` itself (`call_timeout`).
    Resilience,
}

impl Section {
    /// The path of the section's options (`"resilience.breaker"`; `""` at the top level).
    pub const fn path(self) -> &'static str {
        match self {
            Section::Bulkhead | Section::Registry => "",
            Section::Adaptive => "resilience.adaptive",
            Section::Breaker => "resilience.breaker",
            Section::Resilience => "resilience",
        }
    }

    /// The key of a policy part inside `resilience` (`"adaptive"`, `"breaker"`).
    pub const fn part(self) -> Option<&'static str> {
        match self {
            Section::Adaptive => Some("adaptive"),
            Section::Breaker => Some("breaker"),
            _ => None,
        }
    }

    /// What a null value given for the section itself means (module docs, "Null values"):
    /// [`NullMeans::Off`] for `resilience` and its parts `adaptive` / `breaker`;
    /// [`NullMeans::NotGiven`] for the bulkhead's and the registry's own options (an object
    /// of options that is null is no options).
    pub const fn null_means(self) -> NullMeans {
        match self {
            Section::Adaptive | Section::Breaker | Section::Resilience => NullMeans::Off,
            Section::Bulkhead | Section::Registry => NullMeans::NotGiven,
        }
    }

    /// The C field prefix (`"adaptive_"`, `"breaker_"`, `""`).
    pub const fn c_prefix(self) -> &'static str {
        match self {
            Section::Adaptive => "adaptive_",
            Section::Breaker => "breaker_",
            _ => "",
        }
    }
}

/// What a null value (Python `None`, JavaScript `null`, JSON `null`) given for
/// an option or a part means: the module docs' "Null values" (docs/design.md §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NullMeans {
    /// Not given: the default, or in a registry override the value inherited from the
    /// registry's defaults. Every option but `call_timeout`.
    NotGiven,
    /// Off: the option's "none" (`call_timeout`: no call timeout), or the part off — also in a
    /// registry override whose defaults turned it on.
    Off,
}

/// An option's value type and range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// An integer in `min ..= max`.
    Count {
        /// The smallest value.
        min: u64,
        /// The largest value.
        max: u64,
    },
    /// A duration in `(0, max]` (or `[0, max]` when `zero` is allowed); `infinite`: "none" is
    /// accepted (Python `math.inf`, Node `Infinity`, C `HG_TIMEOUT_INFINITE`).
    Duration {
        /// Whether 0 is a value (`queue_timeout` 0 = do not queue).
        zero: bool,
        /// The largest finite value.
        max: Duration,
        /// Whether "no deadline" is a value.
        infinite: bool,
    },
    /// A real number between `min` and `max`; an `open` end excludes its bound.
    Number {
        /// The lower bound.
        min: f64,
        /// Whether `min` itself is excluded.
        min_open: bool,
        /// The upper bound (`f64::INFINITY`: none, finite values only).
        max: f64,
        /// Whether `max` itself is excluded.
        max_open: bool,
    },
    /// `true` / `false`.
    Bool,
    /// One of these strings.
    Choice(&'static [&'static str]),
}

/// Names every option (the index of [`OPTIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
#[allow(missing_docs)] // each is documented by its `OptionSpec::doc`
pub enum OptionId {
    MaxConcurrent,
    MaxQueue,
    QueueTimeout,
    Enabled,
    Budget,
    MaxQueuedCost,
    Observe,
    MaxOrphaned,
    StartLimit,
    MaxReservations,
    CancelOnOverrun,
    MaxKeys,
    AdaptiveAlgorithm,
    AdaptiveInitialLimit,
    AdaptiveMinLimit,
    AdaptiveMaxLimit,
    AdaptiveTargetLatency,
    AdaptiveIncreaseStep,
    AdaptiveDecreaseRatio,
    AdaptiveSmoothing,
    AdaptiveRttTolerance,
    AdaptiveLongWindow,
    AdaptiveQueueSize,
    BreakerFailureThreshold,
    BreakerErrorRateThreshold,
    BreakerErrorRateWindow,
    BreakerErrorRateBuckets,
    BreakerVolumeThreshold,
    BreakerOpenDuration,
    BreakerHalfOpenMaxCalls,
    BreakerHalfOpenTimeout,
    CallTimeout,
    MinServiceTime,
    QueueDelayTarget,
    QueueDelayInterval,
    AdaptiveLifo,
    ShedLagThreshold,
    ShedCpuThreshold,
    CriticalPriority,
}

impl OptionId {
    /// How many options there are.
    pub const COUNT: usize = 39;

    /// Its row of [`OPTIONS`].
    pub const fn spec(self) -> &'static OptionSpec {
        &OPTIONS[self as usize]
    }

    /// What a null value given for this option means (module docs, "Null values"):
    /// [`NullMeans::Off`] for `call_timeout` (whose "none" is off), [`NullMeans::NotGiven`]
    /// for every other option — including `queue_timeout`, whose "no deadline" is spelled as
    /// infinity, never as null.
    pub const fn null_means(self) -> NullMeans {
        match self {
            OptionId::CallTimeout => NullMeans::Off,
            _ => NullMeans::NotGiven,
        }
    }
}

/// One row of the option table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptionSpec {
    /// Which option.
    pub id: OptionId,
    /// Where it lives.
    pub section: Section,
    /// Its snake_case name in its section (`"open_duration"`).
    pub name: &'static str,
    /// Its type and range.
    pub kind: Kind,
    /// Its default, in words (`"30 s"`, `"max_concurrent"`).
    pub default: &'static str,
    /// One line of documentation.
    pub doc: &'static str,
    /// Its C spelling as a static NUL-terminated string (the `hg_config` field; checked
    /// against [`Spelling::C`] by a test).
    pub c_name: &'static core::ffi::CStr,
}

/// How a layer spells option names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Spelling {
    /// Python: the snake_case name; durations are float seconds.
    Python,
    /// Node: camelCase, durations with an `Ms` suffix (`openDurationMs`).
    Node,
    /// C: the section prefix, the name, `_ms` for durations (`breaker_open_duration_ms`).
    C,
    /// Scenario vectors: the name, `_ms` for durations (`open_duration_ms`).
    Vector,
}

/// Writes `name` (snake_case) in Node's spelling, one piece at a time: camelCase, and `Ms`
/// after a duration's name.
fn node_pieces(
    name: &str,
    duration: bool,
    mut out: impl FnMut(&str) -> fmt::Result,
) -> fmt::Result {
    for (i, word) in name.split('_').enumerate() {
        if i == 0 {
            out(word)?;
        } else {
            let mut chars = word.chars();
            if let Some(c) = chars.next() {
                let mut buf = [0u8; 4];
                out(c.to_ascii_uppercase().encode_utf8(&mut buf))?;
                out(chars.as_str())?;
            }
        }
    }
    if duration { out("Ms") } else { Ok(()) }
}

/// Any option name in Node's spelling (`lease_ttl`, a duration → `leaseTtlMs`): the rule of
/// [`Spelling::Node`], for the option tables outside the core's (the host and fleet
/// bulkheads'). `Display` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSpelled<'a> {
    name: &'a str,
    duration: bool,
}

/// `name` (snake_case) in Node's spelling; `duration` adds the `Ms` suffix.
pub const fn node_spelled(name: &str, duration: bool) -> NodeSpelled<'_> {
    NodeSpelled { name, duration }
}

impl fmt::Display for NodeSpelled<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        node_pieces(self.name, self.duration, |p| f.write_str(p))
    }
}

/// An option name in one spelling (see [`OptionSpec::spelled`]). `Display` writes it;
/// [`is`](Self::is) compares it with a string without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spelled {
    spec: &'static OptionSpec,
    spelling: Spelling,
}

impl Spelled {
    fn is_duration(&self) -> bool {
        matches!(self.spec.kind, Kind::Duration { .. })
    }

    /// Writes the name into `out`, one piece at a time.
    fn pieces(&self, mut out: impl FnMut(&str) -> fmt::Result) -> fmt::Result {
        let name = self.spec.name;
        match self.spelling {
            Spelling::Python => out(name),
            Spelling::Vector => {
                out(name)?;
                if self.is_duration() {
                    out("_ms")
                } else {
                    Ok(())
                }
            }
            Spelling::C => {
                out(self.spec.section.c_prefix())?;
                out(name)?;
                if self.is_duration() {
                    out("_ms")
                } else {
                    Ok(())
                }
            }
            Spelling::Node => node_pieces(name, self.is_duration(), out),
        }
    }

    /// Whether `s` is this name.
    pub fn is(&self, s: &str) -> bool {
        let mut rest = s;
        let ok = self
            .pieces(|p| match rest.strip_prefix(p) {
                Some(r) => {
                    rest = r;
                    Ok(())
                }
                None => Err(fmt::Error),
            })
            .is_ok();
        ok && rest.is_empty()
    }
}

impl fmt::Display for Spelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.pieces(|p| f.write_str(p))
    }
}

/// An option's path (`resilience.breaker.open_duration`), in one spelling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptionPath(Spelled);

impl fmt::Display for OptionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.spelling != Spelling::C {
            let path = s.spec.section.path();
            if !path.is_empty() {
                write!(f, "{path}.")?;
            }
        }
        write!(f, "{s}")
    }
}

/// An option's range in words (`in 1..=1048575`, `in (0, 1)`, `> 0 seconds`), in the units of
/// one spelling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RangeText {
    kind: Kind,
    spelling: Spelling,
}

impl fmt::Display for RangeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.spelling == Spelling::Python;
        match self.kind {
            Kind::Count { min, max } => write!(f, "an integer in {min}..={max}"),
            Kind::Duration {
                zero,
                max,
                infinite,
            } => {
                let (unit, least, inf) = match self.spelling {
                    Spelling::Python => ("seconds", "1e-9", "math.inf"),
                    Spelling::Node => ("ms", "0.000001", "Infinity"),
                    Spelling::C => ("ms", "1", "HG_TIMEOUT_INFINITE"),
                    Spelling::Vector => ("ms", "1", "\"infinite\""),
                };
                if zero {
                    write!(f, "0 or at least {least} {unit}")?;
                } else {
                    write!(f, "at least {least} {unit}")?;
                }
                if max < UNBOUNDED {
                    if secs {
                        write!(f, " and at most {} seconds", max.as_secs())?;
                    } else {
                        write!(f, " and at most {} ms", max.as_millis())?;
                    }
                }
                if infinite {
                    write!(f, ", or {inf} for none")?;
                }
                Ok(())
            }
            Kind::Number {
                min,
                min_open,
                max,
                max_open,
            } => {
                if max.is_infinite() {
                    write!(
                        f,
                        "a finite number {} {min}",
                        if min_open { ">" } else { ">=" }
                    )
                } else {
                    write!(
                        f,
                        "a number in {}{min}, {max}{}",
                        if min_open { "(" } else { "[" },
                        if max_open { ")" } else { "]" }
                    )
                }
            }
            Kind::Bool => f.write_str("a bool"),
            Kind::Choice(choices) => {
                f.write_str("one of ")?;
                for (i, c) in choices.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{c:?}")?;
                }
                Ok(())
            }
        }
    }
}

impl Kind {
    /// The range in words, in the units of `spelling` (what [`OptionSpec::range`] renders; for
    /// a table of other options, such as the class table's).
    pub const fn range(self, spelling: Spelling) -> RangeText {
        RangeText {
            kind: self,
            spelling,
        }
    }
}

impl OptionSpec {
    /// The name in `spelling`.
    pub const fn spelled(&'static self, spelling: Spelling) -> Spelled {
        Spelled {
            spec: self,
            spelling,
        }
    }

    /// The full path in `spelling` (C: the field name).
    pub const fn path(&'static self, spelling: Spelling) -> OptionPath {
        OptionPath(self.spelled(spelling))
    }

    /// The range in words, in the units of `spelling`.
    pub const fn range(&self, spelling: Spelling) -> RangeText {
        RangeText {
            kind: self.kind,
            spelling,
        }
    }

    /// Whether this option is a duration.
    pub const fn is_duration(&self) -> bool {
        matches!(self.kind, Kind::Duration { .. })
    }

    /// What a null value given for this option means ([`OptionId::null_means`]).
    pub const fn null_means(&self) -> NullMeans {
        self.id.null_means()
    }
}

/// The options of `section`, in table order.
pub fn options_in(section: Section) -> impl Iterator<Item = &'static OptionSpec> {
    OPTIONS.iter().filter(move |o| o.section == section)
}

/// The options a layer with positional arguments (Python's `Bulkhead(10, 100, 30.0, True)`)
/// takes by position, in order: the bulkhead's first four (`max_concurrent`, `max_queue`,
/// `queue_timeout`, `enabled`). Options added later (`budget`) are keyword-only, so adding one
/// never shifts a caller's positional arguments.
pub fn positional() -> impl Iterator<Item = &'static OptionSpec> {
    options_in(Section::Bulkhead).take_while(|o| o.id <= OptionId::Enabled)
}

/// The option of `section` called `name` in `spelling`.
pub fn find(section: Section, spelling: Spelling, name: &str) -> Option<&'static OptionSpec> {
    options_in(section).find(|o| o.spelled(spelling).is(name))
}

/// The keys a layer accepts in one object of options, in `spelling`, for an "unknown option"
/// message (`"max_concurrent", "max_queue", …`): a bulkhead's options and `resilience`; a
/// registry's, `max_keys` and `overrides` besides; inside `resilience` its two parts and
/// `call_timeout`; inside a part, its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownNames {
    section: Section,
    spelling: Spelling,
}

impl fmt::Display for KnownNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut put = |f: &mut fmt::Formatter<'_>, name: &dyn fmt::Display| {
            let sep = if first { "" } else { ", " };
            first = false;
            write!(f, "{sep}\"{name}\"")
        };
        let own = match self.section {
            Section::Registry => Section::Bulkhead,
            s => s,
        };
        if own == Section::Resilience {
            put(f, &"adaptive")?;
            put(f, &"breaker")?;
        }
        for o in options_in(own) {
            put(f, &o.spelled(self.spelling))?;
        }
        match self.section {
            Section::Bulkhead => put(f, &"resilience")?,
            Section::Registry => {
                put(f, &"resilience")?;
                for o in options_in(Section::Registry) {
                    put(f, &o.spelled(self.spelling))?;
                }
                put(f, &"overrides")?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The keys accepted in one object of `section` in `spelling` (see [`KnownNames`]).
pub const fn known_names(section: Section, spelling: Spelling) -> KnownNames {
    KnownNames { section, spelling }
}

/// The policy part a key of `resilience` names (`"adaptive"`, `"breaker"`: the same in every
/// spelling).
pub fn find_part(key: &str) -> Option<Section> {
    [Section::Adaptive, Section::Breaker]
        .into_iter()
        .find(|s| s.part() == Some(key))
}

const fn count(min: u64, max: u64) -> Kind {
    Kind::Count { min, max }
}

const fn positive_duration() -> Kind {
    Kind::Duration {
        zero: false,
        max: MAX_DURATION,
        infinite: false,
    }
}

const U32: u64 = u32::MAX as u64;

/// The largest duration a layer can pass (what a `u64` of nanoseconds holds): "no bound".
const UNBOUNDED: Duration = Duration::from_secs(u64::MAX / 1_000_000_000);

/// Every option, in [`OptionId`] order.
pub const OPTIONS: [OptionSpec; OptionId::COUNT] = [
    OptionSpec {
        id: OptionId::MaxConcurrent,
        section: Section::Bulkhead,
        name: "max_concurrent",
        kind: count(1, MAX_PERMITS),
        default: "10",
        doc: "the ceiling of the limit; the limit starts here",
        c_name: c"max_concurrent",
    },
    OptionSpec {
        id: OptionId::MaxQueue,
        section: Section::Bulkhead,
        name: "max_queue",
        kind: count(0, MAX_QUEUE),
        default: "100",
        doc: "live waiters allowed at once; 0 = fail fast",
        c_name: c"max_queue",
    },
    OptionSpec {
        id: OptionId::QueueTimeout,
        section: Section::Bulkhead,
        name: "queue_timeout",
        kind: Kind::Duration {
            zero: true,
            max: UNBOUNDED,
            infinite: true,
        },
        default: "30 s",
        doc: "the default deadline of a queued acquire; 0 = do not queue",
        c_name: c"queue_timeout_ms",
    },
    OptionSpec {
        id: OptionId::Enabled,
        section: Section::Bulkhead,
        name: "enabled",
        kind: Kind::Bool,
        default: "true",
        doc: "false admits everything (still counted)",
        c_name: c"enabled",
    },
    OptionSpec {
        id: OptionId::Budget,
        section: Section::Bulkhead,
        name: "budget",
        kind: count(1, MAX_BUDGET),
        default: "none",
        doc: "an in-flight ceiling of cost units beside the permits; none: every cost is 0",
        c_name: c"budget",
    },
    OptionSpec {
        id: OptionId::MaxQueuedCost,
        section: Section::Bulkhead,
        name: "max_queued_cost",
        kind: count(1, MAX_BUDGET),
        default: "none",
        doc: "a bound on the total cost of queued requests (with a budget); none: max_queue only",
        c_name: c"max_queued_cost",
    },
    OptionSpec {
        id: OptionId::Observe,
        section: Section::Bulkhead,
        name: "observe",
        kind: Kind::Choice(crate::observe::Observe::CHOICES),
        default: "\"off\"",
        doc: "the dimensions decided and counted but not enforced (observe / shadow mode)",
        c_name: c"observe",
    },
    OptionSpec {
        id: OptionId::MaxOrphaned,
        section: Section::Bulkhead,
        name: "max_orphaned",
        kind: count(0, MAX_PERMITS),
        default: "0",
        doc: "permits that calls may hand back while their work goes on (orphaning); 0: off",
        c_name: c"max_orphaned",
    },
    OptionSpec {
        id: OptionId::StartLimit,
        section: Section::Bulkhead,
        name: "start_limit",
        kind: count(0, MAX_PERMITS),
        default: "max_concurrent",
        doc: "the limit at construction, at most max_concurrent; 0: a fail-closed start (the kill switch until apply_limits raises it)",
        c_name: c"start_limit",
    },
    OptionSpec {
        id: OptionId::MaxReservations,
        section: Section::Bulkhead,
        name: "max_reservations",
        kind: count(0, crate::limits::MAX_RESERVATIONS),
        default: "0",
        doc: "reservations (two-phase admission: reserve, then commit or abort) held at once; 0: off",
        c_name: c"max_reservations",
    },
    OptionSpec {
        id: OptionId::CancelOnOverrun,
        section: Section::Bulkhead,
        name: "cancel_on_overrun",
        kind: Kind::Bool,
        default: "false",
        doc: "a streaming call whose hold must grow past the budget is asked to cancel its work (else the growth is held as overrun)",
        c_name: c"cancel_on_overrun",
    },
    OptionSpec {
        id: OptionId::MaxKeys,
        section: Section::Registry,
        name: "max_keys",
        kind: count(1, U32),
        default: "1024",
        doc: "keys that may exist at once",
        c_name: c"max_keys",
    },
    OptionSpec {
        id: OptionId::AdaptiveAlgorithm,
        section: Section::Adaptive,
        name: "algorithm",
        kind: Kind::Choice(&["gradient2", "aimd"]),
        default: "\"gradient2\"",
        doc: "the limit controller",
        c_name: c"adaptive_algorithm",
    },
    OptionSpec {
        id: OptionId::AdaptiveInitialLimit,
        section: Section::Adaptive,
        name: "initial_limit",
        kind: count(1, MAX_PERMITS),
        default: "max_limit",
        doc: "the starting limit, min_limit..=max_limit",
        c_name: c"adaptive_initial_limit",
    },
    OptionSpec {
        id: OptionId::AdaptiveMinLimit,
        section: Section::Adaptive,
        name: "min_limit",
        kind: count(1, MAX_PERMITS),
        default: "1",
        doc: "the floor, at most max_limit",
        c_name: c"adaptive_min_limit",
    },
    OptionSpec {
        id: OptionId::AdaptiveMaxLimit,
        section: Section::Adaptive,
        name: "max_limit",
        kind: count(1, MAX_PERMITS),
        default: "max_concurrent",
        doc: "the ceiling, at most max_concurrent",
        c_name: c"adaptive_max_limit",
    },
    OptionSpec {
        id: OptionId::AdaptiveTargetLatency,
        section: Section::Adaptive,
        name: "target_latency",
        kind: positive_duration(),
        default: "500 ms",
        doc: "AIMD: a success slower than this is a congestion signal",
        c_name: c"adaptive_target_latency_ms",
    },
    OptionSpec {
        id: OptionId::AdaptiveIncreaseStep,
        section: Section::Adaptive,
        name: "increase_step",
        kind: count(1, MAX_PERMITS),
        default: "1",
        doc: "AIMD: the additive increase",
        c_name: c"adaptive_increase_step",
    },
    OptionSpec {
        id: OptionId::AdaptiveDecreaseRatio,
        section: Section::Adaptive,
        name: "decrease_ratio",
        kind: Kind::Number {
            min: 0.0,
            min_open: true,
            max: 1.0,
            max_open: true,
        },
        default: "0.7",
        doc: "the multiplicative back-off",
        c_name: c"adaptive_decrease_ratio",
    },
    OptionSpec {
        id: OptionId::AdaptiveSmoothing,
        section: Section::Adaptive,
        name: "smoothing",
        kind: Kind::Number {
            min: 0.0,
            min_open: true,
            max: 1.0,
            max_open: false,
        },
        default: "0.2",
        doc: "Gradient2: weight of the new estimate",
        c_name: c"adaptive_smoothing",
    },
    OptionSpec {
        id: OptionId::AdaptiveRttTolerance,
        section: Section::Adaptive,
        name: "rtt_tolerance",
        kind: Kind::Number {
            min: 1.0,
            min_open: false,
            max: f64::INFINITY,
            max_open: true,
        },
        default: "1.5",
        doc: "Gradient2: RTT growth over the long-term RTT tolerated before shrinking",
        c_name: c"adaptive_rtt_tolerance",
    },
    OptionSpec {
        id: OptionId::AdaptiveLongWindow,
        section: Section::Adaptive,
        name: "long_window",
        kind: count(1, 1 << 32),
        default: "600",
        doc: "Gradient2: samples in the long-term RTT average",
        c_name: c"adaptive_long_window",
    },
    OptionSpec {
        id: OptionId::AdaptiveQueueSize,
        section: Section::Adaptive,
        name: "queue_size",
        kind: count(0, MAX_PERMITS),
        default: "4",
        doc: "Gradient2: headroom added while no queueing is seen",
        c_name: c"adaptive_queue_size",
    },
    OptionSpec {
        id: OptionId::BreakerFailureThreshold,
        section: Section::Breaker,
        name: "failure_threshold",
        kind: count(1, MAX_THRESHOLD as u64),
        default: "5",
        doc: "consecutive failures that open it",
        c_name: c"breaker_failure_threshold",
    },
    OptionSpec {
        id: OptionId::BreakerErrorRateThreshold,
        section: Section::Breaker,
        name: "error_rate_threshold",
        kind: Kind::Number {
            min: 0.0,
            min_open: true,
            max: 1.0,
            max_open: false,
        },
        default: "0.5",
        doc: "failure fraction over the window that opens it",
        c_name: c"breaker_error_rate_threshold",
    },
    OptionSpec {
        id: OptionId::BreakerErrorRateWindow,
        section: Section::Breaker,
        name: "error_rate_window",
        kind: positive_duration(),
        default: "10 s",
        doc: "the rolling window of the error rate (at least 1 ns per bucket)",
        c_name: c"breaker_error_rate_window_ms",
    },
    OptionSpec {
        id: OptionId::BreakerErrorRateBuckets,
        section: Section::Breaker,
        name: "error_rate_buckets",
        kind: count(1, MAX_BUCKETS as u64),
        default: "10",
        doc: "buckets of the window",
        c_name: c"breaker_error_rate_buckets",
    },
    OptionSpec {
        id: OptionId::BreakerVolumeThreshold,
        section: Section::Breaker,
        name: "volume_threshold",
        kind: count(1, MAX_THRESHOLD as u64),
        default: "20",
        doc: "calls in the window before the error rate counts",
        c_name: c"breaker_volume_threshold",
    },
    OptionSpec {
        id: OptionId::BreakerOpenDuration,
        section: Section::Breaker,
        name: "open_duration",
        kind: positive_duration(),
        default: "30 s",
        doc: "time open before half-open",
        c_name: c"breaker_open_duration_ms",
    },
    OptionSpec {
        id: OptionId::BreakerHalfOpenMaxCalls,
        section: Section::Breaker,
        name: "half_open_max_calls",
        kind: count(1, MAX_HALF_OPEN_CALLS as u64),
        default: "1",
        doc: "probes admitted while half-open",
        c_name: c"breaker_half_open_max_calls",
    },
    OptionSpec {
        id: OptionId::BreakerHalfOpenTimeout,
        section: Section::Breaker,
        name: "half_open_timeout",
        kind: positive_duration(),
        default: "30 s",
        doc: "a probe that has not reported within this counts as a failure",
        c_name: c"breaker_half_open_timeout_ms",
    },
    OptionSpec {
        id: OptionId::CallTimeout,
        section: Section::Resilience,
        name: "call_timeout",
        kind: Kind::Duration {
            zero: false,
            max: UNBOUNDED,
            infinite: true,
        },
        default: "none",
        doc: "bounds the work of one guarded call",
        c_name: c"call_timeout_ms",
    },
    OptionSpec {
        id: OptionId::MinServiceTime,
        section: Section::Bulkhead,
        name: "min_service_time",
        kind: Kind::Duration {
            zero: true,
            max: MAX_DURATION,
            infinite: false,
        },
        default: "0",
        doc: "the least time a request's work needs before its deadline: a queued request is refused `timeout` once less than this is left",
        c_name: c"min_service_time_ms",
    },
    OptionSpec {
        id: OptionId::QueueDelayTarget,
        section: Section::Bulkhead,
        name: "queue_delay_target",
        kind: Kind::Duration {
            zero: true,
            max: MAX_DURATION,
            infinite: false,
        },
        default: "0",
        doc: "queue-delay shedding (CoDel): the acceptable standing queue delay; 0: off",
        c_name: c"queue_delay_target_ms",
    },
    OptionSpec {
        id: OptionId::QueueDelayInterval,
        section: Section::Bulkhead,
        name: "queue_delay_interval",
        kind: positive_duration(),
        default: "100 ms",
        doc: "queue-delay shedding (CoDel): how long the delay must stay above the target before shedding starts",
        c_name: c"queue_delay_interval_ms",
    },
    OptionSpec {
        id: OptionId::AdaptiveLifo,
        section: Section::Bulkhead,
        name: "adaptive_lifo",
        kind: Kind::Bool,
        default: "false",
        doc: "newest waiter first while the oldest has waited past queue_delay_target (FIFO otherwise); needs queue_delay_target",
        c_name: c"adaptive_lifo",
    },
    OptionSpec {
        id: OptionId::ShedLagThreshold,
        section: Section::Bulkhead,
        name: "shed_lag_threshold",
        kind: Kind::Duration {
            zero: true,
            max: MAX_DURATION,
            infinite: false,
        },
        default: "0",
        doc: "load shedding: while the reported event-loop lag is above this, non-critical classes are refused `shed` at once; 0: off",
        c_name: c"shed_lag_threshold_ms",
    },
    OptionSpec {
        id: OptionId::ShedCpuThreshold,
        section: Section::Bulkhead,
        name: "shed_cpu_threshold",
        kind: Kind::Number {
            min: 0.0,
            min_open: false,
            max: MAX_CPU,
            max_open: false,
        },
        default: "0",
        doc: "load shedding: while the reported process CPU use (cores, 1.0 = one core busy) is above this, non-critical classes are refused `shed` at once; 0: off",
        c_name: c"shed_cpu_threshold",
    },
    OptionSpec {
        id: OptionId::CriticalPriority,
        section: Section::Bulkhead,
        name: "critical_priority",
        kind: Kind::Count { min: 0, max: 255 },
        default: "1",
        doc: "load shedding: a class of this priority or above is critical and never shed by a load signal",
        c_name: c"critical_priority",
    },
];

const _: () = {
    // The table is in `OptionId` order: `spec()` indexes it.
    let mut i = 0;
    while i < OptionId::COUNT {
        assert!(OPTIONS[i].id as usize == i);
        // A null that means "off" sets the option's "none": only a duration that has one.
        if let NullMeans::Off = OPTIONS[i].id.null_means() {
            assert!(matches!(
                OPTIONS[i].kind,
                Kind::Duration { infinite: true, .. }
            ));
        }
        i += 1;
    }
};

#[cfg(all(test, feature = "std"))]
mod tests {
    use std::{format, string::ToString};

    use super::*;

    #[test]
    fn spellings_are_derived() {
        let o = OptionId::BreakerOpenDuration.spec();
        assert_eq!(o.spelled(Spelling::Python).to_string(), "open_duration");
        assert_eq!(o.spelled(Spelling::Node).to_string(), "openDurationMs");
        assert_eq!(
            o.spelled(Spelling::C).to_string(),
            "breaker_open_duration_ms"
        );
        assert_eq!(o.spelled(Spelling::Vector).to_string(), "open_duration_ms");
        assert_eq!(
            o.path(Spelling::Python).to_string(),
            "resilience.breaker.open_duration"
        );
        assert_eq!(
            o.path(Spelling::Node).to_string(),
            "resilience.breaker.openDurationMs"
        );
        assert!(o.spelled(Spelling::Node).is("openDurationMs"));
        assert!(!o.spelled(Spelling::Node).is("openDuration"));
        assert!(!o.spelled(Spelling::Node).is("openDurationMsX"));
        let q = OptionId::MaxConcurrent.spec();
        assert_eq!(q.spelled(Spelling::Node).to_string(), "maxConcurrent");
        assert_eq!(
            find(Section::Bulkhead, Spelling::Node, "queueTimeoutMs").map(|o| o.id),
            Some(OptionId::QueueTimeout)
        );
        assert_eq!(
            find(Section::Bulkhead, Spelling::Node, "queueTimeout"),
            None
        );
        assert_eq!(
            OptionId::CallTimeout
                .spec()
                .spelled(Spelling::C)
                .to_string(),
            "call_timeout_ms"
        );
    }

    #[test]
    fn null_means_not_given_except_for_parts_and_call_timeout() {
        let off: std::vec::Vec<OptionId> = OPTIONS
            .iter()
            .filter(|o| o.null_means() == NullMeans::Off)
            .map(|o| o.id)
            .collect();
        assert_eq!(off, [OptionId::CallTimeout]);
        // "No deadline" is infinity, never null: a null queue timeout is the default.
        assert_eq!(OptionId::QueueTimeout.null_means(), NullMeans::NotGiven);
        assert_eq!(
            OptionId::BreakerOpenDuration.spec().null_means(),
            NullMeans::NotGiven
        );
        for s in [Section::Adaptive, Section::Breaker, Section::Resilience] {
            assert_eq!(s.null_means(), NullMeans::Off, "{s:?}");
        }
        for s in [Section::Bulkhead, Section::Registry] {
            assert_eq!(s.null_means(), NullMeans::NotGiven, "{s:?}");
        }
        assert_eq!(
            r_vector(OptionId::QueueTimeout),
            "0 or at least 1 ms, or \"infinite\" for none"
        );
    }

    fn r_vector(id: OptionId) -> std::string::String {
        id.spec().range(Spelling::Vector).to_string()
    }

    #[test]
    fn c_names_are_the_c_spelling() {
        for o in &OPTIONS {
            assert_eq!(
                o.c_name.to_str().unwrap(),
                o.spelled(Spelling::C).to_string(),
                "{:?}",
                o.id
            );
        }
    }

    #[test]
    fn ranges_read_well() {
        let r = |id: OptionId, s| id.spec().range(s).to_string();
        assert_eq!(
            r(OptionId::BreakerFailureThreshold, Spelling::Python),
            "an integer in 1..=1048575"
        );
        assert_eq!(
            r(OptionId::AdaptiveDecreaseRatio, Spelling::Python),
            "a number in (0, 1)"
        );
        assert_eq!(
            r(OptionId::CallTimeout, Spelling::Node),
            "at least 0.000001 ms, or Infinity for none"
        );
        assert_eq!(
            r(OptionId::QueueTimeout, Spelling::Python),
            "0 or at least 1e-9 seconds, or math.inf for none"
        );
        assert_eq!(
            r(OptionId::BreakerOpenDuration, Spelling::Python),
            "at least 1e-9 seconds and at most 4611686018 seconds"
        );
        assert_eq!(
            format!("{}", known_names(Section::Resilience, Spelling::Node)),
            "\"adaptive\", \"breaker\", \"callTimeoutMs\""
        );
        assert!(
            format!("{}", known_names(Section::Registry, Spelling::Python))
                .ends_with("\"resilience\", \"max_keys\", \"overrides\"")
        );
        assert_eq!(find_part("breaker"), Some(Section::Breaker));
        #[cfg(target_pointer_width = "64")]
        assert_eq!(
            r(OptionId::Budget, Spelling::Node),
            "an integer in 1..=1099511627775"
        );
        // `budget` is keyword-only: the positional options are the founding four.
        let names: std::vec::Vec<&str> = positional().map(|o| o.name).collect();
        assert_eq!(
            names,
            ["max_concurrent", "max_queue", "queue_timeout", "enabled"]
        );
        let e = crate::ConfigError::Budget
            .spelled(Spelling::Node)
            .to_string();
        assert!(
            e.starts_with("budget must be an integer in 1..=")
                && e.contains("maxConcurrent at most"),
            "{e}"
        );
        assert_eq!(
            crate::ConfigError::Budget.option_id(),
            Some(OptionId::Budget)
        );
        assert_eq!(
            format!("{}", known_names(Section::Breaker, Spelling::Node)),
            "\"failureThreshold\", \"errorRateThreshold\", \"errorRateWindowMs\", \
             \"errorRateBuckets\", \"volumeThreshold\", \"openDurationMs\", \
             \"halfOpenMaxCalls\", \"halfOpenTimeoutMs\""
        );
    }
}
