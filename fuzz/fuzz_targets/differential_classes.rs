//! Differential: random class tables and operation sequences on a classed core and on the
//! classes reference model (`hullguard_tests::model::classes`, the same runner as
//! `tests/tests/model_classes.rs`): 1–4 classes with priorities, floors, ceilings and observed
//! ceilings in both dimensions, a priority reserve, lending, shedding, a requests rate;
//! admissions of any class, weight and cost (at once or queueing), releases, cancels,
//! `apply_limits` of the limit or the budget (growth, shrink, the kill switch), clock advances
//! with the host's rate tick; every decision, grant, class hold and queue and the shared units
//! compared after every step (the runner panics at the first difference). Decoded with the
//! proptest generators' ranges and weights.
#![no_main]

use arbitrary::{Result, Unstructured};
use hullguard_core::{
    Observe,
    config::{ClassSpec, PriorityReserve},
};
use hullguard_fuzz::{pick, with_case};
use hullguard_tests::model::classes::{BUDGET, MAX_CONCURRENT, Op, Table, run};
use libfuzzer_sys::fuzz_target;

const MAX_OPS: usize = 200;

fn class(u: &mut Unstructured<'_>) -> Result<ClassSpec> {
    let priority = u.int_in_range(0..=2)?;
    let floor = u.int_in_range(0..=2)?;
    let ceiling: Option<u64> = if u.arbitrary()? {
        Some(u.int_in_range(1..=MAX_CONCURRENT)?)
    } else {
        None
    };
    let budget_floor = u.int_in_range(0..=3)?;
    let budget_ceiling: Option<u64> = if u.arbitrary()? {
        Some(u.int_in_range(1..=BUDGET)?)
    } else {
        None
    };
    let observe = match pick(u, &[3, 1, 1, 1])? {
        0 => Observe::Off,
        1 => Observe::Concurrency,
        2 => Observe::Budget,
        _ => Observe::All,
    };
    Ok(ClassSpec {
        priority,
        floor,
        ceiling: ceiling.map(|c| c.max(floor)),
        budget_floor,
        budget_ceiling: budget_ceiling.map(|c| c.max(budget_floor)),
        observe,
    })
}

fn table(u: &mut Unstructured<'_>) -> Result<Table> {
    let n = u.int_in_range(1..=4)?;
    let classes = (0..n).map(|_| class(u)).collect::<Result<Vec<_>>>()?;
    let permits = u.int_in_range(0..=1)?;
    let budget = u.int_in_range(0..=2)?;
    let min_priority = u.int_in_range(0..=2)?;
    let lending = u.arbitrary()?;
    let shed = u.arbitrary()?;
    let rate = if u.arbitrary()? {
        Some((u.int_in_range(1..=4)?, u.int_in_range(1..=3)?))
    } else {
        None
    };
    Ok(Table {
        classes,
        reserve: PriorityReserve {
            permits,
            budget,
            min_priority,
        },
        lending,
        shed,
        rate,
    }
    .fit())
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match pick(u, &[4, 3, 1, 1, 1, 2])? {
        0 => Op::Admit {
            class: u.int_in_range(0..=3)?,
            weight: u.int_in_range(1..=3)?,
            cost: match pick(u, &[2, 3])? {
                0 => 0,
                _ => u.int_in_range(0..=5)?,
            },
            wait: u.arbitrary()?,
        },
        1 => Op::Release(usize::from(u.arbitrary::<u8>()?)),
        2 => Op::Cancel(usize::from(u.arbitrary::<u8>()?)),
        3 => Op::Limit(u.int_in_range(0..=MAX_CONCURRENT)?),
        4 => Op::Budget(u.int_in_range(0..=BUDGET)?),
        _ => Op::Tick(u.int_in_range(0..=60)?),
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(t) = table(&mut u) else {
        return;
    };
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        match op(&mut u) {
            Ok(o) => ops.push(o),
            Err(_) => break,
        }
    }
    // The runner panics at the first difference; the message names the step and the op.
    with_case(&(&t, &ops), || run(&t, &ops));
});
