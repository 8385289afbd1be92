//! [`Request`]: what one admission asks for (docs/design.md §5.1).

use core::time::Duration;

use crate::{deadline::Deadline, observe::Observe};

/// One admission request: `weight` permits, `cost` budget units, and how long it may queue.
///
/// Built with [`Request::new`] and the builder methods; `#[non_exhaustive]`, so the fields the
/// gateway and deadline work add (a budget cost, a class, a priority, a mode, a deadline) come
/// without a breaking change.
///
/// # Examples
/// ```
/// use core::time::Duration;
/// use hullguard_core::Request;
/// let r = Request::new(2).queue_timeout(Duration::from_millis(50));
/// assert_eq!((r.weight, r.queue_timeout), (2, Some(Duration::from_millis(50))));
/// assert_eq!(Request::default().weight, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Request {
    /// Permits wanted, `1 ..= max_concurrent`.
    pub weight: u64,
    /// Budget units wanted (tokens, bytes), `0 ..= budget` (docs/design.md §4.5); 0 (the
    /// default) on a bulkhead without a budget. Admitted only together with the permits: both
    /// or neither.
    pub cost: u64,
    /// How long it may wait in the queue: `None` = the bulkhead's `queue_timeout`;
    /// `Duration::ZERO` = do not queue (`concurrency_limit` if not admitted at once);
    /// `Duration::MAX` = no deadline. It bounds only the time spent queued, never the work.
    pub queue_timeout: Option<Duration>,
    /// This request's own observe (shadow) mode (docs/design.md §4.7): the dimensions named
    /// are decided and counted but let through, on top of the bulkhead's own mode (as
    /// async-bulkhead-llm's per-request `shadowReasons`). [`Observe::Off`] (the default) adds
    /// nothing; it never switches an enforced dimension of the bulkhead off. On a bulkhead
    /// without a budget, [`Observe::Budget`] has nothing to shadow (the cost is 0).
    pub observe: Observe,
    /// The admission class (docs/design.md §4.8): an index into the bulkhead's class table,
    /// `0 .. class_count()`; 0 (the default) on a bulkhead without classes.
    pub class: u16,
    /// The request's absolute deadline (docs/design.md §5.9), [`Deadline::NONE`] by default:
    /// refused `timeout` at once (no ticket) once it has passed; queued, it waits at most until
    /// the deadline less the bulkhead's `min_service_time` — the shorter of that and
    /// [`queue_timeout`](Self::queue_timeout) is what [`Waiter::queue_timeout`](crate::Waiter::queue_timeout)
    /// tells the host to arm; a request that may not wait at all is refused `timeout` if not
    /// admitted at once.
    pub deadline: Deadline,
}

impl Request {
    /// `weight` permits, the bulkhead's default queue timeout.
    pub const fn new(weight: u64) -> Self {
        Request {
            weight,
            cost: 0,
            queue_timeout: None,
            observe: Observe::Off,
            class: 0,
            deadline: Deadline::NONE,
        }
    }

    /// The same request with an absolute deadline (see the field).
    #[must_use]
    pub const fn deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = deadline;
        self
    }

    /// The same request in admission class `class` (see the field).
    #[must_use]
    pub const fn class(mut self, class: u16) -> Self {
        self.class = class;
        self
    }

    /// The same request asking for `cost` budget units as well (see the field).
    #[must_use]
    pub const fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    /// The same request with its own queue timeout (see the field).
    #[must_use]
    pub const fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = Some(timeout);
        self
    }

    /// The same request in its own observe mode (see the field).
    #[must_use]
    pub const fn observe(mut self, observe: Observe) -> Self {
        self.observe = observe;
        self
    }

    /// The same request, not queueing: admitted at once or refused.
    #[must_use]
    pub const fn no_wait(self) -> Self {
        self.queue_timeout(Duration::ZERO)
    }
}

impl Default for Request {
    /// One permit, the default queue timeout.
    fn default() -> Self {
        Request::new(1)
    }
}
