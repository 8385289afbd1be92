//! Segment validation and the protocol over hostile words, fuzzed (proptest).
//!
//! Everything read from a segment is untrusted: another process, a stray writer or a hostile
//! user may have written any word. [`Segment::new`] must answer `Ok` or `Err` for any header
//! and never panic; and on a segment it accepted, every operation must return (never panic,
//! never spin) whatever its slot words hold — here with random slot words and a hostile writer
//! scribbling between operations. Everything runs on the test thread: nothing else writes, so
//! every compare-and-swap loop must end; a watchdog thread fails the run (naming the operation)
//! if one operation makes no progress for a minute instead of letting `cargo test` hang.
//!
//! Also: a word slice shorter than its geometry is refused `Length` (with both sizes), and an
//! image of another layout version is refused `Version` with a message naming both versions.

#![cfg(not(loom))]

use std::{
    io::Write,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering::SeqCst},
    },
    thread,
    time::{Duration, Instant},
};

use hullguard_host::{
    layout::{self, GEN_MASK, LeaseState, NO_TICKET, h, s},
    segment::{Admit, Invalid, Segment, SegmentConfig},
};
use proptest::{
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestRunner},
};

// ---------------------------------------------------------------------------------------------
// Images

const CREATOR: [u8; 16] = *b"rust 0.1.0\0\0\0\0\0\0";

fn words(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

fn image(n_slots: u32, config: &SegmentConfig) -> Vec<AtomicU64> {
    let w = words(layout::segment_bytes(n_slots) / 8);
    Segment::init(&w, n_slots, config, CREATOR, [7; 16], 1_700_000_000_000, 42).unwrap();
    w
}

fn of(values: &[u64]) -> Vec<AtomicU64> {
    values.iter().map(|&v| AtomicU64::new(v)).collect()
}

fn geometry(n_slots: u64) -> u64 {
    layout::HEADER_WORDS as u64 | (layout::SLOT_WORDS as u64) << 16 | n_slots << 32
}

fn version(v: u32) -> u64 {
    v as u64 | (layout::ENDIAN_PROBE as u64) << 32
}

/// `cases` cases, nothing persisted; XorShift, not ChaCha: the generator is most of a case's
/// time in a debug build (`PROPTEST_RNG_SEED` still replays a run).
fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::XorShift,
        ..Config::default()
    })
}

/// A valid configuration.
fn config() -> BoxedStrategy<SegmentConfig> {
    (
        prop_oneof![1..=8u64, Just(layout::MAX_HOST_PERMITS)],
        prop_oneof![Just(0u64), 1..=20u64, Just(layout::MAX_HOST_BUDGET)],
        1..=1000u64,
        0..=1000u64,
        1..=1000u64,
    )
        .prop_map(
            |(max_concurrent, budget, beat_ms, extra, probe_ms)| SegmentConfig {
                max_concurrent,
                budget,
                lease_ttl_ms: beat_ms + extra,
                beat_ms,
                probe_ms,
            },
        )
        .boxed()
}

/// A hostile word: random, a boundary, or a plausible encoding with random fields (so the
/// decoders' deeper paths are reached, not only "does not decode").
fn word() -> BoxedStrategy<u64> {
    prop_oneof![
        3 => any::<u64>(),
        2 => 0..8u64,
        2 => prop::sample::select(vec![
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            layout::MAX_HOST_PERMITS,
            layout::MAX_HOST_PERMITS + 1,
            layout::MAX_HOST_BUDGET,
            layout::MAX_HOST_BUDGET + 1,
            GEN_MASK,
            NO_TICKET,
            layout::MAGIC,
            version(layout::LAYOUT_VERSION),
        ]),
        // lease words (states 0..=5: four valid, two not), with any generation
        2 => (0..6u64, any::<u64>()).prop_map(|(state, g)| state | (g & GEN_MASK) << 8),
        // held words
        2 => (any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(g, calls, permits)| layout::held(g, calls, permits)),
        // cost words
        2 => (any::<u64>(), any::<u64>()).prop_map(|(g, units)| layout::cost(g, units)),
        // geometry words with any slot count
        1 => any::<u32>().prop_map(|n| geometry(n as u64)),
        1 => (0..8u32).prop_map(|n| geometry(n as u64)),
    ]
    .boxed()
}

/// One slot's 16 words: clean; or plausible (a lease, held and cost words under nearby
/// generations with small counts, mostly no ticket) with a few words hostile; or all hostile.
/// Clean and plausible slots reach the protocol's deeper paths (grants, releases, reclaims that
/// find something). Boxed throughout: a debug build's unboxed value trees take hundreds of KB of
/// stack.
fn slot_words() -> BoxedStrategy<Vec<u64>> {
    fn near(g: u64) -> BoxedStrategy<u64> {
        prop_oneof![
            4 => Just(g),
            1 => (-2..=2i64).prop_map(move |d| g.wrapping_add(d as u64) & GEN_MASK),
            1 => any::<u64>(),
        ]
        .boxed()
    }
    let generation = prop_oneof![0..4u64, GEN_MASK - 2..=GEN_MASK, 0..=GEN_MASK].boxed();
    let plausible = (0..4u64, generation)
        .prop_flat_map(|(state, g)| {
            let held = (near(g), 0..4u64, 0..6u64)
                .prop_map(|(g, c, p)| layout::held(g, c, p))
                .boxed();
            let cost = (near(g), prop_oneof![0..8u64, any::<u64>()].boxed())
                .prop_map(|(g, u)| layout::cost(g, u))
                .boxed();
            let head = prop_oneof![4 => Just(NO_TICKET), 1 => 0..8u64, 1 => any::<u64>()].boxed();
            let rest = prop::collection::vec(
                prop_oneof![0..4u64, any::<u64>()].boxed(),
                layout::SLOT_WORDS - 4,
            )
            .boxed();
            let hostile = prop::collection::vec((0..layout::SLOT_WORDS, word()), 0..3).boxed();
            (Just(state | g << 8), held, cost, head, rest, hostile)
                .prop_map(|(lease, held, cost, head, rest, hostile)| {
                    let mut w = vec![lease, held, cost, head];
                    w.extend(rest);
                    for (i, v) in hostile {
                        w[i] = v;
                    }
                    w
                })
                .boxed()
        })
        .boxed();
    // A clean slot: free or active, nothing held, no ticket.
    let clean = (0..2u64, 0..=GEN_MASK)
        .prop_map(|(state, g)| {
            let mut w = vec![
                state | g << 8,
                layout::held(g, 0, 0),
                layout::cost(g, 0),
                NO_TICKET,
            ];
            w.resize(layout::SLOT_WORDS, 0);
            w
        })
        .boxed();
    let hostile = prop::collection::vec(word(), layout::SLOT_WORDS).boxed();
    prop_oneof![2 => clean, 3 => plausible, 1 => hostile].boxed()
}

/// Four slots' words (a segment's geometry may claim fewer; the rest are past its end).
fn slots_words() -> BoxedStrategy<Vec<u64>> {
    prop::collection::vec(slot_words(), 4)
        .prop_map(|v| v.concat())
        .boxed()
}

// ---------------------------------------------------------------------------------------------
// The watchdog

#[derive(Default)]
struct Progress {
    beat: AtomicU64,
    last: Mutex<String>,
}

impl Progress {
    fn at(&self, what: impl FnOnce() -> String) {
        self.beat.fetch_add(1, SeqCst);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = what();
    }
}

/// Fails the whole run (naming the operation) if one operation makes no progress for
/// `STALL`: an operation that spins on hostile words would otherwise hang `cargo test`. Only a
/// stall counts, not slowness: a busy machine cannot trip it.
struct Watchdog {
    progress: Arc<Progress>,
    done: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

const STALL: Duration = Duration::from_secs(60);

impl Watchdog {
    fn start() -> Self {
        let progress = Arc::new(Progress::default());
        let done = Arc::new(AtomicBool::new(false));
        let (p, d) = (progress.clone(), done.clone());
        let thread = thread::spawn(move || {
            let mut seen = p.beat.load(SeqCst);
            let mut since = Instant::now();
            // Bounded: it ends when the test drops the guard (the test's own runtime), or
            // after one stall.
            while !d.load(SeqCst) {
                thread::park_timeout(Duration::from_millis(500));
                let now = p.beat.load(SeqCst);
                if now != seen {
                    (seen, since) = (now, Instant::now());
                } else if since.elapsed() >= STALL {
                    let last = p.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    // Straight to the process's stderr: the test harness captures `eprintln!`
                    // and would drop it at the exit.
                    let _ = writeln!(
                        std::io::stderr(),
                        "segment_fuzz: no progress for {STALL:?}: spinning in {last}"
                    );
                    std::process::exit(101);
                }
            }
        });
        Watchdog {
            progress,
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Operations on an accepted segment

/// The generation an operation passes.
#[derive(Debug, Clone, Copy)]
enum Gen {
    /// The slot's lease generation (what an owner or an observer would pass).
    Current,
    /// Off by a little (a stale or a future permit).
    Near(i8),
    /// Anything (`u64::MAX` only where the callee merely compares it: see
    /// `caller_arguments_out_of_domain`).
    Any(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Scan,
    Admit {
        slot: usize,
        generation: Gen,
        weight: u64,
        cost: u64,
        head: bool,
    },
    Release {
        slot: usize,
        generation: Gen,
        weight: u64,
        cost: u64,
    },
    Reclaim(usize),
    Expire(usize, Gen),
    Rearm(usize),
    Claim(usize),
    Publish(usize, u64),
    TakeTicket,
    LeaseOf(usize),
    Config,
    Ring(usize),
    Free(usize, Gen),
    SetQueued(usize, u64),
    /// Another process scribbles word `word` of slot `slot` between operations.
    Poke {
        slot: usize,
        word: usize,
        value: u64,
    },
    /// ... or a header word (a counter, the ticket counter, the high-water mark, the flags).
    PokeHeader(usize, u64),
}

/// Slots in range and a little past `n_slots` (the out-of-range fallback word).
const SLOT_RANGE: usize = layout::MAX_SLOTS as usize + 2;

fn generation() -> BoxedStrategy<Gen> {
    prop_oneof![
        4 => Just(Gen::Current),
        2 => (-2..=2i8).prop_map(Gen::Near),
        1 => any::<u64>().prop_map(Gen::Any),
        1 => (0..=GEN_MASK).prop_map(Gen::Any),
    ]
    .boxed()
}

/// A slot index: mostly small (the images have few slots), sometimes anywhere in range or
/// just past the largest segment.
fn slot() -> BoxedStrategy<usize> {
    prop_oneof![8 => 0..6usize, 1 => 0..SLOT_RANGE].boxed()
}

fn op() -> BoxedStrategy<Op> {
    prop_oneof![
        2 => Just(Op::Scan),
        6 => (
            slot(),
            generation(),
            prop_oneof![0..10u64, any::<u64>()],
            // `cost` up to the largest budget: past it, see `caller_arguments_out_of_domain`.
            prop_oneof![0..30u64, 0..=layout::MAX_HOST_BUDGET],
            any::<bool>(),
        )
            .prop_map(|(slot, generation, weight, cost, head)| Op::Admit {
                slot,
                generation,
                weight,
                cost,
                head,
            }),
        4 => (slot(), generation(), prop_oneof![0..10u64, any::<u64>()], prop_oneof![0..30u64, any::<u64>()])
            .prop_map(|(slot, generation, weight, cost)| Op::Release {
                slot,
                generation,
                weight,
                cost,
            }),
        3 => slot().prop_map(Op::Reclaim),
        3 => (slot(), generation()).prop_map(|(s, g)| Op::Expire(s, g)),
        2 => slot().prop_map(Op::Rearm),
        3 => slot().prop_map(Op::Claim),
        2 => (slot(), prop_oneof![any::<u64>(), Just(NO_TICKET)]).prop_map(|(s, t)| Op::Publish(s, t)),
        1 => Just(Op::TakeTicket),
        1 => slot().prop_map(Op::LeaseOf),
        1 => Just(Op::Config),
        1 => slot().prop_map(Op::Ring),
        1 => (slot(), generation()).prop_map(|(s, g)| Op::Free(s, g)),
        1 => (slot(), any::<u64>()).prop_map(|(s, q)| Op::SetQueued(s, q)),
        3 => (0..6usize, 0..layout::SLOT_WORDS, word())
            .prop_map(|(slot, word, value)| Op::Poke { slot, word, value }),
        1 => (
            prop::sample::select(vec![h::NEXT_TICKET, h::HWM, h::FLAGS, h::ADMITTED, h::ORPHANED, h::RECLAIMED_DEAD]),
            word(),
        )
            .prop_map(|(w, v)| Op::PokeHeader(w, v)),
    ].boxed()
}

fn resolve(seg: &Segment<'_>, slot: usize, generation: Gen) -> u64 {
    let current = (seg.slot_word(slot, s::LEASE).load(SeqCst) >> 8) & GEN_MASK;
    match generation {
        Gen::Current => current,
        Gen::Near(d) => current.wrapping_add(d as i64 as u64) & GEN_MASK,
        Gen::Any(g) => g,
    }
}

/// Runs `ops` on an accepted segment: every call must return. Where nothing but this thread
/// writes, a few outcomes are certain even on hostile words; those are checked too.
fn exercise(seg: &Segment<'_>, words: &[AtomicU64], ops: &[Op], progress: &Progress) {
    let n = seg.n_slots();
    let lease = |slot: usize| layout::decode_lease(seg.slot_word(slot, s::LEASE).load(SeqCst));
    for op in ops {
        progress.at(|| format!("{op:?} on {n} slots"));
        match *op {
            Op::Scan => {
                let scan = seg.scan();
                assert!(
                    scan.min_ticket == NO_TICKET || scan.min_slot < n,
                    "{scan:?}"
                );
            }
            Op::Admit {
                slot,
                generation,
                weight,
                cost,
                head,
            } => {
                let g = resolve(seg, slot, generation);
                match seg.admit(slot, g, weight, cost, head) {
                    Admit::Full { ring: Some(r), .. } => assert!(r < n),
                    Admit::Granted => assert!(weight <= seg.config().max_concurrent),
                    _ => {}
                }
            }
            Op::Release {
                slot,
                generation,
                weight,
                cost,
            } => {
                let g = resolve(seg, slot, generation);
                let _ = seg.release(slot, g, weight, cost);
            }
            Op::Reclaim(slot) => {
                let r = seg.reclaim(slot);
                if r.is_ok_and(|r| r.lease) && slot < n {
                    assert!(matches!(lease(slot), Some((LeaseState::Free, _))));
                }
            }
            Op::Expire(slot, generation) => {
                // `u64::MAX` overflows `next_gen`: see `caller_arguments_out_of_domain`.
                let g = resolve(seg, slot, generation).min(u64::MAX - 1);
                if seg.expire(slot, g).is_some() && slot < n {
                    assert_eq!(
                        lease(slot),
                        Some((LeaseState::Expired, layout::next_gen(g)))
                    );
                }
            }
            Op::Rearm(slot) => {
                if let Some(g) = seg.rearm(slot).filter(|_| slot < n) {
                    assert_eq!(lease(slot), Some((LeaseState::Active, g)));
                }
            }
            Op::Claim(slot) => {
                if let Some(g) = seg.claim(slot, 7, 8, 9, 10, 11).ok().filter(|_| slot < n) {
                    assert_eq!(lease(slot), Some((LeaseState::Active, g)));
                    assert_eq!(seg.slot_word(slot, s::HEAD).load(SeqCst), NO_TICKET);
                    assert!(seg.hwm() > slot);
                }
            }
            Op::Publish(slot, ticket) => seg.publish(slot, ticket),
            Op::TakeTicket => {
                let _ = seg.take_ticket();
            }
            Op::LeaseOf(slot) => {
                let _ = seg.lease_of(slot);
            }
            Op::Config => {
                let _ = (seg.config(), seg.creator(), seg.hwm(), seg.poisoned());
            }
            Op::Ring(slot) => {
                let _ = seg.ring(slot);
            }
            Op::Free(slot, generation) => {
                let g = resolve(seg, slot, generation).min(u64::MAX - 1);
                seg.free(slot, g);
            }
            Op::SetQueued(slot, q) => seg.set_queued(slot, q),
            Op::Poke { slot, word, value } => {
                let i = layout::HEADER_WORDS + slot * layout::SLOT_WORDS + word;
                if let Some(w) = words.get(i) {
                    w.store(value, SeqCst);
                }
            }
            Op::PokeHeader(w, v) => words[w].store(v, SeqCst),
        }
    }
    let scan = seg.scan();
    assert!(scan.min_ticket == NO_TICKET || scan.min_slot < n);
}

/// What `Segment::new` promises about a segment it accepts.
fn check_accepted(seg: &Segment<'_>, words: &[AtomicU64]) {
    let n = seg.n_slots();
    assert!((1..=layout::MAX_SLOTS as usize).contains(&n));
    assert!(layout::segment_bytes(n as u32) <= words.len() * 8);
    let c = seg.config();
    assert!((1..=layout::MAX_HOST_PERMITS).contains(&c.max_concurrent));
    assert!(c.budget <= layout::MAX_HOST_BUDGET);
    assert!(c.beat_ms > 0 && c.probe_ms > 0 && c.lease_ttl_ms >= c.beat_ms);
}

// ---------------------------------------------------------------------------------------------
// Tests

/// Any words at all, of any length up to a few slots (a random prefix of the header made valid
/// so the later checks are reached): `new` answers, and whatever it accepts survives every
/// operation.
#[test]
fn random_words_never_panic() {
    let dog = Watchdog::start();
    let strategy = (
        prop::collection::vec(
            word(),
            0..=layout::HEADER_WORDS + 4 * layout::SLOT_WORDS + 3,
        ),
        0..=4usize,
        0..=5u64,
        prop::collection::vec(op(), 0..40),
    );
    runner(1000)
        .run(&strategy, |(values, valid, n_slots, ops)| {
            let mut values = values;
            let prefix = [
                layout::MAGIC,
                version(layout::LAYOUT_VERSION),
                geometry(n_slots),
                layout::ABI_FLAGS as u64,
            ];
            for (v, p) in values.iter_mut().zip(&prefix[..valid]) {
                *v = *p;
            }
            let words = of(&values);
            dog.progress
                .at(|| format!("Segment::new on {} words", words.len()));
            match Segment::new(&words) {
                Ok(seg) => {
                    check_accepted(&seg, &words);
                    exercise(&seg, &words, &ops, &dog.progress);
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
            Ok(())
        })
        .unwrap();
}

/// A valid image with one to a few header words changed (any word; the checked ones and the
/// configuration often), and random slot words: `new` answers; when it accepts, its promises
/// hold and every operation returns.
#[test]
fn mutated_images_never_panic() {
    let dog = Watchdog::start();
    let index = prop_oneof![
        4 => 0..4usize,
        4 => h::MAX_CONCURRENT..=h::FLAGS,
        1 => prop::sample::select(vec![h::NEXT_TICKET, h::HWM]),
        1 => 0..layout::HEADER_WORDS,
    ];
    let strategy = (
        1..=4u32,
        config(),
        prop::collection::vec((index, word()), 1..=4),
        // slot words: 4 slots' worth (a mutated geometry may claim fewer, or more)
        slots_words(),
        any::<bool>(),
        prop::collection::vec(op(), 0..40),
    );
    let accepted = std::cell::Cell::new(0u32);
    runner(4000)
        .run(
            &strategy,
            |(n_slots, config, mutations, slots, hostile, ops)| {
                let words = image(n_slots, &config);
                for (i, v) in mutations {
                    words[i].store(v, SeqCst);
                }
                if hostile {
                    for (w, v) in words[layout::HEADER_WORDS..].iter().zip(slots) {
                        w.store(v, SeqCst);
                    }
                }
                dog.progress.at(|| "Segment::new on a mutated image".into());
                match Segment::new(&words) {
                    Ok(seg) => {
                        accepted.set(accepted.get() + 1);
                        check_accepted(&seg, &words);
                        exercise(&seg, &words, &ops, &dog.progress);
                    }
                    Err(e) => {
                        let _ = e.to_string();
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    // The mutations are not all refusals: the accepted path was exercised.
    let accepted = accepted.get();
    assert!(accepted > 200, "only {accepted} mutated images accepted");
}

/// Valid headers, every slot word random (often a plausible encoding), the high-water mark and
/// the ticket counter anywhere, and a hostile writer between operations: every operation
/// returns.
#[test]
fn hostile_slot_words_never_panic_or_spin() {
    let dog = Watchdog::start();
    let strategy = (
        1..=4u32,
        config(),
        slots_words(),
        prop_oneof![0..=6u64, any::<u64>()],
        any::<u64>(),
        prop::collection::vec(op(), 1..60),
    );
    runner(4000)
        .run(&strategy, |(n_slots, config, slots, hwm, ticket, ops)| {
            let words = image(n_slots, &config);
            for (w, v) in words[layout::HEADER_WORDS..].iter().zip(slots) {
                w.store(v, SeqCst);
            }
            words[h::HWM].store(hwm, SeqCst);
            words[h::NEXT_TICKET].store(ticket, SeqCst);
            let seg = Segment::new(&words).expect("the header is valid");
            exercise(&seg, &words, &ops, &dog.progress);
            Ok(())
        })
        .unwrap();
}

/// A word slice shorter than its header's geometry says is refused `Length`, with both sizes.
#[test]
fn short_slices_are_refused_length() {
    let strategy = (1..=64u32, any::<prop::sample::Index>());
    runner(500)
        .run(&strategy, |(n_slots, cut)| {
            let config = SegmentConfig {
                max_concurrent: 4,
                budget: 0,
                lease_ttl_ms: 1000,
                beat_ms: 100,
                probe_ms: 50,
            };
            let words = image(n_slots, &config);
            let need = layout::segment_bytes(n_slots);
            let len = cut.index(words.len()); // 0 ..= len - 1: always short
            let short = &words[..len];
            let e = Segment::new(short).unwrap_err();
            let want = if len < layout::HEADER_WORDS {
                layout::HEADER_WORDS * 8
            } else {
                need
            };
            prop_assert_eq!(
                e.clone(),
                Invalid::Length {
                    need: want,
                    have: len * 8
                }
            );
            let msg = e.to_string();
            prop_assert!(msg.contains(&(len * 8).to_string()), "{}", msg);
            prop_assert!(msg.contains(&want.to_string()), "{}", msg);
            // The full image is accepted.
            prop_assert_eq!(Segment::new(&words).unwrap().n_slots(), n_slots as usize);
            Ok(())
        })
        .unwrap();
}

/// A geometry that claims more slots than the words hold is refused `Length` too.
#[test]
fn geometry_past_the_end_is_refused_length() {
    let strategy = (1..=8u32, 1..=layout::MAX_SLOTS);
    runner(300)
        .run(&strategy, |(n_slots, claimed)| {
            let config = SegmentConfig {
                max_concurrent: 4,
                budget: 0,
                lease_ttl_ms: 1000,
                beat_ms: 100,
                probe_ms: 50,
            };
            let words = image(n_slots, &config);
            words[h::GEOMETRY].store(geometry(claimed as u64), SeqCst);
            let got = Segment::new(&words).map(|seg| seg.n_slots());
            if claimed <= n_slots {
                prop_assert_eq!(got, Ok(claimed as usize));
            } else {
                prop_assert_eq!(
                    got,
                    Err(Invalid::Length {
                        need: layout::segment_bytes(claimed),
                        have: layout::segment_bytes(n_slots),
                    })
                );
            }
            Ok(())
        })
        .unwrap();
}

/// An image of another layout version is refused `Version`, and the message names both the
/// segment's version and this library's.
#[test]
fn other_layout_versions_are_refused() {
    let config = SegmentConfig {
        max_concurrent: 4,
        budget: 10,
        lease_ttl_ms: 1000,
        beat_ms: 100,
        probe_ms: 50,
    };
    // The next version, exactly.
    let words = image(2, &config);
    words[h::VERSION].store(version(layout::LAYOUT_VERSION + 1), SeqCst);
    let e = Segment::new(&words).unwrap_err();
    assert_eq!(
        e,
        Invalid::Version {
            found: layout::LAYOUT_VERSION + 1
        }
    );
    assert_eq!(e.to_string(), "layout version 2, this library reads 1");

    let strategy = any::<u32>().prop_filter("another version", |v| *v != layout::LAYOUT_VERSION);
    runner(500)
        .run(&strategy, |v| {
            let words = image(1, &config);
            words[h::VERSION].store(version(v), SeqCst);
            let e = Segment::new(&words).unwrap_err();
            prop_assert_eq!(e.clone(), Invalid::Version { found: v });
            let msg = e.to_string();
            prop_assert!(msg.contains(&format!("layout version {v}")), "{}", msg);
            prop_assert!(
                msg.contains(&format!("reads {}", layout::LAYOUT_VERSION)),
                "{}",
                msg
            );
            Ok(())
        })
        .unwrap();
}

/// Caller arguments outside what the library's own callers pass — a slot index near
/// `usize::MAX`, the generation `u64::MAX`, a cost past the largest budget on a segment with no
/// budget — still must not panic (`slot_word` documents that a bad index only falls back to the
/// header's scratch word). This found integer overflows in `slot_word`, `claim`, `next_gen` and
/// `bump`.
#[test]
fn caller_arguments_out_of_domain() {
    let config = SegmentConfig {
        max_concurrent: 4,
        budget: 0,
        lease_ttl_ms: 1000,
        beat_ms: 100,
        probe_ms: 50,
    };
    let words = image(2, &config);
    let seg = Segment::new(&words).unwrap();
    let g = seg.claim(0, 1, 2, 3, 4, 5).unwrap();
    // A cost past the largest budget, with no budget: the bump adds it to the units.
    assert_eq!(seg.admit(0, g, 1, 5, false), Admit::Granted);
    let _ = seg.admit(0, g, 1, u64::MAX, false);
    let _ = seg.admit(0, g, 1, layout::MAX_HOST_BUDGET + 1, false);
    // The largest generation.
    assert_eq!(seg.expire(0, u64::MAX), None);
    seg.free(1, u64::MAX);
    // Slots near `usize::MAX`.
    for slot in [usize::MAX, usize::MAX / layout::SLOT_WORDS, usize::MAX - 1] {
        let _ = seg.lease_of(slot);
        let _ = seg.admit(slot, g, 1, 0, false);
        let _ = seg.release(slot, g, 1, 0);
        let _ = seg.reclaim(slot);
        let _ = seg.expire(slot, g);
        let _ = seg.rearm(slot);
        let _ = seg.claim(slot, 1, 2, 3, 4, 5);
        seg.publish(slot, 1);
        let _ = seg.ring(slot);
    }
}
