//! Criterion estimates for every case of `hullguard_bench::cases()` (one group per row kind:
//! `uncontended`, `2t-shared`, `2t-private`, `handoff`, `depth-cycle`, `depth-cancel`).
//!
//! Each case times exactly the ops criterion asks for (`iter_custom`); set-up is never timed.
//! Two-thread cases report the time per op *per thread*. The ratio table (`src/bin/ratios.rs`)
//! is the report; these are the per-case details.
//!
//! Smoke mode (`bench/smoke.sh`): `cargo bench -p hullguard-bench --bench engine -- --test` is
//! criterion's own test mode, every case run once (one iteration), nothing measured.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use hullguard_bench::cases;

fn engine(c: &mut Criterion) {
    let all = cases();
    let mut groups: Vec<&str> = Vec::new();
    for case in &all {
        let group = case.name.split('/').next().expect("row/engine");
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    for group in groups {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(1));
        if group.starts_with("depth") {
            // Each sample rebuilds a queue of up to 100 000 waiters (untimed): keep it short.
            g.sample_size(10);
        }
        for case in all
            .iter()
            .filter(|c| c.name.split('/').next() == Some(group))
        {
            let id = &case.name[group.len() + 1..];
            g.bench_function(BenchmarkId::from_parameter(id), |b| {
                b.iter_custom(|iters| (case.run)(iters))
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    targets = engine
}
criterion_main!(benches);
