//! Layout v1 of a host segment (docs/design.md §14.2): a flat array of 64-bit words, addressed
//! by offsets only. Page 0 is the header; slot *i* (one per attached process) is
//! [`SLOT_WORDS`] words (two cache lines) at `HEADER_WORDS + i * SLOT_WORDS`.
//!
//! Every word is read and written atomically; everything read from a segment is untrusted
//! (another process, a stray writer or a hostile user may have written it), so each decoder here
//! is total: it never panics and reports what does not decode.

/// `"HGSHM\0\0\x01"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"HGSHM\0\0\x01");
/// The layout this library reads and writes. A segment of another version is refused, never
/// reinterpreted.
pub const LAYOUT_VERSION: u32 = 1;
/// Written as `0x01020304`: a segment written by a machine of the other byte order reads back
/// differently and is refused.
pub const ENDIAN_PROBE: u32 = 0x0102_0304;
/// Header words (4096 bytes).
pub const HEADER_WORDS: usize = 512;
/// Words per slot (128 bytes: two cache lines).
pub const SLOT_WORDS: usize = 16;
/// The most slots a segment may have.
pub const MAX_SLOTS: u32 = 4096;
/// The default slot count (processes that may attach at once).
pub const DEFAULT_SLOTS: u32 = 256;
/// The largest host limit: a slot's permits field is 20 bits.
pub const MAX_HOST_PERMITS: u64 = (1 << 20) - 1;
/// The largest host budget: a slot's cost field is 40 bits.
pub const MAX_HOST_BUDGET: u64 = (1 << 40) - 1;
/// Reasons the header counts rejections for (the core has `Reason::COUNT` ≤ this).
pub const REASON_WORDS: usize = 16;
/// ABI flags this library needs: 64-bit lock-free atomics, futex doorbells, OFD liveness locks.
pub const ABI_FLAGS: u32 = 0b111;

/// The byte the OFD liveness lock of slot `i` covers (locks are advisory: they never touch the
/// data, so the lock range is the slot's index within the file's first page).
pub const fn lock_byte(slot: usize) -> i64 {
    slot as i64
}

/// The size in bytes of a segment of `n_slots` slots.
pub const fn segment_bytes(n_slots: u32) -> usize {
    (HEADER_WORDS + n_slots as usize * SLOT_WORDS) * 8
}

/// Header word offsets.
pub mod h {
    /// [`MAGIC`](super::MAGIC).
    pub const MAGIC: usize = 0;
    /// `layout_version` (low 32 bits) | `endian_probe << 32`.
    pub const VERSION: usize = 1;
    /// `header_words` (bits 0..16) | `slot_words << 16` | `n_slots << 32`.
    pub const GEOMETRY: usize = 2;
    /// ABI flags.
    pub const ABI: usize = 3;
    /// 16 bytes: the creating library (`"rust 0.1.0"`, `"py 0.1.0"`), NUL-padded.
    pub const CREATOR: usize = 4;
    /// 16 bytes: the kernel boot id at creation.
    pub const BOOT_ID: usize = 6;
    /// Creation time, ms since the Unix epoch (diagnostics only).
    pub const CREATED_MS: usize = 8;
    /// The creating process's pid (diagnostics only).
    pub const CREATOR_PID: usize = 9;
    /// `max_concurrent`: the host-wide permit limit.
    pub const MAX_CONCURRENT: usize = 16;
    /// The host-wide budget (0 = none).
    pub const BUDGET: usize = 17;
    /// Lease TTL, ms.
    pub const LEASE_TTL_MS: usize = 18;
    /// Heartbeat period, ms.
    pub const BEAT_MS: usize = 19;
    /// Liveness probe period, ms.
    pub const PROBE_MS: usize = 20;
    /// Flags: [`POISONED`](super::POISONED).
    pub const FLAGS: usize = 21;
    /// The global arrival counter: bakery tickets (own cache line).
    pub const NEXT_TICKET: usize = 32;
    /// One past the highest slot ever claimed: scanners read `[0, hwm)` (own cache line).
    pub const HWM: usize = 40;
    /// Admissions of slots since reclaimed or freed (each slot counts its own in
    /// `s::ADMITTED`; the total is this plus every slot's). Counters, not authority.
    pub const ADMITTED: usize = 48;
    /// Rejections per reason (`REASON_WORDS` words).
    pub const REJECTED: usize = 49;
    /// Slots reclaimed from dead processes.
    pub const RECLAIMED_DEAD: usize = 65;
    /// Slots expired (a stopped or hung owner's lease TTL passed).
    pub const RECLAIMED_EXPIRED: usize = 66;
    /// Releases refused `stale_lease`.
    pub const STALE_RELEASES: usize = 67;
    /// Releases refused `foreign_lease`.
    pub const FOREIGN_RELEASES: usize = 68;
    /// Calls that were in flight when their lease was reclaimed or expired.
    pub const ORPHANED: usize = 69;
    /// Permits reclaimed from dead or expired slots.
    pub const RECLAIMED_PERMITS: usize = 70;
    /// Waits that ended in a grant, their total and longest wait (ns).
    pub const QUEUE_WAIT_COUNT: usize = 71;
    /// See [`QUEUE_WAIT_COUNT`].
    pub const QUEUE_WAIT_SUM_NS: usize = 72;
    /// See [`QUEUE_WAIT_COUNT`].
    pub const QUEUE_WAIT_MAX_NS: usize = 73;
    /// Those waits per power-of-two bucket of ns (`hullguard_core::stats::WAIT_BUCKETS` words,
    /// the core's buckets).
    pub const QUEUE_WAIT_HISTOGRAM: usize = 80;
    /// A word nothing reads: where an out-of-range slot index lands (never a real slot).
    pub const SCRATCH: usize = 511;
}

/// The header flag of a segment found inconsistent (a breach of an invariant): every process
/// refuses to admit through it until it is removed and recreated.
pub const POISONED: u64 = 1;

/// Slot word offsets (from the slot's first word).
pub mod s {
    /// `state` (bits 0..8) | `generation << 8` (24 bits).
    pub const LEASE: usize = 0;
    /// `permits` (bits 0..20) | `calls << 20` (20 bits) | `generation << 40`.
    pub const HELD: usize = 1;
    /// `cost` (bits 0..40) | `generation << 40`.
    pub const COST: usize = 2;
    /// The ticket of this process's oldest waiter; [`NO_TICKET`](super::NO_TICKET) = none.
    pub const HEAD: usize = 3;
    /// The doorbell: a futex on its low 32 bits, bumped before every wake.
    pub const BELL: usize = 4;
    /// Waiters queued in this process (informational).
    pub const QUEUED: usize = 5;
    /// The heartbeat counter (bumped by the owner's keeper thread).
    pub const BEAT: usize = 8;
    /// The owner's pid (in its own pid namespace; diagnostics only).
    pub const PID: usize = 9;
    /// The owner's start time in clock ticks since boot (`/proc/self/stat` field 22).
    pub const START_TICKS: usize = 10;
    /// The inode of the owner's pid namespace.
    pub const PIDNS: usize = 11;
    /// When the owner attached, ms since the Unix epoch.
    pub const ATTACHED_MS: usize = 12;
    /// 8 bytes: the owner's library tag (`"rust"`, `"py"`, `"node"`, `"c"`), NUL-padded.
    pub const LIB: usize = 13;
    /// Admissions by this slot's owners since the slot was last claimed (owner-written, off
    /// the hot line; folded into the header's `ADMITTED` at the next claim). A counter.
    pub const ADMITTED: usize = 14;
}

/// No ticket published.
pub const NO_TICKET: u64 = u64::MAX;

/// A slot's lease state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Nobody owns it.
    Free = 0,
    /// Owned by a live process.
    Active = 1,
    /// A reaper is reclaiming it (its owner is dead); the next reaper finishes the job.
    Reclaiming = 2,
    /// Its owner stopped beating for the lease TTL; the owner's byte lock is still held.
    Expired = 3,
}

/// Generations are 24 bits and wrap.
pub const GEN_MASK: u64 = (1 << 24) - 1;

/// The next generation.
pub const fn next_gen(generation: u64) -> u64 {
    generation.wrapping_add(1) & GEN_MASK
}

/// A lease word.
pub const fn lease(state: LeaseState, generation: u64) -> u64 {
    state as u64 | ((generation & GEN_MASK) << 8)
}

/// Decodes a lease word; `None` if its state is not one of the four or stray bits are set.
pub const fn decode_lease(word: u64) -> Option<(LeaseState, u64)> {
    if word >> 32 != 0 {
        return None;
    }
    let generation = (word >> 8) & GEN_MASK;
    match word & 0xff {
        0 => Some((LeaseState::Free, generation)),
        1 => Some((LeaseState::Active, generation)),
        2 => Some((LeaseState::Reclaiming, generation)),
        3 => Some((LeaseState::Expired, generation)),
        _ => None,
    }
}

const FIELD20: u64 = (1 << 20) - 1;
const FIELD40: u64 = (1 << 40) - 1;

/// A held word: `calls` calls holding `permits` permits under generation `generation`.
pub const fn held(generation: u64, calls: u64, permits: u64) -> u64 {
    ((generation & GEN_MASK) << 40) | ((calls & FIELD20) << 20) | (permits & FIELD20)
}

/// `(generation, calls, permits)` of a held word.
pub const fn decode_held(word: u64) -> (u64, u64, u64) {
    (word >> 40, (word >> 20) & FIELD20, word & FIELD20)
}

/// A cost word: `cost` budget units under generation `generation`.
pub const fn cost(generation: u64, units: u64) -> u64 {
    ((generation & GEN_MASK) << 40) | (units & FIELD40)
}

/// `(generation, units)` of a cost word.
pub const fn decode_cost(word: u64) -> (u64, u64) {
    (word >> 40, word & FIELD40)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        assert_eq!(decode_held(held(7, 3, 9)), (7, 3, 9));
        assert_eq!(
            decode_held(held(GEN_MASK, FIELD20, FIELD20)),
            (GEN_MASK, FIELD20, FIELD20)
        );
        assert_eq!(decode_cost(cost(5, FIELD40)), (5, FIELD40));
        assert_eq!(
            decode_lease(lease(LeaseState::Expired, 9)),
            Some((LeaseState::Expired, 9))
        );
        assert_eq!(decode_lease(4), None);
        assert_eq!(decode_lease(1 << 40), None);
        assert_eq!(next_gen(GEN_MASK), 0);
        assert_eq!(segment_bytes(256), 4096 + 256 * 128);
    }
}
