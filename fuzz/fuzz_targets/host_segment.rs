//! The shared-memory segment validator (docs/design.md §14.1–14.3): arbitrary words — a fresh
//! segment image with words overwritten, truncated, or raw bytes — through `Segment::new`, the
//! header check every attach runs; a segment it accepts is then read as `hullguard host show`
//! reads one (every slot's lease and words, the scan, the head, the counters) and driven
//! through the protocol as the processes attached to it would (claim, admit, release,
//! publish, reclaim, expire, finish an interrupted expiry or reclaim, rearm, free) with
//! arbitrary slots, generations, weights and costs. Never a panic nor a hang (a stray or
//! hostile writer gets `Corrupt` / `Stale`, never an index out of bounds); on an image nobody
//! overwrote, the host-wide sums never pass the limit and the budget. One input in four also
//! goes through the file path: the bytes written to a segment file in a tmpfs directory, then
//! `inspect::show` (attach: owner, mode, length, header; mapped) and its text and JSON.
#![no_main]

use std::{
    io::Write,
    os::unix::fs::OpenOptionsExt,
    path::PathBuf,
    sync::{OnceLock, atomic::AtomicU64},
};

use arbitrary::{Result, Unstructured};
use hullguard_fuzz::{pick, trace};
use hullguard_host::{
    inspect,
    layout::{self, h},
    segment::{Admit, Segment, SegmentConfig},
};
use libfuzzer_sys::fuzz_target;

/// The most slots an image has (the geometry may claim up to `MAX_SLOTS`; then the length check
/// refuses it).
const MAX_IMAGE_SLOTS: u32 = 4;

fn image(u: &mut Unstructured<'_>) -> Result<(Vec<AtomicU64>, bool)> {
    let mode = pick(u, &[6, 1, 1])?;
    if mode == 2 {
        // Raw bytes as words.
        let n = u.int_in_range(0..=(layout::segment_bytes(MAX_IMAGE_SLOTS) / 8) as u32)?;
        let words = (0..n)
            .map(|_| u.arbitrary::<u64>().map(AtomicU64::new))
            .collect::<Result<Vec<_>>>()?;
        return Ok((words, false));
    }
    let slots = u.int_in_range(1..=MAX_IMAGE_SLOTS)?;
    let config = SegmentConfig {
        max_concurrent: u.int_in_range(1..=8)?,
        budget: u.int_in_range(0..=16)?,
        lease_ttl_ms: 3000,
        beat_ms: 1000,
        probe_ms: 250,
    };
    let mut words: Vec<AtomicU64> = (0..layout::segment_bytes(slots) / 8)
        .map(|_| AtomicU64::new(0))
        .collect();
    Segment::init(
        &words,
        slots,
        &config,
        *b"fuzz\0\0\0\0\0\0\0\0\0\0\0\0",
        [7; 16],
        1,
        2,
    )
    .expect("a fresh image");
    if mode == 1 {
        // Truncated, or grown by a few words.
        let len = words.len();
        let new = if u.arbitrary()? {
            u.int_in_range(0..=len)?
        } else {
            len + u.int_in_range(1..=64)?
        };
        words.resize_with(new, || AtomicU64::new(0));
    }
    // Overwrites: mostly the header's checked words and the slots' words.
    let patches = u.int_in_range(0..=8)?;
    for _ in 0..patches {
        if words.is_empty() {
            break;
        }
        let i = match pick(u, &[2, 3, 2])? {
            0 => *u.choose(&[
                h::MAGIC,
                h::VERSION,
                h::GEOMETRY,
                h::ABI,
                h::MAX_CONCURRENT,
                h::BUDGET,
                h::LEASE_TTL_MS,
                h::BEAT_MS,
                h::PROBE_MS,
                h::FLAGS,
                h::NEXT_TICKET,
                h::HWM,
                h::ADMITTED,
            ])?,
            1 => {
                layout::HEADER_WORDS
                    + u.int_in_range(0..=MAX_IMAGE_SLOTS as usize * layout::SLOT_WORDS)?
            }
            _ => u.choose_index(words.len())?,
        };
        let v = match pick(u, &[2, 1, 1])? {
            0 => u.arbitrary()?,
            1 => *u.choose(&[
                0,
                1,
                u64::MAX,
                1 << 32,
                layout::NO_TICKET - 1,
                0xff,
                1 << 40,
            ])?,
            _ => u.int_in_range(0..=16)?,
        };
        if let Some(w) = words.get_mut(i) {
            *w.get_mut() = v;
        }
    }
    Ok((words, patches == 0 && mode == 0))
}

/// `hullguard host show`'s reading of every slot, and the rest of the read side.
fn read(seg: &Segment<'_>) {
    for i in 0..seg.hwm() {
        let _ = seg.lease_of(i);
        for k in 0..layout::SLOT_WORDS {
            let w = seg
                .slot_word(i, k)
                .load(std::sync::atomic::Ordering::SeqCst);
            let _ = (layout::decode_held(w), layout::decode_cost(w));
        }
    }
    let _ = (seg.scan(), seg.head_slot(), seg.admitted_total());
    let _ = (seg.config(), seg.creator(), seg.poisoned(), seg.n_slots());
}

/// Runs protocol steps from the fuzzer's bytes; on a clean image, checks the sums.
fn drive(u: &mut Unstructured<'_>, seg: &Segment<'_>, clean: bool) -> Result<()> {
    let c = seg.config();
    let slot = |u: &mut Unstructured<'_>| -> Result<usize> {
        Ok(match pick(u, &[6, 1])? {
            0 => u.int_in_range(0..=MAX_IMAGE_SLOTS as usize)?,
            _ => u.arbitrary()?,
        })
    };
    let mut gens = [0u64; MAX_IMAGE_SLOTS as usize + 1];
    let mut held: Vec<(usize, u64, u64, u64)> = Vec::new();
    for _ in 0..u.int_in_range(0..=40)? {
        let op = pick(u, &[3, 6, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1])?;
        if trace() {
            eprintln!(
                "step {op}: scan {:?} gens {gens:?} held {held:?}",
                seg.scan()
            );
        }
        match op {
            0 => {
                let s = slot(u)?;
                if let Ok(g) = seg.claim(s, 42, 1, 1, 5, 0)
                    && let Some(x) = gens.get_mut(s)
                {
                    *x = g;
                }
            }
            1 => {
                // Only a slot's owner admits on it (it claimed it: `gens` holds its
                // generation). On a clean image the harness keeps to that; on an overwritten
                // one anyone may (a stray writer is no worse).
                let s = slot(u)?;
                let g = match gens.get(s) {
                    Some(&g) if g != 0 && (clean || !u.ratio(1, 8)?) => g,
                    _ if clean => continue,
                    _ => u.arbitrary::<u64>()? & layout::GEN_MASK,
                };
                let w = u.int_in_range(0..=9)?;
                let cost = u.int_in_range(0..=17)?;
                let head = u.arbitrary()?;
                let a = seg.admit(s, g, w, cost, head);
                if trace() {
                    eprintln!(
                        "  admit(slot {s}, gen {g}, w {w}, cost {cost}, head {head}) = {a:?}"
                    );
                }
                if let Admit::Granted = a {
                    held.push((s, g, w, cost));
                }
            }
            2 => {
                if held.is_empty() || u.ratio(1, 8)? {
                    let _ = seg.release(slot(u)?, u.arbitrary()?, u.arbitrary()?, u.arbitrary()?);
                } else {
                    let (s, g, w, cost) = held.swap_remove(u.choose_index(held.len())?);
                    let _ = seg.release(s, g, w, cost);
                }
            }
            3 => {
                let t = if u.arbitrary()? {
                    seg.take_ticket()
                } else {
                    layout::NO_TICKET
                };
                seg.publish(slot(u)?, t);
            }
            4 => {
                let _ = seg.reclaim(slot(u)?);
            }
            5 => {
                let _ = seg.expire(slot(u)?, u.arbitrary::<u64>()? & layout::GEN_MASK);
            }
            6 => {
                let _ = seg.finish_expiry(slot(u)?, u.arbitrary::<u64>()? & layout::GEN_MASK);
            }
            7 => {
                let _ = seg.finish_reclaim(slot(u)?, u.arbitrary::<u64>()? & layout::GEN_MASK);
            }
            8 => {
                let s = slot(u)?;
                if let Some(g) = seg.rearm(s)
                    && let Some(x) = gens.get_mut(s)
                {
                    *x = g;
                }
            }
            9 => seg.free(slot(u)?, u.arbitrary::<u64>()? & layout::GEN_MASK),
            10 => seg.set_queued(slot(u)?, u.arbitrary()?),
            _ => {
                let _ = seg.ring(slot(u)?);
            }
        }
        if clean {
            let scan = seg.scan();
            assert!(
                scan.permits <= c.max_concurrent,
                "{} permits held host-wide, limit {}",
                scan.permits,
                c.max_concurrent
            );
            assert!(
                c.budget == 0 || scan.cost <= c.budget,
                "{} units held host-wide, budget {}",
                scan.cost,
                c.budget
            );
        }
    }
    read(seg);
    Ok(())
}

/// A private tmpfs directory for the file path (removed at exit).
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("hullguard-fuzz.{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a tmpfs directory");
        extern "C" fn cleanup() {
            if let Some(d) = DIR.get() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
        // SAFETY: registers a plain function to run at exit.
        unsafe { libc::atexit(cleanup) };
        d
    })
}

/// The bytes as a segment file, shown as `hullguard host show` shows it.
fn show(words: &[AtomicU64]) {
    let d = dir();
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let path = d.join(format!("hullguard.{euid}.fuzz"));
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("the segment file");
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::SeqCst).to_le_bytes())
        .collect();
    f.write_all(&bytes).expect("written");
    drop(f);
    if let Ok((info, _)) = inspect::show(d, "fuzz", false) {
        let _ = (inspect::render(&info), inspect::render_json(&info));
        let _ = (info.attached(), info.held(), info.held_by_dead());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok((words, clean)) = image(&mut u) else {
        return;
    };
    let file = u.ratio(1, 4).unwrap_or(false);
    match Segment::new(&words) {
        Err(e) => {
            let _ = e.to_string();
        }
        Ok(seg) => {
            read(&seg);
            let _ = drive(&mut u, &seg, clean);
        }
    }
    if file {
        show(&words);
    }
});
