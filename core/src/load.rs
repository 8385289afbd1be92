//! Load shedding by overload signals (docs/design.md §4.11): the process's event-loop lag and
//! CPU use, reported by the host ([`Bulkhead::report_load`](crate::Bulkhead::report_load)),
//! compared with the bulkhead's thresholds (`shed_lag_threshold`, `shed_cpu_threshold`).
//! While a signal is above its threshold, a request of a **non-critical** class (priority below
//! `critical_priority`) is refused `shed` at once, with bound `overload`; a critical one is
//! never refused by a signal — it passes while capacity is left, and the limits decide as
//! always. This is the "prioritised load shedding" of Google's SRE book (ch. 21, "Handling
//! Overload": criticality classes, shed the least critical first) and of Envoy's overload
//! manager, with the signal kept outside: a host measures its own loop and CPU (Node
//! `monitorEventLoopDelay`, an asyncio lag probe, `process.cpuUsage()`, a tokio probe) and
//! reports; tests report values of their own.
//!
//! The gate is two words of thresholds (read-only after construction), one word per signal and
//! one word of "over" bits that every report recomputes for its signal. An admission of a
//! classed bulkhead reads the over word once (`Relaxed`: a signal is advisory, as fresh as its
//! last report); only when it is non-zero does it look up the class's priority.

use core::time::Duration;

use crate::sync::{
    AtomicWord,
    Ordering::{Relaxed, SeqCst},
    Word,
};

/// The load-shedding options together ([`Config::load_shedding`](crate::Config::load_shedding)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadShedding {
    /// Shed while the event-loop lag is above this; `ZERO`: that signal is off.
    pub lag_threshold: Duration,
    /// Shed while the CPU use (cores) is above this; `0.0`: that signal is off.
    pub cpu_threshold: f64,
    /// Classes of this priority or above are never shed by a signal.
    pub critical_priority: u8,
}

/// One overload signal's reading ([`Bulkhead::report_load`](crate::Bulkhead::report_load)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadSignal {
    /// How late the host's event loop (or scheduler) ran a timer: the lag probe's overshoot.
    EventLoopLag(Duration),
    /// The process's CPU use over the last interval, in cores (CPU time / wall time; 1.0 is one
    /// core busy all the time). Negative and NaN readings count as 0.
    Cpu(f64),
}

/// Which signals are above their thresholds, and the readings (`Stats::load`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadStats {
    /// The last event-loop lag reported, in ns (kept to the µs, rounded down).
    pub event_loop_lag_ns: u64,
    /// The last CPU use reported, in thousandths of a core.
    pub cpu_permille: u64,
    /// 1 while any signal is above its threshold (non-critical classes are shed), else 0.
    pub overloaded: u64,
    /// Requests refused `shed` by a signal (also counted in `rejected_by_reason.shed`).
    pub shed_total: u64,
}

const LAG: Word = 1;
const CPU: Word = 2;

/// The bulkhead's gate: thresholds and the last readings. Lock-free; every method takes
/// `&self`. The lag is kept in µs, so a `u32` word (targets without 64-bit atomics) holds
/// 71 minutes — in ns it would saturate at 4.29 s, where a larger threshold could never be
/// passed.
#[derive(Debug)]
pub(crate) struct LoadGate {
    /// Lag threshold in µs (0: off; a threshold under 1 µs is 1 µs).
    lag_threshold: Word,
    /// CPU threshold in thousandths of a core (0: off).
    cpu_threshold: Word,
    critical_priority: u8,
    lag: AtomicWord,
    cpu: AtomicWord,
    over: AtomicWord,
    shed_total: AtomicWord,
}

/// Thousandths of a core, rounded to nearest, saturated; NaN and negative readings are 0.
fn permille(cores: f64) -> Word {
    let x = cores * 1000.0 + 0.5;
    if x >= Word::MAX as f64 {
        Word::MAX
    } else if x >= 1.0 {
        x as Word
    } else {
        0
    }
}

/// µs, rounded down, saturated.
fn micros(d: Duration) -> Word {
    Word::try_from(d.as_micros()).unwrap_or(Word::MAX)
}

impl LoadGate {
    /// A gate with no thresholds: never over.
    #[cfg(not(loom))]
    pub(crate) const fn off() -> Self {
        Self::new_raw(0, 0, 1)
    }

    #[cfg(not(loom))]
    const fn new_raw(lag_threshold: Word, cpu_threshold: Word, critical_priority: u8) -> Self {
        LoadGate {
            lag_threshold,
            cpu_threshold,
            critical_priority,
            lag: AtomicWord::new(0),
            cpu: AtomicWord::new(0),
            over: AtomicWord::new(0),
            shed_total: AtomicWord::new(0),
        }
    }

    // loom's atomics are not `const`.
    #[cfg(loom)]
    fn new_raw(lag_threshold: Word, cpu_threshold: Word, critical_priority: u8) -> Self {
        LoadGate {
            lag_threshold,
            cpu_threshold,
            critical_priority,
            lag: AtomicWord::new(0),
            cpu: AtomicWord::new(0),
            over: AtomicWord::new(0),
            shed_total: AtomicWord::new(0),
        }
    }

    /// The gate of `options` (a threshold of a fraction of a thousandth of a core is one).
    pub(crate) fn new(options: &LoadShedding) -> Self {
        let cpu = if options.cpu_threshold > 0.0 {
            permille(options.cpu_threshold).max(1)
        } else {
            0
        };
        let lag = if options.lag_threshold.is_zero() {
            0
        } else {
            micros(options.lag_threshold).max(1)
        };
        Self::new_raw(lag, cpu, options.critical_priority)
    }

    /// Whether a threshold is set.
    pub(crate) fn is_on(&self) -> bool {
        self.lag_threshold != 0 || self.cpu_threshold != 0
    }

    /// Records a reading and whether its signal is now above its threshold (a signal without a
    /// threshold is recorded and never over).
    pub(crate) fn report(&self, signal: LoadSignal) {
        let (value, threshold, bit, slot) = match signal {
            LoadSignal::EventLoopLag(d) => (micros(d), self.lag_threshold, LAG, &self.lag),
            LoadSignal::Cpu(c) => (permille(c), self.cpu_threshold, CPU, &self.cpu),
        };
        slot.store(value, SeqCst);
        // The bit follows the reading now in the slot: set or clear it from what the slot
        // holds, then check that no other reporter stored a new reading meanwhile (it then
        // follows that one). Concurrent reporters of one signal end with the bit of the last
        // reading stored.
        let mut seen = value;
        loop {
            let over = threshold != 0 && seen > threshold;
            if over {
                self.over.fetch_or(bit, SeqCst);
            } else {
                self.over.fetch_and(!bit, SeqCst);
            }
            let now = slot.load(SeqCst);
            if now == seen {
                break;
            }
            seen = now;
        }
    }

    /// Whether a request of a class of `priority` is shed now (one load when no signal is over).
    #[inline]
    pub(crate) fn sheds(&self, priority: impl FnOnce() -> u8) -> bool {
        self.over.load(Relaxed) != 0 && priority() < self.critical_priority
    }

    /// Counts one shed.
    pub(crate) fn count_shed(&self) {
        self.shed_total.fetch_add(1, Relaxed);
    }

    /// The readings; `None` without a threshold.
    pub(crate) fn stats(&self) -> Option<LoadStats> {
        self.is_on().then(|| LoadStats {
            event_loop_lag_ns: (self.lag.load(Relaxed) as u64).saturating_mul(1000),
            cpu_permille: self.cpu.load(Relaxed) as u64,
            overloaded: u64::from(self.over.load(Relaxed) != 0),
            shed_total: self.shed_total.load(Relaxed) as u64,
        })
    }
}
