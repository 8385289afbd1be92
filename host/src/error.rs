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
    /// An asynchronous acquire started by the parent process before `fork`, polled in the
    /// child: refused, touching nothing (acquire again in this process).
    Foreign,
    /// `rm` of a segment live processes are attached to (without `force`).
    InUse {
        /// The file.
        path: PathBuf,
        /// The live processes: `pid 123 (slot 0), …`.
        holders: String,
    },
    /// Not admitted: the same rejection (reason, snapshot) a local bulkhead gives.
    Acquire(AcquireError),
}

impl HostError {
    /// What kind of segment-file problem this is, as every binding names it (Python
    /// `HostSegmentError.kind`, Node `err.kind`): `"io"`, `"permission"`, `"incompatible"`,
    /// `"mismatch"`, `"no_slot"`, `"poisoned"`, `"removed"`, `"in_use"`, `"foreign"`; `None` for a bad
    /// option and a rejection (those are the binding's argument errors and rejections).
    pub fn kind(&self) -> Option<&'static str> {
        Some(match self {
            HostError::Option { .. } | HostError::Acquire(_) => return None,
            HostError::Io { .. } => "io",
            HostError::Permission { .. } => "permission",
            HostError::Incompatible { .. } => "incompatible",
            HostError::Mismatch { .. } => "mismatch",
            HostError::NoSlot { .. } => "no_slot",
            HostError::Poisoned { .. } => "poisoned",
            HostError::Removed { .. } => "removed",
            HostError::InUse { .. } => "in_use",
            HostError::Foreign => "foreign",
        })
    }

    /// The segment file a segment-file problem is about.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            HostError::Io { path, .. }
            | HostError::Permission { path, .. }
            | HostError::Incompatible { path, .. }
            | HostError::Mismatch { path, .. }
            | HostError::NoSlot { path, .. }
            | HostError::Poisoned { path, .. }
            | HostError::Removed { path }
            | HostError::InUse { path, .. } => Some(path),
            HostError::Option { .. } | HostError::Acquire(_) | HostError::Foreign => None,
        }
    }

    /// The OS error number of a failed system call ([`HostError::Io`]).
    pub fn errno(&self) -> Option<i32> {
        match self {
            HostError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

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
            // `options`: the message names the option itself (an unknown or unsupported name).
            HostError::Option {
                option: "options",
                message,
            } => write!(f, "host bulkhead: {message}"),
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
                "{}: the segment's {option} is {segment}, this process asked for {requested} (ask for {segment}, take the segment's with on_mismatch=\"adopt\", or remove it with `{}` when no process uses it)",
                path.display(),
                rm_command(path)
            ),
            HostError::NoSlot { path, slots } => write!(
                f,
                "{}: all {slots} slots are held by live processes (raise `slots` when creating the segment)",
                path.display()
            ),
            HostError::Poisoned { path, what } => write!(
                f,
                "{}: the segment is poisoned ({what}); remove it with `{}` and restart its users",
                path.display(),
                rm_command(path)
            ),
            HostError::Removed { path } => write!(
                f,
                "{}: the segment file was removed while attached; this process no longer shares the host's limit",
                path.display()
            ),
            HostError::InUse { path, holders } => write!(
                f,
                "{}: in use by {holders}: stop them first, or remove it anyway with `--force` (`force`; they refuse from their next beat on)",
                path.display()
            ),
            HostError::Foreign => f.write_str(
                "this acquire was started by the parent process before fork: it is the parent's; acquire again in this process",
            ),
            HostError::Acquire(e) => fmt::Display::fmt(e, f),
        }
    }
}

/// `hullguard host rm NAME --dir DIR` for a segment file's path.
fn rm_command(path: &std::path::Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy())
        .unwrap_or_default();
    // `hullguard.<euid>.<name>`
    let name = file.splitn(3, '.').nth(2).unwrap_or(&file).to_string();
    match path.parent() {
        Some(dir) if dir != std::path::Path::new("/dev/shm") => {
            format!("hullguard host rm {name} --dir {}", dir.display())
        }
        _ => format!("hullguard host rm {name}"),
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
