//! What a bench table prints about the machine it ran on, and the statistics of its
//! repetitions — shared by the drivers (`ratios`, `host`), so every table judges a busy
//! machine the same way.

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The smallest and the largest of `xs`.
pub fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// The CPU's model name, from `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// `(busy, steal, total)` jiffies of the whole machine, from `/proc/stat`.
fn machine_jiffies() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = cpu
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let (idle, steal) = (f.get(3)? + f.get(4)?, *f.get(7)?);
    let total: u64 = f.iter().take(8).sum();
    Some((total - idle - steal, steal, total))
}

/// CPU jiffies (user + system) of this process, all threads.
fn own_jiffies() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// What the rest of the machine did during the run: other processes' CPU and the
/// hypervisor's steal, as shares of the machine's capacity.
pub struct Background {
    start: Option<((u64, u64, u64), u64)>,
}

impl Background {
    /// Starts counting now.
    pub fn start() -> Self {
        Self {
            start: machine_jiffies().zip(own_jiffies()),
        }
    }

    /// `(others, steal)` as fractions of all CPUs' time since `start`.
    pub fn shares(&self) -> Option<(f64, f64)> {
        let ((b0, s0, t0), o0) = self.start?;
        let ((b1, s1, t1), o1) = machine_jiffies().zip(own_jiffies())?;
        let total = (t1 - t0).max(1) as f64;
        let others = (b1 - b0).saturating_sub(o1 - o0) as f64;
        Some((others / total, (s1 - s0) as f64 / total))
    }
}

/// Above this share of the machine taken by others (or stolen by the hypervisor) during a run,
/// its timed rows are unreliable.
pub const BUSY: f64 = 0.05;

/// The table's last but one line: what the rest of the machine did `during` the timed part
/// (`shares`: [`Background::shares`]), flagged when it was busy.
pub fn background_line(during: &str, shares: Option<(f64, f64)>) -> String {
    match shares {
        Some((others, steal)) => format!(
            "background during {during}: other processes {:.0}% of the machine's CPU, \
             hypervisor steal {:.0}%{}",
            others * 100.0,
            steal * 100.0,
            if others + steal > BUSY {
                " — BUSY MACHINE: the timed rows are unreliable, run again when idle"
            } else {
                ""
            }
        ),
        None => format!("background during {during}: unknown (no /proc)"),
    }
}

/// The repetitions of a table: 1 in a smoke run, else `REPS` (default 9; docs/design.md
/// § Benchmarks asks for at least 5, which this asserts).
pub fn repetitions(smoke: bool) -> usize {
    if smoke {
        return 1;
    }
    let reps = std::env::var("REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    assert!(
        reps >= 5,
        "docs/design.md § Benchmarks: at least 5 repetitions (REPS={reps})"
    );
    reps
}
