//! [`FleetBulkhead`] (docs/design.md §16.1): the Rust binding of a [`FleetCore`] — its local
//! bulkhead for admissions, and one driver thread that keeps the lease over a [`Transport`]
//! (the `redis` crate's connections, or your own). Admissions never touch the network: while
//! the block has room an acquire is a local acquire plus one clock read (the lease's deadline,
//! checked in the core).

use std::{sync::Arc, thread::JoinHandle, time::Duration};

use hullguard_core::{
    AcquireError, Bulkhead, Call, Decision, LimitsSnapshot, Permit, Request, clock::Clock,
};

use crate::{
    error::FleetError,
    fleet_core::{AppliedLimits, Command, FleetCore, Local, RawReply, Step},
    options::FleetConfig,
    pool::Dimension,
    protocol::PoolStats,
    stats::FleetStats,
    transport::{Transport, TransportErrorKind},
};

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
    core: Arc<FleetCore>,
    transport: Arc<std::sync::Mutex<Box<dyn Transport>>>,
    driver: Option<JoinHandle<()>>,
    /// Told when the driver returns (so `close` never waits on a call that hangs).
    driver_done: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    /// How long `close` waits for the driver: the lease's TTL.
    close_wait: Duration,
}

impl std::fmt::Debug for FleetBulkhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetBulkhead")
            .field("core", &self.core)
            .finish_non_exhaustive()
    }
}

type Shared = Arc<std::sync::Mutex<Box<dyn Transport>>>;

fn send(transport: &Shared, command: &Command) -> Result<RawReply, String> {
    let mut t = transport.lock().unwrap_or_else(|p| p.into_inner());
    match t.call_ints(command.function, &command.keys, &command.argv) {
        Ok(v) if command.scalar_reply() && v.len() == 1 => Ok(RawReply::Int(v[0])),
        Ok(v) => Ok(RawReply::Ints(v)),
        Err(e) => Err(e.to_string()),
    }
}

fn drive(core: &FleetCore, transport: &Shared) {
    loop {
        match core.step() {
            Step::Send(command) => match send(transport, &command) {
                Ok(reply) => core.complete(reply),
                Err(e) => core.fail(&e),
            },
            Step::Wait(d) => core.wait(d),
            Step::Closed => return,
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
        Self::open_with(transport, config, clock, Local::default())
    }

    /// [`open_with_clock`](Self::open_with_clock) with what stays local: admission classes
    /// (they partition this process's block: [`Request::class`]) and an observer for the
    /// local core's events.
    ///
    /// # Errors
    /// As [`open`](Self::open), and [`FleetError::Config`] for a class table the config does
    /// not allow.
    pub fn open_with(
        transport: impl Transport + 'static,
        config: FleetConfig,
        clock: Option<Arc<dyn Clock>>,
        local: Local<'_>,
    ) -> Result<Self, FleetError> {
        let core = Arc::new(FleetCore::with_local(&config, clock, local)?);
        let mut transport: Box<dyn Transport> = Box::new(transport);
        transport.ensure_library(core.keys())?;
        let transport: Shared = Arc::new(std::sync::Mutex::new(transport));
        let (done, driver_done) = std::sync::mpsc::channel();
        let driver = {
            let (core, transport) = (Arc::clone(&core), Arc::clone(&transport));
            std::thread::Builder::new()
                .name(format!("hullguard-fleet:{}", core.pool()))
                .spawn(move || {
                    drive(&core, &transport);
                    let _ = done.send(());
                })
                .map_err(|e| {
                    FleetError::Transport(crate::TransportError {
                        kind: TransportErrorKind::Io,
                        message: format!("cannot start the lease thread: {e}"),
                    })
                })?
        };
        Ok(FleetBulkhead {
            core,
            transport,
            driver: Some(driver),
            driver_done: std::sync::Mutex::new(driver_done),
            close_wait: config.lease_ttl,
        })
    }

    /// The pool.
    pub fn pool(&self) -> &str {
        self.core.pool().as_str()
    }

    /// This process's holder id.
    pub fn holder(&self) -> &str {
        self.core.holder()
    }

    /// The local bulkhead (admissions, stats, events); its limit belongs to the lease.
    pub fn bulkhead(&self) -> &Bulkhead {
        self.core.bulkhead()
    }

    /// The one admission (as a local bulkhead's [`Bulkhead::admit`]): granted at once when the
    /// block has room, queued (FIFO in this process) when it has not — the driver is woken to
    /// ask for more — or refused (`concurrency_limit`, bound `fleet_lease` when the block is
    /// empty or past its deadline).
    pub fn admit(&self, request: &Request) -> Decision<&Bulkhead, 0> {
        self.core.bulkhead().admit(request, None)
    }

    /// Takes `weight` permits now, or refuses. Never waits, never touches the network.
    ///
    /// # Errors
    /// The refusal.
    pub fn try_acquire(&self, weight: u64) -> Result<Permit<'_>, AcquireError> {
        self.core.bulkhead().try_acquire(weight)
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
        self.core.bulkhead().acquire_blocking(weight, timeout)
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

    /// Sets the fleet limit and/or the fleet budget in Redis under `snapshot.revision` (each
    /// lease table refuses a stale or equal revision of its own and answers the value in
    /// force). Lowering never revokes: holders shrink to their shares at their next syncs.
    /// Only `limit` and `budget` may be set.
    ///
    /// # Errors
    /// [`FleetError::Option`] for another field, neither given, a value out of range, a
    /// budget on a fleet bulkhead without one; [`FleetError::Transport`].
    pub fn apply_limits(&self, snapshot: &LimitsSnapshot) -> Result<AppliedLimits, FleetError> {
        let commands = self.core.apply_limits(snapshot)?;
        let mut replies = Vec::with_capacity(commands.len());
        for command in &commands {
            match send(&self.transport, command) {
                Ok(r) => replies.push(r),
                Err(message) => {
                    // What was set before the error is in force: keep it (it is set again if
                    // Redis loses its state), then report the error.
                    if !replies.is_empty() {
                        let _ = self.core.limits_applied(snapshot, &replies);
                    }
                    return Err(FleetError::Transport(crate::TransportError {
                        kind: TransportErrorKind::Io,
                        message,
                    }));
                }
            }
        }
        self.core.limits_applied(snapshot, &replies)
    }

    /// The pool as Redis holds it (holders, blocks, generations, expiries): one read-only call.
    ///
    /// # Errors
    /// [`FleetError::Transport`].
    pub fn pool_stats(&self) -> Result<PoolStats, FleetError> {
        self.pool_stats_of(Dimension::Permits)
    }

    /// [`pool_stats`](Self::pool_stats) of one dimension's lease table (the budget's).
    ///
    /// # Errors
    /// [`FleetError::Transport`].
    pub fn pool_stats_of(&self, dimension: Dimension) -> Result<PoolStats, FleetError> {
        let command = self.core.pool_stats_command_of(dimension);
        let fields = {
            let mut t = self.transport.lock().unwrap_or_else(|p| p.into_inner());
            t.call_fields(command.function, &command.keys, &command.argv)?
        };
        FleetCore::decode_pool_stats(&fields)
    }

    /// The local stats and the lease's.
    pub fn stats(&self) -> FleetStats {
        self.core.stats()
    }

    /// Stops the driver and gives the block back (fenced: a lease that expired frees nothing);
    /// queued waiters are refused `shutdown`, calls in flight finish. Waits at most the lease's
    /// TTL for a driver stuck in a call (a transport without a timeout, a hung Redis): then
    /// gives up on the release — the lease runs out by its TTL. Idempotent.
    pub fn close(&mut self) {
        self.core.close();
        if let Some(d) = self.driver.take() {
            let done = self
                .driver_done
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .recv_timeout(self.close_wait);
            if done.is_err() {
                // Stuck: leave the thread (it holds its own references) and the lease.
                return;
            }
            let _ = d.join();
        }
        // One release per lease (the permits', then the budget's).
        while let Some(command) = self.core.release_command() {
            match send(&self.transport, &command) {
                Ok(reply) => self.core.released(&reply),
                Err(e) => self.core.fail(&e),
            }
        }
    }
}

impl Drop for FleetBulkhead {
    fn drop(&mut self) {
        self.close();
    }
}
