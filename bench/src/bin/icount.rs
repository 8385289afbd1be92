//! Callgrind instruction counts of the single-thread cases (docs/design.md § Benchmarks), and
//! their ratios.
//!
//! * `icount run <case> <n>` — runs `n` ops of one case (this is what callgrind measures).
//! * `icount list` — the single-thread cases.
//! * `icount table` — for every single-thread case, runs `valgrind --tool=callgrind` on
//!   `icount run <case> N1` and `… N2`, takes instructions per op as
//!   `(Ir(N2) − Ir(N1)) / (N2 − N1)` (start-up, runtime and queue set-up cancel out), and prints
//!   hullguard beside its anchors. `VALGRIND` overrides the valgrind binary.
//! * `icount table --smoke` — the same runs and table at tiny sizes ([`SMOKE_N1`], [`SMOKE_N2`]):
//!   proves the driver runs end to end in seconds (`bench/smoke.sh`); its counts mean nothing.
//!
//! Before any valgrind run, every row must name single-thread cases and every single-thread case
//! must be in a row: a gap is an error at start-up, not a panic after the runs.
//!
//! Instruction counts are deterministic here, but they weigh a `lock cmpxchg` like a `mov`, so
//! the table also counts the locked read-modify-writes per op (`lock`-prefixed instructions and
//! `xchg` with memory, found with `objdump -d` in this binary and counted by callgrind's
//! per-instruction costs): on x86 each is a full barrier of ~20 cycles even uncontended, which
//! is what the timed table mostly measures.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    process::Command,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use hullguard_bench::{CANCEL_CHUNK, DEPTHS, HANDOFF_TASKS, Kind, cases, find};

/// The two op counts whose difference gives instructions per op. `N2` stays within one
/// hullguard cancel chunk so that no untimed rebuild lands between the two runs.
const N1: u64 = 16_000;
const N2: u64 = 80_000;
/// The sizes of `table --smoke`.
const SMOKE_N1: u64 = 160;
const SMOKE_N2: u64 = 480;
const _: () = assert!(N2 <= CANCEL_CHUNK && N1 % HANDOFF_TASKS as u64 == 0);
const _: () = assert!(SMOKE_N2 <= CANCEL_CHUNK && SMOKE_N1 % HANDOFF_TASKS as u64 == 0);

fn usage() -> ! {
    eprintln!("usage: icount run <case> <n> | icount list | icount table [--smoke]");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") if args.len() == 3 => {
            let case = find(&args[1]).unwrap_or_else(|| {
                eprintln!("no case named {:?} (see `icount list`)", args[1]);
                std::process::exit(2)
            });
            let n: u64 = args[2].parse().unwrap_or_else(|_| usage());
            let d = (case.run)(n);
            println!("{} {n} ops {:?}", case.name, d);
        }
        Some("list") => {
            for c in cases().iter().filter(|c| c.kind == Kind::SingleThread) {
                println!("{}", c.name);
            }
        }
        Some("table") if args.len() == 1 => table(N1, N2, false),
        Some("table") if args.len() == 2 && args[1] == "--smoke" => table(SMOKE_N1, SMOKE_N2, true),
        _ => usage(),
    }
}

/// What one callgrind run of `icount run case n` counted.
#[derive(Clone, Copy)]
struct Counts {
    /// Instructions executed (the whole process).
    ir: u64,
    /// Locked RMWs executed in this binary (`None` without `objdump`).
    rmw: Option<u64>,
}

/// Addresses (in this binary, as callgrind reports them) of the instructions that are locked
/// read-modify-writes: a `lock` prefix, or `xchg` with a memory operand (implicitly locked).
fn locked_instructions(exe: &Path) -> Option<HashSet<u64>> {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(exe)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut set = HashSet::new();
    for line in text.lines() {
        let Some((addr, insn)) = line.trim_start().split_once(":\t") else {
            continue;
        };
        let insn = insn.trim_start();
        if insn.starts_with("lock ") || (insn.starts_with("xchg") && insn.contains('(')) {
            if let Ok(a) = u64::from_str_radix(addr, 16) {
                set.insert(a);
            }
        }
    }
    Some(set)
}

/// Sums callgrind's per-instruction costs (`--dump-instr=yes --compress-pos=no
/// --compress-strings=no`) at `locked` addresses of the object named `exe_name`.
fn sum_locked(profile: &str, exe_name: &str, locked: &HashSet<u64>) -> u64 {
    let mut in_exe = false;
    let mut skip_next = false;
    let mut sum = 0;
    for line in profile.lines() {
        if let Some(ob) = line.strip_prefix("ob=") {
            in_exe = Path::new(ob.trim()).file_name() == Some(exe_name.as_ref());
        } else if line.starts_with("calls=") {
            // The next cost line is the call's inclusive cost, not an instruction's own.
            skip_next = true;
        } else if line.starts_with("0x") {
            if std::mem::take(&mut skip_next) || !in_exe {
                continue;
            }
            let mut fields = line.split_whitespace();
            let addr = fields
                .next()
                .and_then(|a| u64::from_str_radix(&a[2..], 16).ok());
            let ir = fields.last().and_then(|c| c.parse::<u64>().ok());
            if let (Some(a), Some(ir)) = (addr, ir) {
                if locked.contains(&a) {
                    sum += ir;
                }
            }
        }
    }
    sum
}

/// One callgrind run of `icount run case n`.
fn callgrind(valgrind: &str, case: &str, n: u64, locked: Option<&HashSet<u64>>) -> Counts {
    let exe = std::env::current_exe().expect("own path");
    let profile = std::env::temp_dir().join(format!(
        "hullguard-icount-{}-{}-{n}.out",
        std::process::id(),
        case.replace('/', "_")
    ));
    let out = Command::new(valgrind)
        .args([
            "--tool=callgrind",
            "--dump-instr=yes",
            "--compress-pos=no",
            "--compress-strings=no",
        ])
        .arg(format!("--callgrind-out-file={}", profile.display()))
        .arg(&exe)
        .args(["run", case, &n.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {valgrind}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "callgrind run of {case} {n} failed:\n{stderr}"
    );
    let ir = stderr
        .lines()
        .find_map(|l| {
            l.split_once("Collected :")
                .map(|(_, v)| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `Collected :` line from callgrind:\n{stderr}"));
    let rmw = locked.map(|set| {
        let text = std::fs::read_to_string(&profile).expect("callgrind profile");
        let name = exe.file_name().and_then(|n| n.to_str()).expect("exe name");
        sum_locked(&text, name, set)
    });
    let _ = std::fs::remove_file(&profile);
    Counts { ir, rmw }
}

/// One row of the table: label, anchor label, hullguard case, anchor case, the timed target.
type TableRow = (String, &'static str, String, String, &'static str);

fn rows() -> Vec<TableRow> {
    let mut rows: Vec<TableRow> = vec![
        (
            "uncontended try_acquire+release".into(),
            "CAS loop",
            "uncontended/hullguard".into(),
            "uncontended/cas".into(),
            "≤ 1.60",
        ),
        (
            "uncontended try_acquire+release".into(),
            "tokio",
            "uncontended/hullguard".into(),
            "uncontended/tokio".into(),
            "≤ 0.80",
        ),
        (
            "  with an observer (events: admit + release)".into(),
            "no observer",
            "uncontended/hullguard+observer".into(),
            "uncontended/hullguard".into(),
            "—",
        ),
        (
            "calls + budget: admit + end, uncontended".into(),
            "no budget",
            "budget/calls+budget".into(),
            "budget/plain".into(),
            "≤ 1.50",
        ),
        (
            "8 classes + reserve: admit + end, uncontended".into(),
            "plain admit + end",
            "classes/8+reserve".into(),
            "budget/plain".into(),
            "≤ 2.00",
        ),
        (
            "  1 class".into(),
            "plain admit + end",
            "classes/1".into(),
            "budget/plain".into(),
            "—",
        ),
        (
            "  beyond its floor (through the dispatcher)".into(),
            "plain admit + end",
            "classes/8+reserve/shared".into(),
            "budget/plain".into(),
            "—",
        ),
        (
            "  8 classes + reserve".into(),
            "1 class",
            "classes/8+reserve".into(),
            "classes/1".into(),
            "≤ 1.20",
        ),
        (
            "  64 classes".into(),
            "1 class",
            "classes/64".into(),
            "classes/1".into(),
            "≤ 1.20",
        ),
        (
            format!("handoff: limit 1, {HANDOFF_TASKS} tasks, current-thread rt"),
            "tokio",
            "handoff/hullguard".into(),
            "handoff/tokio".into(),
            "≤ 0.80",
        ),
        (
            "guarded call: breaker + adaptive (empty body)".into(),
            "bare+clock",
            "guarded/composed".into(),
            "guarded/bare+clock".into(),
            "≤ 1.00",
        ),
        (
            "guarded call: breaker + adaptive (empty body)".into(),
            "bare",
            "guarded/composed".into(),
            "guarded/bare".into(),
            "—",
        ),
        (
            "  breaker only".into(),
            "bare",
            "guarded/breaker".into(),
            "guarded/bare".into(),
            "—",
        ),
        (
            "  adaptive only (gradient2)".into(),
            "bare",
            "guarded/adaptive".into(),
            "guarded/bare".into(),
            "—",
        ),
        (
            "  one host clock read".into(),
            "bare",
            "guarded/bare+clock".into(),
            "guarded/bare".into(),
            "—",
        ),
    ];
    let (lo, hi) = (DEPTHS[0], DEPTHS[DEPTHS.len() - 1]);
    rows.push((
        format!("  8 classes, depth {lo} (the pass)"),
        "plain",
        format!("depth-cycle/{lo}/classed"),
        format!("depth-cycle/{lo}/hullguard"),
        "—",
    ));
    for d in &DEPTHS[1..] {
        rows.push((
            format!("  flat? depth {d} vs {lo}, 8 classes"),
            "depth 10",
            format!("depth-cycle/{d}/classed"),
            format!("depth-cycle/{lo}/classed"),
            "≤ 1.20",
        ));
    }
    let _ = hi;
    for (what, label) in [
        ("depth-cycle", "release→grant→enqueue"),
        ("depth-cancel", "cancel middle + enqueue"),
    ] {
        for d in DEPTHS {
            rows.push((
                format!("depth {d}: {label}"),
                "tokio",
                format!("{what}/{d}/hullguard"),
                format!("{what}/{d}/tokio"),
                "—",
            ));
        }
        let (lo, hi) = (DEPTHS[0], DEPTHS[DEPTHS.len() - 1]);
        for engine in ["hullguard", "tokio"] {
            rows.push((
                format!("  flat? depth {hi} vs {lo}, {engine}"),
                "depth 10",
                format!("{what}/{hi}/{engine}"),
                format!("{what}/{lo}/{engine}"),
                "—",
            ));
        }
    }
    rows
}

/// A row naming a case that is not single-thread (or does not exist), a single-thread case in
/// no row (run under callgrind, never reported).
fn table_gaps(rows: &[TableRow], names: &[String]) -> Vec<String> {
    let mut gaps = Vec::new();
    for (label, _, hg, anchor, _) in rows {
        for case in [hg, anchor] {
            if !names.contains(case) {
                gaps.push(format!(
                    "row {:?} names {case:?}, which is not a single-thread case",
                    label.trim()
                ));
            }
        }
    }
    for n in names {
        if !rows
            .iter()
            .any(|(_, _, hg, anchor, _)| hg == n || anchor == n)
        {
            gaps.push(format!("case {n:?} is in no row (counted, never reported)"));
        }
    }
    gaps
}

fn table(n1: u64, n2: u64, smoke: bool) {
    let names: Vec<String> = cases()
        .into_iter()
        .filter(|c| c.kind == Kind::SingleThread)
        .map(|c| c.name)
        .collect();
    let rows = rows();
    let gaps = table_gaps(&rows, &names);
    if !gaps.is_empty() {
        eprintln!("icount: the row table has gaps:\n  {}", gaps.join("\n  "));
        std::process::exit(1);
    }
    let valgrind = std::env::var("VALGRIND").unwrap_or_else(|_| "valgrind".into());
    let locked = locked_instructions(&std::env::current_exe().expect("own path"));
    if locked.is_none() {
        eprintln!("icount: no objdump: the locked-RMW columns stay empty");
    }
    let jobs: Vec<(&str, u64)> = names
        .iter()
        .flat_map(|n| [(n.as_str(), n1), (n.as_str(), n2)])
        .collect();
    // Instruction counts do not depend on timing: run the callgrind jobs two at a time.
    let next = AtomicUsize::new(0);
    let results = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(case, n)) = jobs.get(i) else { break };
                    let counts = callgrind(&valgrind, case, n, locked.as_ref());
                    results.lock().expect("results").insert((case, n), counts);
                }
            });
        }
    });
    let results: HashMap<(&str, u64), Counts> = results.into_inner().expect("results");
    let per_op = |a: u64, b: u64| (b as f64 - a as f64) / (n2 - n1) as f64;
    let ir_per_op = |case: &str| per_op(results[&(case, n1)].ir, results[&(case, n2)].ir);
    let rmw_per_op = |case: &str| match (results[&(case, n1)].rmw, results[&(case, n2)].rmw) {
        (Some(a), Some(b)) => format!("{:.1}", per_op(a, b)),
        _ => "n/a".into(),
    };

    if smoke {
        println!("SMOKE RUN (--smoke): callgrind at tiny sizes; the counts below mean nothing");
    }
    println!(
        "callgrind, per op = (count at {n2} ops − count at {n1} ops) / {}; Ir = instructions, \
         RMW = locked read-modify-writes; ratio = hullguard Ir / anchor Ir",
        n2 - n1
    );
    println!();
    let header = format!(
        "{:<46} {:<10} {:>10} {:>10} {:>6}  {:>7} {:>7}  {}",
        "row", "anchor", "hg Ir", "anchor Ir", "ratio", "hg RMW", "an. RMW", "timed target"
    );
    println!("{header}");
    println!("{}", "-".repeat(header.chars().count()));
    for (label, anchor_label, hg, anchor, target) in rows {
        let (h, a) = (ir_per_op(&hg), ir_per_op(&anchor));
        println!(
            "{label:<46} {anchor_label:<10} {h:>10.1} {a:>10.1} {:>6.2}  {:>7} {:>7}  {target}",
            h / a,
            rmw_per_op(&hg),
            rmw_per_op(&anchor),
        );
    }
}
