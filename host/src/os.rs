//! The Linux calls under the host bulkhead (docs/design.md §14.3): OFD byte locks for liveness,
//! futex doorbells, process identity, and the fork generation.

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd},
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

/// Tries to take the write lock on `byte` of the file with an open-file-description lock
/// (`F_OFD_SETLK`): held until released or until the last descriptor of that open file
/// description closes — at exit, on SIGKILL, on OOM kill — and never dropped by closing some
/// other descriptor of the file (the POSIX-lock trap). `Ok(false)`: someone else holds it.
pub fn try_lock_byte(fd: BorrowedFd<'_>, byte: i64) -> io::Result<bool> {
    set_lock(fd, byte, libc::F_WRLCK as libc::c_short)
}

/// Releases a lock taken with [`try_lock_byte`].
pub fn unlock_byte(fd: BorrowedFd<'_>, byte: i64) -> io::Result<()> {
    set_lock(fd, byte, libc::F_UNLCK as libc::c_short).map(|_| ())
}

fn set_lock(fd: BorrowedFd<'_>, byte: i64, kind: libc::c_short) -> io::Result<bool> {
    // SAFETY: flock is plain old data; zeroed is a valid value (l_pid must be 0 for OFD locks).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = byte;
    lock.l_len = 1;
    // SAFETY: fd is a live descriptor for the call's duration (BorrowedFd), and the lock
    // structure is a valid, initialised flock that outlives the call.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &mut lock) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// Waits on the futex in the low 32 bits of `word` while they still equal `expected`, at most
/// `timeout`. Returns on a wake, a timeout, a signal or a changed value (the caller re-checks
/// its condition in every case). Shared (not `FUTEX_PRIVATE`): it works across processes that
/// map the same file, whatever their namespaces.
pub fn futex_wait(word: &AtomicU64, expected: u64, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the address is a live, 8-aligned AtomicU64 (its low half on this little-endian
    // target is the futex word); the kernel only reads it and compares with `expected`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr() as *const u32,
            libc::FUTEX_WAIT,
            expected as u32,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every waiter on the futex in the low 32 bits of `word`.
pub fn futex_wake(word: &AtomicU64) {
    // SAFETY: as futex_wait: a live, aligned word; FUTEX_WAKE reads nothing but the address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr() as *const u32,
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// This process's start time in clock ticks since boot (`/proc/self/stat` field 22): with the
/// pid, it tells a reused pid from its first owner (C39). 0 if unreadable.
pub fn start_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0;
    };
    rest.split_whitespace()
        .nth(19)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// The inode of this process's pid namespace (0 if unreadable).
pub fn pidns_inode() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// The kernel's boot id (16 bytes of `/proc/sys/kernel/random/boot_id`; zeros if unreadable).
pub fn boot_id() -> [u8; 16] {
    let mut out = [0u8; 16];
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let hex: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        for (i, pair) in hex.chunks(2).take(16).enumerate() {
            let s = std::str::from_utf8(pair).unwrap_or("0");
            out[i] = u8::from_str_radix(s, 16).unwrap_or(0);
        }
    }
    out
}

/// Milliseconds since the Unix epoch (diagnostics only: never used to decide anything).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The fork generation: bumped in every child right after `fork()`. An attachment made under
/// another generation belongs to an ancestor: its slot, its lock and its permits are foreign
/// here.
static FORK_GEN: AtomicU64 = AtomicU64::new(0);

/// The current fork generation.
pub fn fork_gen() -> u64 {
    FORK_GEN.load(Ordering::Acquire)
}

/// Moves the fork generation on: called in a forked child, first thing (async-signal-safe).
pub fn bump_fork_gen() {
    FORK_GEN.fetch_add(1, Ordering::AcqRel);
}
