//! Construction-time configuration and its validation (docs/design.md §7).
//!
//! | module | what |
//! |---|---|
//! | here | [`Config`] and [`ConfigError`] (every error names its option and renders its range) |
//! | [`options`] | the option table: names, sections, kinds, ranges, defaults, spellings |
//! | [`partial`] | [`PartialConfig`]: options as a layer passes them, merged key by key |
//! | [`convert`] | a layer's numbers as option values: one rule for every layer |
//! | [`class_options`] | the class table's options (classes, reserve, rates) and a builder |

#[cfg(feature = "alloc")]
pub mod class_options;
pub mod classes;
pub mod convert;
pub mod options;
pub mod partial;

use core::{fmt, time::Duration};

pub use self::{
    classes::{ClassError, ClassSpec, ClassTable, MAX_CLASSES, PriorityReserve, Rate, Rates},
    options::{NullMeans, OptionId, OptionSpec, Section, Spelling},
    partial::{Part, PartialConfig, Value},
};
pub use crate::limits::{
    MAX_BUDGET, MAX_CONCURRENT_WITH_BUDGET, MAX_PERMITS, MAX_QUEUE, MAX_RESERVATIONS,
};
pub use crate::observe::Observe;
use crate::{
    limits::DEFAULT_MAX_CONCURRENT,
    policy::{adaptive::AdaptiveConfigError, breaker::BreakerConfigError, resilience::Resilience},
};

/// Configuration of one [`Bulkhead`](crate::Bulkhead).
///
/// Defaults are the common HTTP-client bulkhead defaults: 10 concurrent, 100 queued, 30 s.
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::Config;
/// let c = Config { max_concurrent: 4, ..Config::default() };
/// assert_eq!(c.max_queue, 100);
/// assert_eq!(c.queue_timeout, Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// The ceiling of the limit, `1 ..= MAX_PERMITS`. The limit starts here.
    pub max_concurrent: u64,
    /// Live waiters allowed at once, `0 ..= MAX_QUEUE`; `0` means fail fast.
    pub max_queue: u64,
    /// The default deadline of a queued acquire wherever the host has a timer.
    /// `Duration::MAX` means no deadline. The core itself arms no timer.
    pub queue_timeout: Duration,
    /// `false` admits everything (still counted in the stats; I1 does not apply).
    pub enabled: bool,
    /// The policies around this bulkhead (docs/design.md §6); [`Resilience::OFF`] by default.
    /// Needs the `alloc` feature (the policy state is allocated once, at construction).
    pub resilience: Resilience,
    /// A budget beside the permit limit (docs/design.md §4.5): an in-flight ceiling of cost
    /// units (tokens, bytes), `1 ..= MAX_BUDGET`; a request asks for its
    /// [`cost`](crate::Request::cost) of it and is admitted only when its permits and its cost
    /// both fit. `None` (the default): no budget, every cost must be 0. With a budget,
    /// `max_concurrent` is at most [`MAX_CONCURRENT_WITH_BUDGET`] (both share the permit word).
    pub budget: Option<u64>,
    /// Observe (shadow) mode (docs/design.md §4.7): the dimensions that are decided and
    /// counted (`stats().observed_by_reason`) but not enforced. [`Observe::Off`] by default;
    /// [`Observe::Budget`] needs a budget. Changed at run time by `Bulkhead::set_observe`.
    pub observe: Observe,
    /// A bound on the total cost of queued requests (docs/design.md §4.5), `1 ..= MAX_BUDGET`,
    /// beside `max_queue`: a request whose cost would pass it is refused `queue_limit` instead
    /// of queueing. Needs a budget; `None` (the default): `max_queue` bounds the queue alone.
    pub max_queued_cost: Option<u64>,
    /// Orphaning (docs/design.md §5.3): how many permits calls may hand back with
    /// [`Call::orphan`](crate::Call::orphan) while their work goes on, `0 ..= MAX_PERMITS`;
    /// those calls count in `stats().orphaned_in_flight`, outside `active`, so the work in
    /// flight may exceed the limit by at most this much. 0 (the default): orphaning is off.
    pub max_orphaned: u64,
    /// The limit at construction (docs/design.md §4.6), `0 ..= max_concurrent`; `None` (the
    /// default): `max_concurrent`. `Some(0)` is a **fail-closed start**: the kill switch holds
    /// (everything is refused `concurrency_limit`) until an `apply_limits` raises the limit.
    /// Not with an adaptive limit (it sets its own start).
    pub start_limit: Option<u64>,
    /// Two-phase admission (docs/design.md §5.8): how many reservations
    /// ([`Bulkhead::reserve`](crate::Bulkhead::reserve)) may be held at once,
    /// `0 ..= MAX_RESERVATIONS`; the table is allocated once at construction. 0 (the default):
    /// reservations are off. Needs `alloc` (not for a `static` bulkhead).
    pub max_reservations: u64,
    /// Streaming settlement (docs/design.md §4.5): when a call's hold must grow and the growth
    /// does not fit, ask the host to cancel the call's work — the
    /// [`UsageReport::cancel`](crate::UsageReport::cancel) answer and
    /// [`Call::cancel_requested`](crate::Call::cancel_requested); the bindings fire the call's
    /// cancel signal on it. `false` (the default): the growth is held past the budget as
    /// overrun and the work goes on.
    pub cancel_on_overrun: bool,
    /// Deadlines (docs/design.md §5.9): the least time a request's work needs once granted.
    /// A request with a [`deadline`](crate::Request::deadline) waits in the queue at most
    /// until `deadline − min_service_time` and is refused `timeout` then (or at once, if it
    /// would have to queue with less than this left) — not granted to fail. `ZERO` (the
    /// default): a waiter may wait until its deadline itself.
    pub min_service_time: Duration,
    /// Queue-delay shedding (docs/design.md §4.10, CoDel — Nichols and Jacobson, "Controlling
    /// Queue Delay", ACM Queue 2012; RFC 8289): the acceptable standing queue delay. When the
    /// waiters the dispatcher grants have all waited at least this long for a whole
    /// [`queue_delay_interval`](Self::queue_delay_interval), it sheds the head instead of
    /// granting it (`shed`), then sheds again at intervals shrinking as `interval / √count`
    /// while the delay stays above the target. `ZERO` (the default): off. Needs `alloc` and a
    /// clock; a bulkhead with it dispatches through the class lists.
    pub queue_delay_target: Duration,
    /// Queue-delay shedding: the interval (see [`queue_delay_target`](Self::queue_delay_target));
    /// 100 ms by default, as CoDel's.
    pub queue_delay_interval: Duration,
    /// Adaptive LIFO (docs/design.md §4.10; Facebook, "Fail at Scale", ACM Queue 2015): while
    /// the oldest waiter has waited at least [`queue_delay_target`](Self::queue_delay_target),
    /// grant the newest waiter first — it still has time to be served — and FIFO otherwise.
    /// Needs `queue_delay_target`. `false` (the default): always FIFO.
    pub adaptive_lifo: bool,
    /// Load shedding (docs/design.md §4.11): while the event-loop lag last reported with
    /// [`Bulkhead::report_load`](crate::Bulkhead::report_load) is above this, a request of a
    /// non-critical class (priority below [`critical_priority`](Self::critical_priority)) is
    /// refused `shed` at once (bound `overload`). `ZERO` (the default): off. Needs `alloc` (a
    /// bulkhead with it and no class table gets a one-class table, priority 0).
    pub shed_lag_threshold: Duration,
    /// Load shedding: as [`shed_lag_threshold`](Self::shed_lag_threshold) for the process's
    /// CPU use, in cores (1.0: one core busy all the time), `0.0 ..= 1024.0`. `0.0` (the
    /// default): off.
    pub shed_cpu_threshold: f64,
    /// Load shedding: a class of this priority or above is critical — never shed by a load
    /// signal (it passes while capacity is left; the limits apply as always). 1 by default, so
    /// the default class (priority 0) is not critical.
    pub critical_priority: u8,
}

/// The queue-delay dispatch options (docs/design.md §4.10): [`Config::queue_delay_target`],
/// [`Config::queue_delay_interval`] and [`Config::adaptive_lifo`], as `apply_limits` changes
/// them together ([`LimitsSnapshot::queue_delay`](crate::LimitsSnapshot::queue_delay)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDelay {
    /// The acceptable standing queue delay; `ZERO`: no shedding (and no LIFO).
    pub target: Duration,
    /// How long the delay must stay above the target before shedding starts; not zero.
    pub interval: Duration,
    /// Adaptive LIFO; needs a target.
    pub lifo: bool,
}

impl QueueDelay {
    /// Checks the options together.
    ///
    /// # Errors
    /// [`ConfigError::Option`] naming `queue_delay_interval` (zero) or `adaptive_lifo`
    /// (without a target).
    pub const fn validate(&self) -> Result<(), ConfigError> {
        if self.interval.is_zero() {
            return Err(ConfigError::Option(OptionId::QueueDelayInterval));
        }
        if self.lifo && self.target.is_zero() {
            return Err(ConfigError::Requires {
                option: OptionId::AdaptiveLifo,
                needs: OptionId::QueueDelayTarget,
            });
        }
        Ok(())
    }
}

impl Config {
    /// The defaults, usable in `const` and `static` items.
    pub const DEFAULT: Config = Config {
        max_concurrent: DEFAULT_MAX_CONCURRENT,
        max_queue: 100,
        queue_timeout: Duration::from_secs(30),
        enabled: true,
        resilience: Resilience::OFF,
        budget: None,
        observe: Observe::Off,
        max_queued_cost: None,
        max_orphaned: 0,
        start_limit: None,
        max_reservations: 0,
        cancel_on_overrun: false,
        min_service_time: Duration::ZERO,
        queue_delay_target: Duration::ZERO,
        queue_delay_interval: Duration::from_millis(100),
        adaptive_lifo: false,
        shed_lag_threshold: Duration::ZERO,
        shed_cpu_threshold: 0.0,
        critical_priority: 1,
    };

    /// Checks every option, naming the first bad one.
    ///
    /// # Errors
    /// [`ConfigError::MaxConcurrent`] outside `1 ..= MAX_PERMITS`,
    /// [`ConfigError::MaxQueue`] above [`MAX_QUEUE`], then the `resilience` errors of
    /// [`Resilience::validate`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_base()?;
        if self.start_limit.is_some() && self.resilience.adaptive.is_some() {
            // The adaptive limit sets its own start (`resilience.adaptive.initial_limit`).
            return Err(ConfigError::Option(OptionId::StartLimit));
        }
        self.resilience.validate(self.max_concurrent)?;
        self.check_implied_table()
    }

    /// Refuses what the one-class table a bulkhead that sheds by queue delay or by load gets
    /// (docs/design.md §4.10, §4.11) would refuse when built, so that checking a config answers
    /// as building it does ([`ConfigError::Conflicts`]). The same options, in the same order,
    /// as [`ClassTable::validate`](classes::ClassTable::validate)'s.
    fn check_implied_table(&self) -> Result<(), ConfigError> {
        let option = if self.needs_dispatch_lists() {
            OptionId::QueueDelayTarget
        } else if !self.shed_lag_threshold.is_zero() {
            OptionId::ShedLagThreshold
        } else if self.shed_cpu_threshold > 0.0 {
            OptionId::ShedCpuThreshold
        } else {
            return Ok(());
        };
        match self.class_conflict() {
            Some(with) => Err(ConfigError::Conflicts { option, with }),
            None => Ok(()),
        }
    }

    /// The first option set here that a class table does not take yet (`enabled` false, an
    /// observe mode, an adaptive limit — named by [`OptionId::AdaptiveAlgorithm`] — or
    /// `max_reservations`), if any: the one list both [`ClassTable::validate`](classes::ClassTable::validate)
    /// and the implied table's check read.
    pub(crate) fn class_conflict(&self) -> Option<OptionId> {
        if !self.enabled {
            Some(OptionId::Enabled)
        } else if self.observe != crate::observe::Observe::Off {
            Some(OptionId::Observe)
        } else if self.resilience.adaptive.is_some() {
            Some(OptionId::AdaptiveAlgorithm)
        } else if self.max_reservations != 0 {
            Some(OptionId::MaxReservations)
        } else {
            None
        }
    }

    /// The `const` part of [`validate`](Self::validate) (for static bulkheads, which take no
    /// policies).
    pub(crate) const fn validate_base(&self) -> Result<(), ConfigError> {
        if self.max_concurrent == 0 || self.max_concurrent > MAX_PERMITS {
            return Err(ConfigError::MaxConcurrent);
        }
        if self.max_queue > MAX_QUEUE {
            return Err(ConfigError::MaxQueue);
        }
        if let Some(b) = self.budget {
            if b == 0 || b > MAX_BUDGET || self.max_concurrent > MAX_CONCURRENT_WITH_BUDGET {
                return Err(ConfigError::Budget);
            }
        }
        if let Some(l) = self.start_limit {
            if l > self.max_concurrent {
                return Err(ConfigError::Option(OptionId::StartLimit));
            }
        }
        if self.max_orphaned > MAX_PERMITS {
            return Err(ConfigError::Option(OptionId::MaxOrphaned));
        }
        if self.max_reservations > MAX_RESERVATIONS {
            return Err(ConfigError::Option(OptionId::MaxReservations));
        }
        if let Some(m) = self.max_queued_cost {
            if m == 0 || m > MAX_BUDGET || self.budget.is_none() {
                return Err(ConfigError::MaxQueuedCost);
            }
        }
        if self.observe.budget() && self.budget.is_none() && !self.observe.concurrency() {
            return Err(ConfigError::Observe);
        }
        if let Err(e) = self.queue_delay().validate() {
            return Err(e);
        }
        if !(self.shed_cpu_threshold >= 0.0
            && self.shed_cpu_threshold <= crate::config::options::MAX_CPU)
        {
            return Err(ConfigError::Option(OptionId::ShedCpuThreshold));
        }
        if self.shed_lag_threshold.as_nanos() > crate::policy::breaker::MAX_DURATION.as_nanos() {
            return Err(ConfigError::Option(OptionId::ShedLagThreshold));
        }
        Ok(())
    }

    /// Whether the queue's dispatch policy needs the class lists (queue-delay shedding, adaptive
    /// LIFO): such a bulkhead without a class table gets a one-class table.
    pub const fn needs_dispatch_lists(&self) -> bool {
        !self.queue_delay_target.is_zero()
    }

    /// Whether load shedding is on (a threshold is set, docs/design.md §4.11): such a
    /// bulkhead without a class table gets a one-class table.
    pub const fn sheds_on_load(&self) -> bool {
        !self.shed_lag_threshold.is_zero() || self.shed_cpu_threshold > 0.0
    }

    /// The load-shedding options together.
    pub const fn load_shedding(&self) -> crate::load::LoadShedding {
        crate::load::LoadShedding {
            lag_threshold: self.shed_lag_threshold,
            cpu_threshold: self.shed_cpu_threshold,
            critical_priority: self.critical_priority,
        }
    }

    /// The queue-delay dispatch options together.
    pub const fn queue_delay(&self) -> QueueDelay {
        QueueDelay {
            target: self.queue_delay_target,
            interval: self.queue_delay_interval,
            lifo: self.adaptive_lifo,
        }
    }

    /// The limit in force at construction: `start_limit`, else `max_concurrent`.
    pub const fn start(&self) -> u64 {
        match self.start_limit {
            Some(l) => l,
            None => self.max_concurrent,
        }
    }

    /// The ring capacity a runtime-sized bulkhead allocates:
    /// `next_power_of_two(max_queue + max(max_queue, 64))`. Live waiters take at most
    /// `max_queue` cells; the rest is room for results their owners have not taken yet
    /// (docs/design.md §4.2).
    pub const fn ring_capacity(&self) -> usize {
        let slack = if self.max_queue > 64 {
            self.max_queue
        } else {
            64
        };
        ((self.max_queue + slack) as usize).next_power_of_two()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Resilience {
    /// Checks every part for a bulkhead of `max_concurrent`, naming the first bad option.
    ///
    /// # Errors
    /// [`ConfigError::Adaptive`], [`ConfigError::Breaker`] or [`ConfigError::CallTimeout`].
    pub fn validate(&self, max_concurrent: u64) -> Result<(), ConfigError> {
        if let Some(a) = &self.adaptive {
            a.validate().map_err(ConfigError::Adaptive)?;
            if a.max_limit > max_concurrent {
                return Err(ConfigError::Adaptive(AdaptiveConfigError::MaxLimit));
            }
        }
        if let Some(b) = &self.breaker {
            b.validate().map_err(ConfigError::Breaker)?;
        }
        if self.call_timeout.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::CallTimeout);
        }
        Ok(())
    }
}

/// A configuration value out of range, or of the wrong kind; the variant names the option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_concurrent` is 0 or above [`MAX_PERMITS`].
    MaxConcurrent,
    /// `max_queue` is above [`MAX_QUEUE`], above a static ring's capacity, or the ring for it
    /// could not be allocated.
    MaxQueue,
    /// A `set_limit` value outside `1 ..= max_concurrent`.
    Limit,
    /// `budget` is 0 or above [`MAX_BUDGET`], or given with `max_concurrent` above
    /// [`MAX_CONCURRENT_WITH_BUDGET`].
    Budget,
    /// A `set_budget` value outside `0 ..= budget`, or on a bulkhead without a budget.
    BudgetLimit,
    /// `observe` is `"budget"` on a bulkhead without a budget.
    Observe,
    /// `max_queued_cost` is 0 or above [`MAX_BUDGET`], or given without a budget.
    MaxQueuedCost,
    /// An `adaptive` option out of range (`max_limit` also when above `max_concurrent`).
    Adaptive(AdaptiveConfigError),
    /// A `breaker` option out of range.
    Breaker(BreakerConfigError),
    /// `call_timeout` is zero.
    CallTimeout,
    /// `resilience` was given where policies are unavailable (a static bulkhead, or a build
    /// without the `alloc` feature).
    Resilience,
    /// Another option out of range, or a value of the wrong kind for it (a
    /// [`PartialConfig`] value).
    Option(OptionId),
    /// The class table of a classed bulkhead (docs/design.md §4.8).
    Class(classes::ClassError),
    /// `option` is set but needs `needs` set (above 0) too: `adaptive_lifo` without a
    /// `queue_delay_target`.
    Requires {
        /// The option given.
        option: OptionId,
        /// The option it needs.
        needs: OptionId,
    },
    /// A valid option this bulkhead cannot honour: `queue_delay_target` on a bulkhead without
    /// a clock or a `static` one, or changed by `apply_limits` on a plain bulkhead (whose
    /// dispatcher keeps no lists to shed from).
    Unsupported(OptionId),
    /// `option` (`queue_delay_target`, `shed_lag_threshold` or `shed_cpu_threshold`) gives a
    /// bulkhead without classes a one-class table (docs/design.md §4.10, §4.11), and a class
    /// table does not take `with` yet: `enabled` false, an observe mode, an adaptive limit
    /// (`with` is then [`OptionId::AdaptiveAlgorithm`], standing for the adaptive part) or
    /// `max_reservations` above 0. Found by the `c_abi` fuzz target: `hg_config_check`
    /// accepted what `hg_bulkhead_new` refused.
    Conflicts {
        /// The option that brings the one-class table.
        option: OptionId,
        /// The option the table does not take.
        with: OptionId,
    },
    /// `set_limit`, `set_budget`, `apply_limits` or an observe mode on a leased bulkhead (a
    /// fleet bulkhead's local one, docs/design.md §16): its limit and budget are the lease's
    /// blocks, never observed; the fleet bulkhead's own `apply_limits` sets the fleet's.
    Leased,
}

impl ConfigError {
    /// The option this error is about (`None` for `limit`, a `set_limit` argument, and
    /// `resilience` as a whole).
    pub const fn option_id(&self) -> Option<OptionId> {
        use AdaptiveConfigError as A;
        use BreakerConfigError as B;
        Some(match self {
            ConfigError::MaxConcurrent => OptionId::MaxConcurrent,
            ConfigError::MaxQueue => OptionId::MaxQueue,
            ConfigError::Budget => OptionId::Budget,
            ConfigError::Observe => OptionId::Observe,
            ConfigError::MaxQueuedCost => OptionId::MaxQueuedCost,
            ConfigError::Limit
            | ConfigError::Resilience
            | ConfigError::BudgetLimit
            | ConfigError::Leased
            | ConfigError::Class(_) => {
                return None;
            }
            ConfigError::Requires { option, .. }
            | ConfigError::Unsupported(option)
            | ConfigError::Conflicts { option, .. } => *option,
            ConfigError::Adaptive(a) => match a {
                A::MaxLimit => OptionId::AdaptiveMaxLimit,
                A::MinLimit => OptionId::AdaptiveMinLimit,
                A::InitialLimit => OptionId::AdaptiveInitialLimit,
                A::TargetLatency => OptionId::AdaptiveTargetLatency,
                A::IncreaseStep => OptionId::AdaptiveIncreaseStep,
                A::DecreaseRatio => OptionId::AdaptiveDecreaseRatio,
                A::Smoothing => OptionId::AdaptiveSmoothing,
                A::RttTolerance => OptionId::AdaptiveRttTolerance,
                A::LongWindow => OptionId::AdaptiveLongWindow,
                A::QueueSize => OptionId::AdaptiveQueueSize,
            },
            ConfigError::Breaker(b) => match b {
                B::FailureThreshold => OptionId::BreakerFailureThreshold,
                B::ErrorRateThreshold => OptionId::BreakerErrorRateThreshold,
                B::ErrorRateWindow => OptionId::BreakerErrorRateWindow,
                B::ErrorRateBuckets => OptionId::BreakerErrorRateBuckets,
                B::VolumeThreshold => OptionId::BreakerVolumeThreshold,
                B::OpenDuration => OptionId::BreakerOpenDuration,
                B::HalfOpenMaxCalls => OptionId::BreakerHalfOpenMaxCalls,
                B::HalfOpenTimeout => OptionId::BreakerHalfOpenTimeout,
            },
            ConfigError::CallTimeout => OptionId::CallTimeout,
            ConfigError::Option(id) => *id,
        })
    }

    /// The option's name in its section (`"max_concurrent"`, `"open_duration"`, `"limit"`).
    pub const fn option(&self) -> &'static str {
        match self.option_id() {
            Some(id) => id.spec().name,
            None => match self {
                ConfigError::Limit | ConfigError::Leased => "limit",
                ConfigError::BudgetLimit => "budget_limit",
                ConfigError::Class(_) => "classes",
                _ => "resilience",
            },
        }
    }

    /// The part of `resilience` the option belongs to: `Some("adaptive")`, `Some("breaker")`,
    /// `Some("resilience")` for `call_timeout`, `None` for the bulkhead's own options.
    pub const fn section(&self) -> Option<&'static str> {
        match self.option_id() {
            Some(id) => match id.spec().section {
                Section::Adaptive => Some("adaptive"),
                Section::Breaker => Some("breaker"),
                Section::Resilience => Some("resilience"),
                Section::Bulkhead | Section::Registry => None,
            },
            None => None,
        }
    }

    /// The message in one layer's spelling: the option's path and its range
    /// (`"resilience.breaker.openDurationMs must be at least 0.000001 ms …"`).
    pub const fn spelled(&self, spelling: Spelling) -> SpelledError {
        SpelledError {
            error: *self,
            spelling,
        }
    }
}

/// A [`ConfigError`] rendered in one layer's spelling (see [`ConfigError::spelled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpelledError {
    error: ConfigError,
    spelling: Spelling,
}

impl fmt::Display for SpelledError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.spelling;
        match self.error {
            ConfigError::Limit => f.write_str("limit must be an integer in 1..=max_concurrent"),
            ConfigError::Leased => f.write_str(
                "the limit and budget of a fleet bulkhead's local bulkhead are its lease's blocks \
                 (never observed): set the fleet limit or budget with the fleet bulkhead's \
                 apply_limits",
            ),
            ConfigError::Class(e) => e.fmt(f),
            ConfigError::Budget => write!(
                f,
                "{} must be {}, with {} at most {MAX_CONCURRENT_WITH_BUDGET}",
                OptionId::Budget.spec().path(s),
                OptionId::Budget.spec().range(s),
                OptionId::MaxConcurrent.spec().spelled(s),
            ),
            ConfigError::MaxQueuedCost => write!(
                f,
                "{} must be {}, on a bulkhead with a {}",
                OptionId::MaxQueuedCost.spec().path(s),
                OptionId::MaxQueuedCost.spec().range(s),
                OptionId::Budget.spec().spelled(s),
            ),
            ConfigError::Observe => write!(
                f,
                "{} \"budget\" needs a {} (one of {})",
                OptionId::Observe.spec().path(s),
                OptionId::Budget.spec().spelled(s),
                OptionId::Observe.spec().range(s),
            ),
            ConfigError::BudgetLimit => f.write_str(
                "budget limit must be an integer in 0..=budget (on a bulkhead with a budget)",
            ),
            ConfigError::Resilience => f.write_str(
                "resilience needs the alloc feature and a runtime-sized Bulkhead (not new_static)",
            ),
            ConfigError::MaxQueue => write!(
                f,
                "{} must be {} (and fit the ring; allocation may have failed)",
                OptionId::MaxQueue.spec().path(s),
                OptionId::MaxQueue.spec().range(s)
            ),
            ConfigError::Adaptive(AdaptiveConfigError::MaxLimit) => {
                let max = OptionId::MaxConcurrent.spec().spelled(s);
                write!(
                    f,
                    "{} must be an integer in 1..={max}",
                    OptionId::AdaptiveMaxLimit.spec().path(s)
                )
            }
            ConfigError::Adaptive(AdaptiveConfigError::MinLimit) => write!(
                f,
                "{} must be an integer in 1..={}",
                OptionId::AdaptiveMinLimit.spec().path(s),
                OptionId::AdaptiveMaxLimit.spec().spelled(s)
            ),
            ConfigError::Adaptive(AdaptiveConfigError::InitialLimit) => write!(
                f,
                "{} must be an integer in {}..={}",
                OptionId::AdaptiveInitialLimit.spec().path(s),
                OptionId::AdaptiveMinLimit.spec().spelled(s),
                OptionId::AdaptiveMaxLimit.spec().spelled(s)
            ),
            ConfigError::Breaker(BreakerConfigError::ErrorRateWindow) => {
                let o = OptionId::BreakerErrorRateWindow.spec();
                write!(
                    f,
                    "{} must be {}, and at least one ns per bucket",
                    o.path(s),
                    o.range(s)
                )
            }
            ConfigError::Requires { option, needs } => write!(
                f,
                "{} needs a {} above 0",
                option.spec().path(s),
                needs.spec().spelled(s),
            ),
            ConfigError::Conflicts { option, with } => {
                write!(f, "{} cannot be combined with ", option.spec().path(s))?;
                let w = with.spec();
                match with {
                    OptionId::Enabled => write!(f, "{} set to false", w.path(s))?,
                    OptionId::Observe => write!(f, "an {} mode other than \"off\"", w.path(s))?,
                    OptionId::AdaptiveAlgorithm => f.write_str(match s {
                        Spelling::C => "adaptive_enabled",
                        _ => Section::Adaptive.path(),
                    })?,
                    _ => write!(f, "{} above 0", w.path(s))?,
                }
                f.write_str(
                    " yet: shedding by queue delay or by load dispatches through a class table, \
                     which takes neither a disabled bulkhead, an observe mode, an adaptive limit \
                     nor reservations",
                )
            }
            ConfigError::Unsupported(option) => write!(
                f,
                "{} needs a runtime-sized bulkhead with a clock (and, to change it with {}, one \
                 built with it or with classes)",
                option.spec().path(s),
                match s {
                    Spelling::Node => "applyLimits",
                    Spelling::C => "hg_bulkhead_apply_limits",
                    _ => "apply_limits",
                },
            ),
            e => match e.option_id() {
                Some(id) => write!(f, "{} must be {}", id.spec().path(s), id.spec().range(s)),
                None => f.write_str("invalid configuration"),
            },
        }
    }
}

impl fmt::Display for ConfigError {
    /// The message in the Python spelling (snake_case paths, durations in seconds), which is
    /// also the Rust field path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.spelled(Spelling::Python).fmt(f)
    }
}

impl core::error::Error for ConfigError {}

impl From<crate::policy::state::PolicyError> for ConfigError {
    fn from(e: crate::policy::state::PolicyError) -> Self {
        use crate::policy::state::PolicyError;
        match e {
            PolicyError::Breaker(e) => ConfigError::Breaker(e),
            PolicyError::Adaptive(e) => ConfigError::Adaptive(e),
        }
    }
}
