//! [`FleetCore`] (docs/design.md §16.4): what every binding drives — a core bulkhead in leased
//! mode, its lease manager, and the steps of the driver loop. A binding owns only the I/O: it
//! asks [`step`](FleetCore::step) what to send, sends the command through the Redis client the
//! user already has (redis-py sync or asyncio, ioredis, the `redis` crate, a C callback), hands
//! the reply to [`complete`](FleetCore::complete) (or the error to
//! [`fail`](FleetCore::fail)), and between steps parks in [`wait`](FleetCore::wait) (or on its
//! own waker, registered with [`register_demand`](FleetCore::register_demand)). Admissions go
//! straight to [`bulkhead`](FleetCore::bulkhead): the block, its deadline and the demand bell
//! live in the core, so they never wait for the driver.

use std::{
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering::*},
    },
    task::{Wake, Waker},
    time::Duration,
};

use hullguard_core::{Bulkhead, ClockSource, Config, LimitsSnapshot, clock::Clock};

use crate::{
    error::FleetError,
    lease::{Demand, LeaseManager, Poll, Reply, Request},
    options::FleetConfig,
    pool::{Keys, PoolName, new_holder_id},
    protocol::{
        self, FN_RELEASE, FN_SET_LIMIT, FN_STATS, FN_SYNC, Field, PoolStats, SetLimitReply,
        SyncReply,
    },
    stats::{FleetStats, LeaseStats},
    transport::TransportError,
};

/// One command to send: `FCALL <function> 6 <keys…> <argv…>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The library function.
    pub function: &'static str,
    /// Its arguments (after the keys).
    pub argv: Vec<String>,
}

impl Command {
    /// The whole command as strings, for a client's `execute_command(*args)` / `call(...args)`:
    /// `FCALL <function> 6 <keys…> <argv…>`, or `WAIT <replicas> <timeout_ms>`.
    pub fn args(&self, keys: &Keys) -> Vec<String> {
        if self.function == protocol::CMD_WAIT {
            let mut v = vec![protocol::CMD_WAIT.to_owned()];
            v.extend(self.argv.iter().cloned());
            return v;
        }
        protocol::fcall(self.function, keys, &self.argv)
    }

    /// Whether the reply is one integer ([`RawReply::Int`]: `hg_release`, `WAIT`) rather than
    /// a list.
    pub fn scalar_reply(&self) -> bool {
        self.function == FN_RELEASE || self.function == protocol::CMD_WAIT
    }
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this, then [`complete`](FleetCore::complete) or [`fail`](FleetCore::fail).
    Send(Command),
    /// Nothing to send: park for at most this long ([`wait`](FleetCore::wait)), then step.
    Wait(Duration),
    /// Closed: stop the loop (send [`close`](FleetCore::close)'s release first).
    Closed,
}

/// A reply as a client returns it: an integer, or a list of integers (`hg_stats` is read with
/// [`FleetCore::decode_pool_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawReply {
    /// A scalar reply.
    Int(i64),
    /// A list reply.
    Ints(Vec<i64>),
}

/// The bell the driver parks on: rung by the core when an admission finds the block short.
#[derive(Debug, Default)]
struct Bell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Wake for Bell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        *self.rung.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }
}

/// A fleet bulkhead's state, shared by its admissions and its driver (see the module docs).
/// Thread-safe.
pub struct FleetCore {
    bulkhead: Arc<Bulkhead>,
    pool: PoolName,
    keys: Keys,
    holder: String,
    lease: Mutex<LeaseManager>,
    bell: Arc<Bell>,
    bell_waker: Waker,
    closing: AtomicBool,
    /// The core's short-admission count the last step's poll saw.
    polled_shorts: AtomicU64,
    /// Until when (clock time) a wait ignores the bell: a bell-woken driver steps at most once
    /// per `min_sync_interval`, however fast refusals come.
    quiet_until: Mutex<Duration>,
    min_interval: Duration,
    /// The ceiling before the first reply tells the fleet limit (`max_concurrent`).
    default_ceiling: u64,
}

impl std::fmt::Debug for FleetCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetCore")
            .field("pool", &self.pool)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FleetCore {
    /// A fleet bulkhead's state for `config` (validated), on `clock` (the host's monotonic
    /// clock when `None`; an injected one must never go backwards). Its block is empty until
    /// the driver's first sync.
    ///
    /// # Errors
    /// [`FleetError::Option`] naming a bad option.
    pub fn new(config: &FleetConfig, clock: Option<Arc<dyn Clock>>) -> Result<Self, FleetError> {
        config.validate()?;
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
        let bulkhead = Bulkhead::with_clock(core_config, clock).map_err(FleetError::Config)?;
        bulkhead.set_lease_until(0);
        bulkhead.set_lease(0).map_err(FleetError::Config)?;
        let holder = new_holder_id(config.holder.as_deref());
        let bell = Arc::new(Bell::default());
        Ok(FleetCore {
            bulkhead: Arc::new(bulkhead),
            keys: config.pool.keys(),
            pool: config.pool.clone(),
            lease: Mutex::new(LeaseManager::new(holder.clone(), config.lease())),
            holder,
            bell_waker: Waker::from(bell.clone()),
            bell,
            closing: AtomicBool::new(false),
            polled_shorts: AtomicU64::new(0),
            quiet_until: Mutex::new(Duration::ZERO),
            min_interval: config.min_sync_interval,
            default_ceiling: config.max_concurrent.clamp(1, hullguard_core::MAX_PERMITS),
        })
    }

    /// The local bulkhead: admit, acquire, stats — as a local bulkhead's. Its limit and
    /// deadline belong to the lease: do not change them (use [`apply_limits`](Self::apply_limits)
    /// for the fleet limit).
    pub fn bulkhead(&self) -> &Arc<Bulkhead> {
        &self.bulkhead
    }

    /// The pool.
    pub fn pool(&self) -> &PoolName {
        &self.pool
    }

    /// The pool's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// This process's holder id.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    fn lock(&self) -> MutexGuard<'_, LeaseManager> {
        self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.bulkhead.now_ns())
    }

    fn demand(&self) -> Demand {
        let s = self.bulkhead.snapshot();
        Demand {
            in_flight: s.active,
            queued: s.queued,
            refused_total: self.bulkhead.lease_shorts(),
            short_weight: self.bulkhead.take_lease_short_weight(),
        }
    }

    /// Installs the lease's block, deadline and ceiling at `now`: first the more restrictive
    /// of the old and the new block and deadline, then the new ones, so admissions never see
    /// more than either allows (a switch from an expired block to a local share, say). The
    /// ceiling — the largest weight that may wait — is the fleet limit.
    fn apply(&self, lease: &LeaseManager, now: Duration) {
        let limit = lease.local_limit(now).min(hullguard_core::MAX_PERMITS);
        let until = ns(lease.admit_until(now));
        let (old_limit, old_until) = (self.bulkhead.limit(), self.bulkhead.lease_until());
        let _ = self.bulkhead.set_lease(limit.min(old_limit));
        self.bulkhead.set_lease_until(until.min(old_until));
        self.bulkhead.set_lease_until(until);
        let fleet = lease.fleet();
        let mut ceiling = if fleet.limit == 0 {
            self.default_ceiling
        } else {
            fleet.limit
        }
        .max(limit)
        .clamp(1, hullguard_core::MAX_PERMITS);
        if fleet.learning {
            // A recreated pool starts at a default limit until the applied one is set again:
            // never reject a waiter the fleet's real limit allows meanwhile.
            ceiling = ceiling.max(self.bulkhead.max_concurrent());
        }
        if ceiling != self.bulkhead.max_concurrent() {
            let _ = self.bulkhead.set_lease_ceiling(ceiling);
        }
        let _ = self.bulkhead.set_lease(limit);
    }

    /// The driver's next step (it also installs what the lease says now: at a deadline, the
    /// block drops to 0).
    pub fn step(&self) -> Step {
        let mut lease = self.lock();
        if self.closing.load(Acquire) {
            return Step::Closed;
        }
        let now = self.now();
        let demand = self.demand();
        self.polled_shorts.store(demand.refused_total, Release);
        let poll = lease.poll(now, demand);
        self.apply(&lease, now);
        match poll {
            Poll::Send(request) => Step::Send(self.command(&request)),
            Poll::Wait(at) => Step::Wait(at.saturating_sub(now)),
        }
    }

    fn command(&self, request: &Request) -> Command {
        match request {
            Request::Sync(args) => Command {
                function: FN_SYNC,
                argv: args.argv(),
            },
            Request::Release { generation } => Command {
                function: FN_RELEASE,
                argv: protocol::release_argv(&self.holder, *generation),
            },
            Request::SetLimit { limit, rev } => Command {
                function: FN_SET_LIMIT,
                argv: protocol::set_limit_argv(*limit, *rev, *limit),
            },
            Request::Replicate {
                replicas,
                timeout_ms,
            } => Command {
                function: protocol::CMD_WAIT,
                argv: vec![replicas.to_string(), timeout_ms.to_string()],
            },
        }
    }

    /// The reply to the command [`step`](Self::step) returned.
    pub fn complete(&self, reply: RawReply) {
        let mut lease = self.lock();
        let decoded = match lease.pending_request() {
            Some(r) => decode(r, &reply).map_err(|e| e.to_string()),
            None => return,
        };
        let now = self.now();
        lease.complete(now, decoded);
        self.apply(&lease, now);
    }

    /// The command [`step`](Self::step) returned failed (Redis unreachable, an error reply).
    pub fn fail(&self, error: &str) {
        let mut lease = self.lock();
        let now = self.now();
        lease.complete(now, Err(error.to_owned()));
        self.apply(&lease, now);
    }

    /// Registers a binding's own waker, woken once by the next admission the block turns away
    /// (see [`Bulkhead::register_lease_demand`]). [`wait`](Self::wait) does this itself.
    pub fn register_demand(&self, waker: &Waker) {
        self.bulkhead.register_lease_demand(waker);
    }

    /// Parks the calling thread for at most `timeout`, or until an admission finds the block
    /// short (at most once per `min_sync_interval`: a storm of refusals does not spin the
    /// driver), or [`close`](Self::close). Returns at once when the block turned admissions
    /// away since the last [`step`](Self::step). Blocking: call it without holding a runtime's
    /// lock (Python: GIL released).
    pub fn wait(&self, timeout: Duration) {
        let now = self.now();
        let quiet = {
            let q = self.quiet_until.lock().unwrap_or_else(|p| p.into_inner());
            q.saturating_sub(now)
        };
        if !quiet.is_zero() {
            // Recently woken by demand: only close (or the timeout) ends this park.
            let rung = self.bell.rung.lock().unwrap_or_else(|p| p.into_inner());
            let _ = self
                .bell
                .cv
                .wait_timeout_while(rung, quiet.min(timeout), |_| !self.closing.load(Acquire));
            return;
        }
        *self.bell.rung.lock().unwrap_or_else(|p| p.into_inner()) = false;
        // Not under the bell's lock: a registration that meets a concurrent ring wakes the
        // waker at once, and the waker takes that lock.
        self.bulkhead.register_lease_demand(&self.bell_waker);
        // Registered before this check: demand after it rings the bell.
        let demand = self.bulkhead.lease_shorts() > self.polled_shorts.load(Acquire);
        let rung = self.bell.rung.lock().unwrap_or_else(|p| p.into_inner());
        if self.closing.load(Acquire) {
            return;
        }
        if !demand && !*rung {
            let (r, _) = self
                .bell
                .cv
                .wait_timeout_while(rung, timeout, |r| !*r && !self.closing.load(Acquire))
                .unwrap_or_else(|p| p.into_inner());
            if !*r {
                return;
            }
        } else {
            drop(rung);
        }
        *self.quiet_until.lock().unwrap_or_else(|p| p.into_inner()) =
            self.now() + self.min_interval;
    }

    /// The command that sets the fleet limit under `snapshot.revision`, validated (only
    /// `limit` may be set: the rest is per process). Send it, then hand the reply to
    /// [`limit_applied`](Self::limit_applied).
    ///
    /// # Errors
    /// [`FleetError::Option`] naming what is wrong.
    pub fn apply_limits(&self, snapshot: &LimitsSnapshot) -> Result<Command, FleetError> {
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
        if snapshot.revision == 0 || snapshot.revision > protocol::MAX_EXACT {
            return Err(bad("revision", "must be an integer in 1 ..= 2^53 - 1"));
        }
        Ok(Command {
            function: FN_SET_LIMIT,
            argv: protocol::set_limit_argv(limit, snapshot.revision, limit),
        })
    }

    /// The reply to [`apply_limits`](Self::apply_limits)'s command, for `snapshot`: remembered
    /// when applied (it is set again if the pool loses its state), and the driver is woken to
    /// sync under the new limit.
    ///
    /// # Errors
    /// [`FleetError::Transport`] for a reply of another shape.
    pub fn limit_applied(
        &self,
        snapshot: &LimitsSnapshot,
        reply: &RawReply,
    ) -> Result<SetLimitReply, FleetError> {
        let RawReply::Ints(v) = reply else {
            return Err(FleetError::Transport(TransportError::protocol(
                "hg_set_limit answered a scalar",
            )));
        };
        let r = SetLimitReply::decode(v).map_err(|e| FleetError::Transport(e.into()))?;
        if r.applied {
            let mut lease = self.lock();
            lease.limit_applied(snapshot.limit.unwrap_or(r.limit), snapshot.revision, r);
            // The new ceiling at once: a weight the new limit allows is valid now.
            self.apply(&lease, self.now());
        }
        self.bell_waker.wake_by_ref();
        Ok(r)
    }

    /// The read-only command that reads the pool (`hg_stats`); decode its reply with
    /// [`decode_pool_stats`](Self::decode_pool_stats).
    pub fn pool_stats_command(&self) -> Command {
        Command {
            function: FN_STATS,
            argv: Vec::new(),
        }
    }

    /// Decodes `hg_stats`' reply.
    ///
    /// # Errors
    /// [`FleetError::Transport`] for another shape.
    pub fn decode_pool_stats(fields: &[Field]) -> Result<PoolStats, FleetError> {
        PoolStats::decode(fields).map_err(|e| FleetError::Transport(e.into()))
    }

    /// The local stats and the lease's.
    pub fn stats(&self) -> FleetStats {
        let stats = self.bulkhead.stats();
        let now = self.now();
        let lease = self.lock();
        let fleet = lease.fleet();
        let local_limit = lease.local_limit(now);
        let covered = if lease.admit_until(now) > now {
            local_limit.max(lease.held())
        } else {
            0
        };
        FleetStats {
            lease: LeaseStats {
                pool: self.pool.as_str().to_owned(),
                holder: self.holder.clone(),
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

    /// Closes: queued waiters are refused `shutdown` (calls in flight finish), the driver's
    /// next step is [`Step::Closed`] and its parked wait returns. Once the driver has stopped,
    /// send [`release_command`](Self::release_command)'s release. Idempotent.
    pub fn close(&self) {
        if self.closing.swap(true, AcqRel) {
            return;
        }
        self.bulkhead.close();
        self.bell_waker.wake_by_ref();
    }

    /// After [`close`](Self::close) and once the driver has stopped: the release of the lease
    /// to send (fenced: a lease that expired meanwhile frees nothing), once; then hand its
    /// reply to [`released`](Self::released).
    pub fn release_command(&self) -> Option<Command> {
        let mut lease = self.lock();
        let release = lease.close(self.bulkhead.snapshot().active);
        self.apply(&lease, self.now());
        release.map(|r| self.command(&r))
    }

    /// The reply to [`release_command`](Self::release_command)'s command (a fenced release is
    /// counted in `releases_fenced_total`; a last sync's reply needs nothing).
    pub fn released(&self, reply: &RawReply) {
        if let RawReply::Int(n) = reply {
            self.lock()
                .released(protocol::decode_release(*n).ok().flatten());
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closing.load(Acquire)
    }
}

/// Decodes a reply for the request it answers.
fn decode(request: &Request, reply: &RawReply) -> Result<Reply, TransportError> {
    Ok(match (request, reply) {
        (Request::Sync(_), RawReply::Ints(v)) => Reply::Sync(SyncReply::decode(v)?),
        (Request::Replicate { .. }, RawReply::Int(n)) => {
            Reply::Replicated(u64::try_from(*n).unwrap_or(0))
        }
        (Request::Release { .. }, RawReply::Int(n)) => {
            Reply::Release(protocol::decode_release(*n)?)
        }
        (Request::SetLimit { .. }, RawReply::Ints(v)) => Reply::SetLimit(SetLimitReply::decode(v)?),
        (r, other) => {
            return Err(TransportError::protocol(format!(
                "{other:?} does not answer {r:?}"
            )));
        }
    })
}
