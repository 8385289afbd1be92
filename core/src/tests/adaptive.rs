//! Adaptive limit controllers: unit tests and deterministic simulations (virtual time is just
//! numbers). The long time-based C20 runs are skipped under Miri; everything else is small.

use std::vec::Vec;

use crate::{
    MAX_PERMITS,
    adaptive::{
        AdaptiveConfig, AdaptiveConfigError, AdaptiveController, Aimd, Algorithm, Controller,
        Gradient2, Outcome, Sample,
    },
};

const MS: u64 = 1_000_000;

fn ok(rtt_ns: u64, inflight: u64) -> Sample {
    Sample {
        rtt_ns,
        inflight,
        outcome: Outcome::Success,
    }
}

fn failed(rtt_ns: u64, inflight: u64) -> Sample {
    Sample {
        rtt_ns,
        inflight,
        outcome: Outcome::Failure,
    }
}

fn ignored(rtt_ns: u64, inflight: u64) -> Sample {
    Sample {
        rtt_ns,
        inflight,
        outcome: Outcome::Ignored,
    }
}

fn cfg(algorithm: Algorithm, initial: u64, min: u64, max: u64) -> AdaptiveConfig {
    AdaptiveConfig {
        algorithm,
        initial_limit: initial,
        min_limit: min,
        max_limit: max,
        ..AdaptiveConfig::for_max_concurrent(max)
    }
}

fn aimd(initial: u64, min: u64, max: u64) -> Aimd {
    Aimd::new(&cfg(Algorithm::Aimd, initial, min, max)).unwrap()
}

fn g2(initial: u64, min: u64, max: u64) -> Gradient2 {
    Gradient2::new(&cfg(Algorithm::Gradient2, initial, min, max)).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

#[test]
fn defaults_follow_design_section_4() {
    let c = AdaptiveConfig::for_max_concurrent(64);
    assert_eq!(c.algorithm, Algorithm::Gradient2);
    assert_eq!((c.initial_limit, c.min_limit, c.max_limit), (64, 1, 64));
    assert_eq!(c.target_latency_ns, 500 * MS);
    assert_eq!(c.increase_step, 1);
    assert_eq!(c.decrease_ratio, 0.7);
    assert_eq!(c.smoothing, 0.2);
    assert_eq!(c.rtt_tolerance, 1.5);
    assert_eq!(c.long_window, 600);
    assert_eq!(c.queue_size, 4);
    assert_eq!(c.validate(), Ok(()));
    // The plain default follows the default bulkhead (max_concurrent 10).
    let d = AdaptiveConfig::default();
    assert_eq!((d.initial_limit, d.max_limit), (10, 10));
    assert_eq!(d, AdaptiveConfig::DEFAULT);
}

#[test]
fn invalid_configs_name_the_option() {
    type Edit = fn(&mut AdaptiveConfig);
    let base = cfg(Algorithm::Gradient2, 10, 2, 20);
    let cases: &[(Edit, AdaptiveConfigError, &str)] = &[
        (
            |c| c.max_limit = 0,
            AdaptiveConfigError::MaxLimit,
            "max_limit",
        ),
        (
            |c| c.max_limit = MAX_PERMITS + 1,
            AdaptiveConfigError::MaxLimit,
            "max_limit",
        ),
        (
            |c| c.min_limit = 0,
            AdaptiveConfigError::MinLimit,
            "min_limit",
        ),
        (
            |c| c.min_limit = 21,
            AdaptiveConfigError::MinLimit,
            "min_limit",
        ),
        (
            |c| c.initial_limit = 1,
            AdaptiveConfigError::InitialLimit,
            "initial_limit",
        ),
        (
            |c| c.initial_limit = 21,
            AdaptiveConfigError::InitialLimit,
            "initial_limit",
        ),
        (
            |c| c.target_latency_ns = 0,
            AdaptiveConfigError::TargetLatency,
            "target_latency",
        ),
        (
            |c| c.increase_step = 0,
            AdaptiveConfigError::IncreaseStep,
            "increase_step",
        ),
        (
            |c| c.decrease_ratio = 0.0,
            AdaptiveConfigError::DecreaseRatio,
            "decrease_ratio",
        ),
        (
            |c| c.decrease_ratio = 1.0,
            AdaptiveConfigError::DecreaseRatio,
            "decrease_ratio",
        ),
        (
            |c| c.decrease_ratio = f64::NAN,
            AdaptiveConfigError::DecreaseRatio,
            "decrease_ratio",
        ),
        (
            |c| c.smoothing = 0.0,
            AdaptiveConfigError::Smoothing,
            "smoothing",
        ),
        (
            |c| c.smoothing = 1.5,
            AdaptiveConfigError::Smoothing,
            "smoothing",
        ),
        (
            |c| c.rtt_tolerance = 0.9,
            AdaptiveConfigError::RttTolerance,
            "rtt_tolerance",
        ),
        (
            |c| c.rtt_tolerance = f64::INFINITY,
            AdaptiveConfigError::RttTolerance,
            "rtt_tolerance",
        ),
        (
            |c| c.long_window = 0,
            AdaptiveConfigError::LongWindow,
            "long_window",
        ),
        (
            |c| c.queue_size = MAX_PERMITS + 1,
            AdaptiveConfigError::QueueSize,
            "queue_size",
        ),
    ];
    for (edit, want, name) in cases {
        let mut c = base;
        edit(&mut c);
        assert_eq!(c.validate(), Err(*want), "{name}");
        assert_eq!(want.option(), *name);
        let msg = std::format!("{want}");
        assert!(msg.contains(name), "{msg}");
        // Every constructor refuses it, whichever algorithm is selected.
        for alg in [Algorithm::Aimd, Algorithm::Gradient2] {
            let c = AdaptiveConfig {
                algorithm: alg,
                ..c
            };
            assert_eq!(AdaptiveController::new(&c).unwrap_err(), *want);
        }
        assert_eq!(Aimd::new(&c).unwrap_err(), *want);
        assert_eq!(Gradient2::new(&c).unwrap_err(), *want);
    }
    // Boundaries that are valid.
    let mut edge = base;
    edge.min_limit = 20;
    edge.initial_limit = 20;
    edge.smoothing = 1.0;
    edge.rtt_tolerance = 1.0;
    edge.queue_size = 0;
    edge.long_window = 1;
    assert_eq!(edge.validate(), Ok(()));
}

#[test]
fn controller_enum_dispatches_to_the_chosen_algorithm() {
    let a = AdaptiveController::new(&cfg(Algorithm::Aimd, 20, 1, 200)).unwrap();
    let g = AdaptiveController::new(&cfg(Algorithm::Gradient2, 20, 1, 200)).unwrap();
    assert_eq!(a.algorithm(), Algorithm::Aimd);
    assert_eq!(g.algorithm(), Algorithm::Gradient2);
    let (mut a, mut g) = (a, g);
    let (mut ra, mut rg) = (aimd(20, 1, 200), g2(20, 1, 200));
    let script = [
        ok(10 * MS, 20),
        ok(10 * MS, 20),
        failed(MS, 20),
        ok(900 * MS, 20),
    ];
    for s in script {
        assert_eq!(a.on_sample(s), ra.on_sample(s));
        assert_eq!(g.on_sample(s), rg.on_sample(s));
        assert_eq!(a.estimate(), ra.estimate());
        assert_eq!(g.estimate(), rg.estimate());
    }
    // The two rules really differ on this script.
    assert_ne!(a.limit(), g.limit());
}

// ---------------------------------------------------------------------------------------------
// AIMD
// ---------------------------------------------------------------------------------------------

/// Feeds `n` copies of `sample` and returns the limits after each.
fn feed(c: &mut impl Controller, sample: Sample, n: usize) -> Vec<u64> {
    (0..n).map(|_| c.on_sample(sample)).collect()
}

#[test]
fn aimd_increase_and_decrease_follow_design() {
    let mut c = Aimd::new(&AdaptiveConfig {
        increase_step: 3,
        ..cfg(Algorithm::Aimd, 10, 1, 100)
    })
    .unwrap();
    // Success with latency ≤ target (equal counts): one credit each; `limit` credits (one
    // round) → += increase_step.
    let limits = feed(&mut c, ok(500 * MS, 10), 10);
    assert_eq!(limits[..9], [10; 9]);
    assert_eq!(limits[9], 13);
    let limits = feed(&mut c, ok(MS, 13), 13);
    assert_eq!((limits[11], limits[12]), (13, 16));
    // Latency > target → floor(16 × 0.7) = 11 ...
    assert_eq!(c.on_sample(ok(500 * MS + 1, 16)), 11);
    // ... and the other 15 calls of that round, as slow, change nothing.
    assert_eq!(feed(&mut c, ok(600 * MS, 16), 15), [11; 15]);
    // The next round's slow sample decreases again: floor(11 × 0.7) = 7.
    assert_eq!(c.on_sample(ok(600 * MS, 11)), 7);
    // Failure (even a fast one, even inside a round) → floor(7 × 0.7) = 4.
    assert_eq!(c.on_sample(failed(1, 11)), 4);
    assert_eq!(c.estimate(), 4.0);
    // A decrease restarts the credits: 3 fast successes after 3 before it make no increase.
    let mut c = aimd(4, 1, 100);
    feed(&mut c, ok(MS, 4), 3);
    assert_eq!(c.on_sample(failed(1, 4)), 2);
    assert_eq!(feed(&mut c, ok(MS, 2), 2), [2, 3]);
}

#[test]
fn aimd_app_limited_guard_blocks_only_growth() {
    let mut c = aimd(20, 1, 100);
    // inflight × 2 < limit: a fast success does not grow the limit, nor earn a credit.
    assert_eq!(feed(&mut c, ok(MS, 9), 50), [20; 50]);
    // inflight × 2 == limit: twenty of them (one round) grow it.
    let limits = feed(&mut c, ok(MS, 10), 20);
    assert_eq!((limits[18], limits[19]), (20, 21));
    // A slow sample shrinks even when app-limited.
    assert_eq!(c.on_sample(ok(600 * MS, 1)), 14);
}

#[test]
fn aimd_clamps_to_min_and_max() {
    let mut c = aimd(8, 5, 10);
    // 8 credits → 9, 9 more → 10, then stays at the maximum.
    let limits = feed(&mut c, ok(MS, 10), 8 + 9 + 30);
    assert_eq!((limits[7], limits[16]), (9, 10));
    assert!(limits[16..].iter().all(|&l| l == 10));
    // 10 → 7 → floor(4.9) = 4, clamped to 5 → stays 5.
    for want in [7, 5, 5, 5] {
        assert_eq!(c.on_sample(failed(MS, 10)), want);
    }
    // A big step still clamps.
    let mut big = Aimd::new(&AdaptiveConfig {
        increase_step: MAX_PERMITS,
        ..cfg(Algorithm::Aimd, 1, 1, MAX_PERMITS)
    })
    .unwrap();
    assert_eq!(big.on_sample(ok(MS, 1)), MAX_PERMITS);
    assert_eq!(big.on_sample(ok(MS, MAX_PERMITS)), MAX_PERMITS);
}

#[test]
fn aimd_decrease_is_strict_even_when_rounding_says_otherwise() {
    let mut c = Aimd::new(&AdaptiveConfig {
        decrease_ratio: 0.999_999_999_999_999_9,
        ..cfg(Algorithm::Aimd, MAX_PERMITS, 1, MAX_PERMITS)
    })
    .unwrap();
    let mut last = c.limit();
    for _ in 0..10 {
        let now = c.on_sample(failed(MS, 1));
        assert!(now < last, "{now} !< {last}");
        last = now;
    }
}

/// Closed loop: a service with `capacity` slots; beyond that the excess queues, so
/// `rtt = base × max(limit, capacity) / capacity`, and the load saturates the limit.
fn closed_loop_rtt(base_ns: u64, limit: u64, capacity: u64) -> u64 {
    base_ns * limit.max(capacity) / capacity
}

/// The lowest and highest limit over `n` steps.
fn range(n: usize, mut step: impl FnMut() -> u64) -> (u64, u64) {
    (0..n).fold((u64::MAX, 0), |(lo, hi), _| {
        let l = step();
        (lo.min(l), hi.max(l))
    })
}

#[test]
fn aimd_converges_after_a_latency_step_change() {
    let mut c = aimd(100, 1, 100);
    let step = |c: &mut Aimd, base: u64| {
        let l = c.limit();
        c.on_sample(ok(closed_loop_rtt(base, l, 10), l))
    };
    // base 100 ms: rtt ≤ 500 ms iff limit ≤ 50, so the sawtooth is 35 ..= 51 (51 is too
    // slow → floor(51 × 0.7) = 35 → +1 per round of `limit` samples … → 51): one cycle is
    // 35 + 36 + … + 50 = 680 samples.
    for _ in 0..1000 {
        step(&mut c, 100 * MS);
    }
    assert_eq!(range(1400, || step(&mut c, 100 * MS)), (35, 51));

    // Step change to base 250 ms: rtt ≤ 500 ms iff limit ≤ 20; sawtooth 14 ..= 21. At worst
    // 51 → 35 → 24 → 16, each decrease after the round of the one before (≤ 51 + 35 + 24).
    let settled_after = (1..=200).find(|_| step(&mut c, 250 * MS) <= 21);
    assert!(
        settled_after.is_some_and(|n| n <= 51 + 35 + 24),
        "{settled_after:?}"
    );
    assert_eq!(range(400, || step(&mut c, 250 * MS)), (14, 21));

    // And back: the old sawtooth returns after the climb from 14 to 51 (14 + … + 50 = 1184
    // samples) plus one cycle.
    for _ in 0..1184 {
        step(&mut c, 100 * MS);
    }
    assert_eq!(range(1400, || step(&mut c, 100 * MS)), (35, 51));
}

#[test]
fn aimd_outage_collapses_then_recovers_in_a_bounded_number_of_samples() {
    let (min, max) = (1, 200);
    let mut c = aimd(max, min, max);
    // Outage: every call fails. 200 → 140 → 98 → 68 → 47 → 32 → 22 → 15 → 10 → 7 → 4 → 2 → 1:
    // twelve failures reach the minimum.
    let mut expect = max;
    let mut failures_to_min = 0;
    while c.limit() > min {
        expect = ((expect as f64 * 0.7) as u64).max(min);
        assert_eq!(c.on_sample(failed(5 * MS, c.limit())), expect);
        failures_to_min += 1;
    }
    assert_eq!(failures_to_min, 12);
    // The outage continues: the limit stays at the minimum, never below.
    for _ in 0..100 {
        assert_eq!(c.on_sample(failed(5 * MS, 1)), min);
    }
    // Outage over, load saturates the limit: +1 per round, so from 1 to 200 takes exactly
    // 1 + 2 + … + 199 = 19 900 fast successes — about 199 round trips, not 199 samples.
    let mut samples = 0;
    while c.limit() < max {
        let l = c.limit();
        let now = c.on_sample(ok(10 * MS, l));
        assert!(now == l || now == l + 1);
        samples += 1;
        assert!(samples <= 19_900);
    }
    assert_eq!(samples, 19_900);
}

// ---------------------------------------------------------------------------------------------
// C21: cancellations and rejections are ignored; drops shrink, never grow
// ---------------------------------------------------------------------------------------------

fn c21_recipe<C: Controller + Clone + PartialEq + core::fmt::Debug>(mut c: C, back_off: f64) {
    // Pure ignored samples: the controller state does not move at all.
    let before = c.clone();
    for i in 0..1000 {
        assert_eq!(c.on_sample(ignored(i % 3, 15)), before.limit());
    }
    assert_eq!(c, before);

    // 1000 requests at offered concurrency 15 on a healthy server (10 ms), half cancelled by
    // the client after 1 ms: 0 decreases.
    let mut decreases = 0;
    for i in 0..1000 {
        let prev = c.limit();
        let s = if i % 2 == 0 {
            ignored(MS, 15)
        } else {
            ok(10 * MS, 15)
        };
        if c.on_sample(s) < prev {
            decreases += 1;
        }
    }
    assert_eq!(decreases, 0);
    assert!(c.limit() >= 20, "{}", c.limit());

    // Ten genuine overload drops (fast ones, the #176 shape): strictly lower each time, never
    // below the minimum, and multiplicative.
    for _ in 0..10 {
        let prev = c.estimate();
        let now = c.on_sample(failed(0, 15));
        assert!(c.estimate() < prev);
        assert!(now >= 1);
        assert!(
            c.estimate() >= prev * back_off - 1.0,
            "{} vs {prev}",
            c.estimate()
        );
    }
}

#[test]
fn c21_aimd_ignored_samples_never_decrease() {
    let c = Aimd::new(&AdaptiveConfig {
        decrease_ratio: 0.9,
        ..cfg(Algorithm::Aimd, 20, 1, 200)
    })
    .unwrap();
    c21_recipe(c, 0.9);
}

#[test]
fn c21_gradient2_ignored_samples_never_decrease() {
    let c = Gradient2::new(&AdaptiveConfig {
        decrease_ratio: 0.9,
        ..cfg(Algorithm::Gradient2, 20, 1, 200)
    })
    .unwrap();
    // Smoothed back-off per failure: 0.8 + 0.2 × 0.9.
    c21_recipe(c, 0.98);
}

// ---------------------------------------------------------------------------------------------
// Gradient2
// ---------------------------------------------------------------------------------------------

/// Netflix `Gradient2Limit._update` as published (float state), for contrast.
struct NetflixGradient2 {
    estimate: f64,
    long: f64,
    count: u64,
}

impl NetflixGradient2 {
    fn new(initial: u64) -> Self {
        NetflixGradient2 {
            estimate: initial as f64,
            long: 0.0,
            count: 0,
        }
    }

    fn on_sample(&mut self, rtt_ns: u64, inflight: u64, max: u64) -> f64 {
        let short = rtt_ns as f64;
        if self.count < 10 {
            self.count += 1;
            self.long += (short - self.long) / self.count as f64;
        } else {
            let f = 2.0 / 601.0;
            self.long = self.long * (1.0 - f) + short * f;
        }
        let long = self.long;
        if long / short > 2.0 {
            self.long *= 0.95;
        }
        if (inflight as f64) < self.estimate / 2.0 {
            return self.estimate;
        }
        let gradient = (1.5 * long / short).clamp(0.5, 1.0);
        let new = self.estimate * gradient + 4.0;
        let new = self.estimate * 0.8 + new * 0.2;
        self.estimate = new.clamp(1.0, max as f64);
        self.estimate
    }
}

/// One round: `limit` samples of `rtt` with the limit fully used; returns the limit after it.
fn g2_round(c: &mut Gradient2, rtt_ns: u64) -> u64 {
    let l = c.limit();
    for _ in 0..l {
        c.on_sample(ok(rtt_ns, l));
    }
    c.limit()
}

#[test]
fn gradient2_grows_by_smoothed_headroom_and_keeps_a_float() {
    let mut c = g2(10, 1, 100);
    // No queueing, saturated: the first sample opens a round toward 10 + queue_size = 14 and
    // moves smoothing × 4 = 0.8 of the way.
    assert_eq!(c.on_sample(ok(10 * MS, 10)), 10);
    assert!((c.estimate() - 10.8).abs() < 1e-9);
    // The rest of the round aims at the same 14 (not 10.8 + 4): 10.8 × 0.8 + 14 × 0.2.
    assert_eq!(c.on_sample(ok(10 * MS, 10)), 11);
    assert!((c.estimate() - 11.44).abs() < 1e-9);
    for _ in 2..10 {
        c.on_sample(ok(10 * MS, 10));
    }
    // After the round's 10 samples: 14 − 4 × 0.8¹⁰, so at most + queue_size per round.
    assert!((c.estimate() - (14.0 - 4.0 * 0.8f64.powi(10))).abs() < 1e-9);
    assert_eq!(c.long_rtt_ns(), 10.0 * MS as f64);
    // A zero RTT does not divide by zero.
    c.on_sample(ok(0, 11));
    assert!(c.estimate().is_finite());
}

#[test]
fn gradient2_does_not_creep_under_modest_overload_and_recovers() {
    let (initial, max) = (50, 200);
    let mut c = g2(initial, 1, max);
    let mut nf = NetflixGradient2::new(initial);
    // Baseline at 10 ms while app-limited (inflight 20 < 50 / 2): no growth, baseline forms.
    for _ in 0..600 {
        assert_eq!(c.on_sample(ok(10 * MS, 20)), initial);
        nf.on_sample(10 * MS, 20, max);
    }
    assert!((c.long_rtt_ns() - 10.0 * MS as f64).abs() < 1.0);

    // Sustained modest overload: 1.3× baseline, load saturates the limit.
    for _ in 0..3000 {
        let l = c.limit();
        assert!(c.on_sample(ok(13 * MS, l)) <= initial);
        nf.on_sample(13 * MS, nf.estimate as u64, max);
    }
    assert_eq!(c.limit(), initial);
    // The published rule creeps all the way up on the same input (Netflix #134).
    assert!(nf.estimate >= 190.0, "{}", nf.estimate);

    // Overload over: back at 10 ms, + queue_size per round (the smoothing converges within a
    // round of ≥ 50 samples) → max after ⌈(200 − 50) / 4⌉ = 38 rounds; a no-load probe (once
    // per 600 samples of a fully used limit) costs a round each time.
    let mut rounds = 0;
    while c.limit() < max {
        let before = c.limit();
        let after = g2_round(&mut c, 10 * MS);
        assert!(after <= before + 4, "{before} → {after}");
        rounds += 1;
        assert!(rounds <= 60, "{}", c.limit());
    }
    assert!(rounds >= 38, "{rounds}");
}

#[test]
fn gradient2_adds_no_headroom_while_the_gradient_is_below_one() {
    let (initial, max) = (50, 200);
    let mut c = g2(initial, 1, max);
    let mut nf = NetflixGradient2::new(initial);
    for _ in 0..600 {
        c.on_sample(ok(10 * MS, 20));
        nf.on_sample(10 * MS, 20, max);
    }
    // RTT 1.875× baseline: gradient 1.5 / 1.875 = 0.8 at first (jhalterman's #134 example).
    let mut prev = c.estimate();
    for _ in 0..2000 {
        let l = c.limit();
        c.on_sample(ok(18_750_000, l));
        assert!(c.estimate() <= prev, "grew: {} > {prev}", c.estimate());
        prev = c.estimate();
        nf.on_sample(18_750_000, nf.estimate as u64, max);
    }
    assert!(c.limit() < initial / 2, "{}", c.limit());
    // Published rule: fixed point 4 / (1 − g) ≥ 20 and rising with the long RTT.
    assert!(nf.estimate >= 190.0, "{}", nf.estimate);
}

#[test]
fn gradient2_shrinks_hard_on_a_latency_spike() {
    let mut c = g2(100, 1, 100);
    for _ in 0..20 {
        c.on_sample(ok(10 * MS, 100));
    }
    // 20× the baseline: gradient clamps at 0.5, so the first sample moves 0.8 + 0.2 × 0.5 =
    // ×0.9 …
    let before = c.estimate();
    c.on_sample(ok(200 * MS, 100));
    assert!((c.estimate() - before * 0.9).abs() < 1e-9);
    // … and each of the controller's rounds at most halves it (the round's target is half its
    // start): a window of `limit` samples spans at most two rounds, so it keeps at least a
    // quarter (Netflix's per-sample rule keeps ×0.9¹⁰⁰ ≈ 0.00003 of it).
    let mut rounds = 0;
    while c.limit() > 2 {
        let prev = c.estimate();
        g2_round(&mut c, 200 * MS);
        assert!(c.estimate() < prev && c.estimate() >= prev / 4.0 - 1e-9);
        rounds += 1;
        assert!(rounds <= 12, "{}", c.limit());
    }
}

#[test]
fn gradient2_probes_the_no_load_rtt_under_a_standing_queue() {
    // An upstream overloaded from the start: 30 ms at any limit near 40, which the long RTT
    // takes as its baseline — plain Gradient2 would hold the limit there for good.
    let mut c = g2(40, 1, 100);
    let mut n = 0;
    while !c.probing() {
        let l = c.limit();
        c.on_sample(ok(30 * MS, l));
        n += 1;
        assert!(n <= 600, "no probe after {n} samples");
    }
    // Once per long_window (600) samples of a fully used limit: the limit halves for a round.
    assert_eq!(n, 600);
    let saved = 2.0 * c.estimate();
    assert_eq!(c.no_load_rtt_ns(), Some(30.0 * MS as f64));
    // At half the load the queue drains: 10 ms. ⌈1.5 × limit⌉ samples end the probe.
    let probe_len = (saved * 1.5).ceil() as u64;
    for i in 0..probe_len {
        assert!(c.probing(), "ended early at {i}");
        c.on_sample(ok(10 * MS, c.limit()));
    }
    assert!(!c.probing());
    assert_eq!(c.no_load_rtt_ns(), Some(10.0 * MS as f64));
    assert_eq!(c.estimate(), saved);
    // Back at full load, 30 ms is now 3× the no-load RTT: gradient 1.5 / 3 = 0.5, a shrink.
    let before = c.estimate();
    c.on_sample(ok(30 * MS, c.limit()));
    assert!(
        (c.estimate() - before * 0.9).abs() < 1e-9,
        "{}",
        c.estimate()
    );
}

#[test]
fn gradient2_failures_never_grow_and_feed_no_rtt() {
    let mut c = g2(50, 1, 100);
    for _ in 0..20 {
        c.on_sample(ok(10 * MS, 50));
    }
    let long = c.long_rtt_ns();
    // Drops finish almost at once (Netflix #176): each one shrinks by 0.8 + 0.2 × 0.7 = 0.94.
    for _ in 0..20 {
        let prev = c.estimate();
        let l = c.limit();
        c.on_sample(failed(1, l));
        assert!((c.estimate() - prev * 0.94).abs() < 1e-9);
    }
    assert_eq!(c.long_rtt_ns(), long);
    // Ignored samples change nothing at all.
    let snapshot = c.clone();
    for _ in 0..100 {
        c.on_sample(ignored(1, 100));
    }
    assert_eq!(c, snapshot);
}

#[test]
fn gradient2_app_limited_guard_blocks_only_growth() {
    let mut c = g2(40, 1, 100);
    for _ in 0..50 {
        assert_eq!(c.on_sample(ok(10 * MS, 19)), 40);
    }
    assert_eq!(c.estimate(), 40.0);
    // inflight × 2 == limit: growth allowed.
    c.on_sample(ok(10 * MS, 20));
    assert!(c.estimate() > 40.0);
    // A latency spike shrinks even an under-used limit.
    let prev = c.estimate();
    c.on_sample(ok(100 * MS, 1));
    assert!(c.estimate() < prev);
}

#[test]
fn gradient2_clamps_to_min_and_max() {
    let mut c = g2(8, 5, 10);
    for _ in 0..50 {
        assert!(c.on_sample(ok(10 * MS, 10)) <= 10);
    }
    assert_eq!((c.limit(), c.estimate()), (10, 10.0));
    for _ in 0..200 {
        assert!(c.on_sample(failed(MS, 10)) >= 5);
    }
    assert_eq!((c.limit(), c.estimate()), (5, 5.0));
    for _ in 0..200 {
        assert!(c.on_sample(ok(10_000 * MS, 10)) >= 5);
    }
    assert_eq!(c.limit(), 5);
}

#[test]
fn gradient2_long_rtt_decays_after_an_outage() {
    let mut c = g2(20, 1, 200);
    for _ in 0..10 {
        c.on_sample(ok(2000 * MS, 20));
    }
    assert!((c.long_rtt_ns() - 2000.0 * MS as f64).abs() < 1.0);
    // Back to 10 ms: long/short > 2 → ×0.95 per sample on top of the average, so the baseline
    // is back within 2× in ~100 samples rather than the ~1600 the EMA alone would need.
    let mut n = 0;
    while c.long_rtt_ns() > 20.0 * MS as f64 {
        let l = c.limit();
        c.on_sample(ok(10 * MS, l));
        n += 1;
        assert!(n <= 120, "long rtt {}", c.long_rtt_ns());
    }
    assert!(c.limit() > 20);
}

// ---------------------------------------------------------------------------------------------
// C20: collapse under an outage, recovery after it (time-based simulation)
// ---------------------------------------------------------------------------------------------

struct C20Result {
    limit_at_90s: u64,
    limit_end_phase1: u64,
    first_at_20_after_90s_ns: Option<u64>,
    longest_at_min_phase3_ns: u64,
    limit_end: u64,
}

/// The C20 recipe: initial 20, min 1, max 200, offered concurrency 50; RTT 10 ms for 0–60 s,
/// 2000 ms for 60–90 s, 10 ms for 90–150 s. Rounds: `n = min(50, limit)` calls start together
/// and all finish one RTT later, each one a sample with `inflight = n`.
fn run_c20(c: &mut AdaptiveController) -> C20Result {
    const S: u64 = 1_000_000_000;
    let mut t = 0;
    let mut r = C20Result {
        limit_at_90s: 0,
        limit_end_phase1: 0,
        first_at_20_after_90s_ns: None,
        longest_at_min_phase3_ns: 0,
        limit_end: 0,
    };
    let mut at_min_since = None;
    while t < 150 * S {
        let rtt = if (60 * S..90 * S).contains(&t) {
            2000 * MS
        } else {
            10 * MS
        };
        let n = c.limit().min(50);
        for _ in 0..n {
            c.on_sample(ok(rtt, n));
        }
        t += rtt;
        let l = c.limit();
        if t <= 60 * S {
            r.limit_end_phase1 = l;
        }
        if t <= 90 * S {
            r.limit_at_90s = l;
        } else {
            if l >= 20 && r.first_at_20_after_90s_ns.is_none() {
                r.first_at_20_after_90s_ns = Some(t - 90 * S);
            }
            if l == 1 {
                let since = *at_min_since.get_or_insert(t);
                r.longest_at_min_phase3_ns = r.longest_at_min_phase3_ns.max(t - since);
            } else {
                at_min_since = None;
            }
        }
    }
    r.limit_end = c.limit();
    r
}

fn check_c20(r: &C20Result) {
    const S: u64 = 1_000_000_000;
    // Phase 1 grows the limit up to what the offered load uses: the app-limited guard stops
    // growth once the limit exceeds 2 × 50 (one last step from exactly 100 is allowed).
    assert!(r.limit_end_phase1 >= 50, "{}", r.limit_end_phase1);
    assert!(r.limit_end_phase1 <= 101, "{}", r.limit_end_phase1);
    assert!(r.limit_at_90s <= 10, "{}", r.limit_at_90s);
    assert!(
        r.first_at_20_after_90s_ns.is_some_and(|d| d <= 30 * S),
        "{:?}",
        r.first_at_20_after_90s_ns
    );
    assert!(r.longest_at_min_phase3_ns <= 5 * S);
    assert!(r.limit_end >= 50, "{}", r.limit_end);
}

#[cfg_attr(miri, ignore = "a 150 s virtual run: ~600k samples")]
#[test]
fn c20_aimd_collapses_in_the_outage_and_recovers() {
    let mut c = AdaptiveController::new(&cfg(Algorithm::Aimd, 20, 1, 200)).unwrap();
    let r = run_c20(&mut c);
    check_c20(&r);
    // AIMD reaches 20 after 19 successes at limit ≤ 19: well inside one second.
    assert!(r.first_at_20_after_90s_ns.unwrap() <= 1_000_000_000);
}

#[cfg_attr(miri, ignore = "a 150 s virtual run: ~600k samples")]
#[test]
fn c20_gradient2_collapses_in_the_outage_and_recovers() {
    let mut c = AdaptiveController::new(&cfg(Algorithm::Gradient2, 20, 1, 200)).unwrap();
    let r = run_c20(&mut c);
    check_c20(&r);
    // The 2000 ms samples do not inflate the baseline for good: ≤ 2 × 10 ms at the end.
    let AdaptiveController::Gradient2(g) = &c else {
        unreachable!()
    };
    assert!(g.long_rtt_ns() <= 20.0 * MS as f64, "{}", g.long_rtt_ns());
}

/// `initial_limit: 0` means "start at `max_limit`" (docs/design.md §6: `initial_limit` = `max_limit`),
/// so a binding that got only `max_limit` from its user needs no rule of its own.
#[test]
fn initial_limit_zero_starts_at_max_limit() {
    for algorithm in [Algorithm::Aimd, Algorithm::Gradient2] {
        let cfg = AdaptiveConfig {
            algorithm,
            initial_limit: 0,
            max_limit: 5,
            ..AdaptiveConfig::for_max_concurrent(10)
        };
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.start_limit(), 5);
        assert_eq!(AdaptiveController::new(&cfg).unwrap().limit(), 5);
    }
}
