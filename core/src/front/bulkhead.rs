//! The bulkhead: the [`Engine`] plus its policies and default queue timeout (docs/design.md §5).
//!
//! This file holds the type, its construction and views, the handle-free operations (the
//! polling API and the raw units pair) and the guarded-call steps that every handle type uses:
//! [`begin`](Bulkhead::begin) (argument check, then the breaker) before admission, and
//! [`finish`](Bulkhead::finish) with the outcome before the permits return. The handles
//! themselves — [`Call`](crate::Call), [`Waiter`](crate::Waiter), the futures, the blocking
//! waits — live in their own files and only use what is here.

use core::{task::Waker, time::Duration};

use crate::{
    clock::ClockSource,
    config::{Config, ConfigError},
    engine::{
        Admitted, CallWord, CancelError, CellRecord, Engine, OverRelease, Polled, StaleTicket,
        Ticket, ring::WaiterRing,
    },
    front::{
        emitter::{Emitter, EmitterBox},
        reservations::{ReservationTable, TableBox},
    },
    outcome::Outcome,
    policy::{
        breaker::CircuitState,
        state::{CallStart, Policies, PolicyBox},
    },
    reason::{AcquireError, Reason, Rejection, Snapshot},
    stats::Stats,
    sync::{AtomicWord, Ordering::Relaxed, Word},
};

/// What [`Bulkhead::enqueue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a granted admission holds permits that must be released"]
pub enum Admission {
    /// Admitted at once: the caller holds the permits and must release them.
    Granted,
    /// Queued: poll or cancel the ticket.
    Queued(Ticket),
}

/// The state of a ticket, from [`Bulkhead::poll_ticket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a granted ticket holds permits that must be released"]
pub enum TicketPoll {
    /// Still queued; the waker (if given) will be woken when it settles.
    Pending,
    /// Granted `weight` permits, now held by the caller (the ticket is consumed).
    Granted(u64),
    /// Rejected (the ticket is consumed).
    Rejected(Rejection),
}

/// A bulkhead: a bounded pool of permits with a fixed-capacity FIFO waiter queue.
///
/// `N > 0` stores the ring inline (a `static` bulkhead, no allocator: [`Bulkhead::new_static`]);
/// `N == 0` (the default) allocates it once at construction ([`Bulkhead::new`], feature `alloc`).
///
/// Admission goes through one object: [`admit`](Self::admit) takes a
/// [`Request`](crate::Request) and answers [`Decision`](crate::Decision) — a
/// [`Call`](crate::Call) (granted), a [`Waiter`](crate::Waiter) (queued) or a rejection.
///
/// # Examples
/// ```
/// use hullguard_core::{Bulkhead, Config, Decision, Reason, Request};
/// let bh = Bulkhead::new(Config { max_concurrent: 2, max_queue: 0, ..Config::default() })?;
/// let Decision::Granted(a) = bh.admit(&Request::new(2), None) else { panic!() };
/// let Decision::Rejected(e) = bh.admit(&Request::new(1), None) else { panic!() };
/// assert_eq!(e.reason(), Some(Reason::ConcurrencyLimit));
/// drop(a);
/// assert_eq!(bh.stats().available, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Progress
/// Admission, release, cancel, `set_limit` and `close` never wait for another thread
/// (lock-free where the target has CAS); they are not wait-free, since one call may perform
/// grants for others. Grants may be delayed by a preempted thread that is performing them.
#[derive(Debug)]
pub struct Bulkhead<const N: usize = 0> {
    pub(crate) engine: Engine<N>,
    /// The default queue timeout, encoded by [`encode_timeout`] (`apply_limits` changes it).
    queue_timeout: AtomicWord,
    policies: Option<PolicyBox>,
    /// Where events go (built with an observer; with one that takes admission events,
    /// `policies` is `Some` too, so the plain path tests one field).
    emitter: Option<EmitterBox>,
    /// The reservation table (`max_reservations > 0`; then `policies` is `Some` too).
    reservations: Option<TableBox>,
    /// `cancel_on_overrun`.
    cancel_on_overrun: bool,
    /// `min_service_time` (docs/design.md §5.9).
    min_service_time: core::time::Duration,
    /// Load shedding by overload signals (docs/design.md §4.11).
    pub(crate) load: crate::load::LoadGate,
}

/// A bulkhead is shared by reference between threads (checked, not asserted).
const _: () = {
    const fn sync_and_send<T: Sync + Send>() {}
    sync_and_send::<Bulkhead<0>>();
    sync_and_send::<Bulkhead<8>>();
};

#[cfg(feature = "alloc")]
impl Bulkhead<0> {
    /// A bulkhead whose ring ([`Config::ring_capacity`] cells) is allocated once, fallibly,
    /// here. Uses the host's monotonic clock under `std`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the bad option; [`ConfigError::MaxQueue`] also when the ring
    /// cannot be allocated.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        Self::with_clock(config, ClockSource::default_for_host())
    }

    /// [`new`](Self::new) with an explicit time source (a test's virtual clock, say).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_clock(config: Config, clock: ClockSource) -> Result<Self, ConfigError> {
        Self::with_observer(config, clock, None, None)
    }

    /// [`with_clock`](Self::with_clock) plus where events go: `observer` receives them after
    /// each commit with `key` (a registry passes the entry's key; `None` outside one).
    ///
    /// # Errors
    /// As [`new`](Self::new), plus the `resilience` errors of [`Config::validate`].
    pub fn with_observer(
        config: Config,
        clock: ClockSource,
        observer: Option<crate::event::SharedObserver>,
        key: Option<&str>,
    ) -> Result<Self, ConfigError> {
        Self::build(config, clock, observer, key, None)
    }

    /// A classed bulkhead (docs/design.md §4.8): `classes` partitions each dimension into the
    /// classes' floors, the priority reserve and the shared rest; every admission names its
    /// class ([`Request::class`](crate::Request::class), 0 by default) and is decided by the
    /// dispatcher in the documented order (floors first, then strict priority, FIFO within a
    /// class). The class table is copied; the ring always exists (a no-wait decision passes
    /// through it), `next_power_of_two(max_queue + max(max_queue, 64))` cells.
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`ConfigError::Class`] for a bad table or an option classes
    /// do not take yet.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, ClockSource, Config, Decision, Reason, Request};
    /// use hullguard_core::config::{ClassSpec, ClassTable};
    /// let classes = [
    ///     ClassSpec { priority: 10, floor: 2, ..ClassSpec::DEFAULT }, // 0: interactive
    ///     ClassSpec { priority: 0, ceiling: Some(3), ..ClassSpec::DEFAULT }, // 1: batch
    /// ];
    /// let table = ClassTable::new(&classes); // no reserve, no lending, no shedding
    /// let bh = Bulkhead::with_classes(
    ///     Config { max_concurrent: 4, ..Config::default() },
    ///     &table,
    ///     ClockSource::None,
    /// )?;
    /// let batch = Request::new(1).class(1).no_wait();
    /// let held: Vec<_> = (0..2).map(|_| bh.admit(&batch, None)).collect();
    /// // Batch has the shared 2; the interactive floor of 2 stays untouched.
    /// let refused = bh.admit(&batch, None);
    /// assert!(matches!(refused, Decision::Rejected(e) if e.reason() == Some(Reason::ConcurrencyLimit)));
    /// let Decision::Granted(_a) = bh.admit(&Request::new(2).no_wait(), None) else { panic!() };
    /// # drop(held);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_classes(
        config: Config,
        classes: &crate::config::classes::ClassTable<'_>,
        clock: ClockSource,
    ) -> Result<Self, ConfigError> {
        Self::build(config, clock, None, None, Some(classes))
    }

    /// [`with_classes`](Self::with_classes) with an observer (events, as
    /// [`with_observer`](Self::with_observer)).
    ///
    /// # Errors
    /// As [`with_classes`](Self::with_classes).
    pub fn with_classes_and_observer(
        config: Config,
        classes: &crate::config::classes::ClassTable<'_>,
        clock: ClockSource,
        observer: Option<crate::event::SharedObserver>,
    ) -> Result<Self, ConfigError> {
        Self::build(config, clock, observer, None, Some(classes))
    }

    fn build(
        config: Config,
        clock: ClockSource,
        observer: Option<crate::event::SharedObserver>,
        key: Option<&str>,
        classes: Option<&crate::config::classes::ClassTable<'_>>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        // Queue-delay shedding dispatches through the class lists: a one-class table if none
        // was given (docs/design.md §4.10). It reads the clock.
        static ONE_CLASS: [crate::config::classes::ClassSpec; 1] =
            [crate::config::classes::ClassSpec::DEFAULT];
        let one_class = crate::config::classes::ClassTable::new(&ONE_CLASS);
        let classes = match classes {
            None if config.needs_dispatch_lists() || config.sheds_on_load() => Some(&one_class),
            other => other,
        };
        // A clock, and 64-bit words: a cell's enqueue time is a `Word` of ns (on a 32-bit target
        // it wraps every 4.29 s, which would switch shedding off when the queue is oldest).
        if config.needs_dispatch_lists()
            && (!clock.is_some() || core::mem::size_of::<crate::sync::Word>() < 8)
        {
            return Err(ConfigError::Unsupported(
                crate::config::OptionId::QueueDelayTarget,
            ));
        }
        if let Some(t) = classes {
            t.validate(&config).map_err(ConfigError::Class)?;
            if (t.rates.requests.is_some() || t.rates.units.is_some()) && !clock.is_some() {
                return Err(ConfigError::Class(
                    crate::config::classes::ClassError::Unsupported {
                        option: "rates without a clock",
                    },
                ));
            }
        }
        // Events, reservations and load shedding run in the guarded path, so they bring the
        // policy box.
        let policies = Policies::build(
            &config.resilience,
            observer.as_ref().is_some_and(|o| o.admission_events())
                || config.max_reservations > 0
                || config.sheds_on_load(),
        )?;
        let ring = if config.max_queue == 0 && classes.is_none() {
            WaiterRing::new_inline(0)
        } else {
            WaiterRing::new_heap(config.max_queue as Word, config.ring_capacity())?
                .with_max_queued_cost(config.max_queued_cost)
        };
        let initial_limit = policies.as_deref().and_then(Policies::initial_limit);
        let cells = ring.capacity();
        let mut engine = Engine::new(&config, ring, clock);
        if let Some(t) = classes {
            let book = crate::engine::classes::ClassBook::new(
                t,
                config.max_concurrent,
                config.budget.unwrap_or(0),
                cells,
                crate::engine::queue_delay::QueueDelayParams::of(&config.queue_delay()),
            );
            engine = engine.with_classes(alloc::boxed::Box::new(book));
        }
        let bh = Bulkhead {
            engine,
            queue_timeout: AtomicWord::new(encode_timeout(config.queue_timeout)),
            policies,
            emitter: observer.map(|o| alloc::boxed::Box::new(Emitter::new(o, key))),
            reservations: (config.max_reservations > 0).then(|| {
                alloc::boxed::Box::new(ReservationTable::new(config.max_reservations as usize))
            }),
            cancel_on_overrun: config.cancel_on_overrun,
            min_service_time: config.min_service_time,
            load: crate::load::LoadGate::new(&config.load_shedding()),
        };
        if let Some(limit) = initial_limit {
            // The adaptive limit starts at `initial_limit` (≤ max_limit ≤ max_concurrent).
            bh.engine.apply_limit(limit)?;
        }
        Ok(bh)
    }
}

impl<const N: usize> Bulkhead<N> {
    /// A bulkhead with an inline ring of `N` cells for a `static` item (`max_queue ≤ N`, `N` a
    /// power of two, or 0 for fail-fast). A bad configuration is a *compile-time* error in a
    /// `static`; use [`try_new_static`](Self::try_new_static) to get the error as a value.
    ///
    /// # Panics
    /// When the configuration is invalid (at compile time in a `const` or `static`).
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// static DB: Bulkhead<8> =
    ///     Bulkhead::new_static(Config { max_concurrent: 4, max_queue: 8, ..Config::DEFAULT });
    /// let p = DB.try_acquire(1).unwrap();
    /// assert_eq!(DB.stats().active, 1);
    /// drop(p);
    /// ```
    #[cfg(not(loom))]
    pub const fn new_static(config: Config) -> Self {
        if config.validate_base().is_err()
            || !config.resilience.is_off()
            || config.max_reservations != 0
            || config.needs_dispatch_lists()
            || config.sheds_on_load()
            || config.max_queue > N as u64
        {
            panic!("invalid hullguard Config for Bulkhead::new_static");
        }
        Self::inline(config)
    }

    #[cfg(not(loom))]
    const fn inline(config: Config) -> Self {
        Bulkhead {
            engine: Engine::new(
                &config,
                WaiterRing::new_inline(config.max_queue as Word)
                    .with_max_queued_cost(config.max_queued_cost),
                ClockSource::None,
            ),
            queue_timeout: AtomicWord::new(encode_timeout(config.queue_timeout)),
            policies: None,
            emitter: None,
            reservations: None,
            cancel_on_overrun: config.cancel_on_overrun,
            min_service_time: config.min_service_time,
            load: crate::load::LoadGate::off(),
        }
    }

    /// [`new_static`](Self::new_static) returning the configuration error.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the bad option ([`ConfigError::MaxQueue`] if `max_queue > N`,
    /// [`ConfigError::Resilience`] for any policy).
    #[cfg(not(loom))]
    pub const fn try_new_static(config: Config) -> Result<Self, ConfigError> {
        if let Err(e) = config.validate_base() {
            return Err(e);
        }
        if !config.resilience.is_off() {
            return Err(ConfigError::Resilience);
        }
        if config.max_reservations != 0 {
            // The table is allocated at construction: not in a `static`.
            return Err(ConfigError::Option(
                crate::config::OptionId::MaxReservations,
            ));
        }
        if config.needs_dispatch_lists() {
            // The class lists are allocated, and a static bulkhead reads no clock.
            return Err(ConfigError::Unsupported(
                crate::config::OptionId::QueueDelayTarget,
            ));
        }
        if config.sheds_on_load() {
            // Load shedding names classes (a one-class table is allocated).
            return Err(ConfigError::Unsupported(
                crate::config::OptionId::ShedLagThreshold,
            ));
        }
        if config.max_queue > N as u64 {
            return Err(ConfigError::MaxQueue);
        }
        Ok(Self::inline(config))
    }

    /// A bulkhead with an inline ring of `N` cells (loom build: not `const`).
    #[cfg(loom)]
    pub fn try_new_static(config: Config) -> Result<Self, ConfigError> {
        config.validate_base()?;
        if config.max_queue > N as u64 {
            return Err(ConfigError::MaxQueue);
        }
        Ok(Bulkhead {
            engine: Engine::new(
                &config,
                WaiterRing::new_inline(config.max_queue as Word)
                    .with_max_queued_cost(config.max_queued_cost),
                ClockSource::None,
            ),
            queue_timeout: AtomicWord::new(encode_timeout(config.queue_timeout)),
            policies: None,
            emitter: None,
            reservations: None,
            cancel_on_overrun: config.cancel_on_overrun,
            min_service_time: config.min_service_time,
            load: crate::load::LoadGate::new(&config.load_shedding()),
        })
    }

    /// The policy state, if `resilience` configured any.
    #[inline]
    pub(crate) fn policies(&self) -> Option<&Policies> {
        self.policies.as_deref()
    }

    /// The reservation table, when `max_reservations > 0`.
    #[inline]
    pub(crate) fn reservations(&self) -> Option<&ReservationTable> {
        #[cfg(feature = "alloc")]
        return self.reservations.as_deref();
        #[cfg(not(feature = "alloc"))]
        return self.reservations.as_ref();
    }

    /// Expired reservations return their units before an admission decides (a cheap test
    /// when none is held; docs/design.md §5.8).
    #[inline]
    pub(crate) fn sweep_if_held(&self) {
        if self.reservations().is_some_and(|t| t.held() != 0) {
            self.expire_reservations();
        }
    }

    /// The event emitter, when the bulkhead has an observer.
    #[inline]
    pub(crate) fn emitter(&self) -> Option<&Emitter> {
        #[cfg(feature = "alloc")]
        return self.emitter.as_deref();
        #[cfg(not(feature = "alloc"))]
        return self.emitter.as_ref();
    }

    // ----- configuration views -------------------------------------------------------------

    /// The ceiling of the limit.
    pub fn max_concurrent(&self) -> u64 {
        self.engine.max_concurrent()
    }

    /// The current limit.
    pub fn limit(&self) -> u64 {
        self.engine.limit()
    }

    /// The maximum number of live waiters.
    pub fn max_queue(&self) -> u64 {
        self.engine.max_queue()
    }

    /// The default queue deadline (`Duration::MAX` = none).
    pub fn queue_timeout(&self) -> Duration {
        // Relaxed: a setting read for one decision.
        decode_timeout(self.queue_timeout.load(Relaxed))
    }

    /// The time left until `deadline` on this bulkhead's clock (docs/design.md §5.9): `None`
    /// for no deadline, `Some(ZERO)` once it has passed.
    #[inline]
    pub fn time_left(&self, deadline: &crate::deadline::Deadline) -> Option<Duration> {
        if *deadline == crate::deadline::Deadline::NONE {
            return None;
        }
        deadline.time_left(self.engine.clock())
    }

    /// `min_service_time` (docs/design.md §5.9).
    pub fn min_service_time(&self) -> Duration {
        self.min_service_time
    }

    /// How long `request`, queued now, may wait (docs/design.md §5.9): its queue timeout (or
    /// the bulkhead's) capped by the time left until its deadline less `min_service_time`;
    /// `Duration::MAX`: no bound. What [`Waiter::queue_timeout`](crate::Waiter::queue_timeout)
    /// reports for it — for a host that arms the timer of a ticket it holds.
    pub fn queue_wait(&self, request: &crate::Request) -> Duration {
        self.queue_wait_within(request, self.time_left(&request.deadline))
    }

    /// [`queue_wait`](Self::queue_wait) with the time `left` until the deadline read already.
    #[inline]
    pub(crate) fn queue_wait_within(
        &self,
        request: &crate::Request,
        left: Option<Duration>,
    ) -> Duration {
        let t = request
            .queue_timeout
            .unwrap_or_else(|| self.queue_timeout());
        crate::deadline::queue_wait(t, left, self.min_service_time)
    }

    /// The call timeout to arm for a call of a request with `deadline`: the configured
    /// [`call_timeout`](Self::call_timeout) capped by the time left until the deadline
    /// (docs/design.md §5.9); `None` when neither bounds the work. The core arms no timer.
    pub fn call_timeout_within(&self, deadline: &crate::deadline::Deadline) -> Option<Duration> {
        crate::deadline::cap_call_timeout(self.call_timeout(), self.time_left(deadline))
    }

    /// Whether the default queue deadline is zero ("do not queue"), without building it.
    #[inline]
    pub(crate) fn queue_timeout_is_zero(&self) -> bool {
        self.queue_timeout.load(Relaxed) == 0
    }

    /// Sets the default queue deadline (`apply_limits`; queued waiters keep the deadline
    /// their host armed).
    pub(crate) fn set_queue_timeout(&self, timeout: Duration) {
        self.queue_timeout.store(encode_timeout(timeout), Relaxed);
    }

    /// `max_orphaned`: how many permits orphaned calls may hold together (0: orphaning is off;
    /// docs/design.md §5.3). A binding that hands out a plain call as its weight alone keeps
    /// the whole [`Call`](crate::Call) when this is not 0 (an orphaned call's state is in it).
    pub fn max_orphaned(&self) -> u64 {
        self.engine.max_orphaned()
    }

    /// Whether admission is enforced.
    pub fn enabled(&self) -> bool {
        self.engine.enabled()
    }

    /// Whether [`close`](Self::close) ran.
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    /// The host clock this bulkhead reads (ns).
    pub fn now_ns(&self) -> u64 {
        self.engine.now_ns()
    }

    /// Whether this bulkhead's calls take the guarded path: a policy (breaker, adaptive limit
    /// or call timeout), an observer (events) or a reservation table. Its calls' tokens are
    /// then not inert (a binding keeps the whole [`Call`](crate::Call), not just its weight).
    #[inline]
    pub fn has_policies(&self) -> bool {
        self.policies.is_some()
    }

    /// The configured `call_timeout`, if any. The core arms no timer: the host arms one per
    /// call and reports an overrun with [`Call::timed_out`](crate::Call::timed_out).
    pub fn call_timeout(&self) -> Option<Duration> {
        self.policies().and_then(Policies::call_timeout)
    }

    // ----- the guarded-call steps (docs/design.md §6.3) -------------------------------------

    /// Step 1 of every guarded admission: the weight (`1 ..= max_concurrent`) and the cost
    /// (`0 ..= max_budget`), never counted, then the breaker's check (`circuit_open`,
    /// counted). Reads the clock only when a policy needs it.
    #[inline]
    pub(crate) fn begin(
        &self,
        weight: u64,
        cost: u64,
        class: u16,
    ) -> Result<(Word, Word, CallStart), AcquireError> {
        let (w, c) = self.check_request(weight, cost)?;
        let call = match self.policies() {
            None => CallStart::NONE,
            Some(p) => self.start_guarded(p, class)?,
        };
        Ok((w, c, call))
    }

    /// The argument checks of [`begin`](Self::begin) (and of the dry run): the weight, then
    /// the cost; never counted.
    #[inline]
    pub(crate) fn check_request(
        &self,
        weight: u64,
        cost: u64,
    ) -> Result<(Word, Word), AcquireError> {
        let w = self.engine.check_weight(weight)?;
        let c = if cost == 0 {
            0
        } else {
            self.engine.check_cost(cost)?
        };
        Ok((w, c))
    }

    /// The class rule: `0 .. classes` on a classed bulkhead, only 0 otherwise; and a request's
    /// own `observe` only on a bulkhead without classes (classes take no observe mode yet,
    /// docs/design.md §4.8). Never counted.
    #[inline]
    pub(crate) fn check_class(
        &self,
        class: u16,
        observe: crate::observe::Observe,
    ) -> Result<(), AcquireError> {
        if matches!(observe, crate::observe::Observe::Off)
            && (class == 0 || (class as usize) < self.class_count())
        {
            return Ok(());
        }
        self.check_class_slow(class, observe)
    }

    #[cold]
    #[inline(never)]
    fn check_class_slow(
        &self,
        class: u16,
        observe: crate::observe::Observe,
    ) -> Result<(), AcquireError> {
        let classes = self.class_count();
        if class != 0 && (class as usize) >= classes {
            return Err(AcquireError::InvalidClass { class, classes });
        }
        if classes != 0 && !matches!(observe, crate::observe::Observe::Off) {
            return Err(AcquireError::InvalidObserve { observe });
        }
        Ok(())
    }

    /// Class `class`'s floors, ceilings, holds and waiters now (`None` for a class this
    /// bulkhead does not have; docs/design.md §4.8).
    pub fn class_stats(&self, class: u16) -> Option<crate::stats::ClassStats> {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            return book.stats(class);
        }
        let _ = class;
        None
    }

    /// How long until the earliest waiter held back by a rate conforms (docs/design.md §4.9),
    /// if one is: the host arms a timer for it and then calls
    /// [`rate_tick`](Self::rate_tick) (the core arms none). `Some(Duration::ZERO)` when it is
    /// due. `None` without rates or while no waiter is held by one.
    pub fn rate_retry_after(&self) -> Option<Duration> {
        #[cfg(feature = "alloc")]
        if let Some(at) = self.engine.classes().and_then(|b| b.retry_at()) {
            return Some(Duration::from_nanos(
                at.saturating_sub(self.engine.now_ns()),
            ));
        }
        None
    }

    /// The host's rate timer fired: runs a dispatcher pass, which grants the waiters that
    /// conform now (a no-op without classes).
    pub fn rate_tick(&self) {
        #[cfg(feature = "alloc")]
        if self.engine.classes().is_some() {
            self.engine.dispatch_now();
        }
    }

    /// Shared units held now by classes beyond their floors, `[permits, budget units]` (`None`
    /// without classes). With the floors, `Σ in_flight == Σ min(in_flight, floor) + shared`.
    pub fn class_shared_in_use(&self) -> Option<[u64; 2]> {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            return Some([book.shared_used(0) as u64, book.shared_used(1) as u64]);
        }
        None
    }

    /// A new limit (`Some`, 0 the kill switch) and budget keep a classed bulkhead's
    /// partition: at least its floors plus the reserve (docs/design.md §4.8).
    pub(crate) fn check_partition(
        &self,
        limit: Option<u64>,
        budget: Option<u64>,
    ) -> Result<(), ConfigError> {
        self.check_partition_with(limit, budget, None)
            .map_err(ConfigError::Class)
    }

    /// [`check_partition`](Self::check_partition) with the reserve `reserve` (permits, budget)
    /// in place of the one in force (an `apply_limits` that changes both).
    pub(crate) fn check_partition_with(
        &self,
        limit: Option<u64>,
        budget: Option<u64>,
        reserve: Option<[u64; 2]>,
    ) -> Result<(), crate::config::classes::ClassError> {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            for (d, (v, name)) in [(limit, "permits"), (budget, "budget")]
                .into_iter()
                .enumerate()
            {
                let need = match reserve {
                    Some(r) => book.floors(d) as u64 + r[d],
                    None => book.partitioned(d) as u64,
                };
                if let Some(v) = v.filter(|&v| v != 0 && v < need) {
                    return Err(crate::config::classes::ClassError::Floors {
                        dimension: name,
                        total: need,
                        limit: v,
                    });
                }
            }
        }
        let _ = (limit, budget, reserve);
        Ok(())
    }

    /// How many admission classes this bulkhead has (0: none, docs/design.md §4.8).
    pub fn class_count(&self) -> usize {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            return book.len();
        }
        0
    }

    /// [`begin`](Self::begin) of a request without a cost (`try_acquire`, the plain path).
    #[inline]
    pub(crate) fn begin_plain(&self, weight: u64) -> Result<(Word, CallStart), AcquireError> {
        let w = self.engine.check_weight(weight)?;
        Ok((w, self.start_call()?))
    }

    /// The breaker's check and the call's token (inert without policies).
    #[inline]
    pub(crate) fn start_call(&self) -> Result<CallStart, AcquireError> {
        match self.policies() {
            None => Ok(CallStart::NONE),
            Some(p) => self.start_guarded(p, 0),
        }
    }

    /// [`start_call`](Self::start_call) on a bulkhead with policies (or an observer). Out of
    /// line: inlined, it made the plain path's caller outline `start_call` itself (82 → 157 Ir
    /// for the uncontended pair in `bench/callgrind.sh`, measured A/B).
    #[inline(never)]
    fn start_guarded(&self, p: &Policies, class: u16) -> Result<CallStart, AcquireError> {
        self.sweep_if_held();
        let started = if p.times_calls() { self.now_ns() } else { 0 };
        let now = || if started != 0 { started } else { self.now_ns() };
        let id = self
            .emitter()
            .filter(|e| e.admissions())
            .map_or(0, Emitter::next_id);
        let start_ns = self.decision_start(id);
        match p.begin(now, started, |t| self.fire(t)) {
            Ok(call) => Ok(CallStart { id, ..call }),
            Err(_) => {
                let rejection = self.engine.reject(Reason::CircuitOpen);
                if id != 0 {
                    let asked = crate::front::emitter::Asked {
                        id,
                        class,
                        weight: 0,
                        cost: 0,
                        start_ns,
                    };
                    self.emit_reject(asked, Reason::CircuitOpen, None);
                }
                Err(rejection.into())
            }
        }
    }

    /// Step 3: records `outcome` to the breaker and the adaptive limit, before the permits
    /// return. Does nothing for an inert token.
    #[inline]
    pub(crate) fn finish(&self, call: CallStart, outcome: Outcome) {
        if !call.tracked {
            return;
        }
        if let Some(p) = self.policies() {
            p.end(
                call,
                outcome,
                self.now_ns(),
                || self.engine.snapshot().active,
                // In range by construction (`max_limit ≤ max_concurrent`, `min_limit ≥ 1`).
                |limit| {
                    let _ = self.engine.apply_limit(limit);
                },
                |t| self.fire(t),
            );
        }
    }

    /// A queued call was granted: its RTT starts at the grant (one clock read, only with an
    /// adaptive limit).
    pub(crate) fn granted_after_queueing(&self, mut call: CallStart) -> CallStart {
        if call.tracked && self.policies().is_some_and(Policies::times_calls) {
            call.started_ns = self.now_ns();
        }
        call
    }

    /// A queued guarded call was granted (`word`: its cell's record): its token, its RTT
    /// clock started, and its `Admit` event.
    #[inline]
    pub(crate) fn granted_from_queue(&self, word: CellRecord) -> CallStart {
        if word.call.flags == 0 && word.call.tag == 0 {
            // A plain waiter: an inert token, no events.
            return CallStart {
                class: word.class,
                ..CallStart::NONE
            };
        }
        CallStart {
            class: word.class,
            ..self.granted_guarded(word)
        }
    }

    #[inline(never)]
    fn granted_guarded(&self, word: CellRecord) -> CallStart {
        let call = self.granted_after_queueing(Self::unpack(word.call));
        if call.id != 0 {
            self.emit_admit(Self::asked_of(call.id, word), word.bypass, Some(word));
        }
        call
    }

    /// A queued guarded call was refused with `reason` (`word`: its cell's record): it ends
    /// `ignored`, with its `Reject` event.
    #[inline]
    pub(crate) fn refused_from_queue(&self, word: CellRecord, reason: Reason) {
        if word.call.flags == 0 && word.call.tag == 0 {
            // A plain waiter: nothing to end, no events.
            return;
        }
        self.refused_guarded(word, reason);
    }

    #[inline(never)]
    fn refused_guarded(&self, word: CellRecord, reason: Reason) {
        let call = Self::unpack(word.call);
        self.finish(call, Outcome::Ignored);
        if call.id != 0 {
            self.emit_reject(Self::asked_of(call.id, word), reason, Some(word));
        }
    }

    fn asked_of(id: u64, word: CellRecord) -> crate::front::emitter::Asked {
        crate::front::emitter::Asked {
            id,
            class: word.class,
            weight: word.weight as u64,
            cost: word.cost as u64,
            // Settled by the dispatcher's pass: no deciding call of its own to time.
            start_ns: None,
        }
    }

    /// A call's token as the cell of its queued waiter stores it.
    pub(crate) fn pack(call: CallStart) -> CallWord {
        CallWord {
            admit: call.admit,
            flags: Word::from(call.tracked) | Word::from(call.has_admit) << 1,
            tag: call.id as Word,
        }
    }

    /// The token back from a cell (its start time is set at the grant).
    pub(crate) fn unpack(w: CallWord) -> CallStart {
        CallStart {
            admit: w.admit,
            has_admit: w.flags & 2 != 0,
            started_ns: 0,
            tracked: w.flags & 1 != 0,
            id: w.tag as u64,
            class: 0,
        }
    }

    /// The caller's own cancellation came before it even asked (a Node call whose signal was
    /// already aborted): counted as `aborted`, so that every call shows in the stats. The
    /// caller still sees its runtime's own cancellation.
    pub fn aborted_before_admission(&self) -> Rejection {
        self.engine.reject(Reason::Aborted)
    }

    /// Counts one `call_timeout` in `rejected_by_reason`.
    pub(crate) fn count_call_timeout_now(&self) {
        self.engine.counters.reject(Reason::CallTimeout);
    }

    // ----- the polling API and the raw units pair -------------------------------------------

    /// Takes `weight` permits now without a handle, or fails without waiting: on `Ok` the
    /// caller holds them and returns them with [`release_units`](Self::release_units). Runs no
    /// guarded call (no breaker check, no outcome).
    ///
    /// # Errors
    /// `concurrency_limit` when not admitted at once (also while a waiter is queued: no
    /// barging), `shutdown` after [`close`](Self::close), `shed` while a load signal is over
    /// its threshold (class 0 non-critical, docs/design.md §4.11),
    /// [`AcquireError::InvalidWeight`].
    #[inline]
    pub fn try_acquire_units(&self, weight: u64) -> Result<(), AcquireError> {
        let w = self.engine.check_weight(weight)?;
        self.sweep_if_held();
        // Class 0, as every request of this API (one load while no signal is over).
        if let Some(shed) = self.load_sheds(0, true) {
            return Err(shed.into());
        }
        self.engine.take(w, 0).map_err(AcquireError::Rejected)?;
        self.engine.lend(w);
        Ok(())
    }

    /// The polling API: admits at once, or queues and returns a [`Ticket`], or rejects. Runs no
    /// guarded call; [`admit`](Self::admit) is the guarded form.
    ///
    /// `waker` (if any) is woken once the ticket settles; poll it with
    /// [`poll_ticket`](Self::poll_ticket), or give it up with [`cancel`](Self::cancel).
    ///
    /// # Errors
    /// `shutdown`; `concurrency_limit` when the bulkhead fails fast (`max_queue == 0`,
    /// `enabled == false`) or the weight is above the current limit; `queue_limit` when
    /// `max_queue` waiters are live; `shed` while a load signal is over its threshold (class 0
    /// non-critical, docs/design.md §4.11); invalid weight.
    pub fn enqueue(&self, weight: u64, waker: Option<&Waker>) -> Result<Admission, AcquireError> {
        let w = self.engine.check_weight(weight)?;
        self.sweep_if_held();
        if let Some(shed) = self.load_sheds(0, true) {
            return Err(shed.into());
        }
        match self
            .engine
            .enqueue(w, 0, waker, CallWord::default(), 0, 0, || u64::MAX)
        {
            Ok(Admitted::Now(_)) => {
                self.engine.lend(w);
                Ok(Admission::Granted)
            }
            Ok(Admitted::Queued(t)) => Ok(Admission::Queued(t)),
            Err(r) => Err(r.into()),
        }
    }

    /// Polls a ticket. On `Granted` / `Rejected` the ticket is consumed; `waker` replaces the
    /// registered waker while it is pending. A ticket that carries a guarded call (from
    /// [`admit`](Self::admit)) should be polled through its [`Waiter`](crate::Waiter); polled
    /// here, its call ends `ignored` when it settles.
    ///
    /// # Errors
    /// [`StaleTicket`] for a ticket that is not live (already consumed or cancelled).
    pub fn poll_ticket(
        &self,
        ticket: Ticket,
        waker: Option<&Waker>,
    ) -> Result<TicketPoll, StaleTicket> {
        Ok(
            match self.engine.poll(ticket, waker, self.emits_admissions())? {
                Polled::Pending => TicketPoll::Pending,
                Polled::Granted { weight, cost, call } => {
                    let class = call.class;
                    let call = self.granted_from_queue(call);
                    self.finish(call, Outcome::Ignored);
                    // The raw API holds permits only: a guarded waiter's budget units return now.
                    self.return_unused(cost, class);
                    // On a classed bulkhead they stay in the waiter's class (return them with
                    // `release_units_of`).
                    self.engine.lend(weight as Word);
                    TicketPoll::Granted(weight)
                }
                Polled::Rejected { rejection, call } => {
                    self.refused_from_queue(call, rejection.reason);
                    TicketPoll::Rejected(rejection)
                }
            },
        )
    }

    /// The owner cancels its queued ticket with `reason` (`aborted` for a caller's cancel,
    /// `timeout` for its own deadline): O(1), the waiter's place is free at once and cancelling
    /// the head passes the turn on (I4). A guarded call it carried ends `ignored`.
    ///
    /// # Errors
    /// [`CancelError::Granted`] / [`CancelError::Rejected`] when the waiter settled first (the
    /// owner must still poll the ticket to consume it), [`CancelError::Stale`] for a ticket that
    /// is not live.
    pub fn cancel(&self, ticket: Ticket, reason: Reason) -> Result<(), CancelError> {
        let call = self
            .engine
            .cancel(ticket, reason, self.emits_admissions())?;
        self.refused_from_queue(call, reason);
        Ok(())
    }

    /// Settles a queued ticket as rejected with `reason` on behalf of its owner — a host timer
    /// that fired (`timeout`), a cancellation signal (`aborted`) — and wakes the owner, whose
    /// next poll takes the rejection.
    ///
    /// # Errors
    /// As [`cancel`](Self::cancel): the waiter settled first, or the ticket is not live.
    pub fn expire(&self, ticket: Ticket, reason: Reason) -> Result<(), CancelError> {
        self.engine.expire(ticket, reason)
    }

    /// Whether `ticket` still waits in the queue (not settled, cancelled or reused): a
    /// snapshot, for a host's own bookkeeping (a binding dropping the deadlines of waiters that
    /// settled). One load.
    pub fn is_queued(&self, ticket: Ticket) -> bool {
        self.engine.is_queued(ticket)
    }

    /// The owner gives a ticket up (a dropped future, a finalized handle): cancels it as
    /// `aborted`, or, if it settled first, consumes it and passes granted permits on.
    pub fn abandon(&self, ticket: Ticket) {
        match self.cancel(ticket, Reason::Aborted) {
            Ok(()) | Err(CancelError::Stale) => {}
            Err(CancelError::Granted | CancelError::Rejected(_)) => {
                // Consumed here and passed on at once: never handle-free, so never in the
                // ledger (a checked return racing this could otherwise take the entry).
                match self.engine.poll(ticket, None, self.emits_admissions()) {
                    Ok(Polled::Granted { weight, cost, call }) => {
                        // The token the grant step returns (its `Admit` event fired) ends here.
                        let token = self.granted_from_queue(call);
                        let id = token.id;
                        self.finish(token, Outcome::Ignored);
                        self.budget_settled(cost, 0);
                        self.release_held(weight, cost, token.class);
                        if id != 0 {
                            self.emit_release(id, token.class, weight, cost, Some(0), true);
                        }
                    }
                    Ok(Polled::Rejected { rejection, call }) => {
                        self.refused_from_queue(call, rejection.reason);
                    }
                    Ok(Polled::Pending) | Err(_) => {}
                }
            }
        }
    }

    /// Returns `weight` handle-free permits — taken by
    /// [`try_acquire_units`](Self::try_acquire_units), [`enqueue`](Self::enqueue), a granted
    /// ticket or [`Call::forget`](crate::Call::forget). Hands them to the head waiter if any.
    ///
    /// The caller guarantees it holds them; for untrusted callers (the C raw pair) use
    /// [`release_units_checked`](Self::release_units_checked). A call's permits are returned by
    /// the call itself, never through this.
    #[inline]
    pub fn release_units(&self, weight: u64) {
        self.release_units_of(weight, 0);
    }

    /// [`release_units`](Self::release_units) on a classed bulkhead (docs/design.md §4.8): the
    /// permits return to class `class` — the class of the call that was forgotten, or of the
    /// waiter whose ticket was polled; the raw units pair (`try_acquire_units`) is class 0's.
    /// The caller guarantees it holds them in that class (a `class` out of range is class 0).
    #[inline]
    pub fn release_units_of(&self, weight: u64, class: u16) {
        let w = weight as Word;
        self.engine.unlend(w);
        let class = if (class as usize) < self.class_count() {
            class
        } else {
            0
        };
        self.engine.release(w, 0, class);
    }

    /// Returns handle-free permits, refusing any return of more than are out without a handle
    /// (the bulkhead keeps that count): a double release, units never handed out, or the
    /// permits of a live call. A refusal changes nothing but `released_twice_total` (+1), so
    /// `available` never rises above the limit through this — provided every handle-free
    /// return on this bulkhead is checked (a trusted [`release_units`](Self::release_units)
    /// is not, by definition). The raw C pair's release.
    ///
    /// # Errors
    /// [`OverRelease`]: the return was refused (also for a `weight` of 0 or above
    /// `max_concurrent`, an argument error that is not counted).
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 2, ..Config::default() })?;
    /// let call = bh.try_acquire(1)?; // a handle's permit
    /// assert!(bh.release_units_checked(1).is_err(), "not the raw pair's to return");
    /// bh.try_acquire_units(1)?;
    /// assert!(bh.release_units_checked(1).is_ok());
    /// assert!(bh.release_units_checked(1).is_err(), "a double release");
    /// drop(call);
    /// let s = bh.stats();
    /// assert_eq!((s.available, s.limit, s.released_twice_total), (2, 2, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release_units_checked(&self, weight: u64) -> Result<(), OverRelease> {
        self.engine.release_checked(weight)
    }

    /// A call's permits and budget units come back (its end, drop or partial release): no
    /// ledger entry.
    #[inline]
    pub(crate) fn release_held(&self, weight: u64, cost: u64, class: u16) {
        self.engine.release(weight as Word, cost as Word, class);
    }

    /// Budget units that a grant took and nobody will hold return at once, counted refunded.
    pub(crate) fn return_unused(&self, cost: u64, class: u16) {
        if cost != 0 {
            self.budget_settled(cost, 0);
            self.engine.release(0, cost as Word, class);
        }
    }

    /// A live hold asks for `cost` more units: taken if they fit with nobody queued, else held
    /// past the budget as overrun (see [`Call::report_usage`](crate::Call::report_usage)).
    pub(crate) fn grow_hold(&self, cost: u64) -> bool {
        self.engine.grow_hold(cost as Word)
    }

    /// `cost` units of a hold's overrun part left it.
    pub(crate) fn overrun_returned(&self, cost: u64) {
        if self.engine.has_budget() {
            self.engine.overrun_returned(cost as Word);
        }
    }

    /// Counts a settlement of a hold of `held` budget units against `used` (docs/design.md
    /// §4.5): the unused rest refunded, use beyond the hold as overrun.
    #[inline]
    pub(crate) fn budget_settled(&self, held: u64, used: u64) {
        if self.engine.has_budget() && (held != 0 || used != 0) {
            // Saturated: a usage above the word (32-bit targets) is never wrapped into a refund.
            let sat = |x: u64| x.min(Word::MAX as u64) as Word;
            self.engine.budget_settled(sat(held), sat(used));
        }
    }

    /// Orphans `weight` permits of a call (see [`Call::orphan`](crate::Call::orphan)).
    pub(crate) fn orphan_permits(&self, weight: u64, class: u16) -> Result<(), crate::OrphanError> {
        self.engine
            .orphan(weight as Word, class)
            .map_err(|in_flight| crate::OrphanError {
                weight,
                in_flight,
                max: self.engine.max_orphaned(),
            })
    }

    /// An orphaned call of `weight` permits ended.
    pub(crate) fn orphan_ended(&self, weight: u64) {
        self.engine.orphan_ended(weight as Word);
    }

    /// Counts an explicit release of an already released handle (I9: a no-op, reported).
    pub fn record_double_release(&self) {
        self.engine.counters.record_double_release();
    }

    /// Counts `weight` permits returned because a binding handle was destroyed while held.
    pub fn record_leak(&self, weight: u64) {
        self.engine.counters.record_leak(weight as Word);
    }

    // ----- runtime change ------------------------------------------------------------------

    /// Changes the limit, `1 ..= max_concurrent`. Never blocks, never revokes: growing hands the
    /// new permits to waiters; shrinking lets `available` go negative until releases pay it
    /// back, and rejects queued waiters heavier than the new limit (`concurrency_limit`). An
    /// adaptive limit restarts from the hand-set value.
    ///
    /// # Errors
    /// [`ConfigError::Limit`] outside `1 ..= max_concurrent`; [`ConfigError::Leased`] on a
    /// leased bulkhead (its limit is the lease's block).
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config};
    /// let bh = Bulkhead::new(Config { max_concurrent: 4, ..Config::default() }).unwrap();
    /// let held = bh.try_acquire(3).unwrap();
    /// bh.set_limit(1).unwrap();
    /// assert_eq!(bh.stats().available, -2);
    /// drop(held);
    /// assert_eq!(bh.stats().available, 1);
    /// ```
    pub fn set_limit(&self, limit: u64) -> Result<(), ConfigError> {
        if self.engine.is_leased() {
            return Err(ConfigError::Leased);
        }
        self.check_partition(Some(limit), None)?;
        self.engine.apply_limit(limit)?;
        if let Some(a) = self.policies().and_then(Policies::adaptive) {
            a.reseed(limit, |l| {
                let _ = self.engine.apply_limit(l);
            });
        }
        self.emit_reconfigure();
        Ok(())
    }

    /// Changes the budget's ceiling, `0 ..= budget` (the one it was built with). Never blocks,
    /// never revokes: growing grants queued waiters that now fit; shrinking lets the free
    /// units go negative until releases pay it back, and rejects queued waiters whose cost is
    /// above the new ceiling (`budget_limit`). 0 admits only requests of cost 0.
    ///
    /// # Errors
    /// [`ConfigError::BudgetLimit`] outside `0 ..= budget`, or without a budget;
    /// [`ConfigError::Leased`] on a leased bulkhead.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Request, Decision};
    /// let bh = Bulkhead::new(Config { budget: Some(1000), ..Config::default() })?;
    /// let Decision::Granted(call) = bh.admit(&Request::new(1).cost(600), None) else { panic!() };
    /// bh.set_budget(500)?;
    /// assert_eq!(bh.stats().budget.unwrap().available, -100);
    /// drop(call);
    /// assert_eq!(bh.stats().budget.unwrap().available, 500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_budget(&self, budget: u64) -> Result<(), ConfigError> {
        if self.engine.is_leased() {
            return Err(ConfigError::Leased);
        }
        self.check_partition(None, Some(budget))?;
        self.engine.apply_budget(budget)?;
        self.emit_reconfigure();
        Ok(())
    }

    /// Whether a streaming call that overruns the budget is asked to cancel its work
    /// (`cancel_on_overrun`).
    pub fn cancels_on_overrun(&self) -> bool {
        self.cancel_on_overrun
    }

    /// Whether this bulkhead has a budget.
    pub fn has_budget(&self) -> bool {
        self.engine.has_budget()
    }

    /// Stops admission for good: new acquires are rejected `shutdown`, queued waiters are
    /// rejected `shutdown` at once (I8) — by this call, or by the dispatcher pass another thread
    /// is running at that moment; a grant that pass had already decided before the close
    /// completes as a grant. Work in flight completes and releases normally. Idempotent.
    pub fn close(&self) {
        self.engine.close();
    }

    // ----- observation ---------------------------------------------------------------------

    /// `{active, queued, limit, available}` now.
    pub fn snapshot(&self) -> Snapshot {
        self.engine.snapshot()
    }

    /// The stats (docs/design.md §8.1). Reading them commits a due open → half-open transition
    /// of the breaker, like any state read.
    pub fn stats(&self) -> Stats {
        // Expired reservations return their units first, so the stats show them free.
        self.expire_reservations();
        let snap = self.engine.snapshot();
        let c = &self.engine.counters;
        let now = || self.now_ns();
        Stats {
            active: snap.active,
            queued: snap.queued,
            granted_unclaimed: c.unclaimed_now(),
            limit: snap.limit,
            max_concurrent: self.max_concurrent(),
            available: snap.available,
            admitted_total: c.admitted_total(),
            rejected_by_reason: c.rejected(),
            released_twice_total: c.released_twice_total(),
            leaked_total: c.leaked_total(),
            orphaned_in_flight: c.orphaned_now(),
            orphaned_total: c.orphaned_total(),
            ring_free: self.engine.ring_free(),
            queue_wait_count: c.wait_count_total(),
            queue_wait_sum_ns: c.wait_sum_total(),
            queue_wait_max_ns: c.wait_max(),
            queue_wait_histogram: c.wait_histogram(),
            adaptive: self.policies().and_then(Policies::adaptive_stats),
            circuit: self
                .policies()
                .and_then(|p| p.circuit_stats(now(), |t| self.fire(t))),
            budget: self.engine.budget_stats(),
            revision: self.engine.revision(),
            observe: self.engine.observe(),
            observed_by_reason: c.observed(),
            observer_panics: self.emitter().map_or(0, |e| e.panics()),
            reservations_held: self.reservations().map_or(0, ReservationTable::held),
            reservations_expired_total: self
                .reservations()
                .map_or(0, ReservationTable::expired_total),
            load: self.load.stats(),
        }
    }

    /// Switches observe (shadow) mode at run time (docs/design.md §4.7): the dimensions of
    /// `observe` are decided and counted (`stats().observed_by_reason`) but let through; the
    /// others are enforced. Switching to a mode that observes a dimension grants the waiters
    /// queued for it at once; enforcing again never revokes — observed holders above the
    /// limit leave by attrition, as after a shrink. No effect on a disabled bulkhead.
    ///
    /// # Errors
    /// [`ConfigError::Observe`] for [`Observe::Budget`](crate::Observe::Budget) on a bulkhead
    /// without a budget; nothing changes.
    ///
    /// # Examples
    /// ```
    /// use hullguard_core::{Bulkhead, Config, Observe, Reason};
    /// let bh = Bulkhead::new(Config { max_concurrent: 1, max_queue: 0, observe: Observe::All,
    ///                                 ..Config::default() }).unwrap();
    /// let (a, b) = (bh.try_acquire(1).unwrap(), bh.try_acquire(1).unwrap()); // both admitted
    /// assert_eq!(bh.stats().observed_by_reason.get(Reason::ConcurrencyLimit), 1);
    /// bh.set_observe(Observe::Off).unwrap();
    /// assert!(bh.try_acquire(1).is_err()); // enforced again: 2 held of 1, none taken
    /// # drop((a, b));
    /// ```
    pub fn set_observe(&self, observe: crate::Observe) -> Result<(), ConfigError> {
        if self.engine.is_leased() && observe != crate::Observe::Off {
            // A leased block is never observed (other processes count on it).
            return Err(ConfigError::Leased);
        }
        if observe == crate::Observe::Budget && !self.has_budget() {
            return Err(ConfigError::Observe);
        }
        if self.class_count() != 0 && observe != crate::Observe::Off {
            return Err(ConfigError::Class(
                crate::config::classes::ClassError::Unsupported { option: "observe" },
            ));
        }
        self.engine.set_observe(observe);
        self.emit_reconfigure();
        Ok(())
    }

    /// `active == 0 && queued == 0 && granted_unclaimed == 0` (what `drain` waits for).
    pub fn is_idle(&self) -> bool {
        self.engine.is_idle()
    }

    /// The breaker's state now (committing a due lazy transition and firing its event), or
    /// `None` without a breaker.
    pub fn circuit_state(&self) -> Option<CircuitState> {
        self.policies()?
            .circuit_state(self.now_ns(), |t| self.fire(t))
    }
}

/// A queue timeout as one word: ns on a 64-bit word (ms on a 32-bit one), `Word::MAX` for
/// `Duration::MAX` (none) and anything at least that long.
const fn encode_timeout(d: Duration) -> Word {
    #[cfg(target_has_atomic = "64")]
    let n = d.as_nanos();
    // Rounded up: a sub-millisecond timeout must not become 0 ("do not queue").
    #[cfg(not(target_has_atomic = "64"))]
    let n = d.as_nanos().div_ceil(1_000_000);
    if n >= Word::MAX as u128 {
        Word::MAX
    } else {
        n as Word
    }
}

/// The inverse of [`encode_timeout`].
fn decode_timeout(w: Word) -> Duration {
    if w == Word::MAX {
        Duration::MAX
    } else {
        #[cfg(target_has_atomic = "64")]
        return Duration::from_nanos(w as u64);
        #[cfg(not(target_has_atomic = "64"))]
        return Duration::from_millis(w as u64);
    }
}
