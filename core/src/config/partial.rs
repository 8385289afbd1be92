//! [`PartialConfig`]: options as a layer passes them — some set, the rest inherited — merged
//! key by key (docs/design.md §7.2). Every layer builds one by walking the option table, and a
//! registry merges each key's override over its defaults with [`PartialConfig::merged_over`],
//! so the merge rule exists once.
//!
//! Policy parts (`resilience.adaptive`, `resilience.breaker`) have a state of their own: a part
//! the layer did not mention is inherited, a part set to "none" is off, a part given (even
//! empty: `{}`) is on with the defaults for the options it does not set. `resilience: None`
//! turns every part off, and `call_timeout` with it, except what the same layer sets again.
//!
//! A null value (Python `None`, JavaScript `null`, JSON `null`) is applied by
//! the table's rule ([`options`](super::options), "Null values"): [`PartialConfig::set_null`]
//! for an option (not given, except `call_timeout`: off), [`PartialConfig::set_null_part`] for
//! `resilience` or a part (off).

use core::time::Duration;

use super::{
    Config, ConfigError,
    options::{Kind, NullMeans, OptionId, Section},
};
use crate::policy::{
    adaptive::{AdaptiveConfig, Algorithm},
    breaker::BreakerConfig,
};

/// A value of one option, in the core's units (durations as `Duration`; `Duration::MAX` is
/// "none" where the option accepts it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// An integer (counts, limits, thresholds).
    Count(u64),
    /// A duration.
    Duration(Duration),
    /// A real number.
    Number(f64),
    /// A flag.
    Bool(bool),
    /// One of the option's choices.
    Choice(&'static str),
}

/// The state of a policy part in one layer of options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Part {
    /// Not mentioned: inherited from the layer below.
    #[default]
    Inherit,
    /// Turned off ("none").
    Off,
    /// Turned on (the options it does not set take their defaults).
    On,
}

/// Options as one layer passes them. See the module docs.
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::config::{OptionId, Part, PartialConfig, Section, Value};
/// let mut defaults = PartialConfig::new();
/// defaults.set(OptionId::MaxConcurrent, Value::Count(8))?;
/// defaults.set_part(Section::Breaker, Part::On);
/// defaults.set(OptionId::BreakerFailureThreshold, Value::Count(3))?;
/// let mut slow = PartialConfig::new();
/// slow.set(OptionId::BreakerOpenDuration, Value::Duration(Duration::from_secs(5)))?;
/// slow.set_part(Section::Breaker, Part::On);
/// let c = slow.merged_over(&defaults).to_config()?;
/// let b = c.resilience.breaker.unwrap();
/// assert_eq!((c.max_concurrent, b.failure_threshold), (8, 3)); // inherited, key by key
/// assert_eq!(b.open_duration, Duration::from_secs(5));
/// # Ok::<(), hullguard_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartialConfig {
    values: [Option<Value>; OptionId::COUNT],
    adaptive: Part,
    breaker: Part,
    /// `resilience` itself set to "none" in this layer.
    resilience_off: bool,
}

impl Default for PartialConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialConfig {
    /// Nothing set: everything inherited.
    pub const fn new() -> Self {
        PartialConfig {
            values: [None; OptionId::COUNT],
            adaptive: Part::Inherit,
            breaker: Part::Inherit,
            resilience_off: false,
        }
    }

    /// Sets one option, checking the value against the table (its kind and range).
    ///
    /// # Errors
    /// [`ConfigError::Option`] naming the option for a value of the wrong kind or out of its
    /// range (cross-option rules, such as `min_limit ≤ max_limit`, are checked by
    /// [`to_config`](Self::to_config)).
    pub fn set(&mut self, id: OptionId, value: Value) -> Result<(), ConfigError> {
        let bad = Err(ConfigError::Option(id));
        let ok = match (id.spec().kind, value) {
            (Kind::Count { min, max }, Value::Count(n)) => n >= min && n <= max,
            (
                Kind::Duration {
                    zero,
                    max,
                    infinite,
                },
                Value::Duration(d),
            ) => (d == Duration::MAX && infinite) || ((zero || !d.is_zero()) && d <= max),
            (
                Kind::Number {
                    min,
                    min_open,
                    max,
                    max_open,
                },
                Value::Number(x),
            ) => {
                let above = if min_open { x > min } else { x >= min };
                let below = if max.is_infinite() {
                    x.is_finite()
                } else if max_open {
                    x < max
                } else {
                    x <= max
                };
                above && below
            }
            (Kind::Bool, Value::Bool(_)) => true,
            (Kind::Choice(choices), Value::Choice(c)) => choices.contains(&c),
            _ => return bad,
        };
        if !ok {
            return bad;
        }
        self.values[id as usize] = Some(value);
        Ok(())
    }

    /// A null value given for `id` in this layer, by the table's rule
    /// ([`OptionId::null_means`]): [`NullMeans::NotGiven`] leaves it unset (the default, or in
    /// a registry override the defaults' value); [`NullMeans::Off`] (`call_timeout`) sets the
    /// option's "none", which turns it off even over defaults that set it.
    ///
    /// # Examples
    /// ```
    /// use core::time::Duration;
    /// use hullguard_core::config::{OptionId, PartialConfig, Value};
    /// let mut defaults = PartialConfig::new();
    /// defaults.set(OptionId::QueueTimeout, Value::Duration(Duration::from_secs(1)))?;
    /// defaults.set(OptionId::CallTimeout, Value::Duration(Duration::from_secs(2)))?;
    /// let mut o = PartialConfig::new();
    /// o.set_null(OptionId::QueueTimeout); // not given: inherited
    /// o.set_null(OptionId::CallTimeout); // off
    /// let c = o.merged_over(&defaults).to_config()?;
    /// assert_eq!(c.queue_timeout, Duration::from_secs(1));
    /// assert_eq!(c.resilience.call_timeout, None);
    /// # Ok::<(), hullguard_core::ConfigError>(())
    /// ```
    pub fn set_null(&mut self, id: OptionId) {
        self.values[id as usize] = match id.null_means() {
            NullMeans::NotGiven => None,
            // Only durations with a "none" are `Off` (checked at compile time by the table).
            NullMeans::Off => Some(Value::Duration(Duration::MAX)),
        };
    }

    /// A null value given for `resilience` or one of its parts in this layer, by the table's
    /// rule ([`Section::null_means`]): off (`set_part(section, Part::Off)`), also over defaults
    /// that turned it on. A null for the bulkhead's or registry's own object sets nothing.
    pub fn set_null_part(&mut self, section: Section) {
        match section.null_means() {
            NullMeans::Off => self.set_part(section, Part::Off),
            NullMeans::NotGiven => {}
        }
    }

    /// The value this layer set for `id`, if any.
    pub const fn get(&self, id: OptionId) -> Option<Value> {
        self.values[id as usize]
    }

    /// Turns a policy part on or off (or back to inherited) in this layer: `Section::Adaptive`
    /// or `Section::Breaker`; `Section::Resilience` with [`Part::Off`] is `resilience: None`
    /// (every part off, and `call_timeout`). Other sections have no part.
    pub fn set_part(&mut self, section: Section, part: Part) {
        match section {
            Section::Adaptive => self.adaptive = part,
            Section::Breaker => self.breaker = part,
            Section::Resilience => self.resilience_off = part == Part::Off,
            Section::Bulkhead | Section::Registry => {}
        }
    }

    /// This layer over `base`: every option this layer sets wins; the rest comes from `base`.
    /// A part turned off here drops `base`'s options of that part; a part inherited here keeps
    /// `base`'s state (unless this layer says `resilience: None`).
    pub fn merged_over(&self, base: &PartialConfig) -> PartialConfig {
        let part = |mine: Part, theirs: Part| match mine {
            Part::Inherit if self.resilience_off => Part::Off,
            Part::Inherit => theirs,
            p => p,
        };
        let mut out = PartialConfig {
            values: [None; OptionId::COUNT],
            adaptive: part(self.adaptive, base.adaptive),
            breaker: part(self.breaker, base.breaker),
            resilience_off: false,
        };
        for (i, o) in super::options::OPTIONS.iter().enumerate() {
            let inherited = match o.section {
                Section::Adaptive => out.adaptive != Part::Off && self.adaptive != Part::Off,
                Section::Breaker => out.breaker != Part::Off && self.breaker != Part::Off,
                Section::Resilience => !self.resilience_off,
                Section::Bulkhead | Section::Registry => true,
            };
            out.values[i] = self.values[i].or(if inherited { base.values[i] } else { None });
        }
        out
    }

    fn count(&self, id: OptionId) -> Option<u64> {
        match self.get(id) {
            Some(Value::Count(n)) => Some(n),
            _ => None,
        }
    }

    fn duration(&self, id: OptionId) -> Option<Duration> {
        match self.get(id) {
            Some(Value::Duration(d)) => Some(d),
            _ => None,
        }
    }

    fn number(&self, id: OptionId) -> Option<f64> {
        match self.get(id) {
            Some(Value::Number(x)) => Some(x),
            _ => None,
        }
    }

    /// `max_keys`, if set (a registry option).
    pub fn max_keys(&self) -> Option<u64> {
        self.count(OptionId::MaxKeys)
    }

    /// The bulkhead configuration: the defaults, overlaid with what is set, validated.
    ///
    /// # Errors
    /// The first [`ConfigError`] of [`Config::validate`].
    pub fn to_config(&self) -> Result<Config, ConfigError> {
        use OptionId as O;
        let mut c = Config::DEFAULT;
        if let Some(n) = self.count(O::MaxConcurrent) {
            c.max_concurrent = n;
        }
        if let Some(n) = self.count(O::MaxQueue) {
            c.max_queue = n;
        }
        if let Some(d) = self.duration(O::QueueTimeout) {
            c.queue_timeout = d;
        }
        if let Some(Value::Bool(b)) = self.get(O::Enabled) {
            c.enabled = b;
        }
        if let Some(n) = self.count(O::Budget) {
            c.budget = Some(n);
        }
        if let Some(n) = self.count(O::StartLimit) {
            c.start_limit = Some(n);
        }
        if let Some(n) = self.count(O::MaxOrphaned) {
            c.max_orphaned = n;
        }
        if let Some(n) = self.count(O::MaxReservations) {
            c.max_reservations = n;
        }
        if let Some(Value::Bool(b)) = self.get(O::CancelOnOverrun) {
            c.cancel_on_overrun = b;
        }
        if let Some(d) = self.duration(O::MinServiceTime) {
            c.min_service_time = d;
        }
        if let Some(d) = self.duration(O::QueueDelayTarget) {
            c.queue_delay_target = d;
        }
        if let Some(d) = self.duration(O::QueueDelayInterval) {
            c.queue_delay_interval = d;
        }
        if let Some(Value::Bool(b)) = self.get(O::AdaptiveLifo) {
            c.adaptive_lifo = b;
        }
        if let Some(d) = self.duration(O::ShedLagThreshold) {
            c.shed_lag_threshold = d;
        }
        if let Some(x) = self.number(O::ShedCpuThreshold) {
            c.shed_cpu_threshold = x;
        }
        if let Some(n) = self.count(O::CriticalPriority) {
            c.critical_priority = n as u8;
        }
        if let Some(n) = self.count(O::MaxQueuedCost) {
            c.max_queued_cost = Some(n);
        }
        if let Some(Value::Choice(s)) = self.get(O::Observe) {
            c.observe = crate::observe::Observe::parse(s).unwrap_or_default();
        }
        if self.adaptive == Part::On {
            let mut a = AdaptiveConfig::for_max_concurrent(c.max_concurrent);
            // Not given: start at max_limit (whatever max_limit ends up being).
            a.initial_limit = self.count(O::AdaptiveInitialLimit).unwrap_or(0);
            if let Some(Value::Choice(s)) = self.get(O::AdaptiveAlgorithm) {
                a.algorithm = Algorithm::parse(s).unwrap_or_default();
            }
            macro_rules! set {
                ($($field:ident: $get:ident($id:ident) $(as $conv:expr)?;)*) => {
                    $(if let Some(v) = self.$get(O::$id) { a.$field = set!(@conv v $(, $conv)?); })*
                };
                (@conv $v:ident) => { $v };
                (@conv $v:ident, $conv:expr) => { $conv($v) };
            }
            set! {
                min_limit: count(AdaptiveMinLimit);
                max_limit: count(AdaptiveMaxLimit);
                increase_step: count(AdaptiveIncreaseStep);
                decrease_ratio: number(AdaptiveDecreaseRatio);
                smoothing: number(AdaptiveSmoothing);
                rtt_tolerance: number(AdaptiveRttTolerance);
                long_window: count(AdaptiveLongWindow);
                queue_size: count(AdaptiveQueueSize);
                target_latency_ns: duration(AdaptiveTargetLatency)
                    as |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            }
            c.resilience.adaptive = Some(a);
        }
        if self.breaker == Part::On {
            let mut b = BreakerConfig::DEFAULT;
            let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
            macro_rules! set {
                ($($field:ident: $get:ident($id:ident) $(as $conv:expr)?;)*) => {
                    $(if let Some(v) = self.$get(O::$id) { b.$field = set!(@conv v $(, $conv)?); })*
                };
                (@conv $v:ident) => { $v };
                (@conv $v:ident, $conv:expr) => { $conv($v) };
            }
            set! {
                failure_threshold: count(BreakerFailureThreshold) as small;
                error_rate_threshold: number(BreakerErrorRateThreshold);
                error_rate_window: duration(BreakerErrorRateWindow);
                error_rate_buckets: count(BreakerErrorRateBuckets) as small;
                volume_threshold: count(BreakerVolumeThreshold) as small;
                open_duration: duration(BreakerOpenDuration);
                half_open_max_calls: count(BreakerHalfOpenMaxCalls) as small;
                half_open_timeout: duration(BreakerHalfOpenTimeout);
            }
            c.resilience.breaker = Some(b);
        }
        if let Some(d) = self.duration(O::CallTimeout) {
            c.resilience.call_timeout = (d != Duration::MAX).then_some(d);
        }
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_merge_key_by_key() {
        let mut d = PartialConfig::new();
        d.set(OptionId::MaxConcurrent, Value::Count(8)).unwrap();
        d.set_part(Section::Adaptive, Part::On);
        d.set(OptionId::AdaptiveMinLimit, Value::Count(2)).unwrap();
        d.set(
            OptionId::CallTimeout,
            Value::Duration(Duration::from_secs(2)),
        )
        .unwrap();
        // An override that only raises the ceiling keeps the adaptive part and its min_limit.
        let mut o = PartialConfig::new();
        o.set(OptionId::MaxConcurrent, Value::Count(20)).unwrap();
        let c = o.merged_over(&d).to_config().unwrap();
        let a = c.resilience.adaptive.unwrap();
        assert_eq!((c.max_concurrent, a.min_limit, a.max_limit), (20, 2, 20));
        assert_eq!(c.resilience.call_timeout, Some(Duration::from_secs(2)));
        // `resilience: None` in an override: a plain bulkhead for that key.
        let mut plain = PartialConfig::new();
        plain.set_part(Section::Resilience, Part::Off);
        assert!(
            plain
                .merged_over(&d)
                .to_config()
                .unwrap()
                .resilience
                .is_off()
        );
        // A part turned off drops the defaults' options of that part.
        let mut no_adaptive = PartialConfig::new();
        no_adaptive.set_part(Section::Adaptive, Part::Off);
        let c = no_adaptive.merged_over(&d).to_config().unwrap();
        assert!(c.resilience.adaptive.is_none() && c.resilience.call_timeout.is_some());
    }

    #[test]
    fn null_is_not_given_except_for_parts_and_call_timeout() {
        let mut d = PartialConfig::new();
        d.set(OptionId::MaxConcurrent, Value::Count(8)).unwrap();
        d.set(
            OptionId::QueueTimeout,
            Value::Duration(Duration::from_secs(1)),
        )
        .unwrap();
        d.set_part(Section::Breaker, Part::On);
        d.set(OptionId::BreakerFailureThreshold, Value::Count(3))
            .unwrap();
        d.set(
            OptionId::CallTimeout,
            Value::Duration(Duration::from_secs(2)),
        )
        .unwrap();
        // Null options inherit; a null call_timeout and a null part turn them off.
        let mut o = PartialConfig::new();
        for id in [
            OptionId::MaxConcurrent,
            OptionId::QueueTimeout,
            OptionId::BreakerFailureThreshold,
        ] {
            o.set_null(id);
        }
        let c = o.merged_over(&d).to_config().unwrap();
        assert_eq!(c.max_concurrent, 8);
        assert_eq!(c.queue_timeout, Duration::from_secs(1), "not infinite");
        assert_eq!(c.resilience.breaker.unwrap().failure_threshold, 3);
        assert_eq!(c.resilience.call_timeout, Some(Duration::from_secs(2)));
        o.set_null(OptionId::CallTimeout);
        o.set_null_part(Section::Breaker);
        let c = o.merged_over(&d).to_config().unwrap();
        assert_eq!(c.resilience.call_timeout, None);
        assert_eq!(c.resilience.breaker, None);
        assert_eq!(c.max_concurrent, 8);
        // A null after a value in the same layer: not given.
        let mut p = PartialConfig::new();
        p.set(OptionId::MaxQueue, Value::Count(0)).unwrap();
        p.set_null(OptionId::MaxQueue);
        assert_eq!(p.get(OptionId::MaxQueue), None);
        // At the top level not given and off coincide; the default queue timeout is 30 s.
        let mut top = PartialConfig::new();
        top.set_null(OptionId::QueueTimeout);
        top.set_null(OptionId::CallTimeout);
        top.set_null_part(Section::Adaptive);
        top.set_null_part(Section::Bulkhead);
        assert_eq!(top.to_config().unwrap(), Config::DEFAULT);
        // `resilience` null: everything in it off.
        let mut plain = PartialConfig::new();
        plain.set_null_part(Section::Resilience);
        assert!(
            plain
                .merged_over(&d)
                .to_config()
                .unwrap()
                .resilience
                .is_off()
        );
    }

    #[test]
    fn values_are_checked_against_the_table() {
        let mut p = PartialConfig::new();
        assert_eq!(
            p.set(OptionId::MaxConcurrent, Value::Count(0)),
            Err(ConfigError::Option(OptionId::MaxConcurrent))
        );
        assert_eq!(
            p.set(OptionId::MaxConcurrent, Value::Bool(true)),
            Err(ConfigError::Option(OptionId::MaxConcurrent))
        );
        assert!(
            p.set(OptionId::QueueTimeout, Value::Duration(Duration::ZERO))
                .is_ok()
        );
        assert!(
            p.set(OptionId::QueueTimeout, Value::Duration(Duration::MAX))
                .is_ok()
        );
        assert!(
            p.set(OptionId::CallTimeout, Value::Duration(Duration::ZERO))
                .is_err()
        );
        assert!(
            p.set(OptionId::AdaptiveDecreaseRatio, Value::Number(1.0))
                .is_err()
        );
        assert!(
            p.set(OptionId::AdaptiveRttTolerance, Value::Number(f64::NAN))
                .is_err()
        );
        assert!(
            p.set(OptionId::AdaptiveAlgorithm, Value::Choice("vegas"))
                .is_err()
        );
        // Cross-option rules at build time.
        p.set_part(Section::Adaptive, Part::On);
        p.set(OptionId::MaxConcurrent, Value::Count(4)).unwrap();
        p.set(OptionId::AdaptiveMaxLimit, Value::Count(5)).unwrap();
        assert_eq!(
            p.to_config().unwrap_err().option_id(),
            Some(OptionId::AdaptiveMaxLimit)
        );
    }
}
