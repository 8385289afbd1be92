//! The budget (docs/design.md §4.5) against a sequential reference model: random single-thread
//! sequences of admissions with weights and costs (at once or queueing), polls, cancels, refunds,
//! streaming usage reports (shrinks, growth through admission, overrun), settlements with usage,
//! observe mode switched per dimension and shadowed per request (docs/design.md §4.7),
//! reservations reserved, committed and aborted (§5.8), and runtime changes of the budget and the limit run on a real
//! bulkhead and on a deliberately naive model (a FIFO of waiters, free counts, one dispatch to
//! quiescence per operation). After every step every decision and the whole stats object —
//! both dimensions, every counter — must match, and I2 holds per dimension against what the
//! test itself holds. proptest, 256 cases; pin a shrunk failure as a `replay_*` test.
//!
//! The model and its runner are `hullguard_tests::model::budget` (shared with the differential
//! fuzz target `fuzz/fuzz_targets/differential_budget.rs`); this file generates the operations.

use hullguard_tests::model::budget::{self, BUDGET, Coverage, MAX_CONCURRENT, Op};
use proptest::prelude::*;

/// Runs one case on the shared runner.
fn run(ops: &[Op]) -> Result<Coverage, TestCaseError> {
    budget::run(ops).map_err(|m| TestCaseError::fail(m.0))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..=MAX_CONCURRENT + 1, 0..=BUDGET + 1, any::<bool>(), 0..8u8)
            .prop_map(|(weight, cost, wait, o)| Op::Admit {
                weight,
                cost,
                wait,
                // One request in four shadows a dimension of its own.
                observe: (o == 0 || o == 2, o == 1 || o == 2),
            }),
        1 => (1..=MAX_CONCURRENT, 0..=BUDGET).prop_map(|(weight, cost)| Op::Reserve { weight, cost }),
        1 => any::<usize>().prop_map(Op::Commit),
        1 => any::<usize>().prop_map(Op::Abort),
        2 => any::<usize>().prop_map(Op::Poll),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => (any::<usize>(), 0..=BUDGET).prop_map(|(i, n)| Op::Refund(i, n)),
        1 => (any::<usize>(), 0..=MAX_CONCURRENT).prop_map(|(i, n)| Op::ReleasePartial(i, n)),
        1 => (any::<usize>(), proptest::option::of(0..=2 * BUDGET)).prop_map(|(i, u)| Op::End(i, u)),
        2 => (any::<usize>(), 0..=BUDGET, 0..=BUDGET).prop_map(|(i, u, r)| Op::Report(i, u, r)),
        1 => (0..=BUDGET).prop_map(Op::SetBudget),
        1 => (1..=MAX_CONCURRENT).prop_map(Op::SetLimit),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(c, b)| Op::SetObserve(c, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn budget_matches_the_reference_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops)?;
    }
}

/// The generator reaches every decision: grants, queueing, each refusal reason (the budget's
/// both at once and from the dispatcher after a shrink or at a poll), refunds.
#[test]
fn budget_generator_reaches_every_path() {
    use proptest::{
        strategy::ValueTree,
        test_runner::{Config as RunnerConfig, TestRunner},
    };
    let mut runner = TestRunner::new(RunnerConfig {
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let mut total = Coverage::default();
    for _ in 0..64 {
        let ops = proptest::collection::vec(op(), 1..60)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let c = run(&ops).unwrap();
        total.granted += c.granted;
        total.queued += c.queued;
        total.concurrency_limit += c.concurrency_limit;
        total.budget_limit += c.budget_limit;
        total.queue_limit += c.queue_limit;
        total.refunds += c.refunds;
        total.shrank += c.shrank;
        total.grew += c.grew;
        total.overran += c.overran;
        total.observed += c.observed;
        total.cost_bound += c.cost_bound;
        total.reserved += c.reserved;
    }
    let t = total;
    assert!(
        t.granted > 0
            && t.queued > 0
            && t.concurrency_limit > 0
            && t.budget_limit > 0
            && t.queue_limit > 0
            && t.refunds > 0
            && t.shrank > 0
            && t.grew > 0
            && t.overran > 0
            && t.observed > 0
            && t.cost_bound > 0
            && t.reserved > 0,
        "{t:?}"
    );
}

/// A queued waiter refused by a shrink of the budget below its cost (the one refusal after a
/// wait), seen at its poll, and a refund that grants the next one.
#[test]
fn replay_shrink_refuses_a_queued_cost_then_a_refund_grants() {
    let ops = [
        Op::Admit {
            weight: 1,
            cost: 10,
            wait: true,
            observe: (false, false),
        },
        Op::Admit {
            weight: 1,
            cost: 8,
            wait: true,
            observe: (false, false),
        },
        Op::Admit {
            weight: 1,
            cost: 1,
            wait: true,
            observe: (false, false),
        },
        Op::SetBudget(7),
        Op::Poll(0),
        Op::Refund(0, 8),
        Op::Poll(1),
        Op::End(0, Some(4)),
        Op::End(0, None),
    ];
    let c = run(&ops).unwrap();
    assert!(c.budget_limit > 0, "{c:?}");
}

/// Found by this model: a request shadowing the budget was refused `budget_limit` at enqueue
/// by the "never fits" rule, which looked at the bulkhead's observe mode only (the cost above
/// a budget shrunk to 0 is shadowed by the request itself): it must queue for the permits.
#[test]
fn replay_a_requests_own_budget_shadow_is_not_refused_as_never_fitting() {
    let ops = [
        Op::Admit {
            weight: 1,
            cost: 0,
            wait: false,
            observe: (true, false),
        },
        Op::SetBudget(0),
        Op::Admit {
            weight: 3,
            cost: 1,
            wait: true,
            observe: (false, true),
        },
    ];
    run(&ops).unwrap();
}
