//! The ratio table of docs/design.md § Benchmarks: every case of `hullguard_bench::cases()` in
//! one run, hullguard beside its anchors, `REPS` (default 9, at least 5) interleaved repetitions
//! whose order alternates (forward, then reversed); each row prints the median of the
//! per-repetition ratios with their min–max.
//!
//! Usage: `cargo run --release -p hullguard-bench --bin ratios [-- --smoke]` (`REPS=n` to change
//! the count). `--smoke` runs every case once, [`SMOKE_OPS`] ops per batch, and prints the same
//! table: it proves the driver runs end to end in a second or two (`bench/smoke.sh`); its numbers
//! mean nothing. Before anything runs, every row must name known cases and every case must be
//! in a row (a gap is an error at start-up, not a panic after the run).

use hullguard_bench::machine::{
    Background, background_line, cpu_model, median, min_max, repetitions,
};
use std::{collections::HashMap, fmt::Write as _, time::Instant};

use hullguard_bench::{Case, DEPTHS, HANDOFF_TASKS, cases};

/// An aggregate 2-thread throughput at least this many times one thread's counts as parallel
/// (the control row's ratio is then at most `2 / PARALLEL`).
const PARALLEL: f64 = 1.6;

/// "Stays flat": the per-op cost at a depth at most this many times the cost at depth 10
/// (an O(depth) step would be 100× to 10 000×).
const FLAT: f64 = 1.5;

/// Ops per batch in `--smoke` mode (a multiple of the handoff row's task count).
const SMOKE_OPS: u64 = 4 * HANDOFF_TASKS as u64;

/// The engines of the no-sharing control: `uncontended/<engine>` beside `2t-private/<engine>`.
const CONTROL_ENGINES: [(&str, &str); 3] = [
    ("hullguard", "hullguard"),
    ("cas", "CAS loop"),
    ("tokio", "tokio"),
];

enum Target {
    /// Pass when the median ratio is at most this.
    Max(f64),
    /// Reported, not judged.
    Info,
}

struct Row {
    label: String,
    anchor_label: String,
    hg: String,
    anchor: String,
    target: Target,
}

fn row(label: &str, anchor_label: &str, hg: &str, anchor: &str, target: Target) -> Row {
    Row {
        label: label.into(),
        anchor_label: anchor_label.into(),
        hg: hg.into(),
        anchor: anchor.into(),
        target,
    }
}

fn rows() -> Vec<Row> {
    use Target::*;
    let mut v = vec![
        row(
            "uncontended try_acquire+release",
            "CAS loop",
            "uncontended/hullguard",
            "uncontended/cas",
            Max(1.6),
        ),
        row(
            "uncontended try_acquire+release",
            "tokio",
            "uncontended/hullguard",
            "uncontended/tokio",
            Max(0.8),
        ),
        row(
            "  with an observer (events: admit + release)",
            "no observer",
            "uncontended/hullguard+observer",
            "uncontended/hullguard",
            Info,
        ),
        row(
            "2 threads, one shared limiter (per thread)",
            "tokio",
            "2t-shared/hullguard",
            "2t-shared/tokio",
            Max(0.6),
        ),
        row(
            "2 threads, one shared limiter (per thread)",
            "CAS loop",
            "2t-shared/hullguard",
            "2t-shared/cas",
            Info,
        ),
        row(
            "control: 2 threads, no sharing, hullguard",
            "1 thread, same",
            "2t-private/hullguard",
            "uncontended/hullguard",
            Max(2.0 / PARALLEL),
        ),
        row(
            "control: 2 threads, no sharing, CAS loop",
            "1 thread, same",
            "2t-private/cas",
            "uncontended/cas",
            Max(2.0 / PARALLEL),
        ),
        row(
            "control: 2 threads, no sharing, tokio",
            "1 thread, same",
            "2t-private/tokio",
            "uncontended/tokio",
            Max(2.0 / PARALLEL),
        ),
        row(
            "calls + budget: admit + end, uncontended",
            "same, no budget",
            "budget/calls+budget",
            "budget/plain",
            Max(1.5),
        ),
        row(
            "8 classes + reserve: admit + end, uncontended",
            "plain admit + end",
            "classes/8+reserve",
            "budget/plain",
            Max(2.0),
        ),
        row(
            "  1 class",
            "plain admit + end",
            "classes/1",
            "budget/plain",
            Info,
        ),
        row(
            "  beyond its floor (through the dispatcher)",
            "plain admit + end",
            "classes/8+reserve/shared",
            "budget/plain",
            Info,
        ),
        row(
            "  8 classes + reserve",
            "1 class",
            "classes/8+reserve",
            "classes/1",
            Max(1.2),
        ),
        row(
            "  64 classes",
            "1 class",
            "classes/64",
            "classes/1",
            Max(1.2),
        ),
        row(
            &format!("handoff: limit 1, {HANDOFF_TASKS} tasks, current-thread rt"),
            "tokio",
            "handoff/hullguard",
            "handoff/tokio",
            Max(0.8),
        ),
        row(
            "guarded call: breaker + adaptive (empty body)",
            "bare + 1 clock read",
            "guarded/composed",
            "guarded/bare+clock",
            Max(1.0),
        ),
        row(
            "guarded call: breaker + adaptive (empty body)",
            "bare bulkhead",
            "guarded/composed",
            "guarded/bare",
            Info,
        ),
        row(
            "  breaker only",
            "bare bulkhead",
            "guarded/breaker",
            "guarded/bare",
            Info,
        ),
        row(
            "  adaptive only (gradient2)",
            "bare bulkhead",
            "guarded/adaptive",
            "guarded/bare",
            Info,
        ),
        row(
            "  one host clock read",
            "bare bulkhead",
            "guarded/bare+clock",
            "guarded/bare",
            Info,
        ),
    ];
    for d in DEPTHS {
        v.push(row(
            &format!("depth {d}: release→grant→enqueue"),
            "tokio",
            &format!("depth-cycle/{d}/hullguard"),
            &format!("depth-cycle/{d}/tokio"),
            Info,
        ));
    }
    for d in &DEPTHS[1..] {
        v.push(row(
            &format!("  flat? depth {d} vs 10, hullguard"),
            "depth 10",
            &format!("depth-cycle/{d}/hullguard"),
            &format!("depth-cycle/{}/hullguard", DEPTHS[0]),
            Max(FLAT),
        ));
        v.push(row(
            &format!("  flat? depth {d} vs 10, tokio"),
            "depth 10",
            &format!("depth-cycle/{d}/tokio"),
            &format!("depth-cycle/{}/tokio", DEPTHS[0]),
            Info,
        ));
    }
    for d in &DEPTHS[1..] {
        v.push(row(
            &format!("  flat? depth {d} vs 10, 8 classes"),
            "depth 10",
            &format!("depth-cycle/{d}/classed"),
            &format!("depth-cycle/{}/classed", DEPTHS[0]),
            Max(1.2),
        ));
    }
    v.push(row(
        "  8 classes, depth 10 (the pass)",
        "plain, depth 10",
        &format!("depth-cycle/{}/classed", DEPTHS[0]),
        &format!("depth-cycle/{}/hullguard", DEPTHS[0]),
        Info,
    ));
    for d in DEPTHS {
        v.push(row(
            &format!("depth {d}: cancel middle + enqueue"),
            "tokio",
            &format!("depth-cancel/{d}/hullguard"),
            &format!("depth-cancel/{d}/tokio"),
            Info,
        ));
    }
    for d in &DEPTHS[1..] {
        v.push(row(
            &format!("  flat? depth {d} vs 10, hullguard"),
            "depth 10",
            &format!("depth-cancel/{d}/hullguard"),
            &format!("depth-cancel/{}/hullguard", DEPTHS[0]),
            Max(FLAT),
        ));
        v.push(row(
            &format!("  flat? depth {d} vs 10, tokio"),
            "depth 10",
            &format!("depth-cancel/{d}/tokio"),
            &format!("depth-cancel/{}/tokio", DEPTHS[0]),
            Info,
        ));
    }
    v
}

fn ns_per_op(c: &Case, batch: u64) -> f64 {
    let d = (c.run)(batch);
    d.as_secs_f64() * 1e9 / batch as f64
}

/// The gaps between the rows and the cases: a row (or the control) naming an unknown case, a
/// case in no row (measured, never reported).
fn table_gaps(rows: &[Row], cases: &[Case]) -> Vec<String> {
    let known = |name: &str| cases.iter().any(|c| c.name == name);
    let mut gaps = Vec::new();
    for r in rows {
        for name in [&r.hg, &r.anchor] {
            if !known(name) {
                gaps.push(format!(
                    "row {:?} names an unknown case {name:?}",
                    r.label.trim()
                ));
            }
        }
    }
    for (engine, _) in CONTROL_ENGINES {
        for name in [
            format!("uncontended/{engine}"),
            format!("2t-private/{engine}"),
        ] {
            if !known(&name) {
                gaps.push(format!("the no-sharing control needs the case {name:?}"));
            }
        }
    }
    for c in cases {
        if !rows.iter().any(|r| r.hg == c.name || r.anchor == c.name) {
            gaps.push(format!(
                "case {:?} is in no row (measured, never reported)",
                c.name
            ));
        }
    }
    gaps
}

fn main() {
    let mut smoke = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--smoke" => smoke = true,
            _ => {
                eprintln!("usage: ratios [--smoke]   (REPS=n: repetitions, default 9, at least 5)");
                std::process::exit(2);
            }
        }
    }
    let reps = repetitions(smoke);
    let cases = cases();
    let rows = rows();
    let gaps = table_gaps(&rows, &cases);
    if !gaps.is_empty() {
        eprintln!("ratios: the row table has gaps:\n  {}", gaps.join("\n  "));
        std::process::exit(1);
    }
    let batch = |c: &Case| if smoke { SMOKE_OPS } else { c.batch };
    let started = Instant::now();
    let background = Background::start();

    // Warm-up: every case once, a tenth of a batch (page faults, allocator, CPU frequency).
    for c in &cases {
        (c.run)((batch(c) / 10).max(1));
    }
    let mut ns: HashMap<&str, Vec<f64>> = HashMap::new();
    for rep in 0..reps {
        let order: Vec<&Case> = if rep % 2 == 0 {
            cases.iter().collect()
        } else {
            cases.iter().rev().collect()
        };
        for c in order {
            ns.entry(c.name.as_str())
                .or_default()
                .push(ns_per_op(c, batch(c)));
        }
    }

    let mut out = String::new();
    if smoke {
        let _ = writeln!(
            out,
            "SMOKE RUN (--smoke): 1 repetition of {SMOKE_OPS}-op batches; the numbers below mean \
             nothing"
        );
    }
    let _ = writeln!(
        out,
        "hullguard ratio table — {} ({} logical CPUs), {reps} interleaved repetitions, \
         alternating order; ns per op, ratio = hullguard / anchor per repetition",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let _ = writeln!(out);
    let header = format!(
        "{:<46} {:<15} {:>11} {:>11}  {:<22} {:<8} {}",
        "row", "anchor", "hullguard", "anchor", "ratio median (min–max)", "target", "result"
    );
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "{}", "-".repeat(header.chars().count()));
    let mut misses = 0;
    for r in &rows {
        let (hg, an) = (&ns[r.hg.as_str()], &ns[r.anchor.as_str()]);
        let ratios: Vec<f64> = hg.iter().zip(an).map(|(h, a)| h / a).collect();
        let (lo, hi) = min_max(&ratios);
        let med = median(&ratios);
        let (target, result) = match r.target {
            Target::Max(t) if med <= t => (format!("≤ {t:.2}"), "pass"),
            Target::Max(t) => {
                misses += 1;
                (format!("≤ {t:.2}"), "MISS")
            }
            Target::Info => ("—".to_string(), "info"),
        };
        let _ = writeln!(
            out,
            "{:<46} {:<15} {:>11.2} {:>11.2}  {:<22} {:<8} {}",
            r.label,
            r.anchor_label,
            median(hg),
            median(an),
            format!("{med:.2} ({lo:.2}–{hi:.2})"),
            target,
            result
        );
    }

    // The 2-thread rows count only if the no-sharing control shows two threads at work.
    let _ = writeln!(out);
    let mut parallel = true;
    for (engine, label) in CONTROL_ENGINES {
        let one = &ns[format!("uncontended/{engine}").as_str()];
        let two = &ns[format!("2t-private/{engine}").as_str()];
        let speedups: Vec<f64> = one.iter().zip(two).map(|(o, t)| 2.0 * o / t).collect();
        let (lo, hi) = min_max(&speedups);
        let med = median(&speedups);
        parallel &= med >= PARALLEL;
        let _ = writeln!(
            out,
            "no-sharing control, {label}: 2 threads = {med:.2}× one thread's throughput \
             ({lo:.2}–{hi:.2})"
        );
    }
    let _ = writeln!(
        out,
        "threads ran in parallel (control ≥ {PARALLEL:.1}×): {} — the 2-thread rows are {}",
        if parallel { "yes" } else { "NO" },
        if parallel { "valid" } else { "NOT valid" }
    );
    let _ = writeln!(out, "{}", background_line("the run", background.shares()));
    let _ = writeln!(
        out,
        "{misses} target(s) missed; {:.0} s",
        started.elapsed().as_secs_f64()
    );
    print!("{out}");
}
