//! The lease manager in virtual time: C42's recipe step by step, losses, expiry, fallback,
//! late grants, epochs.

use super::*;
use crate::protocol::SyncStatus;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn cfg(ttl_ms: u64, beat_ms: u64) -> LeaseConfig {
    LeaseConfig {
        beat: MS(beat_ms),
        ..LeaseConfig::new(MS(ttl_ms), 10)
    }
}

fn ok(generation: u64, held: u64, target: u64, ttl_ms: u64) -> Reply {
    Reply::Sync(SyncReply {
        status: SyncStatus::Ok,
        generation,
        held,
        target,
        limit: 10,
        ttl_ms,
        epoch: 1,
        rev: 0,
        holders: 1,
        learning: false,
        used: held,
    })
}

fn status(s: SyncStatus) -> Reply {
    Reply::Sync(SyncReply {
        status: s,
        generation: 0,
        held: 0,
        target: 0,
        limit: 10,
        ttl_ms: 1000,
        epoch: 1,
        rev: 0,
        holders: 1,
        learning: false,
        used: 0,
    })
}

fn demand(in_flight: u64, queued: u64) -> Demand {
    Demand {
        in_flight,
        queued,
        refused_total: 0,
        short_weight: 0,
    }
}

/// Polls at `now` and expects a sync; returns its arguments.
fn expect_sync(m: &mut LeaseManager, now: u64, d: Demand) -> SyncArgs {
    match m.poll(MS(now), d) {
        Poll::Send(Request::Sync(a)) => a,
        other => panic!("at {now} ms expected a sync, got {other:?}"),
    }
}

#[test]
fn c42_deadline_counts_from_the_successful_attempts_send_time() {
    // TTL 1000 ms, allowance 1 % + 2 ms = 12 ms, renewal at half the TTL.
    let mut m = LeaseManager::new("h".into(), cfg(1000, 500));
    assert_eq!(m.config().allowance(MS(1000)), MS(12));
    // Step 1: attempts at 0 and 200 get no permits; the one sent at 400 gets 3, applied by
    // Redis at 425, its reply arriving at 450.
    let a = expect_sync(&mut m, 0, demand(0, 3));
    assert_eq!(a.generation, 0);
    m.complete(MS(30), Ok(ok(7, 0, 0, 1000)));
    assert_eq!(m.local_limit(MS(30)), 0);
    m.nudge();
    let a = expect_sync(&mut m, 200, demand(0, 3));
    assert_eq!(a.generation, 7);
    m.complete(MS(230), Ok(ok(7, 0, 0, 1000)));
    m.nudge();
    expect_sync(&mut m, 400, demand(0, 3));
    m.complete(MS(450), Ok(ok(7, 3, 3, 1000)));
    assert_eq!(
        m.deadline(),
        Some(MS(1388)),
        "not 988 (first attempt), not 1438 (reply)"
    );
    assert_eq!(m.local_limit(MS(450)), 3);
    // Step 2: the renewal is sent at 400 + 500 = 900, and counts from there.
    assert_eq!(m.poll(MS(899), demand(3, 0)), Poll::Wait(MS(900)));
    let a = expect_sync(&mut m, 900, demand(3, 0));
    assert_eq!((a.generation, a.has, a.busy), (7, 3, 3));
    m.complete(MS(930), Ok(ok(7, 3, 3, 1000)));
    assert_eq!(m.deadline(), Some(MS(1888)));
}

#[test]
fn c42_retries_longer_than_the_ttl_use_the_last_send_time() {
    // Step 3: attempts from t=0 fail; the one that succeeds is sent at 1200.
    let mut m = LeaseManager::new("h".into(), cfg(1000, 500));
    let mut t = 0;
    let mut gaps = vec![];
    let mut last = None;
    loop {
        match m.poll(MS(t), demand(0, 1)) {
            Poll::Send(Request::Sync(_)) if t >= 1200 => break,
            Poll::Send(Request::Sync(_)) => {
                if let Some(l) = last {
                    gaps.push(t - l);
                }
                last = Some(t);
                m.complete(MS(t + 10), Err("connection refused".into()));
                assert_eq!(m.local_limit(MS(t + 10)), 0);
                t += 10;
            }
            Poll::Wait(at) => t = (at.as_millis() as u64).max(1200.min(t + 1)),
            other => panic!("{other:?}"),
        }
    }
    // Failures back off (min_interval × 2^failures, at most one beat).
    assert_eq!(&gaps[..4], &[10, 20, 40, 80]);
    assert!(gaps.iter().all(|&g| g <= 500));
    m.complete(MS(t + 40), Ok(ok(3, 1, 1, 1000)));
    assert_eq!(
        m.deadline(),
        Some(MS(t + 1000 - 12)),
        "from the send at {t} ms"
    );
    assert!(
        m.deadline().unwrap() > MS(t + 40),
        "validity is never negative at the grant"
    );
    assert!(!m.unreachable());
}

#[test]
fn c42_a_grant_that_comes_back_too_late_is_given_back_and_never_admits() {
    // Step 4: sent at 0, reply at 995: 1000 - 995 - 12 < 0.
    let mut m = LeaseManager::new("h".into(), cfg(1000, 500));
    expect_sync(&mut m, 0, demand(0, 2));
    m.complete(MS(995), Ok(ok(5, 2, 2, 1000)));
    assert_eq!(m.local_limit(MS(995)), 0, "no local permits");
    assert_eq!(m.admit_until(MS(995)), Duration::ZERO);
    assert_eq!(m.state(MS(995)), LeaseState::Idle);
    assert_eq!(m.counters().late_grants_total, 1);
    // The block goes back (fenced by its generation), then the caller keeps waiting on a
    // new sync.
    assert_eq!(
        m.poll(MS(995), demand(0, 2)),
        Poll::Send(Request::Release { generation: 5 })
    );
    m.complete(MS(1000), Ok(Reply::Release(Some(2))));
    let a = expect_sync(&mut m, 1000, demand(0, 2));
    assert_eq!(a.generation, 0, "a new lease");
}

#[test]
fn c42_unreachable_after_the_grant_admits_nothing_past_the_deadline() {
    // Step 5: Redis unreachable after step 1's grant (sent 400, deadline 1388).
    let mut m = LeaseManager::new("h".into(), cfg(1000, 500));
    expect_sync(&mut m, 400, demand(0, 3));
    m.complete(MS(450), Ok(ok(7, 3, 3, 1000)));
    expect_sync(&mut m, 900, demand(3, 0));
    m.complete(MS(1100), Err("timed out".into()));
    assert!(m.unreachable());
    assert_eq!(m.local_limit(MS(1387)), 3);
    assert_eq!(m.admit_until(MS(1387)), MS(1388));
    assert_eq!(
        m.local_limit(MS(1388)),
        0,
        "nothing on this lease after 1388"
    );
    assert_eq!(m.admit_until(MS(1388)), Duration::ZERO);
    assert_eq!(m.state(MS(1388)), LeaseState::Expired);
    // The driver is woken at the deadline to drop the limit.
    let _ = m.poll(MS(1388), demand(3, 0));
    assert_eq!(m.counters().expiries_total, 1);
}

#[test]
fn the_local_share_applies_only_while_unreachable_past_the_deadline() {
    let mut m = LeaseManager::new(
        "h".into(),
        LeaseConfig {
            on_unreachable: Unreachable::LocalShare(2),
            ..cfg(1000, 333)
        },
    );
    // Before Redis ever answered, and while it answers: no share.
    assert_eq!(m.local_limit(MS(0)), 0);
    expect_sync(&mut m, 0, demand(0, 0));
    m.complete(MS(5), Ok(ok(1, 4, 4, 1000)));
    let a = expect_sync(&mut m, 333, demand(1, 1));
    assert_eq!(
        (a.want, a.busy),
        (3, 3),
        "busy: the block capped at the want"
    );
    m.complete(MS(340), Err("refused".into()));
    // Redis may have run the sync and shrunk the block to 3 before the reply was lost.
    assert_eq!(
        m.local_limit(MS(900)),
        3,
        "the lease still holds, capped at what was reported"
    );
    assert_eq!(m.local_limit(MS(988)), 2, "past it: the local share");
    assert_eq!(m.admit_until(MS(988)), Duration::MAX);
    // Redis answers again: LOST (reaped), then a new lease; the share is gone.
    expect_sync(&mut m, 2000, demand(0, 0));
    m.complete(MS(2001), Ok(status(SyncStatus::Lost)));
    assert_eq!(m.local_limit(MS(2001)), 0);
    assert_eq!(m.counters().losses_total, 1);
    let a = expect_sync(&mut m, 2006, demand(1, 0));
    assert_eq!(
        (a.generation, a.busy),
        (0, 1),
        "a new lease that counts the work in flight"
    );
}

#[test]
fn lost_stops_admissions_and_asks_a_new_lease_at_once() {
    let mut m = LeaseManager::new("h".into(), cfg(1000, 333));
    expect_sync(&mut m, 0, demand(2, 0));
    m.complete(MS(1), Ok(ok(9, 3, 3, 1000)));
    expect_sync(&mut m, 333, demand(2, 0));
    m.complete(MS(334), Ok(status(SyncStatus::Lost)));
    assert_eq!(
        (m.local_limit(MS(334)), m.state(MS(334))),
        (0, LeaseState::Lost)
    );
    assert_eq!(m.poll(MS(334), demand(2, 0)), Poll::Wait(MS(338)));
    let a = expect_sync(&mut m, 338, demand(2, 0));
    assert_eq!((a.generation, a.busy, a.has), (0, 2, 0));
}

#[test]
fn above_the_target_the_local_limit_is_the_target_and_drained_blocks_go_back_early() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(6, 0));
    m.complete(MS(1), Ok(ok(2, 6, 4, 3000)));
    assert_eq!(m.local_limit(MS(1)), 4);
    // Still 6 in flight: nothing to give back before the beat.
    assert_eq!(m.poll(MS(10), demand(6, 0)), Poll::Wait(MS(1000)));
    // Drained to the target: sync now (at the minimum interval).
    let a = expect_sync(&mut m, 10, demand(4, 0));
    assert_eq!(a.busy, 4);
}

#[test]
fn demand_nudges_are_rate_limited_and_idle_blocks_shrink_over_beats() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    let a = expect_sync(&mut m, 0, demand(0, 8));
    assert_eq!(a.want, 10, "8 queued + 2 headroom, capped at the limit");
    // A partial grant (nothing more was free): the next ask waits a quarter beat.
    m.complete(MS(1), Ok(ok(2, 6, 10, 3000)));
    assert_eq!(m.poll(MS(2), demand(6, 4)), Poll::Wait(MS(250)));
    let a = expect_sync(&mut m, 250, demand(6, 1));
    assert_eq!(a.want, 8, "7 + 1 headroom");
    // The whole ask granted: new demand is asked for at once, 5 ms apart.
    m.complete(MS(251), Ok(ok(2, 8, 8, 3000)));
    m.nudge();
    assert_eq!(
        m.poll(MS(252), demand(8, 1)),
        Poll::Wait(MS(255)),
        "5 ms apart"
    );
    // Idle: the want halves each beat.
    let mut wants = vec![];
    let mut t = 1250;
    for _ in 0..5 {
        wants.push(expect_sync(&mut m, t, demand(0, 0)).want);
        m.complete(MS(t + 1), Ok(ok(2, *wants.last().unwrap(), 10, 3000)));
        t += 1000;
    }
    assert_eq!(wants, [4, 2, 1, 0, 0]);
}

#[test]
fn an_epoch_change_sends_the_applied_limit_again() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    m.set_limit(20, 4);
    assert_eq!(
        m.poll(MS(0), demand(0, 0)),
        Poll::Send(Request::SetLimit { limit: 20, rev: 4 })
    );
    m.complete(
        MS(1),
        Ok(Reply::SetLimit(SetLimitReply {
            applied: true,
            rev: 4,
            limit: 20,
        })),
    );
    expect_sync(&mut m, 1, demand(0, 0));
    let mut r = ok(1, 0, 0, 3000);
    if let Reply::Sync(s) = &mut r {
        s.rev = 4;
    }
    m.complete(MS(2), Ok(r));
    expect_sync(&mut m, 1001, demand(0, 0));
    let mut r = ok(0, 0, 0, 3000);
    if let Reply::Sync(s) = &mut r {
        s.status = SyncStatus::Lost;
        s.epoch = 2;
    }
    m.complete(MS(1001), Ok(r));
    assert_eq!(m.counters().epoch_changes_total, 1);
    assert_eq!(
        m.poll(MS(1010), demand(0, 0)),
        Poll::Send(Request::SetLimit { limit: 20, rev: 4 })
    );
}

/// Found by `make test` under a CPU hog (issue 21; `fleet/tests/review_budget.rs`'s
/// `apply_limits_with_both_values_and_a_failed_second_call_keeps_the_first` failed 7 times in
/// 15): a limit applied through the caller's own call before this process's first sync, then
/// Redis losing its state (`FLUSHALL`) before that sync — the first sync has no epoch to
/// compare, so the epoch rule never fired and the pool stayed at the default limit for ever.
/// A sync reply below the applied revision now sends it again; once the pool holds it, no more.
#[test]
fn a_limit_the_pool_lost_before_the_first_sync_is_sent_again() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    // The caller's own `apply_limits` (not through the driver): revision 2, limit 8.
    m.limit_applied(
        8,
        2,
        SetLimitReply {
            applied: true,
            rev: 2,
            limit: 8,
        },
    );
    // Redis loses its state; the first sync recreates the pool at revision 0.
    expect_sync(&mut m, 0, demand(0, 0));
    m.complete(MS(1), Ok(ok(1, 0, 0, 3000)));
    assert_eq!(
        m.poll(MS(10), demand(0, 0)),
        Poll::Send(Request::SetLimit { limit: 8, rev: 2 })
    );
    m.complete(
        MS(11),
        Ok(Reply::SetLimit(SetLimitReply {
            applied: true,
            rev: 2,
            limit: 8,
        })),
    );
    // A sync that shows the revision held sends nothing more.
    expect_sync(&mut m, 1001, demand(0, 0));
    let mut r = ok(1, 0, 0, 3000);
    if let Reply::Sync(s) = &mut r {
        s.rev = 2;
        s.limit = 8;
    }
    m.complete(MS(1002), Ok(r));
    assert!(matches!(m.poll(MS(1010), demand(0, 0)), Poll::Wait(_)));
}

#[test]
fn close_releases_the_lease_and_stops_syncing() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(0, 1));
    m.complete(MS(1), Ok(ok(4, 2, 2, 3000)));
    assert_eq!(m.close(0), Some(Request::Release { generation: 4 }));
    assert_eq!(m.poll(MS(5000), demand(0, 1)), Poll::Wait(Duration::MAX));
    assert_eq!(m.local_limit(MS(2)), 0);
}

#[test]
fn a_reply_of_the_wrong_kind_is_an_error() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(0, 1));
    m.complete(MS(1), Ok(Reply::Release(Some(1))));
    assert_eq!(m.counters().errors_total, 1);
    assert!(m.last_error().unwrap().contains("wrong kind"));
}

#[test]
fn with_wait_replicas_a_growth_is_used_only_once_replicated() {
    let mut m = LeaseManager::new(
        "h".into(),
        LeaseConfig {
            wait_replicas: 1,
            ..cfg(3000, 1000)
        },
    );
    expect_sync(&mut m, 0, demand(0, 3));
    m.complete(MS(1), Ok(ok(4, 3, 3, 3000)));
    assert_eq!(m.local_limit(MS(1)), 0, "not replicated yet");
    assert_eq!(
        m.poll(MS(1), demand(0, 3)),
        Poll::Send(Request::Replicate {
            replicas: 1,
            timeout_ms: 100
        })
    );
    m.complete(MS(3), Ok(Reply::Replicated(1)));
    assert_eq!(m.local_limit(MS(3)), 3);
    // A later growth that WAIT does not confirm stays unused; a shrink applies at once.
    expect_sync(&mut m, 1000, demand(3, 3));
    m.complete(MS(1001), Ok(ok(4, 6, 6, 3000)));
    assert_eq!(m.local_limit(MS(1001)), 3);
    assert!(matches!(
        m.poll(MS(1001), demand(3, 3)),
        Poll::Send(Request::Replicate { .. })
    ));
    m.complete(MS(1101), Ok(Reply::Replicated(0)));
    assert_eq!(
        (m.local_limit(MS(1101)), m.counters().unreplicated_total),
        (3, 1)
    );
    expect_sync(&mut m, 2000, demand(1, 0));
    m.complete(MS(2001), Ok(ok(4, 2, 2, 3000)));
    assert_eq!(m.local_limit(MS(2001)), 2);
}

#[test]
fn while_a_shrinking_sync_is_out_the_block_admits_no_more_than_it_reported_busy() {
    // Review finding: Redis shrinks to max(target, busy) while the request is on the wire; the
    // process must not admit past `busy` meanwhile (nor after a lost reply).
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(0, 10));
    m.complete(MS(1), Ok(ok(2, 10, 10, 3000)));
    assert_eq!(m.local_limit(MS(1)), 10);
    // Demand fell to 2 in flight: want = max(2 + 1, 10 / 2) = 5; busy = max(2, min(10, 5)) = 5.
    let a = expect_sync(&mut m, 1000, demand(2, 0));
    assert_eq!((a.want, a.busy), (5, 5));
    assert_eq!(m.local_limit(MS(1000)), 5, "capped while the sync is out");
    m.complete(MS(1100), Err("reply lost".into()));
    assert_eq!(
        m.local_limit(MS(1100)),
        5,
        "still capped: Redis may have shrunk to 5"
    );
    let a = expect_sync(&mut m, 1110, demand(2, 0));
    assert!(a.busy <= 5);
    m.complete(MS(1111), Ok(ok(2, a.busy, a.busy, 3000)));
    assert_eq!(m.local_limit(MS(1111)), a.busy);
}

#[test]
fn a_weight_refused_for_want_of_a_block_is_asked_for() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(0, 1));
    m.complete(MS(1), Ok(ok(2, 2, 2, 3000)));
    let a = expect_sync(
        &mut m,
        1000,
        Demand {
            in_flight: 1,
            queued: 1,
            refused_total: 1,
            short_weight: 6,
        },
    );
    assert!(a.want >= 7, "in flight 1 + the weight 6: {a:?}");
}

#[test]
fn close_with_calls_in_flight_shrinks_instead_of_releasing() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(0, 4));
    m.complete(MS(1), Ok(ok(3, 4, 4, 3000)));
    match m.close(2) {
        Some(Request::Sync(a)) => assert_eq!((a.generation, a.want, a.busy), (3, 0, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_new_fleet_limit_is_synced_at_once() {
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(1, 0));
    m.complete(MS(1), Ok(ok(2, 2, 2, 3000)));
    assert_eq!(m.poll(MS(10), demand(1, 0)), Poll::Wait(MS(1000)));
    m.limit_applied(
        20,
        3,
        SetLimitReply {
            applied: true,
            rev: 3,
            limit: 20,
        },
    );
    expect_sync(&mut m, 10, demand(1, 0));
}

#[test]
fn a_queued_heavy_weight_stays_asked_for_after_a_partial_grant() {
    // Review finding: the heaviest refused weight was asked for in one sync, then forgotten.
    let mut m = LeaseManager::new("h".into(), cfg(3000, 1000));
    expect_sync(&mut m, 0, demand(0, 0));
    m.complete(MS(1), Ok(ok(2, 0, 0, 3000)));
    let heavy = Demand {
        in_flight: 0,
        queued: 1,
        refused_total: 1,
        short_weight: 5,
    };
    let a = expect_sync(&mut m, 10, heavy);
    assert!(a.want >= 5, "{a:?}");
    m.complete(MS(11), Ok(ok(2, 2, 5, 3000))); // only 2 were free
    // The waiter is still queued (the core does not report its weight again).
    let later = Demand {
        short_weight: 0,
        ..heavy
    };
    let a = expect_sync(&mut m, 300, later);
    assert!(a.want >= 5, "the weight is still asked for: {a:?}");
}

#[test]
fn a_sync_reply_older_than_an_applied_limit_keeps_the_new_limit() {
    // Review finding: a sync reply that left Redis before apply_limits (rev 0, limit 10) but
    // arrived after it put the old limit back as the fleet limit (the core's ceiling).
    let mut m = LeaseManager::new("h".into(), cfg(1000, 333));
    expect_sync(&mut m, 0, demand(0, 1));
    m.limit_applied(
        40,
        5,
        crate::protocol::SetLimitReply {
            applied: true,
            rev: 5,
            limit: 40,
        },
    );
    m.complete(MS(1), Ok(ok(4, 1, 1, 1000)));
    assert_eq!((m.fleet().limit, m.fleet().rev), (40, 5), "rolled back");
    // The reply is below the applied revision: the limit is sent again, and a pool that holds
    // it refuses the equal revision, answering what is in force.
    assert_eq!(
        m.poll(MS(2), demand(0, 1)),
        Poll::Send(Request::SetLimit { limit: 40, rev: 5 })
    );
    m.complete(
        MS(3),
        Ok(Reply::SetLimit(crate::protocol::SetLimitReply {
            applied: false,
            rev: 5,
            limit: 40,
        })),
    );
    assert_eq!((m.fleet().limit, m.fleet().rev), (40, 5));
    // A reply of a new epoch (Redis lost its state) resets the revisions.
    expect_sync(&mut m, 400, demand(0, 1));
    let Reply::Sync(mut r) = ok(4, 1, 1, 1000) else {
        unreachable!()
    };
    r.epoch = 2;
    m.complete(MS(401), Ok(Reply::Sync(r)));
    assert_eq!((m.fleet().limit, m.fleet().rev), (10, 0));
}
