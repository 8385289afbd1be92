//! How a call reaches Redis (docs/design.md §16.4): a [`Transport`] runs the library's
//! functions on a connection the user owns (TLS, auth, Sentinel and Cluster are theirs). The
//! `redis` crate's connections implement it (`redis_transport`); a test or a binding may bring
//! its own.

use core::fmt;

use crate::{
    pool::Keys,
    protocol::{self, Field},
};

/// How a transport call failed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TransportErrorKind {
    /// The connection failed or timed out (Redis unreachable).
    Io,
    /// Redis answered with an error (a refused argument, a missing library, an ACL).
    Server,
    /// The reply was not what the library sends.
    Protocol,
}

/// A failed transport call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    /// What failed.
    pub kind: TransportErrorKind,
    /// The client's or the server's message.
    pub message: String,
}

impl TransportError {
    /// A protocol error with `message`.
    pub fn protocol(message: impl Into<String>) -> Self {
        TransportError {
            kind: TransportErrorKind::Protocol,
            message: message.into(),
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            TransportErrorKind::Io => "redis unreachable",
            TransportErrorKind::Server => "redis error",
            TransportErrorKind::Protocol => "redis protocol",
        };
        write!(f, "{what}: {}", self.message)
    }
}

impl std::error::Error for TransportError {}

impl From<protocol::ProtocolError> for TransportError {
    fn from(e: protocol::ProtocolError) -> Self {
        TransportError::protocol(e.0)
    }
}

/// A connection to the pool's Redis. Calls are blocking and never run concurrently on one
/// transport (the fleet bulkhead serializes them).
pub trait Transport: Send {
    /// Makes sure the `hullguard` library of [`LIB_VERSION`](crate::script::LIB_VERSION) is
    /// loaded where `keys` live (loads or replaces it otherwise).
    ///
    /// # Errors
    /// [`TransportError`].
    fn ensure_library(&mut self, keys: &Keys) -> Result<(), TransportError>;

    /// Runs `function` on `keys` with `argv`; the reply's integers (a scalar reply is one).
    /// `function` may also be [`CMD_WAIT`](crate::protocol::CMD_WAIT): then `WAIT <argv…>`,
    /// keys unused.
    ///
    /// # Errors
    /// [`TransportError`].
    fn call_ints(
        &mut self,
        function: &str,
        keys: &Keys,
        argv: &[String],
    ) -> Result<Vec<i64>, TransportError>;

    /// Runs the read-only `function` on `keys` with `argv`; the reply's fields.
    ///
    /// # Errors
    /// [`TransportError`].
    fn call_fields(
        &mut self,
        function: &str,
        keys: &Keys,
        argv: &[String],
    ) -> Result<Vec<Field>, TransportError>;
}
