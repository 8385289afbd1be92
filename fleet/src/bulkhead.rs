//! [`FleetBulkhead`] (docs/design.md §16.1): a local core bulkhead whose limit is the block this
//! process leases from the pool, and one driver thread that keeps the lease — it syncs every
//! beat and when demand changes, and drops the block to 0 at the lease's deadline. Admissions
//! never touch the network: while the block has room an acquire is a local acquire plus one
//! clock read (the deadline check).

use std::{
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering::*},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use hullguard_core::{
    AcquireError, Bulkhead, Call, ClockSource, Config, Decision, LimitsSnapshot, Permit, Reason,
    Request, clock::Clock,
};

use crate::{
    error::FleetError,
    lease::{Demand, LeaseManager, Poll},
    options::FleetConfig,
    pool::{Keys, new_holder_id},
    protocol::{FN_STATS, PoolStats, SetLimitReply},
    stats::{FleetStats, LeaseStats},
    transport::{Transport, execute},
};

/// The longest the driver sleeps between two looks at the clock (an injected clock may jump).
const MAX_PARK: Duration = Duration::from_millis(100);

struct Shared {
    core: Bulkhead,
    keys: Keys,
    pool: String,
    holder: String,
    lease: Mutex<LeaseManager>,
    wake: Condvar,
    /// Clock ns until which the block admits (the lease's deadline); 0: nothing.
    admit_until: AtomicU64,
    refused: AtomicU64,
    nudged: AtomicBool,
    closing: AtomicBool,
    transport: Mutex<Box<dyn Transport>>,
}

/// A bulkhead whose limit is shared by every process that opens the same pool on one Redis
/// (docs/design.md §16). Thread-safe (`Send + Sync`); share it by reference or in an `Arc`.
/// Dropping it (or [`close`](Self::close)) stops the driver and releases the lease.
///
/// # Examples
/// ```no_run
/// use hullguard_fleet::{FleetBulkhead, FleetConfig, PoolName, redis_transport::RedisTransport};
/// let conn = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
/// let mut cfg = FleetConfig::new(PoolName::new("llm-provider")?);
/// cfg.max_concurrent = 50; // the fleet limit a new pool starts with
/// let bh = FleetBulkhead::open(RedisTransport::new(conn), cfg)?;
/// let permit = bh.acquire_blocking(1, Some(std::time::Duration::from_secs(2)))?;
/// // … the call …
/// drop(permit);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FleetBulkhead {
    shared: Arc<Shared>,
    driver: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FleetBulkhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetBulkhead")
            .field("pool", &self.shared.pool)
            .field("holder", &self.shared.holder)
            .finish_non_exhaustive()
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Shared {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.core.now_ns())
    }

    fn lock(&self) -> MutexGuard<'_, LeaseManager> {
        self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn demand(&self) -> Demand {
        let s = self.core.snapshot();
        Demand {
            in_flight: s.active,
            queued: s.queued,
            refused_total: self.refused.load(Relaxed),
        }
    }

    /// Installs the lease's local limit and deadline at `now` (under the lease lock). The
    /// deadline the fast path checks never runs ahead of the block it guards.
    fn apply(&self, lease: &LeaseManager, now: Duration) {
        let limit = lease.local_limit(now).min(hullguard_core::MAX_PERMITS);
        let until = ns(lease.admit_until(now));
        let before = self.admit_until.load(Acquire);
        self.admit_until.store(before.min(until), Release);
        let _ = self.core.set_lease(limit);
        self.admit_until.store(until, Release);
    }

    /// The fast path found the deadline passed: install what the lease says now.
    fn expire_now(&self) {
        let lease = self.lock();
        self.apply(&lease, self.now());
    }

    fn check_deadline(&self) {
        // Acquire: pairs with `apply`'s Release stores.
        if self.core.now_ns() >= self.admit_until.load(Acquire) {
            self.expire_now();
        }
    }

    /// Demand the block does not cover: wake the driver (once per driver round).
    fn nudge(&self, refused: bool) {
        if refused {
            self.refused.fetch_add(1, Relaxed);
        }
        if !self.nudged.swap(true, AcqRel) {
            let _held = self.lock();
            self.wake.notify_one();
        }
    }

    fn drive(self: &Arc<Self>) {
        let mut lease = self.lock();
        while !self.closing.load(Acquire) {
            let now = self.now();
            if self.nudged.swap(false, AcqRel) {
                lease.nudge();
            }
            match lease.poll(now, self.demand()) {
                Poll::Send(request) => {
                    self.apply(&lease, now);
                    drop(lease);
                    let outcome = {
                        let mut t = self.transport.lock().unwrap_or_else(|p| p.into_inner());
                        execute(&mut **t, &self.keys, &self.holder, &request)
                    };
                    lease = self.lock();
                    let now = self.now();
                    lease.complete(now, outcome.map_err(|e| e.to_string()));
                    self.apply(&lease, now);
                }
                Poll::Wait(at) => {
                    self.apply(&lease, now);
                    let park = at
                        .saturating_sub(now)
                        .clamp(Duration::from_micros(100), MAX_PARK);
                    lease = self
                        .wake
                        .wait_timeout(lease, park)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
        let release = lease.close();
        self.apply(&lease, self.now());
        drop(lease);
        if let Some(request) = release {
            let mut t = self.transport.lock().unwrap_or_else(|p| p.into_inner());
            let _ = execute(&mut **t, &self.keys, &self.holder, &request);
        }
    }
}

impl FleetBulkhead {
    /// Opens a fleet bulkhead on `transport` (a connection to the pool's Redis) with `config`,
    /// on the host's monotonic clock. Loads the library if needed (one round trip when it is
    /// there), then starts the driver, which asks for the first block at once; acquires queue
    /// (or are refused `concurrency_limit`, bound `fleet_lease`) until it arrives.
    ///
    /// # Errors
    /// [`FleetError::Option`] for a bad option (named), [`FleetError::Transport`] when Redis
    /// cannot be reached or refuses the library.
    pub fn open(
        transport: impl Transport + 'static,
        config: FleetConfig,
    ) -> Result<Self, FleetError> {
        Self::open_with_clock(transport, config, None)
    }

    /// [`open`](Self::open) on an injected clock (a test's virtual or drifting clock; it must
    /// never go backwards). The lease's deadlines are kept on it.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with_clock(
        transport: impl Transport + 'static,
        config: FleetConfig,
        clock: Option<Arc<dyn Clock>>,
    ) -> Result<Self, FleetError> {
        config.validate()?;
        let mut transport: Box<dyn Transport> = Box::new(transport);
        let keys = config.pool.keys();
        transport.ensure_library(&keys)?;
        let core_config = Config {
            max_concurrent: config.max_concurrent.min(hullguard_core::MAX_PERMITS),
            max_queue: config.max_queue,
            queue_timeout: config.queue_timeout,
            start_limit: Some(0),
            ..Config::DEFAULT
        };
        let clock = match clock {
            Some(c) => ClockSource::Shared(c),
            None => ClockSource::default_for_host(),
        };
        let core = Bulkhead::with_clock(core_config, clock).map_err(FleetError::Config)?;
        core.set_lease(0).map_err(FleetError::Config)?;
        let holder = config.holder.clone().unwrap_or_else(new_holder_id);
        let lease = LeaseManager::new(holder.clone(), config.lease());
        let shared = Arc::new(Shared {
            core,
            keys,
            pool: config.pool.as_str().to_owned(),
            holder,
            lease: Mutex::new(lease),
            wake: Condvar::new(),
            admit_until: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            nudged: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            transport: Mutex::new(transport),
        });
        let driver_shared = Arc::clone(&shared);
        let driver = std::thread::Builder::new()
            .name(format!("hullguard-fleet:{}", shared.pool))
            .spawn(move || driver_shared.drive())
            .map_err(|e| {
                FleetError::Transport(crate::TransportError {
                    kind: crate::transport::TransportErrorKind::Io,
                    message: format!("cannot start the lease thread: {e}"),
                })
            })?;
        Ok(FleetBulkhead {
            shared,
            driver: Some(driver),
        })
    }

    /// The pool.
    pub fn pool(&self) -> &str {
        &self.shared.pool
    }

    /// This process's holder id.
    pub fn holder(&self) -> &str {
        &self.shared.holder
    }

    /// The one admission (as a local bulkhead's [`Bulkhead::admit`]): granted at once when the
    /// block has room, queued (FIFO in this process) when it has not — the driver is nudged to
    /// ask for more — or refused. A refusal for want of a block is `concurrency_limit` with
    /// the bound `fleet_lease` when the block is empty.
    pub fn admit(&self, request: &Request) -> Decision<&Bulkhead, 0> {
        self.shared.check_deadline();
        let d = self.shared.core.admit(request, None);
        match &d {
            Decision::Queued(_) => self.shared.nudge(false),
            Decision::Rejected(e) if e.reason() == Some(Reason::ConcurrencyLimit) => {
                self.shared.nudge(true)
            }
            _ => {}
        }
        d
    }

    /// Takes `weight` permits now, or refuses (`concurrency_limit`; bound `fleet_lease` when
    /// the block is empty). Never waits, never touches the network.
    ///
    /// # Errors
    /// The refusal.
    pub fn try_acquire(&self, weight: u64) -> Result<Permit<'_>, AcquireError> {
        self.shared.check_deadline();
        let r = self.shared.core.try_acquire(weight);
        if matches!(&r, Err(e) if e.reason() == Some(Reason::ConcurrencyLimit)) {
            self.shared.nudge(true);
        }
        r
    }

    /// Takes `weight` permits, parking this thread for at most `timeout` (`None`: the
    /// bulkhead's `queue_timeout`).
    ///
    /// # Errors
    /// The refusal, or `timeout`.
    pub fn acquire_blocking(
        &self,
        weight: u64,
        timeout: Option<Duration>,
    ) -> Result<Call<&Bulkhead, 0>, AcquireError> {
        match self.admit(&Request::new(weight)) {
            Decision::Granted(c) => Ok(c),
            Decision::Rejected(e) => Err(e),
            Decision::Queued(w) => {
                let wait = timeout.unwrap_or_else(|| w.queue_timeout());
                w.wait_blocking(Instant::now().checked_add(wait))
            }
        }
    }

    /// Takes `weight` permits, waiting without a bound (wrap it in your runtime's timeout; a
    /// dropped future leaves the queue at once).
    ///
    /// # Errors
    /// The refusal.
    pub async fn acquire(&self, weight: u64) -> Result<Call<&Bulkhead, 0>, AcquireError> {
        match self.admit(&Request::new(weight)) {
            Decision::Granted(c) => Ok(c),
            Decision::Rejected(e) => Err(e),
            Decision::Queued(w) => w.await,
        }
    }

    /// Sets the fleet limit in Redis under `snapshot.revision` (a stale or equal revision is
    /// refused by Redis, and the limit in force is returned). Lowering never revokes: holders
    /// shrink to their shares at their next syncs. Only `limit` may be set: a snapshot with
    /// other fields is refused by name (they are per process; set them at open).
    ///
    /// # Errors
    /// [`FleetError::Option`] for a field other than `limit`, a missing or out-of-range limit;
    /// [`FleetError::Transport`].
    pub fn apply_limits(&self, snapshot: &LimitsSnapshot) -> Result<SetLimitReply, FleetError> {
        let bad = |option, message: &str| FleetError::Option {
            option,
            message: message.to_owned(),
        };
        if snapshot.budget.is_some() {
            return Err(bad("budget", "not supported by a fleet bulkhead"));
        }
        if snapshot.max_queue.is_some()
            || snapshot.queue_timeout.is_some()
            || snapshot.queue_delay.is_some()
        {
            return Err(bad(
                "limits",
                "only the fleet limit can be applied to a fleet bulkhead",
            ));
        }
        let Some(limit) = snapshot.limit else {
            return Err(bad(
                "limit",
                "apply_limits on a fleet bulkhead sets the fleet limit: give one",
            ));
        };
        if limit > crate::options::MAX_FLEET_LIMIT {
            return Err(bad("limit", "must be an integer in 0 ..= 2^32"));
        }
        if snapshot.revision == 0 || snapshot.revision > crate::protocol::MAX_EXACT {
            return Err(bad("revision", "must be an integer in 1 ..= 2^53 - 1"));
        }
        let request = crate::lease::Request::SetLimit {
            limit,
            rev: snapshot.revision,
        };
        let reply = {
            let mut t = self
                .shared
                .transport
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            execute(&mut **t, &self.shared.keys, &self.shared.holder, &request)?
        };
        let crate::lease::Reply::SetLimit(r) = reply else {
            return Err(FleetError::Transport(crate::TransportError::protocol(
                "hg_set_limit answered another reply",
            )));
        };
        if r.applied {
            // Remembered, so it is set again if the pool loses its state.
            self.shared
                .lock()
                .limit_applied(limit, snapshot.revision, r);
        }
        self.shared.nudge(false);
        Ok(r)
    }

    /// The pool as Redis holds it (holders, blocks, generations, expiries): one read-only call.
    ///
    /// # Errors
    /// [`FleetError::Transport`].
    pub fn pool_stats(&self) -> Result<PoolStats, FleetError> {
        let fields = {
            let mut t = self
                .shared
                .transport
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            t.call_fields(FN_STATS, &self.shared.keys, &[])?
        };
        PoolStats::decode(&fields).map_err(|e| FleetError::Transport(e.into()))
    }

    /// The local stats and the lease's.
    pub fn stats(&self) -> FleetStats {
        let stats = self.shared.core.stats();
        let now = self.shared.now();
        let lease = self.shared.lock();
        let fleet = lease.fleet();
        let local_limit = lease.local_limit(now);
        let covered = if lease.admit_until(now) > now {
            local_limit.max(lease.held())
        } else {
            0
        };
        FleetStats {
            lease: LeaseStats {
                pool: self.shared.pool.clone(),
                holder: self.shared.holder.clone(),
                state: lease.state(now),
                generation: lease.generation(),
                held: lease.held(),
                share: lease.target(),
                local_limit,
                fleet_limit: fleet.limit,
                fleet_used: fleet.used,
                holders: fleet.holders,
                epoch: fleet.epoch,
                rev: fleet.rev,
                learning: fleet.learning,
                lease_left: lease.deadline().map(|d| d.saturating_sub(now)),
                unreachable: lease.unreachable(),
                last_error: lease.last_error().map(str::to_owned),
                unleased_in_flight: stats.active.saturating_sub(covered),
                counters: lease.counters(),
            },
            stats,
        }
    }

    /// Stops the driver and gives the block back (fenced: a lease that expired frees nothing);
    /// queued waiters are refused `shutdown`, calls in flight finish. Idempotent.
    pub fn close(&mut self) {
        self.shared.closing.store(true, Release);
        self.shared.core.close();
        {
            let _held = self.shared.lock();
            self.shared.wake.notify_all();
        }
        if let Some(d) = self.driver.take() {
            let _ = d.join();
        }
    }
}

impl Drop for FleetBulkhead {
    fn drop(&mut self) {
        self.close();
    }
}
