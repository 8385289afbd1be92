//! Queue-delay shedding (CoDel) and adaptive LIFO: the dispatcher's state for them
//! (docs/design.md §4.10). Only the dispatcher touches it (the run flag held), like the class
//! lists it lives beside, so it is plain data.
//!
//! **CoDel** (Kathleen Nichols and Van Jacobson, "Controlling Queue Delay", ACM Queue 10(5),
//! 2012; RFC 8289 §5's pseudocode): a dequeue is the dispatcher granting a waiter, its
//! *sojourn* the time that waiter queued. While every sojourn stays at or above `target` for a
//! whole `interval`, the queue is a standing queue: the dispatcher sheds the waiter it would
//! have granted (`shed`) instead, then sheds again at `interval / √count` after the previous
//! shed while the delay stays above the target, and stops as soon as a sojourn is below it.
//! RFC 8289's loop ("drop, then dequeue the next") becomes one decision per dequeue here: the
//! dispatcher asks [`CoDel::shed`] for each waiter it is about to grant. Unlike a packet
//! queue, nothing is kept for "at most one MTU queued": a lone waiter in a standing queue is
//! shed like any other (the Fail-at-Scale use of CoDel for RPC queues).
//!
//! **Adaptive LIFO** (Ben Maurer, "Fail at Scale", ACM Queue 13(8), 2015): while the oldest
//! waiter has queued at least `target`, the newest waiter is granted first (it still has time
//! to be served; the old ones are the first to give up); FIFO otherwise.

/// The parameters (ns; `target == 0`: off), changed only under the run flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct QueueDelayParams {
    pub(crate) target_ns: u64,
    pub(crate) interval_ns: u64,
    pub(crate) lifo: bool,
}

impl QueueDelayParams {
    /// The options in ns.
    pub(crate) fn of(q: &crate::config::QueueDelay) -> Self {
        let ns = |d: core::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        QueueDelayParams {
            target_ns: ns(q.target),
            interval_ns: ns(q.interval),
            lifo: q.lifo,
        }
    }
}

/// CoDel's state (RFC 8289 names in brackets).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CoDel {
    pub(crate) params: QueueDelayParams,
    /// When the sojourn first stayed above target plus an interval [`first_above_time`]; 0: not
    /// above target.
    first_above: u64,
    /// In the shedding state [`dropping`].
    dropping: bool,
    /// When the next shed is due [`drop_next`].
    drop_next: u64,
    /// Sheds in this shedding state [`count`], and at the end of the last [`lastcount`].
    count: u64,
    last_count: u64,
}

impl CoDel {
    pub(crate) const fn new(params: QueueDelayParams) -> Self {
        CoDel {
            params,
            first_above: 0,
            dropping: false,
            drop_next: 0,
            count: 0,
            last_count: 0,
        }
    }

    /// Whether shedding by queue delay is on.
    #[inline]
    pub(crate) const fn on(&self) -> bool {
        self.params.target_ns != 0
    }

    /// Whether the dispatcher grants newest first now: adaptive LIFO is on and the oldest
    /// waiter has queued `oldest_sojourn_ns`, at least the target.
    #[inline]
    pub(crate) const fn lifo(&self, oldest_sojourn_ns: u64) -> bool {
        self.params.lifo && oldest_sojourn_ns >= self.params.target_ns
    }

    /// The queue is empty: not above target any more [`first_above_time = 0`].
    pub(crate) fn queue_empty(&mut self) {
        self.first_above = 0;
    }

    /// RFC 8289's `dodequeue`'s verdict for a waiter that queued `sojourn` ns, at `now`:
    /// whether it is OK to shed [`ok_to_drop`].
    fn ok_to_shed(&mut self, now: u64, sojourn: u64) -> bool {
        if sojourn < self.params.target_ns {
            self.first_above = 0;
            return false;
        }
        if self.first_above == 0 {
            // `max(1)`: 0 means "not above target" (a virtual clock may start at 0).
            self.first_above = now.saturating_add(self.params.interval_ns).max(1);
            return false;
        }
        now >= self.first_above
    }

    /// One dequeue: the dispatcher is about to grant a waiter that queued `sojourn` ns, at
    /// `now` (ns on the bulkhead's clock). `true`: shed it instead (counted by the caller).
    pub(crate) fn shed(&mut self, now: u64, sojourn: u64) -> bool {
        if !self.on() {
            return false;
        }
        let ok = self.ok_to_shed(now, sojourn);
        if self.dropping {
            if !ok {
                // The delay went below target: leave the shedding state.
                self.dropping = false;
                return false;
            }
            if now >= self.drop_next {
                self.count += 1;
                self.drop_next = self.control_law(self.drop_next);
                return true;
            }
            return false;
        }
        if !ok {
            return false;
        }
        // Enter the shedding state; restart near the last rate if it was recent (RFC 8289:
        // "if we were recently dropping, start at the rate it had").
        self.dropping = true;
        let delta = self.count.saturating_sub(self.last_count);
        self.count =
            if delta > 1 && now.saturating_sub(self.drop_next) < 16 * self.params.interval_ns {
                delta
            } else {
                1
            };
        self.drop_next = self.control_law(now);
        self.last_count = self.count;
        true
    }

    /// `t + interval / √count` [`control_law`], in integers: `√count` to three decimals.
    fn control_law(&self, t: u64) -> u64 {
        let root_milli = isqrt(self.count.max(1).saturating_mul(1_000_000)).max(1);
        let step = (self.params.interval_ns as u128 * 1000 / root_milli as u128) as u64;
        t.saturating_add(step)
    }
}

/// ⌊√n⌋ (Newton's method on integers; exact).
pub(crate) const fn isqrt(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    // A first guess ≥ √n: 2^⌈bits/2⌉.
    let bits = 64 - n.leading_zeros();
    let mut x = 1u64 << bits.div_ceil(2);
    loop {
        let y = (x + n / x) / 2;
        if y >= x {
            return x;
        }
        x = y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn codel() -> CoDel {
        CoDel::new(QueueDelayParams {
            target_ns: 5 * MS,
            interval_ns: 100 * MS,
            lifo: false,
        })
    }

    #[test]
    fn isqrt_is_exact() {
        for n in (0..10_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 62, (1 << 32) - 1]) {
            let r = isqrt(n) as u128;
            assert!(r * r <= n as u128 && (r + 1) * (r + 1) > n as u128, "{n}");
        }
    }

    #[test]
    fn below_target_never_sheds() {
        let mut c = codel();
        for t in 0..1000 {
            assert!(!c.shed(t * MS, 4 * MS));
        }
    }

    #[test]
    fn a_standing_queue_is_shed_after_one_interval_then_faster() {
        let mut c = codel();
        // Above target from t = 10 ms: the first shed comes one interval later.
        assert!(!c.shed(10 * MS, 6 * MS));
        assert!(!c.shed(109 * MS, 6 * MS));
        assert!(c.shed(110 * MS, 6 * MS), "first shed at first_above");
        // Then at interval/√count: 100 ms after the first (count 1 → next at +100/√2 ≈ 70.7).
        assert!(!c.shed(209 * MS, 6 * MS));
        assert!(
            c.shed(210 * MS, 6 * MS),
            "second shed 100 ms after the first"
        );
        assert!(!c.shed(280 * MS, 6 * MS));
        assert!(c.shed(281 * MS, 6 * MS), "third ≈ 70.7 ms after the second");
        // A sojourn below target ends the shedding state at once.
        assert!(!c.shed(400 * MS, MS));
        assert!(
            !c.shed(401 * MS, 6 * MS),
            "above target again: a new interval first"
        );
    }

    #[test]
    fn off_never_sheds_and_lifo_needs_the_target() {
        let mut c = CoDel::default();
        assert!(!c.on());
        assert!(!c.shed(u64::MAX, u64::MAX));
        let l = CoDel::new(QueueDelayParams {
            target_ns: 5 * MS,
            interval_ns: 100 * MS,
            lifo: true,
        });
        assert!(!l.lifo(4 * MS) && l.lifo(5 * MS));
        assert!(!codel().lifo(u64::MAX));
    }

    #[test]
    fn the_clock_at_zero_still_counts_an_interval() {
        let mut c = codel();
        assert!(!c.shed(0, 6 * MS));
        assert!(!c.shed(99 * MS, 6 * MS));
        assert!(c.shed(100 * MS, 6 * MS));
    }
}
