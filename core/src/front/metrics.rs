//! A bulkhead's metric samples (docs/design.md §8.3): its stats and its classes walked into the
//! table of [`crate::metrics`].

use crate::{
    front::bulkhead::Bulkhead,
    metrics::{MetricSink, visit},
    stats::ClassStats,
};

/// The most classes a bulkhead has (the class table's bound).
const MAX_CLASSES: usize = crate::config::classes::MAX_CLASSES;

impl<const N: usize> Bulkhead<N> {
    /// Writes this bulkhead's samples of the metric table into `sink` (one stats read, then
    /// each class's): what the Prometheus and OpenTelemetry exporters publish, with the `key`
    /// label left to the exporter. Thread-safe; no allocation.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Metric, MetricLabels, MetricSink};
    /// use hullguard_core::metrics::HistogramSample;
    /// struct Print(Vec<String>);
    /// impl MetricSink for Print {
    ///     fn sample(&mut self, m: &'static Metric, l: MetricLabels, v: f64) {
    ///         let reason = l.reason.map_or("", |r| r.as_str());
    ///         self.0.push(format!("{}{{dimension={:?},reason={reason}}} {v}", m.name, l.dimension));
    ///     }
    ///     fn histogram(&mut self, m: &'static Metric, _: MetricLabels, h: &HistogramSample) {
    ///         self.0.push(format!("{}_count {}", m.name, h.count));
    ///     }
    /// }
    /// let bh = Bulkhead::new(Config { max_concurrent: 4, ..Config::default() })?;
    /// let _held = bh.try_acquire(3)?;
    /// let mut out = Print(Vec::new());
    /// bh.metrics(&mut out);
    /// assert!(out.0.contains(&"hullguard_in_flight{dimension=Some(\"calls\"),reason=} 3".to_string()));
    /// assert!(out.0.contains(&"hullguard_queue_wait_seconds_count 0".to_string()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metrics(&self, sink: &mut (impl MetricSink + ?Sized)) {
        let stats = self.stats();
        let mut classes = [ClassStats::default(); MAX_CLASSES];
        let mut n = 0;
        for i in 0..self.class_count().min(MAX_CLASSES) {
            if let Some(c) = self.class_stats(i as u16) {
                classes[n] = c;
                n += 1;
            }
        }
        visit(&stats, &classes[..n], sink);
    }
}
