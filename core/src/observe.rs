//! Observe (shadow) mode (docs/design.md §4.7): which of a bulkhead's dimensions are decided
//! and counted but not enforced. A shadowed dimension lets a request through when it is short
//! and counts the reason it would have given in `stats().observed_by_reason`; the enforced
//! dimensions are still checked (never switched off by a shadowed one: envoy PR#46390, C32).

use core::fmt;

/// Which dimensions observe mode lets through (`Config::observe`, `Bulkhead::set_observe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Observe {
    /// Every dimension is enforced (the default).
    #[default]
    Off,
    /// The permit limit is observed; the budget, if any, is enforced.
    Concurrency,
    /// The budget is observed; the permit limit is enforced. Needs a budget.
    Budget,
    /// Every dimension is observed: nothing is refused for being short (the kill switch,
    /// `close()`, the breaker and bad arguments still refuse).
    All,
}

impl Observe {
    /// The spellings, in every layer (`"off"`, `"concurrency"`, `"budget"`, `"all"`).
    pub const CHOICES: &'static [&'static str] = &["off", "concurrency", "budget", "all"];

    /// Its spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Observe::Off => "off",
            Observe::Concurrency => "concurrency",
            Observe::Budget => "budget",
            Observe::All => "all",
        }
    }

    /// The mode spelled `s`, if it is one of [`CHOICES`](Self::CHOICES).
    pub fn parse(s: &str) -> Option<Self> {
        [
            Observe::Off,
            Observe::Concurrency,
            Observe::Budget,
            Observe::All,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }

    /// Whether the permit limit is observed.
    pub const fn concurrency(self) -> bool {
        matches!(self, Observe::Concurrency | Observe::All)
    }

    /// Whether the budget is observed.
    pub const fn budget(self) -> bool {
        matches!(self, Observe::Budget | Observe::All)
    }

    /// The mode observing exactly these dimensions.
    pub const fn of(concurrency: bool, budget: bool) -> Self {
        match (concurrency, budget) {
            (false, false) => Observe::Off,
            (true, false) => Observe::Concurrency,
            (false, true) => Observe::Budget,
            (true, true) => Observe::All,
        }
    }
}

impl fmt::Display for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
