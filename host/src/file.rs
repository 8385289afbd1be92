//! A segment's file (docs/design.md §14.1): named `hullguard.<euid>.<name>` in `/dev/shm` or a
//! chosen directory, created atomically (a complete image is written to a temporary file, then
//! `link`ed into place: no half-initialised segment is ever visible), checked on attach (owner,
//! mode, then the header), mapped shared at its fixed size, never unlinked automatically.

use std::{
    fs::{File, OpenOptions},
    io,
    os::{
        fd::AsRawFd,
        unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt},
    },
    path::{Path, PathBuf},
    ptr::NonNull,
};

use crate::{
    error::HostError,
    layout, os,
    segment::{Segment, SegmentConfig},
    sync::AtomicU64,
};

/// A shared mapping of a whole segment file, unmapped on drop (an attachment's is never
/// dropped: attachments are process-wide and live as long as the process).
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: the mapping is memory shared by design; it is only accessed through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(file: &File, bytes: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of `bytes` bytes of an open file; the kernel picks the
        // address. The result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).ok_or_else(io::Error::last_os_error)?,
            words: bytes / 8,
        })
    }

    /// The words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is a live, page-aligned mapping of `words * 8` bytes that is never
        // unmapped while `self` lives; AtomicU64 has the size and alignment of u64 and every
        // bit pattern is valid; other processes write it only through atomics.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
    }

    /// Unmaps now (the same as dropping it).
    pub(crate) fn unmap(self) {
        drop(self);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once (drop runs once); every reference
        // into it borrows `self`, so none outlives this.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.words * 8);
        }
    }
}

/// How to create or attach a segment file.
#[derive(Debug, Clone)]
pub struct FileSpec {
    /// The directory.
    pub dir: PathBuf,
    /// The segment name (validated: `[A-Za-z0-9._-]`, 1 to 200 bytes, not starting with `.`).
    pub name: String,
    /// The mode a new file gets (set with `fchmod`, whatever the umask).
    pub mode: u32,
    /// Slots of a new segment.
    pub slots: u32,
    /// The configuration of a new segment.
    pub config: SegmentConfig,
    /// The creator tag written into a new segment.
    pub creator: [u8; 16],
}

/// The path of segment `name` in `dir` for the effective user.
pub fn path_of(dir: &Path, name: &str) -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    dir.join(format!("hullguard.{euid}.{name}"))
}

/// Checks a segment name.
pub fn check_name(name: &str) -> Result<(), HostError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(HostError::Option {
            option: "name",
            message: format!(
                "{name:?}: 1 to 200 characters of A-Z a-z 0-9 . _ -, not starting with '.'"
            ),
        })
    }
}

/// An open segment file and its mapping.
#[derive(Debug)]
pub struct Opened {
    /// The file (its open file description carries this process's liveness lock).
    pub file: File,
    /// The mapping.
    pub mapping: Mapping,
    /// The path.
    pub path: PathBuf,
}

/// Opens segment `spec.name`, creating it if absent.
///
/// # Errors
/// [`HostError::Io`] naming the path; [`HostError::Permission`] for a file of another owner or a
/// world-writable one; [`HostError::Incompatible`] for a file that is not a segment this library
/// reads.
pub fn open_or_create(spec: &FileSpec) -> Result<Opened, HostError> {
    check_name(&spec.name)?;
    let path = path_of(&spec.dir, &spec.name);
    for _ in 0..8 {
        match attach(&path) {
            Ok(opened) => return Ok(opened),
            Err(HostError::Io { ref source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match create(spec, &path) {
            Ok(Some(opened)) => return Ok(opened),
            Ok(None) => continue, // lost the race: attach the winner's
            Err(e) => return Err(e),
        }
    }
    Err(HostError::Io {
        path,
        source: io::Error::other("the segment kept appearing and disappearing"),
    })
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> HostError + '_ {
    move |source| HostError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Attaches an existing segment file.
///
/// # Errors
/// As [`open_or_create`]; `NotFound` if there is none.
pub fn attach(path: &Path) -> Result<Opened, HostError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err(path))?;
    let meta = file.metadata().map_err(io_err(path))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid && euid != 0 {
        return Err(HostError::Permission {
            path: path.to_path_buf(),
            message: format!(
                "owned by uid {}, this process runs as uid {euid}: a segment is only attached by its owner",
                meta.uid()
            ),
        });
    }
    if meta.mode() & 0o002 != 0 {
        return Err(HostError::Permission {
            path: path.to_path_buf(),
            message: format!("mode {:o} is world-writable", meta.mode() & 0o7777),
        });
    }
    let len = meta.len() as usize;
    if len < layout::HEADER_WORDS * 8 {
        return Err(HostError::Incompatible {
            path: path.to_path_buf(),
            message: format!("{len} bytes: shorter than a segment header"),
        });
    }
    let mapping = Mapping::map(&file, len).map_err(io_err(path))?;
    if let Err(e) = Segment::new(mapping.words()) {
        let (creator, _) = creator_of(mapping.words());
        mapping.unmap();
        return Err(HostError::Incompatible {
            path: path.to_path_buf(),
            message: format!("{e} (written by {creator}; this is {})", crate::LIBRARY),
        });
    }
    Ok(Opened {
        file,
        mapping,
        path: path.to_path_buf(),
    })
}

/// The creator tag of a header that may not validate (for the error message).
fn creator_of(words: &[AtomicU64]) -> (String, ()) {
    use crate::sync::Ordering::SeqCst;
    let mut bytes = Vec::with_capacity(16);
    for k in 0..2 {
        if let Some(w) = words.get(layout::h::CREATOR + k) {
            bytes.extend_from_slice(&w.load(SeqCst).to_le_bytes());
        }
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let tag = String::from_utf8_lossy(&bytes[..end]).into_owned();
    (
        if tag.is_empty() {
            "an unknown writer".into()
        } else {
            format!("{tag:?}")
        },
        (),
    )
}

fn create(spec: &FileSpec, path: &Path) -> Result<Option<Opened>, HostError> {
    if !spec.dir.is_dir() {
        return Err(HostError::Io {
            path: spec.dir.clone(),
            source: io::Error::new(
                io::ErrorKind::NotFound,
                "no such directory (option `dir`: the directory of the segment file)",
            ),
        });
    }
    let pid = std::process::id();
    let nonce = os::wall_ms() ^ (u64::from(pid) << 20);
    let tmp = spec
        .dir
        .join(format!(".hullguard.tmp.{}.{pid}.{nonce:x}", spec.name));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(spec.mode)
        .custom_flags(libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    let done = (|| {
        file.set_permissions(std::fs::Permissions::from_mode(spec.mode))?;
        let bytes = layout::segment_bytes(spec.slots);
        file.set_len(bytes as u64)?;
        let mapping = Mapping::map(&file, bytes)?;
        Segment::init(
            mapping.words(),
            spec.slots,
            &spec.config,
            spec.creator,
            os::boot_id(),
            os::wall_ms(),
            pid,
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
        Ok::<_, io::Error>(mapping)
    })();
    let mapping = match done {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(&tmp)(e));
        }
    };
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(Some(Opened {
            file,
            mapping,
            path: path.to_path_buf(),
        })),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            mapping.unmap();
            Ok(None)
        }
        Err(e) => {
            mapping.unmap();
            Err(io_err(path)(e))
        }
    }
}

/// Whether the file behind `file` has been unlinked (a `host rm` while attached).
pub fn unlinked(file: &File) -> bool {
    file.metadata().map(|m| m.nlink() == 0).unwrap_or(false)
}

/// A new open file description of the file open as `file` (not a `dup`: locks taken through
/// it are its own): opened again through `/proc/self/fd`, or by `path` if `/proc` is not there,
/// and checked to be the same inode.
///
/// # Errors
/// [`HostError::Io`] naming the path.
pub fn reopen(file: &File, path: &Path) -> Result<File, HostError> {
    let meta = file.metadata().map_err(io_err(path))?;
    let open = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(p)
    };
    let again = open(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))
        .or_else(|_| open(path))
        .map_err(io_err(path))?;
    let m = again.metadata().map_err(io_err(path))?;
    if (m.dev(), m.ino()) != (meta.dev(), meta.ino()) {
        return Err(HostError::Io {
            path: path.to_path_buf(),
            source: io::Error::other("the segment file was replaced while attaching"),
        });
    }
    Ok(again)
}
