//! Admission classes (docs/design.md §4.8) against a sequential reference model: random class
//! tables (1–4 classes, floors, ceilings, tied priorities, a priority reserve) and random
//! single-thread sequences of admissions (at once or queueing, any class and weight), releases,
//! cancels and limit changes (growth, shrink, the kill switch) run on a real classed bulkhead and
//! on a deliberately naive model: per-class FIFO queues and counts, and one dispatch to
//! quiescence per operation that scans the ranks in the documented order (a head wholly inside
//! its class's floor first; else, of the highest priority, the oldest head not held back by its
//! own ceiling (FIFO across classes of one priority), if the shared
//! rest — and for a priority ≥ `min_priority` the reserve — has room; nobody of a lower rank
//! takes shared units past a higher head that is short). After every step every decision, every
//! grant, every class's hold and queue and the shared units must match, and the partition holds:
//! Σ holds = active, each hold ≤ its ceiling, the shared units ≤ limit − Σ floors (the units of
//! the low ranks ≤ limit − Σ floors − reserve). proptest, 256 cases.
//!
//! The model and its runner are `hullguard_tests::model::classes` (shared with the
//! differential fuzz target `fuzz/fuzz_targets/differential_classes.rs`); this file generates
//! the tables and the operations.

use hullguard_core::{
    Observe,
    config::{ClassSpec, PriorityReserve},
};
use hullguard_tests::model::classes::{BUDGET, MAX_CONCURRENT, Op, Table, run};
use proptest::prelude::*;

fn table() -> impl Strategy<Value = Table> {
    let observe = prop_oneof![
        3 => Just(Observe::Off),
        1 => Just(Observe::Concurrency),
        1 => Just(Observe::Budget),
        1 => Just(Observe::All),
    ];
    let class = (
        0u8..3,
        0u64..=2,
        prop::option::of(1u64..=MAX_CONCURRENT),
        0u64..=3,
        prop::option::of(1u64..=BUDGET),
        observe,
    )
        .prop_map(
            |(priority, floor, ceiling, budget_floor, budget_ceiling, observe)| ClassSpec {
                priority,
                floor,
                ceiling: ceiling.map(|c| c.max(floor)),
                budget_floor,
                budget_ceiling: budget_ceiling.map(|c| c.max(budget_floor)),
                observe,
            },
        );
    (
        prop::collection::vec(class, 1..=4),
        (0u64..=1, 0u64..=2),
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        prop::option::of((1u64..=4, 1u64..=3)),
    )
        .prop_map(
            |(classes, (permits, budget), min_priority, lending, shed, rate)| {
                Table {
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
                .fit()
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..4, 1u64..=3, prop_oneof![2 => Just(0u64), 3 => 0u64..=5], any::<bool>())
            .prop_map(|(class, weight, cost, wait)| Op::Admit { class, weight, cost, wait }),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => (0u64..=MAX_CONCURRENT).prop_map(Op::Limit),
        1 => (0u64..=BUDGET).prop_map(Op::Budget),
        2 => (0u64..=60).prop_map(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn classes_match_the_reference_model(t in table(), ops in prop::collection::vec(op(), 1..60)) {
        run(&t, &ops);
    }
}

/// An admission step of a pinned case.
fn admit(class: u16, weight: u64, cost: u64, wait: bool) -> Op {
    Op::Admit {
        class,
        weight,
        cost,
        wait,
    }
}

/// A shrunk case (1 in ~300 000): with lending and a reserve, a low class reclaiming its lent
/// floor must count the high class's floor part too, or the last unit — the reserve — goes to
/// the low classes (C2 borrowed C1's idle floor; C1's reclaim then took the reserve's unit).
#[test]
fn replay_a_floor_reclaim_counts_every_floor_part_against_the_reserve() {
    let c = |priority, floor| ClassSpec {
        priority,
        floor,
        ..ClassSpec::DEFAULT
    };
    let t = Table {
        classes: vec![c(2, 1), c(0, 1), c(0, 0)],
        reserve: PriorityReserve {
            permits: 1,
            budget: 0,
            min_priority: 1,
        },
        lending: true,
        shed: false,
        rate: None,
    };
    run(
        &t,
        &[
            Op::Limit(5),
            admit(0, 1, 0, false),
            admit(0, 1, 0, false),
            admit(2, 3, 0, true),
            admit(0, 1, 0, false),
            admit(1, 1, 1, true),
            Op::Release(0),
            Op::Release(0),
        ],
    );
}

/// The first such case, in the budget dimension: a low owner's floor take after a borrower
/// took its idle floor units.
#[test]
fn replay_a_lent_budget_floor_reclaim_never_eats_the_reserve() {
    let c = |budget_floor| ClassSpec {
        budget_floor,
        ..ClassSpec::DEFAULT
    };
    let t = Table {
        classes: vec![c(0), c(3)],
        reserve: PriorityReserve {
            permits: 0,
            budget: 2,
            min_priority: 1,
        },
        lending: true,
        shed: false,
        rate: None,
    };
    run(
        &t,
        &[
            admit(0, 1, 3, false),
            admit(0, 1, 4, true),
            admit(1, 1, 3, true),
            Op::Release(0),
        ],
    );
}
