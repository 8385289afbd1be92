//! A fleet bulkhead's errors (docs/design.md §16.6).

use core::fmt;

use hullguard_core::{AcquireError, ConfigError};

use crate::{pool::NameError, transport::TransportError};

/// Why a fleet bulkhead operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum FleetError {
    /// An option is unknown, not supported fleet-wide, of the wrong kind or out of range.
    Option {
        /// The option's name.
        option: &'static str,
        /// What is wrong, with the allowed range.
        message: String,
    },
    /// A pool name or holder id is malformed.
    Name(NameError),
    /// The local core refused its configuration.
    Config(ConfigError),
    /// Redis could not be reached, refused the call, or answered something unexpected.
    Transport(TransportError),
    /// Admission refused (`concurrency_limit` with the bound `fleet_lease` when the block is
    /// empty), or an invalid argument.
    Acquire(AcquireError),
    /// The bulkhead is closed.
    Closed,
}

impl FleetError {
    /// The option an [`Option`](Self::Option) error names.
    pub fn option(&self) -> Option<&'static str> {
        match self {
            FleetError::Option { option, .. } => Some(option),
            _ => None,
        }
    }
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::Option { option, message } => write!(f, "{option}: {message}"),
            FleetError::Name(e) => e.fmt(f),
            FleetError::Config(e) => e.fmt(f),
            FleetError::Transport(e) => e.fmt(f),
            FleetError::Acquire(e) => e.fmt(f),
            FleetError::Closed => f.write_str("the fleet bulkhead is closed"),
        }
    }
}

impl std::error::Error for FleetError {}

impl From<NameError> for FleetError {
    fn from(e: NameError) -> Self {
        FleetError::Name(e)
    }
}

impl From<TransportError> for FleetError {
    fn from(e: TransportError) -> Self {
        FleetError::Transport(e)
    }
}

impl From<AcquireError> for FleetError {
    fn from(e: AcquireError) -> Self {
        FleetError::Acquire(e)
    }
}
