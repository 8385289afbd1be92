//! [`HostBulkhead`]: one bulkhead shared by every process on the host that opens the same
//! name (docs/design.md §14).

use std::{
    path::Path,
    sync::{
        Mutex,
        atomic::{AtomicPtr, Ordering},
    },
    time::{Duration, Instant},
};

use hullguard_core::{AcquireError, ClockSource, MetricSink, Observe, Reason, Request, deadline};

use crate::{
    acquire::HostAcquire,
    attachment::Attachment,
    error::HostError,
    file::FileSpec,
    options::{HostOptions, OnMismatch},
    os,
    permit::{HostPermit, Ticket, granted, reject},
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
    /// The attachment of this process (re-made after a fork); always a leaked, never freed
    /// `Box<Attachment>`.
    current: AtomicPtr<Attachment>,
    reattach: Mutex<()>,
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
        Ok(HostBulkhead {
            name: name.to_owned(),
            options,
            spec,
            current: AtomicPtr::new(a as *const Attachment as *mut Attachment),
            reattach: Mutex::new(()),
        })
    }

    fn attach(spec: &FileSpec, options: &HostOptions) -> Result<&'static Attachment, HostError> {
        let a = Attachment::get(spec, options.max_queue, options.queue_timeout)?;
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

    /// This process's attachment: re-made in a forked child on first use.
    fn attachment(&self) -> Result<&'static Attachment, HostError> {
        // SAFETY: `current` only ever holds pointers from `Box::leak` (Attachment::get), which
        // are never freed.
        let a: &'static Attachment = unsafe { &*self.current.load(Ordering::Acquire) };
        if a.is_own() {
            return Ok(a);
        }
        let _guard = self.reattach.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: as above.
        let a: &'static Attachment = unsafe { &*self.current.load(Ordering::Acquire) };
        if a.is_own() {
            return Ok(a);
        }
        let mut options = self.options.clone();
        options.on_mismatch = OnMismatch::Adopt; // the parent already checked
        let fresh = Self::attach(&self.spec, &options)?;
        self.current.store(
            fresh as *const Attachment as *mut Attachment,
            Ordering::Release,
        );
        Ok(fresh)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The segment file.
    pub fn path(&self) -> &Path {
        &self.attachment_or_current().path
    }

    fn attachment_or_current(&self) -> &'static Attachment {
        match self.attachment() {
            Ok(a) => a,
            // SAFETY: as in `attachment`.
            Err(_) => unsafe { &*self.current.load(Ordering::Acquire) },
        }
    }

    /// The options it was opened with.
    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// This process's slot index (diagnostics).
    pub fn slot(&self) -> usize {
        self.attachment_or_current().slot
    }

    /// Admits `weight` permits now or refuses (never queues).
    ///
    /// # Errors
    /// As [`admit_blocking`](Self::admit_blocking).
    pub fn try_acquire(&self, weight: u64) -> Result<HostPermit, HostError> {
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
        let (a, wait) = match self.start(request)? {
            Start::Done(permit) => return Ok(permit),
            Start::Wait { a, wait } => (a, wait),
        };
        let max_queue = self.options.max_queue;
        let start = Instant::now();
        let until = start.checked_add(wait);
        // Queue: a ticket (global arrival order), then this process's FIFO for the head.
        let Some(ticket) = Ticket::take(a, max_queue) else {
            return Err(reject(a, max_queue, Reason::QueueLimit));
        };
        let head = match a.gate.acquire_blocking(1, Some(wait)) {
            Ok(p) => p,
            // The host's snapshot, not the gate's (a one-permit bulkhead).
            Err(e) => return Err(e.reason().map_or(e.into(), |r| reject(a, max_queue, r))),
        };
        // The head of this process: wait for the global turn on the own doorbell.
        loop {
            let bell = a.bell();
            let seen = bell.load(Ordering::SeqCst);
            if let Ok(generation) = a.admit(request.weight, request.cost, true)? {
                drop(ticket); // unpublish, ring the next head
                drop(head); // hand this process's head to its next waiter
                return Ok(granted(a, generation, request, Some(start)));
            }
            if a.closed.load(Ordering::Acquire) {
                return Err(reject(a, max_queue, Reason::Shutdown));
            }
            let now = Instant::now();
            let left = match until {
                Some(t) if now >= t => return Err(reject(a, max_queue, Reason::Timeout)),
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
            Ok(Start::Wait { a, wait }) => {
                HostAcquire::queued(a, request, wait, self.options.max_queue)
            }
        }
    }

    /// Checks `request`, and refuses or admits it at once when it can: what is left is a wait
    /// of at most the returned duration.
    fn start(&self, request: &Request) -> Result<Start, HostError> {
        let a = self.attachment()?;
        let max_queue = self.options.max_queue;
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
        if a.closed.load(Ordering::Acquire) {
            return Err(reject(a, max_queue, Reason::Shutdown));
        }
        let left = request.deadline.time_left(&ClockSource::default_for_host());
        if left == Some(Duration::ZERO) {
            return Err(reject(a, max_queue, Reason::Timeout));
        }
        let timeout = request.queue_timeout.unwrap_or(self.options.queue_timeout);
        let wait = deadline::queue_wait(timeout, left, Duration::ZERO);
        // At once, if nobody waits and it fits.
        let refusal = match a.admit(request.weight, request.cost, false)? {
            Ok(generation) => return Ok(Start::Done(granted(a, generation, request, None))),
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
        Ok(Start::Wait { a, wait })
    }

    /// The host's figures (every process's permits, waiters and counters), read from this
    /// process. Dead processes are reaped first, so the figures count live holders only.
    pub fn stats(&self) -> HostStats {
        let a = self.attachment_or_current();
        a.reap();
        HostStats::read(a, &self.options)
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
        self.attachment().map(|a| a.reap()).unwrap_or(0)
    }

    /// Closes this process's use of the host bulkhead: new requests here are refused
    /// `shutdown`, this process's waiters are woken with `shutdown`; held permits stay valid
    /// until released. Other processes are not affected.
    pub fn close(&self) {
        let a = self.attachment_or_current();
        a.closed.store(true, Ordering::Release);
        a.gate.close();
        a.ring(a.slot);
    }

    /// Whether [`close`](Self::close) was called in this process.
    pub fn is_closed(&self) -> bool {
        self.attachment_or_current().closed.load(Ordering::Acquire)
    }

    /// Waits until this process holds no permit and has no waiter, at most `timeout`; whether
    /// it did. (Call [`close`](Self::close) first to stop new work.)
    pub fn drain_blocking(&self, timeout: Duration) -> bool {
        let a = self.attachment_or_current();
        let until = Instant::now() + timeout;
        loop {
            if a.own_held().0 == 0 && a.gate.is_idle() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1).min(until - Instant::now()));
        }
    }
}

/// What is left of an admission after its checks and its attempt at once.
enum Start {
    Done(HostPermit),
    Wait {
        a: &'static Attachment,
        wait: Duration,
    },
}
