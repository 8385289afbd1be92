//! Differential: random operation sequences on the core and on the budget reference model
//! (`hullguard_tests::model::budget`, the same runner as `tests/tests/model_budget.rs`):
//! admissions with weights and costs (at once or queueing, with a request's own observe),
//! reservations committed and aborted, polls, cancels, refunds, partial releases, settlements
//! with and without usage, streaming usage reports, `set_budget`, `set_limit`, observe mode;
//! every decision and the whole stats object (both dimensions, every counter) compared after
//! every step. Decoded with the proptest generator's ranges and weights.
#![no_main]

use arbitrary::{Result, Unstructured};
use hullguard_fuzz::{pick, with_case};
use hullguard_tests::model::budget::{BUDGET, MAX_CONCURRENT, Op, run};
use libfuzzer_sys::fuzz_target;

const MAX_OPS: usize = 200;

fn idx(u: &mut Unstructured<'_>) -> Result<usize> {
    Ok(usize::from(u.arbitrary::<u8>()?))
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match pick(u, &[6, 1, 1, 1, 2, 1, 1, 1, 1, 2, 1, 1, 1])? {
        0 => {
            let weight = u.int_in_range(0..=MAX_CONCURRENT + 1)?;
            let cost = u.int_in_range(0..=BUDGET + 1)?;
            let wait = u.arbitrary()?;
            let o: u8 = u.int_in_range(0..=7)?;
            Op::Admit {
                weight,
                cost,
                wait,
                observe: (o == 0 || o == 2, o == 1 || o == 2),
            }
        }
        1 => Op::Reserve {
            weight: u.int_in_range(1..=MAX_CONCURRENT)?,
            cost: u.int_in_range(0..=BUDGET)?,
        },
        2 => Op::Commit(idx(u)?),
        3 => Op::Abort(idx(u)?),
        4 => Op::Poll(idx(u)?),
        5 => Op::Cancel(idx(u)?),
        6 => Op::Refund(idx(u)?, u.int_in_range(0..=BUDGET)?),
        7 => Op::ReleasePartial(idx(u)?, u.int_in_range(0..=MAX_CONCURRENT)?),
        8 => Op::End(
            idx(u)?,
            if u.arbitrary()? {
                Some(u.int_in_range(0..=2 * BUDGET)?)
            } else {
                None
            },
        ),
        9 => Op::Report(
            idx(u)?,
            u.int_in_range(0..=BUDGET)?,
            u.int_in_range(0..=BUDGET)?,
        ),
        10 => Op::SetBudget(u.int_in_range(0..=BUDGET)?),
        11 => Op::SetLimit(u.int_in_range(1..=MAX_CONCURRENT)?),
        _ => Op::SetObserve(u.arbitrary()?, u.arbitrary()?),
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        match op(&mut u) {
            Ok(o) => ops.push(o),
            Err(_) => break,
        }
    }
    with_case(&ops, || {
        if let Err(m) = run(&ops) {
            panic!("the core and the budget model differ: {m}");
        }
    });
});
