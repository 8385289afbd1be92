//! Load shedding by overload signals at admission (docs/design.md §4.11; the gate is
//! [`crate::load`]): [`Bulkhead::report_load`] records a signal; an admission of a
//! non-critical class is refused `shed` (bound `overload`) while a signal is over its
//! threshold.

use crate::{
    front::bulkhead::Bulkhead,
    load::LoadSignal,
    reason::{Bound, ClassRefusal, Reason, Rejection},
};

impl<const N: usize> Bulkhead<N> {
    /// Records an overload signal's reading (docs/design.md §4.11): while a reading is above
    /// its threshold (`shed_lag_threshold`, `shed_cpu_threshold`), requests of non-critical
    /// classes (priority below `critical_priority`) are refused `shed` at once, with bound
    /// `overload`. The host measures (an event-loop lag probe, process CPU time over wall
    /// time) and reports, as often as it likes; the last reading of each signal stands. A
    /// signal without a threshold is recorded (`stats().load`) and never sheds. Lock-free;
    /// concurrent reporters of one signal end with the state of the last reading stored. The
    /// lag is kept to the µs, the CPU to the thousandth of a core.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Decision, Reason, Request, LoadSignal};
    /// use hullguard_core::config::{ClassSpec, ClassTable};
    /// let classes = [
    ///     ClassSpec { priority: 10, ..ClassSpec::DEFAULT }, // 0: critical
    ///     ClassSpec::DEFAULT,                                // 1: best effort (priority 0)
    /// ];
    /// let bh = Bulkhead::with_classes(
    ///     Config { max_concurrent: 4, shed_cpu_threshold: 0.8, critical_priority: 5, ..Config::default() },
    ///     &ClassTable::new(&classes),
    ///     hullguard_core::ClockSource::None,
    /// )?;
    /// bh.report_load(LoadSignal::Cpu(0.95)); // over 0.8 cores
    /// let Decision::Rejected(e) = bh.admit(&Request::new(1).class(1), None) else { panic!() };
    /// assert_eq!(e.reason(), Some(Reason::Shed));
    /// let Decision::Granted(_critical) = bh.admit(&Request::new(1).class(0), None) else { panic!() };
    /// bh.report_load(LoadSignal::Cpu(0.5)); // back under: nobody is shed
    /// assert!(matches!(bh.admit(&Request::new(1).class(1), None), Decision::Granted(_)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn report_load(&self, signal: LoadSignal) {
        self.load.report(signal);
    }

    /// Whether a signal refuses a request of `class` now: `Some(rejection)` (counted `shed`
    /// when `count`) for a non-critical class while a signal is over its threshold. One load
    /// when none is.
    #[inline]
    pub(crate) fn load_sheds(&self, class: u16, count: bool) -> Option<Rejection> {
        if !self.load.sheds(|| self.class_priority(class)) {
            return None;
        }
        Some(self.load_rejection(class, count))
    }

    #[cold]
    #[inline(never)]
    fn load_rejection(&self, class: u16, count: bool) -> Rejection {
        let mut r = if count {
            self.load.count_shed();
            self.engine.reject(Reason::Shed)
        } else {
            self.engine.rejection(Reason::Shed)
        };
        r.class = Some(ClassRefusal {
            class,
            bound: Bound::Overload,
            dimension: 0,
        });
        r
    }

    /// The priority of `class` (0 on a bulkhead without classes).
    fn class_priority(&self, class: u16) -> u8 {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            return book.priority(class);
        }
        let _ = class;
        0
    }
}
