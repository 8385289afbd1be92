//! Property test: random operation sequences run on a real [`Bulkhead`] (single-threaded, through
//! its public API, on a virtual clock) and on a small *sequential* reference model of docs/design.md §4.
//! After every step the decisions, the ticket numbers, the order in which the dispatcher settles
//! waiters (observed through their wakers) and the *whole* stats object must match exactly, and
//! I1–I9 are checked. The end of every case releases and cancels everything and checks I5.
//!
//! The model and its runner are `hullguard_tests::model::base` (shared with the differential
//! fuzz target `fuzz/fuzz_targets/differential_base.rs`); this file generates the operations:
//! cases on a runtime-sized ring and on small static rings (2, 4, 8 cells), so the tail laps the
//! ring and skips live and settled occupants within a case.
//!
//! Failures are not persisted to a regressions file (`failure_persistence: None`): pin a shrunk
//! case as a named `#[test]` that calls [`run`] (see `replay_*` below).
//!
//! [`Bulkhead`]: hullguard_core::Bulkhead

use std::sync::Mutex;

use hullguard_core::{Config, Reason};
use hullguard_tests::model::base::{self, Coverage, Op, Ring};
use proptest::{
    prelude::*,
    test_runner::{Config as RunnerConfig, RngAlgorithm, TestCaseError, TestRng, TestRunner},
};

/// Runs one case on the shared runner. Returns what it reached.
fn run(cfg: Config, ring: Ring, ops: &[Op]) -> Result<Coverage, TestCaseError> {
    base::run(cfg, ring, ops).map_err(|m| TestCaseError::fail(m.0))
}

fn weight() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 12 => 1u64..=3, 3 => 4u64..=7]
}

fn reason() -> impl Strategy<Value = Reason> {
    prop_oneof![
        4 => Just(Reason::Aborted),
        4 => Just(Reason::Timeout),
        1 => proptest::sample::select(Reason::ALL.to_vec()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let idx = 0usize..6;
    prop_oneof![
        8 => weight().prop_map(Op::TryAcquire),
        3 => weight().prop_map(Op::TryAcquirePermit),
        14 => (weight(), proptest::option::weighted(0.6, 1u64..=100), any::<bool>())
            .prop_map(|(w, timeout_ms, host_timer)| Op::Enqueue { w, timeout_ms, host_timer }),
        8 => idx.clone().prop_map(Op::Poll),
        3 => (idx.clone(), reason()).prop_map(|(i, r)| Op::Cancel(i, r)),
        2 => (idx.clone(), reason()).prop_map(|(i, r)| Op::Expire(i, r)),
        2 => idx.clone().prop_map(Op::Abandon),
        9 => idx.clone().prop_map(Op::Release),
        2 => idx.clone().prop_map(Op::ReleaseChecked),
        1 => (0u64..3).prop_map(Op::OverRelease),
        3 => (idx.clone(), 0u64..=7).prop_map(|(i, n)| Op::ReleasePartial(i, n)),
        2 => idx.clone().prop_map(Op::DropPermit),
        4 => (0u64..=7).prop_map(Op::SetLimit),
        1 => Just(Op::Close),
        5 => (1u64..=60).prop_map(Op::AdvanceClock),
        1 => (idx.clone(), any::<bool>()).prop_map(|(idx, cancel)| Op::Stale { idx, cancel }),
        1 => (0u64..10, any::<bool>()).prop_map(|(ahead, cancel)| Op::Forged { ahead, cancel }),
        1 => any::<bool>().prop_map(|wait| Op::Drain { wait }),
    ]
}

fn config() -> impl Strategy<Value = (Config, Ring)> {
    (
        1u64..=6,
        prop_oneof![1 => Just(0u64), 6 => 1u64..=4],
        proptest::bool::weighted(0.9),
        prop_oneof![
            2 => Just(Ring::Runtime),
            1 => Just(Ring::Static(2)),
            1 => Just(Ring::Static(4)),
            1 => Just(Ring::Static(8)),
        ],
    )
        .prop_map(|(max_concurrent, max_queue, enabled, ring)| {
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
            (c, ring)
        })
}

fn scenario() -> impl Strategy<Value = (Config, Ring, Vec<Op>)> {
    (config(), proptest::collection::vec(op(), 0..60)).prop_map(|((c, r), ops)| (c, r, ops))
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The engine matches the reference model step by step (256 cases by default;
    /// `PROPTEST_CASES` overrides).
    #[test]
    fn engine_matches_reference_model((cfg, ring, ops) in scenario()) {
        run(cfg, ring, &ops)?;
    }
}

/// The generator reaches every interesting path (with a fixed seed, so this is deterministic):
/// a passing property test means something only if these happen.
#[test]
fn generator_reaches_every_path() {
    let mut runner = TestRunner::new_with_rng(
        RunnerConfig {
            cases: 256,
            failure_persistence: None,
            ..RunnerConfig::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let total = Mutex::new(Coverage::default());
    runner
        .run(&scenario(), |(cfg, ring, ops)| {
            let c = run(cfg, ring, &ops)?;
            total.lock().unwrap().merge(c);
            Ok(())
        })
        .unwrap();
    let c = total.into_inner().unwrap();
    let all = [
        ("queue_limit_live", c.queue_limit_live),
        ("queue_limit_ring_full", c.queue_limit_ring_full),
        ("skipped_live_cell", c.skipped_live_cell),
        ("skipped_settled_cell", c.skipped_settled_cell),
        ("expire_won", c.expire_won),
        ("dispatcher_grant", c.dispatcher_grant),
        ("dispatcher_shutdown", c.dispatcher_shutdown),
        ("dispatcher_limit", c.dispatcher_limit),
        ("timeout_won", c.timeout_won),
        ("timeout_lost", c.timeout_lost),
        ("cancel_lost_to_grant", c.cancel_lost_to_grant),
        ("invalid_weight", c.invalid_weight),
        ("negative_available", c.negative_available),
        ("partial_refused", c.partial_refused),
        ("over_release_refused", c.over_release_refused),
        ("disabled_over_limit", c.disabled_over_limit),
        ("drain_idle", c.drain_idle),
        ("drain_woken", c.drain_woken),
    ];
    let missed: Vec<_> = all
        .iter()
        .filter(|(_, hit)| !hit)
        .map(|(n, _)| *n)
        .collect();
    assert!(missed.is_empty(), "the generator never reached: {missed:?}");
}

fn cfg(max_concurrent: u64, max_queue: u64) -> Config {
    Config {
        max_concurrent,
        max_queue,
        ..Config::default()
    }
}

/// Issue 12's reproduction: a live head and a stream of enqueue + timeout cycles on a small
/// ring. The tail laps the ring and skips the head's cell; no arrival is refused `queue_limit`
/// (the model asserts it after every step).
#[test]
fn replay_timeouts_behind_live_head_never_fill_the_queue() {
    use Op::*;
    let enq = |timeout_ms, host_timer| Enqueue {
        w: 1,
        timeout_ms,
        host_timer,
    };
    let mut ops = vec![TryAcquire(1), enq(None, false)]; // ticket 0: the live head
    for i in 0..20 {
        ops.push(enq(Some(5), i % 2 == 0));
        ops.push(AdvanceClock(10));
        ops.push(Poll(1)); // the owner takes a host timer's rejection
    }
    ops.push(Release(0));
    let c = run(cfg(1, 4), Ring::Static(4), &ops).unwrap();
    assert!(c.skipped_live_cell && c.dispatcher_grant && c.timeout_won);
    assert!(!c.queue_limit_ring_full && !c.queue_limit_live);
    run(cfg(1, 4), Ring::Runtime, &ops).unwrap();
}

/// One granted-but-unclaimed waiter does not make an empty queue answer `queue_limit`.
#[test]
fn replay_unclaimed_grant_is_skipped() {
    use Op::*;
    let enq = Enqueue {
        w: 1,
        timeout_ms: None,
        host_timer: false,
    };
    let ops = vec![
        TryAcquire(1),
        enq.clone(), // ticket 0
        Release(0),  // granted to ticket 0, unclaimed
        enq.clone(), // ticket 1 (cell 1)
        Cancel(1, Reason::Aborted),
        enq.clone(), // ticket 2 would use cell 0 (unclaimed grant): skipped → ticket 3
        Cancel(1, Reason::Aborted),
        Poll(0),
    ];
    let c = run(cfg(1, 2), Ring::Static(2), &ops).unwrap();
    assert!(c.skipped_settled_cell && !c.queue_limit_ring_full);
}

/// Shrink below a queued weight, time out the head, close with waiters queued.
#[test]
fn replay_shrink_timeout_close() {
    use Op::*;
    let ops = [
        TryAcquire(3),
        Enqueue {
            w: 3,
            timeout_ms: Some(10),
            host_timer: false,
        },
        Enqueue {
            w: 1,
            timeout_ms: None,
            host_timer: false,
        },
        Enqueue {
            w: 2,
            timeout_ms: None,
            host_timer: true,
        },
        SetLimit(2), // the head (3) is rejected concurrency_limit; 1 waits (available −1)
        AdvanceClock(20),
        Release(0), // available 2: ticket 1 granted after 20 ms, ticket 2 waits
        Enqueue {
            w: 2,
            timeout_ms: Some(5),
            host_timer: true,
        },
        Close, // tickets 2 and 3 rejected shutdown
        Poll(0),
        Poll(0),
        Poll(0),
        TryAcquire(1),
    ];
    let c = run(cfg(4, 4), Ring::Runtime, &ops).unwrap();
    assert!(c.dispatcher_limit && c.dispatcher_shutdown && c.negative_available);
}
