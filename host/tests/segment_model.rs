//! The segment protocol against a sequential reference model (proptest).
//!
//! One boxed segment, one thread; P = 1..4 "processes", each owning the slot of its index.
//! Random sequences of claims, admissions (plain or as the process's head waiter), releases of
//! held permits (current or stale), ticket publishing and unpublishing, expiries by an observer,
//! re-arms by the owner and reclaims (the owner's death) run on the segment and on a plain
//! model: per slot its lease state and generation, its published ticket and its owner's idea of
//! its generation; the permits handed out with the generation they were granted under. After
//! every operation every decision must match the model's, and so must the scan's sums, the
//! smallest ticket, every slot's lease, held, cost and head words, the high-water mark and the
//! reclaim counters. The slots start at a random generation (near the 24-bit wrap, often).

#![cfg(not(loom))]

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use hullguard_core::Reason;
use hullguard_host::{
    layout::{self, GEN_MASK, LeaseState, NO_TICKET, h, next_gen, s},
    segment::{Admit, Reclaimed, ReleaseError, Segment, SegmentConfig},
};
use proptest::{
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestRunner},
};

#[derive(Debug, Clone)]
enum Op {
    /// A process claims the slot. If the slot has a live owner, that owner is taken to have
    /// died and a new process claims its slot (`claim` reclaims it first).
    Claim(usize),
    /// The owner's admission attempt (skipped without an owner).
    Admit {
        slot: usize,
        weight: u64,
        cost: u64,
        head: bool,
    },
    /// The release of an outstanding permit (by index, modulo their number).
    Release(usize),
    /// The owner takes a ticket and publishes it as its head.
    Publish(usize),
    /// The owner unpublishes its head.
    Unpublish(usize),
    /// An observer expires the slot with the generation `lease_of` shows, or one off by one
    /// (`Some(false)`: older, `Some(true)`: newer).
    Expire { slot: usize, off: Option<bool> },
    /// The owner re-arms its slot.
    Rearm(usize),
    /// The owner dies and a reaper reclaims its slot (on a slot without an owner: a reaper
    /// that finds it free).
    Reclaim(usize),
}

#[derive(Debug, Clone)]
struct Scenario {
    processes: usize,
    /// Slots past the processes' (never claimed).
    extra: usize,
    max_concurrent: u64,
    budget: u64,
    /// Every slot's generation at the start.
    generation: u64,
    ops: Vec<Op>,
}

fn op(processes: usize) -> impl Strategy<Value = Op> {
    let slot = 0..processes;
    prop_oneof![
        3 => slot.clone().prop_map(Op::Claim),
        8 => (slot.clone(), 0..=5u64, 0..=12u64, any::<bool>()).prop_map(|(slot, weight, cost, head)| {
            Op::Admit { slot, weight, cost, head }
        }),
        5 => any::<usize>().prop_map(Op::Release),
        3 => slot.clone().prop_map(Op::Publish),
        2 => slot.clone().prop_map(Op::Unpublish),
        2 => (slot.clone(), prop_oneof![4 => Just(None), 1 => any::<bool>().prop_map(Some)])
            .prop_map(|(slot, off)| Op::Expire { slot, off }),
        2 => slot.clone().prop_map(Op::Rearm),
        1 => slot.prop_map(Op::Reclaim),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        1..=4usize,
        0..=2usize,
        1..=5u64,
        prop_oneof![Just(0u64), 1..=15u64],
        prop_oneof![Just(0u64), GEN_MASK - 3..=GEN_MASK, 0..=GEN_MASK],
    )
        .prop_flat_map(|(processes, extra, max_concurrent, budget, generation)| {
            prop::collection::vec(op(processes), 1..100).prop_map(move |ops| Scenario {
                processes,
                extra,
                max_concurrent,
                budget,
                generation,
                ops,
            })
        })
}

// ---------------------------------------------------------------------------------------------
// The model

#[derive(Debug, Clone)]
struct Slot {
    state: LeaseState,
    generation: u64,
    ticket: u64,
    /// The live owner's idea of its generation (it learns of an expiry only by re-arming).
    owner: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Permit {
    slot: usize,
    generation: u64,
    weight: u64,
    cost: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counters {
    dead: u64,
    expired: u64,
    orphaned: u64,
    permits: u64,
}

struct Model {
    slots: Vec<Slot>,
    /// Every permit granted and not yet released (stale ones too: their release is refused).
    permits: Vec<Permit>,
    hwm: usize,
    next_ticket: u64,
    max_concurrent: u64,
    budget: u64,
    counters: Counters,
}

impl Model {
    fn live(&self, p: &Permit) -> bool {
        self.slots[p.slot].generation == p.generation
    }

    /// (calls, permits, cost) held live in `slot`, or in every slot.
    fn held(&self, slot: Option<usize>) -> (u64, u64, u64) {
        self.permits
            .iter()
            .filter(|p| self.live(p) && slot.is_none_or(|s| s == p.slot))
            .fold((0, 0, 0), |(c, w, u), p| (c + 1, w + p.weight, u + p.cost))
    }

    /// The smallest published ticket and its slot.
    fn head(&self) -> Option<(u64, usize)> {
        (0..self.hwm)
            .filter(|&i| self.slots[i].ticket != NO_TICKET)
            .map(|i| (self.slots[i].ticket, i))
            .min()
    }

    fn admit(&self, slot: usize, weight: u64, cost: u64, head: bool) -> Admit {
        let full = |reason| Admit::Full { reason, ring: None };
        match (head, self.head()) {
            (true, Some((_, s))) if s == slot => {}
            (true, _) => return Admit::NotHead,
            // Not a head: it bumps first (a stale generation fails there), then refuses for
            // the waiters ahead and names the head to ring (its tentative bump may have failed
            // the head's attempt).
            (false, _) if self.slots[slot].owner != Some(self.slots[slot].generation) => {
                return Admit::Stale;
            }
            (false, Some((_, s))) => {
                return Admit::Full {
                    reason: Reason::ConcurrencyLimit,
                    ring: Some(s),
                };
            }
            (false, None) => {}
        }
        let (_, permits, units) = self.held(None);
        if permits + weight > self.max_concurrent {
            return full(Reason::ConcurrencyLimit);
        }
        if self.budget != 0 && units + cost > self.budget {
            return full(Reason::BudgetLimit);
        }
        if self.slots[slot].owner != Some(self.slots[slot].generation) {
            return Admit::Stale;
        }
        Admit::Granted
    }

    /// Zeroes `slot` under the next generation (a reclaim or an expiry): what it held.
    fn take(&mut self, slot: usize, state: LeaseState) -> Reclaimed {
        let (calls, permits, cost) = self.held(Some(slot));
        let s = &mut self.slots[slot];
        s.state = state;
        s.generation = next_gen(s.generation);
        s.ticket = NO_TICKET;
        self.counters.orphaned += calls;
        self.counters.permits += permits;
        Reclaimed {
            lease: true,
            calls,
            permits,
            cost,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The run

fn check(seg: &Segment<'_>, m: &Model, step: usize, op: &Op) -> Result<(), TestCaseError> {
    let at = || format!("after step {step} ({op:?})");
    let scan = seg.scan();
    let (calls, permits, cost) = m.held(None);
    prop_assert_eq!(
        (scan.permits, scan.calls, scan.cost),
        (permits, calls, cost),
        "scan sums {}",
        at()
    );
    prop_assert!(permits <= m.max_concurrent, "I2 {}", at());
    if m.budget != 0 {
        prop_assert!(cost <= m.budget, "budget {}", at());
    }
    let head = m.head();
    prop_assert_eq!(
        scan.min_ticket,
        head.map_or(NO_TICKET, |(t, _)| t),
        "{}",
        at()
    );
    if let Some((_, slot)) = head {
        prop_assert_eq!(scan.min_slot, slot, "{}", at());
    }
    prop_assert_eq!(seg.hwm(), m.hwm, "hwm {}", at());
    for (i, slot) in m.slots.iter().enumerate() {
        let g = slot.generation;
        let (calls, permits, cost) = m.held(Some(i));
        prop_assert_eq!(seg.lease_of(i), Ok((slot.state, g)), "slot {} {}", i, at());
        let word = |w: usize| seg.slot_word(i, w).load(SeqCst);
        prop_assert_eq!(
            layout::decode_held(word(s::HELD)),
            (g, calls, permits),
            "slot {} held {}",
            i,
            at()
        );
        prop_assert_eq!(
            layout::decode_cost(word(s::COST)),
            (g, cost),
            "slot {} cost {}",
            i,
            at()
        );
        prop_assert_eq!(word(s::HEAD), slot.ticket, "slot {} head {}", i, at());
    }
    let counter = |w: usize| seg.header(w).load(SeqCst);
    prop_assert_eq!(
        Counters {
            dead: counter(h::RECLAIMED_DEAD),
            expired: counter(h::RECLAIMED_EXPIRED),
            orphaned: counter(h::ORPHANED),
            permits: counter(h::RECLAIMED_PERMITS),
        },
        m.counters,
        "{}",
        at()
    );
    Ok(())
}

fn snapshot(words: &[AtomicU64]) -> Vec<u64> {
    words.iter().map(|w| w.load(SeqCst)).collect()
}

fn run(sc: &Scenario) -> Result<(), TestCaseError> {
    let n_slots = sc.processes + sc.extra;
    let words: Vec<AtomicU64> = (0..layout::segment_bytes(n_slots as u32) / 8)
        .map(|_| AtomicU64::new(0))
        .collect();
    let config = SegmentConfig {
        max_concurrent: sc.max_concurrent,
        budget: sc.budget,
        lease_ttl_ms: 500,
        beat_ms: 50,
        probe_ms: 50,
    };
    let seg = Segment::init(
        &words,
        n_slots as u32,
        &config,
        *b"rust test\0\0\0\0\0\0\0",
        [1; 16],
        0,
        1,
    )
    .unwrap();
    // Every slot freed at generation `sc.generation` (as a long-lived segment's are).
    let g0 = sc.generation;
    for i in 0..n_slots {
        seg.slot_word(i, s::LEASE)
            .store(layout::lease(LeaseState::Free, g0), SeqCst);
        seg.slot_word(i, s::HELD)
            .store(layout::held(g0, 0, 0), SeqCst);
        seg.slot_word(i, s::COST).store(layout::cost(g0, 0), SeqCst);
    }
    let mut m = Model {
        slots: vec![
            Slot {
                state: LeaseState::Free,
                generation: g0,
                ticket: NO_TICKET,
                owner: None,
            };
            n_slots
        ],
        permits: Vec::new(),
        hwm: 0,
        next_ticket: 0,
        max_concurrent: sc.max_concurrent,
        budget: sc.budget,
        counters: Counters::default(),
    };
    check(&seg, &m, 0, &Op::Claim(0))?;
    for (step, op) in sc.ops.iter().enumerate() {
        let step = step + 1;
        let at = || format!("step {step} ({op:?})");
        match *op {
            Op::Claim(slot) => {
                let took = m.slots[slot].state != LeaseState::Free;
                let got = seg.claim(slot, 100 + slot as u64, 7, 8, 9, 10);
                if took {
                    // The old owner died; `claim` reclaimed its slot first.
                    m.take(slot, LeaseState::Free);
                    m.counters.dead += 1;
                }
                let target = next_gen(m.slots[slot].generation);
                prop_assert_eq!(got, Ok(target), "{}", at());
                let sl = &mut m.slots[slot];
                (sl.state, sl.generation, sl.ticket, sl.owner) =
                    (LeaseState::Active, target, NO_TICKET, Some(target));
                m.hwm = m.hwm.max(slot + 1);
            }
            Op::Admit {
                slot,
                weight,
                cost,
                head,
            } => {
                let Some(generation) = m.slots[slot].owner else {
                    continue;
                };
                let want = m.admit(slot, weight, cost, head);
                let before = snapshot(&words);
                let got = seg.admit(slot, generation, weight, cost, head);
                prop_assert_eq!(got, want, "{}", at());
                if got == Admit::Granted {
                    m.permits.push(Permit {
                        slot,
                        generation,
                        weight,
                        cost,
                    });
                } else {
                    prop_assert!(snapshot(&words) == before, "a refusal wrote {}", at());
                }
            }
            Op::Release(i) => {
                if m.permits.is_empty() {
                    continue;
                }
                let p = m.permits.remove(i % m.permits.len());
                let live = m.live(&p);
                let before = snapshot(&words);
                let got = seg.release(p.slot, p.generation, p.weight, p.cost);
                if live {
                    prop_assert_eq!(got, Ok(()), "{} {:?}", at(), p);
                } else {
                    prop_assert_eq!(got, Err(ReleaseError::Stale), "{} {:?}", at(), p);
                    prop_assert!(snapshot(&words) == before, "a stale release wrote {}", at());
                }
            }
            Op::Publish(slot) => {
                if m.slots[slot].owner.is_none() {
                    continue;
                }
                let t = seg.take_ticket();
                prop_assert_eq!(t, m.next_ticket, "{}", at());
                m.next_ticket += 1;
                seg.publish(slot, t);
                m.slots[slot].ticket = t;
            }
            Op::Unpublish(slot) => {
                if m.slots[slot].owner.is_none() {
                    continue;
                }
                seg.publish(slot, NO_TICKET);
                m.slots[slot].ticket = NO_TICKET;
            }
            Op::Expire { slot, off } => {
                let (state, g) = seg.lease_of(slot).unwrap();
                let g = match off {
                    None => g,
                    Some(false) => g.wrapping_sub(1) & GEN_MASK,
                    Some(true) => next_gen(g),
                };
                let before = snapshot(&words);
                let got = seg.expire(slot, g);
                if state == LeaseState::Active && off.is_none() {
                    let want = m.take(slot, LeaseState::Expired);
                    m.counters.expired += 1;
                    prop_assert_eq!(got, Some(want), "{}", at());
                } else {
                    prop_assert_eq!(got, None, "{}", at());
                    prop_assert!(
                        snapshot(&words) == before,
                        "a refused expiry wrote {}",
                        at()
                    );
                }
            }
            Op::Rearm(slot) => {
                if m.slots[slot].owner.is_none() {
                    continue;
                }
                let got = seg.rearm(slot);
                let sl = &mut m.slots[slot];
                if sl.state == LeaseState::Expired {
                    let target = next_gen(sl.generation);
                    prop_assert_eq!(got, Some(target), "{}", at());
                    (sl.state, sl.generation, sl.owner) =
                        (LeaseState::Active, target, Some(target));
                } else {
                    prop_assert_eq!(got, None, "{}", at());
                }
            }
            Op::Reclaim(slot) => {
                let got = seg.reclaim(slot);
                if m.slots[slot].owner.is_some() {
                    let want = m.take(slot, LeaseState::Free);
                    m.counters.dead += 1;
                    m.slots[slot].owner = None;
                    prop_assert_eq!(got, Ok(want), "{}", at());
                } else {
                    prop_assert_eq!(got, Ok(Reclaimed::default()), "{}", at());
                }
            }
        }
        check(&seg, &m, step, op)?;
    }
    // Every live permit released: the ledger is empty.
    for p in std::mem::take(&mut m.permits) {
        let want = if m.live(&p) {
            Ok(())
        } else {
            Err(ReleaseError::Stale)
        };
        prop_assert_eq!(seg.release(p.slot, p.generation, p.weight, p.cost), want);
    }
    let scan = seg.scan();
    prop_assert_eq!((scan.permits, scan.calls, scan.cost), (0, 0, 0));
    Ok(())
}

/// Random operation sequences match the model step by step (`PROPTEST_CASES` overrides the
/// number of cases).
#[test]
fn segment_matches_the_reference_model() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(8000);
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        // XorShift, not ChaCha: the generator is most of a case's time in a debug build.
        rng_algorithm: RngAlgorithm::XorShift,
        ..Config::default()
    })
    .run(&scenario(), |sc| run(&sc))
    .unwrap();
}
