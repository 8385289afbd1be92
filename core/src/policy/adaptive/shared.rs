//! [`SharedController`]: one controller fed from many threads without a lock.
//!
//! A controller is `&mut self` (Netflix serialises `onSample` with `synchronized`). Here every
//! finisher drops its sample into an *inbox* of two atomic words and asks for a run through the
//! same "running" / "pending" flags as the bulkhead's dispatcher
//! ([`RunFlag`](crate::run_flag::RunFlag)): whoever becomes the runner drains the
//! inbox into the controller and applies the new limit; the others return at once. So no
//! finisher ever waits, and limit updates are applied in the order the controller made them
//! (only the runner calls `set_limit`).
//!
//! ```text
//! ok    = count of successes (low COUNT_BITS) | sum of their RTTs in units of 2^UNIT_SHIFT ns
//! fail  = count of failures
//! ```
//! A drain feeds the failures, then the successes, each success with the batch's mean RTT. On a
//! single thread a batch is exactly one sample; under contention concurrent samples are
//! averaged, and a sample that finds the success count full (only while a runner is preempted
//! for thousands of calls) is dropped and counted in `dropped`.

use super::{
    AdaptiveConfig, AdaptiveConfigError, AdaptiveController, Algorithm, Controller, Outcome, Sample,
};
use crate::{
    run_flag::RunFlag,
    sync::{AtomicWord, Ordering::*, UnsafeCell, Word},
};

#[cfg(target_has_atomic = "64")]
const COUNT_BITS: u32 = 12;
#[cfg(target_has_atomic = "64")]
const UNIT_SHIFT: u32 = 10; // ≈ 1 µs
#[cfg(not(target_has_atomic = "64"))]
const COUNT_BITS: u32 = 6;
#[cfg(not(target_has_atomic = "64"))]
const UNIT_SHIFT: u32 = 20; // ≈ 1 ms

const COUNT_MASK: Word = (1 << COUNT_BITS) - 1;
const SUM_MAX: Word = Word::MAX >> COUNT_BITS;

/// The controller's published state, read without the runner's flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveStats {
    /// `"aimd"` or `"gradient2"`.
    pub algorithm: Algorithm,
    /// The limit the controller last applied.
    pub limit: u64,
    /// The floor.
    pub min_limit: u64,
    /// The ceiling.
    pub max_limit: u64,
    /// Samples fed (successes and failures; ignored outcomes are not samples).
    pub samples_total: u64,
    /// Samples that lowered the limit.
    pub decreases_total: u64,
    /// The RTT of the last success fed, in ns (0 before any).
    pub last_rtt_ns: u64,
    /// Gradient2's long-term RTT average in ns (0 for AIMD or before any success).
    pub long_rtt_ns: u64,
}

/// A [`AdaptiveController`] shared by threads; see the module docs.
pub struct SharedController {
    flag: RunFlag,
    ctl: UnsafeCell<AdaptiveController>,
    ok: AtomicWord,
    fail: AtomicWord,
    inflight: AtomicWord,
    /// A limit the host set by hand (`set_limit`), for the runner to restart from; 0 = none.
    reseed: AtomicWord,
    // Published by the runner (Relaxed: they are figures, not synchronisation).
    limit: AtomicWord,
    samples: AtomicWord,
    decreases: AtomicWord,
    dropped: AtomicWord,
    last_rtt: AtomicWord,
    long_rtt: AtomicWord,
    algorithm: Algorithm,
    min_limit: u64,
    max_limit: u64,
}

// SAFETY: `ctl` is only touched by the thread that holds the runner flag (`RunFlag::enter`
// returned true and `try_leave` has not yet succeeded), so accesses to it never overlap; the
// flag's AcqRel RMWs order one runner's writes before the next runner's reads. Every other
// field is atomic.
unsafe impl Sync for SharedController {}
// SAFETY: the controller is plain data (`f64`s and integers).
unsafe impl Send for SharedController {}

impl core::fmt::Debug for SharedController {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedController")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl SharedController {
    /// Validates `cfg` and builds its controller at `initial_limit`.
    ///
    /// # Errors
    /// As [`AdaptiveConfig::validate`].
    pub fn new(cfg: &AdaptiveConfig) -> Result<Self, AdaptiveConfigError> {
        let ctl = AdaptiveController::new(cfg)?;
        Ok(Self {
            flag: RunFlag::new(),
            limit: AtomicWord::new(ctl.limit() as Word),
            ctl: UnsafeCell::new(ctl),
            ok: AtomicWord::new(0),
            fail: AtomicWord::new(0),
            inflight: AtomicWord::new(0),
            reseed: AtomicWord::new(0),
            samples: AtomicWord::new(0),
            decreases: AtomicWord::new(0),
            dropped: AtomicWord::new(0),
            last_rtt: AtomicWord::new(0),
            long_rtt: AtomicWord::new(0),
            algorithm: cfg.algorithm,
            min_limit: cfg.min_limit,
            max_limit: cfg.max_limit,
        })
    }

    /// The limit the controller last produced.
    pub fn limit(&self) -> u64 {
        self.limit.load(Relaxed) as u64
    }

    /// Samples dropped because the inbox was full (see the module docs).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed) as u64
    }

    /// The published state.
    pub fn stats(&self) -> AdaptiveStats {
        AdaptiveStats {
            algorithm: self.algorithm,
            limit: self.limit(),
            min_limit: self.min_limit,
            max_limit: self.max_limit,
            samples_total: self.samples.load(Relaxed) as u64,
            decreases_total: self.decreases.load(Relaxed) as u64,
            last_rtt_ns: self.last_rtt.load(Relaxed) as u64,
            long_rtt_ns: self.long_rtt.load(Relaxed) as u64,
        }
    }

    /// Feeds one sample. `Ignored` does nothing. Otherwise, if no other thread is feeding,
    /// this thread feeds its sample directly, then drains the inbox; if one is, the sample
    /// joins the inbox for that runner. `apply(limit)` is called for every limit change, in
    /// order, by the runner only. Never waits.
    pub fn feed(&self, s: Sample, mut apply: impl FnMut(u64)) {
        let outcome = s.outcome.for_limit();
        if outcome == Outcome::Ignored {
            return;
        }
        if self.flag.try_enter_idle() {
            // Uncontended: our sample goes straight in (exact RTT, no inbox RMWs).
            // SAFETY: we hold the runner flag (module docs): no other access to `ctl` overlaps.
            self.ctl
                .with_mut(|c| self.step(unsafe { &mut *c }, s, &mut apply));
        } else {
            // The runner feeds inbox samples with the latest pusher's in-flight count.
            self.inflight
                .store(s.inflight.min(Word::MAX as u64) as Word, Relaxed);
            self.push(s.rtt_ns, outcome);
            if !self.flag.enter() {
                return; // the runner will drain it
            }
        }
        self.run(&mut apply);
    }

    /// The host set the limit to `limit` by hand: the controller restarts from it at its next
    /// run (here, or by the thread feeding now), which also applies it again so the bulkhead's
    /// limit and the controller's agree at the end whatever the interleaving. Never waits.
    pub fn reseed(&self, limit: u64, mut apply: impl FnMut(u64)) {
        let l = limit.clamp(self.min_limit, self.max_limit).max(1);
        // Release: the runner's Acquire swap sees it.
        self.reseed.store(l.min(Word::MAX as u64) as Word, Release);
        if self.flag.enter() {
            self.run(&mut apply);
        }
    }

    /// Runner only (the flag is held): drains until no request is pending, then leaves.
    fn run(&self, apply: &mut impl FnMut(u64)) {
        loop {
            // SAFETY: the caller holds the runner flag (module docs).
            self.ctl.with_mut(|c| self.drain(unsafe { &mut *c }, apply));
            if self.flag.try_leave() {
                return;
            }
            self.flag.begin_pass();
        }
    }

    /// Puts a sample into the inbox (module docs).
    fn push(&self, rtt_ns: u64, outcome: Outcome) {
        if outcome != Outcome::Success {
            // Release: the runner's Acquire swap sees it.
            self.fail.fetch_add(1, Release);
            return;
        }
        let units = ((rtt_ns >> UNIT_SHIFT).max(1)).min(SUM_MAX as u64) as Word;
        let mut cur = self.ok.load(Relaxed);
        loop {
            if cur & COUNT_MASK == COUNT_MASK || (cur >> COUNT_BITS) > SUM_MAX - units {
                self.dropped.fetch_add(1, Relaxed);
                return;
            }
            let new = cur + (units << COUNT_BITS) + 1;
            // Release: the runner's Acquire swap sees it; Relaxed retry.
            match self.ok.compare_exchange_weak(cur, new, Release, Relaxed) {
                Ok(_) => return,
                Err(a) => cur = a,
            }
        }
    }

    /// Runner only: one sample into the controller; publishes and applies a changed limit.
    /// The published figures have one writer (the runner), so they are plain stores.
    fn step(&self, c: &mut AdaptiveController, s: Sample, apply: &mut impl FnMut(u64)) {
        let prev = c.limit();
        let l = c.on_sample(s);
        self.samples
            .store(self.samples.load(Relaxed).wrapping_add(1), Relaxed);
        if s.outcome.for_limit() == Outcome::Success {
            self.last_rtt
                .store(s.rtt_ns.min(Word::MAX as u64) as Word, Relaxed);
            if let AdaptiveController::Gradient2(g) = c {
                let long = g.long_rtt_ns() as u64;
                self.long_rtt
                    .store(long.min(Word::MAX as u64) as Word, Relaxed);
            }
        }
        if l != prev {
            if l < prev {
                self.decreases
                    .store(self.decreases.load(Relaxed).wrapping_add(1), Relaxed);
            }
            self.limit.store(l as Word, Relaxed);
            apply(l);
        }
    }

    /// Runner only: feeds everything in the inbox (failures, then the successes at their mean
    /// RTT). Loads first, so an empty inbox costs no RMW.
    fn drain(&self, c: &mut AdaptiveController, apply: &mut impl FnMut(u64)) {
        if self.reseed.load(Relaxed) != 0 {
            // Acquire: pairs with `reseed`'s Release store.
            let l = self.reseed.swap(0, Acquire) as u64;
            if l != 0 {
                c.reseed(l);
                let l = c.limit();
                self.limit.store(l as Word, Relaxed);
                apply(l);
            }
        }
        let inflight = self.inflight.load(Relaxed) as u64;
        // Acquire (the swap): sees the pushes' Release.
        let fails = if self.fail.load(Relaxed) != 0 {
            self.fail.swap(0, Acquire) as u64
        } else {
            0
        };
        let ok = if self.ok.load(Relaxed) != 0 {
            self.ok.swap(0, Acquire)
        } else {
            0
        };
        for _ in 0..fails {
            let s = Sample {
                rtt_ns: 0,
                inflight,
                outcome: Outcome::Failure,
            };
            self.step(c, s, apply);
        }
        let count = (ok & COUNT_MASK) as u64;
        if let Some(mean) = ((ok >> COUNT_BITS) as u64).checked_div(count) {
            let rtt_ns = mean << UNIT_SHIFT;
            for _ in 0..count {
                let s = Sample {
                    rtt_ns,
                    inflight,
                    outcome: Outcome::Success,
                };
                self.step(c, s, apply);
            }
        }
    }
}
