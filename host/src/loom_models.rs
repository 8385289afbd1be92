//! Loom models of the host protocol (docs/design.md §14.7; REACH.md A4 item 1). Compiled only
//! with `RUSTFLAGS="--cfg loom"`; run by `ci/loom-host.sh` at a bounded preemption count.
//!
//! Each model execution builds its own segment, a boxed slice of loom atomics written by
//! [`Segment::init`]; a process is a thread owning one slot, its claim done before the threads
//! start (claim needs the slot's liveness lock, which no other process can hold meanwhile). What
//! the models check, at every step where it applies:
//! * I1: the permits (and budget units) admitted at once never exceed the limit — an oracle
//!   counter, raised after `Granted` and lowered before the release, is checked after each
//!   raise;
//! * I2/I5: once everyone released, died and was reaped, nothing is held, no call counted and no
//!   ticket published, and a survivor can take the whole limit;
//! * counted once: a call in flight under an expired or reclaimed lease is taken out of the
//!   ledger exactly once, by its release or by the reset that orphans it;
//! * no lost wake-up: a head waits on its doorbell as `futex_wait(bell, seen)` does, for the
//!   value it read before trying, but without the production timeout (a probe period): a head
//!   about to sleep while every other process has finished or sleeps on an unmoved bell fails
//!   the model;
//! * crash safety: a process that dies at any crash point of claim, admission, ticket publish,
//!   release, reclaim or expiry leaves a state one reclaim (or a second reaper) cleans up, and a
//!   waiting survivor is still admitted.

use std::{
    sync::{
        Arc as StdArc, Once,
        atomic::{
            AtomicBool as StdAtomicBool, AtomicUsize as StdAtomicUsize, Ordering as StdOrdering,
        },
    },
    vec::Vec,
};

use loom::{
    sync::{Arc, Condvar, Mutex},
    thread,
};

use crate::{
    crash::{self, Crashed},
    layout::{self, LeaseState, NO_TICKET, h, s},
    segment::{Admit, ReleaseError, Segment, SegmentConfig},
    sync::{AtomicU64, Ordering::SeqCst},
};

/// A segment owned by one model execution, and the futex its doorbells are waited on with.
struct Host {
    words: Box<[AtomicU64]>,
    n_slots: usize,
    futex: Futex,
}

/// The kernel's futex, for every doorbell at once (one hash bucket): a waiter checks its word
/// under the bucket lock and sleeps atomically with releasing it; a waker bumps the word, then
/// takes the lock and wakes every sleeper (each re-checks its own word). The bucket also keeps
/// who sleeps on what and how many of the model's `parties` (threads) finished, so a sleep that
/// nobody is left to end fails with a message instead of a loom deadlock (which aborts the test
/// binary).
struct Futex {
    bucket: Mutex<Bucket>,
    sleepers: Condvar,
    parties: usize,
}

#[derive(Default)]
struct Bucket {
    /// (slot, the bell value it sleeps on).
    asleep: Vec<(usize, u64)>,
    finished: usize,
}

impl Host {
    /// A fresh segment of `n_slots` slots, a limit of `limit` permits and a budget of `budget`
    /// units (0 = none).
    fn new(n_slots: u32, limit: u64, budget: u64) -> Arc<Host> {
        Host::with_parties(n_slots, limit, budget, 0)
    }

    /// As [`new`](Self::new), for a model of `parties` threads that ring and wait.
    fn with_parties(n_slots: u32, limit: u64, budget: u64, parties: usize) -> Arc<Host> {
        let words: Box<[AtomicU64]> = (0..layout::segment_bytes(n_slots) / 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        let config = SegmentConfig {
            max_concurrent: limit,
            budget,
            lease_ttl_ms: 10,
            beat_ms: 1,
            probe_ms: 1,
        };
        Segment::init(
            &words,
            n_slots,
            &config,
            *b"loom\0\0\0\0\0\0\0\0\0\0\0\0",
            [0; 16],
            0,
            1,
        )
        .unwrap();
        Arc::new(Host {
            words,
            n_slots: n_slots as usize,
            futex: Futex {
                bucket: Mutex::new(Bucket::default()),
                sleepers: Condvar::new(),
                parties,
            },
        })
    }

    fn seg(&self) -> Segment<'_> {
        Segment::trusted(&self.words, self.n_slots)
    }

    /// Claims `slot` (its caller holds the liveness lock) and returns the generation.
    fn claim(&self, slot: usize) -> u64 {
        claim(&self.seg(), slot).unwrap()
    }

    /// Rings `slot`'s doorbell and wakes its waiters (`Attachment::ring`: `futex_wake` after
    /// the bump).
    fn ring(&self, slot: usize) {
        self.seg().ring(slot);
        let _bucket = self.futex.bucket.lock().unwrap();
        self.futex.sleepers.notify_all();
    }

    fn bell(&self, slot: usize) -> u64 {
        self.seg().slot_word(slot, s::BELL).load(SeqCst)
    }

    /// `futex_wait(bell of slot, seen)` with no timeout: returns once the bell is not `seen`.
    /// Fails if it would sleep while every other party finished or sleeps on an unmoved bell.
    fn wait(&self, slot: usize, seen: u64) {
        let mut bucket = self.futex.bucket.lock().unwrap();
        while self.bell(slot) == seen {
            let stuck = bucket
                .asleep
                .iter()
                .filter(|&&(other, on)| self.bell(other) == on)
                .count();
            assert!(
                bucket.finished + stuck + 1 < self.futex.parties,
                "lost wake-up: slot {slot} sleeps on bell {seen} and nobody is left to ring it \
                 ({} finished, asleep: {:?})",
                bucket.finished,
                bucket.asleep
            );
            bucket.asleep.push((slot, seen));
            bucket = self.futex.sleepers.wait(bucket).unwrap();
            bucket.asleep.retain(|&a| a != (slot, seen));
        }
    }

    /// This thread will ring nobody any more (it is done, or dead).
    fn finish(&self) {
        let mut bucket = self.futex.bucket.lock().unwrap();
        bucket.finished += 1;
        self.futex.sleepers.notify_all();
    }

    /// Rings whoever holds the smallest ticket now, if anyone (`Attachment::ring_head`).
    fn ring_head(&self) {
        let scan = self.seg().scan();
        if scan.has_waiters() {
            self.ring(scan.min_slot);
        }
    }
}

fn claim(seg: &Segment<'_>, slot: usize) -> Result<u64, crate::segment::Corrupt> {
    seg.claim(slot, 100 + slot as u64, 1, 1, 0, 0)
}

/// I2 + I5 + no ticket left published.
#[track_caller]
fn assert_quiescent(seg: &Segment<'_>) {
    let scan = seg.scan();
    assert_eq!(
        (scan.permits, scan.calls, scan.cost),
        (0, 0, 0),
        "I2/I5: something still held: {scan:?}"
    );
    assert_eq!(
        scan.min_ticket, NO_TICKET,
        "a ticket left published: {scan:?}"
    );
}

/// The process in `slot` (generation `g`) can take the whole limit and budget, and give it back.
#[track_caller]
fn assert_whole_limit_free(seg: &Segment<'_>, slot: usize, g: u64) {
    let c = seg.config();
    assert_eq!(
        seg.admit(slot, g, c.max_concurrent, c.budget, false),
        Admit::Granted,
        "the whole limit is not free: {:?}",
        seg.scan()
    );
    assert_eq!(seg.release(slot, g, c.max_concurrent, c.budget), Ok(()));
    assert_quiescent(seg);
}

/// The preemption bound when `LOOM_MAX_PREEMPTIONS` is unset (ci/loom-host.sh sets it to 3).
const DEFAULT_BOUND: usize = 3;

/// Runs a model at the preemption bound `LOOM_MAX_PREEMPTIONS` clamped to `min ..= max`, plus
/// one when `LOOM_DEEP=1` (`make loom-deep`). Prints how many executions it explored (shown with
/// `-- --nocapture`).
fn model_in<F: Fn() + Sync + Send + 'static>(min: usize, max: usize, f: F) {
    let deep = std::env::var("LOOM_DEEP").is_ok_and(|v| v == "1");
    let mut b = loom::model::Builder::new();
    let bound = b.preemption_bound.unwrap_or(DEFAULT_BOUND).clamp(min, max) + usize::from(deep);
    b.preemption_bound = Some(bound);
    let runs = StdArc::new(StdAtomicUsize::new(0));
    let counted = runs.clone();
    b.check(move || {
        counted.fetch_add(1, StdOrdering::Relaxed);
        f();
    });
    std::eprintln!(
        "{}: {} executions at preemption bound {bound}",
        std::thread::current().name().unwrap_or("?"),
        runs.load(StdOrdering::Relaxed),
    );
}

/// Two live threads (a third, if any, only waits for them): at `LOOM_MAX_PREEMPTIONS`.
fn model2<F: Fn() + Sync + Send + 'static>(f: F) {
    model_in(0, usize::MAX, f);
}

/// Three live threads: at most 2 (3 with `LOOM_DEEP=1`: `make loom-deep`), as the core's
/// three-thread models (docs/design.md §11), for `make test`'s warm budget.
fn model3<F: Fn() + Sync + Send + 'static>(f: F) {
    model_in(0, 2, f);
}

// ---------------------------------------------------------------------------------------------
// 1. The ledger: admission never passes the limit.
// ---------------------------------------------------------------------------------------------

/// What was admitted at once, by the model's own count.
struct Oracle {
    permits: AtomicU64,
    cost: AtomicU64,
}

impl Oracle {
    fn new() -> Arc<Oracle> {
        Arc::new(Oracle {
            permits: AtomicU64::new(0),
            cost: AtomicU64::new(0),
        })
    }
}

/// One non-head admission of `weight` permits and `cost` units by `slot`; if granted, I1 is
/// checked against the oracle and the call released. Returns whether it was granted.
fn admit_check_release(
    seg: &Segment<'_>,
    oracle: &Oracle,
    slot: usize,
    g: u64,
    weight: u64,
    cost: u64,
) -> bool {
    let c = seg.config();
    match seg.admit(slot, g, weight, cost, false) {
        Admit::Granted => {
            let permits = oracle.permits.fetch_add(weight, SeqCst) + weight;
            assert!(
                permits <= c.max_concurrent,
                "I1: {permits} permits admitted at once, limit {}",
                c.max_concurrent
            );
            if cost != 0 {
                let units = oracle.cost.fetch_add(cost, SeqCst) + cost;
                assert!(
                    units <= c.budget,
                    "I1: {units} units admitted at once, budget {}",
                    c.budget
                );
                oracle.cost.fetch_sub(cost, SeqCst);
            }
            oracle.permits.fetch_sub(weight, SeqCst);
            assert_eq!(seg.release(slot, g, weight, cost), Ok(()));
            true
        }
        // Nobody published a ticket: nobody to ring.
        Admit::Full { ring: None, .. } => false,
        other => panic!("slot {slot}: unexpected {other:?}"),
    }
}

#[test]
fn loom_host_ledger_three_holders_never_pass_the_limit() {
    // Limit 3, weights 2 + 2 + 1 (5): not all fit. Every process bumps its own word and then
    // sums all of them; whichever bump is last sees every other one still held.
    model3(|| {
        let host = Host::new(3, 3, 0);
        let gens: Vec<u64> = (0..3).map(|i| host.claim(i)).collect();
        let oracle = Oracle::new();
        let others: Vec<_> = [(0, 2), (1, 2)]
            .into_iter()
            .map(|(slot, weight)| {
                let (host, oracle, g) = (host.clone(), oracle.clone(), gens[slot]);
                thread::spawn(move || admit_check_release(&host.seg(), &oracle, slot, g, weight, 0))
            })
            .collect();
        let seg = host.seg();
        admit_check_release(&seg, &oracle, 2, gens[2], 1, 0);
        for t in others {
            t.join().unwrap();
        }
        assert_quiescent(&seg);
    });
}

#[test]
fn loom_host_ledger_two_holders_never_pass_the_limit() {
    // The two-process case one preemption deeper: limit 3, weights 2 + 2.
    model2(|| {
        let host = Host::new(2, 3, 0);
        let (g0, g1) = (host.claim(0), host.claim(1));
        let oracle = Oracle::new();
        let other = {
            let (host, oracle) = (host.clone(), oracle.clone());
            thread::spawn(move || admit_check_release(&host.seg(), &oracle, 0, g0, 2, 0))
        };
        let seg = host.seg();
        admit_check_release(&seg, &oracle, 1, g1, 2, 0);
        other.join().unwrap();
        assert_quiescent(&seg);
    });
}

#[test]
fn loom_host_ledger_budget_never_passes_the_budget() {
    // The budget dimension: permits fit (limit 2), budget units do not (3 + 2 > 4).
    model2(|| {
        let host = Host::new(2, 2, 4);
        let (g0, g1) = (host.claim(0), host.claim(1));
        let oracle = Oracle::new();
        let other = {
            let (host, oracle) = (host.clone(), oracle.clone());
            thread::spawn(move || admit_check_release(&host.seg(), &oracle, 0, g0, 1, 3))
        };
        let seg = host.seg();
        admit_check_release(&seg, &oracle, 1, g1, 1, 2);
        other.join().unwrap();
        assert_quiescent(&seg);
        assert_whole_limit_free(&seg, 1, g1);
    });
}

// ---------------------------------------------------------------------------------------------
// 2. Expiry and reclaim against the owner.
// ---------------------------------------------------------------------------------------------

#[test]
fn loom_host_expiry_vs_owner_counts_each_call_once() {
    // An observer expires a slot (its owner seemed silent for the TTL) while the owner, alive
    // after all, admits and releases a call. The call leaves the ledger exactly once: by the
    // release (Ok) or by the expiry's reset, which counts it orphaned (the release is then
    // refused stale). Afterwards the owner re-arms under a newer generation, its old
    // generation stays fenced, and it can take the whole limit.
    model2(|| {
        let host = Host::new(1, 1, 2);
        let g = host.claim(0);
        let observer = {
            let host = host.clone();
            thread::spawn(move || host.seg().expire(0, g))
        };
        let seg = host.seg();
        let (granted, released) = match seg.admit(0, g, 1, 1, false) {
            Admit::Granted => match seg.release(0, g, 1, 1) {
                Ok(()) => (true, true),
                Err(ReleaseError::Stale) => (true, false),
                Err(e) => panic!("release: {e:?}"),
            },
            // The expiry fenced the bump (before it, or between its two words).
            Admit::Stale => (false, false),
            other => panic!("admit: {other:?}"),
        };
        let expired = observer
            .join()
            .unwrap()
            .expect("the lease was active under g");
        assert!(expired.lease);
        let orphaned = seg.header(h::ORPHANED).load(SeqCst);
        if granted {
            assert_eq!(
                orphaned + u64::from(released),
                1,
                "a granted call left the ledger {} times",
                orphaned + u64::from(released)
            );
        } else {
            // A tentative bump the expiry caught is orphaned too; nothing else.
            assert!(orphaned <= 1);
        }
        assert_eq!(orphaned, expired.calls);
        assert_eq!(
            seg.header(h::RECLAIMED_PERMITS).load(SeqCst),
            expired.permits
        );
        assert_quiescent(&seg);
        assert_eq!(
            seg.lease_of(0),
            Ok((LeaseState::Expired, layout::next_gen(g)))
        );
        // The owner resumes.
        let g2 = seg.rearm(0).expect("re-arm an expired lease");
        assert_eq!(seg.release(0, g, 1, 1), Err(ReleaseError::Stale));
        assert_eq!(seg.admit(0, g, 1, 1, false), Admit::Stale);
        assert_whole_limit_free(&seg, 0, g2);
    });
}

#[test]
fn loom_host_reclaim_vs_expiry_of_a_dead_owner() {
    // A dead process held a call and had a waiter published. One process's reaper reclaims
    // it (it took the dead owner's liveness lock) while another's observer expires it (it saw
    // the slot silent for the TTL). Whatever the order, the call is orphaned once, the ticket
    // goes, the slot ends free and a survivor can take the whole limit.
    model2(|| {
        let host = Host::new(2, 2, 2);
        let (gd, gs) = (host.claim(0), host.claim(1));
        let seg = host.seg();
        assert_eq!(seg.admit(0, gd, 1, 1, false), Admit::Granted);
        let t = seg.take_ticket();
        seg.publish(0, t);
        // ... and the owner of slot 0 dies.
        let observer = {
            let host = host.clone();
            thread::spawn(move || host.seg().expire(0, gd))
        };
        let reclaimed = seg.reclaim(0).unwrap();
        let expired = observer.join().unwrap();
        assert!(reclaimed.lease);
        assert_eq!(
            reclaimed.calls + expired.map_or(0, |e| e.calls),
            1,
            "the dead owner's call orphaned {} times",
            reclaimed.calls + expired.map_or(0, |e| e.calls)
        );
        assert_eq!(seg.header(h::ORPHANED).load(SeqCst), 1);
        assert_eq!(seg.header(h::RECLAIMED_PERMITS).load(SeqCst), 1);
        assert_eq!(seg.lease_of(0).unwrap().0, LeaseState::Free);
        assert_eq!(seg.release(0, gd, 1, 1), Err(ReleaseError::Stale));
        assert_quiescent(&seg);
        assert_whole_limit_free(&seg, 1, gs);
    });
}

#[test]
fn loom_host_stopped_reaper_vs_a_finishing_one() {
    // A dead process held a call and had a waiter published. A reaper (it holds the slot's
    // lock) reclaims it, and may stop anywhere (SIGSTOP); another process, finding the slot
    // `Reclaiming` with the lock taken, finishes the part that gives the permits and the
    // ticket back (`finish_reclaim`), while a survivor acquires. Whatever the order: the call
    // is orphaned once, the slot ends free, the survivor is admitted and the whole limit is
    // free.
    model3(|| {
        let host = Host::with_parties(2, 1, 1, 3);
        let gs = host.claim(1);
        let seg = host.seg();
        owner_holding(&host);
        let reaper = party(&host, |host| {
            host.seg().reclaim(0).unwrap();
            host.ring_head();
        });
        let survivor = party(&host, move |host| acquire_blocking(host, 1, gs, 1, 1));
        if let Ok((LeaseState::Reclaiming, g)) = seg.lease_of(0) {
            if seg.finish_reclaim(0, g).is_some() {
                host.ring_head();
            }
        }
        host.finish();
        reaper.join().unwrap();
        survivor.join().unwrap();
        assert_eq!(seg.header(h::ORPHANED).load(SeqCst), 1);
        assert_eq!(seg.header(h::RECLAIMED_PERMITS).load(SeqCst), 1);
        assert_eq!(seg.lease_of(0).unwrap().0, LeaseState::Free);
        assert_quiescent(&seg);
        assert_whole_limit_free(&seg, 1, gs);
    });
}

#[test]
fn loom_host_clean_exit_vs_a_late_admission() {
    // A process exits cleanly and frees its slot while another of its threads admits a call.
    // The free gives up if anything is held at its one CAS: a call admitted first keeps the
    // lease (left to the others' probes), one admitted after finds its generation moved. A
    // held call is never wiped.
    model2(|| {
        let host = Host::new(2, 2, 2);
        let (g0, g1) = (host.claim(0), host.claim(1));
        let late = {
            let host = host.clone();
            thread::spawn(move || host.seg().admit(0, g0, 1, 1, false))
        };
        let seg = host.seg();
        seg.free(0, g0);
        let admitted = late.join().unwrap();
        let scan = seg.scan();
        match admitted {
            Admit::Granted => {
                assert_eq!(seg.lease_of(0), Ok((LeaseState::Active, g0)));
                assert_eq!((scan.permits, scan.calls, scan.cost), (1, 1, 1));
                assert_eq!(seg.release(0, g0, 1, 1), Ok(()));
            }
            Admit::Stale => {
                assert_eq!(seg.lease_of(0).unwrap().0, LeaseState::Free);
            }
            other => panic!("late admission: {other:?}"),
        }
        assert_quiescent(&seg);
        assert_whole_limit_free(&seg, 1, g1);
    });
}

// ---------------------------------------------------------------------------------------------
// 3. Tickets and doorbells.
// ---------------------------------------------------------------------------------------------

/// The most waits a head makes in these models (each needs a ring; there are few).
const MAX_ROUNDS: usize = 8;

/// The head's loop of `HostBulkhead::admit_blocking`: read the own doorbell, try as the head
/// (ringing the slot a refusal names), and if not admitted wait for the bell to move. Ends
/// admitted, else fails (a head nobody is left to ring fails in [`Host::wait`]).
fn head_loop(host: &Host, slot: usize, g: u64, weight: u64, cost: u64) {
    let seg = host.seg();
    for _ in 0..MAX_ROUNDS {
        let bell = seg.slot_word(slot, s::BELL);
        let seen = bell.load(SeqCst);
        match seg.admit(slot, g, weight, cost, true) {
            Admit::Granted => return,
            Admit::Full { ring, .. } => {
                if let Some(r) = ring {
                    host.ring(r);
                }
            }
            Admit::NotHead => {}
            Admit::Stale => panic!("slot {slot}: stale"),
        }
        host.wait(slot, seen);
    }
    panic!("slot {slot}: not admitted after {MAX_ROUNDS} wake-ups");
}

/// A process's one non-head attempt (`HostBulkhead::try_acquire`): on a grant it releases and
/// rings the head; on a refusal it rings the slot the refusal names (`Attachment::admit`).
/// Returns whether it was granted.
fn try_once(host: &Host, slot: usize, g: u64, weight: u64, cost: u64) -> bool {
    match host.seg().admit(slot, g, weight, cost, false) {
        Admit::Granted => {
            release_ring(host, slot, g, weight, cost);
            true
        }
        Admit::Full { ring, .. } => {
            if let Some(r) = ring {
                host.ring(r);
            }
            false
        }
        other => panic!("slot {slot}: unexpected {other:?}"),
    }
}

/// `HostBulkhead::admit_blocking` with no timeout: a try, and if refused a wait as the head.
fn acquire_blocking(host: &Host, slot: usize, g: u64, weight: u64, cost: u64) {
    if !try_once(host, slot, g, weight, cost) {
        wait_turn(host, slot, g, weight, cost);
    }
}

/// Takes a ticket and publishes it (`Attachment::enqueue` of a process's only waiter).
fn enqueue(seg: &Segment<'_>, slot: usize) {
    let t = seg.take_ticket();
    seg.publish(slot, t);
}

/// Withdraws the process's only ticket and rings the new global head (`Attachment::dequeue`).
fn dequeue(host: &Host, slot: usize) {
    host.seg().publish(slot, NO_TICKET);
    host.ring_head();
}

/// Releases and rings the global head (`HostPermit::release`).
fn release_ring(host: &Host, slot: usize, g: u64, weight: u64, cost: u64) {
    assert_eq!(host.seg().release(slot, g, weight, cost), Ok(()));
    host.ring_head();
}

/// A queued waiter's whole life: ticket, head loop, dequeue, release.
fn wait_turn(host: &Host, slot: usize, g: u64, weight: u64, cost: u64) {
    enqueue(&host.seg(), slot);
    head_loop(host, slot, g, weight, cost);
    dequeue(host, slot);
    release_ring(host, slot, g, weight, cost);
}

/// Starts a party: a thread that runs `f`, then finishes.
fn party<R: 'static>(
    host: &Arc<Host>,
    f: impl FnOnce(&Host) -> R + Send + 'static,
) -> thread::JoinHandle<R> {
    let host = host.clone();
    thread::spawn(move || {
        let r = f(&host);
        host.finish();
        r
    })
}

#[test]
fn loom_host_release_rings_the_waiting_head() {
    // Limit 1, held by slot 0. Slot 1 queues and waits on its doorbell as the head; the
    // holder releases and rings the head. No lost wake-up: a head that read the bell before
    // trying, and failed because the permit was still held, sees the bell move. (Ringing
    // before releasing fails here; so does reading the bell after trying.)
    model2(|| {
        let host = Host::with_parties(2, 1, 0, 2);
        let (g0, g1) = (host.claim(0), host.claim(1));
        assert_eq!(host.seg().admit(0, g0, 1, 0, false), Admit::Granted);
        let holder = party(&host, move |host| release_ring(host, 0, g0, 1, 0));
        wait_turn(&host, 1, g1, 1, 0);
        host.finish();
        holder.join().unwrap();
        assert_quiescent(&host.seg());
    });
}

#[test]
fn loom_host_two_heads_take_turns() {
    // Limit 1. Two processes each take a ticket, publish it and wait as their head: the one
    // with the smaller published ticket is admitted, unpublishes, rings, releases and rings;
    // the other is admitted after. Neither waits forever.
    model2(|| {
        let host = Host::with_parties(2, 1, 0, 2);
        let (g0, g1) = (host.claim(0), host.claim(1));
        let other = party(&host, move |host| wait_turn(host, 0, g0, 1, 0));
        wait_turn(&host, 1, g1, 1, 0);
        host.finish();
        other.join().unwrap();
        assert_quiescent(&host.seg());
    });
}

#[test]
fn loom_host_two_heads_behind_a_holder() {
    // As above, with the limit held by a third process that releases meanwhile: both heads
    // are admitted, one after the other, however the three interleave.
    model3(|| {
        let host = Host::with_parties(3, 1, 0, 3);
        let (g0, g1, g2) = (host.claim(0), host.claim(1), host.claim(2));
        assert_eq!(host.seg().admit(2, g2, 1, 0, false), Admit::Granted);
        let holder = party(&host, move |host| release_ring(host, 2, g2, 1, 0));
        let other = party(&host, move |host| wait_turn(host, 0, g0, 1, 0));
        wait_turn(&host, 1, g1, 1, 0);
        host.finish();
        other.join().unwrap();
        holder.join().unwrap();
        assert_quiescent(&host.seg());
    });
}

#[test]
fn loom_host_cancel_passes_the_turn() {
    // Slot 0 holds the smallest ticket; slot 1 waits behind it (NotHead). Slot 0's waiter
    // gives up (a timeout or a cancel): it unpublishes and rings the new head, which is
    // admitted.
    model2(|| {
        let host = Host::with_parties(2, 1, 0, 2);
        let g1 = host.claim(1);
        host.claim(0);
        enqueue(&host.seg(), 0);
        let canceller = party(&host, |host| dequeue(host, 0));
        wait_turn(&host, 1, g1, 1, 0);
        host.finish();
        canceller.join().unwrap();
        assert_quiescent(&host.seg());
    });
}

#[test]
fn loom_host_cancel_and_release_pass_the_turn() {
    // As above with the limit held by a third process: slot 0 (the smallest ticket) cancels
    // while slot 2 releases; slot 1 (the next ticket) is admitted whatever the order.
    model3(|| {
        let host = Host::with_parties(3, 1, 0, 3);
        let (g1, g2) = (host.claim(1), host.claim(2));
        host.claim(0);
        assert_eq!(host.seg().admit(2, g2, 1, 0, false), Admit::Granted);
        enqueue(&host.seg(), 0);
        let canceller = party(&host, |host| dequeue(host, 0));
        let holder = party(&host, move |host| release_ring(host, 2, g2, 1, 0));
        wait_turn(&host, 1, g1, 1, 0);
        host.finish();
        canceller.join().unwrap();
        holder.join().unwrap();
        assert_quiescent(&host.seg());
    });
}

#[test]
fn loom_host_undone_bumps_ring_the_head() {
    // Limit 1. Slot 0 queues and waits as the head while slots 1 and 2 each try once (no
    // ticket published yet when they confirm). A head refused because of a tentative bump
    // that is then undone must be rung by the undoer: nobody else may be left to ring it.
    // Found at bound 3 with the ring taken from the confirming pass: 1 bumps, confirms (no
    // ticket), is admitted; 2 bumps, confirms over the limit (no ticket), is preempted; 0
    // publishes, reads its bell, sees 2 permits, waits; 1 releases and rings 0; 0 wakes, reads
    // the bell, sees 2's tentative permit, waits; 2 undoes and rings nobody.
    model3(|| {
        let host = Host::with_parties(3, 1, 0, 3);
        let (g0, g1, g2) = (host.claim(0), host.claim(1), host.claim(2));
        let tries: Vec<_> = [(1, g1), (2, g2)]
            .into_iter()
            .map(|(slot, g)| {
                party(&host, move |host| {
                    try_once(host, slot, g, 1, 0);
                })
            })
            .collect();
        wait_turn(&host, 0, g0, 1, 0);
        host.finish();
        for t in tries {
            t.join().unwrap();
        }
        assert_quiescent(&host.seg());
    });
}

/// A process whose lease an observer may expire under it: its generation, its reaper lock and
/// its pending ticket (`Attachment::generation`, `::reaper`, `::pending`; one waiter).
struct Process {
    slot: usize,
    generation: AtomicU64,
    reaper: Mutex<()>,
    /// The waiter's ticket while it waits, else `NO_TICKET`; published under this lock.
    pending: Mutex<u64>,
}

impl Process {
    /// `Attachment::recover`: re-arm an expired lease, then republish.
    fn recover(&self, host: &Host) {
        let seg = host.seg();
        {
            let _reaper = self.reaper.lock().unwrap();
            match seg.lease_of(self.slot).unwrap() {
                (LeaseState::Active, g) if g == self.generation.load(SeqCst) => return,
                (LeaseState::Active, g) => self.generation.store(g, SeqCst),
                (LeaseState::Expired, _) => {
                    if let Some(g) = seg.rearm(self.slot) {
                        self.generation.store(g, SeqCst);
                    }
                }
                other => panic!("slot {}: {other:?}", self.slot),
            }
        }
        self.republish(host);
    }

    /// `Attachment::republish`.
    fn republish(&self, host: &Host) {
        let pending = self.pending.lock().unwrap();
        host.seg().publish(self.slot, *pending);
    }

    /// `Attachment::lost_head`: waiting, but no ticket published.
    fn lost_head(&self, host: &Host) -> bool {
        host.seg().slot_word(self.slot, s::HEAD).load(SeqCst) == NO_TICKET
            && *self.pending.lock().unwrap() != NO_TICKET
    }

    /// `Attachment::dequeue` of the one waiter.
    fn dequeue(&self, host: &Host) {
        {
            let mut pending = self.pending.lock().unwrap();
            *pending = NO_TICKET;
            host.seg().publish(self.slot, NO_TICKET);
        }
        host.ring_head();
    }

    /// `Attachment::admit` as the head: retried on `Stale` (after `recover`) and on a lost
    /// ticket (after republishing it).
    fn admit_head(&self, host: &Host) -> Result<u64, Admit> {
        let seg = host.seg();
        for _ in 0..3 {
            let g = self.generation.load(SeqCst);
            match seg.admit(self.slot, g, 1, 0, true) {
                Admit::Granted => return Ok(g),
                Admit::Stale => self.recover(host),
                Admit::NotHead if self.lost_head(host) => self.republish(host),
                Admit::Full { ring, .. } => {
                    if let Some(r) = ring {
                        host.ring(r);
                    }
                    return Err(Admit::NotHead);
                }
                Admit::NotHead => return Err(Admit::NotHead),
            }
        }
        Err(Admit::Stale)
    }

    /// The head's loop of `HostBulkhead::admit_blocking` over [`admit_head`](Self::admit_head).
    fn wait_turn(&self, host: &Host) {
        let bell = host.seg().slot_word(self.slot, s::BELL);
        for _ in 0..MAX_ROUNDS {
            let seen = bell.load(SeqCst);
            if let Ok(g) = self.admit_head(host) {
                self.dequeue(host);
                // Stale if the expiry took the call back first (`HostPermit::release`: no ring).
                match host.seg().release(self.slot, g, 1, 0) {
                    Ok(()) => host.ring_head(),
                    Err(e) => assert_eq!(e, ReleaseError::Stale),
                }
                return;
            }
            host.wait(self.slot, seen);
        }
        panic!(
            "slot {}: not admitted after {MAX_ROUNDS} wake-ups",
            self.slot
        );
    }

    /// One tick of the keeper thread (`Attachment::keep`): an expired own lease is recovered
    /// and the head rung.
    fn keeper_tick(&self, host: &Host) {
        if host.seg().lease_of(self.slot).unwrap().0 == LeaseState::Expired {
            self.recover(host);
            host.ring_head();
        }
    }
}

#[test]
fn loom_host_expiry_vs_a_resuming_queued_owner() {
    // Limit 1, held by slot 1. Slot 0's owner seemed stopped (its beat silent for the TTL)
    // with a waiter queued; an observer expires it while the owner, running after all, waits
    // as its head and its keeper ticks (once during the expiry, once after it). Then the holder
    // releases and rings the head. The owner's waiter must be admitted.
    //
    // The expiry's clearing of the head ticket may land after the keeper re-armed the lease
    // and republished the ticket (nothing orders the two stores): the head, asleep on its
    // doorbell, is then rung by nobody (`ring_head` finds no ticket) until its futex timeout.
    // So the observer also rings the expired slot's own doorbell: the head wakes, finds its
    // ticket gone and republishes it (`Attachment::lost_head`). Found at bound 2 without that
    // ring (loom.md); `Attachment::reap` must ring an expired slot the same way.
    // Three threads and a fourth party (the main thread: the second tick and the holder), at
    // most bound 2 (41 000 executions; 3 costs ten times that).
    model_in(0, 2, || {
        let host = Host::with_parties(2, 1, 0, 4);
        let (g0, g1) = (host.claim(0), host.claim(1));
        assert_eq!(host.seg().admit(1, g1, 1, 0, false), Admit::Granted);
        let ticket = host.seg().take_ticket();
        host.seg().publish(0, ticket);
        let owner = Arc::new(Process {
            slot: 0,
            generation: AtomicU64::new(g0),
            reaper: Mutex::new(()),
            pending: Mutex::new(ticket),
        });
        let observer = party(&host, move |host| {
            // `Attachment::reap`, with the expired slot rung.
            if host.seg().expire(0, g0).is_some() {
                host.ring(0);
                host.ring_head();
            }
        });
        let keeper = {
            let owner = owner.clone();
            party(&host, move |host| owner.keeper_tick(host))
        };
        let head = {
            let owner = owner.clone();
            party(&host, move |host| owner.wait_turn(host))
        };
        observer.join().unwrap();
        keeper.join().unwrap();
        owner.keeper_tick(&host);
        release_ring(&host, 1, g1, 1, 0);
        host.finish();
        head.join().unwrap();
        assert_quiescent(&host.seg());
    });
}

// ---------------------------------------------------------------------------------------------
// 4. Crash injection.
// ---------------------------------------------------------------------------------------------

/// Keeps the test output free of the expected `Crashed` unwinds (other panics still print).
fn quiet_crashes() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Crashed>() {
                prev(info);
            }
        }));
    });
}

/// Runs `model(k, crashed)` for k = 0, 1, …: the model's victim passes only its first k crash
/// points and sets `crashed` if it died. Stops after the first k at which no execution crashed
/// (the victim got through every point of its operation in every interleaving). Returns that
/// k: the most crash points the operation passes.
fn each_crash_point(
    what: &str,
    model: impl Fn(usize, &StdAtomicBool) + Clone + Sync + Send + 'static,
) -> usize {
    quiet_crashes();
    for k in 0..64 {
        let crashed = StdArc::new(StdAtomicBool::new(false));
        let (m, c) = (model.clone(), crashed.clone());
        model2(move || m(k, &c));
        if !crashed.load(StdOrdering::SeqCst) {
            std::eprintln!("{what}: {k} crash points, a model each");
            return k;
        }
    }
    panic!("{what}: still crashing after 64 crash points");
}

/// A process in slot 0 holding a call (1 permit, 1 unit) with a ticket published; it then dies
/// (or stops).
fn owner_holding(host: &Host) -> u64 {
    let seg = host.seg();
    let g = host.claim(0);
    assert_eq!(seg.admit(0, g, 1, 1, false), Admit::Granted);
    enqueue(&seg, 0);
    g
}

fn claim0(host: &Host) -> u64 {
    host.claim(0)
}

/// What became of slot 0's owner, and so who cleans up after the victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Dead: its liveness lock dropped, a reaper reclaims the slot.
    Dead,
    /// Stopped (SIGSTOP) with a call and a ticket: its lock is held, so an observer expires the
    /// slot, or finishes the expiry a dead observer began (`Attachment::reap`).
    Stopped,
}

/// Limit 2, budget 2. Slot 0 is set up by `setup`; then its process (`op`, or a reaper or an
/// observer acting on it) dies after `k` crash points, concurrently with a survivor in slot 1
/// acquiring 1 permit and 1 unit (a try, and if refused a wait as the head: it must be admitted,
/// a death may never strand it); then slot 0 is reaped as `owner` says and the head rung (the
/// survivor may still run). Afterwards: I2, I5, no ticket, slot 0 free (or expired, and its
/// owner re-arms and takes the whole limit), the whole limit free for the survivor.
fn crash_model(k: usize, crashed: &StdAtomicBool, setup: fn(&Host) -> u64, op: fn(&Host, u64)) {
    crash_model_of(Owner::Dead, k, crashed, setup, op);
}

fn crash_model_of(
    owner: Owner,
    k: usize,
    crashed: &StdAtomicBool,
    setup: fn(&Host) -> u64,
    op: fn(&Host, u64),
) {
    // Three parties: the victim (finished when dead or done), the survivor, the reaper.
    let host = Host::with_parties(2, 2, 2, 3);
    let g0 = setup(&host);
    let gs = host.claim(1);
    let victim = party(&host, move |host| {
        crash::with_budget(k, || op(host, g0)).is_none()
    });
    let survivor = party(&host, move |host| acquire_blocking(host, 1, gs, 1, 1));
    if victim.join().unwrap() {
        crashed.store(true, StdOrdering::SeqCst);
    }
    let seg = host.seg();
    match owner {
        // Its liveness lock dropped: a reaper takes it and reclaims the slot.
        Owner::Dead => {
            seg.reclaim(0).unwrap();
        }
        // Its lock is held: the next observer expires it after the TTL, or finishes the
        // expiry the victim began.
        Owner::Stopped => match seg.lease_of(0).unwrap() {
            (LeaseState::Active, g) => {
                assert_eq!(g, g0);
                seg.expire(0, g).expect("active under g0");
            }
            (LeaseState::Expired, g) => {
                let _ = seg.finish_expiry(0, g);
            }
            other => panic!("slot 0: {other:?}"),
        },
    }
    host.ring_head();
    host.finish();
    survivor.join().unwrap();
    assert_quiescent(&seg);
    assert_whole_limit_free(&seg, 1, gs);
    match owner {
        Owner::Dead => assert_eq!(seg.lease_of(0).unwrap().0, LeaseState::Free),
        Owner::Stopped => {
            // The owner resumes: re-arms, its old calls stay fenced, the limit is whole.
            assert_eq!(seg.lease_of(0).unwrap().0, LeaseState::Expired);
            let g = seg.rearm(0).expect("re-arm an expired lease");
            assert_eq!(seg.release(0, g0, 1, 1), Err(ReleaseError::Stale));
            assert_whole_limit_free(&seg, 0, g);
        }
    }
}

#[test]
fn loom_host_crash_in_admit_and_release() {
    // The victim tries for the whole limit (2 permits, 1 unit) beside the survivor's 1, so its
    // bump may be undone: acquire.bump, .check, then .undo (through release: release.held,
    // .cost) or release.held, .cost.
    let n = each_crash_point("admit + release", |k, crashed| {
        crash_model(k, crashed, claim0, |host, g| {
            try_once(host, 0, g, 2, 1);
        });
    });
    assert!(n >= 5, "bump, check, undo, held, cost: {n}");
}

#[test]
fn loom_host_crash_in_queue_admit_and_dequeue() {
    // A queued waiter's life, one try as the head: publish.ticket, publish.head,
    // acquire.bump, .check (.undo), cancel.unpublish, release.held, .cost.
    let n = each_crash_point("ticket + publish + head admit + dequeue", |k, crashed| {
        crash_model(k, crashed, claim0, |host, g| {
            let seg = host.seg();
            enqueue(&seg, 0);
            let admitted = seg.admit(0, g, 1, 1, true);
            dequeue(host, 0);
            match admitted {
                Admit::Granted => release_ring(host, 0, g, 1, 1),
                Admit::Full { ring: Some(r), .. } => host.ring(r),
                _ => {}
            }
        });
    });
    assert!(
        n >= 7,
        "ticket, head, bump, check, unpublish, held, cost: {n}"
    );
}

#[test]
fn loom_host_crash_in_claim_over_a_dead_owner() {
    // The victim claims a slot whose previous owner died holding a call and a ticket (the
    // claim reclaims it first: reclaim.lease, .words, .head, .free), then claim.words,
    // claim.lease, and admits (acquire.bump, .check, and if refused .undo and release's
    // two) and dies holding.
    let n = each_crash_point("claim (with reclaim) + admit", |k, crashed| {
        crash_model(k, crashed, owner_holding, |host, _| {
            let g = host.claim(0);
            let _ = host.seg().admit(0, g, 1, 1, false);
        });
    });
    assert!(
        n >= 11,
        "reclaim's four, claim's two, bump, check, undo, held, cost: {n}"
    );
}

#[test]
fn loom_host_crash_in_reclaim_then_another_reaper() {
    // A reaper dies at each step of reclaiming a dead owner's slot; the next one finishes.
    let n = each_crash_point("reclaim, then a second reaper", |k, crashed| {
        crash_model(k, crashed, owner_holding, |host, _| {
            host.seg().reclaim(0).unwrap();
            host.ring_head();
        });
    });
    assert!(n >= 4, "lease, words, head, free: {n}");
}

#[test]
fn loom_host_crash_in_expiry_then_another_observer() {
    // An observer dies at each step of expiring a stopped owner's slot (a call and a ticket
    // held); the next observer finishes the expiry (or makes it, if the lease was not yet
    // marked), and the owner, resumed, re-arms.
    let n = each_crash_point("expire, then another observer", |k, crashed| {
        crash_model_of(Owner::Stopped, k, crashed, owner_holding, |host, g| {
            host.seg().expire(0, g).unwrap();
            host.ring_head();
        });
    });
    assert!(n >= 2, "lease, words: {n}");
}

#[test]
fn loom_host_crash_in_expiry_then_a_reaper() {
    // An observer dies at each step of expiring a silent slot (its owner, in fact dead); a
    // reaper then reclaims it.
    let n = each_crash_point("expire, then a reaper", |k, crashed| {
        crash_model(k, crashed, owner_holding, |host, g| {
            host.seg().expire(0, g).unwrap();
            host.ring_head();
        });
    });
    assert!(n >= 2, "lease, words: {n}");
}
