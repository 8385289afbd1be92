//! [`HostBulkhead`]: one bulkhead shared by every process on the host that opens the same
//! name (docs/design.md §14).

use std::{
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicPtr, Ordering},
    },
    time::{Duration, Instant},
};

use hullguard_core::{
    AcquireError, ClockSource, Deadline, Decision, MetricSink, Observe, Reason, Request, deadline,
};

use crate::{
    acquire::HostAcquire,
    attachment::Attachment,
    error::HostError,
    file::FileSpec,
    options::{HostOptions, OnMismatch},
    os,
    permit::{HostPermit, Ticket, granted, reject},
    queue::LocalQueue,
    segment::{Admit, SegmentConfig},
    stats::HostStats,
};

/// A bulkhead whose limit holds across every process on the host that opens the same name.
///
/// Admission is the local bulkhead's: FIFO across processes (each waiter takes a ticket from a
/// host-wide counter; only the process holding the smallest may admit, no barging), weighted
/// permits, an optional budget, queue timeout and deadline, close and drain, the same reasons
/// and the same stats schema. A process killed while holding permits gives them back within
/// about one `probe` period (default 250 ms); one stopped or hung for `lease_ttl` (default
/// 10 s) is expired, and its late releases are refused [`LeaseError::Stale`].
///
/// Thread-safety: `Send + Sync`; every method may be called from any thread. After `fork`, a
/// handle inherited by the child attaches the child on first use (a slot of its own); permits
/// acquired before the fork are [`LeaseError::Foreign`] in the child.
///
/// # Examples
/// ```no_run
/// use hullguard_host::{HostBulkhead, HostOptions};
/// let bh = HostBulkhead::open("payments-db", HostOptions { max_concurrent: 5, ..HostOptions::default() })?;
/// let permit = bh.acquire_blocking(1, None)?;   // at most 5 at once on this host
/// // … call the database …
/// permit.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct HostBulkhead {
    name: String,
    options: HostOptions,
    spec: FileSpec,
    /// This handle's queue over this process's attachment (re-made after a fork): a pointer
    /// from `Arc::into_raw`, holding one strong count, given back on drop. One replaced after
    /// a fork is leaked (a thread may still be reading it), never freed.
    current: AtomicPtr<LocalQueue>,
    reattach: Mutex<()>,
}

impl Drop for HostBulkhead {
    fn drop(&mut self) {
        // SAFETY: `current` holds a pointer from `Arc::into_raw` with its own strong count,
        // given back exactly once here (`&mut self`: no reader is left).
        drop(unsafe { Arc::from_raw(*self.current.get_mut()) });
    }
}

impl HostBulkhead {
    /// Opens (creating if absent) the host bulkhead `name`, and attaches this process.
    ///
    /// # Errors
    /// [`HostError::Option`] for a bad name or option; [`HostError::Mismatch`] when the segment
    /// exists with another host-wide setting (unless `on_mismatch` is `Adopt`);
    /// [`HostError::Permission`], [`HostError::Incompatible`], [`HostError::Io`] for the file;
    /// [`HostError::NoSlot`] when every slot is held by a live process.
    pub fn open(name: &str, options: HostOptions) -> Result<Self, HostError> {
        crate::file::check_name(name)?;
        options.validate()?;
        let mut creator = [0u8; 16];
        let tag = format!("{} {}", options.library, crate::VERSION);
        creator[..tag.len().min(16)].copy_from_slice(&tag.as_bytes()[..tag.len().min(16)]);
        let spec = FileSpec {
            dir: options.dir.clone(),
            name: name.to_owned(),
            mode: options.mode,
            slots: options.slots,
            config: SegmentConfig {
                max_concurrent: options.max_concurrent,
                budget: options.budget.unwrap_or(0),
                lease_ttl_ms: options.lease_ttl.as_millis() as u64,
                beat_ms: options.beat.as_millis() as u64,
                probe_ms: options.probe.as_millis() as u64,
            },
            creator,
        };
        let a = Self::attach(&spec, &options)?;
        let q = LocalQueue::new(a, options.max_queue, options.queue_timeout)?;
        Ok(HostBulkhead {
            name: name.to_owned(),
            options,
            spec,
            current: AtomicPtr::new(Arc::into_raw(Arc::new(q)).cast_mut()),
            reattach: Mutex::new(()),
        })
    }

    fn attach(spec: &FileSpec, options: &HostOptions) -> Result<&'static Attachment, HostError> {
        let a = Attachment::get(spec)?;
        let found = a.seg().config();
        if options.on_mismatch == OnMismatch::Error {
            let want = &spec.config;
            for (option, segment, requested) in [
                ("max_concurrent", found.max_concurrent, want.max_concurrent),
                ("budget", found.budget, want.budget),
                ("lease_ttl (ms)", found.lease_ttl_ms, want.lease_ttl_ms),
                ("beat (ms)", found.beat_ms, want.beat_ms),
                ("probe (ms)", found.probe_ms, want.probe_ms),
            ] {
                if segment != requested {
                    return Err(HostError::Mismatch {
                        path: a.path.clone(),
                        option,
                        segment,
                        requested,
                    });
                }
            }
        }
        Ok(a)
    }

    /// This handle's queue over this process's attachment: re-made in a forked child on
    /// first use (a slot of the child's own, an empty queue; a closed handle stays closed).
    #[inline]
    fn queue(&self) -> Result<&LocalQueue, HostError> {
        // SAFETY: `current` always holds a live `Arc` pointer: this handle's own strong count
        // keeps it alive while `&self` is borrowed (a replaced one is leaked, never freed).
        let q: &LocalQueue = unsafe { &*self.current.load(Ordering::Acquire) };
        if q.a.is_own() {
            return Ok(q);
        }
        let _guard = self.reattach.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: as above.
        let q: &LocalQueue = unsafe { &*self.current.load(Ordering::Acquire) };
        if q.a.is_own() {
            return Ok(q);
        }
        let mut options = self.options.clone();
        options.on_mismatch = OnMismatch::Adopt; // the parent already checked
        let fresh = LocalQueue::new(
            Self::attach(&self.spec, &options)?,
            options.max_queue,
            options.queue_timeout,
        )?;
        if q.is_closed() {
            fresh.close();
        }
        let fresh = Arc::into_raw(Arc::new(fresh));
        self.current.store(fresh.cast_mut(), Ordering::Release);
        // SAFETY: just made from a live Arc this handle now owns.
        Ok(unsafe { &*fresh })
    }

    /// The queue as an owning reference (for a future that may outlive this borrow).
    fn queue_arc(&self, q: &LocalQueue) -> Arc<LocalQueue> {
        let ptr: *const LocalQueue = q;
        // SAFETY: `q` came from `queue()`: a pointer from `Arc::into_raw` whose strong count
        // this handle holds while borrowed, so adding one and taking it back is sound.
        unsafe {
            Arc::increment_strong_count(ptr);
            Arc::from_raw(ptr)
        }
    }

    /// The queue even when a forked child could not re-attach (for read-only accessors).
    fn queue_or_current(&self) -> &LocalQueue {
        match self.queue() {
            Ok(q) => q,
            // SAFETY: as in `queue`.
            Err(_) => unsafe { &*self.current.load(Ordering::Acquire) },
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The segment file.
    pub fn path(&self) -> &Path {
        &self.queue_or_current().a.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// This process's slot index (diagnostics).
    pub fn slot(&self) -> usize {
        self.queue_or_current().a.slot
    }

    /// Admits `weight` permits now or refuses (never queues).
    ///
    /// # Errors
    /// As [`admit_blocking`](Self::admit_blocking).
    pub fn try_acquire(&self, weight: u64) -> Result<HostPermit, HostError> {
        // The common case first, without a request's deadline and queue arithmetic: a valid
        // weight on an open handle, admitted at once. Anything else takes the general path.
        if let Ok(q) = self.queue() {
            let a = q.a;
            let limit = a
                .seg()
                .header(crate::layout::h::MAX_CONCURRENT)
                .load(Ordering::Relaxed);
            if (1..=limit).contains(&weight) && !q.is_closed() {
                if let Ok(Ok(generation)) = a.admit(weight, 0, false) {
                    return Ok(granted(q, generation, &Request::new(weight), None));
                }
            }
        }
        self.admit_blocking(&Request::new(weight).queue_timeout(Duration::ZERO))
    }

    /// Admits `weight` permits, waiting up to `timeout` (`None`: the bulkhead's
    /// `queue_timeout`) on this thread.
    ///
    /// # Errors
    /// As [`admit_blocking`](Self::admit_blocking).
    pub fn acquire_blocking(
        &self,
        weight: u64,
        timeout: Option<Duration>,
    ) -> Result<HostPermit, HostError> {
        let mut request = Request::new(weight);
        request.queue_timeout = timeout;
        self.admit_blocking(&request)
    }

    /// Admits `request` (its weight, cost, queue timeout and deadline), blocking this thread
    /// while it waits its turn.
    ///
    /// # Errors
    /// [`HostError::Acquire`] with the local bulkhead's reasons: `concurrency_limit` /
    /// `budget_limit` (not admitted and not queued), `queue_limit` (this process's queue is
    /// full), `timeout`, `shutdown` (closed); an invalid weight, cost, class (a host bulkhead has
    /// no classes) or observe mode (none) is refused `invalid`. [`HostError::Poisoned`] /
    /// [`HostError::Removed`] when the segment cannot be trusted or is gone.
    pub fn admit_blocking(&self, request: &Request) -> Result<HostPermit, HostError> {
        let (q, wait) = match self.start(request)? {
            Start::Done(permit) => return Ok(permit),
            Start::Wait { q, wait } => (q, wait),
        };
        let a = q.a;
        let start = Instant::now();
        let until = start.checked_add(wait);
        // This handle's FIFO for its head first (a full queue refuses before any ticket),
        // then a ticket: the global arrival order.
        let gate = Request::new(1).queue_timeout(wait);
        let (head, ticket) = match q.gate.admit(&gate, None) {
            Decision::Granted(call) => (call, Ticket::take(a)),
            Decision::Queued(waiter) => {
                let ticket = Ticket::take(a);
                match waiter.wait_blocking(until) {
                    Ok(call) => (call, ticket),
                    Err(e) => return Err(refused(q, e)),
                }
            }
            Decision::Rejected(e) => return Err(refused(q, e)),
        };
        // This handle's head: wait for the global turn on the own doorbell.
        loop {
            let bell = a.bell();
            let seen = bell.load(Ordering::SeqCst);
            if let Ok(generation) = a.admit(request.weight, request.cost, true)? {
                drop(ticket); // unpublish, ring the next head
                drop(head); // hand this handle's head to its next waiter
                return Ok(granted(q, generation, request, Some(start)));
            }
            if q.is_closed() {
                return Err(reject(a, q.max_queue, Reason::Shutdown));
            }
            let now = Instant::now();
            let left = match until {
                Some(t) if now >= t => return Err(reject(a, q.max_queue, Reason::Timeout)),
                Some(t) => t - now,
                None => Duration::MAX,
            };
            os::futex_wait(bell, seen, left.min(a.probe_period()));
            a.probe_if_due();
        }
    }

    /// Admits `request` asynchronously: the future completes with the permit or the
    /// rejection; dropping it while it waits gives its place up (cancellation). It needs no
    /// runtime: this process's keeper thread wakes it (its turn, its queue timeout).
    pub fn acquire(&self, request: Request) -> HostAcquire {
        match self.start(&request) {
            Err(e) => HostAcquire::done(Err(e)),
            Ok(Start::Done(permit)) => HostAcquire::done(Ok(permit)),
            Ok(Start::Wait { q, wait }) => HostAcquire::queued(self.queue_arc(q), request, wait),
        }
    }

    /// Checks `request`, and refuses or admits it at once when it can: what is left is a wait
    /// of at most the returned duration.
    fn start(&self, request: &Request) -> Result<Start<'_>, HostError> {
        let q = self.queue()?;
        let a = q.a;
        let max_queue = q.max_queue;
        let c = a.seg().config();
        if request.weight == 0 || request.weight > c.max_concurrent {
            return Err(AcquireError::InvalidWeight {
                weight: request.weight,
                max_concurrent: c.max_concurrent,
            }
            .into());
        }
        if request.cost > c.budget {
            return Err(AcquireError::InvalidCost {
                cost: request.cost,
                max_budget: c.budget,
            }
            .into());
        }
        if request.class != 0 {
            return Err(AcquireError::InvalidClass {
                class: request.class,
                classes: 0,
            }
            .into());
        }
        if request.observe != Observe::Off {
            return Err(AcquireError::InvalidObserve {
                observe: request.observe,
            }
            .into());
        }
        if q.is_closed() {
            return Err(reject(a, max_queue, Reason::Shutdown));
        }
        // No clock read without a deadline (the uncontended path's largest cost otherwise).
        let left = if request.deadline == Deadline::NONE {
            None
        } else {
            request.deadline.time_left(&ClockSource::default_for_host())
        };
        if left == Some(Duration::ZERO) {
            return Err(reject(a, max_queue, Reason::Timeout));
        }
        let timeout = request.queue_timeout.unwrap_or(self.options.queue_timeout);
        let wait = deadline::queue_wait(timeout, left, Duration::ZERO);
        // At once, if nobody waits and it fits.
        let refusal = match a.admit(request.weight, request.cost, false)? {
            Ok(generation) => {
                return Ok(Start::Done(granted(q, generation, request, None)));
            }
            Err(Admit::Full { reason, .. }) => reason,
            Err(_) => Reason::ConcurrencyLimit,
        };
        if wait.is_zero() {
            let reason = if left.is_some() && timeout > Duration::ZERO {
                Reason::Timeout
            } else {
                refusal
            };
            return Err(reject(a, max_queue, reason));
        }
        if max_queue == 0 {
            return Err(reject(a, max_queue, Reason::QueueLimit));
        }
        Ok(Start::Wait { q, wait })
    }

    /// The host's figures (every process's permits, waiters and counters), read from this
    /// process. Dead processes are reaped first, so the figures count live holders only.
    pub fn stats(&self) -> HostStats {
        let q = self.queue_or_current();
        q.a.reap();
        HostStats::read(q.a, &self.options)
    }

    /// Writes the host's samples of the metric table into `sink` (docs/design.md §8.3): the
    /// figures of [`stats`](Self::stats), so the same from any process and counting live
    /// holders only (C37). What the Prometheus and OpenTelemetry exporters publish.
    pub fn metrics(&self, sink: &mut (impl MetricSink + ?Sized)) {
        hullguard_core::metrics::visit(&self.stats().stats, &[], sink);
    }

    /// Probes every other process's liveness now and reclaims the dead (a gunicorn
    /// `child_exit` or Node `cluster` `exit` handler calls this); returns the slots reclaimed
    /// or expired.
    pub fn reap(&self) -> usize {
        self.queue().map(|q| q.a.reap()).unwrap_or(0)
    }

    /// Closes this handle: its new requests are refused `shutdown` and its waiters are woken
    /// with `shutdown`; held permits stay valid until released. Other handles (of this process
    /// too: other threads, loops, worker threads) and other processes are not affected.
    pub fn close(&self) {
        self.queue_or_current().close();
    }

    /// Whether [`close`](Self::close) was called on this handle.
    pub fn is_closed(&self) -> bool {
        self.queue_or_current().is_closed()
    }

    /// Waits until this process holds no permit of this host bulkhead and this handle has no
    /// waiter, at most `timeout`; whether it did. (Call [`close`](Self::close) first to stop
    /// new work. Permits are the process's: a permit carries no handle, so that a grant costs
    /// no reference count.)
    pub fn drain_blocking(&self, timeout: Duration) -> bool {
        let q = self.queue_or_current();
        let until = Instant::now() + timeout;
        loop {
            if q.a.own_held().0 == 0 && q.gate.is_idle() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1).min(until - Instant::now()));
        }
    }
}

/// A refusal by a handle's queue, with the host's snapshot (not the one-permit gate's).
fn refused(q: &LocalQueue, e: AcquireError) -> HostError {
    match e.reason() {
        Some(r) => reject(q.a, q.max_queue, crate::acquire::gate_reason(r)),
        None => e.into(),
    }
}

/// What is left of an admission after its checks and its attempt at once.
enum Start<'q> {
    Done(HostPermit),
    Wait { q: &'q LocalQueue, wait: Duration },
}
