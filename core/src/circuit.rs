//! The three states of a circuit breaker, as every layer spells them: the breaker's state
//! machine ([`crate::policy::breaker`]) moves between them, and the event stream
//! ([`crate::event`]) reports the moves.

use core::fmt;

/// The state of a breaker, as every layer spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CircuitState {
    /// Calls pass; outcomes are counted.
    Closed = 0,
    /// Calls fail fast with [`Open`](crate::policy::breaker::Open).
    Open = 1,
    /// Up to `half_open_max_calls` probes pass; one success closes, one failure re-opens.
    HalfOpen = 2,
}

impl CircuitState {
    /// `"closed"`, `"open"` or `"half_open"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }
}

impl fmt::Display for CircuitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
