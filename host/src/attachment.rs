//! One process's attachment to one segment (docs/design.md §14.3): its slot and generation,
//! its liveness lock, the local queue (a core [`Bulkhead`] of one permit: the right to be this
//! process's head), its published tickets, and the keeper thread that beats, probes the others
//! and expires the silent.
//!
//! Attachments are process-wide (one per segment file per process, shared by every handle and
//! thread) and live as long as the process: its slot is freed by its death (the lock drops and
//! any other process reclaims it), never by a handle's drop.

use std::{
    collections::{BTreeSet, HashMap},
    fs::File,
    os::{
        fd::{AsFd, AsRawFd},
        unix::fs::MetadataExt,
    },
    path::PathBuf,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::Waker,
    time::{Duration, Instant},
};

use crate::{
    error::HostError,
    file::{self, FileSpec, Mapping},
    layout::{self, LeaseState, NO_TICKET, h, s},
    os,
    segment::{Admit, Reclaimed, Segment},
};

/// A process's attachment.
#[derive(Debug)]
pub(crate) struct Attachment {
    mapping: Mapping,
    file: File,
    /// The descriptor that holds this process's liveness lock and takes the probe locks: its
    /// own open file description, never mapped (see `get`).
    lock: File,
    pub(crate) path: PathBuf,
    n_slots: usize,
    /// This process's slot.
    pub(crate) slot: usize,
    /// The slot's generation (moves on when the lease is re-armed after an expiry).
    generation: AtomicU64,
    /// The fork generation it was made in.
    pub(crate) fork_gen: u64,
    /// This process's waiting tickets; the smallest is published in the slot.
    pending: Mutex<BTreeSet<u64>>,
    /// Serialises re-arming and reaping in this process (one open file description holds every
    /// probe lock, so two threads of one process must not reclaim at once), and keeps the
    /// expiry observations: slot → (generation, beat, first seen).
    reaper: Mutex<HashMap<usize, (u64, u64, Instant)>>,
    pub(crate) removed: AtomicBool,
    /// Set by `free_at_exit` before it frees the slot.
    exiting: AtomicBool,
    /// The last time any thread of this process probed.
    last_probe: Mutex<Instant>,
    /// The wakers of this process's pending asynchronous acquires, woken by the keeper.
    wakers: Mutex<Wakers>,
    next_waker: AtomicU64,
}

/// Pending asynchronous acquires, by id.
#[derive(Debug, Default)]
struct Wakers {
    entries: HashMap<u64, Registration>,
    /// When the keeper plans to wake next (a sooner deadline rings it early).
    planned: Option<Instant>,
}

/// One pending asynchronous acquire.
#[derive(Debug)]
struct Registration {
    /// Its queue deadline.
    until: Option<Instant>,
    /// Its published ticket: withdrawn by the keeper when the deadline passes (its task may
    /// not run to do it: a blocked event loop must not hold the host's FIFO past its
    /// deadlines).
    ticket: Option<u64>,
    waker: Waker,
    /// Set while it is its handle's head, waiting for the host-wide turn.
    head: Option<HeadClaim>,
}

/// What the keeper needs to admit a head on its behalf — the host's handoff: a head whose
/// task is not polled (an event loop blocked, a Node isolate busy) must not hold every other
/// process's turn, so the keeper admits it when its turn comes (the future takes the grant at
/// its next poll, or a drop releases it) and withdraws its ticket when its deadline passes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadClaim {
    /// Permits wanted.
    pub(crate) weight: u64,
    /// Budget units wanted.
    pub(crate) cost: u64,
    /// Its published ticket.
    pub(crate) ticket: u64,
    /// Admitted by the keeper under this generation, not yet taken by the future.
    granted: Option<u64>,
    /// Its deadline passed while it waited: its ticket was withdrawn.
    expired: bool,
}

impl HeadClaim {
    /// A head waiting for `weight` permits and `cost` units under `ticket`.
    pub(crate) fn new(weight: u64, cost: u64, ticket: u64) -> Self {
        HeadClaim {
            weight,
            cost,
            ticket,
            granted: None,
            expired: false,
        }
    }
}

/// What a head's own attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadTurn {
    /// Admitted (by this attempt or by the keeper before it) under this generation.
    Granted(u64),
    /// Its deadline passed (the keeper withdrew its ticket).
    Expired,
    /// Not yet.
    Waiting,
}

/// The process-wide registry of attachments, by (device, inode, fork generation).
type Entry = (u64, u64, u64, &'static Attachment);
static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Entry>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

std::thread_local! {
    /// The registry, held by the forking thread across `fork()` (see `install_fork_handlers`).
    static HELD_ACROSS_FORK: core::cell::Cell<Option<MutexGuard<'static, Vec<Entry>>>> =
        const { core::cell::Cell::new(None) };
}

/// `fork()` with the registry held by no other thread: another thread inside `get` (the
/// registry locked, a liveness lock just taken on a fresh descriptor) would otherwise leave the
/// child a registry locked forever (its first attach hangs) and a liveness-lock descriptor it
/// does not know to close (the parent's slot then lives as long as the child).
fn install_fork_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: three extern "C" fns without arguments that never unwind; the child handler
        // only walks a Vec, closes descriptors and touches atomics (async-signal-safe).
        unsafe {
            libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        }
    });
}

extern "C" fn fork_prepare() {
    let guard = registry();
    HELD_ACROSS_FORK.with(|h| h.set(Some(guard)));
}

extern "C" fn fork_parent() {
    HELD_ACROSS_FORK.with(|h| drop(h.take()));
}

extern "C" fn fork_child() {
    HELD_ACROSS_FORK.with(|h| {
        if let Some(reg) = h.take() {
            let fork_gen = os::fork_gen();
            // This process's own attachments (an ancestor's were closed at its fork): their
            // liveness-lock descriptors must not keep this process's parent's slot alive.
            for &(_, _, g, a) in reg.iter() {
                if g == fork_gen {
                    // SAFETY: the descriptor of an attachment of the parent, inherited here;
                    // nothing in this child uses it after this (its attachment is foreign as
                    // soon as the generation moves, next).
                    unsafe {
                        libc::close(a.lock.as_raw_fd());
                    }
                }
            }
            os::bump_fork_gen();
            drop(reg);
        } else {
            os::bump_fork_gen();
        }
    });
}

impl Attachment {
    /// The attachment of this process to the segment `spec` names, made (segment created if
    /// absent, slot claimed, keeper started) on first use.
    pub(crate) fn get(spec: &FileSpec) -> Result<&'static Attachment, HostError> {
        install_fork_handlers();
        let fork_gen = os::fork_gen();
        let opened = file::open_or_create(spec)?;
        let meta = opened.file.metadata().map_err(|source| HostError::Io {
            path: opened.path.clone(),
            source,
        })?;
        let mut reg = registry();
        if let Some(&(_, _, _, a)) = reg
            .iter()
            .find(|e| e.0 == meta.dev() && e.1 == meta.ino() && e.2 == fork_gen)
        {
            opened.mapping.unmap(); // the extra descriptor closes with `opened.file`
            return Ok(a);
        }
        let seg = Segment::new(opened.mapping.words()).map_err(|e| HostError::Incompatible {
            path: opened.path.clone(),
            message: e.to_string(),
        })?;
        let n_slots = seg.n_slots();
        // The liveness lock lives on an open file description of its own that is never
        // mapped: a mapping holds a reference to the description it was made from, and an OFD
        // lock drops only with the last reference, so a forked child's inherited mapping would
        // keep this process's lock (and slot) alive for as long as the child lives, however
        // the child closes descriptors (C40). A forked child closes this one.
        let lock = file::reopen(&opened.file, &opened.path)?;
        let fd = lock.as_fd();
        let mut claimed = None;
        for i in 0..n_slots {
            if os::try_lock_byte(fd, layout::lock_byte(i)).map_err(|source| HostError::Io {
                path: opened.path.clone(),
                source,
            })? {
                claimed = Some(i);
                break;
            }
        }
        let Some(slot) = claimed else {
            return Err(HostError::NoSlot {
                path: opened.path,
                slots: n_slots,
            });
        };
        let pid = std::process::id();
        let mut lib = [0u8; 8];
        let tag = spec.creator.split(|&b| b == b' ').next().unwrap_or(b"rust");
        lib[..tag.len().min(8)].copy_from_slice(&tag[..tag.len().min(8)]);
        let generation = seg
            .claim(
                slot,
                u64::from(pid),
                os::start_ticks(pid),
                os::pidns_inode(),
                os::wall_ms(),
                u64::from_le_bytes(lib),
            )
            .map_err(|c| {
                seg.poison();
                HostError::Poisoned {
                    path: opened.path.clone(),
                    what: c.to_string(),
                }
            })?;

        let a: &'static Attachment = Box::leak(Box::new(Attachment {
            mapping: opened.mapping,
            file: opened.file,
            lock,
            path: opened.path,
            n_slots,
            slot,
            generation: AtomicU64::new(generation),
            fork_gen,
            pending: Mutex::new(BTreeSet::new()),
            reaper: Mutex::new(HashMap::new()),
            removed: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
            last_probe: Mutex::new(Instant::now()),
            wakers: Mutex::new(Wakers::default()),
            next_waker: AtomicU64::new(0),
        }));
        reg.push((meta.dev(), meta.ino(), fork_gen, a));
        drop(reg);
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        AT_EXIT.call_once(|| {
            // SAFETY: `free_at_exit` is an extern "C" fn without arguments that never unwinds.
            unsafe {
                libc::atexit(free_at_exit);
            }
        });
        a.reap();
        std::thread::Builder::new()
            .name("hullguard-host".into())
            .spawn(move || a.keep())
            .map_err(|source| HostError::Io {
                path: a.path.clone(),
                source,
            })?;
        Ok(a)
    }

    /// The segment (validated at attach; the slot count and the mapping length are this
    /// process's own copies, so a hostile writer cannot move an index out of bounds).
    #[inline]
    pub(crate) fn seg(&self) -> Segment<'_> {
        Segment::trusted(self.mapping.words(), self.n_slots)
    }

    /// The current generation.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether this attachment belongs to this process (not to a parent before `fork`).
    #[inline]
    pub(crate) fn is_own(&self) -> bool {
        self.fork_gen == os::fork_gen()
    }

    /// Rings `slot`'s doorbell and wakes its waiters.
    pub(crate) fn ring(&self, slot: usize) {
        os::futex_wake(self.seg().ring(slot));
    }

    /// Rings whoever holds the smallest ticket now, if anyone.
    #[inline]
    pub(crate) fn ring_head(&self) {
        if let Some(slot) = self.seg().head_slot() {
            self.ring(slot);
        }
    }

    /// One admission attempt; on a stale generation the lease is recovered (re-armed after an
    /// expiry) and the attempt retried once. `Ok(None)`: not admitted (the reason, if full).
    #[inline]
    pub(crate) fn admit(
        &self,
        weight: u64,
        cost: u64,
        head: bool,
    ) -> Result<Result<u64, Admit>, HostError> {
        self.check()?;
        for _ in 0..3 {
            let generation = self.generation();
            match self.seg().admit(self.slot, generation, weight, cost, head) {
                Admit::Granted => return Ok(Ok(generation)),
                Admit::Stale => self.recover()?,
                full @ Admit::Full { ring, .. } => {
                    if let Some(slot) = ring {
                        self.ring(slot);
                    }
                    return Ok(Err(full));
                }
                Admit::NotHead if head && self.lost_head() => self.republish(),
                Admit::NotHead => return Ok(Err(Admit::NotHead)),
            }
        }
        Ok(Err(Admit::Stale))
    }

    #[inline]
    fn check(&self) -> Result<(), HostError> {
        if self.seg().poisoned() {
            return Err(HostError::Poisoned {
                path: self.path.clone(),
                what: "marked poisoned by a process that found it inconsistent".into(),
            });
        }
        if self.removed.load(Ordering::Acquire) {
            return Err(HostError::Removed {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// The lease moved on under this process: re-arm it if it expired (a stop or a hang past
    /// the TTL), and republish this process's head ticket.
    fn recover(&self) -> Result<(), HostError> {
        let _guard = self.reaper.lock().unwrap_or_else(|p| p.into_inner());
        if self.exiting.load(Ordering::Acquire) {
            // This process freed its slot on its way out (`free_at_exit`): not a lost lease.
            return Err(HostError::Removed {
                path: self.path.clone(),
            });
        }
        let seg = self.seg();
        let (state, generation) = seg
            .lease_of(self.slot)
            .map_err(|c| self.poison(c.to_string()))?;
        match state {
            LeaseState::Active if generation == self.generation() => return Ok(()),
            LeaseState::Active => self.generation.store(generation, Ordering::Release), // another thread re-armed
            LeaseState::Expired => {
                if let Some(g) = seg.rearm(self.slot) {
                    self.generation.store(g, Ordering::Release);
                }
            }
            LeaseState::Free | LeaseState::Reclaiming => {
                return Err(self.poison(format!(
                    "slot {} of a live process was reclaimed (its liveness lock was lost)",
                    self.slot
                )));
            }
        }
        drop(_guard);
        self.republish();
        Ok(())
    }

    fn poison(&self, what: String) -> HostError {
        self.seg().poison();
        HostError::Poisoned {
            path: self.path.clone(),
            what,
        }
    }

    /// Takes a ticket and publishes this process's smallest.
    pub(crate) fn enqueue(&self) -> u64 {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let seg = self.seg();
        let t = seg.take_ticket();
        pending.insert(t);
        let min = pending.first().copied().unwrap_or(NO_TICKET);
        seg.set_queued(self.slot, pending.len() as u64);
        seg.publish(self.slot, min);
        t
    }

    /// Withdraws ticket `t` (granted, timed out or cancelled), publishes the next, and rings
    /// the global head (it may be someone else now).
    pub(crate) fn dequeue(&self, t: u64) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.remove(&t);
            let seg = self.seg();
            seg.set_queued(self.slot, pending.len() as u64);
            seg.publish(self.slot, pending.first().copied().unwrap_or(NO_TICKET));
        }
        self.ring_head();
    }

    /// Whether this process has waiters but its slot publishes none: an expiry (or the
    /// finishing of one) cleared the ticket just as this process re-armed and republished it.
    /// The head then republishes, or it would wait for a turn nobody can see.
    fn lost_head(&self) -> bool {
        let published = self
            .seg()
            .slot_word(self.slot, s::HEAD)
            .load(Ordering::SeqCst);
        published == NO_TICKET
            && !self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    fn republish(&self) {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let seg = self.seg();
        seg.set_queued(self.slot, pending.len() as u64);
        seg.publish(self.slot, pending.first().copied().unwrap_or(NO_TICKET));
    }

    /// The own doorbell word.
    pub(crate) fn bell(&self) -> &crate::sync::AtomicU64 {
        self.seg().slot_word(self.slot, s::BELL)
    }

    /// The probe period.
    pub(crate) fn probe_period(&self) -> Duration {
        Duration::from_millis(self.seg().config().probe_ms.max(1))
    }

    /// Probes now if nobody in this process has for a probe period (a waiter that waited that
    /// long probes itself rather than trust the keeper).
    pub(crate) fn probe_if_due(&self) -> bool {
        let due = {
            let mut last = self.last_probe.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if now.duration_since(*last) >= self.probe_period() {
                *last = now;
                true
            } else {
                false
            }
        };
        if due {
            self.reap();
        }
        due
    }

    /// One pass over the other slots: reclaims every slot whose owner is dead (its liveness
    /// lock is free) and expires every slot silent for the lease TTL. Returns the slots
    /// reclaimed or expired.
    pub(crate) fn reap(&self) -> usize {
        if !self.is_own() {
            // A parent's attachment seen from a forked child: its liveness-lock descriptor was
            // closed by the atfork handler and its number may name another file by now (a
            // probe through it would find every slot "dead" and reclaim live ones).
            return 0;
        }
        let mut observed = self.reaper.lock().unwrap_or_else(|p| p.into_inner());
        let seg = self.seg();
        let fd = self.lock.as_fd();
        let ttl = Duration::from_millis(seg.config().lease_ttl_ms);
        let mut done = 0;
        for i in 0..seg.hwm() {
            if i == self.slot {
                continue;
            }
            match probe_slot(seg, fd, i) {
                Probe::Free => {
                    observed.remove(&i);
                }
                Probe::Reclaimed => {
                    observed.remove(&i);
                    done += 1;
                }
                Probe::Alive(LeaseState::Active, generation) => {
                    let beat = seg.slot_word(i, s::BEAT).load(Ordering::SeqCst);
                    // Read after the beat: a silence is measured from a moment the beat was
                    // already what it is, never from before.
                    let now = Instant::now();
                    match observed.get(&i) {
                        Some(&(g, b, since)) if g == generation && b == beat => {
                            if now.duration_since(since) >= ttl
                                && seg.expire(i, generation).is_some()
                            {
                                observed.remove(&i);
                                // Its owner may be running after all, and have re-armed and
                                // republished its head's ticket just before the expiry
                                // cleared it: wake that head, which then republishes it
                                // (`lost_head`); nobody else would ring it.
                                self.ring(i);
                                done += 1;
                            }
                        }
                        _ => {
                            observed.insert(i, (generation, beat, now));
                        }
                    }
                }
                Probe::Alive(LeaseState::Expired, generation) => {
                    // An observer that died between marking the lease expired and zeroing
                    // its words left them counted (and its ticket published) for as long as
                    // the owner stays stopped: finish that expiry (idempotent).
                    if seg.finish_expiry(i, generation).is_some() {
                        self.ring(i); // as after an expiry
                        done += 1;
                    }
                }
                Probe::Alive(LeaseState::Reclaiming, generation) => {
                    // Its reaper holds the lock but may be stopped midway: finish the part
                    // that gives the dead owner's permits and ticket back (idempotent).
                    if seg.finish_reclaim(i, generation).is_some() {
                        done += 1;
                    }
                }
                Probe::Alive(..) => {}
            }
        }
        drop(observed);
        if done > 0 {
            self.ring_head();
        }
        done
    }

    /// A fresh id for [`register`](Self::register).
    pub(crate) fn waker_id(&self) -> u64 {
        self.next_waker.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers (or refreshes) the waker of a pending asynchronous acquire in its handle's
    /// queue: woken at `until`.
    pub(crate) fn register(
        &self,
        id: u64,
        until: Option<Instant>,
        ticket: Option<u64>,
        waker: &Waker,
    ) {
        let mut w = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        match w.entries.get_mut(&id) {
            Some(e) => {
                e.until = until;
                e.ticket = ticket;
                if !e.waker.will_wake(waker) {
                    e.waker = waker.clone();
                }
            }
            None => {
                w.entries.insert(
                    id,
                    Registration {
                        until,
                        ticket,
                        waker: waker.clone(),
                        head: None,
                    },
                );
            }
        }
        self.replan(w, until);
    }

    /// Rings the keeper if `until` is sooner than its planned wake-up.
    fn replan(&self, w: MutexGuard<'_, Wakers>, until: Option<Instant>) {
        let sooner = match (until, w.planned) {
            (Some(t), Some(p)) => t < p,
            (Some(_), None) => true,
            _ => false,
        };
        drop(w);
        if sooner {
            self.ring(self.slot); // the keeper re-plans its sleep
        }
    }

    /// A head's own attempt (its future polled): registers it as a head first (so a ring
    /// after the attempt wakes it, and the keeper may admit it on its behalf), then takes the
    /// keeper's grant if there is one, or tries. Serialised with the keeper's attempts by the
    /// registrations' lock: a head is admitted once.
    pub(crate) fn head_turn(
        &self,
        id: u64,
        until: Option<Instant>,
        claim: HeadClaim,
        waker: &Waker,
    ) -> Result<HeadTurn, HostError> {
        let mut w = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        let e = w.entries.entry(id).or_insert_with(|| Registration {
            until,
            ticket: Some(claim.ticket),
            waker: waker.clone(),
            head: None,
        });
        e.until = until;
        e.ticket = Some(claim.ticket);
        if !e.waker.will_wake(waker) {
            e.waker = waker.clone();
        }
        let head = e.head.get_or_insert(claim);
        if let Some(generation) = head.granted {
            w.entries.remove(&id);
            return Ok(HeadTurn::Granted(generation));
        }
        if head.expired {
            w.entries.remove(&id);
            return Ok(HeadTurn::Expired);
        }
        match self.admit(claim.weight, claim.cost, true) {
            Ok(Ok(generation)) => {
                w.entries.remove(&id);
                Ok(HeadTurn::Granted(generation))
            }
            Ok(Err(_)) => {
                self.replan(w, until);
                Ok(HeadTurn::Waiting)
            }
            Err(e) => {
                w.entries.remove(&id);
                Err(e)
            }
        }
    }

    /// Forgets a registration; a grant the keeper made for it and nobody took is released
    /// (the future was dropped: cancelled).
    pub(crate) fn unregister(&self, id: u64) {
        let gone = self
            .wakers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .remove(&id);
        if let Some(Registration {
            head:
                Some(HeadClaim {
                    granted: Some(generation),
                    weight,
                    cost,
                    ..
                }),
            ..
        }) = gone
        {
            if self
                .seg()
                .release(self.slot, generation, weight, cost)
                .is_ok()
            {
                self.ring_head();
            }
        }
    }

    /// Wakes the due registrations; when `heads`, first admits waiting heads on their behalf
    /// (the handoff) and wakes them; withdraws the tickets of heads whose deadline passed.
    /// Returns the next deadline.
    fn wake_due(&self, heads: bool) -> Option<Instant> {
        let now = Instant::now();
        let mut due = Vec::new();
        let mut withdrawn = Vec::new();
        let mut next: Option<Instant> = None;
        {
            let mut w = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
            for e in w.entries.values_mut() {
                let past = e.until.is_some_and(|t| t <= now);
                match e.head.as_mut() {
                    Some(h) if h.granted.is_none() && !h.expired => {
                        if past {
                            h.expired = true;
                            withdrawn.extend(e.ticket.take());
                            due.push(e.waker.clone());
                        } else if heads {
                            if let Ok(Ok(generation)) = self.admit(h.weight, h.cost, true) {
                                h.granted = Some(generation);
                                // Granted: its ticket is no longer a waiter's.
                                withdrawn.extend(e.ticket.take());
                            }
                            due.push(e.waker.clone());
                        }
                    }
                    Some(_) => due.push(e.waker.clone()), // granted or expired: not yet taken
                    None if past => {
                        withdrawn.extend(e.ticket.take());
                        due.push(e.waker.clone());
                    }
                    None => {}
                }
                if let Some(t) = e.until.filter(|t| *t > now) {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
        }
        for t in withdrawn {
            self.dequeue(t); // idempotent: the future's own ticket drop finds it gone
        }
        for waker in due {
            waker.wake();
        }
        next
    }

    /// The keeper: beats, probes, re-arms an expired own lease, notices a removed file, and
    /// wakes this process's asynchronous acquires (its doorbell, their deadlines).
    fn keep(&'static self) {
        let mut last_beat = Instant::now();
        let bell = self.bell();
        let mut seen = bell.load(Ordering::SeqCst);
        // A registration made before `seen` was read rang a bell this thread never waited on:
        // plan for it now (after `seen`, a registration's ring ends the first sleep).
        let mut next = self.wake_due(false);
        loop {
            if !self.is_own() {
                return; // a forked child never runs this thread; belt and braces
            }
            let c = self.seg().config();
            let beat = Duration::from_millis(c.beat_ms.max(1));
            let probe = Duration::from_millis(c.probe_ms.max(1));
            let now = Instant::now();
            let mut wake_at = now + beat.min(probe).min(Duration::from_millis(100));
            if let Some(t) = next {
                wake_at = wake_at.min(t);
            }
            self.wakers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .planned = Some(wake_at);
            os::futex_wait(bell, seen, wake_at.saturating_duration_since(now));
            let now_seen = bell.load(Ordering::SeqCst);
            let rang = now_seen != seen;
            seen = now_seen;
            // Awake: no sleep is planned until the next one is, so a registration made while
            // this pass runs (after `wake_due` read the table) rings the bell, and the next
            // sleep returns at once to plan for it (else its deadline could wait a full period).
            self.wakers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .planned = None;
            if last_beat.elapsed() >= beat {
                self.seg()
                    .slot_word(self.slot, s::BEAT)
                    .fetch_add(1, Ordering::SeqCst);
                last_beat = Instant::now();
                if file::unlinked(&self.file) {
                    self.removed.store(true, Ordering::Release);
                }
            }
            if let Ok((LeaseState::Expired, _)) = self.seg().lease_of(self.slot) {
                let _ = self.recover();
                self.ring_head();
            }
            let probed = self.probe_if_due();
            next = self.wake_due(rang || probed);
        }
    }

    /// This process's own held calls and permits.
    pub(crate) fn own_held(&self) -> (u64, u64) {
        let (_, calls, permits) = layout::decode_held(
            self.seg()
                .slot_word(self.slot, s::HELD)
                .load(Ordering::SeqCst),
        );
        (calls, permits)
    }

    /// Header counter `word`.
    pub(crate) fn counter(&self, word: usize) -> u64 {
        self.seg().header(word).load(Ordering::Relaxed)
    }

    /// Counts a rejection.
    pub(crate) fn count_rejection(&self, reason: hullguard_core::Reason) {
        let i = (reason as usize).min(layout::REASON_WORDS - 1);
        self.seg().count(h::REJECTED + i, 1);
    }
}

/// What a liveness probe of one slot found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nobody owns it.
    Free,
    /// Its owner was dead: reclaimed now.
    Reclaimed,
    /// Its owner lives (its lock is held): the lease as read.
    Alive(LeaseState, u64),
}

/// Probes slot `i`'s liveness lock through `fd` and reclaims it if its owner is dead (the
/// lock was free). A lease word that does not decode poisons the segment.
pub(crate) fn probe_slot(seg: Segment<'_>, fd: std::os::fd::BorrowedFd<'_>, i: usize) -> Probe {
    let Ok((state, generation)) = seg.lease_of(i) else {
        seg.poison();
        return Probe::Free;
    };
    if state == LeaseState::Free {
        return Probe::Free;
    }
    match os::try_lock_byte(fd, layout::lock_byte(i)) {
        Ok(true) => {
            let r = seg.reclaim(i);
            let _ = os::unlock_byte(fd, layout::lock_byte(i));
            match r {
                Ok(Reclaimed { lease: true, .. }) => Probe::Reclaimed,
                Ok(_) => Probe::Free,
                Err(_) => {
                    seg.poison();
                    Probe::Free
                }
            }
        }
        _ => Probe::Alive(state, generation),
    }
}

/// At a normal exit (`exit()`, a return from `main`; not `_exit`, a signal or an abort), frees
/// the slot of each of this process's attachments that holds nothing and waits for nothing, so
/// a clean exit is not counted as a death (`reclaimed_dead_total`). A slot still holding
/// permits (leaked) is left to the others' probes, which reclaim it as they would after a
/// crash. Skipped if another thread holds the registry (the probes then free the slots).
extern "C" fn free_at_exit() {
    let Ok(reg) = REGISTRY.try_lock() else {
        return;
    };
    let fork_gen = os::fork_gen();
    for &(_, _, g, a) in reg.iter() {
        if g != fork_gen {
            continue;
        }
        let Ok(_guard) = a.reaper.try_lock() else {
            continue;
        };
        let idle =
            a.own_held().0 == 0 && a.pending.try_lock().map(|p| p.is_empty()).unwrap_or(false);
        if idle {
            a.exiting.store(true, Ordering::Release);
            a.seg().free(a.slot, a.generation());
        }
    }
}
