//! The shared-memory protocol over a segment's words (docs/design.md §14.3): the lease ledger,
//! bakery tickets, doorbells, reclaim and expiry. Pure atomics, no system calls: production maps
//! the words from a file, loom models and unit tests box them.
//!
//! The ledger (REACH.md A2): every process owns one slot, and its slot's held words are the only
//! record of what it holds. Admission bumps the own word first and then sums every slot; over
//! the limit, it undoes. Safety: let Z be the admitted holder whose bump is last in the SeqCst
//! order; Z's sum is read after its bump, so after every other admitted bump, all still present
//! while their permits are held — Z saw at least their total, and it fit. A process that dies at
//! any step leaves everything it holds, tentative bumps included, in its own word, and one
//! generation-fenced CAS (to `generation + 1`, zero) reclaims it and fences every later release.

use hullguard_core::Reason;

use crate::{
    crash::{Step, point},
    layout::{self, LeaseState, NO_TICKET, h, s},
    sync::{AtomicU64, Ordering::SeqCst},
};

/// A segment's words failed a check: an invariant broken by a stray or hostile writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt {
    /// What was wrong.
    pub what: &'static str,
    /// The slot, if the fault is in one.
    pub slot: Option<usize>,
}

impl core::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.slot {
            Some(slot) => write!(f, "{} (slot {slot})", self.what),
            None => f.write_str(self.what),
        }
    }
}

/// The header checks of [`Segment::new`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// Not a hullguard segment.
    Magic,
    /// Another layout version or byte order.
    Version {
        /// The segment's layout version.
        found: u32,
    },
    /// The geometry or a configuration word is out of range.
    Header(&'static str),
    /// The mapping is shorter than the geometry says.
    Length {
        /// Bytes the header's geometry needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
}

impl core::fmt::Display for Invalid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Invalid::Magic => f.write_str("not a hullguard segment (bad magic)"),
            Invalid::Version { found } => write!(
                f,
                "layout version {found}, this library reads {}",
                layout::LAYOUT_VERSION
            ),
            Invalid::Header(what) => write!(f, "bad header: {what}"),
            Invalid::Length { need, have } => {
                write!(f, "{have} bytes, its header says {need}")
            }
        }
    }
}

/// The host-wide configuration a segment carries (fixed at creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentConfig {
    /// The host-wide permit limit, `1 ..= MAX_HOST_PERMITS`.
    pub max_concurrent: u64,
    /// The host-wide budget, `0` (none) `..= MAX_HOST_BUDGET`.
    pub budget: u64,
    /// Lease TTL, ms.
    pub lease_ttl_ms: u64,
    /// Heartbeat period, ms.
    pub beat_ms: u64,
    /// Liveness probe period, ms.
    pub probe_ms: u64,
}

/// One pass over the occupied slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scan {
    /// Σ permits held (saturating).
    pub permits: u64,
    /// Σ calls in flight.
    pub calls: u64,
    /// Σ budget units held.
    pub cost: u64,
    /// The smallest published ticket ([`NO_TICKET`] = none).
    pub min_ticket: u64,
    /// Its slot.
    pub min_slot: usize,
    /// Σ queued (informational).
    pub queued: u64,
}

impl Scan {
    /// Whether any process has a waiter published.
    pub fn has_waiters(&self) -> bool {
        self.min_ticket != NO_TICKET
    }
}

/// What an admission attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Admitted: the permits are in the own held word under the caller's generation.
    Granted,
    /// Not admitted: the reason a local bulkhead would give. `ring` names the slot whose
    /// waiter must be woken (an undone bump may have made it fail).
    Full {
        /// `concurrency_limit` or `budget_limit`.
        reason: Reason,
        /// The slot of the global head to ring, if any.
        ring: Option<usize>,
    },
    /// A head attempt, but another process holds the smallest ticket.
    NotHead,
    /// The caller's generation is not its slot's: its lease was expired or reclaimed.
    Stale,
}

/// What a reclaim or an expiry took from a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reclaimed {
    /// Whether the slot was owned (a lease was reclaimed).
    pub lease: bool,
    /// Calls that were in flight.
    pub calls: u64,
    /// Their permits.
    pub permits: u64,
    /// Their budget units.
    pub cost: u64,
}

/// A release that did not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseError {
    /// The permit's generation is not its slot's any more: the lease was expired or reclaimed
    /// (nothing changed).
    Stale,
    /// The slot's counts are below the permit's: the segment is corrupt.
    Corrupt(Corrupt),
}

/// Whether generation `generation` is older than `target` (24-bit wrapping order).
fn older(generation: u64, target: u64) -> bool {
    let d = target.wrapping_sub(generation) & layout::GEN_MASK;
    d != 0 && d < (1 << 23)
}

/// A view of a segment's words. Cheap to copy; every method is safe to call from any thread
/// of any process attached to the same words.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    words: &'a [AtomicU64],
    n_slots: usize,
}

impl<'a> Segment<'a> {
    /// Checks the header of `words` and returns a view: the magic, the layout version and byte
    /// order, the geometry against the length, and every configuration word's range.
    ///
    /// # Errors
    /// [`Invalid`], naming the first check that failed.
    pub fn new(words: &'a [AtomicU64]) -> Result<Self, Invalid> {
        let have = words.len() * 8;
        if words.len() < layout::HEADER_WORDS {
            return Err(Invalid::Length {
                need: layout::HEADER_WORDS * 8,
                have,
            });
        }
        if words[h::MAGIC].load(SeqCst) != layout::MAGIC {
            return Err(Invalid::Magic);
        }
        let version = words[h::VERSION].load(SeqCst);
        if version as u32 != layout::LAYOUT_VERSION
            || (version >> 32) as u32 != layout::ENDIAN_PROBE
        {
            return Err(Invalid::Version {
                found: version as u32,
            });
        }
        let geometry = words[h::GEOMETRY].load(SeqCst);
        let (header, slot, n_slots) = (
            (geometry & 0xffff) as usize,
            ((geometry >> 16) & 0xffff) as usize,
            (geometry >> 32) as u32,
        );
        if header != layout::HEADER_WORDS || slot != layout::SLOT_WORDS {
            return Err(Invalid::Header("header or slot size"));
        }
        if n_slots == 0 || n_slots > layout::MAX_SLOTS {
            return Err(Invalid::Header("slot count"));
        }
        if words[h::ABI].load(SeqCst) as u32 != layout::ABI_FLAGS {
            return Err(Invalid::Header("abi flags"));
        }
        let need = layout::segment_bytes(n_slots);
        if have < need {
            return Err(Invalid::Length { need, have });
        }
        let seg = Segment {
            words,
            n_slots: n_slots as usize,
        };
        let c = seg.config();
        if c.max_concurrent == 0 || c.max_concurrent > layout::MAX_HOST_PERMITS {
            return Err(Invalid::Header("max_concurrent"));
        }
        if c.budget > layout::MAX_HOST_BUDGET {
            return Err(Invalid::Header("budget"));
        }
        if c.beat_ms == 0 || c.probe_ms == 0 || c.lease_ttl_ms < c.beat_ms {
            return Err(Invalid::Header("lease timing"));
        }
        Ok(seg)
    }

    /// A view of words [`new`](Self::new) already checked, with the slot count it found (the
    /// caller's own copy: a writer that changes the header later cannot move an index).
    #[inline]
    pub fn trusted(words: &'a [AtomicU64], n_slots: usize) -> Self {
        let n_slots =
            n_slots.min(words.len().saturating_sub(layout::HEADER_WORDS) / layout::SLOT_WORDS);
        Segment { words, n_slots }
    }

    /// Writes a fresh segment image into `words` (all zero before; not yet shared).
    pub fn init(
        words: &'a [AtomicU64],
        n_slots: u32,
        config: &SegmentConfig,
        creator: [u8; 16],
        boot_id: [u8; 16],
        created_ms: u64,
        pid: u32,
    ) -> Result<Self, Invalid> {
        if words.len() * 8 < layout::segment_bytes(n_slots) {
            return Err(Invalid::Length {
                need: layout::segment_bytes(n_slots),
                have: words.len() * 8,
            });
        }
        let w = |i: usize, v: u64| words[i].store(v, SeqCst);
        w(h::MAGIC, layout::MAGIC);
        w(
            h::VERSION,
            layout::LAYOUT_VERSION as u64 | (layout::ENDIAN_PROBE as u64) << 32,
        );
        w(
            h::GEOMETRY,
            layout::HEADER_WORDS as u64
                | (layout::SLOT_WORDS as u64) << 16
                | (n_slots as u64) << 32,
        );
        w(h::ABI, layout::ABI_FLAGS as u64);
        for k in 0..2 {
            let chunk = |b: &[u8; 16]| u64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().unwrap());
            w(h::CREATOR + k, chunk(&creator));
            w(h::BOOT_ID + k, chunk(&boot_id));
        }
        w(h::CREATED_MS, created_ms);
        w(h::CREATOR_PID, pid as u64);
        w(h::MAX_CONCURRENT, config.max_concurrent);
        w(h::BUDGET, config.budget);
        w(h::LEASE_TTL_MS, config.lease_ttl_ms);
        w(h::BEAT_MS, config.beat_ms);
        w(h::PROBE_MS, config.probe_ms);
        for i in 0..n_slots as usize {
            let base = layout::HEADER_WORDS + i * layout::SLOT_WORDS;
            words[base + s::HEAD].store(NO_TICKET, SeqCst);
        }
        Segment::new(words)
    }

    /// The number of slots.
    pub fn n_slots(&self) -> usize {
        self.n_slots
    }

    /// A header word.
    pub fn header(&self, word: usize) -> &'a AtomicU64 {
        &self.words[word]
    }

    /// Word `word` of slot `slot` (`slot < n_slots`, `word < SLOT_WORDS`, else the header's
    /// scratch word: callers pass checked indices; this only keeps a bad one from panicking or
    /// touching a real slot).
    pub fn slot_word(&self, slot: usize, word: usize) -> &'a AtomicU64 {
        // Checked before the index is computed: `slot * SLOT_WORDS` overflows for a huge slot.
        (slot < self.n_slots && word < layout::SLOT_WORDS)
            .then(|| layout::HEADER_WORDS + slot * layout::SLOT_WORDS + word)
            .and_then(|i| self.words.get(i))
            .unwrap_or(&self.words[h::SCRATCH])
    }

    /// The configuration the header carries.
    pub fn config(&self) -> SegmentConfig {
        let r = |i: usize| self.words[i].load(SeqCst);
        SegmentConfig {
            max_concurrent: r(h::MAX_CONCURRENT),
            budget: r(h::BUDGET),
            lease_ttl_ms: r(h::LEASE_TTL_MS),
            beat_ms: r(h::BEAT_MS),
            probe_ms: r(h::PROBE_MS),
        }
    }

    /// The two limits, read for an admission (the rest of the configuration is not needed
    /// there).
    fn limits(&self) -> SegmentConfig {
        SegmentConfig {
            max_concurrent: self.words[h::MAX_CONCURRENT].load(SeqCst),
            budget: self.words[h::BUDGET].load(SeqCst),
            lease_ttl_ms: 0,
            beat_ms: 0,
            probe_ms: 0,
        }
    }

    /// The creator tag and the boot id written at creation.
    pub fn creator(&self) -> ([u8; 16], [u8; 16]) {
        let mut c = [0; 16];
        let mut b = [0; 16];
        for k in 0..2 {
            c[k * 8..k * 8 + 8]
                .copy_from_slice(&self.words[h::CREATOR + k].load(SeqCst).to_le_bytes());
            b[k * 8..k * 8 + 8]
                .copy_from_slice(&self.words[h::BOOT_ID + k].load(SeqCst).to_le_bytes());
        }
        (c, b)
    }

    /// Slots `[0, hwm)` may be occupied.
    pub fn hwm(&self) -> usize {
        (self.words[h::HWM].load(SeqCst) as usize).min(self.n_slots)
    }

    /// Whether the segment was marked poisoned.
    pub fn poisoned(&self) -> bool {
        self.words[h::FLAGS].load(SeqCst) & layout::POISONED != 0
    }

    /// Marks the segment poisoned: every process refuses to admit through it.
    pub fn poison(&self) {
        self.words[h::FLAGS].fetch_or(layout::POISONED, SeqCst);
    }

    /// Admissions ever, host-wide: the header's share plus every slot's.
    pub fn admitted_total(&self) -> u64 {
        (0..self.hwm()).fold(self.words[h::ADMITTED].load(SeqCst), |n, i| {
            n.saturating_add(self.slot_word(i, s::ADMITTED).load(SeqCst))
        })
    }

    /// Adds `n` to a header counter.
    pub fn count(&self, word: usize, n: u64) {
        if n != 0 {
            self.words[word].fetch_add(n, SeqCst);
        }
    }

    /// A slot's lease.
    ///
    /// # Errors
    /// [`Corrupt`] if the word does not decode.
    pub fn lease_of(&self, slot: usize) -> Result<(LeaseState, u64), Corrupt> {
        layout::decode_lease(self.slot_word(slot, s::LEASE).load(SeqCst)).ok_or(Corrupt {
            what: "lease word",
            slot: Some(slot),
        })
    }

    /// Sums every occupied slot and finds the smallest published ticket.
    pub fn scan(&self) -> Scan {
        let mut out = Scan {
            min_ticket: NO_TICKET,
            ..Scan::default()
        };
        for i in 0..self.hwm() {
            let (_, calls, permits) = layout::decode_held(self.slot_word(i, s::HELD).load(SeqCst));
            out.permits = out.permits.saturating_add(permits);
            out.calls = out.calls.saturating_add(calls);
            let (_, units) = layout::decode_cost(self.slot_word(i, s::COST).load(SeqCst));
            out.cost = out.cost.saturating_add(units);
            let t = self.slot_word(i, s::HEAD).load(SeqCst);
            if t < out.min_ticket {
                out.min_ticket = t;
                out.min_slot = i;
            }
            out.queued = out
                .queued
                .saturating_add(self.slot_word(i, s::QUEUED).load(SeqCst) & 0xffff_ffff);
        }
        out
    }

    /// The admission path's pass over the occupied slots: Σ permits, Σ calls, Σ cost (only
    /// `with_cost`: a segment without a budget never reads the cost words) and the smallest
    /// ticket; not the informational `queued` ([`scan`](Self::scan) has everything).
    #[inline]
    fn lean_scan(&self, slot: usize, with_cost: bool) -> Scan {
        let mut out = Scan {
            min_ticket: NO_TICKET,
            ..Scan::default()
        };
        // The own slot always counts, whatever `hwm` says (a stray writer may lower it).
        let n = self.hwm().max(slot.saturating_add(1)).min(self.n_slots);
        let base = layout::HEADER_WORDS;
        let Some(words) = self.words.get(base..base + n * layout::SLOT_WORDS) else {
            return self.scan();
        };
        for (i, w) in words.chunks_exact(layout::SLOT_WORDS).enumerate() {
            let (_, calls, permits) = layout::decode_held(w[s::HELD].load(SeqCst));
            out.permits = out.permits.saturating_add(permits);
            out.calls = out.calls.saturating_add(calls);
            if with_cost {
                let (_, units) = layout::decode_cost(w[s::COST].load(SeqCst));
                out.cost = out.cost.saturating_add(units);
            }
            let t = w[s::HEAD].load(SeqCst);
            if t < out.min_ticket {
                out.min_ticket = t;
                out.min_slot = i;
            }
        }
        out
    }

    /// The slot holding the smallest published ticket, if any (one word per slot: what a
    /// release or a withdrawn ticket rings).
    #[inline]
    pub fn head_slot(&self) -> Option<usize> {
        let mut min = NO_TICKET;
        let mut slot = None;
        for i in 0..self.hwm() {
            let t = self.slot_word(i, s::HEAD).load(SeqCst);
            if t < min {
                min = t;
                slot = Some(i);
            }
        }
        slot
    }

    /// One admission attempt of `weight` permits and `cost` units by the owner of `slot` under
    /// generation `generation`. A `head` attempt is the process's oldest waiter's: it may admit
    /// only while its slot holds the smallest ticket (it looks first, then bumps and confirms).
    /// Any other attempt refuses while any ticket is published (no barging, I6): it bumps
    /// first and confirms with one pass — the sum fits and no ticket is published — or undoes
    /// (and names the head to ring: its own attempt may have failed on this tentative bump).
    #[inline]
    pub fn admit(&self, slot: usize, generation: u64, weight: u64, cost: u64, head: bool) -> Admit {
        if slot >= self.n_slots {
            return Admit::Stale; // no such slot: nobody's generation
        }
        let c = self.limits();
        let with_cost = c.budget != 0;
        if head {
            let first = self.lean_scan(slot, with_cost);
            if !first.has_waiters() || first.min_slot != slot {
                return Admit::NotHead;
            }
            if let Some(reason) = Self::over(&first, &c, weight, cost) {
                return Admit::Full { reason, ring: None };
            }
        }
        point(Step::AcquireBump);
        if self.bump(slot, generation, weight, cost).is_err() {
            return Admit::Stale;
        }
        point(Step::AcquireCheck);
        let second = self.lean_scan(slot, with_cost);
        let refused = match Self::over(&second, &c, 0, 0) {
            Some(reason) => Some(reason),
            None if !head && second.has_waiters() => Some(Reason::ConcurrencyLimit),
            None => None,
        };
        if let Some(reason) = refused {
            point(Step::AcquireUndo);
            let _ = self.release(slot, generation, weight, cost);
            // A refusal for waiters ahead is `concurrency_limit` whatever the sums say (I6).
            let reason = if !head && second.has_waiters() {
                Reason::ConcurrencyLimit
            } else {
                reason
            };
            // Looked up after the undo, not taken from the pass before it: a head that
            // published its ticket after that pass may have failed on this tentative bump and
            // gone to sleep; its ticket is visible now (SeqCst: its publish came before its
            // look, which came before this undo), so it is rung.
            let ring = self.head_slot();
            return Admit::Full { reason, ring };
        }
        Admit::Granted
    }

    fn over(scan: &Scan, c: &SegmentConfig, weight: u64, cost: u64) -> Option<Reason> {
        if scan.permits.saturating_add(weight) > c.max_concurrent {
            Some(Reason::ConcurrencyLimit)
        } else if c.budget != 0 && scan.cost.saturating_add(cost) > c.budget {
            Some(Reason::BudgetLimit)
        } else {
            None
        }
    }

    /// Adds one call of `weight` permits and `cost` units to the own slot, fenced by `generation`.
    #[inline]
    fn bump(
        &self,
        slot: usize,
        generation: u64,
        weight: u64,
        cost: u64,
    ) -> Result<(), ReleaseError> {
        let word = self.slot_word(slot, s::HELD);
        let mut cur = word.load(SeqCst);
        loop {
            let (g, calls, permits) = layout::decode_held(cur);
            if g != generation {
                return Err(ReleaseError::Stale);
            }
            if permits + weight > layout::MAX_HOST_PERMITS || calls + 1 > layout::MAX_HOST_PERMITS {
                return Err(ReleaseError::Corrupt(Corrupt {
                    what: "held word overflow",
                    slot: Some(slot),
                }));
            }
            match word.compare_exchange(
                cur,
                layout::held(g, calls + 1, permits + weight),
                SeqCst,
                SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        if cost == 0 {
            return Ok(());
        }
        let word = self.slot_word(slot, s::COST);
        let mut cur = word.load(SeqCst);
        loop {
            let (g, units) = layout::decode_cost(cur);
            if g != generation || units.saturating_add(cost) > layout::MAX_HOST_BUDGET {
                // Fenced between the two words: take the permits back (they are ours).
                let _ = self.sub_held(slot, generation, weight);
                return Err(ReleaseError::Stale);
            }
            match word.compare_exchange(cur, layout::cost(g, units + cost), SeqCst, SeqCst) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    #[inline]
    fn sub_held(&self, slot: usize, generation: u64, weight: u64) -> Result<(), ReleaseError> {
        let word = self.slot_word(slot, s::HELD);
        let mut cur = word.load(SeqCst);
        loop {
            let (g, calls, permits) = layout::decode_held(cur);
            if g != generation {
                return Err(ReleaseError::Stale);
            }
            if calls == 0 || permits < weight {
                return Err(ReleaseError::Corrupt(Corrupt {
                    what: "release below zero",
                    slot: Some(slot),
                }));
            }
            match word.compare_exchange(
                cur,
                layout::held(g, calls - 1, permits - weight),
                SeqCst,
                SeqCst,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Takes one call of `weight` permits and `cost` units back out of the own slot, fenced by
    /// the permit's generation `generation`.
    ///
    /// # Errors
    /// [`ReleaseError::Stale`] (nothing changed) when the slot's generation moved on.
    #[inline]
    pub fn release(
        &self,
        slot: usize,
        generation: u64,
        weight: u64,
        cost: u64,
    ) -> Result<(), ReleaseError> {
        point(Step::ReleaseHeld);
        self.sub_held(slot, generation, weight)?;
        if cost == 0 {
            return Ok(());
        }
        point(Step::ReleaseCost);
        let word = self.slot_word(slot, s::COST);
        let mut cur = word.load(SeqCst);
        loop {
            let (g, units) = layout::decode_cost(cur);
            if g != generation {
                // Expired between the two words: the expiry zeroed the units.
                return Ok(());
            }
            match word.compare_exchange(
                cur,
                layout::cost(g, units.saturating_sub(cost)),
                SeqCst,
                SeqCst,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Publishes `ticket` as the own slot's head ([`NO_TICKET`] = none).
    pub fn publish(&self, slot: usize, ticket: u64) {
        point(if ticket == NO_TICKET {
            Step::CancelUnpublish
        } else {
            Step::PublishHead
        });
        self.slot_word(slot, s::HEAD).store(ticket, SeqCst);
    }

    /// Takes the next global ticket.
    pub fn take_ticket(&self) -> u64 {
        point(Step::PublishTicket);
        self.words[h::NEXT_TICKET].fetch_add(1, SeqCst)
    }

    /// Sets the own slot's queued count (informational).
    pub fn set_queued(&self, slot: usize, queued: u64) {
        self.slot_word(slot, s::QUEUED).store(queued, SeqCst);
    }

    /// Bumps `slot`'s doorbell and returns the word: the caller then wakes its futex waiters.
    pub fn ring(&self, slot: usize) -> &'a AtomicU64 {
        let bell = self.slot_word(slot, s::BELL);
        bell.fetch_add(1, SeqCst);
        bell
    }

    /// Moves the held and cost words of `slot` to generation `target` with zero counts, if
    /// their generation is older; returns what they held. Idempotent, and forward only: a word
    /// already at `target` or newer is left alone.
    fn reset_words(&self, slot: usize, target: u64) -> Reclaimed {
        let mut out = Reclaimed::default();
        let word = self.slot_word(slot, s::HELD);
        let mut cur = word.load(SeqCst);
        loop {
            let (g, calls, permits) = layout::decode_held(cur);
            if !older(g, target) {
                break;
            }
            match word.compare_exchange(cur, layout::held(target, 0, 0), SeqCst, SeqCst) {
                Ok(_) => {
                    out.calls = calls;
                    out.permits = permits;
                    break;
                }
                Err(now) => cur = now,
            }
        }
        let word = self.slot_word(slot, s::COST);
        let mut cur = word.load(SeqCst);
        loop {
            let (g, units) = layout::decode_cost(cur);
            if !older(g, target) {
                break;
            }
            match word.compare_exchange(cur, layout::cost(target, 0), SeqCst, SeqCst) {
                Ok(_) => {
                    out.cost = units;
                    break;
                }
                Err(now) => cur = now,
            }
        }
        out
    }

    /// Claims `slot` for the caller, who holds its liveness lock; an owned slot (its owner
    /// dead: the lock was free) is reclaimed first. Returns the new generation.
    ///
    /// # Errors
    /// [`Corrupt`] if the lease word does not decode.
    pub fn claim(
        &self,
        slot: usize,
        pid: u64,
        start_ticks: u64,
        pidns: u64,
        now_ms: u64,
        lib: u64,
    ) -> Result<u64, Corrupt> {
        if self.lease_of(slot)?.0 != LeaseState::Free {
            self.reclaim(slot)?;
        }
        let (state, generation) = self.lease_of(slot)?;
        if state != LeaseState::Free {
            return Err(Corrupt {
                what: "slot not free after reclaim",
                slot: Some(slot),
            });
        }
        let target = layout::next_gen(generation);
        point(Step::ClaimWords);
        // Stored, not reset forward: the slot is free and its lock is ours, so nobody else
        // writes these words — and a stray word of a generation ahead of the lease must not
        // outlive the claim (its permits would count forever, every admit of the new owner
        // would be stale).
        self.slot_word(slot, s::HELD)
            .store(layout::held(target, 0, 0), SeqCst);
        self.slot_word(slot, s::COST)
            .store(layout::cost(target, 0), SeqCst);
        self.slot_word(slot, s::HEAD).store(NO_TICKET, SeqCst);
        self.slot_word(slot, s::QUEUED).store(0, SeqCst);
        self.slot_word(slot, s::BEAT).store(0, SeqCst);
        let admitted = self.slot_word(slot, s::ADMITTED).swap(0, SeqCst);
        self.count(h::ADMITTED, admitted);
        self.slot_word(slot, s::PID).store(pid, SeqCst);
        self.slot_word(slot, s::START_TICKS)
            .store(start_ticks, SeqCst);
        self.slot_word(slot, s::PIDNS).store(pidns, SeqCst);
        self.slot_word(slot, s::ATTACHED_MS).store(now_ms, SeqCst);
        self.slot_word(slot, s::LIB).store(lib, SeqCst);
        point(Step::ClaimLease);
        self.words[h::HWM].fetch_max((slot as u64).saturating_add(1), SeqCst);
        self.slot_word(slot, s::LEASE)
            .compare_exchange(
                layout::lease(LeaseState::Free, generation),
                layout::lease(LeaseState::Active, target),
                SeqCst,
                SeqCst,
            )
            .map_err(|_| Corrupt {
                what: "lease changed under its lock",
                slot: Some(slot),
            })?;
        Ok(target)
    }

    /// Reclaims `slot`, whose owner is dead (the caller holds its liveness lock): marks it
    /// reclaiming, zeroes its words under the next generation (fencing every release of the
    /// dead owner's permits), clears its ticket and frees it. Every step is idempotent: a reaper
    /// that dies midway leaves a state the next one finishes.
    ///
    /// # Errors
    /// [`Corrupt`] if the lease word does not decode.
    pub fn reclaim(&self, slot: usize) -> Result<Reclaimed, Corrupt> {
        let lease = self.slot_word(slot, s::LEASE);
        let generation = loop {
            let (state, generation) = self.lease_of(slot)?;
            match state {
                LeaseState::Free => return Ok(Reclaimed::default()),
                LeaseState::Reclaiming => break generation,
                LeaseState::Active | LeaseState::Expired => {
                    point(Step::ReclaimLease);
                    // An observer may expire the slot at the same moment: retry from its state.
                    if lease
                        .compare_exchange(
                            layout::lease(state, generation),
                            layout::lease(LeaseState::Reclaiming, generation),
                            SeqCst,
                            SeqCst,
                        )
                        .is_ok()
                    {
                        break generation;
                    }
                }
            }
        };
        let target = layout::next_gen(generation);
        point(Step::ReclaimWords);
        let mut out = self.reset_words(slot, target);
        out.lease = true;
        point(Step::ReclaimHead);
        self.slot_word(slot, s::HEAD).store(NO_TICKET, SeqCst);
        self.slot_word(slot, s::QUEUED).store(0, SeqCst);
        point(Step::ReclaimFree);
        let _ = lease.compare_exchange(
            layout::lease(LeaseState::Reclaiming, generation),
            layout::lease(LeaseState::Free, target),
            SeqCst,
            SeqCst,
        );
        self.count(h::RECLAIMED_DEAD, 1);
        self.count(h::ORPHANED, out.calls);
        self.count(h::RECLAIMED_PERMITS, out.permits);
        Ok(out)
    }

    /// Expires `slot`, seen `Active` under `generation` and silent for the lease TTL: marks it
    /// expired under the next generation and zeroes its words (its owner, stopped or hung, still
    /// holds the lock; when it resumes it re-arms, and its old permits' releases are stale).
    /// `None` if the lease moved on meanwhile.
    pub fn expire(&self, slot: usize, generation: u64) -> Option<Reclaimed> {
        point(Step::ExpireLease);
        let target = layout::next_gen(generation);
        self.slot_word(slot, s::LEASE)
            .compare_exchange(
                layout::lease(LeaseState::Active, generation),
                layout::lease(LeaseState::Expired, target),
                SeqCst,
                SeqCst,
            )
            .ok()?;
        point(Step::ExpireWords);
        let mut out = self.reset_words(slot, target);
        out.lease = true;
        self.slot_word(slot, s::HEAD).store(NO_TICKET, SeqCst);
        self.count(h::RECLAIMED_EXPIRED, 1);
        self.count(h::ORPHANED, out.calls);
        self.count(h::RECLAIMED_PERMITS, out.permits);
        Some(out)
    }

    /// Finishes the expiry of `slot`, seen `Expired` under `generation`, if the observer that
    /// began it died before zeroing its words or clearing its ticket: returns what it took, or
    /// `None` if there was nothing left to do (the usual case) or the lease moved on.
    pub fn finish_expiry(&self, slot: usize, generation: u64) -> Option<Reclaimed> {
        let seen = layout::lease(LeaseState::Expired, generation);
        let out = self.finish_interrupted(slot, seen, generation)?;
        if out.calls != 0 || out.permits != 0 || out.cost != 0 {
            self.count(h::RECLAIMED_EXPIRED, 1); // the observer died before counting it
        }
        Some(out)
    }

    /// Finishes, without its lock, the reclaim of `slot`, seen `Reclaiming` under `generation`
    /// while another process holds its lock: a reaper stopped (SIGSTOP, a frozen cgroup, a
    /// debugger) between marking it and zeroing its words would otherwise keep the dead owner's
    /// permits counted for as long as it stays stopped. `Reclaiming` means a reaper found the
    /// owner dead, so the words may be zeroed by anyone: forward only, to the generation that
    /// reaper moves them to (it finds nothing left to do when it resumes). Returns what it
    /// took, if anything.
    pub fn finish_reclaim(&self, slot: usize, generation: u64) -> Option<Reclaimed> {
        let seen = layout::lease(LeaseState::Reclaiming, generation);
        self.finish_interrupted(slot, seen, layout::next_gen(generation))
    }

    /// The common part of finishing an interrupted expiry or reclaim: while the lease is still
    /// `seen`, the words move forward to `target` (zeroed) and the ticket is cleared (only
    /// while the lease is still the one seen); what was taken is counted.
    fn finish_interrupted(&self, slot: usize, seen: u64, target: u64) -> Option<Reclaimed> {
        let lease = self.slot_word(slot, s::LEASE);
        if lease.load(SeqCst) != seen {
            return None;
        }
        let mut out = self.reset_words(slot, target);
        let head = self.slot_word(slot, s::HEAD);
        let ticket = head.load(SeqCst);
        let cleared = ticket != NO_TICKET
            && lease.load(SeqCst) == seen
            && head
                .compare_exchange(ticket, NO_TICKET, SeqCst, SeqCst)
                .is_ok();
        if !cleared && out == Reclaimed::default() {
            return None;
        }
        out.lease = true;
        self.count(h::ORPHANED, out.calls);
        self.count(h::RECLAIMED_PERMITS, out.permits);
        Some(out)
    }

    /// The owner of an expired `slot` takes it back under a new generation (every permit of
    /// the old one stays fenced). Returns the new generation; `None` if the slot is not expired.
    pub fn rearm(&self, slot: usize) -> Option<u64> {
        let (state, generation) = self.lease_of(slot).ok()?;
        if state != LeaseState::Expired {
            return None;
        }
        let target = layout::next_gen(generation);
        self.reset_words(slot, target);
        self.slot_word(slot, s::LEASE)
            .compare_exchange(
                layout::lease(LeaseState::Expired, generation),
                layout::lease(LeaseState::Active, target),
                SeqCst,
                SeqCst,
            )
            .ok()?;
        Some(target)
    }

    /// The owner frees its own slot on a clean detach (nothing held; its lock is dropped next).
    pub fn free(&self, slot: usize, generation: u64) {
        let target = layout::next_gen(generation);
        // Only if nothing is held at this instant, in one CAS: a bump of another thread that
        // lands before it makes it fail (the slot is then left to the others' probes, as a
        // leaked one is), and one after it finds the generation moved (stale). A check of the
        // word followed by a forward reset would wipe a permit admitted in between, its call
        // still running while the process finishes exiting.
        if self
            .slot_word(slot, s::HELD)
            .compare_exchange(
                layout::held(generation, 0, 0),
                layout::held(target, 0, 0),
                SeqCst,
                SeqCst,
            )
            .is_err()
        {
            return;
        }
        self.reset_words(slot, target);
        self.slot_word(slot, s::HEAD).store(NO_TICKET, SeqCst);
        let _ = self.slot_word(slot, s::LEASE).compare_exchange(
            layout::lease(LeaseState::Active, generation),
            layout::lease(LeaseState::Free, target),
            SeqCst,
            SeqCst,
        );
    }
}
