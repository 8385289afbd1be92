//! Deadlines (docs/design.md §5.9) on a virtual clock: C36's recipe step by step (passed,
//! exact, bounded waits, every spelling of "no deadline", retries under one deadline, early
//! refusal with `min_service_time`), the call-timeout cap and the dry run.

use core::{
    sync::atomic::{AtomicU64, Ordering::SeqCst},
    task::Poll,
    time::Duration,
};
use std::{sync::Arc, vec::Vec};

use crate::{
    AcquireError, Bulkhead, Cancelled, ClockSource, Config, ConfigError, Deadline, Reason, Request,
    WouldAdmit,
    config::OptionId,
    tests::budget::{granted, queued, refused},
};

use super::VClock;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

/// Limit 1, queue 2, queue timeout 60 s, `min_service_time`, on a virtual clock at 1 000 s.
fn c36(min_service: Duration) -> (Bulkhead, Arc<VClock>) {
    let clock = Arc::new(VClock(AtomicU64::new(1_000 * S)));
    let bh = Bulkhead::with_clock(
        Config {
            max_concurrent: 1,
            max_queue: 2,
            queue_timeout: Duration::from_secs(60),
            min_service_time: min_service,
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    (bh, clock)
}

fn at(clock: &VClock, from_now: u64) -> Deadline {
    Deadline::Ns(clock.0.load(SeqCst) + from_now)
}

fn timeouts(bh: &Bulkhead) -> u64 {
    bh.stats().rejected_by_reason.get(Reason::Timeout)
}

#[test]
fn c36_queued_waits_are_bounded_by_the_deadline() {
    let (bh, clock) = c36(Duration::ZERO);
    let _h = granted(bh.admit(&Request::new(1), None));
    // Steps 1-2: W1 with a 5 s deadline, W2 with the same and no queue timeout: the host
    // arms 5 s for each (not 60 s, not forever).
    let w1 = queued(bh.admit(&Request::new(1).deadline(at(&clock, 5 * S)), None));
    let w2 = queued(
        bh.admit(
            &Request::new(1)
                .deadline(at(&clock, 5 * S))
                .queue_timeout(Duration::MAX),
            None,
        ),
    );
    assert_eq!(w1.queue_timeout(), Duration::from_secs(5));
    assert_eq!(w2.queue_timeout(), Duration::from_secs(5));
    // The host's timers fire at 5 s: both leave the queue `timeout`.
    clock.0.fetch_add(5 * S, SeqCst);
    for w in [w1, w2] {
        assert!(
            matches!(w.cancel(Reason::Timeout), Cancelled::Cancelled(_)),
            "timer won"
        );
    }
    assert_eq!(bh.stats().queued, 0);
    // Step 3: at 6 s, W3's deadline (5 s) has passed: refused `timeout` at once, no ticket.
    clock.0.fetch_add(S, SeqCst);
    let before = timeouts(&bh);
    let e = refused(bh.admit(&Request::new(1).deadline(Deadline::Ns(1_005 * S)), None));
    assert_eq!(e.reason(), Some(Reason::Timeout));
    let AcquireError::Rejected(r) = e else {
        panic!()
    };
    assert_eq!(r.detail().bound, crate::Bound::Deadline);
    assert_eq!(timeouts(&bh), before + 1);
    assert_eq!(bh.stats().queued, 0);
    // Step 4: X1 and X2 with no deadline both queue (the dead ones keep no place).
    let x1 = queued(bh.admit(&Request::new(1), None));
    let x2 = queued(bh.admit(&Request::new(1), None));
    assert_eq!(x1.queue_timeout(), Duration::from_secs(60));
    drop((x1, x2));
}

#[test]
fn a_deadline_exactly_now_or_passed_is_refused_even_with_permits_free() {
    let (bh, clock) = c36(Duration::ZERO);
    for d in [at(&clock, 0), Deadline::Ns(0), Deadline::Ns(1)] {
        let e = refused(bh.admit(&Request::new(1).deadline(d), None));
        assert_eq!(e.reason(), Some(Reason::Timeout), "{d:?}");
    }
    // Not an argument error, and nothing held.
    assert_eq!((timeouts(&bh), bh.stats().active), (3, 0));
    // A no-wait request with a passed deadline is refused `timeout` too.
    let e = refused(bh.admit(&Request::new(1).no_wait().deadline(Deadline::Ns(0)), None));
    assert_eq!(e.reason(), Some(Reason::Timeout));
    // One ns left: admitted at once while permits are free.
    let _c = granted(bh.admit(&Request::new(1).deadline(at(&clock, 1)), None));
}

#[test]
fn c36_every_spelling_of_no_deadline_means_none() {
    let (bh, clock) = c36(Duration::ZERO);
    let _h = granted(bh.admit(&Request::new(1), None));
    // u64::MAX ns (the C and Rust spelling of none), now + 2^62 ns (huge, finite), and a
    // request without one: none expires at once, none overflows.
    let now = clock.0.load(SeqCst);
    let mut w = queued(bh.admit(&Request::new(1).deadline(Deadline::NONE), None));
    assert_eq!(w.queue_timeout(), Duration::from_secs(60), "u64::MAX: none");
    let huge = queued(bh.admit(
        &Request::new(1).deadline(Deadline::Ns(now + (1 << 62))),
        None,
    ));
    assert_eq!(
        huge.queue_timeout(),
        Duration::from_secs(60),
        "2^62 ns: the queue timeout bounds"
    );
    drop(huge);
    assert_eq!(bh.time_left(&Deadline::NONE), None);
    assert_eq!(
        bh.time_left(&Deadline::Ns(u64::MAX - 1)),
        Some(Duration::from_nanos(u64::MAX - 1 - now))
    );
    // Granted when H releases at 30 s, inside its 60 s queue timeout.
    clock.0.fetch_add(30 * S, SeqCst);
    drop(_h);
    assert!(matches!(w.poll(None), Poll::Ready(Ok(_))));
}

#[test]
fn c36_retries_under_one_deadline_end_with_it() {
    // Step 5: a deadline at 10 s, a queue timeout of 3 s per attempt: attempts end at 3, 6
    // and 9 s; the 4th is bounded by the 1 s left; none starts after 10 s.
    let (bh, clock) = c36(Duration::ZERO);
    let _h = granted(bh.admit(&Request::new(1), None));
    let d = at(&clock, 10 * S);
    let mut waits = Vec::new();
    for _ in 0..4 {
        let w = queued(
            bh.admit(
                &Request::new(1)
                    .deadline(d)
                    .queue_timeout(Duration::from_secs(3)),
                None,
            ),
        );
        let t = w.queue_timeout();
        waits.push(t.as_secs());
        clock.0.fetch_add(t.as_nanos() as u64, SeqCst);
        assert!(matches!(w.cancel(Reason::Timeout), Cancelled::Cancelled(_)));
    }
    assert_eq!(waits, [3, 3, 3, 1]);
    let e = refused(
        bh.admit(
            &Request::new(1)
                .deadline(d)
                .queue_timeout(Duration::from_secs(3)),
            None,
        ),
    );
    assert_eq!(
        e.reason(),
        Some(Reason::Timeout),
        "no attempt after the deadline"
    );
}

#[test]
fn c36_min_service_time_refuses_a_waiter_that_could_not_finish() {
    // Step 7: a minimum service time of 2 s; W4 with a deadline at 5 s waits at most 3 s.
    let (bh, clock) = c36(Duration::from_secs(2));
    let h = granted(bh.admit(&Request::new(1), None));
    let w4 = queued(bh.admit(&Request::new(1).deadline(at(&clock, 5 * S)), None));
    assert_eq!(
        w4.queue_timeout(),
        Duration::from_secs(3),
        "shed at 3 s, not 5 s"
    );
    // With 2 s or less left it may not queue: refused `timeout` now, if not admitted now.
    let e = refused(bh.admit(&Request::new(1).deadline(at(&clock, 2 * S)), None));
    assert_eq!(e.reason(), Some(Reason::Timeout));
    assert_eq!(bh.stats().queued, 1, "never queued");
    drop((w4, h));
    // Permits free: admitted (the work may still fit), not refused.
    let _c = granted(bh.admit(&Request::new(1).deadline(at(&clock, S)), None));
}

#[test]
fn an_instant_deadline_reads_the_host_clock() {
    let bh = Bulkhead::new(Config {
        max_concurrent: 1,
        ..Config::DEFAULT
    })
    .unwrap();
    let _h = granted(bh.admit(&Request::new(1), None));
    let soon = std::time::Instant::now() + Duration::from_secs(5);
    let w = queued(bh.admit(&Request::new(1).deadline(Deadline::At(soon)), None));
    assert!(w.queue_timeout() <= Duration::from_secs(5));
    assert!(w.queue_timeout() > Duration::ZERO);
    let past = std::time::Instant::now();
    let e = refused(bh.admit(&Request::new(1).deadline(Deadline::At(past)), None));
    assert_eq!(e.reason(), Some(Reason::Timeout));
    // The host clock's absolute scale is CLOCK_MONOTONIC: a `Ns` deadline 5 s from it.
    let abs = ClockSource::default_for_host().absolute_ns();
    let w2 = queued(bh.admit(&Request::new(1).deadline(Deadline::Ns(abs + 5 * S)), None));
    assert!(w2.queue_timeout() <= Duration::from_secs(5));
    assert!(
        w2.queue_timeout() > Duration::from_secs(4),
        "{:?}",
        w2.queue_timeout()
    );
}

#[test]
fn the_call_timeout_is_capped_by_the_deadline() {
    let clock = Arc::new(VClock(AtomicU64::new(S)));
    let bh = Bulkhead::with_clock(
        Config {
            resilience: crate::Resilience {
                call_timeout: Some(Duration::from_secs(2)),
                ..crate::Resilience::OFF
            },
            ..Config::DEFAULT
        },
        ClockSource::Shared(clock.clone()),
    )
    .unwrap();
    let d = at(&clock, 500 * MS);
    assert_eq!(bh.call_timeout_within(&d), Some(Duration::from_millis(500)));
    assert_eq!(
        bh.call_timeout_within(&at(&clock, 5 * S)),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        bh.call_timeout_within(&Deadline::NONE),
        Some(Duration::from_secs(2))
    );
    let plain = c36(Duration::ZERO).0;
    assert_eq!(plain.call_timeout_within(&Deadline::NONE), None);
    assert_eq!(
        plain
            .call_timeout_within(&Deadline::Ns(u64::MAX - 1))
            .map(|d| d > Duration::ZERO),
        Some(true)
    );
}

#[test]
fn the_dry_run_reads_the_deadline_as_the_admission_does() {
    let (bh, clock) = c36(Duration::from_secs(2));
    let passed = Request::new(1).deadline(Deadline::Ns(0));
    assert!(
        matches!(bh.would_admit(&passed), WouldAdmit::Reject(e) if e.reason() == Some(Reason::Timeout))
    );
    let _h = granted(bh.admit(&Request::new(1), None));
    let close = Request::new(1).deadline(at(&clock, S));
    assert!(
        matches!(bh.would_admit(&close), WouldAdmit::Reject(e) if e.reason() == Some(Reason::Timeout))
    );
    let far = Request::new(1).deadline(at(&clock, 10 * S));
    assert!(matches!(
        bh.would_admit(&far),
        WouldAdmit::WouldQueue { .. }
    ));
    // A no-wait request is refused as ever (`concurrency_limit`), deadline or not.
    let nw = Request::new(1).no_wait().deadline(at(&clock, 10 * S));
    assert!(
        matches!(bh.would_admit(&nw), WouldAdmit::Reject(e) if e.reason() == Some(Reason::ConcurrencyLimit))
    );
    assert_eq!(timeouts(&bh), 0, "a dry run counts nothing");
}

#[test]
fn queue_delay_options_are_checked() {
    let c = |f: fn(&mut Config)| {
        let mut c = Config::DEFAULT;
        f(&mut c);
        c
    };
    assert_eq!(
        Bulkhead::new(c(|c| c.adaptive_lifo = true)).err(),
        Some(ConfigError::Requires {
            option: OptionId::AdaptiveLifo,
            needs: OptionId::QueueDelayTarget
        })
    );
    assert_eq!(
        Bulkhead::new(c(|c| {
            c.queue_delay_target = Duration::from_millis(5);
            c.queue_delay_interval = Duration::ZERO;
        }))
        .err(),
        Some(ConfigError::Option(OptionId::QueueDelayInterval))
    );
    assert_eq!(
        Bulkhead::with_clock(
            c(|c| c.queue_delay_target = Duration::from_millis(5)),
            ClockSource::None
        )
        .err(),
        Some(ConfigError::Unsupported(OptionId::QueueDelayTarget))
    );
    let bh = Bulkhead::new(c(|c| c.queue_delay_target = Duration::from_millis(5))).unwrap();
    assert_eq!(bh.class_count(), 1, "dispatches through a one-class table");
}
