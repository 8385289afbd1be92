//! The host bulkhead's errors (docs/design.md §14.6). Rejections are the core's
//! [`AcquireError`], with the same reasons as a local bulkhead; everything else names the file,
//! the option or the lease at fault.

use std::{fmt, io, path::PathBuf};

use hullguard_core::{AcquireError, Reason};

/// A host bulkhead could not be opened, or an operation on it failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum HostError {
    /// An option is unknown, unsupported by a host bulkhead, or out of range.
    Option {
        /// The option's name.
        option: &'static str,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A system call on the segment file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file belongs to another user or is world-writable.
    Permission {
        /// The file.
        path: PathBuf,
        /// Whose it is and its mode.
        message: String,
    },
    /// The file is not a segment this library reads (magic, layout version, byte order,
    /// geometry): fails closed, naming both sides.
    Incompatible {
        /// The file.
        path: PathBuf,
        /// What differs, and who wrote it.
        message: String,
    },
    /// The segment exists with another host-wide setting than the one asked for.
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The option.
        option: &'static str,
        /// The segment's value.
        segment: u64,
        /// The value asked for.
        requested: u64,
    },
    /// Every slot is taken by a live process.
    NoSlot {
        /// The file.
        path: PathBuf,
        /// Its slot count.
        slots: usize,
    },
    /// The segment broke an invariant (a stray or hostile writer): it was marked poisoned and
    /// nobody admits through it until it is removed (`hullguard host rm`) and recreated.
    Poisoned {
        /// The file.
        path: PathBuf,
        /// What was found.
        what: String,
    },
    /// The segment file was removed while attached: this process now holds a limit of its own.
    Removed {
        /// The file.
        path: PathBuf,
    },
    /// Not admitted: the same rejection (reason, snapshot) a local bulkhead gives.
    Acquire(AcquireError),
}

impl HostError {
    /// The rejection's reason, for [`HostError::Acquire`].
    pub fn reason(&self) -> Option<Reason> {
        match self {
            HostError::Acquire(e) => e.reason(),
            _ => None,
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Option { option, message } => {
                write!(f, "host bulkhead option `{option}`: {message}")
            }
            HostError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            HostError::Permission { path, message } => write!(f, "{}: {message}", path.display()),
            HostError::Incompatible { path, message } => write!(
                f,
                "{}: not a segment this library can attach: {message}",
                path.display()
            ),
            HostError::Mismatch {
                path,
                option,
                segment,
                requested,
            } => write!(
                f,
                "{}: the segment's {option} is {segment}, this process asked for {requested} (remove it with `hullguard host rm` when no process uses it, or ask for {segment})",
                path.display()
            ),
            HostError::NoSlot { path, slots } => write!(
                f,
                "{}: all {slots} slots are held by live processes (raise `slots` when creating the segment)",
                path.display()
            ),
            HostError::Poisoned { path, what } => write!(
                f,
                "{}: the segment is poisoned ({what}); remove it with `hullguard host rm` and restart its users",
                path.display()
            ),
            HostError::Removed { path } => write!(
                f,
                "{}: the segment file was removed while attached; this process no longer shares the host's limit",
                path.display()
            ),
            HostError::Acquire(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::Io { source, .. } => Some(source),
            HostError::Acquire(e) => Some(e),
            _ => None,
        }
    }
}

impl From<AcquireError> for HostError {
    fn from(e: AcquireError) -> Self {
        HostError::Acquire(e)
    }
}

/// A release that did not count (docs/design.md §14.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseError {
    /// The permit's lease was expired (its process stopped or hung past the lease TTL) or
    /// reclaimed: its permits were already given back, and this release changes nothing
    /// (C status `HG_STATUS_STALE_LEASE`, code `BULKHEAD_STALE_LEASE`).
    Stale,
    /// The permit was acquired by another process (a parent before `fork`): refused, nothing
    /// changed (C status `HG_STATUS_FOREIGN_LEASE`, code `BULKHEAD_FOREIGN_LEASE`).
    Foreign,
    /// The permit was already released.
    AlreadyReleased,
}

impl LeaseError {
    /// The bindings' error code.
    pub const fn code(self) -> &'static str {
        match self {
            LeaseError::Stale => "BULKHEAD_STALE_LEASE",
            LeaseError::Foreign => "BULKHEAD_FOREIGN_LEASE",
            LeaseError::AlreadyReleased => "BULKHEAD_ALREADY_RELEASED",
        }
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseError::Stale => "stale lease: the permit's lease expired or was reclaimed before this release; its permits were already returned, nothing was released twice",
            LeaseError::Foreign => "foreign lease: the permit belongs to another process (acquired before fork); nothing was released",
            LeaseError::AlreadyReleased => "the permit was already released",
        })
    }
}

impl std::error::Error for LeaseError {}
