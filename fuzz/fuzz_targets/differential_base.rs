//! Differential: random operation sequences on the core and on the base reference model
//! (`hullguard_tests::model::base`, the same runner as `tests/tests/model.rs`): acquires with
//! weights (RAII permits, raw units, queued with or without a deadline and a host timer),
//! polls, cancels and expiries with any reason, abandons, raw, checked, over- and partial
//! releases, `set_limit`, `close`, drains (at once, and kept until the step that empties the
//! bulkhead must wake them), clock advances; every decision, the settlement order and
//! the whole stats object compared after every step, on a runtime-sized ring and on 2-, 4-
//! and 8-cell static rings. The operations are decoded with the proptest generators' ranges
//! and weights.
#![no_main]

use arbitrary::{Result, Unstructured};
use hullguard_core::{Config, Reason};
use hullguard_fuzz::{pick, with_case};
use hullguard_tests::model::base::{Op, Ring, run};
use libfuzzer_sys::fuzz_target;

/// The longest case (the proptest generator's is 60).
const MAX_OPS: usize = 200;

fn weight(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match pick(u, &[1, 12, 3])? {
        0 => 0,
        1 => u.int_in_range(1..=3)?,
        _ => u.int_in_range(4..=7)?,
    })
}

fn reason(u: &mut Unstructured<'_>) -> Result<Reason> {
    Ok(match pick(u, &[4, 4, 1])? {
        0 => Reason::Aborted,
        1 => Reason::Timeout,
        _ => *u.choose(&Reason::ALL)?,
    })
}

fn idx(u: &mut Unstructured<'_>) -> Result<usize> {
    u.int_in_range(0..=5)
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    let weights = [8, 3, 14, 8, 3, 2, 2, 9, 2, 1, 3, 2, 4, 1, 5, 1, 1, 1];
    Ok(match pick(u, &weights)? {
        0 => Op::TryAcquire(weight(u)?),
        1 => Op::TryAcquirePermit(weight(u)?),
        2 => Op::Enqueue {
            w: weight(u)?,
            timeout_ms: if u.ratio(3, 5)? {
                Some(u.int_in_range(1..=100)?)
            } else {
                None
            },
            host_timer: u.arbitrary()?,
        },
        3 => Op::Poll(idx(u)?),
        4 => Op::Cancel(idx(u)?, reason(u)?),
        5 => Op::Expire(idx(u)?, reason(u)?),
        6 => Op::Abandon(idx(u)?),
        7 => Op::Release(idx(u)?),
        8 => Op::ReleaseChecked(idx(u)?),
        9 => Op::OverRelease(u.int_in_range(0..=2)?),
        10 => Op::ReleasePartial(idx(u)?, u.int_in_range(0..=7)?),
        11 => Op::DropPermit(idx(u)?),
        12 => Op::SetLimit(u.int_in_range(0..=7)?),
        13 => Op::Close,
        14 => Op::AdvanceClock(u.int_in_range(1..=60)?),
        15 => Op::Stale {
            idx: idx(u)?,
            cancel: u.arbitrary()?,
        },
        16 => Op::Forged {
            ahead: u.int_in_range(0..=9)?,
            cancel: u.arbitrary()?,
        },
        _ => Op::Drain {
            wait: u.arbitrary()?,
        },
    })
}

/// The configuration and the ring, as the proptest generator makes them.
fn config(u: &mut Unstructured<'_>) -> Result<(Config, Ring)> {
    let max_concurrent = u.int_in_range(1..=6)?;
    let max_queue = match pick(u, &[1, 6])? {
        0 => 0,
        _ => u.int_in_range(1..=4)?,
    };
    let enabled = !u.ratio(1, 10)?;
    let ring = match pick(u, &[2, 1, 1, 1])? {
        0 => Ring::Runtime,
        1 => Ring::Static(2),
        2 => Ring::Static(4),
        _ => Ring::Static(8),
    };
    let max_queue = match ring {
        Ring::Static(n) => max_queue.min(n as u64),
        Ring::Runtime => max_queue,
    };
    let c = Config {
        max_concurrent,
        max_queue,
        enabled,
        ..Config::default()
    };
    Ok((c, ring))
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok((cfg, ring)) = config(&mut u) else {
        return;
    };
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        match op(&mut u) {
            Ok(o) => ops.push(o),
            Err(_) => break,
        }
    }
    with_case(&(cfg, ring, &ops), || {
        if let Err(m) = run(cfg, ring, &ops) {
            panic!("the core and the base model differ: {m}");
        }
    });
});
